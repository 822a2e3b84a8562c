//! Tests of the compact-record codec: round trips of every model feature, sizes, and the
//! decoder's behaviour on damaged input (truncation, byte flips, inflated counts).

use super::wire::Writer;
use super::*;
use crate::error::Error;
use crate::model::{
    Arch, BaseType, CallTarget, CfaBase, Frame, FunctionId, Location, UnwindRow, Variable,
    VariableKind,
};
use crate::LineRow;

fn rows(pairs: &[(u32, u32)]) -> Vec<LineRow> {
    pairs
        .iter()
        .map(|&(offset, line)| LineRow { offset, line })
        .collect()
}

/// An object using every feature: several files, nested blocks, every frame variant,
/// functions out of address order and far apart, line jumps that need the escape opcode.
fn rich_object() -> JitObject {
    let mut o = JitObject::with_arch(Arch::X86_64);
    // Default frame, lines in main.js, nested blocks incl. an inlined region.
    let f = o.add_function("jit_main", 0x7f12_3456_0000, 200).unwrap();
    o.set_lines(
        f,
        "main.js",
        &rows(&[
            (0, 10),
            (4, 11),
            (9, 11),
            (30, 8),
            (31, 400),
            (190, 2),
            (199, 100_000),
        ]),
    )
    .unwrap();
    let outer = o.add_block(f, "loop", 10, 150, None).unwrap();
    let inner = o
        .add_block(f, "inlined_helper", 20, 60, Some(outer))
        .unwrap();
    o.add_block(f, "scope", 30, 40, Some(inner)).unwrap();
    o.add_block(f, "inlined_helper", 160, 170, None).unwrap();
    // Canonical frame-pointer frame, lines in lib.js; placed below the first function.
    let g = o.add_function("jit_lib_add", 0x7f12_3455_ff00, 64).unwrap();
    o.set_frame_pointer(g, 1, 4).unwrap();
    o.add_epilogue(g, 63, 64).unwrap();
    o.set_lines(g, "lib.js", &rows(&[(0, 1), (4, 2), (20, 3)]))
        .unwrap();
    // Frame pointer with two epilogues, back in main.js.
    let h = o
        .add_function("jit_two_exits", 0x7f12_3456_0100, 40)
        .unwrap();
    o.set_frame_pointer(h, 1, 4).unwrap();
    o.add_epilogue(h, 12, 13).unwrap();
    o.add_epilogue(h, 38, 39).unwrap();
    o.set_lines(h, "main.js", &rows(&[(0, 50), (13, 52)]))
        .unwrap();
    // Frame pointer without an epilogue (never returns), a file with no rows.
    let i = o
        .add_function("jit_noreturn", 0x7f12_3456_0200, 16)
        .unwrap();
    o.set_frame_pointer(i, 1, 1).unwrap();
    o.set_lines(i, "empty.js", &[]).unwrap();
    // Explicit rows (rsp-mangling code), far away in the address space.
    let j = o
        .add_function("jit_rows", 0xffff_ffff_ffff_0000, 0xffff)
        .unwrap();
    o.set_unwind(
        j,
        &[
            UnwindRow::X86_64_ENTRY,
            UnwindRow {
                offset: 1,
                cfa_base: CfaBase::Sp,
                cfa_offset: 16,
                fp_offset: -16,
            },
            UnwindRow {
                offset: 4,
                cfa_base: CfaBase::Fp,
                cfa_offset: 16,
                fp_offset: -16,
            },
            UnwindRow {
                offset: 0xfff0,
                cfa_base: CfaBase::Sp,
                cfa_offset: 4096,
                fp_offset: -4096,
            },
        ],
    )
    .unwrap();
    // A function at address 0 with a non-ASCII name and nothing else.
    o.add_function("jit_ünïcode_名前", 0, 1).unwrap();
    o
}

/// A small object: what most JIT batches look like.
fn small_object(arch: Arch, base: u64, names: &[&str]) -> JitObject {
    let mut o = JitObject::with_arch(arch);
    for (n, name) in names.iter().enumerate() {
        let f = o.add_function(name, base + 64 * n as u64, 48).unwrap();
        let (push_end, setup_end, restore_end, ret_end) = frame::canonical(arch, 48).unwrap();
        o.set_frame_pointer(f, push_end, setup_end).unwrap();
        o.add_epilogue(f, restore_end, ret_end).unwrap();
        o.set_lines(
            f,
            "small.js",
            &rows(&[(0, 3 + n as u32), (8, 4 + n as u32)]),
        )
        .unwrap();
    }
    o
}

const LIVE: LiveCheck = LiveCheck {
    address: 0x5555_5555_a010,
    key: 0x9e37_79b9_7f4a_7c15,
};

/// Payloads for the damage tests: single objects with and without a live check, a bundle.
fn sample_payloads() -> Vec<Vec<u8>> {
    let rich = rich_object();
    let a = small_object(Arch::X86_64, 0x1000, &["a1", "a2"]);
    let b = small_object(Arch::X86_64, 0x9000, &["b1"]);
    vec![
        encode(&rich, Some(LIVE)).unwrap(),
        encode(&rich, None).unwrap(),
        encode_bundle(&[(&a, Some(LIVE)), (&b, None), (&rich, Some(LIVE))]).unwrap(),
        encode(&small_object(Arch::Aarch64, 0x4000_0000, &["arm"]), None).unwrap(),
        encode_bundle(&[(&with_sources(a), Some(LIVE)), (&b, None)]).unwrap(),
    ]
}

/// `o` with source texts: for its file, for a file no function names, and an empty one.
fn with_sources(mut o: JitObject) -> JitObject {
    o.set_source("small.js", "function a1() {\n  return 1;\n}\n")
        .unwrap();
    o.set_source("other/ünï.js", "// ü\r\n").unwrap();
    o.set_source("empty.js", "").unwrap();
    o
}

#[test]
fn round_trips_every_feature() {
    let rich = rich_object();
    for live in [Some(LIVE), None] {
        let bytes = encode(&rich, live).unwrap();
        let d = decode(&bytes).unwrap();
        assert_eq!(d.object, rich);
        assert_eq!(d.live, live);
    }
    // Every frame variant and several files are really in there.
    let kinds: Vec<_> = rich
        .functions()
        .iter()
        .map(|f| std::mem::discriminant(f.frame()))
        .collect();
    assert!(kinds.contains(&std::mem::discriminant(&Frame::Default)));
    assert!(kinds.contains(&std::mem::discriminant(&Frame::Rows(vec![]))));
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let o = small_object(arch, 0x10_0000, &["x", "y", "z"]);
        assert!(frame::is_canonical(
            o.functions().first().unwrap().frame(),
            arch,
            48
        ));
        let d = decode(&encode(&o, Some(LIVE)).unwrap()).unwrap();
        assert_eq!(d.object, o);
        assert_eq!(d.object.arch(), arch);
    }
}

