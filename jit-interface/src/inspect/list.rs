//! Walking GDB's JIT entry list (`__jit_debug_descriptor` and its `jit_code_entry` chain) in
//! another process's memory or a core file, through a [`Memory`] the caller provides: the
//! one read-side walker of the project (the core inspector reads a core file, the GDB
//! scripts read the inferior through the reader's `jitgdb_walk_list_json`).
//!
//! The memory may hold anything: the walk is bounded (cycle detection, caps on entries and
//! payload sizes), never panics, and reports what it could not read next to what it could.
//! Each payload is decoded ([`decode_payload`]) and its unregistered objects are dropped
//! ([`PayloadInfo::drop_unregistered`]) before it is reported.
//!
//! Layout (GDB's `gdb/jit.h`, version 1, 64-bit little-endian targets):
//! `struct jit_descriptor { u32 version; u32 action_flag; entry *relevant_entry;
//! entry *first_entry; }` and `struct jit_code_entry { entry *next, *prev;
//! const char *symfile_addr; u64 symfile_size; }`.

use std::collections::HashSet;
use std::fmt;

use super::{decode_payload, FunctionInfo, PayloadInfo, PayloadKind, ELF_MAGIC};

/// The memory of a process (live or dumped in a core file).
pub trait Memory {
    /// `len` bytes at `addr`, or a message naming why they cannot be read.
    fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>, String>;

    /// A little-endian 64-bit word at `addr`.
    fn read_u64(&self, addr: u64) -> Result<u64, String> {
        let b = self.read(addr, 8)?;
        let b: [u8; 8] = b
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| format!("short read of 8 bytes at {addr:#x}"))?;
        Ok(u64::from_le_bytes(b))
    }
}

impl<M: Memory + ?Sized> Memory for &M {
    fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>, String> {
        (**self).read(addr, len)
    }
}

/// Size of `struct jit_descriptor`.
pub const DESCRIPTOR_SIZE: u64 = 24;
/// Size of `struct jit_code_entry`.
pub const ENTRY_SIZE: u64 = 32;

/// Caps that bound a walk over damaged memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most entries walked.
    pub max_entries: usize,
    /// Largest payload read.
    pub max_payload: u64,
    /// Most payload bytes read in total.
    pub max_total_payload: u64,
}

impl Default for Limits {
    /// Far more than any runtime registers (4M entries, 256 MiB a payload, 2 GiB in all),
    /// small enough to bound the time and memory a corrupt list can take.
    fn default() -> Limits {
        Limits {
            max_entries: 1 << 22,
            max_payload: 256 << 20,
            max_total_payload: 2 << 30,
        }
    }
}

/// The descriptor's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub addr: u64,
    pub version: u32,
    pub action_flag: u32,
    pub relevant_entry: u64,
    pub first_entry: u64,
}

impl fmt::Display for Descriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "__jit_debug_descriptor at {:#x}: version {}, action_flag {}, relevant_entry {:#x}, first_entry {:#x}",
            self.addr, self.version, self.action_flag, self.relevant_entry, self.first_entry
        )
    }
}

/// Why an entry's payload is not reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryError {
    /// Size 0: the entry names no payload.
    Empty,
    /// Over [`Limits::max_payload`] (`addr`: the payload's address).
    TooLarge { addr: u64, size: u64, limit: u64 },
    /// The payloads read so far and this one exceed [`Limits::max_total_payload`].
    TotalTooLarge { limit: u64 },
    /// The payload's bytes cannot be read.
    Unreadable { why: String },
    /// The decoder refused the bytes (its message).
    Decode(String),
}

impl fmt::Display for EntryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryError::Empty => write!(f, "payload size 0: the entry has no payload"),
            EntryError::TooLarge { addr, size, limit } => write!(
                f,
                "payload size {size} at {addr:#x} is over the {limit}-byte limit (damaged entry?)"
            ),
            EntryError::TotalTooLarge { limit } => {
                write!(f, "payloads exceed {limit} bytes in total; not read")
            }
            EntryError::Unreadable { why } => write!(f, "{why}"),
            EntryError::Decode(why) => write!(f, "{why}"),
        }
    }
}

