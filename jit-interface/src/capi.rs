//! The C API (`include/jit_interface.h`, generated from this file by cbindgen).
//!
//! Every entry point catches panics and reports errors through [`jit_last_error`]; pointers
//! and enum values coming from C are checked before use, so bad input is an error, never
//! undefined behaviour. Enum-typed values are received as `uint32_t` (a C caller may pass any
//! integer) and the header declares them with the enum names (see `cbindgen.toml`).
#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::Error;
use crate::model::{
    BaseType, CallTarget, CfaBase, FunctionId, JitObject, LineRow, Location, RegisterRule,
    UnwindRow, Variable, VariableKind,
};
use crate::registry::{register, Format, Registration};

/// An object under construction: a batch of functions that becomes one debugger entry.
pub struct jit_object {
    inner: JitObject,
}

/// A registered object; `jit_unregister` removes it from the debugger and frees it. Opaque:
/// a handle is never a pointer to one (see `Handles`).
pub struct jit_registration {
    _opaque: [u8; 0],
}

/// The registrations handed to C and not unregistered yet. A handle is a slot index and
/// that slot's generation packed into a pointer-sized value (never dereferenced), so a
/// handle unregistered twice, unregistered after `jit_unregister_many`, or never returned by
/// `jit_register` is refused with an error, even after its slot was reused by a later
/// registration (the generation differs): before, a second `jit_unregister` freed the
/// handle's box again and corrupted the heap.
struct Handles {
    /// Each slot's generation (bumped when it is freed) and registration.
    slots: Vec<(u32, Option<Registration>)>,
    free: Vec<u32>,
}

// Handles pack a 32-bit slot and a 32-bit generation into a pointer.
const _: () = assert!(
    usize::BITS == 64,
    "the C API's handles need 64-bit pointers"
);

static HANDLES: std::sync::Mutex<Handles> = std::sync::Mutex::new(Handles {
    slots: Vec::new(),
    free: Vec::new(),
});

fn handles() -> std::sync::MutexGuard<'static, Handles> {
    // A panic while held cannot leave a slot half-changed (one store).
    HANDLES.lock().unwrap_or_else(|e| e.into_inner())
}

impl Handles {
    /// Keeps `r`; its handle: (slot + 1) in the high half, the generation in the low half
    /// (never NULL).
    fn insert(&mut self, r: Registration) -> *mut jit_registration {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize].1 = Some(r);
                i
            }
            None => {
                self.slots.push((0, Some(r)));
                (self.slots.len() - 1) as u32
            }
        };
        let generation = self.slots[slot as usize].0;
        let packed = ((u64::from(slot) + 1) << 32) | u64::from(generation);
        // An integer in a pointer's clothes: C never dereferences the opaque type.
        packed as usize as *mut jit_registration
    }

    /// Takes back the registration `handle` names, if it is live.
    fn take(&mut self, handle: *mut jit_registration) -> Option<Registration> {
        let packed = handle as usize as u64;
        let slot = (packed >> 32).checked_sub(1)? as usize;
        let generation = packed as u32;
        let (g, r) = self.slots.get_mut(slot)?;
        if *g != generation || r.is_none() {
            return None;
        }
        *g = g.wrapping_add(1);
        self.free.push(slot as u32);
        r.take()
    }
}

/// Takes back the registrations of the handles of `regs` that are live; the others are
/// counted, for the error.
fn take_handles(regs: &[*mut jit_registration]) -> (Vec<Registration>, usize) {
    let mut live = handles();
    let mut taken = Vec::with_capacity(regs.len());
    let mut unknown = 0;
    for &r in regs {
        match live.take(r) {
            Some(reg) => taken.push(reg),
            None => unknown += 1,
        }
    }
    (taken, unknown)
}

/// Payload format: `JIT_FORMAT_COMPACT` (0) or `JIT_FORMAT_ELF` (1).
pub type jit_format = u32;
/// Base of the CFA in an unwind row: `JIT_CFA_SP` (0) or `JIT_CFA_FP` (1).
pub type jit_cfa_base = u32;
/// `JIT_VAR_PARAMETER` (0) or `JIT_VAR_LOCAL` (1).
pub type jit_var_kind = u32;
/// `JIT_TYPE_I8` (0) ... `JIT_TYPE_POINTER` (10), in the order i8 i16 i32 i64 u8 u16 u32 u64
/// f32 f64 pointer.
pub type jit_base_type = u32;
/// `JIT_LOC_REGISTER` (0, value = DWARF register number) or `JIT_LOC_FRAME_OFFSET`
/// (1, value = offset from the frame pointer).
pub type jit_location_kind = u32;
/// How a register of the caller is found (`jit_object_add_register_rule`):
/// `JIT_REG_AT_CFA` (0, value = offset from the CFA of its stack slot, e.g. -24),
/// `JIT_REG_IN_REGISTER` (1, value = DWARF number of the register that holds it),
/// `JIT_REG_SAME_VALUE` (2, value 0: not changed), `JIT_REG_UNDEFINED` (3, value 0: lost).
pub type jit_register_rule = u32;

/// One line row: from code offset `offset` on, source line `line`. Line 0
/// (`JIT_LINE_GAP`) is a gap: the code from `offset` on has no source line (stubs, spills,
/// runtime glue) up to the next row, rather than the line of the row before; debuggers
/// show it without a line. A gap may come first and last, not twice in a row.
#[repr(C)]
pub struct jit_line {
    pub offset: u32,
    pub line: u32,
}

