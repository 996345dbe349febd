//! bcrypt as PyPI's `bcrypt` package (4.x) computes it: `hashpw`'s parsing of the setting
//! (`$2b$12$` and 22 characters of salt, or a whole hash), its 72-byte truncation of the
//! password, its output, and `kdf` (OpenBSD's `bcrypt_pbkdf`). The Blowfish rounds come from
//! the `blowfish` crate; the `2^cost` key expansions are looped here so that a [`Meter`] can
//! stop them.

use blowfish::Blowfish;
use sha2_11::{Digest, Sha512};

use super::{Meter, PasswordError, check, constant_time_eq, invalid};

/// bcrypt's base64 alphabet (not the standard one).
const ALPHABET: &[u8; 64] = b"./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// The costs bcrypt accepts (log2 of the key expansions).
pub const COSTS: std::ops::RangeInclusive<u32> = 4..=31;

/// The most bytes of a password bcrypt uses; the rest is ignored (bcrypt 4.x truncates).
pub const MAX_PASSWORD: usize = 72;

/// Key expansions between two questions to the meter (about 0.5 ms at native speed).
const EXPANSIONS_PER_CHECK: u64 = 8;

/// `hashpw(password, setting)`: the 60-byte hash of `password` with the version, cost and salt
/// of `setting` (`$2b$12$` followed by 22 characters of salt, then anything: a whole hash
/// works). Errors are PyPI bcrypt's, `Invalid salt`.
pub fn hash(
    password: &[u8],
    setting: &[u8],
    meter: &mut dyn Meter,
) -> Result<Vec<u8>, PasswordError> {
    let (version, cost, salt) = parse(setting)?;
    let raw = bcrypt_raw(cost, &salt, password, meter)?;
    let mut out = format!("${version}${cost:02}$").into_bytes();
    out.extend(encode(&salt));
    out.extend(encode(&raw[..23]));
    Ok(out)
}

/// `checkpw(password, hashed)`: whether hashing `password` with `hashed` as the setting gives
/// `hashed` back, compared in constant time.
pub fn check_password(
    password: &[u8],
    hashed: &[u8],
    meter: &mut dyn Meter,
) -> Result<bool, PasswordError> {
    let again = hash(password, hashed, meter)?;
    Ok(constant_time_eq(&again, hashed))
}

/// `kdf(password, salt, desired_key_bytes, rounds)`: OpenBSD's `bcrypt_pbkdf`, as OpenSSH
/// derives keys with it. Both inputs non-empty, 1 to 512 bytes out, at least one round.
pub fn kdf(
    password: &[u8],
    salt: &[u8],
    length: u32,
    rounds: u32,
    meter: &mut dyn Meter,
) -> Result<Vec<u8>, PasswordError> {
    if password.is_empty() || salt.is_empty() {
        return invalid("password and salt must not be empty");
    }
    if length == 0 || length > 512 {
        return invalid("desired_key_bytes must be 1-512");
    }
    if rounds == 0 {
        return invalid("rounds must be 1 or more");
    }
    let length = length as usize;
    let stride = length.div_ceil(32);
    let sha2_pass = Sha512::digest(password);
    let mut generated = vec![0u8; stride * 32];
    for (block, chunk) in generated.chunks_mut(32).enumerate() {
        check(meter)?;
        // PBKDF2 with bhash as the PRF, keyed by SHA-512 of the password.
        let mut salted = Sha512::new();
        salted.update(salt);
        salted.update((block as u32 + 1).to_be_bytes());
        let mut u = bhash(&sha2_pass, &salted.finalize());
        chunk.copy_from_slice(&u);
        for _ in 1..rounds {
            check(meter)?;
            u = bhash(&sha2_pass, &Sha512::digest(u));
            for (t, x) in chunk.iter_mut().zip(u) {
                *t ^= x;
            }
        }
    }
    // bcrypt_pbkdf's interleaving: byte i comes from block i % stride.
    Ok((0..length)
        .map(|i| generated[(i % stride) * 32 + i / stride])
        .collect())
}

