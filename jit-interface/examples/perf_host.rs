//! A tiny JIT for the perf tests: emits two x86-64 functions into an executable buffer,
//! registers them (lines, frame-pointer frames) and spins in them for a given time, so that
//! `perf record` has JIT code to sample.
//!
//! ```text
//! perf_host [--ms N] [--perf-map] [--jitdump DIR] [--extra N] [--fork] [--format compact|elf]
//! ```
//! `--perf-map` / `--jitdump` switch the outputs on through the API; without them the
//! environment (`JIT_PERF_MAP=1`, `JIT_DUMP=1`, `JIT_DUMP_DIR`) decides. `--extra N` registers
//! N more one-instruction functions in a second object. The layout of everything registered
//! is printed on stdout (`function NAME START SIZE`, `line NAME OFFSET LINE FILE`) so that
//! tests compare perf's output with what was really registered; `loop NAME START END` gives
//! the offsets of the hot loop, where nearly all samples land.

#[path = "support/code_buf.rs"]
mod code_buf;
use code_buf::CodeBuf;
use std::time::{Duration, Instant};

use jit_interface::{register, Format, JitObject, LineRow};

// The machine code below pretends to come from this `hot.js`:
//
//   1 function hot(n) {
//   2   let acc = 0;
//   3   while (n) { acc = (acc + n) * 3; n--; }
//   4   return acc;
//   5 }
//   6
//   7 function outer(n) {
//   8   return hot(n);
//   9 }

/// `hot(n)`: rdi = n; returns a value depending on every iteration.
const HOT: [u8; 25] = [
    0x55, // 0x00 push rbp
    0x48, 0x89, 0xe5, // 0x01 mov rbp, rsp
    0x31, 0xc0, // 0x04 xor eax, eax                     line 2
    0x48, 0x85, 0xff, // 0x06 test rdi, rdi
    0x74, 0x0c, // 0x09 je 0x17
    0x48, 0x01, 0xf8, // 0x0b add rax, rdi                line 3 (the loop)
    0x48, 0x6b, 0xc0, 0x03, // 0x0e imul rax, rax, 3
    0x48, 0xff, 0xcf, // 0x12 dec rdi
    0x75, 0xf4, // 0x15 jne 0x0b
    0x5d, // 0x17 pop rbp                                  line 4
    0xc3, // 0x18 ret
];
const HOT_LINES: [LineRow; 4] = [
    LineRow { offset: 0, line: 1 },
    LineRow { offset: 4, line: 2 },
    LineRow {
        offset: 0x0b,
        line: 3,
    },
    LineRow {
        offset: 0x17,
        line: 4,
    },
];

/// `outer(n)`: calls `hot(n)` through an absolute address patched in at offset 6.
const OUTER_LEN: usize = 18;
fn outer_code(hot: u64) -> [u8; OUTER_LEN] {
    let mut c = [0u8; OUTER_LEN];
    c[..6].copy_from_slice(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0xb8]); // push rbp; mov rbp,rsp; movabs rax,
    c[6..14].copy_from_slice(&hot.to_le_bytes());
    c[14..].copy_from_slice(&[0xff, 0xd0, 0x5d, 0xc3]); // call rax; pop rbp; ret
    c
}
const OUTER_LINES: [LineRow; 3] = [
    LineRow { offset: 0, line: 7 },
    LineRow { offset: 4, line: 8 },
    LineRow {
        offset: 0x10,
        line: 9,
    },
];
const OUTER_OFFSET: usize = 64;

fn print_layout(object: &JitObject) {
    for f in object.functions() {
        println!("function {} {:#x} {}", f.name(), f.start(), f.size());
        for row in f.lines() {
            println!(
                "line {} {} {} {}",
                f.name(),
                row.offset,
                row.line,
                f.file().unwrap_or("")
            );
        }
    }
}

