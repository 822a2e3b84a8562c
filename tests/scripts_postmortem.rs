//! `gdb-scripts/jit.py` after attach and on a core file (gcore of the test host in `wait`
//! mode), for both payload kinds: the commands read the descriptor list out of the core's
//! memory exactly as out of the live process.

mod common;
#[path = "reader_support/mod.rs"]
mod reader_support;
#[path = "scripts_support/mod.rs"]
mod scripts_support;

use common::{require_tool, Gdb, TempDir, WaitingHost, JIT_FUNCTIONS};
use scripts_support::*;

fn postmortem(format: &str) {
    if !require_tool("gdb", &format!("scripts_postmortem_{format}")) {
        return;
    }
    let h = host(format);
    let dir = TempDir::new(&format!("scripts-core-{format}"));
    let layout = h.layout(dir.path());
    let a = h.args_in(dir.path());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let waiting = WaitingHost::start(&h.program, &a, dir.path());
    let core = dir.join("gcore.core");
    // `attach` as a command, after a `jit break` that cannot resolve yet: GDB reads the
    // whole list on attach without any registration hook call.
    let live = Gdb {
        args: vec![h.program.display().to_string()],
        commands: vec![],
        dir: dir.path().into(),
        env: vec![],
    }
    .cmds(h.gdb_prelude.clone())
    .section("pending", ["jit break jit_second"])
    .cmd(format!("attach {}", waiting.pid))
    .section("resolved", ["jit break", "info breakpoints"])
    .section("list", ["jit list"])
    .section("gcore", [format!("gcore {}", core.display())])
    .cmd("detach")
    .run();
    drop(waiting);
    check_rows(&live, "list", &layout, &JIT_FUNCTIONS, format);
    live.assert_contains(
        Some("pending"),
        "breakpoint pending until one is registered",
    );
    let second = layout.get("jit_second").start;
    live.assert_contains(Some("resolved"), "No pending jit breakpoints.");
    live.assert_contains(Some("resolved"), &format!("{second:#018x}"));
    if !core.exists() {
        live.fail("gcore wrote no core file");
    }

    let map = dir.join("core.map");
    let (sym_cmd, sym_want) = symbolize_cmd(&layout);
    // The core loaded by a command, after a pending `jit break`.
    let t = Gdb {
        args: vec![h.program.display().to_string()],
        commands: vec![],
        dir: dir.path().into(),
        env: vec![],
    }
    .cmds(h.gdb_prelude.clone())
    .section("core_pending", ["jit break jit_entry"])
    .cmd(format!("core-file {}", core.display()))
    .section("core_resolved", ["jit break"])
    .section("list", ["jit list"])
    .section("regex", ["jit list frame"])
    .section("none", ["jit list ^no_such_function$"])
    .section("symbolize", [sym_cmd])
    .section("perf", [format!("jit export-perf-map {}", map.display())])
    .section("break", ["jit break jit_middle", "info breakpoints"])
    .run();
    check_rows(&t, "list", &layout, &JIT_FUNCTIONS, format);
    t.assert_contains(
        Some("core_pending"),
        "breakpoint pending until one is registered",
    );
    t.assert_contains(Some("core_resolved"), "No pending jit breakpoints.");
    t.assert_contains(
        None,
        &format!(
            "on jit_entry at {:#x} (pending",
            layout.get("jit_entry").start
        ),
    );
    // The core's list is the live one: same rows, same entry addresses.
    if list_rows(&t, "list") != list_rows(&live, "list") {
        t.fail("`jit list` on the core differs from `jit list` after attach");
    }
    check_rows(&t, "regex", &layout, &["jit_frameless"], format);
    t.assert_contains(
        Some("none"),
        "0 JIT functions matching '^no_such_function$' (4 registered in 1 entries).",
    );
    check_symbolize(&t, "symbolize", &sym_want);
    let got = std::fs::read_to_string(&map).unwrap_or_else(|e| t.fail(&format!("perf map: {e}")));
    if got != expected_perf_map(&layout) {
        t.fail(&format!("perf map from the core:\n{got}"));
    }
    let start = layout.get("jit_middle").start;
    t.assert_contains(Some("break"), &format!("on jit_middle at {start:#x}"));
    t.assert_contains(Some("break"), &format!("{start:#018x}"));
    t.assert_not_contains(None, "Python Exception");
    t.assert_not_contains(None, "warning: jit entry");
}

#[test]
fn core_compact() {
    postmortem("compact");
}

#[test]
fn core_elf() {
    postmortem("elf");
}
