//! Finding GDB, the reader plugin and the GDB scripts, and running GDB for each mode.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use jit_interface::Format;

/// The reader plugin's file name (cargo builds it next to the jit-gdb executable).
pub const READER_FILE: &str = "libjitreader.so";

/// The GDB to run: `JIT_GDB_GDB` (a path, or a name looked up in PATH), or `gdb` from PATH.
pub fn find_gdb() -> Result<PathBuf, String> {
    if let Some(v) = std::env::var_os("JIT_GDB_GDB") {
        let p = PathBuf::from(&v);
        let found = if p.components().count() > 1 {
            p.is_file().then_some(p)
        } else {
            find_in_path(&v)
        };
        return found.ok_or_else(|| {
            format!(
                "JIT_GDB_GDB is set to {}, which is not a file or a program in PATH: point it at a GDB executable or unset it",
                v.to_string_lossy()
            )
        });
    }
    find_in_path(OsStr::new("gdb")).ok_or_else(|| {
        "GDB not found in PATH: install it (Debian/Ubuntu: `apt-get install gdb`) \
         or set JIT_GDB_GDB=/path/to/gdb"
            .to_string()
    })
}

fn find_in_path(name: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The reader plugin: `JIT_GDB_READER` (an explicit choice, so it wins), next to this
/// executable, then GDB's jit-reader directory.
pub fn find_reader() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("JIT_GDB_READER") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return absolute(&p);
        }
        return Err(format!(
            "JIT_GDB_READER is set to {}, which is not a file: point it at libjitreader.so \
             (build it with `cargo build -p jit-reader`) or unset it",
            p.display()
        ));
    }
    let mut tried = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        tried.push(dir.join(READER_FILE));
    }
    // Where GDB looks for relative `jit-reader-load` names (Debian: $libdir/gdb).
    tried.push(PathBuf::from("/usr/lib/gdb").join(READER_FILE));
    tried.push(PathBuf::from("/usr/local/lib/gdb").join(READER_FILE));
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "the GDB reader plugin {READER_FILE} was not found (looked in: {}). Build it with \
         `cargo build -p jit-reader` (it lands next to jit-gdb), or set JIT_GDB_READER=/path/to/{READER_FILE}",
        list.join(", ")
    ))
}

/// The GDB Python extension: `JIT_GDB_SCRIPTS` (jit.py or its directory), else the source
/// tree's `gdb-scripts/jit.py` if it exists. `Ok(None)`: not installed (optional).
pub fn find_scripts() -> Result<Option<PathBuf>, String> {
    if let Some(p) = std::env::var_os("JIT_GDB_SCRIPTS") {
        let p = PathBuf::from(p);
        let file = if p.is_dir() {
            p.join("jit.py")
        } else {
            p.clone()
        };
        if file.is_file() {
            return absolute(&file).map(Some);
        }
        return Err(format!(
            "JIT_GDB_SCRIPTS is set to {}, but {} is not a file: point it at gdb-scripts/jit.py or unset it",
            p.display(),
            file.display()
        ));
    }
    let built_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("gdb-scripts/jit.py");
    Ok(built_in.is_file().then_some(built_in))
}

fn absolute(p: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(p).map_err(|e| format!("cannot resolve {}: {e}", p.display()))
}

/// The environment variable that names the source session directory to the reader
/// (`jit_reader::sources::SESSION_ENV`).
pub const SOURCE_SESSION_ENV: &str = "JIT_READER_SOURCE_DIR";