#[test]
fn bundles_round_trip_in_order() {
    let a = small_object(Arch::X86_64, 0x1000, &["a1", "a2"]);
    let b = small_object(Arch::X86_64, 0x1000, &["b1"]); // same addresses: other objects may
    let rich = rich_object();
    let input = [
        (&a, Some(LIVE)),
        (&b, None),
        (&rich, Some(LiveCheck { address: 8, key: 1 })),
    ];
    let bytes = encode_bundle(&input).unwrap();
    let out = decode_all(&bytes).unwrap();
    assert_eq!(out.len(), 3);
    for ((o, live), d) in input.iter().zip(&out) {
        assert_eq!(&d.object, *o);
        assert_eq!(&d.live, live);
    }
    let e = decode(&bytes).unwrap_err();
    assert!(e.to_string().contains("holds 3 objects"), "{e}");
    // A bundle of one is exactly what encode writes.
    assert_eq!(
        encode_bundle(&[(&a, None)]).unwrap(),
        encode(&a, None).unwrap()
    );
}

/// A tiny deterministic generator (xorshift64*) for property tests.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Below `big` once in `rare` draws, else below `small`.
    fn mostly_below(&mut self, rare: u64, big: u64, small: u64) -> u64 {
        let n = if self.below(rare) == 0 { big } else { small };
        self.below(n)
    }
}

/// A random valid object: random calls of the model's setters, keeping those it accepts.
fn random_object(rng: &mut Rng) -> JitObject {
    let arch = if rng.below(4) == 0 {
        Arch::Aarch64
    } else {
        Arch::X86_64
    };
    let mut o = JitObject::with_arch(arch);
    let mut addr = rng.next() >> rng.below(64);
    let files = ["a.js", "b.py", "c/d/e.lua"];
    for n in 0..1 + rng.below(6) {
        let size = 1 + rng.mostly_below(8, 100_000, 300);
        addr = addr.wrapping_add(rng.below(1000));
        let name = format!("fn{n}_{}", rng.below(1000));
        let Ok(f) = o.add_function(&name, addr, size) else {
            continue;
        };
        addr = addr.wrapping_add(size);
        let size = size as u32;
        match rng.below(4) {
            0 => {}
            1 => {
                let p = 1 + rng.below(4) as u32;
                if o.set_frame_pointer(f, p, p + rng.below(4) as u32).is_ok() {
                    let mut at = p + 4;
                    for _ in 0..rng.below(3) {
                        let r = at + 1 + rng.below(20) as u32;
                        let _ = o.add_epilogue(f, r, r + 1 + rng.below(4) as u32);
                        at = r + 5;
                    }
                }
            }
            2 => {
                if let Some((p, s, r, e)) = frame::canonical(arch, size) {
                    o.set_frame_pointer(f, p, s).unwrap();
                    o.add_epilogue(f, r, e).unwrap();
                }
            }
            _ => {
                let mut rows = vec![UnwindRow::X86_64_ENTRY];
                let mut off = 0;
                for _ in 0..rng.below(5) {
                    off += 1 + rng.below(30) as u32;
                    let fp = rng.below(2) == 0;
                    rows.push(UnwindRow {
                        offset: off,
                        cfa_base: if fp { CfaBase::Fp } else { CfaBase::Sp },
                        cfa_offset: 16 + 8 * rng.below(100) as i32,
                        fp_offset: -16 - 8 * rng.below(10) as i32,
                    });
                }
                let _ = o.set_unwind(f, &rows);
            }
        }
        if rng.below(4) != 0 {
            let mut rs = Vec::new();
            let mut off = rng.below(3) as u32;
            for _ in 0..rng.below(20) {
                // Now and then a gap (line 0), never two in a row (the model refuses those).
                let gap = rng.below(5) == 0 && !rs.last().is_some_and(LineRow::is_gap);
                rs.push(LineRow {
                    offset: off,
                    line: if gap {
                        0
                    } else {
                        1 + rng.mostly_below(5, 1 << 32, 50) as u32 % u32::MAX
                    },
                });
                off += 1 + rng.mostly_below(5, 1000, 25) as u32;
            }
            let file = files[rng.below(3) as usize];
            let _ = o.set_lines(f, file, &rs);
        }
        for b in 0..rng.below(4) {
            let start = rng.below(u64::from(size)) as u32;
            let end = start + 1 + rng.below(u64::from(size - start)) as u32;
            let parent = (b > 0 && rng.below(2) == 0).then(|| rng.below(b) as u32);
            let _ = o.add_block(
                f,
                ["blk", "inl", "scope"][rng.below(3) as usize],
                start,
                end,
                parent,
            );
        }
    }
    o
}

#[test]
fn random_objects_round_trip() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut done = 0;
    for _ in 0..2000 {
        let o = random_object(&mut rng);
        if o.validate().is_err() {
            continue;
        }
        let live = (rng.below(2) == 0).then(|| LiveCheck {
            address: rng.next(),
            key: rng.next() | 1,
        });
        let bytes = encode(&o, live).unwrap();
        let d = decode(&bytes).unwrap();
        assert_eq!(d.object, o);
        assert_eq!(d.live, live);
        done += 1;
    }
    assert!(done > 1000, "only {done} random objects were valid");
}

/// Gap rows (line 0) round trip first, between lines, last, and across functions; a gap
/// leaves the line register at the last line, so the row after it takes one byte as usual:
/// a gap costs only its own row.
#[test]
fn gap_rows_round_trip_and_cost_only_their_own_row() {
    let with_rows = |a: &[LineRow], b: &[LineRow]| {
        let mut o = JitObject::with_arch(Arch::X86_64);
        let f = o.add_function("f", 0x1000, 32).unwrap();
        o.set_lines(f, "a.js", a).unwrap();
        let g = o.add_function("g", 0x1020, 32).unwrap();
        o.set_lines(g, "a.js", b).unwrap();
        o
    };
    let (l, gap) = (LineRow::new, LineRow::gap);
    let plain = with_rows(&[l(0, 40), l(9, 41)], &[l(0, 42)]);
    let gaps = with_rows(
        &[gap(0), l(2, 40), gap(6), l(9, 41), gap(12)],
        &[gap(0), l(4, 42), gap(31)],
    );
    for o in [&plain, &gaps] {
        let bytes = encode(o, Some(LIVE)).unwrap();
        assert_eq!(decode(&bytes).unwrap().object, *o);
    }
    // The rows around the gaps take what they take without them.
    let mut between = with_rows(&[l(0, 40), gap(6), l(9, 41)], &[l(0, 42)]);
    let gap_len =
        |o: &JitObject| encode(o, None).unwrap().len() - encode(&plain, None).unwrap().len();
    // From line 40, a gap is an advance of -40: the escape, offset and line in one byte each.
    assert_eq!(gap_len(&between), 3);
    // A gap at the start of an object is line 1 + (-1): one special opcode.
    between = with_rows(&[gap(0), l(2, 40), l(9, 41)], &[l(0, 42)]);
    let first_gap = encode(&between, None).unwrap();
    assert_eq!(decode(&first_gap).unwrap().object, between);
    assert_eq!(gap_len(&between), 1);
}

