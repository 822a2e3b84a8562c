//! Reading objects back from a growing payload, found through a few bytes kept per object.

use super::super::cfi;
use super::super::dwarf;
use super::super::layout::Layout;
use super::super::writer::{FILE_HEADER, SECTION_HEADER, SYMBOL};
use super::{after_header, STRTAB};
use crate::model::{Arch, CfaBase, Epilogue, Frame, JitObject, LineRow, UnwindRow};

/// Where a *plain* object's bytes are in the payload: an object whose functions all have
/// line rows in one source file, and no blocks. Such an object can be read back from the
/// payload ([`Index::object`]), so the registry keeps nothing else to append it again or
/// re-encode it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plain {
    /// Its first symbol, its first FDE, its first line sequence: offsets in the payload.
    pub(super) sym: u32,
    pub(super) fde: u32,
    pub(super) seq: u32,
    /// Index in `Index::files`; `NOT_PLAIN` for other objects.
    pub(super) file: u16,
    /// Its functions.
    pub(super) count: u16,
}

pub(super) const NOT_PLAIN: u16 = u16::MAX;

/// What reading objects back from a payload needs, kept when it stops growing (see
/// [`Growing::seal`]): 16 bytes per object, where its compact record (kept until plain
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

    pub(super) fn read(&self, buf: &[u8], p: &Plain, b: &mut ReadBuffers) -> Option<JitObject> {
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
pub(super) struct ReadBuffers {
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

/// The function of the symbol at `at` in payload `buf`: its name, start (its section's
/// address plus its section-relative value) and size. `None` if any of it is not there.
fn function_at(buf: &[u8], at: usize) -> Option<(&str, u64, u32)> {
    let (name, start, size) = function_bytes_at(buf, at)?;
    Some((std::str::from_utf8(name).ok()?, start, size))
}

/// [`function_at`] with the name's bytes, as they are (a copy needs no `str`).
pub(super) fn function_bytes_at(buf: &[u8], at: usize) -> Option<(&[u8], u64, u32)> {
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
