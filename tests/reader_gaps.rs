//! The reader's symtabs span the free bytes between one file's functions (GDB walks every
//! symtab on each PC lookup, so one symtab per function made gapped code slow), but never
//! a gap where another entry has code: GDB picks the symtab with the smallest range
//! containing a PC, so a symtab spanning another entry's function would capture it.
//!
//! `reader_testhost gaps` registers two compact entries interleaved in one file, P
//! (`jit_gap_outer` +0x000, `jit_gap_after` +0x100) and Q (`jit_gap_inner` +0x080,
//! `jit_gap_far` +0x400), in both orders. The entry read first spans its gap (nothing else
//! is known there yet); the one read second finds the first one's function in its gap and
//! does not. Either way every function must be found by address with its lines, the
//! backtrace through both entries must be right, and the free bytes must belong to no
//! function and have no line.

mod common;
mod reader_support;

use std::process::Command;

use common::*;
use reader_support::*;

/// Where a function's lines and name show, and where nothing may show.
struct Probe {
    /// Section name.
    name: String,
    addr: u64,
}

fn gaps(order: &str) {
    let test = format!("reader_gaps_{order}");
    if !require_tool("gdb", &test) {
        return;
    }
    let dir = TempDir::new(&format!("reader-gaps-{order}"));
    let d = dir.path().display().to_string();
    let args = ["--source-dir", d.as_str(), "gaps", order];
    // The code sits at fixed addresses: one run outside GDB gives the layout.
    let out = Command::new(reader_testhost())
        .args(args)
        .output()
        .expect("run reader_testhost");
    assert!(
        out.status.success(),
        "reader_testhost gaps {order} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let layout = Layout::parse(&String::from_utf8_lossy(&out.stdout));
    let names = [
        "jit_gap_outer",
        "jit_gap_inner",
        "jit_gap_after",
        "jit_gap_far",
    ];
    let fns: Vec<&JitFnInfo> = names.iter().map(|n| layout.get(n)).collect();
    // The free bytes: each function's end, the middle and the last byte of each gap (the
    // functions in address order), and past the last one.
    let mut by_addr = fns.clone();
    by_addr.sort_by_key(|f| f.start);
    let mut free = Vec::new();
    for w in by_addr.windows(2) {
        let (end, next) = (w[0].start + w[0].size, w[1].start);
        assert!(end < next, "the layout has no gap after {}", w[0].name);
        free.extend([end, (end + next) / 2, next - 1]);
    }
    let last = by_addr[by_addr.len() - 1];
    free.push(last.start + last.size);

    let mut g = Gdb::program(&reader_testhost(), &args, dir.path())
        .cmd(load_cmd())
        .cmd("break reader_host_break")
        .cmd("run")
        .section("bt", ["bt"]);
    let mut probes = Vec::new();
    for f in &fns {
        let end = f.start + f.size;
        for (what, addr) in [("start", f.start), ("last", end - 1)] {
            let name = format!("{}-{what}", f.name);
            g = g.section(
                &name,
                [
                    format!("info line *{addr:#x}"),
                    format!("x/i {addr:#x}"),
                    format!("info symbol {addr:#x}"),
                ],
            );
            probes.push((*f, Probe { name, addr }));
        }
    }
    for &addr in &free {
        g = g.section(
            &format!("free-{addr:x}"),
            [
                format!("info line *{addr:#x}"),
                format!("x/i {addr:#x}"),
                format!("info symbol {addr:#x}"),
            ],
        );
    }
    let t = run_with_reader_debug(&g);

    // Which entry spanned its gap: the first read has one symtab, the second two.
    let symtabs: Vec<&str> = t
        .text
        .lines()
        .filter(|l| l.contains("jit-reader: read an entry of") && l.contains("2 function(s)"))
        .collect();
    if symtabs.len() != 2
        || !symtabs[0].ends_with(" 1 symtab(s)")
        || !symtabs[1].ends_with(" 2 symtab(s)")
    {
        t.fail(&format!(
            "expected the first entry read in one symtab (its gap spanned) and the second in \
             two (the first one's code in its gap), got {symtabs:#?}"
        ));
    }

    // The backtrace runs through both entries with the right lines.
    let frames = t.gdb_bt("bt");
    let chain = [
        "reader_host_break",
        "jit_gap_inner",
        "jit_gap_outer",
        "reader_host_run",
    ];
    let Some(at) = frames.iter().position(|f| f.is(chain[0])) else {
        t.fail("no frame of reader_host_break");
    };
    for (k, want) in chain.iter().enumerate() {
        let Some(f) = frames.get(at + k) else {
            t.fail(&format!("the backtrace ends before {want}"));
        };
        if !f.is(want) {
            t.fail(&format!(
                "frame #{} is `{}`, expected {want}",
                f.level, f.function
            ));
        }
        if want.starts_with("jit_") {
            if let Err(e) = check_jit_frame(f, &layout) {
                t.fail(&e);
            }
        }
    }
    if let Some(f) = frames.iter().find(|f| f.function == "??") {
        t.fail(&format!("unknown frame: {}", f.raw));
    }

    // Every function's first and last byte: its own line and name, and no other's.
    for (f, p) in &probes {
        let line = f
            .line_at(p.addr)
            .expect("every byte of the host's functions has a line");
        let s = t.section(&p.name);
        let want_line = format!("Line {line} of \"");
        let want_sym = if p.addr == f.start {
            format!("<{}>", f.name)
        } else {
            format!("<{}+{}>", f.name, p.addr - f.start)
        };
        if !s.contains(&want_line) || !s.contains(&format!("{:#x} {want_sym}:", p.addr)) {
            t.fail(&format!(
                "{:#x} in {}: expected `{want_line}` and `{want_sym}` in section `{}`",
                p.addr, f.name, p.name
            ));
        }
        for other in names.iter().filter(|n| **n != f.name) {
            t.assert_not_contains(Some(&p.name), &format!("<{other}"));
        }
    }
    // Free bytes: no line, no function, no symbol.
    for addr in &free {
        let name = format!("free-{addr:x}");
        t.assert_contains(
            Some(&name),
            &format!("No line number information available for address {addr:#x}"),
        );
        t.assert_contains(Some(&name), &format!("No symbol matches {addr:#x}."));
        t.assert_not_contains(Some(&name), "<jit_");
    }
    t.assert_not_contains(None, "jit-reader: internal error");
}

/// P (outer, after) read first spans its gap; Q (inner, far) has `jit_gap_after` in its
/// gap and does not span it, so inner's symtab is the smaller one at inner's PCs.
#[test]
fn reader_gaps_bridged_entry_first() {
    gaps("p-first");
}

/// Q read first spans its gap (over where `jit_gap_after` comes later); P has
/// `jit_gap_inner` in its gap and does not span it, so after's symtab is the smaller one at
/// after's PCs.
#[test]
fn reader_gaps_bridged_entry_second() {
    gaps("q-first");
}
