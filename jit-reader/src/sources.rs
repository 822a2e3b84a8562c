//! Names the reader gives GDB's symtabs, so that GDB can open a file for every one of them.
//!
//! GDB 10–14 dereference a null BFD when they cannot open the source file of a symtab made
//! by a JIT reader (`open_source_file` asks for the objfile's build-id first): `frame 1`,
//! any stop in JIT code, `list`, `info sources`, MI's `fullname` all crash GDB. So every
//! symtab is named by a file GDB opens (see `jit_interface::source_cache`):
//!
//! - the runtime's own name, when GDB can open it as it is (a real file wins over text);
//! - else a file in the cache holding the text the runtime registered with the code, or a
//!   placeholder that says the text is not available (one line per line number):
//!   - *session mode* (the launcher or the GDB scripts put a session directory on GDB's
//!     source path and told the reader): the runtime's name is kept, and the file is linked
//!     under that name in the session directory, where GDB's source path search finds it;
//!   - otherwise (a bare `jit-reader-load`), or when the name cannot live in the session
//!     directory (`..`, or another text already holds that name): the cached file's
//!     absolute path, the last resort (backtraces then show cache paths);
//! - and when no cache directory can be written at all (one warning says so): a file in
//!   GDB's memory (`/proc/self/fd/N`, see `source_cache::memory_file`) with the same text.
//!   (Not `/dev/null`: GDB only opens regular files, and crashes on it as on a missing one.)
//!
//! Functions without line rows get a symtab named [`NO_LINES_NAME`] (GDB 13 crashes in
//! `info sources` on an empty symtab name), with a file that says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use jit_interface::source_cache::{
    content_hash, link_in_session, memory_file, openable, placeholder, placeholder_lines,
    session_path, stored_basename, Linked, SourceCache, NO_LINES_NAME, NO_LINES_TEXT,
};

use crate::report::{self, debug};

/// The environment variable the launcher sets for GDB: a session directory it put on GDB's
/// source path.
pub const SESSION_ENV: &str = "JIT_READER_SOURCE_DIR";

/// What the reader last put at a name in the session directory.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    /// The registered text with this hash.
    Text(String),
    /// A placeholder with this many lines.
    Placeholder(u32),
}

/// The naming state of one reader load.
#[derive(Debug, Default)]
pub struct Namer {
    /// `None`: not tried yet; `Some(Err)`: unusable (said once).
    cache: Option<Result<SourceCache, String>>,
    /// The session directory on GDB's source path, if any.
    session: Option<PathBuf>,
    /// Names in the session directory and what they hold.
    held: BTreeMap<String, Held>,
    /// Names given for placeholders already made: (name, lines) -> the name GDB gets.
    placeholders: BTreeMap<String, (u32, String)>,
    /// Files in GDB's memory made so far, by content hash (no cache directory).
    in_memory: BTreeMap<String, String>,
    /// Names given for registered texts: (name, content hash) -> the name GDB gets. A
    /// batch entry holding a text is read again whenever it is rewritten.
    texts: BTreeMap<(String, String), String>,
    /// Bytes given to the cache (or memory) since the reader was loaded.
    written: u64,
}

/// Most files kept in GDB's memory when no cache directory can be written (each holds a
/// descriptor); beyond, they share one that says the source is not available.
const MAX_IN_MEMORY: usize = 256;

/// Most bytes of texts and placeholders one reader load writes (to the cache or GDB's
/// memory): a damaged or hostile core must not fill the disk. Beyond, files share one
/// small file that says why their text is not shown.
const MAX_WRITTEN: u64 = 256 << 20;

/// The file of every source once [`MAX_WRITTEN`] is spent.
const OVER_BUDGET_NAME: &str = "<jit source not written>";
const OVER_BUDGET_TEXT: &str = "(jit-gdb) This source was not written: the reader already \
    wrote its limit of source text for this session (256 MiB).\n";

/// The file of one symtab, as the plan has it.
pub struct FileRequest<'a> {
    /// The runtime's name; `None`: functions without line rows.
    pub name: Option<&'a str>,
    /// The text registered for it, if any.
    pub text: Option<&'a str>,
    /// The highest line of its rows.
    pub max_line: u32,
}

impl Namer {
    pub const fn new() -> Namer {
        Namer {
            cache: None,
            session: None,
            held: BTreeMap::new(),
            placeholders: BTreeMap::new(),
            in_memory: BTreeMap::new(),
            texts: BTreeMap::new(),
            written: 0,
        }
    }

