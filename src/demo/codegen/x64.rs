//! The x86-64 emitter (System V ABI): accumulator `rax`, right operand `rcx`, frame pointer
//! `rbp`, arguments in `rdi, rsi, rdx, rcx, r8, r9`.

use dynasmrt::{dynasm, DynamicLabel, DynasmApi, DynasmLabelApi};
use jit_interface::Arch;

use super::{BinOp, Emitter};

type Asm = dynasmrt::VecAssembler<dynasmrt::x64::X64Relocation>;

/// Argument registers in instruction-encoding numbers: rdi 7, rsi 6, rdx 2, rcx 1, r8 8,
/// r9 9.
const ARG_REGS: [u8; super::MAX_PARAMS] = [7, 6, 2, 1, 8, 9];

pub struct X64(Asm);

impl Emitter for X64 {
    const ARCH: Arch = Arch::X86_64;
    // rbp-relative slots reach any i32 offset.
    const MAX_SLOTS: usize = usize::MAX;

    fn new() -> Self {
        X64(Asm::new(0))
    }

    fn offset(&self) -> usize {
        self.0.offset().0
    }

    fn new_label(&mut self) -> DynamicLabel {
        self.0.new_dynamic_label()
    }

    fn bind(&mut self, label: DynamicLabel) {
        dynasm!(self.0 ; .arch x64 ; =>label);
    }

    fn align_function(&mut self) {
        while self.offset() % 16 != 0 {
            dynasm!(self.0 ; .arch x64 ; int3);
        }
    }

    fn save_frame_pointer(&mut self) {
        dynasm!(self.0 ; .arch x64 ; push rbp);
    }

    fn set_frame_pointer(&mut self) {
        dynasm!(self.0 ; .arch x64 ; mov rbp, rsp);
    }

    fn reserve(&mut self, bytes: u32) {
        let bytes = bytes as i32;
        dynasm!(self.0 ; .arch x64 ; sub rsp, bytes);
    }

    fn store_param(&mut self, index: usize, off: i32) {
        match index {
            0 => dynasm!(self.0 ; .arch x64 ; mov [rbp + off], rdi),
            1 => dynasm!(self.0 ; .arch x64 ; mov [rbp + off], rsi),
            2 => dynasm!(self.0 ; .arch x64 ; mov [rbp + off], rdx),
            3 => dynasm!(self.0 ; .arch x64 ; mov [rbp + off], rcx),
            4 => dynasm!(self.0 ; .arch x64 ; mov [rbp + off], r8),
            _ => dynasm!(self.0 ; .arch x64 ; mov [rbp + off], r9),
        }
    }

    fn store(&mut self, off: i32) {
        dynasm!(self.0 ; .arch x64 ; mov [rbp + off], rax);
    }

    fn load(&mut self, off: i32) {
        dynasm!(self.0 ; .arch x64 ; mov rax, [rbp + off]);
    }

    fn load_const(&mut self, n: i64) {
        if let Ok(small) = i32::try_from(n) {
            dynasm!(self.0 ; .arch x64 ; mov rax, small);
        } else {
            dynasm!(self.0 ; .arch x64 ; mov rax, QWORD n);
        }
    }

    fn zero(&mut self) {
        dynasm!(self.0 ; .arch x64 ; xor eax, eax);
    }

    fn negate(&mut self) {
        dynasm!(self.0 ; .arch x64 ; neg rax);
    }

    fn load_indirect(&mut self) {
        dynasm!(self.0 ; .arch x64 ; mov rax, [rax]);
    }

    fn push(&mut self) {
        dynasm!(self.0 ; .arch x64 ; push rax);
    }

    fn pop_lhs(&mut self) {
        dynasm!(self.0 ; .arch x64 ; mov rcx, rax);
        self.pop(0);
    }

    fn binary(&mut self, op: BinOp) {
        // Division by zero faults (SIGFPE) like native code would.
        match op {
            BinOp::Add => dynasm!(self.0 ; .arch x64 ; add rax, rcx),
            BinOp::Sub => dynasm!(self.0 ; .arch x64 ; sub rax, rcx),
            BinOp::Mul => dynasm!(self.0 ; .arch x64 ; imul rax, rcx),
            BinOp::Div => dynasm!(self.0 ; .arch x64 ; cqo ; idiv rcx),
            BinOp::Rem => dynasm!(self.0 ; .arch x64 ; cqo ; idiv rcx ; mov rax, rdx),
            BinOp::Lt => dynasm!(self.0 ; .arch x64 ; cmp rax, rcx ; setl al ; movzx eax, al),
            BinOp::Le => dynasm!(self.0 ; .arch x64 ; cmp rax, rcx ; setle al ; movzx eax, al),
            BinOp::Gt => dynasm!(self.0 ; .arch x64 ; cmp rax, rcx ; setg al ; movzx eax, al),
            BinOp::Ge => dynasm!(self.0 ; .arch x64 ; cmp rax, rcx ; setge al ; movzx eax, al),
            BinOp::Eq => dynasm!(self.0 ; .arch x64 ; cmp rax, rcx ; sete al ; movzx eax, al),
            BinOp::Ne => dynasm!(self.0 ; .arch x64 ; cmp rax, rcx ; setne al ; movzx eax, al),
        }
    }

    fn jump_if_zero(&mut self, label: DynamicLabel) {
        dynasm!(self.0 ; .arch x64 ; test rax, rax ; jz =>label);
    }

    fn jump(&mut self, label: DynamicLabel) {
        dynasm!(self.0 ; .arch x64 ; jmp =>label);
    }

    fn pop_arg(&mut self, index: usize) {
        self.pop(ARG_REGS[index]);
    }

    fn call_label(&mut self, label: DynamicLabel, depth: usize) {
        self.aligned(depth, |a| dynasm!(a ; .arch x64 ; call =>label));
    }

    fn call_native(&mut self, addr: usize, depth: usize) {
        let addr = addr as i64;
        self.aligned(
            depth,
            |a| dynasm!(a ; .arch x64 ; mov rax, QWORD addr ; call rax),
        );
    }

    fn restore_frame(&mut self) {
        dynasm!(self.0 ; .arch x64 ; mov rsp, rbp ; pop rbp);
    }

    fn ret(&mut self) {
        dynasm!(self.0 ; .arch x64 ; ret);
    }

    fn finalize(self) -> Result<Vec<u8>, String> {
        self.0.finalize().map_err(|e| e.to_string())
    }
}

impl X64 {
    // dynasm's expansion of `Rq(reg)` converts the u8 to itself.
    #[allow(clippy::useless_conversion)]
    fn pop(&mut self, reg: u8) {
        // (A dynamic register: encoded with a REX prefix even for rax, 2 bytes.)
        dynasm!(self.0 ; .arch x64 ; pop Rq(reg));
    }

    /// Emits a call with `rsp` 16-byte aligned, as the ABI wants: the prologue aligned it,
    /// `depth` pending temporaries may not have.
    fn aligned(&mut self, depth: usize, call: impl FnOnce(&mut Asm)) {
        let pad = depth % 2 == 1;
        if pad {
            dynasm!(self.0 ; .arch x64 ; sub rsp, 8);
        }
        call(&mut self.0);
        if pad {
            dynasm!(self.0 ; .arch x64 ; add rsp, 8);
        }
    }
}
