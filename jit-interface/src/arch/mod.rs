//! One module per architecture: its DWARF register numbers, the unwind state at a
//! function's entry, and the canonical frame-pointer frame. The encoders (ELF CFI and
//! DWARF, perf's `.eh_frame`), the data model and the GDB reader's unwinder ask here rather
//! than spell the numbers out. Each object states its architecture: an encoder or reader
//! picks the module by the object's, never by the host's.

pub mod aarch64;
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
        Arch::Aarch64 => aarch64::REGS,
    }
}

/// `arch`'s rows of a frame-pointer function: at entry, after the frame pointer is saved
/// (x86-64 `push rbp`, aarch64 `stp x29, x30, [sp, #-16]!`) and once it is set up
/// (`mov rbp, rsp`, `mov x29, sp`).
fn fp_states(arch: Arch) -> [UnwindRow; 3] {
    match arch {
        Arch::X86_64 => [x86_64::ENTRY, x86_64::PUSHED, x86_64::FRAME_SET_UP],
        Arch::Aarch64 => [aarch64::ENTRY, aarch64::PUSHED, aarch64::FRAME_SET_UP],
    }
}

/// `arch`'s entry state: x86-64 CFA = rsp + 8 (the `call` pushed the return address),
/// aarch64 CFA = sp + 0 (the return address is in x30).
pub fn entry_row(arch: Arch) -> UnwindRow {
    fp_states(arch)[0]
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
    let [entry, pushed, set_up] = fp_states(arch);
    let at = |row: UnwindRow, offset| UnwindRow { offset, ..row };
    rows.reserve(3 + 2 * epilogues.len());
    rows.push(entry);
    rows.push(at(pushed, push_end));
    if setup_end > push_end {
        rows.push(at(set_up, setup_end));
    }
    for e in epilogues {
        rows.push(at(entry, e.restore_end));
        if u64::from(e.ret_end) < size {
            rows.push(at(set_up, e.ret_end));
        }
    }
}

/// The row of a function whose frame nobody described: the canonical frame, based on the
/// frame pointer.
pub(crate) fn default_row(arch: Arch) -> UnwindRow {
    fp_states(arch)[2]
}

/// The callee-saved registers besides the frame pointer that a function without register
/// rules may have changed: undefined in its caller.
pub fn callee_saved(arch: Arch) -> &'static [u16] {
    match arch {
        Arch::X86_64 => &x86_64::CALLEE_SAVED,
        Arch::Aarch64 => &aarch64::CALLEE_SAVED,
    }
}

/// The name of `arch`'s DWARF register `n`, if it is a general-purpose register, the stack
/// pointer or the program counter.
pub fn register_name(arch: Arch, n: u16) -> Option<&'static str> {
    match arch {
        Arch::X86_64 => x86_64::register_name(n),
        Arch::Aarch64 => aarch64::register_name(n),
    }
}

/// Why `arch`'s register `reg` cannot take a register rule, if it cannot.
pub(crate) fn rule_register_problem(arch: Arch, reg: u16) -> Option<String> {
    match arch {
        Arch::X86_64 => x86_64::rule_register_problem(reg),
        Arch::Aarch64 => aarch64::rule_register_problem(reg),
    }
}

/// The lowest `cfa_offset` an sp-based row may have: the return address is at CFA - 8 on
/// x86-64 (the `call` pushed it), in x30 on aarch64 (nothing is on the stack at entry).
pub(crate) fn min_sp_cfa_offset(arch: Arch) -> i32 {
    match arch {
        Arch::X86_64 => 8,
        Arch::Aarch64 => 0,
    }
}

/// The highest stack slot a register rule may name: CFA - 8 holds the return address on
/// x86-64; on aarch64 nothing is there unless a frame record is, so CFA - 8 is a slot
/// (`stp x19, x20, [sp, #-16]!` in a leaf puts x20 there).
pub(crate) fn highest_save_slot(arch: Arch) -> i32 {
    match arch {
        Arch::X86_64 => -16,
        Arch::Aarch64 => -8,
    }
}
