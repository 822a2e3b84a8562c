//! Where registered code lies, so that an ELF entry's `.text` sections may span the gaps
//! between its functions (see `elf::Spans` for why that matters to GDB, and why a section
//! must never span someone else's code).
//!
//! The rule: an entry's section spans a gap (under `elf::MAX_BRIDGE` bytes) only if no
//! other live object's extent (its first function's start to its last function's end)
//! touches the gap when the entry is encoded. The sections that do span gaps are kept
//! here (they are disjoint: none spans another's code), so that a registration that later
//! puts code inside one is seen at once: the entry owning that section is re-encoded (then
//! its sections stop at the new code), or, for an entry that keeps nothing to re-encode
//! from (an object alone in its entry for good), the registration is refused, naming both.
//!
//! Code registered by another producer in the same process (LLVM's JIT sharing the list)
//! is not known here; `JIT_GDB_SPLIT_GAPS=1` turns spanning off for such processes. Only
//! entries encoded while a debugger is attached span gaps (see `spans_gaps`).
//!
//! Cost: one ordered-map insert per registration and one removal per unregistration (the
//! object's extent), one lookup per registration in the map of spanning sections (empty
//! unless gaps are spanned), and one range query per spanned gap when an entry is encoded.

use std::collections::{BTreeMap, HashMap};

/// No extent recorded (`Territory::starts`).
const NONE: u64 = u64::MAX;

/// An object whose extent is larger than this is kept in a short list of its own, searched
/// whole (objects of many functions: few); the ordered map then only needs looking back
/// as far as its widest object from a gap.
const WIDE: u64 = 1 << 14;

#[derive(Default)]
pub(super) struct Territory {
    /// Start of each live object's extent by member index (`NONE`: none), for removal.
    starts: Vec<u64>,
    /// Objects no wider than [`WIDE`] registered in address order (a runtime's code
    /// allocator moving up: the usual case, appended for a few instructions where a map
    /// insert took 500): (start, end, member), sorted by start; a removed one's end is 0.
    ordered: Vec<(u64, u64, u32)>,
    /// Removed entries still in `ordered`.
    ordered_dead: usize,
    /// The other objects no wider than [`WIDE`], by (start, member): their end.
    narrow: BTreeMap<(u64, u32), u64>,
    /// The widest extent ever put in `narrow` (never shrinks: a bound, not an exact value).
    narrow_max: u64,
    /// Wider objects: (start, end, member).
    wide: Vec<(u64, u64, u32)>,
    /// Sections of live entries that span a gap: start -> (end, batch id).
    spans: BTreeMap<u64, (u64, u64)>,
    /// Each such batch's section starts, to take them out again.
    spans_of: HashMap<u64, Vec<u64>>,
}

/// May an entry encoded now span gaps? Only while a debugger is attached (where each
/// section costs at every stop), and unless `JIT_GDB_SPLIT_GAPS=1` turned it off. Entries
/// written without a debugger keep one section per run of adjacent code: LLDB attaching
/// later was seen naming an unregistered function for a hole of a rewritten entry whose
/// section spanned it (GDB named nothing there).
pub(super) fn spans_gaps(attached: bool) -> bool {
    static SPLIT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    attached
        && !*SPLIT.get_or_init(|| std::env::var_os("JIT_GDB_SPLIT_GAPS").is_some_and(|v| v == "1"))
}

impl Territory {
    /// Member `member`'s code now lies in `[start, end)`.
    pub(super) fn add(&mut self, member: u32, start: u64, end: u64) {
        if end <= start || start == NONE {
            return;
        }
        let i = member as usize;
        if i >= self.starts.len() {
            self.starts.resize(i + 1, NONE);
        }
        if self.starts[i] != NONE {
            self.remove(member);
        }
        self.starts[i] = start;
        if end - start > WIDE {
            self.wide.push((start, end, member));
        } else {
            self.narrow_max = self.narrow_max.max(end - start);
            if self.ordered.last().map_or(true, |l| l.0 <= start) {
                self.ordered.push((start, end, member));
            } else {
                self.narrow.insert((start, member), end);
            }
        }
    }

    /// Member `member` is no longer registered.
    pub(super) fn remove(&mut self, member: u32) {
        let Some(start) = self.starts.get_mut(member as usize) else {
            return;
        };
        let start = std::mem::replace(start, NONE);
        if start == NONE {
            return;
        }
        if self.narrow.remove(&(start, member)).is_some() {
            return;
        }
        let first = self.ordered.partition_point(|e| e.0 < start);
        if let Some(e) = self.ordered[first..]
            .iter_mut()
            .take_while(|e| e.0 == start)
            .find(|e| e.2 == member && e.1 != 0)
        {
            e.1 = 0;
            self.ordered_dead += 1;
            if self.ordered_dead > 64 && self.ordered_dead * 2 > self.ordered.len() {
                self.ordered.retain(|e| e.1 != 0);
                self.ordered_dead = 0;
            }
            return;
        }
        if let Some(i) = self.wide.iter().position(|w| w.2 == member) {
            self.wide.swap_remove(i);
        }
    }

