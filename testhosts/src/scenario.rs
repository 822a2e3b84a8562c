//! The JIT-compiled scenario: four functions written as real x86-64 machine code, with the
//! pseudo source they were "compiled" from, their line rows and frame descriptions.
//!
//! Call chain (native code in brackets):
//! `[main] -> [run_jit] -> jit_entry -> jit_middle -> jit_frameless -> [jit_test_callback]
//! -> jit_second -> [jit_test_break_here]`.
//! Every function takes `(n: i64, p: *const i64)` in rdi/rsi and returns an i64, so the
//! host can check that the code really ran; `jit_second` reads `*p` (a NULL `p` makes it
//! fault inside JIT code).

use jit_interface::{CfaBase, LineRow, Location, UnwindRow, Variable, VariableKind};

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
    }
}

fn align16(x: u32) -> u32 {
    (x + 15) & !15
}

/// Compiles the scenario for a code buffer at `base`. Callees are emitted first so that
/// their addresses are known when their callers are emitted. Returned in call order.
pub fn compile(base: u64, natives: Natives) -> Vec<JitFn> {
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
    let frameless = finish(
        "jit_frameless",
        frameless_off,
        a,
        l,
        FrameDesc::Rows(rows),
        vec![],
    );

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
    a.sub_imm8(Reg::Rsp, 16);
    a.store(Reg::Rbp, -8, Reg::Rdi);
    l.at(&a, 7);
    a.add_imm8(Reg::Rdi, 1);
    l.at(&a, 8);
    a.call_rel(here, base + u64::from(frameless_off));
    a.add_load(Reg::Rax, Reg::Rbp, -8);
    l.at(&a, 9);
    a.add_imm8(Reg::Rsp, 16);
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
        location: Location::FrameOffset(-8),
    };
    let placed = place(&mut next, a.code().len());
    debug_assert_eq!(placed, middle_off);
    let middle = finish("jit_middle", middle_off, a, l, middle_frame, vec![n_param]);

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
    l.at(&a, 3);
    a.call_rel(here, base + u64::from(middle_off));
    a.add_imm8(Reg::Rax, 1);
    l.at(&a, 4);
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
    let entry = finish("jit_entry", entry_off, a, l, entry_frame, vec![]);

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
