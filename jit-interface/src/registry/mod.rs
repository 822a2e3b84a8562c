//! Registration: encode an object, link it into GDB's list, unlink it when the handle drops.
//!
//! Two costs shape this module. Without a debugger, a registration should cost little more
//! than encoding. With GDB attached, every hook call is a stop (~0.3-0.5 ms), GDB's cost per
//! stop grows with the number of entries it holds, and attach walks all of them. So:
//!
//! - **No debugger** (the hook's first byte is not a breakpoint, see
//!   [`crate::descriptor::debugger_attached`]): compact records are appended in place to an open
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
//! debugger is attached, small ELF objects get entries of their own linked without a stop
//! (`Kind::Pending`; in the list at once, so attach and core files see them), and all are
//! announced together ([`flush`], or when `max_pending` registrations or `max_delay` are
//! reached), one stop for many: pending ELF entries are merged into one announced entry and
//! unlinked silently (the debugger never read them). Our GDB scripts (and so the `jit-gdb` launcher) announce
//! pending registrations whenever the program stops, through `jit_gdb_flush_for_debugger`.
//!
//! ## Layout
//!
//! - this file: the public API;
//! - `route`: the policy, pure functions of an operation's context (debugger attached,
//!   deferred mode, reader budget) and its input;
//! - `state`, `batch`: the slab of batches (debugger entries) and their kinds, the
//!   registered objects, their models and live slots; the state links its entries into a
//!   [`crate::descriptor::DebuggerList`]: the process's list, or (unit tests, `tests`) a
//!   list of a test's own that records what a debugger would have been told;
//! - `quiet`: compact batches appended to in place, tombstones;
//! - `growing`: growing ELF payloads (append, roll back, split an end off, rebuild by copies);
//! - `merge`: the merge tree under a debugger;
//! - `remove`: unregistration and rewrites;
//! - `deferred`: deferred mode and its timer thread;
//! - `pool`: the spare buffers kept for reuse, and why.

mod batch;
mod deferred;
mod growing;
mod merge;
mod pool;
mod quiet;
mod remove;
mod route;
mod state;
mod territory;
#[cfg(test)]
mod tests;
mod vector_state;
mod wanted;

use std::ops::DerefMut;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::Duration;

use self::batch::{EntryCell, Kind, Place, Slot};
use self::route::{Context, Path, Route, Shape};
use self::state::{offset32, spare_payload, State};
use crate::descriptor::DebuggerList;
use crate::error::{PayloadFormat, Result};
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
        PayloadFormat::from(self).name()
    }
}

impl From<Format> for PayloadFormat {
    fn from(format: Format) -> PayloadFormat {
        match format {
            Format::Compact => PayloadFormat::Compact,
            Format::Elf => PayloadFormat::Elf,
        }
    }
}

static REGISTRY: OnceLock<Mutex<State>> = OnceLock::new();

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
#[must_use = "dropping a Registration unregisters the object at once: keep it while the code can run"]
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
    let (id, functions, payload_len) =
        register_in(Context::for_registration(object), registry, object, format)?;
    // Profiler outputs (perf map, jitdump) never fail the registration.
    crate::perf::registered(object);
    Ok(Registration {
        id,
        format,
        functions,
        payload_len: payload_len as u64,
    })
}

