use std::cell::{Cell, RefCell};

use gimli::UnwindSection;
use object::{Object, ObjectSection, ObjectSymbol};

use super::{Growing, PAYLOAD};
use crate::elf::test_support::{by_address, random_objects, sequences, Parsed};
use crate::model::{Frame, JitObject, LineRow};

thread_local! {
    /// Appends take the general path only (see `general_only`).
    pub(super) static GENERAL_ONLY: Cell<bool> = const { Cell::new(false) };
    /// When `Some`, the payload at every `publish` point.
    pub(super) static SNAPSHOTS: RefCell<Option<Vec<Vec<u8>>>> = const { RefCell::new(None) };
}

/// Every function symbol: name, absolute address, size.
fn symbols(bytes: &[u8]) -> Vec<(String, u64, u64)> {
    let file = object::File::parse(bytes).expect("a valid ELF file");
    let mut out = Vec::new();
    for s in file.symbols() {
        let index = s.section_index().expect("a defined symbol");
        let section = file.section_by_index(index).expect("its section");
        let (start, end) = (section.address(), section.address() + section.size());
        let address = start + s.address();
        assert!(
            address >= start && address + s.size() <= end,
            "{:?} outside its section",
            s.name()
        );
        out.push((s.name().expect("a name").to_string(), address, s.size()));
    }
    out
}

/// Every section: name, address, size and contents.
fn sections(bytes: &[u8]) -> Vec<(String, u64, u64, Vec<u8>)> {
    let file = object::File::parse(bytes).expect("a valid ELF file");
    let mut out = Vec::new();
    for s in file.sections() {
        let name = s.name().expect("a name").to_string();
        let data = match name.as_str() {
            ".debug_line" => Vec::new(),
            _ => s.data().expect("section data").to_vec(),
        };
        out.push((name, s.address(), s.size(), data));
    }
    out
}

fn frame(p: &Parsed) -> Vec<u8> {
    p.section(".debug_frame").to_vec()
}

/// A one-function object joining its file's open unit is appended from its line
/// sequence alone (not the unit encoding it alone makes): byte for byte what the
/// general path appends.
#[test]
fn joining_an_open_unit_writes_what_the_general_path_writes() {
    let mut joined = 0;
    for seed in 0..200u64 {
        let (mut fast, mut fast_state) = Growing::new(None).unwrap();
        let (mut general, mut general_state) = Growing::new(None).unwrap();
        let objects: Vec<JitObject> = (random_objects(seed).into_iter())
            .chain((0..40).map(|i| small(i, 0x7000_0000 + seed * 0x10_0000 + i * 64)))
            .collect();
        for object in &objects {
            let open = fast_state.open;
            let got = fast_state.append(&mut fast, object);
            GENERAL_ONLY.with(|g| g.set(true));
            let want = general_state.append(&mut general, object);
            GENERAL_ONLY.with(|g| g.set(false));
            assert_eq!(got, want, "seed {seed}");
            assert!(fast == general, "seed {seed}: the payloads differ");
            joined += usize::from(
                got.is_ok_and(|b| b.is_some())
                    && open.iter().any(Option::is_some)
                    && object.functions().len() == 1,
            );
        }
    }
    assert!(joined > 5000, "{joined} objects joined an open unit");
}

