//! ELF payloads of other producers: relocatable objects whose DWARF still needs its
//! relocations (what LLVM's MCJIT registers), built here with `object::write` and
//! `gimli::write`, the DWARF's address and string fields left as relocations.

use gimli::write::{self as gw, Writer as _};
use gimli::{RunTimeEndian, SectionId};
use object::write::{self as ow, Object as WObject, SymbolId};
use object::{elf, Object as _, ObjectSection as _, RelocationFlags};

use super::*;

/// Where the "runtime" placed `.text` (its `sh_addr`).
pub(super) const BASE: u64 = 0x7f00_1234_0000;

/// A DWARF section being written, with the relocations its address and offset fields need.
#[derive(Clone)]
struct RelocWriter {
    out: gw::EndianVec<RunTimeEndian>,
    /// (offset in the section, width in bytes, target, addend).
    relocs: Vec<(u64, u8, Target, i64)>,
    /// Write the final values instead, as a linker does for an image: `.text` at [`BASE`],
    /// every other section at 0.
    linked: bool,
}

#[derive(Clone, Copy, Debug)]
enum Target {
    Text,
    Section(SectionId),
}

impl RelocWriter {
    fn new(linked: bool) -> RelocWriter {
        RelocWriter {
            out: gw::EndianVec::new(RunTimeEndian::Little),
            relocs: Vec::new(),
            linked,
        }
    }
}

impl gw::Writer for RelocWriter {
    type Endian = RunTimeEndian;
    fn endian(&self) -> RunTimeEndian {
        self.out.endian()
    }
    fn len(&self) -> usize {
        self.out.len()
    }
    fn write(&mut self, bytes: &[u8]) -> gw::Result<()> {
        self.out.write(bytes)
    }
    fn write_at(&mut self, offset: usize, bytes: &[u8]) -> gw::Result<()> {
        self.out.write_at(offset, bytes)
    }
    fn write_address(&mut self, address: gw::Address, size: u8) -> gw::Result<()> {
        match address {
            gw::Address::Constant(v) => self.write_udata(v, size),
            gw::Address::Symbol { addend, .. } if self.linked => {
                self.write_udata(BASE.wrapping_add(addend as u64), size)
            }
            gw::Address::Symbol { addend, .. } => {
                // The field holds 0, as in LLVM's objects: only the relocation knows.
                self.relocs
                    .push((self.len() as u64, size, Target::Text, addend));
                self.write_udata(0, size)
            }
        }
    }
    fn write_offset(&mut self, val: usize, section: SectionId, size: u8) -> gw::Result<()> {
        if self.linked {
            return self.write_udata(val as u64, size);
        }
        self.relocs.push((
            self.len() as u64,
            size,
            Target::Section(section),
            val as i64,
        ));
        self.write_udata(0, size)
    }
    fn write_offset_at(
        &mut self,
        offset: usize,
        val: usize,
        section: SectionId,
        size: u8,
    ) -> gw::Result<()> {
        if self.linked {
            return self.write_udata_at(offset, val as u64, size);
        }
        self.relocs
            .push((offset as u64, size, Target::Section(section), val as i64));
        self.write_udata_at(offset, 0, size)
    }
}

