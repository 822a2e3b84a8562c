//! Symbol tables for GDB, built from decoded payload objects as plain data first (a [`Plan`])
//! and only then handed to GDB's callbacks, so the shaping rules are unit-tested here.
//!
//! Rules, from how GDB's JIT symbol callbacks work:
//! - One symtab per source file (a symtab has one file name); functions without lines share
//!   one symtab without a file name.
//! - A block per function, then its nested blocks with their parents. GDB keeps each
//!   symtab's blocks in a list sorted by (start ascending, end descending) and inserts every
//!   new block by walking that list, so blocks are opened in exactly that order: each
//!   insertion is then O(1), and parents (which contain their children) come first.
//! - One line table per symtab: `line_mapping_add` replaces the table, it does not append.
//!   All rows of all the symtab's functions go in at once, sorted by address, and each
//!   function's end gets a line-0 row (GDB's end-of-sequence marker) unless another row
//!   starts there, so that addresses after a function's last row are not given its line.

use std::collections::BTreeMap;
use std::ffi::CString;

use jit_interface::{Decoded, Function};

/// Everything GDB is told about one payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub symtabs: Vec<SymtabPlan>,
}

/// One symtab: a source file's functions, blocks and line table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymtabPlan {
    /// `None`: functions without source lines.
    pub file: Option<CString>,
    /// In the order they are to be opened; never empty.
    pub blocks: Vec<BlockPlan>,
    /// Sorted by address; line 0 marks the end of a function's rows.
    pub lines: Vec<LinePlan>,
}

/// One block: a function, or a nested block of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockPlan {
    pub begin: u64,
    pub end: u64,
    pub name: CString,
    /// Index of the enclosing block in the same symtab (always an earlier one).
    pub parent: Option<usize>,
}

/// One line-table row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinePlan {
    pub pc: u64,
    pub line: i32,
}

fn c_string(what: &str, s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|_| format!("{what} `{}` contains a NUL byte", s.replace('\0', "\\0")))
}

/// Builds the symbol tables of a payload's objects. Errors name the first problem found
/// (the decoder validates; this guards what GDB would be given all the same).
pub fn plan(decoded: &[Decoded]) -> Result<Plan, String> {
    let mut by_file: BTreeMap<Option<&str>, Vec<&Function>> = BTreeMap::new();
    for d in decoded {
        for f in d.object.functions() {
            by_file.entry(f.file()).or_default().push(f);
        }
    }
    let mut symtabs = Vec::with_capacity(by_file.len());
    for (file, fns) in by_file {
        let file = file.map(|f| c_string("the file name", f)).transpose()?;
        symtabs.push(SymtabPlan {
            file,
            blocks: blocks(&fns)?,
            lines: lines(&fns)?,
        });
    }
    Ok(Plan { symtabs })
}

struct RawBlock {
    begin: u64,
    end: u64,
    name: CString,
    parent: Option<usize>,
}

