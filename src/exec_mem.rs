//! Executable memory for the demo JIT and the test host: mapped read-write, filled, then
//! switched to read-execute (never writable and executable at once), like a real JIT with W^X.

use std::io;

pub struct CodeBuffer {
    ptr: *mut u8,
    len: usize,
    sealed: bool,
}

impl CodeBuffer {
    /// Maps `len` bytes read-write, at `want` if that range is free (a fixed address makes
    /// the code addresses the same in every run, so tests can name them before starting the
    /// host), else wherever the kernel puts it.
    pub fn map(want: Option<u64>, len: usize) -> io::Result<CodeBuffer> {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let mut ptr = libc::MAP_FAILED;
        if let Some(addr) = want {
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; on failure we
            // get MAP_FAILED and fall back below.
            ptr = unsafe {
                libc::mmap(
                    addr as *mut libc::c_void,
                    len,
                    rw,
                    flags | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
        }
        if ptr == libc::MAP_FAILED {
            // SAFETY: an anonymous private mapping at an address of the kernel's choice.
            ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, rw, flags, -1, 0) };
        }
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(CodeBuffer {
            ptr: ptr.cast(),
            len,
            sealed: false,
        })
    }

    /// Maps fresh memory at an address of the kernel's choice, copies `code` to its start and
    /// makes it read-execute.
    pub fn with_code(code: &[u8]) -> io::Result<CodeBuffer> {
        let mut buf = CodeBuffer::map(None, code.len().max(1))?;
        buf.write(0, code);
        buf.seal()?;
        Ok(buf)
    }

    /// Address of the first byte.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Copies `bytes` to `offset` (before [`Self::seal`]).
    pub fn write(&mut self, offset: usize, bytes: &[u8]) {
        assert!(!self.sealed, "code buffer already sealed");
        assert!(offset + bytes.len() <= self.len, "code buffer too small");
        // SAFETY: the range is inside our read-write mapping (checked above) and nothing else
        // references it yet.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(offset), bytes.len()) };
    }

    /// Makes the buffer read-execute.
    pub fn seal(&mut self) -> io::Result<()> {
        // SAFETY: our own mapping, whole length.
        let r =
            unsafe { libc::mprotect(self.ptr.cast(), self.len, libc::PROT_READ | libc::PROT_EXEC) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        self.sealed = true;
        Ok(())
    }
}

impl Drop for CodeBuffer {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`, once; whoever registered code in
        // it unregistered first (registrations are dropped before the buffer).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
