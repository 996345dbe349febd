//! Compiled code (`*.cwasm`) and memory images (`images/*.img`) on disk, checked before they
//! are mapped, on every load.
//!
//! wasmtime runs the machine code of a compiled file as it finds it: its only check is a header
//! naming the engine's settings, which every file compiled by this filerouter on this machine
//! passes. A memory image is a project's whole snapshot: one build's image copied over
//! another's name would serve the first project's modules (and its secrets) as the second; a
//! file cut short or damaged would be run too. So every compiled file and image the process maps
//! is opened here first, its bytes hashed with BLAKE3 and compared with a hash from something
//! the writer of the cache folder cannot also rewrite:
//!
//! - a build's memory image (`images/<hash>.img`, what `run` maps): the hash that the verified
//!   build cache records for its image section ([`OpenedCode::expect`]);
//! - the built-in guest and plugins compiled on this machine (`guest-*.cwasm`,
//!   `plugin-*.cwasm`, what `dev`, `build` and project commands map): their name ends in a MAC
//!   (keyed BLAKE3) of their bytes under this user's [`CodeKey`], a secret kept outside the
//!   cache folder ([`OpenedCode::expect_named`], [`load_named`]).
//!
//! (Plugins in `run` are never files: they come from the verified build cache, in memory.)
//!
//! Also refused: anything but a regular file (a symbolic link, a FIFO, a device), a file larger
//! than [`MAX_CODE_BYTES`], and a file that a user other than the process's own (or root) may
//! change in place: owned by another user, or writable by its group or by anyone. A refused file
//! is logged with its path and the reason, removed ([`discard`]) and written again by the caller
//! from its verified source (the build cache, the guest inside the binary, the plugin).
//!
//! **Time of check and time of use.** The bytes hashed must be the bytes mapped. Reading the
//! file into memory and deserializing from there would guarantee it, but wasmtime then copies
//! the code into anonymous memory and makes every memory image (a tenant's snapshot, about
//! 20 MiB) a copy of its own too, where a component mapped from a file has its images mapped
//! copy-on-write from that file: page cache the kernel shares and drops, the reason `run` maps
//! files at all. So a file is opened once, checked with `fstat` and hashed through that
//! descriptor, and then mapped through the same descriptor: wasmtime opens
//! `/proc/self/fd/<n>`, which is the very inode that was hashed, whatever has been renamed over
//! the name meanwhile. Only a change made *in place* could still differ from what was hashed,
//! and that needs write permission on that inode, which the checks above leave to the process's
//! own user and root, who could as well change the process's memory. Measured on a 2-core VM
//! (the 43 MB compiled guest, page cache warm, `tests::cost`): opening and hashing through the
//! descriptor 13 to 19 ms (BLAKE3, one thread, about 3 GB/s), then mapping 2.5 to 3 ms as
//! before; reading the file into memory, hashing and deserializing from there 65 to 150 ms.
//! Where `/proc/self/fd` does not reach the same file (no `/proc`), the bytes are read into
//! memory, hashed and deserialized from there instead.

use std::{
    fs::{self, File, OpenOptions},
    io::Read,
    os::{
        fd::AsRawFd,
        unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt},
    },
    path::{Path, PathBuf},
    sync::OnceLock,
    time::Instant,
};

use wasmtime::{Engine, component::Component};

use super::artifacts;
use crate::regular_file::irregular_kind;

/// The largest compiled file read.
pub const MAX_CODE_BYTES: u64 = 2 << 30;

/// How many hexadecimal digits of the MAC a compiled file's name carries (128 bits).
const NAME_MAC_HEX: usize = 32;

/// Why a compiled file was not mapped. Each is the end of a sentence that starts with the file.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("there is no such file")]
    Missing,
    #[error("it is a symbolic link (compiled code is read from regular files only)")]
    Link,
    #[error("it is not a regular file (a {0})")]
    NotRegular(&'static str),
    #[error("it is {0} bytes, more than the {MAX_CODE_BYTES} allowed")]
    TooLarge(u64),
    #[error("it belongs to user {owner}, not to user {me} that runs filerouter (or root)")]
    OtherOwner { owner: u32, me: u32 },
    #[error("other users may change it (mode {mode:o}: writable by its group or by anyone)")]
    Writable { mode: u32 },
    #[error("it cannot be read: {0}")]
    Io(std::io::Error),
    #[error(
        "its bytes are not the expected ones (BLAKE3 {found}..., the build cache says {expected}...): substituted or damaged"
    )]
    Mismatch { found: String, expected: String },
    #[error(
        "its bytes (BLAKE3 {found}...) do not match the checksum in its name: substituted, damaged, or written by another user's filerouter"
    )]
    NameMismatch { found: String },
}

