//! Profiler outputs: every registration that feeds GDB can also feed `perf`.
//!
//! - **perf map** (`JIT_PERF_MAP=1` or [`enable_perf_map`]): one line `START SIZE name` per
//!   function appended to `/tmp/perf-PID.map`. `perf report` reads it when it finds samples in
//!   anonymous executable memory of that process. Names only.
//! - **jitdump** (`JIT_DUMP=1` or [`enable_jitdump`]; directory `JIT_DUMP_DIR`, default the
//!   current directory): `jit-PID.dump` following perf's jitdump specification, with the code
//!   bytes, source lines and unwinding tables of each function. Record with
//!   `perf record -k mono`, then `perf inject --jit` turns each function into a small ELF file
//!   that `perf report`, `perf annotate` and `--sort srcline` use.
//!
//! Both outputs are written from the same [`JitObject`] that is registered with the debugger,
//! right after it is linked into GDB's list (`register` calls `registered`).
//!
//! `perf record -p PID` attached to a running process works as well: perf reports the
//! dump's executable mapping among the existing ones.
//!
//! Cost (benches/perf_outputs.rs, this machine): perf map ~25 ns per function; jitdump
//! ~90 ns per function plus ~0.7 µs for the unwinding tables (built with gimli per function);
//! zero beyond one atomic load per registration while both are off.
//!
//! ## Contract and behaviour
//! - **Code must be readable.** The jitdump carries each function's machine code, copied from
//!   the function's own address at registration time. The copy uses `process_vm_readv` on our
//!   own process, so an address that is not mapped readable is reported (that function is
//!   left out of the dump) instead of crashing; only where that system call is unavailable
//!   (seccomp, very old kernels) is the memory read directly, and then it must be readable.
//! - **Buffered.** Output goes through 64 KiB buffers and reaches the files when a buffer is
//!   full, on [`flush`] (`jit_perf_flush`), and at process exit (an `atexit` hook registered
//!   once, so a C program returning from `main` is covered; `_exit`, a fatal signal or
//!   `SIGKILL` lose what is still buffered: call [`flush`] before such an end). Timestamps are
//!   taken at registration, so buffering does not change what perf sees.
//! - **Thread-safe.** One lock guards both outputs; registrations from many threads interleave
//!   whole records.
//! - **Unregistration.** Neither format can express it. perf map has no removal; jitdump's
//!   `JIT_CODE_CLOSE` only marks the end of the runtime and is written once, at exit. Code
//!   freed and later reused for another function is still attributed correctly by jitdump
//!   (each `JIT_CODE_LOAD` is timestamped, and perf lets the newer load win from its time
//!   on), but not by perf map, which is timeless: perf picks one of the names registered at
//!   that address.
//! - **Errors never fail a registration.** If an output cannot be opened or written, the
//!   message is printed once on stderr (`jit-interface: ...`), kept for [`errors`] (C:
//!   `jit_perf_error`), and that output is switched off (a half-written jitdump record
//!   would make the rest of the file unreadable). A function whose code cannot be read is
//!   reported the same way and left out of the dump; the dump stays on.
//! - **fork.** A child process writes its own `perf-CHILDPID.map` / `jit-CHILDPID.dump`
//!   (perf finds files by pid); what the parent had buffered is dropped in the child, not
//!   written twice.
//! - **Environment.** `JIT_PERF_MAP` and `JIT_DUMP` accept `1` (on) or `0` / empty (off);
//!   anything else is reported as an error. They are read once, at the first registration
//!   or the first explicit enable call, whichever comes first.

mod ehframe;
mod jitdump;
mod map;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use crate::error::{Error, Result};
use crate::model::JitObject;

pub use ehframe::{unwinding_data, UnwindingData};
pub use jitdump::{
    code_bytes, JitDumpEncoder, JITDUMP_MAGIC, JIT_CODE_CLOSE, JIT_CODE_DEBUG_INFO, JIT_CODE_LOAD,
    JIT_CODE_UNWINDING_INFO,
};
pub use map::{map_line, map_lines};

/// True once any output is on: the only thing a registration checks when perf output is off.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static ENV: Once = Once::new();
static EXIT_HOOK: Once = Once::new();
static STATE: Mutex<State> = Mutex::new(State {
    pid: 0,
    map: None,
    dump: None,
    closed: false,
});
/// Every error reported so far. Entries are never removed, so a pointer handed to C stays
/// valid for the life of the process.
static ERRORS: Mutex<Vec<CString>> = Mutex::new(Vec::new());

