//! The merge tree: under a debugger every registration gets an entry of its own, and every
//! `FAN_IN` entries of one level are merged into one of the next, up to sealed batches
//! that hold `FAN_IN^2` objects. A merge builds the new payload (compact records copied as
//! bytes, ELF re-encoded from models), links it, then unlinks the old entries.

use std::sync::Arc;
use std::time::Instant;

use super::batch::{decode_record, Batch, EntryCell, Kind, Place, Slot};
use super::growing::lossless;
use super::route::Context;
use super::state::{offset32, Batches, State};
use super::territory::spans_gaps;
use super::Format;
use crate::descriptor::DebuggerList;
use crate::error::Result;
use crate::model::{Arch, JitObject};

/// Consolidation fan-in under a debugger: this many entries of one level are merged into
/// one entry of the next level. Two levels: a sealed entry holds up to `FAN_IN^2` objects, so
/// GDB holds about `N / FAN_IN^2 + 2 * FAN_IN` entries for N small registrations. Measured
/// under GDB (`scripts/bench.sh`): ELF one-by-one registration at 10,000 functions took
/// 1.06 ms each with a fan-in of 16, 0.74 ms with 32. A larger fan-in makes each
/// unregistration from a sealed batch make GDB re-read more objects.
pub(super) const FAN_IN: usize = 32;

/// A built payload: its bytes, its members' slots, and its sections that span gaps.
pub(super) type Built = (Vec<u8>, Vec<Slot>, Vec<(u64, u64)>);

/// Levels of the merge tree below the sealed batches at its top.
const LEVELS: usize = 2;

impl<L: DebuggerList> State<L> {
    /// Merges the entries waiting at `level` of `format`, however few.
    pub(super) fn merge_waiting(&mut self, ctx: &Context, format: Format, level: usize) {
        let ids = self
            .levels
            .get_mut(&(format as u8, level))
            .map(std::mem::take)
            .unwrap_or_default();
        if !ids.is_empty() {
            self.merge(ctx, format, level, ids);
        }
    }

    /// Batch `batch` waits at `level` of `format`; a full level is merged.
    pub(super) fn level_push(&mut self, ctx: &Context, format: Format, level: usize, batch: u64) {
        let list = self.levels.entry((format as u8, level)).or_default();
        list.push(batch);
        if list.len() >= FAN_IN {
            let ids = std::mem::take(list);
            self.merge(ctx, format, level, ids);
        }
    }

