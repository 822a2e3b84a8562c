# jit-gdb GDB extension: commands for code registered through GDB's JIT interface.
#
# Load with `source /path/to/gdb-scripts/jit.py` (the `jit-gdb` launcher does this), or
# install for auto-load (see gdb-scripts/README.md). Commands: `jit list`, `jit break`,
# `jit symbolize`, `jit export-perf-map`; `help jit` explains each.
#
# Why it exists: GDB 13 keeps functions created by a JIT reader out of its name lookups
# (`break jit_fn` says "Function not defined", `info functions` lists nothing) and has no
# command that shows what a JIT registered. This extension reads the JIT descriptor
# (`__jit_debug_descriptor`) straight from target memory, so it works on live processes
# and on core files alike. The project's own library in libjitreader.so does the work,
# called through ctypes with a callback that reads the inferior's memory through GDB:
# `jitgdb_walk_list_json` walks the entry list (bounded, cycle-safe), decodes every payload,
# drops unregistered objects, and resolves overlapping functions with the project's one
# rule (the newest registration owns shared addresses); `jitgdb_entry_json` reads one
# entry. There is no second list walker, liveness check or decoder in Python.
#
# SPDX-License-Identifier: GPL-3.0-or-later

import bisect
import ctypes
import json
import os
import re
import struct
import sys

import gdb

# GDB's `source` runs this file without setting __file__; the code object knows its path.
_SCRIPT = os.path.realpath(sys._getframe().f_code.co_filename)

# GDB's JIT descriptor (gdb/jit.h; version 1, 64-bit targets), read here only by the
# registration hook, for the entry being registered:
#   struct jit_descriptor { uint32_t version; uint32_t action_flag;
#                           jit_code_entry *relevant_entry; jit_code_entry *first_entry; };
_DESCRIPTOR = struct.Struct("<IIQQ")
_JIT_REGISTER = 1
#   struct jit_code_entry { jit_code_entry *next_entry, *prev_entry;
#                           const char *symfile_addr; uint64_t symfile_size; };
_ENTRY = struct.Struct("<QQQQ")

# int read(void *ctx, uint64_t addr, void *buf, size_t len): 0 when buf holds the bytes.
_READ_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t
)

_READER_FILE = "libjitreader.so"
_ENV_READER = "JIT_GDB_READER"

# A list longer than this is treated as damage (a core file may hold garbage): the walk
# stops with an error instead of running for ever. (The library bounds payload sizes.)
_DEFAULT_MAX_ENTRIES = 1000000


class JitError(gdb.GdbError):
    """An error shown to the user as `jit: MESSAGE` (no Python traceback)."""

    def __init__(self, msg):
        super().__init__("jit: " + msg)


# ---------------------------------------------------------------------------------------
# Parameters: `set jit reader-path`, `set jit max-entries`


class _SetJit(gdb.Command):
    """Settings of the jit-gdb extension."""

    def __init__(self):
        super().__init__("set jit", gdb.COMMAND_DATA, prefix=True)


class _ShowJit(gdb.Command):
    """Settings of the jit-gdb extension."""

    def __init__(self):
        super().__init__("show jit", gdb.COMMAND_DATA, prefix=True)


class _ReaderPath(gdb.Parameter):
    """Absolute path of libjitreader.so, whose decoder the jit commands call.

    Empty (the default): the JIT_GDB_READER environment variable, else the copy GDB loaded
    with `jit-reader-load` (found in GDB's own memory map), else the build directories of
    the source tree this script lives in."""

    set_doc = "Set the path of libjitreader.so used by the jit commands."
    show_doc = "Show the path of libjitreader.so used by the jit commands."

    def __init__(self):
        super().__init__("jit reader-path", gdb.COMMAND_DATA, gdb.PARAM_OPTIONAL_FILENAME)
        self.value = ""

    def get_set_string(self):
        _Decoder.forget()
        return ""

    def get_show_string(self, svalue):
        if svalue:
            return "libjitreader.so for the jit commands: " + svalue
        return "libjitreader.so for the jit commands: automatic (now: %s)" % (
            _Decoder.describe_choice()
        )


class _MaxEntries(gdb.Parameter):
    """Longest JIT entry list the jit commands walk; a longer one is reported as damaged."""

    set_doc = "Set the maximum number of JIT entries the jit commands read."
    show_doc = "Show the maximum number of JIT entries the jit commands read."

    def __init__(self):
        super().__init__("jit max-entries", gdb.COMMAND_DATA, gdb.PARAM_ZUINTEGER)
        self.value = _DEFAULT_MAX_ENTRIES

    def get_set_string(self):
        return ""

    def get_show_string(self, svalue):
        return "Maximum number of JIT entries read: " + svalue


_SetJit()
_ShowJit()
_READER_PARAM = _ReaderPath()
_MAX_ENTRIES_PARAM = _MaxEntries()


# ---------------------------------------------------------------------------------------
# The decoder: libjitreader.so through ctypes


