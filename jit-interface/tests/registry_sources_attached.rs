//! Source texts through the registry under a debugger (`JIT_GDB_ALWAYS_NOTIFY=1`): small
//! compact registrations get entries of their own, then are merged into ELF batches (their
//! models decoded from the records) and sealed ones (which keep models for objects with
//! sources rather than records); every path keeps each object's text, also when a batch is
//! rewritten after an unregistration. One test in its own process: the registry and the
//! setting are process-wide.

mod registry_support;

use std::collections::BTreeMap;

use jit_interface::{decode_all, Format, JitObject, LineRow, Registration};
use registry_support::{elf_sources, for_each_payload};

fn object(i: u64) -> JitObject {
    let mut o = JitObject::new();
    let f = o
        .add_function(
            &format!("attached_src_{i:05}"),
            0x5600_0000_0000 + 64 * i,
            64,
        )
        .unwrap();
    let file = format!("att_{i}.js");
    o.set_lines(f, &file, &[LineRow { offset: 0, line: 1 }])
        .unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    if i % 4 == 0 {
        o.set_source(&file, &text(i)).unwrap();
    }
    o
}

fn text(i: u64) -> String {
    format!("// source of {i}\nreturn {i};\n")
}

/// Every source text listed: file -> text, from ELF sections and compact records alike.
/// (ELF payloads merge one text per file; every object here has a file of its own.)
fn listed() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for_each_payload(|p| {
        let sources: Vec<(String, String)> = if p.starts_with(b"\x7fELF") {
            elf_sources(p)
        } else {
            decode_all(p)
                .expect("a compact payload")
                .iter()
                .flat_map(|d| d.object.sources())
                .map(|(f, t)| (f.to_string(), t.to_string()))
                .collect()
        };
        for (file, text) in sources {
            assert!(
                out.insert(file.clone(), text).is_none(),
                "{file} listed twice"
            );
        }
    });
    out
}

fn expected(ids: impl Iterator<Item = u64>) -> BTreeMap<String, String> {
    ids.filter(|i| i % 4 == 0)
        .map(|i| (format!("att_{i}.js"), text(i)))
        .collect()
}

#[test]
fn sources_survive_merges_seals_and_rewrites_under_a_debugger() {
    // Set before the first registration of this process, when the registry reads them once.
    std::env::set_var("JIT_GDB_ALWAYS_NOTIFY", "1");
    std::env::set_var("JIT_GDB_READER_BUDGET", "1000000");
    let mut regs: BTreeMap<u64, Registration> = (0..40)
        .map(|i| {
            (
                i,
                jit_interface::register(&object(i), Format::Compact).unwrap(),
            )
        })
        .collect();
    // 32 merged into one ELF batch, 8 compact entries of their own.
    let mut elf_entries = 0;
    let entries = for_each_payload(|p| elf_entries += usize::from(p.starts_with(b"\x7fELF")));
    assert_eq!((entries, elf_entries), (9, 1));
    assert_eq!(listed(), expected(0..40));

    // Out of the ELF batch: the rewrite keeps the others' texts.
    regs.remove(&4);
    regs.remove(&5);
    assert_eq!(listed(), expected(regs.keys().copied()));

    // Enough for a sealed batch (32 batches of 32): members with sources keep models,
    // the others records; a rewrite after an unregistration needs both.
    for i in 40..1100 {
        regs.insert(
            i,
            jit_interface::register(&object(i), Format::Compact).unwrap(),
        );
    }
    assert_eq!(listed(), expected(regs.keys().copied()));
    let entries = for_each_payload(|_| {});
    assert!(entries < 80, "{entries} entries: merged and sealed");
    for i in [8, 9, 500, 501, 1000] {
        regs.remove(&i);
        assert_eq!(listed(), expected(regs.keys().copied()), "after {i} left");
    }
    drop(regs);
    assert_eq!(for_each_payload(|_| {}), 0, "everything unregistered");
}
