//! Where things go: functions in address order, grouped into runs of adjacent code (one
//! NOBITS `.text` section each), and into compile units by source file. Planning also
//! makes the checks of [`JitObject::validate`] on the objects as one payload, in the same
//! pass.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use super::scratch::recycle;
use crate::error::{Error, Result};
use crate::model::{Function, JitObject};

/// Largest gap between two functions of one object that one `.text` section may span.
/// Gaps this small are alignment padding; a larger gap may hold another object's code, and
/// a section covering it would make the debugger attribute that code to this object.
pub(super) const MAX_PADDING: u64 = 15;

/// Largest gap between two functions that one `.text` section spans when the caller knows
/// the gap holds no one else's code ([`Spans::Free`]). Larger gaps may be another mapping
/// (another runtime's pages, which we cannot see): a page or more is never spanned.
pub(crate) const MAX_BRIDGE: u64 = 4096;

/// Which gaps between functions a payload's `.text` sections may span.
///
/// GDB keeps every section of every objfile in one sorted map, sorted again after each
/// change of objfiles (every JIT stop that adds or drops an entry): with one section per
/// function, gapped code (alignment, constant pools, stubs: every real runtime) made GDB
/// 5-7x slower than the same code without gaps. But GDB ignores a section that lies inside
/// another objfile's section ("unexpected overlap ... Will ignore section B"), so a section
/// may only span a gap that holds no one else's code: only the caller knows that.
#[derive(Clone, Copy)]
pub(crate) enum Spans<'s> {
    /// Alignment padding only (up to [`MAX_PADDING`]): nothing is known of larger gaps.
    Padding,
    /// Also a gap under [`MAX_BRIDGE`] bytes `[end, start)` between two functions when
    /// `free(end, start)` says it holds no one else's code.
    Free(&'s dyn Fn(u64, u64) -> bool),
}

impl Spans<'_> {
    /// May one section go on from a function ending at `end` to one starting at `start`?
    #[inline]
    fn joins(&self, end: u64, start: u64) -> bool {
        let gap = start - end;
        gap <= MAX_PADDING
            || match self {
                Spans::Padding => false,
                Spans::Free(free) => gap < MAX_BRIDGE && free(end, start),
            }
    }
}

/// Name of the compile unit that holds functions without a source file.
pub(super) const NO_FILE_UNIT: &str = "<jit>";

/// A run of functions whose code is adjacent (up to [`MAX_PADDING`] between them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Run {
    pub start: u64,
    pub end: u64,
}

/// A compile unit: the functions of one source file (or of none), in address order.
#[derive(Debug, Clone)]
pub(super) struct Unit<'a> {
    /// The source file; `None` for functions without line rows.
    pub file: Option<&'a str>,
    /// Where its functions are in [`Layout::members`].
    members: Range<usize>,
}

/// A function in the plan.
#[derive(Clone, Copy)]
pub(super) struct Placed<'a> {
    pub f: Function<'a>,
    /// Position among the functions as given (objects in order, the functions of each in
    /// the order they were added): functions at the same address are taken in this order,
    /// as `JitObject::validate` takes them.
    seq: u32,
    /// Before sorting, the function's file (an index into the distinct file names, or
    /// [`NONE`]); then its unit.
    unit: u32,
}

/// No file, or no unit yet.
const NONE: u32 = u32::MAX;

/// Distinct file names of several objects found by scanning; beyond, a hash map finds them.
const SCAN_FILES: usize = 16;

/// The plan of one payload.
pub(super) struct Layout<'a> {
    /// The functions in address order.
    pub functions: Vec<Placed<'a>>,
    pub runs: Vec<Run>,
    /// Compile units in order of their lowest address.
    pub units: Vec<Unit<'a>>,
    /// The functions of each unit, unit after unit (see [`Layout::unit_functions`]).
    members: Vec<u32>,
    /// Offset of each function's name in the string table (`.strtab` and `.debug_str`: a
    /// NUL, then the names in address order, each NUL-terminated).
    pub name_offsets: Vec<u32>,
    /// Size of that string table.
    pub strings_len: usize,
    /// Does any function have call sites?
    pub has_calls: bool,
    /// Does any function have variables, lexical blocks or call sites? Without, every
    /// subprogram is one entry of the same shape and no unit has types.
    pub has_extras: bool,
    /// Storage used while planning only.
    spare: (Vec<&'static str>, Vec<u32>, Vec<u32>),
}

