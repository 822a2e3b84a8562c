use super::*;
use crate::format::{encode, encode_bundle, LiveCheck};
use crate::model::{JitObject, LineRow};

/// Functions in and out of address order, several files, a function with a file but no rows,
/// one without any file, adjacent and scattered code.
fn sample() -> JitObject {
    let mut o = JitObject::new();
    let a = o.add_function("jit_alpha", 0x7f00_0000_1000, 0x40).unwrap();
    let rows = [
        LineRow {
            offset: 0,
            line: 10,
        },
        LineRow {
            offset: 4,
            line: 11,
        },
        LineRow {
            offset: 0x20,
            line: 9,
        },
    ];
    o.set_lines(a, "alpha.js", &rows).unwrap();
    let b = o.add_function("jit_beta", 0x7f00_0000_0f00, 0x80).unwrap();
    o.set_lines(b, "dir/beta.js", &[LineRow { offset: 0, line: 3 }])
        .unwrap();
    o.add_function("jit_nofile", 0x7f00_0000_1040, 0x10)
        .unwrap();
    let e = o
        .add_function("jit_emptyrows", 0x7f10_0000_0000, 0x10)
        .unwrap();
    o.set_lines(e, "alpha.js", &[]).unwrap();
    let g = o
        .add_function("jit_gamma \"q\"", 0x7f00_0000_1050, 0x30)
        .unwrap();
    o.set_lines(
        g,
        "alpha.js",
        &[
            LineRow {
                offset: 0,
                line: 40,
            },
            LineRow {
                offset: 8,
                line: 41,
            },
        ],
    )
    .unwrap();
    o
}

/// What `decode_payload` should find for `o` (object index `object`).
fn expected(o: &JitObject, object: usize) -> Vec<FunctionInfo> {
    o.functions()
        .iter()
        .map(|f| FunctionInfo {
            name: f.name().into(),
            start: f.start(),
            size: f.size().into(),
            file: f.file().map(Into::into),
            lines: f
                .lines()
                .iter()
                .map(|r| (f.start() + u64::from(r.offset), r.line))
                .collect(),
            object,
        })
        .collect()
}

#[cfg(feature = "runtime")]
fn sorted(mut v: Vec<FunctionInfo>) -> Vec<FunctionInfo> {
    v.sort_by_key(|f| f.start);
    v
}

#[test]
fn compact_round_trip() {
    let o = sample();
    let live = LiveCheck {
        address: 0x5555_5555_8010,
        key: 0x0123_4567_89ab_cdef,
    };
    let info = decode_payload(&encode(&o, Some(live)).unwrap()).unwrap();
    assert_eq!(info.kind, PayloadKind::Compact);
    assert_eq!(info.arch, Some(Arch::HOST));
    assert_eq!(info.objects, [ObjectInfo { live: Some(live) }]);
    assert_eq!(info.functions, expected(&o, 0));
    assert!(info.problems.is_empty());
}

#[test]
fn unregistered_objects_are_dropped() {
    // Three objects: one whose slot holds its key, one cleared (a tombstone), one whose slot
    // cannot be read (counts as live).
    let o = sample();
    let mut p = JitObject::new();
    p.add_function("jit_dead", 0x1000, 8).unwrap();
    let mut q = JitObject::new();
    q.add_function("jit_unreadable", 0x2000, 8).unwrap();
    let live = |address, key| Some(LiveCheck { address, key });
    let bytes = encode_bundle(&[
        (&o, live(0x10, 7)),
        (&p, live(0x18, 9)),
        (&q, live(0x20, 11)),
    ])
    .unwrap();
    let mut info = decode_payload(&bytes).unwrap();
    let dropped = info.drop_unregistered(|addr| match addr {
        0x10 => Some(7),
        0x18 => Some(0),
        _ => None,
    });
    assert_eq!(dropped, 1);
    assert_eq!(info.objects.len(), 3);
    let names: Vec<&str> = info.functions.iter().map(|f| f.name.as_str()).collect();
    assert!(!names.contains(&"jit_dead"), "{names:?}");
    assert!(names.contains(&"jit_unreadable"), "{names:?}");
    assert_eq!(names.len(), o.functions().len() + 1);
}

#[test]
fn compact_bundle_keeps_object_indices() {
    let o = sample();
    let mut p = JitObject::new();
    p.add_function("jit_other", 0x1000, 8).unwrap();
    let bytes = encode_bundle(&[(&o, None), (&p, None)]).unwrap();
    let info = decode_payload(&bytes).unwrap();
    assert_eq!(info.objects.len(), 2);
    let mut want = expected(&o, 0);
    want.extend(expected(&p, 1));
    assert_eq!(info.functions, want);
}

