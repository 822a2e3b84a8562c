//! # jit-interface
//!
//! Make machine code written by a JIT compiler debuggable: register each batch of generated
//! functions, and GDB (and LLDB, for ELF payloads) shows their names, source lines and
//! correct backtraces, live, after attach and in core files.
//!
//! The library implements GDB's JIT interface in-process (`__jit_debug_descriptor`,
//! `__jit_debug_register_code`) and encodes each registered [`JitObject`] in one of two
//! payload formats:
//!
//! - [`Format::Elf`]: a minimal in-memory ELF object with DWARF (symbols, lines, variables,
//!   CFI), which GDB and LLDB read without any plugin.
//! - [`Format::Compact`]: compact records (see `docs/FORMAT.md`), a fraction of the size,
//!   decoded by the GPL reader plugin `libjitreader.so` (`jit-reader-load` in GDB).
//!
//! ```
//! use jit_interface::{JitObject, LineRow, Format};
//!
//! // Pretend 64 bytes at 0x7000_0000 hold a compiled function (a real JIT passes the address
//! // of its executable buffer).
//! let mut obj = JitObject::new();
//! let f = obj.add_function("jit_fib", 0x7000_0000, 64)?;
//! obj.set_lines(f, "fib.js", &[LineRow { offset: 0, line: 1 }, LineRow { offset: 12, line: 2 }])?;
//! obj.set_frame_pointer(f, 1, 4)?; // push rbp ends at 1, mov rbp, rsp at 4
//! let registration = jit_interface::register(&obj, Format::Elf)?;
//! // ... the code runs; a debugger attached now sees `jit_fib` ...
//! drop(registration); // unregisters: the debugger forgets `jit_fib`
//! # Ok::<(), jit_interface::Error>(())
//! ```
//!
//! C programs use the same API through `include/jit_interface.h` and the crate's static or
//! shared library.
//!
//! Registration is cheap without a debugger (compact records are appended in place to a
//! batch entry) and stays cheap under GDB (small entries are consolidated into few batch
//! entries); [`set_deferred`] announces bursts of registrations to an attached debugger in
//! groups; [`unregister_many`] takes many objects out at once (a code cache flushed), each
//! entry rewritten once. See [`register`].
//!
//! ## Non-goals
//! - Variables, parameters and types through compact records: GDB's reader API has none.
//!   Call sites are left out of compact records too (the reader unwinds without them).
//! - Debugging a stripped executable: GDB finds the interface by symbol name.
//! - Other architectures than x86-64 for unwinding (aarch64 slots in beside it later).

pub mod arch;
pub mod cfi_input;
pub mod error;
pub mod format;
#[cfg(feature = "inspect")]
pub mod inspect;
pub mod model;

#[cfg(feature = "runtime")]
mod capi;
#[cfg(feature = "runtime")]
pub mod descriptor;
#[cfg(feature = "runtime")]
pub mod elf;
#[cfg(feature = "runtime")]
mod pages;
#[cfg(feature = "runtime")]
pub mod perf;
#[cfg(feature = "runtime")]
mod registry;
#[cfg(feature = "inspect")]
pub mod source_cache;

#[cfg(feature = "runtime")]
pub use capi::*;
pub use error::{Error, PayloadFormat, Result};
pub use format::{
    decode, decode_all, encode_bundle, encode_record, header, DecodeError, Decoded, LiveCheck,
    Liveness,
};
pub use model::{
    register_rule_at, Arch, BaseType, Block, CallSite, CallTarget, CfaBase, Epilogue, Frame,
    Function, FunctionId, FunctionIter, Functions, JitObject, LineRow, Location, RegisterRule,
    SavedRegister, UnwindRow, Variable, VariableKind, MAX_SOURCE_BYTES,
};
#[cfg(feature = "runtime")]
pub use registry::{
    flush, merge_stats, pending, register, set_deferred, unregister_many, Deferral, Format,
    MergeStats, Registration,
};
