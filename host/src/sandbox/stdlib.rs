//! The guest's standard library as compiled code: every pure-Python module of the CPython that
//! runs route code, compiled by that CPython when the binary was built (`host/stdlib.py`, run by
//! `host/build.rs`) and embedded here zstd-compressed.
//!
//! The guest asks for a module's code (`stdlib.get` in `wit/filerouter.wit`) when route code
//! imports one its snapshot does not hold (`guest-python/sandbox/importing.py`), so such an import costs
//! an unmarshal in the guest, never a compile. The modules imported while the guest was built
//! are in its snapshot and never asked for. Decompressed once per process, on the first request
//! for a module, and shared by every project and instance. Not for: anything but the standard
//! library (the project's packages are mounted in `dev` and baked by `build`).

use std::{collections::HashMap, sync::LazyLock};

/// What `host/stdlib.py` wrote, zstd-compressed by `host/build.rs`.
const COMPRESSED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/stdlib.bin.zst"));
const MAGIC: &[u8] = b"FRSTDLB1";

/// The modules, by dotted name.
pub struct Stdlib {
    data: Vec<u8>,
    modules: HashMap<String, Entry>,
}

struct Entry {
    package: bool,
    start: usize,
    end: usize,
}

/// One module: its code, as `marshal.dumps` of a code object of the guest's CPython.
pub struct Module<'a> {
    pub code: &'a [u8],
    /// Whether it is a package (its submodules are modules of their own).
    pub package: bool,
}

static STDLIB: LazyLock<Result<Stdlib, String>> = LazyLock::new(|| {
    let data = zstd::decode_all(COMPRESSED)
        .map_err(|e| format!("decompress the built-in standard library: {e}"))?;
    Stdlib::parse(data)
});

/// The module `name` (`xml.dom.minidom`), if the standard library has it as Python code.
pub fn get(name: &str) -> Option<Module<'static>> {
    match &*STDLIB {
        Ok(stdlib) => stdlib.get(name),
        Err(why) => {
            tracing::error!("{why}");
            None
        }
    }
}

impl Stdlib {
    /// Reads `host/stdlib.py`'s format: the magic, a count, then per module a name, flags and
    /// code, each length-prefixed (little-endian).
    fn parse(data: Vec<u8>) -> Result<Stdlib, String> {
        let bad = |what: &str| format!("the built-in standard library is damaged: {what}");
        if !data.starts_with(MAGIC) {
            return Err(bad("no magic"));
        }
        let mut at = MAGIC.len();
        let mut take = |n: usize| -> Result<(usize, usize), String> {
            let end = at.checked_add(n).filter(|&e| e <= data.len());
            let end = end.ok_or_else(|| bad("cut short"))?;
            let start = at;
            at = end;
            Ok((start, end))
        };
        let le = |range: (usize, usize)| {
            data[range.0..range.1]
                .iter()
                .rev()
                .fold(0usize, |n, &b| (n << 8) | usize::from(b))
        };
        let count = le(take(4)?);
        let mut modules = HashMap::with_capacity(count);
        for _ in 0..count {
            let name_len = le(take(2)?);
            let (s, e) = take(name_len)?;
            let name = std::str::from_utf8(&data[s..e])
                .map_err(|_| bad("a name is not UTF-8"))?
                .to_string();
            let flags = le(take(1)?);
            let code_len = le(take(4)?);
            let (start, end) = take(code_len)?;
            modules.insert(
                name,
                Entry {
                    package: flags & 1 == 1,
                    start,
                    end,
                },
            );
        }
        Ok(Stdlib { data, modules })
    }

    fn get(&self, name: &str) -> Option<Module<'_>> {
        let entry = self.modules.get(name)?;
        Some(Module {
            code: &self.data[entry.start..entry.end],
            package: entry.package,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_standard_library_holds_modules_and_packages() {
        let email = get("email.mime").expect("email.mime");
        assert!(email.package);
        let text = get("email.mime.text").expect("email.mime.text");
        assert!(!text.package);
        // marshal's code-object type byte (with or without its reference flag).
        assert_eq!(text.code[0] & 0x7f, b'c');
        for present in [
            "timeit",
            "configparser",
            "xml.dom.minidom",
            "encodings.cp1250",
        ] {
            assert!(get(present).is_some(), "{present}");
        }
        // The guest's own stand-ins, and what cannot run, are not in it.
        for absent in [
            "sqlite3",
            "sqlite3.dump",
            "ssl",
            "tkinter",
            "json.__main__",
            "nope",
        ] {
            assert!(get(absent).is_none(), "{absent}");
        }
    }

    #[test]
    fn a_damaged_blob_is_refused() {
        assert!(Stdlib::parse(b"nope".to_vec()).is_err());
        let mut cut = MAGIC.to_vec();
        cut.extend_from_slice(&1u32.to_le_bytes());
        cut.extend_from_slice(&5u16.to_le_bytes());
        cut.extend_from_slice(b"ab");
        assert!(Stdlib::parse(cut).is_err());
    }
}
