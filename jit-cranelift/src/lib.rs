//! # jit-cranelift
//!
//! Describe functions compiled by [cranelift](https://crates.io/crates/cranelift-codegen) to
//! GDB through [`jit_interface`]: one call per function turns what cranelift knows about it
//! (its size, source locations, calls and SystemV unwind information) into a
//! [`JitObject`] function.
//!
//! Two steps, because cranelift forgets a function's compilation result when its context is
//! reused, and a function's address (and its callees') is known only once the module is
//! finalized:
//!
//! 1. right after compiling (`Module::define_function`), [`CompiledFunction::capture`]
//!    keeps what the debugger needs;
//! 2. once addresses are known, [`CompiledFunction::add_to`] adds the function to a
//!    [`JitObject`]: name, address and size; line rows through the caller's mapping from
//!    cranelift [`SourceLoc`]s to lines; call sites, their targets through the caller's
//!    mapping; and the frame description with its callee-saved registers.
//!
//! A function compiled with cranelift, described and registered (with cranelift-jit, the
//! two steps go right after `define_function` and after `finalize_definitions`; the whole
//! program is `examples/cranelift.rs`; this code runs as the test `crate_doc_example` in
//! `tests/doc_example.rs`):
//!
//! ```rust
//! use jit_cranelift::{CompiledFunction, Lines};
//! use jit_interface::{Format, JitObject};
//! // `ctx` holds a function cranelift just compiled (source location 1: line 1).
//! let compiled = CompiledFunction::capture(&ctx, &*isa)?;
//! // Its code, where it will run (cranelift-jit: `get_finalized_function`).
//! let code = ctx.compiled_code().unwrap().code_buffer().to_vec();
//! let mut obj = JitObject::new();
//! let line_of = &mut |loc: SourceLoc| Some(loc.bits());
//! compiled.add_to(
//!     &mut obj,
//!     "add_one",
//!     code.as_ptr() as u64,
//!     Some(Lines { file: "demo.src", line_of }),
//!     &mut |_callee| None,
//! )?;
//! let registration = jit_interface::register(&obj, Format::Elf)?;
//! ```
//!
//! ## The frame description
//! The function's unwind information is cranelift's own: `CompiledCode::create_unwind_info`
//! gives SystemV CFI, whose FDE (`UnwindInfo::to_fde`) is written as `.eh_frame` and
//! evaluated into rows. Where the canonical frame address (CFA) and the caller's frame
//! pointer are gives the [`UnwindRow`]s; where cranelift saves the other callee-saved
//! registers (rbx, r12-r15, below its frame) gives register rules
//! ([`JitObject::add_register_rule`], [`CompiledFunction::save_slots`]), and those it does
//! not save are declared unchanged, so a debugger shows a caller frame's registers with the
//! caller's values. (jit-interface's `set_gimli_fde` cannot take cranelift's FDE: cranelift
//! 0.135 builds it with gimli 0.33, jit-interface uses gimli 0.34, and the types differ.)
//! cranelift declares no epilogue; the GDB reader (compact) and GDB
//! itself (ELF) recognise the epilogue at the PC. Use `preserve_frame_pointers=true`: a
//! function without a frame pointer is described too, but debuggers find the callers of
//! frame-pointer code most reliably (for example after attach, in a core).
//!
//! ## Lines
//! The code of a source location gets its line, from its start on. Code without a
//! location, or whose location the mapping gives no line, has no line (a gap row): a
//! debugger shows it without one, as in the prologue.
//!
//! x86-64 only, like jit-interface's unwinding.

use std::fmt;

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir::{ExternalName, KnownSymbol, LibCall, SourceLoc, UserExternalName};
use cranelift_codegen::isa::unwind::UnwindInfo;
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::{CompiledCode, Context, FinalizedRelocTarget};
use jit_interface::arch::x86_64::CALLEE_SAVED;
use jit_interface::{CallTarget, CfaBase, FunctionId, JitObject, LineRow, RegisterRule, UnwindRow};

