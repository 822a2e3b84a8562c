//! Code generator: syntax tree to machine code for the architecture the binary is built
//! for (x86-64 System V or aarch64 AAPCS64), with the line rows, frame layout and variable
//! locations the debugger needs.
//!
//! One front end walks the syntax tree; a per-architecture [`Emitter`] ([`x64`], [`a64`])
//! turns its few operations into instructions. Both keep the same shape: a standard
//! frame-pointer frame (x86-64 `push rbp; mov rbp, rsp; sub rsp, N`; aarch64 `stp x29, x30,
//! [sp, #-16]!; mov x29, sp; sub sp, sp, #N`), parameters and `let` variables in 8-byte
//! slots below the frame pointer, one shared epilogue per function (`mov rsp, rbp; pop rbp;
//! ret`; `mov sp, x29; ldp x29, x30, [sp], #16; ret`). Expressions evaluate into an
//! accumulator (`rax`, `x0`), temporaries go on the stack. All functions are assembled into
//! one position-independent buffer: calls between script functions are pc-relative to
//! labels, calls to native callbacks go through an absolute address in a register, so the
//! buffer can be copied anywhere.

mod a64;
mod x64;

use std::collections::HashMap;

use dynasmrt::DynamicLabel;
use jit_interface::{Arch, LineRow};

use super::parser::{BinOp, Expr, ExprKind, FnDecl, Program, Stmt, StmtKind};
use super::runtime::Native;
use super::{Pos, ScriptError};

/// Parameters passed in registers (the first six integer argument registers of either ABI).
const MAX_PARAMS: usize = 6;

/// A variable's home in its function's frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub name: String,
    pub is_param: bool,
    /// Offset from the frame pointer (`rbp`, `x29`; negative).
    pub fp_offset: i32,
}

/// One compiled function: where it is in the code buffer and how to describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledFunction {
    pub name: String,
    pub params: usize,
    /// Offset of the first instruction in the code buffer.
    pub offset: usize,
    /// Size in bytes (up to and including the final `ret`).
    pub size: usize,
    /// Line rows, offsets relative to the function start.
    pub lines: Vec<LineRow>,
    /// Offset just after the frame pointer is saved (`push rbp`, `stp x29, x30`).
    pub push_end: u32,
    /// Offset just after the frame pointer is set (`mov rbp, rsp`, `mov x29, sp`).
    pub setup_end: u32,
    /// Offset just after the caller's frame pointer is restored in the epilogue (`pop rbp`,
    /// `ldp x29, x30`).
    pub restore_end: u32,
    /// Offset just after the epilogue's `ret` (= `size`).
    pub ret_end: u32,
    /// Parameters then locals, in declaration order.
    pub slots: Vec<Slot>,
}

/// A compiled script: position-independent code and its functions.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The instruction set of `code`.
    pub arch: Arch,
    pub code: Vec<u8>,
    pub functions: Vec<CompiledFunction>,
}

impl Compiled {
    /// The function named `name`.
    pub fn function(&self, name: &str) -> Option<&CompiledFunction> {
        self.functions.iter().find(|f| f.name == name)
    }
}

/// What the front end asks of an instruction set. The accumulator holds an expression's
/// value; "push"/"pop" move 8-byte temporaries through the machine stack.
trait Emitter {
    const ARCH: Arch;
    /// The most parameters and locals a frame holds (the reach of the slot addressing).
    const MAX_SLOTS: usize;
    fn new() -> Self;
    fn offset(&self) -> usize;
    fn new_label(&mut self) -> DynamicLabel;
    fn bind(&mut self, label: DynamicLabel);
    /// Pads with trapping instructions up to a 16-byte boundary (the next function's start).
    fn align_function(&mut self);
    /// Saves the caller's frame pointer (the first instruction of every function).
    fn save_frame_pointer(&mut self);
    /// Points the frame pointer at the saved one.
    fn set_frame_pointer(&mut self);
    /// Reserves `bytes` (a multiple of 16, nonzero) for the slots below the frame pointer.
    fn reserve(&mut self, bytes: u32);
    /// Stores incoming argument `index` into the slot at `fp_offset`.
    fn store_param(&mut self, index: usize, fp_offset: i32);
    /// Stores the accumulator into the slot at `fp_offset`.
    fn store(&mut self, fp_offset: i32);
    /// Loads the slot at `fp_offset` into the accumulator.
    fn load(&mut self, fp_offset: i32);
    fn load_const(&mut self, n: i64);
    fn zero(&mut self);
    fn negate(&mut self);
    /// Replaces the accumulator by the 64-bit value at the address it holds.
    fn load_indirect(&mut self);
    fn push(&mut self);
    /// Moves the accumulator to the operand register, then pops the left operand into the
    /// accumulator.
    fn pop_lhs(&mut self);
    /// Accumulator = accumulator `op` operand register.
    fn binary(&mut self, op: BinOp);
    fn jump_if_zero(&mut self, label: DynamicLabel);
    fn jump(&mut self, label: DynamicLabel);
    /// Pops into argument register `index`.
    fn pop_arg(&mut self, index: usize);
    /// Calls a script function; `depth` temporaries are on the stack.
    fn call_label(&mut self, label: DynamicLabel, depth: usize);
    /// Calls native code at `addr`; `depth` temporaries are on the stack.
    fn call_native(&mut self, addr: usize, depth: usize);
    /// Undoes the frame up to restoring the caller's frame pointer.
    fn restore_frame(&mut self);
    fn ret(&mut self);
    fn finalize(self) -> Result<Vec<u8>, String>;
}