#[cfg(feature = "runtime")]
#[test]
fn elf_round_trip() {
    let o = sample();
    let bytes = crate::elf::encode(&o).unwrap();
    let info = decode_payload(&bytes).unwrap();
    assert_eq!(info.kind, PayloadKind::Elf);
    assert_eq!(info.arch, Some(Arch::X86_64));
    assert!(info.problems.is_empty(), "{:?}", info.problems);
    // The ELF encoder writes symbols in address order.
    assert_eq!(sorted(info.functions), sorted(expected(&o, 0)));
}

#[cfg(feature = "runtime")]
#[test]
fn elf_round_trip_many_functions() {
    let mut o = JitObject::new();
    for i in 0..500u64 {
        // Runs of adjacent functions with padding, and gaps that split sections.
        let start = 0x7f00_0000_0000 + i * 0x30 + (i / 7) * 0x1000;
        let f = o.add_function(&format!("f{i}"), start, 0x28).unwrap();
        let rows: Vec<LineRow> = (0..4)
            .map(|r| LineRow {
                offset: r * 9,
                line: (i as u32) * 3 + r + 1,
            })
            .collect();
        o.set_lines(f, &format!("file{}.js", i % 3), &rows).unwrap();
    }
    let info = decode_payload(&crate::elf::encode(&o).unwrap()).unwrap();
    assert_eq!(sorted(info.functions), sorted(expected(&o, 0)));
}

#[test]
fn unknown_payload_is_named() {
    let e = decode_payload(b"\x01\x02\x03\x04\x05").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("5 bytes"), "{msg}");
    assert!(msg.contains("01 02 03 04 05"), "{msg}");
    assert!(decode_payload(b"").is_err());
}

#[test]
fn damaged_compact_is_refused_with_the_codec_message() {
    let mut bytes = encode(&sample(), None).unwrap();
    bytes.push(0);
    let e = decode_payload(&bytes).unwrap_err();
    assert!(matches!(e, InspectError::Compact(_)), "{e}");
    assert!(e.to_string().contains("byte offset"), "{e}");
}

/// Every prefix and many single-byte corruptions of both payload kinds: an error or a
/// result, never a panic.
#[test]
fn truncated_and_corrupted_payloads_never_panic() {
    #[allow(unused_mut)] // ELF payloads need the encoder (`runtime`).
    let mut payloads = vec![encode(&sample(), None).unwrap()];
    #[cfg(feature = "runtime")]
    payloads.push(crate::elf::encode(&sample()).unwrap());
    for bytes in payloads {
        for n in 0..bytes.len() {
            let _ = decode_payload(&bytes[..n]);
            let _ = payload_json(&bytes[..n]);
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..4000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut b = bytes.clone();
            let i = (seed >> 33) as usize % b.len();
            b[i] ^= (seed >> 8) as u8 | 1;
            if let Ok(info) = decode_payload(&b) {
                // Whatever was decoded can be symbolized.
                let s = Symbolizer::new(info.functions);
                for f in s.functions() {
                    let _ = s.lookup(f.start);
                }
            }
        }
    }
}

#[cfg(feature = "runtime")]
#[test]
fn elf_with_damaged_dwarf_keeps_the_symbols() {
    let o = sample();
    let bytes = crate::elf::encode(&o).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    use object::{Object, ObjectSection};
    let (off, size) = file
        .section_by_name(".debug_line")
        .unwrap()
        .file_range()
        .unwrap();
    let mut b = bytes.clone();
    // A unit length running past the section end.
    b[off as usize..off as usize + 4].copy_from_slice(&(size as u32 + 100).to_le_bytes());
    let info = decode_payload(&b).unwrap();
    assert!(!info.problems.is_empty());
    assert!(
        info.problems.iter().any(|p| p.contains("DWARF unit at")),
        "{:?}",
        info.problems
    );
    let names: Vec<&str> = info.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.len(), o.functions().len(), "{names:?}");
}

fn func(name: &str, start: u64, size: u64) -> FunctionInfo {
    FunctionInfo {
        name: name.into(),
        start,
        size,
        file: None,
        lines: Vec::new(),
        object: 0,
    }
}

