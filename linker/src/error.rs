//! The linker's error type.
//!
//! Every error names the convention of wit-component's dynamic linking that was not found
//! (or the shape the linker does not handle), so that a guest built by a different
//! componentize-py fails loudly at build time instead of yielding a silently different
//! guest. Not a place for recovery logic: the linker never falls back to a partial link.

use thiserror::Error;

/// Why a component could not be statically linked.
#[derive(Debug, Error)]
pub enum LinkError {
    /// The input is not a well-formed component (or holds a malformed module).
    #[error("malformed input: {0}")]
    Parse(#[from] wasmparser::Error),

    /// Re-encoding an item failed.
    #[error("re-encoding failed: {0}")]
    Reencode(String),

    /// No instantiated module defines and exports the linear memory.
    #[error(
        "no module exports `memory`: expected wit-component's main (`env`) module to define and export it"
    )]
    NoMemoryExport,

    /// More than one instantiated module defines and exports `memory`.
    #[error(
        "more than one module exports a defined `memory` (modules {0} and {1}); expected a single main module"
    )]
    SeveralMainModules(u32, u32),

    /// The main module does not define and export the function table.
    #[error("the main module does not define and export `__indirect_function_table`")]
    NoTableExport,

    /// No module carries a `dylink.0` section.
    #[error("no library modules: expected modules with a `dylink.0` custom section")]
    NoLibraries,

    /// A module to be merged is instantiated a number of times other than once.
    #[error("module `{module}` is instantiated {count} times; expected exactly once")]
    InstantiatedTimes { module: String, count: usize },

    /// A library imports from an instance name its instantiation does not supply.
    #[error("library `{library}` imports `{module}.{name}`, which no module provides")]
    UnresolvedImport {
        library: String,
        module: String,
        name: String,
    },

    /// An import resolves to an item of a different kind.
    #[error(
        "library `{library}` imports `{module}.{name}` as a {expected}, but it resolves to a {found}"
    )]
    KindMismatch {
        library: String,
        module: String,
        name: String,
        expected: &'static str,
        found: &'static str,
    },

    /// A library imports a memory other than the main module's.
    #[error(
        "library `{library}` imports `{module}.{name}`, a memory other than the main module's `memory`"
    )]
    ForeignMemory {
        library: String,
        module: String,
        name: String,
    },

    /// A module to be merged defines a memory of its own.
    #[error("module `{0}` defines a memory of its own; only the main module may")]
    ExtraMemory(String),

    /// A global initializer or segment offset cannot be folded to a constant.
    #[error("{what} in `{module}` is not a constant after folding the base globals")]
    NotConstant { module: String, what: String },

    /// A construct the linker does not handle.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// An item needed before the merged instance exists depends on the merged instance.
    #[error(
        "circular dependency: {0} is needed to instantiate the merged module but depends on it"
    )]
    Cycle(String),

    /// The linked component does not validate (a linker bug; never returned silently).
    #[error("the linked component does not validate: {0}")]
    Invalid(String),
}

impl From<wasm_encoder::reencode::Error<LinkError>> for LinkError {
    fn from(e: wasm_encoder::reencode::Error<LinkError>) -> Self {
        match e {
            wasm_encoder::reencode::Error::UserError(e) => e,
            wasm_encoder::reencode::Error::ParseError(e) => LinkError::Parse(e),
            other => LinkError::Reencode(format!("{other:?}")),
        }
    }
}
