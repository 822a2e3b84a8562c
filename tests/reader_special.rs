//! The reader plugin on the extra scenarios of `reader_testhost`: a JIT function that
//! mangles rsp (GDB's own reader test does the same), a code address freed and reused for
//! a different function, ELF and compact entries in one process, and damaged compact
//! payloads beside intact ones, live and in a core file.

mod common;
mod reader_support;

use std::path::{Path, PathBuf};

use common::*;
use reader_support::*;

fn host() -> PathBuf {
    reader_testhost()
}

fn gdb_on(dir: &Path, mode: &str) -> Gdb {
    let d = dir.display().to_string();
    Gdb::program(&host(), &["--source-dir", &d, mode], dir).cmd(load_cmd())
}

/// GDB with the reader on the host in `mode`, stopped at `reader_host_break`, with a scratch
/// directory of its own; None (the test skips) without GDB.
fn stopped(test: &str, mode: &str) -> Option<(TempDir, Gdb)> {
    if !require_tool("gdb", test) {
        return None;
    }
    let dir = TempDir::new(&format!("reader-{mode}"));
    let g = gdb_on(dir.path(), mode)
        .cmd("break reader_host_break")
        .cmd("run");
    Some((dir, g))
}

/// The frames of `chain` appear in order from the first one on, JIT frames with the right
/// file and line; returns the problem otherwise.
fn check_frames(frames: &[Frame], chain: &[&str], layout: &Layout) -> Result<(), String> {
    let start = frames
        .iter()
        .position(|f| f.is(chain[0]))
        .ok_or_else(|| format!("no frame of {}", chain[0]))?;
    for (k, want) in chain.iter().enumerate() {
        let f = frames
            .get(start + k)
            .ok_or_else(|| format!("backtrace ends before {want}"))?;
        if !f.is(want) {
            return Err(format!(
                "frame #{} is `{}`, expected {want}",
                f.level, f.function
            ));
        }
        if want.starts_with("jit_") {
            check_jit_frame(f, layout)?;
        }
    }
    if let Some(f) = frames.iter().find(|f| f.function == "??") {
        return Err(format!("unknown frame: {}", f.raw));
    }
    if !frames.last().is_some_and(|f| f.function.ends_with("main")) {
        return Err("the backtrace does not reach main".into());
    }
    Ok(())
}

#[track_caller]
fn assert_frames(t: &Transcript, section: &str, chain: &[&str]) -> Vec<Frame> {
    let layout = Layout::parse(&t.text);
    let frames = t.gdb_bt(section);
    if let Err(e) = check_frames(&frames, chain, &layout) {
        t.fail(&format!("backtrace in section `{section}`: {e}"));
    }
    frames
}

#[test]
fn reader_unwinds_through_a_function_that_mangles_rsp() {
    if !require_tool("gdb", "reader_clobber") {
        return;
    }
    let dir = TempDir::new("reader-clobber");
    let t = gdb_on(dir.path(), "clobber")
        .cmd("run")
        .section("bt", ["bt"])
        .section("rsp", ["p/x $rsp", "p/x $rbp"])
        .section("up", ["up", "info frame"])
        .cmd("frame 0")
        .cmd("set $saved_rbp = $rbp")
        // A corrupt frame pointer: the reader ends the backtrace and says why.
        .section("corrupt", ["set $rbp = 0x10", "bt"])
        .section("restored", ["set $rbp = $saved_rbp", "bt"])
        .cmd("continue")
        .run();
    t.assert_contains(None, "SIGTRAP");
    let frames = assert_frames(
        &t,
        "bt",
        &["jit_clobber", "jit_clobber_caller", "reader_host_run"],
    );
    if frames[0].line != Some(13) {
        t.fail("the trap is not reported at line 13 of jit_clobber");
    }
    // rsp really is garbage at the stop: not 8-byte aligned, not a user-space address.
    let rsp = hex_value(&t, "rsp");
    if rsp % 8 == 0 || rsp < 1 << 47 {
        t.fail(&format!("rsp {rsp:#x} is not mangled"));
    }
    t.assert_contains(Some("up"), "Stack level 1");
    t.assert_contains(Some("up"), "in jit_clobber_caller");
    let corrupt = t.gdb_bt("corrupt");
    if corrupt.len() != 1 || !corrupt[0].is("jit_clobber") {
        t.fail("with rbp = 0x10 the backtrace should end after jit_clobber");
    }
    t.assert_contains(Some("corrupt"), "jit-reader: backtrace ends in jit_clobber");
    t.assert_contains(Some("corrupt"), "unreadable");
    assert_frames(
        &t,
        "restored",
        &["jit_clobber", "jit_clobber_caller", "reader_host_run"],
    );
    t.assert_contains(None, "exited normally");
}

