//! The core module merge: the main module, the libraries and the stubs become one core
//! module, and the linear memory with every active data segment becomes a data-only module.
//!
//! `Layout` resolves every import of every member (through `plan`), decides the merged
//! index spaces and lists the imports that stay imports ("externals"). `build` re-encodes
//! the members into the merged module: it folds the base globals into constants (global
//! initializers, element and data offsets, `global.get` in code), makes the function table
//! the merged module's own with constant-offset segments only, and (point 2) turns calls of
//! the main module's `call_indirect` trampolines into direct calls where the table slot is
//! known at link time, and (point 3) calls wit-component's shim functions through the shim's
//! table itself instead of importing them. It does not know about the component around it
//! (`emit`).

use crate::component::{CoreInstanceDef, Sort};
use crate::error::LinkError;
use crate::module::ModuleInfo;
use crate::plan::{Outside, Plan, Resolved};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use wasm_encoder::reencode::{Error as ReError, Reencode};
use wasm_encoder::{
    CodeSection, ConstExpr, DataCountSection, DataSection, ElementSection, Elements, EntityType,
    ExportKind, ExportSection, Function, FunctionSection, GlobalSection, ImportSection,
    Instruction, MemorySection, Module, NameMap, NameSection, StartSection, TableSection,
    TagSection, TypeSection,
};
use wasmparser::{ConstExpr as PConstExpr, DataKind, ElementItems, ElementKind, Operator};

/// The module name of the merged module's imports that stay imports.
pub const EXTERNAL_MODULE: &str = "ext";
/// The module name under which the merged module imports the memory.
pub const DATA_MODULE: &str = "data";
/// The memory's export and import name.
pub const MEMORY: &str = "memory";

/// A constant value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    I32(i32),
    I64(i64),
    F32(u32),
    F64(u64),
}

impl Value {
    fn instruction(self) -> Instruction<'static> {
        match self {
            Value::I32(v) => Instruction::I32Const(v),
            Value::I64(v) => Instruction::I64Const(v),
            Value::F32(v) => Instruction::F32Const(f32::from_bits(v).into()),
            Value::F64(v) => Instruction::F64Const(f64::from_bits(v).into()),
        }
    }

    fn const_expr(self) -> ConstExpr {
        match self {
            Value::I32(v) => ConstExpr::i32_const(v),
            Value::I64(v) => ConstExpr::i64_const(v),
            Value::F32(v) => ConstExpr::f32_const(f32::from_bits(v).into()),
            Value::F64(v) => ConstExpr::f64_const(f64::from_bits(v).into()),
        }
    }
}

/// An import of the merged module that stays an import.
pub struct External<'a> {
    /// Field name under `EXTERNAL_MODULE`.
    pub field: String,
    pub what: Outside<'a>,
    pub sort: Sort,
    ty: EntityType,
}

/// What the link did, for reports and tests.
#[derive(Debug, Default, Clone)]
pub struct MergeStats {
    /// Trampolines (`call_indirect` of a constant slot) whose target is known.
    pub trampolines_resolved: usize,
    /// Trampolines found.
    pub trampolines: usize,
    /// `call`s of a resolved trampoline rewritten to call the target directly.
    pub calls_redirected: usize,
    /// Entries written by the merged module's (constant-offset) element segments.
    pub table_entries: usize,
    /// `global.get`s of constant globals folded to constants in code.
    pub globals_folded: usize,
    /// Imports of forwarding functions (wit-component's shim) replaced by the same
    /// `call_indirect` through the forwarders' table (point 3).
    pub forwarders: usize,
}

/// A function of the merged module that calls slot `slot` of an imported table, as the
/// outside function it replaces does (point 3).
struct Forward {
    /// The name the import would have had (kept as the function's name).
    field: String,
    /// Merged type index of the function and of its `call_indirect`.
    type_index: u32,
    params: u32,
    slot: u32,
    /// Merged index of the imported table.
    table: u32,
}

/// The merged index spaces.
pub struct Layout<'a> {
    pub externals: Vec<External<'a>>,
    /// Functions defined after the members' that replace imports of forwarders.
    forwards: Vec<Forward>,
    /// Merged index of the first of `forwards` (the members' functions come before).
    forward_base: u32,
    /// Merged index of each member's items, by member and `Sort::slot`.
    maps: Vec<[Vec<u32>; 5]>,
    type_offset: Vec<u32>,
    /// Merged function index of each folded module's function imports.
    folded_funcs: Vec<Vec<Option<u32>>>,
    /// Constant value of each folded module's global imports.
    folded_globals: Vec<Vec<Option<Value>>>,
    /// Constant value of merged globals that are immutable.
    const_globals: HashMap<u32, Value>,
    /// Initial value of every defined member global that folds (by member, defined index).
    global_values: Vec<Vec<Option<Value>>>,
    total_types: u32,
}

