//! An ELF payload that grows in place. Without a debugger, the registry appends small
//! objects registered one by one to such a payload (as it appends compact records to a
//! compact one): each object is encoded once, straight into it, and never merged with
//! others afterwards, while the payload stays in the descriptor's list, whole and
//! consistent, for a debugger that attaches later and for core files.
//!
//! The payload has a fixed size ([`PAYLOAD`]); every section has a region of it, filled from
//! its start, and the section headers say how much of each is in use. An appended object is
//! what encoding it alone makes (its symbols, names, FDEs and DWARF), moved to where its
//! bytes go: every FDE refers to the one CIE, every unit to one abbreviation table (all the
//! abbreviations, at their fixed codes). A one-function object with line rows joins the
//! *open unit* of its source file (see `OpenUnit`: one compile unit for up to 64 such
//! functions, which readers hold far fewer of than one unit each; up to 16 files have one
//! open at once); other objects get the units encoding them alone makes. Objects with call
//! sites are not appended (their DWARF refers to subprograms by section offset).
//!
//! An append writes everything beyond what the headers cover first, then makes it part of
//! the payload one store at a time, so that a debugger stopping the process between two
//! stores (attach) or a core file cut there reads a consistent object: names, ranges, FDEs
//! and line sequences first (nothing refers to them yet), then the `.text` sections of the
//! new code, then (joining an open unit) its range in the unit's range list, then its
//! compile unit or subprogram entry, then its symbols. The unit tests
//! parse the payload at every one of those points.
//!
//! Unused room costs little memory: a new payload is zeroed when allocated (the kernel's
//! zero pages, for an allocation this large) and only the regions' used parts are written;
//! a payload no longer linked can be reused as it is (see [`Growing::new`]).
//!
//! An object whose functions all have line rows in one source file (and no blocks) can be
//! read back from the payload ([`Index::object`]: its symbols, FDEs and line sequences,
//! found through 20 bytes kept per object), so that the registry keeps nothing else to
//! append it again after a rollback or to re-encode the payload.
//!
//! Files: this one lays the payload out and appends; `copy.rs` appends objects again from
//! their bytes in another payload; `rollback.rs` returns a payload to before one of its
//! objects; `index.rs` reads objects back; `tests.rs` parses payloads at every store.

mod copy;
mod index;
mod rollback;
#[cfg(test)]
mod tests;

use std::sync::atomic::{compiler_fence, Ordering};

use object::elf;

use super::cfi;
use super::dwarf;
use super::layout::{Layout, Spans, MAX_PADDING};
use super::scratch::Scratch;
use super::writer::{self, Header, FILE_HEADER, SECTION_HEADER, SYMBOL};
use crate::error::{Error, Result};
use crate::model::{Arch, JitObject};
use copy::Appended;
use index::NOT_PLAIN;
pub(crate) use index::{Index, Plain};
use rollback::{Cut, Mark};

/// Size of a growing payload: about 900 one-function objects of the benchmark shape
/// (8 line rows, frame-pointer frame, 20-character name).
pub(crate) const PAYLOAD: usize = 256 * 1024;

/// About as many one-function objects as a payload holds (see [`PAYLOAD`]).
const OBJECTS: usize = PAYLOAD / 256;

/// Most `.text` sections (runs of adjacent code) of one payload.
const MAX_RUNS: usize = 247;

/// Section indices: the fixed sections, then one `.text` per run, in the order they came.
const INFO: usize = 1;
const ABBREV: usize = 2;
const LINE: usize = 3;
const RANGES: usize = 4;
const FRAME: usize = 5;
const DEBUG_STR: usize = 6;
const STRTAB: usize = 7;
const SYMTAB: usize = 8;
const FIRST_TEXT: usize = 9;
const MAX_SECTIONS: usize = FIRST_TEXT + MAX_RUNS;
const _: () = assert!(MAX_SECTIONS < elf::SHN_LORESERVE as usize);

/// The regions, in file order after the section headers and the abbreviations.
const REGIONS: usize = 6;
const STRINGS_R: usize = 0;
const SYMBOLS_R: usize = 1;
const INFO_R: usize = 2;
const LINE_R: usize = 3;
const RANGES_R: usize = 4;
const FRAME_R: usize = 5;
/// The section of each region (`.debug_str` and `.strtab` are one table with two headers).
const REGION_SECTION: [usize; REGIONS] = [DEBUG_STR, SYMTAB, INFO, LINE, RANGES, FRAME];
/// Bytes of each region per function the payload is sized for. The benchmark shape takes
/// 21 (name), 24, about 56 (a unit of its own; about 16 in an open unit, whose room is 15
/// bytes per entry), 71 (a line program of its own; about 33 in an open unit's, whose
/// room is 32 bytes per entry), 16 (its range in an open unit's list, whose room is 16
/// bytes per entry) and 32; the rest is room for longer names, file names and frame
/// descriptions, and for the rooms of open units left partly empty (objects of more files
/// in turns than there are open units).
const SHARE: [usize; REGIONS] = [40, 24, 64, 64, 40, 40];

