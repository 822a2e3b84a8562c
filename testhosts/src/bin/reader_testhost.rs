//! `reader_testhost`: extra JIT scenarios for the GDB reader's end-to-end tests
//! (`tests/reader_*.rs`), beside the main test host. Not meant for users.
//!
//! Each mode compiles a few tiny x86-64 functions at run time (bytes written by hand),
//! registers them and calls them from native code, stopping in the native
//! `reader_host_break` (break there) unless said otherwise:
//!
//! - `clobber`: `jit_clobber_caller -> jit_clobber`; `jit_clobber` sets up its frame
//!   pointer, then mangles rsp (`xor $-1, %rsp`, like GDB's own reader test) and executes
//!   `int3` (SIGTRAP: the debugger stops with rsp garbage), then restores rsp and returns.
//! - `reuse`: `jit_old` (frame pointer) is registered and run (stop 1), unregistered, and
//!   its code address reused for `jit_new` (frameless, other size and rows), registered and
//!   run (stop 2).
//! - `mixed`: `jit_elf_outer` registered as ELF calls `jit_compact_inner` registered as
//!   compact records (stop).
//! - `corrupt`: `jit_intact_outer -> jit_intact_inner` registered intact, plus six damaged
//!   compact payloads (a flipped byte, truncations, an inflated count) linked into GDB's list
//!   by hand (stop).
//! - `endcall`: `jit_ends_with_call` ends with a call and `jit_next` follows it directly;
//!   `jit_next` is run (stop 1, break on its address to stop at its first instruction), then
//!   `jit_ends_with_call` (stop 2 in the native break: its return address is jit_next's
//!   first byte). The break then returns into jit_next with a wrong stack: kill there.
//! - `blocks`: `jit_with_blocks` with nested blocks `jit_inlined` (offsets 4..16) and, inside
//!   it, `jit_inner_scope` (14..16, the call) (stop).
//! - `many`: `READER_HOST_MANY` (default 100,000) functions with lines in one entry, at
//!   addresses without code, plus `jit_intact_inner` (stop): for timing GDB by hand.
//! - `tombstone`: one compact payload (linked by hand) of two objects, as a registry leaves
//!   a batch after unregistering an object in place: `jit_tomb_outer -> jit_tomb_inner`,
//!   whose live slot holds its key, and `jit_ghost`, whose slot is cleared; the ghost's
//!   address is in `READER_HOST_GHOST` (stop).
//!
//! - `epilogues [compact|elf]`: `jit_epi_outer` calls `jit_epi_pop`, `jit_epi_leave` and
//!   `jit_epi_mov`, frame-pointer functions whose epilogues are `add rsp, 16; pop rbp; ret`,
//!   `leave; ret` and `mov rsp, rbp; pop rbp; ret`; its own is `pop rbp; ret`, right after
//!   its last call. All four are registered (compact records by default, or ELF) with their
//!   prologue described and their epilogues not, as JITs that describe only the prologue do
//!   (no stop in native code: break on the functions' addresses).
//!
//! - `late` (run outside any debugger, then attached to): `jit_quiet_inner` and
//!   `jit_quiet_gone` are registered while no debugger is attached (appended in place to one
//!   entry) and `jit_quiet_gone` unregistered (its record stays, its live slot cleared). The
//!   host prints the entry count and `ready pid=PID`, then waits (up to 120 s) until a
//!   debugger plants its breakpoint on the hook, registers `jit_late_outer` (which calls
//!   `jit_quiet_inner`) and runs it (stop). A trailing `wait` argument is accepted (the test
//!   harness's waiting-host protocol).
//!
//! - `deferred`: deferred mode on (`max_pending` 1000), `jit_deferred_outer ->
//!   jit_deferred_inner` registered (the first opens a batch entry, announced; the second is
//!   appended to it, pending: listed, not announced to the debugger), then run (stop).
//!   Under plain GDB the pending frame is unnamed until something announces it; our GDB
//!   scripts do at the stop. `READER_HOST_MAX_PENDING=1` makes the registry announce as
//!   soon as one registration is pending.
//!   `READER_HOST_DEFERRED_FORMAT=elf` registers both as ELF: each gets an entry of its own,
//!   listed but not announced, so neither is known to plain GDB before a flush.
//!
//! - `gaps p-first|q-first`: two compact entries interleaved in one file's gaps, as a runtime
//!   that reuses freed slots leaves them: P holds `jit_gap_outer` (+0x000) and
//!   `jit_gap_after` (+0x100), Q `jit_gap_inner` (+0x080) and `jit_gap_far` (+0x400), all
//!   small functions with free bytes after them. Registered P then Q (`p-first`) or Q then
//!   P, then `jit_gap_outer -> jit_gap_inner` runs (stop). The other two are not run.
//!
//! Every mode first prints `jit-fn ...` lines in the main host's format (see
//! `tests/common`), and writes the pseudo source `reader_host.jit` to `--source-dir`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use jit_interface::format::{decode_all, encode, DecodeError, HEADER_LEN};
use jit_interface::{
    CfaBase, Format, FunctionId, JitObject, LineRow, LiveCheck, Registration, UnwindRow,
};