/// DWARF 4 for the code at `.text` offsets: `alpha` [0, 0x10) lines 3 and 4 (at +8),
/// `beta` [0x10, 0x20) line 9, and `gamma` [0x20, 0x30) line 12, which has no symbol
/// (only a DW_TAG_subprogram names it). `.debug_str` starts with a producer string, the
/// name every unrelocated DW_AT_name reads.
fn dwarf_sections(linked: bool) -> gw::Sections<RelocWriter> {
    let encoding = gimli::Encoding {
        format: gimli::Format::Dwarf32,
        version: 4,
        address_size: 8,
    };
    let mut dwarf = gw::Dwarf::new();
    dwarf.strings.add("producer of the test object");
    // DWARF 4 line programs hold their names inline.
    let file_name = gw::LineString::String(b"unit.jit".to_vec());
    let mut program = gw::LineProgram::new(
        encoding,
        gimli::LineEncoding::default(),
        gw::LineString::String(b"/src".to_vec()),
        None,
        file_name.clone(),
        None,
    );
    let dir = program.default_directory();
    let file = program.add_file(file_name, dir, None);
    program.begin_sequence(Some(gw::Address::Symbol {
        symbol: 0,
        addend: 0,
    }));
    for (offset, line) in [(0u64, 3u64), (8, 4), (0x10, 9), (0x20, 12)] {
        program.row().address_offset = offset;
        program.row().file = file;
        program.row().line = line;
        program.generate_row();
    }
    program.end_sequence(0x30);

    let unit_id = dwarf.units.add(gw::Unit::new(encoding, program));
    let unit = dwarf.units.get_mut(unit_id);
    let root = unit.root();
    let name = dwarf.strings.add("unit.jit");
    unit.get_mut(root)
        .set(gimli::DW_AT_name, gw::AttributeValue::StringRef(name));
    unit.get_mut(root).set(
        gimli::DW_AT_low_pc,
        gw::AttributeValue::Address(gw::Address::Symbol {
            symbol: 0,
            addend: 0,
        }),
    );
    unit.get_mut(root)
        .set(gimli::DW_AT_high_pc, gw::AttributeValue::Udata(0x30));
    for (sub, start) in [("alpha", 0i64), ("beta", 0x10), ("gamma", 0x20)] {
        let id = unit.add(root, gimli::DW_TAG_subprogram);
        let name = dwarf.strings.add(sub);
        let die = unit.get_mut(id);
        die.set(gimli::DW_AT_name, gw::AttributeValue::StringRef(name));
        die.set(
            gimli::DW_AT_low_pc,
            gw::AttributeValue::Address(gw::Address::Symbol {
                symbol: 0,
                addend: start,
            }),
        );
        die.set(gimli::DW_AT_high_pc, gw::AttributeValue::Udata(0x10));
    }
    let mut sections = gw::Sections::new(RelocWriter::new(linked));
    dwarf.write(&mut sections).expect("write the DWARF");
    sections
}

/// Sets `sh_addr` of the section `name` in an ELF64 little-endian file, as a runtime that
/// placed the section does.
fn set_section_address(bytes: &mut [u8], name: &str, addr: u64) {
    let index = object::File::parse(&*bytes)
        .unwrap()
        .section_by_name(name)
        .unwrap()
        .index()
        .0;
    let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
    let at = shoff + index * 64 + 16;
    bytes[at..at + 8].copy_from_slice(&addr.to_le_bytes());
}

/// The relocatable object: `.text` (0x30 bytes) with FUNC symbols `alpha` and `beta`, the
/// DWARF of [`dwarf_sections`] with `.rela.debug_*`, plus `extra` relocations added to
/// `.debug_info` (offset, type) against `.text`.
pub(super) fn relocatable_object(extra: &[(u64, elf::RelocationType)]) -> Vec<u8> {
    build(Shape::Relocatable, extra)
}

/// What [`build`] makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// ET_REL with `.rela.debug_*` (LLVM's MCJIT objects).
    Relocatable,
    /// ET_REL with symbols and no DWARF at all.
    SymbolsOnly,
    /// A linked image of this ELF type (ET_DYN, ET_EXEC): symbol values and DWARF hold
    /// final addresses, nothing to relocate.
    Image(elf::FileType),
}

