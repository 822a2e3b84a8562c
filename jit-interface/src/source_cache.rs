//! A per-user cache of source files for GDB: the text a runtime registered with its code
//! ([`crate::JitObject::set_source`]), or a placeholder that says the text is not available,
//! written where GDB can open it.
//!
//! Why: GDB 10–14 crash (a null BFD dereferenced in `open_source_file`) whenever they
//! cannot open the source file of a symtab made by a JIT reader, and runtimes that compile
//! from strings (eval, a REPL, scripts fetched over a network) or a core opened on another
//! machine have no such file. A file GDB can open for every symtab avoids the crash; when
//! the runtime gave the text, `list` also shows the real source.
//!
//! Layout under the cache root (mode 0700, owned by the user; see [`SourceCache::open`]):
//! - `sources/HASH/NAME`: content-addressed files (HASH: 128-bit FNV-1a of the bytes, 32
//!   hex digits; NAME: the base name the runtime gave, so GDB and editors show it). Written
//!   once, never overwritten; an existing file with other bytes is refused, not replaced.
//! - `sessions/TAG/PATH`: per-GDB-session views: hard links to stored files under the
//!   relative path a symtab is named by, so that a session directory on GDB's source path
//!   (`set directories $cdir:$cwd:DIR`) makes GDB open `fib.js` as the runtime named it,
//!   with real files in the current directory still found first. Sessions of processes
//!   that are gone are removed when a new one starts.
//!
//! Nothing here follows a symbolic link it did not expect: every directory it creates or
//! enters is checked (`lstat`) to be a real directory owned by the user, files are created
//! with `O_EXCL | O_NOFOLLOW`, and nothing is written outside the root.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Longest base name kept for a stored file (longer ones are shortened, keeping the end:
/// the extension).
const MAX_BASENAME: usize = 128;

/// Most lines a placeholder has: a line number beyond it is out of range in GDB's `list`.
pub const MAX_PLACEHOLDER_LINES: u32 = 100_000;

/// The name GDB is given for the symtab of functions registered without source lines (GDB
/// 13 crashes in `info sources` on a symtab with an empty name, and on one whose file it
/// cannot open).
pub const NO_LINES_NAME: &str = "<jit code without source lines>";

/// The text of [`NO_LINES_NAME`].
pub const NO_LINES_TEXT: &str = "(jit-gdb) These JIT functions were registered without source \
    lines: there is no source to show for them.\n";

/// 128-bit FNV-1a of `bytes`, as 32 hex digits.
pub fn content_hash(bytes: &[u8]) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;
    let mut h = OFFSET;
    for &b in bytes {
        h ^= u128::from(b);
        h = h.wrapping_mul(PRIME);
    }
    format!("{h:032x}")
}

/// The placeholder for `name`: one line per line number from 1 to `lines` (at least 1, at
/// most [`MAX_PLACEHOLDER_LINES`]), each saying that the text is not available, so that
/// `list` prints something true wherever it is asked to.
pub fn placeholder(name: &str, lines: u32) -> String {
    // Short whatever the name (a core may hold a megabyte-long one): the lines stay small.
    let base = stored_basename(name);
    let n = lines.clamp(1, MAX_PLACEHOLDER_LINES);
    let mut s = String::with_capacity(n as usize * (base.len() + 64));
    for i in 1..=n {
        use std::fmt::Write as _;
        let _ = writeln!(
            s,
            "{base}:{i}: source not available (no such file here, and the JIT registered no text)"
        );
    }
    s
}

/// How many lines a placeholder for rows up to line `max_line` gets: a power of two of at
/// least 64, so that a file whose functions keep coming is rewritten a few times only.
pub fn placeholder_lines(max_line: u32) -> u32 {
    max_line
        .max(64)
        .checked_next_power_of_two()
        .unwrap_or(MAX_PLACEHOLDER_LINES)
        .min(MAX_PLACEHOLDER_LINES)
}

