//! Measuring a component's core shape: module instantiations, core imports resolved at
//! instantiation, and function-table entries wasmtime must write eagerly (segments into an
//! imported table, or at a non-constant offset). For reports and tests; the linker's
//! decisions do not depend on it.

use crate::component::{Component, CoreInstanceDef};
use crate::error::LinkError;
use crate::module::ModuleInfo;

/// Figures that describe the cost of instantiating a component's core part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shape {
    /// Core module sections.
    pub modules: usize,
    /// Core module instantiations.
    pub instantiations: usize,
    /// Imports of instantiated core modules.
    pub core_imports: usize,
    /// Table entries written eagerly at instantiation.
    pub eager_table_entries: usize,
    /// Table entries wasmtime can initialize lazily.
    pub lazy_table_entries: usize,
    /// Instantiated modules whose code can write a table (`table.set`, `table.grow`, ...).
    pub modules_writing_tables: usize,
}

impl Shape {
    /// Measures `bytes`, a component.
    pub fn of(bytes: &[u8]) -> Result<Shape, LinkError> {
        let comp = Component::parse(bytes)?;
        let mut shape = Shape {
            modules: comp.modules.len(),
            ..Shape::default()
        };
        for def in &comp.instances {
            let CoreInstanceDef::Instantiate { module, .. } = def else {
                continue;
            };
            shape.instantiations += 1;
            let info = ModuleInfo::parse(comp.module_bytes(*module)?)?;
            shape.core_imports += info.imports.len();
            if crate::merge::code_mutates_tables(&info)? {
                shape.modules_writing_tables += 1;
            }
            let imported_tables = info.imported[crate::component::Sort::Table.slot()];
            let mut lazy = true;
            let mut entries = 0usize;
            for segment in info.active_segments()? {
                entries += segment.count as usize;
                if segment.table < imported_tables || segment.offset.is_none() {
                    lazy = false;
                }
            }
            if lazy {
                shape.lazy_table_entries += entries;
            } else {
                shape.eager_table_entries += entries;
            }
        }
        Ok(shape)
    }
}
