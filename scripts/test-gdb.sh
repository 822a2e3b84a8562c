#!/usr/bin/env bash
# Runs the end-to-end tests against another GDB (e.g. one scripts/build-gdb.sh built): the
# tests run `gdb` from PATH, the launcher runs JIT_GDB_GDB; both point at it here.
#
#   scripts/test-gdb.sh /path/to/gdb [cargo test arguments...]
set -euo pipefail
gdb=$(readlink -f "${1:?usage: scripts/test-gdb.sh /path/to/gdb [cargo test args]}")
shift
cd "$(dirname "$0")/.."
shim=$(mktemp -d /tmp/jit-gdb-other-gdb.XXXXXX)
trap 'rm -rf "$shim"' EXIT
ln -s "$gdb" "$shim/gdb"
"$gdb" --version | head -1
PATH=$shim:$PATH JIT_GDB_GDB=$gdb JIT_GDB_REQUIRE_TOOLS=1 cargo test --workspace --no-fail-fast "$@"
