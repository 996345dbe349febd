//! The build cache: what `filerouter build` writes and `filerouter run` serves from.
//!
//! `.cache/` holds two files: `bundle.bin`, a sealed container ([`seal`]) with the manifest,
//! the route metadata and settings and the baked snapshot's memory image (each compressed with
//! zstd; the code is the same for every project, compiled once per machine: `sandbox::engine`), and, when the project has plugins, a `plugins` section
//! (`crate::plugins::sealed`); and `manifest.json`, a readable copy of the manifest for
//! `filerouter status`. Writing is atomic (a temporary file renamed over the old one), so a
//! failed build never damages an earlier good cache.
//!
//! This module stores and checks bytes; making them (scan, bake, compile) is `cli::build`'s.

pub mod seal;

use std::{
    fs,
    io::{Read, Write},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use crate::{
    config::Settings,
    regular_file::{self, FileError},
    routes::Pattern,
    sandbox::HandlerInfo,
};

pub use seal::{CacheKey, SealError};

const BUNDLE: &str = "bundle.bin";
const MANIFEST: &str = "manifest.json";

/// The largest `bundle.bin` read, and the most one of its sections may decompress to.
pub const MAX_BUNDLE_BYTES: u64 = 2 << 30;
/// The largest `manifest.json` read.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Why a cache could not be written or used. Each is a one-line message.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("no build cache in {0}: run `filerouter build` first")]
    Missing(PathBuf),
    #[error(transparent)]
    Seal(#[from] SealError),
    #[error(
        "the cache was built by filerouter {found} and this is {expected}: run `filerouter build` again"
    )]
    OtherVersion { found: String, expected: String },
    #[error("the cache is missing its {0} section")]
    MissingSection(&'static str),
    #[error("the cache's {section} section is unreadable: {reason}")]
    Section {
        section: &'static str,
        reason: String,
    },
    #[error("{path}: {reason}")]
    Io { path: PathBuf, reason: String },
    #[error(transparent)]
    File(FileError),
}

/// What the build recorded about itself, readable without the key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: u32,
    pub filerouter_version: String,
    /// The built-in guest the snapshot was baked from.
    pub guest_sha256: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub compression_level: i32,
    pub encrypted: bool,
    /// A hash of everything the build read (sources, config.py, options): equal means up to date.
    pub inputs: String,
    pub routes: RouteCounts,
    pub sections: Vec<SectionSize>,
    /// The plugins sealed into the build, by name.
    #[serde(default)]
    pub plugins: Vec<String>,
}

/// Route counts, as `filerouter status` reports them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RouteCounts {
    pub files: usize,
    /// One per path and method.
    pub handlers: usize,
    pub static_routes: usize,
    pub dynamic_routes: usize,
}

/// One section's size before and after compression, and the hash of its bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SectionSize {
    pub name: String,
    pub raw: u64,
    pub compressed: u64,
    /// BLAKE3 of the section's bytes before compression (hexadecimal). For the memory image it
    /// is what its file must hash to before `run` maps it, and the file's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blake3: Option<String>,
}

/// A route as the build found it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CachedRoute {
    /// Relative to `routes/`.
    pub file: String,
    pub pattern: Pattern,
    pub handlers: Vec<HandlerInfo>,
    /// Whether the route file sets `TRAILING_SLASH = True` (its path ends with `/`).
    #[serde(default)]
    pub trailing_slash: bool,
}

/// Everything `run` needs besides the guest: the settings and the routes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metadata {
    pub settings: Settings,
    pub routes: Vec<CachedRoute>,
    /// The root Python files baked into the guest (`middleware.py`, `docs.py`, `not-found.py`).
    #[serde(default)]
    pub root_files: Vec<String>,
    /// The project's `migrations/*.sql` at build time, which `run` checks its database against.
    #[serde(default)]
    pub migrations: Vec<crate::db::migrations::Migration>,
    /// The heads of the project's Alembic history at build time (`None`: it keeps none), which
    /// `run` checks its database's `alembic_version` against.
    #[serde(default)]
    pub alembic_heads: Option<Vec<String>>,
}

/// The contents of a cache.
pub struct Contents {
    pub metadata: Metadata,
    /// The baked snapshot's linear memory (`sandbox::image`).
    pub image: Vec<u8>,
    /// The `plugins` section (`crate::plugins::sealed`); empty when the project has none.
    pub plugins: Vec<u8>,
}

/// A cache read back: the manifest and the metadata; the memory image is kept compressed, where
/// it lies in the container's bytes, until asked for (once, when its file in the cache folder is
/// missing or refused).
pub struct Opened {
    /// The build's identity: the BLAKE3 checksum that ends its `bundle.bin` (over every byte
    /// before it), hexadecimal (what a trace records and `filerouter replay` checks,
    /// `crate::replay`).
    pub bundle_blake3: String,
    pub manifest: Manifest,
    pub metadata: Metadata,
    sections: seal::Sections,
    /// The `plugins` section, decompressed (empty when the build has no plugins).
    pub plugins: Vec<u8>,
}