    /// Does the code of no live object but those `own` accepts touch `[lo, hi)`?
    pub(super) fn free(&self, lo: u64, hi: u64, own: impl Fn(u32) -> bool) -> bool {
        // Nothing narrow that starts before `from` reaches `lo`.
        let from = lo.saturating_sub(self.narrow_max);
        let first = self.ordered.partition_point(|e| e.0 < from);
        let ordered_free = self.ordered[first..]
            .iter()
            .take_while(|e| e.0 < hi)
            .all(|&(_, end, m)| end <= lo || own(m));
        let narrow_free = self
            .narrow
            .range((from, 0)..(hi, 0))
            .all(|(&(_, m), &end)| end <= lo || own(m));
        ordered_free
            && narrow_free
            && self
                .wide
                .iter()
                .all(|&(s, e, m)| e <= lo || s >= hi || own(m))
    }

    /// Batch `batch_id`'s entry now has these sections spanning gaps (none: forgets its old
    /// ones).
    pub(super) fn set_spans(&mut self, batch_id: u64, spans: &[(u64, u64)]) {
        if let Some(old) = self.spans_of.remove(&batch_id) {
            for start in old {
                if self.spans.get(&start).is_some_and(|s| s.1 == batch_id) {
                    self.spans.remove(&start);
                }
            }
        }
        if spans.is_empty() {
            return;
        }
        for &(start, end) in spans {
            self.spans.insert(start, (end, batch_id));
        }
        self.spans_of
            .insert(batch_id, spans.iter().map(|s| s.0).collect());
    }

    /// The batches whose spanning sections touch `[lo, hi)` (code about to be registered
    /// there), with the first such section.
    pub(super) fn spanned(&self, lo: u64, hi: u64, out: &mut Vec<(u64, (u64, u64))>) {
        if self.spans.is_empty() {
            return;
        }
        // Disjoint sections: walk back from `hi` while they end after `lo`.
        for (&start, &(end, batch)) in self.spans.range(..hi).rev() {
            if end <= lo {
                break;
            }
            if !out.iter().any(|o| o.0 == batch) {
                out.push((batch, (start, end)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_sees_narrow_and_wide_objects_and_skips_own() {
        let mut t = Territory::default();
        t.add(1, 0x1000, 0x1040);
        t.add(2, 0x1100, 0x1140);
        t.add(3, 0x10_0000, 0x10_0000 + 2 * WIDE);
        assert!(t.free(0x1040, 0x1100, |_| false));
        assert!(!t.free(0x1040, 0x1101, |_| false));
        assert!(t.free(0x1040, 0x1101, |m| m == 2));
        assert!(!t.free(0x1000, 0x1010, |_| false));
        // Inside the wide object's extent.
        assert!(!t.free(0x10_0000 + WIDE, 0x10_0000 + WIDE + 0x100, |_| false));
        assert!(t.free(0x10_0000 + WIDE, 0x10_0000 + WIDE + 0x100, |m| m == 3));
        t.remove(3);
        assert!(t.free(0x10_0000 + WIDE, 0x10_0000 + WIDE + 0x100, |_| false));
        t.remove(2);
        assert!(t.free(0x1040, 0x1200, |_| false));
        // A narrow object starting up to WIDE before the gap and reaching into it.
        t.add(4, 0x5000, 0x5000 + WIDE);
        assert!(!t.free(0x5000 + WIDE - 1, 0x5000 + WIDE + 8, |_| false));
        assert!(t.free(0x5000 + WIDE, 0x5000 + WIDE + 8, |_| false));
    }

    /// In and out of address order, with removals (and the compaction they trigger), the
    /// answers are those of a plain list of extents.
    #[test]
    fn free_agrees_with_a_list_of_extents() {
        let mut t = Territory::default();
        let mut live: Vec<(u32, u64, u64)> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut up = 0x1000;
        for member in 0..3000u32 {
            let start = if next(4) == 0 {
                let below = next(up);
                0x1000 + below
            } else {
                up
            };
            let widest = if next(50) == 0 { 3 * WIDE } else { 300 };
            let end = start + 1 + next(widest);
            up = up.max(end) + next(200);
            t.add(member, start, end);
            live.push((member, start, end));
            if next(3) == 0 && !live.is_empty() {
                let k = next(live.len() as u64) as usize;
                t.remove(live.swap_remove(k).0);
            }
            if member % 7 == 0 {
                let lo = 0x1000 + next(up);
                let hi = lo + 1 + next(400);
                let want = live
                    .iter()
                    .all(|&(m, s, e)| e <= lo || s >= hi || m % 5 == 0);
                assert_eq!(t.free(lo, hi, |m| m % 5 == 0), want, "[{lo:#x}, {hi:#x})");
            }
        }
    }

    #[test]
    fn spanned_finds_the_sections_around_new_code() {
        let mut t = Territory::default();
        t.set_spans(7, &[(0x1000, 0x2000), (0x3000, 0x4000)]);
        t.set_spans(8, &[(0x2000, 0x2800)]);
        let mut out = Vec::new();
        t.spanned(0x1800, 0x1840, &mut out);
        assert_eq!(out, vec![(7, (0x1000, 0x2000))]);
        out.clear();
        t.spanned(0x1ff0, 0x2010, &mut out);
        assert_eq!(out, vec![(8, (0x2000, 0x2800)), (7, (0x1000, 0x2000))]);
        out.clear();
        t.spanned(0x2800, 0x3000, &mut out);
        assert!(out.is_empty());
        t.set_spans(7, &[]);
        t.spanned(0x1800, 0x1840, &mut out);
        assert!(out.is_empty());
        t.spanned(0x2100, 0x2200, &mut out);
        assert_eq!(out, vec![(8, (0x2000, 0x2800))]);
    }
}
