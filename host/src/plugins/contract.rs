//! A plugin's contract: the WIT in its `wit/` folder, and the check that its component exports
//! exactly that (every declared interface and function, with the same types).
//!
//! The folder holds one WIT package (with `deps/` if it uses others). If the package defines a
//! world, the component must export what that world exports; otherwise it must export every
//! interface of the package. Types are compared structurally against what the component
//! itself declares (`Component::component_type()`), and types plugins cannot carry yet
//! (resources, streams, futures, maps, `option<option<T>>`) are refused with their location.

use std::path::Path;

use wasmtime::component::{
    Component,
    types::{ComponentItem, Type},
};
use wit_parser::{
    Function as WitFunction, InterfaceId, PackageId, Resolve, SourceMap, Type as WitType,
    TypeDefKind, UnresolvedPackageGroup, WorldItem, WorldKey,
};

use super::{Function, PluginError, engine, python_name, value::type_name};
use crate::regular_file;

/// One item the WIT says the component exports.
pub enum Export {
    /// An interface, by its export name (`acme:markdown/render@1.0.0`).
    Interface { name: String, id: InterfaceId },
    /// A function the world exports directly.
    Function { function: WitFunction },
}

impl Export {
    pub fn name(&self) -> &str {
        match self {
            Export::Interface { name, .. } => name,
            Export::Function { function } => &function.name,
        }
    }
}

/// At most this many WIT files are read for one plugin (its folder and `deps/` together).
const MAX_WIT_FILES: usize = 1000;

/// One WIT file as read: its path relative to the project (for messages) and its bytes.
pub struct WitFile {
    pub shown: String,
    pub bytes: Vec<u8>,
}

/// A package of `deps/`: a folder of `.wit` files, or one file (a `.wit` file, or a WIT package
/// encoded as WebAssembly).
enum Dep {
    Folder(Vec<WitFile>),
    File(WitFile),
}

/// The files of a plugin's WIT folder, read as `wit-parser`'s `Resolve::push_dir` would read
/// them (its `*.wit` files, and `deps/`), but each one as a regular file inside the project of
/// at most [`MAX_WIT_BYTES`](regular_file::MAX_WIT_BYTES), and at most
/// [`MAX_WIT_TOTAL_BYTES`](regular_file::MAX_WIT_TOTAL_BYTES) in all: a FIFO, a device or a
/// link out of the project is refused, naming the file.
pub struct WitFiles {
    main: Vec<WitFile>,
    deps: Vec<Dep>,
}

impl WitFiles {
    /// Read plugin `plugin`'s WIT folder `dir` of the project at `root`.
    pub fn read(plugin: &str, root: &Path, dir: &Path) -> Result<Self, PluginError> {
        let relative = |path: &Path| {
            path.strip_prefix(root)
                .unwrap_or(path)
                .display()
                .to_string()
        };
        let fail = |path: &Path, message: String| PluginError::Wit {
            plugin: plugin.to_string(),
            path: relative(path),
            message,
        };
        if !dir.is_dir() {
            return Err(fail(
                dir,
                "no such folder: a plugin's WIT goes in wit/ beside its component (or set 'wit' in its entry)".into(),
            ));
        }
        let mut budget = Budget {
            files: 0,
            bytes: 0,
            dir,
        };
        let mut read = |path: &Path| -> Result<WitFile, PluginError> {
            let bytes = regular_file::read_inside(path, root, regular_file::MAX_WIT_BYTES)
                .map_err(|e| fail(path, e.reason()))?;
            budget.count(bytes.len() as u64).map_err(|m| fail(dir, m))?;
            Ok(WitFile {
                shown: relative(path),
                bytes,
            })
        };
        let main = wit_files_in(dir)
            .map_err(|e| fail(dir, e.to_string()))?
            .iter()
            .map(|path| read(path))
            .collect::<Result<Vec<_>, _>>()?;
        let mut deps = Vec::new();
        let deps_dir = dir.join("deps");
        if deps_dir.exists() {
            let mut entries = std::fs::read_dir(&deps_dir)
                .and_then(|i| i.collect::<std::io::Result<Vec<_>>>())
                .map_err(|e| fail(&deps_dir, e.to_string()))?;
            entries.sort_by_key(|e| e.file_name());
            for entry in entries {
                let path = entry.path();
                // A folder (or a link to one) is a package of its own `.wit` files.
                if entry.file_type().is_ok_and(|t| t.is_dir()) || path.is_dir() {
                    let files = wit_files_in(&path)
                        .map_err(|e| fail(&path, e.to_string()))?
                        .iter()
                        .map(|path| read(path))
                        .collect::<Result<Vec<_>, _>>()?;
                    deps.push(Dep::Folder(files));
                } else if matches!(
                    path.extension().and_then(|e| e.to_str()),
                    Some("wit" | "wat" | "wasm")
                ) {
                    deps.push(Dep::File(read(&path)?));
                }
                // Other files (`.DS_Store`, notes) are left alone, as wit-parser does.
            }
        }
        Ok(Self { main, deps })
    }

