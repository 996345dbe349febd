//! Build-time static linker for filerouter's guest component.
//!
//! componentize-py builds the guest as a dynamically linked component (wit-component's
//! `Linker`): a main (`env`) module holding the memory, the function table and trampolines,
//! a dozen shared libraries wired together through instance arguments, and an `__init`
//! module that fills the table. Instantiating that costs wasmtime 14 module instantiations,
//! thousands of core imports and thousands of eagerly written table entries per instance.
//! [`link`] turns it into a statically linked component with the same WIT world: one merged
//! core module (libraries + main module, table defined and filled by constant-offset
//! segments, so wasmtime initializes it lazily), a data-only module with the memory and
//! every active data segment, and the remaining modules (preview1 adapter, shim and fixup)
//! unchanged, except that the merged module calls the lowered imports through the shim's
//! table itself rather than importing the shim's forwarding functions. It checks every
//! convention it relies on and fails with a [`LinkError`] naming it rather than producing a
//! different guest.
//!
//! Modules: `component` (reading the component), `module` (reading a core module), `plan`
//! (what to merge, what is wired to what), `merge` (the core module merge), `emit` (the new
//! component), `shape` (measuring a component's instantiation cost), `error`.

mod component;
mod emit;
mod error;
mod merge;
mod module;
mod plan;
mod shape;

pub use error::LinkError;
pub use merge::MergeStats;
pub use shape::Shape;

use component::{CoreInstanceDef, Sort};
use wasmparser::{Validator, WasmFeatures};

/// The linker's version. Bump it on any change that changes the output: the build's cache
/// key for the linked guest includes it.
pub const VERSION: &str = "2";

/// What a link did.
#[derive(Debug, Clone)]
pub struct Report {
    pub before: Shape,
    pub after: Shape,
    pub merge: MergeStats,
    /// Labels of the merged modules, in instantiation order.
    pub merged: Vec<String>,
    /// Number of element-only modules whose segments moved into the merged module.
    pub folded: usize,
}

/// Choices a link can make differently. The default is what the guest ships with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Rewrite the trampolines whose table slot is known at link time (a `call_indirect` with
    /// a lazy-initialization check on every call) into direct calls. Off only to measure what
    /// it saves (`FILEROUTER_LINK_DIRECT_CALLS=off` when building the host: see its build.rs).
    pub direct_calls: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self { direct_calls: true }
    }
}

/// Statically links `component`, a componentize-py guest; returns the linked component.
pub fn link(component: &[u8]) -> Result<Vec<u8>, LinkError> {
    link_with(component, &Options::default())
}

/// [`link`] with `options`.
pub fn link_with(component: &[u8], options: &Options) -> Result<Vec<u8>, LinkError> {
    link_with_report(component, options).map(|(bytes, _)| bytes)
}

/// [`link_with`], also returning what it did.
pub fn link_with_report(
    component: &[u8],
    options: &Options,
) -> Result<(Vec<u8>, Report), LinkError> {
    let comp = component::Component::parse(component)?;
    let plan = plan::Plan::new(comp)?;
    let layout = merge::Layout::new(&plan)?;

    // Dry run: which member items does the rest of the component need?
    let (_, collected) = emit::Emitter::new(&plan, &layout, emit::Mode::Collect).run()?;
    let needed = collected.needed;

    let writers = table_writers(&plan)?;
    let built = merge::build(&plan, &layout, &needed, &writers, options)?;
    let (bytes, _) = emit::Emitter::new(&plan, &layout, emit::Mode::Emit(&built)).run()?;

    Validator::new_with_features(WasmFeatures::all())
        .validate_all(&bytes)
        .map_err(|e| LinkError::Invalid(e.to_string()))?;

    let report = Report {
        before: Shape::of(component)?,
        after: Shape::of(&bytes)?,
        merge: built.stats.clone(),
        merged: plan.members.iter().map(|m| m.label.clone()).collect(),
        folded: plan.folded.len(),
    };
    Ok((bytes, report))
}

/// Which slots of the main table modules that stay separate write (so their contents are
/// not known when the merged module is instantiated).
fn table_writers(plan: &plan::Plan<'_>) -> Result<merge::TableWriters, LinkError> {
    let mut writers = merge::TableWriters::default();
    let main_table = plan::Resolved::Member {
        member: plan.main,
        sort: Sort::Table,
        index: plan.main_table()?,
    };
    for (index, def) in plan.comp.instances.iter().enumerate() {
        let index = index as u32;
        let CoreInstanceDef::Instantiate { module, args } = def else {
            continue;
        };
        if plan.member_of_instance.contains_key(&index) || plan.folded_instances.contains(&index) {
            continue;
        }
        let info = &plan.infos[*module as usize];
        let args = args.iter().copied().collect();
        let mut imports_main_table = Vec::new();
        let mut t = 0u32;
        for import in &info.imports {
            if module::sort_of(&import.ty) != Sort::Table {
                continue;
            }
            if plan.resolve_import(&args, import, 0)?.as_ref() == Some(&main_table) {
                imports_main_table.push(t);
            }
            t += 1;
        }
        if imports_main_table.is_empty() {
            continue;
        }
        if merge::code_mutates_tables(info)? {
            writers.dynamic = true;
        }
        for segment in info.active_segments()? {
            if !imports_main_table.contains(&segment.table) {
                continue;
            }
            match segment.offset {
                Some(value) => {
                    let start = value as u32;
                    writers
                        .ranges
                        .push(start..start.saturating_add(segment.count));
                }
                None => writers.dynamic = true,
            }
        }
    }
    Ok(writers)
}

#[cfg(test)]
mod tests;
