//! The list walker on a fake memory: intact lists, liveness, and every kind of damage.

use std::cell::Cell;
use std::collections::BTreeMap;

use super::*;
use crate::format::{encode, encode_bundle, LiveCheck};
use crate::model::JitObject;

/// Memory made of separate regions; anything outside them is unreadable. Counts the bytes
/// read, to check that limits keep the walk from reading what it refuses.
#[derive(Default)]
struct FakeMemory {
    regions: BTreeMap<u64, Vec<u8>>,
    read_bytes: Cell<u64>,
}

impl Memory for FakeMemory {
    fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>, String> {
        let (&start, bytes) = self
            .regions
            .range(..=addr)
            .next_back()
            .ok_or_else(|| format!("nothing mapped at {addr:#x}"))?;
        let from = (addr - start) as usize;
        let to = from
            .checked_add(usize::try_from(len).map_err(|_| "too long".to_string())?)
            .filter(|&to| to <= bytes.len())
            .ok_or_else(|| format!("{len} bytes at {addr:#x} run past the mapping"))?;
        self.read_bytes.set(self.read_bytes.get() + len);
        Ok(bytes[from..to].to_vec())
    }
}

const DESCRIPTOR: u64 = 0x1000;

impl FakeMemory {
    fn map(&mut self, addr: u64, bytes: Vec<u8>) {
        self.regions.insert(addr, bytes);
    }

    fn descriptor(&mut self, version: u32, first: u64) {
        let mut d = version.to_le_bytes().to_vec();
        d.extend(1u32.to_le_bytes());
        d.extend(first.to_le_bytes()); // relevant_entry
        d.extend(first.to_le_bytes());
        self.map(DESCRIPTOR, d);
    }

    fn entry(&mut self, addr: u64, next: u64, prev: u64, payload: u64, size: u64) {
        let mut e = Vec::new();
        for v in [next, prev, payload, size] {
            e.extend(v.to_le_bytes());
        }
        self.map(addr, e);
    }

    /// A well-formed list of `payloads` (the first is the head, the newest).
    fn list(payloads: &[Vec<u8>]) -> FakeMemory {
        let mut m = FakeMemory::default();
        let at = |i: usize| 0x2000 + 0x100 * i as u64;
        m.descriptor(1, if payloads.is_empty() { 0 } else { at(0) });
        for (i, p) in payloads.iter().enumerate() {
            let next = if i + 1 < payloads.len() { at(i + 1) } else { 0 };
            let prev = if i == 0 { 0 } else { at(i - 1) };
            let payload = 0x10_0000 + 0x1_0000 * i as u64;
            m.entry(at(i), next, prev, payload, p.len() as u64);
            m.map(payload, p.clone());
        }
        m
    }
}

fn payload(fns: &[(&str, u64, u64)]) -> Vec<u8> {
    let mut o = JitObject::new();
    for &(n, s, z) in fns {
        o.add_function(n, s, z).unwrap();
    }
    encode(&o, None).unwrap()
}

fn names(e: &ListEntry) -> Vec<&str> {
    e.result
        .as_ref()
        .unwrap()
        .functions
        .iter()
        .map(|f| f.name.as_str())
        .collect()
}

fn walk(m: &FakeMemory) -> ListReport {
    walk_list(m, DESCRIPTOR, &Limits::default()).unwrap()
}

#[test]
fn intact_list_in_list_and_registration_order() {
    let m = FakeMemory::list(&[
        payload(&[("newest", 0x100, 8)]),
        payload(&[("oldest", 0x200, 8)]),
    ]);
    let r = walk(&m);
    assert_eq!(r.descriptor.version, 1);
    assert_eq!(r.descriptor.first_entry, 0x2000);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.entries.len(), 2);
    assert_eq!(names(&r.entries[0]), ["newest"]);
    assert_eq!(r.entries[0].kind, Some(PayloadKind::Compact));
    assert_eq!((r.entries[1].addr, r.entries[1].prev), (0x2100, 0x2000));
    let order: Vec<&str> = r
        .functions_oldest_first()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(order, ["oldest", "newest"]);
}

#[test]
fn empty_list_and_unreadable_descriptor() {
    let r = walk(&FakeMemory::list(&[]));
    assert!(r.entries.is_empty() && r.problems.is_empty());
    let err = walk_list(&FakeMemory::default(), DESCRIPTOR, &Limits::default()).unwrap_err();
    assert!(
        err.contains("cannot read __jit_debug_descriptor at 0x1000"),
        "{err}"
    );
}

#[test]
fn unregistered_objects_are_dropped_by_the_walk() {
    let mut a = JitObject::new();
    a.add_function("live", 0x100, 8).unwrap();
    let mut b = JitObject::new();
    b.add_function("dead", 0x200, 8).unwrap();
    let mut c = JitObject::new();
    c.add_function("slot_unreadable", 0x300, 8).unwrap();
    let live = |address, key| Some(LiveCheck { address, key });
    let bundle = encode_bundle(&[
        (&a, live(0x9000, 7)),
        (&b, live(0x9008, 8)),
        (&c, live(0x7000, 9)),
    ])
    .unwrap();
    let mut m = FakeMemory::list(&[bundle]);
    let mut slots = 7u64.to_le_bytes().to_vec();
    slots.extend(0u64.to_le_bytes()); // b's slot cleared: unregistered
    m.map(0x9000, slots);
    let r = walk(&m);
    assert_eq!(names(&r.entries[0]), ["live", "slot_unreadable"]);
    assert_eq!(r.entries[0].dropped, 1);
}

