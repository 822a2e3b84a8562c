//! The FFI edge: the two exported symbols GDB looks for, the four callbacks of
//! `gdb_reader_funcs`, and safe wrappers over the callbacks GDB passes in (symbol building,
//! register access, target memory). All `unsafe` of the reader is here.
//!
//! Every callback runs inside [`guard`]: a panic (a bug) is caught, reported and turned into
//! GDB_FAIL (or an empty frame id), so no panic ever unwinds into GDB.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_long, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

use jit_interface::format::{decode_all, DecodeError};
use jit_interface::{Arch, Decoded};

use crate::bindings::{
    gdb_block, gdb_frame_id, gdb_line_mapping, gdb_object, gdb_reader_funcs, gdb_reg_value,
    gdb_status, gdb_status_GDB_FAIL, gdb_status_GDB_SUCCESS, gdb_symbol_callbacks, gdb_symtab,
    gdb_target_read, gdb_unwind_callbacks, GDB_READER_INTERFACE_VERSION,
};
use crate::index::Index;
use crate::memory::Memory;
use crate::records::Records;
use crate::report::{self, debug};
use crate::sources;
use crate::symbols::{self, LinePlan, Plan};
use crate::unwind::x86_64::OUTERMOST as x86_64_OUTERMOST;
use crate::unwind::{self, ArchSet, Outcome, PcCode, Registers};

/// The registered code the unwinder knows about. GDB calls readers from one thread; the
/// mutex only makes the global sound.
static INDEX: Mutex<Index> = Mutex::new(Index::new());

fn index() -> MutexGuard<'static, Index> {
    // A panic caught while the lock was held leaves a consistent map (every mutation is a
    // single BTreeMap operation), so a poisoned lock is still usable.
    INDEX.lock().unwrap_or_else(|e| e.into_inner())
}

/// `[SPAN_LO, SPAN_HI)` covers all indexed code (empty: `SPAN_LO >= SPAN_HI`). GDB asks the
/// reader about every frame of every backtrace, native ones included, so a PC outside it is
/// declined with two loads, without the lock or a map search. Written under the index lock
/// after every change ([`with_index`]); GDB calls readers from one thread, so a reader never
/// sees the two halves of different updates. Lookups may shrink the index without updating
/// the span: a wider span only sends more PCs to the exact test.
static SPAN_LO: AtomicU64 = AtomicU64::new(u64::MAX);
static SPAN_HI: AtomicU64 = AtomicU64::new(0);
/// The architectures of the indexed code ([`ArchSet`] bits), written with the span: whose
/// register numbers a frame's PC is read with (`crate::unwind`, "Which architecture").
static ARCHS: AtomicU8 = AtomicU8::new(0);

/// Runs `f` on the locked index, then records its span.
fn with_index<R>(f: impl FnOnce(&mut Index) -> R) -> R {
    let mut index = index();
    let r = f(&mut index);
    let (lo, hi) = index.span().unwrap_or((u64::MAX, 0));
    SPAN_LO.store(lo, Ordering::Relaxed);
    SPAN_HI.store(hi, Ordering::Relaxed);
    ARCHS.store(index.archs().bits(), Ordering::Relaxed);
    r
}

/// The architecture and PC of the frame `regs` gives, if its PC may be in indexed code
/// (one register read per architecture with code; none while nothing is indexed).
fn frame_pc(regs: &dyn Registers) -> Option<(Arch, u64)> {
    let archs = ArchSet::from_bits(ARCHS.load(Ordering::Relaxed));
    unwind::frame_pc(archs, regs, in_span)
}

/// Might `pc` (or `pc - 1`, for a return address) be in indexed code?
fn in_span(pc: u64) -> bool {
    let (lo, hi) = (
        SPAN_LO.load(Ordering::Relaxed),
        SPAN_HI.load(Ordering::Relaxed),
    );
    let inside = |a: u64| lo <= a && a < hi;
    inside(pc) || pc.checked_sub(1).is_some_and(inside)
}

/// `gdb_reader_funcs` handed to GDB. GDB only reads it, but takes a mutable pointer.
struct Funcs(UnsafeCell<gdb_reader_funcs>);

// SAFETY: the table is never written after initialisation (neither by us nor by GDB).
unsafe impl Sync for Funcs {}

static FUNCS: Funcs = Funcs(UnsafeCell::new(gdb_reader_funcs {
    reader_version: GDB_READER_INTERFACE_VERSION as c_int,
    priv_data: ptr::null_mut(),
    read: Some(read),
    unwind: Some(unwind),
    get_frame_id: Some(get_frame_id),
    destroy: Some(destroy),
}));

