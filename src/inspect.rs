//! `jit-gdb inspect CORE --exe PROGRAM`: the JIT functions a core file holds, without a
//! debugger. Maps the core (only the pages read are loaded) and reads its memory (PT_LOAD
//! segments) and mappings (NT_FILE, NT_AUXV), finds `__jit_debug_descriptor` in PROGRAM's
//! symbols and relocates it by PROGRAM's load address in the core (or, when PROGRAM does not
//! define it, in its shared libraries: the core's link map, else its NT_FILE mappings), then
//! walks the entry list in the core's memory with
//! `jit_interface::inspect::walk_list` (which decodes each payload, compact records or ELF,
//! and drops unregistered objects).
//!
//! The core may come from another machine, be truncated or hold damaged entries: every read
//! is checked against the segment and the file, the list walk is bounded (cycle detection,
//! caps on entries and sizes), and what can be read is reported next to what could not.
//! Addresses that several functions claim belong to the newest registration (the overlap
//! rule of `jit_interface::inspect::Symbolizer`), for `--symbolize` and the exports alike.
//!
//! Exit status: 0 everything was read; 3 a report was printed but some of it could not be
//! read (truncated core, damaged entry or payload: the problems are listed); 1 nothing could
//! be read (unreadable files, no descriptor); 2 usage error.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use jit_interface::inspect::{
    read_descriptor, walk_list, FunctionInfo, Limits, ListEntry, ListProblem, ListReport, Memory,
    Symbolizer,
};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{elf, Object, ObjectSymbol};

use crate::cli::UsageError;

/// Exit status when a report was printed but parts of the core could not be read.
pub const EXIT_PARTIAL: i32 = 3;

/// What `inspect` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    List,
    /// Addresses as given; empty: read them from stdin.
    Symbolize(Vec<String>),
    PerfMap(PathBuf),
    Elf(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub core: PathBuf,
    pub exe: PathBuf,
    pub action: Action,
}

/// Parses the arguments after `inspect`.
pub fn parse(args: Vec<OsString>) -> Result<Options, UsageError> {
    let usage = |why: String| UsageError(format!("`inspect`: {why}"));
    let (mut core, mut exe, mut action) = (None, None, None);
    let mut it = args.into_iter().peekable();
    let set = |action: &mut Option<Action>, a: Action| {
        if action.is_some() {
            return Err(usage(
                "give one of --list, --symbolize, --perf-map, --elf".into(),
            ));
        }
        *action = Some(a);
        Ok(())
    };
    while let Some(a) = it.next() {
        let value = |it: &mut std::iter::Peekable<std::vec::IntoIter<OsString>>, opt: &str| {
            it.next()
                .map(PathBuf::from)
                .ok_or_else(|| usage(format!("`{opt}` needs a value")))
        };
        match a.to_str() {
            Some("--exe") => exe = Some(value(&mut it, "--exe")?),
            Some("--list") => set(&mut action, Action::List)?,
            Some("--perf-map") => {
                let f = value(&mut it, "--perf-map")?;
                set(&mut action, Action::PerfMap(f))?
            }
            Some("--elf") => {
                let f = value(&mut it, "--elf")?;
                set(&mut action, Action::Elf(f))?
            }
            Some("--symbolize") => {
                let mut addrs = Vec::new();
                while let Some(next) = it.peek() {
                    match next.to_str() {
                        Some(s) if !s.starts_with("--") => {
                            addrs.push(s.to_string());
                            it.next();
                        }
                        _ => break,
                    }
                }
                set(&mut action, Action::Symbolize(addrs))?
            }
            Some(s) if s.starts_with('-') => return Err(usage(format!("unknown option {s:?}"))),
            _ if core.is_none() => core = Some(PathBuf::from(a)),
            _ => return Err(usage(format!("unexpected argument {a:?}"))),
        }
    }
    let core = core.ok_or_else(|| usage("needs a core file: inspect CORE --exe PROGRAM".into()))?;
    let exe = exe.ok_or_else(|| {
        usage(
            "needs `--exe PROGRAM`, the program that dumped the core (it or one of its shared \
             libraries defines __jit_debug_descriptor)"
                .into(),
        )
    })?;
    Ok(Options {
        core,
        exe,
        action: action.unwrap_or(Action::List),
    })
}

// ---------------------------------------------------------------------------------------
// Reading files: mapped, never read whole

/// Most bytes read from a file that cannot be mapped (a FIFO or socket, e.g. a core piped
/// through `<(zcat core.gz)`): such a file is held in memory whole, so it is bounded.
const MAX_STREAMED: u64 = 256 << 20;

/// A file's bytes. A regular file is mapped read-only and private: only the pages the
/// inspector touches (headers, notes, the JIT list and payloads, symbol tables) are read,
/// so memory does not grow with the file (a 16 GiB sparse core costs what its JIT data
/// costs). A FIFO or socket (or a file its file system cannot map) is read into memory, at
/// most [`MAX_STREAMED`] bytes; devices and directories are refused (`/dev/zero` would never
/// end).
///
/// `libc::mmap` directly rather than a mapping crate: `libc` is already a dependency and
/// the mapping is these few lines.
struct FileBytes {
    /// The mapping (`len` > 0) or null when `read` holds the bytes.
    ptr: *mut libc::c_void,
    len: usize,
    read: Vec<u8>,
}