/// A source session directory for this GDB (see `jit_interface::source_cache`): named to
/// the reader through [`SOURCE_SESSION_ENV`] in this process's environment, which GDB
/// inherits, and put at the end of GDB's source path by the returned commands, so that the
/// reader keeps the runtime's file names (`bt` shows `fib.js:7`, not a cache path) while
/// GDB still opens a file for each (GDB 10-14 crash on one they cannot open). Real files
/// in the current directory come first. None when no cache directory can be written: the
/// reader then names files by their cache paths itself.
fn source_session_args() -> Vec<OsString> {
    let Ok(dir) = jit_interface::source_cache::SourceCache::open().and_then(|c| c.new_session())
    else {
        return Vec::new();
    };
    // Single-threaded here: nothing reads the environment concurrently.
    std::env::set_var(SOURCE_SESSION_ENV, &dir);
    let mut v: Vec<OsString> = vec!["-iex".into()];
    v.push(cat("set directories $cdir:$cwd:", dir.as_os_str()));
    // The program under GDB has no use for it.
    v.push("-iex".into());
    v.push(format!("unset environment {SOURCE_SESSION_ENV}").into());
    v
}

/// GDB arguments that load the reader (before anything else, so it sees every entry) and
/// the Python extension, with a source session directory for both.
pub fn setup_args(reader: Option<&Path>, scripts: Option<&Path>) -> Vec<OsString> {
    let mut v = Vec::new();
    if reader.is_some() || scripts.is_some() {
        v.extend(source_session_args());
    }
    if let Some(r) = reader {
        v.push("-iex".into());
        v.push(cat("jit-reader-load ", r.as_os_str()));
    }
    if let Some(s) = scripts {
        v.push("-ex".into());
        v.push(cat("source ", s.as_os_str()));
    }
    v
}

fn cat(a: &str, b: &OsStr) -> OsString {
    let mut s = OsString::from(a);
    s.push(b);
    s
}

/// `-ex CMD` for each command.
fn ex(cmds: &[&str]) -> Vec<OsString> {
    cmds.iter()
        .flat_map(|c| ["-ex".into(), OsString::from(*c)])
        .collect()
}

/// Like [`ex`], but echoes each command first, so a batch transcript reads like a session.
fn ex_echoed(cmds: &[&str]) -> Vec<OsString> {
    cmds.iter()
        .flat_map(|c| {
            [
                "-ex".into(),
                OsString::from(format!("echo \\n(gdb) {c}\\n")),
                "-ex".into(),
                OsString::from(*c),
            ]
        })
        .collect()
}

/// Batch-mode GDB without user init files. The demo binary's Rust pretty-printer hook
/// would only print a warning about a missing script: leave auto-loading off.
fn batch_args() -> Vec<OsString> {
    ["-batch", "-nx", "-iex", "set auto-load python-scripts off"]
        .iter()
        .map(OsString::from)
        .collect()
}

/// Checks that `p` names a readable file, saying what it is for.
pub fn check_readable(what: &str, p: &Path) -> Result<(), String> {
    match std::fs::File::open(p) {
        Ok(f) => match f.metadata() {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(format!("{what} {} is not a regular file", p.display())),
            Err(e) => Err(format!("cannot read {what} {}: {e}", p.display())),
        },
        Err(e) => Err(format!(
            "cannot read {what} {}: {e}; check the path and permissions",
            p.display()
        )),
    }
}

/// Runs `gdb` with `args`, its output going to ours; returns its exit status (128 + N, as
/// shells say it, when signal N killed it: GDB aborts on some damaged input).
fn run_gdb(gdb: &Path, args: &[OsString]) -> Result<i32, String> {
    use std::os::unix::process::ExitStatusExt;
    let status = Command::new(gdb)
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", gdb.display()))?;
    if let Some(sig) = status.signal() {
        eprintln!("jit-gdb: {} was killed by signal {sig}", gdb.display());
        return Ok(128 + sig);
    }
    Ok(status.code().unwrap_or(1))
}

/// A repaired copy of a damaged core ([`crate::core_check`]), in a directory of its own
/// that is removed on drop.
struct RepairedCore {
    dir: PathBuf,
    core: PathBuf,
}

