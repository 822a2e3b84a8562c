//! Compiles the C example, `examples/c/answer_jit.c` (the README's "Use from C" program), with
//! the cc crate for the `c_answer_jit` example: its warnings are errors at build time, so the
//! C program users copy never goes stale against `jit_interface.h`. Only the example links
//! the object; the `jit-gdb` binary does not.

fn main() {
    println!("cargo:rerun-if-changed=examples/c/answer_jit.c");
    println!("cargo:rerun-if-changed=jit-interface/include/jit_interface.h");
    // cc reads these; it only says so itself when it also emits link lines (off below).
    for var in ["CC", "CFLAGS", "TARGET_CC", "TARGET_CFLAGS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let objects = cc::Build::new()
        .file("examples/c/answer_jit.c")
        .include("jit-interface/include")
        .std("gnu11")
        .debug(true)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        // No `rustc-link-lib`: cargo would pass it to the jit-gdb binary too.
        .cargo_metadata(false)
        .compile_intermediates();
    for o in objects {
        println!("cargo:rustc-link-arg-examples={}", o.display());
    }
}