/// Objects appended one by one read, with real parsers, as each of them encoded alone:
/// the same symbols, units, line rows, subprograms and FDEs, in order. Objects the
/// payload refuses (call sites, code overlapping its code, no room) leave it unchanged.
#[test]
fn appended_objects_read_as_each_encoded_alone() {
    let mut appended_total = 0;
    let mut refused_total = 0;
    for seed in 0..400u64 {
        // Half of them in a reused payload full of other bytes.
        let spare = (seed % 2 == 1).then(|| vec![0xa5u8; PAYLOAD]);
        let (mut buf, mut growing) = Growing::new(spare).unwrap();
        let (mut syms, mut lines, mut subs) = (Vec::new(), Vec::new(), Vec::new());
        let mut frames = frame(&Parsed { bytes: buf.clone() });
        assert_eq!(
            frames.len(),
            crate::elf::cfi::CIE_LEN,
            "seed {seed}: the CIE alone"
        );
        for object in random_objects(seed) {
            let before = buf.clone();
            let Ok(alone) = crate::elf::encode(&object) else {
                // Refused alone: refused appended, with the same error.
                assert_eq!(
                    growing.append(&mut buf, &object),
                    crate::elf::encode(&object).map(|_| None)
                );
                assert_eq!(buf, before);
                continue;
            };
            match growing.append(&mut buf, &object).unwrap() {
                None => {
                    refused_total += 1;
                    assert_eq!(
                        buf, before,
                        "seed {seed}: a refused append changed the payload"
                    );
                    continue;
                }
                Some(bytes) => assert!(bytes > 0),
            }
            appended_total += 1;
            let alone = Parsed { bytes: alone };
            syms.extend(symbols(&alone.bytes));
            lines.extend(alone.lines());
            subs.extend(alone.subprograms());
            frames.extend_from_slice(&frame(&alone)[crate::elf::cfi::CIE_LEN..]);
            let ours = Parsed { bytes: buf.clone() };
            assert_eq!(symbols(&ours.bytes), syms, "seed {seed}");
            // Functions join their file's open unit, not always the last one.
            assert_eq!(sequences(&ours.lines()), sequences(&lines), "seed {seed}");
            assert_eq!(
                by_address(&ours.subprograms()),
                by_address(&subs),
                "seed {seed}"
            );
            assert_eq!(frame(&ours), frames, "seed {seed}");
        }
    }
    assert!(
        appended_total > 300 && refused_total > 10,
        "{appended_total} appended, {refused_total} refused"
    );
}

/// Rolling a payload back to before object `k` and appending the objects after it
/// again makes, byte for byte, the payload of every object but `k` appended in order;
/// runs that later objects extended shrink back, runs they made go.
#[test]
fn rolling_back_is_appending_all_but_one() {
    let mut checked = 0;
    for seed in 0..300u64 {
        let mut objects: Vec<JitObject> = random_objects(seed);
        if seed % 3 == 0 {
            // Adjacent one-function objects: every run extended.
            objects = (0..20).map(|i| small(i, 0x20_0000 + i * 64)).collect();
        }
        let (buf, growing, appended) = grown(&objects);
        if appended.is_empty() {
            continue;
        }
        let k = (seed as usize * 7) % appended.len();
        let spare = (seed % 2 == 0).then(|| vec![0u8; PAYLOAD]);
        // Twice: the second rollback reuses the first's buffer (the mirror).
        let mut state = growing;
        let mut rolled = state.roll_back(&buf, appended.len() - 1, spare).unwrap();
        state.keep_mirror(buf);
        state
            .append(&mut rolled, appended[appended.len() - 1])
            .unwrap()
            .unwrap();
        let buf = rolled;
        let mut rolled = state.roll_back(&buf, k, None).unwrap();
        state.keep_mirror(buf);
        for o in &appended[k + 1..] {
            state.append(&mut rolled, o).unwrap().unwrap();
        }
        let (mut direct, mut direct_state) = Growing::new(None).unwrap();
        for (i, o) in appended.iter().enumerate() {
            if i != k {
                direct_state.append(&mut direct, o).unwrap().unwrap();
            }
        }
        // (Bytes beyond what the sections hold may differ: a reused buffer keeps them;
        // `.debug_line` covers its whole region, read through the units.)
        let what = format!("seed {seed}, object {k} of {}", appended.len());
        assert!(
            sections(&rolled) == sections(&direct),
            "{what}: sections differ"
        );
        let (ours, theirs) = (Parsed { bytes: rolled }, Parsed { bytes: direct });
        assert!(ours.lines() == theirs.lines(), "{what}: lines differ");
        assert_eq!(state.objects(), appended.len() - 1);
        assert_eq!(state.functions(), direct_state.functions());
        checked += 1;
    }
    assert!(checked > 150, "{checked}");
}