impl Drop for RepairedCore {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The launcher's check of `core` before GDB reads it: `Some` when its JIT list would crash
/// or hang GDB, then GDB must be given the returned copy, whose list is cut before the
/// first bad entry. Says what is wrong and what was cut in two lines on stderr; says nothing
/// for a clean core. A core that cannot be checked goes to GDB as it is, with one line
/// saying why it was not checked.
fn check_core(program: &Path, core: &Path) -> Result<Option<RepairedCore>, String> {
    let (damage, segments) = match crate::core_check::check(core, program) {
        Ok(None) => return Ok(None),
        Ok(Some(found)) => found,
        Err(e) => {
            eprintln!(
                "jit-gdb: note: the JIT list in {} was not checked before GDB reads it: {e}",
                core.display()
            );
            return Ok(None);
        }
    };
    eprintln!(
        "jit-gdb: the JIT list in {} would stop GDB: {}",
        core.display(),
        damage.problem
    );
    let dir = fresh_temp_dir("jit-gdb-core")?;
    let copy = match crate::core_check::write_repaired(core, &segments, &damage, &dir) {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "{e}; run with --no-core-check to give GDB the core as it is"
            ));
        }
    };
    eprintln!(
        "jit-gdb: GDB reads a repaired copy, {} (removed when GDB exits; the original is untouched; --no-core-check skips this): {}",
        copy.display(),
        damage.cut_summary()
    );
    Ok(Some(RepairedCore { dir, core: copy }))
}

/// Where GDB's own command line names a program and a core file (`PROGRAM CORE`, `-c CORE`,
/// `--core=CORE`, `-e PROGRAM`, ...): the program, the core, the index of the argument
/// naming the core, and the `--core=` prefix when the core is given in that form. `None`
/// without both, with `--args`, or when the second operand is not an ELF core file (a PID).
fn core_in_gdb_args(args: &[OsString]) -> Option<(PathBuf, PathBuf, usize, Option<String>)> {
    // GDB's options that take a value as the next argument (one or two dashes).
    const WITH_VALUE: [&str; 28] = [
        "c",
        "core",
        "e",
        "exec",
        "p",
        "pid",
        "d",
        "directory",
        "se",
        "s",
        "symbols",
        "x",
        "command",
        "ix",
        "init-command",
        "ex",
        "eval-command",
        "iex",
        "init-eval-command",
        "cd",
        "D",
        "data-directory",
        "b",
        "l",
        "tty",
        "t",
        "interpreter",
        "i",
    ];
    let (mut program, mut core): (Option<PathBuf>, Option<(usize, Option<String>)>) = (None, None);
    let mut operands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_str().unwrap_or("");
        if a == "--" {
            operands.extend(i + 1..args.len());
            break;
        }
        let Some(opt) = a.strip_prefix("--").or_else(|| a.strip_prefix('-')) else {
            operands.push(i);
            i += 1;
            continue;
        };
        if opt == "args" {
            return None;
        }
        let (name, inline) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        // The index of the argument holding the value, and the value.
        let value = match inline {
            Some(v) => Some((i, OsString::from(v))),
            None if WITH_VALUE.contains(&name) => {
                i += 1;
                args.get(i).map(|v| (i, v.clone()))
            }
            None => None,
        };
        match (name, value) {
            ("c" | "core", Some((at, _))) => {
                // `--core=CORE`: the prefix to keep when the path is replaced.
                let prefix = inline.map(|v| a[..a.len() - v.len()].to_string());
                core = Some((at, prefix));
            }
            ("e" | "exec" | "se", Some((_, v))) => program = Some(PathBuf::from(v)),
            _ => {}
        }
        i += 1;
    }
    let mut operands = operands.into_iter();
    if program.is_none() {
        program = operands.next().map(|k| PathBuf::from(&args[k]));
    }
    if core.is_none() {
        core = operands.next().map(|k| (k, None));
    }
    let (program, (at, prefix)) = (program?, core?);
    let raw = args.get(at)?.to_str()?;
    let path = PathBuf::from(match &prefix {
        Some(p) => raw.strip_prefix(p.as_str())?,
        None => raw,
    });
    is_core_file(&path).then_some((program, path, at, prefix))
}

