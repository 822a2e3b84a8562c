//! The byte level of compact records: little-endian fixed-width integers, LEB128, and a
//! reader that checks every read against the bytes that remain (the decoder runs on memory
//! read from other processes and core files, so nothing it reads is trusted).

use super::{DecodeError, MAX_TEXT_LEN};

/// A decoding error naming the problem and where it was found.
pub(crate) fn invalid(what: impl std::fmt::Display, offset: usize) -> DecodeError {
    DecodeError::Invalid(format!("{what}, at byte offset {offset}"))
}

/// Most bytes a LEB128 number of 64 bits takes.
pub(crate) const MAX_LEB_LEN: usize = 10;

/// Writes `v` as ULEB128 at the start of `out` and returns its length (at most
/// `MAX_LEB_LEN`; `out` must have room for it).
#[inline]
fn put_uleb(out: &mut [u8], mut v: u64) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        out[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    out[n] = v as u8;
    n + 1
}

/// Writes `v` as SLEB128 at the start of `out` and returns its length (at most
/// `MAX_LEB_LEN`; `out` must have room for it).
#[inline]
fn put_sleb(out: &mut [u8], mut v: i64) -> usize {
    let mut n = 0;
    loop {
        let byte = (v as u8) & 0x7f;
        v >>= 7; // arithmetic: keeps the sign
        if (v == 0 && byte & 0x40 == 0) || (v == -1 && byte & 0x40 != 0) {
            out[n] = byte;
            return n + 1;
        }
        out[n] = byte | 0x80;
        n += 1;
    }
}

/// Appends encoded values to a byte vector.
#[derive(Default)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    #[inline]
    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    #[inline]
    pub(crate) fn u64_le(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    #[inline]
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    #[inline(always)]
    pub(crate) fn uleb(&mut self, v: u64) {
        // Most numbers (sizes, counts, indices) take one byte.
        if v < 0x80 {
            self.buf.push(v as u8);
        } else {
            self.uleb_long(v);
        }
    }

    #[inline(never)]
    fn uleb_long(&mut self, v: u64) {
        let mut bytes = [0u8; MAX_LEB_LEN];
        let n = put_uleb(&mut bytes, v);
        self.buf.extend_from_slice(&bytes[..n]);
    }

    /// (The encoder writes signed numbers only inside functions, through a `Cursor`.)
    #[cfg(test)]
    pub(crate) fn sleb(&mut self, v: i64) {
        let mut bytes = [0u8; MAX_LEB_LEN];
        let n = put_sleb(&mut bytes, v);
        self.buf.extend_from_slice(&bytes[..n]);
    }

    /// A length-prefixed string (the caller has checked it against `MAX_TEXT_LEN`).
    #[inline]
    pub(crate) fn text(&mut self, s: &str) {
        self.uleb(s.len() as u64);
        self.bytes(s.as_bytes());
    }

    /// A blob: written as a text, but may be empty (the caller has checked it against
    /// `MAX_SOURCE_BYTES`).
    pub(crate) fn blob(&mut self, s: &str) {
        self.text(s);
    }
}

/// Writes values into a slice that the caller made long enough for everything written
/// (counting `MAX_LEB_LEN` bytes per LEB128 number): the encoder's inner loop checks
/// capacity once per function, not once per byte.
pub(crate) struct Cursor<'b> {
    out: &'b mut [u8],
    len: usize,
}

impl<'b> Cursor<'b> {
    pub(crate) fn new(out: &'b mut [u8]) -> Self {
        Cursor { out, len: 0 }
    }

    /// Bytes written so far (from the start of the slice).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub(crate) fn u8(&mut self, v: u8) {
        self.out[self.len] = v;
        self.len += 1;
    }

    #[inline(always)]
    pub(crate) fn uleb(&mut self, v: u64) {
        if v < 0x80 {
            self.u8(v as u8);
        } else {
            self.len += put_uleb_cold(&mut self.out[self.len..], v);
        }
    }

    #[inline(always)]
    pub(crate) fn sleb(&mut self, v: i64) {
        if (-0x40..0x40).contains(&v) {
            self.u8((v as u8) & 0x7f);
        } else {
            self.len += put_sleb_cold(&mut self.out[self.len..], v);
        }
    }

    /// A length-prefixed string (the caller has checked it against `MAX_TEXT_LEN`).
    #[inline]
    pub(crate) fn text(&mut self, s: &str) {
        self.uleb(s.len() as u64);
        self.out[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
    }
}

