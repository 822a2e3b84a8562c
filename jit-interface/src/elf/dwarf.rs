//! DWARF 4 debugging information: `.debug_info`, `.debug_abbrev`, `.debug_line`,
//! `.debug_ranges` and `.debug_str`.
//!
//! One compile unit per source file (functions without a file share a unit named
//! [`NO_FILE_UNIT`] without a line program); in it a subprogram per function with its
//! parameters, locals and lexical blocks, and the base types those use.

use std::collections::HashMap;

use gimli::write::{
    Address, AttributeValue, Dwarf, EndianVec, Expression, LineProgram, LineString, Range,
    RangeList, Sections, StringId, Unit, UnitEntryId,
};
use gimli::{constants, Encoding, Format, LineEncoding, LittleEndian, Register};

use super::gimli_error;
use super::layout::{adjacent_ranges, neighbours, Layout, NO_FILE_UNIT};
use crate::error::{Error, Result};
use crate::model::{BaseType, Function, Location, VariableKind};

/// The frame pointer (x86-64 `rbp`), base of [`Location::FrameOffset`].
const FRAME_POINTER: Register = Register(6);

/// The encoded sections.
#[derive(Debug, Default)]
pub(super) struct DebugSections {
    pub info: Vec<u8>,
    pub abbrev: Vec<u8>,
    pub line: Vec<u8>,
    pub ranges: Vec<u8>,
    /// `.debug_str`. Its first byte is NUL, so it doubles as the symbol string table.
    pub str: Vec<u8>,
    /// Offset in `str` of each function's name, in layout order.
    pub name_offsets: Vec<u32>,
}

/// Builds the DWARF sections for `layout`.
pub(super) fn build(layout: &Layout<'_>) -> Result<DebugSections> {
    let encoding = Encoding {
        format: Format::Dwarf32,
        version: 4,
        address_size: 8,
    };
    let mut dwarf = Dwarf::new();
    // Offset 0 must be the empty string for the table to serve as `.strtab` as well.
    dwarf.strings.add("");
    let mut name_ids: Vec<Option<StringId>> = vec![None; layout.functions.len()];

    for unit in &layout.units {
        let (line_program, file_id) = match unit.file {
            Some(file) => {
                let name = LineString::String(file.as_bytes().to_vec());
                // DWARF 4 does not store the working directory in the line program: the
                // file name is used as given.
                let mut program = LineProgram::new(
                    encoding,
                    LineEncoding::default(),
                    name.clone(),
                    None,
                    name.clone(),
                    None,
                );
                let dir = program.default_directory();
                let file_id = program.add_file(name, dir, None);
                (program, Some(file_id))
            }
            None => (LineProgram::none(), None),
        };
        let mut u = Unit::new(encoding, line_program);
        let root = u.root();
        let cu_name = dwarf.strings.add(unit.file.unwrap_or(NO_FILE_UNIT));
        let ranges = adjacent_ranges(&layout.functions, &unit.functions);
        {
            let cu = u.get_mut(root);
            cu.set(constants::DW_AT_name, AttributeValue::StringRef(cu_name));
            cu.set(
                constants::DW_AT_language,
                AttributeValue::Language(constants::DW_LANG_C99),
            );
        }
        if let [(lo, hi)] = ranges[..] {
            let cu = u.get_mut(root);
            cu.set(
                constants::DW_AT_low_pc,
                AttributeValue::Address(Address::Constant(lo)),
            );
            cu.set(constants::DW_AT_high_pc, AttributeValue::Udata(hi - lo));
        } else {
            let list = RangeList(
                ranges
                    .iter()
                    .map(|&(lo, hi)| Range::StartEnd {
                        begin: Address::Constant(lo),
                        end: Address::Constant(hi),
                    })
                    .collect(),
            );
            let id = u.ranges.add(list);
            let cu = u.get_mut(root);
            cu.set(
                constants::DW_AT_low_pc,
                AttributeValue::Address(Address::Constant(0)),
            );
            cu.set(constants::DW_AT_ranges, AttributeValue::RangeListRef(id));
        }

        if let Some(file_id) = file_id {
            line_rows(&mut u.line_program, file_id, layout, &unit.functions);
        }

        let mut types = Types::default();
        for &i in &unit.functions {
            let f = layout.functions[i];
            let name = dwarf.strings.add(f.name());
            name_ids[i] = Some(name);
            subprogram(&mut u, &mut dwarf.strings, &mut types, f, name);
        }
        dwarf.units.add(u);
    }

    let mut sections = Sections::new(EndianVec::new(LittleEndian));
    dwarf.write(&mut sections).map_err(gimli_error)?;
    let name_offsets = name_ids
        .iter()
        .map(|id| {
            let id = id.ok_or_else(|| Error::Unsupported {
                format: "ELF",
                why: "internal error: a function was not placed in any compile unit".into(),
            })?;
            u32::try_from(dwarf.strings.offset(id).0)
                .map_err(|_| Error::TooLarge("the names of one ELF object exceed 4 GiB".into()))
        })
        .collect::<Result<Vec<u32>>>()?;
    Ok(DebugSections {
        info: sections.debug_info.0.into_vec(),
        abbrev: sections.debug_abbrev.0.into_vec(),
        line: sections.debug_line.0.into_vec(),
        ranges: sections.debug_ranges.0.into_vec(),
        str: sections.debug_str.0.into_vec(),
        name_offsets,
    })
}

