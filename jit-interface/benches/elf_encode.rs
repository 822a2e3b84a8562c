//! Cost of encoding one ELF object (`jit_interface::elf::encode`), the work a registration
//! does when its object gets an entry of its own (under a debugger, each such registration
//! is also a GDB stop of about 0.5 ms): one function of the benchmark shape (20-character
//! name, 8 line rows, frame-pointer frame with an epilogue), and 8 such functions.
//!
//! `cargo bench -p jit-interface --bench elf_encode`. Used to decide whether one-function
//! objects need a writer of their own (docs/PERFORMANCE.md, "Encoding one ELF object").
//! The "saving" rows: the same functions also saving r12-r14 (three saves and three
//! restores described by register rules), built and encoded in both formats, against the
//! same without rules (docs/PERFORMANCE.md section 7).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use jit_interface::arch::x86_64::{R12, R13, R14};
use jit_interface::{JitObject, LineRow, RegisterRule};

/// `n` adjacent 64-byte functions of the benchmark shape.
fn object(n: u64) -> JitObject {
    build(n, false)
}

/// [`object`], the functions saving r12-r14 after the prologue and restoring them before
/// the epilogue if `saving`.
fn build(n: u64, saving: bool) -> JitObject {
    let mut o = JitObject::new();
    for i in 0..n {
        let f = o
            .add_function(
                &format!("jit_function_{i:06}_"),
                0x7f00_0000_0000 + i * 64,
                64,
            )
            .unwrap();
        let rows: Vec<LineRow> = (0..8)
            .map(|r| LineRow {
                offset: r * 7,
                line: (i * 10) as u32 + 1 + r,
            })
            .collect();
        o.set_lines(f, "benchmark.js", &rows).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 63, 64).unwrap();
        if saving {
            for (k, reg) in [R12, R13, R14].into_iter().enumerate() {
                let at = 6 + 2 * k as u32;
                let slot = -24 - 8 * k as i32;
                o.add_register_rule(f, at, reg, RegisterRule::AtCfa(slot))
                    .unwrap();
            }
            for (k, reg) in [R14, R13, R12].into_iter().enumerate() {
                o.add_register_rule(f, 58 + 2 * k as u32, reg, RegisterRule::SameValue)
                    .unwrap();
            }
        }
    }
    o
}

fn encode(c: &mut Criterion) {
    for n in [1, 8] {
        let o = object(n);
        c.bench_function(&format!("elf::encode, {n} function(s)"), |b| {
            b.iter(|| jit_interface::elf::encode(black_box(&o)).unwrap())
        });
    }
}

/// Building and encoding objects with and without register rules, in both formats.
fn saving(c: &mut Criterion) {
    for n in [1, 8] {
        for saving in [false, true] {
            let what = if saving { "saving r12-r14" } else { "plain" };
            c.bench_function(
                &format!("build + elf::encode, {n} function(s), {what}"),
                |b| b.iter(|| jit_interface::elf::encode(&build(black_box(n), saving)).unwrap()),
            );
            c.bench_function(
                &format!("build + compact encode, {n} function(s), {what}"),
                |b| {
                    let mut out = Vec::new();
                    b.iter(|| {
                        out.clear();
                        jit_interface::encode_record(&mut out, &build(black_box(n), saving), None)
                            .unwrap()
                    })
                },
            );
        }
    }
}

criterion_group!(benches, encode, saving);
criterion_main!(benches);
