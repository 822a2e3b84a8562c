//! DWARF 4 debugging information: `.debug_info`, `.debug_abbrev`, `.debug_line`,
//! `.debug_ranges` and `.debug_str`, written directly from the [`Layout`] in one pass per
//! section (only unit lengths are patched afterwards).
//!
//! One compile unit per source file (functions without a file share a unit named
//! [`NO_FILE_UNIT`] without a line program), with [`PRODUCER`] when it holds x86-64 code
//! whose epilogues were not declared; in it the base types its variables use, then a
//! subprogram per function with its parameters, locals, lexical blocks and call sites, then
//! declarations of the functions outside the object that its call sites name.
//!
//! Call sites use the GNU extension to DWARF 4 that GCC emits with `-gdwarf-4` (GDB and
//! LLDB read it; DWARF 5's `DW_TAG_call_site` is the same with other names):
//! `DW_TAG_GNU_call_site` with the return address as `DW_AT_low_pc` and the callee as
//! `DW_AT_abstract_origin`, a reference (`DW_FORM_ref_addr`, so it may cross units) to the
//! callee's subprogram when the callee is a function of this object, or to a declaration
//! carrying its name when it is not (or when the call enters a function past its start); a
//! callee known only by such an address gets `DW_AT_GNU_call_site_target` (`DW_OP_addr`),
//! an unknown one no target at all. GDB resolves the first two without a frame (by the
//! subprogram's `low_pc`, or the name's minimal symbol), which is what its tail-call search
//! in every unwound frame needs; the last two make that search fail as it does without a
//! call site. A function with a tail call has `DW_AT_GNU_all_tail_call_sites`: GDB only
//! builds tail-call frames from functions that claim their list of tail calls is complete.
//!
//! Sizes: a subprogram without variables is 14 bytes (abbreviation code, `strp` name, address,
//! ULEB128 size); function names are in `.debug_str`, which doubles as the symbol string
//! table, so each is stored once; other names (units, variables, types) are inline strings.

use gimli::constants as dw;
use gimli::constants::{DwAt, DwForm, DwTag};

use std::collections::HashMap;

use super::bytes::{extend_small, offset32, patch_length, Put, Small};
use super::layout::{adjacent_ranges, Layout, Unit, MAX_PADDING, NO_FILE_UNIT};
use crate::error::Result;
use crate::model::{
    BaseType, CallTarget, CfaBase, Frame, Function, LineRow, Location, UnwindRow, VariableKind,
};

/// `DW_AT_producer` of an x86-64 unit holding a function whose epilogues were not declared
/// (see [`needs_ret_heuristic`]).
///
/// The unit's CFI describes such a function's body up to its end, which is wrong on the
/// `ret` after `pop rbp` / `leave` (rbp holds the caller's value by then). GDB's amd64
/// epilogue unwinder gets that instruction right (a `ret` at the PC: CFA = rsp + 8), and
/// GDB runs it ahead of the CFI only for units whose epilogue CFI it does not trust: GDB 13
/// for every unit but GCC 4.5 and later, GDB 16 only for GCC before 4.5
/// (`epilogue_unwind_valid` of the compunit, set in `dwarf2/read.c` from the producer;
/// without a producer GDB 16 trusts the CFI and skips the caller frame there). GDB reads
/// "GNU <word> <major>.<minor>" as GCC <major>.<minor>, so this string makes both versions
/// keep their unwinder for these units. The other things GDB keys on a GCC version do not
/// apply to what we write: before 4.3, a unit without `DW_AT_comp_dir` has its absolute
/// name split into directory and name (hence 4.4, not an older one); before 4.6,
/// C++ members are public by default (we write none). Units whose functions all have their
/// epilogues described carry no producer: GDB 16 follows their CFI.
pub(super) const PRODUCER: &str = "GNU jit-gdb 4.4";

/// Line program parameters: the usual ones (GCC, LLVM), suited to small address and line
/// steps.
const LINE_BASE: i64 = -5;
const LINE_RANGE: u64 = 14;
const OPCODE_BASE: u8 = 13;
/// Operand counts of the standard opcodes 1 to 12.
const STANDARD_OPCODE_LENGTHS: [u8; 12] = [0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1];
/// The start of a line program header: length and header length (both patched), version
/// 4, minimum instruction length 1, 1 operation per instruction, default `is_stmt`, the
/// parameters, and no include directories.
const LINE_HEADER: [u8; 29] = {
    let mut h = [0; 29];
    h[4] = 4;
    h[10] = 1;
    h[11] = 1;
    h[12] = 1;
    h[13] = LINE_BASE as i8 as u8;
    h[14] = LINE_RANGE as u8;
    h[15] = OPCODE_BASE;
    let mut i = 0;
    while i < STANDARD_OPCODE_LENGTHS.len() {
        h[16 + i] = STANDARD_OPCODE_LENGTHS[i];
        i += 1;
    }
    // h[28] = 0: no include directories.
    h
};
/// Rows of a function whose special opcodes are computed together (see `Lines::rows`).
const ROW_CHUNK: usize = 16;
/// Address advance of `DW_LNS_const_add_pc`: that of special opcode 255.
const CONST_ADD_PC: u64 = (255 - OPCODE_BASE as u64) / LINE_RANGE;

/// The encoded sections (but `.debug_str`: the string table the writer writes from the
/// layout), and storage kept between payloads.
#[derive(Debug, Default)]
pub(super) struct Parts {
    pub info: Vec<u8>,
    pub abbrev: Vec<u8>,
    pub line: Vec<u8>,
    pub ranges: Vec<u8>,
    /// The abbreviations `abbrev` declares: objects alike use the same ones.
    abbrev_of: Option<[bool; ABBREV_COUNT]>,
    /// See [`CallRefs`].
    die_offsets: Vec<u32>,
    fixups: Vec<(usize, u32)>,
}

impl Parts {
    /// Bytes of storage held.
    pub fn bytes(&self) -> usize {
        self.info.capacity()
            + self.abbrev.capacity()
            + self.line.capacity()
            + self.ranges.capacity()
            + self.die_offsets.capacity() * 4
            + self.fixups.capacity() * std::mem::size_of::<(usize, u32)>()
    }
}

/// The abbreviations, by code (index + 1). Only those used are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Abbrev {
    /// A unit with one address range (`low_pc`, `high_pc`), with or without lines.
    UnitRange = 1,
    UnitRangeLines,
    /// A unit with several ranges (`.debug_ranges`).
    UnitRanges,
    UnitRangesLines,
    Subprogram,
    SubprogramWithChildren,
    Parameter,
    Variable,
    Block,
    BlockWithChildren,
    BaseType,
    PointerType,
    /// A subprogram whose tail calls are all described (it has at least one).
    SubprogramTailCalls,
    /// Call sites: callee by reference, by address, unknown; then the same as tail calls.
    CallOrigin,
    CallAddress,
    CallUnknown,
    TailCallOrigin,
    TailCallAddress,
    TailCallUnknown,
    /// A function outside the object that a call site names.
    Declaration,
    /// The four unit forms again, with [`PRODUCER`] (last, so that the codes of the others
    /// stay what they were).
    UnitRangeProducer,
    UnitRangeLinesProducer,
    UnitRangesProducer,
    UnitRangesLinesProducer,
}

const ABBREV_COUNT: usize = Abbrev::UnitRangesLinesProducer as usize;
// Every code is one byte of ULEB128 (see `subprogram`).
const _: () = assert!(ABBREV_COUNT < 0x80);

impl Abbrev {
    const ALL: [Abbrev; ABBREV_COUNT] = [
        Abbrev::UnitRange,
        Abbrev::UnitRangeLines,
        Abbrev::UnitRanges,
        Abbrev::UnitRangesLines,
        Abbrev::Subprogram,
        Abbrev::SubprogramWithChildren,
        Abbrev::Parameter,
        Abbrev::Variable,
        Abbrev::Block,
        Abbrev::BlockWithChildren,
        Abbrev::BaseType,
        Abbrev::PointerType,
        Abbrev::SubprogramTailCalls,
        Abbrev::CallOrigin,
        Abbrev::CallAddress,
        Abbrev::CallUnknown,
        Abbrev::TailCallOrigin,
        Abbrev::TailCallAddress,
        Abbrev::TailCallUnknown,
        Abbrev::Declaration,
        Abbrev::UnitRangeProducer,
        Abbrev::UnitRangeLinesProducer,
        Abbrev::UnitRangesProducer,
        Abbrev::UnitRangesLinesProducer,
    ];

