//! The JIT-compiled scenario: four functions written as real x86-64 machine code, with the
//! pseudo source they were "compiled" from, their line rows and frame descriptions.
//!
//! Call chain (native code in brackets):
//! `[main] -> [run_jit] -> jit_entry -> jit_middle -> jit_frameless -> [jit_test_callback]
//! -> jit_second -> [jit_test_break_here]`.
//! Every function takes `(n: i64, p: *const i64)` in rdi/rsi and returns an i64, so the
//! host can check that the code really ran; `jit_second` reads `*p` (a NULL `p` makes it
//! fault inside JIT code).

use jit_interface::arch::x86_64::{R12, R13, R14, R15, RBX};
use jit_interface::{
    CfaBase, LineRow, Location, RegisterRule, SavedRegister, UnwindRow, Variable, VariableKind,
};

use crate::x86::{Asm, Reg};

/// File name of the pseudo source, written next to the host's working files.
pub const SOURCE_NAME: &str = "jit_scenario.jit";

/// The pseudo source. Line numbers below refer to it (line 1 is the first line).
pub const SOURCE: &str = "\
// jit-gdb test host: the pseudo source its JIT compiles to x86-64
function jit_entry(n, p) {
  return jit_middle(n, p) + 1;
}

function jit_middle(n, p) {
  let m = n + 1;
  return jit_frameless(m, p) + n;
}

function jit_frameless(t, p) {   // no frame pointer: SP-based unwind rows
  let saved = t;
  return jit_test_callback(t, p) + saved;
}

function jit_second(n, p) {
  n = n + *p;
  return jit_test_break_here(n);
}
";

/// How a function's caller is found.
#[derive(Debug, Clone)]
pub enum FrameDesc {
    /// `push rbp; mov rbp, rsp` prologue, `pop rbp; ret` epilogues: (restore_end, ret_end).
    FramePointer {
        push_end: u32,
        setup_end: u32,
        epilogues: Vec<(u32, u32)>,
    },
    /// Explicit rows (frameless code).
    Rows(Vec<UnwindRow>),
}

/// One compiled function, placed at `offset` in the code buffer.
#[derive(Debug)]
pub struct JitFn {
    pub name: &'static str,
    pub offset: u32,
    pub code: Vec<u8>,
    pub insns: Vec<u32>,
    pub lines: Vec<LineRow>,
    pub frame: FrameDesc,
    pub variables: Vec<Variable>,
    /// Register rules (only with [`SavedRegs::On`]).
    pub registers: Vec<SavedRegister>,
}

/// The values `jit_entry` puts in r12, r13 and r14 before calling `jit_middle` (with
/// [`SavedRegs::On`]): what a debugger must show for them in `jit_entry`'s frame.
pub const ENTRY_R12: u64 = 0x1000;
pub const ENTRY_R13: u64 = 0x2000;
pub const ENTRY_R14: u64 = 0x3000;
/// The values `jit_middle` overwrites them with (after saving them).
pub const MIDDLE_R12: u64 = 0x18;
pub const MIDDLE_R13: u64 = 0x28;
pub const MIDDLE_R14: u64 = 0x38;

/// Whether `jit_entry` and `jit_middle` save and clobber callee-saved registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedRegs {
    /// They do not touch them (the default scenario).
    Off,
    /// `jit_entry` saves r12-r14 (described), sets them to `ENTRY_R*` and calls
    /// `jit_middle`, which saves them, describes the saves of r12 and r13 but not r14, and
    /// sets them to `MIDDLE_R*`; `jit_frameless` says it leaves rbx and r12-r15 alone.
    On,
}

/// Addresses of the native functions the JIT code calls.
#[derive(Debug, Clone, Copy)]
pub struct Natives {
    pub callback: u64,
    pub break_here: u64,
}

/// Tracks line rows while emitting.
struct Lines(Vec<LineRow>);

impl Lines {
    fn at(&mut self, a: &Asm, line: u32) {
        self.0.push(LineRow {
            offset: a.offset(),
            line,
        });
    }
}

fn finish(
    name: &'static str,
    offset: u32,
    a: Asm,
    lines: Lines,
    frame: FrameDesc,
    variables: Vec<Variable>,
) -> JitFn {
    JitFn {
        name,
        offset,
        insns: a.instruction_starts().to_vec(),
        code: a.code().to_vec(),
        lines: lines.0,
        frame,
        variables,
        registers: Vec::new(),
    }
}