impl Opened {
    /// The memory image, decompressed.
    pub fn image(&self) -> Result<Vec<u8>, CacheError> {
        let packed = self
            .sections
            .get("image")
            .ok_or(CacheError::MissingSection("image"))?;
        unpack("image", packed)
    }

    /// The BLAKE3 hash of the memory image (decompressed), as the verified manifest records
    /// it: what the file `run` maps must hash to.
    pub fn image_hash(&self) -> Result<blake3::Hash, CacheError> {
        let recorded = self
            .manifest
            .sections
            .iter()
            .find(|s| s.name == "image")
            .and_then(|s| s.blake3.as_deref());
        match recorded {
            Some(hex) => blake3::Hash::from_hex(hex).map_err(|e| CacheError::Section {
                section: "manifest",
                reason: format!("the memory image's hash: {e}"),
            }),
            None => Ok(blake3::hash(&self.image()?)),
        }
    }
}

/// Compress and seal `contents` into `dir`, replacing any earlier cache only once the new one
/// is completely written. Returns the manifest written.
pub fn write(
    dir: &Path,
    contents: &Contents,
    mut manifest: Manifest,
    level: i32,
    key: Option<&CacheKey>,
) -> Result<Manifest, CacheError> {
    let metadata = serde_json::to_vec(&contents.metadata).map_err(|e| CacheError::Section {
        section: "metadata",
        reason: e.to_string(),
    })?;
    let mut parts: Vec<(&'static str, &[u8])> =
        vec![("metadata", &metadata), ("image", &contents.image)];
    if !contents.plugins.is_empty() {
        parts.push(("plugins", &contents.plugins));
    }
    let mut compressed = Vec::new();
    manifest.sections.clear();
    for (name, raw) in parts {
        let packed = zstd::encode_all(raw, level).map_err(|e| CacheError::Section {
            section: name,
            reason: e.to_string(),
        })?;
        manifest.sections.push(SectionSize {
            name: name.to_string(),
            raw: raw.len() as u64,
            compressed: packed.len() as u64,
            blake3: Some(blake3::hash(raw).to_hex().to_string()),
        });
        compressed.push((name, packed));
    }
    manifest.compression_level = level;
    manifest.encrypted = key.is_some();
    let manifest_json = serde_json::to_vec_pretty(&manifest).map_err(|e| CacheError::Section {
        section: "manifest",
        reason: e.to_string(),
    })?;
    let mut sections: Vec<(&str, &[u8])> = vec![("manifest", &manifest_json)];
    sections.extend(compressed.iter().map(|(n, b)| (*n, b.as_slice())));
    let bundle = seal::seal(&sections, key)?;

    let io = |path: &Path, e: std::io::Error| CacheError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    replace(&dir.join(BUNDLE), &bundle).map_err(|e| io(&dir.join(BUNDLE), e))?;
    replace(&dir.join(MANIFEST), &manifest_json).map_err(|e| io(&dir.join(MANIFEST), e))?;
    Ok(manifest)
}

fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

/// The file of the cache in `dir` that every build replaces (by renaming a new one over it).
pub fn bundle_path(dir: &Path) -> PathBuf {
    dir.join(BUNDLE)
}

/// Read, verify and decrypt the cache in `dir`. Only a regular file of at most
/// [`MAX_BUNDLE_BYTES`] is read (a FIFO or a device is refused, without blocking). Blocking:
/// call it off the async threads.
pub fn open(dir: &Path, key: Option<&CacheKey>) -> Result<Opened, CacheError> {
    let bytes = match regular_file::read(&dir.join(BUNDLE), MAX_BUNDLE_BYTES) {
        Ok(bytes) => bytes,
        Err(FileError::NotFound(_)) => return Err(CacheError::Missing(dir.to_path_buf())),
        Err(e) => return Err(CacheError::File(e)),
    };
    decode(bytes, key)
}

/// Verify, decrypt and unpack the bytes of a `bundle.bin` (the image stays compressed, in
/// those bytes).
pub fn decode(bytes: Vec<u8>, key: Option<&CacheKey>) -> Result<Opened, CacheError> {
    let sections = seal::open(bytes, key)?;
    let bundle_blake3 = blake3::Hash::from_bytes(*sections.checksum())
        .to_hex()
        .to_string();
    let section = |name: &'static str| sections.get(name).ok_or(CacheError::MissingSection(name));
    let manifest: Manifest =
        serde_json::from_slice(section("manifest")?).map_err(|e| CacheError::Section {
            section: "manifest",
            reason: e.to_string(),
        })?;
    let expected = env!("CARGO_PKG_VERSION");
    if manifest.filerouter_version != expected
        || manifest.guest_sha256 != crate::sandbox::GUEST_SHA256
    {
        return Err(CacheError::OtherVersion {
            found: format!(
                "{} (guest {})",
                manifest.filerouter_version,
                manifest.guest_sha256.get(..12).unwrap_or("?")
            ),
            expected: format!("{expected} (guest {})", &crate::sandbox::GUEST_SHA256[..12]),
        });
    }
    let metadata = unpack("metadata", section("metadata")?)?;
    let metadata: Metadata =
        serde_json::from_slice(&metadata).map_err(|e| CacheError::Section {
            section: "metadata",
            reason: e.to_string(),
        })?;
    section("image")?;
    let plugins = match section("plugins") {
        Ok(bytes) => unpack("plugins", bytes)?,
        Err(_) => Vec::new(),
    };
    Ok(Opened {
        bundle_blake3,
        manifest,
        metadata,
        sections,
        plugins,
    })
}

/// Decompress one section, refusing to grow past [`MAX_BUNDLE_BYTES`] (a forged plain cache
/// may hold a decompression bomb).
fn unpack(section: &'static str, bytes: &[u8]) -> Result<Vec<u8>, CacheError> {
    let failed = |reason: String| CacheError::Section { section, reason };
    let decoder = zstd::stream::read::Decoder::new(bytes).map_err(|e| failed(e.to_string()))?;
    let mut out = Vec::new();
    decoder
        .take(MAX_BUNDLE_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| failed(e.to_string()))?;
    if out.len() as u64 > MAX_BUNDLE_BYTES {
        return Err(failed(format!(
            "it decompresses to more than {MAX_BUNDLE_BYTES} bytes"
        )));
    }
    Ok(out)
}

/// The manifest of the cache in `dir`, if there is one (not verified: for `status`).
pub fn manifest(dir: &Path) -> Option<Manifest> {
    let text = regular_file::read(&dir.join(MANIFEST), MAX_MANIFEST_BYTES).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Whether `bundle.bin` in `dir` is encrypted, from its own header (not the manifest, which is
/// a plain copy anyone can edit): `None` if there is no readable bundle.
pub fn bundle_encrypted(dir: &Path) -> Option<bool> {
    let (file, _) = regular_file::open(&dir.join(BUNDLE), MAX_BUNDLE_BYTES).ok()?;
    let mut header = Vec::new();
    file.take(seal::HEADER_LEN as u64)
        .read_to_end(&mut header)
        .ok()?;
    seal::is_encrypted(&header)
}

/// The total size of the cache files in `dir`.
pub fn size(dir: &Path) -> u64 {
    [BUNDLE, MANIFEST]
        .iter()
        .filter_map(|f| fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// Remove the cache files from `dir` (and `dir` if that leaves it empty). Returns the bytes freed.
pub fn remove(dir: &Path) -> Result<u64, CacheError> {
    let freed = size(dir);
    for name in [BUNDLE, MANIFEST, "bundle.tmp", "manifest.tmp"] {
        let path = dir.join(name);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(CacheError::Io {
                    path,
                    reason: e.to_string(),
                });
            }
        }
    }
    let _ = fs::remove_dir(dir);
    Ok(freed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents() -> Contents {
        Contents {
            metadata: Metadata {
                settings: Settings::default(),
                routes: Vec::new(),
                root_files: Vec::new(),
                migrations: Vec::new(),
                alembic_heads: None,
            },
            image: b"image bytes".repeat(100),
            plugins: Vec::new(),
        }
    }

    fn manifest(version: &str) -> Manifest {
        Manifest {
            format: seal::FORMAT,
            filerouter_version: version.to_string(),
            guest_sha256: crate::sandbox::GUEST_SHA256.to_string(),
            created_at: "2026-01-01T00:00:00Z".into(),
            compression_level: 0,
            encrypted: false,
            inputs: String::new(),
            routes: RouteCounts::default(),
            sections: Vec::new(),
            plugins: Vec::new(),
        }
    }

    #[test]
    fn round_trip_records_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let written = write(
            dir.path(),
            &contents(),
            manifest(env!("CARGO_PKG_VERSION")),
            3,
            None,
        )
        .unwrap();
        assert_eq!(written.compression_level, 3);
        assert!(written.sections.iter().all(|s| s.compressed < s.raw));
        let opened = open(dir.path(), None).unwrap();
        assert_eq!(opened.image().unwrap(), contents().image);
        assert_eq!(
            opened.image_hash().unwrap(),
            blake3::hash(&contents().image)
        );
        assert_eq!(super::manifest(dir.path()), Some(written));
        assert!(remove(dir.path()).unwrap() > 0);
        assert!(matches!(
            open(dir.path(), None),
            Err(CacheError::Missing(_))
        ));
    }

    #[test]
    fn the_image_hash_of_a_cache_that_records_none_is_computed() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &contents(),
            manifest(env!("CARGO_PKG_VERSION")),
            1,
            None,
        )
        .unwrap();
        let mut opened = open(dir.path(), None).unwrap();
        for section in &mut opened.manifest.sections {
            section.blake3 = None;
        }
        assert_eq!(
            opened.image_hash().unwrap(),
            blake3::hash(&contents().image)
        );
    }

    #[test]
    fn a_cache_of_another_filerouter_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &contents(), manifest("0.0.1"), 1, None).unwrap();
        let error = open(dir.path(), None).err().unwrap();
        assert!(matches!(error, CacheError::OtherVersion { .. }), "{error}");
        assert!(error.to_string().contains("filerouter 0.0.1"), "{error}");
    }
}
