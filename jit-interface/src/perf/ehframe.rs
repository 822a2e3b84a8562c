//! Unwinding tables for `JIT_CODE_UNWINDING_INFO`: an `.eh_frame` (one CIE, one FDE) built
//! from a function's frame rows, followed by its `.eh_frame_hdr` lookup table.
//!
//! Layout is what `perf inject --jit` does with the record, not the specification's prose:
//! perf copies the unwinding data into the ELF file it writes per function with `.eh_frame`
//! taken from the START of the data and `.eh_frame_hdr` from its last `eh_frame_hdr_size`
//! bytes, placed at `ALIGN_8(code end)` with the header right after the table. Every pointer
//! is therefore encoded relative (pc-relative or relative to the header), computed from that
//! layout: the code begins `ALIGN_8(code size)` bytes before `.eh_frame`.

use gimli::write::{
    Address, CallFrameInstruction, CommonInformationEntry, EhFrame, EndianVec,
    FrameDescriptionEntry, FrameTable,
};
use gimli::{constants, Encoding, Format, LittleEndian, Register};

use crate::model::{Arch, CfaBase, Function};

const RBP: Register = Register(crate::arch::x86_64::RBP);
const RSP: Register = Register(crate::arch::x86_64::RSP);
const RA: Register = Register(crate::arch::x86_64::RIP);

/// `.eh_frame` followed by `.eh_frame_hdr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwindingData {
    pub data: Vec<u8>,
    /// Size of the `.eh_frame_hdr` at the end of `data`.
    pub eh_frame_hdr_size: usize,
}

/// The unwinding tables of `f`, or `None` where this library has none to give (aarch64: not
/// yet described).
pub fn unwinding_data(arch: Arch, f: &Function) -> Option<UnwindingData> {
    if arch != Arch::X86_64 {
        return None;
    }
    let size = f.size();
    let code_to_table = u64::from(size).next_multiple_of(8);
    let encoding = Encoding {
        format: Format::Dwarf32,
        version: 1,
        address_size: 8,
    };
    let mut cie = CommonInformationEntry::new(encoding, 1, -8, RA);
    cie.fde_address_encoding = constants::DW_EH_PE_pcrel | constants::DW_EH_PE_sdata4;
    cie.add_instruction(CallFrameInstruction::Cfa(RSP, 8));
    cie.add_instruction(CallFrameInstruction::Offset(RA, -8));

    // pc-relative with the table at 0: the code starts at -code_to_table.
    let mut fde = FrameDescriptionEntry::new(Address::Constant(code_to_table.wrapping_neg()), size);
    let mut fp_saved = false;
    for row in f.frame().rows(arch, u64::from(size)) {
        let base = match row.cfa_base {
            CfaBase::Sp => RSP,
            CfaBase::Fp => RBP,
        };
        fde.add_instruction(row.offset, CallFrameInstruction::Cfa(base, row.cfa_offset));
        if row.fp_offset != 0 {
            fde.add_instruction(row.offset, CallFrameInstruction::Offset(RBP, row.fp_offset));
            fp_saved = true;
        } else if fp_saved {
            fde.add_instruction(row.offset, CallFrameInstruction::SameValue(RBP));
            fp_saved = false;
        }
    }
    let mut table = FrameTable::default();
    let cie_id = table.add_cie(cie);
    table.add_fde(cie_id, fde);
    let mut eh_frame = EhFrame(EndianVec::new(LittleEndian));
    // Only fails for unsupported encodings or symbolic addresses, which we never use.
    table.write_eh_frame(&mut eh_frame).ok()?;
    let mut data = eh_frame.0.into_vec();
    // The CIE comes first and is 4-aligned; the FDE follows it. Find it by the CIE's length.
    let cie_len = u32::from_le_bytes(data[0..4].try_into().ok()?) as usize + 4;
    let fde_offset = cie_len as i64;
    data.extend_from_slice(&[0, 0, 0, 0]); // terminator
    let table_size = data.len() as i64;

    // .eh_frame_hdr, right after .eh_frame (so at offset `table_size` from it).
    let hdr = table_size;
    let mut h = Vec::with_capacity(20);
    h.push(1); // version
    h.push((constants::DW_EH_PE_pcrel | constants::DW_EH_PE_sdata4).0);
    h.push(constants::DW_EH_PE_udata4.0);
    h.push((constants::DW_EH_PE_datarel | constants::DW_EH_PE_sdata4).0);
    // eh_frame_ptr, pc-relative to its own field at hdr + 4.
    h.extend_from_slice(&(i32::try_from(-(hdr + 4)).ok()?).to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes()); // fde_count
    let code = -(code_to_table as i64);
    h.extend_from_slice(&(i32::try_from(code - hdr).ok()?).to_le_bytes());
    h.extend_from_slice(&(i32::try_from(fde_offset - hdr).ok()?).to_le_bytes());
    let eh_frame_hdr_size = h.len();
    data.extend_from_slice(&h);
    Some(UnwindingData {
        data,
        eh_frame_hdr_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JitObject;
    use gimli::{BaseAddresses, EhFrameHdr, UnwindSection};

    /// Parses our tables with gimli's reader at the addresses perf gives them and checks the
    /// rules at a few offsets.
    #[test]
    fn tables_parse_and_describe_the_frame() {
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 21).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 19, 20).unwrap();
        let u = unwinding_data(Arch::X86_64, &o.functions().first().unwrap()).unwrap();

        // perf's layout: code at 0x80 (size 21), tables at ALIGN_8(0x80 + 21) = 0x98.
        let text = 0x80u64;
        let eh_addr = 0x98u64;
        let split = u.data.len() - u.eh_frame_hdr_size;
        let hdr_addr = eh_addr + split as u64;
        let bases = BaseAddresses::default()
            .set_eh_frame_hdr(hdr_addr)
            .set_eh_frame(eh_addr);
        let hdr = EhFrameHdr::new(&u.data[split..], LittleEndian)
            .parse(&bases, 8)
            .unwrap();
        let eh_frame = gimli::EhFrame::new(&u.data[..split], LittleEndian);
        let table = hdr.table().unwrap();
        let mut ctx = gimli::UnwindContext::new();
        let cfa_at = |pc: u64, ctx: &mut gimli::UnwindContext<usize>| {
            let fde = table
                .fde_for_address(&eh_frame, &bases, pc, gimli::EhFrame::cie_from_offset)
                .unwrap();
            assert_eq!(fde.initial_address(), text);
            assert_eq!(fde.len(), 21);
            let row = fde
                .unwind_info_for_address(&eh_frame, &bases, ctx, pc)
                .unwrap();
            (row.cfa().clone(), row.register(RBP))
        };
        let (cfa, rbp) = cfa_at(text, &mut ctx);
        assert_eq!(
            cfa,
            gimli::CfaRule::RegisterAndOffset {
                register: RSP,
                offset: 8
            }
        );
        assert_eq!(rbp, None);
        let (cfa, rbp) = cfa_at(text + 10, &mut ctx);
        assert_eq!(
            cfa,
            gimli::CfaRule::RegisterAndOffset {
                register: RBP,
                offset: 16
            }
        );
        assert_eq!(rbp, Some(gimli::RegisterRule::Offset(-16)));
        let (cfa, rbp) = cfa_at(text + 19, &mut ctx);
        assert_eq!(
            cfa,
            gimli::CfaRule::RegisterAndOffset {
                register: RSP,
                offset: 8
            }
        );
        assert_eq!(rbp, Some(gimli::RegisterRule::SameValue));
    }
}