fn saved(offset: u32, reg: u16, rule: RegisterRule) -> SavedRegister {
    SavedRegister { offset, reg, rule }
}

/// After `mov rbp, rsp`: pushes r12, r13, r14 (at CFA - 24, - 32, - 40) and sets them to
/// `values`. Returns the rules for the registers in `describe` and the offset after the
/// pushes. Keeps rsp 16-byte aligned together with `restore_registers`' `add`.
fn save_registers(a: &mut Asm, values: [u64; 3], describe: &[u16]) -> Vec<SavedRegister> {
    let mut rules = Vec::new();
    for (k, (r, reg)) in [(Reg::R12, R12), (Reg::R13, R13), (Reg::R14, R14)]
        .into_iter()
        .enumerate()
    {
        a.push(r);
        if describe.contains(&reg) {
            rules.push(saved(
                a.offset(),
                reg,
                RegisterRule::AtCfa(-24 - 8 * k as i32),
            ));
        }
    }
    for (r, v) in [Reg::R12, Reg::R13, Reg::R14].into_iter().zip(values) {
        a.mov_imm64(r, v);
    }
    rules
}

/// Pops r14, r13, r12 again (after `add rsp` back to the pushes); the described registers
/// are the caller's again after their pop.
fn restore_registers(a: &mut Asm, describe: &[u16], rules: &mut Vec<SavedRegister>) {
    for (r, reg) in [(Reg::R14, R14), (Reg::R13, R13), (Reg::R12, R12)] {
        a.pop(r);
        if describe.contains(&reg) {
            rules.push(saved(a.offset(), reg, RegisterRule::SameValue));
        }
    }
}

fn align16(x: u32) -> u32 {
    (x + 15) & !15
}