/// A registration but its handle, in the registry `lock` gives (taken once `object` is
/// encoded), routed in `ctx`: returns its member index, its number of functions and its own
/// payload's size. The process's registry, or a unit test's over a list of its own.
#[inline]
fn register_in<L: DebuggerList, S: DerefMut<Target = State<L>>>(
    mut ctx: Context,
    lock: impl FnOnce() -> S,
    object: &JitObject,
    format: Format,
) -> Result<(u32, u32, usize)> {
    thread_local! {
        /// Compact records are encoded here, then copied into their batch: no allocation per
        /// registration for the record.
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    // Validated by the encoders (first thing they do), not twice here.
    let functions = object.functions().len();
    let arch = object.arch();
    let route = route::route(
        &ctx,
        &Shape {
            format,
            functions,
            growable: format == Format::Elf && arch == Arch::X86_64 && growing::lossless(object),
        },
    );
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        // Encode before taking the lock: registrations from several threads encode in
        // parallel.
        let own = encode(object, format, &route, ctx.attached, &mut scratch)?;
        let functions32 = u32::try_from(functions).map_err(|_| crate::Error::Unsupported {
            format: format.into(),
            why: format!("{functions} functions in one object"),
        })?;
        let (id, payload_len) = lock().place(&mut ctx, &route, object, &mut scratch, own)?;
        Ok((id, functions32, payload_len))
    })
}

/// What a registration encodes before taking the lock, besides its compact record (in the
/// caller's scratch buffer).
struct Encoded {
    /// The ELF payload of an entry of its own.
    elf: Option<Vec<u8>>,
    /// The model it keeps.
    model: Option<Arc<JitObject>>,
    /// Its own bytes: the compact record, or the ELF payload (checked: 32-bit).
    own_len: u32,
    /// Its own payload's size (`Registration::payload_len`).
    payload_len: usize,
    /// The sections of its own ELF payload that span gaps between its functions.
    spanning: Vec<(u64, u64)>,
}

/// Encodes a registration's own bytes before it takes the lock: its compact record (into
/// `scratch`), or the ELF payload of an entry of its own.
#[inline]
fn encode(
    object: &JitObject,
    format: Format,
    route: &Route,
    attached: bool,
    scratch: &mut Vec<u8>,
) -> Result<Encoded> {
    // The slot is assigned under the lock; its address and key are patched in.
    let placeholder = LiveCheck { address: 0, key: 1 };
    let mut spanning = Vec::new();
    let (elf, model) = match (route.encoding, route.path) {
        (Format::Compact, _) => {
            scratch.clear();
            crate::format::encode_record(scratch, object, Some(placeholder))?;
            // Compact records have no call sites, but the ELF batches a small object is
            // merged into under a debugger can: an object that declares some keeps its
            // model for them (the others' models are decoded from their records).
            let calls =
                !route.entry.alone && object.functions().iter().any(|f| !f.calls().is_empty());
            (None, calls.then(|| Arc::new(object.clone())))
        }
        (Format::Elf, Path::Grow) => {
            // A plain object (one function with lines: what runtimes registering one by
            // one mostly have) is read back from the payload when needed, and the ELF
            // encoder validates it under the lock. Others keep their compact record;
            // encoding it validates them, as the ELF encoder would (the same checks).
            scratch.clear();
            if !growing::maybe_plain(object) {
                crate::format::encode_record(scratch, object, None)?;
            }
            (None, None)
        }
        (Format::Elf, _) => {
            if format == Format::Compact {
                // Refused exactly when it would be without a debugger (e.g. variables).
                scratch.clear();
                crate::format::encode_record(scratch, object, Some(placeholder))?;
            }
            // Big objects keep an entry of their own, never merged or rewritten: no model.
            let model = (!route.entry.alone).then(|| Arc::new(object.clone()));
            // The gaps between one object's functions are taken to be its own (checked under
            // the lock against the other live objects: `State::place`).
            let spans = if !territory::spans_gaps(attached) {
                crate::elf::Spans::Padding
            } else {
                crate::elf::Spans::Free(&|_, _| true)
            };
            let payload = crate::elf::encode_objects_spanning(
                object.arch(),
                &[object],
                spare_payload(),
                spans,
                &mut spanning,
            )?;
            (Some(payload), model)
        }
    };
    let own_len = elf.as_ref().map_or(scratch.len(), Vec::len);
    // Checked before any change of state: a slot's offsets are 32-bit.
    Ok(Encoded {
        own_len: offset32(own_len, route.encoding)?,
        payload_len: match route.encoding {
            Format::Compact => crate::format::HEADER_LEN + own_len,
            Format::Elf => own_len,
        },
        elf,
        model,
        spanning,
    })
}