/// One frame-description row: from code offset `offset` on, CFA = base + `cfa_offset`; the
/// caller's frame pointer is saved at CFA + `fp_offset` (0 = not saved).
#[repr(C)]
pub struct jit_unwind_row {
    pub offset: u32,
    pub cfa_base: jit_cfa_base,
    pub cfa_offset: i32,
    pub fp_offset: i32,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: String) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f`, turning an error or a panic into `fallback` plus a message for `jit_last_error`.
fn guard<T>(fallback: T, f: impl FnOnce() -> Result<T, Error>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_error(e.to_string());
            fallback
        }
        Err(_) => {
            set_error("internal error (panic) in jit-interface; please report it".into());
            fallback
        }
    }
}

fn text<'a>(p: *const c_char, what: &'static str) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(Error::NullPointer(what));
    }
    // SAFETY: non-null and, per the API contract, a NUL-terminated string valid for the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| {
        let why = format!("the {what} is not valid UTF-8: {}", s.to_string_lossy());
        // A function's name keeps its own variant; others name what they are.
        if what == "function name" {
            Error::BadName(why)
        } else {
            Error::BadText(why)
        }
    })
}

/// A source file name from C: as [`text`], but its errors name the file name.
fn file_name<'a>(p: *const c_char) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(Error::NullPointer("file"));
    }
    // SAFETY: non-null and, per the API contract, a NUL-terminated string valid for the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| {
        Error::BadFileName(format!(
            "the file name is not valid UTF-8: {}",
            s.to_string_lossy()
        ))
    })
}

fn object<'a>(obj: *mut jit_object) -> Result<&'a mut JitObject, Error> {
    if obj.is_null() {
        return Err(Error::NullPointer("obj"));
    }
    // SAFETY: non-null and, per the API contract, a live object from `jit_object_new` that no
    // other thread uses during the call.
    Ok(unsafe { &mut (*obj).inner })
}

fn slice<'a, T>(p: *const T, n: usize, what: &'static str) -> Result<&'a [T], Error> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::NullPointer(what));
    }
    // No array is larger than isize::MAX bytes: a count beyond it (SIZE_MAX, a negative
    // length cast to size_t) is a caller's bug, refused before anything is read.
    let fits = n
        .checked_mul(std::mem::size_of::<T>())
        .is_some_and(|bytes| bytes <= isize::MAX as usize);
    if !fits {
        return Err(Error::TooLarge(format!(
            "{what}: a count of {n} elements of {} bytes is larger than any array",
            std::mem::size_of::<T>()
        )));
    }
    // SAFETY: non-null and, per the API contract, pointing to `n` valid elements.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The function a C caller names by the integer `jit_object_add_function` returned: ids
/// are never negative, and one beyond the object's functions is refused by the setter.
fn function_index(f: i32) -> Result<FunctionId, Error> {
    usize::try_from(f)
        .map(FunctionId::from_index)
        .map_err(|_| Error::NegativeFunctionId(f.into()))
}

/// How errors name function `f` of `o`: by its name, or `#f` for an id that names none.
fn function_label(o: &JitObject, f: i32) -> String {
    usize::try_from(f)
        .ok()
        .and_then(|i| o.functions().get(FunctionId::from_index(i)))
        .map_or_else(|| format!("#{f}"), |func| func.name().to_string())
}

/// Refuses `n` rows for function `f` of `o` when it has fewer bytes than that: rows sit at
/// distinct offsets inside their function, so a larger count is a caller's bug (a length
/// variable mixed up, SIZE_MAX), refused before the rows are read or anything allocated.
fn check_row_count(o: &JitObject, f: FunctionId, n: usize, what: &str) -> Result<(), Error> {
    let func = o
        .functions()
        .get(f)
        .ok_or(Error::NoSuchFunction(f.index()))?;
    if n > func.size() as usize {
        return Err(Error::BadRows {
            function: func.name().to_string(),
            why: format!(
                "{n} {what} for a function of {} bytes: rows have distinct offsets inside it, so at most {}",
                func.size(),
                func.size()
            ),
        });
    }
    Ok(())
}

/// Creates an empty object for the host architecture.
#[no_mangle]
pub extern "C" fn jit_object_new() -> *mut jit_object {
    guard(std::ptr::null_mut(), || {
        Ok(Box::into_raw(Box::new(jit_object {
            inner: JitObject::new(),
        })))
    })
}

/// Discards an object that was not registered. NULL is ignored.
///
/// # Safety
/// `obj` is NULL or came from `jit_object_new` and was neither freed nor registered.
#[no_mangle]
pub unsafe extern "C" fn jit_object_free(obj: *mut jit_object) {
    guard((), || {
        if !obj.is_null() {
            // SAFETY: per the contract, `obj` is an owned, live object.
            drop(unsafe { Box::from_raw(obj) });
        }
        Ok(())
    })
}

/// Adds a function `[start, start + size)`; returns its index, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn jit_object_add_function(
    obj: *mut jit_object,
    name: *const c_char,
    start: u64,
    size: u64,
) -> i32 {
    guard(-1, || {
        let o = object(obj)?;
        let name = text(name, "function name")?;
        let i = o.add_function(name, start, size)?;
        i32::try_from(i.index())
            .map_err(|_| Error::TooLarge("more than 2^31 functions in one object".into()))
    })
}

