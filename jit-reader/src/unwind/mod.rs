//! Unwinding JIT frames: find the function a frame is in, then apply its frame-description
//! row (see [`jit_interface::UnwindRow`]) to recover the caller's registers.
//!
//! The architecture-specific parts (register numbers, where the return address lives, what
//! a sane stack looks like) are in one module per architecture: [`x86_64`] and [`aarch64`].
//!
//! ## Which architecture
//! Each payload states its architecture, and each function's unwinder is its payload's,
//! never the host's: an x86-64 reader in gdb-multiarch unwinds an aarch64 target. GDB hands
//! over registers by DWARF number, and the PC's number differs (x86-64 `rip` 16, aarch64
//! `pc` 32), so the PC is read with the numbers of each architecture that has registered
//! code ([`Index::archs`]; in practice one), and a frame is the first one's whose PC falls
//! in registered code. A PC read one way that lands in a function of the other architecture
//! is refused ([`Outcome::Refused`]), never unwound with the wrong numbers.
//!
//! ## Which address to look up: the PC or the PC minus one
//! In a caller frame the PC is a return address, the instruction after a call. If that call
//! was the last instruction of a function, the return address is the function's end, which
//! belongs to the next function or to none; looking up `pc - 1` finds the right function.
//! In the innermost frame (or one interrupted by a signal) the PC is the instruction about
//! to run and must be looked up as is. GDB's reader API does not say which kind of frame it
//! asks about, so the rule is:
//! - if the PC is inside a function and not its first byte, `pc` and `pc - 1` are in the
//!   same function and the row at the PC also describes the call before it (a call does not
//!   change its caller's frame): use the PC;
//! - otherwise (the PC is a function's first byte, or in no function while `pc - 1` is), the
//!   frame is taken as a caller frame, and `pc - 1` used, only if the call left the PC where
//!   it leaves it: the word just below the stack pointer (x86-64 `call` pushes it), the link
//!   register x30 (aarch64 `bl`; every unwinder gives a caller frame's x30 as its return
//!   address) — true for every caller frame, whichever unwinder produced it, and for an
//!   innermost frame only by coincidence.
//!
//! ## Epilogues nobody declared: the code at the PC
//! For a frame-pointer function whose epilogues were not declared, the row at a `ret` is
//! wrong, so the unwinder reads the instruction at the PC ([`x86_64`] module docs). That is
//! needed only where the PC may be on an epilogue: not at a return address, which follows a
//! call, inside the body. GDB unwinds a backtrace frame by frame, each caller with the
//! registers the reader just gave it, so the reader keeps the last frame it unwound (its
//! registers and CFA) and the caller registers it produced (`Memo`): a frame with
//! exactly those caller registers stands at a return address and its code is not read, and
//! the frame id GDB asks for right after `unwind` reuses the CFA just computed. A deep
//! backtrace thus reads code once, in its innermost frame; a frame the memo does not
//! cover costs at most one read of the code at its PC. (GDB's own amd64 epilogue unwinder
//! looks only at the innermost frame; a caller frame's PC is a return address, where the
//! rows hold.)
//!
//! ## When the stack is corrupt
//! A frame in JIT code whose row cannot be applied sanely (unknown registers, misaligned or
//! implausible addresses, a frame larger than [`x86_64::MAX_FRAME`], a caller frame not
//! strictly above this one, unreadable memory) is still claimed by the reader, with an
//! unknown caller: GDB then shows it and ends the backtrace there, instead of handing the
//! frame to a heuristic unwinder or walking garbage.

use std::cell::Cell;

use jit_interface::{register_rule_at, Arch, RegisterRule};

use crate::index::{CodeFn, Index};
pub use crate::memory::Memory;

pub mod aarch64;
pub mod x86_64;

/// Register values of the frame being unwound, by DWARF register number (`None`: unknown).
pub trait Registers {
    fn get(&self, dwarf_regnum: u16) -> Option<u64>;
}