    /// Every file read, as (path relative to the project, bytes), in the order read.
    pub fn into_files(self) -> Vec<(String, Vec<u8>)> {
        let deps = self.deps.into_iter().flat_map(|dep| match dep {
            Dep::Folder(files) => files,
            Dep::File(file) => vec![file],
        });
        self.main
            .into_iter()
            .chain(deps)
            .map(|f| (f.shown, f.bytes))
            .collect()
    }

    /// Parse and resolve the files: the folder's package, with `deps/` for the names it uses.
    fn resolve(
        self,
        fail: &dyn Fn(String) -> PluginError,
    ) -> Result<(Resolve, PackageId), PluginError> {
        let mut resolve = Resolve::new();
        let main = parse_group(&self.main, fail)?;
        let mut deps = Vec::new();
        for dep in &self.deps {
            match dep {
                Dep::Folder(files) => deps.push(parse_group(files, fail)?),
                // A WIT package encoded as WebAssembly is merged as it is.
                Dep::File(file) if file.bytes.starts_with(b"\0asm") => {
                    match wit_parser::decoding::decode(&file.bytes)
                        .map_err(|e| fail(format!("{}: {e:#}", file.shown)))?
                    {
                        wit_parser::decoding::DecodedWasm::WitPackage(decoded, _) => {
                            resolve
                                .merge(decoded)
                                .map_err(|e| fail(format!("{}: {e:#}", file.shown)))?;
                        }
                        wit_parser::decoding::DecodedWasm::Component(..) => {
                            return Err(fail(format!(
                                "{}: a component, not a WIT package encoded as WebAssembly",
                                file.shown
                            )));
                        }
                    }
                }
                Dep::File(file) => deps.push(parse_group(std::slice::from_ref(file), fail)?),
            }
        }
        let package = resolve
            .push_groups(main, deps)
            .map_err(|e| fail(resolve.render_error(&anyhow::Error::from(e))))?;
        Ok((resolve, package))
    }
}

/// What has been read of one plugin's WIT so far.
struct Budget<'a> {
    files: usize,
    bytes: u64,
    dir: &'a Path,
}

impl Budget<'_> {
    fn count(&mut self, bytes: u64) -> Result<(), String> {
        self.files += 1;
        self.bytes += bytes;
        if self.files > MAX_WIT_FILES {
            return Err(format!(
                "more than {MAX_WIT_FILES} WIT files in {} and its deps/",
                self.dir.display()
            ));
        }
        if self.bytes > regular_file::MAX_WIT_TOTAL_BYTES {
            return Err(format!(
                "its WIT files hold more than the {} bytes allowed for one plugin",
                regular_file::MAX_WIT_TOTAL_BYTES
            ));
        }
        Ok(())
    }
}

/// The `*.wit` files of `dir` (not of its folders, nor links to folders), sorted.
fn wit_files_in(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() || (kind.is_symlink() && path.is_dir()) {
            continue;
        }
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".wit"))
        {
            found.push(path);
        }
        if found.len() > MAX_WIT_FILES {
            return Err(std::io::Error::other(format!(
                "more than {MAX_WIT_FILES} WIT files"
            )));
        }
    }
    found.sort();
    Ok(found)
}

