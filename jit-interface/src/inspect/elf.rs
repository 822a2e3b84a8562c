//! ELF payloads: FUNC symbols (`object`), then the line programs and subprograms of the DWARF
//! (`gimli`) for source files and lines. Reads our encoder's objects and other runtimes'
//! (LLVM registers relocatable objects too): in a relocatable object a symbol's value is an
//! offset in its section, whose `sh_addr` the runtime set to the code's real address, and the
//! DWARF sections' relocations (`.rela.debug_info`, ...) are applied against those addresses
//! first, as GDB does: LLVM's MCJIT leaves every name and address of its DWARF to them.
//! Linked images (ET_DYN, ET_EXEC) are read at the addresses they hold.
//!
//! A damaged symbol or DWARF unit is reported in [`PayloadInfo::problems`] and the rest of
//! the payload is still used; only a file `object` cannot parse at all is refused.

use std::borrow::Cow;
use std::collections::HashMap;

use object::{
    elf, Object, ObjectKind, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget,
    SymbolKind, SymbolSection,
};

use super::{FunctionInfo, InspectError, ObjectInfo, PayloadInfo, PayloadKind, SourceInfo};
use crate::model::Arch;

type Slice<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

/// At most this many problems are listed; the count of the rest is reported.
const MAX_PROBLEMS: usize = 32;

/// Collects what could not be read.
#[derive(Default)]
struct Problems {
    list: Vec<String>,
    more: usize,
}

impl Problems {
    fn push(&mut self, p: String) {
        if self.list.len() < MAX_PROBLEMS {
            self.list.push(p);
        } else {
            self.more += 1;
        }
    }
    fn finish(mut self) -> Vec<String> {
        if self.more > 0 {
            self.list
                .push(format!("... and {} more problems", self.more));
        }
        self.list
    }
}

pub(super) fn decode(bytes: &[u8]) -> Result<PayloadInfo, InspectError> {
    let file = object::File::parse(bytes)
        .map_err(|e| InspectError::Elf(format!("not a readable ELF file: {e}")))?;
    let arch = match file.architecture() {
        object::Architecture::X86_64 => Some(Arch::X86_64),
        object::Architecture::Aarch64 => Some(Arch::Aarch64),
        _ => None,
    };
    let mut problems = Problems::default();
    let mut functions = symbols(&file, &mut problems);
    dwarf(&file, &mut functions, &mut problems);
    let sources = match section_sources(&file) {
        Ok(sources) => sources
            .into_iter()
            .map(|(file, text)| SourceInfo {
                file: file.to_string(),
                text: text.to_string(),
                object: 0,
            })
            .collect(),
        Err(e) => {
            problems.push(e);
            Vec::new()
        }
    };
    Ok(PayloadInfo {
        kind: PayloadKind::Elf,
        arch,
        objects: vec![ObjectInfo { live: None }],
        functions,
        problems: problems.finish(),
        sources,
    })
}

/// The source texts of an ELF payload (`payload_sources`).
pub(super) fn sources(bytes: &[u8]) -> Result<Vec<(String, String)>, InspectError> {
    let file = object::File::parse(bytes)
        .map_err(|e| InspectError::Elf(format!("not a readable ELF file: {e}")))?;
    let sources = section_sources(&file).map_err(InspectError::Elf)?;
    Ok(sources
        .into_iter()
        .map(|(file, text)| (file.to_string(), text.to_string()))
        .collect())
}

/// What the `.jit_gdb.sources` section says (nothing if there is none), or why it cannot
/// be read.
fn section_sources<'a>(file: &object::File<'a>) -> Result<Vec<(&'a str, &'a str)>, String> {
    let Some(section) = file.section_by_name(crate::format::SOURCES_SECTION) else {
        return Ok(Vec::new());
    };
    let name = crate::format::SOURCES_SECTION;
    let data = section.data().map_err(|e| format!("section {name}: {e}"))?;
    crate::format::sources::read_elf(data).map_err(|e| format!("section {name}: {e}"))
}

