//! The launcher checks a core's JIT list before GDB reads it (`jit-gdb core PROGRAM CORE`,
//! `jit-gdb PROGRAM CORE`). Real cores of the compact test host (one entry per function,
//! taken by `gcore`) are damaged in the ways that stop GDB (a cyclic list hangs it, a huge
//! `symfile_size` aborts it, an entry outside the core's memory ends its walk with an error);
//! the launcher must name the problem in one line, give GDB a repaired copy (the original
//! untouched, the copy removed afterwards), and GDB must show the entries before the damage.
//! A clean core goes to GDB as it is, with no word from the launcher.

mod common;
mod core_support;
mod reader_support;

use std::path::Path;
use std::time::Duration;

use common::{check_jit_frame, parse_gdb_bt, Frame};
use core_support::*;

/// Generous: a `jit-gdb core` run takes a few seconds; a hang is what this catches.
const LIMIT: Duration = Duration::from_secs(90);

/// `jit-gdb core [OPTIONS] PROGRAM CORE`.
fn core_report(c: &JitCore, core: &Path, options: &[&str]) -> Run {
    let mut cmd = jit_gdb(c.dir.path());
    cmd.arg("core").args(options).arg(&c.host.program).arg(core);
    run_bounded(cmd, c.dir.path(), LIMIT)
}

/// Writes a copy of the core with `damage` applied; returns its path.
fn damaged(c: &JitCore, name: &str, damage: impl FnOnce(&mut Vec<u8>)) -> std::path::PathBuf {
    let mut bytes = std::fs::read(&c.core).unwrap();
    damage(&mut bytes);
    let path = c.dir.join(name);
    std::fs::write(&path, &bytes).unwrap();
    path
}

/// The functions `jit list` shows (third column of its rows; none without its table).
fn jit_list_names(run: &Run) -> Vec<String> {
    // Its header row: `Start   End   Name   Kind   Entry   File`.
    let Some(i) = run.text.find("\nStart ").filter(|&i| {
        run.text[i..]
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains("Name"))
    }) else {
        // No table: no JIT function (the caller compares with what it expects).
        return Vec::new();
    };
    let mut names: Vec<String> = run.text[i..]
        .lines()
        .filter(|l| l.starts_with("0x"))
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect();
    names.sort();
    names
}

/// The frames of `thread apply all bt` in the report.
fn backtrace(run: &Run) -> Vec<Frame> {
    let (Some(a), Some(b)) = (
        run.text.find("(gdb) thread apply all bt"),
        run.text.find("(gdb) jit list"),
    ) else {
        run.fail("no backtrace section in the report");
    };
    parse_gdb_bt(&run.text[a..b])
}

/// The report of a damaged core: finished, one line naming `problem`, one saying what was
/// cut, a copy that is gone afterwards, the original unchanged; GDB lists exactly the
/// functions of the first `keep` entries, and shows each of them that is on the stack as a
/// JIT frame with its file and line.
fn check_repaired(c: &JitCore, core: &Path, keep: usize, problem: &str, cut: &str) -> Run {
    let before = std::fs::read(core).unwrap();
    let run = core_report(c, core, &[]);
    assert_no_crash_or_hang(&run);
    if run.status.and_then(|s| s.code()) != Some(0) {
        run.fail("the report did not succeed");
    }
    let lines = run.launcher_lines();
    let want = format!(
        "jit-gdb: the JIT list in {} would stop GDB: {problem}",
        core.display()
    );
    if lines.len() != 2 || lines[0] != want {
        run.fail(&format!("expected the line `{want}` and one more"));
    }
    if !lines[1].starts_with("jit-gdb: GDB reads a repaired copy, ") || !lines[1].contains(cut) {
        run.fail(&format!("the second line does not say `{cut}`"));
    }
    assert_eq!(
        std::fs::read(core).unwrap(),
        before,
        "the original core was written"
    );
    let left = copies_left(c.dir.path());
    assert!(left.is_empty(), "repaired copies left behind: {left:?}");
    let mut want: Vec<String> = c.entries[..keep]
        .iter()
        .flat_map(|e| e.names.clone())
        .collect();
    want.sort();
    assert_eq!(jit_list_names(&run), want, "{}", run.text);
    let frames = backtrace(&run);
    for name in &want {
        let f = frames
            .iter()
            .find(|f| f.is(name))
            .unwrap_or_else(|| run.fail(&format!("no frame of {name}")));
        if let Err(e) = check_jit_frame(f, &c.layout) {
            run.fail(&e);
        }
    }
    run
}