/// x86-64 DWARF register numbers (the SystemV psABI's): the frame pointer, the stack
/// pointer and the return-address column.
const RBP: u16 = 6;
const RSP: u16 = 7;
const RA: u16 = 16;

/// What went wrong.
#[derive(Debug)]
pub enum Error {
    /// The context holds no compiled code: capture right after `define_function` (or
    /// `Context::compile`), before the context is cleared.
    NotCompiled,
    /// The ISA is not x86-64 (the only architecture jit-interface unwinds).
    UnsupportedIsa(String),
    /// cranelift could not produce the function's unwind information.
    Codegen(cranelift_codegen::CodegenError),
    /// The function's unwind information has a rule jit-interface cannot express, or could
    /// not be written and read back; the message names it and its code offset.
    Cfi(String),
    /// jit-interface refused the description (its message names the problem).
    Model(jit_interface::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotCompiled => write!(
                f,
                "the cranelift context holds no compiled code (capture after define_function, before clearing the context)"
            ),
            Error::UnsupportedIsa(t) => {
                write!(f, "unsupported target {t}: jit-cranelift describes x86-64 code only")
            }
            Error::Codegen(e) => write!(f, "cranelift could not create unwind information: {e}"),
            Error::Cfi(m) => write!(f, "cranelift unwind information: {m}"),
            Error::Model(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Codegen(e) => Some(e),
            Error::Model(e) => Some(e),
            _ => None,
        }
    }
}

impl From<jit_interface::Error> for Error {
    fn from(e: jit_interface::Error) -> Error {
        Error::Model(e)
    }
}

/// Whom a call calls, as cranelift names it (see [`CompiledFunction::calls`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Callee {
    /// A function of the user's symbol table (cranelift-module: namespace 0, index the
    /// `FuncId`).
    User(UserExternalName),
    /// A runtime library function.
    LibCall(LibCall),
    /// A well-known symbol.
    KnownSymbol(KnownSymbol),
    /// A test-case name (cranelift's tests).
    TestCase(String),
    /// Code of this same function, at this offset from its start.
    Local(u32),
    /// A call through a register whose value cranelift did not relocate just before it.
    Unknown,
}

/// One call instruction of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Offset of the return address (just after the call) from the function start.
    pub return_offset: u32,
    pub callee: Callee,
}

/// Where a callee-saved register is saved: from code offset `offset` on, the caller's
/// value of DWARF register `register` is at CFA + `cfa_offset` (registered as
/// [`RegisterRule::AtCfa`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaveSlot {
    pub offset: u32,
    pub register: u16,
    pub cfa_offset: i32,
}

/// Source lines for [`CompiledFunction::add_to`]: the source file, and the line of each
/// cranelift source location (`None`: no line of its own, see the crate docs).
pub struct Lines<'a> {
    pub file: &'a str,
    pub line_of: &'a mut dyn FnMut(SourceLoc) -> Option<u32>,
}

/// What a debugger needs of one compiled cranelift function, kept from its compilation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledFunction {
    size: u32,
    srclocs: Vec<(u32, u32, SourceLoc)>,
    calls: Vec<Call>,
    rows: Vec<UnwindRow>,
    saved: Vec<SaveSlot>,
}

impl CompiledFunction {
    /// Captures the function just compiled in `ctx` (after `Module::define_function` or
    /// `Context::compile`) for target `isa`.
    pub fn capture(ctx: &Context, isa: &dyn TargetIsa) -> Result<CompiledFunction, Error> {
        let code = ctx.compiled_code().ok_or(Error::NotCompiled)?;
        Self::from_code(&ctx.func, code, isa)
    }

