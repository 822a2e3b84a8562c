#!/usr/bin/env bash
# The main job: builds jit-gdb and its GDB reader, installs GDB if missing, and runs the demo
# JIT under GDB (backtrace through JIT frames). Extra arguments go to `jit-gdb demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-tools.sh gdb cc
cargo build --release -q -p jit-reader -p jit-gdb
exec target/release/jit-gdb demo "$@"
