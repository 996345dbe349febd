//! Emitting the new component: the same component-level items (types, imports, exports,
//! lifts, nested components) in the same order, with the core part rebuilt: the data
//! module is instantiated where the main module was, the merged module where the last
//! library was, and every other core item (aliases, bags, `canon` functions, other module
//! instances) is emitted on demand, just before its first user, with its references
//! renumbered.
//!
//! It neither decides what is merged (`plan`) nor builds the merged module (`merge`). It is
//! run twice: a dry run (`Mode::Collect`) that only records which member items the rest of
//! the component needs from the merged module, and the real run with the built modules.

use crate::component::{CoreInstanceDef, CoreItemDef, Sort, TopItem};
use crate::error::LinkError;
use crate::merge::{Built, DATA_MODULE, EXTERNAL_MODULE, Layout, MEMORY, export_name};
use crate::module::sort_of;
use crate::plan::{Outside, Plan, Resolved};
use std::collections::{BTreeSet, HashMap};
use wasm_encoder::reencode::{Error as ReError, Reencode, ReencodeComponent, RoundtripReencoder};
use wasm_encoder::{
    Alias, CanonicalFunctionSection, ComponentAliasSection, ExportKind, InstanceSection, ModuleArg,
    RawSection,
};

/// Which run this is.
pub enum Mode<'b> {
    /// Record the member items needed from outside the merged module.
    Collect,
    /// Emit the component with the built modules.
    Emit(&'b Built),
}

/// A section being filled (consecutive items of one kind share a section).
enum Open {
    None,
    Aliases(ComponentAliasSection),
    Instances(InstanceSection),
}

