//! Rolling a growing payload back to before one of its objects.

use super::{
    put_u32, set_size, Growing, OpenUnit, DEBUG_STR, FILE_HEADER, FRAME, FRAME_R, INFO, INFO_R,
    LINE, LINE_R, OPEN_UNITS, PAYLOAD, RANGES, RANGES_R, REGIONS, SECTION_HEADER, STRINGS_R,
    STRTAB, SYMBOLS_R, SYMTAB,
};

/// The state of a payload before an object was appended: what [`Growing::roll_back`]
/// returns to.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    /// The open unit the object joined or opened (`NO_SLOT`: none), and what that slot of
    /// `Growing::open` held before.
    pub(super) slot: u8,
    pub(super) was: Option<OpenUnit>,
    pub(super) used: [u32; REGIONS],
    pub(super) sections: u16,
    pub(super) functions: u32,
    /// Length of `Growing::extended` then.
    pub(super) extended: u32,
}

/// Where a rollback cut a payload: the bytes of each region before `used` were kept, and
/// so was all of every unit but those open then (`open`), which later objects joined.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cut {
    pub(super) used: [usize; REGIONS],
    pub(super) open: [Option<OpenUnit>; OPEN_UNITS],
}

impl Growing {
    /// The payload `buf` (this state's) as it was before its object `k` (in append order)
    /// was appended, in a buffer of its own, and this state as it was then: the objects
    /// before `k` stay as they are, the caller appends those after it again, links the new
    /// payload in `buf`'s place and gives `buf` back ([`Growing::keep_mirror`]). Copying the
    /// used part of the payload costs much less than encoding its objects again, and the
    /// payload the debugger may read is never changed (a core file cut meanwhile shows
    /// every object). The buffer given back is the next rollback's: it holds the same
    /// bytes as the new payload up to where this rollback cut, so only the rest is copied
    /// (a tiering runtime unregisters recent objects: little). `None` (state unchanged): no
    /// object `k`. After `Some`, the state is the new payload's; should the caller give up
    /// before linking it, it must not append to `buf` again.
    pub(crate) fn roll_back(
        &mut self,
        buf: &[u8],
        k: usize,
        spare: Option<Vec<u8>>,
    ) -> Option<Vec<u8>> {
        let mark = *self.marks.get(k)?;
        if buf.len() != PAYLOAD {
            return None;
        }
        let (mut new, same) = match (self.mirror.take(), spare) {
            (Some((m, cut)), _) => (m, Some(cut)),
            (None, Some(b)) if b.len() == PAYLOAD => (b, None),
            _ => (vec![0u8; PAYLOAD], None),
        };
        let sections = usize::from(mark.sections);
        let headers = FILE_HEADER + sections * SECTION_HEADER;
        new[..headers].copy_from_slice(&buf[..headers]);
        let (abbrev_at, abbrev_len) = self.abbrev;
        new[abbrev_at..abbrev_at + abbrev_len]
            .copy_from_slice(&buf[abbrev_at..abbrev_at + abbrev_len]);
        let used = mark.used.map(|u| u as usize);
        let same_used = same.map_or([0; REGIONS], |c| c.used);
        for ((&start, &used), &same) in self.start.iter().zip(&used).zip(&same_used) {
            let from = start + same.min(used);
            new[from..start + used].copy_from_slice(&buf[from..start + used]);
        }
        // The units open when the mirror was cut: later objects may have joined them.
        for u in same.iter().flat_map(|c| c.open.iter().flatten()) {
            for (from, to) in [
                (u.end, u.limit),
                (u.ranges_next, u.ranges_limit),
                (u.line_at, u.line_at + 4),
                (u.line_end, u.line_limit),
            ] {
                new[from..to].copy_from_slice(&buf[from..to]);
            }
        }
        for &(section, end) in self.extended[mark.extended as usize..].iter().rev() {
            if let Some(r) = self.runs.iter_mut().find(|r| r.section == section) {
                r.end = end;
            }
        }
        self.runs.retain(|r| usize::from(r.section) < sections);
        // The units open before object `k`, as they were: later entries took some of their
        // rooms, later ranges some of their lists', later sequences lengthened their line
        // programs.
        let mut open = self.open;
        for m in self.marks[k..].iter().rev() {
            if let Some(slot) = open.get_mut(usize::from(m.slot)) {
                *slot = m.was;
            }
        }
        for u in open.iter().flatten() {
            new[u.end..u.limit].fill(0);
            new[u.ranges_next..u.ranges_limit].fill(0);
            put_u32(&mut new, u.line_at, u.line_end - u.line_at - 4);
        }
        // Not linked yet: sizes in any order.
        new[60..62].copy_from_slice(&mark.sections.to_le_bytes());
        set_size(&mut new, DEBUG_STR, used[STRINGS_R]);
        set_size(&mut new, STRTAB, used[STRINGS_R]);
        set_size(&mut new, SYMTAB, used[SYMBOLS_R]);
        set_size(&mut new, INFO, used[INFO_R]);
        set_size(&mut new, LINE, self.end[LINE_R] - self.start[LINE_R]);
        set_size(&mut new, RANGES, used[RANGES_R]);
        set_size(&mut new, FRAME, used[FRAME_R]);
        for r in &self.runs {
            set_size(&mut new, r.section.into(), (r.end - r.start) as usize);
        }
        self.used = used;
        self.sections = sections;
        self.functions = mark.functions as usize;
        self.marks.truncate(k);
        self.index.plain.truncate(k);
        self.extended.truncate(mark.extended as usize);
        self.open = open;
        // Later entries, ranges and sequences of the open units go into their rooms: the
        // new payload shares the bytes before `used` but those rooms (and their line
        // programs' lengths).
        self.cut = Some(Cut { used, open });
        Some(new)
    }

    /// Keeps `old`, the payload the last [`Growing::roll_back`] replaced, for the next one.
    pub(crate) fn keep_mirror(&mut self, old: Vec<u8>) {
        if let Some(cut) = self.cut.take() {
            self.mirror = Some((old, cut));
        }
    }
}
