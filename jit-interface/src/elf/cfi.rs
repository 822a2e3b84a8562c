//! Call-frame information: `.debug_frame` (DWARF CFI, CIE version 1) with one CIE for the
//! whole object and one FDE per run of up to [`FDE_FUNCTIONS`] neighbouring functions,
//! generated from the model's frame rows and written directly.
//!
//! Sharing an FDE saves its 24-byte header per function and GDB's per-FDE bookkeeping; the
//! cap bounds the instructions a debugger executes to find the rule at one address. Between
//! two functions of one FDE the rules move from the last row of the first to the first row of
//! the second: with the usual epilogue at the end that costs nothing; otherwise either the
//! instructions that change the rules, or `DW_CFA_restore_state` back to the entry state that
//! `DW_CFA_remember_state` kept at the start of the FDE (GCC uses the pair around epilogues,
//! so every debugger follows it), whichever is shorter.

use gimli::constants as dw;

use super::bytes::{extend_small, patch_length, Put, Small};
use super::layout::{Layout, MAX_PADDING};
use crate::error::{Error, Result};
use crate::model::{
    check_unwind_rows, register_rule_at, Arch, CfaBase, Frame, Function, RegisterRule,
    SavedRegister, UnwindRow,
};

/// Stack slots are 8 bytes on both architectures (the model checks offsets are multiples of
/// 8): offsets are stored divided by this. GCC's aarch64 CIEs use -8 too; code offsets are
/// in bytes (code alignment 1) on both, so that one advance encoder serves both and any
/// offset the model holds is exact.
const DATA_ALIGN: i32 = -8;

/// Most functions one FDE describes.
pub(super) const FDE_FUNCTIONS: usize = 32;

/// What CFI needs of an architecture, as constants: the encoder is generic over it, so the
/// x86-64 path compiles to what it was with the numbers spelled out.
pub(super) trait Isa {
    const ARCH: Arch;
    /// DWARF numbers, as CFI opcodes take them (all below 64).
    const FP: u8;
    const SP: u8;
    /// The return-address column (x86-64 `rip`, aarch64 `x30`).
    const RA: u8;
    /// Whether the return address is saved with the frame pointer, one word above it (the
    /// aarch64 frame record), rather than pushed by the call at CFA - 8 (x86-64).
    const RA_IN_RECORD: bool;
    /// The rules at a function's first instruction, which the CIE states.
    const ENTRY: UnwindRow;
    /// Registers undefined unless described (see `write_cie`).
    const CALLEE_SAVED: &'static [u16];
    /// The CIE's size.
    const CIE_LEN: usize;
}

pub(super) struct X86_64;
pub(super) struct Aarch64;

impl Isa for X86_64 {
    const ARCH: Arch = Arch::X86_64;
    const FP: u8 = crate::arch::x86_64::RBP as u8;
    const SP: u8 = crate::arch::x86_64::RSP as u8;
    const RA: u8 = crate::arch::x86_64::RIP as u8;
    const RA_IN_RECORD: bool = false;
    const ENTRY: UnwindRow = crate::arch::x86_64::ENTRY;
    const CALLEE_SAVED: &'static [u16] = &crate::arch::x86_64::CALLEE_SAVED;
    const CIE_LEN: usize = CIE_LEN;
}

impl Isa for Aarch64 {
    const ARCH: Arch = Arch::Aarch64;
    const FP: u8 = crate::arch::aarch64::X29 as u8;
    const SP: u8 = crate::arch::aarch64::SP as u8;
    const RA: u8 = crate::arch::aarch64::X30 as u8;
    const RA_IN_RECORD: bool = true;
    const ENTRY: UnwindRow = crate::arch::aarch64::ENTRY;
    const CALLEE_SAVED: &'static [u16] = &crate::arch::aarch64::CALLEE_SAVED;
    const CIE_LEN: usize = 40;
}

fn cfa_register<I: Isa>(base: CfaBase) -> u8 {
    match base {
        CfaBase::Sp => I::SP,
        CfaBase::Fp => I::FP,
    }
}

/// Most bytes of a transition (with `DW_CFA_restore_state` and `DW_CFA_remember_state`
/// before it): `DW_CFA_def_cfa` and `DW_CFA_offset` with 32-bit operands, and on aarch64
/// a second `DW_CFA_offset` for the return address in the frame record.
const TRANSITION: usize = 2 + 1 + 1 + 5 + 1 + 5 + 1 + 5;

/// Appends the instructions that turn the rule set `prev` into `next`.
#[inline(always)]
fn transition<I: Isa>(prev: &UnwindRow, next: &UnwindRow, out: &mut impl Put) {
    let (reg, offset) = (cfa_register::<I>(next.cfa_base), next.cfa_offset);
    // Validated rows have CFA offsets of 8 or more, so they encode unsigned.
    let offset = offset as u64;
    match (
        prev.cfa_base != next.cfa_base,
        prev.cfa_offset != next.cfa_offset,
    ) {
        (true, true) => {
            out.u8(dw::DW_CFA_def_cfa.0);
            out.uleb(reg.into());
            out.uleb(offset);
        }
        (true, false) => {
            out.u8(dw::DW_CFA_def_cfa_register.0);
            out.uleb(reg.into());
        }
        (false, true) => {
            out.u8(dw::DW_CFA_def_cfa_offset.0);
            out.uleb(offset);
        }
        (false, false) => {}
    }
    if prev.fp_offset != next.fp_offset {
        if next.fp_offset == 0 {
            // Back to the CIE's rule: the caller's frame pointer is in its register (and
            // on aarch64 the return address in x30).
            out.u8(dw::DW_CFA_restore.0 | I::FP);
            if I::RA_IN_RECORD {
                out.u8(dw::DW_CFA_restore.0 | I::RA);
            }
        } else {
            // Validated: a save slot at CFA - 16 or below, a multiple of 8.
            out.u8(dw::DW_CFA_offset.0 | I::FP);
            out.uleb((next.fp_offset / DATA_ALIGN) as u64);
            if I::RA_IN_RECORD {
                // The frame record's second word.
                out.u8(dw::DW_CFA_offset.0 | I::RA);
                out.uleb(((next.fp_offset + 8) / DATA_ALIGN) as u64);
            }
        }
    }
}

/// Appends an advance of the location by `delta` bytes (code alignment 1).
fn advance(delta: u64, out: &mut Vec<u8>) {
    if delta < 0x40 {
        out.u8(dw::DW_CFA_advance_loc.0 | delta as u8);
    } else if let Ok(d) = u8::try_from(delta) {
        out.u8(dw::DW_CFA_advance_loc1.0);
        out.u8(d);
    } else if let Ok(d) = u16::try_from(delta) {
        out.u8(dw::DW_CFA_advance_loc2.0);
        out.u16(d);
    } else {
        // FDEs span at most u32::MAX bytes (see `debug_frame`).
        out.u8(dw::DW_CFA_advance_loc4.0);
        out.u32(delta as u32);
    }
}

/// The encoded `.debug_frame`, and storage kept between payloads.
#[derive(Default)]
pub(super) struct Parts {
    pub frame: Vec<u8>,
    /// The CIE, the same in every payload of its architecture.
    cie: Option<(Arch, Vec<u8>)>,
    rows: Vec<UnwindRow>,
    first_rows: Vec<UnwindRow>,
    /// Of the two [`Repeat`]s.
    repeat_rows: [Vec<UnwindRow>; 2],
    repeat_bytes: [Vec<u8>; 2],
}

