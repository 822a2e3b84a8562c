//! `jit-gdb-testhost`: a JIT in miniature for the end-to-end tests. It compiles real x86-64
//! machine code at run time into mmap'ed memory, registers it through `jit-interface` and
//! runs it, calling back into native code, so that a debugger sees a stack that mixes native
//! and JIT frames (see `testhosts/src/scenario.rs` for the call chain). Not meant for users.

// The launcher's W^X code buffer, shared with its demo JIT (this package is never published,
// so a path outside it is fine); the demo uses the one-call constructor this host does not.
#[allow(dead_code)]
#[path = "../../../src/exec_mem.rs"]
mod exec_mem;
#[path = "../scenario.rs"]
mod scenario;
#[path = "../x86.rs"]
mod x86;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use jit_interface::{Format, JitObject, LineRow, Registration};

use scenario::{FrameDesc, JitFn, Natives, SavedRegs};

const USAGE: &str = "\
usage: jit-gdb-testhost [OPTIONS] MODE

Compiles x86-64 code at run time, registers it with the debugger and runs it:
  main -> run_jit -> jit_entry -> jit_middle(n) -> jit_frameless -> jit_test_callback
       -> jit_second -> jit_test_break_here
(jit_* except jit_test_* are JIT code; `break jit_test_break_here` is the usual stop.)

MODES
  run         register, call through the JIT code once, check the result, exit 0
  wait        register, call through; inside jit_test_break_here print
              `jit-gdb-testhost: ready pid=PID` and sleep until killed (attach, gcore)
  crash       like run, but jit_second dereferences NULL: SIGSEGV inside JIT code
  unregister  register and call through (stop 1), unregister and print
              `jit-gdb-testhost: unregistered`, call jit_test_break_here directly (stop 2),
              then call through the no longer registered JIT code (stop 3), exit 0
  layout      compile and print the layout, register nothing, run nothing