impl FileBytes {
    /// Opens `path`; errors say `what` it is ("core file", "program", ...) and why not.
    fn open(what: &str, path: &Path) -> Result<FileBytes, String> {
        use std::io::Read;
        use std::os::unix::fs::FileTypeExt;
        use std::os::unix::io::AsRawFd;
        let cannot = |why: String| format!("cannot read the {what} {}: {why}", path.display());
        let file = std::fs::File::open(path).map_err(|e| cannot(e.to_string()))?;
        let meta = file.metadata().map_err(|e| cannot(e.to_string()))?;
        let t = meta.file_type();
        let streamed = t.is_fifo() || t.is_socket();
        if !t.is_file() && !streamed {
            let kind = if t.is_dir() {
                "a directory"
            } else if t.is_char_device() {
                "a character device"
            } else if t.is_block_device() {
                "a block device"
            } else {
                "not a regular file"
            };
            return Err(cannot(format!(
                "it is {kind}; the {what} must be a regular file or a pipe"
            )));
        }
        // Read into memory, at most MAX_STREAMED bytes.
        let read_whole = |kind: &str| -> Result<FileBytes, String> {
            let mut read = Vec::new();
            (&file)
                .take(MAX_STREAMED + 1)
                .read_to_end(&mut read)
                .map_err(|e| cannot(e.to_string()))?;
            if read.len() as u64 > MAX_STREAMED {
                return Err(cannot(format!(
                    "it is {kind} with more than {} MiB, the most read from one (it is held in \
                     memory whole): save it to a regular file, which is mapped",
                    MAX_STREAMED >> 20
                )));
            }
            Ok(FileBytes {
                ptr: std::ptr::null_mut(),
                len: 0,
                read,
            })
        };
        if streamed {
            return read_whole("a pipe or socket");
        }
        let len = usize::try_from(meta.len())
            .map_err(|_| cannot(format!("{} bytes do not fit in memory", meta.len())))?;
        if len == 0 {
            // mmap refuses empty mappings; an empty file is simply no bytes.
            return Ok(FileBytes {
                ptr: std::ptr::null_mut(),
                len: 0,
                read: Vec::new(),
            });
        }
        // SAFETY: a new read-only private mapping of an open regular file, at an address the
        // kernel chooses; it is checked for MAP_FAILED below and unmapped once, in Drop. The
        // file must not shrink while mapped (pages past its new end would fault): core files
        // and programs are not rewritten while they are inspected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            // A file system that cannot map files: read it, bounded like a pipe.
            let why = std::io::Error::last_os_error();
            return read_whole(&format!("a file that cannot be mapped ({why})"));
        }
        Ok(FileBytes {
            ptr,
            len,
            read: Vec::new(),
        })
    }

    fn bytes(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &self.read;
        }
        // SAFETY: `ptr` is our live read-only mapping of `len` bytes (see `open`), unmapped
        // only when `self` is dropped, which the borrow outlives not.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for FileBytes {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: exactly the mapping made in `open`, unmapped once; no borrow of it
            // outlives `self`.
            unsafe { libc::munmap(self.ptr, self.len) };
        }
    }
}

// ---------------------------------------------------------------------------------------
// The core file

/// A PT_LOAD segment: `memsz` bytes of memory at `vaddr`, the first `filesz` of them in the
/// file at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    pub(crate) vaddr: u64,
    pub(crate) memsz: u64,
    pub(crate) offset: u64,
    pub(crate) filesz: u64,
}

/// An NT_FILE entry: the mapping at `start` maps `path` from byte `file_offset`.
#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    file_offset: u64,
    path: String,
}

struct Core<'a> {
    data: &'a [u8],
    /// Sorted by `vaddr`.
    segments: Vec<Segment>,
    mappings: Vec<Mapping>,
    /// AT_ENTRY from NT_AUXV: the main program's entry point.
    entry: Option<u64>,
    /// What could not be read from the headers and notes.
    problems: Vec<String>,
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

impl<'a> Core<'a> {
    fn parse(data: &'a [u8]) -> Result<Core<'a>, String> {
        let header = elf::FileHeader64::<object::Endianness>::parse(data)
            .map_err(|e| format!("not an ELF64 file: {e}"))?;
        let endian = header.endian().map_err(|e| format!("ELF header: {e}"))?;
        if header.e_type(endian) != elf::ET_CORE {
            return Err(format!(
                "not a core file (ELF type {}, a core is {})",
                header.e_type(endian).0,
                elf::ET_CORE.0
            ));
        }
        if !header.is_little_endian() || header.e_machine(endian) != elf::EM_X86_64 {
            return Err(format!(
                "a core of machine {} ({} endian): only little-endian x86-64 cores are supported",
                header.e_machine(endian).0,
                if header.is_little_endian() {
                    "little"
                } else {
                    "big"
                }
            ));
        }
        let phdrs = header.program_headers(endian, data).map_err(|e| {
            format!(
                "program headers: {e} (is the core file truncated? it has {} bytes)",
                data.len()
            )
        })?;
        let mut core = Core {
            data,
            segments: Vec::new(),
            mappings: Vec::new(),
            entry: None,
            problems: Vec::new(),
        };
        for ph in phdrs {
            let t = ph.p_type(endian);
            if t == elf::PT_LOAD {
                core.segments.push(Segment {
                    vaddr: ph.p_vaddr(endian),
                    memsz: ph.p_memsz(endian),
                    offset: ph.p_offset(endian),
                    filesz: ph.p_filesz(endian),
                });
            } else if t == elf::PT_NOTE {
                core.notes(ph, endian);
            }
        }
        core.segments.sort_by_key(|s| s.vaddr);
        let needed = core
            .segments
            .iter()
            .map(|s| s.offset.saturating_add(s.filesz))
            .max()
            .unwrap_or(0);
        if needed > data.len() as u64 {
            core.problems.push(format!(
                "the core file is truncated: its segments need {needed} bytes, it has {}; memory stored beyond the end cannot be read",
                data.len()
            ));
        }
        Ok(core)
    }

    fn notes(&mut self, ph: &elf::ProgramHeader64<object::Endianness>, endian: object::Endianness) {
        let mut notes = match ph.notes(endian, self.data) {
            Ok(Some(n)) => n,
            Ok(None) => return,
            Err(e) => {
                self.problems.push(format!(
                    "note segment at file offset {:#x}: {e} (truncated core?); no NT_FILE/NT_AUXV from it",
                    ph.p_offset(endian)
                ));
                return;
            }
        };
        loop {
            let note = match notes.next() {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    self.problems.push(format!("core notes: {e}"));
                    break;
                }
            };
            if note.name() != b"CORE" {
                continue;
            }
            let t = note.n_type(endian);
            if t == elf::NT_FILE {
                self.nt_file(note.desc());
            } else if t == elf::NT_AUXV {
                let d = note.desc();
                for i in 0..d.len() / 16 {
                    if u64_at(d, i * 16) == Some(9) {
                        // AT_ENTRY
                        self.entry = u64_at(d, i * 16 + 8);
                    }
                }
            }
        }
    }

