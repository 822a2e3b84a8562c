//! Shared harness of the end-to-end tests: runs real debuggers (`gdb -batch -nx`, `lldb
//! --batch`) on the JIT test host, captures the whole transcript (stdout and stderr of the
//! debugger and of the debuggee, in order), and parses backtraces.
//!
//! Every failure message prints the complete transcript, so a red test explains itself.
//! Use from a test file with `mod common;` (items a given file does not use are allowed to
//! be dead code). Environment: `JIT_GDB_SHOW=1` prints every transcript (with
//! `-- --nocapture`), `JIT_GDB_KEEP_TEMP=1` keeps the scratch directories (core files),
//! `JIT_GDB_TEST_TIMEOUT=SECS` changes the per-debugger timeout (default 120),
//! `JIT_GDB_TESTHOSTS=DIR` runs test hosts built beforehand (see [`testhosts_dir`]), and
//! `CI` or `JIT_GDB_REQUIRE_TOOLS=1` turns a missing debugger into a failure ([`require_tool`]).
//!
//! - Ready-made checks of the scenario: [`scenario`] (`scenario::backtrace(&Host::rust("elf"),
//!   "tag")`, `step_every_instruction`, `attach_and_gcore`, `crash_core`, ...). For compact
//!   payloads: `Host::rust("compact").with_gdb_prelude(["jit-reader-load /abs/libjitreader.so"])`
//!   and the checks that do not need names in GDB's symbol tables (`backtrace`, `finish`,
//!   `step_every_instruction`, `attach_and_gcore`, `crash_core`, `up_info_frame_args_list`
//!   with `expect_args = false`).
//! - Your own sessions: [`Gdb::program`] / [`Gdb::attach`] / [`Gdb::core`], `.cmd(...)`,
//!   `.section("name", [cmds])`, `.run()`, then [`Transcript::section`], [`Transcript::gdb_bt`],
//!   [`check_chain`] / [`assert_chain`] against the host's [`Layout`] (`Layout::of(host, args)`:
//!   the code sits at a fixed address, so the layout is known before GDB starts).
#![allow(dead_code)]

pub mod scenario;

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// The test hosts (package jit-gdb-testhosts, testhosts/)

/// The Rust JIT test host.
pub fn testhost() -> PathBuf {
    testhost_program("jit-gdb-testhost")
}

/// The reader's extra scenarios (clobbered rsp, reused addresses, damaged payloads...).
pub fn reader_testhost() -> PathBuf {
    testhost_program("reader_testhost")
}

/// The C test host: testhosts/c/host.c, compiled by testhosts/build.rs.
pub fn c_testhost() -> PathBuf {
    testhost_program("jit-gdb-c-testhost")
}

/// A program of the test-host package, in this test's profile (see [`testhosts_dir`]).
pub fn testhost_program(name: &str) -> PathBuf {
    let p = testhosts_dir().join(name);
    assert!(p.is_file(), "no test host {}", p.display());
    p
}

/// Where the test hosts are: `JIT_GDB_TESTHOSTS` (a directory holding them, built
/// beforehand) if set, else built (or brought up to date) once per test binary by
/// [`build_testhosts`] in this test's profile.
pub fn testhosts_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(d) = std::env::var_os("JIT_GDB_TESTHOSTS") {
            let d = PathBuf::from(d);
            assert!(
                d.is_dir(),
                "JIT_GDB_TESTHOSTS={} is not a directory",
                d.display()
            );
            return d;
        }
        build_testhosts(&test_profile())
    })
}

/// Builds the test hosts, and jit-interface's C libraries (`libjit_interface.a`, `.so`) for
/// the C link test, in cargo profile `profile`; returns their directory. They are not
/// binaries of the package under test (`cargo install` must not install them), so cargo
/// gives no `CARGO_BIN_EXE_` path for them: the tests build them themselves.
pub fn build_testhosts(profile: &str) -> PathBuf {
    cargo_build(
        "testhosts",
        profile,
        &["-p", "jit-gdb-testhosts", "-p", "jit-interface"],
    )
}

