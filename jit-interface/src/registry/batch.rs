//! One debugger entry and what it holds: [`Batch`], its [`Kind`], and where each member's
//! data is in it ([`Slot`], [`Place`]).

use std::cell::UnsafeCell;
use std::num::NonZeroU32;
use std::ops::Range;

use super::Format;
use crate::descriptor::JitCodeEntry;
use crate::elf::{Growing, GrowingIndex};
use crate::model::JitObject;

/// One debugger entry. Boxed, so its address is stable while linked.
pub(super) struct EntryCell {
    /// Its links are changed only under the descriptor's lock, its size only under the
    /// registry's (and both by the debugger).
    pub(super) entry: UnsafeCell<JitCodeEntry>,
}

impl EntryCell {
    pub(super) fn new() -> Box<EntryCell> {
        Box::new(EntryCell {
            entry: UnsafeCell::new(JitCodeEntry::new(&[])),
        })
    }

    /// A new cell pointing at `payload` (to be linked, or swapped in for an older one).
    pub(super) fn pointing_at(payload: &[u8]) -> Box<EntryCell> {
        let mut cell = EntryCell::new();
        *cell.entry.get_mut() = JitCodeEntry::new(payload);
        cell
    }
}

/// What a batch is: this decides how it may change (merged, appended to, rolled back, split).
pub(super) enum Kind {
    /// Waiting in the merge tree at `level` (0: one registration's own entry; 1: `FAN_IN` of
    /// those merged): merged with `FAN_IN - 1` others of its level and format.
    Merging { level: usize },
    /// Never merged or appended to again: big objects, the merge tree's top, entries whose
    /// merge failed, in-place batches once full or seen by a debugger.
    Sealed,
    /// The compact batch records are appended to in place (`State::append_quietly`).
    Open,
    /// An ELF batch small objects are appended to in place (`State::append_growing`): the
    /// state of its payload. The growing batch, or the retired one (see `State::retire`).
    Growing(Box<Growing>),
    /// A growing batch that stopped growing: where its plain objects are in its payload (see
    /// `Batch::decode_member`), which rebuilding it by copies (`State::recopy`) keeps, and a
    /// rewrite by the general encoder replaces with a model for every member.
    Grown(Box<GrowingIndex>),
    /// The end split off another batch (see `State::peel`), counted in `State::peeled`.
    Peeled,
    /// A small ELF registration's own entry in deferred mode under a debugger: linked (attach
    /// and core files see it) but not announced. At the next flush the pending entries are
    /// merged into one announced entry and these are unlinked silently (GDB reads an ELF
    /// entry lazily from memory, so one it was told about is never changed; one it was not
    /// told about it never read). Counted in `State::pending`.
    Pending,
}

/// Where a member's data is in its batch. Kept once per registered object, and every byte
/// kept per registration is paid for (memory touched for the first time costs about as much
/// as encoding a record): 8 bytes (the length's zero is the tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// Bytes of the member's own: its compact record, in the payload of a compact batch or in
    /// `Batch::records` of an ELF one (a sealed or growing batch). In the other ELF batches
    /// every member has its model kept, and its place is not used.
    Bytes { at: u32, len: NonZeroU32 },
    /// A plain object of a growing or grown ELF batch, read back from the payload: its index
    /// in append order.
    Object(u32),
}

impl Place {
    /// The `len` bytes at `at`. Records and payloads are never empty; were `len` 0, the place
    /// would read as what the registry always took a place without bytes for, an object index.
    #[inline]
    pub(super) fn bytes(at: u32, len: u32) -> Place {
        debug_assert!(len > 0, "a place of no bytes");
        match NonZeroU32::new(len) {
            Some(len) => Place::Bytes { at, len },
            None => Place::Object(at),
        }
    }

    /// The byte range of a member's own bytes.
    #[inline]
    pub(super) fn range(self) -> Option<Range<usize>> {
        match self {
            Place::Bytes { at, len } => Some(at as usize..at as usize + len.get() as usize),
            Place::Object(_) => None,
        }
    }

    /// How many bytes of its own the member has in the batch (none for a plain object).
    #[inline]
    pub(super) fn len(self) -> usize {
        match self {
            Place::Bytes { len, .. } => len.get() as usize,
            Place::Object(_) => 0,
        }
    }

