//! Tail-call host for `tests/elf_tail_calls.rs`: real x86-64 code, compiled at run time, in
//! which a function leaves by a jump to another (a tail call), registered as ELF with its
//! call sites, so that GDB can show the frame the jump replaced.
//!
//! ```text
//! tail_call_host [--no-tail-calls]
//! ```
//! `jit_outer` calls `jit_hop`, which jumps to `jit_inner` (its frame is gone: `jit_inner`
//! returns straight to `jit_outer`), which calls `tail_host_stop`. Stopped there, the stack
//! holds frames of `jit_inner` and `jit_outer` only; GDB adds a tail-call frame for
//! `jit_hop` from the call sites: `jit_outer` calls `jit_hop`, whose one tail call goes to
//! `jit_inner`. With `--no-tail-calls` the tail call is not declared (the other call sites
//! are), and GDB cannot know `jit_hop` was there.

#[path = "support/code_buf.rs"]
mod code_buf;
use code_buf::CodeBuf;

use jit_interface::{CallTarget, Format, JitObject, LineRow, UnwindRow};

/// GDB breaks here, called by `jit_inner` (returns its argument + 1).
#[no_mangle]
#[inline(never)]
pub extern "C" fn tail_host_stop(n: i64) -> i64 {
    std::hint::black_box(n + 1)
}

const STRIDE: usize = 64;

/// `mov rax, imm64`.
fn mov_rax(c: &mut Vec<u8>, v: u64) {
    c.extend([0x48, 0xb8]);
    c.extend(v.to_le_bytes());
}

fn main() {
    let tail_calls = match std::env::args().nth(1).as_deref() {
        None => true,
        Some("--no-tail-calls") => false,
        Some(a) => panic!("usage: tail_call_host [--no-tail-calls], not {a}"),
    };
    let mut buf = CodeBuf::new(3 * STRIDE);
    let base = buf.base();
    let (outer, hop, inner) = (base, base + STRIDE as u64, base + 2 * STRIDE as u64);
    let stop = tail_host_stop as extern "C" fn(i64) -> i64 as usize as u64;

    // jit_outer(n): push rbp; mov rbp, rsp; call jit_hop; pop rbp; ret
    let mut o = Vec::new();
    o.push(0x55);
    o.extend([0x48, 0x89, 0xe5]);
    mov_rax(&mut o, hop);
    o.extend([0xff, 0xd0]); // call rax
    let outer_call = o.len() as u32;
    o.push(0x5d);
    o.push(0xc3);
    // jit_hop(n): n += 1; jmp jit_inner (no frame of its own)
    let mut h = Vec::new();
    h.extend([0x48, 0xff, 0xc7]); // inc rdi
    mov_rax(&mut h, inner);
    h.extend([0xff, 0xe0]); // jmp rax
    let hop_jump = h.len() as u32;
    // jit_inner(n): push rbp; mov rbp, rsp; call tail_host_stop; pop rbp; ret
    let mut i = Vec::new();
    i.push(0x55);
    i.extend([0x48, 0x89, 0xe5]);
    mov_rax(&mut i, stop);
    i.extend([0xff, 0xd0]); // call rax
    let inner_call = i.len() as u32;
    i.push(0x5d);
    i.push(0xc3);
    for (k, code) in [&o, &h, &i].into_iter().enumerate() {
        buf.write(k * STRIDE, code);
    }
    buf.make_executable();

    let mut obj = JitObject::new();
    let line = [LineRow { offset: 0, line: 1 }];
    let fo = obj
        .add_function("jit_outer", outer, o.len() as u64)
        .unwrap();
    obj.set_lines(fo, "tail.js", &line).unwrap();
    obj.set_frame_pointer(fo, 1, 4).unwrap();
    obj.add_epilogue(fo, o.len() as u32 - 1, o.len() as u32)
        .unwrap();
    obj.add_call_site(fo, outer_call, CallTarget::Address(hop))
        .unwrap();
    let fh = obj.add_function("jit_hop", hop, h.len() as u64).unwrap();
    obj.set_lines(fh, "tail.js", &[LineRow { offset: 0, line: 5 }])
        .unwrap();
    obj.set_unwind(fh, &[UnwindRow::X86_64_ENTRY]).unwrap();
    if tail_calls {
        obj.add_tail_call(fh, hop_jump, CallTarget::Address(inner))
            .unwrap();
    }
    let fi = obj
        .add_function("jit_inner", inner, i.len() as u64)
        .unwrap();
    obj.set_lines(fi, "tail.js", &[LineRow { offset: 0, line: 9 }])
        .unwrap();
    obj.set_frame_pointer(fi, 1, 4).unwrap();
    obj.add_epilogue(fi, i.len() as u32 - 1, i.len() as u32)
        .unwrap();
    let host = CallTarget::Symbol {
        address: stop,
        name: "tail_host_stop".into(),
    };
    obj.add_call_site(fi, inner_call, host).unwrap();
    let registration = jit_interface::register(&obj, Format::Elf).expect("register");

    // SAFETY: `outer` holds jit_outer, which takes n in rdi and returns in rax (System V).
    let jit: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(outer as usize) };
    let got = jit(40);
    assert_eq!(got, 42, "jit_outer(40) = tail_host_stop(40 + 1)");
    println!("tail call host: ok");
    drop(registration);
}