/// The version, cost and 16-byte salt of a setting, as PyPI bcrypt's `hashpw` reads them.
fn parse(setting: &[u8]) -> Result<(&str, u32, [u8; 16]), PasswordError> {
    let bad = || PasswordError::Invalid("Invalid salt".into());
    let parts: Vec<&[u8]> = setting
        .split(|&b| b == b'$')
        .filter(|s| !s.is_empty())
        .collect();
    let &[version, cost, rest] = parts.as_slice() else {
        return Err(bad());
    };
    let version = match version {
        b"2a" => "2a",
        b"2b" => "2b",
        b"2x" => "2x",
        b"2y" => "2y",
        _ => return Err(bad()),
    };
    let cost: u32 = std::str::from_utf8(cost)
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    if !COSTS.contains(&cost) || rest.len() < 22 {
        return Err(bad());
    }
    let salt = decode_salt(&rest[..22]).ok_or_else(bad)?;
    Ok((version, cost, salt))
}

/// 22 characters of bcrypt's base64 as 16 bytes; None if a character is not in the alphabet
/// or the last one has bits past the 128th set (as the `base64` crate refuses them).
fn decode_salt(text: &[u8]) -> Option<[u8; 16]> {
    let mut bits: u32 = 0;
    let mut held = 0;
    let mut out = [0u8; 16];
    let mut n = 0;
    for &c in text {
        let value = ALPHABET.iter().position(|&a| a == c)? as u32;
        bits = (bits << 6) | value;
        held += 6;
        if held >= 8 {
            held -= 8;
            if n < 16 {
                out[n] = (bits >> held) as u8;
                n += 1;
            }
            bits &= (1 << held) - 1;
        }
    }
    (n == 16 && bits == 0).then_some(out)
}

/// bcrypt's base64, without padding.
fn encode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() * 4 / 3 + 1);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]);
        }
    }
    out
}

/// The raw bcrypt of `password` (its first 72 bytes, NUL-terminated when shorter, as the
/// `bcrypt` crate and OpenBSD use it): EksBlowfish, then "OrpheanBeholderScryDoubt"
/// encrypted 64 times.
fn bcrypt_raw(
    cost: u32,
    salt: &[u8; 16],
    password: &[u8],
    meter: &mut dyn Meter,
) -> Result<[u8; 24], PasswordError> {
    debug_assert!(COSTS.contains(&cost));
    let mut key = Vec::with_capacity(MAX_PASSWORD);
    key.extend_from_slice(&password[..password.len().min(MAX_PASSWORD)]);
    if key.len() < MAX_PASSWORD {
        key.push(0);
    }
    let mut state = Blowfish::bc_init_state();
    state.salted_expand_key(salt, &key);
    for round in 0..1u64 << cost {
        if round % EXPANSIONS_PER_CHECK == 0 {
            check(meter)?;
        }
        state.bc_expand_key(&key);
        state.bc_expand_key(salt);
    }
    // "OrpheanBeholderScryDoubt"
    let mut ctext = [
        0x4f72_7068u32,
        0x6561_6e42,
        0x6568_6f6c,
        0x6465_7253,
        0x6372_7944,
        0x6f75_6274,
    ];
    let mut output = [0u8; 24];
    for i in (0..6).step_by(2) {
        for _ in 0..64 {
            let [l, r] = state.bc_encrypt([ctext[i], ctext[i + 1]]);
            ctext[i] = l;
            ctext[i + 1] = r;
        }
        output[i * 4..i * 4 + 4].copy_from_slice(&ctext[i].to_be_bytes());
        output[i * 4 + 4..i * 4 + 8].copy_from_slice(&ctext[i + 1].to_be_bytes());
    }
    Ok(output)
}

