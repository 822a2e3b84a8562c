//! The data model: a [`JitObject`] is a batch of JIT-compiled functions that becomes one
//! debugger entry. Both payload encoders (ELF and compact records) serialise this model, and
//! the compact decoder produces it again, so every tool agrees on what a function is.
//!
//! Every setter validates its input: a model that exists is one that can be encoded (except
//! for format-specific limits, checked by the encoders).

use std::cell::RefCell;
use std::sync::Arc;

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
/// code belongs to source line `line`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LineRow {
    pub offset: u32,
    pub line: u32,
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
/// its register). The return address is at its architecture's place (x86-64: CFA - 8), and
/// the caller's stack pointer is the CFA.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnwindRow {
    pub offset: u32,
    pub cfa_base: CfaBase,
    pub cfa_offset: i32,
    pub fp_offset: i32,
}

impl UnwindRow {
    /// A function's entry state on x86-64: CFA = SP + 8, frame pointer untouched.
    pub const X86_64_ENTRY: UnwindRow = UnwindRow {
        offset: 0,
        cfa_base: CfaBase::Sp,
        cfa_offset: 8,
        fp_offset: 0,
    };
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
        let _ = arch; // x86-64 layout; aarch64 frame records use the same offsets from x29.
        let fp_rule = |offset| UnwindRow {
            offset,
            cfa_base: CfaBase::Fp,
            cfa_offset: 16,
            fp_offset: -16,
        };
        match self {
            Frame::Default => vec![fp_rule(0)],
            Frame::Rows(rows) => rows.clone(),
            Frame::FramePointer {
                push_end,
                setup_end,
                epilogues,
            } => {
                let mut rows = vec![UnwindRow::X86_64_ENTRY];
                rows.push(UnwindRow {
                    offset: *push_end,
                    cfa_base: CfaBase::Sp,
                    cfa_offset: 16,
                    fp_offset: -16,
                });
                if setup_end > push_end {
                    rows.push(fp_rule(*setup_end));
                }
                for e in epilogues {
                    rows.push(UnwindRow {
                        offset: e.restore_end,
                        ..UnwindRow::X86_64_ENTRY
                    });
                    if u64::from(e.ret_end) < size {
                        rows.push(fp_rule(e.ret_end));
                    }
                }
                rows
            }
        }
    }
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
    /// In memory at frame pointer + offset.
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

/// One JIT-compiled function.
///
/// Kept small (a runtime builds many of them, an object holds them in one vector): boxed
/// slices rather than vectors, and the rarely used blocks, variables and call sites behind
/// one pointer.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Function {
    name: Box<str>,
    start: u64,
    size: u32,
    /// Shared with the other functions of the object that use the same file (most objects
    /// use one), so that setting lines allocates no copy of the name per function.
    file: Option<Arc<str>>,
    lines: Box<[LineRow]>,
    frame: Frame,
    /// `None` while the function has no blocks, variables or call sites (never an empty box,
    /// so that equality does not depend on how a function was built).
    extras: Option<Box<Extras>>,
}

/// The parts of a [`Function`] most functions do not have.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct Extras {
    blocks: Vec<Block>,
    variables: Vec<Variable>,
    calls: Vec<CallSite>,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.name)
            .field("start", &self.start)
            .field("size", &self.size)
            .field("file", &self.file)
            .field("lines", &self.lines)
            .field("frame", &self.frame)
            .field("blocks", &self.blocks())
            .field("variables", &self.variables())
            .field("calls", &self.calls())
            .finish()
    }
}

