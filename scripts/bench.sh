#!/usr/bin/env bash
# Scale benchmarks: registration cost without and with GDB, GDB's memory, attach time,
# `bt` through 10,000 JIT frames.
# Every figure is reported next to the floor (../shared/floor, built from its sources in a
# temporary directory, never copied into the project) measured in the same run, and as a
# ratio to it. Writes docs/PERFORMANCE.md. Bounded to a few minutes (BENCH_QUICK=1: smaller),
# plus section 9 (real sessions), whose runs have a time budget each (see bench-sessions.py).
#
#   scripts/bench.sh
#   BENCH_ONLY=bt scripts/bench.sh     only section 4 (backtraces), printed, the report untouched
#   BENCH_ONLY=reg scripts/bench.sh    only section 1 (no debugger), printed, the report untouched
#   BENCH_ONLY=sessions scripts/bench.sh
#                                      only section 9 (real sessions: gaps, user breakpoints,
#                                      the launcher, MI; scripts/bench-sessions.py), printed,
#                                      the report untouched

set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FLOOR_SRC=${FLOOR_SRC:-$ROOT/../../shared/floor}
[ -f "$FLOOR_SRC/jb.c" ] || FLOOR_SRC=/work/shared/floor
WORK=$(mktemp -d /tmp/jit-gdb-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

echo "building (release): scale and deep hosts, reader; floor from $FLOOR_SRC" >&2
cargo build --quiet --release -p jit-interface --example scale_host --example deep_host
cargo build --quiet --release -p jit-reader
# Section 9 runs sessions through the launcher too.
cargo build --quiet --release -p jit-gdb --bin jit-gdb
# The floor's host has no debug info; GDB would spend ~0.1-0.3 s and ~15 MB reading
# scale_host's own DWARF, which is not JIT cost: compare like with like (symbols stay).
cp target/release/examples/scale_host "$WORK/scale_host"
strip --strip-debug "$WORK/scale_host"
# Section 9 (scripts/bench-sessions.py): what it needs, for a run of it alone or from below.
export SESSIONS_HOST=$WORK/scale_host SESSIONS_READER=$ROOT/target/release/libjitreader.so \
    SESSIONS_LAUNCHER=$ROOT/target/release/jit-gdb SESSIONS_SCRIPTS=$ROOT/gdb-scripts/jit.py
if [ "${BENCH_ONLY:-}" = sessions ]; then
    python3 scripts/bench-sessions.py
    exit 0
fi
gcc -O2 -o "$WORK/jb" "$FLOOR_SRC/jb.c" -lpthread
gcc -O2 -shared -fPIC -o "$WORK/floor-reader.so" "$FLOOR_SRC/reader.c"
# Section 4: the native half of the deep host (a typical optimised C build with debug info),
# and two trivial readers that show what any reader costs GDB per frame: one declines every
# frame at once, one reads the PC first (the least a reader that unwinds anything does).
gcc -O2 -g -shared -fPIC -o "$WORK/libdeep_native.so" jit-interface/examples/deep_native.c
cat > "$WORK/trivial_reader.c" <<'C'
#include <gdb/jit-reader.h>
GDB_DECLARE_GPL_COMPATIBLE_READER
static enum gdb_status rd(struct gdb_reader_funcs *s, struct gdb_symbol_callbacks *cb,
                          void *mem, long len) { return GDB_FAIL; }
static enum gdb_status uw(struct gdb_reader_funcs *s, struct gdb_unwind_callbacks *cb) {
#ifdef READ_PC
    struct gdb_reg_value *pc = cb->reg_get(cb, 16);
    if (pc) pc->free(pc);
#endif
    return GDB_FAIL;
}
static struct gdb_frame_id id(struct gdb_reader_funcs *s, struct gdb_unwind_callbacks *cb) {
    struct gdb_frame_id none = {0, 0};
    return none;
}
static void ds(struct gdb_reader_funcs *s) {}
static struct gdb_reader_funcs funcs = {GDB_READER_INTERFACE_VERSION, 0, rd, uw, id, ds};
struct gdb_reader_funcs *gdb_init_reader(void) { return &funcs; }
C
gcc -O2 -shared -fPIC -o "$WORK/null-reader.so" "$WORK/trivial_reader.c"
gcc -O2 -shared -fPIC -DREAD_PC -o "$WORK/pc-reader.so" "$WORK/trivial_reader.c"
# Instruction counts of section 4 (free of the machine's load): GDB runs under callgrind,
# which collects only while bench-bt.py has a timed `bt` running (client requests).
CG_MARK=
if command -v valgrind >/dev/null && [ -f /usr/include/valgrind/callgrind.h ]; then
    cat > "$WORK/cgmark.c" <<'C'
#include <valgrind/callgrind.h>
static int started;
void cg_begin(void) {
    if (!started) { CALLGRIND_START_INSTRUMENTATION; started = 1; }
    CALLGRIND_TOGGLE_COLLECT;
}
void cg_end(const char *label) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT(label); }
C
    gcc -O2 -shared -fPIC -o "$WORK/cgmark.so" "$WORK/cgmark.c"
    CG_MARK=$WORK/cgmark.so
fi

HOST=$WORK/scale_host \
READER=$ROOT/target/release/libjitreader.so \
JB=$WORK/jb FLOOR_READER=$WORK/floor-reader.so \
DEEP_HOST=$ROOT/target/release/examples/deep_host DEEP_NATIVE=$WORK/libdeep_native.so \
NULL_READER=$WORK/null-reader.so PC_READER=$WORK/pc-reader.so BT_SCRIPT=$ROOT/scripts/bench-bt.py \
CG_MARK=$CG_MARK WORK=$WORK ROOT=$ROOT \
OUT=$ROOT/docs/PERFORMANCE.md python3 - <<'PY'
import os, re, subprocess, time, datetime, platform

HOST, READER, JB, FR, OUT = (os.environ[k] for k in ("HOST", "READER", "JB", "FLOOR_READER", "OUT"))
QUICK = os.environ.get("BENCH_QUICK") == "1"
ROOT = os.environ["ROOT"]