    /// Tag, whether the entry has children, attributes and their forms.
    fn declaration(self) -> (DwTag, bool, &'static [(DwAt, DwForm)]) {
        use dw::*;
        const NAME: (DwAt, DwForm) = (DW_AT_name, DW_FORM_string);
        const LANGUAGE: (DwAt, DwForm) = (DW_AT_language, DW_FORM_data1);
        const PRODUCER: (DwAt, DwForm) = (DW_AT_producer, DW_FORM_string);
        const LOW: (DwAt, DwForm) = (DW_AT_low_pc, DW_FORM_addr);
        // DWARF 4: a constant high_pc is the size.
        const HIGH: (DwAt, DwForm) = (DW_AT_high_pc, DW_FORM_udata);
        const RANGES: (DwAt, DwForm) = (DW_AT_ranges, DW_FORM_sec_offset);
        const LINES: (DwAt, DwForm) = (DW_AT_stmt_list, DW_FORM_sec_offset);
        const SUBPROGRAM: &[(DwAt, DwForm)] = &[
            (DW_AT_name, DW_FORM_strp),
            (DW_AT_external, DW_FORM_flag_present),
            LOW,
            HIGH,
        ];
        const SUBPROGRAM_TAIL_CALLS: &[(DwAt, DwForm)] = &[
            (DW_AT_name, DW_FORM_strp),
            (DW_AT_external, DW_FORM_flag_present),
            LOW,
            HIGH,
            (DW_AT_GNU_all_tail_call_sites, DW_FORM_flag_present),
        ];
        // The return address.
        const RETURN: (DwAt, DwForm) = (DW_AT_low_pc, DW_FORM_addr);
        const ORIGIN: (DwAt, DwForm) = (DW_AT_abstract_origin, DW_FORM_ref_addr);
        const TARGET: (DwAt, DwForm) = (DW_AT_GNU_call_site_target, DW_FORM_exprloc);
        const TAIL: (DwAt, DwForm) = (DW_AT_GNU_tail_call, DW_FORM_flag_present);
        const VARIABLE: &[(DwAt, DwForm)] = &[
            NAME,
            (DW_AT_type, DW_FORM_ref4),
            (DW_AT_location, DW_FORM_exprloc),
        ];
        match self {
            Abbrev::UnitRange => (DW_TAG_compile_unit, true, &[NAME, LANGUAGE, LOW, HIGH]),
            Abbrev::UnitRangeLines => (
                DW_TAG_compile_unit,
                true,
                &[NAME, LANGUAGE, LOW, HIGH, LINES],
            ),
            Abbrev::UnitRanges => (DW_TAG_compile_unit, true, &[NAME, LANGUAGE, LOW, RANGES]),
            Abbrev::UnitRangesLines => (
                DW_TAG_compile_unit,
                true,
                &[NAME, LANGUAGE, LOW, RANGES, LINES],
            ),
            Abbrev::UnitRangeProducer => (
                DW_TAG_compile_unit,
                true,
                &[NAME, PRODUCER, LANGUAGE, LOW, HIGH],
            ),
            Abbrev::UnitRangeLinesProducer => (
                DW_TAG_compile_unit,
                true,
                &[NAME, PRODUCER, LANGUAGE, LOW, HIGH, LINES],
            ),
            Abbrev::UnitRangesProducer => (
                DW_TAG_compile_unit,
                true,
                &[NAME, PRODUCER, LANGUAGE, LOW, RANGES],
            ),
            Abbrev::UnitRangesLinesProducer => (
                DW_TAG_compile_unit,
                true,
                &[NAME, PRODUCER, LANGUAGE, LOW, RANGES, LINES],
            ),
            Abbrev::Subprogram => (DW_TAG_subprogram, false, SUBPROGRAM),
            Abbrev::SubprogramWithChildren => (DW_TAG_subprogram, true, SUBPROGRAM),
            Abbrev::Parameter => (DW_TAG_formal_parameter, false, VARIABLE),
            Abbrev::Variable => (DW_TAG_variable, false, VARIABLE),
            Abbrev::Block => (DW_TAG_lexical_block, false, &[LOW, HIGH]),
            Abbrev::BlockWithChildren => (DW_TAG_lexical_block, true, &[LOW, HIGH]),
            Abbrev::BaseType => (
                DW_TAG_base_type,
                false,
                &[
                    NAME,
                    (DW_AT_encoding, DW_FORM_data1),
                    (DW_AT_byte_size, DW_FORM_data1),
                ],
            ),
            Abbrev::PointerType => (
                DW_TAG_pointer_type,
                false,
                &[(DW_AT_byte_size, DW_FORM_data1), (DW_AT_type, DW_FORM_ref4)],
            ),
            Abbrev::SubprogramTailCalls => (DW_TAG_subprogram, true, SUBPROGRAM_TAIL_CALLS),
            Abbrev::CallOrigin => (DW_TAG_GNU_call_site, false, &[RETURN, ORIGIN]),
            Abbrev::CallAddress => (DW_TAG_GNU_call_site, false, &[RETURN, TARGET]),
            Abbrev::CallUnknown => (DW_TAG_GNU_call_site, false, &[RETURN]),
            Abbrev::TailCallOrigin => (DW_TAG_GNU_call_site, false, &[RETURN, ORIGIN, TAIL]),
            Abbrev::TailCallAddress => (DW_TAG_GNU_call_site, false, &[RETURN, TARGET, TAIL]),
            Abbrev::TailCallUnknown => (DW_TAG_GNU_call_site, false, &[RETURN, TAIL]),
            Abbrev::Declaration => (
                DW_TAG_subprogram,
                false,
                &[
                    NAME,
                    (DW_AT_external, DW_FORM_flag_present),
                    (DW_AT_declaration, DW_FORM_flag_present),
                ],
            ),
        }
    }
}

/// `.debug_info` being written, with the abbreviations it used.
struct Info<'o> {
    out: &'o mut Vec<u8>,
    used: [bool; ABBREV_COUNT],
}

impl Info<'_> {
    /// Starts an entry: its abbreviation code.
    fn entry(&mut self, a: Abbrev) {
        self.used[a as usize - 1] = true;
        self.out.uleb(a as u64);
    }

    fn abbrev_section(&self, out: &mut Vec<u8>) {
        out.clear();
        for a in Abbrev::ALL {
            if !self.used[a as usize - 1] {
                continue;
            }
            let (tag, children, attributes) = a.declaration();
            declare(out, a as u8, tag, children, attributes);
        }
        out.u8(0);
    }
}

/// Appends the declaration of abbreviation `code`.
fn declare(out: &mut Vec<u8>, code: u8, tag: DwTag, children: bool, attributes: &[(DwAt, DwForm)]) {
    out.uleb(code.into());
    out.uleb(tag.0.into());
    out.u8(if children {
        dw::DW_CHILDREN_yes.0
    } else {
        dw::DW_CHILDREN_no.0
    });
    for (at, form) in attributes {
        out.uleb(at.0.into());
        out.uleb(form.0.into());
    }
    out.u16(0);
}

/// Writes an abbreviation table declaring every abbreviation [`build`] may use, at their
/// fixed codes: compile units appended to one payload one by one all use it.
pub(super) fn all_abbreviations(out: &mut Vec<u8>) {
    let mut unused = Vec::new();
    let info = Info {
        out: &mut unused,
        used: [true; ABBREV_COUNT],
    };
    info.abbrev_section(out);
}

/// Abbreviation code of a compile unit whose addresses are a range list, with lines: what
/// the units that growing payloads extend object after object use (`growing/`: each
/// function joining the unit adds its range to the list). Not one `build` writes.
pub(super) const OPEN_UNIT_CODE: u8 = 0x7f;
/// A subprogram of an open unit: name, address and a 16-bit size, 15 bytes, so that with
/// the 0 after it, joining the unit is one 16-byte store (see [`open_subprogram`]).
const OPEN_SUBPROGRAM_CODE: u8 = 0x7e;
const _: () = assert!(ABBREV_COUNT < OPEN_SUBPROGRAM_CODE as usize);

/// Writes the abbreviations of [`all_abbreviations`] and [`OPEN_UNIT_CODE`]'s.
pub(super) fn growing_abbreviations(out: &mut Vec<u8>) {
    all_abbreviations(out);
    // Before the table's terminating 0.
    out.pop();
    declare(
        out,
        OPEN_UNIT_CODE,
        dw::DW_TAG_compile_unit,
        true,
        &[
            (dw::DW_AT_name, dw::DW_FORM_string),
            (dw::DW_AT_producer, dw::DW_FORM_string),
            (dw::DW_AT_language, dw::DW_FORM_data1),
            (dw::DW_AT_low_pc, dw::DW_FORM_addr),
            (dw::DW_AT_ranges, dw::DW_FORM_sec_offset),
            (dw::DW_AT_stmt_list, dw::DW_FORM_sec_offset),
        ],
    );
    declare(
        out,
        OPEN_SUBPROGRAM_CODE,
        dw::DW_TAG_subprogram,
        false,
        &[
            (dw::DW_AT_name, dw::DW_FORM_strp),
            (dw::DW_AT_external, dw::DW_FORM_flag_present),
            (dw::DW_AT_low_pc, dw::DW_FORM_addr),
            (dw::DW_AT_high_pc, dw::DW_FORM_data2),
        ],
    );
    out.u8(0);
}

