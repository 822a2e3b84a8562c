//! `gdb-scripts/jit.py` in real GDB on a live JIT process, for both payload kinds: `jit
//! list` (all, regex), `jit break` (pending before the code exists, by name and by regex;
//! immediate once registered), `jit symbolize` at every instruction, `jit export-perf-map`,
//! and the one overlap rule (shared with `jit-gdb inspect`) on a newer overlapping entry.
//! Every expected value comes from the host's own layout (`jit-fn` lines).

mod common;
#[path = "reader_support/mod.rs"]
mod reader_support;
#[path = "scripts_support/mod.rs"]
mod scripts_support;

use common::{require_tool, TempDir, JIT_FUNCTIONS};
use scripts_support::*;

/// The first `0x... name+0x0 file:line` answer of a section must be `name`'s first byte.
#[track_caller]
fn check_stop(t: &common::Transcript, section: &str, layout: &common::Layout, name: &str) {
    let f = layout.get(name);
    let want = format!(
        "{:#x} {name}+0x0 {}:{}",
        f.start,
        f.file,
        f.line_at(f.start).unwrap()
    );
    let got = t.section(section).lines().find(|l| l.starts_with("0x"));
    if got != Some(want.as_str()) {
        t.fail(&format!(
            "section {section}: stopped at {got:?}, expected the jit break at {want}"
        ));
    }
}

fn live(format: &str) {
    if !require_tool("gdb", &format!("scripts_live_{format}")) {
        return;
    }
    let h = host(format);
    let dir = TempDir::new(&format!("scripts-live-{format}"));
    let layout = h.layout(dir.path());
    let map = dir.join("perf.map");
    let (sym_cmd, sym_want) = symbolize_cmd(&layout);
    let t = h
        .gdb(dir.path(), "run")
        // Before `run`: nothing is registered, both requests stay pending.
        .section(
            "pending",
            [
                "jit break jit_second",
                "jit break jit_(middle|frameless)",
                "jit break",
            ],
        )
        .cmd("break run_jit")
        .cmd("break jit_test_break_here")
        .cmd("run")
        // Registered by now: this one is placed at once.
        .section("now", ["jit break jit_entry"])
        .section("stop1", ["continue", "jit symbolize $pc"])
        .section("stop2", ["continue", "jit symbolize $pc"])
        .section("stop3", ["continue", "jit symbolize $pc"])
        .section("stop4", ["continue", "jit symbolize $pc"])
        .section("native", ["continue", "bt 1"])
        .section("list", ["jit list"])
        .section("regex", ["jit list ^jit_(entry|second)$"])
        .section("symbolize", [sym_cmd])
        .section("perf", [format!("jit export-perf-map {}", map.display())])
        .section("pending_after", ["jit break"])
        .run();

    let pending = t.section("pending");
    for p in ["'jit_second'", "'jit_(middle|frameless)'"] {
        if !pending.contains(&format!("no JIT function matches {p} yet")) {
            t.fail(&format!("`jit break` did not report {p} as pending"));
        }
    }
    t.assert_contains(Some("now"), "on jit_entry at");
    // Execution order: jit_entry -> jit_middle -> jit_frameless -> (native) -> jit_second.
    check_stop(&t, "stop1", &layout, "jit_entry");
    check_stop(&t, "stop2", &layout, "jit_middle");
    check_stop(&t, "stop3", &layout, "jit_frameless");
    check_stop(&t, "stop4", &layout, "jit_second");
    t.assert_contains(Some("native"), "jit_test_break_here");
    check_rows(&t, "list", &layout, &JIT_FUNCTIONS, format);
    t.assert_contains(Some("list"), "4 JIT functions (4 registered in 1 entries).");
    check_rows(&t, "regex", &layout, &["jit_entry", "jit_second"], format);
    check_symbolize(&t, "symbolize", &sym_want);
    t.assert_contains(
        Some("perf"),
        &format!("wrote 4 functions to {}", map.display()),
    );
    let got = std::fs::read_to_string(&map).unwrap_or_else(|e| t.fail(&format!("perf map: {e}")));
    if got != expected_perf_map(&layout) {
        t.fail(&format!(
            "perf map:\n{got}\nexpected:\n{}",
            expected_perf_map(&layout)
        ));
    }
    t.assert_contains(Some("pending_after"), "No pending jit breakpoints.");
    t.assert_not_contains(None, "Python Exception");
    t.assert_not_contains(None, "warning: jit entry");
}