/// One package's files, parsed (not resolved yet).
fn parse_group(
    files: &[WitFile],
    fail: &dyn Fn(String) -> PluginError,
) -> Result<UnresolvedPackageGroup, PluginError> {
    let mut map = SourceMap::new();
    for file in files {
        let text = std::str::from_utf8(&file.bytes)
            .map_err(|_| fail(format!("{}: not UTF-8 text", file.shown)))?;
        map.push_str(&file.shown, text);
    }
    map.parse().map_err(|(map, e)| fail(e.render(&map)))
}

/// A parsed `wit/` folder.
pub struct Wit {
    pub resolve: Resolve,
    pub package: PackageId,
    /// The folder, relative to the project, for messages.
    pub dir: String,
    pub exports: Vec<Export>,
}

impl Wit {
    /// Parse plugin `plugin`'s WIT folder `dir`.
    pub fn parse(plugin: &str, root: &Path, dir: &Path) -> Result<Self, PluginError> {
        let shown = dir.strip_prefix(root).unwrap_or(dir).display().to_string();
        let fail = |message: String| PluginError::Wit {
            plugin: plugin.to_string(),
            path: shown.clone(),
            message,
        };
        let (resolve, package) = WitFiles::read(plugin, root, dir)?.resolve(&fail)?;
        let mut exports = Vec::new();
        let worlds: Vec<_> = resolve.packages[package].worlds.values().copied().collect();
        match worlds.as_slice() {
            [] => {
                for id in resolve.packages[package].interfaces.values() {
                    let name = resolve
                        .id_of(*id)
                        .ok_or_else(|| fail("an interface without a name".into()))?;
                    exports.push(Export::Interface { name, id: *id });
                }
            }
            [world] => {
                for (key, item) in &resolve.worlds[*world].exports {
                    match item {
                        WorldItem::Interface { id, .. } => {
                            let name = match key {
                                WorldKey::Name(name) => name.clone(),
                                WorldKey::Interface(id) => resolve
                                    .id_of(*id)
                                    .ok_or_else(|| fail("an interface without a name".into()))?,
                            };
                            exports.push(Export::Interface { name, id: *id });
                        }
                        WorldItem::Function(function) => exports.push(Export::Function {
                            function: function.clone(),
                        }),
                        WorldItem::Type { .. } => {}
                    }
                }
            }
            _ => {
                return Err(fail(format!(
                    "the package defines {} worlds; a plugin's package defines one (what the component exports) or none (it exports every interface)",
                    worlds.len()
                )));
            }
        }
        if exports.is_empty() {
            return Err(fail(
                "declares nothing to call: no interface, or a world that exports none".into(),
            ));
        }
        let wit = Self {
            resolve,
            package,
            dir: shown,
            exports,
        };
        wit.refuse_unsupported(plugin)?;
        Ok(wit)
    }

    /// The export names the component must have, in order.
    pub fn export_names(&self) -> Vec<String> {
        self.exports.iter().map(|e| e.name().to_string()).collect()
    }

    /// The declared functions: (export, function).
    pub fn functions(&self) -> Vec<(&Export, &WitFunction)> {
        let mut out = Vec::new();
        for export in &self.exports {
            match export {
                Export::Interface { id, .. } => {
                    for function in self.resolve.interfaces[*id].functions.values() {
                        out.push((export, function));
                    }
                }
                Export::Function { function } => out.push((export, function)),
            }
        }
        out
    }

    fn location(&self, function: &WitFunction) -> String {
        let location = self.resolve.render_location(function.span);
        if location.is_empty() {
            self.dir.clone()
        } else {
            location
        }
    }

    fn refuse_unsupported(&self, plugin: &str) -> Result<(), PluginError> {
        for (_, function) in self.functions() {
            let types = function
                .params
                .iter()
                .map(|p| (format!("parameter `{}`", p.name), &p.ty))
                .chain(
                    function
                        .result
                        .iter()
                        .map(|t| ("the result".to_string(), t)),
                );
            for (what, ty) in types {
                if let Some(problem) = unsupported_wit(&self.resolve, ty, false) {
                    return Err(PluginError::Unsupported {
                        plugin: plugin.to_string(),
                        location: self.location(function),
                        message: format!("function `{}`, {what}: {problem}", function.name),
                    });
                }
            }
        }
        Ok(())
    }

