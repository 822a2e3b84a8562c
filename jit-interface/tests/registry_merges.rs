//! Consolidation without a debugger: small ELF objects registered one by one grow ELF
//! payloads in place, or are merged into batch entries (in a process of its own: other
//! tests decode every listed payload as compact records).

use jit_interface::{Format, JitObject, Registration};

mod registry_support;

use registry_support::{expected, listed_elf, mixed, object, object_and_id, read_listed, Expected};

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

/// One-function objects of source files registered in turns (a runtime compiling the
/// functions of several scripts as they are called) fill growing payloads as those of one
/// file do: each file has a compile unit open, which its functions join (where one open
/// unit, closed at every change of file, left about 34 objects per payload and a unit per
/// function), and every function reads back with its own file and lines. Up to 16 files
/// keep a unit each; with more in turns, 16 of them keep theirs, and the functions of the
/// others get units of their own (where taking the unit of the file that joined least
/// recently gave every function a unit of its own).
#[test]
fn objects_of_several_files_in_turns_share_payloads() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // (Files, at most this many compile units for 3,000 functions.) Six files: about 9
    // units per file and payload (rooms for 1, 4, 16, then 64 functions). With 8 open
    // units, taking the least recently joined one, 16 or 24 files made about 3,000 (checked).
    for (files, max_units) in [(6, 250), (16, 400), (24, 1_600)] {
        files_in_turns(files, max_units);
    }
}

fn files_in_turns(files: u64, max_units: usize) {
    use jit_interface::descriptor::entry_count;
    let base = 0x6000_0000_0000u64 + (files << 36);
    let entries_before = entry_count();
    let file_of = |i: u64| format!("script{}.js", i % files);
    let objects: Vec<JitObject> = (0..3000u64)
        .map(|i| {
            let (mut o, f) = object_and_id(&format!("turns_{i:04}"), base + i * 64);
            let rows: Vec<jit_interface::LineRow> = (0..8)
                .map(|r| jit_interface::LineRow {
                    offset: r * 6,
                    line: 10 + r + i as u32 % 7,
                })
                .collect();
            o.set_lines(f, &file_of(i), &rows).unwrap();
            o
        })
        .collect();
    let regs: Vec<Registration> = objects
        .iter()
        .map(|o| jit_interface::register(o, Format::Elf).expect("register"))
        .collect();
    let entries = entry_count() - entries_before;
    assert!(
        entries <= 5,
        "3,000 objects of {files} files in turns made {entries} entries"
    );
    let want: Vec<Expected> = objects.iter().flat_map(expected).collect();
    assert_eq!(read_listed(&want), want);
    // And each function is in a unit of its own file.
    let mut unit_of = std::collections::BTreeMap::new();
    // Compile units holding these functions: each file's functions share units.
    let mut shared_units = 0;
    for bytes in listed_elf().1 {
        let file = object::File::parse(&bytes[..]).expect("an ELF entry");
        let dwarf = registry_support::dwarf_of(&file);
        let mut units = dwarf.units();
        while let Some(header) = units.next().unwrap() {
            let unit = dwarf.unit(header).unwrap();
            let name = |v| {
                let s = dwarf.attr_string(&unit, v).unwrap();
                String::from_utf8_lossy(s.slice()).into_owned()
            };
            let mut entries = unit.entries();
            let mut unit_file = String::new();
            let mut ours = false;
            while let Some(e) = entries.next_dfs().unwrap() {
                let Some(v) = e.attr_value(gimli::DW_AT_name) else {
                    continue;
                };
                if e.tag() == gimli::DW_TAG_compile_unit {
                    unit_file = name(v);
                } else if e.tag() == gimli::DW_TAG_subprogram {
                    let function = name(v);
                    ours |= function.starts_with("turns_");
                    unit_of.insert(function, unit_file.clone());
                }
            }
            shared_units += usize::from(ours);
        }
    }
    assert!(
        shared_units <= max_units,
        "3,000 functions of {files} files in turns are in {shared_units} compile units"
    );
    eprintln!("{files} files in turns: {entries} entries, {shared_units} compile units");
    for i in 0..3000 {
        assert_eq!(
            unit_of.get(&format!("turns_{i:04}")).map(String::as_str),
            Some(file_of(i).as_str()),
            "the file of turns_{i:04}"
        );
    }
    drop(regs);
    assert_eq!(entry_count(), entries_before);
}