/// Lines of a payload outside 0..2^32 and two gaps in a row are refused with their offsets.
#[test]
fn bad_gap_rows_are_refused_with_offsets() {
    // Line register 1, advance -2: line -1.
    let mut w = header(&["x.js"]);
    w.uleb(1);
    w.text("f");
    w.sleb(0x1000);
    w.uleb(8);
    w.u8(super::encode::FUNCTION_LINES);
    w.uleb(0); // file
    w.uleb(1);
    let row_at = w.buf.len();
    w.u8(0);
    w.uleb(0);
    w.sleb(-2);
    let e = decode_all(&w.buf).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("object 0: function 0 `f`: line row 0: line 1 + -2 is outside 0..=2^32 - 1 (0: a gap), at byte offset {row_at}")
    );

    // Gaps at offsets 0 and 1: each is line 1 + (-1), the register staying at 1.
    let mut w = header(&["x.js"]);
    w.uleb(1);
    w.text("f");
    w.sleb(0x1000);
    w.uleb(8);
    w.u8(super::encode::FUNCTION_LINES);
    let lines_at = w.buf.len();
    w.uleb(0); // file
    w.uleb(2);
    w.u8(0);
    w.uleb(0);
    w.sleb(-1);
    w.u8(0);
    w.uleb(1);
    w.sleb(-1);
    let e = decode_all(&w.buf).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("object 0: function 0 `f`: line row 1 at offset 1 is a gap (line 0) right after the gap of row 0 at offset 0: a gap lasts up to the next row with a line, so leave out row 1, at byte offset {lines_at}")
    );
}

#[test]
fn random_register_rules_round_trip() {
    use crate::model::RegisterRule as R;
    // Its own generators: the objects of `random_objects_round_trip` stay as they are.
    let (mut rng, mut rules_rng) = (Rng(0x1234_5678_9abc_def1), Rng(0x0bad_cafe_f00d_d00d));
    let (mut with_rules, mut refused) = (0, 0);
    for _ in 0..2000 {
        let mut o = random_object(&mut rng);
        if o.validate().is_err() || o.arch() != Arch::X86_64 {
            continue;
        }
        for i in 0..o.functions().len() {
            let f = FunctionId::from_index(i);
            let size = o.functions().get(f).unwrap().size();
            let mut off = 0u32;
            for _ in 0..rules_rng.below(6) {
                off += rules_rng.below(20) as u32;
                let rule = match rules_rng.below(4) {
                    0 => R::AtCfa(-8 * (1 + rules_rng.mostly_below(5, 1 << 22, 20) as i32)),
                    1 => R::InRegister(rules_rng.below(18) as u16),
                    2 => R::SameValue,
                    _ => R::Undefined,
                };
                let reg = rules_rng.below(18) as u16;
                match o.add_register_rule(f, off.min(size), reg, rule) {
                    Ok(()) => with_rules += 1,
                    Err(_) => refused += 1,
                }
            }
        }
        let bytes = encode(&o, None).unwrap();
        assert_eq!(decode(&bytes).unwrap().object, o);
    }
    assert!(
        with_rules > 1000 && refused > 100,
        "{with_rules} rules kept, {refused} refused"
    );
}

#[test]
fn call_sites_are_left_out() {
    let plain = small_object(Arch::X86_64, 0x1000, &["f", "g"]);
    let mut with = plain.clone();
    with.add_call_site(FunctionId::from_index(0), 2, CallTarget::Address(0x1000))
        .unwrap();
    with.add_tail_call(FunctionId::from_index(1), 3, CallTarget::Indirect)
        .unwrap();
    assert_ne!(with, plain);
    // The same bytes as without them, so the decoder gives the object without them.
    let bytes = encode(&with, None).unwrap();
    assert_eq!(bytes, encode(&plain, None).unwrap());
    assert_eq!(decode(&bytes).unwrap().object, plain);
}

#[test]
fn encoder_refuses_what_the_format_cannot_carry() {
    let mut o = small_object(Arch::X86_64, 0x1000, &["f", "g"]);
    o.add_variable(
        FunctionId::from_index(1),
        Variable {
            name: "x".into(),
            kind: VariableKind::Local,
            ty: BaseType::I64,
            location: Location::FrameOffset(-24),
        },
    )
    .unwrap();
    let e = encode(&o, None).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("`g`") && msg.contains("variable") && msg.contains("ELF"),
        "{msg}"
    );

    assert_eq!(
        encode(&JitObject::new(), None).unwrap_err(),
        Error::EmptyObject
    );
    let mut o = JitObject::with_arch(Arch::X86_64);
    o.add_function("a", 0x1000, 16).unwrap();
    o.add_function("b", 0x100f, 16).unwrap();
    assert!(matches!(encode(&o, None), Err(Error::Overlap { .. })));

    let x = small_object(Arch::X86_64, 0x1000, &["x"]);
    let y = small_object(Arch::Aarch64, 0x1000, &["y"]);
    let e = encode_bundle(&[(&x, None), (&y, None)]).unwrap_err();
    assert!(e.to_string().contains("one architecture"), "{e}");
    assert!(encode_bundle(&[])
        .unwrap_err()
        .to_string()
        .contains("at least one object"));
    let e = encode(
        &x,
        Some(LiveCheck {
            address: 0x1000,
            key: 0,
        }),
    )
    .unwrap_err();
    assert!(e.to_string().contains("key is 0"), "{e}");
}

#[test]
fn foreign_payloads_are_not_ours() {
    let elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0";
    assert_eq!(decode_all(elf), Err(DecodeError::NotOurs));
    assert_eq!(decode_all(b""), Err(DecodeError::NotOurs));
    assert_eq!(decode_all(b"JGC"), Err(DecodeError::NotOurs));
    assert_eq!(decode(&[0; 64]), Err(DecodeError::NotOurs));
}

#[test]
fn header_problems_are_named() {
    let good = encode(&small_object(Arch::X86_64, 0x1000, &["f"]), None).unwrap();
    let with = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        decode_all(&b).unwrap_err().to_string()
    };
    assert_eq!(
        with(4, 1),
        "format version 1 is not supported: this reader reads version 2 only, at byte offset 4"
    );
    assert!(with(5, 3).contains("unknown architecture code 3"));
    assert!(with(6, 4).contains("pointer size 4 does not match x86-64"));
    assert!(with(7, 0x80).contains("unknown header flags 0x80"));
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(decode_all(&trailing)
        .unwrap_err()
        .to_string()
        .starts_with("object 1: "));
}