impl Function {
    /// The function's (symbol) name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Address of the first instruction.
    pub fn start(&self) -> u64 {
        self.start
    }
    /// Size of the code in bytes.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// One past the last byte of code.
    pub fn end(&self) -> u64 {
        self.start + u64::from(self.size)
    }
    /// Source file of the line rows, if any were set.
    pub fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }
    /// Line rows, sorted by offset.
    pub fn lines(&self) -> &[LineRow] {
        &self.lines
    }
    /// The frame description.
    pub fn frame(&self) -> &Frame {
        &self.frame
    }
    /// Nested blocks; a block's parent comes before it.
    pub fn blocks(&self) -> &[Block] {
        self.extras.as_ref().map_or(&[], |e| &e.blocks)
    }
    /// Parameters and locals.
    pub fn variables(&self) -> &[Variable] {
        self.extras.as_ref().map_or(&[], |e| &e.variables)
    }
    /// Call sites, in increasing return-offset order.
    pub fn calls(&self) -> &[CallSite] {
        self.extras.as_ref().map_or(&[], |e| &e.calls)
    }
    fn extras_mut(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Box::default)
    }
    /// Does the function contain `addr`?
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end()
    }
}

thread_local! {
    /// The file name this thread gave `set_lines` last and did not find in the object: see
    /// `JitObject::shared_file`.
    static LAST_FILE: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// Checks a name (function, block, variable or file): non-empty, no NUL.
fn check_text(what: &str, s: &str) -> std::result::Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if has_nul(s.as_bytes()) {
        return Err(format!(
            "{what} `{}` contains a NUL byte",
            s.replace('\0', "\\0")
        ));
    }
    Ok(())
}

/// Does `b` contain a zero byte? Names are short and checked once per function: eight
/// bytes at a time without a call beats a general search.
fn has_nul(b: &[u8]) -> bool {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = b.chunks_exact(8);
    let mut any = 0;
    for w in words.by_ref() {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(w);
        let x = u64::from_le_bytes(bytes);
        // The high bit of a byte of the result is set if that byte of x is zero (or, only
        // above a zero byte, 0x01 after a borrow): nonzero exactly when x has a zero byte.
        any |= x.wrapping_sub(LOW) & !x & HIGH;
    }
    any != 0 || words.remainder().contains(&0)
}

/// Validates line rows for a function of `size` bytes.
fn check_line_rows(rows: &[LineRow], size: u32) -> std::result::Result<(), String> {
    // One branch-free pass for the usual case of good rows; the loop below names the problem.
    let mut next = 0u32; // lowest offset the next row may have
    let mut good = true;
    for r in rows {
        good &= (r.offset >= next) & (r.offset < size) & (r.line != 0);
        next = r.offset.wrapping_add(1);
    }
    if good {
        return Ok(());
    }
    let mut prev: Option<u32> = None;
    for (i, r) in rows.iter().enumerate() {
        if r.offset >= size {
            return Err(format!(
                "line row {i} at offset {} is outside the function (size {size})",
                r.offset
            ));
        }
        if let Some(p) = prev.filter(|&p| r.offset <= p) {
            return Err(format!(
                "line row {i} at offset {} does not come after row {} at offset {p}: rows must be in strictly increasing offset order",
                r.offset,
                i - 1
            ));
        }
        if r.line == 0 {
            return Err(format!("line row {i} has line 0: lines start at 1"));
        }
        prev = Some(r.offset);
    }
    Ok(())
}

