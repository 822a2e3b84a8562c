//! The index of registered code: every function of every payload the reader accepted, by
//! address, for the unwinder.
//!
//! The unwinder is asked about every frame of every backtrace, so a lookup is one search in
//! a sorted map (O(log n)) plus one binary search, and PCs outside all JIT code are declined
//! without touching target memory. The map holds disjoint address ranges: a newer
//! registration that covers addresses of an older one takes them over (the older one keeps
//! what is left).
//!
//! GDB never tells a reader that an entry was unregistered, and freed code addresses get
//! reused. So a function is trusted only after its object's live slot has been read from the
//! target and still holds the object's key; objects found dead are dropped for good (a key
//! is never stored again once cleared). Payloads without a live slot are trusted as long as
//! no newer registration covers their addresses.
//!
//! Storage is compact because the index lives as long as GDB does and a process may hold
//! hundreds of thousands of functions: a payload becomes one `Table` (a record of 24
//! bytes per function, the names in one string, unwind rows shared by consecutive
//! functions that have the same ones), and the map holds one range per run of adjacent
//! functions (across the consecutive objects of a bundle as long as they follow each other
//! in address order) rather than one per function. A table is freed as soon as no range
//! refers to it (all of its objects superseded by newer registrations or found dead).

use std::collections::BTreeMap;
use std::ops::{Bound, Range};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use jit_interface::{Arch, Decoded, LiveCheck, Liveness, SavedRegister, UnwindRow};

use crate::memory::Memory;
use crate::records::{Func, Records};
use crate::unwind::ArchSet;

/// One registered object of a payload: the unit that is registered and unregistered
/// together, with its own live slot.
#[derive(Debug)]
struct Entry {
    live: Option<LiveCheck>,
    dead: AtomicBool,
    arch: Arch,
    /// Its functions in [`Table::funcs`], sorted by start address.
    funcs: Range<u32>,
}

impl Entry {
    /// Is the object still registered? Reads the live slot; a dead object stays dead.
    fn is_live(&self, mem: &dyn Memory) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return false;
        }
        let Some(live) = self.live else {
            return true;
        };
        // An unreadable slot (freed and unmapped, or missing from a core) proves nothing
        // alive: such code gets no unwinding rather than possibly stale rows.
        if live.state(mem.read_u64(live.address)) == Liveness::Live {
            true
        } else {
            self.dead.store(true, Ordering::Relaxed);
            false
        }
    }
}

/// One function of a [`Table`].
#[derive(Debug, Clone, Copy)]
struct FnRec {
    start: u64,
    size: u32,
    /// End of its name in [`Table::names`]; the name starts where the previous one ends.
    name_end: u32,
    /// Its rows in [`Table::rows`] (shared with the previous function when equal).
    rows_start: u32,
    rows_len: u32,
}

impl FnRec {
    fn end(&self) -> u64 {
        self.start + u64::from(self.size)
    }
}

/// The functions of one payload (all its objects), in one allocation each for records,
/// names and rows.
#[derive(Debug)]
struct Table {
    objects: Box<[Entry]>,
    funcs: Box<[FnRec]>,
    names: Box<str>,
    rows: Box<[UnwindRow]>,
    /// The register rules of the few functions that have some: (index in `funcs`, rules),
    /// sorted by index (kept out of [`FnRec`], which most functions fill alone).
    registers: Box<[(u32, Box<[SavedRegister]>)]>,
}

impl Table {
    /// Builds the table of a payload's objects. Functions whose range is empty or wraps are
    /// left out (the model forbids both; a decoder bug must not become a bogus range), as
    /// is anything beyond the 32-bit offsets used inside a table.
    fn build(records: &Records<'_>) -> Table {
        let total: usize = records.all_functions().count();
        let name_bytes: usize = records.all_functions().map(|f| f.name.len()).sum();
        let mut funcs: Vec<FnRec> = Vec::with_capacity(total);
        let mut names = String::with_capacity(name_bytes);
        let mut rows: Vec<UnwindRow> = Vec::new();
        let mut objects = Vec::with_capacity(records.objects.len());
        let mut registers = Vec::new();
        // The function appended last, whose rows the next one may share (also across
        // objects: a bundle of one-function objects).
        let mut prev: Option<&Func<'_>> = None;
        for o in &records.objects {
            let arch = o.arch;
            let lo = funcs.len();
            let fns = records.functions(o);
            // Address order; the permutation is only built when needed.
            let order: Option<Vec<usize>> = (!fns.windows(2).all(|w| w[0].start <= w[1].start))
                .then(|| {
                    let mut v: Vec<usize> = (0..fns.len()).collect();
                    v.sort_by_key(|&j| fns[j].start);
                    v
                });
            if objects.last().is_some_and(|e: &Entry| e.arch != arch) {
                prev = None;
            }
            for j in 0..fns.len() {
                let Some(f) = fns.get(order.as_ref().map_or(j, |v| v[j])) else {
                    continue;
                };
                let last = funcs.last().zip(prev);
                if let Some(rec) = fn_rec(records, f, arch, &mut names, &mut rows, last) {
                    let rules = records.register_rules(f);
                    if !rules.is_empty() {
                        if let Ok(i) = u32::try_from(funcs.len()) {
                            registers.push((i, rules.into()));
                        }
                    }
                    funcs.push(rec);
                    prev = Some(f);
                }
            }
            let (Ok(lo), Ok(hi)) = (u32::try_from(lo), u32::try_from(funcs.len())) else {
                funcs.truncate(lo);
                break;
            };
            objects.push(Entry {
                live: o.live,
                dead: AtomicBool::new(false),
                arch,
                funcs: lo..hi,
            });
        }
        Table {
            objects: objects.into_boxed_slice(),
            funcs: funcs.into_boxed_slice(),
            names: names.into_boxed_str(),
            rows: rows.into_boxed_slice(),
            registers: registers.into_boxed_slice(),
        }
    }
}