struct State {
    /// Process the open outputs belong to (0: none open yet).
    pid: u32,
    map: Option<map::PerfMap>,
    dump: Option<jitdump::JitDump>,
    /// Set by the exit hook: the dump has its close record; nothing more is written.
    closed: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves at worst a partly filled buffer; the outputs stay
    // usable, so a poisoned lock is taken over.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Records an error: stderr and the list behind [`errors`].
fn report(msg: String) {
    eprintln!("jit-interface: {msg}");
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    lock(&ERRORS).push(c);
}

/// Profiler-output errors reported so far in this process, oldest first.
pub fn errors() -> Vec<String> {
    lock(&ERRORS)
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect()
}

/// The most recent profiler-output error as a C string (for `jit_perf_error`), or null.
pub(crate) fn last_error_ptr() -> *const std::ffi::c_char {
    lock(&ERRORS)
        .last()
        .map_or(std::ptr::null(), |c| c.as_ptr())
}

impl State {
    /// Makes the outputs belong to the calling process: after `fork`, the child drops what
    /// it inherited (without flushing the parent's buffered bytes) and opens its own files.
    fn adopt_process(&mut self) {
        let pid = std::process::id();
        if self.pid == pid {
            return;
        }
        let inherited = self.pid != 0;
        self.pid = pid;
        if !inherited {
            return;
        }
        self.closed = false;
        if let Some(m) = self.map.take() {
            m.discard();
            match map::PerfMap::open(pid) {
                Ok(m) => self.map = Some(m),
                Err(e) => report(e),
            }
        }
        if let Some(d) = self.dump.take() {
            let dir = d.dir().to_path_buf();
            d.discard();
            match jitdump::JitDump::open(&dir, pid) {
                Ok(d) => self.dump = Some(d),
                Err(e) => report(e),
            }
        }
    }

    fn write(&mut self, object: &JitObject) {
        if self.closed {
            return;
        }
        if let Some(m) = &mut self.map {
            if let Err(e) = m.write_object(object) {
                report(format!(
                    "perf map: cannot write {}: {e}; perf map output switched off",
                    m.path().display()
                ));
                self.map = None;
            }
        }
        if let Some(d) = &mut self.dump {
            match d.write_object(object) {
                Ok(skipped) => skipped.into_iter().for_each(report),
                Err(e) => {
                    report(format!(
                        "jitdump: cannot write {}: {e}; jitdump output switched off",
                        d.path().display()
                    ));
                    self.dump = None;
                }
            }
        }
    }

    fn flush(&mut self) -> std::result::Result<(), String> {
        let mut failed = Vec::new();
        if let Some(m) = &mut self.map {
            if let Err(e) = m.flush() {
                failed.push(format!("perf map {}: {e}", m.path().display()));
            }
        }
        if let Some(d) = &mut self.dump {
            if let Err(e) = d.flush() {
                failed.push(format!("jitdump {}: {e}", d.path().display()));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("cannot flush {}", failed.join("; ")))
        }
    }
}

/// Called by `register` after the object is linked into GDB's list. Never fails: problems
/// are reported (see the module documentation).
///
/// Every registration calls it, and nearly all of them with the outputs off: that answer is
/// two loads, inline; the rest is out of line.
#[inline]
pub(crate) fn registered(object: &JitObject) {
    if ENV.is_completed() && !ACTIVE.load(Ordering::Acquire) {
        return;
    }
    write_registered(object);
}

#[cold]
#[inline(never)]
fn write_registered(object: &JitObject) {
    ENV.call_once(enable_from_env);
    if !ACTIVE.load(Ordering::Acquire) {
        return;
    }
    let mut st = lock(&STATE);
    st.adopt_process();
    st.write(object);
}

/// Reads `JIT_PERF_MAP`, `JIT_DUMP` and `JIT_DUMP_DIR`.
fn enable_from_env() {
    let switch = |name: &str| match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => false,
        Ok(v) if v == "1" => true,
        Ok(v) if v.is_empty() || v == "0" => false,
        Ok(v) => {
            report(format!(
                "{name}={v} is not understood: set it to 1 to switch the output on (0 or empty: off)"
            ));
            false
        }
        Err(std::env::VarError::NotUnicode(v)) => {
            report(format!(
                "{name}={} is not understood: set it to 1 to switch the output on",
                v.to_string_lossy()
            ));
            false
        }
    };
    if switch("JIT_PERF_MAP") {
        if let Err(e) = open_map() {
            report(e.to_string());
        }
    }
    if switch("JIT_DUMP") {
        let dir = match std::env::var_os("JIT_DUMP_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => PathBuf::from("."),
        };
        if let Err(e) = open_dump(&dir) {
            report(e.to_string());
        }
    }
}

