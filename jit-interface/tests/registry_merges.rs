//! Consolidation without a debugger: small ELF objects registered one by one are merged
//! into batch entries (in a process of its own: other tests decode every listed payload as
//! compact records).

use jit_interface::{Format, JitObject, Registration};

mod registry_support;

use registry_support::object;

/// The tests look at the whole list: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One-function ELF objects registered one by one get an entry each; every 32 entries are
/// merged into a batch and every 32 batches into a sealed one, each merge re-encoding its
/// objects: `merge_stats` accounts for all of it, and the list stays short.
#[test]
fn small_elf_objects_are_merged_twice_and_the_merges_are_counted() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

/// Sealed ELF batches keep their members' compact records rather than their models, and
/// are rewritten from them when a member leaves: after unregistering objects spread over
/// two sealed batches, the list names exactly the live functions; an object the compact
/// format cannot carry (a variable) kept its model, and its variable survives the
/// rewrites.
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
/// The list names exactly the live functions at every step checked, and stays short.
#[test]
fn tiering_without_a_debugger_keeps_the_list_exact_and_short() {
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
    // Below FAN_IN entries per unsealed level, and the sealed ones.
    assert!(
        added <= 72,
        "3,000 objects left {added} entries in the list"
    );
    drop(live);
    assert_eq!(jit_interface::descriptor::entry_count(), entries_before);
}