fn blocks(fns: &[&Function]) -> Result<Vec<BlockPlan>, String> {
    let mut raw: Vec<RawBlock> = Vec::new();
    for f in fns {
        let start = f.start();
        let end = start
            .checked_add(u64::from(f.size()))
            .filter(|&e| e > start)
            .ok_or_else(|| {
                format!(
                    "function `{}` at {start:#x} has an empty or wrapping range",
                    f.name()
                )
            })?;
        let fb = raw.len();
        raw.push(RawBlock {
            begin: start,
            end,
            name: c_string("the function name", f.name())?,
            parent: None,
        });
        for (j, b) in f.blocks().iter().enumerate() {
            let bad =
                |why: String| format!("function `{}`, block {j} `{}`: {why}", f.name(), b.name);
            let parent = match b.parent {
                None => fb,
                Some(p) if (p as usize) < j => fb + 1 + p as usize,
                Some(p) => return Err(bad(format!("its parent {p} does not come before it"))),
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
            raw.push(RawBlock {
                begin,
                end: bend,
                name: c_string("the block name", &b.name)?,
                parent: Some(parent),
            });
        }
    }
    // GDB's order; ties keep creation order, so a parent still precedes an equal child.
    let mut order: Vec<usize> = (0..raw.len()).collect();
    order.sort_by(|&a, &b| {
        (raw[a].begin, std::cmp::Reverse(raw[a].end), a).cmp(&(
            raw[b].begin,
            std::cmp::Reverse(raw[b].end),
            b,
        ))
    });
    let mut new_pos = vec![0usize; raw.len()];
    for (pos, &old) in order.iter().enumerate() {
        new_pos[old] = pos;
    }
    let mut slots: Vec<Option<RawBlock>> = raw.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    for &old in &order {
        let Some(b) = slots[old].take() else {
            return Err("internal error: a block was ordered twice".into());
        };
        let parent = b.parent.map(|p| new_pos[p]);
        if parent.is_some_and(|p| p >= out.len()) {
            return Err("internal error: a block would be opened before its parent".into());
        }
        out.push(BlockPlan {
            begin: b.begin,
            end: b.end,
            name: b.name,
            parent,
        });
    }
    Ok(out)
}

fn lines(fns: &[&Function]) -> Result<Vec<LinePlan>, String> {
    // (pc, 0 for a real row / 1 for an end marker, line): real rows sort before markers.
    let mut rows: Vec<(u64, u8, i32)> = Vec::new();
    for f in fns {
        if f.lines().is_empty() {
            continue;
        }
        let start = f.start();
        for (i, r) in f.lines().iter().enumerate() {
            let bad = |why: String| format!("function `{}`, line row {i}: {why}", f.name());
            if r.offset >= f.size() {
                return Err(bad(format!(
                    "offset {} is outside the function (size {})",
                    r.offset,
                    f.size()
                )));
            }
            let line = i32::try_from(r.line)
                .ok()
                .filter(|&l| l > 0)
                .ok_or_else(|| bad(format!("line {} is not between 1 and {}", r.line, i32::MAX)))?;
            rows.push((start + u64::from(r.offset), 0, line));
        }
        rows.push((start + u64::from(f.size()), 1, 0));
    }
    rows.sort_unstable();
    let mut out: Vec<LinePlan> = Vec::with_capacity(rows.len());
    for (pc, kind, line) in rows {
        if kind == 1 && out.last().is_some_and(|l: &LinePlan| l.pc == pc) {
            continue;
        }
        out.push(LinePlan { pc, line });
    }
    if i32::try_from(out.len()).is_err() {
        return Err(format!(
            "{} line rows in one source file: GDB takes at most {}",
            out.len(),
            i32::MAX
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jit_interface::{JitObject, LineRow};

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
        let files: Vec<Option<&str>> = p
            .symtabs
            .iter()
            .map(|s| s.file.as_deref().map(|f| f.to_str().unwrap()))
            .collect();
        assert_eq!(files, [None, Some("x.js"), Some("y.js")]);
        let x = &p.symtabs[1];
        let names: Vec<&str> = x.blocks.iter().map(|b| b.name.to_str().unwrap()).collect();
        assert_eq!(names, ["b", "a"], "blocks in address order");
        let lines: Vec<(u64, i32)> = x.lines.iter().map(|l| (l.pc, l.line)).collect();
        assert_eq!(
            lines,
            [
                (0x1000, 10),
                (0x1010, 0),
                (0x2000, 1),
                (0x2004, 2),
                (0x2010, 0)
            ]
        );
        assert!(p.symtabs[0].lines.is_empty());
        assert_eq!(p.symtabs[0].blocks.len(), 1);
    }

    #[test]
    fn end_marker_dropped_where_the_next_function_starts() {
        let mut o = JitObject::new();
        let a = o.add_function("a", 0x1000, 0x10).unwrap();
        o.set_lines(a, "x.js", &rows(&[(0, 1)])).unwrap();
        let b = o.add_function("b", 0x1010, 0x10).unwrap();
        o.set_lines(b, "x.js", &rows(&[(0, 5)])).unwrap();
        let p = plan(&one(o)).unwrap();
        let lines: Vec<(u64, i32)> = p.symtabs[0].lines.iter().map(|l| (l.pc, l.line)).collect();
        assert_eq!(lines, [(0x1000, 1), (0x1010, 5), (0x1020, 0)]);
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
        let got: Vec<(&str, Option<&str>)> = p.symtabs[0]
            .blocks
            .iter()
            .map(|b| {
                (
                    b.name.to_str().unwrap(),
                    b.parent
                        .map(|i| p.symtabs[0].blocks[i].name.to_str().unwrap()),
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
        for (i, b) in p.symtabs[0].blocks.iter().enumerate() {
            assert!(b.parent.map_or(true, |p| p < i));
        }
    }

    #[test]
    fn bundles_merge_by_file() {
        let mut o1 = JitObject::new();
        let a = o1.add_function("a", 0x1000, 0x10).unwrap();
        o1.set_lines(a, "x.js", &rows(&[(0, 1)])).unwrap();
        let mut o2 = JitObject::new();
        let b = o2.add_function("b", 0x2000, 0x10).unwrap();
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
        assert_eq!(p.symtabs.len(), 1);
        assert_eq!(p.symtabs[0].blocks.len(), 2);
    }
}
