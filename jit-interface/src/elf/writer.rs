//! The ELF container: a relocatable x86-64 or aarch64 object (what LLVM's JITs register too) whose
//! sections carry the code's real addresses. Every size is known before writing, so the
//! object is written in one pass into a buffer of exactly its size.
//!
//! Sections, in file order:
//! - one NOBITS `.text` per run of adjacent functions (ALLOC|EXECINSTR, at the run's
//!   address; the code itself stays in the process, the debugger reads it from memory),
//! - `.debug_info`, `.debug_abbrev`, `.debug_line`, `.debug_ranges`, `.debug_frame`,
//!   `.gdb_index` (small objects only), `.jit_gdb.sources` (objects with source texts
//!   only), those not empty (not ALLOC: GDB sorts every ALLOC section of every objfile on
//!   each change),
//! - `.debug_str` and `.strtab`: ONE string table with two headers, so that each name is
//!   stored once; the section names follow the function names in it, and it is the section
//!   name table too (no `.shstrtab`: at every registration GDB reads each section header
//!   and the name table from the process, one read each),
//! - `.symtab` with a global FUNC symbol per function, `.symtab_shndx` if a `.text` index
//!   does not fit 16 bits.
//!
//! One-function objects (runtimes register functions one at a time) are written by
//! [`write_one`]: the same bytes, with the file header, section headers and section names
//! copied from a template made when compiling for each set of sections present.

use object::elf;

use super::layout::Layout;
use crate::model::{Arch, Function};

/// A non-ALLOC data section.
pub(super) struct DataSection<'a> {
    pub name: &'static SectionName,
    pub data: &'a [u8],
}

/// A section name, padded: it is copied as [`SectionName::MAX`] bytes, a copy of a size
/// known when compiling (a few moves, not a call to `memcpy`).
pub(super) struct SectionName {
    bytes: [u8; SectionName::MAX],
    len: usize,
}

impl SectionName {
    /// The longest name, with room for its NUL (and for `.jit_gdb.sources`'s 16 bytes).
    const MAX: usize = 24;

