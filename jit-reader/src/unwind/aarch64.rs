//! aarch64: DWARF registers x29 (frame pointer) 29, x30 (link register) 30, sp 31, pc 32.
//! A `bl` leaves the return address in x30 and does not touch the stack: at a function's
//! entry the CFA is sp + 0 and the return address is x30. The AAPCS64 frame record (the
//! caller's x29, then the return address) is where a row's `fp_offset` says, at
//! CFA + `fp_offset`; while no record is saved (`fp_offset` 0) the return address is still
//! in x30 — unless a register rule for x30 places it (a leaf that saves only the link
//! register). See `jit_interface::arch::aarch64`.
//!
//! The sanity checks are x86-64's ([`super::x86_64`] module docs), with one difference: at
//! an entry the CFA *is* sp (nothing pushed), so the CFA must be at or above sp, not
//! strictly above.
//!
//! ## Epilogues nobody declared
//! As on x86-64, for a frame-pointer function whose epilogues were not declared and whose
//! row at the PC is x29-based, the reader reads the code at the PC (one read of at most
//! [`PC_BYTES`] bytes, never past the function's end), unless the PC is a return address:
//!
//! | code at the PC | the row there |
//! |---|---|
//! | `ret` (`d65f03c0`) | CFA = sp + 0, return address in x30, x29 the caller's |
//! | `ldp x29, x30, [sp], #16` (`a8c17bfd`) followed by `ret` | CFA = sp + 16, the frame record at sp |
//!
//! Anything else keeps the function's row, and so does code that cannot be read.

use jit_interface::arch::aarch64 as arch;
use jit_interface::{register_rule_at, CfaBase, RegisterRule, UnwindRow};

use super::{ArchRegs, CallerRegs, FrameRegs, Memory, PcCode, Registers, Step};
use crate::index::CodeFn;

pub use super::x86_64::{MAX_FRAME, OUTERMOST};

pub const X29: u16 = arch::X29;
pub const X30: u16 = arch::X30;
pub const SP: u16 = arch::SP;
pub const PC: u16 = arch::PC;

pub const REGS: ArchRegs = ArchRegs {
    pc: PC,
    sp: SP,
    fp: X29,
    lr: Some(X30),
};

/// End of the user half of the address space: 52-bit virtual addresses at most (48 unless
/// a program asks for more).
const USER_TOP: u64 = 1 << 52;

/// Code bytes read at the PC: `ldp x29, x30, [sp], #16; ret`.
pub const PC_BYTES: usize = 8;

const RET: u32 = 0xd65f_03c0;
const LDP_X29_X30_POST_16: u32 = 0xa8c1_7bfd;

/// An epilogue instruction recognised at the PC (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// `ret`: the frame record is restored, the return address is in x30.
    Ret,
    /// `ldp x29, x30, [sp], #16` before a `ret`: the frame record is at sp.
    LdpRet,
}

impl Epilogue {
    /// The instructions from the PC on, as the debug output names them.
    pub fn describe(self) -> &'static str {
        match self {
            Epilogue::Ret => "ret",
            Epilogue::LdpRet => "ldp x29, x30, [sp], #16; ret",
        }
    }

    fn row(self) -> UnwindRow {
        match self {
            Epilogue::Ret => arch::ENTRY,
            Epilogue::LdpRet => arch::PUSHED,
        }
    }
}