/// A compiled file opened, checked (kind, size, owner, mode) and hashed, not yet compared with
/// what it should be: [`OpenedCode::expect`] or [`OpenedCode::expect_named`] does that.
pub struct OpenedCode {
    path: PathBuf,
    /// Kept open: the file is mapped through this descriptor.
    file: File,
    hash: blake3::Hash,
    /// The bytes hashed, when they could not be mapped through `file` (no `/proc`).
    bytes: Option<Vec<u8>>,
}

/// A compiled file whose bytes hash to what they should: the only way to a [`Component`] here.
pub struct VerifiedCode(OpenedCode);

/// Open the compiled file at `path`, check that it is a regular file that only this process's
/// user (or root) may change, and hash its bytes. Blocking.
pub fn open(path: &Path) -> Result<OpenedCode, Refusal> {
    let started = Instant::now();
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Refusal::Missing),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(Refusal::Link),
        Err(e) => return Err(Refusal::Io(e)),
    };
    let meta = file.metadata().map_err(Refusal::Io)?;
    if let Some(kind) = irregular_kind(&meta.file_type()) {
        return Err(Refusal::NotRegular(kind));
    }
    if meta.len() > MAX_CODE_BYTES {
        return Err(Refusal::TooLarge(meta.len()));
    }
    let me = effective_uid();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(Refusal::OtherOwner {
            owner: meta.uid(),
            me,
        });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Refusal::Writable {
            mode: meta.mode() & 0o7777,
        });
    }
    let limited = || (&file).take(MAX_CODE_BYTES + 1);
    let (hash, bytes) = if reaches_same_file(&file, &meta) {
        let mut hasher = blake3::Hasher::new();
        hasher.update_reader(limited()).map_err(Refusal::Io)?;
        (hasher.finalize(), None)
    } else {
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        limited().read_to_end(&mut bytes).map_err(Refusal::Io)?;
        (blake3::hash(&bytes), Some(bytes))
    };
    tracing::debug!(
        "hashed {} ({} bytes) in {:?}",
        path.display(),
        meta.len(),
        started.elapsed()
    );
    Ok(OpenedCode {
        path: path.to_path_buf(),
        file,
        hash,
        bytes,
    })
}

impl OpenedCode {
    /// The BLAKE3 hash of the file's bytes.
    #[cfg(test)]
    pub fn hash(&self) -> &blake3::Hash {
        &self.hash
    }

    /// The file, if its bytes hash to `expected` (from a verified build cache).
    pub fn expect(self, expected: &blake3::Hash) -> Result<VerifiedCode, Refusal> {
        if self.hash == *expected {
            Ok(VerifiedCode(self))
        } else {
            Err(Refusal::Mismatch {
                found: short(&self.hash),
                expected: short(expected),
            })
        }
    }

    /// The file, checked for kind, size, owner and mode but not for its bytes: for a file
    /// whose bytes carry their own check (a memory image layer's MAC, `layer`).
    pub fn into_unverified_file(self) -> File {
        self.file
    }

    /// The file, if its name is the one `key` gives its bytes under `stem` (see
    /// [`CodeKey::file_name`]): written by this user's filerouter and unchanged since.
    pub fn expect_named(self, key: &CodeKey, stem: &str) -> Result<VerifiedCode, Refusal> {
        let wanted = key.file_name(stem, &self.hash);
        if self.path.file_name().is_some_and(|name| *name == *wanted) {
            Ok(VerifiedCode(self))
        } else {
            Err(Refusal::NameMismatch {
                found: short(&self.hash),
            })
        }
    }
}

impl VerifiedCode {
    /// The checked file, for mapping through the descriptor that was hashed (`image`: memory
    /// images are mapped by filerouter itself, not by wasmtime).
    pub fn into_file(self) -> File {
        self.0.file
    }

