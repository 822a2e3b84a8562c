//! Call-frame information: `.debug_frame` with one CIE for the whole object and one FDE per
//! function, generated from the model's frame rows.

use gimli::write::{
    Address, CallFrameInstruction, CommonInformationEntry, DebugFrame, EndianVec,
    FrameDescriptionEntry, FrameTable,
};
use gimli::{Encoding, Format, LittleEndian, Register};

use super::gimli_error;
use crate::error::{Error, Result};
use crate::model::{check_unwind_rows, Arch, CfaBase, Function, UnwindRow};

/// x86-64 DWARF register numbers.
const RBP: Register = Register(6);
const RSP: Register = Register(7);
/// The return-address column (x86-64 `rip`).
const RA: Register = Register(16);

fn cfa_register(base: CfaBase) -> Register {
    match base {
        CfaBase::Sp => RSP,
        CfaBase::Fp => RBP,
    }
}

/// The instructions that turn the rule set `prev` into `next`.
fn transition(prev: &UnwindRow, next: &UnwindRow, out: &mut Vec<CallFrameInstruction>) {
    let (reg, offset) = (cfa_register(next.cfa_base), next.cfa_offset);
    match (prev.cfa_base != next.cfa_base, prev.cfa_offset != offset) {
        (true, true) => out.push(CallFrameInstruction::Cfa(reg, offset)),
        (true, false) => out.push(CallFrameInstruction::CfaRegister(reg)),
        (false, true) => out.push(CallFrameInstruction::CfaOffset(offset)),
        (false, false) => {}
    }
    if prev.fp_offset != next.fp_offset {
        out.push(if next.fp_offset == 0 {
            // Back to the CIE's rule: the caller's frame pointer is in its register.
            CallFrameInstruction::Restore(RBP)
        } else {
            CallFrameInstruction::Offset(RBP, next.fp_offset)
        });
    }
}

/// Encodes the `.debug_frame` section for `functions`.
pub(super) fn debug_frame(arch: Arch, functions: &[&Function]) -> Result<Vec<u8>> {
    // Version 1 CIEs are what every debugger reads (GCC emits them too).
    let encoding = Encoding {
        format: Format::Dwarf32,
        version: 1,
        address_size: arch.pointer_size(),
    };
    // Code offsets are in bytes; stack slots are 8-byte aligned, so offsets factor by -8.
    let mut cie = CommonInformationEntry::new(encoding, 1, -8, RA);
    // The state at a function's first instruction: CFA = rsp + 8, return address at CFA - 8,
    // rbp still the caller's.
    let entry = UnwindRow::X86_64_ENTRY;
    cie.add_instruction(CallFrameInstruction::Cfa(RSP, entry.cfa_offset));
    cie.add_instruction(CallFrameInstruction::Offset(RA, -8));
    cie.add_instruction(CallFrameInstruction::SameValue(RBP));

    let mut table = FrameTable::default();
    let cie_id = table.add_cie(cie);
    let mut instructions = Vec::new();
    for f in functions {
        let rows = f.frame().rows(arch, f.size().into());
        check_unwind_rows(&rows, f.size()).map_err(|why| Error::BadRows {
            function: f.name().into(),
            why,
        })?;
        let mut fde = FrameDescriptionEntry::new(Address::Constant(f.start()), f.size());
        let mut state = entry;
        for row in &rows {
            instructions.clear();
            transition(&state, row, &mut instructions);
            for i in instructions.drain(..) {
                fde.add_instruction(row.offset, i);
            }
            state = *row;
        }
        table.add_fde(cie_id, fde);
    }
    let mut section = DebugFrame(EndianVec::new(LittleEndian));
    table.write_debug_frame(&mut section).map_err(gimli_error)?;
    Ok(section.0.into_vec())
}

#[cfg(test)]
mod tests {
    use gimli::{BaseAddresses, CfaRule, RegisterRule, UnwindContext, UnwindSection};

    use crate::elf::test_support::Parsed;
    use crate::model::{CfaBase, JitObject, UnwindRow};

    type Rule = Option<RegisterRule<usize>>;

    /// The unwind rule at `addr`: (CFA register, CFA offset, rule for rbp, rule for rip).
    fn rule_at(p: &Parsed, addr: u64) -> (u16, i64, Rule, Rule) {
        let frame = gimli::DebugFrame::new(p.section(".debug_frame"), gimli::LittleEndian);
        let mut frame = frame;
        frame.set_address_size(8);
        let bases = BaseAddresses::default();
        let mut ctx = UnwindContext::new();
        let row = frame
            .unwind_info_for_address(&bases, &mut ctx, addr, gimli::DebugFrame::cie_from_offset)
            .unwrap_or_else(|e| panic!("no unwind row at {addr:#x}: {e}"));
        let CfaRule::RegisterAndOffset { register, offset } = *row.cfa() else {
            panic!("CFA is an expression")
        };
        (
            register.0,
            offset,
            row.register(gimli::Register(6)),
            row.register(gimli::Register(16)),
        )
    }

