//! The compiler end to end: scripts compiled to machine code that really runs.

use super::runtime::LoadedScript;
use super::{compile_source, BUNDLED};

fn load(src: &str) -> LoadedScript {
    let compiled = compile_source("t.jg", src).unwrap_or_else(|e| panic!("{e}"));
    LoadedScript::load(compiled).expect("executable memory")
}

fn run(src: &str, f: &str, args: &[i64]) -> i64 {
    load(src).call(f, args).unwrap()
}

fn compile_err(src: &str) -> String {
    compile_source("t.jg", src).unwrap_err().to_string()
}

const MAIN: &str = "fn main() { return 0; }\n";

#[test]
fn arithmetic_and_precedence() {
    let src = format!("{MAIN}fn f(a, b) {{ return a + b * 3 - (a - b) / 2 % 5 + -a; }}");
    for (a, b) in [(7, 2), (-9, 4), (100, -3), (0, 1)] {
        let want = a + b * 3 - (a - b) / 2 % 5 + -a;
        assert_eq!(run(&src, "f", &[a, b]), want, "a={a} b={b}");
    }
    let big = format!("{MAIN}fn f() {{ return 5000000000 * 2 + 1; }}");
    assert_eq!(run(&big, "f", &[]), 10_000_000_001);
}

#[test]
fn comparisons() {
    let src = format!(
        "{MAIN}fn f(a, b) {{ return (a < b) + 2 * (a <= b) + 4 * (a > b) + 8 * (a >= b) + 16 * (a == b) + 32 * (a != b); }}"
    );
    for (a, b) in [(1, 2), (2, 2), (3, 2), (-5, 5)] {
        let want = i64::from(a < b)
            + 2 * i64::from(a <= b)
            + 4 * i64::from(a > b)
            + 8 * i64::from(a >= b)
            + 16 * i64::from(a == b)
            + 32 * i64::from(a != b);
        assert_eq!(run(&src, "f", &[a, b]), want, "a={a} b={b}");
    }
}

#[test]
fn if_else_chains() {
    let src = format!(
        "{MAIN}fn sign(x) {{\n if x < 0 {{ return -1; }} else if x == 0 {{ return 0; }} else {{ return 1; }}\n}}\nfn noelse(x) {{ let r = 10; if x {{ r = 20; }} return r; }}"
    );
    let s = load(&src);
    assert_eq!(s.call("sign", &[-7]).unwrap(), -1);
    assert_eq!(s.call("sign", &[0]).unwrap(), 0);
    assert_eq!(s.call("sign", &[9]).unwrap(), 1);
    assert_eq!(s.call("noelse", &[0]).unwrap(), 10);
    assert_eq!(s.call("noelse", &[3]).unwrap(), 20);
}

#[test]
fn while_loops_and_locals() {
    let src = format!(
        "{MAIN}fn sum(n) {{\n let i = 0;\n let acc = 0;\n while i < n {{\n  let sq = i * i;\n  acc = acc + sq;\n  i = i + 1;\n }}\n return acc;\n}}"
    );
    assert_eq!(run(&src, "sum", &[10]), (0..10).map(|i| i * i).sum::<i64>());
    assert_eq!(run(&src, "sum", &[0]), 0);
}

#[test]
fn recursion_and_calls_with_six_arguments() {
    let src = format!(
        "{MAIN}fn fib(n) {{ if n < 2 {{ return n; }} return fib(n - 1) + fib(n - 2); }}\n\
         fn six(a, b, c, d, e, f) {{ return a - b + c * d - e * f; }}\n\
         fn nested() {{ return 1 + six(1, 2, 3 + fib(5), 4, fib(3), 6); }}\n\
         fn ack(m, n) {{ if m == 0 {{ return n + 1; }} if n == 0 {{ return ack(m - 1, 1); }} return ack(m - 1, ack(m, n - 1)); }}"
    );
    let s = load(&src);
    assert_eq!(s.call("fib", &[20]).unwrap(), 6765);
    assert_eq!(s.call("six", &[1, 2, 3, 4, 5, 6]).unwrap(), 1 - 2 + 12 - 30);
    assert_eq!(s.call("nested", &[]).unwrap(), 1 + (1 - 2 + 8 * 4 - 2 * 6));
    assert_eq!(s.call("ack", &[2, 3]).unwrap(), 9);
}

