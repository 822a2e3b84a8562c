//! The Rust test host registered as ELF, seen after the fact: GDB attaching to a waiting
//! process, `gcore` of it, and a kernel core dump of a SIGSEGV inside JIT code all give the
//! live backtrace.

mod common;

use common::require_tool;
use common::scenario::{self, Host};

#[test]
fn elf_attach_sees_jit_frames_and_gcore_matches() {
    if !require_tool("gdb", "elf_attach_sees_jit_frames_and_gcore_matches") {
        return;
    }
    scenario::attach_and_gcore(&Host::rust("elf"), "elf-attach");
}

#[test]
fn elf_sigsegv_in_jit_code_core_matches_live() {
    if !require_tool("gdb", "elf_sigsegv_in_jit_code_core_matches_live") {
        return;
    }
    scenario::crash_core(&Host::rust("elf"), "elf-crash");
}