/// The cargo profile this test binary was built in (`debug` for dev and test builds), by
/// its directory `target/<profile>/deps`.
pub fn test_profile() -> String {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .expect("test executable in target/<profile>/deps")
        .to_string()
}

/// Runs `cargo build ARGS` in cargo profile `profile` (a directory name: `debug` is the dev
/// profile) with target directory `target/<target_dir>` beside this test's, and returns
/// `target/<target_dir>/<profile>`.
///
/// A target directory of its own because jit-interface (a cdylib and staticlib too) has
/// unhashed artifact names, even its rlib: building one package alone, with other features
/// of jit-interface than the workspace's, into `target/` would overwrite the jit-interface
/// library the rest of the test run uses.
pub fn cargo_build(target_dir: &str, profile: &str, args: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps")
        .join(target_dir);
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["build", "--quiet"])
        .args(args)
        .arg("--target-dir")
        .arg(&target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        p => {
            cmd.args(["--profile", p]);
        }
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo: {e}"));
    assert!(
        out.status.success(),
        "`cargo build {} --target-dir {} ({profile})` failed ({}):\n{}",
        args.join(" "),
        target.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    target.join(profile)
}

/// The scenario's call chain from the usual breakpoint outwards (innermost first). JIT
/// functions are `jit_entry`, `jit_middle`, `jit_frameless`, `jit_second`; the rest is
/// native. The C host uses the same names.
pub const CHAIN: [&str; 7] = [
    "jit_test_break_here",
    "jit_second",
    "jit_test_callback",
    "jit_frameless",
    "jit_middle",
    "jit_entry",
    "run_jit",
];

/// The JIT functions of the scenario.
pub const JIT_FUNCTIONS: [&str; 4] = ["jit_entry", "jit_middle", "jit_frameless", "jit_second"];

// ---------------------------------------------------------------------------------------
// Tools and temporary directories

/// Is `tool` runnable (`tool --version` succeeds)?
pub fn have_tool(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Returns false (and prints why) when `tool` is missing, so the caller can skip; in CI
/// (`CI` or `JIT_GDB_REQUIRE_TOOLS` set) a missing tool fails the test instead: a skipped
/// test has not passed.
pub fn require_tool(tool: &str, test: &str) -> bool {
    if have_tool(tool) {
        return true;
    }
    let required = ["CI", "JIT_GDB_REQUIRE_TOOLS"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty() && x != "0"));
    assert!(
        !required,
        "{test}: `{tool}` is not installed, and CI requires every tool (scripts/install-tools.sh installs it)"
    );
    // Straight to the process's stderr: the test harness captures `eprintln!`, and a skip
    // must be visible in a passing run.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: `{tool}` is not installed (scripts/install-tools.sh installs it); this test needs the real tool"
    );
    false
}

/// A temporary directory, removed on drop unless `JIT_GDB_KEEP_TEMP` is set (then its path
/// is printed, for looking at core files and transcripts after a failure).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "jit-gdb-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("JIT_GDB_KEEP_TEMP").is_some() {
            eprintln!("kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Set `JIT_GDB_SHOW=1` to print every debugger transcript (`cargo test -- --nocapture`).
///
/// Debugger timeout: 120 s, or `JIT_GDB_TEST_TIMEOUT` seconds.
pub fn timeout() -> Duration {
    let secs = std::env::var("JIT_GDB_TEST_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    Duration::from_secs(secs)
}

// ---------------------------------------------------------------------------------------
// Layout of the JIT code (printed by the hosts)

/// One JIT function as the host printed it (`jit-fn name=... start=... ...`).
#[derive(Debug, Clone)]
pub struct JitFnInfo {
    pub name: String,
    pub start: u64,
    pub size: u64,
    /// `fp` (frame-pointer prologue/epilogue) or `rows` (explicit SP-based rows).
    pub frame: String,
    /// Start offset of every instruction.
    pub insns: Vec<u64>,
    /// (offset, line) rows.
    pub lines: Vec<(u64, u32)>,
    pub file: String,
}

impl JitFnInfo {
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.start + self.size
    }
    /// Source line of the code at `addr` (by the host's line rows; `None` in a gap, a row
    /// of line 0).
    pub fn line_at(&self, addr: u64) -> Option<u32> {
        if !self.contains(addr) {
            return None;
        }
        let off = addr - self.start;
        self.lines
            .iter()
            .rev()
            .find(|(o, _)| *o <= off)
            .map(|&(_, l)| l)
            .filter(|&l| l != 0)
    }
}

/// All JIT functions of a host run.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    pub functions: Vec<JitFnInfo>,
}