#[test]
fn cyclic_list_is_cut_where_it_turns_back() {
    let Some(c) = compact_core("launcher-cores-cycle") else {
        return;
    };
    let (first, last) = (c.entries[0].addr, c.entries[3].addr);
    let core = damaged(&c, "cycle.core", |b| put_u64(b, last, first));
    let problem = format!(
        "entry 3 at {last:#x} has next_entry pointing back to entry 0 at {first:#x}: the list is cyclic (GDB would loop forever reading it)"
    );
    let run = check_repaired(
        &c,
        &core,
        4,
        &problem,
        "the list cut after entry 3 (its next_entry cleared); no entry left out",
    );
    // Every JIT function is back: the whole chain of the scenario.
    let frames = backtrace(&run);
    if let Err(e) = common::check_chain(&frames, &common::CHAIN, &c.layout) {
        run.fail(&e);
    }
}

#[test]
fn huge_symfile_size_is_cut_before_gdb_allocates_it() {
    let Some(c) = compact_core("launcher-cores-huge") else {
        return;
    };
    let e = &c.entries[1];
    let size = 0xffff_ffff_ffff_0000u64;
    let core = damaged(&c, "huge.core", |b| put_u64(b, e.addr + 24, size));
    let problem = format!(
        "entry 1 at {:#x} has symfile_size {size:#x}, more than the core's whole memory (GDB with a reader would abort allocating it)",
        e.addr
    );
    check_repaired(
        &c,
        &core,
        1,
        &problem,
        &format!(
            "the list cut after entry 0 (its next_entry cleared); 3 entries left out: entry 1 (the damaged one); entry 2 ({}); entry 3 ({})",
            c.entries[2].names.join(", "),
            c.entries[3].names.join(", ")
        ),
    );

    // Without the check, GDB (with the reader) aborts on this core: what the check is for.
    let run = core_report(&c, &core, &["--no-core-check"]);
    if run.timed_out
        || !run
            .launcher_lines()
            .iter()
            .any(|l| l.contains("was killed by signal 6"))
    {
        run.fail("expected GDB to abort on the huge symfile_size without the check");
    }
    assert_eq!(run.status.and_then(|s| s.code()), Some(128 + 6));
}

#[test]
fn entry_outside_the_core_is_cut() {
    let Some(c) = compact_core("launcher-cores-outside") else {
        return;
    };
    let bytes = std::fs::read(&c.core).unwrap();
    let nowhere = beyond_memory(&bytes) + 0x10_0000;
    let e = &c.entries[1];
    let core = damaged(&c, "outside.core", |b| put_u64(b, e.addr, nowhere));
    let problem = format!(
        "entry 2 at {nowhere:#x} (entry 1's next_entry) cannot be read: it is outside the core's memory (GDB stops reading the list there with an error)"
    );
    check_repaired(
        &c,
        &core,
        2,
        &problem,
        "the list cut after entry 1 (its next_entry cleared); no entry left out",
    );

    // A first_entry outside the core: the descriptor's pointer is cleared, GDB reads no
    // JIT entry and the report still runs to its end.
    let core = damaged(&c, "first-outside.core", |b| {
        put_u64(b, c.descriptor + 16, nowhere)
    });
    let problem = format!(
        "the descriptor's first_entry {nowhere:#x} cannot be read: it is outside the core's memory (GDB stops reading the list there with an error)"
    );
    check_repaired(
        &c,
        &core,
        0,
        &problem,
        "the descriptor's first_entry cleared: no JIT entry is read",
    );
}

