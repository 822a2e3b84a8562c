//! The reader plugin after the fact: attaching to a waiting process (the reader loaded
//! after the attach, so it reads entries registered long before), `gcore` of it, and a
//! kernel core dump of a SIGSEGV inside JIT code. Backtraces from cores equal the live ones.

mod common;
mod reader_support;

use common::scenario::{chain_from, kernel_core};
use common::*;
use reader_support::*;

fn same_backtrace(live: &[Frame], core: &[Frame], t: &Transcript) {
    let l: Vec<_> = live.iter().map(Frame::location).collect();
    let c: Vec<_> = core.iter().map(Frame::location).collect();
    if l != c {
        t.fail(&format!(
            "the core file's backtrace differs from the live one\nlive: {l:#?}\ncore: {c:#?}"
        ));
    }
}

#[test]
fn reader_attach_then_gcore_core_matches_live() {
    if !require_tool("gdb", "reader_attach_then_gcore_core_matches_live") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-attach");
    let a = h.args_in(dir.path());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let host = WaitingHost::start(&h.program, &a, dir.path());
    let core = dir.join("gcore.core");
    let live = Gdb::attach(host.pid, dir.path())
        .section("load", [load_cmd()])
        .section("bt", ["bt"])
        .section("gcore", [format!("gcore {}", core.display())])
        .cmd("detach")
        .run();
    let live_frames = assert_chain(&live, "bt", &CHAIN, &layout);
    eprintln!("attach backtrace:\n{}", live.section("bt"));
    drop(host);
    if !core.exists() {
        live.fail("gcore wrote no core file");
    }
    let post = Gdb::core(&h.program, &core, dir.path())
        .section("load", [load_cmd()])
        .section("bt", ["bt"])
        .run();
    let core_frames = assert_chain(&post, "bt", &CHAIN, &layout);
    same_backtrace(&live_frames, &core_frames, &post);
    assert_no_reader_noise(&post);
}

#[test]
fn reader_sigsegv_in_jit_code_core_matches_live() {
    if !require_tool("gdb", "reader_sigsegv_in_jit_code_core_matches_live") {
        return;
    }
    let h = compact_host();
    let (dir, layout) = setup(&h, "reader-crash");
    let crash_chain = chain_from("jit_second");
    let gcore = dir.join("gdb-generated.core");
    let live = gdb(&h, dir.path(), "crash")
        .cmd("run")
        .section("bt", ["bt"])
        .section("gcore", [format!("generate-core-file {}", gcore.display())])
        .run();
    live.assert_contains(None, "SIGSEGV");
    let live_frames = assert_chain(&live, "bt", crash_chain, &layout);
    if !live_frames[0].is("jit_second") {
        live.fail("the fault is not in jit_second");
    }
    let core = kernel_core(&h, dir.path(), gcore);
    // The reader loaded before and after the core: both read the same entries.
    for (tag, early) in [("before core", true), ("after core", false)] {
        let g = if early {
            Gdb {
                args: vec![],
                commands: vec![],
                dir: dir.path().into(),
                env: vec![],
            }
            .cmd(load_cmd())
            .cmd(format!("file {}", h.program.display()))
            .cmd(format!("core-file {}", core.display()))
        } else {
            Gdb::core(&h.program, &core, dir.path()).section("load", [load_cmd()])
        };
        let post = g.section("bt", ["bt"]).run();
        post.assert_contains(None, "SIGSEGV");
        let core_frames = assert_chain(&post, "bt", crash_chain, &layout);
        same_backtrace(&live_frames, &core_frames, &post);
        eprintln!(
            "core backtrace, reader loaded {tag}:\n{}",
            post.section("bt")
        );
    }
}
