//! The policy: where a registration goes and how an unregistration rewrites its batch,
//! decided by pure functions ([`route`], [`removal`]) from a [`Context`] read once per
//! operation, so that each decision can be read, and tested, in one place.
//!
//! The context is read at the start of an operation (a registration reads it before
//! encoding, outside the registry's lock, so that registrations encode in parallel). After a
//! change made in place without a stop (an append, a tombstone), the hook is looked at again
//! ([`attached_meanwhile`]): a debugger that attached since may have read the entry before
//! the change, and must be told before the call returns. That second look only ever turns
//! `attached` on.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::growing::{PEEL, PEEL_MAX};
use super::quiet::OPEN_RECORD_MAX;
use super::Format;
use crate::descriptor::{self, DebuggerList};
use crate::model::JitObject;

/// Objects with at least this many functions get a debugger entry of their own for good:
/// they register in one stop and are never copied or re-encoded.
pub(super) const BIG_OBJECT: usize = 64;

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

pub(super) fn reader_budget() -> usize {
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

/// Mirrors `State::read_by_reader` of the process's registry, for a registration's context,
/// read before it takes the lock.
static READ_BY_READER: AtomicUsize = AtomicUsize::new(0);

/// `functions` more were announced in small compact entries of their own (the process's
/// registry: see `State::count_read_by_reader`).
#[inline]
pub(super) fn read_by_reader(functions: usize) {
    READ_BY_READER.fetch_add(functions, Ordering::Relaxed);
}

/// Mirrors `State::deferred.is_some()` (both written under the registry's lock), for a
/// registration's context, read before it takes the lock.
pub(super) static DEFERRED: AtomicBool = AtomicBool::new(false);

/// What an operation's decisions depend on besides its own input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Context {
    /// A debugger watches the hook (the state's list says so: `DebuggerList::attached`,
    /// for the process's list [`descriptor::debugger_attached`]).
    pub(super) attached: bool,
    /// Deferred mode is on ([`super::set_deferred`]).
    pub(super) deferred: bool,
    /// Small compact registrations made an attached debugger read `READER_BUDGET`
    /// functions through its reader interface (registrations only).
    pub(super) budget_spent: bool,
}

impl Context {
    /// The context of an operation under the registry's lock (see `State::context`).
    #[inline]
    pub(super) fn read(attached: bool, deferred: bool) -> Context {
        Context {
            attached,
            deferred,
            budget_spent: false,
        }
    }

    /// The context of a registration of `object` to the process's registry, before it
    /// takes the lock.
    #[inline]
    pub(super) fn for_registration(object: &JitObject) -> Context {
        Context {
            budget_spent: READ_BY_READER.load(Ordering::Relaxed) >= reader_budget(),
            ..Context::read(
                descriptor::debugger_attached(),
                // A debugger's `jit break` waiting for a function needs that registration
                // announced before its code runs: every one for a pattern, the ones that
                // define a name it waits for otherwise (`wanted`).
                DEFERRED.load(Ordering::Relaxed)
                    && !super::jit_gdb_announce_each.load(Ordering::Relaxed)
                    && !super::wanted::wanted(object),
            )
        }
    }
}

/// Looks at `list`'s hook again after a change made in place without a stop: true if a
/// debugger is attached now, which `ctx` then says from here on.
#[inline]
pub(super) fn attached_meanwhile(list: &impl DebuggerList, ctx: &mut Context) -> bool {
    let attached = list.attached();
    ctx.attached |= attached;
    attached
}

/// What routing needs to know of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shape {
    /// The format asked for.
    pub(super) format: Format,
    pub(super) functions: usize,
    /// An x86-64 object whose compact record carries it whole (`growing::lossless`): one a
    /// growing ELF payload can take (only looked at for ELF).
    pub(super) growable: bool,
}

