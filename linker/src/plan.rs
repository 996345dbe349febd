//! Deciding what to merge and resolving what is wired to what.
//!
//! Finds wit-component's main (`env`) module, the shared libraries (modules with a
//! `dylink.0` section), import-free function-only modules (the stubs), and element-only
//! modules instantiated after the libraries (the `__init` module after a snapshot), and
//! resolves any import of theirs by following the component's own `instantiate` arguments:
//! that is the ground truth of what is wired to what. It does not build modules (`merge`)
//! or the new component (`emit`).

use crate::component::{Component, CoreInstanceDef, CoreItemDef, Sort};
use crate::error::LinkError;
use crate::module::{ModuleInfo, sort_of};
use std::collections::{HashMap, HashSet};
use wasmparser::{ElementKind, Import};

/// A module that becomes part of the merged module.
pub struct Member<'a> {
    pub module: u32,
    pub instance: u32,
    pub label: String,
    pub args: HashMap<&'a str, u32>,
}

/// An element-only module instantiated after the libraries whose segments move into the
/// merged module (wit-component's `__init` module once its start function is gone).
pub struct Folded<'a> {
    pub module: u32,
    pub instance: u32,
    pub args: HashMap<&'a str, u32>,
}

/// An item that stays outside the merged module.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outside<'a> {
    /// A core function made by a `canon` definition (core function index).
    Canon(u32),
    /// An export of an instance that is not merged.
    Export {
        instance: u32,
        name: &'a str,
        sort: Sort,
    },
}

/// Where an import, export or alias leads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Resolved<'a> {
    /// An item defined (not imported) in member `member`'s module.
    Member {
        member: usize,
        sort: Sort,
        index: u32,
    },
    /// The main module's memory, which moves to the data module.
    Memory,
    /// Something outside the merged module.
    Outside(Outside<'a>),
}

/// What the linker will do.
pub struct Plan<'a> {
    pub comp: Component<'a>,
    /// Every core module, parsed.
    pub infos: Vec<ModuleInfo<'a>>,
    /// Members in instantiation order; `main` indexes into it.
    pub members: Vec<Member<'a>>,
    pub main: usize,
    pub member_of_instance: HashMap<u32, usize>,
    pub member_modules: HashSet<u32>,
    pub folded: Vec<Folded<'a>>,
    pub folded_instances: HashSet<u32>,
    /// The member instantiated last: the merged module is instantiated in its place.
    pub last_member_instance: u32,
}

const MAX_DEPTH: usize = 64;

