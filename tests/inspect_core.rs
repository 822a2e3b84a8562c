//! `jit-gdb inspect` on real core files of the JIT test host (a `gcore` taken by real GDB
//! from a waiting host, and the kernel's core of a host that faults inside JIT code), for
//! both payload formats: the inspector's functions and symbols must agree with the host's
//! own layout and with what GDB shows for the same core. Then damaged cores: a truncated
//! file, a corrupted payload and a looping entry list give a clear error and a partial
//! report with exit status 3, never a crash.

mod common;
mod reader_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::scenario::Host;
use common::*;

fn jit_gdb() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_jit-gdb"))
}

/// Runs `jit-gdb inspect CORE --exe HOST ARGS...`; panics if it died of a signal.
fn inspect(core: &Path, args: &[&str]) -> Output {
    let out = Command::new(jit_gdb())
        .arg("inspect")
        .arg(core)
        .arg("--exe")
        .arg(testhost())
        .args(args)
        .output()
        .expect("run jit-gdb");
    assert!(
        out.status.code().is_some(),
        "jit-gdb inspect died: {:?}\n{}",
        out.status,
        text(&out)
    );
    out
}

fn text(o: &Output) -> String {
    format!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A function line of `--list`: (start, size, name, file).
type Listed = (u64, u64, String, String);

/// Entries of `--list`: (entry address, payload address, payload size, functions or the
/// error text).
#[derive(Debug, Clone, PartialEq)]
struct ListedEntry {
    addr: u64,
    payload: u64,
    size: u64,
    result: Result<Vec<Listed>, String>,
}

fn parse_list(stdout: &str) -> Vec<ListedEntry> {
    let mut entries: Vec<ListedEntry> = Vec::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("entry ") {
            // entry N at 0xA: payload 0xP, S bytes: KIND, ... | error: ...
            let w: Vec<&str> = rest.split_whitespace().collect();
            let addr = parse_hex(w[2].trim_end_matches(':')).unwrap();
            let payload = parse_hex(w[4].trim_end_matches(',')).unwrap();
            let size = w[5].parse().unwrap();
            let result = match rest.split_once("bytes: error: ") {
                Some((_, e)) => Err(e.to_string()),
                None => Ok(Vec::new()),
            };
            entries.push(ListedEntry {
                addr,
                payload,
                size,
                result,
            });
        } else if let Some(rest) = line.strip_prefix("  0x") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            let f = (
                parse_hex(w[0]).unwrap(),
                w[1].parse().unwrap(),
                w[2].to_string(),
                w[3].to_string(),
            );
            if let Some(Ok(fs)) = entries.last_mut().map(|e| &mut e.result) {
                fs.push(f);
            }
        }
    }
    entries
}

fn all_functions(entries: &[ListedEntry]) -> Vec<Listed> {
    let mut v: Vec<Listed> = entries
        .iter()
        .filter_map(|e| e.result.as_ref().ok())
        .flatten()
        .cloned()
        .collect();
    v.sort();
    v
}

/// What the host says it registered.
fn layout_functions(layout: &Layout) -> Vec<Listed> {
    let mut v: Vec<Listed> = layout
        .functions
        .iter()
        .map(|f| (f.start, f.size, f.name.clone(), f.file.clone()))
        .collect();
    v.sort();
    v
}

