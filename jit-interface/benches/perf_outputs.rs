//! Cost of the profiler outputs per registered function, each next to its baseline: a plain
//! buffered write of the very bytes the output produces, measured in the same run. The sink
//! is /dev/null so that the file system does not dominate (and the benchmark does not fill
//! the disk); both sides pay the same write system calls.
//!
//! `cargo bench -p jit-interface --bench perf_outputs`; divide the time per iteration by
//! the function count (100) for ns per function.

#[path = "../examples/support/code_buf.rs"]
mod code_buf;
use code_buf::CodeBuf;
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{BufWriter, Write};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use jit_interface::perf::{code_bytes, map_lines, JitDumpEncoder};
use jit_interface::{Arch, JitObject, LineRow};

const FUNCTIONS: usize = 100;
const SIZE: usize = 32;

/// 100 real 32-byte frame-pointer functions in an executable mapping, with four line rows
/// each, like a JIT's batch.
fn object() -> JitObject {
    let mut buf = CodeBuf::new(FUNCTIONS * SIZE);
    let mut f = [0x90u8; SIZE];
    f[..4].copy_from_slice(&[0x55, 0x48, 0x89, 0xe5]); // push rbp; mov rbp, rsp
    f[SIZE - 2..].copy_from_slice(&[0x5d, 0xc3]); // pop rbp; ret
    for i in 0..FUNCTIONS {
        buf.write(i * SIZE, &f);
    }
    let p = buf.make_executable();
    let mut o = JitObject::new();
    for i in 0..FUNCTIONS {
        let id = o
            .add_function(&format!("jit_fn_{i}"), p + (i * SIZE) as u64, SIZE as u64)
            .unwrap();
        let rows: Vec<LineRow> = (0..4)
            .map(|k| LineRow {
                offset: k * 8,
                line: 10 * i as u32 + k + 1,
            })
            .collect();
        o.set_lines(id, "bench.js", &rows).unwrap();
        o.set_frame_pointer(id, 1, 4).unwrap();
        o.add_epilogue(id, (SIZE - 1) as u32, SIZE as u32).unwrap();
    }
    o
}

fn sink() -> BufWriter<File> {
    let f = OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    BufWriter::with_capacity(64 * 1024, f)
}

/// The jitdump records of the whole object, as the library writes them.
fn encode_dump(enc: &mut JitDumpEncoder, o: &JitObject, code: &mut Vec<u8>, out: &mut Vec<u8>) {
    let ranges = code_bytes(o, code);
    out.clear();
    for (f, r) in o.functions().iter().zip(ranges) {
        let r = r.expect("bench code is readable");
        enc.encode_function(Arch::X86_64, &f, &code[r], 1, 1, out);
    }
}

fn bench(c: &mut Criterion) {
    let o = object();
    let mut g = c.benchmark_group("per_100_functions");
    g.throughput(Throughput::Elements(FUNCTIONS as u64));

    let mut map_bytes = Vec::new();
    map_lines(&o, &mut map_bytes);
    let mut w = sink();
    g.bench_function("perf_map", |b| {
        let mut buf = Vec::new();
        b.iter(|| {
            buf.clear();
            map_lines(black_box(&o), &mut buf);
            w.write_all(&buf).unwrap();
        })
    });
    g.bench_function("perf_map_baseline_write", |b| {
        b.iter(|| w.write_all(black_box(&map_bytes)).unwrap())
    });

    for (name, unwinding) in [("jitdump", true), ("jitdump_without_unwinding", false)] {
        let mut enc = JitDumpEncoder::new(1, unwinding);
        let (mut code, mut out) = (Vec::new(), Vec::new());
        encode_dump(&mut enc, &o, &mut code, &mut out);
        let bytes = out.clone();
        g.bench_function(name, |b| {
            b.iter(|| {
                encode_dump(&mut enc, black_box(&o), &mut code, &mut out);
                w.write_all(&out).unwrap();
            })
        });
        g.bench_function(format!("{name}_baseline_write"), |b| {
            b.iter(|| w.write_all(black_box(&bytes)).unwrap())
        });
        println!(
            "{name}: {} bytes per function; perf map: {} bytes per function",
            bytes.len() / FUNCTIONS,
            map_bytes.len() / FUNCTIONS
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
