//! Line rows as DWARF-like special opcodes: one byte holds both the code-offset advance and
//! the line advance of a typical row; opcode 0 escapes to two LEB128 numbers for the rest.

use super::wire::{Cursor, Reader};
use super::DecodeError;

/// Smallest line advance a special opcode encodes.
pub(crate) const LINE_BASE: i64 = -3;
/// Number of line advances per offset advance (`LINE_BASE ..= LINE_BASE + LINE_RANGE - 1`).
pub(crate) const LINE_RANGE: u64 = 12;
/// The escape opcode: ULEB128 offset advance, SLEB128 line advance follow.
pub(crate) const ESCAPE: u8 = 0;
/// First special opcode.
pub(crate) const OPCODE_BASE: u8 = 1;

/// Most bytes one row takes: the escape and two LEB128 numbers.
pub(crate) const MAX_ROW_LEN: usize = 1 + 2 * super::wire::MAX_LEB_LEN;

/// Writes one row as an advance of `offset_adv` bytes and `line_adv` lines.
#[inline]
pub(crate) fn write_row(w: &mut Cursor<'_>, offset_adv: u64, line_adv: i64) {
    // Line advances below LINE_BASE wrap to huge values, so one comparison checks both ends.
    let line_index = line_adv.wrapping_sub(LINE_BASE) as u64;
    // Offset advances of 22 or more never fit a special opcode (22 * 12 + 1 > 255).
    if line_index < LINE_RANGE && offset_adv < 22 {
        let op = offset_adv * LINE_RANGE + line_index + u64::from(OPCODE_BASE);
        if op <= 255 {
            w.u8(op as u8);
            return;
        }
    }
    w.u8(ESCAPE);
    w.uleb(offset_adv);
    w.sleb(line_adv);
}

/// Reads one row: `(offset advance, line advance)`.
#[inline]
pub(crate) fn read_row(r: &mut Reader<'_>) -> Result<(u64, i64), DecodeError> {
    let op = r.u8("a line row")?;
    if op == ESCAPE {
        let adv = r.uleb("a line row's offset advance")?;
        let line = r.sleb("a line row's line advance")?;
        return Ok((adv, line));
    }
    let n = u64::from(op - OPCODE_BASE);
    Ok((n / LINE_RANGE, (n % LINE_RANGE) as i64 + LINE_BASE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_round_trips_and_typical_rows_take_one_byte() {
        let advs = [0u64, 1, 2, 20, 21, 22, 1000, u64::from(u32::MAX)];
        let lines = [-4i64, -3, -1, 0, 1, 8, 9, -1000, i64::MAX, i64::MIN];
        for &a in &advs {
            for &l in &lines {
                let mut buf = [0u8; MAX_ROW_LEN];
                let mut w = Cursor::new(&mut buf);
                write_row(&mut w, a, l);
                let len = w.len();
                let one_byte = (-3..=8).contains(&l) && a * 12 + ((l + 3) as u64) < 255;
                assert_eq!(len == 1, one_byte, "adv {a} line {l}: {:?}", &buf[..len]);
                let mut r = Reader::new(&buf[..len]);
                assert_eq!(read_row(&mut r).unwrap(), (a, l));
                assert!(r.is_at_end());
            }
        }
    }
}