/// DWARF numbers of the registers the unwinder reads and sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchRegs {
    pub pc: u16,
    pub sp: u16,
    pub fp: u16,
    /// The link register, where a call leaves the return address (aarch64 x30); `None`
    /// where the call pushes it (x86-64).
    pub lr: Option<u16>,
}

/// The registers of the frame being unwound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRegs {
    pub pc: u64,
    pub sp: Option<u64>,
    pub fp: Option<u64>,
    /// The link register (aarch64 x30; `None` on x86-64, or unknown).
    pub lr: Option<u64>,
}

/// The caller's registers, as recovered. Everything else is unknown in the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerRegs {
    pub pc: u64,
    pub sp: u64,
    /// `None`: the frame pointer was not saved and its value in this frame is unknown.
    pub fp: Option<u64>,
    /// The link register (aarch64: the return address, which the `bl` left there; `None`
    /// on x86-64).
    pub lr: Option<u64>,
}

/// An epilogue instruction recognised at the PC, of either architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    X86_64(x86_64::Epilogue),
    Aarch64(aarch64::Epilogue),
}

impl Epilogue {
    /// The instructions from the PC on, as the debug output names them.
    pub fn describe(self) -> &'static str {
        match self {
            Epilogue::X86_64(e) => e.describe(),
            Epilogue::Aarch64(e) => e.describe(),
        }
    }
}

/// What the code at the PC said about a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PcCode {
    /// Not read: the function's row holds (not rbp-based, epilogues declared, or the PC is a
    /// return address).
    NotRead,
    /// Read, no epilogue there: the function's row holds.
    Body,
    /// An epilogue instruction: its row replaced the function's.
    Epilogue(Epilogue),
    /// `len` bytes at the PC could not be read: the function's row holds.
    Unreadable { len: usize },
}

/// The result of applying one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The canonical frame address, if it could be computed (the frame's identity).
    pub cfa: Option<u64>,
    /// The caller, or why the backtrace ends at this frame.
    pub caller: Result<CallerRegs, String>,
    /// Whether the code at the PC was read, and what it said.
    pub code: PcCode,
}

/// What the unwinder makes of a frame.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Not in (live) registered JIT code: let GDB's other unwinders handle it.
    NotOurs(&'static str),
    /// In registered code, but not a frame this reader can unwind (the PC read with one
    /// architecture's numbers is in a function of another): declined, with the reason.
    Refused(String),
    /// A frame of a JIT function.
    Frame {
        func: CodeFn,
        /// The address the function and row were looked up with (PC or PC - 1).
        lookup_pc: u64,
        regs: FrameRegs,
        step: Step,
    },
}

/// The DWARF numbers of `arch`'s registers the unwinder reads and sets.
pub fn arch_regs(arch: Arch) -> ArchRegs {
    match arch {
        Arch::X86_64 => x86_64::REGS,
        Arch::Aarch64 => aarch64::REGS,
    }
}

/// A set of architectures (those that have registered code: [`Index::archs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArchSet(u8);

impl ArchSet {
    /// Every architecture, in the order PCs are tried.
    const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    fn bit(arch: Arch) -> u8 {
        match arch {
            Arch::X86_64 => 1,
            Arch::Aarch64 => 2,
        }
    }

    pub const EMPTY: ArchSet = ArchSet(0);

    pub fn with(self, arch: Arch) -> ArchSet {
        ArchSet(self.0 | ArchSet::bit(arch))
    }

    pub fn contains(self, arch: Arch) -> bool {
        self.0 & ArchSet::bit(arch) != 0
    }

    /// The set as one byte (for an atomic), and back.
    pub fn bits(self) -> u8 {
        self.0
    }
    pub fn from_bits(bits: u8) -> ArchSet {
        ArchSet(bits & 3)
    }

    pub fn iter(self) -> impl Iterator<Item = Arch> {
        ArchSet::ALL.into_iter().filter(move |&a| self.contains(a))
    }
}

