//! The demo JIT: a tiny integer language compiled at run time to machine code for the
//! architecture the binary is built for (x86-64 or aarch64: [`codegen`]) and registered with
//! the debugger, so GDB shows the script's functions and lines. On an x86-64 machine,
//! `jit-gdb demo --arch aarch64` runs an aarch64 build of this demo under qemu-user.
//!
//! ```text
//! # Comments start with `#`.
//! fn fib(n) {
//!     if n < 2 { return n; }
//!     return fib(n - 1) + fib(n - 2);
//! }
//! fn main() { print(fib(10)); return 0; }
//! ```
//!
//! Values are signed 64-bit integers; comparisons give 0 or 1, and `if`/`while` take any
//! nonzero value as true. Division by zero faults (SIGFPE) on x86-64 and gives 0 on aarch64,
//! as native code does on each. Built-ins: `print(n)` (native, prints `n`, returns it),
//! `probe(n)` (native, returns the address of a cell holding `n`; a null pointer under
//! `--crash`) and `load(p)` (reads the 64-bit value at address `p`, inline).
//! Execution starts at `fn main()`, whose value becomes the exit status.

pub mod codegen;
pub mod lexer;
pub mod parser;
pub mod runtime;

use std::fmt;

/// A position in a script: line and column, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

/// A problem in a script, shown as `file:line:col: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    pub file: String,
    pub pos: Pos,
    pub message: String,
}

impl ScriptError {
    pub fn new(file: &str, pos: Pos, message: String) -> ScriptError {
        ScriptError {
            file: file.into(),
            pos,
            message,
        }
    }
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.pos.line, self.pos.col, self.message
        )
    }
}

impl std::error::Error for ScriptError {}

/// Lexes, parses and compiles a script.
pub fn compile_source(file: &str, src: &str) -> Result<codegen::Compiled, ScriptError> {
    let tokens = lexer::lex(file, src)?;
    let program = parser::parse(file, &tokens)?;
    codegen::compile(file, &program)
}

/// Scripts bundled into the binary: (file name, text).
pub const BUNDLED: &[(&str, &str)] = &[("fib.jg", include_str!("../../demo/fib.jg"))];

#[cfg(test)]
mod tests;

/// Compiles, loads and registers the script at `path` in `format` without running it: the
/// demo's check that the script and the payload encoder work before starting GDB.
pub fn check_script(path: &std::path::Path, format: jit_interface::Format) -> Result<(), String> {
    prepare(path, Some(format), "").map(drop)
}

/// `jit-gdb run-script`: compiles `path`, registers its functions in `format` (`None`: not
/// at all), runs `main` and returns its value (the exit status).
pub fn run_script(
    path: &std::path::Path,
    format: Option<jit_interface::Format>,
    crash: bool,
) -> Result<i64, String> {
    let hint = " (run with `--format none` to run without registering)";
    let loaded = prepare(path, format, hint)?;
    runtime::set_crash_mode(crash);
    loaded.call("main", &[])
}

fn prepare(
    path: &std::path::Path,
    format: Option<jit_interface::Format>,
    register_hint: &str,
) -> Result<runtime::LoadedScript, String> {
    let src = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read script {}: {e}", path.display()))?;
    // Lines are registered under the absolute path, so GDB's `list` finds the file from any
    // working directory.
    let abs = std::fs::canonicalize(path)
        .map_err(|e| format!("cannot resolve script path {}: {e}", path.display()))?;
    let shown = path.display().to_string();
    let compiled = compile_source(&shown, &src).map_err(|e| e.to_string())?;
    let mut loaded = runtime::LoadedScript::load(compiled)
        .map_err(|e| format!("cannot map executable memory for the compiled code: {e}"))?;
    if let Some(format) = format {
        let name = abs.to_str().ok_or_else(|| {
            format!(
                "script path {} is not UTF-8; the debugger needs a UTF-8 file name",
                abs.display()
            )
        })?;
        loaded.register(name, format).map_err(|e| {
            format!(
                "cannot register the script's functions with the debugger ({}): {e}{register_hint}",
                format.name()
            )
        })?;
    }
    Ok(loaded)
}
