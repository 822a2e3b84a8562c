//! `jit-gdb demo` under real GDB: the backtrace from a native callback goes through the
//! JIT-compiled script functions, with the script's file and lines, down to the native
//! code that called the script's `main`.

mod common;
mod reader_support;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::require_tool;

/// `jit-gdb ARGS`, with the reader under test (`JIT_GDB_READER`: cargo puts the reader next
/// to jit-gdb only when the workspace was built, not for `cargo test -p jit-gdb`).
fn jit_gdb(args: &[&str]) -> Output {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("launcher_demo");
    Command::new(env!("CARGO_BIN_EXE_jit-gdb"))
        .args(args)
        .env("XDG_CACHE_HOME", &cache)
        .env("JIT_GDB_READER", reader_support::reader_so())
        .output()
        .expect("run jit-gdb")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The bundled script's line that contains `needle` (1-based), so the expectations follow
/// the script rather than being copied from output.
fn line_of(needle: &str) -> usize {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/demo/fib.jg")).unwrap();
    src.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("demo/fib.jg has no line with {needle:?}"))
        + 1
}

/// Checks the backtrace in `out`: leaf <- fib ... <- main (JIT, script lines), then the
/// native caller.
fn check_backtrace(out: &str, with_args: bool) {
    let frames: Vec<&str> = out.lines().filter(|l| l.starts_with('#')).collect();
    let find = |name: &str, line: usize| {
        let args = if with_args { "(n=" } else { "(" };
        let want_fn = if name == "main" {
            "main ()".to_string()
        } else {
            format!("{name} {args}")
        };
        let want_at = format!("fib.jg:{line}");
        frames
            .iter()
            .position(|f| f.contains(&format!(" {want_fn}")) && f.ends_with(&want_at))
            .unwrap_or_else(|| panic!("no frame `{want_fn}` at {want_at} in:\n{out}"))
    };
    let leaf = find("leaf", line_of("= probe(n);"));
    let fib_leaf = find("fib", line_of("return leaf(n)"));
    let fib_rec = find("fib", line_of("fib(n - 1) + fib(n - 2)"));
    let main = find("main", line_of("fib(6)"));
    assert!(
        leaf < fib_leaf && fib_leaf < fib_rec && fib_rec < main,
        "{out}"
    );
    // Unwinding continues out of the JIT code into the native code that called `main`.
    assert!(
        frames[main + 1..]
            .iter()
            .any(|f| f.contains("LoadedScript::call")),
        "the backtrace stops at the JIT main:\n{out}"
    );
}

