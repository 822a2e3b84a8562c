//! `jit-gdb-c-testhost`: the C test host (`c/host.c`, compiled by build.rs). Its `main` is the C
//! program's own, so there is no Rust `main` here: this crate only brings the jit-interface
//! library, whose `#[no_mangle]` functions are the C API the program calls.

#![no_main]

// Linked for its C API (rustc keeps a dependency's exported symbols in an executable).
use jit_interface as _;
