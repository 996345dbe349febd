//! Plugins: WebAssembly components that a project declares in `config.py`'s `plugins`, each
//! exporting WIT interfaces of its own, which route code calls through `filerouter.plugins`.
//!
//! Once per project (and again when `dev` reloads one) a plugin is loaded: its component is
//! compiled ([`engine`]), checked against its `wit/` folder ([`contract`]) and linked with what
//! its config entry grants ([`grants`]). Per request, a [`Session`] makes each plugin's instance
//! on its first call and drops them all with the request ([`session`]); values cross between the
//! Python guest and the plugin through [`value`]. `filerouter build` seals the compiled plugins
//! into the build cache ([`sealed`]); `filerouter plugins stubs` writes `.pyi` files ([`stubs`]).
//!
//! This module is not the route guest's sandbox (`crate::sandbox`); a plugin never sees the
//! guest's memory, and the guest reaches a plugin only through the `plugins` host service. It
//! sits above the sandbox: [`Plugins`] and [`Session`] implement the sandbox's
//! `plugin_calls::{PluginSet, PluginSession}`, and the sandbox names no type of this module.

pub mod contract;
pub mod engine;
mod grants;
pub mod sealed;
pub mod session;
pub mod stubs;
pub mod value;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use wasmtime::component::{Component, ComponentExportIndex, InstancePre, types};

pub use session::Session;

use crate::{config::PluginSettings, regular_file};

/// Why the project's plugins could not be loaded. Each names the plugin, the file and the item.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum PluginError {
    /// The config entry is unusable (a path outside the project, say).
    #[error("plugin `{plugin}`: config.py: {message}")]
    Config { plugin: String, message: String },
    /// A file could not be read.
    #[error("plugin `{plugin}`: {path}: {message}")]
    Read {
        plugin: String,
        path: String,
        message: String,
    },
    /// The file is not a component wasmtime can compile.
    #[error("plugin `{plugin}`: {path} is not a usable WebAssembly component: {message}")]
    Compile {
        plugin: String,
        path: String,
        message: String,
    },
    /// The `wit/` folder does not parse, or declares nothing a plugin can offer.
    #[error("plugin `{plugin}`: {path}: {message}")]
    Wit {
        plugin: String,
        path: String,
        message: String,
    },
    /// The component does not export what its `wit/` declares, or not with the same types.
    #[error("plugin `{plugin}`: {component} does not match {wit}: {message}")]
    Mismatch {
        plugin: String,
        component: String,
        wit: String,
        message: String,
    },
    /// The component imports something filerouter does not provide, or its entry does not grant.
    #[error("plugin `{plugin}`: {component} imports `{import}`, {reason}")]
    Import {
        plugin: String,
        component: String,
        import: String,
        reason: String,
    },
    /// A WIT type that plugins cannot carry yet (resources, streams, futures, maps).
    #[error("plugin `{plugin}`: {location}: {message}")]
    Unsupported {
        plugin: String,
        location: String,
        message: String,
    },
}

/// The state of one plugin instance's `Store`.
pub use grants::PluginState;

/// One function a plugin exports, as the guest and the host call it.
#[derive(Debug, Clone)]
pub struct Function {
    /// The Python name (`to_html`).
    pub name: String,
    /// The WIT name (`to-html`).
    pub wit_name: String,
    /// The exported interface holding it, as (WIT export name, Python name); `None` for a
    /// function the world exports directly.
    pub interface: Option<(String, String)>,
    /// Parameters: WIT name and type.
    pub params: Vec<(String, types::Type)>,
    pub result: Option<types::Type>,
    /// Where the function is found in an instance.
    pub export: ComponentExportIndex,
}

impl Function {
    /// The `key` the guest passes back to `call`.
    pub fn key(&self) -> String {
        match &self.interface {
            Some((iface, _)) => format!("{iface}#{}", self.wit_name),
            None => self.wit_name.clone(),
        }
    }

    /// `plugin.function` as messages name it (WIT names).
    pub fn describe(&self, plugin: &str) -> String {
        match &self.interface {
            Some((iface, _)) => format!("`{plugin}` function `{}` ({iface})", self.wit_name),
            None => format!("`{plugin}` function `{}`", self.wit_name),
        }
    }
}