/// One `jit_code_entry` and what its payload holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    pub addr: u64,
    pub next: u64,
    pub prev: u64,
    pub payload_addr: u64,
    pub payload_size: u64,
    /// The payload kind its first bytes announce (`None`: not read, or neither magic),
    /// known even when decoding fails.
    pub kind: Option<PayloadKind>,
    /// The decoded payload without its unregistered objects' functions and sources.
    pub result: Result<PayloadInfo, EntryError>,
    /// How many objects were dropped as unregistered.
    pub dropped: usize,
}

/// What is wrong with the list itself (the entries' own errors are in [`ListEntry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListProblem {
    /// GDB ignores a descriptor whose version is not 1.
    Version { version: u32 },
    /// Entry `index` points back to `target`, an entry already walked.
    Loop { index: usize, target: u64 },
    /// The walk stopped after `limit` entries.
    TooManyEntries { limit: usize },
    /// Entry `index` at `addr` has `prev` where `expected` (the entry before it) was due.
    PrevMismatch {
        index: usize,
        addr: u64,
        prev: u64,
        expected: u64,
    },
    /// Entry `index` at `addr` cannot be read; the walk ends there.
    UnreadableEntry {
        index: usize,
        addr: u64,
        why: String,
    },
}

impl fmt::Display for ListProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListProblem::Version { version } => write!(
                f,
                "the descriptor's version is {version}, not 1 (GDB ignores such a descriptor: not initialised yet, damaged, or not this program's)"
            ),
            ListProblem::Loop { index, target } => write!(
                f,
                "the entry list loops: entry {index} points back to {target:#x}; stopped there"
            ),
            ListProblem::TooManyEntries { limit } => write!(
                f,
                "stopped after {limit} entries: the list is longer than any runtime makes (damaged?)"
            ),
            ListProblem::PrevMismatch {
                index,
                addr,
                prev,
                expected,
            } => write!(
                f,
                "entry {index} at {addr:#x}: prev is {prev:#x}, expected {expected:#x} (list damaged or caught mid-update)"
            ),
            ListProblem::UnreadableEntry { index, addr, why } => write!(
                f,
                "entry {index} at {addr:#x} cannot be read: {why}; the list ends here"
            ),
        }
    }
}

/// The outcome of [`walk_list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListReport {
    pub descriptor: Descriptor,
    /// In list order (from `first_entry`).
    pub entries: Vec<ListEntry>,
    pub problems: Vec<ListProblem>,
}

