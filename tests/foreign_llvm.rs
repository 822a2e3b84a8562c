//! Another producer's JIT entries: Debian's `lli -jit-kind=mcjit` runs IR with debug info
//! (written here as `.ll` text: clang is not needed) and registers relocatable ELF objects
//! whose DWARF still needs its `.rela.debug_*` applied. `gdb-scripts/jit.py` (`jit list`,
//! `jit symbolize`, `jit break`) in real GDB, and `jit-gdb inspect` on a `gcore` of the same
//! process, must agree with GDB's own `info symbol` / `info line` on that code. A copy of
//! the core with the entry's DWARF damaged checks that the damage is reported for that
//! entry alone, and that `jit break` refuses a function that covers no code.
//!
//! A C host linking Debian's libLLVM and jit-interface (compiled here with `cc`) checks that
//! both runtimes register into one list, the executable's, and that the commands and the
//! inspector see both kinds of entries.

mod common;
#[path = "reader_support/mod.rs"]
mod reader_support;
#[path = "scripts_support/mod.rs"]
mod scripts_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use object::read::elf::{FileHeader, ProgramHeader};
use object::{elf, Object, ObjectSection, ObjectSymbol};

use common::{mark, parse_hex, require_tool, Gdb, TempDir, Transcript};
use reader_support::load_cmd;
use scripts_support::{list_rows, source_cmd, Row};

/// `jit_leaf(x)` aborts when x > 100; `main` calls it with 5, then 500. Lines: jit_leaf 4
/// (compare), 5 (abort), 6 (add, return); main 10, 11, 12.
const IR: &str = r#"; ModuleID = 'jitprog.c'
source_filename = "jitprog.c"
target triple = "x86_64-pc-linux-gnu"

declare void @abort()

define i32 @jit_leaf(i32 %x) !dbg !10 {
entry:
  %c = icmp sgt i32 %x, 100, !dbg !13
  br i1 %c, label %boom, label %ok, !dbg !13
boom:
  call void @abort(), !dbg !14
  unreachable, !dbg !14
ok:
  %r = add i32 %x, 1, !dbg !15
  ret i32 %r, !dbg !15
}

define i32 @main() !dbg !20 {
entry:
  %a = call i32 @jit_leaf(i32 5), !dbg !21
  %b = call i32 @jit_leaf(i32 500), !dbg !22
  %s = add i32 %a, %b, !dbg !23
  ret i32 %s, !dbg !23
}

!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!3, !4}

!0 = distinct !DICompileUnit(language: DW_LANG_C99, file: !1, producer: "hand-written IR", isOptimized: false, runtimeVersion: 0, emissionKind: FullDebug)
!1 = !DIFile(filename: "jitprog.c", directory: "/src")
!3 = !{i32 2, !"Dwarf Version", i32 4}
!4 = !{i32 2, !"Debug Info Version", i32 3}
!5 = !DISubroutineType(types: !6)
!6 = !{}
!10 = distinct !DISubprogram(name: "jit_leaf", scope: !1, file: !1, line: 3, type: !5, scopeLine: 3, spFlags: DISPFlagDefinition, unit: !0)
!13 = !DILocation(line: 4, column: 3, scope: !10)
!14 = !DILocation(line: 5, column: 5, scope: !10)
!15 = !DILocation(line: 6, column: 3, scope: !10)
!20 = distinct !DISubprogram(name: "main", scope: !1, file: !1, line: 9, type: !5, scopeLine: 9, spFlags: DISPFlagDefinition, unit: !0)
!21 = !DILocation(line: 10, column: 3, scope: !20)
!22 = !DILocation(line: 11, column: 3, scope: !20)
!23 = !DILocation(line: 12, column: 3, scope: !20)
"#;

/// The JIT functions of [`IR`].
const NAMES: [&str; 2] = ["jit_leaf", "main"];

/// Offsets from `jit_leaf`'s first byte compared at the breakpoint there (MCJIT's code for
/// it is 0x17 bytes: every line of it and both ends).
const LEAF_OFFSETS: [u64; 6] = [0, 4, 7, 0xb, 0x10, 0x16];