    /// Check that `component` (from `file`) exports everything declared here, with these types.
    pub fn check(
        &self,
        plugin: &str,
        file: &str,
        component: &Component,
    ) -> Result<(), PluginError> {
        let engine = engine::shared();
        let ty = component.component_type();
        let mismatch = |message: String| PluginError::Mismatch {
            plugin: plugin.to_string(),
            component: file.to_string(),
            wit: self.dir.clone(),
            message,
        };
        for export in &self.exports {
            let found = ty.get_export(engine, export.name()).map(|e| e.ty);
            match (export, found) {
                (_, None) => {
                    let exported: Vec<String> =
                        ty.exports(engine).map(|(n, _)| format!("`{n}`")).collect();
                    return Err(mismatch(format!(
                        "the component does not export `{}` (it exports: {})",
                        export.name(),
                        if exported.is_empty() {
                            "nothing".into()
                        } else {
                            exported.join(", ")
                        }
                    )));
                }
                (
                    Export::Interface { name, id },
                    Some(ComponentItem::ComponentInstance(instance)),
                ) => {
                    for function in self.resolve.interfaces[*id].functions.values() {
                        match instance.get_export(engine, &function.name).map(|e| e.ty) {
                            Some(ComponentItem::ComponentFunc(func)) => {
                                self.compare(function, &func).map_err(|problem| {
                                    mismatch(format!(
                                        "`{name}` function `{}` ({}): {problem}",
                                        function.name,
                                        self.location(function)
                                    ))
                                })?;
                            }
                            _ => {
                                return Err(mismatch(format!(
                                    "`{name}` has no function `{}` ({} declares it)",
                                    function.name,
                                    self.location(function)
                                )));
                            }
                        }
                    }
                }
                (Export::Function { function }, Some(ComponentItem::ComponentFunc(func))) => {
                    self.compare(function, &func).map_err(|problem| {
                        mismatch(format!(
                            "function `{}` ({}): {problem}",
                            function.name,
                            self.location(function)
                        ))
                    })?;
                }
                (export, Some(_)) => {
                    return Err(mismatch(format!(
                        "`{}` is exported, but not as {}",
                        export.name(),
                        match export {
                            Export::Interface { .. } => "an interface",
                            Export::Function { .. } => "a function",
                        }
                    )));
                }
            }
        }
        Ok(())
    }

    fn compare(
        &self,
        function: &WitFunction,
        func: &wasmtime::component::types::ComponentFunc,
    ) -> Result<(), String> {
        let params: Vec<(&str, Type)> = func.params().collect();
        if params.len() != function.params.len() {
            return Err(format!(
                "the WIT declares {} parameter(s), the component's function takes {}",
                function.params.len(),
                params.len()
            ));
        }
        for (declared, (name, ty)) in function.params.iter().zip(&params) {
            if declared.name != *name {
                return Err(format!(
                    "parameter `{}` is named `{name}` in the component",
                    declared.name
                ));
            }
            same(&self.resolve, &declared.ty, ty)
                .map_err(|e| format!("parameter `{}`: {e}", declared.name))?;
        }
        let result = func.results().next();
        match (&function.result, result) {
            (None, None) => Ok(()),
            (Some(declared), Some(ty)) => {
                same(&self.resolve, declared, &ty).map_err(|e| format!("the result: {e}"))
            }
            (None, Some(ty)) => Err(format!(
                "the WIT declares no result, the component's function returns {}",
                type_name(&ty)
            )),
            (Some(declared), None) => Err(format!(
                "the WIT declares a result of {}, the component's function returns nothing",
                wit_type_name(&self.resolve, declared)
            )),
        }
    }
}