/// Every compile unit claims exactly the code of its functions (`DW_AT_ranges` of an
/// open unit grow as functions join it): a debugger must not find, in one unit, the
/// addresses of code between its functions that other entries hold. Objects of the
/// benchmark shape, adjacent, apart and out of address order, of two files in turns and
/// then of one, with a rollback in between.
#[test]
fn units_claim_exactly_the_code_of_their_functions() {
    let object = |i: u64, file: &str| {
        // Scattered: every third slot of a region, in an order of their own.
        let slot = (i * 37) % 400;
        small_in(i, 0x50_0000 + slot * 192, file)
    };
    let (mut buf, mut state) = Growing::new(None).unwrap();
    let mut n = 0;
    for i in 0..300u64 {
        let file = if i < 150 && i % 3 == 0 {
            "b.js"
        } else {
            "a.js"
        };
        if matches!(state.append(&mut buf, &object(i, file)), Ok(Some(_))) {
            n += 1;
        }
    }
    assert!(n > 50, "{n} objects appended");
    let k = n - 5;
    let mut rolled = state.roll_back(&buf, k, None).unwrap();
    state.keep_mirror(buf);
    state.append(&mut rolled, &object(1000, "a.js")).unwrap();
    let parsed = Parsed { bytes: rolled };
    let dwarf = parsed.dwarf();
    let mut units = dwarf.units();
    let mut checked = 0;
    while let Some(header) = units.next().unwrap() {
        let unit = dwarf.unit(header).unwrap();
        let mut claimed: Vec<(u64, u64)> = Vec::new();
        let mut ranges = dwarf.unit_ranges(&unit).unwrap();
        while let Some(r) = ranges.next().unwrap() {
            claimed.push((r.begin, r.end));
        }
        let mut functions: Vec<(u64, u64)> = Vec::new();
        let mut entries = unit.entries();
        while let Some(e) = entries.next_dfs().unwrap() {
            if e.tag() == gimli::DW_TAG_subprogram {
                let mut ranges = dwarf.die_ranges(&unit, e).unwrap();
                while let Some(r) = ranges.next().unwrap() {
                    functions.push((r.begin, r.end));
                }
            }
        }
        claimed.sort_unstable();
        functions.sort_unstable();
        // Neighbours may share one range; what is claimed is what the functions cover.
        let merge = |v: Vec<(u64, u64)>| {
            let mut out: Vec<(u64, u64)> = Vec::new();
            for (b, e) in v {
                match out.last_mut() {
                    Some(last) if last.1 >= b => last.1 = last.1.max(e),
                    _ => out.push((b, e)),
                }
            }
            out
        };
        assert_eq!(
            merge(claimed),
            merge(functions),
            "unit at {:?}",
            unit.header.offset()
        );
        checked += 1;
    }
    assert!(checked > 3, "{checked} units");
}

/// Rollbacks one after another, each reusing the payload the one before replaced (the
/// mirror), between appends of objects of 2 to 11 source files in turns (so a unit open
/// at one rollback may be closed at the next, or closed to make room for another file's):
/// the payload is, section by section and line
/// by line, the payload of the objects left appended in order. (A mirror once kept the
/// line program length of the unit open at its rollback from before it, which the next
/// rollback did not copy again: a unit claiming sequences that another unit's header
/// had replaced.)
#[test]
fn rollbacks_in_a_row_keep_every_unit_whole() {
    for seed in 0..200u64 {
        let mut r = crate::elf::test_support::Rng::new(seed);
        let run = 1 + r.below(4);
        // Two files or a few in turns; more than there are open units (some get units
        // of their own); or 2 at a time of 40, the two changing every 8 objects (units
        // left idle are closed for other files').
        let (files, drift) =
            [(2, false), (3, false), (6, false), (19, false), (40, true)][seed as usize % 5];
        let names: Vec<String> = (0..files).map(|f| format!("f{f}.js")).collect();
        let object = |i: u64| {
            let f = match drift {
                false => (i / run) % files,
                true => ((i / run) % 2 + i / 8) % files,
            };
            small_in(i, 0x40_0000 + i * 64, &names[f as usize])
        };
        let (mut buf, mut state) = Growing::new(None).unwrap();
        let mut live: Vec<u64> = Vec::new();
        let mut next = 0;
        'rounds: for _round in 0..if drift { 80 } else { 40 } {
            for _ in 0..1 + r.below(6) {
                if !matches!(state.append(&mut buf, &object(next)), Ok(Some(_))) {
                    break 'rounds;
                }
                live.push(next);
                next += 1;
            }
            let k = live.len() - 1 - r.below(live.len().min(4) as u64) as usize;
            let mut rolled = state.roll_back(&buf, k, None).unwrap();
            state.keep_mirror(buf);
            live.remove(k);
            for &i in &live[k..] {
                state.append(&mut rolled, &object(i)).unwrap().unwrap();
            }
            buf = rolled;
        }
        let (mut direct, mut direct_state) = Growing::new(None).unwrap();
        for &i in &live {
            direct_state
                .append(&mut direct, &object(i))
                .unwrap()
                .unwrap();
        }
        let what = format!("seed {seed}: {live:?}");
        assert!(
            sections(&buf) == sections(&direct),
            "{what}: sections differ"
        );
        let (ours, theirs) = (Parsed { bytes: buf }, Parsed { bytes: direct });
        assert!(ours.lines() == theirs.lines(), "{what}: lines differ");
    }
}