#[test]
fn reader_reused_code_address_shows_only_the_new_function() {
    if !require_tool("gdb", "reader_reuse") {
        return;
    }
    let dir = TempDir::new("reader-reuse");
    let core = dir.join("reuse.core");
    let t = gdb_on(dir.path(), "reuse")
        .cmd("break reader_host_break")
        .cmd("run")
        .section("old", ["bt"])
        .cmd("continue")
        .section("new", ["bt", "info frame 1"])
        .section("gcore", [format!("generate-core-file {}", core.display())])
        .cmd("continue")
        .run();
    assert_frames(
        &t,
        "old",
        &["reader_host_break", "jit_old", "reader_host_run"],
    );
    assert_frames(
        &t,
        "new",
        &["reader_host_break", "jit_new", "reader_host_run"],
    );
    t.assert_not_contains(Some("new"), "jit_old");
    t.assert_contains(None, "exited normally");
    // The core holds only the new registration.
    let post = Gdb::core(&host(), &core, dir.path())
        .section("load", [load_cmd()])
        .section("bt", ["bt"])
        .run();
    let layout = Layout::parse(&t.text);
    let frames = post.gdb_bt("bt");
    if let Err(e) = check_frames(
        &frames,
        &["reader_host_break", "jit_new", "reader_host_run"],
        &layout,
    ) {
        post.fail(&format!("core backtrace: {e}"));
    }
    post.assert_not_contains(Some("bt"), "jit_old");
}

#[test]
fn reader_and_elf_entries_in_one_process() {
    let Some((_dir, g)) = stopped("reader_mixed", "mixed") else {
        return;
    };
    let t = g.section("bt", ["bt"]).run();
    assert_frames(
        &t,
        "bt",
        &[
            "reader_host_break",
            "jit_compact_inner",
            "jit_elf_outer",
            "reader_host_run",
        ],
    );
}

/// The decoder's reasons the host printed, in registration order.
fn host_reasons(t: &Transcript) -> Vec<String> {
    t.text
        .lines()
        .filter_map(|l| l.strip_prefix("reader-testhost: corrupt "))
        .filter_map(|l| l.split_once("): ").map(|(_, why)| why.to_string()))
        .collect()
}

#[track_caller]
fn check_refusals(t: &Transcript, reasons: &[String]) {
    let shown: Vec<&str> = t
        .text
        .lines()
        .filter(|l| l.starts_with("jit-reader: refused a corrupt JIT entry"))
        .collect();
    // The first three are explained, the rest counted silently (a core full of damaged
    // entries must not bury the session).
    if shown.len() != 3 {
        t.fail(&format!("expected 3 refusal lines, got {}", shown.len()));
    }
    for (line, why) in shown.iter().zip(reasons) {
        if !line.contains(why.as_str()) {
            t.fail(&format!(
                "refusal `{line}` does not give the decoder's reason `{why}`"
            ));
        }
    }
    if !shown[2].contains("further refusals are counted silently") {
        t.fail("the last shown refusal does not say that more are not shown");
    }
}

