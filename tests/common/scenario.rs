//! End-to-end checks of the scenario, shared by every host (Rust, C) and payload format
//! that supports them. Each runs a real debugger and panics with the full transcript on
//! failure. `args` are the host's options (e.g. `["--format", "elf"]`); `--source-dir` is
//! added by each check.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

/// A host binary plus its options, with a scratch directory for one check.
pub struct Host {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// GDB commands run first in every session of a check (live, attach, core), e.g.
    /// `jit-reader-load /abs/path/libjitreader.so` for compact payloads.
    pub gdb_prelude: Vec<String>,
}

impl Host {
    pub fn new(program: impl Into<PathBuf>, args: &[&str]) -> Host {
        Host {
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            gdb_prelude: Vec::new(),
        }
    }

    /// Adds GDB commands to run first in every session (see [`Host::gdb_prelude`]).
    pub fn with_gdb_prelude<S: Into<String>>(mut self, cmds: impl IntoIterator<Item = S>) -> Host {
        self.gdb_prelude.extend(cmds.into_iter().map(Into::into));
        self
    }

    /// The Rust test host with `--format FORMAT`.
    pub fn rust(format: &str) -> Host {
        Host::new(testhost(), &["--format", format])
    }

    /// Host options plus `--source-dir DIR`.
    pub fn args_in(&self, dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = self.args.iter().map(|s| s.to_string()).collect();
        v.push("--source-dir".into());
        v.push(dir.display().to_string());
        v
    }

    pub fn layout(&self, dir: &Path) -> Layout {
        let a = self.args_in(dir);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        Layout::of(&self.program, &a)
    }

    /// GDB on the host in `mode`.
    pub fn gdb(&self, dir: &Path, mode: &str) -> Gdb {
        let mut a = self.args_in(dir);
        a.push(mode.into());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        Gdb::program(&self.program, &a, dir).cmds(self.gdb_prelude.clone())
    }
}

/// The chain from JIT function `name` outwards.
pub fn chain_from(name: &str) -> &'static [&'static str] {
    let i = CHAIN
        .iter()
        .position(|c| *c == name)
        .expect("name in CHAIN");
    &CHAIN[i..]
}

