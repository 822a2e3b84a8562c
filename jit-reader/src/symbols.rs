//! Symbol tables for GDB, built from a payload's functions ([`Records`]) as plain data first
//! (a [`Plan`]) and only then handed to GDB's callbacks, so the shaping rules are
//! unit-tested here.
//!
//! Rules, from how GDB's JIT symbol callbacks work:
//! - One symtab per source file (a symtab has one file name) and run of functions;
//!   functions without lines share such symtabs without a file name. GDB picks the symtab
//!   for a PC by the smallest [lowest start, highest end) range that contains it, across all
//!   entries, and walks every symtab of every objfile to find it: a symtab per function
//!   makes every PC lookup cost as many steps as there are functions, so a run goes on over
//!   a gap between two functions of its file as long as the gap is small ([`BRIDGE_MAX`])
//!   and holds no function of any other symtab: none of the same payload (other files), none
//!   of any entry read before (the caller's test, [`plan_around`]). An entry read later with
//!   code in such a gap cannot bridge past the bridged entry's functions on either side of
//!   it, so its symtab's range lies inside the gap, is smaller, and GDB picks it there.
//!   Addresses in a bridged gap belong to no block and get no line (each function's end
//!   keeps its line-0 marker).
//! - A block per function, then its nested blocks with their parents. GDB keeps each
//!   symtab's blocks in a list sorted by (start ascending, end descending) and inserts every
//!   new block by walking that list, so blocks are opened in exactly that order: each
//!   insertion is then O(1), and parents (which contain their children) come first.
//! - One line table per symtab: `line_mapping_add` replaces the table, it does not append.
//!   All rows of all the symtab's functions go in at once, sorted by address, and each
//!   function's end gets a line-0 row (GDB's end-of-sequence marker) unless another row
//!   starts there, so that addresses after a function's last row are not given its line.
//! - A gap row (line 0: no source line from there) goes in as it is: GDB's line table
//!   takes line 0 as the end of the range before, and shows the addresses up to the next
//!   row without a line, as it does after a function's end. A function ending in a gap
//!   needs no end marker.
//!
//! GDB copies everything it is given, and a payload may hold a hundred thousand functions:
//! the plan keeps all strings in one buffer and all blocks and rows in one vector each, and
//! skips sorting what is already in order (the common case: one object's functions in
//! address order, rows in offset order).
//!
//! Objects whose live slot no longer holds their key ([`drop_tombstones`]) are left out
//! before planning: a registry may leave unregistered objects in place inside a payload.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::ops::Range;

use jit_interface::{Decoded, LineRow, LiveCheck, Liveness};

use crate::memory::Memory;
use crate::records::{Func, Records};

/// Everything GDB is told about one payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// File, function and block names, each NUL-terminated; referred to by offset.
    pub strings: Vec<u8>,
    pub symtabs: Vec<SymtabPlan>,
    /// The blocks of all symtabs, each symtab's in the order they are to be opened.
    pub blocks: Vec<BlockPlan>,
    /// The line tables of all symtabs.
    pub lines: Vec<LinePlan>,
}

/// One symtab: a source file's functions, blocks and line table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymtabPlan {
    /// Offset of the file name in [`Plan::strings`]; `None`: functions without source lines.
    pub file: Option<usize>,
    /// Its blocks in [`Plan::blocks`]; never empty.
    pub blocks: Range<usize>,
    /// Its line table in [`Plan::lines`]: sorted by address; line 0 marks the end of a
    /// function's rows.
    pub lines: Range<usize>,
}

/// One block: a function, or a nested block of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockPlan {
    pub begin: u64,
    pub end: u64,
    /// Offset of the name in [`Plan::strings`].
    pub name: usize,
    /// Index of the enclosing block among the same symtab's blocks (always an earlier one).
    pub parent: Option<usize>,
}

/// One line-table row, laid out like GDB's `gdb_line_mapping` so that a symtab's rows are
/// handed over as they are.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinePlan {
    pub line: i32,
    pub pc: u64,
}

impl Plan {
    /// The NUL-terminated string at `offset` in [`Plan::strings`].
    pub fn str_at(&self, offset: usize) -> &CStr {
        self.strings
            .get(offset..)
            .and_then(|s| CStr::from_bytes_until_nul(s).ok())
            .unwrap_or_default()
    }

    /// The string at `offset` as a C string pointer, without searching for its end: every
    /// string is stored NUL-terminated and, checked here, the buffer ends with a NUL, so
    /// whatever the offset the C string ends inside the buffer (an offset past the end
    /// gives the empty string).
    pub fn str_ptr(&self, offset: usize) -> *const std::ffi::c_char {
        match self.strings.get(offset..) {
            Some(s) if self.strings.last() == Some(&0) && !s.is_empty() => s.as_ptr().cast(),
            _ => c"".as_ptr(),
        }
    }

