//! What the sandbox needs of the project's plugins, as traits: a set that opens a session for
//! each call, and the session that answers the guest's `plugins` imports (`describe`, `call`).
//!
//! `crate::plugins` implements them (compiling, instantiating and calling plugin components);
//! the sandbox names none of its types, so the layers import one way: settings (`crate::config`)
//! at the bottom, the sandbox above them, the plugins above the sandbox. This module is not
//! where plugins are loaded or checked.

use std::{sync::Arc, time::Instant};

use crate::{kv::KvStore, scheduler::Budget};

use super::{MemoryLimiter, PluginCallError, PluginFunctionInfo, PluginNode, output::GuestOutput};

/// What a call's plugin session draws on: the call's memory cap and deadline, the project's
/// key-value store, and, in a scheduled call, its time budget and captured output.
pub struct PluginCall {
    /// The request's memory cap, shared with the route's instance.
    pub memory: MemoryLimiter,
    pub deadline: Instant,
    pub kv: Arc<KvStore>,
    /// The call's CPU budget in the scheduler (None while baking).
    pub time: Option<Budget>,
    /// Where the plugins' stdout and stderr go (None while baking).
    pub output: Option<GuestOutput>,
}

/// The project's plugins, as a sandbox holds them.
pub trait PluginSet: Send + Sync + std::fmt::Debug {
    /// A session for one call: no plugin instance is made until the guest calls a plugin.
    fn open(&self, call: PluginCall) -> Box<dyn PluginSession>;
}

/// One call's plugins: the instances it has made so far, dropped with the session.
#[async_trait::async_trait]
pub trait PluginSession: Send {
    /// `plugins.describe`: the functions of plugin `name`.
    fn describe(&self, name: &str) -> Result<Vec<PluginFunctionInfo>, String>;

    /// `plugins.call`: call `function` of plugin `name`. An `Err` (a trap) stops the request.
    async fn call(
        &mut self,
        name: &str,
        function: &str,
        args: Vec<PluginNode>,
    ) -> wasmtime::Result<Result<Vec<PluginNode>, PluginCallError>>;
}

/// What the guest hears from a call of a project without plugins.
pub fn no_plugins(name: &str) -> String {
    format!(
        "no plugin named `{name}`: config.py declares no plugins (plugins = {{\"{name}\": {{\"component\": \"plugins/{name}/{name}.wasm\"}}}})"
    )
}
