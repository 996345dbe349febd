//! Memory images: a guest component split into the code every project shares and the linear
//! memory that is one project's own.
//!
//! The guest component's first core module holds nothing but the linear memory and its data
//! segments: for the built-in guest, CPython's static data; for a build, the whole snapshot of
//! the baked instance. Everything else (the code module, the adapters, every component-level
//! section) is byte for byte the same for every project baked from one guest (measured, and
//! checked at every build: [`Split::differences`]). [`split`] replaces that module with a bare
//! memory (no data, declared size 0) and gives back the memory's bytes as an image: the code is
//! compiled once per process and engine settings (`engine`), the image is mapped copy-on-write
//! into every instance of its project (`slots`).
//!
//! An [`Image`] is such a memory as a file in the cache folder (`images/<blake3>.img`), checked
//! against its hash before it is mapped (`checked_code`), so that idle projects' images are page
//! cache the kernel may drop, not memory the process holds. An image that differs from one
//! already there in few pages is kept as a layer over it instead (`images/<blake3>.layer`, see
//! [`super::layer`]): its base's pages are mapped, its own over them.
//!
//! **Small folios, mapped one page at a time.** A slot maps the file privately, and a read fault
//! in it maps every page of the file's page cache around the fault that is there already (the
//! kernel's fault-around; since Linux 6.18 a whole large folio at a time). Written by one large
//! `write` or read with readahead, the image's page cache is made of large folios (64 to 512
//! pages on ext4), so a single request used to map 7,169 of examples/hello's 7,376 image pages
//! into its slot, every one of which the reset's `PAGEMAP_SCAN` then looks at after every
//! request. So once a file has been checked, the pages its hash check brought into the page cache
//! are dropped again ([`Image::drop_unused_cache`]), and the slots and [`Image::source`] read
//! the file with `MADV_RANDOM` (no readahead): a page a request reads is read alone, into a
//! small folio, and the page cache of an image holds only pages some request needed. Fault-around
//! still maps those of them near a fault, which later requests read as well: after a request a
//! slot maps about 780 pages instead of 7,169. The cost: the first requests after an image is
//! loaded read its pages from the disk one at a time (examples/hello: about 800 reads, 60 to 80
//! ms on the project's VM), once, until the kernel evicts them; a page cache left by an earlier
//! process is kept, and a process that finds none has the pages an earlier process's requests
//! read ([`super::hot_pages`]) read as it maps the image, before its first request.
//!
//! This module makes and maps images; it does not choose where an instance's memory lives (see
//! `slots`) or how it is reset (see `reset`).

use std::{
    fs::File,
    ops::Range,
    os::fd::AsRawFd,
    path::Path,
    sync::{Arc, Mutex, Weak},
};

use wasmparser::{DataKind, Operator, Parser, Payload};

use super::{
    artifacts,
    checked_code::{self, CodeKey, Refusal},
    hot_pages::{self, HOST_PAGE},
    layer,
};

/// A WebAssembly page.
pub const WASM_PAGE: usize = 64 * 1024;

/// The largest image made or mapped: a 32-bit memory's whole range.
pub const MAX_IMAGE_BYTES: usize = 4 << 30;

/// Why a component could not be split, or an image not mapped.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("the guest component does not parse: {0}")]
    Parse(String),
    #[error("the guest component's memory module is not what filerouter expects: {0}")]
    Shape(String),
    #[error("the memory image {path}: {reason}")]
    File { path: String, reason: String },
}

/// A guest component taken apart: the shared code and one project's memory.
pub struct Split {
    /// The component with its memory module emptied: the same for every project of a guest.
    pub code: Vec<u8>,
    /// The memory as the component starts it: its declared size, with its data in place.
    pub image: Vec<u8>,
}

/// Split `component` (see the module documentation).
pub fn split(component: &[u8]) -> Result<Split, ImageError> {
    let sections = sections(component)?;
    // The bare memory declares the least size the modules importing it ask for.
    let mut pages = 0;
    for section in sections.iter().filter(|s| s.id == CORE_MODULE).skip(1) {
        pages = pages.max(imported_memory_pages(section.body(component))?);
    }
    let mut code = component[..8].to_vec();
    let mut image: Option<Vec<u8>> = None;
    for section in &sections {
        match section.id {
            CORE_MODULE if image.is_none() => {
                let memory = memory_of(section.body(component))?;
                if (memory.len() / WASM_PAGE) < pages as usize {
                    return Err(ImageError::Shape(format!(
                        "its memory is smaller than the {pages} pages its importers ask for"
                    )));
                }
                image = Some(memory);
                push_section(&mut code, CORE_MODULE, &bare_memory_module(pages));
            }
            // The producers section says which tools touched the component (a bake adds one):
            // not code, and not the same before and after a bake.
            CUSTOM if custom_name(section.body(component)) == Some("producers") => {}
            _ => code.extend_from_slice(&component[section.start..section.end]),
        }
    }
    let image = image.ok_or_else(|| ImageError::Shape("it holds no core module".into()))?;
    Ok(Split { code, image })
}

impl Split {
    /// Where this split's code differs from `other`'s, in words (empty: the same code). A
    /// build refuses a snapshot whose code is not the built-in guest's: the one compiled
    /// guest would run it with the wrong globals or functions.
    pub fn differences(&self, other: &Split) -> Vec<String> {
        if self.code == other.code {
            return Vec::new();
        }
        let (Ok(ours), Ok(theirs)) = (sections(&self.code), sections(&other.code)) else {
            return vec!["the component does not parse".into()];
        };
        if ours.len() != theirs.len() {
            return vec![format!(
                "{} component sections instead of {}",
                ours.len(),
                theirs.len()
            )];
        }
        let mut found = Vec::new();
        let mut module = 0;
        for (index, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            let (body_a, body_b) = (a.body(&self.code), b.body(&other.code));
            if a.id == CORE_MODULE {
                if body_a != body_b {
                    found.extend(module_differences(module, body_a, body_b));
                }
                module += 1;
            } else if a.id != b.id || body_a != body_b {
                found.push(format!("component section {index} (id {})", a.id));
            }
        }
        found
    }
}

const CUSTOM: u8 = 0;
const CORE_MODULE: u8 = 1;

/// One top-level section of a component: its id and where it lies (header and body).
struct Section {
    id: u8,
    start: usize,
    body_start: usize,
    end: usize,
}

impl Section {
    fn body<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        &bytes[self.body_start..self.end]
    }
}

/// The top-level sections of a component, without looking inside them.
fn sections(bytes: &[u8]) -> Result<Vec<Section>, ImageError> {
    const COMPONENT_HEADER: [u8; 8] = *b"\0asm\x0d\0\x01\0";
    if bytes.get(..8) != Some(&COMPONENT_HEADER[..]) {
        return Err(ImageError::Parse("not a WebAssembly component".into()));
    }
    let mut found = Vec::new();
    let mut at = 8;
    while at < bytes.len() {
        let start = at;
        let id = bytes[at];
        let (size, width) = leb128_u32(&bytes[at + 1..])
            .ok_or_else(|| ImageError::Parse(format!("section size at byte {}", at + 1)))?;
        let body_start = at + 1 + width;
        let end = body_start
            .checked_add(size as usize)
            .filter(|end| *end <= bytes.len())
            .ok_or_else(|| {
                ImageError::Parse(format!("section at byte {start} runs past the end"))
            })?;
        found.push(Section {
            id,
            start,
            body_start,
            end,
        });
        at = end;
    }
    Ok(found)
}

