//! The host services the guest imports (`wit/filerouter.wit`): `kv`, the project's key-value
//! store; `upstream`, which hands middleware's `call_next` the host's own answer; and
//! `plugins`, calls into the project's plugins (`crate::plugins`). Each impl here only adapts
//! the generated trait to the service's own module.
//!
//! These are the only calls out of the sandbox besides WASI's clock, randomness and stdio.

use std::time::Duration;

use super::{
    CallState,
    bindings::filerouter::sandbox::{kv, plugins, types, upstream},
};
use crate::sandbox::{HttpRequest, HttpResponse};

/// Produces the host's answer for a request whose target the host serves itself. It keeps the
/// body on its own side and returns the status and headers (with an empty body).
pub type Upstream = Box<dyn FnMut(HttpRequest) -> HttpResponse + Send>;

impl types::Host for CallState {}

impl kv::Host for CallState {
    fn get(&mut self, key: String) -> Option<String> {
        self.kv.get(&key)
    }

    fn set(&mut self, key: String, value: String, ttl_ms: Option<u64>) -> Result<(), String> {
        self.kv
            .set(&key, value, ttl_ms.map(Duration::from_millis))
            .map_err(|e| e.to_string())
    }

    fn delete(&mut self, key: String) -> bool {
        self.kv.delete(&key)
    }

    fn incr(&mut self, key: String, by: i64, ttl_ms: Option<u64>) -> Result<i64, String> {
        self.kv
            .incr(&key, by, ttl_ms.map(Duration::from_millis))
            .map_err(|e| e.to_string())
    }
}

impl upstream::Host for CallState {
    fn respond(&mut self, request: HttpRequest) -> HttpResponse {
        match self.upstream.as_mut() {
            Some(answer) => answer(request),
            // Only a `host` target gets an upstream; the guest asks for it only then.
            None => HttpResponse {
                status: 500,
                headers: vec![("content-type".into(), "application/json".into())],
                body: br#"{"detail":"Internal Server Error"}"#.to_vec(),
                host_body: false,
            },
        }
    }
}

impl plugins::Host for CallState {
    fn describe(&mut self, plugin: String) -> Result<Vec<plugins::FunctionInfo>, String> {
        self.plugins.describe(&plugin)
    }

    async fn call(
        &mut self,
        plugin: String,
        function: String,
        args: Vec<plugins::Node>,
    ) -> wasmtime::Result<Result<Vec<plugins::Node>, plugins::CallError>> {
        self.plugins.call(&plugin, &function, args).await
    }
}
