#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests drive (gdb, lldb,
# valgrind, perf, libclang for the bindings check) on a fresh Debian machine, then runs the
# lints and the whole test suite against the real tools.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-tools.sh gdb lldb valgrind perf cc libclang

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== build (debug: tests; release: the optimised-binary checks)"
cargo build --workspace --all-targets
cargo build --release -p jit-interface -p jit-reader -p jit-gdb --bins --lib

echo "== tests"
cargo test --workspace --no-fail-fast