    /// [`Self::capture`] from the function (for the names of its callees) and its compiled
    /// code.
    pub fn from_code(
        func: &cranelift_codegen::ir::Function,
        code: &CompiledCode,
        isa: &dyn TargetIsa,
    ) -> Result<CompiledFunction, Error> {
        if isa.name() != "x64" {
            return Err(Error::UnsupportedIsa(isa.triple().to_string()));
        }
        let buffer = &code.buffer;
        let size = buffer.total_size();
        let srclocs = buffer
            .get_srclocs_sorted()
            .iter()
            .map(|s| (s.start, s.end, s.loc))
            .collect();
        let calls = calls(func, buffer);
        let (rows, saved) = match code.create_unwind_info(isa).map_err(Error::Codegen)? {
            Some(UnwindInfo::SystemV(info)) => frame_rows(isa, &info, size)?,
            Some(_) => {
                return Err(Error::Cfi(
                    "not SystemV unwind information (a Windows target?)".into(),
                ))
            }
            // No unwind information: the function never moves the stack pointer.
            None => (vec![UnwindRow::X86_64_ENTRY], Vec::new()),
        };
        Ok(CompiledFunction {
            size,
            srclocs,
            calls,
            rows,
            saved,
        })
    }

    /// The function's code size in bytes (with its constant pool).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The call instructions, in code order.
    pub fn calls(&self) -> &[Call] {
        &self.calls
    }

    /// The frame description rows derived from cranelift's unwind information.
    pub fn unwind_rows(&self) -> &[UnwindRow] {
        &self.rows
    }

    /// Where the function saves callee-saved registers besides the frame pointer, as its
    /// unwind information says (see the crate docs).
    pub fn save_slots(&self) -> &[SaveSlot] {
        &self.saved
    }

    /// The line rows for `line_of`: a row where a source location with a line starts, and a
    /// gap row ([`LineRow::gap`]) where code without a line starts (no location, or one
    /// `line_of` maps to no line), unless that line (or gap) is in force already. The code
    /// before the first row has no line anyway: no gap starts the rows.
    pub fn line_rows(&self, line_of: &mut dyn FnMut(SourceLoc) -> Option<u32>) -> Vec<LineRow> {
        let mut rows: Vec<LineRow> = Vec::new();
        let in_force =
            |rows: &[LineRow], line| rows.last().map_or(line == LineRow::GAP, |r| r.line == line);
        let push = |rows: &mut Vec<LineRow>, offset, line| {
            if in_force(rows, line) {
                return;
            }
            // A region that starts where the last row does replaces it.
            if rows.last().is_some_and(|r| r.offset == offset) {
                rows.pop();
                if in_force(rows, line) {
                    return;
                }
            }
            rows.push(LineRow::new(offset, line));
        };
        // The end of the code with locations so far.
        let mut end = 0;
        for &(start, stop, loc) in &self.srclocs {
            if start == stop {
                continue;
            }
            if start > end {
                push(&mut rows, end, LineRow::GAP);
            }
            let line = if loc.is_default() { None } else { line_of(loc) };
            push(&mut rows, start, line.unwrap_or(LineRow::GAP));
            end = end.max(stop);
        }
        if end < self.size {
            push(&mut rows, end, LineRow::GAP);
        }
        rows
    }

    /// Adds the function, at `address`, to `obj` under `name`: its size, its line rows (if
    /// `lines` is given), its frame description and its call sites, each call's target
    /// given by `call_target` (`None`: not known, recorded as an indirect call).
    pub fn add_to(
        &self,
        obj: &mut JitObject,
        name: &str,
        address: u64,
        lines: Option<Lines<'_>>,
        call_target: &mut dyn FnMut(&Callee) -> Option<CallTarget>,
    ) -> Result<FunctionId, Error> {
        let f = obj.add_function(name, address, u64::from(self.size))?;
        if let Some(Lines { file, line_of }) = lines {
            let rows = self.line_rows(line_of);
            if !rows.is_empty() {
                obj.set_lines(f, file, &rows)?;
            }
        }
        obj.set_unwind(f, &self.rows)?;
        // jit-interface takes a callee-saved register without a rule as changed (unknown in a
        // caller frame). cranelift's unwind information names every one it saves, so the
        // others are untouched: same value.
        for reg in CALLEE_SAVED {
            if !self.saved.iter().any(|s| s.register == reg) {
                obj.add_register_rule(f, 0, reg, RegisterRule::SameValue)?;
            }
        }
        for s in &self.saved {
            obj.add_register_rule(f, s.offset, s.register, RegisterRule::AtCfa(s.cfa_offset))?;
        }
        for c in &self.calls {
            let target = match &c.callee {
                Callee::Local(off) => Some(CallTarget::Address(address + u64::from(*off))),
                other => call_target(other),
            };
            obj.add_call_site(f, c.return_offset, target.unwrap_or(CallTarget::Indirect))?;
        }
        Ok(f)
    }
}