/// The extent of `object`'s code: its first function's start to its last function's end.
#[inline]
fn extent(object: &JitObject) -> (u64, u64) {
    object
        .functions()
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), f| {
            (lo.min(f.start()), hi.max(f.end()))
        })
}

impl<L: DebuggerList> State<L> {
    /// Puts a registration of `object` (its compact `record`, live check to be patched in,
    /// and what else was encoded) where `route` says: in place if there is room, else in
    /// an entry of its own, merged with others. Returns its member index and its own
    /// payload's size.
    #[inline]
    fn place(
        &mut self,
        ctx: &mut Context,
        route: &Route,
        object: &JitObject,
        record: &mut [u8],
        mut own: Encoded,
    ) -> Result<(u32, usize)> {
        // Entries whose sections span a gap this code lies in: re-encoded below, once it is
        // registered; one that cannot be re-encoded refuses the registration.
        let (lo, hi) = extent(object);
        let mut spanned = Vec::new();
        self.territory.spanned(lo, hi, &mut spanned);
        if let Some(&(_, span)) = spanned.iter().find(|(b, _)| !self.can_reencode(*b)) {
            return Err(crate::Error::InsideGap { address: lo, span });
        }
        if !own.spanning.is_empty()
            && own
                .spanning
                .iter()
                .any(|&(s, e)| !self.territory.free(s, e, |_| false))
        {
            // Other live code lies between this object's functions: its sections stop there.
            self.reencode_own(object, &mut own)?;
        }
        if !ctx.attached && self.pending_entries() > 0 {
            // Pending ELF entries, but no debugger now: the one that deferred them went
            // away. They become ordinary entries before one attaches and reads them (see
            // `State::flush`), so that none is unlinked silently under a debugger that read it.
            self.flush(ctx);
        }
        let id = self.new_member(own.model.take())?;
        if route.encoding == Format::Compact {
            let key = self.fresh_live_key();
            let slot = self.live.get(id as usize);
            slot.store(key, Ordering::Release);
            let address = slot as *const AtomicU64 as u64;
            crate::format::patch_live_check(record, LiveCheck { address, key });
        }
        let arch = object.arch();
        let mut quiet = false;
        let placed = match route.path {
            Path::InPlace if route::fits_in_place(record.len()) => {
                quiet = true;
                Some(self.append_quietly(ctx, id, arch, record))
            }
            Path::Grow => match self.append_growing(ctx, id, object, record) {
                Ok(Some((batch_id, bytes))) => {
                    own.payload_len = bytes;
                    self.grown += 1;
                    Some(batch_id)
                }
                // No room even in a new payload: an entry of its own, which needs the
                // payload and the model.
                Ok(None) => match encode_alone(object) {
                    Ok((len, payload)) => {
                        own.payload_len = payload.len();
                        own.own_len = len;
                        own.elf = Some(payload);
                        self.set_model(id, Some(Arc::new(object.clone())));
                        None
                    }
                    Err(e) => {
                        self.release(id);
                        return Err(e);
                    }
                },
                Err(e) => {
                    self.release(id);
                    return Err(e);
                }
            },
            Path::InPlace | Path::Entry | Path::Pending => None,
        };
        let functions = object.functions().len();
        let batch_id = match placed {
            Some(batch_id) => batch_id,
            None => self.link_own(route, id, arch, functions, record, own.elf, own.own_len),
        };
        self.join(id, batch_id);
        self.territory.add(id, lo, hi);
        if placed.is_none() && !own.spanning.is_empty() {
            self.territory.set_spans(batch_id, &own.spanning);
        }
        for (b, _) in spanned {
            if b != batch_id {
                self.rewrite(ctx, b);
            }
        }
        let pending = placed.is_none() && route.path == Path::Pending;
        if pending {
            self.note_pending_entry(batch_id);
        } else if placed.is_none() && !route.entry.alone {
            if route.entry.merge_waiting_compact {
                self.merge_waiting(ctx, Format::Compact, 0);
            }
            self.level_push(ctx, route.encoding, 0, batch_id);
        }
        if quiet || pending {
            self.flush_if_due(ctx);
        }
        Ok((id, own.payload_len))
    }
}

