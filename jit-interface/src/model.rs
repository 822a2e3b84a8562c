//! The data model: a [`JitObject`] is a batch of JIT-compiled functions that becomes one
//! debugger entry. Both payload encoders (ELF and compact records) serialise this model, and
//! the compact decoder produces it again, so every tool agrees on what a function is.
//!
//! Every setter validates its input: a model that exists is one that can be encoded (except
//! for format-specific limits, checked by the encoders).

use std::cell::Cell;
use std::collections::HashMap;

use crate::error::{Error, Result};

/// Instruction-set architecture of the code described by an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// The architecture this library was compiled for.
    pub const HOST: Arch = if cfg!(target_arch = "aarch64") {
        Arch::Aarch64
    } else {
        Arch::X86_64
    };

    /// Size of a code address in bytes.
    pub fn pointer_size(self) -> u8 {
        8
    }

    /// Lower-case name, as used in messages and by the tools.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86-64",
            Arch::Aarch64 => "aarch64",
        }
    }
}

/// One line-table row: from code offset `offset` (relative to the function start) on, the
/// code belongs to source line `line`, up to the next row (or the function's end).
///
/// Line 0 is a **gap**: from `offset` on the code has no source line (stubs, spills,
/// runtime glue), rather than inheriting the line of the row before. It is DWARF's "no
/// source line" convention, and debuggers show such addresses without a line. Make one with
/// [`LineRow::gap`]. A gap may be the first row (a function that starts in glue) and the
/// last; two gaps in a row are refused (the first already lasts up to the next row).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LineRow {
    pub offset: u32,
    pub line: u32,
}

impl LineRow {
    /// The `line` of a gap row: no source line from its offset on.
    pub const GAP: u32 = 0;

    /// A row for source line `line` (0 makes a gap) from code offset `offset` on.
    #[inline]
    pub const fn new(offset: u32, line: u32) -> LineRow {
        LineRow { offset, line }
    }

    /// A gap row: the code from `offset` on has no source line, up to the next row.
    #[inline]
    pub const fn gap(offset: u32) -> LineRow {
        LineRow {
            offset,
            line: LineRow::GAP,
        }
    }

    /// Is this a gap row (no source line from its offset on)?
    #[inline]
    pub const fn is_gap(&self) -> bool {
        self.line == LineRow::GAP
    }

    /// The row's source line, `None` for a gap.
    #[inline]
    pub const fn source_line(&self) -> Option<u32> {
        if self.is_gap() {
            None
        } else {
            Some(self.line)
        }
    }
}

/// Register the canonical frame address (CFA) is computed from.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CfaBase {
    /// The stack pointer (x86-64 `rsp`).
    Sp = 0,
    /// The frame pointer (x86-64 `rbp`).
    Fp = 1,
}

/// One frame-description row: from code offset `offset` on, CFA = `cfa_base` + `cfa_offset`,
/// and the caller's frame pointer is saved at CFA + `fp_offset` (0: not saved, it is still in
/// its register). The caller's stack pointer is the CFA; the return address is at its
/// architecture's place: on x86-64 at CFA - 8 (the `call` pushed it); on aarch64 in the
/// frame record with the saved x29, at CFA + `fp_offset` + 8, and in x30 while no record is
/// saved (`fp_offset` 0) — see [`crate::arch::aarch64`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnwindRow {
    pub offset: u32,
    pub cfa_base: CfaBase,
    pub cfa_offset: i32,
    pub fp_offset: i32,
}

impl UnwindRow {
    /// A function's entry state on x86-64: CFA = SP + 8, frame pointer untouched (see
    /// [`crate::arch::x86_64::ENTRY`]).
    pub const X86_64_ENTRY: UnwindRow = crate::arch::x86_64::ENTRY;
    /// A function's entry state on aarch64: CFA = SP + 0, frame pointer untouched, the
    /// return address in x30 (see [`crate::arch::aarch64::ENTRY`]).
    pub const AARCH64_ENTRY: UnwindRow = crate::arch::aarch64::ENTRY;
}

/// The epilogue of a standard frame-pointer function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Epilogue {
    /// Offset just after the instruction that restores the caller's frame pointer
    /// (x86-64 `pop rbp` or `leave`).
    pub restore_end: u32,
    /// Offset just after the `ret` that ends this epilogue. If code follows (another path
    /// through the function), the frame-pointer rule holds again from there.
    pub ret_end: u32,
}

/// How to find a function's caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Frame {
    /// No description given: the function is taken to keep a standard frame-pointer frame
    /// for its whole body (CFA = FP + 16, caller's FP at CFA - 16 on x86-64). Exact except in
    /// its prologue and epilogue.
    #[default]
    Default,
    /// The standard frame-pointer prologue (`push rbp; mov rbp, rsp`) and epilogues.
    FramePointer {
        /// Offset just after `push rbp`.
        push_end: u32,
        /// Offset just after `mov rbp, rsp`.
        setup_end: u32,
        /// The epilogues, in address order.
        epilogues: Vec<Epilogue>,
    },
    /// Explicit rows, sorted by offset, the first at offset 0.
    Rows(Vec<UnwindRow>),
}

impl Frame {
    /// The rows this description stands for, for a function of `size` bytes.
    pub fn rows(&self, arch: Arch, size: u64) -> Vec<UnwindRow> {
        let mut rows = Vec::new();
        self.rows_into(arch, size, &mut rows);
        rows
    }

    /// [`Self::rows`] into `rows` (cleared first): encoders reuse one vector.
    pub(crate) fn rows_into(&self, arch: Arch, size: u64, rows: &mut Vec<UnwindRow>) {
        rows.clear();
        match self {
            Frame::Default => rows.push(crate::arch::default_row(arch)),
            Frame::Rows(given) => rows.extend_from_slice(given),
            Frame::FramePointer {
                push_end,
                setup_end,
                epilogues,
            } => {
                crate::arch::frame_pointer_rows(arch, *push_end, *setup_end, epilogues, size, rows)
            }
        }
    }
}

/// Where a register of the caller is while a function runs (see
/// [`JitObject::add_register_rule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegisterRule {
    /// Saved in the stack slot at CFA + `n` (`n` a multiple of 8, at most -16 on x86-64,
    /// where CFA - 8 holds the return address; at most -8 on aarch64).
    AtCfa(i32),
    /// Kept in another register (by DWARF number) of this frame.
    InRegister(u16),
    /// Not changed by the function (so far): the caller's value is this frame's.
    SameValue,
    /// Changed and not kept anywhere: debuggers show it as `<not saved>`.
    Undefined,
}

/// A register rule of a function: from code offset `offset` on (until the next rule for
/// the same register), the caller's register `reg` (DWARF number) is found by `rule`.
/// Before a register's first rule it still holds the caller's value (nothing has changed
/// it yet). A callee-saved register without rules (rbx, r12-r15, aarch64 x19-x28: see
/// [`crate::arch::callee_saved`]) is "undefined" in both payload formats
/// (`<not saved>` in the debugger): a function may have changed a register it does not
/// describe, and an unknown value is better than a wrong one. A function that leaves a
/// register alone says so with [`RegisterRule::SameValue`] at offset 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SavedRegister {
    pub offset: u32,
    pub reg: u16,
    pub rule: RegisterRule,
}

/// The furthest below the CFA a register may be saved (the reader's limit for a frame).
pub const MAX_SAVE_DISTANCE: i32 = 16 << 20;

/// The rule of register `reg` at code offset `offset`, from a function's rules (sorted by
/// offset): `None` if no rule for it has taken effect yet.
pub fn register_rule_at(rules: &[SavedRegister], reg: u16, offset: u32) -> Option<RegisterRule> {
    let n = rules.partition_point(|r| r.offset <= offset);
    rules[..n]
        .iter()
        .rev()
        .find(|r| r.reg == reg)
        .map(|r| r.rule)
}

/// Validates register rule `rule` added after `rules` to a function of `size` bytes of
/// `arch`.
pub(crate) fn check_register_rule(
    arch: Arch,
    rules: &[SavedRegister],
    rule: &SavedRegister,
    size: u32,
) -> std::result::Result<(), String> {
    let SavedRegister { offset, reg, rule } = *rule;
    let name = |r: u16| crate::arch::register_name(arch, r).unwrap_or("?");
    if let Some(why) = crate::arch::rule_register_problem(arch, reg) {
        return Err(format!("register rule at offset {offset}: reg: {why}"));
    }
    if offset >= size {
        return Err(format!(
            "register rule for {} at offset {offset} is outside the function (size {size})",
            name(reg)
        ));
    }
    if let Some(last) = rules.last() {
        if offset < last.offset {
            return Err(format!(
                "register rule for {} at offset {offset} comes before the previous rule at offset {}: add rules in offset order",
                name(reg),
                last.offset
            ));
        }
        if rules.iter().any(|r| r.offset == offset && r.reg == reg) {
            return Err(format!(
                "register {} has two rules at offset {offset}",
                name(reg)
            ));
        }
    }
    match rule {
        RegisterRule::AtCfa(n) => {
            let top = crate::arch::highest_save_slot(arch);
            if n % 8 != 0 || !(-MAX_SAVE_DISTANCE..=top).contains(&n) {
                let why = if top == -16 {
                    "; CFA - 8 holds the return address"
                } else {
                    ""
                };
                return Err(format!(
                    "register rule for {} at offset {offset}: CFA{n:+} is not a save slot (a multiple of 8 from CFA - {} down to CFA - {MAX_SAVE_DISTANCE}{why})",
                    name(reg),
                    -top
                ));
            }
        }
        RegisterRule::InRegister(other) => {
            if let Some(why) = crate::arch::rule_register_problem(arch, other) {
                return Err(format!(
                    "register rule for {} at offset {offset}: the register it is kept in: {why}",
                    name(reg)
                ));
            }
            if other == reg {
                return Err(format!(
                    "register rule for {} at offset {offset}: kept in itself is SameValue",
                    name(reg)
                ));
            }
        }
        RegisterRule::SameValue | RegisterRule::Undefined => {}
    }
    Ok(())
}

/// A nested lexical block or inlined region inside a function.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Block {
    /// Name shown by the debugger (for an inlined region: the inlined function's name).
    pub name: String,
    /// Start offset from the function start.
    pub start: u32,
    /// End offset (exclusive) from the function start.
    pub end: u32,
    /// Index of the enclosing block in the function's block list; `None`: the function.
    pub parent: Option<u32>,
}

/// Base types a variable can have.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BaseType {
    I8 = 0,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    /// A pointer to bytes (`unsigned char *` in the debugger).
    Pointer,
}

impl BaseType {
    /// Every base type, in discriminant order (`ALL[t as usize] == t`).
    pub const ALL: [BaseType; 11] = [
        BaseType::I8,
        BaseType::I16,
        BaseType::I32,
        BaseType::I64,
        BaseType::U8,
        BaseType::U16,
        BaseType::U32,
        BaseType::U64,
        BaseType::F32,
        BaseType::F64,
        BaseType::Pointer,
    ];

    /// Size in bytes.
    pub fn size(self) -> u8 {
        match self {
            BaseType::I8 | BaseType::U8 => 1,
            BaseType::I16 | BaseType::U16 => 2,
            BaseType::I32 | BaseType::U32 | BaseType::F32 => 4,
            BaseType::I64 | BaseType::U64 | BaseType::F64 | BaseType::Pointer => 8,
        }
    }

    /// Name the debugger shows.
    pub fn name(self) -> &'static str {
        match self {
            BaseType::I8 => "int8_t",
            BaseType::I16 => "int16_t",
            BaseType::I32 => "int32_t",
            BaseType::I64 => "int64_t",
            BaseType::U8 => "uint8_t",
            BaseType::U16 => "uint16_t",
            BaseType::U32 => "uint32_t",
            BaseType::U64 => "uint64_t",
            BaseType::F32 => "float",
            BaseType::F64 => "double",
            BaseType::Pointer => "void *",
        }
    }
}