const USAGE: &str = "usage: reader_testhost [--source-dir DIR] \
     clobber|reuse|mixed|corrupt|endcall|blocks|many|late|deferred|tombstone [wait] \
     | epilogues [compact|elf] | gaps p-first|q-first";

/// Address of the unregistered function of the `tombstone` mode, for the debugger.
#[no_mangle]
pub static READER_HOST_GHOST: AtomicU64 = AtomicU64::new(0);

/// Fixed code address (away from the main host's), so runs are reproducible.
const BASE: u64 = 0x1b17_0000_0000;
const CODE_LEN: usize = 4096;

const SOURCE_NAME: &str = "reader_host.jit";
const SOURCE: &str = "\
// reader_testhost pseudo source
function frame_pointer_function() {
  call();
  return;
}
function frameless_function() {
  call();
  return;
}
function clobbering_function() {
  rsp = ~rsp;
  trap();
  rsp = rbp;
}
function epilogue_callee(n) {
  local[2];
  local[0] = n;
  return n;
}
function epilogue_caller(n) {
  epilogue_callee(n);
  epilogue_callee(n);
  epilogue_callee(n);
  return;
}
";

/// Where native code stops; JIT code calls it last.
#[no_mangle]
#[inline(never)]
pub extern "C" fn reader_host_break(n: i64) -> i64 {
    std::hint::black_box(n) + 1
}

/// Native caller of JIT code.
#[no_mangle]
#[inline(never)]
pub extern "C" fn reader_host_run(entry: u64, n: i64) -> i64 {
    // SAFETY: `entry` is the address of a JIT function compiled for this signature, in a
    // mapped read-execute buffer.
    let f: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(entry as usize) };
    std::hint::black_box(f(n))
}

/// One hand-assembled function.
struct Code {
    name: &'static str,
    bytes: Vec<u8>,
    insns: Vec<u32>,
    lines: Vec<LineRow>,
    /// `None`: frame pointer (push_end 1, setup_end 4, one epilogue at `epilogue`).
    rows: Option<Vec<UnwindRow>>,
    epilogue: (u32, u32),
}

impl Code {
    fn new(name: &'static str) -> Code {
        Code {
            name,
            bytes: vec![],
            insns: vec![],
            lines: vec![],
            rows: None,
            epilogue: (0, 0),
        }
    }
    fn off(&self) -> u32 {
        self.bytes.len() as u32
    }
    fn insn(&mut self, b: &[u8]) -> &mut Self {
        self.insns.push(self.off());
        self.bytes.extend_from_slice(b);
        self
    }
    fn line(&mut self, line: u32) -> &mut Self {
        self.lines.push(LineRow {
            offset: self.off(),
            line,
        });
        self
    }
    fn call(&mut self, target: u64) -> &mut Self {
        let mut mov = vec![0x48, 0xb8]; // mov rax, imm64
        mov.extend_from_slice(&target.to_le_bytes());
        self.insn(&mov).insn(&[0xff, 0xd0]) // call rax
    }
}

const PUSH_RBP: &[u8] = &[0x55];
const MOV_RBP_RSP: &[u8] = &[0x48, 0x89, 0xe5];
const MOV_RSP_RBP: &[u8] = &[0x48, 0x89, 0xec];
const POP_RBP: &[u8] = &[0x5d];
const RET: &[u8] = &[0xc3];

/// `push rbp; mov rbp, rsp; call target; pop rbp; ret` (lines 2-4).
fn frame_pointer_fn(name: &'static str, target: u64) -> Code {
    let mut c = Code::new(name);
    c.line(2).insn(PUSH_RBP).insn(MOV_RBP_RSP);
    c.line(3).call(target);
    c.line(4).insn(POP_RBP);
    let restore_end = c.off();
    c.insn(RET);
    c.epilogue = (restore_end, c.off());
    c
}

