//! Address to function, offset and line: built once, then each lookup is two binary searches
//! (function, then line row).
//!
//! Functions from different entries or bundle objects may overlap (a runtime that reuses
//! code memory, or a core holding stale entries). The symbolizer flattens them into disjoint
//! segments first: where two functions overlap, the one that starts later owns the overlap
//! (the innermost, like a nested range), and the outer one owns what is left on either side.

use super::FunctionInfo;

/// What an address resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbol<'a> {
    pub function: &'a FunctionInfo,
    /// `addr - function.start`.
    pub offset: u64,
    /// Source line at the address, if the function has rows covering it.
    pub line: Option<u32>,
}

impl Symbol<'_> {
    /// `file:line`, if both are known.
    pub fn location(&self) -> Option<String> {
        match (&self.function.file, self.line) {
            (Some(f), Some(l)) => Some(format!("{f}:{l}")),
            _ => None,
        }
    }
}

/// Resolves addresses against a fixed set of functions in O(log n) each.
#[derive(Debug, Clone, Default)]
pub struct Symbolizer {
    functions: Vec<FunctionInfo>,
    /// Segment starts, sorted; segment `k` is `[starts[k], ends[k])`, owned by
    /// `functions[owner[k]]`. Separate arrays keep the searched one dense in cache.
    starts: Vec<u64>,
    ends: Vec<u64>,
    owner: Vec<u32>,
}

impl Symbolizer {
    /// Builds the lookup structure: O(n log n). Functions of size 0 cover no address.
    pub fn new(functions: Vec<FunctionInfo>) -> Symbolizer {
        let mut order: Vec<usize> = (0..functions.len())
            .filter(|&i| functions[i].size > 0)
            .collect();
        // Outer before inner at one start address, so the inner one ends up on top.
        order.sort_by(|&a, &b| {
            let (fa, fb) = (&functions[a], &functions[b]);
            fa.start
                .cmp(&fb.start)
                .then(fb.end().cmp(&fa.end()))
                .then(a.cmp(&b))
        });
        let mut s = Symbolizer {
            starts: Vec::with_capacity(order.len()),
            ends: Vec::with_capacity(order.len()),
            owner: Vec::with_capacity(order.len()),
            functions: Vec::new(),
        };
        // Open functions, innermost on top; `cur` is where the top one's ownership begins.
        let mut stack: Vec<usize> = Vec::new();
        let mut cur = 0u64;
        for &i in &order {
            let start = functions[i].start;
            s.close_until(&functions, &mut stack, &mut cur, start);
            if let Some(&top) = stack.last() {
                s.emit(cur, start, top);
            }
            cur = start;
            stack.push(i);
        }
        s.close_until(&functions, &mut stack, &mut cur, u64::MAX);
        // An index that does not fit in u32 cannot occur: 2^32 functions need 100+ GiB.
        s.functions = functions;
        s
    }

    /// Pops every open function that ends at or before `limit`, emitting what it still owns.
    fn close_until(
        &mut self,
        functions: &[FunctionInfo],
        stack: &mut Vec<usize>,
        cur: &mut u64,
        limit: u64,
    ) {
        while let Some(&top) = stack.last() {
            let end = functions[top].end();
            if end > limit {
                break;
            }
            self.emit(*cur, end, top);
            *cur = (*cur).max(end);
            stack.pop();
        }
    }

    fn emit(&mut self, start: u64, end: u64, owner: usize) {
        if start < end {
            self.starts.push(start);
            self.ends.push(end);
            self.owner.push(owner as u32);
        }
    }

    /// The functions, in the order given.
    pub fn functions(&self) -> &[FunctionInfo] {
        &self.functions
    }

    /// Number of disjoint address segments (equal to the number of non-empty functions when
    /// none overlap).
    pub fn segments(&self) -> usize {
        self.starts.len()
    }

    /// The function containing `addr`, with the offset and line.
    pub fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        let k = self.starts.partition_point(|&s| s <= addr).checked_sub(1)?;
        if addr >= self.ends[k] {
            return None;
        }
        let function = &self.functions[self.owner[k] as usize];
        let line = {
            let rows = &function.lines;
            let j = rows.partition_point(|&(a, _)| a <= addr);
            j.checked_sub(1).map(|j| rows[j].1)
        };
        Some(Symbol {
            function,
            offset: addr - function.start,
            line,
        })
    }
}
