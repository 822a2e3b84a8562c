#!/usr/bin/env bash
# Fuzzes the compact-record decoder (fuzz/fuzz_targets/decode.rs) for a bounded time.
#   scripts/fuzz.sh [SECONDS]   (default 60)
# Needs cargo-fuzz (`cargo install cargo-fuzz`). The toolchain is stable; cargo-fuzz's
# nightly-only compiler flags are enabled with RUSTC_BOOTSTRAP=1. Crashes land in
# fuzz/artifacts/decode/, the corpus grows in fuzz/corpus/decode/ (both git-ignored).
set -euo pipefail

seconds=${1:-60}
case $seconds in
'' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if ! command -v cargo-fuzz >/dev/null; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 1
fi

corpus=$root/fuzz/corpus/decode
mkdir -p "$corpus"
# Seeds: real encoder output (sample, random and documented payloads) from the unit test.
JIT_GDB_FUZZ_SEEDS=$corpus cargo test -q -p jit-interface --no-default-features --lib \
    format::tests::seeds_decode >/dev/null

export RUSTC_BOOTSTRAP=1
# One job: the machine's cores are shared. -timeout catches hangs, -rss_limit_mb runaway
# allocation; both count as failures.
exec cargo fuzz run decode "$corpus" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -max_len=16384 \
    -print_final_stats=1
