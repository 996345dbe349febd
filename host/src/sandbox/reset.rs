//! How a used instance slot becomes fresh again: which of its memory pages are restored from
//! the snapshot after a call, and how many stay mapped for the next call.
//!
//! Every call gets a fresh instance from wasmtime's pooling allocator. When an instance is
//! dropped, its slot's linear memory is put back to the snapshot's contents before the slot
//! is reused. On Linux 6.7 and later, wasmtime asks the kernel (`PAGEMAP_SCAN`) which pages
//! are private to the slot (written since they were mapped from the snapshot) and copies the
//! snapshot back over only those, up to [`KEEP_RESIDENT`]; pages past that budget are unmapped
//! and fault back in from the snapshot when next touched. Without `PAGEMAP_SCAN` it copies the
//! first [`KEEP_RESIDENT`] bytes back whether they changed or not, and unmaps the rest. Both
//! leave the slot indistinguishable from a fresh copy of the snapshot (`tests/isolation.rs`).
//!
//! `FILEROUTER_PAGEMAP_SCAN` chooses, read once when the engine is set up: `auto` (the
//! default: use it where the kernel has it), `on` (require it) or `off` (always copy; what a
//! kernel before 6.7 does, kept switchable so that path stays tested).
//!
//! This module decides how slots are reset; it does not size the pool (see [`super::engine`]).

use std::{fmt, sync::OnceLock};

use wasmtime::{Enabled, PoolingAllocationConfig};

/// The environment variable that chooses whether `PAGEMAP_SCAN` is used.
pub const ENV: &str = "FILEROUTER_PAGEMAP_SCAN";

/// How much of a slot's linear memory stays mapped between calls. With `PAGEMAP_SCAN` this is
/// a budget of pages written by earlier calls of the slot, each copied back from the snapshot
/// after every call; without it, the first this many bytes are copied back every time.
pub const KEEP_RESIDENT: usize = 32 << 20;

/// The same for tables (function references; a few pages per instance).
pub const TABLE_KEEP_RESIDENT: usize = 1 << 20;

/// A value of `FILEROUTER_PAGEMAP_SCAN` that is none of the accepted ones, or `on` where the
/// kernel lacks the feature.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    #[error("{ENV}={0:?} is not a valid setting: use auto, on or off")]
    Invalid(String),
    #[error(
        "{ENV}=on, but this kernel does not offer PAGEMAP_SCAN (Linux 6.7 or later): \
         use auto or off"
    )]
    Unavailable,
    /// One of the above, as first reported in this process.
    #[error("{0}")]
    Setting(String),
}

/// Whether `PAGEMAP_SCAN` is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagemapScan {
    /// Where the kernel offers it.
    Auto,
    /// Required: setting up the engine fails without it.
    On,
    /// Never: always copy the first [`KEEP_RESIDENT`] bytes.
    Off,
}

impl PagemapScan {
    fn parse(value: &str) -> Result<Self, ResetError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(Self::Auto),
            "on" | "yes" | "1" | "true" => Ok(Self::On),
            "off" | "no" | "0" | "false" => Ok(Self::Off),
            _ => Err(ResetError::Invalid(value.to_string())),
        }
    }
}

/// How slots are reset in this process: chosen once, when the engine is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetPolicy {
    pub wanted: PagemapScan,
    /// Whether the kernel offers `PAGEMAP_SCAN`.
    pub available: bool,
}

impl ResetPolicy {
    /// The policy `FILEROUTER_PAGEMAP_SCAN` asks for, on this kernel.
    pub fn from_env() -> Result<Self, ResetError> {
        let wanted = match std::env::var(ENV) {
            Ok(value) => PagemapScan::parse(&value)?,
            Err(std::env::VarError::NotPresent) => PagemapScan::Auto,
            Err(std::env::VarError::NotUnicode(value)) => {
                return Err(ResetError::Invalid(value.to_string_lossy().into_owned()));
            }
        };
        let available = pagemap_scan_available();
        if wanted == PagemapScan::On && !available {
            return Err(ResetError::Unavailable);
        }
        Ok(Self { wanted, available })
    }

    /// Whether reset uses `PAGEMAP_SCAN`.
    pub fn scans(&self) -> bool {
        self.available && self.wanted != PagemapScan::Off
    }

    /// Configure the pooling allocator accordingly.
    pub fn apply(&self, pool: &mut PoolingAllocationConfig) {
        pool.linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(TABLE_KEEP_RESIDENT)
            .pagemap_scan(if self.scans() {
                Enabled::Yes
            } else {
                Enabled::No
            });
    }
}

impl fmt::Display for ResetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = KEEP_RESIDENT >> 20;
        if self.scans() {
            write!(
                f,
                "dirty pages only (PAGEMAP_SCAN), up to {mib} MiB kept mapped per slot"
            )
        } else {
            let why = if self.wanted == PagemapScan::Off {
                format!("{ENV}=off")
            } else {
                "this kernel has no PAGEMAP_SCAN".to_string()
            };
            write!(f, "copy of the first {mib} MiB per slot ({why})")
        }
    }
}

/// The policy of this process: `FILEROUTER_PAGEMAP_SCAN` is read once, when the first engine
/// is set up.
pub fn policy() -> Result<ResetPolicy, ResetError> {
    static POLICY: OnceLock<Result<ResetPolicy, String>> = OnceLock::new();
    POLICY
        .get_or_init(|| ResetPolicy::from_env().map_err(|e| e.to_string()))
        .clone()
        .map_err(ResetError::Setting)
}

/// Whether this kernel offers `PAGEMAP_SCAN` (Linux 6.7 and later).
pub fn pagemap_scan_available() -> bool {
    PoolingAllocationConfig::is_pagemap_scan_available()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_in_any_case_and_nonsense_is_named() {
        assert_eq!(PagemapScan::parse("AUTO").unwrap(), PagemapScan::Auto);
        assert_eq!(PagemapScan::parse("").unwrap(), PagemapScan::Auto);
        assert_eq!(PagemapScan::parse("On").unwrap(), PagemapScan::On);
        assert_eq!(PagemapScan::parse("off").unwrap(), PagemapScan::Off);
        let error = PagemapScan::parse("sometimes").unwrap_err().to_string();
        assert!(
            error.contains("FILEROUTER_PAGEMAP_SCAN=\"sometimes\""),
            "{error}"
        );
        assert!(error.contains("auto, on or off"), "{error}");
    }

    #[test]
    fn off_never_scans_and_is_described_as_a_copy() {
        let policy = ResetPolicy {
            wanted: PagemapScan::Off,
            available: true,
        };
        assert!(!policy.scans());
        assert!(policy.to_string().starts_with("copy of the first"));
        let auto = ResetPolicy {
            wanted: PagemapScan::Auto,
            available: true,
        };
        assert!(auto.scans());
        assert!(auto.to_string().starts_with("dirty pages only"));
    }
}