impl<'a> Layout<'a> {
    /// Resolves every member import and lays out the merged index spaces.
    pub fn new(plan: &Plan<'a>) -> Result<Self, LinkError> {
        let n = plan.members.len();
        let mut externals: Vec<External<'a>> = Vec::new();
        let mut ext_index: HashMap<Outside<'a>, u32> = HashMap::new();
        let mut ext_count = [0u32; 5];
        let mut field_names: HashSet<String> = HashSet::new();
        let mut forwards: Vec<Forward> = Vec::new();
        let mut forward_index: HashMap<Outside<'a>, u32> = HashMap::new();
        let mut type_offset = Vec::with_capacity(n);
        let mut total_types = 0u32;
        for m in 0..n {
            type_offset.push(total_types);
            total_types += plan.member_info(m).types.len() as u32;
        }

        for m in 0..n {
            let defined = plan.member_info(m).memories.len();
            if (m == plan.main && defined != 1) || (m != plan.main && defined != 0) {
                return Err(LinkError::ExtraMemory(plan.members[m].label.clone()));
            }
        }

        // Resolve imports (by member and sort).
        let mut resolved: Vec<[Vec<Resolved<'a>>; 5]> = Vec::with_capacity(n);
        for (m, &offset) in type_offset.iter().enumerate() {
            let info = plan.member_info(m);
            let mut per_sort: [Vec<Resolved<'a>>; 5] = Default::default();
            for import in &info.imports {
                let sort = crate::module::sort_of(&import.ty);
                let r = plan
                    .resolve_import(&plan.members[m].args, import, 0)?
                    .ok_or_else(|| plan.unresolved(m, import))?;
                match (&r, sort) {
                    (Resolved::Memory, Sort::Memory) => {}
                    (_, Sort::Memory) => {
                        return Err(LinkError::ForeignMemory {
                            library: plan.members[m].label.clone(),
                            module: import.module.into(),
                            name: import.name.into(),
                        });
                    }
                    (Resolved::Outside(o), _)
                        if !ext_index.contains_key(o) && !forward_index.contains_key(o) =>
                    {
                        let field = unique_field(&mut field_names, import.module, import.name);
                        let forwarder = match (o, &import.ty) {
                            (
                                Outside::Export {
                                    instance,
                                    name,
                                    sort: Sort::Func,
                                },
                                wasmparser::TypeRef::Func(ty),
                            ) => forwarder(plan, *instance, name)?
                                .filter(|f| {
                                    info.types.get(*ty as usize).and_then(Option::as_ref)
                                        == Some(&f.ty)
                                })
                                .map(|f| (f, ty + offset, *instance)),
                            _ => None,
                        };
                        if let Some((f, type_index, instance)) = forwarder {
                            // Point 3: call through the forwarder's table, imported once.
                            let what = Outside::Export {
                                instance,
                                name: f.table_name,
                                sort: Sort::Table,
                            };
                            let table = match ext_index.get(&what) {
                                Some(&t) => t,
                                None => {
                                    let field =
                                        unique_field(&mut field_names, "table", f.table_name);
                                    let t = ext_count[Sort::Table.slot()];
                                    ext_index.insert(what.clone(), t);
                                    ext_count[Sort::Table.slot()] += 1;
                                    externals.push(External {
                                        field,
                                        what,
                                        sort: Sort::Table,
                                        ty: EntityType::Table(
                                            TypeShift { offset: 0 }.table_type(f.table_type)?,
                                        ),
                                    });
                                    t
                                }
                            };
                            forward_index.insert(o.clone(), forwards.len() as u32);
                            forwards.push(Forward {
                                field,
                                type_index,
                                params: f.ty.params().len() as u32,
                                slot: f.slot,
                                table,
                            });
                        } else {
                            let ty = external_type(&import.ty, offset)?;
                            ext_index.insert(o.clone(), ext_count[sort.slot()]);
                            ext_count[sort.slot()] += 1;
                            externals.push(External {
                                field,
                                what: o.clone(),
                                sort,
                                ty,
                            });
                        }
                    }
                    _ => {}
                }
                per_sort[sort.slot()].push(r);
            }
            resolved.push(per_sort);
        }

        // Bases of defined items.
        let mut next = ext_count;
        next[Sort::Memory.slot()] = 1; // the imported memory
        let mut bases: Vec<[u32; 5]> = Vec::with_capacity(n);
        for m in 0..n {
            let info = plan.member_info(m);
            let mut base = [0u32; 5];
            for sort in Sort::ALL {
                base[sort.slot()] = next[sort.slot()];
                if sort != Sort::Memory {
                    next[sort.slot()] += info.count(sort) - info.imported[sort.slot()];
                }
            }
            bases.push(base);
        }
        // The forwarding functions come after every member's functions.
        let forward_base = next[Sort::Func.slot()];
        let outside = |o: &Outside<'a>| -> Option<u32> {
            match forward_index.get(o) {
                Some(p) => Some(forward_base + p),
                None => ext_index.get(o).copied(),
            }
        };
        let locate = |r: &Resolved<'a>| -> u32 {
            match r {
                Resolved::Member {
                    member,
                    sort,
                    index,
                } => {
                    let info = plan.member_info(*member);
                    bases[*member][sort.slot()] + (index - info.imported[sort.slot()])
                }
                Resolved::Memory => 0,
                Resolved::Outside(o) => outside(o).unwrap_or(0),
            }
        };
        let mut maps: Vec<[Vec<u32>; 5]> = Vec::with_capacity(n);
        for m in 0..n {
            let info = plan.member_info(m);
            let mut per_sort: [Vec<u32>; 5] = Default::default();
            for sort in Sort::ALL {
                let list = &mut per_sort[sort.slot()];
                for r in &resolved[m][sort.slot()] {
                    list.push(locate(r));
                }
                let defined = info.count(sort) - info.imported[sort.slot()];
                if sort == Sort::Memory {
                    list.extend((0..defined).map(|_| 0));
                } else {
                    let base = bases[m][sort.slot()];
                    list.extend(base..base + defined);
                }
            }
            maps.push(per_sort);
        }

        let mut layout = Layout {
            externals,
            forwards,
            forward_base,
            maps,
            type_offset,
            folded_funcs: Vec::new(),
            folded_globals: Vec::new(),
            const_globals: HashMap::new(),
            global_values: Vec::new(),
            total_types,
        };

        // Constant values of globals.
        let mut values: Vec<Vec<Option<Option<Value>>>> = (0..n)
            .map(|m| vec![None; plan.member_info(m).globals.len()])
            .collect();
        for m in 0..n {
            for j in 0..plan.member_info(m).globals.len() as u32 {
                global_value(plan, &resolved, &mut values, m, j, 0)?;
            }
        }
        layout.global_values = values
            .into_iter()
            .map(|v| v.into_iter().map(Option::flatten).collect())
            .collect();
        for (m, base) in bases.iter().enumerate() {
            let info = plan.member_info(m);
            for (j, g) in info.globals.iter().enumerate() {
                if let (false, Some(v)) = (g.ty.mutable, layout.global_values[m][j]) {
                    let merged = base[Sort::Global.slot()] + j as u32;
                    layout.const_globals.insert(merged, v);
                }
            }
        }

        // Folded modules: their function imports must be member functions or externals
        // already known; their global imports (offsets) must be constants.
        for folded in &plan.folded {
            let info = &plan.infos[folded.module as usize];
            let mut funcs = Vec::new();
            let mut globals = Vec::new();
            for import in &info.imports {
                let sort = crate::module::sort_of(&import.ty);
                let r = plan.resolve_import(&folded.args, import, 0)?;
                match sort {
                    Sort::Func => funcs.push(match &r {
                        Some(r @ Resolved::Member { .. }) => Some(locate(r)),
                        Some(Resolved::Outside(o)) => outside(o),
                        _ => None,
                    }),
                    Sort::Global => globals.push(match r {
                        Some(Resolved::Member {
                            member,
                            sort: Sort::Global,
                            index,
                        }) => {
                            let info = plan.member_info(member);
                            let j = (index - info.imported[Sort::Global.slot()]) as usize;
                            match info.globals.get(j) {
                                Some(g) if !g.ty.mutable => layout.global_values[member][j],
                                _ => None,
                            }
                        }
                        _ => None,
                    }),
                    _ => {}
                }
            }
            layout.folded_funcs.push(funcs);
            layout.folded_globals.push(globals);
        }
        Ok(layout)
    }

