//! x86-64: DWARF registers rbp 6, rsp 7, rip 16 (the return-address column). A `call`
//! pushes the return address, so at a function's entry the CFA is rsp + 8; `push rbp` makes
//! it rsp + 16 with the caller's rbp at CFA - 16; `mov rbp, rsp` bases it on rbp.

use super::Regs;
use crate::model::{CfaBase, UnwindRow};

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
pub const PUSHED: UnwindRow = UnwindRow {
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

/// rbx, the first callee-saved register besides rbp (System V AMD64 ABI).
pub const RBX: u16 = 3;
pub const R12: u16 = 12;
pub const R13: u16 = 13;
pub const R14: u16 = 14;
pub const R15: u16 = 15;

/// The registers a System V callee must preserve, besides rbp (which the frame rows
/// describe) and rsp (the CFA): a function that says nothing about one of them may have
/// changed it, so the encoders mark them undefined unless a register rule describes them
/// (see [`crate::model::RegisterRule`]).
pub const CALLEE_SAVED: [u16; 5] = [RBX, R12, R13, R14, R15];

/// DWARF numbers 0-16 in order (System V AMD64 ABI, figure 3.36).
const NAMES: [&str; 17] = [
    "rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rip",
];

/// The name of DWARF register `n` (`None` for numbers outside the general-purpose
/// registers and rip).
pub fn register_name(n: u16) -> Option<&'static str> {
    NAMES.get(usize::from(n)).copied()
}

/// The DWARF number of the general-purpose register (or rip) called `name`.
pub fn register_number(name: &str) -> Option<u16> {
    NAMES.iter().position(|&n| n == name).map(|i| i as u16)
}

/// Why register `reg` cannot have a register rule, if it cannot: rules describe the
/// general-purpose registers a function saves; rsp, rip and rbp have their own places in
/// the frame rows.
pub(crate) fn rule_register_problem(reg: u16) -> Option<String> {
    match reg {
        RSP => Some("rsp (7) is the CFA itself in the caller: it takes no register rule".into()),
        RIP => Some(
            "rip (16) is the return address, at CFA - 8 by the frame rows: it takes no register rule"
                .into(),
        ),
        RBP => Some(
            "rbp (6) is described by the frame rows (fp_offset, set_frame_pointer): it takes no register rule"
                .into(),
        ),
        0..=15 => None,
        _ => Some(format!(
            "register {reg} is not an x86-64 general-purpose register (DWARF 0-15)"
        )),
    }
}