fn build(shape: Shape, extra: &[(u64, elf::RelocationType)]) -> Vec<u8> {
    let linked = matches!(shape, Shape::Image(_));
    let mut obj = WObject::new(
        object::BinaryFormat::Elf,
        object::Architecture::X86_64,
        object::Endianness::Little,
    );
    let text = obj.section_id(ow::StandardSection::Text);
    obj.append_section_data(text, &[0xc3; 0x30], 16);
    for (name, value) in [("alpha", 0u64), ("beta", 0x10)] {
        obj.add_symbol(ow::Symbol {
            name: name.as_bytes().to_vec(),
            value: if linked { BASE + value } else { value },
            size: 0x10,
            kind: object::SymbolKind::Text,
            scope: object::SymbolScope::Linkage,
            weak: false,
            section: ow::SymbolSection::Section(text),
            flags: object::SymbolFlags::None,
        });
    }
    let text_symbol = obj.section_symbol(text);
    if shape == Shape::SymbolsOnly {
        let mut bytes = obj.write().unwrap();
        set_section_address(&mut bytes, ".text", BASE);
        return bytes;
    }

    let sections = dwarf_sections(linked);
    let mut ids: Vec<(SectionId, ow::SectionId, SymbolId)> = Vec::new();
    sections
        .for_each(|id, w| -> Result<(), ()> {
            if w.len() > 0 {
                let sid = obj.add_section(
                    Vec::new(),
                    id.name().as_bytes().to_vec(),
                    object::SectionKind::Debug,
                );
                obj.append_section_data(sid, w.out.slice(), 1);
                let sym = obj.section_symbol(sid);
                ids.push((id, sid, sym));
            }
            Ok(())
        })
        .unwrap();
    let section_symbol = |id: SectionId| {
        ids.iter()
            .find(|(i, _, _)| *i == id)
            .map(|&(_, _, s)| s)
            .unwrap_or_else(|| panic!("no section {}", id.name()))
    };
    let mut relocs: Vec<(ow::SectionId, u64, u8, SymbolId, i64)> = Vec::new();
    sections
        .for_each(|id, w| -> Result<(), ()> {
            let Some(&(_, sid, _)) = ids.iter().find(|(i, _, _)| *i == id) else {
                return Ok(());
            };
            for &(offset, size, target, addend) in &w.relocs {
                let sym = match target {
                    Target::Text => text_symbol,
                    Target::Section(s) => section_symbol(s),
                };
                relocs.push((sid, offset, size, sym, addend));
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(
        relocs.iter().any(|r| r.3 == text_symbol),
        !linked,
        "address relocations only in a relocatable object"
    );
    for (sid, offset, size, symbol, addend) in relocs {
        let r_type = if size == 8 {
            elf::R_X86_64_64
        } else {
            elf::R_X86_64_32
        };
        obj.add_relocation(
            sid,
            ow::Relocation {
                offset,
                symbol,
                addend,
                flags: RelocationFlags::Elf { r_type },
            },
        )
        .unwrap();
    }
    let info = ids
        .iter()
        .find(|(i, _, _)| *i == SectionId::DebugInfo)
        .unwrap()
        .1;
    for &(offset, r_type) in extra {
        obj.add_relocation(
            info,
            ow::Relocation {
                offset,
                symbol: text_symbol,
                addend: 0,
                flags: RelocationFlags::Elf { r_type },
            },
        )
        .unwrap();
    }
    let mut bytes = obj.write().unwrap();
    set_section_address(&mut bytes, ".text", BASE);
    if let Shape::Image(e_type) = shape {
        bytes[16..18].copy_from_slice(&e_type.0.to_le_bytes());
    }
    bytes
}

fn by_name<'a>(info: &'a PayloadInfo, name: &str) -> &'a FunctionInfo {
    info.functions
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no function {name} in {:#?}", info.functions))
}

#[test]
fn relocatable_dwarf_is_relocated_against_the_section_addresses() {
    let bytes = relocatable_object(&[]);
    let file = object::File::parse(&*bytes).unwrap();
    assert_eq!(file.kind(), object::ObjectKind::Relocatable);
    let info_section = file.section_by_name(".debug_info").unwrap();
    assert!(
        info_section.relocations().count() > 0,
        "the object has no .rela.debug_info"
    );

    let info = decode_payload(&bytes).unwrap();
    assert!(info.problems.is_empty(), "{:?}", info.problems);
    let names: Vec<&str> = info.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma"], "{:#?}", info.functions);

    let alpha = by_name(&info, "alpha");
    assert_eq!((alpha.start, alpha.size), (BASE, 0x10));
    assert_eq!(alpha.file.as_deref(), Some("unit.jit"));
    assert_eq!(alpha.lines, [(BASE, 3), (BASE + 8, 4)]);
    let beta = by_name(&info, "beta");
    assert_eq!((beta.start, beta.size), (BASE + 0x10, 0x10));
    assert_eq!(beta.lines, [(BASE + 0x10, 9)]);
    // Named only by its DW_TAG_subprogram, whose DW_AT_name (a .debug_str offset) and
    // DW_AT_low_pc are both relocations.
    let gamma = by_name(&info, "gamma");
    assert_eq!((gamma.start, gamma.size), (BASE + 0x20, 0x10));
    assert_eq!(gamma.file.as_deref(), Some("unit.jit"));

    let s = Symbolizer::new(info.functions.clone());
    let at = s.lookup(BASE + 9).unwrap();
    assert_eq!((at.function.name.as_str(), at.offset), ("alpha", 9));
    assert_eq!(at.location().as_deref(), Some("unit.jit:4"));
    assert!(s.lookup(0).is_none());
}

/// The same object with the relocation sections' link broken: what a reader that ignores
/// the relocations sees (every address 0, every name the producer string). Shows that the
/// test object does depend on its relocations.
#[test]
fn unrelocated_dwarf_would_name_the_producer_at_zero() {
    let mut bytes = relocatable_object(&[]);
    let file = object::File::parse(&*bytes).unwrap();
    let rela: Vec<usize> = file
        .sections()
        .filter(|s| s.name().is_ok_and(|n| n.starts_with(".rela.debug")))
        .map(|s| s.index().0)
        .collect();
    assert!(!rela.is_empty());
    drop(file);
    let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().unwrap()) as usize;
    for i in rela {
        // sh_type := SHT_PROGBITS: no longer a relocation section.
        let at = shoff + i * 64 + 4;
        bytes[at..at + 4].copy_from_slice(&elf::SHT_PROGBITS.0.to_le_bytes());
    }
    let info = decode_payload(&bytes).unwrap();
    assert!(
        info.functions
            .iter()
            .any(|f| f.start == 0 && f.name == "producer of the test object"),
        "{:#?}",
        info.functions
    );
}

#[test]
fn unsupported_relocation_types_are_named_problems() {
    // R_X86_64_PC32 and R_X86_64_GOTPCREL have no place in DWARF: reported, not applied.
    let bytes = relocatable_object(&[
        (0x40, elf::R_X86_64_PC32),
        (0x48, elf::R_X86_64_PC32),
        (0x50, elf::R_X86_64_GOTPCREL),
    ]);
    let info = decode_payload(&bytes).unwrap();
    let pc32 = format!(
        "section .debug_info: relocation type {} (ELF machine {}) is not supported (2 relocations; the first) at offset 0x40: the field is left unrelocated",
        elf::R_X86_64_PC32.0,
        elf::EM_X86_64.0
    );
    assert!(info.problems.contains(&pc32), "{:#?}", info.problems);
    assert!(
        info.problems.iter().any(|p| p
            .contains(&format!("relocation type {} ", elf::R_X86_64_GOTPCREL.0))
            && p.contains("offset 0x50")),
        "{:#?}",
        info.problems
    );
    // The supported relocations are still applied.
    assert_eq!(by_name(&info, "beta").start, BASE + 0x10);
}

#[test]
fn relocation_outside_its_section_is_a_named_problem() {
    let bytes = relocatable_object(&[(0x10_0000, elf::R_X86_64_64)]);
    let info = decode_payload(&bytes).unwrap();
    assert!(
        info.problems
            .iter()
            .any(|p| p.contains("section .debug_info")
                && p.contains("points outside the section")
                && p.contains("0x100000")),
        "{:#?}",
        info.problems
    );
    assert_eq!(by_name(&info, "gamma").start, BASE + 0x20);
}

/// A relocatable object whose `.debug_abbrev` is garbage: its symbols are still listed at
/// their relocated addresses and the problem names the unit.
#[test]
fn damaged_relocatable_dwarf_keeps_the_symbols() {
    let mut bytes = relocatable_object(&[]);
    let (off, size) = object::File::parse(&*bytes)
        .unwrap()
        .section_by_name(".debug_abbrev")
        .unwrap()
        .file_range()
        .unwrap();
    bytes[off as usize..(off + size) as usize].fill(0xff);
    let info = decode_payload(&bytes).unwrap();
    assert!(
        info.problems
            .iter()
            .any(|p| p.starts_with("DWARF unit at .debug_info offset 0x0")),
        "{:#?}",
        info.problems
    );
    let got: Vec<(&str, u64)> = info
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.start))
        .collect();
    assert_eq!(got, [("alpha", BASE), ("beta", BASE + 0x10)]);
}