/// The storage of a [`Layout`], kept between payloads (see `scratch.rs`).
#[derive(Default)]
pub(super) struct Parts {
    functions: Vec<Placed<'static>>,
    runs: Vec<Run>,
    units: Vec<Unit<'static>>,
    members: Vec<u32>,
    name_offsets: Vec<u32>,
    /// The distinct file names, each object's file indices among them, each file's unit.
    files: Vec<&'static str>,
    file_ids: Vec<u32>,
    unit_of: Vec<u32>,
}

impl Parts {
    /// Bytes of storage held.
    pub fn bytes(&self) -> usize {
        use std::mem::size_of;
        self.functions.capacity() * size_of::<Placed>()
            + self.runs.capacity() * size_of::<Run>()
            + self.units.capacity() * size_of::<Unit>()
            + self.files.capacity() * size_of::<&str>()
            + (self.members.capacity()
                + self.name_offsets.capacity()
                + self.file_ids.capacity()
                + self.unit_of.capacity())
                * size_of::<u32>()
    }
}

impl<'a> Layout<'a> {
    /// Plans the functions of `objects` as one payload, in the storage of `parts`. Refuses
    /// what [`JitObject::validate`] refuses on the objects merged into one, with the same
    /// error: no function, more names or rows than one object holds, overlapping functions.
    pub fn new(
        objects: &[&'a JitObject],
        parts: &mut Parts,
        spans: Spans<'_>,
    ) -> Result<Layout<'a>> {
        // Vector by vector: moving the whole storage costs a copy of it.
        let functions = std::mem::take(&mut parts.functions);
        let mut runs = std::mem::take(&mut parts.runs);
        let units = std::mem::take(&mut parts.units);
        let mut members = std::mem::take(&mut parts.members);
        let mut name_offsets = std::mem::take(&mut parts.name_offsets);
        let files = std::mem::take(&mut parts.files);
        let mut file_ids = std::mem::take(&mut parts.file_ids);
        let mut unit_of = std::mem::take(&mut parts.unit_of);
        // Emptied while retyped.
        let mut functions: Vec<Placed<'a>> = recycle(functions);
        let mut units: Vec<Unit<'a>> = recycle(units);
        let mut files: Vec<&'a str> = recycle(files);
        runs.clear();
        members.clear();
        name_offsets.clear();

        let count: usize = objects.iter().map(|o| o.functions().len()).sum();
        if count == 0 {
            return Err(Error::EmptyObject);
        }
        JitObject::check_stored_together(objects)?;

        // One function (a runtime registering functions one by one): its plan, directly.
        if let ([o], 1) = (objects, count) {
            let f = o.functions().iter().next().expect("one function");
            functions.push(Placed { f, seq: 0, unit: 0 });
            runs.push(Run {
                start: f.start(),
                end: f.end(),
            });
            units.push(Unit {
                file: f.file(),
                members: 0..1,
            });
            members.push(0);
            name_offsets.push(1);
            files.clear();
            return Ok(Layout {
                functions,
                runs,
                units,
                members,
                name_offsets,
                strings_len: f.name_bytes().len() + 2,
                has_calls: !f.calls().is_empty(),
                has_extras: !f.calls().is_empty()
                    | !f.variables().is_empty()
                    | !f.blocks().is_empty(),
                spare: (recycle(files), file_ids, unit_of),
            });
        }

        // The functions as given, each with its file among the distinct file names (one
        // object's files are distinct already).
        functions.reserve(count);
        let mut index: Option<HashMap<&'a str, u32>> = None;
        let mut sorted = true;
        let mut last_start = 0;
        for o in objects {
            file_ids.clear();
            file_ids.resize(o.file_count(), NONE);
            for f in o.functions() {
                let file = match f.file_index() {
                    None => NONE,
                    Some(k) if file_ids[k] != NONE => file_ids[k],
                    Some(k) => {
                        let name = f.file().unwrap_or_default();
                        let known = if objects.len() == 1 {
                            None
                        } else if let Some(index) = &index {
                            index.get(name).copied()
                        } else {
                            (0..).zip(&files).find(|&(_, &n)| n == name).map(|(i, _)| i)
                        };
                        let id = known.unwrap_or_else(|| {
                            let id = files.len() as u32;
                            files.push(name);
                            match &mut index {
                                Some(index) => {
                                    index.insert(name, id);
                                }
                                None if objects.len() > 1 && files.len() > SCAN_FILES => {
                                    index = Some(files.iter().copied().zip(0..).collect());
                                }
                                None => {}
                            }
                            id
                        });
                        file_ids[k] = id;
                        id
                    }
                };
                sorted &= f.start() >= last_start;
                last_start = f.start();
                functions.push(Placed {
                    f,
                    seq: functions.len() as u32,
                    unit: file,
                });
            }
        }
        // Runtimes usually add functions in address order.
        if !sorted {
            functions.sort_unstable_by_key(|p| (p.f.start(), p.seq));
        }

        // Overlaps, runs, units and name offsets: one pass in address order.
        unit_of.clear();
        unit_of.resize(files.len() + 1, NONE);
        let mut has_calls = false;
        let mut has_extras = false;
        let mut strings = 1;
        let mut last_name = 0;
        let mut prev: Option<Function> = None;
        for p in &mut functions {
            let f = p.f;
            match (prev, runs.last_mut()) {
                (Some(before), _) if f.start() < before.end() => {
                    return Err(Error::Overlap {
                        first: before.name().to_string(),
                        second: f.name().to_string(),
                    });
                }
                (_, Some(last)) if spans.joins(last.end, f.start()) => last.end = f.end(),
                _ => runs.push(Run {
                    start: f.start(),
                    end: f.end(),
                }),
            }
            prev = Some(f);
            has_calls |= !f.calls().is_empty();
            has_extras |= !f.variables().is_empty() | !f.blocks().is_empty();
            // Slot 0: no file.
            let slot = p.unit.wrapping_add(1) as usize;
            if unit_of[slot] == NONE {
                unit_of[slot] = units.len() as u32;
                units.push(Unit {
                    file: f.file(),
                    members: 0..0,
                });
            }
            p.unit = unit_of[slot];
            // Counted here, placed below.
            units[p.unit as usize].members.end += 1;
            last_name = strings;
            name_offsets.push(strings as u32);
            strings += f.name_bytes().len() + 1;
        }
        // Names are found by 32-bit offsets (`DW_FORM_strp`, `st_name`).
        if u32::try_from(last_name).is_err() {
            return Err(Error::TooLarge(
                "the function names of one ELF object exceeds 4 GiB (32-bit DWARF)".into(),
            ));
        }

        // Each unit's functions in address order: a counting sort by unit.
        if let [unit] = &mut units[..] {
            members.extend(0..functions.len() as u32);
            unit.members = 0..functions.len();
        } else {
            let mut at = 0;
            for u in &mut units {
                let len = u.members.end;
                u.members = at..at;
                at += len;
            }
            members.resize(functions.len(), 0);
            for (i, p) in functions.iter().enumerate() {
                let m = &mut units[p.unit as usize].members;
                members[m.end] = i as u32;
                m.end += 1;
            }
        }

        Ok(Layout {
            functions,
            runs,
            units,
            members,
            name_offsets,
            strings_len: strings,
            has_calls,
            has_extras: has_extras | has_calls,
            spare: (recycle(files), file_ids, unit_of),
        })
    }

