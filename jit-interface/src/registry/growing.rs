//! Growing ELF payloads: without a debugger, small ELF objects are appended in place to one
//! ELF payload (`elf::Growing`), each encoded once, into its place. ELF has no live check, so
//! an object leaving such a batch makes it be rewritten: a recent object is rolled back
//! (`regrow`; the payload that filled up last too, see `retire`), a batch's first or last
//! object splits its end off (`peel`, also under a debugger), a grown batch that loses
//! others is rebuilt by copies (`recopy`), and anything else is re-encoded whole.

use std::sync::Arc;

use super::batch::{decode_record, EntryCell, Kind, Place, Slot};
use super::route::{attached_meanwhile, Context};
use super::state::{offset32, State, FREE};
use super::Format;
use crate::descriptor::DebuggerList;
use crate::error::Result;
use crate::model::{Arch, JitObject};

/// Growing payloads' buffers kept for reuse (see `State::spare_growing`).
pub(super) const SPARE_GROWING: usize = 2;

/// Members of an ELF batch split off with its first or last member (see `State::peel`).
pub(super) const PEEL: usize = 64;

/// At most this many such ends are linked at once: a runtime draining its code in order
/// has one or two, and no pattern of drops can make the list grow by more.
pub(super) const PEEL_MAX: usize = 32;

/// A grown ELF batch that loses members is rebuilt by copies (see `State::recopy`) if at
/// least this many are left: the new payload has the growing size (256 KiB), which fewer
/// objects would leave mostly empty, and which a rewrite by the general encoder into a
/// payload of their size (their models kept) costs less than (under churn, a live set of
/// 512 objects among payloads that filled up: 117 ms against 282 ms by copies).
const RECOPY_MIN: usize = 256;

/// Growing payloads are rebuilt (`State::regrow`) only while the objects appended again
/// stay below `REGROW_LIMIT` times those appended, plus `REGROW_SLACK`; beyond, a growing
/// batch that loses an object is sealed and rewritten the general way.
const REGROW_LIMIT: u64 = 1;
const REGROW_SLACK: u64 = 4096;

/// An object a rollback appends again (`State::regrow`): from its model, or copied from
/// the payload (a plain object, where its index entry says).
enum Again {
    Model(Arc<JitObject>),
    Copy(crate::elf::GrowingPlain),
}

/// Is `object` one that a growing payload can read back (see `elf::GrowingIndex`): all
/// its functions with line rows in one source file, no blocks? (The payload has the last
/// word.)
#[inline]
pub(super) fn maybe_plain(object: &JitObject) -> bool {
    let plain = |f: &crate::model::Function<'_>| !f.lines().is_empty() && f.blocks().is_empty();
    let functions = object.functions();
    match functions.first() {
        // The usual object: one function.
        Some(first) if functions.len() == 1 => plain(&first),
        Some(first) => functions
            .iter()
            .all(|f| plain(&f) && f.file() == first.file()),
        None => false,
    }
}

/// Can `object`'s compact record carry it whole (for re-encoding as ELF), and a growing
/// ELF payload take it? Source texts are carried by the record, but a growing payload has
/// no room for them: objects with sources take the general path, and keep their models.
#[inline]
pub(super) fn lossless(object: &JitObject) -> bool {
    !object.has_sources()
        && object
            .functions()
            .iter()
            .all(|f| f.calls().is_empty() && f.variables().is_empty())
}

/// The slot of member `id`, object `k` of a growing ELF batch: a plain object (`plain`) is
/// read back from the payload; another keeps its compact record in `records` (`record`, or
/// encoded here if the caller expected a plain object). An object that is not plain but has
/// no record (it failed) gets an object index too: the caller keeps its model.
#[inline]
fn kept_slot(
    records: &mut Vec<u8>,
    id: u32,
    object: &JitObject,
    record: &[u8],
    k: usize,
    plain: bool,
) -> Slot {
    // A payload holds about 1,000 objects.
    let index = Slot {
        id,
        place: Place::Object(k as u32),
    };
    if plain {
        return index;
    }
    let before = records.len();
    if records.is_empty() {
        // Room for the records of a full payload: they are about a fifth of its size.
        records.reserve(crate::elf::GROWING_PAYLOAD / 4);
        records.extend_from_slice(&crate::format::header(object.arch()));
    }
    let at = records.len();
    let encoded = if record.is_empty() {
        crate::format::encode_record(records, object, None).is_ok()
    } else {
        records.extend_from_slice(record);
        true
    };
    match (
        encoded,
        offset32(at, Format::Compact),
        offset32(records.len() - at, Format::Compact),
    ) {
        (true, Ok(at), Ok(len)) => Slot {
            id,
            place: Place::bytes(at, len),
        },
        _ => {
            records.truncate(before);
            index
        }
    }
}