/// Validates frame-description rows for a function of `size` bytes.
pub(crate) fn check_unwind_rows(rows: &[UnwindRow], size: u32) -> std::result::Result<(), String> {
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
        if r.cfa_base == CfaBase::Sp && r.cfa_offset < 8 {
            return Err(format!(
                "unwind row {i}: CFA = SP + {} leaves no room for the return address (needs SP + 8 or more)",
                r.cfa_offset
            ));
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
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JitObject {
    arch: Arch,
    functions: Vec<Function>,
}

impl Default for JitObject {
    fn default() -> Self {
        Self::new()
    }
}

/// Index of a function inside its [`JitObject`].
pub type FunctionId = usize;

impl JitObject {
    /// An empty object for the host architecture.
    pub fn new() -> JitObject {
        JitObject::with_arch(Arch::HOST)
    }

    /// An empty object for `arch`.
    pub fn with_arch(arch: Arch) -> JitObject {
        JitObject {
            arch,
            functions: Vec::new(),
        }
    }

    /// Architecture of the code.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The functions, in the order they were added.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    fn function_mut(&mut self, f: FunctionId) -> Result<&mut Function> {
        self.functions.get_mut(f).ok_or(Error::NoSuchFunction(f))
    }

    /// Adds a function occupying `[start, start + size)` and returns its index. Overlaps
    /// between functions are checked when the object is encoded.
    pub fn add_function(&mut self, name: &str, start: u64, size: u64) -> Result<FunctionId> {
        check_text("the name", name).map_err(Error::BadName)?;
        if size == 0 || start.checked_add(size).is_none() {
            return Err(Error::EmptyOrOverflowingFunction {
                name: name.into(),
                start,
                size,
            });
        }
        let size = u32::try_from(size).map_err(|_| {
            Error::TooLarge(format!(
                "function `{name}` has {size} bytes; at most 4 GiB per function"
            ))
        })?;
        self.functions.push(Function {
            name: name.into(),
            start,
            size,
            file: None,
            lines: Box::default(),
            frame: Frame::Default,
            extras: None,
        });
        Ok(self.functions.len() - 1)
    }

    /// Sets the source file and line rows of function `f` (replacing earlier ones).
    /// Rows are sorted by strictly increasing offset, all inside the function; lines start at 1.
    pub fn set_lines(&mut self, f: FunctionId, file: &str, rows: &[LineRow]) -> Result<()> {
        check_text("the file name", file).map_err(Error::BadFileName)?;
        let func = self.function_mut(f)?;
        if let Err(why) = check_line_rows(rows, func.size) {
            return Err(Error::BadRows {
                function: func.name.to_string(),
                why,
            });
        }
        let file = self.shared_file(f, file);
        let func = &mut self.functions[f];
        func.file = Some(file);
        func.lines = rows.into();
        Ok(())
    }

    /// `file` as a shared name: most objects use one file or a few, and a runtime that
    /// registers functions one per object uses the same files again and again, so the name
    /// of a recently added function of this object, or else the name this thread used
    /// last, almost always matches (a miss only costs a copy).
    fn shared_file(&self, f: FunctionId, file: &str) -> Arc<str> {
        let own = self.functions.get(f).and_then(|g| g.file.as_ref());
        let recent = self
            .functions
            .iter()
            .rev()
            .take(4)
            .filter_map(|g| g.file.as_ref());
        if let Some(name) = own.into_iter().chain(recent).find(|name| ***name == *file) {
            return name.clone();
        }
        LAST_FILE.with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some(name) if **name == *file => name.clone(),
                _ => last.insert(Arc::from(file)).clone(),
            }
        })
    }

    /// Sets explicit frame-description rows for function `f`.
    pub fn set_unwind(&mut self, f: FunctionId, rows: &[UnwindRow]) -> Result<()> {
        let func = self.function_mut(f)?;
        check_unwind_rows(rows, func.size).map_err(|why| Error::BadRows {
            function: func.name.to_string(),
            why,
        })?;
        func.frame = Frame::Rows(rows.to_vec());
        Ok(())
    }

    /// Describes function `f` as a standard frame-pointer function: `push_end` is the offset
    /// just after `push rbp`, `setup_end` just after `mov rbp, rsp`.
    pub fn set_frame_pointer(
        &mut self,
        f: FunctionId,
        push_end: u32,
        setup_end: u32,
    ) -> Result<()> {
        let func = self.function_mut(f)?;
        if push_end == 0 || setup_end < push_end || setup_end >= func.size {
            return Err(Error::BadRows {
                function: func.name.to_string(),
                why: format!(
                    "frame-pointer prologue offsets push_end {push_end}, setup_end {setup_end} must satisfy 0 < push_end <= setup_end < size ({})",
                    func.size
                ),
            });
        }
        func.frame = Frame::FramePointer {
            push_end,
            setup_end,
            epilogues: Vec::new(),
        };
        Ok(())
    }

    /// Adds an epilogue to a frame-pointer function (after [`Self::set_frame_pointer`]):
    /// `restore_end` just after `pop rbp` / `leave`, `ret_end` just after the `ret`.
    pub fn add_epilogue(&mut self, f: FunctionId, restore_end: u32, ret_end: u32) -> Result<()> {
        let func = self.function_mut(f)?;
        let name = func.name.to_string();
        let size = func.size;
        let bad = |why: String| Error::BadRows {
            function: name.clone(),
            why,
        };
        let Frame::FramePointer {
            setup_end,
            epilogues,
            ..
        } = &mut func.frame
        else {
            return Err(bad(
                "an epilogue needs a frame-pointer description first (set_frame_pointer)".into(),
            ));
        };
        let after = epilogues.last().map_or(*setup_end, |e| e.ret_end);
        if restore_end <= after || ret_end <= restore_end || ret_end > size {
            return Err(bad(format!(
                "epilogue restore_end {restore_end}, ret_end {ret_end} must satisfy {after} < restore_end < ret_end <= size ({size}), in address order"
            )));
        }
        epilogues.push(Epilogue {
            restore_end,
            ret_end,
        });
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
        let func = self.function_mut(f)?;
        let bad = |why: String| Error::BadRows {
            function: func.name.to_string(),
            why,
        };
        check_text("the block name", name).map_err(&bad)?;
        if start >= end || end > func.size {
            return Err(bad(format!(
                "block `{name}` [{start}, {end}) must be non-empty and inside the function (size {})",
                func.size
            )));
        }
        if let Some(p) = parent {
            let Some(pb) = func.blocks().get(p as usize) else {
                return Err(bad(format!(
                    "block `{name}`: parent block {p} does not exist"
                )));
            };
            if start < pb.start || end > pb.end {
                return Err(bad(format!(
                    "block `{name}` [{start}, {end}) is not inside its parent `{}` [{}, {})",
                    pb.name, pb.start, pb.end
                )));
            }
        }
        let index = u32::try_from(func.blocks().len())
            .map_err(|_| Error::TooLarge("more than 2^32 blocks".into()))?;
        func.extras_mut().blocks.push(Block {
            name: name.into(),
            start,
            end,
            parent,
        });
        Ok(index)
    }

    /// Adds a parameter or local variable to function `f` (ELF payloads only).
    pub fn add_variable(&mut self, f: FunctionId, var: Variable) -> Result<()> {
        let func = self.function_mut(f)?;
        let bad = |why: String| Error::BadVariable {
            function: func.name.to_string(),
            why,
        };
        check_text("the variable name", &var.name).map_err(&bad)?;
        if let Location::Register(r) = var.location {
            if r > 127 {
                return Err(bad(format!(
                    "`{}`: register {r} is not a DWARF register number of this architecture",
                    var.name
                )));
            }
        }
        func.extras_mut().variables.push(var);
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
        let func = self.function_mut(f)?;
        let bad = |why: String| Error::BadRows {
            function: func.name.to_string(),
            why,
        };
        let kind = if site.tail_call {
            "tail call"
        } else {
            "call site"
        };
        let at = site.return_offset;
        if at == 0 || at > func.size {
            return Err(bad(format!(
                "{kind} returning to offset {at} is outside the function: the return offset is just after the call instruction, in 1..={} (size {})",
                func.size, func.size
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
        func.extras_mut().calls.push(site);
        Ok(())
    }

    /// Checks what can only be checked on the whole object: it has functions, they do not
    /// overlap. Encoders call this.
    pub fn validate(&self) -> Result<()> {
        if self.functions.is_empty() {
            return Err(Error::EmptyObject);
        }
        // Runtimes usually add functions in address order: then one pass proves that none
        // overlap (each starts at or after the end of the one before, so ends increase too).
        if self.functions.windows(2).all(|w| w[1].start >= w[0].end()) {
            return Ok(());
        }
        let mut order: Vec<usize> = (0..self.functions.len()).collect();
        order.sort_by_key(|&i| self.functions[i].start);
        for w in order.windows(2) {
            let (a, b) = (&self.functions[w[0]], &self.functions[w[1]]);
            if b.start < a.end() {
                return Err(Error::Overlap {
                    first: a.name.to_string(),
                    second: b.name.to_string(),
                });
            }
        }
        Ok(())
    }

    /// All functions of `objects`, in order, in one object of `arch` (the registry
    /// consolidates many small registrations into one debugger entry). Not validated: the
    /// encoder does that.
    #[cfg(feature = "runtime")]
    pub(crate) fn merged<'a>(
        arch: Arch,
        objects: impl IntoIterator<Item = &'a JitObject>,
    ) -> JitObject {
        JitObject {
            arch,
            functions: objects
                .into_iter()
                .flat_map(|o| o.functions.iter().cloned())
                .collect(),
        }
    }

    /// Lowest start and highest end over all functions (`None` if empty).
    pub fn address_range(&self) -> Option<(u64, u64)> {
        let lo = self.functions.iter().map(|f| f.start).min()?;
        let hi = self.functions.iter().map(|f| f.end()).max()?;
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
    fn functions_share_file_names_and_keep_their_own() {
        let mut o = JitObject::new();
        let rows = [LineRow { offset: 0, line: 3 }];
        for (i, file) in ["a.js", "a.js", "b.js", "a.js", "a.js"].iter().enumerate() {
            let f = o.add_function("f", 0x1000 + 16 * i as u64, 16).unwrap();
            o.set_lines(f, file, &rows).unwrap();
        }
        fn file(o: &JitObject, i: usize) -> &str {
            o.functions()[i].file().unwrap()
        }
        assert_eq!(
            (0..5).map(|i| file(&o, i)).collect::<Vec<_>>(),
            ["a.js", "a.js", "b.js", "a.js", "a.js"]
        );
        // One copy of "a.js" for all its functions.
        assert!(std::ptr::eq(file(&o, 0), file(&o, 1)));
        assert!(std::ptr::eq(file(&o, 0), file(&o, 4)));
        // Replacing a function's lines replaces its file, and only its file.
        o.set_lines(1, "c.js", &rows).unwrap();
        assert_eq!(
            (file(&o, 0), file(&o, 1), file(&o, 3)),
            ("a.js", "c.js", "a.js")
        );
        // A refused change leaves file and rows as they were.
        let bad = [LineRow { offset: 0, line: 0 }];
        assert!(o.set_lines(1, "d.js", &bad).is_err());
        assert_eq!(file(&o, 1), "c.js");
        assert_eq!(o.functions()[1].lines(), rows);
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
            o.functions()[f].calls(),
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
        let calls = o.functions()[f].calls();
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
    fn frame_pointer_rows() {
        let mut o = JitObject::new();
        let f = o.add_function("f", 0x1000, 20).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 10, 11).unwrap();
        o.add_epilogue(f, 18, 19).unwrap();
        let rows = o.functions()[f].frame().rows(Arch::X86_64, 20);
        let offs: Vec<u32> = rows.iter().map(|r| r.offset).collect();
        assert_eq!(offs, vec![0, 1, 4, 10, 11, 18, 19]);
        check_unwind_rows(&rows, 20).unwrap();
        assert_eq!(rows[2].cfa_base, CfaBase::Fp);
        assert_eq!(rows[3].cfa_base, CfaBase::Sp);
        assert!(o.add_epilogue(f, 12, 13).is_err(), "out of order");
    }
}
