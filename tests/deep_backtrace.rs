//! `bt` through 10,000 JIT frames is complete, with both payloads (the deep host of the
//! backtrace benchmark, `jit-interface/examples/deep_host.rs`: real x86-64 code, four
//! functions calling each other 10,000 deep in frame-pointer frames). Compact through the
//! reader plugin, ELF through GDB alone. Every frame must be there, named, in order, at the
//! line of its call, inside its function, and the backtrace must go on to `main`.

mod common;
mod reader_support;

use std::path::PathBuf;

use common::*;
use reader_support::load_cmd;

const DEPTH: usize = 10_000;

/// `target/<profile>/examples/deep_host`, built on first use.
fn deep_host() -> PathBuf {
    interface_example("deep_host")
}

/// `jit-fn name=NAME start=0xADDR size=N` lines the host prints: name -> [start, end).
fn jit_ranges(t: &Transcript) -> Vec<(String, u64, u64)> {
    t.text
        .lines()
        .filter_map(|l| l.strip_prefix("jit-fn "))
        .map(|l| {
            let field = |k: &str| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix(k))
                    .unwrap_or_else(|| t.fail(&format!("no {k} in `{l}`")))
            };
            let start = parse_hex(field("start=")).unwrap_or_else(|| t.fail(l));
            let size: u64 = field("size=").parse().unwrap_or_else(|_| t.fail(l));
            (field("name=").to_string(), start, start + size)
        })
        .collect()
}

fn deep_backtrace(format: &str) {
    let dir = TempDir::new(&format!("deep-bt-{format}"));
    let depth = DEPTH.to_string();
    let mut g = Gdb::program(&deep_host(), &[format, &depth], dir.path());
    if format == "compact" {
        g = g.cmd(load_cmd());
    }
    let t = g
        .cmds(["break deep_host_stop", "run"])
        .section("bt", ["bt -frame-arguments none"])
        .run();
    let ranges = jit_ranges(&t);
    if ranges.len() != 4 {
        t.fail("the host did not print its four JIT functions");
    }
    t.assert_not_contains(Some("bt"), "Backtrace stopped");
    let frames = t.gdb_bt("bt");
    // GDB 13 goes on past the Rust `main` (to `_start`); GDB 16 stops at it.
    let ends_at_main = frames.last().is_some_and(|f| f.is("deep_host::main"));
    if frames.len() < DEPTH + 3 && !(ends_at_main && frames.len() == DEPTH + 2) {
        t.fail(&format!("only {} frames", frames.len()));
    }
    if !frames[0].is("deep_host_stop") {
        t.fail(&format!("frame #0 is {}", frames[0].raw));
    }
    for (i, f) in frames.iter().enumerate() {
        if f.level as usize != i || f.function == "??" {
            t.fail(&format!("frame {i} is `{}`", f.raw));
        }
    }
    // Frame i (1..=DEPTH) is the (DEPTH - i)-th call from the outermost `jit_deep_0`.
    for (i, f) in frames.iter().enumerate().take(DEPTH + 1).skip(1) {
        let name = format!("jit_deep_{}", (DEPTH - i) % 4);
        // The innermost calls deep_host_stop (line 5), the others the next function (3).
        let line = if i == 1 { 5 } else { 3 };
        let (_, start, end) = ranges
            .iter()
            .find(|(n, _, _)| *n == name)
            .unwrap_or_else(|| t.fail(&format!("no range for {name}")));
        let pc_ok = f.pc.is_some_and(|pc| (*start + 1..=*end).contains(&pc));
        // A bare reader names a file GDB cannot open by its cache path (see reader_sources).
        let file_ok = f
            .file
            .as_deref()
            .is_some_and(|file| file == "deep.js" || is_cached_name(file, "deep.js"));
        if f.function != name || !file_ok || f.line != Some(line) {
            t.fail(&format!(
                "frame #{i} is `{}`, expected {name} at deep.js:{line}",
                f.raw
            ));
        }
        if !pc_ok {
            t.fail(&format!(
                "frame #{i} `{}`: pc not a return address in {name} [{start:#x}, {end:#x})",
                f.raw
            ));
        }
    }
    if !frames[DEPTH + 1].is("main") {
        t.fail(&format!(
            "the outermost JIT frame's caller is `{}`, not main",
            frames[DEPTH + 1].raw
        ));
    }
    if !frames.last().is_some_and(|f| f.function == "_start") && !ends_at_main {
        t.fail("the backtrace does not reach _start (nor end at the Rust main, as GDB 16's)");
    }
}

