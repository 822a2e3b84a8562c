//! A C ABI for GDB's Python side (`gdb-scripts/jit.py`, through `ctypes`): walk the JIT
//! entry list of the debugged process ([`jitgdb_walk_list_json`]), read one entry
//! ([`jitgdb_entry_json`]) or decode one payload ([`jitgdb_decode_payload_json`]), to JSON.
//! The Python extension thereby uses the project's one list walker, liveness check,
//! overlap rule and codec (`jit_interface::inspect`) instead of its own; it loads this
//! library by its absolute path (the same file GDB loaded with `jit-reader-load`) and reads
//! the inferior's memory for it through a [`TargetRead`] callback.
//!
//! Contract: the `*_json` functions return a NUL-terminated UTF-8 string owned by this
//! library, to be released with [`jitgdb_free_string`]. It is either the result or
//! `{"error": "..."}` naming the problem; NULL only when the arguments themselves are
//! unusable (null pointers).

use std::ffi::{c_char, c_int, c_long, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use jit_interface::inspect::{read_entry_json, walk_list_json, Limits, Memory};

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

/// Frees a string returned by one of the `*_json` functions; null is ignored.
#[no_mangle]
pub extern "C" fn jitgdb_free_string(s: *mut c_char) {
    if s.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `s` came from `CString::into_raw` in one of the `*_json` functions and is
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

/// The debugged process's memory, read through the caller's [`TargetRead`].
struct CallbackMemory {
    read: TargetRead,
    ctx: *mut c_void,
}

impl Memory for CallbackMemory {
    fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>, String> {
        if addr.checked_add(len).is_none() {
            return Err(format!(
                "{len} bytes at {addr:#x} run past the end of the address space"
            ));
        }
        // The walker bounds every length (entries, descriptor, payloads up to its limit).
        let n = usize::try_from(len).map_err(|_| format!("{len} bytes do not fit in memory"))?;
        let mut buf = vec![0u8; n];
        // SAFETY: `buf` is writable for `n` bytes; the callback fills it or reports failure
        // (the contract of `jitgdb_walk_list_json`).
        let status = unsafe { (self.read)(self.ctx, addr, buf.as_mut_ptr(), n) };
        if status != 0 {
            return Err(format!("the debugger cannot read {len} bytes at {addr:#x}"));
        }
        Ok(buf)
    }
}

/// A JSON result as a C string for the caller (see the module's contract).
fn into_c(json: String) -> *mut c_char {
    // JSON escapes every control character, so the text has no NUL; be safe anyway.
    CString::new(json)
        .unwrap_or_else(|_| {
            CString::new(r#"{"error":"internal error: NUL in the JSON output"}"#)
                .unwrap_or_default()
        })
        .into_raw()
}

/// Walks the JIT entry list of the descriptor at `descriptor_addr`, reading the debugged
/// process through `read` (`ctx` is passed back to it), and returns it as JSON (the shape of
/// `jit_interface::inspect::list_json`: the descriptor, every entry with its decoded
/// payload without unregistered objects, or its error, the list's problems, and the
/// address ranges each function owns under the one overlap rule). `max_entries` caps the
/// walk (0: the default cap). NULL when `read` is null.
#[no_mangle]
pub extern "C" fn jitgdb_walk_list_json(
    read: Option<TargetRead>,
    ctx: *mut c_void,
    descriptor_addr: u64,
    max_entries: u64,
) -> *mut c_char {
    let Some(read) = read else {
        return std::ptr::null_mut();
    };
    let json = catch_unwind(AssertUnwindSafe(|| {
        let mut limits = Limits::default();
        if max_entries != 0 {
            limits.max_entries = usize::try_from(max_entries).unwrap_or(usize::MAX);
        }
        walk_list_json(&CallbackMemory { read, ctx }, descriptor_addr, &limits)
    }))
    .unwrap_or_else(|_| {
        r#"{"error":"internal error: the list walker panicked (a bug in jit-gdb)"}"#.to_string()
    });
    into_c(json)
}

/// Reads and decodes the one entry at `entry_addr` (as [`jitgdb_walk_list_json`] does for
/// each entry): `{"entry": ENTRY}` or `{"error": S}` when the entry cannot be read. NULL
/// when `read` is null.
#[no_mangle]
pub extern "C" fn jitgdb_entry_json(
    read: Option<TargetRead>,
    ctx: *mut c_void,
    entry_addr: u64,
) -> *mut c_char {
    let Some(read) = read else {
        return std::ptr::null_mut();
    };
    let json = catch_unwind(AssertUnwindSafe(|| {
        read_entry_json(
            &CallbackMemory { read, ctx },
            entry_addr,
            &Limits::default(),
        )
    }))
    .unwrap_or_else(|_| {
        r#"{"error":"internal error: the entry reader panicked (a bug in jit-gdb)"}"#.to_string()
    });
    into_c(json)
}

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

    /// A fake process: one descriptor, one entry, one payload, read through the callback
    /// exactly as ctypes calls it.
    struct Process {
        words: Vec<(u64, Vec<u8>)>,
    }

    unsafe extern "C" fn read_process(
        ctx: *mut c_void,
        addr: u64,
        buf: *mut u8,
        len: usize,
    ) -> c_int {
        // SAFETY: the tests pass a live `Process` as `ctx`.
        let p = unsafe { &*(ctx as *const Process) };
        for (at, bytes) in &p.words {
            let Some(from) = addr.checked_sub(*at) else {
                continue;
            };
            let from = from as usize;
            if from + len <= bytes.len() {
                // SAFETY: the callee's contract: `buf` is writable for `len` bytes.
                unsafe { std::ptr::copy_nonoverlapping(bytes[from..].as_ptr(), buf, len) };
                return 0;
            }
        }
        -1
    }

    fn take(p: *mut c_char) -> String {
        assert!(!p.is_null());
        // SAFETY: `p` is a live NUL-terminated string from an export, freed right after.
        let s = unsafe { std::ffi::CStr::from_ptr(p) }
            .to_str()
            .unwrap()
            .to_string();
        jitgdb_free_string(p);
        s
    }

    #[test]
    fn walks_the_list_through_the_callback() {
        let mut o = JitObject::new();
        o.add_function("jit_walked", 0x7000, 0x20).unwrap();
        let payload = encode(&o, None).unwrap();
        let mut descriptor = 1u32.to_le_bytes().to_vec();
        descriptor.extend(1u32.to_le_bytes());
        descriptor.extend(0x2000u64.to_le_bytes());
        descriptor.extend(0x2000u64.to_le_bytes());
        let mut entry = Vec::new();
        for v in [0u64, 0, 0x3000, payload.len() as u64] {
            entry.extend(v.to_le_bytes());
        }
        let mut p = Process {
            words: vec![(0x1000, descriptor), (0x2000, entry), (0x3000, payload)],
        };
        let ctx = &mut p as *mut Process as *mut c_void;
        let json = take(jitgdb_walk_list_json(Some(read_process), ctx, 0x1000, 0));
        assert!(json.contains(r#""name": "jit_walked""#), "{json}");
        assert!(
            json.ends_with(r#""lookup": [[28672, 28704, 0, 0]]}"#),
            "{json}"
        );
        let json = take(jitgdb_entry_json(Some(read_process), ctx, 0x2000));
        assert!(json.starts_with(r#"{"entry": {"address": 8192"#), "{json}");
        // Unreadable memory is named, never a crash.
        let json = take(jitgdb_walk_list_json(Some(read_process), ctx, 0x8, 0));
        assert!(
            json.starts_with(r#"{"error": "cannot read __jit_debug_descriptor at 0x8: the debugger cannot read 24 bytes at 0x8"#),
            "{json}"
        );
        let json = take(jitgdb_entry_json(Some(read_process), ctx, 0x8));
        assert!(
            json.starts_with(r#"{"error": "cannot read jit_code_entry at 0x8"#),
            "{json}"
        );
        assert!(jitgdb_walk_list_json(None, ctx, 0x1000, 0).is_null());
        assert!(jitgdb_entry_json(None, ctx, 0x1000).is_null());
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
