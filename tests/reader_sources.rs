//! Reader-made code whose source file is missing, as real runtimes have it (eval'd code, a
//! REPL, scripts fetched over a network, a core opened on another machine). GDB 10–14
//! dereference a null BFD whenever they cannot open such a symtab's file; the reader gives
//! every symtab a file GDB can open (see `jit_reader::sources`), so none of the commands
//! that crashed GDB 13 does: `frame`, `up`, `finish`, stops in JIT code (a breakpoint, a
//! SIGSEGV), `list *ADDR`, `disassemble /s`, `info sources`, `set filename-display
//! absolute` then `bt`, Python's `Symtab.fullname()`, MI's `fullname` fields — live, in a
//! core opened in another directory, with the reader loaded bare (a user's own
//! `.gdbinit`) or by the launcher. Text registered with the code is what `list` shows, a
//! real file still wins over it, and a cache that cannot be written only costs the text.

mod common;
mod reader_support;

use std::path::Path;
use std::process::Command;

use common::scenario::{assert_listing, chain_from, kernel_core, Host};
use common::*;
use reader_support::*;

fn have_gdb(test: &str) -> bool {
    require_tool("gdb", test)
}

/// The compact host with its source in mode `source` (absent, file or text).
fn host(source: &str) -> Host {
    Host::new(testhost(), &["--format", "compact", "--source", source])
}

/// The pseudo source's text, as the host writes it with `--source file`.
fn scenario_text() -> String {
    let dir = TempDir::new("scenario-text");
    let layout =
        Host::new(testhost(), &["--format", "compact", "--source", "file"]).layout(dir.path());
    std::fs::read_to_string(&layout.functions[0].file).expect("the host wrote its source")
}

/// GDB lived to the end of the session: no fatal signal, the last marker reached, exit 0.
#[track_caller]
fn assert_gdb_alive(t: &Transcript) {
    for bad in [
        "Fatal signal",
        "internal-error",
        "A problem internal to GDB",
    ] {
        t.assert_not_contains(None, bad);
    }
    let _ = t.section("end");
    if t.timed_out || !t.status.is_some_and(|s| s.success()) {
        t.fail("GDB did not exit normally");
    }
}

fn end(g: Gdb) -> Gdb {
    g.section("end", ["echo alive\\n"])
}

/// The placeholder line for line `n` of the scenario's source.
fn placeholder_line(n: u32) -> String {
    format!("{n}\tjit_scenario.jit:{n}: source not available")
}

