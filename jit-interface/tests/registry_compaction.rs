//! Unregistering without a debugger leaves tombstones in place; once they are the larger part
//! of a batch entry, the batch is rewritten without them. Runs in its own process: the
//! registry is process-wide.

mod registry_support;

use jit_interface::descriptor::debugger_attached;
use jit_interface::{decode_all, Format, JitObject, LineRow};
use registry_support::{for_each_payload, slot_holds};

/// (entries, payload bytes, objects in payloads, objects whose slot holds their key).
fn census() -> (usize, u64, usize, usize) {
    let (mut bytes, mut objects, mut live) = (0, 0, 0);
    let entries = for_each_payload(|payload| {
        bytes += payload.len() as u64;
        for o in decode_all(payload).expect("a listed payload decodes") {
            objects += 1;
            let l = o.live.expect("compact registrations carry live checks");
            if slot_holds(l.address, l.key) {
                live += 1;
            }
        }
    });
    (entries, bytes, objects, live)
}

#[test]
fn tombstones_are_compacted_once_they_dominate_a_batch() {
    if debugger_attached() {
        eprintln!("skipped: run under a debugger");
        return;
    }
    let rows: Vec<LineRow> = (0..8)
        .map(|i| LineRow {
            offset: i * 6,
            line: 10 + i,
        })
        .collect();
    let mut regs: Vec<_> = (0..400u64)
        .map(|i| {
            let mut o = JitObject::new();
            let f = o
                .add_function(
                    &format!("compaction_fn_{i:05}"),
                    0x5300_0000_0000 + 64 * i,
                    64,
                )
                .unwrap();
            o.set_lines(f, "compaction.js", &rows).unwrap();
            o.set_frame_pointer(f, 1, 4).unwrap();
            jit_interface::register(&o, Format::Compact).unwrap()
        })
        .collect();
    let (entries, full_bytes, objects, live) = census();
    assert_eq!(
        (entries, objects, live),
        (1, 400, 400),
        "one in-place batch"
    );

    // Drop 40: tombstones, the payload is untouched.
    let kept: Vec<_> = regs.split_off(40);
    drop(regs);
    let (entries, bytes, objects, live) = census();
    assert_eq!((entries, bytes, objects, live), (1, full_bytes, 400, 360));

    // Drop all but 20: the dead records become the larger part and the batch is rewritten.
    let mut kept = kept;
    let last: Vec<_> = kept.split_off(340);
    drop(kept);
    let (entries, bytes, objects, live) = census();
    assert_eq!(entries, 1);
    assert_eq!(live, 20, "exactly the registered objects are live");
    assert!(
        objects < 200 && bytes < full_bytes / 2,
        "not compacted: {objects} records, {bytes} of {full_bytes} bytes"
    );
    drop(last);
    assert_eq!(census().0, 0, "an empty batch is unlinked");
}
