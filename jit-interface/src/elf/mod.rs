//! The minimal in-memory ELF payload: symbols, DWARF lines and variables, CFI. GDB and LLDB
//! read it natively.
//!
//! PLACEHOLDER: being written (issue 2). The public signature below is fixed.

use crate::error::{Error, Result};
use crate::model::JitObject;

/// Encodes `object` as an ELF relocatable object whose sections sit at the code's real
/// addresses.
pub fn encode(object: &JitObject) -> Result<Vec<u8>> {
    let _ = object;
    Err(Error::Unsupported {
        format: "ELF",
        why: "not implemented yet".into(),
    })
}
