//! The guest's build, as a crate of its own: its build script (`build.rs` beside this file)
//! compiles pydantic-core for the sandbox, installs the pinned componentize-py, builds the
//! Python guest component from `guest-python/` and `wit/`, and has componentize-py compile the
//! guest's standard library. The host's build script (`host/build.rs`) links, compresses and
//! embeds what it made, which it finds through this package's `links` metadata
//! (`DEP_FILEROUTER_GUEST_*`). This library has no code.
//!
//! Why a crate: that work is minutes of a fresh build (pydantic-core with a second Rust
//! toolchain), and in one cargo run it starts only when cargo gets to it: after the crates that
//! many others depend on (cargo runs those first; few depend on this one), about halfway through
//! a fresh release build. As a crate it can be built alone, `cargo build -p filerouter-guest`,
//! which compiles nothing of the host's: CI (`.ci/run`) starts that at the beginning, beside the
//! release build, whose own run of this script then finds the results in `target/guest-tools/`.
//! And it no longer waits for the host's build-dependencies (the linker crate, zstd).
//!
//! Not for: linking the guest statically (`linker/`), compressing or embedding it
//! (`host/build.rs`), or anything at run time.
