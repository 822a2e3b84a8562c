//! 8 threads registering and unregistering single functions concurrently with GDB attached
//! (the scale host, `jit-interface/examples/scale_host.rs`): no deadlock, and at the end GDB
//! knows exactly the live set. Each of the host's 512 code slots is looked up with
//! `info line *ADDR`: a live slot must name the function registered there now, a free slot
//! nothing (its earlier functions were unregistered). Small registrations are consolidated
//! into batch entries, so this covers merging and rebuilding batches while GDB watches, and
//! (compact) the switch from compact to ELF entries once the reader budget is spent. The
//! same churn without a debugger, then GDB attaching and reading a core file, covers the
//! quiet paths (tombstones; growing ELF payloads rolled back or rewritten as objects leave)
//! as attach and core files see them, and LLDB attaching reads the same growing ELF
//! payloads.

mod common;
mod reader_support;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use reader_support::reader_so;

/// Operations per thread: 600 in the test suite; `JIT_GDB_CHURN_OPS=10000` runs the issue's
/// full 8 x 10,000 (`scripts/bench.sh` does, about a minute and a half per format).
fn ops() -> u32 {
    match std::env::var("JIT_GDB_CHURN_OPS") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("JIT_GDB_CHURN_OPS={v}: not a number of operations")),
        Err(_) => 600,
    }
}

/// `target/<profile>/examples/scale_host`, built on first use.
fn scale_host() -> PathBuf {
    interface_example("scale_host")
}

fn churn_under_gdb(format: &str, threads: u32, ops: u32) {
    let dir = TempDir::new(&format!("scale-churn-{format}"));
    let queries = dir.join("queries.gdb");
    let mut cmd = Command::new("gdb");
    cmd.args(["-batch", "-nx"]);
    if format == "compact" {
        cmd.arg("-ex")
            .arg(format!("jit-reader-load {}", reader_so().display()));
    }
    cmd.args(["-ex", "break scale_host_checkpoint", "-ex", "run", "-ex"])
        .arg(format!("source {}", queries.display()))
        .arg("--args")
        .arg(scale_host())
        .args(["churn", &threads.to_string(), &ops.to_string(), format])
        .env("SCALE_HOST_QUERIES", &queries)
        // Small compact registrations get ELF entries once this many functions were read
        // through the reader: cross that line about halfway (about half the operations
        // are registrations).
        .env("JIT_GDB_READER_BUDGET", (threads * ops / 4).to_string())
        .current_dir(dir.path());
    let out = cmd.output().expect("run gdb");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let q = std::fs::read_to_string(&queries)
        .unwrap_or_else(|e| panic!("the host wrote no query file ({e}):\n{text}"));
    check_slots(&q, &text, threads);
}

