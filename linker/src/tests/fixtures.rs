//! Small dynamically linked components made for the tests: tiny shared libraries in WAT
//! (with `dylink.0` annotations), linked by `wit_component::Linker` the way componentize-py
//! links its guest. Not a model of CPython: only of the linking conventions.

use wit_component::StringEncoding;
use wit_parser::Resolve;

/// The world every fixture implements: one plain import, one import that needs the memory
/// (a string parameter), one export.
pub const WORLD: &str = r#"
package test:fixture;

world guest {
    import host-add: func(x: u32) -> u32;
    import log: func(message: string);
    export run: func(x: u32) -> u32;
}
"#;

/// `libapp.so`: exports `run`; calls into `libutil.so` (which calls back, making a cycle that
/// the dynamic linker breaks with a trampoline in the main module), uses the table base for
/// its own function pointers and the memory base (in an extended-const global initializer)
/// for its data.
pub const LIBAPP: &str = r#"
(module
  (@dylink.0
    (mem-info (memory 32 2) (table 2 0))
    (needed "libutil.so"))
  (type $ii (func (param i32) (result i32)))
  (type $v (func))
  (type $log (func (param i32 i32)))
  (import "env" "memory" (memory 1))
  (import "env" "__indirect_function_table" (table 0 funcref))
  (import "env" "__stack_pointer" (global $sp (mut i32)))
  (import "env" "__memory_base" (global $mb i32))
  (import "env" "__table_base" (global $tb i32))
  (import "env" "util_twice" (func $util_twice (type $ii)))
  (import "$root" "host-add" (func $host_add (type $ii)))
  (import "$root" "log" (func $log (type $log)))
  (import "GOT.mem" "util_counter" (global $got_counter (mut i32)))
  (import "GOT.func" "util_twice" (global $got_twice (mut i32)))
  (global $greeting_addr i32 (i32.add (global.get $mb) (i32.const 16)))
  (global $answer (mut i32) (i32.const 0))
  (func $app_inc (type $ii) (i32.add (local.get 0) (i32.const 1)))
  (func $app_via_table (type $ii)
    (call_indirect (type $ii) (local.get 0) (i32.add (global.get $tb) (i32.const 0))))
  (func $run (export "run") (type $ii)
    (call $log (global.get $greeting_addr) (i32.const 5))
    (i32.store (global.get $got_counter)
      (i32.add (i32.load (global.get $got_counter)) (i32.const 1)))
    (call $host_add
      (call_indirect (type $ii)
        (call $util_twice (call $app_via_table (local.get 0)))
        (global.get $got_twice))))
  (func $app_add_one (export "app_add_one") (type $ii) (call $app_inc (local.get 0)))
  (func $apply_relocs (export "__wasm_apply_data_relocs") (type $v)
    (i32.store (i32.add (global.get $mb) (i32.const 0))
      (i32.add (global.get $mb) (i32.const 16))))
  (func $ctors (export "__wasm_call_ctors") (type $v)
    (global.set $answer (i32.const 42)))
  (elem (global.get $tb) func $app_inc $run)
  (data (global.get $mb) "\00\00\00\00")
  (data (i32.add (global.get $mb) (i32.const 16)) "hello"))
"#;

/// `libutil.so`: exports a function and a data symbol; calls back into `libapp.so`.
pub const LIBUTIL: &str = r#"
(module
  (@dylink.0
    (mem-info (memory 8 2) (table 1 0))
    (needed "libapp.so"))
  (type $ii (func (param i32) (result i32)))
  (type $v (func))
  (import "env" "memory" (memory 1))
  (import "env" "__indirect_function_table" (table 0 funcref))
  (import "env" "__memory_base" (global $mb i32))
  (import "env" "__table_base" (global $tb i32))
  (import "env" "app_add_one" (func $app_add_one (type $ii)))
  (global $counter_offset i32 (i32.const 4))
  (func $util_twice (export "util_twice") (type $ii)
    (call $app_add_one (i32.mul (local.get 0) (i32.const 2))))
  (func $apply_relocs (export "__wasm_apply_data_relocs") (type $v))
  (export "util_counter" (global $counter_offset))
  (elem (global.get $tb) func $util_twice)
  (data (global.get $mb) "\00\00\00\00\07\00\00\00"))