struct Callee {
    label: DynamicLabel,
    params: usize,
}

/// Compiles a parsed script for the architecture this binary runs on. `file` names the
/// script in error messages.
pub fn compile(file: &str, program: &Program) -> Result<Compiled, ScriptError> {
    compile_for(Arch::HOST, file, program)
}

/// Compiles a parsed script for `arch` (code for another architecture can be inspected,
/// not run: native callbacks are this binary's addresses).
pub fn compile_for(arch: Arch, file: &str, program: &Program) -> Result<Compiled, ScriptError> {
    match arch {
        Arch::X86_64 => generate::<x64::X64>(file, program),
        Arch::Aarch64 => generate::<a64::A64>(file, program),
    }
}

fn generate<E: Emitter>(file: &str, program: &Program) -> Result<Compiled, ScriptError> {
    let mut asm = E::new();
    let mut callees: HashMap<&str, Callee> = HashMap::new();
    let mut first_decl: HashMap<&str, Pos> = HashMap::new();
    for f in &program.functions {
        if Native::by_name(&f.name).is_some() || f.name == "load" {
            return Err(ScriptError::new(
                file,
                f.pos,
                format!(
                    "`{}` is a built-in function and cannot be redefined",
                    f.name
                ),
            ));
        }
        if let Some(prev) = first_decl.insert(&f.name, f.pos) {
            return Err(ScriptError::new(
                file,
                f.pos,
                format!(
                    "function `{}` is already defined at line {}",
                    f.name, prev.line
                ),
            ));
        }
        if f.params.len() > MAX_PARAMS {
            return Err(ScriptError::new(
                file,
                f.params[MAX_PARAMS].1,
                format!(
                    "function `{}` has {} parameters; at most {MAX_PARAMS} are supported",
                    f.name,
                    f.params.len()
                ),
            ));
        }
        let label = asm.new_label();
        callees.insert(
            &f.name,
            Callee {
                label,
                params: f.params.len(),
            },
        );
    }
    match program.functions.iter().find(|f| f.name == "main") {
        None => {
            return Err(ScriptError::new(
                file,
                Pos { line: 1, col: 1 },
                "the script has no `fn main()`: execution starts there".into(),
            ))
        }
        Some(m) if !m.params.is_empty() => {
            return Err(ScriptError::new(
                file,
                m.pos,
                "`main` takes no parameters".into(),
            ))
        }
        Some(_) => {}
    }

    let mut functions = Vec::new();
    for f in &program.functions {
        // Every function starts on a 16-byte boundary; the padding belongs to no one.
        asm.align_function();
        let mut g = FnGen {
            file,
            asm: &mut asm,
            callees: &callees,
            start: 0,
            lines: Vec::new(),
            slots: Vec::new(),
            depth: 0,
            epilogue: callees[f.name.as_str()].label,
        };
        functions.push(g.function(f)?);
    }
    let code = asm.finalize().map_err(|e| {
        ScriptError::new(
            file,
            Pos { line: 1, col: 1 },
            format!("internal assembler error: {e}"),
        )
    })?;
    Ok(Compiled {
        arch: E::ARCH,
        code,
        functions,
    })
}

/// Per-function generator state.
struct FnGen<'a, E> {
    file: &'a str,
    asm: &'a mut E,
    callees: &'a HashMap<&'a str, Callee>,
    start: usize,
    lines: Vec<LineRow>,
    slots: Vec<Slot>,
    /// 8-byte temporaries currently pushed (for call alignment).
    depth: usize,
    /// Label of the shared epilogue (set per function).
    epilogue: DynamicLabel,
}

