//! scrypt (RFC 7914), as `hashlib.scrypt` computes it with OpenSSL: the same parameter rules
//! (`n` a power of 2 above 1, `r` and `p` at least 1, `r × p` below 2^30, `n` below
//! 2^(16r)) and the same memory rule (`128·r·(n + 2) + 128·r·p` bytes at most `maxmem`, 32 MiB
//! when it is 0), and here also at most the request's memory limit. PBKDF2-HMAC-SHA256 is
//! [`super::pbkdf2`]'s; ROMix and Salsa20/8 are written out here, so that a [`Meter`] can
//! stop the mixing.

use hmac::Hmac;

use super::{MAX_OUTPUT, Meter, PasswordError, check, invalid, pbkdf2::derive};

/// OpenSSL's memory bound when `maxmem` is 0.
pub const DEFAULT_MAX_MEMORY: u64 = 32 * 1024 * 1024;

/// ROMix steps between two questions to the meter, for r = 1 (divided by r).
const STEPS_PER_CHECK: u64 = 8192;

/// What `hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=max_memory,
/// dklen=length)` returns, with its memory also bounded by `memory_cap` (the request's
/// memory limit).
#[allow(clippy::too_many_arguments)]
pub fn scrypt(
    password: &[u8],
    salt: &[u8],
    n: u64,
    r: u32,
    p: u32,
    max_memory: u64,
    length: u32,
    memory_cap: u64,
    meter: &mut dyn Meter,
) -> Result<Vec<u8>, PasswordError> {
    if n < 2 || !n.is_power_of_two() {
        return invalid("n must be a power of 2.");
    }
    if length == 0 {
        return invalid("dklen must be greater than 0 and smaller than 2147483647");
    }
    if length as usize > MAX_OUTPUT {
        return invalid(format!(
            "dklen is too great for the sandbox: at most {MAX_OUTPUT} bytes"
        ));
    }
    let parameters = "Invalid parameter combination for n, r, p, maxmem.";
    let (r64, p64) = (u64::from(r), u64::from(p));
    if r == 0 || p == 0 || p64 > ((1 << 30) - 1) / r64 {
        return invalid(parameters);
    }
    if 16 * r64 <= 63 && n >= 1u64 << (16 * r64) {
        return invalid(parameters);
    }
    let block = 128 * r64;
    let b_len = block * p64;
    if b_len > i32::MAX as u64 {
        return invalid(parameters);
    }
    let Some(v_len) = (n + 2).checked_mul(block) else {
        return invalid(parameters);
    };
    let needed = b_len.saturating_add(v_len);
    let allowed = if max_memory == 0 {
        DEFAULT_MAX_MEMORY
    } else {
        max_memory
    };
    if needed > allowed {
        return invalid(parameters);
    }
    if needed > memory_cap {
        return invalid(format!(
            "scrypt with n={n}, r={r}, p={p} needs {needed} bytes of memory, over the request's memory limit of {memory_cap} bytes (memory_mb)"
        ));
    }

    let mut b = vec![0u8; b_len as usize];
    derive::<Hmac<sha2_11::Sha256>>(password, salt, 1, &mut b, meter)?;
    let words = 32 * r as usize;
    let mut v = vec![0u32; words * n as usize];
    let mut x = vec![0u32; words];
    let mut scratch = vec![0u32; words];
    let check_every = (STEPS_PER_CHECK / r64).max(1);
    for lane in b.chunks_mut(block as usize) {
        for (word, bytes) in x.iter_mut().zip(lane.chunks_exact(4)) {
            *word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        for i in 0..n {
            if i % check_every == 0 {
                check(meter)?;
            }
            let at = i as usize * words;
            v[at..at + words].copy_from_slice(&x);
            block_mix(&mut x, &mut scratch);
        }
        for i in 0..n {
            if i % check_every == 0 {
                check(meter)?;
            }
            // Integerify: the first word of the last 64-byte block, modulo n (a power of 2).
            let last = &x[words - 16..];
            let j = (((u64::from(last[1]) << 32) | u64::from(last[0])) & (n - 1)) as usize;
            for (x, v) in x.iter_mut().zip(&v[j * words..(j + 1) * words]) {
                *x ^= v;
            }
            block_mix(&mut x, &mut scratch);
        }
        for (word, bytes) in x.iter().zip(lane.chunks_exact_mut(4)) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
    }
    let mut out = vec![0u8; length as usize];
    derive::<Hmac<sha2_11::Sha256>>(password, &b, 1, &mut out, meter)?;
    Ok(out)
}

/// scryptBlockMix with Salsa20/8 on `x` (2r 64-byte blocks as 16-word groups), in place.
fn block_mix(x: &mut [u32], scratch: &mut [u32]) {
    let blocks = x.len() / 16;
    let mut t = [0u32; 16];
    t.copy_from_slice(&x[(blocks - 1) * 16..]);
    for i in 0..blocks {
        for (t, x) in t.iter_mut().zip(&x[i * 16..i * 16 + 16]) {
            *t ^= x;
        }
        salsa20_8(&mut t);
        // Even blocks go to the first half, odd ones to the second.
        let to = if i % 2 == 0 {
            i / 2
        } else {
            blocks / 2 + i / 2
        };
        scratch[to * 16..to * 16 + 16].copy_from_slice(&t);
    }
    x.copy_from_slice(scratch);
}

/// The Salsa20/8 core on one 64-byte block.
fn salsa20_8(b: &mut [u32; 16]) {
    let mut x = *b;
    for _ in 0..4 {
        let quarter = |x: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize| {
            x[b] ^= x[a].wrapping_add(x[d]).rotate_left(7);
            x[c] ^= x[b].wrapping_add(x[a]).rotate_left(9);
            x[d] ^= x[c].wrapping_add(x[b]).rotate_left(13);
            x[a] ^= x[d].wrapping_add(x[c]).rotate_left(18);
        };
        // Columns, then rows.
        quarter(&mut x, 0, 4, 8, 12);
        quarter(&mut x, 5, 9, 13, 1);
        quarter(&mut x, 10, 14, 2, 6);
        quarter(&mut x, 15, 3, 7, 11);
        quarter(&mut x, 0, 1, 2, 3);
        quarter(&mut x, 5, 6, 7, 4);
        quarter(&mut x, 10, 11, 8, 9);
        quarter(&mut x, 15, 12, 13, 14);
    }
    for (b, x) in b.iter_mut().zip(x) {
        *b = b.wrapping_add(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passwords::unmetered;

    const CAP: u64 = 1 << 30;

    #[test]
    fn rfc_7914_vectors() {
        let run = |password: &[u8], salt: &[u8], n, r, p| {
            hex::encode(scrypt(password, salt, n, r, p, 0, 64, CAP, &mut unmetered()).unwrap())
        };
        assert_eq!(
            run(b"", b"", 16, 1, 1),
            "77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442\
             fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906"
        );
        assert_eq!(
            run(b"password", b"NaCl", 1024, 8, 16),
            "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162\
             2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640"
        );
        assert_eq!(
            run(b"pleaseletmein", b"SodiumChloride", 16384, 8, 1),
            "7023bdcb3afd7348461c06cd81fd38ebfda8fbba904f8e3ea9b543f6545da1f2\
             d5432955613f0fcf62d49705242a9af9e61e85dc0d651e40dfcf017b45575887"
        );
    }

    #[test]
    fn openssl_parameter_rules() {
        let mut m = unmetered();
        let bad = |n, r, p, maxmem| scrypt(b"p", b"s", n, r, p, maxmem, 64, CAP, &mut unmetered());
        assert!(bad(3, 8, 1, 0).is_err());
        assert!(bad(1, 8, 1, 0).is_err());
        assert!(bad(16, 0, 1, 0).is_err());
        assert!(bad(16, 8, 0, 0).is_err());
        assert!(bad(1 << 16, 1, 1, 0).is_err()); // n >= 2^(16r)
        assert!(bad(1 << 15, 8, 1, 0).is_err()); // 32 MiB + 2 KiB > the default maxmem
        assert!(bad(1 << 15, 8, 1, 64 << 20).is_ok());
        assert!(bad(16, 1 << 15, 1 << 15, i32::MAX as u64).is_err()); // r·p ≥ 2^30
        // The request's memory limit.
        assert!(matches!(
            scrypt(b"p", b"s", 1 << 14, 8, 1, 0, 64, 1 << 20, &mut m),
            Err(PasswordError::Invalid(message)) if message.contains("memory_mb")
        ));
    }

    #[test]
    fn a_meter_stops_the_mixing() {
        let mut meter = || false;
        assert_eq!(
            scrypt(b"p", b"s", 1 << 14, 8, 1, 0, 64, CAP, &mut meter),
            Err(PasswordError::Stopped)
        );
    }
}