impl Layout {
    /// Parses the `jit-fn` lines out of any text (host output or a debugger transcript).
    pub fn parse(text: &str) -> Layout {
        let mut functions: Vec<JitFnInfo> = Vec::new();
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("jit-fn ") else {
                continue;
            };
            let mut f = JitFnInfo {
                name: String::new(),
                start: 0,
                size: 0,
                frame: String::new(),
                insns: vec![],
                lines: vec![],
                file: String::new(),
            };
            for kv in rest.split(' ') {
                let Some((k, v)) = kv.split_once('=') else {
                    continue;
                };
                match k {
                    "name" => f.name = v.into(),
                    "start" => f.start = parse_hex(v).expect("start address"),
                    "size" => f.size = v.parse().expect("size"),
                    "frame" => f.frame = v.into(),
                    "insns" => f.insns = v.split(',').map(|x| x.parse().unwrap()).collect(),
                    "lines" => {
                        f.lines = v
                            .split(',')
                            .map(|x| {
                                let (o, l) = x.split_once(':').unwrap();
                                (o.parse().unwrap(), l.parse().unwrap())
                            })
                            .collect()
                    }
                    "file" => f.file = v.into(),
                    _ => {}
                }
            }
            if !functions.iter().any(|g| g.name == f.name) {
                functions.push(f);
            }
        }
        Layout { functions }
    }

    /// Runs `host ARGS layout` and parses its output.
    pub fn of(host: &Path, args: &[&str]) -> Layout {
        let out = Command::new(host)
            .args(args)
            .arg("layout")
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", host.display()));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{} {args:?} layout failed: {}\n{text}\n{}",
            host.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let l = Layout::parse(&text);
        assert!(!l.functions.is_empty(), "no jit-fn lines in:\n{text}");
        l
    }

    pub fn get(&self, name: &str) -> &JitFnInfo {
        self.functions
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no JIT function {name} in layout {self:#?}"))
    }

    pub fn by_addr(&self, addr: u64) -> Option<&JitFnInfo> {
        self.functions.iter().find(|f| f.contains(addr))
    }
}

pub fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

// ---------------------------------------------------------------------------------------
// Running a debugger

/// The captured output of one debugger run.
pub struct Transcript {
    pub command_line: String,
    pub text: String,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
}

/// A marker line separating sections of a transcript: `mark("x")` as a GDB command
/// (`echo`) prints it, [`Transcript::section`] finds it.
pub fn mark(name: &str) -> String {
    format!("echo \\n@@@ {name} @@@\\n")
}

impl Transcript {
    /// Panics with `msg` and the whole transcript.
    #[track_caller]
    pub fn fail(&self, msg: &str) -> ! {
        panic!(
            "{msg}\n===== debugger command line =====\n{}\n===== status: {:?}{} =====\n===== transcript =====\n{}\n===== end of transcript =====",
            self.command_line,
            self.status,
            if self.timed_out { " (TIMED OUT, killed)" } else { "" },
            self.text
        )
    }

    /// The text after the marker `name` up to the next marker (or the end).
    #[track_caller]
    pub fn section(&self, name: &str) -> &str {
        let m = format!("@@@ {name} @@@\n");
        let Some(i) = self.text.find(&m) else {
            self.fail(&format!("marker `{name}` not found in the transcript"))
        };
        let rest = &self.text[i + m.len()..];
        let end = rest.find("\n@@@ ").map_or(rest.len(), |j| j + 1);
        &rest[..end]
    }