/// Linked images (ET_DYN, ET_EXEC) are read as they are: symbol values and DWARF
/// addresses are final, as GDB takes them.
#[test]
fn linked_images_use_their_addresses_as_they_are() {
    for e_type in [elf::ET_DYN, elf::ET_EXEC] {
        let bytes = build(Shape::Image(e_type), &[]);
        let file = object::File::parse(&*bytes).unwrap();
        assert_ne!(file.kind(), object::ObjectKind::Relocatable);
        assert_eq!(
            file.section_by_name(".debug_info")
                .unwrap()
                .relocations()
                .count(),
            0
        );
        let info = decode_payload(&bytes).unwrap();
        assert!(info.problems.is_empty(), "{:?}", info.problems);
        let got: Vec<(&str, u64, u64, Option<&str>)> = info
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.start, f.size, f.file.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("alpha", BASE, 0x10, Some("unit.jit")),
                ("beta", BASE + 0x10, 0x10, Some("unit.jit")),
                ("gamma", BASE + 0x20, 0x10, Some("unit.jit")),
            ],
            "e_type {}",
            e_type.0
        );
        assert_eq!(by_name(&info, "alpha").lines, [(BASE, 3), (BASE + 8, 4)]);
    }
}

/// A relocatable object with symbols and no DWARF: the functions at their section's
/// address, without file or lines, and nothing reported missing.
#[test]
fn symbols_only_objects_give_names_and_ranges() {
    let bytes = build(Shape::SymbolsOnly, &[]);
    let file = object::File::parse(&*bytes).unwrap();
    assert!(file.section_by_name(".debug_info").is_none());
    let info = decode_payload(&bytes).unwrap();
    assert!(info.problems.is_empty(), "{:?}", info.problems);
    let got: Vec<(&str, u64, u64)> = info
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.start, f.size))
        .collect();
    assert_eq!(got, [("alpha", BASE, 0x10), ("beta", BASE + 0x10, 0x10)]);
    assert!(info
        .functions
        .iter()
        .all(|f| f.file.is_none() && f.lines.is_empty()));
}

/// A 4-byte field cannot hold `.text`'s address: named once for all such relocations,
/// with the first one's offset, and the field left as stored.
#[test]
fn relocated_values_too_wide_for_their_field_are_named_problems() {
    let bytes = relocatable_object(&[(0x20, elf::R_X86_64_32), (0x24, elf::R_X86_64_32S)]);
    let info = decode_payload(&bytes).unwrap();
    for (r_type, offset) in [(elf::R_X86_64_32, 0x20), (elf::R_X86_64_32S, 0x24)] {
        let want = format!(
            "section .debug_info: relocation type {}: the value does not fit its 4-byte field at offset {offset:#x}: the field is left unrelocated",
            r_type.0
        );
        assert!(info.problems.contains(&want), "{:#?}", info.problems);
    }
}