/// Objects for the copy tests: random ones of every kind, `small` one-function objects
/// of 9 files in turns (in runs that depend on the seed), and `multi` objects of
/// several functions.
fn copy_mix(seed: u64, small: u64, multi: u64) -> Vec<JitObject> {
    let files = [
        "a.js", "b.js", "c.js", "d.js", "e.js", "f.js", "g.js", "h.js", "i.js",
    ];
    (random_objects(seed).into_iter())
        .chain((0..small).map(|i| {
            let file = files[((seed + i * (seed % 4)) % files.len() as u64) as usize];
            small_in(i, 0x6000_0000 + seed * 0x10_0000 + i * 80, file)
        }))
        .chain(
            (0..multi).map(|i| several(seed * 12 + i, 0x6800_0000 + seed * 0x10_0000 + i * 0x4000)),
        )
        .collect()
}

/// A new payload with `objects` appended in order, its state, and the objects it took
/// (it refuses some: call sites, overlapping code, no room).
fn grown(objects: &[JitObject]) -> (Vec<u8>, Growing, Vec<&JitObject>) {
    let (mut buf, mut growing) = Growing::new(None).unwrap();
    let mut appended = Vec::new();
    for o in objects {
        if let Ok(Some(_)) = growing.append(&mut buf, o) {
            appended.push(o);
        }
    }
    (buf, growing, appended)
}

/// Plain objects appended again by copying their bytes from the payload
/// ([`Growing::append_copy`], what a rollback does) make, byte for byte, the payload
/// appending their models makes; from a cut or foreign payload nothing is appended, and
/// nothing panics.
#[test]
fn plain_objects_copied_append_the_same_bytes() {
    let mut copied = 0;
    for seed in 0..300u64 {
        let objects = copy_mix(seed, 40, 6);
        let (buf, growing, appended) = grown(&objects);
        // Everything rolled back, then appended again (as `State::regrow` does).
        let plains: Vec<_> = (0..appended.len())
            .map(|k| growing.index().plain(k))
            .collect();
        let mut again_state = growing;
        let mut again = again_state.roll_back(&buf, 0, None).unwrap();
        for (k, &o) in appended.iter().enumerate() {
            let got = match plains[k] {
                Some(p) => {
                    copied += usize::from(o.functions().len() == 1);
                    // A cut payload, or another one, gives nothing to copy.
                    let before = again.clone();
                    for cut in [0, 64, buf.len() / 3] {
                        let r = again_state.append_copy(&mut again, &buf[..cut], p);
                        assert!(
                            matches!(r, Ok(None)),
                            "seed {seed}: object {k} from a cut payload"
                        );
                    }
                    let other = Growing::new(None).unwrap().0;
                    assert!(matches!(
                        again_state.append_copy(&mut again, &other, p),
                        Ok(None)
                    ));
                    assert!(
                        again == before,
                        "seed {seed}: a refused copy changed the payload"
                    );
                    again_state.append_copy(&mut again, &buf, p)
                }
                None => again_state.append(&mut again, o),
            };
            assert!(
                matches!(got, Ok(Some(_))),
                "seed {seed}: object {k}: {got:?}"
            );
        }
        assert!(again == buf, "seed {seed}: the payloads differ");
    }
    assert!(copied > 5000, "{copied} one-function objects copied");
}