/// Where `name` goes inside a session directory: the path GDB searches its source path
/// for. A relative name keeps its components (`./` dropped); an absolute one is searched
/// without its leading `/` (GDB strips it before trying each directory). `None` for a name
/// that would leave the directory (`..`), names a directory (`x/`, `x/.`: GDB opens only
/// regular files), is empty, or holds a NUL.
pub fn session_path(name: &str) -> Option<PathBuf> {
    if name.is_empty() || name.contains('\0') || name.ends_with('/') || name.ends_with("/.") {
        return None;
    }
    let mut out = PathBuf::new();
    for c in Path::new(name).components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    (out.components().next().is_some()).then_some(out)
}

/// A stored file's base name: the runtime's, made safe and short (at most
/// [`MAX_BASENAME`] bytes, keeping the end: the extension).
pub fn stored_basename(name: &str) -> String {
    let base = Path::new(name)
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base: String = base
        .chars()
        .map(|c| if c == '\0' || c == '/' { '_' } else { c })
        .collect();
    if base.is_empty() || base == "." || base == ".." {
        return "source".into();
    }
    if base.len() <= MAX_BASENAME {
        return base;
    }
    let mut cut = base.len() - MAX_BASENAME;
    while !base.is_char_boundary(cut) {
        cut += 1;
    }
    base[cut..].to_string()
}

/// The cache root: where it is and that it is ours.
#[derive(Debug, Clone)]
pub struct SourceCache {
    root: PathBuf,
}

/// The user this process runs as.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Makes `dir` (mode 0700) unless it exists, then checks that it is a directory (not a
/// symbolic link) owned by the user; a directory of ours with wider permissions is
/// narrowed.
fn private_dir(dir: &Path) -> Result<(), String> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let m = fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !m.file_type().is_dir() {
        return Err(format!(
            "{} is not a directory (a symbolic link or a file): not used",
            dir.display()
        ));
    }
    if m.uid() != euid() {
        return Err(format!(
            "{} belongs to user {}, not to this user ({}): not used",
            dir.display(),
            m.uid(),
            euid()
        ));
    }
    if m.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
    }
    Ok(())
}

/// Reads a regular file without following a symbolic link at its place.
fn read_nofollow(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut v = Vec::new();
    f.read_to_end(&mut v)?;
    Ok(v)
}