#[test]
fn natives_and_load() {
    // `probe` hands out a pointer to its argument; `load` reads it back. Calls at odd
    // temporary depth exercise the stack re-alignment before native calls.
    let src = format!(
        "{MAIN}fn f(n) {{ return 1 + (2 + load(probe(n * 3))) + print(n); }}\nfn fall() {{ print(1); }}"
    );
    let s = load(&src);
    assert_eq!(s.call("f", &[5]).unwrap(), 1 + 2 + 15 + 5);
    assert_eq!(
        s.call("fall", &[]).unwrap(),
        0,
        "falling off the end returns 0"
    );
}

#[test]
fn bundled_demo_runs() {
    for (name, src) in BUNDLED {
        let s = LoadedScript::load(compile_source(name, src).unwrap()).unwrap();
        assert_eq!(
            s.call("main", &[]).unwrap(),
            0,
            "{name}: main must return 0"
        );
    }
}

#[test]
fn frame_and_line_layout() {
    let src =
        "fn main() {\n  let a = 1;\n  return g(a,\n    2);\n}\nfn g(x, y) { return x + y; }\n";
    // x86-64 code on any host (inspected, not run).
    let c = compile_for(jit_interface::Arch::X86_64, src);
    let m = c.function("main").unwrap();
    // push rbp (1 byte), mov rbp, rsp (3 bytes).
    assert_eq!((m.push_end, m.setup_end), (1, 4));
    assert_eq!(m.code_bytes(&c.code)[..4], [0x55, 0x48, 0x89, 0xe5]);
    assert_eq!(m.ret_end as usize, m.size);
    assert_eq!(m.code_bytes(&c.code)[m.size - 1], 0xc3, "ends with ret");
    assert_eq!(
        m.code_bytes(&c.code)[m.restore_end as usize - 1],
        0x5d,
        "pop rbp"
    );
    let lines: Vec<u32> = m.lines.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![1, 2, 3, 5]);
    assert_eq!(m.lines[0].offset, 0);
    assert!(m.lines.windows(2).all(|w| w[0].offset < w[1].offset));
    let g = c.function("g").unwrap();
    assert_eq!(g.offset % 16, 0);
    assert_eq!(
        g.slots.iter().map(|s| s.fp_offset).collect::<Vec<_>>(),
        [-8, -16]
    );
    // The debugger's model accepts it.
    let obj = c.jit_object(0x10_0000, "/abs/t.jg", true).unwrap();
    obj.validate().unwrap();
    assert_eq!(obj.functions().iter().nth(1).unwrap().variables().len(), 2);
    let obj = c.jit_object(0x10_0000, "/abs/t.jg", false).unwrap();
    assert!(obj.functions().iter().all(|f| f.variables().is_empty()));
}

#[test]
fn semantic_errors() {
    assert_eq!(
        compile_err("fn f() { return 1; }"),
        "t.jg:1:1: the script has no `fn main()`: execution starts there"
    );
    assert_eq!(
        compile_err("fn main(a) { return a; }"),
        "t.jg:1:1: `main` takes no parameters"
    );
    assert_eq!(
        compile_err("fn main() {\n  return y + 1;\n}"),
        "t.jg:2:10: unknown variable `y`"
    );
    assert_eq!(
        compile_err("fn main() {\n  return nope(1);\n}"),
        "t.jg:2:10: unknown function `nope`"
    );
    assert_eq!(
        compile_err("fn main() { return g(1); }\nfn g(a, b) { return a; }"),
        "t.jg:1:20: `g` takes 2 arguments, but 1 were given"
    );
    assert_eq!(
        compile_err("fn main() { return 0; }\nfn main() { return 1; }"),
        "t.jg:2:1: function `main` is already defined at line 1"
    );
    assert_eq!(
        compile_err("fn main() { let a = 1; let a = 2; return a; }"),
        "t.jg:1:24: `a` is already a variable of this function; assign it with `a = ...`"
    );
    assert_eq!(
        compile_err("fn main() { x = 1; let x = 2; return x; }"),
        "t.jg:1:13: unknown variable `x`"
    );
    assert_eq!(
        compile_err("fn print(n) { return n; }\nfn main() { return 0; }"),
        "t.jg:1:1: `print` is a built-in function and cannot be redefined"
    );
    assert_eq!(
        compile_err("fn main() { return 0; }\nfn h(a, b, c, d, e, f, g) { return 0; }"),
        "t.jg:2:24: function `h` has 7 parameters; at most 6 are supported"
    );
    assert_eq!(
        compile_err("fn main() { return 0; }\nfn h(a, a) { return a; }"),
        "t.jg:2:9: parameter `a` is declared twice"
    );
}

