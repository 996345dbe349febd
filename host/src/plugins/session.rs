//! One request's plugin calls: each plugin's instance is made on its first call in the request
//! (its own `Store`, under the request's memory budget, CPU budget and deadline) and dropped
//! with the request. A plugin the request never calls costs nothing.
//!
//! This is the host side of `plugins.describe` and `plugins.call` (`wit/filerouter.wit`); the
//! sandbox opens one `Session` per call through `crate::sandbox::plugin_calls`, which `Plugins`
//! implements.

use std::{collections::HashMap, sync::Arc, time::Instant};

use wasmtime::{
    Store, Trap, UpdateDeadline,
    component::{Instance, Val, types::Type},
};

use super::{Plugin, Plugins, engine, grants::PluginState, value};
use crate::{
    kv::KvStore,
    sandbox::{
        MemoryLimiter, PluginCallError as CallError, PluginFunctionInfo, PluginNode as Node,
        output::GuestOutput,
        plugin_calls::{PluginCall, PluginSession, PluginSet, no_plugins},
    },
    scheduler::Budget,
};

/// A plugin instance living for the rest of the request.
struct Live {
    store: Store<PluginState>,
    instance: Instance,
}

/// The plugins one request may call, and the instances it has made so far.
pub struct Session {
    plugins: Plugins,
    /// Shared with the route's instance: plugin memory counts against the request's cap.
    budget: MemoryLimiter,
    deadline: Instant,
    /// The request's time budget in the scheduler: plugin code counts against its CPU limit
    /// and may be stopped at any epoch tick, like route code. None while baking.
    time: Option<Budget>,
    /// The project's key-value store.
    kv: Arc<KvStore>,
    /// Where the plugins' stdout and stderr go: the request's captured output.
    output: Option<GuestOutput>,
    live: HashMap<String, Live>,
}

/// The sandbox opens one session per call of a project with plugins; a project without any
/// gets none (and the guest's calls hear that it declares none).
impl PluginSet for Plugins {
    fn open(&self, call: PluginCall) -> Box<dyn PluginSession> {
        Box::new(Session {
            plugins: self.clone(),
            budget: call.memory,
            deadline: call.deadline,
            time: call.time,
            kv: call.kv,
            output: call.output,
            live: HashMap::new(),
        })
    }
}

#[async_trait::async_trait]
impl PluginSession for Session {
    /// `plugins.describe`: the functions of `name`.
    fn describe(&self, name: &str) -> Result<Vec<PluginFunctionInfo>, String> {
        let plugin = self
            .plugins
            .get(name)
            .ok_or_else(|| self.unknown_plugin(name))?;
        Ok(plugin
            .functions
            .iter()
            .map(|f| PluginFunctionInfo {
                name: f.name.clone(),
                interface: f.interface.as_ref().map(|(_, python)| python.clone()),
                params: f
                    .params
                    .iter()
                    .map(|(n, _)| super::python_name(n))
                    .collect(),
                key: f.key(),
            })
            .collect())
    }