OPTIONS
  --format elf|compact|none   payload format (default elf; none: do not register)
  --objects one|per-function  one entry for all functions (default) or one per function
                              (sets JIT_GDB_ALWAYS_NOTIFY=1: without it, objects registered
                              while no debugger is attached share one entry)
  --source-dir DIR            the directory of the pseudo source `jit_scenario.jit`, the
                              file name registered (default: the current directory)
  --source absent|file|text   absent (default: what runtimes that compile from strings,
                              and cores opened elsewhere, have): the file is not written;
                              file: it is written to --source-dir; text: not written, its
                              text is registered with the code (`set_source`)
  --source-name NAME          register the source under NAME (e.g. a relative `fib.js`)
                              instead of its path in --source-dir
  --no-lines                  register the functions without line rows
  --line-gaps                 jit_middle's spill of n (`sub rsp, 16; mov [rbp-8], rdi`,
                              after its frame setup) has no source line: a gap row
                              (line 0, printed as OFF:0) between lines 6 and 7
  --saved-regs                jit_entry saves r12-r14 and sets them to 0x1000, 0x2000,
                              0x3000; jit_middle saves them, describes the saves of r12 and
                              r13 (not r14) and sets them to 0x18, 0x28, 0x38 (printed:
                              `jit-gdb-testhost: saved-regs entry r12=.. middle r12=..`)
  --base ADDR|any             address of the code buffer (default 0x1a1700000000; `any`:
                              the kernel's choice)
  -h, --help                  this text

Every mode first prints one line per JIT function:
  jit-fn name=NAME start=0xADDR size=N frame=fp|rows insns=OFF,... lines=OFF:LINE,... file=PATH
";

/// Default code address: fixed, so the tests know the addresses before the host starts.
const DEFAULT_BASE: u64 = 0x1a17_0000_0000;
/// `n` passed to `jit_entry`, and `*p` read by `jit_second`.
const ENTRY_N: i64 = 40;
static VALUE: i64 = 100;

static COMPACT: AtomicBool = AtomicBool::new(false);
static WAIT_IN_BREAK: AtomicBool = AtomicBool::new(false);
/// Address of `jit_second`, for the native callback.
static SECOND: AtomicU64 = AtomicU64::new(0);

type JitEntry = extern "C" fn(i64, *const i64) -> i64;

/// The usual breakpoint location: called from JIT code (`jit_second`).
#[no_mangle]
#[inline(never)]
pub extern "C" fn jit_test_break_here(n: i64) -> i64 {
    if WAIT_IN_BREAK.load(Ordering::Relaxed) {
        wait_forever();
    }
    std::hint::black_box(n) * 2
}

#[inline(never)]
fn wait_forever() -> ! {
    println!("jit-gdb-testhost: ready pid={}", std::process::id());
    let _ = std::io::stdout().flush();
    loop {
        // SAFETY: pause(2) has no preconditions; it returns only when a signal is handled.
        unsafe { libc::pause() };
    }
}

/// Native code called from JIT code (`jit_frameless`), calling JIT code again (`jit_second`).
#[no_mangle]
#[inline(never)]
pub extern "C" fn jit_test_callback(t: i64, p: *const i64) -> i64 {
    let addr = SECOND.load(Ordering::Acquire);
    // SAFETY: SECOND holds the address of `jit_second`, compiled for exactly this signature,
    // in a sealed (read-execute) code buffer that lives until the process exits.
    let second: JitEntry = unsafe { std::mem::transmute::<usize, JitEntry>(addr as usize) };
    std::hint::black_box(second(t + 1, p))
}

/// Native caller of the JIT code.
#[no_mangle]
#[inline(never)]
pub extern "C" fn run_jit(entry: u64, n: i64, p: *const i64) -> i64 {
    // SAFETY: `entry` is the address of `jit_entry`, compiled for this signature, in a sealed
    // code buffer that lives until the process exits.
    let f: JitEntry = unsafe { std::mem::transmute::<usize, JitEntry>(entry as usize) };
    std::hint::black_box(f(n, p))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Run,
    Wait,
    Crash,
    Unregister,
    Layout,
}

struct Options {
    mode: Mode,
    format: Option<Format>,
    per_function: bool,
    source_dir: PathBuf,
    source: SourceMode,
    source_name: Option<String>,
    no_lines: bool,
    line_gaps: bool,
    saved_regs: bool,
    base: Option<u64>,
}

/// Where the pseudo source is: nowhere, on disk, or registered with the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SourceMode {
    Absent,
    File,
    Text,
}

fn parse_args() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let mut mode = None;
    let mut o = Options {
        mode: Mode::Run,
        format: Some(Format::Elf),
        per_function: false,
        source_dir: PathBuf::from("."),
        source: SourceMode::Absent,
        source_name: None,
        no_lines: false,
        line_gaps: false,
        saved_regs: false,
        base: Some(DEFAULT_BASE),
    };
    while let Some(a) = args.next() {
        let mut value = |what: &str| args.next().ok_or(format!("{a} needs {what}"));
        match a.as_str() {
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--format" => {
                o.format = match value("elf, compact or none")?.as_str() {
                    "elf" => Some(Format::Elf),
                    "compact" => Some(Format::Compact),
                    "none" => None,
                    v => return Err(format!("unknown format `{v}`: use elf, compact or none")),
                }
            }
            "--objects" => {
                o.per_function = match value("one or per-function")?.as_str() {
                    "one" => false,
                    "per-function" => true,
                    v => return Err(format!("--objects: `{v}` is neither one nor per-function")),
                }
            }
            "--source-dir" => o.source_dir = PathBuf::from(value("a directory")?),
            "--source-name" => o.source_name = Some(value("a file name")?),
            "--no-lines" => o.no_lines = true,
            "--line-gaps" => o.line_gaps = true,
            "--saved-regs" => o.saved_regs = true,
            "--source" => {
                o.source = match value("absent, file or text")?.as_str() {
                    "absent" => SourceMode::Absent,
                    "file" => SourceMode::File,
                    "text" => SourceMode::Text,
                    v => return Err(format!("--source: `{v}` is not absent, file or text")),
                }
            }
            "--base" => {
                let v = value("an address or `any`")?;
                o.base = if v == "any" {
                    None
                } else {
                    let digits = v.strip_prefix("0x").unwrap_or(&v);
                    Some(
                        u64::from_str_radix(digits, 16)
                            .map_err(|e| format!("--base `{v}` is not a hex address: {e}"))?,
                    )
                }
            }
            m if !m.starts_with('-') && mode.is_none() => {
                mode = Some(match m {
                    "run" => Mode::Run,
                    "wait" => Mode::Wait,
                    "crash" => Mode::Crash,
                    "unregister" => Mode::Unregister,
                    "layout" => Mode::Layout,
                    _ => return Err(format!("unknown mode `{m}`")),
                })
            }
            _ => return Err(format!("unexpected argument `{a}`")),
        }
    }
    o.mode = mode.ok_or("no MODE given")?;
    Ok(o)
}

