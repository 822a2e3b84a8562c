//! Address to function, offset and line: built once, then each lookup is two binary searches
//! (function, then line row).
//!
//! # The overlap rule
//!
//! Functions from different entries or bundle objects may overlap (a runtime that reuses
//! code memory, or a core holding stale entries). Every consumer of the project resolves
//! such addresses the same way: **the most recently registered function owns the addresses
//! it covers; an older function keeps only the addresses no newer one covers** (possibly in
//! pieces on either side). It is what a process that reuses code memory means: the newest
//! registration describes the code now there. The GDB reader's index applies it as
//! registrations arrive; here the functions come in registration order, oldest first
//! ([`super::ListReport::functions_oldest_first`]: entries from the tail of GDB's list to
//! its head, each payload in payload order), and a function later in the slice is newer.
//! `docs/DESIGN.md` ("Reading the entry list") says the same for users.

use std::collections::BinaryHeap;

use super::FunctionInfo;

/// What an address resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbol<'a> {
    pub function: &'a FunctionInfo,
    /// `addr - function.start`.
    pub offset: u64,
    /// Source line at the address, if the function has rows covering it (`None` in a gap).
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

/// One disjoint address range, owned by one function.
#[derive(Debug, Clone, Copy)]
struct Segment {
    end: u64,
    /// Start of the owning function (the offset is relative to it).
    function_start: u64,
    owner: u32,
    /// The segment's line rows are `rows[rows_from..]` up to the next segment's.
    rows_from: u32,
}

/// Resolves addresses against a fixed set of functions in O(log n) each.
///
/// Laid out for lookups by the million: the searched starts are a dense array of their own;
/// everything else a lookup needs sits in one 24-byte segment record and in one array of
/// line rows stored in address order, so a lookup touches a few cache lines and never the
/// functions themselves (until the caller reads the name).
#[derive(Debug, Clone, Default)]
pub struct Symbolizer {
    functions: Vec<FunctionInfo>,
    /// Segment starts, sorted; `segments[k]` covers `[starts[k], segments[k].end)`.
    starts: Vec<u64>,
    segments: Vec<Segment>,
    /// (offset from the owning function's start, line) rows of all segments, each
    /// segment's in address order. 8 bytes a row rather than 16: the rows are the one
    /// array a lookup reads at a random place, so their size decides the cache and TLB
    /// misses. Rows more than 4 GiB into a function (no real code is that large; functions
    /// of both payload formats are below 4 GiB) are not kept.
    rows: Vec<(u32, u32)>,
}

impl Symbolizer {
    /// Builds the lookup structure: O(n log n) in functions plus linear in line rows.
    /// `functions` are in registration order, oldest first: where they overlap, the later
    /// one owns the shared addresses (see the module's overlap rule). Functions of size 0
    /// cover no address.
    pub fn new(functions: Vec<FunctionInfo>) -> Symbolizer {
        let mut order: Vec<usize> = (0..functions.len())
            .filter(|&i| functions[i].size > 0)
            .collect();
        order.sort_by_key(|&i| functions[i].start);
        // Every start and end: between two consecutive ones, the set of covering functions
        // does not change, and its newest member owns the addresses.
        let mut bounds: Vec<u64> = order
            .iter()
            .flat_map(|&i| [functions[i].start, functions[i].end()])
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut s = Symbolizer {
            starts: Vec::with_capacity(order.len()),
            segments: Vec::with_capacity(order.len()),
            rows: Vec::new(),
            functions: Vec::new(),
        };
        // Covering functions, newest on top; ended ones leave lazily when they reach the top.
        let mut open: BinaryHeap<usize> = BinaryHeap::new();
        let mut next = 0;
        // The run being built: [start, end) owned by one function.
        let mut run: Option<(u64, u64, usize)> = None;
        for (k, &at) in bounds.iter().enumerate() {
            while next < order.len() && functions[order[next]].start <= at {
                open.push(order[next]);
                next += 1;
            }
            while open.peek().is_some_and(|&top| functions[top].end() <= at) {
                open.pop();
            }
            let (Some(&owner), Some(&upto)) = (open.peek(), bounds.get(k + 1)) else {
                continue;
            };
            match &mut run {
                Some((_, end, o)) if *o == owner && *end == at => *end = upto,
                _ => {
                    if let Some((a, b, o)) = run.take() {
                        s.emit(&functions, a, b, o);
                    }
                    run = Some((at, upto, owner));
                }
            }
        }
        if let Some((a, b, o)) = run {
            s.emit(&functions, a, b, o);
        }
        s.functions = functions;
        s
    }

    fn emit(&mut self, functions: &[FunctionInfo], start: u64, end: u64, owner: usize) {
        if start >= end {
            return;
        }
        let f = &functions[owner];
        // The rows inside [start, end), preceded by the row in effect at `start` when the
        // segment begins inside a row (a function split around a nested one).
        let lines = &f.lines;
        let first = lines.partition_point(|&(a, _)| a <= start);
        let from = first.saturating_sub(1);
        let upto = lines.partition_point(|&(a, _)| a < end);
        // More than 2^32 segments or rows would need 100+ GiB of input: the indices fit.
        self.starts.push(start);
        self.segments.push(Segment {
            end,
            function_start: f.start,
            owner: owner as u32,
            rows_from: self.rows.len() as u32,
        });
        if from < upto {
            self.rows.extend(
                lines[from..upto].iter().filter_map(|&(a, l)| {
                    u32::try_from(a.wrapping_sub(f.start)).ok().map(|o| (o, l))
                }),
            );
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

    /// The disjoint address ranges in address order, `(start, end, owner)` with `owner` an
    /// index into [`Symbolizer::functions`]: what each function owns under the overlap rule
    /// (a function may own several pieces, or none).
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64, usize)> + '_ {
        self.starts
            .iter()
            .zip(&self.segments)
            .map(|(&start, seg)| (start, seg.end, seg.owner as usize))
    }

    /// The function containing `addr`, with the offset and line.
    #[inline]
    pub fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        let k = self.starts.partition_point(|&s| s <= addr).checked_sub(1)?;
        let seg = self.segments[k];
        if addr >= seg.end {
            return None;
        }
        let from = seg.rows_from as usize;
        let upto = self
            .segments
            .get(k + 1)
            .map_or(self.rows.len(), |n| n.rows_from as usize);
        let rows = &self.rows[from..upto];
        let offset = addr - seg.function_start;
        let j = rows.partition_point(|&(o, _)| u64::from(o) <= offset);
        // A gap row (line 0) covers its addresses with no line.
        let line = j.checked_sub(1).map(|j| rows[j].1).filter(|&l| l != 0);
        Some(Symbol {
            function: &self.functions[seg.owner as usize],
            offset,
            line,
        })
    }
}
