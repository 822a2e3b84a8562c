//! The cranelift example (`jit-cranelift/examples/cranelift.rs`): three functions compiled by
//! cranelift-jit, `outer` -> `middle` -> `inner` -> native `jit_native_stop`, registered
//! through jit-cranelift. The machine code runs (its result is checked), and in GDB, as ELF
//! and as compact records (with the reader), `stepi` through every instruction of the three
//! functions shows at each step a backtrace with the right JIT callers, names and lines, down
//! to the Rust `main`; stopped in the native callback, `bt` shows all of them, and the
//! callee-saved registers of `middle` and `outer` are the values each held at its call.
//!
//! Three GDB sessions: one that disassembles the JIT code (GDB's own disassembler gives the
//! instruction boundaries the walk needs), then one walk per format.

mod common;
mod reader_support;

use std::path::Path;
use std::process::Command;

use common::*;
use reader_support::load_cmd;

/// The example's source file (registered text; nowhere on disk).
const FILE: &str = "chain.src";

/// `outer(10)` as the example's source says (wrapping i64 arithmetic).
fn expected_result(a: i64) -> i64 {
    let inner = |a: i64| a.wrapping_add(1).wrapping_add(1).wrapping_mul(2);
    let middle = |a: i64| {
        let (x, y, z) = (a.wrapping_mul(3), a.wrapping_mul(5), a.wrapping_mul(7));
        inner(x ^ y ^ z)
            .wrapping_add(x)
            .wrapping_add(y)
            .wrapping_add(z)
    };
    let (p, q) = (a + 0x1000, a + 0x2000);
    middle(p.wrapping_mul(q)).wrapping_add(p).wrapping_add(q)
}

/// One instruction of a JIT function: offset from its start, mnemonic.
#[derive(Debug, Clone)]
struct Insn {
    offset: u64,
    mnemonic: String,
}

/// The instructions of `name` from a `disassemble` section of `t`.
fn instructions(t: &Transcript, name: &str, start: u64) -> Vec<Insn> {
    let insns: Vec<Insn> = t
        .section(&format!("disas {name}"))
        .lines()
        .filter_map(|l| {
            let l = l.trim_start().trim_start_matches("=>").trim_start();
            let (addr, rest) = l.split_once(['\t'])?;
            let addr = parse_hex(addr.split([':', ' ']).next()?)?;
            let mnemonic = rest.split_whitespace().next()?.to_string();
            Some(Insn {
                offset: addr - start,
                mnemonic,
            })
        })
        .collect();
    if insns.is_empty() {
        t.fail(&format!("no instructions of {name} disassembled"));
    }
    insns
}

/// One stop of the walk: section name, expected pc, expected chain of JIT frames.
#[derive(Debug)]
struct Stop {
    section: String,
    pc: u64,
    chain: Vec<&'static str>,
    /// What to do after it: `stepi`, or `stepi` into the native callback then `finish`.
    into_native: bool,
    /// The stop is at the function's call of the next JIT function.
    calls_jit: bool,
}

/// The callee-saved registers cranelift uses (System V: rbx, r12-r15).
const SAVED: [&str; 5] = ["rbx", "r12", "r13", "r14", "r15"];

/// The `$N = 0x...` values printed in a section, in order.
fn values(t: &Transcript, section: &str) -> Vec<u64> {
    t.section(section)
        .lines()
        .filter(|l| l.starts_with('$'))
        .filter_map(|l| parse_hex(l.split(" = ").nth(1)?.trim()))
        .collect()
}