    /// At reader load: takes the session directory the launcher named in [`SESSION_ENV`],
    /// if it is one of the user's cache and no session was chosen yet (the GDB scripts may
    /// have asked for one before the reader was loaded: the library is the same).
    pub fn on_load(&mut self) {
        if self.session.is_some() {
            return;
        }
        let Some(dir) = std::env::var_os(SESSION_ENV).filter(|v| !v.is_empty()) else {
            return;
        };
        let dir = PathBuf::from(dir);
        match self.cache() {
            Some(c) if c.is_session(&dir) => {
                debug!(
                    "source session directory {} (from {SESSION_ENV})",
                    dir.display()
                );
                self.session = Some(dir);
                self.placeholders.clear();
                self.texts.clear();
            }
            Some(c) => report::line(format_args!(
                "{SESSION_ENV}={} is not a session directory of the source cache {}: \
                 ignored (JIT source files get absolute cache names)",
                dir.display(),
                c.root().display()
            )),
            None => {}
        }
    }

    /// The session directory, made on first use (the GDB scripts ask for it and put it on
    /// GDB's source path). From then on, names are kept as the runtime gave them.
    pub fn session_dir(&mut self) -> Result<PathBuf, String> {
        if let Some(s) = &self.session {
            return Ok(s.clone());
        }
        let cache = self.cache().ok_or("no usable source cache")?;
        let s = cache.new_session()?;
        debug!("source session directory {}", s.display());
        self.session = Some(s.clone());
        // Files named by absolute paths before now stay as they are; new ones may now keep
        // their names.
        self.placeholders.clear();
        self.texts.clear();
        Ok(s)
    }

    fn cache(&mut self) -> Option<&SourceCache> {
        if self.cache.is_none() {
            let c = SourceCache::open();
            if let Err(e) = &c {
                report::line(format_args!(
                    "{e}; JIT source files GDB cannot open are kept in GDB's memory \
                     instead (/proc/self/fd/N) (GDB 10-14 crash on a missing one)"
                ));
            }
            self.cache = Some(c);
        }
        self.cache.as_ref().and_then(|c| c.as_ref().ok())
    }

    /// The name GDB is to get for a symtab's file.
    pub fn name(&mut self, req: &FileRequest<'_>) -> String {
        let Some(name) = req.name.filter(|n| !n.is_empty()) else {
            return self.cached(NO_LINES_NAME, NO_LINES_TEXT.as_bytes(), None);
        };
        if openable(name) {
            return name.to_string();
        }
        match req.text {
            Some(text) => {
                let hash = content_hash(text.as_bytes());
                let key = (name.to_string(), hash);
                if let Some(given) = self.texts.get(&key) {
                    return given.clone();
                }
                let given = self.cached(name, text.as_bytes(), Some(Held::Text(key.1.clone())));
                self.texts.insert(key, given.clone());
                given
            }
            None => {
                let lines = placeholder_lines(req.max_line);
                if let Some((have, given)) = self.placeholders.get(name) {
                    if *have >= lines {
                        return given.clone();
                    }
                }
                let text = placeholder(name, lines);
                let given = self.cached(name, text.as_bytes(), Some(Held::Placeholder(lines)));
                self.placeholders
                    .insert(name.to_string(), (lines, given.clone()));
                given
            }
        }
    }