class _Decoder:
    _lib = None
    _path = None

    @classmethod
    def forget(cls):
        cls._lib = None
        cls._path = None

    @classmethod
    def _candidates(cls):
        """(path, how it was chosen), most explicit first."""
        out = []
        if _READER_PARAM.value:
            out.append((_READER_PARAM.value, "set jit reader-path"))
            return out
        env = os.environ.get(_ENV_READER)
        if env:
            out.append((env, "environment variable " + _ENV_READER))
            return out
        # GDB dlopen()s the plugin on `jit-reader-load`: it is in GDB's own memory map.
        try:
            with open("/proc/self/maps") as maps:
                for line in maps:
                    path = line.split(None, 5)[-1].strip() if line.count(" ") >= 5 else ""
                    if os.path.basename(path) == _READER_FILE:
                        out.append((path, "loaded by jit-reader-load"))
                        break
        except OSError:
            pass
        here = os.path.dirname(_SCRIPT)
        for profile in ("debug", "release"):
            out.append(
                (
                    os.path.join(os.path.dirname(here), "target", profile, _READER_FILE),
                    "source tree build",
                )
            )
        return out

    @classmethod
    def describe_choice(cls):
        for path, how in cls._candidates():
            if os.path.isfile(path):
                return "%s (%s)" % (path, how)
        return "none found"

    @classmethod
    def lib(cls):
        if cls._lib is not None:
            return cls._lib
        tried = []
        for path, how in cls._candidates():
            if not os.path.isabs(path):
                raise JitError(
                    "%s names %r, which is not an absolute path: give the absolute path of %s"
                    % (how, path, _READER_FILE)
                )
            if not os.path.isfile(path):
                tried.append("%s (%s): no such file" % (path, how))
                continue
            try:
                lib = ctypes.CDLL(path)
                walk = lib.jitgdb_walk_list_json
                entry = lib.jitgdb_entry_json
            except (OSError, AttributeError) as e:
                # AttributeError: a reader built before the list walker was exported.
                tried.append("%s (%s): %s" % (path, how, e))
                continue
            walk.argtypes = [_READ_FN, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
            walk.restype = ctypes.c_void_p
            entry.argtypes = [_READ_FN, ctypes.c_void_p, ctypes.c_uint64]
            entry.restype = ctypes.c_void_p
            lib.jitgdb_free_string.argtypes = [ctypes.c_void_p]
            lib.jitgdb_free_string.restype = None
            cls._lib, cls._path = lib, path
            return lib
        raise JitError(
            "cannot load the payload decoder %s (%s). Build it with `cargo build -p jit-reader`, "
            "then `set jit reader-path /abs/path/%s` or set %s."
            % (_READER_FILE, "; ".join(tried) or "no candidate", _READER_FILE, _ENV_READER)
        )

    @classmethod
    def _call(cls, fn, *args):
        """Calls one of the reader's JSON exports with a reader of the inferior's memory;
        returns (the parsed JSON object, the GDB read errors by (address, size))."""
        errors = {}
        inf = gdb.selected_inferior()

        def read(_ctx, addr, buf, n):
            # Never raise into ctypes (it would print a traceback and report success).
            try:
                data = bytes(inf.read_memory(addr, n))
            except gdb.MemoryError as e:
                errors[(addr, n)] = " (%d bytes): %s" % (n, e)
                return -1
            except gdb.error as e:
                errors[(addr, n)] = ": %s" % e
                return -1
            except Exception as e:
                errors[(addr, n)] = " (%d bytes): %s" % (n, e)
                return -1
            ctypes.memmove(buf, data, n)
            return 0

        callback = _READ_FN(read)
        ptr = fn(callback, None, *args)
        if not ptr:
            raise JitError("the reader library refused its arguments")
        try:
            text = ctypes.string_at(ptr).decode("utf-8", "replace")
        finally:
            cls.lib().jitgdb_free_string(ptr)
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise JitError("the reader library returned malformed JSON (%s)" % e)
        if not isinstance(doc, dict):
            raise JitError("the reader library returned JSON that is not an object")
        return doc, errors

    @classmethod
    def walk(cls, descriptor, max_entries):
        """The walk of the entry list (jit_interface::inspect::list_json), and read errors."""
        return cls._call(cls.lib().jitgdb_walk_list_json, descriptor, max_entries)

    @classmethod
    def entry(cls, address):
        """One entry ({"entry": ...} or {"error": ...}), and read errors."""
        return cls._call(cls.lib().jitgdb_entry_json, address)


# ---------------------------------------------------------------------------------------
# The model: what the process registered


class JitFunction:
    __slots__ = ("name", "start", "size", "file", "lines", "kind", "entry")

    def __init__(self, name, start, size, file, lines, kind, entry):
        self.name = name
        self.start = start
        self.size = size
        self.file = file
        # The decoder's rows as they came, [[ADDR, LINE], ...]: only `jit symbolize` needs
        # them, so they are checked there (a list of 100,000 functions stays cheap).
        self.lines = lines
        self.kind = kind
        self.entry = entry

    @property
    def end(self):
        return self.start + self.size

    def line_at(self, addr):
        """Line of the last row at or before addr (rows in any order); None before the
        first row and in a gap (a row of line 0: code without a source line)."""
        best = None
        for row in self.lines:
            try:
                a, line = int(row[0]), int(row[1])
            except (TypeError, ValueError, IndexError):
                raise JitError("the decoder returned a malformed line row %r for %s"
                               % (row, self.name))
            if a <= addr and (best is None or a >= best[0]):
                best = (a, line)
        return None if best is None or best[1] == 0 else best[1]


class JitEntry:
    __slots__ = ("address", "payload_addr", "payload_size", "kind", "error", "problems")

    def __init__(self, address, payload_addr, payload_size):
        self.address = address
        self.payload_addr = payload_addr
        self.payload_size = payload_size
        self.kind = "?"
        self.error = None
        # What the decoder noticed but could still decode around (e.g. a DWARF oddity).
        self.problems = []


def _int(v, what):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError("%s is not a non-negative integer" % what)
    return v


def _functions_of(doc, entry):
    """JitFunctions from a decoded payload (unregistered objects already left out by the
    library). The JSON shape is the one of `jit_interface::inspect::payload_json`:
      {"kind": "compact"|"elf", "arch": ..., "objects": [{"live": ...}, ...],
       "functions": [{"name", "start", "size", "file", "lines": [[ADDR, LINE], ...],
                      "object"}, ...],
       "problems": [TEXT, ...]}"""
    out = []
    kind, address = entry.kind, entry.address
    for f in doc.get("functions") or []:
        name = f.get("name")
        if not isinstance(name, str):
            raise ValueError("a function without a name")
        start = _int(f.get("start"), "start of " + name)
        size = _int(f.get("size"), "size of " + name)
        lines = f.get("lines") or []
        if not isinstance(lines, list):
            raise ValueError("the line rows of %s are not a list" % name)
        file = f.get("file")
        out.append(JitFunction(name, start, size, file if isinstance(file, str) else None,
                               lines, kind, address))
    return out


def deferred_functions(entry, doc):
    """HOOK POINT for deferred functions.

    A later version of the runtime may register functions whose code is not generated yet
    (pending in the runtime). The payload format has no way to describe them today, so this
    returns nothing; when the format or the inspect JSON gains them, turn them into
    JitFunction objects here (with size 0 until compiled) and every command shows them."""
    return []


def _read_error(errors, what, addr, size):
    """`cannot read WHAT at ADDR ...` with GDB's own reason, as the read callback saw it."""
    return "cannot read %s at 0x%x%s" % (what, addr, errors.get((addr, size), " (%d bytes)" % size))


def _read(addr, size, what):
    try:
        return bytes(gdb.selected_inferior().read_memory(addr, size))
    except gdb.MemoryError as e:
        raise JitError("cannot read %s at 0x%x (%d bytes): %s" % (what, addr, size, e))
    except gdb.error as e:
        raise JitError("cannot read %s at 0x%x: %s" % (what, addr, e))


_NO_SYMBOL = re.compile(r"^No symbol [\"'](?P<name>[^\"']+)[\"'] in current context")


def _symbol_address(name):
    """Address of the (minimal or full) symbol `name`, None if GDB has none; raises
    gdb.error when GDB's lookup itself fails."""
    # An expression first, in C (where a symbol without debug info has an address; Rust's
    # expressions do not find it): a command that fails inside a new_objfile event while a
    # program starts (a runtime in a shared library not loaded yet) makes GDB 13 lose the
    # `run`, an expression does not.
    language = gdb.parameter("language")
    try:
        gdb.execute("set language c", to_string=True)
        return int(gdb.parse_and_eval("(unsigned long) &%s" % name)) & 0xFFFFFFFFFFFFFFFF
    except gdb.error as e:
        # Without any symbol table (no file with debug info loaded) `p &X` says so instead.
        if _NO_SYMBOL.match(str(e)) or str(e).startswith("No symbol table is loaded"):
            return None
        # Anything else (damaged debug info on the way): `info address` below says more.
    finally:
        gdb.execute("set language %s" % language, to_string=True)
    try:
        text = gdb.execute("info address %s" % name, to_string=True)
    except gdb.error as e:
        if _NO_SYMBOL.match(str(e)):
            return None
        raise
    m = re.search(r"\bis at (0x[0-9a-fA-F]+)", text)
    if m is None:
        m = re.search(r"\bat address (0x[0-9a-fA-F]+)", text)
    return int(m.group(1), 16) if m else None


def _outermost_frame():
    """The outermost frame GDB can reach (bounded), or None without frames."""
    try:
        f = gdb.newest_frame()
        for _ in range(100000):
            older = f.older()
            if older is None:
                break
            f = older
        return f
    except gdb.error:
        return None


# The descriptor's address per process: looked up once (a symbol lookup walks every
# objfile, and the register hook asks at every registration: with a thousand JIT entries
# loaded that took milliseconds per registration). Forgotten when a file that is not JIT
# code is loaded or the process goes.
_descriptor_cache = {}


def _is_jit_objfile(objfile):
    name = getattr(objfile, "filename", None) or ""
    return name.startswith("<in-memory@") or name.startswith("<< JIT compiled code")


def _forget_descriptor(event):
    objfile = getattr(event, "new_objfile", None)
    if objfile is not None and _is_jit_objfile(objfile):
        return
    _descriptor_cache.clear()


def descriptor_address():
    inf = gdb.selected_inferior()
    if inf is None or inf.pid == 0:
        raise JitError(
            "the program is not running: start it, attach to a process or load a core file first"
        )
    cached = _descriptor_cache.get(inf.pid)
    if cached is not None:
        return cached
    addr = _look_up_descriptor()
    _descriptor_cache[inf.pid] = addr
    return addr


gdb.events.new_objfile.connect(_forget_descriptor)
gdb.events.exited.connect(_forget_descriptor)
gdb.events.clear_objfiles.connect(_forget_descriptor)


def _look_up_descriptor():
    # GDB looks a name up from the selected frame's scope first: stopped in code whose
    # debug info is damaged (a JIT entry's DWARF), the lookup fails on that DWARF before it
    # reaches the descriptor. That says nothing about the descriptor: look again from the
    # outermost frame (native code), and pass GDB's message on if that fails too; only a
    # lookup that finds nothing means the program has no descriptor.
    failures = []
    try:
        addr = _symbol_address("__jit_debug_descriptor")
        if addr is not None:
            return addr
    except gdb.error as e:
        failures.append(str(e))
        try:
            selected = gdb.selected_frame()
        except gdb.error:
            selected = None
        outer = _outermost_frame()
        if outer is not None and outer != selected:
            try:
                outer.select()
                addr = _symbol_address("__jit_debug_descriptor")
                if addr is not None:
                    return addr
            except gdb.error as e2:
                failures.append(str(e2))
            finally:
                try:
                    selected.select()
                except (gdb.error, AttributeError):
                    pass
    if failures:
        raise JitError(
            "cannot look up __jit_debug_descriptor: GDB's symbol lookup failed (%s); the "
            "debug info of a loaded file, perhaps a JIT entry, is damaged"
            % "; ".join(dict.fromkeys(failures))
        )
    raise JitError(
        "no __jit_debug_descriptor in the program: it does not use GDB's JIT interface "
        "(jit-interface), or its symbols were stripped"
    )


def read_descriptor():
    addr = descriptor_address()
    version, action, relevant, first = _DESCRIPTOR.unpack(
        _read(addr, _DESCRIPTOR.size, "__jit_debug_descriptor")
    )
    return addr, version, action, relevant, first


def _entry_of(e, errors):
    """A JitEntry and its JitFunctions from one entry of the library's JSON (the shape of
    `jit_interface::inspect::entry_json`)."""
    entry = JitEntry(_int(e.get("address"), "an entry address"),
                     _int(e.get("payload_address"), "a payload address"),
                     _int(e.get("payload_size"), "a payload size"))
    err = e.get("error")
    if isinstance(err, dict):
        why = err.get("kind")
        if why in ("empty", "too_large"):
            entry.error = "implausible payload size %d" % entry.payload_size
        elif why == "unreadable":
            entry.error = _read_error(errors, "the payload of entry 0x%x" % entry.address,
                                      entry.payload_addr, entry.payload_size)
        else:
            if why == "decode":
                entry.kind = e.get("kind") or "unknown"
            entry.error = str(err.get("message"))
        return entry, []
    doc = e.get("payload")
    if not isinstance(doc, dict):
        entry.error = "unexpected reader output: an entry without payload or error"
        return entry, []
    entry.kind = doc["kind"] if isinstance(doc.get("kind"), str) else "unknown"
    entry.problems = [str(p) for p in doc.get("problems") or []]
    try:
        funcs = _functions_of(doc, entry)
    except (ValueError, TypeError, AttributeError, IndexError) as e:
        entry.error = "unexpected decoder output: %s" % e
        return entry, []
    return entry, funcs + deferred_functions(entry, doc)


def scan_entry(address):
    """Reads and decodes one jit_code_entry: (JitEntry, [JitFunction])."""
    doc, errors = _Decoder.entry(address)
    if "error" in doc:
        raise JitError(_read_error(errors, "jit_code_entry", address, 32)
                       if (address, 32) in errors else str(doc["error"]))
    try:
        return _entry_of(doc["entry"], errors)
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        raise JitError("unexpected reader output: %s" % e)


def _list_problem(p, errors):
    """A problem of the list itself, worded for the user."""
    kind = p.get("kind")
    if kind == "loop":
        return "the entry list loops back to entry 0x%x: stopped there" % p.get("target", 0)
    if kind == "too_many_entries":
        return "more than %d entries (set jit max-entries): stopped" % p.get("limit", 0)
    if kind == "unreadable_entry":
        return "entry list broken: %s" % _read_error(errors, "jit_code_entry",
                                                     p.get("address", 0), 32)
    return str(p.get("message"))


class Scan:
    """What the process registered: entries (list order), functions, the problems of the
    list itself, and an address index under the project's one overlap rule."""

    __slots__ = ("entries", "funcs", "problems", "index")

    def __init__(self, entries, funcs, problems, index):
        self.entries = entries
        self.funcs = funcs
        self.problems = problems
        self.index = index


def scan():
    """Every registered entry and function: the library walks the list from first_entry."""
    addr = descriptor_address()
    # A missing library is the user's problem to fix, not damage in the list: raise it now.
    _Decoder.lib()
    limit = _MAX_ENTRIES_PARAM.value or _DEFAULT_MAX_ENTRIES
    doc, errors = _Decoder.walk(addr, limit)
    if "error" in doc:
        if (addr, _DESCRIPTOR.size) in errors:
            raise JitError(_read_error(errors, "__jit_debug_descriptor", addr, _DESCRIPTOR.size))
        raise JitError(str(doc["error"]))
    try:
        version = _int(doc["descriptor"]["version"], "the descriptor version")
        if version != 1:
            raise JitError(
                "__jit_debug_descriptor has version %d where 1 was expected (not initialised "
                "yet, or damaged)" % version
            )
        entries, funcs, per_entry = [], [], []
        for e in doc.get("entries") or []:
            entry, fs = _entry_of(e, errors)
            entries.append(entry)
            funcs.extend(fs)
            per_entry.append(fs)
        problems = [_list_problem(p, errors) for p in doc.get("problems") or []
                    if p.get("kind") != "version"]
        index = _AddressIndex(doc.get("lookup") or [], per_entry)
    except (ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
        raise JitError("unexpected reader output: %s" % e)
    return Scan(entries, funcs, problems, index)


# ---------------------------------------------------------------------------------------
# Commands


def _compile(pattern):
    try:
        return re.compile(pattern)
    except re.error as e:
        raise JitError("bad regular expression %r: %s" % (pattern, e))


def _report_problems(entries, problems):
    for e in entries:
        for p in e.problems:
            gdb.write("warning: jit entry 0x%x (%s payload): %s\n" % (e.address, e.kind, p))
        if e.error:
            gdb.write(
                "warning: jit entry 0x%x (%s payload, %d bytes at 0x%x): %s\n"
                % (e.address, e.kind, e.payload_size, e.payload_addr, e.error)
            )
    for problem in problems:
        gdb.write("warning: %s\n" % problem)


class JitPrefix(gdb.Command):
    """Commands for JIT-compiled code registered through GDB's JIT interface.

jit list [REGEX]            every registered JIT function
jit break NAME|REGEX        breakpoints on JIT functions (pending until registered)
jit symbolize ADDR...       name+offset and file:line of addresses
jit export-perf-map FILE    write a perf map (START SIZE name) of the JIT functions"""

    def __init__(self):
        super().__init__("jit", gdb.COMMAND_DATA, prefix=True)


class JitList(gdb.Command):
    """List the JIT functions the program registered: jit list [REGEX]

Reads __jit_debug_descriptor from target memory (live process or core file) and decodes
every entry, compact records and ELF alike. REGEX (Python syntax) keeps the functions whose
name it matches anywhere in. Columns: start, end (one past the last byte), name, payload
kind (compact or elf), address of the jit_code_entry, source file. Damaged entries are
reported as warnings after the table."""

    def __init__(self):
        super().__init__("jit list", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        arg = arg.strip()
        rx = _compile(arg) if arg else None
        found = scan()
        entries, funcs = found.entries, found.funcs
        shown = [f for f in funcs if rx is None or rx.search(f.name)]
        shown.sort(key=lambda f: (f.start, f.name))
        if shown:
            w = max(len(f.name) for f in shown)
            w = max(w, 4)
            gdb.write("%-18s %-18s %-*s %-7s %-18s %s\n"
                      % ("Start", "End", w, "Name", "Kind", "Entry", "File"))
            for f in shown:
                gdb.write("0x%016x 0x%016x %-*s %-7s 0x%016x %s\n"
                          % (f.start, f.end, w, f.name, f.kind, f.entry, f.file or "-"))
        what = "JIT functions" if rx is None else "JIT functions matching %r" % arg
        gdb.write("%d %s (%d registered in %d entries).\n"
                  % (len(shown), what, len(funcs), len(entries)))
        _report_problems(entries, found.problems)


# Pending `jit break` requests: [(pattern text, compiled regex)].
_pending = []
# Addresses that already carry a breakpoint made by `jit break`: address -> (breakpoint,
# the request's pattern).
_placed = {}
# What the user set on the breakpoints of a request before its process went (condition,
# commands, enabled), given to the breakpoints it gets in the next process.
_kept = {}


def _matches(pattern, rx, funcs):
    exact = [f for f in funcs if f.name == pattern]
    if exact:
        return exact
    return [f for f in funcs if rx.fullmatch(f.name)]


def _place(funcs, why, pattern):
    n = 0
    for f in funcs:
        # A breakpoint where no registered code is would stop nothing and, at 0 or in
        # unmapped memory, make every later `continue` fail to insert it.
        if f.start == 0 or f.size == 0:
            gdb.write(
                "jit: no breakpoint on %s (jit entry 0x%x): it covers no code (start 0x%x, "
                "size %d); the entry's payload describes it so\n"
                % (f.name, f.entry, f.start, f.size)
            )
            continue
        bp = _placed.get(f.start, (None, None))[0]
        if bp is not None and bp.is_valid():
            gdb.write("jit: %s at 0x%x already has breakpoint %d\n" % (f.name, f.start, bp.number))
            continue
        bp = gdb.Breakpoint("*0x%x" % f.start, internal=False)
        kept = _kept.get(pattern)
        if kept is not None:
            condition, commands, enabled = kept
            try:
                if condition is not None:
                    bp.condition = condition
                if commands:
                    bp.commands = commands
                bp.enabled = enabled
            except (gdb.error, RuntimeError) as e:
                gdb.write("jit: breakpoint %d did not get the condition or commands of its "
                          "request's earlier breakpoint: %s\n" % (bp.number, e))
        _placed[f.start] = (bp, pattern)
        n += 1
        gdb.write("jit: breakpoint %d on %s at 0x%x%s\n" % (bp.number, f.name, f.start, why))
    return n


class JitBreak(gdb.Command):
    """Break on JIT functions: jit break NAME|REGEX

A function named exactly NAME, else every function whose whole name matches the regular
expression (Python syntax). The breakpoint is put at the function's first instruction
(`break *ADDR`). If nothing matches yet, the request stays pending and is resolved by the
first registration that brings a match (or by attach / core-file), then it is an ordinary
breakpoint. `jit break` without argument lists the pending requests."""

    def __init__(self):
        super().__init__("jit break", gdb.COMMAND_BREAKPOINTS)

    def invoke(self, arg, from_tty):
        pattern = arg.strip()
        if not pattern:
            if not _pending:
                gdb.write("No pending jit breakpoints.\n")
            for p, _ in _pending:
                gdb.write("pending: %s\n" % p)
            return
        rx = _compile(pattern)
        funcs = []
        try:
            found = scan()
            funcs = found.funcs
            _report_problems(found.entries, found.problems)
        except JitError as e:
            # Not running yet, or the runtime has not initialised the descriptor: pending.
            gdb.write("%s; looking again at every JIT registration.\n" % e)
        found = _matches(pattern, rx, funcs)
        if found:
            _place(found, "", pattern)
            return
        _pending.append((pattern, rx))
        _install_hook()
        _sync_announce_each()
        gdb.write(
            "jit: no JIT function matches %r yet; breakpoint pending until one is registered.\n"
            % pattern
        )


def _resolve_pending(funcs):
    if not _pending:
        return
    still = []
    for pattern, rx in _pending:
        found = _matches(pattern, rx, funcs)
        if found:
            _place(found, " (pending %r resolved)" % pattern, pattern)
        else:
            still.append((pattern, rx))
    if len(still) != len(_pending):
        _pending[:] = still
        _sync_announce_each()


def _on_new_objfile(event):
    """Attach and core files: GDB reads the whole entry list without any call of
    __jit_debug_register_code, making an objfile per ELF entry (and none for entries its
    reader took), so pending requests are checked against the whole list here too. Not at
    a live registration: the hook's stop checks the entry registered, and scanning the whole
    list at every ELF entry made each registration cost 30 ms at 1,000 functions. (The hook's
    stop runs first: GDB asks breakpoint conditions before it reads the new entry.)"""
    if not _pending or _hook_stop[0]:
        return
    try:
        funcs = scan().funcs
    except JitError:
        # Shared libraries of a program that is not running or has not initialised its
        # descriptor yet: nothing to resolve.
        return
    _resolve_pending(funcs)


class _RegisterHook(gdb.Breakpoint):
    """Internal breakpoint on __jit_debug_register_code, the function every JIT runtime
    calls after linking or unlinking an entry (GDB's own JIT breakpoint sits there too).
    `stop` decodes the entry being registered (unless no pending name occurs in its bytes:
    `_names_absent`), places the breakpoints of pending `jit break` requests it satisfies,
    and returns False: the inferior goes on without a visible stop. Breakpoints created
    here are inserted when GDB resumes, before the new code can run. (GDB makes no
    new_objfile event for objfiles built by a JIT reader, so that event alone would miss
    compact payloads.)

    `spec` is the function's name, or `*ADDR` in a live process (see `_hook_by_address`)."""

    def __init__(self, spec):
        super().__init__(spec, internal=True)
        self.silent = True
        self.by_address = spec.startswith("*")

    def stop(self):
        # This stop is a live registration: the new_objfile event GDB raises for an ELF
        # entry while it handles it needs no scan of its own.
        _hook_stop[0] = True
        if not _pending:
            return False
        if not _announce_set[0]:
            # Once per process (a stop per registration must stay cheap).
            _sync_announce_each()
        try:
            _addr, version, action, relevant, _first = read_descriptor()
            if version == 1 and action == _JIT_REGISTER and relevant:
                if _names_absent(relevant):
                    return False
                entry, funcs = scan_entry(relevant)
                _report_problems([entry], [])
                _resolve_pending(funcs)
        except JitError as e:
            gdb.write("warning: %s (while resolving pending jit breakpoints)\n" % e)
        except Exception as e:  # an exception here would stop the program at the hook
            gdb.write("warning: resolving pending jit breakpoints failed: %r\n" % e)
        return False


# Payloads larger than this are decoded without looking for names first (the decoder
# reports the size; it refuses payloads over 256 MiB as damage). Below it, one extra read
# costs less than a decode, which reads the whole payload too.
_NAME_CHECK_MAX = 64 << 20


def _names_absent(address):
    """True when the entry at `address` cannot satisfy any pending request: every request
    is a plain name, and none of those names occurs in the entry's payload bytes. Both
    formats store a function's name verbatim (compact records inline, ELF in .strtab), so
    decoding such an entry (about 0.1 ms a registration, most of the hook's cost) would
    find nothing. Anything else answers False and the entry is decoded, which reports
    damage. A damaged entry skipped here is still reported by `jit list` and the reader."""
    needles = []
    for pattern, _rx in _pending:
        # U+FFFD may stand for bytes that are not UTF-8 in a decoded name.
        if not _is_plain_name(pattern) or "\ufffd" in pattern:
            return False
        needles.append(pattern.encode("utf-8"))
    try:
        inf = gdb.selected_inferior()
        _next, _prev, payload, size = _ENTRY.unpack(bytes(inf.read_memory(address, _ENTRY.size)))
        if size == 0 or size > _NAME_CHECK_MAX:
            return False
        data = bytes(inf.read_memory(payload, size))
    except (gdb.error, gdb.MemoryError, struct.error, OverflowError, ValueError):
        return False
    return not any(n in data for n in needles)


# The hook: one breakpoint by name, or one per address where the name resolved in a live
# process (`_hook_by_address`).
_hooks = []
# Set by the hook's stop, cleared when the inferior resumes or goes.
_hook_stop = [False]
# pid -> _Deferral of that process's runtime (what it exports, what was written there).
_announce_each = {}
# True once the runtime is known told (or to have nothing to tell) in the current process
# while requests are pending; cleared whenever that may change.
_announce_set = [False]
# Size of the runtime's jit_gdb_wanted_names.
_WANTED_BYTES = 4096


class _Deferral:
    """Where a runtime in deferred mode is told what pending requests wait for, and what was
    written there (None: nothing yet)."""

    def __init__(self):
        self.each = None  # address of jit_gdb_announce_each, or None (not such a runtime)
        self.names = None  # address of jit_gdb_wanted_names, or None (an older runtime)
        self.length = None  # address of jit_gdb_wanted_len
        self.written = None  # (each, names blob)


def _is_plain_name(pattern):
    """A pattern with no regular-expression syntax matches exactly its own text, which the
    runtime can compare names with."""
    return bool(pattern) and re.escape(pattern) == pattern


def _pending_breakpoint_names():
    """Plain names of the user's pending GDB breakpoints (`break NAME` before NAME exists):
    GDB places them when an ELF entry defining NAME is announced, which deferred mode would
    do only after the code may have run."""
    names = []
    for b in gdb.breakpoints() or ():
        try:
            if (b.is_valid() and b.pending and b.enabled and b.type == gdb.BP_BREAKPOINT
                    and b.location and _is_plain_name(b.location)):
                names.append(b.location)
        except (gdb.error, RuntimeError, AttributeError):
            continue
    return names


def _sync_announce_each():
    """A runtime in deferred mode announces registrations in groups, so a pending request
    would see a function only after its code may have run. While requests are pending the
    scripts tell the runtime: requests by plain name, and the user's pending GDB breakpoints
    by plain name, go to its `jit_gdb_wanted_names` (a registration that defines one is
    announced at once, the others stay deferred); a request by regular expression, too many
    names, or a runtime without that buffer set `jit_gdb_announce_each`, which announces
    every registration at once (deferral suspended). Both are cleared when nothing waits."""
    if not _live_process():
        return
    inf = gdb.selected_inferior()
    state = _announce_each.get(inf.pid)
    if state is None:
        # Runs in new_objfile events too, while GDB starts the program: `_symbol_address`
        # tries an expression first (see there).
        state = _Deferral()
        try:
            state.each = _symbol_address("jit_gdb_announce_each")
            if state.each is not None:
                state.names = _symbol_address("jit_gdb_wanted_names")
                state.length = _symbol_address("jit_gdb_wanted_len")
        except gdb.error:
            state.each = None
        if len(_announce_each) > 64:
            _announce_each.clear()
        _announce_each[inf.pid] = state
    requested = [p for p, _ in _pending if _is_plain_name(p)]
    each = len(requested) < len(_pending)
    names = requested + [n for n in _pending_breakpoint_names() if n not in requested]
    blob = b"".join(n.encode() + b"\0" for n in names)
    if state.names is None or state.length is None or len(blob) > _WANTED_BYTES:
        # Deferral is suspended for `jit break` requests only: a pending GDB breakpoint may
        # well wait for a shared library, not for JIT code.
        each, blob = each or bool(requested), b""
    want = (1 if each else 0, blob)
    _announce_set[0] = bool(_pending) and (state.each is None or state.written == want)
    if state.each is None or state.written == want:
        return
    try:
        if blob:
            inf.write_memory(state.names, blob)
        if state.length is not None:
            # Both architectures the runtime supports (x86-64, aarch64) are little-endian.
            inf.write_memory(state.length, struct.pack("<I", len(blob)))
        inf.write_memory(state.each, bytes([want[0]]))
        state.written = want
        _announce_set[0] = bool(_pending)
    except (gdb.error, gdb.MemoryError) as e:
        gdb.write("jit: could not tell the runtime which functions pending jit breakpoints "
                  "wait for (%s): they may see deferred code only after it ran\n" % e)


def _on_new_objfile_announce(event):
    """A runtime loaded (at start-up or by dlopen) may define the flag: look again."""
    if _is_jit_objfile(event.new_objfile):
        return
    _announce_each.pop(getattr(gdb.selected_inferior(), "pid", 0), None)
    _announce_set[0] = False
    if _pending or _pending_breakpoint_names():
        _sync_announce_each()


def _on_breakpoint_change(_bp):
    """A user breakpoint made, deleted, or placed (no longer pending): the names the runtime
    is told to wait for may change. Only where the runtime's statics are known already (no
    symbol lookups in these events, which GDB also raises while it resets breakpoints); the
    next stop or new objfile looks them up otherwise."""
    try:
        if _live_process() and gdb.selected_inferior().pid in _announce_each:
            _sync_announce_each()
    except (gdb.error, RuntimeError) as e:
        gdb.write("jit: the runtime was not told about a breakpoint change: %s\n" % e)


def _live_process():
    """Is the selected inferior a running process (not a core file, not nothing)?"""
    inf = gdb.selected_inferior()
    if inf is None or inf.pid == 0:
        return False
    conn = getattr(inf, "connection", None)
    return conn is None or getattr(conn, "type", None) != "core"


def _live_hooks():
    _hooks[:] = [h for h in _hooks if h.is_valid()]
    return _hooks


def _install_hook():
    if not _live_hooks():
        # By name: pending until a runtime defining it is loaded.
        _hooks.append(_RegisterHook("__jit_debug_register_code"))
    _hook_by_address()


def _hook_by_address():
    """Turns a hook by name into one breakpoint per address it resolved to, in a live
    process. GDB sets every breakpoint again at each new objfile, that is at every ELF
    registration: a name is looked up in every objfile's symbols each time (about 1 ms per
    registration with this project's Rust test host), an address costs nothing to set
    again. An address only holds for the process it was read in: `_reset_hook` goes back to
    the name when the process goes. (Every location is kept: a runtime library may have its
    own copy of the function beside the program's.)"""
    hooks = _live_hooks()
    if len(hooks) != 1 or hooks[0].by_address or not _live_process():
        return
    named = hooks[0]
    addrs = sorted({loc.address for loc in getattr(named, "locations", None) or []
                    if loc.enabled and loc.address})
    if not addrs:
        return
    _hooks[:] = [_RegisterHook("*0x%x" % a) for a in addrs]
    named.delete()


def _drop_hooks():
    for h in _live_hooks():
        h.delete()
    _hooks[:] = []


def _on_stop_hook(_event):
    """At a stop the user sees (no breakpoint may be deleted in a breakpoint's `stop`): a
    hook no request needs goes, a hook by name becomes one by address."""
    try:
        _sync_announce_each()
        if not _pending:
            _drop_hooks()
        else:
            _hook_by_address()
    except (gdb.error, RuntimeError) as e:
        gdb.write("jit: the registration hook was not updated: %s\n" % e)


def _repend_placed():
    """The breakpoints `jit break` put on a process's code go with it: the next run
    generates its code later, maybe elsewhere, and GDB could not insert them at `run`
    (`Cannot insert breakpoint`, the command aborted). Their requests are pending again,
    with the condition, commands and enabled state the user gave them."""
    if not _placed:
        return
    requests = []
    for bp, pattern in list(_placed.values()):
        if not bp.is_valid():
            continue
        if pattern not in requests:
            requests.append(pattern)
            _kept[pattern] = (bp.condition, bp.commands, bp.enabled)
        gdb.write("jit: breakpoint %d (%s) is removed with the process's code\n"
                  % (bp.number, bp.location))
        bp.delete()
    _placed.clear()
    for pattern in requests:
        if all(p != pattern for p, _ in _pending):
            _pending.append((pattern, _compile(pattern)))
            gdb.write("jit: %r is pending again until a JIT function matches it\n" % pattern)


def _reset_hook(_event):
    """The process went (exit, kill, detach) or its files were replaced (exec, `file`): an
    address read in it means nothing now, so pending requests get a hook by name again
    (made by name: while GDB reports an exit the process still has its pid)."""
    _hook_stop[0] = False
    if _exiting[0]:
        # GDB quits: nothing comes after.
        return
    try:
        _repend_placed()
        if any(h.by_address for h in _live_hooks()):
            _drop_hooks()
        if _pending and not _live_hooks():
            _hooks.append(_RegisterHook("__jit_debug_register_code"))
    except (gdb.error, RuntimeError) as e:
        gdb.write("jit: the registration hook was not reset: %s\n" % e)


def _on_resume(_event):
    _hook_stop[0] = False


_exiting = [False]


def _on_exiting(_event):
    _exiting[0] = True


def _on_exited_announce(_event):
    _announce_each.clear()
    _announce_set[0] = False


gdb.events.stop.connect(_on_stop_hook)
gdb.events.new_objfile.connect(_on_new_objfile_announce)
for _event in (gdb.events.breakpoint_created, gdb.events.breakpoint_modified,
               gdb.events.breakpoint_deleted):
    _event.connect(_on_breakpoint_change)
gdb.events.exited.connect(_on_exited_announce)
gdb.events.cont.connect(_on_resume)
if hasattr(gdb.events, "gdb_exiting"):
    gdb.events.gdb_exiting.connect(_on_exiting)
gdb.events.exited.connect(_reset_hook)
gdb.events.clear_objfiles.connect(_reset_hook)


# ---------------------------------------------------------------------------------------
# Deferred registrations (jit_interface::set_deferred / jit_set_deferred): the runtime lists
# them at once but announces them to the debugger in groups. At every stop of a live
# process, announce what is pending, so that `bt` names code registered just before.

_pending_counter = {}  # pid -> address of jit_gdb_pending, or None (not a deferring runtime)
_flushing = [False]


def _pending_address(inf):
    if inf.pid not in _pending_counter:
        try:
            text = gdb.execute("info address jit_gdb_pending", to_string=True)
        except gdb.error:
            text = ""
        # A minimal symbol ("is at 0x...") or, with debug info, "is static storage at
        # address 0x...".
        m = re.search(r"\bis (?:static storage )?at (?:address )?(0x[0-9a-fA-F]+)", text)
        if len(_pending_counter) > 64:
            _pending_counter.clear()
        _pending_counter[inf.pid] = int(m.group(1), 16) if m else None
    return _pending_counter[inf.pid]


def _read_u64(inf, name):
    """A 64-bit static of the runtime by name, or None (absent, unreadable)."""
    try:
        addr = _symbol_address(name)
        if addr is None:
            return None
        return struct.unpack("<q", bytes(inf.read_memory(addr, 8)))[0]
    except (gdb.error, gdb.MemoryError):
        return None


_told_vector_state = [False]


def flush_deferred(quiet=False):
    """Calls the runtime's jit_gdb_flush_for_debugger if registrations are pending; returns
    how many were announced (0 if none, None if that was not possible)."""
    if _flushing[0] or not _live_process():
        return 0
    inf = gdb.selected_inferior()
    addr = _pending_address(inf)
    if addr is None:
        return 0
    try:
        pending = struct.unpack("<Q", bytes(inf.read_memory(addr, 8)))[0]
    except (gdb.error, gdb.MemoryError):
        return 0
    if pending == 0:
        return 0
    _flushing[0] = True
    language = gdb.parameter("language")
    locking = gdb.parameter("scheduler-locking")
    calls = _read_u64(inf, "jit_gdb_flush_calls")
    try:
        # Only this thread runs the call: the flush never waits for the registry lock (it
        # answers -1 when another thread holds it).
        gdb.execute("set scheduler-locking on", to_string=True)
        gdb.execute("set language c", to_string=True)
        n = int(gdb.parse_and_eval("(long) jit_gdb_flush_for_debugger()"))
    except gdb.error as e:
        # GDB 13 reports an error AFTER the call on CPUs with AMX state: it cannot write the
        # vector registers back ("Couldn't write extended state status"). The runtime saved
        # and restored them itself, and its counters say whether the call ran.
        after = _read_u64(inf, "jit_gdb_flush_calls")
        if calls is not None and after is not None and after > calls:
            n = _read_u64(inf, "jit_gdb_flush_result")
            if not _told_vector_state[0] and "extended state" in str(e):
                _told_vector_state[0] = True
                gdb.write("jit: this GDB could not write the vector registers back after "
                          "calling jit_gdb_flush_for_debugger (%s); the runtime restored them "
                          "itself, the program's values are as they were\n" % e)
        else:
            if not quiet:
                gdb.write("jit: %d deferred registration(s) not announced: %s\n" % (pending, e))
            return None
    finally:
        gdb.execute("set language %s" % language, to_string=True)
        gdb.execute("set scheduler-locking %s" % locking, to_string=True)
        _flushing[0] = False
    if n is None:
        if not quiet:
            gdb.write("jit: %d deferred registration(s): the flush ran, its result is "
                      "unreadable\n" % pending)
        return None
    if n < 0:
        if not quiet:
            gdb.write(
                "jit: %d deferred registration(s) not announced: the program stopped inside "
                "the JIT registry (they are listed: `jit list` shows them)\n" % pending
            )
        return None
    return n


def _on_stop_flush(_event):
    try:
        flush_deferred()
    except Exception as e:  # a stop handler must never break the stop itself
        gdb.write("jit: announcing deferred registrations failed: %s\n" % e)


gdb.events.stop.connect(_on_stop_flush)
gdb.events.exited.connect(lambda _event: _pending_counter.clear())
# A runtime loaded later (dlopen) brings the counter: look again.
gdb.events.new_objfile.connect(
    lambda event: None if _is_jit_objfile(event.new_objfile) else _pending_counter.clear()
)


# Connected once (it does nothing while no request is pending): connecting it again with
# each new hook ran it once more per new objfile after every restart.
gdb.events.new_objfile.connect(_on_new_objfile)


def _parse_addr(text):
    try:
        v = gdb.parse_and_eval(text)
        if v.type.strip_typedefs().code == gdb.TYPE_CODE_FUNC:
            v = v.address
        return int(v) & 0xFFFFFFFFFFFFFFFF
    except (gdb.error, TypeError, ValueError) as e:
        raise JitError("%r is not an address: %s" % (text, e))


class _AddressIndex:
    """Functions by address, from the library's disjoint ranges ([START, END, ENTRY,
    FUNCTION], in address order): where functions overlap, the newest registration owns the
    shared addresses and older ones keep the rest (the rule of jit_interface::inspect's
    Symbolizer, which `jit-gdb inspect` and the reader's index apply too)."""

    def __init__(self, ranges, per_entry):
        self.starts, self.ranges = [], []
        for r in ranges:
            start, end, e, f = (_int(v, "a lookup range") for v in r)
            self.starts.append(start)
            self.ranges.append((start, end, per_entry[e][f]))

    def lookup(self, addr):
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.ranges[i][1]:
            return self.ranges[i][2]
        return None


class JitSymbolize(gdb.Command):
    """Name JIT code addresses: jit symbolize ADDR...

Prints `ADDR name+0xOFF file:line` per address (expressions such as $pc are allowed),
`ADDR ??` for an address outside every registered JIT function."""

    def __init__(self):
        super().__init__("jit symbolize", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        args = gdb.string_to_argv(arg)
        if not args:
            raise JitError("usage: jit symbolize ADDR...")
        addrs = [_parse_addr(a) for a in args]
        found = scan()
        for a in addrs:
            f = found.index.lookup(a)
            if f is None:
                gdb.write("0x%x ??\n" % a)
                continue
            line = f.line_at(a)
            where = "%s:%d" % (f.file or "??", line) if line is not None else (f.file or "??")
            gdb.write("0x%x %s+0x%x %s\n" % (a, f.name, a - f.start, where))
        _report_problems(found.entries, found.problems)


class JitExportPerfMap(gdb.Command):
    """Write the JIT functions as a perf map: jit export-perf-map FILE

One line per function, `START SIZE name` in hex without 0x, in address order (the format
perf reads from /tmp/perf-PID.map). Where functions overlap, the newest registration owns
the shared addresses: an older function gets a line for each piece it keeps."""

    def __init__(self):
        super().__init__("jit export-perf-map", gdb.COMMAND_DATA)

    def invoke(self, arg, from_tty):
        args = gdb.string_to_argv(arg)
        if len(args) != 1:
            raise JitError("usage: jit export-perf-map FILE")
        path = os.path.expanduser(args[0])
        found = scan()
        ranges = found.index.ranges
        text = "".join("%x %x %s\n" % (a, b - a, f.name) for a, b, f in ranges)
        try:
            with open(path, "w") as out:
                out.write(text)
        except OSError as e:
            raise JitError("cannot write %s: %s" % (path, e.strerror or e))
        gdb.write("jit: wrote %d functions to %s\n" % (len(ranges), path))
        _report_problems(found.entries, found.problems)


# ---------------------------------------------------------------------------------------
# Source files of JIT code: GDB 10-14 crash when they cannot open the source file of a
# symtab a JIT reader made, and runtimes that compile from strings have no such file. The
# reader (libjitreader.so) writes the text registered with the code, or a placeholder, into
# a per-user cache (jit_interface::source_cache). Here the reader's session directory goes
# at the end of GDB's source path, so that the reader keeps the runtime's file names (`bt`
# shows `fib.js:7`, not a cache path) while GDB still finds a file for each; real files in
# the current directory come first. ELF payloads carry their text in a `.jit_gdb.sources`
# section, which GDB ignores: it is written to the same directory when GDB loads the entry.
# Nothing here touches BFD-only attributes of JIT objfiles (their build-id crashes GDB
# 13 on reader-made objfiles).

_source_session = [None]
# GDB 13 names an ELF entry's objfile `<in-memory@0xSTART>`, GDB 16 `<in-memory@0xSTART-0xEND>`.
_IN_MEMORY = re.compile(r"^<in-memory@(0x[0-9a-fA-F]+)(?:-0x[0-9a-fA-F]+)?>$")
# Largest ELF payload whose source section is looked for (the reader reads only the
# header, the section headers and that section).
_MAX_ELF_PAYLOAD = 1 << 30


def source_session():
    """The reader's source session directory, made on first use and put at the end of
    GDB's source path; None when the reader library (or its cache) is not usable."""
    if _source_session[0] is not None:
        _add_to_source_path(_source_session[0])
        return _source_session[0]
    try:
        fn = _Decoder.lib().jitgdb_source_dir
    except (JitError, AttributeError):
        return None
    fn.argtypes = []
    fn.restype = ctypes.c_char_p
    d = fn()
    if not d:
        return None
    d = os.fsdecode(d)
    _source_session[0] = d
    _add_to_source_path(d)
    return d


def _add_to_source_path(d):
    cur = gdb.parameter("directories") or "$cdir:$cwd"
    if d not in cur.split(os.pathsep):
        gdb.execute("set directories %s%s%s" % (cur, os.pathsep, d), to_string=True)


def _on_new_objfile_sources(event):
    """An ELF entry GDB just loaded (`<in-memory@ADDR>`): its registered source texts go
    to the session directory, where GDB's source path search finds them."""
    try:
        m = _IN_MEMORY.match(event.new_objfile.filename or "")
        if m is None or source_session() is None:
            return
        fn = _Decoder.lib().jitgdb_store_elf_sources
        fn.argtypes = [_READ_FN, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
        fn.restype = ctypes.c_long
        inf = gdb.selected_inferior()

        def read(_ctx, addr, buf, n):
            try:
                data = bytes(inf.read_memory(addr, n))
            except (gdb.MemoryError, gdb.error):
                return -1
            ctypes.memmove(buf, data, n)
            return 0

        stored = fn(_READ_FN(read), None, int(m.group(1), 16), _MAX_ELF_PAYLOAD)
        if stored < 0:
            gdb.write("jit: the source texts of ELF entry %s could not be read\n" % m.group(1))
    except (JitError, AttributeError):
        # No reader library (or an older one): GDB shows what it finds on disk.
        return
    except Exception as e:  # an event handler must never break GDB's loading
        gdb.write("jit: writing the source texts of a JIT entry failed: %s\n" % e)


class JitSources(gdb.Command):
    """Where the source files of JIT code are: jit sources

Shows the source session directory (it holds the text each runtime registered with its
code, or a placeholder saying the text is not available) and puts it back at the end of
GDB's source path if a `directory` command removed it."""

    def __init__(self):
        super().__init__("jit sources", gdb.COMMAND_FILES)

    def invoke(self, arg, from_tty):
        d = source_session()
        if d is None:
            raise JitError(
                "no source session directory: the reader library (%s) is not usable or "
                "cannot write its cache" % _Decoder.describe_choice()
            )
        gdb.write("JIT source files: %s (on the source path: %s)\n"
                  % (d, gdb.parameter("directories")))


gdb.events.new_objfile.connect(_on_new_objfile_sources)
source_session()

JitPrefix()
JitList()
JitBreak()
JitSymbolize()
JitExportPerfMap()
JitSources()