/// The subprogram entry of an open unit for a function named at `name` in `.debug_str`,
/// at `low`, of `size` bytes (`None` above 65,535), followed by the 0 that ends the unit's
/// list of subprograms.
pub(super) fn open_subprogram(name: u32, low: u64, size: u32) -> Option<[u8; 16]> {
    let size = u16::try_from(size).ok()?;
    let mut b = [0u8; 16];
    b[0] = OPEN_SUBPROGRAM_CODE;
    b[1..5].copy_from_slice(&name.to_le_bytes());
    b[5..13].copy_from_slice(&low.to_le_bytes());
    b[13..15].copy_from_slice(&size.to_le_bytes());
    Some(b)
}

/// Writes the header and top entry of an open unit (see [`OPEN_UNIT_CODE`]) for `file`
/// with its line program at `stmt_list` and its range list at `ranges`; its length is
/// patched by the caller. An open unit always carries [`PRODUCER`]: functions join it later,
/// with or without declared epilogues (even as copied FDE bytes, without their frame).
pub(super) fn open_unit(out: &mut Vec<u8>, file: &str, stmt_list: u32, ranges: u32) {
    out.extend_from_slice(&[0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 8]);
    out.u8(OPEN_UNIT_CODE);
    out.cstr(file);
    out.cstr(PRODUCER);
    out.u8(dw::DW_LANG_C99.0 as u8);
    // Base address 0: the range list holds absolute addresses.
    out.u64(0);
    out.u32(ranges);
    out.u32(stmt_list);
}

/// If `info` (as [`build`] wrote it) is one unit of one address range with lines and plain
/// subprograms, the offset of its first subprogram (they run to the unit's last byte, its
/// terminating 0).
pub(super) fn plain_unit_children(info: &[u8]) -> Option<usize> {
    let unit_len = u32::from_le_bytes(info.get(..4)?.try_into().ok()?) as usize;
    let producer = match *info.get(11)? {
        c if c == Abbrev::UnitRangeLines as u8 => false,
        c if c == Abbrev::UnitRangeLinesProducer as u8 => true,
        _ => return None,
    };
    if unit_len + 4 != info.len() {
        return None;
    }
    // Code, name, producer (if any), language, low address, ULEB128 size, line program
    // offset.
    let mut at = 12;
    for _ in 0..1 + usize::from(producer) {
        at += info.get(at..)?.iter().position(|&b| b == 0)? + 1;
    }
    at += 1 + 8;
    at += info.get(at..)?.iter().position(|&b| b & 0x80 == 0)? + 1;
    at += 4;
    // Every child a plain subprogram.
    (*info.get(at)? == Abbrev::Subprogram as u8 && info.last() == Some(&0)).then_some(at)
}

/// Where the sections that `.debug_info` refers to by offset start, relative to what
/// [`build`] writes: zero for a payload of its own; the space already taken when the output
/// is appended to a payload that grows in place (`growing/`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Bases {
    /// Added to `Layout::name_offsets` (`.debug_str`).
    pub strings: u32,
    pub line: u32,
    pub ranges: u32,
}

/// Builds the DWARF sections for `layout` into `parts`.
pub(super) fn build(layout: &Layout<'_>, parts: &mut Parts) -> Result<()> {
    build_at(layout, parts, Bases::default())
}

/// [`build`], with offsets into other sections moved by `bases`. Call sites refer to
/// subprograms by `.debug_info` offset, which only a payload of its own knows: objects with
/// call sites need zero bases.
pub(super) fn build_at(layout: &Layout<'_>, parts: &mut Parts, bases: Bases) -> Result<()> {
    let n = layout.functions.len();
    let Parts {
        info,
        abbrev,
        line,
        ranges,
        abbrev_of,
        die_offsets,
        fixups,
    } = parts;
    info.clear();
    line.clear();
    ranges.clear();
    // Benchmark shape: 14 bytes per subprogram.
    info.reserve(64 * layout.units.len() + 16 * n);
    let mut info = Info {
        out: info,
        used: [false; ABBREV_COUNT],
    };
    // Only objects with call sites pay for the references between subprograms.
    let mut calls = layout.has_calls.then(|| {
        die_offsets.clear();
        die_offsets.resize(n, 0);
        fixups.clear();
        CallRefs {
            die_offsets,
            fixups,
        }
    });
    for unit in &layout.units {
        let stmt_list = match unit.file {
            Some(file) => {
                let at = line_program(line, file, layout, layout.unit_functions(unit))?;
                Some(offset32(at as usize + bases.line as usize, ".debug_line")?)
            }
            None => None,
        };
        compile_unit(
            &mut info,
            ranges,
            layout,
            unit,
            stmt_list,
            calls.as_mut(),
            bases,
        )?;
    }
    if let Some(calls) = calls {
        for &(at, callee) in calls.fixups.iter() {
            info.out.patch_u32(at, calls.die_offsets[callee as usize]);
        }
    }
    if *abbrev_of != Some(info.used) {
        info.abbrev_section(abbrev);
        *abbrev_of = Some(info.used);
    }
    Ok(())
}

/// Writes one compile unit to `.debug_info` (and its ranges, if it has several).
fn compile_unit(
    info: &mut Info,
    ranges: &mut Vec<u8>,
    layout: &Layout<'_>,
    unit: &Unit<'_>,
    stmt_list: Option<u32>,
    calls: Option<&mut CallRefs>,
    bases: Bases,
) -> Result<()> {
    let start = info.out.len();
    // Length (patched), version 4, abbreviations at offset 0 (all units share them),
    // address size 8.
    info.out
        .extend_from_slice(&[0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 8]);

    let members = layout.unit_functions(unit);
    // The unit's ranges, written to `.debug_ranges` and taken back if there is only one.
    let ranges_at = ranges.len();
    let (mut count, mut only) = (0, (0, 0));
    adjacent_ranges(layout, members, |lo, hi| {
        ranges.u64(lo);
        ranges.u64(hi);
        count += 1;
        only = (lo, hi);
    });
    let lines = stmt_list.is_some();
    let producer = members
        .iter()
        .any(|&i| needs_ret_heuristic(&layout.function(i)));
    let name = unit.file.unwrap_or(NO_FILE_UNIT);
    if count == 1 {
        ranges.truncate(ranges_at);
        let (lo, hi) = only;
        info.entry(match (lines, producer) {
            (true, false) => Abbrev::UnitRangeLines,
            (false, false) => Abbrev::UnitRange,
            (true, true) => Abbrev::UnitRangeLinesProducer,
            (false, true) => Abbrev::UnitRangeProducer,
        });
        unit_name(info.out, name, producer);
        info.out.u64(lo);
        info.out.uleb(hi - lo);
    } else {
        info.entry(match (lines, producer) {
            (true, false) => Abbrev::UnitRangesLines,
            (false, false) => Abbrev::UnitRanges,
            (true, true) => Abbrev::UnitRangesLinesProducer,
            (false, true) => Abbrev::UnitRangesProducer,
        });
        unit_name(info.out, name, producer);
        // Base address 0: the range list holds absolute addresses.
        info.out.u64(0);
        info.out.u32(offset32(
            ranges_at + bases.ranges as usize,
            ".debug_ranges",
        )?);
        ranges.u64(0);
        ranges.u64(0);
    }
    if let Some(offset) = stmt_list {
        info.out.u32(offset);
    }

    if !layout.has_extras {
        plain_subprograms(info, layout, members, bases.strings);
        info.out.u8(0);
        return patch_length(info.out, start, ".debug_info");
    }
    let types = base_types(info, layout, members, start)?;
    match calls {
        None => {
            for &i in members {
                let name = layout.name_offsets[i as usize].wrapping_add(bases.strings);
                if subprogram(info, &layout.function(i), name, &types)? {
                    info.out.u8(0);
                }
            }
        }
        Some(calls) => subprograms_with_calls(info, layout, members, &types, calls)?,
    }
    info.out.u8(0);
    patch_length(info.out, start, ".debug_info")
}

/// A unit's name, [`PRODUCER`] if `producer`, and its language.
fn unit_name(out: &mut Vec<u8>, name: &str, producer: bool) {
    out.cstr(name);
    if producer {
        out.cstr(PRODUCER);
    }
    out.u8(dw::DW_LANG_C99.0 as u8);
}

