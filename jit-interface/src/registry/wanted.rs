//! Function names a debugger waits for, so that deferred mode can keep deferring while our
//! GDB scripts have a `jit break NAME` request pending.
//!
//! Deferred mode announces registrations in groups, so a request waiting for a function
//! would see it only after its code may have run. Suspending deferral while any request
//! waits (`jit_gdb_announce_each`) is right for a regular expression, but costs a session
//! with one pending name a GDB stop, and for ELF a resolution of every breakpoint, at every
//! registration (about 2 ms under GDB 13 with three breakpoints). For a request by plain
//! name the scripts write the name here instead: a registration that defines one of these
//! names is announced at once (with its own entry, before its code can run), the others
//! stay deferred.
//!
//! The debugger writes the names while the process is stopped; the runtime reads them with
//! relaxed atomic loads (no `unsafe`: the buffer is an array of `AtomicU8`, laid out as
//! bytes). Cost: one relaxed load per deferred registration while nothing is wanted; with
//! names wanted, a copy of at most [`WANTED_BYTES`] bytes and a comparison per function.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::model::JitObject;

/// Size of [`jit_gdb_wanted_names`]; a debugger with more names to wait for sets
/// `jit_gdb_announce_each` instead.
pub const WANTED_BYTES: usize = 4096;

/// Names a debugger waits for: each followed by a NUL byte, [`jit_gdb_wanted_len`] bytes in
/// all. Written by debugger scripts while the process is stopped.
#[no_mangle]
#[used]
pub static jit_gdb_wanted_names: [AtomicU8; WANTED_BYTES] =
    [const { AtomicU8::new(0) }; WANTED_BYTES];

/// How many bytes of [`jit_gdb_wanted_names`] hold names (0: none wanted). A value above
/// [`WANTED_BYTES`], or names not ending in NUL, make every registration wanted: a debugger
/// that wrote them meant to wait for something, and announcing is the safe side.
#[no_mangle]
#[used]
pub static jit_gdb_wanted_len: AtomicU32 = AtomicU32::new(0);

/// Does `object` define a function a debugger waits for (so that it must be announced at
/// once, even in deferred mode)?
#[inline]
pub(super) fn wanted(object: &JitObject) -> bool {
    let len = jit_gdb_wanted_len.load(Ordering::Relaxed) as usize;
    len != 0 && defines_any(object, len)
}

#[cold]
fn defines_any(object: &JitObject, len: usize) -> bool {
    if len > WANTED_BYTES {
        return true;
    }
    let names: Vec<u8> = jit_gdb_wanted_names[..len]
        .iter()
        .map(|b| b.load(Ordering::Relaxed))
        .collect();
    let Some(body) = names.strip_suffix(&[0]) else {
        return true;
    };
    object
        .functions()
        .iter()
        .any(|f| body.split(|&b| b == 0).any(|n| n == f.name().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Arch;

    fn set(names: &[u8], len: usize) {
        for (slot, &b) in jit_gdb_wanted_names.iter().zip(names) {
            slot.store(b, Ordering::Relaxed);
        }
        jit_gdb_wanted_len.store(len as u32, Ordering::Relaxed);
    }

    fn object(names: &[&str]) -> JitObject {
        let mut o = JitObject::with_arch(Arch::X86_64);
        for (i, n) in names.iter().enumerate() {
            o.add_function(n, 0x1000 + 0x100 * i as u64, 0x40).unwrap();
        }
        o
    }

    // One test: the statics are the process's.
    #[test]
    fn an_object_is_wanted_when_it_defines_a_name_the_debugger_wrote() {
        let o = object(&["jit_a", "jit_outer"]);
        set(b"", 0);
        assert!(!wanted(&o), "nothing wanted");
        set(b"jit_outer\0", 10);
        assert!(wanted(&o));
        set(b"jit_b\0jit_a\0", 12);
        assert!(wanted(&o), "the second of two names");
        set(b"jit_out\0jit_outer_x\0", 20);
        assert!(!wanted(&o), "a prefix or a longer name is another name");
        // Damaged: no final NUL, or a length past the buffer: announce (the safe side).
        set(b"jit_zzz", 7);
        assert!(wanted(&o));
        set(b"", WANTED_BYTES + 1);
        assert!(wanted(&o));
        set(b"", 0);
    }
}