    /// NT_FILE: count, page size, `count` (start, end, page offset) triples, then `count`
    /// NUL-terminated paths.
    fn nt_file(&mut self, d: &[u8]) {
        let (Some(count), Some(page)) = (u64_at(d, 0), u64_at(d, 8)) else {
            self.problems
                .push("NT_FILE note shorter than its header".into());
            return;
        };
        let triples = 16usize;
        let Some(names_at) = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(24))
            .and_then(|n| n.checked_add(triples))
            .filter(|&n| n <= d.len())
        else {
            self.problems.push(format!(
                "NT_FILE note claims {count} mappings but has {} bytes",
                d.len()
            ));
            return;
        };
        let mut names = d[names_at..].split(|&b| b == 0);
        for i in 0..count as usize {
            let at = triples + i * 24;
            let (Some(start), Some(pgoff)) = (u64_at(d, at), u64_at(d, at + 16)) else {
                break;
            };
            let Some(name) = names.next() else {
                self.problems
                    .push(format!("NT_FILE note: mapping {i} has no path"));
                break;
            };
            self.mappings.push(Mapping {
                start,
                file_offset: pgoff.saturating_mul(page),
                path: String::from_utf8_lossy(name).into_owned(),
            });
        }
    }
}

impl Memory for Core<'_> {
    /// `len` bytes of the process's memory at `addr`.
    fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        let (mut at, mut left) = (addr, len);
        while left > 0 {
            let k = self
                .segments
                .partition_point(|s| s.vaddr <= at)
                .checked_sub(1)
                .filter(|&k| at - self.segments[k].vaddr < self.segments[k].memsz)
                .ok_or_else(|| format!("address {at:#x} is not in the core's memory"))?;
            let s = self.segments[k];
            let into = at - s.vaddr;
            if into >= s.filesz {
                return Err(format!(
                    "address {at:#x} is in a segment the core does not include ({:#x}+{:#x}, {:#x} bytes dumped)",
                    s.vaddr, s.memsz, s.filesz
                ));
            }
            let n = left.min(s.filesz - into);
            let file_at = s.offset.saturating_add(into);
            let file_end = file_at.saturating_add(n);
            if file_end > self.data.len() as u64 {
                return Err(format!(
                    "the core file is truncated: memory at {at:#x} is at file offset {file_at:#x}, beyond its end ({:#x} bytes)",
                    self.data.len()
                ));
            }
            out.extend_from_slice(&self.data[file_at as usize..file_end as usize]);
            at = at.wrapping_add(n);
            left -= n;
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------
// The program: where the descriptor is

struct Program {
    /// Link-time address of `__jit_debug_descriptor`, if the file defines it.
    descriptor: Option<u64>,
    entry: u64,
    kind: object::ObjectKind,
    /// Link-time address of the first byte of the file's first page (the PT_LOAD at file
    /// offset 0).
    base: Option<u64>,
    /// The ELF file header, to recognise the program's first page in the core's memory.
    header: Vec<u8>,
    /// Link-time address of the dynamic section (PT_DYNAMIC): its DT_DEBUG leads to the
    /// dynamic linker's list of loaded libraries.
    dynamic: Option<u64>,
}

const DESCRIPTOR: &[u8] = b"__jit_debug_descriptor";

/// Link-time address of the descriptor `file` defines: its `.symtab`, else its `.dynsym`
/// (a stripped library keeps the dynamic one).
fn descriptor_symbol(file: &object::File<'_>) -> Option<u64> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name_bytes() == Ok(DESCRIPTOR) && s.is_definition())
        .map(|s| s.address())
}

fn program(data: &[u8]) -> Result<Program, String> {
    let file = object::File::parse(data).map_err(|e| format!("not a readable ELF file: {e}"))?;
    let (base, dynamic) = match &file {
        object::File::Elf64(f) => {
            let endian = f.endian();
            let phdrs = f.elf_program_headers();
            let base = phdrs
                .iter()
                .filter(|p| p.p_type(endian) == elf::PT_LOAD)
                .map(|p| p.p_vaddr(endian).wrapping_sub(p.p_offset(endian)))
                .min();
            let dynamic = phdrs
                .iter()
                .find(|p| p.p_type(endian) == elf::PT_DYNAMIC)
                .map(|p| p.p_vaddr(endian));
            (base, dynamic)
        }
        _ => (None, None),
    };
    Ok(Program {
        descriptor: descriptor_symbol(&file),
        entry: file.entry(),
        kind: file.kind(),
        base,
        header: data[..data.len().min(64)].to_vec(),
        dynamic,
    })
}

/// PROGRAM's load bias in the core and how it was found.
fn load_bias(core: &Core<'_>, prog: &Program, exe: &Path) -> Result<(u64, String), String> {
    let canonical = std::fs::canonicalize(exe)
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    let base_name = exe.file_name().map(|n| n.to_string_lossy().into_owned());
    let mapped = |pred: &dyn Fn(&Mapping) -> bool| {
        core.mappings
            .iter()
            .filter(|m| m.file_offset == 0 && pred(m))
            .map(|m| m.start)
            .min()
    };
    let exact = mapped(&|m| Some(&m.path) == canonical.as_ref());
    let by_name = mapped(&|m| {
        Path::new(&m.path)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            == base_name
    });
    if let (Some(start), Some(base)) = (exact.or(by_name), prog.base) {
        let how = if exact.is_some() { "path" } else { "file name" };
        return Ok((
            start.wrapping_sub(base),
            format!("NT_FILE mapping of the same {how} at {start:#x}"),
        ));
    }
    // Without notes (e.g. cut off a truncated core): the program's ELF header in memory.
    if let Some(base) = prog.base.filter(|_| prog.header.len() == 64) {
        let found = core.segments.iter().find(|s| {
            s.filesz >= 64 && core.read(s.vaddr, 64).ok().as_deref() == Some(&prog.header[..])
        });
        if let Some(s) = found {
            return Ok((
                s.vaddr.wrapping_sub(base),
                format!(
                    "its ELF header found in the core's memory at {:#x}",
                    s.vaddr
                ),
            ));
        }
    }
    if let Some(entry) = core.entry.filter(|_| prog.entry != 0) {
        return Ok((
            entry.wrapping_sub(prog.entry),
            format!("AT_ENTRY {entry:#x} - e_entry {:#x}", prog.entry),
        ));
    }
    if prog.kind == object::ObjectKind::Executable {
        return Ok((0, "position-dependent executable".into()));
    }
    Err(format!(
        "cannot find where {} is loaded in the core: no NT_FILE mapping of it, no AT_ENTRY, and its ELF header is not in the core's memory",
        exe.display()
    ))
}

// ---------------------------------------------------------------------------------------
// The program's shared libraries: where the descriptor is when the program lacks it

/// The descriptor the report reads: its run-time address, the file that defines it and that
/// file's load bias.
struct Located {
    addr: u64,
    file: String,
    bias: u64,
    how: String,
    /// What the reader should know about the choice (a library used, other definitions).
    notes: Vec<String>,
    /// Files that could not be searched.
    problems: Vec<String>,
}

/// Where a loaded file is in the process: the link map's `l_addr` (the load bias itself), or
/// the start of its NT_FILE mapping of file offset 0.
#[derive(Debug, Clone, Copy)]
enum Placed {
    LinkMap(u64),
    Mapping(u64),
}

/// A file of the process that may define the descriptor.
#[derive(Debug, Clone)]
struct Library {
    path: String,
    placed: Placed,
}

/// Most entries of a dynamic section, libraries of a link map and bytes of a library's name
/// read from a core: a damaged core cannot make the walk run on.
const MAX_DYNAMIC: u64 = 4096;
const MAX_LIBRARIES: usize = 65536;
const MAX_NAME: u64 = 4096;

const DT_NULL: u64 = 0;
const DT_DEBUG: u64 = 21;

/// A NUL-terminated string of at most [`MAX_NAME`] bytes at `addr` in the core's memory.
fn c_string(core: &Core<'_>, addr: u64) -> Result<String, String> {
    let mut out = Vec::new();
    // Chunks within one page, so a string ending just before unreadable memory is read.
    let mut at = addr;
    while (out.len() as u64) < MAX_NAME {
        let n = 0x1000 - (at & 0xfff);
        let chunk = core.read(at, n)?;
        if let Some(end) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
        out.extend_from_slice(&chunk);
        at = at.wrapping_add(n);
    }
    Err(format!("no NUL in the first {MAX_NAME} bytes at {addr:#x}"))
}

/// The shared libraries of the process in the dynamic linker's load order (GDB's order: the
/// order symbol lookups bind in), from the link map: the program's dynamic section (at
/// `dynamic` in the core) -> DT_DEBUG -> `struct r_debug` -> `struct link_map` list.
fn link_map(core: &Core<'_>, dynamic: u64) -> Result<Vec<Library>, String> {
    let mut r_debug = None;
    for i in 0..MAX_DYNAMIC {
        let at = dynamic.wrapping_add(i * 16);
        let tag = core.read_u64(at)?;
        if tag == DT_NULL {
            break;
        }
        if tag == DT_DEBUG {
            r_debug = Some(core.read_u64(at.wrapping_add(8))?);
            break;
        }
    }
    let r_debug = r_debug.filter(|&a| a != 0).ok_or(
        "the program's dynamic section has no DT_DEBUG set: a static program, or dumped before \
         the dynamic linker ran",
    )?;
    // r_debug { int r_version; struct link_map *r_map; ... }
    // link_map { l_addr; char *l_name; l_ld; link_map *l_next; ... }
    let mut node = core.read_u64(r_debug.wrapping_add(8))?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    while node != 0 {
        if !seen.insert(node) || seen.len() > MAX_LIBRARIES {
            return Err(format!("the link map loops (at {node:#x})"));
        }
        let l_addr = core.read_u64(node)?;
        let name = c_string(core, core.read_u64(node.wrapping_add(8))?)?;
        // The program itself has no name; the vDSO's (`linux-vdso.so.1`) is no file.
        if name.contains('/') {
            let path = if Path::new(&name).is_absolute() {
                name
            } else {
                // Relative to the process's directory: the kernel's absolute path instead.
                let file_name = Path::new(&name).file_name();
                core.mappings
                    .iter()
                    .find(|m| Path::new(&m.path).file_name() == file_name)
                    .map_or(name.clone(), |m| m.path.clone())
            };
            out.push(Library {
                path,
                placed: Placed::LinkMap(l_addr),
            });
        }
        node = core.read_u64(node.wrapping_add(24))?;
    }
    Ok(out)
}

/// A path as this machine resolves it (symlinks followed), to compare the link map's names
/// with the kernel's (NT_FILE gives resolved paths).
fn canonical(path: &str) -> String {
    std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| path.to_string())
}

