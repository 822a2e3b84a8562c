//! Frame descriptions in compact records. Most JIT functions keep a standard frame-pointer
//! frame with one epilogue at their end; that case costs no byte beyond the function's flags
//! (kind `FP_CANONICAL`). Other frame-pointer layouts list their offsets; anything else is
//! explicit rows.

use crate::model::{Arch, Epilogue, Frame, RegisterRule};

/// Frame kinds, bits 0-1 of the function flags.
pub(crate) const KIND_DEFAULT: u8 = 0;
pub(crate) const KIND_FP_CANONICAL: u8 = 1;
pub(crate) const KIND_FP: u8 = 2;
pub(crate) const KIND_ROWS: u8 = 3;

/// The canonical frame-pointer layout of `arch` for a function of `size` bytes:
/// `(push_end, setup_end, restore_end, ret_end)`, or `None` if the function is too small
/// to hold it.
///
/// x86-64: `push rbp` (1 byte), `mov rbp, rsp` (3), ..., `pop rbp` or `leave` (1), `ret` (1).
/// aarch64: `stp x29, x30, [sp, #-16]!`, `mov x29, sp`, ..., `ldp x29, x30, [sp], #16`,
/// `ret` (4 bytes each).
pub(crate) fn canonical(arch: Arch, size: u32) -> Option<(u32, u32, u32, u32)> {
    let (push_end, setup_end, tail) = match arch {
        Arch::X86_64 => (1, 4, 1),
        Arch::Aarch64 => (4, 8, 4),
    };
    let restore_end = size.checked_sub(tail)?;
    (restore_end > setup_end).then_some((push_end, setup_end, restore_end, size))
}

/// Is `frame` the canonical frame-pointer layout of `arch` for a function of `size` bytes?
pub(crate) fn is_canonical(frame: &Frame, arch: Arch, size: u32) -> bool {
    let Frame::FramePointer {
        push_end,
        setup_end,
        epilogues,
    } = frame
    else {
        return false;
    };
    let Some((p, s, restore_end, ret_end)) = canonical(arch, size) else {
        return false;
    };
    *push_end == p
        && *setup_end == s
        && epilogues.as_slice()
            == [Epilogue {
                restore_end,
                ret_end,
            }]
}

/// A register rule as one number (`docs/FORMAT.md`, "Register rules"): the kind in bits
/// 0-1, its operand above: 0 saved at CFA - 8 * operand, 1 in register `operand`, 2 same
/// value, 3 undefined (operand 0).
pub(crate) fn rule_code(rule: RegisterRule) -> u64 {
    match rule {
        // Validated slots are CFA - 16 and below, multiples of 8.
        RegisterRule::AtCfa(n) => (u64::from(n.unsigned_abs()) / 8) << 2,
        RegisterRule::InRegister(r) => (u64::from(r) << 2) | 1,
        RegisterRule::SameValue => 2,
        RegisterRule::Undefined => 3,
    }
}

/// The rule [`rule_code`] made `code` from; `None` for codes no rule makes (an operand out
/// of range, or one where the kind takes none).
pub(crate) fn rule_from_code(code: u64) -> Option<RegisterRule> {
    let operand = code >> 2;
    match code & 3 {
        0 => {
            let n = i32::try_from(operand.checked_mul(8)?).ok()?;
            Some(RegisterRule::AtCfa(-n))
        }
        1 => Some(RegisterRule::InRegister(u16::try_from(operand).ok()?)),
        2 if operand == 0 => Some(RegisterRule::SameValue),
        3 if operand == 0 => Some(RegisterRule::Undefined),
        _ => None,
    }
}
