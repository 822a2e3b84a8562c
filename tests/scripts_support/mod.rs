//! Shared by the GDB script tests (`tests/scripts_*.rs`): where `gdb-scripts/jit.py` is,
//! hosts for both payload kinds, and parsers for what the `jit` commands print.
#![allow(dead_code)]

use std::path::PathBuf;

use crate::common::scenario::Host;
use crate::common::{parse_hex, Gdb, Layout, Transcript};
use crate::reader_support::load_cmd;

/// The extension under test, from the source tree.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("gdb-scripts/jit.py")
}

pub fn source_cmd() -> String {
    format!("source {}", script().display())
}

/// The Rust test host with `--format FORMAT`; the reader is loaded in every session
/// (compact payloads need it for GDB's own view; the scripts need its decoder either way,
/// and find it through GDB's memory map).
pub fn host(format: &str) -> Host {
    Host::rust(format).with_gdb_prelude([load_cmd(), source_cmd()])
}

/// One row of `jit list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub start: u64,
    pub end: u64,
    pub name: String,
    pub kind: String,
    pub entry: u64,
    pub file: String,
}

/// The rows of `jit list` in a section (lines starting with a 0x start address).
pub fn list_rows(t: &Transcript, section: &str) -> Vec<Row> {
    t.section(section)
        .lines()
        .filter(|l| l.starts_with("0x"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 6 {
                t.fail(&format!("`jit list` row with {} fields: {l}", f.len()));
            }
            Row {
                start: parse_hex(f[0]).unwrap_or_else(|| t.fail(&format!("bad start in {l}"))),
                end: parse_hex(f[1]).unwrap_or_else(|| t.fail(&format!("bad end in {l}"))),
                name: f[2].into(),
                kind: f[3].into(),
                entry: parse_hex(f[4]).unwrap_or_else(|| t.fail(&format!("bad entry in {l}"))),
                file: f[5].into(),
            }
        })
        .collect()
}

/// `jit list` must show exactly the layout's functions `names` with their real ranges and
/// file, payload kind `kind`, and a nonzero entry address.
#[track_caller]
pub fn check_rows(t: &Transcript, section: &str, layout: &Layout, names: &[&str], kind: &str) {
    let rows = list_rows(t, section);
    let mut got: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    got.sort_unstable();
    let mut want = names.to_vec();
    want.sort_unstable();
    if got != want {
        t.fail(&format!(
            "section {section}: `jit list` shows {got:?}, expected {want:?}"
        ));
    }
    for r in &rows {
        let f = layout.get(&r.name);
        if r.start != f.start || r.end != f.start + f.size {
            t.fail(&format!(
                "{}: range {:#x}..{:#x}, the host compiled it at {:#x}..{:#x}",
                r.name,
                r.start,
                r.end,
                f.start,
                f.start + f.size
            ));
        }
        if r.file != f.file || r.kind != kind || r.entry == 0 {
            t.fail(&format!(
                "{}: file {} kind {} entry {:#x}; expected file {}, kind {kind}, an entry",
                r.name, r.file, r.kind, r.entry, f.file
            ));
        }
    }
}

/// `jit symbolize` at the start of every instruction of every JIT function: the expected
/// answers come from the host's own layout (instruction offsets and line rows).
pub fn symbolize_cmd(layout: &Layout) -> (String, Vec<String>) {
    let mut cmd = String::from("jit symbolize");
    let mut want = Vec::new();
    for f in &layout.functions {
        for &off in &f.insns {
            let a = f.start + off;
            cmd.push_str(&format!(" {a:#x}"));
            let line = f.line_at(a).expect("line of an instruction");
            want.push(format!("{a:#x} {}+{off:#x} {}:{line}", f.name, f.file));
        }
    }
    // An address outside every JIT function.
    let outside = layout
        .functions
        .iter()
        .map(|f| f.start + f.size)
        .max()
        .unwrap()
        + 0x1000;
    cmd.push_str(&format!(" {outside:#x}"));
    want.push(format!("{outside:#x} ??"));
    (cmd, want)
}

#[track_caller]
pub fn check_symbolize(t: &Transcript, section: &str, want: &[String]) {
    let got: Vec<&str> = t
        .section(section)
        .lines()
        .filter(|l| l.starts_with("0x"))
        .collect();
    if got != want {
        t.fail(&format!(
            "section {section}: `jit symbolize` printed\n{got:#?}\nexpected\n{want:#?}"
        ));
    }
}

/// The perf map the host's layout calls for.
pub fn expected_perf_map(layout: &Layout) -> String {
    let mut fs: Vec<_> = layout.functions.iter().collect();
    fs.sort_by_key(|f| f.start);
    fs.iter()
        .map(|f| format!("{:x} {:x} {}\n", f.start, f.size, f.name))
        .collect()
}

/// GDB on a core file with the reader and the scripts loaded.
pub fn core_gdb(h: &Host, core: &std::path::Path, dir: &std::path::Path) -> Gdb {
    Gdb::core(&h.program, core, dir).cmds(h.gdb_prelude.clone())
}
