//! The C host (`tests/c/host.c`): the same JIT scenario through the C API, compiled here with
//! the system C compiler against `jit-interface/include/jit_interface.h` and the static
//! library `libjit_interface.a` (built by this test with `cargo build -p jit-interface`,
//! so a plain `cargo test` suffices). Checked under GDB, LLDB and valgrind; `nm` shows the
//! JIT interface symbols in an optimised C build and a release build of the Rust host.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::scenario::{self, Host};
use common::*;

/// `target/<profile>` of this test run (where cargo put the Rust test host).
fn profile_dir() -> PathBuf {
    testhost().parent().unwrap().to_path_buf()
}

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn cargo() -> Command {
    Command::new(option_env!("CARGO").unwrap_or("cargo"))
}

/// Builds `libjit_interface.a` for this test profile (once) and returns its path.
fn static_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let profile = profile_dir();
        let target = profile.parent().unwrap();
        let mut c = cargo();
        c.args(["build", "-p", "jit-interface", "--lib", "--target-dir"])
            .arg(target)
            .current_dir(workspace_root());
        if profile.file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        let out = c.output().expect("run cargo build");
        assert!(
            out.status.success(),
            "cargo build -p jit-interface failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lib = profile.join("libjit_interface.a");
        assert!(lib.exists(), "{} was not built", lib.display());
        lib
    })
}