/// The architecture and PC of the frame `regs` gives: the PC read with the numbers of each
/// architecture in `archs` in turn (one register read each), the first that `in_code`
/// accepts (module docs, "Which architecture"). `None`: no PC in code.
pub fn frame_pc(
    archs: ArchSet,
    regs: &dyn Registers,
    in_code: impl Fn(u64) -> bool,
) -> Option<(Arch, u64)> {
    archs.iter().find_map(|arch| {
        regs.get(arch_regs(arch).pc)
            .filter(|&pc| in_code(pc))
            .map(|pc| (arch, pc))
    })
}

/// Is `pc` (or `pc - 1`, a return address at a function's end) in indexed code?
fn covered(index: &Index, pc: u64) -> bool {
    index.covers(pc) || pc.checked_sub(1).is_some_and(|a| index.covers(a))
}

/// Unwinds the frame whose registers `regs` gives.
pub fn unwind(index: &mut Index, regs: &dyn Registers, mem: &dyn Memory) -> Outcome {
    let Some((arch, pc)) = frame_pc(index.archs(), regs, |pc| covered(index, pc)) else {
        return Outcome::NotOurs("the PC is not in registered JIT code");
    };
    unwind_at(index, arch, pc, regs, mem)
}

/// [`unwind`] for a frame whose PC the caller has read already, with `arch`'s numbers
/// (every register read is a call into GDB's frame machinery, the dearest part of declining
/// a native frame).
pub fn unwind_at(
    index: &mut Index,
    arch: Arch,
    pc: u64,
    regs: &dyn Registers,
    mem: &dyn Memory,
) -> Outcome {
    let nums = arch_regs(arch);
    // A PC outside all JIT code costs two map searches and nothing else.
    if !covered(index, pc) {
        return Outcome::NotOurs("the PC is not in registered JIT code");
    }
    let frame = FrameRegs {
        pc,
        sp: regs.get(nums.sp),
        fp: regs.get(nums.fp),
        lr: nums.lr.and_then(|lr| regs.get(lr)),
    };
    let Some((func, lookup_pc)) = resolve(index, arch, frame, mem) else {
        return Outcome::NotOurs("the PC is in no live registered function");
    };
    if func.arch != arch {
        return Outcome::Refused(format!(
            "the PC {pc:#x}, read as {}'s register {}, is in {}, a function of {} code: not unwound with another architecture's registers",
            arch.name(),
            nums.pc,
            func.name(),
            func.arch.name()
        ));
    }
    let at_return_address = Memo::produced(frame);
    let step = match arch {
        Arch::X86_64 => x86_64::step_at(&func, lookup_pc, &frame, at_return_address, mem),
        Arch::Aarch64 => aarch64::step_at(&func, lookup_pc, &frame, at_return_address, regs, mem),
    };
    Memo::keep(Memo {
        frame,
        func_start: func.start,
        lookup_pc,
        cfa: step.cfa,
        caller: step.caller.as_ref().ok().copied(),
    });
    Outcome::Frame {
        func,
        lookup_pc,
        regs: frame,
        step,
    }
}

