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
//! cache the kernel may drop, not memory the process holds.
//!
//! This module makes and maps images; it does not choose where an instance's memory lives (see
//! `slots`) or how it is reset (see `reset`).

use std::{fs::File, os::fd::AsRawFd, path::Path};

use wasmparser::{DataKind, Operator, Parser, Payload};

use super::{
    artifacts,
    checked_code::{self, Refusal},
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
/// first `run` on this machine maps it without writing it (`filerouter build` does this).
/// Best effort: a failure is logged, and `run` writes the file from the build cache instead.
pub fn keep(bytes: &[u8]) {
    let path = images_dir().join(format!("{}.img", blake3::hash(bytes).to_hex()));
    if path.exists() {
        artifacts::mark_used(&path);
        return;
    }
    match artifacts::store_atomically_unsynced(&path, bytes) {
        Ok(()) => {
            artifacts::prune_unused(
                &images_dir(),
                "",
                &path,
                artifacts::UNUSED_AGE,
                Some(artifacts::images_max_bytes()),
            );
        }
        Err(e) => tracing::warn!("could not keep the memory image in {}: {e}", path.display()),
    }
}

/// A memory image mapped from its file, read-only: the source every slot of its project is
/// mapped from (copy-on-write) and restored from.
pub struct Image {
    hash: blake3::Hash,
    len: usize,
    file: File,
    /// A read-only shared mapping of the whole file.
    source: usize,
    /// How many memory slots map this image now (see [`Image::held`]).
    holders: std::sync::atomic::AtomicUsize,
}

// SAFETY: the mapping is read-only and lives as long as the value; the file is only mapped.
unsafe impl Send for Image {}
// SAFETY: as above: nothing writes through `source`.
unsafe impl Sync for Image {}

impl Image {
    /// The image whose bytes hash to `expected`, from `dir/<expected>.img` if that file passes
    /// `checked_code`'s checks and hashes so, else written there from `bytes()` first (which
    /// must hash to `expected`). A refused file is logged, removed and written again.
    pub fn load(
        dir: &Path,
        expected: &blake3::Hash,
        bytes: impl FnOnce() -> Result<Vec<u8>, String>,
    ) -> Result<Self, ImageError> {
        let path = dir.join(format!("{}.img", expected.to_hex()));
        let failed = |reason: String| ImageError::File {
            path: path.display().to_string(),
            reason,
        };
        match checked_code::open(&path).and_then(|opened| opened.expect(expected)) {
            Ok(verified) => {
                artifacts::mark_used(&path);
                return Self::map(*expected, verified.into_file()).map_err(failed);
            }
            Err(Refusal::Missing) => {}
            Err(refusal) => checked_code::discard(&path, &refusal),
        }
        let bytes = bytes().map_err(&failed)?;
        if blake3::hash(&bytes) != *expected {
            return Err(failed(
                "the build cache's image does not hash to what its manifest records: run `filerouter build` again".into(),
            ));
        }
        // Not synced: a file lost or torn in a crash is refused by its hash and written again.
        if let Err(e) = artifacts::store_atomically_unsynced(&path, &bytes) {
            tracing::warn!(
                "could not write the memory image {}: {e}; keeping it in memory instead",
                path.display()
            );
            return Self::in_memory(*expected, &bytes).map_err(failed);
        }
        artifacts::prune_unused(
            dir,
            "",
            &path,
            artifacts::UNUSED_AGE,
            Some(artifacts::images_max_bytes()),
        );
        match checked_code::open(&path).and_then(|opened| opened.expect(expected)) {
            Ok(verified) => Self::map(*expected, verified.into_file()).map_err(failed),
            Err(refusal) => Err(failed(refusal.to_string())),
        }
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
        Self::map(hash, file)
    }

    fn map(hash: blake3::Hash, file: File) -> Result<Self, String> {
        let len = file
            .metadata()
            .map_err(|e| e.to_string())?
            .len()
            .try_into()
            .map_err(|_| "too large".to_string())?;
        if len == 0 || len % WASM_PAGE != 0 || len > MAX_IMAGE_BYTES {
            return Err(format!("{len} bytes is not a whole number of wasm pages"));
        }
        // SAFETY: a fresh read-only shared mapping of a regular file of `len` bytes that only
        // this process's user may change (checked in `checked_code::open`).
        let source = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if source == libc::MAP_FAILED {
            return Err(format!("map: {}", std::io::Error::last_os_error()));
        }
        Ok(Self {
            hash,
            len,
            file,
            source: source as usize,
            holders: std::sync::atomic::AtomicUsize::new(0),
        })
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

    /// The BLAKE3 hash of the image's bytes: its identity.
    pub fn hash(&self) -> &blake3::Hash {
        &self.hash
    }

    /// Its size in bytes (whole wasm pages).
    pub fn size(&self) -> usize {
        self.len
    }

    /// The file, for mapping it copy-on-write into a slot.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }

    /// The image's bytes from `offset`, `len` of them (within the image).
    pub fn source(&self, offset: usize, len: usize) -> *const u8 {
        debug_assert!(offset + len <= self.len);
        (self.source + offset) as *const u8
    }

    /// The image's bytes, read-only (tests compare memories with them).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `source` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.source as *const u8, self.len) }
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
            "Image({}, {} bytes)",
            &self.hash.to_hex()[..12],
            self.len
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
}
