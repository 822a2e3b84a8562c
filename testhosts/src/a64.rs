//! A tiny aarch64 instruction emitter: the few instructions the aarch64 test host's JIT
//! needs, encoded by hand from the Arm ARM's encodings (no assembler crate), one method per
//! instruction. Records where each instruction starts, so that the tests can single-step
//! through every one of them. (`tests/aarch64_qemu.rs` checks the encodings against
//! GDB's disassembly of the running code.)

/// Registers by number (31 is sp or xzr, by instruction).
pub const X0: u32 = 0;
pub const X1: u32 = 1;
pub const X9: u32 = 9;
pub const X16: u32 = 16;
pub const X29: u32 = 29;
const SP: u32 = 31;

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

    pub fn code(&self) -> &[u8] {
        &self.code
    }

    pub fn instruction_starts(&self) -> &[u32] {
        &self.starts
    }

    fn insn(&mut self, word: u32) {
        self.starts.push(self.offset());
        self.code.extend_from_slice(&word.to_le_bytes());
    }

    /// `stp x29, x30, [sp, #-16]!`: the frame record pushed.
    pub fn stp_frame_record(&mut self) {
        self.insn(0xa9bf_7bfd);
    }

    /// `mov x29, sp` (`add x29, sp, #0`).
    pub fn mov_fp_sp(&mut self) {
        self.add_imm(X29, SP, 0);
    }

    /// `ldp x29, x30, [sp], #16`: the frame record popped.
    pub fn ldp_frame_record(&mut self) {
        self.insn(0xa8c1_7bfd);
    }

    /// `ret` (to x30).
    pub fn ret(&mut self) {
        self.insn(0xd65f_03c0);
    }

    /// `add xd, xn, #imm` (12-bit immediate; register 31 is sp).
    pub fn add_imm(&mut self, d: u32, n: u32, imm: u32) {
        assert!(imm < 4096 && d < 32 && n < 32);
        self.insn(0x9100_0000 | (imm << 10) | (n << 5) | d);
    }

    /// `movz xd, #value` then `movk` for each further non-zero 16-bit part: any 64-bit
    /// constant (an address).
    pub fn mov_imm64(&mut self, d: u32, value: u64) {
        self.insn(0xd280_0000 | ((value & 0xffff) as u32) << 5 | d);
        for hw in 1..4u32 {
            let part = ((value >> (16 * hw)) & 0xffff) as u32;
            if part != 0 {
                self.insn(0xf280_0000 | (hw << 21) | (part << 5) | d);
            }
        }
    }

    /// `ldr xt, [xn]`: a 64-bit load.
    pub fn ldr(&mut self, t: u32, n: u32) {
        assert!(t < 32 && n < 32);
        self.insn(0xf940_0000 | (n << 5) | t);
    }

    /// `add xd, xn, xm`.
    pub fn add(&mut self, d: u32, n: u32, m: u32) {
        assert!(d < 31 && n < 31 && m < 31);
        self.insn(0x8b00_0000 | (m << 16) | (n << 5) | d);
    }

    /// `blr xn`: call the address in xn, the return address in x30.
    pub fn blr(&mut self, n: u32) {
        self.insn(0xd63f_0000 | (n << 5));
    }
}
