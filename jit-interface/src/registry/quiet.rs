//! Quiet in-place compact batches: without a debugger (or in deferred mode), compact records
//! are appended to an open batch payload, a fixed-capacity buffer whose entry's size grows
//! record by record: no stop, nothing re-encoded. Unregistering clears the object's live
//! slot only (a tombstone: every reader skips such objects), and a batch is rewritten
//! without its dead records once they are the larger part.

use std::sync::atomic::Ordering;

use super::batch::{Batch, EntryCell, Kind, Place, Slot};
use super::route::{attached_meanwhile, Context};
use super::state::{State, FREE};
use super::Format;
use crate::descriptor::DebuggerList;

use crate::model::Arch;

/// Capacity of an in-place (no debugger) batch payload. GDB copies a payload whole when it
/// reads it, and attach reads every entry: 64 KiB holds about 800 one-function objects, so
/// 100,000 of them make about 125 entries.
pub(super) const OPEN_CAPACITY: usize = 64 * 1024;

/// Records larger than this get an entry of their own rather than filling an open batch.
pub(super) const OPEN_RECORD_MAX: usize = OPEN_CAPACITY / 4;

/// A batch is rewritten without its dead records once they take more than half of it (and
/// at least this many bytes: small batches are not worth a rewrite).
const COMPACT_MIN_DEAD: usize = 4096;

/// Index of `arch` in `State::open` (a match, so that a new architecture must get one).
fn open_index(arch: Arch) -> usize {
    match arch {
        Arch::X86_64 => 0,
        Arch::Aarch64 => 1,
    }
}

impl<L: DebuggerList> State<L> {
    /// Appends a compact record to the open batch of `arch` in place (a new open batch when
    /// there is none or it is full). No debugger was attached when the caller looked (or
    /// deferred mode is on); if one is attached now it may have read the payload before the
    /// append, so it is told (now, or at the next flush in deferred mode).
    #[inline]
    pub(super) fn append_quietly(
        &mut self,
        ctx: &mut Context,
        id: u32,
        arch: Arch,
        record: &[u8],
    ) -> u64 {
        let key = open_index(arch);
        let fits = |b: &Batch| b.buf.len() + record.len() <= b.buf.capacity();
        let batch_id = self.open[key];
        if batch_id != FREE {
            if let Some(batch) = self.batches.get_mut(batch_id).filter(|b| fits(b)) {
                // Both below OPEN_CAPACITY.
                let at = batch.buf.len() as u32;
                batch.buf.extend_from_slice(record);
                batch.members.push(Slot {
                    id,
                    place: Place::bytes(at, record.len() as u32),
                });
                // SAFETY: the entry is linked and points at `buf`, which did not move (the
                // append stayed within its capacity); the new size ends on a record boundary;
                // entries are written only under the registry's lock, which is held.
                unsafe { self.list.set_size(batch.entry(), batch.buf.len()) };
                if attached_meanwhile(&self.list, ctx) {
                    if self.deferred.is_some() {
                        self.note_pending(batch_id);
                    } else {
                        self.republish(batch_id, false);
                    }
                }
                return batch_id;
            }
            // Full: it stays as it is, sealed.
            self.seal(batch_id);
        }
        self.open_new(id, arch, record)
    }

    /// `append_quietly` when there is no open batch with room: a new one, holding `record`.
    #[cold]
    #[inline(never)]
    fn open_new(&mut self, id: u32, arch: Arch, record: &[u8]) -> u64 {
        let key = open_index(arch);
        // Allocated before the payload: see `Batch::cell`.
        let cell = EntryCell::new();
        let mut buf =
            Vec::with_capacity(OPEN_CAPACITY.max(crate::format::HEADER_LEN + record.len()));
        // The batch fills up before another opens (or a debugger closes it): all its pages
        // are written, so all are faulted in at once.
        let capacity = buf.capacity();
        crate::pages::prefault_spare(&mut buf, capacity);
        buf.extend_from_slice(&crate::format::header(arch));
        let at = buf.len() as u32;
        buf.extend_from_slice(record);
        // Room for as many slots as records of this size fill the batch: the slot list does
        // not grow by copying (every copy touches fresh memory), and room not used is never
        // touched.
        let mut slots = Vec::with_capacity(OPEN_CAPACITY / record.len().max(16) + 1);
        slots.push(Slot {
            id,
            // At most OPEN_RECORD_MAX (the caller checked).
            place: Place::bytes(at, record.len() as u32),
        });
        let batch_id = self.link_new(cell, Format::Compact, Kind::Open, buf, slots);
        self.open[key] = batch_id;
        batch_id
    }

    /// A debugger is attached: open batches stop growing in place (it has read them, on
    /// attach, or is told about them by `republish`).
    pub(super) fn close_open_batches(&mut self) {
        for b in self.open.into_iter().chain([self.growing, self.retired]) {
            if b != FREE {
                self.seal(b);
            }
        }
    }

    /// Members `ids` left the compact batch `batch_id` without a debugger: their records
    /// (`gone` bytes) stay as tombstones, their live slots cleared; the batch is rewritten
    /// once dead records are the larger part, or at once if a debugger attached meanwhile
    /// (it may have read the objects while live).
    pub(super) fn tombstone(&mut self, ctx: &mut Context, batch_id: u64, ids: &[u32], gone: usize) {
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        batch.dead += gone;
        let dead = batch.dead;
        let len = batch.buf.len();
        for &id in ids {
            self.live.get(id as usize).store(0, Ordering::Release);
        }
        if attached_meanwhile(&self.list, ctx) {
            self.rewrite(ctx, batch_id);
            if !ctx.deferred {
                self.seal(batch_id);
            }
        } else if dead >= COMPACT_MIN_DEAD && dead * 2 > len {
            self.rewrite(ctx, batch_id);
        }
    }
}
