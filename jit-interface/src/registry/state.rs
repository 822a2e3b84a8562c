//! The registry's state: the slab of batches, the registered objects (members), their models
//! and live slots, and what every path shares: linking, swapping and unlinking entries.

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use super::batch::{Batch, EntryCell, Kind, Slot};
use super::growing::SPARE_GROWING;
use super::merge::FAN_IN;
use super::pool::Pool;
use super::route::{self, Context};
use super::territory::Territory;
use super::{Deferral, Format, MergeStats};
use crate::descriptor::{DebuggerList, ProcessList};
use crate::error::Result;
use crate::model::JitObject;

/// A registered object (or a free index: `batch == MEMBER_FREE`). Its model, if kept, is in
/// `State::models`.
pub(super) struct Member {
    /// Slab index (`Batches`) of the batch holding the object: always a live batch, so its
    /// generation is the current one and need not be kept (`Batches::id_at`);
    /// `MEMBER_NEW` until the caller links it, `MEMBER_FREE` for a free index.
    pub(super) batch: u32,
}

const MEMBER_NEW: u32 = u32::MAX - 1;
const MEMBER_FREE: u32 = u32::MAX;

thread_local! {
    /// Payload buffers of dropped one-object ELF entries (a merge drops `FAN_IN` of them at
    /// once), reused by this thread's next ELF registrations: registering small ELF objects
    /// one by one then allocates no payload, and glibc's malloc no longer sorts its free
    /// lists before each of those (about 1 KiB) allocations. (See `pool`.)
    static SPARE_PAYLOADS: std::cell::RefCell<Pool<SPARE_COUNT>> =
        const { std::cell::RefCell::new(Pool::new()) };
}

/// At most this many spare payload buffers per thread, each of at most `SPARE_MAX` bytes.
const SPARE_COUNT: usize = 2 * FAN_IN;
const SPARE_MAX: usize = 4096;

/// A payload buffer for the next one-object ELF entry of this thread (see `SPARE_PAYLOADS`).
#[inline]
pub(super) fn spare_payload() -> Vec<u8> {
    SPARE_PAYLOADS
        .with(|p| p.borrow_mut().take())
        .unwrap_or_default()
}

/// A batch id that names no batch (`State::open` without an open batch; `Batches::id_at`).
pub(super) const FREE: u64 = 0;

/// Batches by id: a slab, so that the lookup every registration makes (its open batch) is an
/// index rather than a tree search. An id is the index plus a generation in the high 32
/// bits, never 0 (`FREE`) nor `u64::MAX`: an id kept past its batch's removal finds nothing.
#[derive(Default)]
pub(super) struct Batches {
    slots: Vec<(u32, Option<Batch>)>,
    free: Vec<u32>,
}

impl Batches {
    fn split(id: u64) -> (usize, u32) {
        ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
    }

    /// The slab index of batch `id` (what a member keeps).
    pub(super) fn index(id: u64) -> u32 {
        id as u32
    }

    /// The id of the batch at slab index `index` now (`FREE` if there is none).
    pub(super) fn id_at(&self, index: u32) -> u64 {
        match self.slots.get(index as usize) {
            Some((g, Some(_))) => (u64::from(*g) << 32) | u64::from(index),
            _ => FREE,
        }
    }

    pub(super) fn insert(&mut self, batch: Batch) -> u64 {
        let index = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                // Indices stay below the members' sentinels (`MEMBER_NEW`): each batch holds
                // at least an entry and a payload, so memory runs out long before.
                debug_assert!(self.slots.len() < MEMBER_NEW as usize);
                self.slots.push((0, None));
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        // Generations run 1..=u32::MAX - 1, so an id is neither 0 nor u64::MAX.
        slot.0 = if slot.0 >= u32::MAX - 1 {
            1
        } else {
            slot.0 + 1
        };
        slot.1 = Some(batch);
        (u64::from(slot.0) << 32) | index as u64
    }