/// One loaded plugin: compiled, checked and linked, ready to be instantiated per request.
pub struct Plugin {
    pub name: String,
    pub settings: PluginSettings,
    /// The component file, relative to the project (for messages).
    pub file: String,
    pub component: Component,
    pub pre: InstancePre<PluginState>,
    pub functions: Vec<Function>,
    /// The folder granted read-only (at `/files`), resolved.
    pub files: Option<PathBuf>,
    /// The exports its WIT declared (what route code may call).
    pub exports: Vec<String>,
}

impl Plugin {
    pub fn function(&self, key: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.key() == key)
    }
}

/// The project's plugins, by name. Cheap to share; empty when `config.py` declares none.
#[derive(Default, Clone)]
pub struct Plugins {
    by_name: Arc<BTreeMap<String, Arc<Plugin>>>,
}

impl std::fmt::Debug for Plugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Plugins {
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Plugin>> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Plugin>> {
        self.by_name.values()
    }

    fn from_list(list: Vec<Plugin>) -> Self {
        Self {
            by_name: Arc::new(
                list.into_iter()
                    .map(|p| (p.name.clone(), Arc::new(p)))
                    .collect(),
            ),
        }
    }

    /// Load, check and link every plugin `declared` for the project at `root` from its files
    /// (`dev` and `build`). Compiled code is cached on disk by the component's hash.
    pub fn load(
        root: &Path,
        declared: &BTreeMap<String, PluginSettings>,
    ) -> Result<Self, PluginError> {
        let mut list = Vec::new();
        for (name, settings) in declared {
            // Every file is read (and refused if it is not a small regular file inside the
            // project) before anything is compiled.
            let source = Source::read(root, name, settings)?;
            let wit = contract::Wit::parse(name, root, &source.wit_dir)?;
            let component =
                engine::compile_cached(&source.wasm).map_err(|message| PluginError::Compile {
                    plugin: name.clone(),
                    path: source.file.clone(),
                    message,
                })?;
            wit.check(name, &source.file, &component)?;
            let exports = wit.export_names();
            list.push(link(root, name, settings, source.file, component, exports)?);
        }
        Ok(Self::from_list(list))
    }

    /// The plugins of a build cache (`run`): `sealed` holds each plugin's component and its
    /// native code; nothing is read from `plugins/`.
    pub fn from_sealed(
        root: &Path,
        declared: &BTreeMap<String, PluginSettings>,
        sealed: &[sealed::SealedPlugin],
    ) -> Result<Self, PluginError> {
        let mut list = Vec::new();
        for (name, settings) in declared {
            let Some(entry) = sealed.iter().find(|s| &s.name == name) else {
                return Err(PluginError::Read {
                    plugin: name.clone(),
                    path: "the build cache".into(),
                    message: "holds no such plugin: run `filerouter build` again".into(),
                });
            };
            let component = engine::load_native(&entry.native, &entry.wasm).map_err(|message| {
                PluginError::Compile {
                    plugin: name.clone(),
                    path: format!("{} (from the build cache)", settings.component),
                    message,
                }
            })?;
            list.push(link(
                root,
                name,
                settings,
                settings.component.clone(),
                component,
                entry.exports.clone(),
            )?);
        }
        Ok(Self::from_list(list))
    }
}

/// What `config.py` points at, read from disk.
pub struct Source {
    /// The component file, relative to the project.
    pub file: String,
    pub wasm: Vec<u8>,
    pub wit_dir: PathBuf,
}

impl Source {
    /// Read the component of plugin `name`; its WIT folder is the entry's `wit`, else `wit/`
    /// beside the component. The component must be a regular file of at most
    /// [`MAX_COMPONENT_BYTES`](regular_file::MAX_COMPONENT_BYTES) inside the project, symlinks
    /// followed (a link to another file of the project is fine).
    pub fn read(root: &Path, name: &str, settings: &PluginSettings) -> Result<Self, PluginError> {
        let path = inside(root, name, "component", &settings.component)?;
        let wasm = regular_file::read_inside(&path, root, regular_file::MAX_COMPONENT_BYTES)
            .map_err(|e| read_error(name, &settings.component, &e))?;
        let wit_dir = match &settings.wit {
            Some(wit) => inside(root, name, "wit", wit)?,
            None => path
                .parent()
                .map(|p| p.join("wit"))
                .unwrap_or_else(|| root.join("wit")),
        };
        Ok(Self {
            file: settings.component.clone(),
            wasm,
            wit_dir,
        })
    }
}

