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
//! found through 16 bytes kept per object), so that the registry keeps nothing else to
//! append it again after a rollback or to re-encode the payload.

use std::sync::atomic::{compiler_fence, Ordering};

use object::elf;

use super::cfi;
use super::dwarf;
use super::layout::{self, Layout, MAX_PADDING};
use super::scratch::Scratch;
use super::writer::{self, Header, FILE_HEADER, SECTION_HEADER, SYMBOL};
use crate::error::{Error, Result};
use crate::model::{Arch, CfaBase, Epilogue, Frame, JitObject, LineRow, UnwindRow};

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

/// The state of a payload before an object was appended: what [`Growing::roll_back`]
/// returns to.
#[derive(Debug, Clone, Copy)]
struct Mark {
    /// The open unit the object joined or opened (`NO_SLOT`: none), and what that slot of
    /// `Growing::open` held before.
    slot: u8,
    was: Option<OpenUnit>,
    used: [u32; REGIONS],
    sections: u16,
    functions: u32,
    /// Length of `Growing::extended` then.
    extended: u32,
}

/// Where a *plain* object's bytes are in the payload: an object whose functions all have
/// line rows in one source file, and no blocks. Such an object can be read back from the
/// payload ([`Index::object`]), so the registry keeps nothing else to append it again or
/// re-encode it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plain {
    /// Its first symbol, its first FDE, its first line sequence: offsets in the payload.
    sym: u32,
    fde: u32,
    seq: u32,
    /// Index in `Index::files`; `NOT_PLAIN` for other objects.
    file: u16,
    /// Its functions.
    count: u16,
}

const NOT_PLAIN: u16 = u16::MAX;

/// What reading objects back from a payload needs, kept when it stops growing (see
/// [`Growing::seal`]): 16 bytes per object, where its compact record (kept until plain
/// objects could be read back) took about 40, and encoding it cost a quarter of appending.
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// One per object appended, in order.
    plain: Vec<Plain>,
    /// Files of the open units made so far.
    files: Vec<String>,
    /// `file_hash` of each of `files`, in the same order: a file is found by its hash, its
    /// name compared once (objects of many files in turns look theirs up at each append).
    file_hashes: Vec<u64>,
    /// The file found last: objects of one file come in runs (a payload rebuilt by copies
    /// looks up the file of each object it copies).
    last_found: std::cell::Cell<u32>,
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
    fn find_file(&self, file: &str) -> Option<u32> {
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
    fn add_file(&mut self, file: &str) -> u32 {
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
    fn own_unit(
        &mut self,
        layout: &Layout<'_>,
        line: &[u8],
        line_at: usize,
    ) -> Option<(u32, usize)> {
        let ([unit], false) = (&layout.units[..], layout.has_extras) else {
            return None;
        };
        // Read back with offsets from a line sequence's start: 32-bit.
        let (first, last) = (layout.functions.first()?.f, layout.functions.last()?.f);
        if last.end() - first.start() > u64::from(u32::MAX) {
            return None;
        }
        let index = self.add_file(unit.file?);
        Some((index, line_at + after_header(line)?))
    }

    /// Where object `k`'s bytes are, if it is plain: what [`Growing::append_copy`] takes.
    pub(crate) fn plain(&self, k: usize) -> Option<Plain> {
        self.plain.get(k).copied().filter(|p| p.file != NOT_PLAIN)
    }

    /// The plain object whose bytes are at `p` in `buf`, read back (see [`Index::object`]).
    pub(crate) fn object_at(&self, buf: &[u8], p: Plain) -> Option<JitObject> {
        let mut b = ReadBuffers::default();
        self.read(buf, &p, &mut b)
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
        thread_local! {
            /// Reused: objects are read back many at a time (a batch rewritten, the objects
            /// after one that left appended again).
            static BUFFERS: std::cell::RefCell<ReadBuffers> = std::cell::RefCell::default();
        }
        BUFFERS.with(|b| match b.try_borrow_mut() {
            Ok(mut b) => self.object_with(buf, k, &mut b),
            Err(_) => self.object_with(buf, k, &mut ReadBuffers::default()),
        })
    }

    fn object_with(&self, buf: &[u8], k: usize, b: &mut ReadBuffers) -> Option<JitObject> {
        self.read(buf, self.plain.get(k)?, b)
    }

    fn read(&self, buf: &[u8], p: &Plain, b: &mut ReadBuffers) -> Option<JitObject> {
        let file = self.files.get(usize::from(p.file))?;
        // Function `i`: its name, start and size.
        let function = |i: usize| function_at(buf, p.sym as usize + i * SYMBOL);
        let mut object = JitObject::with_arch(Arch::X86_64);
        // The object's names at once: no growing (and copying) as they come.
        let mut text = file.len();
        for i in 0..usize::from(p.count) {
            text += function(i)?.0.len();
        }
        object.reserve(usize::from(p.count), text);
        // The line sequence and the FDE that the functions (in address order, as both) have
        // reached: the sequence's rows, with offsets from its start, and the FDE's rules.
        let (mut seq_at, mut seq_start, mut seq_end) = (p.seq as usize, 0, 0);
        let (mut fde_at, mut fde) = (p.fde as usize, None::<cfi::ReadFde>);
        let ReadBuffers {
            lines,
            rebased,
            rules,
            unwind,
            again,
        } = b;
        for i in 0..usize::from(p.count) {
            let (name, start, size) = function(i)?;
            let end = start.checked_add(size.into())?;
            let f = object.add_function(name, start, size.into()).ok()?;
            if seq_end <= start {
                // A new sequence starts at a function's start (each function has rows).
                lines.clear();
                let (s, e, len) = dwarf::read_line_sequence(buf.get(seq_at..)?, lines)?;
                if s != start {
                    return None;
                }
                (seq_start, seq_end, seq_at) = (s, e, seq_at + len);
            }
            let (from, to) = (start - seq_start, end.checked_sub(seq_start)?);
            let a = lines.partition_point(|r: &LineRow| u64::from(r.offset) < from);
            let b = lines.partition_point(|r: &LineRow| u64::from(r.offset) < to);
            let rows = match from {
                0 => &lines[a..b],
                _ => {
                    rebased.clear();
                    rebased.extend(lines[a..b].iter().map(|r| LineRow {
                        offset: r.offset - from as u32,
                        line: r.line,
                    }));
                    &rebased[..]
                }
            };
            object.set_lines(f, file, rows).ok()?;
            while !matches!(&fde, Some(d) if d.end >= end) {
                let d = cfi::read_fde(buf.get(fde_at..)?, rules)?;
                fde_at += d.len;
                fde = Some(d);
            }
            cfi::rows_of(fde.as_ref()?, rules, start, size, unwind)?;
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
        Some(object)
    }
}

/// Buffers for reading an object back.
#[derive(Default)]
struct ReadBuffers {
    /// The rows of the line sequence being read (offsets from its start), and those of one
    /// function of it when it has several.
    lines: Vec<LineRow>,
    rebased: Vec<LineRow>,
    /// The rules of the FDE being read, one function's rows, and those a description of its
    /// frame gives.
    rules: Vec<UnwindRow>,
    unwind: Vec<UnwindRow>,
    again: Vec<UnwindRow>,
}

/// The description of a frame whose rows are `rows` (those an FDE sets: see
/// `cfi::read_fde`): a default or frame-pointer frame if one gives exactly these rows (no
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

/// Where a rollback cut a payload: the bytes of each region before `used` were kept, and
/// so was all of every unit but those open then (`open`), which later objects joined.
#[derive(Debug, Clone, Copy)]
struct Cut {
    used: [usize; REGIONS],
    open: [Option<OpenUnit>; OPEN_UNITS],
}

/// What [`Growing::append_layout`] appends: an object laid out for encoding (a
/// [`Layout`]), or a one-function plain object copied from a payload ([`CopiedOne`]: it
/// joins its file's open unit with its bytes as they are, and needs no model).
trait Appended<'a> {
    /// The layout, if it is one (what encoding the object needs).
    fn layout(&self) -> Option<&Layout<'a>>;
    fn has_calls(&self) -> bool;
    fn has_extras(&self) -> bool;
    /// For one function in one unit: the unit's file, the function's start and size, and
    /// whether it has line rows.
    fn single(&self) -> Option<(Option<&str>, u64, u32, bool)>;
    /// Bytes of the object's own string table (a NUL, then the names).
    fn strings_len(&self) -> usize;
    /// Its functions.
    fn count(&self) -> usize;
    /// Function `i`, in address order: its name, start, size, and its name's offset in the
    /// object's own string table.
    fn function(&self, i: usize) -> (&[u8], u64, u32, u32);
    /// Its runs of adjacent code, in address order.
    fn runs(&self) -> &[layout::Run];
    /// Whether every function has line rows.
    fn all_rows(&self) -> bool;
    /// The index of the file of its one unit among the payload's (`Index::files`), if known.
    fn file_id(&self) -> Option<u32> {
        None
    }
}

impl<'a> Appended<'a> for Layout<'a> {
    fn layout(&self) -> Option<&Layout<'a>> {
        Some(self)
    }

    fn has_calls(&self) -> bool {
        self.has_calls
    }

    fn has_extras(&self) -> bool {
        self.has_extras
    }

    fn single(&self) -> Option<(Option<&str>, u64, u32, bool)> {
        match (&self.units[..], &self.functions[..]) {
            ([unit], [p]) => Some((unit.file, p.f.start(), p.f.size(), !p.f.lines().is_empty())),
            _ => None,
        }
    }

    fn strings_len(&self) -> usize {
        self.strings_len
    }

    fn count(&self) -> usize {
        self.functions.len()
    }

    fn function(&self, i: usize) -> (&[u8], u64, u32, u32) {
        let f = self.functions[i].f;
        (f.name_bytes(), f.start(), f.size(), self.name_offsets[i])
    }

    fn runs(&self) -> &[layout::Run] {
        &self.runs
    }

    fn all_rows(&self) -> bool {
        self.functions.iter().all(|p| !p.f.lines().is_empty())
    }
}