/// GDB refuses readers without this symbol ("Reader not GPL compatible."). This reader is
/// GPL-3.0-or-later.
#[no_mangle]
pub extern "C" fn plugin_is_GPL_compatible() -> c_int {
    0
}

/// Entry point GDB calls on `jit-reader-load`. Starts from an empty index: GDB then reads
/// every entry of the process's list again.
#[no_mangle]
pub extern "C" fn gdb_init_reader() -> *mut gdb_reader_funcs {
    guard((), || {
        report::init();
        with_index(Index::clear);
        sources::namer().on_load();
        debug!("loaded (JIT_READER_DEBUG is on)");
    });
    FUNCS.0.get()
}

/// Runs a callback body; a panic becomes `fallback` and one line on stderr.
fn guard<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            report::line(format_args!(
                "internal error (a bug in the reader, please report it); the request was declined"
            ));
            fallback
        }
    }
}

// ---------------------------------------------------------------------------------------
// read

unsafe extern "C" fn read(
    _self: *mut gdb_reader_funcs,
    cb: *mut gdb_symbol_callbacks,
    memory: *mut c_void,
    memory_sz: c_long,
) -> gdb_status {
    guard(gdb_status_GDB_FAIL, || {
        let Ok(len) = usize::try_from(memory_sz) else {
            return gdb_status_GDB_FAIL;
        };
        let payload: &[u8] = if len == 0 || memory.is_null() {
            &[]
        } else {
            // SAFETY: GDB passes its own copy of the entry's payload, `memory_sz` bytes,
            // valid and unchanged for the duration of this call.
            unsafe { std::slice::from_raw_parts(memory.cast::<u8>(), len) }
        };
        let Some(syms) = SymbolCallbacks::new(cb) else {
            report::line(format_args!(
                "GDB passed no symbol callbacks; entry skipped"
            ));
            return gdb_status_GDB_FAIL;
        };
        read_payload(&syms, payload)
    })
}

fn read_payload(syms: &SymbolCallbacks, payload: &[u8]) -> gdb_status {
    // Read straight from the bytes; whenever that refuses, the data model decides (and
    // names the problem): see `records`.
    let decoded: Vec<Decoded>;
    let mut records = match Records::from_payload(payload) {
        Ok(r) => r,
        Err(DecodeError::NotOurs) => {
            debug!(
                "entry of {} bytes is not a compact payload: left to GDB",
                payload.len()
            );
            return gdb_status_GDB_FAIL;
        }
        Err(DecodeError::Invalid(_)) => match decode_all(payload) {
            Ok(d) => {
                decoded = d;
                Records::from_decoded(&decoded)
            }
            Err(DecodeError::NotOurs) => return gdb_status_GDB_FAIL,
            Err(DecodeError::Invalid(why)) => {
                report::refused(payload, &why);
                return gdb_status_GDB_FAIL;
            }
        },
    };
    let mem = GdbMemory(syms.target_read);
    for t in symbols::drop_tombstones(&mut records, &mem) {
        debug!(
            "skipped an unregistered object ({} function(s), first `{}`): its live slot {:#x} holds {:#x}, not its key {:#x}",
            t.functions, t.first, t.live.address, t.found, t.live.key
        );
    }
    // Planned before this payload joins the index, so what the index holds is the other
    // entries read so far (not yet found dead): a symtab spans no gap where one of them has
    // code (see `symbols`).
    let planned =
        with_index(|index| symbols::plan_around(&records, |lo, hi| index.any_function_in(lo, hi)));
    let mut plan = match planned {
        Ok(p) => p,
        Err(why) => {
            report::refused(payload, &why);
            return gdb_status_GDB_FAIL;
        }
    };
    // Every symtab gets a file GDB can open (GDB 10-14 crash on one they cannot).
    let named = {
        let mut namer = sources::namer();
        // The first text given for each file (a payload may carry many).
        let mut texts = std::collections::HashMap::with_capacity(records.sources.len());
        for &(file, text) in &records.sources {
            texts.entry(file).or_insert(text);
        }
        plan.name_files(|name, max_line| {
            let text = name.and_then(|n| texts.get(n).copied());
            namer.name(&sources::FileRequest {
                name,
                text,
                max_line,
            })
        })
    };
    if let Err(why) = named {
        report::refused(payload, &why);
        return gdb_status_GDB_FAIL;
    }
    // Even with every object skipped, the entry is ours: an empty object keeps GDB from
    // trying to read it as an object file (and saying it is not one).
    syms.emit(&plan);
    let added = with_index(|index| index.add_records(&records, &mem));
    debug!(
        "read an entry of {} bytes: {} object(s), {added} function(s), {} symtab(s)",
        payload.len(),
        records.objects.len(),
        plan.symtabs.len()
    );
    gdb_status_GDB_SUCCESS
}

