//! Source tables: the texts of source files a runtime registered with its code
//! (`JitObject::set_source`), in a compact object record (after its string table, file
//! names as string indices) and in the `.jit_gdb.sources` section of an ELF payload (file
//! names inline). Both are a count, then per file its name and its text as a *blob* (a
//! text that may be empty). `docs/FORMAT.md` has the layouts.

use std::collections::HashMap;

use super::wire::{invalid, Reader};
use super::{DecodeError, MAX_COUNT};

/// Fewest bytes a compact source-table entry takes: a string index and a blob length.
const MIN_COMPACT_ENTRY_BYTES: usize = 2;

/// Fewest bytes an ELF source-section entry takes: a one-byte name with its length, and a
/// blob length.
#[cfg(any(feature = "inspect", all(test, feature = "runtime")))]
const MIN_ELF_ENTRY_BYTES: usize = 3;

/// Name of the ELF section that carries source texts (not ALLOC: debuggers ignore it).
pub const ELF_SECTION: &str = ".jit_gdb.sources";

/// The files of one table seen so far, to refuse a file named twice: scanned while few,
/// hashed beyond (a table may have as many entries as its bytes allow).
#[derive(Default)]
struct Seen<'a> {
    files: Vec<&'a str>,
    index: Option<HashMap<&'a str, usize>>,
}

impl<'a> Seen<'a> {
    const SCAN: usize = 8;

    /// Notes `file`, or gives the index of its earlier entry.
    fn first_time(&mut self, file: &'a str) -> Result<(), usize> {
        let earlier = match &self.index {
            Some(index) => index.get(file).copied(),
            None => self.files.iter().position(|&f| f == file),
        };
        if let Some(i) = earlier {
            return Err(i);
        }
        let i = self.files.len();
        self.files.push(file);
        match &mut self.index {
            Some(index) => {
                index.insert(file, i);
            }
            None if self.files.len() > Self::SCAN => {
                self.index = Some(self.files.iter().copied().zip(0..).collect());
            }
            None => {}
        }
        Ok(())
    }
}

/// The error for a file named twice in a table, found at `at`.
fn named_twice(file: &str, first: usize, second: usize, at: usize) -> DecodeError {
    invalid(
        format!(
            "source {second}: file `{file}` has a source text already (source {first}): one text per file"
        ),
        at,
    )
}

/// The blob of the text of `file`.
fn text_of<'a>(r: &mut Reader<'a>, file: &str) -> Result<&'a str, DecodeError> {
    r.blob(&format!("the source text of `{file}`"))
}

/// Reads a compact object's source table (its flags announced one), whose file names are
/// indices into `strings`: (file, text) in table order.
pub(crate) fn read_compact<'a>(
    r: &mut Reader<'a>,
    strings: &[&'a str],
) -> Result<Vec<(&'a str, &'a str)>, DecodeError> {
    let at = r.pos();
    let n = r.count("the source count", MIN_COMPACT_ENTRY_BYTES, MAX_COUNT)?;
    if n == 0 {
        return Err(invalid(
            "the source count is 0 although the object's flags announce a source table",
            at,
        ));
    }
    let mut out = Vec::with_capacity(n);
    let mut seen = Seen::default();
    for i in 0..n {
        let at = r.pos();
        let index = r.uleb("a source file index")?;
        let Some(&file) = usize::try_from(index).ok().and_then(|k| strings.get(k)) else {
            return Err(invalid(
                format!(
                    "source {i}: file index {index} is outside the string table ({} strings)",
                    strings.len()
                ),
                at,
            ));
        };
        seen.first_time(file)
            .map_err(|first| named_twice(file, first, i, at))?;
        out.push((file, text_of(r, file)?));
    }
    Ok(out)
}

/// Appends the content of an ELF payload's source section for `sources` (distinct file
/// names, texts within `MAX_SOURCE_BYTES`: as objects hold them).
#[cfg(feature = "runtime")]
pub(crate) fn write_elf(sources: &[(&str, &str)], out: &mut Vec<u8>) {
    let mut w = super::wire::Writer {
        buf: std::mem::take(out),
    };
    w.uleb(sources.len() as u64);
    for (file, text) in sources {
        w.text(file);
        w.blob(text);
    }
    *out = w.buf;
}

/// Reads the content of an ELF payload's source section: (file, text) in section order.
/// Checked as a compact source table is (offsets are within the section).
#[cfg(any(feature = "inspect", all(test, feature = "runtime")))]
pub(crate) fn read_elf(bytes: &[u8]) -> Result<Vec<(&str, &str)>, DecodeError> {
    let mut r = Reader::new(bytes);
    let n = r.count("the source count", MIN_ELF_ENTRY_BYTES, MAX_COUNT)?;
    let mut out = Vec::with_capacity(n);
    let mut seen = Seen::default();
    for i in 0..n {
        let at = r.pos();
        let file = r.text("a source file name")?;
        seen.first_time(file)
            .map_err(|first| named_twice(file, first, i, at))?;
        out.push((file, text_of(&mut r, file)?));
    }
    if !r.is_at_end() {
        return Err(invalid(
            format!("{} bytes follow the last source", r.remaining()),
            r.pos(),
        ));
    }
    Ok(out)
}