#[test]
fn reader_refuses_damaged_payloads_and_keeps_working_live_and_in_a_core() {
    if !require_tool("gdb", "reader_corrupt") {
        return;
    }
    let dir = TempDir::new("reader-corrupt");
    let core = dir.join("corrupt.core");
    let chain = [
        "reader_host_break",
        "jit_intact_inner",
        "jit_intact_outer",
        "reader_host_run",
    ];
    let t = gdb_on(dir.path(), "corrupt")
        .cmd("break reader_host_break")
        .cmd("run")
        .section("bt", ["bt"])
        .section("gcore", [format!("generate-core-file {}", core.display())])
        .section("finish", ["finish", "bt"])
        .cmd("continue")
        .run();
    let reasons = host_reasons(&t);
    if reasons.len() != 6 {
        t.fail("the host did not register six damaged payloads");
    }
    check_refusals(&t, &reasons);
    assert_frames(&t, "bt", &chain);
    assert_frames(&t, "finish", &chain[1..]);
    t.assert_contains(None, "exited normally");
    assert_no_reader_noise(&t);

    let post = Gdb::core(&host(), &core, dir.path())
        .section("load", [load_cmd()])
        .section("bt", ["bt"])
        .run();
    let layout = Layout::parse(&t.text);
    // GDB walks the list from its head, the newest entry, when it opens a core.
    let newest_first: Vec<String> = reasons.iter().rev().cloned().collect();
    check_refusals(&post, &newest_first);
    if let Err(e) = check_frames(&post.gdb_bt("bt"), &chain, &layout) {
        post.fail(&format!("core backtrace: {e}"));
    }

    // With the debug switch every refusal is shown, with the payload's first bytes.
    let dbg = run_with_reader_debug(
        &Gdb::core(&host(), &core, dir.path())
            .section("load", [load_cmd()])
            .section("bt", ["bt"]),
    );
    let n = dbg.text.matches("jit-reader: refused JIT entry #").count();
    if n != 6 {
        dbg.fail(&format!(
            "JIT_READER_DEBUG=1 showed {n} refusals, expected 6"
        ));
    }
    dbg.assert_contains(None, "starting 4a 47 43 52");
    dbg.assert_contains(None, "jit-reader: unwound jit_intact_inner");
}

#[test]
fn reader_return_address_at_a_function_end_belongs_to_the_caller() {
    if !require_tool("gdb", "reader_endcall") {
        return;
    }
    let dir = TempDir::new("reader-endcall");
    // The layout is fixed (fixed base address): get it from a first session's output.
    let t = gdb_on(dir.path(), "endcall")
        .cmd("break reader_host_run")
        .cmd("run")
        .run();
    let layout = Layout::parse(&t.text);
    let next = layout.get("jit_next");
    let tail = layout.get("jit_ends_with_call");
    assert_eq!(
        tail.start + tail.size,
        next.start,
        "functions not back to back"
    );
    let t = gdb_on(dir.path(), "endcall")
        .cmd("break reader_host_run")
        .cmd("run")
        .cmd(format!("break *{:#x}", next.start))
        .cmd("continue")
        .section("next", ["p/x $pc", "bt"])
        .cmd("break reader_host_break")
        .cmd("continue")
        .cmd("continue")
        .section("endcall", ["bt"])
        .cmd("kill")
        .run();
    // At jit_next's first instruction (innermost frame): jit_next, entry row.
    if hex_value(&t, "next") != next.start {
        t.fail("first stop is not at jit_next's first instruction");
    }
    assert_frames(&t, "next", &["jit_next", "reader_host_run"]);
    // A return address equal to jit_next's start, in a caller frame: jit_ends_with_call,
    // unwound with its own rows (pc - 1).
    let frames = assert_frames(
        &t,
        "endcall",
        &["reader_host_break", "jit_ends_with_call", "reader_host_run"],
    );
    if frames[1].pc != Some(next.start) {
        t.fail("frame #1's pc is not the end of jit_ends_with_call");
    }
    t.assert_not_contains(Some("endcall"), "jit_next");
}

#[test]
fn reader_nested_blocks_keep_their_parents() {
    let Some((_dir, g)) = stopped("reader_blocks", "blocks") else {
        return;
    };
    let t = g
        .section("bt", ["bt"])
        .cmd("frame 1")
        .section(
            "blocks",
            ["python b = gdb.selected_frame().block()\nchain = []\nwhile b is not None:\n    chain.append(b.function.name if b.function else '-')\n    b = b.superblock\nprint('blocks: ' + ' < '.join(chain))"],
        )
        .run();
    // The call instruction lies in jit_inner_scope, inside jit_inlined, inside the function.
    let frames = t.gdb_bt("bt");
    if !frames
        .get(1)
        .is_some_and(|f| f.is("jit_inner_scope") && f.line == Some(3))
    {
        t.fail("frame #1 is not the innermost nested block jit_inner_scope at line 3");
    }
    if !frames.iter().any(|f| f.is("reader_host_run")) {
        t.fail("the backtrace does not continue past the nested blocks");
    }
    t.assert_contains(
        Some("blocks"),
        "blocks: jit_inner_scope < jit_inlined < jit_with_blocks < ",
    );
}