/// `--symbolize` output for `addrs`, one line each.
fn symbolize(core: &Path, addrs: &[u64]) -> Vec<String> {
    let args: Vec<String> = addrs.iter().map(|a| format!("{a:#x}")).collect();
    let mut a = vec!["--symbolize"];
    a.extend(args.iter().map(String::as_str));
    let out = inspect(core, &a);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Host options for `format`, and the GDB prelude that makes GDB see its payloads.
fn host(format: &str, extra: &[&str]) -> Host {
    let mut args = vec!["--format", format];
    args.extend(extra);
    let h = Host::new(testhost(), &args);
    if format == "compact" {
        h.with_gdb_prelude([reader_support::load_cmd()])
    } else {
        h
    }
}

/// A `gcore` of a waiting host (taken by GDB attached to it).
fn gcore(h: &Host, dir: &Path) -> PathBuf {
    let a = h.args_in(dir);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let waiting = WaitingHost::start(&h.program, &a, dir);
    let core = dir.join("gcore.core");
    let t = Gdb::attach(waiting.pid, dir)
        .section("gcore", [format!("gcore {}", core.display())])
        .cmd("detach")
        .run();
    drop(waiting);
    if !core.exists() {
        t.fail("gcore wrote no core file");
    }
    core
}

/// The checks shared by every core of the scenario: `--list` gives exactly the host's
/// functions, and for every frame of GDB's backtrace of the core, `--symbolize` gives
/// GDB's function name, file and line (JIT frames) or `??` (native frames: the inspector
/// knows only JIT code). Returns the GDB transcript.
fn compare_with_gdb(h: &Host, core: &Path, layout: &Layout, dir: &Path) -> Transcript {
    let out = inspect(core, &["--list"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    eprintln!("inspect --list:\n{stdout}");
    assert_eq!(
        all_functions(&parse_list(&stdout)),
        layout_functions(layout),
        "{stdout}"
    );

    let mut g = Gdb::core(&h.program, core, dir)
        .cmds(h.gdb_prelude.clone())
        .section("bt", ["bt"])
        .section("pc", ["p/x $pc"]);
    let elf = h.args.iter().any(|a| a == "elf");
    // GDB resolves `info symbol` for ELF payloads (not guaranteed for reader functions).
    let probes: Vec<u64> = layout
        .functions
        .iter()
        .flat_map(|f| f.insns.iter().map(move |o| f.start + o))
        .collect();
    if elf {
        for a in &probes {
            g = g.section(&format!("sym{a:x}"), [format!("info symbol {a:#x}")]);
        }
    }
    let t = g.run();
    let frames = t.gdb_bt("bt");
    if frames.is_empty() {
        t.fail("no backtrace");
    }
    eprintln!("gdb bt:\n{}", t.section("bt"));
    let pc0 = t
        .section("pc")
        .lines()
        .find_map(|l| l.split(" = ").nth(1).and_then(parse_hex))
        .unwrap_or_else(|| t.fail("no $pc"));
    // GDB looks up a caller frame's line at pc - 1 (inside the call); so does this check.
    let pcs: Vec<(u64, &Frame)> = frames
        .iter()
        .map(|f| {
            let pc = if f.level == 0 { Some(pc0) } else { f.pc };
            (pc, f)
        })
        .filter_map(|(pc, f)| pc.map(|pc| (if f.level == 0 { pc } else { pc - 1 }, f)))
        .collect();
    let addrs: Vec<u64> = pcs.iter().map(|(a, _)| *a).collect();
    let lines = symbolize(core, &addrs);
    assert_eq!(lines.len(), addrs.len());
    let mut jit_frames = 0;
    for ((addr, frame), line) in pcs.iter().zip(&lines) {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parse_hex(w[0]), Some(*addr), "{line}");
        if layout.by_addr(*addr).is_some() {
            jit_frames += 1;
            let (name, _) = w[1]
                .split_once('+')
                .unwrap_or_else(|| t.fail(&format!("inspector did not resolve {addr:#x}: {line}")));
            // GDB shows the registered name, or (a bare reader, the file absent) its cache
            // path; the inspector always the registered name.
            let shown = frame.file.clone().unwrap_or_default();
            let registered = w.get(2).and_then(|l| l.rsplit_once(':')).map(|(f, _)| f);
            let file = match registered {
                Some(r) if is_cached_name(&shown, r) => r.to_string(),
                _ => shown,
            };
            let want = format!("{file}:{}", frame.line.unwrap_or(0));
            if name != frame.function || w.get(2) != Some(&want.as_str()) {
                t.fail(&format!(
                    "frame {}: GDB shows {} at {want}, the inspector `{line}`",
                    frame.level, frame.function
                ));
            }
        } else if w[1] != "??" {
            t.fail(&format!(
                "native frame {} ({}) symbolized as JIT code: {line}",
                frame.level, frame.function
            ));
        }
    }
    if jit_frames < 4 {
        t.fail(&format!("only {jit_frames} JIT frames in GDB's backtrace"));
    }

    if elf {
        let lines = symbolize(core, &probes);
        for (a, line) in probes.iter().zip(&lines) {
            // "jit_middle + 4 in section .text" (offset 0: no "+ 0")
            let gdb = t.section(&format!("sym{a:x}")).trim().to_string();
            let gdb_sym = gdb
                .split(" in section")
                .next()
                .unwrap_or("")
                .replace(" + ", "+");
            let ours = line.split_whitespace().nth(1).unwrap_or("");
            let ours = match ours.strip_suffix("+0x0") {
                Some(n) => n.to_string(),
                None => match ours.split_once("+0x") {
                    Some((n, off)) => format!("{n}+{}", u64::from_str_radix(off, 16).unwrap()),
                    None => ours.to_string(),
                },
            };
            if gdb_sym != ours {
                t.fail(&format!(
                    "info symbol {a:#x}: GDB `{gdb}`, inspector `{line}`"
                ));
            }
        }
    }
    t
}

fn gcore_matches_gdb(format: &str) {
    if !require_tool("gdb", &format!("inspect_gcore_{format}")) {
        return;
    }
    let h = host(format, &[]);
    let dir = TempDir::new(&format!("inspect-gcore-{format}"));
    let layout = h.layout(dir.path());
    let core = gcore(&h, dir.path());
    compare_with_gdb(&h, &core, &layout, dir.path());
}

#[test]
fn gcore_elf_matches_gdb() {
    gcore_matches_gdb("elf");
}

#[test]
fn gcore_compact_matches_gdb() {
    gcore_matches_gdb("compact");
}

/// The kernel's core of a host that faults in `jit_second` (GDB's own core at the fault
/// where the kernel pipes cores to a program, as in [`common::scenario::kernel_core`]).
fn kernel_core_matches_gdb(format: &str) {
    if !require_tool("gdb", &format!("inspect_kernel_core_{format}")) {
        return;
    }
    let h = host(format, &[]);
    let dir = TempDir::new(&format!("inspect-crash-{format}"));
    let layout = h.layout(dir.path());
    let fallback = dir.join("gdb-generated.core");
    if core_pattern().is_some_and(|p| p.starts_with('|')) {
        h.gdb(dir.path(), "crash")
            .cmd("run")
            .cmd(format!("generate-core-file {}", fallback.display()))
            .run();
    }
    let core = common::scenario::kernel_core(&h, dir.path(), fallback);
    let t = compare_with_gdb(&h, &core, &layout, dir.path());
    let frames = t.gdb_bt("bt");
    if !frames[0].is("jit_second") {
        t.fail("the fault is not in jit_second");
    }
}

#[test]
fn kernel_core_elf_matches_gdb() {
    kernel_core_matches_gdb("elf");
}

#[test]
fn kernel_core_compact_matches_gdb() {
    kernel_core_matches_gdb("compact");
}

/// File offset of the core's byte for memory address `addr` (PT_LOAD segments, read here
/// with `object` independently of the inspector).
fn file_offset(core: &[u8], addr: u64) -> u64 {
    use object::read::elf::{FileHeader, ProgramHeader};
    let h = object::elf::FileHeader64::<object::Endianness>::parse(core).unwrap();
    let e = h.endian().unwrap();
    for ph in h.program_headers(e, core).unwrap() {
        let (v, f, o) = (ph.p_vaddr(e), ph.p_filesz(e), ph.p_offset(e));
        if ph.p_type(e) == object::elf::PT_LOAD && addr >= v && addr < v + f {
            return o + (addr - v);
        }
    }
    panic!("{addr:#x} is not in the core's file");
}

/// A gcore of the compact host with one entry per function, and its `--list`.
fn per_function_core(tag: &str) -> Option<(TempDir, PathBuf, Vec<ListedEntry>)> {
    if !require_tool("gdb", tag) {
        return None;
    }
    let h = host("compact", &["--objects", "per-function"]);
    let dir = TempDir::new(tag);
    let core = gcore(&h, dir.path());
    let out = inspect(&core, &["--list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let entries = parse_list(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(entries.len(), 4, "{}", text(&out));
    Some((dir, core, entries))
}

#[test]
fn corrupted_payload_is_reported_and_the_rest_listed() {
    let Some((dir, core, entries)) = per_function_core("inspect-corrupt") else {
        return;
    };
    let mut bytes = std::fs::read(&core).unwrap();
    // Entry 1's payload claims format version 3.
    let victim = &entries[1];
    let at = file_offset(&bytes, victim.payload + 4) as usize;
    assert_eq!(bytes[at], 2, "compact version byte");
    bytes[at] = 3;
    let damaged = dir.join("damaged.core");
    std::fs::write(&damaged, &bytes).unwrap();
    let out = inspect(&damaged, &["--list"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{}", text(&out));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let got = parse_list(&stdout);
    assert_eq!(got.len(), 4);
    for (i, (g, e)) in got.iter().zip(&entries).enumerate() {
        if i == 1 {
            let err = g.result.as_ref().expect_err("entry 1 must fail");
            assert!(err.contains("version 3"), "{err}");
        } else {
            assert_eq!(g, e, "entry {i} must be listed as before");
        }
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains("partial"));

    // --symbolize still resolves the intact entries' code and exits 3.
    let f = &entries[0].result.as_ref().unwrap()[0];
    let out = inspect(&damaged, &["--symbolize", &format!("{:x}", f.0 + 1)]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{}+0x1", f.2)));
}

#[test]
fn looping_entry_list_is_cut() {
    let Some((dir, core, entries)) = per_function_core("inspect-loop") else {
        return;
    };
    let mut bytes = std::fs::read(&core).unwrap();
    // The last entry's `next` points back at the first.
    let at = file_offset(&bytes, entries[3].addr) as usize;
    bytes[at..at + 8].copy_from_slice(&entries[0].addr.to_le_bytes());
    let damaged = dir.join("loop.core");
    std::fs::write(&damaged, &bytes).unwrap();
    let out = inspect(&damaged, &["--list"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(stdout.contains("the entry list loops"), "{}", text(&out));
    assert_eq!(parse_list(&stdout), entries, "{}", text(&out));
}

#[test]
fn truncated_core_reports_what_it_can() {
    let Some((dir, core, entries)) = per_function_core("inspect-truncated") else {
        return;
    };
    let bytes = std::fs::read(&core).unwrap();
    // Cut inside the payload that comes last in the file: entries (and payloads) that
    // lie wholly before the cut must still be listed as before.
    let payload_at: Vec<u64> = entries
        .iter()
        .map(|e| file_offset(&bytes, e.payload))
        .collect();
    // Where the allocator put cells and payloads is its business: the list can be
    // reached up to the first entry whose cell lies beyond the cut.
    let cell_end = |i: usize| file_offset(&bytes, entries[i].addr) + 32;
    let last = (0..entries.len()).max_by_key(|&i| payload_at[i]).unwrap();
    let cut = payload_at[last] + entries[last].size / 2;
    let truncated = dir.join("truncated.core");
    std::fs::write(&truncated, &bytes[..cut as usize]).unwrap();
    let out = inspect(&truncated, &["--list"]);
    eprintln!("{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let got = parse_list(&stdout);
    let mut intact = 0;
    let reachable = (0..entries.len())
        .take_while(|&i| cell_end(i) <= cut)
        .count();
    for (i, e) in entries.iter().enumerate().take(reachable) {
        let payload_end = payload_at[i] + e.size;
        let listed = got.iter().find(|g| g.addr == e.addr);
        if payload_end <= cut {
            intact += 1;
            assert_eq!(listed, Some(e), "entry {i}: {}", text(&out));
        } else if i == last {
            let err = listed
                .and_then(|g| g.result.clone().err())
                .unwrap_or_else(|| panic!("entry {i} must fail: {}", text(&out)));
            assert!(err.contains("truncated"), "{err}");
        }
    }
    if reachable < entries.len() {
        let want = format!(
            "entry {reachable} at {:#x} cannot be read",
            entries[reachable].addr
        );
        assert!(stdout.contains(&want), "{want}: {}", text(&out));
        assert!(
            stdout.contains("the core file is truncated"),
            "{}",
            text(&out)
        );
    }
    eprintln!(
        "{intact} of {} entries intact before the cut",
        entries.len()
    );

    // Cuts everywhere: never a crash; either a fatal error (1) naming the problem or a
    // partial report (3).
    for k in 1..16u64 {
        let cut = bytes.len() as u64 * k / 16;
        std::fs::write(&truncated, &bytes[..cut as usize]).unwrap();
        let out = inspect(&truncated, &["--list"]);
        let code = out.status.code();
        assert!(
            code == Some(1) || code == Some(3),
            "cut at {cut}: {}",
            text(&out)
        );
        let all = text(&out);
        assert!(
            all.contains("truncated") || all.contains("not in the core"),
            "cut at {cut}: the problem is not named: {all}"
        );
    }
    let out = inspect(&dir.join("missing.core"), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the core file"));
}

#[test]
fn perf_map_and_elf_exports() {
    let Some((dir, core, entries)) = per_function_core("inspect-exports") else {
        return;
    };
    let funcs = all_functions(&entries);
    let map = dir.join("perf.map");
    let out = inspect(&core, &["--perf-map", map.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let want: String = funcs
        .iter()
        .map(|(s, n, name, _)| format!("{s:x} {n:x} {name}\n"))
        .collect();
    assert_eq!(std::fs::read_to_string(&map).unwrap(), want);

    // --symbolize without addresses reads them from stdin, several per line, hex with or
    // without 0x: the same answers as on the command line.
    let addrs: Vec<u64> = funcs.iter().map(|f| f.0 + 3).collect();
    let stdin: String = addrs.iter().map(|a| format!("{a:x} {a:#x}\n")).collect();
    let mut child = Command::new(jit_gdb())
        .arg("inspect")
        .arg(&core)
        .arg("--exe")
        .arg(testhost())
        .arg("--symbolize")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let from_stdin: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let twice: Vec<String> = symbolize(&core, &addrs)
        .into_iter()
        .flat_map(|l| [l.clone(), l])
        .collect();
    assert_eq!(from_stdin, twice);

    let elf = dir.join("jit.elf");
    let out = inspect(&core, &["--elf", elf.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    if !require_tool("addr2line", "perf_map_and_elf_exports (addr2line part)") {
        return;
    }
    // addr2line reads the exported ELF like any object file: same names and lines as the
    // inspector's own symbolizer.
    let addrs: Vec<u64> = funcs.iter().flat_map(|f| [f.0, f.0 + f.1 / 2]).collect();
    let ours = symbolize(&core, &addrs);
    let a2l = Command::new("addr2line")
        .arg("-f")
        .arg("-e")
        .arg(&elf)
        .args(addrs.iter().map(|a| format!("{a:#x}")))
        .output()
        .unwrap();
    let a2l = String::from_utf8_lossy(&a2l.stdout);
    let a2l: Vec<&str> = a2l.lines().collect();
    for (i, line) in ours.iter().enumerate() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let name = w[1].split('+').next().unwrap();
        assert_eq!(a2l[2 * i], name, "{line}");
        assert_eq!(a2l[2 * i + 1], w[2], "{line}");
    }
}