/// Is `f` x86-64 code whose CFI is wrong on its `ret`, so that its unit needs GDB's amd64
/// epilogue unwinder ([`PRODUCER`])? Its rows leave the entry rule (CFA = rsp + 8) and never
/// come back to it: a default frame, a frame-pointer frame without declared epilogues, or
/// explicit rows without their epilogue's. (On the `ret` of any function the entry rule
/// holds, so the unwinder is right for the unit's other functions too.)
pub(super) fn needs_ret_heuristic(f: &Function<'_>) -> bool {
    use crate::arch::x86_64::ENTRY;
    if f.arch() != crate::model::Arch::X86_64 {
        return false;
    }
    let entry = |r: &&UnwindRow| {
        (r.cfa_base, r.cfa_offset, r.fp_offset) == (ENTRY.cfa_base, ENTRY.cfa_offset, 0)
    };
    match f.frame() {
        Frame::Default => true,
        Frame::FramePointer { epilogues, .. } => epilogues.is_empty(),
        Frame::Rows(rows) => {
            let mut after_entry = rows.iter().skip_while(entry);
            after_entry.next().is_some() && !after_entry.any(|r| entry(&r))
        }
    }
}

/// The subprograms of `members` when no function of the payload has children: each one
/// entry of the same shape (code, `strp` name, address, ULEB128 size), written from a
/// fixed-size block.
fn plain_subprograms(info: &mut Info, layout: &Layout<'_>, members: &[u32], base: u32) {
    info.used[Abbrev::Subprogram as usize - 1] = true;
    let out = &mut *info.out;
    let mut put = |f: Function, name: u32| {
        let mut b = [0u8; 24];
        b[0] = Abbrev::Subprogram as u8;
        b[1..5].copy_from_slice(&name.to_le_bytes());
        b[5..13].copy_from_slice(&f.start().to_le_bytes());
        // At most 5 bytes of ULEB128 (a 32-bit size).
        let mut v = f.size();
        let mut n = 13;
        while v >= 0x80 && n < 17 {
            b[n] = v as u8 | 0x80;
            v >>= 7;
            n += 1;
        }
        b[n] = v as u8;
        extend_small(out, &b, n + 1);
    };
    if members.len() == layout.functions.len() {
        // The only unit: every function, in address order.
        for (p, &name) in layout.functions.iter().zip(&layout.name_offsets) {
            put(p.f, name.wrapping_add(base));
        }
    } else {
        for &i in members {
            put(
                layout.function(i),
                layout.name_offsets[i as usize].wrapping_add(base),
            );
        }
    }
}

/// The subprograms of `unit` with their call sites, then the declarations of the functions
/// outside the object that the call sites name. Kept out of line: inlined, it changed how
/// the compiler inlined the rest of [`build`], which cost objects without call sites.
#[inline(never)]
fn subprograms_with_calls<'a>(
    info: &mut Info,
    layout: &Layout<'a>,
    members: &[u32],
    types: &TypeOffsets,
    calls: &mut CallRefs,
) -> Result<()> {
    // Name -> positions of the references to its declaration.
    let mut declarations: Vec<(&'a str, Vec<usize>)> = Vec::new();
    let mut declared: HashMap<&'a str, usize> = HashMap::new();
    for &i in members {
        let f = layout.function(i);
        calls.die_offsets[i as usize] = offset32(info.out.len(), ".debug_info")?;
        if !subprogram(info, &f, layout.name_offsets[i as usize], types)? {
            continue;
        }
        let mut outside = |name, at| {
            let d = *declared.entry(name).or_insert_with(|| {
                declarations.push((name, Vec::new()));
                declarations.len() - 1
            });
            declarations[d].1.push(at);
        };
        call_sites(info, layout, f, calls, &mut outside);
        info.out.u8(0);
    }
    for (name, refs) in declarations {
        let at = offset32(info.out.len(), ".debug_info")?;
        info.entry(Abbrev::Declaration);
        info.out.cstr(name);
        for r in refs {
            info.out.patch_u32(r, at);
        }
    }
    Ok(())
}

/// References from call sites to the subprograms they call, filled in once every
/// subprogram has been written.
struct CallRefs<'p> {
    /// `.debug_info` offset of each function's subprogram, in layout order.
    die_offsets: &'p mut Vec<u32>,
    /// (position of a `DW_FORM_ref_addr` value, layout index of the function it refers to).
    fixups: &'p mut Vec<(usize, u32)>,
}

/// The layout index of the function starting at `address`, if one does. A target inside a
/// function but not at its start (a call to a secondary entry) is described like one outside
/// the object, by address or name: it is no error, since the registry may merge objects
/// into one payload after each was accepted on its own.
fn callee(layout: &Layout<'_>, address: u64) -> Option<u32> {
    let functions = &layout.functions;
    let i = functions.partition_point(|p| p.f.start() <= address);
    i.checked_sub(1)
        .filter(|&i| functions[i].f.start() == address)
        .map(|i| i as u32)
}

/// Writes the call sites of `f`; `outside(name, position)` records a reference to the
/// declaration of a function outside the object, written at the end of the unit.
fn call_sites<'a>(
    info: &mut Info,
    layout: &Layout<'a>,
    f: Function<'a>,
    calls: &mut CallRefs,
    outside: &mut impl FnMut(&'a str, usize),
) {
    for c in f.calls() {
        let inside = match c.target.address() {
            Some(a) => callee(layout, a),
            None => None,
        };
        let abbrev = |origin, address, unknown| match (&c.target, inside) {
            (_, Some(_)) | (CallTarget::Symbol { .. }, None) => origin,
            (CallTarget::Address(_), None) => address,
            (CallTarget::Indirect, None) => unknown,
        };
        info.entry(if c.tail_call {
            abbrev(
                Abbrev::TailCallOrigin,
                Abbrev::TailCallAddress,
                Abbrev::TailCallUnknown,
            )
        } else {
            abbrev(Abbrev::CallOrigin, Abbrev::CallAddress, Abbrev::CallUnknown)
        });
        info.out.u64(f.start() + u64::from(c.return_offset));
        match (&c.target, inside) {
            (_, Some(callee)) => {
                calls.fixups.push((info.out.len(), callee));
                info.out.u32(0);
            }
            (CallTarget::Symbol { name, .. }, None) => {
                outside(name, info.out.len());
                info.out.u32(0);
            }
            (CallTarget::Address(a), None) => {
                info.out.uleb(9);
                info.out.u8(dw::DW_OP_addr.0);
                info.out.u64(*a);
            }
            (CallTarget::Indirect, None) => {}
        }
    }
}

/// Unit-relative offsets of the type entries, by [`BaseType`] (0: not written).
type TypeOffsets = [u32; BaseType::Pointer as usize + 1];

/// Writes the type entries the unit's variables use, at the start of the unit.
fn base_types(
    info: &mut Info,
    layout: &Layout<'_>,
    members: &[u32],
    unit_start: usize,
) -> Result<TypeOffsets> {
    let mut offsets: TypeOffsets = [0; BaseType::Pointer as usize + 1];
    let mut used = [false; BaseType::Pointer as usize + 1];
    for &i in members {
        for v in layout.function(i).variables() {
            used[v.ty as usize] = true;
        }
    }
    if !used.contains(&true) {
        return Ok(offsets);
    }
    let here = |info: &Info| offset32(info.out.len() - unit_start, ".debug_info");
    let base = |info: &mut Info, name: &str, encoding: dw::DwAte, size: u8| -> Result<u32> {
        let at = here(info)?;
        info.entry(Abbrev::BaseType);
        info.out.cstr(name);
        info.out.u8(encoding.0);
        info.out.u8(size);
        Ok(at)
    };
    for ty in BaseType::ALL {
        if !used[ty as usize] {
            continue;
        }
        offsets[ty as usize] = if ty == BaseType::Pointer {
            // A pointer to bytes: `unsigned char *`.
            let pointee = base(info, "unsigned char", dw::DW_ATE_unsigned_char, 1)?;
            let at = here(info)?;
            info.entry(Abbrev::PointerType);
            info.out.u8(ty.size());
            info.out.u32(pointee);
            at
        } else {
            let encoding = match ty {
                BaseType::I8 | BaseType::I16 | BaseType::I32 | BaseType::I64 => dw::DW_ATE_signed,
                BaseType::F32 | BaseType::F64 => dw::DW_ATE_float,
                _ => dw::DW_ATE_unsigned,
            };
            base(info, ty.name(), encoding, ty.size())?
        };
    }
    Ok(offsets)
}

