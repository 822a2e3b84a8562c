//! Command-line parsing (std only) and the help text.

use std::ffi::OsString;
use std::path::PathBuf;

use jit_interface::{Arch, Format};

pub const HELP: &str = "\
jit-gdb: debug JIT-compiled code in GDB (names, source lines and backtraces through JIT frames)

USAGE:
    jit-gdb [--no-core-check] [GDB ARGS...] [--] PROGRAM [ARGS...]
        Start GDB with the jit-gdb reader (jit-reader-load) and GDB scripts loaded,
        like rust-gdb. Without `--`, all arguments go to GDB unchanged (so
        `jit-gdb PROGRAM CORE` and `jit-gdb -p PID` work); with `--`, what follows is
        the program and its arguments (GDB's --args). A core file is checked first
        (see CORE FILES).
    jit-gdb demo [--format compact|elf] [--crash] [--keep-core] [--arch aarch64]
        Compile and run the bundled demo script (demo/fib.jg) with the demo JIT under
        GDB in batch mode: stop in a native callback called from JIT code and show the
        backtrace through the JIT frames with the script's lines. --crash makes the JIT
        code fault, then shows the post-mortem backtrace from the core file
        (--keep-core keeps it). Default format: compact (needs the reader).
        --arch aarch64 (on x86-64): the aarch64 build of jit-gdb (JIT_GDB_AARCH64_BIN)
        runs the demo under qemu-aarch64 and gdb-multiarch debugs it over qemu's
        gdbstub; --crash then stops live at the fault in the JIT code.
    jit-gdb core PROGRAM CORE [--no-core-check]
        Batch report of a core file: every thread's backtrace, JIT frames included,
        and the registered JIT functions. The core is checked first (see CORE FILES).
    jit-gdb inspect CORE --exe PROGRAM [--list | --symbolize [ADDR...] | --perf-map FILE | --elf FILE]
        The JIT functions registered in a core file, read without GDB. PROGRAM is the
        executable (or shared library) that defines __jit_debug_descriptor.
        --list (default)  every entry and its functions: start, size, name, source file
        --symbolize       `ADDR name+0xOFF file:line` per address (`ADDR ??` if unknown);
                          addresses in hex (0x optional), from stdin when none are given
        --perf-map FILE   `START SIZE name` lines (hex, no 0x), as perf reads /tmp/perf-PID.map
        --elf FILE        one ELF object with every JIT symbol and line table (addr2line,
                          pprof, `add-symbol-file`)
        Exit status: 0 all read; 3 report printed but parts unreadable (listed); 1 nothing
        readable; 2 usage error.
    jit-gdb --reader-path
        Print the path of the GDB reader plugin (libjitreader.so) that would be loaded.
    jit-gdb --help | --version

CORE FILES:
    Before GDB reads a core, its JIT entry list is checked without GDB (as `inspect`
    reads it). A list that would crash or hang GDB (a cycle, a symfile_size GDB would
    abort allocating, entries or payloads outside the core's memory) is named in one
    line, and GDB reads a repaired copy in the temp directory (removed when GDB exits)
    whose list is cut before the first bad entry; the original is not written.
    --no-core-check gives GDB the core as it is.

FORMATS:
    compact  compact records, read by the reader plugin libjitreader.so (smaller)
    elf      in-memory ELF objects with DWARF, read by GDB itself (shows `info args`)

ENVIRONMENT:
    JIT_GDB_READER   path of libjitreader.so (otherwise: next to the jit-gdb executable,
                     then GDB's jit-reader directory /usr/lib/gdb)
    JIT_GDB_SCRIPTS  the GDB Python extension: jit.py or the directory holding it
    JIT_GDB_GDB      the GDB to run (otherwise `gdb` from PATH)
    JIT_GDB_AARCH64_BIN  the aarch64 build of jit-gdb for `demo --arch aarch64`
                     (otherwise TARGET/aarch64-unknown-linux-gnu/PROFILE/jit-gdb of the
                     cargo target directory this jit-gdb was built in)
";

/// Hidden from the help: `jit-gdb run-script FILE [--format compact|elf|none] [--crash]`
/// runs a script with the demo JIT (what `demo` runs under GDB).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    Version,
    ReaderPath,
    Demo {
        format: Format,
        crash: bool,
        keep_core: bool,
        /// The instruction set of the demo JIT's code (`--arch`; this machine's by default).
        arch: Arch,
    },
    RunScript {
        file: PathBuf,
        /// `None`: run without registering with the debugger.
        format: Option<Format>,
        crash: bool,
    },
    Core {
        program: PathBuf,
        core: PathBuf,
        /// Check the core's JIT list before GDB reads it (`--no-core-check`: no).
        check: bool,
    },
    /// `inspect CORE --exe PROGRAM ...`: read the JIT functions of a core without GDB.
    Inspect(crate::inspect::Options),
    /// Run GDB with these arguments after ours; `check`: check a core file they name first.
    Gdb {
        args: Vec<OsString>,
        check: bool,
    },
}

/// A usage error (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (see `jit-gdb --help`)", self.0)
    }
}

