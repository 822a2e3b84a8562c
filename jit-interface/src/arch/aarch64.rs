//! aarch64: DWARF registers x0-x30 0-30, sp 31, pc 32 ("DWARF for the Arm 64-bit
//! Architecture"). A `bl` leaves the return address in x30 (the link register) and does
//! not touch the stack, so at a function's entry the CFA is sp + 0 and the return address
//! is in x30. The AAPCS64 frame record is a pair of words, the caller's x29 below the
//! return address: `stp x29, x30, [sp, #-16]!` saves it (CFA = sp + 16, x29 at CFA - 16,
//! x30 at CFA - 8), `mov x29, sp` bases the CFA on x29 (x29 + 16), and
//! `ldp x29, x30, [sp], #16` restores the entry state before `ret`.
//!
//! In an [`UnwindRow`] of an aarch64 function, `fp_offset` therefore places the whole
//! frame record: the caller's x29 at CFA + `fp_offset` and the return address at
//! CFA + `fp_offset` + 8; with `fp_offset` 0 (no record saved) the return address is still
//! in x30. A register rule for x30 (a leaf that saves only the link register) overrides
//! this: x30 is the return-address column of aarch64 CFI.

use super::Regs;
use crate::model::{CfaBase, UnwindRow};

pub const X29: u16 = 29;
pub const X30: u16 = 30;
pub const SP: u16 = 31;
pub const PC: u16 = 32;
/// The first register a callee must preserve (AAPCS64: x19-x28, besides x29 and x30).
pub const X19: u16 = 19;

pub const REGS: Regs = Regs {
    fp: X29,
    sp: SP,
    ra: X30,
    pc: PC,
};

/// A function's entry state: CFA = sp + 0, x29 untouched, the return address in x30.
pub const ENTRY: UnwindRow = UnwindRow {
    offset: 0,
    cfa_base: CfaBase::Sp,
    cfa_offset: 0,
    fp_offset: 0,
};

/// After `stp x29, x30, [sp, #-16]!`: CFA = sp + 16, the frame record at CFA - 16.
pub const PUSHED: UnwindRow = UnwindRow {
    offset: 0,
    cfa_base: CfaBase::Sp,
    cfa_offset: 16,
    fp_offset: -16,
};

/// After `mov x29, sp`: CFA = x29 + 16, the frame record at CFA - 16 (that is, at x29).
pub const FRAME_SET_UP: UnwindRow = UnwindRow {
    offset: 0,
    cfa_base: CfaBase::Fp,
    cfa_offset: 16,
    fp_offset: -16,
};

/// The registers an AAPCS64 callee must preserve besides x29 (the frame rows place it),
/// x30 (the return address) and sp (the CFA): undefined in a caller unless a register rule
/// describes them, as on x86-64 ([`crate::model::RegisterRule`]).
pub const CALLEE_SAVED: [u16; 10] = [19, 20, 21, 22, 23, 24, 25, 26, 27, 28];

/// The name of DWARF register `n`: `x0`-`x30`, `sp`, `pc` (`None` otherwise).
pub fn register_name(n: u16) -> Option<&'static str> {
    const X: [&str; 31] = [
        "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
        "x14", "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26",
        "x27", "x28", "x29", "x30",
    ];
    match n {
        SP => Some("sp"),
        PC => Some("pc"),
        _ => X.get(usize::from(n)).copied(),
    }
}

/// The DWARF number of the register called `name` (`x0`-`x30`, `fp` for x29, `lr` for
/// x30, `sp`, `pc`).
pub fn register_number(name: &str) -> Option<u16> {
    match name {
        "fp" => Some(X29),
        "lr" => Some(X30),
        "sp" => Some(SP),
        "pc" => Some(PC),
        _ => {
            let n: u16 = name.strip_prefix('x')?.parse().ok()?;
            // "x07" is no register name.
            (n <= 30 && register_name(n) == Some(name)).then_some(n)
        }
    }
}

/// Why register `reg` cannot have a register rule, if it cannot: rules describe the
/// general-purpose registers a function saves, and x30, the return address, when it is not
/// in a frame record; sp, pc and x29 have their own places in the frame rows.
pub(crate) fn rule_register_problem(reg: u16) -> Option<String> {
    match reg {
        SP => Some("sp (31) is the CFA itself in the caller: it takes no register rule".into()),
        PC => Some(
            "pc (32) is the return address, found by the x30 rule or the frame record: it takes no register rule"
                .into(),
        ),
        X29 => Some(
            "x29 (29) is described by the frame rows (fp_offset, set_frame_pointer): it takes no register rule"
                .into(),
        ),
        0..=30 => None,
        _ => Some(format!(
            "register {reg} is not an aarch64 general-purpose register (DWARF 0-30)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_names_round_trip() {
        for n in 0..=32 {
            let name = register_name(n).unwrap();
            assert_eq!(register_number(name), Some(n), "{name}");
        }
        assert_eq!(register_name(33), None);
        assert_eq!(register_number("lr"), Some(X30));
        assert_eq!(register_number("fp"), Some(X29));
        for bad in ["x31", "x07", "w0", "x", "rbp"] {
            assert_eq!(register_number(bad), None, "{bad}");
        }
    }

    #[test]
    fn rule_registers() {
        for ok in [0, 18, X19, 28, X30] {
            assert_eq!(rule_register_problem(ok), None, "x{ok}");
        }
        assert!(rule_register_problem(SP).unwrap().starts_with("sp (31)"));
        assert!(rule_register_problem(PC).unwrap().starts_with("pc (32)"));
        assert!(rule_register_problem(X29).unwrap().starts_with("x29 (29)"));
        assert!(rule_register_problem(33)
            .unwrap()
            .contains("not an aarch64 general-purpose register"));
    }
}
