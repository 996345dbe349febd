//! Unit tests on small components made for the purpose (see `fixtures`).

mod fixtures;

mod real_guest {
    use crate::{Options, Shape, link_with_report};
    use wasmparser::{Validator, WasmFeatures};

    /// Links the real guest named by `FILEROUTER_REAL_GUEST` and prints its shape before and
    /// after: a tool for working on the linker (`FILEROUTER_REAL_GUEST=/abs/path/guest.wasm
    /// cargo test -p filerouter-guest-link -- --ignored --nocapture`). The build links the
    /// real guest every time, and the host's tests check what it shipped.
    #[test]
    #[ignore = "needs FILEROUTER_REAL_GUEST, a componentize-py guest"]
    fn real_guest_links_and_validates() {
        let path = std::env::var_os("FILEROUTER_REAL_GUEST")
            .expect("FILEROUTER_REAL_GUEST names a componentize-py guest component");
        let input = std::fs::read(&path).expect("read the real guest");
        let started = std::time::Instant::now();
        let (output, report) = match link_with_report(&input, &Options::default()) {
            Ok(r) => r,
            Err(e) => panic!("link failed: {e}"),
        };
        let took = started.elapsed();
        Validator::new_with_features(WasmFeatures::all())
            .validate_all(&output)
            .expect("linked guest validates");
        let before = Shape::of(&input).expect("measure input");
        let after = Shape::of(&output).expect("measure output");
        eprintln!(
            "linked in {took:?}: {} -> {} bytes",
            input.len(),
            output.len()
        );
        eprintln!(
            "merged: {:?}; folded element-only modules: {}",
            report.merged, report.folded
        );
        eprintln!("before: {before:?}");
        eprintln!("after:  {after:?}");
        eprintln!("merge:  {:?}", report.merge);
        if let Some(out) = std::env::var_os("FILEROUTER_REAL_GUEST_OUT") {
            std::fs::write(out, &output).expect("write linked guest");
        }
    }
}

mod helpers {
    use wasmparser::{
        ElementKind, KnownCustom, Name, Operator, Parser, Payload, Validator, WasmFeatures,
    };

    pub fn validate(bytes: &[u8]) {
        Validator::new_with_features(WasmFeatures::all())
            .validate_all(bytes)
            .expect("validates");
    }

    /// The core modules of a component, in order.
    pub fn modules(component: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut depth = 0;
        for payload in Parser::new(0).parse_all(component) {
            match payload.expect("parses") {
                Payload::ModuleSection {
                    unchecked_range, ..
                } => {
                    if depth == 0 {
                        let r = unchecked_range.start as usize..unchecked_range.end as usize;
                        out.push(component[r].to_vec());
                    }
                    depth += 1;
                }
                Payload::ComponentSection { .. } => depth += 1,
                Payload::End(_) if depth > 0 => depth -= 1,
                _ => {}
            }
        }
        out
    }

    /// What the tests look at in a core module.
    #[derive(Default, Debug)]
    pub struct Summary {
        pub imported_tables: u32,
        pub defined_tables: u32,
        pub defined_memories: u32,
        pub imported_funcs: u32,
        pub code: usize,
        pub data: usize,
        pub element_offsets: Vec<Option<i32>>,
        pub names: Vec<(u32, String)>,
        pub imports: Vec<(String, String)>,
        /// Direct call targets of each defined function (by function index).
        pub calls: Vec<(u32, Vec<u32>)>,
        pub call_indirects: usize,
        /// Tables of the `call_indirect`s of each defined function (by function index).
        pub indirect_tables: Vec<(u32, Vec<u32>)>,
    }

    impl Summary {
        pub fn func(&self, name: &str) -> u32 {
            self.names
                .iter()
                .find(|(_, n)| n == name)
                .map(|(i, _)| *i)
                .unwrap_or_else(|| panic!("no function named `{name}` in {:?}", self.names))
        }

        /// The tables function `name` calls through.
        pub fn indirect_calls_of(&self, name: &str) -> Vec<u32> {
            self.of(&self.indirect_tables, name)
        }