    #[inline]
    pub(super) fn has_bytes(self) -> bool {
        matches!(self, Place::Bytes { .. })
    }
}

#[derive(Clone, Copy)]
pub(super) struct Slot {
    /// Member index (`Registration::id`).
    pub(super) id: u32,
    pub(super) place: Place,
}

/// A debugger entry holding one or more registered objects.
pub(super) struct Batch {
    /// The entry cell is allocated before the payload (callers of `Batch::new` do), so that it
    /// usually lies before it in memory: a core file cut inside the payload still shows the
    /// entry (and the cut).
    pub(super) cell: Box<EntryCell>,
    /// The payload the entry points to. Never reallocated while linked: in-place appends
    /// stay within the capacity it was created with.
    pub(super) buf: Vec<u8>,
    pub(super) members: Vec<Slot>,
    /// Bytes of `buf` taken by tombstoned records.
    pub(super) dead: usize,
    pub(super) format: Format,
    pub(super) kind: Kind,
    /// Records appended while a debugger was attached and not yet announced (deferred mode).
    pub(super) pending: usize,
    /// A sealed ELF batch of small objects: a compact header, then the compact records
    /// (without live checks) of those members that have no model, which the first rewrite
    /// (a member leaves) decodes. A model takes about four times the memory of its record,
    /// and sealed batches hold nearly every registration of a long run (see `keep_records`).
    /// A growing ELF batch keeps its members' records the same way.
    pub(super) records: Vec<u8>,
}

impl Batch {
    pub(super) fn new(
        cell: Box<EntryCell>,
        format: Format,
        kind: Kind,
        buf: Vec<u8>,
        members: Vec<Slot>,
    ) -> Batch {
        Batch {
            cell,
            buf,
            members,
            dead: 0,
            format,
            kind,
            pending: 0,
            records: Vec::new(),
        }
    }

    #[inline]
    pub(super) fn entry(&self) -> *mut JitCodeEntry {
        self.cell.entry.get()
    }

    /// Points the (not yet linked) entry at the payload.
    pub(super) fn point_entry(&mut self) {
        *self.cell.entry.get_mut() = JitCodeEntry::new(&self.buf);
    }

    /// Its level in the merge tree, if it waits there.
    #[inline]
    pub(super) fn merge_level(&self) -> Option<usize> {
        match self.kind {
            Kind::Merging { level } => Some(level),
            _ => None,
        }
    }

    #[inline]
    pub(super) fn is_open(&self) -> bool {
        matches!(self.kind, Kind::Open)
    }

    #[inline]
    pub(super) fn is_growing(&self) -> bool {
        matches!(self.kind, Kind::Growing(_))
    }

    /// Where the plain objects of a growing or grown batch are in its payload.
    #[inline]
    pub(super) fn index(&self) -> Option<&GrowingIndex> {
        match &self.kind {
            Kind::Growing(growing) => Some(growing.index()),
            Kind::Grown(index) => Some(index),
            _ => None,
        }
    }

    /// The model of member `slot` of an ELF batch, which has no model kept: decoded from its
    /// compact record, or read back from the payload (a plain object of a grown batch).
    pub(super) fn decode_member(&self, slot: &Slot) -> Option<JitObject> {
        match slot.place {
            Place::Bytes { .. } => decode_record(&self.records, slot.place),
            Place::Object(k) => self.index()?.object(&self.buf, k as usize),
        }
    }
}

/// The model in the compact record at `place` in `records` (a compact header, then records).
pub(super) fn decode_record(records: &[u8], place: Place) -> Option<JitObject> {
    let header = records.get(..crate::format::HEADER_LEN)?;
    let record = records.get(place.range()?)?;
    let mut payload = Vec::with_capacity(header.len() + record.len());
    payload.extend_from_slice(header);
    payload.extend_from_slice(record);
    crate::format::decode(&payload).ok().map(|d| d.object)
}

/// Where member `id` is in `members`, searched from both ends at once: code dropped in
/// order (oldest or newest first) is found at once rather than after a whole batch.
pub(super) fn position_of(members: &[Slot], id: u32) -> Option<usize> {
    let (mut front, mut back) = (0, members.len());
    while front < back {
        if members[front].id == id {
            return Some(front);
        }
        back -= 1;
        if members[back].id == id {
            return Some(back);
        }
        front += 1;
    }
    None
}
