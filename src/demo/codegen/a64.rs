//! The aarch64 emitter (AAPCS64): accumulator `x0`, right operand `x1`, frame pointer `x29`,
//! arguments in `x0`-`x5`, `x16` (the intra-procedure-call scratch register) for native call
//! targets and far slot addresses.
//!
//! The frame record is the 16-byte pair the debugger model describes (`stp x29, x30, [sp,
//! #-16]!`, `mov x29, sp`); the slots are reserved below it by a separate `sub sp`, so the
//! CFA stays x29 + 16 for the whole body. Each temporary takes a 16-byte stack slot, because
//! aarch64 faults on memory accesses through a misaligned `sp`: the stack stays aligned at
//! every call without padding.

// dynasm's expansion of a dynamic register `X(reg)` converts the u8 to itself.
#![allow(clippy::useless_conversion)]

use dynasmrt::{dynasm, DynamicLabel, DynasmApi, DynasmLabelApi};
use jit_interface::Arch;

use super::{BinOp, Emitter};

type Asm = dynasmrt::VecAssembler<dynasmrt::aarch64::Aarch64Relocation>;

const ACC: u8 = 0;
const SCRATCH: u8 = 16;

pub struct A64(Asm);

impl Emitter for A64 {
    const ARCH: Arch = Arch::Aarch64;
    // `sub sp, sp, #N` and `sub x16, x29, #N` take a 12-bit immediate: frames up to 4080
    // bytes (a multiple of 16).
    const MAX_SLOTS: usize = 510;

    fn new() -> Self {
        A64(Asm::new(0))
    }

    fn offset(&self) -> usize {
        self.0.offset().0
    }

    fn new_label(&mut self) -> DynamicLabel {
        self.0.new_dynamic_label()
    }

    fn bind(&mut self, label: DynamicLabel) {
        dynasm!(self.0 ; .arch aarch64 ; =>label);
    }

    fn align_function(&mut self) {
        while self.offset() % 16 != 0 {
            dynasm!(self.0 ; .arch aarch64 ; brk 0);
        }
    }