/// A payload rebuilt without some of its objects by copying the others' bytes into a
/// new payload (`append_copy_of` from another state's payload and index, what
/// `State::recopy` does) is, byte for byte, the payload that appending the same objects
/// to a new payload makes.
#[test]
fn payloads_rebuilt_by_copies_are_the_payloads_appending_makes() {
    let mut copied = 0;
    for seed in 0..200u64 {
        let mut r = crate::elf::test_support::Rng::new(seed);
        let objects = copy_mix(seed, 60, 4);
        let (buf, growing, appended) = grown(&objects);
        let index = growing.index();
        let keep: Vec<usize> = (0..appended.len()).filter(|_| r.below(5) != 0).collect();
        let (mut rebuilt, mut rebuilt_state) = Growing::new(None).unwrap();
        let (mut direct, mut direct_state) = Growing::new(None).unwrap();
        for &k in &keep {
            let o = appended[k];
            let got = match index.plain(k) {
                Some(p) => {
                    copied += usize::from(o.functions().len() == 1);
                    rebuilt_state.append_copy_of(&mut rebuilt, &buf, Some(index), p)
                }
                None => rebuilt_state.append(&mut rebuilt, o),
            };
            assert!(
                matches!(got, Ok(Some(_))),
                "seed {seed}: object {k}: {got:?}"
            );
            let want = direct_state.append(&mut direct, o);
            assert!(
                matches!(want, Ok(Some(_))),
                "seed {seed}: object {k}: {want:?}"
            );
            assert_eq!(
                rebuilt_state.index().is_plain(rebuilt_state.objects() - 1),
                direct_state.index().is_plain(direct_state.objects() - 1),
                "seed {seed}: object {k}"
            );
        }
        assert!(rebuilt == direct, "seed {seed}: the payloads differ");
    }
    assert!(copied > 5000, "{copied} one-function objects copied");
}

/// Plain objects read back from the payload are what was appended: the same name,
/// range, file and lines, and appending them instead of the originals writes the same
/// payload byte for byte, as re-encoding them in one ELF object (a rewrite) writes
/// the same object. Cut payloads read back as nothing, without a panic.
#[test]
fn plain_objects_read_back_append_the_same_bytes() {
    let (mut plain, mut described, mut of_several) = (0, 0, 0);
    for seed in 0..300u64 {
        let objects: Vec<JitObject> = (random_objects(seed).into_iter())
            .chain((0..30).map(|i| small(i, 0x6000_0000 + seed * 0x10_0000 + i * 80)))
            .chain(
                (0..12)
                    .map(|i| several(seed * 12 + i, 0x6800_0000 + seed * 0x10_0000 + i * 0x4000)),
            )
            .collect();
        let (buf, growing, appended) = grown(&objects);
        let index = growing.index();
        let (mut again, mut again_state) = Growing::new(None).unwrap();
        let mut models = Vec::new();
        for (k, &o) in appended.iter().enumerate() {
            let f = o.functions().first().unwrap();
            let lines = o.functions().iter().all(|g| {
                !g.lines().is_empty()
                    && g.blocks().is_empty()
                    && g.variables().is_empty()
                    && g.calls().is_empty()
                    && g.file() == f.file()
            });
            assert!(
                index.is_plain(k) || !lines,
                "seed {seed}: object {k} is not plain"
            );
            let model = if index.is_plain(k) {
                plain += 1;
                let back = index.object(&buf, k).expect("read back");
                let what = format!("seed {seed}, object {k}");
                assert_eq!(back.functions().len(), o.functions().len(), "{what}");
                // (Read back in address order.)
                let mut theirs: Vec<_> = o.functions().iter().collect();
                theirs.sort_by_key(|f| f.start());
                for (g, f) in back.functions().iter().zip(theirs) {
                    assert_eq!(
                        (g.name(), g.start(), g.size(), g.file()),
                        (f.name(), f.start(), f.size(), f.file()),
                        "{what}"
                    );
                    assert_eq!(g.lines(), f.lines(), "{what}");
                    // Frame-pointer and default frames come back as such (rows as the
                    // rows that change something, or as what gives exactly those).
                    if !matches!(f.frame(), Frame::Rows(_)) {
                        assert_eq!(g.frame(), f.frame(), "{what}");
                        described += 1;
                    }
                    of_several += usize::from(o.functions().len() > 1);
                }
                for cut in [0, 64, buf.len() / 3, buf.len() / 2] {
                    let _ = index.object(&buf[..cut], k);
                }
                models.push(back);
                models.last().unwrap()
            } else {
                assert!(index.object(&buf, k).is_none());
                o
            };
            again_state.append(&mut again, model).unwrap().unwrap();
        }
        assert!(again == buf, "seed {seed}: the payloads differ");
        let mut models = models.iter();
        let back: Vec<&JitObject> = (appended.iter().enumerate())
            .map(|(k, &o)| match index.is_plain(k) {
                true => models.next().unwrap(),
                false => o,
            })
            .collect();
        if let Ok(whole) = crate::elf::encode_objects(crate::model::Arch::X86_64, &appended) {
            let again = crate::elf::encode_objects(crate::model::Arch::X86_64, &back);
            assert!(
                again.as_ref() == Ok(&whole),
                "seed {seed}: re-encoded, the objects differ"
            );
        }
    }
    assert!(plain > 9000, "{plain} plain objects");
    assert!(described > 9000, "{described} frame descriptions read back");
    assert!(
        of_several > 1000,
        "{of_several} functions of objects of several read back"
    );
}