/// Adds the line rows of a unit's functions. Neighbouring functions (see
/// [`neighbours`]) share one sequence; otherwise a sequence ends exactly where its last
/// function ends, so no line spreads over code that is not the function's.
fn line_rows(
    program: &mut LineProgram,
    file: gimli::write::FileId,
    layout: &Layout<'_>,
    functions: &[usize],
) {
    // (start address, end of the last function) of the open sequence.
    let mut open: Option<(u64, u64)> = None;
    let mut prev: Option<usize> = None;
    for &i in functions {
        let f = layout.functions[i];
        let Some(first) = f.lines().first() else {
            prev = None;
            continue;
        };
        let start = match open {
            Some((start, _)) if first.offset == 0 && neighbours(&layout.functions, prev, i) => {
                start
            }
            _ => {
                if let Some((start, end)) = open {
                    program.end_sequence(end - start);
                }
                program.begin_sequence(Some(Address::Constant(f.start())));
                f.start()
            }
        };
        for r in f.lines() {
            let row = program.row();
            row.address_offset = f.start() - start + u64::from(r.offset);
            row.line = r.line.into();
            row.file = file;
            program.generate_row();
        }
        open = Some((start, f.end()));
        prev = Some(i);
    }
    if let Some((start, end)) = open {
        program.end_sequence(end - start);
    }
}

/// The type DIEs of one unit, made on first use.
#[derive(Default)]
struct Types {
    base: HashMap<BaseType, UnitEntryId>,
    unsigned_char: Option<UnitEntryId>,
}

impl Types {
    fn base_type(
        u: &mut Unit,
        strings: &mut gimli::write::StringTable,
        name: &str,
        encoding: constants::DwAte,
        size: u8,
    ) -> UnitEntryId {
        let root = u.root();
        let id = u.add(root, constants::DW_TAG_base_type);
        let e = u.get_mut(id);
        e.set(
            constants::DW_AT_name,
            AttributeValue::StringRef(strings.add(name)),
        );
        e.set(
            constants::DW_AT_encoding,
            AttributeValue::Encoding(encoding),
        );
        e.set(constants::DW_AT_byte_size, AttributeValue::Data1(size));
        id
    }

    fn get(
        &mut self,
        u: &mut Unit,
        strings: &mut gimli::write::StringTable,
        ty: BaseType,
    ) -> UnitEntryId {
        if let Some(&id) = self.base.get(&ty) {
            return id;
        }
        let id = if ty == BaseType::Pointer {
            // A pointer to bytes: `unsigned char *`.
            let pointee = match self.unsigned_char {
                Some(id) => id,
                None => {
                    let id = Self::base_type(
                        u,
                        strings,
                        "unsigned char",
                        constants::DW_ATE_unsigned_char,
                        1,
                    );
                    self.unsigned_char = Some(id);
                    id
                }
            };
            let root = u.root();
            let id = u.add(root, constants::DW_TAG_pointer_type);
            let e = u.get_mut(id);
            e.set(constants::DW_AT_byte_size, AttributeValue::Data1(ty.size()));
            e.set(constants::DW_AT_type, AttributeValue::UnitRef(pointee));
            id
        } else {
            let encoding = match ty {
                BaseType::I8 | BaseType::I16 | BaseType::I32 | BaseType::I64 => {
                    constants::DW_ATE_signed
                }
                BaseType::F32 | BaseType::F64 => constants::DW_ATE_float,
                _ => constants::DW_ATE_unsigned,
            };
            Self::base_type(u, strings, ty.name(), encoding, ty.size())
        };
        self.base.insert(ty, id);
        id
    }
}

