//! Registration: encode an object, link it into GDB's list, unlink it when the handle drops.
//!
//! Two costs shape this module. Without a debugger, a registration should cost little more
//! than encoding. With GDB attached, every hook call is a stop (~0.3-0.5 ms), GDB's cost per
//! stop grows with the number of entries it holds, and attach walks all of them. So:
//!
//! - **No debugger** (the hook's first byte is not a breakpoint, see
//!   [`descriptor::debugger_attached`]): compact records are appended in place to an open
//!   batch payload (a fixed-capacity buffer whose entry's size grows record by record), with
//!   no stop and no re-encoding; unregistering clears the object's live slot only (a
//!   *tombstone*: every reader skips such objects), and a batch is rewritten without its dead
//!   records once they are the larger part. A debugger that attaches later reads the whole
//!   list, as GDB always does on attach; the byte is read again after every in-place change,
//!   so a debugger that attached meanwhile is told about it before the call returns.
//!   Small ELF objects are appended in place the same way, to a growing ELF payload
//!   (`elf::Growing`: each object is encoded once, into its place; an object whose
//!   functions have lines in one file is read back from the payload for rewrites, others
//!   keep their compact record); an ELF payload has no live check, so unregistering
//!   rewrites the batch: a recent object is rolled back (`State::regrow`; the payload
//!   that filled up last rolls back too, see `State::retire`), a batch's first
//!   or last object splits its end off (`State::peel`, also under a debugger: code dropped
//!   in order rewrites small entries), other objects make the batch be re-encoded whole.
//!   [`unregister_many`] takes many out with one rewrite per batch.
//!   Objects with call sites or variables (which a compact record cannot carry) are
//!   registered as under a debugger.
//! - **Debugger attached**: each registration gets an entry of its own (one stop: visible
//!   before the call returns), every `FAN_IN` of those are merged into one batch entry, every
//!   `FAN_IN` batches into a sealed one; an unregistration rewrites only its own batch. ELF
//!   batches are re-encoded from the kept models; a sealed batch keeps its members' compact
//!   records instead (a quarter of the memory) and decodes them at its first rewrite. A
//!   compact registration's own entry is read through our reader (the cheapest stop), but
//!   the batches it is merged into are encoded as ELF, which GDB reads natively and frees
//!   whole (see `State::build_as_elf`: GDB leaks memory for every function its reader
//!   interface reads), and once `READER_BUDGET` functions were read that way, small compact
//!   registrations get ELF entries of their own too. Without a debugger, compact records
//!   are self-contained, so merging and rewriting copy bytes.
//!
//! Objects with `BIG_OBJECT` functions or more get an entry of their own for good.
//!
//! **Deferred mode** ([`set_deferred`]) is for runtimes that register bursts of small objects
//! one by one under a debugger: compact records are then appended in place even while a
//! debugger is attached (in the list at once, so attach and core files see them) and
//! announced together ([`flush`], or when `max_pending` registrations or `max_delay` are
//! reached), one stop for many. Our GDB scripts (and so the `jit-gdb` launcher) announce
//! pending registrations whenever the program stops, through `jit_gdb_flush_for_debugger`.

use std::cell::UnsafeCell;
use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use crate::descriptor::{self, JitCodeEntry};
use crate::error::Result;
use crate::format::LiveCheck;
use crate::model::{Arch, JitObject};

/// Payload format of a registration.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Compact records, read by our GDB reader (`libjitreader.so`, loaded with
    /// `jit-reader-load`). Names, lines, blocks and unwinding; no variables.
    Compact = 0,
    /// A minimal in-memory ELF object with DWARF, read by GDB and LLDB without any plugin.
    Elf = 1,
}

impl Format {
    /// Name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Format::Compact => "compact records",
            Format::Elf => "ELF",
        }
    }
}

/// Objects with at least this many functions get a debugger entry of their own for good:
/// they register in one stop and are never copied or re-encoded.
const BIG_OBJECT: usize = 64;

/// Consolidation fan-in under a debugger: this many entries of one level are merged into
/// one entry of the next level. Two levels: a sealed entry holds up to `FAN_IN^2` objects, so
/// GDB holds about `N / FAN_IN^2 + 2 * FAN_IN` entries for N small registrations. Measured
/// under GDB (`scripts/bench.sh`): ELF one-by-one registration at 10,000 functions took
/// 1.06 ms each with a fan-in of 16, 0.74 ms with 32. A larger fan-in makes each
/// unregistration from a sealed batch make GDB re-read more objects.
const FAN_IN: usize = 32;

/// Entries of this level are never merged again (top level, big objects, failed merges,
/// in-place batches once filled or seen by a debugger).
const SEALED: usize = 2;

/// Growing payloads' buffers kept for reuse (see `State::spare_growing`).
const SPARE_GROWING: usize = 2;

/// Members of an ELF batch split off with its first or last member (see `State::peel`).
const PEEL: usize = 64;

/// A grown ELF batch that loses members is rebuilt by copies (see `State::recopy`) if at
/// least this many are left: the new payload has the growing size (256 KiB), which fewer
/// objects would leave mostly empty, and which a rewrite by the general encoder into a
/// payload of their size (their models kept) costs less than (under churn, a live set of
/// 512 objects among payloads that filled up: 117 ms against 282 ms by copies).
const RECOPY_MIN: usize = 256;

/// At most this many such ends are linked at once: a runtime draining its code in order
/// has one or two, and no pattern of drops can make the list grow by more.
const PEEL_MAX: usize = 32;

/// Capacity of an in-place (no debugger) batch payload. GDB copies a payload whole when it
/// reads it, and attach reads every entry: 64 KiB holds about 800 one-function objects, so
/// 100,000 of them make about 125 entries.
const OPEN_CAPACITY: usize = 64 * 1024;

/// Records larger than this get an entry of their own rather than filling an open batch.
const OPEN_RECORD_MAX: usize = OPEN_CAPACITY / 4;

/// A batch is rewritten without its dead records once they take more than half of it (and
/// at least this many bytes: small batches are not worth a rewrite).
const COMPACT_MIN_DEAD: usize = 4096;

/// One debugger entry. Boxed, so its address is stable while linked.
struct EntryCell {
    /// Its links are changed only under the descriptor's lock, its size only under the
    /// registry's (and both by the debugger).
    entry: UnsafeCell<JitCodeEntry>,
}

impl EntryCell {
    fn new() -> Box<EntryCell> {
        Box::new(EntryCell {
            entry: UnsafeCell::new(JitCodeEntry::new(&[])),
        })
    }
}

/// An object a rollback appends again (`State::regrow`): from its model, or copied from
/// the payload (a plain object, where its index entry says).
enum Again {
    Model(Arc<JitObject>),
    Copy(crate::elf::GrowingPlain),
}

/// Where a member's data is in its batch. 32-bit fields: one is kept per registered object,
/// and every byte kept per registration is paid for (memory touched for the first time costs
/// about as much as encoding a record).
#[derive(Clone, Copy)]
struct Slot {
    id: u32,
    /// Byte range of the member's compact record: in the payload of a compact batch, in
    /// `Batch::records` of a sealed ELF one (unused in other ELF batches). In a grown ELF
    /// batch (see `Batch::index`), `len` 0 is a plain object, read back from the payload:
    /// `at` is its index in append order.
    at: u32,
    len: u32,
}

impl Slot {
    fn range(&self) -> std::ops::Range<usize> {
        self.at as usize..self.at as usize + self.len as usize
    }
}

/// `n` as a 32-bit offset or length within a `format` payload: payloads held in batches
/// stay below 4 GiB.
fn offset32(n: usize, format: Format) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        crate::Error::TooLarge(format!(
            "a {} payload of {n} bytes: the registry holds payloads below 4 GiB",
            format.name()
        ))
    })
}

/// A debugger entry holding one or more registered objects.
struct Batch {
    /// The entry cell is allocated before the payload (callers of `Batch::new` do), so that it
    /// usually lies before it in memory: a core file cut inside the payload still shows the
    /// entry (and the cut).
    cell: Box<EntryCell>,
    /// The payload the entry points to. Never reallocated while linked: in-place appends
    /// stay within the capacity it was created with.
    buf: Vec<u8>,
    members: Vec<Slot>,
    /// Bytes of `buf` taken by tombstoned records.
    dead: usize,
    level: usize,
    format: Format,
    /// Appended to in place while no debugger is attached (or in deferred mode).
    open: bool,
    /// Records appended while a debugger was attached and not yet announced (deferred mode).
    pending: usize,
    /// A sealed ELF batch of small objects: a compact header, then the compact records
    /// (without live checks) of those members that have no model, which the first rewrite
    /// (a member leaves) decodes. A model takes about four times the memory of its record,
    /// and sealed batches hold nearly every registration of a long run (see `keep_records`).
    /// A growing ELF batch keeps its members' records the same way.
    records: Vec<u8>,
    /// An ELF batch that small objects are appended to in place while no debugger is
    /// attached (`State::append_growing`): the state of its payload.
    growing: Option<Box<crate::elf::Growing>>,
    /// Once it stops growing: where its plain objects are in its payload (see
    /// `Batch::decode_member`), which rebuilding it by copies (`State::recopy`) keeps, and a
    /// rewrite by the general encoder replaces with a model for every member.
    index: Option<Box<crate::elf::GrowingIndex>>,
    /// The end split off another batch (see `State::peel`), counted in `State::peeled`.
    peeled: bool,
}