impl Parts {
    /// Bytes of storage held.
    pub fn bytes(&self) -> usize {
        self.frame.capacity()
            + self.repeat_bytes.iter().map(Vec::capacity).sum::<usize>()
            + (self.rows.capacity()
                + self.first_rows.capacity()
                + self.repeat_rows.iter().map(Vec::capacity).sum::<usize>())
                * std::mem::size_of::<UnwindRow>()
    }
}

/// The checked frame rows of one function at a time. Consecutive functions often have the
/// same frame description and size (one JIT, one prologue): their rows are made once.
struct Rows<'f, 'p> {
    /// The frame and size `rows` were made for.
    of: Option<(&'f Frame, u32)>,
    rows: &'p mut Vec<UnwindRow>,
}

impl<'f> Rows<'f, '_> {
    /// The rows of `f`, and whether they are those of the function asked about before.
    fn of<'a, I: Isa>(&'a mut self, f: Function<'f>) -> Result<(&'a [UnwindRow], bool)>
    where
        'f: 'a,
    {
        let check = |rows: &[UnwindRow]| {
            check_unwind_rows(I::ARCH, rows, f.size()).map_err(|why| Error::BadRows {
                function: f.name().into(),
                why,
            })
        };
        if let Frame::Rows(rows) = f.frame() {
            check(rows)?;
            // The next function is not the one `self.rows` were made for.
            self.of = None;
            return Ok((rows, false));
        }
        let same = matches!(self.of, Some((frame, size)) if size == f.size() && same_frame(frame, f.frame()));
        if !same {
            f.frame().rows_into(I::ARCH, f.size().into(), self.rows);
            // Rows made from a description the model checked (offsets inside the function,
            // in order) are good: see `Frame::rows`.
            debug_assert_eq!(check(self.rows), Ok(()));
            self.of = Some((f.frame(), f.size()));
        }
        Ok((self.rows, same))
    }
}

/// `a == b`, first for the usual description of JIT code, without a call to compare the
/// epilogues (there are few).
#[inline(always)]
fn same_frame(a: &Frame, b: &Frame) -> bool {
    match (a, b) {
        (
            Frame::FramePointer {
                push_end,
                setup_end,
                epilogues,
            },
            Frame::FramePointer {
                push_end: push_end_b,
                setup_end: setup_end_b,
                epilogues: epilogues_b,
            },
        ) => {
            push_end == push_end_b
                && setup_end == setup_end_b
                && epilogues.len() == epilogues_b.len()
                && epilogues.iter().zip(epilogues_b).all(|(e, f)| e == f)
        }
        _ => std::ptr::eq(a, b) || a == b,
    }
}

/// Pads the entry that started at `start` with `DW_CFA_nop` to a multiple of the address
/// size, as the DWARF standard asks, and patches its length.
fn finish_entry(out: &mut Vec<u8>, start: usize) -> Result<()> {
    while (out.len() - start) % 8 != 0 {
        out.u8(dw::DW_CFA_nop.0);
    }
    patch_length(out, start, ".debug_frame")
}

/// Size of the x86-64 CIE (the one growing payloads start with).
pub(super) const CIE_LEN: usize = 32;

/// Writes the x86-64 CIE every FDE refers to (see [`write_cie_for`]).
pub(super) fn write_cie(out: &mut Vec<u8>) -> Result<()> {
    write_cie_for::<X86_64>(out)
}

/// Writes the CIE every FDE refers to: version 1 (what every debugger reads; GCC emits it
/// too), no augmentation, code offsets in bytes, stack offsets factored by -8, and the
/// state at a function's first instruction.
pub(super) fn write_cie_for<I: Isa>(out: &mut Vec<u8>) -> Result<()> {
    out.u32(0);
    out.u32(u32::MAX);
    out.u8(1);
    out.u8(0);
    out.uleb(1);
    out.sleb(DATA_ALIGN.into());
    out.u8(I::RA);
    // x86-64: CFA = rsp + 8, return address at CFA - 8; aarch64: CFA = sp + 0, return
    // address still in x30. The frame pointer is still the caller's.
    out.u8(dw::DW_CFA_def_cfa.0);
    out.uleb(I::SP.into());
    out.uleb(I::ENTRY.cfa_offset as u64);
    if I::RA_IN_RECORD {
        out.u8(dw::DW_CFA_same_value.0);
        out.uleb(I::RA.into());
    } else {
        out.u8(dw::DW_CFA_offset.0 | I::RA);
        out.uleb(1);
    }
    out.u8(dw::DW_CFA_same_value.0);
    out.uleb(I::FP.into());
    // Callee-saved registers a function does not describe may have been changed: unknown
    // (GDB's default for unspecified callee-saved registers is "same value", which shows
    // the callee's value in the caller: wrong whenever the function did change them).
    for &reg in I::CALLEE_SAVED {
        out.u8(dw::DW_CFA_undefined.0);
        out.uleb(reg.into());
    }
    finish_entry(out, 0)?;
    debug_assert_eq!(out.len(), I::CIE_LEN);
    Ok(())
}

/// The CIE of `I`, made once per thread and architecture.
fn cie_of<I: Isa>(cie: &mut Option<(Arch, Vec<u8>)>) -> Result<&[u8]> {
    if !matches!(cie, Some((arch, _)) if *arch == I::ARCH) {
        let mut bytes = Vec::with_capacity(I::CIE_LEN);
        write_cie_for::<I>(&mut bytes)?;
        *cie = Some((I::ARCH, bytes));
    }
    Ok(cie.as_ref().map_or(&[], |(_, bytes)| bytes.as_slice()))
}

/// Appends the instruction that gives register rule `rule` (x86-64 registers are below 64,
/// validated by the model).
fn register_rule(rule: &SavedRegister, out: &mut Vec<u8>) {
    let reg = rule.reg as u8;
    match rule.rule {
        RegisterRule::AtCfa(n) => {
            out.u8(dw::DW_CFA_offset.0 | reg);
            // Validated slots are at CFA - 16 and below, multiples of 8.
            out.uleb(u64::from((n / DATA_ALIGN) as u32));
        }
        RegisterRule::InRegister(other) => {
            out.u8(dw::DW_CFA_register.0);
            out.uleb(reg.into());
            out.uleb(other.into());
        }
        RegisterRule::SameValue => {
            out.u8(dw::DW_CFA_same_value.0);
            out.uleb(reg.into());
        }
        RegisterRule::Undefined => {
            out.u8(dw::DW_CFA_undefined.0);
            out.uleb(reg.into());
        }
    }
}