/// The defined FUNC symbols, at their absolute addresses.
fn symbols(file: &object::File<'_>, problems: &mut Problems) -> Vec<FunctionInfo> {
    let relocatable = file.kind() == ObjectKind::Relocatable;
    let mut out = Vec::new();
    for sym in file.symbols() {
        if sym.kind() != SymbolKind::Text || !sym.is_definition() {
            continue;
        }
        let name = match sym.name_bytes() {
            Ok(n) if !n.is_empty() => String::from_utf8_lossy(n).into_owned(),
            Ok(_) => continue,
            Err(e) => {
                problems.push(format!("symbol {}: unreadable name: {e}", sym.index().0));
                continue;
            }
        };
        let base = match (relocatable, sym.section()) {
            (true, SymbolSection::Section(index)) => match file.section_by_index(index) {
                Ok(s) => s.address(),
                Err(e) => {
                    problems.push(format!("symbol `{name}`: its section: {e}"));
                    continue;
                }
            },
            _ => 0,
        };
        let Some(start) = base.checked_add(sym.address()) else {
            problems.push(format!(
                "symbol `{name}`: section address {base:#x} + value {:#x} overflows",
                sym.address()
            ));
            continue;
        };
        if start.checked_add(sym.size()).is_none() {
            problems.push(format!(
                "symbol `{name}` at {start:#x}: size {:#x} runs past the end of the address space",
                sym.size()
            ));
            continue;
        }
        out.push(FunctionInfo {
            name,
            start,
            size: sym.size(),
            file: None,
            lines: Vec::new(),
            object: 0,
        });
    }
    out
}

/// A line row before it is given to its function.
struct Row {
    address: u64,
    line: u32,
    file: usize,
}

/// The DWARF sections read (those of DWARF 2 to 5 that locate lines and subprograms).
const DWARF_SECTIONS: [gimli::SectionId; 10] = [
    gimli::SectionId::DebugAbbrev,
    gimli::SectionId::DebugAddr,
    gimli::SectionId::DebugInfo,
    gimli::SectionId::DebugLine,
    gimli::SectionId::DebugLineStr,
    gimli::SectionId::DebugRanges,
    gimli::SectionId::DebugRngLists,
    gimli::SectionId::DebugStr,
    gimli::SectionId::DebugStrOffsets,
    gimli::SectionId::DebugTypes,
];

/// How a relocation type of a DWARF section is applied: the width of the field and which
/// values fit a 4-byte one.
struct FieldKind {
    bytes: usize,
    fits: Fits,
}

#[derive(Clone, Copy)]
enum Fits {
    Unsigned,
    Signed,
    Either,
}

/// The absolute relocations DWARF uses, by ELF machine and type; `None`: not supported
/// (reported, never guessed at). `Some(None)`: a no-op (R_*_NONE).
fn field_kind(machine: elf::Machine, r_type: elf::RelocationType) -> Option<Option<FieldKind>> {
    let k = |bytes, fits| Some(Some(FieldKind { bytes, fits }));
    match (machine, r_type) {
        (elf::EM_X86_64, elf::R_X86_64_NONE) | (elf::EM_AARCH64, elf::R_AARCH64_NONE) => Some(None),
        (elf::EM_X86_64, elf::R_X86_64_64) | (elf::EM_AARCH64, elf::R_AARCH64_ABS64) => {
            k(8, Fits::Either)
        }
        (elf::EM_X86_64, elf::R_X86_64_32) => k(4, Fits::Unsigned),
        (elf::EM_X86_64, elf::R_X86_64_32S) => k(4, Fits::Signed),
        // AArch64's ABS32 takes a value that fits as signed or as unsigned.
        (elf::EM_AARCH64, elf::R_AARCH64_ABS32) => k(4, Fits::Either),
        _ => None,
    }
}

