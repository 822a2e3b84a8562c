//! Decoding any payload a process registered with GDB (compact records or a minimal ELF with
//! DWARF, ours or another runtime's) into what a symbolizer needs: function names, address
//! ranges, source files and line rows, and the source texts a runtime registered
//! ([`payload_sources`]); walking GDB's entry list in another process's memory through a
//! [`Memory`] ([`walk_list`], with liveness applied to every payload); resolving addresses
//! with the project's one overlap rule ([`Symbolizer`]: the newest registration wins). Used where no GDB runs (the core inspector) and by the GDB reader
//! plugin to serve the GDB scripts (as JSON, [`payload_json`]).
//!
//! The bytes come from another process's memory or from a core file of another machine:
//! decoding is bounded by the payload size, never panics, and names the problem when it
//! refuses a payload. Compact payloads go through the one compact codec
//! ([`crate::format::decode_all`]); ELF payloads through `object` (symbols) and `gimli` (line
//! programs, compile units, subprograms).

mod elf;
mod json;
mod list;
mod symbolize;

#[cfg(all(test, feature = "runtime"))]
mod elf_tests;
#[cfg(test)]
mod list_tests;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::format::{self, DecodeError, LiveCheck};
use crate::model::{Arch, LineRow};

pub use json::{
    entry_json, json_string, list_json, payload_info_json, payload_json, read_entry_json,
    walk_list_json,
};
pub use list::{
    read_descriptor, read_entry, walk_list, Descriptor, EntryError, Limits, ListEntry, ListProblem,
    ListReport, Memory, DESCRIPTOR_SIZE, ENTRY_SIZE,
};
pub use symbolize::{Symbol, Symbolizer};

/// Which of the two payload kinds a payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadKind {
    /// Compact records (`docs/FORMAT.md`, magic `JGCR`).
    Compact,
    /// An ELF object with symbols and (optionally) DWARF.
    Elf,
}

impl PayloadKind {
    /// Lower-case name, as used in messages and JSON.
    pub fn name(self) -> &'static str {
        match self {
            PayloadKind::Compact => "compact",
            PayloadKind::Elf => "elf",
        }
    }
}

/// One function found in a payload.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionInfo {
    pub name: String,
    /// Address of the first instruction.
    pub start: u64,
    /// Size of the code in bytes (0 for an ELF symbol without a size).
    pub size: u64,
    /// Source file of the line rows, if known.
    pub file: Option<String>,
    /// (absolute address, line) rows sorted by address; each holds up to the next row or the
    /// function end. Line 0 is a gap: no source line there (never two in a row).
    pub lines: Vec<(u64, u32)>,
    /// Index of the object record the function belongs to (compact bundles hold several
    /// objects; always 0 for ELF).
    pub object: usize,
}

impl FunctionInfo {
    /// One past the last byte (saturating: decoders refuse functions that wrap).
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }

    /// Does the function contain `addr`?
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end()
    }

    /// Source line of the code at `addr` (`None` outside the rows or the function, or in
    /// a gap).
    pub fn line_at(&self, addr: u64) -> Option<u32> {
        if !self.contains(addr) {
            return None;
        }
        let i = self.lines.partition_point(|&(a, _)| a <= addr);
        i.checked_sub(1)
            .map(|i| self.lines[i].1)
            .filter(|&l| l != LineRow::GAP)
    }
}

/// One object record of a payload (compact bundles hold several; an ELF payload is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectInfo {
    /// The compact live check, if the object has one.
    pub live: Option<LiveCheck>,
}

/// What a payload describes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PayloadInfo {
    pub kind: PayloadKind,
    /// Architecture of the code, if known (`None`: an ELF machine we do not describe).
    pub arch: Option<Arch>,
    pub objects: Vec<ObjectInfo>,
    /// Functions in payload order (compact: the order of the records; ELF: symbol order,
    /// then subprograms that have no symbol).
    pub functions: Vec<FunctionInfo>,
    /// Parts of an ELF payload that could not be read (a damaged symbol or DWARF unit, a
    /// damaged source section); the rest is still reported. Always empty for compact
    /// payloads, which are all or nothing.
    pub problems: Vec<String>,
    /// The source texts the runtime registered (`JitObject::set_source`), in payload order:
    /// a compact bundle's objects each have their own (a file may come once per object).
    pub sources: Vec<SourceInfo>,
}

/// The text of a source file, as a payload carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceInfo {
    /// The file name, as the functions' line rows name it.
    pub file: String,
    pub text: String,
    /// Index of the object record that carries it (always 0 for ELF).
    pub object: usize,
}

