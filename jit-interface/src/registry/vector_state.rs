//! Keeps the program's vector registers intact across the flush a debugger calls in it.
//!
//! Why: GDB 13 cannot write the x86 extended state back on CPUs whose XSAVE area holds AMX
//! tiles (ptrace answers `EFAULT`, GDB prints "Couldn't write extended state status: Bad
//! address"). An inferior call ends by restoring every register, so the program would go
//! on with the XMM/YMM/ZMM values the called code left behind: its floating-point and
//! vector data silently changed because a debugger looked at it. GDB 16 writes the state
//! back. So the flush our GDB scripts call saves the extended state (`xsave64`) before any
//! Rust code runs and restores it (`xrstor64`) after: whatever the debugger manages to
//! restore, the registers are as they were.
//!
//! The save and restore are in assembly around the Rust flush, because compiled Rust may
//! use vector registers anywhere (a debug build copies 16-byte values through xmm0). The
//! components to save are worked out beforehand ([`prepare`], from `set_deferred`), in the
//! program's own flow.
//!
//! Non-goals: other architectures (aarch64's GDB writes its vector registers back), and
//! functions a user calls from the debugger (`call jit_flush()`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The XSAVE mask the guard uses (XCR0 less the AMX components), 0 when it cannot save.
static MASK: AtomicU64 = AtomicU64::new(0);
/// Only one thread at a time uses the save area (a debugger calls in with the other
/// threads stopped; a second caller goes without).
static BUSY: AtomicBool = AtomicBool::new(false);

/// Works out what the guard saves (once is enough; cheap to repeat).
pub(super) fn prepare() {
    MASK.store(imp::mask(), Ordering::Relaxed);
}

/// Runs `flush` (an `extern "C" fn() -> i64`) with the vector registers saved before and
/// restored after, when [`prepare`] found how.
pub(super) fn guarded(flush: extern "C" fn() -> i64) -> i64 {
    imp::guarded(flush)
}

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// The assembly in `imp`: xsave64, call the flush in RDI, xrstor64.
    fn jit_interface_guarded_flush(flush: extern "C" fn() -> i64) -> i64;
}

#[cfg(target_arch = "x86_64")]
mod imp {
    use super::{jit_interface_guarded_flush, BUSY, MASK};
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    use std::cell::UnsafeCell;

    /// The save area: XSAVE needs 64-byte alignment. 16 KiB holds every component of
    /// today's CPUs (the whole area with AMX is about 11 KiB).
    #[repr(C, align(64))]
    struct Area(UnsafeCell<[u8; AREA_SIZE]>);
    const AREA_SIZE: usize = 16384;

    // SAFETY: only the thread that set `BUSY` from 0 to 1 (in the assembly below) touches
    // the bytes.
    unsafe impl Sync for Area {}

    static AREA: Area = Area(UnsafeCell::new([0; AREA_SIZE]));

    /// AMX tile configuration and data (XCR0 bits 17 and 18) stay out of the mask: Linux
    /// arms XFD for tile data until a process asks for it, and XRSTOR of an armed
    /// component faults (the kernel then sends SIGILL); nothing a flush runs touches tiles.
    const AMX: u64 = (1 << 17) | (1 << 18);