/// Objects dropped here and there among 3,000 (code replaced long after it was compiled):
/// each payload that loses one is rebuilt, its objects' bytes copied into a new growing
/// payload. The list names exactly the live functions (read back with gimli: names, lines,
/// frames), as many entries as before the drops, all of the growing size.
#[test]
fn objects_dropped_here_and_there_leave_growing_payloads() {
    use jit_interface::descriptor::entry_count;
    use registry_support::for_each_payload;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x6200_0000_0000u64;
    let entries_before = entry_count();
    let objects: Vec<JitObject> = (0..3000u64)
        .map(|i| object(&format!("here_there_{i:04}"), base + i * 64))
        .collect();
    let mut regs: Vec<Option<Registration>> = objects
        .iter()
        .map(|o| Some(jit_interface::register(o, Format::Elf).expect("register")))
        .collect();
    let entries = entry_count() - entries_before;
    let mut sizes = Vec::new();
    for_each_payload(|b| sizes.push(b.len()));
    // Every 31st of the first 2,500 (in payloads that filled up), one at a time.
    for k in (17..2500).step_by(31) {
        drop(regs[k].take());
    }
    let want: Vec<Expected> = objects
        .iter()
        .zip(&regs)
        .filter(|(_, r)| r.is_some())
        .flat_map(|(o, _)| expected(o))
        .collect();
    assert_eq!(read_listed(&want), want);
    assert_eq!(
        entry_count() - entries_before,
        entries,
        "entries added or lost"
    );
    let mut after = Vec::new();
    for_each_payload(|b| after.push(b.len()));
    assert_eq!(
        after, sizes,
        "payload sizes changed (rewritten by the general encoder)"
    );
    drop(regs);
    assert_eq!(entry_count(), entries_before);
}

/// A payload that just filled up keeps its growing state: the objects registered just
/// before it filled up leave it by a rollback (it stays a payload of the growing size,
/// and the list names exactly the live functions), not by re-encoding it whole, which a
/// tiering runtime would otherwise pay at every payload that fills up.
#[test]
fn objects_registered_just_before_a_payload_filled_leave_it_by_rollback() {
    use jit_interface::descriptor::entry_count;
    use registry_support::for_each_payload;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x6100_0000_0000u64;
    let growing_sizes = || {
        let mut sizes = Vec::new();
        for_each_payload(|p| sizes.push(p.len()));
        sizes.iter().filter(|&&n| n == 256 * 1024).count()
    };
    let mut live: Vec<Option<(String, Registration)>> = Vec::new();
    let mut entries = entry_count();
    let mut filled = 0;
    for i in 0..4000usize {
        let name = format!("retired_elf_{i:04}");
        let reg = jit_interface::register(&object(&name, base + i as u64 * 64), Format::Elf)
            .expect("register");
        live.push(Some((name, reg)));
        if entry_count() == entries {
            continue;
        }
        entries = entry_count();
        if i == 0 {
            continue;
        }
        // Object `i` opened a new payload: the one before is full.
        filled += 1;
        let before = growing_sizes();
        drop(live[i - 1].take());
        drop(live[i - 4].take());
        assert_eq!(
            growing_sizes(),
            before,
            "a full payload that lost two of its newest objects is no longer a growing one"
        );
        let mut want: Vec<String> = live.iter().flatten().map(|(n, _)| n.clone()).collect();
        want.sort();
        let names: Vec<String> = listed_elf()
            .0
            .into_iter()
            .filter(|n| n.starts_with("retired_elf_"))
            .collect();
        assert_eq!(names, want, "after payload {filled} filled up");
        assert_eq!(entry_count(), entries, "the drops changed the entry count");
    }
    assert!(filled >= 3, "only {filled} payloads filled up");
}

/// Growing payloads keep no compact record for an object whose functions have lines in one
/// file: it is read back from the payload when the objects after it are appended again (a
/// recent one leaves) or the payload is rewritten (an old one leaves). A tiering runtime registering
/// objects of every shape (frame-pointer functions with epilogues, explicit unwind rows,
/// default frames, spread lines, two-function objects; objects without lines and objects
/// with functions in two files, which keep records) and unregistering as above: every live function keeps exactly its line
/// rows and its unwind rules at every row, as gimli reads them from the listed entries.
#[test]
fn read_back_objects_keep_their_lines_and_frames() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5c00_0000_0000u64;
    let make = |i: u64| mixed("read_back", base, i);
    let mut live: Vec<Option<(JitObject, Registration)>> = Vec::new();
    for i in 0..2600u64 {
        let obj = make(i);
        let reg = jit_interface::register(&obj, Format::Elf).expect("register");
        live.push(Some((obj, reg)));
        if i % 10 == 9 {
            drop(live[i as usize - 5].take());
        }
        if i % 200 == 199 {
            drop(live[(i / 3) as usize].take());
        }
        if i % 650 == 649 {
            let want: Vec<Expected> = live
                .iter()
                .flatten()
                .flat_map(|(o, _)| expected(o))
                .collect();
            assert_eq!(read_listed(&want), want, "after {} registrations", i + 1);
        }
    }
}