/// `--fork`: a child process registers `jit_child` (the first byte of `hot`, as a one-byte
/// function) and exits; the parent waits for it. The child's perf files are its own.
fn fork_child(base: u64, format: Format) {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: the process is single-threaded here, so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut o = JitObject::new();
        o.add_function("jit_child", base, 1).unwrap();
        println!("child {}", std::process::id());
        print_layout(&o);
        let r = register(&o, format).expect("register in child");
        std::mem::forget(r);
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(status, 0, "child failed");
}

fn main() {
    let mut ms = 1000u64;
    let mut extra = 0usize;
    let mut format = Format::Compact;
    let mut fork = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| args.next().unwrap_or_else(|| panic!("{a} needs {what}"));
        match a.as_str() {
            "--ms" => ms = value("milliseconds").parse().expect("--ms N"),
            "--extra" => extra = value("a count").parse().expect("--extra N"),
            "--perf-map" => {
                let p = jit_interface::perf::enable_perf_map().expect("perf map");
                println!("perf-map {}", p.display());
            }
            "--jitdump" => {
                let dir = value("a directory");
                let p = jit_interface::perf::enable_jitdump(Some(dir.as_ref())).expect("jitdump");
                println!("jitdump {}", p.display());
            }
            "--fork" => fork = true,
            "--format" => {
                format = match value("compact or elf").as_str() {
                    "compact" => Format::Compact,
                    "elf" => Format::Elf,
                    f => panic!("unknown format {f}"),
                }
            }
            _ => panic!("unknown argument {a}"),
        }
    }
    println!("pid {}", std::process::id());

    let mut buf = CodeBuf::new(OUTER_OFFSET + OUTER_LEN);
    let hot_addr = buf.base();
    let outer_addr = hot_addr + OUTER_OFFSET as u64;
    let mut code = vec![0xccu8; OUTER_OFFSET + OUTER_LEN]; // int3 padding
    code[..HOT.len()].copy_from_slice(&HOT);
    code[OUTER_OFFSET..].copy_from_slice(&outer_code(hot_addr));
    buf.write(0, &code);
    let base = buf.make_executable();

    let mut obj = JitObject::new();
    let hot = obj
        .add_function("jit_hot_loop", hot_addr, HOT.len() as u64)
        .unwrap();
    obj.set_lines(hot, "hot.js", &HOT_LINES).unwrap();
    obj.set_frame_pointer(hot, 1, 4).unwrap();
    obj.add_epilogue(hot, 0x18, 0x19).unwrap();
    let outer = obj
        .add_function("jit_outer", outer_addr, OUTER_LEN as u64)
        .unwrap();
    obj.set_lines(outer, "hot.js", &OUTER_LINES).unwrap();
    obj.set_frame_pointer(outer, 1, 4).unwrap();
    obj.add_epilogue(outer, 0x11, 0x12).unwrap();
    print_layout(&obj);
    println!("loop jit_hot_loop {} {}", 0x0b, 0x17);
    let _registration = register(&obj, format).expect("register");

    let mut _extra_registration = None;
    if extra > 0 {
        let mut buf = CodeBuf::new(extra);
        buf.write(0, &vec![0xc3u8; extra]); // `ret` each
        let rets = buf.make_executable();
        let mut o = JitObject::new();
        for i in 0..extra {
            o.add_function(&format!("jit_stub_{i}"), rets + i as u64, 1)
                .unwrap();
        }
        print_layout(&o);
        _extra_registration = Some(register(&o, format).expect("register extra"));
    }
    if fork {
        fork_child(base, format);
    }
    for e in jit_interface::perf::errors() {
        println!("perf-error {e}");
    }

    // SAFETY: `outer_addr` holds the code above, a function with the C calling convention
    // taking and returning a 64-bit integer.
    let outer_fn: extern "C" fn(u64) -> u64 = unsafe { std::mem::transmute(outer_addr as usize) };
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut acc = 0u64;
    while Instant::now() < deadline {
        acc = acc.wrapping_add(outer_fn(std::hint::black_box(1_000_000)));
    }
    println!("result {acc}");
}