/// Compiles the scenario for a code buffer at `base`. Callees are emitted first so that
/// their addresses are known when their callers are emitted. Returned in call order.
pub fn compile(base: u64, natives: Natives, regs: SavedRegs) -> Vec<JitFn> {
    let saving = regs == SavedRegs::On;
    let mut next = 0u32;
    let place = |next: &mut u32, len: usize| {
        let at = *next;
        *next = align16(at + len as u32);
        at
    };

    // jit_second(n, p): n += *p; return jit_test_break_here(n)
    let mut a = Asm::new();
    let mut l = Lines(Vec::new());
    l.at(&a, 16);
    a.push(Reg::Rbp);
    let push_end = a.offset();
    a.mov_rr(Reg::Rbp, Reg::Rsp);
    let setup_end = a.offset();
    l.at(&a, 17);
    a.add_load(Reg::Rdi, Reg::Rsi, 0);
    l.at(&a, 18);
    a.mov_imm64(Reg::Rax, natives.break_here);
    a.call_reg(Reg::Rax);
    l.at(&a, 19);
    a.pop(Reg::Rbp);
    let restore_end = a.offset();
    a.ret();
    let second_frame = FrameDesc::FramePointer {
        push_end,
        setup_end,
        epilogues: vec![(restore_end, a.offset())],
    };
    let second_off = place(&mut next, a.code().len());
    let second = finish("jit_second", second_off, a, l, second_frame, vec![]);

    // jit_frameless(t, p): no frame pointer; 24 bytes of stack keep the calls aligned.
    let mut a = Asm::new();
    let mut l = Lines(Vec::new());
    l.at(&a, 11);
    a.sub_imm8(Reg::Rsp, 24);
    let sub_end = a.offset();
    l.at(&a, 12);
    a.store(Reg::Rsp, 8, Reg::Rdi);
    l.at(&a, 13);
    a.mov_imm64(Reg::Rax, natives.callback);
    a.call_reg(Reg::Rax);
    a.add_load(Reg::Rax, Reg::Rsp, 8);
    l.at(&a, 14);
    a.add_imm8(Reg::Rsp, 24);
    let add_end = a.offset();
    a.ret();
    let sp_row = |offset, cfa_offset| UnwindRow {
        offset,
        cfa_base: CfaBase::Sp,
        cfa_offset,
        fp_offset: 0,
    };
    let rows = vec![sp_row(0, 8), sp_row(sub_end, 32), sp_row(add_end, 8)];
    let frameless_off = place(&mut next, a.code().len());
    let mut frameless = finish(
        "jit_frameless",
        frameless_off,
        a,
        l,
        FrameDesc::Rows(rows),
        vec![],
    );
    if saving {
        // It leaves the callee-saved registers alone, and says so.
        frameless.registers = [RBX, R12, R13, R14, R15]
            .map(|r| saved(0, r, RegisterRule::SameValue))
            .to_vec();
    }

    // jit_middle(n, p): keeps `n` in a frame slot across the call (declared for `info args`).
    let middle_off = next;
    let here = base + u64::from(middle_off);
    let mut a = Asm::new();
    let mut l = Lines(Vec::new());
    l.at(&a, 6);
    a.push(Reg::Rbp);
    let push_end = a.offset();
    a.mov_rr(Reg::Rbp, Reg::Rsp);
    let setup_end = a.offset();
    // With saved registers: r12-r14 pushed below rbp (r14's save not described), `n` below
    // them, rsp still 16-byte aligned at the call.
    let (mut middle_rules, n_at, frame_bytes) = if saving {
        let values = [MIDDLE_R12, MIDDLE_R13, MIDDLE_R14];
        (save_registers(&mut a, values, &[R12, R13]), -32, 24)
    } else {
        (Vec::new(), -8, 16)
    };
    a.sub_imm8(Reg::Rsp, frame_bytes);
    a.store(Reg::Rbp, n_at, Reg::Rdi);
    l.at(&a, 7);
    a.add_imm8(Reg::Rdi, 1);
    l.at(&a, 8);
    a.call_rel(here, base + u64::from(frameless_off));
    a.add_load(Reg::Rax, Reg::Rbp, n_at);
    l.at(&a, 9);
    a.add_imm8(Reg::Rsp, frame_bytes);
    if saving {
        restore_registers(&mut a, &[R12, R13], &mut middle_rules);
    }
    a.pop(Reg::Rbp);
    let restore_end = a.offset();
    // A patchable nop between restoring rbp and `ret`: GDB's built-in epilogue heuristic
    // only recognises a `ret` at the pc, so here only the described epilogue unwinds right.
    a.nop();
    a.ret();
    let middle_frame = FrameDesc::FramePointer {
        push_end,
        setup_end,
        epilogues: vec![(restore_end, a.offset())],
    };
    let n_param = Variable {
        name: "n".into(),
        kind: VariableKind::Parameter,
        ty: jit_interface::BaseType::I64,
        location: Location::FrameOffset(i32::from(n_at)),
    };
    let placed = place(&mut next, a.code().len());
    debug_assert_eq!(placed, middle_off);
    let mut middle = finish("jit_middle", middle_off, a, l, middle_frame, vec![n_param]);
    middle.registers = middle_rules;

    // jit_entry(n, p): return jit_middle(n, p) + 1
    let entry_off = next;
    let here = base + u64::from(entry_off);
    let mut a = Asm::new();
    let mut l = Lines(Vec::new());
    l.at(&a, 2);
    a.push(Reg::Rbp);
    let push_end = a.offset();
    a.mov_rr(Reg::Rbp, Reg::Rsp);
    let setup_end = a.offset();
    let all = [R12, R13, R14];
    let mut entry_rules = Vec::new();
    if saving {
        entry_rules = save_registers(&mut a, [ENTRY_R12, ENTRY_R13, ENTRY_R14], &all);
        a.sub_imm8(Reg::Rsp, 8);
    }
    l.at(&a, 3);
    a.call_rel(here, base + u64::from(middle_off));
    a.add_imm8(Reg::Rax, 1);
    l.at(&a, 4);
    if saving {
        a.add_imm8(Reg::Rsp, 8);
        restore_registers(&mut a, &all, &mut entry_rules);
    }
    a.pop(Reg::Rbp);
    let restore_end = a.offset();
    a.ret();
    let entry_frame = FrameDesc::FramePointer {
        push_end,
        setup_end,
        epilogues: vec![(restore_end, a.offset())],
    };
    let placed = place(&mut next, a.code().len());
    debug_assert_eq!(placed, entry_off);
    let mut entry = finish("jit_entry", entry_off, a, l, entry_frame, vec![]);
    entry.registers = entry_rules;

    vec![entry, middle, frameless, second]
}

/// What the scenario computes for `jit_entry(n, p)` with `*p == v`, given that
/// `jit_test_break_here(x)` returns `2 * x` and `jit_test_callback(t, p)` returns
/// `jit_second(t + 1, p)`.
pub fn expected_result(n: i64, v: i64) -> i64 {
    let t = n + 1;
    let second = 2 * (t + 1 + v);
    second + t + n + 1
}
