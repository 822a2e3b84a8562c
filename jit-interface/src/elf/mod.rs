//! The minimal in-memory ELF payload: symbols, DWARF lines and variables, CFI. GDB and LLDB
//! read it natively.
//!
//! The payload is a relocatable x86-64 object whose ALLOC sections (NOBITS `.text`, one per
//! run of adjacent functions) sit at the code's real addresses, with no relocations: the
//! addresses in the symbols, DWARF and CFI are final. See [`writer`] for the section list.
//! Each part is built as a model first (a [`layout::Layout`], `gimli::write` units and frame
//! tables) and then serialised.

mod cfi;
mod dwarf;
mod layout;
#[cfg(test)]
pub(crate) mod test_support;
mod writer;

use crate::error::{Error, Result};
use crate::model::{Arch, JitObject};

/// Encodes `object` as an ELF relocatable object whose sections sit at the code's real
/// addresses.
pub fn encode(object: &JitObject) -> Result<Vec<u8>> {
    object.validate()?;
    if object.arch() != Arch::X86_64 {
        return Err(Error::Unsupported {
            format: "ELF",
            why: format!(
                "the ELF encoder writes x86-64 objects only; this object is for {}",
                object.arch().name()
            ),
        });
    }
    let layout = layout::Layout::new(object);
    let debug = dwarf::build(&layout)?;
    let frame = cfi::debug_frame(object.arch(), &layout.functions)?;
    let sections = [
        writer::DataSection {
            name: b".debug_info",
            data: &debug.info,
        },
        writer::DataSection {
            name: b".debug_abbrev",
            data: &debug.abbrev,
        },
        writer::DataSection {
            name: b".debug_line",
            data: &debug.line,
        },
        writer::DataSection {
            name: b".debug_ranges",
            data: &debug.ranges,
        },
        writer::DataSection {
            name: b".debug_frame",
            data: &frame,
        },
    ];
    writer::write(&layout, &sections, &debug.str, &debug.name_offsets)
}

/// Turns a DWARF writer failure into our error.
fn gimli_error(e: gimli::write::Error) -> Error {
    Error::Unsupported {
        format: "ELF",
        why: format!("DWARF writer: {e}"),
    }
}
