//! Executable memory for the examples and benchmarks, the way a JIT gets it: map read-write,
//! copy the machine code in, then make the mapping read-execute. Included with `#[path]` by
//! each example or benchmark that runs real code (an example cannot share a module otherwise).

// Not every includer uses every method.
#![allow(dead_code)]

/// A private anonymous mapping, writable until [`CodeBuf::make_executable`]. It is never
/// unmapped: registered code stays valid until the process ends.
pub struct CodeBuf {
    ptr: *mut u8,
    len: usize,
}

impl CodeBuf {
    /// At least `len` bytes (page-rounded), read-write.
    pub fn new(len: usize) -> CodeBuf {
        let len = len.max(1).next_multiple_of(4096);
        // SAFETY: a fresh private anonymous mapping at an address of the kernel's choice.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "mmap failed");
        CodeBuf { ptr: p.cast(), len }
    }

    /// Address of the first byte.
    pub fn base(&self) -> u64 {
        self.ptr as u64
    }

    /// Copies `code` to `offset`.
    pub fn write(&mut self, offset: usize, code: &[u8]) {
        assert!(
            offset
                .checked_add(code.len())
                .is_some_and(|end| end <= self.len),
            "code at {offset} ({} bytes) does not fit the {}-byte buffer",
            code.len(),
            self.len
        );
        // SAFETY: inside our own writable mapping (checked above); nothing else references
        // it before it is made executable.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), self.ptr.add(offset), code.len()) };
    }

    /// Makes the whole mapping read-execute; returns its base address.
    pub fn make_executable(self) -> u64 {
        // SAFETY: `ptr` starts our own mapping of `len` bytes.
        let rc =
            unsafe { libc::mprotect(self.ptr.cast(), self.len, libc::PROT_READ | libc::PROT_EXEC) };
        assert_eq!(rc, 0, "mprotect failed");
        self.ptr as u64
    }
}