/// The mixed host: registers `ours` through jit-interface, then compiles the IR file it is
/// given with MCJIT through LLVM's C API (declared here: no LLVM headers needed) and calls
/// both; each calls `mixed_probe`.
const MIXED_C: &str = r#"/* LLVM's MCJIT and jit-interface in one process: both register with GDB through the one
 * __jit_debug_descriptor. The LLVM C API is declared here (no LLVM headers needed): the
 * program links Debian's libLLVM-14.so.1 directly. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "jit_interface.h"

typedef struct LLVMOpaqueContext *LLVMContextRef;
typedef struct LLVMOpaqueMemoryBuffer *LLVMMemoryBufferRef;
typedef struct LLVMOpaqueModule *LLVMModuleRef;
typedef struct LLVMOpaqueExecutionEngine *LLVMExecutionEngineRef;
typedef int LLVMBool;
struct LLVMMCJITCompilerOptions {
    unsigned OptLevel;
    int CodeModel;
    LLVMBool NoFramePointerElim;
    LLVMBool EnableFastISel;
    void *MCJMM;
};
LLVMContextRef LLVMContextCreate(void);
LLVMMemoryBufferRef LLVMCreateMemoryBufferWithMemoryRangeCopy(const char *, size_t, const char *);
LLVMBool LLVMParseIRInContext(LLVMContextRef, LLVMMemoryBufferRef, LLVMModuleRef *, char **);
void LLVMLinkInMCJIT(void);
void LLVMInitializeX86TargetInfo(void);
void LLVMInitializeX86Target(void);
void LLVMInitializeX86TargetMC(void);
void LLVMInitializeX86AsmPrinter(void);
void LLVMInitializeMCJITCompilerOptions(struct LLVMMCJITCompilerOptions *, size_t);
LLVMBool LLVMCreateMCJITCompilerForModule(LLVMExecutionEngineRef *, LLVMModuleRef,
                                          struct LLVMMCJITCompilerOptions *, size_t, char **);
uint64_t LLVMGetFunctionAddress(LLVMExecutionEngineRef, const char *);

/* Called by both JITs' code: the place to stop. */
__attribute__((noinline)) void mixed_probe(void) {
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PROGRAM.ll\n", argv[0]);
        return 2;
    }
    /* Ours first: `ours` calls mixed_probe and returns 7. */
    uint8_t *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    uint8_t *p = code;
    uint64_t probe = (uint64_t)(uintptr_t)&mixed_probe;
    *p++ = 0x55;                                  /*  0: push rbp       */
    memcpy(p, "\x48\x89\xe5", 3), p += 3;         /*  1: mov rbp, rsp   */
    memcpy(p, "\x48\xb8", 2), p += 2;             /*  4: mov rax, probe */
    memcpy(p, &probe, 8), p += 8;
    memcpy(p, "\xff\xd0", 2), p += 2;             /* 14: call rax       */
    memcpy(p, "\xb8\x07\x00\x00\x00", 5), p += 5; /* 16: mov eax, 7     */
    *p++ = 0x5d;                                  /* 21: pop rbp        */
    *p++ = 0xc3;                                  /* 22: ret            */
    uint32_t size = (uint32_t)(p - code);
    if (mprotect(code, 4096, PROT_READ | PROT_EXEC) != 0) {
        perror("mprotect");
        return 1;
    }
    jit_object *obj = jit_object_new();
    int32_t f = jit_object_add_function(obj, "ours", (uint64_t)(uintptr_t)code, size);
    const jit_line rows[] = {{0, 1}, {4, 2}, {16, 3}, {21, 4}};
    if (f < 0 || jit_object_set_lines(obj, f, "ours.js", rows, 4) != 0 ||
        jit_object_set_frame_pointer(obj, f, 1, 4) != 0 ||
        jit_object_add_epilogue(obj, f, 22, 23) != 0) {
        fprintf(stderr, "describing ours: %s\n", jit_last_error());
        return 1;
    }
    jit_registration *reg = jit_register(obj, JIT_FORMAT_ELF);
    if (reg == NULL) {
        fprintf(stderr, "jit_register: %s\n", jit_last_error());
        return 1;
    }

    /* Then LLVM's: the IR file through MCJIT. */
    FILE *in = fopen(argv[1], "rb");
    static char ir[1 << 16];
    size_t n = in ? fread(ir, 1, sizeof ir, in) : 0;
    if (n == 0) {
        perror(argv[1]);
        return 1;
    }
    LLVMLinkInMCJIT();
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod;
    char *err = NULL;
    if (LLVMParseIRInContext(ctx, LLVMCreateMemoryBufferWithMemoryRangeCopy(ir, n, argv[1]), &mod,
                             &err)) {
        fprintf(stderr, "IR: %s\n", err);
        return 1;
    }
    struct LLVMMCJITCompilerOptions opts;
    LLVMInitializeMCJITCompilerOptions(&opts, sizeof opts);
    LLVMExecutionEngineRef ee;
    if (LLVMCreateMCJITCompilerForModule(&ee, mod, &opts, sizeof opts, &err)) {
        fprintf(stderr, "MCJIT: %s\n", err);
        return 1;
    }
    int (*llvm_main)(void) = (int (*)(void))(uintptr_t)LLVMGetFunctionAddress(ee, "llvm_main");
    if (llvm_main == NULL) {
        fprintf(stderr, "no llvm_main\n");
        return 1;
    }
    int (*ours)(void) = (int (*)(void))(uintptr_t)code;
    int r = ours() + llvm_main();
    printf("mixed: %d\n", r);
    jit_unregister(reg);
    return 0;
}
"#;