impl<L: DebuggerList> State<L> {
    /// Appends the small ELF object `object` (member `id`, whose compact record without
    /// live check is `record`, empty if it may be plain) in place to the growing ELF batch,
    /// or to a new one when there is none or it is full. Returns the batch and the bytes the
    /// object took there;
    /// `Ok(None)` if it fits in no growing payload (the caller registers it the general
    /// way). No debugger was attached when the caller looked; if one is attached now, it is
    /// told about the batch, which stops growing.
    ///
    /// Why: without a debugger, small ELF objects registered one by one used to get an entry
    /// each, merged 32 at a time and again 32 of those at a time, so every object was
    /// encoded three times; in a growing payload it is encoded once, into its place.
    pub(super) fn append_growing(
        &mut self,
        ctx: &mut Context,
        id: u32,
        object: &JitObject,
        record: &[u8],
    ) -> Result<Option<(u64, usize)>> {
        offset32(record.len(), Format::Compact)?;
        let batch_id = self.growing;
        if batch_id != FREE {
            if let Some(batch) = self.batches.get_mut(batch_id) {
                if let Kind::Growing(growing) = &mut batch.kind {
                    if let Some(bytes) = growing.append(&mut batch.buf, object)? {
                        let k = growing.objects() - 1;
                        let plain = growing.index().is_plain(k);
                        let slot = kept_slot(&mut batch.records, id, object, record, k, plain);
                        batch.members.push(slot);
                        if !slot.place.has_bytes() && !plain {
                            self.set_model(id, Some(Arc::new(object.clone())));
                        }
                        if attached_meanwhile(&self.list, ctx) {
                            // It may have read the payload before.
                            self.republish(batch_id, false);
                        }
                        return Ok(Some((batch_id, bytes)));
                    }
                }
            }
            // Full (or no room for this object): it takes no more.
            self.retire(batch_id);
        }
        self.grow_new(ctx, id, object, record)
    }

    /// Growing batch `batch_id` takes no more objects, but keeps its growing state (and
    /// seals the batch retired before it): objects registered just before it filled up
    /// leave it by a rollback, as they would have left it while it grew.
    ///
    /// Why: a tiering runtime unregisters an object soon after registering it; when the
    /// object registered just before a payload filled up leaves it, a sealed payload is
    /// re-encoded whole (about 900 objects, 100 us). With drops at a fixed period, that can
    /// happen after every payload that fills up (measured: `scale_host tier 100000 10 elf`
    /// went from 680 to 1,030 ns per registration when a payload's size changed by 7%).
    fn retire(&mut self, batch_id: u64) {
        let previous = std::mem::replace(&mut self.retired, FREE);
        if previous != FREE && previous != batch_id {
            self.seal(previous);
        }
        if self.growing == batch_id {
            self.growing = FREE;
        }
        if self.batches.get(batch_id).is_some_and(|b| b.is_growing()) {
            self.retired = batch_id;
        }
    }

