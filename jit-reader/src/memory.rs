//! Reading the debugged process's memory. GDB's `target_read` is one implementation; unit
//! tests use fake stacks. Every read can fail (unmapped page, page missing from a core).

/// Target memory, as seen by the reader.
pub trait Memory {
    /// Fills `buf` from target address `addr`; false if any byte is unreadable.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;

    /// Reads a little-endian 64-bit word (both supported architectures are little-endian).
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        // Reads that would wrap around the address space are refused before reaching GDB.
        addr.checked_add(8)?;
        self.read(addr, &mut b).then(|| u64::from_le_bytes(b))
    }
}