    /// Appends to `out` the runs (`.text` sections) that span a gap of more than
    /// [`MAX_PADDING`] bytes: what the registry must keep other code out of.
    pub fn spanning_runs(&self, out: &mut Vec<(u64, u64)>) {
        let mut fs = self.functions.iter().map(|p| p.f);
        for run in &self.runs {
            let mut end = run.start;
            let mut spans = false;
            for f in fs.by_ref() {
                spans |= f.start().saturating_sub(end) > MAX_PADDING;
                end = end.max(f.end());
                if end >= run.end {
                    break;
                }
            }
            if spans {
                out.push((run.start, run.end));
            }
        }
    }

    /// The functions of `unit`, as indices into [`Layout::functions`] in address order.
    pub fn unit_functions(&self, unit: &Unit) -> &[u32] {
        &self.members[unit.members.clone()]
    }

    /// Function `i` (an index into [`Layout::functions`]).
    #[inline]
    pub fn function(&self, i: u32) -> Function<'a> {
        self.functions[i as usize].f
    }

    /// Gives the storage back to `parts`, for the next payload.
    pub fn into_parts(self, parts: &mut Parts) {
        let (files, file_ids, unit_of) = self.spare;
        parts.functions = recycle(self.functions);
        parts.runs = self.runs;
        parts.units = recycle(self.units);
        parts.members = self.members;
        parts.name_offsets = self.name_offsets;
        parts.files = files;
        parts.file_ids = file_ids;
        parts.unit_of = unit_of;
    }
}