    /// `append_growing` when there is no growing batch with room: a new one, holding
    /// `object`, linked once it is in.
    #[cold]
    #[inline(never)]
    fn grow_new(
        &mut self,
        ctx: &mut Context,
        id: u32,
        object: &JitObject,
        record: &[u8],
    ) -> Result<Option<(u64, usize)>> {
        // Allocated before the payload: see `Batch::cell`.
        let cell = EntryCell::new();
        let (mut buf, mut growing) = crate::elf::Growing::new(self.spare_growing.take())?;
        let Some(bytes) = growing.append(&mut buf, object)? else {
            return Ok(None);
        };
        let plain = growing.index().is_plain(0);
        let mut records = Vec::new();
        let slot = kept_slot(&mut records, id, object, record, 0, plain);
        if !slot.place.has_bytes() && !plain {
            self.set_model(id, Some(Arc::new(object.clone())));
        }
        // Room for a full payload's objects: growing by copying touches fresh memory.
        let mut members = Vec::with_capacity(crate::elf::GROWING_PAYLOAD / 256);
        members.push(slot);
        let batch_id = self.link_new(cell, Format::Elf, Kind::Sealed, buf, members);
        if let Some(b) = self.batches.get_mut(batch_id) {
            b.records = records;
            b.kind = Kind::Growing(Box::new(growing));
        }
        if attached_meanwhile(&self.list, ctx) {
            // It read the batch when linked; it is not told about appends.
            self.seal(batch_id);
        } else {
            self.growing = batch_id;
        }
        Ok(Some((batch_id, bytes)))
    }

    /// Keeps `buf`, a growing payload's buffer no longer linked, for reuse (see
    /// `State::spare_growing`).
    pub(super) fn keep_spare(&mut self, buf: Vec<u8>) {
        if buf.len() == crate::elf::GROWING_PAYLOAD {
            self.spare_growing.keep(buf);
        }
    }

