//! The ELF container: a relocatable x86-64 object (what LLVM's JITs register too) whose
//! sections carry the code's real addresses, written with `object`'s two-phase writer
//! (plan every size, then write in one pass).
//!
//! Sections, in file order:
//! - one NOBITS `.text` per run of adjacent functions (ALLOC|EXECINSTR, at the run's
//!   address; the code itself stays in the process, the debugger reads it from memory),
//! - `.debug_info`, `.debug_abbrev`, `.debug_line`, `.debug_ranges`, `.debug_frame` (not
//!   ALLOC: GDB sorts every ALLOC section of every objfile on each change),
//! - `.debug_str` and `.strtab`: ONE string table with two headers, so that each name is
//!   stored once,
//! - `.symtab` with a global FUNC symbol per function, `.shstrtab`.

use object::elf;
use object::write::elf::{FileHeader, SectionHeader, SectionIndex, Sym, Writer};
use object::Endianness;

use super::layout::Layout;
use crate::error::{Error, Result};

/// A non-ALLOC data section.
pub(super) struct DataSection<'a> {
    pub name: &'static [u8],
    pub data: &'a [u8],
}

fn object_error(e: object::write::Error) -> Error {
    Error::Unsupported {
        format: "ELF",
        why: format!("ELF writer: {e}"),
    }
}

