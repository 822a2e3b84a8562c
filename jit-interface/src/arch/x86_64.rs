//! x86-64: DWARF registers rbp 6, rsp 7, rip 16 (the return-address column). A `call`
//! pushes the return address, so at a function's entry the CFA is rsp + 8; `push rbp` makes
//! it rsp + 16 with the caller's rbp at CFA - 16; `mov rbp, rsp` bases it on rbp.

use super::Regs;
use crate::model::{CfaBase, Epilogue, UnwindRow};

pub const RBP: u16 = 6;
pub const RSP: u16 = 7;
pub const RIP: u16 = 16;

pub const REGS: Regs = Regs {
    fp: RBP,
    sp: RSP,
    ra: RIP,
    pc: RIP,
};

/// A function's entry state: CFA = rsp + 8, rbp untouched.
pub const ENTRY: UnwindRow = UnwindRow {
    offset: 0,
    cfa_base: CfaBase::Sp,
    cfa_offset: 8,
    fp_offset: 0,
};

/// After `push rbp`: CFA = rsp + 16, the caller's rbp at CFA - 16.
const PUSHED: UnwindRow = UnwindRow {
    offset: 0,
    cfa_base: CfaBase::Sp,
    cfa_offset: 16,
    fp_offset: -16,
};

/// After `mov rbp, rsp`: CFA = rbp + 16, the caller's rbp at CFA - 16.
pub const FRAME_SET_UP: UnwindRow = UnwindRow {
    offset: 0,
    cfa_base: CfaBase::Fp,
    cfa_offset: 16,
    fp_offset: -16,
};

/// See [`super::frame_pointer_rows`].
pub(crate) fn frame_pointer_rows(
    push_end: u32,
    setup_end: u32,
    epilogues: &[Epilogue],
    size: u64,
    rows: &mut Vec<UnwindRow>,
) {
    let at = |row: UnwindRow, offset| UnwindRow { offset, ..row };
    rows.reserve(3 + 2 * epilogues.len());
    rows.push(ENTRY);
    rows.push(at(PUSHED, push_end));
    if setup_end > push_end {
        rows.push(at(FRAME_SET_UP, setup_end));
    }
    for e in epilogues {
        rows.push(at(ENTRY, e.restore_end));
        if u64::from(e.ret_end) < size {
            rows.push(at(FRAME_SET_UP, e.ret_end));
        }
    }
}