/// Stopped in the native break function: `bt` names every JIT frame with its `file:line`
/// and reaches `main`. Returns the frames (for reports and comparisons).
pub fn backtrace(h: &Host, tag: &str) -> Vec<Frame> {
    let dir = TempDir::new(tag);
    let layout = h.layout(dir.path());
    let t = h
        .gdb(dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("bt", ["bt"])
        .run();
    let frames = assert_chain(&t, "bt", &CHAIN, &layout);
    eprintln!("backtrace seen:\n{}", t.section("bt"));
    frames
}

/// `break jit_middle` / `break jit_frameless` set before `run` (pending) stop there.
pub fn break_by_name(h: &Host, tag: &str) {
    let dir = TempDir::new(tag);
    let layout = h.layout(dir.path());
    let t = h
        .gdb(dir.path(), "run")
        .cmd("break jit_middle")
        .cmd("break jit_frameless")
        .cmd("run")
        .section("stop1", ["p/x $pc", "bt"])
        .cmd("continue")
        .section("stop2", ["p/x $pc", "bt"])
        .run();
    for (section, name) in [("stop1", "jit_middle"), ("stop2", "jit_frameless")] {
        let f = layout.get(name);
        let pc = t
            .section(section)
            .lines()
            .find_map(|l| l.split(" = ").nth(1).and_then(parse_hex))
            .unwrap_or_else(|| t.fail(&format!("no pc in section {section}")));
        if !f.contains(pc) {
            t.fail(&format!("stop {section} at {pc:#x} is not in {name}"));
        }
        assert_chain(&t, section, chain_from(name), &layout);
    }
}

/// `up` into the JIT caller, `frame function jit_middle`, `info frame`, `info args`, `list`.
pub fn up_info_frame_args_list(h: &Host, tag: &str, expect_args: bool) {
    let dir = TempDir::new(tag);
    let layout = h.layout(dir.path());
    let t = h
        .gdb(dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("up", ["up"])
        .section("frame", ["frame function jit_middle"])
        .section("info frame", ["info frame"])
        .section("info args", ["info args"])
        .section("list", ["list"])
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
    let fr = parse_gdb_bt(t.section("frame"));
    if !fr
        .first()
        .is_some_and(|f| f.is("jit_middle") && f.level == 4)
    {
        t.fail("`frame function jit_middle` did not select frame #4 jit_middle");
    }
    for needle in [
        "Stack level 4",
        "in jit_middle",
        "saved rip",
        "rbp at",
        "rip at",
    ] {
        t.assert_contains(Some("info frame"), needle);
    }
    if expect_args {
        t.assert_contains(Some("info args"), "n = 40");
    } else {
        eprintln!(
            "info args (not expected to work here):\n{}",
            t.section("info args")
        );
    }
    // `list` shows the pseudo source around the call in jit_middle (line 8): the real file,
    // or what GDB shows without it.
    assert_listing(&t, "list", &layout.get("jit_middle").file, 8);
}

/// Section `section` lists line `line` of the registered source `file` as GDB can: its text
/// when the file is on disk; without it, the reader's placeholder (compact payloads) or
/// GDB's own "No such file" / "in FILE" (ELF payloads, where GDB has no crash to avoid).
#[track_caller]
pub fn assert_listing(t: &Transcript, section: &str, file: &str, line: usize) {
    let listed = t.section(section);
    let base = file.rsplit('/').next().unwrap_or(file);
    let ok = match std::fs::read_to_string(file) {
        Ok(src) => listed.contains(&format!("{line}\t{}", src.lines().nth(line - 1).unwrap())),
        Err(_) => {
            listed.contains(&format!("{line}\t{base}:{line}: source not available"))
                || listed.contains(&format!("{file}: No such file or directory"))
                || listed.contains(&format!("\tin {file}"))
        }
    };
    if !ok {
        t.fail(&format!(
            "section `{section}` does not list line {line} of {file}"
        ));
    }
}

/// `finish` out of the native break function returns into the JIT caller `jit_second`, at
/// the instruction after its call.
pub fn finish(h: &Host, tag: &str) {
    let dir = TempDir::new(tag);
    let layout = h.layout(dir.path());
    let t = h
        .gdb(dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("finish", ["finish"])
        .section("after", ["p/x $pc", "bt"])
        .run();
    t.assert_contains(Some("finish"), "Value returned");
    let second = layout.get("jit_second");
    let pc = t
        .section("after")
        .lines()
        .find_map(|l| l.split(" = ").nth(1).and_then(parse_hex))
        .unwrap_or_else(|| t.fail("no pc after finish"));
    // The return address: an instruction boundary inside jit_second, right after a call.
    if !second.contains(pc) || !second.insns.contains(&(pc - second.start)) {
        t.fail(&format!(
            "finish returned to {pc:#x}, not an instruction of jit_second"
        ));
    }
    // The stop location line (`jit_second () at FILE:LINE`) names the JIT caller.
    t.assert_contains(Some("finish"), "jit_second (");
    assert_chain(&t, "after", chain_from("jit_second"), &layout);
}

/// After unregistering, GDB no longer knows the functions.
pub fn unregister(h: &Host, tag: &str) {
    let dir = TempDir::new(tag);
    let layout = h.layout(dir.path());
    let infos: Vec<String> = JIT_FUNCTIONS
        .iter()
        .map(|n| format!("info symbol {:#x}", layout.get(n).start))
        .collect();
    let t = h
        .gdb(dir.path(), "unregister")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("registered bt", ["bt"])
        .section("registered symbols", infos.clone())
        .cmd("continue")
        .section("unregistered symbols", infos)
        .cmd("continue")
        .section("unregistered bt", ["bt"])
        .cmd("continue")
        .section("end", ["info inferiors"])
        .run();
    assert_chain(&t, "registered bt", &CHAIN, &layout);
    for n in JIT_FUNCTIONS {
        t.assert_contains(Some("registered symbols"), &format!("{n} in section"));
    }
    let gone = t.section("unregistered symbols");
    if gone.matches("No symbol matches").count() != JIT_FUNCTIONS.len() {
        t.fail("after unregistering, `info symbol` still resolves JIT addresses");
    }
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
    t.assert_contains(None, "unregistered");
    t.assert_contains(None, "exited normally");
}

/// `stepi` (`nexti` over calls) through every instruction of JIT function `name`, prologue
/// and epilogue included: at each one the pc is that instruction and `bt` is right.
pub fn step_every_instruction(h: &Host, tag: &str, name: &str) {
    step_every_instruction_watching(h, tag, name, None);
}

/// A variable to print at every step from instruction `from` on, and its expected value.
pub struct Watch {
    pub expr: &'static str,
    pub value: &'static str,
    pub from: usize,
}

/// `step_every_instruction`, also printing `watch.expr` at every instruction from
/// `watch.from` on (epilogue included), which must show `watch.value`.
pub fn step_every_instruction_watching(h: &Host, tag: &str, name: &str, watch: Option<Watch>) {
    let dir = TempDir::new(tag);
    let layout = h.layout(dir.path());
    let f = layout.get(name).clone();
    // The code is mapped and registered before run_jit runs: an address breakpoint set
    // there can be inserted.
    let mut g = h
        .gdb(dir.path(), "run")
        .cmd("break run_jit")
        .cmd("run")
        .cmd(format!("break *{:#x}", f.start))
        .cmd("continue")
        .cmd("delete");
    for i in 0..f.insns.len() {
        g = g.section(&format!("insn {i}"), ["p/x $pc", "bt"]);
        if let Some(w) = watch.as_ref().filter(|w| i >= w.from) {
            g = g.section(&format!("watch {i}"), [format!("print {}", w.expr)]);
        }
        if i + 1 < f.insns.len() {
            g = g.cmd("nexti");
        }
    }
    let t = g.run();
    for (i, off) in f.insns.iter().enumerate() {
        let s = format!("insn {i}");
        let pc = t
            .section(&s)
            .lines()
            .find_map(|l| l.split(" = ").nth(1).and_then(parse_hex))
            .unwrap_or_else(|| t.fail(&format!("no pc in section {s}")));
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
        if let Some(w) = watch.as_ref().filter(|w| i >= w.from) {
            let printed = t.section(&format!("watch {i}"));
            let value = printed
                .lines()
                .find_map(|l| l.strip_prefix('$')?.split_once(" = ").map(|x| x.1.trim()));
            if value != Some(w.value) {
                t.fail(&format!(
                    "{s} ({name}+{off}): `print {}` shows {printed:?}, expected {}",
                    w.expr, w.value
                ));
            }
        }
    }
}

/// Attach to a waiting host: GDB sees the JIT frames; `gcore` writes a core file whose
/// backtrace is the same.
pub fn attach_and_gcore(h: &Host, tag: &str) {
    let dir = TempDir::new(tag);
    let layout = h.layout(dir.path());
    let a = h.args_in(dir.path());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let host = WaitingHost::start(&h.program, &a, dir.path());
    let core = dir.join("gcore.core");
    let live = Gdb::attach(host.pid, dir.path())
        .cmds(h.gdb_prelude.clone())
        .section("bt", ["bt"])
        .section("gcore", [format!("gcore {}", core.display())])
        .cmd("detach")
        .run();
    let live_frames = assert_chain(&live, "bt", &CHAIN, &layout);
    eprintln!("attach backtrace:\n{}", live.section("bt"));
    drop(host);
    if !core.exists() {
        live.fail("gcore wrote no core file");
    }
    let post = Gdb::core(&h.program, &core, dir.path())
        .cmds(h.gdb_prelude.clone())
        .section("bt", ["bt"])
        .run();
    let core_frames = assert_chain(&post, "bt", &CHAIN, &layout);
    same_backtrace(&live_frames, &core_frames, &post);
}

/// The frames from `jit_test_break_here` / the crash site on must agree.
fn same_backtrace(live: &[Frame], core: &[Frame], t: &Transcript) {
    let l: Vec<_> = live.iter().map(Frame::location).collect();
    let c: Vec<_> = core.iter().map(Frame::location).collect();
    if l != c {
        t.fail(&format!(
            "the core file's backtrace differs from the live one\nlive: {l:#?}\ncore: {c:#?}"
        ));
    }
}

/// SIGSEGV inside JIT code: the live stop and the core dump give the same backtrace. The
/// core comes from the kernel (RLIMIT_CORE raised in the child, run in a scratch directory);
/// if core_pattern pipes cores to a program, from GDB's `generate-core-file` at the stop.
pub fn crash_core(h: &Host, tag: &str) {
    let dir = TempDir::new(tag);
    let layout = h.layout(dir.path());
    let crash_chain = chain_from("jit_second");
    let gcore = dir.join("gdb-generated.core");
    let live = h
        .gdb(dir.path(), "crash")
        .cmd("run")
        .section("bt", ["bt"])
        .section("gcore", [format!("generate-core-file {}", gcore.display())])
        .run();
    live.assert_contains(None, "SIGSEGV");
    let live_frames = assert_chain(&live, "bt", crash_chain, &layout);
    if !live_frames[0].is("jit_second") {
        live.fail("the fault is not in jit_second");
    }

    let core = kernel_core(h, dir.path(), gcore);
    let post = Gdb::core(&h.program, &core, dir.path())
        .cmds(h.gdb_prelude.clone())
        .section("bt", ["bt"])
        .run();
    post.assert_contains(None, "SIGSEGV");
    let core_frames = assert_chain(&post, "bt", crash_chain, &layout);
    same_backtrace(&live_frames, &core_frames, &post);
    eprintln!(
        "core backtrace ({}):\n{}",
        core.display(),
        post.section("bt")
    );
}

/// One frame of an LLDB backtrace.
#[derive(Debug)]
pub struct LldbFrame {
    pub function: String,
    pub location: Option<String>,
    pub raw: String,
}

pub fn parse_lldb_bt(text: &str) -> Vec<LldbFrame> {
    let mut v = Vec::new();
    for raw in text.lines() {
        if !raw
            .trim_start()
            .trim_start_matches('*')
            .trim_start()
            .starts_with("frame #")
        {
            continue;
        }
        // `frame #1: 0x... module`function + 20 at file:line` or `frame #1: 0x... function`
        let after_colon = raw.split_once(": ").map_or("", |x| x.1);
        let rest = after_colon.split_once(' ').map_or("", |x| x.1);
        let sym = rest.split_once('`').map_or(rest, |x| x.1);
        let end = sym.find(['(', ' ']).unwrap_or(sym.len());
        let function = sym[..end].to_string();
        let location = sym.rsplit_once(" at ").map(|x| x.1.to_string());
        v.push(LldbFrame {
            function,
            location,
            raw: raw.to_string(),
        });
    }
    v
}

/// LLDB's `bt` at the native break function shows every JIT frame by name (ELF payloads).
/// Asserts the names; reports whether LLDB also shows the JIT frames' source lines.
pub fn lldb_backtrace(h: &Host, tag: &str) {
    let dir = TempDir::new(tag);
    let mut a = h.args_in(dir.path());
    a.push("run".into());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let cmds: Vec<String> = [
        "settings set plugin.jit-loader.gdb.enable on",
        "breakpoint set -n jit_test_break_here",
        "run",
        "bt",
        "kill",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let t = lldb(&h.program, &a, &cmds, dir.path());
    let layout = Layout::parse(&t.text);
    // Only the output of the `bt` command (the stop report before it shows frame #0 too).
    let Some(bt_at) = t.text.find("(lldb) bt\n") else {
        t.fail("no `bt` in LLDB's output")
    };
    let bt_text = &t.text[bt_at + 10..];
    let bt_text = &bt_text[..bt_text.find("(lldb) ").unwrap_or(bt_text.len())];
    let frames = parse_lldb_bt(bt_text);
    let names: Vec<&str> = frames.iter().map(|f| f.function.as_str()).collect();
    let short = |n: &str| n.rsplit("::").next().unwrap_or(n).to_string();
    let start = names
        .iter()
        .position(|n| short(n) == CHAIN[0])
        .unwrap_or_else(|| t.fail("LLDB did not stop in jit_test_break_here"));
    for (k, want) in CHAIN.iter().enumerate() {
        match names.get(start + k) {
            Some(n) if short(n) == *want => {}
            other => t.fail(&format!(
                "LLDB frame {} is {other:?}, expected {want}",
                start + k
            )),
        }
    }
    if !names.iter().any(|n| short(n).starts_with("main")) {
        t.fail("LLDB's backtrace does not reach main");
    }
    // The declared parameter of jit_middle (a frame slot, given relative to the CFA).
    if !bt_text.contains("jit_middle(n=40)") {
        t.fail("LLDB does not show jit_middle's parameter as n=40");
    }
    // Lines: LLDB is not required to show them, but a line it shows must be right.
    let mut report = String::from("LLDB JIT frames:\n");
    for f in &frames[start..start + CHAIN.len()] {
        if !JIT_FUNCTIONS.contains(&f.function.as_str()) {
            continue;
        }
        report.push_str(&format!(
            "  {} -> {}\n",
            f.function,
            f.location.as_deref().unwrap_or("NO LINE INFO")
        ));
        let Some(loc) = &f.location else { continue };
        let info = layout.get(&f.function);
        let pc = f
            .raw
            .split_once(": ")
            .and_then(|x| parse_hex(x.1.split(' ').next().unwrap_or("")))
            .unwrap_or_else(|| t.fail(&format!("no pc in {}", f.raw)));
        let want = format!(
            "{}:{}",
            info.file.rsplit('/').next().unwrap(),
            info.line_at(pc - 1).unwrap_or(0)
        );
        if !loc.starts_with(&want) {
            t.fail(&format!(
                "LLDB shows {} at {loc}, expected {want}",
                f.function
            ));
        }
    }
    eprintln!("{report}\nfull LLDB backtrace:\n{}", t.text);
}

/// A kernel core of the host's `crash` mode in `dir` (or GDB's own core when the kernel
/// pipes cores to a program).
pub fn kernel_core(h: &Host, dir: &Path, fallback: PathBuf) -> PathBuf {
    let pattern = core_pattern().unwrap_or_default();
    if pattern.starts_with('|') {
        eprintln!("core_pattern is a pipe ({pattern}): using GDB's generate-core-file core");
        return fallback;
    }
    let a = h.args_in(dir);
    let mut script = String::from("ulimit -c unlimited && exec \"$0\"");
    for i in 0..a.len() {
        script.push_str(&format!(" \"${}\"", i + 1));
    }
    script.push_str(" crash");
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .arg(&h.program)
        .args(&a)
        .current_dir(dir)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "the host did not die of SIGSEGV: {out:?}"
    );
    let core_dir = if pattern.contains('/') {
        Path::new(&pattern).parent().unwrap().to_path_buf()
    } else {
        dir.to_path_buf()
    };
    find_core(&core_dir).unwrap_or_else(|| {
        panic!(
            "no kernel core file in {} (core_pattern `{pattern}`)",
            core_dir.display()
        )
    })
}
