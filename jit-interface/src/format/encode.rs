//! Serialises [`JitObject`]s as compact records (layout: `docs/FORMAT.md`).
//!
//! A payload is the header and object records back to back. Each record carries its own
//! string table (file and block names), so records are self-contained byte strings: the
//! registry appends them to a payload in place and copies them between payloads without
//! re-encoding.

use std::collections::HashMap;

use super::frame::{self, KIND_DEFAULT, KIND_FP, KIND_FP_CANONICAL, KIND_ROWS};
use super::lines;
use super::wire::{Cursor, Writer, MAX_LEB_LEN};
use super::{arch_code, LiveCheck, HEADER_LEN, MAGIC, MAX_COUNT, MAX_TEXT_LEN, VERSION};
use crate::error::{Error, Result};
use crate::model::{Arch, CfaBase, Frame, Function, JitObject};

/// Object flag: a live check follows.
pub(crate) const OBJECT_LIVE: u8 = 0x01;
/// Object flag: a source table follows the string table.
pub(crate) const OBJECT_SOURCES: u8 = 0x02;
/// Function flags: bits 0-1 frame kind, then these.
pub(crate) const FUNCTION_KIND_MASK: u8 = 0x03;
pub(crate) const FUNCTION_LINES: u8 = 0x04;
pub(crate) const FUNCTION_BLOCKS: u8 = 0x08;
/// Function flag: register rules follow the blocks (a flag that only adds optional fields:
/// payloads without rules keep their bytes).
pub(crate) const FUNCTION_REGISTERS: u8 = 0x10;

const FORMAT: crate::error::PayloadFormat = crate::error::PayloadFormat::Compact;

fn unsupported(why: String) -> Error {
    Error::Unsupported {
        format: FORMAT,
        why,
    }
}

fn check_count(n: usize, what: impl FnOnce() -> String) -> Result<()> {
    if n as u64 > MAX_COUNT {
        return Err(Error::TooLarge(format!(
            "{} {n} is above the compact format's limit of {MAX_COUNT}",
            what()
        )));
    }
    Ok(())
}

fn check_text_len(s: &str, what: impl FnOnce() -> String) -> Result<()> {
    if s.len() as u64 > MAX_TEXT_LEN {
        return Err(Error::TooLarge(format!(
            "{} is {} bytes long, above the compact format's limit of {MAX_TEXT_LEN}",
            what(),
            s.len()
        )));
    }
    Ok(())
}

/// Strings kept in a fixed array and found by scanning; beyond, a hash map finds them.
const SCAN_MAX: usize = 8;

/// The string table under construction: each distinct string once, in order of first use.
/// Most objects use one file name or a few, often the same for many functions in a row:
/// the last string found is compared first, a short table is scanned without allocating,
/// and only a long one is hashed.
struct Strings<'a> {
    /// The first `SCAN_MAX` strings (`len` of them if fewer).
    first: [&'a str; SCAN_MAX],
    /// The strings after the first `SCAN_MAX`.
    rest: Vec<&'a str>,
    /// Every string's index, once there are more than `SCAN_MAX` (built then: even an
    /// empty map costs its hasher's random keys).
    index: Option<HashMap<&'a str, u64>>,
    len: usize,
    last: usize,
}

impl<'a> Strings<'a> {
    fn new() -> Self {
        Strings {
            first: [""; SCAN_MAX],
            rest: Vec::new(),
            index: None,
            len: 0,
            last: 0,
        }
    }

    fn iter(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.first[..self.len.min(SCAN_MAX)]
            .iter()
            .chain(&self.rest)
            .copied()
    }

    #[inline]
    fn intern(&mut self, s: &'a str) -> u64 {
        if self.last < self.len.min(SCAN_MAX) {
            let l = self.first[self.last];
            // Usually the very same string (functions of one object share their file).
            if std::ptr::eq(l, s) || l == s {
                return self.last as u64;
            }
        }
        self.intern_slow(s)
    }

    fn intern_slow(&mut self, s: &'a str) -> u64 {
        let found = if self.len <= SCAN_MAX {
            self.first[..self.len].iter().position(|&l| l == s)
        } else {
            self.index
                .as_ref()
                .and_then(|m| m.get(s))
                .map(|&i| i as usize)
        };
        let i = found.unwrap_or_else(|| {
            let i = self.len;
            if i < SCAN_MAX {
                self.first[i] = s;
            } else {
                let first = &self.first;
                let index = self
                    .index
                    .get_or_insert_with(|| first.iter().copied().zip(0..).collect());
                index.insert(s, i as u64);
                self.rest.push(s);
            }
            self.len += 1;
            i
        });
        self.last = i;
        i as u64
    }
}