def run(cmd, timeout=600):
    """Runs cmd (a list) under /usr/bin/time -v; returns (wall s, max RSS of the biggest
    process: GDB when it is the command, in MB, combined output)."""
    t0 = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    text = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{text[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
    return wall, rss, text

def gdb(args, reader=None):
    cmd = ["gdb", "-batch", "-nx"]
    if reader:
        cmd += ["-ex", f"jit-reader-load {reader}"]
    return cmd + ["-ex", "run", "--args"] + args

def ours_ns(text, what="reg"):
    return float(re.search(r"TOTAL " + what + r" [\d.]+ s \(([\d.]+) ns/function, ([\d.]+) payload bytes", text).group(1))

def faults(text, what="reg"):
    """Page faults per 1,000 functions of a `scale_host` run."""
    return float(re.search(r"TOTAL " + what + r" .*?([\d.]+) page faults per 1000", text).group(1))

def ours_merge_ns(text):
    """Time the registry spent merging entries, per function (`TOTAL merges` of `reg`)."""
    m = re.search(r"TOTAL merges [\d.]+ s \(([\d.]+) ns/function", text)
    return float(m.group(1)) if m else 0.0

def ours_bytes(text):
    return float(re.search(r"([\d.]+) payload bytes/function", text).group(1))

def stops(text):
    """Hook calls of our host (each a GDB stop), from its `TOTAL hooks` line."""
    m = re.search(r"TOTAL hooks (\d+) calls", text)
    return m.group(1) if m else "-"

def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]

def floor_reg_s(text):
    return float(re.search(r"TOTAL reg .*: ([\d.]+) s,", text).group(1))

lines = []
w = lines.append
fmt_name = {"compact": 1, "elf": 0}
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
w("# Performance\n")
w(f"Generated by `scripts/bench.sh` on {now} ({platform.machine()}, {os.cpu_count()} CPUs, "
  f"{subprocess.run(['gdb','--version'],capture_output=True,text=True).stdout.splitlines()[0]}). "
  "Every figure is measured in the same run as its baseline, the floor (`shared/floor`: the "
  "smallest possible registrar, names only, no lines, no unwind info); ratios are ours / floor. "
  "Our functions carry a 20-char name, 8 line rows and a frame-pointer frame each, and our "
  "times include building the `JitObject` model; the floor's payloads are prebuilt. Like the "
  "floor's host, our scale host runs without debug info (`strip --strip-debug` on a copy), so "
  "GDB's figures are JIT costs, not the cost of reading the host's own DWARF. "
  f"Load average when the run started: {os.getloadavg()[0]:.1f} (ratios of small figures move "
  "by 10-20% between runs on a shared machine).\n")

w("## How registration scales\n")
w("- Without a debugger (the library sees no `int3` on `__jit_debug_register_code`), a compact "
  "object's record is appended in place to a batch entry of up to 64 KiB: no stop, nothing "
  "re-encoded; the entry's size grows record by record, so attach and core files see every "
  "registration. Unregistering clears the object's live slot (every reader skips such "
  "records) until the batch is mostly dead and is rewritten. Small ELF objects are appended "
  "in place too, to a growing ELF payload of 256 KiB (about 900 one-function objects, one "
  "compile unit per 64 functions of a source file): each is encoded once, into its place; "
  "the payload is rebuilt when an object leaves (ELF has no live check): recent objects "
  "by a rollback, others by copying the objects left into a new growing payload, the bytes "
  "of objects whose functions have line rows in one source file as they are (found by 16 "
  "bytes kept per object), others from their compact record (kept, about 40 bytes per "
  "function). ELF objects with call sites or variables get entries merged as under a "
  "debugger (below).")
w("- With GDB attached, every `register()` call links an entry of its own and notifies it "
  "(one stop): the functions are read before the call returns. Every 32 single-object "
  "entries are merged into one batch entry (ELF, encoded from the kept or decoded "
  "models), every 32 batches into a sealed one of up to 1,024 objects, which keeps its "
  "members' compact records rather than their models (a quarter of the memory; the first "
  "rewrite of the batch decodes them), "
  "so a registration costs about two stops however many functions are live, and "
  "GDB holds about N/1024 + 64 entries. Objects with 64 functions or more: one stop, for good. "
  "GDB 13 never frees part of what it builds for a function it reads through a reader plugin "
  "(a `void` type per function, more per entry), so under GDB the batches small compact "
  "registrations are merged into are ELF (GDB frees those whole), and after the first 30,000 "
  "functions small compact registrations get ELF entries of their own: the compact "
  "one-by-one rows below are compact for the first 30,000 functions, ELF after.")
w("- Deferred mode (`set_deferred`): compact records are appended in place under GDB too, small "
  "ELF registrations get entries that are linked at once, and both are announced in groups "
  "(here every 1,024 registrations; our GDB scripts also announce pending ones at every "
  "stop).")
w("- Unregistering under GDB rewrites only the batch holding the object and swaps the entry "
  "in place with one pointer store (GDB: drop the old objfile, read the new one).")
w("- An ELF batch losing its first or last object (code dropped in order: oldest or newest "
  "first) splits that end off, 64 objects, into an entry of its own, so the next drops "
  "rewrite the small entry (at most 32 such ends are linked at once). `unregister_many` "
  "takes many objects out in one call, each entry rewritten or unlinked once.")
w("- Compact format version 2: every object record carries its own string table, so records "
  "are appended and copied without re-encoding.\n")

# (4) backtraces, defined first so that BENCH_ONLY=bt can run it alone
def bt_section():
    depth, reps = 10000, (3 if QUICK else 7)
    readers = {"with": READER, "null": os.environ["NULL_READER"], "pc": os.environ["PC_READER"]}
    def session(fmt, cases, loaded, reps=reps, callgrind=None):
        """One GDB at deep_host_stop; returns {STATE:THREAD: {round: (wall s, CPU s, frames)}}.
        With `callgrind` (a directory), GDB runs under callgrind and the result is
        {STATE:THREAD: instructions of its `bt`} (one round)."""
        env = dict(os.environ, BT_DEPTH=str(depth), BT_REPS=str(reps), BT_CASES=cases,
                   BT_READERS=" ".join(f"{k}={v}" for k, v in readers.items()),
                   BT_LOADED="with" if loaded else "without")
        cmd = ["gdb", "-batch", "-nx"] + (["-ex", f"jit-reader-load {READER}"] if loaded else [])
        cmd += ["-x", os.environ["BT_SCRIPT"], "--args", os.environ["DEEP_HOST"], fmt,
                str(depth), os.environ["DEEP_NATIVE"]]
        if callgrind:
            os.makedirs(callgrind, exist_ok=True)
            env["BT_CALLGRIND"] = os.environ["CG_MARK"]
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
                   f"--callgrind-out-file={callgrind}/bt.out"] + cmd
        p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                           timeout=1800 if callgrind else 300)
        text = p.stdout + p.stderr
        got = {}
        for m in re.finditer(r"^BT (\d+) (\S+) wall (\S+) cpu (\S+) frames (\d+)", text, re.M):
            got.setdefault(m.group(2), {})[int(m.group(1))] = (
                float(m.group(3)), float(m.group(4)), int(m.group(5)))
        want = {c for g in cases.split("|") for c in g.split()}
        if "BT-FAIL" in text or set(got) != want or any(len(v) != reps for v in got.values()):
            raise SystemExit(f"backtrace benchmark failed: {' '.join(cmd)}\n{text[-3000:]}")
        if not callgrind:
            return got
        ir = {}
        for name in os.listdir(callgrind):
            dump = open(os.path.join(callgrind, name)).read()
            label = re.search(r"^desc: Trigger: Client Request: (\d+) (\S+)$", dump, re.M)
            if label:
                ir.setdefault(label.group(2), {})[int(label.group(1))] = int(
                    re.search(r"^totals: (\d+)$", dump, re.M).group(1))
        if set(ir) != want or any(len(v) != reps for v in ir.values()):
            raise SystemExit(f"callgrind dumps missing: {sorted(ir)} for {sorted(want)}")
        return ir
    # Each native case right after its reader state was set up (the state changes between
    # cases; `with` first, before its JIT backtrace has churned GDB's heap): what one
    # backtrace leaves in GDB's heap moves the next one's time by several percent.
    compact = session("compact", "with:native with:jit without:native null:native pc:native", True)
    elf = session("elf", "without:jit without:native | with:jit with:native", False)
    # The same cases once more, counted in instructions, where valgrind is installed.
    # GDB's heap differs from round to round (what was allocated and freed before), which
    # moves a backtrace's count by up to ~0.5%: two rounds, their mean reported.
    cg, cg_spread = None, 0.0
    if os.environ.get("CG_MARK"):
        rounds = session("compact", "with:native with:jit without:native null:native pc:native",
                         True, reps=2, callgrind=os.path.join(os.environ["WORK"], "callgrind"))
        cg = {k: sum(v.values()) / len(v) for k, v in rounds.items()}
        cg_spread = max((max(v.values()) - min(v.values())) / min(v.values()) * 100
                        for v in rounds.values())
    bare = session("elf-no-call-sites", "without:jit without:native", False)
    w("## 4. Backtrace depth\n")
    w(f"`jit-interface/examples/deep_host.rs` stops with one thread {depth:,} JIT frames deep "
      "(real x86-64 code: four functions calling each other in frame-pointer frames, "
      "registered with names, line rows, frame descriptions and call sites) and another thread "
      f"{depth:,} native C frames deep (`deep_native.c`, `gcc -O2 -g`, same call cycle). "
      "`bt -frame-arguments none` of each thread is timed from GDB's Python, "
      f"alternately, after flushing GDB's frame cache, in {reps} rounds. Every timed "
      "backtrace is checked (all frames of the cycle present, in order, down to the "
      "outermost frame). Times: the best wall time of the `bt` alone and the best of GDB's "
      "CPU time for it (which other load on the machine disturbs less). Ratios: the median "
      "over rounds of the ratio of two timings taken back to back in the same round, from "
      "CPU time, from wall time in parentheses." + (
      " Instructions: the same compact cases once more with GDB under valgrind's callgrind, "
      "counting the instructions GDB executes during each `bt` alone (after the same "
      "untimed warm-up backtrace of each thread), the mean of 2 rounds (the rounds of a case "
      f"differ by up to {cg_spread:.1f}%: GDB's heap is not the same from one round to the "
      "next): they do not depend on the machine's load, so small differences between "
      "readers show there first." if cg else
      " (valgrind not installed: no instruction counts.)") + "\n")
    def best(r, key):
        """(best wall, best CPU, frames) of a case."""
        runs = r[key].values()
        return min(x[0] for x in runs), min(x[1] for x in runs), next(iter(runs))[2]
    def ratio(r, a, b, i):
        """Median over rounds of a / b (i = 0 wall, 1 CPU): a round's two timings ran back to
        back, under the same load."""
        return median([r[a][k][i] / r[b][k][i] for k in r[a]])
    def mir(key):
        """Instructions of a case in millions, or '-' without valgrind."""
        return f"{cg[key] / 1e6:.1f} M" if cg else "-"
    w("| payload | GDB | frames (JIT / native thread) | JIT bt s (wall / CPU) | native bt s (wall / CPU) | JIT / native | JIT / native, instructions | goal |")
    w("|---|---|---|---|---|---|---|---|")
    def row(name, gdb_desc, r, jit_key, nat_key, counted=False):
        (jw, jc, jf), (nw, nc, nf) = best(r, jit_key), best(r, nat_key)
        by_ir = (f"{cg[jit_key] / cg[nat_key]:.2f}x ({mir(jit_key)} / {mir(nat_key)})"
                 if cg and counted else "-")
        w(f"| {name} | {gdb_desc} | {jf} / {nf} | {jw:.3f} / {jc:.3f} | {nw:.3f} / {nc:.3f} | "
          f"{ratio(r, jit_key, nat_key, 1):.2f}x ({ratio(r, jit_key, nat_key, 0):.2f}x) | {by_ir} | <= 1.0 |")
    row("compact", "our reader loaded", compact, "with:jit", "with:native", counted=True)
    row("ELF", "no reader", elf, "without:jit", "without:native")
    row("ELF", "our reader loaded", elf, "with:jit", "with:native")
    row("ELF without call sites", "no reader", bare, "without:jit", "without:native")
    w("")
    w("ELF frames are unwound by GDB's own DWARF unwinder, which looks for tail-call frames "
      "on every frame: it looks up the call site the frame returned to in its caller. The "
      "deep host declares its calls (`JitObject::add_call_site`), so the ELF payload has a "
      "`DW_TAG_GNU_call_site` for each, naming the callee, and GDB finds it at once, as for "
      "the native C code (gcc -O2 emits call sites). Without them (last row, same code "
      "registered without call sites) GDB raises and catches an internal error per frame "
      "(`set debug entry-values 1` shows \"cannot find DW_TAG_call_site\" for each JIT "
      "frame). Compact frames are unwound by the reader, which GDB tries first, so they "
      "skip that search and need no call sites.\n")
    w("Reader overhead on the native thread's backtrace (compact functions registered, so "
      "the reader's index is not empty), against the same backtrace with no reader loaded, "
      "next to two trivial readers: one that declines every frame at once (GDB's own cost "
      "of having any reader: it is tried on every frame) and one that reads the PC first "
      "(the least a reader that unwinds anything must do).\n")
    w("| reader | native bt s with (wall / CPU) | without (wall / CPU) | overhead, CPU (wall) | instructions with / without | overhead, instructions | goal |")
    w("|---|---|---|---|---|---|---|")
    nw, nc, _ = best(compact, "without:native")
    for key, desc in (("with", "ours (`libjitreader.so`)"), ("null", "declines at once"),
                      ("pc", "reads the PC, declines")):
        rw, rc, _ = best(compact, f"{key}:native")
        goal = "<= 5%" if key == "with" else ""
        over = [(ratio(compact, f"{key}:native", "without:native", i) - 1) * 100 for i in (1, 0)]
        by_ir = (f"{(cg[f'{key}:native'] / cg['without:native'] - 1) * 100:+.1f}%" if cg else "-")
        w(f"| {desc} | {rw:.3f} / {rc:.3f} | {nw:.3f} / {nc:.3f} | "
          f"{over[0]:+.1f}% ({over[1]:+.1f}%) | {mir(f'{key}:native')} / {mir('without:native')} | "
          f"{by_ir} | {goal} |")
    w("")
    w("GDB calls the loaded reader's unwinder for every frame, after allocating a register "
      "snapshot for it, and the reader must read the PC (through GDB's frame machinery) to "
      "know whether the frame is in JIT code: the two trivial readers measure those costs, "
      "which no reader can avoid. Ours then declines a PC outside the span of all registered "
      "code with two loads (no lock, no index search, no target read, no allocation); with "
      "the reader loaded GDB also holds the JIT functions' symbols. On a loaded machine "
      "time differences of a few percent are within the noise; instruction counts are not.\n")

