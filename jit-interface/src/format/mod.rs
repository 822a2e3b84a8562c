//! Compact records: the payload our GDB reader decodes. `docs/FORMAT.md` is the spec; this
//! module is its only implementation, shared by the encoder (registration), the reader, the
//! core inspector and the GDB scripts.
//!
//! PLACEHOLDER: the codec is being written (issue 3). The public signatures below are fixed.

use crate::error::{Error, Result};
use crate::model::JitObject;

/// Where the reader can confirm that an entry is still registered: `address` holds `key`
/// while the entry is live, and is cleared before the entry is freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LiveCheck {
    pub address: u64,
    pub key: u64,
}

/// A decoded compact payload.
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

/// Encodes `object` as compact records.
pub fn encode(object: &JitObject, live: Option<LiveCheck>) -> Result<Vec<u8>> {
    let _ = (object, live);
    Err(Error::Unsupported {
        format: "compact records",
        why: "not implemented yet".into(),
    })
}

/// Decodes a compact payload; never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let _ = bytes;
    Err(DecodeError::NotOurs)
}
