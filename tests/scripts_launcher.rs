//! The `jit-gdb` launcher loads the reader and sources `gdb-scripts/jit.py`: the `jit`
//! commands work in its sessions without any setup.

mod common;
#[path = "reader_support/mod.rs"]
mod reader_support;
#[path = "scripts_support/mod.rs"]
mod scripts_support;

use std::path::PathBuf;
use std::process::Command;

use common::{require_tool, run_captured, TempDir, JIT_FUNCTIONS};
use scripts_support::*;

#[test]
fn launcher_sources_the_scripts() {
    if !require_tool("gdb", "launcher_sources_the_scripts") {
        return;
    }
    // The launcher's explicit choice of reader, which it passes on to GDB's environment,
    // where the scripts find it too.
    let so = reader_support::reader_so();
    let h = common::scenario::Host::rust("compact");
    let dir = TempDir::new("scripts-launcher");
    let layout = h.layout(dir.path());
    let mut cmd = Command::new(PathBuf::from(env!("CARGO_BIN_EXE_jit-gdb")));
    cmd.env("JIT_GDB_READER", so).env_remove("JIT_GDB_SCRIPTS");
    cmd.args(["-batch", "-nx"]);
    for p in common::GDB_PRELUDE {
        cmd.arg("-iex").arg(p);
    }
    for c in [
        "jit break jit_frameless".to_string(),
        "run".into(),
        common::mark("stop"),
        "jit symbolize $pc".into(),
        common::mark("list"),
        "jit list".into(),
        common::mark("path"),
        "show jit reader-path".into(),
    ] {
        cmd.arg("-ex").arg(c);
    }
    cmd.arg("--").arg(&h.program);
    cmd.args(h.args_in(dir.path()));
    cmd.arg("run");
    let t = run_captured(cmd, dir.path());
    let f = layout.get("jit_frameless");
    t.assert_contains(
        Some("stop"),
        &format!("{:#x} jit_frameless+0x0 {}:", f.start, f.file),
    );
    check_rows(&t, "list", &layout, &JIT_FUNCTIONS, "compact");
    t.assert_contains(
        Some("path"),
        &format!("{} (environment variable JIT_GDB_READER)", so.display()),
    );
}
