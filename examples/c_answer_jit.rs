//! `c_answer_jit`: the C example (`examples/c/answer_jit.c`, compiled by build.rs). Its `main`
//! is the C program's own; this file only brings the jit-interface library, whose
//! `#[no_mangle]` functions are the C API the program calls (as `libjit_interface.a` would).

#![no_main]

// Linked for its C API (rustc keeps a dependency's exported symbols in an executable).
use jit_interface as _;