// The long forms, out of line: they get the slice rather than the cursor, so that the
// cursor's length can stay in a register in the encoder's loops.
#[cold]
#[inline(never)]
fn put_uleb_cold(out: &mut [u8], v: u64) -> usize {
    put_uleb(out, v)
}

#[cold]
#[inline(never)]
fn put_sleb_cold(out: &mut [u8], v: i64) -> usize {
    put_sleb(out, v)
}

/// Reads values from a byte slice, never past its end.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Offset of the next byte to read.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    #[cold]
    #[inline(never)]
    fn truncated(&self, what: &str) -> DecodeError {
        invalid(format!("the payload ends inside {what}"), self.pos)
    }

    // Inlined: the GDB reader decodes through these, a few per function and row.
    #[inline]
    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, DecodeError> {
        let Some(&b) = self.bytes.get(self.pos) else {
            return Err(self.truncated(what));
        };
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub(crate) fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        let b = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }

    pub(crate) fn u64_le(&mut self, what: &str) -> Result<u64, DecodeError> {
        let b = self.bytes(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// Unsigned LEB128 of at most 10 bytes whose value fits in 64 bits. Redundant
    /// continuation bytes are accepted within those 10 bytes.
    #[inline]
    pub(crate) fn uleb(&mut self, what: &str) -> Result<u64, DecodeError> {
        // Most numbers take one byte.
        if let Some(&b) = self.bytes.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.uleb_long(what)
    }

    fn uleb_long(&mut self, what: &str) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            let byte = self.u8(what)?;
            if shift == 63 {
                // The tenth byte carries bit 63 only.
                if byte > 1 {
                    return Err(invalid(
                        format!("{what}: LEB128 number longer than 10 bytes or above 2^64 - 1"),
                        start,
                    ));
                }
                return Ok(value | (u64::from(byte) << 63));
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    /// Signed LEB128 of at most 10 bytes whose value fits in 64 bits.
    #[inline]
    pub(crate) fn sleb(&mut self, what: &str) -> Result<i64, DecodeError> {
        let start = self.pos;
        let mut value = 0i64;
        let mut shift = 0u32;
        loop {
            let byte = self.u8(what)?;
            if shift == 63 {
                // The tenth byte carries bit 63; its other bits must repeat the sign.
                if byte != 0 && byte != 0x7f {
                    return Err(invalid(
                        format!(
                            "{what}: signed LEB128 number longer than 10 bytes or outside 64 bits"
                        ),
                        start,
                    ));
                }
                return Ok(value | (i64::from(byte & 1) << 63));
            }
            value |= i64::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                if shift < 64 && byte & 0x40 != 0 {
                    value |= -1i64 << shift;
                }
                return Ok(value);
            }
        }
    }

    /// An unsigned LEB128 value that must fit in 32 bits.
    #[inline]
    pub(crate) fn uleb_u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        let start = self.pos;
        let v = self.uleb(what)?;
        u32::try_from(v).map_err(|_| invalid(format!("{what} {v} does not fit in 32 bits"), start))
    }

    /// A count of items that each take at least `min_item_bytes` bytes: checked against
    /// `max` and against the bytes that remain, so that allocating `count` items is bounded
    /// by the input size.
    #[inline]
    pub(crate) fn count(
        &mut self,
        what: &str,
        min_item_bytes: usize,
        max: u64,
    ) -> Result<usize, DecodeError> {
        let start = self.pos;
        let n = self.uleb(what)?;
        if n > max {
            return Err(invalid(
                format!("{what} {n} is above the format's limit of {max}"),
                start,
            ));
        }
        let room = (self.remaining() / min_item_bytes.max(1)) as u64;
        if n > room {
            return Err(invalid(
                format!(
                    "{what} {n} cannot fit in the {} bytes that remain",
                    self.remaining()
                ),
                start,
            ));
        }
        // n <= remaining bytes, so it fits in usize.
        Ok(n as usize)
    }

    /// A length-prefixed UTF-8 string: non-empty, at most `MAX_TEXT_LEN` bytes, no NUL.
    #[inline]
    pub(crate) fn text(&mut self, what: &str) -> Result<&'a str, DecodeError> {
        let start = self.pos;
        let len = self.uleb(what)?;
        if len == 0 {
            return Err(invalid(format!("{what} is empty"), start));
        }
        self.utf8(len, start, what)
    }

    /// A blob (a source text): a text that may be empty, of at most `MAX_TEXT_LEN` bytes
    /// (which is `MAX_SOURCE_BYTES`).
    pub(crate) fn blob(&mut self, what: &str) -> Result<&'a str, DecodeError> {
        let start = self.pos;
        let len = self.uleb(what)?;
        self.utf8(len, start, what)
    }

    /// The `len` bytes of a text or blob whose length was at `start`: at most
    /// `MAX_TEXT_LEN`, UTF-8, no NUL.
    #[inline]
    fn utf8(&mut self, len: u64, start: usize, what: &str) -> Result<&'a str, DecodeError> {
        if len > MAX_TEXT_LEN {
            return Err(invalid(
                format!("{what} is {len} bytes long, above the format's limit of {MAX_TEXT_LEN}"),
                start,
            ));
        }
        if len > self.remaining() as u64 {
            return Err(invalid(
                format!(
                    "{what} is {len} bytes long but only {} bytes remain",
                    self.remaining()
                ),
                start,
            ));
        }
        let body_at = self.pos;
        let b = self.bytes(len as usize, what)?;
        let s = std::str::from_utf8(b).map_err(|e| {
            invalid(
                format!("{what} is not valid UTF-8"),
                body_at + e.valid_up_to(),
            )
        })?;
        if let Some(i) = b.iter().position(|&c| c == 0) {
            return Err(invalid(format!("{what} contains a NUL byte"), body_at + i));
        }
        Ok(s)
    }

    pub(crate) fn is_at_end(&self) -> bool {
        self.pos == self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leb128_round_trips_edges() {
        let us = [
            0u64,
            1,
            63,
            64,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ];
        let ss = [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            -65,
            127,
            -128,
            i64::MAX,
            i64::MIN,
            -300,
        ];
        let mut w = Writer::default();
        for &u in &us {
            w.uleb(u);
        }
        for &s in &ss {
            w.sleb(s);
        }
        let mut r = Reader::new(&w.buf);
        for &u in &us {
            assert_eq!(r.uleb("u").unwrap(), u);
        }
        for &s in &ss {
            assert_eq!(r.sleb("s").unwrap(), s);
        }
        assert!(r.is_at_end());
        // Known encodings (DWARF spec, section 7.6).
        let mut w = Writer::default();
        w.uleb(624485);
        w.sleb(-123456);
        assert_eq!(w.buf, [0xe5, 0x8e, 0x26, 0xc0, 0xbb, 0x78]);
    }

    #[test]
    fn fixed_width_numbers_are_little_endian_and_bounded() {
        let bytes = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u64_le("a u64").unwrap(), 0x0807_0605_0403_0201);
        assert!(r.is_at_end());
        assert!(Reader::new(&bytes[..7]).u64_le("a u64").is_err());
    }

    #[test]
    fn leb128_rejects_overlong_and_truncated() {
        let too_long = [0x80u8; 11];
        let e = Reader::new(&too_long).uleb("x").unwrap_err();
        assert!(e.to_string().contains("longer than 10 bytes"), "{e}");
        let e = Reader::new(&too_long).sleb("x").unwrap_err();
        assert!(e.to_string().contains("longer than 10 bytes"), "{e}");
        let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(Reader::new(&over).uleb("x").is_err());
        let e = Reader::new(&[0x80, 0x80]).uleb("the size").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the payload ends inside the size, at byte offset 2"
        );
        // Redundant continuation bytes within 10 bytes are fine.
        assert_eq!(Reader::new(&[0x81, 0x80, 0x00]).uleb("x").unwrap(), 1);
    }

    #[test]
    fn counts_are_checked_against_remaining_bytes() {
        let mut w = Writer::default();
        w.uleb(u64::from(u32::MAX));
        w.bytes(&[0; 16]);
        let e = Reader::new(&w.buf)
            .count("the row count", 1, u64::MAX)
            .unwrap_err();
        assert!(e.to_string().contains("cannot fit in the 16 bytes"), "{e}");
        let e = Reader::new(&w.buf)
            .count("the row count", 1, 1000)
            .unwrap_err();
        assert!(e.to_string().contains("limit of 1000"), "{e}");
    }
}
