//! The minimal in-memory ELF payload: symbols, DWARF lines and variables, CFI. GDB and LLDB
//! read it natively.
//!
//! The payload is a relocatable x86-64 object whose ALLOC sections (NOBITS `.text`, one per
//! run of adjacent functions) sit at the code's real addresses, with no relocations: the
//! addresses in the symbols, DWARF and CFI are final. See `writer.rs` for the section list.
//! The plan (`layout::Layout`: address order, `.text` runs, compile units) is made first;
//! each section is then built from it (`dwarf.rs`, `cfi.rs`, `gdb_index.rs`) and the file
//! written in one pass (`writer.rs`), by one writer whatever the object's size. `growing/`
//! appends objects so encoded to a payload that grows in place (see there).
//!
//! Size, per function of the benchmark shape (1,000 adjacent functions in one object, 8 line
//! rows, frame-pointer frame): 24 bytes of symbol, 14 of subprogram entry, about 11 of line
//! program, about 13 of CFI (FDEs shared by neighbours with the same rules), plus the name
//! once: about 62 bytes + name.

mod bytes;
mod cfi;
mod dwarf;
mod gdb_index;
mod growing;
mod layout;
mod scratch;
#[cfg(test)]
pub(crate) mod test_support;
mod writer;

use crate::error::{Error, Result};
use crate::model::{Arch, JitObject};
pub(crate) use growing::{
    Growing, Index as GrowingIndex, Plain as GrowingPlain, PAYLOAD as GROWING_PAYLOAD,
};
pub(crate) use layout::Spans;

/// Objects of up to this many functions get a `.gdb_index` (see `gdb_index.rs`).
const INDEXED_FUNCTIONS: usize = 8;

/// Encodes `object` as an ELF relocatable object whose sections sit at the code's real
/// addresses. Refuses what [`JitObject::validate`] refuses (checked while planning, not in a
/// pass of its own).
pub fn encode(object: &JitObject) -> Result<Vec<u8>> {
    encode_objects(object.arch(), &[object])
}

/// Encodes the functions of `objects` as one ELF object for `arch`: the same bytes as
/// encoding `JitObject::merged(arch, objects)`, without making that object (the registry
/// consolidates many registrations into one debugger entry).
pub(crate) fn encode_objects(arch: Arch, objects: &[&JitObject]) -> Result<Vec<u8>> {
    encode_objects_into(arch, objects, Vec::new())
}

/// [`encode_objects`] into `buf` (emptied first): the registry hands back the buffers of
/// entries it dropped, so that registering one small object after another allocates no
/// payload.
pub(crate) fn encode_objects_into(
    arch: Arch,
    objects: &[&JitObject],
    buf: Vec<u8>,
) -> Result<Vec<u8>> {
    encode_objects_spanning(arch, objects, buf, Spans::Padding, &mut Vec::new())
}

/// [`encode_objects_into`], its `.text` sections spanning the gaps `spans` allows; the
/// sections that span a gap are appended to `spanning`.
pub(crate) fn encode_objects_spanning(
    arch: Arch,
    objects: &[&JitObject],
    buf: Vec<u8>,
    spans: Spans<'_>,
    spanning: &mut Vec<(u64, u64)>,
) -> Result<Vec<u8>> {
    let mut scratch = scratch::Scratch::take();
    let out = encode_with(arch, objects, &mut scratch, buf, spans, spanning);
    scratch.keep();
    out
}

/// The content of the `.jit_gdb.sources` section for `sources` (not empty). Out of line:
/// rare, and kept out of the encoder's usual path.
#[cold]
#[inline(never)]
fn source_section(sources: &[(&str, &str)]) -> Vec<u8> {
    let mut section = Vec::new();
    crate::format::sources::write_elf(sources, &mut section);
    section
}