/// Does `p` name an ELF core file (its header says ET_CORE)?
fn is_core_file(p: &Path) -> bool {
    use std::io::Read;
    let mut h = [0u8; 18];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut h))
        .is_ok()
        && h[..4] == *b"\x7fELF"
        && u16::from_le_bytes([h[16], h[17]]) == 4
}

extern "C" fn ignore_signal(_: libc::c_int) {}

/// `jit-gdb [GDB ARGS...]`: replaces this process with GDB, reader and scripts loaded. When
/// the arguments name a program and a core file, the core is checked first (`check`); for a
/// damaged one GDB runs as a child on a repaired copy, removed when it exits.
pub fn exec_gdb(mut user_args: Vec<OsString>, check: bool) -> Result<i32, String> {
    use std::os::unix::process::CommandExt;
    let gdb = find_gdb()?;
    let reader = find_reader()?;
    let scripts = find_scripts()?;
    let mut repaired = None;
    if let Some((program, core, at, prefix)) = check.then(|| core_in_gdb_args(&user_args)).flatten()
    {
        if let Some(r) = check_core(&program, &core)? {
            user_args[at] = cat(prefix.as_deref().unwrap_or(""), r.core.as_os_str());
            repaired = Some(r);
        }
    }
    let mut args = setup_args(Some(&reader), scripts.as_deref());
    args.extend(user_args);
    let Some(repaired) = repaired else {
        let err = Command::new(&gdb).args(&args).exec();
        return Err(format!("cannot run {}: {err}", gdb.display()));
    };
    // GDB is interactive: Ctrl-C is for it, not for this process, which must stay to remove
    // the copy. A handler (not SIG_IGN, which GDB would inherit) lets the signal pass by.
    // SAFETY: the handler does nothing, so it is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
    let status = run_gdb(&gdb, &args);
    drop(repaired);
    status
}

/// `jit-gdb core PROGRAM CORE`: every thread's backtrace from a core file, checked first
/// (`check`) as [`check_core`] says.
pub fn core_report(program: &Path, core: &Path, check: bool) -> Result<i32, String> {
    check_readable("program", program)?;
    check_readable("core file", core)?;
    let gdb = find_gdb()?;
    let reader = find_reader()?;
    let scripts = find_scripts()?;
    let repaired = if check {
        check_core(program, core)?
    } else {
        None
    };
    let core = repaired.as_ref().map_or(core, |r| r.core.as_path());
    let mut args: Vec<OsString> = vec!["-batch".into(), "-nx".into()];
    args.extend(setup_args(Some(&reader), scripts.as_deref()));
    let mut cmds = vec!["info threads", "thread apply all bt"];
    if scripts.is_some() {
        // The registered JIT functions (name, range, file), read from the core's memory.
        cmds.push("jit list");
    }
    args.extend(ex_echoed(&cmds));
    args.push(program.as_os_str().into());
    args.push(core.as_os_str().into());
    run_gdb(&gdb, &args)
}

/// Writes the bundled demo script where GDB can read it (`list`), returns its path.
fn install_demo_script() -> Result<PathBuf, String> {
    let (name, text) = crate::demo::BUNDLED[0];
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        });
    let dir = match base {
        Some(b) => b.join("jit-gdb"),
        None => fresh_temp_dir("jit-gdb-demo")?,
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create {} for the demo script: {e}", dir.display()))?;
    let path = dir.join(name);
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
        // Write aside and rename, so a concurrent demo (or its GDB) never reads half a file.
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("cannot write the demo script {}: {e}", path.display()))?;
    }
    // The script is part of the executable, so no newer than it: GDB warns "Source file is
    // more recent than executable" for functions its reader made (it compares their source
    // files with the program's file), which a script written at the first run always was.
    // Best effort: at worst GDB prints that warning.
    let _ = age_like_executable(&path);
    Ok(path)
}