/// Finds the descriptor in the shared libraries of the process, for a program that does not
/// define it. Every library is searched, in load order (the link map's) where the core has
/// the link map, else in NT_FILE (address) order; the first that defines it is the one every
/// reference binds to, as in GDB.
fn in_libraries(
    core: &Core<'_>,
    prog: &Program,
    exe_bias: Option<u64>,
    exe: &Path,
) -> Result<Located, String> {
    let mut notes = Vec::new();
    let mut problems = Vec::new();
    let dynamic = match (prog.dynamic, exe_bias) {
        (Some(d), Some(bias)) => Ok(d.wrapping_add(bias)),
        (None, _) => Err("the program has no dynamic section".to_string()),
        (_, None) => Err("the program's load address is unknown".to_string()),
    };
    let (mut libraries, from_link_map) = match dynamic.and_then(|d| link_map(core, d)) {
        Ok(libs) => (libs, true),
        Err(why) => {
            notes.push(format!(
                "the link map cannot be read ({why}): libraries searched in address order"
            ));
            (Vec::new(), false)
        }
    };
    // Every other mapped file too (all of them without a link map): NT_FILE paths are
    // resolved, so compare resolved paths.
    let exe_path = canonical(&exe.to_string_lossy());
    let mut known: std::collections::HashSet<String> = libraries
        .iter()
        .map(|l| canonical(&l.path))
        .chain([exe_path])
        .collect();
    for m in core.mappings.iter().filter(|m| m.file_offset == 0) {
        let resolved = canonical(&m.path);
        let new = !known.contains(&m.path) && !known.contains(&resolved);
        known.insert(resolved);
        known.insert(m.path.clone());
        if new {
            libraries.push(Library {
                path: m.path.clone(),
                placed: Placed::Mapping(m.start),
            });
        }
    }
    let mut found = Vec::new();
    let mut searched = 0;
    for lib in &libraries {
        let in_link_map = matches!(lib.placed, Placed::LinkMap(_));
        // Without a link map, any mapped file may be a library: a missing one matters.
        let matters = in_link_map || !from_link_map;
        if lib.path.starts_with("/dev/") || lib.path.starts_with("/memfd:") {
            continue;
        }
        let bytes = match FileBytes::open("shared library", Path::new(&lib.path)) {
            Ok(b) => b,
            Err(e) => {
                if matters {
                    problems.push(format!("{e}: not searched for the descriptor"));
                }
                continue;
            }
        };
        let file = match object::File::parse(bytes.bytes()) {
            Ok(f) => f,
            // A mapped data file (locale archive, font...); a library of the link map that
            // is not ELF is not what the process loaded.
            Err(e) => {
                if in_link_map {
                    problems.push(format!(
                        "shared library {}: not a readable ELF file ({e}): not searched for the descriptor",
                        lib.path
                    ));
                }
                continue;
            }
        };
        searched += 1;
        let Some(symbol) = descriptor_symbol(&file) else {
            continue;
        };
        let base = match &file {
            object::File::Elf64(f) => {
                let endian = f.endian();
                f.elf_program_headers()
                    .iter()
                    .filter(|p| p.p_type(endian) == elf::PT_LOAD)
                    .map(|p| p.p_vaddr(endian).wrapping_sub(p.p_offset(endian)))
                    .min()
            }
            _ => None,
        };
        let (bias, how) = match (lib.placed, base) {
            (Placed::LinkMap(l_addr), _) => (l_addr, format!("link map l_addr {l_addr:#x}")),
            (Placed::Mapping(start), Some(base)) => (
                start.wrapping_sub(base),
                format!("NT_FILE mapping at {start:#x}"),
            ),
            (Placed::Mapping(_), None) => {
                problems.push(format!(
                    "shared library {}: defines the descriptor but has no loadable segment",
                    lib.path
                ));
                continue;
            }
        };
        // A file of the same name but another build would give a wrong address: where the
        // core holds the file's first bytes, they must be this file's.
        let header = &bytes.bytes()[..bytes.bytes().len().min(64)];
        if let Some(in_core) = base.and_then(|b| core.read(b.wrapping_add(bias), 64).ok()) {
            if in_core != header {
                problems.push(format!(
                    "shared library {}: not the file the process loaded (its ELF header differs from the core's copy at {:#x}): not used",
                    lib.path,
                    base.unwrap_or(0).wrapping_add(bias)
                ));
                continue;
            }
        }
        found.push((lib.path.clone(), symbol.wrapping_add(bias), bias, how));
    }
    if found.is_empty() {
        let mut why = format!(
            "{}: it does not define __jit_debug_descriptor (a stripped binary loses it; give the \
             unstripped program), and neither does any of the {searched} shared libraries and \
             mapped ELF files of the core",
            exe.display()
        );
        for p in notes.iter().chain(&problems) {
            why.push_str("\n  ");
            why.push_str(p);
        }
        return Err(why);
    }
    // A library that keeps its descriptor to itself (hidden, as jit-interface's cdylib does)
    // does not share it with another that defines one too: GDB reads every file's list.
    // The report reads one: the first in load order that has entries (version 1, a first
    // entry), else the first; the others are named.
    let in_use =
        |addr: u64| read_descriptor(core, addr).is_ok_and(|d| d.version == 1 && d.first_entry != 0);
    let chosen = found.iter().position(|f| in_use(f.1)).unwrap_or(0);
    let (file, addr, bias, how) = &found[chosen];
    notes.insert(
        0,
        format!(
            "{} does not define __jit_debug_descriptor: found in its shared library {file}{}",
            exe.display(),
            if from_link_map {
                " (libraries searched in load order, from the dynamic linker's list)"
            } else {
                ""
            }
        ),
    );
    for (i, other) in found.iter().enumerate().filter(|&(i, _)| i != chosen) {
        notes.push(if in_use(other.1) {
            format!(
                "{} also defines __jit_debug_descriptor, with entries of its own at {:#x} (GDB reads them too): `--exe {}` lists them",
                other.0, other.1, other.0
            )
        } else {
            format!(
                "{} also defines __jit_debug_descriptor, at {:#x}, with no entries{}",
                other.0,
                other.1,
                if i < chosen {
                    " (skipped for the next one in load order)"
                } else {
                    ""
                }
            )
        });
    }
    Ok(Located {
        addr: *addr,
        file: file.clone(),
        bias: *bias,
        how: how.clone(),
        notes,
        problems,
    })
}