#[test]
fn symbolizer_lines_and_edges() {
    let o = sample();
    let info = decode_payload(&encode(&o, None).unwrap()).unwrap();
    let s = Symbolizer::new(info.functions);
    let hit = s.lookup(0x7f00_0000_1005).unwrap();
    assert_eq!(hit.function.name, "jit_alpha");
    assert_eq!(hit.offset, 5);
    assert_eq!(hit.line, Some(11));
    assert_eq!(hit.location().as_deref(), Some("alpha.js:11"));
    assert_eq!(s.lookup(0x7f00_0000_1020).unwrap().line, Some(9));
    assert_eq!(
        s.lookup(0x7f00_0000_0f7f).unwrap().function.name,
        "jit_beta"
    );
    // jit_beta ends where jit_alpha starts.
    assert_eq!(
        s.lookup(0x7f00_0000_1000).unwrap().function.name,
        "jit_alpha"
    );
    assert!(s.lookup(0x7f00_0000_0eff).is_none());
    assert!(s.lookup(0).is_none());
    assert!(s.lookup(u64::MAX).is_none());
    let nofile = s.lookup(0x7f00_0000_1040).unwrap();
    assert_eq!((nofile.line, nofile.location()), (None, None));
    assert_eq!(s.segments(), o.functions().len());
}

#[test]
fn symbolizer_overlaps_belong_to_the_newest_function() {
    // In registration order, oldest first.
    let fs = vec![
        func("outer", 100, 100),    // [100, 200)
        func("inner", 120, 10),     // [120, 130), newer than outer
        func("partial", 190, 20),   // [190, 210), newer than outer
        func("same_start", 100, 5), // [100, 105), newer than outer
        func("empty", 300, 0),
        func("old_inner", 150, 10), // [150, 160), registered before...
        func("cover", 140, 30),     // [140, 170), ...this newer one, which hides it
        func("stale", 125, 70),     // [125, 195), the newest of all
    ];
    let s = Symbolizer::new(fs);
    let name = |a| s.lookup(a).map(|h| h.function.name.as_str());
    assert_eq!(name(99), None);
    assert_eq!(name(100), Some("same_start"));
    assert_eq!(name(105), Some("outer"));
    assert_eq!(name(120), Some("inner"));
    assert_eq!(name(125), Some("stale"));
    assert_eq!(name(155), Some("stale"));
    assert_eq!(name(194), Some("stale"));
    assert_eq!(name(195), Some("partial"));
    assert_eq!(name(205), Some("partial"));
    assert_eq!(name(210), None);
    assert_eq!(name(300), None);
    // The older function keeps its own start for the offset of the pieces it keeps.
    let hit = s.lookup(105).unwrap();
    assert_eq!(hit.offset, 5);
    // old_inner and cover own nothing; outer keeps [105, 120); inner keeps [120, 125).
    let owned: Vec<(u64, u64, &str)> = s
        .ranges()
        .map(|(a, b, o)| (a, b, s.functions()[o].name.as_str()))
        .collect();
    assert_eq!(
        owned,
        [
            (100, 105, "same_start"),
            (105, 120, "outer"),
            (120, 125, "inner"),
            (125, 195, "stale"),
            (195, 210, "partial"),
        ]
    );
}

/// Against a brute-force search that applies the same rule (the newest containing
/// function, i.e. the last in the slice), on random overlapping sets.
#[test]
fn symbolizer_matches_brute_force() {
    let mut seed = 42u64;
    let mut next = |m: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % m
    };
    for _round in 0..50 {
        let fs: Vec<FunctionInfo> = (0..30)
            .map(|i| {
                let mut f = func(&format!("f{i}"), next(1000), next(80) + 1);
                // Rows every 7 bytes, some starting after the function start.
                let skip = next(3);
                f.lines = (skip..f.size)
                    .step_by(7)
                    .map(|o| (f.start + o, (i * 100 + o) as u32 + 1))
                    .collect();
                f
            })
            .collect();
        let s = Symbolizer::new(fs.clone());
        for addr in 0..1100u64 {
            let want = fs
                .iter()
                .rev()
                .find(|f| f.contains(addr))
                .map(|f| f.name.as_str());
            let hit = s.lookup(addr);
            let got = hit.map(|h| h.function.name.as_str());
            assert_eq!(got, want, "addr {addr}");
            if let Some(h) = hit {
                assert_eq!(h.line, h.function.line_at(addr), "line at {addr}");
                assert_eq!(h.offset, addr - h.function.start);
            }
        }
        // The ranges are disjoint, in address order, and agree with the lookups.
        let ranges: Vec<(u64, u64, usize)> = s.ranges().collect();
        for w in ranges.windows(2) {
            assert!(w[0].1 <= w[1].0, "{w:?}");
        }
        for &(a, b, o) in &ranges {
            assert!(a < b);
            assert_eq!(s.lookup(a).unwrap().function, &s.functions()[o]);
            assert_eq!(s.lookup(b - 1).unwrap().function, &s.functions()[o]);
        }
    }
}