/// Whether WIT type `declared` is the same as the component's `ty`; else what differs.
fn same(resolve: &Resolve, declared: &WitType, ty: &Type) -> Result<(), String> {
    let differ = || {
        Err(format!(
            "the WIT says {}, the component has {}",
            wit_type_name(resolve, declared),
            type_name(ty)
        ))
    };
    let id = match declared {
        WitType::Bool => {
            return if matches!(ty, Type::Bool) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::U8 => {
            return if matches!(ty, Type::U8) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::U16 => {
            return if matches!(ty, Type::U16) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::U32 => {
            return if matches!(ty, Type::U32) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::U64 => {
            return if matches!(ty, Type::U64) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::S8 => {
            return if matches!(ty, Type::S8) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::S16 => {
            return if matches!(ty, Type::S16) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::S32 => {
            return if matches!(ty, Type::S32) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::S64 => {
            return if matches!(ty, Type::S64) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::F32 => {
            return if matches!(ty, Type::Float32) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::F64 => {
            return if matches!(ty, Type::Float64) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::Char => {
            return if matches!(ty, Type::Char) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::String => {
            return if matches!(ty, Type::String) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::ErrorContext => {
            return if matches!(ty, Type::ErrorContext) {
                Ok(())
            } else {
                differ()
            };
        }
        WitType::Id(id) => *id,
    };
    match (&resolve.types[id].kind, ty) {
        (TypeDefKind::Type(inner), _) => same(resolve, inner, ty),
        (TypeDefKind::Record(record), Type::Record(found)) => {
            let fields: Vec<_> = found.fields().collect();
            if fields.len() != record.fields.len() {
                return differ();
            }
            for (declared, field) in record.fields.iter().zip(fields) {
                if declared.name != field.name {
                    return differ();
                }
                same(resolve, &declared.ty, &field.ty)
                    .map_err(|e| format!("field `{}`: {e}", declared.name))?;
            }
            Ok(())
        }
        (TypeDefKind::Tuple(tuple), Type::Tuple(found)) => {
            let types: Vec<_> = found.types().collect();
            if types.len() != tuple.types.len() {
                return differ();
            }
            for (i, (declared, ty)) in tuple.types.iter().zip(&types).enumerate() {
                same(resolve, declared, ty).map_err(|e| format!("item {i}: {e}"))?;
            }
            Ok(())
        }
        (TypeDefKind::Variant(variant), Type::Variant(found)) => {
            let cases: Vec<_> = found.cases().collect();
            if cases.len() != variant.cases.len() {
                return differ();
            }
            for (declared, case) in variant.cases.iter().zip(cases) {
                if declared.name != case.name {
                    return differ();
                }
                match (&declared.ty, &case.ty) {
                    (None, None) => {}
                    (Some(d), Some(t)) => {
                        same(resolve, d, t).map_err(|e| format!("case `{}`: {e}", declared.name))?
                    }
                    _ => return differ(),
                }
            }
            Ok(())
        }
        (TypeDefKind::Enum(declared), Type::Enum(found)) => {
            let names: Vec<&str> = found.names().collect();
            let expected: Vec<&str> = declared.cases.iter().map(|c| c.name.as_str()).collect();
            if names == expected { Ok(()) } else { differ() }
        }
        (TypeDefKind::Flags(declared), Type::Flags(found)) => {
            let names: Vec<&str> = found.names().collect();
            let expected: Vec<&str> = declared.flags.iter().map(|f| f.name.as_str()).collect();
            if names == expected { Ok(()) } else { differ() }
        }
        (TypeDefKind::Option(inner), Type::Option(found)) => same(resolve, inner, &found.ty()),
        (TypeDefKind::Result(result), Type::Result(found)) => {
            match (&result.ok, found.ok()) {
                (None, None) => {}
                (Some(d), Some(t)) => same(resolve, d, &t).map_err(|e| format!("ok: {e}"))?,
                _ => return differ(),
            }
            match (&result.err, found.err()) {
                (None, None) => Ok(()),
                (Some(d), Some(t)) => same(resolve, d, &t).map_err(|e| format!("err: {e}")),
                _ => differ(),
            }
        }
        (TypeDefKind::List(inner), Type::List(found)) => same(resolve, inner, &found.ty()),
        (TypeDefKind::FixedLengthList(inner, n), Type::FixedLengthList(found)) => {
            if *n != found.len() {
                return differ();
            }
            same(resolve, inner, &found.ty())
        }
        _ => differ(),
    }
}

/// What makes WIT type `ty` unusable for plugins, if anything.
fn unsupported_wit(resolve: &Resolve, ty: &WitType, in_option: bool) -> Option<String> {
    let WitType::Id(id) = ty else {
        return matches!(ty, WitType::ErrorContext).then(|| {
            "error-context values cannot cross into Python; plugins do not support them yet".into()
        });
    };
    let def = &resolve.types[*id];
    let named = def
        .name
        .clone()
        .unwrap_or_else(|| wit_type_name(resolve, ty));
    match &def.kind {
        TypeDefKind::Resource | TypeDefKind::Handle(_) => Some(format!(
            "`{named}` is a resource; plugins do not support resources yet (pass plain values: records, lists, strings)"
        )),
        TypeDefKind::Future(_) | TypeDefKind::Stream(_) => Some(format!(
            "`{named}` is a future or stream; plugins do not support them yet (return the whole value)"
        )),
        TypeDefKind::Map(_, _) => Some(format!(
            "`{named}` is a map; plugins do not support WIT maps yet (use list<tuple<K, V>>)"
        )),
        TypeDefKind::Type(inner) => unsupported_wit(resolve, inner, in_option),
        TypeDefKind::Option(inner) => {
            if in_option {
                return Some(
                    "option<option<T>> cannot be told apart from None in Python; use a variant"
                        .into(),
                );
            }
            unsupported_wit(resolve, inner, true)
        }
        TypeDefKind::Record(r) => r
            .fields
            .iter()
            .find_map(|f| unsupported_wit(resolve, &f.ty, false)),
        TypeDefKind::Tuple(t) => t
            .types
            .iter()
            .find_map(|t| unsupported_wit(resolve, t, false)),
        TypeDefKind::Variant(v) => v.cases.iter().find_map(|c| {
            c.ty.as_ref()
                .and_then(|t| unsupported_wit(resolve, t, false))
        }),
        TypeDefKind::Result(r) => {
            r.ok.iter()
                .chain(r.err.iter())
                .find_map(|t| unsupported_wit(resolve, t, false))
        }
        TypeDefKind::List(t) | TypeDefKind::FixedLengthList(t, _) => {
            unsupported_wit(resolve, t, false)
        }
        TypeDefKind::Flags(_) | TypeDefKind::Enum(_) | TypeDefKind::Unknown => None,
    }
}

/// What makes a component type unusable for plugins, if anything (for caches, where no WIT is
/// at hand).
fn unsupported(ty: &Type, in_option: bool) -> Option<String> {
    match ty {
        Type::Own(_) | Type::Borrow(_) => {
            Some("a resource; plugins do not support resources yet".into())
        }
        Type::Future(_) | Type::Stream(_) => {
            Some("a future or stream; plugins do not support them yet".into())
        }
        Type::Map(_) => Some("a map; plugins do not support WIT maps yet".into()),
        Type::ErrorContext => Some("an error-context; plugins do not support them yet".into()),
        Type::Option(o) if in_option => {
            Some("option<option<T>>, which cannot be told apart from None in Python".into())
        }
        Type::Option(o) => unsupported(&o.ty(), true),
        Type::List(l) => unsupported(&l.ty(), false),
        Type::FixedLengthList(l) => unsupported(&l.ty(), false),
        Type::Record(r) => r.fields().find_map(|f| unsupported(&f.ty, false)),
        Type::Tuple(t) => t.types().find_map(|t| unsupported(&t, false)),
        Type::Variant(v) => v
            .cases()
            .find_map(|c| c.ty.and_then(|t| unsupported(&t, false))),
        Type::Result(r) => r
            .ok()
            .into_iter()
            .chain(r.err())
            .find_map(|t| unsupported(&t, false)),
        _ => None,
    }
}

/// A WIT type as the WIT spells it.
pub fn wit_type_name(resolve: &Resolve, ty: &WitType) -> String {
    match ty {
        WitType::Bool => "bool".into(),
        WitType::U8 => "u8".into(),
        WitType::U16 => "u16".into(),
        WitType::U32 => "u32".into(),
        WitType::U64 => "u64".into(),
        WitType::S8 => "s8".into(),
        WitType::S16 => "s16".into(),
        WitType::S32 => "s32".into(),
        WitType::S64 => "s64".into(),
        WitType::F32 => "f32".into(),
        WitType::F64 => "f64".into(),
        WitType::Char => "char".into(),
        WitType::String => "string".into(),
        WitType::ErrorContext => "error-context".into(),
        WitType::Id(id) => {
            let def = &resolve.types[*id];
            if let Some(name) = &def.name {
                return name.clone();
            }
            match &def.kind {
                TypeDefKind::List(t) => format!("list<{}>", wit_type_name(resolve, t)),
                TypeDefKind::FixedLengthList(t, n) => {
                    format!("list<{}, {n}>", wit_type_name(resolve, t))
                }
                TypeDefKind::Option(t) => format!("option<{}>", wit_type_name(resolve, t)),
                TypeDefKind::Result(r) => format!(
                    "result<{}, {}>",
                    r.ok.as_ref()
                        .map_or("_".into(), |t| wit_type_name(resolve, t)),
                    r.err
                        .as_ref()
                        .map_or("_".into(), |t| wit_type_name(resolve, t))
                ),
                TypeDefKind::Tuple(t) => format!(
                    "tuple<{}>",
                    t.types
                        .iter()
                        .map(|t| wit_type_name(resolve, t))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                TypeDefKind::Type(t) => wit_type_name(resolve, t),
                TypeDefKind::Map(k, v) => format!(
                    "map<{}, {}>",
                    wit_type_name(resolve, k),
                    wit_type_name(resolve, v)
                ),
                TypeDefKind::Future(_) => "future".into(),
                TypeDefKind::Stream(_) => "stream".into(),
                _ => "a type".into(),
            }
        }
    }
}

/// The functions of `component` under the exports named `exports` (what its WIT declared),
/// refusing types plugins cannot carry.
pub fn functions(
    plugin: &str,
    file: &str,
    component: &Component,
    exports: &[String],
) -> Result<Vec<Function>, PluginError> {
    let engine = engine::shared();
    let ty = component.component_type();
    let missing = |name: &str| PluginError::Mismatch {
        plugin: plugin.to_string(),
        component: file.to_string(),
        wit: "its WIT".into(),
        message: format!("the component does not export `{name}`"),
    };
    let mut out = Vec::new();
    for name in exports {
        let index = component
            .get_export_index(None, name.as_str())
            .ok_or_else(|| missing(name))?;
        match ty.get_export(engine, name).map(|e| e.ty) {
            Some(ComponentItem::ComponentInstance(instance)) => {
                let short = name
                    .rsplit_once('/')
                    .map(|(_, s)| s)
                    .unwrap_or(name)
                    .split('@')
                    .next()
                    .unwrap_or(name);
                for (func_name, item) in instance.exports(engine) {
                    let ComponentItem::ComponentFunc(func) = item.ty else {
                        continue;
                    };
                    let export = component
                        .get_export_index(Some(&index), func_name)
                        .ok_or_else(|| missing(func_name))?;
                    out.push(function(
                        plugin,
                        func_name,
                        Some((name.clone(), python_name(short))),
                        &func,
                        export,
                    )?);
                }
            }
            Some(ComponentItem::ComponentFunc(func)) => {
                out.push(function(plugin, name, None, &func, index)?);
            }
            _ => return Err(missing(name)),
        }
    }
    Ok(out)
}

fn function(
    plugin: &str,
    name: &str,
    interface: Option<(String, String)>,
    func: &wasmtime::component::types::ComponentFunc,
    export: wasmtime::component::ComponentExportIndex,
) -> Result<Function, PluginError> {
    let params: Vec<(String, Type)> = func.params().map(|(n, t)| (n.to_string(), t)).collect();
    let result = func.results().next();
    for (what, ty) in params
        .iter()
        .map(|(n, t)| (format!("parameter `{n}`"), t))
        .chain(result.iter().map(|t| ("the result".to_string(), t)))
    {
        if let Some(problem) = unsupported(ty, false) {
            return Err(PluginError::Unsupported {
                plugin: plugin.to_string(),
                location: format!("function `{name}`"),
                message: format!("{what} is {problem}"),
            });
        }
    }
    Ok(Function {
        name: python_name(name),
        wit_name: name.to_string(),
        interface,
        params,
        result,
        export,
    })
}
