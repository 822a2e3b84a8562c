//! An MI front end (`gdb -i=mi`, what VS Code, CLion and Emacs drive) through a session that
//! registers many functions one by one with a breakpoint set, then stops under real JIT
//! frames: `-stack-list-frames` must name each JIT function, with the source file and line
//! of its registration, and reach `main` through them. Both formats, with GDB alone (the
//! reader loaded by a console command) and through the launcher (reader and GDB scripts).
//!
//! The host is `scale_host run N 1 FORMAT`: N functions of real code in 64-byte slots with
//! pseudo-random gaps after them (`SCALE_HOST_GAP=random`), each registered by its own call
//! (so GDB sees single entries merged into batches and sealed batches), then functions N-1,
//! N/2 and 0 called in that order, the last calling the native `scale_host_jit_stop`.

mod common;
mod reader_support;

use std::process::Command;

use common::*;
use reader_support::*;

/// Registrations per session: more than one sealed batch of 1,024 objects, so the three
/// functions called sit in a sealed batch, an open batch and a single entry.
const FUNCTIONS: u64 = 2100;

/// One MI frame's fields (`key="value"` pairs of a `frame={...}` tuple).
struct MiFrame {
    fields: Vec<(String, String)>,
    text: String,
}

impl MiFrame {
    fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The frames of a `^done,stack=[frame={...},...]` answer, in order.
fn parse_stack(answer: &str) -> Vec<MiFrame> {
    let mut frames = Vec::new();
    for part in answer.split("frame={").skip(1) {
        let body = &part[..part.find('}').unwrap_or(part.len())];
        let mut fields = Vec::new();
        let mut rest = body;
        // key="value" pairs separated by commas; MI escapes quotes inside values as \".
        while let Some(eq) = rest.find("=\"") {
            let key = rest[..eq].trim_start_matches(',').to_string();
            let value_start = eq + 2;
            let bytes = rest.as_bytes();
            let mut end = value_start;
            while end < bytes.len() && !(bytes[end] == b'"' && bytes[end - 1] != b'\\') {
                end += 1;
            }
            fields.push((key, rest[value_start..end].replace("\\\"", "\"")));
            rest = &rest[(end + 1).min(rest.len())..];
        }
        frames.push(MiFrame {
            fields,
            text: body.to_string(),
        });
    }
    frames
}

fn mi_session(format: &str, launcher: bool) {
    let host = interface_example("scale_host");
    let dir = TempDir::new(&format!("mi-session-{format}-{launcher}"));
    let input = dir.join("session.mi");
    let mut script = vec![
        "-gdb-set confirm off".to_string(),
        "-gdb-set breakpoint pending on".into(),
    ];
    if !launcher && format == "compact" {
        script.push(format!("-interpreter-exec console \"{}\"", load_cmd()));
    }
    script.extend([
        format!("-file-exec-and-symbols {}", host.display()),
        format!("-exec-arguments run {FUNCTIONS} 1 {format}"),
        // Set before the program starts: every registration happens with it in place.
        "-break-insert scale_host_jit_stop".into(),
        "-exec-run".into(),
        "-stack-list-frames".into(),
        "-gdb-exit".into(),
    ]);
    std::fs::write(&input, script.join("\n") + "\n").unwrap();
    let mut cmd = Command::new(if launcher {
        env!("CARGO_BIN_EXE_jit-gdb")
    } else {
        "gdb"
    });
    cmd.env("JIT_GDB_READER", reader_so())
        .env("SCALE_HOST_GAP", "random")
        .args(["-i=mi", "-nx", "-q"])
        .current_dir(dir.path());
    let t = run_captured_with_input(cmd, dir.path(), Some(&input));
    for bad in ["Fatal signal", "internal-error", "^error"] {
        t.assert_not_contains(None, bad);
    }
    t.assert_contains(None, "*stopped,reason=\"breakpoint-hit\"");
    t.assert_contains(None, "^exit");
    // What the host registered for the three functions it called, outermost first.
    let layout = Layout::parse(&t.text);
    let called: Vec<&JitFnInfo> = [FUNCTIONS - 1, FUNCTIONS / 2, 0]
        .iter()
        .map(|j| layout.get(&format!("jit_fn_{j:013}")))
        .collect();
    let answer = t
        .text
        .lines()
        .find(|l| l.starts_with("^done,stack="))
        .unwrap_or_else(|| t.fail("no -stack-list-frames answer"));
    let frames = parse_stack(answer);
    let func = |i: usize| frames.get(i).and_then(|f| f.get("func")).unwrap_or("");
    // With the host's debug info GDB names it by its path (`scale_host::scale_host_jit_stop`).
    if !func(0).ends_with("scale_host_jit_stop") {
        t.fail(&format!("frame 0 is `{}`, not the native stop", func(0)));
    }
    // Frames 1-3: the JIT functions, innermost (the last called) first.
    for (level, info) in (1..=3).zip(called.iter().rev()) {
        let f = &frames[level];
        let field = |key: &str| {
            f.get(key)
                .unwrap_or_else(|| t.fail(&format!("frame {level} has no {key}: {}", f.text)))
        };
        assert_eq!(field("level"), level.to_string(), "{}", f.text);
        assert_eq!(field("func"), info.name, "frame {level}: {}", f.text);
        let addr = parse_hex(field("addr")).expect("frame address");
        assert!(
            info.contains(addr),
            "frame {level} at {addr:#x} is outside {} ({:#x}, {} bytes)",
            info.name,
            info.start,
            info.size
        );
        // A caller frame's PC is a return address: its line is that of the call before it.
        let want = info
            .line_at(addr - 1)
            .unwrap_or_else(|| t.fail(&format!("no registered line at {:#x}", addr - 1)));
        assert_eq!(field("line"), want.to_string(), "frame {level}: {}", f.text);
        let file = field("file");
        // Compact registrations under GDB end up in ELF batches (the registry merges them)
        // or are read by the reader, which, loaded bare, names a file GDB can open (the
        // runtime's has no file on disk): the registered name, or a cached copy of it.
        let cached = format == "compact" && !launcher && is_cached_name(file, &info.file);
        assert!(file == info.file || cached, "frame {level}: {}", f.text);
    }
    // Through the JIT frames back into the host, down to main.
    if !func(4).contains("run_chain") {
        t.fail(&format!(
            "frame 4 is `{}`, not the host's run_chain",
            func(4)
        ));
    }
    // (GDB 13 lists the C library's frames below main: its Rust `main` is not the
    // program's entry in GDB 13's eyes; GDB 16 ends the stack at the Rust `main`.)
    if !frames[5..].iter().any(|f| {
        f.get("func")
            .is_some_and(|n| n == "main" || n.ends_with("::main"))
    }) {
        t.fail("the MI stack does not reach main");
    }
    eprintln!(
        "MI stack ({format}, launcher: {launcher}), {} frames:\n{answer}",
        frames.len()
    );
}

#[test]
fn mi_stack_through_jit_frames_after_one_by_one_registrations_compact() {
    if !require_tool("gdb", "mi_session_compact") {
        return;
    }
    mi_session("compact", false);
    mi_session("compact", true);
}

#[test]
fn mi_stack_through_jit_frames_after_one_by_one_registrations_elf() {
    if !require_tool("gdb", "mi_session_elf") {
        return;
    }
    mi_session("elf", false);
    mi_session("elf", true);
}
