//! Deferred mode: small compact registrations are appended in place even under a debugger,
//! small ELF ones get entries of their own linked without a stop (listed at once, so attach
//! and core files see them), and all are announced together: at `flush`, when `max_pending`
//! are pending, or `max_delay` after the oldest (a timer thread), one stop for many.

use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

use super::batch::Kind;
use super::quiet::OPEN_CAPACITY;
use super::route::{Context, DEFERRED};
use super::state::State;
use super::{jit_gdb_pending, Deferral, Format, REGISTRY};
use crate::descriptor::DebuggerList;

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
                    st.flush_now();
                    st
                }
            },
            None => TIMER_WAKE.wait(st).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

impl<L: DebuggerList> State<L> {
    /// Deferred mode on (`Some`) or off (`None`: what is pending is announced now).
    pub(super) fn set_deferral(&mut self, deferral: Option<Deferral>) {
        self.deferred = deferral.map(|d| Deferral {
            max_pending: d.max_pending.max(1),
            ..d
        });
        if L::PROCESS {
            DEFERRED.store(self.deferred.is_some(), Ordering::Relaxed);
        }
        if self.deferred.is_none() {
            self.flush_now();
        }
        if L::PROCESS {
            // The timer looks at the new settings.
            TIMER_WAKE.notify_all();
        }
    }

    /// A record was appended to `batch_id` in place while a debugger is attached (deferred
    /// mode): it is announced at the next flush.
    pub(super) fn note_pending(&mut self, batch_id: u64) {
        if let Some(b) = self.batches.get_mut(batch_id) {
            if b.pending == 0 {
                self.pending_batches.push(batch_id);
            }
            b.pending += 1;
            self.count_pending();
        }
    }

    /// A small ELF registration got entry `batch_id` of its own, linked but not announced
    /// (`Kind::Pending`): it is announced, merged with the others, at the next flush.
    pub(super) fn note_pending_entry(&mut self, batch_id: u64) {
        if let Some(b) = self.batches.get_mut(batch_id) {
            b.pending = 1;
            self.pending_elf.push(batch_id);
            self.count_pending();
        }
    }

    /// How many pending ELF entries there are.
    #[inline]
    pub(super) fn pending_entries(&self) -> usize {
        self.pending_elf.len()
    }

    /// One registration more is pending.
    fn count_pending(&mut self) {
        self.pending += 1;
        if self.pending_since.is_none() {
            self.pending_since = Some(Instant::now());
            // Only the process's registry has a timer (`timer_loop` flushes it).
            if L::PROCESS && self.deferred.is_some_and(|d| d.max_delay.is_some()) {
                // Started only now, under a debugger: a program that never has one
                // (or runs under valgrind) never gets the thread.
                start_timer();
            }
            // The timer sleeps until something is pending.
            if L::PROCESS {
                TIMER_WAKE.notify_all();
            }
        }
        self.publish_pending();
    }

    /// Announces what is pending if `max_pending` or `max_delay` is reached.
    pub(super) fn flush_if_due(&mut self, ctx: &Context) {
        let Some(d) = self.deferred else {
            return;
        };
        let late = || {
            d.max_delay
                .zip(self.pending_since)
                .is_some_and(|(delay, since)| since.elapsed() >= delay)
        };
        if self.pending >= d.max_pending || (self.pending > 0 && late()) {
            self.flush(ctx);
        }
    }

    /// `flush` in an operation of its own.
    pub(super) fn flush_now(&mut self) -> usize {
        let ctx = self.context();
        self.flush(&ctx)
    }

    /// Announces every pending batch (if a debugger is still attached: one that attached
    /// meanwhile read them on attach anyway). Returns how many registrations were pending.
    ///
    /// Pending ELF entries are merged into one new entry, announced (one stop), which joins
    /// the merge tree's level 1 as a merge of level-0 entries would; they are then unlinked
    /// silently: the debugger was never told about them. Without a debugger they stay as
    /// they are, as ordinary level-0 entries (a debugger that attaches reads them all).
    pub(super) fn flush(&mut self, ctx: &Context) -> usize {
        let n = self.pending;
        let entries = std::mem::take(&mut self.pending_elf);
        for &b in &entries {
            if let Some(b) = self.batches.get_mut(b) {
                b.pending = 0;
            }
        }
        if !entries.is_empty() {
            if ctx.attached {
                // Unlinks them silently (`unlink_batch`: they are `Kind::Pending`).
                self.merge(ctx, Format::Elf, 0, entries);
            } else {
                for b in entries {
                    if let Some(batch) = self.batches.get_mut(b) {
                        batch.kind = Kind::Merging { level: 0 };
                    }
                    self.level_push(ctx, Format::Elf, 0, b);
                }
            }
        }
        let batches = std::mem::take(&mut self.pending_batches);
        if n > 0 && ctx.attached {
            for b in batches {
                // The debugger reads the batch again, whole. A batch that is a quarter full
                // or more is sealed now, so no record is read more than about twice (GDB 13
                // keeps ~300 bytes for every function each time it reads one, freed
                // never), and entries stay at most 4 N / OPEN_CAPACITY records' worth.
                let keep_open = self
                    .batches
                    .get(b)
                    .is_some_and(|b| b.is_open() && b.buf.len() < OPEN_CAPACITY / 4);
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
        self.publish_pending();
        n
    }

    /// Forgets the pending records of a batch that is rewritten or unlinked (the debugger
    /// is told about it as a whole).
    pub(super) fn drop_pending(&mut self, batch_id: u64) {
        if let Some(b) = self.batches.get_mut(batch_id) {
            if b.pending > 0 {
                self.pending -= b.pending;
                b.pending = 0;
                self.pending_batches.retain(|&p| p != batch_id);
                self.pending_elf.retain(|&p| p != batch_id);
                if self.pending == 0 {
                    self.pending_since = None;
                }
                self.publish_pending();
            }
        }
    }

    /// Tells debugger scripts how many registrations are pending (`jit_gdb_pending`: the
    /// process's registry only).
    #[inline]
    fn publish_pending(&self) {
        if L::PROCESS {
            jit_gdb_pending.store(self.pending as u64, Ordering::Relaxed);
        }
    }
}
