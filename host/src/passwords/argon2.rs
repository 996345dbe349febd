//! Argon2 (RFC 9106) raw hashes, as argon2-cffi's `hash_secret_raw` computes them with the
//! reference C library: the same parameter rules and error messages (libargon2's), versions
//! 0x10 and 0x13. The computation is the `argon2` crate's, in one step: it cannot be stopped
//! in the middle, so its work is bounded ([`ARGON2_MAX_WORK_KIB`]) and its memory is at most
//! the request's memory limit.

use argon2::{Algorithm, Argon2, Params, Version};

use super::{MAX_OUTPUT, Meter, PasswordError, check, invalid};

/// Argon2's three variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Argon2Variant {
    D,
    I,
    Id,
}

/// The most work one Argon2 call may do, as `time_cost × memory_cost` (KiB of memory filled,
/// summed over the passes): 2 GiB, 1.5 s of CPU on this project's 2-core machines (4 GiB
/// measured 3.05 s). argon2-cffi's default (3 passes over 64 MiB: 192 MiB) is far below;
/// RFC 9106's high-memory profile (1 pass over 2 GiB) is at the bound.
pub const ARGON2_MAX_WORK_KIB: u64 = 2 << 20;

/// `hash_secret_raw(secret, salt, time_cost, memory_cost, parallelism, hash_len, type,
/// version)`, with `memory_cost` (KiB) also at most `memory_cap` bytes.
#[allow(clippy::too_many_arguments)]
pub fn hash_raw(
    variant: Argon2Variant,
    version: u32,
    secret: &[u8],
    salt: &[u8],
    time_cost: u32,
    memory_cost: u32,
    parallelism: u32,
    hash_len: u32,
    memory_cap: u64,
    meter: &mut dyn Meter,
) -> Result<Vec<u8>, PasswordError> {
    // libargon2's checks, in its order, with its messages.
    if hash_len < 4 {
        return invalid("Output is too short");
    }
    if hash_len as usize > MAX_OUTPUT {
        return invalid(format!(
            "Output is too long (the sandbox's bound is {MAX_OUTPUT} bytes)"
        ));
    }
    if salt.len() < 8 {
        return invalid("Salt is too short");
    }
    if memory_cost < 8 || u64::from(memory_cost) < 8 * u64::from(parallelism) {
        return invalid("Memory cost is too small");
    }
    if time_cost < 1 {
        return invalid("Time cost is too small");
    }
    if parallelism < 1 {
        return invalid("Too few lanes");
    }
    if parallelism > Params::MAX_P_COST {
        return invalid("Too many lanes");
    }
    let version = match version {
        0x10 => Version::V0x10,
        0x13 => Version::V0x13,
        _ => return invalid("There is no such version of Argon2"),
    };
    if u64::from(memory_cost) * 1024 > memory_cap {
        return invalid(format!(
            "Memory cost is too large: {memory_cost} KiB is over the request's memory limit of {} KiB (memory_mb)",
            memory_cap / 1024
        ));
    }
    if u64::from(time_cost) * u64::from(memory_cost) > ARGON2_MAX_WORK_KIB {
        return invalid(format!(
            "Time cost is too large: time_cost × memory_cost may be at most {ARGON2_MAX_WORK_KIB} (KiB) in the sandbox"
        ));
    }
    let algorithm = match variant {
        Argon2Variant::D => Algorithm::Argon2d,
        Argon2Variant::I => Algorithm::Argon2i,
        Argon2Variant::Id => Algorithm::Argon2id,
    };
    let params = Params::new(memory_cost, time_cost, parallelism, Some(hash_len as usize))
        .or_else(|e| invalid(e.to_string()))?;
    check(meter)?;
    let mut out = vec![0u8; hash_len as usize];
    Argon2::new(algorithm, version, params)
        .hash_password_into(secret, salt, &mut out)
        .or_else(|e| invalid(e.to_string()))?;
    check(meter)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passwords::unmetered;

    #[test]
    fn rfc_9106_shaped_vectors() {
        // The reference implementation's test vectors (argon2 `test.c`): password "password",
        // salt "somesalt", t=2, m=65536, p=1, 32 bytes.
        let run = |variant, version| {
            hex::encode(
                hash_raw(
                    variant,
                    version,
                    b"password",
                    b"somesalt",
                    2,
                    1 << 16,
                    1,
                    32,
                    1 << 30,
                    &mut unmetered(),
                )
                .unwrap(),
            )
        };
        assert_eq!(
            run(Argon2Variant::I, 0x13),
            "c1628832147d9720c5bd1cfd61367078729f6dfb6f8fea9ff98158e0d7816ed0"
        );
        assert_eq!(
            run(Argon2Variant::I, 0x10),
            "f6c4db4a54e2a370627aff3db6176b94a2a209a62c8e36152711802f7b30c694"
        );
    }

    #[test]
    fn libargon2_rules_and_sandbox_bounds() {
        let run = |t, m, p, len, salt: &[u8], cap| {
            hash_raw(
                Argon2Variant::Id,
                0x13,
                b"pw",
                salt,
                t,
                m,
                p,
                len,
                cap,
                &mut unmetered(),
            )
        };
        let message = |r: Result<Vec<u8>, PasswordError>| match r {
            Err(PasswordError::Invalid(m)) => m,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            message(run(1, 8, 1, 3, b"saltsalt", 1 << 30)),
            "Output is too short"
        );
        assert_eq!(
            message(run(1, 8, 1, 4, b"salt", 1 << 30)),
            "Salt is too short"
        );
        assert_eq!(
            message(run(1, 7, 1, 4, b"saltsalt", 1 << 30)),
            "Memory cost is too small"
        );
        assert_eq!(
            message(run(1, 31, 4, 4, b"saltsalt", 1 << 30)),
            "Memory cost is too small"
        );
        assert_eq!(
            message(run(0, 8, 1, 4, b"saltsalt", 1 << 30)),
            "Time cost is too small"
        );
        assert_eq!(
            message(run(1, 8, 0, 4, b"saltsalt", 1 << 30)),
            "Too few lanes"
        );
        assert!(message(run(1, 2048, 1, 4, b"saltsalt", 1 << 20)).contains("memory_mb"));
        assert!(
            message(run(1 << 20, 8, 1, 4, b"saltsalt", 1 << 30)).contains("Time cost is too large")
        );
        assert_eq!(run(1, 8, 1, 4, b"saltsalt", 1 << 30).unwrap().len(), 4);
    }
}