    #[test]
    fn frame_pointer_function_unwinds_at_every_stage() {
        let mut o = JitObject::new();
        // push rbp (1) ; mov rbp,rsp (3) ; body ; pop rbp at 12 ; ret at 13 ; more code ; pop ; ret
        let f = o.add_function("fp", 0x7000_1000, 24).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 13, 14).unwrap();
        o.add_epilogue(f, 22, 23).unwrap();
        let p = Parsed::encode(&o);
        let base = 0x7000_1000;
        let entry = (
            7,
            8,
            Some(RegisterRule::SameValue),
            Some(RegisterRule::Offset(-8)),
        );
        let pushed = (
            7,
            16,
            Some(RegisterRule::Offset(-16)),
            Some(RegisterRule::Offset(-8)),
        );
        let framed = (
            6,
            16,
            Some(RegisterRule::Offset(-16)),
            Some(RegisterRule::Offset(-8)),
        );
        assert_eq!(rule_at(&p, base), entry, "first instruction");
        assert_eq!(rule_at(&p, base + 1), pushed, "after push rbp");
        assert_eq!(rule_at(&p, base + 3), pushed, "inside mov rbp, rsp");
        assert_eq!(rule_at(&p, base + 4), framed, "body");
        assert_eq!(rule_at(&p, base + 12), framed, "at pop rbp");
        assert_eq!(rule_at(&p, base + 13), entry, "at ret");
        assert_eq!(
            rule_at(&p, base + 14),
            framed,
            "code after the first epilogue"
        );
        assert_eq!(rule_at(&p, base + 22), entry, "second ret");
        assert_eq!(
            rule_at(&p, base + 23),
            framed,
            "code after the second epilogue"
        );
    }

    #[test]
    fn default_and_explicit_rows() {
        let mut o = JitObject::new();
        o.add_function("default", 0x1000, 8).unwrap();
        let g = o.add_function("frameless", 0x1008, 40).unwrap();
        // sub rsp, 24 at 0..4 ; push rbx at 10 ; pops ; ret
        let rows = [
            UnwindRow::X86_64_ENTRY,
            UnwindRow {
                offset: 4,
                cfa_base: CfaBase::Sp,
                cfa_offset: 32,
                fp_offset: 0,
            },
            UnwindRow {
                offset: 10,
                cfa_base: CfaBase::Sp,
                cfa_offset: 48,
                fp_offset: -48,
            },
            UnwindRow {
                offset: 30,
                ..UnwindRow::X86_64_ENTRY
            },
        ];
        o.set_unwind(g, &rows).unwrap();
        let p = Parsed::encode(&o);
        let framed = (
            6,
            16,
            Some(RegisterRule::Offset(-16)),
            Some(RegisterRule::Offset(-8)),
        );
        assert_eq!(rule_at(&p, 0x1000), framed);
        assert_eq!(rule_at(&p, 0x1007), framed);
        assert_eq!(rule_at(&p, 0x1008).1, 8);
        assert_eq!(
            rule_at(&p, 0x1008 + 5),
            (
                7,
                32,
                Some(RegisterRule::SameValue),
                Some(RegisterRule::Offset(-8))
            )
        );
        assert_eq!(
            rule_at(&p, 0x1008 + 29),
            (
                7,
                48,
                Some(RegisterRule::Offset(-48)),
                Some(RegisterRule::Offset(-8))
            )
        );
        assert_eq!(
            rule_at(&p, 0x1008 + 30),
            (
                7,
                8,
                Some(RegisterRule::SameValue),
                Some(RegisterRule::Offset(-8))
            )
        );
        // Exactly one CIE, one FDE per function, nothing outside the functions.
        let frame = gimli::DebugFrame::new(p.section(".debug_frame"), gimli::LittleEndian);
        let bases = BaseAddresses::default();
        let mut entries = frame.entries(&bases);
        let (mut cies, mut fdes) = (0, 0);
        while let Some(e) = entries.next().unwrap() {
            match e {
                gimli::CieOrFde::Cie(_) => cies += 1,
                gimli::CieOrFde::Fde(_) => fdes += 1,
            }
        }
        assert_eq!((cies, fdes), (1, 2));
        let mut ctx = UnwindContext::new();
        let mut frame = frame;
        frame.set_address_size(8);
        assert!(frame
            .unwind_info_for_address(
                &BaseAddresses::default(),
                &mut ctx,
                0x1008 + 40,
                gimli::DebugFrame::cie_from_offset
            )
            .is_err());
    }
}