/// The bytes of DWARF section `section` of a relocatable object with its relocations
/// applied as a linker (and GDB) would: a symbol's value is its section's `sh_addr` (the
/// address the runtime gave it) plus its offset there, and the field gets value + addend.
/// A relocation that cannot be applied is left as stored and named in `problems`, one line
/// per section and cause with the count.
fn relocate<'a>(
    file: &object::File<'a>,
    section: &object::Section<'a, '_>,
    data: &'a [u8],
    problems: &mut Problems,
) -> Cow<'a, [u8]> {
    let name = section.name().unwrap_or("?");
    let machine = match file.architecture() {
        object::Architecture::X86_64 => elf::EM_X86_64,
        object::Architecture::Aarch64 => elf::EM_AARCH64,
        _ => elf::EM_NONE,
    };
    let mut out: Option<Vec<u8>> = None;
    // (cause, first offset, count), causes in the order first met; `seen` finds a cause's
    // place (a damaged object may fail every one of millions of relocations).
    let mut failed: Vec<(String, u64, usize)> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut fail = |cause: String, offset: u64| match seen.get(&cause) {
        Some(&i) => failed[i].2 += 1,
        None => {
            seen.insert(cause.clone(), failed.len());
            failed.push((cause, offset, 1));
        }
    };
    for (offset, reloc) in section.relocations() {
        let RelocationFlags::Elf { r_type } = reloc.flags() else {
            fail("a relocation that is not ELF".into(), offset);
            continue;
        };
        let kind = match field_kind(machine, r_type) {
            Some(Some(k)) => k,
            Some(None) => continue,
            None => {
                fail(
                    format!(
                        "relocation type {} (ELF machine {}) is not supported",
                        r_type.0, machine.0
                    ),
                    offset,
                );
                continue;
            }
        };
        let buf = out.get_or_insert_with(|| data.to_vec());
        let Some(field) = usize::try_from(offset)
            .ok()
            .and_then(|at| buf.get_mut(at..at.checked_add(kind.bytes)?))
        else {
            fail(
                format!("relocation type {} points outside the section", r_type.0),
                offset,
            );
            continue;
        };
        let little = file.is_little_endian();
        let addend = if reloc.has_implicit_addend() {
            // REL: the addend is the field's stored value.
            let mut b = [0u8; 8];
            b[..kind.bytes].copy_from_slice(field);
            if !little {
                b[..kind.bytes].reverse();
            }
            let v = u64::from_le_bytes(b);
            if matches!(kind.fits, Fits::Signed) && kind.bytes == 4 {
                i64::from(v as u32 as i32)
            } else {
                v as i64
            }
        } else {
            reloc.addend()
        };
        let base = match symbol_value(file, reloc.target()) {
            Ok(v) => v,
            Err(why) => {
                fail(why, offset);
                continue;
            }
        };
        let value = base.wrapping_add(addend as u64);
        let (signed_ok, unsigned_ok) = (
            i32::try_from(value as i64).is_ok(),
            u32::try_from(value).is_ok(),
        );
        let fits = kind.bytes == 8
            || match kind.fits {
                Fits::Signed => signed_ok,
                Fits::Unsigned => unsigned_ok,
                Fits::Either => signed_ok || unsigned_ok,
            };
        if !fits {
            // The value stays out of the cause: one line for all such relocations.
            fail(
                format!(
                    "relocation type {}: the value does not fit its {}-byte field",
                    r_type.0, kind.bytes
                ),
                offset,
            );
            continue;
        }
        if little {
            field.copy_from_slice(&value.to_le_bytes()[..kind.bytes]);
        } else {
            field.copy_from_slice(&value.to_be_bytes()[8 - kind.bytes..]);
        }
    }
    for (cause, offset, count) in failed {
        let more = if count > 1 {
            format!(" ({count} relocations; the first)")
        } else {
            String::new()
        };
        problems.push(format!(
            "section {name}: {cause}{more} at offset {offset:#x}: the field is left unrelocated"
        ));
    }
    out.map_or(Cow::Borrowed(data), Cow::Owned)
}

/// The value of a relocation's target in a relocatable object: its section's address
/// plus its offset in it.
fn symbol_value(file: &object::File<'_>, target: RelocationTarget) -> Result<u64, String> {
    let section_address = |index| {
        file.section_by_index(index)
            .map(|s| s.address())
            .map_err(|e| format!("a relocation's section: {e}"))
    };
    match target {
        RelocationTarget::Absolute => Ok(0),
        RelocationTarget::Section(index) => section_address(index),
        RelocationTarget::Symbol(index) => {
            let sym = file
                .symbol_by_index(index)
                .map_err(|e| format!("relocation against symbol {}: {e}", index.0))?;
            match sym.section() {
                SymbolSection::Section(s) => Ok(section_address(s)?.wrapping_add(sym.address())),
                SymbolSection::Absolute => Ok(sym.address()),
                _ => Err(format!(
                    "relocation against symbol `{}`, which is not defined in the object",
                    sym.name().unwrap_or("?")
                )),
            }
        }
        _ => Err("a relocation target of an unknown kind".into()),
    }
}

