#!/usr/bin/env bash
# Regenerates jit-interface/include/jit_interface.h from jit-interface/src/capi.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
JIT_UPDATE_HEADER=1 cargo test -q -p jit-interface --test header
echo "wrote jit-interface/include/jit_interface.h"