    /// The merged index of item `index` of `sort` of member `member`.
    pub fn index(&self, member: usize, sort: Sort, index: u32) -> Result<u32, LinkError> {
        self.maps
            .get(member)
            .and_then(|m| m[sort.slot()].get(index as usize))
            .copied()
            .ok_or_else(|| {
                LinkError::Unsupported(format!("{} index {index} out of range", sort.name()))
            })
    }
}

/// The name under which the merged module exports member item (`member`, `sort`, `index`).
pub fn export_name(plan: &Plan<'_>, member: usize, sort: Sort, index: u32) -> String {
    let label = &plan.members[member].label;
    let info = plan.member_info(member);
    match info
        .exports
        .iter()
        .find(|e| Sort::from_kind(e.kind).ok() == Some(sort) && e.index == index)
    {
        Some(e) => format!("{label}:{}", e.name),
        None => format!("{label}#{}{index}", sort.name()),
    }
}

/// `module.name`, or `module.name#k` for the first `k` that is not taken yet.
fn unique_field(taken: &mut HashSet<String>, module: &str, name: &str) -> String {
    let mut field = format!("{module}.{name}");
    let mut k = 1;
    while taken.contains(&field) {
        k += 1;
        field = format!("{module}.{name}#{k}");
    }
    taken.insert(field.clone());
    field
}

/// What an outside forwarding function does: call slot `slot` of `table` with its own
/// arguments and return what that returns.
struct Forwarder<'a> {
    slot: u32,
    /// The table's export name in the forwarder's instance.
    table_name: &'a str,
    table_type: wasmparser::TableType,
    ty: wasmparser::FuncType,
}

/// Export `name` of core instance `instance` if it is a forwarding function of a module
/// instantiated without imports: its body passes its parameters to a `call_indirect` of a
/// constant slot of a table the module defines and exports, with its own type. That is
/// wit-component's shim module: the main module imports its functions, whose table the
/// fixup module fills with the lowered imports once the main module exists. The merged
/// module makes the same call through the same table (imported) instead, so instantiating
/// it resolves one table instead of a function reference per function (point 3).
fn forwarder<'a>(
    plan: &Plan<'a>,
    instance: u32,
    name: &str,
) -> Result<Option<Forwarder<'a>>, LinkError> {
    let CoreInstanceDef::Instantiate { module, args } = plan.comp.instance(instance)? else {
        return Ok(None);
    };
    let Some(info) = plan.infos.get(*module as usize) else {
        return Ok(None);
    };
    if !args.is_empty() || !info.imports.is_empty() {
        return Ok(None);
    }
    let Some(export) = info
        .export(name)
        .filter(|e| e.kind == wasmparser::ExternalKind::Func)
    else {
        return Ok(None);
    };
    let (Some(body), Some(ty)) = (
        info.code.get(export.index as usize),
        info.func_type(export.index),
    ) else {
        return Ok(None);
    };
    let Some((slot, call_ty, table)) = trampoline(body, ty.params().len())? else {
        return Ok(None);
    };
    if info.types.get(call_ty as usize).and_then(Option::as_ref) != Some(ty) {
        return Ok(None);
    }
    let (Some(table_export), Some(table_def)) = (
        info.exports
            .iter()
            .find(|e| e.kind == wasmparser::ExternalKind::Table && e.index == table),
        info.tables.get(table as usize),
    ) else {
        return Ok(None);
    };
    if table_def.ty.element_type != wasmparser::RefType::FUNCREF
        || !matches!(table_def.init, wasmparser::TableInit::RefNull)
    {
        return Ok(None);
    }
    Ok(Some(Forwarder {
        slot,
        table_name: table_export.name,
        table_type: table_def.ty,
        ty: ty.clone(),
    }))
}

fn external_type(ty: &wasmparser::TypeRef, type_offset: u32) -> Result<EntityType, LinkError> {
    let mut shift = TypeShift {
        offset: type_offset,
    };
    Ok(shift.entity_type(*ty)?)
}

