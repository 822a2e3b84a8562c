//! jitdump: `jit-PID.dump` as specified in Linux `tools/perf/Documentation/
//! jitdump-specification.txt` (version 1 header; records CODE_LOAD, DEBUG_INFO,
//! UNWINDING_INFO and CLOSE), in host byte order (the magic tells readers which).
//!
//! For each function, in address order within a registration: `JIT_CODE_DEBUG_INFO` (if it
//! has line rows; perf requires it BEFORE its load), `JIT_CODE_UNWINDING_INFO` (x86-64; perf
//! also attaches it to the next load), then `JIT_CODE_LOAD` with the code bytes.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::ehframe;
use crate::model::{Arch, Function, JitObject, LineRow};

/// "JiTD" read as a host-order u32.
pub const JITDUMP_MAGIC: u32 = 0x4A69_5444;
pub const JIT_CODE_LOAD: u32 = 0;
pub const JIT_CODE_DEBUG_INFO: u32 = 2;
pub const JIT_CODE_CLOSE: u32 = 3;
pub const JIT_CODE_UNWINDING_INFO: u32 = 4;

const FILE_HEADER_SIZE: u32 = 40;
const RECORD_HEADER_SIZE: usize = 16;
const EM_X86_64: u32 = 62;
const EM_AARCH64: u32 = 183;

/// CLOCK_MONOTONIC in nanoseconds: the clock `perf record -k mono` stamps samples with.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

fn thread_id() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Copies the machine code of every function of `object` into `buf` (cleared first) and
/// returns, per function (in the object's order), the range of its bytes in `buf`, or why
/// they could not be read.
///
/// The copy goes through `process_vm_readv` on our own process: an unmapped or unreadable
/// address is an error for that function, not a crash. Where the system call is not allowed
/// (`ENOSYS`, `EPERM`: seccomp filters), the memory is read directly, relying on the
/// documented contract that registered code is readable.
///
/// The kernel pins every page of every remote iovec, so functions are read as runs: a run
/// joins functions that follow each other with at most a gap inside a page both already
/// touch (so reading the gap cannot fault where reading the functions would not). Only a
/// run that fails is read again function by function, to name the unreadable ones.
pub fn code_bytes(object: &JitObject, buf: &mut Vec<u8>) -> Vec<Result<Range<usize>, String>> {
    let funcs: Vec<Function> = object.functions().iter().collect();
    let mut order: Vec<usize> = (0..funcs.len()).collect();
    order.sort_by_key(|&i| funcs[i].start());
    // Runs: (first address, end address, first index into `order`, end index).
    let mut runs: Vec<(u64, u64, usize, usize)> = Vec::new();
    for (k, &i) in order.iter().enumerate() {
        let f = &funcs[i];
        match runs.last_mut() {
            Some(r)
                if f.start() >= r.1
                    && (f.start() == r.1 || (r.1 - 1) / 4096 == f.start() / 4096) =>
            {
                r.1 = f.end();
                r.3 = k + 1;
            }
            _ => runs.push((f.start(), f.end(), k, k + 1)),
        }
    }
    buf.clear();
    let mut result: Vec<Result<Range<usize>, String>> = vec![Ok(0..0); funcs.len()];
    let mut items = Vec::with_capacity(runs.len());
    for r in &runs {
        let at = buf.len();
        buf.resize(at + (r.1 - r.0) as usize, 0);
        items.push((r.0, (r.1 - r.0) as usize, at));
        for &i in &order[r.2..r.3] {
            let off = at + (funcs[i].start() - r.0) as usize;
            result[i] = Ok(off..off + funcs[i].size() as usize);
        }
    }
    let read = read_memory(&items, buf);
    for (r, outcome) in runs.iter().zip(read) {
        if outcome.is_ok() {
            continue;
        }
        let members = &order[r.2..r.3];
        let singles: Vec<(u64, usize, usize)> = members
            .iter()
            .map(|&i| {
                let f = &funcs[i];
                let at = result[i].as_ref().map_or(0, |x| x.start);
                (f.start(), f.size() as usize, at)
            })
            .collect();
        for (&i, outcome) in members.iter().zip(read_memory(&singles, buf)) {
            if let Err(e) = outcome {
                result[i] = Err(unreadable(&funcs[i], &e));
            }
        }
    }
    result
}

