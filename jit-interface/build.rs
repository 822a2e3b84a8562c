// Builds the GDB JIT interface symbols from C: Rust has no stable weak linkage, and the
// symbols must be weak so that another runtime in the process (LLVM defines them strongly)
// wins the link and both runtimes share one descriptor.
fn main() {
    println!("cargo:rerun-if-changed=csrc/jit_descriptor.c");
    if std::env::var_os("CARGO_FEATURE_RUNTIME").is_none() {
        return;
    }
    cc::Build::new()
        .file("csrc/jit_descriptor.c")
        .opt_level(2)
        .warnings(true)
        .compile("jit_interface_descriptor");
}