/// An object of 2 to 13 functions from `address` on, in one file, all with line rows,
/// of every frame kind, in an order that is not theirs by address: neighbours (some
/// sharing FDEs and line sequences), others apart.
fn several(seed: u64, address: u64) -> JitObject {
    use crate::elf::test_support::Rng;
    use crate::model::{CfaBase, UnwindRow};
    let mut rng = Rng::new(seed);
    let mut next = |n: u64| rng.below(n);
    let count = 2 + next(12);
    let mut o = JitObject::new();
    let mut at = address;
    let mut placed = Vec::new();
    for i in 0..count {
        let size = 16 + next(200) as u32;
        placed.push((i, at, size));
        // Adjacent, padded, or far apart.
        at += u64::from(size) + [0, 0, 3, 16, 200][next(5) as usize];
    }
    // Registered in another order than by address.
    placed.sort_by_key(|&(i, _, _)| (i * 7) % count);
    for (i, start, size) in placed {
        let f = o
            .add_function(&format!("several_{seed}_{i}"), start, size.into())
            .unwrap();
        let mut rows = Vec::new();
        let mut offset = next(3) as u32;
        let mut line = 1 + next(400) as u32;
        while offset < size {
            // Now and then a gap (line 0), never two in a row; decided without drawing a
            // number, so that the objects are otherwise those of before gaps existed.
            let gap = line % 7 == 0 && !rows.last().is_some_and(LineRow::is_gap);
            rows.push(LineRow {
                offset,
                line: if gap { 0 } else { line },
            });
            offset += 1 + next(9) as u32;
            line = (line as i64 + next(30) as i64 - 10).max(1) as u32;
        }
        o.set_lines(f, "dir/several.js", &rows).unwrap();
        match next(4) {
            0 => {}
            1 => o.set_frame_pointer(f, 1, 4).unwrap(),
            2 => {
                o.set_frame_pointer(f, 1, 4).unwrap();
                o.add_epilogue(f, size - 6, size - 5).unwrap();
                if next(2) == 0 {
                    o.add_epilogue(f, size - 2, size).unwrap();
                }
            }
            _ => {
                let row = |offset, cfa_offset, fp_offset| UnwindRow {
                    offset,
                    cfa_base: CfaBase::Sp,
                    cfa_offset,
                    fp_offset,
                };
                o.set_unwind(f, &[row(0, 8, 0), row(1, 16, -16), row(size - 1, 8, 0)])
                    .unwrap();
            }
        }
    }
    o
}

/// A function of the benchmark shape at `address`, named after `i`.
fn small(i: u64, address: u64) -> JitObject {
    small_in(i, address, "benchmark.js")
}

/// [`small`], its lines in `file`.
fn small_in(i: u64, address: u64, file: &str) -> JitObject {
    let mut o = JitObject::new();
    let f = o
        .add_function(&format!("jit_function_{i:06}_"), address, 64)
        .unwrap();
    let rows: Vec<LineRow> = (0..8)
        .map(|r| LineRow {
            offset: r as u32 * 7,
            line: 10 + r as u32,
        })
        .collect();
    o.set_lines(f, file, &rows).unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    o
}