/// The caller's values of the registers `func`'s register rules describe at `lookup_pc`,
/// for a frame with CFA `cfa` and registers `regs`: (DWARF number, value) for each one
/// whose value is known (before a register's first rule, the value it has in this frame). A register left out shows as `<not saved>` in GDB: one without a
/// rule (a function may have changed a callee-saved register it does not describe; the ELF
/// payload says "undefined" for those too), one ruled undefined, and one whose place
/// cannot be read (an unreadable stack slot, a register this frame does not know). Never a
/// guess: a wrong value in a caller frame is worse than none.
pub fn saved_registers(
    func: &CodeFn,
    lookup_pc: u64,
    cfa: u64,
    regs: &dyn Registers,
    mem: &dyn Memory,
) -> Vec<(u16, u64)> {
    let rules = func.register_rules();
    if rules.is_empty() {
        return Vec::new();
    }
    let Ok(offset) = u32::try_from(lookup_pc.wrapping_sub(func.start)) else {
        return Vec::new();
    };
    // Each register once, with the rule in effect at the offset; before its first rule a
    // register still holds the caller's value.
    let mut out: Vec<(u16, u64)> = Vec::new();
    let mut seen: Vec<u16> = Vec::new();
    for r in rules {
        if seen.contains(&r.reg) {
            continue;
        }
        seen.push(r.reg);
        let rule = register_rule_at(rules, r.reg, offset).unwrap_or(RegisterRule::SameValue);
        let value = match rule {
            RegisterRule::AtCfa(n) => cfa
                .checked_add_signed(i64::from(n))
                .and_then(|slot| mem.read_u64(slot)),
            RegisterRule::InRegister(other) => regs.get(other),
            RegisterRule::SameValue => regs.get(r.reg),
            RegisterRule::Undefined => None,
        };
        if let Some(v) = value {
            out.push((r.reg, v));
        }
    }
    out
}

/// The identity of a frame that [`unwind`] claimed: (function start, CFA, or the stack
/// pointer if the CFA cannot be computed); `None` if the frame is not ours. GDB asks for it
/// on every JIT frame right after `unwind` claimed the frame, with the process stopped, so
/// the function's liveness is not read again and, except at a function's first byte (see
/// the module docs) or for a frame `unwind` did not just handle whose code at the PC must
/// be read, no memory is read at all: every target read is a system call in GDB. The CFA
/// is the one `unwind` computes, epilogue rule included, so the id stays the same through
/// an epilogue.
pub fn frame_id(index: &mut Index, regs: &dyn Registers, mem: &dyn Memory) -> Option<(u64, u64)> {
    let (arch, pc) = frame_pc(index.archs(), regs, |pc| covered(index, pc))?;
    frame_id_at(index, arch, pc, regs, mem)
}

/// [`frame_id`] for a frame whose PC the caller has read with `arch`'s numbers.
pub fn frame_id_at(
    index: &mut Index,
    arch: Arch,
    pc: u64,
    regs: &dyn Registers,
    mem: &dyn Memory,
) -> Option<(u64, u64)> {
    let nums = arch_regs(arch);
    let frame = FrameRegs {
        pc,
        sp: regs.get(nums.sp),
        fp: regs.get(nums.fp),
        lr: nums.lr.and_then(|lr| regs.get(lr)),
    };
    // What `resolve` picks for a PC inside a function past its first byte.
    let (func, lookup_pc) = match index.peek(pc) {
        Some(f) if pc > f.start => (f, pc),
        _ => match unwind_at(index, arch, pc, regs, mem) {
            Outcome::Frame {
                func, lookup_pc, ..
            } => (func, lookup_pc),
            Outcome::NotOurs(_) | Outcome::Refused(_) => return None,
        },
    };
    if func.arch != arch {
        return None;
    }
    let cfa = match Memo::cfa_of(frame, func.start, lookup_pc) {
        Some(cfa) => cfa,
        None => match arch {
            Arch::X86_64 => x86_64::cfa(&func, lookup_pc, &frame, Memo::produced(frame), mem),
            Arch::Aarch64 => aarch64::cfa(&func, lookup_pc, &frame, Memo::produced(frame), mem),
        },
    };
    Some((func.start, cfa.or(frame.sp).unwrap_or(0)))
}

/// The frame [`unwind`] handled last, and the caller it gave GDB (module docs: "Epilogues
/// nobody declared"). GDB calls readers from one thread; the memo is per thread so that
/// unit tests running in parallel do not share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Memo {
    frame: FrameRegs,
    func_start: u64,
    lookup_pc: u64,
    cfa: Option<u64>,
    caller: Option<CallerRegs>,
}

thread_local! {
    static LAST: Cell<Option<Memo>> = const { Cell::new(None) };
}