/// Compiles the C host with `flags` (once per flag set) and returns the executable.
fn c_host(tag: &'static str, flags: &'static [&'static str]) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<Vec<(&'static str, PathBuf)>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(t, _)| *t == tag) {
        return p.clone();
    }
    let lib = static_lib();
    let out_dir = profile_dir().join("jit-gdb-c-host");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(format!("host-{tag}"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let root = workspace_root();
    let out = Command::new(&cc)
        .args(flags)
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("jit-interface/include"))
        .arg(root.join("tests/c/host.c"))
        .arg(lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        out.status.success(),
        "compiling tests/c/host.c with {cc} {flags:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    built.push((tag, exe.clone()));
    exe
}

/// The optimised C host with debug info for the host's own functions, registering ELF.
fn host() -> Option<Host> {
    if !require_tool("cc", "this C host test") || !require_tool("gdb", "this C host test") {
        return None;
    }
    Some(Host::new(
        c_host("O2g", &["-O2", "-g"]),
        &["--format", "elf"],
    ))
}

#[test]
fn c_host_runs_and_registers() {
    if !require_tool("cc", "c_host_runs_and_registers") {
        return;
    }
    let exe = c_host("O2g", &["-O2", "-g"]);
    let dir = TempDir::new("c-run");
    for mode in ["run", "unregister"] {
        let out = Command::new(&exe)
            .args(["--source-dir", dir.path().to_str().unwrap(), mode])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{mode}: {}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("registered 4 functions as ELF"), "{text}");
        assert!(text.contains("result=366 expected=366"), "{text}");
    }
    // Bad input through the C API is an error with a message, not a crash.
    let out = Command::new(&exe)
        .args(["--format", "bogus", "run"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn c_host_bt() {
    let Some(h) = host() else { return };
    scenario::backtrace(&h, "c-bt");
}

/// The host declares each JIT function's call through `jit_object_add_call_site` (two to
/// JIT functions, two to native ones by name): GDB's search for the call site a frame was
/// called from (`set debug entry-values 1`) succeeds for every frame called from JIT code.
/// A failed search names the caller (`cannot find DW_TAG_call_site ADDR in jit_second`);
/// `tests/deep_backtrace.rs` shows the same objects without call sites failing it.
#[test]
fn c_host_call_sites_are_found_by_gdb() {
    let Some(h) = host() else { return };
    let dir = TempDir::new("c-call-sites");
    let layout = h.layout(dir.path());
    let t = h
        .gdb(dir.path(), "run")
        .cmds([
            "break jit_test_break_here",
            "run",
            "set debug entry-values 1",
        ])
        .cmd("maintenance flush register-cache")
        .section("bt", ["bt -frame-arguments none"])
        .run();
    assert_chain(&t, "bt", &CHAIN, &layout);
    let bt = t.section("bt");
    eprintln!("backtrace seen:\n{bt}");
    let failed: Vec<&str> = bt
        .lines()
        .filter(|l| {
            !l.starts_with('#')
                && JIT_FUNCTIONS
                    .iter()
                    .any(|f| l.ends_with(&format!(" in {f}")) || l.contains(&format!("\"{f}\"")))
        })
        .collect();
    if !failed.is_empty() {
        t.fail(&format!(
            "searches for call sites in JIT code failed: {failed:?}"
        ));
    }
    // Successful searches print this line: at least the four calls from JIT code.
    let found = bt
        .lines()
        .filter(|l| l.trim() == "tailcall: initial:")
        .count();
    if found < 4 {
        t.fail(&format!("{found} call sites found, not 4 or more"));
    }
}

#[test]
fn c_host_break_by_name() {
    let Some(h) = host() else { return };
    scenario::break_by_name(&h, "c-break");
}

#[test]
fn c_host_up_info_frame_info_args_list() {
    let Some(h) = host() else { return };
    scenario::up_info_frame_args_list(&h, "c-up", true);
}

#[test]
fn c_host_finish() {
    let Some(h) = host() else { return };
    scenario::finish(&h, "c-finish");
}

#[test]
fn c_host_unregister() {
    let Some(h) = host() else { return };
    scenario::unregister(&h, "c-unregister");
}

#[test]
fn c_host_stepi_through_every_jit_function() {
    let Some(h) = host() else { return };
    for f in JIT_FUNCTIONS {
        scenario::step_every_instruction(&h, "c-step", f);
    }
}

#[test]
fn c_host_attach_and_gcore() {
    let Some(h) = host() else { return };
    scenario::attach_and_gcore(&h, "c-attach");
}

#[test]
fn c_host_sigsegv_core() {
    let Some(h) = host() else { return };
    scenario::crash_core(&h, "c-crash");
}

#[test]
fn c_host_lldb_bt() {
    if !require_tool("lldb", "c_host_lldb_bt") {
        return;
    }
    let Some(h) = host() else { return };
    scenario::lldb_backtrace(&h, "c-lldb");
}

#[test]
fn c_host_valgrind_no_leaks() {
    if !require_tool("cc", "c_host_valgrind_no_leaks")
        || !require_tool("valgrind", "c_host_valgrind_no_leaks")
    {
        return;
    }
    let exe = c_host("O2g", &["-O2", "-g"]);
    let dir = TempDir::new("c-valgrind");
    for mode in ["run", "unregister"] {
        let out = Command::new("valgrind")
            .args(["--leak-check=full", "--error-exitcode=1"])
            .arg(&exe)
            .args(["--source-dir", dir.path().to_str().unwrap(), mode])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "valgrind reports errors or leaks in `{mode}` ({}):\n{stdout}\n{stderr}",
            out.status
        );
        assert!(
            stdout.contains("result=366 expected=366"),
            "{stdout}\n{stderr}"
        );
        assert!(stderr.contains("ERROR SUMMARY: 0 errors"), "{stderr}");
        eprintln!(
            "valgrind {mode}: {}",
            stderr
                .lines()
                .filter(|l| l.contains("in use at exit")
                    || l.contains("definitely lost")
                    || l.contains("ERROR SUMMARY"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
}

/// `nm` shows both interface symbols, defined, in `exe`.
fn assert_jit_symbols(exe: &Path) {
    let out = Command::new("nm").arg(exe).output().expect("run nm");
    let text = String::from_utf8_lossy(&out.stdout);
    for sym in ["__jit_debug_register_code", "__jit_debug_descriptor"] {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().last() == Some(sym))
            .unwrap_or_else(|| panic!("nm {}: no {sym}", exe.display()));
        let kind = line.split_whitespace().rev().nth(1).unwrap_or("");
        assert!(
            !kind.eq_ignore_ascii_case("u"),
            "nm {}: {sym} is undefined: {line}",
            exe.display()
        );
        eprintln!("{}: {line}", exe.display());
    }
}

#[test]
fn nm_shows_jit_symbols_in_optimised_c_host() {
    if !require_tool("cc", "nm_shows_jit_symbols_in_optimised_c_host")
        || !require_tool("nm", "nm_shows_jit_symbols_in_optimised_c_host")
    {
        return;
    }
    assert_jit_symbols(&c_host("O2", &["-O2"]));
}

#[test]
fn nm_shows_jit_symbols_in_release_rust_host() {
    if !require_tool("nm", "nm_shows_jit_symbols_in_release_rust_host") {
        return;
    }
    let target = profile_dir().parent().unwrap().to_path_buf();
    let out = cargo()
        .args([
            "build",
            "--release",
            "-p",
            "jit-gdb",
            "--bin",
            "jit-gdb-testhost",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(workspace_root())
        .output()
        .expect("run cargo build --release");
    assert!(
        out.status.success(),
        "cargo build --release failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_jit_symbols(&target.join("release/jit-gdb-testhost"));
}