impl Batch {
    fn new(
        cell: Box<EntryCell>,
        format: Format,
        level: usize,
        buf: Vec<u8>,
        members: Vec<Slot>,
    ) -> Batch {
        Batch {
            cell,
            buf,
            members,
            dead: 0,
            level,
            format,
            open: false,
            pending: 0,
            records: Vec::new(),
            growing: None,
            index: None,
            peeled: false,
        }
    }

    fn entry(&self) -> *mut JitCodeEntry {
        self.cell.entry.get()
    }

    /// The model of member `slot` of an ELF batch, which has no model kept: decoded from its
    /// compact record, or read back from the payload (a plain object of a grown batch).
    fn decode_member(&self, slot: &Slot) -> Option<JitObject> {
        if slot.len > 0 {
            return decode_record(&self.records, slot);
        }
        let index = match (&self.growing, &self.index) {
            (Some(g), _) => g.index(),
            (None, Some(index)) => index,
            (None, None) => return None,
        };
        index.object(&self.buf, slot.at as usize)
    }

    /// Points the (not yet linked) entry at the payload.
    fn point_entry(&mut self) {
        *self.cell.entry.get_mut() = JitCodeEntry::new(&self.buf);
    }
}

/// A registered object (or a free index: `batch == FREE`). Its model, if kept, is in
/// `State::models`.
struct Member {
    /// Slab index (`Batches`) of the batch holding the object: always a live batch, so its
    /// generation is the current one and need not be kept (`Batches::id_at`);
    /// `MEMBER_NEW` until the caller links it, `MEMBER_FREE` for a free index.
    batch: u32,
}

const MEMBER_NEW: u32 = u32::MAX - 1;
const MEMBER_FREE: u32 = u32::MAX;