/// Where a variable lives while its function runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// In a register, by DWARF register number (x86-64: rax 0, rdx 1, rcx 2, rbx 3, rsi 4,
    /// rdi 5, rbp 6, rsp 7, r8-r15 8-15, xmm0-15 17-32).
    Register(u16),
    /// In memory at frame pointer + offset: the frame pointer as the function's body sets
    /// it up. For functions whose frame description bases the CFA on the frame pointer
    /// (the default, frame-pointer frames, rows with one frame-pointer CFA offset), the ELF
    /// payload gives the place relative to the CFA, so it stays right in the prologue and
    /// epilogue too; otherwise relative to the frame pointer register as it is.
    FrameOffset(i32),
}

/// Whether a variable is a parameter or a local.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VariableKind {
    Parameter,
    Local,
}

/// A parameter or local variable (ELF payloads only: GDB's reader API has no variables).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Variable {
    pub name: String,
    pub kind: VariableKind,
    pub ty: BaseType,
    pub location: Location,
}

/// Where a call goes (see [`CallSite`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CallTarget {
    /// The callee's entry address. When a function of the debugger entry starts there (this
    /// object's, or another's consolidated into the same entry), the ELF payload refers to
    /// that function, which is what lets GDB match the call to its callee without an
    /// exception per frame; otherwise it records the bare address, which GDB cannot use to
    /// unwind (it evaluates call targets given as addresses only with the caller's registers).
    Address(u64),
    /// The callee's entry address and its symbol (linkage) name: for a function outside the
    /// object, such as native code of the host or a function of another JIT object. The ELF
    /// payload names it in a declaration, and GDB finds its address through the symbol
    /// tables. Inside the entry, the function at `address` is referred to as for
    /// [`CallTarget::Address`].
    Symbol { address: u64, name: Box<str> },
    /// Not known when the code was compiled: a call through a register or memory.
    Indirect,
}

impl CallTarget {
    /// The callee's entry address, if known.
    pub fn address(&self) -> Option<u64> {
        match self {
            CallTarget::Address(a) | CallTarget::Symbol { address: a, .. } => Some(*a),
            CallTarget::Indirect => None,
        }
    }
}

/// A call made by a function: where it returns to, and what it calls. Debuggers use call
/// sites to tell which function a frame was called from (GDB: tail-call frames, entry
/// values), and GDB's backtrace through ELF frames is cheaper with them (without one it
/// searches for the call, fails and recovers, for every frame). ELF payloads only: the
/// compact format has no place for them, and GDB does not need them there (see
/// `docs/FORMAT.md`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallSite {
    /// Offset from the function start of the return address: just after the call
    /// instruction (for a tail call, just after the jump).
    pub return_offset: u32,
    pub target: CallTarget,
    /// A tail call: a jump that replaces this function's frame with the callee's, so the
    /// callee returns to this function's caller.
    pub tail_call: bool,
}

/// One JIT-compiled function, as seen through its object: a cheap copyable view.
///
/// An object keeps the names of all its functions in one string and their line rows in one
/// vector (a runtime adds many functions to an object: adding one then allocates nothing,
/// amortised), so a function's name and rows are borrowed from the object.
#[derive(Clone, Copy)]
pub struct Function<'a> {
    object: &'a JitObject,
    entry: &'a Entry,
}

/// Where a name or a function's rows sit in its object's shared storage (32-bit: an
/// object holds at most `MAX_STORED` bytes of names and rows of lines).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    at: u32,
    len: u32,
}

impl Span {
    fn range(self) -> std::ops::Range<usize> {
        self.at as usize..self.end()
    }
    fn end(self) -> usize {
        self.at as usize + self.len as usize
    }
}

/// Most bytes of names, and most line rows, one object stores.
const MAX_STORED: usize = u32::MAX as usize;

/// Most bytes of source text an object keeps per file, and the longest source file name
/// ([`JitObject::set_source`]): the payload formats' limit for a text (1 MiB).
pub const MAX_SOURCE_BYTES: usize = 1 << 20;

/// `Entry::file` of a function without line rows. Never a file's index: every file takes
/// at least one of the at most `MAX_STORED` bytes of text.
const NO_FILE: u32 = u32::MAX;

/// `Entry::extras` of a function without extras. Never an index: every `Extras` belongs to
/// one function, and an object has at most `u32::MAX` functions (each name takes at least
/// one of the at most `MAX_STORED` bytes of text), so indices stay below it.
const NO_EXTRAS: u32 = u32::MAX;

/// What an object stores for each function besides its share of the object's storage.
#[derive(Debug, Clone)]
struct Entry {
    start: u64,
    size: u32,
    /// Index of the file among the object's files (`JitObject::file_span`), or `NO_FILE`.
    file: u32,
    /// In `JitObject::text`.
    name: Span,
    /// In `JitObject::rows`. Empty rows are at 0, so that no span ever points past the rows
    /// in use when the last rows are replaced in place.
    lines: Span,
    frame: Frame,
    /// Index into `JitObject::extras`, or `NO_EXTRAS` while the function has no blocks,
    /// variables or call sites (kept out of the entry: most functions have none, and an
    /// entry without owned extras is cheaper to clone and drop).
    extras: u32,
}

/// The parts of a [`Function`] most functions do not have.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct Extras {
    blocks: Vec<Block>,
    variables: Vec<Variable>,
    calls: Vec<CallSite>,
    registers: Vec<SavedRegister>,
}

impl std::fmt::Debug for Function<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.name())
            .field("start", &self.start())
            .field("size", &self.size())
            .field("file", &self.file())
            .field("lines", &self.lines())
            .field("frame", &self.frame())
            .field("blocks", &self.blocks())
            .field("variables", &self.variables())
            .field("calls", &self.calls())
            .field("registers", &self.register_rules())
            .finish()
    }
}

/// Functions are equal if everything they describe is (wherever their objects keep it).
impl PartialEq for Function<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.start() == other.start()
            && self.size() == other.size()
            && self.name() == other.name()
            && self.file() == other.file()
            && self.lines() == other.lines()
            && self.frame() == other.frame()
            && self.extras() == other.extras()
    }
}

impl Eq for Function<'_> {}

impl std::hash::Hash for Function<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state);
        self.start().hash(state);
        self.size().hash(state);
        self.file().hash(state);
        self.lines().hash(state);
        self.frame().hash(state);
        self.extras().hash(state);
    }
}

impl<'a> Function<'a> {
    /// The architecture of the function's object (the ELF encoder's question).
    #[cfg(feature = "runtime")]
    pub(crate) fn arch(&self) -> Arch {
        self.object.arch
    }

    /// The function's (symbol) name.
    pub fn name(&self) -> &'a str {
        &self.object.text[self.entry.name.range()]
    }
    /// The name's bytes: what encoders copy, without the character-boundary checks of
    /// [`Self::name`].
    #[cfg(feature = "runtime")]
    pub(crate) fn name_bytes(&self) -> &'a [u8] {
        &self.object.text.as_bytes()[self.entry.name.range()]
    }
    /// `N` bytes from the name's start (the name, then what follows it in the object's
    /// storage), if the name is shorter than `N` and that many bytes follow: an encoder
    /// copies them as a block of constant size (no call to `memcpy`) and keeps the name's.
    #[cfg(feature = "runtime")]
    #[inline]
    pub(crate) fn name_block<const N: usize>(&self) -> Option<&'a [u8; N]> {
        let Span { at, len } = self.entry.name;
        if len as usize >= N {
            return None;
        }
        let at = at as usize;
        self.object.text.as_bytes().get(at..at + N)?.try_into().ok()
    }
    /// Address of the first instruction.
    pub fn start(&self) -> u64 {
        self.entry.start
    }
    /// Size of the code in bytes.
    pub fn size(&self) -> u32 {
        self.entry.size
    }
    /// One past the last byte of code.
    pub fn end(&self) -> u64 {
        self.entry.start + u64::from(self.entry.size)
    }
    /// Source file of the line rows, if any were set.
    pub fn file(&self) -> Option<&'a str> {
        let span = self.object.file_span(self.entry.file)?;
        Some(&self.object.text[span.range()])
    }
    /// Index of the source file among the object's files (`JitObject::file_count`), if any:
    /// the same for every function of the object with the same file.
    pub(crate) fn file_index(&self) -> Option<usize> {
        (self.entry.file != NO_FILE).then_some(self.entry.file as usize)
    }
    /// Line rows, sorted by offset.
    pub fn lines(&self) -> &'a [LineRow] {
        &self.object.rows[self.entry.lines.range()]
    }
    /// The frame description.
    pub fn frame(&self) -> &'a Frame {
        &self.entry.frame
    }
    /// Nested blocks; a block's parent comes before it.
    pub fn blocks(&self) -> &'a [Block] {
        self.extras().map_or(&[], |e| &e.blocks)
    }
    /// Parameters and locals.
    pub fn variables(&self) -> &'a [Variable] {
        self.extras().map_or(&[], |e| &e.variables)
    }
    /// Call sites, in increasing return-offset order.
    pub fn calls(&self) -> &'a [CallSite] {
        self.extras().map_or(&[], |e| &e.calls)
    }
    /// Register rules, in offset order (see [`SavedRegister`]).
    pub fn register_rules(&self) -> &'a [SavedRegister] {
        self.extras().map_or(&[], |e| &e.registers)
    }
    fn extras(&self) -> Option<&'a Extras> {
        self.object.extras_of(self.entry)
    }
    /// Does the function contain `addr`?
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start() && addr < self.end()
    }
}

/// The functions of a [`JitObject`], in the order they were added: a view that indexes
/// ([`Functions::get`]) and iterates like a slice.
#[derive(Clone, Copy)]
pub struct Functions<'a> {
    object: &'a JitObject,
}

impl<'a> Functions<'a> {
    /// Number of functions.
    pub fn len(&self) -> usize {
        self.object.entries.len()
    }
    /// Does the object have no function?
    pub fn is_empty(&self) -> bool {
        self.object.entries.is_empty()
    }
    /// Function `f`, if the object has it.
    pub fn get(&self, f: FunctionId) -> Option<Function<'a>> {
        let f = f.0;
        let entry = self.object.entries.get(f)?;
        Some(Function {
            object: self.object,
            entry,
        })
    }
    /// The first function added.
    pub fn first(&self) -> Option<Function<'a>> {
        self.get(FunctionId(0))
    }
    /// The functions in the order they were added.
    pub fn iter(&self) -> FunctionIter<'a> {
        FunctionIter {
            object: self.object,
            entries: self.object.entries.iter(),
        }
    }
}

impl std::fmt::Debug for Functions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for Functions<'a> {
    type Item = Function<'a>;
    type IntoIter = FunctionIter<'a>;
    fn into_iter(self) -> FunctionIter<'a> {
        self.iter()
    }
}

/// Iterator over the functions of an object ([`Functions::iter`]).
#[derive(Clone)]
pub struct FunctionIter<'a> {
    object: &'a JitObject,
    entries: std::slice::Iter<'a, Entry>,
}

impl<'a> Iterator for FunctionIter<'a> {
    type Item = Function<'a>;
    fn next(&mut self) -> Option<Function<'a>> {
        let entry = self.entries.next()?;
        Some(Function {
            object: self.object,
            entry,
        })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl DoubleEndedIterator for FunctionIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let entry = self.entries.next_back()?;
        Some(Function {
            object: self.object,
            entry,
        })
    }
}

impl ExactSizeIterator for FunctionIter<'_> {}

/// The error for objects that together hold more than one object may.
#[cold]
fn merged_too_large() -> Error {
    Error::TooLarge(format!(
        "the objects merged into one hold more than {MAX_STORED} bytes of names or line rows"
    ))
}

/// Checks a name (function, block, variable or file): non-empty, no NUL.
#[inline]
fn check_text(what: &str, s: &str) -> std::result::Result<(), String> {
    if s.is_empty() || has_nul(s.as_bytes()) {
        return Err(text_error(what, s));
    }
    Ok(())
}

/// What is wrong with a name `check_text` refused.
#[cold]
fn text_error(what: &str, s: &str) -> String {
    if s.is_empty() {
        return format!("{what} is empty");
    }
    format!("{what} `{}` contains a NUL byte", s.replace('\0', "\\0"))
}