/// The instructions of a function with register rules, from the rules `state` at `loc`:
/// its rows and its register rules in offset order. Registers with rules hold the
/// caller's value until their first rule (the CIE says undefined for callee-saved ones):
/// "same value" at the function's start.
fn rows_and_registers<I: Isa>(
    f: Function,
    rows: &[UnwindRow],
    state: &mut UnwindRow,
    loc: &mut u64,
    out: &mut Vec<u8>,
) {
    let rules = f.register_rules();
    let mut at = Vec::with_capacity(8);
    for (i, r) in rules.iter().enumerate() {
        if r.offset > 0 && !rules[..i].iter().any(|p| p.reg == r.reg) {
            register_rule(
                &SavedRegister {
                    offset: 0,
                    reg: r.reg,
                    rule: RegisterRule::SameValue,
                },
                &mut at,
            );
        }
    }
    let (mut ri, mut gi) = (0, 0);
    while ri < rows.len() || gi < rules.len() {
        let offset = match (rows.get(ri), rules.get(gi)) {
            (Some(r), Some(g)) => r.offset.min(g.offset),
            (Some(r), None) => r.offset,
            (None, Some(g)) => g.offset,
            (None, None) => break,
        };
        if let Some(row) = rows.get(ri).filter(|r| r.offset == offset) {
            let mut step = Small::<TRANSITION>::new();
            transition::<I>(state, row, &mut step);
            step.append_to(&mut at);
            // On aarch64 a change of frame record restates the return address; a rule for
            // x30 in effect overrides the record (`crate::arch::aarch64`): restate it.
            if I::RA_IN_RECORD && state.fp_offset != row.fp_offset {
                let ra = u16::from(I::RA);
                let here = rules[gi..]
                    .iter()
                    .take_while(|g| g.offset == offset)
                    .any(|g| g.reg == ra);
                if let Some(rule) = register_rule_at(rules, ra, offset).filter(|_| !here) {
                    register_rule(
                        &SavedRegister {
                            offset,
                            reg: ra,
                            rule,
                        },
                        &mut at,
                    );
                }
            }
            *state = *row;
            ri += 1;
        }
        while let Some(g) = rules.get(gi).filter(|g| g.offset == offset) {
            register_rule(g, &mut at);
            gi += 1;
        }
        if !at.is_empty() {
            let addr = f.start() + u64::from(offset);
            advance(addr - *loc, out);
            out.extend_from_slice(&at);
            at.clear();
            *loc = addr;
        }
    }
}

/// Encodes the `.debug_frame` section for the functions of `layout` into `parts.frame`.
pub(super) fn debug_frame(arch: Arch, layout: &Layout, parts: &mut Parts) -> Result<()> {
    match (arch, &layout.functions[..]) {
        (Arch::X86_64, [p]) => one_function::<X86_64>(p.f, parts),
        (Arch::X86_64, _) => debug_frame_general::<X86_64>(layout, parts),
        (Arch::Aarch64, [p]) => one_function::<Aarch64>(p.f, parts),
        (Arch::Aarch64, _) => debug_frame_general::<Aarch64>(layout, parts),
    }
}

/// [`debug_frame`] for one function (a runtime registering functions one by one): the CIE
/// and one FDE, without the machinery that shares FDEs between neighbours. Every small
/// registration without a debugger comes here: about 4% of its instructions saved
/// (docs/PERFORMANCE.md section 6); the test `one_function_frames_are_written_as_by_the_general_path`
/// checks it writes what [`debug_frame_general`] writes.
fn one_function<I: Isa>(f: Function, parts: &mut Parts) -> Result<()> {
    let out = &mut parts.frame;
    out.clear();
    out.reserve(64);
    out.extend_from_slice(cie_of::<I>(&mut parts.cie)?);
    let mut rows = Rows {
        of: None,
        rows: &mut parts.rows,
    };
    let (rows, _) = rows.of::<I>(f)?;
    let at = out.len();
    out.u32(0);
    // CIE pointer: the offset of the CIE in the section.
    out.u32(0);
    out.u64(f.start());
    out.u64(f.size().into());
    let (mut state, mut loc) = (I::ENTRY, f.start());
    if !f.register_rules().is_empty() {
        rows_and_registers::<I>(f, rows, &mut state, &mut loc, out);
        return finish_entry(out, at);
    }
    for row in rows {
        let mut step = Small::<TRANSITION>::new();
        transition::<I>(&state, row, &mut step);
        if step.len() > 0 {
            let addr = f.start() + u64::from(row.offset);
            advance(addr - loc, out);
            step.append_to(out);
            loc = addr;
        }
        state = *row;
    }
    finish_entry(out, at)
}

/// [`debug_frame`] for any number of functions.
fn debug_frame_general<I: Isa>(layout: &Layout, parts: &mut Parts) -> Result<()> {
    let Parts {
        frame: out,
        cie,
        rows,
        first_rows,
        repeat_rows,
        repeat_bytes,
    } = parts;
    let functions = &layout.functions;
    out.clear();
    // Benchmark shape: about 13 bytes of instructions per function plus a shared header.
    out.reserve(32 + functions.len() * 16 + functions.len() / 2);

    // The CIE, at offset 0 (made once per thread).
    out.extend_from_slice(cie_of::<I>(cie)?);
    let entry = I::ENTRY;

    let mut rows = Rows { of: None, rows };
    // For the first functions of FDEs, and for the others.
    let [rows_first, rows_other] = repeat_rows;
    let [bytes_first, bytes_other] = repeat_bytes;
    let mut repeats =
        [(rows_first, bytes_first), (rows_other, bytes_other)].map(|(rows, bytes)| {
            rows.clear();
            bytes.clear();
            Repeat {
                key: None,
                rows,
                rows_are_previous: false,
                bytes,
                short: [0; SHORT],
                advanced: 0,
            }
        });
    // Rows of the open FDE's first function.
    first_rows.clear();
    let mut open: Option<Fde> = None;
    for (i, p) in functions.iter().enumerate() {
        let f = p.f;
        // The usual function first: what the general case below does when the function
        // repeats the previous one (same frame and size) in its FDE, not the FDE's first,
        // after the same distance: copy the instructions, the rules stay.
        if let (Some(fde), Some((frame, size)), [_, repeat]) = (&mut open, rows.of, &repeats) {
            if fde.functions > 0
                && fde.functions < FDE_FUNCTIONS
                && f.start() - fde.end <= MAX_PADDING
                && f.end() - fde.start <= u64::from(u32::MAX)
                && size == f.size()
                && repeat.rows_are_previous
                && repeat.key == Some((fde.state, f.start() - fde.loc, true))
                && same_frame(frame, f.frame())
                && f.register_rules().is_empty()
            {
                if fde.functions == 1 {
                    out.insert(fde.body, dw::DW_CFA_remember_state.0);
                }
                repeat.append(out);
                fde.loc += repeat.advanced;
                fde.functions += 1;
                fde.end = f.end();
                continue;
            }
        }
        // Rows the same as the previous function's (which is in the open FDE) match the
        // FDE's first function as the previous function's did.
        let (rows, same) = rows.of::<I>(f)?;
        // Neighbours share an FDE (the padding between them, never executed, gets the
        // rules of the function before it) if their rules match the first function's.
        // One FDE spans at most u32::MAX bytes, so every advance fits DW_CFA_advance_loc4.
        // A function with register rules has an FDE of its own: the rules it leaves in
        // effect are not its neighbours'.
        let has_registers = !f.register_rules().is_empty();
        let joins = !has_registers
            && open.as_ref().is_some_and(|fde| {
                fde.functions < FDE_FUNCTIONS
                    && f.start() - fde.end <= MAX_PADDING
                    && f.end() - fde.start <= u64::from(u32::MAX)
                    && (same || same_by_offset(first_rows, fde.first_size, rows, f.size()))
            });
        let fde = match open.as_mut() {
            Some(fde) if joins => {
                if fde.functions == 1 {
                    // Keeps the entry state for `DW_CFA_restore_state` at the functions
                    // after the first.
                    out.insert(fde.body, dw::DW_CFA_remember_state.0);
                }
                fde
            }
            _ => {
                if let Some(fde) = open.take() {
                    fde.finish(out)?;
                }
                first_rows.clear();
                // (Only functions after this one look at them.)
                if i + 1 < functions.len() {
                    first_rows.extend_from_slice(rows);
                }
                let at = out.len();
                out.u32(0);
                // CIE pointer: the offset of the CIE in the section.
                out.u32(0);
                out.u64(f.start());
                // The length, patched by `Fde::finish`.
                out.u64(0);
                open.insert(Fde {
                    at,
                    body: out.len(),
                    start: f.start(),
                    end: f.end(),
                    first_size: f.size(),
                    functions: 0,
                    state: entry,
                    loc: f.start(),
                })
            }
        };
        if has_registers {
            rows_and_registers::<I>(f, rows, &mut fde.state, &mut fde.loc, out);
            // Nothing joins this FDE, and the repeats compare rows again.
            fde.functions = FDE_FUNCTIONS;
            fde.end = f.end();
            for r in &mut repeats {
                r.rows_are_previous = false;
            }
            continue;
        }
        let key = (fde.state, f.start() - fde.loc, fde.functions > 0);
        let (repeat, other) = match &mut repeats {
            [first, other] if !key.2 => (first, other),
            [other, rest] => (rest, other),
        };
        // The other's rows are still the previous function's if this one's are too.
        other.rows_are_previous &= same;
        if repeat.key == Some(key) && ((same && repeat.rows_are_previous) || **repeat.rows == *rows)
        {
            repeat.rows_are_previous = true;
            repeat.append(out);
            fde.loc += repeat.advanced;
            if let Some(last) = rows.last() {
                fde.state = *last;
            }
        } else {
            let (begin, loc) = (out.len(), fde.loc);
            for (n, row) in rows.iter().enumerate() {
                let mut step = Small::<TRANSITION>::new();
                transition::<I>(&fde.state, row, &mut step);
                if n == 0 && fde.functions > 0 {
                    // Either from the previous function's last rules, or back to the entry
                    // state (and keep it again) and from there: whichever is shorter.
                    let mut reset = Small::<TRANSITION>::new();
                    reset.u8(dw::DW_CFA_restore_state.0);
                    reset.u8(dw::DW_CFA_remember_state.0);
                    transition::<I>(&entry, row, &mut reset);
                    if reset.len() < step.len() {
                        step = reset;
                    }
                }
                if step.len() > 0 {
                    let addr = f.start() + u64::from(row.offset);
                    advance(addr - fde.loc, out);
                    step.append_to(out);
                    fde.loc = addr;
                }
                fde.state = *row;
            }
            // (Nothing follows the last function: nothing to keep.)
            if i + 1 < functions.len() {
                repeat.key = Some(key);
                repeat.rows.clear();
                repeat.rows.extend_from_slice(rows);
                repeat.rows_are_previous = true;
                repeat.bytes.clear();
                repeat.bytes.extend_from_slice(&out[begin..]);
                if let Some(short) = repeat.short.get_mut(..repeat.bytes.len()) {
                    short.copy_from_slice(repeat.bytes);
                }
                repeat.advanced = fde.loc - loc;
            }
        }
        fde.functions += 1;
        fde.end = f.end();
    }
    if let Some(fde) = open {
        fde.finish(out)?;
    }
    Ok(())
}

