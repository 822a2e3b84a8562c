//! `.gdb_index` (version 8): GDB's own name and address index of the DWARF. With it, GDB
//! reads no `.debug_*` section when the object is registered (it expands a unit the first
//! time a name or address in it is looked up); without it, GDB 13 scans `.debug_info` and
//! builds its "cooked index" on worker threads at every registration. LLDB ignores it.
//!
//! Layout: a header of six 32-bit offsets (version, unit list, type-unit list, address
//! area, symbol table, constant pool); the units (offset, length); address ranges (start,
//! end, unit); an open-addressing hash table of (name, unit vector) offsets into the
//! constant pool, which holds the unit vectors (count, then unit index | kind << 28) and
//! the names.

use super::bytes::{offset32, Put};
use super::layout::{adjacent_ranges, Layout};
use crate::error::Result;

const VERSION: u32 = 8;
/// Symbol kind "function" in a unit vector entry (bits 28-30); bit 31 (static) clear.
const KIND_FUNCTION: u32 = 3 << 28;

/// GDB's name hash for index versions 5 and later (ASCII case folded).
fn hash(name: &str) -> u32 {
    name.bytes().fold(0u32, |r, c| {
        r.wrapping_mul(67)
            .wrapping_add(u32::from(c.to_ascii_lowercase()))
            .wrapping_sub(113)
    })
}

/// Builds the index of `layout`'s functions. `info` is the `.debug_info` written for it:
/// one unit per entry of `layout.units`, in that order.
pub(super) fn build(layout: &Layout<'_>, info: &[u8]) -> Result<Vec<u8>> {
    let units = layout.units.len();
    // Unit offsets and lengths, from the units' length fields (32-bit DWARF).
    let mut unit_list = Vec::with_capacity(16 * units);
    let mut at = 0usize;
    for _ in 0..units {
        let len = u32::from_le_bytes(info[at..at + 4].try_into().expect("4 bytes")) as usize + 4;
        unit_list.u64(at as u64);
        unit_list.u64(len as u64);
        at += len;
    }
    let mut addresses = Vec::new();
    for (u, unit) in layout.units.iter().enumerate() {
        for (lo, hi) in adjacent_ranges(&layout.functions, &unit.functions) {
            addresses.u64(lo);
            addresses.u64(hi);
            addresses.u32(u as u32);
        }
    }
    // One slot per function name (a name defined in several units gets one vector listing
    // them all; names repeat rarely, so they are found by a linear scan of the slot chain).
    let n = layout.functions.len();
    let slots = (n + n / 3 + 1).next_power_of_two().max(2);
    let mask = slots - 1;
    let mut table = vec![(0u32, 0u32, usize::MAX); slots];
    // Unit vectors first, names after (so no name sits at offset 0, which marks an empty
    // slot together with vector offset 0).
    let mut vectors: Vec<Vec<u32>> = Vec::with_capacity(n);
    let mut names: Vec<&str> = Vec::with_capacity(n);
    for (u, unit) in layout.units.iter().enumerate() {
        for &i in &unit.functions {
            let name = layout.functions[i].name();
            let h = hash(name) as usize;
            let step = ((h.wrapping_mul(17)) & mask) | 1;
            let mut s = h & mask;
            loop {
                let slot = &mut table[s];
                if slot.2 == usize::MAX {
                    *slot = (0, 0, names.len());
                    names.push(name);
                    vectors.push(vec![u as u32 | KIND_FUNCTION]);
                    break;
                }
                if names[slot.2] == name {
                    let v = &mut vectors[slot.2];
                    let entry = u as u32 | KIND_FUNCTION;
                    if !v.contains(&entry) {
                        v.push(entry);
                    }
                    break;
                }
                s = (s + step) & mask;
            }
        }
    }
    let mut pool = Vec::new();
    let mut vector_at = Vec::with_capacity(vectors.len());
    for v in &vectors {
        vector_at.push(offset32(pool.len(), ".gdb_index")?);
        pool.u32(v.len() as u32);
        for &e in v {
            pool.u32(e);
        }
    }
    let mut name_at = Vec::with_capacity(names.len());
    for name in &names {
        name_at.push(offset32(pool.len(), ".gdb_index")?);
        pool.cstr(name);
    }

    let header = 24;
    let units_at = header;
    let types_at = units_at + unit_list.len();
    let addresses_at = types_at;
    let table_at = addresses_at + addresses.len();
    let pool_at = table_at + 8 * slots;
    let mut out = Vec::with_capacity(pool_at + pool.len());
    out.u32(VERSION);
    for offset in [units_at, types_at, addresses_at, table_at, pool_at] {
        out.u32(offset32(offset, ".gdb_index")?);
    }
    out.extend_from_slice(&unit_list);
    out.extend_from_slice(&addresses);
    for &(_, _, k) in &table {
        if k == usize::MAX {
            out.u64(0);
        } else {
            out.u32(name_at[k]);
            out.u32(vector_at[k]);
        }
    }
    out.extend_from_slice(&pool);
    Ok(out)
}