/// The calls of `buffer`'s code: each call site cranelift recorded, with its callee when a
/// relocation names it. A direct call (`call rel32`) has its displacement relocated; a call
/// through a register (`call *%r`, how cranelift-jit calls what is not in the same module)
/// has the register loaded just before it by a `movabs r, imm64` whose immediate is relocated.
fn calls(
    func: &cranelift_codegen::ir::Function,
    buffer: &cranelift_codegen::MachBufferFinalized<cranelift_codegen::Final>,
) -> Vec<Call> {
    let code = buffer.data();
    let relocs = buffer.relocs();
    buffer
        .call_sites()
        .map(|site| {
            let ret = site.ret_addr;
            let direct = relocs.iter().find(|r| {
                matches!(r.kind, Reloc::X86CallPCRel4 | Reloc::X86CallPLTRel4)
                    && r.offset + 4 == ret
            });
            let through_register = || {
                relocs
                    .iter()
                    .find(|r| r.kind == Reloc::Abs8 && movabs_then_call(code, r.offset, ret))
            };
            let callee = match direct.or_else(through_register) {
                Some(r) => callee(func, &r.target),
                None => Callee::Unknown,
            };
            Call {
                return_offset: ret,
                callee,
            }
        })
        .collect()
}

/// Is the 8-byte immediate at `imm` that of a `movabs r, imm64` (REX.W B8+r) followed
/// directly by `call *r` (FF /2, register form) ending at `ret`, with the same register?
fn movabs_then_call(code: &[u8], imm: u32, ret: u32) -> bool {
    let (imm, ret) = (imm as usize, ret as usize);
    let (Some(rex), Some(op)) = (
        imm.checked_sub(2).and_then(|i| code.get(i)),
        imm.checked_sub(1).and_then(|i| code.get(i)),
    ) else {
        return false;
    };
    if rex & 0xf8 != 0x48 || !(0xb8..=0xbf).contains(op) {
        return false;
    }
    let loaded = (rex & 1) << 3 | (op - 0xb8);
    let Some(call) = code.get(imm + 8..ret) else {
        return false;
    };
    let (rex_b, modrm) = match *call {
        [0xff, modrm] => (0, modrm),
        [rex, 0xff, modrm] if rex & 0xf0 == 0x40 => (rex & 1, modrm),
        _ => return false,
    };
    // Register form (mod 11) with opcode extension 2 (call), on the register loaded.
    modrm & 0xf8 == 0xd0 && (rex_b << 3 | (modrm & 7)) == loaded
}

/// A relocation target as a [`Callee`].
fn callee(func: &cranelift_codegen::ir::Function, target: &FinalizedRelocTarget) -> Callee {
    match target {
        FinalizedRelocTarget::Func(off) => Callee::Local(*off),
        FinalizedRelocTarget::ExternalName(name) => match name {
            ExternalName::User(r) => func
                .params
                .user_named_funcs()
                .get(*r)
                .map_or(Callee::Unknown, |n| Callee::User(n.clone())),
            ExternalName::TestCase(t) => Callee::TestCase(t.to_string()),
            ExternalName::LibCall(l) => Callee::LibCall(*l),
            ExternalName::KnownSymbol(k) => Callee::KnownSymbol(*k),
        },
    }
}