/// Writes the subprogram entry of `f` with its variables and blocks. Returns whether it has
/// children: then the caller adds its call sites and ends the list. Inlined in both loops
/// over the functions: most functions are just this entry, written once per function.
#[inline(always)]
fn subprogram(info: &mut Info, f: &Function, name: u32, types: &TypeOffsets) -> Result<bool> {
    let children = !f.variables().is_empty() || !f.blocks().is_empty() || !f.calls().is_empty();
    let abbrev = if !children {
        Abbrev::Subprogram
    } else if f.calls().iter().any(|c| c.tail_call) {
        Abbrev::SubprogramTailCalls
    } else {
        Abbrev::SubprogramWithChildren
    };
    info.used[abbrev as usize - 1] = true;
    // Code (below 128: one byte of ULEB128), name, address, size (at most 5 bytes).
    let mut entry = Small::<24>::new();
    entry.u8(abbrev as u8);
    entry.u32(name);
    entry.u64(f.start());
    entry.uleb(f.size().into());
    entry.append_to(info.out);
    if !children {
        return Ok(false);
    }
    variables_and_blocks(info, f, types);
    Ok(true)
}

/// Writes the variables and lexical blocks of `f`.
fn variables_and_blocks(info: &mut Info, f: &Function, types: &TypeOffsets) {
    // Parameters first, in their order: debuggers list arguments in entry order.
    let params = f
        .variables()
        .iter()
        .filter(|v| v.kind == VariableKind::Parameter);
    let locals = f
        .variables()
        .iter()
        .filter(|v| v.kind == VariableKind::Local);
    let frame_pointer_from_cfa = frame_pointer_from_cfa(f);
    for v in params.chain(locals) {
        info.entry(match v.kind {
            VariableKind::Parameter => Abbrev::Parameter,
            VariableKind::Local => Abbrev::Variable,
        });
        info.out.cstr(&v.name);
        info.out.u32(types[v.ty as usize]);
        // An expression of at most 9 bytes, after its length (one byte of ULEB128).
        let at = info.out.len();
        info.out.u8(0);
        match v.location {
            Location::Register(r) if r < 32 => info.out.u8(dw::DW_OP_reg0.0 + r as u8),
            Location::Register(r) => {
                info.out.u8(dw::DW_OP_regx.0);
                info.out.uleb(r.into());
            }
            Location::FrameOffset(o) => match frame_pointer_from_cfa {
                // Relative to the CFA, which the CFI gives at every instruction: `rbp` is the
                // caller's in the prologue and after the epilogue's `pop rbp`, and a location
                // based on it would read another frame's memory there.
                Some(k) => {
                    info.out.u8(dw::DW_OP_call_frame_cfa.0);
                    info.out.u8(dw::DW_OP_consts.0);
                    info.out.sleb(i64::from(o) - k);
                    info.out.u8(dw::DW_OP_plus.0);
                }
                None => {
                    // The frame pointer (x86-64 `rbp`, aarch64 `x29`; both below 32).
                    let fp = crate::arch::regs(f.arch()).fp as u8;
                    info.out.u8(dw::DW_OP_breg0.0 + fp);
                    info.out.sleb(o.into());
                }
            },
        }
        info.out[at] = (info.out.len() - at - 1) as u8;
    }
    blocks(info, f);
}

/// How far below the CFA `f`'s frame pointer points once set up (`k`: FP = CFA - k), when
/// its frame description says so: every row that computes the CFA from the frame pointer
/// adds the same `k` (16 for the standard frame). `None` for functions that never base the
/// CFA on the frame pointer, or do with different offsets.
fn frame_pointer_from_cfa(f: &Function) -> Option<i64> {
    let rows = f.frame().rows(f.arch(), f.size().into());
    let mut fp_rows = rows.iter().filter(|r| r.cfa_base == CfaBase::Fp);
    let k = fp_rows.next()?.cfa_offset;
    fp_rows.all(|r| r.cfa_offset == k).then_some(i64::from(k))
}

/// Writes the lexical blocks of `f`, nested as the model says, each list of siblings in
/// the model's order. Unnamed: LLDB shows every named lexical block as an inlined call
/// frame in `bt`, and GDB ignores block names.
fn blocks(info: &mut Info, f: &Function) {
    let blocks = f.blocks();
    if blocks.is_empty() {
        return;
    }
    // Children as linked lists; index `blocks.len()` is the subprogram. A block's parent
    // comes before it (the model checks this); anything else hangs off the subprogram.
    let root = blocks.len();
    let mut first_child: Vec<Option<usize>> = vec![None; root + 1];
    let mut last_child: Vec<Option<usize>> = vec![None; root + 1];
    let mut next_sibling: Vec<Option<usize>> = vec![None; root];
    for (i, b) in blocks.iter().enumerate() {
        let parent = b
            .parent
            .map(|p| p as usize)
            .filter(|&p| p < i)
            .unwrap_or(root);
        match last_child[parent] {
            Some(prev) => next_sibling[prev] = Some(i),
            None => first_child[parent] = Some(i),
        }
        last_child[parent] = Some(i);
    }
    // Depth-first, without recursion: nesting depth is the caller's to choose.
    let mut open: Vec<usize> = Vec::new();
    let mut next = first_child[root];
    loop {
        match next {
            Some(i) => {
                let b = &blocks[i];
                let children = first_child[i].is_some();
                info.entry(if children {
                    Abbrev::BlockWithChildren
                } else {
                    Abbrev::Block
                });
                info.out.u64(f.start() + u64::from(b.start));
                info.out.uleb((b.end - b.start).into());
                if children {
                    open.push(i);
                    next = first_child[i];
                } else {
                    next = next_sibling[i];
                }
            }
            None => match open.pop() {
                Some(parent) => {
                    info.out.u8(0);
                    next = next_sibling[parent];
                }
                None => break,
            },
        }
    }
}

/// Writes the line program of the unit for `file` and returns its offset. Neighbouring
/// functions (see `layout::neighbours`) share one sequence; otherwise a sequence ends exactly where
/// its last function ends, so no line spreads over code that is not the function's.
fn line_program(
    out: &mut Vec<u8>,
    file: &str,
    layout: &Layout<'_>,
    functions: &[u32],
) -> Result<u32> {
    let start = out.len();
    let offset = offset32(start, ".debug_line")?;
    out.reserve(64 + file.len() + functions.len() * 12);
    line_program_header(out, Some(file));
    offset32(out.len() - start, ".debug_line")?;

    let mut lines = Lines {
        out,
        address: 0,
        line: 1,
    };
    // End of the last function of the open sequence.
    let mut open: Option<u64> = None;
    // The function before, if it has rows: its layout index and end.
    let mut prev: Option<(u32, u64)> = None;
    for &i in functions {
        let f = layout.function(i);
        let Some(first) = f.lines().first() else {
            prev = None;
            continue;
        };
        // `neighbours(layout, prev, i)`, from what the loop knows. A function that starts
        // in a gap starts a sequence (see `Lines::gap`).
        let continues = first.offset == 0
            && !first.is_gap()
            && prev.is_some_and(|(p, end)| p + 1 == i && f.start() - end <= MAX_PADDING);
        if !continues {
            if let Some(end) = open {
                lines.end_sequence(end);
            }
            lines.set_address(f.start());
        }
        lines.rows(f.start(), f.lines());
        open = Some(f.end());
        prev = Some((i, f.end()));
    }
    if let Some(end) = open {
        lines.end_sequence(end);
    }
    patch_length(out, start, ".debug_line")?;
    Ok(offset)
}

/// Appends the header of a line program for `file` to `out` (its unit length left for the
/// caller to patch). Without a file: what reading a growing payload's sequences back with
/// gimli puts before them (see `growing/index.rs`).
pub(super) fn line_program_header(out: &mut Vec<u8>, file: Option<&str>) {
    let start = out.len();
    out.extend_from_slice(&LINE_HEADER);
    // One file, as given (DWARF 4 has no working directory in the line program), in
    // directory 0, without time or size.
    if let Some(file) = file {
        out.cstr(file);
        out.extend_from_slice(&[0, 0, 0]);
    }
    out.push(0);
    let header_length_at = start + 6;
    // A file name of a layout: far below 4 GiB.
    let header_length = (out.len() - header_length_at - 4) as u32;
    out.patch_u32(header_length_at, header_length);
}

/// Appends the line sequence of `f` (which has rows) to `out`: what [`line_program`] writes
/// after its header for a unit of that function alone. A growing payload's open unit takes
/// such sequences (`growing/`) without the rest of a unit being built.
pub(super) fn line_sequence(out: &mut Vec<u8>, f: Function<'_>) {
    let mut lines = Lines {
        out,
        address: 0,
        line: 1,
    };
    lines.set_address(f.start());
    lines.rows(f.start(), f.lines());
    lines.end_sequence(f.end());
}

/// The line-number state machine, as the program being written leaves it.
struct Lines<'a> {
    out: &'a mut Vec<u8>,
    address: u64,
    line: u64,
}