fn leb128_u32(bytes: &[u8]) -> Option<(u32, usize)> {
    let mut value: u64 = 0;
    for (i, byte) in bytes.iter().take(5).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return u32::try_from(value).ok().map(|v| (v, i + 1));
        }
    }
    None
}

fn push_section(out: &mut Vec<u8>, id: u8, body: &[u8]) {
    out.push(id);
    let mut size = body.len();
    loop {
        let byte = (size & 0x7f) as u8;
        size >>= 7;
        if size == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(body);
}

fn custom_name(body: &[u8]) -> Option<&str> {
    let (len, width) = leb128_u32(body)?;
    std::str::from_utf8(body.get(width..width + len as usize)?).ok()
}

/// The most pages any memory `module` imports asks for at least.
fn imported_memory_pages(module: &[u8]) -> Result<u64, ImageError> {
    let mut pages = 0;
    for payload in Parser::new(0).parse_all(module) {
        let payload = payload.map_err(|e| ImageError::Parse(e.to_string()))?;
        if let Payload::ImportSection(reader) = payload {
            for import in reader.into_imports() {
                let import = import.map_err(|e| ImageError::Parse(e.to_string()))?;
                if let wasmparser::TypeRef::Memory(memory) = import.ty {
                    pages = pages.max(memory.initial);
                }
            }
        }
    }
    Ok(pages)
}

/// `(module (memory (export "memory") <pages>))`: what the memory module becomes, declaring
/// the size its importers need. Its instances' memory comes from the host (`slots`), at the
/// image's size, which is never smaller.
fn bare_memory_module(pages: u64) -> Vec<u8> {
    use wasm_encoder::{ExportKind, ExportSection, MemorySection, MemoryType, Module};
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: pages,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    let mut module = Module::new();
    module.section(&memories).section(&exports);
    module.finish()
}

/// The memory a memory module starts its instances with: its declared pages, the active data
/// segments written in. Anything else in the module (imports, functions, globals, passive
/// data, a second memory) is refused by name: the module could not be replaced by a bare one.
fn memory_of(module: &[u8]) -> Result<Vec<u8>, ImageError> {
    let shape = |what: String| ImageError::Shape(what);
    let parse = |e: wasmparser::BinaryReaderError| ImageError::Parse(e.to_string());
    let mut image: Option<Vec<u8>> = None;
    let mut exported = false;
    for payload in Parser::new(0).parse_all(module) {
        match payload.map_err(parse)? {
            Payload::Version { .. }
            | Payload::CustomSection(_)
            | Payload::DataCountSection { .. } => {}
            Payload::End(_) => {}
            Payload::MemorySection(reader) => {
                for memory in reader {
                    let memory = memory.map_err(parse)?;
                    if image.is_some() {
                        return Err(shape("it defines more than one memory".into()));
                    }
                    if memory.memory64 || memory.shared || memory.page_size_log2.is_some() {
                        return Err(shape("its memory is not a plain 32-bit memory".into()));
                    }
                    let bytes = usize::try_from(memory.initial)
                        .ok()
                        .and_then(|pages| pages.checked_mul(WASM_PAGE))
                        .filter(|bytes| *bytes <= MAX_IMAGE_BYTES)
                        .ok_or_else(|| shape(format!("{} pages is too large", memory.initial)))?;
                    image = Some(vec![0; bytes]);
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(parse)?;
                    if export.kind != wasmparser::ExternalKind::Memory || export.index != 0 {
                        return Err(shape(format!(
                            "it exports {:?} {}",
                            export.kind, export.name
                        )));
                    }
                    exported = true;
                }
            }
            Payload::DataSection(reader) => {
                let image = image
                    .as_mut()
                    .ok_or_else(|| shape("it has data but no memory".into()))?;
                for data in reader {
                    let data = data.map_err(parse)?;
                    let DataKind::Active {
                        memory_index: 0,
                        offset_expr,
                    } = data.kind
                    else {
                        return Err(shape("it has a passive data segment".into()));
                    };
                    let mut operators = offset_expr.get_operators_reader();
                    let offset = match (operators.read(), operators.read()) {
                        (Ok(Operator::I32Const { value }), Ok(Operator::End)) => value as u32,
                        _ => return Err(shape("a data segment's offset is not a constant".into())),
                    };
                    let start = offset as usize;
                    let target = start
                        .checked_add(data.data.len())
                        .and_then(|end| image.get_mut(start..end))
                        .ok_or_else(|| {
                            shape(format!("a data segment at {start} is past the memory"))
                        })?;
                    target.copy_from_slice(data.data);
                }
            }
            other => {
                return Err(shape(format!(
                    "it has a section filerouter cannot move to the host ({:?})",
                    other.as_section().map(|(id, _)| id)
                )));
            }
        }
    }
    if !exported {
        return Err(shape("it does not export its memory".into()));
    }
    image.ok_or_else(|| shape("it defines no memory".into()))
}

/// Where two versions of one core module differ: globals by index and value, other sections
/// by name.
fn module_differences(module: usize, ours: &[u8], theirs: &[u8]) -> Vec<String> {
    let summary = |bytes: &[u8]| -> Vec<(String, Vec<u8>, Vec<String>)> {
        let mut found = Vec::new();
        for payload in Parser::new(0).parse_all(bytes).flatten() {
            let Some((id, range)) = payload.as_section() else {
                continue;
            };
            let globals = match &payload {
                Payload::GlobalSection(reader) => reader
                    .clone()
                    .into_iter()
                    .flatten()
                    .map(|global| {
                        let init: Vec<String> = global
                            .init_expr
                            .get_operators_reader()
                            .into_iter()
                            .flatten()
                            .map(|op| format!("{op:?}"))
                            .collect();
                        init.join(" ")
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let name = match &payload {
                Payload::CustomSection(custom) => format!("custom section {}", custom.name()),
                _ => format!("section {id}"),
            };
            let section = usize::try_from(range.start)
                .ok()
                .zip(usize::try_from(range.end).ok())
                .and_then(|(start, end)| bytes.get(start..end))
                .unwrap_or_default();
            found.push((name, section.to_vec(), globals));
        }
        found
    };
    let (a, b) = (summary(ours), summary(theirs));
    let mut found = Vec::new();
    if a.len() != b.len() {
        found.push(format!(
            "core module {module}: {} sections instead of {}",
            a.len(),
            b.len()
        ));
        return found;
    }
    for ((name, bytes_a, globals_a), (_, bytes_b, globals_b)) in a.iter().zip(&b) {
        if bytes_a == bytes_b {
            continue;
        }
        if !globals_a.is_empty() && globals_a.len() == globals_b.len() {
            for (index, (x, y)) in globals_a.iter().zip(globals_b).enumerate() {
                if x != y {
                    found.push(format!(
                        "core module {module}: global {index} starts as {x} here and {y} in the built-in guest"
                    ));
                }
            }
        } else {
            found.push(format!("core module {module}: {name}"));
        }
    }
    found
}

/// Where memory images are kept: `images/` in the cache folder.
pub fn images_dir() -> std::path::PathBuf {
    artifacts::cache_dir().join("images")
}

/// Write `bytes` as an image file in [`images_dir`] unless it is there already, so that the
/// first `run` on this machine maps it without writing it (`filerouter build` does this): as a
/// layer over an image of the same size when one differs from it in few enough pages, else
/// whole. Best effort: a failure is logged, and `run` writes the file from the build cache
/// instead.
pub fn keep(bytes: &[u8]) {
    let dir = images_dir();
    let hash = blake3::hash(bytes);
    for path in [image_path(&dir, &hash), layer_path(&dir, &hash)] {
        if path.exists() {
            artifacts::mark_used(&path);
            return;
        }
    }
    if Image::store_layer(&dir, &hash, bytes).is_some() {
        return;
    }
    let path = image_path(&dir, &hash);
    match artifacts::store_atomically_unsynced(&path, bytes) {
        Ok(()) => {
            prune_images(&dir, &path);
        }
        Err(e) => tracing::warn!("could not keep the memory image in {}: {e}", path.display()),
    }
}

/// Remove the images and layers in `dir` unused for long or beyond the size limit, least
/// recently used first, never `kept` (the file just written).
fn prune_images(dir: &Path, kept: &Path) {
    artifacts::prune_unused(
        dir,
        "",
        kept,
        artifacts::UNUSED_AGE,
        Some(artifacts::images_max_bytes()),
    );
}

/// Where the whole image whose bytes hash to `hash` is kept in `dir`.
fn image_path(dir: &Path, hash: &blake3::Hash) -> std::path::PathBuf {
    dir.join(format!("{}.img", hash.to_hex()))
}

/// Where the layer of the image whose bytes hash to `hash` is kept in `dir`.
fn layer_path(dir: &Path, hash: &blake3::Hash) -> std::path::PathBuf {
    dir.join(format!("{}.layer", hash.to_hex()))
}

/// The key layers are signed with (see [`super::layer`]).
fn layer_key() -> [u8; blake3::KEY_LEN] {
    CodeKey::get().derive("memory image layer")
}

/// The whole images this process mapped from a folder, with the folder: where the bases of
/// layers read from there are found before their files are checked again (most recently mapped
/// last).
static BASES: Mutex<Vec<(std::path::PathBuf, Weak<Image>)>> = Mutex::new(Vec::new());

/// The whole images this process mapped from `dir` and still holds, most recently mapped last.
fn bases_in(dir: &Path) -> Vec<Arc<Image>> {
    let Ok(bases) = BASES.lock() else {
        return Vec::new();
    };
    bases
        .iter()
        .filter(|(folder, _)| folder == dir)
        .filter_map(|(_, base)| base.upgrade())
        .collect()
}

/// How many pages of an image [`Image::candidate_bases`] compares with each whole image.
const SAMPLED_PAGES: usize = 64;

/// How many whole images a new image is compared with for a base (each comparison checks the
/// base's hash, unless this process mapped it already, and reads both images).
const BASES_COMPARED: usize = 3;

/// A memory image mapped from its file (or its base's and its layer's), read-only: the source
/// every slot of its project is mapped from (copy-on-write) and restored from.
pub struct Image {
    hash: blake3::Hash,
    len: usize,
    /// The image's file, or its layer's.
    file: File,
    /// The base and runs of a layer (`file` is the layer); `None` for a whole image.
    layered: Option<Layered>,
    /// A read-only mapping of the whole image.
    source: usize,
    /// How many memory slots map this image now (see [`Image::held`]).
    holders: std::sync::atomic::AtomicUsize,
    /// For a whole image kept in a cache folder: where the record of the pages its requests
    /// read goes (`hot_pages`), and how many requests it served.
    hot: Option<HotRecord>,
}

/// See [`Image::hot`].
struct HotRecord {
    image_path: std::path::PathBuf,
    served: std::sync::atomic::AtomicU64,
}

/// What an image kept as a layer is made of: its base's pages, and its own over them.
struct Layered {
    base: Arc<Image>,
    runs: Vec<layer::Run>,
}

// SAFETY: the mapping is read-only and lives as long as the value; the file is only mapped.
unsafe impl Send for Image {}
// SAFETY: as above: nothing writes through `source`.
unsafe impl Sync for Image {}

impl Image {
    /// The image whose bytes hash to `expected`: from `dir/<expected>.layer` if that layer's
    /// MAC is right and its base is there, or from `dir/<expected>.img` if that file passes
    /// `checked_code`'s checks and hashes so; else kept there from `bytes()` first (which must hash to
    /// `expected`), as a layer when it pays. A refused file is logged, removed and written again.
    pub fn load(
        dir: &Path,
        expected: &blake3::Hash,
        bytes: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<Arc<Self>, ImageError> {
        let path = image_path(dir, expected);
        let failed = |reason: String| ImageError::File {
            path: path.display().to_string(),
            reason,
        };
        // The layer first: checking it reads its own pages, not the whole image, and it shares
        // its base's pages (a whole image of the same hash is one an older filerouter wrote).
        let layered = layer_path(dir, expected);
        match Self::open_layer(dir, &layered, expected) {
            Ok(Some(image)) => return Ok(image),
            Ok(None) => {}
            Err(reason) => {
                tracing::warn!(
                    "refusing memory image layer {}: it {reason}; removing it, it is written again from its source",
                    layered.display()
                );
                let _ = std::fs::remove_file(&layered);
            }
        }
        match Self::open_whole(dir, &path, expected, CachedPages::of(&path).as_ref()) {
            Ok(image) => {
                artifacts::mark_used(&path);
                return Ok(image);
            }
            Err(WholeRefused::Check(Refusal::Missing)) => {}
            Err(WholeRefused::Check(refusal)) => checked_code::discard(&path, &refusal),
            Err(WholeRefused::Map(reason)) => return Err(failed(reason)),
        }
        let bytes = bytes().map_err(&failed)?;
        if blake3::hash(&bytes) != *expected {
            return Err(failed(
                "the build cache's image does not hash to what its manifest records: run `filerouter build` again".into(),
            ));
        }
        if let Some(image) = Self::store_layer(dir, expected, &bytes) {
            return Ok(image);
        }
        // Not synced: a file lost or torn in a crash is refused by its hash and written again.
        if let Err(e) = artifacts::store_atomically_unsynced(&path, &bytes) {
            tracing::warn!(
                "could not write the memory image {}: {e}; keeping it in memory instead",
                path.display()
            );
            return Self::in_memory(*expected, &bytes)
                .map(Arc::new)
                .map_err(failed);
        }
        prune_images(dir, &path);
        // Just written: every page is in the page cache, none of them one a request read.
        Self::open_whole(dir, &path, expected, None).map_err(|refused| match refused {
            WholeRefused::Check(refusal) => failed(refusal.to_string()),
            WholeRefused::Map(reason) => failed(reason),
        })
    }

    /// The whole image `hash` from its file `path` in `dir`, if that passes `checked_code`'s
    /// checks and hashes so: mapped, its page cache trimmed to the pages `cached` names (what
    /// was cached before the check read the file; `None`: none of it,
    /// [`Image::drop_unused_cache`]), and kept as a base for layers in `dir`.
    fn open_whole(
        dir: &Path,
        path: &Path,
        hash: &blake3::Hash,
        cached: Option<&CachedPages>,
    ) -> Result<Arc<Self>, WholeRefused> {
        let verified = checked_code::open(path)
            .and_then(|opened| opened.expect(hash))
            .map_err(WholeRefused::Check)?;
        let mut image = Self::map(*hash, verified.into_file(), None).map_err(WholeRefused::Map)?;
        image.drop_unused_cache(cached);
        let preloaded = hot_pages::preload(&image.file, image.len, path);
        if preloaded > 0 {
            tracing::debug!(
                "memory image {}: {preloaded} pages its requests read are being read",
                &hash.to_hex()[..12]
            );
        }
        // The page cache tells which pages requests read only if it held nothing else when
        // they started: pages an earlier process left for another reason (a build comparing
        // a layer with its base reads the whole base) would be recorded as read.
        let clean =
            cached.is_none_or(|cached| hot_pages::covers(path, image.len, &cached.resident));
        image.hot = clean.then(|| HotRecord {
            image_path: path.to_path_buf(),
            served: std::sync::atomic::AtomicU64::new(0),
        });
        Ok(Self::register_base(dir, image))
    }

    /// A whole image mapped from `dir`, kept as a base for layers there.
    fn register_base(dir: &Path, image: Self) -> Arc<Self> {
        let image = Arc::new(image);
        if let Ok(mut bases) = BASES.lock() {
            bases.retain(|(_, base)| base.strong_count() > 0);
            bases.push((dir.to_path_buf(), Arc::downgrade(&image)));
        }
        image
    }

    /// The whole image `hash` from `dir`: one this process mapped already, else its file if
    /// that passes its checks. No bytes to write it from: a layer whose base is gone is made
    /// again from its build.
    fn base(dir: &Path, hash: &blake3::Hash) -> Result<Arc<Self>, String> {
        let mapped = bases_in(dir).into_iter().find(|base| base.hash == *hash);
        let path = image_path(dir, hash);
        if let Some(base) = mapped {
            artifacts::mark_used(&path);
            return Ok(base);
        }
        let image = Self::open_whole(dir, &path, hash, CachedPages::of(&path).as_ref()).map_err(
            |refused| match refused {
                WholeRefused::Check(refusal) => {
                    format!("has no base: {} {refusal}", path.display())
                }
                WholeRefused::Map(e) => format!("has no base: {}: {e}", path.display()),
            },
        )?;
        artifacts::mark_used(&path);
        Ok(image)
    }

    /// The image `expected` from its layer file `path`: `None` if there is none, an error (the
    /// end of a sentence that starts with the file) if it is refused.
    fn open_layer(
        dir: &Path,
        path: &Path,
        expected: &blake3::Hash,
    ) -> Result<Option<Arc<Self>>, String> {
        use std::os::unix::fs::FileExt;
        let file = match checked_code::open(path) {
            Ok(opened) => opened.into_unverified_file(),
            Err(Refusal::Missing) => return Ok(None),
            Err(refusal) => return Err(refusal.to_string()),
        };
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        let mut bytes = vec![0; usize::try_from(len).map_err(|_| "is too large")?];
        file.read_exact_at(&mut bytes, 0)
            .map_err(|e| format!("cannot be read: {e}"))?;
        let layer = layer::decode(&layer_key(), expected, &bytes)?;
        let base = Self::base(dir, &layer.base)?;
        if base.len != layer.len {
            return Err(format!(
                "is {} bytes over a base of {}",
                layer.len, base.len
            ));
        }
        artifacts::mark_used(path);
        let image = Self::map(
            *expected,
            file,
            Some(Layered {
                base,
                runs: layer.runs,
            }),
        )?;
        Ok(Some(Arc::new(image)))
    }

    /// Keep `bytes` (the image `hash`) as a layer over the first of [`Image::candidate_bases`]
    /// (at most [`BASES_COMPARED`] tried) it differs from in few enough pages
    /// ([`layer::difference`]), and map it.
    fn store_layer(dir: &Path, hash: &blake3::Hash, bytes: &[u8]) -> Option<Arc<Self>> {
        let started = std::time::Instant::now();
        let (base, runs) = Self::candidate_bases(dir, hash, bytes)
            .iter()
            .take(BASES_COMPARED)
            .filter_map(|candidate| Self::base(dir, candidate).ok())
            .find_map(|base| {
                let cached = CachedPages::of(&image_path(dir, &base.hash));
                let runs = layer::difference(base.bytes(), bytes);
                base.forget_compared_pages(cached.as_ref());
                Some((base, runs?))
            })?;
        let encoded = layer::encode(&layer_key(), hash, &base.hash, bytes, &runs);
        let path = layer_path(dir, hash);
        if let Err(e) = artifacts::store_atomically_unsynced(&path, &encoded) {
            tracing::warn!(
                "could not write the memory image layer {}: {e}",
                path.display()
            );
            return None;
        }
        prune_images(dir, &path);
        match Self::open_layer(dir, &path, hash) {
            Ok(Some(image)) => {
                tracing::debug!(
                    "memory image {}: kept as {} pages in {} runs over {} ({:?})",
                    &hash.to_hex()[..12],
                    runs.iter()
                        .map(|run| run.len() / layer::PAGE)
                        .sum::<usize>(),
                    runs.len(),
                    &base.hash.to_hex()[..12],
                    started.elapsed()
                );
                Some(image)
            }
            Ok(None) => None,
            Err(reason) => {
                tracing::warn!(
                    "the memory image layer {} just written {reason}",
                    path.display()
                );
                None
            }
        }
    }

    /// The whole images in `dir` that `bytes` (the image `hash`) may be a layer of, the likeliest
    /// first: of the same size, with at least half of [`SAMPLED_PAGES`] pages spread over the
    /// image equal to its own (read without checking the file: the base chosen is checked before
    /// it is used); then the base of more layers, then the most recently used, first. So an
    /// image becomes a layer of the image closest to it, and tenants of one app built one after
    /// another, or by other processes meanwhile, share their base.
    fn candidate_bases(dir: &Path, hash: &blake3::Hash, bytes: &[u8]) -> Vec<blake3::Hash> {
        use std::{collections::HashMap, io::Read, os::unix::fs::FileExt};
        let pages = bytes.len() / layer::PAGE;
        let sampled: Vec<usize> = (0..SAMPLED_PAGES.min(pages))
            .map(|n| n * pages / SAMPLED_PAGES.min(pages))
            .collect();
        let mut layers_over: HashMap<blake3::Hash, usize> = HashMap::new();
        let mut whole = Vec::new();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".layer") {
                let mut header = [0u8; 96];
                let read =
                    File::open(entry.path()).and_then(|mut file| file.read_exact(&mut header));
                if read.is_ok() && &header[32..64] == layer::MAGIC {
                    let mut base = [0u8; 32];
                    base.copy_from_slice(&header[64..96]);
                    *layers_over
                        .entry(blake3::Hash::from_bytes(base))
                        .or_default() += 1;
                }
                continue;
            }
            let Some(found) = name
                .strip_suffix(".img")
                .and_then(|stem| blake3::Hash::from_hex(stem).ok())
            else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            if found == *hash || meta.len() != bytes.len() as u64 {
                continue;
            }
            let Ok(file) = File::open(entry.path()) else {
                continue;
            };
            // Only the sampled pages: without this, readahead would bring large folios of the
            // candidate into the page cache, which its next hash check then keeps as cached
            // before, and slots mapping it would map them whole.
            // SAFETY: a hint on a descriptor we own; it reads or writes no memory of ours.
            unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    0,
                    0,
                    libc::POSIX_FADV_RANDOM,
                );
            }
            let mut page = vec![0u8; layer::PAGE];
            let equal = sampled
                .iter()
                .filter(|&&n| {
                    let at = n * layer::PAGE;
                    file.read_exact_at(&mut page, at as u64).is_ok()
                        && page[..] == bytes[at..at + layer::PAGE]
                })
                .count();
            if equal * 2 >= sampled.len() {
                whole.push((found, equal, meta.modified().ok()));
            }
        }
        whole.sort_by_key(|(found, equal, modified)| {
            std::cmp::Reverse((
                *equal,
                layers_over.get(found).copied().unwrap_or(0),
                *modified,
            ))
        });
        whole.into_iter().map(|(found, _, _)| found).collect()
    }

    /// An image of `bytes` (whole wasm pages) held in memory, not in the cache folder: `dev`'s
    /// live snapshots, which live as long as the project stays unchanged.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ImageError> {
        Self::in_memory(blake3::hash(bytes), bytes).map_err(|reason| ImageError::File {
            path: "(memory)".into(),
            reason,
        })
    }

    /// The image in an anonymous memory file (`memfd`), for a cache folder that cannot be
    /// written (a read-only container): memory the process holds, not page cache it can drop.
    fn in_memory(hash: blake3::Hash, bytes: &[u8]) -> Result<Self, String> {
        use std::{io::Write, os::fd::FromRawFd};
        // SAFETY: memfd_create with a valid C string; the descriptor is owned by the File below.
        let fd = unsafe { libc::memfd_create(c"filerouter-image".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("memfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(bytes).map_err(|e| format!("memfd: {e}"))?;
        Self::map(hash, file, None)
    }

    /// Map `file` (the whole image, or the layer `layered` is read from) as the image `hash`.
    fn map(hash: blake3::Hash, file: File, layered: Option<Layered>) -> Result<Self, String> {
        let len = match &layered {
            Some(layered) => layered.base.len,
            None => file
                .metadata()
                .map_err(|e| e.to_string())?
                .len()
                .try_into()
                .map_err(|_| "too large".to_string())?,
        };
        if len == 0 || len % WASM_PAGE != 0 || len > MAX_IMAGE_BYTES {
            return Err(format!("{len} bytes is not a whole number of wasm pages"));
        }
        // SAFETY: a fresh inaccessible reservation of `len` bytes, for the mappings below.
        let source = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if source == libc::MAP_FAILED {
            return Err(format!("map: {}", std::io::Error::last_os_error()));
        }
        let image = Self {
            hash,
            len,
            file,
            layered,
            source: source as usize,
            holders: std::sync::atomic::AtomicUsize::new(0),
            hot: None,
        };
        // SAFETY: the reservation just made, `len` bytes; read-only shared mappings of regular
        // files that only this process's user may change (checked in `checked_code::open`).
        unsafe { image.map_at(image.source, 0..len, libc::PROT_READ, libc::MAP_SHARED) }?;
        // No readahead through the source either (the module documentation): the resets read
        // only pages a request wrote, which are in the page cache already. Advice only.
        // SAFETY: the mapping just made.
        unsafe { libc::madvise(source, len, libc::MADV_RANDOM) };
        Ok(image)
    }

    /// Map the image's bytes `range` (page-aligned, within the image) at `at + range.start`,
    /// over whatever was there: the base's pages (or the whole image's), then the layer's runs
    /// within `range` over them.
    ///
    /// # Safety
    ///
    /// `at + range` must be memory the caller owns and nothing else uses meanwhile.
    unsafe fn map_at(
        &self,
        at: usize,
        range: Range<usize>,
        prot: libc::c_int,
        flags: libc::c_int,
    ) -> Result<(), String> {
        let map = |start: usize, len: usize, fd: std::os::fd::RawFd, offset: usize| {
            // SAFETY: the caller's memory (this function's contract), a file of this image.
            let mapped = unsafe {
                libc::mmap(
                    (at + start) as *mut libc::c_void,
                    len,
                    prot,
                    flags | libc::MAP_FIXED,
                    fd,
                    offset as libc::off_t,
                )
            };
            if mapped == libc::MAP_FAILED {
                return Err(format!(
                    "map a memory image: {}",
                    std::io::Error::last_os_error()
                ));
            }
            Ok(())
        };
        if range.is_empty() {
            return Ok(());
        }
        let Some(layered) = &self.layered else {
            return map(range.start, range.len(), self.file.as_raw_fd(), range.start);
        };
        map(
            range.start,
            range.len(),
            layered.base.file.as_raw_fd(),
            range.start,
        )?;
        for run in &layered.runs {
            let start = run.image.start.max(range.start);
            let end = run.image.end.min(range.end);
            if start < end {
                let offset = run.file_offset + (start - run.image.start);
                map(start, end - start, self.file.as_raw_fd(), offset)?;
            }
        }
        Ok(())
    }

    /// Map the image's bytes `range` (page-aligned, within the image) privately and writable at
    /// `at + range.start`, over whatever was there: a memory slot's copy-on-write pages.
    ///
    /// # Safety
    ///
    /// As [`Image::map_at`]: memory the caller owns, used by nothing meanwhile.
    pub unsafe fn map_private(&self, at: usize, range: Range<usize>) -> Result<(), String> {
        // SAFETY: the caller's promise.
        unsafe {
            self.map_at(
                at,
                range,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
            )
        }
    }

    /// Whether this image and `other` are layers of one base, or one is the other's base: a
    /// slot changes between them by mapping the pages [`Image::differing`] names.
    pub fn shares_base(&self, other: &Image) -> bool {
        self.len == other.len && self.base_hash() == other.base_hash() && self.hash != other.hash
    }

    /// The hash of the image this one is a layer of, or its own for a whole image.
    fn base_hash(&self) -> &blake3::Hash {
        self.layered
            .as_ref()
            .map_or(&self.hash, |layered| &layered.base.hash)
    }

    /// Where this image's bytes may differ from `other`'s, when both are layers over one base
    /// (or one is the other's base): the runs of either. `None` when they share no base.
    pub fn differing(&self, other: &Image) -> Option<Vec<Range<usize>>> {
        if self.len != other.len || self.base_hash() != other.base_hash() {
            return None;
        }
        let mut runs: Vec<Range<usize>> = [self, other]
            .iter()
            .filter_map(|image| image.layered.as_ref())
            .flat_map(|layered| layered.runs.iter().map(|run| run.image.clone()))
            .collect();
        runs.sort_by_key(|run| run.start);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(runs.len());
        for run in runs {
            match merged.last_mut() {
                Some(last) if run.start <= last.end => last.end = last.end.max(run.end),
                _ => merged.push(run),
            }
        }
        Some(merged)
    }

    /// Drop from the page cache the image's pages that `cached` (what was cached before the
    /// hash check read the file) does not name; with `None`, every page the kernel can drop.
    /// Dirty pages (a file just written) are written out first, as the kernel drops clean
    /// pages only. See the module documentation for why; pages mapped by a slot anywhere
    /// stay. Best effort: a failure leaves the pages cached, which costs time, not
    /// correctness.
    fn drop_unused_cache(&self, cached: Option<&CachedPages>) {
        let started = std::time::Instant::now();
        let fd = self.file.as_raw_fd();
        // SAFETY: a descriptor this value owns; fdatasync only writes the file's dirty pages.
        if unsafe { libc::fdatasync(fd) } != 0 {
            tracing::debug!(
                "memory image {}: fdatasync: {}",
                self.hash.to_hex(),
                std::io::Error::last_os_error()
            );
        }
        let ranges = match cached {
            Some(cached) => cached.uncached_ranges(),
            None => std::iter::once(0..self.len).collect(),
        };
        for range in &ranges {
            // SAFETY: advice on a descriptor this value owns; the kernel drops only clean,
            // unmapped pages of the page cache, which later reads bring back.
            let rc = unsafe {
                libc::posix_fadvise(
                    fd,
                    range.start as libc::off_t,
                    (range.end - range.start) as libc::off_t,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
            if rc != 0 {
                tracing::debug!(
                    "memory image {}: posix_fadvise: {}",
                    self.hash.to_hex(),
                    std::io::Error::from_raw_os_error(rc)
                );
                return;
            }
        }
        tracing::debug!(
            "memory image {}: {} ranges dropped from the page cache in {:?}",
            &self.hash.to_hex()[..12],
            ranges.len(),
            started.elapsed()
        );
    }

    /// After [`Image::store_layer`] compared this image with another (reading all of it
    /// through [`Image::source`]), drop what that read into the page cache (the pages
    /// `cached`, taken before, does not name): else the next process to map the image would
    /// keep all of it cached, its slots would map thousands of pages, and its record of the
    /// pages requests read would name them all (`hot_pages`). Only while no slot maps the
    /// image (a build, or a server none of whose instances uses it).
    fn forget_compared_pages(&self, cached: Option<&CachedPages>) {
        use std::sync::atomic::Ordering;
        if self.holders.load(Ordering::Relaxed) != 0 {
            return;
        }
        // SAFETY: the read-only shared mapping made in `map`; dropping its page-table entries
        // only makes later reads fault the file's pages in again.
        unsafe {
            libc::madvise(
                self.source as *mut libc::c_void,
                self.len,
                libc::MADV_DONTNEED,
            )
        };
        self.drop_unused_cache(cached);
    }

    /// A memory slot maps this image now (`true`), or no longer (`false`). When the last slot
    /// lets go, the pages the resets read through [`Image::source`] are unmapped from it (the
    /// file's page cache stays, the kernel's to keep or drop): an idle project holds no
    /// resident memory of its image in the process.
    pub fn held(&self, now: bool) {
        use std::sync::atomic::Ordering;
        if now {
            self.holders.fetch_add(1, Ordering::Relaxed);
        } else {
            let before = self.holders.fetch_sub(1, Ordering::Relaxed);
            // Dropping the entries while another slot starts to use the image costs it a
            // few faults, nothing more: no lock is needed.
            if before == 1 {
                // SAFETY: the read-only shared mapping made in `map`; dropping its page-table
                // entries only makes later reads fault the file's pages in again.
                unsafe {
                    libc::madvise(
                        self.source as *mut libc::c_void,
                        self.len,
                        libc::MADV_DONTNEED,
                    )
                };
            }
        }
    }

    /// A request was served from this image: after [`hot_pages::RECORD_AFTER`] of them (and
    /// [`hot_pages::RECORD_AGAIN_AFTER`]), the pages of its file (its base's, for a layer: a
    /// layer's own pages are few and read whole when it is checked) in the page cache are
    /// written down for the next process ([`hot_pages`]). Called on the thread that resets
    /// the request's memory, never on an async one: a record is a small file written.
    pub fn served(&self) {
        let image = self.layered.as_ref().map_or(self, |layered| &layered.base);
        let Some(hot) = &image.hot else { return };
        let served = hot
            .served
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if served != hot_pages::RECORD_AFTER && served != hot_pages::RECORD_AGAIN_AFTER {
            return;
        }
        match hot_pages::record(&image.file, image.len, &hot.image_path) {
            Ok(pages) => tracing::debug!(
                "memory image {}: {pages} pages its requests read, recorded after {served} requests",
                &image.hash.to_hex()[..12]
            ),
            Err(e) => tracing::debug!("could not record the pages requests read: {e}"),
        }
    }

    /// The BLAKE3 hash of the image's bytes: its identity.
    pub fn hash(&self) -> &blake3::Hash {
        &self.hash
    }

    /// Its size in bytes (whole wasm pages).
    pub fn size(&self) -> usize {
        self.len
    }

    /// Copy the image's bytes `range` (within the image) to `at + range.start`. A layer's
    /// bytes outside its runs are read from its base's mapping, which no slot holds (slots map
    /// layers), so it stays populated while layers come and go ([`Image::held`]).
    ///
    /// # Safety
    ///
    /// `at + range` must be writable memory that nothing else uses meanwhile.
    pub unsafe fn copy_into(&self, at: usize, range: Range<usize>) {
        debug_assert!(range.end <= self.len);
        let copy = |from: usize, piece: Range<usize>| {
            // SAFETY: `piece` is within `range` and within the image that `from` maps; the
            // destination is the caller's.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (from + piece.start) as *const u8,
                    (at + piece.start) as *mut u8,
                    piece.len(),
                )
            }
        };
        let Some(layered) = &self.layered else {
            return copy(self.source, range);
        };
        let mut next = range.start;
        for run in &layered.runs {
            if run.image.end <= next {
                continue;
            }
            if run.image.start >= range.end {
                break;
            }
            let start = run.image.start.max(next);
            copy(layered.base.source, next..start);
            let end = run.image.end.min(range.end);
            copy(self.source, start..end);
            next = end;
        }
        copy(layered.base.source, next..range.end);
    }

    /// The image's bytes, read-only (tests compare memories with them).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `source` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.source as *const u8, self.len) }
    }
}

/// Why [`Image::open_whole`] did not map a whole image's file.
enum WholeRefused {
    /// The file is missing, or failed `checked_code`'s checks or its hash.
    Check(Refusal),
    /// It passed them, but could not be mapped.
    Map(String),
}

/// Which pages of a file were in the page cache, one byte per page (`mincore`): taken before
/// an image's hash check reads the whole file, so that only the pages that read brought in are
/// dropped after it. What an earlier process left (pages requests read, in small folios) stays.
struct CachedPages {
    resident: Vec<u8>,
    /// The file's length when looked at.
    len: usize,
}

impl CachedPages {
    /// The page cache of the file at `path`, or `None` if it cannot be looked at (no file yet,
    /// or a failure: then every page is dropped after the check). A file wholly cached is
    /// taken as one just written or read with readahead, not as one requests read: `None`.
    fn of(path: &Path) -> Option<Self> {
        let file = File::open(path).ok()?;
        let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
        if len == 0 || len > MAX_IMAGE_BYTES {
            return None;
        }
        let resident = hot_pages::resident(&file, len)?;
        if resident.iter().all(|page| page & 1 != 0) {
            return None;
        }
        Some(Self { resident, len })
    }

    /// The byte ranges of the file that were not in the page cache.
    fn uncached_ranges(&self) -> Vec<std::ops::Range<usize>> {
        let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
        for (page, resident) in self.resident.iter().enumerate() {
            if resident & 1 != 0 {
                continue;
            }
            let start = page * HOST_PAGE;
            let end = (start + HOST_PAGE).min(self.len);
            match ranges.last_mut() {
                Some(last) if last.end == start => last.end = end,
                _ => ranges.push(start..end),
            }
        }
        ranges
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.source as *mut libc::c_void, self.len) };
    }
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Image({}, {} bytes{})",
            &self.hash.to_hex()[..12],
            self.len,
            match &self.layered {
                Some(layered) => format!(
                    ", {} runs over {}",
                    layered.runs.len(),
                    &layered.base.hash.to_hex()[..12]
                ),
                None => String::new(),
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component of one memory module (with `data` at `offset`, `pages` pages) and one
    /// other core module, and a producers section.
    fn component(pages: u64, offset: i32, data: &[u8], producer: &str) -> Vec<u8> {
        use wasm_encoder::{
            ComponentSectionId, ConstExpr, DataSection, Encode, Module, ModuleSection,
            ProducersField, ProducersSection, RawSection, Section,
        };
        // The bare memory module `split` makes, with a data section after its own.
        let mut memory = bare_memory_module(pages);
        let mut segments = DataSection::new();
        segments.active(0, &ConstExpr::i32_const(offset), data.iter().copied());
        memory.push(segments.id());
        segments.encode(&mut memory);
        let other = Module::new();
        let mut producers = ProducersSection::new();
        let mut field = ProducersField::new();
        field.value(producer, "1");
        producers.field("processed-by", &field);
        let mut component = wasm_encoder::Component::new();
        component
            .section(&RawSection {
                id: ComponentSectionId::CoreModule as u8,
                data: &memory,
            })
            .section(&ModuleSection(&other))
            .section(&producers);
        component.finish()
    }

    #[test]
    fn the_memory_module_becomes_bare_and_its_data_the_image() {
        let a = split(&component(2, 70_000, b"snapshot", "bake")).unwrap();
        assert_eq!(a.image.len(), 2 * WASM_PAGE);
        assert_eq!(&a.image[70_000..70_008], b"snapshot");
        assert!(a.image[..70_000].iter().all(|b| *b == 0));
        // Another project, another tool in the producers section: the same code.
        let b = split(&component(3, 8, b"other", "another tool")).unwrap();
        assert_eq!(a.code, b.code);
        assert!(a.differences(&b).is_empty());
        // The code validates as a component with a bare memory.
        wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
            .validate_all(&a.code)
            .unwrap();
    }

    #[test]
    fn what_cannot_move_to_the_host_is_named() {
        for (what, bad) in [
            ("past the memory", component(1, 65_530, b"too long", "x")),
            ("not a component", b"\0asm\x01\0\0\0".to_vec()),
        ] {
            let error = split(&bad).err().unwrap().to_string();
            assert!(
                error.contains(what) || error.contains("component"),
                "{what}: {error}"
            );
        }
    }

    #[test]
    fn differing_code_is_named_by_module_and_global() {
        use wasm_encoder::{ConstExpr, GlobalSection, GlobalType, Module, ModuleSection, ValType};
        let with_global = |value: i32| {
            let mut globals = GlobalSection::new();
            globals.global(
                GlobalType {
                    val_type: ValType::I32,
                    mutable: true,
                    shared: false,
                },
                &ConstExpr::i32_const(value),
            );
            let mut code = Module::new();
            code.section(&globals);
            let mut bytes = component(1, 0, b"", "x");
            let mut component = wasm_encoder::Component::new();
            component.section(&ModuleSection(&code));
            bytes.extend_from_slice(&component.finish()[8..]);
            split(&bytes).unwrap()
        };
        let found = with_global(1_048_576).differences(&with_global(1_049_000));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("core module 2: global 0"), "{found:?}");
        assert!(
            found[0].contains("1048576") && found[0].contains("1049000"),
            "{found:?}"
        );
    }

    #[test]
    fn an_image_file_is_checked_and_written_again_when_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = vec![7u8; WASM_PAGE];
        let hash = blake3::hash(&bytes);
        let image = Image::load(dir.path(), &hash, || Ok(bytes.clone())).unwrap();
        assert_eq!(image.bytes(), &bytes[..]);
        let path = dir.path().join(format!("{}.img", hash.to_hex()));
        // Another image under this one's name: refused, and written again from the source.
        drop(image);
        artifacts::store_atomically(&path, &vec![9u8; WASM_PAGE]).unwrap();
        let image = Image::load(dir.path(), &hash, || Ok(bytes.clone())).unwrap();
        assert_eq!(image.bytes(), &bytes[..]);
        // A folder that cannot be written: the image is kept in memory.
        let blocked = dir.path().join("blocked");
        std::fs::write(&blocked, b"").unwrap();
        let image = Image::load(&blocked, &hash, || Ok(bytes.clone())).unwrap();
        assert_eq!(image.bytes(), &bytes[..]);
        // A source that does not hash as expected is not written.
        std::fs::remove_file(&path).unwrap();
        let error = Image::load(dir.path(), &hash, || Ok(vec![1u8; WASM_PAGE]))
            .err()
            .unwrap();
        assert!(error.to_string().contains("does not hash"), "{error}");
        assert!(!path.exists());
    }

    /// The pages one process's requests read from an image are recorded after its first
    /// requests, and a later process that finds none of the image's file cached has exactly
    /// those read as it maps the image (see `hot_pages`), layers' requests counting for their
    /// base.
    #[test]
    fn the_pages_requests_read_are_read_before_the_next_process_needs_them() {
        // On the disk (a memory file system keeps every page cached).
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
        std::fs::create_dir_all(&target).unwrap();
        let dir = tempfile::tempdir_in(target).unwrap();
        let bytes = variant(4, 11, &[], 0);
        let hash = blake3::hash(&bytes);
        let image = Image::load(dir.path(), &hash, || Ok(bytes.clone())).unwrap();
        let cached = |image: &Image| -> Vec<usize> {
            let pages = hot_pages::resident(&image.file, image.len).unwrap();
            (0..pages.len()).filter(|&p| pages[p] & 1 != 0).collect()
        };
        // A layer's requests count for its base, whose pages they read.
        let layered = variant(4, 11, &[30], 0xEE);
        let layer_hash = blake3::hash(&layered);
        let layer = Image::load(dir.path(), &layer_hash, || Ok(layered.clone())).unwrap();
        assert!(layer.layered.is_some(), "{layer:?}");
        // Comparing the layer with its base read all of the base: dropped again.
        assert_eq!(cached(&image), Vec::<usize>::new());
        let file = File::open(image_path(dir.path(), &hash)).unwrap();
        let read = [1, 2, 17, 60];
        for page in read {
            // SAFETY: within the image's mapping.
            let byte =
                unsafe { std::ptr::read_volatile((image.source + page * HOST_PAGE) as *const u8) };
            assert_eq!(byte, bytes[page * HOST_PAGE]);
        }
        let record = dir.path().join(format!("{}.hot", hash.to_hex()));
        for served in 1..hot_pages::RECORD_AFTER {
            if served % 2 == 0 {
                image.served()
            } else {
                layer.served()
            }
            assert!(!record.exists(), "recorded after {served} requests");
        }
        layer.served();
        assert!(record.exists());
        // The next process: the image's pages not cached any more.
        drop((image, layer));
        // SAFETY: advice on a descriptor of ours.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let image = Image::load(dir.path(), &hash, || unreachable!()).unwrap();
        let started = std::time::Instant::now();
        while cached(&image).len() < read.len() && started.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(cached(&image), read);
        // A damaged record reads nothing, and the image is still mapped from its file.
        drop(image);
        std::fs::write(&record, b"filerouter-hot1\n garbage").unwrap();
        // SAFETY: as above.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let image = Image::load(dir.path(), &hash, || unreachable!()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(cached(&image), Vec::<usize>::new());
        assert_eq!(image.bytes(), &bytes[..]);
        // A process that finds pages of the image cached that no record names (left for
        // another reason) writes no record: it could not tell which pages its requests read.
        drop(image);
        // SAFETY: as above.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let other = File::open(image_path(dir.path(), &hash)).unwrap();
        // SAFETY: as above.
        unsafe { libc::posix_fadvise(other.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        use std::os::unix::fs::FileExt;
        other.read_exact_at(&mut vec![0; 8 * HOST_PAGE], 0).unwrap();
        let image = Image::load(dir.path(), &hash, || unreachable!()).unwrap();
        assert_eq!(cached(&image), (0..8).collect::<Vec<_>>());
        for _ in 0..hot_pages::RECORD_AFTER {
            image.served();
        }
        assert_eq!(
            std::fs::read(&record).unwrap(),
            b"filerouter-hot1\n garbage"
        );
    }

    /// `pages` wasm pages of numbers from `seed`, with the host pages `changed` set to `mark`.
    fn variant(pages: usize, seed: u64, changed: &[usize], mark: u8) -> Vec<u8> {
        let mut state = seed;
        let mut bytes: Vec<u8> = (0..pages * WASM_PAGE)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        for page in changed {
            bytes[page * layer::PAGE..(page + 1) * layer::PAGE].fill(mark);
        }
        bytes
    }

    /// An image that differs from one already kept in few pages is kept as a layer over it: it
    /// reads as its own bytes, a later load maps it from the layer alone, and a damaged layer
    /// or a missing base makes it be written again from its source, whole or over another base.
    #[test]
    fn an_image_close_to_another_is_kept_as_a_layer_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let base_bytes = variant(4, 5, &[], 0);
        let bytes = variant(4, 5, &[3, 4, 5, 40, 63], 0xEE);
        let (base_hash, hash) = (blake3::hash(&base_bytes), blake3::hash(&bytes));
        let base = Image::load(dir.path(), &base_hash, || Ok(base_bytes.clone())).unwrap();
        let image = Image::load(dir.path(), &hash, || Ok(bytes.clone())).unwrap();
        assert!(
            image.bytes() == &bytes[..],
            "a layer does not read as its image"
        );
        let layer_file = layer_path(dir.path(), &hash);
        assert!(layer_file.exists() && !image_path(dir.path(), &hash).exists());
        assert_eq!(
            std::fs::metadata(&layer_file).unwrap().len() as usize,
            layer::PAGE + 5 * layer::PAGE,
            "a page of header and the five pages of its own"
        );
        assert_eq!(
            image.differing(&base),
            Some(vec![
                3 * layer::PAGE..6 * layer::PAGE,
                40 * layer::PAGE..41 * layer::PAGE,
                63 * layer::PAGE..64 * layer::PAGE
            ])
        );
        // Mapped again by a process that holds neither: from the files alone.
        drop((image, base));
        let image = Image::load(dir.path(), &hash, || Err("not from its source".into())).unwrap();
        assert!(image.bytes() == &bytes[..]);
        drop(image);
        // A whole image of the same hash beside it (as a filerouter without layers wrote it):
        // the layer is what is mapped, over its base.
        artifacts::store_atomically(&image_path(dir.path(), &hash), &bytes).unwrap();
        let image = Image::load(dir.path(), &hash, || Err("not from its source".into())).unwrap();
        let base =
            Image::load(dir.path(), &base_hash, || Err("not from its source".into())).unwrap();
        assert!(image.bytes() == &bytes[..]);
        assert!(
            image.differing(&base).is_some(),
            "the whole image was mapped, not the layer over its base"
        );
        drop((image, base));
        std::fs::remove_file(image_path(dir.path(), &hash)).unwrap();
        // A layer changed on disk is refused (its MAC) and made again from the source.
        let mut damaged = std::fs::read(&layer_file).unwrap();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        artifacts::store_atomically(&layer_file, &damaged).unwrap();
        let image = Image::load(dir.path(), &hash, || Ok(bytes.clone())).unwrap();
        assert!(image.bytes() == &bytes[..]);
        assert_ne!(std::fs::read(&layer_file).unwrap(), damaged);
        drop(image);
        // Its base gone: the layer is removed and the image written again, whole (nothing else
        // of its size is there to be a base).
        std::fs::remove_file(image_path(dir.path(), &base_hash)).unwrap();
        let image = Image::load(dir.path(), &hash, || Ok(bytes.clone())).unwrap();
        assert!(image.bytes() == &bytes[..]);
        assert!(!layer_file.exists() && image_path(dir.path(), &hash).exists());
        // An image unlike any other is kept whole.
        let other = variant(4, 6, &[], 0);
        let other_hash = blake3::hash(&other);
        let image = Image::load(dir.path(), &other_hash, || Ok(other.clone())).unwrap();
        assert!(image.bytes() == &other[..]);
        assert!(image_path(dir.path(), &other_hash).exists());
    }
}
