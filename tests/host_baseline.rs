//! The test host itself, without any registration: its JIT code runs and computes the right
//! result, crash mode faults inside JIT code, and GDB knows nothing about unregistered JIT
//! code (the baseline every registration test improves on).

mod common;

use std::process::Command;

use common::*;

#[test]
fn host_runs_jit_code_and_checks_its_result() {
    let dir = TempDir::new("baseline-run");
    let d = dir.path().to_str().unwrap();
    let out = Command::new(testhost())
        .args([
            "--format",
            "none",
            "--source",
            "file",
            "--source-dir",
            d,
            "run",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{text}", out.status);
    let line = text
        .lines()
        .find(|l| l.contains("result="))
        .unwrap_or_else(|| panic!("no result line:\n{text}"));
    let (got, want) = line
        .split_once("result=")
        .unwrap()
        .1
        .split_once(" expected=")
        .unwrap();
    assert_eq!(got, want, "{text}");
    let layout = Layout::parse(&text);
    let names: Vec<&str> = layout.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, JIT_FUNCTIONS, "{text}");
    // The pseudo source the line rows refer to was written, and every row names a real line.
    let src = std::fs::read_to_string(&layout.functions[0].file).unwrap();
    for f in &layout.functions {
        for &(_, line) in &f.lines {
            assert!(line as usize <= src.lines().count(), "{f:?}");
        }
        assert!(
            src.lines()
                .any(|l| l.contains(&format!("function {}(", f.name))),
            "{} not in the source",
            f.name
        );
    }
}

#[test]
fn help_lists_the_modes() {
    let out = Command::new(testhost()).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for m in ["run", "wait", "crash", "unregister", "layout"] {
        assert!(
            text.contains(&format!("\n  {m} ")),
            "mode {m} missing:\n{text}"
        );
    }
    let out = Command::new(testhost()).arg("fly").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown mode `fly`"));
}

#[test]
fn crash_mode_faults_inside_jit_code() {
    use std::os::unix::process::ExitStatusExt;
    let dir = TempDir::new("baseline-crash");
    let out = Command::new(testhost())
        .args(["--format", "none", "crash"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{:?}", out);
}

#[test]
fn gdb_knows_nothing_about_unregistered_jit_code() {
    if !require_tool("gdb", "gdb_knows_nothing_about_unregistered_jit_code") {
        return;
    }
    let dir = TempDir::new("baseline-gdb");
    let d = dir.path().to_str().unwrap();
    let args = ["--format", "none", "--source-dir", d];
    let layout = Layout::of(&testhost(), &args);
    let middle = layout.get("jit_middle").start;
    let t = Gdb::program(&testhost(), &[&args[..], &["run"]].concat(), dir.path())
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("bt", ["bt"])
        .section("sym", [format!("info symbol {middle:#x}")])
        .run();
    let frames = t.gdb_bt("bt");
    if !frames.first().is_some_and(|f| f.is("jit_test_break_here")) {
        t.fail("did not stop in jit_test_break_here");
    }
    // The caller is JIT code that nobody described: GDB has no name for it.
    if frames.get(1).map(|f| f.function.as_str()) != Some("??") {
        t.fail("frame #1 (unregistered jit_second) should be unknown");
    }
    t.assert_contains(Some("sym"), "No symbol matches");
}