/// Sets the modification time of `path` to the executable's, if it is later.
fn age_like_executable(path: &Path) -> std::io::Result<()> {
    let exe = std::fs::metadata(std::env::current_exe()?)?.modified()?;
    if std::fs::metadata(path)?.modified()? > exe {
        std::fs::File::options()
            .write(true)
            .open(path)?
            .set_modified(exe)?;
    }
    Ok(())
}

/// Creates a new private directory under the temp dir.
fn fresh_temp_dir(prefix: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::DirBuilderExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    for attempt in 0..100u32 {
        let dir = std::env::temp_dir().join(format!(
            "{prefix}-{}-{nanos:x}-{attempt}",
            std::process::id()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(format!(
                    "cannot create a directory in {}: {e}",
                    std::env::temp_dir().display()
                ))
            }
        }
    }
    Err(format!(
        "cannot create a fresh directory in {}",
        std::env::temp_dir().display()
    ))
}

fn format_arg(format: Format) -> &'static str {
    match format {
        Format::Compact => "compact",
        Format::Elf => "elf",
    }
}

/// `jit-gdb demo`: the demo JIT under GDB, stopped in a native callback called from JIT
/// code; or (`crash`) faulting in JIT code, then the backtrace from its core file.
pub fn demo(format: Format, crash: bool, keep_core: bool) -> Result<i32, String> {
    let gdb = find_gdb()?;
    let reader = match format {
        Format::Compact => Some(find_reader()?),
        Format::Elf => None,
    };
    let scripts = find_scripts()?;
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the jit-gdb executable to run the demo JIT: {e}"))?;
    let script = install_demo_script()?;
    // Compile and register once here, so a problem shows as one clear error instead of
    // inside GDB's transcript.
    crate::demo::check_script(&script, format)?;
    let run_args: Vec<OsString> = vec![
        "run-script".into(),
        script.clone().into(),
        "--format".into(),
        format_arg(format).into(),
    ];
    println!(
        "jit-gdb demo: the demo JIT compiles {} to {} code and registers it as {}.",
        script.display(),
        jit_interface::Arch::HOST.name(),
        format.name()
    );
    let mut args = batch_args();
    args.extend(setup_args(reader.as_deref(), scripts.as_deref()));
    if crash {
        return crash_demo(&gdb, args, &exe, run_args, keep_core);
    }
    println!("Running it under GDB, stopped in the native callback jit_gdb_probe:\n");
    // `bt 12`: the JIT frames and the native code that called the script's `main`, not
    // the whole Rust runtime below it.
    let mut cmds = vec!["break jit_gdb_probe", "run", "bt 12", "frame 1", "list"];
    if format == Format::Elf {
        // Parameters and locals only travel in ELF payloads (GDB's reader API has none).
        cmds.push("info args");
        cmds.push("info locals");
    }
    cmds.extend(["delete", "continue"]);
    args.extend(ex_echoed(&cmds));
    args.push("--args".into());
    args.push(exe.into());
    args.extend(run_args);
    run_gdb(&gdb, &args)
}

/// Where the C library and dynamic loader of aarch64 programs are for qemu-user and GDB:
/// `QEMU_LD_PREFIX` (qemu's own variable), else Debian's cross sysroot.
fn aarch64_sysroot() -> Result<PathBuf, String> {
    let dir = std::env::var_os("QEMU_LD_PREFIX")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/usr/aarch64-linux-gnu"), PathBuf::from);
    if dir.join("lib/ld-linux-aarch64.so.1").exists() {
        return Ok(dir);
    }
    Err(format!(
        "no aarch64 C library in {} (lib/ld-linux-aarch64.so.1): install it (Debian: \
         `apt-get install libc6-arm64-cross`, or scripts/install-tools.sh aarch64) or set \
         QEMU_LD_PREFIX to an aarch64 sysroot",
        dir.display()
    ))
}