/// A one-function plain object copied from a payload: its name, the file of its unit (by
/// name, or by its index among the payload's files), and its code (its line sequence and
/// FDE are given to `append_layout` beside it).
struct CopiedOne<'a> {
    name: &'a [u8],
    file: Option<&'a str>,
    file_id: Option<u32>,
    start: u64,
    size: u32,
    run: [layout::Run; 1],
}

impl<'a> Appended<'a> for CopiedOne<'a> {
    fn layout(&self) -> Option<&Layout<'a>> {
        None
    }

    fn has_calls(&self) -> bool {
        false
    }

    fn has_extras(&self) -> bool {
        false
    }

    fn single(&self) -> Option<(Option<&str>, u64, u32, bool)> {
        Some((self.file, self.start, self.size, true))
    }

    fn strings_len(&self) -> usize {
        self.name.len() + 2
    }

    fn count(&self) -> usize {
        1
    }

    fn function(&self, _: usize) -> (&[u8], u64, u32, u32) {
        (self.name, self.start, self.size, 1)
    }

    fn runs(&self) -> &[layout::Run] {
        &self.run
    }

    fn all_rows(&self) -> bool {
        true
    }

    fn file_id(&self) -> Option<u32> {
        self.file_id
    }
}

/// What [`Growing::append_copy`] copies of a one-function plain object.
struct Copied<'a> {
    name: &'a [u8],
    start: u64,
    size: u32,
    sequence: &'a [u8],
    fde: &'a [u8],
}

/// The function of the symbol at `at` in payload `buf`: its name, start (its section's
/// address plus its section-relative value) and size. `None` if any of it is not there.
fn function_at(buf: &[u8], at: usize) -> Option<(&str, u64, u32)> {
    let (name, start, size) = function_bytes_at(buf, at)?;
    Some((std::str::from_utf8(name).ok()?, start, size))
}