impl PayloadInfo {
    /// Drops the functions of unregistered objects, whose live slot (read with `read_u64`)
    /// no longer holds their key: a runtime may unregister an object by clearing its slot and
    /// leave its record in place (docs/FORMAT.md, "The live check"). An unreadable slot
    /// (`None`: absent from a core file) counts as live. Returns how many objects were dropped;
    /// `objects` keeps them all (function `object` indices stay valid).
    pub fn drop_unregistered(&mut self, mut read_u64: impl FnMut(u64) -> Option<u64>) -> usize {
        let dead: Vec<bool> = self
            .objects
            .iter()
            .map(|o| {
                o.live.is_some_and(|l| {
                    matches!(
                        l.state(read_u64(l.address)),
                        format::Liveness::Unregistered { .. }
                    )
                })
            })
            .collect();
        let is_dead = |object: usize| dead.get(object).copied().unwrap_or(false);
        self.functions.retain(|f| !is_dead(f.object));
        self.sources.retain(|s| !is_dead(s.object));
        dead.iter().filter(|&&d| d).count()
    }
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum InspectError {
    /// Neither compact records nor ELF.
    UnknownKind { len: usize, head: Vec<u8> },
    /// A compact payload the codec refused (its message names the byte offset).
    Compact(String),
    /// An ELF payload that `object` or `gimli` refused, or whose contents make no sense.
    Elf(String),
}

impl fmt::Display for InspectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InspectError::UnknownKind { len, head } => {
                write!(f, "unknown payload kind ({len} bytes, starting with [")?;
                for (i, b) in head.iter().enumerate() {
                    write!(f, "{}{b:02x}", if i > 0 { " " } else { "" })?;
                }
                write!(
                    f,
                    "]): neither compact records (magic \"JGCR\") nor ELF (magic 7f 45 4c 46)"
                )
            }
            InspectError::Compact(why) => write!(f, "compact payload: {why}"),
            InspectError::Elf(why) => write!(f, "ELF payload: {why}"),
        }
    }
}

impl std::error::Error for InspectError {}

/// The first bytes of an ELF file.
const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];

/// Decodes a payload of either kind. Never panics; time and memory are bounded by the payload
/// size.
pub fn decode_payload(bytes: &[u8]) -> Result<PayloadInfo, InspectError> {
    if bytes.starts_with(&ELF_MAGIC) {
        return elf::decode(bytes);
    }
    match format::decode_all(bytes) {
        Ok(decoded) => Ok(from_compact(decoded)),
        Err(DecodeError::Invalid(why)) => Err(InspectError::Compact(why)),
        Err(DecodeError::NotOurs) => Err(InspectError::UnknownKind {
            len: bytes.len(),
            head: bytes[..bytes.len().min(8)].to_vec(),
        }),
    }
}

fn from_compact(decoded: Vec<format::Decoded>) -> PayloadInfo {
    let arch = decoded.first().map(|d| d.object.arch());
    let mut objects = Vec::with_capacity(decoded.len());
    let mut functions = Vec::new();
    let mut sources = Vec::new();
    for (i, d) in decoded.into_iter().enumerate() {
        objects.push(ObjectInfo { live: d.live });
        sources.extend(d.object.sources().map(|(file, text)| SourceInfo {
            file: file.to_string(),
            text: text.to_string(),
            object: i,
        }));
        for f in d.object.functions() {
            functions.push(FunctionInfo {
                name: f.name().to_string(),
                start: f.start(),
                size: u64::from(f.size()),
                file: f.file().map(str::to_string),
                // The codec checked that offsets lie inside the function, which ends below
                // 2^64, so the sums cannot overflow.
                lines: f
                    .lines()
                    .iter()
                    .map(|r| (f.start() + u64::from(r.offset), r.line))
                    .collect(),
                object: i,
            });
        }
    }
    PayloadInfo {
        kind: PayloadKind::Compact,
        arch,
        objects,
        functions,
        problems: Vec::new(),
        sources,
    }
}

/// The source texts of a payload of either kind, (file, text) in payload order (a compact
/// bundle may give a file once per object; unregistered objects are not told apart here:
/// see [`PayloadInfo::drop_unregistered`]). Empty for a payload without any. Unlike
/// [`decode_payload`], an ELF payload whose source section is damaged is an error.
pub fn payload_sources(payload: &[u8]) -> Result<Vec<(String, String)>, String> {
    if payload.starts_with(&ELF_MAGIC) {
        return elf::sources(payload).map_err(|e| e.to_string());
    }
    match format::decode_all(payload) {
        Ok(decoded) => Ok(decoded
            .iter()
            .flat_map(|d| d.object.sources())
            .map(|(file, text)| (file.to_string(), text.to_string()))
            .collect()),
        Err(DecodeError::Invalid(why)) => Err(InspectError::Compact(why).to_string()),
        Err(DecodeError::NotOurs) => Err(InspectError::UnknownKind {
            len: payload.len(),
            head: payload[..payload.len().min(8)].to_vec(),
        }
        .to_string()),
    }
}