/// The errors of `add_function`, in the order its checks name them.
#[cold]
#[inline(never)]
fn add_function_error(name: &str, start: u64, size: u64) -> Error {
    if let Err(why) = check_text("the name", name) {
        return Error::BadName(why);
    }
    if size == 0 || start.checked_add(size).is_none() {
        return Error::EmptyOrOverflowingFunction {
            name: name.into(),
            start,
            size,
        };
    }
    if u32::try_from(size).is_err() {
        return Error::TooLarge(format!(
            "function `{name}` has {size} bytes; at most 4 GiB per function"
        ));
    }
    too_much_text()
}

/// The error for an object whose names would take more than `MAX_STORED` bytes.
#[cold]
fn too_much_text() -> Error {
    Error::TooLarge(format!(
        "the names of one object take more than {MAX_STORED} bytes"
    ))
}

/// The error for an object whose line rows would number more than `MAX_STORED`.
#[cold]
fn too_many_rows() -> Error {
    Error::TooLarge(format!(
        "the line rows of one object number more than {MAX_STORED}"
    ))
}

/// Are `a` and `b` the same bytes? For the short names compared for every function (a
/// file name with the last one): two overlapping words, without a call.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&s[at..at + 8]);
            u64::from_le_bytes(w)
        };
        return (word(a, 0) ^ word(b, 0)) | (word(a, n - 8) ^ word(b, n - 8)) == 0;
    }
    a == b
}

/// Does `b` contain a zero byte? Names are short and checked once per function: eight
/// bytes at a time without a call beats a general search.
#[inline]
fn has_nul(b: &[u8]) -> bool {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // The high bit of a byte of the result is set if that byte of x is zero (or, only
    // above a zero byte, 0x01 after a borrow): nonzero exactly when x has a zero byte.
    let zero_in = |x: u64| x.wrapping_sub(LOW) & !x & HIGH;
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let n = b.len();
    if n < 8 {
        return b.iter().fold(false, |any, &c| any | (c == 0));
    }
    // The last eight bytes, overlapping the words before: they cover the rest.
    let mut any = zero_in(word(n - 8));
    let mut at = 0;
    while at + 8 < n {
        any |= zero_in(word(at));
        at += 8;
    }
    any != 0
}

/// `text` as an object keeps it (see `JitObject::set_source`): NUL bytes replaced by U+FFFD,
/// cut to at most `MAX_SOURCE_BYTES` bytes with a last line saying what was kept.
fn source_text(text: &str) -> String {
    let nuls = if has_nul(text.as_bytes()) {
        text.bytes().filter(|&b| b == 0).count()
    } else {
        0
    };
    // U+FFFD takes 3 bytes where the NUL took 1.
    let total = text.len() + 2 * nuls;
    if total <= MAX_SOURCE_BYTES {
        return if nuls == 0 {
            text.to_owned()
        } else {
            text.replace('\0', "\u{FFFD}")
        };
    }
    cut_source(text, total)
}

/// `text` (`total` bytes once NULs are replaced, more than `MAX_SOURCE_BYTES`) cut to fit.
#[cold]
fn cut_source(text: &str, total: usize) -> String {
    // Only the start is kept: NULs are replaced in a prefix that covers it (at least
    // `MAX_SOURCE_BYTES - 3` bytes after replacement, more than the room below).
    let mut end = MAX_SOURCE_BYTES.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = text[..end].replace('\0', "\u{FFFD}");
    let marker =
        |kept: usize| format!("[jit-gdb: source text cut: {kept} of {total} bytes kept]\n");
    // Room for the lines kept, a line break if the cut is inside a line, and the marker
    // line (its count of bytes kept is at most as long as MAX_SOURCE_BYTES's).
    let room = MAX_SOURCE_BYTES - marker(MAX_SOURCE_BYTES).len() - 1;
    let kept = match head.as_bytes()[..room].iter().rposition(|&b| b == b'\n') {
        Some(at) => at + 1,
        // One long line (minified code): cut inside it, on a character boundary.
        None => (0..=room)
            .rev()
            .find(|&i| head.is_char_boundary(i))
            .unwrap_or(0),
    };
    let mut out = String::with_capacity(kept + 1 + marker(kept).len());
    out.push_str(&head[..kept]);
    if kept > 0 && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&marker(kept));
    out
}

/// Are line rows good for a function of `size` bytes? One branch-free pass for the usual
/// case of good rows; `line_rows_error` names the problem.
#[inline]
fn line_rows_ok(rows: &[LineRow], size: u32) -> bool {
    let mut next = 0u32; // lowest offset the next row may have
    let mut after_gap = false; // is the row before a gap?
    let mut good = true;
    for r in rows {
        let gap = r.line == LineRow::GAP;
        good &= (r.offset >= next) & (r.offset < size) & !(gap & after_gap);
        // Wraps only for an offset of u32::MAX, which is outside the function.
        next = r.offset.wrapping_add(1);
        after_gap = gap;
    }
    good
}

/// What is wrong with line rows `line_rows_ok` refused, for a function of `size` bytes.
#[cold]
fn line_rows_error(rows: &[LineRow], size: u32) -> String {
    let mut prev: Option<LineRow> = None;
    for (i, r) in rows.iter().enumerate() {
        if r.offset >= size {
            return format!(
                "line row {i} at offset {} is outside the function (size {size})",
                r.offset
            );
        }
        if let Some(p) = prev.filter(|p| r.offset <= p.offset) {
            return format!(
                "line row {i} at offset {} does not come after row {} at offset {}: rows must be in strictly increasing offset order",
                r.offset,
                i - 1,
                p.offset
            );
        }
        if let Some(p) = prev.filter(|p| p.is_gap() && r.is_gap()) {
            return format!(
                "line row {i} at offset {} is a gap (line 0) right after the gap of row {} at offset {}: a gap lasts up to the next row with a line, so leave out row {i}",
                r.offset,
                i - 1,
                p.offset
            );
        }
        prev = Some(*r);
    }
    // Not reached: a row `line_rows_ok` refused fails one of the tests above. Said whole
    // rather than a panic.
    "line rows must be in strictly increasing offset order inside the function, without two gaps (line 0) in a row"
        .into()
}

/// Validates frame-description rows for a function of `size` bytes.
pub(crate) fn check_unwind_rows(
    arch: Arch,
    rows: &[UnwindRow],
    size: u32,
) -> std::result::Result<(), String> {
    let min_sp = crate::arch::min_sp_cfa_offset(arch);
    let Some(first) = rows.first() else {
        return Err("unwind rows are empty: give at least the row at offset 0".into());
    };
    if first.offset != 0 {
        return Err(format!(
            "the first unwind row is at offset {}, not 0: say how to unwind from the function's first instruction",
            first.offset
        ));
    }
    for (i, r) in rows.iter().enumerate() {
        if r.offset >= size {
            return Err(format!(
                "unwind row {i} at offset {} is outside the function (size {size})",
                r.offset
            ));
        }
        if i > 0 && r.offset <= rows[i - 1].offset {
            return Err(format!(
                "unwind row {i} at offset {} does not come after row {} at offset {}: rows must be in strictly increasing offset order",
                r.offset,
                i - 1,
                rows[i - 1].offset
            ));
        }
        if r.cfa_offset % 8 != 0 || r.fp_offset % 8 != 0 {
            return Err(format!(
                "unwind row {i}: cfa_offset {} and fp_offset {} must be multiples of 8",
                r.cfa_offset, r.fp_offset
            ));
        }
        if r.cfa_base == CfaBase::Sp && r.cfa_offset < min_sp {
            return Err(if min_sp > 0 {
                format!(
                    "unwind row {i}: CFA = SP + {} leaves no room for the return address (needs SP + {min_sp} or more)",
                    r.cfa_offset
                )
            } else {
                format!(
                    "unwind row {i}: CFA = SP {} is below the stack pointer (needs SP + 0 or more)",
                    r.cfa_offset
                )
            });
        }
        if r.cfa_base == CfaBase::Fp && r.cfa_offset < 16 {
            return Err(format!(
                "unwind row {i}: CFA = FP + {} is below the saved frame pointer and return address (needs FP + 16 or more)",
                r.cfa_offset
            ));
        }
        if r.fp_offset > 0 || r.fp_offset == -8 {
            return Err(format!(
                "unwind row {i}: fp_offset {} is not a save slot (0 = not saved, or CFA - 16 and below; CFA - 8 holds the return address)",
                r.fp_offset
            ));
        }
        if r.cfa_base == CfaBase::Fp && r.fp_offset == 0 {
            return Err(format!(
                "unwind row {i}: CFA is based on the frame pointer but the caller's frame pointer is not saved"
            ));
        }
    }
    Ok(())
}

/// A batch of JIT-compiled functions that becomes one debugger entry.
///
/// The names of the functions and files are kept back to back in one string and the line
/// rows of all functions in one vector, so that adding a function allocates nothing,
/// amortised. Replacing the rows of a function other than the last leaves its old rows
/// unused in the object until the object is dropped.
#[derive(Clone)]
pub struct JitObject {
    arch: Arch,
    entries: Vec<Entry>,
    /// Function and file names, back to back.
    text: String,
    /// Line rows of all functions.
    rows: Vec<LineRow>,
    /// The first source file name (in `text`), if `set_lines` gave one. Most objects have
    /// one file: kept here, it costs a clone of the object no allocation.
    first_file: Option<Span>,
    /// What few objects have, boxed: the registry keeps a clone of every small ELF object,
    /// so the object itself is kept small, and cloned with few allocations.
    rare: Option<Box<Rare>>,
    /// The file `set_lines` used last, and its name in `text` (empty while there is none):
    /// most runtimes give one file to many functions in a row.
    last_file: u32,
    last_span: Span,
    /// Set by `merged` if the objects together hold more than `MAX_STORED` bytes of names
    /// or line rows: `validate` refuses the object.
    too_large: bool,
}

/// The parts of a [`JitObject`] few objects have.
#[derive(Clone, Default)]
struct Rare {
    /// The distinct source file names (in `text`) after the first, in order of first use.
    more_files: Vec<Span>,
    /// Blocks, variables and call sites of the functions that have some.
    extras: Vec<Extras>,
    /// Index of every file, once there are more than `SCAN_FILES`.
    file_index: Option<HashMap<Box<str>, u32>>,
    /// Source texts (file name, text), in order of first set (`JitObject::set_source`).
    sources: Vec<(Box<str>, Box<str>)>,
    /// Index of `sources` by file name, once there are more than `SCAN_FILES`: a decoder
    /// sets one text per entry of a payload's table, which may be long.
    source_index: Option<HashMap<Box<str>, usize>>,
}

impl Rare {
    /// Where the text of `file` is in `sources`.
    fn find_source(&self, file: &str) -> Option<usize> {
        match &self.source_index {
            Some(index) => index.get(file).copied(),
            None => self.sources.iter().position(|(f, _)| &**f == file),
        }
    }
}

/// The emptied storage of an object, for the next object made on the same thread.
#[derive(Default)]
struct Storage {
    entries: Vec<Entry>,
    text: String,
    rows: Vec<LineRow>,
}

/// Most bytes of storage a dropped object leaves to the next: one huge object must not
/// keep its memory after it is gone.
const MAX_SPARE: usize = 1 << 20;

thread_local! {
    /// Storage of the object this thread dropped last. Runtimes build and register one
    /// object after another: reusing its storage spares growing the next one again (copies
    /// and fresh pages for every object).
    static SPARE: Cell<Option<Storage>> = const { Cell::new(None) };
}

impl Drop for JitObject {
    fn drop(&mut self) {
        let bytes = self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.text.capacity()
            + self.rows.capacity() * std::mem::size_of::<LineRow>();
        if bytes > MAX_SPARE {
            return;
        }
        self.entries.clear();
        self.text.clear();
        self.rows.clear();
        let storage = Storage {
            entries: std::mem::take(&mut self.entries),
            text: std::mem::take(&mut self.text),
            rows: std::mem::take(&mut self.rows),
        };
        // Nothing is kept by a thread that is exiting.
        let _ = SPARE.try_with(|spare| spare.set(Some(storage)));
    }
}

