//! Runtime of the demo JIT: executable memory, native callbacks, registration with the
//! debugger and calling compiled code.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use jit_interface::{Arch, VariableKind};
use jit_interface::{BaseType, Format, JitObject, LineRow, Location, Registration, Variable};

use super::codegen::Compiled;
use crate::exec_mem::CodeBuffer;

/// Set by `run-script --crash`: `probe` then returns a null pointer, and the script's
/// `load(probe(n))` faults inside JIT code.
static CRASH: AtomicBool = AtomicBool::new(false);

/// The cell `probe` hands out a pointer to.
static PROBE_CELL: AtomicI64 = AtomicI64::new(0);

/// Makes `probe` return a null pointer from now on.
pub fn set_crash_mode(on: bool) {
    CRASH.store(on, Ordering::Relaxed);
}

/// Native callback `print(n)`: prints `n` on its own line and returns it.
#[no_mangle]
#[inline(never)]
pub extern "C" fn jit_gdb_print(n: i64) -> i64 {
    println!("{n}");
    n
}

/// Native callback `probe(n)`: returns the address of a cell holding `n` (the script reads
/// it back with `load`), or a null pointer in crash mode. A breakpoint here stops with JIT
/// frames on the stack.
#[no_mangle]
#[inline(never)]
pub extern "C" fn jit_gdb_probe(n: i64) -> *const i64 {
    // The work is in a separate, never-inlined function so that an optimised build shows no
    // inlined frames (the atomics) above this one: frame 1 is always the JIT caller.
    probe_cell(n)
}

#[inline(never)]
fn probe_cell(n: i64) -> *const i64 {
    if CRASH.load(Ordering::Relaxed) {
        return std::ptr::null();
    }
    PROBE_CELL.store(n, Ordering::Relaxed);
    PROBE_CELL.as_ptr()
}

/// A native function a script may call.
#[derive(Debug)]
pub struct Native {
    pub name: &'static str,
    pub params: usize,
}

static NATIVES: [Native; 2] = [
    Native {
        name: "print",
        params: 1,
    },
    Native {
        name: "probe",
        params: 1,
    },
];

impl Native {
    /// The native callback a script calls as `name`.
    pub fn by_name(name: &str) -> Option<&'static Native> {
        NATIVES.iter().find(|n| n.name == name)
    }

    /// Address of its code.
    pub fn address(&self) -> usize {
        match self.name {
            "print" => jit_gdb_print as extern "C" fn(i64) -> i64 as usize,
            _ => jit_gdb_probe as extern "C" fn(i64) -> *const i64 as usize,
        }
    }
}

/// A compiled script in executable memory, optionally registered with the debugger.
pub struct LoadedScript {
    // Field order matters: the registration is dropped (unregistered) before the code it
    // describes is unmapped.
    registration: Option<Registration>,
    memory: CodeBuffer,
    compiled: Compiled,
}

impl LoadedScript {
    /// Copies the compiled code into executable memory (code for this machine only).
    pub fn load(compiled: Compiled) -> io::Result<LoadedScript> {
        if compiled.arch != Arch::HOST {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the code was compiled for {}, this machine runs {}",
                    compiled.arch.name(),
                    Arch::HOST.name()
                ),
            ));
        }
        let memory = CodeBuffer::with_code(&compiled.code)?;
        // SAFETY: `memory` maps `code.len()` readable bytes at `addr()` (sealed read-execute),
        // alive for this borrow.
        let code =
            unsafe { std::slice::from_raw_parts(memory.addr() as *const u8, compiled.code.len()) };
        // aarch64 fetches instructions through a cache of its own that the copy above did not
        // go through (a no-op on x86-64).
        dynasmrt::cache_control::synchronize_icache(code);
        dynasmrt::cache_control::prepare_for_execution(code);
        Ok(LoadedScript {
            registration: None,
            memory,
            compiled,
        })
    }

    /// The debugger's view of the loaded functions (see [`Compiled::jit_object`]).
    pub fn jit_object(&self, file: &str, with_variables: bool) -> jit_interface::Result<JitObject> {
        self.compiled
            .jit_object(self.memory.addr(), file, with_variables)
    }

    /// Registers the functions with the debugger in `format` (unregistered on drop).
    pub fn register(&mut self, file: &str, format: Format) -> jit_interface::Result<()> {
        let obj = self.jit_object(file, format == Format::Elf)?;
        self.registration = Some(jit_interface::register(&obj, format)?);
        Ok(())
    }

    /// Calls script function `name` with `args`.
    pub fn call(&self, name: &str, args: &[i64]) -> Result<i64, String> {
        let f = self
            .compiled
            .function(name)
            .ok_or_else(|| format!("the script has no function `{name}`"))?;
        if f.params != args.len() {
            return Err(format!(
                "`{name}` takes {} arguments, {} given",
                f.params,
                args.len()
            ));
        }
        let mut a = [0i64; 6];
        a[..args.len()].copy_from_slice(args);
        let addr = self.memory.addr() as usize + f.offset;
        type Entry = extern "C" fn(i64, i64, i64, i64, i64, i64) -> i64;
        // SAFETY: `addr` is the entry of a function the code generator emitted with the C ABI
        // of this machine (System V x86-64 or AAPCS64; `load` refused other code), in
        // executable memory owned by `self`. It reads only its own parameters' registers, so
        // passing the unused argument registers as 0 is harmless.
        let entry: Entry = unsafe { std::mem::transmute::<usize, Entry>(addr) };
        Ok(entry(a[0], a[1], a[2], a[3], a[4], a[5]))
    }
}

impl Compiled {
    /// The debugger's view of the functions loaded at `base`: names, addresses, the script's lines
    /// (`file` should be an absolute path so GDB's `list` finds it), frame layout, and the
    /// parameters and locals in their frame slots (`with_variables`: only ELF payloads can
    /// carry them; GDB's reader API has no variables).
    pub fn jit_object(
        &self,
        base: u64,
        file: &str,
        with_variables: bool,
    ) -> jit_interface::Result<JitObject> {
        let mut obj = JitObject::with_arch(self.arch);
        for f in &self.functions {
            let start = base + f.offset as u64;
            let id = obj.add_function(&f.name, start, f.size as u64)?;
            let rows: Vec<LineRow> = f.lines.clone();
            obj.set_lines(id, file, &rows)?;
            obj.set_frame_pointer(id, f.push_end, f.setup_end)?;
            obj.add_epilogue(id, f.restore_end, f.ret_end)?;
            for s in f.slots.iter().filter(|_| with_variables) {
                obj.add_variable(
                    id,
                    Variable {
                        name: s.name.clone(),
                        kind: if s.is_param {
                            VariableKind::Parameter
                        } else {
                            VariableKind::Local
                        },
                        ty: BaseType::I64,
                        location: Location::FrameOffset(s.fp_offset),
                    },
                )?;
            }
        }
        Ok(obj)
    }
}
