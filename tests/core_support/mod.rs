//! Shared by the tests of the launcher's core check (`tests/launcher_cores.rs`,
//! `tests/mutated_cores.rs`): a real core of the compact test host (one entry per function,
//! taken by `gcore`), where its JIT list lies (read by `jit-gdb inspect --list`), writing
//! damaged copies of it, and running `jit-gdb` on them with a time limit.
#![allow(dead_code)]

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::scenario::Host;
use crate::common::{parse_hex, require_tool, Gdb, Layout, TempDir, WaitingHost};

pub fn jit_gdb_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_jit-gdb"))
}

/// One entry of the list as `inspect --list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub addr: u64,
    pub payload: u64,
    pub size: u64,
    /// Its functions' names.
    pub names: Vec<String>,
}

/// A gcore of the compact host waiting in `jit_test_break_here`, and its JIT list.
pub struct JitCore {
    pub dir: TempDir,
    pub host: Host,
    pub core: PathBuf,
    pub layout: Layout,
    pub descriptor: u64,
    /// In list order: the newest registration (`jit_second`) first.
    pub entries: Vec<Entry>,
}

/// Takes the core; `None` (skipped) without GDB.
pub fn compact_core(tag: &str) -> Option<JitCore> {
    if !require_tool("gdb", tag) {
        return None;
    }
    let host = Host::rust("compact").with_gdb_prelude([crate::reader_support::load_cmd()]);
    let host = Host {
        args: [&host.args[..], &["--objects".into(), "per-function".into()]].concat(),
        ..host
    };
    let dir = TempDir::new(tag);
    let layout = host.layout(dir.path());
    let a = host.args_in(dir.path());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let waiting = WaitingHost::start(&host.program, &a, dir.path());
    let core = dir.join("gcore.core");
    let t = Gdb::attach(waiting.pid, dir.path())
        .cmd(format!("gcore {}", core.display()))
        .cmd("detach")
        .run();
    drop(waiting);
    if !core.exists() {
        t.fail("gcore wrote no core file");
    }
    let (descriptor, entries) = list(&host.program, &core);
    assert_eq!(entries.len(), 4, "one entry per JIT function: {entries:?}");
    Some(JitCore {
        dir,
        host,
        core,
        layout,
        descriptor,
        entries,
    })
}

/// The descriptor's address and the entries of `jit-gdb inspect CORE --list`.
pub fn list(program: &Path, core: &Path) -> (u64, Vec<Entry>) {
    let out = Command::new(jit_gdb_exe())
        .arg("inspect")
        .arg(core)
        .arg("--exe")
        .arg(program)
        .output()
        .expect("run jit-gdb inspect");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `__jit_debug_descriptor at 0xADDR: version ...`
    let descriptor = stdout
        .lines()
        .find_map(|l| l.strip_prefix("__jit_debug_descriptor at "))
        .and_then(|rest| rest.split(':').next())
        .and_then(parse_hex)
        .unwrap_or_else(|| panic!("no descriptor address in:\n{stdout}"));
    let mut entries: Vec<Entry> = Vec::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("entry ") {
            // entry N at 0xA: payload 0xP, S bytes: ...
            let w: Vec<&str> = rest.split_whitespace().collect();
            entries.push(Entry {
                addr: parse_hex(w[2].trim_end_matches(':')).unwrap(),
                payload: parse_hex(w[4].trim_end_matches(',')).unwrap(),
                size: w[5].parse().unwrap(),
                names: Vec::new(),
            });
        } else if line.starts_with("  0x") {
            let name = line.split_whitespace().nth(2).unwrap().to_string();
            entries.last_mut().unwrap().names.push(name);
        }
    }
    (descriptor, entries)
}

/// File offset of the core's byte for memory address `addr` (PT_LOAD segments, read with
/// `object`, independently of the launcher's own reading).
pub fn file_offset(core: &[u8], addr: u64) -> Option<usize> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let h = object::elf::FileHeader64::<object::Endianness>::parse(core).unwrap();
    let e = h.endian().unwrap();
    h.program_headers(e, core)
        .unwrap()
        .iter()
        .find(|ph| {
            let (v, f) = (ph.p_vaddr(e), ph.p_filesz(e));
            ph.p_type(e) == object::elf::PT_LOAD && addr >= v && addr - v < f
        })
        .map(|ph| (ph.p_offset(e) + (addr - ph.p_vaddr(e))) as usize)
}