/// Files found by scanning; beyond, a hash map finds them.
const SCAN_FILES: usize = 8;

impl std::fmt::Debug for JitObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("JitObject");
        d.field("arch", &self.arch)
            .field("functions", &self.functions());
        // Only when there are some: the usual object prints as it always did.
        if self.has_sources() {
            d.field("sources", &self.sources().collect::<Vec<_>>());
        }
        d.finish()
    }
}

/// Objects are equal if they describe the same functions in the same order (however their
/// storage was filled), and carry the same source texts in the same order.
impl PartialEq for JitObject {
    fn eq(&self, other: &Self) -> bool {
        self.arch == other.arch
            && self.entries.len() == other.entries.len()
            && self.functions().iter().eq(other.functions().iter())
            && self.sources().eq(other.sources())
    }
}

impl Eq for JitObject {}

impl std::hash::Hash for JitObject {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.arch.hash(state);
        self.entries.len().hash(state);
        for f in self.functions() {
            f.hash(state);
        }
        for source in self.sources() {
            source.hash(state);
        }
    }
}

impl Default for JitObject {
    fn default() -> Self {
        Self::new()
    }
}

/// A function of a [`JitObject`], as [`JitObject::add_function`] returned it: what the
/// object's other setters take to name it. A type of its own, so that a block index, a line
/// or an offset cannot be passed for it by mistake. Displayed as `#N`, `N` its [`index`].
///
/// [`index`]: FunctionId::index
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FunctionId(usize);

impl FunctionId {
    /// The function's index in its object: functions are numbered from 0 in the order they
    /// were added ([`JitObject::functions`] lists them in that order).
    pub fn index(self) -> usize {
        self.0
    }

    /// The id of the function at `index` (the C API's integer ids, the decoder's counter).
    pub(crate) fn from_index(index: usize) -> FunctionId {
        FunctionId(index)
    }
}

impl std::fmt::Display for FunctionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl JitObject {
    /// An empty object for the host architecture.
    pub fn new() -> JitObject {
        JitObject::with_arch(Arch::HOST)
    }

    /// An empty object for `arch`.
    pub fn with_arch(arch: Arch) -> JitObject {
        let spare = SPARE.try_with(Cell::take).ok().flatten();
        let Storage {
            entries,
            text,
            rows,
        } = spare.unwrap_or_default();
        JitObject {
            arch,
            entries,
            text,
            rows,
            first_file: None,
            rare: None,
            last_file: NO_FILE,
            last_span: Span::default(),
            too_large: false,
        }
    }

