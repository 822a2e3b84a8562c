#!/usr/bin/env bash
# Builds a GDB from Debian's source package, once, into a cache directory, and prints the
# path of the gdb it built. Not run by CI: for comparing GDB versions (README, "Source files,
# and GDB versions") and for profiling GDB with symbols.
#
#   scripts/build-gdb.sh 16.3-1          Debian trixie's GDB 16.3
#   scripts/build-gdb.sh 13.1-3          Debian bookworm's GDB 13.1, with symbols (-O2 -g)
#
# Needs deb-src entries for the suite that has the version (this script adds bookworm's and
# trixie's to /etc/apt/sources.list.d/jit-gdb-src.sources when none has it) and the build
# dependencies (installed here: texinfo, bison, flex, libgmp, libmpfr, python3-dev, ...).
# Then run the end-to-end tests against it: scripts/test-gdb.sh "$(scripts/build-gdb.sh 16.3-1)".
set -euo pipefail
version=${1:?usage: scripts/build-gdb.sh DEBIAN-VERSION (e.g. 16.3-1)}
upstream=${version%-*}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/jit-gdb/gdb-build
prefix=$cache/gdb-$version
if [ -x "$prefix/bin/gdb" ]; then
    echo "$prefix/bin/gdb"
    exit 0
fi
mkdir -p "$cache"
cd "$cache"
if ! apt-cache showsrc gdb 2>/dev/null | grep -q "^Version: $version\$"; then
    cat > /etc/apt/sources.list.d/jit-gdb-src.sources <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -q >&2
fi
apt-get install -y -q dpkg-dev texinfo bison flex libgmp-dev libmpfr-dev python3-dev \
    libexpat1-dev zlib1g-dev libreadline-dev liblzma-dev >&2
[ -f "gdb_$version.dsc" ] || apt-get source -q --download-only "gdb=$version" >&2
[ -d "gdb-$upstream" ] || dpkg-source -x "gdb_$version.dsc" "gdb-$upstream" >&2
mkdir -p "build-$version"
cd "build-$version"
# The debugger alone (no binutils, simulators or gdbserver), with Python, x86-64 and aarch64.
../gdb-"$upstream"/configure --prefix="$prefix" --disable-binutils --disable-ld --disable-gold \
    --disable-gas --disable-sim --disable-gprof --disable-gdbserver --disable-werror \
    --disable-nls --without-debuginfod --with-python=/usr/bin/python3 \
    --enable-targets=x86_64-linux-gnu,aarch64-linux-gnu CFLAGS='-O2 -g' CXXFLAGS='-O2 -g' >&2
make -j"$(nproc)" all-gdb >&2
make -C gdb install >&2
# GDB's own data directory (Python modules, syscalls) goes with it.
make -C gdb/data-directory install >&2 || true
echo "$prefix/bin/gdb"