/// The aarch64 build of jit-gdb: `JIT_GDB_AARCH64_BIN`, else where `cargo build --target
/// aarch64-unknown-linux-gnu` puts it in the target directory this executable was built in
/// (`TARGET/PROFILE/jit-gdb` -> `TARGET/aarch64-unknown-linux-gnu/PROFILE/jit-gdb`).
pub fn find_aarch64_jit_gdb() -> Result<PathBuf, String> {
    const TRIPLE: &str = "aarch64-unknown-linux-gnu";
    // The command that builds it, and where the tools for that come from.
    let build = format!(
        "`CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
         CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc cargo build --target {TRIPLE} \
         --bin jit-gdb` (the tools: `scripts/install-tools.sh aarch64`)"
    );
    let (path, from_env) = match std::env::var_os("JIT_GDB_AARCH64_BIN") {
        Some(p) => (PathBuf::from(p), true),
        None => {
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot find the jit-gdb executable: {e}"))?;
            let (profile, target) = exe
                .parent()
                .and_then(|d| Some((d.file_name()?, d.parent()?)))
                .ok_or_else(|| format!("{} is not in a cargo target directory: set JIT_GDB_AARCH64_BIN to the aarch64 build of jit-gdb, built with {build}", exe.display()))?;
            (target.join(TRIPLE).join(profile).join("jit-gdb"), false)
        }
    };
    let mut header = [0u8; 20];
    let read = std::fs::File::open(&path).and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut header)
    });
    if let Err(e) = read {
        return Err(if from_env {
            format!(
                "JIT_GDB_AARCH64_BIN is set to {}, which cannot be read ({e}): point it at the aarch64 build of jit-gdb, built with {build}, or unset it",
                path.display()
            )
        } else {
            format!(
                "the aarch64 build of jit-gdb was not found at {} ({e}): build it with {build}, or set JIT_GDB_AARCH64_BIN=/path/to/aarch64/jit-gdb",
                path.display()
            )
        });
    }
    // e_machine 183: EM_AARCH64.
    if header[..4] != *b"\x7fELF" || u16::from_le_bytes([header[18], header[19]]) != 183 {
        return Err(format!(
            "{} is not an aarch64 ELF executable: the aarch64 demo needs jit-gdb built with {build}",
            path.display()
        ));
    }
    // qemu runs it from a directory of its own.
    absolute(&path)
}

/// A program from PATH that the aarch64 demo needs, or an error saying how to install it.
fn require_program(name: &str, package: &str) -> Result<PathBuf, String> {
    find_in_path(OsStr::new(name)).ok_or_else(|| {
        format!(
            "{name} not found in PATH: the aarch64 demo needs it (Debian: `apt-get install {package}`, or scripts/install-tools.sh aarch64)"
        )
    })
}

/// Kills and reaps the qemu-user process on drop (whatever GDB did), then removes its
/// directory.
struct QemuGuest {
    child: std::process::Child,
    dir: PathBuf,
}

impl Drop for QemuGuest {
    fn drop(&mut self) {
        // After GDB's `continue` to the end or `kill`, qemu exits by itself; give it a moment.
        for _ in 0..40 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `jit-gdb demo --arch aarch64` on x86-64: the aarch64 build of jit-gdb runs the demo under
/// `qemu-aarch64 -g SOCKET`; gdb-multiarch, with our reader and scripts, connects to qemu's
/// gdbstub and shows what `demo` shows natively. With `crash`, GDB stops live at the fault in
/// the JIT code (qemu's cores lack what GDB needs to place a PIE program by itself).
pub fn demo_under_qemu(
    arch: jit_interface::Arch,
    format: Format,
    crash: bool,
) -> Result<i32, String> {
    if (arch, jit_interface::Arch::HOST)
        != (jit_interface::Arch::Aarch64, jit_interface::Arch::X86_64)
    {
        return Err(format!(
            "`demo --arch {}` is not available on {}: only the aarch64 demo runs on an x86-64 machine, under qemu-user",
            arch.name(),
            jit_interface::Arch::HOST.name()
        ));
    }
    let bin = find_aarch64_jit_gdb()?;
    let qemu = require_program("qemu-aarch64", "qemu-user")?;
    let gdb = require_program("gdb-multiarch", "gdb-multiarch")?;
    let sysroot = aarch64_sysroot()?;
    let reader = match format {
        Format::Compact => Some(find_reader()?),
        Format::Elf => None,
    };
    let scripts = find_scripts()?;
    let script = install_demo_script()?;
    // The script and the payload encoder, checked here (natively) for one clear error.
    crate::demo::check_script(&script, format)?;
    println!(
        "jit-gdb demo: the aarch64 build of jit-gdb ({}) runs under qemu-aarch64; its demo JIT compiles {} to aarch64 code and registers it as {}. gdb-multiarch debugs it over qemu's gdbstub.",
        bin.display(),
        script.display(),
        format.name()
    );
    let dir = fresh_temp_dir("jit-gdb-qemu")?;
    let socket = dir.join("gdbstub.sock");
    let mut run = Command::new(&qemu);
    run.arg("-L")
        .arg(&sysroot)
        .arg("-g")
        .arg(&socket)
        .arg(&bin)
        .arg("run-script")
        .arg(&script)
        .args(["--format", format_arg(format)]);
    if crash {
        run.arg("--crash");
    }
    // Its core files (qemu_*.core) would land in the working directory: keep them out of the
    // user's.
    let child = run
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", qemu.display()))?;
    let mut guest = QemuGuest { child, dir };
    // qemu makes the socket, then waits for the debugger.
    for _ in 0..400 {
        if socket.exists() {
            break;
        }
        if let Ok(Some(status)) = guest.child.try_wait() {
            return Err(format!(
                "qemu-aarch64 ended ({status}) before GDB could connect to it; try `qemu-aarch64 -L {} {} --version` to see whether the aarch64 jit-gdb runs",
                sysroot.display(),
                bin.display()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    if !socket.exists() {
        return Err(format!(
            "qemu-aarch64 made no gdbstub socket at {} within 10 s",
            socket.display()
        ));
    }
    let mut args = batch_args();
    args.extend(
        [
            format!("set sysroot {}", sysroot.display()),
            // The host's libthread_db cannot read an aarch64 guest.
            "set libthread-db-search-path /nonexistent".into(),
        ]
        .into_iter()
        .flat_map(|c| ["-iex".into(), OsString::from(c)]),
    );
    args.extend(setup_args(reader.as_deref(), scripts.as_deref()));
    args.push("-ex".into());
    args.push(cat("file ", bin.as_os_str()));
    args.push("-ex".into());
    args.push(cat("target remote ", socket.as_os_str()));
    let mut cmds = if crash {
        println!("It faults in JIT code (a null pointer from probe); GDB stops there:\n");
        vec![
            "continue",
            "bt 12",
            "x/i $pc",
            "info registers x0",
            "frame 1",
            "list",
        ]
    } else {
        println!("Running it under GDB, stopped in the native callback jit_gdb_probe:\n");
        vec![
            "break jit_gdb_probe",
            "continue",
            "bt 12",
            "frame 1",
            "list",
        ]
    };
    if format == Format::Elf {
        // Parameters and locals only travel in ELF payloads (GDB's reader API has none).
        cmds.extend(["info args", "info locals"]);
    }
    cmds.extend(if crash {
        ["kill"].as_slice()
    } else {
        ["delete", "continue"].as_slice()
    });
    args.extend(ex_echoed(&cmds));
    let status = run_gdb(&gdb, &args);
    drop(guest);
    status
}

fn crash_demo(
    gdb: &Path,
    mut gdb_args: Vec<OsString>,
    exe: &Path,
    mut run_args: Vec<OsString>,
    keep_core: bool,
) -> Result<i32, String> {
    run_args.push("--crash".into());
    let dir = fresh_temp_dir("jit-gdb-crash")?;
    let core = match kernel_core(exe, &run_args, &dir)? {
        Some(core) => core,
        None => {
            // The kernel's core went elsewhere (core_pattern pipes to a handler, or core
            // dumps are disabled): let GDB write one at the fault instead.
            println!(
                "The kernel wrote no core file in {}; letting GDB write one at the fault.",
                dir.display()
            );
            let core = dir.join("core");
            let mut args = batch_args();
            args.extend(ex(&["run"]));
            args.push("-ex".into());
            args.push(cat("generate-core-file ", core.as_os_str()));
            args.extend(ex(&["kill"]));
            args.push("--args".into());
            args.push(exe.into());
            args.extend(run_args);
            run_gdb(gdb, &args)?;
            if !core.is_file() {
                return Err(format!(
                    "GDB did not write the core file {}",
                    core.display()
                ));
            }
            core
        }
    };
    println!("\nPost-mortem: gdb {} {}\n", exe.display(), core.display());
    gdb_args.extend(ex_echoed(&[
        "bt 12",
        "x/i $pc",
        "info registers rax",
        "frame 1",
        "list",
    ]));
    gdb_args.push(exe.into());
    gdb_args.push(core.clone().into());
    let status = run_gdb(gdb, &gdb_args);
    if keep_core {
        println!("\nThe core file is kept: {}", core.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    status
}

/// Runs the crashing demo with core dumps enabled, in `dir`; returns the core file the
/// kernel wrote there, if any.
fn kernel_core(exe: &Path, run_args: &[OsString], dir: &Path) -> Result<Option<PathBuf>, String> {
    use std::os::unix::process::ExitStatusExt;
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    if pattern.starts_with('|') || pattern.trim().is_empty() {
        return Ok(None);
    }
    raise_core_limit();
    println!(
        "Running it with core dumps enabled; it faults in JIT code (a null pointer from probe):\n"
    );
    let status = Command::new(exe)
        .args(run_args)
        .current_dir(dir)
        .status()
        .map_err(|e| format!("cannot run the demo JIT {}: {e}", exe.display()))?;
    println!("demo JIT: {status}");
    if status.signal().is_none() {
        return Err(format!(
            "the demo JIT was expected to fault but ended with {status}"
        ));
    }
    let found = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("core"))
        });
    Ok(found)
}

/// Raises the soft core-size limit to the hard limit (children inherit it).
fn raise_core_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read/write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CORE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_CORE, &lim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `jit-gdb [GDB ARGS]` finds the program and the core where GDB would.
    #[test]
    fn core_is_found_in_gdb_arguments() {
        let dir = std::env::temp_dir().join(format!("jit-gdb-core-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // An ELF header of type ET_CORE is all the lookup reads.
        let core = dir.join("core.1");
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[16] = 4;
        std::fs::write(&core, &h).unwrap();
        let c = core.to_str().unwrap();
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let found = |v: &[&str]| {
            core_in_gdb_args(&args(v))
                .map(|(p, c, at, prefix)| (p.to_str().unwrap().to_string(), c, at, prefix))
        };
        assert_eq!(
            found(&["-q", "-ex", "bt", "prog", c]),
            Some(("prog".into(), core.clone(), 4, None))
        );
        assert_eq!(
            found(&["-c", c, "-batch", "prog"]),
            Some(("prog".into(), core.clone(), 1, None))
        );
        let eq = format!("--core={c}");
        assert_eq!(
            found(&[&eq, "--exec=prog"]),
            Some(("prog".into(), core.clone(), 0, Some("--core=".into())))
        );
        // A PID, not a core; --args: the rest is the program's command line; no program.
        assert_eq!(found(&["prog", "1234"]), None);
        assert_eq!(found(&["--args", "prog", c]), None);
        assert_eq!(found(&["-ex", c, "prog"]), None);
        // A file that is not a core (the program itself as second operand).
        let not_core = dir.join("prog");
        std::fs::write(&not_core, b"\x7fELF\x02\x01\x01").unwrap();
        assert_eq!(found(&["prog", not_core.to_str().unwrap()]), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