    /// Architecture of the code.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The functions, in the order they were added.
    pub fn functions(&self) -> Functions<'_> {
        Functions { object: self }
    }

    /// Number of distinct source files of the object's functions (a bound on
    /// `Function::file_index`).
    pub(crate) fn file_count(&self) -> usize {
        usize::from(self.first_file.is_some()) + self.more_files().len()
    }

    /// Where the name of file `i` is (`None` for `NO_FILE`).
    fn file_span(&self, i: u32) -> Option<Span> {
        match i {
            0 => self.first_file,
            _ => self.more_files().get(i as usize - 1).copied(),
        }
    }

    /// The files' names in `text`, in order.
    fn file_spans(&self) -> impl Iterator<Item = Span> + '_ {
        self.first_file.iter().chain(self.more_files()).copied()
    }

    fn more_files(&self) -> &[Span] {
        self.rare.as_ref().map_or(&[], |r| &r.more_files)
    }

    /// The source texts given with [`Self::set_source`]: (file name, text), in the order
    /// each file was first given one.
    pub fn sources(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        let sources = self.rare.as_ref().map_or(&[][..], |r| &r.sources[..]);
        sources.iter().map(|(file, text)| (&**file, &**text))
    }

    /// The source text of `file`, if one was given.
    pub fn source(&self, file: &str) -> Option<&str> {
        let rare = self.rare.as_ref()?;
        rare.find_source(file).map(|i| &*rare.sources[i].1)
    }

    /// Does the object carry any source text?
    pub fn has_sources(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| !r.sources.is_empty())
    }

    /// The extras of `e`, if it has some.
    fn extras_of(&self, e: &Entry) -> Option<&Extras> {
        if e.extras == NO_EXTRAS {
            return None;
        }
        self.rare.as_ref()?.extras.get(e.extras as usize)
    }

    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Bytes of names and number of line rows the object stores (at least those of its
    /// functions): what an encoder's output is roughly proportional to.
    pub(crate) fn stored_sizes(&self) -> (usize, usize) {
        (self.text.len(), self.rows.len())
    }

    fn entry(&self, f: usize) -> Result<&Entry> {
        self.entries.get(f).ok_or(Error::NoSuchFunction(f))
    }

    fn name_of(&self, e: &Entry) -> &str {
        &self.text[e.name.range()]
    }

    /// The error for bad rows (or blocks) of function `f`.
    fn bad_rows(&self, f: usize, why: String) -> Error {
        Error::BadRows {
            function: self.name_of(&self.entries[f]).to_string(),
            why,
        }
    }

    /// Appends `s` to the text.
    /// Room for `functions` more functions and `text` more bytes of names, so that an object
    /// built whole at once (read back from a payload) allocates each once.
    #[cfg(feature = "runtime")]
    pub(crate) fn reserve(&mut self, functions: usize, text: usize) {
        self.entries.reserve_exact(functions);
        self.text.reserve_exact(text);
    }

    fn push_text(&mut self, s: &str) -> Result<Span> {
        let at = self.text.len();
        if s.len() > MAX_STORED - at {
            return Err(too_much_text());
        }
        self.text.push_str(s);
        // Both fit: at + len <= MAX_STORED.
        Ok(Span {
            at: at as u32,
            len: s.len() as u32,
        })
    }

    /// Adds a function occupying `[start, start + size)` and returns its index. Overlaps
    /// between functions are checked when the object is encoded.
    #[inline]
    pub fn add_function(&mut self, name: &str, start: u64, size: u64) -> Result<FunctionId> {
        let at = self.text.len();
        // All checks at once; `add_function_error` names the first that fails.
        let bad = name.is_empty()
            | has_nul(name.as_bytes())
            | (size.wrapping_sub(1) >= u64::from(u32::MAX))
            | start.checked_add(size).is_none()
            | (name.len() > MAX_STORED - at);
        if bad {
            return Err(add_function_error(name, start, size));
        }
        self.text.push_str(name);
        self.entries.push(Entry {
            start,
            // Checked above: 0 < size <= u32::MAX, at + len <= MAX_STORED.
            size: size as u32,
            file: NO_FILE,
            name: Span {
                at: at as u32,
                len: name.len() as u32,
            },
            lines: Span::default(),
            frame: Frame::Default,
            extras: NO_EXTRAS,
        });
        Ok(FunctionId(self.entries.len() - 1))
    }

    /// Sets the source file and line rows of function `f` (replacing earlier ones).
    /// Rows are sorted by strictly increasing offset, all inside the function; lines start at
    /// 1, and line 0 ([`LineRow::gap`]) says the code from that offset on has no line (not
    /// twice in a row).
    #[inline]
    pub fn set_lines(&mut self, f: FunctionId, file: &str, rows: &[LineRow]) -> Result<()> {
        let f = f.0;
        // A file the object has is known to be a good name.
        let known = if self.is_last_file(file) {
            Some(self.last_file)
        } else if self.first_file.is_none() {
            None
        } else {
            self.find_file(file)
        };
        if known.is_none() {
            check_text("the file name", file).map_err(Error::BadFileName)?;
        }
        let Some(e) = self.entries.get(f) else {
            return Err(Error::NoSuchFunction(f));
        };
        if !line_rows_ok(rows, e.size) {
            return Err(self.bad_line_rows(f, rows));
        }
        // Rows replacing the last rows stored take their place.
        let old = e.lines;
        let at = if old.len > 0 && old.end() == self.rows.len() {
            old.at as usize
        } else {
            self.rows.len()
        };
        if rows.len() > MAX_STORED - at {
            return Err(too_many_rows());
        }
        let file = match known {
            Some(i) => i,
            None => self.add_file(file)?,
        };
        self.rows.truncate(at);
        self.rows.extend_from_slice(rows);
        let e = &mut self.entries[f];
        e.file = file;
        // Both fit: at + len <= MAX_STORED.
        e.lines = Span {
            at: if rows.is_empty() { 0 } else { at as u32 },
            len: rows.len() as u32,
        };
        Ok(())
    }

    /// Is `file` the file `set_lines` used last?
    #[inline]
    fn is_last_file(&self, file: &str) -> bool {
        let last = self.last_span;
        // An empty span: no file yet (a file's name is never empty).
        last.len != 0
            && self
                .text
                .as_bytes()
                .get(last.range())
                .is_some_and(|name| same_bytes(name, file.as_bytes()))
    }

    /// The error for rows `line_rows_ok` refused.
    #[cold]
    #[inline(never)]
    fn bad_line_rows(&self, f: usize, rows: &[LineRow]) -> Error {
        self.bad_rows(f, line_rows_error(rows, self.entries[f].size))
    }

    /// Index of `file` among the object's files, if it is one of them, and makes it the
    /// last file used.
    #[inline(never)]
    fn find_file(&mut self, file: &str) -> Option<u32> {
        // As bytes: spans are on character boundaries anyway.
        let text = self.text.as_bytes();
        let found = match self.rare.as_ref().and_then(|r| r.file_index.as_ref()) {
            Some(index) => index.get(file).copied(),
            // At most `SCAN_FILES` files.
            None => (0..)
                .zip(self.file_spans())
                .find(|&(_, s)| text.get(s.range()) == Some(file.as_bytes()))
                .map(|(i, _)| i),
        };
        if let Some(i) = found {
            self.last_file = i;
            self.last_span = self.file_span(i).unwrap_or_default();
        }
        found
    }

    /// Adds `file` (not one of the object's files yet) to the files, makes it the last
    /// file used and returns its index.
    #[inline(never)]
    fn add_file(&mut self, file: &str) -> Result<u32> {
        let span = self.push_text(file)?;
        let i = self.push_file(span);
        self.index_file(file, i);
        Ok(i)
    }

    /// Appends the file named at `span` to the files, as the last file used; returns its
    /// index.
    fn push_file(&mut self, span: Span) -> u32 {
        // Below NO_FILE: every file has bytes of text of its own.
        let i = self.file_count() as u32;
        if self.first_file.is_none() {
            self.first_file = Some(span);
        } else {
            self.rare_mut().more_files.push(span);
        }
        self.last_file = i;
        self.last_span = span;
        i
    }

    /// Enters `file`, file `i`, in the index once there are too many files to scan.
    fn index_file(&mut self, file: &str, i: u32) {
        if self.file_count() <= SCAN_FILES {
            return;
        }
        let index = match self.rare.as_ref().and_then(|r| r.file_index.as_ref()) {
            Some(_) => None,
            None => {
                let text = &self.text;
                let index: HashMap<Box<str>, u32> = (0..)
                    .zip(self.file_spans())
                    .map(|(i, s)| (Box::from(&text[s.range()]), i))
                    .collect();
                Some(index)
            }
        };
        let rare = self.rare_mut();
        rare.file_index
            .get_or_insert_with(|| index.unwrap_or_default())
            .insert(file.into(), i);
    }

    /// Sets explicit frame-description rows for function `f`.
    pub fn set_unwind(&mut self, f: FunctionId, rows: &[UnwindRow]) -> Result<()> {
        let f = f.0;
        let e = self.entry(f)?;
        if let Err(why) = check_unwind_rows(self.arch, rows, e.size) {
            return Err(self.bad_rows(f, why));
        }
        self.entries[f].frame = Frame::Rows(rows.to_vec());
        Ok(())
    }

    /// Describes function `f` as a standard frame-pointer function: `push_end` is the offset
    /// just after `push rbp`, `setup_end` just after `mov rbp, rsp`.
    #[inline]
    pub fn set_frame_pointer(
        &mut self,
        f: FunctionId,
        push_end: u32,
        setup_end: u32,
    ) -> Result<()> {
        let f = f.0;
        let Some(e) = self.entries.get_mut(f) else {
            return Err(Error::NoSuchFunction(f));
        };
        if push_end == 0 || setup_end < push_end || setup_end >= e.size {
            return Err(self.bad_prologue(f, push_end, setup_end));
        }
        match &mut e.frame {
            // Its epilogues' storage is kept for the new ones.
            Frame::FramePointer {
                push_end: p,
                setup_end: s,
                epilogues,
            } => {
                (*p, *s) = (push_end, setup_end);
                epilogues.clear();
            }
            frame => {
                *frame = Frame::FramePointer {
                    push_end,
                    setup_end,
                    epilogues: Vec::new(),
                }
            }
        }
        Ok(())
    }

    /// The error for prologue offsets `set_frame_pointer` refused.
    #[cold]
    #[inline(never)]
    fn bad_prologue(&self, f: usize, push_end: u32, setup_end: u32) -> Error {
        let size = self.entries[f].size;
        self.bad_rows(
            f,
            format!(
                "frame-pointer prologue offsets push_end {push_end}, setup_end {setup_end} must satisfy 0 < push_end <= setup_end < size ({size})"
            ),
        )
    }

    /// Adds an epilogue to a frame-pointer function (after [`Self::set_frame_pointer`]):
    /// `restore_end` just after `pop rbp` / `leave`, `ret_end` just after the `ret`.
    pub fn add_epilogue(&mut self, f: FunctionId, restore_end: u32, ret_end: u32) -> Result<()> {
        let f = f.0;
        let e = self.entry(f)?;
        let size = e.size;
        let Frame::FramePointer {
            setup_end,
            epilogues,
            ..
        } = &e.frame
        else {
            return Err(self.bad_rows(
                f,
                "an epilogue needs a frame-pointer description first (set_frame_pointer)".into(),
            ));
        };
        let after = epilogues.last().map_or(*setup_end, |e| e.ret_end);
        if restore_end <= after || ret_end <= restore_end || ret_end > size {
            return Err(self.bad_rows(f, format!(
                "epilogue restore_end {restore_end}, ret_end {ret_end} must satisfy {after} < restore_end < ret_end <= size ({size}), in address order"
            )));
        }
        if let Frame::FramePointer { epilogues, .. } = &mut self.entries[f].frame {
            epilogues.push(Epilogue {
                restore_end,
                ret_end,
            });
        }
        Ok(())
    }

    /// Adds a register rule to function `f`: from code offset `offset` on, the caller's
    /// register `reg` (DWARF number of the object's architecture: [`crate::arch::x86_64`]
    /// rbx 3, r12-r15 12-15, ...; [`crate::arch::aarch64`] x19-x28 19-28, x30 30 for the
    /// return address) is found by `rule`; e.g. after `push r12` in a frame-pointer
    /// function, `add_register_rule(f, after_push, R12, RegisterRule::AtCfa(-24))`. Rules are
    /// added in offset order; each holds until the next rule for the same register.
    /// Callee-saved registers without a rule are undefined (see [`SavedRegister`]).
    ///
    /// Refused: the registers the frame rows place (x86-64 rsp, rip, rbp; aarch64 sp, pc,
    /// x29) and numbers that are no general-purpose register, offsets outside the function
    /// or before an earlier rule, save slots not a multiple of 8 or outside CFA - 16 (aarch64:
    /// CFA - 8) ..= CFA - [`MAX_SAVE_DISTANCE`].
    pub fn add_register_rule(
        &mut self,
        f: FunctionId,
        offset: u32,
        reg: u16,
        rule: RegisterRule,
    ) -> Result<()> {
        let f = f.0;
        let e = self.entry(f)?;
        let new = SavedRegister { offset, reg, rule };
        let func = Function {
            object: self,
            entry: e,
        };
        if let Err(why) = check_register_rule(self.arch, func.register_rules(), &new, e.size) {
            return Err(self.bad_rows(f, why));
        }
        self.extras_mut(f).registers.push(new);
        Ok(())
    }

    /// Replaces function `f`'s register rules by `rules` (in offset order), each checked
    /// as [`Self::add_register_rule`] checks it. Nothing is changed on error.
    pub fn set_register_rules(&mut self, f: FunctionId, rules: &[SavedRegister]) -> Result<()> {
        let fi = f.0;
        let e = self.entry(fi)?;
        for (i, r) in rules.iter().enumerate() {
            if let Err(why) = check_register_rule(self.arch, &rules[..i], r, e.size) {
                return Err(self.bad_rows(fi, why));
            }
        }
        if rules.is_empty() && e.extras == NO_EXTRAS {
            return Ok(());
        }
        let regs = &mut self.extras_mut(fi).registers;
        regs.clear();
        regs.extend_from_slice(rules);
        Ok(())
    }

    /// Adds a nested block (lexical scope or inlined region) to function `f` and returns its
    /// index among the function's blocks. `parent` is an earlier block of the same function
    /// that contains this one, or `None` for the function itself.
    pub fn add_block(
        &mut self,
        f: FunctionId,
        name: &str,
        start: u32,
        end: u32,
        parent: Option<u32>,
    ) -> Result<u32> {
        let f = f.0;
        let e = self.entry(f)?;
        let func = Function {
            object: self,
            entry: e,
        };
        check_text("the block name", name).map_err(|why| self.bad_rows(f, why))?;
        if start >= end || end > e.size {
            return Err(self.bad_rows(
                f,
                format!(
                    "block `{name}` [{start}, {end}) must be non-empty and inside the function (size {})",
                    e.size
                ),
            ));
        }
        if let Some(p) = parent {
            let Some(pb) = func.blocks().get(p as usize) else {
                return Err(self.bad_rows(
                    f,
                    format!("block `{name}`: parent block {p} does not exist"),
                ));
            };
            if start < pb.start || end > pb.end {
                return Err(self.bad_rows(
                    f,
                    format!(
                        "block `{name}` [{start}, {end}) is not inside its parent `{}` [{}, {})",
                        pb.name, pb.start, pb.end
                    ),
                ));
            }
        }
        let index = u32::try_from(func.blocks().len())
            .map_err(|_| Error::TooLarge("more than 2^32 blocks".into()))?;
        self.extras_mut(f).blocks.push(Block {
            name: name.into(),
            start,
            end,
            parent,
        });
        Ok(index)
    }

    /// Adds a parameter or local variable to function `f` (ELF payloads only).
    pub fn add_variable(&mut self, f: FunctionId, var: Variable) -> Result<()> {
        let f = f.0;
        let e = self.entry(f)?;
        let bad = |why: String| Error::BadVariable {
            function: self.name_of(e).to_string(),
            why,
        };
        check_text("the variable name", &var.name).map_err(bad)?;
        if let Location::Register(r) = var.location {
            if r > 127 {
                return Err(bad(format!(
                    "`{}`: register {r} is not a DWARF register number of this architecture",
                    var.name
                )));
            }
        }
        self.extras_mut(f).variables.push(var);
        Ok(())
    }

    /// Adds a call site to function `f`: the call instruction ending at `return_offset` (the
    /// return address, relative to the function start) calls `target`. Call sites are added
    /// in increasing `return_offset` order. ELF payloads only (the compact encoder leaves
    /// them out: see [`CallSite`]).
    pub fn add_call_site(
        &mut self,
        f: FunctionId,
        return_offset: u32,
        target: CallTarget,
    ) -> Result<()> {
        self.push_call_site(
            f,
            CallSite {
                return_offset,
                target,
                tail_call: false,
            },
        )
    }

    /// Adds a tail call to function `f`: the jump ending at `jump_end` leaves the function
    /// for `target`, which returns to `f`'s caller. A function that declares a tail call
    /// declares all of them: debuggers take its list of tail calls as complete, and show a
    /// frame for `f` between its caller and the callee only when the list says how it got
    /// there.
    pub fn add_tail_call(
        &mut self,
        f: FunctionId,
        jump_end: u32,
        target: CallTarget,
    ) -> Result<()> {
        self.push_call_site(
            f,
            CallSite {
                return_offset: jump_end,
                target,
                tail_call: true,
            },
        )
    }

    fn push_call_site(&mut self, f: FunctionId, site: CallSite) -> Result<()> {
        let f = f.0;
        let e = self.entry(f)?;
        let func = Function {
            object: self,
            entry: e,
        };
        let bad = |why: String| self.bad_rows(f, why);
        let kind = if site.tail_call {
            "tail call"
        } else {
            "call site"
        };
        let at = site.return_offset;
        let size = func.size();
        if at == 0 || at > size {
            return Err(bad(format!(
                "{kind} returning to offset {at} is outside the function: the return offset is just after the call instruction, in 1..={size} (size {size})"
            )));
        }
        if let Some(prev) = func.calls().last().filter(|p| at <= p.return_offset) {
            return Err(bad(format!(
                "{kind} returning to offset {at} does not come after the call site at offset {}: add call sites in increasing offset order, one per call instruction",
                prev.return_offset
            )));
        }
        match &site.target {
            CallTarget::Address(0) | CallTarget::Symbol { address: 0, .. } => {
                return Err(bad(format!(
                    "{kind} at offset {at}: target address 0 is no function entry (use CallTarget::Indirect for an unknown target)"
                )));
            }
            CallTarget::Symbol { name, .. } => {
                check_text("the call target's name", name)
                    .map_err(|why| bad(format!("{kind} at offset {at}: {why}")))?;
            }
            _ => {}
        }
        // A target need not be a function's start: code may call a local subroutine or a
        // secondary entry. The ELF payload then describes it by address or name.
        self.extras_mut(f).calls.push(site);
        Ok(())
    }

    /// The extras of function `f` (which exists), created if it had none.
    fn extras_mut(&mut self, f: usize) -> &mut Extras {
        let mut at = self.entries[f].extras;
        let rare = self.rare.get_or_insert_with(Box::default);
        if at == NO_EXTRAS {
            // Below NO_EXTRAS: see there.
            at = rare.extras.len() as u32;
            rare.extras.push(Extras::default());
            self.entries[f].extras = at;
        }
        &mut rare.extras[at as usize]
    }

    /// Attaches the text of source file `file` to the object (replacing a text given for
    /// `file` before), for runtimes that compile from strings (eval, a REPL, fetched
    /// scripts): the payload carries it, and debuggers show it where no file `file` exists.
    /// `file` is the name the functions' line rows give (`set_lines`); any name is allowed
    /// (`..`, `/` and absolute paths too: readers map names to places of their own).
    ///
    /// The file name must be non-empty, without NUL, and at most [`MAX_SOURCE_BYTES`] bytes.
    /// The text may be empty. NUL bytes in it become U+FFFD (the formats carry texts
    /// without NUL). A text longer than [`MAX_SOURCE_BYTES`] is cut after its last line
    /// break that leaves room, and a last line says so and what was kept, e.g.
    /// `[jit-gdb: source text cut: 1048000 of 5242880 bytes kept]` (byte counts after NUL
    /// replacement); the whole stays within [`MAX_SOURCE_BYTES`].
    pub fn set_source(&mut self, file: &str, text: &str) -> Result<()> {
        if file.len() > MAX_SOURCE_BYTES {
            return Err(Error::BadFileName(format!(
                "the source file name is {} bytes long, above the limit of {MAX_SOURCE_BYTES}",
                file.len()
            )));
        }
        check_text("the source file name", file).map_err(Error::BadFileName)?;
        let text = source_text(text).into_boxed_str();
        let rare = self.rare_mut();
        if let Some(i) = rare.find_source(file) {
            rare.sources[i].1 = text;
            return Ok(());
        }
        let i = rare.sources.len();
        rare.sources.push((file.into(), text));
        if let Some(index) = &mut rare.source_index {
            index.insert(file.into(), i);
        } else if rare.sources.len() > SCAN_FILES {
            let index = (0..).zip(&rare.sources).map(|(i, (f, _))| (f.clone(), i));
            rare.source_index = Some(index.collect());
        }
        Ok(())
    }

    /// Checks what can only be checked on the whole object: it has functions, they do not
    /// overlap. Encoders call this.
    pub fn validate(&self) -> Result<()> {
        let entries = &self.entries;
        if entries.is_empty() {
            return Err(Error::EmptyObject);
        }
        if self.too_large {
            return Err(merged_too_large());
        }
        // Runtimes usually add functions in address order: then one pass proves that none
        // overlap (each starts at or after the end of the one before, so ends increase too).
        let end = |e: &Entry| e.start + u64::from(e.size);
        if entries.windows(2).all(|w| w[1].start >= end(&w[0])) {
            return Ok(());
        }
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| entries[i].start);
        for w in order.windows(2) {
            let (a, b) = (&entries[w[0]], &entries[w[1]]);
            if b.start < end(a) {
                return Err(Error::Overlap {
                    first: self.name_of(a).to_string(),
                    second: self.name_of(b).to_string(),
                });
            }
        }
        Ok(())
    }

    /// Would `objects` merged into one (see `Self::merged`, in tests) be refused by `validate` for
    /// holding too much? The check of `validate` on the merged object, without merging.
    #[cfg(feature = "runtime")]
    pub(crate) fn check_stored_together(objects: &[&JitObject]) -> Result<()> {
        let (mut text, mut rows) = (0usize, 0usize);
        for o in objects {
            text = text.saturating_add(o.text.len());
            rows = rows.saturating_add(o.rows.len());
            if o.too_large || (objects.len() > 1 && (text > MAX_STORED || rows > MAX_STORED)) {
                return Err(merged_too_large());
            }
        }
        Ok(())
    }

    /// All functions of `objects`, in order, in one object of `arch` (the registry
    /// consolidates many small registrations into one debugger entry). Not validated: the
    /// encoder does that.
    // The ELF encoder encodes several objects as one without it (`elf::encode_objects`):
    // tests compare the two.
    #[cfg(all(test, feature = "runtime"))]
    pub(crate) fn merged<'a, I>(arch: Arch, objects: I) -> JitObject
    where
        I: IntoIterator<Item = &'a JitObject>,
        I::IntoIter: Clone,
    {
        let objects = objects.into_iter();
        let mut out = JitObject::with_arch(arch);
        // Room for everything at once (a merge is of many small objects).
        let total = |len: fn(&JitObject) -> usize| objects.clone().map(len).sum::<usize>();
        out.entries.reserve(total(|o| o.entries.len()));
        out.text.reserve(total(|o| o.text.len()));
        out.rows.reserve(total(|o| o.rows.len()));
        // Each object's file indices in `out`.
        let mut few = [NO_FILE; SCAN_FILES];
        let mut many = Vec::new();
        for o in objects {
            // The storage is copied whole and the entries shifted to their new place.
            let (text_at, rows_at) = (out.text.len(), out.rows.len());
            if o.text.len() > MAX_STORED - text_at || o.rows.len() > MAX_STORED - rows_at {
                out.too_large = true;
                break;
            }
            out.text.push_str(&o.text);
            out.rows.extend_from_slice(&o.rows);
            // Both fit in 32 bits, as does every offset into them.
            let (text_at, rows_at) = (text_at as u32, rows_at as u32);
            let count = o.file_count();
            let files: &mut [u32] = if count <= few.len() {
                &mut few[..count]
            } else {
                many.resize(count, NO_FILE);
                &mut many
            };
            for (slot, s) in files.iter_mut().zip(o.file_spans()) {
                let name = &o.text[s.range()];
                *slot = match out.find_file(name) {
                    Some(i) => i,
                    None => {
                        // The name is in the copied text already: share it.
                        let i = out.push_file(Span {
                            at: text_at + s.at,
                            ..s
                        });
                        out.index_file(name, i);
                        i
                    }
                };
            }
            for e in &o.entries {
                let extras = match o.extras_of(e) {
                    Some(x) => {
                        let rare = out.rare_mut();
                        rare.extras.push(x.clone());
                        (rare.extras.len() - 1) as u32
                    }
                    None => NO_EXTRAS,
                };
                out.entries.push(Entry {
                    name: Span {
                        at: text_at + e.name.at,
                        ..e.name
                    },
                    lines: Span {
                        // Empty rows stay at 0.
                        at: if e.lines.len == 0 {
                            0
                        } else {
                            rows_at + e.lines.at
                        },
                        ..e.lines
                    },
                    file: files.get(e.file as usize).copied().unwrap_or(NO_FILE),
                    extras,
                    ..e.clone()
                });
            }
            // One text per file: the first object's (the ELF encoder keeps the same one).
            for (file, text) in o.sources() {
                if out.source(file).is_none() {
                    // Valid: it is one already.
                    let _ = out.set_source(file, text);
                }
            }
        }
        out
    }

    /// Lowest start and highest end over all functions (`None` if empty).
    pub fn address_range(&self) -> Option<(u64, u64)> {
        let lo = self.entries.iter().map(|e| e.start).min()?;
        let hi = self
            .entries
            .iter()
            .map(|e| e.start + u64::from(e.size))
            .max()?;
        Some((lo, hi))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn base_type_all_is_in_discriminant_order() {
        for (i, t) in BaseType::ALL.iter().enumerate() {
            assert_eq!(*t as usize, i);
        }
    }

    use super::*;

    #[test]
    fn rejects_bad_input_with_named_problem() {
        let mut o = JitObject::new();
        assert!(matches!(
            o.add_function("", 0x1000, 4),
            Err(Error::BadName(_))
        ));
        assert!(o.add_function("f", 0x1000, 0).is_err());
        assert!(o.add_function("f", u64::MAX - 1, 4).is_err());
        let f = o.add_function("f", 0x1000, 16).unwrap();
        let e = o
            .set_lines(
                f,
                "a.js",
                &[
                    LineRow { offset: 4, line: 1 },
                    LineRow { offset: 2, line: 2 },
                ],
            )
            .unwrap_err();
        assert!(e.to_string().contains("strictly increasing"), "{e}");
        assert!(o
            .set_lines(
                f,
                "a.js",
                &[LineRow {
                    offset: 16,
                    line: 1
                }]
            )
            .is_err());
        assert!(o.set_unwind(f, &[]).is_err());
        let bad = UnwindRow {
            offset: 4,
            ..UnwindRow::X86_64_ENTRY
        };
        assert!(o
            .set_unwind(f, &[bad])
            .unwrap_err()
            .to_string()
            .contains("not 0"));
        o.add_function("g", 0x100f, 4).unwrap();
        assert!(matches!(o.validate(), Err(Error::Overlap { .. })));
        assert!(matches!(
            JitObject::new().validate(),
            Err(Error::EmptyObject)
        ));
    }

    #[test]
    fn overlaps_are_found_in_any_order() {
        let object = |functions: &[(u64, u64)]| {
            let mut o = JitObject::new();
            for (i, &(start, size)) in functions.iter().enumerate() {
                o.add_function(&format!("f{i}"), start, size).unwrap();
            }
            o.validate()
        };
        object(&[(0x1000, 16), (0x1010, 16), (0x1040, 8)]).unwrap();
        object(&[(0x1040, 8), (0x1000, 16), (0x1010, 16)]).unwrap();
        let e = object(&[(0x1040, 8), (0x1000, 16), (0x100c, 16)]).unwrap_err();
        assert!(
            matches!(&e, Error::Overlap { first, second } if first == "f1" && second == "f2"),
            "{e}"
        );
        assert!(matches!(
            object(&[(0x1000, 16), (0x1000, 16)]),
            Err(Error::Overlap { .. })
        ));
    }

    #[test]
    fn function_ids_number_functions_in_the_order_added() {
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 16).unwrap();
        let g = o.add_function("g", 0x1010, 16).unwrap();
        assert_eq!((f.index(), g.index()), (0, 1));
        assert!(f < g);
        assert_eq!(
            (f.to_string(), format!("{g}")),
            ("#0".to_string(), "#1".to_string())
        );
        assert_eq!(o.functions().get(g).map(|g| g.name()), Some("g"));
        // An id another object handed out, beyond this one's functions: refused, named.
        let mut other = JitObject::new();
        assert_eq!(
            other.set_frame_pointer(g, 1, 4),
            Err(Error::NoSuchFunction(1))
        );
        assert!(other.functions().get(f).is_none());
    }

    #[test]
    fn functions_share_file_names_and_keep_their_own() {
        let mut o = JitObject::new();
        let rows = [LineRow { offset: 0, line: 3 }];
        for (i, file) in ["a.js", "a.js", "b.js", "a.js", "a.js"].iter().enumerate() {
            let f = o.add_function("f", 0x1000 + 16 * i as u64, 16).unwrap();
            o.set_lines(f, file, &rows).unwrap();
        }
        fn file(o: &JitObject, i: usize) -> &str {
            o.functions().get(FunctionId(i)).unwrap().file().unwrap()
        }
        assert_eq!(
            (0..5).map(|i| file(&o, i)).collect::<Vec<_>>(),
            ["a.js", "a.js", "b.js", "a.js", "a.js"]
        );
        // One copy of "a.js" for all its functions.
        assert!(std::ptr::eq(file(&o, 0), file(&o, 1)));
        assert!(std::ptr::eq(file(&o, 0), file(&o, 4)));
        // Replacing a function's lines replaces its file, and only its file.
        o.set_lines(FunctionId(1), "c.js", &rows).unwrap();
        assert_eq!(
            (file(&o, 0), file(&o, 1), file(&o, 3)),
            ("a.js", "c.js", "a.js")
        );
        // A refused change leaves file and rows as they were.
        let bad = [LineRow {
            offset: 16,
            line: 1,
        }];
        assert!(o.set_lines(FunctionId(1), "d.js", &bad).is_err());
        assert_eq!(file(&o, 1), "c.js");
        assert_eq!(o.functions().get(FunctionId(1)).unwrap().lines(), rows);
    }

    /// Builds `rows_of.len()` functions 16 bytes apart, function i with `rows_of[i]` (a line
    /// number each, at offsets 0, 2, ...) in file `files[i]`.
    fn object_with(rows_of: &[&[u32]], files: &[&str]) -> JitObject {
        let mut o = JitObject::new();
        for (i, lines) in rows_of.iter().enumerate() {
            let f = o
                .add_function(&format!("f{i}"), 0x1000 + 16 * i as u64, 16)
                .unwrap();
            let rows: Vec<LineRow> = (0..)
                .zip(lines.iter())
                .map(|(k, &line)| LineRow {
                    offset: 2 * k,
                    line,
                })
                .collect();
            o.set_lines(f, files[i], &rows).unwrap();
        }
        o
    }

    #[test]
    fn gap_rows_are_kept_first_last_and_between_lines_and_two_in_a_row_are_refused() {
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 32).unwrap();
        assert_eq!(LineRow::gap(4), LineRow::new(4, 0));
        assert!(LineRow::gap(4).is_gap() && !LineRow::new(4, 1).is_gap());
        assert_eq!(LineRow::gap(4).source_line(), None);
        assert_eq!(LineRow::new(4, 9).source_line(), Some(9));
        // First (the function starts in glue), between lines, last: kept as given.
        let rows = [
            LineRow::gap(0),
            LineRow::new(3, 7),
            LineRow::gap(8),
            LineRow::new(12, 8),
            LineRow::new(16, 8),
            LineRow::gap(30),
        ];
        o.set_lines(f, "a.js", &rows).unwrap();
        assert_eq!(o.functions().get(f).unwrap().lines(), rows);
        // A function whose only row is a gap: a file without a line.
        o.set_lines(f, "a.js", &[LineRow::gap(0)]).unwrap();
        assert_eq!(o.functions().get(f).unwrap().lines(), [LineRow::gap(0)]);
        // Two gaps in a row: refused, naming both rows; the rows set before stay.
        let err = o
            .set_lines(
                f,
                "a.js",
                &[LineRow::new(0, 1), LineRow::gap(4), LineRow::gap(6)],
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "line row 2 at offset 6 is a gap (line 0) right after the gap of row 1 at offset 4"
            ),
            "{err}"
        );
        assert_eq!(o.functions().get(f).unwrap().lines(), [LineRow::gap(0)]);
        // Also as the first two rows; a gap after a line after a gap is fine.
        assert!(o
            .set_lines(f, "a.js", &[LineRow::gap(0), LineRow::gap(1)])
            .is_err());
        o.set_lines(
            f,
            "a.js",
            &[LineRow::gap(0), LineRow::new(1, 2), LineRow::gap(2)],
        )
        .unwrap();
    }

    #[test]
    fn replacing_rows_and_reusing_storage_leave_objects_as_described() {
        let want = object_with(&[&[5, 6], &[7], &[9, 10, 11]], &["a.js", "b.js", "a.js"]);
        let row = |offset, line| LineRow { offset, line };
        let mut o = JitObject::new();
        let f0 = o.add_function("f0", 0x1000, 16).unwrap();
        o.set_lines(f0, "x.js", &[row(0, 1), row(2, 2), row(4, 3)])
            .unwrap();
        // The last rows stored: replaced in place.
        o.set_lines(f0, "c.js", &[row(0, 1)]).unwrap();
        let f1 = o.add_function("f1", 0x1010, 16).unwrap();
        o.set_lines(f1, "b.js", &[row(0, 7)]).unwrap();
        let f2 = o.add_function("f2", 0x1020, 16).unwrap();
        o.set_lines(f2, "a.js", &[row(0, 1)]).unwrap();
        // Not the last rows: stored anew.
        o.set_lines(f0, "a.js", &[row(0, 5), row(2, 6)]).unwrap();
        o.set_lines(f2, "a.js", &[row(0, 9), row(2, 10), row(4, 11)])
            .unwrap();
        assert_eq!(o, want);
        assert_eq!(format!("{o:?}"), format!("{want:?}"));
        let hash = |o: &JitObject| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            o.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&o), hash(&want));
        let f = o.functions().get(FunctionId(2)).unwrap();
        assert_eq!(
            (f.name(), f.file(), f.lines().len()),
            ("f2", Some("a.js"), 3)
        );
        // A dropped object's storage goes to the next object of this thread, empty.
        drop(o);
        let again = JitObject::new();
        assert!(again.functions().is_empty());
        assert_eq!(again, JitObject::new());
        drop(again);
        let rebuilt = object_with(&[&[5, 6], &[7], &[9, 10, 11]], &["a.js", "b.js", "a.js"]);
        assert_eq!(rebuilt, want);
        assert_eq!(rebuilt.file_count(), 2);
    }

    #[test]
    fn replacing_the_last_rows_leaves_empty_rows_of_others_in_place() {
        let row = |offset, line| LineRow { offset, line };
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 16).unwrap();
        o.set_lines(f, "a.js", &[row(0, 1), row(4, 2), row(8, 3)])
            .unwrap();
        let g = o.add_function("g", 0x1010, 16).unwrap();
        o.set_lines(g, "a.js", &[]).unwrap();
        // f's rows are still the last stored: replaced in place by fewer.
        o.set_lines(f, "b.js", &[row(0, 5)]).unwrap();
        let (f, g) = (o.functions().get(f).unwrap(), o.functions().get(g).unwrap());
        assert_eq!((f.lines(), f.file()), (&[row(0, 5)][..], Some("b.js")));
        assert_eq!((g.lines(), g.file()), (&[][..], Some("a.js")));
    }

    #[test]
    fn clones_keep_files_and_extras() {
        let files: Vec<String> = (0..12).map(|i| format!("c{i}.js")).collect();
        let names: Vec<&str> = files.iter().map(String::as_str).collect();
        let rows: Vec<&[u32]> = vec![&[3]; 12];
        let mut o = object_with(&rows, &names);
        o.add_block(FunctionId(5), "inner", 2, 6, None).unwrap();
        o.add_call_site(FunctionId(7), 4, CallTarget::Indirect)
            .unwrap();
        let c = o.clone();
        assert_eq!(c, o);
        assert_eq!(c.file_count(), 12);
        assert_eq!(
            c.functions().get(FunctionId(5)).unwrap().blocks()[0].name,
            "inner"
        );
        assert_eq!(c.functions().get(FunctionId(7)).unwrap().calls().len(), 1);
        assert!(c.functions().get(FunctionId(6)).unwrap().calls().is_empty());
        // The clone finds its files again (through its own index).
        let mut c = c;
        let f = c.add_function("late", 0x2000, 16).unwrap();
        c.set_lines(f, "c3.js", &[LineRow { offset: 0, line: 1 }])
            .unwrap();
        assert_eq!(c.file_count(), 12);
        assert_eq!(c.functions().get(f).unwrap().file_index(), Some(3));
    }

    #[test]
    fn many_files_are_found_again() {
        let files: Vec<String> = (0..40).map(|i| format!("m{}.js", i % 20)).collect();
        let names: Vec<&str> = files.iter().map(String::as_str).collect();
        let rows: Vec<&[u32]> = vec![&[3]; 40];
        let o = object_with(&rows, &names);
        assert_eq!(o.file_count(), 20);
        for (i, f) in o.functions().iter().enumerate() {
            assert_eq!(f.file(), Some(names[i]));
            assert_eq!(f.file_index(), Some(i % 20));
        }
    }

    #[cfg(feature = "runtime")]
    #[test]
    fn merged_objects_keep_every_function_and_share_files() {
        let a = object_with(&[&[1, 2], &[3]], &["a.js", "b.js"]);
        let b = object_with(&[&[4], &[5, 6, 7]], &["b.js", "c.js"]);
        let m = JitObject::merged(Arch::HOST, [&a, &b]);
        let all: Vec<_> = a.functions().iter().chain(b.functions().iter()).collect();
        assert_eq!(m.functions().iter().collect::<Vec<_>>(), all);
        assert_eq!(m.file_count(), 3);
        let file_of =
            |o: &JitObject, i: usize| o.functions().get(FunctionId(i)).unwrap().file_index();
        assert_eq!(file_of(&m, 1), file_of(&m, 2), "b.js once");
    }

    #[test]
    fn nul_bytes_are_found_anywhere() {
        for len in 0..40 {
            let clean: Vec<u8> = (0..len).map(|i| 1 + (i * 37 % 255) as u8).collect();
            assert!(!has_nul(&clean), "{len}");
            assert!(!has_nul(&vec![0x80; len]) && !has_nul(&vec![0xff; len]));
            for at in 0..len {
                let mut b = clean.clone();
                b[at] = 0;
                assert!(has_nul(&b), "{len} {at}");
            }
        }
    }

    #[test]
    fn call_sites_are_checked() {
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 16).unwrap();
        let err = |r: Result<()>| r.unwrap_err().to_string();
        let to = CallTarget::Address;
        assert!(err(o.add_call_site(f, 0, to(0x2000))).contains("outside the function"));
        assert!(err(o.add_call_site(f, 17, to(0x2000))).contains("in 1..=16"));
        assert!(err(o.add_call_site(f, 5, to(0))).contains("Indirect"));
        let bad_name = CallTarget::Symbol {
            address: 0x2000,
            name: "a\0b".into(),
        };
        assert!(err(o.add_call_site(f, 5, bad_name)).contains("NUL"));
        assert_eq!(
            o.functions().get(f).unwrap().calls(),
            [],
            "refused call sites are not kept"
        );
        // Recursion (the function's own entry), a local subroutine and a call as the last
        // instruction are fine.
        o.add_call_site(f, 5, to(0x1000)).unwrap();
        o.add_call_site(f, 9, to(0x100c)).unwrap();
        let order = err(o.add_call_site(f, 9, CallTarget::Indirect));
        assert!(order.contains("increasing offset order"), "{order}");
        o.add_tail_call(f, 16, to(0x2000)).unwrap();
        let calls = o.functions().get(f).unwrap().calls();
        assert_eq!(
            calls
                .iter()
                .map(|c| (c.return_offset, c.tail_call))
                .collect::<Vec<_>>(),
            [(5, false), (9, false), (16, true)]
        );
        assert_eq!(calls[2].target.address(), Some(0x2000));
    }

    #[test]
    fn source_texts_are_kept_per_file_in_order_of_first_set() {
        let mut o = JitObject::new();
        assert!(!o.has_sources() && o.sources().next().is_none());
        let plain = o.clone();
        o.set_source("b.js", "let b;\n").unwrap();
        o.set_source("a.js", "").unwrap();
        // Replaced in place: the order is that of the first set.
        o.set_source("b.js", "let b = 2;\n").unwrap();
        // Names a reader must map safely are allowed.
        for name in ["../up.js", "/abs/path.js", "dir/x.js", "<eval 3>"] {
            o.set_source(name, "x").unwrap();
        }
        assert_eq!(
            o.sources().map(|(f, _)| f).collect::<Vec<_>>(),
            [
                "b.js",
                "a.js",
                "../up.js",
                "/abs/path.js",
                "dir/x.js",
                "<eval 3>"
            ]
        );
        assert_eq!(o.source("b.js"), Some("let b = 2;\n"));
        assert_eq!(o.source("a.js"), Some(""));
        assert_eq!(o.source("c.js"), None);
        // Sources take part in equality, hashing and Debug (only when present).
        let hash = |o: &JitObject| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            o.hash(&mut h);
            h.finish()
        };
        assert_ne!(o, plain);
        assert_ne!(hash(&o), hash(&plain));
        let c = o.clone();
        assert_eq!((&c, hash(&c)), (&o, hash(&o)));
        let mut other_text = o.clone();
        other_text.set_source("a.js", "changed").unwrap();
        assert_ne!(other_text, o);
        assert!(format!("{o:?}").contains("let b = 2;"));
        assert!(!format!("{plain:?}").contains("sources"));
    }

    #[test]
    fn many_source_files_are_found_again() {
        let mut o = JitObject::new();
        for i in 0..40 {
            o.set_source(&format!("s{i}.js"), &format!("// {i}\n"))
                .unwrap();
        }
        o.set_source("s3.js", "// three\n").unwrap();
        assert_eq!(o.sources().count(), 40);
        assert_eq!(o.source("s3.js"), Some("// three\n"));
        assert_eq!(o.source("s39.js"), Some("// 39\n"));
        assert_eq!(o.sources().nth(3), Some(("s3.js", "// three\n")));
        // The clone finds them through its own index.
        let mut c = o.clone();
        c.set_source("s20.js", "x").unwrap();
        assert_eq!((c.sources().count(), c.source("s20.js")), (40, Some("x")));
    }

    #[test]
    fn bad_source_file_names_are_refused_naming_the_field() {
        let mut o = JitObject::new();
        let long = "x".repeat(MAX_SOURCE_BYTES + 1);
        for name in ["", "a\0b", long.as_str()] {
            let e = o.set_source(name, "text").unwrap_err();
            assert!(matches!(e, Error::BadFileName(_)), "{e:?}");
            let msg = e.to_string();
            assert!(msg.starts_with("bad source file name: "), "{msg}");
            assert!(!msg.contains("function"), "{msg}");
        }
        assert!(
            o.set_source(&long[1..], "").is_ok(),
            "1 MiB names are allowed"
        );
        assert_eq!(o.sources().count(), 1, "refused names are not kept");
    }

    #[test]
    fn nul_bytes_in_source_text_become_replacement_characters() {
        let mut o = JitObject::new();
        o.set_source("a.js", "a\0b\0").unwrap();
        assert_eq!(o.source("a.js"), Some("a\u{FFFD}b\u{FFFD}"));
    }

    /// The marker line a cut text ends with, and the byte counts it gives.
    fn cut_counts(text: &str) -> (usize, usize) {
        let body = text.strip_suffix("]\n").expect("ends with the marker line");
        let at = body.rfind("[jit-gdb: source text cut: ").expect("a marker");
        let words: Vec<&str> = body[at..].split(' ').collect();
        // "[jit-gdb:", "source", "text", "cut:", KEPT, "of", TOTAL, "bytes", "kept"
        (words[4].parse().unwrap(), words[6].parse().unwrap())
    }

    #[test]
    fn long_source_texts_are_cut_at_a_line_break_and_say_so() {
        let line = "let value = compute(argument, another_argument); // 64 bytes ..\n";
        assert_eq!(line.len(), 64);
        let text = line.repeat(5 * MAX_SOURCE_BYTES / 64);
        let mut o = JitObject::new();
        o.set_source("big.js", &text).unwrap();
        let kept_text = o.source("big.js").unwrap();
        assert!(kept_text.len() <= MAX_SOURCE_BYTES, "{}", kept_text.len());
        let (kept, total) = cut_counts(kept_text);
        assert_eq!(total, text.len());
        assert_eq!(kept % 64, 0, "cut after a whole line");
        assert!(kept > MAX_SOURCE_BYTES - 200, "{kept}");
        assert_eq!(&kept_text[..kept], &text[..kept]);
        assert_eq!(
            &kept_text[kept..],
            format!("[jit-gdb: source text cut: {kept} of {total} bytes kept]\n")
        );

        // Exactly at the limit: kept whole; one byte more: cut.
        let exact = "é".repeat(MAX_SOURCE_BYTES / 2);
        o.set_source("exact.js", &exact).unwrap();
        assert_eq!(o.source("exact.js"), Some(exact.as_str()));
        let over = format!("{exact}\n");
        o.set_source("over.js", &over).unwrap();
        let cut = o.source("over.js").unwrap();
        let (kept, total) = cut_counts(cut);
        assert_eq!(total, MAX_SOURCE_BYTES + 1);
        // One long line: cut inside it, on a character boundary, then a line break.
        assert!(cut.len() <= MAX_SOURCE_BYTES && kept % 2 == 0, "{kept}");
        assert_eq!(&cut[..kept + 1], format!("{}\n", &exact[..kept]));

        // NULs count as the 3 bytes they become: a text of NULs within the limit as bytes
        // is cut, after its last line break that leaves room.
        let nuls = format!(
            "{}\n{}",
            "a".repeat(1000),
            "\0".repeat(MAX_SOURCE_BYTES / 2)
        );
        o.set_source("nuls.js", &nuls).unwrap();
        let cut = o.source("nuls.js").unwrap();
        assert_eq!(cut_counts(cut), (1001, 1001 + 3 * MAX_SOURCE_BYTES / 2));
        assert!(cut.starts_with(&nuls[..1001]));
    }

    #[cfg(feature = "runtime")]
    #[test]
    fn merged_objects_keep_the_first_text_of_each_file() {
        let mut a = object_with(&[&[1]], &["a.js"]);
        a.set_source("a.js", "first a").unwrap();
        let mut b = object_with(&[&[2]], &["b.js"]);
        b.set_source("b.js", "b").unwrap();
        b.set_source("a.js", "second a").unwrap();
        let m = JitObject::merged(Arch::HOST, [&a, &b]);
        assert_eq!(
            m.sources().collect::<Vec<_>>(),
            [("a.js", "first a"), ("b.js", "b")]
        );
    }

    #[test]
    fn register_rules_are_checked_naming_function_and_field() {
        use crate::arch::x86_64::{R12, R13, RBX, RIP, RSP};
        let mut o = JitObject::new();
        let f = o.add_function("saver", 0x1000, 32).unwrap();
        let err = |o: &mut JitObject, off, reg, rule| {
            let e = o.add_register_rule(f, off, reg, rule).unwrap_err();
            assert!(matches!(e, Error::BadRows { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(msg.starts_with("function `saver`: "), "{msg}");
            msg
        };
        assert!(err(&mut o, 4, RSP, RegisterRule::SameValue).contains("rsp (7)"));
        assert!(err(&mut o, 4, RIP, RegisterRule::SameValue).contains("rip (16)"));
        assert!(err(&mut o, 4, 6, RegisterRule::SameValue).contains("rbp (6)"));
        assert!(err(&mut o, 4, 40, RegisterRule::SameValue).contains("register 40"));
        assert!(err(&mut o, 32, R12, RegisterRule::SameValue).contains("outside the function"));
        for n in [-8, 0, 8, -20, -(MAX_SAVE_DISTANCE + 8)] {
            let msg = err(&mut o, 4, R12, RegisterRule::AtCfa(n));
            assert!(msg.contains("is not a save slot"), "{msg}");
        }
        let msg = err(&mut o, 4, R12, RegisterRule::InRegister(RSP));
        assert!(msg.contains("the register it is kept in"), "{msg}");
        assert!(err(&mut o, 4, R12, RegisterRule::InRegister(R12)).contains("SameValue"));
        o.add_register_rule(f, 4, R12, RegisterRule::AtCfa(-24))
            .unwrap();
        o.add_register_rule(f, 4, R13, RegisterRule::AtCfa(-MAX_SAVE_DISTANCE))
            .unwrap();
        assert!(err(&mut o, 4, R12, RegisterRule::SameValue).contains("two rules"));
        assert!(err(&mut o, 2, RBX, RegisterRule::SameValue).contains("offset order"));
        o.add_register_rule(f, 20, R12, RegisterRule::SameValue)
            .unwrap();
        let func = o.functions().get(f).unwrap();
        assert_eq!(func.register_rules().len(), 3, "refused rules are not kept");
        let rules = func.register_rules();
        assert_eq!(register_rule_at(rules, R12, 3), None);
        assert_eq!(
            register_rule_at(rules, R12, 4),
            Some(RegisterRule::AtCfa(-24))
        );
        assert_eq!(
            register_rule_at(rules, R12, 19),
            Some(RegisterRule::AtCfa(-24))
        );
        assert_eq!(
            register_rule_at(rules, R12, 20),
            Some(RegisterRule::SameValue)
        );
        assert_eq!(register_rule_at(rules, RBX, 20), None);
        // Rules take part in equality.
        let mut other = JitObject::new();
        let g = other.add_function("saver", 0x1000, 32).unwrap();
        assert_ne!(other, o);
        other
            .add_register_rule(g, 4, R12, RegisterRule::AtCfa(-24))
            .unwrap();
        other
            .add_register_rule(g, 4, R13, RegisterRule::AtCfa(-MAX_SAVE_DISTANCE))
            .unwrap();
        other
            .add_register_rule(g, 20, R12, RegisterRule::SameValue)
            .unwrap();
        assert_eq!(other, o);
    }

    #[test]
    fn aarch64_register_rules_are_checked_against_its_registers() {
        use crate::arch::aarch64::{PC, SP, X19, X29, X30};
        let mut a = JitObject::with_arch(Arch::Aarch64);
        let h = a.add_function("h", 0x1000, 32).unwrap();
        let err = |a: &mut JitObject, off, reg, rule| {
            let e = a.add_register_rule(h, off, reg, rule).unwrap_err();
            assert!(matches!(e, Error::BadRows { .. }), "{e:?}");
            e.to_string()
        };
        assert!(err(&mut a, 4, SP, RegisterRule::SameValue).contains("sp (31)"));
        assert!(err(&mut a, 4, PC, RegisterRule::SameValue).contains("pc (32)"));
        assert!(err(&mut a, 4, X29, RegisterRule::SameValue).contains("x29 (29)"));
        assert!(err(&mut a, 4, 33, RegisterRule::SameValue).contains("register 33"));
        let msg = err(&mut a, 4, X19, RegisterRule::InRegister(SP));
        assert!(msg.contains("the register it is kept in"), "{msg}");
        for n in [0, 8, -12, -(MAX_SAVE_DISTANCE + 8)] {
            let msg = err(&mut a, 4, X19, RegisterRule::AtCfa(n));
            assert!(msg.contains("is not a save slot"), "{msg}");
            assert!(msg.contains("x19"), "named by its aarch64 name: {msg}");
        }
        // `stp x19, x20, [sp, #-16]!` in a leaf: x20 at CFA - 8 (no frame record there).
        a.add_register_rule(h, 4, X19, RegisterRule::AtCfa(-16))
            .unwrap();
        a.add_register_rule(h, 4, 20, RegisterRule::AtCfa(-8))
            .unwrap();
        // `str x30, [sp, #-16]!`: the return address in a slot of its own.
        a.add_register_rule(h, 8, X30, RegisterRule::AtCfa(-16))
            .unwrap();
        a.add_register_rule(h, 12, 21, RegisterRule::InRegister(9))
            .unwrap();
        let rules = a.functions().get(h).unwrap().register_rules();
        assert_eq!(rules.len(), 4);
        assert_eq!(
            register_rule_at(rules, X30, 8),
            Some(RegisterRule::AtCfa(-16))
        );
        // x86-64 numbers mean other registers there: rbx (3) is x3, allowed; 40 is none.
        let mut x = JitObject::with_arch(Arch::X86_64);
        let g = x.add_function("g", 0x1000, 32).unwrap();
        assert!(x
            .add_register_rule(g, 4, X19, RegisterRule::SameValue)
            .unwrap_err()
            .to_string()
            .contains("not an x86-64 general-purpose register"));
    }

    #[test]
    fn aarch64_frame_pointer_rows() {
        use crate::arch::aarch64;
        let mut o = JitObject::with_arch(Arch::Aarch64);
        let f = o.add_function("f", 0x1000, 40).unwrap();
        // stp 0-4, mov 4-8, body, ldp 28-32, ret 32-36, more code, ...
        o.set_frame_pointer(f, 4, 8).unwrap();
        o.add_epilogue(f, 32, 36).unwrap();
        let rows = o
            .functions()
            .get(f)
            .unwrap()
            .frame()
            .rows(Arch::Aarch64, 40);
        let at = |row: UnwindRow, offset| UnwindRow { offset, ..row };
        assert_eq!(
            rows,
            [
                aarch64::ENTRY,
                at(aarch64::PUSHED, 4),
                at(aarch64::FRAME_SET_UP, 8),
                at(aarch64::ENTRY, 32),
                at(aarch64::FRAME_SET_UP, 36),
            ]
        );
        // Entry: CFA = sp + 0, nothing saved; after stp: sp + 16, record at CFA - 16;
        // after mov: x29 + 16.
        assert_eq!(
            (rows[0].cfa_base, rows[0].cfa_offset, rows[0].fp_offset),
            (CfaBase::Sp, 0, 0)
        );
        assert_eq!(
            (rows[1].cfa_base, rows[1].cfa_offset, rows[1].fp_offset),
            (CfaBase::Sp, 16, -16)
        );
        assert_eq!(
            (rows[2].cfa_base, rows[2].cfa_offset, rows[2].fp_offset),
            (CfaBase::Fp, 16, -16)
        );
        check_unwind_rows(Arch::Aarch64, &rows, 40).unwrap();
        // The entry row is no x86-64 row (the return address would have no room).
        assert!(check_unwind_rows(Arch::X86_64, &rows, 40).is_err());
        assert_eq!(
            Frame::Default.rows(Arch::Aarch64, 40),
            [aarch64::FRAME_SET_UP]
        );
        // Explicit rows: sp + 0 is an aarch64 entry, sp - 16 is nothing.
        o.set_unwind(f, &[UnwindRow::AARCH64_ENTRY]).unwrap();
        let below = UnwindRow {
            cfa_offset: -16,
            ..UnwindRow::AARCH64_ENTRY
        };
        let msg = o.set_unwind(f, &[below]).unwrap_err().to_string();
        assert!(msg.contains("below the stack pointer"), "{msg}");
    }

    #[test]
    fn frame_pointer_rows() {
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 20).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 10, 11).unwrap();
        o.add_epilogue(f, 18, 19).unwrap();
        let rows = o.functions().get(f).unwrap().frame().rows(Arch::X86_64, 20);
        let offs: Vec<u32> = rows.iter().map(|r| r.offset).collect();
        assert_eq!(offs, vec![0, 1, 4, 10, 11, 18, 19]);
        check_unwind_rows(Arch::X86_64, &rows, 20).unwrap();
        assert_eq!(rows[2].cfa_base, CfaBase::Fp);
        assert_eq!(rows[3].cfa_base, CfaBase::Sp);
        assert!(o.add_epilogue(f, 12, 13).is_err(), "out of order");
    }
}