/// Appends a row to `out`, in the state machine's `(address, line)`; `address` is never
/// below the current one (rows are sorted, functions in address order).
#[inline(always)]
fn row(out: &mut Vec<u8>, (current, current_line): (&mut u64, &mut u64), address: u64, line: u64) {
    let step = address - *current;
    let line_step = line.wrapping_sub(*current_line) as i64;
    *current = address;
    *current_line = line;
    // The usual row: one special opcode (what `row_steps` writes then).
    let l = line_step.wrapping_sub(LINE_BASE) as u64;
    if l < LINE_RANGE && step <= 255 {
        let op = l + LINE_RANGE * step + u64::from(OPCODE_BASE);
        if op <= 255 {
            out.u8(op as u8);
            return;
        }
    }
    // Next most usual: a line step of one byte of SLEB128, an address step of one byte of
    // ULEB128 at most. What `row_steps` writes then, put together in a register.
    let short_line = LINE_BASE <= line_step && line_step < LINE_BASE + LINE_RANGE as i64;
    if (-64..64).contains(&line_step) && step < 0x80 {
        let (mut ops, mut n) = (0u64, 0);
        let mut line_step = line_step;
        if !short_line {
            ops = u64::from(dw::DW_LNS_advance_line.0) | (line_step as u64 & 0x7f) << 8;
            n = 2;
            line_step = 0;
        }
        let l = (line_step - LINE_BASE) as u64;
        // `step` fits a special opcode if this is at most 255; `step - CONST_ADD_PC` does
        // if that less the address advance of `DW_LNS_const_add_pc` is.
        let code = l + LINE_RANGE * step + u64::from(OPCODE_BASE);
        const CONST_ADD_PC_CODES: u64 = LINE_RANGE * CONST_ADD_PC;
        let code = if code <= 255 {
            code
        } else if step >= CONST_ADD_PC && code - CONST_ADD_PC_CODES <= 255 {
            ops |= u64::from(dw::DW_LNS_const_add_pc.0) << (8 * n);
            n += 1;
            code - CONST_ADD_PC_CODES
        } else {
            ops |= (u64::from(dw::DW_LNS_advance_pc.0) | step << 8) << (8 * n);
            n += 2;
            l + u64::from(OPCODE_BASE)
        };
        ops |= code << (8 * n);
        extend_small(out, &ops.to_le_bytes(), n + 1);
        return;
    }
    row_steps(out, step, line_step);
}

/// Appends the opcodes that advance the state machine by `step` bytes and `line_step`
/// lines and append a row.
#[inline(never)]
fn row_steps(out: &mut Vec<u8>, mut step: u64, mut line_step: i64) {
    if !(LINE_BASE..LINE_BASE + LINE_RANGE as i64).contains(&line_step) {
        out.u8(dw::DW_LNS_advance_line.0);
        out.sleb(line_step);
        line_step = 0;
    }
    let l = (line_step - LINE_BASE) as u64;
    // The largest address step a special opcode can take with this line step.
    let max_step = (255 - u64::from(OPCODE_BASE) - l) / LINE_RANGE;
    if step > max_step {
        if step >= CONST_ADD_PC && step - CONST_ADD_PC <= max_step {
            out.u8(dw::DW_LNS_const_add_pc.0);
            step -= CONST_ADD_PC;
        } else {
            out.u8(dw::DW_LNS_advance_pc.0);
            out.uleb(step);
            step = 0;
        }
    }
    out.u8((l + LINE_RANGE * step + u64::from(OPCODE_BASE)) as u8);
}

impl Lines<'_> {
    fn set_address(&mut self, address: u64) {
        self.out.u8(0);
        self.out.uleb(9);
        self.out.u8(dw::DW_LNE_set_address.0);
        self.out.u64(address);
        self.address = address;
    }

    /// A gap row at `address`: the open sequence ends there, and a new one starts with a
    /// row of line 0. Line 0 is DWARF's "no source line", but GDB's DWARF reader (13,
    /// tried) skips line-0 rows, so the line before would run on over the gap; the end of
    /// the sequence stops it there for every reader, and the line-0 row is the gap for
    /// readers that take line 0 as such (LLDB: "no source code associated with it") or
    /// that read rows and skip ends of sequences (our inspector and growing index, gimli
    /// users). A gap between two rows costs 19 bytes of `.debug_line` (its row and the
    /// longer step to the next line included), 1 at the start of a sequence.
    #[cold]
    fn gap(&mut self, address: u64) {
        self.end_sequence(address);
        self.set_address(address);
        row(self.out, (&mut self.address, &mut self.line), address, 0);
    }

    /// Appends the rows of the function at `start`. The first moves from wherever the
    /// program is (a gap first is only ever at the start of a sequence: see
    /// [`line_program`]); the others step within the function, and the usual step is one
    /// special opcode: those are computed for up to [`ROW_CHUNK`] rows at a time in a loop
    /// without branches (which the compiler runs on several rows at once), and appended at
    /// once if all are; if not (or for a gap), that chunk's rows are written one by one.
    #[inline(always)]
    fn rows(&mut self, start: u64, rows: &[LineRow]) {
        let Some(first) = rows.first() else {
            return;
        };
        row(
            self.out,
            (&mut self.address, &mut self.line),
            start + u64::from(first.offset),
            first.line.into(),
        );
        let mut prev = *first;
        for chunk in rows[1..].chunks(ROW_CHUNK) {
            let mut ops = [0u8; ROW_CHUNK];
            // Bits 8 and up stay clear while every row is one special opcode.
            let mut wide = 0u64;
            for (op, r) in ops.iter_mut().zip(chunk) {
                // Offsets increase: the step is below 2^32, and the code does not wrap
                // when the line step fits.
                let step = u64::from(r.offset - prev.offset);
                let l = u64::from(r.line)
                    .wrapping_sub(u64::from(prev.line))
                    .wrapping_sub(LINE_BASE as u64);
                let code = l
                    .wrapping_add(LINE_RANGE * step)
                    .wrapping_add(u64::from(OPCODE_BASE));
                // What `row` writes as one special opcode: `l < LINE_RANGE`, which is
                // `l` and `l + 2` both below 16 (a line step back wraps `l` far above;
                // shifted, it keeps bits above 35), and `code <= 255`.
                const _: () = assert!(LINE_RANGE + 2 == 16);
                // A gap is never one special opcode (see `gap`).
                wide |= ((l | l.wrapping_add(2)) << 4) | code | (u64::from(r.line == 0) << 8);
                *op = code as u8;
                prev = *r;
            }
            if wide <= 255 {
                extend_small(self.out, &ops, chunk.len());
                (self.address, self.line) = (start + u64::from(prev.offset), prev.line.into());
            } else {
                for r in chunk {
                    if r.is_gap() {
                        self.gap(start + u64::from(r.offset));
                        continue;
                    }
                    row(
                        self.out,
                        (&mut self.address, &mut self.line),
                        start + u64::from(r.offset),
                        r.line.into(),
                    );
                }
            }
        }
    }

    fn end_sequence(&mut self, end: u64) {
        let step = end - self.address;
        if step > 0 {
            self.out.u8(dw::DW_LNS_advance_pc.0);
            self.out.uleb(step);
        }
        self.out
            .extend_from_slice(&[0, 1, dw::DW_LNE_end_sequence.0]);
        self.address = 0;
        self.line = 1;
    }
}

#[cfg(test)]
mod tests {
    use crate::elf::test_support::{Line, Parsed};
    use crate::model::{BaseType, JitObject, LineRow, Location, Variable, VariableKind};

    /// A sequence as `line_sequence` writes it (rows of every step: special opcodes,
    /// `DW_LNS_const_add_pc`, `DW_LNS_advance_pc`, `DW_LNS_advance_line` both ways), under
    /// the header `line_program_header` writes without a file, reads with gimli as the rows
    /// it was written from, and ends at the function's end.
    #[test]
    fn line_sequences_read_with_gimli_as_written() {
        let mut r = crate::elf::test_support::Rng::new(7);
        for seed in 0..2000u64 {
            let size = 1 + r.below(1 << 16) as u32;
            let mut rows = Vec::new();
            let (mut offset, mut line) = (0u32, 1 + r.below(10_000) as u32);
            while offset < size && rows.len() < 40 {
                // Now and then a gap (line 0), never two in a row.
                let gap = r.below(6) == 0 && !rows.last().is_some_and(LineRow::is_gap);
                rows.push(if gap {
                    LineRow::gap(offset)
                } else {
                    LineRow { offset, line }
                });
                offset += 1 + r.pick(&[0, 1, 5, 17, 300, 70_000]) as u32;
                line = (line as i64 + r.pick(&[-3000i64, -2, 0, 1, 8, 40, 5000])).max(1) as u32;
            }
            let mut o = JitObject::new();
            let start = r.below(1 << 47);
            let f = o.add_function("f", start, size.into()).unwrap();
            o.set_lines(f, "x.js", &rows).unwrap();
            let mut program = Vec::new();
            super::line_program_header(&mut program, None);
            super::line_sequence(&mut program, o.functions().first().unwrap());
            let length = (program.len() - 4) as u32;
            program[..4].copy_from_slice(&length.to_le_bytes());
            let header = gimli::DebugLine::new(&program, gimli::LittleEndian)
                .program(gimli::DebugLineOffset(0), 8, None, None)
                .unwrap();
            let mut state = header.rows();
            let (mut read, mut end) = (Vec::new(), None);
            while let Some((_, row)) = state.next_row().unwrap() {
                if row.end_sequence() {
                    end = Some(row.address());
                } else {
                    // gimli reads line 0 (a gap) as no line.
                    let line = row.line().map_or(0, |l| l.get()) as u32;
                    let offset = (row.address() - start) as u32;
                    read.push(LineRow { offset, line });
                }
            }
            assert_eq!(read, rows, "seed {seed}");
            assert_eq!(end, Some(start + u64::from(size)), "seed {seed}");
        }
    }

