//! Callee-saved registers in caller frames, in a live `gdb -batch -nx`, for both payload
//! formats: the test host's `--saved-regs` scenario (`testhosts/src/scenario.rs`) has
//! `jit_entry` save r12-r14 and set them to known values, then `jit_middle` save them
//! again, describe the saves of r12 and r13 (register rules) but not r14, and clobber all
//! three. In `jit_entry`'s frame GDB must show the values `jit_entry` stored for r12 and
//! r13 (read from `jit_middle`'s save slots), and `<not saved>` for r14: the register
//! `jit_middle` changed without saying so must not show `jit_middle`'s value.

mod common;
mod reader_support;

use common::scenario::Host;
use common::*;

/// The values the host printed: (entry r12, r13, r14, middle r12, r13, r14).
fn stored_values(layout_text: &str) -> [u64; 6] {
    let line = layout_text
        .lines()
        .find(|l| l.starts_with("jit-gdb-testhost: saved-regs "))
        .expect("the host prints the values it stores");
    let values: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.split_once('=').and_then(|(_, v)| parse_hex(v)))
        .collect();
    values.try_into().expect("six values")
}

/// GDB's `p/x $REG` output in a section: `Some(value)`, or `None` for `<not saved>`.
fn printed(t: &Transcript, section: &str) -> Option<u64> {
    let text = t.section(section);
    let line = text
        .lines()
        .find(|l| l.starts_with('$'))
        .unwrap_or_else(|| t.fail(&format!("no value printed in section {section}")));
    let value = line.split(" = ").nth(1).unwrap_or("").trim();
    if value == "<not saved>" {
        return None;
    }
    Some(parse_hex(value).unwrap_or_else(|| t.fail(&format!("`{line}` is no hex value"))))
}

fn check(format: &str) {
    let host = Host::new(testhost(), &["--format", format, "--saved-regs"]);
    let dir = TempDir::new(&format!("saved-regs-{format}"));
    let layout_out = std::process::Command::new(&host.program)
        .args(host.args_in(dir.path()))
        .arg("layout")
        .output()
        .expect("run the host");
    let [e12, e13, _e14, m12, m13, m14] =
        stored_values(&String::from_utf8_lossy(&layout_out.stdout));
    let mut gdb = host.gdb(dir.path(), "run");
    if format == "compact" {
        gdb = gdb.cmd(reader_support::load_cmd());
    }
    let regs =
        |frame: &str| ["r12", "r13", "r14"].map(|r| (format!("{frame} {r}"), format!("p/x ${r}")));
    let mut gdb = gdb
        .cmd("break jit_test_break_here")
        .cmd("run")
        .section("bt", ["bt"])
        .section("frame middle", ["frame 4"]);
    for (name, cmd) in regs("middle") {
        gdb = gdb.section(&name, [cmd]);
    }
    gdb = gdb.section("frame entry", ["frame 5"]);
    for (name, cmd) in regs("entry") {
        gdb = gdb.section(&name, [cmd]);
    }
    let t = gdb.run();
    if format == "compact" {
        reader_support::assert_no_reader_noise(&t);
        // Records with register rules are read through the data model: nothing refused.
        t.assert_not_contains(None, "jit-reader:");
    }
    t.assert_contains(Some("frame middle"), "in jit_middle");
    t.assert_contains(Some("frame entry"), "in jit_entry");
    // The outer frame: the values jit_entry stored, read from jit_middle's save slots.
    assert_eq!(
        printed(&t, "entry r12"),
        Some(e12),
        "{format}: r12 in jit_entry"
    );
    assert_eq!(
        printed(&t, "entry r13"),
        Some(e13),
        "{format}: r13 in jit_entry"
    );
    // r14: saved by jit_middle but not described. Unknown, not jit_middle's value.
    assert_eq!(printed(&t, "entry r14"), None, "{format}: r14 in jit_entry");
    // In jit_middle's frame, whatever is shown is never another frame's value: its callee
    // jit_frameless says it leaves the registers alone, so they are jit_middle's own values
    // if known at all (the native frames below may make them unknown).
    for (section, own) in [
        ("middle r12", m12),
        ("middle r13", m13),
        ("middle r14", m14),
    ] {
        if let Some(v) = printed(&t, section) {
            assert_eq!(v, own, "{format}: {section}");
        }
    }
    eprintln!("{format}:\n{}", t.text);
}

/// Steps through every instruction of `jit_middle` (over its call): in `jit_entry`'s frame
/// r12 and r13 are the stored values at every one (before the saves the registers still
/// hold them, after the restores again; in between they come from the save slots), and r14
/// is never `jit_middle`'s value (`<not saved>`: its save is not described).
fn check_every_instruction(format: &str) {
    let host = Host::new(testhost(), &["--format", format, "--saved-regs"]);
    let dir = TempDir::new(&format!("saved-regs-step-{format}"));
    let out = std::process::Command::new(&host.program)
        .args(host.args_in(dir.path()))
        .arg("layout")
        .output()
        .expect("run the host");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let [e12, e13, e14, _, _, m14] = stored_values(&text);
    let layout = Layout::parse(&text);
    let middle = layout.get("jit_middle").clone();
    let mut gdb = host.gdb(dir.path(), "run");
    if format == "compact" {
        gdb = gdb.cmd(reader_support::load_cmd());
    }
    // The code is mapped and registered before run_jit runs: an address breakpoint set
    // there can be inserted.
    gdb = gdb
        .cmd("break run_jit")
        .cmd("run")
        .cmd(format!("break *{:#x}", middle.start))
        .cmd("continue")
        .cmd("delete");
    for k in 0..middle.insns.len() {
        gdb = gdb
            .section(&format!("pc {k}"), ["p/x $pc"])
            .cmd("up")
            .section(&format!("r12 {k}"), ["p/x $r12"])
            .section(&format!("r13 {k}"), ["p/x $r13"])
            .section(&format!("r14 {k}"), ["p/x $r14"])
            .cmd("down")
            .cmd("nexti");
    }
    let t = gdb.run();
    for (k, &off) in middle.insns.iter().enumerate() {
        let pc = printed(&t, &format!("pc {k}"));
        if pc != Some(middle.start + off) {
            t.fail(&format!(
                "{format}: instruction {k} at {pc:x?}, not jit_middle+{off}"
            ));
        }
        let at = format!("{format}: jit_middle+{off}");
        assert_eq!(printed(&t, &format!("r12 {k}")), Some(e12), "{at}: r12");
        assert_eq!(printed(&t, &format!("r13 {k}")), Some(e13), "{at}: r13");
        let r14 = printed(&t, &format!("r14 {k}"));
        assert!(r14.is_none() || r14 == Some(e14), "{at}: r14 {r14:x?}");
        assert_ne!(r14, Some(m14), "{at}: r14 is jit_middle's");
    }
}

#[test]
fn every_instruction_of_a_saving_function_elf() {
    if !require_tool("gdb", "saved_registers_step_elf") {
        return;
    }
    check_every_instruction("elf");
}

#[test]
fn every_instruction_of_a_saving_function_compact() {
    if !require_tool("gdb", "saved_registers_step_compact") {
        return;
    }
    check_every_instruction("compact");
}

#[test]
fn caller_frames_show_saved_registers_or_not_saved_elf() {
    if !require_tool("gdb", "saved_registers_elf") {
        return;
    }
    check("elf");
}

#[test]
fn caller_frames_show_saved_registers_or_not_saved_compact() {
    if !require_tool("gdb", "saved_registers_compact") {
        return;
    }
    check("compact");
}
