//! The registry under concurrent register/unregister, without a debugger: after every
//! thread has finished, the descriptor's list holds exactly the live registrations' functions,
//! each once, with its live slot set (what attach and core files see). Unregistered objects
//! may remain in a payload with their slot cleared (tombstones): readers skip them.

use std::collections::BTreeMap;

mod registry_support;

use jit_interface::{decode_all, Format, Registration};
use registry_support::{for_each_payload, object, slot_holds};

/// Every compact function name in the list whose object's live slot holds its key, the
/// number of entries, and the number of tombstoned objects.
fn listed() -> (BTreeMap<String, usize>, usize, usize) {
    let mut names = BTreeMap::new();
    let mut tombstones = 0;
    let entries = for_each_payload(|bytes| {
        for obj in decode_all(bytes).expect("a listed payload decodes") {
            let live = obj.live.expect("registry payloads carry live checks");
            if !slot_holds(live.address, live.key) {
                // A tombstone: its slot was cleared, or reused by a later registration with
                // a fresh key.
                tombstones += 1;
                continue;
            }
            for f in obj.object.functions() {
                *names.entry(f.name().to_string()).or_default() += 1;
            }
        }
    });
    (names, entries, tombstones)
}

#[test]
fn concurrent_churn_leaves_exactly_the_live_set_in_the_list() {
    const THREADS: u64 = 8;
    const SLOTS: u64 = 64;
    const OPS: u64 = 3000;
    let base = 0x5100_0000_0000u64;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let mut slots: Vec<Option<(String, Registration)>> =
                    (0..SLOTS).map(|_| None).collect();
                let mut x = 0x2545_f491_4f6c_dd1du64 ^ (t + 1);
                for op in 0..OPS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let s = (x % SLOTS) as usize;
                    if slots[s].take().is_none() {
                        let name = format!("churn_{t}_{s}_{op}");
                        let obj = object(&name, base + (t * SLOTS + s as u64) * 64);
                        let r = jit_interface::register(&obj, Format::Compact).unwrap();
                        slots[s] = Some((name, r));
                    }
                }
                slots
            })
        })
        .collect();
    let live: Vec<(String, Registration)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .flatten()
        .collect();
    let (names, entries, tombstones) = listed();
    eprintln!(
        "{} live objects in {entries} entries, {tombstones} tombstones",
        live.len()
    );
    let expected: BTreeMap<String, usize> = live.iter().map(|(n, _)| (n.clone(), 1)).collect();
    assert_eq!(names, expected, "the list differs from the live set");
    assert!(
        entries < live.len(),
        "{entries} entries for {} live objects: nothing was consolidated",
        live.len()
    );
    drop(live);
    let (names, entries, _) = listed();
    assert!(
        names.is_empty() && entries == 0,
        "{entries} entries left: {names:?}"
    );
}
