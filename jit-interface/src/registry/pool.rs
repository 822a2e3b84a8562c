//! Spare buffers kept for reuse: [`Pool`], and why each pool of the registry exists.
//!
//! Freeing a payload and allocating the next one of the same size costs more than it seems:
//! a large buffer comes back from the allocator as fresh, zeroed memory (page faults), and
//! many small ones make glibc's malloc sort its free lists. So the registry keeps a few
//! buffers it no longer links, each pool bounded so that it never holds more than a few
//! payloads' worth of memory:
//!
//! - **one-object ELF payloads** (`state::SPARE_PAYLOADS`, per thread, at most `2 * FAN_IN`
//!   buffers of at most 4 KiB): under a debugger every small ELF registration gets an entry
//!   of its own, and a merge unlinks `FAN_IN` of them at once; the thread's next
//!   registrations encode into those buffers. Per thread: encoding happens before the
//!   registry's lock is taken.
//! - **growing ELF payloads** (`State::spare_growing`, under the registry's lock, at most 2
//!   buffers of exactly `elf::GROWING_PAYLOAD` bytes): a growing batch rolled back or
//!   rebuilt at every unregistration would allocate (and zero) 256 KiB each time. Two: a
//!   batch sealed and rewritten gives back two (its payload and the rollbacks' mirror), and
//!   the next growing batch takes one when made and one at its first rollback.
//!
//! Buffers kept elsewhere are not pools, and stay as they are: the thread's scratch buffer
//! that compact records are encoded into (`register_in`: one, reused in place), the storage
//! of the object a thread dropped last (`model`: one, handed to the next `JitObject`), and
//! the mirror a growing payload keeps for its next rollback (`elf::Growing`: one per
//! payload). `pages::prefault_spare` keeps nothing: it faults in a buffer's fresh capacity.

/// At most `N` spare buffers. What a pool accepts (a size) is checked where buffers are
/// given back, next to the reason for it.
#[derive(Default)]
pub(super) struct Pool<const N: usize> {
    spare: Vec<Vec<u8>>,
}

impl<const N: usize> Pool<N> {
    pub(super) const fn new() -> Self {
        Pool { spare: Vec::new() }
    }

    /// A spare buffer, if one is kept (its contents are the old payload's).
    #[inline]
    pub(super) fn take(&mut self) -> Option<Vec<u8>> {
        self.spare.pop()
    }

    /// Keeps `buf` for reuse, or frees it if `N` are kept already.
    #[inline]
    pub(super) fn keep(&mut self, buf: Vec<u8>) {
        if self.spare.len() < N {
            self.spare.push(buf);
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.spare.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Pool;

    #[test]
    fn a_pool_keeps_at_most_its_bound() {
        let mut pool = Pool::<2>::new();
        assert!(pool.take().is_none());
        for n in 1..=3 {
            pool.keep(vec![n; 4]);
        }
        assert_eq!(pool.len(), 2, "the third was freed");
        assert_eq!(pool.take(), Some(vec![2; 4]));
        assert_eq!(pool.take(), Some(vec![1; 4]));
        assert_eq!(pool.take(), None);
    }
}
