//! The registry through the C API, without a debugger: small compact objects share one entry
//! (appended in place), deferred mode switches on and off, `jit_flush` reports nothing
//! pending (no debugger was there to announce to), and unregistering everything empties the
//! list. (Deferred announcements to a real GDB: tests/reader_special.rs.)

use std::ffi::CString;

use jit_interface::descriptor::{debugger_attached, entry_count};
use jit_interface::{
    jit_flush, jit_last_error, jit_object_add_function, jit_object_new,
    jit_object_set_frame_pointer, jit_register, jit_set_deferred, jit_unregister,
    jit_unregister_many,
};

fn register_one(name: &str, start: u64) -> *mut jit_interface::jit_registration {
    let name = CString::new(name).unwrap();
    // SAFETY: a fresh object, a NUL-terminated name; jit_register takes the object over.
    unsafe {
        let obj = jit_object_new();
        let f = jit_object_add_function(obj, name.as_ptr(), start, 32);
        assert!(f >= 0);
        assert_eq!(jit_object_set_frame_pointer(obj, f, 1, 4), 0);
        let reg = jit_register(obj, 0 /* JIT_FORMAT_COMPACT */);
        assert!(
            !reg.is_null(),
            "{:?}",
            std::ffi::CStr::from_ptr(jit_last_error())
        );
        reg
    }
}

#[test]
fn compact_objects_share_an_entry_and_deferred_mode_switches() {
    if debugger_attached() {
        eprintln!("skipped: run under a debugger");
        return;
    }
    let before = entry_count();
    let mut regs: Vec<_> = (0..10)
        .map(|i| register_one(&format!("capi_quiet_{i}"), 0x5200_0000_0000 + 64 * i))
        .collect();
    assert_eq!(entry_count(), before + 1, "10 small objects, one entry");

    assert_eq!(jit_set_deferred(100, 5), 0);
    regs.extend(
        (10..20).map(|i| register_one(&format!("capi_deferred_{i}"), 0x5200_0000_0000 + 64 * i)),
    );
    // No debugger: nothing is pending (attach would read the list whole).
    assert_eq!(jit_flush(), 0);
    assert_eq!(jit_set_deferred(0, 0), 0);
    assert_eq!(entry_count(), before + 1);

    // Half one by one, half in one call (NULL elements skipped).
    let mut rest = regs.split_off(10);
    for r in regs {
        // SAFETY: each came from jit_register and is unregistered once.
        unsafe { jit_unregister(r) };
    }
    assert_eq!(entry_count(), before + 1);
    // A NULL, and one registration listed twice: unregistered once, and said.
    rest.insert(3, std::ptr::null_mut());
    rest.push(rest[5]);
    // SAFETY: nothing to read; then an array of registrations from jit_register (and a
    // NULL), none unregistered before.
    unsafe {
        jit_unregister_many(std::ptr::null(), 0);
        jit_unregister_many(rest.as_ptr(), rest.len());
    }
    assert_eq!(entry_count(), before, "every batch is unlinked once empty");
    // SAFETY: jit_last_error returns a NUL-terminated string.
    let error = unsafe { std::ffi::CStr::from_ptr(jit_last_error()) };
    assert!(
        error.to_string_lossy().contains("listed more than once"),
        "{error:?}"
    );

    // A NULL array of several: refused with a message naming it.
    // SAFETY: refused before anything is read.
    unsafe { jit_unregister_many(std::ptr::null(), 3) };
    // SAFETY: jit_last_error returns a NUL-terminated string.
    let error = unsafe { std::ffi::CStr::from_ptr(jit_last_error()) };
    assert!(error.to_string_lossy().contains("regs"), "{error:?}");
}

/// C function ids are checked where they come in: a negative one and one the object does
/// not have are refused, each with a message that names it.
#[test]
fn bad_function_ids_are_refused_with_a_message() {
    let name = CString::new("capi_ids").unwrap();
    // SAFETY: a fresh object and a NUL-terminated name; the object is freed by jit_register
    // at the end (it takes it over, registered or not).
    unsafe {
        let obj = jit_object_new();
        let f = jit_object_add_function(obj, name.as_ptr(), 0x5300_0000_0000, 32);
        assert_eq!(f, 0, "the first function's id");
        for (id, says) in [
            (-1, "function id -1 is negative"),
            (1, "function index 1 does not exist"),
        ] {
            assert_eq!(jit_object_set_frame_pointer(obj, id, 1, 4), -1);
            let error = std::ffi::CStr::from_ptr(jit_last_error()).to_string_lossy();
            assert!(error.contains(says), "id {id}: {error:?}");
        }
        assert_eq!(jit_object_set_frame_pointer(obj, f, 1, 4), 0);
        let reg = jit_register(obj, 0 /* JIT_FORMAT_COMPACT */);
        assert!(!reg.is_null());
        jit_unregister(reg);
    }
}
