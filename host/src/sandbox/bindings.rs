//! Rust bindings for `wit/filerouter.wit`, generated at compile time.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "router",
    exports: { default: async },
    // A plugin call instantiates and runs another component: it awaits, and may trap the
    // caller when the request runs out of time inside the plugin.
    imports: { "filerouter:sandbox/plugins.call": async | trappable },
    additional_derives: [PartialEq, serde::Serialize, serde::Deserialize],
});
