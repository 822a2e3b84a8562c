//! Consolidation without a debugger: small ELF objects registered one by one grow ELF
//! payloads in place, or are merged into batch entries (in a process of its own: other
//! tests decode every listed payload as compact records).

use jit_interface::{Format, JitObject, Registration};

mod registry_support;

use registry_support::object;

/// The tests look at the whole list: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Without a debugger, one-function ELF objects registered one by one are appended in
/// place to growing ELF payloads: nothing is merged (each object is encoded once), the list
/// gains an entry per payload (about 1,000 objects of this shape), and every function is in
/// it at once. Objects with variables (which a compact record cannot carry, so a growing
/// payload cannot rewrite them) get entries of their own, merged 32 at a time, each merge
/// counted by `merge_stats`.
#[test]
fn small_elf_objects_grow_in_place_and_merges_are_counted() {
    use jit_interface::{BaseType, Location, Variable, VariableKind};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5900_0000_0000u64;
    let before = jit_interface::merge_stats();
    let entries_before = jit_interface::descriptor::entry_count();
    let mut regs = Vec::new();
    for i in 0..2048u64 {
        let obj = object(&format!("grown_elf_{i:04}"), base + i * 64);
        regs.push(jit_interface::register(&obj, Format::Elf).expect("register"));
        if i == 0 || i == 2047 {
            let (names, _) = listed_elf();
            let name = format!("grown_elf_{i:04}");
            assert!(
                names.contains(&name),
                "{name} is not listed once registered"
            );
        }
    }
    let after = jit_interface::merge_stats();
    assert_eq!(after, before, "appending in place merged something");
    let added = jit_interface::descriptor::entry_count() - entries_before;
    assert!(
        (2..=4).contains(&added),
        "2,048 objects left {added} entries in the list"
    );
    let (names, _) = listed_elf();
    assert_eq!(
        names.iter().filter(|n| n.starts_with("grown_elf_")).count(),
        2048
    );

    // Objects with a variable: entries of their own, merged.
    let base = 0x5980_0000_0000u64;
    for i in 0..64u64 {
        let mut obj = JitObject::new();
        let f = obj
            .add_function(&format!("variable_elf_{i:04}"), base + i * 64, 64)
            .expect("function");
        obj.set_frame_pointer(f, 1, 4).expect("frame");
        let var = Variable {
            name: "v".into(),
            kind: VariableKind::Local,
            ty: BaseType::I64,
            location: Location::FrameOffset(-8),
        };
        obj.add_variable(f, var).expect("variable");
        regs.push(jit_interface::register(&obj, Format::Elf).expect("register"));
    }
    let merged = jit_interface::merge_stats();
    assert!(merged.merges - after.merges >= 2, "{after:?} -> {merged:?}");
    assert!(
        merged.objects - after.objects >= 64,
        "{after:?} -> {merged:?}"
    );
    assert!(merged.time > after.time, "{after:?} -> {merged:?}");
    drop(regs);
    assert_eq!(
        jit_interface::descriptor::entry_count(),
        entries_before,
        "entries left after unregistering everything"
    );
}

/// Every function symbol of every ELF entry in the list, and the entries' bytes.
fn listed_elf() -> (Vec<String>, Vec<Vec<u8>>) {
    use object::{Object, ObjectSymbol};
    let mut names = Vec::new();
    let mut payloads = Vec::new();
    registry_support::for_each_payload(|bytes| {
        let file = object::File::parse(bytes).expect("a listed ELF entry parses");
        for sym in file.symbols() {
            if sym.kind() == object::SymbolKind::Text {
                names.push(sym.name().expect("symbol name").to_string());
            }
        }
        payloads.push(bytes.to_vec());
    });
    names.sort();
    (names, payloads)
}

/// Growing ELF batches keep their members' compact records rather than their models, and
/// are rewritten from them when a member leaves: after unregistering objects spread over
/// three batches, the list names exactly the live functions; an object the compact format
/// cannot carry (a variable) kept its model, and its variable survives. Objects registered
/// afterwards are listed too (a rewritten batch grows no more: they start a new one).
#[test]
fn sealed_elf_batches_are_rewritten_from_their_records() {
    use jit_interface::{BaseType, Location, Variable, VariableKind};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5a00_0000_0000u64;
    let mut live: Vec<Option<(String, Registration)>> = (0..2048u64)
        .map(|i| {
            let name = format!("sealed_elf_{i:04}");
            let mut obj = object(&name, base + i * 64);
            if i == 77 {
                obj = JitObject::new();
                let f = obj
                    .add_function(&name, base + i * 64, 64)
                    .expect("function");
                obj.set_frame_pointer(f, 1, 4).expect("frame");
                obj.add_variable(
                    f,
                    Variable {
                        name: "kept_model_variable".into(),
                        kind: VariableKind::Local,
                        ty: BaseType::I64,
                        location: Location::FrameOffset(-8),
                    },
                )
                .expect("variable");
            }
            let reg = jit_interface::register(&obj, Format::Elf).expect("register");
            Some((name, reg))
        })
        .collect();
    let (names, _) = listed_elf();
    assert_eq!(names.len(), 2048);
    // Every 50th object leaves (each removal rewrites its sealed batch), object 77 stays.
    for (i, slot) in live.iter_mut().enumerate() {
        if i % 50 == 0 {
            drop(slot.take());
        }
    }
    for i in 2048..2100u64 {
        let name = format!("sealed_elf_{i:04}");
        let obj = object(&name, base + i * 64);
        let reg = jit_interface::register(&obj, Format::Elf).expect("register");
        live.push(Some((name, reg)));
    }
    let mut want: Vec<String> = live.iter().flatten().map(|(n, _)| n.clone()).collect();
    want.sort();
    let (names, payloads) = listed_elf();
    assert_eq!(
        names, want,
        "the list after unregistering every 50th object"
    );
    let needle = b"kept_model_variable";
    assert!(
        payloads
            .iter()
            .any(|p| p.windows(needle.len()).any(|w| w == needle)),
        "the variable of the object that kept its model is gone"
    );
}

/// A tiering runtime without a debugger: after every 10th registration it unregisters the
/// object registered 5 before (replaced by optimised code), and now and then an old one.
/// The list names exactly the live functions at every step checked, and stays a few
/// entries long: a growing payload that loses an object is rebuilt and keeps growing.
#[test]
fn growing_payloads_lose_recent_objects_and_keep_growing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5b00_0000_0000u64;
    let entries_before = jit_interface::descriptor::entry_count();
    let mut live: Vec<Option<(String, Registration)>> = Vec::new();
    for i in 0..3000u64 {
        let name = format!("tiered_elf_{i:04}");
        let obj = object(&name, base + i * 64);
        let reg = jit_interface::register(&obj, Format::Elf).expect("register");
        live.push(Some((name, reg)));
        if i % 10 == 9 {
            drop(live[i as usize - 5].take());
        }
        if i % 250 == 249 {
            // An old one too (a full payload, rewritten the general way).
            drop(live[(i / 3) as usize].take());
            let mut want: Vec<String> = live.iter().flatten().map(|(n, _)| n.clone()).collect();
            want.sort();
            let (names, _) = listed_elf();
            let names: Vec<String> = names
                .into_iter()
                .filter(|n| n.starts_with("tiered_elf_"))
                .collect();
            assert_eq!(names, want, "after {} registrations", i + 1);
        }
    }
    let added = jit_interface::descriptor::entry_count() - entries_before;
    assert!(added <= 6, "3,000 objects left {added} entries in the list");
    drop(live);
    assert_eq!(jit_interface::descriptor::entry_count(), entries_before);
}