#[test]
fn json_escapes_and_parses() {
    let mut s = String::new();
    json_string(&mut s, "a\"b\\c\nd\u{1}é");
    assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é\"");

    let o = sample();
    let live = LiveCheck {
        address: u64::MAX,
        key: 1,
    };
    let json = payload_json(&encode(&o, Some(live)).unwrap());
    let err = payload_json(b"nope");
    assert!(
        err.starts_with("{\"error\": \"unknown payload kind"),
        "{err}"
    );
    // Parse with a real JSON parser when one is installed.
    let script = r#"
import json, sys
d = json.loads(sys.argv[1])
e = json.loads(sys.argv[2])
f = d["functions"][4]
print(d["kind"], d["objects"][0]["live"]["address"], f["name"], f["lines"][1][0], f["file"], d["functions"][2]["file"], "error" in e)
"#;
    match std::process::Command::new("python3")
        .args(["-c", script, &json, &err])
        .output()
    {
        Ok(out) if out.status.success() => {
            let got = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                got.trim(),
                format!(
                    "compact {} jit_gamma \"q\" {} alpha.js None True",
                    u64::MAX,
                    0x7f00_0000_1058u64
                )
            );
        }
        Ok(out) => panic!(
            "python3 rejected the JSON: {}\n{json}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => eprintln!("SKIPPED the JSON parse check: python3 is not installed"),
    }
}

/// `sample()` with the text of one of its files and of a file no function names.
fn sample_with_sources() -> JitObject {
    let mut o = sample();
    o.set_source("alpha.js", "// alpha\n\"quoted\"\ttab\n")
        .unwrap();
    o.set_source("../gen/extra.js", "").unwrap();
    o
}

fn pairs(s: &[SourceInfo]) -> Vec<(&str, &str, usize)> {
    s.iter()
        .map(|s| (s.file.as_str(), s.text.as_str(), s.object))
        .collect()
}

#[test]
fn compact_sources_are_read_per_object() {
    let a = sample_with_sources();
    let mut b = JitObject::new();
    b.add_function("jit_b", 0x1000, 8).unwrap();
    b.set_source("alpha.js", "b's alpha").unwrap();
    let live = |address, key| Some(LiveCheck { address, key });
    let bytes =
        encode_bundle(&[(&a, live(0x10, 1)), (&sample(), None), (&b, live(0x18, 2))]).unwrap();
    let mut info = decode_payload(&bytes).unwrap();
    let text = "// alpha\n\"quoted\"\ttab\n";
    assert_eq!(
        pairs(&info.sources),
        [
            ("alpha.js", text, 0),
            ("../gen/extra.js", "", 0),
            ("alpha.js", "b's alpha", 2)
        ]
    );
    assert_eq!(
        payload_sources(&bytes).unwrap(),
        [
            ("alpha.js".to_string(), text.to_string()),
            ("../gen/extra.js".into(), "".into()),
            ("alpha.js".into(), "b's alpha".into())
        ]
    );
    // An unregistered object's texts go with its functions.
    assert_eq!(
        info.drop_unregistered(|a| Some(if a == 0x18 { 0 } else { 1 })),
        1
    );
    assert_eq!(info.sources.len(), 2);
    // Without sources: none, and no "sources" in the JSON.
    let plain = encode(&sample(), None).unwrap();
    assert_eq!(payload_sources(&plain).unwrap(), []);
    assert!(decode_payload(&plain).unwrap().sources.is_empty());
    assert!(!payload_json(&plain).contains("\"sources\""));
    assert!(payload_sources(b"nope")
        .unwrap_err()
        .contains("unknown payload kind"));
    let mut damaged = bytes.clone();
    damaged.truncate(bytes.len() - 1);
    assert!(payload_sources(&damaged)
        .unwrap_err()
        .starts_with("compact payload: "));
}