#[test]
fn live_compact() {
    live("compact");
}

#[test]
fn live_elf() {
    live("elf");
}

/// One entry per function: the list walk crosses entries, and a pending request resolves
/// against the entry being registered at each hook call. The hook decodes only entries
/// whose bytes hold a requested name: `jit_fram` occurs in `jit_frameless`'s entry, which
/// is decoded and must leave that request pending (whole names only).
#[test]
fn per_function_entries() {
    if !require_tool("gdb", "per_function_entries") {
        return;
    }
    let h = host("compact");
    let h = common::scenario::Host {
        args: [
            h.args.clone(),
            vec!["--objects".into(), "per-function".into()],
        ]
        .concat(),
        ..h
    };
    let dir = TempDir::new("scripts-per-function");
    let layout = h.layout(dir.path());
    let t = h
        .gdb(dir.path(), "run")
        .section("pending", ["jit break jit_frameless", "jit break jit_fram"])
        .cmd("run")
        .section("stop", ["jit symbolize $pc"])
        .section("list", ["jit list"])
        .section("still", ["jit break"])
        .run();
    check_stop(&t, "stop", &layout, "jit_frameless");
    t.assert_contains(Some("still"), "pending: jit_fram\n");
    t.assert_not_contains(Some("still"), "pending: jit_frameless");
    t.assert_not_contains(None, "'jit_fram' resolved");
    check_rows(&t, "list", &layout, &JIT_FUNCTIONS, "compact");
    t.assert_contains(Some("list"), "4 JIT functions (4 registered in 4 entries).");
    let rows = list_rows(&t, "list");
    let mut entries: Vec<u64> = rows.iter().map(|r| r.entry).collect();
    entries.sort_unstable();
    entries.dedup();
    if entries.len() != 4 {
        t.fail("four entries expected, one per function");
    }
}

/// Both payload kinds in one process (`reader_testhost mixed`: an ELF function calls a
/// compact one): one list with both kinds, a pending break on each resolves.
#[test]
fn mixed_kinds() {
    if !require_tool("gdb", "mixed_kinds") {
        return;
    }
    let dir = TempDir::new("scripts-mixed");
    let program = common::reader_testhost();
    let src = dir.path().display().to_string();
    let t = common::Gdb::program(&program, &["--source-dir", &src, "mixed"], dir.path())
        .cmd(reader_support::load_cmd())
        .cmd(source_cmd())
        .section(
            "pending",
            ["jit break jit_compact_inner", "jit break jit_elf_outer"],
        )
        .cmd("run")
        .section("stop1", ["jit symbolize $pc"])
        .section("stop2", ["continue", "jit symbolize $pc"])
        .section("list", ["jit list"])
        .cmd("kill")
        .run();
    // This host has no layout mode: it prints its `jit-fn` lines when it starts.
    let layout = common::Layout::parse(&t.text);
    check_stop(&t, "stop1", &layout, "jit_elf_outer");
    check_stop(&t, "stop2", &layout, "jit_compact_inner");
    let rows = list_rows(&t, "list");
    let kinds: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.name.as_str(), r.kind.as_str()))
        .collect();
    if kinds != [("jit_compact_inner", "compact"), ("jit_elf_outer", "elf")] {
        t.fail(&format!("`jit list` of the mixed process: {kinds:?}"));
    }
    for r in &rows {
        let f = layout.get(&r.name);
        if (r.start, r.end, r.file.as_str()) != (f.start, f.start + f.size, f.file.as_str()) {
            t.fail(&format!("{}: listed {r:?}, the host made {f:?}", r.name));
        }
    }
}