impl<L: DebuggerList> State<L> {
    /// Can batch `batch_id` be re-encoded (every member has a model, or the batch keeps
    /// their records)? Objects alone in their entry for good keep neither.
    fn can_reencode(&self, batch_id: u64) -> bool {
        self.batches.get(batch_id).is_some_and(|b| {
            !b.records.is_empty() || b.members.iter().all(|s| self.model_of(s.id).is_some())
        })
    }

    /// Encodes `own`'s ELF payload again, its sections spanning only the gaps no other live
    /// object's code touches.
    #[cold]
    fn reencode_own(&self, object: &JitObject, own: &mut Encoded) -> Result<()> {
        let free = |lo: u64, hi: u64| self.territory.free(lo, hi, |_| false);
        own.spanning.clear();
        let payload = crate::elf::encode_objects_spanning(
            object.arch(),
            &[object],
            spare_payload(),
            crate::elf::Spans::Free(&free),
            &mut own.spanning,
        )?;
        own.own_len = offset32(payload.len(), Format::Elf)?;
        own.payload_len = payload.len();
        own.elf = Some(payload);
        Ok(())
    }
}

/// The ELF payload of `object` alone, and its length.
#[cold]
fn encode_alone(object: &JitObject) -> Result<(u32, Vec<u8>)> {
    let payload = crate::elf::encode_objects_into(object.arch(), &[object], spare_payload())?;
    Ok((offset32(payload.len(), Format::Elf)?, payload))
}

