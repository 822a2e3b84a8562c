//! perf map: `/tmp/perf-PID.map`, one line `START SIZE name` per function (hex, no `0x`).
//! perf reads the file when it reports, so lines only need to be there by then.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::model::{Function, JitObject};

/// Appends the map line of `f` to `out`. perf takes everything after the size as the name,
/// so spaces are fine; a line break would end the line early and is written as `\n` / `\r`
/// (two characters) instead.
pub fn map_line(f: &Function, out: &mut Vec<u8>) {
    push_hex(f.start(), out);
    out.push(b' ');
    push_hex(u64::from(f.size()), out);
    out.push(b' ');
    push_name(f.name(), out);
    out.push(b'\n');
}

/// Appends the map lines of every function of `object` to `out`.
pub fn map_lines(object: &JitObject, out: &mut Vec<u8>) {
    for f in object.functions() {
        map_line(&f, out);
    }
}

/// Lower-case hex without `0x` or leading zeros (`{:x}`, without the formatting machinery,
/// which costs more than the rest of the line).
fn push_hex(v: u64, out: &mut Vec<u8>) {
    let digits = (16 - v.leading_zeros() as usize / 4).max(1);
    for k in (0..digits).rev() {
        out.push(b"0123456789abcdef"[((v >> (4 * k)) & 0xf) as usize]);
    }
}

fn push_name(name: &str, out: &mut Vec<u8>) {
    if !name.contains(['\n', '\r']) {
        out.extend_from_slice(name.as_bytes());
        return;
    }
    for c in name.chars() {
        match c {
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
}

/// The open map file of this process.
pub(crate) struct PerfMap {
    path: PathBuf,
    out: BufWriter<File>,
    /// Reused formatting buffer.
    line: Vec<u8>,
}

impl PerfMap {
    /// Opens (creating or appending to) `/tmp/perf-PID.map`. Appending keeps lines written
    /// earlier by this process (e.g. by another runtime in it); perf needs all of them.
    pub(crate) fn open(pid: u32) -> Result<PerfMap, String> {
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| {
                format!(
                    "perf map: cannot open {} for appending: {e}; perf map output is off",
                    path.display()
                )
            })?;
        Ok(PerfMap {
            path,
            out: BufWriter::with_capacity(64 * 1024, file),
            line: Vec::with_capacity(256),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn write_object(&mut self, object: &JitObject) -> io::Result<()> {
        for f in object.functions() {
            self.line.clear();
            map_line(&f, &mut self.line);
            self.out.write_all(&self.line)?;
        }
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Closes the file without writing what is buffered (a forked child's copy of the
    /// parent's buffer).
    pub(crate) fn discard(self) {
        let (_file, _unwritten) = self.out.into_parts();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_format_and_escapes() {
        let mut o = JitObject::new();
        o.add_function("jit fn<a>", 0x7f00_1234_5670, 0x3a).unwrap();
        o.add_function("two\nlines", 0x10, 1).unwrap();
        o.add_function("z", u64::MAX - 0x100, 0x100).unwrap();
        let mut out = Vec::new();
        map_lines(&o, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "7f0012345670 3a jit fn<a>\n10 1 two\\nlines\nfffffffffffffeff 100 z\n"
        );
    }
}