    /// Gives every symtab the file name `name_of` returns for it: the runtime's name, its
    /// highest line, and (see [`crate::sources`]) the name GDB can open a file by.
    pub fn name_files(
        &mut self,
        mut name_of: impl FnMut(Option<&str>, u32) -> String,
    ) -> Result<(), String> {
        // The highest line of each file over all its symtabs (runs of one file share its
        // name, so one placeholder must cover them all). A payload may name as many files
        // as it has functions: found through a map, not by scanning.
        let mut files: Vec<(Option<usize>, u32, usize)> = Vec::new();
        let mut file_of: BTreeMap<Option<usize>, usize> = BTreeMap::new();
        for st in &self.symtabs {
            let max_line = self.lines[st.lines.clone()]
                .iter()
                .map(|l| l.line.max(0) as u32)
                .max()
                .unwrap_or(0);
            let k = *file_of.entry(st.file).or_insert_with(|| {
                files.push((st.file, 0, 0));
                files.len() - 1
            });
            files[k].1 = files[k].1.max(max_line);
        }
        for f in &mut files {
            let name = {
                let runtime = f.0.map(|o| self.str_at(o).to_string_lossy().into_owned());
                name_of(runtime.as_deref(), f.1)
            };
            f.2 = self.push_str("the source file name", &name)?;
        }
        for st in &mut self.symtabs {
            st.file = file_of.get(&st.file).map(|&k| files[k].2);
        }
        Ok(())
    }

    /// Appends a name; an error if it contains a NUL byte (GDB takes C strings).
    fn push_str(&mut self, what: &str, s: &str) -> Result<usize, String> {
        if s.as_bytes().contains(&0) {
            return Err(format!(
                "{what} `{}` contains a NUL byte",
                s.replace('\0', "\\0")
            ));
        }
        let at = self.strings.len();
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        Ok(at)
    }
}

/// An object left out because its live slot no longer holds its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    /// Name of its first function.
    pub first: String,
    pub functions: usize,
    pub live: LiveCheck,
    /// What the slot held instead of the key.
    pub found: u64,
}

/// Largest span of target memory read at once to check several live slots.
const SLOT_SPAN: u64 = 4096;

/// Removes the objects whose live slot, read through `mem`, holds something other than their
/// key: unregistered objects a registry left in place inside a payload. A slot that cannot
/// be read (e.g. memory absent from a core file) counts as live, as the format says.
/// Slots close to each other are read together: a bundle may hold a thousand objects.
pub fn drop_tombstones(records: &mut Records<'_>, mem: &dyn Memory) -> Vec<Tombstone> {
    // (slot address, object index), by address.
    let mut slots: Vec<(u64, usize)> = records
        .objects
        .iter()
        .enumerate()
        .filter_map(|(i, d)| d.live.map(|l| (l.address, i)))
        .collect();
    if slots.is_empty() {
        return Vec::new();
    }
    slots.sort_unstable();
    // What each object's slot holds, if it could be read.
    let mut held: Vec<Option<u64>> = vec![None; records.objects.len()];
    let mut buf = Vec::new();
    let mut i = 0;
    while i < slots.len() {
        let first = slots[i].0;
        let mut n = 1;
        while i + n < slots.len()
            && slots[i + n].0 - first <= SLOT_SPAN - 8
            && first.checked_add(SLOT_SPAN).is_some()
        {
            n += 1;
        }
        let group = &slots[i..i + n];
        let span = (group[n - 1].0 - first + 8) as usize;
        buf.resize(span, 0);
        if n > 1 && mem.read(first, &mut buf) {
            for &(a, k) in group {
                let o = (a - first) as usize;
                let word: [u8; 8] = buf[o..o + 8].try_into().unwrap_or_default();
                held[k] = Some(u64::from_le_bytes(word));
            }
        } else {
            // One slot, or a span with an unreadable page: slot by slot.
            for &(a, k) in group {
                held[k] = mem.read_u64(a);
            }
        }
        i += n;
    }
    let mut dropped = Vec::new();
    let mut k = 0;
    let mut objects = std::mem::take(&mut records.objects);
    objects.retain(|o| {
        let found = held[k];
        k += 1;
        match o.live.map(|live| (live, live.state(found))) {
            Some((live, Liveness::Unregistered { found })) => {
                let fns = records.functions(o);
                dropped.push(Tombstone {
                    first: fns.first().map_or_else(String::new, |f| f.name.to_owned()),
                    functions: fns.len(),
                    live,
                    found,
                });
                false
            }
            _ => true,
        }
    });
    records.objects = objects;
    dropped
}

/// Largest gap (exclusive) between two functions of one file that their symtab spans. Gaps
/// inside a JIT's code pages (alignment, stubs, constant pools, freed functions) are small;
/// a page or more apart, the next function is likely in another allocation, with whatever
/// unregistered code (another runtime's, trampolines) between them that a symtab spanning
/// it would claim. It also bounds how much a bridged symtab covers beyond its functions.
pub const BRIDGE_MAX: u64 = 4096;