    /// The payload of an entry holding the current members of `batches`, their slots in it,
    /// and its sections that span gaps. Compact records are copied as bytes (tombstones left
    /// out); ELF objects are encoded afresh from their models, their sections spanning the
    /// gaps no other live object's code touches (see `territory`).
    pub(super) fn build(&self, format: Format, batches: &[u64]) -> Result<Built> {
        let parts: Vec<&Batch> = batches
            .iter()
            .filter_map(|b| self.batches.get(*b))
            .collect();
        match format {
            Format::Compact => {
                let live: usize = parts
                    .iter()
                    .flat_map(|b| &b.members)
                    .map(|s| s.place.len())
                    .sum();
                offset32(crate::format::HEADER_LEN + live, Format::Compact)?;
                let mut buf = Vec::with_capacity(crate::format::HEADER_LEN + live);
                crate::pages::prefault_spare(&mut buf, crate::format::HEADER_LEN + live);
                let mut slots = Vec::new();
                for b in parts {
                    if buf.is_empty() {
                        buf.extend_from_slice(&b.buf[..crate::format::HEADER_LEN]);
                    }
                    for s in &b.members {
                        // Below 4 GiB: checked above. A compact batch's members are records.
                        let at = buf.len() as u32;
                        if let Some(range) = s.place.range() {
                            buf.extend_from_slice(&b.buf[range]);
                        }
                        slots.push(Slot {
                            id: s.id,
                            place: Place::bytes(at, s.place.len() as u32),
                        });
                    }
                }
                Ok((buf, slots, Vec::new()))
            }
            Format::Elf => {
                let slots: Vec<Slot> = parts
                    .iter()
                    .flat_map(|b| b.members.iter().copied())
                    .collect();
                // Every member of a batch that can be merged or rewritten has a model (only
                // big objects, alone in their entry for good, have none); should one be
                // missing, refuse rather than drop its functions.
                let Some(models) = slots
                    .iter()
                    .map(|s| self.model_of(s.id))
                    .collect::<Option<Vec<&JitObject>>>()
                else {
                    return Err(crate::Error::Unsupported {
                        format: crate::error::PayloadFormat::Elf,
                        why: "a batch member has no model to re-encode".into(),
                    });
                };
                let arch = models.first().map_or(Arch::X86_64, |m| m.arch());
                let mut spanning = Vec::new();
                let buf = if !spans_gaps(self.list.attached()) {
                    crate::elf::encode_objects(arch, &models)?
                } else {
                    let own: Vec<u32> = batches.iter().map(|&b| Batches::index(b)).collect();
                    let free = |lo: u64, hi: u64| {
                        self.territory.free(lo, hi, |m| {
                            self.member_ref(m).is_some_and(|m| own.contains(&m.batch))
                        })
                    };
                    crate::elf::encode_objects_spanning(
                        arch,
                        &models,
                        Vec::new(),
                        crate::elf::Spans::Free(&free),
                        &mut spanning,
                    )?
                };
                Ok((buf, slots, spanning))
            }
        }
    }

    /// Under a debugger, the payload of an entry holding the members of the compact
    /// `batches`, re-encoded as ELF (`None` if that fails: the caller copies the records).
    ///
    /// Why: GDB 13 keeps about 300 bytes for every function each time its reader interface
    /// reads one (a new `void` type per block, allocated with the architecture and never
    /// freed), and consolidation makes it read a small registration about three times:
    /// 100,000 one-by-one registrations left GDB at 195 MB. GDB reads an ELF entry with its
    /// own DWARF reader and frees all of it when the entry goes, so a compact registration is
    /// read once through the reader (its own entry: the fast stop) and then as part of ELF
    /// batches. The models are decoded from the records, so registering keeps no copy.
    pub(super) fn build_as_elf(&mut self, ctx: &Context, batches: &[u64]) -> Option<Built> {
        if !ctx.attached {
            return None;
        }
        for b in batches {
            let batch = self.batches.get(*b)?;
            if batch.format != Format::Compact || batch.is_open() {
                return None;
            }
        }
        for b in batches {
            if !self.decode_models(*b) {
                return None;
            }
        }
        self.build(Format::Elf, batches).ok()
    }

    /// Gives every member of `batch_id` that has no model one decoded from its compact
    /// record (in the payload of a compact batch, in `records` of a sealed ELF batch) or
    /// read back from a grown batch's payload. False if one does not decode (the caller
    /// keeps the batch as it is).
    pub(super) fn decode_models(&mut self, batch_id: u64) -> bool {
        let Some(batch) = self.batches.get(batch_id) else {
            return false;
        };
        let mut decoded = Vec::new();
        for s in &batch.members {
            if self.model_of(s.id).is_some() {
                continue;
            }
            let model = match batch.format {
                Format::Compact => decode_record(&batch.buf, s.place),
                Format::Elf => batch.decode_member(s),
            };
            match model {
                Some(model) => decoded.push((s.id, model)),
                None => return false,
            }
        }
        for (id, model) in decoded {
            if self.member_ref(id).is_some() {
                self.set_model(id, Some(Arc::new(model)));
            }
        }
        true
    }