    pub const fn new(name: &[u8]) -> SectionName {
        assert!(name.len() < Self::MAX);
        let mut bytes = [0; Self::MAX];
        let mut i = 0;
        while i < name.len() {
            bytes[i] = name[i];
            i += 1;
        }
        SectionName {
            bytes,
            len: name.len(),
        }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

pub(super) const DEBUG_INFO: SectionName = SectionName::new(b".debug_info");
pub(super) const DEBUG_ABBREV: SectionName = SectionName::new(b".debug_abbrev");
pub(super) const DEBUG_LINE: SectionName = SectionName::new(b".debug_line");
pub(super) const DEBUG_RANGES: SectionName = SectionName::new(b".debug_ranges");
pub(super) const DEBUG_FRAME: SectionName = SectionName::new(b".debug_frame");
pub(super) const GDB_INDEX: SectionName = SectionName::new(b".gdb_index");
pub(super) const JIT_SOURCES: SectionName = SectionName::new(b".jit_gdb.sources");
pub(super) const TEXT: SectionName = SectionName::new(b".text");
pub(super) const DEBUG_STR: SectionName = SectionName::new(b".debug_str");
pub(super) const STRTAB: SectionName = SectionName::new(b".strtab");
pub(super) const SYMTAB: SectionName = SectionName::new(b".symtab");
const SYMTAB_SHNDX: SectionName = SectionName::new(b".symtab_shndx");

/// The section-name table, on the stack: the longest is 141 bytes (every section), and
/// the last name is copied padded.
struct Names {
    bytes: [u8; 144 + SectionName::MAX],
    len: usize,
}

impl Names {
    /// Appends `name` and returns its offset.
    #[inline(always)]
    fn add(&mut self, name: &SectionName) -> u32 {
        let at = self.len;
        // The padding is zeros: the NUL and what the next name overwrites.
        self.bytes[at..at + SectionName::MAX].copy_from_slice(&name.bytes);
        self.len += name.len + 1;
        at as u32
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

pub(super) const FILE_HEADER: usize = 64;
pub(super) const SECTION_HEADER: usize = 64;
pub(super) const SYMBOL: usize = 24;

/// One section header's fields.
pub(super) struct Header {
    pub name: u32,
    pub kind: elf::SectionType,
    pub flags: elf::SectionFlags,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub info: u32,
    pub align: u64,
    pub entsize: u64,
}

impl Header {
    pub(super) fn data(name: u32, kind: elf::SectionType, offset: usize, size: usize) -> Header {
        Header {
            name,
            kind,
            flags: elf::SectionFlags(0),
            addr: 0,
            offset: offset as u64,
            size: size as u64,
            link: 0,
            info: 0,
            align: 1,
            entsize: 0,
        }
    }

    /// The header of a `.text` section (NOBITS: the code is the process's) for the run of
    /// code `[start, end)`.
    pub(super) fn text(name: u32, start: u64, end: u64) -> Header {
        Header {
            name,
            kind: elf::SHT_NOBITS,
            flags: elf::SHF_ALLOC | elf::SHF_EXECINSTR,
            addr: start,
            offset: 0,
            size: end - start,
            link: 0,
            info: 0,
            align: 1,
            entsize: 0,
        }
    }

    /// Writes the header into `h`, which is zero: zero fields are left alone.
    pub(super) fn write(&self, h: &mut [u8; SECTION_HEADER]) {
        h[0..4].copy_from_slice(&self.name.to_le_bytes());
        h[4..8].copy_from_slice(&self.kind.0.to_le_bytes());
        h[8..16].copy_from_slice(&self.flags.0.to_le_bytes());
        h[16..24].copy_from_slice(&self.addr.to_le_bytes());
        h[24..32].copy_from_slice(&self.offset.to_le_bytes());
        h[32..40].copy_from_slice(&self.size.to_le_bytes());
        h[40..44].copy_from_slice(&self.link.to_le_bytes());
        h[44..48].copy_from_slice(&self.info.to_le_bytes());
        h[48..56].copy_from_slice(&self.align.to_le_bytes());
        h[56..64].copy_from_slice(&self.entsize.to_le_bytes());
    }
}

/// The output, allocated at its final size and written front to back.
struct Out {
    bytes: Vec<u8>,
}

impl Out {
    #[inline]
    fn put(&mut self, b: &[u8]) {
        self.bytes.extend_from_slice(b);
    }

    /// The name of `f` and a NUL. Names are short: most are copied as a block of fixed
    /// size (a `memcpy` call per name cost more than the rest of its symbol).
    #[inline]
    fn put_name(&mut self, f: Function<'_>) {
        let end = self.bytes.len() + f.name_bytes().len();
        match f.name_block::<32>() {
            Some(block) => {
                self.bytes.extend_from_slice(block);
                self.bytes[end] = 0;
                self.bytes.truncate(end + 1);
            }
            None => {
                self.bytes.extend_from_slice(f.name_bytes());
                self.bytes.push(0);
            }
        }
    }

    /// The next `N` bytes, zero, to be filled in place.
    #[inline]
    fn next<const N: usize>(&mut self) -> &mut [u8; N] {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(&[0; N]);
        (&mut self.bytes[at..]).try_into().expect("N bytes")
    }

    /// Zeroes up to `at` (padding).
    #[inline]
    fn pad_to(&mut self, at: usize) {
        self.bytes.resize(at, 0);
    }
}

/// Writes the file header of a relocatable object for `arch` into `h` (zero) with its
/// section headers at `headers_at`.
pub(super) fn file_header(
    arch: Arch,
    h: &mut [u8; FILE_HEADER],
    headers_at: usize,
    shnum: u16,
    shstrndx: u16,
) {
    let machine = match arch {
        Arch::X86_64 => elf::EM_X86_64,
        Arch::Aarch64 => elf::EM_AARCH64,
    };
    h[..4].copy_from_slice(&[0x7f, b'E', b'L', b'F']);
    h[4] = elf::ELFCLASS64.0;
    h[5] = elf::ELFDATA2LSB.0;
    h[6] = elf::EV_CURRENT.0;
    h[7] = elf::ELFOSABI_NONE.0;
    // 8 bytes of padding.
    h[16..18].copy_from_slice(&elf::ET_REL.0.to_le_bytes());
    h[18..20].copy_from_slice(&machine.0.to_le_bytes());
    h[20..24].copy_from_slice(&u32::from(elf::EV_CURRENT.0).to_le_bytes());
    // Entry, program headers (0), section headers, flags (0).
    h[40..48].copy_from_slice(&(headers_at as u64).to_le_bytes());
    h[52..54].copy_from_slice(&(FILE_HEADER as u16).to_le_bytes());
    // No program headers: size and count 0.
    h[58..60].copy_from_slice(&(SECTION_HEADER as u16).to_le_bytes());
    h[60..62].copy_from_slice(&shnum.to_le_bytes());
    h[62..64].copy_from_slice(&shstrndx.to_le_bytes());
}

pub(super) fn align(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Most data sections: the DWARF ones, `.gdb_index` and `.jit_gdb.sources`.
pub(super) const DATA_SECTIONS: usize = 7;

/// Writes the object: its `sections` (those not empty), and the string table and symbols
/// from `layout`.
/// Writes the object into `buf` (emptied first; its capacity is reused when large enough).
pub(super) fn write(
    arch: Arch,
    layout: &Layout<'_>,
    sections: &[DataSection<'_>; DATA_SECTIONS],
    mut buf: Vec<u8>,
) -> Vec<u8> {
    // The sections not empty, in order.
    let mut data: [&DataSection; DATA_SECTIONS] = [&sections[0]; DATA_SECTIONS];
    let mut data_len = 0;
    for s in sections {
        if !s.data.is_empty() {
            data[data_len] = s;
            data_len += 1;
        }
    }
    let data = &data[..data_len];

    // Section indices.
    let first_text = 1;
    let first_data = first_text + layout.runs.len();
    let debug_str = first_data + data.len();
    let strtab = debug_str + 1;
    let symtab = strtab + 1;
    // Symbols name their section in 16 bits unless the index is reserved (0xff00 and up);
    // then in the extended index table.
    let shndx = layout.runs.len() >= elf::SHN_LORESERVE as usize;
    let count = symtab + 1 + usize::from(shndx);

    // Section names, each once (offsets in this table; it follows the function names).
    let mut names = Names {
        bytes: [0; 144 + SectionName::MAX],
        len: 1,
    };
    let text_name = names.add(&TEXT);
    let mut data_names = [0; DATA_SECTIONS];
    for (s, name) in data.iter().zip(&mut data_names) {
        *name = names.add(s.name);
    }
    let debug_str_name = names.add(&DEBUG_STR);
    let strtab_name = names.add(&STRTAB);
    let symtab_name = names.add(&SYMTAB);
    let shndx_name = if shndx { names.add(&SYMTAB_SHNDX) } else { 0 };
    let names = names.as_slice();

    // File layout.
    let mut offsets = [0; DATA_SECTIONS];
    let mut at = FILE_HEADER;
    for (s, offset) in data.iter().zip(&mut offsets) {
        *offset = at;
        at += s.data.len();
    }
    let strings_at = at;
    let strings_len = layout.strings_len;
    // Function names, then section names.
    let table_len = strings_len + names.len();
    let section_name = |name: u32| strings_len as u32 + name;
    at += table_len;
    let symbols = layout.functions.len() + 1;
    let symtab_at = align(at, 8);
    at = symtab_at + symbols * SYMBOL;
    let shndx_at = align(at, 4);
    if shndx {
        at = shndx_at + symbols * 4;
    }
    let headers_at = align(at, 8);
    let len = headers_at + count * SECTION_HEADER;

    buf.clear();
    buf.reserve_exact(len);
    crate::pages::prefault_spare(&mut buf, len);
    let mut out = Out { bytes: buf };
    // File header.
    // More sections than 16 bits can count: the count is in section 0's size, the index
    // of the names in its link.
    let extended = count >= elf::SHN_LORESERVE as usize;
    let (shnum, shstrndx) = if extended {
        (0, elf::SHN_XINDEX.0)
    } else {
        (count as u16, strtab as u16)
    };
    file_header(arch, out.next::<FILE_HEADER>(), headers_at, shnum, shstrndx);

    for s in data {
        out.put(s.data);
    }
    // The string table: the names in layout order (`Layout::name_offsets`), after a NUL.
    out.put(&[0]);
    for p in &layout.functions {
        out.put_name(p.f);
    }
    debug_assert_eq!(out.bytes.len(), strings_at + strings_len);
    out.put(names);
    // The null symbol, then one per function.
    out.pad_to(symtab_at + SYMBOL);
    let info = elf::SymbolInfo::new(elf::STB_GLOBAL, elf::STT_FUNC).0;
    // The run of the function: functions and runs are both in address order.
    // The current run, its start and its section index, updated when a function is past
    // its end: no lookup per symbol.
    let index_of = |run: usize| {
        if shndx {
            elf::SHN_XINDEX.0
        } else {
            (first_text + run) as u16
        }
    };
    let mut run = 0;
    let (mut run_start, mut run_end) = layout.runs.first().map_or((0, 0), |r| (r.start, r.end));
    let mut index = index_of(0);
    for (p, &name) in layout.functions.iter().zip(&layout.name_offsets) {
        let f = p.f;
        while f.start() >= run_end {
            run += 1;
            (run_start, run_end) = (layout.runs[run].start, layout.runs[run].end);
            index = index_of(run);
        }
        // Every byte set on the stack, then one append of a fixed size.
        let mut symbol = [0u8; SYMBOL];
        symbol[..4].copy_from_slice(&name.to_le_bytes());
        symbol[4] = info;
        symbol[5] = elf::STV_DEFAULT.0;
        symbol[6..8].copy_from_slice(&index.to_le_bytes());
        // Relocatable object: symbol values are offsets in their section.
        symbol[8..16].copy_from_slice(&(f.start() - run_start).to_le_bytes());
        symbol[16..].copy_from_slice(&u64::from(f.size()).to_le_bytes());
        out.put(&symbol);
    }
    if shndx {
        // The null symbol's index is 0.
        out.pad_to(shndx_at + 4);
        let mut run = 0;
        for p in &layout.functions {
            while p.f.start() >= layout.runs[run].end {
                run += 1;
            }
            out.put(&((first_text + run) as u32).to_le_bytes());
        }
    }

    // Section headers; section 0 is null but for the count of sections beyond 16 bits.
    // Zeroed at once, then filled in place.
    out.pad_to(len);
    let mut headers = out.bytes[headers_at..]
        .chunks_exact_mut(SECTION_HEADER)
        .map(|h| -> &mut [u8; SECTION_HEADER] { h.try_into().expect("a section header") });
    let mut next = || headers.next().expect("counted");
    let null = next();
    if extended {
        null[32..40].copy_from_slice(&(count as u64).to_le_bytes());
        null[40..44].copy_from_slice(&(strtab as u32).to_le_bytes());
    }
    for run in &layout.runs {
        Header::text(section_name(text_name), run.start, run.end).write(next());
    }
    for ((s, &offset), &name) in data.iter().zip(&offsets).zip(&data_names) {
        Header::data(section_name(name), elf::SHT_PROGBITS, offset, s.data.len()).write(next());
    }
    let mut h = Header::data(
        section_name(debug_str_name),
        elf::SHT_PROGBITS,
        strings_at,
        table_len,
    );
    h.flags = elf::SHF_MERGE | elf::SHF_STRINGS;
    h.entsize = 1;
    h.write(next());
    Header::data(
        section_name(strtab_name),
        elf::SHT_STRTAB,
        strings_at,
        table_len,
    )
    .write(next());
    let mut h = Header::data(
        section_name(symtab_name),
        elf::SHT_SYMTAB,
        symtab_at,
        symbols * SYMBOL,
    );
    h.link = strtab as u32;
    // Only the null symbol is local.
    h.info = 1;
    h.align = 8;
    h.entsize = SYMBOL as u64;
    h.write(next());
    if shndx {
        let mut h = Header::data(
            section_name(shndx_name),
            elf::SHT_SYMTAB_SHNDX,
            shndx_at,
            symbols * 4,
        );
        h.link = symtab as u32;
        h.align = 4;
        h.entsize = 4;
        h.write(next());
    }
    debug_assert!(headers.next().is_none());
    out.bytes
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
        // One object per architecture: an aarch64 object is no part of an x86-64 one.
        let mut a = JitObject::with_arch(Arch::Aarch64);
        a.add_function("arm", 0x9000, 0x10).unwrap();
        let mut x = JitObject::with_arch(Arch::X86_64);
        x.add_function("x", 0x1000, 0x10).unwrap();
        let e = crate::elf::encode_objects(Arch::X86_64, &[&x, &a]).unwrap_err();
        assert!(e.to_string().contains("object 1 is aarch64 code"), "{e}");
    }

    #[test]
    fn aarch64_objects_say_em_aarch64() {
        let mut o = JitObject::with_arch(Arch::Aarch64);
        let f = o.add_function("arm", 0x4000_1000, 0x20).unwrap();
        o.set_frame_pointer(f, 4, 8).unwrap();
        let p = Parsed::encode(&o);
        let file = p.file();
        assert_eq!(file.architecture(), object::Architecture::Aarch64);
        let sym = file.symbols().find(|s| s.name() == Ok("arm")).unwrap();
        let section = file.section_by_index(sym.section_index().unwrap()).unwrap();
        // Relocatable object: the value is an offset in the section.
        assert_eq!(
            (section.address() + sym.address(), sym.size()),
            (0x4000_1000, 0x20)
        );
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