#[test]
fn demo_elf_backtrace_through_jit_frames() {
    if !require_tool("gdb", "demo_elf_backtrace_through_jit_frames") {
        return;
    }
    let o = jit_gdb(&["demo", "--format", "elf"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    check_backtrace(&out, true);
    assert!(out.contains("exited normally"), "{out}");
}

#[test]
fn demo_compact_backtrace_through_jit_frames() {
    if !require_tool("gdb", "demo_compact_backtrace_through_jit_frames") {
        return;
    }
    // A script newer than the program (as at the first run, which writes it): GDB would
    // warn that the source is more recent than the executable, for reader-made functions.
    let script = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("launcher_demo/jit-gdb/fib.jg");
    if let Ok(f) = std::fs::File::options().write(true).open(&script) {
        // (A minute ahead: GDB compares whole seconds, and the program may be just built.)
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        f.set_modified(later).unwrap();
    }
    let o = jit_gdb(&["demo", "--format", "compact"]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    check_backtrace(&out, false);
    assert!(out.contains("exited normally"), "{out}");
    assert!(!out.contains("more recent than executable"), "{out}");
}

#[test]
fn demo_crash_post_mortem() {
    if !require_tool("gdb", "demo_crash_post_mortem") {
        return;
    }
    for format in ["elf", "compact"] {
        let o = jit_gdb(&["demo", "--format", format, "--crash"]);
        let out = text(&o);
        assert!(out.contains("SIGSEGV"), "{out}");
        let frames: Vec<&str> = out.lines().filter(|l| l.starts_with('#')).collect();
        // Frame 0 is the faulting `load` in `leaf`, on the line after the probe call.
        let load_line = format!("fib.jg:{}", line_of("return load(p);"));
        assert!(
            frames
                .first()
                .is_some_and(|f| f.contains(" leaf (") && f.ends_with(&load_line)),
            "{format}: frame 0 is not leaf at {load_line}:\n{out}"
        );
        assert!(
            frames.iter().any(|f| f.contains(" main ()")),
            "{format}: no JIT main in the post-mortem backtrace:\n{out}"
        );
    }
}

/// `jit-gdb core PROGRAM CORE` on the core the crashing demo left behind.
#[test]
fn core_report_shows_jit_frames() {
    if !require_tool("gdb", "core_report_shows_jit_frames") {
        return;
    }
    let o = jit_gdb(&["demo", "--crash", "--keep-core"]);
    let out = text(&o);
    let core = out
        .lines()
        .find_map(|l| l.strip_prefix("The core file is kept: "))
        .unwrap_or_else(|| panic!("no kept core in:\n{out}"));
    let core = PathBuf::from(core);
    let o = jit_gdb(&[
        "core",
        env!("CARGO_BIN_EXE_jit-gdb"),
        core.to_str().unwrap(),
    ]);
    let report = text(&o);
    let _ = std::fs::remove_dir_all(core.parent().unwrap());
    assert!(o.status.success(), "{report}");
    let thread = report
        .find("Thread 1 ")
        .unwrap_or_else(|| panic!("no per-thread backtrace:\n{report}"));
    let bt = &report[thread..];
    let load_line = format!("fib.jg:{}", line_of("return load(p);"));
    assert!(
        bt.lines()
            .any(|l| l.starts_with("#0 ") && l.contains(" leaf (") && l.ends_with(&load_line)),
        "{report}"
    );
    assert!(bt.contains(" main () at "), "{report}");
    // `jit list` after the backtraces: every script function, read from the core.
    let list = &report[report
        .find("(gdb) jit list")
        .unwrap_or_else(|| panic!("no JIT function list:\n{report}"))..];
    for name in ["leaf", "fib", "main"] {
        assert!(
            list.lines()
                .any(|l| l.split_whitespace().nth(2) == Some(name) && l.ends_with("fib.jg")),
            "{name} missing from the JIT function list:\n{report}"
        );
    }
}

/// The rust-gdb-style mode: GDB with the reader loaded, the user's GDB arguments, and the
/// program after `--`.
#[test]
fn gdb_wrapper_loads_the_reader() {
    if !require_tool("gdb", "gdb_wrapper_loads_the_reader") {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/demo/fib.jg");
    let exe = env!("CARGO_BIN_EXE_jit-gdb");
    let o = jit_gdb(&[
        "-batch",
        "-nx",
        "-ex",
        "run",
        "-ex",
        "bt 3",
        "--",
        exe,
        "run-script",
        script,
        "--crash",
    ]);
    let out = text(&o);
    assert!(out.contains("SIGSEGV"), "{out}");
    let load_line = format!("fib.jg:{}", line_of("return load(p);"));
    let fib_line = format!("fib.jg:{}", line_of("return leaf(n)"));
    let frames: Vec<&str> = out.lines().filter(|l| l.starts_with('#')).collect();
    assert!(
        frames
            .iter()
            .any(|f| f.starts_with("#0 ") && f.contains(" leaf (") && f.ends_with(&load_line)),
        "{out}"
    );
    assert!(
        frames
            .iter()
            .any(|f| f.starts_with("#1 ") && f.contains(" fib (") && f.ends_with(&fib_line)),
        "{out}"
    );
}
