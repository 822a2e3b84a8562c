//! Cost of encoding one ELF object (`jit_interface::elf::encode`), the work a registration
//! does when its object gets an entry of its own (under a debugger, each such registration
//! is also a GDB stop of about 0.5 ms): one function of the benchmark shape (20-character
//! name, 8 line rows, frame-pointer frame with an epilogue), and 8 such functions.
//!
//! `cargo bench -p jit-interface --bench elf_encode`. Used to decide whether one-function
//! objects need a writer of their own (docs/PERFORMANCE.md, "Encoding one ELF object").

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use jit_interface::{JitObject, LineRow};

/// `n` adjacent 64-byte functions of the benchmark shape.
fn object(n: u64) -> JitObject {
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

criterion_group!(benches, encode);
criterion_main!(benches);