/// `bcrypt_pbkdf`'s PRF: a bcrypt-like hash of two SHA-512 digests.
fn bhash(sha2_pass: &[u8], sha2_salt: &[u8]) -> [u8; 32] {
    let mut state = Blowfish::bc_init_state();
    state.salted_expand_key(sha2_salt, sha2_pass);
    for _ in 0..64 {
        state.bc_expand_key(sha2_salt);
        state.bc_expand_key(sha2_pass);
    }
    let seed = b"OxychromaticBlowfishSwatDynamite";
    let mut cdata = [0u32; 8];
    for (i, word) in cdata.iter_mut().enumerate() {
        *word = u32::from_be_bytes([
            seed[i * 4],
            seed[i * 4 + 1],
            seed[i * 4 + 2],
            seed[i * 4 + 3],
        ]);
    }
    for _ in 0..64 {
        for i in (0..8).step_by(2) {
            let [l, r] = state.bc_encrypt([cdata[i], cdata[i + 1]]);
            cdata[i] = l;
            cdata[i + 1] = r;
        }
    }
    let mut out = [0u8; 32];
    for (i, word) in cdata.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&word.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passwords::unmetered;

    fn hashed(password: &[u8], setting: &[u8]) -> String {
        String::from_utf8(hash(password, setting, &mut unmetered()).unwrap()).unwrap()
    }

    #[test]
    fn known_hashes() {
        // OpenBSD's and jBCrypt's test vectors.
        let h = "$2a$06$DCq7YPn5Rq63x1Lad4cll.TV4S6ytwfsfvkgY8jIucDrjc8deX1s.";
        assert_eq!(hashed(b"", h.as_bytes()), h);
        let h = "$2a$06$m0CrhHm10qJ3lXRY.5zDGO3rS2KdeeWLuGmsfGlMfOxih58VYVfxe";
        assert_eq!(hashed(b"a", h.as_bytes()), h);
        let h = "$2a$10$fVH8e28OQRj9tqiDXs1e1uxpsjN0c7II7YPKXua2NAKYvM6iQk7dq";
        assert_eq!(hashed(b"abcdefghijklmnopqrstuvwxyz", h.as_bytes()), h);
        // The 8-bit test passlib runs: correct for 2a, not crypt_blowfish's buggy 2x.
        let good = "$2a$05$6bNw2HLQYeqHYyBfLMsv/OUcZd0LKP39b87nBw3.S2tVZSqiQX6eu";
        assert_eq!(hashed("\u{451}".as_bytes(), good.as_bytes()), good);
        // The version is kept; a setting alone (no checksum) works.
        let setting = "$2b$04$R1lJ2gkNaoPGdafE.H.16.";
        let h = hashed(b"x", setting.as_bytes());
        assert!(h.starts_with(setting) && h.len() == 60, "{h}");
    }

    #[test]
    fn long_passwords_are_truncated_at_72_bytes() {
        // passlib's wraparound test: "0123456789" * 26, first 255 bytes, with 2a.
        let secret = &b"0123456789".repeat(26)[..255];
        let correct = "$2a$04$R1lJ2gkNaoPGdafE.H.16.1MKHPvmKwryeulRe225LKProWYwt9Oi";
        assert!(check_password(secret, correct.as_bytes(), &mut unmetered()).unwrap());
        let bug = "$2a$04$R1lJ2gkNaoPGdafE.H.16.nVyh2niHsGJhayOHLMiXlI45o8/DU.6";
        assert!(!check_password(secret, bug.as_bytes(), &mut unmetered()).unwrap());
    }

    #[test]
    fn bad_settings_are_invalid_salt() {
        for setting in [
            &b""[..],
            b"$2b$12$",
            b"$2$04$5BJqKfqMQvV7nS.yUguNcuRfMMOXK0xPWavM7pOzjEi5ze5T1k8/S",
            b"$2c$12$R1lJ2gkNaoPGdafE.H.16.",
            b"$2b$03$R1lJ2gkNaoPGdafE.H.16.",
            b"$2b$32$R1lJ2gkNaoPGdafE.H.16.",
            b"$2b$xx$R1lJ2gkNaoPGdafE.H.16.",
            b"$2b$12$R1lJ2gkNaoPGdafE.H.16",
            b"$2b$12$R1lJ2gkNaoPGdafE.H.16/",
            b"$2b$12$R1lJ2gkNaoPGdafE.H.1!.",
            b"$2b$12$R1lJ2gkNaoPGd$afE.H.16.",
        ] {
            assert_eq!(
                hash(b"x", setting, &mut unmetered()),
                Err(PasswordError::Invalid("Invalid salt".into())),
                "{}",
                String::from_utf8_lossy(setting)
            );
        }
    }

    #[test]
    fn a_meter_stops_a_costly_hash() {
        let mut asked = 0;
        let mut meter = || {
            asked += 1;
            asked < 3
        };
        let setting = b"$2b$31$R1lJ2gkNaoPGdafE.H.16.";
        assert_eq!(hash(b"x", setting, &mut meter), Err(PasswordError::Stopped));
    }

    #[test]
    fn kdf_matches_openbsd() {
        // bcrypt's own test vector (pyca/bcrypt tests/test_bcrypt.py).
        let key = kdf(b"password", b"salt", 32, 4, &mut unmetered()).unwrap();
        assert_eq!(
            hex::encode(key),
            "5bbf0cc293587f1c3635555c27796598d47e579071bf427e9d8fbe842aba34d9"
        );
        assert!(kdf(b"", b"salt", 32, 4, &mut unmetered()).is_err());
        assert!(kdf(b"p", b"salt", 513, 4, &mut unmetered()).is_err());
        assert!(kdf(b"p", b"salt", 32, 0, &mut unmetered()).is_err());
    }
}