/// The instructions written for a function's rows, written again as they are for the next
/// function that enters with the same rules, at the same distance from the location
/// reached, with the same rows: neighbours compiled alike cost a copy. There are two: for
/// the first functions of FDEs, and for the others, so that each FDE's first two functions
/// repeat those of the FDE before.
struct Repeat<'p> {
    /// The rules entered with, the distance from the location reached to the function's
    /// start, and whether the function was not its FDE's first.
    key: Option<(UnwindRow, u64, bool)>,
    rows: &'p mut Vec<UnwindRow>,
    /// Are `rows` those of the function before the current one? (Then a function with the
    /// same rows as that one has them: no comparison.)
    rows_are_previous: bool,
    bytes: &'p mut Vec<u8>,
    /// The start of `bytes`: all of them if they are [`SHORT`] or fewer, the usual case.
    short: [u8; SHORT],
    /// How far the instructions moved the location.
    advanced: u64,
}

impl Repeat<'_> {
    /// Appends the instructions to `out`.
    #[inline]
    fn append(&self, out: &mut Vec<u8>) {
        if self.bytes.len() <= SHORT {
            extend_small(out, &self.short, self.bytes.len());
        } else {
            out.extend_from_slice(self.bytes);
        }
    }
}

/// See [`Repeat::short`].
const SHORT: usize = 32;

/// The FDE being written.
struct Fde {
    /// Offset of its length field in the section.
    at: usize,
    /// Offset of its first instruction.
    body: usize,
    start: u64,
    /// End of its last function so far.
    end: u64,
    /// Size of its first function.
    first_size: u32,
    functions: usize,
    /// The rules at `loc`, the address the instructions have reached.
    state: UnwindRow,
    loc: u64,
}

impl Fde {
    fn finish(self, out: &mut Vec<u8>) -> Result<()> {
        let range = (self.end - self.start).to_le_bytes();
        out[self.at + 16..self.at + 24].copy_from_slice(&range);
        finish_entry(out, self.at)
    }
}

/// Do the rules of a function of `size` bytes with `rows` match, at each of its offsets,
/// those of the FDE's first function (`first`, `first_size` bytes) at the same offset?
///
/// LLDB (14) reads an FDE's rules by offset from the FDE's start but looks them up by
/// offset from the function's start: only functions for which both give the same answer
/// may share one.
fn same_by_offset(first: &[UnwindRow], first_size: u32, rows: &[UnwindRow], size: u32) -> bool {
    size <= first_size && {
        let n = first.partition_point(|r| r.offset < size);
        first[..n] == *rows
    }
}

#[cfg(test)]
mod tests {
    use gimli::{BaseAddresses, CfaRule, RegisterRule, UnwindContext, UnwindSection};

    use super::FDE_FUNCTIONS;
    use crate::elf::test_support::Parsed;
    use crate::model::{CfaBase, JitObject, UnwindRow};

    type Rule = Option<RegisterRule<usize>>;

    /// Expected rules (see `rule_at`) of a frame-pointer function: at its entry (and after
    /// its epilogue), after `push rbp`, and once rbp is the frame pointer.
    const ENTRY: (u16, i64, Rule, Rule) = (
        7,
        8,
        Some(RegisterRule::SameValue),
        Some(RegisterRule::Offset(-8)),
    );
    const PUSHED: (u16, i64, Rule, Rule) = (
        7,
        16,
        Some(RegisterRule::Offset(-16)),
        Some(RegisterRule::Offset(-8)),
    );
    const FRAMED: (u16, i64, Rule, Rule) = (
        6,
        16,
        Some(RegisterRule::Offset(-16)),
        Some(RegisterRule::Offset(-8)),
    );

    /// The unwind rule at `addr`: (CFA register, CFA offset, rule for rbp, rule for rip).
    fn rule_at(p: &Parsed, addr: u64) -> (u16, i64, Rule, Rule) {
        let frame = gimli::DebugFrame::new(p.section(".debug_frame"), gimli::LittleEndian);
        let mut frame = frame;
        frame.set_address_size(8);
        let bases = BaseAddresses::default();
        let mut ctx = UnwindContext::new();
        let row = frame
            .unwind_info_for_address(&bases, &mut ctx, addr, gimli::DebugFrame::cie_from_offset)
            .unwrap_or_else(|e| panic!("no unwind row at {addr:#x}: {e}"));
        let CfaRule::RegisterAndOffset { register, offset } = *row.cfa() else {
            panic!("CFA is an expression")
        };
        (
            register.0,
            offset,
            row.register(gimli::Register(crate::arch::x86_64::RBP)),
            row.register(gimli::Register(crate::arch::x86_64::RIP)),
        )
    }