/// The source texts of `objects`, (file, text): one per file, the first object's that has
/// one (as `JitObject::merged` keeps), in order of first appearance. Empty (unallocated)
/// for objects without sources, nearly all. (Not part of [`Layout`]: the growing payload
/// plans objects without sources one by one, and a larger plan costs it moves.)
pub(super) fn sources_of<'a>(objects: &[&'a JitObject]) -> Vec<(&'a str, &'a str)> {
    let mut out: Vec<(&'a str, &'a str)> = Vec::new();
    let mut index: Option<HashSet<&'a str>> = None;
    for o in objects.iter().filter(|o| o.has_sources()) {
        for (file, text) in o.sources() {
            let known = match &index {
                Some(index) => index.contains(file),
                None => out.iter().any(|&(f, _)| f == file),
            };
            if known {
                continue;
            }
            out.push((file, text));
            match &mut index {
                Some(index) => {
                    index.insert(file);
                }
                None if out.len() > SCAN_FILES => {
                    index = Some(out.iter().map(|&(f, _)| f).collect());
                }
                None => {}
            }
        }
    }
    out
}

/// Splits the functions of a unit (indices into `layout.functions`, in address order) into
/// maximal groups of neighbouring functions: `[start, end)` address ranges, each given to
/// `range`. Two functions are neighbours if no other function of the object lies between
/// them and the gap is at most [`MAX_PADDING`] (which then belongs to the range: it is
/// never executed).
pub(super) fn adjacent_ranges(layout: &Layout, unit: &[u32], mut range: impl FnMut(u64, u64)) {
    // The only unit has every function: its neighbours are those of a run.
    if layout.units.len() == 1 {
        for run in &layout.runs {
            range(run.start, run.end);
        }
        return;
    }
    let mut open: Option<(u64, u64)> = None;
    let mut prev = None;
    for &i in unit {
        let f = layout.function(i);
        open = match open {
            Some((lo, _)) if neighbours(layout, prev, i) => Some((lo, f.end())),
            Some((lo, hi)) => {
                range(lo, hi);
                Some((f.start(), f.end()))
            }
            None => Some((f.start(), f.end())),
        };
        prev = Some(i);
    }
    if let Some((lo, hi)) = open {
        range(lo, hi);
    }
}

