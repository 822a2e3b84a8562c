//! Errors of the registration API. Each says what was wrong with the input, in words a JIT
//! author can act on.

use std::fmt;

/// Why a registration-API call failed. More reasons may come: match with a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A function name is empty, contains a NUL byte or is not UTF-8 (C API).
    BadName(String),
    /// A text other than a function's name (block, variable or call target name, jitdump
    /// directory) is not valid UTF-8 (C API); the message says which.
    BadText(String),
    /// A function has size 0, or `start + size` overflows the address space.
    EmptyOrOverflowingFunction { name: String, start: u64, size: u64 },
    /// Two functions of one object share addresses.
    Overlap { first: String, second: String },
    /// A function index that this object does not have.
    NoSuchFunction(usize),
    /// A negative function id (C API: ids are what `jit_object_add_function` returned).
    NegativeFunctionId(i64),
    /// Line rows, unwind rows, blocks or call sites that are out of order or outside their
    /// function.
    BadRows { function: String, why: String },
    /// A source file name that is empty or contains a NUL byte.
    BadFileName(String),
    /// A variable that cannot be described (bad name, location or type).
    BadVariable { function: String, why: String },
    /// The object cannot be encoded in the requested payload format.
    Unsupported { format: PayloadFormat, why: String },
    /// An object with no function in it.
    EmptyObject,
    /// A NULL pointer was passed to the C API.
    NullPointer(&'static str),
    /// The same registration was listed more than once (C API, `jit_unregister_many`): this
    /// many repeats, each skipped.
    ListedTwice(usize),
    /// Handles that are not live registrations (C API, `jit_unregister` and
    /// `jit_unregister_many`): unregistered before, or never returned by `jit_register`;
    /// this many, each left alone.
    NotRegistered(usize),
    /// A registration puts code inside a gap between the functions of a live object that
    /// was registered alone (64 functions or more), whose entry's sections span that gap;
    /// the entry cannot be re-encoded (nothing of it is kept), so the new code would be
    /// hidden from the debugger. `span` is the spanning section.
    InsideGap { address: u64, span: (u64, u64) },
    /// A limit of the payload format was exceeded.
    TooLarge(String),
    /// A perf output (map or jitdump) could not be written.
    Io(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadName(why) => write!(f, "bad function name: {why}"),
            Error::BadText(why) => write!(f, "{why}"),
            Error::EmptyOrOverflowingFunction { name, start, size } => write!(
                f,
                "function `{name}` at {start:#x} has size {size}: a function needs at least one byte and must end below 2^64"
            ),
            Error::Overlap { first, second } => write!(
                f,
                "functions `{first}` and `{second}` overlap: functions of one object must not share addresses"
            ),
            Error::NoSuchFunction(i) => write!(f, "function index {i} does not exist in this object"),
            Error::NegativeFunctionId(i) => write!(
                f,
                "function id {i} is negative: function ids are what jit_object_add_function returned"
            ),
            Error::BadRows { function, why } => write!(f, "function `{function}`: {why}"),
            Error::BadFileName(why) => write!(f, "bad source file name: {why}"),
            Error::BadVariable { function, why } => {
                write!(f, "function `{function}`: bad variable: {why}")
            }
            Error::Unsupported { format, why } => {
                write!(f, "cannot encode this object as {format}: {why}")
            }
            Error::EmptyObject => write!(f, "the object has no functions: add one before registering"),
            Error::NullPointer(what) => write!(f, "NULL pointer passed as `{what}`"),
            Error::InsideGap { address, span } => write!(
                f,
                "code at {address:#x} lies in a gap between the functions of a live object registered earlier \
                 (one of 64 functions or more, whose debugger entry spans {:#x}..{:#x}); \
                 unregister that object first, or set JIT_GDB_SPLIT_GAPS=1 so that no entry spans gaps",
                span.0, span.1
            ),
            Error::NotRegistered(n) => write!(
                f,
                "{n} handle(s) are not live registrations (unregistered before, or not from jit_register): left alone, nothing freed"
            ),
            Error::ListedTwice(n) => write!(
                f,
                "{n} registration(s) listed more than once: each was unregistered once, and the repeats skipped"
            ),
            Error::TooLarge(why) => write!(f, "too large: {why}"),
            Error::Io(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for Error {}

/// The payload format an [`Error::Unsupported`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PayloadFormat {
    /// Compact records.
    Compact,
    /// ELF with DWARF.
    Elf,
    /// Any format: a limit of the registry itself.
    Any,
    /// A format number the C API does not know (`jit_register`).
    Unknown(u32),
}

impl PayloadFormat {
    /// Name for messages.
    pub fn name(self) -> &'static str {
        match self {
            PayloadFormat::Compact => "compact records",
            PayloadFormat::Elf => "ELF",
            PayloadFormat::Any => "any",
            PayloadFormat::Unknown(_) => "an unknown format",
        }
    }
}

impl fmt::Display for PayloadFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Result of the registration API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_formats_read_as_before() {
        let says = |format| {
            Error::Unsupported {
                format,
                why: "why".into(),
            }
            .to_string()
        };
        assert_eq!(
            says(PayloadFormat::Compact),
            "cannot encode this object as compact records: why"
        );
        assert_eq!(
            says(PayloadFormat::Elf),
            "cannot encode this object as ELF: why"
        );
        assert_eq!(
            says(PayloadFormat::Any),
            "cannot encode this object as any: why"
        );
        assert_eq!(
            says(PayloadFormat::Unknown(7)),
            "cannot encode this object as an unknown format: why"
        );
    }
}