/// A payload header for x86-64 and the start of object 0: no live check, then `strings` as
/// its string table (the function count comes next).
fn header(strings: &[&str]) -> Writer {
    header_flags(0, strings)
}

/// [`header`] with object flags `flags` (without a live check).
fn header_flags(flags: u8, strings: &[&str]) -> Writer {
    let mut w = Writer::default();
    w.bytes(&MAGIC);
    w.bytes(&[VERSION, 62, 8, 0]);
    w.u8(flags);
    w.uleb(strings.len() as u64);
    for s in strings {
        w.text(s);
    }
    w
}

/// One function `f` (16 bytes at 0x1000, no lines): the end of a record.
fn one_function(w: &mut Writer) {
    w.uleb(1);
    w.text("f");
    w.sleb(0x1000);
    w.uleb(16);
    w.u8(0);
}

#[test]
fn sources_round_trip_in_order() {
    let plain = small_object(Arch::X86_64, 0x1000, &["a1", "a2"]);
    let o = with_sources(plain.clone());
    for live in [Some(LIVE), None] {
        let bytes = encode(&o, live).unwrap();
        let d = decode(&bytes).unwrap();
        assert_eq!((&d.object, d.live), (&o, live));
        assert_eq!(
            d.object.sources().collect::<Vec<_>>(),
            o.sources().collect::<Vec<_>>()
        );
        // The flag, and the live check where it always is.
        let flags = bytes[HEADER_LEN];
        assert_eq!(flags & super::encode::OBJECT_SOURCES, 2);
        assert_eq!(flags & super::encode::OBJECT_LIVE != 0, live.is_some());
    }
    // Without sources: the flag clear (the bytes of before: see the worked examples).
    assert_eq!(encode(&plain, None).unwrap()[HEADER_LEN], 0);
    // A bundle: each object its own table, the same file in both.
    let mut b = small_object(Arch::X86_64, 0x9000, &["b1"]);
    b.set_source("small.js", "other text\n").unwrap();
    let input = [(&o, Some(LIVE)), (&plain, None), (&b, None)];
    let out = decode_all(&encode_bundle(&input).unwrap()).unwrap();
    for ((o, _), d) in input.iter().zip(&out) {
        assert_eq!(&d.object, *o);
    }
    // Records appended one by one make the same payload.
    let mut p = super::header(Arch::X86_64).to_vec();
    for (o, live) in input {
        encode_record(&mut p, o, live).unwrap();
    }
    assert_eq!(p, encode_bundle(&input).unwrap());
}

#[test]
fn source_file_names_follow_the_names_functions_use_in_the_string_table() {
    let mut o = small_object(Arch::X86_64, 0x1000, &["a1"]);
    o.add_block(FunctionId::from_index(0), "blk", 2, 8, None)
        .unwrap();
    o.set_source("unused.js", "u").unwrap();
    o.set_source("small.js", "s").unwrap();
    o.set_source("blk", "a block's name as a file name")
        .unwrap();
    let bytes = encode(&o, None).unwrap();
    let mut r = wire::Reader::new(&bytes[HEADER_LEN + 1..]);
    let count = r.uleb("count").unwrap();
    let table: Vec<&str> = (0..count).map(|_| r.text("string").unwrap()).collect();
    assert_eq!(table, ["small.js", "blk", "unused.js"]);
    // The source table: 3 entries naming strings 2, 0, 1.
    assert_eq!(r.uleb("n").unwrap(), 3);
    let mut files = Vec::new();
    for _ in 0..3 {
        files.push(r.uleb("index").unwrap());
        r.blob("text").unwrap();
    }
    assert_eq!(files, [2, 0, 1]);
    assert_eq!(decode(&bytes).unwrap().object, o);
}

#[test]
fn bad_source_tables_are_refused_with_offsets() {
    let sources = super::encode::OBJECT_SOURCES;
    // The table starts right after the string table: offset 8 + 1 + 1 + 2 + 3 + 2 = 17.
    let table = |entries: &dyn Fn(&mut Writer)| {
        let mut w = header_flags(sources, &["a", "bb", "a"]);
        entries(&mut w);
        one_function(&mut w);
        decode_all(&w.buf)
    };
    let good = table(&|w| {
        w.uleb(2);
        w.uleb(1);
        w.blob("text of bb\n");
        w.uleb(2);
        w.blob("");
    })
    .unwrap();
    assert_eq!(
        good[0].object.sources().collect::<Vec<_>>(),
        [("bb", "text of bb\n"), ("a", "")]
    );
    let refused = |entries: &dyn Fn(&mut Writer)| table(entries).unwrap_err().to_string();
    // The same file twice: by the same index, or by two indices of equal strings.
    for second in [0, 2] {
        let e = refused(&|w| {
            w.uleb(2);
            w.uleb(0);
            w.blob("x");
            w.uleb(second);
            w.blob("y");
        });
        assert_eq!(
            e,
            "object 0: source 1: file `a` has a source text already (source 0): one text per file, at byte offset 21"
        );
    }
    let e = refused(&|w| {
        w.uleb(1);
        w.uleb(3);
        w.blob("x");
    });
    assert_eq!(
        e,
        "object 0: source 0: file index 3 is outside the string table (3 strings), at byte offset 18"
    );
    // Text that is not UTF-8, has a NUL, or is longer than the limit.
    for (bytes, want) in [
        (
            &b"ok\xff"[..],
            "the source text of `bb` is not valid UTF-8, at byte offset 22",
        ),
        (
            b"o\0k",
            "the source text of `bb` contains a NUL byte, at byte offset 21",
        ),
    ] {
        let e = refused(&|w| {
            w.uleb(1);
            w.uleb(1);
            w.uleb(bytes.len() as u64);
            w.bytes(bytes);
        });
        assert_eq!(e, format!("object 0: {want}"));
    }
    let e = refused(&|w| {
        w.uleb(1);
        w.uleb(1);
        w.uleb(MAX_TEXT_LEN + 1);
        w.bytes(&[b'x'; 64]);
    });
    assert_eq!(
        e,
        "object 0: the source text of `bb` is 1048577 bytes long, above the format's limit of 1048576, at byte offset 19"
    );
    // A table announced but empty; a count beyond the bytes that remain.
    let e = refused(&|w| w.uleb(0));
    assert_eq!(
        e,
        "object 0: the source count is 0 although the object's flags announce a source table, at byte offset 17"
    );
    let e = refused(&|w| w.uleb(1000));
    assert!(e.contains("the source count 1000 cannot fit in the"), "{e}");
    // A reader of before (bit 1 reserved) refused such payloads by the flag; unknown bits
    // still are.
    let mut w = header_flags(0x04, &[]);
    one_function(&mut w);
    let e = decode_all(&w.buf).unwrap_err().to_string();
    assert_eq!(e, "object 0: unknown object flags 0x04, at byte offset 8");
}