/// `sub rsp, 8; call target; add rsp, 8; ret` with rsp-based rows (lines 6-8).
fn frameless_fn(name: &'static str, target: u64) -> Code {
    let mut c = Code::new(name);
    c.line(6).insn(&[0x48, 0x83, 0xec, 0x08]);
    let body = c.off();
    c.line(7).call(target);
    c.line(8).insn(&[0x48, 0x83, 0xc4, 0x08]);
    let popped = c.off();
    c.insn(RET);
    let row = |offset, cfa_offset| UnwindRow {
        offset,
        cfa_base: CfaBase::Sp,
        cfa_offset,
        fp_offset: 0,
    };
    c.rows = Some(vec![row(0, 8), row(body, 16), row(popped, 8)]);
    c
}

/// Frame pointer, then `xor $-1, %rsp; int3; mov rsp, rbp`, epilogue (lines 10-13).
fn clobber_fn(name: &'static str) -> Code {
    let mut c = Code::new(name);
    c.line(10).insn(PUSH_RBP).insn(MOV_RBP_RSP);
    c.line(11).insn(&[0x48, 0x83, 0xf4, 0xff]);
    c.line(12).insn(&[0xcc]);
    c.line(13).insn(MOV_RSP_RBP).insn(POP_RBP);
    let restore_end = c.off();
    c.insn(RET);
    c.epilogue = (restore_end, c.off());
    c
}

const SUB_RSP_16: &[u8] = &[0x48, 0x83, 0xec, 0x10];
const ADD_RSP_16: &[u8] = &[0x48, 0x83, 0xc4, 0x10];

/// Frame pointer and 16 bytes of locals, `mov [rsp], rdi; mov rax, rdi`, then the epilogue
/// `form` (`pop`: `add rsp, 16; pop rbp; ret`, `leave`: `leave; ret`, `mov`: `mov rsp, rbp;
/// pop rbp; ret`) (lines 16-18).
fn epilogue_fn(name: &'static str, form: &str) -> Code {
    let mut c = Code::new(name);
    c.line(16).insn(PUSH_RBP).insn(MOV_RBP_RSP).insn(SUB_RSP_16);
    c.line(17)
        .insn(&[0x48, 0x89, 0x3c, 0x24])
        .insn(&[0x48, 0x89, 0xf8]);
    c.line(18);
    match form {
        "pop" => c.insn(ADD_RSP_16).insn(POP_RBP),
        "leave" => c.insn(&[0xc9]),
        _ => c.insn(MOV_RSP_RBP).insn(POP_RBP),
    };
    c.insn(RET);
    c
}

/// `push rbp; mov rbp, rsp`, a call to each of `targets` (`mov rdi, 1` before each), then
/// `pop rbp; ret` right after the last call (lines 20-24).
fn epilogue_caller_fn(name: &'static str, targets: &[u64]) -> Code {
    let mut c = Code::new(name);
    c.line(20).insn(PUSH_RBP).insn(MOV_RBP_RSP);
    for (i, &t) in targets.iter().enumerate() {
        c.line(21 + i as u32)
            .insn(&[0x48, 0xc7, 0xc7, 0x01, 0x00, 0x00, 0x00])
            .call(t);
    }
    c.line(24).insn(POP_RBP).insn(RET);
    c
}

/// The read-execute code buffer, rewritable (for the reuse scenario).
struct Buffer {
    ptr: *mut u8,
}