/// Unique names for files being written.
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl SourceCache {
    /// The user's cache: `$JIT_GDB_CACHE_DIR`, else `$XDG_CACHE_HOME/jit-gdb`, else
    /// `$HOME/.cache/jit-gdb`, else `/tmp/jit-gdb-UID`; the first that can be made private
    /// (created with mode 0700, or an existing directory of this user's that is not a
    /// symbolic link). The error names every place tried and why it was refused.
    pub fn open() -> Result<SourceCache, String> {
        let mut tried = Vec::new();
        for root in Self::candidates() {
            match Self::at(&root) {
                Ok(c) => return Ok(c),
                Err(e) => tried.push(e),
            }
        }
        Err(format!("no usable source cache: {}", tried.join("; ")))
    }

    fn candidates() -> Vec<PathBuf> {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        if let Some(p) = env("JIT_GDB_CACHE_DIR") {
            // An explicit choice: nothing else is tried.
            return vec![p];
        }
        let mut v = Vec::new();
        if let Some(x) = env("XDG_CACHE_HOME") {
            v.push(x.join("jit-gdb"));
        } else if let Some(h) = env("HOME") {
            v.push(h.join(".cache").join("jit-gdb"));
        }
        v.push(std::env::temp_dir().join(format!("jit-gdb-{}", euid())));
        v
    }

    /// The cache rooted at `root` (its parent must exist or be creatable).
    pub fn at(root: &Path) -> Result<SourceCache, String> {
        if let Some(parent) = root.parent() {
            // The parent (e.g. ~/.cache) is the user's to own, with the user's umask.
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        private_dir(root)?;
        for sub in ["sources", "sessions"] {
            private_dir(&root.join(sub))?;
        }
        Ok(SourceCache {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stores `text` as the file of `name` and returns its path
    /// (`ROOT/sources/HASH/BASENAME`). The file is written once (mode 0400, modification
    /// time 1970, so that GDB never calls it "more recent than executable"); an existing
    /// one is used if it holds the same bytes and refused otherwise.
    pub fn store(&self, name: &str, text: &[u8]) -> Result<PathBuf, String> {
        let dir = self.root.join("sources").join(content_hash(text));
        private_dir(&dir)?;
        let path = dir.join(stored_basename(name));
        match read_nofollow(&path) {
            Ok(old) if old == text => return Ok(path),
            Ok(_) => {
                return Err(format!(
                    "{} exists with other content: not overwritten",
                    path.display()
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
        let tmp = dir.join(format!(
            ".tmp.{}.{}",
            std::process::id(),
            TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| -> std::io::Result<()> {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o400)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(text)?;
            f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1))?;
            // A hard link never replaces an existing file (unlike rename).
            fs::hard_link(&tmp, &path)
        })();
        let _ = fs::remove_file(&tmp);
        match written {
            Ok(()) => Ok(path),
            // Another GDB stored it meanwhile: the same bytes are fine.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match read_nofollow(&path) {
                Ok(old) if old == text => Ok(path),
                _ => Err(format!(
                    "{} exists with other content: not overwritten",
                    path.display()
                )),
            },
            Err(e) => Err(format!("cannot write {}: {e}", path.display())),
        }
    }

    /// A new session directory (`ROOT/sessions/PID-NANOS`) for this process. Sessions of
    /// processes that no longer run are removed first.
    pub fn new_session(&self) -> Result<PathBuf, String> {
        self.prune_sessions();
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = self
            .root
            .join("sessions")
            .join(format!("{}-{nanos}", std::process::id()));
        private_dir(&dir)?;
        Ok(dir)
    }

    /// Removes session directories whose process is gone (Linux: no `/proc/PID`).
    fn prune_sessions(&self) {
        let Ok(entries) = fs::read_dir(self.root.join("sessions")) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                // remove_dir_all does not follow symbolic links inside.
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }

    /// Checks that `session` is a directory of this cache's sessions.
    pub fn is_session(&self, session: &Path) -> bool {
        session.parent() == Some(&self.root.join("sessions"))
            && fs::symlink_metadata(session)
                .is_ok_and(|m| m.file_type().is_dir() && m.uid() == euid())
    }
}

/// What [`link_in_session`] found at the place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linked {
    /// The place now holds the stored file.
    Done,
    /// The place holds another file, left alone.
    Taken,
}

/// Makes `session/rel` the stored file `stored` (a hard link; a copy where hard links
/// fail), creating the directories on the way (mode 0700, never through a symbolic link).
/// A place that already holds another file is replaced only if `replace` says so (the
/// caller knows what it put there); otherwise [`Linked::Taken`].
pub fn link_in_session(
    session: &Path,
    rel: &Path,
    stored: &Path,
    replace: bool,
) -> Result<Linked, String> {
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(format!("{} is not a plain relative path", rel.display()));
    }
    let dest = session.join(rel);
    let mut dir = session.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for c in &parts[..parts.len().saturating_sub(1)] {
        dir.push(c);
        private_dir(&dir)?;
    }
    let stored_meta = fs::metadata(stored).map_err(|e| format!("{}: {e}", stored.display()))?;
    match fs::symlink_metadata(&dest) {
        Ok(m) if m.ino() == stored_meta.ino() && m.dev() == stored_meta.dev() => {
            return Ok(Linked::Done)
        }
        Ok(m) if replace && m.file_type().is_file() => {
            fs::remove_file(&dest).map_err(|e| format!("{}: {e}", dest.display()))?;
        }
        Ok(_) => return Ok(Linked::Taken),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", dest.display())),
    }
    match fs::hard_link(stored, &dest) {
        Ok(()) => Ok(Linked::Done),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Linked::Taken),
        Err(_) => {
            // A file system without hard links: a private copy.
            let bytes = read_nofollow(stored).map_err(|e| format!("{}: {e}", stored.display()))?;
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o400)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&dest)
                .map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
            f.write_all(&bytes)
                .and_then(|()| f.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1)))
                .map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
            Ok(Linked::Done)
        }
    }
}

