//! Code generator: syntax tree to x86-64 machine code (System V calling convention), with
//! the line rows, frame layout and variable locations the debugger needs.
//!
//! Every function keeps a standard frame-pointer frame: `push rbp; mov rbp, rsp; sub rsp, N`,
//! parameters and `let` variables in 8-byte slots below `rbp`, one shared epilogue
//! `mov rsp, rbp; pop rbp; ret`. Expressions evaluate into `rax`, temporaries go on the
//! stack. All functions are assembled into one position-independent buffer: calls between
//! script functions are `call rel32` to labels, calls to native callbacks go through an
//! absolute address in `rax`, so the buffer can be copied anywhere.

use std::collections::HashMap;

use dynasmrt::{dynasm, DynamicLabel, DynasmApi, DynasmLabelApi};
use jit_interface::LineRow;

use super::parser::{BinOp, Expr, ExprKind, FnDecl, Program, Stmt, StmtKind};
use super::runtime::Native;
use super::{Pos, ScriptError};

/// Integer argument registers of the System V ABI, in order.
const MAX_PARAMS: usize = 6;

/// A variable's home in its function's frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub name: String,
    pub is_param: bool,
    /// Offset from `rbp` (negative).
    pub rbp_offset: i32,
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
    /// Offset just after `push rbp`.
    pub push_end: u32,
    /// Offset just after `mov rbp, rsp`.
    pub setup_end: u32,
    /// Offset just after `pop rbp` in the epilogue.
    pub restore_end: u32,
    /// Offset just after the epilogue's `ret` (= `size`).
    pub ret_end: u32,
    /// Parameters then locals, in declaration order.
    pub slots: Vec<Slot>,
}

/// A compiled script: position-independent code and its functions.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub code: Vec<u8>,
    pub functions: Vec<CompiledFunction>,
}

impl Compiled {
    /// The function named `name`.
    pub fn function(&self, name: &str) -> Option<&CompiledFunction> {
        self.functions.iter().find(|f| f.name == name)
    }
}

type Asm = dynasmrt::VecAssembler<dynasmrt::x64::X64Relocation>;

struct Callee {
    label: DynamicLabel,
    params: usize,
}

/// Compiles a parsed script. `file` names the script in error messages.
pub fn compile(file: &str, program: &Program) -> Result<Compiled, ScriptError> {
    let mut asm = Asm::new(0);
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
        let label = asm.new_dynamic_label();
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
        // Start every function on a 16-byte boundary; the padding (int3) belongs to no one.
        while asm.offset().0 % 16 != 0 {
            dynasm!(asm ; .arch x64 ; int3);
        }
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
    Ok(Compiled { code, functions })
}

/// Per-function generator state.
struct FnGen<'a> {
    file: &'a str,
    asm: &'a mut Asm,
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