/// The source-table example of docs/FORMAT.md: code compiled from a string.
fn doc_source_example() -> JitObject {
    let mut o = JitObject::with_arch(Arch::X86_64);
    let f = o.add_function("f", 0x1000, 16).unwrap();
    o.set_lines(f, "<repl 1>", &rows(&[(0, 1)])).unwrap();
    o.set_source("<repl 1>", "f = () => 42\n").unwrap();
    o
}

#[test]
fn format_md_shows_the_source_table_example() {
    let o = doc_source_example();
    let bytes = encode(&o, None).unwrap();
    assert_eq!(decode(&bytes).unwrap().object, o);
    // Without the source: the flag clear, the table (0x13-0x22) gone, nothing else moved.
    let mut plain = JitObject::with_arch(Arch::X86_64);
    let f = plain.add_function("f", 0x1000, 16).unwrap();
    plain.set_lines(f, "<repl 1>", &rows(&[(0, 1)])).unwrap();
    assert_ne!(plain, o);
    let mut want = bytes.clone();
    want[HEADER_LEN] = 0;
    want.drain(0x13..0x23);
    assert_eq!(encode(&plain, None).unwrap(), want);
    assert_eq!(want.len(), 29);
    let dump = hex_dump(&bytes);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md");
    let doc = std::fs::read_to_string(path).unwrap();
    assert!(
        doc.contains(&dump),
        "docs/FORMAT.md must show the encoder's output for the source-table example ({} bytes):\n{dump}",
        bytes.len()
    );
}

#[test]
fn source_text_sizes() {
    // A one-function object with 20 line rows; its source: 1 KiB of 40 lines.
    let mut o = JitObject::with_arch(Arch::X86_64);
    let f = o
        .add_function("jit_function_00000000", 0x7f00_0000_0000, 200)
        .unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    o.add_epilogue(f, 199, 200).unwrap();
    let pairs: Vec<(u32, u32)> = (0..20).map(|i| (i * 9, 1 + 2 * i)).collect();
    o.set_lines(f, "app/script.js", &rows(&pairs)).unwrap();
    let without = encode(&o, Some(LIVE)).unwrap().len();
    let line = "    let value = compute(a, b);\n"; // 25.6 bytes a line on average below
    let mut text = String::new();
    while text.len() + line.len() <= 1024 {
        text.push_str(line);
    }
    text.push_str(&"x".repeat(1023 - text.len()));
    text.push('\n');
    assert_eq!(text.len(), 1024);
    o.set_source("app/script.js", &text).unwrap();
    let with = encode(&o, Some(LIVE)).unwrap().len();
    // Count 1, string index 1, blob length 2 (1024 >= 128), the text; the file name is in
    // the string table already.
    assert_eq!(with - without, 1 + 1 + 2 + 1024);
    println!(
        "compact, 1 function, 20 rows: {without} B; with a 1 KiB source: {with} B (+{})",
        with - without
    );
}

#[test]
fn model_rules_are_enforced_with_offsets() {
    // Two overlapping functions: b starts 8 bytes before a ends.
    let mut w = header(&[]);
    w.uleb(2);
    w.text("a");
    w.sleb(0x1000);
    w.uleb(16);
    w.u8(0);
    w.text("b");
    w.sleb(-8);
    w.uleb(16);
    w.u8(0);
    let e = decode_all(&w.buf).unwrap_err().to_string();
    assert_eq!(
        e,
        "object 0: functions `a` and `b` overlap: functions of one object must not share addresses, at byte offset 8"
    );

    // A line row outside its function.
    let mut w = header(&["x.js"]);
    let rows_at = w.buf.len() + 7;
    w.uleb(1);
    w.text("f");
    w.sleb(0x1000);
    w.uleb(8);
    w.u8(super::encode::FUNCTION_LINES);
    w.uleb(0); // file
    w.uleb(2);
    w.u8(0);
    w.uleb(0);
    w.sleb(0);
    w.u8(0);
    w.uleb(8);
    w.sleb(1);
    let e = decode_all(&w.buf).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("object 0: function 0 `f`: line row 1 at offset 8 is outside the function (size 8), at byte offset {rows_at}")
    );

    // A block whose parent comes after it, and a string index out of range.
    for (parent, name_index, want) in [
        (2, 0, "block `x.js`: parent block 1 does not exist"),
        (
            0,
            7,
            "a block name index 7 is outside the string table (1 strings)",
        ),
    ] {
        let mut w = header(&["x.js"]);
        w.uleb(1);
        w.text("f");
        w.sleb(0x1000);
        w.uleb(8);
        w.u8(super::encode::FUNCTION_BLOCKS);
        w.uleb(1);
        w.uleb(name_index);
        w.uleb(0);
        w.uleb(4);
        w.uleb(parent);
        let e = decode_all(&w.buf).unwrap_err().to_string();
        assert!(e.starts_with("object 0: function 0 `f`: "), "{e}");
        assert!(e.contains(want), "{e}");
    }

    // A name that is not UTF-8, and one with a NUL.
    for (name, want) in [
        (&b"a\xffb"[..], "is not valid UTF-8, at byte offset 13"),
        (b"a\0b", "contains a NUL byte, at byte offset 13"),
    ] {
        let mut w = header(&[]);
        w.uleb(1);
        w.uleb(3);
        w.bytes(name);
        w.bytes(&[0, 1, 0]);
        let e = decode_all(&w.buf).unwrap_err().to_string();
        assert_eq!(e, format!("object 0: function 0: a function name {want}"));
    }
}

#[test]
fn every_truncation_is_an_error() {
    // A payload is records until its end, so a cut exactly between two records leaves a valid
    // payload of the records before it (the entry's size is authoritative); any other cut is
    // an error.
    for p in sample_payloads() {
        let all = decode_all(&p).unwrap();
        for len in 0..p.len() {
            match decode_all(&p[..len]) {
                Err(DecodeError::NotOurs) => assert!(len < 4, "prefix {len} refused as not ours"),
                Err(DecodeError::Invalid(why)) => {
                    assert!(why.contains(", at byte offset "), "{why}")
                }
                Ok(some) => assert!(
                    some.len() < all.len() && all.starts_with(&some),
                    "a prefix of {len} of {} bytes decoded to something else",
                    p.len()
                ),
            }
        }
    }
}