fn install_exit_hook() {
    EXIT_HOOK.call_once(|| {
        // SAFETY: `at_exit` is a plain `extern "C"` function without arguments that never
        // unwinds (it catches panics); registering it has no other precondition.
        if unsafe { libc::atexit(at_exit) } != 0 {
            report(
                "cannot register the exit hook (atexit failed): call jit_perf_flush before exiting"
                    .into(),
            );
        }
    });
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let mut st = lock(&STATE);
        if st.pid != std::process::id() || st.closed {
            // A forked child that never registered: the outputs are the parent's.
            return;
        }
        if let Some(d) = &mut st.dump {
            if let Err(e) = d.close() {
                report(format!(
                    "jitdump {}: cannot finish: {e}",
                    d.path().display()
                ));
            }
        }
        if let Err(e) = st.flush() {
            report(e);
        }
        st.closed = true;
    });
}

fn open_map() -> Result<PathBuf> {
    let mut st = lock(&STATE);
    st.adopt_process();
    if let Some(m) = &st.map {
        return Ok(m.path().to_path_buf());
    }
    let m = map::PerfMap::open(st.pid).map_err(Error::Io)?;
    let path = m.path().to_path_buf();
    st.map = Some(m);
    install_exit_hook();
    ACTIVE.store(true, Ordering::Release);
    Ok(path)
}

fn open_dump(dir: &Path) -> Result<PathBuf> {
    let mut st = lock(&STATE);
    st.adopt_process();
    if let Some(d) = &st.dump {
        let same = std::fs::canonicalize(dir).ok() == std::fs::canonicalize(d.dir()).ok();
        if same {
            return Ok(d.path().to_path_buf());
        }
        return Err(Error::Io(format!(
            "jitdump is already being written to {}; a process has one dump file (asked for directory {})",
            d.path().display(),
            dir.display()
        )));
    }
    let d = jitdump::JitDump::open(dir, st.pid).map_err(Error::Io)?;
    let path = d.path().to_path_buf();
    st.dump = Some(d);
    install_exit_hook();
    ACTIVE.store(true, Ordering::Release);
    Ok(path)
}

/// Switches the perf map on (`/tmp/perf-PID.map`, appended to) and returns its path.
/// Calling it again is harmless. Also applies the environment switches if not done yet.
pub fn enable_perf_map() -> Result<PathBuf> {
    let r = open_map();
    ENV.call_once(enable_from_env);
    r
}

/// Switches jitdump on, writing `jit-PID.dump` into `dir` (`None`: `JIT_DUMP_DIR`, else the
/// current directory), and returns the file's path. The file is created (truncated) now and
/// one page of it is mapped executable, which is how `perf record` learns about it: enable
/// the dump before the JIT code runs. Calling it again with the same directory is harmless;
/// another directory is an error (one dump per process).
pub fn enable_jitdump(dir: Option<&Path>) -> Result<PathBuf> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => match std::env::var_os("JIT_DUMP_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => PathBuf::from("."),
        },
    };
    let r = open_dump(&dir);
    ENV.call_once(enable_from_env);
    r
}

/// Writes everything buffered to the files. An output that cannot be written is reported and
/// the error returned; the outputs stay on.
pub fn flush() -> Result<()> {
    let mut st = lock(&STATE);
    st.adopt_process();
    st.flush().map_err(Error::Io)
}

/// Which outputs are on: (perf map path, jitdump path).
pub fn outputs() -> (Option<PathBuf>, Option<PathBuf>) {
    let st = lock(&STATE);
    if st.pid != std::process::id() {
        return (None, None);
    }
    (
        st.map.as_ref().map(|m| m.path().to_path_buf()),
        st.dump.as_ref().map(|d| d.path().to_path_buf()),
    )
}
