//! A C ABI for GDB's Python side (`gdb-scripts/jit.py`, through `ctypes`): decode one JIT
//! payload, as read from the debugged process, to JSON. The Python extension thereby uses
//! the project's codec instead of a second decoder; it loads this library by its absolute
//! path (the same file GDB loaded with `jit-reader-load`).
//!
//! Contract: [`jitgdb_decode_payload_json`] returns a NUL-terminated UTF-8 string owned by
//! this library, to be released with [`jitgdb_free_string`]. It is either the decoded
//! payload (`{"kind": ...}`) or `{"error": "..."}` naming the problem; NULL only when the
//! arguments themselves are unusable (null pointers).

use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Decodes `len` bytes at `ptr` to JSON; writes the string's length (without the NUL) to
/// `*out_len` when `out_len` is not null.
#[no_mangle]
pub extern "C" fn jitgdb_decode_payload_json(
    ptr: *const u8,
    len: usize,
    out_len: *mut usize,
) -> *mut c_char {
    if ptr.is_null() && len != 0 {
        return std::ptr::null_mut();
    }
    let bytes: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: the caller passes a buffer of `len` readable bytes at `ptr` (non-null,
        // checked above) that stays valid and unchanged for the duration of this call.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    };
    // No panic may cross the C boundary into GDB's process; a caught one becomes an error.
    let json = catch_unwind(AssertUnwindSafe(|| decode_json(bytes))).unwrap_or_else(|_| {
        r#"{"error":"internal error: the payload decoder panicked (a bug in jit-gdb)"}"#.to_string()
    });
    // JSON escapes every control character, so the text has no NUL; be safe anyway.
    let c = CString::new(json).unwrap_or_else(|_| {
        CString::new(r#"{"error":"internal error: NUL in the decoder's JSON output"}"#)
            .unwrap_or_default()
    });
    if !out_len.is_null() {
        // SAFETY: the caller passes either null (checked) or a valid, writable `usize`.
        unsafe { *out_len = c.as_bytes().len() };
    }
    c.into_raw()
}

/// Frees a string returned by [`jitgdb_decode_payload_json`]; null is ignored.
#[no_mangle]
pub extern "C" fn jitgdb_free_string(s: *mut c_char) {
    if s.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `s` came from `CString::into_raw` in `jitgdb_decode_payload_json` and is
        // freed once (the caller's contract).
        drop(unsafe { CString::from_raw(s) });
    }));
}

/// The project's decoder for both payload kinds (compact records via the codec, ELF via
/// object + gimli); the JSON shape is documented in `jit_interface::inspect`'s json module.
fn decode_json(bytes: &[u8]) -> String {
    jit_interface::inspect::payload_json(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jit_interface::format::encode;
    use jit_interface::{JitObject, LineRow};

    /// Calls the export as ctypes does and takes the string back.
    fn call(bytes: &[u8]) -> String {
        let mut n = 0usize;
        let p = jitgdb_decode_payload_json(bytes.as_ptr(), bytes.len(), &mut n);
        assert!(!p.is_null());
        // SAFETY: `p` is a live NUL-terminated string from the export, freed right after.
        let s = unsafe { std::ffi::CStr::from_ptr(p) }
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(s.len(), n);
        jitgdb_free_string(p);
        s
    }

    #[test]
    fn decodes_compact_and_reports_errors() {
        let mut o = JitObject::new();
        let f = o.add_function("jit_x\"q", 0x7000_0000_1000, 0x20).unwrap();
        o.set_lines(f, "a.jit", &[LineRow { offset: 0, line: 3 }])
            .unwrap();
        let json = call(&encode(&o, None).unwrap());
        assert!(json.contains(r#""kind": "compact""#), "{json}");
        assert!(json.contains(r#""name": "jit_x\"q""#), "{json}");
        assert!(
            json.contains(&format!("[{}, 3]", 0x7000_0000_1000u64)),
            "{json}"
        );

        let bad = call(b"JGCR\x01\x3e\x08\x00\xff");
        assert!(bad.starts_with(r#"{"error": "#), "{bad}");
        let empty = call(b"");
        assert!(empty.starts_with(r#"{"error": "#), "{empty}");
    }

    #[test]
    fn null_arguments() {
        assert!(jitgdb_decode_payload_json(std::ptr::null(), 4, std::ptr::null_mut()).is_null());
        let p = jitgdb_decode_payload_json(std::ptr::null(), 0, std::ptr::null_mut());
        assert!(!p.is_null());
        jitgdb_free_string(p);
        jitgdb_free_string(std::ptr::null_mut());
    }
}