/// The stops of a walk through straight-line code (each function has one call and one
/// `ret`, at its end): outer up to its call, middle up to its call, inner up to its call
/// (into the native callback), then the rest of inner, middle and outer.
fn walk(layout: &Layout, code: &[(&'static str, Vec<Insn>)]) -> Vec<Stop> {
    let chain_of = |name: &'static str| -> Vec<&'static str> {
        let all = ["inner", "middle", "outer"];
        all[all.iter().position(|n| *n == name).unwrap()..].to_vec()
    };
    let mut before = Vec::new();
    let mut after = Vec::new();
    for (name, insns) in code.iter().rev() {
        // outer, middle, inner order: `code` lists inner first.
        let f = layout.get(name);
        let calls: Vec<usize> = (0..insns.len())
            .filter(|&i| insns[i].mnemonic.starts_with("call"))
            .collect();
        let jumps = insns.iter().filter(|i| i.mnemonic.starts_with('j')).count();
        assert!(
            calls.len() == 1 && jumps == 0 && insns.last().unwrap().mnemonic.starts_with("ret"),
            "{name} is not straight-line code with one call and a final ret: {insns:?}"
        );
        let stop = |i: usize| Stop {
            section: format!("{name} {i}"),
            pc: f.start + insns[i].offset,
            chain: chain_of(name),
            into_native: *name == "inner" && i == calls[0],
            calls_jit: *name != "inner" && i == calls[0],
        };
        before.extend((0..=calls[0]).map(stop));
        after.push((calls[0] + 1..insns.len()).map(stop).collect::<Vec<_>>());
    }
    // After inner's call: the rest of inner, then middle, then outer.
    before.extend(after.into_iter().rev().flatten());
    before
}

/// GDB on the example registering `format`: break where the code is registered, then at
/// `outer`'s entry, and walk `stops`.
fn session(exe: &Path, dir: &Path, format: &str, stops: &[Stop]) -> Transcript {
    let mut g = Gdb::program(exe, &[format], dir);
    if format == "compact" {
        g = g.cmd(load_cmd());
    }
    g = g
        .cmd("break jit_cranelift_ready")
        .cmd("run")
        .cmd("tbreak *outer")
        .cmd("continue");
    for (k, s) in stops.iter().enumerate() {
        g = g.section(&s.section, ["p/x $pc", "bt 6"]);
        if s.calls_jit {
            // The registers the function itself holds at its call (frame #0's are real).
            g = g.section(
                &format!("{} call", s.chain[0]),
                SAVED.map(|r| format!("p/x ${r}")),
            );
        }
        if s.into_native {
            g = g.cmd("stepi").section("native", ["bt 6"]);
            // The same registers of the callers, unwound from the native callback.
            for (frame, name) in [(2, "middle"), (3, "outer")] {
                g = g
                    .section(&format!("{name} unwound"), [format!("frame {frame}")])
                    .section(
                        &format!("{name} unwound values"),
                        SAVED.map(|r| format!("p/x ${r}")),
                    );
            }
            g = g.cmd("frame 0").cmd("finish");
        } else if k + 1 < stops.len() {
            g = g.cmd("stepi");
        }
    }
    g.section("end", ["continue"]).run()
}

/// The frames of a stop: `chain` from #0 on, each with its name, file and line, then the
/// Rust `main` that called `outer`; no unknown frame.
fn check_stop(t: &Transcript, layout: &Layout, section: &str, chain: &[&str], pc: Option<u64>) {
    let frames = t.gdb_bt(section);
    let names: Vec<&str> = frames.iter().map(|f| f.function.as_str()).collect();
    let fail = |why: String| t.fail(&format!("{section}: {why}; backtrace {names:?}"));
    if let Some(pc) = pc {
        let shown = reader_support::hex_value(t, section);
        if shown != pc {
            fail(format!("pc {shown:#x}, expected {pc:#x}"));
        }
    }
    for (k, want) in chain.iter().enumerate() {
        let Some(f) = frames.get(k).filter(|f| f.is(want)) else {
            t.fail(&format!(
                "{section}: frame #{k} is not {want}; backtrace {names:?}"
            ));
        };
        // The JIT functions (the native callback is not one).
        if layout.functions.iter().any(|i| i.name == *want) {
            let info = layout.get(want);
            // Frame #0 shows no pc at the start of a line: the stop's own is checked above.
            let Some(fpc) = f.pc.or(pc.filter(|_| k == 0)) else {
                t.fail(&format!("{section}: frame #{k} ({want}) without a pc"));
            };
            let lookup = if k == 0 { fpc } else { fpc - 1 };
            // Line 0: a gap row, no line.
            let line = info.line_at(lookup).filter(|&l| l != 0);
            if f.line != line {
                fail(format!(
                    "frame #{k} ({want}) at line {:?}, the registered rows give {line:?} for {lookup:#x}",
                    f.line
                ));
            }
            if line.is_some() {
                let file = f.file.as_deref().unwrap_or("");
                if !(file == FILE || is_cached_name(file, FILE)) {
                    fail(format!("frame #{k} ({want}) in file {file}, not {FILE}"));
                }
            }
        }
    }
    if !frames.get(chain.len()).is_some_and(|f| f.is("main")) {
        fail(format!("frame #{} is not the Rust main", chain.len()));
    }
}

#[test]
fn cranelift_functions_step_by_step_in_gdb_elf_and_compact() {
    let exe = package_example("jit-cranelift", "cranelift");
    let want = format!("outer(10) = {}", expected_result(10));
    let mut layout = None;
    for format in ["elf", "compact"] {
        let out = Command::new(&exe).arg(format).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&want),
            "{} {format}: {} (expected `{want}`)\n{stdout}{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        layout = Some(Layout::parse(&stdout));
    }
    let out = Command::new(&exe).arg("bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    if !require_tool("gdb", "cranelift") {
        return;
    }
    // Sizes and line rows do not depend on where the code is; addresses do (GDB disables
    // address randomisation: each session prints its own).
    let sizes = layout.unwrap();
    let names = ["inner", "middle", "outer"];

    let dir = TempDir::new("cranelift");
    let mut g = Gdb::program(&exe, &["elf"], dir.path())
        .cmd("break jit_cranelift_ready")
        .cmd("run");
    for n in names {
        g = g.section(
            &format!("disas {n}"),
            [format!("disassemble {n},+{}", sizes.get(n).size)],
        );
    }
    let t = g.cmd("kill").run();
    let here = Layout::parse(&t.text);
    let code: Vec<(&str, Vec<Insn>)> = names
        .iter()
        .map(|n| (*n, instructions(&t, n, here.get(n).start)))
        .collect();

    let mut backtraces: Vec<Vec<Vec<String>>> = Vec::new();
    for format in ["elf", "compact"] {
        let dir = TempDir::new(&format!("cranelift-{format}"));
        // The walk is planned with the first session's addresses and checked against this
        // session's own layout: GDB runs the program the same way each time.
        let stops = walk(&here, &code);
        let t = session(&exe, dir.path(), format, &stops);
        let layout = Layout::parse(&t.text);
        for n in names {
            if layout.get(n).start != here.get(n).start {
                t.fail(&format!("{n} moved between GDB sessions"));
            }
        }
        let mut bts = Vec::new();
        for s in &stops {
            check_stop(&t, &layout, &s.section, &s.chain, Some(s.pc));
            bts.push(
                t.gdb_bt(&s.section)
                    .iter()
                    .take(s.chain.len() + 1)
                    .map(|f| f.function.clone())
                    .collect(),
            );
        }
        check_stop(
            &t,
            &layout,
            "native",
            &["jit_native_stop", "inner", "middle", "outer"],
            None,
        );
        // Callee-saved registers: each caller frame shows what the function held when it
        // made its call, though the functions it called have changed them since (cranelift
        // saves them in its frame and says where; jit-interface passes that on).
        let (middle, outer) = (values(&t, "middle call"), values(&t, "outer call"));
        let (middle_unwound, outer_unwound) = (
            values(&t, "middle unwound values"),
            values(&t, "outer unwound values"),
        );
        if middle.len() != SAVED.len() || outer.len() != SAVED.len() {
            t.fail(&format!("{format}: register values {middle:?} {outer:?}"));
        }
        if middle_unwound != middle || outer_unwound != outer {
            t.fail(&format!(
                "{format}: {SAVED:?} unwound in middle {middle_unwound:x?}, outer {outer_unwound:x?}; \
                 held at their calls: middle {middle:x?}, outer {outer:x?}"
            ));
        }
        // Not vacuous: middle changed what outer keeps, and outer keeps its argument, 10.
        if middle == outer || !outer.contains(&10) {
            t.fail(&format!(
                "{format}: middle {middle:x?} and outer {outer:x?}: expected middle to change outer's registers and outer to keep 10"
            ));
        }
        t.assert_contains(Some("end"), &want);
        t.assert_contains(Some("end"), "exited normally");
        backtraces.push(bts);
    }
    // The same registration gives the same backtrace in both formats at every instruction.
    assert_eq!(
        backtraces[0], backtraces[1],
        "ELF and compact backtraces differ"
    );
}