#[test]
fn missing_source_every_command_that_crashed_gdb_13_works_live() {
    if !have_gdb("missing_source_live") {
        return;
    }
    let h = host("absent");
    let (dir, layout) = setup(&h, "src-live");
    assert!(!Path::new(&layout.functions[0].file).exists());
    let second = layout.get("jit_second");
    let middle = layout.get("jit_middle");
    // The instruction after jit_second's call (where `finish` returns, line 19) and the
    // next one.
    let after_call = second.start + second.insns[5];
    let next = second.start + second.insns[6];
    assert_eq!(second.line_at(after_call), Some(19));
    let t = end(gdb(&h, dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("frame", ["frame 1"])
        .section("up", ["up"])
        .section("list", [format!("list *{:#x}", middle.start + 16)])
        .section(
            "disassemble",
            [format!(
                "disassemble /s {:#x},{:#x}",
                second.start,
                second.start + second.size
            )],
        )
        .section(
            "fullname",
            [
                "frame 1",
                "python print('fullname=' + gdb.selected_frame().find_sal().symtab.fullname())",
            ],
        )
        .section("absolute", ["set filename-display absolute", "bt"])
        .cmd("set filename-display relative")
        .section("finish", ["frame 0", "finish"])
        .section("break", [format!("break *{next:#x}"), "continue".into()])
        .section("sources", ["info sources jit_"]))
    .run();
    assert_gdb_alive(&t);
    assert_no_reader_noise(&t);
    // Every place that shows a source line shows the placeholder's (true) line.
    t.assert_contains(Some("frame"), &placeholder_line(18));
    t.assert_contains(Some("list"), &placeholder_line(8));
    t.assert_contains(Some("disassemble"), "source not available");
    let full = t
        .section("fullname")
        .lines()
        .find_map(|l| l.strip_prefix("fullname="))
        .unwrap_or_else(|| t.fail("no fullname printed"));
    let text = std::fs::read_to_string(full).unwrap_or_else(|e| t.fail(&format!("{full}: {e}")));
    assert!(
        text.contains("jit_scenario.jit:18: source not available"),
        "{text}"
    );
    assert_chain(&t, "absolute", &CHAIN, &layout);
    t.assert_contains(Some("finish"), "Value returned");
    t.assert_contains(Some("finish"), "jit_second () at ");
    t.assert_contains(Some("finish"), &placeholder_line(19));
    t.assert_contains(Some("break"), &format!("{next:#018x} in jit_second ()"));
    t.assert_contains(Some("break"), &placeholder_line(19));
    t.assert_contains(Some("sources"), "jit_scenario.jit");
}

#[test]
fn missing_source_sigsegv_in_jit_code_stops_with_a_line() {
    if !have_gdb("missing_source_sigsegv") {
        return;
    }
    let h = host("absent");
    let (dir, layout) = setup(&h, "src-segv");
    let t = end(gdb(&h, dir.path(), "crash")
        .section("run", ["run"])
        .section("bt", ["bt"])
        .section("list", ["list"]))
    .run();
    assert_gdb_alive(&t);
    t.assert_contains(Some("run"), "SIGSEGV");
    t.assert_contains(Some("run"), "jit_second () at ");
    t.assert_contains(Some("run"), &placeholder_line(17));
    assert_chain(&t, "bt", chain_from("jit_second"), &layout);
}

/// An MI front end (what VS Code, CLion and Emacs gud drive): `-stack-list-frames` and
/// `-file-list-exec-source-files` carry `fullname`, which GDB 13 computed by opening the
/// file.
#[test]
fn missing_source_mi_front_end_gets_frames_with_fullnames() {
    if !have_gdb("missing_source_mi") {
        return;
    }
    let h = host("absent");
    // Bare (the reader loaded by a console command: cache paths), and through the launcher
    // as an IDE's debugger path (the registered names).
    for launcher in [false, true] {
        let (dir, layout) = setup(&h, "src-mi");
        let args = h.args_in(dir.path()).join(" ");
        let input = dir.join("session.mi");
        let mut script = vec![
            "-gdb-set confirm off".to_string(),
            "-gdb-set breakpoint pending on".into(),
        ];
        if !launcher {
            script.push(format!("-interpreter-exec console \"{}\"", load_cmd()));
        }
        script.extend([
            format!("-file-exec-and-symbols {}", h.program.display()),
            format!("-exec-arguments {args} run"),
            "-break-insert jit_test_break_here".into(),
            "-exec-run".into(),
            "-stack-list-frames".into(),
            "-stack-select-frame 1".into(),
            "-stack-info-frame".into(),
            "-file-list-exec-source-files".into(),
            "-gdb-exit".into(),
        ]);
        std::fs::write(&input, script.join("\n") + "\n").unwrap();
        let mut cmd = Command::new(if launcher {
            env!("CARGO_BIN_EXE_jit-gdb")
        } else {
            "gdb"
        });
        cmd.env("JIT_GDB_READER", reader_so())
            .args(["-i=mi", "-nx", "-q"])
            .current_dir(dir.path());
        let t = run_captured_with_input(cmd, dir.path(), Some(&input));
        for bad in ["Fatal signal", "internal-error"] {
            t.assert_not_contains(None, bad);
        }
        t.assert_contains(None, "^exit");
        let frames = t
            .text
            .lines()
            .find(|l| l.starts_with("^done,stack="))
            .unwrap_or_else(|| t.fail("no -stack-list-frames answer"));
        for name in JIT_FUNCTIONS {
            let info = layout.get(name);
            let at = frames
                .find(&format!("func=\"{name}\""))
                .unwrap_or_else(|| t.fail(&format!("{name} is not among the MI frames")));
            let frame = &frames[at..frames[at..].find('}').map_or(frames.len(), |e| at + e)];
            let field = |key: &str| {
                frame
                    .split(&format!("{key}=\""))
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or_else(|| t.fail(&format!("frame of {name} without {key}: {frame}")))
            };
            let full = field("fullname");
            assert!(Path::new(full).is_file(), "{full} is not a file: {frame}");
            let file = field("file");
            if launcher {
                assert_eq!(file, info.file, "{frame}");
            } else {
                assert!(is_cached_name(file, &info.file), "{frame}");
            }
            let line: u32 = field("line").parse().unwrap();
            assert!(
                info.lines.iter().any(|&(_, l)| l == line),
                "{name} at line {line}"
            );
        }
        t.assert_contains(None, "^done,frame={level=\"1\"");
        t.assert_contains(None, "^done,files=[");
        eprintln!("MI transcript (launcher: {launcher}):\n{}", t.text);
    }
}

/// A kernel core of a SIGSEGV in JIT code, opened in another directory with a fresh cache
/// (another machine): the placeholder, or with `--source text` the JIT's real source,
/// which travels in the core.
#[test]
fn missing_source_kernel_core_opened_elsewhere() {
    if !have_gdb("missing_source_core") {
        return;
    }
    let text = scenario_text();
    for source in ["absent", "text"] {
        let h = host(source);
        let (dir, layout) = setup(&h, "src-core");
        let gcore = dir.join("gdb.core");
        let live = gdb(&h, dir.path(), "crash")
            .cmd("run")
            .cmd(format!("generate-core-file {}", gcore.display()))
            .run();
        live.assert_contains(None, "SIGSEGV");
        let core = kernel_core(&h, dir.path(), gcore);
        let elsewhere = TempDir::new("src-core-elsewhere");
        let cache = elsewhere.join("cache");
        let t = end(Gdb::core(&h.program, &core, elsewhere.path())
            .env("JIT_GDB_CACHE_DIR", cache.display().to_string())
            .section("load", [load_cmd()])
            .section("bt", ["bt"])
            .section("frame", ["frame 0"])
            .section("list", ["list 16,19"]))
        .run();
        assert_gdb_alive(&t);
        assert_chain(&t, "bt", chain_from("jit_second"), &layout);
        match source {
            "absent" => t.assert_contains(Some("frame"), &placeholder_line(17)),
            _ => {
                for n in 16..=19 {
                    let want = format!("{n}\t{}", text.lines().nth(n - 1).unwrap());
                    t.assert_contains(Some("list"), &want);
                }
            }
        }
        eprintln!("core ({source}) opened elsewhere:\n{}", t.text);
    }
}

/// The reader loaded by a plain `jit-reader-load` in the user's own `~/.gdbinit`: no
/// launcher, no scripts.
#[test]
fn missing_source_reader_from_a_users_gdbinit() {
    if !have_gdb("missing_source_gdbinit") {
        return;
    }
    let h = host("absent");
    let (dir, layout) = setup(&h, "src-gdbinit");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".gdbinit"), format!("{}\n", load_cmd())).unwrap();
    let t = session(
        "gdb",
        false,
        &[("HOME", home.as_os_str())],
        &h,
        dir.path(),
        "run",
        &at_break(&[
            ("bt", &["bt"]),
            ("frame", &["frame 1", "list"]),
            ("sources", &["info sources jit_"]),
        ]),
    );
    assert_gdb_alive(&t);
    assert_chain(&t, "bt", &CHAIN, &layout);
    t.assert_contains(Some("frame"), &placeholder_line(18));
    // The cache went under the user's home, private.
    let root = home.join(".cache/jit-gdb");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&root).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{}", root.display());
}

