//! A C ABI for GDB's Python side (`gdb-scripts/jit.py`, through `ctypes`): decode one JIT
//! payload, as read from the debugged process, to JSON. The Python extension thereby uses
//! the project's codec instead of a second decoder; it loads this library by its absolute
//! path (the same file GDB loaded with `jit-reader-load`).
//!
//! Contract: [`jitgdb_decode_payload_json`] returns a NUL-terminated UTF-8 string owned by
//! this library, to be released with [`jitgdb_free_string`]. It is either the decoded
//! payload (`{"kind": ...}`) or `{"error": "..."}` naming the problem; NULL only when the
//! arguments themselves are unusable (null pointers).

use std::ffi::{c_char, c_int, c_long, c_void, CString};
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

/// The source session directory of this reader (see `crate::sources`), as a NUL-terminated
/// path owned by the library (valid while it stays loaded), or NULL when no cache directory
/// can be written. The first call makes the directory; from then on the reader names
/// symtabs as the runtime named their files, and the caller (`jit.py`) puts the directory
/// at the end of GDB's source path so that GDB finds them there. Idempotent.
#[no_mangle]
pub extern "C" fn jitgdb_source_dir() -> *const c_char {
    static DIR: std::sync::Mutex<Option<CString>> = std::sync::Mutex::new(None);
    catch_unwind(AssertUnwindSafe(|| {
        let dir = crate::sources::namer().session_dir();
        let mut slot = DIR.lock().unwrap_or_else(|e| e.into_inner());
        match dir
            .ok()
            .and_then(|d| CString::new(d.into_os_string().into_encoded_bytes()).ok())
        {
            Some(c) => {
                if slot.as_ref() != Some(&c) {
                    // Kept for good: the caller may hold the previous pointer.
                    if let Some(old) = slot.take() {
                        std::mem::forget(old);
                    }
                    *slot = Some(c);
                }
                slot.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
            }
            None => std::ptr::null(),
        }
    }))
    .unwrap_or(std::ptr::null())
}

/// Reads `len` bytes of the debugged process at `addr` into `buf`; 0 when all were read.
pub type TargetRead =
    unsafe extern "C" fn(ctx: *mut c_void, addr: u64, buf: *mut u8, len: usize) -> c_int;

/// Largest source section read from an ELF entry.
const MAX_SOURCE_SECTION: u64 = 64 << 20;

/// The ELF entry at `addr` (at most `len` bytes) in the debugged process, read through
/// `read` as far as needed: its header, section headers and names, and its source section.
struct TargetElf {
    read: TargetRead,
    ctx: *mut c_void,
    addr: u64,
    len: u64,
    pos: u64,
}

impl object::ReadCacheOps for TargetElf {
    fn len(&mut self) -> Result<u64, ()> {
        Ok(self.len)
    }
    fn seek(&mut self, pos: u64) -> Result<u64, ()> {
        self.pos = pos;
        Ok(pos)
    }
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ()> {
        self.read_exact(buf).map(|()| buf.len())
    }
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), ()> {
        let n = buf.len() as u64;
        if !matches!(self.pos.checked_add(n), Some(end) if end <= self.len)
            || n > MAX_SOURCE_SECTION
        {
            return Err(());
        }
        let at = self.addr.checked_add(self.pos).ok_or(())?;
        // SAFETY: `buf` is writable for `buf.len()` bytes; the caller's function fills it
        // or reports failure (its contract, see `jitgdb_store_elf_sources`).
        let status = unsafe { (self.read)(self.ctx, at, buf.as_mut_ptr(), buf.len()) };
        if status != 0 {
            return Err(());
        }
        self.pos += n;
        Ok(())
    }
}

/// The source texts an ELF entry carries (`.jit_gdb.sources`), written where GDB finds them
/// (see `crate::sources`: the session directory when the scripts asked for one). `read`
/// reads the debugged process (`ctx` is passed back to it); `addr` is the entry's payload,
/// `len` a bound on its size. Returns how many texts were given to the cache, 0 for an
/// entry without any (or not ELF), -1 for one that could not be read or is damaged.
#[no_mangle]
pub extern "C" fn jitgdb_store_elf_sources(
    read: Option<TargetRead>,
    ctx: *mut c_void,
    addr: u64,
    len: u64,
) -> c_long {
    let Some(read) = read else {
        return -1;
    };
    catch_unwind(AssertUnwindSafe(|| store_elf_sources(read, ctx, addr, len))).unwrap_or(-1)
}

fn store_elf_sources(read: TargetRead, ctx: *mut c_void, addr: u64, len: u64) -> c_long {
    use object::read::elf::{FileHeader, SectionHeader};
    let cache = object::ReadCache::new(TargetElf {
        read,
        ctx,
        addr,
        len,
        pos: 0,
    });
    let Ok(header) = object::elf::FileHeader64::<object::LittleEndian>::parse(&cache) else {
        return 0;
    };
    let Ok(endian) = header.endian() else {
        return 0;
    };
    let section = header.sections(endian, &cache).ok().and_then(|table| {
        table
            .section_by_name(endian, jit_interface::format::SOURCES_SECTION.as_bytes())
            .map(|(_, s)| s.data(endian, &cache))
    });
    let bytes = match section {
        None => return 0,
        Some(Ok(b)) => b,
        Some(Err(_)) => return -1,
    };
    let Ok(texts) = jit_interface::format::decode_elf_sources(bytes) else {
        return -1;
    };
    let mut namer = crate::sources::namer();
    for (file, text) in &texts {
        namer.name(&crate::sources::FileRequest {
            name: Some(file),
            text: Some(text),
            max_line: 0,
        });
    }
    texts.len() as c_long
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
