//! The mixed workload of `registry_merges.rs` (registrations and drops of every kind, many
//! in one call too, objects of every shape) with the registry behaving as under a debugger
//! (`JIT_GDB_ALWAYS_NOTIFY=1`): each registration gets an entry of its own, merged 32 at a
//! time and again into sealed batches, each drop rewrites its batch (or splits its end off)
//! and announces it. The list, walked as attach and core readers walk it and read with
//! gimli, holds exactly the live functions with their lines and frames at every point
//! looked at. One test in its own process: the setting is read once per process. (Real GDB
//! following such changes: `tests/scale_churn.rs` in the root package.)

mod registry_support;

#[test]
fn mixed_registrations_and_drops_under_a_debugger_keep_the_list_exact() {
    // Set before the first registration of this process, when the registry reads it once.
    std::env::set_var("JIT_GDB_ALWAYS_NOTIFY", "1");
    assert!(jit_interface::descriptor::debugger_attached());
    registry_support::mixed_workload(
        "attached",
        0x6200_0000_0000,
        0x6300_0000_0000,
        jit_interface::Format::Elf,
        |live| registry_support::check_elf("attached", live),
    );
}