if os.environ.get("BENCH_ONLY") == "bt":
    start = len(lines)
    bt_section()
    print("\n".join(lines[start:]))
    raise SystemExit(0)

# (1) in-process, no debugger
start1 = len(lines)
N1 = 20000 if QUICK else 100000
REPS1 = 11
# The cost of a page fault (memory written for the first time) on this machine, in this
# run: best of REPS1 runs of 20,000 fresh pages.
TOUCH_NS = min(
    float(re.search(r"\(([\d.]+) ns/page", run([HOST, "touch", "20000"])[2]).group(1))
    for _ in range(REPS1))
# The same pages faulted in by one call before they are written, as the registry does for
# large payloads (`MADV_POPULATE_WRITE`); 0 where the kernel lacks it.
POPULATED_NS = min(
    float((re.search(r"TOTAL touch populated .*?\(([\d.]+) ns/page", t) or [0, 0])[1])
    for t in (run([HOST, "touch", "20000"])[2] for _ in range(REPS1)))
w("## 1. Registration without a debugger\n")
w(f"{N1} functions, K functions per registered object. Ours: build model + encode + register, "
  "per function. Floor: `jb build` (payload) + `jb reg` (list insert + hook) per function. "
  f"Each figure is the best of {REPS1} runs (ours and the floor's in turn: runs of a few "
  "milliseconds, which other load on the machine only ever slows down).\n")