    pub(super) fn get(&self, id: u64) -> Option<&Batch> {
        let (index, generation) = Self::split(id);
        match self.slots.get(index)? {
            (g, Some(b)) if *g == generation => Some(b),
            _ => None,
        }
    }

    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut Batch> {
        let (index, generation) = Self::split(id);
        match self.slots.get_mut(index)? {
            (g, Some(b)) if *g == generation => Some(b),
            _ => None,
        }
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<Batch> {
        let (index, generation) = Self::split(id);
        let slot = self.slots.get_mut(index)?;
        if slot.0 != generation {
            return None;
        }
        let batch = slot.1.take()?;
        self.free.push(index as u32);
        Some(batch)
    }
}

/// Live slots, one per member index. Every payload holding an object names its slot's address
/// and the key it holds while the object is registered, so that readers can tell live objects
/// from unregistered ones (GDB never tells a reader about unregistration, and unregistering
/// without a debugger leaves the record in place). Chunks are never freed, so an address a
/// payload names always stays readable; a reused slot gets a fresh key, which no earlier
/// record holds.
#[derive(Default)]
pub(super) struct LiveSlots {
    chunks: Vec<Box<[AtomicU64; LIVE_CHUNK]>>,
}

const LIVE_CHUNK: usize = 512;

impl LiveSlots {
    /// Every registration looks its slot up: inline, and only a new chunk out of line.
    #[inline]
    pub(super) fn get(&mut self, index: usize) -> &AtomicU64 {
        if index / LIVE_CHUNK >= self.chunks.len() {
            self.grow(index);
        }
        &self.chunks[index / LIVE_CHUNK][index % LIVE_CHUNK]
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, index: usize) {
        while self.chunks.len() <= index / LIVE_CHUNK {
            self.chunks
                .push(Box::new(std::array::from_fn(|_| AtomicU64::new(0))));
        }
    }
}

/// Maps and vectors rather than hash maps: their nodes are referenced by start address, so
/// leak checkers (valgrind) see registrations still live at exit as reachable, not "possibly
/// lost".
///
/// `L` is the debugger list the batches' entries are linked into: the process's, but for
/// unit tests (see `descriptor::DebuggerList`).
#[derive(Default)]
pub(super) struct State<L = ProcessList> {
    pub(super) list: L,
    pub(super) batches: Batches,
    /// Registered objects by index (`Registration::id`); free indices are reused.
    pub(super) members: Vec<Member>,
    /// Models by member index, for members of ELF batches (re-encoded from the models when
    /// merged or rewritten): kept for small ELF objects, decoded from the record for compact
    /// ones merged as ELF, until their batch is sealed (then their compact record is kept
    /// there instead: see `Batch::records`; objects the compact format cannot carry whole
    /// keep their model). Apart from `members`, and only as long as the highest index that
    /// has one: registrations without a model (quiet compact ones) touch no memory here.
    pub(super) models: Vec<Option<Arc<JitObject>>>,
    pub(super) free: Vec<u32>,
    pub(super) live: LiveSlots,
    /// Batches waiting in the merge tree per format and level, in registration order.
    pub(super) levels: BTreeMap<(u8, usize), Vec<u64>>,
    /// The compact batch appended to in place, per architecture (`Arch as usize`; 0: none,
    /// never a batch id). An array: every quiet registration looks it up.
    pub(super) open: [u64; 2],
    /// The growing ELF batch (x86-64: the ELF encoder's only architecture), or `FREE`.
    pub(super) growing: u64,
    /// The last growing batch that filled up, or `FREE`: it keeps its growing state (no
    /// more appends), so that a recent object leaving it is rolled back like one of the
    /// growing batch (see `retire`).
    pub(super) retired: u64,
    /// Growing payloads' buffers no longer linked (at most `SPARE_GROWING`), for the next
    /// ones (see `elf::Growing::new`) and for rollbacks (`elf::Growing::roll_back`): a
    /// growing batch rewritten at every unregistration would otherwise allocate (and zero)
    /// a fresh one each time. Two: a batch sealed and rewritten gives back two (its old
    /// payload and the rollbacks' mirror), and the next growing batch takes one when it
    /// is made and one at its first rollback (measured: with one, a 256 KiB `calloc`,
    /// memory the allocator had to zero, took a fifth of `scale_host churn 2 5000 elf`).
    pub(super) spare_growing: Pool<SPARE_GROWING>,
    /// Objects appended to growing batches as registered, and appended again when an
    /// object before them left (see `regrow`).
    pub(super) grown: u64,
    pub(super) regrown: u64,
    /// Linked batches that are ends split off others (`State::peel`).
    pub(super) peeled: usize,
    /// Functions announced so far in small compact entries of their own to an attached
    /// debugger, against the reader budget (see `route::READER_BUDGET`; never reset: a
    /// debugger that detaches and attaches again keeps what it leaked).
    pub(super) read_by_reader: usize,
    /// Registrations so far, mixed into live keys (see `State::fresh_live_key`).
    keys: u64,
    key_seed: u64,
    pub(super) deferred: Option<Deferral>,
    /// Registrations appended while a debugger was attached and not announced yet, the
    /// batches holding them, and when the oldest was appended.
    pub(super) pending: usize,
    pub(super) pending_batches: Vec<u64>,
    /// The pending ELF entries (`Kind::Pending`, one registration each, `pending` 1 each),
    /// in registration order.
    pub(super) pending_elf: Vec<u64>,
    pub(super) pending_since: Option<Instant>,
    pub(super) merge_stats: MergeStats,
    /// A merge is running (`merge` nests: see there).
    pub(super) merging: bool,
    /// Where live objects' code lies, and which entries' sections span gaps.
    pub(super) territory: Territory,
}

// SAFETY: the entries' raw pointers are only read or written under the descriptor's lock or by
// the debugger while the process is stopped; the state itself is only touched under REGISTRY.
unsafe impl<L: Send> Send for State<L> {}

/// `n` as a 32-bit offset or length within a `format` payload: payloads held in batches
/// stay below 4 GiB.
#[inline]
pub(super) fn offset32(n: usize, format: Format) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        crate::Error::TooLarge(format!(
            "a {} payload of {n} bytes: the registry holds payloads below 4 GiB",
            format.name()
        ))
    })
}

