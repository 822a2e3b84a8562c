//! Compact records: the payload our GDB reader decodes. `docs/FORMAT.md` is the spec; this
//! module is its only implementation, shared by the encoder (registration), the reader, the
//! core inspector and the GDB scripts.
//!
//! A payload is a header and one or more self-contained object records back to back (several
//! when many small objects are consolidated into one debugger entry, each with its own live
//! check and string table), so records can be appended and copied as bytes. `wire` is the byte level (bounded little-endian
//! reads, LEB128), `encode` and `decode` the two directions, `lines` the line-row opcodes
//! and `frame` the compact frame-pointer description both directions share.

mod decode;
mod encode;

pub use decode::Sink;
mod frame;
mod lines;
pub(crate) mod sources;
pub(crate) mod wire;

pub use sources::ELF_SECTION as SOURCES_SECTION;

/// The (file, text) entries of the content of an ELF payload's [`SOURCES_SECTION`], checked
/// as the compact source table is (for readers that fetch only that section).
#[cfg(feature = "inspect")]
pub fn decode_elf_sources(section: &[u8]) -> std::result::Result<Vec<(&str, &str)>, DecodeError> {
    sources::read_elf(section)
}

#[cfg(test)]
mod tests;

use crate::error::Result;
use crate::model::{Arch, JitObject};

/// The first four bytes of every compact payload ("JGCR": jit-gdb compact records). An ELF
/// entry starts with `\x7fELF`, so the two payload kinds never collide.
pub const MAGIC: [u8; 4] = *b"JGCR";

/// The format version this code writes and the only one it reads.
pub const VERSION: u8 = 2;

/// Length of the payload header (magic, version, architecture, pointer size, flags).
pub const HEADER_LEN: usize = 8;

/// Longest name or string-table entry, in bytes.
pub const MAX_TEXT_LEN: u64 = 1 << 20;

// A source text (a blob) is read with the limit of a text: the model's limit must be it.
const _: () = assert!(MAX_TEXT_LEN == crate::model::MAX_SOURCE_BYTES as u64);

/// Largest count of anything (objects, strings, functions per object, rows, epilogues and
/// blocks per function).
pub const MAX_COUNT: u64 = (1 << 24) - 1;

/// Architecture code in the header: the ELF `e_machine` value, which fits in a byte for
/// every architecture we describe.
pub(crate) fn arch_code(arch: Arch) -> u8 {
    match arch {
        Arch::X86_64 => 62,
        Arch::Aarch64 => 183,
    }
}

/// The architecture of a header code, if we know it.
pub(crate) fn arch_from_code(code: u8) -> Option<Arch> {
    match code {
        62 => Some(Arch::X86_64),
        183 => Some(Arch::Aarch64),
        _ => None,
    }
}

/// Where the reader can confirm that an entry is still registered: `address` holds `key`
/// while the entry is live, and is cleared before the entry is freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LiveCheck {
    pub address: u64,
    pub key: u64,
}

/// What an object's live slot says (see [`LiveCheck::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// The slot holds the key: registered.
    Live,
    /// The slot holds something else (`found`): unregistered, its record left in place.
    Unregistered { found: u64 },
    /// The slot could not be read (unmapped, absent from a core file): nothing proven.
    /// Consumers choose: listing keeps such objects (the format says they count as live);
    /// unwinding does not trust their rows.
    Unreadable,
}

impl LiveCheck {
    /// The one liveness rule every consumer applies: the object is registered while its slot
    /// holds its key. `held`: what the slot holds, `None` if it could not be read.
    pub fn state(&self, held: Option<u64>) -> Liveness {
        match held {
            Some(v) if v == self.key => Liveness::Live,
            Some(found) => Liveness::Unregistered { found },
            None => Liveness::Unreadable,
        }
    }
}

/// A decoded compact payload (its source texts are the object's: `JitObject::sources`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub object: JitObject,
    pub live: Option<LiveCheck>,
}

/// Why a payload was refused by the decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not a compact-record payload at all (e.g. an ELF entry): not ours, no complaint.
    NotOurs,
    /// Ours, but damaged or unsupported; the message names the problem and the byte offset.
    Invalid(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NotOurs => write!(f, "not a jit-gdb compact payload"),
            DecodeError::Invalid(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Encodes `object` as compact records: a payload holding one object record.
///
/// Fails with [`crate::Error::Unsupported`] if a function has variables (GDB's reader API
/// cannot show them: use the ELF format), and with the object's own validation error if it
/// is empty or its functions overlap. Call sites are left out: GDB needs none for compact
/// frames (see `docs/FORMAT.md`).
pub fn encode(object: &JitObject, live: Option<LiveCheck>) -> Result<Vec<u8>> {
    encode::encode_bundle(&[(object, live)])
}

/// Encodes several objects, each with its own live check, into one payload (one debugger
/// entry). All objects must have the same architecture.
pub fn encode_bundle(objects: &[(&JitObject, Option<LiveCheck>)]) -> Result<Vec<u8>> {
    encode::encode_bundle(objects)
}

/// The header a payload of `arch` code starts with; a payload is this followed by one or
/// more records written by [`encode_record`].
pub fn header(arch: Arch) -> [u8; HEADER_LEN] {
    encode::header(arch)
}

/// Appends one object record to `out` (left unchanged on error). `header(arch)` followed
/// by records of `arch` objects is a valid payload, so a registry can grow a payload in
/// place and move records between payloads as bytes.
pub fn encode_record(out: &mut Vec<u8>, object: &JitObject, live: Option<LiveCheck>) -> Result<()> {
    encode::encode_record(out, object, live)
}

/// Overwrites the live check of a record written by [`encode_record`] with a live check
/// (the record must have been encoded with one): it sits at a fixed place, right after the
/// record's first byte, so a registry can assign the slot after encoding.
#[cfg(feature = "runtime")]
pub(crate) fn patch_live_check(record: &mut [u8], live: LiveCheck) {
    debug_assert!(record.first().is_some_and(|f| f & encode::OBJECT_LIVE != 0));
    if let Some(at) = record.get_mut(1..17) {
        at[..8].copy_from_slice(&live.address.to_le_bytes());
        at[8..].copy_from_slice(&live.key.to_le_bytes());
    }
}

/// Decodes a compact payload holding exactly one object; never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let mut all = decode::decode_all(bytes)?;
    if all.len() != 1 {
        return Err(DecodeError::Invalid(format!(
            "the payload holds {} objects where exactly one was expected (use decode_all for bundles)",
            all.len()
        )));
    }
    Ok(all.remove(0))
}

/// Decodes every object record of a compact payload, in order; never panics, whatever the
/// bytes. Time and memory are linear in the payload size.
pub fn decode_all(bytes: &[u8]) -> Result<Vec<Decoded>, DecodeError> {
    decode::decode_all(bytes)
}

/// Decodes a compact payload into `sink` (see [`Sink`] for what it must check); never
/// panics, whatever the bytes. [`decode_all`] is this with the data model as the sink, and
/// gives the same errors for everything a sink accepts that the model accepts.
pub fn decode_into<'a>(bytes: &'a [u8], sink: &mut impl Sink<'a>) -> Result<(), DecodeError> {
    decode::decode_into(bytes, sink)
}
