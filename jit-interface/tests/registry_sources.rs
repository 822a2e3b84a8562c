//! Source texts through the registry without a debugger: compact records carry them when
//! appended in place, and when a batch is rewritten without its tombstones (records copied
//! as bytes); an ELF object with source texts takes the general path (an entry of its own,
//! with the `.jit_gdb.sources` section) while plain ones still grow a shared payload. Runs
//! in its own process: the registry is process-wide.

mod registry_support;

use std::collections::BTreeMap;

use jit_interface::descriptor::debugger_attached;
use jit_interface::{decode_all, Format, JitObject, LineRow, Registration, MAX_SOURCE_BYTES};
use object::{Object, ObjectSymbol};
use registry_support::{elf_sources, for_each_payload, slot_holds};

/// A one-function object in file `src_I.js`, with that file's text if `with_source`.
fn object(i: u64, with_source: bool) -> JitObject {
    let mut o = JitObject::new();
    let f = o
        .add_function(&format!("sources_fn_{i:05}"), 0x5500_0000_0000 + 64 * i, 64)
        .unwrap();
    let rows = [
        LineRow { offset: 0, line: 1 },
        LineRow { offset: 8, line: 2 },
    ];
    o.set_lines(f, &format!("src_{i}.js"), &rows).unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    if with_source {
        o.set_source(&format!("src_{i}.js"), &text(i)).unwrap();
    }
    o
}

fn text(i: u64) -> String {
    format!("function f{i}() {{\n  return {i};\n}}\n")
}

/// Function name -> its object's source text (None: none), over the live objects of every
/// listed compact payload; and the number of compact entries.
fn compact_census() -> (BTreeMap<String, Option<String>>, usize) {
    let mut out = BTreeMap::new();
    let mut entries = 0;
    for_each_payload(|payload| {
        if payload.starts_with(b"\x7fELF") {
            return;
        }
        entries += 1;
        for d in decode_all(payload).expect("a listed compact payload decodes") {
            let live = d.live.expect("a live check");
            if !slot_holds(live.address, live.key) {
                continue;
            }
            for f in d.object.functions() {
                let source = d.object.source(f.file().unwrap()).map(str::to_string);
                out.insert(f.name().to_string(), source);
            }
        }
    });
    (out, entries)
}

fn expected(range: impl Iterator<Item = u64>) -> BTreeMap<String, Option<String>> {
    range
        .map(|i| {
            let source = (i % 3 == 0).then(|| text(i));
            (format!("sources_fn_{i:05}"), source)
        })
        .collect()
}

#[test]
fn sources_survive_appends_copies_and_the_elf_paths() {
    if debugger_attached() {
        eprintln!("skipped: run under a debugger");
        return;
    }
    // Compact: appended in place to one batch, with and without sources.
    let mut regs: Vec<Registration> = (0..300)
        .map(|i| jit_interface::register(&object(i, i % 3 == 0), Format::Compact).unwrap())
        .collect();
    let (got, entries) = compact_census();
    assert_eq!(entries, 1, "one in-place batch");
    assert_eq!(got, expected(0..300));

    // Most of them unregistered: the batch is rewritten from its live records, as bytes.
    let kept = regs.split_off(250);
    let before = for_each_payload(|_| {});
    drop(regs);
    let (got, _) = compact_census();
    assert_eq!(got, expected(250..300));
    let mut bytes = 0;
    for_each_payload(|p| bytes += p.len());
    assert!(
        bytes < 50 * 200,
        "rewritten without the dead records: {bytes} bytes"
    );
    assert_eq!(for_each_payload(|_| {}), before);

    // A text above 1 MiB: cut, its record in an entry of its own.
    let mut big = object(1000, false);
    let long = "x = 1;\n".repeat(2 * MAX_SOURCE_BYTES / 7);
    big.set_source("src_1000.js", &long).unwrap();
    let big_reg = jit_interface::register(&big, Format::Compact).unwrap();
    let mut found = None;
    for_each_payload(|p| {
        if p.starts_with(b"\x7fELF") {
            return;
        }
        for d in decode_all(p).unwrap() {
            if let Some(t) = d.object.source("src_1000.js") {
                found = Some(t.len());
                assert!(t.ends_with(&format!("of {} bytes kept]\n", long.len())));
            }
        }
    });
    assert!(found.is_some_and(|n| n <= MAX_SOURCE_BYTES), "{found:?}");
    drop(big_reg);
    drop(kept);

    // ELF: plain objects grow one shared payload; those with sources get entries of their
    // own that carry the texts.
    let elf: Vec<Registration> = (2000..2012)
        .map(|i| jit_interface::register(&object(i, i % 3 == 0), Format::Elf).unwrap())
        .collect();
    let mut with_section = BTreeMap::new();
    let mut shared = 0;
    for_each_payload(|p| {
        if !p.starts_with(b"\x7fELF") {
            return;
        }
        let file = object::File::parse(p).unwrap();
        let names: Vec<String> = file
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text)
            .map(|s| s.name().unwrap().to_string())
            .collect();
        let sources = elf_sources(p);
        if sources.is_empty() {
            shared += names.len();
        } else {
            assert_eq!(names.len(), 1, "{names:?}");
            with_section.insert(names[0].clone(), sources);
        }
    });
    let want: BTreeMap<String, Vec<(String, String)>> = (2000..2012)
        .filter(|i| i % 3 == 0)
        .map(|i| {
            (
                format!("sources_fn_{i:05}"),
                vec![(format!("src_{i}.js"), text(i))],
            )
        })
        .collect();
    assert_eq!(with_section, want);
    assert_eq!(shared, 8, "the plain objects share a growing payload");
    drop(elf);
    assert_eq!(for_each_payload(|_| {}), 0, "everything unregistered");
}
