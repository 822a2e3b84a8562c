//! `jit-gdb`: the launcher (placeholder until the launcher issue).
fn main() {
    eprintln!("jit-gdb: not implemented yet");
    std::process::exit(2);
}