/// Adds the subprogram DIE of `f` with its variables and blocks.
fn subprogram(
    u: &mut Unit,
    strings: &mut gimli::write::StringTable,
    types: &mut Types,
    f: &Function,
    name: StringId,
) {
    let root = u.root();
    let sp = u.add(root, constants::DW_TAG_subprogram);
    {
        let e = u.get_mut(sp);
        e.set(constants::DW_AT_name, AttributeValue::StringRef(name));
        e.set(constants::DW_AT_external, AttributeValue::FlagPresent);
        e.set(
            constants::DW_AT_low_pc,
            AttributeValue::Address(Address::Constant(f.start())),
        );
        // DWARF 4: a constant high_pc is the size, here in one or two ULEB128 bytes.
        e.set(
            constants::DW_AT_high_pc,
            AttributeValue::Udata(f.size().into()),
        );
    }
    // Parameters first, in their order: debuggers list arguments in DIE order.
    let params = f
        .variables()
        .iter()
        .filter(|v| v.kind == VariableKind::Parameter);
    let locals = f
        .variables()
        .iter()
        .filter(|v| v.kind == VariableKind::Local);
    for v in params.chain(locals) {
        let ty = types.get(u, strings, v.ty);
        let tag = match v.kind {
            VariableKind::Parameter => constants::DW_TAG_formal_parameter,
            VariableKind::Local => constants::DW_TAG_variable,
        };
        let mut location = Expression::new();
        match v.location {
            Location::Register(r) => location.op_reg(Register(r)),
            Location::FrameOffset(o) => location.op_breg(FRAME_POINTER, o.into()),
        }
        let id = u.add(sp, tag);
        let e = u.get_mut(id);
        e.set(
            constants::DW_AT_name,
            AttributeValue::StringRef(strings.add(v.name.as_str())),
        );
        e.set(constants::DW_AT_type, AttributeValue::UnitRef(ty));
        e.set(constants::DW_AT_location, AttributeValue::Exprloc(location));
    }
    // A block's parent comes before it (the model checks this), so parents' DIEs exist.
    let mut block_ids: Vec<UnitEntryId> = Vec::with_capacity(f.blocks().len());
    for b in f.blocks() {
        let parent = b
            .parent
            .and_then(|p| block_ids.get(p as usize).copied())
            .unwrap_or(sp);
        // Unnamed: LLDB shows every named lexical block as an inlined call frame in `bt`,
        // and GDB ignores block names.
        let id = u.add(parent, constants::DW_TAG_lexical_block);
        let e = u.get_mut(id);
        e.set(
            constants::DW_AT_low_pc,
            AttributeValue::Address(Address::Constant(f.start() + u64::from(b.start))),
        );
        e.set(
            constants::DW_AT_high_pc,
            AttributeValue::Udata((b.end - b.start).into()),
        );
        block_ids.push(id);
    }
}

#[cfg(test)]
mod tests {
    use crate::elf::test_support::{Line, Parsed};
    use crate::model::{BaseType, JitObject, LineRow, Location, Variable, VariableKind};

    fn rows(r: &[(u32, u32)]) -> Vec<LineRow> {
        r.iter()
            .map(|&(offset, line)| LineRow { offset, line })
            .collect()
    }

    fn line(unit: &str, address: u64, line: Option<u64>) -> Line {
        Line {
            unit: unit.into(),
            address,
            line,
        }
    }

