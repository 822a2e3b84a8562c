//! Deep-stack host for the backtrace benchmark (`scripts/bench.sh`, section 4) and
//! `tests/deep_backtrace.rs`: real x86-64 code, compiled at run time, that recurses DEPTH
//! frames deep, and beside it a native C recursion of the same depth.
//!
//! ```text
//! deep_host compact|elf|elf-no-call-sites|none DEPTH [NATIVE_SO]
//! ```
//! - With NATIVE_SO (`deep_native.c` built as a shared library), a thread named
//!   `native-deep` first runs its `native_deep_0(DEPTH - 1)`, a cycle of four C functions
//!   each calling the next: DEPTH native frames, parked at the bottom in `deep_host_park`.
//! - The main thread compiles the same cycle as JIT code, `jit_deep_0` .. `jit_deep_3`
//!   (standard frame-pointer frames), registers the four functions in one object with names,
//!   line rows (`deep.js`), frame descriptions and call sites (each calls the next function
//!   or `deep_host_stop`; `elf-no-call-sites`: ELF without them; `none`: not registered),
//!   and runs `jit_deep_0(DEPTH - 1)`: DEPTH JIT frames under `deep_host_stop`.
//!
//! GDB breaks on `deep_host_stop`: then one thread shows DEPTH JIT frames and the other
//! DEPTH native frames, so both backtraces can be timed alternately in one GDB. In both
//! cycles the outermost frame is `*_deep_0` and the k-th frame from it `*_deep_{k % 4}`.

#[path = "support/code_buf.rs"]
mod code_buf;
use code_buf::CodeBuf;
use std::ffi::{c_void, CString};
use std::sync::{Condvar, Mutex};

use jit_interface::{CallTarget, Format, JitObject, LineRow};

/// GDB breaks here, at the bottom of the JIT recursion (called with 0; returns 1).
#[no_mangle]
#[inline(never)]
pub extern "C" fn deep_host_stop(n: i64) -> i64 {
    std::hint::black_box(n + 1)
}

/// (parked, released) for the native thread.
static PARK: Mutex<(bool, bool)> = Mutex::new((false, false));
static PARK_CV: Condvar = Condvar::new();

/// The bottom of the native recursion: says it is there and waits for the main thread.
#[no_mangle]
#[inline(never)]
pub extern "C" fn deep_host_park(n: i64) -> i64 {
    let mut st = PARK.lock().expect("park lock");
    st.0 = true;
    PARK_CV.notify_all();
    while !st.1 {
        st = PARK_CV.wait(st).expect("park wait");
    }
    n + 2
}

const CYCLE: usize = 4;
/// Bytes reserved per JIT function (each is 40 bytes long).
const STRIDE: u64 = 64;

/// One compiled function: its bytes and where its epilogues end.
struct Compiled {
    code: Vec<u8>,
    /// (end of `pop rbp`, end of `ret`) per epilogue.
    epilogues: [(u32, u32); 2],
    lines: Vec<LineRow>,
    /// Return offsets of the calls to the next function and to `deep_host_stop`.
    calls: [u32; 2],
}

/// `jit_deep_i(n)`: `n == 0 ? deep_host_stop(0) : next(n - 1)` in a frame-pointer frame.
fn compile(next: u64, stop: u64) -> Compiled {
    let mut c = Vec::new();
    let mut lines = Vec::new();
    let mut line = |c: &Vec<u8>, l: u32| {
        lines.push(LineRow {
            offset: c.len() as u32,
            line: l,
        })
    };
    line(&c, 1);
    c.push(0x55); // push rbp
    c.extend([0x48, 0x89, 0xe5]); // mov rbp, rsp
    line(&c, 2);
    c.extend([0x48, 0x85, 0xff]); // test rdi, rdi
    c.extend([0x74, 0x11]); // je base (+17: over dec, mov, call, pop, ret)
    line(&c, 3);
    c.extend([0x48, 0xff, 0xcf]); // dec rdi
    c.extend([0x48, 0xb8]); // mov rax, next
    c.extend(next.to_le_bytes());
    c.extend([0xff, 0xd0]); // call rax
    let call_next = c.len() as u32;
    line(&c, 4);
    c.push(0x5d); // pop rbp
    let first = (c.len() as u32, c.len() as u32 + 1);
    c.push(0xc3); // ret
    line(&c, 5);
    c.extend([0x48, 0xb8]); // base: mov rax, deep_host_stop (rdi is 0)
    c.extend(stop.to_le_bytes());
    c.extend([0xff, 0xd0]); // call rax
    let call_stop = c.len() as u32;
    c.push(0x5d); // pop rbp
    let second = (c.len() as u32, c.len() as u32 + 1);
    c.push(0xc3); // ret
    assert_eq!(first.1, 0x1a, "the je above jumps to offset 0x1a");
    assert!(c.len() as u64 <= STRIDE);
    Compiled {
        code: c,
        epilogues: [first, second],
        lines,
        calls: [call_next, call_stop],
    }
}

