//! What an append takes (an object laid out for encoding, or one copied from a payload),
//! and appending objects again by copying their bytes from another payload.

use super::super::layout::{self, Layout};
use super::super::scratch::Scratch;
use super::index::{with_buffers, Sections};
use super::{Growing, Index, Plain, PAYLOAD};
use crate::error::Result;

/// What [`Growing::append_layout`] appends: an object laid out for encoding (a
/// [`Layout`]), or a one-function plain object copied from a payload ([`CopiedOne`]: it
/// joins its file's open unit with its bytes as they are, and needs no model).
pub(super) trait Appended<'a> {
    /// The layout, if it is one (what encoding the object needs).
    fn layout(&self) -> Option<&Layout<'a>>;
    fn has_calls(&self) -> bool;
    fn has_extras(&self) -> bool;
    /// For one function in one unit: the unit's file, the function's start and size, and
    /// whether it has line rows.
    fn single(&self) -> Option<(Option<&str>, u64, u32, bool)>;
    /// Bytes of the object's own string table (a NUL, then the names).
    fn strings_len(&self) -> usize;
    /// Its functions.
    fn count(&self) -> usize;
    /// Function `i`, in address order: its name, start, size, and its name's offset in the
    /// object's own string table.
    fn function(&self, i: usize) -> (&[u8], u64, u32, u32);
    /// Its runs of adjacent code, in address order.
    fn runs(&self) -> &[layout::Run];
    /// Whether every function has line rows.
    fn all_rows(&self) -> bool;
    /// The index of the file of its one unit among the payload's (`Index::files`), if known.
    fn file_id(&self) -> Option<u32> {
        None
    }
}

impl<'a> Appended<'a> for Layout<'a> {
    fn layout(&self) -> Option<&Layout<'a>> {
        Some(self)
    }

    fn has_calls(&self) -> bool {
        self.has_calls
    }

    fn has_extras(&self) -> bool {
        self.has_extras
    }

    fn single(&self) -> Option<(Option<&str>, u64, u32, bool)> {
        match (&self.units[..], &self.functions[..]) {
            ([unit], [p]) => Some((unit.file, p.f.start(), p.f.size(), !p.f.lines().is_empty())),
            _ => None,
        }
    }

    fn strings_len(&self) -> usize {
        self.strings_len
    }

    fn count(&self) -> usize {
        self.functions.len()
    }

    fn function(&self, i: usize) -> (&[u8], u64, u32, u32) {
        let f = self.functions[i].f;
        (f.name_bytes(), f.start(), f.size(), self.name_offsets[i])
    }

    fn runs(&self) -> &[layout::Run] {
        &self.runs
    }

    fn all_rows(&self) -> bool {
        self.functions.iter().all(|p| !p.f.lines().is_empty())
    }
}

/// A one-function plain object copied from a payload: its name, the file of its unit (by
/// name, or by its index among the payload's files), and its code (its line sequence and
/// FDE are given to `append_layout` beside it).
pub(super) struct CopiedOne<'a> {
    name: &'a [u8],
    file: Option<&'a str>,
    file_id: Option<u32>,
    start: u64,
    size: u32,
    run: [layout::Run; 1],
}

impl<'a> Appended<'a> for CopiedOne<'a> {
    fn layout(&self) -> Option<&Layout<'a>> {
        None
    }

    fn has_calls(&self) -> bool {
        false
    }

    fn has_extras(&self) -> bool {
        false
    }

    fn single(&self) -> Option<(Option<&str>, u64, u32, bool)> {
        Some((self.file, self.start, self.size, true))
    }

    fn strings_len(&self) -> usize {
        self.name.len() + 2
    }

    fn count(&self) -> usize {
        1
    }

    fn function(&self, _: usize) -> (&[u8], u64, u32, u32) {
        (self.name, self.start, self.size, 1)
    }

    fn runs(&self) -> &[layout::Run] {
        &self.run
    }

    fn all_rows(&self) -> bool {
        true
    }

    fn file_id(&self) -> Option<u32> {
        self.file_id
    }
}

/// What [`Growing::append_copy`] copies of a one-function plain object.
struct Copied<'a> {
    name: &'a [u8],
    start: u64,
    size: u32,
    sequence: &'a [u8],
    fde: &'a [u8],
}

impl Growing {
    /// Appends again the plain object whose bytes are at `p` in `from` (another payload of
    /// this state's, which a rollback replaced: see [`Growing::roll_back`]), as
    /// [`Growing::append`] appends it read back ([`Index::object`]): the same bytes. A
    /// one-function object that joins its file's open unit takes its line sequence and FDE
    /// as `from` has them, copied: half the instructions of reading it back and encoding it
    /// again (a tiering runtime's recent objects are appended again at every rollback;
    /// measured with `scale_host tier 20000 100 elf`: 6,400 -> 3,400 per object). `None` as `append` (no room); `from` not holding such an object there is
    /// refused the same way (a bug: the caller keeps the payload as it is).
    pub(crate) fn append_copy(
        &mut self,
        buf: &mut [u8],
        from: &[u8],
        p: Plain,
    ) -> Result<Option<usize>> {
        self.append_copy_of(buf, from, None, p)
    }

    /// [`Growing::append_copy`] from a payload of another state, whose index is `from_index`
    /// (`None`: this state's): a sealed payload rebuilt without the objects that left it.
    pub(crate) fn append_copy_of(
        &mut self,
        buf: &mut [u8],
        from: &[u8],
        from_index: Option<&Index>,
        p: Plain,
    ) -> Result<Option<usize>> {
        let copied = (p.count == 1).then(|| copied(from, &p)).flatten();
        // Its file: by name among another state's files, by index among this one's.
        let (file, file_id) = match from_index {
            Some(index) => (
                index.files.get(usize::from(p.file)).map(String::as_str),
                None,
            ),
            None => (
                None,
                (usize::from(p.file) < self.index.files.len()).then_some(u32::from(p.file)),
            ),
        };
        if let Some(Copied {
            name,
            start,
            size,
            sequence,
            fde,
        }) = copied.filter(|_| file.is_some() || file_id.is_some())
        {
            if buf.len() != PAYLOAD {
                return Ok(None);
            }
            // (`copied` checked that the end is below 2^64.)
            let end = start.saturating_add(size.into());
            let one = CopiedOne {
                name,
                file,
                file_id,
                start,
                size,
                run: [layout::Run { start, end }],
            };
            let mut scratch = Scratch::take();
            let out = self.append_layout(buf, &one, &mut scratch, Some((sequence, fde)));
            scratch.keep();
            if let Ok(Some(bytes)) = out {
                return Ok(Some(bytes));
            }
            // No open unit to join (the payload is unchanged): the general way.
        }
        let index = from_index.unwrap_or(&self.index);
        let Some(object) = with_buffers(|b| index.read(from, &p, b)) else {
            return Ok(None);
        };
        self.append(buf, &object)
    }
}

/// The name, start, size, line sequence and FDE of the one-function plain object at `p` in
/// `from`: its symbol read with object's ELF reader, its line sequence and FDE where the
/// index says they are. `None` if it has no FDE to copy.
fn copied<'a>(from: &'a [u8], p: &Plain) -> Option<Copied<'a>> {
    let sections = Sections::of(from)?;
    let (name, start, size) = sections.function(p.sym as usize)?;
    let bytes = |at: u32, len: u16| from.get(at as usize..at as usize + usize::from(len));
    let fde = bytes(p.fde, p.fde_len).filter(|fde| !fde.is_empty())?;
    Some(Copied {
        name,
        start,
        size,
        sequence: bytes(p.seq, p.lines)?,
        fde,
    })
}
