//! Rust bindings for `wit/filerouter.wit`, generated at compile time.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "router",
    exports: { default: async },
    // A plugin call instantiates and runs another component: it awaits, and may trap the
    // caller when the request runs out of time inside the plugin.
    // The data services wait for locks, the disk or the network on a blocking thread.
    imports: {
        "filerouter:sandbox/plugins.call": async | trappable,
        // Recorded and replayed (`crate::replay`): a replay that diverges traps the call.
        "filerouter:sandbox/kv": async | trappable,
        "filerouter:sandbox/environment": trappable,
        "filerouter:sandbox/upstream": trappable,
        // A statement's CPU is the request's: past its CPU limit the call traps, as at an
        // epoch tick.
        "filerouter:sandbox/sql": async | trappable,
        // Outbound HTTP waits on the network without holding the guest's thread.
        "filerouter:sandbox/outbound": async | trappable,
        // A stream's chunks wait for the client (back-pressure) without holding the guest's
        // thread, and so does waiting between chunks. Recorded and replayed too.
        "filerouter:sandbox/response-stream.start": trappable,
        "filerouter:sandbox/response-stream.write": async | trappable,
        "filerouter:sandbox/response-stream.wait": async | trappable,
        // A WebSocket's messages wait for the client, or for the socket, the same way.
        "filerouter:sandbox/websocket.accept": trappable,
        "filerouter:sandbox/websocket.receive": async | trappable,
        "filerouter:sandbox/websocket.send": async | trappable,
        "filerouter:sandbox/websocket.close": async | trappable,
        // Password hashing runs on the guest's thread (its CPU is the request's) and stops the
        // request when the budget says so.
        "filerouter:sandbox/passwords": trappable,
    },
    additional_derives: [PartialEq, serde::Serialize, serde::Deserialize],
});