impl FnGen<'_> {
    fn err<T>(&self, pos: Pos, msg: String) -> Result<T, ScriptError> {
        Err(ScriptError::new(self.file, pos, msg))
    }

    fn here(&self) -> u32 {
        (self.asm.offset().0 - self.start) as u32
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
            Some(s) => Ok(s.rbp_offset),
            None => self.err(pos, format!("unknown variable `{name}`")),
        }
    }

    fn function(&mut self, f: &FnDecl) -> Result<CompiledFunction, ScriptError> {
        // The epilogue label doubles as the function label for callers, so make a fresh one.
        let entry = self.callees[f.name.as_str()].label;
        self.epilogue = self.asm.new_dynamic_label();
        self.start = self.asm.offset().0;
        self.mark(f.pos.line);
        let mut lets = Vec::new();
        collect_lets(&f.body, &mut lets);
        let count = f.params.len() + lets.len();
        // Keep rsp 16-byte aligned after the prologue.
        let frame_size = ((count * 8).div_ceil(16) * 16) as i32;
        dynasm!(self.asm ; .arch x64 ; =>entry ; push rbp);
        let push_end = self.here();
        dynasm!(self.asm ; .arch x64 ; mov rbp, rsp);
        let setup_end = self.here();
        if frame_size > 0 {
            dynasm!(self.asm ; .arch x64 ; sub rsp, frame_size);
        }
        for (i, (name, pos)) in f.params.iter().enumerate() {
            if self.slots.iter().any(|s| &s.name == name) {
                return self.err(*pos, format!("parameter `{name}` is declared twice"));
            }
            let off = -8 * (i as i32 + 1);
            match i {
                0 => dynasm!(self.asm ; .arch x64 ; mov [rbp + off], rdi),
                1 => dynasm!(self.asm ; .arch x64 ; mov [rbp + off], rsi),
                2 => dynasm!(self.asm ; .arch x64 ; mov [rbp + off], rdx),
                3 => dynasm!(self.asm ; .arch x64 ; mov [rbp + off], rcx),
                4 => dynasm!(self.asm ; .arch x64 ; mov [rbp + off], r8),
                _ => dynasm!(self.asm ; .arch x64 ; mov [rbp + off], r9),
            }
            self.slots.push(Slot {
                name: name.clone(),
                is_param: true,
                rbp_offset: off,
            });
        }
        // Locals are declared (given a slot) when their `let` is compiled, so a use before
        // the `let` is an error; `lets` only sized the frame.
        self.block(&f.body)?;
        // Falling off the end returns 0.
        dynasm!(self.asm ; .arch x64 ; xor eax, eax ; =>self.epilogue);
        self.mark(f.end.line);
        dynasm!(self.asm ; .arch x64 ; mov rsp, rbp ; pop rbp);
        let restore_end = self.here();
        dynasm!(self.asm ; .arch x64 ; ret);
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
                    rbp_offset: off,
                });
                dynasm!(self.asm ; .arch x64 ; mov [rbp + off], rax);
            }
            StmtKind::Assign(name, e) => {
                let off = self.slot(name, s.pos)?;
                self.expr(e)?;
                dynasm!(self.asm ; .arch x64 ; mov [rbp + off], rax);
            }
            StmtKind::If(cond, then, otherwise) => {
                let else_label = self.asm.new_dynamic_label();
                let end_label = self.asm.new_dynamic_label();
                self.expr(cond)?;
                dynasm!(self.asm ; .arch x64 ; test rax, rax ; jz =>else_label);
                self.block(then)?;
                if !otherwise.is_empty() {
                    dynasm!(self.asm ; .arch x64 ; jmp =>end_label);
                }
                dynasm!(self.asm ; .arch x64 ; =>else_label);
                self.block(otherwise)?;
                dynasm!(self.asm ; .arch x64 ; =>end_label);
            }
            StmtKind::While(cond, body) => {
                let head = self.asm.new_dynamic_label();
                let end_label = self.asm.new_dynamic_label();
                dynasm!(self.asm ; .arch x64 ; =>head);
                // The loop head is reached again from the body's end: give it its own row.
                self.force_mark(s.pos.line);
                self.expr(cond)?;
                dynasm!(self.asm ; .arch x64 ; test rax, rax ; jz =>end_label);
                self.block(body)?;
                dynasm!(self.asm ; .arch x64 ; jmp =>head ; =>end_label);
            }
            StmtKind::Return(value) => {
                match value {
                    Some(e) => self.expr(e)?,
                    None => dynasm!(self.asm ; .arch x64 ; xor eax, eax),
                }
                let epilogue = self.epilogue;
                dynasm!(self.asm ; .arch x64 ; jmp =>epilogue);
            }
            StmtKind::Expr(e) => self.expr(e)?,
        }
        Ok(())
    }

    fn push_rax(&mut self) {
        dynasm!(self.asm ; .arch x64 ; push rax);
        self.depth += 1;
    }

    // dynasm's expansion of `Rq(reg)` converts the u8 to itself.
    #[allow(clippy::useless_conversion)]
    fn pop(&mut self, reg: u8) {
        // Register numbers as in the instruction encoding: rax 0, rcx 1, rdx 2, rsi 6,
        // rdi 7, r8 8, r9 9.
        dynasm!(self.asm ; .arch x64 ; pop Rq(reg));
        self.depth -= 1;
    }

    fn expr(&mut self, e: &Expr) -> Result<(), ScriptError> {
        match &e.kind {
            ExprKind::Int(n) => {
                let n = *n;
                if let Ok(small) = i32::try_from(n) {
                    dynasm!(self.asm ; .arch x64 ; mov rax, small);
                } else {
                    dynasm!(self.asm ; .arch x64 ; mov rax, QWORD n);
                }
            }
            ExprKind::Var(name) => {
                let off = self.slot(name, e.pos)?;
                dynasm!(self.asm ; .arch x64 ; mov rax, [rbp + off]);
            }
            ExprKind::Neg(inner) => {
                self.expr(inner)?;
                dynasm!(self.asm ; .arch x64 ; neg rax);
            }
            ExprKind::Binary(op, lhs, rhs) => {
                self.expr(lhs)?;
                self.push_rax();
                self.expr(rhs)?;
                dynasm!(self.asm ; .arch x64 ; mov rcx, rax);
                self.pop(0);
                self.binary(*op);
            }
            ExprKind::Call(name, args) => self.call(e.pos, name, args)?,
        }
        Ok(())
    }

    fn binary(&mut self, op: BinOp) {
        // lhs in rax, rhs in rcx. Division by zero faults (SIGFPE) like native code would.
        match op {
            BinOp::Add => dynasm!(self.asm ; .arch x64 ; add rax, rcx),
            BinOp::Sub => dynasm!(self.asm ; .arch x64 ; sub rax, rcx),
            BinOp::Mul => dynasm!(self.asm ; .arch x64 ; imul rax, rcx),
            BinOp::Div => dynasm!(self.asm ; .arch x64 ; cqo ; idiv rcx),
            BinOp::Rem => dynasm!(self.asm ; .arch x64 ; cqo ; idiv rcx ; mov rax, rdx),
            BinOp::Lt => dynasm!(self.asm ; .arch x64 ; cmp rax, rcx ; setl al ; movzx eax, al),
            BinOp::Le => dynasm!(self.asm ; .arch x64 ; cmp rax, rcx ; setle al ; movzx eax, al),
            BinOp::Gt => dynasm!(self.asm ; .arch x64 ; cmp rax, rcx ; setg al ; movzx eax, al),
            BinOp::Ge => dynasm!(self.asm ; .arch x64 ; cmp rax, rcx ; setge al ; movzx eax, al),
            BinOp::Eq => dynasm!(self.asm ; .arch x64 ; cmp rax, rcx ; sete al ; movzx eax, al),
            BinOp::Ne => dynasm!(self.asm ; .arch x64 ; cmp rax, rcx ; setne al ; movzx eax, al),
        }
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
            dynasm!(self.asm ; .arch x64 ; mov rax, [rax]);
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
            self.push_rax();
        }
        const ARG_REGS: [u8; MAX_PARAMS] = [7, 6, 2, 1, 8, 9];
        for i in (0..args.len()).rev() {
            self.pop(ARG_REGS[i]);
        }
        // The ABI wants rsp 16-byte aligned at the call; the prologue aligned it, pending
        // temporaries may not have.
        let pad = self.depth % 2 == 1;
        if pad {
            dynasm!(self.asm ; .arch x64 ; sub rsp, 8);
        }
        match target {
            Target::Jit(label) => dynasm!(self.asm ; .arch x64 ; call =>label),
            Target::Native(addr) => {
                let addr = addr as i64;
                dynasm!(self.asm ; .arch x64 ; mov rax, QWORD addr ; call rax);
            }
        }
        if pad {
            dynasm!(self.asm ; .arch x64 ; add rsp, 8);
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