w("Ours split: building the model and encoding it into memory that is kept (`scale_host "
  "encode`: compact records copied into one pool, ELF objects encoded alone, each kept "
  "until 32 more were, as `jb build` writes its payloads into a pool); merges (the registry "
  "re-encoding small entries into batch entries, `merge_stats()`: none for these objects "
  "now); and the rest (registration proper: the live slot and bookkeeping, copying the "
  "record into its batch entry, the list; for small ELF objects, the registry appends them "
  "to a growing payload instead of the encoding measured (keeping 20 bytes per object to "
  "read it back, or the compact record of objects that cannot be), so their rest is that "
  "difference: it can be negative; so can the rest of large objects, whose payload pages "
  "the registry faults in by one call, unlike the encoding measured alone). "
  "Floor split: building the payload, registering it. "
  "Both hosts allocate and touch their handle / entry arrays before timing. Memory written "
  f"for the first time costs a page fault per 4 KiB ({TOUCH_NS / 1000:.2f} us each on this "
  "machine in this run: `scale_host touch 20000`, best of "
  f"{REPS1}), so every byte kept per function shows in the time. The registry asks the "
  "kernel for the pages of a large payload (32 KiB or more: objects of many functions, the "
  "64 KiB batches compact records are appended to) in one call before writing it "
  f"(`MADV_POPULATE_WRITE`): {POPULATED_NS / 1000:.2f} us per page in this run, the same "
  "zeroing without a trap per page.\n")
w("The rest's page faults: those of the registration less those of the encoding measured "
  "alone (memory the registry keeps per function beyond the encoded object: its slot, "
  "bookkeeping, for small ELF objects the difference between the growing payload and the "
  "objects encoded alone), times the cost measured above.\n")
