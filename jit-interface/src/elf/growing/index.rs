//! Reading objects back from a growing payload, found through a few bytes kept per object.

use std::sync::OnceLock;

use gimli::UnwindSection;
use object::read::elf::{FileHeader, SectionHeader, Sym};
use object::{elf, LittleEndian};

use super::super::layout::Layout;
use super::super::writer::SYMBOL;
use super::super::{cfi, dwarf};
use super::{after_header, FRAME, STRTAB, SYMTAB};
use crate::arch::x86_64;
use crate::model::{Arch, CfaBase, Epilogue, Frame, JitObject, LineRow, UnwindRow};

/// Where a *plain* object's bytes are in the payload: an object whose functions all have
/// line rows in one source file, and no blocks. Such an object can be read back from the
/// payload ([`Index::object`]), so the registry keeps nothing else to append it again or
/// re-encode it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plain {
    /// Its first symbol, its first FDE, its first line sequence: offsets in the payload;
    /// the bytes of its line sequences, and of its FDE if it has one function (0: not to
    /// be copied).
    pub(super) sym: u32,
    pub(super) fde: u32,
    pub(super) seq: u32,
    pub(super) lines: u16,
    pub(super) fde_len: u16,
    /// Index in `Index::files`; `NOT_PLAIN` for other objects.
    pub(super) file: u16,
    /// Its functions.
    pub(super) count: u16,
}

pub(super) const NOT_PLAIN: u16 = u16::MAX;

/// What reading objects back from a payload needs, kept when it stops growing (see
/// [`Growing::seal`]): 20 bytes per object, where its compact record (kept until plain
/// objects could be read back) took about 40, and encoding it cost a quarter of appending.
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// One per object appended, in order.
    pub(super) plain: Vec<Plain>,
    /// Files of the open units made so far.
    pub(super) files: Vec<String>,
    /// `file_hash` of each of `files`, in the same order: a file is found by its hash, its
    /// name compared once (objects of many files in turns look theirs up at each append).
    pub(super) file_hashes: Vec<u64>,
    /// The file found last: objects of one file come in runs (a payload rebuilt by copies
    /// looks up the file of each object it copies).
    pub(super) last_found: std::cell::Cell<u32>,
}

