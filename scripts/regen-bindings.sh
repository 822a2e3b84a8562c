#!/bin/sh
# Regenerates jit-reader/src/bindings.rs from GDB's jit-reader.h with bindgen (needs
# libclang, e.g. Debian's libclang-dev; JIT_READER_H=/path/to/jit-reader.h overrides the
# header). Building the reader itself never needs libclang: the bindings are committed.
set -eu
cd "$(dirname "$0")/.."
JIT_READER_REGEN_BINDINGS=1 cargo test -p jit-reader --test bindings -- --nocapture
git --no-pager diff --stat -- jit-reader/src/bindings.rs