#[test]
fn reader_skips_unregistered_objects_left_in_a_payload() {
    if !require_tool("gdb", "reader_tombstone") {
        return;
    }
    let dir = TempDir::new("reader-tombstone");
    let core = dir.join("tombstone.core");
    let chain = [
        "reader_host_break",
        "jit_tomb_inner",
        "jit_tomb_outer",
        "reader_host_run",
    ];
    // The ghost's code is intact, only its live slot is cleared: GDB must not name it.
    let ghost = [
        "set language c",
        "x/2i *(unsigned long *)&READER_HOST_GHOST",
        "set language auto",
    ];
    let session = gdb_on(dir.path(), "tombstone")
        .cmd("break reader_host_break")
        .cmd("run")
        .section("bt", ["bt"])
        .section("ghost", ghost)
        .section("gcore", [format!("generate-core-file {}", core.display())])
        .cmd("continue");
    let t = run_with_reader_debug(&session);
    assert_frames(&t, "bt", &chain);
    let layout = Layout::parse(&t.text);
    let addr = layout.get("jit_ghost").start;
    t.assert_contains(Some("ghost"), &format!("{addr:#x}:"));
    t.assert_not_contains(None, "<jit_ghost");
    t.assert_contains(
        None,
        "jit-reader: skipped an unregistered object (1 function(s), first `jit_ghost`)",
    );
    t.assert_contains(None, "exited normally");
    assert_no_reader_noise(&t);

    // The same in the core file: the cleared slot is part of it.
    let post = run_with_reader_debug(
        &Gdb::core(&host(), &core, dir.path())
            .section("load", [load_cmd()])
            .section("bt", ["bt"])
            .section("ghost", ghost),
    );
    if let Err(e) = check_frames(&post.gdb_bt("bt"), &chain, &layout) {
        post.fail(&format!("core backtrace: {e}"));
    }
    post.assert_contains(Some("ghost"), &format!("{addr:#x}:"));
    post.assert_not_contains(None, "<jit_ghost");
    post.assert_contains(None, "skipped an unregistered object");
}

#[test]
fn registrations_without_a_debugger_are_seen_on_attach_and_later_ones_announced() {
    if !require_tool("gdb", "reader_late") {
        return;
    }
    let dir = TempDir::new("reader-late");
    let d = dir.path().display().to_string();
    let waiting = WaitingHost::start(&host(), &["--source-dir", &d, "late"], dir.path());
    let out = &waiting.output;
    // Without a debugger both registrations went into one entry, in place.
    assert!(out.contains("quiet entries=1"), "{out}");
    let gone = out
        .split("gone=")
        .nth(1)
        .and_then(|s| parse_hex(s.split_whitespace().next()?))
        .unwrap_or_else(|| panic!("no gone= address in:\n{out}"));
    let layout = Layout::parse(out);
    let core = dir.join("late.core");
    let t = Gdb::attach(waiting.pid, dir.path())
        .cmd(load_cmd())
        .section(
            "inner",
            [format!("x/i {:#x}", layout.get("jit_quiet_inner").start)],
        )
        .section("gone before", [format!("x/i {gone:#x}")])
        // The host sees the hook's breakpoint, registers jit_late_outer (announced to GDB
        // with a stop) and runs it.
        .cmd("break reader_host_break")
        .cmd("continue")
        .section("bt", ["bt"])
        .section("gone after", [format!("x/i {gone:#x}")])
        .cmd(format!("gcore {}", core.display()))
        .cmd("kill")
        .run();
    t.assert_contains(Some("inner"), "<jit_quiet_inner");
    let layout_t = Layout::parse(out);
    let frames = t.gdb_bt("bt");
    if let Err(e) = check_frames(
        &frames,
        &[
            "reader_host_break",
            "jit_quiet_inner",
            "jit_late_outer",
            "reader_host_run",
        ],
        &layout_t,
    ) {
        t.fail(&format!("backtrace after the late registration: {e}"));
    }
    // The unregistered object's record is still in the payload, its live slot cleared: no
    // reader names it.
    t.assert_not_contains(Some("gone before"), "jit_quiet_gone");
    t.assert_not_contains(Some("gone after"), "jit_quiet_gone");

    // The core inspector agrees.
    let text = inspect_list(&core);
    for name in ["jit_quiet_inner", "jit_late_outer"] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    assert!(!text.contains("jit_quiet_gone"), "{text}");
}

