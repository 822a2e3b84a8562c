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

use jit_interface::{CfaBase, UnwindRow};

use super::{ArchRegs, CallerRegs, FrameRegs, Memory, Step};
use crate::index::CodeFn;

pub use jit_interface::arch::x86_64::{RBP, RIP, RSP};

pub const REGS: ArchRegs = ArchRegs {
    pc: RIP,
    sp: RSP,
    fp: RBP,
};

/// End of the user half of the 48-bit address space.
const USER_TOP: u64 = 1 << 47;

/// Largest frame (CFA minus rsp) accepted. Real frames are far smaller; a larger distance
/// means rbp or rsp holds something else than a stack address.
pub const MAX_FRAME: u64 = 16 << 20;

/// Why a frame whose return address is 0 has no caller: not an error, not reported.
pub const OUTERMOST: &str = "the return address is 0 (outermost frame)";

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

/// The row of `func` for `lookup_pc`, the register it is based on and the canonical frame
/// address, from the frame's registers alone (no memory read: frame ids need only this).
pub fn cfa<'f>(
    func: &'f CodeFn,
    lookup_pc: u64,
    regs: &FrameRegs,
) -> Result<(&'f UnwindRow, u64, u64), String> {
    let offset = lookup_pc.saturating_sub(func.start);
    let Some(row) = func.row_at(offset) else {
        return Err(format!(
            "`{}` has no unwind row for offset {offset}",
            func.name()
        ));
    };
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
    Ok((row, base, cfa))
}

/// Applies `func`'s row for `lookup_pc` to the frame's registers.
pub fn step(func: &CodeFn, lookup_pc: u64, regs: &FrameRegs, mem: &dyn Memory) -> Step {
    let stop = |cfa: Option<u64>, why: String| Step {
        cfa,
        caller: Err(why),
    };
    let (row, base, cfa) = match cfa(func, lookup_pc, regs) {
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
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Index;
    use crate::unwind::testing::{FakeMem, FakeRegs};
    use crate::unwind::{unwind, Outcome};
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
                fp: Some(0x1234)
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
}