/// The mixed host's IR: `llvm_main` calls `llvm_leaf`, which calls the host's `mixed_probe`
/// (line 4) and returns (line 5).
const MIXED_IR: &str = r#"target triple = "x86_64-pc-linux-gnu"

declare void @mixed_probe()

define i32 @llvm_leaf(i32 %x) !dbg !10 {
entry:
  call void @mixed_probe(), !dbg !13
  %r = add i32 %x, 1, !dbg !14
  ret i32 %r, !dbg !14
}

define i32 @llvm_main() !dbg !20 {
entry:
  %a = call i32 @llvm_leaf(i32 5), !dbg !21
  ret i32 %a, !dbg !22
}

!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!3, !4}
!0 = distinct !DICompileUnit(language: DW_LANG_C99, file: !1, producer: "hand-written IR", isOptimized: false, runtimeVersion: 0, emissionKind: FullDebug)
!1 = !DIFile(filename: "llvm_part.c", directory: "/src")
!3 = !{i32 2, !"Dwarf Version", i32 4}
!4 = !{i32 2, !"Debug Info Version", i32 3}
!5 = !DISubroutineType(types: !6)
!6 = !{}
!10 = distinct !DISubprogram(name: "llvm_leaf", scope: !1, file: !1, line: 3, type: !5, scopeLine: 3, spFlags: DISPFlagDefinition, unit: !0)
!13 = !DILocation(line: 4, column: 3, scope: !10)
!14 = !DILocation(line: 5, column: 3, scope: !10)
!20 = distinct !DISubprogram(name: "llvm_main", scope: !1, file: !1, line: 8, type: !5, scopeLine: 8, spFlags: DISPFlagDefinition, unit: !0)
!21 = !DILocation(line: 9, column: 3, scope: !20)
!22 = !DILocation(line: 10, column: 3, scope: !20)
"#;

fn jit_gdb() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_jit-gdb"))
}

fn tools(test: &str) -> bool {
    require_tool("gdb", test) && require_tool("lli", test)
}

/// GDB on `lli -jit-kind=mcjit prog.ll` (or its core) with the reader and the scripts
/// loaded, as `tests/scripts_live.rs` loads them.
fn with_scripts(g: Gdb) -> Gdb {
    g.cmd(load_cmd()).cmd(source_cmd())
}

fn write_ir(dir: &TempDir) -> PathBuf {
    let p = dir.join("prog.ll");
    std::fs::write(&p, IR).expect("write prog.ll");
    p
}

