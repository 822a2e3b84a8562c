//! What the registry hands an attached debugger for small compact registrations: an entry of
//! their own (read through our reader), merged into ELF batches (GDB frees those whole), and
//! ELF entries of their own once the reader budget is spent. `JIT_GDB_ALWAYS_NOTIFY=1` makes
//! the registry behave as under a debugger; the list is then walked as attach and core
//! readers walk it. One test in its own process: the registry and the setting are
//! process-wide. (Real GDB reading these entries: `tests/scale_churn.rs` and
//! `tests/reader_special.rs` in the root package.)

mod registry_support;

use std::collections::BTreeSet;

use jit_interface::{decode_all, CallTarget, Format, JitObject, LineRow, Registration};
use object::{Object, ObjectSymbol};
use registry_support::for_each_payload;

/// Names of the functions in every linked entry, split by payload kind.
#[derive(Default, Debug)]
struct Census {
    entries: usize,
    elf_entries: usize,
    elf: BTreeSet<String>,
    compact: BTreeSet<String>,
    /// Return addresses of the call sites the ELF entries describe.
    elf_call_sites: BTreeSet<u64>,
}

/// Return addresses (`DW_AT_low_pc`) of every `DW_TAG_GNU_call_site` in an ELF payload.
fn call_site_returns(file: &object::File) -> Vec<u64> {
    let dwarf = registry_support::dwarf_of(file);
    let mut out = Vec::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next().unwrap() {
        let unit = dwarf.unit(header).unwrap();
        let mut entries = unit.entries();
        while let Some(e) = entries.next_dfs().unwrap() {
            if e.tag() == gimli::DW_TAG_GNU_call_site {
                if let Some(gimli::AttributeValue::Addr(a)) = e.attr_value(gimli::DW_AT_low_pc) {
                    out.push(a);
                }
            }
        }
    }
    out
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
            c.elf_call_sites.extend(call_site_returns(&file));
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
    let f = o.add_function(&name(i), start(i), 64).unwrap();
    o.set_lines(f, "policy.js", &rows).unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    if i % 8 == 3 {
        // Compact records leave call sites out; the ELF batches must not.
        o.add_call_site(f, 13, CallTarget::Address(start(i + 1)))
            .unwrap();
    }
    jit_interface::register(&o, Format::Compact).unwrap()
}

fn start(i: u64) -> u64 {
    0x5400_0000_0000 + 64 * i
}

/// Return addresses of the call sites `one` declares for functions in `range`.
fn call_sites(range: std::ops::Range<u64>) -> BTreeSet<u64> {
    range
        .filter(|i| i % 8 == 3)
        .map(|i| start(i) + 13)
        .collect()
}

fn name(i: u64) -> String {
    format!("policy_fn_{i:05}")
}

fn names(range: std::ops::Range<u64>) -> BTreeSet<String> {
    range.map(name).collect()
}

#[test]
fn small_compact_registrations_under_a_debugger() {
    // Set before the first registration of this process, when the registry reads them once.
    std::env::set_var("JIT_GDB_ALWAYS_NOTIFY", "1");
    // A budget of 10,000 functions (the default is larger): the switch to ELF entries below
    // comes after the 10,000th.
    std::env::set_var("JIT_GDB_READER_BUDGET", "10000");
    let mut regs: Vec<Option<Registration>> = (0..40).map(|i| Some(one(i))).collect();

    // The first 32 were merged into one ELF batch; the last 8 are compact entries of their own.
    let c = census();
    assert_eq!((c.entries, c.elf_entries), (9, 1), "{c:?}");
    assert_eq!(c.elf, names(0..32));
    assert_eq!(c.compact, names(32..40));
    assert_eq!(
        c.elf_call_sites,
        call_sites(0..32),
        "call sites kept in the batch"
    );

    // Unregistering one of the batch rewrites the batch, as ELF, without it.
    regs[5] = None;
    let c = census();
    let mut expect = names(0..32);
    expect.remove(&name(5));
    assert_eq!((c.entries, c.elf_entries), (9, 1), "{c:?}");
    assert_eq!(c.elf, expect);
    assert_eq!(c.compact, names(32..40));
    assert_eq!(c.elf_call_sites, call_sites(0..32), "and in its rewrite");

    // Once 10,000 functions were announced in compact entries of their own, small compact
    // registrations are announced as ELF entries of their own.
    regs.extend((40..10_000).map(|i| Some(one(i))));
    let before = census();
    assert!(
        before.compact.len() < 32,
        "{} compact",
        before.compact.len()
    );
    let compact_entries = before.entries - before.elf_entries;
    assert!(
        compact_entries > 0,
        "the test needs compact entries waiting for a merge"
    );
    let late = one(10_000);
    let c = census();
    assert!(c.elf.contains(&name(10_000)), "announced as ELF");
    // The compact entries that waited for a merge went into one ELF batch at the switch.
    assert!(c.compact.is_empty(), "{} compact left", c.compact.len());
    assert_eq!(c.entries, before.entries - compact_entries + 2);
    assert!(c.elf.is_superset(&before.compact));
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