/// Adds `f` (placed in the buffer at `base`) to `obj`.
fn describe(
    obj: &mut JitObject,
    f: &JitFn,
    base: u64,
    file: Option<&str>,
) -> jit_interface::Result<()> {
    let id = obj.add_function(f.name, base + u64::from(f.offset), f.code.len() as u64)?;
    if let Some(file) = file {
        obj.set_lines(id, file, &f.lines)?;
    }
    match &f.frame {
        FrameDesc::FramePointer {
            push_end,
            setup_end,
            epilogues,
        } => {
            obj.set_frame_pointer(id, *push_end, *setup_end)?;
            for &(restore_end, ret_end) in epilogues {
                obj.add_epilogue(id, restore_end, ret_end)?;
            }
        }
        FrameDesc::Rows(rows) => obj.set_unwind(id, rows)?,
    }
    for r in &f.registers {
        obj.add_register_rule(id, r.offset, r.reg, r.rule)?;
    }
    for v in f
        .variables
        .iter()
        .filter(|_| !COMPACT.load(Ordering::Relaxed))
    {
        obj.add_variable(id, v.clone())?;
    }
    Ok(())
}

/// `--line-gaps`: jit_middle's third and fourth instructions (`sub rsp, 16; mov [rbp-8],
/// rdi`: the spill after its frame setup, still in line 6's row) get no source line, as a
/// compiler's glue would; line 7's row follows them.
fn add_line_gap(fns: &mut [JitFn]) {
    let f = fns
        .iter_mut()
        .find(|f| f.name == "jit_middle")
        .expect("jit_middle");
    let at = f.insns[2];
    let k = f.lines.partition_point(|r| r.offset < at);
    assert!(
        f.lines.get(k).is_some_and(|r| r.offset > at) && k > 0,
        "the spill is inside line 6's row"
    );
    f.lines.insert(k, LineRow::gap(at));
}

fn join<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|x| x.to_string()).collect::<Vec<_>>().join(",")
}

