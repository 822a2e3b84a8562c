#!/usr/bin/env bash
# Fuzzes both decoder sinks for a bounded time each:
#   decode  the decoder into the data model (fuzz/fuzz_targets/decode.rs)
#   reader  the GDB reader's own sink against the model's, then its symbol-table planning
#           (fuzz/fuzz_targets/reader.rs)
#   scripts/fuzz.sh [SECONDS [TARGET...]]   (default: 60 seconds for each of decode, reader)
# Needs cargo-fuzz (`cargo install cargo-fuzz`). The toolchain is stable; cargo-fuzz's
# nightly-only compiler flags are enabled with RUSTC_BOOTSTRAP=1. Crashes land in
# fuzz/artifacts/TARGET/, the corpus grows in fuzz/corpus/TARGET/ (both git-ignored).
set -euo pipefail

seconds=${1:-60}
case $seconds in
'' | *[!0-9]*) echo "usage: $0 [SECONDS [decode|reader]...]" >&2; exit 2 ;;
esac
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(decode reader)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
for t in "${targets[@]}"; do
    if [ ! -f "fuzz/fuzz_targets/$t.rs" ]; then
        echo "$0: no fuzz target $t in fuzz/fuzz_targets/" >&2
        exit 2
    fi
done
if ! command -v cargo-fuzz >/dev/null; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 1
fi

seeds=$root/fuzz/corpus/decode
mkdir -p "$seeds"
# Seeds: real encoder output (sample, random and documented payloads) from the unit test.
JIT_GDB_FUZZ_SEEDS=$seeds cargo test -q -p jit-interface --no-default-features --lib \
    format::tests::seeds_decode >/dev/null

export RUSTC_BOOTSTRAP=1
for t in "${targets[@]}"; do
    corpus=$root/fuzz/corpus/$t
    mkdir -p "$corpus"
    echo "== fuzz target $t: $seconds s"
    # New inputs go to the target's own corpus (the first directory); the decode corpus,
    # seeds included, is read as well: both targets take the same payloads.
    dirs=("$corpus")
    [ "$t" = decode ] || dirs+=("$seeds")
    # One job: the machine's cores are shared. -timeout catches hangs, -rss_limit_mb runaway
    # allocation; both count as failures.
    cargo fuzz run "$t" "${dirs[@]}" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -max_len=16384 \
        -print_final_stats=1
done
