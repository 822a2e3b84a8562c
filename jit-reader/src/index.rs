//! The index of registered code: every function of every payload the reader accepted, by
//! address, for the unwinder.
//!
//! The unwinder is asked about every frame of every backtrace, so a lookup is one search in
//! a sorted map (O(log n)) and PCs outside all JIT code are declined without touching target
//! memory. The map holds disjoint address ranges: a newer registration that covers addresses
//! of an older one takes them over (the older one keeps what is left).
//!
//! GDB never tells a reader that an entry was unregistered, and freed code addresses get
//! reused. So a function is trusted only after its entry's live slot has been read from the
//! target and still holds the entry's key; entries found dead are dropped for good (a key
//! is never stored again once cleared). Payloads without a live slot are trusted as long as
//! no newer registration covers their addresses.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use jit_interface::{Arch, Decoded, Function, LiveCheck, UnwindRow};

use crate::memory::Memory;

/// One registered payload object (the unit that is registered and unregistered together).
#[derive(Debug)]
pub struct Entry {
    live: Option<LiveCheck>,
    dead: AtomicBool,
}

impl Entry {
    /// An entry that is live while `live`'s slot holds its key (always, without a slot).
    pub fn new(live: Option<LiveCheck>) -> Entry {
        Entry {
            live,
            dead: AtomicBool::new(false),
        }
    }

    /// Is the entry still registered? Reads the live slot; a dead entry stays dead.
    pub fn is_live(&self, mem: &dyn Memory) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return false;
        }
        let Some(live) = self.live else {
            return true;
        };
        // An unreadable slot (freed and unmapped, or missing from a core) proves nothing
        // alive: such code gets no unwinding rather than possibly stale rows.
        if mem.read_u64(live.address) == Some(live.key) {
            true
        } else {
            self.dead.store(true, Ordering::Relaxed);
            false
        }
    }
}

/// What the unwinder needs to know about one function.
#[derive(Debug)]
pub struct CodeFn {
    pub name: String,
    pub start: u64,
    pub end: u64,
    pub arch: Arch,
    /// Frame-description rows, sorted by offset.
    pub rows: Box<[UnwindRow]>,
    pub entry: Arc<Entry>,
}

impl CodeFn {
    /// The row in effect at `offset` from the function start (the last row at or before it).
    pub fn row_at(&self, offset: u64) -> Option<&UnwindRow> {
        let n = self.rows.partition_point(|r| u64::from(r.offset) <= offset);
        n.checked_sub(1).and_then(|i| self.rows.get(i))
    }
}

#[derive(Debug)]
struct Item {
    /// End (exclusive) of this piece; a piece is the whole function or what a newer
    /// registration left of it.
    end: u64,
    func: Arc<CodeFn>,
}

/// Registered code by address.
#[derive(Debug, Default)]
pub struct Index {
    /// Disjoint pieces by start address.
    items: BTreeMap<u64, Item>,
}

impl Index {
    pub const fn new() -> Index {
        Index {
            items: BTreeMap::new(),
        }
    }

    /// Number of indexed pieces (a function split by a newer registration counts twice).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Forgets everything (reader unloaded).
    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// Adds every function of a payload's objects; returns how many were added. Older
    /// pieces overlapping a new function lose the overlapping addresses, and are dropped
    /// entirely if `mem` shows their entry is dead.
    pub fn add(&mut self, decoded: &[Decoded], mem: &dyn Memory) -> usize {
        let mut added = 0;
        for d in decoded {
            let entry = Arc::new(Entry::new(d.live));
            let arch = d.object.arch();
            for f in d.object.functions() {
                if let Some(func) = code_fn(f, arch, &entry) {
                    self.insert(func, mem);
                    added += 1;
                }
            }
        }
        added
    }

    fn insert(&mut self, func: CodeFn, mem: &dyn Memory) {
        let (start, end) = (func.start, func.end);
        // Pieces overlapping [start, end): they are disjoint and sorted, so walk down from
        // the last piece starting before `end` until one ends at or before `start`.
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
            if !old.func.entry.is_live(mem) {
                continue;
            }
            if s < start {
                self.items.insert(
                    s,
                    Item {
                        end: start,
                        func: old.func.clone(),
                    },
                );
            }
            if old.end > end {
                self.items.insert(
                    end,
                    Item {
                        end: old.end,
                        func: old.func,
                    },
                );
            }
        }
        self.items.insert(
            start,
            Item {
                end,
                func: Arc::new(func),
            },
        );
    }

    /// The indexed function containing `addr`, without checking that it is still live.
    pub fn peek(&self, addr: u64) -> Option<&Arc<CodeFn>> {
        let (_, item) = self
            .items
            .range((Bound::Unbounded, Bound::Included(addr)))
            .next_back()?;
        (addr < item.end).then_some(&item.func)
    }

    /// Is `addr` or `addr - 1` inside an indexed piece (live or not)? The unwinder's test on
    /// every frame, one map search: the last piece starting at or before `addr` contains
    /// `addr` if it ends after it, and `addr - 1` if it ends at it (an earlier piece cannot
    /// hold `addr - 1` without that last piece starting at `addr`, and so holding `addr`).
    pub fn covers_or_ends_at(&self, addr: u64) -> bool {
        self.items
            .range((Bound::Unbounded, Bound::Included(addr)))
            .next_back()
            .is_some_and(|(_, item)| addr <= item.end)
    }

    /// The live function containing `addr`. A piece whose entry turns out dead is removed.
    pub fn lookup(&mut self, addr: u64, mem: &dyn Memory) -> Option<Arc<CodeFn>> {
        let (&key, item) = self
            .items
            .range((Bound::Unbounded, Bound::Included(addr)))
            .next_back()?;
        if addr >= item.end {
            return None;
        }
        if item.func.entry.is_live(mem) {
            return Some(item.func.clone());
        }
        self.items.remove(&key);
        None
    }
}

/// The index record of one function, or `None` for a function whose range is empty or wraps
/// (the model forbids both; a decoder bug must not become a bogus range).
fn code_fn(f: &Function, arch: Arch, entry: &Arc<Entry>) -> Option<CodeFn> {
    let end = f.start().checked_add(u64::from(f.size()))?;
    if end <= f.start() {
        return None;
    }
    Some(CodeFn {
        name: f.name().to_owned(),
        start: f.start(),
        end,
        arch,
        rows: f.frame().rows(arch, u64::from(f.size())).into_boxed_slice(),
        entry: entry.clone(),
    })
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
        ix.lookup(addr, mem).map(|f| f.name.clone())
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
    fn covers_or_ends_at_matches_two_lookups() {
        let mem = Words::default();
        let mut ix = Index::new();
        ix.add(
            &decoded(
                &[("a", 0x1000, 0x10), ("b", 0x1010, 0x20), ("c", 0x2000, 8)],
                None,
            ),
            &mem,
        );
        for addr in (0xff0..0x1040)
            .chain(0x1ff0..0x2010)
            .chain([0, 1, u64::MAX])
        {
            let two =
                ix.peek(addr).is_some() || addr.checked_sub(1).and_then(|a| ix.peek(a)).is_some();
            assert_eq!(ix.covers_or_ends_at(addr), two, "at {addr:#x}");
        }
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
        let entry = Arc::new(Entry {
            live: None,
            dead: AtomicBool::new(false),
        });
        let cf = code_fn(&o.functions()[0], Arch::X86_64, &entry).unwrap();
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
}