/// GDB's Python selecting the frame of `jit_leaf` (`older` more frames out), which `frame
/// function` cannot find in a JIT objfile.
fn select_frame(older: usize) -> String {
    format!(
        "python exec(\"f = gdb.newest_frame()\\nwhile f is not None and f.name() != 'jit_leaf':\\n    f = f.older()\\nfor _ in range({older}):\\n    f = f.older()\\nf.select()\")"
    )
}

/// What one address resolves to, as the `jit` commands, the inspector and GDB say.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    addr: u64,
    name: String,
    offset: u64,
    file: String,
    line: u32,
}

/// `ADDR NAME+0xOFF FILE:LINE` (`jit symbolize` and `inspect --symbolize`).
fn parse_symbolize(line: &str) -> Option<Answer> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let [addr, sym, loc] = w[..] else { return None };
    let (name, off) = sym.rsplit_once("+0x")?;
    let (file, l) = loc.rsplit_once(':')?;
    Some(Answer {
        addr: parse_hex(addr)?,
        name: name.into(),
        offset: u64::from_str_radix(off, 16).ok()?,
        file: file.into(),
        line: l.parse().ok()?,
    })
}

/// GDB's answer for `addr` from `info symbol` (`NAME [+ N] in section ...`) and `info
/// line` (`Line N of "FILE" ...`) in `text`.
fn parse_gdb(t: &Transcript, text: &str, addr: u64) -> Answer {
    let sym = text
        .lines()
        .find(|l| l.contains(" in section "))
        .unwrap_or_else(|| t.fail(&format!("no `info symbol` answer for {addr:#x}")));
    let head = sym.split(" in section ").next().unwrap();
    let (name, offset) = match head.split_once(" + ") {
        Some((n, o)) => (n, o.parse().unwrap()),
        None => (head, 0),
    };
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Line "))
        .unwrap_or_else(|| t.fail(&format!("no `info line` answer for {addr:#x}")));
    let (n, rest) = line.split_once(" of \"").unwrap();
    let file = rest.split('"').next().unwrap();
    Answer {
        addr,
        name: name.into(),
        offset,
        file: file.into(),
        line: n.parse().unwrap(),
    }
}

/// One comparison point: a section holding `jit symbolize EXPR`, `info symbol EXPR` and
/// `info line *(EXPR)`.
fn probe(g: Gdb, section: &str, expr: &str) -> Gdb {
    g.section(
        section,
        [
            format!("jit symbolize {expr}"),
            format!("info symbol {expr}"),
            format!("info line *({expr})"),
        ],
    )
}

/// `jit symbolize`'s answer in `section` and GDB's for the same address: they must agree.
#[track_caller]
fn agree(t: &Transcript, section: &str) -> Answer {
    let text = t.section(section);
    let ours = text
        .lines()
        .find_map(parse_symbolize)
        .unwrap_or_else(|| t.fail(&format!("section {section}: no `jit symbolize` answer")));
    let gdb = parse_gdb(t, text, ours.addr);
    if ours != gdb {
        t.fail(&format!(
            "section {section}: `jit symbolize` says {ours:?}, GDB says {gdb:?}"
        ));
    }
    ours
}

