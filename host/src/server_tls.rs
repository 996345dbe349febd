//! TLS to the operator's data servers (Postgres, Redis): the rustls client settings for each of
//! libpq's checks of the server's certificate, and the operator's CA file.
//!
//! - [`Check::Encrypt`]: encrypt, accept any certificate (libpq's `sslmode=require`, and
//!   `prefer`): protects against listening, not against a server in the middle.
//! - [`Check::Chain`]: the certificate must chain to a trusted root, whatever name it is for
//!   (`verify-ca`).
//! - [`Check::Full`]: the chain, and the certificate must be for the host name (or IP address)
//!   connected to (`verify-full`).
//!
//! The trusted roots are the operator's CA file when one is named (and only those, as libpq's
//! `sslrootcert`), else the system's (`rustls-native-certs`) and Mozilla's (`webpki-roots`), as
//! outbound HTTPS has them. rustls with *ring*, as everywhere in the host. Not for: which
//! connections use TLS or how a URL names these settings (that is each backend's:
//! `crate::db::postgres::tls`, `crate::kv::redis`), nor outbound HTTPS (`crate::outbound`).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rustls::{
    DigitallySignedStruct, SignatureScheme,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::CryptoProvider,
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
};

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// None of it: encryption only.
    Encrypt,
    /// The chain to a trusted root, not the name.
    Chain,
    /// The chain and the name.
    Full,
}

/// Why the TLS settings could not be made: each names the file and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("the CA file {path}: {reason}")]
    CaFile { path: PathBuf, reason: String },
    #[error("the CA file {0}: no PEM certificate in it")]
    NoCertificate(PathBuf),
    #[error("no trusted root certificates: name a CA file")]
    NoRoots,
    #[error("TLS settings: {0}")]
    Settings(String),
}

/// The certificates of a PEM CA file (one or more `BEGIN CERTIFICATE` blocks).
pub fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |reason: String| TlsError::CaFile {
        path: path.to_path_buf(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| failed(pem_reason(&e)))?
        .collect::<Result<_, _>>()
        .map_err(|e| failed(pem_reason(&e)))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_path_buf()));
    }
    Ok(certs)
}

fn pem_reason(e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        other => format!("not a PEM file ({other:?})"),
    }
}

/// The provider every client setting here uses: *ring*, as the rest of the host.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Make *ring* the process's default rustls provider, for libraries that build their own
/// settings with it (the `redis` crate); harmless when it is already.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The trusted roots: the CA file's certificates, else the system's and Mozilla's.
pub fn roots(ca_file: Option<&Path>) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in read_ca_file(path)? {
                roots.add(cert).map_err(|e| TlsError::CaFile {
                    path: path.to_path_buf(),
                    reason: format!("not a usable CA certificate: {e}"),
                })?;
            }
        }
        None => {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    if roots.is_empty() {
        return Err(TlsError::NoRoots);
    }
    Ok(roots)
}

/// Client settings that check the server's certificate as `check` says, against the CA file's
/// roots (or the system's).
pub fn client_config(
    check: Check,
    ca_file: Option<&Path>,
) -> Result<rustls::ClientConfig, TlsError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Settings(e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Encrypt => Arc::new(AnyCertificate { provider }),
        Check::Chain | Check::Full => {
            let full = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(ca_file)?),
                provider,
            )
            .build()
            .map_err(|e| TlsError::Settings(e.to_string()))?;
            if check == Check::Full {
                full
            } else {
                Arc::new(ChainOnly { full })
            }
        }
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// Accepts any certificate, but still checks that the server holds its key (the handshake's
/// signatures): `sslmode=require`.
#[derive(Debug)]
struct AnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The full check less the name: `sslmode=verify-ca`. The chain is checked first, so a name
/// error means the chain was good.
#[derive(Debug)]
struct ChainOnly {
    full: Arc<rustls::client::WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self.full.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.full.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.full.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.full.supported_verify_schemes()
    }
}

/// A TLS failure in words an operator can act on: the error chain's text with a hint for a
/// certificate that was refused.
pub fn explain(message: &str, ca_file: Option<&Path>) -> String {
    let roots = match ca_file {
        Some(path) => format!("the CA file {}", path.display()),
        None => "the system's trusted roots (name a CA file for a private CA)".to_string(),
    };
    let hint = if message.contains("UnknownIssuer") || message.contains("BadSignature") {
        Some(format!(
            "the server's certificate is not signed by a CA in {roots}"
        ))
    } else if message.contains("NotValidForName") || message.contains("not valid for name") {
        Some(
            "the server's certificate is not for the host name connected to (connect by the name it is for, or check the chain only: sslmode=verify-ca)".to_string(),
        )
    } else if ["Expired", "expired", "NotValidYet", "not valid yet"]
        .iter()
        .any(|word| message.contains(word))
    {
        Some("the server's certificate is outside its validity dates".to_string())
    } else {
        None
    };
    match hint {
        Some(hint) => format!("{message} ({hint})"),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_that_is_missing_or_not_pem_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = client_config(Check::Full, Some(&missing)).unwrap_err();
        assert!(
            matches!(&e, TlsError::CaFile { path, .. } if path == &missing),
            "{e}"
        );
        let text = dir.path().join("text.pem");
        std::fs::write(&text, "hello\n").unwrap();
        let e = client_config(Check::Chain, Some(&text)).unwrap_err();
        assert_eq!(e, TlsError::NoCertificate(text.clone()));
        assert!(e.to_string().contains("text.pem"), "{e}");
    }

    #[test]
    fn without_a_ca_file_the_system_roots_serve() {
        assert!(client_config(Check::Full, None).is_ok());
        assert!(client_config(Check::Encrypt, None).is_ok());
    }

    #[test]
    fn refused_certificates_get_a_hint() {
        let text = explain(
            "invalid peer certificate: UnknownIssuer",
            Some(Path::new("/etc/ca.pem")),
        );
        assert!(
            text.contains("not signed by a CA in the CA file /etc/ca.pem"),
            "{text}"
        );
        assert!(explain("invalid peer certificate: NotValidForName", None).contains("verify-ca"));
        // rustls's own words for it (0.23).
        assert!(
            explain(
                "invalid peer certificate: certificate not valid for name \"127.0.0.1\"; certificate is only valid for DnsName(\"localhost\")",
                None
            )
            .contains("not for the host name")
        );
        assert_eq!(explain("connection refused", None), "connection refused");
    }
}