/// The emitter's state.
pub struct Emitter<'p, 'a, 'b> {
    plan: &'p Plan<'a>,
    layout: &'p Layout<'a>,
    mode: Mode<'b>,
    out: wasm_encoder::Component,
    open: Open,
    /// Member items needed from the merged module.
    pub needed: BTreeSet<(usize, Sort, u32)>,
    core: [HashMap<u32, u32>; 5],
    counts: [u32; 5],
    instances: HashMap<u32, u32>,
    instance_count: u32,
    modules: HashMap<u32, u32>,
    module_count: u32,
    member_aliases: HashMap<(usize, Sort, u32), u32>,
    outside_aliases: HashMap<(u32, &'a str, Sort), u32>,
    member_bags: HashMap<(u32, u32, &'a str), u32>,
    memory_alias: Option<u32>,
    data_module: Option<u32>,
    merged_module: Option<u32>,
    data_instance: Option<u32>,
    merged_instance: Option<u32>,
    merging: bool,
    /// First error raised inside a reencoder callback that cannot return one.
    deferred: Option<LinkError>,
    /// Core module instantiations emitted.
    pub instantiations: usize,
    /// Instantiations postponed until the merged instance exists.
    deferred_instances: Vec<u32>,
    /// Whether an original core instance depends on the merged instance (memo).
    depends: HashMap<u32, bool>,
}

impl<'p, 'a, 'b> Emitter<'p, 'a, 'b> {
    pub fn new(plan: &'p Plan<'a>, layout: &'p Layout<'a>, mode: Mode<'b>) -> Self {
        Emitter {
            plan,
            layout,
            mode,
            out: wasm_encoder::Component::new(),
            open: Open::None,
            needed: BTreeSet::new(),
            core: Default::default(),
            counts: [0; 5],
            instances: HashMap::new(),
            instance_count: 0,
            modules: HashMap::new(),
            module_count: 0,
            member_aliases: HashMap::new(),
            outside_aliases: HashMap::new(),
            member_bags: HashMap::new(),
            memory_alias: None,
            data_module: None,
            merged_module: None,
            data_instance: None,
            merged_instance: None,
            merging: false,
            deferred: None,
            instantiations: 0,
            deferred_instances: Vec::new(),
            depends: HashMap::new(),
        }
    }

    /// Walks the component's top-level items in order and emits the new component.
    pub fn run(mut self) -> Result<(Vec<u8>, Self), LinkError> {
        let plan = self.plan;
        let main = &plan.members[plan.main];
        for item in &plan.comp.items {
            match item {
                TopItem::Module(index) => {
                    if *index == main.module {
                        self.emit_new_modules()?;
                    } else if plan.member_modules.contains(index)
                        || plan.folded.iter().any(|f| f.module == *index)
                    {
                        // merged, or its instance is folded away
                    } else {
                        let bytes = plan.comp.module_bytes(*index)?;
                        self.flush();
                        self.out.section(&RawSection { id: 1, data: bytes });
                        self.modules.insert(*index, self.module_count);
                        self.module_count += 1;
                    }
                }
                TopItem::CoreInstance(index) => {
                    if plan.member_of_instance.contains_key(index) {
                        if *index == main.instance {
                            self.data()?;
                        }
                        if *index == plan.last_member_instance {
                            self.merged()?;
                            for deferred in std::mem::take(&mut self.deferred_instances) {
                                self.instance(deferred)?;
                            }
                        }
                    } else if plan.folded_instances.contains(index) {
                        // its element segments are in the merged module
                    } else if let CoreInstanceDef::Instantiate { .. } =
                        plan.comp.instance(*index)?
                    {
                        // An instance that needs the merged one waits for it (wit-component
                        // instantiates the adapter right after the main module, whose
                        // `cabi_realloc` it imports).
                        if self.merged_instance.is_none() && self.needs_merged_instance(*index)? {
                            self.check_deferrable(*index)?;
                            self.deferred_instances.push(*index);
                        } else {
                            self.instance(*index)?;
                        }
                    }
                }
                TopItem::CoreAlias => {}
                TopItem::Canon(index) => {
                    if let Some(wasmparser::CanonicalFunction::Lift { .. }) =
                        plan.comp.canons.get(*index)
                    {
                        self.canon(*index)?;
                    }
                }
                TopItem::ComponentAlias(alias) => {
                    let alias = wasm_encoder::reencode::component_utils::component_alias(
                        &mut RoundtripReencoder,
                        alias.clone(),
                    )
                    .map_err(|e| LinkError::Reencode(format!("{e:?}")))?;
                    self.alias(alias);
                }
                TopItem::Raw { id, range } => {
                    let data = plan
                        .comp
                        .bytes
                        .get(range.clone())
                        .ok_or_else(|| LinkError::Unsupported("section out of range".into()))?;
                    self.flush();
                    self.out.section(&RawSection { id: *id, data });
                }
            }
        }
        if self.merged_instance.is_none() {
            self.merged()?;
        }
        for deferred in std::mem::take(&mut self.deferred_instances) {
            self.instance(deferred)?;
        }
        self.flush();
        let out = std::mem::take(&mut self.out);
        Ok((out.finish(), self))
    }

    fn flush(&mut self) {
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => {}
            Open::Aliases(s) => {
                self.out.section(&s);
            }
            Open::Instances(s) => {
                self.out.section(&s);
            }
        }
    }

    fn alias(&mut self, alias: Alias<'_>) {
        if !matches!(self.open, Open::Aliases(_)) {
            self.flush();
            self.open = Open::Aliases(ComponentAliasSection::new());
        }
        if let Open::Aliases(s) = &mut self.open {
            s.alias(alias);
        }
    }

    fn core_alias(&mut self, instance: u32, name: &str, sort: Sort) -> u32 {
        self.alias(Alias::CoreInstanceExport {
            instance,
            kind: export_kind(sort),
            name,
        });
        let index = self.counts[sort.slot()];
        self.counts[sort.slot()] += 1;
        index
    }

    fn instances_section(&mut self) -> &mut InstanceSection {
        if !matches!(self.open, Open::Instances(_)) {
            self.flush();
            self.open = Open::Instances(InstanceSection::new());
        }
        match &mut self.open {
            Open::Instances(s) => s,
            _ => unreachable!("just opened"),
        }
    }

    fn bag(&mut self, items: Vec<(String, Sort, u32)>) -> u32 {
        self.instances_section().export_items(
            items
                .iter()
                .map(|(name, sort, index)| (name.as_str(), export_kind(*sort), *index)),
        );
        let index = self.instance_count;
        self.instance_count += 1;
        index
    }

    fn instantiate(&mut self, module: u32, args: Vec<(String, u32)>) -> u32 {
        self.instances_section().instantiate(
            module,
            args.iter()
                .map(|(name, index)| (name.as_str(), ModuleArg::Instance(*index))),
        );
        self.instantiations += 1;
        let index = self.instance_count;
        self.instance_count += 1;
        index
    }

    /// Emits the data module and the merged module (where the main module was).
    fn emit_new_modules(&mut self) -> Result<(), LinkError> {
        self.flush();
        let empty = wasm_encoder::Module::new().finish();
        let (data, merged) = match &self.mode {
            Mode::Collect => (empty.clone(), empty),
            Mode::Emit(built) => (built.data_module.clone(), built.module.clone()),
        };
        self.out.section(&RawSection { id: 1, data: &data });
        self.data_module = Some(self.module_count);
        self.module_count += 1;
        self.out.section(&RawSection {
            id: 1,
            data: &merged,
        });
        self.merged_module = Some(self.module_count);
        self.module_count += 1;
        Ok(())
    }

    /// The data instance (instantiated on first need).
    fn data(&mut self) -> Result<u32, LinkError> {
        if let Some(i) = self.data_instance {
            return Ok(i);
        }
        let module = self.data_module.ok_or_else(|| {
            LinkError::Unsupported(
                "the main module is instantiated before its module section".into(),
            )
        })?;
        let i = self.instantiate(module, Vec::new());
        self.data_instance = Some(i);
        Ok(i)
    }

    /// The merged instance (instantiated on first need).
    fn merged(&mut self) -> Result<u32, LinkError> {
        if let Some(i) = self.merged_instance {
            return Ok(i);
        }
        if self.merging {
            return Err(LinkError::Cycle("the merged module".into()));
        }
        self.merging = true;
        let data = self.data()?;
        let mut items = Vec::with_capacity(self.layout.externals.len());
        for ext in &self.layout.externals {
            let index =
                self.resolved(Resolved::Outside(ext.what.clone()))
                    .map_err(|e| match e {
                        LinkError::Cycle(_) => LinkError::Cycle(format!("import `{}`", ext.field)),
                        other => other,
                    })?;
            items.push((ext.field.clone(), ext.sort, index));
        }
        let bag = self.bag(items);
        let module = self.merged_module.ok_or_else(|| {
            LinkError::Unsupported("no module section for the merged module".into())
        })?;
        let i = self.instantiate(
            module,
            vec![
                (DATA_MODULE.to_string(), data),
                (EXTERNAL_MODULE.to_string(), bag),
            ],
        );
        self.merged_instance = Some(i);
        self.merging = false;
        Ok(i)
    }

    /// The new index of core item `index` of `sort`.
    fn core_item(&mut self, sort: Sort, index: u32) -> Result<u32, LinkError> {
        if let Some(&i) = self.core[sort.slot()].get(&index) {
            return Ok(i);
        }
        let new = match self.plan.comp.core_item(sort, index)? {
            CoreItemDef::Canon(c) => self.canon(*c)?,
            CoreItemDef::Alias { .. } => {
                let r = self.plan.resolve_core_item(sort, index, 0)?;
                self.resolved(r)?
            }
        };
        self.core[sort.slot()].insert(index, new);
        Ok(new)
    }

    /// The new index of a resolved item.
    fn resolved(&mut self, r: Resolved<'a>) -> Result<u32, LinkError> {
        match r {
            Resolved::Member {
                member,
                sort,
                index,
            } => {
                if let Some(&i) = self.member_aliases.get(&(member, sort, index)) {
                    return Ok(i);
                }
                let merged = self.merged()?;
                self.needed.insert((member, sort, index));
                let name = export_name(self.plan, member, sort, index);
                let i = self.core_alias(merged, &name, sort);
                self.member_aliases.insert((member, sort, index), i);
                Ok(i)
            }
            Resolved::Memory => {
                if let Some(i) = self.memory_alias {
                    return Ok(i);
                }
                let data = self.data()?;
                let i = self.core_alias(data, MEMORY, Sort::Memory);
                self.memory_alias = Some(i);
                Ok(i)
            }
            Resolved::Outside(Outside::Canon(f)) => self.core_item(Sort::Func, f),
            Resolved::Outside(Outside::Export {
                instance,
                name,
                sort,
            }) => {
                if let Some(&i) = self.outside_aliases.get(&(instance, name, sort)) {
                    return Ok(i);
                }
                let new_instance = self.instance(instance)?;
                let i = self.core_alias(new_instance, name, sort);
                self.outside_aliases.insert((instance, name, sort), i);
                Ok(i)
            }
        }
    }

    /// The new index of core instance `index` (not a member's).
    fn instance(&mut self, index: u32) -> Result<u32, LinkError> {
        if let Some(&i) = self.instances.get(&index) {
            return Ok(i);
        }
        let plan = self.plan;
        if plan.member_of_instance.contains_key(&index) || plan.folded_instances.contains(&index) {
            return Err(LinkError::Unsupported(format!(
                "core instance {index} is merged but used as a whole"
            )));
        }
        let new = match plan.comp.instance(index)? {
            CoreInstanceDef::FromExports(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (name, sort, item) in items {
                    let i = self.core_item(*sort, *item)?;
                    out.push((name.to_string(), *sort, i));
                }
                self.bag(out)
            }
            CoreInstanceDef::Instantiate { module, args } => {
                let new_module = *self.modules.get(module).ok_or_else(|| {
                    LinkError::Unsupported(format!(
                        "core module {module} is instantiated before its section"
                    ))
                })?;
                let mut new_args = Vec::with_capacity(args.len());
                for (name, arg) in args {
                    let i = if plan.member_of_instance.contains_key(arg) {
                        self.member_bag(*module, *arg, name)?
                    } else {
                        self.instance(*arg)?
                    };
                    new_args.push((name.to_string(), i));
                }
                self.instantiate(new_module, new_args)
            }
        };
        self.instances.insert(index, new);
        Ok(new)
    }

    /// A bag standing in for member instance `member_instance` passed whole to module
    /// `module` under `name`: the items that module imports from it.
    fn member_bag(
        &mut self,
        module: u32,
        member_instance: u32,
        name: &'a str,
    ) -> Result<u32, LinkError> {
        if let Some(&i) = self.member_bags.get(&(module, member_instance, name)) {
            return Ok(i);
        }
        let plan = self.plan;
        let info = &plan.infos[module as usize];
        let mut items: Vec<(String, Sort, u32)> = Vec::new();
        for import in info.imports.iter().filter(|i| i.module == name) {
            if items.iter().any(|(n, _, _)| n == import.name) {
                continue;
            }
            let sort = sort_of(&import.ty);
            let r = plan
                .resolve_export(member_instance, import.name, sort, 0)?
                .ok_or_else(|| LinkError::UnresolvedImport {
                    library: format!("module {module}"),
                    module: import.module.into(),
                    name: import.name.into(),
                })?;
            let i = self.resolved(r)?;
            items.push((import.name.to_string(), sort, i));
        }
        let bag = self.bag(items);
        self.member_bags
            .insert((module, member_instance, name), bag);
        Ok(bag)
    }

    /// An instance moved after the merged one must not have effects whose order against
    /// the libraries' could be observed: no start function, no active data segments.
    fn check_deferrable(&self, index: u32) -> Result<(), LinkError> {
        if let CoreInstanceDef::Instantiate { module, .. } = self.plan.comp.instance(index)? {
            let info = &self.plan.infos[*module as usize];
            let has_data = info
                .data
                .iter()
                .any(|d| matches!(d.kind, wasmparser::DataKind::Active { .. }));
            if info.start.is_some() || has_data {
                return Err(LinkError::Unsupported(format!(
                    "module {module} needs the merged module, so it must be instantiated after \
                     it, but it has a start function or data segments that would then run in \
                     a different order"
                )));
            }
        }
        Ok(())
    }

    /// Whether original core instance `index` needs (transitively) an item of the merged
    /// module.
    fn needs_merged_instance(&mut self, index: u32) -> Result<bool, LinkError> {
        if let Some(&d) = self.depends.get(&index) {
            return Ok(d);
        }
        let plan = self.plan;
        // Provisional answer, which also stops cycles.
        self.depends.insert(index, false);
        let d = if plan.member_of_instance.contains_key(&index) {
            true
        } else {
            match plan.comp.instance(index)? {
                CoreInstanceDef::Instantiate { args, .. } => {
                    let mut any = false;
                    for (_, arg) in args {
                        if self.needs_merged_instance(*arg)? {
                            any = true;
                            break;
                        }
                    }
                    any
                }
                CoreInstanceDef::FromExports(items) => {
                    let mut any = false;
                    for (_, sort, item) in items {
                        if self.needs_merged_item(*sort, *item)? {
                            any = true;
                            break;
                        }
                    }
                    any
                }
            }
        };
        self.depends.insert(index, d);
        Ok(d)
    }

    /// Whether original core item `index` of `sort` needs an item of the merged module.
    fn needs_merged_item(&mut self, sort: Sort, index: u32) -> Result<bool, LinkError> {
        match self.plan.resolve_core_item(sort, index, 0)? {
            Resolved::Member { .. } => Ok(true),
            Resolved::Memory => Ok(false),
            Resolved::Outside(Outside::Export { instance, .. }) => {
                self.needs_merged_instance(instance)
            }
            Resolved::Outside(Outside::Canon(f)) => {
                let Some(CoreItemDef::Canon(c)) = self.plan.comp.core[Sort::Func.slot()]
                    .get(f as usize)
                    .cloned()
                else {
                    return Ok(false);
                };
                let options = match self.plan.comp.canons.get(c) {
                    Some(wasmparser::CanonicalFunction::Lower { options, .. }) => options.to_vec(),
                    _ => Vec::new(),
                };
                for option in options {
                    let dep = match option {
                        wasmparser::CanonicalOption::Memory(m) => (Sort::Memory, m),
                        wasmparser::CanonicalOption::Realloc(f)
                        | wasmparser::CanonicalOption::PostReturn(f)
                        | wasmparser::CanonicalOption::Callback(f) => (Sort::Func, f),
                        _ => continue,
                    };
                    if self.needs_merged_item(dep.0, dep.1)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
        }
    }

    /// Emits `canon` definition `index`; returns the new core function index (or the
    /// component function's, for a lift).
    fn canon(&mut self, index: usize) -> Result<u32, LinkError> {
        let canon = self
            .plan
            .comp
            .canons
            .get(index)
            .cloned()
            .ok_or_else(|| LinkError::Unsupported(format!("canon {index} out of range")))?;
        let is_lift = matches!(canon, wasmparser::CanonicalFunction::Lift { .. });
        let mut section = CanonicalFunctionSection::new();
        wasm_encoder::reencode::component_utils::parse_component_canonical(
            self,
            &mut section,
            canon,
        )?;
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        self.flush();
        self.out.section(&section);
        if is_lift {
            return Ok(0);
        }
        let i = self.counts[Sort::Func.slot()];
        self.counts[Sort::Func.slot()] += 1;
        Ok(i)
    }
}

fn export_kind(sort: Sort) -> ExportKind {
    match sort {
        Sort::Func => ExportKind::Func,
        Sort::Table => ExportKind::Table,
        Sort::Memory => ExportKind::Memory,
        Sort::Global => ExportKind::Global,
        Sort::Tag => ExportKind::Tag,
    }
}

fn user(e: LinkError) -> ReError<LinkError> {
    ReError::UserError(e)
}

impl Reencode for Emitter<'_, '_, '_> {
    type Error = LinkError;

    fn function_index(&mut self, func: u32) -> Result<u32, ReError<LinkError>> {
        self.core_item(Sort::Func, func).map_err(user)
    }
    fn memory_index(&mut self, memory: u32) -> Result<u32, ReError<LinkError>> {
        self.core_item(Sort::Memory, memory).map_err(user)
    }
    fn table_index(&mut self, table: u32) -> Result<u32, ReError<LinkError>> {
        self.core_item(Sort::Table, table).map_err(user)
    }
    fn global_index(&mut self, global: u32) -> Result<u32, ReError<LinkError>> {
        self.core_item(Sort::Global, global).map_err(user)
    }
    fn tag_index(&mut self, tag: u32) -> Result<u32, ReError<LinkError>> {
        self.core_item(Sort::Tag, tag).map_err(user)
    }
}

impl ReencodeComponent for Emitter<'_, '_, '_> {
    fn instance_index(&mut self, ty: u32) -> u32 {
        match self.instance(ty) {
            Ok(i) => i,
            Err(e) => {
                self.deferred.get_or_insert(e);
                0
            }
        }
    }
    fn module_index(&mut self, ty: u32) -> u32 {
        match self.modules.get(&ty) {
            Some(&i) => i,
            None => {
                self.deferred.get_or_insert(LinkError::Unsupported(format!(
                    "core module {ty} referenced by a component-level item"
                )));
                0
            }
        }
    }
}
