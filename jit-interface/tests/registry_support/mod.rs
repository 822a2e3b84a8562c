//! Shared by the registry tests: walks the process's own descriptor list, as attach and core
//! readers do, without a debugger.

use jit_interface::descriptor::descriptor_address;
use jit_interface::{Format, JitObject, LineRow, Registration};

#[repr(C)]
struct Entry {
    next: *const Entry,
    prev: *const Entry,
    addr: *const u8,
    size: u64,
}

#[repr(C)]
struct Descriptor {
    version: u32,
    action: u32,
    relevant: *const Entry,
    first: *const Entry,
}

/// Calls `f` with every linked entry's payload, head first; returns the number of entries.
///
/// Call it only while no registration runs concurrently (all threads joined).
pub fn for_each_payload(mut f: impl FnMut(&[u8])) -> usize {
    let mut entries = 0;
    let d = descriptor_address() as *const Descriptor;
    // SAFETY: no registration runs concurrently (the caller's contract); every linked entry
    // and its payload are valid while linked.
    unsafe {
        let mut e = (*d).first;
        while !e.is_null() {
            entries += 1;
            f(std::slice::from_raw_parts((*e).addr, (*e).size as usize));
            e = (*e).next;
        }
    }
    entries
}

/// Does the live slot named by a payload hold `key`? Slots stay mapped while any linked
/// payload names them (the registry never frees them).
#[allow(dead_code)] // not every registry test looks at slots
pub fn slot_holds(address: u64, key: u64) -> bool {
    // SAFETY: see above: the address comes from a linked payload of this process.
    unsafe { (address as *const u64).read_volatile() == key }
}

/// A one-function object of the scale benchmark's shape (8 line rows, frame-pointer frame).
#[allow(dead_code)] // not every registry test registers these
pub fn object(name: &str, start: u64) -> JitObject {
    object_and_id(name, start).0
}

/// [`object`] and its function's id.
#[allow(dead_code)]
pub fn object_and_id(name: &str, start: u64) -> (JitObject, jit_interface::FunctionId) {
    let mut obj = JitObject::new();
    let f = obj.add_function(name, start, 64).unwrap();
    let rows: Vec<LineRow> = (0..8)
        .map(|i| LineRow {
            offset: i * 6,
            line: 10 + i,
        })
        .collect();
    obj.set_lines(f, "scale.js", &rows).unwrap();
    obj.set_frame_pointer(f, 1, 4).unwrap();
    (obj, f)
}

/// The DWARF sections of an ELF payload, for gimli (a missing section reads as empty).
#[allow(dead_code)] // not every registry test reads DWARF
pub fn dwarf_of<'a>(
    file: &object::File<'a>,
) -> gimli::Dwarf<gimli::EndianSlice<'a, gimli::LittleEndian>> {
    use object::{Object, ObjectSection};
    let load = |id: gimli::SectionId| -> Result<_, ()> {
        let data = file
            .section_by_name(id.name())
            .and_then(|s| s.data().ok())
            .unwrap_or(&[]);
        Ok(gimli::EndianSlice::new(data, gimli::LittleEndian))
    };
    gimli::Dwarf::load(load).expect("loading sections cannot fail")
}