/// Reads each `(address, length, offset in buf)` of our own memory into `buf`; per item,
/// whether it could be read.
fn read_memory(items: &[(u64, usize, usize)], buf: &mut [u8]) -> Vec<io::Result<()>> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut out: Vec<io::Result<()>> = Vec::with_capacity(items.len());
    let mut next = 0;
    while next < items.len() {
        // The kernel accepts at most IOV_MAX (1024) iovecs per side and call.
        let end = (next + 1024).min(items.len());
        let base = buf.as_mut_ptr();
        let mut local = Vec::with_capacity(end - next);
        let mut remote = Vec::with_capacity(end - next);
        for &(addr, len, at) in &items[next..end] {
            assert!(at + len <= buf.len(), "read target inside the buffer");
            // SAFETY: `at + len <= buf.len()` (checked above), so the pointer stays inside
            // `buf`.
            local.push(libc::iovec {
                iov_base: unsafe { base.add(at) }.cast(),
                iov_len: len,
            });
            remote.push(libc::iovec {
                iov_base: addr as usize as *mut libc::c_void,
                iov_len: len,
            });
        }
        // SAFETY: the local iovecs are disjoint writable ranges of `buf`, which outlives
        // the call; the remote ones are only read by the kernel, which checks them and
        // returns EFAULT instead of faulting.
        let n = unsafe {
            libc::process_vm_readv(
                pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::EPERM) => {
                    for &(addr, len, at) in &items[next..] {
                        // SAFETY: the documented contract of the jitdump output: registered
                        // code is mapped readable at its address while it is registered.
                        let code =
                            unsafe { std::slice::from_raw_parts(addr as usize as *const u8, len) };
                        buf[at..at + len].copy_from_slice(code);
                        out.push(Ok(()));
                    }
                    return out;
                }
                Some(libc::EFAULT) => {
                    // The first item of this batch is not readable.
                    out.push(Err(err));
                    next += 1;
                }
                _ => {
                    for _ in next..items.len() {
                        out.push(Err(io::Error::from_raw_os_error(
                            err.raw_os_error().unwrap_or(0),
                        )));
                    }
                    return out;
                }
            }
            continue;
        }
        // Transfers never split a remote iovec: `n` ends at an item boundary.
        let mut got = n as usize;
        while next < end && got >= items[next].1 {
            got -= items[next].1;
            out.push(Ok(()));
            next += 1;
        }
        if next < end {
            out.push(Err(io::Error::from_raw_os_error(libc::EFAULT)));
            next += 1;
        }
    }
    out
}

fn unreadable(f: &Function, err: &io::Error) -> String {
    format!(
        "jitdump: function `{}` at {:#x} ({} bytes) is not readable memory ({err}): its code bytes cannot be copied, so it is left out of the dump (register code that is mapped readable)",
        f.name(),
        f.start(),
        f.size()
    )
}

/// Serialises jitdump records into a byte buffer; knows nothing about files, so that tests
/// and benchmarks can drive it directly.
#[derive(Debug, Clone)]
pub struct JitDumpEncoder {
    pid: u32,
    next_index: u64,
    unwinding: bool,
}

fn push_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_ne_bytes());
}
fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_ne_bytes());
}
fn pad8(out: &mut Vec<u8>, record_start: usize) {
    while (out.len() - record_start) % 8 != 0 {
        out.push(0);
    }
}
/// Starts a record; its size is patched by [`end_record`].
fn begin_record(out: &mut Vec<u8>, id: u32, timestamp: u64) -> usize {
    let start = out.len();
    push_u32(out, id);
    push_u32(out, 0);
    push_u64(out, timestamp);
    start
}
fn end_record(out: &mut [u8], start: usize) {
    let size = (out.len() - start) as u32;
    out[start + 4..start + 8].copy_from_slice(&size.to_ne_bytes());
}

