//! Shared by the reader's end-to-end tests (`tests/reader_*.rs`): where the reader plugin
//! is, and GDB runs that load it. Everything else comes from the common harness.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::scenario::Host;
use crate::common::{cargo_build, test_profile, Gdb, Layout, TempDir, Transcript};

/// The reader plugin under test: `JIT_READER_SO` if set, else built (or brought up to
/// date) once per test binary with `cargo build -p jit-reader` in the test's profile, into
/// its own target directory `target/reader-tests` (see [`crate::common::cargo_build`]: the
/// reader wants jit-interface without its runtime).
pub fn reader_so() -> &'static Path {
    static SO: OnceLock<PathBuf> = OnceLock::new();
    SO.get_or_init(|| {
        if let Some(p) = std::env::var_os("JIT_READER_SO") {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "JIT_READER_SO={} is not a file", p.display());
            return p;
        }
        let dir = cargo_build("reader-tests", &test_profile(), &["-p", "jit-reader"]);
        let so = dir.join("libjitreader.so");
        assert!(
            so.is_file(),
            "{} was not built; set JIT_READER_SO to a built libjitreader.so to use that instead",
            so.display()
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