/// Evaluates (and memoizes) the initial value of defined global `j` of member `m`.
fn global_value(
    plan: &Plan<'_>,
    resolved: &[[Vec<Resolved<'_>>; 5]],
    values: &mut Vec<Vec<Option<Option<Value>>>>,
    m: usize,
    j: u32,
    depth: usize,
) -> Result<Option<Value>, LinkError> {
    if let Some(Some(v)) = values.get(m).and_then(|v| v.get(j as usize)) {
        return Ok(*v);
    }
    if depth > 64 {
        return Ok(None);
    }
    let info = plan.member_info(m);
    let Some(global) = info.globals.get(j as usize) else {
        return Ok(None);
    };
    let expr = global.init_expr.clone();
    let imported = info.imported[Sort::Global.slot()];
    let value = eval(&expr, &mut |k| {
        if k < imported {
            match resolved[m][Sort::Global.slot()].get(k as usize) {
                Some(Resolved::Member {
                    member,
                    sort: Sort::Global,
                    index,
                }) => {
                    let owner = plan.member_info(*member);
                    let jj = index - owner.imported[Sort::Global.slot()];
                    match owner.globals.get(jj as usize) {
                        Some(g) if !g.ty.mutable => {
                            global_value(plan, resolved, values, *member, jj, depth + 1)
                        }
                        _ => Ok(None),
                    }
                }
                _ => Ok(None),
            }
        } else {
            match info.globals.get((k - imported) as usize) {
                Some(g) if !g.ty.mutable => {
                    global_value(plan, resolved, values, m, k - imported, depth + 1)
                }
                _ => Ok(None),
            }
        }
    })?;
    if let Some(slot) = values.get_mut(m).and_then(|v| v.get_mut(j as usize)) {
        *slot = Some(value);
    }
    Ok(value)
}

/// Evaluates a constant expression made of constants, `global.get` (through `global`) and
/// integer `add`/`sub`/`mul`. `None`: not a foldable constant.
fn eval(
    expr: &PConstExpr<'_>,
    global: &mut dyn FnMut(u32) -> Result<Option<Value>, LinkError>,
) -> Result<Option<Value>, LinkError> {
    let mut stack: Vec<Value> = Vec::new();
    for op in expr.get_operators_reader() {
        let op = op?;
        let v = match op {
            Operator::I32Const { value } => Value::I32(value),
            Operator::I64Const { value } => Value::I64(value),
            Operator::F32Const { value } => Value::F32(value.bits()),
            Operator::F64Const { value } => Value::F64(value.bits()),
            Operator::GlobalGet { global_index } => match global(global_index)? {
                Some(v) => v,
                None => return Ok(None),
            },
            Operator::I32Add | Operator::I32Sub | Operator::I32Mul => {
                let (Some(Value::I32(b)), Some(Value::I32(a))) = (stack.pop(), stack.pop()) else {
                    return Ok(None);
                };
                Value::I32(match op {
                    Operator::I32Add => a.wrapping_add(b),
                    Operator::I32Sub => a.wrapping_sub(b),
                    _ => a.wrapping_mul(b),
                })
            }
            Operator::I64Add | Operator::I64Sub | Operator::I64Mul => {
                let (Some(Value::I64(b)), Some(Value::I64(a))) = (stack.pop(), stack.pop()) else {
                    return Ok(None);
                };
                Value::I64(match op {
                    Operator::I64Add => a.wrapping_add(b),
                    Operator::I64Sub => a.wrapping_sub(b),
                    _ => a.wrapping_mul(b),
                })
            }
            Operator::End => break,
            _ => return Ok(None),
        };
        stack.push(v);
    }
    Ok(match stack.as_slice() {
        [v] => Some(*v),
        _ => None,
    })
}

/// A reencoder that only shifts type indices (for import types).
struct TypeShift {
    offset: u32,
}

impl Reencode for TypeShift {
    type Error = LinkError;
    fn type_index(&mut self, ty: u32) -> Result<u32, ReError<LinkError>> {
        Ok(ty + self.offset)
    }
}

/// Re-encodes one member's items into the merged index spaces.
struct Mapper<'l> {
    maps: &'l [Vec<u32>; 5],
    type_offset: u32,
    data: &'l [Option<u32>],
    elements: &'l [u32],
    const_globals: &'l HashMap<u32, Value>,
    redirect: &'l HashMap<u32, u32>,
    label: &'l str,
    stats: &'l mut MergeStats,
}

impl Mapper<'_> {
    fn map(&self, sort: Sort, index: u32) -> Result<u32, ReError<LinkError>> {
        self.maps[sort.slot()]
            .get(index as usize)
            .copied()
            .ok_or_else(|| {
                ReError::UserError(LinkError::Unsupported(format!(
                    "{} index {index} out of range in `{}`",
                    sort.name(),
                    self.label
                )))
            })
    }
}

impl Reencode for Mapper<'_> {
    type Error = LinkError;

    fn function_index(&mut self, func: u32) -> Result<u32, ReError<LinkError>> {
        self.map(Sort::Func, func)
    }
    fn global_index(&mut self, global: u32) -> Result<u32, ReError<LinkError>> {
        self.map(Sort::Global, global)
    }
    fn table_index(&mut self, table: u32) -> Result<u32, ReError<LinkError>> {
        self.map(Sort::Table, table)
    }
    fn memory_index(&mut self, memory: u32) -> Result<u32, ReError<LinkError>> {
        self.map(Sort::Memory, memory)
    }
    fn tag_index(&mut self, tag: u32) -> Result<u32, ReError<LinkError>> {
        self.map(Sort::Tag, tag)
    }
    fn type_index(&mut self, ty: u32) -> Result<u32, ReError<LinkError>> {
        Ok(ty + self.type_offset)
    }
    fn data_index(&mut self, data: u32) -> Result<u32, ReError<LinkError>> {
        self.data.get(data as usize).copied().flatten().ok_or_else(|| {
            ReError::UserError(LinkError::Unsupported(format!(
                "code in `{}` refers to active data segment {data}, which moves to the data module",
                self.label
            )))
        })
    }
    fn element_index(&mut self, element: u32) -> Result<u32, ReError<LinkError>> {
        self.elements.get(element as usize).copied().ok_or_else(|| {
            ReError::UserError(LinkError::Unsupported(format!(
                "element segment {element} out of range in `{}`",
                self.label
            )))
        })
    }

    fn instruction<'a>(
        &mut self,
        arg: Operator<'a>,
    ) -> Result<Instruction<'a>, ReError<LinkError>> {
        match arg {
            Operator::GlobalGet { global_index } => {
                let merged = self.map(Sort::Global, global_index)?;
                if let Some(v) = self.const_globals.get(&merged) {
                    self.stats.globals_folded += 1;
                    return Ok(v.instruction());
                }
                Ok(Instruction::GlobalGet(merged))
            }
            Operator::Call { function_index } => {
                let merged = self.map(Sort::Func, function_index)?;
                if let Some(&target) = self.redirect.get(&merged) {
                    self.stats.calls_redirected += 1;
                    return Ok(Instruction::Call(target));
                }
                Ok(Instruction::Call(merged))
            }
            Operator::ReturnCall { function_index } => {
                let merged = self.map(Sort::Func, function_index)?;
                if let Some(&target) = self.redirect.get(&merged) {
                    self.stats.calls_redirected += 1;
                    return Ok(Instruction::ReturnCall(target));
                }
                Ok(Instruction::ReturnCall(merged))
            }
            other => wasm_encoder::reencode::utils::instruction(self, other),
        }
    }
}

