//! The Rust test host registered as ELF, under a live `gdb -batch -nx`: backtraces, breaking
//! by name, frame navigation, `finish`, arguments, source listing, unregistration, and
//! single-stepping through every instruction of every JIT function.

mod common;

use common::require_tool;
use common::scenario::{self, Host};

fn host() -> Option<Host> {
    require_tool("gdb", "this ELF test").then(|| Host::rust("elf"))
}

#[test]
fn elf_bt_names_every_jit_frame_with_file_line_and_reaches_main() {
    let Some(h) = host() else { return };
    scenario::backtrace(&h, "elf-bt");
}

#[test]
fn elf_break_by_name_before_run() {
    let Some(h) = host() else { return };
    scenario::break_by_name(&h, "elf-break");
}

#[test]
fn elf_up_info_frame_info_args_list() {
    let Some(h) = host() else { return };
    scenario::up_info_frame_args_list(&h, "elf-up", true);
}

#[test]
fn elf_finish_returns_into_jit_caller() {
    let Some(h) = host() else { return };
    scenario::finish(&h, "elf-finish");
}

#[test]
fn elf_unregister_makes_gdb_forget_the_functions() {
    let Some(h) = host() else { return };
    scenario::unregister(&h, "elf-unregister");
}

#[test]
fn elf_stepi_through_jit_entry() {
    let Some(h) = host() else { return };
    scenario::step_every_instruction(&h, "elf-step-entry", "jit_entry");
}

#[test]
fn elf_stepi_through_jit_middle() {
    let Some(h) = host() else { return };
    // `n` lives in a frame slot (rbp - 8) from the store after the prologue (instruction 4
    // on) until the `ret`: its value must show in the epilogue too, after `pop rbp`, where
    // rbp is the caller's.
    let n = scenario::Watch {
        expr: "n",
        value: "40",
        from: 4,
    };
    scenario::step_every_instruction_watching(&h, "elf-step-middle", "jit_middle", Some(n));
}

#[test]
fn elf_stepi_through_jit_frameless() {
    let Some(h) = host() else { return };
    scenario::step_every_instruction(&h, "elf-step-frameless", "jit_frameless");
}

#[test]
fn elf_stepi_through_jit_second() {
    let Some(h) = host() else { return };
    scenario::step_every_instruction(&h, "elf-step-second", "jit_second");
}

#[test]
fn elf_one_object_per_function() {
    let Some(_) = host() else { return };
    let h = common::scenario::Host::new(
        common::testhost(),
        &["--format", "elf", "--objects", "per-function"],
    );
    scenario::backtrace(&h, "elf-per-function");
    scenario::unregister(&h, "elf-per-function-unregister");
}