    /// Stores `bytes` for `name` and returns the name GDB gets: `name` itself if it could
    /// be linked in the session directory (`held` says what it then holds; `None`: fixed
    /// content), else the stored file's absolute path, else `/dev/null`.
    fn cached(&mut self, name: &str, bytes: &[u8], held: Option<Held>) -> String {
        let len = bytes.len() as u64;
        if self.written.saturating_add(len) > MAX_WRITTEN && name != OVER_BUDGET_NAME {
            if self.written <= MAX_WRITTEN {
                report::line(format_args!(
                    "{MAX_WRITTEN} bytes of source files written in this session: `{name}` \
                     and later files are not written (a damaged core?)"
                ));
                // Said once: the total is pushed past the limit.
                self.written = MAX_WRITTEN + 1;
            }
            return self.cached(OVER_BUDGET_NAME, OVER_BUDGET_TEXT.as_bytes(), None);
        }
        self.written = self.written.saturating_add(len);
        let Some(cache) = self.cache() else {
            return self.in_memory(name, bytes);
        };
        let stored = match cache.store(name, bytes) {
            Ok(p) => p,
            Err(e) => {
                report::line(format_args!(
                    "source cache: {e}; `{name}` is kept in GDB's memory instead"
                ));
                return self.in_memory(name, bytes);
            }
        };
        if let (Some(session), Some(rel)) = (self.session.clone(), session_path(name)) {
            let before = self.held.get(name);
            // Text replaces a placeholder, and a longer placeholder a shorter one; a
            // different text never replaces another (it keeps its absolute name).
            let replace = match (before, &held) {
                (Some(Held::Placeholder(_)), Some(Held::Text(_))) => true,
                (Some(Held::Placeholder(a)), Some(Held::Placeholder(b))) => b > a,
                _ => false,
            };
            let keep_existing = matches!(
                (before, &held),
                (Some(Held::Text(_)), Some(Held::Placeholder(_)))
                    | (Some(Held::Placeholder(_)), Some(Held::Placeholder(_)))
            ) && !replace;
            if keep_existing {
                return name.to_string();
            }
            match link_in_session(&session, &rel, &stored, replace) {
                Ok(Linked::Done) => {
                    if let Some(h) = held {
                        self.held.insert(name.to_string(), h);
                    }
                    return name.to_string();
                }
                Ok(Linked::Taken) => {
                    debug!("`{name}` has another text in this session: named by its cache path");
                }
                Err(e) => report::line(format_args!(
                    "source session directory: {e}; `{name}` is named by its cache path"
                )),
            }
        }
        path_string(&stored)
    }
}

impl Namer {
    /// The last resort: a file in GDB's memory with `bytes` (see [`MAX_IN_MEMORY`]).
    fn in_memory(&mut self, name: &str, bytes: &[u8]) -> String {
        let hash = content_hash(bytes);
        if let Some(p) = self.in_memory.get(&hash) {
            return p.clone();
        }
        // memfd names are short (249 bytes): the stored base name is at most 128.
        let base = stored_basename(name);
        let (key, made) = if self.in_memory.len() < MAX_IN_MEMORY {
            (hash.clone(), memory_file(&format!("{hash}/{base}"), bytes))
        } else {
            let shared = placeholder("(jit-gdb: too many sources kept in memory)", 4096);
            let key = content_hash(shared.as_bytes());
            if let Some(p) = self.in_memory.get(&key) {
                return p.clone();
            }
            (
                key.clone(),
                memory_file(&format!("{key}/shared"), shared.as_bytes()),
            )
        };
        match made {
            Ok(p) => {
                self.in_memory.insert(key, p.clone());
                p
            }
            Err(e) => {
                // Nothing GDB could open is left: its own crash is all that remains.
                report::line(format_args!(
                    "{e}: `{name}` has no file GDB can open (GDB 10-14 may crash showing it)"
                ));
                name.to_string()
            }
        }
    }
}