impl Memo {
    fn keep(m: Memo) {
        LAST.with(|l| l.set(Some(m)));
    }

    /// Are `frame`'s registers the caller registers last given to GDB, its PC therefore a
    /// return address read from the stack?
    fn produced(frame: FrameRegs) -> bool {
        LAST.with(|l| l.get())
            .and_then(|m| m.caller)
            .is_some_and(|c| c.pc == frame.pc && Some(c.sp) == frame.sp && c.fp == frame.fp)
    }

    /// The CFA last computed for this very frame (same registers, same function and lookup
    /// address), if it is the frame unwound last; `Some(None)`: no CFA could be computed.
    fn cfa_of(frame: FrameRegs, func_start: u64, lookup_pc: u64) -> Option<Option<u64>> {
        LAST.with(|l| l.get())
            .filter(|m| m.frame == frame && m.func_start == func_start && m.lookup_pc == lookup_pc)
            .map(|m| m.cfa)
    }

    /// Forgets the last frame (tests: start a walk afresh).
    #[cfg(test)]
    pub(crate) fn clear() {
        LAST.with(|l| l.set(None));
    }
}

/// Finds the live function of a frame and the address to look up rows with (module docs).
fn resolve(
    index: &mut Index,
    arch: Arch,
    frame: FrameRegs,
    mem: &dyn Memory,
) -> Option<(CodeFn, u64)> {
    let pc = frame.pc;
    let here = index.lookup(pc, mem);
    if let Some(f) = &here {
        if pc > f.start {
            return Some((f.clone(), pc));
        }
    }
    let before = pc.checked_sub(1).and_then(|a| index.lookup(a, mem));
    match (here, before) {
        (here, None) => here.map(|f| (f, pc)),
        (here, Some(b)) => {
            if is_return_address(arch, frame, mem) {
                Some((b, pc - 1))
            } else {
                here.map(|f| (f, pc))
            }
        }
    }
}

/// Does the frame look like a caller frame, its PC a return address?
fn is_return_address(arch: Arch, frame: FrameRegs, mem: &dyn Memory) -> bool {
    match arch {
        Arch::X86_64 => x86_64::pushed_return_address(frame, mem),
        Arch::Aarch64 => aarch64::linked_return_address(frame),
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Fake stacks and registers for unit tests.
    use super::*;
    use std::collections::BTreeMap;

    /// Memory made of the bytes set; everything else is unreadable. Logs every read
    /// (address, length), so tests can count what a step costs.
    #[derive(Debug, Default, Clone)]
    pub struct FakeMem {
        pub bytes: BTreeMap<u64, u8>,
        pub log: std::cell::RefCell<Vec<(u64, usize)>>,
    }

    impl FakeMem {
        /// Sets the 8-byte little-endian word at `addr`.
        pub fn set(&mut self, addr: u64, value: u64) -> &mut Self {
            self.put(addr, &value.to_le_bytes())
        }

        /// Sets bytes (code) at `addr`.
        pub fn put(&mut self, addr: u64, bytes: &[u8]) -> &mut Self {
            for (i, &b) in bytes.iter().enumerate() {
                self.bytes.insert(addr + i as u64, b);
            }
            self
        }

        /// Reads logged so far that start in `[lo, hi)`.
        pub fn reads_in(&self, lo: u64, hi: u64) -> usize {
            let log = self.log.borrow();
            log.iter().filter(|(a, _)| (lo..hi).contains(a)).count()
        }
    }

    impl Memory for FakeMem {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            self.log.borrow_mut().push((addr, buf.len()));
            for (i, out) in buf.iter_mut().enumerate() {
                let Some(&b) = addr.checked_add(i as u64).and_then(|a| self.bytes.get(&a)) else {
                    return false;
                };
                *out = b;
            }
            true
        }
    }

    /// Registers by DWARF number.
    #[derive(Debug, Default, Clone)]
    pub struct FakeRegs(pub BTreeMap<u16, u64>);

    impl Registers for FakeRegs {
        fn get(&self, dwarf_regnum: u16) -> Option<u64> {
            self.0.get(&dwarf_regnum).copied()
        }
    }
}

