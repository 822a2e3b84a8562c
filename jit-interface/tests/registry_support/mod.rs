//! Shared by the registry tests: walks the process's own descriptor list, as attach and core
//! readers do, without a debugger.

use jit_interface::descriptor::descriptor_address;

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