fn real_main() -> Result<(), String> {
    let o = parse_args().map_err(|e| format!("{e}\n\n{USAGE}"))?;
    if o.per_function {
        // Still single-threaded: nothing reads the environment concurrently.
        std::env::set_var("JIT_GDB_ALWAYS_NOTIFY", "1");
    }

    std::fs::create_dir_all(&o.source_dir)
        .map_err(|e| format!("cannot create {}: {e}", o.source_dir.display()))?;
    let dir = o
        .source_dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", o.source_dir.display()))?;
    let source = dir.join(scenario::SOURCE_NAME);
    if o.source == SourceMode::File {
        std::fs::write(&source, scenario::SOURCE)
            .map_err(|e| format!("cannot write {}: {e}", source.display()))?;
    }
    let file = match &o.source_name {
        Some(name) => name.clone(),
        None => source
            .to_str()
            .ok_or("source path is not UTF-8")?
            .to_owned(),
    };

    let mut buf = exec_mem::CodeBuffer::map(o.base, 4096)
        .map_err(|e| format!("cannot map the code buffer: {e}"))?;
    let base = buf.addr();
    let natives = Natives {
        callback: jit_test_callback as *const () as u64,
        break_here: jit_test_break_here as *const () as u64,
    };
    let regs = if o.saved_regs {
        SavedRegs::On
    } else {
        SavedRegs::Off
    };
    let mut fns = scenario::compile(base, natives, regs);
    if o.line_gaps {
        add_line_gap(&mut fns);
    }
    for f in &fns {
        buf.write(f.offset as usize, &f.code);
        let frame = match f.frame {
            FrameDesc::FramePointer { .. } => "fp",
            FrameDesc::Rows(_) => "rows",
        };
        println!(
            "jit-fn name={} start={:#x} size={} frame={frame} insns={} lines={} file={file}",
            f.name,
            base + u64::from(f.offset),
            f.code.len(),
            join(f.insns.iter()),
            join(f.lines.iter().map(|r| format!("{}:{}", r.offset, r.line))),
        );
    }
    if o.saved_regs {
        println!(
            "jit-gdb-testhost: saved-regs entry r12={:#x} r13={:#x} r14={:#x} middle r12={:#x} r13={:#x} r14={:#x}",
            scenario::ENTRY_R12,
            scenario::ENTRY_R13,
            scenario::ENTRY_R14,
            scenario::MIDDLE_R12,
            scenario::MIDDLE_R13,
            scenario::MIDDLE_R14
        );
    }
    buf.seal()
        .map_err(|e| format!("cannot make the code executable: {e}"))?;
    if o.mode == Mode::Layout {
        return Ok(());
    }
    let entry = base + u64::from(fns[0].offset);
    let second = fns
        .iter()
        .find(|f| f.name == "jit_second")
        .expect("jit_second");
    SECOND.store(base + u64::from(second.offset), Ordering::Release);

    COMPACT.store(o.format == Some(Format::Compact), Ordering::Relaxed);
    let mut registrations: Vec<Registration> = Vec::new();
    if let Some(format) = o.format {
        let groups: Vec<Vec<&JitFn>> = if o.per_function {
            fns.iter().map(|f| vec![f]).collect()
        } else {
            vec![fns.iter().collect()]
        };
        for group in &groups {
            let mut obj = JitObject::new();
            if o.source == SourceMode::Text {
                obj.set_source(&file, scenario::SOURCE)
                    .map_err(|e| format!("registering the source text: {e}"))?;
            }
            for f in group {
                describe(&mut obj, f, base, (!o.no_lines).then_some(file.as_str()))
                    .map_err(|e| format!("describing {}: {e}", f.name))?;
            }
            let r = jit_interface::register(&obj, format)
                .map_err(|e| format!("registering as {}: {e}", format.name()))?;
            registrations.push(r);
        }
        println!(
            "jit-gdb-testhost: registered {} functions as {} in {} object(s)",
            fns.len(),
            format.name(),
            registrations.len()
        );
    }

    let expected = scenario::expected_result(ENTRY_N, VALUE);
    let check = |got: i64| {
        println!("jit-gdb-testhost: result={got} expected={expected}");
        if got == expected {
            Ok(())
        } else {
            Err("the JIT code computed a wrong result".to_string())
        }
    };
    match o.mode {
        Mode::Layout => unreachable!(),
        Mode::Run => check(run_jit(entry, ENTRY_N, &VALUE))?,
        Mode::Wait => {
            WAIT_IN_BREAK.store(true, Ordering::Relaxed);
            run_jit(entry, ENTRY_N, &VALUE);
        }
        Mode::Crash => {
            run_jit(entry, ENTRY_N, std::ptr::null());
            return Err("the JIT code did not crash".into());
        }
        Mode::Unregister => {
            check(run_jit(entry, ENTRY_N, &VALUE))?;
            drop(std::mem::take(&mut registrations));
            println!("jit-gdb-testhost: unregistered");
            jit_test_break_here(-1);
            check(run_jit(entry, ENTRY_N, &VALUE))?;
        }
    }
    drop(registrations);
    Ok(())
}

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jit-gdb-testhost: {e}");
            ExitCode::FAILURE
        }
    }
}