#[test]
fn byte_flips_give_an_error_or_a_consistent_object() {
    let mut accepted = 0;
    let mut refused = 0;
    for p in sample_payloads() {
        for at in 0..p.len() {
            for mask in [0x01u8, 0x02, 0x10, 0x40, 0x80, 0xff] {
                let mut b = p.clone();
                b[at] ^= mask;
                match decode_all(&b) {
                    Ok(objects) => {
                        accepted += 1;
                        let input: Vec<_> = objects.iter().map(|d| (&d.object, d.live)).collect();
                        let again = decode_all(&encode_bundle(&input).unwrap()).unwrap();
                        assert_eq!(again, objects);
                    }
                    Err(DecodeError::NotOurs) => assert!(at < 4),
                    Err(DecodeError::Invalid(_)) => refused += 1,
                }
            }
        }
    }
    // Both outcomes happen: flips in addresses and keys stay valid, flips in structure do not.
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn inflated_counts_fail_without_allocating() {
    let huge = [u64::from(u32::MAX), u64::MAX, MAX_COUNT, MAX_COUNT + 1];
    for &n in &huge {
        // The string count.
        let mut w = header(&[]);
        w.buf.truncate(w.buf.len() - 1);
        w.uleb(n);
        w.bytes(&[1, b'x']);
        let e = decode_all(&w.buf).unwrap_err().to_string();
        assert!(e.contains("the string count"), "{e}");
        // The function count.
        let mut w = header(&[]);
        w.uleb(n);
        w.bytes(&[0; 32]);
        let e = decode_all(&w.buf).unwrap_err().to_string();
        assert!(e.contains("object 0: the function count"), "{e}");
        // Line rows, unwind rows, epilogues and blocks of one function; and a string length.
        for (flags, prefix) in [
            (super::encode::FUNCTION_LINES, vec![0u64]),
            (frame::KIND_ROWS, vec![]),
            (frame::KIND_FP, vec![1, 3]),
            (super::encode::FUNCTION_BLOCKS, vec![]),
        ] {
            let mut w = header(&["x.js"]);
            w.uleb(1);
            w.text("f");
            w.sleb(0x1000);
            w.uleb(100);
            w.u8(flags);
            for v in prefix {
                w.uleb(v);
            }
            w.uleb(n);
            w.bytes(&[1; 40]);
            let e = decode_all(&w.buf).unwrap_err().to_string();
            assert!(
                e.contains("count") && (e.contains("cannot fit") || e.contains("limit")),
                "{e}"
            );
        }
        let mut w = header(&[]);
        w.uleb(1);
        w.uleb(n);
        w.bytes(b"name");
        let e = decode_all(&w.buf).unwrap_err().to_string();
        assert!(e.contains("a function name is"), "{e}");
    }
}

/// The function of the size goal: 8 line rows and a standard frame-pointer frame.
fn goal_function(o: &mut JitObject, n: u32, name: &str) {
    let start = 0x7f00_0000_0000 + 96 * u64::from(n);
    let f = o.add_function(name, start, 90).unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    o.add_epilogue(f, 89, 90).unwrap();
    let base = 1 + 12 * n;
    let pairs = [
        (0, 0),
        (4, 1),
        (9, 1),
        (17, 2),
        (30, 4),
        (41, 3),
        (60, 5),
        (80, 7),
    ];
    let rows: Vec<_> = pairs
        .iter()
        .map(|&(offset, d)| LineRow {
            offset,
            line: base + d,
        })
        .collect();
    o.set_lines(f, "app/script.js", &rows).unwrap();
}

#[test]
fn sizes_meet_the_goal() {
    let name = |n: u32| format!("jit_function_{n:08}"); // 21 characters
    let object_of = |count: u32| {
        let mut o = JitObject::with_arch(Arch::X86_64);
        for n in 0..count {
            goal_function(&mut o, n, &name(n));
        }
        o
    };
    let name_len = name(0).len();
    let one = encode(&object_of(1), Some(LIVE)).unwrap().len();
    let one_no_live = encode(&object_of(1), None).unwrap().len();
    let two = encode(&object_of(2), Some(LIVE)).unwrap().len();
    let thousand = encode(&object_of(1000), Some(LIVE)).unwrap().len();
    // Fixed part: header 8, object flags 1, live check 16, string table 1 + 1 + 13
    // ("app/script.js"), function count 1 (2 bytes from 128 functions on).
    let fixed_no_live = 8 + 1 + 15 + 1;
    let record = one_no_live - fixed_no_live;
    let per_function = (thousand - fixed_no_live - 16 - 1) as f64 / 1000.0;
    let amortised = thousand as f64 / 1000.0;
    println!(
        "compact sizes, function with a {name_len}-character name, 8 line rows, standard frame-pointer frame:\n  \
         function record: {record} B = name {name_len} + {} B\n  \
         alone in an object: {one} B payload with live check, {one_no_live} B without\n  \
         second function in the same object: {} B\n  \
         1000 functions in one object: {thousand} B, {per_function:.2} B per function record, \
         {amortised:.2} B per function amortised (all headers included)",
        record - name_len,
        two - one
    );
    assert!(record <= 24 + name_len, "record {record}");
    assert!(two - one <= 24 + name_len);
    assert!(amortised <= (24 + name_len) as f64, "amortised {amortised}");
    // The thousand decode back to what was encoded.
    let o = object_of(1000);
    assert_eq!(decode(&encode(&o, None).unwrap()).unwrap().object, o);
}

#[test]
fn string_table_holds_each_name_once_in_order_of_first_use() {
    // More distinct names than the encoder scans linearly, revisited out of order, block
    // names equal to file names: the table must still be the distinct names in first-use
    // order (file, then blocks, function by function), and every reference must resolve.
    let files: Vec<String> = (0..13).map(|i| format!("dir/file{i}.js")).collect();
    let mut o = JitObject::with_arch(Arch::X86_64);
    let mut expected: Vec<String> = Vec::new();
    let mut note = |s: &str| {
        if !expected.iter().any(|e| e == s) {
            expected.push(s.to_string());
        }
    };
    for i in 0..40u32 {
        let f = o
            .add_function(&format!("f{i}"), 0x1000 + 64 * u64::from(i), 64)
            .unwrap();
        let file = &files[(i as usize * 7) % files.len()];
        o.set_lines(f, file, &rows(&[(0, i + 1), (8, i + 2)]))
            .unwrap();
        note(file);
        for b in 0..i % 3 {
            let name = if b == 0 {
                &files[(i as usize) % 5]
            } else {
                "inner"
            };
            o.add_block(f, name, 4 * b, 40, b.checked_sub(1)).unwrap();
            note(name);
        }
    }
    let bytes = encode(&o, None).unwrap();
    let mut r = wire::Reader::new(&bytes[HEADER_LEN + 1..]);
    let count = r.uleb("count").unwrap();
    let table: Vec<&str> = (0..count).map(|_| r.text("string").unwrap()).collect();
    assert_eq!(table, expected);
    assert_eq!(decode(&bytes).unwrap().object, o);
}

#[test]
fn many_functions_decode() {
    // The scale of the later benchmark: 100,000 functions in 100 objects of one payload.
    let objects: Vec<JitObject> = (0..100)
        .map(|k| {
            let mut o = JitObject::with_arch(Arch::X86_64);
            for n in 0..1000 {
                goal_function(&mut o, k * 1000 + n, &format!("f{k}_{n}"));
            }
            o
        })
        .collect();
    let input: Vec<_> = objects
        .iter()
        .enumerate()
        .map(|(k, o)| {
            (
                o,
                Some(LiveCheck {
                    address: 0x1000 + 8 * k as u64,
                    key: 1 + k as u64,
                }),
            )
        })
        .collect();
    let bytes = encode_bundle(&input).unwrap();
    let out = decode_all(&bytes).unwrap();
    assert_eq!(out.len(), 100);
    assert!(out.iter().zip(&objects).all(|(d, o)| &d.object == o));
}

/// The worked example of docs/FORMAT.md.
fn doc_example() -> (JitObject, LiveCheck) {
    let mut o = JitObject::with_arch(Arch::X86_64);
    let f = o.add_function("fib", 0x7f00_0000_1000, 48).unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    o.add_epilogue(f, 47, 48).unwrap();
    o.set_lines(f, "fib.js", &rows(&[(0, 1), (4, 2), (16, 3), (30, 2)]))
        .unwrap();
    o.add_block(f, "loop", 12, 40, None).unwrap();
    let g = o.add_function("add", 0x7f00_0000_1040, 24).unwrap();
    o.set_unwind(
        g,
        &[
            UnwindRow::X86_64_ENTRY,
            UnwindRow {
                offset: 4,
                cfa_base: CfaBase::Sp,
                cfa_offset: 48,
                fp_offset: 0,
            },
        ],
    )
    .unwrap();
    o.set_lines(g, "lib.js", &rows(&[(0, 40), (9, 41)]))
        .unwrap();
    (
        o,
        LiveCheck {
            address: 0x5555_5555_8010,
            key: 0x0123_4567_89ab_cdef,
        },
    )
}

fn hex_dump(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
        out.push_str(&format!("{:04x}: {}\n", i * 16, hex.join(" ")));
    }
    out
}