/// Compiles `src` for `arch`, whatever the host.
fn compile_for(arch: jit_interface::Arch, src: &str) -> super::codegen::Compiled {
    let tokens = super::lexer::lex("t.jg", src).unwrap();
    let program = super::parser::parse("t.jg", &tokens).unwrap();
    super::codegen::compile_for(arch, "t.jg", &program).unwrap_or_else(|e| panic!("{e}"))
}

/// Compiles `src` to aarch64 code (on any host: inspected here; run by the tests above in
/// an aarch64 build, e.g. under qemu-user, and by `tests/demo_aarch64.rs`).
fn compile_a64(src: &str) -> super::codegen::Compiled {
    compile_for(jit_interface::Arch::Aarch64, src)
}

/// The 32-bit instruction words of an aarch64 function.
fn words(f: &super::codegen::CompiledFunction, code: &[u8]) -> Vec<u32> {
    f.code_bytes(code)
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

// The frame-record instructions, encoded by hand from the Arm ARM (not by dynasm).
const STP_FRAME: u32 = 0xa9bf_7bfd; // stp x29, x30, [sp, #-16]!
const MOV_FP_SP: u32 = 0x9100_03fd; // mov x29, sp (add x29, sp, #0)
const MOV_SP_FP: u32 = 0x9100_03bf; // mov sp, x29 (add sp, x29, #0)
const LDP_FRAME: u32 = 0xa8c1_7bfd; // ldp x29, x30, [sp], #16
const RET: u32 = 0xd65f_03c0;

#[test]
fn aarch64_frame_and_line_layout() {
    let src =
        "fn main() {\n  let a = 1;\n  return g(a,\n    2);\n}\nfn g(x, y) { return x + y; }\n";
    let c = compile_a64(src);
    assert_eq!(c.arch, jit_interface::Arch::Aarch64);
    let m = c.function("main").unwrap();
    let w = words(m, &c.code);
    assert_eq!((m.push_end, m.setup_end), (4, 8));
    // One slot, rounded up to 16 bytes: `sub sp, sp, #16`.
    assert_eq!(w[..3], [STP_FRAME, MOV_FP_SP, 0xd100_43ff]);
    assert_eq!(m.ret_end as usize, m.size);
    assert_eq!(w[w.len() - 3..], [MOV_SP_FP, LDP_FRAME, RET]);
    assert_eq!(m.restore_end as usize, m.size - 4, "just after the ldp");
    // The same front end: the same rows as on x86-64, at aarch64 offsets.
    let lines: Vec<u32> = m.lines.iter().map(|r| r.line).collect();
    assert_eq!(lines, vec![1, 2, 3, 5]);
    assert_eq!(m.lines[0].offset, 0);
    assert!(m.lines.iter().all(|r| r.offset % 4 == 0));
    let g = c.function("g").unwrap();
    assert_eq!(g.offset % 16, 0);
    assert_eq!(
        g.slots.iter().map(|s| s.fp_offset).collect::<Vec<_>>(),
        [-8, -16]
    );
    // `stur x0, [x29, #-8]; stur x1, [x29, #-16]` store the parameters.
    assert_eq!(words(g, &c.code)[3..5], [0xf81f_83a0, 0xf81f_03a1]);
    // The padding before `g` traps (`brk #0`).
    let pad = &c.code[m.size..g.offset];
    assert!(pad
        .chunks_exact(4)
        .all(|b| u32::from_le_bytes(b.try_into().unwrap()) == 0xd420_0000));
    let obj = c.jit_object(0x10_0000, "/abs/t.jg", true).unwrap();
    obj.validate().unwrap();
    assert_eq!(obj.arch(), jit_interface::Arch::Aarch64);
}

/// The unwind rows the debugger gets from the declared prologue and epilogue agree, at every
/// instruction of every function of the bundled script, with the frame state the code itself
/// sets up (read from its frame-record instructions).
#[test]
fn aarch64_declared_rows_match_the_code() {
    use jit_interface::{Arch, CfaBase};
    let c = compile_a64(BUNDLED[0].1);
    let obj = c.jit_object(0x40_0000, "/abs/fib.jg", false).unwrap();
    obj.validate().unwrap();
    for (f, d) in c.functions.iter().zip(obj.functions().iter()) {
        assert_eq!(f.name, d.name());
        let rows = d.frame().rows(Arch::Aarch64, f.size as u64);
        // (CFA base, CFA offset, saved x29 at CFA + n): at entry, after the stp, after the mov.
        let entry = (CfaBase::Sp, 0, 0);
        let mut state = entry;
        for (i, &word) in words(f, &c.code).iter().enumerate() {
            let at = 4 * i as u32;
            let row = rows.iter().rev().find(|r| r.offset <= at).unwrap();
            assert_eq!(
                (row.cfa_base, row.cfa_offset, row.fp_offset),
                state,
                "{} at offset {at}",
                f.name
            );
            state = match word {
                STP_FRAME => (CfaBase::Sp, 16, -16),
                MOV_FP_SP => (CfaBase::Fp, 16, -16),
                LDP_FRAME => entry,
                _ => state,
            };
        }
    }
}

#[test]
fn aarch64_constants_and_calls() {
    let c = compile_a64(&format!(
        "{MAIN}fn k() {{ return -1; }}\nfn big() {{ return 5000000000; }}\nfn n() {{ return print(7); }}"
    ));
    let body = |name: &str| words(c.function(name).unwrap(), &c.code);
    // `-1` is 1 negated: movz x0, #1; neg x0, x0.
    assert_eq!(body("k")[2..4], [0xd280_0020, 0xcb00_03e0]);
    // 0x1_2a05_f200: movz x0, #0xf200; movk x0, #0x2a05, lsl #16; movk x0, #1, lsl #32.
    assert_eq!(body("big")[2..5], [0xd29e_4000, 0xf2a5_40a0, 0xf2c0_0020]);
    // A native callback: its address in x16, then `blr x16`.
    assert!(body("n").contains(&0xd63f_0200));
}

#[test]
fn code_for_another_architecture_is_not_loaded() {
    use jit_interface::Arch;
    let other = match Arch::HOST {
        Arch::X86_64 => Arch::Aarch64,
        Arch::Aarch64 => Arch::X86_64,
    };
    let c = compile_for(other, MAIN);
    let err = LoadedScript::load(c).err().expect("refused").to_string();
    assert!(
        err.contains(&format!("compiled for {}", other.name())),
        "{err}"
    );
}

#[test]
fn aarch64_frames_have_a_limit() {
    let lets: String = (0..511).map(|i| format!("let v{i} = {i};\n")).collect();
    let src = format!("fn main() {{\n{lets}return 0;\n}}\n");
    let tokens = super::lexer::lex("t.jg", &src).unwrap();
    let program = super::parser::parse("t.jg", &tokens).unwrap();
    let err = super::codegen::compile_for(jit_interface::Arch::Aarch64, "t.jg", &program)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "t.jg:1:1: function `main` has 511 parameters and variables; at most 510 fit a aarch64 frame"
    );
    // 510 fit, the far ones addressed through x16; x86-64 takes any number.
    let fits: String = (0..510).map(|i| format!("let v{i} = {i};\n")).collect();
    compile_a64(&format!("fn main() {{\n{fits}return v509;\n}}\n"));
    super::codegen::compile_for(jit_interface::Arch::X86_64, "t.jg", &program).unwrap();
}