    /// `plugins.call`. An `Err` (a trap) stops the whole request: it is returned only when
    /// the request ran out of time inside the plugin.
    async fn call(
        &mut self,
        name: &str,
        key: &str,
        args: Vec<Node>,
    ) -> wasmtime::Result<Result<Vec<Node>, CallError>> {
        let Some(plugin) = self.plugins.get(name).cloned() else {
            return Ok(Err(CallError::Unknown(self.unknown_plugin(name))));
        };
        let Some(function) = plugin.function(key) else {
            let known: Vec<&str> = plugin.functions.iter().map(|f| f.name.as_str()).collect();
            return Ok(Err(CallError::Unknown(format!(
                "plugin `{name}` has no function {key:?} (it has: {})",
                known.join(", ")
            ))));
        };
        let shown = format!("{name}.{}", function.name);
        let mut reader = value::Reader::new(&args);
        let converted = reader
            .arguments(function.params.len(), &shown)
            .and_then(|indices| {
                function
                    .params
                    .iter()
                    .zip(indices)
                    .map(|((param, ty), index)| reader.argument(param, index, ty))
                    .collect::<Result<Vec<Val>, _>>()
            });
        let params = match converted {
            Ok(params) => params,
            Err(value::ConvertError::WrongType(m)) => {
                return Ok(Err(CallError::WrongType(format!("{shown}(): {m}"))));
            }
            Err(value::ConvertError::OutOfRange(m)) => {
                return Ok(Err(CallError::OutOfRange(format!("{shown}(): {m}"))));
            }
        };

        let what = function.describe(name);
        if !self.live.contains_key(name) {
            let budget = self.budget.share();
            let kv = self.kv.clone();
            let io = (kv, self.output.clone());
            let time = (self.deadline, self.time.clone());
            match start(&plugin, budget, time, io).await {
                Ok(live) => {
                    self.live.insert(name.to_string(), live);
                }
                Err(error) => return self.failed(error, &format!("starting plugin `{name}`")),
            }
        }
        let Some(live) = self.live.get_mut(name) else {
            return Ok(Err(CallError::Trapped(format!(
                "plugin `{name}` has no instance"
            ))));
        };
        let Some(func) = live.instance.get_func(&mut live.store, function.export) else {
            return Ok(Err(CallError::Trapped(format!("{what} is not exported"))));
        };
        let mut results = vec![Val::Bool(false); usize::from(function.result.is_some())];
        if let Err(error) = func
            .call_async(&mut live.store, &params, &mut results)
            .await
        {
            // A trapped instance cannot be entered again: the next call makes a fresh one.
            self.live.remove(name);
            return self.failed(error, &what);
        }
        let (Some(result), Some(ty)) = (results.pop(), function.result.as_ref()) else {
            return Ok(Ok(vec![Node::None]));
        };
        Ok(match (result, ty) {
            (Val::Result(outcome), Type::Result(types)) => match (outcome, types.ok(), types.err())
            {
                (Ok(Some(ok)), Some(ty), _) => Ok(value::write(&ok, &ty)),
                (Ok(_), _, _) => Ok(vec![Node::None]),
                (Err(Some(err)), _, Some(ty)) => Err(CallError::Returned(value::write(&err, &ty))),
                (Err(_), _, _) => Err(CallError::Returned(vec![Node::None])),
            },
            (result, ty) => Ok(value::write(&result, ty)),
        })
    }
}

impl Session {
    fn unknown_plugin(&self, name: &str) -> String {
        let declared: Vec<&str> = self.plugins.names().collect();
        if declared.is_empty() {
            no_plugins(name)
        } else {
            format!(
                "no plugin named `{name}`: config.py's plugins declares {}",
                declared.join(", ")
            )
        }
    }

    /// A plugin call that ended in `error`: past the deadline it stops the request (504, like a
    /// handler that ran too long); otherwise route code gets a `PluginTrap` naming `what`.
    fn failed(
        &self,
        error: wasmtime::Error,
        what: &str,
    ) -> wasmtime::Result<Result<Vec<Node>, CallError>> {
        let interrupted = error.downcast_ref::<Trap>() == Some(&Trap::Interrupt);
        if interrupted || Instant::now() >= self.deadline {
            return Err(wasmtime::Error::from(Trap::Interrupt));
        }
        let cap = self.budget.cap() / (1024 * 1024);
        let mut message = format!("{what} trapped: {error:#}");
        if let Some(trap) = error.downcast_ref::<Trap>() {
            message = format!("{what} trapped: {trap}");
        }
        if cap > 0 {
            message.push_str(&format!(
                " (the request's memory cap, shared with its plugins, is {cap} MiB)"
            ));
        }
        Ok(Err(CallError::Trapped(message)))
    }
}

/// A fresh instance of `plugin` in a store of its own, under the memory `budget`, the
/// `deadline` and the request's time budget.
async fn start(
    plugin: &Plugin,
    budget: MemoryLimiter,
    (deadline, time): (Instant, Option<Budget>),
    (kv, output): (Arc<KvStore>, Option<GuestOutput>),
) -> wasmtime::Result<Live> {
    let state = PluginState::new(
        &plugin.settings,
        plugin.files.as_deref(),
        budget,
        &kv,
        output,
    )
    .map_err(wasmtime::Error::msg)?;
    let mut store = Store::new(engine::shared(), state);
    store.limiter(|state| &mut state.budget);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            return Ok(UpdateDeadline::Interrupt);
        }
        Ok(time.as_ref().map_or(UpdateDeadline::Yield(1), |budget| {
            crate::sandbox::at_epoch_tick(budget.tick())
        }))
    });
    let instance = plugin.pre.instantiate_async(&mut store).await?;
    Ok(Live { store, instance })
}