/// The frame description of a function of `size` bytes from its SystemV unwind
/// information: the FDE cranelift makes of it, written as `.eh_frame` with the ISA's CIE
/// (with cranelift's gimli) and evaluated row by row (with jit-interface's gimli: the two
/// may be different versions).
fn frame_rows(
    isa: &dyn TargetIsa,
    info: &cranelift_codegen::isa::unwind::systemv::UnwindInfo,
    size: u32,
) -> Result<(Vec<UnwindRow>, Vec<SaveSlot>), Error> {
    use cranelift_codegen::gimli::write as w;
    let cie = isa
        .create_systemv_cie()
        .ok_or_else(|| Error::Cfi("the ISA gives no SystemV CIE".into()))?;
    let mut table = w::FrameTable::default();
    let cie_id = table.add_cie(cie);
    table.add_fde(cie_id, info.to_fde(w::Address::Constant(0)));
    let mut eh = w::EhFrame(w::EndianVec::new(cranelift_codegen::gimli::LittleEndian));
    table
        .write_eh_frame(&mut eh)
        .map_err(|e| Error::Cfi(format!("cannot write it as .eh_frame: {e}")))?;
    let bytes = eh.0.into_vec();
    eh_frame_rows(&bytes, size)
}

/// The rows of the one FDE in `.eh_frame` section `bytes` (see [`frame_rows`]).
fn eh_frame_rows(bytes: &[u8], size: u32) -> Result<(Vec<UnwindRow>, Vec<SaveSlot>), Error> {
    use gimli::{CfaRule, RegisterRule, UnwindSection};
    let bad = |what: &str, e: gimli::Error| Error::Cfi(format!("{what}: {e}"));
    let section = gimli::EhFrame::new(bytes, gimli::LittleEndian);
    let bases = gimli::BaseAddresses::default().set_eh_frame(0);
    let mut entries = section.entries(&bases);
    let fde = loop {
        match entries
            .next()
            .map_err(|e| bad("reading .eh_frame back", e))?
        {
            Some(gimli::CieOrFde::Fde(partial)) => {
                break partial
                    .parse(|s, b, o| s.cie_from_offset(b, o))
                    .map_err(|e| bad("reading the FDE", e))?
            }
            Some(gimli::CieOrFde::Cie(_)) => {}
            None => return Err(Error::Cfi("no FDE in the .eh_frame written".into())),
        }
    };
    let start = fde.initial_address();
    let mut ctx = gimli::UnwindContext::new();
    let mut table = fde
        .rows(&section, &bases, &mut ctx)
        .map_err(|e| bad("evaluating the FDE", e))?;
    let (mut rows, mut saved) = (Vec::<UnwindRow>::new(), Vec::<SaveSlot>::new());
    // The saved-register rules of the previous row: a rule is recorded where it starts.
    let (mut in_force, mut now) = (Vec::new(), Vec::new());
    while let Some(row) = table.next_row().map_err(|e| bad("evaluating the FDE", e))? {
        let offset = row
            .start_address()
            .checked_sub(start)
            .and_then(|o| u32::try_from(o).ok())
            .filter(|&o| o < size)
            .ok_or_else(|| {
                Error::Cfi(format!(
                    "row address {:#x} outside the function ({size} bytes from {start:#x})",
                    row.start_address()
                ))
            })?;
        let unsupported =
            |what: String| Error::Cfi(format!("at code offset {offset}: {what} is not supported"));
        let to_i32 = |n: i64, what: &str| {
            i32::try_from(n).map_err(|_| unsupported(format!("{what} offset {n}")))
        };
        let (cfa_base, cfa_offset) = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                let base = match register.0 {
                    RSP => CfaBase::Sp,
                    RBP => CfaBase::Fp,
                    r => return Err(unsupported(format!("a CFA based on DWARF register {r}"))),
                };
                (base, to_i32(*offset, "CFA")?)
            }
            CfaRule::Expression(_) => return Err(unsupported("a CFA expression".into())),
        };
        let mut fp_offset = 0;
        for (reg, rule) in row.registers() {
            match (reg.0, rule) {
                (RBP, RegisterRule::Offset(n)) => fp_offset = to_i32(*n, "saved rbp")?,
                // The return address where every x86-64 call leaves it.
                (RA, RegisterRule::Offset(-8)) => {}
                (_, RegisterRule::SameValue) => {}
                (r, RegisterRule::Offset(n)) if r != RA && r != RSP => {
                    let rule = (r, to_i32(*n, "saved register")?);
                    if !in_force.contains(&rule) {
                        saved.push(SaveSlot {
                            offset,
                            register: rule.0,
                            cfa_offset: rule.1,
                        });
                    }
                    now.push(rule);
                }
                (r, rule) => {
                    return Err(unsupported(format!("rule {rule:?} for DWARF register {r}")))
                }
            }
        }
        std::mem::swap(&mut in_force, &mut now);
        now.clear();
        let new = UnwindRow {
            offset,
            cfa_base,
            cfa_offset,
            fp_offset,
        };
        match rows.last_mut() {
            // Only another register's rule changed: the same row for jit-interface.
            Some(last)
                if UnwindRow {
                    offset: last.offset,
                    ..new
                } == *last => {}
            Some(last) if last.offset == offset => *last = new,
            _ => rows.push(new),
        }
    }
    if rows.first().map(|r| r.offset) != Some(0) {
        return Err(Error::Cfi(
            "the FDE has no row at the function start".into(),
        ));
    }
    Ok((rows, saved))
}

