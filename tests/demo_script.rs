//! The demo JIT through the real binary: `jit-gdb run-script` compiles a script to machine
//! code, runs it and exits with `main`'s value.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

fn jit_gdb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jit-gdb"))
        .args(args)
        .output()
        .expect("run jit-gdb")
}

fn script(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("demo_script");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn runs_main_and_exits_with_its_value() {
    let p = script(
        "exit.jg",
        "fn sq(x) { return x * x; }\nfn main() {\n  let s = 0;\n  let i = 1;\n  while i <= 3 { s = s + sq(i); i = i + 1; }\n  print(s);\n  return s;\n}\n",
    );
    let o = jit_gdb(&["run-script", p.to_str().unwrap(), "--format", "none"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "14\n");
    assert_eq!(o.status.code(), Some(14), "{}", stderr(&o));
}

#[test]
fn bundled_demo_script_succeeds() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("demo/fib.jg");
    let o = jit_gdb(&["run-script", p.to_str().unwrap(), "--format", "none"]);
    assert!(o.status.success(), "{:?} {}", o.status, stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "8\n", "fib(6)");
}

#[test]
fn crash_mode_faults_in_jit_code() {
    use std::os::unix::process::ExitStatusExt;
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("demo/fib.jg");
    let p = p.to_str().unwrap();
    let o = jit_gdb(&["run-script", p, "--format", "none", "--crash"]);
    assert_eq!(o.status.signal(), Some(libc::SIGSEGV), "{:?}", o.status);
    // Under GDB (nothing registered): the faulting instruction is the script's inline
    // `load` of the null pointer `probe` returned, in code no symbol covers.
    if !common::require_tool("gdb", "crash_mode_faults_in_jit_code (under GDB)") {
        return;
    }
    let o = Command::new("gdb")
        .args([
            "-batch", "-nx", "-ex", "run", "-ex", "x/i $pc", "-ex", "p $rax",
        ])
        .args([
            "-ex",
            "info symbol $pc",
            "--args",
            env!("CARGO_BIN_EXE_jit-gdb"),
        ])
        .args(["run-script", p, "--format", "none", "--crash"])
        .output()
        .expect("run gdb");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("SIGSEGV"), "{out}");
    assert!(out.contains("mov    (%rax),%rax"), "{out}");
    assert!(out.contains("$1 = 0\n"), "{out}");
    assert!(out.contains("No symbol matches $pc."), "{out}");
}

#[test]
fn script_errors_are_file_line_col() {
    let p = script("bad.jg", "fn main() {\n  return 1 +;\n}\n");
    let o = jit_gdb(&["run-script", p.to_str().unwrap(), "--format", "none"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "jit-gdb: {}:2:13: expected an expression, found `;`\n",
            p.display()
        )
    );
    let o = jit_gdb(&["run-script", "/nonexistent/x.jg"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("jit-gdb: cannot read script /nonexistent/x.jg: "),
        "{}",
        stderr(&o)
    );
}
