//! aarch64 end to end (issue 27): the aarch64 test host (`testhosts/src/bin/aarch64_testhost.rs`,
//! real aarch64 machine code compiled at run time), cross-built and run under qemu-user, debugged
//! live by gdb-multiarch over qemu's gdbstub, in both payload formats: compact records read by
//! our x86-64 reader plugin (which must unwind with aarch64's DWARF registers), and ELF read
//! by GDB alone (our EM_AARCH64 CFI). Per format two GDB sessions: a backtrace from native code
//! through the JIT frames, `frame`, `finish` and the disassembly of the JIT code (which checks
//! the host's hand-made encodings against GDB's disassembler); then `stepi` through every
//! instruction of the JIT functions with a backtrace at each.
//!
//!
//! Then the demo JIT emitting aarch64: the aarch64 build of `jit-gdb` runs scripts under
//! qemu (their values checked), and `jit-gdb demo --arch aarch64` shows the backtrace through
//! the script's frames (compact records) and stops at the fault of `--crash` in the JIT code
//! (ELF), one GDB session each.
//!
//! Needs `qemu-aarch64`, `gdb-multiarch`, `aarch64-linux-gnu-gcc` (Debian: qemu-user
//! gdb-multiarch gcc-aarch64-linux-gnu libc6-dev-arm64-cross) and the Rust target
//! (`rustup target add aarch64-unknown-linux-gnu`); skipped with a message without them,
//! failed in CI (as [`common::require_tool`]).

mod common;
mod reader_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::*;

const TARGET: &str = "aarch64-unknown-linux-gnu";
const SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// Are the tools and the Rust target there? (Prints why not, or fails in CI.)
fn have_everything(test: &str) -> bool {
    for tool in ["qemu-aarch64", "gdb-multiarch", "aarch64-linux-gnu-gcc"] {
        if !require_tool(tool, test) {
            return false;
        }
    }
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let installed = sysroot.is_some_and(|s| s.join("lib/rustlib").join(TARGET).is_dir());
    if !installed {
        let ci = ["CI", "JIT_GDB_REQUIRE_TOOLS"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty() && x != "0"));
        assert!(
            !ci,
            "{test}: the Rust target {TARGET} is not installed (rustup target add {TARGET})"
        );
        eprintln!("SKIPPED {test}: the Rust target {TARGET} is not installed (rustup target add {TARGET})");
        return false;
    }
    true
}

/// The aarch64 test host, cross-built (once per test binary) into `target/aarch64-tests`.
fn host_program() -> &'static Path {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| cross_build("jit-gdb-testhosts", "aarch64_testhost"))
}

/// The aarch64 build of `jit-gdb` itself (its demo JIT emits aarch64 code), cross-built
/// once per test binary.
fn jit_gdb_aarch64() -> &'static Path {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| cross_build("jit-gdb", "jit-gdb"))
}

/// `cargo build -p PACKAGE --bin BIN --target aarch64-unknown-linux-gnu` in the test's
/// profile, into `target/aarch64-tests`; returns the program.
fn cross_build(package: &str, bin: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps")
        .join("aarch64-tests");
    let profile = test_profile();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["build", "--quiet", "-p", package, "--bin", bin])
        .args(["--target", TARGET, "--target-dir"])
        .arg(&target)
        .env(
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
            "aarch64-linux-gnu-gcc",
        )
        // jit-gdb's build script compiles the C example with the cc crate.
        .env("CC_aarch64_unknown_linux_gnu", "aarch64-linux-gnu-gcc")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        p => {
            cmd.args(["--profile", p]);
        }
    }
    let out = cmd.output().expect("run cargo");
    assert!(
        out.status.success(),
        "cross-building {bin} for aarch64 failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join(TARGET).join(&profile).join(bin)
}

/// One JIT function as the host printed it.
#[derive(Debug, Clone)]
struct Fn {
    name: String,
    start: u64,
    insns: Vec<u64>,
}