/// The merged module, the data module and what the link did.
pub struct Built {
    pub module: Vec<u8>,
    pub data_module: Vec<u8>,
    pub stats: MergeStats,
}

/// An element segment of the merged module, before encoding.
struct Segment {
    table: u32,
    offset: Option<i32>,
    kind: SegmentKind,
    items: SegmentItems,
}

enum SegmentKind {
    Active,
    Passive,
    Declared,
}

enum SegmentItems {
    Functions(Vec<u32>),
    Expressions(wasm_encoder::RefType, Vec<ConstExpr>, Vec<Option<u32>>),
}

/// Builds the merged module (exporting `exports`) and the data module.
pub fn build(
    plan: &Plan<'_>,
    layout: &Layout<'_>,
    exports: &BTreeSet<(usize, Sort, u32)>,
    extra_table_writers: &TableWriters,
    options: &crate::Options,
) -> Result<Built, LinkError> {
    let n = plan.members.len();
    let mut stats = MergeStats::default();
    let main_info = plan.member_info(plan.main);
    let main_memory = *main_info
        .memories
        .first()
        .ok_or(LinkError::NoMemoryExport)?;
    let main_table = layout.index(plan.main, Sort::Table, plan.main_table()?)?;

    // Types, with one extra `() -> ()` for a synthesized start function.
    let mut types = TypeSection::new();
    for m in 0..n {
        let mut shift = TypeShift {
            offset: layout.type_offset[m],
        };
        for section in &plan.member_info(m).type_sections {
            shift.parse_type_section(&mut types, section.clone())?;
        }
    }
    let thunk_type = layout.total_types;
    types.ty().function([], []);

    // Imports: the memory, then the externals.
    let mut imports = ImportSection::new();
    imports.import(
        DATA_MODULE,
        MEMORY,
        TypeShift { offset: 0 }.memory_type(main_memory)?,
    );
    for ext in &layout.externals {
        imports.import(EXTERNAL_MODULE, &ext.field, ext.ty);
    }

    // Data: active segments go to the data module, passive ones stay.
    let mut data_module_segments = DataSection::new();
    let mut passive_data = DataSection::new();
    let mut passive_count = 0u32;
    let mut data_maps: Vec<Vec<Option<u32>>> = Vec::with_capacity(n);
    for m in 0..n {
        let info = plan.member_info(m);
        let mut map = Vec::with_capacity(info.data.len());
        for (d, data) in info.data.iter().enumerate() {
            match &data.kind {
                DataKind::Passive => {
                    passive_data.passive(data.data.iter().copied());
                    map.push(Some(passive_count));
                    passive_count += 1;
                }
                DataKind::Active {
                    memory_index,
                    offset_expr,
                } => {
                    layout.index(m, Sort::Memory, *memory_index)?;
                    let value = eval_in_member(plan, layout, m, offset_expr)?;
                    let offset = match value {
                        Some(Value::I32(v)) => v,
                        _ => {
                            return Err(LinkError::NotConstant {
                                module: plan.members[m].label.clone(),
                                what: format!("the offset of data segment {d}"),
                            });
                        }
                    };
                    data_module_segments.active(
                        0,
                        &ConstExpr::i32_const(offset),
                        data.data.iter().copied(),
                    );
                    map.push(None);
                }
            }
        }
        data_maps.push(map);
    }

    // Element segments: members', then the folded modules'.
    let mut segments: Vec<Segment> = Vec::new();
    let mut elem_maps: Vec<Vec<u32>> = Vec::with_capacity(n);
    for m in 0..n {
        let info = plan.member_info(m);
        let mut map = Vec::with_capacity(info.elements.len());
        for (e, element) in info.elements.iter().enumerate() {
            map.push(segments.len() as u32);
            let mut mapper = RoundtripMap {
                maps: &layout.maps[m],
                type_offset: layout.type_offset[m],
            };
            let items = match &element.items {
                ElementItems::Functions(funcs) => SegmentItems::Functions(
                    funcs
                        .clone()
                        .into_iter()
                        .map(|f| layout.index(m, Sort::Func, f?))
                        .collect::<Result<_, _>>()?,
                ),
                ElementItems::Expressions(ty, exprs) => {
                    let mut out = Vec::new();
                    let mut funcs = Vec::new();
                    for expr in exprs.clone() {
                        let expr = expr?;
                        funcs.push(
                            ref_func(&expr)?
                                .map(|f| layout.index(m, Sort::Func, f))
                                .transpose()?,
                        );
                        out.push(mapper.const_expr(expr)?);
                    }
                    SegmentItems::Expressions(mapper.ref_type(*ty)?, out, funcs)
                }
            };
            let (kind, table, offset) = match &element.kind {
                ElementKind::Passive => (SegmentKind::Passive, 0, None),
                ElementKind::Declared => (SegmentKind::Declared, 0, None),
                ElementKind::Active {
                    table_index,
                    offset_expr,
                } => {
                    let table = layout.index(m, Sort::Table, table_index.unwrap_or(0))?;
                    match eval_in_member(plan, layout, m, offset_expr)? {
                        Some(Value::I32(v)) => (SegmentKind::Active, table, Some(v)),
                        _ => {
                            return Err(LinkError::NotConstant {
                                module: plan.members[m].label.clone(),
                                what: format!("the offset of element segment {e}"),
                            });
                        }
                    }
                }
            };
            segments.push(Segment {
                table,
                offset,
                kind,
                items,
            });
        }
        elem_maps.push(map);
    }
    for (f, folded) in plan.folded.iter().enumerate() {
        let info = &plan.infos[folded.module as usize];
        let label = format!("module {}", folded.module);
        let funcs = &layout.folded_funcs[f];
        let globals = &layout.folded_globals[f];
        let func = |index: u32| -> Result<u32, LinkError> {
            funcs.get(index as usize).copied().flatten().ok_or_else(|| {
                LinkError::Unsupported(format!(
                    "an element segment of `{label}` refers to function {index}, which is not an import of a merged function"
                ))
            })
        };
        for (e, element) in info.elements.iter().enumerate() {
            let ElementKind::Active { offset_expr, .. } = &element.kind else {
                return Err(LinkError::Unsupported(format!(
                    "a non-active element segment in `{label}`"
                )));
            };
            let offset = match eval(offset_expr, &mut |k| {
                Ok(globals.get(k as usize).copied().flatten())
            })? {
                Some(Value::I32(v)) => v,
                _ => {
                    return Err(LinkError::NotConstant {
                        module: label.clone(),
                        what: format!("the offset of element segment {e}"),
                    });
                }
            };
            let items = match &element.items {
                ElementItems::Functions(list) => SegmentItems::Functions(
                    list.clone()
                        .into_iter()
                        .map(|i| func(i?))
                        .collect::<Result<_, _>>()?,
                ),
                ElementItems::Expressions(..) => {
                    return Err(LinkError::Unsupported(format!(
                        "an expression element segment in `{label}`"
                    )));
                }
            };
            segments.push(Segment {
                table: main_table,
                offset: Some(offset),
                kind: SegmentKind::Active,
                items,
            });
        }
    }

    // The table's contents at link time, if nothing changes them later (point 2).
    let mut slots: BTreeMap<u32, u32> = BTreeMap::new();
    let mut static_table = !extra_table_writers.dynamic && !members_mutate_tables(plan)?;
    for s in &segments {
        let (SegmentKind::Active, Some(offset)) = (&s.kind, s.offset) else {
            continue;
        };
        if s.table != main_table {
            continue;
        }
        let Ok(base) = u32::try_from(offset) else {
            static_table = false;
            continue;
        };
        let entries: Vec<Option<u32>> = match &s.items {
            SegmentItems::Functions(f) => f.iter().map(|&f| Some(f)).collect(),
            SegmentItems::Expressions(_, _, f) => f.clone(),
        };
        stats.table_entries += entries.len();
        for (i, f) in entries.into_iter().enumerate() {
            let slot = base + i as u32;
            match f {
                Some(f) => slots.insert(slot, f),
                None => slots.remove(&slot),
            };
        }
    }
    for range in &extra_table_writers.ranges {
        for slot in range.clone() {
            slots.remove(&slot);
        }
    }

    // Trampolines in the main module whose slot is known.
    let mut redirect: HashMap<u32, u32> = HashMap::new();
    let mut trampolines: HashMap<u32, (usize, u32)> = HashMap::new();
    {
        let info = main_info;
        let imported = info.imported[Sort::Func.slot()];
        for (i, body) in info.code.iter().enumerate() {
            let func = imported + i as u32;
            let Some(ty) = info.func_type(func) else {
                continue;
            };
            let Some((slot, call_ty, table)) = trampoline(body, ty.params().len())? else {
                continue;
            };
            stats.trampolines += 1;
            if !options.direct_calls
                || !static_table
                || layout.index(plan.main, Sort::Table, table)? != main_table
            {
                continue;
            }
            let Some(call_ty) = info.types.get(call_ty as usize).and_then(Option::as_ref) else {
                continue;
            };
            let Some(&target) = slots.get(&slot) else {
                continue;
            };
            let Some(target_ty) = merged_func_type(plan, layout, target) else {
                continue;
            };
            if call_ty != ty || target_ty != ty {
                continue;
            }
            let merged = layout.index(plan.main, Sort::Func, func)?;
            redirect.insert(merged, target);
            trampolines.insert(func, (ty.params().len(), target));
        }
        stats.trampolines_resolved = redirect.len();
    }

    // Functions and code.
    let mut functions = FunctionSection::new();
    let mut code = CodeSection::new();
    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    for (i, ext) in layout.externals.iter().enumerate() {
        if ext.sort == Sort::Func {
            let index = layout
                .externals
                .iter()
                .take(i)
                .filter(|e| e.sort == Sort::Func)
                .count() as u32;
            names.insert(index, ext.field.clone());
        }
    }
    for m in 0..n {
        let info = plan.member_info(m);
        let imported = info.imported[Sort::Func.slot()];
        let maps = &layout.maps[m];
        for (i, ty) in info.func_types.iter().enumerate().skip(imported as usize) {
            let _ = i;
            functions.function(ty + layout.type_offset[m]);
        }
        for (i, body) in info.code.iter().enumerate() {
            let func = imported + i as u32;
            if m == plan.main
                && let Some(&(params, target)) = trampolines.get(&func)
            {
                let mut f = Function::new([]);
                for p in 0..params as u32 {
                    f.instruction(&Instruction::LocalGet(p));
                }
                f.instruction(&Instruction::Call(target));
                f.instruction(&Instruction::End);
                code.function(&f);
                continue;
            }
            let mut mapper = Mapper {
                maps,
                type_offset: layout.type_offset[m],
                data: &data_maps[m],
                elements: &elem_maps[m],
                const_globals: &layout.const_globals,
                redirect: &redirect,
                label: &plan.members[m].label,
                stats: &mut stats,
            };
            mapper.parse_function_body(&mut code, body.clone())?;
        }
        // Names: the module's own, else (main module) the name it exports it under.
        let mut named: HashSet<u32> = HashSet::new();
        for &(index, name) in &info.func_names {
            if index >= imported
                && let Some(&merged) = maps[Sort::Func.slot()].get(index as usize)
            {
                names.insert(merged, name.to_string());
                named.insert(index);
            }
        }
        for e in &info.exports {
            if e.kind == wasmparser::ExternalKind::Func
                && e.index >= imported
                && !named.contains(&e.index)
                && let Some(&merged) = maps[Sort::Func.slot()].get(e.index as usize)
            {
                let name = if m == plan.main {
                    format!("env:{}", e.name)
                } else {
                    e.name.to_string()
                };
                names.entry(merged).or_insert(name);
            }
        }
    }

    // The forwarding functions (point 3), after every member's.
    let forward_base = layout.forward_base;
    for (p, forward) in layout.forwards.iter().enumerate() {
        functions.function(forward.type_index);
        let mut f = Function::new([]);
        for i in 0..forward.params {
            f.instruction(&Instruction::LocalGet(i));
        }
        f.instruction(&Instruction::I32Const(forward.slot as i32));
        f.instruction(&Instruction::CallIndirect {
            type_index: forward.type_index,
            table_index: forward.table,
        });
        f.instruction(&Instruction::End);
        code.function(&f);
        names.insert(forward_base + p as u32, forward.field.clone());
    }
    stats.forwarders = layout.forwards.len();

    // Start: the members' start functions in instantiation order.
    let starts: Vec<u32> = (0..n)
        .filter_map(|m| {
            plan.member_info(m)
                .start
                .map(|s| layout.index(m, Sort::Func, s))
        })
        .collect::<Result<_, _>>()?;
    let total_funcs = forward_base + layout.forwards.len() as u32;
    let start = match starts.as_slice() {
        [] => None,
        [one] => Some(*one),
        many => {
            functions.function(thunk_type);
            let mut f = Function::new([]);
            for &s in many {
                f.instruction(&Instruction::Call(s));
            }
            f.instruction(&Instruction::End);
            code.function(&f);
            names.insert(total_funcs, "filerouter-link:start".into());
            Some(total_funcs)
        }
    };

    // Tables, memories (none: imported), globals, tags.
    let mut tables = TableSection::new();
    let mut globals = GlobalSection::new();
    let mut tags = TagSection::new();
    for m in 0..n {
        let info = plan.member_info(m);
        let mut mapper = RoundtripMap {
            maps: &layout.maps[m],
            type_offset: layout.type_offset[m],
        };
        for table in &info.tables {
            let ty = mapper.table_type(table.ty)?;
            match &table.init {
                wasmparser::TableInit::RefNull => {
                    tables.table(ty);
                }
                wasmparser::TableInit::Expr(e) => {
                    tables.table_with_init(ty, &mapper.const_expr(e.clone())?);
                }
            }
        }
        for (j, g) in info.globals.iter().enumerate() {
            let ty = mapper.global_type(g.ty)?;
            let init = match layout.global_values[m][j] {
                Some(v) => v.const_expr(),
                None => {
                    if refers_to_globals(&g.init_expr)? {
                        return Err(LinkError::NotConstant {
                            module: plan.members[m].label.clone(),
                            what: format!("the initializer of global {j}"),
                        });
                    }
                    mapper.const_expr(g.init_expr.clone())?
                }
            };
            globals.global(ty, &init);
        }
        for tag in &info.tags {
            tags.tag(mapper.tag_type(*tag)?);
        }
    }

    // Exports.
    let mut export_section = ExportSection::new();
    for &(member, sort, index) in exports {
        let merged = layout.index(member, sort, index)?;
        let kind = match sort {
            Sort::Func => ExportKind::Func,
            Sort::Table => ExportKind::Table,
            Sort::Memory => continue, // the memory is exported by the data module
            Sort::Global => ExportKind::Global,
            Sort::Tag => ExportKind::Tag,
        };
        export_section.export(&export_name(plan, member, sort, index), kind, merged);
    }

    // Elements.
    let mut elements = ElementSection::new();
    for s in &segments {
        let items = match &s.items {
            SegmentItems::Functions(f) => Elements::Functions(Cow::Borrowed(f)),
            SegmentItems::Expressions(ty, exprs, _) => {
                Elements::Expressions(*ty, Cow::Borrowed(exprs))
            }
        };
        match s.kind {
            SegmentKind::Active => {
                let offset = ConstExpr::i32_const(s.offset.unwrap_or(0));
                let table = (s.table != 0).then_some(s.table);
                elements.active(table, &offset, items);
            }
            SegmentKind::Passive => {
                elements.passive(items);
            }
            SegmentKind::Declared => {
                elements.declared(items);
            }
        }
    }

    let mut module = Module::new();
    module.section(&types);
    module.section(&imports);
    module.section(&functions);
    if !tables.is_empty() {
        module.section(&tables);
    }
    if !tags.is_empty() {
        module.section(&tags);
    }
    module.section(&globals);
    module.section(&export_section);
    if let Some(function_index) = start {
        module.section(&StartSection { function_index });
    }
    if !elements.is_empty() {
        module.section(&elements);
    }
    if passive_count > 0 {
        module.section(&DataCountSection {
            count: passive_count,
        });
    }
    module.section(&code);
    if passive_count > 0 {
        module.section(&passive_data);
    }
    let mut name_section = NameSection::new();
    name_section.module("filerouter-guest-linked");
    let mut name_map = NameMap::new();
    for (index, name) in &names {
        name_map.append(*index, name);
    }
    name_section.functions(&name_map);
    module.section(&name_section);

    let mut data_module = Module::new();
    let mut memories = MemorySection::new();
    memories.memory(TypeShift { offset: 0 }.memory_type(main_memory)?);
    data_module.section(&memories);
    let mut data_exports = ExportSection::new();
    data_exports.export(MEMORY, ExportKind::Memory, 0);
    data_module.section(&data_exports);
    if !data_module_segments.is_empty() {
        data_module.section(&data_module_segments);
    }

    Ok(Built {
        module: module.finish(),
        data_module: data_module.finish(),
        stats,
    })
}