/// Recognises an epilogue at the start of `code` (the bytes from the PC to at most the
/// function's end).
pub fn epilogue_at(code: &[u8]) -> Option<Epilogue> {
    let insn = |i: usize| {
        code.get(4 * i..4 * i + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    match (insn(0)?, insn(1)) {
        (RET, _) => Some(Epilogue::Ret),
        (LDP_X29_X30_POST_16, Some(RET)) => Some(Epilogue::LdpRet),
        _ => None,
    }
}

/// Were `rows` given epilogues: does an sp-based row follow an x29-based one?
fn epilogues_declared(rows: &[UnwindRow]) -> bool {
    rows.iter()
        .skip_while(|r| r.cfa_base != CfaBase::Fp)
        .any(|r| r.cfa_base == CfaBase::Sp)
}

fn looks_like_stack_pointer(sp: u64) -> bool {
    sp != 0 && sp % 8 == 0 && sp < USER_TOP
}

/// Does x30 hold the PC, as the `bl` that made this frame a caller left it? (GDB gives a
/// caller frame's x30 as its return address, whichever unwinder produced the frame.)
pub fn linked_return_address(frame: FrameRegs) -> bool {
    frame.lr == Some(frame.pc)
}

/// The row that holds at the frame's PC: `func`'s row for `lookup_pc`, or, for a
/// frame-pointer function without declared epilogues, the row of the epilogue instruction
/// at the PC (module docs).
pub fn row_at_pc(
    func: &CodeFn,
    lookup_pc: u64,
    regs: &FrameRegs,
    at_return_address: bool,
    mem: &dyn Memory,
) -> Result<(UnwindRow, PcCode), String> {
    let offset = lookup_pc.saturating_sub(func.start);
    let Some(&row) = func.row_at(offset) else {
        return Err(format!(
            "`{}` has no unwind row for offset {offset}",
            func.name()
        ));
    };
    if row.cfa_base != CfaBase::Fp
        || at_return_address
        || lookup_pc != regs.pc
        || linked_return_address(*regs)
        || epilogues_declared(func.rows())
    {
        return Ok((row, PcCode::NotRead));
    }
    let len = func.end.saturating_sub(regs.pc).min(PC_BYTES as u64) as usize;
    let mut code = [0u8; PC_BYTES];
    if len == 0 || !mem.read(regs.pc, &mut code[..len]) {
        return Ok((row, PcCode::Unreadable { len }));
    }
    Ok(match epilogue_at(&code[..len]) {
        Some(e) => (e.row(), PcCode::Epilogue(super::Epilogue::Aarch64(e))),
        None => (row, PcCode::Body),
    })
}

/// The canonical frame address `row` gives, and the value of the register it is based on.
fn cfa_of(row: &UnwindRow, regs: &FrameRegs) -> Result<(u64, u64), String> {
    let (base_name, base) = match row.cfa_base {
        CfaBase::Sp => ("sp", regs.sp),
        CfaBase::Fp => ("x29", regs.fp),
    };
    let Some(base) = base else {
        return Err(format!("{base_name} is unknown in this frame"));
    };
    let Some(cfa) = base.checked_add_signed(i64::from(row.cfa_offset)) else {
        return Err(format!(
            "CFA = {base_name} {base:#x} + {} overflows",
            row.cfa_offset
        ));
    };
    Ok((base, cfa))
}

/// The canonical frame address of the frame (what [`step_at`] computes, without its reads
/// of the stack), for frame ids.
pub fn cfa(
    func: &CodeFn,
    lookup_pc: u64,
    regs: &FrameRegs,
    at_return_address: bool,
    mem: &dyn Memory,
) -> Option<u64> {
    let (row, _) = row_at_pc(func, lookup_pc, regs, at_return_address, mem).ok()?;
    cfa_of(&row, regs).ok().map(|(_, cfa)| cfa)
}

/// Applies the row that holds at the frame's PC ([`row_at_pc`]) to the frame's registers;
/// `all` gives the registers a rule for x30 may name.
pub fn step_at(
    func: &CodeFn,
    lookup_pc: u64,
    regs: &FrameRegs,
    at_return_address: bool,
    all: &dyn Registers,
    mem: &dyn Memory,
) -> Step {
    let (row, code) = match row_at_pc(func, lookup_pc, regs, at_return_address, mem) {
        Ok(found) => found,
        Err(why) => {
            return Step {
                cfa: None,
                caller: Err(why),
                code: PcCode::NotRead,
            }
        }
    };
    let stop = |cfa: Option<u64>, why: String| Step {
        cfa,
        caller: Err(why),
        code,
    };
    let (base, cfa) = match cfa_of(&row, regs) {
        Ok(found) => found,
        Err(why) => return stop(None, why),
    };
    let found = Some(cfa);
    if cfa % 8 != 0 {
        return stop(found, format!("CFA {cfa:#x} is not 8-byte aligned"));
    }
    if !(16..=USER_TOP).contains(&cfa) {
        return stop(found, format!("CFA {cfa:#x} is outside user space"));
    }
    if row.cfa_base == CfaBase::Fp && cfa <= base {
        return stop(found, format!("CFA {cfa:#x} is not above x29 {base:#x}"));
    }
    if let Some(sp) = regs.sp.filter(|&sp| looks_like_stack_pointer(sp)) {
        if row.cfa_base == CfaBase::Fp && base < sp {
            return stop(found, format!("x29 {base:#x} is below sp {sp:#x}"));
        }
        // At an entry nothing is pushed: CFA = sp.
        if cfa < sp {
            return stop(found, format!("CFA {cfa:#x} is below sp {sp:#x}"));
        }
        if cfa - sp > MAX_FRAME {
            return stop(
                found,
                format!(
                    "a frame of {} bytes (sp {sp:#x}, CFA {cfa:#x}) exceeds the {MAX_FRAME}-byte limit",
                    cfa - sp
                ),
            );
        }
    }
    // The frame record, one read for both words (every target read is a system call in
    // GDB, and this runs on every JIT frame).
    let record = if row.fp_offset == 0 {
        None
    } else {
        let Some(at) = cfa.checked_add_signed(i64::from(row.fp_offset)) else {
            return stop(
                found,
                format!("the frame record slot CFA {:+} overflows", row.fp_offset),
            );
        };
        let mut bytes = [0u8; 16];
        if !mem.read(at, &mut bytes) {
            return stop(found, format!("the frame record at {at:#x} is unreadable"));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Some((word(0), word(8)))
    };
    // The return address: where a rule for x30 says, else in the record, else in x30.
    let offset = lookup_pc.saturating_sub(func.start);
    let rule = u32::try_from(offset)
        .ok()
        .and_then(|o| register_rule_at(func.register_rules(), X30, o));
    let ra = match (rule, record) {
        (Some(RegisterRule::AtCfa(n)), _) => {
            let slot = cfa.checked_add_signed(i64::from(n));
            match slot.and_then(|s| mem.read_u64(s)) {
                Some(ra) => ra,
                None => {
                    return stop(
                        found,
                        format!("the return address (x30) at CFA {n:+} is unreadable"),
                    )
                }
            }
        }
        (Some(RegisterRule::InRegister(r)), _) => match all.get(r) {
            Some(ra) => ra,
            None => {
                return stop(
                    found,
                    format!("the return address (x30, kept in register {r}) is unknown"),
                )
            }
        },
        (Some(RegisterRule::Undefined), _) => {
            return stop(found, "the return address (x30) is undefined here".into())
        }
        (Some(RegisterRule::SameValue) | None, Some((_, ra))) if rule.is_none() => ra,
        (Some(RegisterRule::SameValue) | None, _) => match regs.lr {
            Some(ra) => ra,
            None => return stop(found, "x30 (the return address) is unknown".into()),
        },
    };
    if ra == 0 {
        return stop(found, OUTERMOST.into());
    }
    if ra >= USER_TOP {
        return stop(
            found,
            format!("the return address {ra:#x} is not a user-space address"),
        );
    }
    let fp = match record {
        None => regs.fp,
        Some((saved, _)) => Some(saved),
    };
    Step {
        cfa: found,
        caller: Ok(CallerRegs {
            pc: ra,
            sp: cfa,
            fp,
            // The `bl` left the return address in x30, and the callee gives it back there.
            lr: Some(ra),
        }),
        code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Index;
    use crate::unwind::testing::{FakeMem, FakeRegs};
    use crate::unwind::{saved_registers, unwind, Memo, Outcome};
    use jit_interface::{Arch, Decoded, JitObject, SavedRegister};

    const CODE: u64 = 0x40_0000_1000;
    /// The stack pointer at the function's entry: the caller's sp, and the CFA.
    const S0: u64 = 0xffff_f000_8000;
    const NATIVE_RA: u64 = 0x40_0009_9990;
    const CALLER_FP: u64 = S0 + 0x100;
    /// What x30 holds once the body has called something.
    const CLOBBERED_LR: u64 = 0x40_0000_1234;

    /// Little-endian bytes of instruction words.
    fn code(insns: &[u32]) -> Vec<u8> {
        insns.iter().flat_map(|i| i.to_le_bytes()).collect()
    }

    const STP: u32 = 0xa9bf_7bfd; // stp x29, x30, [sp, #-16]!
    const MOV: u32 = 0x9100_03fd; // mov x29, sp
    const SUB: u32 = 0xd100_43ff; // sub sp, sp, #16
    const BL: u32 = 0x9400_0000; // bl (somewhere)
    const ADD: u32 = 0x9100_43ff; // add sp, sp, #16
    const NOP: u32 = 0xd503_201f;

    /// The frame-record function every test walks through, 40 bytes:
    /// stp 0, mov 4, sub 8, nop 12, bl 16, nop 20..28, add 28, ldp 32, ret 36.
    const FRAME_FN: [u32; 10] = [
        STP,
        MOV,
        SUB,
        NOP,
        BL,
        NOP,
        NOP,
        ADD,
        LDP_X29_X30_POST_16,
        RET,
    ];

    /// The real machine state before the instruction at each offset of [`FRAME_FN`],
    /// entered from native code with sp S0, x29 CALLER_FP, x30 NATIVE_RA: (offset, sp,
    /// x29, x30).
    fn states() -> Vec<(u64, u64, u64, u64)> {
        let rec = S0 - 16;
        vec![
            (0, S0, CALLER_FP, NATIVE_RA),
            // After stp: the record is saved, x30 still holds the return address.
            (4, rec, CALLER_FP, NATIVE_RA),
            // After mov: x29 is the frame pointer.
            (8, rec, rec, NATIVE_RA),
            (12, rec - 16, rec, NATIVE_RA),
            (16, rec - 16, rec, NATIVE_RA),
            // After the bl returned: x30 is no return address of ours any more.
            (20, rec - 16, rec, CLOBBERED_LR),
            (24, rec - 16, rec, CLOBBERED_LR),
            (28, rec - 16, rec, CLOBBERED_LR),
            // After add: sp at the record.
            (32, rec, rec, CLOBBERED_LR),
            // After ldp: back to the entry state, the return address in x30.
            (36, S0, CALLER_FP, NATIVE_RA),
        ]
    }

    /// The stack and code of [`FRAME_FN`]'s frame: the record at S0 - 16, garbage below.
    fn frame_mem() -> FakeMem {
        let mut mem = FakeMem::default();
        mem.set(S0 - 16, CALLER_FP)
            .set(S0 - 8, NATIVE_RA)
            .set(S0 - 24, 0xdead_0001)
            .set(S0 - 32, 0xdead_0002)
            .put(CODE, &code(&FRAME_FN));
        mem
    }

    fn fp_object(declare_epilogue: bool) -> JitObject {
        let mut o = JitObject::with_arch(Arch::Aarch64);
        let f = o.add_function("f", CODE, 40).unwrap();
        o.set_frame_pointer(f, 4, 8).unwrap();
        if declare_epilogue {
            o.add_epilogue(f, 36, 40).unwrap();
        }
        o
    }

    fn code_fn(o: &JitObject) -> CodeFn {
        let f = o.functions().first().unwrap();
        CodeFn::new(
            f.name(),
            f.start(),
            f.size(),
            Arch::Aarch64,
            &f.frame().rows(Arch::Aarch64, f.size().into()),
        )
        .with_register_rules(f.register_rules())
    }

    fn frame(off: u64, sp: u64, fp: u64, lr: u64) -> FrameRegs {
        FrameRegs {
            pc: CODE + off,
            sp: Some(sp),
            fp: Some(fp),
            lr: Some(lr),
        }
    }

    fn step(f: &CodeFn, regs: &FrameRegs, mem: &FakeMem) -> Step {
        step_at(f, regs.pc, regs, false, &FakeRegs::default(), mem)
    }

    fn caller(s: &Step) -> CallerRegs {
        s.caller
            .clone()
            .unwrap_or_else(|e| panic!("expected a caller: {e}"))
    }

    fn stopped(s: &Step, needle: &str) {
        match &s.caller {
            Ok(c) => panic!("expected a stop mentioning {needle:?}, got caller {c:x?}"),
            Err(why) => assert!(why.contains(needle), "stop reason {why:?} lacks {needle:?}"),
        }
    }

    const REAL_CALLER: CallerRegs = CallerRegs {
        pc: NATIVE_RA,
        sp: S0,
        fp: Some(CALLER_FP),
        lr: Some(NATIVE_RA),
    };

    #[test]
    fn every_instruction_of_a_declared_frame_record_function() {
        let f = code_fn(&fp_object(true));
        let mem = frame_mem();
        for (off, sp, fp, lr) in states() {
            mem.log.borrow_mut().clear();
            let s = step(&f, &frame(off, sp, fp, lr), &mem);
            assert_eq!(s.cfa, Some(S0), "+{off}");
            assert_eq!(caller(&s), REAL_CALLER, "+{off}");
            // Declared epilogues: the rows hold, no code is read.
            assert_eq!(s.code, PcCode::NotRead, "+{off}");
            assert_eq!(mem.reads_in(CODE, CODE + 40), 0, "+{off}");
        }
    }

    #[test]
    fn the_record_not_x30_once_saved() {
        // After the body's call x30 is someone else's: only the record is right.
        let f = code_fn(&fp_object(true));
        let mut mem = frame_mem();
        let s = step(&f, &frame(24, S0 - 32, S0 - 16, CLOBBERED_LR), &mem);
        assert_eq!(caller(&s).pc, NATIVE_RA);
        // And at the entry the stack is not read for it: x30 is the return address.
        mem.set(S0 - 8, 0x1111);
        let s = step(&f, &frame(0, S0, CALLER_FP, NATIVE_RA), &mem);
        assert_eq!(caller(&s), REAL_CALLER);
        // With x30 unknown at the entry there is no caller.
        let unknown_lr = FrameRegs {
            lr: None,
            ..frame(0, S0, CALLER_FP, 0)
        };
        stopped(
            &step(&f, &unknown_lr, &mem),
            "x30 (the return address) is unknown",
        );
    }

    #[test]
    fn every_instruction_of_an_undeclared_epilogue() {
        // Only the prologue described: at the ldp and the ret the x29 rule is wrong (at the
        // ret x29 is the caller's already), so the code at the PC is read there.
        let f = code_fn(&fp_object(false));
        let mem = frame_mem();
        let ldp = PcCode::Epilogue(crate::unwind::Epilogue::Aarch64(Epilogue::LdpRet));
        let ret = PcCode::Epilogue(crate::unwind::Epilogue::Aarch64(Epilogue::Ret));
        for (off, sp, fp, lr) in states() {
            mem.log.borrow_mut().clear();
            let s = step(&f, &frame(off, sp, fp, lr), &mem);
            let what = format!("+{off}: {s:x?}");
            assert_eq!(s.cfa, Some(S0), "{what}");
            assert_eq!(caller(&s), REAL_CALLER, "{what}");
            let (want, reads) = match off {
                // The prologue's rows are sp-based: nothing to read.
                0 | 4 => (PcCode::NotRead, 0),
                32 => (ldp, 1),
                36 => (ret, 1),
                _ => (PcCode::Body, 1),
            };
            assert_eq!(s.code, want, "{what}");
            assert_eq!(mem.reads_in(CODE, CODE + 40), reads, "{what}");
        }
        // The code at the PC is never read past the function's end, and unreadable code
        // keeps the rows.
        let s = step(
            &f,
            &frame(36, S0, CALLER_FP, NATIVE_RA),
            &FakeMem::default(),
        );
        assert_eq!(s.code, PcCode::Unreadable { len: 4 });
        // (The x29 rule then, with the record at the caller's x29: nothing there.)
        stopped(&s, "frame record");
        // A return address (x30 = the PC) is in the body: not read.
        let mut linked = frame(20, S0 - 32, S0 - 16, 0);
        linked.lr = Some(linked.pc);
        let s = step(&f, &linked, &mem);
        assert_eq!(s.code, PcCode::NotRead);
    }

    #[test]
    fn epilogue_recognition() {
        let c = |insns: &[u32]| epilogue_at(&code(insns));
        assert_eq!(c(&[RET]), Some(Epilogue::Ret));
        assert_eq!(c(&[RET, NOP]), Some(Epilogue::Ret));
        assert_eq!(c(&[LDP_X29_X30_POST_16, RET]), Some(Epilogue::LdpRet));
        // ldp not followed by ret, cut short, or other code: none.
        assert_eq!(c(&[LDP_X29_X30_POST_16, NOP]), None);
        assert_eq!(c(&[LDP_X29_X30_POST_16]), None);
        assert_eq!(c(&[NOP, RET]), None);
        assert_eq!(epilogue_at(&RET.to_le_bytes()[..3]), None);
        assert_eq!(epilogue_at(&[]), None);
    }

    #[test]
    fn leaf_without_a_frame_record() {
        // sub sp, sp, #16 at 0; body; add sp, sp, #16 at 12; ret at 16: x30 and x29 are
        // never touched.
        let mut o = JitObject::with_arch(Arch::Aarch64);
        let g = o.add_function("leaf", CODE, 20).unwrap();
        let row = |offset, cfa_offset| UnwindRow {
            offset,
            cfa_base: CfaBase::Sp,
            cfa_offset,
            fp_offset: 0,
        };
        o.set_unwind(g, &[row(0, 0), row(4, 16), row(16, 0)])
            .unwrap();
        let f = code_fn(&o);
        let mut mem = FakeMem::default();
        mem.put(CODE, &code(&[SUB, NOP, NOP, ADD, RET]));
        for (off, sp) in [(0, S0), (4, S0 - 16), (8, S0 - 16), (12, S0 - 16), (16, S0)] {
            let s = step(&f, &frame(off, sp, CALLER_FP, NATIVE_RA), &mem);
            assert_eq!(s.cfa, Some(S0), "+{off}");
            assert_eq!(caller(&s), REAL_CALLER, "+{off}");
            assert_eq!(s.code, PcCode::NotRead, "+{off}");
        }
        assert!(mem.log.borrow().is_empty(), "a leaf reads nothing");
    }

    #[test]
    fn gcc_frame_with_the_record_at_the_bottom() {
        // stp x29, x30, [sp, #-48]!; mov x29, sp; ...; ldp x29, x30, [sp], #48; ret:
        // CFA = x29 + 48, the record at CFA - 48.
        let mut o = JitObject::with_arch(Arch::Aarch64);
        let g = o.add_function("gcc", CODE, 32).unwrap();
        let row = |offset, cfa_base, cfa_offset, fp_offset| UnwindRow {
            offset,
            cfa_base,
            cfa_offset,
            fp_offset,
        };
        o.set_unwind(
            g,
            &[
                row(0, CfaBase::Sp, 0, 0),
                row(4, CfaBase::Sp, 48, -48),
                row(8, CfaBase::Fp, 48, -48),
                row(28, CfaBase::Sp, 0, 0),
            ],
        )
        .unwrap();
        let f = code_fn(&o);
        let rec = S0 - 48;
        let mut mem = FakeMem::default();
        mem.set(rec, CALLER_FP).set(rec + 8, NATIVE_RA);
        for (off, sp, fp, lr) in [
            (0, S0, CALLER_FP, NATIVE_RA),
            (4, rec, CALLER_FP, NATIVE_RA),
            (12, rec, rec, CLOBBERED_LR),
            (28, S0, CALLER_FP, NATIVE_RA),
        ] {
            let s = step(&f, &frame(off, sp, fp, lr), &mem);
            assert_eq!(s.cfa, Some(S0), "+{off}");
            assert_eq!(caller(&s), REAL_CALLER, "+{off}");
        }
    }

    #[test]
    fn register_rules_for_x30_and_callee_saved_registers() {
        use jit_interface::RegisterRule as R;
        // str x30, [sp, #-16]!; stp x19, x20, [sp, #-16]!; mov x20, x30 ... : a leaf that
        // saves the link register alone, then keeps it in x9 for a while.
        let mut o = JitObject::with_arch(Arch::Aarch64);
        let g = o.add_function("saver", CODE, 32).unwrap();
        let row = |offset, cfa_offset| UnwindRow {
            offset,
            cfa_base: CfaBase::Sp,
            cfa_offset,
            fp_offset: 0,
        };
        o.set_unwind(g, &[row(0, 0), row(4, 16), row(8, 32), row(24, 0)])
            .unwrap();
        o.add_register_rule(g, 4, X30, R::AtCfa(-16)).unwrap();
        o.add_register_rule(g, 8, 19, R::AtCfa(-32)).unwrap();
        o.add_register_rule(g, 8, 20, R::AtCfa(-24)).unwrap();
        o.add_register_rule(g, 16, X30, R::InRegister(9)).unwrap();
        o.add_register_rule(g, 20, X30, R::Undefined).unwrap();
        o.add_register_rule(g, 24, X30, R::SameValue).unwrap();
        o.add_register_rule(g, 24, 19, R::SameValue).unwrap();
        o.add_register_rule(g, 24, 20, R::SameValue).unwrap();
        let f = code_fn(&o);
        let mut mem = FakeMem::default();
        mem.set(S0 - 16, NATIVE_RA)
            .set(S0 - 32, 0x1919)
            .set(S0 - 24, 0x2020);
        let mut all = FakeRegs::default();
        all.0.extend([
            (9, NATIVE_RA),
            (19, 0xc19),
            (20, 0xc20),
            (X30, CLOBBERED_LR),
        ]);
        let at = |off: u64, sp: u64, lr: u64| {
            let regs = frame(off, sp, CALLER_FP, lr);
            step_at(&f, regs.pc, &regs, false, &all, &mem)
        };
        // Entry: x30. Saved: the slot, not the clobbered x30. In x9. Undefined: no caller.
        assert_eq!(caller(&at(0, S0, NATIVE_RA)), REAL_CALLER);
        assert_eq!(caller(&at(4, S0 - 16, CLOBBERED_LR)), REAL_CALLER);
        assert_eq!(caller(&at(12, S0 - 32, CLOBBERED_LR)), REAL_CALLER);
        assert_eq!(caller(&at(16, S0 - 32, CLOBBERED_LR)), REAL_CALLER);
        stopped(&at(20, S0 - 32, CLOBBERED_LR), "undefined");
        assert_eq!(caller(&at(24, S0, NATIVE_RA)), REAL_CALLER);
        // The callee-saved registers as GDB gets them (generic code, aarch64 numbers).
        let mut regs_here = all.clone();
        regs_here.0.insert(X30, CLOBBERED_LR);
        let mut got = saved_registers(&f, CODE + 12, S0, &regs_here, &mem);
        got.sort_unstable();
        assert_eq!(got, [(19, 0x1919), (20, 0x2020), (X30, NATIVE_RA)]);
        // An x30 slot that cannot be read: no caller, saying so.
        let empty = FakeMem::default();
        let regs = frame(4, S0 - 16, CALLER_FP, CLOBBERED_LR);
        stopped(
            &step_at(&f, regs.pc, &regs, false, &all, &empty),
            "unreadable",
        );
    }

    #[test]
    fn corrupt_frames_end_the_backtrace() {
        let f = code_fn(&fp_object(true));
        let mut mem = frame_mem();
        // x29 below sp, a misaligned x29, an unreadable record, an outermost frame.
        stopped(&step(&f, &frame(12, S0 - 32, S0 - 64, 0), &mem), "below sp");
        stopped(
            &step(&f, &frame(12, S0 - 32, S0 - 12, 0), &mem),
            "not 8-byte aligned",
        );
        stopped(
            &step(&f, &frame(12, S0 - 32, S0 + 0x1000, 0), &mem),
            "unreadable",
        );
        stopped(
            &step(&f, &frame(12, S0 - 32, S0 - 16 + (MAX_FRAME + 64), 0), &mem),
            "exceeds",
        );
        mem.set(S0 - 8, 0);
        stopped(&step(&f, &frame(12, S0 - 32, S0 - 16, 0), &mem), OUTERMOST);
        mem.set(S0 - 8, 1 << 60);
        stopped(
            &step(&f, &frame(12, S0 - 32, S0 - 16, 0), &mem),
            "not a user-space address",
        );
        // x30 0 at an entry: the outermost frame too.
        stopped(&step(&f, &frame(0, S0, CALLER_FP, 0), &mem), OUTERMOST);
    }

    // ---- whole backtraces through the index, with aarch64's DWARF numbers ----

    const A: u64 = 0x40_0000_1000;
    const B: u64 = 0x40_0000_2000;
    const LEAF: u64 = 0x40_0000_3000;

    /// `a` and `b` are frame-record functions (canonical, 0x100 bytes), `leaf` a leaf
    /// (0x40 bytes, nothing saved).
    fn machine() -> (Index, FakeMem) {
        let mut o = JitObject::with_arch(Arch::Aarch64);
        for (name, start) in [("a", A), ("b", B)] {
            let f = o.add_function(name, start, 0x100).unwrap();
            o.set_frame_pointer(f, 4, 8).unwrap();
            o.add_epilogue(f, 0xfc, 0x100).unwrap();
        }
        let leaf = o.add_function("leaf", LEAF, 0x40).unwrap();
        o.set_unwind(leaf, &[UnwindRow::AARCH64_ENTRY]).unwrap();
        let mut index = Index::new();
        let mem = FakeMem::default();
        index.add(
            &[Decoded {
                object: o,
                live: None,
            }],
            &mem,
        );
        (index, mem)
    }

    /// Walks from `regs` as GDB would, each caller with the registers the reader gave:
    /// the function names and the stop reason.
    fn backtrace(index: &mut Index, mem: &FakeMem, mut regs: FakeRegs) -> (Vec<String>, String) {
        Memo::clear();
        let mut names = Vec::new();
        for _ in 0..20 {
            match unwind(index, &regs, mem) {
                Outcome::NotOurs(why) => return (names, why.into()),
                Outcome::Refused(why) => return (names, why),
                Outcome::Frame { func, step, .. } => {
                    names.push(func.name().to_owned());
                    let c = step.caller.map_err(|why| (names.clone(), why));
                    let c = match c {
                        Ok(c) => c,
                        Err((names, why)) => return (names, why),
                    };
                    regs.0.insert(PC, c.pc);
                    regs.0.insert(SP, c.sp);
                    match c.fp {
                        Some(fp) => regs.0.insert(X29, fp),
                        None => regs.0.remove(&X29),
                    };
                    match c.lr {
                        Some(lr) => regs.0.insert(X30, lr),
                        None => regs.0.remove(&X30),
                    };
                }
            }
        }
        panic!("the walk did not end: {names:?}");
    }

    fn regs(pc: u64, sp: u64, fp: u64, lr: u64) -> FakeRegs {
        let mut r = FakeRegs::default();
        r.0.extend([(PC, pc), (SP, sp), (X29, fp), (X30, lr)]);
        r
    }

    #[test]
    fn a_leaf_called_by_jit_frames_called_by_native_code() {
        let (mut index, mut mem) = machine();
        // native -> a (record at fp_a) -> b (record at fp_b) -> leaf (innermost, at its
        // entry: the return address into b in x30).
        let (fp_a, fp_b) = (S0 - 16, S0 - 0x60);
        mem.set(fp_a, CALLER_FP).set(fp_a + 8, NATIVE_RA);
        mem.set(fp_b, fp_a).set(fp_b + 8, A + 0x40);
        let sp = fp_b - 0x20;
        let (names, why) = backtrace(&mut index, &mem, regs(LEAF, sp, fp_b, B + 0x24));
        assert_eq!(names, ["leaf", "b", "a"]);
        assert_eq!(why, "the PC is not in registered JIT code");
        // The frame ids GDB asks for: (function, CFA), no memory needed right after unwind.
        let r = regs(B + 0x24, sp, fp_b, B + 0x24);
        assert!(matches!(
            unwind(&mut index, &r, &mem),
            Outcome::Frame { .. }
        ));
        let id = crate::unwind::frame_id(&mut index, &r, &FakeMem::default());
        assert_eq!(id, Some((B, fp_b + 16)));
    }

    #[test]
    fn x86_64_register_numbers_are_not_read_for_aarch64_code() {
        let (mut index, mem) = machine();
        // Register 16 (x86-64 rip, aarch64 x16) holds an address in `a`; pc 32 is unknown.
        let mut r = FakeRegs::default();
        r.0.extend([(16, A + 0x10), (7, S0), (6, S0 - 16)]);
        let (names, why) = backtrace(&mut index, &mem, r);
        assert!(names.is_empty());
        assert_eq!(why, "the PC is not in registered JIT code");
    }

    #[test]
    fn a_pc_read_with_the_other_architecture_numbers_is_refused() {
        // Both architectures registered (two inferiors): x86-64's rip (16) is tried first;
        // it holds an address in the aarch64 function `a` (x16 of an aarch64 frame).
        let (mut index, mut mem) = machine();
        let mut x = JitObject::with_arch(Arch::X86_64);
        let f = x.add_function("x86", 0x5555_0000_1000, 0x40).unwrap();
        x.set_frame_pointer(f, 1, 4).unwrap();
        index.add(
            &[Decoded {
                object: x,
                live: None,
            }],
            &mem,
        );
        let mut r = regs(A + 0x10, S0 - 16, S0 - 16, 0);
        r.0.insert(16, A + 0x10);
        Memo::clear();
        match unwind(&mut index, &r, &mem) {
            Outcome::Refused(why) => {
                assert!(why.contains("read as x86-64"), "{why}");
                assert!(why.contains("a function of aarch64 code"), "{why}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // With rip elsewhere, the aarch64 pc is found.
        r.0.insert(16, 0x10);
        mem.set(S0 - 16, CALLER_FP).set(S0 - 8, NATIVE_RA);
        let (names, _) = backtrace(&mut index, &mem, r);
        assert_eq!(names, ["a"]);
    }

    #[test]
    fn return_address_at_a_function_end_uses_pc_minus_one() {
        // `a` ends with a `bl` (a noreturn helper); `b` starts right after it.
        let mut o = JitObject::with_arch(Arch::Aarch64);
        for (name, start) in [("a", A), ("b", A + 0x40)] {
            let f = o.add_function(name, start, 0x40).unwrap();
            o.set_frame_pointer(f, 4, 8).unwrap();
        }
        let mut index = Index::new();
        let mut mem = FakeMem::default();
        index.add(
            &[Decoded {
                object: o,
                live: None,
            }],
            &mem,
        );
        let fp_a = S0 - 16;
        mem.set(fp_a, CALLER_FP).set(fp_a + 8, NATIVE_RA);
        // A caller frame: x30 is its pc (a's end), as the bl left it.
        let (names, _) = backtrace(&mut index, &mem, regs(A + 0x40, fp_a - 16, fp_a, A + 0x40));
        assert_eq!(names, ["a"]);
        // The innermost frame at b's first instruction: x30 is another address, so `b`
        // (entry: the return address in x30).
        let (names, _) = backtrace(&mut index, &mem, regs(A + 0x40, S0, CALLER_FP, NATIVE_RA));
        assert_eq!(names, ["b"]);
    }

    #[test]
    fn saved_register_slots_at_cfa_minus_8() {
        use jit_interface::RegisterRule as R;
        // stp x19, x20, [sp, #-16]! in a leaf: x20 at CFA - 8.
        let rules = [
            SavedRegister {
                offset: 4,
                reg: 19,
                rule: R::AtCfa(-16),
            },
            SavedRegister {
                offset: 4,
                reg: 20,
                rule: R::AtCfa(-8),
            },
        ];
        let f = CodeFn::new("l", CODE, 16, Arch::Aarch64, &[UnwindRow::AARCH64_ENTRY])
            .with_register_rules(&rules);
        let mut mem = FakeMem::default();
        mem.set(S0 - 16, 0x19).set(S0 - 8, 0x20);
        let mut got = saved_registers(&f, CODE + 8, S0, &FakeRegs::default(), &mem);
        got.sort_unstable();
        assert_eq!(got, [(19, 0x19), (20, 0x20)]);
    }
}
