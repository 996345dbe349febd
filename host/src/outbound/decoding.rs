//! Decoding a response body's `content-encoding` (gzip, deflate) as httpx does, for
//! `filerouter.http`: its `.content`, `.text`, `.json()` and `iter_bytes()` are the decoded
//! body, its `headers` still show the encoding.
//!
//! As httpx: `gzip` and `x-gzip` are one gzip member; `deflate` is zlib-wrapped, or raw deflate
//! when the first bytes are not a zlib header (servers send both); `identity` and codings this
//! host cannot decode without native code (`br`, `zstd`, and unknown ones) leave the body as it
//! came, as httpx does without brotli or zstandard installed. A body with more than one coding
//! (`gzip, gzip`) is left as it came too: each stage could multiply the last one's output.
//!
//! The decoder takes its input in small slices ([`SLICE`]), so that one slice's output is
//! bounded (deflate expands at most about 1032 times) and the caller can count it against the
//! request's bound and wait for the guest to read before the next: a gzip bomb ends with a
//! limit error after at most a slice's output more than the bound, never with memory growth.
//!
//! Not for: which bytes are received or how many (`super::client`).

use std::io::Write;

use flate2::write::{DeflateDecoder, GzDecoder, ZlibDecoder};

/// How many encoded bytes are decoded at once: their output is at most about 0.5 MiB.
pub const SLICE: usize = 512;

/// A body that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("the response body does not decode as its content-encoding {coding} says: {reason}")]
pub struct DecodeError {
    coding: &'static str,
    reason: String,
}

/// One response body's decoder.
pub struct Decoder {
    coding: &'static str,
    stage: Stage,
}

enum Stage {
    Gzip(GzDecoder<Vec<u8>>),
    /// zlib-wrapped, until the first bytes show it is not (`seen` is what came meanwhile).
    Zlib {
        decoder: ZlibDecoder<Vec<u8>>,
        seen: Vec<u8>,
    },
    Raw(DeflateDecoder<Vec<u8>>),
}

/// How many bytes a zlib attempt may take before it is decided: the header is 2 bytes.
const ZLIB_DECIDED: usize = 64;

impl Decoder {
    /// The decoder for a response with `headers`, if its body is encoded in one coding this
    /// host decodes.
    pub fn for_headers(headers: &[(String, String)]) -> Option<Decoder> {
        let codings: Vec<String> = headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("content-encoding"))
            .flat_map(|(_, value)| value.split(','))
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty() && c != "identity")
            .collect();
        let [coding] = codings.as_slice() else {
            return None;
        };
        let (coding, stage) = match coding.as_str() {
            "gzip" | "x-gzip" => ("gzip", Stage::Gzip(GzDecoder::new(Vec::new()))),
            "deflate" => (
                "deflate",
                Stage::Zlib {
                    decoder: ZlibDecoder::new(Vec::new()),
                    seen: Vec::new(),
                },
            ),
            _ => return None,
        };
        Some(Decoder { coding, stage })
    }

    /// The decoded bytes of `input` (at most [`SLICE`] bytes, for a bounded output).
    pub fn feed(&mut self, input: &[u8]) -> Result<Vec<u8>, DecodeError> {
        debug_assert!(input.len() <= SLICE);
        let coding = self.coding;
        let failed = |e: std::io::Error| DecodeError {
            coding,
            reason: e.to_string(),
        };
        match &mut self.stage {
            Stage::Gzip(decoder) => {
                write_all(decoder, input).map_err(failed)?;
                Ok(std::mem::take(decoder.get_mut()))
            }
            Stage::Raw(decoder) => {
                write_all(decoder, input).map_err(failed)?;
                Ok(std::mem::take(decoder.get_mut()))
            }
            Stage::Zlib { decoder, seen } => match write_all(decoder, input) {
                Ok(()) => {
                    if seen.len() < ZLIB_DECIDED {
                        seen.extend_from_slice(input);
                    }
                    Ok(std::mem::take(decoder.get_mut()))
                }
                // Not zlib from its first bytes on: raw deflate, as httpx tries next.
                Err(_) if seen.len() < ZLIB_DECIDED && decoder.total_out() == 0 => {
                    let mut raw = DeflateDecoder::new(Vec::new());
                    let mut all = std::mem::take(seen);
                    all.extend_from_slice(input);
                    let mut out = Vec::new();
                    for slice in all.chunks(SLICE) {
                        write_all(&mut raw, slice).map_err(failed)?;
                        out.append(raw.get_mut());
                    }
                    self.stage = Stage::Raw(raw);
                    Ok(out)
                }
                Err(e) => Err(failed(e)),
            },
        }
    }

    /// What is left once the body ended (a truncated stream ends without an error, as
    /// httpx's `flush` does).
    pub fn finish(&mut self) -> Vec<u8> {
        match &mut self.stage {
            Stage::Gzip(decoder) => {
                let _ = decoder.try_finish();
                std::mem::take(decoder.get_mut())
            }
            Stage::Zlib { decoder, .. } => {
                let _ = decoder.try_finish();
                std::mem::take(decoder.get_mut())
            }
            Stage::Raw(decoder) => {
                let _ = decoder.try_finish();
                std::mem::take(decoder.get_mut())
            }
        }
    }
}