    /// A newly sealed ELF batch keeps its members' compact records instead of their models:
    /// it is rewritten only when a member leaves, and decodes them then (and keeps the
    /// models from then on). Members whose objects the compact format cannot carry whole
    /// (call sites, variables) keep their models.
    fn keep_records(&mut self, batch_id: u64) {
        let Some(batch) = self.batches.get(batch_id) else {
            return;
        };
        if batch.format != Format::Elf || batch.merge_level().is_some() {
            return;
        }
        let mut records = Vec::new();
        let mut slots = batch.members.clone();
        let mut kept = Vec::new();
        for s in &mut slots {
            let Some(model) = self.model_of(s.id) else {
                continue;
            };
            if !lossless(model) {
                continue;
            }
            if records.is_empty() {
                records.extend_from_slice(&crate::format::header(model.arch()));
            } else if records[..crate::format::HEADER_LEN] != crate::format::header(model.arch()) {
                continue;
            }
            let at = records.len();
            if crate::format::encode_record(&mut records, model, None).is_err() {
                continue;
            }
            let (Ok(at32), Ok(len32)) = (
                offset32(at, Format::Compact),
                offset32(records.len() - at, Format::Compact),
            ) else {
                // Too large to index: this member and the rest keep their models.
                records.truncate(at);
                break;
            };
            s.place = Place::bytes(at32, len32);
            kept.push(s.id);
        }
        records.shrink_to_fit();
        if let Some(batch) = self.batches.get_mut(batch_id) {
            batch.members = slots;
            batch.records = records;
        }
        for id in kept {
            self.set_model(id, None);
        }
    }

    /// Replaces the entries `ids` (all of `level`) by one entry of `level + 1` holding all
    /// their objects: one stop to read it, one per old entry to drop it. A core file taken
    /// in between may show an object twice, never not at all.
    pub(super) fn merge(&mut self, ctx: &Context, format: Format, level: usize, ids: Vec<u64>) {
        // Timed for `merge_stats` (two clock reads per merge, that is per 32 entries at most);
        // a merge that completes a batch of the next level merges that level too, inside:
        // only the outer one is timed.
        let outer = !self.merging;
        self.merging = true;
        let t0 = outer.then(Instant::now);
        let objects: usize = ids
            .iter()
            .filter_map(|b| self.batches.get(*b))
            .map(|b| b.members.len())
            .sum();
        self.merge_entries(ctx, format, level, ids);
        let st = &mut self.merge_stats;
        st.merges += 1;
        st.objects += objects as u64;
        if let Some(t0) = t0 {
            st.time += t0.elapsed();
            self.merging = false;
        }
    }

    fn merge_entries(&mut self, ctx: &Context, format: Format, level: usize, ids: Vec<u64>) {
        let cell = EntryCell::new();
        let (format, built) = match format {
            Format::Compact => match self.build_as_elf(ctx, &ids) {
                Some(built) => (Format::Elf, Ok(built)),
                None => (format, self.build(format, &ids)),
            },
            Format::Elf => (format, self.build(format, &ids)),
        };
        let Ok((buf, slots, spanning)) = built else {
            // Only ELF can refuse a merge (functions of different objects overlapping in one
            // ELF object): keep those entries as they are, and stop trying.
            for b in &ids {
                if let Some(batch) = self.batches.get_mut(*b) {
                    if matches!(batch.kind, Kind::Pending) {
                        // Deferred, never announced: announced now, each on its own.
                        // SAFETY: linked silently (`link_new`), still linked; linked again
                        // at once, its cell and payload unchanged.
                        unsafe {
                            self.list.unlink_silently(batch.entry());
                            self.list.link(batch.entry());
                        }
                    }
                    batch.kind = Kind::Sealed;
                }
            }
            return;
        };
        let new_level = level + 1;
        let kind = if new_level < LEVELS {
            Kind::Merging { level: new_level }
        } else {
            Kind::Sealed
        };
        let new_id = self.link_new(cell, format, kind, buf, slots);
        self.territory.set_spans(new_id, &spanning);
        for b in ids {
            self.unlink_batch(b);
        }
        if new_level < LEVELS {
            self.level_push(ctx, format, new_level, new_id);
        } else {
            self.keep_records(new_id);
        }
    }
}
