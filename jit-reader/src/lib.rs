//! GDB JIT reader for jit-gdb compact records (placeholder until issue 3).