    /// Takes the object at `pos` (in append order; already out of `members`) out of the
    /// growing batch `batch_id`: the payload as it was before that object was appended,
    /// copied, with the objects appended after it appended again (decoded from their
    /// records), replaces it, and keeps growing. A runtime that replaces code soon after
    /// compiling it (tiering) unregisters recent objects: few are appended again. Sealing
    /// the batch instead would leave an entry per such unregistration; encoding every
    /// member again would cost as much as a full batch at each. False if that fails (the
    /// caller rewrites it the general way).
    pub(super) fn regrow(&mut self, batch_id: u64, pos: usize) -> bool {
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return false;
        };
        let mut growing = match std::mem::replace(&mut batch.kind, Kind::Sealed) {
            Kind::Growing(growing) => growing,
            other => {
                batch.kind = other;
                return false;
            }
        };
        let members = batch.members.len();
        // A runtime that unregisters objects from the start or middle of the growing
        // payload again and again (a small set of functions replaced at random, a module
        // unloaded in order) would pay more for appending the later ones again than merging
        // would have cost: beyond a budget that grows with the objects appended, the batch
        // is sealed and rewritten instead (as a full one is).
        let suffix = (members - pos) as u64;
        if growing.objects() != members + 1
            || self.regrown + suffix > REGROW_LIMIT * self.grown + REGROW_SLACK
        {
            batch.kind = Kind::Growing(growing);
            return false;
        }
        // The objects to append again, found before the payload is cut: a plain one is
        // copied from the payload itself (where its index entry says), others from their
        // model.
        let mut again = Vec::with_capacity(members - pos);
        for s in &batch.members[pos..] {
            let item = match (self.models.get(s.id as usize), s.place) {
                (Some(Some(model)), _) => Some(Again::Model(Arc::clone(model))),
                (_, Place::Bytes { .. }) => {
                    decode_record(&batch.records, s.place).map(|m| Again::Model(Arc::new(m)))
                }
                (_, Place::Object(k)) => growing.index().plain(k as usize).map(Again::Copy),
            };
            let Some(item) = item else {
                batch.kind = Kind::Growing(growing);
                return false;
            };
            again.push(item);
        }
        self.regrown += suffix;
        let Some(mut buf) = growing.roll_back(&batch.buf, pos, self.spare_growing.take()) else {
            batch.kind = Kind::Growing(growing);
            return false;
        };
        // The objects `again` take the places `pos..` (in append order).
        let mut places = Vec::with_capacity(again.len());
        for (k, item) in (pos..).zip(&again) {
            let appended = match item {
                Again::Model(model) => growing.append(&mut buf, model),
                Again::Copy(p) => growing.append_copy(&mut buf, &batch.buf, *p),
            };
            if !matches!(appended, Ok(Some(_))) {
                // The batch stays as it was (`buf` is dropped), sealed: its objects before
                // `pos` are read back through the index (the same bytes in both payloads),
                // those after get models: the ones found above, or read back from the
                // payload where their index entries (before the cut) said.
                let ids: Vec<u32> = batch.members[pos..].iter().map(|s| s.id).collect();
                let models: Vec<Option<Arc<JitObject>>> = again
                    .into_iter()
                    .map(|item| match item {
                        Again::Model(model) => Some(model),
                        Again::Copy(p) => growing.index().object_at(&batch.buf, p).map(Arc::new),
                    })
                    .collect();
                batch.kind = Kind::Growing(growing);
                for (id, model) in ids.into_iter().zip(models) {
                    self.set_model(id, model);
                }
                self.seal(batch_id);
                return false;
            }
            places.push(growing.index().is_plain(k));
        }
        // Read back, but not plain when appended again (not expected): they keep the model.
        let mut keep = Vec::new();
        for ((s, plain), (k, item)) in batch.members[pos..]
            .iter_mut()
            .zip(places)
            .zip((pos..).zip(again))
        {
            if s.place.has_bytes() || self.models.get(s.id as usize).is_some_and(Option::is_some) {
                continue;
            }
            if plain {
                s.place = Place::Object(k as u32);
            } else {
                let model = match item {
                    Again::Model(model) => Some(model),
                    Again::Copy(p) => growing.index().object_at(&batch.buf, p).map(Arc::new),
                };
                keep.push((s.id, model));
            }
        }
        for (id, model) in keep {
            self.set_model(id, model);
        }
        let cell = EntryCell::pointing_at(&buf);
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return false;
        };
        // SAFETY: the old cell is linked; the new one is boxed and points at `buf`, and both
        // take the old ones' place in the batch right after (the old payload is kept for
        // the next rollback only then, after the debugger was told).
        unsafe { self.list.replace(batch.entry(), cell.entry.get()) };
        batch.cell = cell;
        let old = std::mem::replace(&mut batch.buf, buf);
        growing.keep_mirror(old);
        batch.kind = Kind::Growing(growing);
        true
    }

    /// Rebuilds the grown ELF batch `batch_id` (sealed, its plain members read back through
    /// its index) without the members that left: a new growing payload, the plain
    /// members' bytes copied from the old one (`Growing::append_copy_of`), the others
    /// appended from their models or records. The members keep no models: a rewrite by the
    /// general encoder gives every member one (about 240 bytes each: 1,000 objects dropped
    /// here and there among 100,000 took the process from 27 to 51 MB, and every batch they
    /// left kept them). False if it is not such a batch or an object is not appended (the
    /// caller rewrites it the general way; nothing changed).
    pub(super) fn recopy(&mut self, batch_id: u64) -> bool {
        let Some(batch) = self.batches.get(batch_id) else {
            return false;
        };
        let Kind::Grown(index) = &batch.kind else {
            return false;
        };
        if batch.members.len() < RECOPY_MIN {
            return false;
        }
        let Ok((mut buf, mut growing)) = crate::elf::Growing::new(self.spare_growing.take()) else {
            return false;
        };
        let mut slots = Vec::with_capacity(batch.members.len());
        let mut plain = Vec::with_capacity(batch.members.len());
        for (k, s) in batch.members.iter().enumerate() {
            let appended = match (self.model_of(s.id), s.place) {
                (Some(model), _) => growing.append(&mut buf, model),
                (None, Place::Object(at)) => match index.plain(at as usize) {
                    Some(p) => growing.append_copy_of(&mut buf, &batch.buf, Some(index), p),
                    None => Ok(None),
                },
                (None, Place::Bytes { .. }) => match decode_record(&batch.records, s.place) {
                    Some(model) => growing.append(&mut buf, &model),
                    None => Ok(None),
                },
            };
            if !matches!(appended, Ok(Some(_))) {
                self.keep_spare(buf);
                return false;
            }
            // A member read back from the payload is found at its new place; one that
            // has its record or model keeps it.
            let new_plain = growing.index().is_plain(k) && !s.place.has_bytes();
            plain.push(new_plain);
            slots.push(Slot {
                id: s.id,
                place: if new_plain {
                    Place::Object(k as u32)
                } else {
                    s.place
                },
            });
        }
        // Members read back before that are not plain now (not expected) get models; those
        // appended from a model that are plain now read back instead.
        let mut keep = Vec::new();
        let mut unkeep = Vec::new();
        for (s, &now) in batch.members.iter().zip(&plain) {
            if now && self.model_of(s.id).is_some() {
                unkeep.push(s.id);
            }
            if !now && !s.place.has_bytes() && self.model_of(s.id).is_none() {
                match batch.decode_member(s) {
                    Some(model) => keep.push((s.id, model)),
                    None => {
                        self.keep_spare(buf);
                        return false;
                    }
                }
            }
        }
        for (id, model) in keep {
            self.set_model(id, Some(Arc::new(model)));
        }
        // The records of members that keep theirs stay where they are.
        let records = match self.batches.get_mut(batch_id) {
            Some(b) if slots.iter().any(|s| s.place.has_bytes()) => std::mem::take(&mut b.records),
            _ => Vec::new(),
        };
        self.swap_payload(batch_id, EntryCell::new(), buf, slots);
        let (index, mirror) = growing.seal();
        if let Some(batch) = self.batches.get_mut(batch_id) {
            batch.records = records;
            batch.kind = if index.has_plain() {
                Kind::Grown(Box::new(index))
            } else {
                Kind::Sealed
            };
        }
        if let Some(mirror) = mirror {
            self.keep_spare(mirror);
        }
        for id in unkeep {
            self.set_model(id, None);
        }
        true
    }

    /// A sealed ELF batch that lost its first or its last member (at `pos`, in append order;
    /// already out of `members`; see `route::removal`) is rewritten as two entries: the
    /// `PEEL` members at that end, and the rest. False if that fails (the caller rewrites it
    /// whole).
    ///
    /// Why: a runtime that drops its code oldest first (a `Vec` of registrations dropped at
    /// shutdown, a code cache flushed in order) takes the first member out of a full batch
    /// at every drop, and ELF has no live check: each drop would re-encode the whole batch
    /// (up to about 1,000 objects), and make an attached GDB read it again. Peeled, the next
    /// `PEEL` drops rewrite the small entry only, and the rest is re-encoded once per `PEEL`
    /// drops. Only end members are peeled: a batch drained in order makes one entry more at
    /// a time (its peeled end empties before the next peel), objects dropped here and there
    /// (tiering, churn) hardly ever are an end, and at most `PEEL_MAX` peeled ends are linked
    /// at once, so the number of entries, which GDB's cost per stop grows with, stays as it
    /// was.
    pub(super) fn peel(&mut self, batch_id: u64, pos: usize) -> bool {
        let Some(batch) = self.batches.get(batch_id) else {
            return false;
        };
        let n = batch.members.len();
        let growing = batch.is_growing();
        self.drop_pending(batch_id);
        if growing {
            // Re-encoded by the general encoder: it grows no more.
            self.seal(batch_id);
        }
        if !self.decode_models(batch_id) {
            return false;
        }
        let Some(batch) = self.batches.get(batch_id) else {
            return false;
        };
        let at = if pos == 0 { PEEL } else { n - PEEL };
        let encode = |slots: &[Slot]| {
            let models = slots
                .iter()
                .map(|s| self.model_of(s.id))
                .collect::<Option<Vec<&JitObject>>>()?;
            let arch = models.first().map_or(Arch::X86_64, |m| m.arch());
            crate::elf::encode_objects(arch, &models).ok()
        };
        // Allocated before their payloads: see `Batch::cell`.
        let (cell, back_cell) = (EntryCell::new(), EntryCell::new());
        let (Some(front), Some(back)) =
            (encode(&batch.members[..at]), encode(&batch.members[at..]))
        else {
            return false;
        };
        let (front_slots, back_slots) =
            (batch.members[..at].to_vec(), batch.members[at..].to_vec());
        // The new entry is linked before the old one is replaced: a core file taken in
        // between lists its objects twice, never not at all.
        let back_id = self.link_new(back_cell, Format::Elf, Kind::Sealed, back, back_slots);
        // The end split off: the old batch's place (oldest end) or the new one (newest).
        let end = if pos == 0 { batch_id } else { back_id };
        if let Some(b) = self.batches.get_mut(end) {
            b.kind = Kind::Peeled;
            self.peeled += 1;
        }
        self.swap_payload(batch_id, cell, front, front_slots);
        true
    }
}
