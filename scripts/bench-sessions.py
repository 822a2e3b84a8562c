#!/usr/bin/env python3
"""Section 9 of docs/PERFORMANCE.md: scale under real sessions (issue 25).

Run by scripts/bench.sh (which builds the programs and passes their paths), or alone with
`BENCH_ONLY=sessions scripts/bench.sh`. Prints the section's markdown on stdout, progress
on stderr. BENCH_QUICK=1: smaller sizes.

Every GDB-attached run of `scale_host` is made in three sessions:
- `gdb`: GDB alone (`gdb -batch -nx -ex run`, our reader loaded for compact payloads);
- `bp`: the same with three user breakpoints: one on a native function
  (`scale_host_code_ready`, hit once before anything is registered), one pending on a JIT
  name through the GDB scripts' `jit break` (the last function's name: pending, so decoding
  every registered entry, until the last registration resolves it), one on a JIT address
  (`break *ADDR`, ADDR inside the middle function, set at the stop in
  `scale_host_code_ready`, which publishes it in `SCALE_HOST_PROBE`);
- `launcher`: through `jit-gdb -batch -nx -ex run -- PROGRAM ARGS` (reader, GDB scripts and a
  source session directory loaded; for ELF payloads too).
and in three layouts of the 64-byte functions: contiguous, a 64-byte gap after each
(`SCALE_HOST_GAP=64`), a pseudo-random gap of 0-256 bytes (`SCALE_HOST_GAP=random`).
The runs the goals are computed from are repeated (medians), one-by-one growth is also read
within one run (`SCALE_HOST_MARK`), and deferred mode (`SCALE_HOST_DEFERRED`) has its own
rows.
"""
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HOST = os.environ["SESSIONS_HOST"]
READER = os.environ["SESSIONS_READER"]
LAUNCHER = os.environ["SESSIONS_LAUNCHER"]
SCRIPTS = os.environ["SESSIONS_SCRIPTS"]
QUICK = os.environ.get("BENCH_QUICK") == "1"

NB = 20000 if QUICK else 100000  # batched runs, K = 1,000
SIZES = (1000, 3000) if QUICK else (10000, 30000)  # one-by-one runs (3x apart: growth)
NBIG = 10000 if QUICK else 100000  # one-by-one, for GDB's memory (gaps and breakpoints)
NMI = 2000 if QUICK else 10000  # the MI session
# Sessions are slow on code where GDB's cost per registration grows with what is loaded: a
# run is stopped after RUN_BUDGET_S (reported as such), and skipped when the run of the size
# before it (same payload, layout and session), grown as the runs before it grew (else as
# the square of the size), predicts more. The runs the goals are computed from (gaps 0-256 with breakpoints) get GOAL_BUDGET_S.
# The section stays bounded, and fills in as sessions get faster.
RUN_BUDGET_S = 60 if QUICK else 90
GOAL_BUDGET_S = 180 if QUICK else 420
# The whole section's budget: the goals' runs go first, then batched, then the other
# one-by-one runs, each stopped when the section's budget (less what the MI sessions are
# given) is spent; runs left are reported as not run.
SECTION_BUDGET_S = 600 if QUICK else 2100
MI_RESERVE_S = 60 if QUICK else 150
# GDB sessions on this kind of machine (a shared 2-CPU VM) vary by 20-40% from run to run
# in wall and CPU time alike, while a CPU-bound loop varies by 4%: the runs the goals are
# computed from are repeated and their median taken. Batched runs take about a second.
REPEAT_BATCHED = 3 if QUICK else 7
REPEAT_GOAL = 2 if QUICK else 3
# Deferred mode's sessions announce every DEFER registrations (`SCALE_HOST_DEFERRED`).
DEFER = 1024

LAYOUTS = (("contiguous", None), ("gap 64", "64"), ("gap 0-256", "random"))
MODES = ("gdb", "bp", "launcher")
DEFERRED_MODES = ("gdb", "bp2", "bp")
FORMATS = ("compact", "elf")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# At a stop in scale_host_code_ready (Rust, or no debug info: C's cast syntax needs C): the
# probe address inside the middle function, given to `break` as a number, as a user copies
# it from a backtrace. Given as the expression itself, GDB would evaluate it again at every
# new objfile, looking the symbol up in all of them (the breakdown table measures both).
PROBE = "*(unsigned long *) &SCALE_HOST_PROBE"
BREAK_AT_PROBE = ["-ex", "set language c",
                  "-ex", f"python gdb.execute('break *0x%x' % int(gdb.parse_and_eval('{PROBE}')))",
                  "-ex", "set language auto"]


def last_name(n):
    return f"jit_fn_{n - 1:013}"