    /// A local `int64_t v` in the frame slot at rbp - 8.
    fn local_at_rbp_minus_8() -> Variable {
        Variable {
            name: "v".into(),
            kind: VariableKind::Local,
            ty: BaseType::I64,
            location: Location::FrameOffset(-8),
        }
    }

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

    /// Gap rows are rows of line 0, DWARF's "no source line", each after the end of the
    /// sequence before (GDB skips line-0 rows): first, between lines and last, also where
    /// one function's sequence would run on into the next.
    #[test]
    fn gap_rows_end_a_sequence_and_start_one_with_line_0() {
        let mut o = JitObject::new();
        let a = o.add_function("a", 0x1000, 0x10).unwrap();
        let b = o.add_function("b", 0x1010, 0x10).unwrap();
        let c = o.add_function("c", 0x1020, 0x10).unwrap();
        let (l, gap) = (LineRow::new, LineRow::gap);
        o.set_lines(a, "a.js", &[gap(0), l(2, 40), gap(6), l(9, 41), gap(12)])
            .unwrap();
        o.set_lines(b, "a.js", &[gap(0), l(4, 42)]).unwrap();
        o.set_lines(c, "a.js", &[l(0, 43), gap(3)]).unwrap();
        let at = |offset: u64, n| line("a.js", 0x1000 + offset, Some(n));
        let end = |offset: u64| line("a.js", 0x1000 + offset, None);
        assert_eq!(
            Parsed::encode(&o).lines(),
            [
                // a starts a sequence: its gap needs no end before it.
                at(0, 0),
                at(2, 40),
                end(6),
                at(6, 0),
                at(9, 41),
                end(12),
                at(12, 0),
                // b starts in a gap: not in a's sequence.
                end(0x10),
                at(0x10, 0),
                at(0x14, 42),
                // c continues b's sequence.
                at(0x20, 43),
                end(0x23),
                at(0x23, 0),
                end(0x30),
            ]
        );
    }

    /// Every kind of step: special opcodes, `DW_LNS_const_add_pc`, `DW_LNS_advance_pc`,
    /// `DW_LNS_advance_line` both ways (short jumps after 0 to 7 special opcodes, with and
    /// without `DW_LNS_const_add_pc`), and a large function.
    #[test]
    fn line_steps_of_every_size() {
        let steps: [(u32, u32); 27] = [
            (0, 1),
            (1, 1),
            (2, 9),
            (20, 3),
            (37, 3),
            (38, 100_000),
            (300, 99_990),
            (322, 99_983),
            (323, 99_984),
            (324, 99_985),
            (325, 99_986),
            (326, 99_987),
            (327, 99_988),
            (350, 99_940),
            (351, 99_941),
            (352, 99_942),
            (353, 99_943),
            (354, 99_944),
            (355, 99_945),
            (356, 99_946),
            (360, 100_009),
            (70_000, 1),
            (70_017, 5),
            (70_034, 4_000_000_000),
            (70_040, 3_999_999_950),
            (1 << 20, 1),
            ((1 << 20) + 17, 2),
        ];
        let mut o = JitObject::new();
        let f = o.add_function("big", 0x7f00_0000_0000, 3 << 20).unwrap();
        o.set_lines(f, "big.js", &rows(&steps)).unwrap();
        let p = Parsed::encode(&o);
        let mut want: Vec<Line> = steps
            .iter()
            .map(|&(offset, l)| {
                line(
                    "big.js",
                    0x7f00_0000_0000 + u64::from(offset),
                    Some(l.into()),
                )
            })
            .collect();
        want.push(line("big.js", 0x7f00_0000_0000 + (3 << 20), None));
        assert_eq!(p.lines(), want);
    }

    /// Lines far apart in both directions, near 0 and near `u32::MAX`: steps that wrap
    /// around 32 bits to small ones must not pass for small steps.
    #[test]
    fn line_steps_across_32_bits() {
        let max = u32::MAX;
        let functions: [&[u32]; 6] = [
            &[max, 2],
            &[1, max - 3],
            &[2, max - 2, 3],
            &[max - 1, max, 1, 2],
            &[(1 << 31) - 2, 1 << 31, (1 << 31) + 3],
            &[5, 3, 9],
        ];
        let mut o = JitObject::new();
        let mut want = Vec::new();
        for (i, lines) in functions.iter().enumerate() {
            let start = 0x1000 + 0x100 * i as u64;
            let f = o.add_function(&format!("f{i}"), start, 0x100).unwrap();
            let steps: Vec<(u32, u32)> = (0..).zip(lines.iter().copied()).collect();
            o.set_lines(f, "far.js", &rows(&steps)).unwrap();
            want.extend(
                steps
                    .iter()
                    .map(|&(offset, l)| line("far.js", start + u64::from(offset), Some(l.into()))),
            );
        }
        want.push(line("far.js", 0x1600, None));
        assert_eq!(Parsed::encode(&o).lines(), want);
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

    /// Units holding an x86-64 function whose CFI is wrong on its `ret` (no epilogue
    /// declared) carry [`super::PRODUCER`]; units whose functions all end right, and aarch64
    /// units (GDB has no such unwinder there), carry none.
    #[test]
    fn producer_marks_units_with_undeclared_epilogues() {
        use crate::model::{Arch, UnwindRow};
        let entry = UnwindRow::X86_64_ENTRY;
        let pushed = UnwindRow {
            offset: 1,
            cfa_offset: 16,
            fp_offset: -16,
            ..entry
        };
        let mut o = JitObject::new();
        let mut at = 0x1000;
        let mut add = |o: &mut JitObject, file: &str| {
            let f = o.add_function(&format!("f{at:x}"), at, 0x10).unwrap();
            o.set_lines(f, file, &rows(&[(0, 1)])).unwrap();
            at += 0x10;
            f
        };
        // A default frame (rbp-based throughout).
        add(&mut o, "default.js");
        let f = add(&mut o, "fp.js");
        o.set_frame_pointer(f, 1, 4).unwrap();
        let f = add(&mut o, "declared.js");
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 14, 15).unwrap();
        // Rows that go back to the entry rule before the `ret`, and rows that do not.
        let f = add(&mut o, "rows_back.js");
        let back = UnwindRow {
            offset: 14,
            ..entry
        };
        o.set_unwind(f, &[entry, pushed, back]).unwrap();
        let f = add(&mut o, "rows_open.js");
        o.set_unwind(f, &[entry, pushed]).unwrap();
        // Never leaves the entry rule (a leaf without a frame).
        let f = add(&mut o, "leaf.js");
        o.set_unwind(f, &[entry]).unwrap();
        // One undeclared function marks its whole unit.
        let f = add(&mut o, "mixed.js");
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 14, 15).unwrap();
        add(&mut o, "mixed.js");
        let mut got = Parsed::encode(&o).unit_producers();
        got.sort();
        let p = Some(super::PRODUCER.to_string());
        assert_eq!(
            got,
            [
                ("declared.js".into(), None),
                ("default.js".into(), p.clone()),
                ("fp.js".into(), p.clone()),
                ("leaf.js".into(), None),
                ("mixed.js".into(), p.clone()),
                ("rows_back.js".into(), None),
                ("rows_open.js".into(), p.clone()),
            ]
        );