fn encode_with(
    arch: Arch,
    objects: &[&JitObject],
    scratch: &mut scratch::Scratch,
    buf: Vec<u8>,
    spans: Spans<'_>,
    spanning: &mut Vec<(u64, u64)>,
) -> Result<Vec<u8>> {
    // Rows and registers are read with `arch`'s numbers: an object of another architecture
    // would be described wrongly.
    if let Some((k, o)) = objects.iter().enumerate().find(|(_, o)| o.arch() != arch) {
        return Err(Error::Unsupported {
            format: crate::error::PayloadFormat::Elf,
            why: format!(
                "object {k} is {} code but the payload is for {}: one payload holds one architecture",
                o.arch().name(),
                arch.name()
            ),
        });
    }
    let layout = layout::Layout::new(objects, &mut scratch.layout, spans)?;
    // Only gaps `Free` allows can be spanned: no pass over the functions otherwise.
    if matches!(spans, Spans::Free(_)) {
        layout.spanning_runs(spanning);
    }
    let sources = layout::sources_of(objects);
    let out = encode_layout(arch, &layout, &sources, scratch, buf);
    layout.into_parts(&mut scratch.layout);
    out
}

fn encode_layout(
    arch: Arch,
    layout: &layout::Layout,
    sources: &[(&str, &str)],
    scratch: &mut scratch::Scratch,
    buf: Vec<u8>,
) -> Result<Vec<u8>> {
    dwarf::build(layout, &mut scratch.dwarf)?;
    cfi::debug_frame(arch, layout, &mut scratch.cfi)?;
    let debug = &scratch.dwarf;
    // Source texts in a section of their own, which debuggers ignore and our readers read
    // (`inspect`, `payload_sources`).
    let sources = match sources {
        [] => Vec::new(),
        some => source_section(some),
    };
    // Small objects are what runtimes register one by one, each a GDB stop: an index spares
    // GDB reading their DWARF at the stop. Large ones would pay ~50 bytes + name per
    // function for it, and are registered rarely.
    let index: &[u8] = if layout.functions.len() <= INDEXED_FUNCTIONS {
        gdb_index::build(layout, &debug.info, &mut scratch.index)?;
        &scratch.index.index
    } else {
        &[]
    };
    let sections = [
        writer::DataSection {
            name: &writer::DEBUG_INFO,
            data: &debug.info,
        },
        writer::DataSection {
            name: &writer::DEBUG_ABBREV,
            data: &debug.abbrev,
        },
        writer::DataSection {
            name: &writer::DEBUG_LINE,
            data: &debug.line,
        },
        writer::DataSection {
            name: &writer::DEBUG_RANGES,
            data: &debug.ranges,
        },
        writer::DataSection {
            name: &writer::DEBUG_FRAME,
            data: &scratch.cfi.frame,
        },
        writer::DataSection {
            name: &writer::GDB_INDEX,
            data: index,
        },
        writer::DataSection {
            name: &writer::JIT_SOURCES,
            data: &sources,
        },
    ];
    Ok(writer::write(arch, layout, &sections, buf))
}

#[cfg(test)]
mod tests {
    use crate::model::{JitObject, LineRow};

    /// The benchmark shape: `n` functions of 64 bytes with 20-character names, 8 line rows
    /// and a frame-pointer frame, `stride` bytes apart.
    fn benchmark_object(n: u64, stride: u64) -> JitObject {
        let mut o = JitObject::new();
        for i in 0..n {
            let f = o
                .add_function(
                    &format!("jit_function_{i:06}_"),
                    0x7f00_0000_0000 + i * stride,
                    64,
                )
                .unwrap();
            let rows: Vec<LineRow> = (0..8)
                .map(|r| LineRow {
                    offset: r * 7,
                    line: (i * 10) as u32 + 1 + r,
                })
                .collect();
            o.set_lines(f, "benchmark.js", &rows).unwrap();
            o.set_frame_pointer(f, 1, 4).unwrap();
            // pop rbp at 62, ret at 63: the function ends with its epilogue.
            o.add_epilogue(f, 63, 64).unwrap();
        }
        o
    }