impl Buffer {
    fn map() -> Result<Buffer, String> {
        // SAFETY: a new anonymous private mapping; MAP_FIXED_NOREPLACE never replaces one.
        let p = unsafe {
            libc::mmap(
                BASE as *mut libc::c_void,
                CODE_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED || p as u64 != BASE {
            return Err(format!(
                "cannot map code at {BASE:#x}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Buffer { ptr: p.cast() })
    }

    fn protect(&self, prot: libc::c_int) -> Result<(), String> {
        // SAFETY: our own mapping, whole length.
        if unsafe { libc::mprotect(self.ptr.cast(), CODE_LEN, prot) } != 0 {
            return Err(format!("mprotect: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Writes functions back to back (16-byte aligned) and makes the buffer executable;
    /// returns their start addresses.
    fn place(&self, fns: &[&Code]) -> Result<Vec<u64>, String> {
        self.protect(libc::PROT_READ | libc::PROT_WRITE)?;
        // Fill with int3 so that stale code can never run by accident.
        // SAFETY: inside our read-write mapping.
        unsafe { std::ptr::write_bytes(self.ptr, 0xcc, CODE_LEN) };
        let mut at = 0usize;
        let mut starts = vec![];
        for f in fns {
            assert!(at + f.bytes.len() <= CODE_LEN);
            // SAFETY: inside our read-write mapping (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(f.bytes.as_ptr(), self.ptr.add(at), f.bytes.len())
            };
            starts.push(BASE + at as u64);
            at = (at + f.bytes.len() + 15) & !15;
        }
        self.protect(libc::PROT_READ | libc::PROT_EXEC)?;
        Ok(starts)
    }
}

impl Buffer {
    /// Writes functions at the given offsets (the rest stays int3) and makes the buffer
    /// executable; returns their start addresses.
    fn place_at(&self, fns: &[(&Code, usize)]) -> Result<Vec<u64>, String> {
        self.protect(libc::PROT_READ | libc::PROT_WRITE)?;
        // SAFETY: inside our read-write mapping.
        unsafe { std::ptr::write_bytes(self.ptr, 0xcc, CODE_LEN) };
        for (f, at) in fns {
            assert!(at + f.bytes.len() <= CODE_LEN);
            // SAFETY: inside our read-write mapping (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(f.bytes.as_ptr(), self.ptr.add(*at), f.bytes.len())
            };
        }
        self.protect(libc::PROT_READ | libc::PROT_EXEC)?;
        Ok(fns.iter().map(|(_, at)| BASE + *at as u64).collect())
    }
}

/// Adds `c` at `start` to `obj` and prints its `jit-fn` line.
fn describe_into(
    obj: &mut JitObject,
    c: &Code,
    start: u64,
    file: &str,
) -> Result<FunctionId, String> {
    describe(obj, c, start, file, true)
}

/// Like [`describe_into`] for a frame-pointer function without epilogue.
fn describe_no_epilogue(
    obj: &mut JitObject,
    c: &Code,
    start: u64,
    file: &str,
) -> Result<FunctionId, String> {
    describe(obj, c, start, file, false)
}

fn describe(
    obj: &mut JitObject,
    c: &Code,
    start: u64,
    file: &str,
    epilogue: bool,
) -> Result<FunctionId, String> {
    let err = |e: jit_interface::Error| format!("{}: {e}", c.name);
    let id = obj
        .add_function(c.name, start, c.bytes.len() as u64)
        .map_err(err)?;
    obj.set_lines(id, file, &c.lines).map_err(err)?;
    match &c.rows {
        Some(rows) => obj.set_unwind(id, rows).map_err(err)?,
        None => {
            obj.set_frame_pointer(id, 1, 4).map_err(err)?;
            if epilogue {
                obj.add_epilogue(id, c.epilogue.0, c.epilogue.1)
                    .map_err(err)?;
            }
        }
    }
    let join = |v: Vec<String>| v.join(",");
    println!(
        "jit-fn name={} start={start:#x} size={} frame={} insns={} lines={} file={file}",
        c.name,
        c.bytes.len(),
        if c.rows.is_some() { "rows" } else { "fp" },
        join(c.insns.iter().map(|i| i.to_string()).collect()),
        join(
            c.lines
                .iter()
                .map(|r| format!("{}:{}", r.offset, r.line))
                .collect()
        ),
    );
    Ok(id)
}

fn register(fns: &[(&Code, u64)], file: &str, format: Format) -> Result<Registration, String> {
    let mut obj = JitObject::new();
    for (c, start) in fns {
        describe_into(&mut obj, c, *start, file)?;
    }
    jit_interface::register(&obj, format).map_err(|e| e.to_string())
}

/// GDB's `struct jit_code_entry`.
#[repr(C)]
struct RawEntry {
    next: *mut RawEntry,
    prev: *mut RawEntry,
    addr: *const u8,
    size: u64,
}

/// GDB's `struct jit_descriptor`.
#[repr(C)]
struct RawDescriptor {
    version: u32,
    action: u32,
    relevant: *mut RawEntry,
    first: *mut RawEntry,
}

extern "C" {
    fn __jit_debug_register_code();
}

/// Links a payload into GDB's list by hand (the library only registers what it encoded
/// itself); entry and payload live until the process exits. Single-threaded use only.
fn register_raw(payload: Vec<u8>) {
    let payload: &'static [u8] = Box::leak(payload.into_boxed_slice());
    let entry: &'static mut RawEntry = Box::leak(Box::new(RawEntry {
        next: std::ptr::null_mut(),
        prev: std::ptr::null_mut(),
        addr: payload.as_ptr(),
        size: payload.len() as u64,
    }));
    let d = jit_interface::descriptor::descriptor_address() as *mut RawDescriptor;
    // SAFETY: `d` is the process's descriptor; this host has one thread and registers
    // nothing concurrently; the entry is leaked, so it outlives its registration.
    unsafe {
        entry.next = (*d).first;
        if !entry.next.is_null() {
            (*entry.next).prev = entry;
        }
        (*d).first = entry;
        (*d).relevant = entry;
        (*d).action = 1;
        __jit_debug_register_code();
        (*d).action = 0;
        (*d).relevant = std::ptr::null_mut();
    }
}

/// Damaged variants of a valid payload; each one the decoder refuses, with its reason.
fn corruptions(good: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = vec![];
    // A flipped byte: the first one past the header whose flip the decoder notices.
    for i in (good.len() / 2..good.len()).chain(8..good.len() / 2) {
        let mut b = good.to_vec();
        b[i] ^= 0xff;
        if matches!(decode_all(&b), Err(DecodeError::Invalid(_))) {
            out.push(("flipped", b));
            break;
        }
    }
    for cut in [good.len() - 1, good.len() / 2, 9, 12] {
        out.push(("truncated", good[..cut].to_vec()));
    }
    // Inflated count: object 0's string-table count (one LEB128 byte after the object flags
    // at byte 8 and the 16-byte live check, if any) set to 127.
    let mut b = good.to_vec();
    let at = if b[8] & 1 != 0 { 25 } else { 9 };
    b[at] = 0x7f;
    out.push(("inflated", b));
    out
}

fn stop(phase: &str, entry: u64) -> i64 {
    println!("reader-testhost: {phase}");
    let _ = std::io::stdout().flush();
    reader_host_run(entry, 1)
}

fn real_main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mut dir = PathBuf::from(".");
    let mut mode = None;
    let mut format = Format::Compact;
    let mut q_first = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--source-dir" => {
                dir = PathBuf::from(args.next().ok_or("--source-dir needs a directory")?)
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            m if mode.is_none() && !m.starts_with('-') => mode = Some(m.to_string()),
            "wait" => {}
            "p-first" | "q-first" if mode.as_deref() == Some("gaps") => {
                q_first = a == "q-first";
            }
            "compact" | "elf" if mode.as_deref() == Some("epilogues") => {
                format = if a == "elf" {
                    Format::Elf
                } else {
                    Format::Compact
                }
            }
            _ => return Err(format!("unexpected argument `{a}`\n{USAGE}")),
        }
    }
    let mode = mode.ok_or(USAGE)?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let source = dir
        .canonicalize()
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .join(SOURCE_NAME);
    std::fs::write(&source, SOURCE).map_err(|e| format!("{}: {e}", source.display()))?;
    let file = source
        .to_str()
        .ok_or("source path is not UTF-8")?
        .to_owned();
    let brk = reader_host_break as *const () as u64;
    let buf = Buffer::map()?;

    match mode.as_str() {
        "clobber" => {
            let inner = clobber_fn("jit_clobber");
            // The caller's address is known once the callee is placed: place twice.
            let probe = frame_pointer_fn("jit_clobber_caller", 0);
            let starts = buf.place(&[&inner, &probe])?;
            let outer = frame_pointer_fn("jit_clobber_caller", starts[0]);
            let starts = buf.place(&[&inner, &outer])?;
            let _r = register(
                &[(&inner, starts[0]), (&outer, starts[1])],
                &file,
                Format::Compact,
            )?;
            stop("clobber", starts[1]);
        }
        "late" => {
            let inner = frameless_fn("jit_quiet_inner", brk);
            let gone = frameless_fn("jit_quiet_gone", brk);
            let probe = frame_pointer_fn("jit_late_outer", 0);
            let starts = buf.place(&[&inner, &gone, &probe])?;
            let outer = frame_pointer_fn("jit_late_outer", starts[0]);
            let starts = buf.place(&[&inner, &gone, &outer])?;
            if jit_interface::descriptor::debugger_attached() {
                return Err("`late` must start outside any debugger".into());
            }
            let _a = register(&[(&inner, starts[0])], &file, Format::Compact)?;
            let g = register(&[(&gone, starts[1])], &file, Format::Compact)?;
            drop(g);
            // Described (its jit-fn line printed) now, registered once a debugger is seen.
            let mut late = JitObject::new();
            describe_into(&mut late, &outer, starts[2], &file)?;
            println!(
                "reader-testhost: quiet entries={} gone={:#x}",
                jit_interface::descriptor::entry_count(),
                starts[1]
            );
            println!("ready pid={}", std::process::id());
            let _ = std::io::stdout().flush();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
            while !jit_interface::descriptor::debugger_attached() {
                if std::time::Instant::now() > deadline {
                    return Err("no debugger attached within 120 s".into());
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            // stdout was the harness's ready pipe, closed by now: report on stderr.
            eprintln!("reader-testhost: debugger seen");
            let _o = jit_interface::register(&late, Format::Compact).map_err(|e| e.to_string())?;
            reader_host_run(starts[2], 1);
        }
        "deferred" => {
            // READER_HOST_MAX_PENDING: announce every N registrations (default 1000: never
            // within this mode).
            let max_pending = std::env::var("READER_HOST_MAX_PENDING")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1000);
            // READER_HOST_MAX_DELAY_MS: announce that long after the oldest pending one;
            // the host then registers nothing more and waits (up to 10 s) until nothing is
            // pending, as an idle runtime would, before it runs the code.
            let max_delay = std::env::var("READER_HOST_MAX_DELAY_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .map(std::time::Duration::from_millis);
            jit_interface::set_deferred(Some(jit_interface::Deferral {
                max_pending,
                max_delay,
            }));
            let inner = frameless_fn("jit_deferred_inner", brk);
            let probe = frame_pointer_fn("jit_deferred_outer", 0);
            let starts = buf.place(&[&inner, &probe])?;
            let outer = frame_pointer_fn("jit_deferred_outer", starts[0]);
            let starts = buf.place(&[&inner, &outer])?;
            let format = match std::env::var("READER_HOST_DEFERRED_FORMAT").as_deref() {
                Ok("elf") => Format::Elf,
                Err(_) | Ok("compact") => Format::Compact,
                Ok(v) => {
                    return Err(format!(
                        "READER_HOST_DEFERRED_FORMAT: {v}: not elf or compact"
                    ))
                }
            };
            let _i = register(&[(&inner, starts[0])], &file, format)?;
            let _o = register(&[(&outer, starts[1])], &file, format)?;
            if max_delay.is_some() {
                let pending = jit_interface::pending;
                let t0 = std::time::Instant::now();
                while pending() > 0 && t0.elapsed() < std::time::Duration::from_secs(10) {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                eprintln!(
                    "reader-testhost: {} pending after {:?}",
                    pending(),
                    t0.elapsed()
                );
            }
            stop("deferred", starts[1]);
        }
        "epilogues" => {
            let callees = [
                epilogue_fn("jit_epi_pop", "pop"),
                epilogue_fn("jit_epi_leave", "leave"),
                epilogue_fn("jit_epi_mov", "mov"),
            ];
            // The caller's calls are the same size whatever their targets: place twice.
            let probe = epilogue_caller_fn("jit_epi_outer", &[0; 3]);
            let starts = buf.place(&[&callees[0], &callees[1], &callees[2], &probe])?;
            let outer = epilogue_caller_fn("jit_epi_outer", &starts[..3]);
            let starts = buf.place(&[&callees[0], &callees[1], &callees[2], &outer])?;
            let mut obj = JitObject::new();
            for (c, &start) in callees.iter().chain([&outer]).zip(&starts) {
                describe_no_epilogue(&mut obj, c, start, &file)?;
            }
            let _r = jit_interface::register(&obj, format).map_err(|e| e.to_string())?;
            stop("epilogues", starts[3]);
        }
        "reuse" => {
            let old = frame_pointer_fn("jit_old", brk);
            let starts = buf.place(&[&old])?;
            let r = register(&[(&old, starts[0])], &file, Format::Compact)?;
            stop("phase 1", starts[0]);
            drop(r);
            println!("reader-testhost: unregistered jit_old");
            let new = frameless_fn("jit_new", brk);
            let starts = buf.place(&[&new])?;
            let _r = register(&[(&new, starts[0])], &file, Format::Compact)?;
            stop("phase 2", starts[0]);
        }
        "mixed" => {
            let inner = frameless_fn("jit_compact_inner", brk);
            let probe = frame_pointer_fn("jit_elf_outer", 0);
            let starts = buf.place(&[&inner, &probe])?;
            let outer = frame_pointer_fn("jit_elf_outer", starts[0]);
            let starts = buf.place(&[&inner, &outer])?;
            let _c = register(&[(&inner, starts[0])], &file, Format::Compact)?;
            let _e = register(&[(&outer, starts[1])], &file, Format::Elf)?;
            stop("mixed", starts[1]);
        }
        "corrupt" => {
            let inner = frameless_fn("jit_intact_inner", brk);
            let probe = frame_pointer_fn("jit_intact_outer", 0);
            let starts = buf.place(&[&inner, &probe])?;
            let outer = frame_pointer_fn("jit_intact_outer", starts[0]);
            let starts = buf.place(&[&inner, &outer])?;
            // Damaged entries first, so that the intact one is read after them.
            let mut victim = JitObject::new();
            for (i, name) in ["jit_victim_a", "jit_victim_b"].iter().enumerate() {
                let f = victim
                    .add_function(name, BASE + 0x800 + 0x40 * i as u64, 0x20)
                    .map_err(|e| e.to_string())?;
                victim
                    .set_lines(f, &file, &[LineRow { offset: 0, line: 2 }])
                    .map_err(|e| e.to_string())?;
            }
            let good = encode(&victim, None).map_err(|e| e.to_string())?;
            for (kind, bytes) in corruptions(&good) {
                let why = match decode_all(&bytes) {
                    Err(DecodeError::Invalid(why)) => why,
                    other => return Err(format!("{kind} payload not refused: {other:?}")),
                };
                println!(
                    "reader-testhost: corrupt {kind} ({} bytes): {why}",
                    bytes.len()
                );
                register_raw(bytes);
            }
            let _r = register(
                &[(&inner, starts[0]), (&outer, starts[1])],
                &file,
                Format::Compact,
            )?;
            stop("corrupt", starts[1]);
        }
        "endcall" => {
            // `jit_ends_with_call` ends with its call (a callee that never returns, in a
            // real JIT), and `jit_next` starts right after it: the return address of that
            // call is jit_next's first byte.
            let mut tail = Code::new("jit_ends_with_call");
            tail.line(2).insn(PUSH_RBP).insn(MOV_RBP_RSP);
            tail.line(3).call(brk);
            tail.epilogue = (0, 0);
            let mut next = Code::new("jit_next");
            next.line(10).insn(PUSH_RBP).insn(MOV_RBP_RSP);
            next.line(11).insn(POP_RBP);
            let restore_end = next.off();
            next.insn(RET);
            next.epilogue = (restore_end, next.off());
            // Back to back, no padding (tail is 16 bytes).
            assert_eq!(tail.bytes.len() % 16, 0);
            let starts = buf.place(&[&tail, &next])?;
            assert_eq!(starts[1], starts[0] + tail.bytes.len() as u64);
            let mut obj = JitObject::new();
            describe_no_epilogue(&mut obj, &tail, starts[0], &file)?;
            describe_into(&mut obj, &next, starts[1], &file)?;
            let _r = jit_interface::register(&obj, Format::Compact).map_err(|e| e.to_string())?;
            stop("next", starts[1]);
            // Does not come back: the break returns into jit_next's first instruction with
            // jit_ends_with_call's frame still on the stack. Debugger use only (kill here).
            stop("endcall", starts[0]);
        }
        "blocks" => {
            // `jit_with_blocks` holds a nested block `jit_inlined` (the call sequence) which
            // holds `jit_inner_scope` (the call instruction).
            let f = frame_pointer_fn("jit_with_blocks", brk);
            let starts = buf.place(&[&f])?;
            let mut obj = JitObject::new();
            let id = describe_into(&mut obj, &f, starts[0], &file)?;
            let outer = obj
                .add_block(id, "jit_inlined", 4, 16, None)
                .map_err(|e| e.to_string())?;
            obj.add_block(id, "jit_inner_scope", 14, 16, Some(outer))
                .map_err(|e| e.to_string())?;
            let _r = jit_interface::register(&obj, Format::Compact).map_err(|e| e.to_string())?;
            stop("blocks", starts[0]);
        }
        "many" => {
            // 100,000 functions (names and lines only, at addresses with no code) in one
            // entry, then an ordinary stop: for timing GDB with the reader by hand.
            let n: u64 = std::env::var("READER_HOST_MANY")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(100_000);
            let mut obj = JitObject::new();
            for i in 0..n {
                let f = obj
                    .add_function(&format!("jit_many_{i}"), BASE + 0x10_0000 + i * 64, 48)
                    .map_err(|e| e.to_string())?;
                obj.set_lines(
                    f,
                    &file,
                    &[
                        LineRow { offset: 0, line: 2 },
                        LineRow { offset: 8, line: 3 },
                    ],
                )
                .map_err(|e| e.to_string())?;
            }
            let inner = frameless_fn("jit_intact_inner", brk);
            let starts = buf.place(&[&inner])?;
            describe_into(&mut obj, &inner, starts[0], &file)?;
            let _r = jit_interface::register(&obj, Format::Compact).map_err(|e| e.to_string())?;
            stop("many", starts[0]);
        }
        "tombstone" => {
            let inner = frameless_fn("jit_tomb_inner", brk);
            let probe = frame_pointer_fn("jit_tomb_outer", 0);
            let ghost = frameless_fn("jit_ghost", brk);
            let starts = buf.place(&[&inner, &probe, &ghost])?;
            let outer = frame_pointer_fn("jit_tomb_outer", starts[0]);
            let starts = buf.place(&[&inner, &outer, &ghost])?;
            let mut live = JitObject::new();
            describe_into(&mut live, &inner, starts[0], &file)?;
            describe_into(&mut live, &outer, starts[1], &file)?;
            let mut gone = JitObject::new();
            describe_into(&mut gone, &ghost, starts[2], &file)?;
            READER_HOST_GHOST.store(starts[2], Ordering::Relaxed);
            // Live slots that outlive the process's use of them: one holds its key, the
            // other was cleared when its object was unregistered.
            let slot = |value: u64| Box::leak(Box::new(AtomicU64::new(value))) as &AtomicU64;
            let (live_slot, gone_slot) = (slot(0x5eed_0001), slot(0));
            let check = |s: &AtomicU64, key| LiveCheck {
                address: s as *const AtomicU64 as u64,
                key,
            };
            let err = |e: jit_interface::Error| e.to_string();
            let mut payload = encode(&live, Some(check(live_slot, 0x5eed_0001))).map_err(err)?;
            let tail = encode(&gone, Some(check(gone_slot, 0x5eed_0002))).map_err(err)?;
            // A payload is its header and object records back to back.
            payload.extend_from_slice(&tail[HEADER_LEN..]);
            match decode_all(&payload) {
                Ok(objects) if objects.len() == 2 => {}
                other => return Err(format!("the two-object payload decodes as {other:?}")),
            }
            println!("reader-testhost: ghost at {:#x}", starts[2]);
            register_raw(payload);
            stop("tombstone", starts[1]);
        }
        "gaps" => {
            let inner = frameless_fn("jit_gap_inner", brk);
            let after = frameless_fn("jit_gap_after", brk);
            let far = frameless_fn("jit_gap_far", brk);
            let outer = frame_pointer_fn("jit_gap_outer", BASE + 0x80);
            let starts =
                buf.place_at(&[(&outer, 0), (&inner, 0x80), (&after, 0x100), (&far, 0x400)])?;
            let mut p = JitObject::new();
            describe_into(&mut p, &outer, starts[0], &file)?;
            describe_into(&mut p, &after, starts[2], &file)?;
            let mut q = JitObject::new();
            describe_into(&mut q, &inner, starts[1], &file)?;
            describe_into(&mut q, &far, starts[3], &file)?;
            let (first, second) = if q_first { (&q, &p) } else { (&p, &q) };
            let err = |e: jit_interface::Error| e.to_string();
            let _a = jit_interface::register(first, Format::Compact).map_err(err)?;
            let _b = jit_interface::register(second, Format::Compact).map_err(err)?;
            stop("gaps", starts[0]);
        }
        m => return Err(format!("unknown mode `{m}`\n{USAGE}")),
    }
    println!("reader-testhost: done");
    Ok(())
}

fn main() -> std::process::ExitCode {
    match real_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reader_testhost: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