/// Slots of the main table that instances outside the merged module write.
#[derive(Debug, Default, Clone)]
pub struct TableWriters {
    /// Something outside may change any slot at run time.
    pub dynamic: bool,
    /// Slots written by element segments of modules that stay separate.
    pub ranges: Vec<std::ops::Range<u32>>,
}

/// A reencoder with a member's index maps, for types and constant expressions.
struct RoundtripMap<'l> {
    maps: &'l [Vec<u32>; 5],
    type_offset: u32,
}

impl Reencode for RoundtripMap<'_> {
    type Error = LinkError;
    fn function_index(&mut self, func: u32) -> Result<u32, ReError<LinkError>> {
        map_or_err(self.maps, Sort::Func, func)
    }
    fn global_index(&mut self, global: u32) -> Result<u32, ReError<LinkError>> {
        map_or_err(self.maps, Sort::Global, global)
    }
    fn table_index(&mut self, table: u32) -> Result<u32, ReError<LinkError>> {
        map_or_err(self.maps, Sort::Table, table)
    }
    fn tag_index(&mut self, tag: u32) -> Result<u32, ReError<LinkError>> {
        map_or_err(self.maps, Sort::Tag, tag)
    }
    fn type_index(&mut self, ty: u32) -> Result<u32, ReError<LinkError>> {
        Ok(ty + self.type_offset)
    }
}