/// Appends `f`'s name and rows; `None` (nothing appended) for a function that cannot be
/// indexed. `prev` is the function appended before, with its record: rows equal to its
/// rows are shared, not stored again.
fn fn_rec(
    records: &Records<'_>,
    f: &Func<'_>,
    arch: Arch,
    names: &mut String,
    rows: &mut Vec<UnwindRow>,
    prev: Option<(&FnRec, &Func<'_>)>,
) -> Option<FnRec> {
    let end = f.start.checked_add(u64::from(f.size))?;
    if end <= f.start {
        return None;
    }
    let name_end = u32::try_from(names.len() + f.name.len()).ok()?;
    let (rows_start, rows_len) = match prev {
        // The same description for the same size: the same rows, without computing them.
        Some((p, pf)) if pf.size == f.size && records.same_frame(pf, f) => {
            (p.rows_start, p.rows_len)
        }
        _ => {
            let own = records.frame_rows(f, arch);
            let shared = prev.map(|(p, _)| p).filter(|p| {
                let (s, n) = (p.rows_start as usize, p.rows_len as usize);
                rows.get(s..s + n) == Some(&own[..])
            });
            match shared {
                Some(p) => (p.rows_start, p.rows_len),
                None => {
                    let start = u32::try_from(rows.len()).ok()?;
                    let len = u32::try_from(own.len()).ok()?;
                    start.checked_add(len)?;
                    rows.extend_from_slice(&own);
                    (start, len)
                }
            }
        }
    };
    names.push_str(f.name);
    Some(FnRec {
        start: f.start,
        size: f.size,
        name_end,
        rows_start,
        rows_len,
    })
}

/// What the unwinder needs to know about one function: a handle into its table.
#[derive(Debug, Clone)]
pub struct CodeFn {
    table: Arc<Table>,
    obj: u32,
    idx: u32,
    pub start: u64,
    pub end: u64,
    pub arch: Arch,
}

impl CodeFn {
    /// A function on its own, as if registered alone without a live slot (tests, tools).
    pub fn new(name: &str, start: u64, size: u32, arch: Arch, rows: &[UnwindRow]) -> CodeFn {
        let end = start.saturating_add(u64::from(size));
        let table = Table {
            objects: Box::new([Entry {
                live: None,
                dead: AtomicBool::new(false),
                arch,
                funcs: 0..1,
            }]),
            funcs: Box::new([FnRec {
                start,
                size: u32::try_from(end - start).unwrap_or(u32::MAX),
                name_end: u32::try_from(name.len()).unwrap_or(0),
                rows_start: 0,
                rows_len: u32::try_from(rows.len()).unwrap_or(0),
            }]),
            names: name.into(),
            rows: rows.into(),
            registers: Box::new([]),
        };
        CodeFn {
            table: Arc::new(table),
            obj: 0,
            idx: 0,
            start,
            end,
            arch,
        }
    }

    fn rec(&self) -> &FnRec {
        &self.table.funcs[self.idx as usize]
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        let end = self.rec().name_end as usize;
        let start = match self.idx.checked_sub(1) {
            Some(p) => self.table.funcs[p as usize].name_end as usize,
            None => 0,
        };
        self.table.names.get(start..end).unwrap_or("?")
    }

    /// Frame-description rows, sorted by offset.
    pub fn rows(&self) -> &[UnwindRow] {
        let r = self.rec();
        let (s, n) = (r.rows_start as usize, r.rows_len as usize);
        self.table.rows.get(s..s + n).unwrap_or(&[])
    }

    /// The function's register rules, in offset order (see [`SavedRegister`]).
    pub fn register_rules(&self) -> &[SavedRegister] {
        let regs = &self.table.registers;
        match regs.binary_search_by_key(&self.idx, |(i, _)| *i) {
            Ok(at) => &regs[at].1,
            Err(_) => &[],
        }
    }

    /// [`Self::new`] with register rules (tests).
    #[cfg(test)]
    pub fn with_register_rules(mut self, rules: &[SavedRegister]) -> CodeFn {
        if let Some(t) = Arc::get_mut(&mut self.table) {
            t.registers = Box::new([(self.idx, rules.into())]);
        }
        self
    }

    /// The row in effect at `offset` from the function start (the last row at or before it).
    pub fn row_at(&self, offset: u64) -> Option<&UnwindRow> {
        let rows = self.rows();
        let n = rows.partition_point(|r| u64::from(r.offset) <= offset);
        n.checked_sub(1).and_then(|i| rows.get(i))
    }

    /// Is the function's object still registered (see [`Index::lookup`])?
    fn is_live(&self, mem: &dyn Memory) -> bool {
        self.table.objects[self.obj as usize].is_live(mem)
    }
}

/// A range of addresses that belongs to a run of consecutive objects of one table, whose
/// functions follow each other in address order: a run of their functions, or what newer
/// registrations left of one. Addresses in it that none of its functions covers (padding
/// between them) belong to no function.
#[derive(Debug)]
struct Item {
    /// End (exclusive) of the range.
    end: u64,
    table: Arc<Table>,
    objs: Range<u32>,
}

impl Table {
    /// The functions of objects `objs` (consecutive in `funcs`), and the index of the first.
    fn span(&self, objs: &Range<u32>) -> (u32, &[FnRec]) {
        let (Some(first), Some(last)) = (
            self.objects.get(objs.start as usize),
            objs.end
                .checked_sub(1)
                .and_then(|l| self.objects.get(l as usize)),
        ) else {
            return (0, &[]);
        };
        let (lo, hi) = (first.funcs.start, last.funcs.end.max(first.funcs.start));
        (lo, &self.funcs[lo as usize..hi as usize])
    }

    /// The object (among `objs`) of function `idx`.
    fn object_of(&self, objs: &Range<u32>, idx: u32) -> u32 {
        let os = &self.objects[objs.start as usize..objs.end as usize];
        let k = os
            .partition_point(|o| o.funcs.start <= idx)
            .saturating_sub(1);
        objs.start + k as u32
    }

    /// What of objects `objs` lies in [lo, hi): `None` if no function does, or if only one
    /// object does and `mem` shows it dead.
    fn piece(
        self: &Arc<Table>,
        objs: &Range<u32>,
        lo: u64,
        hi: u64,
        mem: &dyn Memory,
    ) -> Option<Item> {
        let (first, funcs) = self.span(objs);
        let i0 = funcs.partition_point(|f| f.end() <= lo);
        let i1 = funcs.partition_point(|f| f.start < hi);
        if i0 >= i1 {
            return None;
        }
        let o0 = self.object_of(objs, first + i0 as u32);
        let o1 = self.object_of(objs, first + i1 as u32 - 1) + 1;
        if o1 - o0 == 1 && !self.objects[o0 as usize].is_live(mem) {
            return None;
        }
        Some(Item {
            end: hi,
            table: self.clone(),
            objs: o0..o1,
        })
    }
}

impl Item {
    /// The function containing `addr` (which the caller found inside this item's range).
    fn find(&self, addr: u64) -> Option<CodeFn> {
        let (first, funcs) = self.table.span(&self.objs);
        let i = funcs.partition_point(|f| f.start <= addr).checked_sub(1)?;
        let f = &funcs[i];
        if addr >= f.end() {
            return None;
        }
        let idx = first + i as u32;
        let obj = self.table.object_of(&self.objs, idx);
        Some(CodeFn {
            table: self.table.clone(),
            obj,
            idx,
            start: f.start,
            end: f.end(),
            arch: self.table.objects[obj as usize].arch,
        })
    }
}

/// Registered code by address.
#[derive(Debug, Default)]
pub struct Index {
    /// Disjoint ranges by start address.
    items: BTreeMap<u64, Item>,
    /// The architectures of every object added since the last [`Index::clear`] (never
    /// shrinks: a wider set only costs a register read per frame).
    archs: ArchSet,
}

impl Index {
    pub const fn new() -> Index {
        Index {
            items: BTreeMap::new(),
            archs: ArchSet::EMPTY,
        }
    }

    /// The architectures of the code added: the unwinder reads a frame's PC with each
    /// one's register numbers (`crate::unwind`, "Which architecture").
    pub fn archs(&self) -> ArchSet {
        self.archs
    }

    /// Number of indexed ranges (one per run of adjacent functions; a range split by a newer
    /// registration counts twice).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The lowest and highest address of all indexed ranges, `[lo, hi)`; `None` when empty.
    /// No address outside it is in registered code.
    pub fn span(&self) -> Option<(u64, u64)> {
        let (&lo, _) = self.items.first_key_value()?;
        // The ranges are disjoint, so the last one ends highest.
        let (_, last) = self.items.last_key_value()?;
        Some((lo, last.end))
    }

    /// Forgets everything (reader unloaded).
    pub fn clear(&mut self) {
        self.items.clear();
        self.archs = ArchSet::EMPTY;
    }

    /// Adds every function of a payload's objects; returns how many were added. Older
    /// ranges overlapping a new function lose the overlapping addresses, and are dropped
    /// entirely if `mem` shows their object is dead: the project's one overlap rule (the
    /// newest registration owns shared addresses; `jit_interface::inspect::Symbolizer`
    /// applies it to a whole list for `jit-gdb inspect` and the GDB scripts).
    pub fn add(&mut self, decoded: &[Decoded], mem: &dyn Memory) -> usize {
        self.add_records(&Records::from_decoded(decoded), mem)
    }

    /// [`Index::add`] for the functions of a payload's records.
    pub fn add_records(&mut self, records: &Records<'_>, mem: &dyn Memory) -> usize {
        let table = Arc::new(Table::build(records));
        for o in table.objects.iter() {
            self.archs = self.archs.with(o.arch);
        }
        // The run being built: its range and objects.
        let mut run: Option<(u64, u64, Range<u32>)> = None;
        for (k, o) in table.objects.iter().enumerate() {
            let k = k as u32;
            for (j, f) in table.funcs[o.funcs.start as usize..o.funcs.end as usize]
                .iter()
                .enumerate()
            {
                // A run goes on over padding as long as no other live registration has code
                // there, and into the next object if that one's functions all come after.
                if let Some((_, end, objs)) = &mut run {
                    let next_object = j == 0 && objs.end <= k;
                    if (!next_object || f.start >= *end) && self.gap_is_free(*end, f.start, mem) {
                        *end = (*end).max(f.end());
                        objs.end = k + 1;
                        continue;
                    }
                }
                if let Some((start, end, objs)) = run.take() {
                    self.insert(start, end, &table, objs, mem);
                }
                run = Some((f.start, f.end(), k..k + 1));
            }
        }
        if let Some((start, end, objs)) = run {
            self.insert(start, end, &table, objs, mem);
        }
        table.funcs.len()
    }

    /// Does no live range overlap [start, end)? Dead ranges of one object found there are
    /// removed; a range of several objects counts as live.
    fn gap_is_free(&mut self, start: u64, end: u64, mem: &dyn Memory) -> bool {
        loop {
            if end <= start {
                return true;
            }
            let Some((&s, it)) = self.items.range(..end).next_back() else {
                return true;
            };
            if it.end <= start {
                return true;
            }
            if it.objs.len() != 1 || it.table.objects[it.objs.start as usize].is_live(mem) {
                return false;
            }
            self.items.remove(&s);
        }
    }

    /// Makes [start, end) belong to objects `objs` of `table`.
    fn insert(
        &mut self,
        start: u64,
        end: u64,
        table: &Arc<Table>,
        objs: Range<u32>,
        mem: &dyn Memory,
    ) {
        // Ranges overlapping [start, end): they are disjoint and sorted, so walk down from
        // the last one starting before `end` until one ends at or before `start`.
        let overlapping: Vec<u64> = self
            .items
            .range(..end)
            .rev()
            .take_while(|(_, it)| it.end > start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            let Some(old) = self.items.remove(&s) else {
                continue;
            };
            // What is left of the old range on either side keeps its functions there.
            if s < start {
                if let Some(left) = old.table.piece(&old.objs, s, start, mem) {
                    self.items.insert(s, left);
                }
            }
            if old.end > end {
                if let Some(right) = old.table.piece(&old.objs, end, old.end, mem) {
                    self.items.insert(end, right);
                }
            }
        }
        self.items.insert(
            start,
            Item {
                end,
                table: table.clone(),
                objs,
            },
        );
    }

    fn item_at(&self, addr: u64) -> Option<(u64, &Item)> {
        let (&key, item) = self
            .items
            .range((Bound::Unbounded, Bound::Included(addr)))
            .next_back()?;
        (addr < item.end).then_some((key, item))
    }

    /// The indexed function containing `addr`, without checking that it is still live.
    pub fn peek(&self, addr: u64) -> Option<CodeFn> {
        self.item_at(addr)?.1.find(addr)
    }

    /// Is `addr` inside an indexed function (live or not)? The unwinder's quick test for
    /// every frame, JIT or not: no target memory read, no allocation.
    pub fn covers(&self, addr: u64) -> bool {
        self.item_at(addr).is_some_and(|(_, item)| {
            let (_, funcs) = item.table.span(&item.objs);
            let i = funcs.partition_point(|f| f.start <= addr);
            i.checked_sub(1).is_some_and(|i| addr < funcs[i].end())
        })
    }

    /// Does any indexed function (live, or not checked yet) overlap `[lo, hi)`? The reader
    /// asks before a symtab spans a gap between functions. Every range holds a function
    /// overlapping it, so at most the two ranges straddling `lo` and `hi` can fail the test
    /// before one inside the gap passes it: O(log n).
    pub fn any_function_in(&self, lo: u64, hi: u64) -> bool {
        if hi <= lo {
            return false;
        }
        for (&start, item) in self.items.range(..hi).rev() {
            if item.end <= lo {
                break;
            }
            // The part of the range inside [lo, hi): only its own addresses count (a
            // newer registration owns the rest of a function cut by it).
            let (a, b) = (start.max(lo), item.end.min(hi));
            let (_, funcs) = item.table.span(&item.objs);
            let i = funcs.partition_point(|f| f.end() <= a);
            if funcs.get(i).is_some_and(|f| f.start < b) {
                return true;
            }
        }
        false
    }

    /// The live function containing `addr`. The addresses of an object that turns out dead
    /// are removed from the index.
    pub fn lookup(&mut self, addr: u64, mem: &dyn Memory) -> Option<CodeFn> {
        let (key, item) = self.item_at(addr)?;
        let func = item.find(addr)?;
        if func.is_live(mem) {
            return Some(func);
        }
        let item = self.items.remove(&key)?;
        // Keep the other objects of the range, on either side of the dead one.
        let (t, obj) = (&item.table, func.obj);
        let of = &t.objects[obj as usize].funcs;
        let (dead_lo, dead_hi) = (
            t.funcs[of.start as usize].start,
            t.funcs[of.end as usize - 1].end(),
        );
        if key < dead_lo && item.objs.start < obj {
            if let Some(left) = t.piece(&(item.objs.start..obj), key, dead_lo, mem) {
                self.items.insert(key, left);
            }
        }
        if dead_hi < item.end && obj + 1 < item.objs.end {
            if let Some(right) = t.piece(&(obj + 1..item.objs.end), dead_hi, item.end, mem) {
                self.items.insert(dead_hi, right);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jit_interface::JitObject;
    use std::collections::HashMap;

    /// Target memory as a map of 8-byte words.
    #[derive(Default)]
    struct Words(HashMap<u64, u64>);

    impl Memory for Words {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            match self.0.get(&addr) {
                Some(w) if buf.len() == 8 => {
                    buf.copy_from_slice(&w.to_le_bytes());
                    true
                }
                _ => false,
            }
        }
    }

    fn object(fns: &[(&str, u64, u64)]) -> JitObject {
        let mut o = JitObject::new();
        for &(n, s, z) in fns {
            o.add_function(n, s, z).unwrap();
        }
        o
    }

    fn decoded(fns: &[(&str, u64, u64)], live: Option<(u64, u64)>) -> Vec<Decoded> {
        vec![Decoded {
            object: object(fns),
            live: live.map(|(address, key)| LiveCheck { address, key }),
        }]
    }

    fn name_at(ix: &mut Index, addr: u64, mem: &Words) -> Option<String> {
        ix.lookup(addr, mem).map(|f| f.name().to_owned())
    }

    #[test]
    fn finds_functions_and_declines_gaps() {
        let mem = Words::default();
        let mut ix = Index::new();
        let n = ix.add(
            &decoded(
                &[("a", 0x1000, 0x10), ("b", 0x1010, 0x20), ("c", 0x2000, 8)],
                None,
            ),
            &mem,
        );
        assert_eq!(n, 3);
        let mut ix2 = ix;
        assert_eq!(name_at(&mut ix2, 0x1000, &mem).as_deref(), Some("a"));
        assert_eq!(name_at(&mut ix2, 0x100f, &mem).as_deref(), Some("a"));
        assert_eq!(name_at(&mut ix2, 0x1010, &mem).as_deref(), Some("b"));
        assert_eq!(name_at(&mut ix2, 0x102f, &mem).as_deref(), Some("b"));
        assert_eq!(name_at(&mut ix2, 0x1030, &mem), None);
        assert_eq!(name_at(&mut ix2, 0xfff, &mem), None);
        assert_eq!(name_at(&mut ix2, 0x2008, &mem), None);
        assert_eq!(name_at(&mut ix2, u64::MAX, &mem), None);
        for (addr, inside) in [
            (0x1000, true),
            (0x102f, true),
            (0x1030, false),
            (0x2008, false),
        ] {
            assert_eq!(ix2.covers(addr), inside, "{addr:#x}");
        }
    }

    #[test]
    fn any_function_in_sees_functions_not_padding() {
        let mut mem = Words::default();
        let mut ix = Index::new();
        // One range [0x1000, 0x2008): a and b adjacent, padding, then c.
        ix.add(
            &decoded(
                &[("a", 0x1000, 0x10), ("b", 0x1010, 0x20), ("c", 0x2000, 8)],
                None,
            ),
            &mem,
        );
        assert_eq!(ix.len(), 1);
        for (lo, hi, any) in [
            (0x1030, 0x2000, false),
            (0x1030, 0x2001, true),
            (0x102f, 0x1031, true),
            (0x0ff0, 0x1000, false),
            (0x0ff0, 0x1001, true),
            (0x2008, 0x3000, false),
            (0x1500, 0x1500, false),
            (0x0, u64::MAX, true),
        ] {
            assert_eq!(ix.any_function_in(lo, hi), any, "[{lo:#x}, {hi:#x})");
        }
        // A newer registration in the padding, whose object turns out dead once checked:
        // until then it counts.
        mem.0.insert(0x500, 0);
        ix.add(&decoded(&[("d", 0x1800, 0x10)], Some((0x500, 7))), &mem);
        for (lo, hi, any) in [
            (0x1030, 0x2000, true),
            (0x1030, 0x1800, false),
            (0x1810, 0x2000, false),
            (0x17ff, 0x1801, true),
        ] {
            assert_eq!(ix.any_function_in(lo, hi), any, "[{lo:#x}, {hi:#x})");
        }
        assert_eq!(name_at(&mut ix, 0x1800, &mem), None);
        assert!(!ix.any_function_in(0x1030, 0x2000));
        // A newer function over the end of b: b's remaining part still counts.
        ix.add(&decoded(&[("e", 0x1020, 0x40)], None), &mem);
        for (lo, hi, any) in [
            (0x1060, 0x2000, false),
            (0x1018, 0x1019, true),
            (0x105f, 0x1060, true),
        ] {
            assert_eq!(ix.any_function_in(lo, hi), any, "[{lo:#x}, {hi:#x})");
        }
    }

    #[test]
    fn span_covers_every_range() {
        let mem = Words::default();
        let mut ix = Index::new();
        assert_eq!(ix.span(), None);
        ix.add(&decoded(&[("b", 0x2000, 0x10)], None), &mem);
        ix.add(
            &decoded(&[("a", 0x1000, 0x10), ("c", 0x3000, 8)], None),
            &mem,
        );
        assert_eq!(ix.span(), Some((0x1000, 0x3008)));
        ix.clear();
        assert_eq!(ix.span(), None);
    }

    #[test]
    fn dead_entries_are_dropped_and_stay_dropped() {
        let mut mem = Words::default();
        mem.0.insert(0x500, 0xabc);
        let mut ix = Index::new();
        ix.add(
            &decoded(&[("old", 0x1000, 0x40)], Some((0x500, 0xabc))),
            &mem,
        );
        assert_eq!(name_at(&mut ix, 0x1004, &mem).as_deref(), Some("old"));
        // Unregistered: the slot is cleared.
        mem.0.insert(0x500, 0);
        assert_eq!(name_at(&mut ix, 0x1004, &mem), None);
        assert!(ix.is_empty());
        // Even if the slot held the key again, the entry is gone.
        mem.0.insert(0x500, 0xabc);
        assert_eq!(name_at(&mut ix, 0x1004, &mem), None);
    }

    #[test]
    fn unreadable_live_slot_counts_as_dead() {
        let mem = Words::default();
        let mut ix = Index::new();
        ix.add(&decoded(&[("f", 0x1000, 0x40)], Some((0x500, 7))), &mem);
        assert_eq!(name_at(&mut ix, 0x1000, &mem), None);
    }

    #[test]
    fn reused_addresses_belong_to_the_newer_live_registration() {
        let mut mem = Words::default();
        mem.0.insert(0x500, 1);
        let mut ix = Index::new();
        ix.add(&decoded(&[("old", 0x1000, 0x40)], Some((0x500, 1))), &mem);
        // Freed (slot cleared), then the code area reused for a different function.
        mem.0.insert(0x500, 0);
        mem.0.insert(0x600, 2);
        ix.add(&decoded(&[("new", 0x1010, 0x10)], Some((0x600, 2))), &mem);
        assert_eq!(name_at(&mut ix, 0x1010, &mem).as_deref(), Some("new"));
        // The dead old function kept nothing, not even the addresses around the new one.
        assert_eq!(name_at(&mut ix, 0x1000, &mem), None);
        assert_eq!(name_at(&mut ix, 0x1030, &mem), None);
        assert_eq!(ix.len(), 1);
    }

    #[test]
    fn newer_overlapping_live_registration_wins_and_older_keeps_the_rest() {
        let mem = Words::default();
        let mut ix = Index::new();
        ix.add(&decoded(&[("old", 0x1000, 0x40)], None), &mem);
        ix.add(&decoded(&[("new", 0x1010, 0x10)], None), &mem);
        assert_eq!(name_at(&mut ix, 0x100f, &mem).as_deref(), Some("old"));
        assert_eq!(name_at(&mut ix, 0x1010, &mem).as_deref(), Some("new"));
        assert_eq!(name_at(&mut ix, 0x101f, &mem).as_deref(), Some("new"));
        assert_eq!(name_at(&mut ix, 0x1020, &mem).as_deref(), Some("old"));
        // The old piece still unwinds with the old function's start.
        assert_eq!(ix.lookup(0x1020, &mem).unwrap().start, 0x1000);
        // A registration covering several pieces replaces all of them.
        ix.add(&decoded(&[("big", 0x0f00, 0x200)], None), &mem);
        assert_eq!(ix.len(), 1);
        assert_eq!(name_at(&mut ix, 0x1020, &mem).as_deref(), Some("big"));
    }

    #[test]
    fn many_functions() {
        let mem = Words::default();
        let fns: Vec<(String, u64, u64)> = (0..10_000u64)
            .map(|i| (format!("f{i}"), 0x10_0000 + i * 64, 48))
            .collect();
        let refs: Vec<(&str, u64, u64)> =
            fns.iter().map(|(n, s, z)| (n.as_str(), *s, *z)).collect();
        let mut ix = Index::new();
        ix.add(&decoded(&refs, None), &mem);
        assert_eq!(
            name_at(&mut ix, 0x10_0000 + 5000 * 64 + 47, &mem).as_deref(),
            Some("f5000")
        );
        assert_eq!(name_at(&mut ix, 0x10_0000 + 5000 * 64 + 48, &mem), None);
    }

    #[test]
    fn rows_are_found_by_offset() {
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 20).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 18, 19).unwrap();
        let mut ix = Index::new();
        ix.add(
            &[Decoded {
                object: o,
                live: None,
            }],
            &Words::default(),
        );
        let cf = ix.peek(0x1000).unwrap();
        let offs: Vec<u32> = (0..20).map(|o| cf.row_at(o).unwrap().offset).collect();
        assert_eq!(offs[0], 0);
        assert_eq!(offs[1..4], [1, 1, 1]);
        assert!(offs[4..18].iter().all(|&o| o == 4));
        assert_eq!(offs[18], 18);
        assert_eq!(
            offs[19], 19,
            "after the ret the frame-pointer rule holds again"
        );
    }

    #[test]
    fn names_and_rows_of_a_table() {
        let mut o = JitObject::new();
        // Registered out of address order; `b` and `c` share their rows, `a` has others.
        let c = o.add_function("c", 0x1080, 0x40).unwrap();
        o.set_frame_pointer(c, 1, 4).unwrap();
        let a = o.add_function("alpha", 0x1000, 0x40).unwrap();
        o.set_frame_pointer(a, 1, 5).unwrap();
        let b = o.add_function("b", 0x1040, 0x40).unwrap();
        o.set_frame_pointer(b, 1, 4).unwrap();
        let frames: Vec<Vec<UnwindRow>> = o
            .functions()
            .iter()
            .map(|f| f.frame().rows(Arch::X86_64, 0x40))
            .collect();
        let d = vec![Decoded {
            object: o,
            live: None,
        }];
        let table = Table::build(&Records::from_decoded(&d));
        assert_eq!(table.rows.len(), frames[1].len() + frames[0].len());
        let mut ix = Index::new();
        assert_eq!(ix.add(&d, &Words::default()), 3);
        assert_eq!(ix.len(), 1, "adjacent functions make one range");
        for (addr, name, rows) in [
            (0x1000, "alpha", &frames[1]),
            (0x107f, "b", &frames[2]),
            (0x1080, "c", &frames[0]),
        ] {
            let f = ix.peek(addr).unwrap();
            assert_eq!((f.name(), f.rows()), (name, &rows[..]));
        }
    }

    #[test]
    fn superseded_and_dead_tables_are_freed() {
        let mut mem = Words::default();
        mem.0.insert(0x500, 1);
        let mut ix = Index::new();
        ix.add(
            &decoded(
                &[("one", 0x1000, 0x40), ("two", 0x1040, 0x40)],
                Some((0x500, 1)),
            ),
            &mem,
        );
        let first = Arc::downgrade(&ix.peek(0x1000).unwrap().table);
        // A bundle holding the same functions (as a consolidated batch does) takes over.
        ix.add(
            &decoded(
                &[("one", 0x1000, 0x40), ("two", 0x1040, 0x40)],
                Some((0x600, 2)),
            ),
            &mem,
        );
        assert!(first.upgrade().is_none(), "the covered table is freed");
        let second = Arc::downgrade(&ix.peek(0x1000).unwrap().table);
        // Found dead by a lookup: its only range goes, and the table with it.
        assert_eq!(name_at(&mut ix, 0x1000, &mem), None);
        assert!(second.upgrade().is_none(), "the dead table is freed");
        assert!(ix.is_empty());
    }

    #[test]
    fn bundle_objects_interleave() {
        let mut mem = Words::default();
        mem.0.insert(0x500, 1);
        mem.0.insert(0x508, 2);
        // Object 1 has code at 0x1000 and 0x1080, object 2 at 0x1040, in between.
        let d = vec![
            Decoded {
                object: object(&[("a1", 0x1000, 0x40), ("a2", 0x1080, 0x40)]),
                live: Some(LiveCheck {
                    address: 0x500,
                    key: 1,
                }),
            },
            Decoded {
                object: object(&[("b1", 0x1040, 0x40)]),
                live: Some(LiveCheck {
                    address: 0x508,
                    key: 2,
                }),
            },
        ];
        let mut ix = Index::new();
        ix.add(&d, &mem);
        for (addr, name) in [(0x1000, "a1"), (0x1040, "b1"), (0x10bf, "a2")] {
            assert_eq!(name_at(&mut ix, addr, &mem).as_deref(), Some(name));
        }
        // Object 2 unregistered: only its code loses its name.
        mem.0.insert(0x508, 0);
        assert_eq!(name_at(&mut ix, 0x1040, &mem), None);
        assert_eq!(name_at(&mut ix, 0x1080, &mem).as_deref(), Some("a2"));
    }

    #[test]
    fn a_run_stops_at_older_live_code_in_its_padding() {
        let mut mem = Words::default();
        mem.0.insert(0x500, 1);
        mem.0.insert(0x508, 2);
        let mut ix = Index::new();
        ix.add(&decoded(&[("older", 0x1050, 0x10)], Some((0x500, 1))), &mem);
        // A newer object around it, with padding where the older one lives.
        ix.add(
            &decoded(
                &[("p", 0x1000, 0x40), ("q", 0x1080, 0x40)],
                Some((0x508, 2)),
            ),
            &mem,
        );
        assert_eq!(name_at(&mut ix, 0x1050, &mem).as_deref(), Some("older"));
        assert_eq!(name_at(&mut ix, 0x1048, &mem), None);
        assert_eq!(name_at(&mut ix, 0x1080, &mem).as_deref(), Some("q"));
        assert_eq!(ix.len(), 3);
        // Once the older object is dead, a later payload's run spans its old place.
        mem.0.insert(0x500, 0);
        ix.add(
            &decoded(&[("p", 0x1000, 0x40), ("q", 0x1080, 0x40)], None),
            &mem,
        );
        assert_eq!(ix.len(), 1);
        assert_eq!(name_at(&mut ix, 0x1050, &mem), None);
    }

    #[test]
    fn a_bundle_of_adjacent_objects_is_one_range_until_one_dies() {
        let mut mem = Words::default();
        let d: Vec<Decoded> = (0..4u64)
            .map(|i| {
                mem.0.insert(0x500 + 8 * i, 100 + i);
                Decoded {
                    object: object(&[(
                        ["f0", "f1", "f2", "f3"][i as usize],
                        0x1000 + 0x40 * i,
                        0x40,
                    )]),
                    live: Some(LiveCheck {
                        address: 0x500 + 8 * i,
                        key: 100 + i,
                    }),
                }
            })
            .collect();
        let mut ix = Index::new();
        assert_eq!(ix.add(&d, &mem), 4);
        assert_eq!(ix.len(), 1);
        let all = |ix: &mut Index, mem: &Words| -> Vec<Option<String>> {
            (0..4)
                .map(|i| name_at(ix, 0x1000 + 0x40 * i + 8, mem))
                .collect()
        };
        assert_eq!(
            all(&mut ix, &mem),
            [Some("f0"), Some("f1"), Some("f2"), Some("f3")].map(|n| n.map(String::from))
        );
        // The third object is unregistered: its addresses leave the index, the rest stays.
        mem.0.insert(0x510, 0);
        assert_eq!(
            all(&mut ix, &mem),
            [Some("f0"), Some("f1"), None, Some("f3")].map(|n| n.map(String::from))
        );
        assert_eq!(ix.len(), 2);
        // A newer registration over the first two: the older range goes entirely.
        ix.add(&decoded(&[("g", 0x1000, 0x80)], None), &mem);
        assert_eq!(ix.len(), 2);
        assert_eq!(name_at(&mut ix, 0x1050, &mem).as_deref(), Some("g"));
        assert_eq!(name_at(&mut ix, 0x10c0, &mem).as_deref(), Some("f3"));
    }
}