    #[track_caller]
    pub fn assert_contains(&self, section: Option<&str>, needle: &str) {
        let hay = section.map_or(self.text.as_str(), |s| self.section(s));
        if !hay.contains(needle) {
            self.fail(&format!(
                "expected `{needle}` in {}",
                section.map_or("the transcript".to_string(), |s| format!("section `{s}`"))
            ));
        }
    }

    #[track_caller]
    pub fn assert_not_contains(&self, section: Option<&str>, needle: &str) {
        let hay = section.map_or(self.text.as_str(), |s| self.section(s));
        if hay.contains(needle) {
            self.fail(&format!(
                "did not expect `{needle}` in {}",
                section.map_or("the transcript".to_string(), |s| format!("section `{s}`"))
            ));
        }
    }

    /// The backtrace in section `name` (GDB format).
    pub fn gdb_bt(&self, name: &str) -> Vec<Frame> {
        parse_gdb_bt(self.section(name))
    }
}

/// Runs `cmd` with stdout and stderr into one file (so their order is kept), killing its
/// whole process group (the debugger and its debuggee) after [`timeout`].
pub fn run_captured(cmd: Command, dir: &Path) -> Transcript {
    run_captured_with_input(cmd, dir, None)
}

/// [`run_captured`] with standard input read from the file `input` (an MI session's
/// commands), if given.
pub fn run_captured_with_input(mut cmd: Command, dir: &Path, input: Option<&Path>) -> Transcript {
    use std::os::unix::process::CommandExt;
    let command_line = format!("{cmd:?}");
    let out_path = dir.join(format!(
        "transcript-{}.txt",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let out = File::create(&out_path).expect("transcript file");
    let err = out.try_clone().expect("dup transcript file");
    let stdin = match input {
        Some(p) => Stdio::from(File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))),
        None => Stdio::null(),
    };
    cmd.stdin(stdin).stdout(out).stderr(err).process_group(0);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command_line}: {e}"));
    let deadline = Instant::now() + timeout();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait().expect("wait for debugger") {
            Some(s) => break Some(s),
            None if Instant::now() >= deadline => {
                timed_out = true;
                kill_group(&child);
                break child.wait().ok();
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    // The debuggee may survive a killed debugger; its group dies with it.
    kill_group(&child);
    let mut text = String::new();
    File::open(&out_path)
        .and_then(|mut f| {
            let mut b = Vec::new();
            f.read_to_end(&mut b)?;
            text = String::from_utf8_lossy(&b).into_owned();
            Ok(())
        })
        .expect("read transcript");
    let _ = std::fs::remove_file(&out_path);
    if std::env::var_os("JIT_GDB_SHOW").is_some() {
        eprintln!("===== {command_line}\n{text}===== end");
    }
    Transcript {
        command_line,
        text,
        status,
        timed_out,
    }
}

fn kill_group(child: &Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
}

/// Settings every GDB run starts with (before the program is loaded): no pagination, no
/// width limit, no questions, no network, pending breakpoints allowed (JIT functions do not
/// exist before the program registers them).
pub const GDB_PRELUDE: [&str; 6] = [
    "set debuginfod enabled off",
    "set pagination off",
    "set width 0",
    "set height 0",
    "set confirm off",
    "set breakpoint pending on",
];

/// A `gdb -batch -nx` run.
pub struct Gdb {
    pub args: Vec<String>,
    pub commands: Vec<String>,
    pub dir: PathBuf,
    /// Environment variables set for GDB (and so for the program it runs).
    pub env: Vec<(String, String)>,
}

impl Gdb {
    /// GDB on `program ARGS` (started by a `run` command), working in `dir`.
    pub fn program(program: &Path, args: &[&str], dir: &Path) -> Gdb {
        let mut a = vec!["--args".to_string(), program.display().to_string()];
        a.extend(args.iter().map(|s| s.to_string()));
        Gdb {
            args: a,
            commands: vec![],
            dir: dir.into(),
            env: vec![],
        }
    }

    /// GDB attaching to `pid`.
    pub fn attach(pid: u32, dir: &Path) -> Gdb {
        Gdb {
            args: vec!["-p".into(), pid.to_string()],
            commands: vec![],
            dir: dir.into(),
            env: vec![],
        }
    }

    /// GDB on a core file of `program`.
    pub fn core(program: &Path, core: &Path, dir: &Path) -> Gdb {
        Gdb {
            args: vec![program.display().to_string(), core.display().to_string()],
            commands: vec![],
            dir: dir.into(),
            env: vec![],
        }
    }

    /// Sets an environment variable for GDB.
    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Gdb {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn cmd(mut self, c: impl Into<String>) -> Gdb {
        self.commands.push(c.into());
        self
    }

    pub fn cmds<S: Into<String>>(mut self, cs: impl IntoIterator<Item = S>) -> Gdb {
        self.commands.extend(cs.into_iter().map(Into::into));
        self
    }

    /// A marker then the command(s): the section `name` holds their output.
    pub fn section<S: Into<String>>(self, name: &str, cs: impl IntoIterator<Item = S>) -> Gdb {
        self.cmd(mark(name)).cmds(cs)
    }

    /// Runs GDB; every command is an `-ex` (an error in one does not stop the others).
    pub fn run(&self) -> Transcript {
        let mut cmd = Command::new("gdb");
        cmd.arg("-batch").arg("-nx");
        for p in GDB_PRELUDE {
            cmd.arg("-iex").arg(p);
        }
        for c in &self.commands {
            cmd.arg("-ex").arg(c);
        }
        // Program (and its arguments) come last: `--args` takes the rest of the line.
        cmd.args(&self.args)
            .current_dir(&self.dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        run_captured(cmd, &self.dir)
    }
}

/// An `lldb --batch` run on `program ARGS` (`-o` commands, in order).
pub fn lldb(program: &Path, args: &[&str], commands: &[String], dir: &Path) -> Transcript {
    let mut cmd = Command::new("lldb");
    cmd.arg("--no-lldbinit").arg("--batch");
    for c in commands {
        cmd.arg("-o").arg(c);
    }
    cmd.arg("--").arg(program).args(args).current_dir(dir);
    run_captured(cmd, dir)
}

// ---------------------------------------------------------------------------------------
// Backtraces

/// One frame of a GDB backtrace line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub level: u32,
    /// Shown for frames not at the start of a line (caller frames, mid-line stops).
    pub pc: Option<u64>,
    /// As GDB shows it (`??` when unknown).
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub raw: String,
}

impl Frame {
    /// Does this frame belong to function `name` (ignoring a Rust path prefix)?
    pub fn is(&self, name: &str) -> bool {
        self.function == name || self.function.ends_with(&format!("::{name}"))
    }
    /// (function, file name without directories, line): what must agree between a live
    /// backtrace and the one from a core file.
    pub fn location(&self) -> (String, Option<String>, Option<u32>) {
        let base = self
            .file
            .as_ref()
            .map(|f| f.rsplit('/').next().unwrap_or(f).to_string());
        (self.function.clone(), base, self.line)
    }
}

/// Parses the `#N ...` lines of GDB backtraces in `text`.
pub fn parse_gdb_bt(text: &str) -> Vec<Frame> {
    let mut frames = Vec::new();
    for raw in text.lines() {
        let Some(rest) = raw.strip_prefix('#') else {
            continue;
        };
        let Some((level, rest)) = rest.split_once(' ') else {
            continue;
        };
        let Ok(level) = level.parse::<u32>() else {
            continue;
        };
        let mut rest = rest.trim_start();
        let mut pc = None;
        if rest.starts_with("0x") {
            if let Some((addr, after)) = rest.split_once(" in ") {
                pc = parse_hex(addr);
                rest = after;
            }
        }
        let (function, tail) = match rest.find(" (") {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (mut file, mut line) = (None, None);
        if let Some(i) = tail.rfind(" at ") {
            let loc = &tail[i + 4..];
            if let Some((f, l)) = loc.rsplit_once(':') {
                file = Some(f.to_string());
                line = l.trim().parse().ok();
            }
        }
        frames.push(Frame {
            level,
            pc,
            function: function.to_string(),
            file,
            line,
            raw: raw.to_string(),
        });
    }
    frames
}

/// Checks a GDB backtrace of the scenario: starting at the frame of `chain[0]`, the frames
/// are exactly `chain` in order, and then (possibly after more native frames) `main`, with no
/// unknown (`??`) frame anywhere. JIT frames must show the host's source file and, where
/// the pc is known, the line the host's line rows give for it (pc - 1 in caller frames).
/// Returns a description of the first problem.
pub fn check_chain(frames: &[Frame], chain: &[&str], layout: &Layout) -> Result<(), String> {
    if frames.is_empty() {
        return Err("no backtrace frames found".into());
    }
    if let Some(f) = frames.iter().find(|f| f.function == "??") {
        return Err(format!("unknown frame: {}", f.raw));
    }
    let Some(first) = frames.iter().position(|f| f.is(chain[0])) else {
        return Err(format!("no frame of {}", chain[0]));
    };
    for (k, want) in chain.iter().enumerate() {
        let Some(f) = frames.get(first + k) else {
            return Err(format!("backtrace ends before {want}"));
        };
        if !f.is(want) {
            return Err(format!(
                "frame #{} is `{}`, expected {want}",
                f.level, f.function
            ));
        }
        if JIT_FUNCTIONS.contains(want) {
            check_jit_frame(f, layout)?;
        }
    }
    let last = frames.last().unwrap();
    // C `main`, or the Rust program's `crate::main` (GDB stops the backtrace there).
    if !last.is("main") {
        return Err(format!(
            "the backtrace does not reach main: last frame is {}",
            last.raw
        ));
    }
    Ok(())
}

/// Is `shown` the reader's last-resort name for the registered `file`: a file of the source
/// cache (`.../sources/HASH/BASENAME`, see `jit_interface::source_cache`), which a bare
/// `jit-reader-load` gives when GDB cannot open the runtime's own name?
pub fn is_cached_name(shown: &str, file: &str) -> bool {
    let base = file.rsplit('/').next().unwrap_or(file);
    let mut parts = shown.rsplit('/');
    parts.next() == Some(base)
        && parts
            .next()
            .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        && parts.next() == Some("sources")
}

/// A JIT frame names its function, the host's source file and the right line.
pub fn check_jit_frame(f: &Frame, layout: &Layout) -> Result<(), String> {
    let info = layout
        .functions
        .iter()
        .find(|i| f.is(&i.name))
        .ok_or_else(|| format!("{} is not a JIT function of the layout", f.function))?;
    let file = f
        .file
        .as_deref()
        .ok_or_else(|| format!("JIT frame without a source location: {}", f.raw))?;
    if !info.file.ends_with(file)
        && !file.ends_with(&info.file)
        && !is_cached_name(file, &info.file)
    {
        return Err(format!(
            "frame #{} is in file {file}, expected {}",
            f.level, info.file
        ));
    }
    if let Some(pc) = f.pc {
        let lookup = if f.level == 0 { pc } else { pc - 1 };
        if !info.contains(lookup) {
            return Err(format!(
                "frame #{} pc {pc:#x} is outside {}",
                f.level, info.name
            ));
        }
        let want = info.line_at(lookup);
        if f.line != want {
            return Err(format!(
                "frame #{} ({}) shows line {:?}, the host's line rows give {want:?} for {lookup:#x}",
                f.level, info.name, f.line
            ));
        }
    }
    Ok(())
}

/// Panics with the transcript if [`check_chain`] fails for section `name`.
#[track_caller]
pub fn assert_chain(t: &Transcript, name: &str, chain: &[&str], layout: &Layout) -> Vec<Frame> {
    let frames = t.gdb_bt(name);
    if let Err(e) = check_chain(&frames, chain, layout) {
        t.fail(&format!("backtrace in section `{name}`: {e}"));
    }
    frames
}

// ---------------------------------------------------------------------------------------
// A host process outside any debugger (attach, gcore)

/// A host started in `wait` mode, killed on drop.
pub struct WaitingHost {
    pub child: Child,
    pub pid: u32,
    /// Everything the host printed up to its ready line.
    pub output: String,
}

impl WaitingHost {
    /// Starts `program ARGS wait` in `dir` and waits for `ready pid=`.
    pub fn start(program: &Path, args: &[&str], dir: &Path) -> WaitingHost {
        WaitingHost::start_with(program, args, &[], dir)
    }

    /// [`WaitingHost::start`], with `env` set for the program.
    pub fn start_with(
        program: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        dir: &Path,
    ) -> WaitingHost {
        let mut child = Command::new(program)
            .args(args)
            .arg("wait")
            .envs(env.iter().copied())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut output = String::new();
        let deadline = Instant::now() + timeout();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let _ = writeln!(output, "{line}");
                    if let Some(p) = line.split("ready pid=").nth(1) {
                        let pid = p.trim().parse().expect("pid");
                        return WaitingHost { child, pid, output };
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "{} did not print its ready line ({e:?}); output so far:\n{output}",
                        program.display()
                    );
                }
            }
        }
    }
}

