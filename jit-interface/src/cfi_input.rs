//! Standard DWARF call-frame instructions as input: the instruction stream of an FDE (what
//! compilers such as cranelift produce for `.eh_frame`) becomes a function's unwind rows and
//! register rules ([`JitObject::set_cfi`]), so both payload formats carry it: the ELF payload
//! writes it back as CFI, compact records as rows and register rules.
//!
//! Only what the data model can say is accepted: the CFA at rsp or rbp plus an offset, the
//! return address at CFA - 8, rbp saved in a slot or untouched, and for the other
//! general-purpose registers every DWARF rule except expressions. Anything else is refused
//! with the opcode's name and its byte offset in its instruction stream.

use crate::arch::x86_64::{RBP, RIP, RSP};
use crate::error::{Error, Result};
use crate::model::{
    check_register_rule, check_unwind_rows, CfaBase, FunctionId, JitObject, RegisterRule,
    SavedRegister, UnwindRow,
};

/// What an FDE's instructions need from the CIE they belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CieParams<'a> {
    /// The CIE's code alignment factor (advances are multiplied by it).
    pub code_alignment: u64,
    /// The CIE's data alignment factor (factored offsets are multiplied by it).
    pub data_alignment: i64,
    /// The CIE's return-address register (x86-64: 16, rip).
    pub return_address_register: u16,
    /// The CIE's initial instructions: the state at the function's first instruction.
    pub initial_instructions: &'a [u8],
}

impl CieParams<'static> {
    /// The usual x86-64 System V CIE (GCC, LLVM, cranelift): code alignment 1, data
    /// alignment -8, return address in rip; initially CFA = rsp + 8, return address at
    /// CFA - 8.
    pub const X86_64: CieParams<'static> = CieParams {
        code_alignment: 1,
        data_alignment: -8,
        return_address_register: RIP,
        // DW_CFA_def_cfa rsp 8; DW_CFA_offset rip 1 (factored: CFA - 8).
        initial_instructions: &[0x0c, 0x07, 0x08, 0x90, 0x01],
    };
}

/// The DWARF register numbers CFI input may name on x86-64 (rax..r15, rip).
const REGISTERS: usize = 17;

/// One register's rule while the instructions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Not mentioned: for the model, the caller's value until a rule says otherwise.
    Unspecified,
    SameValue,
    Undefined,
    /// At CFA + n.
    Offset(i64),
    Register(u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    /// CFA register and offset; `None` before a `DW_CFA_def_cfa`.
    cfa: Option<(u16, i64)>,
    rules: [Rule; REGISTERS],
}

/// Which instruction stream an error is in.
#[derive(Debug, Clone, Copy)]
enum Stream {
    Cie,
    Fde,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Cie => "the CIE's initial instructions",
            Stream::Fde => "the FDE's instructions",
        }
    }
}

/// Name of a primary or extended CFA opcode, for messages.
fn opcode_name(op: u8) -> String {
    let name = match op >> 6 {
        1 => "DW_CFA_advance_loc",
        2 => "DW_CFA_offset",
        3 => "DW_CFA_restore",
        _ => match op {
            0x00 => "DW_CFA_nop",
            0x01 => "DW_CFA_set_loc",
            0x02 => "DW_CFA_advance_loc1",
            0x03 => "DW_CFA_advance_loc2",
            0x04 => "DW_CFA_advance_loc4",
            0x05 => "DW_CFA_offset_extended",
            0x06 => "DW_CFA_restore_extended",
            0x07 => "DW_CFA_undefined",
            0x08 => "DW_CFA_same_value",
            0x09 => "DW_CFA_register",
            0x0a => "DW_CFA_remember_state",
            0x0b => "DW_CFA_restore_state",
            0x0c => "DW_CFA_def_cfa",
            0x0d => "DW_CFA_def_cfa_register",
            0x0e => "DW_CFA_def_cfa_offset",
            0x0f => "DW_CFA_def_cfa_expression",
            0x10 => "DW_CFA_expression",
            0x11 => "DW_CFA_offset_extended_sf",
            0x12 => "DW_CFA_def_cfa_sf",
            0x13 => "DW_CFA_def_cfa_offset_sf",
            0x14 => "DW_CFA_val_offset",
            0x15 => "DW_CFA_val_offset_sf",
            0x16 => "DW_CFA_val_expression",
            0x2e => "DW_CFA_GNU_args_size",
            0x2f => "DW_CFA_GNU_negative_offset_extended",
            _ => return format!("unknown opcode {op:#04x}"),
        },
    };
    format!("{name} ({op:#04x})")
}

