//! Line rows with gaps, end to end: the test host's `--line-gaps` registers `jit_middle`
//! with a gap row (line 0) over its spill (`sub rsp, 16; mov [rbp-8], rdi`), between the
//! rows of lines 6 and 7. In real GDB, for both payload formats, a stop at a gap address
//! shows no line (`frame`, `bt`, `info line *PC`), line 6's range ends where the gap
//! starts, `stepi` out of the gap reaches line 7, and the backtrace from the usual stop
//! still gives every JIT frame its line. In LLDB (ELF), the gap is code without a line.

mod common;
mod reader_support;

use std::path::Path;

use common::scenario::Host;
use common::*;
use reader_support::load_cmd;

/// Addresses of jit_middle around its gap, from the host's layout.
struct Gap {
    /// The row before the gap (line 6): its address and line.
    before: (u64, u32),
    /// The gap's first and second instructions.
    start: u64,
    inside: u64,
    /// The row after the gap (line 7): its address and line.
    after: (u64, u32),
}

fn gap_of(layout: &Layout) -> Gap {
    let f = layout.get("jit_middle");
    let k = f
        .lines
        .iter()
        .position(|&(_, line)| line == 0)
        .unwrap_or_else(|| panic!("no gap row in jit_middle's rows {:?}", f.lines));
    assert!(k > 0 && k + 1 < f.lines.len(), "{:?}", f.lines);
    let (before, (gap, _), after) = (f.lines[k - 1], f.lines[k], f.lines[k + 1]);
    let inside = *f
        .insns
        .iter()
        .find(|&&o| o > gap && o < after.0)
        .expect("a second instruction in the gap");
    Gap {
        before: (f.start + before.0, before.1),
        start: f.start + gap,
        inside: f.start + inside,
        after: (f.start + after.0, after.1),
    }
}

fn host(format: &str) -> Host {
    let h = Host::new(
        testhost(),
        &["--format", format, "--line-gaps", "--source", "file"],
    );
    if format == "compact" {
        h.with_gdb_prelude([load_cmd()])
    } else {
        h
    }
}

/// One GDB session: stop at the gap's start (a breakpoint set once the code is mapped),
/// look around, step out of the gap, then the usual stop.
fn gap_session(format: &str) {
    if !require_tool("gdb", &format!("line_gaps_{format}")) {
        return;
    }
    let h = host(format);
    let dir = TempDir::new(&format!("line-gaps-{format}"));
    let layout = h.layout(dir.path());
    let g = gap_of(&layout);
    let t = h
        .gdb(dir.path(), "run")
        // run_jit is native and runs once the JIT code is mapped and registered.
        .cmd("break run_jit")
        .cmd("run")
        .cmd(format!("break *{:#x}", g.start))
        .cmd("continue")
        .section("stop", ["frame", "bt"])
        .section("line_start", [format!("info line *{:#x}", g.start)])
        .section("line_inside", [format!("info line *{:#x}", g.inside)])
        .section("line_before", [format!("info line *{:#x}", g.before.0)])
        .section("line_after", [format!("info line *{:#x}", g.after.0)])
        .cmd("stepi")
        .section("stepped_inside", ["p/x $pc", "frame"])
        .cmd("stepi")
        .section("stepped_after", ["p/x $pc", "frame"])
        .cmd("break jit_test_break_here")
        .cmd("continue")
        .section("bt", ["bt"])
        .run();

    // At the gap: jit_middle without a file or line; its caller with its line.
    let frames = t.gdb_bt("stop");
    let top = frames
        .iter()
        .find(|f| f.level == 0)
        .unwrap_or_else(|| t.fail("no frame #0 at the gap"));
    if !(top.is("jit_middle")
        && top.pc == Some(g.start)
        && top.file.is_none()
        && top.line.is_none())
    {
        t.fail(&format!(
            "frame #0 at the gap {:#x}: expected jit_middle without a line, got {top:?}",
            g.start
        ));
    }
    let caller = frames
        .iter()
        .find(|f| f.level == 1 && f.is("jit_entry"))
        .unwrap_or_else(|| t.fail("no jit_entry frame #1"));
    if let Err(e) = check_jit_frame(caller, &layout) {
        t.fail(&e);
    }
    for (section, pc) in [("line_start", g.start), ("line_inside", g.inside)] {
        t.assert_contains(
            Some(section),
            &format!("No line number information available for address {pc:#x} <jit_middle+"),
        );
    }
    // Line 6 ends where the gap starts; line 7 starts where it ends.
    let f = layout.get("jit_middle");
    let at = |pc: u64| match pc - f.start {
        0 => format!("{pc:#x} <jit_middle>"),
        n => format!("{pc:#x} <jit_middle+{n}>"),
    };
    for (section, want) in [
        (
            "line_before",
            format!(
                "Line {} of \"{}\" starts at address {} and ends at {}.",
                g.before.1,
                f.file,
                at(g.before.0),
                at(g.start)
            ),
        ),
        (
            "line_after",
            format!(
                "Line {} of \"{}\" starts at address {} and ends at ",
                g.after.1,
                f.file,
                at(g.after.0)
            ),
        ),
    ] {
        t.assert_contains(Some(section), &want);
    }

    // `stepi` inside the gap: still no line; out of it: line 7.
    for (section, pc, line) in [
        ("stepped_inside", g.inside, None),
        ("stepped_after", g.after.0, Some(g.after.1)),
    ] {
        let text = t.section(section);
        let shown = text
            .lines()
            .find_map(|l| l.split(" = ").nth(1).and_then(parse_hex))
            .unwrap_or_else(|| t.fail(&format!("no pc in section {section}")));
        if shown != pc {
            t.fail(&format!(
                "section {section}: pc {shown:#x}, expected {pc:#x}"
            ));
        }
        let f = parse_gdb_bt(text)
            .into_iter()
            .next()
            .unwrap_or_else(|| t.fail(&format!("no frame in section {section}")));
        if !f.is("jit_middle") || f.line != line {
            t.fail(&format!(
                "section {section}: expected jit_middle at line {line:?}, got {f:?}"
            ));
        }
    }

    // The usual stop: every JIT frame with the line its rows give (jit_middle's call is
    // in line 8, after the gap).
    assert_chain(&t, "bt", &CHAIN, &layout);
    eprintln!(
        "at the gap:\n{}{}{}{}",
        t.section("stop"),
        t.section("line_start"),
        t.section("line_before"),
        t.section("stepped_after")
    );
}