/// Where a registration goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Route {
    /// The payload format its own bytes are encoded in: the one asked for, or ELF for a
    /// small compact object under a debugger once the reader budget is spent.
    pub(super) encoding: Format,
    pub(super) path: Path,
    /// The entry of its own it gets on `Path::Entry`, or when an in-place path cannot take
    /// it (a record too large for an open batch, an object no growing payload has room for).
    pub(super) entry: Entry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Path {
    /// Appended in place to its architecture's open compact batch (`quiet`): no stop; in
    /// deferred mode under a debugger, announced at the next flush.
    InPlace,
    /// Appended in place to the growing ELF payload (`growing`): no stop.
    Grow,
    /// An entry of its own, linked now: one stop under a debugger.
    Entry,
    /// An ELF entry of its own, linked now without a stop (deferred mode under a debugger):
    /// merged with the other pending ones into one announced entry at the next flush.
    Pending,
}

/// An entry of a registration's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    /// Alone for good (a big object), else merged `FAN_IN` at a time.
    pub(super) alone: bool,
    /// A debugger is attached outside deferred mode: open batches stop growing in place.
    pub(super) close_open: bool,
    /// A small compact entry under a debugger: counts against the reader budget.
    pub(super) read_by_reader: bool,
    /// The reader budget was spent with this registration (announced as ELF although asked
    /// as compact): compact entries still waiting for a merge would wait for good (no more
    /// join them), so they go into one ELF batch now (one stop, once).
    pub(super) merge_waiting_compact: bool,
}

/// Where a registration of `object` goes in `ctx`.
///
/// Without a debugger (or in deferred mode) a small compact object is appended in place;
/// without one, a small ELF object that a growing payload can take is appended to it. Under
/// a debugger (outside deferred mode) a small object gets an entry of its own, read at once,
/// merged `FAN_IN` at a time; once the reader budget is spent, a compact one is announced
/// as ELF there. In deferred mode under a debugger a small ELF object gets an entry of its
/// own linked without a stop, announced merged with the others at the next flush. Big
/// objects get an entry of their own for good.
#[inline]
pub(super) fn route(ctx: &Context, object: &Shape) -> Route {
    let small = object.functions < BIG_OBJECT;
    let encoding = if object.format == Format::Compact
        && small
        && !ctx.deferred
        && ctx.budget_spent
        && ctx.attached
    {
        Format::Elf
    } else {
        object.format
    };
    let path = if object.format == Format::Elf && small && object.growable && !ctx.attached {
        Path::Grow
    } else if encoding == Format::Compact && small && (!ctx.attached || ctx.deferred) {
        Path::InPlace
    } else if encoding == Format::Elf && small && ctx.attached && ctx.deferred {
        Path::Pending
    } else {
        Path::Entry
    };
    Route {
        encoding,
        path,
        entry: Entry {
            alone: !small,
            close_open: ctx.attached && !ctx.deferred,
            read_by_reader: encoding == Format::Compact && small && ctx.attached,
            merge_waiting_compact: encoding != object.format,
        },
    }
}

/// Can a compact record of `len` bytes go into an open batch?
#[inline]
pub(super) fn fits_in_place(len: usize) -> bool {
    len <= OPEN_RECORD_MAX
}

/// A batch that members are leaving, as it is once they are out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Leaving {
    pub(super) format: Format,
    /// It waits in the merge tree.
    pub(super) merging: bool,
    /// It has a growing payload's state (the growing batch or the retired one).
    pub(super) growing: bool,
    /// It is the growing batch (`State::growing`).
    pub(super) the_growing_batch: bool,
    /// Members left.
    pub(super) left: usize,
    /// Where the member that left was, in append order, if only one did.
    pub(super) pos: Option<usize>,
    /// Peeled ends linked (`State::peeled`).
    pub(super) peeled: usize,
}

/// How a batch is rewritten when members leave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Removal {
    /// It held nothing else: unlinked.
    Unlink,
    /// A compact batch without a debugger: the records stay, as tombstones (`quiet`).
    Tombstone,
    /// Rewritten without them: by rolling the growing payload back (`regrow`) if
    /// `roll_back`, else by splitting its end off (`peel`) if `peel`, else whole.
    Rewrite { roll_back: bool, peel: bool },
}