    /// The rule for register `reg` at `addr`.
    fn reg_rule_at(p: &Parsed, addr: u64, reg: u16) -> Rule {
        let mut frame = gimli::DebugFrame::new(p.section(".debug_frame"), gimli::LittleEndian);
        frame.set_address_size(8);
        let bases = BaseAddresses::default();
        let mut ctx = UnwindContext::new();
        let row = frame
            .unwind_info_for_address(&bases, &mut ctx, addr, gimli::DebugFrame::cie_from_offset)
            .unwrap_or_else(|e| panic!("no unwind row at {addr:#x}: {e}"));
        row.register(gimli::Register(reg))
    }

    #[test]
    fn register_rules_and_the_undefined_default() {
        use crate::arch::x86_64::{R12, R13, R14, RBX};
        use crate::model::RegisterRule as R;
        // Functions alike before and after one that saves r12 and r13: a run of FDEs, with
        // the saver's its own.
        for count in [1usize, 3, 5] {
            let mut o = JitObject::new();
            let base = 0x7000_2000u64;
            let saver = count / 2;
            for i in 0..count {
                let f = o
                    .add_function(&format!("f{i}"), base + 32 * i as u64, 32)
                    .unwrap();
                o.set_frame_pointer(f, 1, 4).unwrap();
                o.add_epilogue(f, 30, 31).unwrap();
                if i == saver {
                    // push r12 ends at 6, push r13 at 8; r13 moved to rbx at 20; pops at 26..
                    o.add_register_rule(f, 6, R12, R::AtCfa(-24)).unwrap();
                    o.add_register_rule(f, 8, R13, R::AtCfa(-32)).unwrap();
                    o.add_register_rule(f, 20, R13, R::InRegister(RBX)).unwrap();
                    o.add_register_rule(f, 26, R12, R::SameValue).unwrap();
                    o.add_register_rule(f, 26, R14, R::Undefined).unwrap();
                    o.add_register_rule(f, 28, R13, R::SameValue).unwrap();
                }
            }
            let p = Parsed::encode(&o);
            let at = |i: usize, off: u64| base + 32 * i as u64 + off;
            for i in 0..count {
                // The rows are as without rules.
                assert_eq!(rule_at(&p, at(i, 0)), ENTRY, "f{i}");
                assert_eq!(rule_at(&p, at(i, 10)), FRAMED, "f{i}");
                assert_eq!(rule_at(&p, at(i, 30)), ENTRY, "f{i}");
                if i != saver {
                    for reg in [RBX, R12, R13, R14] {
                        assert_eq!(
                            reg_rule_at(&p, at(i, 10), reg),
                            Some(RegisterRule::Undefined),
                            "f{i}: an undescribed callee-saved register"
                        );
                    }
                    continue;
                }
                let r = |off, reg| reg_rule_at(&p, at(i, off), reg);
                // Before its first rule a described register is the caller's.
                assert_eq!(r(0, R12), Some(RegisterRule::SameValue));
                assert_eq!(r(5, R13), Some(RegisterRule::SameValue));
                assert_eq!(r(6, R12), Some(RegisterRule::Offset(-24)));
                assert_eq!(r(8, R13), Some(RegisterRule::Offset(-32)));
                assert_eq!(r(19, R13), Some(RegisterRule::Offset(-32)));
                assert_eq!(
                    r(20, R13),
                    Some(RegisterRule::Register(gimli::Register(RBX)))
                );
                assert_eq!(r(26, R12), Some(RegisterRule::SameValue));
                // r14 has a rule from 26 on: before it, the caller's value.
                assert_eq!(r(25, R14), Some(RegisterRule::SameValue));
                assert_eq!(r(26, R14), Some(RegisterRule::Undefined));
                assert_eq!(r(31, R13), Some(RegisterRule::SameValue));
                assert_eq!(r(10, RBX), Some(RegisterRule::Undefined));
            }
        }
    }

