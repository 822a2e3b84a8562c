//! x86-64: DWARF registers rbp 6, rsp 7, rip 16. A `call` pushes the return address, so
//! the caller's rsp is the CFA and its rip is at CFA - 8; where the caller's rbp is depends
//! on the row (saved at CFA + `fp_offset`, or still in rbp).
//!
//! Sanity checks, in the spirit of frame-pointer profilers, turn a corrupt stack into the
//! end of the backtrace instead of a loop or a lie: the CFA is 8-byte aligned and in user
//! space; when rsp looks like a stack pointer (non-zero, aligned, in user space) the CFA is
//! strictly above it and at most [`MAX_FRAME`] bytes away, and an rbp-based rule needs rbp
//! at or above rsp. A function may clobber rsp once its frame pointer is set up (GDB's own
//! reader test does `xor $-1, %rsp`): an rsp that does not look like a stack pointer is
//! then simply not used for checks by an rbp-based rule. The caller's CFA being above this
//! one follows when the caller is unwound, since its rsp is this frame's CFA.
//!
//! ## Epilogues nobody declared
//! A frame-pointer function's rows say CFA = rbp + 16 from its prologue to its end unless
//! its epilogues were declared (`JitObject::add_epilogue`, or explicit rows that go back to
//! rsp). Many JITs describe only the prologue (cranelift declares no epilogue), and then the
//! rbp rule is wrong on the `ret` after `pop rbp` / `leave`: rbp already holds the caller's
//! value, so the caller would be skipped. GDB's amd64 epilogue unwinder covers this for ELF
//! code by looking at the instruction at the PC; frames claimed by a reader get no such help,
//! so the reader does the same, and a little more. For such a function, when the row at the
//! PC is rbp-based and the PC is not known to be a return address (see
//! [`crate::unwind`]), it reads the code at the PC, one `target_read` of at most
//! [`PC_BYTES`] bytes, never past the function's end, and recognises:
//!
//! | code at the PC | the row there |
//! |---|---|
//! | `ret` (`c3`), `rep ret` (`f3 c3`), `ret imm16` (`c2 iw`) | CFA = rsp + 8, rbp unchanged |
//! | `pop rbp` (`5d`) followed by one of those | CFA = rsp + 16, caller's rbp at rsp |
//! | `leave` (`c9`) followed by one of those | CFA = rbp + 16, caller's rbp at rbp |
//! | `mov rsp, rbp` (`48 89 ec` / `48 8b e5`) followed by `pop rbp` and one of those | CFA = rbp + 16, caller's rbp at rbp |
//!
//! Anything else (bytes that only look alike: `5d` not followed by a return, a `c3` that is
//! not at the PC) keeps the function's row, and so does code that cannot be read. Declared
//! epilogues stay the precise path: no byte is read for such a function.

use jit_interface::{CfaBase, UnwindRow};

use super::{ArchRegs, CallerRegs, FrameRegs, Memory, PcCode, Step};
use crate::index::CodeFn;

pub use jit_interface::arch::x86_64::{RBP, RIP, RSP};

pub const REGS: ArchRegs = ArchRegs {
    pc: RIP,
    sp: RSP,
    fp: RBP,
    lr: None,
};

/// End of the user half of the 48-bit address space.
const USER_TOP: u64 = 1 << 47;

/// Largest frame (CFA minus rsp) accepted. Real frames are far smaller; a larger distance
/// means rbp or rsp holds something else than a stack address.
pub const MAX_FRAME: u64 = 16 << 20;

/// Why a frame whose return address is 0 has no caller: not an error, not reported.
pub const OUTERMOST: &str = "the return address is 0 (outermost frame)";

/// Code bytes read at the PC: the longest form recognised, `mov rsp, rbp; pop rbp;
/// ret imm16`, is 7 bytes.
pub const PC_BYTES: usize = 7;

/// The rows that hold on the epilogue instructions recognised (offsets unused).
const RET_ROW: UnwindRow = UnwindRow {
    offset: 0,
    cfa_base: CfaBase::Sp,
    cfa_offset: 8,
    fp_offset: 0,
};
const POP_ROW: UnwindRow = UnwindRow {
    offset: 0,
    cfa_base: CfaBase::Sp,
    cfa_offset: 16,
    fp_offset: -16,
};
const FRAME_ROW: UnwindRow = UnwindRow {
    offset: 0,
    cfa_base: CfaBase::Fp,
    cfa_offset: 16,
    fp_offset: -16,
};

/// An epilogue instruction recognised at the PC (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// `ret`, `rep ret` or `ret imm16`.
    Ret,
    /// `pop rbp` before a return.
    PopRbp,
    /// `leave` before a return.
    Leave,
    /// `mov rsp, rbp` before `pop rbp` and a return.
    MovRspRbp,
}

impl Epilogue {
    /// The instructions from the PC on, as the debug output names them.
    pub fn describe(self) -> &'static str {
        match self {
            Epilogue::Ret => "ret",
            Epilogue::PopRbp => "pop rbp; ret",
            Epilogue::Leave => "leave; ret",
            Epilogue::MovRspRbp => "mov rsp, rbp; pop rbp; ret",
        }
    }

    fn row(self) -> UnwindRow {
        match self {
            Epilogue::Ret => RET_ROW,
            Epilogue::PopRbp => POP_ROW,
            // The frame is still whole here: the standard frame record at rbp.
            Epilogue::Leave | Epilogue::MovRspRbp => FRAME_ROW,
        }
    }
}