#[test]
fn elf_gap_rows_have_no_line_in_gdb() {
    gap_session("elf");
}

#[test]
fn compact_gap_rows_have_no_line_in_gdb() {
    gap_session("compact");
}

/// LLDB reads the ELF payload's line-0 rows as code without a line, and steps out of the
/// gap into line 7.
#[test]
fn elf_gap_rows_have_no_line_in_lldb() {
    if !require_tool("lldb", "elf_gap_rows_have_no_line_in_lldb") {
        return;
    }
    let h = host("elf");
    let dir = TempDir::new("line-gaps-lldb");
    let layout = h.layout(dir.path());
    let g = gap_of(&layout);
    let args = h.args_in(dir.path());
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.push("run");
    let file = Path::new(&layout.get("jit_middle").file)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let t = lldb(
        &h.program,
        &args,
        &[
            "settings set plugin.jit-loader.gdb.enable on".into(),
            "breakpoint set -n run_jit".into(),
            "run".into(),
            format!("breakpoint set -a {:#x}", g.start),
            "continue".into(),
            "frame info".into(),
            "si".into(),
            "si".into(),
            "frame info".into(),
        ],
        dir.path(),
    );
    // The output of each `frame info`: at the gap, then after two `si`.
    let outputs: Vec<&str> = t
        .text
        .split("(lldb) frame info\n")
        .skip(1)
        .map(|rest| &rest[..rest.find("(lldb) ").unwrap_or(rest.len())])
        .collect();
    let [gap, after] = outputs[..] else {
        t.fail("expected two `frame info` outputs")
    };
    // LLDB shows code without a line as line 0 of the unit's file, and says so at the stop.
    if !(gap.contains(&format!("{:#018x}", g.start))
        && gap.contains("`jit_middle")
        && gap.contains(&format!(" at {file}:0\n")))
    {
        t.fail(&format!(
            "frame info at the gap: expected jit_middle at {file}:0, got {gap}"
        ));
    }
    t.assert_contains(None, "has no source code associated with it");
    if !(after.contains(&format!("{:#018x}", g.after.0))
        && after.contains(&format!(" at {file}:{}\n", g.after.1)))
    {
        t.fail(&format!(
            "frame info after the gap: expected line {}, got {after}",
            g.after.1
        ));
    }
}
