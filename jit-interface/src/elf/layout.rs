//! Where things go: functions in address order, grouped into runs of adjacent code (one
//! NOBITS `.text` section each), and into compile units by source file.

use crate::model::{Function, JitObject};

/// Largest gap between two functions of one object that one `.text` section may span.
/// Gaps this small are alignment padding; a larger gap may hold another object's code, and
/// a section covering it would make the debugger attribute that code to this object.
pub(super) const MAX_PADDING: u64 = 15;

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
    /// Indices into [`Layout::functions`].
    pub functions: Vec<usize>,
}

/// A file without a unit yet.
const NO_UNIT: usize = usize::MAX;

/// The plan of one object.
#[derive(Debug)]
pub(super) struct Layout<'a> {
    /// The object's functions in address order.
    pub functions: Vec<Function<'a>>,
    /// The `.text` run of each entry of `functions`.
    pub run_of: Vec<usize>,
    pub runs: Vec<Run>,
    /// Compile units in order of their lowest address.
    pub units: Vec<Unit<'a>>,
    /// Does any function have call sites?
    pub has_calls: bool,
}

impl<'a> Layout<'a> {
    /// Plans `object`, which must have passed [`JitObject::validate`] (non-empty, no overlap).
    pub fn new(object: &'a JitObject) -> Layout<'a> {
        let mut functions: Vec<Function> = object.functions().iter().collect();
        // Runtimes usually add functions in address order.
        if !functions.windows(2).all(|w| w[0].start() <= w[1].start()) {
            functions.sort_by_key(|f| f.start());
        }

        let mut runs: Vec<Run> = Vec::new();
        let mut run_of = Vec::with_capacity(functions.len());
        let mut has_calls = false;
        for f in &functions {
            has_calls |= !f.calls().is_empty();
            match runs.last_mut() {
                // Validation guarantees f.start() >= last.end (no overlap).
                Some(last) if f.start() - last.end <= MAX_PADDING => last.end = f.end(),
                _ => runs.push(Run {
                    start: f.start(),
                    end: f.end(),
                }),
            }
            run_of.push(runs.len() - 1);
        }

        // Units by file index (0: no file), in a table: one slot per file of the object.
        let mut units: Vec<Unit> = Vec::new();
        let slots = object.file_count() + 1;
        let mut few = [NO_UNIT; 8];
        let mut many = Vec::new();
        let unit_of: &mut [usize] = if slots <= few.len() {
            &mut few[..slots]
        } else {
            many.resize(slots, NO_UNIT);
            &mut many
        };
        for (i, f) in functions.iter().enumerate() {
            let slot = f.file_index().map_or(0, |k| k + 1);
            if unit_of[slot] == NO_UNIT {
                unit_of[slot] = units.len();
                units.push(Unit {
                    file: f.file(),
                    functions: Vec::new(),
                });
            }
            units[unit_of[slot]].functions.push(i);
        }

        Layout {
            functions,
            run_of,
            runs,
            units,
            has_calls,
        }
    }
}

/// Splits the functions of a unit (indices into `functions`, in address order) into
/// maximal groups of neighbouring functions: `[start, end)` address ranges. Two functions
/// are neighbours if no other function of the object lies between them and the gap is at
/// most [`MAX_PADDING`] (which then belongs to the range: it is never executed).
pub(super) fn adjacent_ranges(functions: &[Function], unit: &[usize]) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut prev: Option<usize> = None;
    for &i in unit {
        let f = functions[i];
        match ranges.last_mut() {
            Some(last) if neighbours(functions, prev, i) => last.1 = f.end(),
            _ => ranges.push((f.start(), f.end())),
        }
        prev = Some(i);
    }
    ranges
}

/// Is `functions[next]` the function right after `functions[prev]`, at most
/// [`MAX_PADDING`] bytes after its end?
pub(super) fn neighbours(functions: &[Function], prev: Option<usize>, next: usize) -> bool {
    prev.is_some_and(|p| {
        p + 1 == next && functions[next].start() - functions[p].end() <= MAX_PADDING
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JitObject, LineRow};

    #[test]
    fn runs_split_at_gaps_larger_than_padding() {
        let mut o = JitObject::new();
        // Added out of order on purpose.
        o.add_function("c", 0x2000, 0x10).unwrap();
        o.add_function("a", 0x1000, 0x20).unwrap();
        o.add_function("b", 0x1020 + MAX_PADDING, 0x10).unwrap();
        let l = Layout::new(&o);
        let names: Vec<&str> = l.functions.iter().map(|f| f.name()).collect();
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
        assert_eq!(l.run_of, [0, 0, 1]);
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
        let l = Layout::new(&o);
        let files: Vec<Option<&str>> = l.units.iter().map(|u| u.file).collect();
        assert_eq!(files, [Some("x.js"), Some("y.js"), None]);
        assert_eq!(l.units[0].functions, [0, 3]);
        assert_eq!(
            adjacent_ranges(&l.functions, &l.units[0].functions),
            [(0x1000, 0x1010), (0x1030, 0x1040)]
        );
        assert_eq!(l.runs.len(), 1);
    }
}