/// Text registered with the code (`set_source`): `list` shows it, bare and through the
/// launcher; a real file at the registered name wins over it.
#[test]
fn registered_source_text_is_listed_and_a_real_file_wins() {
    if !have_gdb("registered_source_text") {
        return;
    }
    let text = scenario_text();
    let line = |n: usize| format!("{n}\t{}", text.lines().nth(n - 1).unwrap());
    let h = host("text");
    let (dir, layout) = setup(&h, "src-text");
    let t = end(gdb(&h, dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("bt", ["bt"])
        .section("frame", ["frame 4"])
        .section("list", ["list 6,9"]))
    .run();
    assert_gdb_alive(&t);
    assert_chain(&t, "bt", &CHAIN, &layout);
    t.assert_contains(Some("frame"), &line(8));
    for n in 6..=9 {
        t.assert_contains(Some("list"), &line(n));
    }

    // A real file at the registered name, with other content: it is what GDB shows.
    let file = &layout.functions[0].file;
    let real: String = (1..=30).map(|n| format!("REAL LINE {n}\n")).collect();
    std::fs::write(file, &real).unwrap();
    let t = end(gdb(&h, dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("bt", ["bt"])
        .section("frame", ["frame 4"]))
    .run();
    assert_gdb_alive(&t);
    let frames = assert_chain(&t, "bt", &CHAIN, &layout);
    assert!(
        frames
            .iter()
            .any(|f| f.file.as_deref() == Some(file.as_str())),
        "the real file's name is not shown:\n{}",
        t.section("bt")
    );
    t.assert_contains(Some("frame"), "8\tREAL LINE 8");
    assert_listing(&t, "frame", file, 8);
}

/// Through the launcher (`jit-gdb`), names stay as the runtime gave them: `bt` shows the
/// registered file, not a cache path, and `list` shows the registered text.
#[test]
fn launcher_keeps_the_runtimes_file_names() {
    if !have_gdb("launcher_file_names") {
        return;
    }
    let text = scenario_text();
    let h = host("text");
    let (dir, layout) = setup(&h, "src-launcher");
    let t = launcher_session(
        &h,
        dir.path(),
        "run",
        &at_break(&[
            ("bt", &["bt"]),
            ("frame", &["frame 4"]),
            ("info source", &["info source"]),
        ]),
    );
    assert_gdb_alive(&t);
    let frames = assert_chain(&t, "bt", &CHAIN, &layout);
    let file = &layout.functions[0].file;
    for f in frames
        .iter()
        .filter(|f| JIT_FUNCTIONS.iter().any(|n| f.is(n)))
    {
        assert_eq!(f.file.as_deref(), Some(file.as_str()), "{}", f.raw);
    }
    t.assert_contains(
        Some("frame"),
        &format!("8\t{}", text.lines().nth(7).unwrap()),
    );
    // GDB found it in the session directory, at the end of its source path.
    t.assert_contains(Some("info source"), "/sessions/");
}

/// A cache that cannot be written (here: under a file) costs nothing but one warning: the
/// text is kept in GDB's memory (`/proc/self/fd/N`).
#[test]
fn unwritable_cache_falls_back_without_a_crash() {
    if !have_gdb("unwritable_cache") {
        return;
    }
    let h = host("text");
    let (dir, layout) = setup(&h, "src-nocache");
    let t = end(gdb(&h, dir.path(), "run")
        .env("JIT_GDB_CACHE_DIR", "/dev/null/jit-gdb")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("bt", ["bt"])
        .section("frame", ["frame 1"])
        .section("sources", ["info sources jit"]))
    .run();
    assert_gdb_alive(&t);
    let frames = t.gdb_bt("bt");
    let second = frames
        .iter()
        .find(|f| f.is("jit_second"))
        .unwrap_or_else(|| t.fail("no jit_second frame"));
    assert!(
        second
            .file
            .as_deref()
            .is_some_and(|f| f.starts_with("/proc/self/fd/")),
        "{}",
        second.raw
    );
    assert_eq!(
        second.line,
        layout.get("jit_second").line_at(second.pc.unwrap() - 1)
    );
    let text = scenario_text();
    t.assert_contains(
        Some("frame"),
        &format!("18\t{}", text.lines().nth(17).unwrap()),
    );
    let warnings = t.text.matches("no usable source cache").count();
    assert_eq!(warnings, 1, "expected one warning:\n{}", t.text);
}

/// Commands that stop in `jit_test_break_here`, then each section's commands after its
/// marker, then the `end` marker.
fn at_break(sections: &[(&str, &[&str])]) -> Vec<String> {
    let mut v = vec!["break jit_test_break_here".to_string(), "run".into()];
    for (name, cmds) in sections {
        v.push(mark(name));
        v.extend(cmds.iter().map(|c| c.to_string()));
    }
    v.push(mark("end"));
    v
}

/// `DEBUGGER -batch [-nx] PRELUDE -ex CMD... --args HOST ARGS MODE` in `dir` with `env`:
/// GDB itself (`nx` false: it reads the user's `~/.gdbinit`), or the launcher, which
/// hands everything to GDB.
fn session(
    debugger: &str,
    nx: bool,
    env: &[(&str, &std::ffi::OsStr)],
    h: &Host,
    dir: &Path,
    mode: &str,
    cmds: &[impl AsRef<std::ffi::OsStr>],
) -> Transcript {
    let mut cmd = Command::new(debugger);
    cmd.envs(env.iter().copied()).current_dir(dir).arg("-batch");
    if nx {
        cmd.arg("-nx");
    }
    for p in GDB_PRELUDE {
        cmd.arg("-iex").arg(p);
    }
    for c in cmds {
        cmd.arg("-ex").arg(c);
    }
    cmd.arg("--args")
        .arg(&h.program)
        .args(h.args_in(dir))
        .arg(mode);
    run_captured(cmd, dir)
}

/// The launcher (`jit-gdb`, with the reader under test) on the host.
fn launcher_session(
    h: &Host,
    dir: &Path,
    mode: &str,
    cmds: &[impl AsRef<std::ffi::OsStr>],
) -> Transcript {
    launched(&[], h, dir, mode, cmds)
}

/// [`launcher_session`] with more environment.
fn launched(
    env: &[(&str, &std::ffi::OsStr)],
    h: &Host,
    dir: &Path,
    mode: &str,
    cmds: &[impl AsRef<std::ffi::OsStr>],
) -> Transcript {
    let mut all = vec![("JIT_GDB_READER", reader_so().as_os_str())];
    all.extend_from_slice(env);
    session(
        env!("CARGO_BIN_EXE_jit-gdb"),
        true,
        &all,
        h,
        dir,
        mode,
        cmds,
    )
}

/// The new user's case: the README's snippet names `fib.js`, which does not exist; compact
/// records, through the launcher. `frame 1`, `finish`, `list` and a SIGSEGV in JIT code
/// show `fib.js` and a line that says the text is not available.
#[test]
fn new_user_fib_js_absent_through_the_launcher() {
    if !have_gdb("new_user_fib_js") {
        return;
    }
    let text = scenario_text();
    for source in ["absent", "text"] {
        // Line `n` as listed: the placeholder's, or (text registered) the script's own.
        let line = |n: usize| match source {
            "absent" => format!("{n}\tfib.js:{n}: source not available"),
            _ => format!("{n}\t{}", text.lines().nth(n - 1).unwrap()),
        };
        let h = Host::new(
            testhost(),
            &[
                "--format",
                "compact",
                "--source",
                source,
                "--source-name",
                "fib.js",
            ],
        );
        let dir = TempDir::new("src-fibjs");
        let t = launcher_session(
            &h,
            dir.path(),
            "run",
            &at_break(&[
                ("frame", &["frame 1"]),
                ("finish", &["frame 0", "finish"]),
                ("list", &["list 16,19"]),
            ]),
        );
        assert_gdb_alive(&t);
        t.assert_contains(Some("frame"), "in jit_second () at fib.js:18");
        t.assert_contains(Some("frame"), &line(18));
        t.assert_contains(Some("finish"), "jit_second () at fib.js:19");
        t.assert_contains(Some("finish"), &line(19));
        for n in 16..=19 {
            t.assert_contains(Some("list"), &line(n));
        }
        eprintln!("new user ({source}), live:\n{}", t.text);

        let t = launcher_session(
            &h,
            dir.path(),
            "crash",
            &["run", &mark("bt"), "bt", &mark("end")],
        );
        assert_gdb_alive(&t);
        t.assert_contains(None, "SIGSEGV");
        t.assert_contains(None, "jit_second () at fib.js:17");
        t.assert_contains(None, &line(17));
        t.assert_contains(Some("bt"), "in jit_middle () at fib.js:8");
        eprintln!("new user ({source}), SIGSEGV:\n{}", t.text);
    }
}

/// `Objfile.build_id` (and anything else that needs a BFD) crashes GDB 13 on a reader-made
/// objfile, even when its source exists: the scripts never read it, and every `jit`
/// command works in a session full of reader-made objfiles.
#[test]
fn scripts_never_touch_bfd_only_attributes_of_reader_objfiles() {
    let script =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/gdb-scripts/jit.py"))
            .unwrap();
    for bad in ["build_id", ".owner", "lookup_objfile"] {
        assert!(!script.contains(bad), "gdb-scripts/jit.py uses `{bad}`");
    }
    if !have_gdb("scripts_bfd_attributes") {
        return;
    }
    let h = host("absent");
    let dir = TempDir::new("src-scripts");
    let t = launcher_session(
        &h,
        dir.path(),
        "run",
        &at_break(&[
            (
                "jit",
                &[
                    "jit list",
                    "jit symbolize $pc",
                    "frame 1",
                    "jit symbolize $pc",
                    "jit sources",
                ],
            ),
            (
                "objfiles",
                &["python print(len([o.filename for o in gdb.objfiles()]))"],
            ),
        ]),
    );
    assert_gdb_alive(&t);
    t.assert_contains(Some("jit"), "jit_second");
    t.assert_contains(Some("jit"), "JIT source files: ");
    t.assert_not_contains(Some("jit"), "Python Exception");
}

/// ELF payloads carry the text too (`.jit_gdb.sources`, which GDB ignores): through the
/// launcher the scripts write it where GDB's source path search finds the DWARF file name,
/// so `list` shows it; a bare GDB shows what it always did (no crash for ELF).
#[test]
fn elf_source_text_is_listed_through_the_launcher() {
    if !have_gdb("elf_source_text") {
        return;
    }
    let text = scenario_text();
    for name in [None, Some("lib/fib.js")] {
        let mut args = vec!["--format", "elf", "--source", "text"];
        if let Some(n) = name {
            args.extend(["--source-name", n]);
        }
        let h = Host::new(testhost(), &args);
        let (dir, layout) = setup(&h, "src-elf");
        let t = launcher_session(
            &h,
            dir.path(),
            "run",
            &at_break(&[("bt", &["bt"]), ("frame", &["frame 4", "list 6,9"])]),
        );
        assert_gdb_alive(&t);
        assert_chain(&t, "bt", &CHAIN, &layout);
        for n in 6..=9 {
            t.assert_contains(
                Some("frame"),
                &format!("{n}\t{}", text.lines().nth(n - 1).unwrap()),
            );
        }
        t.assert_not_contains(None, "jit: ");
    }
}

/// Attached to a process that registered its code long before: `frame`, `list` and the
/// stop location (`finish`) work, with the file absent.
#[test]
fn missing_source_after_attach() {
    if !have_gdb("missing_source_attach") {
        return;
    }
    let h = host("absent");
    let (dir, layout) = setup(&h, "src-attach");
    let a = h.args_in(dir.path());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let waiting = WaitingHost::start(&h.program, &a, dir.path());
    let t = end(Gdb::attach(waiting.pid, dir.path())
        .section("load", [load_cmd()])
        .section("bt", ["bt"])
        .section("frame", ["frame function jit_test_break_here", "up"])
        .section("list", ["list"])
        .section("sources", ["info sources jit_"])
        .cmd("detach"))
    .run();
    drop(waiting);
    assert_gdb_alive(&t);
    let frames = t.gdb_bt("bt");
    if let Err(e) = check_chain(&frames, &CHAIN, &layout) {
        t.fail(&e);
    }
    t.assert_contains(Some("frame"), &placeholder_line(18));
    t.assert_contains(Some("list"), "source not available");
}

/// A name that would leave the session directory (`../..`), a name that is a directory
/// path, and an absolute one: nothing is written outside the cache, and GDB still opens a
/// file with the registered text for each.
#[test]
fn file_names_never_lead_outside_the_cache() {
    if !have_gdb("file_names_outside") {
        return;
    }
    let text = scenario_text();
    let dir = TempDir::new("src-names");
    let cache = dir.join("cache");
    for name in [
        "../../escape/fib.js",
        "/abs/dir/fib.js",
        "x/",
        "y/.",
        "./z.js",
    ] {
        let h = Host::new(
            testhost(),
            &[
                "--format",
                "compact",
                "--source",
                "text",
                "--source-name",
                name,
            ],
        );
        let t = launched(
            &[("JIT_GDB_CACHE_DIR", cache.as_os_str())],
            &h,
            dir.path(),
            "run",
            &at_break(&[("frame", &["frame 1"])]),
        );
        assert_gdb_alive(&t);
        t.assert_contains(
            Some("frame"),
            &format!("18\t{}", text.lines().nth(17).unwrap()),
        );
    }
    // Only the cache was written below the scratch directory's parent.
    assert!(!dir.path().parent().unwrap().join("escape").exists());
    assert!(!dir.join("escape").exists());
    assert!(!Path::new("/abs").exists());
    let outside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "cache" && !n.starts_with("transcript"))
        .collect();
    assert!(outside.is_empty(), "written outside the cache: {outside:?}");
}

/// `jit-gdb inspect --symbolize` prints the text of the line, from the source carried in
/// the core (no file on disk, no GDB).
#[test]
fn inspector_prints_the_registered_line_text() {
    if !have_gdb("inspector_line_text") {
        return;
    }
    let text = scenario_text();
    let h = host("text");
    let (dir, layout) = setup(&h, "src-inspect");
    let gcore = dir.join("gdb.core");
    let live = gdb(&h, dir.path(), "crash")
        .cmd("run")
        .cmd(format!("generate-core-file {}", gcore.display()))
        .run();
    live.assert_contains(None, "SIGSEGV");
    let core = kernel_core(&h, dir.path(), gcore);
    let middle = layout.get("jit_middle");
    let addr = middle.start + 16; // line 8
    let out = Command::new(env!("CARGO_BIN_EXE_jit-gdb"))
        .arg("inspect")
        .arg(&core)
        .arg("--exe")
        .arg(&h.program)
        .arg("--symbolize")
        .arg(format!("{addr:#x}"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = format!(
        "jit_middle+0x10 {}:8\t{}",
        middle.file,
        text.lines().nth(7).unwrap().trim()
    );
    assert!(
        stdout.contains(&want),
        "want `{want}` in:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Functions registered without line rows share a symtab; GDB 13 crashed in `info sources`
/// on its empty name. It is named (`<jit code without source lines>`) by a file that says
/// so, bare and through the launcher.
#[test]
fn functions_without_lines_get_a_named_file() {
    if !have_gdb("functions_without_lines") {
        return;
    }
    let h = Host::new(testhost(), &["--format", "compact", "--no-lines"]);
    let dir = TempDir::new("src-nolines");
    let cmds = at_break(&[
        ("bt", &["bt"]),
        ("frame", &["frame 1"]),
        ("sources", &["info sources jit"]),
    ]);
    let bare = gdb(&h, dir.path(), "run").cmds(cmds.iter().cloned()).run();
    let launched = launcher_session(&h, dir.path(), "run", &cmds);
    for t in [bare, launched] {
        assert_gdb_alive(&t);
        t.assert_contains(Some("bt"), "in jit_second ()");
        t.assert_contains(Some("bt"), "in jit_entry ()");
        t.assert_contains(Some("sources"), "<jit code without source lines>");
    }
}