#[cfg(test)]
mod saved_register_tests {
    use super::testing::{FakeMem, FakeRegs};
    use super::*;
    use jit_interface::arch::x86_64::{R12, R13, R14, R15, RBX};
    use jit_interface::{SavedRegister, UnwindRow};

    fn rule(offset: u32, reg: u16, rule: RegisterRule) -> SavedRegister {
        SavedRegister { offset, reg, rule }
    }

    /// A function at 0x1000 (64 bytes) with a frame-pointer frame and `rules`.
    fn func(rules: &[SavedRegister]) -> CodeFn {
        let rows = [
            UnwindRow::X86_64_ENTRY,
            UnwindRow {
                offset: 4,
                ..jit_interface::arch::x86_64::FRAME_SET_UP
            },
        ];
        CodeFn::new("saver", 0x1000, 64, Arch::X86_64, &rows).with_register_rules(rules)
    }

    #[test]
    fn every_rule_on_a_fake_stack() {
        const CFA: u64 = 0x7fff_0000_1000;
        let f = func(&[
            rule(6, R12, RegisterRule::AtCfa(-24)),
            rule(8, R13, RegisterRule::AtCfa(-32)),
            rule(8, RBX, RegisterRule::SameValue),
            rule(20, R14, RegisterRule::InRegister(R15)),
            rule(30, R12, RegisterRule::Undefined),
        ]);
        let mut mem = FakeMem::default();
        mem.set(CFA - 24, 0x1000).set(CFA - 32, 0x2000);
        // This frame's registers: the callee's clobbered values.
        let mut regs = FakeRegs::default();
        for (r, v) in [
            (R12, 0x18),
            (R13, 0x28),
            (R14, 0x38),
            (R15, 0x4242),
            (RBX, 0x77),
        ] {
            regs.0.insert(r, v);
        }
        let at = |off: u64| {
            let mut got = saved_registers(&f, 0x1000 + off, CFA, &regs, &mem);
            got.sort_unstable();
            got
        };
        // Before any rule: every described register is still the caller's.
        assert_eq!(at(0), [(RBX, 0x77), (R12, 0x18), (R13, 0x28), (R14, 0x38)]);
        // Saved at CFA + n: read from the slot, not the clobbered register.
        assert_eq!(
            at(10),
            [(RBX, 0x77), (R12, 0x1000), (R13, 0x2000), (R14, 0x38)]
        );
        // In another register.
        assert_eq!(
            at(20),
            [(RBX, 0x77), (R12, 0x1000), (R13, 0x2000), (R14, 0x4242)]
        );
        // Undefined: left out, so GDB shows `<not saved>`.
        assert_eq!(at(30), [(RBX, 0x77), (R13, 0x2000), (R14, 0x4242)]);
        // r15 has no rule: never set (undefined, as the ELF payload's CIE says).
        assert!(at(40).iter().all(|&(r, _)| r != R15));
        // Nothing known, nothing set: an unreadable slot, a register this frame lacks.
        let empty = FakeMem::default();
        let mut got = saved_registers(&f, 0x1000 + 10, CFA, &FakeRegs::default(), &empty);
        got.sort_unstable();
        assert_eq!(got, []);
        // A CFA whose slot would wrap: no value.
        assert!(saved_registers(&f, 0x1000 + 10, 8, &regs, &mem)
            .iter()
            .all(|&(r, _)| r != R12 && r != R13));
    }

    #[test]
    fn functions_without_rules_set_nothing() {
        let f = func(&[]);
        let mut regs = FakeRegs::default();
        regs.0.insert(R12, 1);
        assert_eq!(
            saved_registers(&f, 0x1010, 0x7fff_0000_1000, &regs, &FakeMem::default()),
            []
        );
    }
}