fn map_or_err(maps: &[Vec<u32>; 5], sort: Sort, index: u32) -> Result<u32, ReError<LinkError>> {
    maps[sort.slot()]
        .get(index as usize)
        .copied()
        .ok_or_else(|| {
            ReError::UserError(LinkError::Unsupported(format!(
                "{} index {index} out of range",
                sort.name()
            )))
        })
}

/// Evaluates a member's constant expression.
fn eval_in_member(
    plan: &Plan<'_>,
    layout: &Layout<'_>,
    m: usize,
    expr: &PConstExpr<'_>,
) -> Result<Option<Value>, LinkError> {
    eval(expr, &mut |k| {
        let merged = layout.index(m, Sort::Global, k)?;
        let _ = plan;
        Ok(layout.const_globals.get(&merged).copied())
    })
}

/// Whether a constant expression reads a global.
fn refers_to_globals(expr: &PConstExpr<'_>) -> Result<bool, LinkError> {
    for op in expr.get_operators_reader() {
        if matches!(op?, Operator::GlobalGet { .. }) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The function a `ref.func` expression names (`None` for `ref.null`).
fn ref_func(expr: &PConstExpr<'_>) -> Result<Option<u32>, LinkError> {
    for op in expr.get_operators_reader() {
        match op? {
            Operator::RefFunc { function_index } => return Ok(Some(function_index)),
            Operator::RefNull { .. } => return Ok(None),
            _ => {}
        }
    }
    Ok(None)
}

/// Matches wit-component's trampoline: `local.get 0..n; i32.const SLOT; call_indirect`.
/// Returns the slot, the call's type and table.
fn trampoline(
    body: &wasmparser::FunctionBody<'_>,
    params: usize,
) -> Result<Option<(u32, u32, u32)>, LinkError> {
    if body.get_locals_reader()?.get_count() != 0 {
        return Ok(None);
    }
    let mut ops = body.get_operators_reader()?;
    for p in 0..params as u32 {
        match ops.read()? {
            Operator::LocalGet { local_index } if local_index == p => {}
            _ => return Ok(None),
        }
    }
    let Operator::I32Const { value } = ops.read()? else {
        return Ok(None);
    };
    let Operator::CallIndirect {
        type_index,
        table_index,
    } = ops.read()?
    else {
        return Ok(None);
    };
    let Operator::End = ops.read()? else {
        return Ok(None);
    };
    if !ops.eof() {
        return Ok(None);
    }
    Ok(u32::try_from(value)
        .ok()
        .map(|slot| (slot, type_index, table_index)))
}

/// The function type of merged function `index` (defined in a member).
fn merged_func_type<'p>(
    plan: &'p Plan<'_>,
    layout: &Layout<'_>,
    index: u32,
) -> Option<&'p wasmparser::FuncType> {
    for m in 0..plan.members.len() {
        let info = plan.member_info(m);
        let imported = info.imported[Sort::Func.slot()];
        let map = &layout.maps[m][Sort::Func.slot()];
        let defined = &map[imported as usize..];
        if let (Some(&first), Some(&last)) = (defined.first(), defined.last())
            && index >= first
            && index <= last
        {
            return info.func_type(imported + (index - first));
        }
    }
    None
}

/// Whether any member's code changes a table at run time.
fn members_mutate_tables(plan: &Plan<'_>) -> Result<bool, LinkError> {
    for m in 0..plan.members.len() {
        if code_mutates_tables(plan.member_info(m))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether a module's code has table-changing instructions.
pub fn code_mutates_tables(info: &ModuleInfo<'_>) -> Result<bool, LinkError> {
    for body in &info.code {
        for op in body.get_operators_reader()? {
            if matches!(
                op?,
                Operator::TableSet { .. }
                    | Operator::TableFill { .. }
                    | Operator::TableCopy { .. }
                    | Operator::TableInit { .. }
                    | Operator::TableGrow { .. }
            ) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}