    fn save_frame_pointer(&mut self) {
        dynasm!(self.0 ; .arch aarch64 ; stp x29, x30, [sp, #-16]!);
    }

    fn set_frame_pointer(&mut self) {
        dynasm!(self.0 ; .arch aarch64 ; mov x29, sp);
    }

    fn reserve(&mut self, bytes: u32) {
        assert!(bytes < 4096, "frame of {bytes} bytes beyond MAX_SLOTS");
        dynasm!(self.0 ; .arch aarch64 ; sub sp, sp, bytes);
    }

    fn store_param(&mut self, index: usize, off: i32) {
        self.store_reg(index as u8, off);
    }

    fn store(&mut self, off: i32) {
        self.store_reg(ACC, off);
    }

    fn load(&mut self, off: i32) {
        if (-256..0).contains(&off) {
            dynasm!(self.0 ; .arch aarch64 ; ldur x0, [x29, off]);
        } else {
            self.far_slot(off);
            dynasm!(self.0 ; .arch aarch64 ; ldr x0, [x16]);
        }
    }

    fn load_const(&mut self, n: i64) {
        self.mov_imm(ACC, n as u64);
    }

    fn zero(&mut self) {
        dynasm!(self.0 ; .arch aarch64 ; mov x0, xzr);
    }

    fn negate(&mut self) {
        dynasm!(self.0 ; .arch aarch64 ; neg x0, x0);
    }

    fn load_indirect(&mut self) {
        dynasm!(self.0 ; .arch aarch64 ; ldr x0, [x0]);
    }

    fn push(&mut self) {
        dynasm!(self.0 ; .arch aarch64 ; str x0, [sp, #-16]!);
    }

    fn pop_lhs(&mut self) {
        dynasm!(self.0 ; .arch aarch64 ; mov x1, x0 ; ldr x0, [sp], #16);
    }

    fn binary(&mut self, op: BinOp) {
        // `sdiv` by zero gives 0 without a fault, as in native aarch64 code.
        match op {
            BinOp::Add => dynasm!(self.0 ; .arch aarch64 ; add x0, x0, x1),
            BinOp::Sub => dynasm!(self.0 ; .arch aarch64 ; sub x0, x0, x1),
            BinOp::Mul => dynasm!(self.0 ; .arch aarch64 ; mul x0, x0, x1),
            BinOp::Div => dynasm!(self.0 ; .arch aarch64 ; sdiv x0, x0, x1),
            BinOp::Rem => dynasm!(self.0 ; .arch aarch64 ; sdiv x2, x0, x1 ; msub x0, x2, x1, x0),
            BinOp::Lt => dynasm!(self.0 ; .arch aarch64 ; cmp x0, x1 ; cset x0, lt),
            BinOp::Le => dynasm!(self.0 ; .arch aarch64 ; cmp x0, x1 ; cset x0, le),
            BinOp::Gt => dynasm!(self.0 ; .arch aarch64 ; cmp x0, x1 ; cset x0, gt),
            BinOp::Ge => dynasm!(self.0 ; .arch aarch64 ; cmp x0, x1 ; cset x0, ge),
            BinOp::Eq => dynasm!(self.0 ; .arch aarch64 ; cmp x0, x1 ; cset x0, eq),
            BinOp::Ne => dynasm!(self.0 ; .arch aarch64 ; cmp x0, x1 ; cset x0, ne),
        }
    }

    fn jump_if_zero(&mut self, label: DynamicLabel) {
        dynasm!(self.0 ; .arch aarch64 ; cbz x0, =>label);
    }

    fn jump(&mut self, label: DynamicLabel) {
        dynasm!(self.0 ; .arch aarch64 ; b =>label);
    }

    fn pop_arg(&mut self, index: usize) {
        let reg = index as u8;
        dynasm!(self.0 ; .arch aarch64 ; ldr X(reg), [sp], #16);
    }

    fn call_label(&mut self, label: DynamicLabel, _depth: usize) {
        // 16-byte temporaries: sp is aligned whatever the depth.
        dynasm!(self.0 ; .arch aarch64 ; bl =>label);
    }

    fn call_native(&mut self, addr: usize, _depth: usize) {
        self.mov_imm(SCRATCH, addr as u64);
        dynasm!(self.0 ; .arch aarch64 ; blr x16);
    }

    fn restore_frame(&mut self) {
        dynasm!(self.0 ; .arch aarch64 ; mov sp, x29 ; ldp x29, x30, [sp], #16);
    }

    fn ret(&mut self) {
        dynasm!(self.0 ; .arch aarch64 ; ret);
    }

    fn finalize(self) -> Result<Vec<u8>, String> {
        self.0.finalize().map_err(|e| e.to_string())
    }
}

impl A64 {
    /// Stores register `reg` into the slot at `off` below x29.
    fn store_reg(&mut self, reg: u8, off: i32) {
        if (-256..0).contains(&off) {
            dynasm!(self.0 ; .arch aarch64 ; stur X(reg), [x29, off]);
        } else {
            self.far_slot(off);
            dynasm!(self.0 ; .arch aarch64 ; str X(reg), [x16]);
        }
    }

    /// x16 = the address of a slot beyond `ldur`/`stur`'s 9-bit reach.
    fn far_slot(&mut self, off: i32) {
        let below = off.unsigned_abs();
        assert!(
            off < 0 && below < 4096,
            "slot offset {off} beyond MAX_SLOTS"
        );
        dynasm!(self.0 ; .arch aarch64 ; sub x16, x29, below);
    }

    /// Any 64-bit constant into `reg`: `movz` for the low 16 bits, then `movk` for each
    /// further nonzero 16-bit part. (Script literals are not negative: `-1` is a negation.)
    fn mov_imm(&mut self, reg: u8, value: u64) {
        let part = |i: u32| ((value >> (16 * i)) & 0xffff) as u32;
        let low = part(0);
        dynasm!(self.0 ; .arch aarch64 ; movz X(reg), low);
        for i in 1..4 {
            let p = part(i);
            match i {
                _ if p == 0 => {}
                1 => dynasm!(self.0 ; .arch aarch64 ; movk X(reg), p, lsl 16),
                2 => dynasm!(self.0 ; .arch aarch64 ; movk X(reg), p, lsl 32),
                _ => dynasm!(self.0 ; .arch aarch64 ; movk X(reg), p, lsl 48),
            }
        }
    }
}
