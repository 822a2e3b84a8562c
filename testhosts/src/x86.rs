//! A tiny x86-64 instruction emitter: just the instructions the test host's JIT needs,
//! encoded by hand (no assembler crate), one method per instruction. It records where each
//! instruction starts so that the tests can single-step through every one of them.

/// General-purpose registers by their hardware number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // the full register file, though the scenario uses a few
pub enum Reg {
    Rax = 0,
    Rcx = 1,
    Rdx = 2,
    Rbx = 3,
    Rsp = 4,
    Rbp = 5,
    Rsi = 6,
    Rdi = 7,
    R8 = 8,
    R9 = 9,
    R10 = 10,
    R11 = 11,
    R12 = 12,
    R13 = 13,
    R14 = 14,
    R15 = 15,
}

impl Reg {
    fn low(self) -> u8 {
        self as u8 & 7
    }
    fn ext(self) -> bool {
        self as u8 >= 8
    }
}

/// A buffer of machine code for one function, with its instruction boundaries.
#[derive(Debug, Default)]
pub struct Asm {
    code: Vec<u8>,
    starts: Vec<u32>,
}

impl Asm {
    pub fn new() -> Asm {
        Asm::default()
    }

    /// Offset of the next instruction.
    pub fn offset(&self) -> u32 {
        self.code.len() as u32
    }

    /// The bytes emitted so far.
    pub fn code(&self) -> &[u8] {
        &self.code
    }

    /// Start offsets of every instruction emitted so far.
    pub fn instruction_starts(&self) -> &[u32] {
        &self.starts
    }

    fn insn(&mut self, bytes: &[u8]) {
        self.starts.push(self.offset());
        self.code.extend_from_slice(bytes);
    }

    /// REX prefix with W set (64-bit operand); `r` extends ModRM.reg, `b` ModRM.rm / opcode reg.
    fn rex_w(r: bool, b: bool) -> u8 {
        0x48 | (u8::from(r) << 2) | u8::from(b)
    }

    /// ModRM (+ SIB) + disp8 for `[base + disp]`; rsp/r12 as base need a SIB byte.
    fn mem(reg: u8, base: Reg, disp: i8) -> Vec<u8> {
        let mut v = vec![0x40 | (reg << 3) | base.low()];
        if base.low() == 4 {
            v.push(0x24);
        }
        v.push(disp as u8);
        v
    }

    /// `push r64`
    pub fn push(&mut self, r: Reg) {
        let mut b = Vec::new();
        if r.ext() {
            b.push(0x41);
        }
        b.push(0x50 + r.low());
        self.insn(&b);
    }

    /// `pop r64`
    pub fn pop(&mut self, r: Reg) {
        let mut b = Vec::new();
        if r.ext() {
            b.push(0x41);
        }
        b.push(0x58 + r.low());
        self.insn(&b);
    }

    /// `mov dst, src` (64-bit registers)
    pub fn mov_rr(&mut self, dst: Reg, src: Reg) {
        let modrm = 0xc0 | (src.low() << 3) | dst.low();
        self.insn(&[Self::rex_w(src.ext(), dst.ext()), 0x89, modrm]);
    }

    /// `mov dst, imm64`
    pub fn mov_imm64(&mut self, dst: Reg, imm: u64) {
        let mut b = vec![Self::rex_w(false, dst.ext()), 0xb8 + dst.low()];
        b.extend_from_slice(&imm.to_le_bytes());
        self.insn(&b);
    }

    /// `mov [base + disp], src`
    pub fn store(&mut self, base: Reg, disp: i8, src: Reg) {
        let mut b = vec![Self::rex_w(src.ext(), base.ext()), 0x89];
        b.extend(Self::mem(src.low(), base, disp));
        self.insn(&b);
    }

    /// `add dst, [base + disp]`
    pub fn add_load(&mut self, dst: Reg, base: Reg, disp: i8) {
        let mut b = vec![Self::rex_w(dst.ext(), base.ext()), 0x03];
        b.extend(Self::mem(dst.low(), base, disp));
        self.insn(&b);
    }

    /// `add dst, imm8` (sign-extended)
    pub fn add_imm8(&mut self, dst: Reg, imm: i8) {
        self.insn(&[
            Self::rex_w(false, dst.ext()),
            0x83,
            0xc0 | dst.low(),
            imm as u8,
        ]);
    }

    /// `sub dst, imm8` (sign-extended)
    pub fn sub_imm8(&mut self, dst: Reg, imm: i8) {
        self.insn(&[
            Self::rex_w(false, dst.ext()),
            0x83,
            0xe8 | dst.low(),
            imm as u8,
        ]);
    }

    /// `call r64` (absolute, through a register: how JIT code reaches native functions)
    pub fn call_reg(&mut self, r: Reg) {
        let mut b = Vec::new();
        if r.ext() {
            b.push(0x41);
        }
        b.extend_from_slice(&[0xff, 0xd0 | r.low()]);
        self.insn(&b);
    }

    /// `call rel32` to `target`, given that this function will start at `here`
    /// (how JIT code calls other JIT code in the same buffer).
    pub fn call_rel(&mut self, here: u64, target: u64) {
        let next = here + u64::from(self.offset()) + 5;
        let rel = target.wrapping_sub(next) as i64;
        let rel = i32::try_from(rel).expect("JIT call target within +-2 GiB");
        let mut b = vec![0xe8];
        b.extend_from_slice(&rel.to_le_bytes());
        self.insn(&b);
    }

    /// `nop`
    pub fn nop(&mut self) {
        self.insn(&[0x90]);
    }

    /// `ret`
    pub fn ret(&mut self) {
        self.insn(&[0xc3]);
    }
}