/// The host's layout: its `jit-fn` lines, from a plain run under qemu (which also checks
/// that the JIT code computes what it should).
fn layout(dir: &Path, format: &str) -> Vec<Fn> {
    let out = Command::new("qemu-aarch64")
        .args(["-L", SYSROOT])
        .arg(host_program())
        .args(["--format", format, "--source-dir"])
        .arg(dir)
        .output()
        .expect("run qemu-aarch64");
    let text = String::from_utf8_lossy(&out.stdout);
    // `result=R expected=E`: what the JIT code computed, and what the host computed.
    let agree = text
        .lines()
        .find_map(|l| l.strip_prefix("aarch64-testhost: result="))
        .and_then(|r| r.split_once(" expected="))
        .is_some_and(|(got, want)| got == want);
    assert!(
        out.status.success() && agree,
        "the aarch64 host failed under qemu: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("registered 3 aarch64 functions"), "{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("jit-fn "))
        .map(|l| {
            let field = |k: &str| {
                l.split(' ')
                    .find_map(|w| w.strip_prefix(&format!("{k}=")))
                    .unwrap_or_else(|| panic!("no {k}= in {l}"))
            };
            Fn {
                name: field("name").into(),
                start: parse_hex(field("start")).expect("start"),
                insns: field("insns")
                    .split(',')
                    .map(|o| o.parse().expect("offset"))
                    .collect(),
            }
        })
        .collect()
}

fn find<'a>(fns: &'a [Fn], name: &str) -> &'a Fn {
    fns.iter().find(|f| f.name == name).expect(name)
}

/// The host under qemu waiting for a debugger on a Unix socket in `dir`; killed on drop.
struct Qemu {
    child: Child,
    socket: PathBuf,
}