#[test]
fn ten_thousand_jit_frames_compact() {
    if !require_tool("gdb", "ten_thousand_jit_frames_compact") {
        return;
    }
    deep_backtrace("compact");
}

#[test]
fn ten_thousand_jit_frames_elf() {
    if !require_tool("gdb", "ten_thousand_jit_frames_elf") {
        return;
    }
    deep_backtrace("elf");
}

/// GDB's DWARF unwinder searches every frame's caller for the call site it returned from
/// (for tail-call frames). With the call sites the deep host declares, the search finds each
/// one (`set debug entry-values 1` says `tailcall: initial:`, an empty chain of tail calls)
/// instead of failing (`cannot find DW_TAG_call_site`) and recovering, as it does for the
/// same ELF objects without call sites.
fn entry_value_search(format: &str) {
    const DEPTH: usize = 40;
    let dir = TempDir::new(&format!("call-sites-{format}"));
    let depth = DEPTH.to_string();
    let t = Gdb::program(&deep_host(), &[format, &depth], dir.path())
        .cmds(["break deep_host_stop", "run", "set debug entry-values 1"])
        .cmd("maintenance flush register-cache")
        .section("bt", ["bt -frame-arguments none"])
        .run();
    let frames = t.gdb_bt("bt");
    let jit = frames
        .iter()
        .filter(|f| f.function.starts_with("jit_deep_"))
        .count();
    // `_start` on GDB 13; GDB 16 ends a backtrace at the Rust `main`.
    let last_ok = frames
        .last()
        .is_some_and(|f| f.function == "_start" || f.function == "deep_host::main");
    if jit != DEPTH || !last_ok {
        t.fail(&format!(
            "{jit} JIT frames, not {DEPTH}, or no _start (nor the Rust main)"
        ));
    }
    let section = t.section("bt");
    // Calls from JIT code whose call site GDB could not find (the message names the caller).
    let missed = section
        .lines()
        .filter(|l| l.contains("cannot find DW_TAG_call_site") && l.contains(" in jit_deep_"))
        .count();
    // Found ones print no caller name, but GDB searches for a frame's call site when it
    // makes the frame: before the frame's `#N` line. Frames 0 to DEPTH - 1 are called from
    // JIT code.
    let (mut found, mut pending) = (0, 0);
    for l in section.lines() {
        if l.trim() == "tailcall: initial:" {
            pending += 1;
        } else if let Some(level) = parse_gdb_bt(l).first().map(|f| f.level as usize) {
            if level < DEPTH {
                found += pending;
            }
            pending = 0;
        }
    }
    // Every callee of a JIT frame (`deep_host_stop` and all JIT frames but the outermost)
    // is searched at least once (GDB may redo the innermost frame).
    let (want, other) = if format == "elf" {
        (found, missed)
    } else {
        (missed, found)
    };
    if want < DEPTH || other != 0 {
        t.fail(&format!(
            "{format}: {found} call sites found, {missed} not found; expected {DEPTH} or more {}",
            if format == "elf" {
                "found"
            } else {
                "not found"
            }
        ));
    }
}

#[test]
fn elf_call_sites_are_found_by_gdb() {
    if !require_tool("gdb", "elf_call_sites_are_found_by_gdb") {
        return;
    }
    entry_value_search("elf");
    // The same objects without call sites: the search fails in every JIT frame.
    entry_value_search("elf-no-call-sites");
}