/// The 8-byte header every payload starts with.
pub(crate) fn header(arch: Arch) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&MAGIC);
    h[4] = VERSION;
    h[5] = arch_code(arch);
    h[6] = arch.pointer_size();
    h[7] = 0; // header flags: none defined in version 2
    h
}

pub(crate) fn encode_bundle(objects: &[(&JitObject, Option<LiveCheck>)]) -> Result<Vec<u8>> {
    let Some((first, _)) = objects.first() else {
        return Err(unsupported(
            "a payload needs at least one object, and none was given".into(),
        ));
    };
    let arch = first.arch();
    // Room for the first object (with its string table), allocated once; `write_object`
    // reserves more for the others.
    let mut w = Writer {
        buf: Vec::with_capacity(HEADER_LEN + 64 + usual_len(first) + WORST_SLACK),
    };
    w.bytes(&header(arch));
    for (k, (object, live)) in objects.iter().enumerate() {
        if object.arch() != arch {
            return Err(unsupported(format!(
                "object {k} is {} code but object 0 is {}: one payload holds one architecture",
                object.arch().name(),
                arch.name()
            )));
        }
        write_object(&mut w, object, *live)?;
    }
    Ok(w.buf)
}

/// Appends one object record (no header) to `out`. A payload is the header followed by
/// any number of these, so records can be appended to a payload in place. On error `out`
/// is left as it was.
pub(crate) fn encode_record(
    out: &mut Vec<u8>,
    object: &JitObject,
    live: Option<LiveCheck>,
) -> Result<()> {
    let mut w = Writer {
        buf: std::mem::take(out),
    };
    let len = w.buf.len();
    let result = write_object(&mut w, object, live);
    if result.is_err() {
        w.buf.truncate(len);
    }
    *out = w.buf;
    result
}

fn write_object(w: &mut Writer, object: &JitObject, live: Option<LiveCheck>) -> Result<()> {
    object.validate()?;
    let functions = object.functions();
    check_count(functions.len(), || {
        "the number of functions in one object".into()
    })?;
    let has_sources = object.has_sources();
    let sources_flag = if has_sources { OBJECT_SOURCES } else { 0 };
    match live {
        Some(live) => {
            if live.key == 0 {
                return Err(unsupported(
                    "the live check key is 0, the value of a cleared slot: use a nonzero key"
                        .into(),
                ));
            }
            w.u8(OBJECT_LIVE | sources_flag);
            w.u64_le(live.address);
            w.u64_le(live.key);
        }
        None => w.u8(sources_flag),
    }
    // The string table comes before the functions that refer to it: collect it in a cheap
    // first pass (the same interning order as the functions' writing below, so indices
    // agree), then write the functions straight into the output. A file is interned once,
    // by its first function; after that its index among the object's files finds its code.
    let mut strings = Strings::new();
    let file_count = object.file_count();
    let mut few = [NO_CODE; SCAN_MAX];
    let mut many = Vec::new();
    let codes: &mut [u64] = if file_count <= SCAN_MAX {
        &mut few[..file_count]
    } else {
        many.resize(file_count, NO_CODE);
        &mut many
    };
    for f in functions {
        if let (Some(i), Some(file)) = (f.file_index(), f.file()) {
            if codes[i] == NO_CODE {
                let name = f.name();
                check_text_len(file, || format!("the file name of `{name}`"))?;
                codes[i] = strings.intern(file);
            }
        }
        for b in f.blocks() {
            strings.intern(&b.name);
        }
    }
    // Source files after everything the functions name, so that an object's strings are
    // the same with and without its sources.
    let source_codes = if has_sources {
        intern_sources(&mut strings, object)
    } else {
        Vec::new()
    };
    w.uleb(strings.len as u64);
    for s in strings.iter() {
        w.text(s);
    }
    if has_sources {
        write_sources(w, object, &source_codes)?;
    }
    w.uleb(functions.len() as u64);

    // The functions are written through a cursor into zeroed room that is enlarged when
    // a function's worst case might not fit (typically once: the room starts at the usual
    // size of the whole object), then cut to what was written.
    let mut len = w.buf.len();
    // Where the functions' room starts: `out` may already hold other records (the
    // registry appends records to a batch's buffer), and the room grows with this object
    // only.
    let room = len;
    let usual = usual_len(object);
    // Capacity beyond that for a function's worst case, so that a small object's room is
    // allocated once.
    w.buf.reserve(usual + WORST_SLACK);
    w.buf.resize(len + usual, 0);
    // Function starts are deltas from the previous function's end; line numbers deltas from
    // the previous row, across functions (the state a reader carries through the object).
    let mut carry = Carry {
        prev_end: 0,
        line: 1,
    };
    for f in functions {
        let name = f.name();
        let worst = worst_len(f, name);
        if w.buf.len() - len < worst {
            let grown = w.buf.len() + (w.buf.len() - room) / 2;
            w.buf.resize(grown.max(len + worst), 0);
        }
        let mut c = Cursor::new(&mut w.buf[len..]);
        let written = write_function(
            &mut c,
            codes,
            &mut strings,
            object.arch(),
            f,
            name,
            &mut carry,
        );
        len += c.len();
        if let Err(e) = written {
            w.buf.truncate(len);
            return Err(e);
        }
        carry.prev_end = f.end();
    }
    w.buf.truncate(len);
    check_count(strings.len, || {
        "the number of distinct file and block names of one object".into()
    })?;
    Ok(())
}