// ---------------------------------------------------------------------------------------
// The entry list

/// What `inspect` read from a core: the descriptor, the entry list and every problem met.
pub(crate) struct Report {
    /// Run-time address of `__jit_debug_descriptor`.
    pub(crate) descriptor: u64,
    /// The file that defines it: the program, or one of its shared libraries.
    pub(crate) descriptor_file: String,
    /// Load bias of that file, and how it was found.
    pub(crate) bias: u64,
    pub(crate) bias_how: String,
    /// Facts about the choice of that file (not problems).
    pub(crate) notes: Vec<String>,
    pub(crate) list: ListReport,
    /// Problems outside any one payload (core headers, the list itself).
    pub(crate) problems: Vec<String>,
    /// The core's PT_LOAD segments, sorted by address (the launcher's check repairs the
    /// list through them).
    pub(crate) segments: Vec<Segment>,
}

impl Report {
    pub(crate) fn entries(&self) -> &[ListEntry] {
        &self.list.entries
    }

    /// The symbolizer of every function, with the newest registration owning shared
    /// addresses.
    pub(crate) fn symbolizer(&self) -> Symbolizer {
        Symbolizer::new(self.list.functions_oldest_first().cloned().collect())
    }

    /// Every problem, the payloads' included, as lines.
    pub(crate) fn all_problems(&self) -> Vec<String> {
        let mut out = self.problems.clone();
        for (i, e) in self.entries().iter().enumerate() {
            match &e.result {
                Err(why) => out.push(format!("entry {i} at {:#x}: {why}", e.addr)),
                Ok(p) => out.extend(
                    p.problems
                        .iter()
                        .map(|why| format!("entry {i} at {:#x}: {why}", e.addr)),
                ),
            }
        }
        out
    }
}

/// A list problem as `inspect` words it: a bad version most likely means the wrong --exe.
fn list_problem(p: &ListProblem) -> String {
    match p {
        ListProblem::Version { version } => format!(
            "the descriptor's version is {version}, not 1: is --exe the program that dumped this core? (GDB ignores such a descriptor)"
        ),
        p => p.to_string(),
    }
}

/// Reads the JIT list of `core`, dumped by `exe`, without GDB: the launcher's pre-check and
/// every `inspect` action. `Err` only when nothing could be read (unreadable files, no
/// descriptor); damage found on the way is in [`Report::all_problems`].
pub(crate) fn check(core: &Path, exe: &Path) -> Result<Report, String> {
    inspect(core, exe)
}