/// Every function symbol of every ELF entry in the list, and the entries' bytes.
#[allow(dead_code)] // not every registry test reads ELF entries
pub fn listed_elf() -> (Vec<String>, Vec<Vec<u8>>) {
    use object::{Object, ObjectSymbol};
    let mut names = Vec::new();
    let mut payloads = Vec::new();
    for_each_payload(|bytes| {
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

/// A function's name, line rows and unwind rows as the model has them (absolute addresses).
pub type Expected = (String, Vec<(u64, u64)>, Vec<(u64, u16, i64, Option<i64>)>);

/// What `object`'s functions should read as: every line row, and the CFA (register, offset)
/// and frame-pointer save slot at every unwind row.
#[allow(dead_code)] // not every registry test reads ELF entries
pub fn expected(object: &JitObject) -> Vec<Expected> {
    use jit_interface::{Arch, CfaBase};
    object
        .functions()
        .iter()
        .map(|f| {
            let lines = f
                .lines()
                .iter()
                .map(|r| (f.start() + u64::from(r.offset), u64::from(r.line)))
                .collect();
            let unwind = f
                .frame()
                .rows(Arch::X86_64, f.size().into())
                .iter()
                .map(|r| {
                    let reg = match r.cfa_base {
                        CfaBase::Sp => 7,
                        CfaBase::Fp => 6,
                    };
                    let fp = (r.fp_offset != 0).then_some(i64::from(r.fp_offset));
                    (
                        f.start() + u64::from(r.offset),
                        reg,
                        i64::from(r.cfa_offset),
                        fp,
                    )
                })
                .collect();
            (f.name().to_string(), lines, unwind)
        })
        .collect()
}

/// What the listed ELF entries say about the functions of `want`, read with gimli.
#[allow(dead_code)] // not every registry test reads ELF entries
pub fn read_listed(want: &[Expected]) -> Vec<Expected> {
    use gimli::{BaseAddresses, CfaRule, RegisterRule, UnwindContext, UnwindSection};
    use object::{Object, ObjectSection, ObjectSymbol};
    let (_, payloads) = listed_elf();
    let mut lines: Vec<(u64, u64)> = Vec::new();
    let mut symbols = std::collections::HashMap::new();
    let mut frames = Vec::new();
    for bytes in &payloads {
        let file = object::File::parse(&bytes[..]).expect("an ELF entry");
        for s in file.symbols() {
            let section = file.section_by_index(s.section_index().unwrap()).unwrap();
            let name = s.name().unwrap().to_string();
            symbols.insert(name, section.address() + s.address());
        }
        let dwarf = dwarf_of(&file);
        let mut units = dwarf.units();
        while let Some(header) = units.next().unwrap() {
            let unit = dwarf.unit(header).unwrap();
            if let Some(program) = unit.line_program.clone() {
                let mut rows = program.rows();
                while let Some((_, row)) = rows.next_row().unwrap() {
                    if !row.end_sequence() {
                        lines.push((row.address(), row.line().map_or(0, |l| l.get())));
                    }
                }
            }
        }
        let frame = file
            .section_by_name(".debug_frame")
            .and_then(|s| s.data().ok());
        frames.push(gimli::EndianSlice::new(
            frame.unwrap_or(&[]),
            gimli::LittleEndian,
        ));
    }
    lines.sort();
    // Every FDE, by start address.
    let mut fdes = Vec::new();
    for (p, data) in frames.iter().enumerate() {
        let mut frame = gimli::DebugFrame::from(*data);
        frame.set_address_size(8);
        let bases = BaseAddresses::default();
        let mut entries = frame.entries(&bases);
        while let Some(entry) = entries.next().unwrap() {
            if let gimli::CieOrFde::Fde(partial) = entry {
                let fde = partial.parse(gimli::DebugFrame::cie_from_offset).unwrap();
                fdes.push((p, fde));
            }
        }
    }
    fdes.sort_by_key(|(_, fde)| fde.initial_address());
    want.iter()
        .map(|(name, want_lines, want_unwind)| {
            let start = *symbols
                .get(name)
                .unwrap_or_else(|| panic!("{name} is not listed"));
            let end = want_unwind.last().map_or(start, |u| u.0) + 1;
            let first = want_lines.first().map_or(start, |l| l.0);
            let last = want_lines.last().map_or(start, |l| l.0);
            let from = lines.partition_point(|&(a, _)| a < first.min(start));
            let to = lines.partition_point(|&(a, _)| a <= last.max(end));
            let mut got_lines = lines[from..to].to_vec();
            got_lines.dedup();
            let unwind = want_unwind
                .iter()
                .map(|&(addr, ..)| {
                    let k = fdes.partition_point(|(_, fde)| fde.initial_address() <= addr);
                    let found = k.checked_sub(1).and_then(|k| {
                        let (p, fde) = &fdes[k];
                        let mut frame = gimli::DebugFrame::from(frames[*p]);
                        frame.set_address_size(8);
                        let mut ctx = UnwindContext::new();
                        let row = fde
                            .unwind_info_for_address(
                                &frame,
                                &BaseAddresses::default(),
                                &mut ctx,
                                addr,
                            )
                            .ok()?;
                        let CfaRule::RegisterAndOffset { register, offset } = *row.cfa() else {
                            panic!("{name}: a CFA expression")
                        };
                        let fp = match row.register(gimli::Register(6)) {
                            Some(RegisterRule::Offset(o)) => Some(o),
                            _ => None,
                        };
                        Some((addr, register.0, offset, fp))
                    });
                    found.unwrap_or_else(|| panic!("{name}: no FDE covers {addr:#x}"))
                })
                .collect();
            (name.clone(), got_lines, unwind)
        })
        .collect()
}

/// Object `i` of a mix of every shape a runtime registers one by one (frame-pointer
/// functions with epilogues, explicit unwind rows, default frames, spread lines, objects
/// without lines, two-function objects in one file or two), named `{prefix}_{i:04}`, at
/// `base + i * 0x400`.
#[allow(dead_code)] // not every registry test reads ELF entries
pub fn mixed(prefix: &str, base: u64, i: u64) -> JitObject {
    use jit_interface::{CfaBase, LineRow, UnwindRow};
    let mut obj = JitObject::new();
    let name = format!("{prefix}_{i:04}");
    let start = base + i * 0x400;
    let size = 48 + (i * 37) % 300;
    let f = obj.add_function(&name, start, size).unwrap();
    let rows: Vec<LineRow> = (0..(1 + i % 12) as u32)
        .map(|r| LineRow {
            offset: r * (1 + (i as u32 * 7 + r) % 23) % size as u32,
            line: 1 + ((i as u32 * 131 + r * 17) % 9000),
        })
        .scan(None, |prev: &mut Option<u32>, r| {
            // Strictly increasing offsets.
            let ok = prev.map_or(true, |p| r.offset > p);
            if ok {
                *prev = Some(r.offset);
            }
            Some(ok.then_some(r))
        })
        .flatten()
        .collect();
    if i % 7 != 3 {
        obj.set_lines(f, &format!("file{}.js", i % 3), &rows)
            .unwrap();
    }
    match i % 4 {
        0 => obj.set_frame_pointer(f, 1, 4).unwrap(),
        1 => {
            obj.set_frame_pointer(f, 1, 4).unwrap();
            obj.add_epilogue(f, size as u32 - 8, size as u32 - 7)
                .unwrap();
            obj.add_epilogue(f, size as u32 - 2, size as u32 - 1)
                .unwrap();
        }
        2 => {
            let fp = |offset, cfa_offset| UnwindRow {
                offset,
                cfa_base: CfaBase::Sp,
                cfa_offset,
                fp_offset: 0,
            };
            obj.set_unwind(f, &[fp(0, 8), fp(2, 24), fp(size as u32 - 3, 8)])
                .unwrap();
        }
        _ => {}
    }
    if i % 11 == 5 || i % 13 == 7 {
        // A second function: in another file (the object keeps its record), or in the
        // same one (read back as a whole).
        let g = obj
            .add_function(&format!("{prefix}_{i:04}_second"), start + 0x180, 32)
            .unwrap();
        let file = match i % 11 == 5 {
            true => "second.js".to_string(),
            false => format!("file{}.js", i % 3),
        };
        obj.set_lines(g, &file, &[LineRow { offset: 0, line: 7 }])
            .unwrap();
        obj.set_frame_pointer(g, 1, 2).unwrap();
    }
    obj
}

#[allow(dead_code)] // not every registry test runs it
/// Registers and drops objects named `{prefix}_...` (at `base` and, one after the other,
/// at `adjacent`): registrations and drops of every kind, mixed (new objects, the oldest or the newest
/// dropped, one at random, many in one call), over objects of every shape: the rollbacks,
/// peeled ends, whole rewrites and one-call rewrites they make leave the list holding
/// exactly the live functions, with their lines and frames, at every point looked at, and
/// few entries.
pub fn mixed_workload(
    prefix: &str,
    base: u64,
    adjacent: u64,
    format: Format,
    check_listed: impl Fn(&[&JitObject]),
) {
    use jit_interface::descriptor::entry_count;
    let entries_before = entry_count();
    // Every fifth object of a mixed shape, apart; the others of the benchmark's shape, one
    // after the other in memory (so that entries fill up: peeled ends need 128 objects).
    let register = |i: u64| {
        let obj = match i % 5 {
            0 => mixed(prefix, base, i),
            _ => object(&format!("{prefix}_a{i:05}"), adjacent + i * 64),
        };
        let reg = jit_interface::register(&obj, format).expect("register");
        (obj, reg)
    };
    let mut live: std::collections::VecDeque<(JitObject, Registration)> =
        (0..3000).map(register).collect();
    let mut next = 3000u64;
    let check = |live: &std::collections::VecDeque<(JitObject, Registration)>, step: u64| {
        eprintln!("step {step}: {} objects live", live.len());
        check_listed(&live.iter().map(|(o, _)| o).collect::<Vec<_>>());
        // Far fewer than one per object: without a debugger, payloads of up to about 1,000
        // objects (fewer when drops here and there seal them early); under one, the merge
        // levels' small entries (up to 62) beside sealed batches; and at most 32 peeled ends.
        let entries = entry_count() - entries_before;
        assert!(
            entries <= live.len() / 50 + 100,
            "{entries} entries for {} objects at step {step}",
            live.len()
        );
    };
    for step in 0..8000u64 {
        // A fixed pseudo-random sequence (Fibonacci hashing of the step).
        let r = (step.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) % 100;
        match r {
            _ if live.len() < 2000 || r < 45 => {
                live.push_back(register(next));
                next += 1;
            }
            45..=64 => drop(live.pop_front()),
            65..=79 => drop(live.pop_back()),
            80..=91 => drop(live.remove(r as usize * 7919 % live.len())),
            _ => {
                // About 20 objects, spread over the live ones, in one call.
                let stride = live.len() / 20;
                let mut gone = Vec::new();
                let mut k = (r as usize) % stride;
                while k < live.len() && gone.len() < 20 {
                    gone.push(live.remove(k).expect("live").1);
                    k += stride - 1;
                }
                jit_interface::unregister_many(gone);
            }
        }
        if step % 2000 == 1999 {
            check(&live, step);
        }
    }
    drop(live);
    assert_eq!(entry_count(), entries_before);
}

/// The listed ELF entries hold exactly the functions of `live` (named `{prefix}_...`), with
/// their line rows and unwind rules (read with gimli).
#[allow(dead_code)] // not every registry test reads ELF entries
pub fn check_elf(prefix: &str, live: &[&JitObject]) {
    let want: Vec<Expected> = live.iter().flat_map(|o| expected(o)).collect();
    assert_eq!(read_listed(&want), want);
    let (names, _) = listed_elf();
    let listed = names
        .iter()
        .filter(|n| n.starts_with(&format!("{prefix}_")))
        .count();
    assert_eq!(listed, want.len());
}

/// The listed compact records whose live slot holds their key are exactly the objects of
/// `live` (functions named `{prefix}_...`), with their line rows and unwind rules.
#[allow(dead_code)] // not every registry test reads compact entries
pub fn check_compact(prefix: &str, live: &[&JitObject]) {
    let mut want: Vec<Expected> = live.iter().flat_map(|o| expected(o)).collect();
    let mut got = Vec::new();
    for_each_payload(|payload| {
        for d in jit_interface::decode_all(payload).expect("a listed payload decodes") {
            let l = d.live.expect("compact registrations carry live checks");
            if slot_holds(l.address, l.key) {
                got.extend(expected(&d.object));
            }
        }
    });
    got.retain(|(name, ..)| name.starts_with(&format!("{prefix}_")));
    want.sort();
    got.sort();
    assert_eq!(got, want);
}

/// The source texts of an ELF payload's `.jit_gdb.sources` section (none if it has none),
/// read here by the spec (docs/FORMAT.md, "Source text in ELF payloads"): a ULEB128 count,
/// then per file its name and its text, each a ULEB128 length and that many bytes.
#[allow(dead_code)] // not every registry test reads source texts
pub fn elf_sources(payload: &[u8]) -> Vec<(String, String)> {
    use object::{Object, ObjectSection};
    fn uleb(bytes: &mut &[u8]) -> usize {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let b = bytes[0];
            *bytes = &bytes[1..];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return v as usize;
            }
            shift += 7;
        }
    }
    fn string(bytes: &mut &[u8]) -> String {
        let len = uleb(bytes);
        let s = String::from_utf8(bytes[..len].to_vec()).expect("UTF-8");
        *bytes = &bytes[len..];
        s
    }
    let file = object::File::parse(payload).expect("an ELF payload");
    let Some(section) = file.section_by_name(".jit_gdb.sources") else {
        return Vec::new();
    };
    let mut bytes = section.data().expect("section data");
    let n = uleb(&mut bytes);
    let out: Vec<(String, String)> = (0..n)
        .map(|_| (string(&mut bytes), string(&mut bytes)))
        .collect();
    assert!(bytes.is_empty(), "bytes after the last source");
    out
}