/// The string-table indices of the source files of `object`, interned after the names its
/// functions use. Out of line, as `write_sources`: the usual object has no sources, and
/// `write_object` stays compiled as it was without them.
#[cold]
#[inline(never)]
fn intern_sources<'a>(strings: &mut Strings<'a>, object: &'a JitObject) -> Vec<u64> {
    object
        .sources()
        .map(|(file, _)| strings.intern(file))
        .collect()
}

/// The source table of `object`: its files by their string-table indices `codes`, and
/// their texts as blobs.
#[cold]
#[inline(never)]
fn write_sources(w: &mut Writer, object: &JitObject, codes: &[u64]) -> Result<()> {
    check_count(codes.len(), || {
        "the number of source texts of one object".into()
    })?;
    w.uleb(codes.len() as u64);
    for ((file, text), &code) in object.sources().zip(codes) {
        // Within the limit as the model keeps it; checked so that no text is ever cut here.
        check_text_len(file, || format!("the source file name `{file}`"))?;
        check_text_len(text, || format!("the source text of `{file}`"))?;
        w.uleb(code);
        w.blob(text);
    }
    Ok(())
}

/// What the writing carries from one function to the next within an object.
struct Carry {
    /// End of the previous function (function starts are written as deltas from it).
    prev_end: u64,
    /// Line of the previous row (line numbers are written as deltas from it).
    line: i64,
}

/// About the bytes the functions of `object` usually take: their names, a byte per line
/// row and a few for the rest.
fn usual_len(object: &JitObject) -> usize {
    let (text_len, row_count) = object.stored_sizes();
    text_len + row_count + 8 * object.functions().len()
}

/// Capacity reserved beyond the usual size of an object's functions: more than the worst
/// case of a typical function (a name, a few epilogues, a dozen line rows).
const WORST_SLACK: usize = 512;

/// A file without a string-table index yet.
const NO_CODE: u64 = u64::MAX;

/// Most bytes function `f` can take in a record: its texts, and `MAX_LEB_LEN` for every
/// number.
fn worst_len(f: Function<'_>, name: &str) -> usize {
    const LEB: usize = MAX_LEB_LEN;
    let frame = match f.frame() {
        Frame::Default => 0,
        Frame::FramePointer { epilogues, .. } => 3 * LEB + 2 * LEB * epilogues.len(),
        Frame::Rows(rows) => LEB + 3 * LEB * rows.len(),
    };
    let lines = 2 * LEB + lines::MAX_ROW_LEN * f.lines().len();
    let blocks = f.blocks();
    let blocks = LEB + blocks.len() * 4 * LEB;
    let registers = LEB + f.register_rules().len() * 3 * LEB;
    // Name and its length, start, size, flags.
    name.len() + 3 * LEB + 1 + frame + lines + blocks + registers
}