fn inspect(core_path: &Path, exe: &Path) -> Result<Report, String> {
    let core_data = FileBytes::open("core file", core_path)?;
    let exe_data = FileBytes::open("program", exe)?;
    let core =
        Core::parse(core_data.bytes()).map_err(|e| format!("{}: {e}", core_path.display()))?;
    let prog = program(exe_data.bytes()).map_err(|e| format!("{}: {e}", exe.display()))?;
    let exe_bias = load_bias(&core, &prog, exe);
    let located = match (prog.descriptor, exe_bias) {
        (Some(symbol), Ok((bias, how))) => Located {
            addr: symbol.wrapping_add(bias),
            file: exe.display().to_string(),
            bias,
            how,
            notes: Vec::new(),
            problems: Vec::new(),
        },
        (Some(_), Err(e)) => return Err(e),
        (None, bias) => in_libraries(&core, &prog, bias.ok().map(|b| b.0), exe)?,
    };
    let list = walk_list(&core, located.addr, &Limits::default())?;
    let mut problems = core.problems.clone();
    problems.extend(located.problems);
    problems.extend(list.problems.iter().map(list_problem));
    Ok(Report {
        descriptor: located.addr,
        descriptor_file: located.file,
        bias: located.bias,
        bias_how: located.how,
        notes: located.notes,
        list,
        problems,
        segments: core.segments.clone(),
    })
}

/// The list walk of `core_path` alone and the core's segments, for the launcher's check
/// before GDB reads the core (`crate::core_check`).
pub(crate) fn walk_core(
    core_path: &Path,
    exe: &Path,
) -> Result<(ListReport, Vec<Segment>), String> {
    inspect(core_path, exe).map(|r| (r.list, r.segments))
}

// ---------------------------------------------------------------------------------------
// Output

/// Parses an address in hex, with or without `0x` (as addr2line reads them).
fn parse_addr(s: &str) -> Option<u64> {
    let h = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u64::from_str_radix(h, 16).ok()
}

/// Most bytes of a source file on disk that `--symbolize` reads to show a line of it.
const MAX_SOURCE_FILE: u64 = 64 << 20;

/// The text of source lines for `--symbolize`: from the texts the payloads carry (the
/// function's own object's first, then any payload's for the same file name), else from
/// the file on disk if it can be read. Each text is split into lines once.
struct SourceLines<'r> {
    /// The texts of each (entry, object), by file name.
    carried: HashMap<(usize, usize, &'r str), &'r str>,
    /// The first text any payload carries for a file name.
    any: HashMap<&'r str, &'r str>,
    /// The (entry, object) of each function, by start address (the last one wins).
    owner: HashMap<u64, (usize, usize)>,
    /// Texts split into lines: carried ones by address, files on disk by name (`None`:
    /// not readable).
    split: HashMap<*const u8, Vec<&'r str>>,
    disk: HashMap<String, Option<Vec<String>>>,
}