impl Qemu {
    fn start(dir: &Path, format: &str) -> Qemu {
        let socket = dir.join("gdbstub.sock");
        let child = Command::new("qemu-aarch64")
            .args(["-L", SYSROOT, "-g"])
            .arg(&socket)
            .arg(host_program())
            .args(["--format", format, "--source-dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start qemu-aarch64");
        // qemu creates the socket before it waits for the debugger.
        for _ in 0..200 {
            if socket.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        assert!(socket.exists(), "qemu made no gdbstub socket");
        Qemu { child, socket }
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// gdb-multiarch connected to `q`, the host's symbols loaded, then `commands` (each an
/// `-ex`, so an error in one does not stop the others); the reader loaded first if asked.
fn gdb(q: &Qemu, dir: &Path, reader: bool, commands: &[String]) -> Transcript {
    let mut all = vec![
        format!("file {}", host_program().display()),
        format!("target remote {}", q.socket.display()),
    ];
    all.extend_from_slice(commands);
    gdb_run(dir, reader, &all)
}

/// gdb-multiarch for aarch64 programs: `commands` (each an `-ex`), after loading the reader
/// if asked.
fn gdb_run(dir: &Path, reader: bool, commands: &[String]) -> Transcript {
    let mut cmd = Command::new("gdb-multiarch");
    cmd.arg("-batch").arg("-nx");
    for p in GDB_PRELUDE {
        cmd.arg("-iex").arg(p);
    }
    cmd.args(["-iex", &format!("set sysroot {SYSROOT}")])
        .args(["-iex", "set libthread-db-search-path /nonexistent"]);
    if reader {
        // Its debug lines show which frames the reader itself unwound.
        cmd.env("JIT_READER_DEBUG", "1")
            .args(["-ex", &reader_support::load_cmd()]);
    }
    for c in commands {
        cmd.arg("-ex").arg(c);
    }
    cmd.current_dir(dir);
    run_captured(cmd, dir)
}

/// The frames of a backtrace in `text`, each as (function without Rust path, pc if shown).
fn frames(text: &str) -> Vec<(String, Option<u64>)> {
    parse_gdb_bt(text)
        .into_iter()
        .map(|f| {
            let name = f.function.rsplit("::").next().unwrap_or("").to_string();
            (name, f.pc)
        })
        .collect()
}

/// Checks the backtrace in section `name` starts with `chain` and reaches `main`, with no
/// unknown frame.
#[track_caller]
fn check_bt(t: &Transcript, name: &str, chain: &[&str]) -> Vec<(String, Option<u64>)> {
    let got = frames(t.section(name));
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    if names.len() < chain.len() || names[..chain.len()] != *chain {
        t.fail(&format!(
            "section {name}: backtrace {names:?} does not start with {chain:?}"
        ));
    }
    if names.contains(&"??") || names.last() != Some(&"main") {
        t.fail(&format!(
            "section {name}: backtrace {names:?} has an unknown frame or does not reach main"
        ));
    }
    got
}

fn bt_frame_finish_and_code(format: &str) {
    let test = &format!("aarch64_{format}_bt");
    if !have_everything(test) {
        return;
    }
    let dir = TempDir::new(&format!("a64-{format}"));
    let fns = layout(dir.path(), format);
    let (leaf, middle, outer) = (
        find(&fns, "jit_leaf"),
        find(&fns, "jit_middle"),
        find(&fns, "jit_outer"),
    );
    let q = Qemu::start(dir.path(), format);
    let mut cmds = vec![
        "break jit_test_break_here".to_string(),
        "continue".into(),
        mark("bt"),
        "bt".into(),
        mark("frame1"),
        "frame 1".into(),
        "info frame".into(),
        mark("finish"),
        "finish".into(),
        mark("bt-after-finish"),
        "bt".into(),
        mark("code"),
        format!("x/{}i {:#x}", leaf.insns.len(), leaf.start),
        format!("x/{}i {:#x}", middle.insns.len(), middle.start),
        format!("x/{}i {:#x}", outer.insns.len(), outer.start),
        mark("end"),
        "kill".into(),
    ];
    if format == "elf" {
        // Breaking by JIT name: GDB's own symbol tables hold ELF payloads' functions.
        cmds.splice(
            0..2,
            [
                "break jit_middle".to_string(),
                "break jit_test_break_here".into(),
                "continue".into(),
                mark("by-name"),
                "bt 1".into(),
                "continue".into(),
            ],
        );
    }
    let t = gdb(&q, dir.path(), format == "compact", &cmds);
    if std::env::var_os("JIT_GDB_SHOW").is_some() {
        println!("{}", t.text);
    }
    if format == "elf" {
        // Stopped in jit_middle, past its prologue (GDB skips to the second line row).
        let stop = frames(t.section("by-name"));
        if stop.first().map(|(n, _)| n.as_str()) != Some("jit_middle") {
            t.fail(&format!("`break jit_middle` stopped elsewhere: {stop:x?}"));
        }
    }
    let bt = check_bt(
        &t,
        "bt",
        &["jit_test_break_here", "jit_middle", "jit_outer", "run_jit"],
    );
    // The return addresses: just after each blr.
    let after_call = |f: &Fn, pc: u64| f.insns.iter().any(|&o| f.start + o == pc);
    assert!(bt[1].1.is_some_and(|pc| after_call(middle, pc)), "{bt:x?}");
    assert!(bt[2].1.is_some_and(|pc| after_call(outer, pc)), "{bt:x?}");
    // Source lines from the payload's line table.
    t.assert_contains(Some("bt"), "jit_middle () at ");
    t.assert_contains(Some("bt"), "jit_aarch64.jit:6");
    t.assert_contains(Some("bt"), "jit_aarch64.jit:9");
    t.assert_contains(Some("frame1"), "#1  ");
    t.assert_contains(
        Some("frame1"),
        "return jit_test_break_here(n + 3 + *p) + 1;",
    );
    t.assert_contains(Some("frame1"), "caller of frame at");
    // `finish` out of the selected frame 1 (jit_middle) runs until it returns into its
    // caller: the breakpoint at the return address the unwinder gave.
    t.assert_contains(Some("finish"), "in jit_outer ()");
    let back = check_bt(&t, "bt-after-finish", &["jit_outer", "run_jit"]);
    assert_eq!(back[0].1, bt[2].1, "finish returned to frame 2's pc");
    // GDB's disassembler reads the emitter's words as the instructions meant.
    let code = t.section("code");
    for want in [
        "add\tx0, x0, #0x5",
        "stp\tx29, x30, [sp, #-16]!",
        "mov\tx29, sp",
        "blr\tx16",
        "ldp\tx29, x30, [sp], #16",
        "ret",
    ] {
        if !code.contains(want) {
            t.fail(&format!("the disassembly lacks `{want}`"));
        }
    }
}

/// The pcs `stepi` visits from `jit_outer`'s entry until it returns, and the command that
/// leaves each (nexti over `jit_middle`'s call of native code), from the disassembly:
/// (pc, function, command).
fn step_plan(fns: &[Fn], code: &str) -> Vec<(u64, &'static str, &'static str)> {
    let (leaf, middle, outer) = (
        find(fns, "jit_leaf"),
        find(fns, "jit_middle"),
        find(fns, "jit_outer"),
    );
    let is_blr = |pc: u64| {
        code.lines()
            .any(|l| l.contains(&format!("{pc:#x}")) && l.contains("blr\t"))
    };
    let mut plan = Vec::new();
    let mut calls = 0;
    for &o in &outer.insns {
        let pc = outer.start + o;
        plan.push((pc, "jit_outer", "stepi"));
        if is_blr(pc) {
            let (callee, name) = if calls == 0 {
                (leaf, "jit_leaf")
            } else {
                (middle, "jit_middle")
            };
            calls += 1;
            for &c in &callee.insns {
                let cpc = callee.start + c;
                let step = if name == "jit_middle" && is_blr(cpc) {
                    "nexti"
                } else {
                    "stepi"
                };
                plan.push((cpc, name, step));
            }
        }
    }
    assert_eq!(calls, 2, "jit_outer calls jit_leaf and jit_middle:\n{code}");
    plan
}

fn stepi_through_every_instruction(format: &str) {
    let test = &format!("aarch64_{format}_stepi");
    if !have_everything(test) {
        return;
    }
    let dir = TempDir::new(&format!("a64-step-{format}"));
    let fns = layout(dir.path(), format);
    // The disassembly, for where the calls are (a first session).
    let q = Qemu::start(dir.path(), format);
    let mut cmds = vec![
        "break jit_test_break_here".to_string(),
        "continue".into(),
        mark("code"),
    ];
    for f in &fns {
        cmds.push(format!("x/{}i {:#x}", f.insns.len(), f.start));
    }
    cmds.extend([mark("end"), "kill".into()]);
    let t = gdb(&q, dir.path(), format == "compact", &cmds);
    drop(q);
    let plan = step_plan(&fns, t.section("code"));

    let outer = find(&fns, "jit_outer");
    let q = Qemu::start(dir.path(), format);
    let mut cmds = vec![
        format!("break *{:#x}", outer.start),
        "continue".into(),
        "delete".into(),
    ];
    for (i, (_, _, step)) in plan.iter().enumerate() {
        cmds.extend([mark(&format!("at-{i}")), "bt".into(), step.to_string()]);
    }
    cmds.extend([mark("returned"), "bt".into(), mark("end"), "kill".into()]);
    let t = gdb(&q, dir.path(), format == "compact", &cmds);
    if std::env::var_os("JIT_GDB_SHOW").is_some() {
        println!("{}", t.text);
    }
    for (i, &(pc, func, _)) in plan.iter().enumerate() {
        let name = format!("at-{i}");
        let chain: &[&str] = if func == "jit_outer" {
            &["jit_outer", "run_jit"]
        } else {
            &[func, "jit_outer", "run_jit"]
        };
        let got = check_bt(&t, &name, chain);
        // The innermost frame is where the plan says (GDB shows its pc unless it is at the
        // start of a line).
        if let Some(shown) = got[0].1 {
            if shown != pc {
                t.fail(&format!("{name}: at {shown:#x}, expected {pc:#x} ({func})"));
            }
        }
    }
    check_bt(&t, "returned", &["run_jit"]);
    if format == "compact" {
        // The frames were the reader's to unwind (not GDB's aarch64 prologue analyser's),
        // at the entry (return address in x30) and inside frame records.
        for f in ["jit_leaf", "jit_middle", "jit_outer"] {
            t.assert_contains(None, &format!("unwound {f} at pc"));
        }
        t.assert_contains(None, &format!("unwound jit_outer at pc {:#x}", outer.start));
        t.assert_not_contains(None, "declined the frame");
    }
}

/// The host crashing in JIT code under qemu (`jit_middle` reads through a NULL pointer),
/// then GDB on qemu's core of it: the backtrace from the faulting instruction.
fn postmortem(format: &str) {
    let test = &format!("aarch64_{format}_core");
    if !have_everything(test) {
        return;
    }
    let dir = TempDir::new(&format!("a64-core-{format}"));
    let fns = layout(dir.path(), format);
    let prog = host_program();
    // qemu writes the guest's core itself (qemu_PROG_DATE_PID.core, in the working
    // directory) if the core limit allows; the kernel's core of qemu is kept small.
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -c unlimited; echo 0 > /proc/self/coredump_filter; exec qemu-aarch64 -L {SYSROOT} '{}' --format {format} --crash --source-dir '{}'",
            prog.display(),
            dir.path().display()
        ))
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run qemu-aarch64");
    assert!(!status.success(), "the host did not crash: {status}");
    let core = std::fs::read_dir(dir.path())
        .expect("read the test directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("qemu_") && n.ends_with(".core"))
        })
        .unwrap_or_else(|| panic!("qemu wrote no core in {}", dir.path().display()));
    // qemu's cores leave out the program's ELF header pages, so GDB cannot relocate a PIE
    // program by itself: the load bias is AT_ENTRY (from the core's auxv) minus the
    // program's e_entry. Then the core is loaded again, for GDB's JIT interface to read
    // the registrations with the symbols in place.
    let script = dir.join("bias.py");
    std::fs::write(
        &script,
        format!(
            "import gdb, re, struct\n\
             aux = gdb.execute('info auxv', to_string=True)\n\
             entry = int(re.search(r'AT_ENTRY\\s.*\\s(0x[0-9a-f]+)', aux).group(1), 16)\n\
             with open('{prog}', 'rb') as f:\n    e_entry = struct.unpack('<Q', f.read(32)[24:32])[0]\n\
             gdb.execute('symbol-file -o %#x {prog}' % (entry - e_entry))\n\
             gdb.execute('core-file {core}')\n",
            prog = prog.display(),
            core = core.display()
        ),
    )
    .expect("write bias.py");
    let t = gdb_run(
        dir.path(),
        format == "compact",
        &[
            format!("core-file {}", core.display()),
            format!("source {}", script.display()),
            mark("bt"),
            "bt".into(),
            mark("fault"),
            "x/i $pc".into(),
            mark("end"),
        ],
    );
    if std::env::var_os("JIT_GDB_SHOW").is_some() {
        println!("{}", t.text);
    }
    t.assert_contains(None, "Program terminated with signal SIGSEGV");
    let bt = check_bt(&t, "bt", &["jit_middle", "jit_outer", "run_jit"]);
    // The fault is jit_middle's load of *p.
    t.assert_contains(Some("fault"), "ldr\tx9, [x1]");
    let middle = find(&fns, "jit_middle");
    let pc = bt[0]
        .1
        .unwrap_or_else(|| t.fail("no pc shown for the faulting frame"));
    assert!(
        middle.insns.iter().any(|&o| middle.start + o == pc),
        "{pc:#x} is no instruction of jit_middle"
    );
    t.assert_contains(Some("bt"), "jit_aarch64.jit:6");
}

#[test]
fn aarch64_compact_core() {
    postmortem("compact");
}

#[test]
fn aarch64_elf_core() {
    postmortem("elf");
}

#[test]
fn aarch64_compact_bt_frame_finish() {
    bt_frame_finish_and_code("compact");
}

#[test]
fn aarch64_elf_bt_frame_finish_break_by_name() {
    bt_frame_finish_and_code("elf");
}

#[test]
fn aarch64_compact_stepi_every_instruction() {
    stepi_through_every_instruction("compact");
}

#[test]
fn aarch64_elf_stepi_every_instruction() {
    stepi_through_every_instruction("elf");
}

/// The bundled demo script's line holding `needle` (1-based): expectations follow the script.
fn demo_line(needle: &str) -> usize {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/demo/fib.jg"))
        .expect("read demo/fib.jg");
    src.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("demo/fib.jg has no line with {needle:?}"))
        + 1
}