    /// A small object of `seed`'s choosing: functions at `base` and up (in or out of
    /// address order, adjacent or not), some of `files` files or none, every kind of frame,
    /// variables, blocks and call sites (to functions of this object or of others).
    fn varied_object(seed: u64, base: u64, files: u64) -> JitObject {
        use crate::model::{BaseType, CallTarget, Location, UnwindRow, Variable, VariableKind};
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut o = JitObject::new();
        let n = 1 + next(6);
        let mut at = base;
        let mut placed = Vec::new();
        for i in 0..n {
            let size = 16 + next(100);
            placed.push((i, at, size));
            at += size + [0, 3, 15, 16, 500][next(5) as usize];
        }
        if next(3) == 0 {
            placed.reverse();
        }
        for (i, start, size) in placed {
            let f = o
                .add_function(&format!("o{seed}_f{i}"), start, size)
                .unwrap();
            if next(5) != 0 {
                let rows: Vec<LineRow> = (0..1 + next(4))
                    .map(|r| LineRow {
                        offset: r as u32 * 4 + u32::from(next(4) == 0),
                        line: 1 + next(50) as u32,
                    })
                    .collect();
                let file = format!("file{}.js", next(files));
                o.set_lines(f, &file, &rows).unwrap();
            }
            match next(4) {
                0 => o.set_frame_pointer(f, 1, 4).unwrap(),
                1 => {
                    o.set_frame_pointer(f, 1, 4).unwrap();
                    o.add_epilogue(f, 10, 11).unwrap();
                }
                2 => o.set_unwind(f, &[UnwindRow::X86_64_ENTRY]).unwrap(),
                _ => {}
            }
            if next(4) == 0 {
                let var = Variable {
                    name: "v".into(),
                    kind: VariableKind::Local,
                    ty: BaseType::ALL[next(11) as usize],
                    location: Location::FrameOffset(-8),
                };
                o.add_variable(f, var).unwrap();
                o.add_block(f, "b", 2, 8, None).unwrap();
            }
            if next(3) == 0 {
                let target = match next(4) {
                    // Most likely another object's function.
                    0 => CallTarget::Address(base - 0x1000 + next(3) * 0x1000),
                    1 => CallTarget::Symbol {
                        address: 0x5000,
                        name: "host".into(),
                    },
                    2 => CallTarget::Indirect,
                    _ => CallTarget::Address(0x1234),
                };
                o.add_call_site(f, 5, target).unwrap();
            }
        }
        // Source texts (taken from the seed, not the generator: the objects are otherwise
        // what they were), for a file of the object's functions or for another; objects of
        // one merge give different texts for one file.
        if seed % 3 == 1 {
            o.set_source(
                &format!("file{}.js", seed % files.max(1)),
                &format!("// {seed}\n"),
            )
            .unwrap();
            if seed % 2 == 0 {
                o.set_source("unused.js", "").unwrap();
            }
        }
        o
    }

    /// Objects with source texts carry them in a `.jit_gdb.sources` section (not ALLOC,
    /// PROGBITS, flags 0): one text per file, the first object's; objects without have none.
    #[test]
    fn source_texts_go_in_a_section_of_their_own() {
        use object::read::elf::{FileHeader as _, SectionHeader as _};
        use object::{Object, ObjectSection};

        let mut a = benchmark_object(1, 64);
        let plain = super::encode(&a).unwrap();
        a.set_source("benchmark.js", "line 1\nline 2\n").unwrap();
        a.set_source("../elsewhere.js", "").unwrap();
        let mut b = JitObject::new();
        let f = b.add_function("other", 0x7f00_0001_0000, 16).unwrap();
        b.set_lines(f, "benchmark.js", &[LineRow { offset: 0, line: 2 }])
            .unwrap();
        b.set_source("benchmark.js", "another text").unwrap();
        b.set_source("b.js", "b\n").unwrap();
        for (objects, want) in [
            (
                vec![&a],
                vec![
                    ("benchmark.js", "line 1\nline 2\n"),
                    ("../elsewhere.js", ""),
                ],
            ),
            (
                vec![&b, &a],
                vec![
                    ("benchmark.js", "another text"),
                    ("b.js", "b\n"),
                    ("../elsewhere.js", ""),
                ],
            ),
        ] {
            let bytes = super::encode_objects(crate::model::Arch::X86_64, &objects).unwrap();
            let file = object::File::parse(&bytes[..]).unwrap();
            let section = file
                .section_by_name(crate::format::SOURCES_SECTION)
                .expect("the section");
            let object::File::Elf64(elf) = &file else {
                panic!("not ELF64")
            };
            let endian = elf.endian();
            let header = elf
                .elf_section_table()
                .section(object::SectionIndex(section.index().0))
                .unwrap();
            assert_eq!(header.sh_type(endian), object::elf::SHT_PROGBITS);
            assert_eq!(header.sh_flags(endian), object::elf::SectionFlags(0));
            assert_eq!(header.sh_addr(endian), 0);
            let got = crate::format::sources::read_elf(section.data().unwrap()).unwrap();
            assert_eq!(got, want);
            // The rest of the payload is what it is without them: the same symbols.
            assert_eq!(file.symbols().count(), objects.len());
            assert_eq!(elf.elf_header().e_type(endian), object::elf::ET_REL);
        }
        // Without sources, no section for them.
        assert!(object::File::parse(&plain[..])
            .unwrap()
            .section_by_name(crate::format::SOURCES_SECTION)
            .is_none());
        let mut bytes = Vec::new();
        crate::format::sources::write_elf(&[("a", "")], &mut bytes);
        assert_eq!(bytes, [1, 1, b'a', 0]);
    }