w("| payload | K | ours ns/fn | floor ns/fn | ratio | ours: build+encode / merges / rest | rest: page faults, ns/fn | floor: build / register | ours bytes/fn | floor bytes/fn |")
w("|---|---|---|---|---|---|---|---|---|---|")
for f in ("compact", "elf"):
    for k in (1, 10, 1000):
        # Runs of a few milliseconds: each figure is the best of REPS1 runs, ours and the
        # floor's alike, taken in turn.
        got = {"ns": [], "ens": [], "mns": [], "bns": [], "rns": []}
        for _ in range(REPS1):
            _, _, t = run([HOST, "reg", str(N1), str(k), f])
            got["ns"].append(ours_ns(t)); by = ours_bytes(t)
            got["mns"].append(ours_merge_ns(t))
            _, _, te = run([HOST, "encode", str(N1), str(k), f])
            got["ens"].append(ours_ns(te, "encode"))
            rest_faults = faults(t) - faults(te, "encode")
            _, _, tb = run([JB, "build", str(N1), str(k), str(fmt_name[f])])
            m = re.search(r"([\d.]+) ns/fn, [\d.]+ bytes/entry, ([\d.]+) bytes/fn", tb)
            got["bns"].append(float(m.group(1))); bby = float(m.group(2))
            _, _, tr = run([JB, "reg", str(N1), str(k), str(fmt_name[f])])
            got["rns"].append(floor_reg_s(tr) * 1e9 / N1)
        ns, ens, mns, bns, rns = (min(got[x]) for x in ("ns", "ens", "mns", "bns", "rns"))
        fns = bns + rns
        w(f"| {f} | {k} | {ns:.0f} | {fns:.0f} | {ns/fns:.1f}x | {ens:.0f} / {mns:.0f} / {round(ns - ens - mns)} | {rest_faults * TOUCH_NS / 1000:.0f} | {bns:.0f} / {rns:.1f} | {by:.1f} | {bby:.1f} |")
w("")
# The same with every function at its own lines: above, all functions have lines 10-17,
# which makes line deltas as small as they get.
w("The rows above give every function the same lines (10-17). Real functions sit at their "
  "own places in the source: with each function's lines at a pseudo-random place below "
  "line 5,000 (`SCALE_HOST_LINES=spread`), line deltas take their real size:\n")
w("| payload | K | ours ns/fn | ours: build+encode / merges / rest | ours bytes/fn |")
w("|---|---|---|---|---|")
for f in ("compact", "elf"):
    for k in (1, 1000):
        got = {"ns": [], "ens": [], "mns": []}
        for _ in range(REPS1):
            _, _, t = run(["env", "SCALE_HOST_LINES=spread", HOST, "reg", str(N1), str(k), f])
            got["ns"].append(ours_ns(t)); by = ours_bytes(t)
            got["mns"].append(ours_merge_ns(t))
            _, _, te = run(["env", "SCALE_HOST_LINES=spread", HOST, "encode", str(N1), str(k), f])
            got["ens"].append(ours_ns(te, "encode"))
        ns, ens, mns = (min(got[x]) for x in ("ns", "ens", "mns"))
        w(f"| {f} | {k} | {ns:.0f} | {ens:.0f} / {mns:.0f} / {round(ns - ens - mns)} | {by:.1f} |")
w("")
# Page faults are a large part of the figures above on this kind of VM: the same registrations
# on memory the process used before (a first round registered and dropped).
w(f"Fresh memory costs a page fault per 4 KiB touched, {TOUCH_NS / 1000:.2f} us each in this "
  "run (last column: page faults times that, per function; an upper bound where pages are "
  "faulted in by one call, see above). The same registrations "
  "(lines 10-17) in a process that registered and dropped the same number of functions "
  "first (`SCALE_HOST_WARM=1`; the allocator hands the memory out again, as in a runtime "
  "that replaces code):\n")
w("| payload | K | ours ns/fn, fresh memory | page faults / 1000 fn | ours ns/fn, memory reused | page faults / 1000 fn | page faults on fresh memory, ns/fn |")
w("|---|---|---|---|---|---|---|")
for f in ("compact", "elf"):
    for k in (1, 1000):
        cold, warm = [], []
        for _ in range(REPS1):
            _, _, t = run([HOST, "reg", str(N1), str(k), f])
            cold.append((ours_ns(t), faults(t)))
            _, _, t = run(["env", "SCALE_HOST_WARM=1", HOST, "reg", str(N1), str(k), f])
            # The timed (second) round's line is the last TOTAL reg line.
            last = t[t.rindex("TOTAL reg"):]
            warm.append((ours_ns(last), faults(last)))
        c, h = min(cold), min(warm)
        w(f"| {f} | {k} | {c[0]:.0f} | {c[1]:.1f} | {h[0]:.0f} | {h[1]:.1f} | {c[1] * TOUCH_NS / 1000:.0f} |")
w("")
if os.environ.get("BENCH_ONLY") == "reg":
    print("\n".join(lines[start1:]))
    raise SystemExit(0)

# (2) GDB attached
w("## 2. GDB attached from the start (`gdb -batch -nx -ex run`)\n")
w("Wall time of the whole GDB run and GDB's max RSS. One-by-one: every function registered "
  "by its own call (our registry consolidates them into batch entries). Batched: 1,000 "
  "functions per object. Compact runs load our reader, the floor's compact runs its own.\n")
w("| case | functions | wall s | floor wall s | ratio | GDB MB | floor GDB MB | stops |")
w("|---|---|---|---|---|---|---|---|")
floor_batched = {}
NB = 20000 if QUICK else 100000
for f in ("compact", "elf"):
    fr = FR if f == "compact" else None
    fw, frss, _ = run(gdb([JB, "reg", str(NB), "1000", str(fmt_name[f])], fr))
    floor_batched[f] = (fw, frss)
    ow, orss, _t = run(gdb([HOST, "reg", str(NB), "1000", f], READER if f == "compact" else None))
    w(f"| {f}, batched (K=1000) | {NB} | {ow:.2f} | {fw:.2f} | {ow/fw:.2f}x | {orss:.0f} | {frss:.0f} | {stops(_t)} |")
