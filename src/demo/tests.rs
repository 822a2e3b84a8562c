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
    let c = compile_source("t.jg", src).unwrap();
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
        g.slots.iter().map(|s| s.rbp_offset).collect::<Vec<_>>(),
        [-8, -16]
    );
    // The debugger's model accepts it.
    let s = LoadedScript::load(c).unwrap();
    let obj = s.jit_object("/abs/t.jg", true).unwrap();
    obj.validate().unwrap();
    assert_eq!(obj.functions().iter().nth(1).unwrap().variables().len(), 2);
    let obj = s.jit_object("/abs/t.jg", false).unwrap();
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
