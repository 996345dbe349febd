//! `.pyi` stubs for `filerouter.plugins.*`, written from each plugin's WIT, so that editors and
//! type checkers know the functions route code calls (`filerouter plugins stubs`).
//!
//! The stubs describe the Python side of the value mapping (`guest-python/filerouter/plugins.py`):
//! records are `TypedDict`s, enums and flags `Literal` names, variants `Variant`, options
//! `T | None`, and a function's `result<T, E>` returns `T` (and raises `PluginError`).

use std::fmt::Write as _;

use wit_parser::{Function, Resolve, Type, TypeDefKind, TypeId};

use super::{contract::Wit, python_name};

/// `filerouter/plugins/__init__.pyi`: the names every plugin module uses.
pub const PACKAGE: &str = r#"# Written by `filerouter plugins stubs`: the names of filerouter.plugins.
from typing import Any, Generic, TypeVar

T = TypeVar("T")

class PluginError(Exception):
    """A plugin function returned the error case of its result; `value` is that error."""
    value: Any
    plugin: str | None
    function: str | None

class PluginTrap(Exception):
    """A plugin stopped abnormally (a trap, its memory cap) or could not start."""

class Variant:
    """A case of a WIT variant: Variant("circle", 2.0)."""
    case: str
    value: Any
    def __init__(self, case: str, value: Any = None) -> None: ...

class Ok(Generic[T]):
    value: T
    def __init__(self, value: T = ...) -> None: ...

class Err(Generic[T]):
    value: T
    def __init__(self, value: T = ...) -> None: ...

def __getattr__(name: str) -> Any: ...
"#;

/// The first line of the `filerouter/__init__.pyi` that earlier versions wrote. No longer
/// written: a stub there would hide the typed `filerouter` package (`guest-python/filerouter/`,
/// with `py.typed`) from type checkers, so `plugins stubs` removes one that starts so.
pub const OLD_ROOT_HEADER: &str = "# Written by `filerouter plugins stubs`.\n";

/// The stub module of a plugin whose WIT is `wit` (`filerouter/plugins/NAME.pyi`).
pub fn module(wit: &Wit) -> String {
    let mut writer = Writer {
        resolve: &wit.resolve,
        out: String::new(),
        defined: Vec::new(),
    };
    let _ = writeln!(
        writer.out,
        "# Written by `filerouter plugins stubs` from {}: do not edit; run it again after a WIT change.",
        wit.dir
    );
    writer.out.push_str(
        "from typing import Literal, TypedDict\n\nfrom filerouter.plugins import Err, Ok, Variant\n\n",
    );
    let functions = wit.functions();
    // Named types first, in dependency order.
    for (_, function) in &functions {
        for ty in function
            .params
            .iter()
            .map(|p| &p.ty)
            .chain(function.result.iter())
        {
            writer.define(ty);
        }
    }
    let mut flat: Vec<&str> = Vec::new();
    let mut clashes: Vec<&str> = Vec::new();
    for (_, function) in &functions {
        if flat.contains(&function.name.as_str()) {
            clashes.push(function.name.as_str());
        } else {
            flat.push(function.name.as_str());
        }
    }
    let mut interfaces: Vec<(String, Vec<&Function>)> = Vec::new();
    for (export, function) in &functions {
        if let super::contract::Export::Interface { name, .. } = export {
            let short = name
                .rsplit_once('/')
                .map_or(name.as_str(), |(_, s)| s)
                .split('@')
                .next()
                .unwrap_or(name)
                .to_string();
            match interfaces.iter_mut().find(|(n, _)| *n == short) {
                Some((_, list)) => list.push(function),
                None => interfaces.push((short, vec![function])),
            }
        }
        if !clashes.contains(&function.name.as_str()) {
            writer.function(function, "");
        }
    }
    for (name, list) in interfaces {
        let class = format!("_{}", camel(&name));
        let _ = writeln!(writer.out, "class {class}:");
        for function in list {
            writer.out.push_str("    @staticmethod\n");
            writer.function(function, "    ");
        }
        let _ = writeln!(writer.out, "{}: {class}\n", python_name(&name));
    }
    writer.out
}

struct Writer<'a> {
    resolve: &'a Resolve,
    out: String,
    defined: Vec<TypeId>,
}

