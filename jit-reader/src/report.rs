//! What the reader prints. GDB gives readers no output channel, so messages go to stderr,
//! prefixed `jit-reader:`.
//!
//! By default two things are reported. Refused payloads, one line each, and only the first
//! few of them: a core file full of damaged entries must not bury the user's session. And a
//! JIT frame whose caller cannot be found sanely (GDB then ends the backtrace there with
//! "PC not saved"), once per distinct message. With the
//! environment variable `JIT_READER_DEBUG=1` (read when the reader is loaded) every refusal
//! is printed with the payload's first bytes, plus one line per entry read, per
//! unregistered object skipped and per frame unwound or declined.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Refusals printed in full before the rest are only counted.
const SHOWN_REFUSALS: u64 = 3;

static DEBUG: AtomicBool = AtomicBool::new(false);
static REFUSALS: AtomicU64 = AtomicU64::new(0);

/// Reads the debug switch from the environment and resets the counters (reader load).
pub(crate) fn init() {
    let on = std::env::var("JIT_READER_DEBUG")
        .map(|v| !v.is_empty() && v != "0")
        .unwrap_or(false);
    DEBUG.store(on, Ordering::Relaxed);
    REFUSALS.store(0, Ordering::Relaxed);
}

/// Is `JIT_READER_DEBUG` on?
pub(crate) fn debug_on() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// Prints one line to stderr; a failing stderr is ignored (never panic inside GDB).
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(format_args!("jit-reader: {args}\n"));
}

/// A detail printed only with `JIT_READER_DEBUG=1`.
macro_rules! debug {
    ($($arg:tt)*) => {
        if $crate::report::debug_on() {
            $crate::report::line(format_args!($($arg)*));
        }
    };
}
pub(crate) use debug;

/// Reports a payload that claims to be ours but cannot be decoded.
pub(crate) fn refused(payload: &[u8], why: &str) {
    let n = REFUSALS.fetch_add(1, Ordering::Relaxed) + 1;
    if debug_on() {
        let head: Vec<String> = payload
            .iter()
            .take(32)
            .map(|b| format!("{b:02x}"))
            .collect();
        line(format_args!(
            "refused JIT entry #{n} ({} bytes, starting {}): {why}",
            payload.len(),
            head.join(" ")
        ));
    } else if n < SHOWN_REFUSALS {
        line(format_args!(
            "refused a corrupt JIT entry ({} bytes): {why}; its functions get no symbols or unwinding",
            payload.len()
        ));
    } else if n == SHOWN_REFUSALS {
        line(format_args!(
            "refused a corrupt JIT entry ({} bytes): {why}; further refusals are counted silently (JIT_READER_DEBUG=1 shows each)",
            payload.len()
        ));
    }
}

/// Reports a JIT frame whose caller cannot be found (a corrupt or unreadable stack), once:
/// GDB unwinds the same frames again for every command at a stop, so a message equal to
/// the previous one is not repeated.
pub(crate) fn backtrace_ends(message: String) {
    static LAST: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if *last != message {
        line(format_args!("{message}"));
        *last = message;
    }
}

/// Number of refusals since the reader was loaded, and a closing line when some were hidden.
pub(crate) fn finish() {
    let n = REFUSALS.swap(0, Ordering::Relaxed);
    if n > SHOWN_REFUSALS && !debug_on() {
        line(format_args!(
            "{n} corrupt JIT entries were refused in total"
        ));
    }
}
