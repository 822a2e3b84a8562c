//! A bounded property test of damaged cores: seeded random mutations of the JIT list of a
//! real core (the descriptor's fields, the entries' fields, a few payload bytes) each go
//! through `jit-gdb inspect` (a report or an error, never a signal) and through `jit-gdb
//! core` (GDB with the reader, after the launcher's check: it must finish within its time
//! limit, and GDB must not crash).
//!
//! The core is the compact test host's (one entry per function): its payloads are read by
//! the reader, whose own decoding is fuzzed. ELF payloads are left out on purpose: damaged
//! DWARF in an ELF payload can crash GDB's own DWARF reader (docs/DESIGN.md, "Damaged
//! cores"), a class the list check does not cover.
//!
//! `JIT_GDB_MUTATIONS=N` and `JIT_GDB_MUTATION_SEED=S` run more or other mutations (a
//! failure names its seed and index; the core's addresses change from run to run, the
//! choices do not). `JIT_GDB_MUTATION_NO_CHECK=1` passes `--no-core-check`: the test then
//! fails on the first mutation that crashes or hangs GDB, which is what the check prevents.

mod common;
mod core_support;
mod reader_support;

use std::time::Duration;

use core_support::*;

/// Per run of `jit-gdb inspect` or `jit-gdb core`: a clean report takes about a second.
const LIMIT: Duration = Duration::from_secs(30);

/// xorshift64*: small, seeded, the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn get_u64(bytes: &[u8], addr: u64) -> u64 {
    let at = file_offset(bytes, addr).unwrap();
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// A value for a pointer or size field: the kinds of damage that matter to a list walk.
fn value(rng: &mut Rng, c: &JitCore, bytes: &[u8], field: u64) -> (u64, String) {
    let e = &c.entries[rng.below(c.entries.len() as u64) as usize];
    let old = get_u64(bytes, field);
    match rng.below(10) {
        0 => (0, "0".into()),
        1 => (e.addr, "an entry".into()),
        2 => (e.addr + 8 * (1 + rng.below(3)), "inside an entry".into()),
        3 => (rng.next(), "random".into()),
        4 => (0x8000_0000_0000_0000 | rng.next() >> 1, "huge".into()),
        5 => (
            beyond_memory(bytes) + (rng.below(1 << 20) << 12),
            "beyond the core's memory".into(),
        ),
        6 => (c.descriptor, "the descriptor".into()),
        7 => (e.payload, "a payload".into()),
        8 => (
            old.wrapping_add(rng.below(64)).wrapping_sub(32),
            "off by a little".into(),
        ),
        _ => (old << (1 + rng.below(24)), "shifted left".into()),
    }
}

/// Applies 1 to 3 random edits to the core image; returns what was done.
fn mutate(rng: &mut Rng, c: &JitCore, bytes: &mut [u8]) -> Vec<String> {
    let mut done = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let k = rng.below(c.entries.len() as u64) as usize;
        let e = &c.entries[k];
        match rng.below(12) {
            0 => {
                let v = [0u32, 2, 1, rng.next() as u32][rng.below(4) as usize];
                let at = file_offset(bytes, c.descriptor).unwrap();
                bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
                done.push(format!("descriptor version = {v}"));
            }
            1 | 2 => {
                let (field, name) =
                    [(8, "relevant_entry"), (16, "first_entry")][rng.below(2) as usize];
                let (v, how) = value(rng, c, bytes, c.descriptor + field);
                put_u64(bytes, c.descriptor + field, v);
                done.push(format!("descriptor {name} = {v:#x} ({how})"));
            }
            3..=9 => {
                let (field, name) = [
                    (0, "next_entry"),
                    (8, "prev_entry"),
                    (16, "symfile_addr"),
                    (24, "symfile_size"),
                ][rng.below(4) as usize];
                let (v, how) = value(rng, c, bytes, e.addr + field);
                put_u64(bytes, e.addr + field, v);
                done.push(format!("entry {k} {name} = {v:#x} ({how})"));
            }
            _ => {
                let off = rng.below(e.size);
                let b = rng.next() as u8;
                let at = file_offset(bytes, e.payload + off).unwrap();
                bytes[at] = b;
                done.push(format!("entry {k} payload byte {off} = {b:#04x}"));
            }
        }
    }
    done
}

#[test]
fn mutated_cores_never_crash_or_hang() {
    let Some(c) = compact_core("mutated-cores") else {
        return;
    };
    let count = env_u64("JIT_GDB_MUTATIONS", 40);
    let seed = env_u64("JIT_GDB_MUTATION_SEED", 0x6a69_742d_6764_6226);
    let no_check = env_u64("JIT_GDB_MUTATION_NO_CHECK", 0) != 0;
    let mut rng = Rng(seed.max(1));
    let original = std::fs::read(&c.core).unwrap();
    let core = c.dir.join("mutated.core");
    let (mut cut, mut inspect_partial) = (0, 0);
    let started = std::time::Instant::now();
    for i in 0..count {
        let mut bytes = original.clone();
        let what = mutate(&mut rng, &c, &mut bytes);
        std::fs::write(&core, &bytes).unwrap();
        let case = format!("mutation {i} of seed {seed:#x}: {}", what.join(", "));

        let mut cmd = jit_gdb(c.dir.path());
        cmd.arg("inspect")
            .arg(&core)
            .arg("--exe")
            .arg(&c.host.program);
        let run = run_bounded(cmd, c.dir.path(), LIMIT);
        if run.timed_out {
            run.fail(&format!("{case}: inspect did not finish"));
        }
        match run.status.and_then(|s| s.code()) {
            Some(0) => {}
            Some(1 | 3) => inspect_partial += 1,
            _ => run.fail(&format!("{case}: inspect must exit 0, 1 or 3")),
        }

        let mut cmd = jit_gdb(c.dir.path());
        cmd.arg("core").arg(&c.host.program).arg(&core);
        if no_check {
            cmd.arg("--no-core-check");
        }
        let run = run_bounded(cmd, c.dir.path(), LIMIT);
        if let Some(why) = crash_or_hang(&run) {
            run.fail(&format!("{case}: {why}"));
        }
        // GDB ran to the end of the report's commands.
        if !run.text.contains("(gdb) jit list") {
            run.fail(&format!("{case}: the report did not reach `jit list`"));
        }
        if run.text.contains("would stop GDB") {
            cut += 1;
        }
        assert!(copies_left(c.dir.path()).is_empty(), "{case}: copy left");
    }
    eprintln!(
        "{count} mutations of seed {seed:#x} in {:.0} s: inspect partial or failed on {inspect_partial}, the launcher cut {cut} lists; no crash, no hang",
        started.elapsed().as_secs_f64()
    );
}