    /// The component in the checked bytes, for `engine`: mapped through the descriptor that
    /// was hashed (or deserialized from the bytes that were, without `/proc`). wasmtime refuses
    /// code compiled for other settings or another processor.
    pub fn component(&self, engine: &Engine) -> wasmtime::Result<Component> {
        let code = &self.0;
        match &code.bytes {
            // SAFETY: these bytes hash to what a verified build cache or this user's key says
            // `precompile_component` wrote; wasmtime checks their header against `engine`.
            Some(bytes) => unsafe { Component::deserialize(engine, bytes) },
            // SAFETY: as above; `/proc/self/fd/<n>` opens the inode that was hashed (checked in
            // `open`), which only this process's user or root may change in place.
            None => unsafe { Component::deserialize_file(engine, proc_path(&code.file)) },
        }
    }
}

/// Log that the compiled file at `path` was refused and why, and remove it (best effort), so
/// that the caller writes it again from its verified source. A file that could not be read
/// (out of file descriptors or memory, interrupted) is not known to be bad: it stays, and the
/// caller's fresh copy replaces it.
pub fn discard(path: &Path, refusal: &Refusal) {
    let what = if path.extension().is_some_and(|e| e == "img") {
        "memory image"
    } else {
        "compiled code"
    };
    if let Refusal::Io(e) = refusal {
        tracing::warn!(
            "could not read {what} {}: {e}; left in place (a failure of the moment, not a bad file)",
            path.display()
        );
        return;
    }
    tracing::warn!(
        "refusing {what} {}: {refusal}; removing it, it is written again from its source",
        path.display()
    );
    if let Err(e) = fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("could not remove {}: {e}", path.display());
    }
}

/// Why a component could not be had from [`load_named`].
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// Compiling failed (the message of the caller's compiler).
    #[error("{0}")]
    Compile(String),
    /// The code just compiled could not be loaded.
    #[error("load the compiled code: {0}")]
    Load(String),
}

/// The stem of a compiled file's name, `{kind}-{id}-{engine}` (what [`load_named`] looks for):
/// `kind` says what the code is (`guest`, `bake`, `plugin`: the prefix old files of that kind are
/// pruned by), `id` which code it is (a hash of what was compiled), and `engine` a hash of the
/// engine settings compiled code must match (`Engine::precompile_compatibility_hash`), so that
/// code compiled under other settings is never even opened.
pub fn stem(kind: &str, id: &str, engine: &Engine) -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    format!("{kind}-{id}-{:016x}", hasher.finish())
}

/// The component that this user's filerouter compiled into `dir` as
/// `{stem}-{checksum}.cwasm` (see [`CodeKey::file_name`]): the first such file that passes
/// [`open`] and [`OpenedCode::expect_named`], mapped. Every other file of that stem is refused
/// ([`discard`]). When none passes, `compile()` makes the code, which is written under its name
/// (files of the kind `prefix` unused for [`artifacts::UNUSED_AGE`] then go) and loaded from
/// memory. Returns whether it was compiled. Blocking; `compile` may take seconds.
pub fn load_named(
    engine: &Engine,
    dir: &Path,
    stem: &str,
    prefix: &str,
    compile: impl FnOnce() -> Result<Vec<u8>, String>,
) -> Result<(Component, bool), CodeError> {
    let key = CodeKey::get();
    for path in named_candidates(dir, stem) {
        match open(&path).and_then(|code| code.expect_named(key, stem)) {
            Ok(code) => match code.component(engine) {
                Ok(component) => {
                    artifacts::mark_used(&path);
                    return Ok((component, false));
                }
                Err(e) => {
                    tracing::warn!("ignoring unusable compiled code {}: {e:#}", path.display())
                }
            },
            Err(Refusal::Missing) => {}
            Err(refusal) => discard(&path, &refusal),
        }
    }
    let compiled = compile().map_err(CodeError::Compile)?;
    let path = dir.join(key.file_name(stem, &blake3::hash(&compiled)));
    match artifacts::store_atomically(&path, &compiled) {
        Ok(()) => {
            artifacts::prune_unused(dir, prefix, &path, artifacts::UNUSED_AGE, None);
        }
        Err(e) => tracing::warn!(
            "could not keep the compiled code in {}: {e}",
            path.display()
        ),
    }
    // SAFETY: `compiled` was produced just now by the caller's `precompile_component`.
    let component = unsafe { Component::deserialize(engine, &compiled) }
        .map_err(|e| CodeError::Load(format!("{e:#}")))?;
    Ok((component, true))
}

/// The files in `dir` named `{stem}-*.cwasm`, in name order.
fn named_candidates(dir: &Path, stem: &str) -> Vec<PathBuf> {
    let start = format!("{stem}-");
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&start) && name.ends_with(".cwasm")
        })
        .map(|entry| entry.path())
        .collect();
    found.sort();
    found
}

