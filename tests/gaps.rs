//! Gaps between functions, as every real runtime leaves them (alignment, constant pools,
//! stubs): the registry lets one ELF section span a gap that holds no other registered code
//! (GDB sorts every section at every JIT stop: one per gapped function made it 5-7x slower),
//! and must never let a section cover someone else's code, or GDB ignores that code's
//! section and loses its functions. The scale host's `gapfill` mode registers gapped code
//! one by one under GDB, then code inside those gaps (ELF and compact in turns), then reuses
//! holes of unregistered code, then (ELF) an object alone whose gaps refuse new code. GDB's
//! `info line *ADDR` must name every live function, with its file and line, and nothing at
//! free gap addresses.

mod common;
mod reader_support;

use std::process::Command;

use common::*;
use reader_support::reader_so;

fn gapfill_under_gdb(format: &str) {
    if !require_tool("gdb", &format!("gapfill_{format}")) {
        return;
    }
    let dir = TempDir::new(&format!("gaps-{format}"));
    let queries = dir.join("queries.gdb");
    let mut cmd = Command::new("gdb");
    // Both runs register compact fillers too: their own entries need the reader.
    cmd.args(["-batch", "-nx", "-ex"])
        .arg(format!("jit-reader-load {}", reader_so().display()));
    cmd.args(["-ex", "break scale_host_checkpoint", "-ex", "run", "-ex"])
        .arg(format!("source {}", queries.display()))
        .arg("--args")
        .arg(interface_example("scale_host"))
        .args(["gapfill", "1200", format])
        .env("SCALE_HOST_QUERIES", &queries)
        .current_dir(dir.path());
    let out = cmd.output().expect("run gdb");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let q = std::fs::read_to_string(&queries)
        .unwrap_or_else(|e| panic!("the host wrote no query file ({e}):\n{text}"));
    let expected = slot_queries(&q);
    let live = expected.iter().filter(|e| e.1 != "-").count();
    let fillers = expected
        .iter()
        .filter(|e| e.1.starts_with("gfill_"))
        .count();
    let reused = expected
        .iter()
        .filter(|e| e.1.starts_with("gagain_"))
        .count();
    assert!(
        live > 1200 && fillers == 60 && reused == 24,
        "{live} {fillers} {reused}"
    );
    assert!(
        expected.iter().any(|e| e.1 == "-"),
        "no gap address queried"
    );
    let wrong = wrong_slot_answers(&expected, &text, 10);
    assert!(
        wrong.is_empty(),
        "{format}: GDB's view differs from the host's at {} of {} addresses:\n{}",
        wrong.len(),
        expected.len(),
        wrong.join("\n")
    );
    if format == "elf" {
        assert!(
            text.contains("REFUSED: code at") && text.contains("JIT_GDB_SPLIT_GAPS"),
            "code inside the gaps of an object alone was not refused:\n{text}"
        );
    }
    // GDB would say so if it had to ignore an overlapping section.
    assert!(!text.contains("unexpected overlap"), "{text}");
}

#[test]
fn gapped_code_and_code_put_in_its_gaps_elf() {
    gapfill_under_gdb("elf");
}

#[test]
fn gapped_code_and_code_put_in_its_gaps_compact() {
    gapfill_under_gdb("compact");
}