#[cfg(feature = "runtime")]
#[test]
fn elf_sources_are_read_from_their_section() {
    let o = sample_with_sources();
    let bytes = crate::elf::encode(&o).unwrap();
    let info = decode_payload(&bytes).unwrap();
    assert!(info.problems.is_empty(), "{:?}", info.problems);
    assert_eq!(
        pairs(&info.sources),
        [
            ("alpha.js", "// alpha\n\"quoted\"\ttab\n", 0),
            ("../gen/extra.js", "", 0)
        ]
    );
    assert_eq!(
        payload_sources(&bytes).unwrap(),
        o.sources()
            .map(|(f, t)| (f.to_string(), t.to_string()))
            .collect::<Vec<_>>()
    );
    // The functions read as they do without the section.
    let plain = crate::elf::encode(&sample()).unwrap();
    assert_eq!(info.functions, decode_payload(&plain).unwrap().functions);
    assert_eq!(payload_sources(&plain).unwrap(), []);

    // A damaged section: the rest is read, the problem named; payload_sources refuses.
    let name = crate::format::SOURCES_SECTION;
    let file = object::File::parse(&bytes[..]).unwrap();
    let at = {
        use object::{Object, ObjectSection};
        let s = file.section_by_name(name).unwrap();
        s.file_range().unwrap().0 as usize
    };
    let mut damaged = bytes.clone();
    damaged[at] = 3; // three sources announced, two there
    let info = decode_payload(&damaged).unwrap();
    assert!(info.sources.is_empty());
    assert_eq!(info.functions.len(), sample().functions().len());
    assert!(
        info.problems[0].starts_with(&format!("section {name}: ")),
        "{:?}",
        info.problems
    );
    let e = payload_sources(&damaged).unwrap_err();
    assert!(
        e.starts_with("ELF payload: section .jit_gdb.sources: "),
        "{e}"
    );
}

#[test]
fn json_carries_sources_only_when_present() {
    let o = sample_with_sources();
    let json = payload_json(&encode(&o, None).unwrap());
    assert!(
        json.ends_with(
            r#", "sources": [{"file": "alpha.js", "text": "// alpha\n\"quoted\"\ttab\n", "object": 0}, {"file": "../gen/extra.js", "text": "", "object": 0}]}"#
        ),
        "{json}"
    );
    let script = r#"
import json, sys
d = json.loads(sys.argv[1])
print(repr(d["sources"][0]["text"]), d["sources"][1]["file"], len(d["functions"]))
"#;
    match std::process::Command::new("python3")
        .args(["-c", script, &json])
        .output()
    {
        Ok(out) if out.status.success() => {
            let got = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                got.trim(),
                r#"'// alpha\n"quoted"\ttab\n' ../gen/extra.js 5"#
            );
        }
        Ok(out) => panic!(
            "python3 rejected the JSON: {}\n{json}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => eprintln!("SKIPPED the JSON parse check: python3 is not installed"),
    }
}

/// Gap rows (line 0) read from either payload as gaps: the inspector and the symbolizer
/// give their addresses no line, and the rows after a gap their lines.
#[test]
fn gap_rows_have_no_line() {
    let mut o = JitObject::new();
    let f = o.add_function("jit_glue", 0x7f00_0000_1000, 0x40).unwrap();
    let (l, gap) = (LineRow::new, LineRow::gap);
    o.set_lines(
        f,
        "g.js",
        &[gap(0), l(4, 10), gap(8), l(0x10, 11), gap(0x30)],
    )
    .unwrap();
    let mut payloads = vec![("compact", encode(&o, None).unwrap())];
    #[cfg(feature = "runtime")]
    payloads.push(("elf", crate::elf::encode(&o).unwrap()));
    for (kind, bytes) in payloads {
        let info = decode_payload(&bytes).unwrap();
        assert!(info.problems.is_empty(), "{kind}: {:?}", info.problems);
        let f = info
            .functions
            .iter()
            .find(|f| f.name == "jit_glue")
            .unwrap();
        let at = |offset: u64| 0x7f00_0000_1000 + offset;
        assert_eq!(
            f.lines,
            [
                (at(0), 0),
                (at(4), 10),
                (at(8), 0),
                (at(0x10), 11),
                (at(0x30), 0)
            ],
            "{kind}"
        );
        let s = Symbolizer::new(info.functions.clone());
        for (offset, want) in [
            (0, None),
            (3, None),
            (4, Some(10)),
            (7, Some(10)),
            (8, None),
            (0xf, None),
            (0x10, Some(11)),
            (0x2f, Some(11)),
            (0x30, None),
            (0x3f, None),
        ] {
            let hit = s.lookup(at(offset)).unwrap();
            assert_eq!(
                (hit.function.name.as_str(), hit.line),
                ("jit_glue", want),
                "{kind} +{offset:#x}"
            );
            assert_eq!(
                hit.location(),
                want.map(|n| format!("g.js:{n}")),
                "{kind} +{offset:#x}"
            );
            assert_eq!(f.line_at(at(offset)), want, "{kind} +{offset:#x}");
        }
    }
}