# the floor one ELF per function, up to where it stays under a minute
floor_single = {}
floor_stop_ms = None
for n in ((1000, 2000) if QUICK else (1000, 4000)):
    fw, frss, ft = run(gdb([JB, "reg", str(n), "1", "0"]))
    floor_single[n] = (fw, frss)
    if floor_stop_ms is None:
        # The floor's cost per stop on this machine before its entries pile up: its second
        # tenth of registrations (the first includes warming up).
        m = re.search(r"entries \d+\.\.\d+: [\d.]+ us/entry\s+entries \d+\.\.\d+: ([\d.]+) us/entry", ft)
        floor_stop_ms = float(m.group(1)) / 1000 if m else None
per_reg = {}
sizes = (1000, 3000) if QUICK else (1000, 10000, 30000, 100000)
for f in ("compact", "elf"):
    for n in sizes:
        ow, orss, t = run(gdb([HOST, "reg", str(n), "1", f], READER if f == "compact" else None))
        per_reg[(f, n)] = ours_ns(t) / 1e6
        base = floor_single.get(n)
        fl = f"{base[0]:.2f} (one ELF/fn)" if base else "-"
        ratio = f"{ow/base[0]:.2f}x" if base else "-"
        w(f"| {f}, one-by-one | {n} | {ow:.2f} | {fl} | {ratio} | {orss:.0f} | {f'{base[1]:.0f}' if base else '-'} | {stops(t)} |")
# deferred mode: one-by-one registrations announced every 1,024, against the floor's batched run
ND = NB
ow, orss, t = run(["env", "SCALE_HOST_DEFERRED=1024"] + gdb([HOST, "reg", str(ND), "1", "compact"], READER))
fw, frss = floor_batched["compact"]
w(f"| compact, one-by-one, deferred (every 1,024) | {ND} | {ow:.2f} | {fw:.2f} (floor batched) | {ow/fw:.2f}x | {orss:.0f} | {frss:.0f} | {stops(t)} |")
for n, (fw, frss) in floor_single.items():
    w(f"| floor, one ELF per function | {n} | {fw:.2f} | | | | {frss:.0f} | {n} |")
w("")
w("Per registration under GDB (ms, from inside the host: total registration time / functions):\n")
# Growth: total registration time of one size over the size before it (the goal is stated
# for 30,000 over 10,000 functions: <= 3.6), for every pair of consecutive sizes.
pairs = list(zip(sizes, sizes[1:]))
w("| payload | " + " | ".join(f"{n} fns" for n in sizes) + " | "
  + " | ".join(f"growth {b}/{a} total time" for a, b in pairs) + " | "
  + " | ".join(f"registrations {a + 1}-{b}" for a, b in pairs) + " |")
w("|---|" + "---|" * (len(sizes) + 2 * len(pairs)))
for f in ("compact", "elf"):
    got = [per_reg.get((f, n)) for n in sizes]
    cells = " | ".join(f"{g:.3f}" if g else "-" for g in got)
    growth = " | ".join(
        f"{(per_reg[(f, b)] * b) / (per_reg[(f, a)] * a):.2f} for {b / a:.1f}x"
        if (f, a) in per_reg and (f, b) in per_reg else "-"
        for a, b in pairs)
    # What the registrations beyond the smaller run cost each: the growth without the start.
    marginal = " | ".join(
        f"{(per_reg[(f, b)] * b - per_reg[(f, a)] * a) / (b - a):.3f}"
        if (f, a) in per_reg and (f, b) in per_reg else "-"
        for a, b in pairs)
    w(f"| {f} | {cells} | {growth} | {marginal} |")
w("")
w("The last columns are ms per registration for the registrations a larger run adds to a "
  "smaller one. Compact registrations are read through our reader for the first 30,000 "
  "functions, then announced as ELF (`READER_BUDGET`: GDB keeps memory for good for every "
  "function it reads through a reader): compact's 100,000 run makes seven tenths ELF stops, "
  "so its last growth ratio holds that switch as well as GDB's growth.\n")
if floor_stop_ms:
    w(f"For scale, the same machine's stop in this run: the floor's one-ELF-per-function "
      f"registrations cost {floor_stop_ms:.3f} ms each while few entries are loaded (its "
      f"registrations 101 to 200 of 1,000). A one-by-one registration of ours makes about two "
      f"stops (its own entry, and its share of the merges). At 30,000 functions ours cost "
      + ", ".join(f"{per_reg[(f, 30000)] / floor_stop_ms:.2f}x ({f})" for f in ("compact", "elf")
                  if (f, 30000) in per_reg)
      + " that.\n")
# unregistration under GDB: every unregistration rewrites the batch holding the object (GDB
# drops it and reads the rest again), so its cost is bounded by the batch size, not by N
NU, MU = (3000, 150) if QUICK else (10000, 500)
w(f"Unregistering under GDB: {NU} functions registered one by one, then {MU} of them "
  "unregistered, spread over all batches (`scale_host unreg`). Each unregistration rewrites "
  "the batch entry holding the object (up to 1,024 objects; GDB drops the old entry and reads "
  "the new one: two stops), so its cost depends on the batch size, not on how many functions "
  "are live. Baseline: a registration in the same run.\n")
w("| payload | ms per unregistration | ms per registration (same run) | ratio | stops per unregistration |")
w("|---|---|---|---|---|")
for f in ("compact", "elf"):
    _w, _r, t = run(gdb([HOST, "unreg", str(NU), str(MU), f], READER if f == "compact" else None))
    reg_ms = ours_ns(t) / 1e6
    m = re.search(r"TOTAL unreg [\d.]+ s \(([\d.]+) ns/unregistration, (\d+) of \d+, hooks (\d+) calls", t)
    un_ms, k, hooks = float(m.group(1)) / 1e6, int(m.group(2)), int(m.group(3))
    w(f"| {f} | {un_ms:.2f} | {reg_ms:.3f} | {un_ms/reg_ms:.1f}x | {hooks/k:.1f} |")