fn write_function<'a>(
    w: &mut Cursor<'_>,
    file_codes: &[u64],
    strings: &mut Strings<'a>,
    arch: Arch,
    f: Function<'a>,
    name: &str,
    carry: &mut Carry,
) -> Result<()> {
    if !f.variables().is_empty() {
        return Err(unsupported(format!(
            "function `{name}` has {} variable(s), and GDB's JIT reader API has no way to show variables: register it in the ELF format, or leave the variables out",
            f.variables().len()
        )));
    }
    check_text_len(name, || format!("the name of function `{name}`"))?;
    w.text(name);
    w.sleb(f.start().wrapping_sub(carry.prev_end) as i64);
    w.uleb(u64::from(f.size()));

    let frame = f.frame();
    let kind = match frame {
        Frame::Default => KIND_DEFAULT,
        _ if frame::is_canonical(frame, arch, f.size()) => KIND_FP_CANONICAL,
        Frame::FramePointer { .. } => KIND_FP,
        Frame::Rows(_) => KIND_ROWS,
    };
    let file = f.file_index().and_then(|i| file_codes.get(i).copied());
    let mut flags = kind;
    if file.is_some() {
        flags |= FUNCTION_LINES;
    }
    if !f.blocks().is_empty() {
        flags |= FUNCTION_BLOCKS;
    }
    if !f.register_rules().is_empty() {
        flags |= FUNCTION_REGISTERS;
    }
    w.u8(flags);

    // The model's setters guarantee the orderings the differences below rely on; wrapping
    // arithmetic keeps a broken invariant from panicking (the decoder would refuse it).
    match frame {
        Frame::FramePointer {
            push_end,
            setup_end,
            epilogues,
        } if kind == KIND_FP => {
            check_count(epilogues.len(), || {
                format!("the number of epilogues of `{name}`")
            })?;
            w.uleb(u64::from(*push_end));
            w.uleb(u64::from(setup_end.wrapping_sub(*push_end)));
            w.uleb(epilogues.len() as u64);
            let mut after = *setup_end;
            for e in epilogues {
                w.uleb(u64::from(e.restore_end.wrapping_sub(after).wrapping_sub(1)));
                w.uleb(u64::from(
                    e.ret_end.wrapping_sub(e.restore_end).wrapping_sub(1),
                ));
                after = e.ret_end;
            }
        }
        Frame::Rows(rows) => {
            check_count(rows.len(), || {
                format!("the number of unwind rows of `{name}`")
            })?;
            w.uleb(rows.len() as u64);
            let mut prev = 0u32;
            for r in rows {
                w.uleb(u64::from(r.offset.wrapping_sub(prev)));
                let base = match r.cfa_base {
                    CfaBase::Sp => 0,
                    CfaBase::Fp => 1,
                };
                w.sleb(i64::from(r.cfa_offset / 8) * 2 + base);
                w.sleb(i64::from(r.fp_offset / 8));
                prev = r.offset;
            }
        }
        _ => {}
    }

    if let Some(code) = file {
        let rows = f.lines();
        check_count(rows.len(), || {
            format!("the number of line rows of `{name}`")
        })?;
        w.uleb(code);
        w.uleb(rows.len() as u64);
        let (mut offset, mut prev_line) = (0u32, carry.line);
        for r in rows {
            let line_now = i64::from(r.line);
            lines::write_row(
                w,
                u64::from(r.offset.wrapping_sub(offset)),
                line_now - prev_line,
            );
            offset = r.offset;
            // A gap (line 0) leaves the register at the last line: the row after it
            // usually steps from there in one byte.
            if !r.is_gap() {
                prev_line = line_now;
            }
        }
        carry.line = prev_line;
    }

    let blocks = f.blocks();
    if !blocks.is_empty() {
        check_count(blocks.len(), || format!("the number of blocks of `{name}`"))?;
        w.uleb(blocks.len() as u64);
        for b in blocks {
            check_text_len(&b.name, || format!("a block name of `{name}`"))?;
            w.uleb(strings.intern(&b.name));
            w.uleb(u64::from(b.start));
            w.uleb(u64::from(b.end.wrapping_sub(b.start)));
            w.uleb(b.parent.map_or(0, |p| u64::from(p) + 1));
        }
    }

    let rules = f.register_rules();
    if !rules.is_empty() {
        check_count(rules.len(), || {
            format!("the number of register rules of `{name}`")
        })?;
        w.uleb(rules.len() as u64);
        let mut prev = 0u32;
        for r in rules {
            w.uleb(u64::from(r.offset.wrapping_sub(prev)));
            w.uleb(u64::from(r.reg));
            w.uleb(frame::rule_code(r.rule));
            prev = r.offset;
        }
    }
    Ok(())
}