type ObjectOpen = unsafe extern "C" fn(*mut gdb_symbol_callbacks) -> *mut gdb_object;
type SymtabOpen = unsafe extern "C" fn(
    *mut gdb_symbol_callbacks,
    *mut gdb_object,
    *const std::ffi::c_char,
) -> *mut gdb_symtab;
type BlockOpen = unsafe extern "C" fn(
    *mut gdb_symbol_callbacks,
    *mut gdb_symtab,
    *mut gdb_block,
    u64,
    u64,
    *const std::ffi::c_char,
) -> *mut gdb_block;
type SymtabClose = unsafe extern "C" fn(*mut gdb_symbol_callbacks, *mut gdb_symtab);
type ObjectClose = unsafe extern "C" fn(*mut gdb_symbol_callbacks, *mut gdb_object);
type LinesAdd =
    unsafe extern "C" fn(*mut gdb_symbol_callbacks, *mut gdb_symtab, c_int, *mut gdb_line_mapping);

/// GDB's symbol-building callbacks, all present.
struct SymbolCallbacks {
    cb: *mut gdb_symbol_callbacks,
    object_open: ObjectOpen,
    symtab_open: SymtabOpen,
    block_open: BlockOpen,
    symtab_close: SymtabClose,
    object_close: ObjectClose,
    line_mapping_add: LinesAdd,
    target_read: gdb_target_read,
}

impl SymbolCallbacks {
    fn new(cb: *mut gdb_symbol_callbacks) -> Option<SymbolCallbacks> {
        if cb.is_null() {
            return None;
        }
        // SAFETY: GDB passes a valid callback table for the duration of `read`.
        let t = unsafe { &*cb };
        Some(SymbolCallbacks {
            cb,
            object_open: t.object_open?,
            symtab_open: t.symtab_open?,
            block_open: t.block_open?,
            symtab_close: t.symtab_close?,
            object_close: t.object_close?,
            line_mapping_add: t.line_mapping_add?,
            target_read: t.target_read,
        })
    }

    /// Hands the plan to GDB: one object (one objfile, tied to the entry), its symtabs.
    fn emit(&self, plan: &Plan) {
        let cb = self.cb;
        let str_at = |offset: usize| plan.str_ptr(offset);
        // SAFETY (all calls below): `cb` is GDB's table for this `read` call; the handles
        // passed back are the ones GDB returned in this call; strings point into the
        // plan's NUL-terminated buffer and the line rows into its vector, both outliving
        // the calls (GDB copies them).
        let obj = unsafe { (self.object_open)(cb) };
        let mut handles: Vec<*mut gdb_block> = Vec::new();
        for st in &plan.symtabs {
            let file = st.file.map_or(ptr::null(), str_at);
            // SAFETY: see above.
            let symtab = unsafe { (self.symtab_open)(cb, obj, file) };
            handles.clear();
            for b in &plan.blocks[st.blocks.clone()] {
                let parent = b
                    .parent
                    .and_then(|p| handles.get(p).copied())
                    .unwrap_or(ptr::null_mut());
                // SAFETY: see above.
                let h = unsafe {
                    (self.block_open)(cb, symtab, parent, b.begin, b.end, str_at(b.name))
                };
                handles.push(h);
            }
            let lines = &plan.lines[st.lines.clone()];
            if !lines.is_empty() {
                // The plan caps the count at i32::MAX.
                let n = c_int::try_from(lines.len()).unwrap_or(c_int::MAX);
                // SAFETY: see above; `n` <= lines.len(), and `LinePlan` has the layout of
                // `gdb_line_mapping` (checked below). GDB only reads the rows (it copies
                // them into its own table), so passing a pointer to shared data is sound.
                unsafe {
                    (self.line_mapping_add)(
                        cb,
                        symtab,
                        n,
                        lines.as_ptr().cast::<gdb_line_mapping>().cast_mut(),
                    )
                };
            }
            // SAFETY: see above.
            unsafe { (self.symtab_close)(cb, symtab) };
        }
        // SAFETY: see above.
        unsafe { (self.object_close)(cb, obj) };
    }
}