/// Builds the symbol tables of a payload's objects, as if no other entry had code near
/// them. Errors name the first problem found (the decoder validates; this guards what GDB
/// would be given all the same).
pub fn plan(decoded: &[Decoded]) -> Result<Plan, String> {
    plan_records(&Records::from_decoded(decoded))
}

/// [`plan`] for the functions of a payload's records.
pub fn plan_records(records: &Records<'_>) -> Result<Plan, String> {
    plan_around(records, |_, _| false)
}

/// [`plan_records`] beside other entries: `taken(a, b)` says whether any function of an
/// entry GDB already has symbols for (other than this payload) overlaps `[a, b)`; a symtab
/// never spans such a gap.
pub fn plan_around(
    records: &Records<'_>,
    mut taken: impl FnMut(u64, u64) -> bool,
) -> Result<Plan, String> {
    let mut total = 0;
    let mut rows = 0;
    // Functions by file. Consecutive functions almost always share their file, so the
    // group of the previous function is tried before the map.
    let mut by_file: Vec<(Option<&str>, Vec<&Func<'_>>)> = Vec::new();
    let mut group_of: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    let mut last: Option<usize> = None;
    for o in &records.objects {
        total += records.functions(o).len();
        for f in records.functions(o) {
            rows += records.lines(f).len() + 1;
            let file = f.file;
            let k = match last.filter(|&k| by_file[k].0 == file) {
                Some(k) => k,
                None => *group_of.entry(file).or_insert_with(|| {
                    by_file.push((file, Vec::new()));
                    by_file.len() - 1
                }),
            };
            by_file[k].1.push(f);
            last = Some(k);
        }
    }
    // Files in order, no file first (each file is one group).
    by_file.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    // With several files, a gap of one may hold functions of another.
    let occupied = (by_file.len() > 1).then(|| Occupied::new(records));
    let mut p = Plan {
        strings: Vec::with_capacity(total * 24),
        symtabs: Vec::with_capacity(by_file.len()),
        blocks: Vec::with_capacity(total),
        lines: Vec::with_capacity(rows),
    };
    for (file, mut fns) in by_file {
        let file = file.map(|f| p.push_str("the file name", f)).transpose()?;
        if !fns.windows(2).all(|w| w[0].start <= w[1].start) {
            fns.sort_by_key(|f| f.start);
        }
        let mut rest = &fns[..];
        while !rest.is_empty() {
            // The run ends at the first function after a gap it may not span.
            let mut end = rest[0].end();
            let mut n = 1;
            while n < rest.len() {
                let next = rest[n].start;
                let joins = next <= end
                    || (next - end < BRIDGE_MAX
                        && !occupied.as_ref().is_some_and(|o| o.overlaps(end, next))
                        && !taken(end, next));
                if !joins {
                    break;
                }
                end = end.max(rest[n].end());
                n += 1;
            }
            let (run, tail) = rest.split_at(n);
            let b0 = p.blocks.len();
            blocks(&mut p, records, run)?;
            let l0 = p.lines.len();
            lines(&mut p, records, run)?;
            p.symtabs.push(SymtabPlan {
                file,
                blocks: b0..p.blocks.len(),
                lines: l0..p.lines.len(),
            });
            rest = tail;
        }
    }
    Ok(p)
}

/// The ranges of all of a payload's functions, for "does any overlap [a, b)?" in O(log n).
struct Occupied {
    /// Starts, ascending.
    starts: Vec<u64>,
    /// `reach[i]`: the highest end among the functions up to `i` (ranges may overlap across
    /// objects, so ends alone are not sorted).
    reach: Vec<u64>,
}

impl Occupied {
    fn new(records: &Records<'_>) -> Occupied {
        let mut ranges: Vec<(u64, u64)> = records
            .all_functions()
            .map(|f| (f.start, f.end()))
            .collect();
        if !ranges.windows(2).all(|w| w[0] <= w[1]) {
            ranges.sort_unstable();
        }
        let mut high = 0;
        let reach = ranges
            .iter()
            .map(|&(_, e)| {
                high = high.max(e);
                high
            })
            .collect();
        Occupied {
            starts: ranges.iter().map(|&(s, _)| s).collect(),
            reach,
        }
    }

    /// Does a function overlap [a, b)? One starting before `b` must reach past `a`.
    fn overlaps(&self, a: u64, b: u64) -> bool {
        let n = self.starts.partition_point(|&s| s < b);
        n.checked_sub(1).is_some_and(|i| self.reach[i] > a)
    }
}

/// A function's range, or why it has none.
fn range(f: &Func<'_>) -> Result<(u64, u64), String> {
    let start = f.start;
    start
        .checked_add(u64::from(f.size))
        .filter(|&e| e > start)
        .map(|e| (start, e))
        .ok_or_else(|| {
            format!(
                "function `{}` at {start:#x} has an empty or wrapping range",
                f.name
            )
        })
}

/// Appends the blocks of a run of functions (sorted by start) in GDB's order.
fn blocks(p: &mut Plan, records: &Records<'_>, fns: &[&Func<'_>]) -> Result<(), String> {
    let disjoint = fns.windows(2).all(|w| w[0].end() <= w[1].start);
    if disjoint && fns.iter().all(|f| records.blocks(f).is_empty()) {
        // Already in GDB's order: one block per function, by address.
        for f in fns {
            let (begin, end) = range(f)?;
            let name = p.push_str("the function name", f.name)?;
            p.blocks.push(BlockPlan {
                begin,
                end,
                name,
                parent: None,
            });
        }
        return Ok(());
    }
    let mut raw: Vec<BlockPlan> = Vec::new();
    for f in fns {
        let (start, end) = range(f)?;
        let fb = raw.len();
        raw.push(BlockPlan {
            begin: start,
            end,
            name: p.push_str("the function name", f.name)?,
            parent: None,
        });
        for (j, b) in records.blocks(f).iter().enumerate() {
            let bad = |why: String| format!("function `{}`, block {j} `{}`: {why}", f.name, b.name);
            let parent = match b.parent {
                None => fb,
                Some(q) if (q as usize) < j => fb + 1 + q as usize,
                Some(q) => return Err(bad(format!("its parent {q} does not come before it"))),
            };
            if b.start >= b.end {
                return Err(bad(format!("the range [{}, {}) is empty", b.start, b.end)));
            }
            let (begin, bend) = (start + u64::from(b.start), start + u64::from(b.end));
            let pb = &raw[parent];
            if begin < pb.begin || bend > pb.end {
                return Err(bad(format!(
                    "[{begin:#x}, {bend:#x}) is not inside its parent [{:#x}, {:#x})",
                    pb.begin, pb.end
                )));
            }
            raw.push(BlockPlan {
                begin,
                end: bend,
                name: p.push_str("the block name", b.name)?,
                parent: Some(parent),
            });
        }
    }
    // GDB's order; ties keep creation order, so a parent still precedes an equal child.
    let mut order: Vec<usize> = (0..raw.len()).collect();
    order.sort_by_key(|&a| (raw[a].begin, std::cmp::Reverse(raw[a].end), a));
    let mut new_pos = vec![0usize; raw.len()];
    for (pos, &old) in order.iter().enumerate() {
        new_pos[old] = pos;
    }
    for (pos, &old) in order.iter().enumerate() {
        let b = &raw[old];
        let parent = b.parent.map(|q| new_pos[q]);
        if parent.is_some_and(|q| q >= pos) {
            return Err("internal error: a block would be opened before its parent".into());
        }
        p.blocks.push(BlockPlan {
            parent,
            ..b.clone()
        });
    }
    Ok(())
}