/// `jit-gdb ARGS` (this host's build) with the aarch64 build and the reader under test.
fn jit_gdb(dir: &Path, args: &[&str]) -> Transcript {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jit-gdb"));
    cmd.args(args)
        .env("JIT_GDB_AARCH64_BIN", jit_gdb_aarch64())
        .env("JIT_GDB_READER", reader_support::reader_so())
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .current_dir(dir);
    run_captured(cmd, dir)
}

/// The output of GDB command `cmd` in a transcript of `jit-gdb demo` (which echoes each
/// command as `(gdb) CMD`).
fn demo_section<'t>(t: &'t Transcript, cmd: &str) -> &'t str {
    let head = format!("(gdb) {cmd}\n");
    let at = t
        .text
        .find(&head)
        .unwrap_or_else(|| t.fail(&format!("no `{cmd}` in the transcript")));
    let rest = &t.text[at + head.len()..];
    &rest[..rest.find("(gdb) ").unwrap_or(rest.len())]
}

/// The frame lines of a backtrace, and the index of the first `#N ... NAME (ARGS...) at
/// FILE:LINE` frame, checked to end at the demo script's `line`.
fn frame_at(t: &Transcript, bt: &str, name: &str, line: usize) -> usize {
    let want_at = format!("fib.jg:{line}");
    bt.lines()
        .filter(|l| l.starts_with('#'))
        .position(|f| f.contains(&format!(" {name} (")) && f.ends_with(&want_at))
        .unwrap_or_else(|| t.fail(&format!("no frame `{name}` at {want_at}")))
}