#[test]
fn clean_core_goes_to_gdb_as_it_is() {
    let Some(c) = compact_core("launcher-cores-clean") else {
        return;
    };
    let run = core_report(&c, &c.core, &[]);
    assert_no_crash_or_hang(&run);
    assert_eq!(run.status.and_then(|s| s.code()), Some(0), "{}", run.text);
    let lines = run.launcher_lines();
    if !lines.is_empty() {
        run.fail("the launcher spoke about a clean core");
    }
    let left = copies_left(c.dir.path());
    assert!(left.is_empty(), "{left:?}");
    let mut want: Vec<String> = c.layout.functions.iter().map(|f| f.name.clone()).collect();
    want.sort();
    assert_eq!(jit_list_names(&run), want, "{}", run.text);
    if let Err(e) = common::check_chain(&backtrace(&run), &common::CHAIN, &c.layout) {
        run.fail(&e);
    }
}

/// A core that cannot be checked (not a core file at all) goes to GDB as it is, with one
/// line saying why it was not checked. (A program that does not define the descriptor no
/// longer makes a core uncheckable: the inspector finds it in the files the core maps.)
#[test]
fn unchecked_core_is_said_and_still_opened() {
    let Some(mut c) = compact_core("launcher-cores-unchecked") else {
        return;
    };
    let not_a_core = c.dir.path().join("not-a-core");
    std::fs::write(&not_a_core, vec![0u8; 4096]).unwrap();
    c.core = not_a_core;
    let mut cmd = jit_gdb(c.dir.path());
    cmd.arg("core").arg("/bin/true").arg(&c.core);
    let run = run_bounded(cmd, c.dir.path(), LIMIT);
    assert_no_crash_or_hang(&run);
    let lines = run.launcher_lines();
    let want = format!(
        "jit-gdb: note: the JIT list in {} was not checked before GDB reads it: ",
        c.core.display()
    );
    if lines.len() != 1 || !lines[0].starts_with(&want) {
        run.fail(&format!("expected one line starting `{want}`"));
    }
    if !run.text.contains("(gdb) jit list") {
        run.fail("GDB did not run the report");
    }
    assert!(copies_left(c.dir.path()).is_empty());
}

/// `jit-gdb [GDB ARGS] PROGRAM CORE` (GDB's own command line): the same check; GDB reads
/// the repaired copy (`info target` names it); `-c CORE` is found too.
#[test]
fn gdb_command_line_core_is_checked() {
    let Some(c) = compact_core("launcher-cores-gdb-args") else {
        return;
    };
    let (first, last) = (c.entries[0].addr, c.entries[3].addr);
    let core = damaged(&c, "cycle.core", |b| put_u64(b, last, first));
    let program = c.host.program.to_str().unwrap().to_string();
    let core_s = core.to_str().unwrap().to_string();
    for operands in [
        vec![program.clone(), core_s.clone()],
        vec!["-c".into(), core_s.clone(), program.clone()],
        vec![format!("--core={core_s}"), program.clone()],
    ] {
        let mut cmd = jit_gdb(c.dir.path());
        cmd.args(["-batch", "-nx", "-ex", "info target", "-ex", "jit list"])
            .args(&operands);
        let run = run_bounded(cmd, c.dir.path(), LIMIT);
        assert_no_crash_or_hang(&run);
        let lines = run.launcher_lines();
        if lines.len() != 2 || !lines[0].contains("the list is cyclic") {
            run.fail(&format!("{operands:?}: no diagnosis"));
        }
        let copy = lines[1]
            .strip_prefix("jit-gdb: GDB reads a repaired copy, ")
            .and_then(|l| l.split(" (removed when GDB exits").next())
            .unwrap_or_else(|| run.fail("no copy named"));
        if !run
            .text
            .contains(&format!("Local core dump file:\n\t`{copy}'"))
        {
            run.fail(&format!("GDB did not read the repaired copy {copy}"));
        }
        assert_eq!(jit_list_names(&run).len(), 4, "{}", run.text);
        assert!(copies_left(c.dir.path()).is_empty());
    }
    // --no-core-check on a clean core: GDB as before, nothing said.
    let mut cmd = jit_gdb(c.dir.path());
    cmd.args(["--no-core-check", "-batch", "-nx", "-ex", "jit list"])
        .arg(&c.host.program)
        .arg(&c.core);
    let run = run_bounded(cmd, c.dir.path(), LIMIT);
    assert_no_crash_or_hang(&run);
    assert!(run.launcher_lines().is_empty(), "{}", run.text);
    assert_eq!(jit_list_names(&run).len(), 4, "{}", run.text);
}
