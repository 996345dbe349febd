//! PBKDF2 with HMAC (RFC 8018), as `hashlib.pbkdf2_hmac` computes it, over the hashes whose
//! `hashlib` names OpenSSL knows: MD5, SHA-1, the SHA-2 family and SHA-3 (its sponge has no
//! block-level core, hence `SimpleHmac`). HMAC and the hashes are RustCrypto's; the iterations are looped here so that a [`Meter`] can stop them.

use hmac::{Hmac, KeyInit, Mac, SimpleHmac, digest::OutputSizeUser};

use super::{MAX_OUTPUT, Meter, PasswordError, check, invalid};

/// Iterations between two questions to the meter (about 1 ms with SHA-256).
const ITERATIONS_PER_CHECK: u32 = 4096;

/// A hash `pbkdf2_hmac` can use, by the names `hashlib` and OpenSSL give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digest {
    Md5,
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
    Sha512_224,
    Sha512_256,
    Sha3_224,
    Sha3_256,
    Sha3_384,
    Sha3_512,
}

impl Digest {
    /// The hash named `name`, as `hashlib` (`sha256`, `sha3_256`, `sha512_224`) or OpenSSL
    /// (`SHA256`, `SHA2-256`, `SHA-256`, `SHA3-256`, `SHA512-224`) write it, in any case.
    pub fn by_name(name: &str) -> Option<Digest> {
        let name = name.to_ascii_lowercase().replace('_', "-");
        Some(match name.as_str() {
            "md5" => Digest::Md5,
            "sha1" | "sha-1" => Digest::Sha1,
            "sha224" | "sha-224" | "sha2-224" => Digest::Sha224,
            "sha256" | "sha-256" | "sha2-256" => Digest::Sha256,
            "sha384" | "sha-384" | "sha2-384" => Digest::Sha384,
            "sha512" | "sha-512" | "sha2-512" => Digest::Sha512,
            "sha512-224" | "sha-512/224" | "sha2-512/224" => Digest::Sha512_224,
            "sha512-256" | "sha-512/256" | "sha2-512/256" => Digest::Sha512_256,
            "sha3-224" => Digest::Sha3_224,
            "sha3-256" => Digest::Sha3_256,
            "sha3-384" => Digest::Sha3_384,
            "sha3-512" => Digest::Sha3_512,
            _ => return None,
        })
    }

    /// The digest's size in bytes: `pbkdf2_hmac`'s key length when none is given.
    pub fn size(self) -> usize {
        match self {
            Digest::Md5 => 16,
            Digest::Sha1 => 20,
            Digest::Sha224 | Digest::Sha512_224 | Digest::Sha3_224 => 28,
            Digest::Sha256 | Digest::Sha512_256 | Digest::Sha3_256 => 32,
            Digest::Sha384 | Digest::Sha3_384 => 48,
            Digest::Sha512 | Digest::Sha3_512 => 64,
        }
    }
}

/// `hashlib.pbkdf2_hmac(name, password, salt, iterations, length)`. `iterations` at least 1,
/// `length` 1 to [`MAX_OUTPUT`] bytes; an unknown `name` is `unsupported hash type NAME`.
pub fn pbkdf2_hmac(
    name: &str,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
    length: u32,
    meter: &mut dyn Meter,
) -> Result<Vec<u8>, PasswordError> {
    let Some(digest) = Digest::by_name(name) else {
        return invalid(format!("unsupported hash type {name}"));
    };
    if iterations == 0 {
        return invalid("iteration value must be greater than 0.");
    }
    if length == 0 {
        return invalid("key length must be greater than 0.");
    }
    if length as usize > MAX_OUTPUT {
        return invalid(format!(
            "key length is too great for the sandbox: at most {MAX_OUTPUT} bytes"
        ));
    }
    let mut out = vec![0u8; length as usize];
    let run = match digest {
        Digest::Md5 => derive::<Hmac<md5::Md5>>,
        Digest::Sha1 => derive::<Hmac<sha1::Sha1>>,
        Digest::Sha224 => derive::<Hmac<sha2_11::Sha224>>,
        Digest::Sha256 => derive::<Hmac<sha2_11::Sha256>>,
        Digest::Sha384 => derive::<Hmac<sha2_11::Sha384>>,
        Digest::Sha512 => derive::<Hmac<sha2_11::Sha512>>,
        Digest::Sha512_224 => derive::<Hmac<sha2_11::Sha512_224>>,
        Digest::Sha512_256 => derive::<Hmac<sha2_11::Sha512_256>>,
        Digest::Sha3_224 => derive::<SimpleHmac<sha3::Sha3_224>>,
        Digest::Sha3_256 => derive::<SimpleHmac<sha3::Sha3_256>>,
        Digest::Sha3_384 => derive::<SimpleHmac<sha3::Sha3_384>>,
        Digest::Sha3_512 => derive::<SimpleHmac<sha3::Sha3_512>>,
    };
    run(password, salt, iterations, &mut out, meter)?;
    Ok(out)
}