#[test]
fn format_md_shows_real_encoder_output() {
    let (o, live) = doc_example();
    let bytes = encode(&o, Some(live)).unwrap();
    assert_eq!(decode(&bytes).unwrap().object, o);
    let dump = hex_dump(&bytes);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md");
    let doc = std::fs::read_to_string(path).unwrap();
    assert!(
        doc.contains(&dump),
        "docs/FORMAT.md must show the encoder's output for the worked example ({} bytes):\n{dump}",
        bytes.len()
    );
}

/// Writes the sample payloads as fuzzing seeds when `JIT_GDB_FUZZ_SEEDS` names a directory
/// (scripts/fuzz.sh does); always checks that they decode.
#[test]
fn seeds_decode() {
    let mut all = sample_payloads();
    all.push(encode(&doc_example().0, Some(doc_example().1)).unwrap());
    let mut rng = Rng(7);
    while all.len() < 40 {
        let o = random_object(&mut rng);
        if o.validate().is_ok() {
            all.push(encode(&o, (rng.below(2) == 0).then_some(LIVE)).unwrap());
        }
    }
    for p in &all {
        assert!(decode_all(p).is_ok());
    }
    if let Some(dir) = std::env::var_os("JIT_GDB_FUZZ_SEEDS") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, p) in all.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), p).unwrap();
        }
    }
}

/// An object whose functions save registers: every rule kind, with and without lines and
/// blocks.
fn saver_object() -> JitObject {
    use crate::arch::x86_64::{R12, R13, R14, RBX};
    use crate::model::RegisterRule as R;
    let mut o = JitObject::with_arch(Arch::X86_64);
    let f = o.add_function("saver", 0x7f00_0000_1000, 64).unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    o.add_register_rule(f, 6, R12, R::AtCfa(-24)).unwrap();
    o.add_register_rule(f, 8, R13, R::AtCfa(-32)).unwrap();
    o.add_register_rule(f, 8, RBX, R::SameValue).unwrap();
    o.add_register_rule(f, 40, R13, R::InRegister(R14)).unwrap();
    o.add_register_rule(f, 60, R12, R::Undefined).unwrap();
    o.set_lines(f, "s.js", &rows(&[(0, 1), (8, 2)])).unwrap();
    o.add_block(f, "inner", 8, 40, None).unwrap();
    let g = o.add_function("plain", 0x7f00_0000_1040, 32).unwrap();
    o.set_frame_pointer(g, 1, 4).unwrap();
    let h = o.add_function("far", 0x7f00_0000_2000, 0x10_0000).unwrap();
    o.add_register_rule(h, 0x8_0000, R15_FOR_TEST, R::AtCfa(-(8 << 20)))
        .unwrap();
    o
}

const R15_FOR_TEST: u16 = crate::arch::x86_64::R15;

#[test]
fn register_rules_round_trip() {
    let o = saver_object();
    let bytes = encode(&o, Some(LIVE)).unwrap();
    let d = decode(&bytes).unwrap();
    assert_eq!(d.object, o);
    let f = d.object.functions().first().unwrap();
    assert_eq!(f.register_rules().len(), 5);
    // Without rules a function's bytes are what they were: the flag adds fields only.
    let mut bare = JitObject::with_arch(Arch::X86_64);
    let g = bare.add_function("plain", 0x7f00_0000_1040, 32).unwrap();
    bare.set_frame_pointer(g, 1, 4).unwrap();
    let plain = encode(&bare, None).unwrap();
    assert!(!plain.is_empty());
    let flags_at = plain.len() - 1;
    assert_eq!(plain[flags_at] & 0x10, 0);
}

#[test]
fn bad_register_rules_are_refused_with_offsets() {
    // One function with the register-rule flag and the given rule bytes.
    let record = |rule: &[u64]| {
        let mut w = header(&[]);
        w.uleb(1);
        w.text("f");
        w.sleb(0x1000);
        w.uleb(16);
        w.u8(0x10);
        for &n in rule {
            w.uleb(n);
        }
        w.buf
    };
    let err = |rule: &[u64]| decode(&record(rule)).unwrap_err().to_string();
    // count 1: offset 4, r12, saved at CFA - 16 (code 2 << 2): fine.
    let ok = decode(&record(&[1, 4, 12, 2 << 2])).unwrap();
    assert_eq!(
        ok.object.functions().first().unwrap().register_rules()[0].rule,
        crate::model::RegisterRule::AtCfa(-16)
    );
    let e = err(&[0]);
    assert!(e.contains("register rule count is 0"), "{e}");
    let e = err(&[1, 4, 12, (1 << 2) | 2]);
    assert!(e.contains("rule code 0x6 is no rule"), "{e}");
    // The model's checks, at the rule's offset, naming the function.
    let e = err(&[1, 4, 7, 2 << 2]);
    assert!(e.contains("rsp (7)") && e.contains("`f`"), "{e}");
    let e = err(&[1, 20, 12, 2 << 2]);
    assert!(e.contains("outside the function"), "{e}");
    let e = err(&[1, 4, 12, 1 << 2]);
    assert!(e.contains("CFA-8 is not a save slot"), "{e}");
    // Truncated.
    let mut cut = record(&[1, 4, 12, 2 << 2]);
    cut.pop();
    assert!(decode(&cut).is_err());
}

