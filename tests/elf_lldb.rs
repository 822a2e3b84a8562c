//! LLDB reads ELF JIT entries itself (its GDB JIT loader): `bt` through the JIT frames shows
//! their names. Whether it also shows their source lines is printed (see the test output).

mod common;

use common::require_tool;
use common::scenario::{self, Host};

#[test]
fn elf_lldb_bt_names_jit_frames() {
    if !require_tool("lldb", "elf_lldb_bt_names_jit_frames") {
        return;
    }
    scenario::lldb_backtrace(&Host::rust("elf"), "elf-lldb");
}
