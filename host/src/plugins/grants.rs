//! What a plugin instance may reach: WASI with nothing granted by default, plus what its
//! `config.py` entry grants (`files`: one project folder, read-only, at `/files`; `kv`: the
//! project's key-value store; `clocks`: the host's clocks instead of ones stopped at zero).
//!
//! Also checks, once per load, that every import of the component is something filerouter
//! provides and the entry grants, so a plugin that cannot link is refused with the import's
//! name before any request runs.

use std::{sync::Arc, time::Duration};

use wasmtime::component::{Component, InstancePre, Linker, ResourceTable};
use wasmtime_wasi::{
    FsPerms, HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView,
};

use super::{PluginError, engine};
use crate::{
    config::PluginSettings,
    kv::KvStore,
    sandbox::{MemoryLimiter, output::GuestOutput},
};

/// The host service a plugin may import to reach the project's key-value store (the same
/// interface route code uses, `wit/filerouter.wit`).
pub const KV_INTERFACE: &str = "filerouter:sandbox/kv@0.1.0";

/// What one plugin instance's `Store` holds.
pub struct PluginState {
    wasi: WasiCtx,
    table: ResourceTable,
    /// The request's memory budget, shared with the route's instance.
    pub budget: MemoryLimiter,
    /// The project's store, when the entry grants `kv`.
    kv: Option<Arc<KvStore>>,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl PluginState {
    /// A fresh state for one instance of a plugin whose entry is `settings`.
    pub fn new(
        settings: &PluginSettings,
        files: Option<&std::path::Path>,
        budget: MemoryLimiter,
        kv: &Arc<KvStore>,
        output: Option<GuestOutput>,
    ) -> Result<Self, String> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        // Printed text joins the request's captured output (escaped, capped) or goes nowhere.
        if let Some(output) = output {
            wasi.stdout(output.clone()).stderr(output);
        }
        if !settings.clocks {
            wasi.wall_clock(Stopped).monotonic_clock(Stopped);
        }
        if let Some(dir) = files {
            wasi.preopened_dir(dir, "/files", FsPerms::ReadOnly)
                .map_err(|e| format!("open {}: {e}", dir.display()))?;
        }
        Ok(Self {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            budget,
            kv: settings.kv.then(|| kv.clone()),
        })
    }
}

/// A clock that never moves: a plugin without the `clocks` grant cannot measure time (and so
/// cannot time side channels or tell requests apart by it).
struct Stopped;

impl HostWallClock for Stopped {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for Stopped {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// Check the imports of plugin `name` against what filerouter provides and its entry grants,
/// and link it.
pub fn instance_pre(
    name: &str,
    file: &str,
    settings: &PluginSettings,
    component: &Component,
) -> Result<InstancePre<PluginState>, PluginError> {
    let engine = engine::shared();
    let refuse = |import: &str, reason: String| PluginError::Import {
        plugin: name.to_string(),
        component: file.to_string(),
        import: import.to_string(),
        reason,
    };
    for (import, _) in component.component_type().imports(engine) {
        if import.starts_with("wasi:") {
            continue;
        }
        if import == KV_INTERFACE {
            if !settings.kv {
                return Err(refuse(
                    import,
                    format!(
                        "which its entry does not grant: add \"kv\": True to plugins[\"{name}\"] in config.py"
                    ),
                ));
            }
            continue;
        }
        return Err(refuse(
            import,
            format!(
                "which filerouter does not provide (plugins may import WASI 0.2 and {KV_INTERFACE})"
            ),
        ));
    }
    let mut linker = Linker::<PluginState>::new(engine);
    let linked = wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .and_then(|()| crate::read_only_files::link(&mut linker))
        .and_then(|()| {
            if settings.kv {
                link_kv(&mut linker)
            } else {
                Ok(())
            }
        });
    if let Err(e) = linked {
        return Err(refuse("wasi", format!("which could not be linked: {e:#}")));
    }
    linker.instantiate_pre(component).map_err(|e| {
        refuse(
            "(one of its imports)",
            format!("whose type is not the one filerouter provides: {e:#}"),
        )
    })
}

/// `filerouter:sandbox/kv` for a plugin: the project's store, as route code sees it.
fn link_kv(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    fn store(state: &PluginState) -> wasmtime::Result<Arc<KvStore>> {
        state
            .kv
            .clone()
            .ok_or_else(|| wasmtime::Error::msg("kv is not granted to this plugin"))
    }
    fn ms(ttl: Option<u64>) -> Option<Duration> {
        ttl.map(Duration::from_millis)
    }
    fn text<T>(outcome: Result<T, crate::kv::KvError>) -> Result<T, String> {
        outcome.map_err(|e| e.to_string())
    }
    let mut kv = linker.instance(KV_INTERFACE)?;
    kv.func_wrap_async("get", |cx, (key,): (String,)| {
        let store = store(cx.data());
        Box::new(async move { Ok((text(store?.get(&key).await),)) })
    })?;
    kv.func_wrap_async(
        "set",
        |cx, (key, value, ttl): (String, String, Option<u64>)| {
            let store = store(cx.data());
            Box::new(async move { Ok((text(store?.set(&key, value, ms(ttl)).await),)) })
        },
    )?;
    kv.func_wrap_async("delete", |cx, (key,): (String,)| {
        let store = store(cx.data());
        Box::new(async move { Ok((text(store?.delete(&key).await),)) })
    })?;
    kv.func_wrap_async("incr", |cx, (key, by, ttl): (String, i64, Option<u64>)| {
        let store = store(cx.data());
        Box::new(async move { Ok((text(store?.incr(&key, by, ms(ttl)).await),)) })
    })?;
    kv.func_wrap_async(
        "compare-and-set",
        |cx, (key, expected, value, ttl): (String, Option<String>, Option<String>, Option<u64>)| {
            let store = store(cx.data());
            Box::new(async move {
                Ok((text(
                    store?.compare_and_set(&key, expected, value, ms(ttl)).await,
                ),))
            })
        },
    )?;
    kv.func_wrap_async(
        "keys",
        |cx, (prefix, after, limit): (String, Option<String>, u32)| {
            let store = store(cx.data());
            Box::new(async move { Ok((text(store?.keys(&prefix, after, limit as usize).await),)) })
        },
    )?;
    kv.func_wrap_async(
        "write",
        |cx, (entries, ttl): (Vec<(String, Option<String>)>, Option<u64>)| {
            let store = store(cx.data());
            Box::new(async move { Ok((text(store?.write(entries, ms(ttl)).await),)) })
        },
    )?;
    Ok(())
}
