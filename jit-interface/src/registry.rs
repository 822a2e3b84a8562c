//! Registration: encode an object, link it into GDB's list, unlink it when the handle drops.
//!
//! GDB's cost per stop (each hook call) grows with the number of entries it holds, and
//! attach walks all of them, so small registrations are consolidated into few batch entries:
//! each registration first gets an entry of its own (visible at once, one stop), every
//! `FAN_IN` of those are merged into one batch entry, every `FAN_IN` batches into a sealed
//! one. An unregistration re-encodes only its own batch. The models are kept for that: a
//! batch payload is always encoded afresh from them (compact: a bundle, each object with its
//! own live slot; ELF: one object holding all their functions).

use std::cell::UnsafeCell;
use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::descriptor::{self, JitCodeEntry};
use crate::error::Result;
use crate::format::LiveCheck;
use crate::model::JitObject;

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
/// they register in one stop and are never re-encoded.
const BIG_OBJECT: usize = 64;

/// Consolidation fan-in: this many entries of one level are merged into one entry of the
/// next level. Two levels: a sealed entry holds up to `FAN_IN^2` objects, so GDB holds about
/// `N / FAN_IN^2 + 2 * FAN_IN` entries for N small registrations. Measured under GDB
/// (`scripts/bench.sh`): ELF one-by-one registration at 10,000 functions took 1.06 ms each
/// with a fan-in of 16, 0.74 ms with 32. A larger fan-in makes each unregistration from a
/// sealed batch re-encode (and GDB re-read) more objects.
const FAN_IN: usize = 32;

/// Entries of this level are never merged again (top level, big objects, failed merges).
const SEALED: usize = 2;

/// One debugger entry and the payload it points to. Boxed, so its address is stable while
/// linked.
struct EntryCell {
    /// Mutated only under the descriptor's lock (link/unlink/replace) and by the debugger.
    entry: UnsafeCell<JitCodeEntry>,
    /// Never read here: the entry points into it, so it lives as long as the entry.
    _payload: Arc<[u8]>,
}

impl EntryCell {
    fn new(payload: Arc<[u8]>) -> Box<EntryCell> {
        let mut cell = EntryCell::empty();
        cell.set(payload);
        cell
    }

    /// A cell without payload yet: allocated before the payload is encoded, the entry lies
    /// before its payload in memory, so a core file cut inside the payload still shows the
    /// entry (and the cut) to post-mortem tools.
    fn empty() -> Box<EntryCell> {
        Box::new(EntryCell {
            entry: UnsafeCell::new(JitCodeEntry::new(&[])),
            _payload: Arc::new([]),
        })
    }

    /// Points the (unlinked) entry at `payload`.
    fn set(&mut self, payload: Arc<[u8]>) {
        *self.entry.get_mut() = JitCodeEntry::new(&payload);
        self._payload = payload;
    }
}

/// A debugger entry holding one or more registered objects.
struct Batch {
    cell: Box<EntryCell>,
    members: Vec<u64>,
    level: usize,
    format: Format,
}

/// A registered object, kept so that its batch can be re-encoded without it or merged.
struct Member {
    model: Arc<JitObject>,
    /// Nonzero while registered; cleared once no linked entry holds the object. The compact
    /// payload names this slot's address and value so that the GDB reader can tell live code
    /// from freed and reused code (GDB never tells the reader about unregistration). Boxed:
    /// the address must not move.
    live: Box<AtomicU64>,
    batch: u64,
}

/// B-trees rather than hash maps: their nodes are referenced by start address, so leak
/// checkers (valgrind) see registrations still live at exit as reachable, not "possibly lost".
#[derive(Default)]
struct State {
    batches: BTreeMap<u64, Batch>,
    members: BTreeMap<u64, Member>,
    /// Unsealed batches per format and level, in registration order.
    open: BTreeMap<(u8, usize), Vec<u64>>,
    next_id: u64,
}

// SAFETY: the entries' raw pointers are only read or written under the descriptor's lock or by
// the debugger while the process is stopped; the state itself is only touched under REGISTRY.
unsafe impl Send for State {}

static REGISTRY: OnceLock<Mutex<State>> = OnceLock::new();

fn registry() -> MutexGuard<'static, State> {
    // The state is changed only after every fallible step (encoding) has succeeded, so a
    // poisoned lock still guards a consistent state.
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// A registered object. Dropping it unregisters the object: the debugger forgets its
/// functions and their debug data is freed.
pub struct Registration {
    id: u64,
    format: Format,
    functions: usize,
    payload: Arc<[u8]>,
}

/// A fresh nonzero key for a live slot: unique per registration within a process, and
/// unlikely to be found by chance in memory that was freed and reused.
fn fresh_live_key() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    static SEED: OnceLock<u64> = OnceLock::new();
    let seed = *SEED.get_or_init(|| RandomState::new().build_hasher().finish());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(seed ^ n);
    h.finish() | 1
}

fn live_check(live: &AtomicU64) -> LiveCheck {
    LiveCheck {
        address: live as *const AtomicU64 as u64,
        key: live.load(Ordering::Relaxed),
    }
}