        pub fn calls_of(&self, name: &str) -> Vec<u32> {
            self.of(&self.calls, name)
        }

        /// Function `name`'s entry in a per-function list.
        fn of(&self, list: &[(u32, Vec<u32>)], name: &str) -> Vec<u32> {
            let f = self.func(name);
            list.iter()
                .find(|(i, _)| *i == f)
                .map(|(_, c)| c.clone())
                .unwrap_or_default()
        }
    }

    pub fn summarize(module: &[u8]) -> Summary {
        let mut s = Summary::default();
        for payload in Parser::new(0).parse_all(module) {
            match payload.expect("parses") {
                Payload::ImportSection(r) => {
                    for i in r.into_imports() {
                        let i = i.expect("import");
                        match i.ty {
                            wasmparser::TypeRef::Table(_) => s.imported_tables += 1,
                            wasmparser::TypeRef::Func(_) => s.imported_funcs += 1,
                            _ => {}
                        }
                        s.imports.push((i.module.into(), i.name.into()));
                    }
                }
                Payload::TableSection(r) => s.defined_tables += r.count(),
                Payload::MemorySection(r) => s.defined_memories += r.count(),
                Payload::DataSection(r) => s.data += r.count() as usize,
                Payload::ElementSection(r) => {
                    for e in r {
                        if let ElementKind::Active { offset_expr, .. } = e.expect("element").kind {
                            let ops: Vec<_> = offset_expr
                                .get_operators_reader()
                                .into_iter()
                                .collect::<Result<_, _>>()
                                .expect("offset");
                            s.element_offsets.push(match ops.as_slice() {
                                [Operator::I32Const { value }, Operator::End] => Some(*value),
                                _ => None,
                            });
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let index = s.imported_funcs + s.code as u32;
                    s.code += 1;
                    let mut calls = Vec::new();
                    let mut tables = Vec::new();
                    for op in body.get_operators_reader().expect("ops") {
                        match op.expect("op") {
                            Operator::Call { function_index } => calls.push(function_index),
                            Operator::CallIndirect { table_index, .. } => {
                                s.call_indirects += 1;
                                tables.push(table_index);
                            }
                            _ => {}
                        }
                    }
                    s.calls.push((index, calls));
                    s.indirect_tables.push((index, tables));
                }
                Payload::CustomSection(c) => {
                    if let KnownCustom::Name(r) = c.as_known() {
                        for n in r {
                            if let Ok(Name::Function(map)) = n {
                                for naming in map.into_iter().flatten() {
                                    s.names.push((naming.index, naming.name.to_string()));
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        s
    }

    /// The merged module (the one defining the function table) and the data module (the one
    /// defining a memory and holding no code) of a linked component.
    pub fn merged_and_data(component: &[u8]) -> (Summary, Summary) {
        let mut merged = Vec::new();
        let mut data = Vec::new();
        for m in modules(component) {
            let s = summarize(&m);
            if s.defined_memories == 1 && s.code == 0 {
                data.push(s);
            } else if s.code > 0 && s.names.iter().any(|(_, n)| n == "run") {
                merged.push(s);
            }
        }
        assert_eq!(
            merged.len(),
            1,
            "exactly one module with the libraries' code"
        );
        assert_eq!(data.len(), 1, "exactly one data-only module");
        (merged.remove(0), data.remove(0))
    }
}

mod linking {
    use super::fixtures;
    use super::helpers::*;
    use crate::{Options, Shape, link, link_with_report};

    #[test]
    fn wit_component_fixture_links_into_one_module_and_a_data_module() {
        let input = fixtures::app_and_util();
        validate(&input);
        let (output, report) = link_with_report(&input, &Options::default()).expect("links");
        validate(&output);
        assert_eq!(
            report.merged,
            ["main module (env)", "libapp.so", "libutil.so"],
            "the main module and both libraries are merged"
        );
        let (merged, data) = merged_and_data(&output);
        assert_eq!(
            merged.defined_tables, 1,
            "the table is the merged module's own"
        );
        // wit-component's shim module forwards `log` (it needs the memory, which the main
        // module defined) through a table its fixup module fills: the merged module calls
        // through that table itself, imported, instead of importing the shim's function.
        assert_eq!(merged.imported_tables, 1, "the shim's table");
        assert_eq!(report.merge.forwarders, 1);
        assert!(
            merged.imports.iter().any(|(_, n)| n == "table.$imports"),
            "{:?}",
            merged.imports
        );
        let log = merged.func("$root.log");
        assert!(
            log >= merged.imported_funcs,
            "`log` is defined in the merged module, not imported"
        );
        assert_eq!(
            merged.indirect_calls_of("$root.log"),
            [0],
            "`log` calls through the imported table (0); the merged module's own is 1"
        );
        assert_eq!(
            merged.defined_memories, 0,
            "the memory lives in the data module"
        );
        assert!(!merged.element_offsets.is_empty());
        assert!(
            merged.element_offsets.iter().all(Option::is_some),
            "constant element offsets only: {:?}",
            merged.element_offsets
        );
        assert_eq!(merged.data, 0, "active data moves to the data module");
        assert_eq!(data.data, 3, "libapp's two segments and libutil's one");
        // libapp: table_base 1 (wit-component reserves slot 0); libutil after it.
        assert_eq!(merged.element_offsets, [Some(1), Some(3)]);

        // Bodies still reach the right targets.
        let run_calls = merged.calls_of("run");
        let log = merged.func("$root.log");
        let host_add = merged.func("$root.host-add");
        let trampoline = merged.func("env:util_twice");
        assert!(run_calls.contains(&log), "run calls the lowered `log`");
        assert!(
            run_calls.contains(&host_add),
            "run calls the lowered `host-add`"
        );
        assert!(run_calls.contains(&merged.func("app_via_table")));
        // wit-component 0.261 fills the trampoline's slot from its fixup module, which
        // stays separate: the call goes through the trampoline.
        assert!(run_calls.contains(&trampoline));
        assert_eq!(
            merged.calls_of("util_twice"),
            [merged.func("app_add_one")],
            "libutil calls libapp directly"
        );
        assert_eq!(merged.calls_of("app_add_one"), [merged.func("app_inc")]);

        let after = Shape::of(&output).expect("shape");
        assert!(after.instantiations < report.before.instantiations);
        assert!(after.core_imports < report.before.core_imports);
        assert_eq!(after.lazy_table_entries, 3);
    }

    #[test]
    fn without_direct_calls_the_trampoline_stays_indirect() {
        let input = fixtures::old_shape(&[]);
        let options = Options {
            direct_calls: false,
        };
        let (output, report) = link_with_report(&input, &options).expect("links");
        validate(&output);
        assert_eq!(report.merge.trampolines, 1);
        assert_eq!(report.merge.trampolines_resolved, 0);
        assert_eq!(report.merge.calls_redirected, 0);
        let (merged, _) = merged_and_data(&output);
        assert!(merged.calls_of("run").contains(&merged.func("env:b_twice")));
        assert_eq!(merged.call_indirects, 1);
    }

    #[test]
    fn old_shape_folds_init_and_calls_directly() {
        let input = fixtures::old_shape(&[]);
        validate(&input);
        let (output, report) = link_with_report(&input, &Options::default()).expect("links");
        validate(&output);
        assert_eq!(report.folded, 1, "the element-only init module is folded");
        assert_eq!(report.merged, ["main module (env)", "liba.so", "libb.so"]);
        let (merged, data) = merged_and_data(&output);
        assert_eq!(merged.imported_tables, 0);
        assert_eq!(merged.defined_tables, 1);
        assert_eq!(merged.element_offsets, [Some(1), Some(2), Some(3)]);
        assert_eq!(
            data.data, 3,
            "main's snapshot segment, then liba's and libb's"
        );

        // Point 2: the trampoline's slot is known, so liba calls libb directly and the
        // trampoline itself no longer uses call_indirect.
        assert_eq!(report.merge.trampolines, 1);
        assert_eq!(report.merge.trampolines_resolved, 1);
        assert_eq!(report.merge.calls_redirected, 1);
        let b_twice = merged.func("b_twice");
        assert!(merged.calls_of("run").contains(&b_twice));
        assert!(!merged.calls_of("run").contains(&merged.func("env:b_twice")));
        assert_eq!(merged.calls_of("env:b_twice"), [b_twice]);
        assert_eq!(merged.call_indirects, 0);
        assert!(merged.calls_of("run").contains(&merged.func("host.add")));

        let after = Shape::of(&output).expect("shape");
        assert_eq!(after.instantiations, 2, "data and merged");
        assert_eq!(after.modules, 2);
        assert_eq!(after.eager_table_entries, 0);
        assert_eq!(after.lazy_table_entries, 3);
        assert_eq!(after.core_imports, 2, "the memory and `host.add`");
    }

    #[test]
    fn folds_base_globals_in_initializers_and_code() {
        let output = link(&fixtures::old_shape(&[])).expect("links");
        let modules = modules(&output);
        let text = modules
            .iter()
            .map(|m| wasmprinter::print_bytes(m).expect("prints"))
            .collect::<Vec<_>>()
            .join("\n");
        // liba's `$addr` = memory_base (1024) + 4, folded; its data at 1024, libb's at 2048.
        assert!(text.contains("i32.const 1028"), "{text}");
        assert!(text.contains("(data (;1;) (i32.const 1024)"), "{text}");
        assert!(text.contains("(data (;2;) (i32.const 2048)"), "{text}");
        // Only the GOT entry (a mutable global) is still read.
        assert_eq!(text.matches("global.get").count(), 1, "{text}");
    }

    #[test]
    fn output_is_deterministic() {
        let input = fixtures::app_and_util();
        assert_eq!(link(&input).expect("links"), link(&input).expect("links"));
    }

    #[test]
    fn relinking_the_output_fails_with_a_named_error() {
        let output = link(&fixtures::old_shape(&[])).expect("links");
        let err = link(&output).expect_err("the output is not dynamically linked");
        assert!(matches!(err, crate::LinkError::NoTableExport), "{err}");
    }
}

mod errors {
    use super::fixtures::old_shape;
    use crate::{LinkError, link};

    fn error(replacements: &[(&str, &str)]) -> LinkError {
        link(&old_shape(replacements)).expect_err("link fails")
    }

    #[test]
    fn no_memory_export() {
        let component = wat::parse_str(
            r#"(component
                (core module $lib (@dylink.0) (func (export "f")))
                (core instance (instantiate $lib)))"#,
        )
        .expect("parses");
        let err = link(&component).expect_err("fails");
        assert!(matches!(err, LinkError::NoMemoryExport), "{err}");
        assert_eq!(
            err.to_string(),
            "no module exports `memory`: expected wit-component's main (`env`) module to define and export it"
        );
    }

    #[test]
    fn no_table_export() {
        let component = wat::parse_str(
            r#"(component
                (core module $main (memory (export "memory") 1))
                (core module $lib (@dylink.0) (func (export "f")))
                (core instance (instantiate $main))
                (core instance (instantiate $lib)))"#,
        )
        .expect("parses");
        let err = link(&component).expect_err("fails");
        assert!(matches!(err, LinkError::NoTableExport), "{err}");
    }

    #[test]
    fn no_libraries() {
        let component = wat::parse_str(
            r#"(component
                (core module $main
                  (memory (export "memory") 1)
                  (table (export "__indirect_function_table") 1 funcref))
                (core instance (instantiate $main)))"#,
        )
        .expect("parses");
        let err = link(&component).expect_err("fails");
        assert!(matches!(err, LinkError::NoLibraries), "{err}");
    }

    #[test]
    fn unresolved_import_names_library_and_symbol() {
        let err = error(&[("{B_EXTRA}", r#"(import "env" "missing_symbol" (func))"#)]);
        assert_eq!(
            err.to_string(),
            "library `libb.so` imports `env.missing_symbol`, which no module provides"
        );
    }

    #[test]
    fn unresolved_instance_name() {
        let err = error(&[("{A_EXTRA}", r#"(import "nowhere" "f" (func))"#)]);
        assert!(
            matches!(&err, LinkError::UnresolvedImport { library, module, .. } if library == "liba.so" && module == "nowhere"),
            "{err}"
        );
    }

    #[test]
    fn kind_mismatch() {
        let err = error(&[
            (
                "{A_EXTRA}",
                r#"(import "env" "__stack_pointer_as_func" (func))"#,
            ),
            (
                "{A_ENV_EXTRA}",
                r#"(export "__stack_pointer_as_func" (global $sp))"#,
            ),
        ]);
        assert!(matches!(err, LinkError::KindMismatch { .. }), "{err}");
    }

    #[test]
    fn library_with_its_own_memory() {
        let err = error(&[("{B_EXTRA}", r#"(memory (export "own") 1)"#)]);
        assert_eq!(
            err.to_string(),
            "module `libb.so` defines a memory of its own; only the main module may"
        );
    }

    #[test]
    fn non_constant_segment_offset() {
        // liba's table base comes from a module that is not merged: the element offset
        // cannot be folded, and the table could not be initialized lazily.
        let component = super::fixtures::OLD_SHAPE
            .replace(
                "(core instance $main (instantiate $main))",
                r#"(core module $consts (global (export "base") i32 (i32.const 1)))
                   (core instance $consts (instantiate $consts))
                   (alias core export $consts "base" (core global $foreign_base))
                   (core instance $main (instantiate $main))"#,
            )
            .replace(
                "(export \"__table_base\" (global $a_tb))",
                "(export \"__table_base\" (global $foreign_base))",
            )
            .replace("{MAIN_EXTRA}", "")
            .replace("{A_EXTRA}", "")
            .replace("{B_EXTRA}", "")
            .replace("{A_ENV_EXTRA}", "");
        let component = wat::parse_str(&component).expect("parses");
        let err = link(&component).expect_err("fails");
        assert_eq!(
            err.to_string(),
            "the offset of element segment 0 in `liba.so` is not a constant after folding the base globals"
        );
    }

    #[test]
    fn library_instantiated_twice() {
        let component = super::fixtures::OLD_SHAPE
            .replace(
                "(alias core export $a \"run\" (core func $run))",
                r#"(core instance $b2 (instantiate $libb (with "env" (instance $b_env))))
                   (alias core export $a "run" (core func $run))"#,
            )
            .replace("{MAIN_EXTRA}", "")
            .replace("{A_EXTRA}", "")
            .replace("{B_EXTRA}", "")
            .replace("{A_ENV_EXTRA}", "");
        let component = wat::parse_str(&component).expect("parses");
        let err = link(&component).expect_err("fails");
        assert!(
            matches!(&err, LinkError::InstantiatedTimes { count: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn two_main_modules() {
        let component = wat::parse_str(
            r#"(component
                (core module $m1 (memory (export "memory") 1) (table (export "__indirect_function_table") 1 funcref))
                (core module $m2 (memory (export "memory") 1) (table (export "__indirect_function_table") 1 funcref))
                (core module $lib (@dylink.0) (func (export "f")))
                (core instance (instantiate $m1))
                (core instance (instantiate $m2))
                (core instance (instantiate $lib)))"#,
        )
        .expect("parses");
        let err = link(&component).expect_err("fails");
        assert!(matches!(err, LinkError::SeveralMainModules(0, 1)), "{err}");
    }

    #[test]
    fn not_a_component() {
        let module = wat::parse_str("(module)").expect("parses");
        let err = link(&module).expect_err("fails");
        assert!(matches!(err, LinkError::Unsupported(_)), "{err}");
    }
}