/// Writes `v` at memory address `addr` of the core image `bytes`.
pub fn put_u64(bytes: &mut [u8], addr: u64, v: u64) {
    let at = file_offset(bytes, addr).unwrap_or_else(|| panic!("{addr:#x} is not in the core"));
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The end of the highest PT_LOAD segment in user space (below the vsyscall page): the
/// addresses just above it are in no mapping of the core.
pub fn beyond_memory(core: &[u8]) -> u64 {
    use object::read::elf::{FileHeader, ProgramHeader};
    let h = object::elf::FileHeader64::<object::Endianness>::parse(core).unwrap();
    let e = h.endian().unwrap();
    h.program_headers(e, core)
        .unwrap()
        .iter()
        .filter(|ph| ph.p_type(e) == object::elf::PT_LOAD && ph.p_vaddr(e) < 1 << 47)
        .map(|ph| ph.p_vaddr(e) + ph.p_memsz(e))
        .max()
        .unwrap()
}

/// `jit-gdb` with the reader under test, its cache and temp directories in `scratch`.
pub fn jit_gdb(scratch: &Path) -> Command {
    let mut c = Command::new(jit_gdb_exe());
    c.env("JIT_GDB_READER", crate::reader_support::reader_so())
        .env_remove("JIT_GDB_GDB")
        .env("XDG_CACHE_HOME", scratch.join("cache"))
        .env("TMPDIR", scratch.join("tmp"));
    let _ = std::fs::create_dir_all(scratch.join("tmp"));
    c
}

/// The outcome of [`run_bounded`].
pub struct Run {
    pub command_line: String,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    /// stdout and stderr, in order.
    pub text: String,
    pub seconds: f64,
}

impl Run {
    #[track_caller]
    pub fn fail(&self, msg: &str) -> ! {
        panic!(
            "{msg}\n===== {}\n===== status {:?}{} after {:.1} s\n{}\n===== end",
            self.command_line,
            self.status,
            if self.timed_out {
                " (TIMED OUT, killed)"
            } else {
                ""
            },
            self.seconds,
            self.text
        )
    }

    /// The lines `jit-gdb` itself printed (`jit-gdb: ...`).
    pub fn launcher_lines(&self) -> Vec<&str> {
        self.text
            .lines()
            .filter(|l| l.starts_with("jit-gdb: "))
            .collect()
    }
}

/// Runs `cmd` in its own process group with stdout and stderr into one file, killing the
/// group after `limit`.
pub fn run_bounded(mut cmd: Command, dir: &Path, limit: Duration) -> Run {
    use std::os::unix::process::CommandExt;
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let command_line = format!("{cmd:?}");
    let out_path = dir.join(format!(
        "run-{}.txt",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let out = File::create(&out_path).expect("output file");
    let err = out.try_clone().expect("dup output file");
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .current_dir(dir)
        .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command_line}: {e}"));
    let mut timed_out = false;
    let status = loop {
        match child.try_wait().expect("wait") {
            Some(s) => break Some(s),
            None if start.elapsed() >= limit => {
                timed_out = true;
                kill_group(child.id());
                break child.wait().ok();
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    kill_group(child.id());
    let seconds = start.elapsed().as_secs_f64();
    let mut b = Vec::new();
    File::open(&out_path)
        .and_then(|mut f| f.read_to_end(&mut b))
        .expect("read output");
    let _ = std::fs::remove_file(&out_path);
    Run {
        command_line,
        status,
        timed_out,
        text: String::from_utf8_lossy(&b).into_owned(),
        seconds,
    }
}

fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
}

/// What GDB prints when it dies of its own accord (an abort, a fatal signal, an internal
/// error): a transcript holding one of these is a GDB crash even if the launcher survived.
pub const GDB_CRASH_SIGNS: [&str; 4] = [
    "Fatal signal",
    "This is a bug, please report it",
    "internal-error",
    "virtual memory exhausted",
];

/// Why `run` counts as a crash or a hang: it did not end by itself with an exit status
/// (a time-out, a signal, GDB's death reported as 128 + N), or GDB says it crashed.
pub fn crash_or_hang(run: &Run) -> Option<String> {
    if run.timed_out {
        return Some("jit-gdb did not finish in time (GDB hangs?)".into());
    }
    match run.status.and_then(|s| s.code()) {
        None => return Some("jit-gdb died of a signal".into()),
        Some(c) if c >= 128 => return Some("GDB died of a signal (exit status 128 + N)".into()),
        _ => {}
    }
    GDB_CRASH_SIGNS
        .iter()
        .find(|s| run.text.contains(*s))
        .map(|s| format!("GDB crashed: `{s}` in its output"))
}

/// Panics (with the output) if [`crash_or_hang`] finds something.
#[track_caller]
pub fn assert_no_crash_or_hang(run: &Run) {
    if let Some(why) = crash_or_hang(run) {
        run.fail(&why);
    }
}

/// The `jit-gdb-core-*` directories left in the scratch temp directory (repaired copies).
pub fn copies_left(scratch: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(scratch.join("tmp"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("jit-gdb-core"))
                })
                .collect()
        })
        .unwrap_or_default()
}
