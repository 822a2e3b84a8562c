#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests drive (gdb, lldb,
# valgrind, perf, libclang for the bindings check, LLVM's lli for the foreign-producer test,
# qemu-user + gdb-multiarch + the aarch64 cross toolchain for tests/aarch64_qemu.rs) on a
# fresh Debian machine, then runs the lints and the whole test suite against the real tools.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-tools.sh gdb lldb valgrind perf cc libclang lli aarch64

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== build (debug: tests; release: the optimised-binary checks)"
cargo build --workspace --all-targets
cargo build --release -p jit-interface -p jit-reader -p jit-gdb --bins --lib

echo "== fuzzing both decoder sinks: the data model's and the GDB reader's (bounded)"
command -v cargo-fuzz >/dev/null || cargo install -q --locked cargo-fuzz
fuzz_log=$(mktemp)
# Seconds per target (two targets).
if ! scripts/fuzz.sh "${JIT_GDB_FUZZ_SECONDS:-30}" decode reader >"$fuzz_log" 2>&1; then
  tail -40 "$fuzz_log"
  echo "fuzzing failed (crash, hang, leak or build error): see above and fuzz/artifacts/{decode,reader}/"
  exit 1
fi
grep -E '^(== fuzz target|stat::number_of_executed_units|stat::peak_rss_mb|Done)' "$fuzz_log" ||
  tail -3 "$fuzz_log"
rm -f "$fuzz_log"

echo "== tests"
cargo test --workspace --no-fail-fast