impl Writer<'_> {
    fn function(&mut self, function: &Function, indent: &str) {
        let params: Vec<String> = function
            .params
            .iter()
            .map(|p| format!("{}: {}", python_name(&p.name), self.py(&p.ty)))
            .collect();
        let (result, raises) = match &function.result {
            None => ("None".to_string(), None),
            Some(ty) => match self.result_of(ty) {
                Some((ok, err)) => (ok, Some(err)),
                None => (self.py(ty), None),
            },
        };
        let _ = writeln!(
            self.out,
            "{indent}def {}({}) -> {result}:",
            python_name(&function.name),
            params.join(", ")
        );
        let mut doc = function.docs.contents.clone().unwrap_or_default();
        if let Some(err) = raises {
            if !doc.is_empty() {
                doc.push_str("\n\n");
            }
            let _ = write!(
                doc,
                "Raises `PluginError` whose `value` is {err} on the error case."
            );
        }
        if doc.is_empty() {
            let _ = writeln!(self.out, "{indent}    ...\n");
        } else {
            let doc = doc.replace("\"\"\"", "'''").replace('\\', "\\\\");
            let _ = writeln!(self.out, "{indent}    \"\"\"{}\"\"\"\n", doc.trim());
        }
    }

    /// For a top-level `result<T, E>`: (T, E) as Python types.
    fn result_of(&mut self, ty: &Type) -> Option<(String, String)> {
        let Type::Id(id) = ty else { return None };
        match &self.resolve.types[*id].kind {
            TypeDefKind::Result(r) => Some((
                r.ok.as_ref().map_or("None".into(), |t| self.py(t)),
                r.err.as_ref().map_or("None".into(), |t| self.py(t)),
            )),
            TypeDefKind::Type(inner) => self.result_of(inner),
            _ => None,
        }
    }

    /// Emit definitions for the named records, enums and flags `ty` uses.
    fn define(&mut self, ty: &Type) {
        let Type::Id(id) = ty else { return };
        if self.defined.contains(id) {
            return;
        }
        let def = &self.resolve.types[*id];
        let children: Vec<Type> = match &def.kind {
            TypeDefKind::Record(r) => r.fields.iter().map(|f| f.ty).collect(),
            TypeDefKind::Tuple(t) => t.types.clone(),
            TypeDefKind::Variant(v) => v.cases.iter().filter_map(|c| c.ty).collect(),
            TypeDefKind::Option(t) | TypeDefKind::List(t) | TypeDefKind::Type(t) => vec![*t],
            TypeDefKind::FixedLengthList(t, _) => vec![*t],
            TypeDefKind::Result(r) => r.ok.iter().chain(r.err.iter()).copied().collect(),
            _ => Vec::new(),
        };
        for child in &children {
            self.define(child);
        }
        self.defined.push(*id);
        let Some(name) = &def.name else { return };
        let class = camel(name);
        match &def.kind {
            TypeDefKind::Record(r) => {
                let _ = writeln!(self.out, "class {class}(TypedDict):");
                if let Some(doc) = &def.docs.contents {
                    let _ = writeln!(
                        self.out,
                        "    \"\"\"{}\"\"\"",
                        doc.trim().replace("\"\"\"", "'''")
                    );
                }
                if r.fields.is_empty() {
                    self.out.push_str("    pass\n");
                }
                for field in &r.fields {
                    let ty = self.py(&field.ty);
                    let _ = writeln!(self.out, "    {}: {ty}", python_name(&field.name));
                }
                self.out.push('\n');
            }
            TypeDefKind::Enum(e) => {
                let names: Vec<String> = e
                    .cases
                    .iter()
                    .map(|c| format!("{:?}", python_name(&c.name)))
                    .collect();
                let _ = writeln!(self.out, "{class} = Literal[{}]\n", names.join(", "));
            }
            TypeDefKind::Flags(f) => {
                let names: Vec<String> = f
                    .flags
                    .iter()
                    .map(|c| format!("{:?}", python_name(&c.name)))
                    .collect();
                let _ = writeln!(self.out, "{class} = set[Literal[{}]]\n", names.join(", "));
            }
            _ => {}
        }
    }

    /// `ty` as a Python annotation.
    fn py(&mut self, ty: &Type) -> String {
        match ty {
            Type::Bool => "bool".into(),
            Type::U8
            | Type::U16
            | Type::U32
            | Type::U64
            | Type::S8
            | Type::S16
            | Type::S32
            | Type::S64 => "int".into(),
            Type::F32 | Type::F64 => "float".into(),
            Type::Char | Type::String => "str".into(),
            Type::ErrorContext => "object".into(),
            Type::Id(id) => {
                let def = &self.resolve.types[*id];
                match &def.kind {
                    TypeDefKind::Record(_) | TypeDefKind::Enum(_) | TypeDefKind::Flags(_)
                        if def.name.is_some() =>
                    {
                        camel(def.name.as_deref().unwrap_or("Record"))
                    }
                    TypeDefKind::Record(_) => "dict".into(),
                    TypeDefKind::Enum(_) => "str".into(),
                    TypeDefKind::Flags(_) => "set[str]".into(),
                    TypeDefKind::Variant(_) => "Variant".into(),
                    TypeDefKind::Type(inner) => self.py(inner),
                    TypeDefKind::Option(inner) => format!("{} | None", self.py(inner)),
                    TypeDefKind::List(Type::U8) => "bytes".into(),
                    TypeDefKind::List(inner) | TypeDefKind::FixedLengthList(inner, _) => {
                        format!("list[{}]", self.py(inner))
                    }
                    TypeDefKind::Tuple(t) => {
                        let items: Vec<String> = t.types.iter().map(|t| self.py(t)).collect();
                        format!("tuple[{}]", items.join(", "))
                    }
                    TypeDefKind::Result(r) => format!(
                        "Ok[{}] | Err[{}]",
                        r.ok.as_ref().map_or("None".into(), |t| self.py(t)),
                        r.err.as_ref().map_or("None".into(), |t| self.py(t))
                    ),
                    _ => "object".into(),
                }
            }
        }
    }
}

/// `text-stats` as a class name: `TextStats`.
fn camel(name: &str) -> String {
    name.split('-')
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect::<String>(),
                None => String::new(),
            }
        })
        .collect()
}