/// A run of adjacent code with a `.text` section of its own.
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u64,
    end: u64,
    section: u16,
}

/// What becomes of a run of an appended object.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// It continues the payload's run at this index of `Growing::runs`.
    Extends(usize),
    /// It gets the section of this index.
    New(u16),
}

/// The compile unit that one-function objects of one source file join, one after the
/// other: its addresses are a range list (`DW_AT_ranges`) that each function joining adds
/// its range to, so a subprogram anywhere joins it, and its line program takes their line
/// sequences. (Readers must not take a unit's addresses from its subprograms' lowest and
/// highest: GDB then gives the unit every address in between, the code of other entries
/// too, and once it has read the unit answers "no line number information" for those.)
/// The unit is made with room for some subprogram entries (`COLD_ENTRIES` for a file that
/// had no open unit, more for a file whose unit filled up: `ROOM_GROWTH`, at most
/// `OPEN_ENTRIES`, and less as the payload fills up: `Growing::room_cap`), zero (null
/// entries, which readers skip as padding), as many ranges, zero (the list's end), and
/// line sequences: a range joins its list with one 16-byte store, an entry the unit with
/// another, and its line sequence with one store of the line program's length
/// (`.debug_line`'s size covers the whole region from the start: debuggers reach line
/// programs only through their units; a tool that walks the section from start to end,
/// like `readelf --debug-dump=line`, also meets the room after each open unit's program:
/// zeros, or a reused payload's old bytes). Up to `OPEN_UNITS` units are open at once, each of its own file: objects of
/// source files registered in turns join their files' units, where one open unit closed
/// at every change of file and left its rooms mostly empty (a payload then held about 34
/// objects). Offsets are in the payload.
#[derive(Debug, Clone, Copy)]
struct OpenUnit {
    /// Index in `Index::files`.
    file: u32,
    /// The 0 that ends its list of subprograms.
    end: usize,
    /// Past its last byte (room included).
    limit: usize,
    line_at: usize,
    /// Past its line program's last byte.
    line_end: usize,
    /// Where the next range of its list goes (a zero pair until then: the list's end).
    ranges_next: usize,
    /// Past the room of its range list (one zero pair more follows: the end of a full
    /// list).
    ranges_limit: usize,
    /// Past the room of its line program.
    line_limit: usize,
    /// The entries it was made with room for.
    room: usize,
    /// `Growing::functions` when a function last joined it (or it opened).
    joined: usize,
}

/// Subprogram entries an open unit has room for at most (15 bytes each), and ranges.
const OPEN_ENTRIES: usize = 64;

/// A file whose open unit is full gets a unit with this many times its room (up to
/// `OPEN_ENTRIES`): 1, 4, 16, 64 entries. Room is given as a file's functions keep coming,
/// so files that come back a few times (a script with a handful of functions among a hot
/// one) leave little room empty when the payload fills up, however many units are open.
const ROOM_GROWTH: usize = 4;

/// The entries of a unit opened for a file that had none open (its first, or one closed
/// to make room for another file's): room for its one function. A file whose functions
/// keep coming finds its unit full but still open, and gets a larger one next. (Room for 4
/// here, when every function of more files in turns than open units got a unit of its
/// own, made a payload hold 350 of them instead of about 840.)
const COLD_ENTRIES: usize = 1;

/// Room for line sequences per entry, beyond the first sequence (the benchmark shape's
/// takes 26 bytes). An object whose sequences do not fit opens a new unit for its file.
const LINE_ROOM: usize = 32;

/// A unit no function joined in the last this many appended is idle: its slot goes to
/// another file that has none. While every unit is joined more often (objects of more files
/// in turns than there are units), a file that has none gets a unit of its own, and the
/// files that have one keep it: they go on sharing units, where taking the unit of the
/// file that joined least recently would give every function a unit of its own.
const IDLE: usize = 4 * OPEN_UNITS;

/// Units open at once (each of another file). Rooms are given as files' functions keep
/// coming (`ROOM_GROWTH`), so more open units cost no room when few files are in turns; 16
/// files registered in turns each keep a unit (with 8, every function of 16 files got a
/// unit of its own: 570 against 410 ns per registration).
const OPEN_UNITS: usize = 16;

/// `Mark::slot` of an object that joined or opened no open unit.
const NO_SLOT: u8 = u8::MAX;

/// How an object's compile unit goes into the payload.
enum UnitPlan {
    /// As encoded alone.
    Own,
    /// Its function's entry (and a 0 after it) joins the open unit in `Growing::open`
    /// `slot`, its line sequences (`parts.line[sequences..]`) the unit's line program.
    Extend {
        slot: usize,
        entry: [u8; 16],
        sequences: usize,
    },
    /// An open unit for its file, with room for `entries`, is made with its function's
    /// entry, after its line program, in `slot` (closing the unit there, if any).
    Open {
        slot: usize,
        entry: [u8; 16],
        entries: usize,
    },
}