/// Sets the source file and line rows of function `fn`: strictly increasing offsets
/// inside the function, lines from 1 or `JIT_LINE_GAP`. Returns 0, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`; `file` is a NUL-terminated string; `rows` points to `n`
/// rows (may be NULL when `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn jit_object_set_lines(
    obj: *mut jit_object,
    r#fn: i32,
    file: *const c_char,
    rows: *const jit_line,
    n: usize,
) -> c_int {
    guard(-1, || {
        let o = object(obj)?;
        let file = file_name(file)?;
        check_row_count(o, function_index(r#fn)?, n, "line rows")?;
        let rows: Vec<LineRow> = slice(rows, n, "rows")?
            .iter()
            .map(|r| LineRow {
                offset: r.offset,
                line: r.line,
            })
            .collect();
        o.set_lines(function_index(r#fn)?, file, &rows)?;
        Ok(0)
    })
}

/// Most bytes `jit_object_set_source` takes: more is refused before anything is read or
/// allocated (texts above `MAX_SOURCE_BYTES`, 1 MiB, are cut to it anyway).
const MAX_SOURCE_ARG_BYTES: usize = 64 << 20;

/// Attaches the text of source file `file` to the object, for code compiled from a string
/// (eval, a REPL, a fetched script) that has no file on disk: the payload carries it and
/// debuggers show it (`list` in GDB). `file` is the name `jit_object_set_lines` gives the
/// functions' rows; a later call for the same file replaces the text. `text` is `len`
/// bytes, not necessarily NUL-terminated (NULL only when `len` is 0: an empty text);
/// bytes that are not valid UTF-8 are replaced by U+FFFD, and so are NUL bytes. A text of
/// more than 1 MiB is cut after a line break and ends with a line that says how much was
/// kept; `len` above 64 MiB is refused. Returns 0, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`; `file` is a NUL-terminated string; `text` points to
/// `len` readable bytes (or is NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn jit_object_set_source(
    obj: *mut jit_object,
    file: *const c_char,
    text: *const c_char,
    len: usize,
) -> c_int {
    guard(-1, || {
        let o = object(obj)?;
        let file = file_name(file)?;
        // Bounded before the bytes are touched: a bad `len` must not make us read or copy
        // gigabytes.
        if len > MAX_SOURCE_ARG_BYTES {
            return Err(Error::TooLarge(format!(
                "source text of {len} bytes is larger than {MAX_SOURCE_ARG_BYTES} bytes (64 MiB), the most jit_object_set_source takes (texts above 1 MiB are cut to 1 MiB)"
            )));
        }
        let bytes = slice(text.cast::<u8>(), len, "text")?;
        o.set_source(file, &String::from_utf8_lossy(bytes))?;
        Ok(0)
    })
}

/// Sets explicit unwind rows for function `fn`. Returns 0, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`; `rows` points to `n` rows.
#[no_mangle]
pub unsafe extern "C" fn jit_object_set_unwind(
    obj: *mut jit_object,
    r#fn: i32,
    rows: *const jit_unwind_row,
    n: usize,
) -> c_int {
    guard(-1, || {
        let o = object(obj)?;
        check_row_count(o, function_index(r#fn)?, n, "unwind rows")?;
        let mut out = Vec::with_capacity(n.min(1 << 16));
        for (i, r) in slice(rows, n, "rows")?.iter().enumerate() {
            let cfa_base = match r.cfa_base {
                0 => CfaBase::Sp,
                1 => CfaBase::Fp,
                v => {
                    return Err(Error::BadRows {
                        function: function_label(o, r#fn),
                        why: format!(
                        "unwind row {i}: cfa_base {v} is neither JIT_CFA_SP (0) nor JIT_CFA_FP (1)"
                    ),
                    })
                }
            };
            out.push(UnwindRow {
                offset: r.offset,
                cfa_base,
                cfa_offset: r.cfa_offset,
                fp_offset: r.fp_offset,
            });
        }
        o.set_unwind(function_index(r#fn)?, &out)?;
        Ok(0)
    })
}

/// Describes function `fn` as a standard frame-pointer function: `push_end` is the offset just
/// after `push rbp`, `setup_end` just after `mov rbp, rsp`. Returns 0, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`.
#[no_mangle]
pub unsafe extern "C" fn jit_object_set_frame_pointer(
    obj: *mut jit_object,
    r#fn: i32,
    push_end: u32,
    setup_end: u32,
) -> c_int {
    guard(-1, || {
        object(obj)?.set_frame_pointer(function_index(r#fn)?, push_end, setup_end)?;
        Ok(0)
    })
}

/// Adds an epilogue to a frame-pointer function: `restore_end` just after `pop rbp` (or
/// `leave`), `ret_end` just after its `ret`. Returns 0, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`.
#[no_mangle]
pub unsafe extern "C" fn jit_object_add_epilogue(
    obj: *mut jit_object,
    r#fn: i32,
    restore_end: u32,
    ret_end: u32,
) -> c_int {
    guard(-1, || {
        object(obj)?.add_epilogue(function_index(r#fn)?, restore_end, ret_end)?;
        Ok(0)
    })
}

/// Adds a register rule to function `fn`: from code offset `offset` on, the caller's
/// register `reg` (DWARF number: rbx 3, r12-r15 12-15, ...) is found by `rule` with `value`
/// (see `jit_register_rule`). Rules are added in offset order. Callee-saved registers
/// (rbx, r12-r15) without a rule show as `<not saved>` in the debugger's caller frames;
/// before its first rule a register is the caller's. Returns 0, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`.
#[no_mangle]
pub unsafe extern "C" fn jit_object_add_register_rule(
    obj: *mut jit_object,
    r#fn: i32,
    offset: u32,
    reg: u16,
    rule: jit_register_rule,
    value: i32,
) -> c_int {
    guard(-1, || {
        let o = object(obj)?;
        let id = function_index(r#fn)?;
        let function = o
            .functions()
            .get(id)
            .ok_or(Error::NoSuchFunction(id.index()))?
            .name()
            .to_string();
        let bad = |why: String| Error::BadRows {
            function: function.clone(),
            why: format!("register rule at offset {offset}: {why}"),
        };
        let rule = match (rule, value) {
            (0, n) => RegisterRule::AtCfa(n),
            (1, r) => RegisterRule::InRegister(
                u16::try_from(r).map_err(|_| bad(format!("value {r} is no register number")))?,
            ),
            (2, 0) => RegisterRule::SameValue,
            (3, 0) => RegisterRule::Undefined,
            (2 | 3, v) => {
                return Err(bad(format!(
                    "value {v}: JIT_REG_SAME_VALUE and JIT_REG_UNDEFINED take value 0"
                )))
            }
            (k, _) => return Err(bad(format!("rule {k} is not a jit_register_rule (0-3)"))),
        };
        o.add_register_rule(id, offset, reg, rule)?;
        Ok(0)
    })
}

/// Describes function `fn`'s frame by standard DWARF call-frame instructions: `fde` (`fde_len`
/// bytes) is its FDE's instruction stream; `cie` (`cie_len` bytes) the CIE's initial
/// instructions, with its code and data alignment factors and return-address register (NULL
/// `cie` with `cie_len` 0 and the factors 1, -8, 16: the usual x86-64 CIE, CFA = rsp + 8).
/// Replaces the function's frame description and register rules. Bad CFI is refused with
/// the opcode and its byte offset. Returns 0, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`; `cie` and `fde` point to `cie_len` and `fde_len`
/// readable bytes (or are NULL with length 0).
#[no_mangle]
pub unsafe extern "C" fn jit_object_set_cfi(
    obj: *mut jit_object,
    r#fn: i32,
    code_alignment: u64,
    data_alignment: i64,
    return_address_register: u16,
    cie: *const u8,
    cie_len: usize,
    fde: *const u8,
    fde_len: usize,
) -> c_int {
    guard(-1, || {
        let o = object(obj)?;
        let cie_bytes = slice(cie, cie_len, "cie")?;
        let fde = slice(fde, fde_len, "fde")?;
        let params = if cie.is_null() {
            crate::cfi_input::CieParams {
                code_alignment,
                data_alignment,
                return_address_register,
                ..crate::cfi_input::CieParams::X86_64
            }
        } else {
            crate::cfi_input::CieParams {
                code_alignment,
                data_alignment,
                return_address_register,
                initial_instructions: cie_bytes,
            }
        };
        o.set_cfi(function_index(r#fn)?, &params, fde)?;
        Ok(0)
    })
}

/// Adds a named block (scope or inlined region) `[start, end)` (offsets) to function `fn`,
/// inside block `parent` (-1: the function). Returns the block's index, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn jit_object_add_block(
    obj: *mut jit_object,
    r#fn: i32,
    name: *const c_char,
    start: u32,
    end: u32,
    parent: i32,
) -> i32 {
    guard(-1, || {
        let o = object(obj)?;
        let name = text(name, "block name")?;
        let parent = if parent < 0 {
            None
        } else {
            Some(parent as u32)
        };
        let b = o.add_block(function_index(r#fn)?, name, start, end, parent)?;
        i32::try_from(b).map_err(|_| Error::TooLarge("more than 2^31 blocks".into()))
    })
}

/// Adds a parameter or local to function `fn` (ELF payloads only). `value` is the DWARF
/// register number for `JIT_LOC_REGISTER`, the frame-pointer offset for
/// `JIT_LOC_FRAME_OFFSET`. Returns 0, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn jit_object_add_variable(
    obj: *mut jit_object,
    r#fn: i32,
    name: *const c_char,
    kind: jit_var_kind,
    r#type: jit_base_type,
    location: jit_location_kind,
    value: i32,
) -> c_int {
    guard(-1, || {
        let o = object(obj)?;
        let name = text(name, "variable name")?;
        let label = function_label(o, r#fn);
        let bad = |why: String| Error::BadVariable {
            function: label.clone(),
            why: format!("`{name}`: {why}"),
        };
        let kind = match kind {
            0 => VariableKind::Parameter,
            1 => VariableKind::Local,
            v => {
                return Err(bad(format!(
                    "kind {v} is neither JIT_VAR_PARAMETER nor JIT_VAR_LOCAL"
                )))
            }
        };
        let ty = *BaseType::ALL
            .get(r#type as usize)
            .ok_or_else(|| bad(format!("type {} is not a jit_base_type", r#type)))?;
        let location = match (location, u16::try_from(value)) {
            (0, Ok(r)) => Location::Register(r),
            (0, Err(_)) => {
                return Err(bad(format!(
                    "register number {value} is negative or too large"
                )))
            }
            (1, _) => Location::FrameOffset(value),
            (v, _) => return Err(bad(format!("location kind {v} is not a jit_location_kind"))),
        };
        o.add_variable(
            function_index(r#fn)?,
            Variable {
                name: name.into(),
                kind,
                ty,
                location,
            },
        )?;
        Ok(0)
    })
}

/// Adds a call site to function `fn`: the call instruction ending at `return_offset` (the
/// return address, relative to the function start) calls the function at `target`, or, if
/// `tail_call` is nonzero, the jump ending there leaves for it (a tail call; declare all of a
/// function's tail calls if you declare one). `target` is the callee's entry address, or 0
/// if unknown (an indirect call); `target_name` is NULL or the callee's symbol name, for a
/// callee outside the object (e.g. a native function of the host), which lets debuggers
/// find it by name. Call sites are added in increasing `return_offset` order. ELF payloads
/// only: compact payloads leave them out (GDB's reader API has no place for them). Returns
/// 0, or -1.
///
/// # Safety
/// `obj` came from `jit_object_new`; `target_name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn jit_object_add_call_site(
    obj: *mut jit_object,
    r#fn: i32,
    return_offset: u32,
    target: u64,
    target_name: *const c_char,
    tail_call: c_int,
) -> c_int {
    guard(-1, || {
        let o = object(obj)?;
        let target = match (target, target_name.is_null()) {
            (0, true) => CallTarget::Indirect,
            (0, false) => return Err(Error::BadRows {
                function: function_label(o, r#fn),
                why: "a call site with a target name needs the target's address (0 means unknown)"
                    .into(),
            }),
            (address, true) => CallTarget::Address(address),
            (address, false) => CallTarget::Symbol {
                address,
                name: text(target_name, "call target name")?.into(),
            },
        };
        let f = function_index(r#fn)?;
        if tail_call != 0 {
            o.add_tail_call(f, return_offset, target)?;
        } else {
            o.add_call_site(f, return_offset, target)?;
        }
        Ok(0)
    })
}

/// Encodes `obj` in `format` and registers it with the debugger. Always consumes `obj` (also on
/// error). Returns a handle for `jit_unregister`, or NULL (see `jit_last_error`).
///
/// # Safety
/// `obj` is NULL or came from `jit_object_new` and was neither freed nor registered.
#[no_mangle]
pub unsafe extern "C" fn jit_register(
    obj: *mut jit_object,
    format: jit_format,
) -> *mut jit_registration {
    guard(std::ptr::null_mut(), || {
        if obj.is_null() {
            return Err(Error::NullPointer("obj"));
        }
        // SAFETY: per the contract, `obj` is an owned, live object; we take it over.
        let obj = unsafe { Box::from_raw(obj) };
        let format = match format {
            0 => Format::Compact,
            1 => Format::Elf,
            v => {
                return Err(Error::Unsupported {
                    format: crate::error::PayloadFormat::Unknown(v),
                    why: format!(
                        "format {v} is neither JIT_FORMAT_COMPACT (0) nor JIT_FORMAT_ELF (1)"
                    ),
                })
            }
        };
        let inner = register(&obj.inner, format)?;
        Ok(handles().insert(inner))
    })
}

/// Unregisters: the debugger forgets the functions, and the payload is freed. NULL is ignored;
/// a handle unregistered before (or not from `jit_register`) is left alone, and
/// `jit_last_error` says so.
///
/// # Safety
/// `reg` is NULL or came from `jit_register` and was not unregistered before.
#[no_mangle]
pub unsafe extern "C" fn jit_unregister(reg: *mut jit_registration) {
    guard((), || {
        if reg.is_null() {
            return Ok(());
        }
        let (taken, unknown) = take_handles(&[reg]);
        drop(taken);
        match unknown {
            0 => Ok(()),
            n => Err(Error::NotRegistered(n)),
        }
    })
}

/// Unregisters the `n` registrations of `regs` at once (see the Rust `unregister_many`): each
/// debugger entry holding some of them is rewritten once, not once per registration. NULL
/// elements are skipped; `regs` may be NULL when `n` is 0. The array itself is not freed. A
/// registration listed more than once is unregistered once, and `jit_last_error` says so.
///
/// # Safety
/// `regs` points to `n` pointers, each NULL or from `jit_register` and not unregistered
/// before.
#[no_mangle]
pub unsafe extern "C" fn jit_unregister_many(regs: *const *mut jit_registration, n: usize) {
    guard((), || {
        if n == 0 {
            return Ok(());
        }
        if regs.is_null() {
            return Err(Error::NullPointer("regs"));
        }
        let regs = slice(regs, n, "regs")?;
        // Each taken over once: a pointer listed twice would otherwise be freed twice.
        let mut owned: Vec<*mut jit_registration> =
            regs.iter().copied().filter(|r| !r.is_null()).collect();
        owned.sort_unstable();
        let listed = owned.len();
        owned.dedup();
        let repeats = listed - owned.len();
        let (taken, unknown) = take_handles(&owned);
        crate::registry::unregister_many(taken);
        if unknown > 0 {
            return Err(Error::NotRegistered(unknown));
        }
        if repeats > 0 {
            return Err(Error::ListedTwice(repeats));
        }
        Ok(())
    })
}

/// Deferred mode (see the Rust `set_deferred`): with `max_pending` > 0, small compact and ELF
/// registrations made while a debugger is attached no longer stop the process each; they
/// are listed at once (attach and core files see them) and announced to the debugger
/// together, when `max_pending` of them are pending, `max_delay_ms` after the oldest
/// pending one (0: no time limit; a timer thread, `jit-gdb-flush`, announces them then),
/// on `jit_flush`, or when the program stops under our GDB scripts. Small ELF registrations
/// are deferred too: each gets an entry of its own, listed but not announced, and a flush
/// announces one entry merging them all. `max_pending` 0 turns deferred mode off and
/// announces what is pending. Returns 0.
#[no_mangle]
pub extern "C" fn jit_set_deferred(max_pending: usize, max_delay_ms: u32) -> c_int {
    guard(0, || {
        crate::registry::set_deferred((max_pending > 0).then(|| {
            crate::registry::Deferral {
                max_pending,
                max_delay: (max_delay_ms > 0)
                    .then(|| std::time::Duration::from_millis(u64::from(max_delay_ms))),
            }
        }));
        Ok(0)
    })
}

/// Announces pending deferred registrations to an attached debugger now; returns how many
/// were pending.
#[no_mangle]
pub extern "C" fn jit_flush() -> usize {
    guard(0, || Ok(crate::registry::flush()))
}

/// Why the last failing call on this thread failed ("" if none has failed). The string stays
/// valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn jit_last_error() -> *const c_char {
    // Not through `guard`, which would replace the message read here. A panic (this
    // thread's storage already gone, at thread exit) must not unwind into C: "" then.
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr())).unwrap_or(c"".as_ptr())
}

/// Switches the perf map on: from now on every registered function is also appended to
/// `/tmp/perf-PID.map` as `START SIZE name`, which `perf report` uses to name samples in JIT
/// code. The environment variable `JIT_PERF_MAP=1` does the same without a call. Output is
/// buffered: it reaches the file when the buffer fills, on `jit_perf_flush`, and at exit.
/// Calling it again does nothing. Returns 0, or -1 if the file cannot be opened (see
/// `jit_last_error`); registration keeps working either way.
#[no_mangle]
pub extern "C" fn jit_perf_map_enable() -> c_int {
    guard(-1, || {
        crate::perf::enable_perf_map()?;
        Ok(0)
    })
}

/// Switches jitdump on: creates `DIR/jit-PID.dump` (`dir` NULL: the directory in
/// `JIT_DUMP_DIR`, else the current directory), maps its first page executable so that
/// `perf record -k mono` notices it, and from now on writes each registered function's name,
/// machine code, line rows and unwinding table. Afterwards `perf inject --jit -i perf.data -o
/// jit.data` and `perf report -i jit.data` name and annotate the JIT functions. The
/// environment variable `JIT_DUMP=1` does the same without a call. Enable it before the JIT
/// code runs. The code bytes are copied from each function's address at registration, so the
/// code must be mapped readable then (unreadable functions are reported and left out).
/// Calling it again with the same directory does nothing; another directory is an error.
/// Returns 0, or -1 (see `jit_last_error`); registration keeps working either way.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn jit_dump_enable(dir: *const c_char) -> c_int {
    guard(-1, || {
        let dir = if dir.is_null() {
            None
        } else {
            Some(std::path::Path::new(text(dir, "jitdump directory")?))
        };
        crate::perf::enable_jitdump(dir)?;
        Ok(0)
    })
}

/// Writes what the perf map and jitdump outputs have buffered to their files (also done
/// automatically at exit, but not on `_exit`, a fatal signal or `SIGKILL`). Returns 0, or -1
/// if a file cannot be written (see `jit_last_error`).
#[no_mangle]
pub extern "C" fn jit_perf_flush() -> c_int {
    guard(-1, || {
        crate::perf::flush()?;
        Ok(0)
    })
}

/// The most recent problem of the perf map or jitdump output (a file that cannot be opened
/// or written, code that cannot be read), or NULL if there was none. Such problems never make
/// `jit_register` fail: each is printed once on stderr, the output concerned is switched off
/// (an unreadable function is only left out), and this function reports it. The string stays
/// valid until the process ends.
#[no_mangle]
pub extern "C" fn jit_perf_error() -> *const c_char {
    guard(std::ptr::null(), || Ok(crate::perf::last_error_ptr()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        // SAFETY: jit_last_error returns a NUL-terminated string of this thread.
        unsafe { CStr::from_ptr(jit_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn set_lines_takes_gap_rows_and_refuses_two_in_a_row() {
        let obj = jit_object_new();
        let row = |offset, line| jit_line { offset, line };
        // SAFETY: a live object, NUL-terminated names, `rows` with their count.
        unsafe {
            let f = jit_object_add_function(obj, c"glue".as_ptr(), 0x1000, 32);
            assert_eq!(f, 0);
            let set = |rows: &[jit_line]| {
                jit_object_set_lines(obj, f, c"g.js".as_ptr(), rows.as_ptr(), rows.len())
            };
            assert_eq!(set(&[row(0, 0), row(4, 7), row(8, 0), row(12, 8)]), 0);
            assert_eq!(
                (*obj).inner.functions().first().unwrap().lines(),
                [
                    LineRow::gap(0),
                    LineRow::new(4, 7),
                    LineRow::gap(8),
                    LineRow::new(12, 8)
                ]
            );
            assert_eq!(set(&[row(0, 5), row(4, 0), row(8, 0)]), -1);
            assert!(
                last_error().contains("line row 2 at offset 8 is a gap (line 0) right after the gap of row 1 at offset 4"),
                "{}",
                last_error()
            );
            jit_object_free(obj);
        }
    }

    /// A text that is not UTF-8 is named for what it is, not called a function name.
    #[test]
    fn texts_that_are_not_utf8_are_named_for_what_they_are() {
        let bad = c"caf\xe9";
        let obj = jit_object_new();
        // SAFETY: a live object, NUL-terminated strings.
        unsafe {
            assert_eq!(jit_object_add_function(obj, bad.as_ptr(), 0x1000, 32), -1);
            assert!(
                last_error().starts_with("bad function name: the function name is not valid UTF-8"),
                "{}",
                last_error()
            );
            let f = jit_object_add_function(obj, c"f".as_ptr(), 0x1000, 32);
            assert_eq!(jit_object_add_block(obj, f, bad.as_ptr(), 0, 8, -1), -1);
            assert!(
                last_error().starts_with("the block name is not valid UTF-8"),
                "{}",
                last_error()
            );
            assert_eq!(jit_dump_enable(bad.as_ptr()), -1);
            assert!(
                last_error().starts_with("the jitdump directory is not valid UTF-8"),
                "{}",
                last_error()
            );
            jit_object_free(obj);
        }
    }

    #[test]
    fn a_handle_unregistered_twice_is_refused_not_freed_again() {
        let register_one = |start: u64| {
            let obj = jit_object_new();
            // SAFETY: a live object, consumed by jit_register; a NUL-terminated name.
            unsafe {
                assert_eq!(
                    jit_object_add_function(obj, c"twice".as_ptr(), start, 16),
                    0
                );
                let reg = jit_register(obj, 0);
                assert!(!reg.is_null(), "{}", last_error());
                reg
            }
        };
        // Both registered before either is freed: a freed handle's address could otherwise
        // come back for the second.
        let reg = register_one(0x7e00_0000_1000);
        let other = register_one(0x7e00_0000_2000);
        // SAFETY: `reg` came from jit_register; the later calls pass it again on purpose
        // (the misuse under test), and the array holds two handles.
        unsafe {
            jit_unregister(reg);
            jit_unregister(reg);
            assert!(
                last_error().contains("1 handle(s) are not live registrations"),
                "{}",
                last_error()
            );
            jit_unregister_many([reg, other].as_ptr(), 2);
            assert!(
                last_error().contains("1 handle(s) are not live registrations"),
                "{}",
                last_error()
            );
            // `other` was unregistered by that call: a third unregister is refused too.
            jit_unregister(other);
            assert!(last_error().contains("not live"), "{}", last_error());
        }
    }

    /// A stale handle whose slot a later registration took is refused: the generation
    /// differs, so it never unregisters the later one.
    #[test]
    fn a_stale_handle_never_names_the_registration_that_reused_its_slot() {
        let mut h = Handles {
            slots: Vec::new(),
            free: Vec::new(),
        };
        let mut obj = JitObject::new();
        obj.add_function("stale", 0x7e00_0000_3000, 16).unwrap();
        let a = h.insert(crate::register(&obj, crate::Format::Compact).unwrap());
        assert!(!a.is_null());
        assert!(h.take(a).is_some());
        let b = h.insert(crate::register(&obj, crate::Format::Compact).unwrap());
        assert_eq!(h.slots.len(), 1, "the slot is reused");
        assert_ne!(a, b);
        assert!(h.take(a).is_none(), "the stale handle is refused");
        assert!(h.take(std::ptr::null_mut()).is_none());
        assert!(h.take(0xdead_beef as *mut jit_registration).is_none());
        assert!(h.take(b).is_some(), "the live one is still there");
        assert!(h.take(b).is_none());
    }

    #[test]
    fn absurd_counts_are_refused_before_anything_is_read() {
        let obj = jit_object_new();
        let bogus = std::ptr::NonNull::<jit_line>::dangling().as_ptr();
        // SAFETY: a live object and a NUL-terminated name; the row pointers are never read
        // (the counts are refused first); freed once at the end.
        unsafe {
            let f = jit_object_add_function(obj, c"small".as_ptr(), 0x1000, 16);
            let lines = |n| jit_object_set_lines(obj, f, c"s.js".as_ptr(), bogus, n);
            assert_eq!(lines(usize::MAX), -1);
            let e = last_error();
            assert!(
                e.contains("function `small`") && e.contains("at most 16"),
                "{e}"
            );
            assert_eq!(lines(17), -1);
            let rows = std::ptr::NonNull::<jit_unwind_row>::dangling().as_ptr();
            assert_eq!(jit_object_set_unwind(obj, f, rows, usize::MAX), -1);
            assert!(last_error().contains("unwind rows"), "{}", last_error());
            let regs = std::ptr::NonNull::<*mut jit_registration>::dangling().as_ptr();
            jit_unregister_many(regs, usize::MAX);
            assert!(
                last_error().contains("larger than any array"),
                "{}",
                last_error()
            );
            jit_object_free(obj);
        }
    }

    #[test]
    fn register_rules_through_the_c_api() {
        let obj = jit_object_new();
        // SAFETY: a live object and a NUL-terminated name; freed once at the end.
        unsafe {
            let f = jit_object_add_function(obj, c"saver".as_ptr(), 0x1000, 32);
            assert_eq!(f, 0);
            let add =
                |off, reg, rule, value| jit_object_add_register_rule(obj, f, off, reg, rule, value);
            assert_eq!(add(4, 12, 0, -24), 0);
            assert_eq!(add(6, 13, 1, 3), 0);
            assert_eq!(add(8, 14, 2, 0), 0);
            assert_eq!(add(8, 15, 3, 0), 0);
            assert_eq!(add(9, 12, 4, 0), -1);
            assert!(
                last_error().contains("rule 4 is not a jit_register_rule"),
                "{}",
                last_error()
            );
            assert_eq!(add(9, 12, 2, 5), -1);
            assert!(last_error().contains("take value 0"), "{}", last_error());
            assert_eq!(add(9, 12, 1, -1), -1);
            assert!(
                last_error().contains("no register number"),
                "{}",
                last_error()
            );
            assert_eq!(add(9, 7, 2, 0), -1);
            assert!(
                last_error().contains("function `saver`: register rule at offset 9: reg: rsp (7)"),
                "{}",
                last_error()
            );
            let rules = (*obj)
                .inner
                .functions()
                .first()
                .unwrap()
                .register_rules()
                .to_vec();
            assert_eq!(
                rules
                    .iter()
                    .map(|r| (r.offset, r.reg, r.rule))
                    .collect::<Vec<_>>(),
                [
                    (4, 12, RegisterRule::AtCfa(-24)),
                    (6, 13, RegisterRule::InRegister(3)),
                    (8, 14, RegisterRule::SameValue),
                    (8, 15, RegisterRule::Undefined),
                ]
            );
            jit_object_free(obj);
        }
    }

    #[test]
    fn cfi_through_the_c_api() {
        let obj = jit_object_new();
        // push rbp; mov rbp, rsp; push r12 (CFA - 24), as a compiler's FDE says it.
        let fde = [0x41u8, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6, 0x42, 0x8c, 3];
        let bad = [0x41u8, 0x10, 12, 1, 0x70];
        // SAFETY: a live object, a NUL-terminated name, byte arrays with their lengths (or
        // NULL with 0); freed once at the end.
        unsafe {
            let f = jit_object_add_function(obj, c"cl".as_ptr(), 0x1000, 32);
            let set = |fde: &[u8]| {
                jit_object_set_cfi(
                    obj,
                    f,
                    1,
                    -8,
                    16,
                    std::ptr::null(),
                    0,
                    fde.as_ptr(),
                    fde.len(),
                )
            };
            assert_eq!(set(&fde), 0, "{}", last_error());
            let rules = (*obj)
                .inner
                .functions()
                .first()
                .unwrap()
                .register_rules()
                .to_vec();
            assert_eq!(rules.len(), 1);
            assert_eq!(rules[0].rule, RegisterRule::AtCfa(-24));
            assert_eq!(set(&bad), -1);
            let e = last_error();
            assert!(
                e.contains("function `cl`: CFI: DW_CFA_expression (0x10) at byte 1"),
                "{e}"
            );
            jit_object_free(obj);
        }
    }

    #[test]
    fn set_source_takes_bytes_and_names_what_is_wrong() {
        let obj = jit_object_new();
        let file = c"repl.js";
        let text = b"let x = 1;\nbad \xff\0 bytes";
        // SAFETY: a live object, a NUL-terminated name, `text` with its length; the NULL
        // and oversized arguments are refused before anything is read.
        unsafe {
            let set = |f: *const c_char, t: *const u8, n: usize| {
                jit_object_set_source(obj, f, t.cast(), n)
            };
            assert_eq!(set(file.as_ptr(), text.as_ptr(), text.len()), 0);
            assert_eq!(
                (*obj).inner.source("repl.js"),
                Some("let x = 1;\nbad \u{FFFD}\u{FFFD} bytes")
            );
            // Only `len` bytes: no terminator needed.
            assert_eq!(set(file.as_ptr(), text.as_ptr(), 3), 0);
            assert_eq!((*obj).inner.source("repl.js"), Some("let"));
            // NULL with length 0: an empty text.
            assert_eq!(set(c"empty.js".as_ptr(), std::ptr::null(), 0), 0);
            assert_eq!((*obj).inner.source("empty.js"), Some(""));

            assert_eq!(set(file.as_ptr(), std::ptr::null(), 5), -1);
            assert_eq!(last_error(), "NULL pointer passed as `text`");
            assert_eq!(set(std::ptr::null(), text.as_ptr(), 1), -1);
            assert_eq!(last_error(), "NULL pointer passed as `file`");
            assert_eq!(
                jit_object_set_source(std::ptr::null_mut(), file.as_ptr(), std::ptr::null(), 0),
                -1
            );
            assert_eq!(last_error(), "NULL pointer passed as `obj`");
            // A length no text has: refused before the (short) buffer is read.
            let huge = MAX_SOURCE_ARG_BYTES + 1;
            assert_eq!(set(file.as_ptr(), text.as_ptr(), huge), -1);
            assert_eq!(
                last_error(),
                format!("too large: source text of {huge} bytes is larger than 67108864 bytes (64 MiB), the most jit_object_set_source takes (texts above 1 MiB are cut to 1 MiB)")
            );
            // File names: the error names the file name, not a function name.
            assert_eq!(set(c"".as_ptr(), text.as_ptr(), 1), -1);
            assert_eq!(
                last_error(),
                "bad source file name: the source file name is empty"
            );
            assert_eq!(set(c"a\xffb".as_ptr(), text.as_ptr(), 1), -1);
            assert!(
                last_error().starts_with("bad source file name: the file name is not valid UTF-8"),
                "{}",
                last_error()
            );
            assert_eq!(
                (*obj).inner.sources().count(),
                2,
                "refused calls change nothing"
            );

            // Between 1 MiB and 64 MiB: accepted and cut.
            let big = "0123456789abcde\n".repeat(2 << 16); // 2 MiB
            assert_eq!(set(file.as_ptr(), big.as_ptr(), big.len()), 0);
            let kept = (*obj).inner.source("repl.js").unwrap();
            assert!(kept.len() <= crate::model::MAX_SOURCE_BYTES);
            assert!(kept.ends_with(&format!("of {} bytes kept]\n", big.len())));
            jit_object_free(obj);
        }
    }
}