"#;

/// Parses `wat` and, when `with_world`, embeds the fixture world's type information.
pub fn library(wat: &str, with_world: bool) -> Vec<u8> {
    let mut module = wat::parse_str(wat).expect("fixture WAT parses");
    if with_world {
        let mut resolve = Resolve::default();
        let pkg = resolve
            .push_str("fixture.wit", WORLD)
            .expect("fixture WIT parses");
        let world = resolve.select_world(&[pkg], None).expect("fixture world");
        wit_component::embed_component_metadata(
            &mut module,
            &resolve,
            world,
            StringEncoding::UTF8,
            true,
        )
        .expect("embed fixture world");
    }
    module
}

/// Links the given libraries (name, WAT, carries the world) into a dynamically linked
/// component with wit-component's linker.
pub fn dynamic_component(libraries: &[(&str, &str, bool)]) -> Vec<u8> {
    let mut linker = wit_component::Linker::default();
    linker.encoder().validate(true);
    for (name, wat, with_world) in libraries {
        linker
            .library(name, &library(wat, *with_world), false)
            .expect("add fixture library");
    }
    linker.encode().expect("wit-component links the fixture")
}

/// The standard two-library fixture.
pub fn app_and_util() -> Vec<u8> {
    dynamic_component(&[("libapp.so", LIBAPP, true), ("libutil.so", LIBUTIL, false)])
}

