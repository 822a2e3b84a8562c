//! `aarch64_testhost`: the aarch64 JIT test host (issue 27). Compiles three functions to
//! aarch64 machine code at run time, registers them through `jit-interface` (the object's
//! architecture is the host's, aarch64) and runs them; `tests/aarch64_qemu.rs` runs it under
//! qemu-user and gdb-multiarch. Not meant for users.
//!
//! Call chain (native code in brackets):
//! `[main] -> [run_jit] -> jit_outer -> jit_leaf`, then `jit_outer -> jit_middle ->
//! [jit_test_break_here]`.
//! - `jit_outer` and `jit_middle` keep an AAPCS64 frame record (`stp x29, x30, [sp,
//!   #-16]!; mov x29, sp; ...; ldp x29, x30, [sp], #16; ret`), described with
//!   `set_frame_pointer` and `add_epilogue`;
//! - `jit_leaf` is a leaf without a frame record: its return address stays in x30 and its
//!   row says CFA = sp + 0 throughout.

#[path = "../a64.rs"]
mod a64;
#[allow(dead_code)]
#[path = "../../../src/exec_mem.rs"]
mod exec_mem;

use std::process::ExitCode;

use a64::{Asm, X0, X1, X16, X9};
use jit_interface::{Format, JitObject, LineRow, UnwindRow};

const USAGE: &str = "\
usage: aarch64_testhost [--format elf|compact] [--source-dir DIR] [--crash]

Compiles aarch64 code at run time, registers it and runs it once:
  main -> run_jit -> jit_outer -> jit_leaf, then jit_outer -> jit_middle
       -> jit_test_break_here
prints one line per JIT function first:
  jit-fn name=NAME start=0xADDR size=N insns=OFF,... file=PATH
then the result (`aarch64-testhost: result=R expected=E`); exit 0 if they agree.
--crash: jit_middle reads *p with p NULL: SIGSEGV inside JIT code (a core file).
";

/// The pseudo source the functions were \"compiled\" from.
const SOURCE_NAME: &str = "jit_aarch64.jit";
const SOURCE: &str = "\
// jit-gdb aarch64 test host: the pseudo source its JIT compiles to aarch64
function jit_leaf(n) {
  return n + 5;
}
function jit_middle(n, p) {
  return jit_test_break_here(n + 3 + *p) + 1;
}
function jit_outer(n, p) {
  return jit_middle(jit_leaf(n), p) + 2;
}
";

/// Fixed, so that tests know the addresses before the host starts.
const BASE: u64 = 0x1a17_0000_0000;
const ENTRY_N: i64 = 40;
/// `*p`, read by `jit_middle`.
static VALUE: i64 = 100;

/// The usual breakpoint location, called from `jit_middle`.
#[no_mangle]
#[inline(never)]
pub extern "C" fn jit_test_break_here(n: i64) -> i64 {
    std::hint::black_box(n) * 2
}

type JitFnPtr = extern "C" fn(i64, *const i64) -> i64;

/// Native caller of the JIT code.
#[no_mangle]
#[inline(never)]
pub extern "C" fn run_jit(entry: u64, n: i64, p: *const i64) -> i64 {
    // SAFETY: `entry` is the address of `jit_outer`, compiled for this signature, in a
    // sealed code buffer that lives until the process exits.
    let f: JitFnPtr = unsafe { std::mem::transmute::<usize, JitFnPtr>(entry as usize) };
    std::hint::black_box(f(n, p))
}

/// One compiled function.
struct JitFn {
    name: &'static str,
    offset: u32,
    asm: Asm,
    /// (offset, line) rows.
    lines: Vec<(u32, u32)>,
    /// `Some((push_end, setup_end, restore_end, ret_end))` for a frame-record function,
    /// `None` for the leaf.
    frame: Option<(u32, u32, u32, u32)>,
}

/// A frame-record function: `body` between the prologue and the epilogue, on line `line`.
fn with_frame(name: &'static str, offset: u32, line: u32, body: impl FnOnce(&mut Asm)) -> JitFn {
    let mut a = Asm::new();
    a.stp_frame_record();
    let push_end = a.offset();
    a.mov_fp_sp();
    let setup_end = a.offset();
    body(&mut a);
    let ldp_at = a.offset();
    a.ldp_frame_record();
    let restore_end = a.offset();
    a.ret();
    let ret_end = a.offset();
    JitFn {
        name,
        offset,
        lines: vec![(0, line - 1), (setup_end, line), (ldp_at, line + 1)],
        frame: Some((push_end, setup_end, restore_end, ret_end)),
        asm: a,
    }
}