/// Checks one line row of `f`; returns its address and line (0 for a gap).
#[inline]
fn line_row(f: &Func<'_>, i: usize, offset: u32, line: u32) -> Result<(u64, i32), String> {
    match i32::try_from(line) {
        Ok(l) if offset < f.size => Ok((f.start + u64::from(offset), l)),
        _ => bad_line_row(f, i, offset, line),
    }
}

#[cold]
fn bad_line_row(f: &Func<'_>, i: usize, offset: u32, line: u32) -> Result<(u64, i32), String> {
    let bad = |why: String| format!("function `{}`, line row {i}: {why}", f.name);
    if offset >= f.size {
        return Err(bad(format!(
            "offset {offset} is outside the function (size {})",
            f.size
        )));
    }
    let line = i32::try_from(line).map_err(|_| {
        bad(format!(
            "line {line} is above {}, the highest GDB takes",
            i32::MAX
        ))
    })?;
    Ok((f.start + u64::from(offset), line))
}

/// Appends the line table of a run of functions (sorted by start).
fn lines(p: &mut Plan, records: &Records<'_>, fns: &[&Func<'_>]) -> Result<(), String> {
    let l0 = p.lines.len();
    let in_order = fns.windows(2).all(|w| w[0].end() <= w[1].start)
        && fns.iter().all(|f| {
            records
                .lines(f)
                .windows(2)
                .all(|w| w[0].offset < w[1].offset)
        });
    if in_order {
        // Rows come out sorted as they are; only end markers met by a row need dropping.
        let mut marker_at: Option<u64> = None;
        for f in fns {
            if records.lines(f).is_empty() {
                continue;
            }
            for (i, r) in records.lines(f).iter().enumerate() {
                let (pc, line) = line_row(f, i, r.offset, r.line)?;
                if marker_at.take() == Some(pc) {
                    p.lines.pop();
                }
                p.lines.push(LinePlan { line, pc });
            }
            // A last row that is a gap already ends the function's lines.
            if records.lines(f).last().is_some_and(LineRow::is_gap) {
                continue;
            }
            p.lines.push(LinePlan {
                line: 0,
                pc: f.end(),
            });
            marker_at = Some(f.end());
        }
    } else {
        // (pc, 0 for a real row / 1 for an end marker, line): real rows sort before markers.
        let mut rows: Vec<(u64, u8, i32)> = Vec::new();
        for f in fns {
            if records.lines(f).is_empty() {
                continue;
            }
            for (i, r) in records.lines(f).iter().enumerate() {
                let (pc, line) = line_row(f, i, r.offset, r.line)?;
                rows.push((pc, 0, line));
            }
            if !records.lines(f).last().is_some_and(LineRow::is_gap) {
                rows.push((f.end(), 1, 0));
            }
        }
        rows.sort_unstable();
        for (pc, kind, line) in rows {
            if kind == 1 && p.lines.len() > l0 && p.lines.last().is_some_and(|l| l.pc == pc) {
                continue;
            }
            p.lines.push(LinePlan { line, pc });
        }
    }
    let n = p.lines.len() - l0;
    if i32::try_from(n).is_err() {
        return Err(format!(
            "{n} line rows in one source file: GDB takes at most {}",
            i32::MAX
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jit_interface::{JitObject, LineRow};

    /// Each symtab's file and its blocks as (name, parent name).
    fn files(p: &Plan) -> Vec<Option<&str>> {
        p.symtabs
            .iter()
            .map(|s| s.file.map(|f| p.str_at(f).to_str().unwrap()))
            .collect()
    }

    fn names(p: &Plan, i: usize) -> Vec<&str> {
        p.blocks[p.symtabs[i].blocks.clone()]
            .iter()
            .map(|b| p.str_at(b.name).to_str().unwrap())
            .collect()
    }

    fn lines_of(p: &Plan, i: usize) -> Vec<(u64, i32)> {
        p.lines[p.symtabs[i].lines.clone()]
            .iter()
            .map(|l| (l.pc, l.line))
            .collect()
    }

    fn one(o: JitObject) -> Vec<Decoded> {
        vec![Decoded {
            object: o,
            live: None,
        }]
    }

    fn rows(pairs: &[(u32, u32)]) -> Vec<LineRow> {
        pairs
            .iter()
            .map(|&(offset, line)| LineRow { offset, line })
            .collect()
    }

    #[test]
    fn one_symtab_per_file_and_one_without() {
        let mut o = JitObject::new();
        let a = o.add_function("a", 0x2000, 0x10).unwrap();
        o.set_lines(a, "x.js", &rows(&[(0, 1), (4, 2)])).unwrap();
        let b = o.add_function("b", 0x1000, 0x10).unwrap();
        o.set_lines(b, "x.js", &rows(&[(0, 10)])).unwrap();
        let c = o.add_function("c", 0x3000, 0x10).unwrap();
        o.set_lines(c, "y.js", &rows(&[(2, 7)])).unwrap();
        o.add_function("d", 0x4000, 0x10).unwrap();
        let p = plan(&one(o)).unwrap();
        // `b` and `a` are not adjacent, but nothing lies between them: one symtab, in
        // address order, each function's lines ended by a line-0 row.
        assert_eq!(files(&p), [None, Some("x.js"), Some("y.js")]);
        assert_eq!(names(&p, 1), ["b", "a"]);
        assert_eq!(
            lines_of(&p, 1),
            [
                (0x1000, 10),
                (0x1010, 0),
                (0x2000, 1),
                (0x2004, 2),
                (0x2010, 0)
            ]
        );
        assert!(p.symtabs[0].lines.is_empty());
        assert_eq!(names(&p, 0), ["d"]);
    }

    /// The functions of each symtab, by name.
    fn runs(p: &Plan) -> Vec<Vec<&str>> {
        (0..p.symtabs.len()).map(|i| names(p, i)).collect()
    }

    /// Functions `(name, start, file)` of 0x12 bytes, each with one line row (line 0: none).
    fn layout(fns: &[(&str, u64, u32)]) -> Vec<Decoded> {
        let mut o = JitObject::new();
        for &(name, start, line) in fns {
            let f = o.add_function(name, start, 0x12).unwrap();
            if line > 0 {
                o.set_lines(f, "x.js", &rows(&[(0, line)])).unwrap();
            }
        }
        one(o)
    }

    #[test]
    fn gaps_below_the_cap_are_bridged() {
        let last = 0x1080 + 0x12 + BRIDGE_MAX - 1;
        let p = plan(&layout(&[
            ("a", 0x1000, 1),
            ("b", 0x1040, 2),
            ("c", 0x1080, 3),
            ("d", last, 4),
            ("e", last + 0x12 + BRIDGE_MAX, 5),
            // Without lines: their own group, bridged the same way.
            ("n0", 0x10_0000, 0),
            ("n1", 0x10_0100, 0),
        ]))
        .unwrap();
        // A gap of BRIDGE_MAX - 1 is bridged, one of BRIDGE_MAX is not.
        assert_eq!(
            runs(&p),
            [vec!["n0", "n1"], vec!["a", "b", "c", "d"], vec!["e"]]
        );
        // Every function's end keeps its line-0 row: its gap gets no line.
        assert_eq!(
            lines_of(&p, 1),
            [
                (0x1000, 1),
                (0x1012, 0),
                (0x1040, 2),
                (0x1052, 0),
                (0x1080, 3),
                (0x1092, 0),
                (last, 4),
                (last + 0x12, 0)
            ]
        );
        // One block per function, exact.
        let blocks: Vec<(u64, u64)> = p.blocks[p.symtabs[1].blocks.clone()]
            .iter()
            .map(|b| (b.begin, b.end))
            .collect();
        assert_eq!(
            blocks,
            [
                (0x1000, 0x1012),
                (0x1040, 0x1052),
                (0x1080, 0x1092),
                (last, last + 0x12)
            ]
        );
    }

    #[test]
    fn gaps_holding_another_files_code_are_not_bridged() {
        let mut o = JitObject::new();
        for (name, start, file) in [
            ("a", 0x1000, "x.js"),
            ("b", 0x1040, "x.js"),
            ("y", 0x1060, "y.js"),
            ("c", 0x1080, "x.js"),
            ("d", 0x10c0, "x.js"),
            ("z", 0x2000, "y.js"),
        ] {
            let f = o.add_function(name, start, 0x12).unwrap();
            o.set_lines(f, file, &rows(&[(0, 1)])).unwrap();
        }
        // A function without lines (a group of its own) in the gap after `c`.
        o.add_function("n", 0x10a0, 0x10).unwrap();
        let p = plan(&one(o)).unwrap();
        // x.js bridges only the gap after `a`; y.js's one gap holds x.js's `c` and `d`.
        assert_eq!(
            runs(&p),
            [
                vec!["n"],
                vec!["a", "b"],
                vec!["c"],
                vec!["d"],
                vec!["y"],
                vec!["z"]
            ]
        );
    }

    /// A function that starts before a gap and reaches into it (another object's: nothing
    /// forbids overlaps across objects) blocks it too.
    #[test]
    fn gaps_reached_into_by_a_long_function_are_not_bridged() {
        let mut o1 = JitObject::new();
        for (name, start) in [("a", 0x1000), ("b", 0x1100), ("c", 0x1200)] {
            let f = o1.add_function(name, start, 0x12).unwrap();
            o1.set_lines(f, "x.js", &rows(&[(0, 1)])).unwrap();
        }
        let mut o2 = JitObject::new();
        o2.add_function("long", 0x0800, 0x850).unwrap();
        let d: Vec<Decoded> = [o1, o2]
            .into_iter()
            .map(|object| Decoded { object, live: None })
            .collect();
        let p = plan(&d).unwrap();
        // `a` ends last among the functions starting before `b`, but `long` reaches further.
        assert_eq!(runs(&p), [vec!["long"], vec!["a"], vec!["b", "c"]]);
    }

    #[test]
    fn gaps_taken_by_other_entries_are_not_bridged() {
        let d = layout(&[
            ("a", 0x1000, 1),
            ("b", 0x1040, 2),
            ("c", 0x1080, 3),
            ("d", 0x2000, 4),
        ]);
        let r = Records::from_decoded(&d);
        let mut asked = Vec::new();
        // Another entry has code at 0x1060.
        let p = plan_around(&r, |lo, hi| {
            asked.push((lo, hi));
            lo <= 0x1060 && 0x1060 < hi
        })
        .unwrap();
        assert_eq!(runs(&p), [vec!["a", "b"], vec!["c", "d"]]);
        assert_eq!(
            asked,
            [(0x1012, 0x1040), (0x1052, 0x1080), (0x1092, 0x2000)]
        );
    }

    #[test]
    fn files_are_named_once_with_the_highest_line_of_all_their_symtabs() {
        let mut o = JitObject::new();
        // x.js in two runs (a gap between them), y.js, and a function without lines; then
        // many files of one function each (named through a map, not a scan).
        for (i, (file, line)) in [("x.js", 3), ("y.js", 9), ("x.js", 40)].iter().enumerate() {
            let f = o
                .add_function(&format!("f{i}"), 0x1000 * (i as u64 + 1), 0x10)
                .unwrap();
            o.set_lines(f, file, &rows(&[(0, *line)])).unwrap();
        }
        o.add_function("none", 0x9000, 0x10).unwrap();
        for i in 0..5_000u64 {
            let f = o
                .add_function(&format!("g{i}"), 0x10_0000 + i * 0x20, 0x10)
                .unwrap();
            o.set_lines(f, &format!("g{i}.js"), &rows(&[(0, 1)]))
                .unwrap();
        }
        let mut p = plan(&one(o)).unwrap();
        let mut asked = Vec::new();
        p.name_files(|name, max| {
            asked.push((name.map(str::to_string), max));
            format!("<{}>", name.unwrap_or("-"))
        })
        .unwrap();
        assert_eq!(asked.len(), 3 + 5_000);
        assert!(asked.contains(&(Some("x.js".into()), 40)));
        assert!(asked.contains(&(Some("y.js".into()), 9)));
        assert!(asked.contains(&(None, 0)));
        for (i, st) in p.symtabs.iter().enumerate() {
            let shown = p.str_at(st.file.unwrap()).to_str().unwrap();
            let first = names(&p, i)[0];
            let want = match first {
                "f0" | "f2" => "<x.js>".to_string(),
                "f1" => "<y.js>".to_string(),
                "none" => "<->".to_string(),
                g => format!("<{g}.js>"),
            };
            assert_eq!(shown, want, "symtab of {first}");
        }
    }

    #[test]
    fn end_marker_dropped_where_the_next_function_starts() {
        let mut o = JitObject::new();
        let a = o.add_function("a", 0x1000, 0x10).unwrap();
        o.set_lines(a, "x.js", &rows(&[(0, 1)])).unwrap();
        let b = o.add_function("b", 0x1010, 0x10).unwrap();
        o.set_lines(b, "x.js", &rows(&[(0, 5)])).unwrap();
        let p = plan(&one(o)).unwrap();
        assert_eq!(lines_of(&p, 0), [(0x1000, 1), (0x1010, 5), (0x1020, 0)]);
    }

    /// Gap rows reach GDB as line-0 rows, first, between lines and last (then without an
    /// end marker), in address order and out of it.
    #[test]
    fn gap_rows_become_line_0_rows() {
        for swapped in [false, true] {
            let mut o = JitObject::new();
            let (l, gap) = (LineRow::new, LineRow::gap);
            let (a_at, b_at) = if swapped {
                (0x1020, 0x1000)
            } else {
                (0x1000, 0x1020)
            };
            let a = o.add_function("a", a_at, 0x20).unwrap();
            o.set_lines(a, "x.js", &[gap(0), l(4, 7), gap(8), l(12, 8)])
                .unwrap();
            let b = o.add_function("b", b_at, 0x20).unwrap();
            o.set_lines(b, "x.js", &[l(0, 20), gap(0x10)]).unwrap();
            let p = plan(&one(o)).unwrap();
            let (a_rows, b_rows) = (
                vec![(a_at, 0), (a_at + 4, 7), (a_at + 8, 0), (a_at + 12, 8)],
                vec![(b_at, 20), (b_at + 0x10, 0)],
            );
            let want: Vec<(u64, i32)> = if swapped {
                // b ends in a gap (no end marker), then a, with its end marker.
                b_rows
                    .into_iter()
                    .chain(a_rows)
                    .chain([(0x1040, 0)])
                    .collect()
            } else {
                // a's end marker gives way to b's first row; b ends in a gap.
                a_rows.into_iter().chain(b_rows).collect()
            };
            assert_eq!(lines_of(&p, 0), want, "swapped: {swapped}");
        }
    }

    #[test]
    fn nested_blocks_follow_their_parents() {
        let mut o = JitObject::new();
        let f = o.add_function("outer", 0x1000, 0x100).unwrap();
        let b0 = o.add_block(f, "inl_a", 0x10, 0x80, None).unwrap();
        o.add_block(f, "inl_b", 0x20, 0x40, Some(b0)).unwrap();
        // Same range as its parent: still after it.
        o.add_block(f, "inl_c", 0x10, 0x80, Some(b0)).unwrap();
        o.add_block(f, "early", 0x0, 0x8, None).unwrap();
        let p = plan(&one(o)).unwrap();
        let bs = &p.blocks[p.symtabs[0].blocks.clone()];
        let got: Vec<(&str, Option<&str>)> = bs
            .iter()
            .map(|b| {
                (
                    p.str_at(b.name).to_str().unwrap(),
                    b.parent.map(|i| p.str_at(bs[i].name).to_str().unwrap()),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("outer", None),
                ("early", Some("outer")),
                ("inl_a", Some("outer")),
                ("inl_c", Some("inl_a")),
                ("inl_b", Some("inl_a")),
            ]
        );
        for (i, b) in bs.iter().enumerate() {
            assert!(b.parent.map_or(true, |p| p < i));
        }
    }

    #[test]
    fn bundles_merge_by_file_and_split_at_gaps() {
        let mut o1 = JitObject::new();
        let a = o1.add_function("a", 0x1000, 0x10).unwrap();
        o1.set_lines(a, "x.js", &rows(&[(0, 1)])).unwrap();
        let c = o1.add_function("c", 0x3010, 0x10).unwrap();
        o1.set_lines(c, "x.js", &rows(&[(0, 3)])).unwrap();
        let mut o2 = JitObject::new();
        let b = o2.add_function("b", 0x3000, 0x10).unwrap();
        o2.set_lines(b, "x.js", &rows(&[(0, 2)])).unwrap();
        let d = vec![
            Decoded {
                object: o1,
                live: None,
            },
            Decoded {
                object: o2,
                live: None,
            },
        ];
        let p = plan(&d).unwrap();
        // `a` alone (a gap of BRIDGE_MAX or more follows it), then `b` and `c`, adjacent
        // though from two objects.
        assert_eq!((names(&p, 0), names(&p, 1)), (vec!["a"], vec!["b", "c"]));
    }

    #[test]
    fn rows_out_of_order_are_sorted_and_overlaps_keep_gdb_order() {
        // Two objects of one bundle whose functions overlap (nothing forbids it across
        // objects): the general path.
        let mut o1 = JitObject::new();
        let a = o1.add_function("a", 0x1000, 0x20).unwrap();
        o1.set_lines(a, "x.js", &rows(&[(0, 1), (0x10, 2)]))
            .unwrap();
        let mut o2 = JitObject::new();
        let b = o2.add_function("b", 0x1010, 0x20).unwrap();
        o2.set_lines(b, "x.js", &rows(&[(0, 7), (4, 6)])).unwrap();
        let d = vec![
            Decoded {
                object: o1,
                live: None,
            },
            Decoded {
                object: o2,
                live: None,
            },
        ];
        let p = plan(&d).unwrap();
        assert_eq!(names(&p, 0), ["a", "b"]);
        assert_eq!(
            lines_of(&p, 0),
            [
                (0x1000, 1),
                (0x1010, 2),
                (0x1010, 7),
                (0x1014, 6),
                (0x1020, 0),
                (0x1030, 0)
            ]
        );
    }

    #[test]
    fn names_with_nul_are_refused() {
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 0x10).unwrap();
        o.set_lines(f, "x.js", &rows(&[(0, 1)])).unwrap();
        let mut p = Plan::default();
        assert!(p
            .push_str("the function name", "a\0b")
            .unwrap_err()
            .contains("a\\0b"));
        let at = p.push_str("n", "ok").unwrap();
        assert_eq!(p.str_at(at).to_str().unwrap(), "ok");
        assert!(plan(&one(o)).is_ok());
    }

    /// Target memory as a map of 8-byte words, counting reads.
    #[derive(Default)]
    struct Words {
        words: std::collections::HashMap<u64, u64>,
        reads: std::cell::Cell<usize>,
    }

    impl Memory for Words {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            self.reads.set(self.reads.get() + 1);
            for (i, chunk) in buf.chunks_mut(8).enumerate() {
                let Some(w) = self.words.get(&(addr + 8 * i as u64)) else {
                    return false;
                };
                chunk.copy_from_slice(&w.to_le_bytes()[..chunk.len()]);
            }
            true
        }
    }

    fn with_slot(name: &str, start: u64, slot: Option<(u64, u64)>) -> Decoded {
        let mut o = JitObject::new();
        o.add_function(name, start, 0x10).unwrap();
        Decoded {
            object: o,
            live: slot.map(|(address, key)| LiveCheck { address, key }),
        }
    }

    #[test]
    fn tombstones_are_dropped_and_unreadable_slots_count_as_live() {
        let mut mem = Words::default();
        // Slots 0x500.. are adjacent (read together); 0x5000 is unreadable, 0x9000 far away.
        mem.words.insert(0x500, 11);
        mem.words.insert(0x508, 0); // cleared: unregistered
        mem.words.insert(0x510, 13);
        mem.words.insert(0x9000, 99); // reused for something else
        let d = vec![
            with_slot("live_a", 0x1000, Some((0x500, 11))),
            with_slot("gone_b", 0x1010, Some((0x508, 12))),
            with_slot("live_c", 0x1020, Some((0x510, 13))),
            with_slot("no_slot", 0x1030, None),
            with_slot("unreadable", 0x1040, Some((0x5000, 14))),
            with_slot("gone_e", 0x1050, Some((0x9000, 15))),
        ];
        let mut r = Records::from_decoded(&d);
        let gone = drop_tombstones(&mut r, &mem);
        let kept: Vec<&str> = r.all_functions().map(|f| f.name).collect();
        assert_eq!(kept, ["live_a", "live_c", "no_slot", "unreadable"]);
        let gone: Vec<(&str, usize, u64, u64)> = gone
            .iter()
            .map(|t| (t.first.as_str(), t.functions, t.live.address, t.found))
            .collect();
        assert_eq!(gone, [("gone_b", 1, 0x508, 0), ("gone_e", 1, 0x9000, 99)]);
        // [0x500, 0x518) in one read, then 0x5000 and 0x9000.
        assert_eq!(mem.reads.get(), 3);
        // What is left plans as usual, without the tombstones.
        let p = plan_records(&r).unwrap();
        let planned: Vec<&str> = (0..p.symtabs.len()).flat_map(|i| names(&p, i)).collect();
        assert_eq!(planned, kept);
    }

    #[test]
    fn without_live_slots_nothing_is_read() {
        let mem = Words::default();
        let d = vec![with_slot("f", 0x1000, None)];
        let mut r = Records::from_decoded(&d);
        assert!(drop_tombstones(&mut r, &mem).is_empty());
        assert_eq!((r.objects.len(), mem.reads.get()), (1, 0));
    }
}
