//! Frame descriptions in compact records. Most JIT functions keep a standard frame-pointer
//! frame with one epilogue at their end; that case costs no byte beyond the function's flags
//! (kind `FP_CANONICAL`). Other frame-pointer layouts list their offsets; anything else is
//! explicit rows.

use crate::model::{Arch, Epilogue, Frame};

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