/// PBKDF2 with the PRF `M` keyed by `password`, into `out`.
pub(super) fn derive<M: Mac + KeyInit + Clone>(
    password: &[u8],
    salt: &[u8],
    iterations: u32,
    out: &mut [u8],
    meter: &mut dyn Meter,
) -> Result<(), PasswordError> {
    let Ok(prf) = <M as KeyInit>::new_from_slice(password) else {
        return invalid("the password cannot key this HMAC");
    };
    let size = <M as OutputSizeUser>::output_size();
    for (index, block) in out.chunks_mut(size).enumerate() {
        // Each block hashes the whole salt once (scrypt's salt is megabytes).
        check(meter)?;
        let mut first = prf.clone();
        Mac::update(&mut first, salt);
        Mac::update(&mut first, &(index as u32 + 1).to_be_bytes());
        let mut u = first.finalize().into_bytes();
        let mut t = u.clone();
        for i in 1..iterations {
            if i % ITERATIONS_PER_CHECK == 0 {
                check(meter)?;
            }
            let mut next = prf.clone();
            Mac::update(&mut next, &u);
            u = next.finalize().into_bytes();
            for (t, u) in t.iter_mut().zip(u.iter()) {
                *t ^= u;
            }
        }
        block.copy_from_slice(&t[..block.len()]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passwords::unmetered;

    fn hex_of(name: &str, password: &[u8], salt: &[u8], iterations: u32, length: u32) -> String {
        hex::encode(
            pbkdf2_hmac(name, password, salt, iterations, length, &mut unmetered()).unwrap(),
        )
    }

    #[test]
    fn rfc_6070_and_7914_vectors() {
        assert_eq!(
            hex_of("sha1", b"password", b"salt", 4096, 20),
            "4b007901b765489abead49d926f721d065a429c1"
        );
        assert_eq!(
            hex_of(
                "SHA1",
                b"passwordPASSWORDpassword",
                b"saltSALTsaltSALTsaltSALTsaltSALTsalt",
                4096,
                25
            ),
            "3d2eec4fe41c849b80c8d83662c0e44a8b291a964cf2f07038"
        );
        assert_eq!(
            hex_of("sha256", b"passwd", b"salt", 1, 64),
            "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc\
             49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783"
        );
    }

    #[test]
    fn bad_parameters() {
        let mut m = unmetered();
        assert_eq!(
            pbkdf2_hmac("whirlpool", b"p", b"s", 1, 1, &mut m),
            Err(PasswordError::Invalid(
                "unsupported hash type whirlpool".into()
            ))
        );
        assert!(pbkdf2_hmac("sha256", b"p", b"s", 0, 32, &mut m).is_err());
        assert!(pbkdf2_hmac("sha256", b"p", b"s", 1, 0, &mut m).is_err());
        assert!(pbkdf2_hmac("sha256", b"p", b"s", 1, (MAX_OUTPUT + 1) as u32, &mut m).is_err());
        assert_eq!(Digest::by_name("SHA2-512/256"), Some(Digest::Sha512_256));
        assert_eq!(Digest::by_name("sha3_384"), Some(Digest::Sha3_384));
    }

    #[test]
    fn a_meter_stops_many_iterations() {
        let mut meter = || false;
        assert_eq!(
            pbkdf2_hmac("sha256", b"p", b"s", u32::MAX, 32, &mut meter),
            Err(PasswordError::Stopped)
        );
    }
}
