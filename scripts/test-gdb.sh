#!/usr/bin/env bash
# Runs the end-to-end tests against another GDB (e.g. one scripts/build-gdb.sh built): the
# tests run `gdb` from PATH, the launcher runs JIT_GDB_GDB; both point at it here.
#
#   scripts/test-gdb.sh /path/to/gdb [cargo test arguments...]
#
# A GDB built from source looks for separate debug info under its own prefix; Debian's
# looks in /usr/lib/debug, where libc6-dbg puts the C library's. Without it GDB sees no
# symbol table in a program without debug info (`/bin/sleep`) and says so instead of "No
# symbol ... in current context". So that only the version differs, the GDB under test is
# run through a wrapper that sets the system's directory first (a no-op for Debian's GDB).
set -euo pipefail
gdb=$(readlink -f "${1:?usage: scripts/test-gdb.sh /path/to/gdb [cargo test args]}")
shift
cd "$(dirname "$0")/.."
shim=$(mktemp -d /tmp/jit-gdb-other-gdb.XXXXXX)
trap 'rm -rf "$shim"' EXIT
cat > "$shim/gdb" <<EOF
#!/bin/sh
exec "$gdb" -iex "set debug-file-directory /usr/lib/debug" "\$@"
EOF
chmod +x "$shim/gdb"
"$shim/gdb" --version | head -1
PATH=$shim:$PATH JIT_GDB_GDB=$shim/gdb JIT_GDB_REQUIRE_TOOLS=1 cargo test --workspace --no-fail-fast "$@"