/// The example of docs/FORMAT.md "With register rules": `g` at 0x2000, 48 bytes, canonical
/// frame-pointer frame, `push r12` ending at 6 (r12 at CFA - 24), `pop r12` ending at 45.
fn doc_register_example() -> JitObject {
    let mut o = JitObject::with_arch(Arch::X86_64);
    let f = o.add_function("g", 0x2000, 48).unwrap();
    o.set_frame_pointer(f, 1, 4).unwrap();
    o.add_epilogue(f, 47, 48).unwrap();
    o.add_register_rule(
        f,
        6,
        crate::arch::x86_64::R12,
        crate::model::RegisterRule::AtCfa(-24),
    )
    .unwrap();
    o.add_register_rule(
        f,
        45,
        crate::arch::x86_64::R12,
        crate::model::RegisterRule::SameValue,
    )
    .unwrap();
    o
}

#[test]
fn format_md_shows_the_register_rules_example() {
    let o = doc_register_example();
    let bytes = encode(&o, None).unwrap();
    assert_eq!(decode(&bytes).unwrap().object, o);
    let dump = hex_dump(&bytes);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMAT.md");
    let doc = std::fs::read_to_string(path).unwrap();
    assert!(
        doc.contains(&dump),
        "docs/FORMAT.md must show the encoder's output for the register-rules example ({} bytes):\n{dump}",
        bytes.len()
    );
}

/// aarch64 objects in compact records: the header states the architecture, and every
/// frame description an aarch64 JIT gives (the canonical stp/mov/ldp frame in kind 1, other
/// frame-record layouts in kind 2, explicit rows with the entry CFA = sp + 0, leaf rows)
/// and its register rules (x19-x28, x30, the CFA - 8 slot) come back as they were, with the
/// rows the aarch64 model makes of them.
#[test]
fn aarch64_objects_round_trip() {
    use crate::arch::aarch64::{self, X19, X30};
    use crate::model::RegisterRule as R;
    let mut o = JitObject::with_arch(Arch::Aarch64);
    let canonical = o.add_function("canonical", 0x4000_1000, 40).unwrap();
    o.set_frame_pointer(canonical, 4, 8).unwrap();
    o.add_epilogue(canonical, 36, 40).unwrap();
    o.set_lines(canonical, "a.js", &rows(&[(0, 1), (8, 2), (36, 3)]))
        .unwrap();
    let two = o.add_function("two_exits", 0x4000_1040, 48).unwrap();
    o.set_frame_pointer(two, 4, 8).unwrap();
    o.add_epilogue(two, 20, 24).unwrap();
    o.add_epilogue(two, 44, 48).unwrap();
    let leaf = o.add_function("leaf", 0x4000_1080, 16).unwrap();
    let sp = |offset, cfa_offset| UnwindRow {
        offset,
        cfa_base: CfaBase::Sp,
        cfa_offset,
        fp_offset: 0,
    };
    o.set_unwind(leaf, &[sp(0, 0), sp(4, 16), sp(12, 0)])
        .unwrap();
    o.add_register_rule(leaf, 4, X19, R::AtCfa(-16)).unwrap();
    o.add_register_rule(leaf, 4, X19 + 1, R::AtCfa(-8)).unwrap();
    o.add_register_rule(leaf, 12, X19, R::SameValue).unwrap();
    let lr = o.add_function("lr_only", 0x4000_10a0, 20).unwrap();
    o.set_unwind(lr, &[sp(0, 0), sp(4, 16), sp(12, 0)]).unwrap();
    o.add_register_rule(lr, 4, X30, R::AtCfa(-16)).unwrap();
    o.add_register_rule(lr, 8, 28, R::InRegister(9)).unwrap();
    o.add_register_rule(lr, 12, X30, R::SameValue).unwrap();
    o.add_function("default", 0x4000_1100, 16).unwrap();

    let bytes = encode(&o, Some(LIVE)).unwrap();
    assert_eq!(&bytes[..HEADER_LEN], &super::header(Arch::Aarch64)[..]);
    assert_eq!(bytes[5], 183, "the header's architecture byte: EM_AARCH64");
    let d = decode(&bytes).unwrap();
    assert_eq!(d.object, o);
    assert_eq!(d.object.arch(), Arch::Aarch64);
    let f = |name: &str| {
        d.object
            .functions()
            .iter()
            .find(|f| f.name() == name)
            .unwrap()
    };
    // The canonical layout costs no byte: kind 1 made the aarch64 rows.
    assert!(frame::is_canonical(
        f("canonical").frame(),
        Arch::Aarch64,
        40
    ));
    let at = |row: UnwindRow, offset| UnwindRow { offset, ..row };
    assert_eq!(
        f("canonical").frame().rows(Arch::Aarch64, 40),
        [
            aarch64::ENTRY,
            at(aarch64::PUSHED, 4),
            at(aarch64::FRAME_SET_UP, 8),
            at(aarch64::ENTRY, 36),
        ]
    );
    assert_eq!(f("lr_only").register_rules().len(), 3);
    assert_eq!(
        f("leaf").register_rules()[1],
        crate::model::SavedRegister {
            offset: 4,
            reg: X19 + 1,
            rule: R::AtCfa(-8)
        }
    );
    // The x86-64 canonical offsets are no aarch64 canonical frame: kind 2, still exact.
    let mut x = JitObject::with_arch(Arch::Aarch64);
    let g = x.add_function("x86_like", 0x4000_2000, 40).unwrap();
    x.set_frame_pointer(g, 1, 4).unwrap();
    x.add_epilogue(g, 39, 40).unwrap();
    assert!(!frame::is_canonical(
        x.functions().first().unwrap().frame(),
        Arch::Aarch64,
        40
    ));
    assert_eq!(decode(&encode(&x, None).unwrap()).unwrap().object, x);
}

/// A payload whose header says x86-64 but whose rules name aarch64-only registers is
/// refused naming the problem: rules are checked against the payload's architecture.
#[test]
fn rules_are_checked_against_the_payload_architecture() {
    use crate::model::RegisterRule as R;
    let mut o = JitObject::with_arch(Arch::Aarch64);
    let f = o.add_function("arm", 0x4000_1000, 32).unwrap();
    o.add_register_rule(f, 4, 19, R::AtCfa(-8)).unwrap();
    let mut bytes = encode(&o, None).unwrap();
    bytes[5] = 62;
    let e = decode(&bytes).unwrap_err().to_string();
    assert!(e.contains("x19") || e.contains("register 19"), "{e}");
}