    /// Encoding several objects as one is encoding them merged into one object, byte for
    /// byte, and refuses what that refuses.
    #[test]
    fn several_objects_encode_as_their_merge() {
        use crate::model::Arch;
        for (count, files) in [(1, 2), (2, 1), (3, 3), (8, 2), (32, 40), (40, 4)] {
            for seed in 0..12u64 {
                let objects: Vec<JitObject> = (0..count)
                    .map(|k| varied_object(seed * 100 + k, 0x10_0000 + k * 0x1000, files))
                    .collect();
                let refs: Vec<&JitObject> = objects.iter().collect();
                let merged = JitObject::merged(Arch::X86_64, refs.iter().copied());
                let ours = super::encode_objects(Arch::X86_64, &refs);
                assert!(ours.is_ok(), "{ours:?}");
                assert_eq!(
                    ours,
                    super::encode(&merged),
                    "{count} objects of seed {seed}"
                );
            }
        }
        // Functions of two objects at the same place.
        let (a, b) = (varied_object(1, 0x1000, 1), varied_object(2, 0x1000, 1));
        let merged = JitObject::merged(Arch::X86_64, [&a, &b]);
        let refused = super::encode_objects(Arch::X86_64, &[&a, &b]);
        assert!(matches!(refused, Err(crate::Error::Overlap { .. })));
        assert_eq!(refused, super::encode(&merged));
        assert_eq!(
            super::encode_objects(Arch::X86_64, &[]),
            Err(crate::Error::EmptyObject)
        );
    }

    /// What a source text adds to an ELF payload: the section's content (count, name,
    /// length, text), its header and its name.
    #[test]
    fn source_section_size() {
        let mut o = JitObject::new();
        let f = o
            .add_function("jit_function_00000000", 0x7f00_0000_0000, 200)
            .unwrap();
        let rows: Vec<LineRow> = (0..20)
            .map(|i| LineRow {
                offset: i * 9,
                line: 1 + 2 * i,
            })
            .collect();
        o.set_lines(f, "app/script.js", &rows).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
        o.add_epilogue(f, 199, 200).unwrap();
        let without = super::encode(&o).unwrap().len();
        o.set_source("app/script.js", &format!("{}\n", "x".repeat(1023)))
            .unwrap();
        let with = super::encode(&o).unwrap().len();
        let content = 1 + 1 + "app/script.js".len() + 2 + 1024;
        let header_and_name = 64 + ".jit_gdb.sources\0".len();
        println!(
            "ELF, 1 function, 20 rows: {without} B; with a 1 KiB source: {with} B (+{})",
            with - without
        );
        // Padding before the symbol table may take up to 7 bytes more or less.
        let added = with - without;
        assert!(added.abs_diff(content + header_and_name) < 8, "{added}");
    }

    /// Bytes per function beyond the names (each stored once, NUL-terminated).
    fn overhead_per_function(n: u64, stride: u64) -> f64 {
        let bytes = super::encode(&benchmark_object(n, stride)).unwrap().len() as f64;
        (bytes - 21.0 * n as f64) / n as f64
    }

