//! The C host (`testhosts/c/host.c`): the same JIT scenario through the C API. The debugger
//! checks run `jit-gdb-c-testhost`, which testhosts/build.rs compiles with the cc crate
//! (-O2 -g) and links with the jit-interface crate; `c_host_links_as_the_readme_says` links
//! the same file as the README tells C users to, against `libjit_interface.a` and `.so`.
//! Checked under GDB, LLDB and valgrind; `nm` shows the JIT interface symbols in an
//! optimised C build and a release build of the Rust host.

mod common;

use std::path::Path;
use std::process::Command;

use common::scenario::{self, Host};
use common::*;

/// The C host registering ELF.
fn c_host() -> Host {
    Host::new(c_testhost(), &["--format", "elf"])
}

/// [`c_host`] for a GDB check.
fn host() -> Option<Host> {
    require_tool("gdb", "this C host test").then(c_host)
}

/// Runs `exe` in `run` and `unregister` modes: the JIT code computes the right result.
fn check_runs(exe: &Path, dir: &Path) {
    for mode in ["run", "unregister"] {
        let out = Command::new(exe)
            .args(["--source-dir", dir.to_str().unwrap(), mode])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{} {mode}: {}\n{text}\n{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("registered 4 functions as ELF"), "{text}");
        assert!(text.contains("result=366 expected=366"), "{text}");
    }
}

#[test]
fn c_host_runs_and_registers() {
    let exe = c_testhost();
    let dir = TempDir::new("c-run");
    check_runs(&exe, dir.path());
    // A bad option is a usage error, not a crash.
    let out = Command::new(&exe)
        .args(["--format", "bogus", "run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// The README's two link lines for C programs, static and shared, on the C host compiled
/// with `cc -O2` (no debug info): both programs run the scenario, and `nm` shows the JIT
/// interface symbols defined in the static one (an optimised link keeps them).
#[test]
fn c_host_links_as_the_readme_says() {
    let test = "c_host_links_as_the_readme_says";
    if !require_tool("cc", test) || !require_tool("nm", test) {
        return;
    }
    let libs = testhosts_dir();
    let dir = TempDir::new("c-link");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let compile = |exe: &Path, link: &[String]| {
        let out = Command::new(&cc)
            .args(["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(root.join("jit-interface/include"))
            .arg(root.join("testhosts/c/host.c"))
            .args(link)
            .arg("-o")
            .arg(exe)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
        assert!(
            out.status.success(),
            "compiling testhosts/c/host.c with {cc} {link:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let lib = libs.display();
    let static_exe = dir.join("host-static");
    compile(
        &static_exe,
        &[
            format!("{lib}/libjit_interface.a"),
            "-lpthread".into(),
            "-ldl".into(),
            "-lm".into(),
        ],
    );
    check_runs(&static_exe, dir.path());
    assert_jit_symbols(&static_exe);
    let shared_exe = dir.join("host-shared");
    compile(
        &shared_exe,
        &[
            format!("-L{lib}"),
            "-ljit_interface".into(),
            format!("-Wl,-rpath,{lib}"),
        ],
    );
    check_runs(&shared_exe, dir.path());
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
    scenario::lldb_backtrace(&c_host(), "c-lldb");
}

#[test]
fn c_host_valgrind_no_leaks() {
    if !require_tool("valgrind", "c_host_valgrind_no_leaks") {
        return;
    }
    let exe = c_testhost();
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
fn nm_shows_jit_symbols_in_release_rust_host() {
    if !require_tool("nm", "nm_shows_jit_symbols_in_release_rust_host") {
        return;
    }
    let release = cargo_build(
        "testhosts",
        "release",
        &["-p", "jit-gdb-testhosts", "--bin", "jit-gdb-testhost"],
    );
    assert_jit_symbols(&release.join("jit-gdb-testhost"));
}