/// Write all of `input` to `decoder` and flush its output; bytes after the end of the
/// stream (a decoder that takes no more) are ignored, as httpx ignores them.
fn write_all(decoder: &mut impl Write, mut input: &[u8]) -> std::io::Result<()> {
    while !input.is_empty() {
        let n = decoder.write(input)?;
        if n == 0 {
            break;
        }
        input = &input[n..];
    }
    decoder.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{
        Compression,
        write::{DeflateEncoder, GzEncoder, ZlibEncoder},
    };

    fn headers(coding: &str) -> Vec<(String, String)> {
        vec![("content-encoding".into(), coding.into())]
    }

    fn decode_all(decoder: &mut Decoder, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for slice in body.chunks(SLICE) {
            out.extend(decoder.feed(slice).unwrap());
        }
        out.extend(decoder.finish());
        out
    }

    #[test]
    fn gzip_zlib_and_raw_deflate_decode() {
        let text = b"hello hello hello hello ".repeat(100);
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&text).unwrap();
        let mut zlib = ZlibEncoder::new(Vec::new(), Compression::default());
        zlib.write_all(&text).unwrap();
        let mut raw = DeflateEncoder::new(Vec::new(), Compression::default());
        raw.write_all(&text).unwrap();
        for (coding, body) in [
            ("gzip", gz.finish().unwrap()),
            ("X-Gzip", {
                let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
                gz.write_all(&text).unwrap();
                gz.finish().unwrap()
            }),
            ("deflate", zlib.finish().unwrap()),
            ("deflate", raw.finish().unwrap()),
        ] {
            let mut decoder = Decoder::for_headers(&headers(coding)).unwrap();
            assert_eq!(decode_all(&mut decoder, &body), text, "{coding}");
        }
    }

    #[test]
    fn other_codings_are_left_alone() {
        for coding in ["br", "zstd", "identity", "gzip, gzip", "compress", ""] {
            assert!(Decoder::for_headers(&headers(coding)).is_none(), "{coding}");
        }
        assert!(Decoder::for_headers(&[]).is_none());
    }

    #[test]
    fn one_slice_decodes_to_a_bounded_output() {
        let mut gz = GzEncoder::new(Vec::new(), Compression::best());
        gz.write_all(&vec![0u8; 64 << 20]).unwrap();
        let bomb = gz.finish().unwrap();
        let mut decoder = Decoder::for_headers(&headers("gzip")).unwrap();
        for slice in bomb.chunks(SLICE) {
            assert!(decoder.feed(slice).unwrap().len() <= 1100 * SLICE);
        }
    }

    #[test]
    fn garbage_is_an_error() {
        let mut decoder = Decoder::for_headers(&headers("gzip")).unwrap();
        assert!(decoder.feed(b"this is not gzip at all").is_err());
    }
}