/// `jit-gdb inspect CORE --exe HOST --list`: its output (the command must succeed).
fn inspect_list(core: &Path) -> String {
    let listed = std::process::Command::new(env!("CARGO_BIN_EXE_jit-gdb"))
        .arg("inspect")
        .arg(core)
        .arg("--exe")
        .arg(host())
        .arg("--list")
        .output()
        .expect("run jit-gdb inspect");
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    text
}

/// The GDB command that loads this checkout's scripts.
fn source_scripts() -> String {
    format!("source {}/gdb-scripts/jit.py", env!("CARGO_MANIFEST_DIR"))
}

/// The deferred scenario's call chain at its stop, innermost first.
const DEFERRED_CHAIN: [&str; 4] = [
    "reader_host_break",
    "jit_deferred_inner",
    "jit_deferred_outer",
    "reader_host_run",
];

/// Deferred mode: registrations are listed at once but announced to GDB in groups. Plain GDB
/// does not know the pending ones yet; our GDB scripts announce them at every stop.
#[test]
fn deferred_registrations_are_announced_at_the_stop_by_the_scripts() {
    if !require_tool("gdb", "reader_deferred") {
        return;
    }
    let dir = TempDir::new("reader-deferred");
    let plain = gdb_on(dir.path(), "deferred")
        .cmd("break reader_host_break")
        .cmd("run")
        .section("bt", ["bt"])
        .run();
    let frames = plain.gdb_bt("bt");
    // The first registration opened a batch entry (announced with it); the second was
    // appended to it in place, pending.
    if frames.iter().any(|f| f.is("jit_deferred_outer")) {
        plain.fail("plain GDB already knows the pending registration: nothing was deferred");
    }
    scripts_name_the_deferred_chain(dir.path(), "compact");
}

/// The deferred scenario (`READER_HOST_DEFERRED_FORMAT=format`) with our GDB scripts loaded:
/// their flush at the stop names the whole chain, and nothing is left pending.
fn scripts_name_the_deferred_chain(dir: &std::path::Path, format: &str) {
    let t = gdb_on(dir, "deferred")
        .cmd(source_scripts())
        .cmd(format!(
            "set environment READER_HOST_DEFERRED_FORMAT={format}"
        ))
        .cmd("break reader_host_break")
        .cmd("run")
        .section("bt", ["bt"])
        .cmd("set language c")
        .section("pending", ["p *(long *) &jit_gdb_pending"])
        .run();
    assert_frames(&t, "bt", &DEFERRED_CHAIN);
    t.assert_contains(Some("pending"), "= 0");
}

/// A `jit break` request waiting for a function must stop in it even when the runtime
/// defers announcements: the scripts tell the runtime what is waited for while a request is
/// pending (its name, or `jit_gdb_announce_each` for a pattern), so that the registration
/// is announced (and the breakpoint placed) before the code runs, and clear it once none is
/// left.
#[test]
fn pending_jit_break_stops_in_code_registered_in_deferred_mode() {
    break_before_deferred_code_runs("compact", "jit break jit_deferred_outer");
}

/// The same with ELF registrations (pending ones are linked but not announced).
#[test]
fn pending_jit_break_stops_in_elf_code_registered_in_deferred_mode() {
    break_before_deferred_code_runs("elf", "jit break jit_deferred_outer");
}

/// A request by regular expression: the runtime cannot match it, so every registration is
/// announced at once while it waits (deferral suspended).
#[test]
fn pending_jit_break_by_pattern_suspends_deferral() {
    break_before_deferred_code_runs("elf", "jit break jit_deferred_out[e]r");
}

/// A plain GDB breakpoint by name, pending (`break NAME` before NAME is registered), with our
/// scripts loaded and ELF registrations in deferred mode: GDB places it when an ELF entry
/// defining NAME is announced, which deferral would do after the code ran. The scripts hand
/// the name to the runtime too.
#[test]
fn pending_gdb_breakpoint_by_name_stops_in_elf_code_registered_in_deferred_mode() {
    break_before_deferred_code_runs("elf", "break jit_deferred_outer");
}