/// A code cache flushed at once (`unregister_many`): the oldest half of the objects (whole
/// entries), every third of the rest and the newest few (the growing payload) leave in one
/// call. Each entry holding some of them is rewritten once or unlinked (two hook calls at
/// most per entry, where dropping them one by one makes two per object), and the list then
/// holds exactly the live functions, with their lines and frames. Registering and
/// unregistering go on as before afterwards.
#[test]
fn many_objects_leave_in_one_call_each_entry_rewritten_once() {
    use jit_interface::descriptor::{entry_count, notifications};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5d00_0000_0000u64;
    let entries_before = entry_count();
    let mut live: Vec<Option<(JitObject, Registration)>> = (0..5000u64)
        .map(|i| {
            let obj = mixed("flushed", base, i);
            let reg = jit_interface::register(&obj, Format::Elf).expect("register");
            Some((obj, reg))
        })
        .collect();
    let entries = entry_count() - entries_before;
    assert!(entries >= 3, "5,000 objects in {entries} entries");
    let mut gone = Vec::new();
    for (i, slot) in live.iter_mut().enumerate() {
        if i < 2500 || i % 3 == 0 || i >= 4990 {
            gone.push(slot.take().expect("live").1);
        }
    }
    let left = live.iter().flatten().count();
    let hooks = notifications().0;
    jit_interface::unregister_many(gone);
    let hooks = notifications().0 - hooks;
    assert!(
        hooks <= 2 * entries as u64,
        "{hooks} hook calls to take objects out of {entries} entries"
    );
    let want: Vec<Expected> = live
        .iter()
        .flatten()
        .flat_map(|(o, _)| expected(o))
        .collect();
    assert_eq!(read_listed(&want), want);
    let (names, _) = listed_elf();
    let listed = names.iter().filter(|n| n.starts_with("flushed_")).count();
    assert_eq!(listed, want.len(), "{left} objects live");

    // Nothing to do, and one object: as dropping it.
    jit_interface::unregister_many(Vec::new());
    let last = live.iter_mut().rev().find_map(Option::take).expect("live");
    jit_interface::unregister_many([last.1]);
    let want: Vec<Expected> = live
        .iter()
        .flatten()
        .flat_map(|(o, _)| expected(o))
        .collect();
    let more: Vec<(JitObject, Registration)> = (5000..5100u64)
        .map(|i| {
            let obj = mixed("flushed", base, i);
            let reg = jit_interface::register(&obj, Format::Elf).expect("register");
            (obj, reg)
        })
        .collect();
    let want: Vec<Expected> = want
        .into_iter()
        .chain(more.iter().flat_map(|(o, _)| expected(o)))
        .collect();
    assert_eq!(read_listed(&want), want);
    let (names, _) = listed_elf();
    let listed = names.iter().filter(|n| n.starts_with("flushed_")).count();
    assert_eq!(listed, want.len());
    jit_interface::unregister_many(live.into_iter().flatten().chain(more).map(|(_, r)| r));
    assert_eq!(entry_count(), entries_before, "entries left after all left");
}