// The plan's line rows are handed to GDB as its own type.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<LinePlan>() == size_of::<gdb_line_mapping>());
    assert!(align_of::<LinePlan>() == align_of::<gdb_line_mapping>());
    assert!(offset_of!(LinePlan, line) == offset_of!(gdb_line_mapping, line));
    assert!(offset_of!(LinePlan, pc) == offset_of!(gdb_line_mapping, pc));
};

/// Target memory through GDB's `target_read`.
struct GdbMemory(gdb_target_read);

impl Memory for GdbMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(read) = self.0 else {
            return false;
        };
        let Ok(len) = c_int::try_from(buf.len()) else {
            return false;
        };
        if addr.checked_add(buf.len() as u64).is_none() {
            return false;
        }
        // SAFETY: `buf` is writable for `len` bytes; GDB fills it or reports failure.
        let status = unsafe { read(addr, buf.as_mut_ptr().cast::<c_void>(), len) };
        status == gdb_status_GDB_SUCCESS
    }
}

// ---------------------------------------------------------------------------------------
// unwind, get_frame_id

/// GDB's unwind callbacks: register access of the frame being unwound, and memory.
struct UnwindCallbacks {
    cb: *mut gdb_unwind_callbacks,
    reg_get: unsafe extern "C" fn(*mut gdb_unwind_callbacks, c_int) -> *mut gdb_reg_value,
    /// Absent in `get_frame_id` (GDB passes NULL there).
    reg_set: Option<unsafe extern "C" fn(*mut gdb_unwind_callbacks, c_int, *mut gdb_reg_value)>,
    memory: GdbMemory,
}

impl UnwindCallbacks {
    fn new(cb: *mut gdb_unwind_callbacks) -> Option<UnwindCallbacks> {
        if cb.is_null() {
            return None;
        }
        // SAFETY: GDB passes a valid callback table for the duration of the call.
        let t = unsafe { &*cb };
        Some(UnwindCallbacks {
            cb,
            reg_get: t.reg_get?,
            reg_set: t.reg_set,
            memory: GdbMemory(t.target_read),
        })
    }

    /// Gives GDB a register value of the caller frame.
    fn set(&self, dwarf_regnum: u16, value: u64) {
        let Some(reg_set) = self.reg_set else {
            return;
        };
        let v = Box::into_raw(Box::new(OwnedRegValue {
            size: 8,
            defined: 1,
            free: Some(free_reg_value),
            value: value.to_le_bytes(),
        }));
        // SAFETY: `v` is a heap value laid out as `gdb_reg_value` with 8 value bytes; GDB
        // takes ownership and releases it through `free_reg_value`.
        unsafe {
            reg_set(
                self.cb,
                c_int::from(dwarf_regnum),
                v.cast::<gdb_reg_value>(),
            )
        };
    }
}

impl Registers for UnwindCallbacks {
    fn get(&self, dwarf_regnum: u16) -> Option<u64> {
        // SAFETY: `cb` is GDB's table for this call; the register number is one of the
        // architecture's DWARF numbers, which GDB maps.
        let v = unsafe { (self.reg_get)(self.cb, c_int::from(dwarf_regnum)) };
        if v.is_null() {
            return None;
        }
        // SAFETY: GDB returns a value whose `size` bytes follow the header; it is ours to
        // read and then release with its `free` function, exactly once.
        unsafe {
            let size = (*v).size;
            let defined = (*v).defined != 0;
            let mut bytes = [0u8; 8];
            let value = if defined && (1..=8).contains(&size) {
                let src = ptr::addr_of!((*v).value).cast::<u8>();
                ptr::copy_nonoverlapping(src, bytes.as_mut_ptr(), size as usize);
                Some(u64::from_le_bytes(bytes))
            } else {
                None
            };
            if let Some(free) = (*v).free {
                free(v);
            }
            value
        }
    }
}

impl Memory for UnwindCallbacks {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.memory.read(addr, buf)
    }
}

/// A register value the reader hands to GDB: `gdb_reg_value` with room for 8 bytes.
#[repr(C)]
struct OwnedRegValue {
    size: c_int,
    defined: c_int,
    free: Option<unsafe extern "C" fn(*mut gdb_reg_value)>,
    value: [u8; 8],
}

// The prefix must match GDB's struct for GDB to read it as one.
const _: () = assert!(
    std::mem::offset_of!(OwnedRegValue, value) == std::mem::offset_of!(gdb_reg_value, value)
);