/// After the runtime unregisters its entry, the commands no longer know the functions
/// (they walk the live list; nothing stale from an earlier command is reused).
#[test]
fn unregistered() {
    if !require_tool("gdb", "unregistered") {
        return;
    }
    let h = host("compact");
    let dir = TempDir::new("scripts-unregister");
    let layout = h.layout(dir.path());
    let start = layout.get("jit_entry").start;
    let t = h
        .gdb(dir.path(), "unregister")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("before", ["jit list"])
        .section("before_sym", [format!("jit symbolize {start:#x}")])
        .cmd("continue")
        .section("after", ["jit list"])
        .section("after_sym", [format!("jit symbolize {start:#x}")])
        .cmd("kill")
        .run();
    check_rows(&t, "before", &layout, &JIT_FUNCTIONS, "compact");
    t.assert_contains(Some("before_sym"), &format!("{start:#x} jit_entry+0x0 "));
    t.assert_contains(
        Some("after"),
        "0 JIT functions (0 registered in 0 entries).",
    );
    t.assert_contains(Some("after_sym"), &format!("{start:#x} ??"));
}

/// The one overlap rule, end to end: a newer entry (linked at the head of the live list by
/// GDB writes, as a runtime reusing code memory would) describes `jit_overlay` inside
/// `jit_middle`. `jit symbolize` and `jit export-perf-map` give the overlap to the newer
/// function and keep the rest for `jit_middle`; `jit-gdb inspect` on a core of the same
/// process answers the same.
#[test]
fn newest_registration_owns_overlapping_addresses() {
    if !require_tool("gdb", "newest_registration_owns_overlapping_addresses") {
        return;
    }
    let h = host("compact");
    let dir = TempDir::new("scripts-overlap");
    let layout = h.layout(dir.path());
    let middle = layout.get("jit_middle");
    assert!(
        middle.size > 8,
        "jit_middle too small for the test: {middle:?}"
    );
    let (lo, hi) = (middle.start + 2, middle.start + 6);
    let mut overlay = jit_interface::JitObject::new();
    overlay.add_function("jit_overlay", lo, hi - lo).unwrap();
    let mut payload = jit_interface::format::encode(&overlay, None).unwrap();
    let size = payload.len();
    payload.resize(size.div_ceil(8) * 8, 0);
    let first = "*(unsigned long *)((char *)&__jit_debug_descriptor + 16)";
    assert!(
        payload.len() <= 128,
        "overlay payload of {} bytes",
        payload.len()
    );
    // Scratch memory without running the inferior (no malloc call): stack below the stopped
    // thread's frames and red zone, which nothing touches before `kill`; gcore keeps it.
    let mut link = vec![
        "set language c".to_string(),
        "set $jp = (unsigned long *) (((unsigned long) $sp - 512) & ~15)".to_string(),
    ];
    for (i, w) in payload.chunks(8).enumerate() {
        let w = u64::from_le_bytes(w.try_into().unwrap());
        link.push(format!("set var $jp[{i}] = {w:#x}"));
    }
    link.extend([
        "set $je = $jp + 32".to_string(),
        format!("set var $je[0] = {first}"),
        "set var $je[1] = 0".into(),
        "set var $je[2] = (unsigned long) $jp".into(),
        format!("set var $je[3] = {size}"),
        "set var *(unsigned long *)($je[0] + 8) = (unsigned long) $je".into(),
        format!("set var {first} = (unsigned long) $je"),
    ]);
    let addrs = [middle.start + 1, lo, hi - 1, hi];
    let sym = addrs.map(|a| format!("{a:#x}")).join(" ");
    let map = dir.join("overlap.map");
    let core = dir.join("overlap.core");
    let t = h
        .gdb(dir.path(), "run")
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("link", link)
        .section("list", ["jit list"])
        .section("sym", [format!("jit symbolize {sym}")])
        .section("perf", [format!("jit export-perf-map {}", map.display())])
        .section("gcore", [format!("generate-core-file {}", core.display())])
        .cmd("kill")
        .run();
    t.assert_contains(Some("list"), "5 JIT functions (5 registered in 2 entries).");
    for section in ["list", "sym", "perf"] {
        t.assert_not_contains(Some(section), "warning:");
    }
    t.assert_not_contains(None, "Python Exception");
    let want = [
        format!("{:#x} jit_middle+0x1 ", addrs[0]),
        format!("{lo:#x} jit_overlay+0x0 "),
        format!("{:#x} jit_overlay+0x3 ", addrs[2]),
        format!("{hi:#x} jit_middle+0x6 "),
    ];
    let got: Vec<&str> = t
        .section("sym")
        .lines()
        .filter(|l| l.starts_with("0x"))
        .collect();
    if got.len() != 4
        || got
            .iter()
            .zip(&want)
            .any(|(g, w)| !g.starts_with(w.as_str()))
    {
        t.fail(&format!(
            "`jit symbolize` gave {got:#?}, expected {want:#?}"
        ));
    }
    // jit_middle keeps two pieces around the overlay.
    let text = std::fs::read_to_string(&map).unwrap_or_else(|e| t.fail(&format!("{e}")));
    let pieces = [
        format!("{:x} 2 jit_middle", middle.start),
        format!("{lo:x} 4 jit_overlay"),
        format!("{hi:x} {:x} jit_middle", middle.start + middle.size - hi),
    ];
    for p in &pieces {
        if !text.lines().any(|l| l == p) {
            t.fail(&format!("perf map lacks `{p}`:\n{text}"));
        }
    }
    t.assert_contains(Some("perf"), "jit: wrote 6 functions to");

    // The core inspector, on a core of the same process, applies the same rule.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jit-gdb"))
        .arg("inspect")
        .arg(&core)
        .arg("--exe")
        .arg(common::testhost())
        .arg("--symbolize")
        .args(addrs.map(|a| format!("{a:x}")))
        .output()
        .expect("run jit-gdb inspect");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let got: Vec<&str> = stdout.lines().collect();
    if out.status.code() != Some(0)
        || got.len() != 4
        || got
            .iter()
            .zip(&want)
            .any(|(g, w)| !format!("{g} ").starts_with(w.as_str()))
    {
        t.fail(&format!(
            "`jit-gdb inspect --symbolize` exited {:?}:\n{stdout}{}\nexpected {want:#?}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // Its perf map has the same pieces; the partly hidden function is named (exit 3).
    let inspect_map = dir.join("inspect.map");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jit-gdb"))
        .arg("inspect")
        .arg(&core)
        .arg("--exe")
        .arg(common::testhost())
        .arg("--perf-map")
        .arg(&inspect_map)
        .output()
        .expect("run jit-gdb inspect");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let written = std::fs::read_to_string(&inspect_map).unwrap_or_default();
    if out.status.code() != Some(3)
        || written != text
        || !stderr.contains("`jit_middle` at 0x")
        || !stderr.contains("overlaps `jit_overlay`")
    {
        t.fail(&format!(
            "`jit-gdb inspect --perf-map` exited {:?}:\n{stderr}\nwrote:\n{written}\njit.py wrote:\n{text}",
            out.status
        ));
    }
}

/// The registration hook of pending `jit break` requests goes by address in a live process
/// (GDB sets a breakpoint by name again at every ELF registration, one by address for
/// free), and back by name when that process goes: with address randomization on, a run
/// after `kill` loads the runtime elsewhere, and the request still resolves there (a hook
/// left at the old address would never be hit, or fail to insert).
fn pending_across_runs(format: &str) {
    let test = format!("scripts_pending_across_runs_{format}");
    if !require_tool("gdb", &test) {
        return;
    }
    let h = host(format);
    let dir = TempDir::new(&test);
    let layout = h.layout(dir.path());
    // The scripts' internal breakpoints (the hook is the only one): its location as GDB has it.
    let hooks = "python [print('HOOK', b.location) for b in gdb.breakpoints() if b.number < 0]";
    let t = h
        .gdb(dir.path(), "run")
        .cmd("set disable-randomization off")
        .section("pending", ["jit break jit_second", hooks])
        // Stops before anything is registered.
        .cmd("break jit_gdb_testhost::main")
        .cmd("run")
        .section("hook1", [hooks, "info address __jit_debug_register_code"])
        .cmd("kill")
        .section("killed", [hooks])
        .cmd("run")
        .section("hook2", [hooks, "info address __jit_debug_register_code"])
        .section(
            "resolved",
            ["continue", "jit symbolize $pc", "jit break", hooks],
        )
        .cmd("condition $bpnum 1 == 1")
        // The breakpoint on this process's jit_second goes with it, its request stays.
        .section("killed2", ["kill", "jit break", "info breakpoints"])
        .section(
            "run3",
            ["run", "continue", "jit symbolize $pc", "info breakpoints"],
        )
        .run();
    t.assert_contains(
        Some("pending"),
        "breakpoint pending until one is registered",
    );
    t.assert_contains(Some("pending"), "HOOK __jit_debug_register_code");
    // At the stops the hook is at the function's address in that process; after `kill`
    // by name again.
    let at = |section: &str| -> String {
        let text = t.section(section);
        // `Symbol "__jit_debug_register_code" is at 0x... in a file compiled without
        // debugging.` (or `is a function at address 0x....` with debug info).
        let addr = text
            .lines()
            .filter(|l| l.starts_with("Symbol "))
            .find_map(|l| l.split_whitespace().find(|w| w.starts_with("0x")))
            .map(|a| a.trim_end_matches('.'))
            .unwrap_or_else(|| t.fail(&format!("section {section}: no address printed")));
        if !text.contains(&format!("HOOK *{addr}")) {
            t.fail(&format!("section {section}: the hook is not at {addr}"));
        }
        addr.to_string()
    };
    let (one, two) = (at("hook1"), at("hook2"));
    if one == two {
        t.fail("randomization on, yet the runtime was at the same address in both runs");
    }
    t.assert_contains(Some("killed"), "HOOK __jit_debug_register_code");
    t.assert_contains(Some("resolved"), "(pending 'jit_second' resolved)");
    let want = format!(
        "jit_second+0x0 {}:{}",
        layout.get("jit_second").file,
        layout
            .get("jit_second")
            .line_at(layout.get("jit_second").start)
            .unwrap()
    );
    t.assert_contains(Some("resolved"), &want);
    t.assert_contains(Some("resolved"), "No pending jit breakpoints.");
    // No request left: the hook went at the stop.
    t.assert_not_contains(Some("resolved"), "HOOK");
    t.assert_contains(Some("killed2"), "is removed with the process's code");
    t.assert_contains(Some("killed2"), "pending: jit_second");
    t.assert_not_contains(Some("killed2"), "jit_scenario.jit");
    t.assert_contains(Some("run3"), "(pending 'jit_second' resolved)");
    t.assert_contains(Some("run3"), &want);
    t.assert_contains(Some("run3"), "stop only if 1 == 1");
    t.assert_not_contains(None, "Cannot insert breakpoint");
    t.assert_not_contains(None, "Python Exception");
    t.assert_not_contains(None, "registration hook was not");
}

#[test]
fn pending_across_runs_compact() {
    pending_across_runs("compact");
}

#[test]
fn pending_across_runs_elf() {
    pending_across_runs("elf");
}
