//! The README's C example (`examples/c/answer_jit.c`, compiled by the top-level build.rs into
//! the `c_answer_jit` example): it runs, and GDB shows its JIT frame with its name and line
//! in both formats. Its source file, `answer.js`, exists nowhere: the compact session lists
//! the line from the text the program registered.

mod common;
mod reader_support;

use std::process::Command;

use common::*;
use reader_support::load_cmd;

#[test]
fn c_example_runs_and_gdb_shows_its_jit_frame_in_both_formats() {
    let exe = package_example("jit-gdb", "c_answer_jit");
    for format in ["elf", "compact"] {
        let out = Command::new(&exe).arg(format).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("answer() = 42"),
            "{} {format}: {}\n{stdout}{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new(&exe).arg("bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    if !require_tool("gdb", "c_example") {
        return;
    }
    for format in ["elf", "compact"] {
        let dir = TempDir::new(&format!("c-example-{format}"));
        let mut g = Gdb::program(&exe, &[format], dir.path());
        if format == "compact" {
            g = g.cmd(load_cmd());
        }
        let t = g
            .cmd("break answer_probe")
            .cmd("run")
            .section("bt", ["bt"])
            .section("frame", ["frame 1"])
            .section("finish", ["frame 0", "finish"])
            .run();
        let frames = t.gdb_bt("bt");
        let names: Vec<&str> = frames.iter().map(|f| f.function.as_str()).collect();
        if names != ["answer_probe", "answer", "main"] {
            t.fail(&format!("{format}: backtrace {names:?}"));
        }
        let jit = &frames[1];
        let file = jit.file.as_deref().unwrap_or("");
        if !(file == "answer.js" || is_cached_name(file, "answer.js")) || jit.line != Some(2) {
            t.fail(&format!(
                "{format}: the JIT frame is not at answer.js:2: {}",
                jit.raw
            ));
        }
        // `finish` returns into the JIT function, after its call: line 3 starts there.
        let back = t
            .section("finish")
            .lines()
            .find_map(|l| l.strip_prefix("answer () at "))
            .unwrap_or_else(|| t.fail(&format!("{format}: finish did not return to answer")));
        if !back.ends_with(".js:3") {
            t.fail(&format!("{format}: finish returned to {back}, not line 3"));
        }
        if format == "compact" {
            // The registered text, listed although answer.js is nowhere on disk.
            t.assert_contains(Some("frame"), "2\t  probe();");
        }
    }
}
