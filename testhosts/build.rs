//! Compiles the C test host (`c/host.c`) with the cc crate, for the `jit-gdb-c-testhost`
//! binary: once per change of the file, with the CC and CFLAGS cargo users expect, and with
//! its warnings as errors at build time rather than in the middle of a test run.
//!
//! The C program calls the C API of `jit_interface.h`; the binary links its object with the
//! jit-interface crate, which defines that API, as `libjit_interface.a` would (a build
//! script cannot use the crate's static library itself: it runs before the crate is built).
//! `tests/c_host.rs` still links the same file against `libjit_interface.a` and `.so` with
//! the link lines the README gives C users.

fn main() {
    println!("cargo:rerun-if-changed=c/host.c");
    println!("cargo:rerun-if-changed=../jit-interface/include/jit_interface.h");
    // cc reads these; it only says so itself when it also emits link lines (off below).
    for var in ["CC", "CFLAGS", "TARGET_CC", "TARGET_CFLAGS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let objects = cc::Build::new()
        .file("c/host.c")
        .include("../jit-interface/include")
        .std("gnu11")
        // The flags the scenario's checks were written for: an optimised C program with
        // debug info, no forced frame pointers (GDB unwinds its frames by CFI).
        .opt_level(2)
        .debug(true)
        .force_frame_pointer(false)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        // No `rustc-link-lib`: this package has no library target, so cargo would pass it
        // to every binary, the Rust hosts included. Only the C host links the object.
        .cargo_metadata(false)
        .compile_intermediates();
    for o in objects {
        println!(
            "cargo:rustc-link-arg-bin=jit-gdb-c-testhost={}",
            o.display()
        );
    }
}