/// Reads one instruction stream.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    stream: Stream,
    /// Start of the instruction being read, and its opcode.
    at: usize,
    op: u8,
}

impl Reader<'_> {
    fn error(&self, why: impl std::fmt::Display) -> String {
        format!(
            "CFI: {} at byte {} of {}: {why}",
            opcode_name(self.op),
            self.at,
            self.stream.name()
        )
    }

    fn u8(&mut self) -> std::result::Result<u8, String> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| self.error("the instructions end inside it"))?;
        self.pos += 1;
        Ok(b)
    }

    fn fixed(&mut self, n: usize) -> std::result::Result<u64, String> {
        let mut v = 0u64;
        for i in 0..n {
            v |= u64::from(self.u8()?) << (8 * i);
        }
        Ok(v)
    }

    fn uleb(&mut self) -> std::result::Result<u64, String> {
        let (mut v, mut shift) = (0u64, 0u32);
        loop {
            let b = self.u8()?;
            if shift >= 64 || (shift == 63 && b & 0x7e != 0) {
                return Err(self.error("a LEB128 operand does not fit in 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
    }

    fn sleb(&mut self) -> std::result::Result<i64, String> {
        let (mut v, mut shift) = (0i64, 0u32);
        loop {
            let b = self.u8()?;
            if shift >= 64 {
                return Err(self.error("a LEB128 operand does not fit in 64 bits"));
            }
            v |= i64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Ok(v);
            }
        }
    }

    fn register(&mut self, n: u64) -> std::result::Result<u16, String> {
        match u16::try_from(n) {
            Ok(r) if usize::from(r) < REGISTERS => Ok(r),
            _ => Err(self.error(format!(
                "register {n} is out of range (x86-64 CFI input names registers 0-16: rax..r15, rip)"
            ))),
        }
    }
}

/// The rows and register rules of `size` bytes of code whose CFI is `cie` then `fde`.
fn convert(
    cie: &CieParams<'_>,
    fde: &[u8],
    size: u32,
) -> std::result::Result<(Vec<UnwindRow>, Vec<SavedRegister>), String> {
    if cie.code_alignment == 0 {
        return Err("CFI: the CIE's code alignment factor is 0".into());
    }
    if cie.return_address_register != RIP {
        return Err(format!(
            "CFI: the CIE's return-address register is {}, not rip (16): only x86-64 CFI is supported",
            cie.return_address_register
        ));
    }
    let mut state = State {
        cfa: None,
        rules: [Rule::Unspecified; REGISTERS],
    };
    let mut initial = state.clone();
    // (code offset, state from there on), in order.
    let mut table: Vec<(u64, State)> = Vec::new();
    let mut loc = 0u64;
    let mut stack: Vec<State> = Vec::new();
    for (stream, bytes) in [(Stream::Cie, cie.initial_instructions), (Stream::Fde, fde)] {
        let mut r = Reader {
            bytes,
            pos: 0,
            stream,
            at: 0,
            op: 0,
        };
        while r.pos < bytes.len() {
            r.at = r.pos;
            r.op = r.u8()?;
            let (high, low) = (r.op >> 6, r.op & 0x3f);
            let mut advance = None;
            let mut set = None::<(u16, Rule)>;
            match (high, r.op) {
                (1, _) => advance = Some(u64::from(low)),
                (2, _) => {
                    let reg = r.register(low.into())?;
                    let n = r.uleb()?;
                    set = Some((reg, Rule::Offset(factored(&r, n, cie.data_alignment)?)));
                }
                (3, _) => {
                    let reg = r.register(low.into())?;
                    set = Some((reg, initial.rules[usize::from(reg)]));
                }
                (_, 0x00) => {}
                (_, 0x02) => advance = Some(r.fixed(1)?),
                (_, 0x03) => advance = Some(r.fixed(2)?),
                (_, 0x04) => advance = Some(r.fixed(4)?),
                (_, 0x05) => {
                    let n = r.uleb()?;
                    let reg = r.register(n)?;
                    let off = r.uleb()?;
                    set = Some((reg, Rule::Offset(factored(&r, off, cie.data_alignment)?)));
                }
                (_, 0x11) => {
                    let n = r.uleb()?;
                    let reg = r.register(n)?;
                    let off = r.sleb()?;
                    let off = off
                        .checked_mul(cie.data_alignment)
                        .ok_or_else(|| r.error("the offset overflows"))?;
                    set = Some((reg, Rule::Offset(off)));
                }
                (_, 0x06) => {
                    let n = r.uleb()?;
                    let reg = r.register(n)?;
                    set = Some((reg, initial.rules[usize::from(reg)]));
                }
                (_, 0x07) => {
                    let n = r.uleb()?;
                    set = Some((r.register(n)?, Rule::Undefined));
                }
                (_, 0x08) => {
                    let n = r.uleb()?;
                    set = Some((r.register(n)?, Rule::SameValue));
                }
                (_, 0x09) => {
                    let n = r.uleb()?;
                    let reg = r.register(n)?;
                    let n = r.uleb()?;
                    let other = r.register(n)?;
                    set = Some((reg, Rule::Register(other)));
                }
                (_, 0x0a) => {
                    if stack.len() >= bytes.len() {
                        return Err(r.error("more states remembered than instructions"));
                    }
                    stack.push(state.clone());
                }
                (_, 0x0b) => {
                    let Some(kept) = stack.pop() else {
                        return Err(r.error("no state was remembered"));
                    };
                    state = kept;
                }
                (_, 0x0c) | (_, 0x12) => {
                    let n = r.uleb()?;
                    let reg = r.register(n)?;
                    let off = if r.op == 0x0c {
                        i64::try_from(r.uleb()?).map_err(|_| r.error("the offset overflows"))?
                    } else {
                        let n = r.sleb()?;
                        n.checked_mul(cie.data_alignment)
                            .ok_or_else(|| r.error("the offset overflows"))?
                    };
                    state.cfa = Some((cfa_register(&r, reg)?, off));
                }
                (_, 0x0d) => {
                    let n = r.uleb()?;
                    let reg = r.register(n)?;
                    let reg = cfa_register(&r, reg)?;
                    let Some((_, off)) = state.cfa else {
                        return Err(r.error("no CFA rule to change yet"));
                    };
                    state.cfa = Some((reg, off));
                }
                (_, 0x0e) | (_, 0x13) => {
                    let off = if r.op == 0x0e {
                        i64::try_from(r.uleb()?).map_err(|_| r.error("the offset overflows"))?
                    } else {
                        let n = r.sleb()?;
                        n.checked_mul(cie.data_alignment)
                            .ok_or_else(|| r.error("the offset overflows"))?
                    };
                    let Some((reg, _)) = state.cfa else {
                        return Err(r.error("no CFA rule to change yet"));
                    };
                    state.cfa = Some((reg, off));
                }
                // The size of outgoing arguments: for exception handling, not unwinding.
                (_, 0x2e) => {
                    r.uleb()?;
                }
                (_, 0x01) => {
                    return Err(r.error(
                        "not supported: give locations relative to the function (DW_CFA_advance_loc*)",
                    ))
                }
                (_, 0x0f | 0x10 | 0x16) => {
                    return Err(r.error(
                        "not supported: DWARF expressions cannot be carried by the compact format or checked here",
                    ))
                }
                _ => {
                    return Err(r.error(
                        "not supported: the data model has no such rule (CFA at rsp or rbp + offset, registers at CFA + n, in a register, same value or undefined)",
                    ))
                }
            }
            if let Some((reg, rule)) = set {
                check_rule(&r, reg, rule)?;
                state.rules[usize::from(reg)] = rule;
            }
            if let Some(delta) = advance {
                if let Stream::Cie = stream {
                    return Err(r.error("a CIE's initial instructions cannot advance the location"));
                }
                let to = delta
                    .checked_mul(cie.code_alignment)
                    .and_then(|d| loc.checked_add(d))
                    .filter(|&to| to <= u64::from(size))
                    .ok_or_else(|| {
                        r.error(format!("it advances past the function's end (size {size})"))
                    })?;
                record(&mut table, loc, &state);
                loc = to;
            }
        }
        if let Stream::Cie = stream {
            initial = state.clone();
        }
    }
    record(&mut table, loc, &state);
    rows_and_rules(&table, size)
}

/// `n` factored by the data alignment factor.
fn factored(r: &Reader<'_>, n: u64, data_alignment: i64) -> std::result::Result<i64, String> {
    i64::try_from(n)
        .ok()
        .and_then(|n| n.checked_mul(data_alignment))
        .ok_or_else(|| r.error("the offset overflows"))
}

fn cfa_register(r: &Reader<'_>, reg: u16) -> std::result::Result<u16, String> {
    match reg {
        RSP | RBP => Ok(reg),
        _ => Err(r.error(format!(
            "the CFA must be based on rsp (7) or rbp (6), not register {reg}"
        ))),
    }
}

/// Refuses rules the data model cannot hold, at the instruction that sets them.
fn check_rule(r: &Reader<'_>, reg: u16, rule: Rule) -> std::result::Result<(), String> {
    match (reg, rule) {
        (RIP, Rule::Offset(-8)) => Ok(()),
        (RIP, _) => {
            Err(r.error("the return address must be at CFA - 8 (rip's rule), as a call leaves it"))
        }
        (RSP, _) => Err(r.error("rsp takes no rule: the caller's rsp is the CFA")),
        (RBP, Rule::Offset(_) | Rule::SameValue | Rule::Unspecified) => Ok(()),
        (RBP, _) => Err(r.error(
            "rbp must be saved at CFA + n or left alone (the frame rows hold no other rule for it)",
        )),
        _ => Ok(()),
    }
}

/// Records `state` as the rules from `loc` on (replacing what an earlier instruction at the
/// same location recorded).
fn record(table: &mut Vec<(u64, State)>, loc: u64, state: &State) {
    match table.last_mut() {
        Some((at, s)) if *at == loc => *s = state.clone(),
        _ => table.push((loc, state.clone())),
    }
}

/// The model's rows and register rules for a table of states.
fn rows_and_rules(
    table: &[(u64, State)],
    size: u32,
) -> std::result::Result<(Vec<UnwindRow>, Vec<SavedRegister>), String> {
    let mut rows: Vec<UnwindRow> = Vec::new();
    let mut rules: Vec<SavedRegister> = Vec::new();
    let mut prev: [Option<RegisterRule>; REGISTERS] = [None; REGISTERS];
    for (loc, state) in table {
        // Rules from the function's end on describe no code.
        if *loc >= u64::from(size) {
            break;
        }
        let offset = *loc as u32;
        if state.rules[usize::from(RIP)] != Rule::Offset(-8) {
            return Err(format!(
                "CFI: at offset {offset} the return address is not at CFA - 8 (no rule for rip, register 16, says so)"
            ));
        }
        let Some((reg, cfa_offset)) = state.cfa else {
            return Err(format!("CFI: at offset {offset} no CFA rule is in effect"));
        };
        let (Ok(cfa_offset), fp_offset) = (
            i32::try_from(cfa_offset),
            match state.rules[usize::from(RBP)] {
                Rule::Offset(n) => i32::try_from(n)
                    .map_err(|_| format!("CFI: at offset {offset} rbp's slot is out of range"))?,
                _ => 0,
            },
        ) else {
            return Err(format!(
                "CFI: at offset {offset} the CFA offset is out of range"
            ));
        };
        let row = UnwindRow {
            offset,
            cfa_base: if reg == RBP { CfaBase::Fp } else { CfaBase::Sp },
            cfa_offset,
            fp_offset,
        };
        let same = rows.last().is_some_and(|l| {
            (l.cfa_base, l.cfa_offset, l.fp_offset) == (row.cfa_base, row.cfa_offset, row.fp_offset)
        });
        if !same {
            rows.push(row);
        }
        for (reg, rule) in state.rules.iter().enumerate() {
            let reg = reg as u16;
            if reg == RIP || reg == RSP || reg == RBP {
                continue;
            }
            let now = match *rule {
                Rule::Unspecified => None,
                Rule::SameValue => Some(RegisterRule::SameValue),
                Rule::Undefined => Some(RegisterRule::Undefined),
                Rule::Offset(n) => Some(RegisterRule::AtCfa(i32::try_from(n).map_err(|_| {
                    format!("CFI: at offset {offset} register {reg}'s slot is out of range")
                })?)),
                Rule::Register(r) => Some(RegisterRule::InRegister(r)),
            };
            if now != prev[usize::from(reg)] {
                rules.push(SavedRegister {
                    offset,
                    reg,
                    // Back to unmentioned (DW_CFA_restore of a register the CIE does not
                    // name): the caller's value again, as debuggers take it.
                    rule: now.unwrap_or(RegisterRule::SameValue),
                });
                prev[usize::from(reg)] = now;
            }
        }
    }
    Ok((rows, rules))
}

impl JitObject {
    /// Describes function `f`'s frame by standard DWARF call-frame instructions: `fde` is
    /// the instruction stream of its FDE (the bytes after the FDE's address range and
    /// augmentation data), `cie` what it needs from its CIE ([`CieParams::X86_64`] for the
    /// usual one). Replaces the function's frame description and register rules.
    ///
    /// Accepted: `DW_CFA_advance_loc*`, `def_cfa*` on rsp or rbp, `offset*`, `restore*`,
    /// `undefined`, `same_value`, `register`, `remember_state`/`restore_state`, `nop`,
    /// `GNU_args_size`. Refused, naming the opcode and its byte offset: expressions,
    /// `val_offset`, `set_loc`, registers out of range, advances past the function's end,
    /// and rules the model cannot hold (the return address anywhere but CFA - 8, rules for
    /// rsp, rbp anywhere but a stack slot); then rows that fail the model's checks (the
    /// CFA below the stack pointer, misaligned slots). Nothing is changed on error.
    pub fn set_cfi(&mut self, f: FunctionId, cie: &CieParams<'_>, fde: &[u8]) -> Result<()> {
        let (size, name, arch) = {
            let func = self
                .functions()
                .get(f)
                .ok_or(Error::NoSuchFunction(f.index()))?;
            (func.size(), func.name().to_string(), self.arch())
        };
        let bad = |why: String| Error::BadRows {
            function: name.clone(),
            why,
        };
        // The conversion reads x86-64 register numbers (rsp, rbp, rip).
        if arch != crate::model::Arch::X86_64 {
            return Err(bad(format!(
                "CFI input is read for x86-64 objects only; this object is for {}",
                arch.name()
            )));
        }
        let (rows, rules) = convert(cie, fde, size).map_err(bad)?;
        check_unwind_rows(arch, &rows, size)
            .map_err(|why| bad(format!("CFI gives bad rows: {why}")))?;
        for (i, r) in rules.iter().enumerate() {
            check_register_rule(arch, &rules[..i], r, size)
                .map_err(|why| bad(format!("CFI: {why}")))?;
        }
        self.set_unwind(f, &rows)?;
        self.set_register_rules(f, &rules)
    }

    /// [`Self::set_cfi`] for the FDE (and its CIE) a code generator built with gimli's
    /// writer, e.g. cranelift's `UnwindInfo::to_fde`. The FDE is written out with its CIE
    /// and its instructions read back as bytes.
    #[cfg(feature = "gimli-write")]
    pub fn set_gimli_fde(
        &mut self,
        f: FunctionId,
        cie: gimli::write::CommonInformationEntry,
        fde: gimli::write::FrameDescriptionEntry,
    ) -> Result<()> {
        let (instructions, params) = gimli_fde_bytes(cie, fde).map_err(|why| Error::BadRows {
            function: self
                .functions()
                .get(f)
                .map_or_else(|| format!("#{}", f.index()), |func| func.name().to_string()),
            why,
        })?;
        let cie = CieParams {
            initial_instructions: &params.3,
            code_alignment: params.0,
            data_alignment: params.1,
            return_address_register: params.2,
        };
        self.set_cfi(f, &cie, &instructions)
    }
}

/// Writes `cie` and `fde` as a `.debug_frame` with gimli and cuts out the FDE's
/// instructions and the CIE's parameters: (FDE instructions, (code alignment, data
/// alignment, return-address register, CIE initial instructions)).
#[cfg(feature = "gimli-write")]
#[allow(clippy::type_complexity)]
fn gimli_fde_bytes(
    cie: gimli::write::CommonInformationEntry,
    fde: gimli::write::FrameDescriptionEntry,
) -> std::result::Result<(Vec<u8>, (u64, i64, u16, Vec<u8>)), String> {
    use gimli::write::{DebugFrame, EndianVec, FrameTable};
    let mut table = FrameTable::default();
    let id = table.add_cie(cie);
    table.add_fde(id, fde);
    let mut out = DebugFrame(EndianVec::new(gimli::LittleEndian));
    table
        .write_debug_frame(&mut out)
        .map_err(|e| format!("gimli could not write the FDE: {e}"))?;
    let bytes = out.0.into_vec();
    // Two entries, 32-bit DWARF. The CIE: length, id, version, augmentation "" (gimli
    // writes none in .debug_frame), address and segment size (version 4), code and data
    // alignment, return-address register, initial instructions.
    let short = || "gimli wrote a short .debug_frame".to_string();
    let word = |at: usize| -> std::result::Result<usize, String> {
        let b = bytes.get(at..at + 4).ok_or_else(short)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
    };
    let cie_end = 4 + word(0)?;
    let version = *bytes.get(8).ok_or_else(short)?;
    if *bytes.get(9).ok_or_else(short)? != 0 {
        return Err("gimli wrote a CIE with an augmentation".into());
    }
    let mut at = 10;
    if version >= 4 {
        at += 2;
    }
    let mut r = Reader {
        bytes: bytes.get(..cie_end).ok_or_else(short)?,
        pos: at,
        stream: Stream::Cie,
        at,
        op: 0,
    };
    let code_alignment = r.uleb()?;
    let data_alignment = r.sleb()?;
    let ra = if version == 1 {
        u64::from(r.u8()?)
    } else {
        r.uleb()?
    };
    let ra = u16::try_from(ra).map_err(|_| format!("return-address register {ra}"))?;
    let initial = bytes.get(r.pos..cie_end).ok_or_else(short)?.to_vec();
    // The FDE: length, CIE pointer, initial address (8), address range (8).
    let fde_len = word(cie_end)?;
    let body = cie_end + 4 + 4 + 8 + 8;
    let instructions = bytes
        .get(body..cie_end + 4 + fde_len)
        .ok_or_else(short)?
        .to_vec();
    Ok((instructions, (code_alignment, data_alignment, ra, initial)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86_64::{R12, R13, RBX};
    use crate::model::Arch;

    /// The FDE instructions of a cranelift-style x86-64 function of 40 bytes: `push rbp`
    /// (1 byte), `mov rbp, rsp` (3), `push r12` (2), `push r13` (2), body, `pop r13` at 30,
    /// `pop r12` at 32, `pop rbp` at 34, `ret` at 35 (all with 1-byte advances).
    fn prologue_fde() -> Vec<u8> {
        vec![
            0x41, // advance 1
            0x0e, 16, // def_cfa_offset 16
            0x86, 2,    // offset rbp, CFA - 16
            0x43, // advance 3 (to 4)
            0x0d, 6,    // def_cfa_register rbp
            0x42, // advance 2 (to 6)
            0x8c, 3,    // offset r12, CFA - 24
            0x42, // advance 2 (to 8)
            0x8d, 4,    // offset r13, CFA - 32
            0x0a, // remember_state
            0x56, // advance 22 (to 30): pop r13 ends at 32
            0x42, 0xcd, // advance 2, restore r13
            0x42, 0xcc, // advance 2 (to 34), restore r12
            0x41, 0x0c, 7, 8, 0xc6, // advance 1 (to 35): def_cfa rsp 8, restore rbp
            0x41, 0x0b, // advance 1 (to 36): restore_state (code after the ret)
        ]
    }

    #[test]
    fn cfi_becomes_rows_and_register_rules() {
        let mut o = JitObject::new();
        let f = o.add_function("cl", 0x1000, 40).unwrap();
        o.set_cfi(f, &CieParams::X86_64, &prologue_fde()).unwrap();
        // What the same function described by hand gives.
        let mut want = JitObject::new();
        let g = want.add_function("cl", 0x1000, 40).unwrap();
        want.set_frame_pointer(g, 1, 4).unwrap();
        want.add_epilogue(g, 35, 36).unwrap();
        want.add_register_rule(g, 6, R12, RegisterRule::AtCfa(-24))
            .unwrap();
        want.add_register_rule(g, 8, R13, RegisterRule::AtCfa(-32))
            .unwrap();
        want.add_register_rule(g, 32, R13, RegisterRule::SameValue)
            .unwrap();
        want.add_register_rule(g, 34, R12, RegisterRule::SameValue)
            .unwrap();
        want.add_register_rule(g, 36, R12, RegisterRule::AtCfa(-24))
            .unwrap();
        want.add_register_rule(g, 36, R13, RegisterRule::AtCfa(-32))
            .unwrap();
        let (got, want) = (
            o.functions().get(f).unwrap(),
            want.functions().get(g).unwrap(),
        );
        assert_eq!(
            got.frame().rows(Arch::X86_64, 40),
            want.frame().rows(Arch::X86_64, 40)
        );
        assert_eq!(got.register_rules(), want.register_rules());
        // Converted for compact: the rows and rules round-trip through the records.
        let bytes = crate::format::encode(&o, None).unwrap();
        assert_eq!(crate::format::decode(&bytes).unwrap().object, o);
    }

    #[test]
    fn other_register_rules_and_extended_forms() {
        let mut o = JitObject::new();
        let f = o.add_function("x", 0x1000, 16).unwrap();
        let fde = [
            0x02, 1, // advance_loc1 1
            0x13, 0x7e, // def_cfa_offset_sf -2 (* -8 = 16)
            0x05, 6, 2, // offset_extended rbp 2
            0x02, 1, // advance_loc1 (to 2)
            0x09, 3, 12, // register rbx in r12
            0x07, 13, // undefined r13
            0x2e, 8, // GNU_args_size: ignored
            0x03, 2, 0, // advance_loc2 2 (to 4)
            0x08, 3, // same_value rbx
            0x11, 14, 3,    // offset_extended_sf r14, 3 * -8
            0x00, // nop
        ];
        o.set_cfi(f, &CieParams::X86_64, &fde).unwrap();
        let func = o.functions().get(f).unwrap();
        let rules: Vec<_> = func
            .register_rules()
            .iter()
            .map(|r| (r.offset, r.reg, r.rule))
            .collect();
        assert_eq!(
            rules,
            [
                (2, RBX, RegisterRule::InRegister(R12)),
                (2, R13, RegisterRule::Undefined),
                (4, RBX, RegisterRule::SameValue),
                (4, 14, RegisterRule::AtCfa(-24)),
            ]
        );
        let rows = func.frame().rows(Arch::X86_64, 16);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[1].offset, rows[1].cfa_offset, rows[1].fp_offset),
            (1, 16, -16)
        );
    }

    #[test]
    fn bad_cfi_names_the_opcode_and_its_offset() {
        let mut o = JitObject::new();
        let f = o.add_function("bad", 0x1000, 16).unwrap();
        let before = o.clone();
        let err = |o: &mut JitObject, fde: &[u8]| {
            let e = o
                .set_cfi(f, &CieParams::X86_64, fde)
                .expect_err(&format!("{fde:x?} refused"))
                .to_string();
            assert!(e.starts_with("function `bad`: "), "{e}");
            e
        };
        let cases: &[(&[u8], &str)] = &[
            (&[0x41, 0x10, 3, 1, 0x70], "DW_CFA_expression (0x10) at byte 1 of the FDE's instructions: not supported"),
            (&[0x0f, 1, 0x70], "DW_CFA_def_cfa_expression (0x0f) at byte 0"),
            (&[0x14, 3, 2], "DW_CFA_val_offset (0x14) at byte 0"),
            (&[0x01, 0, 0], "DW_CFA_set_loc (0x01) at byte 0"),
            (&[0x41, 0x80 | 17, 1], "register 17 is out of range"),
            (&[0x05, 99, 1], "DW_CFA_offset_extended (0x05) at byte 0 of the FDE's instructions: register 99 is out of range"),
            (&[0x51], "DW_CFA_advance_loc (0x51) at byte 0 of the FDE's instructions: it advances past the function's end (size 16)"),
            (&[0x0b], "DW_CFA_restore_state (0x0b) at byte 0 of the FDE's instructions: no state was remembered"),
            (&[0x41, 0x90, 2], "at byte 1 of the FDE's instructions: the return address must be at CFA - 8"),
            (&[0x87, 1], "rsp takes no rule"),
            (&[0x0c, 0, 8], "the CFA must be based on rsp (7) or rbp (6), not register 0"),
            (&[0x07, 6], "rbp must be saved at CFA + n or left alone"),
            (&[0x0c, 7], "at byte 0 of the FDE's instructions: the instructions end inside it"),
            (&[0x17], "unknown opcode 0x17"),
            // The model's own checks on the rows: the CFA below the stack pointer.
            (&[0x41, 0x0e, 0], "CFI gives bad rows: unwind row 1: CFA = SP + 0 leaves no room"),
            // Misaligned save slot.
            (&[0x41, 0x11, 12, 0x7f], "CFA+8 is not a save slot"),
        ];
        for (fde, needle) in cases {
            let e = err(&mut o, fde);
            assert!(e.contains(needle), "{fde:x?}: {e}");
        }
        assert_eq!(o, before, "nothing changed by refused CFI");
        // A CIE that is not x86-64's, or advances.
        let cie = CieParams {
            return_address_register: 30,
            ..CieParams::X86_64
        };
        // An empty FDE: the CIE's state alone, a valid row.
        o.set_cfi(f, &CieParams::X86_64, &[]).unwrap();
        let rows = o.functions().get(f).unwrap().frame().rows(Arch::X86_64, 16);
        assert_eq!(rows, [UnwindRow::X86_64_ENTRY]);
        let e = o.set_cfi(f, &cie, &[]).unwrap_err().to_string();
        assert!(e.contains("not rip (16)"), "{e}");
        let cie = CieParams {
            initial_instructions: &[0x41],
            ..CieParams::X86_64
        };
        let e = o.set_cfi(f, &cie, &[]).unwrap_err().to_string();
        assert!(
            e.contains(
                "of the CIE's initial instructions: a CIE's initial instructions cannot advance"
            ),
            "{e}"
        );
    }

    #[cfg(feature = "gimli-write")]
    #[test]
    fn gimli_write_fdes_convert_as_their_bytes_do() {
        use gimli::write::{
            CallFrameInstruction as I, CommonInformationEntry, FrameDescriptionEntry,
        };
        use gimli::{Encoding, Format, Register};
        // Built as cranelift's x86-64 SystemV unwinder builds them (CIE: version 1, code
        // alignment 1, data alignment -8, return address in rip, CFA = rsp + 8, rip at
        // CFA - 8).
        let encoding = Encoding {
            address_size: 8,
            format: Format::Dwarf32,
            version: 1,
        };
        let mut cie = CommonInformationEntry::new(encoding, 1, -8, Register(16));
        cie.add_instruction(I::Cfa(Register(7), 8));
        cie.add_instruction(I::Offset(Register(16), -8));
        let mut fde = FrameDescriptionEntry::new(gimli::write::Address::Constant(0x1000), 40);
        fde.add_instruction(1, I::CfaOffset(16));
        fde.add_instruction(1, I::Offset(Register(6), -16));
        fde.add_instruction(4, I::CfaRegister(Register(6)));
        fde.add_instruction(6, I::Offset(Register(R12), -24));
        fde.add_instruction(8, I::Offset(Register(R13), -32));
        let mut o = JitObject::new();
        let f = o.add_function("cl", 0x1000, 40).unwrap();
        o.set_gimli_fde(f, cie, fde).unwrap();
        let mut by_bytes = JitObject::new();
        let g = by_bytes.add_function("cl", 0x1000, 40).unwrap();
        by_bytes
            .set_cfi(
                g,
                &CieParams::X86_64,
                &[
                    0x41, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6, 0x42, 0x8c, 3, 0x42, 0x8d, 4,
                ],
            )
            .unwrap();
        assert_eq!(o, by_bytes);
        assert_eq!(o.functions().get(f).unwrap().register_rules().len(), 2);
    }
}