/// Where the line sequences of the line program `line` start: after its header (DWARF 4,
/// 32-bit: the header's length is at offset 6).
fn after_header(line: &[u8]) -> Option<usize> {
    let length = u32::from_le_bytes(line.get(6..10)?.try_into().ok()?);
    Some(10 + length as usize)
}

/// Stores `bytes` at `at` with one instruction: a debugger stops the process (attach, or
/// a crash for a core file) between instructions, so it sees all of them or none.
fn store16(buf: &mut [u8], at: usize, bytes: [u8; 16]) {
    let dst = &mut buf[at..at + 16];
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        // SAFETY: `dst` is 16 writable bytes (the slice above is bounds-checked) and
        // `bytes` 16 readable ones; SSE2 is part of x86-64; both accesses are unaligned
        // loads and stores of 16 bytes, which these intrinsics allow.
        unsafe {
            let v = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
            _mm_storeu_si128(dst.as_mut_ptr().cast::<__m128i>(), v);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(&bytes);
}

/// The state of a growing payload (the payload itself is the caller's).
#[derive(Debug)]
pub(crate) struct Growing {
    /// Where the abbreviations are; the regions follow them.
    abbrev: (usize, usize),
    start: [usize; REGIONS],
    end: [usize; REGIONS],
    used: [usize; REGIONS],
    /// Sections in the file header's count.
    sections: usize,
    /// By start address.
    runs: Vec<Run>,
    /// Offset of ".text" in the string table.
    text_name: u32,
    functions: usize,
    places: Vec<Place>,
    /// One per object appended, in order.
    marks: Vec<Mark>,
    open: [Option<OpenUnit>; OPEN_UNITS],
    /// Where each object's bytes are, to read them back.
    index: Index,
    /// The header and top entry of an open unit being made.
    unit_head: Vec<u8>,
    /// The payload a rollback replaced, with what it shares with the current one (see
    /// [`Growing::roll_back`]); the last rollback's cut, until then.
    mirror: Option<(Vec<u8>, Cut)>,
    cut: Option<Cut>,
    /// The runs appended objects extended, with their ends before (section, end).
    extended: Vec<(u16, u64)>,
}

/// The section header of section `index`.
fn header(buf: &mut [u8], index: usize) -> &mut [u8; SECTION_HEADER] {
    let at = FILE_HEADER + index * SECTION_HEADER;
    (&mut buf[at..at + SECTION_HEADER])
        .try_into()
        .expect("a section header")
}

/// Sets the size of section `index` (one aligned 8-byte store).
fn set_size(buf: &mut [u8], index: usize, size: usize) {
    header(buf, index)[32..40].copy_from_slice(&(size as u64).to_le_bytes());
}

/// Stores a unit length (below 4 GiB: payloads are 256 KiB).
fn put_u32(buf: &mut [u8], at: usize, v: usize) {
    buf[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
}

/// Orders the stores before it before those after it, for a debugger that stops the
/// process between them (as a signal handler would see them).
fn publish(buf: &[u8]) {
    compiler_fence(Ordering::SeqCst);
    #[cfg(test)]
    tests::SNAPSHOTS.with(|s| {
        if let Some(s) = s.borrow_mut().as_mut() {
            s.push(buf.to_vec());
        }
    });
    #[cfg(not(test))]
    let _ = buf;
}

impl Growing {
    /// A new growing payload without functions: [`PAYLOAD`] bytes, and its state. `spare`
    /// is a payload no longer linked, reused if it has that size: only what the new
    /// payload's headers cover is written (the rest, beyond every section's size, is never
    /// read), so reusing it touches no fresh memory and zeroes nothing else.
    pub(crate) fn new(spare: Option<Vec<u8>>) -> Result<(Vec<u8>, Growing)> {
        let mut buf = match spare {
            Some(mut b) if b.len() == PAYLOAD => {
                b[..FILE_HEADER + FIRST_TEXT * SECTION_HEADER].fill(0);
                b
            }
            _ => vec![0u8; PAYLOAD],
        };
        let abbrev_at = FILE_HEADER + MAX_SECTIONS * SECTION_HEADER;
        let mut abbrev = Vec::new();
        dwarf::growing_abbreviations(&mut abbrev);
        buf[abbrev_at..abbrev_at + abbrev.len()].copy_from_slice(&abbrev);

        let mut start = [0; REGIONS];
        let mut end = [0; REGIONS];
        let first = writer::align(abbrev_at + abbrev.len(), 8);
        let per_function: usize = SHARE.iter().sum();
        let functions = (PAYLOAD - first) / per_function;
        let mut at = first;
        for r in 0..REGIONS {
            start[r] = at;
            at += SHARE[r] * functions;
            end[r] = at;
        }
        debug_assert!(at <= PAYLOAD);

        let mut used = [0; REGIONS];
        // The string table: a NUL, the section names, then the functions' names.
        let mut names = vec![0u8];
        let mut name = |n: &writer::SectionName| {
            let at = names.len() as u32;
            names.extend_from_slice(n.as_bytes());
            names.push(0);
            at
        };
        let section_names = [
            name(&writer::DEBUG_INFO),
            name(&writer::DEBUG_ABBREV),
            name(&writer::DEBUG_LINE),
            name(&writer::DEBUG_RANGES),
            name(&writer::DEBUG_FRAME),
            name(&writer::DEBUG_STR),
            name(&writer::STRTAB),
            name(&writer::SYMTAB),
        ];
        let text_name = name(&writer::TEXT);
        buf[start[STRINGS_R]..start[STRINGS_R] + names.len()].copy_from_slice(&names);
        used[STRINGS_R] = names.len();
        // The null symbol (zeros).
        used[SYMBOLS_R] = SYMBOL;
        let mut cie = Vec::new();
        cfi::write_cie(&mut cie)?;
        buf[start[FRAME_R]..start[FRAME_R] + cie.len()].copy_from_slice(&cie);
        used[FRAME_R] = cie.len();

        let file: &mut [u8; FILE_HEADER] = (&mut buf[..FILE_HEADER]).try_into().expect("64");
        writer::file_header(
            Arch::X86_64,
            file,
            FILE_HEADER,
            FIRST_TEXT as u16,
            STRTAB as u16,
        );
        let region_of = |section: usize| match section {
            STRTAB => Some(STRINGS_R),
            _ => REGION_SECTION.iter().position(|&s| s == section),
        };
        for (i, &name) in section_names.iter().enumerate() {
            let index = i + 1;
            let (offset, size) = match (index, region_of(index)) {
                (ABBREV, _) | (_, None) => (abbrev_at, abbrev.len()),
                (_, Some(r)) => (start[r], used[r]),
            };
            let mut h = Header::data(name, elf::SHT_PROGBITS, offset, size);
            match index {
                DEBUG_STR => {
                    h.flags = elf::SHF_MERGE | elf::SHF_STRINGS;
                    h.entsize = 1;
                }
                STRTAB => h.kind = elf::SHT_STRTAB,
                SYMTAB => {
                    h.kind = elf::SHT_SYMTAB;
                    h.link = STRTAB as u32;
                    // Only the null symbol is local.
                    h.info = 1;
                    h.align = 8;
                    h.entsize = SYMBOL as u64;
                }
                _ => {}
            }
            h.write(header(&mut buf, index));
        }
        set_size(&mut buf, LINE, end[LINE_R] - start[LINE_R]);
        let growing = Growing {
            abbrev: (abbrev_at, abbrev.len()),
            start,
            end,
            used,
            sections: FIRST_TEXT,
            runs: Vec::new(),
            text_name,
            functions: 0,
            places: Vec::new(),
            // Room for a full payload's objects: growing by copying would touch fresh
            // memory (a page fault per 4 KiB) for every copy.
            marks: Vec::with_capacity(OBJECTS),
            open: [None; OPEN_UNITS],
            index: Index {
                plain: Vec::with_capacity(OBJECTS),
                files: Vec::new(),
                file_hashes: Vec::new(),
                last_found: std::cell::Cell::new(0),
            },
            unit_head: Vec::new(),
            mirror: None,
            cut: None,
            extended: Vec::with_capacity(OBJECTS),
        };
        Ok((buf, growing))
    }

    /// Functions appended so far.
    #[cfg(test)]
    pub(crate) fn functions(&self) -> usize {
        self.functions
    }

    /// Objects appended so far.
    pub(crate) fn objects(&self) -> usize {
        self.marks.len()
    }

    /// Where the objects appended so far are, to read them back.
    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    /// The payload stops growing: what reading its objects back needs, and the buffer kept
    /// for rollbacks, if any (the registry reuses it).
    pub(crate) fn seal(self) -> (Index, Option<Vec<u8>>) {
        (self.index, self.mirror.map(|(m, _)| m))
    }

    /// Appends `object` to `buf` (a payload made by [`Growing::new`], with this state) and
    /// returns the bytes it took. `Ok(None)`: it is not appended (no room left, code that
    /// overlaps code of the payload, call sites); the payload is unchanged. Errors are what
    /// encoding the object alone refuses. Objects with source texts are not for it.
    pub(crate) fn append(&mut self, buf: &mut [u8], object: &JitObject) -> Result<Option<usize>> {
        if object.arch() != Arch::X86_64 {
            return Err(Error::Unsupported {
                format: crate::error::PayloadFormat::Elf,
                why: format!(
                    "the ELF encoder writes x86-64 objects only; this object is for {}",
                    object.arch().name()
                ),
            });
        }
        // The registry never appends objects with source texts (`registry::lossless`):
        // the payload has no section for them.
        debug_assert!(!object.has_sources(), "source texts would be dropped");
        if buf.len() != PAYLOAD {
            return Ok(None);
        }
        let mut scratch = Scratch::take();
        let out = match Layout::new(&[object], &mut scratch.layout, Spans::Padding) {
            Ok(layout) => {
                let out = self.append_layout(buf, &layout, &mut scratch, None);
                layout.into_parts(&mut scratch.layout);
                out
            }
            Err(e) => Err(e),
        };
        scratch.keep();
        out
    }
}

impl Growing {
    /// The slot of `file`'s open unit, if it has room for another function (its line
    /// sequences apart: the caller checks them).
    fn joinable(&self, file: &str) -> Option<usize> {
        self.joinable_id(self.index.find_file(file)?)
    }

    /// [`Growing::joinable`] for the file of index `id` in `Index::files`.
    fn joinable_id(&self, id: u32) -> Option<usize> {
        self.open.iter().position(|u| {
            u.is_some_and(|u| {
                u.file == id && u.end + 16 <= u.limit && u.ranges_next + 16 <= u.ranges_limit
            })
        })
    }

    /// Where a new open unit for `file` goes, and the entries it has room for: in the
    /// place of the file's full one (more room than it had: its functions keep coming), or
    /// of none, or of the unit joined least recently if it is idle (little room: a file
    /// that had no unit open may not come back soon). `None`: every unit is busy.
    fn slot_for(&self, file: &str) -> Option<(usize, usize)> {
        if let Some(id) = self.index.find_file(file) {
            for (slot, u) in self.open.iter().enumerate() {
                if let Some(u) = u.filter(|u| u.file == id) {
                    return Some((slot, (u.room * ROOM_GROWTH).min(OPEN_ENTRIES)));
                }
            }
        }
        let slot = match self.open.iter().position(Option::is_none) {
            Some(slot) => slot,
            None => {
                let (slot, joined) = (0..OPEN_UNITS)
                    .map(|i| (i, self.open[i].map_or(0, |u| u.joined)))
                    .min_by_key(|&(_, joined)| joined)?;
                if self.functions - joined < IDLE {
                    return None;
                }
                slot
            }
        };
        Some((slot, COLD_ENTRIES))
    }

    /// The entries a new open unit may have room for: each open unit takes at most
    /// 1 / (2 * `OPEN_UNITS`) of what is left of the regions it has room in, so rooms
    /// never hold more than about half of what is left, and shrink as the payload fills up
    /// (rooms left partly empty would fill it up sooner).
    fn room_cap(&self) -> usize {
        [(INFO_R, 15), (LINE_R, LINE_ROOM), (RANGES_R, 16)]
            .into_iter()
            .map(|(r, per_entry)| {
                let left = self.end[r] - self.start[r] - self.used[r];
                left / (2 * OPEN_UNITS * per_entry)
            })
            .min()
            .unwrap_or(0)
            .max(COLD_ENTRIES)
    }

    /// Appends the object of `layout`. With `copied`, its line sequence and FDE as a
    /// payload holds them (see [`Growing::append_copy`]): the object joins its file's open
    /// unit with these bytes, or is not appended (`Ok(None)`).
    fn append_layout<'a>(
        &mut self,
        buf: &mut [u8],
        src: &impl Appended<'a>,
        scratch: &mut Scratch,
        copied: Option<(&[u8], &[u8])>,
    ) -> Result<Option<usize>> {
        if src.has_calls() {
            return Ok(None);
        }
        // Offsets in the sections as the payload has them: the object's names follow those
        // in the table (its own table would start with a NUL).
        let bases = dwarf::Bases {
            strings: (self.used[STRINGS_R] - 1) as u32,
            line: self.used[LINE_R] as u32,
            ranges: self.used[RANGES_R] as u32,
        };
        // The usual case first: one plain function with lines joins the open unit of its
        // file, which has room. Only its line sequence and its entry are needed: the
        // unit that encoding it alone makes (its header, its line program's header) would
        // be thrown away. (The general plan below makes the same choice from that unit.)
        let mut joins = match src.single() {
            _ if general_only() => None,
            Some((file, start, size, rows))
                if cfg!(target_arch = "x86_64")
                    && !src.has_extras()
                    && (copied.is_some() || rows) =>
            {
                let slot = match src.file_id() {
                    Some(id) => self.joinable_id(id),
                    None => file.and_then(|file| self.joinable(file)),
                };
                let name = src.function(0).3 + bases.strings;
                slot.zip(dwarf::open_subprogram(name, start, size))
            }
            _ => None,
        };
        if let Some((slot, _)) = joins {
            scratch.dwarf.info.clear();
            scratch.dwarf.line.clear();
            scratch.dwarf.ranges.clear();
            match (copied, src.layout()) {
                (Some((sequence, _)), _) => scratch.dwarf.line.extend_from_slice(sequence),
                (None, Some(layout)) => {
                    dwarf::line_sequence(&mut scratch.dwarf.line, layout.function(0))
                }
                (None, None) => return Ok(None),
            }
            if !self.open[slot]
                .is_some_and(|u| u.line_end + scratch.dwarf.line.len() <= u.line_limit)
            {
                // No room for its sequence: it opens a unit, made the general way.
                joins = None;
            }
        }
        match (joins, copied, src.layout()) {
            // The copied bytes go into an open unit only (the model has no rows).
            (None, Some(_), _) | (None, None, None) => return Ok(None),
            (None, None, Some(layout)) => dwarf::build_at(layout, &mut scratch.dwarf, bases)?,
            (Some(_), _, _) => {}
        }
        match copied {
            Some((_, fde)) => {
                // After room for the CIE, which the payload has already (see below).
                let frame = &mut scratch.cfi.frame;
                frame.clear();
                frame.resize(cfi::CIE_LEN, 0);
                frame.extend_from_slice(fde);
            }
            None => match src.layout() {
                Some(layout) => cfi::debug_frame(Arch::X86_64, layout, &mut scratch.cfi)?,
                None => return Ok(None),
            },
        }
        let info = &scratch.dwarf.info;
        let line = &scratch.dwarf.line;
        let ranges = &scratch.dwarf.ranges;
        let frame = &scratch.cfi.frame[cfi::CIE_LEN..];
        // One function (below 64 KiB) with lines: it joins the open unit of its file, or
        // opens one. (Others get their own units and close the open one: it must end both
        // sections to grow.) Joining must be one store (see `store16`), so only hosts
        // that make it one do it.
        let file = match src.single() {
            _ if joins.is_some() => None,
            Some((file, start, size, _))
                if cfg!(target_arch = "x86_64")
                    && !src.has_extras()
                    && dwarf::plain_unit_children(info).is_some() =>
            {
                let name = src.function(0).3 + bases.strings;
                file.zip(dwarf::open_subprogram(name, start, size))
            }
            _ => None,
        };
        // The line program's header length is at offset 6 (DWARF 4, 32-bit).
        let sequences = || 10 + u32::from_le_bytes(line[6..10].try_into().expect("4")) as usize;
        let plan = match file {
            _ if joins.is_some() => {
                let (slot, entry) = joins.expect("joins");
                UnitPlan::Extend {
                    slot,
                    entry,
                    sequences: 0,
                }
            }
            Some((file, entry)) => match self.joinable(file) {
                Some(slot)
                    if self.open[slot]
                        .is_some_and(|u| u.line_end + line.len() - sequences() <= u.line_limit) =>
                {
                    UnitPlan::Extend {
                        slot,
                        entry,
                        sequences: sequences(),
                    }
                }
                _ => match self.slot_for(file) {
                    Some((slot, entries)) => {
                        let entries = entries.min(self.room_cap());
                        self.unit_head.clear();
                        dwarf::open_unit(&mut self.unit_head, file, bases.line, bases.ranges);
                        UnitPlan::Open {
                            slot,
                            entry,
                            entries,
                        }
                    }
                    None => UnitPlan::Own,
                },
            },
            None => UnitPlan::Own,
        };
        let mut lens = [0; REGIONS];
        lens[STRINGS_R] = src.strings_len() - 1;
        lens[SYMBOLS_R] = src.count() * SYMBOL;
        (lens[INFO_R], lens[LINE_R]) = match plan {
            UnitPlan::Own => (info.len(), line.len()),
            // The entry takes the place of the unit's 0, and ends with one.
            // The entry takes room the unit has.
            // Its sequences take room the unit has.
            UnitPlan::Extend { .. } => (0, 0),
            UnitPlan::Open { entries, .. } => (
                self.unit_head.len() + 1 + 15 * entries,
                line.len() + LINE_ROOM * (entries - 1),
            ),
        };
        lens[RANGES_R] = match plan {
            UnitPlan::Own => ranges.len(),
            UnitPlan::Extend { .. } => 0,
            // Room for a range per entry, and the list's end.
            UnitPlan::Open { entries, .. } => 16 * (entries + 1),
        };
        lens[FRAME_R] = frame.len();
        let room = (self.start.iter().zip(&self.used).zip(&self.end)).map(|((s, u), e)| e - s - u);
        if room.zip(&lens).any(|(room, &len)| len > room) {
            return Ok(None);
        }

        // Where each run of the object goes; none may overlap the payload's code.
        self.places.clear();
        let mut sections = self.sections;
        for run in src.runs() {
            let k = self.runs.partition_point(|r| r.start < run.start);
            let before = k.checked_sub(1).map(|i| (i, self.runs[i]));
            if before.is_some_and(|(_, b)| b.end > run.start)
                || self.runs.get(k).is_some_and(|a| a.start < run.end)
            {
                return Ok(None);
            }
            match before {
                // Neighbouring code (alignment padding apart): its section grows.
                Some((i, b)) if run.start - b.end <= MAX_PADDING => {
                    self.places.push(Place::Extends(i))
                }
                _ => {
                    if sections == MAX_SECTIONS {
                        return Ok(None);
                    }
                    self.places.push(Place::New(sections as u16));
                    sections += 1;
                }
            }
        }

        // Everything beyond what the headers cover.
        let mut at = self.start[STRINGS_R] + self.used[STRINGS_R];
        for i in 0..src.count() {
            let name = src.function(i).0;
            buf[at..at + name.len()].copy_from_slice(name);
            // (The room may hold a reused payload's bytes: see `Growing::new`.)
            buf[at + name.len()] = 0;
            at += name.len() + 1;
        }
        debug_assert_eq!(
            at,
            self.start[STRINGS_R] + self.used[STRINGS_R] + lens[STRINGS_R]
        );
        let info_bits = elf::SymbolInfo::new(elf::STB_GLOBAL, elf::STT_FUNC).0;
        let mut at = self.start[SYMBOLS_R] + self.used[SYMBOLS_R];
        let mut run = 0;
        let runs = src.runs();
        for i in 0..src.count() {
            let (_, start, size, name) = src.function(i);
            while start >= runs[run].end {
                run += 1;
            }
            let (section, base) = match self.places[run] {
                Place::Extends(i) => (self.runs[i].section, self.runs[i].start),
                Place::New(s) => (s, runs[run].start),
            };
            let symbol: &mut [u8; SYMBOL] = (&mut buf[at..at + SYMBOL]).try_into().expect("24");
            symbol[..4].copy_from_slice(&(name + bases.strings).to_le_bytes());
            symbol[4] = info_bits;
            symbol[5] = elf::STV_DEFAULT.0;
            symbol[6..8].copy_from_slice(&section.to_le_bytes());
            // Relocatable object: symbol values are offsets in their section.
            symbol[8..16].copy_from_slice(&(start - base).to_le_bytes());
            symbol[16..].copy_from_slice(&u64::from(size).to_le_bytes());
            at += SYMBOL;
        }
        for (r, bytes) in [(RANGES_R, &ranges[..]), (FRAME_R, frame)] {
            if r == RANGES_R && !matches!(plan, UnitPlan::Own) {
                // An open unit's range list: below.
                continue;
            }
            let at = self.start[r] + self.used[r];
            buf[at..at + bytes.len()].copy_from_slice(bytes);
        }
        // The range of the one function of an object that joins or opens a unit (as the
        // list holds it: absolute, from the unit's base address 0).
        let range = (src.count() > 0).then(|| {
            let (_, start, size, _) = src.function(0);
            let mut pair = [0u8; 16];
            pair[..8].copy_from_slice(&start.to_le_bytes());
            pair[8..].copy_from_slice(&(start + u64::from(size)).to_le_bytes());
            pair
        });
        // (Joining or opening a unit is planned for one function only: never refused here.
        // Nothing written so far is part of the payload yet.)
        let Some(range) = range.or(matches!(plan, UnitPlan::Own).then_some([0; 16])) else {
            return Ok(None);
        };
        let info_at = self.start[INFO_R] + self.used[INFO_R];
        let line_at = self.start[LINE_R] + self.used[LINE_R];
        // The open unit the object joins or opens, as it is after it.
        let open = match plan {
            UnitPlan::Own => {
                buf[info_at..info_at + info.len()].copy_from_slice(info);
                buf[line_at..line_at + line.len()].copy_from_slice(line);
                None
            }
            UnitPlan::Extend {
                slot, sequences, ..
            } => {
                let Some(open) = self.open[slot] else {
                    return Ok(None);
                };
                // After the program's end: its length makes it part of it.
                let seq = &line[sequences..];
                buf[open.line_end..open.line_end + seq.len()].copy_from_slice(seq);
                Some(OpenUnit {
                    end: open.end + 15,
                    line_end: open.line_end + seq.len(),
                    ranges_next: open.ranges_next + 16,
                    joined: self.functions,
                    ..open
                })
            }
            UnitPlan::Open { entry, entries, .. } => {
                // The range list: the function's range, then zeros (the list's end).
                let ranges_at = self.start[RANGES_R] + self.used[RANGES_R];
                let ranges_limit = ranges_at + 16 * entries;
                buf[ranges_at..ranges_at + 16].copy_from_slice(&range);
                buf[ranges_at + 16..ranges_limit + 16].fill(0);
                let head = self.unit_head.len();
                buf[info_at..info_at + head].copy_from_slice(&self.unit_head);
                let limit = info_at + lens[INFO_R];
                buf[info_at + head..info_at + head + 16].copy_from_slice(&entry);
                buf[info_at + head + 16..limit].fill(0);
                let end = info_at + head + 16;
                put_u32(buf, info_at, limit - info_at - 4);
                buf[line_at..line_at + line.len()].copy_from_slice(line);
                let file = file.map_or("", |(f, _)| f);
                Some(OpenUnit {
                    file: self.index.add_file(file),
                    end: end - 1,
                    limit,
                    line_at,
                    line_end: line_at + line.len(),
                    ranges_next: ranges_at + 16,
                    ranges_limit,
                    line_limit: line_at + lens[LINE_R],
                    room: entries,
                    joined: self.functions,
                })
            }
        };
        let slot = match plan {
            UnitPlan::Own => None,
            UnitPlan::Extend { slot, .. } | UnitPlan::Open { slot, .. } => Some(slot),
        };
        for (run, place) in src.runs().iter().zip(&self.places) {
            if let Place::New(section) = *place {
                // Zero unless the payload is a reused one (see `Growing::new`).
                let h = header(buf, section.into());
                h.fill(0);
                Header::text(self.text_name, run.start, run.end).write(h);
            }
        }

        // Where a plain object's bytes are, to read it back (see `Index::object`). (A
        // function with a file but no rows opens a unit too, with an empty line program.)
        let rows = copied.is_some() || src.all_rows();
        // Register rules are not read back from the FDEs: such objects keep a record.
        let rules = src.layout().is_some_and(|layout| {
            layout
                .functions
                .iter()
                .any(|p| !p.f.register_rules().is_empty())
        });
        let plain = match (&plan, open) {
            _ if !rows || rules => None,
            (
                UnitPlan::Extend {
                    slot, sequences, ..
                },
                Some(u),
            ) => self.open[*slot].map(|old| (u.file, old.line_end, line.len() - sequences)),
            (UnitPlan::Open { .. }, Some(u)) => {
                after_header(line).map(|h| (u.file, line_at + h, line.len() - h))
            }
            (UnitPlan::Own, _) => src
                .layout()
                .and_then(|layout| self.index.own_unit(layout, line, line_at)),
            _ => None,
        };
        // Offsets in the payload: below `PAYLOAD`; small objects: fewer than 2^16 functions.
        // Line sequences and FDEs are kept short by the regions' room (far below 64 KiB);
        // longer ones would make the object one to keep a record of (not plain), or one not
        // to copy (an FDE of 64 KiB or more: read back instead).
        let count = src.count() as u16;
        let fde_len = match count {
            1 => u16::try_from(frame.len()).unwrap_or(0),
            _ => 0,
        };
        let plain = plain.and_then(|(file, seq, lines)| {
            let file = u16::try_from(file).ok().filter(|&f| f != NOT_PLAIN)?;
            Some((file, seq, u16::try_from(lines).ok()?))
        });
        self.index.plain.push(match plain {
            Some((file, seq, lines)) => Plain {
                sym: (self.start[SYMBOLS_R] + self.used[SYMBOLS_R]) as u32,
                fde: (self.start[FRAME_R] + self.used[FRAME_R]) as u32,
                seq: seq as u32,
                lines,
                fde_len,
                file,
                count,
            },
            None => Plain {
                sym: 0,
                fde: 0,
                seq: 0,
                lines: 0,
                fde_len: 0,
                file: NOT_PLAIN,
                count,
            },
        });

        // Then it becomes part of the payload.
        let was = slot.and_then(|slot| self.open[slot]);
        self.marks.push(Mark {
            slot: slot.map_or(NO_SLOT, |slot| slot as u8),
            was,
            used: self.used.map(|u| u as u32),
            sections: self.sections as u16,
            functions: self.functions as u32,
            extended: self.extended.len() as u32,
        });
        publish(buf);
        for (used, len) in self.used.iter_mut().zip(lens) {
            *used += len;
        }
        set_size(buf, DEBUG_STR, self.used[STRINGS_R]);
        set_size(buf, STRTAB, self.used[STRINGS_R]);
        if let (UnitPlan::Extend { .. }, Some(new)) = (&plan, open) {
            // The sequences join the open unit's line program (nothing refers to them yet).
            put_u32(buf, new.line_at, new.line_end - new.line_at - 4);
        }
        set_size(buf, RANGES, self.used[RANGES_R]);
        set_size(buf, FRAME, self.used[FRAME_R]);
        for (run, place) in src.runs().iter().zip(&self.places) {
            if let Place::Extends(i) = *place {
                let grown = &mut self.runs[i];
                self.extended.push((grown.section, grown.end));
                grown.end = run.end;
                set_size(
                    buf,
                    grown.section.into(),
                    (grown.end - grown.start) as usize,
                );
            }
        }
        publish(buf);
        if sections != self.sections {
            buf[60..62].copy_from_slice(&(sections as u16).to_le_bytes());
            self.sections = sections;
        }
        publish(buf);
        if let (UnitPlan::Extend { .. }, Some(old)) = (&plan, was) {
            // The unit claims the function's addresses (one store: a debugger sees the
            // list end before it or after it), before its entry names the function.
            store16(buf, old.ranges_next, range);
            publish(buf);
        }
        match (&plan, was) {
            // The entry and the 0 after it take the unit's room, in one store.
            (UnitPlan::Extend { entry, .. }, Some(old)) => store16(buf, old.end, *entry),
            _ => set_size(buf, INFO, self.used[INFO_R]),
        }
        publish(buf);
        set_size(buf, SYMTAB, self.used[SYMBOLS_R]);
        publish(buf);
        if let Some(slot) = slot {
            self.open[slot] = open;
        }

        for (run, place) in src.runs().iter().zip(&self.places) {
            if let Place::New(section) = *place {
                let k = self.runs.partition_point(|r| r.start < run.start);
                self.runs.insert(
                    k,
                    Run {
                        start: run.start,
                        end: run.end,
                        section,
                    },
                );
            }
        }
        self.functions += src.count();
        Ok(Some(lens.iter().sum()))
    }
}

/// Tests turn the usual case's shortcut in `append_layout` off, to compare.
#[cfg(test)]
fn general_only() -> bool {
    tests::GENERAL_ONLY.with(|g| g.get())
}

#[cfg(not(test))]
#[inline(always)]
fn general_only() -> bool {
    false
}