impl JitDumpEncoder {
    /// An encoder for process `pid`; `unwinding`: emit `JIT_CODE_UNWINDING_INFO` records.
    pub fn new(pid: u32, unwinding: bool) -> JitDumpEncoder {
        JitDumpEncoder {
            pid,
            next_index: 1,
            unwinding,
        }
    }

    /// The 40-byte file header.
    pub fn file_header(&self, arch: Arch, timestamp: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(FILE_HEADER_SIZE as usize);
        push_u32(&mut out, JITDUMP_MAGIC);
        push_u32(&mut out, 1); // version
        push_u32(&mut out, FILE_HEADER_SIZE);
        push_u32(
            &mut out,
            match arch {
                Arch::X86_64 => EM_X86_64,
                Arch::Aarch64 => EM_AARCH64,
            },
        );
        push_u32(&mut out, 0); // pad1
        push_u32(&mut out, self.pid);
        push_u64(&mut out, timestamp);
        push_u64(&mut out, 0); // flags: timestamps are CLOCK_MONOTONIC, not the TSC
        out
    }

    /// Appends the records of one function whose machine code is `code` (its `size` bytes).
    pub fn encode_function(
        &mut self,
        arch: Arch,
        f: &Function,
        code: &[u8],
        tid: u32,
        timestamp: u64,
        out: &mut Vec<u8>,
    ) {
        debug_assert_eq!(code.len(), f.size() as usize);
        if let (Some(file), false) = (f.file(), f.lines().is_empty()) {
            let start = begin_record(out, JIT_CODE_DEBUG_INFO, timestamp);
            push_u64(out, f.start());
            // perf turns the entries into a DWARF line program whose sequence ends at the
            // LAST entry's address, so the last row would cover no code: a closing entry at
            // the function's end (repeating the last line) gives it its extent.
            push_u64(out, f.lines().len() as u64 + 1);
            let last = f.lines().last().map_or(0, |r| r.line);
            let closing = LineRow {
                offset: f.size(),
                line: last,
            };
            for row in f.lines().iter().chain(std::iter::once(&closing)) {
                push_u64(out, f.start() + u64::from(row.offset));
                push_u32(out, row.line);
                push_u32(out, 0); // discriminator
                out.extend_from_slice(file.as_bytes());
                out.push(0);
            }
            pad8(out, start);
            end_record(out, start);
        }
        if self.unwinding {
            if let Some(u) = ehframe::unwinding_data(arch, f) {
                let start = begin_record(out, JIT_CODE_UNWINDING_INFO, timestamp);
                push_u64(out, u.data.len() as u64);
                push_u64(out, u.eh_frame_hdr_size as u64);
                // perf maps the tables right after the code (at ALIGN_8(code size)); saying
                // they are mapped makes perf's map of the function cover them, which its
                // libunwind-based unwinder needs to read them.
                push_u64(out, u.data.len().next_multiple_of(8) as u64);
                out.extend_from_slice(&u.data);
                pad8(out, start);
                end_record(out, start);
            }
        }
        let start = begin_record(out, JIT_CODE_LOAD, timestamp);
        push_u32(out, self.pid);
        push_u32(out, tid);
        push_u64(out, f.start()); // vma
        push_u64(out, f.start()); // code_addr
        push_u64(out, u64::from(f.size()));
        push_u64(out, self.next_index);
        self.next_index += 1;
        out.extend_from_slice(f.name().as_bytes());
        out.push(0);
        out.extend_from_slice(code);
        end_record(out, start);
    }

    /// The record that marks the end of the runtime.
    pub fn close_record(&self, timestamp: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECORD_HEADER_SIZE);
        let start = begin_record(&mut out, JIT_CODE_CLOSE, timestamp);
        end_record(&mut out, start);
        out
    }
}

/// The open dump file of this process.
pub(crate) struct JitDump {
    dir: PathBuf,
    path: PathBuf,
    out: BufWriter<File>,
    encoder: JitDumpEncoder,
    code: Vec<u8>,
    records: Vec<u8>,
}

