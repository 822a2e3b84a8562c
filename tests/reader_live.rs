//! The reader plugin (`libjitreader.so`) in a live `gdb -batch -nx` on the Rust test host
//! registering compact records: backtraces with names and `file:line` through
//! JIT -> native -> JIT -> native frames, frame navigation and the caller's registers,
//! `finish`, single-stepping through every instruction, loading the reader late,
//! unloading and reloading it, unregistration, and line tables that end with each function.

mod common;
mod reader_support;

use common::scenario::chain_from;
use common::*;
use reader_support::*;

fn have_gdb(test: &str) -> bool {
    require_tool("gdb", test)
}

#[test]
fn reader_bt_names_every_jit_frame_with_file_line_and_reaches_main() {
    if !have_gdb("reader_bt") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-bt");
    let t = gdb(&h, dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("bt", ["bt"])
        .run();
    assert_no_reader_noise(&t);
    assert_chain(&t, "bt", &CHAIN, &layout);
    eprintln!("backtrace seen:\n{}", t.section("bt"));
}

#[test]
fn reader_up_info_frame_and_caller_registers() {
    if !have_gdb("reader_up") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-up");
    let t = gdb(&h, dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("up", ["up"])
        .section("info frame 1", ["info frame"])
        .section("up2", ["up"])
        .section("caller regs", ["info registers rip rsp rbp rbx r12 r13"])
        .section("assign", ["set var $rbp = -1"])
        .section("sp2", ["p/x $sp"])
        // By number: GDB 13 cannot find reader-made functions by name.
        .section("frame", ["frame 4"])
        .section("info frame 4", ["info frame"])
        .run();
    let up = parse_gdb_bt(t.section("up"));
    match up.first() {
        Some(f) if f.is("jit_second") => {
            if let Err(e) = check_jit_frame(f, &layout) {
                t.fail(&format!("after `up`: {e}"));
            }
        }
        _ => t.fail("`up` from jit_test_break_here did not select jit_second"),
    }
    for needle in [
        "Stack level 1",
        "in jit_second",
        "saved rip",
        "caller of frame at",
    ] {
        t.assert_contains(Some("info frame 1"), needle);
    }
    // jit_second's caller (native jit_test_callback) got rip, rsp and rbp from the reader;
    // callee-saved registers the reader cannot know are `<not saved>`.
    let regs = t.section("caller regs");
    for r in ["rip", "rsp", "rbp"] {
        let line = regs
            .lines()
            .find(|l| l.starts_with(r))
            .unwrap_or_else(|| t.fail(&format!("no {r} line")));
        if line.contains("<not saved>") || !line.contains("0x") {
            t.fail(&format!(
                "{r} is not known in the JIT function's caller: {line}"
            ));
        }
    }
    for r in ["rbx", "r12", "r13"] {
        let line = regs
            .lines()
            .find(|l| l.starts_with(r))
            .unwrap_or_else(|| t.fail(&format!("no {r} line")));
        if !line.contains("<not saved>") {
            t.fail(&format!("{r} should be <not saved> in the caller: {line}"));
        }
    }
    // The caller's rsp is the JIT frame's CFA, which GDB shows as "frame at".
    let cfa = t
        .section("info frame 1")
        .split("frame at ")
        .nth(1)
        .and_then(|s| parse_hex(s.split([':', ' ', '\n']).next().unwrap_or("")))
        .unwrap_or_else(|| t.fail("no `frame at` in info frame"));
    if hex_value(&t, "sp2") != cfa {
        t.fail(&format!(
            "caller rsp differs from the JIT frame's CFA {cfa:#x}"
        ));
    }
    // GDB's own reader test: a register the reader supplied cannot be assigned there.
    t.assert_contains(Some("assign"), "unmodifiable");
    let fr = parse_gdb_bt(t.section("frame"));
    if !fr
        .first()
        .is_some_and(|f| f.is("jit_middle") && f.level == 4)
    {
        t.fail("`frame 4` did not select jit_middle");
    }
    for needle in [
        "Stack level 4",
        "in jit_middle",
        "saved rip",
        "called by frame at",
    ] {
        t.assert_contains(Some("info frame 4"), needle);
    }
}

#[test]
fn reader_finish_into_and_out_of_jit_frames() {
    if !have_gdb("reader_finish") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-finish");
    let t = gdb(&h, dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("finish", ["finish"])
        .section("after", ["p/x $pc", "bt"])
        .section("finish jit", ["finish"])
        .section("after jit", ["p/x $pc", "bt"])
        .run();
    t.assert_contains(Some("finish"), "Value returned");
    t.assert_contains(Some("finish"), "jit_second (");
    let second = layout.get("jit_second");
    let pc = hex_value(&t, "after");
    if !second.contains(pc) || !second.insns.contains(&(pc - second.start)) {
        t.fail(&format!(
            "finish returned to {pc:#x}, not an instruction of jit_second"
        ));
    }
    assert_chain(&t, "after", chain_from("jit_second"), &layout);
    // `finish` out of the JIT frame itself: GDB needs the reader's frame id and caller pc.
    t.assert_contains(Some("finish jit"), "jit_test_callback (");
    assert_chain(&t, "after jit", chain_from("jit_test_callback"), &layout);
}

/// `stepi` (`nexti` over calls) through every instruction of `name`, prologue and
/// epilogue included: each time the pc is that instruction and `bt` is complete and right.
fn step_every_instruction(tag: &str, name: &str) {
    if !have_gdb(tag) {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, tag);
    let f = layout.get(name).clone();
    let mut g = gdb(&h, dir.path(), "run")
        .cmd("break run_jit")
        .cmd("run")
        .cmd(format!("break *{:#x}", f.start))
        .cmd("continue")
        .cmd("delete");
    for i in 0..f.insns.len() {
        g = g.section(&format!("insn {i}"), ["p/x $pc", "bt"]);
        if i + 1 < f.insns.len() {
            g = g.cmd("nexti");
        }
    }
    let t = g.run();
    for (i, off) in f.insns.iter().enumerate() {
        let s = format!("insn {i}");
        let pc = hex_value(&t, &s);
        if pc != f.start + off {
            t.fail(&format!(
                "{s}: pc {pc:#x}, expected {:#x} ({name}+{off})",
                f.start + off
            ));
        }
        let frames = t.gdb_bt(&s);
        if let Err(e) = check_chain(&frames, chain_from(name), &layout) {
            t.fail(&format!("{s} ({name}+{off}): {e}"));
        }
        if !frames[0].is(name) {
            t.fail(&format!("{s}: frame #0 is not {name}"));
        }
    }
}

#[test]
fn reader_stepi_through_jit_entry() {
    step_every_instruction("reader-step-entry", "jit_entry");
}

#[test]
fn reader_stepi_through_frame_pointer_function_jit_middle() {
    step_every_instruction("reader-step-middle", "jit_middle");
}

#[test]
fn reader_stepi_through_frameless_function_jit_frameless() {
    step_every_instruction("reader-step-frameless", "jit_frameless");
}

#[test]
fn reader_stepi_through_jit_second() {
    step_every_instruction("reader-step-second", "jit_second");
}

#[test]
fn reader_loaded_after_registration_reads_existing_entries() {
    if !have_gdb("reader_late_load") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-late");
    // No reader at first: GDB cannot read compact payloads and says so.
    let t = h
        .gdb(dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("without", ["bt"])
        .section("load", [load_cmd()])
        .section("with", ["bt"])
        .run();
    let without = t.gdb_bt("without");
    if without
        .iter()
        .any(|f| JIT_FUNCTIONS.iter().any(|n| f.is(n)))
    {
        t.fail("JIT functions named before any reader was loaded");
    }
    if !t.section("load").trim().is_empty() {
        t.fail("jit-reader-load is not silent");
    }
    assert_chain(&t, "with", &CHAIN, &layout);
}

#[test]
fn reader_unload_then_reload() {
    if !have_gdb("reader_reload") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-reload");
    let t = gdb(&h, dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("loaded", ["bt"])
        .section("unload", ["jit-reader-unload"])
        .section("unloaded", ["bt"])
        .section("reload", [load_cmd()])
        .section("reloaded", ["bt"])
        .section("up", ["frame 4", "info frame"])
        .run();
    assert_chain(&t, "loaded", &CHAIN, &layout);
    let unloaded = t.gdb_bt("unloaded");
    if unloaded
        .iter()
        .any(|f| JIT_FUNCTIONS.iter().any(|n| f.is(n)))
    {
        t.fail("JIT functions still named after jit-reader-unload");
    }
    assert_chain(&t, "reloaded", &CHAIN, &layout);
    t.assert_contains(Some("up"), "Stack level 4");
}

#[test]
fn reader_unregister_forgets_names_and_unwind_rows() {
    if !have_gdb("reader_unregister") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-unregister");
    let g = gdb(&h, dir.path(), "unregister")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("registered bt", ["bt"])
        .cmd("continue")
        .cmd("continue")
        .section("unregistered bt", ["bt"])
        .cmd("continue")
        .section("end", ["info inferiors"]);
    let t = g.run();
    // Again with the reader's debug lines (they interleave with GDB's output, so no
    // backtrace parsing there): the reader unwound the JIT frames while registered, and
    // declined the same code once its entry was unregistered, which GDB does not tell
    // readers: the entry's live slot did.
    let dbg = run_with_reader_debug(&g);
    let Some(at) = dbg.text.find("jit-gdb-testhost: unregistered") else {
        dbg.fail("the host did not unregister");
    };
    if !dbg.text[..at].contains("jit-reader: unwound jit_middle") {
        dbg.fail("the reader did not unwind the registered JIT frames");
    }
    if dbg.text[at..].contains("jit-reader: unwound") {
        dbg.fail("the reader unwound unregistered code with stale rows");
    }
    assert_chain(&t, "registered bt", &CHAIN, &layout);
    let bt = t.gdb_bt("unregistered bt");
    if !bt.first().is_some_and(|f| f.is("jit_test_break_here")) {
        t.fail("third stop is not in jit_test_break_here");
    }
    if let Some(f) = bt.iter().find(|f| JIT_FUNCTIONS.iter().any(|n| f.is(n))) {
        t.fail(&format!(
            "after unregistering, bt still names {}",
            f.function
        ));
    }
    t.assert_contains(None, "exited normally");
    assert_no_reader_noise(&t);
}

#[test]
fn reader_line_table_ends_with_each_function() {
    if !have_gdb("reader_lines") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-lines");
    let second = layout.get("jit_second");
    let end = second.start + second.size;
    let last = *second.lines.last().unwrap();
    let t = gdb(&h, dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("last", [format!("info line *{:#x}", end - 1)])
        .section("end", [format!("info line *{end:#x}")])
        .run();
    // The last row's line covers up to the function's end, and not one byte further (the
    // reader's end-of-function row; without it GDB gives the padding after the function
    // that line too).
    t.assert_contains(Some("last"), &format!("Line {} of", last.1));
    t.assert_contains(Some("last"), &format!("and ends at {end:#x}"));
    t.assert_contains(Some("end"), "No line number information");
}

#[test]
fn reader_rerun_in_one_session() {
    if !have_gdb("reader_rerun") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-rerun");
    // The second process registers the same addresses with new live keys: the first run's
    // index entries are dead and replaced.
    let t = gdb(&h, dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("first", ["bt"])
        .cmd("kill")
        .cmd("run")
        .section("second", ["bt"])
        .run();
    assert_chain(&t, "first", &CHAIN, &layout);
    assert_chain(&t, "second", &CHAIN, &layout);
    assert_no_reader_noise(&t);
}
