//! Symbolizing 1,000,000 addresses against 100,000 functions (goal: at most 1 s), compared
//! with a baseline measured in the same run: a plain binary search over a sorted `Vec<u64>`
//! of function starts (the least any lookup by address can do). Reported as a ratio, since
//! absolute times depend on the machine.
//!
//! `cargo bench -p jit-interface --features inspect --bench symbolize`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use jit_interface::inspect::{FunctionInfo, Symbolizer};

const FUNCTIONS: u64 = 100_000;
const ADDRESSES: usize = 1_000_000;

/// A small deterministic generator (no dependency for random numbers).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, m: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % m
    }
}

/// 100,000 functions of 16-512 bytes with alignment gaps, 8 line rows each, as a JIT lays
/// them out; and 1,000,000 addresses over the whole range (a few fall in gaps).
fn workload() -> (Vec<FunctionInfo>, Vec<u64>) {
    let mut rng = Lcg(7);
    let mut at = 0x7f00_0000_0000u64;
    let mut functions = Vec::with_capacity(FUNCTIONS as usize);
    for i in 0..FUNCTIONS {
        let size = 16 + rng.next(497);
        let lines = (0..8)
            .map(|r| (at + r * size / 8, (i * 10 + r) as u32 + 1))
            .collect();
        functions.push(FunctionInfo {
            name: format!("jit_function_{i:06}"),
            start: at,
            size,
            file: Some("bench.js".into()),
            lines,
            object: 0,
        });
        at += size + rng.next(16);
    }
    let lo = functions[0].start;
    let addrs = (0..ADDRESSES).map(|_| lo + rng.next(at - lo)).collect();
    (functions, addrs)
}

fn symbolize_all(s: &Symbolizer, addrs: &[u64]) -> u64 {
    let mut acc = 0u64;
    for &a in addrs {
        if let Some(hit) = s.lookup(a) {
            acc = acc
                .wrapping_add(hit.offset)
                .wrapping_add(u64::from(hit.line.unwrap_or(0)));
        }
    }
    acc
}

fn baseline_all(starts: &[u64], addrs: &[u64]) -> u64 {
    let mut acc = 0u64;
    for &a in addrs {
        acc = acc.wrapping_add(starts.partition_point(|&s| s <= a) as u64);
    }
    acc
}

/// Best of `n` runs.
fn best(n: usize, mut f: impl FnMut()) -> Duration {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn bench(c: &mut Criterion) {
    let (functions, addrs) = workload();
    let mut starts: Vec<u64> = functions.iter().map(|f| f.start).collect();
    starts.sort_unstable();
    let build = best(3, || {
        black_box(Symbolizer::new(black_box(functions.clone())));
    });
    let s = Symbolizer::new(functions.clone());

    let mut g = c.benchmark_group("symbolize_1M_addresses_100k_functions");
    g.sample_size(10)
        .measurement_time(std::time::Duration::from_secs(1))
        .warm_up_time(std::time::Duration::from_millis(300));
    g.bench_function("baseline_binary_search", |b| {
        b.iter(|| baseline_all(black_box(&starts), black_box(&addrs)))
    });
    g.bench_function("symbolizer_lookup", |b| {
        b.iter(|| symbolize_all(black_box(&s), black_box(&addrs)))
    });
    g.finish();

    // The ratio, from runs interleaved here so both see the same machine state.
    let base = best(5, || {
        black_box(baseline_all(&starts, &addrs));
    });
    let ours = best(5, || {
        black_box(symbolize_all(&s, &addrs));
    });
    println!(
        "symbolize {ADDRESSES} addresses / {FUNCTIONS} functions: {:.1} ms (build {:.1} ms, incl. cloning the input); \
         baseline binary search {:.1} ms; ratio {:.2}x the baseline; goal <= 1000 ms: {}",
        ours.as_secs_f64() * 1e3,
        build.as_secs_f64() * 1e3,
        base.as_secs_f64() * 1e3,
        ours.as_secs_f64() / base.as_secs_f64(),
        if ours + build <= Duration::from_secs(1) {
            "met"
        } else {
            "NOT met"
        }
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