/// Recognises an epilogue at the start of `code` (the bytes from the PC to at most the
/// function's end).
pub fn epilogue_at(code: &[u8]) -> Option<Epilogue> {
    // A return instruction at the start of `b`.
    let is_ret = |b: &[u8]| matches!(b, [0xc3, ..] | [0xf3, 0xc3, ..] | [0xc2, _, _, ..]);
    match code {
        b if is_ret(b) => Some(Epilogue::Ret),
        [0x5d, rest @ ..] if is_ret(rest) => Some(Epilogue::PopRbp),
        [0xc9, rest @ ..] if is_ret(rest) => Some(Epilogue::Leave),
        [0x48, 0x89, 0xec, 0x5d, rest @ ..] | [0x48, 0x8b, 0xe5, 0x5d, rest @ ..]
            if is_ret(rest) =>
        {
            Some(Epilogue::MovRspRbp)
        }
        _ => None,
    }
}

/// Were `rows` given epilogues: does an rsp-based row follow an rbp-based one?
fn epilogues_declared(rows: &[UnwindRow]) -> bool {
    rows.iter()
        .skip_while(|r| r.cfa_base != CfaBase::Fp)
        .any(|r| r.cfa_base == CfaBase::Sp)
}

fn looks_like_stack_pointer(sp: u64) -> bool {
    sp != 0 && sp % 8 == 0 && sp < USER_TOP
}

/// Is `frame.pc` the word just below `frame.sp`, where the `call` that made this frame a
/// caller pushed it?
pub fn pushed_return_address(frame: FrameRegs, mem: &dyn Memory) -> bool {
    frame
        .sp
        .and_then(|sp| sp.checked_sub(8))
        .and_then(|slot| mem.read_u64(slot))
        == Some(frame.pc)
}

/// The row that holds at the frame's PC: `func`'s row for `lookup_pc`, or, for a
/// frame-pointer function without declared epilogues, the row of the epilogue instruction
/// at the PC (module docs). `at_return_address`: the PC is known to be a return address
/// (the instruction after a call: the body, where the function's rows hold), so the code
/// is not read.
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
    // `lookup_pc` differs from the PC only in a caller frame whose PC is past the
    // function's end (see `crate::unwind`): a return address too.
    if row.cfa_base != CfaBase::Fp
        || at_return_address
        || lookup_pc != regs.pc
        || epilogues_declared(func.rows())
    {
        return Ok((row, PcCode::NotRead));
    }
    // Bytes past the function's end belong to something else, maybe to nothing mapped.
    let len = func.end.saturating_sub(regs.pc).min(PC_BYTES as u64) as usize;
    let mut code = [0u8; PC_BYTES];
    if len == 0 || !mem.read(regs.pc, &mut code[..len]) {
        return Ok((row, PcCode::Unreadable { len }));
    }
    Ok(match epilogue_at(&code[..len]) {
        Some(e) => (e.row(), PcCode::Epilogue(super::Epilogue::X86_64(e))),
        None => (row, PcCode::Body),
    })
}

