//! Unregistration: a member leaves its batch, which is unlinked if it held nothing else,
//! left with a tombstone (quiet compact batches), rolled back or split (growing ELF), or
//! rewritten without it. `route::removal` decides which.

use std::sync::atomic::Ordering;

use super::batch::{position_of, EntryCell, Kind};
use super::quiet::OPEN_CAPACITY;
use super::route::{self, Context, Leaving, Removal};
use super::state::State;
use super::Format;
use crate::descriptor::DebuggerList;

/// Says once per process that a batch could not be rewritten without an object that left
/// it (a bug of ours: what the registry kept of its own objects did not decode or encode
/// again), so the debugger may still list that object: nothing is dropped silently.
#[cold]
fn stale_batch(why: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "jit-interface: internal error: a batch entry could not be rewritten after an \
             unregistration ({why}); debuggers may still list functions unregistered from it \
             (reported once; please report it)"
        );
    }
}

impl<L: DebuggerList> State<L> {
    /// Unregisters member `id`. Its entry is unlinked if it held nothing else. Otherwise,
    /// without a debugger, the object's live slot is cleared and its record left in place (a
    /// tombstone, skipped by every reader); with one, the batch is rewritten without it.
    pub(super) fn remove(&mut self, id: u32) {
        let Some(batch) = self.take_member(id) else {
            return;
        };
        let mut ctx = self.context();
        self.unregister(&mut ctx, batch, &[id]);
        self.live.get(id as usize).store(0, Ordering::Release);
        self.free.push(id);
    }

    /// Unregisters the members `ids` (see `remove`) at once: each batch that held some of
    /// them is rewritten (or its dead records counted) once, not once per member. Ids not
    /// registered, or given twice, are skipped.
    pub(super) fn remove_many(&mut self, ids: impl IntoIterator<Item = u32>) {
        let mut taken: Vec<(u64, u32)> = Vec::new();
        for id in ids {
            if let Some(batch) = self.take_member(id) {
                taken.push((batch, id));
            }
        }
        let mut ctx = self.context();
        // Grouped by batch, each group's ids sorted (`unregister` searches them).
        taken.sort_unstable();
        for group in taken.chunk_by(|a, b| a.0 == b.0) {
            let ids: Vec<u32> = group.iter().map(|&(_, id)| id).collect();
            self.unregister(&mut ctx, group[0].0, &ids);
        }
        for (_, id) in taken {
            self.live.get(id as usize).store(0, Ordering::Release);
            self.free.push(id);
        }
    }

    /// Takes members `ids` (sorted) out of `batch_id` (see `remove`). The caller clears their
    /// live slots afterwards (a tombstone's slot is cleared here, before anything else).
    fn unregister(&mut self, ctx: &mut Context, batch_id: u64, ids: &[u32]) {
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        // The position of a single member taken out (a growing batch may roll back to it),
        // and the bytes of records taken out.
        let (pos, gone) = if let [id] = ids {
            let Some(pos) = position_of(&batch.members, *id) else {
                return;
            };
            (Some(pos), batch.members.remove(pos).place.len())
        } else {
            let before = batch.members.len();
            let mut gone = 0;
            batch.members.retain(|s| {
                let out = ids.binary_search(&s.id).is_ok();
                if out {
                    gone += s.place.len();
                }
                !out
            });
            if batch.members.len() == before {
                return;
            }
            (None, gone)
        };
        let leaving = Leaving {
            format: batch.format,
            merging: batch.merge_level().is_some(),
            growing: batch.is_growing(),
            the_growing_batch: batch_id == self.growing,
            left: batch.members.len(),
            pos,
            peeled: self.peeled,
        };
        match route::removal(ctx, &leaving) {
            Removal::Unlink => self.unlink_batch(batch_id),
            Removal::Tombstone => self.tombstone(ctx, batch_id, ids, gone),
            Removal::Rewrite { roll_back, peel } => {
                let pos = pos.unwrap_or_default();
                if roll_back && self.regrow(batch_id, pos) {
                    return;
                }
                if peel && self.peel(batch_id, pos) {
                    return;
                }
                self.rewrite(ctx, batch_id);
                // The debugger read the rewritten batch whole; outside deferred mode it would
                // have to re-read it at every append, so appends go elsewhere.
                if !ctx.deferred && self.open.contains(&batch_id) {
                    self.seal(batch_id);
                }
            }
        }
    }

    /// Rewrites batch `batch_id` with only its current members (dead records dropped) and
    /// swaps the new entry into the old one's place: one pointer store, then the debugger
    /// drops the old entry and reads the new one. Under a debugger a sealed compact batch is
    /// rewritten as ELF (see `build_as_elf`).
    pub(super) fn rewrite(&mut self, ctx: &Context, batch_id: u64) {
        let Some(batch) = self.batches.get(batch_id) else {
            return;
        };
        // A pending ELF entry is rewritten silently and stays pending (`swap_payload`);
        // other batches are announced whole by the rewrite.
        if !matches!(batch.kind, Kind::Pending) {
            self.drop_pending(batch_id);
        }
        let Some(batch) = self.batches.get(batch_id) else {
            return;
        };
        let (format, open) = (batch.format, batch.is_open());
        if batch.is_growing() {
            // Rewritten by the general encoder: it grows no more.
            self.seal(batch_id);
        }
        if format == Format::Elf && self.recopy(batch_id) {
            return;
        }
        if format == Format::Elf && !self.decode_models(batch_id) {
            // A record of our own that does not decode (or an object that does not read
            // back from its payload): leave the batch (stale) as it is.
            stale_batch("an object of the batch could not be decoded from what was kept of it");
            return;
        }
        let cell = EntryCell::new();
        // A subset of objects that encoded together encodes again; should it ever fail, the
        // dead objects stay visible to the debugger (stale) rather than the list breaking.
        let (new_format, built) = match self.build_as_elf(ctx, &[batch_id]) {
            Some(built) => (Format::Elf, Ok(built)),
            None => (format, self.build(format, &[batch_id])),
        };
        let (mut buf, slots, spanning) = match built {
            Ok(built) => built,
            Err(e) => {
                stale_batch(&e.to_string());
                return;
            }
        };
        if open {
            // Keep the open batch appendable.
            buf.reserve_exact(OPEN_CAPACITY.saturating_sub(buf.len()));
        }
        // Every member has its model now (decoded above, or by `build_as_elf`).
        self.swap_payload(batch_id, cell, buf, slots);
        self.territory.set_spans(batch_id, &spanning);
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        if new_format != format {
            batch.format = new_format;
            if let Some(level) = batch.merge_level() {
                // Merged with batches of its new format from now on.
                if let Some(list) = self.levels.get_mut(&(format as u8, level)) {
                    list.retain(|&b| b != batch_id);
                }
                self.levels
                    .entry((new_format as u8, level))
                    .or_default()
                    .push(batch_id);
            }
        }
    }
}
