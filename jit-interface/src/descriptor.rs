//! GDB's JIT descriptor and the list of code entries: the only place that touches them.
//!
//! The symbols themselves are defined (weakly) in `csrc/jit_descriptor.c`. All list
//! operations of this library happen under `LIST_LOCK`. If another runtime in the process
//! defines the symbols strongly (LLVM's GDB listener does), both runtimes append to the same
//! list, each under its own lock: registrations from the two runtimes must then not run
//! concurrently (the same restriction LLVM has with any other user of the interface).

use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// `jit_actions_t` of GDB's interface.
const JIT_NOACTION: u32 = 0;
const JIT_REGISTER_FN: u32 = 1;
const JIT_UNREGISTER_FN: u32 = 2;

/// `struct jit_code_entry` of GDB's interface.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct JitCodeEntry {
    pub next_entry: *mut JitCodeEntry,
    pub prev_entry: *mut JitCodeEntry,
    pub symfile_addr: *const u8,
    pub symfile_size: u64,
}

impl JitCodeEntry {
    pub(crate) fn new(payload: &[u8]) -> JitCodeEntry {
        JitCodeEntry {
            next_entry: ptr::null_mut(),
            prev_entry: ptr::null_mut(),
            symfile_addr: payload.as_ptr(),
            symfile_size: payload.len() as u64,
        }
    }
}

/// `struct jit_descriptor` of GDB's interface.
#[repr(C)]
pub(crate) struct JitDescriptor {
    pub version: u32,
    pub action_flag: u32,
    pub relevant_entry: *mut JitCodeEntry,
    pub first_entry: *mut JitCodeEntry,
}

extern "C" {
    static mut __jit_debug_descriptor: JitDescriptor;
    fn __jit_debug_register_code();
    fn jit_interface_descriptor_address() -> *mut JitDescriptor;
}

/// Serialises this library's list operations and hook calls.
static LIST_LOCK: Mutex<()> = Mutex::new(());