/// The canonical frame address `row` gives, and the value of the register it is based on.
fn cfa_of(row: &UnwindRow, regs: &FrameRegs) -> Result<(u64, u64), String> {
    let (base_name, base) = match row.cfa_base {
        CfaBase::Sp => ("rsp", regs.sp),
        CfaBase::Fp => ("rbp", regs.fp),
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

/// The canonical frame address of the frame (what [`step`] computes, without its reads
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

/// Applies the row that holds at the frame's PC ([`row_at_pc`], the code at the PC read if
/// need be) to the frame's registers.
pub fn step(func: &CodeFn, lookup_pc: u64, regs: &FrameRegs, mem: &dyn Memory) -> Step {
    step_at(func, lookup_pc, regs, false, mem)
}

/// [`step`] for a frame whose PC may be known to be a return address ([`row_at_pc`]).
pub fn step_at(
    func: &CodeFn,
    lookup_pc: u64,
    regs: &FrameRegs,
    at_return_address: bool,
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
        return stop(found, format!("CFA {cfa:#x} is not above rbp {base:#x}"));
    }
    if let Some(sp) = regs.sp.filter(|&sp| looks_like_stack_pointer(sp)) {
        if row.cfa_base == CfaBase::Fp && base < sp {
            return stop(found, format!("rbp {base:#x} is below rsp {sp:#x}"));
        }
        if cfa <= sp {
            return stop(found, format!("CFA {cfa:#x} is not above rsp {sp:#x}"));
        }
        if cfa - sp > MAX_FRAME {
            return stop(
                found,
                format!(
                    "a frame of {} bytes (rsp {sp:#x}, CFA {cfa:#x}) exceeds the {MAX_FRAME}-byte limit",
                    cfa - sp
                ),
            );
        }
    }
    // The usual frame record, saved rbp at CFA - 16 below the return address: one read for
    // both (every target read is a system call in GDB, and this runs on every JIT frame).
    // Otherwise, or if it fails, word by word below, which says which word is unreadable.
    let mut record = [0u8; 16];
    let pair = (row.fp_offset == -16 && cfa >= 16 && mem.read(cfa - 16, &mut record)).then(|| {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&record[i..i + 8]);
            u64::from_le_bytes(w)
        };
        (word(0), word(8))
    });
    let Some(ra) = pair.map(|(_, ra)| ra).or_else(|| mem.read_u64(cfa - 8)) else {
        return stop(
            found,
            format!("the return address at {:#x} is unreadable", cfa - 8),
        );
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
    let fp = if row.fp_offset == 0 {
        regs.fp
    } else if let Some((saved, _)) = pair {
        Some(saved)
    } else {
        let Some(slot) = cfa.checked_add_signed(i64::from(row.fp_offset)) else {
            return stop(
                found,
                format!("the saved rbp slot CFA {:+} overflows", row.fp_offset),
            );
        };
        let Some(saved) = mem.read_u64(slot) else {
            return stop(found, format!("the saved rbp at {slot:#x} is unreadable"));
        };
        Some(saved)
    };
    Step {
        cfa: found,
        caller: Ok(CallerRegs {
            pc: ra,
            sp: cfa,
            fp,
            lr: None,
        }),
        code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Index;
    use crate::unwind::testing::{FakeMem, FakeRegs};
    use crate::unwind::{unwind, Memo, Outcome, PcCode};
    use jit_interface::{Arch, Decoded, JitObject, LiveCheck, UnwindRow};

    const CODE: u64 = 0x5555_0000_1000;
    const STACK: u64 = 0x7ffe_0000_8000;
    const NATIVE_RA: u64 = 0x5555_0000_9999;

    fn func(rows: &[UnwindRow], size: u32) -> CodeFn {
        CodeFn::new("f", CODE, size, Arch::X86_64, rows)
    }

    /// `push rbp` ends at 1, `mov rbp, rsp` at 4, `pop rbp` ends at 30, `ret` at 31; 40 bytes.
    fn fp_func() -> CodeFn {
        let mut o = JitObject::new();
        let f = o.add_function("f", CODE, 40).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 30, 31).unwrap();
        func(
            &o.functions().get(f).unwrap().frame().rows(Arch::X86_64, 40),
            40,
        )
    }

    fn regs(pc_off: u64, sp: u64, fp: Option<u64>) -> FrameRegs {
        FrameRegs {
            pc: CODE + pc_off,
            sp: Some(sp),
            fp,
            lr: None,
        }
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

    #[test]
    fn entry_row_return_address_on_top() {
        let f = fp_func();
        let mut mem = FakeMem::default();
        mem.set(STACK, NATIVE_RA);
        let s = step(&f, CODE, &regs(0, STACK, Some(0x1234)), &mem);
        assert_eq!(s.cfa, Some(STACK + 8));
        let c = caller(&s);
        assert_eq!(
            c,
            CallerRegs {
                pc: NATIVE_RA,
                sp: STACK + 8,
                fp: Some(0x1234),
                lr: None,
            }
        );
    }

    #[test]
    fn after_push_rbp() {
        let f = fp_func();
        let caller_fp = STACK + 0x100;
        let mut mem = FakeMem::default();
        mem.set(STACK, caller_fp).set(STACK + 8, NATIVE_RA);
        // rbp still holds the caller's value here; the row says it is also saved.
        for off in 1..4 {
            let s = step(&f, CODE + off, &regs(off, STACK, Some(caller_fp)), &mem);
            let c = caller(&s);
            assert_eq!((c.pc, c.sp, c.fp), (NATIVE_RA, STACK + 16, Some(caller_fp)));
        }
    }

    #[test]
    fn frame_pointer_body_with_locals() {
        let f = fp_func();
        let fp = STACK + 0x40;
        let mut mem = FakeMem::default();
        mem.set(fp, STACK + 0x200).set(fp + 8, NATIVE_RA);
        for off in 4..30 {
            // rsp anywhere at or below rbp (locals, pushes).
            let s = step(&f, CODE + off, &regs(off, STACK, Some(fp)), &mem);
            assert_eq!(s.cfa, Some(fp + 16));
            let c = caller(&s);
            assert_eq!(
                (c.pc, c.sp, c.fp),
                (NATIVE_RA, fp + 16, Some(STACK + 0x200))
            );
        }
    }

    #[test]
    fn epilogue_after_pop_and_code_after_ret() {
        let f = fp_func();
        let mut mem = FakeMem::default();
        mem.set(STACK, NATIVE_RA);
        // After `pop rbp`: only the return address is left, rbp is the caller's again.
        let s = step(&f, CODE + 30, &regs(30, STACK, Some(0x77_0000)), &mem);
        let c = caller(&s);
        assert_eq!((c.pc, c.sp, c.fp), (NATIVE_RA, STACK + 8, Some(0x77_0000)));
        // After the `ret`, another path through the body: the frame-pointer rule again.
        let fp = STACK + 0x20;
        mem.set(fp, STACK + 0x300).set(fp + 8, NATIVE_RA);
        let s = step(&f, CODE + 31, &regs(31, STACK, Some(fp)), &mem);
        assert_eq!(caller(&s).fp, Some(STACK + 0x300));
    }

    #[test]
    fn frameless_function_with_stack_adjustment() {
        // sub rsp, 24 at offset 0..4; add rsp, 24 at 10..14; ret at 14.
        let rows = [
            UnwindRow::X86_64_ENTRY,
            UnwindRow {
                offset: 4,
                cfa_base: CfaBase::Sp,
                cfa_offset: 32,
                fp_offset: 0,
            },
            UnwindRow {
                offset: 14,
                cfa_base: CfaBase::Sp,
                cfa_offset: 8,
                fp_offset: 0,
            },
        ];
        let f = func(&rows, 15);
        let mut mem = FakeMem::default();
        mem.set(STACK + 24, NATIVE_RA).set(STACK, 0xdead);
        let s = step(&f, CODE + 7, &regs(7, STACK, Some(0x42)), &mem);
        let c = caller(&s);
        assert_eq!((c.pc, c.sp, c.fp), (NATIVE_RA, STACK + 32, Some(0x42)));
        let s = step(&f, CODE + 14, &regs(14, STACK + 24, None), &mem);
        let c = caller(&s);
        assert_eq!((c.pc, c.sp, c.fp), (NATIVE_RA, STACK + 32, None));
    }

    #[test]
    fn clobbered_rsp_still_unwinds_through_rbp() {
        let f = fp_func();
        let fp = STACK + 0x40;
        let mut mem = FakeMem::default();
        mem.set(fp, STACK + 0x200).set(fp + 8, NATIVE_RA);
        // `xor $-1, %rsp` after the frame is set up.
        let s = step(&f, CODE + 10, &regs(10, !STACK, Some(fp)), &mem);
        let c = caller(&s);
        assert_eq!(
            (c.pc, c.sp, c.fp),
            (NATIVE_RA, fp + 16, Some(STACK + 0x200))
        );
        // rsp that was zeroed, or is unknown, is not used either.
        let s = step(&f, CODE + 10, &regs(10, 0, Some(fp)), &mem);
        assert!(s.caller.is_ok());
        let unknown_sp = FrameRegs {
            sp: None,
            ..regs(10, 0, Some(fp))
        };
        assert!(step(&f, CODE + 10, &unknown_sp, &mem).caller.is_ok());
        // But an rsp-based row cannot work without rsp.
        stopped(&step(&f, CODE, &unknown_sp, &mem), "rsp is unknown");
    }

    #[test]
    fn corrupt_frames_end_the_backtrace() {
        let f = fp_func();
        let mem_at = |fp: u64| {
            let mut m = FakeMem::default();
            m.set(fp, STACK + 0x800).set(fp + 8, NATIVE_RA);
            m
        };
        // Misaligned rbp.
        let s = step(
            &f,
            CODE + 10,
            &regs(10, STACK, Some(STACK + 0x43)),
            &mem_at(STACK + 0x43),
        );
        stopped(&s, "aligned");
        // rbp below rsp.
        let s = step(
            &f,
            CODE + 10,
            &regs(10, STACK, Some(STACK - 0x40)),
            &mem_at(STACK - 0x40),
        );
        stopped(&s, "below rsp");
        // A huge frame: rbp a gigabyte above rsp.
        let far = STACK + (1 << 30);
        stopped(
            &step(&f, CODE + 10, &regs(10, STACK, Some(far)), &mem_at(far)),
            "limit",
        );
        // rbp outside user space.
        let kernel = 0xffff_8000_0000_0000;
        stopped(
            &step(
                &f,
                CODE + 10,
                &regs(10, STACK, Some(kernel)),
                &FakeMem::default(),
            ),
            "user space",
        );
        // rbp unknown.
        stopped(
            &step(&f, CODE + 10, &regs(10, STACK, None), &FakeMem::default()),
            "rbp is unknown",
        );
        // Unreadable memory: the return address, then the saved rbp.
        let fp = STACK + 0x40;
        stopped(
            &step(
                &f,
                CODE + 10,
                &regs(10, STACK, Some(fp)),
                &FakeMem::default(),
            ),
            "unreadable",
        );
        let mut m = FakeMem::default();
        m.set(fp + 8, NATIVE_RA);
        stopped(
            &step(&f, CODE + 10, &regs(10, STACK, Some(fp)), &m),
            "saved rbp",
        );
        // A zero return address is the outermost frame; a kernel one is garbage.
        let mut m = FakeMem::default();
        m.set(fp, 0).set(fp + 8, 0);
        stopped(&step(&f, CODE + 10, &regs(10, STACK, Some(fp)), &m), "is 0");
        m.set(fp + 8, 0xffff_ffff_ffff_0000);
        stopped(
            &step(&f, CODE + 10, &regs(10, STACK, Some(fp)), &m),
            "not a user-space",
        );
        // Overflowing CFA.
        stopped(
            &step(&f, CODE + 10, &regs(10, 8, Some(u64::MAX - 8)), &m),
            "overflows",
        );
    }

    #[test]
    fn rows_that_a_broken_decoder_could_produce_do_not_panic() {
        let weird = [
            UnwindRow {
                offset: 0,
                cfa_base: CfaBase::Fp,
                cfa_offset: i32::MIN,
                fp_offset: i32::MAX,
            },
            UnwindRow {
                offset: 2,
                cfa_base: CfaBase::Sp,
                cfa_offset: -8,
                fp_offset: i32::MIN,
            },
        ];
        let mut mem = FakeMem::default();
        mem.set(STACK, NATIVE_RA).set(STACK - 8, NATIVE_RA);
        for off in 0..4 {
            for sp in [0, 8, STACK, u64::MAX, u64::MAX - 7] {
                for fp in [None, Some(0), Some(STACK), Some(u64::MAX)] {
                    let s = step(&func(&weird, 4), CODE + off, &regs(off, sp, fp), &mem);
                    assert!(s.caller.is_err(), "off {off} sp {sp:#x} fp {fp:?}: {s:x?}");
                }
            }
        }
        // No rows at all.
        stopped(
            &step(&func(&[], 4), CODE, &regs(0, STACK, None), &mem),
            "no unwind row",
        );
    }

    // ---- epilogues nobody declared: the code at the PC ----

    const CALLER_FP: u64 = STACK + 0x400;
    /// The caller's rsp once the function returns (the CFA).
    const S0: u64 = STACK + 0x100;

    /// `push rbp; mov rbp, rsp; sub rsp, 16; nop x 4` then `tail`: the frame-pointer
    /// prologue described (push_end 1, setup_end 4), its epilogue not. Returns the function
    /// and the offset where `tail` starts.
    fn undeclared(tail: &[u8]) -> (CodeFn, Vec<u8>, u64) {
        let mut code = vec![0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10];
        code.extend_from_slice(&[0x90; 4]);
        let at = code.len() as u64;
        code.extend_from_slice(tail);
        let mut o = JitObject::new();
        let f = o.add_function("f", CODE, code.len() as u64).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        let rows = o
            .functions()
            .get(f)
            .unwrap()
            .frame()
            .rows(Arch::X86_64, code.len() as u64);
        (func(&rows, code.len() as u32), code, at)
    }

    /// The stack of a frame called from native code (return address NATIVE_RA at S0 - 8,
    /// the caller's rbp saved at S0 - 16), plus the function's code.
    fn stack_with_code(code: &[u8]) -> FakeMem {
        let mut mem = FakeMem::default();
        mem.set(S0 - 8, NATIVE_RA)
            .set(S0 - 16, CALLER_FP)
            .set(S0 - 24, 0xdead_0001)
            .set(S0 - 32, 0xdead_0002)
            .put(CODE, code);
        mem
    }

    /// The real (rsp, rbp) before each instruction of an epilogue, from `leave` / `mov rsp,
    /// rbp` / `add rsp, 16` on, for a function whose locals take 16 bytes below the frame
    /// record: the whole frame, then rsp at the saved rbp, then only the return address.
    const WHOLE: (u64, u64) = (S0 - 32, S0 - 16);
    const AT_SAVED_RBP: (u64, u64) = (S0 - 16, S0 - 16);
    const AT_RETURN: (u64, u64) = (S0 - 8, CALLER_FP);

    const ADD_RSP_16: &[u8] = &[0x48, 0x83, 0xc4, 0x10];

    /// Steps at each instruction of `tail` (instruction lengths `lens`, the machine state
    /// before each in `states`) and checks the caller is the real one, that the code was
    /// read once and what was recognised.
    fn check_epilogue(tail: &[u8], lens: &[u64], states: &[(u64, u64)], seen: &[PcCode]) {
        let (f, code, mut off) = undeclared(tail);
        let mem = stack_with_code(&code);
        for ((len, &(sp, fp)), want) in lens.iter().zip(states).zip(seen) {
            mem.log.borrow_mut().clear();
            let s = step(&f, CODE + off, &regs(off, sp, Some(fp)), &mem);
            let what = format!("{tail:02x?} at +{off} (rsp {sp:#x}, rbp {fp:#x}): {s:x?}");
            assert_eq!(s.code, *want, "{what}");
            let c = s.caller.clone().unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                (c.pc, c.sp, c.fp),
                (NATIVE_RA, S0, Some(CALLER_FP)),
                "{what}"
            );
            assert_eq!(s.cfa, Some(S0), "{what}");
            assert_eq!(mem.reads_in(CODE, CODE + code.len() as u64), 1, "{what}");
            off += len;
        }
    }

    use super::Epilogue::{Leave, MovRspRbp, PopRbp, Ret};
    use PcCode::Body;

    /// What the code at the PC said: x86-64 epilogue `e`.
    #[allow(non_snake_case)]
    fn At(e: super::Epilogue) -> PcCode {
        PcCode::Epilogue(crate::unwind::Epilogue::X86_64(e))
    }

    #[test]
    fn undeclared_pop_rbp_ret() {
        let tail = [ADD_RSP_16, &[0x5d, 0xc3]].concat();
        check_epilogue(
            &tail,
            &[4, 1, 1],
            &[WHOLE, AT_SAVED_RBP, AT_RETURN],
            &[Body, At(PopRbp), At(Ret)],
        );
    }

    #[test]
    fn undeclared_leave_ret() {
        check_epilogue(
            &[0xc9, 0xc3],
            &[1, 1],
            &[WHOLE, AT_RETURN],
            &[At(Leave), At(Ret)],
        );
    }

    #[test]
    fn undeclared_mov_rsp_rbp_pop_rbp_ret_both_encodings() {
        for mov in [[0x48, 0x89, 0xec], [0x48, 0x8b, 0xe5]] {
            let tail = [&mov[..], &[0x5d, 0xc3]].concat();
            check_epilogue(
                &tail,
                &[3, 1, 1],
                &[WHOLE, AT_SAVED_RBP, AT_RETURN],
                &[At(MovRspRbp), At(PopRbp), At(Ret)],
            );
        }
    }

    #[test]
    fn undeclared_rep_ret_and_ret_imm16() {
        // `pop rbp; rep ret` and `pop rbp; ret 8` (the callee pops its arguments).
        check_epilogue(
            &[0x5d, 0xf3, 0xc3],
            &[1, 2],
            &[AT_SAVED_RBP, AT_RETURN],
            &[At(PopRbp), At(Ret)],
        );
        check_epilogue(
            &[0xc9, 0xc2, 0x08, 0x00],
            &[1, 3],
            &[WHOLE, AT_RETURN],
            &[At(Leave), At(Ret)],
        );
    }

    #[test]
    fn epilogue_recognition_looks_at_the_pc_only() {
        let yes: &[(&[u8], Epilogue)] = &[
            (&[0xc3], Ret),
            (&[0xc3, 0xcc, 0xcc], Ret),
            (&[0xf3, 0xc3], Ret),
            (&[0xc2, 0x10, 0x00], Ret),
            (&[0x5d, 0xc3], PopRbp),
            (&[0x5d, 0xf3, 0xc3], PopRbp),
            (&[0x5d, 0xc2, 0x00, 0x01], PopRbp),
            (&[0xc9, 0xc3], Leave),
            (&[0x48, 0x89, 0xec, 0x5d, 0xc3], MovRspRbp),
            (&[0x48, 0x8b, 0xe5, 0x5d, 0xc2, 0x08, 0x00], MovRspRbp),
        ];
        for (code, want) in yes {
            assert_eq!(epilogue_at(code), Some(*want), "{code:02x?}");
        }
        let no: &[&[u8]] = &[
            &[],
            // `c3` inside an instruction, not at the PC: `mov eax, 0xc3`.
            &[0xb8, 0xc3, 0x00, 0x00, 0x00],
            // `pop rbp` not followed by a return: a tail jump, a nop, the function's end.
            &[0x5d, 0xe9, 0x00, 0x00, 0x00, 0x00],
            &[0x5d, 0x90],
            &[0x5d],
            // `leave` then something else; `ret imm16` cut by the function's end.
            &[0xc9, 0x90],
            &[0xc2, 0x08],
            &[0x5d, 0xc2],
            // `mov rsp, rbp` then a return without `pop rbp`, or then only `pop rbp`.
            &[0x48, 0x89, 0xec, 0xc3],
            &[0x48, 0x89, 0xec, 0x5d],
            // Other `mov`s between rsp and rbp: `mov rbp, rsp` (89 e5), `mov rsp, rbp`
            // with a 32-bit operand (no REX.W).
            &[0x48, 0x89, 0xe5, 0x5d, 0xc3],
            &[0x89, 0xec, 0x5d, 0xc3],
            // `pop r13` (41 5d), `pause` (f3 90), `push rbp` (55).
            &[0x41, 0x5d, 0xc3],
            &[0xf3, 0x90],
            &[0x55, 0xc3],
        ];
        for code in no {
            assert_eq!(epilogue_at(code), None, "{code:02x?}");
        }
    }

    #[test]
    fn look_alikes_keep_the_frame_pointer_rule() {
        // `pop rbp; jmp` (a tail call), `mov eax, 0xc3`, a lone `pop rbp` at the end of the
        // function (the `ret` after it is another function's byte: not read).
        for tail in [
            &[0x5d, 0xe9, 0, 0, 0, 0][..],
            &[0xb8, 0xc3, 0, 0, 0, 0xc3][..],
            &[0x5d][..],
        ] {
            let (f, code, off) = undeclared(tail);
            let mut mem = stack_with_code(&code);
            mem.put(CODE + code.len() as u64, &[0xc3]);
            // The frame is whole there: the frame-pointer rule is right.
            let (sp, fp) = AT_SAVED_RBP;
            let s = step(&f, CODE + off, &regs(off, sp, Some(fp)), &mem);
            assert_eq!(s.code, Body, "{tail:02x?}");
            assert_eq!(caller(&s).fp, Some(CALLER_FP));
            let read = mem
                .log
                .borrow()
                .iter()
                .find(|(a, _)| *a == CODE + off)
                .copied();
            assert_eq!(read, Some((CODE + off, tail.len().min(PC_BYTES))));
        }
    }

    #[test]
    fn unreadable_code_falls_back_to_the_rows() {
        let (f, code, off) = undeclared(&[0x5d, 0xc3]);
        let mut mem = stack_with_code(&code);
        // The caller's frame record above (what the rbp rule reads at the `ret`).
        mem.set(CALLER_FP, STACK + 0x800)
            .set(CALLER_FP + 8, 0x5555_0000_7777);
        mem.bytes.retain(|&a, _| !(CODE..CODE + 64).contains(&a));
        let (sp, fp) = AT_RETURN;
        let s = step(&f, CODE + off + 1, &regs(off + 1, sp, Some(fp)), &mem);
        // The PC's 1 byte (the function's last) was asked for, then the rows applied: the
        // rbp rule, which at a `ret` skips the caller (what the reader did before).
        assert_eq!(s.code, PcCode::Unreadable { len: 1 });
        assert_eq!(caller(&s).pc, 0x5555_0000_7777);
    }

    #[test]
    fn declared_epilogues_and_return_addresses_read_no_code() {
        // Declared: the rows hold, at the `ret` too, and no byte of code is read.
        let f = fp_func();
        let mut mem = FakeMem::default();
        mem.set(STACK, NATIVE_RA).put(CODE, &[0xc3; 40]);
        for (off, sp) in [(10, STACK - 0x40), (30, STACK)] {
            let fp = STACK - 8;
            mem.set(fp, CALLER_FP).set(fp + 8, NATIVE_RA);
            let s = step(&f, CODE + off, &regs(off, sp, Some(fp)), &mem);
            assert_eq!(s.code, PcCode::NotRead);
            assert!(s.caller.is_ok(), "{s:?}");
        }
        assert_eq!(mem.reads_in(CODE, CODE + 40), 0);
        // Rows without an rbp-based one (frameless): nothing to correct, nothing read.
        let rows = [UnwindRow::X86_64_ENTRY];
        let s = step(&func(&rows, 8), CODE, &regs(0, STACK, None), &mem);
        assert_eq!((s.code, caller(&s).pc), (PcCode::NotRead, NATIVE_RA));
        assert_eq!(mem.reads_in(CODE, CODE + 40), 0);
        // A return address: after a call, in the body. Not read even on a `ret` byte.
        let (f, code, off) = undeclared(&[0x5d, 0xc3]);
        let mem = stack_with_code(&code);
        let (sp, fp) = AT_SAVED_RBP;
        let s = step_at(&f, CODE + off, &regs(off, sp, Some(fp)), true, &mem);
        assert_eq!(s.code, PcCode::NotRead);
        assert_eq!(caller(&s).pc, NATIVE_RA);
        assert_eq!(mem.reads_in(CODE, CODE + code.len() as u64), 0);
    }

    // ---- whole backtraces through the index, as GDB drives them ----

    const LIVE_SLOT: u64 = 0x5555_0100_0000;

    /// A stack of JIT frames built like real code would build it.
    struct Machine {
        index: Index,
        mem: FakeMem,
    }

    impl Machine {
        fn new(fns: &[(&str, u64, u32)], live_key: Option<u64>) -> Machine {
            let mut o = JitObject::with_arch(Arch::X86_64);
            for &(name, start, size) in fns {
                let f = o.add_function(name, start, u64::from(size)).unwrap();
                o.set_frame_pointer(f, 1, 4).unwrap();
            }
            let mut mem = FakeMem::default();
            let live = live_key.map(|key| {
                mem.set(LIVE_SLOT, key);
                LiveCheck {
                    address: LIVE_SLOT,
                    key,
                }
            });
            let mut index = Index::new();
            index.add(&[Decoded { object: o, live }], &mem);
            Machine { index, mem }
        }

        /// Walks from (pc, sp, fp); returns the function names and the stop reason.
        fn backtrace(&mut self, pc: u64, sp: u64, fp: u64) -> (Vec<String>, String) {
            let mut names = Vec::new();
            let mut regs = FakeRegs::default();
            regs.0.insert(RIP, pc);
            regs.0.insert(RSP, sp);
            regs.0.insert(RBP, fp);
            for _ in 0..100 {
                match unwind(&mut self.index, &regs, &self.mem) {
                    Outcome::NotOurs(why) => return (names, why.into()),
                    Outcome::Refused(why) => return (names, why),
                    Outcome::Frame { func, step, .. } => {
                        names.push(func.name().to_owned());
                        match step.caller {
                            Err(why) => return (names, why),
                            Ok(c) => {
                                regs.0.insert(RIP, c.pc);
                                regs.0.insert(RSP, c.sp);
                                match c.fp {
                                    Some(fp) => regs.0.insert(RBP, fp),
                                    None => regs.0.remove(&RBP),
                                };
                            }
                        }
                    }
                }
            }
            panic!("the walk did not end: {names:?}");
        }
    }

    const A: u64 = 0x5555_0000_1000;
    const B: u64 = 0x5555_0000_2000;

    /// Writes a frame record (saved rbp, return address) at `fp`.
    fn record(mem: &mut FakeMem, fp: u64, saved_fp: u64, ra: u64) {
        mem.set(fp, saved_fp).set(fp + 8, ra);
    }

    #[test]
    fn jit_frames_chain_to_native() {
        let mut m = Machine::new(&[("a", A, 0x100), ("b", B, 0x100)], Some(99));
        // b (innermost) called by a, called by native code.
        let (fp_b, fp_a) = (STACK + 0x20, STACK + 0x60);
        record(&mut m.mem, fp_b, fp_a, A + 0x30);
        record(&mut m.mem, fp_a, STACK + 0x400, NATIVE_RA);
        m.mem.set(fp_b + 8, A + 0x30);
        let (names, why) = m.backtrace(B + 0x10, STACK, fp_b);
        assert_eq!(names, ["b", "a"]);
        assert_eq!(why, "the PC is not in registered JIT code");
    }

    #[test]
    fn frame_ids_need_no_memory_and_match_the_unwound_cfa() {
        let mut m = Machine::new(&[("a", A, 0x100), ("b", B, 0x100)], Some(99));
        let (fp_b, fp_a) = (STACK + 0x20, STACK + 0x60);
        record(&mut m.mem, fp_b, fp_a, A + 0x30);
        record(&mut m.mem, fp_a, STACK + 0x400, NATIVE_RA);
        let mut regs = FakeRegs::default();
        regs.0.insert(RIP, B + 0x10);
        regs.0.insert(RSP, STACK);
        regs.0.insert(RBP, fp_b);
        let Outcome::Frame { func, step, .. } = unwind(&mut m.index, &regs, &m.mem) else {
            panic!("b is ours")
        };
        let id = crate::unwind::frame_id(&mut m.index, &regs, &FakeMem::default());
        assert_eq!(id, Some((func.start, step.cfa.unwrap())));
        assert_eq!(id, Some((B, fp_b + 16)));
        // In the prologue the CFA is rsp-based; past the end of all code nothing is ours.
        regs.0.insert(RIP, A + 1);
        let id = crate::unwind::frame_id(&mut m.index, &regs, &FakeMem::default());
        assert_eq!(id, Some((A, STACK + 16)));
        regs.0.insert(RIP, 0x1000);
        assert_eq!(crate::unwind::frame_id(&mut m.index, &regs, &m.mem), None);
    }

    #[test]
    fn frame_pointer_loops_end() {
        let mut m = Machine::new(&[("a", A, 0x100), ("b", B, 0x100)], None);
        let fp = STACK + 0x20;
        // The saved rbp points back to the same record, whose return address is in `a`.
        record(&mut m.mem, fp, fp, A + 0x30);
        let (names, why) = m.backtrace(B + 0x10, STACK, fp);
        assert_eq!(names, ["b", "a"]);
        assert!(why.contains("below rsp"), "{why}");
        // Two records pointing at each other: the second hop goes down the stack.
        let (fp1, fp2) = (STACK + 0x20, STACK + 0x60);
        record(&mut m.mem, fp1, fp2, A + 0x30);
        record(&mut m.mem, fp2, fp1, B + 0x30);
        let (names, why) = m.backtrace(B + 0x10, STACK, fp1);
        assert_eq!(names, ["b", "a", "b"]);
        assert!(why.contains("below rsp"), "{why}");
    }

    #[test]
    fn freed_code_is_not_unwound() {
        let mut m = Machine::new(&[("a", A, 0x100)], Some(5));
        let fp = STACK + 0x20;
        record(&mut m.mem, fp, STACK + 0x400, NATIVE_RA);
        assert_eq!(m.backtrace(A + 0x10, STACK, fp).0, ["a"]);
        m.mem.set(LIVE_SLOT, 0);
        let (names, why) = m.backtrace(A + 0x10, STACK, fp);
        assert!(names.is_empty());
        assert_eq!(why, "the PC is in no live registered function");
    }

    #[test]
    fn return_address_at_a_function_end_uses_pc_minus_one() {
        // `a` ends with a call (e.g. to a noreturn helper); `b` starts right after it.
        let mut m = Machine::new(&[("a", A, 0x40), ("b", A + 0x40, 0x40)], None);
        let fp_a = STACK + 0x60;
        record(&mut m.mem, fp_a, STACK + 0x400, NATIVE_RA);
        // A caller frame: its pc (a's end) was pushed just below its sp.
        let sp = STACK + 0x40;
        m.mem.set(sp - 8, A + 0x40);
        let (names, _) = m.backtrace(A + 0x40, sp, fp_a);
        assert_eq!(names, ["a"]);
        // The innermost frame at b's first instruction: no such push, so it is `b`
        // (entry row: the return address is on top of the stack).
        let sp0 = STACK + 0x100;
        m.mem.set(sp0, NATIVE_RA).set(sp0 - 8, 0x1111);
        let (names, _) = m.backtrace(A + 0x40, sp0, 0x42);
        assert_eq!(names, ["b"]);
        // Just past a function with nothing after it: only a caller frame is ours.
        let mut m = Machine::new(&[("a", A, 0x40)], None);
        record(&mut m.mem, fp_a, STACK + 0x400, NATIVE_RA);
        m.mem.set(sp - 8, A + 0x40);
        assert_eq!(m.backtrace(A + 0x40, sp, fp_a).0, ["a"]);
        m.mem.set(sp - 8, 0);
        assert!(m.backtrace(A + 0x40, sp, fp_a).0.is_empty());
    }

    /// `a` calls `b`; neither declares its epilogue. `b`: push rbp; mov rbp, rsp; sub rsp,
    /// 16; 4 x nop; add rsp, 16; pop rbp; ret (offsets 0, 1, 4, 8..12, 12, 16, 17). `a`
    /// returns from its call to `pop rbp; ret` at +0x30. Code is filled with `int3`.
    fn epilogue_machine() -> (Machine, u64) {
        let mut m = Machine::new(&[("a", A, 0x100), ("b", B, 0x100)], None);
        m.mem.put(A, &[0xcc; 0x100]).put(B, &[0xcc; 0x100]);
        m.mem
            .put(A, &[0x55, 0x48, 0x89, 0xe5])
            .put(A + 0x30, &[0x5d, 0xc3]);
        let b = [
            &[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10][..],
            &[0x90; 4],
            &[0x48, 0x83, 0xc4, 0x10, 0x5d, 0xc3],
        ]
        .concat();
        m.mem.put(B, &b);
        // Native code called `a` with rsp S0: a's frame record at fp_a, its call to `b`
        // pushed A + 0x30 just below.
        let fp_a = S0 - 16;
        record(&mut m.mem, fp_a, CALLER_FP, NATIVE_RA);
        m.mem.set(fp_a - 8, A + 0x30);
        (m, fp_a)
    }

    #[test]
    fn stepping_through_an_undeclared_epilogue_keeps_every_caller() {
        let (mut m, fp_a) = epilogue_machine();
        let (sp_b, fp_b) = (fp_a - 8, fp_a - 16);
        record(&mut m.mem, fp_b, fp_a, A + 0x30);
        // The real (rsp, rbp) before each instruction of b, prologue to `ret`.
        let states = [
            (0, sp_b, fp_a),
            (1, sp_b - 8, fp_a),
            (4, fp_b, fp_b),
            (8, fp_b - 16, fp_b),
            (12, fp_b - 16, fp_b),
            (16, fp_b, fp_b),
            (17, sp_b, fp_a),
        ];
        for (off, sp, fp) in states {
            Memo::clear();
            m.mem.log.borrow_mut().clear();
            let (names, why) = m.backtrace(B + off, sp, fp);
            assert_eq!(names, ["b", "a"], "b+{off}: {why}");
            assert_eq!(why, "the PC is not in registered JIT code", "b+{off}");
            // The code at b's PC, at most; never at a's return address, which is the
            // caller just produced.
            let read_b = m.mem.reads_in(B, B + 0x100);
            assert!(read_b <= 1, "b+{off}: {read_b} reads of b's code");
            assert_eq!(m.mem.reads_in(A, A + 0x100), 0, "b+{off}");
        }
    }

    #[test]
    fn frame_ids_stay_the_same_through_an_undeclared_epilogue() {
        let (mut m, fp_a) = epilogue_machine();
        let (sp_b, fp_b) = (fp_a - 8, fp_a - 16);
        record(&mut m.mem, fp_b, fp_a, A + 0x30);
        let id_at = |m: &mut Machine, off: u64, sp: u64, fp: u64, fresh: bool| {
            let mut r = FakeRegs::default();
            r.0.extend([(RIP, B + off), (RSP, sp), (RBP, fp)]);
            if fresh {
                Memo::clear();
            } else {
                assert!(matches!(
                    unwind(&mut m.index, &r, &m.mem),
                    Outcome::Frame { .. }
                ));
            }
            let before = m.mem.log.borrow().len();
            let id = crate::unwind::frame_id(&mut m.index, &r, &m.mem);
            (id, m.mem.log.borrow().len() - before)
        };
        for fresh in [false, true] {
            // Body, `pop rbp`, `ret`: the same CFA, fp_a (the caller's rsp).
            for (off, sp, fp) in [(8, fp_b - 16, fp_b), (16, fp_b, fp_b), (17, sp_b, fp_a)] {
                let (id, reads) = id_at(&mut m, off, sp, fp, fresh);
                assert_eq!(id, Some((B, fp_a)), "b+{off}, fresh {fresh}");
                // Right after `unwind` of the same frame: no read. Otherwise the code at
                // the PC, once.
                assert_eq!(reads, usize::from(fresh), "b+{off}, fresh {fresh}");
            }
        }
    }

    #[test]
    fn a_caller_frame_not_produced_by_the_reader_reads_its_code_and_stays_right() {
        // a's frame at its return address `pop rbp; ret`, with registers the reader did not
        // give (e.g. a native callee unwound by GDB): its code is read, `pop rbp` found,
        // and rsp (= rbp there) gives the same caller as the frame-pointer rule.
        let (mut m, fp_a) = epilogue_machine();
        Memo::clear();
        let mut r = FakeRegs::default();
        r.0.extend([(RIP, A + 0x30), (RSP, fp_a), (RBP, fp_a)]);
        let Outcome::Frame { step, .. } = unwind(&mut m.index, &r, &m.mem) else {
            panic!("a is ours")
        };
        assert_eq!(
            step.code,
            PcCode::Epilogue(crate::unwind::Epilogue::X86_64(PopRbp))
        );
        let c = caller(&step);
        assert_eq!((c.pc, c.sp, c.fp), (NATIVE_RA, S0, Some(CALLER_FP)));
        assert_eq!(m.mem.reads_in(A, A + 0x100), 1);
    }
}