/// A component in the shape componentize-py 0.25.1 produces after its own snapshot (an
/// older wit-component): the main module holds a trampoline whose table slot an
/// element-only `__init` module, instantiated last, fills; libraries get the main module's
/// base globals through bags. `{A_EXTRA}`, `{B_EXTRA}`, `{MAIN_EXTRA}` and `{A_ENV_EXTRA}`
/// are replaced to make variants (the error tests).
pub const OLD_SHAPE: &str = r#"
(component
  (type $ft (func (param "x" u32) (result u32)))
  (import "host-add" (func $host-add (type $ft)))
  (core module $main
    (type $ii (func (param i32) (result i32)))
    (table (export "__indirect_function_table") 4 funcref)
    (memory (export "memory") 1)
    (global (export "__stack_pointer") (mut i32) (i32.const 65536))
    (global (export "liba.so:memory_base") i32 (i32.const 1024))
    (global (export "liba.so:table_base") i32 (i32.const 1))
    (global (export "libb.so:memory_base") i32 (i32.const 2048))
    (global (export "libb.so:table_base") i32 (i32.const 2))
    (global (export "liba.so:b_counter") (mut i32) (i32.const 2052))
    (func (export "b_twice") (type $ii) (call_indirect (type $ii) (local.get 0) (i32.const 3)))
    (data (i32.const 4096) "snapshot")
    {MAIN_EXTRA})
  (core module $liba
    (@dylink.0 (mem-info (memory 8 2) (table 1 0)) (needed "libb.so"))
    (type $ii (func (param i32) (result i32)))
    (import "env" "memory" (memory 0))
    (import "env" "__indirect_function_table" (table 0 funcref))
    (import "env" "__stack_pointer" (global $sp (mut i32)))
    (import "env" "__memory_base" (global $mb i32))
    (import "env" "__table_base" (global $tb i32))
    (import "env" "b_twice" (func $b_twice (type $ii)))
    (import "host" "add" (func $add (type $ii)))
    (import "GOT.mem" "b_counter" (global $b_counter (mut i32)))
    {A_EXTRA}
    (global $addr i32 (i32.add (global.get $mb) (i32.const 4)))
    (func $a_one (export "a_one") (type $ii) (i32.add (local.get 0) (i32.const 1)))
    (func $run (export "run") (type $ii)
      (i32.add
        (call $add (call $b_twice (local.get 0)))
        (i32.add (i32.load (global.get $addr)) (i32.load (global.get $b_counter)))))
    (elem (global.get $tb) func $a_one)
    (data (global.get $mb) "\00\00\00\00\07\00\00\00"))
  (core module $libb
    (@dylink.0 (mem-info (memory 8 2) (table 1 0)) (needed "liba.so"))
    (type $ii (func (param i32) (result i32)))
    (import "env" "memory" (memory 0))
    (import "env" "__indirect_function_table" (table 0 funcref))
    (import "env" "__memory_base" (global $mb i32))
    (import "env" "__table_base" (global $tb i32))
    (import "env" "a_one" (func $a_one (type $ii)))
    {B_EXTRA}
    (func $b_twice (export "b_twice") (type $ii) (call $a_one (i32.mul (local.get 0) (i32.const 2))))
    (global (export "b_counter") i32 (i32.const 4))
    (elem (global.get $tb) func $b_twice)
    (data (global.get $mb) "\00\00\00\00\05\00\00\00"))
  (core module $init
    (type $ii (func (param i32) (result i32)))
    (import "env" "__indirect_function_table" (table 0 funcref))
    (import "libb.so" "b_twice" (func $f (type $ii)))
    (elem (i32.const 3) func $f))
  (core instance $main (instantiate $main))
  (alias core export $main "memory" (core memory $memory))
  (alias core export $main "__indirect_function_table" (core table $table))
  (alias core export $main "__stack_pointer" (core global $sp))
  (alias core export $main "liba.so:memory_base" (core global $a_mb))
  (alias core export $main "liba.so:table_base" (core global $a_tb))
  (alias core export $main "b_twice" (core func $b_twice_trampoline))
  (alias core export $main "liba.so:b_counter" (core global $got_b_counter))
  (core instance $a_env
    (export "memory" (memory $memory))
    (export "__indirect_function_table" (table $table))
    (export "__stack_pointer" (global $sp))
    (export "__memory_base" (global $a_mb))
    (export "__table_base" (global $a_tb))
    (export "b_twice" (func $b_twice_trampoline))
    {A_ENV_EXTRA})
  (core func $add (canon lower (func $host-add)))
  (core instance $host (export "add" (func $add)))
  (core instance $a_got (export "b_counter" (global $got_b_counter)))
  (core instance $a (instantiate $liba
    (with "env" (instance $a_env))
    (with "host" (instance $host))
    (with "GOT.mem" (instance $a_got))))
  (alias core export $main "libb.so:memory_base" (core global $b_mb))
  (alias core export $main "libb.so:table_base" (core global $b_tb))
  (alias core export $a "a_one" (core func $a_one))
  (core instance $b_env
    (export "memory" (memory $memory))
    (export "__indirect_function_table" (table $table))
    (export "__memory_base" (global $b_mb))
    (export "__table_base" (global $b_tb))
    (export "a_one" (func $a_one)))
  (core instance $b (instantiate $libb (with "env" (instance $b_env))))
  (core instance $init (instantiate $init (with "env" (instance $main)) (with "libb.so" (instance $b))))
  (alias core export $a "run" (core func $run))
  (func $run (type $ft) (canon lift (core func $run)))
  (export "run" (func $run))
)
"#;

/// The old-shape component with the placeholders replaced (`(name, text)` pairs; the rest
/// left empty).
pub fn old_shape(replacements: &[(&str, &str)]) -> Vec<u8> {
    let mut text = OLD_SHAPE.to_string();
    for (name, value) in replacements {
        text = text.replace(name, value);
    }
    for name in ["{MAIN_EXTRA}", "{A_EXTRA}", "{B_EXTRA}", "{A_ENV_EXTRA}"] {
        text = text.replace(name, "");
    }
    wat::parse_str(&text).expect("old-shape fixture parses")
}