/// Address of the descriptor the process uses (ours, or a strong definition that won).
pub fn descriptor_address() -> usize {
    // SAFETY: a plain C function without preconditions returning the address of a global.
    unsafe { jit_interface_descriptor_address() as usize }
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    // A panic while holding the lock cannot leave the list half-linked (no panicking code
    // runs between the pointer writes), so a poisoned lock is still safe to use.
    LIST_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Links `entry` at the head of the list and notifies the debugger.
///
/// # Safety
/// `entry` points to a valid entry that is in no list, whose payload stays valid and whose
/// address stays stable until [`unlink`] has returned for it.
pub(crate) unsafe fn link(entry: *mut JitCodeEntry) {
    // SAFETY: the caller keeps the contract.
    unsafe { link_as(entry, true) }
}

/// Links `entry` at the head of the list without telling the debugger (deferred mode: an
/// attached debugger reads it only if it walks the list, on attach or in a core file).
///
/// # Safety
/// As [`link`].
pub(crate) unsafe fn link_silently(entry: *mut JitCodeEntry) {
    // SAFETY: the caller keeps the contract.
    unsafe { link_as(entry, false) }
}

/// [`link`], telling the debugger if `announce`.
///
/// # Safety
/// As [`link`].
unsafe fn link_as(entry: *mut JitCodeEntry, announce: bool) {
    let _guard = lock();
    // SAFETY: the descriptor is a process-wide global only modified under LIST_LOCK (by this
    // library); `entry` and the list's entries are valid per this function's contract.
    unsafe {
        let d = ptr::addr_of_mut!(__jit_debug_descriptor);
        let head = (*d).first_entry;
        (*entry).prev_entry = ptr::null_mut();
        (*entry).next_entry = head;
        if !head.is_null() {
            (*head).prev_entry = entry;
        }
        (*d).first_entry = entry;
        if announce {
            notify(d, entry, JIT_REGISTER_FN);
        }
    }
}

/// Unlinks `entry` from the list and notifies the debugger. After it returns, the entry and
/// its payload may be freed.
///
/// # Safety
/// `entry` was linked with [`link`] and not unlinked since.
pub(crate) unsafe fn unlink(entry: *mut JitCodeEntry) {
    // SAFETY: the caller keeps the contract.
    unsafe { unlink_as(entry, true) }
}

/// Unlinks `entry` without telling the debugger: for an entry linked with
/// [`link_silently`] and never announced (a debugger that was told about nothing has
/// nothing to drop).
///
/// # Safety
/// As [`unlink`].
pub(crate) unsafe fn unlink_silently(entry: *mut JitCodeEntry) {
    // SAFETY: the caller keeps the contract.
    unsafe { unlink_as(entry, false) }
}

/// [`unlink`], telling the debugger if `announce`.
///
/// # Safety
/// As [`unlink`].
unsafe fn unlink_as(entry: *mut JitCodeEntry, announce: bool) {
    let _guard = lock();
    // SAFETY: as in `link`; `entry` is in the list, so its neighbours are valid entries.
    unsafe {
        let d = ptr::addr_of_mut!(__jit_debug_descriptor);
        let (prev, next) = ((*entry).prev_entry, (*entry).next_entry);
        if prev.is_null() {
            (*d).first_entry = next;
        } else {
            (*prev).next_entry = next;
        }
        if !next.is_null() {
            (*next).prev_entry = prev;
        }
        // GDB reads the entry it is told about, so it stays intact until the hook returned.
        if announce {
            notify(d, entry, JIT_UNREGISTER_FN);
        }
        (*entry).next_entry = ptr::null_mut();
        (*entry).prev_entry = ptr::null_mut();
    }
}

/// Puts `new` in `old`'s place in the list with one pointer store (a core file shows
/// either entry, never a broken list), then tells the debugger to drop `old` and read `new`.
/// After it returns, `old` and its payload may be freed.
///
/// # Safety
/// `old` was linked and not unlinked since; `new` satisfies [`link`]'s contract.
pub(crate) unsafe fn replace(old: *mut JitCodeEntry, new: *mut JitCodeEntry) {
    let _guard = lock();
    // SAFETY: as in `link` and `unlink`: both entries are valid, `old` is in the list.
    unsafe {
        let d = ptr::addr_of_mut!(__jit_debug_descriptor);
        let (prev, next) = ((*old).prev_entry, (*old).next_entry);
        (*new).prev_entry = prev;
        (*new).next_entry = next;
        if prev.is_null() {
            (*d).first_entry = new;
        } else {
            (*prev).next_entry = new;
        }
        if !next.is_null() {
            (*next).prev_entry = new;
        }
        notify(d, old, JIT_UNREGISTER_FN);
        notify(d, new, JIT_REGISTER_FN);
        (*old).next_entry = ptr::null_mut();
        (*old).prev_entry = ptr::null_mut();
    }
}

/// The operations the registry makes on a debugger's list of entries: the seam between
/// the registry's decisions and the process's descriptor. [`ProcessList`] is the real list;
/// the registry's unit tests put a list of their own behind it that records every operation
/// and says "attached" when told to, so that they can look at what a debugger would have
/// been told without touching the process's list. Generic (static dispatch): the real
/// list's operations are the plain functions of this module, inlined as before.
pub(crate) trait DebuggerList {
    /// The process's own list: the registry mirrors, for this list only, what registrations
    /// read before taking its lock (deferred mode, the reader budget) and what debugger
    /// scripts read (`jit_gdb_pending`) in statics, and runs the deferred-mode timer thread.
    const PROCESS: bool;

    /// Links `entry` at the head of the list and tells the debugger.
    ///
    /// # Safety
    /// As [`link`].
    unsafe fn link(&mut self, entry: *mut JitCodeEntry);

    /// Unlinks `entry` and tells the debugger.
    ///
    /// # Safety
    /// As [`unlink`].
    unsafe fn unlink(&mut self, entry: *mut JitCodeEntry);

    /// Links `entry` at the head of the list, telling the debugger nothing.
    ///
    /// # Safety
    /// As [`link`].
    unsafe fn link_silently(&mut self, entry: *mut JitCodeEntry);

    /// Unlinks `entry`, never announced, telling the debugger nothing.
    ///
    /// # Safety
    /// As [`unlink`].
    unsafe fn unlink_silently(&mut self, entry: *mut JitCodeEntry);

    /// Puts `new` in `old`'s place and tells the debugger.
    ///
    /// # Safety
    /// As [`replace`].
    unsafe fn replace(&mut self, old: *mut JitCodeEntry, new: *mut JitCodeEntry);

    /// Sets the size of a linked entry whose payload grew in place (no notification).
    ///
    /// # Safety
    /// As [`set_size`].
    unsafe fn set_size(&mut self, entry: *mut JitCodeEntry, size: usize);

    /// Is a debugger watching the hook right now ([`debugger_attached`])?
    fn attached(&self) -> bool;
}

/// The process's list (`__jit_debug_descriptor`), which GDB reads.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ProcessList;

impl DebuggerList for ProcessList {
    const PROCESS: bool = true;

    #[inline]
    unsafe fn link(&mut self, entry: *mut JitCodeEntry) {
        // SAFETY: the caller keeps `link`'s contract.
        unsafe { link(entry) }
    }

    #[inline]
    unsafe fn unlink(&mut self, entry: *mut JitCodeEntry) {
        // SAFETY: the caller keeps `unlink`'s contract.
        unsafe { unlink(entry) }
    }

    #[inline]
    unsafe fn link_silently(&mut self, entry: *mut JitCodeEntry) {
        // SAFETY: the caller keeps `link`'s contract.
        unsafe { link_silently(entry) }
    }

    #[inline]
    unsafe fn unlink_silently(&mut self, entry: *mut JitCodeEntry) {
        // SAFETY: the caller keeps `unlink`'s contract.
        unsafe { unlink_silently(entry) }
    }

    #[inline]
    unsafe fn replace(&mut self, old: *mut JitCodeEntry, new: *mut JitCodeEntry) {
        // SAFETY: the caller keeps `replace`'s contract.
        unsafe { replace(old, new) }
    }

    #[inline]
    unsafe fn set_size(&mut self, entry: *mut JitCodeEntry, size: usize) {
        // SAFETY: the caller keeps `set_size`'s contract.
        unsafe { set_size(entry, size) }
    }

    #[inline]
    fn attached(&self) -> bool {
        debugger_attached()
    }
}

/// Calls the hook GDB breaks on, with `relevant_entry` set, then resets the descriptor.
///
/// # Safety
/// Called with [`LIST_LOCK`] held and `d` the process descriptor.
unsafe fn notify(d: *mut JitDescriptor, entry: *mut JitCodeEntry, action: u32) {
    NOTIFICATIONS.fetch_add(1, Relaxed);
    if action == JIT_REGISTER_FN {
        // SAFETY: `entry` is valid per the contract.
        ANNOUNCED_BYTES.fetch_add(unsafe { (*entry).symfile_size }, Relaxed);
    }
    // SAFETY: per the contract, `d` is valid and we hold the lock.
    unsafe {
        (*d).relevant_entry = entry;
        (*d).action_flag = action;
        __jit_debug_register_code();
        (*d).action_flag = JIT_NOACTION;
        (*d).relevant_entry = ptr::null_mut();
    }
}

/// Sets the size of a linked entry's payload (the payload grew in place).
///
/// # Safety
/// `entry` is linked, its payload starts at the same address and holds `size` valid bytes,
/// and no other thread writes the entry meanwhile.
pub(crate) unsafe fn set_size(entry: *mut JitCodeEntry, size: usize) {
    // No list lock: the list's links are not touched, and an entry's size is only written by
    // its owner (the registry, under its own lock) while the process runs.
    // The payload bytes are written before the size (the compiler may not sink them below
    // the volatile store); a debugger stops the process at an instruction boundary, so it
    // sees the old size or the new one, both ending on a record boundary.
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: per the contract.
    unsafe { ptr::write_volatile(ptr::addr_of_mut!((*entry).symfile_size), size as u64) };
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// Is a debugger watching the hook right now?
///
/// A debugger that uses GDB's JIT interface (GDB, LLDB) keeps a software breakpoint on
/// `__jit_debug_register_code` while the process runs: on x86-64 its first byte is then
/// `int3` (0xcc), which the compiler never emits there. Reading our own code byte costs a
/// load, so registrations without a debugger skip the hook's stops and the consolidation
/// they would need. A debugger that attaches later reads the whole list anyway; callers read
/// the byte again after changing an entry in place, so one that attached meanwhile is
/// notified.
///
/// Debuggers that do not plant a software breakpoint there (hardware breakpoints, record
/// and replay tools such as rr replaying a recording) need `JIT_GDB_ALWAYS_NOTIFY=1` in the
/// process's environment: every change is then announced as if a debugger were attached.
/// On architectures other than x86-64 this always answers yes.
pub fn debugger_attached() -> bool {
    static ALWAYS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ALWAYS.get_or_init(|| std::env::var_os("JIT_GDB_ALWAYS_NOTIFY").is_some_and(|v| v == "1")) {
        return true;
    }
    hook_has_breakpoint()
}

#[cfg(target_arch = "x86_64")]
fn hook_has_breakpoint() -> bool {
    const INT3: u8 = 0xcc;
    let hook = __jit_debug_register_code as unsafe extern "C" fn() as *const u8;
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    // SAFETY: the first byte of a function of this process: mapped and readable (x86-64
    // text is readable). Volatile: a debugger changes it behind the compiler's back.
    unsafe { ptr::read_volatile(hook) == INT3 }
}

#[cfg(not(target_arch = "x86_64"))]
fn hook_has_breakpoint() -> bool {
    true
}

static NOTIFICATIONS: AtomicU64 = AtomicU64::new(0);
static ANNOUNCED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Hook calls made by this library so far (each one a stop when a debugger is attached),
/// and the payload bytes of the entries they announced (what a debugger read), for
/// benchmarks and diagnostics.
pub fn notifications() -> (u64, u64) {
    (NOTIFICATIONS.load(Relaxed), ANNOUNCED_BYTES.load(Relaxed))
}

/// Number of entries in the list (all runtimes'), for tests and diagnostics.
pub fn entry_count() -> usize {
    let _guard = lock();
    let mut n = 0;
    // SAFETY: walking the list under the lock; every linked entry is valid while linked.
    unsafe {
        let mut e = (*ptr::addr_of!(__jit_debug_descriptor)).first_entry;
        while !e.is_null() {
            n += 1;
            e = (*e).next_entry;
        }
    }
    n
}