#[test]
fn a_cycle_stops_the_walk() {
    let mut m = FakeMemory::list(&[payload(&[("a", 0x100, 8)]), payload(&[("b", 0x200, 8)])]);
    // The second entry points back to the first.
    m.entry(
        0x2100,
        0x2000,
        0x2000,
        0x11_0000,
        m.regions[&0x11_0000].len() as u64,
    );
    let r = walk(&m);
    assert_eq!(r.entries.len(), 2);
    assert_eq!(
        r.problems,
        [ListProblem::Loop {
            index: 1,
            target: 0x2000
        }]
    );
    assert!(r.problems[0].to_string().contains("loops"));
    // An entry pointing at itself.
    m.entry(
        0x2000,
        0x2000,
        0,
        0x10_0000,
        m.regions[&0x10_0000].len() as u64,
    );
    let r = walk(&m);
    assert_eq!(r.entries.len(), 1);
    assert_eq!(
        r.problems,
        [ListProblem::Loop {
            index: 0,
            target: 0x2000
        }]
    );
}

#[test]
fn truncated_and_unreadable_entries_end_the_list() {
    let mut m = FakeMemory::list(&[payload(&[("a", 0x100, 8)]), payload(&[("b", 0x200, 8)])]);
    // The second entry is cut after 16 bytes (a truncated core).
    m.map(0x2100, vec![0; 16]);
    let r = walk(&m);
    assert_eq!(r.entries.len(), 1);
    match &r.problems[..] {
        [ListProblem::UnreadableEntry {
            index: 1,
            addr: 0x2100,
            why,
        }] => {
            assert!(why.contains("run past"), "{why}")
        }
        p => panic!("{p:?}"),
    }
    // first_entry itself unreadable.
    m.descriptor(1, 8);
    let r = walk(&m);
    assert!(r.entries.is_empty());
    assert!(matches!(
        r.problems[..],
        [ListProblem::UnreadableEntry {
            index: 0,
            addr: 8,
            ..
        }]
    ));
    assert!(r.problems[0]
        .to_string()
        .starts_with("entry 0 at 0x8 cannot be read: "));
}

#[test]
fn a_bad_version_is_reported_and_the_list_still_walked() {
    let mut m = FakeMemory::list(&[payload(&[("a", 0x100, 8)])]);
    m.descriptor(2, 0x2000);
    let r = walk(&m);
    assert_eq!(r.problems, [ListProblem::Version { version: 2 }]);
    assert_eq!(names(&r.entries[0]), ["a"]);
}

#[test]
fn a_prev_mismatch_is_reported() {
    let mut m = FakeMemory::list(&[payload(&[("a", 0x100, 8)]), payload(&[("b", 0x200, 8)])]);
    let size = m.regions[&0x11_0000].len() as u64;
    m.entry(0x2100, 0, 0x4444, 0x11_0000, size);
    let r = walk(&m);
    assert_eq!(r.entries.len(), 2);
    assert_eq!(
        r.problems,
        [ListProblem::PrevMismatch {
            index: 1,
            addr: 0x2100,
            prev: 0x4444,
            expected: 0x2000
        }]
    );
}