    pub(super) fn mask() -> u64 {
        let osxsave = __cpuid(1).ecx & (1 << 27) != 0;
        if !osxsave {
            return 0;
        }
        let (lo, hi): (u32, u32);
        // SAFETY: XGETBV with ECX = 0 is allowed at any privilege level once OSXSAVE is set
        // (checked above); it only reads XCR0 into EDX:EAX.
        unsafe {
            std::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi,
                            options(nomem, nostack, preserves_flags));
        }
        // Leaf 0xD exists when XSAVE does (OSXSAVE implies it); EBX of sub-leaf 0 is the
        // size the components enabled in XCR0 need, an upper bound for any subset.
        if __cpuid_count(0xD, 0).ebx as usize > AREA_SIZE {
            return 0;
        }
        ((u64::from(hi) << 32) | u64::from(lo)) & !AMX
    }

    // No Rust runs between entry and XSAVE64 or between XRSTOR64 and return. Stack: entry
    // RSP is 8 mod 16; three pushes make the call aligned. R12: the flush's result, R13:
    // whether the state was saved, RBX: the mask (all callee-saved).
    std::arch::global_asm!(
        ".globl jit_interface_guarded_flush",
        ".hidden jit_interface_guarded_flush",
        ".type jit_interface_guarded_flush,@function",
        "jit_interface_guarded_flush:",
        "push rbx",
        "push r12",
        "push r13",
        "mov r12, rdi",
        "xor r13d, r13d",
        "mov rbx, qword ptr [rip + {mask}]",
        "test rbx, rbx",
        "jz 2f",
        "mov al, 1",
        "xchg al, byte ptr [rip + {busy}]",
        "test al, al",
        "jnz 2f",
        "mov r13d, 1",
        "mov eax, ebx",
        "mov rdx, rbx",
        "shr rdx, 32",
        "lea rcx, [rip + {area}]",
        "xsave64 [rcx]",
        "2:",
        "call r12",
        "mov r12, rax",
        "test r13d, r13d",
        "jz 3f",
        "mov eax, ebx",
        "mov rdx, rbx",
        "shr rdx, 32",
        "lea rcx, [rip + {area}]",
        "xrstor64 [rcx]",
        "mov byte ptr [rip + {busy}], 0",
        "3:",
        "mov rax, r12",
        "pop r13",
        "pop r12",
        "pop rbx",
        "ret",
        ".size jit_interface_guarded_flush, . - jit_interface_guarded_flush",
        mask = sym MASK,
        busy = sym BUSY,
        area = sym AREA,
    );

    pub(super) fn guarded(flush: extern "C" fn() -> i64) -> i64 {
        // SAFETY: the assembly above follows the C ABI (callee-saved registers pushed and
        // popped, the stack aligned for the call), touches only the statics it names (the
        // area under the BUSY flag) and calls `flush`, a valid C-ABI function.
        unsafe { jit_interface_guarded_flush(flush) }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    pub(super) fn mask() -> u64 {
        let _ = &super::BUSY;
        0
    }

    pub(super) fn guarded(flush: extern "C" fn() -> i64) -> i64 {
        flush()
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use std::sync::atomic::Ordering;

    const KNOWN: u64 = 0x1122_3344_5566_7788;

    /// Sets xmm7 and ymm8's upper half, clobbers both, returns what is there after.
    #[inline(never)]
    fn set_then_clobber(guard: bool) -> (u64, u64) {
        extern "C" fn clobber() -> i64 {
            // SAFETY: writes xmm7 and xmm8 only, declared.
            unsafe {
                std::arch::asm!("pxor xmm7, xmm7", "pxor xmm8, xmm8", out("xmm7") _, out("xmm8") _)
            };
            7
        }
        let (a, b): (u64, u64);
        // SAFETY: the block writes xmm7 and xmm8 (declared), and reads them back at its end
        // into general registers; the call in between follows the C ABI (all vector
        // registers declared clobbered by `clobber_abi`).
        unsafe {
            std::arch::asm!(
                "movq xmm7, {k}",
                "movq xmm8, {k}",
                "test {g}, {g}",
                "jz 2f",
                "mov rdi, {f}",
                "call {guarded}",
                "jmp 3f",
                "2:",
                "call {f}",
                "3:",
                "movq r14, xmm7",
                "movq r15, xmm8",
                k = in(reg) KNOWN,
                g = in(reg) u64::from(guard),
                f = in(reg) clobber as extern "C" fn() -> i64,
                guarded = sym super::jit_interface_guarded_flush,
                out("r14") a,
                out("r15") b,
                clobber_abi("C"),
            );
        }
        (a, b)
    }

    #[test]
    fn vector_registers_come_back_as_they_were() {
        super::prepare();
        assert_ne!(
            super::MASK.load(Ordering::Relaxed),
            0,
            "no XSAVE on this machine?"
        );
        // Without the guard the clobber shows (the test can see one)...
        assert_eq!(set_then_clobber(false), (0, 0));
        // ...with it, the values set before are back.
        assert_eq!(set_then_clobber(true), (KNOWN, KNOWN));
    }
}