/// Collects every `let` in a body, in source order (they all get a frame slot).
fn collect_lets<'s>(body: &'s [Stmt], out: &mut Vec<(&'s str, Pos)>) {
    for s in body {
        match &s.kind {
            StmtKind::Let(name, _) => out.push((name, s.pos)),
            StmtKind::If(_, a, b) => {
                collect_lets(a, out);
                collect_lets(b, out);
            }
            StmtKind::While(_, a) => collect_lets(a, out),
            _ => {}
        }
    }
}

impl<E: Emitter> FnGen<'_, E> {
    fn err<T>(&self, pos: Pos, msg: String) -> Result<T, ScriptError> {
        Err(ScriptError::new(self.file, pos, msg))
    }

    fn here(&self) -> u32 {
        (self.asm.offset() - self.start) as u32
    }

    /// Starts a line row for `line` at the current offset (merging with a row at the same
    /// offset, skipping a repeat of the current line).
    fn mark(&mut self, line: u32) {
        let offset = self.here();
        match self.lines.last_mut() {
            Some(last) if last.line == line => {}
            Some(last) if last.offset == offset => last.line = line,
            _ => self.lines.push(LineRow { offset, line }),
        }
    }

    /// Starts a line row at the current offset even if the line repeats the previous row.
    fn force_mark(&mut self, line: u32) {
        let offset = self.here();
        match self.lines.last_mut() {
            Some(last) if last.offset == offset => last.line = line,
            _ => self.lines.push(LineRow { offset, line }),
        }
    }

    fn slot(&self, name: &str, pos: Pos) -> Result<i32, ScriptError> {
        match self.slots.iter().find(|s| s.name == name) {
            Some(s) => Ok(s.fp_offset),
            None => self.err(pos, format!("unknown variable `{name}`")),
        }
    }

    fn function(&mut self, f: &FnDecl) -> Result<CompiledFunction, ScriptError> {
        // The epilogue label doubles as the function label for callers, so make a fresh one.
        let entry = self.callees[f.name.as_str()].label;
        self.epilogue = self.asm.new_label();
        self.start = self.asm.offset();
        self.mark(f.pos.line);
        let mut lets = Vec::new();
        collect_lets(&f.body, &mut lets);
        let count = f.params.len() + lets.len();
        if count > E::MAX_SLOTS {
            return self.err(
                f.pos,
                format!(
                    "function `{}` has {count} parameters and variables; at most {} fit a {} frame",
                    f.name,
                    E::MAX_SLOTS,
                    E::ARCH.name()
                ),
            );
        }
        // Keep the stack pointer 16-byte aligned after the prologue.
        let frame_size = (count * 8).div_ceil(16) * 16;
        self.asm.bind(entry);
        self.asm.save_frame_pointer();
        let push_end = self.here();
        self.asm.set_frame_pointer();
        let setup_end = self.here();
        if frame_size > 0 {
            self.asm.reserve(frame_size as u32);
        }
        for (i, (name, pos)) in f.params.iter().enumerate() {
            if self.slots.iter().any(|s| &s.name == name) {
                return self.err(*pos, format!("parameter `{name}` is declared twice"));
            }
            let off = -8 * (i as i32 + 1);
            self.asm.store_param(i, off);
            self.slots.push(Slot {
                name: name.clone(),
                is_param: true,
                fp_offset: off,
            });
        }
        // Locals are declared (given a slot) when their `let` is compiled, so a use before
        // the `let` is an error; `lets` only sized the frame.
        self.block(&f.body)?;
        // Falling off the end returns 0.
        self.asm.zero();
        self.asm.bind(self.epilogue);
        self.mark(f.end.line);
        self.asm.restore_frame();
        let restore_end = self.here();
        self.asm.ret();
        let ret_end = self.here();
        debug_assert_eq!(self.depth, 0);
        Ok(CompiledFunction {
            name: f.name.clone(),
            params: f.params.len(),
            offset: self.start,
            size: ret_end as usize,
            lines: std::mem::take(&mut self.lines),
            push_end,
            setup_end,
            restore_end,
            ret_end,
            slots: std::mem::take(&mut self.slots),
        })
    }

    fn block(&mut self, body: &[Stmt]) -> Result<(), ScriptError> {
        body.iter().try_for_each(|s| self.statement(s))
    }

    fn statement(&mut self, s: &Stmt) -> Result<(), ScriptError> {
        self.mark(s.pos.line);
        match &s.kind {
            StmtKind::Let(name, e) => {
                if let Some(prev) = self.slots.iter().find(|v| &v.name == name) {
                    let what = if prev.is_param {
                        "a parameter"
                    } else {
                        "a variable"
                    };
                    return self.err(
                        s.pos,
                        format!("`{name}` is already {what} of this function; assign it with `{name} = ...`"),
                    );
                }
                // Evaluate first: `let x = x;` must not see the new `x`.
                self.expr(e)?;
                let off = -8 * (self.slots.len() as i32 + 1);
                self.slots.push(Slot {
                    name: name.clone(),
                    is_param: false,
                    fp_offset: off,
                });
                self.asm.store(off);
            }
            StmtKind::Assign(name, e) => {
                let off = self.slot(name, s.pos)?;
                self.expr(e)?;
                self.asm.store(off);
            }
            StmtKind::If(cond, then, otherwise) => {
                let else_label = self.asm.new_label();
                let end_label = self.asm.new_label();
                self.expr(cond)?;
                self.asm.jump_if_zero(else_label);
                self.block(then)?;
                if !otherwise.is_empty() {
                    self.asm.jump(end_label);
                }
                self.asm.bind(else_label);
                self.block(otherwise)?;
                self.asm.bind(end_label);
            }
            StmtKind::While(cond, body) => {
                let head = self.asm.new_label();
                let end_label = self.asm.new_label();
                self.asm.bind(head);
                // The loop head is reached again from the body's end: give it its own row.
                self.force_mark(s.pos.line);
                self.expr(cond)?;
                self.asm.jump_if_zero(end_label);
                self.block(body)?;
                self.asm.jump(head);
                self.asm.bind(end_label);
            }
            StmtKind::Return(value) => {
                match value {
                    Some(e) => self.expr(e)?,
                    None => self.asm.zero(),
                }
                self.asm.jump(self.epilogue);
            }
            StmtKind::Expr(e) => self.expr(e)?,
        }
        Ok(())
    }

    fn push(&mut self) {
        self.asm.push();
        self.depth += 1;
    }

    fn expr(&mut self, e: &Expr) -> Result<(), ScriptError> {
        match &e.kind {
            ExprKind::Int(n) => self.asm.load_const(*n),
            ExprKind::Var(name) => {
                let off = self.slot(name, e.pos)?;
                self.asm.load(off);
            }
            ExprKind::Neg(inner) => {
                self.expr(inner)?;
                self.asm.negate();
            }
            ExprKind::Binary(op, lhs, rhs) => {
                self.expr(lhs)?;
                self.push();
                self.expr(rhs)?;
                self.asm.pop_lhs();
                self.depth -= 1;
                self.asm.binary(*op);
            }
            ExprKind::Call(name, args) => self.call(e.pos, name, args)?,
        }
        Ok(())
    }

    fn call(&mut self, pos: Pos, name: &str, args: &[Expr]) -> Result<(), ScriptError> {
        // A call on a line of its own (e.g. an argument list spread over lines) gets a row.
        self.mark(pos.line);
        let arity = |want: usize| -> Result<(), ScriptError> {
            if args.len() == want {
                return Ok(());
            }
            let plural = if want == 1 { "" } else { "s" };
            Err(ScriptError::new(
                self.file,
                pos,
                format!(
                    "`{name}` takes {want} argument{plural}, but {} were given",
                    args.len()
                ),
            ))
        };
        if name == "load" {
            // Built in: read the 64-bit value at the address in the argument.
            arity(1)?;
            self.expr(&args[0])?;
            self.asm.load_indirect();
            return Ok(());
        }
        enum Target {
            Jit(DynamicLabel),
            Native(usize),
        }
        let target = if let Some(c) = self.callees.get(name) {
            arity(c.params)?;
            Target::Jit(c.label)
        } else if let Some(n) = Native::by_name(name) {
            arity(n.params)?;
            Target::Native(n.address())
        } else {
            return self.err(pos, format!("unknown function `{name}`"));
        };
        for a in args {
            self.expr(a)?;
            self.push();
        }
        for i in (0..args.len()).rev() {
            self.asm.pop_arg(i);
            self.depth -= 1;
        }
        match target {
            Target::Jit(label) => self.asm.call_label(label, self.depth),
            Target::Native(addr) => self.asm.call_native(addr, self.depth),
        }
        Ok(())
    }
}

impl CompiledFunction {
    /// This function's bytes within the script's code buffer.
    #[cfg(test)]
    pub fn code_bytes<'c>(&self, code: &'c [u8]) -> &'c [u8] {
        &code[self.offset..self.offset + self.size]
    }
}