impl<L: DebuggerList> State<L> {
    /// The context of an operation under the registry's lock (see `route::Context`).
    #[inline]
    pub(super) fn context(&self) -> Context {
        Context::read(self.list.attached(), self.deferred.is_some())
    }

    /// The context of a registration, read from the state itself. (The process's registry
    /// reads it before taking its lock, from statics: `Context::for_registration`.)
    #[cfg(test)]
    pub(super) fn registration_context(&self) -> Context {
        Context {
            budget_spent: self.read_by_reader >= route::reader_budget(),
            ..self.context()
        }
    }

    /// `functions` more were announced in small compact entries of their own.
    #[inline]
    pub(super) fn count_read_by_reader(&mut self, functions: usize) {
        self.read_by_reader += functions;
        if L::PROCESS {
            route::read_by_reader(functions);
        }
    }

    /// A fresh nonzero key for a live slot: unique per registration within a process, and
    /// unlikely to be found by chance in memory that was freed and reused. (Under the
    /// registry's lock: a plain counter, no atomic.)
    #[inline]
    pub(super) fn fresh_live_key(&mut self) -> u64 {
        if self.keys == 0 {
            self.key_seed = RandomState::new().build_hasher().finish();
        }
        self.keys += 1;
        // A cheap mix (splitmix64) of seed and counter: distinct per registration.
        let mut z = self.key_seed ^ self.keys.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) | 1
    }

    /// A member index for a new registration (its batch is set by the caller).
    #[inline]
    pub(super) fn new_member(&mut self, model: Option<Arc<JitObject>>) -> Result<u32> {
        let m = Member { batch: MEMBER_NEW };
        let i = if let Some(i) = self.free.pop() {
            self.members[i as usize] = m;
            i
        } else {
            let i = u32::try_from(self.members.len()).map_err(|_| crate::Error::Unsupported {
                format: crate::error::PayloadFormat::Any,
                why: "more than 4,294,967,295 objects registered at once".into(),
            })?;
            self.members.push(m);
            i
        };
        self.set_model(i, model);
        Ok(i)
    }

    /// Frees member index `id` again (its registration failed before it joined a batch).
    pub(super) fn release(&mut self, id: u32) {
        self.set_model(id, None);
        self.territory.remove(id);
        if let Some(m) = self.members.get_mut(id as usize) {
            m.batch = MEMBER_FREE;
            self.free.push(id);
        }
    }

    /// Member `id` now belongs to batch `batch_id`.
    #[inline]
    pub(super) fn join(&mut self, id: u32, batch_id: u64) {
        if let Some(m) = self.member_mut(id) {
            m.batch = Batches::index(batch_id);
        }
    }

    /// The model kept for member `id`, if any.
    pub(super) fn model_of(&self, id: u32) -> Option<&JitObject> {
        self.member_ref(id)?;
        self.models.get(id as usize)?.as_deref()
    }

    /// Keeps `model` for member `id` (or none).
    #[inline]
    pub(super) fn set_model(&mut self, id: u32, model: Option<Arc<JitObject>>) {
        let i = id as usize;
        match model {
            Some(model) => {
                if i >= self.models.len() {
                    self.models.resize_with(i + 1, || None);
                }
                self.models[i] = Some(model);
            }
            None => {
                if let Some(m) = self.models.get_mut(i) {
                    *m = None;
                }
            }
        }
    }

    #[inline]
    pub(super) fn member_mut(&mut self, id: u32) -> Option<&mut Member> {
        self.members
            .get_mut(id as usize)
            .filter(|m| m.batch != MEMBER_FREE)
    }

    #[inline]
    pub(super) fn member_ref(&self, id: u32) -> Option<&Member> {
        self.members
            .get(id as usize)
            .filter(|m| m.batch != MEMBER_FREE)
    }

    /// Marks member `id` free and drops its model; returns the batch that holds it (`None`
    /// if `id` is not registered).
    pub(super) fn take_member(&mut self, id: u32) -> Option<u64> {
        let member = self.member_mut(id)?;
        let index = std::mem::replace(&mut member.batch, MEMBER_FREE);
        let batch = self.batches.id_at(index);
        self.set_model(id, None);
        self.territory.remove(id);
        Some(batch)
    }

    /// Links a new entry (`cell`, allocated before `buf`) for `buf` holding `members`;
    /// returns its batch id.
    pub(super) fn link_new(
        &mut self,
        cell: Box<EntryCell>,
        format: Format,
        kind: Kind,
        buf: Vec<u8>,
        members: Vec<Slot>,
    ) -> u64 {
        let silent = matches!(kind, Kind::Pending);
        let mut batch = Batch::new(cell, format, kind, buf, members);
        batch.point_entry();
        // SAFETY: the cell is boxed (stable address) and its payload is owned by the same
        // batch, never reallocated while linked; both live until the entry is unlinked or
        // replaced (`unlink_batch`, `swap_payload`, `republish`, `regrow`).
        unsafe {
            if silent {
                self.list.link_silently(batch.entry());
            } else {
                self.list.link(batch.entry());
            }
        }
        let batch_id = self.batches.insert(batch);
        if let Some(batch) = self.batches.get(batch_id) {
            for s in &batch.members {
                if let Some(m) = self
                    .members
                    .get_mut(s.id as usize)
                    .filter(|m| m.batch != MEMBER_FREE)
                {
                    m.batch = Batches::index(batch_id);
                }
            }
        }
        batch_id
    }

    /// Unlinks and frees batch `batch_id` (the payload of a one-object ELF entry goes to this
    /// thread's spare buffers, for the next one).
    pub(super) fn unlink_batch(&mut self, batch_id: u64) {
        self.drop_pending(batch_id);
        let Some(batch) = self.batches.remove(batch_id) else {
            return;
        };
        self.territory.set_spans(batch_id, &[]);
        if matches!(batch.kind, Kind::Peeled) {
            self.peeled -= 1;
        }
        // SAFETY: linked when created (`link_new`) or swapped in (`swap_payload`,
        // `republish`, `regrow`), unlinked only here, which also takes it out of `batches`.
        unsafe {
            if matches!(batch.kind, Kind::Pending) {
                // Never announced: the debugger has nothing to drop.
                self.list.unlink_silently(batch.entry());
            } else {
                self.list.unlink(batch.entry());
            }
        }
        let level = batch.merge_level();
        if let Some(level) = level {
            if let Some(list) = self.levels.get_mut(&(batch.format as u8, level)) {
                list.retain(|&b| b != batch_id);
            }
        }
        self.unopen(batch_id);
        if batch.buf.len() == crate::elf::GROWING_PAYLOAD {
            self.keep_spare(batch.buf);
            return;
        }
        if batch.format == Format::Elf && level == Some(0) && batch.buf.capacity() <= SPARE_MAX {
            SPARE_PAYLOADS.with(|p| p.borrow_mut().keep(batch.buf));
        }
        // The batch (payload and tombstone slots) is freed here, after the unlink.
    }

    /// Puts payload `buf` holding `members` in the place of batch `batch_id`'s (its entry
    /// `cell` swapped in for the old one) after a rewrite (`rewrite`, `peel`): a compact
    /// batch's records are in `buf`, an ELF batch's members all have their models (a batch
    /// rebuilt by copies, `recopy`, gives it its index and records back after).
    pub(super) fn swap_payload(
        &mut self,
        batch_id: u64,
        mut cell: Box<EntryCell>,
        buf: Vec<u8>,
        members: Vec<Slot>,
    ) {
        // The new payload's spanning sections, if any, are set by the caller after this.
        self.territory.set_spans(batch_id, &[]);
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        *cell.entry.get_mut() = crate::descriptor::JitCodeEntry::new(&buf);
        // SAFETY: the old cell is linked; the new one is boxed and points at `buf`, and both
        // take the old ones' place in the batch right after (the old payload is freed only
        // then, after the debugger was told).
        unsafe {
            if matches!(batch.kind, Kind::Pending) {
                // Still not announced (the debugger never read the old payload): swapped
                // silently, announced at the next flush as the others.
                self.list.unlink_silently(batch.entry());
                self.list.link_silently(cell.entry.get());
            } else {
                self.list.replace(batch.entry(), cell.entry.get());
            }
        }
        batch.cell = cell;
        let old = std::mem::replace(&mut batch.buf, buf);
        batch.members = members;
        // An ELF batch's members keep their models: a batch that loses one member often
        // loses more, and decoding it all again at each would cost more than the rest of a
        // rewrite.
        batch.records = Vec::new();
        if matches!(batch.kind, Kind::Grown(_)) {
            batch.kind = Kind::Sealed;
        }
        batch.dead = 0;
        if old.len() == crate::elf::GROWING_PAYLOAD {
            self.keep_spare(old);
        }
    }

    /// Makes an attached debugger re-read batch `batch_id` (same payload, new entry): it
    /// drops what it had read for the old entry. Unless `keep_open`, the batch is sealed: a
    /// debugger is watching.
    pub(super) fn republish(&mut self, batch_id: u64, keep_open: bool) {
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        self.pending -= batch.pending;
        batch.pending = 0;
        let cell = EntryCell::pointing_at(&batch.buf);
        // SAFETY: the old cell is linked; the new one is boxed, points at the same payload
        // (owned by the batch), and takes the old one's place in the batch right after.
        unsafe { self.list.replace(batch.entry(), cell.entry.get()) };
        batch.cell = cell;
        if !keep_open {
            self.seal(batch_id);
        }
    }

    /// Stops appending to `batch_id` in place: an open batch is sealed, a growing one keeps
    /// the index its plain objects are read back through.
    pub(super) fn seal(&mut self, batch_id: u64) {
        if let Some(b) = self.batches.get_mut(batch_id) {
            match std::mem::replace(&mut b.kind, Kind::Sealed) {
                Kind::Open => {}
                Kind::Growing(growing) => {
                    let (index, mirror) = growing.seal();
                    if index.has_plain() {
                        b.kind = Kind::Grown(Box::new(index));
                    }
                    if let Some(mirror) = mirror {
                        self.keep_spare(mirror);
                    }
                }
                other => b.kind = other,
            }
        }
        self.unopen(batch_id);
    }

    /// Forgets `batch_id` as an open or growing batch.
    pub(super) fn unopen(&mut self, batch_id: u64) {
        for b in &mut self.open {
            if *b == batch_id {
                *b = FREE;
            }
        }
        if self.growing == batch_id {
            self.growing = FREE;
        }
        if self.retired == batch_id {
            self.retired = FREE;
        }
    }
}