thread_local! {
    /// Payload buffers of dropped one-object ELF entries (a merge drops `FAN_IN` of them at
    /// once), reused by this thread's next ELF registrations: registering small ELF objects
    /// one by one then allocates no payload, and glibc's malloc no longer sorts its free
    /// lists before each of those (about 1 KiB) allocations.
    static SPARE_PAYLOADS: std::cell::RefCell<Vec<Vec<u8>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// At most this many spare payload buffers per thread, each of at most `SPARE_MAX` bytes.
const SPARE_COUNT: usize = 2 * FAN_IN;
const SPARE_MAX: usize = 4096;

/// A batch id that names no batch (`State::open` without an open batch; `Batches::id_at`).
const FREE: u64 = 0;

/// Batches by id: a slab, so that the lookup every registration makes (its open batch) is an
/// index rather than a tree search. An id is the index plus a generation in the high 32
/// bits, never 0 (`FREE`) nor `u64::MAX`: an id kept past its batch's removal finds nothing.
#[derive(Default)]
struct Batches {
    slots: Vec<(u32, Option<Batch>)>,
    free: Vec<u32>,
}

impl Batches {
    fn split(id: u64) -> (usize, u32) {
        ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
    }

    /// The slab index of batch `id` (what a member keeps).
    fn index(id: u64) -> u32 {
        id as u32
    }

    /// The id of the batch at slab index `index` now (`FREE` if there is none).
    fn id_at(&self, index: u32) -> u64 {
        match self.slots.get(index as usize) {
            Some((g, Some(_))) => (u64::from(*g) << 32) | u64::from(index),
            _ => FREE,
        }
    }

    fn insert(&mut self, batch: Batch) -> u64 {
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

    fn get(&self, id: u64) -> Option<&Batch> {
        let (index, generation) = Self::split(id);
        match self.slots.get(index)? {
            (g, Some(b)) if *g == generation => Some(b),
            _ => None,
        }
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut Batch> {
        let (index, generation) = Self::split(id);
        match self.slots.get_mut(index)? {
            (g, Some(b)) if *g == generation => Some(b),
            _ => None,
        }
    }

    fn remove(&mut self, id: u64) -> Option<Batch> {
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
struct LiveSlots {
    chunks: Vec<Box<[AtomicU64; LIVE_CHUNK]>>,
}

const LIVE_CHUNK: usize = 512;

impl LiveSlots {
    /// Every registration looks its slot up: inline, and only a new chunk out of line.
    #[inline]
    fn get(&mut self, index: usize) -> &AtomicU64 {
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
#[derive(Default)]
struct State {
    batches: Batches,
    /// Registered objects by index (`Registration::id`); free indices are reused.
    members: Vec<Member>,
    /// Models by member index, for members of ELF batches (re-encoded from the models when
    /// merged or rewritten): kept for small ELF objects, decoded from the record for compact
    /// ones merged as ELF, until their batch is sealed (then their compact record is kept
    /// there instead: see `Batch::records`; objects the compact format cannot carry whole
    /// keep their model). Apart from `members`, and only as long as the highest index that
    /// has one: registrations without a model (quiet compact ones) touch no memory here.
    models: Vec<Option<Arc<JitObject>>>,
    free: Vec<u32>,
    live: LiveSlots,
    /// Unsealed batches per format and level, in registration order (debugger attached).
    levels: BTreeMap<(u8, usize), Vec<u64>>,
    /// The compact batch appended to in place, per architecture (`Arch as usize`; 0: none,
    /// never a batch id). An array: every quiet registration looks it up.
    open: [u64; 2],
    /// The growing ELF batch (x86-64: the ELF encoder's only architecture), or `FREE`.
    growing: u64,
    /// The last growing batch that filled up, or `FREE`: it keeps its growing state (no
    /// more appends), so that a recent object leaving it is rolled back like one of the
    /// growing batch (see `retire`).
    retired: u64,
    /// Growing payloads' buffers no longer linked (at most `SPARE_GROWING`), for the next
    /// ones (see `elf::Growing::new`) and for rollbacks (`elf::Growing::roll_back`): a
    /// growing batch rewritten at every unregistration would otherwise allocate (and zero)
    /// a fresh one each time. Two: a batch sealed and rewritten gives back two (its old
    /// payload and the rollbacks' mirror), and the next growing batch takes one when it
    /// is made and one at its first rollback (measured: with one, a 256 KiB `calloc`,
    /// memory the allocator had to zero, took a fifth of `scale_host churn 2 5000 elf`).
    spare_growing: Vec<Vec<u8>>,
    /// Objects appended to growing batches as registered, and appended again when an
    /// object before them left (see `regrow`).
    grown: u64,
    regrown: u64,
    /// Linked batches that are ends split off others (`State::peel`).
    peeled: usize,
    /// Registrations so far, mixed into live keys (see `State::fresh_live_key`).
    keys: u64,
    key_seed: u64,
    deferred: Option<Deferral>,
    /// Registrations appended while a debugger was attached and not announced yet, the
    /// batches holding them, and when the oldest was appended.
    pending: usize,
    pending_batches: Vec<u64>,
    pending_since: Option<Instant>,
    merge_stats: MergeStats,
    /// A merge is running (`merge` nests: see there).
    merging: bool,
}

/// Consolidation work done so far in this process (see [`merge_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Entries made by merging others.
    pub merges: u64,
    /// Registered objects those merges re-encoded, counted once per merge that held them.
    pub objects: u64,
    /// Wall time spent merging: re-encoding, linking the new entry, unlinking the old ones
    /// (with a debugger attached, that includes its stops).
    pub time: Duration,
}

/// How much consolidation (merging small entries into batch entries) has cost so far, for
/// benchmarks and diagnostics: registering many small ELF objects one by one pays it (each
/// object is re-encoded when its entry is merged, and again when batches are sealed), which
/// batching or the compact format avoid.
pub fn merge_stats() -> MergeStats {
    registry().merge_stats
}

/// When deferred registrations are announced to an attached debugger (see [`set_deferred`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferral {
    /// Announce once this many registrations are pending (at least 1).
    pub max_pending: usize,
    /// Announce this long after the oldest pending registration at the latest (`None`: no
    /// time limit). With a limit, a timer thread (`jit-gdb-flush`, started the first time
    /// a registration is pending under a debugger, asleep while none is) announces them
    /// even if the runtime registers nothing more, so a crash in idle code still shows
    /// every name in plain GDB. (A child forked afterwards has no such thread: there the
    /// limit is checked at each registration, and at [`flush`].)
    pub max_delay: Option<Duration>,
}

/// Registrations not yet announced to an attached debugger, for debugger scripts: our GDB
/// extension reads it at every stop and, when nonzero, calls [`jit_gdb_flush_for_debugger`].
#[no_mangle]
#[used]
pub static jit_gdb_pending: AtomicU64 = AtomicU64::new(0);

/// Turns deferred mode on (`Some`) or off (`None`: pending registrations are announced
/// now). In deferred mode small compact registrations never stop the process: they are
/// appended in place to a batch entry (listed at once, so attach and core files see them) and
/// an attached debugger reads them at the next announcement. ELF registrations and objects of
/// 64 functions or more are announced at once as usual.
pub fn set_deferred(deferral: Option<Deferral>) {
    // Keeps the debugger's entry point in the executable when deferred mode is used.
    std::hint::black_box(jit_gdb_flush_for_debugger as extern "C" fn() -> i64);
    let mut st = registry();
    st.deferred = deferral.map(|d| Deferral {
        max_pending: d.max_pending.max(1),
        ..d
    });
    DEFERRED.store(st.deferred.is_some(), Ordering::Relaxed);
    if st.deferred.is_none() {
        st.flush();
    }
    // The timer looks at the new settings.
    TIMER_WAKE.notify_all();
}

/// Wakes the timer thread: the settings changed or a first registration became pending.
static TIMER_WAKE: Condvar = Condvar::new();

/// Starts the thread that announces pending registrations once `max_delay` has passed
/// (once per process). Should it fail to start, the limit is checked at each registration
/// instead, as before, and a warning says so.
fn start_timer() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("jit-gdb-flush".into())
            .spawn(timer_loop);
        if let Err(e) = spawned {
            eprintln!(
                "jit-interface: cannot start the deferred-mode timer thread ({e}): pending \
                 registrations are announced at the next registration after max_delay"
            );
        }
    });
}

fn timer_loop() {
    let lock = REGISTRY.get_or_init(Mutex::default);
    let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let due = st
            .deferred
            .and_then(|d| d.max_delay)
            .zip(st.pending_since)
            .filter(|_| st.pending > 0)
            .map(|(delay, since)| since + delay);
        st = match due {
            Some(due) => match due.checked_duration_since(Instant::now()) {
                Some(wait) if !wait.is_zero() => {
                    TIMER_WAKE
                        .wait_timeout(st, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                _ => {
                    st.flush();
                    st
                }
            },
            None => TIMER_WAKE.wait(st).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

/// How many deferred registrations an attached debugger has not been told about yet.
pub fn pending() -> usize {
    jit_gdb_pending.load(Ordering::Relaxed) as usize
}

/// Announces pending deferred registrations to an attached debugger (one stop per batch
/// entry holding some); returns how many registrations were pending.
pub fn flush() -> usize {
    registry().flush()
}

/// For debugger scripts, called from the debugger while the process is stopped: announces
/// pending deferred registrations, unless the registry is busy (a thread was stopped inside
/// it: then nothing happens and -1 is returned, rather than a deadlock). Returns how many
/// were announced.
#[no_mangle]
pub extern "C" fn jit_gdb_flush_for_debugger() -> i64 {
    let lock = REGISTRY.get_or_init(Mutex::default);
    match lock.try_lock() {
        Ok(mut st) => st.flush() as i64,
        Err(TryLockError::Poisoned(e)) => e.into_inner().flush() as i64,
        Err(TryLockError::WouldBlock) => -1,
    }
}

// SAFETY: the entries' raw pointers are only read or written under the descriptor's lock or by
// the debugger while the process is stopped; the state itself is only touched under REGISTRY.
unsafe impl Send for State {}

static REGISTRY: OnceLock<Mutex<State>> = OnceLock::new();

/// Mirrors `State::deferred.is_some()`, for choosing an encoding before taking the lock.
static DEFERRED: AtomicBool = AtomicBool::new(false);

/// Growing payloads are rebuilt (`State::regrow`) only while the objects appended again
/// stay below `REGROW_LIMIT` times those appended, plus `REGROW_SLACK`; beyond, a growing
/// batch that loses an object is sealed and rewritten the general way.
const REGROW_LIMIT: u64 = 1;
const REGROW_SLACK: u64 = 4096;

/// How many functions small compact registrations may make a debugger read through its
/// reader interface, one entry each, before such registrations are announced as ELF.
///
/// GDB 13 keeps memory for good for every function its reader interface reads (a new `void`
/// type per block, about 300 bytes, allocated with the architecture) and more for every
/// reader-made objfile: measured, 100,000 one-by-one registrations left GDB at 172 MB with
/// compact entries of their own, 108 MB with ELF ones (GDB reads ELF entries with its own
/// DWARF reader, lazily, and frees all of it when they are unregistered). Compact entries
/// are the cheaper stop (about 0.1 ms less each) and are unwound by our reader, so programs
/// of up to this many small functions keep them; this caps what a long session leaves in
/// GDB at about 20 MB. Measured with 100,000 one-by-one registrations under GDB: a budget
/// of 30,000 took 97 s and left GDB at 129 MB, one of 10,000 104 s and 116 MB (the goal is
/// 150 MB at 100,000 functions).
/// `JIT_GDB_READER_BUDGET=N` in the environment sets another budget (0: always ELF).
const READER_BUDGET: usize = 30_000;

fn reader_budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let Some(v) = std::env::var_os("JIT_GDB_READER_BUDGET") else {
            return READER_BUDGET;
        };
        match v.to_str().and_then(|v| v.trim().parse().ok()) {
            Some(n) => n,
            None => {
                eprintln!(
                    "jit-interface: ignoring JIT_GDB_READER_BUDGET={}: not a number of \
                     functions (using {READER_BUDGET})",
                    v.to_string_lossy()
                );
                READER_BUDGET
            }
        }
    })
}

/// Functions announced so far in small compact entries of their own to an attached debugger
/// (never reset: a debugger that detaches and attaches again keeps what it leaked).
static READ_BY_READER: AtomicUsize = AtomicUsize::new(0);

fn registry() -> MutexGuard<'static, State> {
    // The state is changed only after every fallible step (encoding) has succeeded, so a
    // poisoned lock still guards a consistent state.
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// A registered object. Dropping it unregisters the object: debuggers forget its functions
/// and its debug data is freed.
pub struct Registration {
    id: u32,
    format: Format,
    /// Below 2^32: a model's functions are numbered in 32 bits.
    functions: u32,
    payload_len: u64,
}

/// Encodes `object` in `format` and registers it with the debugger.
///
/// The object is in the descriptor's list, consistent, when this returns (attach and core
/// files see it), and a debugger attached at that moment has read it (unless deferred mode
/// is on: see [`set_deferred`]).
///
/// Without a debugger (no `int3` on `__jit_debug_register_code`'s first byte) a compact
/// object is appended in place to a batch entry: no stop, nothing re-encoded. With GDB
/// attached, each registration gets an entry of its own (one stop), and small entries are
/// merged 32 at a time into batch entries, 32 of those into sealed ones, so GDB holds few
/// entries however many objects are live (those batches are ELF even for compact objects:
/// GDB reads ELF without keeping memory for it once dropped). Objects with 64 functions or
/// more get an entry of
/// their own for good. Set `JIT_GDB_ALWAYS_NOTIFY=1` for debuggers that do not plant an
/// `int3` there (hardware breakpoints, rr replay).
pub fn register(object: &JitObject, format: Format) -> Result<Registration> {
    thread_local! {
        /// Compact records are encoded here, then copied into their batch: no allocation per
        /// registration for the record.
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    // Validated by the encoders (first thing they do), not twice here.
    let functions = object.functions().len();
    let big = functions >= BIG_OBJECT;
    let arch = object.arch();
    // Under a debugger (outside deferred mode) a small object gets an entry of its own, read
    // at once; once `READER_BUDGET` is spent, a compact one is announced as ELF there.
    // (Checked again under the lock; a registration that races with an attaching debugger
    // stays compact.)
    let encoding = if format == Format::Compact
        && !big
        && !DEFERRED.load(Ordering::Relaxed)
        && READ_BY_READER.load(Ordering::Relaxed) >= reader_budget()
        && descriptor::debugger_attached()
    {
        Format::Elf
    } else {
        format
    };
    // Without a debugger, a small ELF object is appended in place to a growing ELF payload
    // (encoded once, never merged; see `State::append_growing`). It is encoded under the
    // registry's lock (where it goes decides its offsets); its compact record, encoded
    // here, is kept for rewrites, so objects the record cannot carry whole (call sites,
    // variables) take the general path. (Checked again under the lock.)
    let grow = format == Format::Elf
        && !big
        && arch == Arch::X86_64
        && lossless(object)
        && !descriptor::debugger_attached();
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        // Encode before taking the lock: registrations from several threads encode in
        // parallel.
        let (mut elf, model) = match encoding {
            Format::Compact => {
                scratch.clear();
                // The slot is assigned under the lock; its address and key are patched in.
                let placeholder = LiveCheck { address: 0, key: 1 };
                crate::format::encode_record(&mut scratch, object, Some(placeholder))?;
                // Compact records have no call sites, but the ELF batches a small object is
                // merged into under a debugger can: an object that declares some keeps its
                // model for them (the others' models are decoded from their records).
                let calls = !big && object.functions().iter().any(|f| !f.calls().is_empty());
                (None, calls.then(|| Arc::new(object.clone())))
            }
            Format::Elf if grow => {
                // A plain object (one function with lines: what runtimes registering one by
                // one mostly have) is read back from the payload when needed, and the ELF
                // encoder validates it under the lock. Others keep their compact record;
                // encoding it validates them, as the ELF encoder would (the same checks).
                scratch.clear();
                if !maybe_plain(object) {
                    crate::format::encode_record(&mut scratch, object, None)?;
                }
                (None, None)
            }
            Format::Elf => {
                if format == Format::Compact {
                    // Refused exactly when it would be without a debugger (e.g. variables).
                    scratch.clear();
                    let placeholder = LiveCheck { address: 0, key: 1 };
                    crate::format::encode_record(&mut scratch, object, Some(placeholder))?;
                }
                // Big objects keep an entry of their own, never merged or rewritten: no model.
                let model = (!big).then(|| Arc::new(object.clone()));
                let buf = SPARE_PAYLOADS
                    .with(|p| p.borrow_mut().pop())
                    .unwrap_or_default();
                (
                    Some(crate::elf::encode_objects_into(arch, &[object], buf)?),
                    model,
                )
            }
        };
        let record_len = elf.as_ref().map_or(scratch.len(), Vec::len);
        let mut payload_len = match encoding {
            Format::Compact => crate::format::HEADER_LEN + record_len,
            Format::Elf => record_len,
        };
        // Checked before any change of state: a slot's offsets are 32-bit.
        let record_len32 = offset32(record_len, encoding)?;
        let functions32 = u32::try_from(functions).map_err(|_| crate::Error::Unsupported {
            format: format.name(),
            why: format!("{functions} functions in one object"),
        })?;
        let id = {
            let mut st = registry();
            let id = st.new_member(model)?;
            if encoding == Format::Compact {
                let key = st.fresh_live_key();
                let slot = st.live.get(id as usize);
                slot.store(key, Ordering::Release);
                let address = slot as *const AtomicU64 as u64;
                crate::format::patch_live_check(&mut scratch, LiveCheck { address, key });
            }
            let attached = descriptor::debugger_attached();
            let mut grown = None;
            if grow {
                let appended = if attached {
                    Ok(None)
                } else {
                    st.append_growing(id, object, &scratch)
                };
                match appended {
                    Ok(Some((batch_id, bytes))) => {
                        grown = Some(batch_id);
                        payload_len = bytes;
                        st.grown += 1;
                    }
                    Ok(None) => {
                        // No room even in a new payload, or a debugger attached meanwhile:
                        // the general path, which needs the payload and the model.
                        let buf = SPARE_PAYLOADS
                            .with(|p| p.borrow_mut().pop())
                            .unwrap_or_default();
                        match crate::elf::encode_objects_into(arch, &[object], buf) {
                            Ok(payload) => {
                                payload_len = payload.len();
                                elf = Some(payload);
                                st.set_model(id, Some(Arc::new(object.clone())));
                            }
                            Err(e) => {
                                st.release(id);
                                return Err(e);
                            }
                        }
                    }
                    Err(e) => {
                        st.release(id);
                        return Err(e);
                    }
                }
            }
            let quiet = encoding == Format::Compact
                && !big
                && record_len <= OPEN_RECORD_MAX
                && (!attached || st.deferred.is_some());
            let batch_id = if let Some(batch_id) = grown {
                batch_id
            } else if quiet {
                st.append_quietly(id, arch, &scratch)
            } else {
                if attached && st.deferred.is_none() {
                    st.close_open_batches();
                }
                // Allocated before the payload: see `Batch::cell`.
                let cell = EntryCell::new();
                let buf = match encoding {
                    Format::Compact => {
                        let len = crate::format::HEADER_LEN + record_len;
                        let mut buf = Vec::with_capacity(len);
                        crate::pages::prefault_spare(&mut buf, len);
                        buf.extend_from_slice(&crate::format::header(arch));
                        buf.extend_from_slice(&scratch);
                        buf
                    }
                    Format::Elf => elf.take().unwrap_or_default(),
                };
                // The record ends the payload, which is a header longer than the record (an
                // ELF slot's place is not used).
                let at = buf.len().saturating_sub(record_len) as u32;
                let level = if big { SEALED } else { 0 };
                let slot = Slot {
                    id,
                    at,
                    len: record_len32,
                };
                if encoding == Format::Compact && !big && attached {
                    READ_BY_READER.fetch_add(functions, Ordering::Relaxed);
                }
                st.link_new(cell, encoding, level, buf, vec![slot])
            };
            if let Some(m) = st.member_mut(id) {
                m.batch = Batches::index(batch_id);
            }
            if !quiet && !big && grown.is_none() {
                if encoding != format {
                    // The reader budget is spent: compact entries of their own still waiting
                    // for a merge would wait for good (no more join them), so they go into
                    // one ELF batch now (one stop, once).
                    st.merge_waiting(Format::Compact, 0);
                }
                st.level_push(encoding, 0, batch_id);
            }
            if quiet {
                st.flush_if_due();
            }
            id
        };
        // Profiler outputs (perf map, jitdump) never fail the registration.
        crate::perf::registered(object);
        Ok(Registration {
            id,
            format,
            functions: functions32,
            payload_len: payload_len as u64,
        })
    })
}

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

/// Is `object` one that a growing payload can read back (see `elf::GrowingIndex`): all
/// its functions with line rows in one source file, no blocks? (The payload has the last
/// word.)
#[inline]
fn maybe_plain(object: &JitObject) -> bool {
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

/// The slot of member `id`, object `k` of a growing ELF batch: a plain object (`plain`) is
/// read back from the payload; another keeps its compact record in `records` (`record`, or
/// encoded here if the caller expected a plain object). A slot of length 0 for an object
/// that is not plain (its record failed): the caller keeps its model.
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
        at: k as u32,
        len: 0,
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
        (true, Ok(at), Ok(len)) => Slot { id, at, len },
        _ => {
            records.truncate(before);
            index
        }
    }
}

/// The model in the compact record of `slot`, in `records` (a compact header, then records).
fn decode_record(records: &[u8], slot: &Slot) -> Option<JitObject> {
    let header = records.get(..crate::format::HEADER_LEN)?;
    let record = records.get(slot.range())?;
    let mut payload = Vec::with_capacity(header.len() + record.len());
    payload.extend_from_slice(header);
    payload.extend_from_slice(record);
    crate::format::decode(&payload).ok().map(|d| d.object)
}

/// Can `object`'s compact record carry it whole (for re-encoding as ELF), and a growing
/// ELF payload take it? Source texts are carried by the record, but a growing payload has
/// no room for them: objects with sources take the general path, and keep their models.
fn lossless(object: &JitObject) -> bool {
    !object.has_sources()
        && object
            .functions()
            .iter()
            .all(|f| f.calls().is_empty() && f.variables().is_empty())
}

/// Index of `arch` in `State::open` (a match, so that a new architecture must get one).
fn open_index(arch: Arch) -> usize {
    match arch {
        Arch::X86_64 => 0,
        Arch::Aarch64 => 1,
    }
}

/// Where member `id` is in `members`, searched from both ends at once: code dropped in
/// order (oldest or newest first) is found at once rather than after a whole batch.
fn position_of(members: &[Slot], id: u32) -> Option<usize> {
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

impl State {
    /// A fresh nonzero key for a live slot: unique per registration within a process, and
    /// unlikely to be found by chance in memory that was freed and reused. (Under the
    /// registry's lock: a plain counter, no atomic.)
    #[inline]
    fn fresh_live_key(&mut self) -> u64 {
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
    fn new_member(&mut self, model: Option<Arc<JitObject>>) -> Result<u32> {
        let m = Member { batch: MEMBER_NEW };
        let i = if let Some(i) = self.free.pop() {
            self.members[i as usize] = m;
            i
        } else {
            let i = u32::try_from(self.members.len()).map_err(|_| crate::Error::Unsupported {
                format: "any",
                why: "more than 4,294,967,295 objects registered at once".into(),
            })?;
            self.members.push(m);
            i
        };
        self.set_model(i, model);
        Ok(i)
    }

    /// Frees member index `id` again (its registration failed before it joined a batch).
    fn release(&mut self, id: u32) {
        self.set_model(id, None);
        if let Some(m) = self.members.get_mut(id as usize) {
            m.batch = MEMBER_FREE;
            self.free.push(id);
        }
    }

    /// The model kept for member `id`, if any.
    fn model_of(&self, id: u32) -> Option<&JitObject> {
        self.member_ref(id)?;
        self.models.get(id as usize)?.as_deref()
    }

    /// Keeps `model` for member `id` (or none).
    #[inline]
    fn set_model(&mut self, id: u32, model: Option<Arc<JitObject>>) {
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

    fn member_mut(&mut self, id: u32) -> Option<&mut Member> {
        self.members
            .get_mut(id as usize)
            .filter(|m| m.batch != MEMBER_FREE)
    }

    fn member_ref(&self, id: u32) -> Option<&Member> {
        self.members
            .get(id as usize)
            .filter(|m| m.batch != MEMBER_FREE)
    }

    /// Links a new entry (`cell`, allocated before `buf`) for `buf` holding `members`;
    /// returns its batch id.
    fn link_new(
        &mut self,
        cell: Box<EntryCell>,
        format: Format,
        level: usize,
        buf: Vec<u8>,
        members: Vec<Slot>,
    ) -> u64 {
        let mut batch = Batch::new(cell, format, level, buf, members);
        batch.point_entry();
        // SAFETY: the cell is boxed (stable address) and its payload is owned by the same
        // batch, never reallocated while linked; both live until the entry is unlinked or
        // replaced (`unlink_batch`, `rewrite`, `republish`).
        unsafe { descriptor::link(batch.entry()) };
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

    /// Appends a compact record to the open batch of `arch` in place (a new open batch when
    /// there is none or it is full). No debugger was attached when the caller looked; if one
    /// is attached now it may have read the payload before the append, so it is told.
    #[inline]
    fn append_quietly(&mut self, id: u32, arch: Arch, record: &[u8]) -> u64 {
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
                    at,
                    len: record.len() as u32,
                });
                // SAFETY: the entry is linked and points at `buf`, which did not move (the
                // append stayed within its capacity); the new size ends on a record boundary;
                // entries are written only under the registry's lock, which is held.
                unsafe { descriptor::set_size(batch.entry(), batch.buf.len()) };
                if descriptor::debugger_attached() {
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
            at,
            // At most OPEN_RECORD_MAX (the caller checked).
            len: record.len() as u32,
        });
        let batch_id = self.link_new(cell, Format::Compact, SEALED, buf, slots);
        if let Some(b) = self.batches.get_mut(batch_id) {
            b.open = true;
        }
        self.open[key] = batch_id;
        batch_id
    }

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
    fn append_growing(
        &mut self,
        id: u32,
        object: &JitObject,
        record: &[u8],
    ) -> Result<Option<(u64, usize)>> {
        offset32(record.len(), Format::Compact)?;
        let batch_id = self.growing;
        if batch_id != FREE {
            if let Some(batch) = self.batches.get_mut(batch_id) {
                if let Some(growing) = batch.growing.as_mut() {
                    if let Some(bytes) = growing.append(&mut batch.buf, object)? {
                        let k = growing.objects() - 1;
                        let plain = growing.index().is_plain(k);
                        let slot = kept_slot(&mut batch.records, id, object, record, k, plain);
                        batch.members.push(slot);
                        if slot.len == 0 && !plain {
                            self.set_model(id, Some(Arc::new(object.clone())));
                        }
                        if descriptor::debugger_attached() {
                            // Attached meanwhile: it may have read the payload before.
                            self.republish(batch_id, false);
                        }
                        return Ok(Some((batch_id, bytes)));
                    }
                }
            }
            // Full (or no room for this object): it takes no more.
            self.retire(batch_id);
        }
        self.grow_new(id, object, record)
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
        if self
            .batches
            .get(batch_id)
            .is_some_and(|b| b.growing.is_some())
        {
            self.retired = batch_id;
        }
    }

    /// `append_growing` when there is no growing batch with room: a new one, holding
    /// `object`, linked once it is in.
    #[cold]
    #[inline(never)]
    fn grow_new(
        &mut self,
        id: u32,
        object: &JitObject,
        record: &[u8],
    ) -> Result<Option<(u64, usize)>> {
        // Allocated before the payload: see `Batch::cell`.
        let cell = EntryCell::new();
        let (mut buf, mut growing) = crate::elf::Growing::new(self.spare_growing.pop())?;
        let Some(bytes) = growing.append(&mut buf, object)? else {
            return Ok(None);
        };
        let plain = growing.index().is_plain(0);
        let mut records = Vec::new();
        let slot = kept_slot(&mut records, id, object, record, 0, plain);
        if slot.len == 0 && !plain {
            self.set_model(id, Some(Arc::new(object.clone())));
        }
        // Room for a full payload's objects: growing by copying touches fresh memory.
        let mut members = Vec::with_capacity(crate::elf::GROWING_PAYLOAD / 256);
        members.push(slot);
        let batch_id = self.link_new(cell, Format::Elf, SEALED, buf, members);
        if let Some(b) = self.batches.get_mut(batch_id) {
            b.records = records;
            b.growing = Some(Box::new(growing));
        }
        if descriptor::debugger_attached() {
            // It read the batch when linked; it is not told about appends.
            self.seal(batch_id);
        } else {
            self.growing = batch_id;
        }
        Ok(Some((batch_id, bytes)))
    }

    /// Keeps `buf`, a growing payload's buffer no longer linked, for reuse (see
    /// `State::spare_growing`).
    fn keep_spare(&mut self, buf: Vec<u8>) {
        if self.spare_growing.len() < SPARE_GROWING && buf.len() == crate::elf::GROWING_PAYLOAD {
            self.spare_growing.push(buf);
        }
    }

    /// Stops appending to `batch_id` in place.
    fn seal(&mut self, batch_id: u64) {
        if let Some(b) = self.batches.get_mut(batch_id) {
            b.open = false;
            if let Some(growing) = b.growing.take() {
                let (index, mirror) = growing.seal();
                b.index = index.has_plain().then(|| Box::new(index));
                if let Some(mirror) = mirror {
                    self.keep_spare(mirror);
                }
            }
        }
        self.unopen(batch_id);
    }

    /// A debugger is attached: open batches stop growing in place (it has read them, on
    /// attach, or is told about them by `republish`).
    fn close_open_batches(&mut self) {
        for b in self.open.into_iter().chain([self.growing, self.retired]) {
            if b != FREE {
                self.seal(b);
            }
        }
    }

    /// Forgets `batch_id` as an open or growing batch.
    fn unopen(&mut self, batch_id: u64) {
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

    /// Makes an attached debugger re-read batch `batch_id` (same payload, new entry): it
    /// drops what it had read for the old entry. Unless `keep_open`, the batch is sealed: a
    /// debugger is watching.
    fn republish(&mut self, batch_id: u64, keep_open: bool) {
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        self.pending -= batch.pending;
        batch.pending = 0;
        let mut cell = EntryCell::new();
        *cell.entry.get_mut() = JitCodeEntry::new(&batch.buf);
        // SAFETY: the old cell is linked; the new one is boxed, points at the same payload
        // (owned by the batch), and takes the old one's place in the batch right after.
        unsafe { descriptor::replace(batch.entry(), cell.entry.get()) };
        batch.cell = cell;
        if !keep_open {
            self.seal(batch_id);
        }
    }

    /// A record was appended to `batch_id` in place while a debugger is attached (deferred
    /// mode): it is announced at the next flush.
    fn note_pending(&mut self, batch_id: u64) {
        if let Some(b) = self.batches.get_mut(batch_id) {
            if b.pending == 0 {
                self.pending_batches.push(batch_id);
            }
            b.pending += 1;
            self.pending += 1;
            if self.pending_since.is_none() {
                self.pending_since = Some(Instant::now());
                if self.deferred.is_some_and(|d| d.max_delay.is_some()) {
                    // Started only now, under a debugger: a program that never has one
                    // (or runs under valgrind) never gets the thread.
                    start_timer();
                }
                // The timer sleeps until something is pending.
                TIMER_WAKE.notify_all();
            }
            jit_gdb_pending.store(self.pending as u64, Ordering::Relaxed);
        }
    }

    fn flush_if_due(&mut self) {
        let Some(d) = self.deferred else {
            return;
        };
        let late = || {
            d.max_delay
                .zip(self.pending_since)
                .is_some_and(|(delay, since)| since.elapsed() >= delay)
        };
        if self.pending >= d.max_pending || (self.pending > 0 && late()) {
            self.flush();
        }
    }

    /// Announces every pending batch (if a debugger is still attached: one that attached
    /// meanwhile read them on attach anyway). Returns how many registrations were pending.
    fn flush(&mut self) -> usize {
        let n = self.pending;
        let batches = std::mem::take(&mut self.pending_batches);
        if n > 0 && descriptor::debugger_attached() {
            for b in batches {
                // The debugger reads the batch again, whole. A batch that is a quarter full
                // or more is sealed now, so no record is read more than about twice (GDB 13
                // keeps ~300 bytes for every function each time it reads one, freed
                // never), and entries stay at most 4 N / OPEN_CAPACITY records' worth.
                let keep_open = self
                    .batches
                    .get(b)
                    .is_some_and(|b| b.open && b.buf.len() < OPEN_CAPACITY / 4);
                self.republish(b, keep_open);
            }
        } else {
            for b in batches {
                if let Some(b) = self.batches.get_mut(b) {
                    b.pending = 0;
                }
            }
        }
        self.pending = 0;
        self.pending_since = None;
        jit_gdb_pending.store(0, Ordering::Relaxed);
        n
    }

    /// Forgets the pending records of a batch that is rewritten or unlinked (the debugger
    /// is told about it as a whole).
    fn drop_pending(&mut self, batch_id: u64) {
        if let Some(b) = self.batches.get_mut(batch_id) {
            if b.pending > 0 {
                self.pending -= b.pending;
                b.pending = 0;
                self.pending_batches.retain(|&p| p != batch_id);
                if self.pending == 0 {
                    self.pending_since = None;
                }
                jit_gdb_pending.store(self.pending as u64, Ordering::Relaxed);
            }
        }
    }

    /// Merges the entries waiting at `level` of `format`, however few.
    fn merge_waiting(&mut self, format: Format, level: usize) {
        let ids = self
            .levels
            .get_mut(&(format as u8, level))
            .map(std::mem::take)
            .unwrap_or_default();
        if !ids.is_empty() {
            self.merge(format, level, ids);
        }
    }

    fn level_push(&mut self, format: Format, level: usize, batch: u64) {
        let list = self.levels.entry((format as u8, level)).or_default();
        list.push(batch);
        if list.len() >= FAN_IN {
            let ids = std::mem::take(list);
            self.merge(format, level, ids);
        }
    }

    /// The payload of an entry holding the current members of `batches`, and their slots in
    /// it. Compact records are copied as bytes (tombstones left out); ELF objects are encoded
    /// afresh from their models.
    fn build(&self, format: Format, batches: &[u64]) -> Result<(Vec<u8>, Vec<Slot>)> {
        let parts: Vec<&Batch> = batches
            .iter()
            .filter_map(|b| self.batches.get(*b))
            .collect();
        match format {
            Format::Compact => {
                let live: usize = parts
                    .iter()
                    .flat_map(|b| &b.members)
                    .map(|s| s.len as usize)
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
                        // Below 4 GiB: checked above.
                        let at = buf.len() as u32;
                        buf.extend_from_slice(&b.buf[s.range()]);
                        slots.push(Slot { at, ..*s });
                    }
                }
                Ok((buf, slots))
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
                        format: "ELF",
                        why: "a batch member has no model to re-encode".into(),
                    });
                };
                let arch = models.first().map_or(Arch::X86_64, |m| m.arch());
                let buf = crate::elf::encode_objects(arch, &models)?;
                Ok((buf, slots))
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
    fn build_as_elf(&mut self, batches: &[u64]) -> Option<(Vec<u8>, Vec<Slot>)> {
        if !descriptor::debugger_attached() {
            return None;
        }
        for b in batches {
            let batch = self.batches.get(*b)?;
            if batch.format != Format::Compact || batch.open {
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
    fn decode_models(&mut self, batch_id: u64) -> bool {
        let Some(batch) = self.batches.get(batch_id) else {
            return false;
        };
        let mut decoded = Vec::new();
        for s in &batch.members {
            if self.model_of(s.id).is_some() {
                continue;
            }
            let model = match batch.format {
                Format::Compact => decode_record(&batch.buf, s),
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
        if batch.format != Format::Elf || batch.level < SEALED {
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
            s.at = at32;
            s.len = len32;
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
    fn merge(&mut self, format: Format, level: usize, ids: Vec<u64>) {
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
        self.merge_entries(format, level, ids);
        let st = &mut self.merge_stats;
        st.merges += 1;
        st.objects += objects as u64;
        if let Some(t0) = t0 {
            st.time += t0.elapsed();
            self.merging = false;
        }
    }

    fn merge_entries(&mut self, format: Format, level: usize, ids: Vec<u64>) {
        let cell = EntryCell::new();
        let (format, built) = match format {
            Format::Compact => match self.build_as_elf(&ids) {
                Some(built) => (Format::Elf, Ok(built)),
                None => (format, self.build(format, &ids)),
            },
            Format::Elf => (format, self.build(format, &ids)),
        };
        let Ok((buf, slots)) = built else {
            // Only ELF can refuse a merge (functions of different objects overlapping in one
            // ELF object): keep those entries as they are, and stop trying.
            for b in &ids {
                if let Some(batch) = self.batches.get_mut(*b) {
                    batch.level = SEALED;
                }
            }
            return;
        };
        let new_level = (level + 1).min(SEALED);
        let new_id = self.link_new(cell, format, new_level, buf, slots);
        for b in ids {
            self.unlink_batch(b);
        }
        if new_level < SEALED {
            self.level_push(format, new_level, new_id);
        } else {
            self.keep_records(new_id);
        }
    }

    /// Unlinks and frees batch `batch_id` (the payload of a one-object ELF entry goes to this
    /// thread's spare buffers, for the next one).
    fn unlink_batch(&mut self, batch_id: u64) {
        self.drop_pending(batch_id);
        let Some(batch) = self.batches.remove(batch_id) else {
            return;
        };
        if batch.peeled {
            self.peeled -= 1;
        }
        // SAFETY: linked when created (`link_new`) or swapped in (`rewrite`, `republish`),
        // unlinked only
        // here, which also takes it out of `batches`.
        unsafe { descriptor::unlink(batch.entry()) };
        if batch.level < SEALED {
            if let Some(list) = self.levels.get_mut(&(batch.format as u8, batch.level)) {
                list.retain(|&b| b != batch_id);
            }
        }
        self.unopen(batch_id);
        if batch.buf.len() == crate::elf::GROWING_PAYLOAD {
            self.keep_spare(batch.buf);
            return;
        }
        if batch.format == Format::Elf && batch.level == 0 && batch.buf.capacity() <= SPARE_MAX {
            SPARE_PAYLOADS.with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < SPARE_COUNT {
                    p.push(batch.buf);
                }
            });
        }
        // The batch (payload and tombstone slots) is freed here, after the unlink.
    }

    /// Rewrites batch `batch_id` with only its current members (dead records dropped) and
    /// swaps the new entry into the old one's place: one pointer store, then the debugger
    /// drops the old entry and reads the new one. Under a debugger a sealed compact batch is
    /// rewritten as ELF (see `build_as_elf`).
    fn rewrite(&mut self, batch_id: u64) {
        self.drop_pending(batch_id);
        let Some(batch) = self.batches.get(batch_id) else {
            return;
        };
        let (format, open) = (batch.format, batch.open);
        if batch.growing.is_some() {
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
        let (new_format, built) = match self.build_as_elf(&[batch_id]) {
            Some(built) => (Format::Elf, Ok(built)),
            None => (format, self.build(format, &[batch_id])),
        };
        let (mut buf, slots) = match built {
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
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        if new_format != format {
            batch.format = new_format;
            let level = batch.level;
            if level < SEALED {
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

    /// Rebuilds the grown ELF batch `batch_id` (sealed, its plain members read back through
    /// `Batch::index`) without the members that left: a new growing payload, the plain
    /// members' bytes copied from the old one (`Growing::append_copy_of`), the others
    /// appended from their models or records. The members keep no models: a rewrite by the
    /// general encoder gives every member one (about 240 bytes each: 1,000 objects dropped
    /// here and there among 100,000 took the process from 27 to 51 MB, and every batch they
    /// left kept them). False if it is not such a batch or an object is not appended (the
    /// caller rewrites it the general way; nothing changed).
    fn recopy(&mut self, batch_id: u64) -> bool {
        let Some(batch) = self.batches.get(batch_id) else {
            return false;
        };
        let (Some(index), None) = (batch.index.as_deref(), &batch.growing) else {
            return false;
        };
        if batch.members.len() < RECOPY_MIN {
            return false;
        }
        let Ok((mut buf, mut growing)) = crate::elf::Growing::new(self.spare_growing.pop()) else {
            return false;
        };
        let mut slots = Vec::with_capacity(batch.members.len());
        let mut plain = Vec::with_capacity(batch.members.len());
        for (k, s) in batch.members.iter().enumerate() {
            let appended = match (self.model_of(s.id), s.len, index.plain(s.at as usize)) {
                (Some(model), _, _) => growing.append(&mut buf, model),
                (None, 0, Some(p)) => growing.append_copy_of(&mut buf, &batch.buf, Some(index), p),
                (None, 1.., _) => match decode_record(&batch.records, s) {
                    Some(model) => growing.append(&mut buf, &model),
                    None => Ok(None),
                },
                (None, 0, None) => Ok(None),
            };
            if !matches!(appended, Ok(Some(_))) {
                self.keep_spare(buf);
                return false;
            }
            // A member read back from the payload is found at its new place; one that
            // has its record or model keeps it.
            let new_plain = growing.index().is_plain(k) && s.len == 0;
            plain.push(new_plain);
            slots.push(Slot {
                at: if new_plain { k as u32 } else { s.at },
                ..*s
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
            if !now && s.len == 0 && self.model_of(s.id).is_none() {
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
            Some(b) if slots.iter().any(|s| s.len > 0) => std::mem::take(&mut b.records),
            _ => Vec::new(),
        };
        self.swap_payload(batch_id, EntryCell::new(), buf, slots);
        let (index, mirror) = growing.seal();
        if let Some(batch) = self.batches.get_mut(batch_id) {
            batch.records = records;
            batch.index = index.has_plain().then(|| Box::new(index));
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
    /// already out of `members`) is rewritten as two entries: the `PEEL` members at that
    /// end, and the rest. False if it is not such a batch or that fails (the caller rewrites
    /// it whole).
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
    fn peel(&mut self, batch_id: u64, pos: usize) -> bool {
        let Some(batch) = self.batches.get(batch_id) else {
            return false;
        };
        let n = batch.members.len();
        if batch.format != Format::Elf
            || batch.level < SEALED
            || n < 2 * PEEL
            || (pos != 0 && pos != n)
            || self.peeled >= PEEL_MAX
        {
            return false;
        }
        let growing = batch.growing.is_some();
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
        let back_id = self.link_new(back_cell, Format::Elf, SEALED, back, back_slots);
        // The end split off: the old batch's place (oldest end) or the new one (newest).
        let end = if pos == 0 { batch_id } else { back_id };
        if let Some(b) = self.batches.get_mut(end) {
            b.peeled = true;
            self.peeled += 1;
        }
        self.swap_payload(batch_id, cell, front, front_slots);
        true
    }

    /// Puts payload `buf` holding `members` in the place of batch `batch_id`'s (its entry
    /// `cell` swapped in for the old one) after a rewrite (`rewrite`, `peel`): a compact
    /// batch's records are in `buf`, an ELF batch's members all have their models (a batch
    /// rebuilt by copies, `recopy`, gives it its index and records back after).
    fn swap_payload(
        &mut self,
        batch_id: u64,
        mut cell: Box<EntryCell>,
        buf: Vec<u8>,
        members: Vec<Slot>,
    ) {
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        *cell.entry.get_mut() = JitCodeEntry::new(&buf);
        // SAFETY: the old cell is linked; the new one is boxed and points at `buf`, and both
        // take the old ones' place in the batch right after (the old payload is freed only
        // then, after the debugger was told).
        unsafe { descriptor::replace(batch.entry(), cell.entry.get()) };
        batch.cell = cell;
        let old = std::mem::replace(&mut batch.buf, buf);
        batch.members = members;
        // An ELF batch's members keep their models: a batch that loses one member often
        // loses more, and decoding it all again at each would cost more than the rest of a
        // rewrite.
        batch.records = Vec::new();
        batch.index = None;
        batch.dead = 0;
        if old.len() == crate::elf::GROWING_PAYLOAD {
            self.keep_spare(old);
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
    fn regrow(&mut self, batch_id: u64, pos: usize) -> bool {
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return false;
        };
        let Some(mut growing) = batch.growing.take() else {
            return false;
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
            batch.growing = Some(growing);
            return false;
        }
        // The objects to append again, found before the payload is cut: a plain one is
        // copied from the payload itself (where its index entry says), others from their
        // model.
        let mut again = Vec::with_capacity(members - pos);
        for s in &batch.members[pos..] {
            let item = match self.models.get(s.id as usize) {
                Some(Some(model)) => Some(Again::Model(Arc::clone(model))),
                _ if s.len > 0 => {
                    decode_record(&batch.records, s).map(|m| Again::Model(Arc::new(m)))
                }
                _ => growing.index().plain(s.at as usize).map(Again::Copy),
            };
            let Some(item) = item else {
                batch.growing = Some(growing);
                return false;
            };
            again.push(item);
        }
        self.regrown += suffix;
        let Some(mut buf) = growing.roll_back(&batch.buf, pos, self.spare_growing.pop()) else {
            batch.growing = Some(growing);
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
                batch.growing = Some(growing);
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
            if s.len > 0 || self.models.get(s.id as usize).is_some_and(Option::is_some) {
                continue;
            }
            if plain {
                s.at = k as u32;
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
        let mut cell = EntryCell::new();
        *cell.entry.get_mut() = JitCodeEntry::new(&buf);
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return false;
        };
        // SAFETY: the old cell is linked; the new one is boxed and points at `buf`, and both
        // take the old ones' place in the batch right after (the old payload is kept for
        // the next rollback only then, after the debugger was told).
        unsafe { descriptor::replace(batch.entry(), cell.entry.get()) };
        batch.cell = cell;
        let old = std::mem::replace(&mut batch.buf, buf);
        growing.keep_mirror(old);
        batch.growing = Some(growing);
        true
    }

    /// Unregisters member `id`. Its entry is unlinked if it held nothing else. Otherwise,
    /// without a debugger, the object's live slot is cleared and its record left in place (a
    /// tombstone, skipped by every reader); with one, the batch is rewritten without it.
    fn remove(&mut self, id: u32) {
        let Some(batch) = self.take_member(id) else {
            return;
        };
        self.unregister(batch, &[id]);
        self.live.get(id as usize).store(0, Ordering::Release);
        self.free.push(id);
    }

    /// Unregisters the members `ids` (see `remove`) at once: each batch that held some of
    /// them is rewritten (or its dead records counted) once, not once per member. Ids not
    /// registered, or given twice, are skipped.
    fn remove_many(&mut self, ids: impl IntoIterator<Item = u32>) {
        let mut taken: Vec<(u64, u32)> = Vec::new();
        for id in ids {
            if let Some(batch) = self.take_member(id) {
                taken.push((batch, id));
            }
        }
        // Grouped by batch, each group's ids sorted (`unregister` searches them).
        taken.sort_unstable();
        for group in taken.chunk_by(|a, b| a.0 == b.0) {
            let ids: Vec<u32> = group.iter().map(|&(_, id)| id).collect();
            self.unregister(group[0].0, &ids);
        }
        for (_, id) in taken {
            self.live.get(id as usize).store(0, Ordering::Release);
            self.free.push(id);
        }
    }

    /// Marks member `id` free and drops its model; returns the batch that holds it (`None`
    /// if `id` is not registered).
    fn take_member(&mut self, id: u32) -> Option<u64> {
        let member = self.member_mut(id)?;
        let index = std::mem::replace(&mut member.batch, MEMBER_FREE);
        let batch = self.batches.id_at(index);
        self.set_model(id, None);
        Some(batch)
    }

    /// Takes members `ids` (sorted) out of `batch_id` (see `remove`). The caller clears their
    /// live slots afterwards (a tombstone's slot is cleared here, before anything else).
    fn unregister(&mut self, batch_id: u64, ids: &[u32]) {
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        // The position of a single member taken out (a growing batch may roll back to it),
        // and the bytes of records taken out.
        let (pos, gone) = if let [id] = ids {
            let Some(pos) = position_of(&batch.members, *id) else {
                return;
            };
            (Some(pos), batch.members.remove(pos).len as usize)
        } else {
            let before = batch.members.len();
            let mut gone = 0;
            batch.members.retain(|s| {
                let out = ids.binary_search(&s.id).is_ok();
                if out {
                    gone += s.len as usize;
                }
                !out
            });
            if batch.members.len() == before {
                return;
            }
            (None, gone)
        };
        if batch.members.is_empty() {
            self.unlink_batch(batch_id);
            return;
        }
        if let Some(pos) = pos {
            // A retired batch rolls back its recent objects only: appending most of a full
            // payload again costs more than encoding it (and an end is peeled below).
            let recent = batch_id == self.growing || batch.members.len() - pos < PEEL;
            if batch.growing.is_some()
                && recent
                && !descriptor::debugger_attached()
                && self.regrow(batch_id, pos)
            {
                return;
            }
            if self.peel(batch_id, pos) {
                return;
            }
        }
        let Some(batch) = self.batches.get_mut(batch_id) else {
            return;
        };
        if batch.format == Format::Compact && !descriptor::debugger_attached() {
            batch.dead += gone;
            let dead = batch.dead;
            let len = batch.buf.len();
            for &id in ids {
                self.live.get(id as usize).store(0, Ordering::Release);
            }
            if descriptor::debugger_attached() {
                // Attached meanwhile: it may have read the objects while live.
                self.rewrite(batch_id);
                if self.deferred.is_none() {
                    self.seal(batch_id);
                }
            } else if dead >= COMPACT_MIN_DEAD && dead * 2 > len {
                self.rewrite(batch_id);
            }
            return;
        }
        self.rewrite(batch_id);
        // The debugger read the rewritten batch whole; outside deferred mode it would have to
        // re-read it at every append, so appends go elsewhere.
        if self.deferred.is_none() && self.open.contains(&batch_id) {
            self.seal(batch_id);
        }
    }
}

impl Registration {
    /// Size in bytes of this object's own payload (header and record for compact records,
    /// the ELF object for ELF); a debugger entry may hold it together with other objects:
    /// see [`register`].
    pub fn payload_len(&self) -> usize {
        self.payload_len as usize
    }

    /// Payload format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Number of functions registered by this handle.
    pub fn function_count(&self) -> usize {
        self.functions as usize
    }
}

/// Unregisters every registration of `registrations` at once, as dropping each would, but
/// each debugger entry that held some of them is rewritten once rather than once per object
/// (with GDB attached: two stops per entry instead of two per object).
///
/// Why: a runtime that drops a large part of its code at once (a code cache flushed, a
/// module unloaded, shutdown) would otherwise pay for a rewrite at every object. ELF has no
/// live check, so an ELF object leaving an entry that holds others makes the registry
/// re-encode that entry without it: dropping 100,000 one-by-one ELF registrations one at a
/// time re-encodes some 50 objects per drop even in order (oldest or newest first: the
/// batch's end is split off, 64 objects, see the registry's module docs), 0.4 s in all on
/// the machine of `docs/PERFORMANCE.md`, and up to a whole batch (about 1,000 objects) per
/// drop in any other order; in one call, each entry is rewritten once or, when all of its
/// objects go, just unlinked (4 ms). Compact objects are cheap to drop either way (a
/// tombstone each).
///
/// When this returns, no debugger entry lists any of them (attach and core files agree).
///
/// ```
/// use jit_interface::{register, unregister_many, Format, JitObject};
///
/// let mut regs = Vec::new();
/// for i in 0..100u64 {
///     let mut obj = JitObject::new();
///     obj.add_function(&format!("fn_{i}"), 0x7000_0000 + i * 64, 64)?;
///     regs.push(register(&obj, Format::Elf)?);
/// }
/// // Every other one goes, in one call.
/// let (gone, kept): (Vec<_>, Vec<_>) = regs.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
/// unregister_many(gone.into_iter().map(|(_, r)| r));
/// assert_eq!(kept.len(), 50);
/// # Ok::<(), jit_interface::Error>(())
/// ```
pub fn unregister_many(registrations: impl IntoIterator<Item = Registration>) {
    // Taken before the lock: the iterator is the caller's code (it may register or drop).
    let ids: Vec<u32> = registrations
        .into_iter()
        .map(|r| std::mem::ManuallyDrop::new(r).id)
        .collect();
    registry().remove_many(ids);
}

impl Drop for Registration {
    fn drop(&mut self) {
        registry().remove(self.id);
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("format", &self.format)
            .field("functions", &self.functions)
            .field("payload_len", &self.payload_len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests that look at the batches their objects are in, one at a time: the registry is
    /// the process's, and objects another test drops rebuild the batches they share.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn batch() -> Batch {
        Batch::new(EntryCell::new(), Format::Compact, 0, Vec::new(), Vec::new())
    }

    #[test]
    fn members_are_found_from_either_end() {
        let slots: Vec<Slot> = [7u32, 3, 9, 1, 4]
            .iter()
            .map(|&id| Slot { id, at: 0, len: 0 })
            .collect();
        for (k, s) in slots.iter().enumerate() {
            assert_eq!(position_of(&slots, s.id), Some(k));
            assert_eq!(position_of(&slots[..k + 1], s.id), Some(k));
            assert_eq!(position_of(&slots[k..], s.id), Some(0));
        }
        assert_eq!(position_of(&slots, 5), None);
        assert_eq!(position_of(&[], 5), None);
    }

    #[test]
    fn a_batch_id_outlives_its_batch_without_finding_another() {
        let mut batches = Batches::default();
        let a = batches.insert(batch());
        let b = batches.insert(batch());
        assert_ne!(a, b);
        assert!(batches.remove(a).is_some());
        assert!(batches.get(a).is_none() && batches.remove(a).is_none());
        // The slot is reused under a new generation: the old id still finds nothing.
        let c = batches.insert(batch());
        assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff);
        assert_ne!(c, a);
        assert!(batches.get(a).is_none() && batches.get_mut(a).is_none());
        assert!(batches.get(c).is_some() && batches.get(b).is_some());
        for id in [a, b, c] {
            assert!(id != FREE && id != u64::MAX);
        }
        assert!(batches.get(u64::MAX).is_none() && batches.get(FREE).is_none());
    }

    /// Objects dropped here and there from payloads that grew and filled up: each such
    /// payload is rebuilt by copying the bytes of the objects left into a new growing
    /// payload (`State::recopy`), so those objects keep no models (a rewrite by the general
    /// encoder gave each one, about 240 bytes), still read back from the payload, and the
    /// entry stays a growing payload.
    #[test]
    fn grown_batches_losing_objects_here_and_there_keep_no_models() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let base = 0x5e80_0000_0000u64;
        let mut regs: Vec<Option<Registration>> = (0..3500u64)
            .map(|i| {
                let mut o = JitObject::new();
                let f = o
                    .add_function(&format!("spread_{i:04}"), base + i * 64, 64)
                    .unwrap();
                let rows = [
                    crate::model::LineRow {
                        offset: 0,
                        line: 3 + i as u32 % 5,
                    },
                    crate::model::LineRow { offset: 8, line: 9 },
                ];
                o.set_lines(f, &format!("spread{}.js", i % 3), &rows)
                    .unwrap();
                o.set_frame_pointer(f, 1, 4).unwrap();
                Some(register(&o, Format::Elf).unwrap())
            })
            .collect();
        // Every 25th object of each full payload, away from its ends (which are peeled).
        let mut dropped = 0;
        {
            let st = registry();
            let full: Vec<Vec<u32>> = regs
                .iter()
                .flatten()
                .filter_map(|r| st.member_ref(r.id).map(|m| st.batches.id_at(m.batch)))
                .collect::<std::collections::BTreeSet<u64>>()
                .into_iter()
                .filter(|&b| b != st.growing && b != st.retired)
                .filter_map(|b| st.batches.get(b))
                .filter(|b| b.index.is_some() && b.growing.is_none() && b.members.len() > 300)
                .map(|b| b.members.iter().map(|s| s.id).collect())
                .collect();
            drop(st);
            assert!(!full.is_empty(), "no payload filled up");
            for members in full {
                for id in members[100..members.len() - 100].iter().step_by(25) {
                    if let Some(r) = regs
                        .iter_mut()
                        .find(|r| r.as_ref().is_some_and(|r| r.id == *id))
                    {
                        drop(r.take());
                        dropped += 1;
                    }
                }
            }
        }
        assert!(dropped > 40, "only {dropped} objects dropped");
        let st = registry();
        for (i, r) in regs.iter().enumerate() {
            let Some(r) = r else { continue };
            assert!(st.model_of(r.id).is_none(), "spread_{i:04} has a model");
            let batch = st
                .member_ref(r.id)
                .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
                .expect("the batch");
            assert_eq!(
                batch.buf.len(),
                crate::elf::GROWING_PAYLOAD,
                "spread_{i:04}"
            );
            let slot = batch.members.iter().find(|s| s.id == r.id).expect("a slot");
            let back = batch.decode_member(slot).expect("read back");
            let f = back.functions().first().expect("its function");
            assert_eq!(
                (
                    f.name(),
                    f.start(),
                    f.file(),
                    f.lines().first().map(|l| l.line)
                ),
                (
                    format!("spread_{i:04}").as_str(),
                    base + i as u64 * 64,
                    Some(format!("spread{}.js", i % 3).as_str()),
                    Some(3 + i as u32 % 5)
                )
            );
        }
        drop(st);
        drop(regs);
    }

    /// Once one-function ELF objects are in a sealed batch, they keep their compact records
    /// there, not their models (about four times larger).
    #[test]
    fn sealed_elf_members_keep_records_not_models() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let base = 0x5b00_0000_0000u64;
        let regs: Vec<Registration> = (0..(FAN_IN * FAN_IN) as u64)
            .map(|i| {
                let mut o = JitObject::new();
                let f = o
                    .add_function(&format!("records_{i:04}"), base + i * 64, 64)
                    .unwrap();
                o.set_frame_pointer(f, 1, 4).unwrap();
                register(&o, Format::Elf).unwrap()
            })
            .collect();
        let st = registry();
        let with_model = regs.iter().filter(|r| st.model_of(r.id).is_some()).count();
        assert_eq!(
            with_model, 0,
            "members of the sealed batch that kept a model"
        );
        let batch = st
            .member_ref(regs[0].id)
            .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
            .expect("the batch");
        assert_eq!((batch.format, batch.level), (Format::Elf, SEALED));
        assert!(batch.records.len() > crate::format::HEADER_LEN * regs.len());
        drop(st);
        drop(regs);
    }

    /// One-function ELF objects with line rows, appended to a growing payload without a
    /// debugger, keep neither a model nor a compact record: the payload is read back.
    #[test]
    fn plain_elf_members_keep_neither_records_nor_models() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let base = 0x5d00_0000_0000u64;
        let regs: Vec<Registration> = (0..64u64)
            .map(|i| {
                let mut o = JitObject::new();
                let f = o
                    .add_function(&format!("plain_{i:04}"), base + i * 64, 64)
                    .unwrap();
                let rows = [crate::model::LineRow { offset: 0, line: 3 }];
                o.set_lines(f, "plain.js", &rows).unwrap();
                o.set_frame_pointer(f, 1, 4).unwrap();
                register(&o, Format::Elf).unwrap()
            })
            .collect();
        let st = registry();
        for (i, r) in regs.iter().enumerate() {
            assert!(st.model_of(r.id).is_none(), "a plain member kept a model");
            let batch = st
                .member_ref(r.id)
                .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
                .expect("the batch");
            let slot = batch.members.iter().find(|s| s.id == r.id).expect("a slot");
            assert_eq!(slot.len, 0, "a plain member kept a record");
            let back = batch.decode_member(slot).expect("read back");
            let f = back.functions().first().expect("its function");
            assert_eq!(
                (f.name(), f.start(), f.file()),
                (
                    format!("plain_{i:04}").as_str(),
                    base + i as u64 * 64,
                    Some("plain.js")
                )
            );
        }
        drop(st);
        drop(regs);
    }

    #[test]
    fn slots_and_members_stay_small() {
        // Kept once per registered object: every byte is paid for in page faults.
        assert_eq!(std::mem::size_of::<Slot>(), 12);
        assert_eq!(std::mem::size_of::<Member>(), 4);
        assert_eq!(std::mem::size_of::<Registration>(), 24);
    }
}
