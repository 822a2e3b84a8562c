//! Consolidation without a debugger: small ELF objects registered one by one are merged
//! into batch entries (in a process of its own: other tests decode every listed payload as
//! compact records).

use jit_interface::{Format, JitObject, LineRow, Registration};

fn object(name: &str, start: u64) -> JitObject {
    let mut obj = JitObject::new();
    let f = obj.add_function(name, start, 64).unwrap();
    let rows: Vec<LineRow> = (0..8)
        .map(|i| LineRow {
            offset: i * 6,
            line: 10 + i,
        })
        .collect();
    obj.set_lines(f, "scale.js", &rows).unwrap();
    obj.set_frame_pointer(f, 1, 4).unwrap();
    obj
}

/// One-function ELF objects registered one by one get an entry each; every 32 entries are
/// merged into a batch and every 32 batches into a sealed one, each merge re-encoding its
/// objects: `merge_stats` accounts for all of it, and the list stays short.
#[test]
fn small_elf_objects_are_merged_twice_and_the_merges_are_counted() {
    let base = 0x5900_0000_0000u64;
    let before = jit_interface::merge_stats();
    let entries_before = jit_interface::descriptor::entry_count();
    let regs: Vec<Registration> = (0..1024u64)
        .map(|i| {
            let obj = object(&format!("merged_elf_{i:04}"), base + i * 64);
            jit_interface::register(&obj, Format::Elf).expect("register")
        })
        .collect();
    let after = jit_interface::merge_stats();
    // 32 merges of 32 entries, then one of the 32 batches they made.
    assert!(
        after.merges - before.merges >= 33,
        "{before:?} -> {after:?}"
    );
    assert!(
        after.objects - before.objects >= 2 * 1024,
        "{before:?} -> {after:?}"
    );
    assert!(after.time > before.time, "{before:?} -> {after:?}");
    let added = jit_interface::descriptor::entry_count() - entries_before;
    assert!(added <= 2, "1,024 objects left {added} entries in the list");
    drop(regs);
}
