//! Shared by the reader's end-to-end tests (`tests/reader_*.rs`): where the reader plugin
//! is, and GDB runs that load it. Everything else comes from the common harness.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::scenario::Host;
use crate::common::{Gdb, Layout, TempDir, Transcript};

/// The reader plugin under test: `JIT_READER_SO` if set, else built (or brought up to
/// date) once per test binary with `cargo build -p jit-reader` in the test's profile, into
/// its own target directory `target/reader-tests` beside this test executable's. A separate
/// directory because jit-interface (a cdylib and staticlib too) has unhashed artifact names:
/// building the reader alone, with other features, in `target/` would overwrite the
/// jit-interface library the rest of the test run (its doctests) uses.
pub fn reader_so() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| {
        if let Some(p) = std::env::var_os("JIT_READER_SO") {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "JIT_READER_SO={} is not a file", p.display());
            return p;
        }
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable in target/<profile>/deps");
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("debug")
            .to_string();
        let target_dir = profile_dir
            .parent()
            .expect("target dir")
            .join("reader-tests");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "jit-reader", "--target-dir"])
            .arg(&target_dir)
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
        let so = target_dir.join(&profile).join("libjitreader.so");
        let status = cmd.status();
        assert!(
            matches!(status, Ok(s) if s.success()) && so.is_file(),
            "building the reader with `cargo build -p jit-reader --target-dir {}` failed ({status:?}); \
             set JIT_READER_SO to a built libjitreader.so to use that instead",
            target_dir.display()
        );
        so
    })
}

/// The GDB command that loads the reader (absolute path, as GDB's own tests do).
pub fn load_cmd() -> String {
    format!("jit-reader-load {}", reader_so().display())
}

/// The Rust test host registering compact records.
pub fn compact_host() -> Host {
    Host::rust("compact")
}

/// GDB on the host in `mode` with the reader loaded before the program starts.
pub fn gdb(h: &Host, dir: &Path, mode: &str) -> Gdb {
    h.gdb(dir, mode).cmd(load_cmd())
}

/// A scratch directory plus the host's layout in it.
pub fn setup(h: &Host, tag: &str) -> (TempDir, Layout) {
    let dir = TempDir::new(tag);
    let layout = h.layout(dir.path());
    (dir, layout)
}

/// The first `$N = 0x...` value in a section.
#[track_caller]
pub fn hex_value(t: &Transcript, section: &str) -> u64 {
    t.section(section)
        .lines()
        .find_map(|l| {
            l.split(" = ")
                .nth(1)
                .and_then(|v| crate::common::parse_hex(v.split_whitespace().next()?))
        })
        .unwrap_or_else(|| t.fail(&format!("no hex value in section {section}")))
}

/// GDB may not print a message about the reader: loading is silent.
#[track_caller]
pub fn assert_no_reader_noise(t: &Transcript) {
    for bad in [
        "jit-reader: internal error",
        "Reader not GPL compatible",
        "Could not locate initialization function",
    ] {
        t.assert_not_contains(None, bad);
    }
}

/// Runs `g` like [`Gdb::run`], with `JIT_READER_DEBUG=1` in GDB's environment only (the
/// reader then reports every entry read and every frame unwound).
pub fn run_with_reader_debug(g: &Gdb) -> Transcript {
    let mut cmd = Command::new("gdb");
    cmd.arg("-batch").arg("-nx");
    for p in crate::common::GDB_PRELUDE {
        cmd.arg("-iex").arg(p);
    }
    for c in &g.commands {
        cmd.arg("-ex").arg(c);
    }
    cmd.args(&g.args)
        .current_dir(&g.dir)
        .envs(g.env.iter().map(|(k, v)| (k, v)))
        .env("JIT_READER_DEBUG", "1");
    crate::common::run_captured(cmd, &g.dir)
}