impl<L: DebuggerList> State<L> {
    /// Links an entry of member `id`'s own: its compact `record`, or its `elf` payload, whose
    /// last `own_len` bytes are the member's. The caller merges it.
    #[allow(clippy::too_many_arguments)]
    fn link_own(
        &mut self,
        route: &Route,
        id: u32,
        arch: Arch,
        functions: usize,
        record: &[u8],
        elf: Option<Vec<u8>>,
        own_len: u32,
    ) -> u64 {
        if route.entry.close_open {
            self.close_open_batches();
        }
        // Allocated before the payload: see `Batch::cell`.
        let cell = EntryCell::new();
        let buf = match route.encoding {
            Format::Compact => {
                let len = crate::format::HEADER_LEN + record.len();
                let mut buf = Vec::with_capacity(len);
                crate::pages::prefault_spare(&mut buf, len);
                buf.extend_from_slice(&crate::format::header(arch));
                buf.extend_from_slice(record);
                buf
            }
            Format::Elf => elf.unwrap_or_default(),
        };
        // The member's bytes end the payload, after a compact header (or nothing, for ELF).
        let at = buf.len().saturating_sub(own_len as usize) as u32;
        let slot = Slot {
            id,
            place: Place::bytes(at, own_len),
        };
        let kind = if route.entry.alone {
            Kind::Sealed
        } else if route.path == Path::Pending {
            Kind::Pending
        } else {
            Kind::Merging { level: 0 }
        };
        if route.entry.read_by_reader {
            self.count_read_by_reader(functions);
        }
        self.link_new(cell, route.encoding, kind, buf, vec![slot])
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

/// Turns deferred mode on (`Some`) or off (`None`: pending registrations are announced
/// now). In deferred mode small registrations never stop the process: compact ones are
/// appended in place to a batch entry, ELF ones get an entry of their own that is linked but
/// not announced (GDB reads ELF payloads lazily from memory, so one it was told about is
/// never changed); either way they are listed at once (attach and core files see them) and
/// an attached debugger reads them at the next announcement, pending ELF entries merged into
/// one (one stop, one resolution of every breakpoint, for the whole group). Objects of 64
/// functions or more are announced at once as usual.
/// While our GDB scripts have a `jit break` request (or the user a pending GDB breakpoint)
/// waiting, a registration that defines a name it waits for is announced at once (the
/// exported statics `jit_gdb_wanted_names` and `jit_gdb_wanted_len`); a request by regular
/// expression suspends deferral (the exported static `jit_gdb_announce_each`).
pub fn set_deferred(deferral: Option<Deferral>) {
    // Keeps the debugger's entry point in the executable when deferred mode is used.
    std::hint::black_box(jit_gdb_flush_for_debugger as extern "C" fn() -> i64);
    vector_state::prepare();
    registry().set_deferral(deferral);
}

/// How many deferred registrations an attached debugger has not been told about yet.
pub fn pending() -> usize {
    jit_gdb_pending.load(Ordering::Relaxed) as usize
}

/// Announces pending deferred registrations to an attached debugger (one stop per batch
/// entry holding some); returns how many registrations were pending.
pub fn flush() -> usize {
    registry().flush_now()
}

/// Registrations not yet announced to an attached debugger, for debugger scripts: our GDB
/// extension reads it at every stop and, when nonzero, calls [`jit_gdb_flush_for_debugger`].
#[no_mangle]
#[used]
pub static jit_gdb_pending: AtomicU64 = AtomicU64::new(0);

/// Set by debugger scripts while a `jit break` request by regular expression waits for a
/// function to be registered: deferred mode then announces every registration at once (as
/// outside it), so that the request sees new code before the code can run. Our GDB scripts
/// set and clear it. (Requests by plain name go to `jit_gdb_wanted_names`: only the
/// registrations that define one are announced at once.)
#[no_mangle]
#[used]
pub static jit_gdb_announce_each: AtomicBool = AtomicBool::new(false);

/// How many times [`jit_gdb_flush_for_debugger`] has returned, and what it returned last:
/// debugger scripts read them when the debugger reports an error after the call (GDB 13
/// cannot write the vector registers back on CPUs with AMX state, and says so after the
/// call ran).
#[no_mangle]
#[used]
pub static jit_gdb_flush_calls: AtomicU64 = AtomicU64::new(0);
#[no_mangle]
#[used]
pub static jit_gdb_flush_result: AtomicI64 = AtomicI64::new(0);

/// For debugger scripts, called from the debugger while the process is stopped: announces
/// pending deferred registrations, unless the registry is busy (a thread was stopped inside
/// it: then nothing happens and -1 is returned, rather than a deadlock). Returns how many
/// were announced. The calling thread's vector registers are saved and restored around it:
/// the program goes on with the values it had, whatever the debugger manages to restore
/// (GDB 13 cannot write them back on CPUs with AMX state).
#[no_mangle]
pub extern "C" fn jit_gdb_flush_for_debugger() -> i64 {
    // Nothing else here: the guard's assembly must run before any code that may use vector
    // registers.
    vector_state::guarded(flush_for_debugger_unguarded)
}

extern "C" fn flush_for_debugger_unguarded() -> i64 {
    // A panic must not unwind into the debugger's inferior call: -1, as when busy.
    let n = std::panic::catch_unwind(|| {
        let lock = REGISTRY.get_or_init(Mutex::default);
        match lock.try_lock() {
            Ok(mut st) => st.flush_now() as i64,
            Err(TryLockError::Poisoned(e)) => e.into_inner().flush_now() as i64,
            Err(TryLockError::WouldBlock) => -1,
        }
    })
    .unwrap_or(-1);
    jit_gdb_flush_result.store(n, Ordering::Relaxed);
    jit_gdb_flush_calls.fetch_add(1, Ordering::Release);
    n
}