/// A runtime dropping its code oldest first, one object at a time (a `Vec` of registrations
/// dropped at shutdown): each drop takes the first member out of a full ELF batch, which
/// is then split (its first 64 members apart from the rest) rather than re-encoded whole
/// each time. The payload bytes announced per drop (each rewrite announces its new entry)
/// stay a small part of a full batch, the list holds exactly the live functions (with
/// their lines and frames) at every point looked at, and few entries more than before.
/// Newest first (`pop`) likewise.
#[test]
fn objects_dropped_in_order_leave_small_entries_to_rewrite() {
    use jit_interface::descriptor::{entry_count, notifications};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5e00_0000_0000u64;
    let entries_before = entry_count();
    let register = |i: u64| {
        let obj = registry_support::object(&format!("drained_{i:05}"), base + i * 64);
        let reg = jit_interface::register(&obj, Format::Elf).expect("register");
        (obj, reg)
    };
    let mut live: std::collections::VecDeque<(JitObject, Registration)> =
        (0..4000u64).map(register).collect();
    let full = entry_count() - entries_before;
    let check = |live: &std::collections::VecDeque<(JitObject, Registration)>| {
        let want: Vec<Expected> = live.iter().flat_map(|(o, _)| expected(o)).collect();
        assert_eq!(read_listed(&want), want, "{} live", live.len());
        let (names, _) = listed_elf();
        let listed = names.iter().filter(|n| n.starts_with("drained_")).count();
        assert_eq!(listed, live.len());
        let entries = entry_count() - entries_before;
        assert!(
            entries <= full + 2,
            "{entries} entries for {} objects (at first {full} for 4,000)",
            live.len()
        );
    };
    for (drops, oldest) in [(1500, true), (2000, false)] {
        // Payload bytes announced by each drop: what it made the registry write again.
        let mut announced = Vec::with_capacity(drops);
        for k in 0..drops {
            let before = notifications().1;
            drop(if oldest {
                live.pop_front()
            } else {
                live.pop_back()
            });
            announced.push(notifications().1 - before);
            if k == 0 || k == drops / 2 {
                check(&live);
            }
        }
        // A rewritten full batch (about 1,000 objects of about 80 bytes) is about 80 KiB,
        // half full 40 KiB; a peeled entry of 64 objects at most about 5 KiB. The growing
        // payload and the one that filled up last, which the newest objects leave first,
        // are rolled back: announced whole (256 KiB), however little of them was copied
        // (about 1,800 drops at most); the median is taken over the other drops.
        let rollbacks = announced.iter().filter(|&&b| b == 256 * 1024).count();
        announced.retain(|&b| b != 256 * 1024);
        assert!(
            announced.len() >= drops / 10,
            "{rollbacks} of {drops} drops were rollbacks"
        );
        announced.sort_unstable();
        let median = announced[announced.len() / 2];
        assert!(
            median <= 8 * 1024,
            "{} first: {median} bytes announced by the median drop",
            if oldest { "oldest" } else { "newest" }
        );
        check(&live);
    }
    drop(live);
    assert_eq!(entry_count(), entries_before);
}

/// Drops aimed at the ends of entries, again and again (the oldest object of every large
/// entry, round after round): each such drop splits an end off, but no more than 32 split
/// ends are linked at once, so the list stays short whatever the pattern, and it holds
/// exactly the live functions.
#[test]
fn drops_aimed_at_entry_ends_leave_a_bounded_number_of_entries() {
    use jit_interface::descriptor::entry_count;
    use object::{Object, ObjectSymbol};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5f00_0000_0000u64;
    let entries_before = entry_count();
    let mut live: std::collections::BTreeMap<String, Registration> = (0..8000u64)
        .map(|i| {
            let name = format!("aimed_{i:05}");
            let obj = registry_support::object(&name, base + i * 64);
            (
                name,
                jit_interface::register(&obj, Format::Elf).expect("register"),
            )
        })
        .collect();
    let full = entry_count() - entries_before;
    let mut most = full;
    for _round in 0..8 {
        // The oldest (lowest) function of every entry of 128 functions or more.
        let mut oldest = Vec::new();
        registry_support::for_each_payload(|bytes| {
            let file = object::File::parse(bytes).expect("an ELF entry");
            let names: Vec<String> = file
                .symbols()
                .filter(|s| s.kind() == object::SymbolKind::Text)
                .map(|s| s.name().expect("name").to_string())
                .filter(|n| n.starts_with("aimed_"))
                .collect();
            if names.len() >= 128 {
                oldest.extend(names.into_iter().min());
            }
        });
        for name in oldest {
            drop(live.remove(&name));
            most = most.max(entry_count() - entries_before);
        }
    }
    assert!(
        most <= full + 32,
        "{most} entries at most, {full} before the drops"
    );
    let (names, _) = listed_elf();
    let listed: Vec<&String> = names.iter().filter(|n| n.starts_with("aimed_")).collect();
    assert_eq!(listed, live.keys().collect::<Vec<_>>());
    drop(live);
    assert_eq!(entry_count(), entries_before);
}

/// Registrations and drops of every kind, mixed (new objects, the oldest or the newest
/// dropped, one at random, many in one call), over objects of every shape: the rollbacks,
/// peeled ends, whole rewrites and one-call rewrites they make leave the list holding
/// exactly the live functions, with their lines and frames, at every point looked at, and
/// few entries.
#[test]
fn mixed_registrations_and_drops_keep_the_list_exact() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    registry_support::mixed_workload(
        "mixed",
        0x6000_0000_0000,
        0x6100_0000_0000,
        Format::Elf,
        |live| registry_support::check_elf("mixed", live),
    );
}
