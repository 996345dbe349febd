//! The plugins of a build, as the build cache's `plugins` section holds them: for each plugin
//! its component, its native code for the build machine, and the exports its WIT declared
//! (the WIT itself is not needed at run time: the build checked the component against it).
//!
//! Layout: a little-endian `u64` length, a JSON header of that length listing each plugin's
//! name, exports and blob sizes, then the blobs in header order. The section is compressed,
//! checksummed and optionally encrypted with the rest of the cache (`crate::cache`).

use serde::{Deserialize, Serialize};

/// One plugin as the build cache holds it.
pub struct SealedPlugin {
    pub name: String,
    pub exports: Vec<String>,
    pub wasm: Vec<u8>,
    pub native: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct Header {
    name: String,
    exports: Vec<String>,
    wasm: u64,
    native: u64,
}

/// The section's bytes for `plugins`.
pub fn encode(plugins: &[SealedPlugin]) -> Vec<u8> {
    let header: Vec<Header> = plugins
        .iter()
        .map(|p| Header {
            name: p.name.clone(),
            exports: p.exports.clone(),
            wasm: p.wasm.len() as u64,
            native: p.native.len() as u64,
        })
        .collect();
    let header = serde_json::to_vec(&header).unwrap_or_default();
    let mut out = Vec::with_capacity(
        8 + header.len()
            + plugins
                .iter()
                .map(|p| p.wasm.len() + p.native.len())
                .sum::<usize>(),
    );
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    for plugin in plugins {
        out.extend_from_slice(&plugin.wasm);
        out.extend_from_slice(&plugin.native);
    }
    out
}

/// The plugins in a section's bytes; a message if they do not add up.
pub fn decode(bytes: &[u8]) -> Result<Vec<SealedPlugin>, String> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let truncated = || "the plugins section is truncated".to_string();
    let len_bytes: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(truncated)?;
    let header_len = usize::try_from(u64::from_le_bytes(len_bytes)).map_err(|_| truncated())?;
    let header_end = 8usize.checked_add(header_len).ok_or_else(truncated)?;
    let header: Vec<Header> =
        serde_json::from_slice(bytes.get(8..header_end).ok_or_else(truncated)?)
            .map_err(|e| format!("the plugins section is unreadable: {e}"))?;
    let mut at = header_end;
    let mut take = |n: u64| -> Result<Vec<u8>, String> {
        let n = usize::try_from(n).map_err(|_| truncated())?;
        let end = at.checked_add(n).ok_or_else(truncated)?;
        let slice = bytes.get(at..end).ok_or_else(truncated)?.to_vec();
        at = end;
        Ok(slice)
    };
    let mut out = Vec::with_capacity(header.len());
    for entry in header {
        let wasm = take(entry.wasm)?;
        let native = take(entry.native)?;
        out.push(SealedPlugin {
            name: entry.name,
            exports: entry.exports,
            wasm,
            native,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let plugins = vec![
            SealedPlugin {
                name: "a".into(),
                exports: vec!["x:y/z@1.0.0".into()],
                wasm: b"wasm-a".to_vec(),
                native: b"native-a".to_vec(),
            },
            SealedPlugin {
                name: "b".into(),
                exports: vec![],
                wasm: vec![1; 100],
                native: vec![],
            },
        ];
        let bytes = encode(&plugins);
        let back = decode(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].name, "a");
        assert_eq!(back[0].exports, plugins[0].exports);
        assert_eq!(back[1].wasm, plugins[1].wasm);
        assert!(decode(&[]).unwrap().is_empty());
        for cut in [5, 20, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
