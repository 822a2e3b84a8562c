//! Registration: encode an object, link it into GDB's list, unlink it when the handle drops.

use std::cell::UnsafeCell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::descriptor::{self, JitCodeEntry};
use crate::error::Result;
use crate::format::LiveCheck;
use crate::model::JitObject;

/// Payload format of a registration.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Compact records, read by our GDB reader (`libjitreader.so`, loaded with
    /// `jit-reader-load`). Names, lines, blocks and unwinding; no variables.
    Compact = 0,
    /// A minimal in-memory ELF object with DWARF, read by GDB and LLDB without any plugin.
    Elf = 1,
}

impl Format {
    /// Name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Format::Compact => "compact records",
            Format::Elf => "ELF",
        }
    }
}

/// What the list entry points to. Boxed, so its address is stable while registered.
struct EntryCell {
    /// Mutated only under the descriptor's lock (link/unlink) and by the debugger.
    entry: UnsafeCell<JitCodeEntry>,
    /// Nonzero while registered; cleared before the memory is freed. The compact payload
    /// names this slot's address and value so that the GDB reader can tell live code from
    /// freed and reused code (GDB never tells the reader about unregistration).
    live: AtomicU64,
    payload: Box<[u8]>,
}

/// A registered object. Dropping it unregisters the object: the debugger forgets its
/// functions and the payload is freed.
pub struct Registration {
    cell: Box<EntryCell>,
    format: Format,
    functions: usize,
}

// SAFETY: the entry's raw pointers are only read or written under the descriptor's lock
// (link, unlink) or by the debugger while the process is stopped; everything else in the cell
// is immutable or atomic once registered.
unsafe impl Send for Registration {}
// SAFETY: `&Registration` gives read-only access to the immutable payload only.
unsafe impl Sync for Registration {}

/// A fresh nonzero key for a live slot: unique per registration within a process, and
/// unlikely to be found by chance in memory that was freed and reused.
fn fresh_live_key() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| RandomState::new().build_hasher().finish());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(seed ^ n);
    h.finish() | 1
}

/// Encodes `object` in `format` and registers it with the debugger.
pub fn register(object: &JitObject, format: Format) -> Result<Registration> {
    object.validate()?;
    let mut cell = Box::new(EntryCell {
        entry: UnsafeCell::new(JitCodeEntry::new(&[])),
        live: AtomicU64::new(fresh_live_key()),
        payload: Box::new([]),
    });
    let payload = match format {
        Format::Compact => {
            let live = LiveCheck {
                address: &cell.live as *const AtomicU64 as u64,
                key: cell.live.load(Ordering::Relaxed),
            };
            crate::format::encode(object, Some(live))?
        }
        Format::Elf => crate::elf::encode(object)?,
    };
    cell.payload = payload.into_boxed_slice();
    *cell.entry.get_mut() = JitCodeEntry::new(&cell.payload);
    // SAFETY: the entry is boxed (stable address), in no list, and the payload it points to is
    // owned by the same box; both live until `Drop` unlinks the entry.
    unsafe { descriptor::link(cell.entry.get()) };
    // Profiler outputs (perf map, jitdump) never fail the registration.
    crate::perf::registered(object);
    Ok(Registration {
        cell,
        format,
        functions: object.functions().len(),
    })
}

impl Registration {
    /// The encoded payload the debugger reads.
    pub fn payload(&self) -> &[u8] {
        &self.cell.payload
    }

    /// Payload format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Number of functions registered by this handle.
    pub fn function_count(&self) -> usize {
        self.functions
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: linked in `register` and never unlinked before (drop runs once).
        unsafe { descriptor::unlink(self.cell.entry.get()) };
        self.cell.live.store(0, Ordering::Release);
    }
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("format", &self.format)
            .field("functions", &self.functions)
            .field("payload_bytes", &self.cell.payload.len())
            .finish()
    }
}