/// Adds source files and lines from the DWARF to `functions`, and functions that only the
/// DWARF names (subprograms without a symbol).
fn dwarf(file: &object::File<'_>, functions: &mut Vec<FunctionInfo>, problems: &mut Problems) {
    if file.section_by_name(".debug_info").is_none()
        && file.section_by_name(".debug_line").is_none()
    {
        return;
    }
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    // Every DWARF section's bytes, relocated first in a relocatable object: LLVM's MCJIT
    // and ORC register objects whose DWARF still holds offsets to be relocated against the
    // sections the runtime placed (GDB applies them too).
    let mut sections: HashMap<&'static str, Cow<'_, [u8]>> = HashMap::new();
    for id in DWARF_SECTIONS {
        let Some(section) = file.section_by_name(id.name()) else {
            continue;
        };
        match section.data() {
            Ok(data) => {
                let data = if file.kind() == ObjectKind::Relocatable {
                    relocate(file, &section, data, problems)
                } else {
                    Cow::Borrowed(data)
                };
                sections.insert(id.name(), data);
            }
            Err(e) => problems.push(format!("section {}: {e}", id.name())),
        }
    }
    let load = |id: gimli::SectionId| -> Result<Slice<'_>, String> {
        let data = sections.get(id.name()).map_or(&[][..], |d| &d[..]);
        Ok(gimli::EndianSlice::new(data, endian))
    };
    let dwarf = match gimli::Dwarf::load(load) {
        Ok(d) => d,
        Err(e) => {
            problems.push(format!("DWARF: {e}"));
            return;
        }
    };

    let mut files: Vec<String> = Vec::new();
    let mut file_ids: HashMap<String, usize> = HashMap::new();
    let mut intern = |s: String| -> usize {
        *file_ids.entry(s.clone()).or_insert_with(|| {
            files.push(s);
            files.len() - 1
        })
    };
    let mut rows: Vec<Row> = Vec::new();
    // (start, size, name, compile-unit file) of every subprogram with an address range.
    let mut subprograms: Vec<(u64, u64, String, Option<usize>)> = Vec::new();

    let mut units = dwarf.units();
    loop {
        let header = match units.next() {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(e) => {
                // The unit headers chain by length: after a bad one the rest is unreachable.
                problems.push(format!("DWARF .debug_info: {e}"));
                break;
            }
        };
        let at = header.offset().0;
        let unit = match dwarf.unit(header) {
            Ok(u) => u,
            Err(e) => {
                problems.push(format!("DWARF unit at .debug_info offset {at:#x}: {e}"));
                continue;
            }
        };
        let unit_file = unit
            .name
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|_| unit.line_program.is_some())
            .map(&mut intern);
        if let Some(program) = unit.line_program.clone() {
            if let Err(e) = line_rows(&dwarf, &unit, program, &mut rows, &mut intern) {
                problems.push(format!(
                    "DWARF line program of the unit at .debug_info offset {at:#x}: {e}"
                ));
            }
        }
        if let Err(e) = unit_subprograms(&dwarf, &unit, unit_file, &mut subprograms) {
            problems.push(format!(
                "DWARF entries of the unit at .debug_info offset {at:#x}: {e}"
            ));
        }
    }

    // Functions in address order (by index) to find a row's or subprogram's function.
    let mut order: Vec<usize> = (0..functions.len()).collect();
    order.sort_by_key(|&i| functions[i].start);
    let starts: Vec<u64> = order.iter().map(|&i| functions[i].start).collect();
    let find = |functions: &[FunctionInfo], addr: u64| -> Option<usize> {
        let k = starts.partition_point(|&s| s <= addr).checked_sub(1)?;
        let i = order[k];
        functions[i].contains(addr).then_some(i)
    };

    let mut per_function: Vec<Vec<(u64, u32, usize)>> = vec![Vec::new(); functions.len()];
    for r in &rows {
        if let Some(i) = find(functions, r.address) {
            per_function[i].push((r.address, r.line, r.file));
        }
    }
    for (f, mut rows) in functions.iter_mut().zip(per_function) {
        if rows.is_empty() {
            continue;
        }
        // Sequences need not be in address order (stable sort keeps program order at one
        // address); at one address the last row wins, as in a DWARF line table.
        rows.sort_by_key(|&(a, _, _)| a);
        let mut lines: Vec<(u64, u32)> = Vec::with_capacity(rows.len());
        for &(a, l, _) in &rows {
            match lines.last_mut() {
                Some(last) if last.0 == a => last.1 = l,
                _ => lines.push((a, l)),
            }
        }
        // A gap after a gap says nothing more (other producers write them; the model
        // refuses them).
        lines.dedup_by(|later, earlier| later.1 == 0 && earlier.1 == 0);
        f.lines = lines;
        // One file per function in our model: the file of its first row.
        f.file = Some(files[rows[0].2].clone());
    }

    for (start, size, name, unit_file) in subprograms {
        match find(functions, start) {
            Some(i) if functions[i].start == start => {
                if functions[i].file.is_none() {
                    functions[i].file = unit_file.map(|k| files[k].clone());
                }
            }
            Some(_) => {}
            None => functions.push(FunctionInfo {
                name,
                start,
                size,
                file: unit_file.map(|k| files[k].clone()),
                lines: Vec::new(),
                object: 0,
            }),
        }
    }
}

