//! Reading the component's structure: its top-level items in order, the byte ranges of its
//! core modules, and the definitions of its core index spaces (instances, functions, tables,
//! memories, globals, tags).
//!
//! This is bookkeeping only: it does not decide what to merge (see `plan`) and does not
//! look inside core modules (see `module`).

use crate::error::LinkError;
use std::ops::Range;
use wasmparser::{
    CanonicalFunction, ComponentAlias, ComponentExternalKind, ComponentOuterAliasKind,
    ExternalKind, Instance, Parser, Payload,
};

/// The core sorts that items can have in a component's core index spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sort {
    Func,
    Table,
    Memory,
    Global,
    Tag,
}

impl Sort {
    pub const ALL: [Sort; 5] = [
        Sort::Func,
        Sort::Table,
        Sort::Memory,
        Sort::Global,
        Sort::Tag,
    ];

    pub fn from_kind(kind: ExternalKind) -> Result<Sort, LinkError> {
        Ok(match kind {
            ExternalKind::Func | ExternalKind::FuncExact => Sort::Func,
            ExternalKind::Table => Sort::Table,
            ExternalKind::Memory => Sort::Memory,
            ExternalKind::Global => Sort::Global,
            ExternalKind::Tag => Sort::Tag,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Sort::Func => "function",
            Sort::Table => "table",
            Sort::Memory => "memory",
            Sort::Global => "global",
            Sort::Tag => "tag",
        }
    }

    pub fn slot(self) -> usize {
        self as usize
    }
}

/// How one item of a core index space (other than instances and modules) was defined.
#[derive(Debug, Clone)]
pub enum CoreItemDef<'a> {
    /// `alias core export $instance "name"`.
    Alias { instance: u32, name: &'a str },
    /// A core function made by a `canon` definition (index into `Component::canons`).
    Canon(usize),
}

/// How a core instance was defined.
#[derive(Debug, Clone)]
pub enum CoreInstanceDef<'a> {
    /// `instantiate $module (with "name" (instance $i))*`.
    Instantiate {
        module: u32,
        args: Vec<(&'a str, u32)>,
    },
    /// A bag of items: `(instance (export "name" (func $f)) ...)`.
    FromExports(Vec<(&'a str, Sort, u32)>),
}

/// One top-level item of the component, in order.
#[derive(Debug, Clone)]
pub enum TopItem<'a> {
    /// A core module section (core module index).
    Module(u32),
    /// A core instance (core instance index).
    CoreInstance(u32),
    /// An alias of a core instance export (emitted on demand, see `emit`).
    CoreAlias,
    /// A `canon` definition (index into `Component::canons`).
    Canon(usize),
    /// An alias of a component-level item (component instance export or outer alias).
    ComponentAlias(ComponentAlias<'a>),
    /// A section copied as it is (types, imports, exports, component instances, nested
    /// components, core types, custom sections).
    Raw { id: u8, range: Range<usize> },
}

/// The parsed structure of a component.
pub struct Component<'a> {
    pub bytes: &'a [u8],
    pub items: Vec<TopItem<'a>>,
    /// Byte range (section contents, i.e. the module's own binary) of each core module.
    pub modules: Vec<Range<usize>>,
    pub instances: Vec<CoreInstanceDef<'a>>,
    /// Definitions of core functions, tables, memories, globals and tags, by `Sort::slot`.
    pub core: [Vec<CoreItemDef<'a>>; 5],
    pub canons: Vec<CanonicalFunction>,
}

fn range(r: Range<u64>) -> Result<Range<usize>, LinkError> {
    let start = usize::try_from(r.start).map_err(|_| LinkError::Unsupported("offset".into()))?;
    let end = usize::try_from(r.end).map_err(|_| LinkError::Unsupported("offset".into()))?;
    Ok(start..end)
}

impl<'a> Component<'a> {
    /// Reads the top level of `bytes`, which must be a component.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LinkError> {
        let mut c = Component {
            bytes,
            items: Vec::new(),
            modules: Vec::new(),
            instances: Vec::new(),
            core: Default::default(),
            canons: Vec::new(),
        };
        let mut depth = 0usize;
        let mut is_component = false;
        for payload in Parser::new(0).parse_all(bytes) {
            let payload = payload?;
            if depth > 0 {
                match payload {
                    Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
                    Payload::End(_) => depth -= 1,
                    _ => {}
                }
                continue;
            }
            let section = payload.as_section();
            match payload {
                Payload::Version { encoding, .. } => {
                    is_component = encoding == wasmparser::Encoding::Component;
                    if !is_component {
                        return Err(LinkError::Unsupported(
                            "the input is a core module, not a component".into(),
                        ));
                    }
                }
                Payload::ModuleSection {
                    unchecked_range, ..
                } => {
                    depth += 1;
                    let index = c.modules.len() as u32;
                    c.modules.push(range(unchecked_range)?);
                    c.items.push(TopItem::Module(index));
                }
                Payload::ComponentSection { .. } => {
                    depth += 1;
                    c.push_raw(section)?;
                }
                Payload::InstanceSection(reader) => {
                    for instance in reader {
                        let def = match instance? {
                            Instance::Instantiate { module_index, args } => {
                                CoreInstanceDef::Instantiate {
                                    module: module_index,
                                    args: args.iter().map(|a| (a.name, a.index)).collect(),
                                }
                            }
                            Instance::FromExports(exports) => CoreInstanceDef::FromExports(
                                exports
                                    .iter()
                                    .map(|e| Ok((e.name, Sort::from_kind(e.kind)?, e.index)))
                                    .collect::<Result<_, LinkError>>()?,
                            ),
                        };
                        let index = c.instances.len() as u32;
                        c.instances.push(def);
                        c.items.push(TopItem::CoreInstance(index));
                    }
                }
                Payload::ComponentAliasSection(reader) => {
                    for alias in reader {
                        match alias? {
                            ComponentAlias::CoreInstanceExport {
                                kind,
                                instance_index,
                                name,
                            } => {
                                let sort = Sort::from_kind(kind)?;
                                let list = &mut c.core[sort.slot()];
                                let index = list.len() as u32;
                                list.push(CoreItemDef::Alias {
                                    instance: instance_index,
                                    name,
                                });
                                let _ = index;
                                c.items.push(TopItem::CoreAlias);
                            }
                            ComponentAlias::InstanceExport {
                                kind: ComponentExternalKind::Module,
                                ..
                            }
                            | ComponentAlias::Outer {
                                kind: ComponentOuterAliasKind::CoreModule,
                                ..
                            } => {
                                return Err(LinkError::Unsupported(
                                    "core modules aliased from outside the component".into(),
                                ));
                            }
                            other => c.items.push(TopItem::ComponentAlias(other)),
                        }
                    }
                }
                Payload::ComponentCanonicalSection(reader) => {
                    for canon in reader {
                        let canon = canon?;
                        let index = c.canons.len();
                        if !matches!(canon, CanonicalFunction::Lift { .. }) {
                            c.core[Sort::Func.slot()].push(CoreItemDef::Canon(index));
                        }
                        c.canons.push(canon);
                        c.items.push(TopItem::Canon(index));
                    }
                }
                Payload::ComponentImportSection(reader) => {
                    for import in reader.clone() {
                        if matches!(import?.ty, wasmparser::ComponentTypeRef::Module(_)) {
                            return Err(LinkError::Unsupported("imported core modules".into()));
                        }
                    }
                    c.push_raw(section)?;
                }
                Payload::ComponentExportSection(reader) => {
                    for export in reader.clone() {
                        if export?.kind == ComponentExternalKind::Module {
                            return Err(LinkError::Unsupported("exported core modules".into()));
                        }
                    }
                    c.push_raw(section)?;
                }
                Payload::ComponentInstanceSection(reader) => {
                    for instance in reader.clone() {
                        if let wasmparser::ComponentInstance::Instantiate { args, .. } = instance?
                            && args.iter().any(|a| a.kind == ComponentExternalKind::Module)
                        {
                            return Err(LinkError::Unsupported(
                                "core modules passed to nested components".into(),
                            ));
                        }
                    }
                    c.push_raw(section)?;
                }
                Payload::CustomSection(ref custom) if custom.name() == "component-name" => {
                    // Names core items by index; the indices change, so it is dropped.
                }
                Payload::End(_) => {}
                _ => c.push_raw(section)?,
            }
        }
        if !is_component {
            return Err(LinkError::Unsupported("empty input".into()));
        }
        Ok(c)
    }

    fn push_raw(&mut self, section: Option<(u8, Range<u64>)>) -> Result<(), LinkError> {
        if let Some((id, r)) = section {
            self.items.push(TopItem::Raw {
                id,
                range: range(r)?,
            });
        }
        Ok(())
    }

    /// The binary of core module `index`.
    pub fn module_bytes(&self, index: u32) -> Result<&'a [u8], LinkError> {
        let r = self
            .modules
            .get(index as usize)
            .ok_or_else(|| LinkError::Unsupported(format!("core module {index} out of range")))?;
        self.bytes
            .get(r.clone())
            .ok_or_else(|| LinkError::Unsupported(format!("core module {index} out of range")))
    }

    /// The definition of core item `index` of `sort`.
    pub fn core_item(&self, sort: Sort, index: u32) -> Result<&CoreItemDef<'a>, LinkError> {
        self.core[sort.slot()].get(index as usize).ok_or_else(|| {
            LinkError::Unsupported(format!("core {} {index} out of range", sort.name()))
        })
    }

    /// The definition of core instance `index`.
    pub fn instance(&self, index: u32) -> Result<&CoreInstanceDef<'a>, LinkError> {
        self.instances
            .get(index as usize)
            .ok_or_else(|| LinkError::Unsupported(format!("core instance {index} out of range")))
    }
}