impl JitDump {
    /// Creates `dir/jit-PID.dump`, writes the file header and maps its first page
    /// executable: the mmap event in `perf record` output is how `perf inject --jit` finds
    /// the file, and perf only records executable mappings.
    pub(crate) fn open(dir: &Path, pid: u32) -> Result<JitDump, String> {
        let dir = std::fs::canonicalize(dir).map_err(|e| {
            format!(
                "jitdump: directory {} is not usable: {e}; jitdump output is off",
                dir.display()
            )
        })?;
        let path = dir.join(format!("jit-{pid}.dump"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| {
                format!(
                    "jitdump: cannot create {}: {e}; jitdump output is off",
                    path.display()
                )
            })?;
        let encoder = JitDumpEncoder::new(pid, true);
        let header = encoder.file_header(Arch::HOST, monotonic_ns());
        let mut file = file;
        file.write_all(&header)
            .map_err(|e| format!("jitdump: cannot write {}: {e}", path.display()))?;
        map_marker(&file).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            format!(
                "jitdump: cannot map {} with PROT_READ|PROT_EXEC ({e}; a directory on a noexec mount refuses this): perf would never learn about the dump, so jitdump output is off",
                path.display()
            )
        })?;
        Ok(JitDump {
            dir,
            path,
            out: BufWriter::with_capacity(64 * 1024, file),
            encoder,
            code: Vec::new(),
            records: Vec::new(),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the records of every readable function of `object`; returns one message per
    /// function left out because its code could not be read.
    pub(crate) fn write_object(&mut self, object: &JitObject) -> io::Result<Vec<String>> {
        let timestamp = monotonic_ns();
        let tid = thread_id();
        let ranges = code_bytes(object, &mut self.code);
        let funcs: Vec<Function> = object.functions().iter().collect();
        // Address order: with unwinding tables perf's map of a function extends past its
        // code, and a later load at a higher address must be the one that trims it.
        let mut order: Vec<usize> = (0..funcs.len()).collect();
        order.sort_by_key(|&i| funcs[i].start());
        self.records.clear();
        let mut skipped = Vec::new();
        for i in order {
            match &ranges[i] {
                Ok(r) => self.encoder.encode_function(
                    object.arch(),
                    &funcs[i],
                    &self.code[r.clone()],
                    tid,
                    timestamp,
                    &mut self.records,
                ),
                Err(e) => skipped.push(e.clone()),
            }
        }
        self.out.write_all(&self.records)?;
        Ok(skipped)
    }

    /// Writes the close record (at exit).
    pub(crate) fn close(&mut self) -> io::Result<()> {
        let rec = self.encoder.close_record(monotonic_ns());
        self.out.write_all(&rec)
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Closes the file without writing what is buffered (a forked child's copy).
    pub(crate) fn discard(self) {
        let (_file, _unwritten) = self.out.into_parts();
    }
}

/// Maps the first page of the dump read+exec and leaves it mapped for the life of the
/// process (a profiler attaching later finds it in /proc/PID/maps).
fn map_marker(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = if page > 0 { page as usize } else { 4096 };
    // SAFETY: a fresh private mapping of an open file descriptor at an address the kernel
    // chooses; it aliases no Rust object and is never accessed by us.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn records_have_the_specified_layout() {
        let code: Vec<u8> = vec![0x55, 0x48, 0x89, 0xe5, 0x90, 0x5d, 0xc3];
        let mut o = JitObject::new();
        let f = o
            .add_function("jit_f", code.as_ptr() as u64, code.len() as u64)
            .unwrap();
        o.set_lines(
            f,
            "f.js",
            &[
                LineRow { offset: 0, line: 1 },
                LineRow { offset: 4, line: 2 },
            ],
        )
        .unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 6, 7).unwrap();

        let mut buf = Vec::new();
        let ranges = code_bytes(&o, &mut buf);
        assert_eq!(&buf[ranges[0].clone().unwrap()], &code[..]);

        let mut enc = JitDumpEncoder::new(42, true);
        let h = enc.file_header(Arch::X86_64, 7);
        assert_eq!(h.len(), 40);
        assert_eq!(
            (u32_at(&h, 0), u32_at(&h, 4), u32_at(&h, 8), u32_at(&h, 12)),
            (JITDUMP_MAGIC, 1, 40, 62)
        );
        assert_eq!((u32_at(&h, 20), u64_at(&h, 24)), (42, 7));

        let mut out = Vec::new();
        enc.encode_function(
            Arch::X86_64,
            &o.functions().first().unwrap(),
            &code,
            9,
            100,
            &mut out,
        );
        let mut ids = Vec::new();
        let mut at = 0;
        while at < out.len() {
            let (id, size) = (u32_at(&out, at), u32_at(&out, at + 4) as usize);
            assert_eq!(u64_at(&out, at + 8), 100);
            ids.push(id);
            let body = &out[at + 16..at + size];
            match id {
                JIT_CODE_DEBUG_INFO => {
                    assert_eq!(u64_at(body, 0), code.as_ptr() as u64);
                    assert_eq!(u64_at(body, 8), 3, "two rows and the closing entry");
                    assert_eq!(u64_at(body, 16 + 16 + 5), code.as_ptr() as u64 + 4);
                    assert_eq!(&body[32..37], b"f.js\0");
                }
                JIT_CODE_LOAD => {
                    assert_eq!((u32_at(body, 0), u32_at(body, 4)), (42, 9));
                    assert_eq!(u64_at(body, 24), code.len() as u64);
                    assert_eq!(u64_at(body, 32), 1, "code_index");
                    assert_eq!(&body[40..46], b"jit_f\0");
                    assert_eq!(&body[46..], &code[..]);
                }
                JIT_CODE_UNWINDING_INFO => {
                    let (size, hdr) = (u64_at(body, 0) as usize, u64_at(body, 8) as usize);
                    assert!(hdr > 0 && size > hdr && 24 + size <= body.len());
                }
                other => panic!("unexpected record {other}"),
            }
            at += size;
        }
        assert_eq!(
            ids,
            [JIT_CODE_DEBUG_INFO, JIT_CODE_UNWINDING_INFO, JIT_CODE_LOAD]
        );
    }

    #[test]
    fn unreadable_code_is_reported_not_read() {
        let mut o = JitObject::new();
        let readable = [0xc3u8; 4];
        o.add_function("ok", readable.as_ptr() as u64, 4).unwrap();
        // Page 0 is never mapped.
        o.add_function("bad", 0x10, 8).unwrap();
        let mut buf = Vec::new();
        let r = code_bytes(&o, &mut buf);
        assert_eq!(&buf[r[0].clone().unwrap()], &readable);
        let e = r[1].clone().unwrap_err();
        assert!(e.contains("`bad` at 0x10 (8 bytes) is not readable"), "{e}");
    }

    /// Two adjacent functions are read as one run; when the second one's page is gone, the
    /// run fails and the re-read tells the readable one from the unreadable one.
    #[test]
    fn failed_run_is_reread_function_by_function() {
        // SAFETY: a fresh private anonymous mapping of two pages; the second is unmapped
        // again, the first is only read through `code_bytes` and unmapped at the end.
        let p = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::munmap(p.cast::<u8>().add(4096).cast(), 4096), 0);
            std::ptr::write_bytes(p.cast::<u8>().add(4096 - 16), 0xc3, 16);
            p as u64
        };
        let mut o = JitObject::new();
        o.add_function("before", p + 4096 - 32, 16).unwrap();
        o.add_function("last_in_page", p + 4096 - 16, 16).unwrap();
        o.add_function("next_page", p + 4096, 16).unwrap();
        let mut buf = Vec::new();
        let r = code_bytes(&o, &mut buf);
        assert_eq!(&buf[r[0].clone().unwrap()], &[0u8; 16]);
        assert_eq!(&buf[r[1].clone().unwrap()], &[0xc3u8; 16]);
        assert!(r[2].clone().unwrap_err().contains("`next_page`"));
        // SAFETY: our own first page, no longer referenced.
        unsafe { libc::munmap(p as usize as *mut libc::c_void, 4096) };
    }
}