/// A hash of a file name, eight bytes at a time.
fn file_hash(file: &str) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = file.len() as u64;
    let mut words = file.as_bytes().chunks_exact(8);
    for w in words.by_ref() {
        h = (h ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(K);
        h ^= h >> 29;
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    h = (h ^ u64::from_le_bytes(last)).wrapping_mul(K);
    h ^ h >> 32
}

impl Index {
    /// The index of `file` in `files`, if it is there.
    pub(super) fn find_file(&self, file: &str) -> Option<u32> {
        let last = self.last_found.get();
        if self.files.get(last as usize).is_some_and(|f| f == file) {
            return Some(last);
        }
        let h = file_hash(file);
        let found = (0..)
            .zip(&self.file_hashes)
            .filter(|&(_, &fh)| fh == h)
            .find(|&(i, _)| self.files[i as usize] == file)
            .map(|(i, _)| i)?;
        self.last_found.set(found);
        Some(found)
    }

    /// The index of `file` in `files`, added if new.
    pub(super) fn add_file(&mut self, file: &str) -> u32 {
        self.find_file(file).unwrap_or_else(|| {
            self.files.push(file.to_string());
            self.file_hashes.push(file_hash(file));
            self.files.len() as u32 - 1
        })
    }

    /// Whether object `k` (in append order) is plain: [`Index::object`] reads it back.
    pub(crate) fn is_plain(&self, k: usize) -> bool {
        self.plain.get(k).is_some_and(|p| p.file != NOT_PLAIN)
    }

    /// For an object with a unit of its own (`layout`; its line program `line`, at
    /// `line_at`), plain if it has one file and no blocks: its file's index in `files` (added
    /// if new) and where its line sequences start.
    #[cold]
    #[inline(never)]
    pub(super) fn own_unit(
        &mut self,
        layout: &Layout<'_>,
        line: &[u8],
        line_at: usize,
    ) -> Option<(u32, usize, usize)> {
        let ([unit], false) = (&layout.units[..], layout.has_extras) else {
            return None;
        };
        // Read back with offsets from a line sequence's start: 32-bit.
        let (first, last) = (layout.functions.first()?.f, layout.functions.last()?.f);
        if last.end() - first.start() > u64::from(u32::MAX) {
            return None;
        }
        let index = self.add_file(unit.file?);
        let header = after_header(line)?;
        Some((index, line_at + header, line.len().checked_sub(header)?))
    }

    /// Where object `k`'s bytes are, if it is plain: what [`Growing::append_copy`] takes.
    pub(crate) fn plain(&self, k: usize) -> Option<Plain> {
        self.plain.get(k).copied().filter(|p| p.file != NOT_PLAIN)
    }

    /// The plain object whose bytes are at `p` in `buf`, read back (see [`Index::object`]).
    pub(crate) fn object_at(&self, buf: &[u8], p: Plain) -> Option<JitObject> {
        with_buffers(|b| self.read(buf, &p, b))
    }

    /// Whether any object is plain (else the index is of no use).
    pub(crate) fn has_plain(&self) -> bool {
        self.plain.iter().any(|p| p.file != NOT_PLAIN)
    }

    /// Plain object `k` (in append order) of `buf`, read back from its symbols, FDEs and
    /// line sequences: appending it again writes the very same bytes. `None` if `k` is not
    /// plain, or its bytes are not what appending it wrote (a bug: the caller keeps the
    /// payload as it is rather than re-encode something else).
    pub(crate) fn object(&self, buf: &[u8], k: usize) -> Option<JitObject> {
        with_buffers(|b| self.read(buf, self.plain.get(k)?, b))
    }

    pub(super) fn read(&self, buf: &[u8], p: &Plain, b: &mut ReadBuffers) -> Option<JitObject> {
        let file = self.files.get(usize::from(p.file))?;
        let sections = Sections::of(buf)?;
        // Function `i`: its name, start and size.
        let function = |i: usize| sections.function(p.sym as usize + i * SYMBOL);
        let mut object = JitObject::with_arch(Arch::X86_64);
        // The object's names at once: no growing (and copying) as they come.
        let mut text = file.len();
        for i in 0..usize::from(p.count) {
            text += function(i)?.0.len();
        }
        object.reserve(usize::from(p.count), text);
        let ReadBuffers {
            program,
            lines,
            rows,
            kept,
            rules,
            unwind,
            again,
        } = b;
        line_rows(buf, p, program, lines)?;
        // The rows and the FDE that the functions (in address order, as both) have reached.
        let mut next_row = 0;
        let frame = sections.debug_frame();
        let bases = gimli::BaseAddresses::default();
        let mut fde_at = (p.fde as usize).checked_sub(sections.frame_at)?;
        let mut fde = None::<(u64, u64)>;
        for i in 0..usize::from(p.count) {
            let (name, start, size) = function(i)?;
            let end = start.checked_add(size.into())?;
            let f = object
                .add_function(std::str::from_utf8(name).ok()?, start, size.into())
                .ok()?;
            // Its line rows: those from its start to its end (each function has rows, and
            // every row is some function's: checked at the end).
            let first = next_row + lines[next_row..].partition_point(|&(a, _)| a < start);
            let past = first + lines[first..].partition_point(|&(a, _)| a < end);
            if first == past {
                return None;
            }
            rows.clear();
            for &(address, line) in &lines[first..past] {
                let offset = u32::try_from(address - start).ok()?;
                rows.push(LineRow { offset, line });
            }
            object.set_lines(f, file, rows).ok()?;
            next_row = past;
            // Its unwind rows, from the FDE that covers it.
            while !fde.is_some_and(|(_, fde_end)| fde_end >= end) {
                let entry = sections.fde(&frame, &bases, fde_at)?;
                fde_at += 4 + entry.entry_len();
                let fde_start = entry.initial_address();
                fde = Some((fde_start, entry.end_address()));
                fde_rules(&frame, &bases, &entry, rules, kept)?;
            }
            let (fde_start, _) = fde?;
            function_rows(rules, start.checked_sub(fde_start)?, size, unwind)?;
            match frame_of(unwind, size, again) {
                Frame::Default => {}
                Frame::FramePointer {
                    push_end,
                    setup_end,
                    epilogues,
                } => {
                    object.set_frame_pointer(f, push_end, setup_end).ok()?;
                    for e in epilogues {
                        object.add_epilogue(f, e.restore_end, e.ret_end).ok()?;
                    }
                }
                Frame::Rows(rows) => object.set_unwind(f, &rows).ok()?,
            }
        }
        // No row left over (between or after the functions).
        (next_row == lines.len()).then_some(object)
    }
}

/// The rows of the line sequences of plain object `p` in `buf` (address and line), read
/// with gimli: the sequences are given a line program header of their own in `program`
/// (the payload's units' headers differ only in their file, which rows need not name).
fn line_rows(
    buf: &[u8],
    p: &Plain,
    program: &mut Vec<u8>,
    lines: &mut Vec<(u64, u32)>,
) -> Option<()> {
    let at = p.seq as usize;
    let sequences = buf.get(at..at.checked_add(p.lines as usize)?)?;
    program.clear();
    dwarf::line_program_header(program, None);
    program.extend_from_slice(sequences);
    let length = u32::try_from(program.len() - 4).ok()?;
    program[..4].copy_from_slice(&length.to_le_bytes());
    let debug_line = gimli::DebugLine::new(program, gimli::LittleEndian);
    let header = debug_line
        .program(gimli::DebugLineOffset(0), 8, None, None)
        .ok()?;
    let mut rows = header.rows();
    lines.clear();
    while let Some((_, row)) = rows.next_row().ok()? {
        if !row.end_sequence() {
            // gimli reads line 0, a gap, as no line.
            let line = row.line().map_or(0, |l| l.get());
            lines.push((row.address(), u32::try_from(line).ok()?));
        }
    }
    Some(())
}

/// The rules of FDE `entry` into `rules`: those at its start, then those at every address
/// where its instructions (read by gimli) change them, `offset` from its start. Rules that
/// change nothing were never written ([`function_rows`] cuts one function's rows out, and
/// writing those again writes the same instructions). `None` for an instruction or a
/// register our CFI never writes. (gimli's `UnwindTable` gives the same rows, at more than
/// twice the cost of reading an object back: it copies its whole register table per row.)
fn fde_rules(
    frame: &FrameSection<'_>,
    bases: &gimli::BaseAddresses,
    entry: &gimli::FrameDescriptionEntry<Slice<'_>>,
    rules: &mut Vec<UnwindRow>,
    kept: &mut Vec<UnwindRow>,
) -> Option<()> {
    let cie = entry.cie();
    let (code_align, data_align) = (cie.code_alignment_factor(), cie.data_alignment_factor());
    let base = |r: gimli::Register| match r.0 {
        x86_64::RSP => Some(CfaBase::Sp),
        x86_64::RBP => Some(CfaBase::Fp),
        _ => None,
    };
    rules.clear();
    kept.clear();
    // The CIE's rules first (the entry state), then the FDE's.
    rules.push(UnwindRow {
        offset: 0,
        cfa_base: CfaBase::Sp,
        cfa_offset: 0,
        fp_offset: 0,
    });
    let mut at = 0u64;
    let mut cie_instructions = cie.instructions(frame, bases);
    let mut fde_instructions = entry.instructions(frame, bases);
    let mut in_cie = true;
    loop {
        let next = match in_cie {
            true => cie_instructions.next().ok()?,
            false => fde_instructions.next().ok()?,
        };
        let Some(instruction) = next else {
            if std::mem::replace(&mut in_cie, false) {
                continue;
            }
            return Some(());
        };
        use gimli::CallFrameInstruction as I;
        let rule = match instruction {
            I::Nop => continue,
            I::AdvanceLoc { delta } => {
                at = at.checked_add(u64::from(delta).checked_mul(code_align)?)?;
                continue;
            }
            I::RememberState => {
                kept.push(*rules.last()?);
                continue;
            }
            // The return address is where every frame of ours has it: at CFA - 8.
            I::Offset {
                register,
                factored_offset,
            } if register.0 == x86_64::RIP
                && i64::try_from(factored_offset)
                    .ok()?
                    .checked_mul(data_align)?
                    == -8 =>
            {
                continue
            }
            // The CIE's "unknown unless described" for callee-saved registers: the rows
            // carry no register rules (objects with rules are not plain).
            I::Undefined { register } if in_cie && x86_64::CALLEE_SAVED.contains(&register.0) => {
                continue
            }
            rule => rule,
        };
        if u64::from(rules.last()?.offset) != at {
            let last = *rules.last()?;
            rules.push(UnwindRow {
                offset: u32::try_from(at).ok()?,
                ..last
            });
        }
        let row = rules.last_mut()?;
        match rule {
            I::DefCfa { register, offset } => {
                row.cfa_base = base(register)?;
                row.cfa_offset = i32::try_from(offset).ok()?;
            }
            I::DefCfaRegister { register } => row.cfa_base = base(register)?,
            I::DefCfaOffset { offset } => row.cfa_offset = i32::try_from(offset).ok()?,
            I::Offset {
                register,
                factored_offset,
            } if register.0 == x86_64::RBP => {
                let offset = i64::try_from(factored_offset)
                    .ok()?
                    .checked_mul(data_align)?;
                row.fp_offset = i32::try_from(offset).ok()?;
            }
            // The CIE keeps the caller's rbp (`DW_CFA_same_value`), which a restore returns to.
            I::SameValue { register } | I::Restore { register } if register.0 == x86_64::RBP => {
                row.fp_offset = 0
            }
            I::RestoreState => {
                *row = UnwindRow {
                    offset: row.offset,
                    ..kept.pop()?
                }
            }
            _ => return None,
        }
    }
}

/// The unwind rows of a function `from` bytes into an FDE whose table is `rules`, `size`
/// bytes long, into `rows`: the rule at its start, then every change before its end.
fn function_rows(
    rules: &[UnwindRow],
    from: u64,
    size: u32,
    rows: &mut Vec<UnwindRow>,
) -> Option<()> {
    let to = from.checked_add(size.into())?;
    let k = rules.partition_point(|r| u64::from(r.offset) <= from);
    rows.clear();
    rows.push(UnwindRow {
        offset: 0,
        ..*rules.get(k.checked_sub(1)?)?
    });
    for r in rules[k..].iter().take_while(|r| u64::from(r.offset) < to) {
        let last = rows.last()?;
        if (r.cfa_base, r.cfa_offset, r.fp_offset)
            != (last.cfa_base, last.cfa_offset, last.fp_offset)
        {
            rows.push(UnwindRow {
                offset: (u64::from(r.offset) - from) as u32,
                ..*r
            });
        }
    }
    Some(())
}

type Slice<'a> = gimli::EndianSlice<'a, gimli::LittleEndian>;
type FrameSection<'a> = gimli::DebugFrame<Slice<'a>>;

/// The CIE that starts every growing payload's `.debug_frame` (`cfi::write_cie`), and what
/// gimli reads of it: parsed once, not for every FDE read back.
fn the_cie() -> Option<&'static (Vec<u8>, gimli::CommonInformationEntry<Slice<'static>>)> {
    static CIE: OnceLock<Option<(Vec<u8>, gimli::CommonInformationEntry<Slice<'static>>)>> =
        OnceLock::new();
    CIE.get_or_init(|| {
        let mut bytes = Vec::new();
        cfi::write_cie(&mut bytes).ok()?;
        // Kept for the life of the process, as the parsed CIE that refers to it.
        let leaked: &'static [u8] = Vec::leak(bytes.clone());
        let mut frame = gimli::DebugFrame::new(leaked, gimli::LittleEndian);
        frame.set_address_size(8);
        let cie = frame
            .cie_from_offset(&gimli::BaseAddresses::default(), gimli::DebugFrameOffset(0))
            .ok()?;
        Some((bytes, cie))
    })
    .as_ref()
}

/// The sections of a growing payload that objects are read back from, found through its
/// section headers with object's ELF reader.
pub(super) struct Sections<'a> {
    headers: &'a [elf::SectionHeader64<LittleEndian>],
    symbols: &'a [elf::Sym64<LittleEndian>],
    /// Where the symbol table and `.debug_frame` are in the payload.
    symbols_at: usize,
    names: object::read::StringTable<'a>,
    frame: &'a [u8],
    pub(super) frame_at: usize,
}

