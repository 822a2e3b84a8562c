//! Errors the person at the terminal sees: each names the problem and what to do.

use std::process::{Command, Output};

fn jit_gdb(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_jit-gdb"));
    c.args(args)
        .env_remove("JIT_GDB_READER")
        .env_remove("JIT_GDB_GDB");
    c.env("XDG_CACHE_HOME", env!("CARGO_TARGET_TMPDIR"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run jit-gdb")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn gdb_missing_says_how_to_install() {
    for args in [
        &["demo", "--format", "elf"][..],
        &["-q", "--", "/bin/true"][..],
    ] {
        let o = jit_gdb(args, &[("PATH", ""), ("JIT_GDB_READER", "/bin/true")]);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert!(e.contains("GDB not found in PATH"), "{e}");
        assert!(e.contains("apt-get install gdb"), "{e}");
    }
    let o = jit_gdb(
        &["demo", "--format", "elf"],
        &[("JIT_GDB_GDB", "/nonexistent/gdb")],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("JIT_GDB_GDB is set to /nonexistent/gdb"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn reader_missing_says_how_to_build_it() {
    for args in [
        &["--reader-path"][..],
        &["demo"][..],
        &["-q", "--", "/bin/true"][..],
    ] {
        // Any GDB will do (the reader is looked for first): the test needs none installed.
        let o = jit_gdb(
            args,
            &[
                ("JIT_GDB_READER", "/nonexistent/libjitreader.so"),
                ("JIT_GDB_GDB", "/bin/true"),
            ],
        );
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert!(
            e.contains(
                "JIT_GDB_READER is set to /nonexistent/libjitreader.so, which is not a file"
            ),
            "{e}"
        );
        assert!(e.contains("cargo build -p jit-reader"), "{e}");
    }
}

#[test]
fn reader_path_prints_the_override() {
    let o = jit_gdb(&["--reader-path"], &[("JIT_GDB_READER", "/bin/true")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let want = std::fs::canonicalize("/bin/true").unwrap();
    assert_eq!(out.trim_end(), want.to_str().unwrap());
}

/// Without `JIT_GDB_READER`, the reader next to the launcher (where `cargo build` puts both).
/// The demo tests set `JIT_GDB_READER` (the reader sits next to jit-gdb only when the whole
/// workspace was built), so this lookup is checked here, on a copy of the launcher.
#[test]
fn reader_path_finds_the_reader_next_to_the_launcher() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("launcher_errors-next-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("jit-gdb");
    // A hard link, not a copy where possible: a copy is open for writing, and a test thread
    // forking meanwhile keeps it so in its child, which makes exec fail (ETXTBSY).
    let _ = std::fs::remove_file(&exe);
    if std::fs::hard_link(env!("CARGO_BIN_EXE_jit-gdb"), &exe).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_jit-gdb"), &exe).unwrap();
    }
    let reader = dir.join("libjitreader.so");
    std::fs::write(&reader, b"").unwrap();
    // The launcher names it by its own path, which the kernel gives with links resolved.
    let want = std::fs::canonicalize(&reader).unwrap();
    let o = Command::new(&exe)
        .arg("--reader-path")
        .env_remove("JIT_GDB_READER")
        .output()
        .expect("run the copied jit-gdb");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim_end(),
        want.to_str().unwrap()
    );
}

#[test]
fn core_with_unreadable_files() {
    let o = jit_gdb(&["core", "/nonexistent/prog", "/nonexistent/core"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.starts_with("jit-gdb: cannot read program /nonexistent/prog: "),
        "{e}"
    );
    let exe = env!("CARGO_BIN_EXE_jit-gdb");
    let o = jit_gdb(&["core", exe, "/nonexistent/core"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("jit-gdb: cannot read core file /nonexistent/core: "));
    let o = jit_gdb(&["core", exe, "/tmp"], &[]);
    assert!(
        stderr(&o).contains("is not a regular file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn usage_errors_exit_2_and_help_works() {
    let o = jit_gdb(&["demo", "--format", "stabs"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "jit-gdb: unknown format \"stabs\": use compact or elf (see `jit-gdb --help`)\n"
    );
    let o = jit_gdb(&["--help"], &[]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    for mode in [
        "jit-gdb demo",
        "jit-gdb core PROGRAM CORE",
        "--reader-path",
        "JIT_GDB_READER",
    ] {
        assert!(help.contains(mode), "help lacks {mode}:\n{help}");
    }
}