        let mut a = JitObject::with_arch(Arch::Aarch64);
        let f = a.add_function("arm", 0x1000, 0x10).unwrap();
        a.set_lines(f, "arm.js", &rows(&[(0, 1)])).unwrap();
        a.set_frame_pointer(f, 4, 8).unwrap();
        assert_eq!(
            Parsed::encode(&a).unit_producers(),
            [("arm.js".to_string(), None)]
        );
    }

    /// GDB takes "GNU <word> <major>.<minor>..." for GCC major.minor (`producer_is_gcc`);
    /// the version must be before 4.5 (epilogue CFI not trusted) and not before 4.3 (unit
    /// names split when `DW_AT_comp_dir` is missing, which ours always is).
    #[test]
    fn producer_reads_as_gcc_4_4_to_gdb() {
        let rest = super::PRODUCER.strip_prefix("GNU ").expect("GNU prefix");
        assert!(
            !rest.starts_with("AS "),
            "GDB takes `GNU AS` for the assembler"
        );
        let (word, version) = rest.split_once(' ').expect("a word, then the version");
        assert!(!word.is_empty() && !word.contains(char::is_whitespace));
        let (major, minor) = version.split_once('.').expect("major.minor");
        let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
        assert_eq!((major.parse(), minor.parse()), (Ok(4u32), Ok(4u32)));
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
                // The default frame keeps rbp at CFA - 16: DW_OP_call_frame_cfa,
                // DW_OP_consts -40, DW_OP_plus (rbp - 24 wherever rbp is set up, right in
                // the prologue and epilogue too)
                (false, "sum", "double", 8, &[0x9c, 0x11, 0x58, 0x22][..]),
                // DW_OP_call_frame_cfa, DW_OP_consts 184, DW_OP_plus (rbp + 200)
                (
                    false,
                    "count",
                    "uint16_t",
                    2,
                    &[0x9c, 0x11, 0xb8, 0x01, 0x22][..]
                ),
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
    fn call_sites_refer_to_their_callees() {
        use crate::elf::test_support::{CallSiteDie, Callee};
        use crate::model::CallTarget;
        let mut o = JitObject::new();
        let a = o.add_function("a", 0x1000, 0x20).unwrap();
        let b = o.add_function("b", 0x1020, 0x20).unwrap();
        let c = o.add_function("c", 0x1040, 0x10).unwrap();
        o.set_lines(a, "a.js", &rows(&[(0, 1)])).unwrap();
        o.set_lines(b, "a.js", &rows(&[(0, 2)])).unwrap();
        o.set_lines(c, "c.js", &rows(&[(0, 3)])).unwrap();
        let host = || CallTarget::Symbol {
            address: 0x5000,
            name: "host_fn".into(),
        };
        o.add_call_site(a, 5, CallTarget::Address(0x1020)).unwrap();
        // In the object: referred to by address, whatever the name says; in another unit.
        let c_named = CallTarget::Symbol {
            address: 0x1040,
            name: "other".into(),
        };
        o.add_call_site(a, 10, c_named).unwrap();
        o.add_call_site(a, 15, host()).unwrap();
        o.add_call_site(a, 20, CallTarget::Address(0x6000)).unwrap();
        o.add_call_site(a, 25, CallTarget::Indirect).unwrap();
        // Recursion, the same declaration again, and a tail call as the last instruction.
        o.add_call_site(b, 4, CallTarget::Address(0x1020)).unwrap();
        o.add_call_site(b, 8, host()).unwrap();
        o.add_tail_call(b, 0x20, CallTarget::Address(0x1040))
            .unwrap();
        o.add_call_site(c, 6, host()).unwrap();
        let p = Parsed::encode(&o);
        let function = |unit: &str, name: &str, low| Callee::Function {
            unit: unit.into(),
            name: name.into(),
            low,
        };
        let site = |caller: &str, all: bool, return_pc, tail_call, callee| CallSiteDie {
            caller: caller.into(),
            caller_all_tail_calls: all,
            return_pc,
            tail_call,
            callee,
        };
        let declared = || Callee::Declaration("host_fn".into());
        let mut target = vec![gimli::DW_OP_addr.0];
        target.extend(0x6000u64.to_le_bytes());
        assert_eq!(
            p.call_sites(),
            [
                site("a", false, 0x1005, false, function("a.js", "b", 0x1020)),
                site("a", false, 0x100a, false, function("c.js", "c", 0x1040)),
                site("a", false, 0x100f, false, declared()),
                site("a", false, 0x1014, false, Callee::Target(target)),
                site("a", false, 0x1019, false, Callee::None),
                site("b", true, 0x1024, false, function("a.js", "b", 0x1020)),
                site("b", true, 0x1028, false, declared()),
                site("b", true, 0x1040, true, function("c.js", "c", 0x1040)),
                site("c", false, 0x1046, false, declared()),
            ]
        );
        // One declaration per unit that names the function.
        let declarations: Vec<(String, String)> = p
            .subprograms()
            .into_iter()
            .filter(|s| s.low == 0)
            .map(|s| (s.unit, s.name))
            .collect();
        let pair = |u: &str, n: &str| (u.to_string(), n.to_string());
        assert_eq!(
            declarations,
            [pair("a.js", "host_fn"), pair("c.js", "host_fn")]
        );
    }

    #[test]
    fn a_call_into_the_middle_of_a_function_is_described_by_address() {
        use crate::elf::test_support::Callee;
        use crate::model::CallTarget;
        let mut o = JitObject::new();
        let a = o.add_function("a", 0x1000, 0x20).unwrap();
        o.add_function("b", 0x1020, 0x20).unwrap();
        o.add_call_site(a, 5, CallTarget::Address(0x1024)).unwrap();
        let entry = CallTarget::Symbol {
            address: 0x1028,
            name: "b_entry".into(),
        };
        o.add_call_site(a, 10, entry).unwrap();
        let mut target = vec![gimli::DW_OP_addr.0];
        target.extend(0x1024u64.to_le_bytes());
        let callees: Vec<Callee> = Parsed::encode(&o)
            .call_sites()
            .into_iter()
            .map(|c| c.callee)
            .collect();
        assert_eq!(
            callees,
            [
                Callee::Target(target),
                Callee::Declaration("b_entry".into())
            ]
        );
    }

    #[test]
    fn frame_offsets_follow_the_frame_description() {
        use crate::model::{CfaBase, UnwindRow};
        let row = |offset, cfa_base, cfa_offset| UnwindRow {
            offset,
            cfa_base,
            cfa_offset,
            fp_offset: if cfa_base == CfaBase::Fp {
                -cfa_offset
            } else {
                0
            },
        };
        let mut o = JitObject::new();
        let names = ["fp", "fp_rows", "sp_rows", "mixed_rows"];
        for (i, name) in names.iter().enumerate() {
            let f = o
                .add_function(name, 0x1000 + i as u64 * 0x100, 0x40)
                .unwrap();
            match i {
                0 => o.set_frame_pointer(f, 1, 4).unwrap(),
                // A frame pointer 32 below the CFA once set up.
                1 => o
                    .set_unwind(f, &[row(0, CfaBase::Sp, 8), row(8, CfaBase::Fp, 32)])
                    .unwrap(),
                2 => o
                    .set_unwind(f, &[row(0, CfaBase::Sp, 8), row(4, CfaBase::Sp, 40)])
                    .unwrap(),
                _ => o
                    .set_unwind(
                        f,
                        &[
                            row(0, CfaBase::Sp, 8),
                            row(4, CfaBase::Fp, 16),
                            row(8, CfaBase::Fp, 32),
                        ],
                    )
                    .unwrap(),
            }
            o.add_variable(f, local_at_rbp_minus_8()).unwrap();
        }
        let p = Parsed::encode(&o);
        let got: Vec<(String, Vec<u8>)> = p
            .subprograms()
            .into_iter()
            .map(|s| (s.name.clone(), s.vars[0].location.clone()))
            .collect();
        let want = |name: &str, loc: &[u8]| (name.to_string(), loc.to_vec());
        assert_eq!(
            got,
            [
                // CFA - 24: DW_OP_call_frame_cfa, DW_OP_consts -24, DW_OP_plus.
                want("fp", &[0x9c, 0x11, 0x68, 0x22]),
                // CFA - 40.
                want("fp_rows", &[0x9c, 0x11, 0x58, 0x22]),
                // No frame pointer described: rbp - 8 as is (DW_OP_breg6 -8).
                want("sp_rows", &[0x76, 0x78]),
                // Two frame-pointer offsets: rbp as is.
                want("mixed_rows", &[0x76, 0x78]),
            ]
        );
    }

    #[test]
    fn objects_without_call_sites_pay_nothing_for_them() {
        use crate::model::CallTarget;
        let mut plain = JitObject::new();
        plain.add_function("a", 0x1000, 0x20).unwrap();
        let info = Parsed::encode(&plain).section(".debug_info").len();
        let mut with = plain.clone();
        with.add_call_site(
            crate::model::FunctionId::from_index(0),
            5,
            CallTarget::Address(0x1000),
        )
        .unwrap();
        // abbreviation, return address, reference, end of the children.
        assert_eq!(
            Parsed::encode(&with).section(".debug_info").len(),
            info + 1 + 8 + 4 + 1
        );
    }

    #[test]
    fn types_are_shared_within_a_unit() {
        let mut o = JitObject::new();
        for i in 0..3u64 {
            let f = o
                .add_function(&format!("f{i}"), 0x1000 + i * 16, 16)
                .unwrap();
            o.add_variable(f, local_at_rbp_minus_8()).unwrap();
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