/// Appends the rows of one line program.
fn line_rows(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    program: gimli::IncompleteLineProgram<Slice<'_>>,
    rows: &mut Vec<Row>,
    intern: &mut impl FnMut(String) -> usize,
) -> gimli::Result<()> {
    let mut file_cache: HashMap<u64, usize> = HashMap::new();
    let mut program = program.rows();
    while let Some((header, row)) = program.next_row()? {
        if row.end_sequence() {
            continue;
        }
        // Line 0 (gimli: no line) is a gap: kept, so that it ends the row before.
        let line = row
            .line()
            .map_or(0, |l| u32::try_from(l.get()).unwrap_or(u32::MAX));
        let index = row.file_index();
        let file = match file_cache.get(&index) {
            Some(&f) => f,
            None => {
                let name = match header.file(index) {
                    Some(entry) => file_name(dwarf, unit, header, entry)?,
                    None => format!("<file {index}>"),
                };
                let f = intern(name);
                file_cache.insert(index, f);
                f
            }
        };
        rows.push(Row {
            address: row.address(),
            line,
            file,
        });
    }
    Ok(())
}

/// A line-program file's name, joined to its directory unless that is the compilation
/// directory (index 0), which debuggers show the name without.
fn file_name(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    header: &gimli::LineProgramHeader<Slice<'_>>,
    entry: &gimli::FileEntry<Slice<'_>>,
) -> gimli::Result<String> {
    let name = dwarf
        .attr_string(unit, entry.path_name())?
        .to_string_lossy()
        .into_owned();
    if name.starts_with('/') || entry.directory_index() == 0 {
        return Ok(name);
    }
    match entry.directory(header) {
        Some(dir) => {
            let dir = dwarf.attr_string(unit, dir)?.to_string_lossy().into_owned();
            if dir.is_empty() {
                Ok(name)
            } else {
                Ok(format!("{}/{name}", dir.trim_end_matches('/')))
            }
        }
        None => Ok(name),
    }
}

/// Collects the subprograms of one unit that have a name and an address range.
fn unit_subprograms(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
    unit_file: Option<usize>,
    out: &mut Vec<(u64, u64, String, Option<usize>)>,
) -> gimli::Result<()> {
    let mut entries = unit.entries();
    while let Some(e) = entries.next_dfs()? {
        if e.tag() != gimli::DW_TAG_subprogram {
            continue;
        }
        let Some(name) = e
            .attr_value(gimli::DW_AT_name)
            .or_else(|| e.attr_value(gimli::DW_AT_linkage_name))
        else {
            continue;
        };
        let name = dwarf
            .attr_string(unit, name)?
            .to_string_lossy()
            .into_owned();
        let Some(low) = e.attr_value(gimli::DW_AT_low_pc) else {
            continue;
        };
        let Some(low) = dwarf.attr_address(unit, low)? else {
            continue;
        };
        let high = match e.attr_value(gimli::DW_AT_high_pc) {
            Some(gimli::AttributeValue::Udata(n)) => low.checked_add(n),
            Some(v) => dwarf.attr_address(unit, v)?,
            None => None,
        };
        if let Some(high) = high.filter(|&h| h > low) {
            if !name.is_empty() {
                out.push((low, high - low, name, unit_file));
            }
        }
    }
    Ok(())
}