fn compile(base: u64) -> Vec<JitFn> {
    // Placed 64 bytes apart: leaf at 0, middle at 64, outer at 128.
    let (leaf_off, middle_off, outer_off) = (0u32, 64u32, 128u32);
    let mut leaf = Asm::new();
    leaf.add_imm(X0, X0, 5);
    leaf.ret();
    let leaf = JitFn {
        name: "jit_leaf",
        offset: leaf_off,
        asm: leaf,
        lines: vec![(0, 3)],
        frame: None,
    };
    // x1 (p) passes through jit_outer and jit_leaf untouched.
    let middle = with_frame("jit_middle", middle_off, 6, |a| {
        a.add_imm(X0, X0, 3);
        a.ldr(X9, X1);
        a.add(X0, X0, X9);
        a.mov_imm64(X16, jit_test_break_here as *const () as u64);
        a.blr(X16);
        a.add_imm(X0, X0, 1);
    });
    let outer = with_frame("jit_outer", outer_off, 9, |a| {
        a.mov_imm64(X16, base + u64::from(leaf_off));
        a.blr(X16);
        a.mov_imm64(X16, base + u64::from(middle_off));
        a.blr(X16);
        a.add_imm(X0, X0, 2);
    });
    vec![leaf, middle, outer]
}

fn describe(o: &mut JitObject, f: &JitFn, base: u64, file: &str) -> jit_interface::Result<()> {
    let id = o.add_function(
        f.name,
        base + u64::from(f.offset),
        f.asm.code().len() as u64,
    )?;
    let rows: Vec<LineRow> = f.lines.iter().map(|&(o, l)| LineRow::new(o, l)).collect();
    o.set_lines(id, file, &rows)?;
    match f.frame {
        Some((push_end, setup_end, restore_end, ret_end)) => {
            o.set_frame_pointer(id, push_end, setup_end)?;
            o.add_epilogue(id, restore_end, ret_end)?;
        }
        None => o.set_unwind(id, &[UnwindRow::AARCH64_ENTRY])?,
    }
    Ok(())
}

/// Makes freshly written code visible to instruction fetch (aarch64 caches are not coherent
/// for it).
fn sync_icache(start: u64, len: usize) {
    #[cfg(target_arch = "aarch64")]
    {
        extern "C" {
            fn __clear_cache(start: *mut std::ffi::c_char, end: *mut std::ffi::c_char);
        }
        // SAFETY: the range is the code buffer just written, mapped for the whole process.
        unsafe {
            __clear_cache(
                start as *mut std::ffi::c_char,
                (start + len as u64) as *mut std::ffi::c_char,
            )
        };
    }
    let _ = (start, len);
}

fn real_main() -> Result<(), String> {
    let mut format = Format::Elf;
    let mut dir = std::path::PathBuf::from(".");
    let mut crash = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--format" => {
                format = match args.next().as_deref() {
                    Some("elf") => Format::Elf,
                    Some("compact") => Format::Compact,
                    v => return Err(format!("--format: {v:?} is neither elf nor compact")),
                }
            }
            "--crash" => crash = true,
            "--source-dir" => dir = args.next().ok_or("--source-dir needs a directory")?.into(),
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument `{other}`\n\n{USAGE}")),
        }
    }
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

    let mut buf = exec_mem::CodeBuffer::map(Some(BASE), 4096)
        .map_err(|e| format!("cannot map the code buffer: {e}"))?;
    let base = buf.addr();
    let fns = compile(base);
    let mut object = JitObject::new();
    for f in &fns {
        buf.write(f.offset as usize, f.asm.code());
        let insns: Vec<String> = f
            .asm
            .instruction_starts()
            .iter()
            .map(|o| o.to_string())
            .collect();
        println!(
            "jit-fn name={} start={:#x} size={} insns={} file={file}",
            f.name,
            base + u64::from(f.offset),
            f.asm.code().len(),
            insns.join(",")
        );
        describe(&mut object, f, base, &file).map_err(|e| format!("describing {}: {e}", f.name))?;
    }
    buf.seal()
        .map_err(|e| format!("cannot make the code executable: {e}"))?;
    sync_icache(base, 4096);
    let registration = jit_interface::register(&object, format)
        .map_err(|e| format!("registering as {}: {e}", format.name()))?;
    println!(
        "aarch64-testhost: registered {} {} functions as {}",
        fns.len(),
        object.arch().name(),
        format.name()
    );
    let outer = fns
        .iter()
        .find(|f| f.name == "jit_outer")
        .expect("jit_outer");
    let p: *const i64 = if crash { std::ptr::null() } else { &VALUE };
    let got = run_jit(base + u64::from(outer.offset), ENTRY_N, p);
    if crash {
        return Err("the JIT code did not crash".into());
    }
    // jit_middle(jit_leaf(n), p) + 2 = (2 * (n + 5 + 3 + *p) + 1) + 2
    let expected = 2 * (ENTRY_N + 8 + VALUE) + 1 + 2;
    println!("aarch64-testhost: result={got} expected={expected}");
    drop(registration);
    if got == expected {
        Ok(())
    } else {
        Err("the JIT code computed a wrong result".into())
    }
}

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aarch64-testhost: {e}");
            ExitCode::FAILURE
        }
    }
}