impl<'a> Sections<'a> {
    pub(super) fn of(buf: &'a [u8]) -> Option<Self> {
        let file = elf::FileHeader64::<LittleEndian>::parse(buf).ok()?;
        let headers = file.section_headers(LittleEndian, buf).ok()?;
        let symtab = headers.get(SYMTAB)?;
        let frame = headers.get(FRAME)?;
        Some(Sections {
            headers,
            symbols: symtab.data_as_array(LittleEndian, buf).ok()?,
            symbols_at: usize::try_from(symtab.sh_offset(LittleEndian)).ok()?,
            names: headers.get(STRTAB)?.strings(LittleEndian, buf).ok()??,
            frame: frame.data(LittleEndian, buf).ok()?,
            frame_at: usize::try_from(frame.sh_offset(LittleEndian)).ok()?,
        })
    }
    /// The function of the symbol at `at` in the payload: its name, start (its section's
    /// address plus its section-relative value) and size.
    pub(super) fn function(&self, at: usize) -> Option<(&'a [u8], u64, u32)> {
        let k = at.checked_sub(self.symbols_at)?;
        if k % SYMBOL != 0 {
            return None;
        }
        let symbol = self.symbols.get(k / SYMBOL)?;
        let section = usize::from(symbol.st_shndx(LittleEndian).index()?);
        let section = self.headers.get(section)?;
        let start = section
            .sh_addr(LittleEndian)
            .checked_add(symbol.st_value(LittleEndian))?;
        let size = u32::try_from(symbol.st_size(LittleEndian)).ok()?;
        Some((symbol.name(LittleEndian, self.names).ok()?, start, size))
    }

