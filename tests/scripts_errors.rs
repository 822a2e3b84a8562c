//! Bad input to `gdb-scripts/jit.py`, in real GDB: every case gets a message naming the
//! problem (bad regex, no process, no descriptor, unreadable or looping entry lists,
//! damaged payloads, a missing decoder library, bad arguments), never a Python traceback.

mod common;
#[path = "reader_support/mod.rs"]
mod reader_support;
#[path = "scripts_support/mod.rs"]
mod scripts_support;

use std::path::PathBuf;

use common::{require_tool, Gdb, TempDir, JIT_FUNCTIONS};
use scripts_support::*;

#[test]
fn bad_arguments_and_no_process() {
    if !require_tool("gdb", "bad_arguments_and_no_process") {
        return;
    }
    let h = host("compact");
    let dir = TempDir::new("scripts-errors-args");
    let t = h
        .gdb(dir.path(), "run")
        .section("norun", ["jit list"])
        .section("regex", ["jit list x(", "jit break [a-"])
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("symbolize_none", ["jit symbolize"])
        .section("symbolize_bad", ["jit symbolize no_such_symbol_anywhere"])
        .section("perf_usage", ["jit export-perf-map"])
        .section(
            "perf_unwritable",
            [format!(
                "jit export-perf-map {}/no/such/dir/map",
                dir.path().display()
            )],
        )
        .section(
            "reader_missing",
            [
                "set jit reader-path /nonexistent/libjitreader.so",
                "jit list",
            ],
        )
        .section(
            "reader_relative",
            ["set jit reader-path libjitreader.so", "jit list"],
        )
        .section(
            "reader_back",
            ["set jit reader-path", "show jit reader-path", "jit list"],
        )
        .run();
    t.assert_contains(
        Some("norun"),
        "jit: the program is not running: start it, attach to a process or load a core file first",
    );
    t.assert_contains(
        Some("regex"),
        "jit: bad regular expression 'x(': missing ), unterminated subpattern at position 1",
    );
    t.assert_contains(Some("regex"), "jit: bad regular expression '[a-'");
    t.assert_contains(Some("symbolize_none"), "jit: usage: jit symbolize ADDR...");
    t.assert_contains(
        Some("symbolize_bad"),
        "jit: 'no_such_symbol_anywhere' is not an address",
    );
    t.assert_contains(Some("perf_usage"), "jit: usage: jit export-perf-map FILE");
    t.assert_contains(Some("perf_unwritable"), "jit: cannot write");
    t.assert_contains(Some("perf_unwritable"), "No such file or directory");
    t.assert_contains(
        Some("reader_missing"),
        "jit: cannot load the payload decoder libjitreader.so (/nonexistent/libjitreader.so (set jit reader-path): no such file)",
    );
    t.assert_contains(
        Some("reader_relative"),
        "jit: set jit reader-path names 'libjitreader.so', which is not an absolute path",
    );
    t.assert_contains(Some("reader_back"), "(loaded by jit-reader-load)");
    check_rows(
        &t,
        "reader_back",
        &h.layout(dir.path()),
        &JIT_FUNCTIONS,
        "compact",
    );
    t.assert_not_contains(None, "Python Exception");
    t.assert_not_contains(None, "Traceback");
}

/// A running program that does not use the JIT interface at all.
#[test]
fn no_descriptor() {
    if !require_tool("gdb", "no_descriptor") {
        return;
    }
    let dir = TempDir::new("scripts-errors-nodesc");
    let t = Gdb::program(&PathBuf::from("/bin/sleep"), &["5"], dir.path())
        .cmd(source_cmd())
        .cmd("starti")
        .section("list", ["jit list"])
        .section("break", ["jit break foo", "jit break"])
        .cmd("kill")
        .run();
    t.assert_contains(
        Some("list"),
        "jit: no __jit_debug_descriptor in the program: it does not use GDB's JIT interface",
    );
    // A break request on such a program stays pending (a JIT library may be loaded later).
    t.assert_contains(Some("break"), "breakpoint pending until one is registered");
    t.assert_contains(Some("break"), "pending: foo");
    t.assert_not_contains(None, "Python Exception");
}

/// The descriptor's list damaged in the live process (as garbage in a core would be): a
/// cycle, an unreadable payload, an unreadable entry. Writes go through GDB itself.
#[test]
fn damaged_list() {
    if !require_tool("gdb", "damaged_list") {
        return;
    }
    let h = host("compact");
    let dir = TempDir::new("scripts-errors-damage");
    let first = "*(unsigned long *)((char *)&__jit_debug_descriptor + 16)";
    let t = h
        .gdb(dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .cmd("set language c")
        .section("intact", ["jit list"])
        // entry->next = entry
        .section(
            "cycle",
            [
                format!("set var *(unsigned long *)({first}) = {first}"),
                "jit list".into(),
            ],
        )
        // entry->symfile_addr = 8
        .section(
            "payload",
            [
                format!("set var *(unsigned long *)({first} + 16) = 8"),
                "jit list".into(),
            ],
        )
        // first_entry = 8
        .section("entry", [format!("set var {first} = 8"), "jit list".into()])
        .cmd("kill")
        .run();
    t.assert_contains(
        Some("intact"),
        "4 JIT functions (4 registered in 1 entries).",
    );
    t.assert_contains(
        Some("cycle"),
        "4 JIT functions (4 registered in 1 entries).",
    );
    t.assert_contains(
        Some("cycle"),
        "warning: the entry list loops back to entry 0x",
    );
    t.assert_contains(
        Some("payload"),
        "0 JIT functions (0 registered in 1 entries).",
    );
    t.assert_contains(Some("payload"), "cannot read the payload of entry 0x");
    t.assert_contains(Some("payload"), "at 0x8 (");
    t.assert_contains(
        Some("entry"),
        "0 JIT functions (0 registered in 0 entries).",
    );
    t.assert_contains(
        Some("entry"),
        "warning: entry list broken: cannot read jit_code_entry at 0x8 (32 bytes)",
    );
    t.assert_not_contains(None, "Python Exception");
}

/// Six damaged compact payloads next to an intact one (`reader_testhost corrupt`): the
/// intact functions are listed, every damaged entry is reported with the decoder's reason.
#[test]
fn damaged_payloads() {
    if !require_tool("gdb", "damaged_payloads") {
        return;
    }
    let dir = TempDir::new("scripts-errors-payloads");
    let program = common::reader_testhost();
    let src = dir.path().display().to_string();
    let t = Gdb::program(&program, &["--source-dir", &src, "corrupt"], dir.path())
        .cmd(reader_support::load_cmd())
        .cmd(source_cmd())
        .cmd("break reader_host_break")
        .cmd("run")
        .section("list", ["jit list"])
        .run();
    let rows = list_rows(&t, "list");
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    if names != ["jit_intact_inner", "jit_intact_outer"] {
        t.fail(&format!("intact functions listed: {names:?}"));
    }
    t.assert_contains(Some("list"), "2 JIT functions (2 registered in 7 entries).");
    let warnings = t
        .section("list")
        .lines()
        .filter(|l| l.starts_with("warning: jit entry 0x") && l.contains("compact payload: "))
        .count();
    if warnings != 6 {
        t.fail(&format!("{warnings} damaged entries reported, 6 expected"));
    }
    t.assert_not_contains(None, "Python Exception");
}