unsafe extern "C" fn free_reg_value(v: *mut gdb_reg_value) {
    guard((), || {
        if !v.is_null() {
            // SAFETY: every value passed to GDB was made by `Box::new(OwnedRegValue)` in
            // `UnwindCallbacks::set`, and GDB frees each once.
            drop(unsafe { Box::from_raw(v.cast::<OwnedRegValue>()) });
        }
    })
}

unsafe extern "C" fn unwind(
    _self: *mut gdb_reader_funcs,
    cb: *mut gdb_unwind_callbacks,
) -> gdb_status {
    guard(gdb_status_GDB_FAIL, || {
        let Some(ucb) = UnwindCallbacks::new(cb) else {
            return gdb_status_GDB_FAIL;
        };
        let Some((arch, pc)) = frame_pc(&ucb) else {
            return gdb_status_GDB_FAIL;
        };
        let nums = unwind::arch_regs(arch);
        match unwind::unwind_at(&mut index(), arch, pc, &ucb, &ucb) {
            Outcome::NotOurs(_) => gdb_status_GDB_FAIL,
            Outcome::Refused(why) => {
                debug!("declined the frame at pc {pc:#x}: {why}");
                gdb_status_GDB_FAIL
            }
            Outcome::Frame {
                func,
                lookup_pc,
                regs,
                step,
            } => {
                match step.caller {
                    Ok(c) => {
                        ucb.set(nums.pc, c.pc);
                        ucb.set(nums.sp, c.sp);
                        if let Some(fp) = c.fp {
                            ucb.set(nums.fp, fp);
                        }
                        if let (Some(lr), Some(value)) = (nums.lr, c.lr) {
                            ucb.set(lr, value);
                        }
                        if let Some(cfa) = step.cfa {
                            for (reg, value) in
                                unwind::saved_registers(&func, lookup_pc, cfa, &ucb, &ucb)
                            {
                                ucb.set(reg, value);
                            }
                        }
                        debug!(
                            "unwound {} at pc {:#x} (looked up {lookup_pc:#x}{}): caller pc {:#x} sp {:#x} fp {}",
                            func.name(),
                            regs.pc,
                            code_note(step.code),
                            c.pc,
                            c.sp,
                            c.fp.map_or("unknown".into(), |f| format!("{f:#x}"))
                        );
                    }
                    // Claim the frame but give no caller registers: GDB shows the frame and
                    // ends the backtrace ("frame did not save the PC").
                    Err(why) if why.contains(x86_64_OUTERMOST) => {
                        debug!(
                            "{} at pc {:#x}{}: {why}",
                            func.name(),
                            regs.pc,
                            code_note(step.code)
                        )
                    }
                    Err(why) => report::backtrace_ends(format!(
                        "backtrace ends in {} at pc {:#x}: {why}",
                        func.name(),
                        regs.pc
                    )),
                }
                gdb_status_GDB_SUCCESS
            }
        }
    })
}

/// What the unwinder made of the code at the PC, for the debug output ("" if not read).
fn code_note(code: PcCode) -> String {
    match code {
        PcCode::NotRead => String::new(),
        PcCode::Body => "; code at pc: no epilogue".into(),
        PcCode::Epilogue(e) => format!("; code at pc: `{}`, its rule used", e.describe()),
        PcCode::Unreadable { len } => {
            format!("; code at pc unreadable ({len} bytes), the rows used")
        }
    }
}

unsafe extern "C" fn get_frame_id(
    _self: *mut gdb_reader_funcs,
    cb: *mut gdb_unwind_callbacks,
) -> gdb_frame_id {
    let none = gdb_frame_id {
        code_address: 0,
        stack_address: 0,
    };
    guard(none, || {
        let Some(ucb) = UnwindCallbacks::new(cb) else {
            return none;
        };
        let found = frame_pc(&ucb);
        let id =
            found.and_then(|(arch, pc)| unwind::frame_id_at(&mut index(), arch, pc, &ucb, &ucb));
        let nums = unwind::arch_regs(found.map_or(Arch::HOST, |(arch, _)| arch));
        match id {
            Some((code_address, stack_address)) => gdb_frame_id {
                code_address,
                stack_address,
            },
            // Only asked for frames `unwind` claimed; stay deterministic regardless.
            None => gdb_frame_id {
                code_address: ucb.get(nums.pc).unwrap_or(0),
                stack_address: ucb.get(nums.sp).unwrap_or(0),
            },
        }
    })
}

unsafe extern "C" fn destroy(_self: *mut gdb_reader_funcs) {
    guard((), || {
        with_index(Index::clear);
        report::finish();
        debug!("unloaded");
    })
}
