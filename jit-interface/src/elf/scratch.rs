//! Storage kept between payloads: runtimes encode one object after another (and the
//! registry re-encodes batches), so the plan and the sections are built in the vectors the
//! previous payload left on this thread, and only the payload itself is a fresh allocation.

use std::cell::Cell;

use super::{cfi, dwarf, gdb_index, layout};

/// The storage of one encoding.
#[derive(Default)]
pub(super) struct Scratch {
    pub layout: layout::Parts,
    pub dwarf: dwarf::Parts,
    pub cfi: cfi::Parts,
    pub index: gdb_index::Parts,
}

/// Most bytes of storage a thread keeps: one huge payload must not keep its memory after
/// it is written.
const MAX_KEPT: usize = 4 << 20;

thread_local! {
    static SPARE: Cell<Option<Box<Scratch>>> = const { Cell::new(None) };
}

impl Scratch {
    /// The storage this thread kept, or new storage.
    pub fn take() -> Box<Scratch> {
        SPARE
            .try_with(Cell::take)
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Keeps `self` for the next encoding on this thread, unless it grew too large.
    pub fn keep(self: Box<Scratch>) {
        if self.layout.bytes() + self.dwarf.bytes() + self.cfi.bytes() + self.index.bytes()
            > MAX_KEPT
        {
            return;
        }
        // Nothing is kept by a thread that is exiting.
        let _ = SPARE.try_with(|spare| spare.set(Some(self)));
    }
}

/// The allocation of `v`, emptied, as a vector of `U`: a vector of borrowed views kept
/// between calls outlives what it borrowed, so it is kept empty and retyped. `T` and `U`
/// have the same size and alignment (views differing only in lifetimes), so collecting
/// in place reuses the allocation.
pub(super) fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().map(|_| unreachable!("emptied")).collect()
}

#[cfg(test)]
mod tests {
    use super::recycle;

    #[test]
    fn recycling_keeps_the_allocation() {
        let s = String::from("x");
        let mut v: Vec<&str> = Vec::with_capacity(100);
        v.push(&s);
        let ptr = v.as_ptr() as usize;
        let w: Vec<&'static str> = recycle(v);
        assert_eq!((w.len(), w.capacity(), w.as_ptr() as usize), (0, 100, ptr));
    }
}