def session(mode, fmt, args, n):
    """The command line of one GDB session running `HOST ARGS` (n functions)."""
    bp_before, bp_after = [], []
    if mode.endswith("bp"):
        if not mode.startswith("launcher"):
            bp_before += ["-ex", f"source {SCRIPTS}"]
        bp_before += ["-ex", "break scale_host_code_ready", "-ex", f"jit break {last_name(n)}"]
        # On an address inside the middle function, before it is registered.
        bp_after = BREAK_AT_PROBE + ["-ex", "continue"]
    elif mode == "bp2":
        # The two GDB breakpoints alone (no pending `jit break`, which suspends deferral).
        bp_before = ["-ex", "break scale_host_code_ready"]
        bp_after = BREAK_AT_PROBE + ["-ex", "continue"]
    if mode.startswith("launcher"):
        return [LAUNCHER, "-batch", "-nx"] + bp_before + ["-ex", "run"] + bp_after + ["--", HOST] + args
    cmd = ["gdb", "-batch", "-nx"]
    if fmt == "compact":
        cmd += ["-ex", f"jit-reader-load {READER}"]
    return cmd + bp_before + ["-ex", "run"] + bp_after + ["--args", HOST] + args


def measure(cmd, gap, timeout=1800, stdin=None, deferred=False):
    """Runs cmd under /usr/bin/time -v: (wall s, max RSS in MB of its biggest process, GDB
    here, output), or None if it ran longer than `timeout` s (its whole process group, GDB
    and the program, is killed). Fails loudly on a non-zero exit."""
    env = dict(os.environ, JIT_GDB_READER=READER, JIT_GDB_SCRIPTS=SCRIPTS)
    env.pop("SCALE_HOST_GAP", None)
    env.pop("SCALE_HOST_DEFERRED", None)
    if gap:
        env["SCALE_HOST_GAP"] = gap
    if deferred:
        env["SCALE_HOST_DEFERRED"] = str(DEFER)
    # Elapsed time at every multiple of the smaller one-by-one size: the growth between the
    # two sizes within one run too (`MARK reg I T s`).
    env["SCALE_HOST_MARK"] = str(SIZES[0])
    t0 = time.monotonic()
    p = subprocess.Popen(["/usr/bin/time", "-v"] + cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env, stdin=stdin,
                         start_new_session=True)
    try:
        text, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return None
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{text[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
    return wall, rss, text


def check_breakpoints(text, n, cmd):
    """The three user breakpoints were really set, and the pending one resolved at the last
    registration: a session that silently lost one would measure nothing."""
    set_at = re.findall(r"(?m)^Breakpoint \d+ at (0x[0-9a-f]+)", text)
    if len(set_at) < 2:
        raise SystemExit(f"the native breakpoint or the one on a JIT address is missing "
                         f"(set: {set_at}): {' '.join(cmd)}\n{text[-3000:]}")
    for rx, what in (
        (r"breakpoint pending until one is registered", "the pending jit break"),
        (rf"jit: breakpoint \d+ on {last_name(n)} at 0x[0-9a-f]+ \(pending",
         "the pending jit break resolved at the last registration"),
    ):
        if not re.search(rx, text):
            raise SystemExit(f"{what} is missing from the session: {' '.join(cmd)}\n{text[-3000:]}")


def reg_stats(text):
    """(registration s inside the host, GDB stops) from scale_host's TOTAL lines; in
    deferred mode the final flush of what is still pending counts as registration."""
    s = float(re.search(r"TOTAL reg ([\d.]+) s", text).group(1))
    flush = re.search(r"TOTAL flush ([\d.]+) s", text)
    if flush:
        s += float(flush.group(1))
    m = re.search(r"TOTAL hooks (\d+) calls", text)
    return s, int(m.group(1)) if m else 0


def mark_at(text, n):
    """Seconds the host took to register its first n functions (`MARK reg n T s`)."""
    m = re.search(rf"(?m)^MARK reg {n} ([\d.]+) s", text)
    return float(m.group(1)) if m else None


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


T0 = time.monotonic()
results = {}  # (kind, fmt, layout, mode, n) -> (wall s, GDB MB, registration s, stops),
# the run of median registration time when the case was repeated
samples = {}  # the same keys -> every run's (wall s, GDB MB, registration s, stops, marks)


skipped = {}  # (kind, fmt, layout, mode, n) -> why, for the tables


def run_case(kind, fmt, layout, gap, mode, n, k, smaller=None, repeat=1, again=False):
    """One session (`repeat` of them, the median reported; `again`: added to the runs made
    before, interleaved with other cases), stopped after its budget; with
    `smaller` (a size run before in the same setup), skipped if that run's wall time (or
    budget, if it was stopped), grown with the size as the runs before it grew (else as its
    square), exceeds the budget. `kind` "deferred": one by one in deferred mode."""
    key = (kind, fmt, layout, mode, n)
    if key in skipped or (key in results and not again):
        return
    budget = GOAL_BUDGET_S if (layout, mode) == ("gap 0-256", "bp") else RUN_BUDGET_S
    left = SECTION_BUDGET_S - MI_RESERVE_S - (time.monotonic() - T0)
    if left < 5:
        skipped[key] = ("not run: the section's time budget was spent", budget)
        log(f"  {kind} {fmt} {layout} {mode} {n}: not run, the section's budget is spent")
        return
    budget = min(budget, int(left))
    if smaller is not None and key not in results:
        prev = results.get((kind, fmt, layout, mode, smaller))
        prev_wall = prev[0] if prev else skipped[(kind, fmt, layout, mode, smaller)][1]
        # Grown as the runs before grew (the exponent of the two sizes before, between 1
        # and 2), else as the square.
        power = 2.0
        sizes = [x for x in SIZES if x < smaller]
        first = results.get((kind, fmt, layout, mode, sizes[-1])) if sizes else None
        if prev and first:
            power = min(2.0, max(1.0, math.log(prev[0] / first[0]) / math.log(smaller / sizes[-1])))
        predicted = prev_wall * (n / smaller) ** power
        if predicted > budget:
            skipped[key] = (f"skipped: predicted {predicted:.0f} s", predicted)
            log(f"  {kind} {fmt} {layout} {mode} {n}: skipped, predicted {predicted:.0f} s")
            return
    cmd = session(mode, fmt, ["reg", str(n), str(k), fmt], n)
    runs = list(samples.get(key, [])) if again else []
    for _ in range(repeat):
        if runs and time.monotonic() - T0 > SECTION_BUDGET_S - MI_RESERVE_S - budget:
            break  # one run is enough to report; the repeats wait for none
        got = measure(cmd, gap, timeout=budget, deferred=kind == "deferred")
        if got is None:
            if not runs:
                skipped[key] = (f"stopped after {budget} s", budget)
                log(f"  {kind} {fmt} {layout} {mode} {n}: stopped after {budget} s")
                return
            break
        wall, rss, text = got
        if mode.endswith("bp"):
            check_breakpoints(text, n, cmd)
        elif mode == "bp2" and len(re.findall(r"(?m)^Breakpoint \d+ at 0x", text)) < 2:
            raise SystemExit(f"a breakpoint is missing: {' '.join(cmd)}\n{text[-3000:]}")
        reg_s, stops = reg_stats(text)
        runs.append((wall, rss, reg_s, stops, {x: mark_at(text, x) for x in SIZES}))
        log(f"  {kind} {fmt} {layout} {mode} {n}: {wall:.2f} s wall, {reg_s:.2f} s "
            f"registering, {rss:.0f} MB, {stops} stops")
    samples[key] = runs
    mid = sorted(runs, key=lambda r: r[2])[(len(runs) - 1) // 2]
    results[key] = mid[:4]


LOAD = os.getloadavg()[0]
log(f"sessions: batched {NB}, one by one {SIZES}, {NBIG}, MI {NMI} (load {LOAD:.1f})")
# First the runs the goals are computed from: gaps 0-256 with breakpoints, one by one (and
# GDB's memory at NBIG of them), and the gdb sessions at the larger size, gapped and not.
for fmt in FORMATS:
    for i, n in enumerate(SIZES):
        run_case("one", fmt, "gap 0-256", "random", "bp", n, 1, SIZES[i - 1] if i else None,
                 repeat=REPEAT_GOAL)
    run_case("one", fmt, "gap 0-256", "random", "bp", NBIG, 1, SIZES[-1])
# The layouts a gap goal compares take turns, so that the machine's drift over minutes (this
# kind of machine has slower and faster phases) weighs on all of them alike.
for _ in range(REPEAT_BATCHED):
    for fmt in FORMATS:
        for layout, gap in LAYOUTS:
            run_case("batched", fmt, layout, gap, "gdb", NB, 1000, again=True)
for fmt in FORMATS:
    for layout, gap in LAYOUTS:
        run_case("one", fmt, layout, gap, "gdb", SIZES[0], 1)
    for _ in range(REPEAT_GOAL):
        for layout, gap in LAYOUTS:
            run_case("one", fmt, layout, gap, "gdb", SIZES[1], 1, SIZES[0], again=True)
# Deferred mode (announced every DEFER registrations), the goals' layout and sessions.
for fmt in FORMATS:
    for mode in DEFERRED_MODES:
        run_case("deferred", fmt, "gap 0-256", "random", mode, SIZES[1], 1, repeat=REPEAT_GOAL)
for fmt in FORMATS:
    for layout, gap in LAYOUTS:
        for mode in MODES:
            run_case("batched", fmt, layout, gap, mode, NB, 1000)
for fmt in FORMATS:
    for layout, gap in LAYOUTS:
        for mode in MODES:
            for i, n in enumerate(SIZES):
                run_case("one", fmt, layout, gap, mode, n, 1, SIZES[i - 1] if i else None)


def mi_session(fmt, launcher):
    """An MI front end's session: `gdb -i=mi` (or the launcher) running `scale_host run NMI 1
    FMT` (real code, random gaps) with a breakpoint on the native function that the JIT
    functions call once all are registered, then `-stack-list-frames`."""
    with tempfile.NamedTemporaryFile("w", suffix=".mi", delete=False) as f:
        lines = ["-gdb-set confirm off"]
        if fmt == "compact" and not launcher:
            lines.append(f"-interpreter-exec console \"jit-reader-load {READER}\"")
        lines += [f"-file-exec-and-symbols {HOST}", f"-exec-arguments run {NMI} 1 {fmt}",
                  "-break-insert scale_host_jit_stop", "-exec-run", "-stack-list-frames",
                  "-gdb-exit"]
        f.write("\n".join(lines) + "\n")
        path = f.name
    try:
        cmd = [LAUNCHER if launcher else "gdb", "-i=mi", "-nx", "-q"]
        with open(path) as stdin:
            got = measure(cmd, "random", stdin=stdin)
        if got is None:
            raise SystemExit(f"the MI session ran longer than 1800 s: {' '.join(cmd)}")
        wall, rss, text = got
    finally:
        os.unlink(path)
    stack = next((l for l in text.splitlines() if l.startswith("^done,stack=")), "")
    # The three JIT functions called, innermost first, right above the native stop.
    names = re.findall(r'func="([^"]*)"', stack)
    want = ["scale_host_jit_stop", last_name(1), f"jit_fn_{NMI // 2:013}", last_name(NMI)]
    if names[:4] != want:
        raise SystemExit(f"MI frames {names[:6]} are not {want}: {' '.join(cmd)}\n{text[-3000:]}")
    reg_s, stops = reg_stats(text)
    log(f"  MI {fmt} launcher={launcher} {NMI}: {wall:.2f} s wall, {reg_s:.2f} s registering, "
        f"{rss:.0f} MB, {len(names)} frames")
    return wall, rss, reg_s, stops, len(names)


mi = {(fmt, launcher): mi_session(fmt, launcher) for fmt in FORMATS for launcher in (False, True)}


# What each kind of breakpoint costs an ELF registration: GDB sets every breakpoint again at
# each new objfile (a JIT reader's objfiles do not make it do so), so these sessions differ
# by one breakpoint each. `tbreak` stops once at scale_host_code_ready (before anything is
# registered) and goes; `break` stays.
NBD = 1500 if QUICK else 3000
STOP = ["-ex", "tbreak scale_host_code_ready"]
BREAKDOWN = (
    ("none", [], []),
    ("`break scale_host_code_ready` (a native function by name)",
     ["-ex", "break scale_host_code_ready"], ["-ex", "continue"]),
    ("`jit break` pending, no stop before the registrations (hook by name)",
     ["-ex", f"source {SCRIPTS}", "-ex", f"jit break {last_name(NBD)}"], []),
    ("`jit break` pending, one stop before them (hook by address from there)",
     ["-ex", f"source {SCRIPTS}", "-ex", f"jit break {last_name(NBD)}"] + STOP,
     ["-ex", "continue"]),
    ("`break *0x...` (a JIT address)", STOP,
     BREAK_AT_PROBE + ["-ex", "continue"]),
    ("`break *(*(unsigned long *) &SCALE_HOST_PROBE)` (an address given as an expression)",
     STOP, ["-ex", "set language c", "-ex", f"break *({PROBE})",
            "-ex", "set language auto", "-ex", "continue"]),
)
breakdown = []
for what, before, after in BREAKDOWN:
    cmd = (["gdb", "-batch", "-nx"] + before + ["-ex", "run"] + after
           + ["--args", HOST, "reg", str(NBD), "1", "elf"])
    got = measure(cmd, "random", timeout=RUN_BUDGET_S)
    if got is None:
        breakdown.append((what, None))
        log(f"  breakdown {what}: stopped after {RUN_BUDGET_S} s")
        continue
    wall, rss, text = got
    if "jit break" in what and not re.search(rf"on {last_name(NBD)} at 0x[0-9a-f]+ \(pending", text):
        raise SystemExit(f"the pending jit break did not resolve: {' '.join(cmd)}\n{text[-3000:]}")
    reg_s, _stops = reg_stats(text)
    breakdown.append((what, reg_s))
    log(f"  breakdown {what}: {reg_s:.2f} s registering")

# Instructions GDB executes in a batched gdb session, under valgrind's callgrind: a batched
# run registers for a third of a second, where the machine's load moves wall time by 30%,
# while an instruction count does not depend on it. NCG functions in objects of 1,000,
# less a session registering one object (GDB's start-up and the program's own symbols):
# what the registrations cost GDB, per layout. Two sessions at a time (one per CPU).
NCG = 10000 if QUICK else 20000
CG_CASES = [(fmt, layout, gap, n) for fmt in FORMATS
            for layout, gap, n in (("one object", None, 1000), ("contiguous", None, NCG),
                                   ("gap 0-256", "random", NCG))]
instructions = {}  # (fmt, layout) -> instructions GDB executed in the whole session


def counted(runs, into):
    """Runs each (key, GDB command line, gap) under callgrind, all at once; into[key]: the
    instructions GDB executed in the whole session."""
    procs = []
    for key, gdb_cmd, gap in runs:
        env = dict(os.environ)
        env.pop("SCALE_HOST_GAP", None)
        if gap:
            env["SCALE_HOST_GAP"] = gap
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + gdb_cmd
        procs.append((key, cmd, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)))
    for key, cmd, p in procs:
        text, _ = p.communicate(timeout=1800)
        m = re.search(r"^==\d+== Collected : (\d+)$", text, re.M)
        if p.returncode != 0 or m is None or "TOTAL reg" not in text:
            raise SystemExit(f"callgrind run failed: {' '.join(cmd)}\n{text[-3000:]}")
        if "jit break" in key[1] and not re.search(
                rf"on {last_name(key[2] if len(key) > 2 else NHOOK)} at 0x[0-9a-f]+ \(pending",
                text):
            raise SystemExit(f"the pending jit break did not resolve: {' '.join(cmd)}\n"
                             f"{text[-3000:]}")
        into[key] = int(m.group(1))
        log(f"  instructions {key}: {into[key] / 1e6:.1f} M")


def batched_run(fmt, n):
    return (["gdb", "-batch", "-nx"]
            + (["-ex", f"jit-reader-load {READER}"] if fmt == "compact" else [])
            + ["-ex", "run", "--args", HOST, "reg", str(n), "1000", fmt])


# What a pending `jit break` costs each registration on our side: while a request waits, the
# scripts' hook runs at every registration. NHOOK functions one by one, gaps of 0-256
# bytes, the hook by address (one stop before the registrations), in instructions GDB
# executes (a few tenths of a millisecond a registration is within this machine's wall-time
# noise): no request; the request, with the hook looking for the name in the entry's bytes
# first (what the scripts do); the same with that check off (`_NAME_CHECK_MAX = 0`: every
# entry decoded, as the scripts did before).
NHOOK = 1000
HOOK_SESSIONS = (
    ("no request", []),
    ("`jit break` pending, names looked for first", ["-ex", f"jit break {last_name(NHOOK)}"]),
    ("`jit break` pending, every entry decoded",
     ["-ex", "python _NAME_CHECK_MAX = 0", "-ex", f"jit break {last_name(NHOOK)}"]),
)


# The no-request and checked sessions again with NHOOK_SMALL functions: what the request
# costs once (the scripts look the runtime's exports up, the hook is placed) and what it
# costs per registration, apart.
NHOOK_SMALL = 200


def hook_run(fmt, request, n=NHOOK):
    request = [a.replace(last_name(NHOOK), last_name(n)) for a in request]
    return (["gdb", "-batch", "-nx"]
            + (["-ex", f"jit-reader-load {READER}"] if fmt == "compact" else [])
            + ["-ex", f"source {SCRIPTS}"] + request + STOP
            + ["-ex", "run", "-ex", "continue", "--args", HOST, "reg", str(n), "1", fmt])


hook_instructions = {}  # (fmt, session[, n]) -> instructions GDB executed
if shutil.which("valgrind"):
    for i in range(0, len(CG_CASES), 2):
        counted([((fmt, layout), batched_run(fmt, n), gap)
                 for fmt, layout, gap, n in CG_CASES[i:i + 2]], instructions)
    hook_cases = [((fmt, what), hook_run(fmt, request), "random")
                  for fmt in FORMATS for what, request in HOOK_SESSIONS]
    hook_cases += [((fmt, what, NHOOK_SMALL), hook_run(fmt, request, NHOOK_SMALL), "random")
                   for fmt in FORMATS for what, request in HOOK_SESSIONS[:2]]
    for i in range(0, len(hook_cases), 2):
        counted(hook_cases[i:i + 2], hook_instructions)
ELAPSED = time.monotonic() - T0

# ---- the report ----
out = []
w = out.append
w("## 9. Real sessions: gaps between functions, user breakpoints, the launcher, MI\n")
w(f"`scripts/bench-sessions.py` (`BENCH_ONLY=sessions scripts/bench.sh` prints this section "
  f"alone{', here with BENCH_QUICK=1: smaller sizes' if QUICK else ''}). Load average when it "
  f"started: {LOAD:.1f}; it took {ELAPSED / 60:.1f} minutes. The scale host's 64-byte functions "
  "in three layouts: contiguous, a 64-byte gap after each (`SCALE_HOST_GAP=64`), a "
  "pseudo-random gap of 0-256 bytes (`SCALE_HOST_GAP=random`), as real runtimes leave "
  "(alignment, stubs, constant pools). Each run in three sessions: **gdb**, GDB alone "
  "(`gdb -batch -nx -ex run`, our reader loaded for compact payloads); **bp**, the same with "
  "three user breakpoints: on a native function (`scale_host_code_ready`, hit once before "
  "anything is registered), pending on a JIT name through the GDB scripts' `jit break` (the "
  "last function's name: pending until the last registration, so the scripts decode every "
  "entry registered before it), and on a JIT address (`break *0x...` inside the middle "
  "function, set at the stop in `scale_host_code_ready`); **launcher**, `jit-gdb -batch -nx "
  "-ex run -- PROGRAM ARGS` (reader, GDB scripts and a source session directory loaded, for "
  "ELF payloads too). Every `bp` session is checked: all three breakpoints set, the pending "
  "one resolved at the last registration. Cells: registration time measured inside the host "
  "(s; for one-by-one runs, ms per registration in parentheses) / GDB's max RSS (MB); "
  "wall time of the whole GDB run in the last columns. GDB sessions on this machine vary by "
  "20-40% from run to run, so the runs the goals are computed from are repeated and the run "
  f"of median registration time is shown: the batched gdb sessions {REPEAT_BATCHED} times; the "
  f"one-by-one bp sessions with gaps of 0-256 bytes at {SIZES[0]:,} and {SIZES[1]:,} functions, "
  f"the one-by-one gdb sessions at {SIZES[1]:,} and the deferred-mode sessions "
  f"{REPEAT_GOAL} times (all runs are listed after the goals).\n")


def cell(key, per_reg=False):
    r = results.get(key)
    if r is None:
        if key in skipped:
            return skipped[key][0]
        return "-"
    wall, rss, reg_s, _stops = r
    n = key[4]
    per = f" ({reg_s * 1e3 / n:.3f})" if per_reg else ""
    return f"{reg_s:.2f}{per} / {rss:.0f}"


def wall_cells(key_of):
    return " / ".join(f"{results[key_of(m)][0]:.1f}" if key_of(m) in results else "-"
                      for m in MODES)


w(f"Batched: {NB:,} functions, 1,000 per object.\n")
w("| payload | layout | gdb | bp | launcher | stops | wall s (gdb / bp / launcher) |")
w("|---|---|---|---|---|---|---|")
for fmt in FORMATS:
    for layout, _ in LAYOUTS:
        keys = [("batched", fmt, layout, m, NB) for m in MODES]
        w(f"| {fmt} | {layout} | " + " | ".join(cell(k) for k in keys)
          + f" | {next((results[k][3] for k in keys if k in results), '-')} | "
          + f"{wall_cells(lambda m: ('batched', fmt, layout, m, NB))} |")
w("")
w("One by one: every function registered by its own call. A session is stopped after "
  f"{RUN_BUDGET_S} s ({GOAL_BUDGET_S} s for gaps 0-256 with breakpoints, the goals' runs), and "
  "skipped when the run of the size before it, grown with the size as the runs before it "
  f"grew (else as its square), predicts more; the section has {SECTION_BUDGET_S} s in all (the goals' runs go first).\n")
w("| payload | layout | functions | gdb | bp | launcher | stops | wall s (gdb / bp / launcher) |")
w("|---|---|---|---|---|---|---|---|")
for fmt in FORMATS:
    for layout, _ in LAYOUTS:
        for n in sorted(set(SIZES + (NBIG,))):
            keys = [("one", fmt, layout, m, n) for m in MODES]
            if not any(k in results or k in skipped for k in keys):
                continue
            stops = next((results[k][3] for k in keys if k in results), "-")
            w(f"| {fmt} | {layout} | {n:,} | " + " | ".join(cell(k, True) for k in keys)
              + f" | {stops} | {wall_cells(lambda m: ('one', fmt, layout, m, n))} |")
w("")
w(f"Deferred mode (`set_deferred`, announcing every {DEFER:,} registrations; the GDB scripts "
  "also announce what is pending at every stop the user sees): one by one, gaps of 0-256 "
  f"bytes, {SIZES[1]:,} functions, the final flush of what is still pending included. "
  "Sessions: gdb; **2 bp**, the native and the JIT-address breakpoints of the bp session; "
  "**bp**, all three, the pending `jit break` on the last function's name included. While "
  "that request waits, the scripts write its name into the runtime "
  "(`jit_gdb_wanted_names`): the registration defining it is announced at once, before its "
  "code can run, and the others stay deferred (`tests/reader_special.rs`, "
  "`pending_jit_break_stops_in_elf_code_registered_in_deferred_mode`; a request by regular "
  "expression suspends deferral instead).\n")
w("| payload | gdb | 2 bp | bp | stops (gdb / 2 bp / bp) | wall s (gdb / 2 bp / bp) |")
w("|---|---|---|---|---|---|")
for fmt in FORMATS:
    keys = [("deferred", fmt, "gap 0-256", m, SIZES[1]) for m in DEFERRED_MODES]
    w(f"| {fmt} | " + " | ".join(cell(k, True) for k in keys) + " | "
      + " / ".join(str(results[k][3]) if k in results else "-" for k in keys) + " | "
      + " / ".join(f"{results[k][0]:.1f}" if k in results else "-" for k in keys) + " |")
w("")
w(f"MI front end: `gdb -i=mi -nx -q` reading an IDE's commands (`-file-exec-and-symbols`, "
  f"`-break-insert scale_host_jit_stop`, `-exec-run`, `-stack-list-frames`), the host "
  f"(`scale_host run {NMI} 1 F`, gaps of 0-256 bytes) registering {NMI:,} functions of real "
  "code one by one with the breakpoint set, then calling three of them (the last, the "
  "middle, the first), the innermost calling the native function: `-stack-list-frames` is "
  "checked to show the native stop and the three JIT functions in order "
  "(`tests/mi_session.rs` checks their lines and files too, and that the stack reaches "
  "`main`). Launcher: `jit-gdb -i=mi -nx -q`.\n")
w("| payload | session | registration s (ms per registration) | GDB MB | wall s | stops | frames |")
w("|---|---|---|---|---|---|---|")
for (fmt, launcher), (wall, rss, reg_s, stops, frames) in mi.items():
    w(f"| {fmt} | {'launcher' if launcher else 'gdb'} | {reg_s:.2f} ({reg_s * 1e3 / NMI:.3f}) | "
      f"{rss:.0f} | {wall:.1f} | {stops} | {frames} |")
w("")

w(f"What each breakpoint costs an ELF registration: GDB sets every breakpoint again at each "
  f"new objfile, that is at every ELF registration (objfiles a JIT reader builds do not make "
  f"it do so). ELF, {NBD:,} functions one by one, gaps of 0-256 bytes, plain `gdb -batch -nx`, "
  "one breakpoint per session; `tbreak scale_host_code_ready` stops once before anything is "
  "registered where a session needs a stop. The cost of a breakpoint by name comes from "
  "looking it up in every objfile, the program's own symbols and debug info included (here "
  "the C library's separate debug info), so it grows with the program, not with the JIT "
  "code. A `jit break` "
  "request puts an internal breakpoint on `__jit_debug_register_code`: by name until the "
  "process stops once, by address from then on.\n")
w("| session | registration s | ms per registration | over none |")
w("|---|---|---|---|")
base = breakdown[0][1]
for what, reg_s in breakdown:
    if reg_s is None:
        w(f"| {what} | stopped after {RUN_BUDGET_S} s | - | - |")
        continue
    over = f"{(reg_s - base) * 1e3 / NBD:+.3f} ms" if base is not None and what != "none" else "-"
    w(f"| {what} | {reg_s:.2f} | {reg_s * 1e3 / NBD:.3f} | {over} |")
w("")

if hook_instructions:
    w(f"What a pending `jit break` costs a registration on the scripts' side: while a request "
      f"waits, the scripts' hook runs at every registration (at a stop GDB makes anyway for "
      f"its own JIT breakpoint). {NHOOK:,} functions one by one, gaps of 0-256 bytes, plain "
      f"`gdb -batch -nx` with the scripts sourced (and the reader, for compact payloads), one "
      f"stop before the registrations, the request naming the last function; instructions GDB "
      f"executes in the whole session, under callgrind (a tenth of a millisecond is within "
      f"this machine's wall-time noise). The hook first looks for the requested names in the "
      f"entry's bytes (both formats store names verbatim) and decodes only an entry where one "
      f"occurs; the last row turns that check off (`python _NAME_CHECK_MAX = 0`), so every "
      f"entry is decoded, as the scripts did before.\n")
    w("| payload | session | GDB instructions | over no request, per registration (the one-time part included) | "
      "saved by the check, per registration |")
    w("|---|---|---|---|---|")
    for fmt in FORMATS:
        base = hook_instructions.get((fmt, HOOK_SESSIONS[0][0]))
        checked = hook_instructions.get((fmt, HOOK_SESSIONS[1][0]))
        for what, _request in HOOK_SESSIONS:
            got = hook_instructions.get((fmt, what))
            if got is None:
                continue
            over = (f"{(got - base) / NHOOK / 1e3:+,.0f} k"
                    if base is not None and what != HOOK_SESSIONS[0][0] else "-")
            saved = (f"{(got - checked) / NHOOK / 1e3:,.0f} k"
                     if checked is not None and what == HOOK_SESSIONS[2][0] else "-")
            w(f"| {fmt} | {what} | {got / 1e6:,.1f} M | {over} | {saved} |")
    w("")
    parts = []
    for fmt in FORMATS:
        keys = [(fmt, HOOK_SESSIONS[0][0]), (fmt, HOOK_SESSIONS[1][0]),
                (fmt, HOOK_SESSIONS[0][0], NHOOK_SMALL), (fmt, HOOK_SESSIONS[1][0], NHOOK_SMALL)]
        if all(k in hook_instructions for k in keys):
            big, small = (hook_instructions[keys[1]] - hook_instructions[keys[0]],
                          hook_instructions[keys[3]] - hook_instructions[keys[2]])
            per = (big - small) / (NHOOK - NHOOK_SMALL)
            parts.append(f"{fmt}, {per / 1e3:,.0f} k instructions per registration and "
                         f"{(small - per * NHOOK_SMALL) / 1e6:,.0f} M once")
    if parts:
        w(f"With the check, a pending request costs, apart (the same sessions with "
          f"{NHOOK_SMALL:,} functions too): {'; '.join(parts)} (the scripts look the runtime's "
          f"exports up and place the hook).")
    w("")

# ---- goals (issue 25, item 4): benchmark targets, computed from the runs above ----
goals = []


def goal(what, value, shown, target, ok):
    status = "-" if value is None else "met" if ok else "not met"
    goals.append(f"| {what} | {shown} | {target} | {status} |")


def reg_s(key):
    return results[key][2] if key in results else None


def not_run(*keys):
    """Why a goal has no value: the first of its runs that did not finish."""
    why = next((skipped[k][0] for k in keys if k in skipped), "not measured")
    return f"not measured ({why})"



for kind, n in (("batched", NB), ("one", SIZES[-1])):
    for fmt in FORMATS:
        base = reg_s((kind, fmt, "contiguous", "gdb", n))
        for layout in ("gap 64", "gap 0-256"):
            what = (f"{layout} vs contiguous, {'batched' if kind == 'batched' else 'one by one'}, "
                    f"{fmt}, {n:,} functions (registration time, gdb)")
            got = reg_s((kind, fmt, layout, "gdb", n))
            if base and got:
                goal(what, got / base, f"{got / base:.2f}x", "<= 1.2x", got / base <= 1.2)
            else:
                goal(what, None, not_run((kind, fmt, "contiguous", "gdb", n),
                                         (kind, fmt, layout, "gdb", n)), "<= 1.2x", False)
for fmt in FORMATS:
    what = (f"gap 0-256 vs contiguous, batched, {fmt}, {NCG:,} functions (instructions GDB "
            "executes for the registrations, callgrind)")
    one = instructions.get((fmt, "one object"))
    if one is None:
        goal(what, None, "not measured (valgrind not installed)", "<= 1.2x", False)
        continue
    contiguous, gapped = (instructions[(fmt, x)] - one for x in ("contiguous", "gap 0-256"))
    r = gapped / contiguous
    goal(what, r, f"{r:.3f}x ({gapped / 1e6:.1f} M / {contiguous / 1e6:.1f} M)", "<= 1.2x",
         r <= 1.2)
a, b = SIZES


def within(key):
    """Median over the runs of `key` (size b) of (time at b) / (time at a) in the same run."""
    ratios = [r[4][b] / r[4][a] for r in samples.get(key, []) if r[4].get(a) and r[4].get(b)]
    return median(ratios) if ratios else None


for fmt in FORMATS:
    ra, rb = (reg_s(("one", fmt, "gap 0-256", "bp", x)) for x in (a, b))
    g = within(("one", fmt, "gap 0-256", "bp", b))
    what = (f"one-by-one growth {a:,} to {b:,} functions, gaps 0-256 and breakpoints, {fmt} "
            "(registration time; median of the runs' own growth)")
    if g and ra and rb:
        goal(what, g, f"{g:.2f} (medians of separate runs: {rb / ra:.2f})", "<= 3.3", g <= 3.3)
    else:
        goal(what, None, not_run(*(("one", fmt, "gap 0-256", "bp", x) for x in (a, b))),
             "<= 3.3", False)
for fmt in FORMATS:
    key = ("deferred", fmt, "gap 0-256", "bp", b)
    g = within(key)
    what = (f"one-by-one growth {a:,} to {b:,} functions, gaps 0-256 and breakpoints, deferred "
            f"mode (every {DEFER:,}), {fmt} (median of the runs' own growth)")
    if g:
        goal(what, g, f"{g:.2f}", "<= 3.3", g <= 3.3)
    else:
        goal(what, None, not_run(key), "<= 3.3", False)
for kind, mode, how in (("one", "bp", "breakpoints"),
                        ("deferred", "bp2", f"the 2 GDB breakpoints, deferred mode (every {DEFER:,})"),
                        ("deferred", "bp", f"breakpoints, deferred mode (every {DEFER:,})")):
    for fmt in FORMATS:
        rb = reg_s((kind, fmt, "gap 0-256", mode, b))
        what = f"time per registration at {b:,}, gaps 0-256 and {how}, {fmt}"
        if rb:
            goal(what, rb * 1e3 / b, f"{rb * 1e3 / b:.3f} ms", "<= 0.6 ms", rb * 1e3 / b <= 0.6)
        else:
            goal(what, None, not_run((kind, fmt, "gap 0-256", mode, b)), "<= 0.6 ms", False)
for fmt in FORMATS:
    key = ("one", fmt, "gap 0-256", "bp", NBIG)
    what = f"GDB RSS at {NBIG:,} one-by-one registrations, gaps 0-256 and breakpoints, {fmt}"
    if key in results:
        mb = results[key][1]
        goal(what, mb, f"{mb:.0f} MB", "<= 150 MB", mb <= 150)
    else:
        goal(what, None, not_run(key), "<= 150 MB", False)
w("Goals (issue 25): benchmark targets, not timed tests, computed from the runs above" + (
  f" (quick run: growth {a:,} to {b:,} instead of 10,000 to 30,000, per registration at "
  f"{b:,}, memory at {NBIG:,})" if QUICK else "") + ".\n")
w("| goal | value | target | |")
w("|---|---|---|---|")
out.extend(goals)
w("")
w("Every run of the repeated cases (registration s; for one-by-one runs also the seconds "
  f"at {a:,} functions within the same run):\n")
w("| case | runs |")
w("|---|---|")
for key, runs in samples.items():
    if len(runs) < 2:
        continue
    kind, fmt, layout, mode, n = key
    shown = ", ".join(f"{r[2]:.2f}" + (f" ({r[4][a]:.2f} at {a:,})"
                                       if kind != "batched" and r[4].get(a) and n > a else "")
                      for r in runs)
    w(f"| {kind}, {fmt}, {layout}, {mode}, {n:,} | {shown} |")
w("")
print("\n".join(out))