    /// The FDE at `at` in `.debug_frame` (`frame`, from [`Sections::debug_frame`]).
    pub(super) fn fde(
        &self,
        frame: &FrameSection<'a>,
        bases: &gimli::BaseAddresses,
        at: usize,
    ) -> Option<gimli::FrameDescriptionEntry<Slice<'a>>> {
        // Every FDE refers to the CIE at 0, which every growing payload has: parsed once.
        let (bytes, cie) = the_cie()?;
        if !self.frame.starts_with(bytes) {
            return None;
        }
        let cie_at = |_: &FrameSection<'a>,
                      _: &gimli::BaseAddresses,
                      o: gimli::DebugFrameOffset| match o.0 {
            0 => Ok(cie.clone()),
            other => Err(gimli::Error::NotCieId(other as u64)),
        };
        frame
            .fde_from_offset(bases, gimli::DebugFrameOffset(at), cie_at)
            .ok()
    }

    /// `.debug_frame`, for gimli.
    pub(super) fn debug_frame(&self) -> FrameSection<'a> {
        let mut frame = gimli::DebugFrame::new(self.frame, gimli::LittleEndian);
        frame.set_address_size(8);
        frame
    }
}

/// Calls `read` with this thread's buffers for reading objects back, reused: objects are
/// read back many at a time (a batch rewritten, the objects after one that left appended
/// again).
pub(super) fn with_buffers<T>(read: impl FnOnce(&mut ReadBuffers) -> T) -> T {
    thread_local! {
        static BUFFERS: std::cell::RefCell<ReadBuffers> = std::cell::RefCell::default();
    }
    BUFFERS.with(|b| match b.try_borrow_mut() {
        Ok(mut b) => read(&mut b),
        Err(_) => read(&mut ReadBuffers::default()),
    })
}

