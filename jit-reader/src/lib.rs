//! # jit-reader: GDB JIT reader plugin for jit-gdb compact records
//!
//! Built as `libjitreader.so` and loaded in GDB with `jit-reader-load /abs/path/libjitreader.so`.
//! For every JIT code entry of the debugged process GDB hands the payload to `read`:
//! compact records (see `docs/FORMAT.md`) become symbol tables (one per source file), a block
//! per function, nested blocks and line tables; any other payload (e.g. an ELF entry) is
//! declined silently and GDB reads it itself. The reader also keeps an index of every
//! registered function so that its unwinder can walk JIT frames.
//!
//! Layout:
//! - [`bindings`]: bindgen's rendering of GDB's `jit-reader.h` (committed; regenerate with
//!   `scripts/regen-bindings.sh`).
//! - `gdb`: the FFI edge: exported symbols, callbacks, register and memory access.
//! - [`records`]: a payload's functions as read from its bytes (names borrowed, rows in
//!   shared vectors), checked like the data model checks them.
//! - [`symbols`]: turns those records into the symbol tables GDB is given.
//! - [`index`]: the sorted index of registered code ranges, with liveness checks.
//! - [`unwind`]: frame unwinding, generic part plus one module per architecture.
//! - `report`: what the reader prints (refusals, and details with `JIT_READER_DEBUG=1`).
//!
//! GDB never tells a reader that an entry was unregistered, so the index trusts an entry
//! only after confirming, through target memory, that the entry's live slot still holds the
//! key its payload names (see [`jit_interface::format::LiveCheck`]). The same check runs
//! when a payload is read: an object whose slot holds something else (an unregistered
//! object a registry left in place inside a batch) is neither shown to GDB nor indexed; a
//! slot that cannot be read (absent from a core file) counts as live, as the format says.
//!
//! What it prints (stderr, prefixed `jit-reader:`): the first three damaged payloads it
//! refuses, with the decoder's reason (then only a count), and, once per distinct message,
//! why a backtrace ends at a JIT frame whose caller cannot be found sanely. The environment
//! variable `JIT_READER_DEBUG=1` (read at `jit-reader-load`) adds every refusal with the
//! payload's first bytes, every entry read, every unregistered object skipped and every
//! frame unwound.
//!
//! Limits (GDB 13's reader API): functions are `void()` without parameters or locals, and
//! GDB does not find them by name (`break NAME`, `frame function NAME`); everything that
//! goes by address works. Unwinding: x86-64 and aarch64, each payload by its own architecture
//! (an x86-64 reader in gdb-multiarch unwinds an aarch64 target).

#[rustfmt::skip]
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_debug_implementations,
    clippy::all
)]
pub mod bindings;

mod export;
mod gdb;
pub mod index;
mod memory;
pub mod records;
mod report;
pub mod sources;
pub mod symbols;
pub mod unwind;

pub use gdb::{gdb_init_reader, plugin_is_GPL_compatible};
