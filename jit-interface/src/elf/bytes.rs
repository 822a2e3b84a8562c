//! Little-endian DWARF primitives appended to a byte vector: fixed-size integers, LEB128,
//! C strings, and 32-bit lengths patched in once their extent is known.

use crate::error::{Error, Result};

pub(super) trait Put {
    fn u8(&mut self, v: u8);
    fn u16(&mut self, v: u16);
    fn u32(&mut self, v: u32);
    fn u64(&mut self, v: u64);
    #[inline(always)]
    fn uleb(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.u8(v as u8 | 0x80);
            v >>= 7;
        }
        self.u8(v as u8);
    }
    #[inline(always)]
    fn sleb(&mut self, mut v: i64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            // Done when the rest is all sign bits and the sign bit of `byte` matches them.
            if (v == 0 && byte & 0x40 == 0) || (v == -1 && byte & 0x40 != 0) {
                self.u8(byte);
                return;
            }
            self.u8(byte | 0x80);
        }
    }
    /// `s` and its terminating NUL (the model refuses names containing NUL).
    fn cstr(&mut self, s: &str);
    /// Overwrites the 4 bytes at `at` with `v`.
    fn patch_u32(&mut self, at: usize, v: u32);
}

impl Put for Vec<u8> {
    #[inline]
    fn u8(&mut self, v: u8) {
        self.push(v);
    }
    #[inline]
    fn u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn cstr(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
        self.push(0);
    }
    #[inline]
    fn patch_u32(&mut self, at: usize, v: u32) {
        self[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
}

/// Appends the first `len` bytes of `bytes` to `out`. Copies of a few bytes are frequent:
/// a copy of a size known when compiling is a few moves, a call to `memcpy` for a variable
/// size costs more than that, so all of `bytes` is copied and the rest cut off again.
#[inline(always)]
pub(super) fn extend_small<const N: usize>(out: &mut Vec<u8>, bytes: &[u8; N], len: usize) {
    let end = out.len() + len;
    out.extend_from_slice(bytes);
    out.truncate(end);
}

/// Up to `N` bytes put together on the stack, then appended at once with [`extend_small`]:
/// an entry of several fields costs one check of the vector's capacity, not one per field.
/// Holds what its user counted: more than `N` bytes is a bug (a panic).
pub(super) struct Small<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Small<N> {
    #[inline(always)]
    pub fn new() -> Self {
        Small {
            bytes: [0; N],
            len: 0,
        }
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub fn append_to(&self, out: &mut Vec<u8>) {
        extend_small(out, &self.bytes, self.len);
    }

    #[inline(always)]
    fn put<const M: usize>(&mut self, b: [u8; M]) {
        self.bytes[self.len..self.len + M].copy_from_slice(&b);
        self.len += M;
    }
}

impl<const N: usize> Put for Small<N> {
    #[inline(always)]
    fn u8(&mut self, v: u8) {
        self.put([v]);
    }
    #[inline(always)]
    fn u16(&mut self, v: u16) {
        self.put(v.to_le_bytes());
    }
    #[inline(always)]
    fn u32(&mut self, v: u32) {
        self.put(v.to_le_bytes());
    }
    #[inline(always)]
    fn u64(&mut self, v: u64) {
        self.put(v.to_le_bytes());
    }
    fn cstr(&mut self, s: &str) {
        for &b in s.as_bytes() {
            self.u8(b);
        }
        self.u8(0);
    }
    fn patch_u32(&mut self, at: usize, v: u32) {
        self.bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
}

/// `n` as a 32-bit DWARF offset or length, or an error naming `what`.
pub(super) fn offset32(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        Error::TooLarge(format!(
            "{what} of one ELF object exceeds 4 GiB (32-bit DWARF)"
        ))
    })
}

/// Patches the 32-bit length at `at` to cover everything written after it.
pub(super) fn patch_length(out: &mut Vec<u8>, at: usize, what: &str) -> Result<()> {
    let len = offset32(out.len() - at - 4, what)?;
    out.patch_u32(at, len);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Put;

    #[test]
    fn leb128_matches_gimli() {
        for v in [0u64, 1, 63, 64, 127, 128, 255, 300, 1 << 40, u64::MAX] {
            let mut ours = Vec::new();
            ours.uleb(v);
            let mut r = gimli::EndianSlice::new(&ours, gimli::LittleEndian);
            assert_eq!(gimli::leb128::read::unsigned(&mut r).unwrap(), v);
            assert!(r.is_empty());
        }
        for v in [
            0i64,
            1,
            -1,
            63,
            64,
            -64,
            -65,
            127,
            -128,
            1 << 40,
            i64::MIN,
            i64::MAX,
        ] {
            let mut ours = Vec::new();
            ours.sleb(v);
            let mut r = gimli::EndianSlice::new(&ours, gimli::LittleEndian);
            assert_eq!(gimli::leb128::read::signed(&mut r).unwrap(), v, "{v}");
            assert!(r.is_empty());
        }
    }
}