/// Runs `jit-gdb inspect CORE --exe EXE ARGS`, input `stdin` for `--symbolize`.
fn inspect(core: &Path, exe: &Path, args: &[&str]) -> Output {
    let out = Command::new(jit_gdb())
        .arg("inspect")
        .arg(core)
        .arg("--exe")
        .arg(exe)
        .args(args)
        .output()
        .expect("run jit-gdb inspect");
    assert!(
        out.status.code().is_some(),
        "jit-gdb inspect died: {:?}\n{}",
        out.status,
        text(&out)
    );
    out
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The shared library that defines `__jit_debug_descriptor` (libLLVM), from `info
/// sharedlibrary libLLVM`.
fn libllvm(t: &Transcript, section: &str) -> PathBuf {
    t.section(section)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .find(|w| w.starts_with('/') && w.contains("libLLVM"))
        .map(PathBuf::from)
        .unwrap_or_else(|| t.fail("no libLLVM in `info sharedlibrary`"))
}

#[test]
fn lli_mcjit_entries_agree_with_gdb() {
    if !tools("lli_mcjit_entries_agree_with_gdb") {
        return;
    }
    let dir = TempDir::new("foreign-llvm");
    let ir = write_ir(&dir);
    let core = dir.join("lli.core");
    let mut g = with_scripts(Gdb::program(
        Path::new("lli"),
        &["-jit-kind=mcjit", ir.to_str().unwrap()],
        dir.path(),
    ))
    // Nothing is registered before `run`: the request waits for the registration.
    .section("pending", ["jit break jit_leaf"])
    .cmd("run")
    .section("stop", ["jit symbolize $pc"]);
    for off in LEAF_OFFSETS {
        g = probe(g, &format!("leaf+{off}"), &format!("$pc+{off}"));
    }
    g = g
        .section("list", ["jit list"])
        .section("break_all", ["jit break .*"])
        .cmd("delete")
        // The second call aborts inside jit_leaf.
        .section("abort", ["continue"])
        .cmd(select_frame(0));
    g = probe(g, "leaf_caller", "$pc-1");
    g = g.cmd(select_frame(1));
    g = probe(g, "main_caller", "$pc-1");
    let t = g
        .section("libs", ["info sharedlibrary libLLVM"])
        .section("gcore", [format!("gcore {}", core.display())])
        .run();

    t.assert_contains(
        Some("pending"),
        "no JIT function matches 'jit_leaf' yet; breakpoint pending",
    );
    t.assert_contains(Some("abort"), "SIGABRT");

    // `jit list`: both functions, at real (nonzero) addresses, with their file.
    let rows = list_rows(&t, "list");
    let mut names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    if names != NAMES {
        t.fail(&format!("`jit list` shows {names:?}, expected {NAMES:?}"));
    }
    let row = |name: &str| -> &Row { rows.iter().find(|r| r.name == name).unwrap() };
    for r in &rows {
        if r.start == 0 || r.end <= r.start || r.file != "jitprog.c" || r.kind != "elf" {
            t.fail(&format!("bad `jit list` row {r:?}"));
        }
    }
    let leaf = row("jit_leaf");
    t.assert_not_contains(Some("list"), "warning");

    // The pending request was placed at jit_leaf's first byte, and the program stopped there.
    t.assert_contains(
        Some("stop"),
        &format!("{:#x} jit_leaf+0x0 jitprog.c:4", leaf.start),
    );
    // `jit symbolize` agrees with GDB's own answers across jit_leaf, and in both caller
    // frames at the abort.
    let mut answers = Vec::new();
    for off in LEAF_OFFSETS {
        let a = agree(&t, &format!("leaf+{off}"));
        assert_eq!(a.addr, leaf.start + off);
        answers.push(a);
    }
    let leaf_call = agree(&t, "leaf_caller");
    assert_eq!((leaf_call.name.as_str(), leaf_call.line), ("jit_leaf", 5));
    let main_call = agree(&t, "main_caller");
    assert_eq!((main_call.name.as_str(), main_call.line), ("main", 11));
    answers.extend([leaf_call, main_call]);

    // `jit break .*`: a breakpoint at each function's first byte (jit_leaf's exists), none
    // anywhere else.
    let placed: Vec<(String, u64)> = t
        .section("break_all")
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("jit: breakpoint ")?;
            let (_, rest) = rest.split_once(" on ")?;
            let (name, addr) = rest.split_once(" at ")?;
            Some((
                name.to_string(),
                parse_hex(addr.split_whitespace().next()?)?,
            ))
        })
        .collect();
    if placed != [("main".to_string(), row("main").start)] {
        t.fail(&format!("`jit break .*` placed {placed:?}"));
    }
    t.assert_contains(
        Some("break_all"),
        &format!("jit: jit_leaf at {:#x} already has breakpoint", leaf.start),
    );

    // The inspector on the core of that process: same functions, same answers.
    let exe = libllvm(&t, "libs");
    assert!(core.is_file(), "gcore wrote no core");
    let out = inspect(&core, &exe, &["--list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    for r in &rows {
        let want = format!(
            "{:#018x} {:>6} {} jitprog.c",
            r.start,
            r.end - r.start,
            r.name
        );
        assert!(
            listing.lines().any(|l| l.trim() == want.trim()),
            "no `{want}` in:\n{listing}"
        );
    }
    let addrs: Vec<String> = answers.iter().map(|a| format!("{:#x}", a.addr)).collect();
    let mut args = vec!["--symbolize"];
    args.extend(addrs.iter().map(String::as_str));
    let out = inspect(&core, &exe, &args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let got: Vec<Option<Answer>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(parse_symbolize)
        .collect();
    let want: Vec<Option<Answer>> = answers.iter().cloned().map(Some).collect();
    assert_eq!(got, want, "{}", text(&out));

    // `--elf`: an object addr2line reads with the same names and lines.
    let elf_out = dir.join("jit.elf");
    let out = inspect(&core, &exe, &["--elf", elf_out.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    if !require_tool(
        "addr2line",
        "lli_mcjit_entries_agree_with_gdb (addr2line part)",
    ) {
        return;
    }
    let a2l = Command::new("addr2line")
        .arg("-f")
        .arg("-e")
        .arg(&elf_out)
        .args(&addrs)
        .output()
        .expect("run addr2line");
    let a2l = String::from_utf8_lossy(&a2l.stdout);
    let a2l: Vec<&str> = a2l.lines().collect();
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a2l.get(2 * i), Some(&a.name.as_str()), "{a2l:?}");
        let loc = format!("{}:{}", a.file, a.line);
        assert_eq!(a2l.get(2 * i + 1), Some(&loc.as_str()), "{a2l:?}");
    }
}

/// File offset of `len` bytes at `vaddr` in an x86-64 core file (one PT_LOAD holds them).
fn core_offset(core: &[u8], vaddr: u64, len: u64) -> usize {
    let header = elf::FileHeader64::<object::Endianness>::parse(core).expect("core header");
    let endian = header.endian().unwrap();
    for ph in header.program_headers(endian, core).unwrap() {
        let (va, fsz) = (ph.p_vaddr(endian), ph.p_filesz(endian));
        if ph.p_type(endian) == elf::PT_LOAD && vaddr >= va && vaddr + len <= va + fsz {
            return (ph.p_offset(endian) + vaddr - va) as usize;
        }
    }
    panic!("{len} bytes at {vaddr:#x} are not in the core");
}

/// A copy of the payload's bytes in `core` damaged twice: the first `.debug_info` unit's
/// length runs past its section, and `jit_leaf`'s symbol says size 0.
fn damage_payload(core: &mut [u8], at: usize, size: usize) {
    let payload = core[at..at + size].to_vec();
    let file = object::File::parse(&*payload).expect("the payload is an ELF object");
    let (info_off, info_size) = file
        .section_by_name(".debug_info")
        .and_then(|s| s.file_range())
        .expect("the payload has .debug_info");
    let symtab = file
        .section_by_name(".symtab")
        .and_then(|s| s.file_range())
        .expect("the payload has .symtab");
    let leaf = file
        .symbols()
        .find(|s| s.name() == Ok("jit_leaf"))
        .expect("the payload defines jit_leaf");
    let unit = at + info_off as usize;
    core[unit..unit + 4].copy_from_slice(&(info_size as u32 + 64).to_le_bytes());
    // Elf64_Sym: st_size at byte 16 of each 24-byte symbol.
    let st_size = at + symtab.0 as usize + leaf.index().0 * 24 + 16;
    core[st_size..st_size + 8].copy_from_slice(&0u64.to_le_bytes());
}

#[test]
fn lli_entry_with_damaged_dwarf_is_reported_alone() {
    if !tools("lli_entry_with_damaged_dwarf_is_reported_alone") {
        return;
    }
    let dir = TempDir::new("foreign-llvm-damaged");
    let ir = write_ir(&dir);
    let core = dir.join("lli.core");
    let t = with_scripts(Gdb::program(
        Path::new("lli"),
        &["-jit-kind=mcjit", ir.to_str().unwrap()],
        dir.path(),
    ))
    .cmd("run")
    .section("libs", ["info sharedlibrary libLLVM"])
    .section("gcore", [format!("gcore {}", core.display())])
    .run();
    t.assert_contains(None, "SIGABRT");
    let exe = libllvm(&t, "libs");

    // The entry's payload, as the inspector reports it: `payload ADDR, SIZE bytes`.
    let out = inspect(&core, &exe, &["--list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let (payload, size) = listing
        .lines()
        .find_map(|l| {
            let rest = l.split(": payload ").nth(1)?;
            let (a, rest) = rest.split_once(", ")?;
            Some((parse_hex(a)?, rest.split(' ').next()?.parse::<u64>().ok()?))
        })
        .unwrap_or_else(|| panic!("no payload line in:\n{listing}"));
    let mut bytes = std::fs::read(&core).expect("read the core");
    let at = core_offset(&bytes, payload, size);
    damage_payload(&mut bytes, at, size as usize);
    let bad = dir.join("lli-damaged.core");
    std::fs::write(&bad, &bytes).expect("write the damaged core");
    drop(bytes);

    let lli = Command::new("sh")
        .args(["-c", "command -v lli"])
        .output()
        .expect("find lli");
    let lli = PathBuf::from(String::from_utf8_lossy(&lli.stdout).trim());
    let t = with_scripts(Gdb::core(&lli, &bad, dir.path()))
        .section("list", ["jit list"])
        .section("break_leaf", ["jit break jit_leaf"])
        .section("break_main", ["jit break main"])
        .section("bps", ["info breakpoints"])
        .cmd(mark("end"))
        .run();
    // The entry's problem, and every function still listed: no word of a missing
    // descriptor.
    t.assert_not_contains(Some("list"), "no __jit_debug_descriptor");
    t.assert_contains(Some("list"), "(elf payload): DWARF .debug_info");
    let rows = list_rows(&t, "list");
    let mut names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    if names != NAMES {
        t.fail(&format!("`jit list` shows {names:?}, expected {NAMES:?}"));
    }
    let leaf = rows.iter().find(|r| r.name == "jit_leaf").unwrap();
    let main = rows.iter().find(|r| r.name == "main").unwrap();
    if leaf.start == 0 || leaf.end != leaf.start || main.start == 0 || main.end <= main.start {
        t.fail(&format!("rows {leaf:?} {main:?}"));
    }
    // jit_leaf covers no code now: refused, naming the entry; main is placed.
    t.assert_contains(
        Some("break_leaf"),
        &format!(
            "jit: no breakpoint on jit_leaf (jit entry {:#x}): it covers no code",
            leaf.entry
        ),
    );
    t.assert_contains(Some("break_main"), &format!("on main at {:#x}", main.start));
    let bps = t.section("bps");
    if bps.contains(&format!("{:#018x}", leaf.start)) || bps.matches("breakpoint").count() != 1 {
        t.fail("`info breakpoints` should hold main's breakpoint alone");
    }

    // The inspector: the same problem for that entry, both functions, exit status 3.
    let out = inspect(&bad, &exe, &["--list"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("DWARF .debug_info"), "{all}");
    assert!(
        all.contains(&format!("{:#018x}", main.start)) && all.contains(" main"),
        "{all}"
    );
}

/// Debian's libLLVM, as `lli` links it (from `ldd`).
fn libllvm_of_lli() -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", "ldd \"$(command -v lli)\""])
        .output()
        .expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .filter(|l| l.contains("libLLVM"))
        .find_map(|l| l.split("=>").nth(1)?.split_whitespace().next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("lli links no libLLVM:\n{text}"))
}

/// Compiles [`MIXED_C`] against the static jit-interface library and libLLVM, exporting the
/// executable's symbols (`-rdynamic`: MCJIT resolves `mixed_probe` there).
fn build_mixed_host(dir: &TempDir) -> PathBuf {
    let src = dir.join("mixed.c");
    std::fs::write(&src, MIXED_C).expect("write mixed.c");
    let exe = dir.join("mixed");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args([
            "-g",
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-rdynamic",
            "-I",
        ])
        .arg(root.join("jit-interface/include"))
        .arg(&src)
        .arg(common::testhosts_dir().join("libjit_interface.a"))
        .arg(libllvm_of_lli())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        out.status.success(),
        "compiling the mixed host failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn llvm_and_jit_interface_share_one_list() {
    let test = "llvm_and_jit_interface_share_one_list";
    if !tools(test) || !require_tool("cc", test) {
        return;
    }
    let dir = TempDir::new("foreign-llvm-mixed");
    let exe = build_mixed_host(&dir);
    let ir = dir.join("mixed.ll");
    std::fs::write(&ir, MIXED_IR).expect("write mixed.ll");
    let core = dir.join("mixed.core");
    let mut g = with_scripts(Gdb::program(&exe, &[ir.to_str().unwrap()], dir.path()))
        .cmd("break mixed_probe")
        .section("ours_stop", ["run", "bt"])
        .cmd("up");
    g = probe(g, "ours", "$pc-1");
    g = g
        .section("llvm_stop", ["continue", "bt"])
        .cmd(select_frame_named("llvm_leaf"));
    g = probe(g, "llvm_leaf", "$pc-1");
    g = g.cmd(select_frame_named("llvm_main"));
    g = probe(g, "llvm_main", "$pc-1");
    let t = g
        .section("list", ["jit list"])
        .section("descriptor", ["info symbol &__jit_debug_descriptor"])
        .section("gcore", [format!("gcore {}", core.display())])
        .run();

    // Each JIT's frames named by GDB from its own entry.
    t.assert_contains(Some("ours_stop"), "in ours () at ours.js:2");
    t.assert_contains(Some("llvm_stop"), "in llvm_leaf () at llvm_part.c:4");
    t.assert_contains(Some("llvm_stop"), "in llvm_main () at llvm_part.c:9");
    // One descriptor, the executable's (libLLVM's own is not used).
    let descriptor = t.section("descriptor");
    if !descriptor.contains("in section .data of") || !descriptor.contains(&*exe.to_string_lossy())
    {
        t.fail("__jit_debug_descriptor is not the executable's");
    }
    // `jit list`: both runtimes' functions, from two entries of the one list.
    let rows = list_rows(&t, "list");
    let mut names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    if names != ["llvm_leaf", "llvm_main", "ours"] {
        t.fail(&format!("`jit list` shows {names:?}"));
    }
    let entry = |n: &str| rows.iter().find(|r| r.name == n).unwrap().entry;
    if entry("ours") == entry("llvm_leaf") || entry("llvm_leaf") != entry("llvm_main") {
        t.fail("expected ours in one entry, LLVM's functions in another");
    }
    t.assert_contains(Some("list"), "3 JIT functions (3 registered in 2 entries).");
    // `jit symbolize` agrees with GDB in every JIT frame.
    let answers: Vec<Answer> = ["ours", "llvm_leaf", "llvm_main"]
        .iter()
        .map(|s| agree(&t, s))
        .collect();
    assert_eq!(
        answers
            .iter()
            .map(|a| (a.name.as_str(), a.file.as_str(), a.line))
            .collect::<Vec<_>>(),
        [
            ("ours", "ours.js", 2),
            ("llvm_leaf", "llvm_part.c", 4),
            ("llvm_main", "llvm_part.c", 9)
        ]
    );

    // The inspector on the core, with the executable that holds the descriptor.
    assert!(core.is_file(), "gcore wrote no core");
    let addrs: Vec<String> = answers.iter().map(|a| format!("{:#x}", a.addr)).collect();
    let mut args = vec!["--symbolize"];
    args.extend(addrs.iter().map(String::as_str));
    let out = inspect(&core, &exe, &args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let got: Vec<Option<Answer>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(parse_symbolize)
        .collect();
    let want: Vec<Option<Answer>> = answers.iter().cloned().map(Some).collect();
    assert_eq!(got, want, "{}", text(&out));
}

/// GDB's Python selecting the innermost frame of function `name`.
fn select_frame_named(name: &str) -> String {
    format!(
        "python exec(\"f = gdb.newest_frame()\\nwhile f is not None and f.name() != '{name}':\\n    f = f.older()\\nf.select()\")"
    )
}
