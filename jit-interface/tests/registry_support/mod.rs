//! Shared by the registry tests: walks the process's own descriptor list, as attach and core
//! readers do, without a debugger.

use jit_interface::descriptor::descriptor_address;
use jit_interface::{JitObject, LineRow};

#[repr(C)]
struct Entry {
    next: *const Entry,
    prev: *const Entry,
    addr: *const u8,
    size: u64,
}

#[repr(C)]
struct Descriptor {
    version: u32,
    action: u32,
    relevant: *const Entry,
    first: *const Entry,
}

/// Calls `f` with every linked entry's payload, head first; returns the number of entries.
///
/// Call it only while no registration runs concurrently (all threads joined).
pub fn for_each_payload(mut f: impl FnMut(&[u8])) -> usize {
    let mut entries = 0;
    let d = descriptor_address() as *const Descriptor;
    // SAFETY: no registration runs concurrently (the caller's contract); every linked entry
    // and its payload are valid while linked.
    unsafe {
        let mut e = (*d).first;
        while !e.is_null() {
            entries += 1;
            f(std::slice::from_raw_parts((*e).addr, (*e).size as usize));
            e = (*e).next;
        }
    }
    entries
}

/// Does the live slot named by a payload hold `key`? Slots stay mapped while any linked
/// payload names them (the registry never frees them).
#[allow(dead_code)] // not every registry test looks at slots
pub fn slot_holds(address: u64, key: u64) -> bool {
    // SAFETY: see above: the address comes from a linked payload of this process.
    unsafe { (address as *const u64).read_volatile() == key }
}

/// A one-function object of the scale benchmark's shape (8 line rows, frame-pointer frame).
#[allow(dead_code)] // not every registry test registers these
pub fn object(name: &str, start: u64) -> JitObject {
    let mut obj = JitObject::new();
    let f = obj.add_function(name, start, 64).unwrap();
    let rows: Vec<LineRow> = (0..8)
        .map(|i| LineRow {
            offset: i * 6,
            line: 10 + i,
        })
        .collect();
    obj.set_lines(f, "scale.js", &rows).unwrap();
    obj.set_frame_pointer(f, 1, 4).unwrap();
    obj
}

/// The DWARF sections of an ELF payload, for gimli (a missing section reads as empty).
#[allow(dead_code)] // not every registry test reads DWARF
pub fn dwarf_of<'a>(
    file: &object::File<'a>,
) -> gimli::Dwarf<gimli::EndianSlice<'a, gimli::LittleEndian>> {
    use object::{Object, ObjectSection};
    let load = |id: gimli::SectionId| -> Result<_, ()> {
        let data = file
            .section_by_name(id.name())
            .and_then(|s| s.data().ok())
            .unwrap_or(&[]);
        Ok(gimli::EndianSlice::new(data, gimli::LittleEndian))
    };
    gimli::Dwarf::load(load).expect("loading sections cannot fail")
}
