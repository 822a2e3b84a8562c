//! Frame-pointer functions registered without their epilogues (as JITs that describe only
//! the prologue register them, cranelift among them), stepped through instruction by
//! instruction in GDB: at every instruction, the compact reader's backtrace must name the
//! right callers and equal the backtrace GDB makes for the same registration as ELF (where
//! GDB's own amd64 epilogue unwinder handles the `ret`; GDB 16 runs it only because the unit's
//! `DW_AT_producer` asks for it, see docs/DESIGN.md). The host (`reader_testhost
//! epilogues`) runs real machine code: `jit_epi_outer` calls `jit_epi_pop` (`add rsp, 16;
//! pop rbp; ret`), `jit_epi_leave` (`leave; ret`) and `jit_epi_mov` (`mov rsp, rbp; pop
//! rbp; ret`), then ends with `pop rbp; ret` itself. One GDB session per format.

mod common;
mod reader_support;

use std::path::Path;
use std::process::Command;

use common::*;
use reader_support::*;

const CALLEES: [&str; 3] = ["jit_epi_pop", "jit_epi_leave", "jit_epi_mov"];
const OUTER: &str = "jit_epi_outer";

/// One stop of the walk: its section name, the expected pc, the expected chain of callers.
struct Stop {
    section: String,
    pc: u64,
    chain: Vec<&'static str>,
}

/// The host's layout, from a run outside GDB (the code addresses are fixed).
fn layout(dir: &Path) -> Layout {
    let out = Command::new(reader_testhost())
        .args(["--source-dir", &dir.display().to_string(), "epilogues"])
        .output()
        .expect("run reader_testhost");
    assert!(out.status.success(), "reader_testhost epilogues: {out:?}");
    Layout::parse(&String::from_utf8_lossy(&out.stdout))
}

/// Every instruction of each callee (broken on at its first), then, after the last
/// callee's `ret`, the caller's own `pop rbp` and `ret`.
fn walk(layout: &Layout) -> Vec<Stop> {
    let mut stops = Vec::new();
    for name in CALLEES {
        let f = layout.get(name);
        for (i, off) in f.insns.iter().enumerate() {
            stops.push(Stop {
                section: format!("{name} {i}"),
                pc: f.start + off,
                chain: vec![name, OUTER, "reader_host_run"],
            });
        }
    }
    let outer = layout.get(OUTER);
    // The last two instructions: `pop rbp`, `ret`.
    for off in &outer.insns[outer.insns.len() - 2..] {
        stops.push(Stop {
            section: format!("{OUTER} +{off}"),
            pc: outer.start + off,
            chain: vec![OUTER, "reader_host_run"],
        });
    }
    stops
}

/// GDB on the host registering `format`, walking `stops`.
fn session(dir: &Path, layout: &Layout, format: &str) -> Transcript {
    let d = dir.display().to_string();
    let mut g = Gdb::program(
        &reader_testhost(),
        &["--source-dir", &d, "epilogues", format],
        dir,
    )
    .cmd(load_cmd())
    .cmd("break reader_host_run")
    .cmd("run")
    .cmd("delete");
    for name in CALLEES {
        g = g.cmd(format!("break *{:#x}", layout.get(name).start));
    }
    for name in CALLEES {
        g = g.cmd("continue");
        let n = layout.get(name).insns.len();
        for i in 0..n {
            g = g.section(&format!("{name} {i}"), ["p/x $pc", "bt"]);
            if i + 1 < n {
                g = g.cmd("stepi");
            }
        }
    }
    let outer = layout.get(OUTER);
    for off in &outer.insns[outer.insns.len() - 2..] {
        g = g
            .cmd("stepi")
            .section(&format!("{OUTER} +{off}"), ["p/x $pc", "bt"]);
    }
    g.cmd("continue").run()
}

/// The frames of a stop are `chain` from #0 on, then native frames down to `main`, none
/// unknown; JIT frames carry their file and line.
fn check_stop(t: &Transcript, stop: &Stop) -> Vec<Frame> {
    // The session's own layout: its source file is in its own directory.
    let layout = &Layout::parse(&t.text);
    let s = &stop.section;
    let pc = hex_value(t, s);
    if pc != stop.pc {
        t.fail(&format!("{s}: pc {pc:#x}, expected {:#x}", stop.pc));
    }
    let frames = t.gdb_bt(s);
    let names: Vec<&str> = frames.iter().map(|f| f.function.as_str()).collect();
    let fail = |why: &str| t.fail(&format!("{s}: {why}; backtrace {names:?}"));
    for (k, want) in stop.chain.iter().enumerate() {
        if !frames.get(k).is_some_and(|f| f.is(want)) {
            fail(&format!("frame #{k} is not {want}"));
        }
        if want.starts_with("jit_") {
            if let Err(e) = check_jit_frame(&frames[k], layout) {
                fail(&e);
            }
        }
    }
    if frames.iter().any(|f| f.function == "??") {
        fail("an unknown frame");
    }
    if !frames.last().is_some_and(|f| f.function.ends_with("main")) {
        fail("the backtrace does not reach main");
    }
    frames
}

#[test]
fn undeclared_epilogues_compact_bt_equals_elf_bt_at_every_instruction() {
    if !require_tool("gdb", "reader_epilogues") {
        return;
    }
    let dir = TempDir::new("reader-epilogues");
    let layout = layout(dir.path());
    for name in CALLEES.iter().chain([&OUTER]) {
        assert_eq!(
            layout.get(name).frame,
            "fp",
            "{name} is a frame-pointer function"
        );
    }
    let stops = walk(&layout);
    // The two sessions are independent: run them side by side, each in a directory of its
    // own (the host writes its source file there).
    let (cdir, edir) = (dir.join("compact"), dir.join("elf"));
    for d in [&cdir, &edir] {
        std::fs::create_dir_all(d).expect("session directory");
    }
    let (compact, elf) = std::thread::scope(|s| {
        let c = s.spawn(|| session(&cdir, &layout, "compact"));
        let e = s.spawn(|| session(&edir, &layout, "elf"));
        (c.join().unwrap(), e.join().unwrap())
    });
    for t in [&compact, &elf] {
        assert_no_reader_noise(t);
        t.assert_not_contains(None, "jit-reader: backtrace ends");
        t.assert_contains(None, "exited normally");
    }
    for stop in &stops {
        let c = check_stop(&compact, stop);
        let e = check_stop(&elf, stop);
        // Same frames: function, pc of caller frames, file and line.
        let key = |fs: &[Frame]| -> Vec<_> { fs.iter().map(|f| (f.pc, f.location())).collect() };
        if key(&c) != key(&e) {
            compact.fail(&format!(
                "{}: the compact backtrace differs from the ELF one:\n{}\n--- ELF:\n{}",
                stop.section,
                compact.section(&stop.section),
                elf.section(&stop.section)
            ));
        }
    }
}
