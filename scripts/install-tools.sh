#!/usr/bin/env bash
# Installs the Debian packages named as arguments' tools when they are missing.
# Usage: scripts/install-tools.sh gdb lldb valgrind perf libclang lli aarch64
# (aarch64: qemu-user, gdb-multiarch and the cross C toolchain for tests/aarch64_qemu.rs,
# and the Rust target aarch64-unknown-linux-gnu through rustup.)
set -euo pipefail
need=()
for tool in "$@"; do
  case "$tool" in
    gdb) { command -v gdb >/dev/null && [ -f /usr/include/gdb/jit-reader.h ]; } || need+=(gdb) ;;
    lldb) command -v lldb >/dev/null || need+=(lldb) ;;
    valgrind) command -v valgrind >/dev/null || need+=(valgrind) ;;
    perf) command -v perf >/dev/null || need+=(linux-perf) ;;
    # lli (and llvm-as) of Debian's default LLVM: the foreign-producer test (tests/foreign_llvm.rs).
    lli) { command -v lli && command -v llvm-as; } >/dev/null || need+=(llvm) ;;
    cc) command -v cc >/dev/null || need+=(gcc) ;;
    aarch64)
      command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
      command -v gdb-multiarch >/dev/null || need+=(gdb-multiarch)
      command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
      [ -d /usr/aarch64-linux-gnu/include ] || need+=(libc6-dev-arm64-cross)
      [ -d "$(rustc --print sysroot)/lib/rustlib/aarch64-unknown-linux-gnu" ] ||
        rustup target add aarch64-unknown-linux-gnu ;;
    libclang) { ls /usr/lib/llvm-*/lib/libclang.so* || ldconfig -p | grep -q 'libclang\.so'; } >/dev/null 2>&1 || need+=(libclang-dev) ;;
    *) echo "install-tools.sh: unknown tool $tool" >&2; exit 2 ;;
  esac
done
[ ${#need[@]} -eq 0 ] && exit 0
echo "== installing Debian packages: ${need[*]}"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