fn parse_format(value: Option<OsString>, allow_none: bool) -> Result<Option<Format>, UsageError> {
    let Some(v) = value else {
        return Err(UsageError(
            "`--format` needs a value: compact or elf".into(),
        ));
    };
    match v.to_str() {
        Some("compact") => Ok(Some(Format::Compact)),
        Some("elf") => Ok(Some(Format::Elf)),
        Some("none") if allow_none => Ok(None),
        _ => Err(UsageError(format!(
            "unknown format {v:?}: use compact or elf{}",
            if allow_none { " (or none)" } else { "" }
        ))),
    }
}

fn parse_arch(value: Option<OsString>) -> Result<Arch, UsageError> {
    match value.as_ref().map(|v| v.to_str()) {
        None => Err(UsageError(
            "`--arch` needs a value: x86-64 or aarch64".into(),
        )),
        Some(Some("x86-64" | "x86_64")) => Ok(Arch::X86_64),
        Some(Some("aarch64" | "arm64")) => Ok(Arch::Aarch64),
        Some(_) => Err(UsageError(format!(
            "unknown architecture {:?}: use x86-64 or aarch64",
            value.unwrap_or_default()
        ))),
    }
}

/// Removes `--no-core-check` from the first `end` arguments (ours, not GDB's or the
/// program's); returns whether the core check stays on.
fn take_no_core_check(args: &mut Vec<OsString>, end: usize) -> bool {
    let before = args.len();
    let mut i = 0;
    args.retain(|a| {
        i += 1;
        i > end || a != "--no-core-check"
    });
    args.len() == before
}