#[test]
fn aarch64_demo_jit_runs_scripts_and_backtraces() {
    let test = "aarch64_demo_jit_runs_scripts_and_backtraces";
    if !have_everything(test) {
        return;
    }
    let dir = TempDir::new("a64-demo");
    // The aarch64 code computes what the language says (here computed again in Rust).
    let script = dir.join("calc.jg");
    std::fs::write(
        &script,
        "fn six(a, b, c, d, e, f) { return a - b + c * d - e * f / 3 % 4; }\n\
         fn fib(n) { if n < 2 { return n; } return fib(n - 1) + fib(n - 2); }\n\
         fn cmp(a, b) { return (a < b) + 2 * (a <= b) + 4 * (a > b) + 8 * (a >= b) + 16 * (a == b) + 32 * (a != b); }\n\
         fn main() {\n\
           let i = 0;\n\
           let acc = 0;\n\
           while i < 10 { acc = acc + i * i; i = i + 1; }\n\
           print(acc);\n\
           print(six(1, 2, 3, 4, 5, 6));\n\
           print(fib(15));\n\
           print(cmp(3, 4) + 64 * cmp(7, 7) + 4096 * cmp(9, -2));\n\
           print(load(probe(5000000000)) - 10000000000);\n\
           return 42;\n\
         }\n",
    )
    .expect("write calc.jg");
    fn fib(n: i64) -> i64 {
        if n < 2 {
            n
        } else {
            fib(n - 1) + fib(n - 2)
        }
    }
    fn cmp(a: i64, b: i64) -> i64 {
        i64::from(a < b)
            + 2 * i64::from(a <= b)
            + 4 * i64::from(a > b)
            + 8 * i64::from(a >= b)
            + 16 * i64::from(a == b)
            + 32 * i64::from(a != b)
    }
    let want = [
        (0..10).map(|i: i64| i * i).sum::<i64>(),
        1 - 2 + 3 * 4 - 5 * 6 / 3 % 4,
        fib(15),
        cmp(3, 4) + 64 * cmp(7, 7) + 4096 * cmp(9, -2),
        5_000_000_000 - 10_000_000_000,
    ];
    let out = Command::new("qemu-aarch64")
        .args(["-L", SYSROOT])
        .arg(jit_gdb_aarch64())
        .arg("run-script")
        .arg(&script)
        .args(["--format", "compact"])
        .output()
        .expect("run qemu-aarch64");
    let got: Vec<i64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().expect("a printed number"))
        .collect();
    assert_eq!(
        (got.as_slice(), out.status.code()),
        (want.as_slice(), Some(42)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The demo under gdb-multiarch: stopped in the native callback, the JIT frames between.
    let t = jit_gdb(
        dir.path(),
        &["demo", "--arch", "aarch64", "--format", "compact"],
    );
    if t.status.is_none_or(|s| !s.success()) || t.timed_out {
        t.fail("`jit-gdb demo --arch aarch64` failed");
    }
    t.assert_contains(None, "compiles ");
    t.assert_contains(None, "to aarch64 code and registers it as compact records");
    let bt = demo_section(&t, "bt 12");
    let leaf = frame_at(&t, bt, "leaf", demo_line("= probe(n);"));
    let fib_leaf = frame_at(&t, bt, "fib", demo_line("return leaf(n)"));
    let fib_rec = frame_at(&t, bt, "fib", demo_line("fib(n - 1) + fib(n - 2)"));
    let main = frame_at(&t, bt, "main", demo_line("fib(6)"));
    if !(leaf == 1 && leaf < fib_leaf && fib_leaf < fib_rec && fib_rec < main) {
        t.fail("the JIT frames are not leaf <- fib <- ... <- main above the callback");
    }
    // The unwinding goes on out of the JIT code into the native caller of `main`.
    let frames: Vec<&str> = bt.lines().filter(|l| l.starts_with('#')).collect();
    if !frames[..=main].iter().all(|f| !f.contains("??"))
        || !frames[main + 1..]
            .iter()
            .any(|f| f.contains("LoadedScript::call"))
    {
        t.fail("the backtrace does not go from the JIT main to LoadedScript::call");
    }
    assert!(demo_section(&t, "list").contains("let p = probe(n);"));
    t.assert_contains(None, "exited normally");
}

#[test]
fn aarch64_demo_crash_stops_at_the_fault_in_jit_code() {
    let test = "aarch64_demo_crash_stops_at_the_fault_in_jit_code";
    if !have_everything(test) {
        return;
    }
    let dir = TempDir::new("a64-demo-crash");
    let t = jit_gdb(
        dir.path(),
        &["demo", "--arch", "aarch64", "--format", "elf", "--crash"],
    );
    if t.timed_out {
        t.fail("`jit-gdb demo --arch aarch64 --crash` timed out");
    }
    t.assert_contains(None, "Program received signal SIGSEGV");
    // Frame 0 is `leaf`'s `load` of the null pointer, on its line; `fib` called it.
    let bt = demo_section(&t, "bt 12");
    let load = frame_at(&t, bt, "leaf", demo_line("return load(p);"));
    let fib = frame_at(&t, bt, "fib", demo_line("return leaf(n)"));
    if (load, fib) != (0, 1) || !bt.contains(" main () at ") {
        t.fail("the fault is not in leaf called by fib, down to main");
    }
    // ELF payloads carry the parameters.
    if !bt
        .lines()
        .next()
        .is_some_and(|l| l.contains(" leaf (n=1) at "))
    {
        t.fail("frame 0 does not show leaf's parameter");
    }
    // The faulting instruction is the aarch64 load through x0, which holds 0.
    assert!(
        demo_section(&t, "x/i $pc").contains("ldr\tx0, [x0]"),
        "{}",
        t.text
    );
    assert!(
        demo_section(&t, "info registers x0").starts_with("x0             0x0 "),
        "{}",
        t.text
    );
    assert!(
        demo_section(&t, "info args").contains("n = 1"),
        "{}",
        t.text
    );
}

/// Without the aarch64 build, `demo --arch aarch64` says what is missing and how to build it
/// (no tools needed).
#[test]
fn aarch64_demo_names_a_missing_aarch64_build() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let dir = TempDir::new("a64-demo-missing");
    let missing = dir.join("no-such-jit-gdb");
    let o = Command::new(env!("CARGO_BIN_EXE_jit-gdb"))
        .args(["demo", "--arch", "aarch64"])
        .env("JIT_GDB_AARCH64_BIN", &missing)
        .output()
        .expect("run jit-gdb");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    for want in [
        format!("JIT_GDB_AARCH64_BIN is set to {}", missing.display()),
        "cargo build --target aarch64-unknown-linux-gnu --bin jit-gdb".into(),
        "scripts/install-tools.sh aarch64".into(),
    ] {
        assert!(err.contains(&want), "no {want:?} in: {err}");
    }
}