/// Every state a debugger could see between two stores of an append reads as a valid
/// object holding the functions appended before, and perhaps the new one: sections,
/// symbols inside their sections, units, line programs and FDEs all parse.
#[test]
fn every_state_between_two_stores_is_consistent() {
    let (mut buf, mut growing) = Growing::new(None).unwrap();
    SNAPSHOTS.with(|s| *s.borrow_mut() = Some(Vec::new()));
    for i in 0..40u64 {
        // Adjacent code (a section grows), then code elsewhere (a new section).
        let address = 0x10_0000 + i * 64 + if i % 8 == 7 { 0x1_0000 * i } else { 0 };
        growing
            .append(&mut buf, &small(i, address))
            .unwrap()
            .unwrap();
    }
    let snapshots = SNAPSHOTS.with(|s| s.borrow_mut().take()).unwrap();
    assert!(snapshots.len() >= 40 * 5, "{}", snapshots.len());
    let mut last = 0;
    for (k, bytes) in snapshots.iter().enumerate() {
        let syms = symbols(bytes);
        // Symbols come last: each state has those of the appends before, or all.
        assert!(syms.len() == last || syms.len() == last + 1, "state {k}");
        last = syms.len();
        let p = Parsed {
            bytes: bytes.clone(),
        };
        let units = p.subprograms().len();
        assert!(units >= syms.len(), "state {k}: a symbol before its unit");
        let _ = p.lines();
        let frame = gimli::DebugFrame::new(p.section(".debug_frame"), gimli::LittleEndian);
        let bases = gimli::BaseAddresses::default();
        let mut entries = frame.entries(&bases);
        let mut fdes = 0;
        while let Some(e) = entries.next().unwrap() {
            if let gimli::CieOrFde::Fde(partial) = e {
                partial.parse(gimli::DebugFrame::cie_from_offset).unwrap();
                fdes += 1;
            }
        }
        assert!(fdes >= syms.len(), "state {k}: a symbol before its FDE");
    }
    assert_eq!(last, 40);
}

/// A payload takes objects until a region is full, then refuses them, unchanged; code
/// overlapping its code is refused too.
#[test]
fn full_payloads_and_overlaps_are_refused() {
    let (mut buf, mut growing) = Growing::new(None).unwrap();
    let mut n = 0;
    while growing
        .append(&mut buf, &small(n, 0x40_0000 + n * 64))
        .unwrap()
        .is_some()
    {
        n += 1;
    }
    assert!(
        n >= 900,
        "{n} functions of the benchmark shape in {PAYLOAD} bytes"
    );
    assert_eq!(growing.functions(), n as usize);
    assert_eq!(symbols(&buf).len(), n as usize);

    let (mut buf, mut growing) = Growing::new(None).unwrap();
    growing
        .append(&mut buf, &small(0, 0x1000))
        .unwrap()
        .unwrap();
    let before = buf.clone();
    for at in [0x1000 - 63, 0x1000, 0x1000 + 63] {
        assert_eq!(growing.append(&mut buf, &small(1, at)).unwrap(), None);
    }
    assert_eq!(buf, before);
    // Right after it, and right before it (a section of its own), fit.
    growing
        .append(&mut buf, &small(2, 0x1040))
        .unwrap()
        .unwrap();
    growing
        .append(&mut buf, &small(3, 0x1000 - 64))
        .unwrap()
        .unwrap();
    assert_eq!(symbols(&buf).len(), 3);
}

/// An open unit carries `dwarf::PRODUCER` whatever joins it: functions with and without
/// declared epilogues (the latter need GDB's amd64 epilogue unwinder) share it.
#[test]
fn open_units_carry_the_producer() {
    let (mut buf, mut growing) = Growing::new(None).unwrap();
    for i in 0..4 {
        let mut o = JitObject::new();
        let f = o
            .add_function(&format!("jit_function_{i}"), 0x7000_0000 + i * 64, 64)
            .unwrap();
        o.set_lines(f, "benchmark.js", &[LineRow { offset: 0, line: 1 }])
            .unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        if i % 2 == 1 {
            o.add_epilogue(f, 63, 64).unwrap();
        }
        assert!(growing.append(&mut buf, &o).unwrap().is_some());
    }
    assert!(growing.open.iter().any(Option::is_some), "no open unit");
    let units = Parsed { bytes: buf }.unit_producers();
    let want = ("benchmark.js", Some(crate::elf::dwarf::PRODUCER));
    assert!(
        !units.is_empty() && (units.iter()).all(|(name, p)| (name.as_str(), p.as_deref()) == want),
        "{units:?}"
    );
}