w("")
# Draining under GDB: all of them, oldest first one by one (each drop from a batch's end
# splits that end off, so the next drops make GDB re-read a small entry), or in one call.
w(f"Draining under GDB: {NU} functions registered one by one, then all unregistered, oldest "
  f"first one by one (`scale_host drain {NU} F one`: the first drop from a batch splits its "
  "oldest 64 objects off into an entry of their own, so the next drops make GDB re-read "
  f"that small entry), or in one `unregister_many` call (`drain {NU} F many`: each entry "
  "rewritten or unlinked once).\n")
w("| payload | one by one: ms per unregistration | stops per unregistration | one call: ms in all | stops in all | ms per registration (same run) |")
w("|---|---|---|---|---|---|")
for f in ("compact", "elf"):
    got = {}
    for how in ("one", "many"):
        _w, _r, t = run(gdb([HOST, "drain", str(NU), f, how], READER if f == "compact" else None))
        m = re.search(r"TOTAL drain ([\d.]+) s \(([\d.]+) ns/unregistration, \w+, hooks (\d+) calls", t)
        got[how] = (float(m.group(1)), float(m.group(2)), int(m.group(3)), ours_ns(t) / 1e6)
    one, many = got["one"], got["many"]
    w(f"| {f} | {one[1] / 1e6:.2f} | {one[2] / NU:.1f} | {many[0] * 1e3:.1f} | {many[2]} | {min(one[3], many[3]):.3f} |")
w("")
# ... and without a debugger: a compact object leaves a tombstone (its live slot cleared),
# an ELF one makes its batch be re-encoded without it (an ELF payload has no live check).
NUQ, MUQ = (20000, 200) if QUICK else (100000, 1000)
w(f"Unregistering without a debugger: {NUQ} functions registered one by one, then {MUQ} of "
  "them unregistered, spread over all batches (best of 3). A compact object's record stays "
  "in place with its live slot cleared (readers skip it) until its batch is mostly dead; an "
  "ELF payload has no such check, so an ELF object's batch (up to about 1,000 objects) is "
  "rebuilt without it at once: a payload that grew and filled up by copying the bytes of "
  "the objects left into a new growing payload (where the general encoder, from models "
  "read back and then kept, took 107 us per unregistration here and 51 MB for the "
  "process). The process's memory is measured against the same registrations without "
  "unregistrations.\n")
w("| payload | us per unregistration | ns per registration (same run) | process MB | process MB, registrations only |")
w("|---|---|---|---|---|")
for f in ("compact", "elf"):
    best = None
    for _ in range(3):
        _w, rss, t = run([HOST, "unreg", str(NUQ), str(MUQ), f])
        m = re.search(r"TOTAL unreg [\d.]+ s \(([\d.]+) ns/unregistration", t)
        got = (float(m.group(1)) / 1e3, ours_ns(t), rss)
        best = got if best is None or got[0] < best[0] else best
    only = run([HOST, "reg", str(NUQ), "1", f])[1]
    w(f"| {f} | {best[0]:.1f} | {best[1]:.0f} | {best[2]:.0f} | {only:.0f} |")
w("")
# Unregistrations from the growing ELF payload: recent objects (a tiering runtime replacing
# baseline code) cost appending the few after them again; objects at random in a small live
# set (churn) cost more, within a budget (then the batch is rewritten as a full one is).
NT = 20000 if QUICK else 100000
w(f"Registering and unregistering without a debugger: `scale_host tier {NT} E` registers "
  f"{NT} functions one by one and after every E-th unregisters the one registered E/2 "
  "before (tiering); `scale_host churn 8 10000` has 8 threads each register or unregister "
  "one of 64 slots at random 10,000 times (best of 3, ns per registration or operation).\n")
w("| payload | tier E=10 | tier E=100 | churn 8 x 10,000 (ns/op) |")
w("|---|---|---|---|")
for f in ("compact", "elf"):
    row = []
    for e in (10, 100):
        best = None
        for _ in range(3):
            _w, _r, t = run([HOST, "tier", str(NT), str(e), f])
            m = re.search(r"TOTAL tier [\d.]+ s \(([\d.]+) ns/registration", t)
            v = float(m.group(1))
            best = v if best is None or v < best else best
        row.append(best)
    best = None
    for _ in range(3):
        _w, _r, t = run([HOST, "churn", "8", "10000", f])
        m = re.search(r"TOTAL churn ([\d.]+) s", t)
        v = float(m.group(1)) * 1e9 / 80000
        best = v if best is None or v < best else best
    row.append(best)
    w(f"| {f} | {row[0]:.0f} | {row[1]:.0f} | {row[2]:.0f} |")
w("")
# Source files in turns: one-function ELF objects whose lines are in F files, registered in
# turns (a runtime compiling the functions of several scripts as they are called). Each file
# has an open compile unit in the growing payload (up to 16 at once); with more files in
# turns, 16 keep theirs and the others' functions get units of one function.
w(f"One-function ELF objects of F source files registered in turns without a debugger "
  f"(`SCALE_HOST_FILES=F scale_host reg {NT} 1 elf`: function j's lines in file j % F; "
  "best of 3): each file has a compile unit open in the growing payload that its functions "
  "join (up to 16 files at once; with more in turns, 16 keep theirs and the others' "
  "functions get units of one function). Before (one open unit, closed at each change of "
  "file), two files or more made about 2,900 entries for 100,000 functions, at about "
  "2,200 ns each; with 8 open units, taking the one joined least recently, 16 files made "
  "119 entries at 580 ns, 32 files 120 at 595 ns.\n")
w("| files in turns | ns/fn | entries | payload bytes/fn |")
w("|---|---|---|---|")
for nf in (1, 2, 8, 16, 32):
    os.environ["SCALE_HOST_FILES"] = str(nf)
    best = None
    for _ in range(3):
        _w, _r, t = run([HOST, "reg", str(NT), "1", "elf"])
        got = (ours_ns(t), int(re.search(r"TOTAL hooks \d+ calls, \d+ bytes announced, (\d+) entries", t).group(1)),
               float(re.search(r"([\d.]+) payload bytes/function", t).group(1)))
        best = got if best is None or got[0] < best[0] else best
    del os.environ["SCALE_HOST_FILES"]
    w(f"| {nf} | {best[0]:.0f} | {best[1]} | {best[2]:.1f} |")
