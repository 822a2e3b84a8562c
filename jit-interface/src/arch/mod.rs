//! One module per architecture: its DWARF register numbers, the unwind state at a
//! function's entry, and the canonical frame-pointer frame. The encoders (ELF CFI and
//! DWARF, perf's `.eh_frame`), the data model and the GDB reader's unwinder ask here rather
//! than spell the numbers out. Unwinding is x86-64 only for now; aarch64 slots in beside.

pub mod x86_64;

use crate::model::{Arch, Epilogue, UnwindRow};

/// The DWARF register numbers an unwinder needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs {
    /// The frame pointer (x86-64 `rbp`, aarch64 `x29`).
    pub fp: u16,
    /// The stack pointer.
    pub sp: u16,
    /// The return-address column of CFI (x86-64 `rip`, aarch64 `x30`).
    pub ra: u16,
    /// The program counter as GDB numbers it (x86-64 `rip`, aarch64 `pc`).
    pub pc: u16,
}

/// `arch`'s registers.
pub fn regs(arch: Arch) -> Regs {
    match arch {
        Arch::X86_64 => x86_64::REGS,
        // DWARF for the Arm 64-bit architecture: x29, sp 31, x30, pc 32.
        Arch::Aarch64 => Regs {
            fp: 29,
            sp: 31,
            ra: 30,
            pc: 32,
        },
    }
}

/// The rows of a frame-pointer function of `size` bytes: the entry state, the frame pointer
/// pushed (`push_end`) and set up (`setup_end`), and each epilogue's restore (back to the
/// entry state) and the code after its `ret`.
pub(crate) fn frame_pointer_rows(
    arch: Arch,
    push_end: u32,
    setup_end: u32,
    epilogues: &[Epilogue],
    size: u64,
    rows: &mut Vec<UnwindRow>,
) {
    match arch {
        // aarch64 frame records keep the same offsets from x29 for now (see its issue).
        Arch::X86_64 | Arch::Aarch64 => {
            x86_64::frame_pointer_rows(push_end, setup_end, epilogues, size, rows)
        }
    }
}

/// The row of a function whose frame nobody described: the canonical frame, based on the
/// frame pointer.
pub(crate) fn default_row(arch: Arch) -> UnwindRow {
    match arch {
        Arch::X86_64 | Arch::Aarch64 => x86_64::FRAME_SET_UP,
    }
}
