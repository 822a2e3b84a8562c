//! jitdump output, checked with the real `perf record -k mono`, `perf inject --jit`,
//! `perf report` and `perf annotate`, plus a structural read of the file itself.

mod perf_support;

use std::collections::HashMap;
use std::process::Command;

use perf_support::*;

/// Records the host with DWARF call graphs, injects the jitdump, and checks that perf names
/// the JIT function, unwinds through it to its JIT caller (our `.eh_frame`), and attributes
/// samples to the registered source lines.
#[test]
fn perf_inject_names_unwinds_and_attributes_lines() {
    let dir = scratch("dump-inject");
    if !require_perf(&dir) {
        return;
    }
    let host = host_path();
    let out = Command::new("perf")
        .args([
            "record",
            "-q",
            "-k",
            "mono",
            "-e",
            "cpu-clock",
            "--call-graph",
            "dwarf",
            "-o",
            "perf.data",
            "--",
        ])
        .arg(&host)
        .args(["--ms", "500", "--extra", "5"])
        .env("JIT_DUMP", "1")
        .env("JIT_DUMP_DIR", &dir)
        .env_remove("JIT_PERF_MAP")
        .current_dir(&dir)
        .output()
        .expect("run perf record");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "perf record failed: {stderr}\n{stdout}"
    );
    let host = HostReport::parse(&stdout);
    assert!(host.perf_errors.is_empty(), "{:?}", host.perf_errors);
    assert!(dir.join(format!("jit-{}.dump", host.pid)).exists());

    perf(
        &["inject", "--jit", "-i", "perf.data", "-o", "jit.data"],
        &dir,
    );
    // perf inject writes one ELF file per JIT_CODE_LOAD.
    let prefix = format!("jitted-{}-", host.pid);
    let elves = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            let n = e.as_ref().unwrap().file_name();
            let n = n.to_string_lossy();
            n.starts_with(&prefix) && n.ends_with(".so")
        })
        .count();
    assert_eq!(
        elves,
        host.functions.len(),
        "one ELF per registered function"
    );

    // Names, and the DWARF call chain from the loop through its JIT caller.
    let report = perf(
        &[
            "report",
            "--stdio",
            "-i",
            "jit.data",
            "--no-children",
            "--sort",
            "dso,sym",
        ],
        &dir,
    );
    let rows = report_rows(&report);
    println!(
        "{}",
        rows.iter().take(6).copied().collect::<Vec<_>>().join("\n")
    );
    assert!(
        rows[0].contains(&prefix) && rows[0].contains("[.] jit_hot_loop"),
        "the hottest symbol should be jit_hot_loop in a jitted-PID-N.so:\n{report}"
    );
    // perf prints a caller as `jit_outer`, or as `--NN.NN%--jit_outer` when samples branch.
    let chain: Vec<&str> = rows.iter().skip(1).take(8).map(|r| r.trim()).collect();
    assert!(
        chain.contains(&"---jit_hot_loop")
            && chain
                .iter()
                .any(|r| r == &"jit_outer" || r.ends_with("--jit_outer")),
        "perf should unwind from jit_hot_loop into jit_outer with the jitdump's unwinding tables:\n{report}"
    );

    // Source lines: the loop's line gets the samples.
    let (file, line) = host.loop_line();
    let srclines = perf(
        &[
            "report",
            "--stdio",
            "-i",
            "jit.data",
            "--no-children",
            "-g",
            "none",
            "--sort",
            "srcline",
        ],
        &dir,
    );
    let rows = report_rows(&srclines);
    println!(
        "{}",
        rows.iter().take(3).copied().collect::<Vec<_>>().join("\n")
    );
    assert!(
        rows[0].trim_end().ends_with(&format!("{file}:{line}")),
        "the hottest source line should be {file}:{line}, the hot loop:\n{srclines}"
    );

    // Every registered row of the function shows up in the annotation, the last one too.
    let annotate = perf(
        &[
            "annotate",
            "--stdio",
            "-i",
            "jit.data",
            "-s",
            "jit_hot_loop",
        ],
        &dir,
    );
    for (_, line, file) in &host.function("jit_hot_loop").lines {
        assert!(
            annotate.contains(&format!("{file}:{line}")),
            "perf annotate lacks {file}:{line}:\n{annotate}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[derive(Debug)]
struct Record {
    id: u32,
    timestamp: u64,
    body: Vec<u8>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}
fn cstr(b: &[u8], at: usize) -> (String, usize) {
    let end = at + b[at..].iter().position(|&c| c == 0).expect("NUL");
    (String::from_utf8(b[at..end].to_vec()).unwrap(), end + 1)
}

/// Reads the dump written through the API (no perf involved) and checks it against the
/// specification and against what the host registered.
#[test]
fn dump_file_follows_the_specification() {
    let dir = scratch("dump-structure");
    let out = Command::new(host_path())
        .args(["--ms", "0", "--extra", "50", "--jitdump"])
        .arg(&dir)
        .env_remove("JIT_DUMP")
        .env_remove("JIT_PERF_MAP")
        .output()
        .expect("run host");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let host = HostReport::parse(&stdout);
    let bytes = std::fs::read(dir.join(format!("jit-{}.dump", host.pid))).expect("dump file");

    // File header.
    assert_eq!(u32_at(&bytes, 0), 0x4A69_5444, "magic");
    assert_eq!(u32_at(&bytes, 4), 1, "version");
    assert_eq!(u32_at(&bytes, 8), 40, "total_size");
    assert_eq!(u32_at(&bytes, 12), 62, "EM_X86_64");
    assert_eq!(u32_at(&bytes, 20), host.pid);
    let created = u64_at(&bytes, 24);
    assert_eq!(u64_at(&bytes, 32), 0, "flags: no arch timestamps");

    let mut records = Vec::new();
    let mut at = 40;
    while at < bytes.len() {
        let size = u32_at(&bytes, at + 4) as usize;
        assert!(size >= 16 && at + size <= bytes.len(), "record at {at}");
        records.push(Record {
            id: u32_at(&bytes, at),
            timestamp: u64_at(&bytes, at + 8),
            body: bytes[at + 16..at + size].to_vec(),
        });
        at += size;
    }
    assert_eq!(at, bytes.len(), "records tile the file");
    assert_eq!(
        records.last().unwrap().id,
        3,
        "JIT_CODE_CLOSE at the end (written at exit)"
    );
    let mut last_ts = created;
    for r in &records {
        assert!(r.timestamp >= last_ts, "timestamps are monotonic");
        last_ts = r.timestamp;
    }

    let expected: HashMap<&str, &HostFunction> = host
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f))
        .collect();
    let mut loads = 0;
    let mut pending_debug: Option<u64> = None;
    let mut pending_unwind = false;
    let mut last_index = 0;
    for r in &records {
        let b = &r.body;
        match r.id {
            2 => {
                // JIT_CODE_DEBUG_INFO: code_addr, nr_entry, entries.
                let addr = u64_at(b, 0);
                let n = u64_at(b, 8) as usize;
                let f = host
                    .functions
                    .iter()
                    .find(|f| f.start == addr)
                    .expect("debug info for a registered function");
                assert_eq!(n, f.lines.len() + 1, "rows plus the closing entry");
                let mut p = 16;
                for (i, (off, line, file)) in f.lines.iter().enumerate() {
                    assert_eq!(u64_at(b, p), f.start + off, "entry {i} address");
                    assert_eq!(u32_at(b, p + 8), *line);
                    let (name, next) = cstr(b, p + 16);
                    assert_eq!(&name, file);
                    p = next;
                }
                assert_eq!(u64_at(b, p), f.start + f.size, "closing entry at the end");
                pending_debug = Some(addr);
            }
            4 => {
                // JIT_CODE_UNWINDING_INFO: sizes, then .eh_frame + .eh_frame_hdr.
                let (size, hdr) = (u64_at(b, 0) as usize, u64_at(b, 8) as usize);
                assert!(hdr >= 12 && size > hdr && 24 + size <= b.len());
                assert_eq!(b[24 + size - hdr], 1, ".eh_frame_hdr version");
                pending_unwind = true;
            }
            0 => {
                // JIT_CODE_LOAD
                loads += 1;
                assert_eq!((u32_at(b, 0), u64_at(b, 8)), (host.pid, u64_at(b, 16)));
                let (addr, size, index) = (u64_at(b, 16), u64_at(b, 24), u64_at(b, 32));
                let (name, code_at) = cstr(b, 40);
                let f = expected.get(name.as_str()).expect("a registered name");
                assert_eq!((addr, size), (f.start, f.size), "{name}");
                assert_eq!(b.len() - code_at, size as usize, "{name}: code bytes");
                if name.starts_with("jit_stub_") {
                    assert_eq!(&b[code_at..], &[0xc3], "{name} is one `ret`");
                } else {
                    assert_eq!(b[code_at], 0x55, "{name} starts with push rbp");
                }
                assert!(index > last_index, "code_index increases");
                last_index = index;
                if !f.lines.is_empty() {
                    assert_eq!(pending_debug, Some(addr), "DEBUG_INFO precedes {name}");
                }
                assert!(pending_unwind, "UNWINDING_INFO precedes {name}");
                pending_debug = None;
                pending_unwind = false;
            }
            3 => {}
            other => panic!("unexpected record type {other}"),
        }
    }
    assert_eq!(
        loads,
        host.functions.len(),
        "one JIT_CODE_LOAD per function"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A dump directory that does not exist: reported once, registration and the JIT go on.
#[test]
fn unusable_dump_directory_is_reported_and_registration_goes_on() {
    let missing = scratch("dump-missing").join("no/such/dir");
    let out = Command::new(host_path())
        .args(["--ms", "0"])
        .env("JIT_DUMP", "1")
        .env("JIT_DUMP_DIR", &missing)
        .env_remove("JIT_PERF_MAP")
        .output()
        .expect("run host");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "registration must not fail: {stderr}");
    assert!(stdout.contains("result "), "the JIT code ran: {stdout}");
    let needle = format!("jitdump: directory {} is not usable", missing.display());
    assert_eq!(stderr.matches(&needle).count(), 1, "stderr: {stderr}");
    let host = HostReport::parse(&stdout);
    assert!(
        host.perf_errors.iter().any(|e| e.contains(&needle)),
        "{:?}",
        host.perf_errors
    );
}