#[cfg(test)]
mod tests {
    use super::movabs_then_call;

    /// `movabs r, imm64` (immediate at offset 2) then `call *r2`, as bytes.
    fn code(rex: u8, op: u8, call: &[u8]) -> Vec<u8> {
        let mut c = vec![rex, op];
        c.extend_from_slice(&[0x11; 8]);
        c.extend_from_slice(call);
        c
    }

    #[test]
    fn a_relocated_movabs_directly_before_a_call_through_its_register() {
        // movabs rax; call *rax
        let c = code(0x48, 0xb8, &[0xff, 0xd0]);
        assert!(movabs_then_call(&c, 2, c.len() as u32));
        // movabs r11; call *r11
        let c = code(0x49, 0xbb, &[0x41, 0xff, 0xd3]);
        assert!(movabs_then_call(&c, 2, c.len() as u32));
    }

    #[test]
    fn anything_else_is_not_taken_for_one() {
        // Another register called than loaded (rax loaded, rcx called; r11 loaded, rbx called).
        let c = code(0x48, 0xb8, &[0xff, 0xd1]);
        assert!(!movabs_then_call(&c, 2, c.len() as u32));
        let c = code(0x49, 0xbb, &[0xff, 0xd3]);
        assert!(!movabs_then_call(&c, 2, c.len() as u32));
        // A jump through the register (ff /4), not a call.
        let c = code(0x48, 0xb8, &[0xff, 0xe0]);
        assert!(!movabs_then_call(&c, 2, c.len() as u32));
        // Not a movabs (no REX.W), an instruction between, a return offset elsewhere.
        let c = code(0x40, 0xb8, &[0xff, 0xd0]);
        assert!(!movabs_then_call(&c, 2, c.len() as u32));
        let c = code(0x48, 0xb8, &[0x90, 0xff, 0xd0]);
        assert!(!movabs_then_call(&c, 2, c.len() as u32));
        let c = code(0x48, 0xb8, &[0xff, 0xd0]);
        assert!(!movabs_then_call(&c, 2, 11) && !movabs_then_call(&c, 2, 40));
        // Immediate at the very start: no room for the opcode.
        assert!(!movabs_then_call(&c, 0, c.len() as u32));
    }
}