impl Drop for WaitingHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kernel's core_pattern, if readable.
pub fn core_pattern() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/core_pattern")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Core files (`core`, `core.*`) the kernel wrote into `dir`.
pub fn find_core(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "core" || n.starts_with("core."))
        })
}

/// `target/<profile>/examples/NAME` of the jit-interface crate (see [`package_example`]).
pub fn interface_example(name: &str) -> PathBuf {
    package_example("jit-interface", name)
}

/// `target/<profile>/examples/NAME` of package `package`, built (or brought up to date) with
/// `cargo build -p PACKAGE --example NAME` in this test's profile and target directory.
pub fn package_example(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps")
        .to_path_buf();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["build", "--quiet", "-p", package, "--example", name])
        .arg("--target-dir")
        .arg(profile_dir.parent().expect("target dir"))
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile_dir.file_name().and_then(|n| n.to_str()) == Some("release") {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("run cargo");
    assert!(
        status.success(),
        "building the example {name} of {package} failed"
    );
    profile_dir.join("examples").join(name)
}

/// The `# EXPECT ADDR NAME FILE` lines of a scale host's query file (`-` for NAME and FILE:
/// nothing registered there).
pub fn slot_queries(q: &str) -> Vec<(String, String, String)> {
    q.lines()
        .filter_map(|l| l.strip_prefix("# EXPECT "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 3, "EXPECT line: {l}");
            (f[0].to_string(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

/// GDB's answers in `text` (`SLOT-QUERY ADDR`, then `info line *ADDR`) that differ from
/// `expected`: a live function's line `line` at its first byte, in its file (as registered,
/// or by its cache path), named after it; nothing for `-`.
pub fn wrong_slot_answers(
    expected: &[(String, String, String)],
    text: &str,
    line: u32,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (addr, name, file) in expected {
        let marker = format!("SLOT-QUERY {addr}\n");
        let at = text
            .find(&marker)
            .unwrap_or_else(|| panic!("no answer for slot {addr}:\n{text}"));
        let answer = text[at + marker.len()..].lines().next().unwrap_or("");
        let named = answer
            .split_once(" <")
            .and_then(|(_, rest)| rest.split(['>', '+']).next())
            .unwrap_or("-");
        let starts = format!("Line {line} of \"");
        let line_ok = name == "-"
            || answer.starts_with(&format!("{starts}{file}\""))
            || answer
                .strip_prefix(&starts)
                .and_then(|a| a.split_once('"'))
                .is_some_and(|(shown, _)| is_cached_name(shown, file));
        if named != name || !line_ok {
            wrong.push(format!(
                "{addr}: host has {name} in {file}, GDB says `{answer}`"
            ));
        }
    }
    wrong
}