impl ListReport {
    /// The registered functions in registration order, oldest first: entries from the end
    /// of the list to its head (runtimes link each new entry at the head, so `first_entry`
    /// is the newest), each payload's in payload order. The order [`super::Symbolizer`]
    /// takes, so that the newest registration owns addresses that several claim.
    pub fn functions_oldest_first(&self) -> impl Iterator<Item = &FunctionInfo> {
        self.entries
            .iter()
            .rev()
            .filter_map(|e| e.result.as_ref().ok())
            .flat_map(|p| &p.functions)
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// Reads the descriptor's header at `addr`.
pub fn read_descriptor(mem: &dyn Memory, addr: u64) -> Result<Descriptor, String> {
    let d = mem
        .read(addr, DESCRIPTOR_SIZE)
        .map_err(|e| format!("cannot read __jit_debug_descriptor at {addr:#x}: {e}"))?;
    if d.len() < DESCRIPTOR_SIZE as usize {
        return Err(format!(
            "cannot read __jit_debug_descriptor at {addr:#x}: short read ({} bytes)",
            d.len()
        ));
    }
    Ok(Descriptor {
        addr,
        version: u32_at(&d, 0),
        action_flag: u32_at(&d, 4),
        relevant_entry: u64_at(&d, 8),
        first_entry: u64_at(&d, 16),
    })
}

/// Reads and decodes the entry at `addr`, adding its payload size to `*total` (bytes read
/// so far, checked against `limits`). Errs only when the entry itself cannot be read.
pub fn read_entry(
    mem: &dyn Memory,
    addr: u64,
    limits: &Limits,
    total: &mut u64,
) -> Result<ListEntry, String> {
    let raw = mem.read(addr, ENTRY_SIZE)?;
    if raw.len() < ENTRY_SIZE as usize {
        return Err(format!("short read ({} bytes)", raw.len()));
    }
    let (next, prev, payload_addr, size) = (
        u64_at(&raw, 0),
        u64_at(&raw, 8),
        u64_at(&raw, 16),
        u64_at(&raw, 24),
    );
    let mut kind = None;
    let mut dropped = 0;
    let result = if size == 0 {
        Err(EntryError::Empty)
    } else if size > limits.max_payload {
        Err(EntryError::TooLarge {
            addr: payload_addr,
            size,
            limit: limits.max_payload,
        })
    } else if total.saturating_add(size) > limits.max_total_payload {
        Err(EntryError::TotalTooLarge {
            limit: limits.max_total_payload,
        })
    } else {
        *total += size;
        match mem.read(payload_addr, size) {
            Err(why) => Err(EntryError::Unreadable {
                why: format!("payload of {size} bytes at {payload_addr:#x}: {why}"),
            }),
            Ok(bytes) => {
                kind = sniff_kind(&bytes);
                decode_payload(&bytes)
                    .map_err(|e| EntryError::Decode(e.to_string()))
                    .map(|mut info| {
                        dropped = info.drop_unregistered(|slot| mem.read_u64(slot).ok());
                        info
                    })
            }
        }
    };
    Ok(ListEntry {
        addr,
        next,
        prev,
        payload_addr,
        payload_size: size,
        kind,
        result,
        dropped,
    })
}

/// The kind a payload's magic announces.
fn sniff_kind(bytes: &[u8]) -> Option<PayloadKind> {
    if bytes.starts_with(&ELF_MAGIC) {
        Some(PayloadKind::Elf)
    } else if bytes.starts_with(&crate::format::MAGIC) {
        Some(PayloadKind::Compact)
    } else {
        None
    }
}

/// Walks the list of the descriptor at `descriptor_addr`. Errs only when the descriptor
/// itself cannot be read; everything else is reported in the [`ListReport`].
pub fn walk_list(
    mem: &dyn Memory,
    descriptor_addr: u64,
    limits: &Limits,
) -> Result<ListReport, String> {
    let descriptor = read_descriptor(mem, descriptor_addr)?;
    let mut problems = Vec::new();
    if descriptor.version != 1 {
        problems.push(ListProblem::Version {
            version: descriptor.version,
        });
    }
    let mut entries: Vec<ListEntry> = Vec::new();
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let (mut at, mut expected_prev) = (descriptor.first_entry, 0u64);
    while at != 0 {
        if entries.len() >= limits.max_entries {
            problems.push(ListProblem::TooManyEntries {
                limit: limits.max_entries,
            });
            break;
        }
        if !seen.insert(at) {
            problems.push(ListProblem::Loop {
                index: entries.len().saturating_sub(1),
                target: at,
            });
            break;
        }
        let entry = match read_entry(mem, at, limits, &mut total) {
            Ok(e) => e,
            Err(why) => {
                problems.push(ListProblem::UnreadableEntry {
                    index: entries.len(),
                    addr: at,
                    why,
                });
                break;
            }
        };
        if entry.prev != expected_prev {
            problems.push(ListProblem::PrevMismatch {
                index: entries.len(),
                addr: at,
                prev: entry.prev,
                expected: expected_prev,
            });
        }
        expected_prev = at;
        at = entry.next;
        entries.push(entry);
    }
    Ok(ListReport {
        descriptor,
        entries,
        problems,
    })
}