impl<'a> Plan<'a> {
    /// Analyses `comp`.
    pub fn new(comp: Component<'a>) -> Result<Self, LinkError> {
        let infos = (0..comp.modules.len() as u32)
            .map(|m| ModuleInfo::parse(comp.module_bytes(m)?))
            .collect::<Result<Vec<_>, _>>()?;

        // Which instances instantiate which module.
        let mut instantiations: HashMap<u32, Vec<u32>> = HashMap::new();
        for (index, def) in comp.instances.iter().enumerate() {
            if let CoreInstanceDef::Instantiate { module, .. } = def {
                instantiations
                    .entry(*module)
                    .or_default()
                    .push(index as u32);
            }
        }
        let instance_of = |module: u32, label: &str| -> Result<Option<u32>, LinkError> {
            match instantiations.get(&module).map(Vec::as_slice) {
                None | Some([]) => Ok(None),
                Some([one]) => Ok(Some(*one)),
                Some(many) => Err(LinkError::InstantiatedTimes {
                    module: label.to_string(),
                    count: many.len(),
                }),
            }
        };

        // The main module: an instantiated module that defines and exports `memory`.
        let mut main_module = None;
        for (index, info) in infos.iter().enumerate() {
            let index = index as u32;
            let exports_defined_memory = info.export("memory").is_some_and(|e| {
                e.kind == wasmparser::ExternalKind::Memory
                    && e.index >= info.imported[Sort::Memory.slot()]
            });
            if exports_defined_memory && instantiations.contains_key(&index) {
                if let Some(previous) = main_module {
                    return Err(LinkError::SeveralMainModules(previous, index));
                }
                main_module = Some(index);
            }
        }
        let main_module = main_module.ok_or(LinkError::NoMemoryExport)?;
        let main_info = &infos[main_module as usize];
        let table_ok = main_info
            .export("__indirect_function_table")
            .is_some_and(|e| {
                e.kind == wasmparser::ExternalKind::Table
                    && e.index >= main_info.imported[Sort::Table.slot()]
            });
        if !table_ok {
            return Err(LinkError::NoTableExport);
        }

        // Members: main, libraries, and function-only modules without imports (stubs).
        let mut candidates = vec![(main_module, "main module (env)".to_string())];
        let mut any_library = false;
        for (index, info) in infos.iter().enumerate() {
            let index = index as u32;
            if index == main_module {
                continue;
            }
            if info.has_dylink {
                any_library = true;
                candidates.push((index, format!("module {index}")));
            } else if is_function_only(info) && instantiations.contains_key(&index) {
                candidates.push((index, format!("stubs (module {index})")));
            }
        }
        if !any_library {
            return Err(LinkError::NoLibraries);
        }
        let mut members = Vec::new();
        for (module, label) in candidates {
            let Some(instance) = instance_of(module, &label)? else {
                if module == main_module {
                    return Err(LinkError::NoMemoryExport);
                }
                continue; // a library nothing instantiates is dead code
            };
            let CoreInstanceDef::Instantiate { args, .. } = comp.instance(instance)? else {
                continue;
            };
            members.push(Member {
                module,
                instance,
                label,
                args: args.iter().copied().collect(),
            });
        }
        members.sort_by_key(|m| m.instance);
        let main = members
            .iter()
            .position(|m| m.module == main_module)
            .ok_or(LinkError::NoMemoryExport)?;
        let member_of_instance = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.instance, i))
            .collect();
        let member_modules = members.iter().map(|m| m.module).collect();
        let last_member_instance = members.iter().map(|m| m.instance).max().unwrap_or(0);

        let mut plan = Plan {
            comp,
            infos,
            members,
            main,
            member_of_instance,
            member_modules,
            folded: Vec::new(),
            folded_instances: HashSet::new(),
            last_member_instance,
        };
        plan.name_libraries();
        plan.find_folded()?;
        plan.check_order()?;
        Ok(plan)
    }

    pub fn member_info(&self, member: usize) -> &ModuleInfo<'a> {
        &self.infos[self.members[member].module as usize]
    }

    /// Names each library after its `<name>:memory_base` global in the main module.
    fn name_libraries(&mut self) {
        let main_info = &self.infos[self.members[self.main].module as usize];
        let mut labels = Vec::new();
        for (m, member) in self.members.iter().enumerate() {
            let info = &self.infos[member.module as usize];
            let base = info
                .imports
                .iter()
                .find(|i| i.module == "env" && i.name == "__memory_base");
            let label =
                base.and_then(
                    |import| match self.resolve_import(&member.args, import, 0) {
                        Ok(Some(Resolved::Member {
                            member: owner,
                            sort: Sort::Global,
                            index,
                        })) if owner == self.main => main_info.exports.iter().find_map(|e| {
                            (e.kind == wasmparser::ExternalKind::Global && e.index == index)
                                .then(|| e.name.strip_suffix(":memory_base"))
                                .flatten()
                        }),
                        _ => None,
                    },
                );
            if let Some(label) = label {
                labels.push((m, label.to_string()));
            }
        }
        for (m, label) in labels {
            self.members[m].label = label;
        }
    }

    /// Finds element-only modules instantiated after every member that nothing else uses.
    fn find_folded(&mut self) -> Result<(), LinkError> {
        let mut used: HashSet<u32> = HashSet::new();
        for defs in &self.comp.core {
            for def in defs {
                if let CoreItemDef::Alias { instance, .. } = def {
                    used.insert(*instance);
                }
            }
        }
        for def in &self.comp.instances {
            if let CoreInstanceDef::Instantiate { args, .. } = def {
                used.extend(args.iter().map(|(_, i)| *i));
            }
        }
        let mut folded = Vec::new();
        for (index, def) in self.comp.instances.iter().enumerate() {
            let index = index as u32;
            let CoreInstanceDef::Instantiate { module, args } = def else {
                continue;
            };
            if self.member_modules.contains(module)
                || used.contains(&index)
                || index < self.last_member_instance
            {
                continue;
            }
            let info = &self.infos[*module as usize];
            if info.start.is_some()
                || !info.data.is_empty()
                || info.elements.is_empty()
                || !info.tables.is_empty()
            {
                continue;
            }
            let args: HashMap<&'a str, u32> = args.iter().copied().collect();
            let mut all_main_table = true;
            for element in &info.elements {
                let ElementKind::Active { table_index, .. } = &element.kind else {
                    all_main_table = false;
                    break;
                };
                // Only functions it imports can move (its own functions are dropped with it).
                let imported_funcs = info.imported[Sort::Func.slot()];
                let own_function = match &element.items {
                    wasmparser::ElementItems::Functions(funcs) => funcs
                        .clone()
                        .into_iter()
                        .any(|f| f.map_or(true, |f| f >= imported_funcs)),
                    wasmparser::ElementItems::Expressions(..) => true,
                };
                if own_function {
                    all_main_table = false;
                    break;
                }
                let table = table_index.unwrap_or(0);
                let resolved = match info.import_of(Sort::Table, table) {
                    Some(import) => self.resolve_import(&args, import, 0)?,
                    None => None,
                };
                if resolved
                    != Some(Resolved::Member {
                        member: self.main,
                        sort: Sort::Table,
                        index: self.main_table()?,
                    })
                {
                    all_main_table = false;
                    break;
                }
            }
            if all_main_table {
                folded.push(Folded {
                    module: *module,
                    instance: index,
                    args,
                });
            }
        }
        self.folded_instances = folded.iter().map(|f| f.instance).collect();
        self.folded = folded;
        Ok(())
    }

    /// Merging runs every member's start function and writes every member's data when the
    /// merged module is instantiated. Refuses when that would reorder them against each
    /// other or against another instance's start function.
    fn check_order(&self) -> Result<(), LinkError> {
        let first_start = self
            .members
            .iter()
            .enumerate()
            .find(|(m, _)| self.member_info(*m).start.is_some());
        let Some((first, member)) = first_start else {
            return Ok(());
        };
        for later in first + 1..self.members.len() {
            let info = self.member_info(later);
            if info
                .data
                .iter()
                .any(|d| matches!(d.kind, wasmparser::DataKind::Active { .. }))
            {
                return Err(LinkError::Unsupported(format!(
                    "`{}` has a start function and `{}`, instantiated after it, has data \
                     segments: merging would write the data before the start function runs",
                    member.label, self.members[later].label
                )));
            }
        }
        for (index, def) in self.comp.instances.iter().enumerate() {
            let index = index as u32;
            if let CoreInstanceDef::Instantiate { module, .. } = def
                && index > member.instance
                && index < self.last_member_instance
                && !self.member_modules.contains(module)
                && self.infos[*module as usize].start.is_some()
            {
                return Err(LinkError::Unsupported(format!(
                    "module {module} has a start function and is instantiated between \
                         libraries with start functions: merging would reorder them"
                )));
            }
        }
        Ok(())
    }

    /// The main module's function table (its index in the main module).
    pub fn main_table(&self) -> Result<u32, LinkError> {
        self.member_info(self.main)
            .export("__indirect_function_table")
            .map(|e| e.index)
            .ok_or(LinkError::NoTableExport)
    }

    /// Resolves an import of a module instantiated with `args`. `None`: nothing provides it.
    pub fn resolve_import(
        &self,
        args: &HashMap<&'a str, u32>,
        import: &Import<'a>,
        depth: usize,
    ) -> Result<Option<Resolved<'a>>, LinkError> {
        let Some(&instance) = args.get(import.module) else {
            return Ok(None);
        };
        self.resolve_export(instance, import.name, sort_of(&import.ty), depth + 1)
    }

    /// Resolves export `name` of core instance `instance`. `None`: no such export.
    pub fn resolve_export(
        &self,
        instance: u32,
        name: &'a str,
        sort: Sort,
        depth: usize,
    ) -> Result<Option<Resolved<'a>>, LinkError> {
        if depth > MAX_DEPTH {
            return Err(LinkError::Unsupported(format!(
                "import chain through `{name}` deeper than {MAX_DEPTH}"
            )));
        }
        if let Some(&member) = self.member_of_instance.get(&instance) {
            let info = self.member_info(member);
            let Some(export) = info.export(name) else {
                return Ok(None);
            };
            let found = Sort::from_kind(export.kind)?;
            if found != sort {
                return Err(LinkError::KindMismatch {
                    library: self.members[member].label.clone(),
                    module: "(export)".into(),
                    name: name.into(),
                    expected: sort.name(),
                    found: found.name(),
                });
            }
            return self
                .resolve_member_item(member, sort, export.index, depth)
                .map(Some);
        }
        match self.comp.instance(instance)? {
            CoreInstanceDef::FromExports(items) => {
                let Some(&(_, found, index)) = items.iter().find(|(n, _, _)| *n == name) else {
                    return Ok(None);
                };
                if found != sort {
                    return Err(LinkError::KindMismatch {
                        library: format!("core instance {instance}"),
                        module: "(bag)".into(),
                        name: name.into(),
                        expected: sort.name(),
                        found: found.name(),
                    });
                }
                self.resolve_core_item(sort, index, depth + 1).map(Some)
            }
            CoreInstanceDef::Instantiate { .. } => Ok(Some(Resolved::Outside(Outside::Export {
                instance,
                name,
                sort,
            }))),
        }
    }

    /// Resolves item `index` of `sort` in member `member`'s module.
    pub fn resolve_member_item(
        &self,
        member: usize,
        sort: Sort,
        index: u32,
        depth: usize,
    ) -> Result<Resolved<'a>, LinkError> {
        let info = self.member_info(member);
        if let Some(import) = info.import_of(sort, index) {
            let import = *import;
            return self
                .resolve_import(&self.members[member].args, &import, depth)?
                .ok_or_else(|| self.unresolved(member, &import));
        }
        if sort == Sort::Memory {
            if member == self.main {
                return Ok(Resolved::Memory);
            }
            return Err(LinkError::ExtraMemory(self.members[member].label.clone()));
        }
        Ok(Resolved::Member {
            member,
            sort,
            index,
        })
    }

    /// Resolves item `index` of `sort` of the component's core index spaces.
    pub fn resolve_core_item(
        &self,
        sort: Sort,
        index: u32,
        depth: usize,
    ) -> Result<Resolved<'a>, LinkError> {
        match self.comp.core_item(sort, index)? {
            CoreItemDef::Alias { instance, name } => self
                .resolve_export(*instance, name, sort, depth + 1)?
                .ok_or_else(|| {
                    LinkError::Unsupported(format!(
                        "alias of `{name}`, which core instance {instance} does not export"
                    ))
                }),
            CoreItemDef::Canon(_) => Ok(Resolved::Outside(Outside::Canon(index))),
        }
    }

    /// The error for an import of `member` nothing provides.
    pub fn unresolved(&self, member: usize, import: &Import<'_>) -> LinkError {
        LinkError::UnresolvedImport {
            library: self.members[member].label.clone(),
            module: import.module.into(),
            name: import.name.into(),
        }
    }
}

/// Whether a module has no imports and defines nothing but functions (wit-component's
/// stubs module for missing weak symbols).
fn is_function_only(info: &ModuleInfo<'_>) -> bool {
    info.imports.is_empty()
        && info.tables.is_empty()
        && info.memories.is_empty()
        && info.globals.is_empty()
        && info.tags.is_empty()
        && info.elements.is_empty()
        && info.data.is_empty()
        && info.start.is_none()
        && !info.code.is_empty()
}