/// Encodes `object` in `format` and registers it with the debugger.
///
/// The object is in the descriptor's list, and the debugger (if any) has read it, when this
/// returns. Small objects first get an entry of their own; every `FAN_IN` of them are then
/// merged into one entry, and every `FAN_IN` of those into a sealed one, so the debugger
/// holds few entries however many registrations are live (its cost per stop grows with
/// them).
pub fn register(object: &JitObject, format: Format) -> Result<Registration> {
    object.validate()?;
    let mut cell = EntryCell::empty();
    let live = Box::new(AtomicU64::new(fresh_live_key()));
    let payload: Arc<[u8]> = match format {
        Format::Compact => crate::format::encode(object, Some(live_check(&live)))?,
        Format::Elf => crate::elf::encode(object)?,
    }
    .into();
    cell.set(payload.clone());
    let functions = object.functions().len();
    let model = Arc::new(object.clone());
    let id = {
        let mut st = registry();
        let id = st.fresh_id();
        let batch_id = st.fresh_id();
        let level = if functions >= BIG_OBJECT { SEALED } else { 0 };
        let batch = Batch {
            cell,
            members: vec![id],
            level,
            format,
        };
        st.members.insert(
            id,
            Member {
                model,
                live,
                batch: batch_id,
            },
        );
        // SAFETY: the cell is boxed (stable address) and owns its payload; it stays alive
        // until it is unlinked or replaced (`State::remove`, `State::merge`).
        unsafe { descriptor::link(batch.cell.entry.get()) };
        st.batches.insert(batch_id, batch);
        if level < SEALED {
            st.open_push(format, level, batch_id);
        }
        id
    };
    // Profiler outputs (perf map, jitdump) never fail the registration.
    crate::perf::registered(object);
    Ok(Registration {
        id,
        format,
        functions,
        payload,
    })
}

impl State {
    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn open_push(&mut self, format: Format, level: usize, batch: u64) {
        let open = self.open.entry((format as u8, level)).or_default();
        open.push(batch);
        if open.len() >= FAN_IN {
            let ids = std::mem::take(open);
            self.merge(format, level, ids);
        }
    }

    /// The payload of an entry holding `members`.
    fn encode(&self, format: Format, members: &[u64]) -> Result<Vec<u8>> {
        let ms: Vec<&Member> = members.iter().map(|m| &self.members[m]).collect();
        match format {
            Format::Compact => {
                let objects: Vec<_> = ms
                    .iter()
                    .map(|m| (&*m.model, Some(live_check(&m.live))))
                    .collect();
                crate::format::encode_bundle(&objects)
            }
            Format::Elf => {
                let arch = ms[0].model.arch();
                crate::elf::encode(&JitObject::merged(arch, ms.iter().map(|m| &*m.model)))
            }
        }
    }

    /// Replaces the entries `ids` (all of `level`) by one entry of `level + 1` holding all
    /// their objects: one stop to read it, one per old entry to drop it. A core file taken
    /// in between may show an object twice, never not at all.
    fn merge(&mut self, format: Format, level: usize, ids: Vec<u64>) {
        let members: Vec<u64> = ids
            .iter()
            .flat_map(|b| self.batches[b].members.iter().copied())
            .collect();
        let Ok(payload) = self.encode(format, &members) else {
            // Only ELF can refuse a merge (functions of different objects overlapping in one
            // ELF object): keep those entries as they are, and stop trying.
            for b in &ids {
                if let Some(batch) = self.batches.get_mut(b) {
                    batch.level = SEALED;
                }
            }
            return;
        };
        let new_id = self.fresh_id();
        let new_level = (level + 1).min(SEALED);
        let batch = Batch {
            cell: EntryCell::new(payload.into()),
            members,
            level: new_level,
            format,
        };
        // SAFETY: as in `register`.
        unsafe { descriptor::link(batch.cell.entry.get()) };
        for m in &batch.members {
            if let Some(member) = self.members.get_mut(m) {
                member.batch = new_id;
            }
        }
        for b in ids {
            if let Some(old) = self.batches.remove(&b) {
                // SAFETY: linked when created, unlinked only here or in `remove`, which also
                // takes it out of `batches`.
                unsafe { descriptor::unlink(old.cell.entry.get()) };
            }
        }
        self.batches.insert(new_id, batch);
        if new_level < SEALED {
            self.open_push(format, new_level, new_id);
        }
    }

    /// Unregisters member `id`: its entry is unlinked if it held nothing else, otherwise
    /// re-encoded without it (only that entry: one stop to drop it, one to read the new one).
    fn remove(&mut self, id: u64) {
        let Some(member) = self.members.get(&id) else {
            return;
        };
        let batch_id = member.batch;
        let Some(batch) = self.batches.get_mut(&batch_id) else {
            return;
        };
        batch.members.retain(|&m| m != id);
        if batch.members.is_empty() {
            let batch = self.batches.remove(&batch_id).expect("looked up above");
            // SAFETY: see `merge`.
            unsafe { descriptor::unlink(batch.cell.entry.get()) };
            if batch.level < SEALED {
                if let Some(open) = self.open.get_mut(&(batch.format as u8, batch.level)) {
                    open.retain(|&b| b != batch_id);
                }
            }
        } else {
            let (format, members) = (batch.format, batch.members.clone());
            // A subset of objects that encoded together encodes again; should it ever fail,
            // the object stays visible to the debugger (stale) rather than the list breaking.
            if let Ok(payload) = self.encode(format, &members) {
                let batch = self.batches.get_mut(&batch_id).expect("looked up above");
                let cell = EntryCell::new(payload.into());
                // SAFETY: the old cell is linked (see `merge`); the new one is boxed and owns
                // its payload, and replaces the old one in the batch right after.
                unsafe { descriptor::replace(batch.cell.entry.get(), cell.entry.get()) };
                batch.cell = cell;
            }
        }
        let member = self.members.remove(&id).expect("looked up above");
        member.live.store(0, Ordering::Release);
    }
}

impl Registration {
    /// This object's own encoded payload (a debugger entry may hold it together with other
    /// objects: see [`register`]).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Payload format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Number of functions registered by this handle.
    pub fn function_count(&self) -> usize {
        self.functions
    }
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
            .field("payload_bytes", &self.payload.len())
            .finish()
    }
}