    #[test]
    fn line_rows_per_function_and_file() {
        let mut o = JitObject::new();
        // a and b adjacent in a.js (one sequence); c in b.js between them and d; d in
        // a.js after a gap; n without lines; e in a.js adjacent to d but its first row
        // is not at offset 0.
        let a = o.add_function("a", 0x1000, 0x10).unwrap();
        let b = o.add_function("b", 0x1010, 0x10).unwrap();
        let c = o.add_function("c", 0x1020, 0x10).unwrap();
        let d = o.add_function("d", 0x1030, 0x10).unwrap();
        o.add_function("n", 0x1040, 0x10).unwrap();
        let e = o.add_function("e", 0x2000, 0x10).unwrap();
        let f = o.add_function("f", 0x2010, 0x10).unwrap();
        o.set_lines(a, "a.js", &rows(&[(0, 1), (4, 2)])).unwrap();
        o.set_lines(b, "a.js", &rows(&[(0, 10), (8, 9)])).unwrap();
        o.set_lines(c, "b.js", &rows(&[(0, 100)])).unwrap();
        o.set_lines(d, "a.js", &rows(&[(2, 20)])).unwrap();
        o.set_lines(e, "a.js", &rows(&[(0, 30)])).unwrap();
        o.set_lines(f, "a.js", &rows(&[(3, 40)])).unwrap();
        let p = Parsed::encode(&o);
        let got = p.lines();
        assert_eq!(
            got,
            [
                line("a.js", 0x1000, Some(1)),
                line("a.js", 0x1004, Some(2)),
                line("a.js", 0x1010, Some(10)),
                line("a.js", 0x1018, Some(9)),
                // b ends where c (another file) begins.
                line("a.js", 0x1020, None),
                line("a.js", 0x1032, Some(20)),
                line("a.js", 0x1040, None),
                line("a.js", 0x2000, Some(30)),
                // f's code before its first row belongs to no line.
                line("a.js", 0x2010, None),
                line("a.js", 0x2013, Some(40)),
                line("a.js", 0x2020, None),
                line("b.js", 0x1020, Some(100)),
                line("b.js", 0x1030, None),
            ]
        );
        let units: Vec<(String, String)> = p
            .subprograms()
            .into_iter()
            .map(|s| (s.unit, s.name))
            .collect();
        let pair = |u: &str, n: &str| (u.to_string(), n.to_string());
        assert_eq!(
            units,
            [
                pair("a.js", "a"),
                pair("a.js", "b"),
                pair("a.js", "d"),
                pair("a.js", "e"),
                pair("a.js", "f"),
                pair("b.js", "c"),
                pair("<jit>", "n"),
            ]
        );
    }