w("")
# Draining: every object leaves, oldest first. One by one, each ELF drop re-encodes the
# entry holding the dropped object without it (ELF has no live check): the 64 objects at the
# batch's old end, split off by the first drop (`State::peel`), or the rest of the batch once
# every 64 drops; `unregister_many` rewrites or unlinks each entry once.
w(f"Unregistering everything without a debugger (`scale_host drain {NT} F "
  "one|newest|many`: a code cache flushed, or shutdown): one by one, oldest or newest "
  "first, or in one `unregister_many` call; ns per unregistration, best of 3, next to a "
  "registration of the same run. One by "
  "one, an ELF drop re-encodes the entry that held the object, without it: the first drop "
  "from a batch splits its oldest (newest) 64 objects off into an entry of their own, so "
  "the next drops rewrite that small entry, and the rest of the batch is re-encoded once "
  "per 64 drops (before, every drop re-encoded its batch: 29 us each); newest first, the "
  "growing payload is rolled back first. In one call, each entry "
  "is rewritten once or unlinked.\n")
w("| payload | one by one, oldest first | one by one, newest first | one call | registration (same run) | oldest first / registration | newest first / registration | one call / registration |")
w("|---|---|---|---|---|---|---|---|")
for f in ("compact", "elf"):
    got = {}
    for how in ("one", "newest", "many"):
        best = None
        for _ in range(3):
            _w, _r, t = run([HOST, "drain", str(NT), f, how])
            m = re.search(r"TOTAL drain [\d.]+ s \(([\d.]+) ns/unregistration", t)
            v = (float(m.group(1)), ours_ns(t))
            best = v if best is None or v[0] < best[0] else best
        got[how] = best
    one, newest, many = got["one"][0], got["newest"][0], got["many"][0]
    reg = min(v[1] for v in got.values())
    w(f"| {f} | {one:.0f} | {newest:.0f} | {many:.0f} | {reg:.0f} | {one / reg:.1f}x | {newest / reg:.1f}x | {many / reg:.2f}x |")
w("")

# (3) attach
w("## 3. Attaching to a process that holds the functions\n")
w("`gdb -batch -nx -p PID [-ex jit-reader-load] -ex detach`, wall time.\n")
w("| case | functions | wall s | floor wall s | ratio |")
w("|---|---|---|---|---|")
def attach(cmd, reader):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        pid = re.search(r"(\d+)", line).group(1)
        g = ["gdb", "-batch", "-nx", "-p", pid]
        if reader:
            g += ["-ex", f"jit-reader-load {reader}"]
        wall, _, _ = run(g + ["-ex", "detach"])
        return wall
    finally:
        p.kill(); p.wait()
NA = 20000 if QUICK else 100000
for f in ("compact", "elf"):
    for k in (1000, 1):
        ow = attach([HOST, "attach", str(NA), str(k), f], READER if f == "compact" else None)
        fw = attach([JB, "attach", str(NA), "1000", str(fmt_name[f])], FR if f == "compact" else None)
        w(f"| {f}, K={k} (ours) vs floor K=1000 | {NA} | {ow:.2f} | {fw:.2f} | {ow/fw:.2f}x |")
w("")
bt_section()

# (5) concurrency under GDB at the issue's full size (the test suite runs 600 operations
# per thread); a correctness check, timed, not a timing assertion
NC = 1000 if QUICK else 10000
w("## 5. Concurrency under GDB\n")
w(f"8 threads each registering and unregistering single functions {NC:,} times at random "
  "among 64 code slots of their own, GDB attached from the start (`scale_host churn`), then "
  "every one of the 512 slots looked up in GDB (`info line *ADDR`): a live slot must name "
  "the function registered there now, a free one nothing. This is the test suite's "
  f"`tests/scale_churn.rs` with {NC:,} operations per thread (`JIT_GDB_CHURN_OPS={NC} cargo "
  "test --release --test scale_churn`; the issue asks for 10,000, the suite itself runs "
  "600 to stay quick). Both formats run "
  "side by side; compact crosses the reader budget halfway (small compact registrations "
  "are announced as ELF after it).\n")
cenv = dict(os.environ, JIT_GDB_CHURN_OPS=str(NC))
subprocess.run(["cargo", "test", "--release", "--test", "scale_churn", "--no-run"],
               cwd=ROOT, env=cenv, capture_output=True, check=True)
t0 = time.monotonic()
p = subprocess.run(["cargo", "test", "--release", "--test", "scale_churn"], cwd=ROOT, env=cenv,
                   capture_output=True, text=True, timeout=1800)
dt = time.monotonic() - t0
out = p.stdout + p.stderr
w("| test | operations | result |")
w("|---|---|---|")
for f in ("elf", "compact"):
    m = re.search(rf"test scale_churn_8_threads_{f}_gdb_knows_exactly_the_live_set \.\.\. (\w+)", out)
    verdict = {"ok": "passed: GDB knows exactly the live set", "FAILED": "FAILED"}
    w(f"| {f} | 8 x {NC:,} | {verdict.get(m.group(1), m.group(1)) if m else 'did not run'} |")
w("")
w(f"Both took {dt:.0f} s of wall time together (GDB's stops included).\n")
if p.returncode != 0:
    w("```\n" + out[-3000:] + "\n```\n")
# Sections measured by hand (their heading says so) are kept from the file being replaced:
# this script does not produce them, and a run must not drop them.
try:
    previous = open(OUT).read()
except FileNotFoundError:
    previous = ""
for section in re.split(r"(?m)^(?=## )", previous):
    if section.startswith("## ") and "measured by hand" in section.splitlines()[0]:
        w(section.rstrip("\n") + "\n")
# (9) real sessions: gaps, user breakpoints, the launcher, MI (issue 25), by its own script;
# after the sections measured by hand (6, 7 and 8), which keep their numbers.
w(subprocess.run(["python3", os.path.join(ROOT, "scripts", "bench-sessions.py")],
                 stdout=subprocess.PIPE, text=True, check=True, timeout=3600).stdout)
open(OUT, "w").write("\n".join(lines) + "\n")
print(f"wrote {OUT}")
PY
