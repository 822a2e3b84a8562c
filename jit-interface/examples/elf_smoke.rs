//! Smoke test of the ELF payload in a real debugger: writes three x86-64 frame-pointer
//! functions into executable memory, registers them as one ELF object and runs them.
//! `jit_top` (main.js) calls `jit_mid` (main.js), which calls `jit_leaf` (leaf.js), which
//! calls the native `native_fn`. `jit_leaf` and `jit_mid` are adjacent (one `.text` run),
//! `jit_top` lies 100 bytes further (a second run).
//!
//! ```text
//! cargo build -p jit-interface --example elf_smoke
//! gdb -batch -nx -ex 'break native_fn' -ex run -ex bt -ex up -ex up -ex 'info args' \
//!     --args target/debug/examples/elf_smoke
//! lldb -b -o 'b native_fn' -o run -o bt target/debug/examples/elf_smoke
//! ```

use jit_interface::{BaseType, Format, JitObject, LineRow, Location, Variable, VariableKind};

/// Where the debugger stops; called from JIT code.
#[inline(never)]
#[no_mangle]
pub extern "C" fn native_fn() {
    println!("native_fn reached from JIT code");
    std::hint::black_box(());
}

const LEAF: usize = 0;
const MID: usize = 32;
const TOP: usize = 160;

/// `push rbp; mov rbp, rsp`
const PROLOGUE: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];

/// `movabs rax, target; call rax`
fn call(target: u64) -> Vec<u8> {
    let mut code = vec![0x48, 0xb8];
    code.extend_from_slice(&target.to_le_bytes());
    code.extend_from_slice(&[0xff, 0xd0]);
    code
}

fn main() {
    let page = 4096;
    // SAFETY: a fresh anonymous private mapping; the result is checked below.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(mem, libc::MAP_FAILED, "mmap failed");
    let base = mem as u64;

    // jit_leaf: prologue; call native_fn; pop rbp; ret
    let mut leaf = PROLOGUE.to_vec();
    leaf.extend(call(native_fn as *const () as u64)); // 4..16
    leaf.extend_from_slice(&[0x5d, 0xc3]); // pop rbp @16, ret @17
                                           // jit_mid(n): prologue; sub rsp, 16; mov [rbp-8], rdi; call jit_leaf; leave; ret
    let mut mid = PROLOGUE.to_vec();
    mid.extend_from_slice(&[0x48, 0x83, 0xec, 0x10]); // @4
    mid.extend_from_slice(&[0x48, 0x89, 0x7d, 0xf8]); // @8
    mid.extend(call(base + LEAF as u64)); // @12..24
    mid.extend_from_slice(&[0xc9, 0xc3]); // leave @24, ret @25
                                          // jit_top: prologue; mov rdi, 42; call jit_mid; pop rbp; ret
    let mut top = PROLOGUE.to_vec();
    top.extend_from_slice(&[0x48, 0xc7, 0xc7, 42, 0, 0, 0]); // @4
    top.extend(call(base + MID as u64)); // @11..23
    top.extend_from_slice(&[0x5d, 0xc3]); // pop rbp @23, ret @24

    // SAFETY: the three pieces fit in the page at disjoint offsets; the page is writable.
    unsafe {
        let p = mem as *mut u8;
        for (off, code) in [(LEAF, &leaf), (MID, &mid), (TOP, &top)] {
            std::ptr::copy_nonoverlapping(code.as_ptr(), p.add(off), code.len());
        }
    }
    // SAFETY: `mem` is the page mapped above.
    let rc = unsafe { libc::mprotect(mem, page, libc::PROT_READ | libc::PROT_EXEC) };
    assert_eq!(rc, 0, "mprotect failed");

    let mut obj = JitObject::new();
    let f_leaf = obj
        .add_function("jit_leaf", base + LEAF as u64, leaf.len() as u64)
        .unwrap();
    obj.set_lines(
        f_leaf,
        "leaf.js",
        &[
            LineRow {
                offset: 0,
                line: 10,
            },
            LineRow {
                offset: 4,
                line: 11,
            },
            LineRow {
                offset: 16,
                line: 12,
            },
        ],
    )
    .unwrap();
    obj.set_frame_pointer(f_leaf, 1, 4).unwrap();
    obj.add_epilogue(f_leaf, 17, 18).unwrap();

    let f_mid = obj
        .add_function("jit_mid", base + MID as u64, mid.len() as u64)
        .unwrap();
    obj.set_lines(
        f_mid,
        "main.js",
        &[
            LineRow {
                offset: 0,
                line: 20,
            },
            LineRow {
                offset: 8,
                line: 21,
            },
            LineRow {
                offset: 12,
                line: 22,
            },
            LineRow {
                offset: 24,
                line: 23,
            },
        ],
    )
    .unwrap();
    obj.set_frame_pointer(f_mid, 1, 4).unwrap();
    obj.add_epilogue(f_mid, 25, 26).unwrap();
    obj.add_variable(
        f_mid,
        Variable {
            name: "n".into(),
            kind: VariableKind::Parameter,
            ty: BaseType::I64,
            location: Location::FrameOffset(-8),
        },
    )
    .unwrap();
    obj.add_variable(
        f_mid,
        Variable {
            name: "scratch".into(),
            kind: VariableKind::Local,
            ty: BaseType::F64,
            location: Location::FrameOffset(-16),
        },
    )
    .unwrap();
    let outer = obj.add_block(f_mid, "body", 8, 24, None).unwrap();
    obj.add_block(f_mid, "call", 12, 24, Some(outer)).unwrap();

    let f_top = obj
        .add_function("jit_top", base + TOP as u64, top.len() as u64)
        .unwrap();
    obj.set_lines(
        f_top,
        "main.js",
        &[
            LineRow {
                offset: 0,
                line: 30,
            },
            LineRow {
                offset: 4,
                line: 31,
            },
            LineRow {
                offset: 11,
                line: 32,
            },
            LineRow {
                offset: 23,
                line: 33,
            },
        ],
    )
    .unwrap();
    obj.set_frame_pointer(f_top, 1, 4).unwrap();
    obj.add_epilogue(f_top, 24, 25).unwrap();

    let registration = jit_interface::register(&obj, Format::Elf).expect("register");
    println!(
        "registered {} functions at {base:#x}, {} bytes of ELF",
        registration.function_count(),
        registration.payload_len()
    );
    if let Some(path) = std::env::args().nth(1) {
        std::fs::write(&path, jit_interface::elf::encode(&obj).expect("encode"))
            .expect("write the payload");
        println!("payload written to {path}");
    }

    // SAFETY: TOP holds a complete function following the C ABI (no arguments, no result),
    // made executable above; it only calls the two other functions and native_fn.
    let top_fn: extern "C" fn() = unsafe { std::mem::transmute(mem as usize + TOP) };
    // Twice, so that a debugger stopped in the first call can break on JIT code for the second.
    top_fn();
    top_fn();
    drop(registration);
    println!("done");
}
