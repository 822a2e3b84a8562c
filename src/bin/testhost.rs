//! JIT test host (placeholder).
fn main() {}
