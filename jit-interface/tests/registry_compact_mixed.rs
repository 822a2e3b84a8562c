//! The mixed workload of `registry_merges.rs` (registrations and drops of every kind, many
//! in one call too, objects of every shape) with compact records, without a debugger:
//! records appended in place, tombstones (live slots cleared) and batches rewritten once
//! mostly dead. The records whose live slot holds their key are exactly the live objects,
//! with their lines and frames, at every point looked at. In its own process: other tests
//! read every listed entry as ELF.

mod registry_support;

#[test]
fn mixed_compact_registrations_and_drops_keep_the_list_exact() {
    if jit_interface::descriptor::debugger_attached() {
        eprintln!("skipped: run under a debugger");
        return;
    }
    registry_support::mixed_workload(
        "compact",
        0x6400_0000_0000,
        0x6500_0000_0000,
        jit_interface::Format::Compact,
        |live| registry_support::check_compact("compact", live),
    );
}
