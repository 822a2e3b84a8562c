//! What the registry hands an attached debugger for small compact registrations: an entry of
//! their own (read through our reader), merged into ELF batches (GDB frees those whole), and
//! ELF entries of their own once the reader budget is spent. `JIT_GDB_ALWAYS_NOTIFY=1` makes
//! the registry behave as under a debugger; the list is then walked as attach and core
//! readers walk it. One test in its own process: the registry and the setting are
//! process-wide. (Real GDB reading these entries: `tests/scale_churn.rs` and
//! `tests/reader_special.rs` in the root package.)

mod registry_support;

use std::collections::BTreeSet;

use jit_interface::{decode_all, Format, JitObject, LineRow, Registration};
use object::{Object, ObjectSymbol};
use registry_support::for_each_payload;

/// Names of the functions in every linked entry, split by payload kind.
#[derive(Default, Debug)]
struct Census {
    entries: usize,
    elf_entries: usize,
    elf: BTreeSet<String>,
    compact: BTreeSet<String>,
}

fn census() -> Census {
    let mut c = Census::default();
    c.entries = for_each_payload(|payload| {
        if payload.starts_with(b"\x7fELF") {
            c.elf_entries += 1;
            let file = object::File::parse(payload).expect("a listed ELF payload parses");
            for s in file
                .symbols()
                .filter(|s| s.kind() == object::SymbolKind::Text)
            {
                let name = s.name().expect("symbol name").to_string();
                assert!(c.elf.insert(name.clone()), "{name} listed twice");
            }
        } else {
            for o in decode_all(payload).expect("a listed compact payload decodes") {
                for f in o.object.functions() {
                    let name = f.name().to_string();
                    assert!(c.compact.insert(name.clone()), "{name} listed twice");
                }
            }
        }
    });
    c
}

fn one(i: u64) -> Registration {
    let rows: Vec<LineRow> = (0..4)
        .map(|r| LineRow {
            offset: r * 8,
            line: 1 + r,
        })
        .collect();
    let mut o = JitObject::new();
    let f = o
        .add_function(&name(i), 0x5400_0000_0000 + 64 * i, 64)
        .unwrap();
    o.set_lines(f, "policy.js", &rows).unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    jit_interface::register(&o, Format::Compact).unwrap()
}

fn name(i: u64) -> String {
    format!("policy_fn_{i:05}")
}

fn names(range: std::ops::Range<u64>) -> BTreeSet<String> {
    range.map(name).collect()
}

#[test]
fn small_compact_registrations_under_a_debugger() {
    // Set before the first registration of this process, when the registry reads it once.
    std::env::set_var("JIT_GDB_ALWAYS_NOTIFY", "1");
    let mut regs: Vec<Option<Registration>> = (0..40).map(|i| Some(one(i))).collect();

    // The first 32 were merged into one ELF batch; the last 8 are compact entries of their own.
    let c = census();
    assert_eq!((c.entries, c.elf_entries), (9, 1), "{c:?}");
    assert_eq!(c.elf, names(0..32));
    assert_eq!(c.compact, names(32..40));

    // Unregistering one of the batch rewrites the batch, as ELF, without it.
    regs[5] = None;
    let c = census();
    let mut expect = names(0..32);
    expect.remove(&name(5));
    assert_eq!((c.entries, c.elf_entries), (9, 1), "{c:?}");
    assert_eq!(c.elf, expect);
    assert_eq!(c.compact, names(32..40));

    // Once 10,000 functions were announced in compact entries of their own, small compact
    // registrations are announced as ELF entries of their own.
    regs.extend((40..10_000).map(|i| Some(one(i))));
    let before = census();
    assert!(
        before.compact.len() < 32,
        "{} compact",
        before.compact.len()
    );
    let late = one(10_000);
    let c = census();
    assert_eq!(c.entries, before.entries + 1);
    assert!(c.elf.contains(&name(10_000)), "announced as ELF");
    assert_eq!(c.compact, before.compact);
    // Every registered function is listed exactly once.
    let mut all: BTreeSet<String> = c.elf.union(&c.compact).cloned().collect();
    assert!(all.remove(&name(10_000)));
    let mut expect = names(0..10_000);
    expect.remove(&name(5));
    assert_eq!(all, expect);
    drop(late);
    drop(regs);
    assert_eq!(census().entries, 0, "everything unregistered");
}