/// [`function_at`] with the name's bytes, as they are (a copy needs no `str`).
fn function_bytes_at(buf: &[u8], at: usize) -> Option<(&[u8], u64, u32)> {
    let u64_at = |at: usize| Some(u64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?));
    let header = |index: usize| FILE_HEADER + index * SECTION_HEADER;
    let sym = buf.get(at..at + SYMBOL)?;
    let section = u16::from_le_bytes(sym[6..8].try_into().ok()?);
    let start = u64_at(header(section.into()) + 16)?.checked_add(u64_at(at + 8)?)?;
    let size = u32::try_from(u64_at(at + 16)?).ok()?;
    let names = usize::try_from(u64_at(header(STRTAB) + 24)?).ok()?;
    let name_at = u32::from_le_bytes(sym[..4].try_into().ok()?) as usize;
    let name = buf.get(names.checked_add(name_at)?..)?;
    Some((&name[..name.iter().position(|&b| b == 0)?], start, size))
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
        writer::file_header(file, FILE_HEADER, FIRST_TEXT as u16, STRTAB as u16);
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

    /// The payload `buf` (this state's) as it was before its object `k` (in append order)
    /// was appended, in a buffer of its own, and this state as it was then: the objects
    /// before `k` stay as they are, the caller appends those after it again, links the new
    /// payload in `buf`'s place and gives `buf` back ([`Growing::keep_mirror`]). Copying the
    /// used part of the payload costs much less than encoding its objects again, and the
    /// payload the debugger may read is never changed (a core file cut meanwhile shows
    /// every object). The buffer given back is the next rollback's: it holds the same
    /// bytes as the new payload up to where this rollback cut, so only the rest is copied
    /// (a tiering runtime unregisters recent objects: little). `None` (state unchanged): no
    /// object `k`. After `Some`, the state is the new payload's; should the caller give up
    /// before linking it, it must not append to `buf` again.
    pub(crate) fn roll_back(
        &mut self,
        buf: &[u8],
        k: usize,
        spare: Option<Vec<u8>>,
    ) -> Option<Vec<u8>> {
        let mark = *self.marks.get(k)?;
        if buf.len() != PAYLOAD {
            return None;
        }
        let (mut new, same) = match (self.mirror.take(), spare) {
            (Some((m, cut)), _) => (m, Some(cut)),
            (None, Some(b)) if b.len() == PAYLOAD => (b, None),
            _ => (vec![0u8; PAYLOAD], None),
        };
        let sections = usize::from(mark.sections);
        let headers = FILE_HEADER + sections * SECTION_HEADER;
        new[..headers].copy_from_slice(&buf[..headers]);
        let (abbrev_at, abbrev_len) = self.abbrev;
        new[abbrev_at..abbrev_at + abbrev_len]
            .copy_from_slice(&buf[abbrev_at..abbrev_at + abbrev_len]);
        let used = mark.used.map(|u| u as usize);
        let same_used = same.map_or([0; REGIONS], |c| c.used);
        for ((&start, &used), &same) in self.start.iter().zip(&used).zip(&same_used) {
            let from = start + same.min(used);
            new[from..start + used].copy_from_slice(&buf[from..start + used]);
        }
        // The units open when the mirror was cut: later objects may have joined them.
        for u in same.iter().flat_map(|c| c.open.iter().flatten()) {
            for (from, to) in [
                (u.end, u.limit),
                (u.ranges_next, u.ranges_limit),
                (u.line_at, u.line_at + 4),
                (u.line_end, u.line_limit),
            ] {
                new[from..to].copy_from_slice(&buf[from..to]);
            }
        }
        for &(section, end) in self.extended[mark.extended as usize..].iter().rev() {
            if let Some(r) = self.runs.iter_mut().find(|r| r.section == section) {
                r.end = end;
            }
        }
        self.runs.retain(|r| usize::from(r.section) < sections);
        // The units open before object `k`, as they were: later entries took some of their
        // rooms, later ranges some of their lists', later sequences lengthened their line
        // programs.
        let mut open = self.open;
        for m in self.marks[k..].iter().rev() {
            if let Some(slot) = open.get_mut(usize::from(m.slot)) {
                *slot = m.was;
            }
        }
        for u in open.iter().flatten() {
            new[u.end..u.limit].fill(0);
            new[u.ranges_next..u.ranges_limit].fill(0);
            put_u32(&mut new, u.line_at, u.line_end - u.line_at - 4);
        }
        // Not linked yet: sizes in any order.
        new[60..62].copy_from_slice(&mark.sections.to_le_bytes());
        set_size(&mut new, DEBUG_STR, used[STRINGS_R]);
        set_size(&mut new, STRTAB, used[STRINGS_R]);
        set_size(&mut new, SYMTAB, used[SYMBOLS_R]);
        set_size(&mut new, INFO, used[INFO_R]);
        set_size(&mut new, LINE, self.end[LINE_R] - self.start[LINE_R]);
        set_size(&mut new, RANGES, used[RANGES_R]);
        set_size(&mut new, FRAME, used[FRAME_R]);
        for r in &self.runs {
            set_size(&mut new, r.section.into(), (r.end - r.start) as usize);
        }
        self.used = used;
        self.sections = sections;
        self.functions = mark.functions as usize;
        self.marks.truncate(k);
        self.index.plain.truncate(k);
        self.extended.truncate(mark.extended as usize);
        self.open = open;
        // Later entries, ranges and sequences of the open units go into their rooms: the
        // new payload shares the bytes before `used` but those rooms (and their line
        // programs' lengths).
        self.cut = Some(Cut { used, open });
        Some(new)
    }

    /// Keeps `old`, the payload the last [`Growing::roll_back`] replaced, for the next one.
    pub(crate) fn keep_mirror(&mut self, old: Vec<u8>) {
        if let Some(cut) = self.cut.take() {
            self.mirror = Some((old, cut));
        }
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
        let out = match Layout::new(&[object], &mut scratch.layout) {
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

    /// Appends again the plain object whose bytes are at `p` in `from` (another payload of
    /// this state's, which a rollback replaced: see [`Growing::roll_back`]), as
    /// [`Growing::append`] appends it read back ([`Index::object`]): the same bytes. A
    /// one-function object that joins its file's open unit takes its line sequence and FDE
    /// as `from` has them, copied: half the instructions of reading it back and encoding it
    /// again (a tiering runtime's recent objects are appended again at every rollback;
    /// measured with `scale_host tier 20000 100 elf`: 6,400 -> 3,400 per object). `None` as `append` (no room); `from` not holding such an object there is
    /// refused the same way (a bug: the caller keeps the payload as it is).
    pub(crate) fn append_copy(
        &mut self,
        buf: &mut [u8],
        from: &[u8],
        p: Plain,
    ) -> Result<Option<usize>> {
        self.append_copy_of(buf, from, None, p)
    }

    /// [`Growing::append_copy`] from a payload of another state, whose index is `from_index`
    /// (`None`: this state's): a sealed payload rebuilt without the objects that left it.
    pub(crate) fn append_copy_of(
        &mut self,
        buf: &mut [u8],
        from: &[u8],
        from_index: Option<&Index>,
        p: Plain,
    ) -> Result<Option<usize>> {
        let copied = (p.count == 1).then(|| copied(from, &p)).flatten();
        // Its file: by name among another state's files, by index among this one's.
        let (file, file_id) = match from_index {
            Some(index) => (
                index.files.get(usize::from(p.file)).map(String::as_str),
                None,
            ),
            None => (
                None,
                (usize::from(p.file) < self.index.files.len()).then_some(u32::from(p.file)),
            ),
        };
        if let Some(Copied {
            name,
            start,
            size,
            sequence,
            fde,
        }) = copied.filter(|_| file.is_some() || file_id.is_some())
        {
            if buf.len() != PAYLOAD {
                return Ok(None);
            }
            // (`copied` checked that the end is below 2^64.)
            let end = start.saturating_add(size.into());
            let one = CopiedOne {
                name,
                file,
                file_id,
                start,
                size,
                run: [layout::Run { start, end }],
            };
            let mut scratch = Scratch::take();
            let out = self.append_layout(buf, &one, &mut scratch, Some((sequence, fde)));
            scratch.keep();
            if let Ok(Some(bytes)) = out {
                return Ok(Some(bytes));
            }
            // No open unit to join (the payload is unchanged): the general way.
        }
        let index = from_index.unwrap_or(&self.index);
        let Some(object) = index.read(from, &p, &mut ReadBuffers::default()) else {
            return Ok(None);
        };
        self.append(buf, &object)
    }
}

/// The name, start, size, line sequence and FDE of the one-function plain object at `p` in
/// `from`, checked against each other.
fn copied<'a>(from: &'a [u8], p: &Plain) -> Option<Copied<'a>> {
    let u32_at = |at: usize| Some(u32::from_le_bytes(from.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(from.get(at..at + 8)?.try_into().ok()?));
    let (name, start, size) = function_bytes_at(from, p.sym as usize)?;
    // The FDE: its CIE (the one, at 0), start and size.
    let fde = p.fde as usize;
    let len = u32_at(fde)? as usize;
    let fde = from.get(fde..fde.checked_add(4 + len)?)?;
    if (
        u32_at(p.fde as usize + 4)?,
        u64_at(p.fde as usize + 8)?,
        u64_at(p.fde as usize + 16)?,
    ) != (0, start, u64::from(size))
    {
        return None;
    }
    let sequence = from.get(p.seq as usize..)?;
    let (s, e, len) = dwarf::line_sequence_extent(sequence)?;
    if (s, e) != (start, start.checked_add(size.into())?) {
        return None;
    }
    Some(Copied {
        name,
        start,
        size,
        sequence: &sequence[..len],
        fde,
    })
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
        let plain = match (&plan, open) {
            _ if !rows => None,
            (UnitPlan::Extend { slot, .. }, Some(u)) => {
                self.open[*slot].map(|old| (u.file, old.line_end))
            }
            (UnitPlan::Open { .. }, Some(u)) => after_header(line).map(|h| (u.file, line_at + h)),
            (UnitPlan::Own, _) => src
                .layout()
                .and_then(|layout| self.index.own_unit(layout, line, line_at)),
            _ => None,
        };
        // Offsets in the payload: below `PAYLOAD`; small objects: fewer than 2^16 functions.
        let count = src.count() as u16;
        self.index.plain.push(match plain {
            Some((file, seq)) if file < u32::from(NOT_PLAIN) => Plain {
                sym: (self.start[SYMBOLS_R] + self.used[SYMBOLS_R]) as u32,
                fde: (self.start[FRAME_R] + self.used[FRAME_R]) as u32,
                seq: seq as u32,
                file: file as u16,
                count,
            },
            _ => Plain {
                sym: 0,
                fde: 0,
                seq: 0,
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

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use gimli::UnwindSection;
    use object::{Object, ObjectSection, ObjectSymbol};

    use super::{Growing, PAYLOAD};
    use crate::elf::test_support::{by_address, random_objects, sequences, Parsed};
    use crate::model::{Frame, JitObject, LineRow};

    thread_local! {
        /// Appends take the general path only (see `general_only`).
        pub(super) static GENERAL_ONLY: Cell<bool> = const { Cell::new(false) };
        /// When `Some`, the payload at every `publish` point.
        pub(super) static SNAPSHOTS: RefCell<Option<Vec<Vec<u8>>>> = const { RefCell::new(None) };
    }

    /// Every function symbol: name, absolute address, size.
    fn symbols(bytes: &[u8]) -> Vec<(String, u64, u64)> {
        let file = object::File::parse(bytes).expect("a valid ELF file");
        let mut out = Vec::new();
        for s in file.symbols() {
            let index = s.section_index().expect("a defined symbol");
            let section = file.section_by_index(index).expect("its section");
            let (start, end) = (section.address(), section.address() + section.size());
            let address = start + s.address();
            assert!(
                address >= start && address + s.size() <= end,
                "{:?} outside its section",
                s.name()
            );
            out.push((s.name().expect("a name").to_string(), address, s.size()));
        }
        out
    }

    /// Every section: name, address, size and contents.
    fn sections(bytes: &[u8]) -> Vec<(String, u64, u64, Vec<u8>)> {
        let file = object::File::parse(bytes).expect("a valid ELF file");
        let mut out = Vec::new();
        for s in file.sections() {
            let name = s.name().expect("a name").to_string();
            let data = match name.as_str() {
                ".debug_line" => Vec::new(),
                _ => s.data().expect("section data").to_vec(),
            };
            out.push((name, s.address(), s.size(), data));
        }
        out
    }

    fn frame(p: &Parsed) -> Vec<u8> {
        p.section(".debug_frame").to_vec()
    }

    /// A one-function object joining its file's open unit is appended from its line
    /// sequence alone (not the unit encoding it alone makes): byte for byte what the
    /// general path appends.
    #[test]
    fn joining_an_open_unit_writes_what_the_general_path_writes() {
        let mut joined = 0;
        for seed in 0..200u64 {
            let (mut fast, mut fast_state) = Growing::new(None).unwrap();
            let (mut general, mut general_state) = Growing::new(None).unwrap();
            let objects: Vec<JitObject> = (random_objects(seed).into_iter())
                .chain((0..40).map(|i| small(i, 0x7000_0000 + seed * 0x10_0000 + i * 64)))
                .collect();
            for object in &objects {
                let open = fast_state.open;
                let got = fast_state.append(&mut fast, object);
                GENERAL_ONLY.with(|g| g.set(true));
                let want = general_state.append(&mut general, object);
                GENERAL_ONLY.with(|g| g.set(false));
                assert_eq!(got, want, "seed {seed}");
                assert!(fast == general, "seed {seed}: the payloads differ");
                joined += usize::from(
                    got.is_ok_and(|b| b.is_some())
                        && open.iter().any(Option::is_some)
                        && object.functions().len() == 1,
                );
            }
        }
        assert!(joined > 5000, "{joined} objects joined an open unit");
    }

    /// Objects appended one by one read, with real parsers, as each of them encoded alone:
    /// the same symbols, units, line rows, subprograms and FDEs, in order. Objects the
    /// payload refuses (call sites, code overlapping its code, no room) leave it unchanged.
    #[test]
    fn appended_objects_read_as_each_encoded_alone() {
        let mut appended_total = 0;
        let mut refused_total = 0;
        for seed in 0..400u64 {
            // Half of them in a reused payload full of other bytes.
            let spare = (seed % 2 == 1).then(|| vec![0xa5u8; PAYLOAD]);
            let (mut buf, mut growing) = Growing::new(spare).unwrap();
            let (mut syms, mut lines, mut subs) = (Vec::new(), Vec::new(), Vec::new());
            let mut frames = frame(&Parsed { bytes: buf.clone() });
            assert_eq!(
                frames.len(),
                crate::elf::cfi::CIE_LEN,
                "seed {seed}: the CIE alone"
            );
            for object in random_objects(seed) {
                let before = buf.clone();
                let Ok(alone) = crate::elf::encode(&object) else {
                    // Refused alone: refused appended, with the same error.
                    assert_eq!(
                        growing.append(&mut buf, &object),
                        crate::elf::encode(&object).map(|_| None)
                    );
                    assert_eq!(buf, before);
                    continue;
                };
                match growing.append(&mut buf, &object).unwrap() {
                    None => {
                        refused_total += 1;
                        assert_eq!(
                            buf, before,
                            "seed {seed}: a refused append changed the payload"
                        );
                        continue;
                    }
                    Some(bytes) => assert!(bytes > 0),
                }
                appended_total += 1;
                let alone = Parsed { bytes: alone };
                syms.extend(symbols(&alone.bytes));
                lines.extend(alone.lines());
                subs.extend(alone.subprograms());
                frames.extend_from_slice(&frame(&alone)[crate::elf::cfi::CIE_LEN..]);
                let ours = Parsed { bytes: buf.clone() };
                assert_eq!(symbols(&ours.bytes), syms, "seed {seed}");
                // Functions join their file's open unit, not always the last one.
                assert_eq!(sequences(&ours.lines()), sequences(&lines), "seed {seed}");
                assert_eq!(
                    by_address(&ours.subprograms()),
                    by_address(&subs),
                    "seed {seed}"
                );
                assert_eq!(frame(&ours), frames, "seed {seed}");
            }
        }
        assert!(
            appended_total > 300 && refused_total > 10,
            "{appended_total} appended, {refused_total} refused"
        );
    }

    /// Rolling a payload back to before object `k` and appending the objects after it
    /// again makes, byte for byte, the payload of every object but `k` appended in order;
    /// runs that later objects extended shrink back, runs they made go.
    #[test]
    fn rolling_back_is_appending_all_but_one() {
        let mut checked = 0;
        for seed in 0..300u64 {
            let mut objects: Vec<JitObject> = random_objects(seed);
            if seed % 3 == 0 {
                // Adjacent one-function objects: every run extended.
                objects = (0..20).map(|i| small(i, 0x20_0000 + i * 64)).collect();
            }
            let (buf, growing, appended) = grown(&objects);
            if appended.is_empty() {
                continue;
            }
            let k = (seed as usize * 7) % appended.len();
            let spare = (seed % 2 == 0).then(|| vec![0u8; PAYLOAD]);
            // Twice: the second rollback reuses the first's buffer (the mirror).
            let mut state = growing;
            let mut rolled = state.roll_back(&buf, appended.len() - 1, spare).unwrap();
            state.keep_mirror(buf);
            state
                .append(&mut rolled, appended[appended.len() - 1])
                .unwrap()
                .unwrap();
            let buf = rolled;
            let mut rolled = state.roll_back(&buf, k, None).unwrap();
            state.keep_mirror(buf);
            for o in &appended[k + 1..] {
                state.append(&mut rolled, o).unwrap().unwrap();
            }
            let (mut direct, mut direct_state) = Growing::new(None).unwrap();
            for (i, o) in appended.iter().enumerate() {
                if i != k {
                    direct_state.append(&mut direct, o).unwrap().unwrap();
                }
            }
            // (Bytes beyond what the sections hold may differ: a reused buffer keeps them;
            // `.debug_line` covers its whole region, read through the units.)
            let what = format!("seed {seed}, object {k} of {}", appended.len());
            assert!(
                sections(&rolled) == sections(&direct),
                "{what}: sections differ"
            );
            let (ours, theirs) = (Parsed { bytes: rolled }, Parsed { bytes: direct });
            assert!(ours.lines() == theirs.lines(), "{what}: lines differ");
            assert_eq!(state.objects(), appended.len() - 1);
            assert_eq!(state.functions(), direct_state.functions());
            checked += 1;
        }
        assert!(checked > 150, "{checked}");
    }

    /// Every compile unit claims exactly the code of its functions (`DW_AT_ranges` of an
    /// open unit grow as functions join it): a debugger must not find, in one unit, the
    /// addresses of code between its functions that other entries hold. Objects of the
    /// benchmark shape, adjacent, apart and out of address order, of two files in turns and
    /// then of one, with a rollback in between.
    #[test]
    fn units_claim_exactly_the_code_of_their_functions() {
        let object = |i: u64, file: &str| {
            // Scattered: every third slot of a region, in an order of their own.
            let slot = (i * 37) % 400;
            small_in(i, 0x50_0000 + slot * 192, file)
        };
        let (mut buf, mut state) = Growing::new(None).unwrap();
        let mut n = 0;
        for i in 0..300u64 {
            let file = if i < 150 && i % 3 == 0 {
                "b.js"
            } else {
                "a.js"
            };
            if matches!(state.append(&mut buf, &object(i, file)), Ok(Some(_))) {
                n += 1;
            }
        }
        assert!(n > 50, "{n} objects appended");
        let k = n - 5;
        let mut rolled = state.roll_back(&buf, k, None).unwrap();
        state.keep_mirror(buf);
        state.append(&mut rolled, &object(1000, "a.js")).unwrap();
        let parsed = Parsed { bytes: rolled };
        let dwarf = parsed.dwarf();
        let mut units = dwarf.units();
        let mut checked = 0;
        while let Some(header) = units.next().unwrap() {
            let unit = dwarf.unit(header).unwrap();
            let mut claimed: Vec<(u64, u64)> = Vec::new();
            let mut ranges = dwarf.unit_ranges(&unit).unwrap();
            while let Some(r) = ranges.next().unwrap() {
                claimed.push((r.begin, r.end));
            }
            let mut functions: Vec<(u64, u64)> = Vec::new();
            let mut entries = unit.entries();
            while let Some(e) = entries.next_dfs().unwrap() {
                if e.tag() == gimli::DW_TAG_subprogram {
                    let mut ranges = dwarf.die_ranges(&unit, e).unwrap();
                    while let Some(r) = ranges.next().unwrap() {
                        functions.push((r.begin, r.end));
                    }
                }
            }
            claimed.sort_unstable();
            functions.sort_unstable();
            // Neighbours may share one range; what is claimed is what the functions cover.
            let merge = |v: Vec<(u64, u64)>| {
                let mut out: Vec<(u64, u64)> = Vec::new();
                for (b, e) in v {
                    match out.last_mut() {
                        Some(last) if last.1 >= b => last.1 = last.1.max(e),
                        _ => out.push((b, e)),
                    }
                }
                out
            };
            assert_eq!(
                merge(claimed),
                merge(functions),
                "unit at {:?}",
                unit.header.offset()
            );
            checked += 1;
        }
        assert!(checked > 3, "{checked} units");
    }

    /// Rollbacks one after another, each reusing the payload the one before replaced (the
    /// mirror), between appends of objects of 2 to 11 source files in turns (so a unit open
    /// at one rollback may be closed at the next, or closed to make room for another file's):
    /// the payload is, section by section and line
    /// by line, the payload of the objects left appended in order. (A mirror once kept the
    /// line program length of the unit open at its rollback from before it, which the next
    /// rollback did not copy again: a unit claiming sequences that another unit's header
    /// had replaced.)
    #[test]
    fn rollbacks_in_a_row_keep_every_unit_whole() {
        for seed in 0..200u64 {
            let mut r = crate::elf::test_support::Rng::new(seed);
            let run = 1 + r.below(4);
            // Two files or a few in turns; more than there are open units (some get units
            // of their own); or 2 at a time of 40, the two changing every 8 objects (units
            // left idle are closed for other files').
            let (files, drift) =
                [(2, false), (3, false), (6, false), (19, false), (40, true)][seed as usize % 5];
            let names: Vec<String> = (0..files).map(|f| format!("f{f}.js")).collect();
            let object = |i: u64| {
                let f = match drift {
                    false => (i / run) % files,
                    true => ((i / run) % 2 + i / 8) % files,
                };
                small_in(i, 0x40_0000 + i * 64, &names[f as usize])
            };
            let (mut buf, mut state) = Growing::new(None).unwrap();
            let mut live: Vec<u64> = Vec::new();
            let mut next = 0;
            'rounds: for _round in 0..if drift { 80 } else { 40 } {
                for _ in 0..1 + r.below(6) {
                    if !matches!(state.append(&mut buf, &object(next)), Ok(Some(_))) {
                        break 'rounds;
                    }
                    live.push(next);
                    next += 1;
                }
                let k = live.len() - 1 - r.below(live.len().min(4) as u64) as usize;
                let mut rolled = state.roll_back(&buf, k, None).unwrap();
                state.keep_mirror(buf);
                live.remove(k);
                for &i in &live[k..] {
                    state.append(&mut rolled, &object(i)).unwrap().unwrap();
                }
                buf = rolled;
            }
            let (mut direct, mut direct_state) = Growing::new(None).unwrap();
            for &i in &live {
                direct_state
                    .append(&mut direct, &object(i))
                    .unwrap()
                    .unwrap();
            }
            let what = format!("seed {seed}: {live:?}");
            assert!(
                sections(&buf) == sections(&direct),
                "{what}: sections differ"
            );
            let (ours, theirs) = (Parsed { bytes: buf }, Parsed { bytes: direct });
            assert!(ours.lines() == theirs.lines(), "{what}: lines differ");
        }
    }

    /// Objects for the copy tests: random ones of every kind, `small` one-function objects
    /// of 9 files in turns (in runs that depend on the seed), and `multi` objects of
    /// several functions.
    fn copy_mix(seed: u64, small: u64, multi: u64) -> Vec<JitObject> {
        let files = [
            "a.js", "b.js", "c.js", "d.js", "e.js", "f.js", "g.js", "h.js", "i.js",
        ];
        (random_objects(seed).into_iter())
            .chain((0..small).map(|i| {
                let file = files[((seed + i * (seed % 4)) % files.len() as u64) as usize];
                small_in(i, 0x6000_0000 + seed * 0x10_0000 + i * 80, file)
            }))
            .chain(
                (0..multi)
                    .map(|i| several(seed * 12 + i, 0x6800_0000 + seed * 0x10_0000 + i * 0x4000)),
            )
            .collect()
    }

    /// A new payload with `objects` appended in order, its state, and the objects it took
    /// (it refuses some: call sites, overlapping code, no room).
    fn grown(objects: &[JitObject]) -> (Vec<u8>, Growing, Vec<&JitObject>) {
        let (mut buf, mut growing) = Growing::new(None).unwrap();
        let mut appended = Vec::new();
        for o in objects {
            if let Ok(Some(_)) = growing.append(&mut buf, o) {
                appended.push(o);
            }
        }
        (buf, growing, appended)
    }

    /// Plain objects appended again by copying their bytes from the payload
    /// ([`Growing::append_copy`], what a rollback does) make, byte for byte, the payload
    /// appending their models makes; from a cut or foreign payload nothing is appended, and
    /// nothing panics.
    #[test]
    fn plain_objects_copied_append_the_same_bytes() {
        let mut copied = 0;
        for seed in 0..300u64 {
            let objects = copy_mix(seed, 40, 6);
            let (buf, growing, appended) = grown(&objects);
            // Everything rolled back, then appended again (as `State::regrow` does).
            let plains: Vec<_> = (0..appended.len())
                .map(|k| growing.index().plain(k))
                .collect();
            let mut again_state = growing;
            let mut again = again_state.roll_back(&buf, 0, None).unwrap();
            for (k, &o) in appended.iter().enumerate() {
                let got = match plains[k] {
                    Some(p) => {
                        copied += usize::from(o.functions().len() == 1);
                        // A cut payload, or another one, gives nothing to copy.
                        let before = again.clone();
                        for cut in [0, 64, buf.len() / 3] {
                            let r = again_state.append_copy(&mut again, &buf[..cut], p);
                            assert!(
                                matches!(r, Ok(None)),
                                "seed {seed}: object {k} from a cut payload"
                            );
                        }
                        let other = Growing::new(None).unwrap().0;
                        assert!(matches!(
                            again_state.append_copy(&mut again, &other, p),
                            Ok(None)
                        ));
                        assert!(
                            again == before,
                            "seed {seed}: a refused copy changed the payload"
                        );
                        again_state.append_copy(&mut again, &buf, p)
                    }
                    None => again_state.append(&mut again, o),
                };
                assert!(
                    matches!(got, Ok(Some(_))),
                    "seed {seed}: object {k}: {got:?}"
                );
            }
            assert!(again == buf, "seed {seed}: the payloads differ");
        }
        assert!(copied > 5000, "{copied} one-function objects copied");
    }

    /// A payload rebuilt without some of its objects by copying the others' bytes into a
    /// new payload (`append_copy_of` from another state's payload and index, what
    /// `State::recopy` does) is, byte for byte, the payload that appending the same objects
    /// to a new payload makes.
    #[test]
    fn payloads_rebuilt_by_copies_are_the_payloads_appending_makes() {
        let mut copied = 0;
        for seed in 0..200u64 {
            let mut r = crate::elf::test_support::Rng::new(seed);
            let objects = copy_mix(seed, 60, 4);
            let (buf, growing, appended) = grown(&objects);
            let index = growing.index();
            let keep: Vec<usize> = (0..appended.len()).filter(|_| r.below(5) != 0).collect();
            let (mut rebuilt, mut rebuilt_state) = Growing::new(None).unwrap();
            let (mut direct, mut direct_state) = Growing::new(None).unwrap();
            for &k in &keep {
                let o = appended[k];
                let got = match index.plain(k) {
                    Some(p) => {
                        copied += usize::from(o.functions().len() == 1);
                        rebuilt_state.append_copy_of(&mut rebuilt, &buf, Some(index), p)
                    }
                    None => rebuilt_state.append(&mut rebuilt, o),
                };
                assert!(
                    matches!(got, Ok(Some(_))),
                    "seed {seed}: object {k}: {got:?}"
                );
                let want = direct_state.append(&mut direct, o);
                assert!(
                    matches!(want, Ok(Some(_))),
                    "seed {seed}: object {k}: {want:?}"
                );
                assert_eq!(
                    rebuilt_state.index().is_plain(rebuilt_state.objects() - 1),
                    direct_state.index().is_plain(direct_state.objects() - 1),
                    "seed {seed}: object {k}"
                );
            }
            assert!(rebuilt == direct, "seed {seed}: the payloads differ");
        }
        assert!(copied > 5000, "{copied} one-function objects copied");
    }

    /// Plain objects read back from the payload are what was appended: the same name,
    /// range, file and lines, and appending them instead of the originals writes the same
    /// payload byte for byte, as re-encoding them in one ELF object (a rewrite) writes
    /// the same object. Cut payloads read back as nothing, without a panic.
    #[test]
    fn plain_objects_read_back_append_the_same_bytes() {
        let (mut plain, mut described, mut of_several) = (0, 0, 0);
        for seed in 0..300u64 {
            let objects: Vec<JitObject> =
                (random_objects(seed).into_iter())
                    .chain((0..30).map(|i| small(i, 0x6000_0000 + seed * 0x10_0000 + i * 80)))
                    .chain((0..12).map(|i| {
                        several(seed * 12 + i, 0x6800_0000 + seed * 0x10_0000 + i * 0x4000)
                    }))
                    .collect();
            let (buf, growing, appended) = grown(&objects);
            let index = growing.index();
            let (mut again, mut again_state) = Growing::new(None).unwrap();
            let mut models = Vec::new();
            for (k, &o) in appended.iter().enumerate() {
                let f = o.functions().first().unwrap();
                let lines = o.functions().iter().all(|g| {
                    !g.lines().is_empty()
                        && g.blocks().is_empty()
                        && g.variables().is_empty()
                        && g.calls().is_empty()
                        && g.file() == f.file()
                });
                assert!(
                    index.is_plain(k) || !lines,
                    "seed {seed}: object {k} is not plain"
                );
                let model = if index.is_plain(k) {
                    plain += 1;
                    let back = index.object(&buf, k).expect("read back");
                    let what = format!("seed {seed}, object {k}");
                    assert_eq!(back.functions().len(), o.functions().len(), "{what}");
                    // (Read back in address order.)
                    let mut theirs: Vec<_> = o.functions().iter().collect();
                    theirs.sort_by_key(|f| f.start());
                    for (g, f) in back.functions().iter().zip(theirs) {
                        assert_eq!(
                            (g.name(), g.start(), g.size(), g.file()),
                            (f.name(), f.start(), f.size(), f.file()),
                            "{what}"
                        );
                        assert_eq!(g.lines(), f.lines(), "{what}");
                        // Frame-pointer and default frames come back as such (rows as the
                        // rows that change something, or as what gives exactly those).
                        if !matches!(f.frame(), Frame::Rows(_)) {
                            assert_eq!(g.frame(), f.frame(), "{what}");
                            described += 1;
                        }
                        of_several += usize::from(o.functions().len() > 1);
                    }
                    for cut in [0, 64, buf.len() / 3, buf.len() / 2] {
                        let _ = index.object(&buf[..cut], k);
                    }
                    models.push(back);
                    models.last().unwrap()
                } else {
                    assert!(index.object(&buf, k).is_none());
                    o
                };
                again_state.append(&mut again, model).unwrap().unwrap();
            }
            assert!(again == buf, "seed {seed}: the payloads differ");
            let mut models = models.iter();
            let back: Vec<&JitObject> = (appended.iter().enumerate())
                .map(|(k, &o)| match index.is_plain(k) {
                    true => models.next().unwrap(),
                    false => o,
                })
                .collect();
            if let Ok(whole) = crate::elf::encode_objects(crate::model::Arch::X86_64, &appended) {
                let again = crate::elf::encode_objects(crate::model::Arch::X86_64, &back);
                assert!(
                    again.as_ref() == Ok(&whole),
                    "seed {seed}: re-encoded, the objects differ"
                );
            }
        }
        assert!(plain > 9000, "{plain} plain objects");
        assert!(described > 9000, "{described} frame descriptions read back");
        assert!(
            of_several > 1000,
            "{of_several} functions of objects of several read back"
        );
    }

    /// An object of 2 to 13 functions from `address` on, in one file, all with line rows,
    /// of every frame kind, in an order that is not theirs by address: neighbours (some
    /// sharing FDEs and line sequences), others apart.
    fn several(seed: u64, address: u64) -> JitObject {
        use crate::elf::test_support::Rng;
        use crate::model::{CfaBase, UnwindRow};
        let mut rng = Rng::new(seed);
        let mut next = |n: u64| rng.below(n);
        let count = 2 + next(12);
        let mut o = JitObject::new();
        let mut at = address;
        let mut placed = Vec::new();
        for i in 0..count {
            let size = 16 + next(200) as u32;
            placed.push((i, at, size));
            // Adjacent, padded, or far apart.
            at += u64::from(size) + [0, 0, 3, 16, 200][next(5) as usize];
        }
        // Registered in another order than by address.
        placed.sort_by_key(|&(i, _, _)| (i * 7) % count);
        for (i, start, size) in placed {
            let f = o
                .add_function(&format!("several_{seed}_{i}"), start, size.into())
                .unwrap();
            let mut rows = Vec::new();
            let mut offset = next(3) as u32;
            let mut line = 1 + next(400) as u32;
            while offset < size {
                rows.push(LineRow { offset, line });
                offset += 1 + next(9) as u32;
                line = (line as i64 + next(30) as i64 - 10).max(1) as u32;
            }
            o.set_lines(f, "dir/several.js", &rows).unwrap();
            match next(4) {
                0 => {}
                1 => o.set_frame_pointer(f, 1, 4).unwrap(),
                2 => {
                    o.set_frame_pointer(f, 1, 4).unwrap();
                    o.add_epilogue(f, size - 6, size - 5).unwrap();
                    if next(2) == 0 {
                        o.add_epilogue(f, size - 2, size).unwrap();
                    }
                }
                _ => {
                    let row = |offset, cfa_offset, fp_offset| UnwindRow {
                        offset,
                        cfa_base: CfaBase::Sp,
                        cfa_offset,
                        fp_offset,
                    };
                    o.set_unwind(f, &[row(0, 8, 0), row(1, 16, -16), row(size - 1, 8, 0)])
                        .unwrap();
                }
            }
        }
        o
    }

    /// A function of the benchmark shape at `address`, named after `i`.
    fn small(i: u64, address: u64) -> JitObject {
        small_in(i, address, "benchmark.js")
    }

    /// [`small`], its lines in `file`.
    fn small_in(i: u64, address: u64, file: &str) -> JitObject {
        let mut o = JitObject::new();
        let f = o
            .add_function(&format!("jit_function_{i:06}_"), address, 64)
            .unwrap();
        let rows: Vec<LineRow> = (0..8)
            .map(|r| LineRow {
                offset: r as u32 * 7,
                line: 10 + r as u32,
            })
            .collect();
        o.set_lines(f, file, &rows).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o
    }

    /// Every state a debugger could see between two stores of an append reads as a valid
    /// object holding the functions appended before, and perhaps the new one: sections,
    /// symbols inside their sections, units, line programs and FDEs all parse.
    #[test]
    fn every_state_between_two_stores_is_consistent() {
        let (mut buf, mut growing) = Growing::new(None).unwrap();
        SNAPSHOTS.with(|s| *s.borrow_mut() = Some(Vec::new()));
        for i in 0..40u64 {
            // Adjacent code (a section grows), then code elsewhere (a new section).
            let address = 0x10_0000 + i * 64 + if i % 8 == 7 { 0x1_0000 * i } else { 0 };
            growing
                .append(&mut buf, &small(i, address))
                .unwrap()
                .unwrap();
        }
        let snapshots = SNAPSHOTS.with(|s| s.borrow_mut().take()).unwrap();
        assert!(snapshots.len() >= 40 * 5, "{}", snapshots.len());
        let mut last = 0;
        for (k, bytes) in snapshots.iter().enumerate() {
            let syms = symbols(bytes);
            // Symbols come last: each state has those of the appends before, or all.
            assert!(syms.len() == last || syms.len() == last + 1, "state {k}");
            last = syms.len();
            let p = Parsed {
                bytes: bytes.clone(),
            };
            let units = p.subprograms().len();
            assert!(units >= syms.len(), "state {k}: a symbol before its unit");
            let _ = p.lines();
            let frame = gimli::DebugFrame::new(p.section(".debug_frame"), gimli::LittleEndian);
            let bases = gimli::BaseAddresses::default();
            let mut entries = frame.entries(&bases);
            let mut fdes = 0;
            while let Some(e) = entries.next().unwrap() {
                if let gimli::CieOrFde::Fde(partial) = e {
                    partial.parse(gimli::DebugFrame::cie_from_offset).unwrap();
                    fdes += 1;
                }
            }
            assert!(fdes >= syms.len(), "state {k}: a symbol before its FDE");
        }
        assert_eq!(last, 40);
    }

    /// A payload takes objects until a region is full, then refuses them, unchanged; code
    /// overlapping its code is refused too.
    #[test]
    fn full_payloads_and_overlaps_are_refused() {
        let (mut buf, mut growing) = Growing::new(None).unwrap();
        let mut n = 0;
        while growing
            .append(&mut buf, &small(n, 0x40_0000 + n * 64))
            .unwrap()
            .is_some()
        {
            n += 1;
        }
        assert!(
            n >= 900,
            "{n} functions of the benchmark shape in {PAYLOAD} bytes"
        );
        assert_eq!(growing.functions(), n as usize);
        assert_eq!(symbols(&buf).len(), n as usize);

        let (mut buf, mut growing) = Growing::new(None).unwrap();
        growing
            .append(&mut buf, &small(0, 0x1000))
            .unwrap()
            .unwrap();
        let before = buf.clone();
        for at in [0x1000 - 63, 0x1000, 0x1000 + 63] {
            assert_eq!(growing.append(&mut buf, &small(1, at)).unwrap(), None);
        }
        assert_eq!(buf, before);
        // Right after it, and right before it (a section of its own), fit.
        growing
            .append(&mut buf, &small(2, 0x1040))
            .unwrap()
            .unwrap();
        growing
            .append(&mut buf, &small(3, 0x1000 - 64))
            .unwrap()
            .unwrap();
        assert_eq!(symbols(&buf).len(), 3);
    }
}