/// Maps memory read-write, copies the functions in, and makes it read-execute.
fn load_code(fns: impl Fn(u64, usize) -> Compiled) -> (u64, Vec<Compiled>) {
    let mut buf = CodeBuf::new(CYCLE * STRIDE as usize);
    let base = buf.base();
    let compiled: Vec<Compiled> = (0..CYCLE).map(|i| fns(base, i)).collect();
    for (i, f) in compiled.iter().enumerate() {
        buf.write(i * STRIDE as usize, &f.code);
    }
    buf.make_executable();
    (base, compiled)
}

fn describe(base: u64, compiled: &[Compiled], stop: u64, call_sites: bool) -> JitObject {
    let mut obj = JitObject::new();
    for (i, c) in compiled.iter().enumerate() {
        let name = format!("jit_deep_{i}");
        let start = base + i as u64 * STRIDE;
        let f = obj
            .add_function(&name, start, c.code.len() as u64)
            .expect("function");
        obj.set_lines(f, "deep.js", &c.lines).expect("lines");
        obj.set_frame_pointer(f, 1, 4).expect("frame");
        for (restore_end, ret_end) in c.epilogues {
            obj.add_epilogue(f, restore_end, ret_end).expect("epilogue");
        }
        if call_sites {
            let next = base + ((i + 1) % CYCLE) as u64 * STRIDE;
            obj.add_call_site(f, c.calls[0], CallTarget::Address(next))
                .expect("call site");
            let host = CallTarget::Symbol {
                address: stop,
                name: "deep_host_stop".into(),
            };
            obj.add_call_site(f, c.calls[1], host).expect("call site");
        }
        println!("jit-fn name={name} start={start:#x} size={}", c.code.len());
    }
    obj
}

type Deep = unsafe extern "C" fn(i64, extern "C" fn(i64) -> i64) -> i64;

/// Loads `native_deep_0` from the shared library at `path`.
fn native_entry(path: &str) -> Deep {
    let cpath = CString::new(path).expect("path without NUL");
    // SAFETY: dlopen/dlsym with NUL-terminated strings; the library stays loaded (never
    // dlclosed) for as long as its function may be called.
    let sym = unsafe {
        let h = libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "cannot dlopen {path}");
        libc::dlsym(h, c"native_deep_0".as_ptr())
    };
    assert!(!sym.is_null(), "{path} has no native_deep_0");
    // SAFETY: `native_deep_0` in deep_native.c has exactly this signature.
    unsafe { std::mem::transmute::<*mut c_void, Deep>(sym) }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: deep_host compact|elf|elf-no-call-sites|none DEPTH [NATIVE_SO]");
        std::process::exit(2);
    }
    let format = match args[1].as_str() {
        "compact" => Some(Format::Compact),
        "elf" | "elf-no-call-sites" => Some(Format::Elf),
        "none" => None,
        f => panic!("format must be compact, elf, elf-no-call-sites or none, not {f}"),
    };
    // The compact encoder leaves call sites out (GDB's reader API has no place for them).
    let call_sites = args[1] != "elf-no-call-sites";
    let depth: i64 = args[2].parse().expect("DEPTH is a number");
    assert!(depth >= 1, "DEPTH must be at least 1");

    // The native stack first, so that it is in place when GDB stops in the JIT one.
    let native = args.get(3).map(|path| {
        let entry = native_entry(path);
        let t = std::thread::Builder::new()
            .name("native-deep".into())
            .stack_size(64 << 20)
            // SAFETY: see `native_entry`; it recurses `depth` frames and calls
            // `deep_host_park` at the bottom.
            .spawn(move || unsafe { entry(depth - 1, deep_host_park) })
            .expect("spawn the native thread");
        let mut st = PARK.lock().expect("park lock");
        while !st.0 {
            st = PARK_CV.wait(st).expect("park wait");
        }
        t
    });

    let stop = deep_host_stop as extern "C" fn(i64) -> i64 as usize as u64;
    let (base, compiled) =
        load_code(|base, i| compile(base + ((i + 1) % CYCLE) as u64 * STRIDE, stop));
    let obj = describe(base, &compiled, stop, call_sites);
    let registration = format.map(|f| jit_interface::register(&obj, f).expect("register"));

    // SAFETY: `base` holds `jit_deep_0`, which takes n in rdi and returns in rax (System V),
    // recursing n + 1 frames deep on the current stack (16 bytes per frame).
    let jit: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(base as *const c_void) };
    let got = jit(depth - 1);
    assert_eq!(got, 1, "the JIT recursion returns deep_host_stop(0)");
    println!("jit depth {depth}: ok");

    if let Some(t) = native {
        PARK.lock().expect("park lock").1 = true;
        PARK_CV.notify_all();
        let got = t.join().expect("the native thread");
        assert_eq!(
            got,
            2 + depth,
            "the native recursion returns park(0) + depth"
        );
        println!("native depth {depth}: ok");
    }
    drop(registration);
}
