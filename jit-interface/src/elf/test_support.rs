//! Test helper: encodes an object and reads the payload back with real parsers (`object`'s
//! ELF reader, `gimli`'s DWARF reader).

use object::{Object, ObjectSection};

use crate::model::JitObject;

pub(crate) type Slice<'a> = gimli::EndianSlice<'a, gimli::LittleEndian>;

/// An encoded payload.
pub(crate) struct Parsed {
    pub bytes: Vec<u8>,
}

impl Parsed {
    pub fn encode(object: &JitObject) -> Parsed {
        Parsed {
            bytes: super::encode(object).expect("encode"),
        }
    }

    pub fn file(&self) -> object::File<'_> {
        object::File::parse(&*self.bytes).expect("a valid ELF file")
    }

    /// The contents of the first section called `name` (empty if there is none).
    pub fn section(&self, name: &str) -> &[u8] {
        let file = self.file();
        match file.section_by_name(name) {
            Some(s) => {
                let (offset, size) = s.file_range().unwrap_or((0, 0));
                &self.bytes[offset as usize..(offset + size) as usize]
            }
            None => &[],
        }
    }

    pub fn dwarf(&self) -> gimli::Dwarf<Slice<'_>> {
        gimli::Dwarf::load(|id| -> Result<_, ()> {
            Ok(gimli::EndianSlice::new(
                self.section(id.name()),
                gimli::LittleEndian,
            ))
        })
        .expect("DWARF sections")
    }
}
