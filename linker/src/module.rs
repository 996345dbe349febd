//! Reading one core module into its parts (imports, definitions, exports, segments, code,
//! function names) with the counts needed to tell imported items from defined ones.
//!
//! Read-only and per module: resolving imports across modules is `plan`'s job, re-encoding
//! is `merge`'s.

use crate::component::Sort;
use crate::error::LinkError;
use wasmparser::{
    Data, Element, Export, FuncType, FunctionBody, Global, Import, KnownCustom, MemoryType, Name,
    Parser, Payload, Table, TagType, TypeRef, TypeSectionReader,
};

/// A core module, split into its parts.
#[derive(Default)]
pub struct ModuleInfo<'a> {
    pub type_sections: Vec<TypeSectionReader<'a>>,
    /// The function type of each type index (`None` for non-function types).
    pub types: Vec<Option<FuncType>>,
    pub imports: Vec<Import<'a>>,
    /// Number of imported items of each sort (by `Sort::slot`).
    pub imported: [u32; 5],
    /// Type index of every function (imported first, then defined).
    pub func_types: Vec<u32>,
    pub tables: Vec<Table<'a>>,
    pub memories: Vec<MemoryType>,
    pub globals: Vec<Global<'a>>,
    /// Type of every global (imported first, then defined).
    pub global_types: Vec<wasmparser::GlobalType>,
    pub tags: Vec<TagType>,
    pub exports: Vec<Export<'a>>,
    pub start: Option<u32>,
    pub elements: Vec<Element<'a>>,
    pub data: Vec<Data<'a>>,
    pub code: Vec<FunctionBody<'a>>,
    /// Function names from the `name` section.
    pub func_names: Vec<(u32, &'a str)>,
    pub has_dylink: bool,
}

impl<'a> ModuleInfo<'a> {
    /// Splits `bytes`, which must be a core module.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LinkError> {
        let mut m = ModuleInfo::default();
        for payload in Parser::new(0).parse_all(bytes) {
            match payload? {
                Payload::TypeSection(reader) => {
                    m.type_sections.push(reader.clone());
                    for ty in reader.into_iter_err_on_gc_types() {
                        m.types.push(Some(ty?));
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import?;
                        match import.ty {
                            TypeRef::Func(ty) | TypeRef::FuncExact(ty) => {
                                m.func_types.push(ty);
                                m.imported[Sort::Func.slot()] += 1;
                            }
                            TypeRef::Table(_) => m.imported[Sort::Table.slot()] += 1,
                            TypeRef::Memory(_) => m.imported[Sort::Memory.slot()] += 1,
                            TypeRef::Global(ty) => {
                                m.global_types.push(ty);
                                m.imported[Sort::Global.slot()] += 1;
                            }
                            TypeRef::Tag(_) => m.imported[Sort::Tag.slot()] += 1,
                        }
                        m.imports.push(import);
                    }
                }
                Payload::FunctionSection(reader) => {
                    for ty in reader {
                        m.func_types.push(ty?);
                    }
                }
                Payload::TableSection(reader) => {
                    for t in reader {
                        m.tables.push(t?);
                    }
                }
                Payload::MemorySection(reader) => {
                    for mem in reader {
                        m.memories.push(mem?);
                    }
                }
                Payload::TagSection(reader) => {
                    for t in reader {
                        m.tags.push(t?);
                    }
                }
                Payload::GlobalSection(reader) => {
                    for g in reader {
                        let g = g?;
                        m.global_types.push(g.ty);
                        m.globals.push(g);
                    }
                }
                Payload::ExportSection(reader) => {
                    for e in reader {
                        m.exports.push(e?);
                    }
                }
                Payload::StartSection { func, .. } => m.start = Some(func),
                Payload::ElementSection(reader) => {
                    for e in reader {
                        m.elements.push(e?);
                    }
                }
                Payload::DataSection(reader) => {
                    for d in reader {
                        m.data.push(d?);
                    }
                }
                Payload::CodeSectionEntry(body) => m.code.push(body),
                Payload::CustomSection(custom) => match custom.as_known() {
                    KnownCustom::Dylink0(_) => m.has_dylink = true,
                    KnownCustom::Name(reader) => {
                        for name in reader {
                            // A malformed name section only loses names.
                            if let Ok(Name::Function(map)) = name {
                                for naming in map.into_iter().flatten() {
                                    m.func_names.push((naming.index, naming.name));
                                }
                            }
                        }
                    }
                    _ => {}
                },
                Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => {
                    return Err(LinkError::Unsupported(
                        "a component nested in a core module".into(),
                    ));
                }
                _ => {}
            }
        }
        Ok(m)
    }

    /// Number of items of `sort` (imported and defined).
    pub fn count(&self, sort: Sort) -> u32 {
        let defined = match sort {
            Sort::Func => return self.func_types.len() as u32,
            Sort::Table => self.tables.len(),
            Sort::Memory => self.memories.len(),
            Sort::Global => self.globals.len(),
            Sort::Tag => self.tags.len(),
        };
        self.imported[sort.slot()] + defined as u32
    }

    /// The import that item `index` of `sort` is, if it is imported.
    pub fn import_of(&self, sort: Sort, index: u32) -> Option<&Import<'a>> {
        if index >= self.imported[sort.slot()] {
            return None;
        }
        self.imports
            .iter()
            .filter(|i| sort_of(&i.ty) == sort)
            .nth(index as usize)
    }

    /// The export named `name`.
    pub fn export(&self, name: &str) -> Option<&Export<'a>> {
        self.exports.iter().find(|e| e.name == name)
    }

    /// The function type of function `index`.
    pub fn func_type(&self, index: u32) -> Option<&FuncType> {
        let ty = *self.func_types.get(index as usize)?;
        self.types.get(ty as usize)?.as_ref()
    }
}

/// The sort of an import's type.
pub fn sort_of(ty: &TypeRef) -> Sort {
    match ty {
        TypeRef::Func(_) | TypeRef::FuncExact(_) => Sort::Func,
        TypeRef::Table(_) => Sort::Table,
        TypeRef::Memory(_) => Sort::Memory,
        TypeRef::Global(_) => Sort::Global,
        TypeRef::Tag(_) => Sort::Tag,
    }
}

/// One active element segment, as the table-layout questions need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveSegment {
    /// The table it writes (0 when the segment names none).
    pub table: u32,
    /// Its offset when that is a single `i32.const`; `None` for any other expression (a
    /// `global.get`, extended-const arithmetic).
    pub offset: Option<i32>,
    /// How many entries it writes.
    pub count: u32,
}

impl ModuleInfo<'_> {
    /// The module's active element segments, in order (passive and declared ones are not
    /// written at instantiation and are left out).
    pub fn active_segments(&self) -> Result<Vec<ActiveSegment>, LinkError> {
        let mut segments = Vec::new();
        for element in &self.elements {
            let wasmparser::ElementKind::Active {
                table_index,
                offset_expr,
            } = &element.kind
            else {
                continue;
            };
            let mut ops = offset_expr.get_operators_reader();
            let offset = match (ops.read()?, ops.read()?) {
                (wasmparser::Operator::I32Const { value }, wasmparser::Operator::End) => {
                    Some(value)
                }
                _ => None,
            };
            let count = match &element.items {
                wasmparser::ElementItems::Functions(f) => f.count(),
                wasmparser::ElementItems::Expressions(_, e) => e.count(),
            };
            segments.push(ActiveSegment {
                table: table_index.unwrap_or(0),
                offset,
                count,
            });
        }
        Ok(segments)
    }
}