/// Parses the arguments after the program name.
pub fn parse(args: Vec<OsString>) -> Result<Command, UsageError> {
    let first = args.first().and_then(|a| a.to_str()).unwrap_or("");
    match first {
        "-h" | "--help" | "help" => Ok(Command::Help),
        "-V" | "--version" => Ok(Command::Version),
        "--reader-path" => {
            if args.len() > 1 {
                return Err(UsageError("`--reader-path` takes no arguments".into()));
            }
            Ok(Command::ReaderPath)
        }
        "demo" => {
            let (mut format, mut crash, mut keep_core) = (Format::Compact, false, false);
            let mut arch = Arch::HOST;
            let mut it = args.into_iter().skip(1);
            while let Some(a) = it.next() {
                match a.to_str() {
                    Some("--format") => format = parse_format(it.next(), false)?.unwrap_or(format),
                    Some("--crash") => crash = true,
                    Some("--keep-core") => keep_core = true,
                    Some("--arch") => arch = parse_arch(it.next())?,
                    _ => return Err(UsageError(format!("`demo`: unknown argument {a:?}"))),
                }
            }
            if keep_core && !crash {
                return Err(UsageError(
                    "`--keep-core` only applies with `--crash`".into(),
                ));
            }
            if keep_core && arch != Arch::HOST {
                return Err(UsageError(format!(
                    "`--keep-core` does not apply with `--arch {}`: under qemu the fault is shown live, without a core file",
                    arch.name()
                )));
            }
            Ok(Command::Demo {
                format,
                crash,
                keep_core,
                arch,
            })
        }
        "run-script" => {
            let (mut file, mut format, mut crash) = (None, Some(Format::Compact), false);
            let mut it = args.into_iter().skip(1);
            while let Some(a) = it.next() {
                match a.to_str() {
                    Some("--format") => format = parse_format(it.next(), true)?,
                    Some("--crash") => crash = true,
                    Some(s) if s.starts_with('-') => {
                        return Err(UsageError(format!("`run-script`: unknown option {s:?}")))
                    }
                    _ if file.is_none() => file = Some(PathBuf::from(a)),
                    _ => {
                        return Err(UsageError(format!(
                            "`run-script`: unexpected argument {a:?}"
                        )))
                    }
                }
            }
            let file = file.ok_or_else(|| UsageError("`run-script` needs a script file".into()))?;
            Ok(Command::RunScript {
                file,
                format,
                crash,
            })
        }
        "inspect" => {
            crate::inspect::parse(args.into_iter().skip(1).collect()).map(Command::Inspect)
        }
        "core" => {
            let mut rest: Vec<OsString> = args.into_iter().skip(1).collect();
            let check = take_no_core_check(&mut rest, usize::MAX);
            let mut rest = rest.into_iter();
            match (rest.next(), rest.next(), rest.next()) {
                (Some(program), Some(core), None) => Ok(Command::Core {
                    program: program.into(),
                    core: core.into(),
                    check,
                }),
                _ => Err(UsageError(
                    "usage: jit-gdb core PROGRAM CORE [--no-core-check]".into(),
                )),
            }
        }
        _ => {
            // rust-gdb style: our options, then GDB's. `--` starts the program and its args.
            let mut args = args;
            let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
            let check = take_no_core_check(&mut args, end);
            match args.iter().position(|a| a == "--") {
                Some(i) if i + 1 == args.len() => Err(UsageError(
                    "`--` must be followed by the program to debug".into(),
                )),
                Some(i) => {
                    let mut out: Vec<OsString> = args[..i].to_vec();
                    out.push("--args".into());
                    out.extend(args[i + 1..].iter().cloned());
                    Ok(Command::Gdb { args: out, check })
                }
                None => Ok(Command::Gdb { args, check }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, UsageError> {
        parse(args.iter().map(OsString::from).collect())
    }

    #[test]
    fn subcommands() {
        assert_eq!(
            p(&["demo"]).unwrap(),
            Command::Demo {
                format: Format::Compact,
                crash: false,
                keep_core: false,
                arch: Arch::HOST
            }
        );
        assert_eq!(
            p(&["demo", "--format", "elf", "--crash"]).unwrap(),
            Command::Demo {
                format: Format::Elf,
                crash: true,
                keep_core: false,
                arch: Arch::HOST
            }
        );
        assert_eq!(
            p(&["demo", "--arch", "aarch64", "--crash"]).unwrap(),
            Command::Demo {
                format: Format::Compact,
                crash: true,
                keep_core: false,
                arch: Arch::Aarch64
            }
        );
        assert_eq!(
            p(&["demo", "--arch", "x86_64"]).unwrap(),
            p(&["demo", "--arch", "x86-64"]).unwrap()
        );
        assert_eq!(
            p(&["run-script", "a.jg", "--format", "none"]).unwrap(),
            Command::RunScript {
                file: "a.jg".into(),
                format: None,
                crash: false
            }
        );
        assert_eq!(
            p(&["core", "prog", "core.1"]).unwrap(),
            Command::Core {
                program: "prog".into(),
                core: "core.1".into(),
                check: true
            }
        );
        assert_eq!(
            p(&["core", "--no-core-check", "prog", "core.1"]).unwrap(),
            Command::Core {
                program: "prog".into(),
                core: "core.1".into(),
                check: false
            }
        );
        assert_eq!(p(&["--reader-path"]).unwrap(), Command::ReaderPath);
    }

    #[test]
    fn gdb_passthrough() {
        let gdb = |v: &[&str]| Command::Gdb {
            args: v.iter().map(OsString::from).collect(),
            check: true,
        };
        assert_eq!(
            p(&["-q", "prog", "core"]).unwrap(),
            gdb(&["-q", "prog", "core"])
        );
        assert_eq!(
            p(&["--no-core-check", "prog", "core"]).unwrap(),
            Command::Gdb {
                args: ["prog", "core"].iter().map(OsString::from).collect(),
                check: false
            }
        );
        // After `--` it is the program's argument.
        assert_eq!(
            p(&["--", "prog", "--no-core-check"]).unwrap(),
            gdb(&["--args", "prog", "--no-core-check"])
        );
        assert_eq!(
            p(&["-q", "--", "prog", "--flag", "x"]).unwrap(),
            gdb(&["-q", "--args", "prog", "--flag", "x"])
        );
        assert_eq!(p(&[]).unwrap(), gdb(&[]));
    }

    #[test]
    fn usage_errors_name_the_problem() {
        let e = |v: &[&str]| p(v).unwrap_err().to_string();
        assert_eq!(
            e(&["demo", "--format", "dwarf"]),
            "unknown format \"dwarf\": use compact or elf (see `jit-gdb --help`)"
        );
        assert_eq!(
            e(&["demo", "--format", "none"]),
            "unknown format \"none\": use compact or elf (see `jit-gdb --help`)"
        );
        assert!(e(&["demo", "--format"]).contains("needs a value"));
        assert!(e(&["demo", "--frobnicate"]).contains("unknown argument"));
        assert_eq!(
            e(&["demo", "--arch", "riscv64"]),
            "unknown architecture \"riscv64\": use x86-64 or aarch64 (see `jit-gdb --help`)"
        );
        assert!(e(&["demo", "--arch"]).contains("needs a value"));
        let foreign = match Arch::HOST {
            Arch::X86_64 => "aarch64",
            Arch::Aarch64 => "x86-64",
        };
        assert!(e(&["demo", "--arch", foreign, "--crash", "--keep-core"])
            .contains("does not apply with `--arch"));
        assert!(e(&["core", "prog"]).contains("usage: jit-gdb core PROGRAM CORE"));
        assert!(e(&["run-script"]).contains("needs a script file"));
        assert!(e(&["--",]).contains("must be followed by the program"));
    }
}
