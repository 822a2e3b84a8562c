//! Faulting in fresh memory before writing a large payload into it.
//!
//! A payload of 1,000 functions is about 80 KiB of memory no one touched before, 20 page
//! faults, and on virtual machines a page fault costs a few microseconds: about a third of
//! registering such an object. Asking the kernel for the pages in one call
//! (`MADV_POPULATE_WRITE`, Linux 5.14) costs the same zeroing without a trap per page:
//! about 8 ns per function less at 1,000 functions per object (docs/PERFORMANCE.md).
//! The contents are left as they are; on kernels without it, or elsewhere, nothing is done.

/// Below this, one call costs about what it saves.
const MIN_BYTES: usize = 32 * 1024;

/// Faults in the pages of `buf`'s spare capacity that its next `len` bytes will take.
pub(crate) fn prefault_spare(buf: &mut Vec<u8>, len: usize) {
    let spare = buf.spare_capacity_mut();
    let len = len.min(spare.len());
    populate(spare.as_mut_ptr().cast::<u8>(), len);
}

/// The kernel gave up on populating pages: an older kernel (EINVAL), or memory it will not
/// populate. Not asked again.
#[cfg(target_os = "linux")]
static UNAVAILABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True if the whole pages of the `len` bytes at `start` were faulted in.
#[cfg(target_os = "linux")]
fn populate(start: *mut u8, len: usize) -> bool {
    use std::sync::atomic::Ordering;
    if len < MIN_BYTES || UNAVAILABLE.load(Ordering::Relaxed) {
        return false;
    }
    const PAGE: usize = 4096;
    // Whole pages only: the partial pages at either end are shared with other allocations.
    let first = (start as usize).next_multiple_of(PAGE);
    let end = (start as usize + len) & !(PAGE - 1);
    if end <= first {
        return false;
    }
    // SAFETY: [first, end) lies within the `len` bytes at `start`, memory the caller holds
    // by a unique borrow. MADV_POPULATE_WRITE only maps its pages in as a write would: it
    // reads or changes no byte, and fails (without effect) on kernels that lack it.
    let failed = unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            end - first,
            libc::MADV_POPULATE_WRITE,
        )
    } != 0;
    if failed {
        UNAVAILABLE.store(true, Ordering::Relaxed);
    }
    !failed
}

#[cfg(not(target_os = "linux"))]
fn populate(_start: *mut u8, _len: usize) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Minor page faults of the calling thread so far.
    fn minor_faults() -> i64 {
        // SAFETY: `getrusage` writes one `rusage` into the zeroed one given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above; RUSAGE_THREAD counts this thread only (the harness runs others).
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
        assert_eq!(rc, 0, "getrusage");
        usage.ru_minflt
    }

    #[test]
    fn prefaulted_memory_is_written_without_faults() {
        const LEN: usize = 4 << 20;
        const PAGES: i64 = (LEN / 4096) as i64;
        // A fresh mapping: memory from the allocator may have been touched already.
        // SAFETY: an anonymous private mapping of LEN bytes, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        // SAFETY: the mapping is LEN bytes, readable and writable, and only this test has it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), LEN) };
        let before = minor_faults();
        let done = populate(bytes.as_mut_ptr(), LEN);
        let populated = minor_faults() - before;
        let before = minor_faults();
        bytes.fill(0xa5);
        let faults = minor_faults() - before;
        // SAFETY: the mapping made above, no longer borrowed.
        unsafe { libc::munmap(p, LEN) };
        if !done {
            eprintln!("MADV_POPULATE_WRITE is not available on this kernel: nothing to check");
            return;
        }
        assert!(
            populated >= PAGES - 30,
            "{populated} pages faulted in; {PAGES} are fresh"
        );
        assert!(faults < 8, "{faults} faults writing prefaulted memory");
    }

    #[test]
    fn prefaulting_keeps_what_was_written() {
        const LEN: usize = 1 << 20;
        let mut buf: Vec<u8> = Vec::with_capacity(LEN);
        buf.extend((0..100_000u32).map(|i| i as u8));
        prefault_spare(&mut buf, LEN);
        assert!((0..100_000u32).all(|i| buf[i as usize] == i as u8));
        buf.resize(LEN, 0xa5);
        assert!(buf[100_000..].iter().all(|&b| b == 0xa5));
    }

    #[test]
    fn small_or_empty_ranges_are_left_alone() {
        let mut buf: Vec<u8> = Vec::with_capacity(MIN_BYTES - 1);
        prefault_spare(&mut buf, MIN_BYTES - 1);
        let mut empty = Vec::new();
        prefault_spare(&mut empty, 1 << 20);
        assert!(!populate(empty.as_mut_ptr(), 0));
        assert!(!populate(buf.as_mut_ptr(), MIN_BYTES - 1));
    }
}
