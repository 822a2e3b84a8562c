#!/usr/bin/env bash
# The project's test command (README, .ci/run): installs what the tests drive (gdb, lldb,
# valgrind, perf, libclang for the bindings check) on a fresh Debian machine, then runs the
# lints and the whole test suite against the real tools.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v gdb >/dev/null || need+=(gdb)
command -v lldb >/dev/null || need+=(lldb)
command -v valgrind >/dev/null || need+=(valgrind)
command -v perf >/dev/null || need+=(linux-perf)
command -v cc >/dev/null || need+=(gcc)
[ -f /usr/include/gdb/jit-reader.h ] || need+=(gdb)
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || ldconfig -p | grep -q 'libclang\.so' || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing: ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== build (debug: tests; release: the optimised-binary checks)"
cargo build --workspace --all-targets
cargo build --release -p jit-interface -p jit-reader -p jit-gdb --bins --lib

echo "== tests"
cargo test --workspace --no-fail-fast