/// Checks GDB's answers in `text` to the slot queries `q` (the host's `SCALE_HOST_QUERIES`
/// file, `threads` x 64 slots).
fn check_slots(q: &str, text: &str, threads: u32) {
    let expected = slot_queries(q);
    assert_eq!(expected.len(), 64 * threads as usize, "one query per slot");
    let live = expected.iter().filter(|(_, n, _)| n != "-").count();
    assert!(live > 0, "the churn left nothing registered:\n{text}");
    let wrong = wrong_slot_answers(&expected, text, 10);
    assert!(
        wrong.is_empty(),
        "GDB's view differs from the live set ({live} live) at {} slot(s):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// The churn host's environment for `files` source files (`SCALE_HOST_FILES`; none: its
/// default).
fn files_env(files: &Option<String>) -> Vec<(&str, &str)> {
    files
        .iter()
        .map(|n| ("SCALE_HOST_FILES", n.as_str()))
        .collect()
}

/// The same churn without a debugger (compact records appended in place and tombstoned;
/// small ELF objects appended in place to growing payloads, rolled back or rewritten as
/// objects leave), then GDB attaches, and then reads a core file of the process: both know
/// exactly the live set. In between, still attached, GDB lets the host unregister every
/// other live object (rewriting batches made without a debugger: ELF objects read back from
/// their payloads) and knows exactly the new live set.
///
/// `files`: the functions' lines are in that many source files (`SCALE_HOST_FILES`), slot by
/// slot (default: two, by thread).
fn churn_then_attach(format: &str, threads: u32, ops: u32, files: Option<u32>) {
    let dir = TempDir::new(&format!("scale-attach-{format}"));
    let queries = dir.join("queries.gdb");
    let core = dir.join("churn.core");
    // The host writes its queries there (`queries.gdb` in its directory).
    let (t, o) = (threads.to_string(), ops.to_string());
    let files = files.map(|n| n.to_string());
    let env = files_env(&files);
    let host = WaitingHost::start_with(&scale_host(), &["churn", &t, &o, format], &env, dir.path());
    let gdb = |target: &[String]| {
        let mut cmd = Command::new("gdb");
        cmd.args(["-batch", "-nx"]);
        if format == "compact" {
            cmd.arg("-ex")
                .arg(format!("jit-reader-load {}", reader_so().display()));
        }
        cmd.args(target).current_dir(dir.path());
        let out = cmd.output().expect("run gdb");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let source = format!("source {}", queries.display());
    // Then, with GDB still attached, the host unregisters every other live object, half of
    // them one by one and half in one `unregister_many` call: the batches filled without a
    // debugger are rewritten (ELF: objects read back from their growing payloads), and GDB
    // must follow.
    let after = dir.join("queries2.gdb");
    let attached = gdb(&[
        "-p".into(),
        host.pid.to_string(),
        "-ex".into(),
        source.clone(),
        "-ex".into(),
        format!("gcore {}", core.display()),
        "-ex".into(),
        "break scale_host_checkpoint".into(),
        "-ex".into(),
        "set language c".into(),
        "-ex".into(),
        "set var *(unsigned char *) &SCALE_HOST_GO = 1".into(),
        "-ex".into(),
        "continue".into(),
        "-ex".into(),
        "echo PHASE-2\\n".into(),
        "-ex".into(),
        format!("source {}", after.display()),
        "-ex".into(),
        "kill".into(),
    ]);
    drop(host);
    let q = std::fs::read_to_string(&queries)
        .unwrap_or_else(|e| panic!("the host wrote no query file ({e}):\n{attached}"));
    let (before_go, after_go) = attached
        .split_once("PHASE-2\n")
        .unwrap_or_else(|| panic!("GDB did not get to the second phase:\n{attached}"));
    check_slots(&q, before_go, threads);
    let q2 = std::fs::read_to_string(&after)
        .unwrap_or_else(|e| panic!("the host wrote no second query file ({e}):\n{attached}"));
    assert!(
        q2.lines().filter(|l| l.ends_with(" -")).count()
            > q.lines().filter(|l| l.ends_with(" -")).count(),
        "nothing was unregistered under GDB"
    );
    check_slots(&q2, after_go, threads);
    assert!(core.exists(), "gcore wrote no core file:\n{attached}");
    let post_mortem = gdb(&[
        "-ex".into(),
        source,
        scale_host().display().to_string(),
        core.display().to_string(),
    ]);
    check_slots(&q, &post_mortem, threads);
}

#[test]
fn scale_churn_without_debugger_then_attach_and_core_elf() {
    if require_tool("gdb", "scale_churn_attach_elf") {
        churn_then_attach("elf", 4, 3000, None);
    }
}

/// The same with the functions' lines in 19 source files, slot by slot: more files in turns
/// than a growing payload keeps compile units open for, so units are opened, joined, rolled
/// back, and functions of files that have none get units of their own, all the time.
#[test]
fn scale_churn_of_many_files_without_debugger_then_attach_and_core_elf() {
    if require_tool("gdb", "scale_churn_attach_many_files_elf") {
        churn_then_attach("elf", 4, 3000, Some(19));
    }
}

#[test]
fn scale_churn_without_debugger_then_attach_and_core_compact() {
    if require_tool("gdb", "scale_churn_attach_compact") {
        churn_then_attach("compact", 4, 3000, None);
    }
}

#[test]
fn scale_churn_8_threads_elf_gdb_knows_exactly_the_live_set() {
    if require_tool("gdb", "scale_churn_elf") {
        churn_under_gdb("elf", 8, ops());
    }
}

#[test]
fn scale_churn_8_threads_compact_gdb_knows_exactly_the_live_set() {
    if require_tool("gdb", "scale_churn_compact") {
        churn_under_gdb("compact", 8, ops());
    }
}

/// The ELF churn without a debugger, then LLDB attaches (its own GDB JIT loader reads the
/// descriptor's list: the growing payloads, as rolled back and rewritten) and looks up every
/// slot, and then reads a core file of the process (written by GDB's `gcore`): a live slot
/// names the function registered there now, with its source file, a free one no JIT
/// function.
#[test]
fn scale_churn_without_debugger_then_lldb_attach_and_core_elf() {
    churn_then_lldb("scale_churn_lldb_attach_elf", None);
}

/// The same with the slots' lines in 19 source files (see
/// `scale_churn_of_many_files_without_debugger_then_attach_and_core_elf`).
#[test]
fn scale_churn_of_many_files_without_debugger_then_lldb_attach_and_core_elf() {
    churn_then_lldb("scale_churn_lldb_attach_many_files_elf", Some(19));
}

/// See `scale_churn_without_debugger_then_lldb_attach_and_core_elf`; `files` as in
/// `churn_then_attach`.
fn churn_then_lldb(test: &str, files: Option<u32>) {
    if !require_tool("lldb", test) {
        return;
    }
    let threads = 4;
    let dir = TempDir::new("scale-lldb-attach");
    let files = files.map(|n| n.to_string());
    let env = files_env(&files);
    let host = WaitingHost::start_with(
        &scale_host(),
        &["churn", &threads.to_string(), "3000", "elf"],
        &env,
        dir.path(),
    );
    let q = std::fs::read_to_string(dir.join("queries.gdb"))
        .unwrap_or_else(|e| panic!("the host wrote no query file ({e})"));
    // `# EXPECT ADDR NAME FILE`.
    let expected: Vec<(&str, &str, &str)> = q
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("# EXPECT ")?.split(' ');
            Some((f.next()?, f.next()?, f.next()?))
        })
        .collect();
    assert_eq!(expected.len(), 64 * threads, "one query per slot");
    // A lookup that finds nothing is an error, which would end a batch of `-o` commands.
    let lookups = dir.join("lookups.lldb");
    let text: String = (expected.iter())
        .map(|(addr, ..)| format!("image lookup -a {addr}\n"))
        .collect();
    std::fs::write(&lookups, text).expect("write the LLDB commands");
    let lldb = |target: &[String], last: &[&str]| {
        let mut cmd = Command::new("lldb");
        cmd.args(["--no-lldbinit", "--batch"])
            .args(["-O", "settings set plugin.jit-loader.gdb.enable on"])
            .args(target)
            .arg("-o")
            .arg(format!("command source -e false {}", lookups.display()))
            .args(last)
            .current_dir(dir.path());
        let out = cmd.output().expect("run lldb");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let attached = lldb(&["-p".into(), host.pid.to_string()], &["-o", "detach"]);
    check_lldb_slots(&expected, &attached);
    if !require_tool("gdb", &format!("{test}_core")) {
        return;
    }
    let core = dir.join("churn.core");
    let gcore = Command::new("gdb")
        .args(["-batch", "-nx", "-p", &host.pid.to_string(), "-ex"])
        .arg(format!("gcore {}", core.display()))
        .output()
        .expect("run gdb");
    drop(host);
    assert!(
        core.exists(),
        "gcore wrote no core file:\n{}",
        String::from_utf8_lossy(&gcore.stderr)
    );
    let post_mortem = lldb(
        &[
            "-c".into(),
            core.display().to_string(),
            scale_host().display().to_string(),
        ],
        &[],
    );
    check_lldb_slots(&expected, &post_mortem);
}

/// Checks LLDB's answers in `text` to `image lookup -a ADDR` for every `(ADDR, NAME|-,
/// FILE|-)`.
fn check_lldb_slots(expected: &[(&str, &str, &str)], text: &str) {
    let mut wrong = Vec::new();
    let mut live = 0;
    for (addr, name, file) in expected {
        let marker = format!("(lldb) image lookup -a {addr}\n");
        let at = text
            .find(&marker)
            .unwrap_or_else(|| panic!("no answer for slot {addr}:\n{text}"));
        let rest = &text[at + marker.len()..];
        let answer = &rest[..rest.find("(lldb) ").unwrap_or(rest.len())];
        let ok = if *name == "-" {
            !answer.contains("JIT(")
        } else {
            live += 1;
            // `Summary: JIT(0x...)`NAME at FILE:LINE`: the function's first line, 10.
            answer.contains(&format!("`{name} at {file}:10"))
        };
        if !ok {
            wrong.push(format!(
                "{addr}: host has {name} in {file}, LLDB says `{}`",
                answer.trim()
            ));
        }
    }
    assert!(live > 0, "the churn left nothing registered:\n{text}");
    assert!(
        wrong.is_empty(),
        "LLDB's view differs from the live set ({live} live) at {} slot(s):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