impl<'r> SourceLines<'r> {
    fn new(report: &'r Report) -> SourceLines<'r> {
        let mut lines = SourceLines {
            carried: HashMap::new(),
            any: HashMap::new(),
            owner: HashMap::new(),
            split: HashMap::new(),
            disk: HashMap::new(),
        };
        for (e, entry) in report.entries().iter().enumerate() {
            let Ok(p) = &entry.result else { continue };
            for f in &p.functions {
                lines.owner.insert(f.start, (e, f.object));
            }
            for s in &p.sources {
                lines
                    .carried
                    .entry((e, s.object, s.file.as_str()))
                    .or_insert(&s.text);
                lines.any.entry(s.file.as_str()).or_insert(&s.text);
            }
        }
        lines
    }

    /// Line `line` of `file`, the source of `f`, trimmed (`None`: no text, no such line).
    fn line(&mut self, f: &FunctionInfo, file: &str, line: u32) -> Option<String> {
        let i = usize::try_from(line).ok()?.checked_sub(1)?;
        let own = self
            .owner
            .get(&f.start)
            .and_then(|&(e, o)| self.carried.get(&(e, o, file)));
        let text = own.or_else(|| self.any.get(file)).copied();
        let got = match text {
            Some(text) => {
                let lines = self
                    .split
                    .entry(text.as_ptr())
                    .or_insert_with(|| text.lines().collect());
                lines.get(i).map(|l| l.to_string())
            }
            None => {
                let lines = self
                    .disk
                    .entry(file.to_string())
                    .or_insert_with(|| read_source_file(file));
                lines.as_ref()?.get(i).cloned()
            }
        };
        got.map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
    }
}

/// The lines of source file `path` on disk, if it is a readable regular file of at most
/// `MAX_SOURCE_FILE` bytes (the name comes from the core: no devices, nothing huge).
fn read_source_file(path: &str) -> Option<Vec<String>> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_SOURCE_FILE {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    Some(
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// `ADDR NAME+OFFSET [FILE:LINE[\tSOURCE LINE]]`: the source line's text after a tab, when
/// the payload carries the file's text or the file can be read.
fn symbolize_line(s: &Symbolizer, sources: &mut SourceLines<'_>, token: &str) -> String {
    let Some(addr) = parse_addr(token) else {
        return format!("{token} ?? (not a hex address)");
    };
    match s.lookup(addr) {
        Some(hit) => {
            let mut line = format!("{addr:#x} {}+{:#x}", hit.function.name, hit.offset);
            if let Some(loc) = hit.location() {
                line.push(' ');
                line.push_str(&loc);
                if let (Some(file), Some(n)) = (&hit.function.file, hit.line) {
                    if let Some(text) = sources.line(hit.function, file, n) {
                        line.push('\t');
                        line.push_str(&text);
                    }
                }
            }
            line
        }
        None => format!("{addr:#x} ??"),
    }
}

fn list(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "descriptor: {} at {:#x} (load bias {:#x}, {})",
        report.descriptor_file, report.descriptor, report.bias, report.bias_how
    )?;
    for n in &report.notes {
        writeln!(out, "note: {n}")?;
    }
    writeln!(out, "{}", report.list.descriptor)?;
    let mut functions = 0;
    for (i, e) in report.entries().iter().enumerate() {
        write!(
            out,
            "entry {i} at {:#x}: payload {:#x}, {} bytes: ",
            e.addr, e.payload_addr, e.payload_size
        )?;
        match &e.result {
            Err(why) => writeln!(out, "error: {why}")?,
            Ok(p) => {
                writeln!(
                    out,
                    "{}, {} functions{}",
                    p.kind.name(),
                    p.functions.len(),
                    if p.objects.len() > 1 {
                        format!(" in {} objects", p.objects.len())
                    } else {
                        String::new()
                    }
                )?;
                for why in &p.problems {
                    writeln!(out, "  problem: {why}")?;
                }
                // Address order reads best; the payload's own order is registration order.
                let mut sorted: Vec<&FunctionInfo> = p.functions.iter().collect();
                sorted.sort_by_key(|f| f.start);
                for f in sorted {
                    functions += 1;
                    writeln!(
                        out,
                        "  {:#018x} {:>6} {} {}",
                        f.start,
                        f.size,
                        f.name,
                        f.file.as_deref().unwrap_or("-")
                    )?;
                }
            }
        }
    }
    for p in &report.problems {
        writeln!(out, "problem: {p}")?;
    }
    let errors = report.all_problems().len();
    writeln!(
        out,
        "{} entries, {functions} functions, {errors} problems",
        report.entries().len()
    )
}

/// What the exports write: the address ranges each function owns under the overlap rule (a
/// function partly covered by a newer one keeps the rest, possibly in pieces), in address
/// order, with a message for every function of no size or not written whole.
fn owned_ranges(report: &Report) -> (Symbolizer, Vec<String>) {
    let s = report.symbolizer();
    let ranges: Vec<(u64, u64, usize)> = s.ranges().collect();
    let mut owned = vec![0u64; s.functions().len()];
    for &(a, b, o) in &ranges {
        owned[o] += b - a;
    }
    let mut skipped = Vec::new();
    let mut sorted: Vec<usize> = (0..s.functions().len()).collect();
    sorted.sort_by_key(|&i| s.functions()[i].start);
    for i in sorted {
        let f = &s.functions()[i];
        if f.size == 0 {
            skipped.push(format!(
                "`{}` at {:#x} has no size: left out",
                f.name, f.start
            ));
            continue;
        }
        if owned[i] == f.size {
            continue;
        }
        // The first range inside the function that a newer one owns.
        let k = ranges.partition_point(|&(_, b, _)| b <= f.start);
        let Some(&(_, _, newer)) = ranges[k..]
            .iter()
            .take_while(|&&(a, _, _)| a < f.end())
            .find(|&&(_, _, o)| o != i)
        else {
            continue;
        };
        let g = &s.functions()[newer];
        skipped.push(format!(
            "`{}` at {:#x} overlaps `{}` at {:#x}, registered later, which owns the shared addresses: {}",
            f.name,
            f.start,
            g.name,
            g.start,
            if owned[i] == 0 {
                "left out".to_string()
            } else {
                format!("{} of its {} bytes written", owned[i], f.size)
            }
        ));
    }
    (s, skipped)
}

fn perf_map(report: &Report, path: &Path) -> Result<Vec<String>, String> {
    let (s, skipped) = owned_ranges(report);
    let mut text = String::new();
    let mut n = 0;
    for (a, b, o) in s.ranges() {
        text.push_str(&format!("{a:x} {:x} {}\n", b - a, s.functions()[o].name));
        n += 1;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {n} functions to {}", path.display());
    Ok(skipped)
}

fn elf_file(report: &Report, path: &Path) -> Result<Vec<String>, String> {
    let (s, mut skipped) = owned_ranges(report);
    let mut obj = jit_interface::JitObject::new();
    for (start, end, o) in s.ranges() {
        let f = &s.functions()[o];
        let id = match obj.add_function(&f.name, start, end - start) {
            Ok(id) => id,
            Err(e) => {
                skipped.push(format!("`{}` left out: {e}", f.name));
                continue;
            }
        };
        if let Some(file) = &f.file {
            // A piece that starts inside a row begins with that row's line (none inside a
            // gap, whose code before the next row then has no line, as in the gap). Gap
            // rows (line 0) are kept.
            let carried = f
                .line_at(start)
                .filter(|_| !f.lines.iter().any(|&(a, _)| a == start));
            let rows: Vec<jit_interface::LineRow> = carried
                .map(|line| (start, line))
                .into_iter()
                .chain(f.lines.iter().copied())
                .filter(|&(a, _)| a >= start && a < end)
                .map(|(a, line)| jit_interface::LineRow {
                    offset: (a - start) as u32,
                    line,
                })
                .collect();
            if let Err(e) = obj.set_lines(id, file, &rows) {
                skipped.push(format!("`{}`: line rows left out: {e}", f.name));
            }
        }
    }
    if obj.functions().is_empty() {
        return Err("no function to write".into());
    }
    let bytes = jit_interface::elf::encode(&obj).map_err(|e| format!("ELF encoder: {e}"))?;
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!(
        "wrote {} functions to {}",
        obj.functions().len(),
        path.display()
    );
    Ok(skipped)
}

/// Runs `inspect`; returns the exit status.
pub fn run(o: &Options) -> Result<i32, String> {
    let report = check(&o.core, &o.exe)?;
    let mut problems = report.all_problems();
    let stdout = std::io::stdout();
    let io = |e: std::io::Error| format!("writing the report: {e}");
    match &o.action {
        Action::List => list(&report, &mut stdout.lock()).map_err(io)?,
        Action::Symbolize(addrs) => {
            let s = report.symbolizer();
            let mut sources = SourceLines::new(&report);
            let mut out = std::io::BufWriter::new(stdout.lock());
            if addrs.is_empty() {
                for line in std::io::stdin().lock().lines() {
                    let line = line.map_err(|e| format!("reading addresses from stdin: {e}"))?;
                    for t in line.split_whitespace() {
                        writeln!(out, "{}", symbolize_line(&s, &mut sources, t)).map_err(io)?;
                    }
                }
            } else {
                for t in addrs {
                    writeln!(out, "{}", symbolize_line(&s, &mut sources, t)).map_err(io)?;
                }
            }
            out.flush().map_err(io)?;
        }
        Action::PerfMap(path) => problems.extend(perf_map(&report, path)?),
        Action::Elf(path) => problems.extend(elf_file(&report, path)?),
    }
    if o.action != Action::List {
        // Which file the descriptor came from, when not the program (--list prints it).
        for n in &report.notes {
            eprintln!("jit-gdb inspect: note: {n}");
        }
    }
    if problems.is_empty() {
        return Ok(0);
    }
    if o.action != Action::List {
        for p in &problems {
            eprintln!("jit-gdb inspect: {p}");
        }
    }
    eprintln!(
        "jit-gdb inspect: {} problem(s) reading {}: the report is partial (exit status {EXIT_PARTIAL})",
        problems.len(),
        o.core.display()
    );
    Ok(EXIT_PARTIAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Options, UsageError> {
        parse(args.iter().map(OsString::from).collect())
    }

    #[test]
    fn options() {
        let o = p(&["core.1", "--exe", "prog"]).unwrap();
        assert_eq!(o.action, Action::List);
        let o = p(&["--symbolize", "0x10", "20", "--exe", "prog", "core"]).unwrap();
        assert_eq!(
            o.action,
            Action::Symbolize(vec!["0x10".into(), "20".into()])
        );
        assert_eq!(o.core, PathBuf::from("core"));
        let o = p(&["core", "--exe", "prog", "--symbolize"]).unwrap();
        assert_eq!(o.action, Action::Symbolize(vec![]));
        assert!(p(&["core"]).unwrap_err().0.contains("--exe"));
        assert!(p(&["--exe", "x"]).unwrap_err().0.contains("core file"));
        assert!(p(&["c", "--exe", "x", "--list", "--elf", "f"])
            .unwrap_err()
            .0
            .contains("one of"));
        assert!(p(&["c", "--exe"]).unwrap_err().0.contains("needs a value"));
    }

    /// A report of one entry holding `payload`.
    fn report_of(payload: &[u8]) -> Report {
        Report {
            descriptor: 0,
            descriptor_file: String::new(),
            bias: 0,
            bias_how: String::new(),
            notes: Vec::new(),
            segments: Vec::new(),
            list: ListReport {
                descriptor: jit_interface::inspect::Descriptor {
                    addr: 0,
                    version: 1,
                    action_flag: 0,
                    relevant_entry: 0x1000,
                    first_entry: 0x1000,
                },
                entries: vec![ListEntry {
                    addr: 0x1000,
                    next: 0,
                    prev: 0,
                    payload_addr: 0x2000,
                    payload_size: payload.len() as u64,
                    kind: None,
                    result: Ok(jit_interface::inspect::decode_payload(payload).unwrap()),
                    dropped: 0,
                }],
                problems: Vec::new(),
            },
            problems: Vec::new(),
        }
    }

    #[test]
    fn symbolize_shows_the_source_line_when_it_has_the_text() {
        use jit_interface::{JitObject, LineRow};
        let dir = std::env::temp_dir().join(format!("jit-gdb-inspect-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let on_disk = dir.join("disk.js");
        std::fs::write(&on_disk, "one\n  two on disk  \n").unwrap();
        let on_disk = on_disk.to_str().unwrap();
        let mut o = JitObject::new();
        let rows = |a, b| {
            [
                LineRow { offset: 0, line: a },
                LineRow { offset: 8, line: b },
            ]
        };
        let f = o.add_function("fib", 0x7000, 16).unwrap();
        o.set_lines(f, "fib.js", &rows(7, 9)).unwrap();
        o.set_source("fib.js", "1\n2\n3\n4\n5\n6\n    let p = probe(n);\n8\n\n")
            .unwrap();
        let g = o.add_function("disk", 0x7010, 16).unwrap();
        o.set_lines(g, on_disk, &rows(2, 5)).unwrap();
        let h = o.add_function("nowhere", 0x7020, 16).unwrap();
        o.set_lines(h, "/no/such/file.js", &rows(1, 2)).unwrap();
        let report = report_of(&jit_interface::format::encode(&o, None).unwrap());
        let s = report.symbolizer();
        let mut sources = SourceLines::new(&report);
        let mut sym = |a| symbolize_line(&s, &mut sources, a);
        // The carried text; the file on disk; neither: the line as it always was.
        assert_eq!(sym("0x7004"), "0x7004 fib+0x4 fib.js:7\tlet p = probe(n);");
        assert_eq!(
            sym("7008"),
            "0x7008 fib+0x8 fib.js:9",
            "a blank line adds nothing"
        );
        assert_eq!(
            sym("0x7010"),
            format!("0x7010 disk+0x0 {on_disk}:2\ttwo on disk")
        );
        assert_eq!(
            sym("0x7018"),
            format!("0x7018 disk+0x8 {on_disk}:5"),
            "past the end"
        );
        assert_eq!(sym("0x7020"), "0x7020 nowhere+0x0 /no/such/file.js:1");
        assert_eq!(sym("0x9000"), "0x9000 ??");
        // The fields before the text are whitespace-separated as before.
        let line = sym("0x7004");
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&w[..3], ["0x7004", "fib+0x4", "fib.js:7"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--symbolize` in a gap row (line 0): the function and offset, no `file:line`.
    #[test]
    fn symbolize_gives_no_line_in_a_gap() {
        use jit_interface::{JitObject, LineRow};
        let mut o = JitObject::new();
        let f = o.add_function("glue", 0x7000, 16).unwrap();
        let rows = [LineRow::new(0, 3), LineRow::gap(4), LineRow::new(8, 4)];
        o.set_lines(f, "g.js", &rows).unwrap();
        o.set_source("g.js", "1\n2\nthree\nfour\n").unwrap();
        let report = report_of(&jit_interface::format::encode(&o, None).unwrap());
        let s = report.symbolizer();
        let mut sources = SourceLines::new(&report);
        let mut sym = |a| symbolize_line(&s, &mut sources, a);
        assert_eq!(sym("0x7003"), "0x7003 glue+0x3 g.js:3\tthree");
        assert_eq!(sym("0x7004"), "0x7004 glue+0x4");
        assert_eq!(sym("0x7007"), "0x7007 glue+0x7");
        assert_eq!(sym("0x7008"), "0x7008 glue+0x8 g.js:4\tfour");
        // The ELF file written from the report keeps the gap.
        let path = std::env::temp_dir().join(format!("jit-gdb-gap-{}.elf", std::process::id()));
        let skipped = elf_file(&report, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        let info = jit_interface::inspect::decode_payload(&bytes).unwrap();
        assert_eq!(
            info.functions[0].lines,
            [(0x7000, 3), (0x7004, 0), (0x7008, 4)]
        );
    }

    #[test]
    fn addresses_are_hex() {
        assert_eq!(parse_addr("0x1f"), Some(0x1f));
        assert_eq!(parse_addr("1f"), Some(0x1f));
        assert_eq!(parse_addr("zz"), None);
    }
}