/// Buffers for reading an object back.
#[derive(Default)]
pub(super) struct ReadBuffers {
    /// The object's line sequences under a header of their own, their rows (address,
    /// line), and those of one function.
    program: Vec<u8>,
    lines: Vec<(u64, u32)>,
    rows: Vec<LineRow>,
    /// The rules of the FDE being read and those `DW_CFA_remember_state` kept, one
    /// function's rows, and those a description of its frame gives.
    kept: Vec<UnwindRow>,
    rules: Vec<UnwindRow>,
    unwind: Vec<UnwindRow>,
    again: Vec<UnwindRow>,
}

/// The description of a frame whose rows are `rows` (those an FDE sets): a default or frame-pointer frame if one gives exactly these rows (no
/// row of theirs repeats the one before, so none was left out), which cost less to keep
/// and to encode again than rows; the rows otherwise. Either writes the same FDE.
fn frame_of(rows: &[UnwindRow], size: u32, again: &mut Vec<UnwindRow>) -> Frame {
    let fp = |r: &UnwindRow| (r.cfa_base, r.cfa_offset, r.fp_offset) == (CfaBase::Fp, 16, -16);
    let entry = |r: &UnwindRow| (r.cfa_base, r.cfa_offset, r.fp_offset) == (CfaBase::Sp, 8, 0);
    let candidate = match rows {
        [r] if r.offset == 0 && fp(r) => Frame::Default,
        [first, pushed, rest @ ..]
            if first.offset == 0
                && entry(first)
                && (pushed.cfa_base, pushed.cfa_offset, pushed.fp_offset)
                    == (CfaBase::Sp, 16, -16) =>
        {
            let (setup_end, mut rest) = match rest {
                [r, more @ ..] if fp(r) => (r.offset, more),
                _ => (pushed.offset, rest),
            };
            let mut epilogues = Vec::new();
            while let [restore, more @ ..] = rest {
                if !entry(restore) {
                    break;
                }
                let (ret_end, more) = match more {
                    [r, more @ ..] if fp(r) => (r.offset, more),
                    _ => (size, more),
                };
                epilogues.push(Epilogue {
                    restore_end: restore.offset,
                    ret_end,
                });
                rest = more;
            }
            Frame::FramePointer {
                push_end: pushed.offset,
                setup_end,
                epilogues,
            }
        }
        _ => return Frame::Rows(rows.to_vec()),
    };
    candidate.rows_into(Arch::X86_64, size.into(), again);
    if again[..] == *rows {
        candidate
    } else {
        Frame::Rows(rows.to_vec())
    }
}
