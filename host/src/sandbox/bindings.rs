//! Rust bindings for `wit/filerouter.wit`, generated at compile time.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "router",
    exports: { default: async },
    additional_derives: [PartialEq, serde::Serialize, serde::Deserialize],
});