    #[test]
    fn a_file_without_rows_gets_a_unit_without_lines() {
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 0x10).unwrap();
        o.set_lines(f, "empty.js", &[]).unwrap();
        let p = Parsed::encode(&o);
        assert_eq!(p.lines(), []);
        let subs = p.subprograms();
        assert_eq!(
            (subs[0].unit.as_str(), subs[0].name.as_str()),
            ("empty.js", "f")
        );
    }

    #[test]
    fn unit_ranges_cover_exactly_their_functions() {
        let mut o = JitObject::new();
        let a = o.add_function("a", 0x1000, 0x10).unwrap();
        o.add_function("gap", 0x1010, 0x10).unwrap();
        let b = o.add_function("b", 0x1020, 0x8).unwrap();
        o.set_lines(a, "x.js", &rows(&[(0, 1)])).unwrap();
        o.set_lines(b, "x.js", &rows(&[(0, 1)])).unwrap();
        let p = Parsed::encode(&o);
        let dwarf = p.dwarf();
        let mut units = dwarf.units();
        let mut got = Vec::new();
        while let Some(h) = units.next().unwrap() {
            let unit = dwarf.unit(h).unwrap();
            let mut ranges = dwarf.unit_ranges(&unit).unwrap();
            let mut r = Vec::new();
            while let Some(range) = ranges.next().unwrap() {
                r.push((range.begin, range.end));
            }
            got.push(r);
        }
        assert_eq!(
            got,
            [
                vec![(0x1000, 0x1010), (0x1020, 0x1028)],
                vec![(0x1010, 0x1020)]
            ]
        );
    }

    #[test]
    fn subprograms_variables_types_and_blocks() {
        let mut o = JitObject::new();
        let f = o.add_function("jit_add", 0x7f00_0000_1000, 300).unwrap();
        let var = |name: &str, kind, ty, location| Variable {
            name: name.into(),
            kind,
            ty,
            location,
        };
        // A local before a parameter: parameters still come first.
        o.add_variable(
            f,
            var(
                "sum",
                VariableKind::Local,
                BaseType::F64,
                Location::FrameOffset(-24),
            ),
        )
        .unwrap();
        o.add_variable(
            f,
            var(
                "x",
                VariableKind::Parameter,
                BaseType::I32,
                Location::Register(5),
            ),
        )
        .unwrap();
        o.add_variable(
            f,
            var(
                "buf",
                VariableKind::Parameter,
                BaseType::Pointer,
                Location::Register(40),
            ),
        )
        .unwrap();
        o.add_variable(
            f,
            var(
                "count",
                VariableKind::Local,
                BaseType::U16,
                Location::FrameOffset(200),
            ),
        )
        .unwrap();
        let outer = o.add_block(f, "loop", 10, 200, None).unwrap();
        let inner = o.add_block(f, "body", 20, 100, Some(outer)).unwrap();
        o.add_block(f, "inlined", 30, 40, Some(inner)).unwrap();
        o.add_block(f, "tail", 250, 300, None).unwrap();
        let p = Parsed::encode(&o);
        let subs = p.subprograms();
        assert_eq!(subs.len(), 1);
        let s = &subs[0];
        assert_eq!((s.name.as_str(), s.unit.as_str()), ("jit_add", "<jit>"));
        assert_eq!((s.low, s.high), (0x7f00_0000_1000, 0x7f00_0000_1000 + 300));
        let vars: Vec<(bool, &str, &str, u64, &[u8])> = s
            .vars
            .iter()
            .map(|v| {
                (
                    v.parameter,
                    v.name.as_str(),
                    v.ty.as_str(),
                    v.type_size,
                    &v.location[..],
                )
            })
            .collect();
        assert_eq!(
            vars,
            [
                // DW_OP_reg5 (rdi)
                (true, "x", "int32_t", 4, &[0x55][..]),
                // DW_OP_regx 40
                (true, "buf", "*unsigned char", 8, &[0x90, 40][..]),
                // DW_OP_breg6 (rbp) -24
                (false, "sum", "double", 8, &[0x76, 0x68][..]),
                // DW_OP_breg6 (rbp) +200
                (false, "count", "uint16_t", 2, &[0x76, 0xc8, 0x01][..]),
            ]
        );
        let encodings: Vec<Option<gimli::DwAte>> = s.vars.iter().map(|v| v.type_encoding).collect();
        assert_eq!(
            encodings,
            [
                Some(gimli::DW_ATE_signed),
                None,
                Some(gimli::DW_ATE_float),
                Some(gimli::DW_ATE_unsigned)
            ]
        );
        let base = 0x7f00_0000_1000;
        assert_eq!(
            s.blocks,
            [
                (1, base + 10, base + 200),
                (2, base + 20, base + 100),
                (3, base + 30, base + 40),
                (1, base + 250, base + 300),
            ]
        );
    }

    #[test]
    fn types_are_shared_within_a_unit() {
        let mut o = JitObject::new();
        for i in 0..3u64 {
            let f = o
                .add_function(&format!("f{i}"), 0x1000 + i * 16, 16)
                .unwrap();
            o.add_variable(
                f,
                Variable {
                    name: "v".into(),
                    kind: VariableKind::Local,
                    ty: BaseType::I64,
                    location: Location::FrameOffset(-8),
                },
            )
            .unwrap();
        }
        let p = Parsed::encode(&o);
        let info = p.section(".debug_info");
        let dwarf = p.dwarf();
        let unit = dwarf.unit(dwarf.units().next().unwrap().unwrap()).unwrap();
        let mut entries = unit.entries();
        let mut base_types = 0;
        while let Some(e) = entries.next_dfs().unwrap() {
            base_types += usize::from(e.tag() == gimli::DW_TAG_base_type);
        }
        assert_eq!(base_types, 1, "{} bytes of .debug_info", info.len());
    }
}
