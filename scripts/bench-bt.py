# GDB side of scripts/bench.sh section 4 (`gdb -batch -nx -x scripts/bench-bt.py --args
# deep_host FORMAT DEPTH NATIVE_SO`): stops in deep_host_stop, where one thread is DEPTH JIT
# frames deep and the other DEPTH native C frames deep, and times `bt` of each, alternately,
# in several reader states. Every timed backtrace is checked, so a broken one cannot look
# fast. Prints `BT REP STATE:THREAD wall S cpu S frames N` per timing (REP counts the rounds
# of a group: timings of one round ran back to back), or `BT-FAIL ...`.
#
# Environment:
#   BT_DEPTH    frames of each recursion
#   BT_REPS     timings per case (the best is kept)
#   BT_READERS  reader plugins by state name, e.g. `with=/path/libjitreader.so null=/path/x.so`
#   BT_LOADED   the state GDB starts in (`without`, or a name of BT_READERS loaded with -ex)
#   BT_CASES    STATE:THREAD cases (THREAD `jit` or `native`; STATE `without` = no reader),
#               in groups separated by `|`: a group's cases are timed alternately BT_REPS
#               times, groups one after the other. `jit-reader-unload` drops ELF objfiles
#               too (until the next registration), so ELF times all `without` cases first.
#   BT_CALLGRIND  (optional) a library with `cg_begin()` / `cg_end(label)` wrapping
#               callgrind's client requests, when GDB runs under `valgrind --tool=callgrind
#               --instr-atstart=no --collect-atstart=no`: instructions are then collected
#               during each timed `bt` only, and dumped after it with the label `REP
#               STATE:THREAD` (instruction counts do not depend on the machine's load).
import ctypes
import os
import re
import time

import gdb

DEPTH = int(os.environ["BT_DEPTH"])
REPS = int(os.environ["BT_REPS"])
READERS = dict(kv.split("=", 1) for kv in os.environ.get("BT_READERS", "").split())
GROUPS = [[c.split(":") for c in g.split()] for g in os.environ["BT_CASES"].split("|")]
# Argument values are not what is compared (JIT frames have none; printing optimised
# arguments can cost GDB seconds per backtrace through entry values).
BT = "bt -frame-arguments none"
state = os.environ.get("BT_LOADED", "without")
CALLGRIND = ctypes.CDLL(os.environ["BT_CALLGRIND"]) if os.environ.get("BT_CALLGRIND") else None


def set_state(want):
    global state
    if want == state:
        return
    if state != "without":
        gdb.execute("jit-reader-unload", to_string=True)
    if want != "without":
        gdb.execute(f"jit-reader-load {READERS[want]}", to_string=True)
    state = want


def check(out, prefix):
    """None if the backtrace is complete: DEPTH frames of the cycle, contiguous and in
    order, and it reaches the outermost frame; else what is wrong."""
    names = re.findall(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) ", out, re.M)
    deep = [i for i, n in enumerate(names) if n.startswith(prefix)]
    if len(deep) != DEPTH:
        return f"{len(deep)} {prefix}* frames, not {DEPTH}"
    if deep[-1] - deep[0] + 1 != DEPTH:
        return f"the {prefix}* frames are not contiguous"
    for k in range(DEPTH):
        want = f"{prefix}{k % 4}"
        if names[deep[-1] - k] != want:
            return f"frame #{deep[-1] - k} is {names[deep[-1] - k]}, not {want}"
    if "Backtrace stopped" in out:
        return out[out.index("Backtrace stopped") :][:200]
    if names[-1] not in ("_start", "clone3", "clone"):
        return f"the backtrace ends at {names[-1]}, not at the outermost frame"
    return None


def main():
    gdb.execute("break deep_host_stop", to_string=True)
    gdb.execute("run", to_string=True)
    threads = {}
    for t in gdb.selected_inferior().threads():
        threads["native" if t.name == "native-deep" else "jit"] = t
    if set(threads) != {"jit", "native"}:
        print(f"BT-FAIL threads {[t.name for t in gdb.selected_inferior().threads()]}")
        return
    # One full backtrace of each thread first, untimed: GDB reads symbols of the native
    # library on first use, a one-time cost no timed case should carry.
    for t in threads.values():
        t.switch()
        gdb.execute(BT, to_string=True)
    rounds = [(rep, c) for g in GROUPS for rep in range(REPS) for c in g]
    for rep, (st, which) in rounds:
        set_state(st)
        threads[which].switch()
        # The same lead-in for every timing: GDB redoes some work lazily after its objfiles
        # change (the reader's objfile comes and goes) and after a thread switch, and a
        # native backtrace straight after a JIT one measured slower than after this.
        gdb.execute("maintenance flush register-cache", to_string=True)
        gdb.execute("bt 3", to_string=True)
        # Drop the frame cache: every timing unwinds and symbolizes all frames again.
        gdb.execute("maintenance flush register-cache", to_string=True)
        key = f"{st}:{which}"
        if CALLGRIND:
            CALLGRIND.cg_begin()
        w0, c0 = time.perf_counter(), time.process_time()
        out = gdb.execute(BT, to_string=True)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if CALLGRIND:
            CALLGRIND.cg_end(f"{rep} {key}".encode())
        err = check(out, "jit_deep_" if which == "jit" else "native_deep_")
        if err:
            print(f"BT-FAIL {key}: {err}")
            return
        frames = len(re.findall(r"^#\d+ ", out, re.M))
        print(f"BT {rep} {key} wall {wall:.5f} cpu {cpu:.5f} frames {frames}")


try:
    main()
finally:
    try:
        gdb.execute("kill", to_string=True)
    except gdb.error:
        pass