    #[test]
    fn payload_size_per_function() {
        let one = overhead_per_function(1, 64);
        let adjacent = overhead_per_function(1000, 64);
        let aligned = overhead_per_function(1000, 78);
        let scattered = overhead_per_function(1000, 4096);
        println!(
            "ELF bytes per function beyond the name: 1 function {one:.1}; 1000 functions: adjacent {adjacent:.1}, 14 B padding {aligned:.1}, scattered {scattered:.1}"
        );
        // The budget of issue 4 for a batch of this shape.
        assert!(adjacent <= 64.0, "{adjacent:.1} bytes + name per function");
        // Adjacent code shares sections and line sequences; scattered code pays a section
        // header (64 B) and a sequence start and end per function.
        assert!(adjacent < aligned && aligned < scattered);
    }
}

/// The encoder's output for a fixed set of generated payloads, pinned: changes that are
/// meant to keep the output as it is (optimisations) must keep this hash. A change of the
/// format changes it on purpose; then the new value is the one this test prints.
#[cfg(test)]
mod pinned {
    use super::test_support::{fnv1a, random_objects};
    use crate::model::{Arch, JitObject, LineRow};

    /// `n` functions like those of the benchmark (20-character names, 8 line rows, a
    /// frame-pointer frame), the first numbered `first`, `stride` bytes apart.
    fn shaped_object(first: u64, n: u64, stride: u64, epilogue: bool) -> JitObject {
        let mut o = JitObject::new();
        for i in first..first + n {
            let f = o
                .add_function(
                    &format!("jit_fn_{i:013}"),
                    0x7f00_0000_0000 + i * stride,
                    64,
                )
                .unwrap();
            let rows: Vec<LineRow> = (0..8)
                .map(|r| LineRow {
                    offset: r * 6,
                    line: 10 + r,
                })
                .collect();
            o.set_lines(f, "scale.js", &rows).unwrap();
            o.set_frame_pointer(f, 1, 4).unwrap();
            if epilogue {
                o.add_epilogue(f, 63, 64).unwrap();
            }
        }
        o
    }

    #[test]
    fn output_of_generated_payloads_is_unchanged() {
        let mut h = 0xcbf2_9ce4_8422_2325;
        let (mut encoded, mut refused, mut bytes) = (0, 0, 0);
        for seed in 0..3000u64 {
            let objects = random_objects(seed);
            let refs: Vec<&JitObject> = objects.iter().collect();
            match super::encode_objects(Arch::X86_64, &refs) {
                Ok(out) => {
                    encoded += 1;
                    bytes += out.len();
                    h = fnv1a(h, &out);
                }
                Err(e) => {
                    refused += 1;
                    h = fnv1a(h, format!("{e:?}").as_bytes());
                }
            }
        }
        // The benchmark's shapes: many functions alike in one object, or one per object
        // (registered one by one, then merged by the registry).
        for (n, per_object, stride, epilogue) in [
            (1000, 1000, 64, false),
            (1000, 1000, 64, true),
            (1000, 1000, 78, true),
            (300, 300, 4096, false),
            (1, 1, 64, false),
            (8, 8, 64, true),
            (9, 9, 64, false),
            (17, 17, 64, false),
            (32, 1, 64, false),
            (32, 1, 80, true),
            (1024, 1, 64, false),
        ] {
            let objects: Vec<JitObject> = (0..n / per_object)
                .map(|k| shaped_object(k * per_object, per_object, stride, epilogue))
                .collect();
            let refs: Vec<&JitObject> = objects.iter().collect();
            let out = super::encode_objects(Arch::X86_64, &refs).expect("encodes");
            encoded += 1;
            bytes += out.len();
            h = fnv1a(h, &out);
        }
        println!("{encoded} payloads ({bytes} bytes), {refused} refused: hash {h:#018x}");
        assert!(
            encoded > 2000 && refused > 50,
            "{encoded} encoded, {refused} refused"
        );
        // Changed when the CIE gained `DW_CFA_undefined` for the callee-saved registers (8 bytes
        // more per payload: 60,561,440 -> 60,584,040 bytes for these 2,825 payloads).
        // Changed when units holding a function without declared epilogues gained
        // `DW_AT_producer` (`dwarf::PRODUCER`, for GDB 16's amd64 epilogue unwinder: 181,760
        // bytes more, 60,584,040 -> 60,765,800; payloads whose epilogues are all declared,
        // the benchmark's among them, are unchanged).
        assert_eq!(h, 0xe497_d148_83cc_ee9d);
    }
}
