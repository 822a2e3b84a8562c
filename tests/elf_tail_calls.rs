//! A JIT function that leaves by a jump (a tail call) appears in GDB's backtrace as a
//! tail-call frame when its call sites are declared: `jit-interface/examples/tail_call_host.rs`
//! (real x86-64 code: `jit_outer` calls `jit_hop`, which jumps to `jit_inner`, which calls
//! the native `tail_host_stop`), registered as ELF. `jit_hop`'s frame is gone from the stack;
//! GDB rebuilds it from the call sites. Without the declared tail call it cannot.

mod common;

use common::*;

fn backtrace(args: &[&str]) -> (Vec<String>, Transcript) {
    let dir = TempDir::new("tail-calls");
    let host = interface_example("tail_call_host");
    let t = Gdb::program(&host, args, dir.path())
        .cmds(["break tail_host_stop", "run"])
        .section("bt", ["bt -frame-arguments none"])
        .section("frame", ["frame 2", "info frame"])
        .run();
    let names = t.gdb_bt("bt").into_iter().map(|f| f.function).collect();
    (names, t)
}

#[test]
fn a_declared_tail_call_gives_a_tail_call_frame() {
    if !require_tool("gdb", "a_declared_tail_call_gives_a_tail_call_frame") {
        return;
    }
    let (names, t) = backtrace(&[]);
    if names.get(..4)
        != Some(
            &[
                "tail_call_host::tail_host_stop",
                "jit_inner",
                "jit_hop",
                "jit_outer",
            ]
            .map(String::from)[..],
        )
    {
        t.fail(&format!("frames {names:?}"));
    }
    t.assert_contains(Some("frame"), "in jit_hop (tail.js:5)");
    t.assert_contains(Some("frame"), "tail call frame");
    let (names, t) = backtrace(&["--no-tail-calls"]);
    if names.get(..3)
        != Some(&["tail_call_host::tail_host_stop", "jit_inner", "jit_outer"].map(String::from)[..])
    {
        t.fail(&format!("without the tail call declared: frames {names:?}"));
    }
    t.assert_not_contains(Some("frame"), "tail call frame");
}