/// A file that lives in this process's memory only (`memfd_create`), holding `bytes`, for
/// when no directory can be written: its name, `/proc/self/fd/N`, is a regular file GDB
/// opens (GDB skips files that are not regular, such as `/dev/null`). The descriptor stays
/// open for the life of the process (callers bound how many they make). `label` (a hash
/// and a base name) names it in `/proc/self/fd`, so that two such files never look alike
/// to GDB's source cache.
#[cfg(target_os = "linux")]
pub fn memory_file(label: &str, bytes: &[u8]) -> Result<String, String> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let name = std::ffi::CString::new(format!("jit-gdb:{label}").replace('\0', "_"))
        .map_err(|e| e.to_string())?;
    // SAFETY: `name` is a valid NUL-terminated string; the call creates a new descriptor
    // or fails, touching no memory of ours.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let mut f = unsafe { File::from_raw_fd(fd) };
    f.write_all(bytes)
        .map_err(|e| format!("writing a memory file: {e}"))?;
    let fd = f.into_raw_fd();
    Ok(format!("/proc/self/fd/{fd}"))
}

/// Can GDB open `name` as it stands (an absolute path, or a path relative to the current
/// directory, GDB's `$cwd`)? A real file always wins over cached text.
pub fn openable(name: &str) -> bool {
    !name.is_empty() && File::open(name).is_ok_and(|f| f.metadata().is_ok_and(|m| m.is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "jit-gdb-cache-test-{tag}-{}-{}",
            std::process::id(),
            TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn stored_files_are_content_addressed_private_and_never_overwritten() {
        let root = scratch("store");
        let c = SourceCache::at(&root).unwrap();
        let a = c.store("dir/fib.js", b"let x = 1;\n").unwrap();
        assert_eq!(a.file_name().unwrap(), "fib.js");
        assert_eq!(fs::read(&a).unwrap(), b"let x = 1;\n");
        // The same bytes again: the same file.
        assert_eq!(c.store("fib.js", b"let x = 1;\n").unwrap(), a);
        // Other bytes: another directory.
        let b = c.store("fib.js", b"let x = 2;\n").unwrap();
        assert_ne!(a, b);
        for d in [&root, &root.join("sources"), &root.join("sessions")] {
            let m = fs::symlink_metadata(d).unwrap();
            assert_eq!(m.mode() & 0o777, 0o700, "{}", d.display());
        }
        assert_eq!(fs::metadata(&a).unwrap().mode() & 0o777, 0o400);
        assert!(fs::metadata(&a).unwrap().modified().unwrap() < SystemTime::now());
        // A file planted at the place with other bytes is refused, not replaced.
        let planted_dir = root.join("sources").join(content_hash(b"evil"));
        fs::create_dir(&planted_dir).unwrap();
        fs::write(planted_dir.join("x.js"), b"not evil").unwrap();
        let e = c.store("x.js", b"evil").unwrap_err();
        assert!(e.contains("other content"), "{e}");
        assert_eq!(fs::read(planted_dir.join("x.js")).unwrap(), b"not evil");
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn symbolic_links_are_not_followed() {
        let root = scratch("links");
        let c = SourceCache::at(&root).unwrap();
        let outside = scratch("outside");
        fs::create_dir_all(&outside).unwrap();
        // The content directory is a link to elsewhere: refused, nothing written there.
        let hash_dir = root.join("sources").join(content_hash(b"abc"));
        std::os::unix::fs::symlink(&outside, &hash_dir).unwrap();
        assert!(c.store("a.js", b"abc").is_err());
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
        // The file's place is a link to a file outside: read as not found? No: refused.
        let hash_dir = root.join("sources").join(content_hash(b"def"));
        fs::create_dir(&hash_dir).unwrap();
        let target = outside.join("victim");
        fs::write(&target, b"victim").unwrap();
        std::os::unix::fs::symlink(&target, hash_dir.join("b.js")).unwrap();
        assert!(c.store("b.js", b"def").is_err());
        assert_eq!(fs::read(&target).unwrap(), b"victim");
        // A root that is a link is refused.
        let link_root = scratch("linkroot");
        std::os::unix::fs::symlink(&outside, &link_root).unwrap();
        assert!(SourceCache::at(&link_root).is_err());
        let _ = fs::remove_dir_all(&root);
        let _ = fs::remove_dir_all(&outside);
        let _ = fs::remove_file(&link_root);
    }

    #[test]
    fn session_paths_stay_inside_the_session() {
        let p = |s: &str| session_path(s).map(|p| p.display().to_string());
        assert_eq!(p("fib.js").as_deref(), Some("fib.js"));
        assert_eq!(p("./lib/fib.js").as_deref(), Some("lib/fib.js"));
        assert_eq!(
            p("/home/u/app/fib.js").as_deref(),
            Some("home/u/app/fib.js")
        );
        assert_eq!(p("a//b").as_deref(), Some("a/b"));
        for bad in [
            "",
            "../x.js",
            "a/../../x",
            "/",
            ".",
            "a\0b",
            "x/",
            "x/.",
            "a/b//",
        ] {
            assert_eq!(p(bad), None, "{bad:?}");
        }
        assert_eq!(stored_basename("/"), "source");
        assert_eq!(stored_basename(".."), "source");
        assert_eq!(stored_basename(&"x".repeat(300)).len(), MAX_BASENAME);
    }

    #[test]
    fn sessions_link_stored_files_under_their_names() {
        let root = scratch("session");
        let c = SourceCache::at(&root).unwrap();
        let s = c.new_session().unwrap();
        assert!(c.is_session(&s));
        let a = c.store("fib.js", b"one\n").unwrap();
        let b = c.store("fib.js", b"two\n").unwrap();
        let rel = session_path("/srv/app/fib.js").unwrap();
        assert_eq!(link_in_session(&s, &rel, &a, false), Ok(Linked::Done));
        assert_eq!(fs::read(s.join(&rel)).unwrap(), b"one\n");
        assert_eq!(link_in_session(&s, &rel, &a, false), Ok(Linked::Done));
        assert_eq!(link_in_session(&s, &rel, &b, false), Ok(Linked::Taken));
        assert_eq!(link_in_session(&s, &rel, &b, true), Ok(Linked::Done));
        assert_eq!(fs::read(s.join(&rel)).unwrap(), b"two\n");
        // The stored file itself is untouched by the replacement.
        assert_eq!(fs::read(&a).unwrap(), b"one\n");
        assert!(link_in_session(&s, Path::new("../x"), &a, true).is_err());
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn memory_files_are_regular_files_with_their_bytes() {
        let name = memory_file("abc/x.js", b"hello\n").unwrap();
        assert!(fs::metadata(&name).unwrap().is_file());
        assert_eq!(fs::read(&name).unwrap(), b"hello\n");
        let target = fs::read_link(&name).unwrap();
        assert!(
            target.to_string_lossy().contains("jit-gdb:abc/x.js"),
            "{target:?}"
        );
    }

    #[test]
    fn placeholders_say_the_source_is_missing_on_every_line() {
        let p = placeholder("/srv/app/fib.js", 3);
        let lines: Vec<&str> = p.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[2].starts_with("fib.js:3: source not available"));
        assert_eq!(placeholder_lines(1), 64);
        assert_eq!(placeholder_lines(65), 128);
        assert_eq!(placeholder_lines(u32::MAX), MAX_PLACEHOLDER_LINES);
        // A huge name cannot make a huge placeholder.
        let huge = placeholder(&"x".repeat(1 << 20), MAX_PLACEHOLDER_LINES);
        assert!(huge.len() < 25 << 20, "{}", huge.len());
    }
}