fn path_string(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

static NAMER: Mutex<Namer> = Mutex::new(Namer::new());

/// The reader's namer. A panic caught while it was held leaves it usable.
pub fn namer() -> MutexGuard<'static, Namer> {
    NAMER.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn scratch(tag: &str) -> PathBuf {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "jit-reader-names-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn namer_at(root: &Path) -> Namer {
        Namer {
            cache: Some(SourceCache::at(root)),
            ..Namer::new()
        }
    }

    fn req<'a>(name: Option<&'a str>, text: Option<&'a str>, max_line: u32) -> FileRequest<'a> {
        FileRequest {
            name,
            text,
            max_line,
        }
    }

    #[test]
    fn bare_names_are_absolute_cache_paths_of_the_text_or_a_placeholder() {
        let root = scratch("bare");
        let mut n = namer_at(&root);
        let missing = "/nonexistent/dir/fib.js";
        let with_text = n.name(&req(Some(missing), Some("let a = 1;\nlet b = 2;\n"), 2));
        assert!(with_text.starts_with(root.to_str().unwrap()), "{with_text}");
        assert!(with_text.ends_with("/fib.js"));
        assert_eq!(
            std::fs::read_to_string(&with_text).unwrap(),
            "let a = 1;\nlet b = 2;\n"
        );
        let ph = n.name(&req(Some(missing), None, 7));
        let text = std::fs::read_to_string(&ph).unwrap();
        assert_eq!(text.lines().count(), 64);
        assert!(text
            .lines()
            .nth(6)
            .unwrap()
            .starts_with("fib.js:7: source not available"));
        // Functions without lines: a named, openable file.
        let none = n.name(&req(None, None, 0));
        assert!(std::fs::read_to_string(&none)
            .unwrap()
            .contains("without source lines"));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn real_files_win_over_registered_text() {
        let root = scratch("real");
        let mut n = namer_at(&root);
        let dir = scratch("realfile");
        std::fs::create_dir_all(&dir).unwrap();
        let real = dir.join("real.js");
        std::fs::write(&real, "real\n").unwrap();
        let real = real.to_str().unwrap();
        assert_eq!(n.name(&req(Some(real), Some("cached\n"), 1)), real);
        assert_eq!(n.name(&req(Some(real), None, 1)), real);
        let _ = std::fs::remove_dir_all(&root);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn session_names_stay_as_given_until_two_texts_share_one() {
        let root = scratch("session");
        let mut n = namer_at(&root);
        let s = n.session_dir().unwrap();
        // A placeholder first, then the text: the name stays; the text replaces it.
        assert_eq!(n.name(&req(Some("eval.js"), None, 3)), "eval.js");
        assert!(std::fs::read_to_string(s.join("eval.js"))
            .unwrap()
            .contains("source not available"));
        assert_eq!(n.name(&req(Some("eval.js"), Some("one\n"), 1)), "eval.js");
        assert_eq!(std::fs::read_to_string(s.join("eval.js")).unwrap(), "one\n");
        // A placeholder later does not hide the text.
        assert_eq!(n.name(&req(Some("eval.js"), None, 200)), "eval.js");
        assert_eq!(std::fs::read_to_string(s.join("eval.js")).unwrap(), "one\n");
        // Another text under the same name: its own absolute cache path.
        let other = n.name(&req(Some("eval.js"), Some("two\n"), 1));
        assert!(other.starts_with(root.to_str().unwrap()), "{other}");
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "two\n");
        // Absolute names are mirrored; names leaving the directory are not.
        assert_eq!(
            n.name(&req(Some("/srv/app/x.js"), None, 1)),
            "/srv/app/x.js"
        );
        assert!(s.join("srv/app/x.js").is_file());
        let up = n.name(&req(Some("../../etc/passwd.js"), Some("x\n"), 1));
        assert!(up.starts_with(root.to_str().unwrap()), "{up}");
        assert!(!s.parent().unwrap().join("etc").exists());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_hostile_core_cannot_fill_the_disk() {
        let root = scratch("budget");
        let mut n = namer_at(&root);
        n.written = MAX_WRITTEN - 10;
        let a = n.name(&req(Some("/nonexistent/a.js"), Some("0123456789abcdef"), 1));
        assert!(a.ends_with(OVER_BUDGET_NAME), "{a}");
        assert!(std::fs::read_to_string(&a).unwrap().contains("not written"));
        let b = n.name(&req(Some("/nonexistent/b.js"), None, 1 << 30));
        assert_eq!(a, b);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn an_unusable_cache_keeps_files_in_memory() {
        let file = scratch("notadir");
        std::fs::write(&file, "a file where the cache would be").unwrap();
        let mut n = Namer {
            cache: Some(SourceCache::at(&file.join("jit-gdb"))),
            ..Namer::new()
        };
        let a = n.name(&req(Some("/nonexistent/a.js"), Some("text of a\n"), 1));
        assert!(a.starts_with("/proc/self/fd/"), "{a}");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "text of a\n");
        // The same text: the same file; other names and texts: files of their own.
        assert_eq!(
            n.name(&req(Some("/nonexistent/a.js"), Some("text of a\n"), 1)),
            a
        );
        let none = n.name(&req(None, None, 0));
        assert_ne!(none, a);
        assert!(std::fs::read_to_string(&none)
            .unwrap()
            .contains("without source lines"));
        // Bounded: past the limit, texts share one file.
        for i in 0..MAX_IN_MEMORY + 10 {
            let p = n.name(&req(Some("/nonexistent/b.js"), Some(&format!("{i}\n")), 1));
            assert!(std::fs::metadata(&p).unwrap().is_file());
        }
        assert!(n.in_memory.len() <= MAX_IN_MEMORY + 1);
        let _ = std::fs::remove_file(&file);
    }
}