/// This user's secret for the compiled code filerouter writes and reads back: it keys the
/// checksum in the name of every compiled guest and plugin ([`CodeKey::file_name`]) and of every
/// compiled function (`compiled_functions`), so that whoever may write the cache folder but not
/// read this key cannot make a file pass for one this user's filerouter wrote. It is kept
/// outside the cache folder, in `code.key` in the user's data folder
/// (`~/.local/share/filerouter/code.key`), mode 0600, made the first time.
pub struct CodeKey([u8; blake3::KEY_LEN]);

/// Why the key file could not be used (the process then uses a key of its own, see
/// [`CodeKey::get`]).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("no user data folder to keep the key for compiled code in")]
    NoFolder,
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a regular file of {} bytes", .0.display(), blake3::KEY_LEN)]
    Malformed(PathBuf),
    #[error("{}: other users may read or change it (mode {mode:o}, owner {owner}); it must be this user's, mode 0600", path.display())]
    Exposed {
        path: PathBuf,
        mode: u32,
        owner: u32,
    },
}

impl CodeKey {
    /// The process's key: read from (or made in) [`CodeKey::default_path`]; if that fails, a
    /// random key for this process alone, with a warning (compiled code then lasts only as long
    /// as the process: every start compiles the guest again).
    pub fn get() -> &'static CodeKey {
        static KEY: OnceLock<CodeKey> = OnceLock::new();
        KEY.get_or_init(|| {
            let loaded = Self::default_path()
                .ok_or(KeyError::NoFolder)
                .and_then(|path| Self::load_or_create(&path));
            loaded.unwrap_or_else(|e| {
                tracing::warn!(
                    "{e}: using a key for this process only, so compiled code is not reused by later starts"
                );
                Self::random()
            })
        })
    }

    /// Where the key is kept: `filerouter/code.key` in the user's data folder.
    pub fn default_path() -> Option<PathBuf> {
        Some(dirs::data_local_dir()?.join("filerouter").join("code.key"))
    }

    /// The key in `path`, made there (mode 0600, its folder 0700) if there is none. Safe
    /// against another process making it at the same time: both end with the same key.
    pub fn load_or_create(path: &Path) -> Result<CodeKey, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        match Self::read(path) {
            Err(KeyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            read => return read,
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        let key = Self::random();
        let tmp = dir.join(format!(".code.key.{}", std::process::id()));
        let _ = fs::remove_file(&tmp);
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut file| {
                std::io::Write::write_all(&mut file, &key.0)?;
                file.sync_all()
            })
            // A link fails if the key exists: whoever made it first wins, and all read theirs.
            .and_then(|()| fs::hard_link(&tmp, path));
        let _ = fs::remove_file(&tmp);
        match written {
            Ok(()) => Ok(key),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::read(path),
            Err(e) => Err(io(e)),
        }
    }

    /// The key in `path`, if it is a regular file of the key's length that only this user can
    /// read.
    fn read(path: &Path) -> Result<CodeKey, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() || meta.len() != blake3::KEY_LEN as u64 {
            return Err(KeyError::Malformed(path.to_path_buf()));
        }
        if meta.mode() & 0o077 != 0 || meta.uid() != effective_uid() {
            return Err(KeyError::Exposed {
                path: path.to_path_buf(),
                mode: meta.mode() & 0o7777,
                owner: meta.uid(),
            });
        }
        let mut key = [0u8; blake3::KEY_LEN];
        (&file).read_exact(&mut key).map_err(io)?;
        Ok(CodeKey(key))
    }

    /// A fresh random key.
    fn random() -> CodeKey {
        use aes_gcm::{
            Aes256Gcm,
            aead::{KeyInit, OsRng},
        };
        CodeKey(Aes256Gcm::generate_key(&mut OsRng).into())
    }

    /// A key made from `bytes` (for tests).
    #[cfg(test)]
    pub fn from_bytes(bytes: [u8; blake3::KEY_LEN]) -> CodeKey {
        CodeKey(bytes)
    }

    /// The name of a compiled file holding bytes that hash to `hash`:
    /// `{stem}-{first 32 hex digits of a MAC of stem and hash}.cwasm`. The stem is inside the
    /// MAC, so a file renamed to another stem (a plugin's code as the guest) fails too.
    pub fn file_name(&self, stem: &str, hash: &blake3::Hash) -> String {
        let mut mac = blake3::Hasher::new_keyed(&self.derive("compiled file names"));
        mac.update(stem.as_bytes());
        mac.update(&[0]);
        mac.update(hash.as_bytes());
        format!("{stem}-{}.cwasm", &mac.finalize().to_hex()[..NAME_MAC_HEX])
    }

    /// A key for one use (`purpose`) of this key, so that no two uses can be confused.
    pub fn derive(&self, purpose: &str) -> [u8; blake3::KEY_LEN] {
        blake3::derive_key(&format!("filerouter compiled code: {purpose}"), &self.0)
    }
}