/// `BREAK` (`jit break PATTERN`, or GDB's `break NAME`) pending, then the deferred scenario
/// (`jit_deferred_inner`, then `jit_deferred_outer`, registered in deferred mode): the
/// program must stop in `jit_deferred_outer` before it runs. A plain name is handed to the
/// runtime, which announces the registration defining it at once and keeps deferring the
/// others: with ELF the inner one is still pending at the stop (the scripts' flush there
/// announces it, so the flush counter is 1). A regular expression makes the runtime
/// announce every registration (nothing pending, no flush). (Compact: the inner one opens
/// the batch, which is announced, and the outer one's announcement is of that batch:
/// nothing is left pending either way.)
fn break_before_deferred_code_runs(format: &str, brk: &str) {
    let (jit, pattern) = match brk.strip_prefix("jit break ") {
        Some(p) => (true, p),
        None => (false, brk.trim_start_matches("break ")),
    };
    let by_name = !pattern.contains('[');
    let tag = format!(
        "{format}-{}-{}",
        if jit { "jit" } else { "gdb" },
        if by_name { "name" } else { "pattern" }
    );
    if !require_tool("gdb", &format!("reader_deferred_break_{tag}")) {
        return;
    }
    let dir = TempDir::new(&format!("reader-deferred-break-{tag}"));
    let t = gdb_on(dir.path(), "deferred")
        .cmd(format!(
            "set environment READER_HOST_DEFERRED_FORMAT={format}"
        ))
        .cmd(source_scripts())
        .cmd(brk)
        .cmd("break reader_host_break")
        .section("first", ["run"])
        .section("bt", ["bt"])
        .cmd("set language c")
        .section("flag", ["p *(unsigned char *) &jit_gdb_announce_each"])
        .section("wanted", ["p *(unsigned int *) &jit_gdb_wanted_len"])
        .section("flushes", ["p *(unsigned long *) &jit_gdb_flush_calls"])
        .section("second", ["continue"])
        .run();
    if jit {
        t.assert_contains(Some("first"), &format!("(pending '{pattern}' resolved)"));
    }
    t.assert_contains(Some("first"), "jit_deferred_outer () at ");
    t.assert_not_contains(Some("first"), "reader_host_break (n=");
    assert_frames(&t, "bt", &["jit_deferred_outer", "reader_host_run"]);
    // Placed: the runtime defers again, and waits for no name.
    t.assert_contains(Some("flag"), "= 0");
    t.assert_contains(Some("wanted"), "= 0");
    let flushes = if by_name { "= 1" } else { "= 0" };
    if format == "elf" && !t.section("flushes").contains(flushes) {
        t.fail(&format!(
            "the flush counter should be {flushes} at the stop: by name, only the registration defining the name is announced at once and the other is pending; by pattern, every registration is announced"
        ));
    }
    t.assert_contains(Some("second"), "reader_host_break (n=");
}

/// The flush our scripts call at a stop runs code in the program: the program's vector
/// registers must be as they were afterwards. GDB 13 cannot write them back on CPUs with
/// AMX state (it says "Couldn't write extended state status" after the call); the runtime
/// saves and restores them itself around the flush. Checked on every machine (where GDB
/// can restore them, both do).
#[test]
fn deferred_flush_leaves_the_vector_registers_as_they_were() {
    if !require_tool("gdb", "reader_deferred_vector_state") {
        return;
    }
    let script = source_scripts();
    let dir = TempDir::new("reader-deferred-vectors");
    // The scripts are loaded once stopped, so that the flush is made on demand, between two
    // readings of the registers.
    let t = gdb_on(dir.path(), "deferred")
        .cmd("break reader_host_break")
        .cmd("run")
        .section("before", ["info registers vector"])
        .cmd(script)
        .section("flush", ["python print('flushed', flush_deferred())"])
        .section("after", ["info registers vector"])
        .section("bt", ["bt"])
        .run();
    let (before, after) = (t.section("before"), t.section("after"));
    if !before.contains("mm0 ") {
        t.fail("`info registers vector` shows no xmm0, ymm0 or zmm0: nothing to compare");
    }
    if before != after {
        t.fail("the flush changed the program's vector registers");
    }
    t.assert_contains(Some("flush"), "flushed 1");
    t.assert_not_contains(Some("flush"), "not announced");
    assert_frames(&t, "bt", &DEFERRED_CHAIN);
}