/// Is function `next` the function right after function `prev`, at most [`MAX_PADDING`]
/// bytes after its end?
#[inline]
pub(super) fn neighbours(layout: &Layout, prev: Option<u32>, next: u32) -> bool {
    prev.is_some_and(|p| {
        p + 1 == next && layout.function(next).start() - layout.function(p).end() <= MAX_PADDING
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JitObject, LineRow};

    fn plan<'a>(objects: &[&'a JitObject]) -> Layout<'a> {
        Layout::new(objects, &mut Parts::default(), Spans::Padding).unwrap()
    }

    /// The index of each function's run.
    fn run_of(l: &Layout) -> Vec<usize> {
        l.functions
            .iter()
            .map(|p| {
                l.runs
                    .iter()
                    .position(|r| r.start <= p.f.start() && p.f.end() <= r.end)
                    .unwrap()
            })
            .collect()
    }

    fn ranges(l: &Layout, unit: usize) -> Vec<(u64, u64)> {
        let mut got = Vec::new();
        adjacent_ranges(l, l.unit_functions(&l.units[unit]), |lo, hi| {
            got.push((lo, hi))
        });
        got
    }

    /// What a test can compare of a plan.
    fn summary(l: &Layout) -> String {
        let functions: Vec<_> = (l.functions.iter())
            .map(|p| (p.f.name(), p.f.start(), p.f.end(), p.seq, p.unit))
            .collect();
        let units: Vec<_> = l.units.iter().map(|u| (u.file, &u.members)).collect();
        format!(
            "{functions:?} {:?} {units:?} {:?} {:?} {} {} {}",
            l.runs, l.members, l.name_offsets, l.strings_len, l.has_calls, l.has_extras
        )
    }

    #[test]
    fn one_function_plans_as_in_general() {
        let empty = JitObject::new();
        let mut objects = Vec::new();
        let mut o = JitObject::new();
        o.add_function("bare", 0x1000, 0x10).unwrap();
        objects.push(o);
        let mut o = JitObject::new();
        let f = o.add_function("lines", 0x1000, 0x20).unwrap();
        let rows = [
            LineRow { offset: 0, line: 3 },
            LineRow { offset: 8, line: 4 },
        ];
        o.set_lines(f, "a.js", &rows).unwrap();
        objects.push(o);
        let mut o = JitObject::new();
        let f = o.add_function("block", 0x1000, 0x40).unwrap();
        o.set_lines(f, "b.js", &rows).unwrap();
        o.add_block(f, "loop", 4, 20, None).unwrap();
        objects.push(o);
        let mut o = JitObject::new();
        let f = o.add_function("caller", 0x1000, 0x40).unwrap();
        o.add_call_site(f, 8, crate::model::CallTarget::Address(0x9000))
            .unwrap();
        objects.push(o);
        for o in &objects {
            // With an empty object beside it, the general path plans the same function.
            assert_eq!(summary(&plan(&[o])), summary(&plan(&[o, &empty])));
        }
    }

    #[test]
    fn runs_split_at_gaps_larger_than_padding() {
        let mut o = JitObject::new();
        // Added out of order on purpose.
        o.add_function("c", 0x2000, 0x10).unwrap();
        o.add_function("a", 0x1000, 0x20).unwrap();
        o.add_function("b", 0x1020 + MAX_PADDING, 0x10).unwrap();
        let l = plan(&[&o]);
        let names: Vec<&str> = l.functions.iter().map(|p| p.f.name()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(
            l.runs,
            [
                Run {
                    start: 0x1000,
                    end: 0x1030 + MAX_PADDING
                },
                Run {
                    start: 0x2000,
                    end: 0x2010
                }
            ]
        );
        assert_eq!(run_of(&l), [0, 0, 1]);
        // The string table: a NUL, then the names in address order.
        assert_eq!((&l.name_offsets[..], l.strings_len), (&[1, 3, 5][..], 7));
    }

    #[test]
    fn units_group_by_file() {
        let mut o = JitObject::new();
        let a = o.add_function("a", 0x1000, 0x10).unwrap();
        let b = o.add_function("b", 0x1010, 0x10).unwrap();
        o.add_function("n", 0x1020, 0x10).unwrap();
        let c = o.add_function("c", 0x1030, 0x10).unwrap();
        let row = [LineRow { offset: 0, line: 1 }];
        o.set_lines(a, "x.js", &row).unwrap();
        o.set_lines(b, "y.js", &row).unwrap();
        o.set_lines(c, "x.js", &row).unwrap();
        let l = plan(&[&o]);
        let files: Vec<Option<&str>> = l.units.iter().map(|u| u.file).collect();
        assert_eq!(files, [Some("x.js"), Some("y.js"), None]);
        assert_eq!(l.unit_functions(&l.units[0]), [0, 3]);
        assert_eq!(ranges(&l, 0), [(0x1000, 0x1010), (0x1030, 0x1040)]);
        assert_eq!(l.runs.len(), 1);
    }

    /// Objects planned together: their files are shared by name, their functions in one
    /// address order, overlaps between them refused.
    #[test]
    fn several_objects_share_units_by_file_name() {
        let row = [LineRow { offset: 0, line: 1 }];
        let mut x = JitObject::new();
        let f = x.add_function("x1", 0x2000, 0x10).unwrap();
        x.set_lines(f, "b.js", &row).unwrap();
        let f = x.add_function("x2", 0x1000, 0x10).unwrap();
        x.set_lines(f, "a.js", &row).unwrap();
        let mut y = JitObject::new();
        let f = y.add_function("y1", 0x1010, 0x10).unwrap();
        y.set_lines(f, "a.js", &row).unwrap();
        y.add_function("y2", 0x3000, 0x10).unwrap();
        let l = plan(&[&x, &y]);
        let names: Vec<&str> = l.functions.iter().map(|p| p.f.name()).collect();
        assert_eq!(names, ["x2", "y1", "x1", "y2"]);
        let files: Vec<Option<&str>> = l.units.iter().map(|u| u.file).collect();
        assert_eq!(files, [Some("a.js"), Some("b.js"), None]);
        assert_eq!(l.unit_functions(&l.units[0]), [0, 1]);
        assert_eq!(ranges(&l, 0), [(0x1000, 0x1020)]);

        let mut z = JitObject::new();
        z.add_function("z", 0x1018, 0x10).unwrap();
        let e = Layout::new(&[&x, &y, &z], &mut Parts::default(), Spans::Padding).err();
        assert_eq!(
            e,
            Some(Error::Overlap {
                first: "y1".into(),
                second: "z".into()
            })
        );
        let empty = JitObject::new();
        assert_eq!(
            Layout::new(&[&empty, &empty], &mut Parts::default(), Spans::Padding).err(),
            Some(Error::EmptyObject)
        );
    }
}