#[test]
fn huge_empty_and_unreadable_payloads_are_entry_errors() {
    let mut m = FakeMemory::list(&[
        payload(&[("a", 0x100, 8)]),
        payload(&[("b", 0x200, 8)]),
        payload(&[("c", 0x300, 8)]),
        payload(&[("d", 0x400, 8)]),
    ]);
    m.entry(0x2000, 0x2100, 0, 0x10_0000, u64::MAX);
    m.entry(0x2100, 0x2200, 0x2000, 0x11_0000, 0);
    m.entry(0x2200, 0x2300, 0x2100, 0x5, 64);
    let r = walk(&m);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.entries.len(), 4);
    assert!(matches!(
        r.entries[0].result,
        Err(EntryError::TooLarge { size: u64::MAX, .. })
    ));
    assert_eq!(r.entries[1].result, Err(EntryError::Empty));
    match &r.entries[2].result {
        Err(EntryError::Unreadable { why }) => {
            assert!(why.starts_with("payload of 64 bytes at 0x5: "), "{why}")
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(r.entries[2].kind, None);
    assert_eq!(names(&r.entries[3]), ["d"]);
    // The refused sizes were never read.
    assert!(m.read_bytes.get() < 1024, "{}", m.read_bytes.get());
}

#[test]
fn undecodable_payloads_keep_their_kind_and_the_decoder_message() {
    let mut bad = payload(&[("a", 0x100, 8)]);
    bad.truncate(bad.len() - 1);
    let m = FakeMemory::list(&[bad, b"garbage!".to_vec()]);
    let r = walk(&m);
    assert_eq!(r.entries[0].kind, Some(PayloadKind::Compact));
    match &r.entries[0].result {
        Err(EntryError::Decode(why)) => assert!(why.starts_with("compact payload: "), "{why}"),
        e => panic!("{e:?}"),
    }
    assert_eq!(r.entries[1].kind, None);
    assert!(
        matches!(&r.entries[1].result, Err(EntryError::Decode(w)) if w.contains("unknown payload kind"))
    );
}

#[test]
fn limits_bound_the_walk() {
    let p = payload(&[("a", 0x100, 8)]);
    let m = FakeMemory::list(&[p.clone(), p.clone(), p.clone()]);
    let limits = Limits {
        max_entries: 2,
        ..Limits::default()
    };
    let r = walk_list(&m, DESCRIPTOR, &limits).unwrap();
    assert_eq!(r.entries.len(), 2);
    assert_eq!(r.problems, [ListProblem::TooManyEntries { limit: 2 }]);
    let limits = Limits {
        max_total_payload: 2 * p.len() as u64,
        ..Limits::default()
    };
    let r = walk_list(&m, DESCRIPTOR, &limits).unwrap();
    assert!(r.entries[1].result.is_ok());
    assert!(matches!(
        r.entries[2].result,
        Err(EntryError::TotalTooLarge { .. })
    ));
}

#[test]
fn json_of_a_walk_carries_entries_problems_and_the_lookup() {
    // The newest entry (the head) hides part of the older one.
    let mut m = FakeMemory::list(&[
        payload(&[("new", 0x110, 0x10)]),
        payload(&[("old", 0x100, 0x40)]),
        b"junk".to_vec(),
    ]);
    let size = m.regions[&0x11_0000].len() as u64;
    m.entry(0x2100, 0x2200, 0x9999, 0x11_0000, size);
    let json = walk_list_json(&m, DESCRIPTOR, &Limits::default());
    assert!(
        json.starts_with("{\"descriptor\": {\"address\": 4096, \"version\": 1"),
        "{json}"
    );
    assert!(json.contains("\"kind\": \"prev_mismatch\""), "{json}");
    assert!(
        json.contains("\"index\": 1, \"address\": 8448, \"prev\": 39321, \"expected\": 8192"),
        "{json}"
    );
    assert!(
        json.contains("\"error\": {\"kind\": \"decode\", \"message\": \"unknown payload kind"),
        "{json}"
    );
    // old keeps [0x100, 0x110) and [0x120, 0x140); new owns [0x110, 0x120).
    assert!(
        json.ends_with("\"lookup\": [[256, 272, 1, 0], [272, 288, 0, 0], [288, 320, 1, 0]]}"),
        "{json}"
    );
    let entry = read_entry_json(&m, 0x2000, &Limits::default());
    assert!(
        entry.starts_with("{\"entry\": {\"address\": 8192, \"next\": 8448"),
        "{entry}"
    );
    assert!(
        entry.contains("\"payload\": {\"kind\": \"compact\""),
        "{entry}"
    );
    let err = read_entry_json(&m, 0x8, &Limits::default());
    assert!(
        err.starts_with("{\"error\": \"cannot read jit_code_entry at 0x8: "),
        "{err}"
    );
    let err = walk_list_json(&FakeMemory::default(), DESCRIPTOR, &Limits::default());
    assert!(
        err.starts_with("{\"error\": \"cannot read __jit_debug_descriptor"),
        "{err}"
    );
}

/// One ELF payload whose DWARF is damaged among intact ones: its entry keeps its symbols
/// and names the problem, the other entries are listed as usual, and the list itself has
/// no problem (nothing suggests the descriptor is missing).
#[cfg(feature = "runtime")]
#[test]
fn damaged_dwarf_in_one_entry_leaves_the_others_listed() {
    use super::elf_tests::{relocatable_object, BASE};
    use object::{Object, ObjectSection};
    let mut elf = relocatable_object(&[]);
    let (off, size) = object::File::parse(&*elf)
        .unwrap()
        .section_by_name(".debug_info")
        .unwrap()
        .file_range()
        .unwrap();
    // A unit length running past the section.
    elf[off as usize..off as usize + 4].copy_from_slice(&(size as u32 + 64).to_le_bytes());
    let m = FakeMemory::list(&[
        payload(&[("newest", 0x5000, 0x10)]),
        elf,
        payload(&[("oldest", 0x6000, 0x10)]),
    ]);
    let r = walk(&m);
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.entries.len(), 3);
    assert_eq!(names(&r.entries[0]), ["newest"]);
    assert_eq!(names(&r.entries[2]), ["oldest"]);
    let damaged = r.entries[1].result.as_ref().unwrap();
    assert!(
        damaged
            .problems
            .iter()
            .any(|p| p.starts_with("DWARF .debug_info")),
        "{:?}",
        damaged.problems
    );
    let got: Vec<(&str, u64)> = damaged
        .functions
        .iter()
        .map(|f| (f.name.as_str(), f.start))
        .collect();
    assert_eq!(got, [("alpha", BASE), ("beta", BASE + 0x10)]);
}