/// Writes the object. `strings` is the shared `.debug_str`/`.strtab` (first byte NUL),
/// `name_offsets[i]` the offset of `layout.functions[i]`'s name in it.
pub(super) fn write(
    layout: &Layout<'_>,
    sections: &[DataSection<'_>],
    strings: &[u8],
    name_offsets: &[u32],
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = Writer::new(Endianness::Little, true, &mut out);

    // Phase 1: reserve indices, names and file ranges.
    w.reserve_file_header();
    let text_name = w.add_section_name(b".text");
    let text_index: Vec<SectionIndex> = layout
        .runs
        .iter()
        .map(|_| w.reserve_section_index())
        .collect();
    let data: Vec<_> = sections
        .iter()
        .filter(|s| !s.data.is_empty())
        .map(|s| (s, w.add_section_name(s.name), w.reserve_section_index()))
        .collect();
    let debug_str_name = w.add_section_name(b".debug_str");
    w.reserve_section_index();
    // The writer names this `.strtab` and links `.symtab` to it; its contents are `strings`.
    let strtab_name = w.add_section_name(b".strtab");
    w.reserve_strtab_section_index();
    w.reserve_symtab_section_index();
    w.reserve_null_symbol_index();
    for &run in &layout.run_of {
        w.reserve_symbol_index(Some(text_index[run]));
    }
    let shndx = w.symtab_shndx_needed();
    if shndx {
        w.reserve_symtab_shndx_section_index();
    }
    w.reserve_shstrtab_section_index();

    let data_offsets: Vec<u64> = data
        .iter()
        .map(|(s, _, _)| w.reserve(s.data.len() as u64, 1))
        .collect();
    let strings_offset = w.reserve(strings.len() as u64, 1);
    w.reserve_symtab();
    if shndx {
        w.reserve_symtab_shndx();
    }
    w.reserve_shstrtab().map_err(object_error)?;
    w.reserve_section_headers();

    // Phase 2: write in the same order.
    w.write_file_header(&FileHeader {
        os_abi: elf::ELFOSABI_NONE,
        abi_version: 0,
        e_type: elf::ET_REL,
        e_machine: elf::EM_X86_64,
        e_entry: 0,
        e_flags: elf::FileFlags(0),
    })
    .map_err(object_error)?;
    for ((s, _, _), &offset) in data.iter().zip(&data_offsets) {
        w.pad_until(offset);
        w.write(s.data);
    }
    w.pad_until(strings_offset);
    w.write(strings);

    w.write_null_symbol();
    for (i, f) in layout.functions.iter().enumerate() {
        let run = &layout.runs[layout.run_of[i]];
        w.write_symbol(&Sym {
            section: Some(text_index[layout.run_of[i]].0),
            st_name: name_offsets[i],
            st_info: elf::SymbolInfo::new(elf::STB_GLOBAL, elf::STT_FUNC),
            st_other: elf::SymbolOther(0).with_visibility(elf::STV_DEFAULT),
            st_shndx: elf::SHN_UNDEF,
            // Relocatable object: symbol values are offsets in their section.
            st_value: f.start() - run.start,
            st_size: f.size().into(),
        });
    }
    if shndx {
        w.write_symtab_shndx();
    }
    w.write_shstrtab();

    w.write_null_section_header();
    let text_name = w.section_name_offset(Some(text_name));
    for run in &layout.runs {
        w.write_section_header(&SectionHeader {
            sh_name: text_name,
            sh_type: elf::SHT_NOBITS,
            sh_flags: elf::SHF_ALLOC | elf::SHF_EXECINSTR,
            sh_addr: run.start,
            sh_offset: 0,
            sh_size: run.end - run.start,
            sh_link: 0,
            sh_info: 0,
            sh_addralign: 1,
            sh_entsize: 0,
        });
    }
    for ((s, name, _), &offset) in data.iter().zip(&data_offsets) {
        w.write_section_header(&SectionHeader {
            sh_name: w.section_name_offset(Some(*name)),
            sh_type: elf::SHT_PROGBITS,
            sh_flags: elf::SectionFlags(0),
            sh_addr: 0,
            sh_offset: offset,
            sh_size: s.data.len() as u64,
            sh_link: 0,
            sh_info: 0,
            sh_addralign: 1,
            sh_entsize: 0,
        });
    }
    w.write_section_header(&SectionHeader {
        sh_name: w.section_name_offset(Some(debug_str_name)),
        sh_type: elf::SHT_PROGBITS,
        sh_flags: elf::SHF_MERGE | elf::SHF_STRINGS,
        sh_addr: 0,
        sh_offset: strings_offset,
        sh_size: strings.len() as u64,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 1,
        sh_entsize: 1,
    });
    w.write_section_header(&SectionHeader {
        sh_name: w.section_name_offset(Some(strtab_name)),
        sh_type: elf::SHT_STRTAB,
        sh_flags: elf::SectionFlags(0),
        sh_addr: 0,
        sh_offset: strings_offset,
        sh_size: strings.len() as u64,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 1,
        sh_entsize: 0,
    });
    // Only the null symbol is local.
    w.write_symtab_section_header(1);
    if shndx {
        w.write_symtab_shndx_section_header();
    }
    w.write_shstrtab_section_header();
    debug_assert_eq!(w.reserved_len(), w.len());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use object::elf;
    use object::read::elf::{FileHeader as _, SectionHeader as _};
    use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};

    use super::super::layout::MAX_PADDING;
    use crate::elf::test_support::Parsed;
    use crate::error::Error;
    use crate::model::{Arch, JitObject};

    /// Three functions: two adjacent (with alignment padding), one far away.
    fn scattered() -> JitObject {
        let mut o = JitObject::new();
        o.add_function("far_away", 0x7fff_0000_0000, 0x40).unwrap();
        o.add_function("first", 0x7000_0000, 0x33).unwrap();
        o.add_function("second", 0x7000_0040, 0x20).unwrap();
        o
    }

    #[test]
    fn symbols_have_real_addresses_and_sizes() {
        let p = Parsed::encode(&scattered());
        let file = p.file();
        assert_eq!(file.kind(), object::ObjectKind::Relocatable);
        assert_eq!(file.architecture(), object::Architecture::X86_64);
        let mut got = Vec::new();
        for sym in file.symbols() {
            let section = file
                .section_by_index(sym.section_index().expect("defined in a section"))
                .unwrap();
            assert_eq!(sym.kind(), SymbolKind::Text);
            assert!(sym.is_global());
            // Relocatable object: the value is an offset in the section.
            got.push((
                sym.name().unwrap().to_string(),
                section.address() + sym.address(),
                sym.size(),
            ));
        }
        assert_eq!(
            got,
            [
                ("first".to_string(), 0x7000_0000, 0x33),
                ("second".to_string(), 0x7000_0040, 0x20),
                ("far_away".to_string(), 0x7fff_0000_0000, 0x40),
            ]
        );
    }

    #[test]
    fn text_sections_cover_only_the_code() {
        let p = Parsed::encode(&scattered());
        let file = p.file();
        let object::File::Elf64(elf_file) = &file else {
            panic!("not ELF64")
        };
        let endian = elf_file.endian();
        assert_eq!(
            elf_file.elf_header().e_type(endian),
            elf::ET_REL,
            "relocatable"
        );
        let mut text = Vec::new();
        for (section, header) in file
            .sections()
            .zip(elf_file.elf_section_table().iter().skip(1))
        {
            let flags = header.sh_flags(endian);
            let name = section.name().unwrap();
            assert_eq!(section.relocations().count(), 0, "{name} has relocations");
            if name == ".text" {
                assert_eq!(header.sh_type(endian), elf::SHT_NOBITS);
                assert_eq!(flags, elf::SHF_ALLOC | elf::SHF_EXECINSTR);
                assert_eq!(section.kind(), SectionKind::UninitializedData);
                text.push((section.address(), section.size()));
            } else {
                assert_eq!(
                    flags & elf::SHF_ALLOC,
                    elf::SectionFlags(0),
                    "{name} is ALLOC"
                );
            }
        }
        // 0x33 + 13 bytes of padding join the first two functions; the third is alone.
        const { assert!(0x40 - 0x33 <= MAX_PADDING) };
        assert_eq!(text, [(0x7000_0000, 0x60), (0x7fff_0000_0000, 0x40)]);
        // One string table serves as .strtab and .debug_str.
        let range = |n: &str| file.section_by_name(n).unwrap().file_range().unwrap();
        assert_eq!(range(".strtab"), range(".debug_str"));
        assert_eq!(p.section(".strtab")[0], 0);
    }

    #[test]
    fn a_gap_wider_than_padding_splits_the_section() {
        let mut o = JitObject::new();
        o.add_function("a", 0x1000, 0x10).unwrap();
        o.add_function("b", 0x1010 + MAX_PADDING + 1, 0x10).unwrap();
        let p = Parsed::encode(&o);
        let text: Vec<(u64, u64)> = p
            .file()
            .sections()
            .filter(|s| s.name() == Ok(".text"))
            .map(|s| (s.address(), s.size()))
            .collect();
        assert_eq!(text, [(0x1000, 0x10), (0x1010 + MAX_PADDING + 1, 0x10)]);
    }

    #[test]
    fn bad_objects_are_refused_with_a_reason() {
        assert_eq!(
            super::super::encode(&JitObject::new()),
            Err(Error::EmptyObject)
        );
        let mut o = JitObject::new();
        o.add_function("a", 0x1000, 0x10).unwrap();
        o.add_function("b", 0x1008, 0x10).unwrap();
        assert!(matches!(
            super::super::encode(&o),
            Err(Error::Overlap { .. })
        ));
        let mut o = JitObject::with_arch(Arch::Aarch64);
        o.add_function("a", 0x1000, 0x10).unwrap();
        let e = super::super::encode(&o).unwrap_err();
        assert!(e.to_string().contains("x86-64"), "{e}");
    }
}

#[cfg(test)]
mod many_sections {
    use object::{Object, ObjectSection, ObjectSymbol};

    use crate::elf::test_support::Parsed;
    use crate::model::JitObject;

    /// More text runs than a 16-bit section index can name: the symbols need the extended
    /// index table (`.symtab_shndx`).
    #[test]
    fn more_than_65280_sections() {
        let mut o = JitObject::new();
        let n = 0xff00u64 + 10;
        for i in 0..n {
            o.add_function(&format!("f{i}"), 0x1000_0000 + i * 64, 16)
                .unwrap();
        }
        let p = Parsed::encode(&o);
        let file = p.file();
        assert!(file.section_by_name(".symtab_shndx").is_some());
        let last = file.symbols().last().unwrap();
        let section = file
            .section_by_index(last.section_index().unwrap())
            .unwrap();
        assert_eq!(last.name(), Ok(format!("f{}", n - 1).as_str()));
        assert_eq!(
            section.address() + last.address(),
            0x1000_0000 + (n - 1) * 64
        );
    }
}