/// The path through which the kernel reopens the file behind `file` itself.
fn proc_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Whether opening [`proc_path`] of `file` reaches the file `meta` describes.
fn reaches_same_file(file: &File, meta: &fs::Metadata) -> bool {
    fs::metadata(proc_path(file)).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
}

/// The user the process acts as.
fn effective_uid() -> u32 {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The first 16 hexadecimal digits of `hash`, for messages.
fn short(hash: &blake3::Hash) -> String {
    hash.to_hex()[..16].to_string()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// The smallest component: a header and nothing else.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        Engine::new(&config).unwrap()
    }

    fn compiled(engine: &Engine) -> Vec<u8> {
        engine.precompile_component(EMPTY_COMPONENT).unwrap()
    }

    fn write(path: &Path, bytes: &[u8]) {
        artifacts::store_atomically(path, bytes).unwrap();
    }

    #[test]
    fn the_hash_through_the_descriptor_is_the_hash_of_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.cwasm");
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        write(&path, &bytes);
        let code = open(&path).unwrap();
        assert_eq!(*code.hash(), blake3::hash(&bytes));
        assert!(code.bytes.is_none(), "/proc/self/fd should reach the file");
    }

    #[test]
    fn the_expected_file_maps_and_any_other_is_refused() {
        let engine = engine();
        let code = compiled(&engine);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("native.cwasm");
        write(&path, &code);
        let expected = blake3::hash(&code);
        let verified = open(&path).unwrap().expect(&expected).unwrap();
        verified.component(&engine).unwrap();

        // Other code of the right kind (another build's), cut short, garbage: all refused.
        let mut other = code.clone();
        let last = other.len() - 1;
        other[last] ^= 1;
        for bad in [&other[..], &code[..code.len() / 2], b"garbage"] {
            write(&path, bad);
            let refusal = open(&path).unwrap().expect(&expected).err().unwrap();
            assert!(matches!(refusal, Refusal::Mismatch { .. }), "{refusal}");
            assert!(refusal.to_string().contains("substituted"), "{refusal}");
        }
        assert!(matches!(
            open(&dir.path().join("none.cwasm")),
            Err(Refusal::Missing)
        ));
    }

    #[test]
    fn the_mapped_file_is_the_hashed_one_even_if_another_is_renamed_over_it() {
        let engine = engine();
        let code = compiled(&engine);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("native.cwasm");
        write(&path, &code);
        let verified = open(&path).unwrap().expect(&blake3::hash(&code)).unwrap();
        // Between the check and the mapping, garbage is renamed over the name.
        write(&path, b"garbage, which wasmtime would refuse");
        verified.component(&engine).unwrap();
    }

    #[test]
    fn links_special_files_and_files_others_may_change_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.cwasm");
        write(&target, b"code");
        let link = dir.path().join("link.cwasm");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(open(&link), Err(Refusal::Link)));

        let fifo = dir.path().join("fifo.cwasm");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
        assert!(matches!(open(&fifo), Err(Refusal::NotRegular("FIFO"))));
        assert!(matches!(open(dir.path()), Err(Refusal::NotRegular(_))));

        for mode in [0o664, 0o646] {
            fs::set_permissions(&target, fs::Permissions::from_mode(mode)).unwrap();
            let refusal = open(&target).err().unwrap();
            assert!(matches!(refusal, Refusal::Writable { .. }), "{refusal}");
        }
        fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(open(&target).is_ok());
    }

    #[test]
    fn a_name_carries_a_mac_of_the_bytes_and_the_stem() {
        let key = CodeKey::from_bytes([7; 32]);
        let other_key = CodeKey::from_bytes([8; 32]);
        let dir = tempfile::tempdir().unwrap();
        let hash = blake3::hash(b"code");
        let name = key.file_name("guest-x", &hash);
        assert!(
            name.starts_with("guest-x-") && name.ends_with(".cwasm"),
            "{name}"
        );
        let path = dir.path().join(&name);
        write(&path, b"code");
        assert!(open(&path).unwrap().expect_named(&key, "guest-x").is_ok());
        // Another key, another stem, other bytes under the name: refused.
        assert!(
            open(&path)
                .unwrap()
                .expect_named(&other_key, "guest-x")
                .is_err()
        );
        assert!(open(&path).unwrap().expect_named(&key, "plugin-x").is_err());
        write(&path, b"other code");
        let refusal = open(&path)
            .unwrap()
            .expect_named(&key, "guest-x")
            .err()
            .unwrap();
        assert!(matches!(refusal, Refusal::NameMismatch { .. }), "{refusal}");
    }

    #[test]
    fn load_named_compiles_once_then_maps_and_replaces_a_substituted_file() {
        let engine = engine();
        let dir = tempfile::tempdir().unwrap();
        let compile = || Ok(compiled(&engine));
        let (_, fresh) = load_named(&engine, dir.path(), "guest-t", "guest-", compile).unwrap();
        assert!(fresh);
        let files = named_candidates(dir.path(), "guest-t");
        assert_eq!(files.len(), 1);
        let good = fs::read(&files[0]).unwrap();
        let (_, fresh) = load_named(&engine, dir.path(), "guest-t", "guest-", || {
            Err("must not compile".into())
        })
        .unwrap();
        assert!(!fresh);

        // Other code under the name: refused, removed, compiled and written again.
        let mut other = good.clone();
        let last = other.len() - 1;
        other[last] ^= 1;
        write(&files[0], &other);
        let (_, fresh) = load_named(&engine, dir.path(), "guest-t", "guest-", compile).unwrap();
        assert!(fresh);
        assert_eq!(named_candidates(dir.path(), "guest-t"), files);
        assert_eq!(fs::read(&files[0]).unwrap(), good);
    }

    #[test]
    fn the_key_is_made_once_private_and_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("code.key");
        let made = CodeKey::load_or_create(&path).unwrap();
        let read = CodeKey::load_or_create(&path).unwrap();
        assert_eq!(made.0, read.0);
        let mode = fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            CodeKey::load_or_create(&path),
            Err(KeyError::Exposed { .. })
        ));
        fs::write(&path, b"short").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            CodeKey::load_or_create(&path),
            Err(KeyError::Malformed(_))
        ));
    }

    /// The cost of a check, on the compiled guest in the user's cache folder:
    /// `cargo test --release --lib checked_code::tests::cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn cost() {
        let dir = artifacts::cache_dir();
        let Some(path) = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .max_by_key(|p| fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        else {
            panic!("no compiled file in {}", dir.display());
        };
        let engine = crate::sandbox::engine::SandboxEngine::new(1).unwrap();
        let engine = engine.engine();
        let len = fs::metadata(&path).unwrap().len();
        println!("{} ({len} bytes)", path.display());
        let _ = fs::read(&path).unwrap(); // page cache warm
        for _ in 0..3 {
            let t = Instant::now();
            let code = open(&path).unwrap();
            let hash = *code.hash();
            let hashed = t.elapsed();
            let verified = code.expect(&hash).unwrap();
            let t2 = Instant::now();
            let mapped = verified.component(engine);
            let mapped_time = t2.elapsed();
            let t3 = Instant::now();
            // SAFETY: a file this filerouter compiled (measurement only).
            let direct = unsafe { Component::deserialize_file(engine, &path) };
            let direct_time = t3.elapsed();
            let t4 = Instant::now();
            let bytes = fs::read(&path).unwrap();
            let read_hash = blake3::hash(&bytes);
            // SAFETY: as above.
            let from_memory = unsafe { Component::deserialize(engine, &bytes) };
            let memory_time = t4.elapsed();
            println!(
                "open+hash {hashed:?}, map via fd {mapped_time:?} ({}), map by path {direct_time:?} ({}), read+hash+deserialize {memory_time:?} ({}, {})",
                mapped.is_ok(),
                direct.is_ok(),
                from_memory.is_ok(),
                read_hash == hash
            );
        }
    }

    #[test]
    fn a_file_that_could_not_be_read_is_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("code.cwasm");
        fs::write(&path, b"code").unwrap();
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        discard(&path, &Refusal::Io(emfile));
        assert!(path.exists(), "EMFILE says nothing about the file");
        discard(&path, &Refusal::Link);
        assert!(!path.exists(), "a refused file is removed");
    }
}