/// Deferred mode, ELF: each registration's entry is listed at once but not announced. Plain
/// GDB (no scripts) knows neither function before a flush and both after it (one entry
/// announced for both); a core file taken before the flush lists them.
#[test]
fn deferred_elf_registrations_are_announced_only_at_the_flush() {
    if !require_tool("gdb", "reader_deferred_elf") {
        return;
    }
    let dir = TempDir::new("reader-deferred-elf");
    let core = dir.path().join("deferred-elf.core");
    let t = gdb_on(dir.path(), "deferred")
        .cmd("set environment READER_HOST_DEFERRED_FORMAT=elf")
        .cmd("break reader_host_break")
        .cmd("run")
        .section("bt before", ["bt"])
        .cmd("set language c")
        .section("pending", ["p *(long *) &jit_gdb_pending"])
        .cmd(format!("gcore {}", core.display()))
        // As our scripts do. (GDB may print no value here: on some kernels it cannot
        // restore the registers' extended state after the call, which is harmless.)
        .cmd("p (long) jit_gdb_flush_for_debugger()")
        .section("pending after", ["p *(long *) &jit_gdb_pending"])
        .section("bt after", ["bt"])
        .cmd("kill")
        .run();
    let before = t.gdb_bt("bt before");
    if let Some(f) = before
        .iter()
        .find(|f| f.is("jit_deferred_outer") || f.is("jit_deferred_inner"))
    {
        t.fail(&format!(
            "plain GDB knows a pending ELF registration before the flush: {f:?}"
        ));
    }
    t.assert_contains(Some("pending"), "= 2");
    t.assert_contains(Some("pending after"), "= 0");
    assert_frames(&t, "bt after", &DEFERRED_CHAIN);
    // The core file (taken while both were pending) lists them.
    let text = inspect_list(&core);
    for name in ["jit_deferred_inner", "jit_deferred_outer"] {
        assert!(
            text.contains(name),
            "{name} missing from the core's list:\n{text}"
        );
    }
}

/// Deferred mode, ELF, with our GDB scripts: they flush at every stop, so the stop in the
/// just-registered pending code names the whole chain.
#[test]
fn deferred_elf_registrations_are_announced_at_the_stop_by_the_scripts() {
    if !require_tool("gdb", "reader_deferred_elf_scripts") {
        return;
    }
    let dir = TempDir::new("reader-deferred-elf-scripts");
    scripts_name_the_deferred_chain(dir.path(), "elf");
}

/// Deferred mode with `max_delay`: the timer thread announces pending registrations while
/// the runtime registers nothing more, so plain GDB (no scripts) names them at the stop.
#[test]
fn deferred_registrations_are_announced_after_max_delay_without_another_registration() {
    if !require_tool("gdb", "reader_deferred_delay") {
        return;
    }
    let t = plain_gdb_bt_in_deferred_mode("reader-deferred-delay", "READER_HOST_MAX_DELAY_MS=50");
    t.assert_contains(None, "0 pending after");
}

/// Plain GDB stopped in the deferred scenario with `env` set: its `bt` names the whole chain
/// (so the pending registrations were announced).
fn plain_gdb_bt_in_deferred_mode(tag: &str, env: &str) -> Transcript {
    let dir = TempDir::new(tag);
    let t = gdb_on(dir.path(), "deferred")
        .cmd(format!("set environment {env}"))
        .cmd("break reader_host_break")
        .cmd("run")
        .section("bt", ["bt"])
        .run();
    assert_frames(&t, "bt", &DEFERRED_CHAIN);
    t
}

/// Deferred mode announces by itself once `max_pending` registrations are pending: plain GDB
/// (no scripts) then names them.
#[test]
fn deferred_registrations_are_announced_at_max_pending() {
    if !require_tool("gdb", "reader_deferred_count") {
        return;
    }
    plain_gdb_bt_in_deferred_mode("reader-deferred-count", "READER_HOST_MAX_PENDING=1");
}