/// How the batch `leaving` describes is rewritten in `ctx`.
#[inline]
pub(super) fn removal(ctx: &Context, leaving: &Leaving) -> Removal {
    if leaving.left == 0 {
        return Removal::Unlink;
    }
    if leaving.format == Format::Compact && !ctx.attached {
        return Removal::Tombstone;
    }
    let Some(pos) = leaving.pos else {
        return Removal::Rewrite {
            roll_back: false,
            peel: false,
        };
    };
    // A retired batch rolls back its recent objects only: appending most of a full
    // payload again costs more than encoding it (and an end is peeled below).
    let recent = leaving.the_growing_batch || leaving.left - pos < PEEL;
    Removal::Rewrite {
        roll_back: leaving.growing && recent && !ctx.attached,
        peel: leaving.format == Format::Elf
            && !leaving.merging
            && leaving.left >= 2 * PEEL
            && (pos == 0 || pos == leaving.left)
            && leaving.peeled < PEEL_MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ELF: Format = Format::Elf;
    const COMPACT: Format = Format::Compact;

    fn ctx(attached: bool, deferred: bool, budget_spent: bool) -> Context {
        Context {
            attached,
            deferred,
            budget_spent,
        }
    }

    fn shape(format: Format, functions: usize, growable: bool) -> Shape {
        Shape {
            format,
            functions,
            growable,
        }
    }

    #[test]
    fn registrations_are_routed_by_context_and_shape() {
        use Path::*;
        // (attached, deferred, budget spent), (format, functions, growable) ->
        // (encoding, path, alone, close_open, read_by_reader, merge_waiting_compact)
        #[rustfmt::skip]
        let table = [
            // No debugger: small objects in place, big ones alone.
            ((false, false, false), (COMPACT, 1, false), (COMPACT, InPlace, false, false, false, false)),
            ((false, false, true), (COMPACT, 1, false), (COMPACT, InPlace, false, false, false, false)),
            ((false, false, false), (COMPACT, 64, false), (COMPACT, Entry, true, false, false, false)),
            ((false, false, false), (ELF, 1, true), (ELF, Grow, false, false, false, false)),
            ((false, false, false), (ELF, 63, true), (ELF, Grow, false, false, false, false)),
            ((false, false, false), (ELF, 64, true), (ELF, Entry, true, false, false, false)),
            // Not growable (call sites, sources, another architecture): merged.
            ((false, false, false), (ELF, 1, false), (ELF, Entry, false, false, false, false)),
            // A debugger: entries of their own, merged; compact ones read by the reader.
            ((true, false, false), (COMPACT, 1, false), (COMPACT, Entry, false, true, true, false)),
            ((true, false, false), (COMPACT, 64, false), (COMPACT, Entry, true, true, false, false)),
            ((true, false, false), (ELF, 1, true), (ELF, Entry, false, true, false, false)),
            ((true, false, false), (ELF, 64, true), (ELF, Entry, true, true, false, false)),
            // The reader budget spent: small compact objects as ELF.
            ((true, false, true), (COMPACT, 1, false), (ELF, Entry, false, true, false, true)),
            ((true, false, true), (COMPACT, 64, false), (COMPACT, Entry, true, true, false, false)),
            ((true, false, true), (ELF, 1, true), (ELF, Entry, false, true, false, false)),
            // Deferred mode: small compact objects in place even under a debugger.
            ((true, true, false), (COMPACT, 1, false), (COMPACT, InPlace, false, false, true, false)),
            ((true, true, true), (COMPACT, 1, false), (COMPACT, InPlace, false, false, true, false)),
            ((true, true, false), (COMPACT, 64, false), (COMPACT, Entry, true, false, false, false)),
            // ... and small ELF objects pending (linked, announced at the next flush).
            ((true, true, false), (ELF, 1, true), (ELF, Pending, false, false, false, false)),
            ((true, true, false), (ELF, 63, false), (ELF, Pending, false, false, false, false)),
            ((true, true, true), (ELF, 1, true), (ELF, Pending, false, false, false, false)),
            ((true, true, false), (ELF, 64, true), (ELF, Entry, true, false, false, false)),
            ((false, true, false), (COMPACT, 1, false), (COMPACT, InPlace, false, false, false, false)),
            ((false, true, false), (ELF, 1, true), (ELF, Grow, false, false, false, false)),
        ];
        for ((a, d, b), (format, functions, growable), want) in table {
            let (encoding, path, alone, close_open, read_by_reader, merge_waiting_compact) = want;
            let got = route(&ctx(a, d, b), &shape(format, functions, growable));
            let want = Route {
                encoding,
                path,
                entry: super::Entry {
                    alone,
                    close_open,
                    read_by_reader,
                    merge_waiting_compact,
                },
            };
            assert_eq!(
                got, want,
                "attached {a}, deferred {d}, budget spent {b}, {format:?} x{functions} growable {growable}"
            );
        }
    }

    #[test]
    fn records_too_large_for_an_open_batch_get_an_entry() {
        assert!(fits_in_place(OPEN_RECORD_MAX));
        assert!(!fits_in_place(OPEN_RECORD_MAX + 1));
    }

    fn leaving(format: Format, left: usize, pos: Option<usize>) -> Leaving {
        Leaving {
            format,
            merging: false,
            growing: false,
            the_growing_batch: false,
            left,
            pos,
            peeled: 0,
        }
    }

    #[test]
    fn removals_are_routed_by_context_and_batch() {
        let quiet = ctx(false, false, false);
        let attached = ctx(true, false, false);
        let rewrite = |roll_back, peel| Removal::Rewrite { roll_back, peel };
        let growing = |l: Leaving, current| Leaving {
            growing: true,
            the_growing_batch: current,
            ..l
        };
        #[rustfmt::skip]
        let table = [
            // Nothing left: unlinked, whatever else.
            (attached, leaving(ELF, 0, Some(0)), Removal::Unlink),
            (quiet, leaving(COMPACT, 0, None), Removal::Unlink),
            // Compact without a debugger: a tombstone; with one, a rewrite.
            (quiet, leaving(COMPACT, 500, Some(0)), Removal::Tombstone),
            (quiet, leaving(COMPACT, 500, None), Removal::Tombstone),
            (attached, leaving(COMPACT, 500, Some(0)), rewrite(false, false)),
            // ELF: an end of a large sealed batch is peeled, also under a debugger.
            (quiet, leaving(ELF, 500, Some(0)), rewrite(false, true)),
            (quiet, leaving(ELF, 500, Some(500)), rewrite(false, true)),
            (attached, leaving(ELF, 500, Some(500)), rewrite(false, true)),
            (quiet, leaving(ELF, 500, Some(250)), rewrite(false, false)),
            (quiet, leaving(ELF, 2 * PEEL - 1, Some(0)), rewrite(false, false)),
            (quiet, leaving(ELF, 2 * PEEL, Some(0)), rewrite(false, true)),
            (quiet, Leaving { merging: true, ..leaving(ELF, 500, Some(0)) }, rewrite(false, false)),
            (quiet, Leaving { peeled: PEEL_MAX, ..leaving(ELF, 500, Some(0)) }, rewrite(false, false)),
            (quiet, leaving(ELF, 500, None), rewrite(false, false)),
            // Growing payloads roll back recent objects, without a debugger only; the growing
            // batch any object, the retired one those less than PEEL from its end.
            (quiet, growing(leaving(ELF, 500, Some(250)), true), rewrite(true, false)),
            (quiet, growing(leaving(ELF, 500, Some(250)), false), rewrite(false, false)),
            (quiet, growing(leaving(ELF, 500, Some(500 - PEEL + 1)), false), rewrite(true, false)),
            (quiet, growing(leaving(ELF, 500, Some(500)), false), rewrite(true, true)),
            (attached, growing(leaving(ELF, 500, Some(250)), true), rewrite(false, false)),
            (quiet, growing(leaving(ELF, 500, None), true), rewrite(false, false)),
        ];
        for (ctx, leaving, want) in table {
            assert_eq!(removal(&ctx, &leaving), want, "{ctx:?} {leaving:?}");
        }
    }
}