    /// Objects of neighbours with and without rules, in both writer paths: at every offset
    /// of every function, the CFI gives each callee-saved register the model's rule (the
    /// caller's value before its first rule, undefined without rules) and the rows as
    /// without rules.
    #[test]
    fn register_rules_at_every_offset_of_random_neighbours() {
        use crate::arch::x86_64::CALLEE_SAVED;
        use crate::model::{register_rule_at, RegisterRule as R};
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..60 {
            let count = 1 + next(6);
            let mut o = JitObject::new();
            let mut plain = JitObject::new();
            let mut at = 0x7100_0000u64;
            for i in 0..count {
                let size = 16 + next(40) as u32;
                let f = o.add_function(&format!("f{i}"), at, size.into()).unwrap();
                let g = plain
                    .add_function(&format!("f{i}"), at, size.into())
                    .unwrap();
                if next(2) == 0 {
                    for (obj, id) in [(&mut o, f), (&mut plain, g)] {
                        obj.set_frame_pointer(id, 1, 4).unwrap();
                        obj.add_epilogue(id, size - 2, size - 1).unwrap();
                    }
                }
                if next(2) == 0 {
                    let mut off = 0;
                    for _ in 0..1 + next(5) {
                        off = (off + next(8) as u32).min(size - 1);
                        let reg = CALLEE_SAVED[next(5) as usize];
                        let rule = match next(4) {
                            0 => R::AtCfa(-16 - 8 * next(4) as i32),
                            1 => R::InRegister(next(6) as u16),
                            2 => R::SameValue,
                            _ => R::Undefined,
                        };
                        let _ = o.add_register_rule(f, off, reg, rule);
                    }
                }
                at += u64::from(size) + next(3) * 8;
            }
            let (p, q) = (Parsed::encode(&o), Parsed::encode(&plain));
            for (f, g) in o.functions().iter().zip(plain.functions().iter()) {
                let rules = f.register_rules();
                for off in 0..f.size() {
                    let addr = f.start() + u64::from(off);
                    assert_eq!(
                        rule_at(&p, addr),
                        rule_at(&q, addr),
                        "round {round} {}+{off}",
                        g.name()
                    );
                    for reg in CALLEE_SAVED {
                        let want = match register_rule_at(rules, reg, off) {
                            None if rules.iter().any(|r| r.reg == reg) => RegisterRule::SameValue,
                            None => RegisterRule::Undefined,
                            Some(R::AtCfa(n)) => RegisterRule::Offset(n.into()),
                            Some(R::InRegister(r)) => RegisterRule::Register(gimli::Register(r)),
                            Some(R::SameValue) => RegisterRule::SameValue,
                            Some(R::Undefined) => RegisterRule::Undefined,
                        };
                        assert_eq!(
                            reg_rule_at(&p, addr, reg),
                            Some(want),
                            "round {round} {}+{off} reg {reg}",
                            f.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn frame_pointer_function_unwinds_at_every_stage() {
        let mut o = JitObject::new();
        // push rbp (1) ; mov rbp,rsp (3) ; body ; pop rbp at 12 ; ret at 13 ; more code ; pop ; ret
        let f = o.add_function("fp", 0x7000_1000, 24).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 13, 14).unwrap();
        o.add_epilogue(f, 22, 23).unwrap();
        let p = Parsed::encode(&o);
        let base = 0x7000_1000;
        let entry = ENTRY;
        let pushed = PUSHED;
        let framed = FRAMED;
        assert_eq!(rule_at(&p, base), entry, "first instruction");
        assert_eq!(rule_at(&p, base + 1), pushed, "after push rbp");
        assert_eq!(rule_at(&p, base + 3), pushed, "inside mov rbp, rsp");
        assert_eq!(rule_at(&p, base + 4), framed, "body");
        assert_eq!(rule_at(&p, base + 12), framed, "at pop rbp");
        assert_eq!(rule_at(&p, base + 13), entry, "at ret");
        assert_eq!(
            rule_at(&p, base + 14),
            framed,
            "code after the first epilogue"
        );
        assert_eq!(rule_at(&p, base + 22), entry, "second ret");
        assert_eq!(
            rule_at(&p, base + 23),
            framed,
            "code after the second epilogue"
        );
    }

    #[test]
    fn default_and_explicit_rows() {
        let mut o = JitObject::new();
        o.add_function("default", 0x1000, 8).unwrap();
        let g = o.add_function("frameless", 0x1008, 40).unwrap();
        // sub rsp, 24 at 0..4 ; push rbx at 10 ; pops ; ret
        let rows = [
            UnwindRow::X86_64_ENTRY,
            UnwindRow {
                offset: 4,
                cfa_base: CfaBase::Sp,
                cfa_offset: 32,
                fp_offset: 0,
            },
            UnwindRow {
                offset: 10,
                cfa_base: CfaBase::Sp,
                cfa_offset: 48,
                fp_offset: -48,
            },
            UnwindRow {
                offset: 30,
                ..UnwindRow::X86_64_ENTRY
            },
        ];
        o.set_unwind(g, &rows).unwrap();
        let p = Parsed::encode(&o);
        let framed = FRAMED;
        assert_eq!(rule_at(&p, 0x1000), framed);
        assert_eq!(rule_at(&p, 0x1007), framed);
        assert_eq!(rule_at(&p, 0x1008).1, 8);
        assert_eq!(
            rule_at(&p, 0x1008 + 5),
            (
                7,
                32,
                Some(RegisterRule::SameValue),
                Some(RegisterRule::Offset(-8))
            )
        );
        assert_eq!(
            rule_at(&p, 0x1008 + 29),
            (
                7,
                48,
                Some(RegisterRule::Offset(-48)),
                Some(RegisterRule::Offset(-8))
            )
        );
        assert_eq!(
            rule_at(&p, 0x1008 + 30),
            (
                7,
                8,
                Some(RegisterRule::SameValue),
                Some(RegisterRule::Offset(-8))
            )
        );
        // Exactly one CIE, one FDE per function (their rules differ), nothing outside the
        // functions.
        let frame = gimli::DebugFrame::new(p.section(".debug_frame"), gimli::LittleEndian);
        let bases = BaseAddresses::default();
        let mut entries = frame.entries(&bases);
        let (mut cies, mut fdes) = (0, 0);
        while let Some(e) = entries.next().unwrap() {
            match e {
                gimli::CieOrFde::Cie(_) => cies += 1,
                gimli::CieOrFde::Fde(_) => fdes += 1,
            }
        }
        assert_eq!((cies, fdes), (1, 2));
        let mut ctx = UnwindContext::new();
        let mut frame = frame;
        frame.set_address_size(8);
        assert!(frame
            .unwind_info_for_address(
                &BaseAddresses::default(),
                &mut ctx,
                0x1008 + 40,
                gimli::DebugFrame::cie_from_offset
            )
            .is_err());
    }

    /// (CIEs, FDEs) and each FDE's (start, length).
    fn entries(p: &Parsed) -> (usize, Vec<(u64, u64)>) {
        let frame = gimli::DebugFrame::new(p.section(".debug_frame"), gimli::LittleEndian);
        let bases = BaseAddresses::default();
        let mut entries = frame.entries(&bases);
        let (mut cies, mut fdes) = (0, Vec::new());
        while let Some(e) = entries.next().unwrap() {
            match e {
                gimli::CieOrFde::Cie(_) => cies += 1,
                gimli::CieOrFde::Fde(partial) => {
                    let fde = partial.parse(gimli::DebugFrame::cie_from_offset).unwrap();
                    fdes.push((fde.initial_address(), fde.len()));
                }
            }
        }
        (cies, fdes)
    }

    /// Neighbours whose rules match by offset share FDEs of up to FDE_FUNCTIONS functions;
    /// different rules, a longer function or a gap wider than alignment padding start a new
    /// one. Every function still unwinds from its first instruction on, whatever the
    /// function before it left.
    #[test]
    fn neighbours_share_fdes() {
        let k = FDE_FUNCTIONS as u64;
        let base = 0x10_0000;
        let mut o = JitObject::new();
        // (start, size, ends with an epilogue)
        let mut functions = Vec::new();
        // k + 1 alike (60 bytes of code, 4 of padding), keeping the frame to their end.
        for i in 0..=k {
            functions.push((base + i * 64, 60, false));
        }
        // A shorter one with the same rules; a longer one; one with an epilogue; the same
        // after a gap.
        let next = base + (k + 1) * 64;
        functions.push((next, 40, false));
        functions.push((next + 48, 70, false));
        functions.push((next + 128, 60, true));
        functions.push((next + 0x1000, 60, true));
        for (i, &(start, size, epilogue)) in functions.iter().enumerate() {
            let f = o.add_function(&format!("f{i}"), start, size).unwrap();
            o.set_frame_pointer(f, 1, 4).unwrap();
            if epilogue {
                o.add_epilogue(f, size as u32 - 1, size as u32).unwrap();
            }
        }
        let p = Parsed::encode(&o);
        let (cies, fdes) = entries(&p);
        assert_eq!(cies, 1);
        assert_eq!(
            fdes,
            [
                (base, k * 64 - 4),
                (base + k * 64, 64 + 40),
                (next + 48, 70),
                (next + 128, 60),
                (next + 0x1000, 60),
            ]
        );
        let entry = ENTRY;
        let framed = FRAMED;
        let pushed = PUSHED;
        for (i, &(start, size, epilogue)) in functions.iter().enumerate() {
            assert_eq!(rule_at(&p, start), entry, "f{i} entry");
            assert_eq!(rule_at(&p, start + 1), pushed, "f{i} after push rbp");
            assert_eq!(rule_at(&p, start + 4), framed, "f{i} body");
            let end = if epilogue { &entry } else { &framed };
            assert_eq!(&rule_at(&p, start + size - 1), end, "f{i} last byte");
        }
    }

    /// Functions alike around one with explicit rows: each gets its own rules (the
    /// instructions of one function are reused for the next only when they fit it).
    #[test]
    fn explicit_rows_between_alike_functions() {
        let mut o = JitObject::new();
        let rows = [
            UnwindRow::X86_64_ENTRY,
            UnwindRow {
                offset: 4,
                cfa_base: CfaBase::Sp,
                cfa_offset: 32,
                fp_offset: 0,
            },
        ];
        for i in 0..6u64 {
            let f = o
                .add_function(&format!("f{i}"), 0x2000 + 32 * i, 32)
                .unwrap();
            if i == 2 || i == 3 {
                o.set_unwind(f, &rows).unwrap();
            } else {
                o.set_frame_pointer(f, 1, 4).unwrap();
            }
        }
        let p = Parsed::encode(&o);
        for i in 0..6u64 {
            let start = 0x2000 + 32 * i;
            assert_eq!(rule_at(&p, start).1, 8, "f{i} entry");
            let (reg, offset, _, _) = rule_at(&p, start + 8);
            if i == 2 || i == 3 {
                assert_eq!((reg, offset), (7, 32), "f{i} body: rsp + 32");
            } else {
                assert_eq!((reg, offset), (6, 16), "f{i} body: rbp + 16");
                assert_eq!(rule_at(&p, start + 1).1, 16, "f{i} after push rbp");
            }
        }
    }

    /// Neighbours with frames of a few kinds, mixed at random (so that FDEs start with
    /// functions alike or not, and repeated instructions are and are not reused): at every
    /// instruction, the rules are those of the function's rows.
    #[test]
    fn mixed_neighbours_unwind_by_their_own_rows() {
        let explicit = [
            UnwindRow::X86_64_ENTRY,
            UnwindRow {
                offset: 4,
                cfa_base: CfaBase::Sp,
                cfa_offset: 32,
                fp_offset: -16,
            },
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..20 {
            let mut o = JitObject::new();
            let mut at = 0x10_0000;
            // Runs of functions of one kind, of several sizes.
            let (mut kind, mut run) = (0, 0);
            for i in 0..100 {
                if run == 0 {
                    (kind, run) = (next(6), 1 + next(40));
                }
                run -= 1;
                // Size 11: the epilogue ends the function, which then shares an FDE with
                // larger ones that go on after it.
                let size = [11, 11, 24, 40][next(4) as usize];
                let f = o.add_function(&format!("f{i}"), at, size).unwrap();
                match kind {
                    0 => {}
                    1 => o.set_unwind(f, &explicit).unwrap(),
                    2 => o.set_frame_pointer(f, 1, 1).unwrap(),
                    3 | 4 => {
                        o.set_frame_pointer(f, 1, 4).unwrap();
                        o.add_epilogue(f, 10, 11).unwrap();
                    }
                    _ => o.set_frame_pointer(f, 1, 4).unwrap(),
                }
                at += size + [0, 0, 0, 5][next(4) as usize];
            }
            let p = Parsed::encode(&o);
            for f in o.functions() {
                let rows = f.frame().rows(o.arch(), f.size().into());
                for offset in 0..f.size() {
                    let r = rows.iter().rev().find(|r| r.offset <= offset).unwrap();
                    let want = (
                        match r.cfa_base {
                            CfaBase::Sp => 7,
                            CfaBase::Fp => 6,
                        },
                        i64::from(r.cfa_offset),
                        Some(match r.fp_offset {
                            0 => RegisterRule::SameValue,
                            o => RegisterRule::Offset(o.into()),
                        }),
                        Some(RegisterRule::Offset(-8)),
                    );
                    let addr = f.start() + u64::from(offset);
                    assert_eq!(rule_at(&p, addr), want, "{} at {offset}", f.name());
                }
            }
        }
    }

    /// Advances of every width (1, 2 and 4 bytes).
    /// One function's `.debug_frame` is written without the FDE-sharing machinery: byte for
    /// byte what that machinery writes for it.
    #[test]
    fn one_function_frames_are_written_as_by_the_general_path() {
        use crate::elf::layout::{Layout, Parts as LayoutParts};
        use crate::model::Arch;
        let (mut fast, mut general) = (super::Parts::default(), super::Parts::default());
        let mut checked = 0;
        for seed in 0..300u64 {
            for o in crate::elf::test_support::random_objects(seed) {
                for f in o.functions() {
                    // The function alone, with its frame description.
                    let mut one = JitObject::new();
                    let g = one
                        .add_function(f.name(), f.start(), f.size().into())
                        .unwrap();
                    let described = match f.frame() {
                        crate::model::Frame::Rows(rows) => one.set_unwind(g, rows).is_ok(),
                        crate::model::Frame::FramePointer {
                            push_end,
                            setup_end,
                            epilogues,
                        } => {
                            one.set_frame_pointer(g, *push_end, *setup_end).unwrap();
                            for e in epilogues.iter() {
                                one.add_epilogue(g, e.restore_end, e.ret_end).unwrap();
                            }
                            true
                        }
                        _ => true,
                    };
                    if !described {
                        continue;
                    }
                    let mut lp = LayoutParts::default();
                    let layout =
                        Layout::new(&[&one], &mut lp, super::super::layout::Spans::Padding)
                            .unwrap();
                    let got = super::debug_frame(Arch::X86_64, &layout, &mut fast);
                    let want = super::debug_frame_general::<super::X86_64>(&layout, &mut general);
                    assert_eq!(got, want, "seed {seed}");
                    assert_eq!(fast.frame, general.frame, "seed {seed}: {}", f.name());
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    #[test]
    fn large_functions_advance_far() {
        let mut o = JitObject::new();
        let size = 1u32 << 20;
        let f = o.add_function("big", 0x7000_0000, size.into()).unwrap();
        o.set_frame_pointer(f, 1, 200).unwrap();
        o.add_epilogue(f, 70_000, 70_001).unwrap();
        o.add_epilogue(f, size - 1, size).unwrap();
        let p = Parsed::encode(&o);
        let base = 0x7000_0000;
        let pushed = PUSHED;
        let framed = FRAMED;
        let entry = ENTRY;
        assert_eq!(rule_at(&p, base + 199), pushed);
        assert_eq!(rule_at(&p, base + 200), framed);
        assert_eq!(rule_at(&p, base + 69_999), framed);
        assert_eq!(rule_at(&p, base + 70_000), entry);
        assert_eq!(rule_at(&p, base + 70_001), framed);
        assert_eq!(rule_at(&p, base + u64::from(size) - 2), framed);
        assert_eq!(rule_at(&p, base + u64::from(size) - 1), entry);
    }

    /// Every rule gimli reads at `addr` for the aarch64 registers that matter: (CFA
    /// register, CFA offset, x29, x30, x19, x20).
    fn aarch64_rules_at(p: &Parsed, addr: u64) -> (u16, i64, Rule, Rule, Rule, Rule) {
        use crate::arch::aarch64::{X19, X29, X30};
        let mut frame = gimli::DebugFrame::new(p.section(".debug_frame"), gimli::LittleEndian);
        frame.set_address_size(8);
        let bases = BaseAddresses::default();
        let mut ctx = UnwindContext::new();
        let row = frame
            .unwind_info_for_address(&bases, &mut ctx, addr, gimli::DebugFrame::cie_from_offset)
            .unwrap_or_else(|e| panic!("no unwind row at {addr:#x}: {e}"));
        let CfaRule::RegisterAndOffset { register, offset } = *row.cfa() else {
            panic!("CFA is an expression")
        };
        let reg = |r: u16| row.register(gimli::Register(r));
        (
            register.0,
            offset,
            reg(X29),
            reg(X30),
            reg(X19),
            reg(X19 + 1),
        )
    }

    /// What the model says the rules of an aarch64 function are at `offset`, in the shape
    /// of [`aarch64_rules_at`]: the frame record places x29 and x30 (x30 in its register
    /// while none is saved), a register rule for x30 overrides the record, x19 and x20 are
    /// undefined without rules and the caller's before their first.
    fn aarch64_model_rules(
        f: &crate::model::Function,
        offset: u32,
    ) -> (u16, i64, Rule, Rule, Rule, Rule) {
        use crate::arch::aarch64::{X19, X30};
        use crate::model::{register_rule_at, Arch, RegisterRule as M};
        let rows = f.frame().rows(Arch::Aarch64, f.size().into());
        let row = rows[rows.partition_point(|r| r.offset <= offset) - 1];
        let slot = |n: i32| Some(RegisterRule::Offset(n.into()));
        let (x29, record_ra) = match row.fp_offset {
            0 => (Some(RegisterRule::SameValue), Some(RegisterRule::SameValue)),
            n => (slot(n), slot(n + 8)),
        };
        let rules = f.register_rules();
        let described = |reg: u16, default: Rule| {
            let Some(first) = rules.iter().find(|r| r.reg == reg) else {
                return default;
            };
            match register_rule_at(rules, reg, offset) {
                None => {
                    let _ = first;
                    Some(RegisterRule::SameValue)
                }
                Some(M::AtCfa(n)) => slot(n),
                Some(M::InRegister(r)) => Some(RegisterRule::Register(gimli::Register(r))),
                Some(M::SameValue) => Some(RegisterRule::SameValue),
                Some(M::Undefined) => Some(RegisterRule::Undefined),
            }
        };
        // x30 before its first rule: the record's rule (the frame rows say where it is).
        let x30 = if register_rule_at(rules, X30, offset).is_some() {
            described(X30, record_ra)
        } else {
            record_ra
        };
        let base = match row.cfa_base {
            CfaBase::Sp => crate::arch::aarch64::SP,
            CfaBase::Fp => crate::arch::aarch64::X29,
        };
        (
            base,
            row.cfa_offset.into(),
            x29,
            x30,
            described(X19, Some(RegisterRule::Undefined)),
            described(X19 + 1, Some(RegisterRule::Undefined)),
        )
    }

    /// aarch64 objects: EM_AARCH64 CFI (RA column 30, CFA = sp + 0 at entry), read back by
    /// gimli at every offset of every function, alone (the one-function path) and together
    /// (shared FDEs), equal to the model's rules.
    #[test]
    fn aarch64_cfi_round_trips_at_every_offset() {
        use crate::arch::aarch64::{X19, X30};
        use crate::model::{Arch, RegisterRule as M};
        let base = 0x4000_1000u64;
        let mut o = JitObject::with_arch(Arch::Aarch64);
        // stp x29, x30, [sp, #-16]!; mov x29, sp; ...; ldp x29, x30, [sp], #16; ret;
        // more code; ldp; ret.
        let fp = o.add_function("fp", base, 48).unwrap();
        o.set_frame_pointer(fp, 4, 8).unwrap();
        o.add_epilogue(fp, 24, 28).unwrap();
        o.add_epilogue(fp, 44, 48).unwrap();
        // Described by nothing: the canonical frame everywhere.
        o.add_function("default", base + 48, 16).unwrap();
        // A leaf: sub sp, sp, #32; ...; add sp, sp, #32; ret. x30 stays in its register.
        let leaf = o.add_function("leaf", base + 64, 16).unwrap();
        let sp_row = |offset, cfa_offset| UnwindRow {
            offset,
            cfa_base: CfaBase::Sp,
            cfa_offset,
            fp_offset: 0,
        };
        o.set_unwind(leaf, &[sp_row(0, 0), sp_row(4, 32), sp_row(12, 0)])
            .unwrap();
        // GCC's shape: stp x29, x30, [sp, #-48]!; mov x29, sp; stp x19, x20, [sp, #16];
        // ...; ldp x19, x20, [sp, #16]; ldp x29, x30, [sp], #48; ret.
        let gcc = o.add_function("gcc", base + 80, 32).unwrap();
        let row = |offset, cfa_base, cfa_offset, fp_offset| UnwindRow {
            offset,
            cfa_base,
            cfa_offset,
            fp_offset,
        };
        o.set_unwind(
            gcc,
            &[
                row(0, CfaBase::Sp, 0, 0),
                row(4, CfaBase::Sp, 48, -48),
                row(8, CfaBase::Fp, 48, -48),
                row(28, CfaBase::Sp, 0, 0),
            ],
        )
        .unwrap();
        o.add_register_rule(gcc, 12, X19, M::AtCfa(-32)).unwrap();
        o.add_register_rule(gcc, 12, X19 + 1, M::AtCfa(-24))
            .unwrap();
        o.add_register_rule(gcc, 24, X19, M::SameValue).unwrap();
        o.add_register_rule(gcc, 24, X19 + 1, M::SameValue).unwrap();
        // A leaf that saves only the link register: str x30, [sp, #-16]!; bl ...;
        // ldr x30, [sp], #16; ret. Its x30 rule moves the return address.
        let lr = o.add_function("lr_only", base + 112, 20).unwrap();
        o.set_unwind(lr, &[sp_row(0, 0), sp_row(4, 16), sp_row(12, 0)])
            .unwrap();
        o.add_register_rule(lr, 4, X30, M::AtCfa(-16)).unwrap();
        o.add_register_rule(lr, 12, X30, M::SameValue).unwrap();
        // A frame-record function whose x30 is moved to x9 after the record (a rule
        // that outlives the record: restated where the record goes).
        let moved = o.add_function("moved", base + 132, 24).unwrap();
        o.set_frame_pointer(moved, 4, 8).unwrap();
        o.add_epilogue(moved, 16, 20).unwrap();
        o.add_register_rule(moved, 12, X30, M::InRegister(9))
            .unwrap();

        let whole = Parsed::encode(&o);
        assert_eq!(
            object::Object::architecture(&whole.file()),
            object::Architecture::Aarch64
        );
        let mut checked = 0;
        for f in o.functions().iter() {
            let mut alone = JitObject::with_arch(Arch::Aarch64);
            let g = alone
                .add_function(f.name(), f.start(), f.size().into())
                .unwrap();
            match f.frame() {
                crate::model::Frame::Rows(rows) => alone.set_unwind(g, rows).unwrap(),
                crate::model::Frame::FramePointer {
                    push_end,
                    setup_end,
                    epilogues,
                } => {
                    alone.set_frame_pointer(g, *push_end, *setup_end).unwrap();
                    for e in epilogues {
                        alone.add_epilogue(g, e.restore_end, e.ret_end).unwrap();
                    }
                }
                crate::model::Frame::Default => {}
            }
            alone.set_register_rules(g, f.register_rules()).unwrap();
            let single = Parsed::encode(&alone);
            for off in 0..f.size() {
                let want = aarch64_model_rules(&f, off);
                let addr = f.start() + u64::from(off);
                assert_eq!(aarch64_rules_at(&whole, addr), want, "{} +{off}", f.name());
                assert_eq!(
                    aarch64_rules_at(&single, addr),
                    want,
                    "{} +{off} alone",
                    f.name()
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 48 + 16 + 16 + 32 + 20 + 24);
        // The rules spelled out for the frame-record function: entry, after stp, after
        // mov, after ldp (entry again), after ret (framed again).
        let same = || Some(RegisterRule::SameValue);
        let undef = || Some(RegisterRule::Undefined);
        let off = |n| Some(RegisterRule::Offset(n));
        let at = |o: u64| aarch64_rules_at(&whole, base + o);
        assert_eq!(at(0), (31, 0, same(), same(), undef(), undef()));
        assert_eq!(at(4), (31, 16, off(-16), off(-8), undef(), undef()));
        assert_eq!(at(8), (29, 16, off(-16), off(-8), undef(), undef()));
        assert_eq!(at(24), (31, 0, same(), same(), undef(), undef()));
        assert_eq!(at(28), (29, 16, off(-16), off(-8), undef(), undef()));
        // The default function: the canonical frame on x29.
        assert_eq!(at(48), (29, 16, off(-16), off(-8), undef(), undef()));
        // GCC's frame: record at the bottom, x19/x20 above it.
        assert_eq!(
            at(80 + 12),
            (29, 48, off(-48), off(-40), off(-32), off(-24))
        );
        // The link-register-only leaf, and the x30 kept in x9 past the record's restore.
        assert_eq!(at(112 + 4), (31, 16, same(), off(-16), undef(), undef()));
        let x9 = Some(RegisterRule::Register(gimli::Register(9)));
        assert_eq!(at(132 + 16), (31, 0, same(), x9, undef(), undef()));
    }
}