/// A file of plugin `plugin` (`shown`, relative to the project) that could not be read.
fn read_error(plugin: &str, shown: &str, error: &regular_file::FileError) -> PluginError {
    PluginError::Read {
        plugin: plugin.to_string(),
        path: shown.to_string(),
        message: match error {
            regular_file::FileError::NotFound(_) => "No such file or directory".into(),
            other => other.reason(),
        },
    }
}

/// Every file plugin `name` is made of, as `build` hashes them: its component, then its WIT
/// files (as [`contract::Wit::parse`] reads them), each as (path relative to the project,
/// bytes). Read within the same bounds as [`Plugins::load`] reads them.
pub fn input_files(
    root: &Path,
    name: &str,
    settings: &PluginSettings,
) -> Result<Vec<(String, Vec<u8>)>, PluginError> {
    let source = Source::read(root, name, settings)?;
    let mut files = vec![(source.file, source.wasm)];
    let wit = contract::WitFiles::read(name, root, &source.wit_dir)?;
    files.extend(wit.into_files());
    Ok(files)
}

/// `rel` (from the entry's `key`) as a path inside the project, or a config error.
fn inside(root: &Path, plugin: &str, key: &str, rel: &str) -> Result<PathBuf, PluginError> {
    let escapes = Path::new(rel).is_absolute()
        || Path::new(rel)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    if escapes {
        return Err(PluginError::Config {
            plugin: plugin.to_string(),
            message: format!("'{key}' must be a path inside the project, not {rel:?}"),
        });
    }
    Ok(root.join(rel))
}

/// Link `component` with what `settings` grants and index its functions.
fn link(
    root: &Path,
    name: &str,
    settings: &PluginSettings,
    file: String,
    component: Component,
    exports: Vec<String>,
) -> Result<Plugin, PluginError> {
    let files = match &settings.files {
        Some(rel) => {
            let dir = inside(root, name, "files", rel)?;
            let canonical = dir.canonicalize().map_err(|e| PluginError::Config {
                plugin: name.to_string(),
                message: format!("'files' folder {rel:?}: {e}"),
            })?;
            let project = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
            if !canonical.starts_with(&project) || !canonical.is_dir() {
                return Err(PluginError::Config {
                    plugin: name.to_string(),
                    message: format!("'files' must name a folder inside the project, not {rel:?}"),
                });
            }
            Some(canonical)
        }
        None => None,
    };
    let pre = grants::instance_pre(name, &file, settings, &component)?;
    let functions = contract::functions(name, &file, &component, &exports)?;
    Ok(Plugin {
        name: name.to_string(),
        settings: settings.clone(),
        file,
        component,
        pre,
        functions,
        files,
        exports,
    })
}

/// A WIT name as Python spells it: `to-html` is `to_html`.
pub fn python_name(wit: &str) -> String {
    wit.replace('-', "_")
}

/// A name from Python as WIT spells it (WIT names never contain `_`).
pub fn wit_name(python: &str) -> String {
    python.replace('_', "-")
}

/// [`Plugins::load`] off the async threads (compiling a plugin the first time takes seconds).
pub async fn load_in_background(
    root: &Path,
    declared: &BTreeMap<String, PluginSettings>,
) -> Result<Plugins, PluginError> {
    if declared.is_empty() {
        return Ok(Plugins::default());
    }
    let root = root.to_path_buf();
    let declared = declared.clone();
    match tokio::task::spawn_blocking(move || Plugins::load(&root, &declared)).await {
        Ok(loaded) => loaded,
        Err(e) => Err(PluginError::Config {
            plugin: "(every plugin)".into(),
            message: format!("loading the plugins panicked: {e}"),
        }),
    }
}
