//! The functions of one payload as the reader uses them: names and file names borrowed from
//! the payload, the rows and blocks of all functions in one vector each. GDB hands the
//! reader batches of a thousand functions and more; building the data model for them (a
//! name, a row table and a frame description allocated per function, all freed right after)
//! cost the reader several times what it then costs GDB to take the symbols.
//!
//! [`Records::from_payload`] collects them straight from the decoder ([`jit_interface::format::Sink`]),
//! checking the data model's rules itself, so that it accepts only payloads the model
//! accepts, with the same content. What it does not check itself (explicit unwind rows,
//! rare) it refuses, and so does anything it finds wrong: the reader then decodes the
//! payload into the model ([`Records::from_decoded`]), which decides, and names the problem
//! when there is one. Tests compare both ways on every payload they decode.

use std::ops::Range;

use jit_interface::format::{decode_into, Sink};
use jit_interface::{
    Arch, DecodeError, Decoded, Epilogue, Frame, LineRow, LiveCheck, SavedRegister, UnwindRow,
};

/// The functions, rows and blocks of a payload's objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records<'a> {
    pub objects: Vec<ObjectRec>,
    /// The source texts the runtime registered, (file, text), of all objects in payload
    /// order (a file may come once per object).
    pub sources: Vec<(&'a str, &'a str)>,
    funcs: Vec<Func<'a>>,
    lines: Vec<LineRow>,
    blocks: Vec<BlockRec<'a>>,
    epilogues: Vec<Epilogue>,
    unwind: Vec<UnwindRow>,
    registers: Vec<SavedRegister>,
}

/// One object record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRec {
    pub arch: Arch,
    pub live: Option<LiveCheck>,
    /// Its functions, in the order of the payload.
    funcs: Range<usize>,
}

/// One function. Its range `[start, start + size)` is non-empty and does not wrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func<'a> {
    pub name: &'a str,
    pub start: u64,
    pub size: u32,
    pub file: Option<&'a str>,
    lines: Range<usize>,
    blocks: Range<usize>,
    frame: FrameRec,
    /// Its register rules in [`Records::registers`] (rare: only from decoded models).
    registers: Range<usize>,
}

impl Func<'_> {
    pub fn end(&self) -> u64 {
        self.start.saturating_add(u64::from(self.size))
    }
}

/// A frame description, as [`Frame`] without its own allocations.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FrameRec {
    Default,
    FramePointer {
        push_end: u32,
        setup_end: u32,
        epilogues: Range<usize>,
    },
    Rows(Range<usize>),
}

/// A nested block of a function (offsets from the function's start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRec<'a> {
    pub name: &'a str,
    pub start: u32,
    pub end: u32,
    /// Index of the enclosing block among the function's blocks (an earlier one).
    pub parent: Option<u32>,
}

impl<'a> Records<'a> {
    /// Collects a compact payload's functions, checking the data model's rules. `Invalid`
    /// means the model has to decide (see the module docs), `NotOurs` that the payload is
    /// not a compact one.
    pub fn from_payload(bytes: &'a [u8]) -> Result<Records<'a>, DecodeError> {
        let mut sink = RecordSink::default();
        decode_into(bytes, &mut sink)?;
        Ok(sink.r)
    }

    /// The functions of decoded model objects.
    pub fn from_decoded(decoded: &'a [Decoded]) -> Records<'a> {
        let mut r = Records::default();
        for d in decoded {
            r.sources.extend(d.object.sources());
            let lo = r.funcs.len();
            for f in d.object.functions() {
                let lines = push_all(&mut r.lines, f.lines());
                let b0 = r.blocks.len();
                r.blocks.extend(f.blocks().iter().map(|b| BlockRec {
                    name: &b.name,
                    start: b.start,
                    end: b.end,
                    parent: b.parent,
                }));
                let frame = match f.frame() {
                    Frame::Default => FrameRec::Default,
                    Frame::FramePointer {
                        push_end,
                        setup_end,
                        epilogues,
                    } => FrameRec::FramePointer {
                        push_end: *push_end,
                        setup_end: *setup_end,
                        epilogues: push_all(&mut r.epilogues, epilogues),
                    },
                    Frame::Rows(rows) => FrameRec::Rows(push_all(&mut r.unwind, rows)),
                };
                let registers = push_all(&mut r.registers, f.register_rules());
                r.funcs.push(Func {
                    name: f.name(),
                    start: f.start(),
                    size: f.size(),
                    file: f.file(),
                    lines,
                    blocks: b0..r.blocks.len(),
                    frame,
                    registers,
                });
            }
            r.objects.push(ObjectRec {
                arch: d.object.arch(),
                live: d.live,
                funcs: lo..r.funcs.len(),
            });
        }
        r
    }

    /// The functions of an object of these records.
    pub fn functions(&self, o: &ObjectRec) -> &[Func<'a>] {
        self.funcs.get(o.funcs.clone()).unwrap_or(&[])
    }

    /// All functions of the (remaining) objects, object by object.
    pub fn all_functions(&self) -> impl Iterator<Item = &Func<'a>> {
        self.objects.iter().flat_map(|o| self.functions(o))
    }

    /// A function's line rows (strictly increasing offsets inside the function).
    pub fn lines(&self, f: &Func<'_>) -> &[LineRow] {
        self.lines.get(f.lines.clone()).unwrap_or(&[])
    }

    /// A function's nested blocks.
    pub fn blocks(&self, f: &Func<'_>) -> &[BlockRec<'a>] {
        self.blocks.get(f.blocks.clone()).unwrap_or(&[])
    }

    /// A function's register rules, in offset order.
    pub fn register_rules(&self, f: &Func<'_>) -> &[SavedRegister] {
        self.registers.get(f.registers.clone()).unwrap_or(&[])
    }

    /// Do two functions (of these records) have the same frame description?
    pub fn same_frame(&self, a: &Func<'_>, b: &Func<'_>) -> bool {
        match (&a.frame, &b.frame) {
            (FrameRec::Default, FrameRec::Default) => true,
            (
                FrameRec::FramePointer {
                    push_end: p1,
                    setup_end: s1,
                    epilogues: e1,
                },
                FrameRec::FramePointer {
                    push_end: p2,
                    setup_end: s2,
                    epilogues: e2,
                },
            ) => {
                p1 == p2
                    && s1 == s2
                    && self.epilogues.get(e1.clone()) == self.epilogues.get(e2.clone())
            }
            (FrameRec::Rows(r1), FrameRec::Rows(r2)) => {
                self.unwind.get(r1.clone()) == self.unwind.get(r2.clone())
            }
            _ => false,
        }
    }

    /// The frame-description rows of a function, as the data model defines them.
    pub fn frame_rows(&self, f: &Func<'_>, arch: Arch) -> Vec<UnwindRow> {
        let frame = match &f.frame {
            FrameRec::Default => Frame::Default,
            FrameRec::FramePointer {
                push_end,
                setup_end,
                epilogues,
            } => Frame::FramePointer {
                push_end: *push_end,
                setup_end: *setup_end,
                epilogues: self
                    .epilogues
                    .get(epilogues.clone())
                    .unwrap_or(&[])
                    .to_vec(),
            },
            FrameRec::Rows(rows) => {
                Frame::Rows(self.unwind.get(rows.clone()).unwrap_or(&[]).to_vec())
            }
        };
        frame.rows(arch, u64::from(f.size))
    }
}

/// Appends `items` to `to`; returns where they went.
fn push_all<T: Clone>(to: &mut Vec<T>, items: &[T]) -> Range<usize> {
    let at = to.len();
    to.extend_from_slice(items);
    at..to.len()
}

/// Why the sink stopped: the model decides (see the module docs), so no message is needed.
fn ask_the_model() -> jit_interface::Error {
    jit_interface::Error::TooLarge("left to the data model".into())
}

/// Collects records from the decoder, checking what the data model's setters check.
#[derive(Default)]
struct RecordSink<'a> {
    r: Records<'a>,
}

impl<'a> RecordSink<'a> {
    /// The function being decoded.
    fn current(&mut self) -> Option<&mut Func<'a>> {
        let o = self.r.objects.last()?;
        if self.r.funcs.len() > o.funcs.start {
            self.r.funcs.last_mut()
        } else {
            None
        }
    }
}

type Check = jit_interface::Result<()>;

impl<'a> Sink<'a> for RecordSink<'a> {
    fn object(&mut self, arch: Arch, live: Option<LiveCheck>) {
        let at = self.r.funcs.len();
        self.r.objects.push(ObjectRec {
            arch,
            live,
            funcs: at..at,
        });
    }

    fn source(&mut self, file: &'a str, text: &'a str) -> Check {
        // The decoder checked all the model checks (a name, one text per file, its size).
        self.r.sources.push((file, text));
        Ok(())
    }

    fn function(&mut self, name: &'a str, start: u64, size: u64) -> Check {
        // The model: at least one byte, no wrap, 32-bit size (the decoder checked the name).
        let Ok(size) = u32::try_from(size) else {
            return Err(ask_the_model());
        };
        if size == 0 || start.checked_add(u64::from(size)).is_none() || self.r.objects.is_empty() {
            return Err(ask_the_model());
        }
        let (l, b, g) = (
            self.r.lines.len(),
            self.r.blocks.len(),
            self.r.registers.len(),
        );
        self.r.funcs.push(Func {
            name,
            start,
            size,
            file: None,
            lines: l..l,
            blocks: b..b,
            frame: FrameRec::Default,
            registers: g..g,
        });
        if let Some(o) = self.r.objects.last_mut() {
            o.funcs.end = self.r.funcs.len();
        }
        Ok(())
    }

    fn frame_pointer(&mut self, push_end: u32, setup_end: u32) -> Check {
        let at = self.r.epilogues.len();
        let f = self.current().ok_or_else(ask_the_model)?;
        if push_end == 0 || setup_end < push_end || setup_end >= f.size {
            return Err(ask_the_model());
        }
        f.frame = FrameRec::FramePointer {
            push_end,
            setup_end,
            epilogues: at..at,
        };
        Ok(())
    }

    fn epilogue(&mut self, restore_end: u32, ret_end: u32) -> Check {
        let last_ret = self.r.epilogues.last().map(|e| e.ret_end);
        let f = self.current().ok_or_else(ask_the_model)?;
        let size = f.size;
        let FrameRec::FramePointer {
            setup_end,
            epilogues,
            ..
        } = &mut f.frame
        else {
            return Err(ask_the_model());
        };
        // Epilogues in address order, after the prologue, inside the function.
        let after = if epilogues.start == epilogues.end {
            *setup_end
        } else {
            last_ret.ok_or_else(ask_the_model)?
        };
        if restore_end <= after || ret_end <= restore_end || ret_end > size {
            return Err(ask_the_model());
        }
        epilogues.end += 1;
        self.r.epilogues.push(Epilogue {
            restore_end,
            ret_end,
        });
        Ok(())
    }

    fn register_rule(&mut self, _rule: SavedRegister) -> Check {
        // Rare; the model checks them.
        Err(ask_the_model())
    }

    fn unwind_rows(&mut self, _rows: &[UnwindRow]) -> Check {
        // Rare; the model checks them.
        Err(ask_the_model())
    }

    fn lines(&mut self, file: &'a str, rows: &[LineRow]) -> Check {
        let at = self.r.lines.len();
        let f = self.current().ok_or_else(ask_the_model)?;
        // The model: strictly increasing offsets inside the function, never two gaps (line
        // 0) in a row.
        let mut next = 0u32;
        let mut after_gap = false;
        for r in rows {
            if r.offset < next || r.offset >= f.size || (after_gap && r.is_gap()) {
                return Err(ask_the_model());
            }
            next = r.offset + 1;
            after_gap = r.is_gap();
        }
        if !f.lines.is_empty() {
            // Set twice: the model replaces; the decoder never does it.
            return Err(ask_the_model());
        }
        f.file = Some(file);
        f.lines = at..at + rows.len();
        self.r.lines.extend_from_slice(rows);
        Ok(())
    }

    fn block(&mut self, name: &'a str, start: u32, end: u32, parent: Option<u32>) -> Check {
        let n = self.r.blocks.len();
        let f = self.current().ok_or_else(ask_the_model)?;
        let size = f.size;
        let fb = f.blocks.clone();
        if start >= end || end > size || fb.end != n {
            return Err(ask_the_model());
        }
        if let Some(p) = parent {
            // An earlier block of the same function that contains this one.
            let pb = fb
                .start
                .checked_add(p as usize)
                .filter(|&i| i < fb.end)
                .and_then(|i| self.r.blocks.get(i))
                .ok_or_else(ask_the_model)?;
            if start < pb.start || end > pb.end {
                return Err(ask_the_model());
            }
        }
        self.r.blocks.push(BlockRec {
            name,
            start,
            end,
            parent,
        });
        if let Some(f) = self.current() {
            f.blocks.end = n + 1;
        }
        Ok(())
    }

    fn end_object(&mut self) -> Check {
        let o = self.r.objects.last().ok_or_else(ask_the_model)?;
        let fns = self.r.funcs.get(o.funcs.clone()).unwrap_or(&[]);
        if fns.is_empty() {
            return Err(ask_the_model());
        }
        // The model: functions of one object do not overlap (usually already in order).
        if fns.windows(2).all(|w| w[1].start >= w[0].end()) {
            return Ok(());
        }
        let mut order: Vec<(u64, u64)> = fns.iter().map(|f| (f.start, f.end())).collect();
        order.sort_unstable();
        if order.windows(2).any(|w| w[1].0 < w[0].1) {
            return Err(ask_the_model());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jit_interface::format::{decode_all, encode, encode_bundle};
    use jit_interface::JitObject;

    /// Both ways of reading a payload agree.
    fn both(bytes: &[u8]) -> Option<Records<'_>> {
        let fast = Records::from_payload(bytes);
        match decode_all(bytes) {
            Ok(d) => {
                let slow = Records::from_decoded(&d);
                // Explicit unwind rows are always left to the model.
                if let Ok(fast) = &fast {
                    assert_eq!(*fast, slow);
                } else {
                    assert!(slow
                        .funcs
                        .iter()
                        .any(|f| matches!(f.frame, FrameRec::Rows(_))));
                }
                fast.ok()
            }
            Err(DecodeError::NotOurs) => {
                assert_eq!(fast, Err(DecodeError::NotOurs));
                None
            }
            Err(DecodeError::Invalid(_)) => {
                assert!(fast.is_err(), "accepted what the model refuses");
                None
            }
        }
    }

    fn sample() -> JitObject {
        let mut o = JitObject::new();
        let a = o.add_function("a", 0x1000, 0x40).unwrap();
        o.set_lines(
            a,
            "x.js",
            &[
                LineRow { offset: 0, line: 3 },
                LineRow { offset: 8, line: 4 },
            ],
        )
        .unwrap();
        o.set_frame_pointer(a, 1, 4).unwrap();
        o.add_epilogue(a, 0x20, 0x21).unwrap();
        o.add_epilogue(a, 0x3f, 0x40).unwrap();
        let b = o.add_function("b", 0x1040, 0x20).unwrap();
        let outer = o.add_block(b, "outer", 2, 0x18, None).unwrap();
        o.add_block(b, "inner", 4, 8, Some(outer)).unwrap();
        o.set_lines(b, "y.js", &[LineRow { offset: 1, line: 9 }])
            .unwrap();
        o.add_function("c", 0x1100, 0x10).unwrap();
        o
    }

    #[test]
    fn same_records_both_ways() {
        let o = sample();
        let bytes = encode(&o, None).unwrap();
        let r = both(&bytes).expect("accepted");
        let names: Vec<&str> = r.all_functions().map(|f| f.name).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let b = &r.functions(&r.objects[0])[1];
        assert_eq!(r.blocks(b).len(), 2);
        assert_eq!(r.lines(b), [LineRow { offset: 1, line: 9 }]);
        let a = &r.functions(&r.objects[0])[0];
        assert_eq!(
            r.frame_rows(a, Arch::X86_64),
            o.functions()
                .first()
                .unwrap()
                .frame()
                .rows(Arch::X86_64, 0x40)
        );
        // A bundle with a live check, and an object with explicit rows (left to the model).
        let mut rows = JitObject::new();
        let f = rows.add_function("r", 0x2000, 0x10).unwrap();
        rows.set_unwind(f, &[UnwindRow::X86_64_ENTRY]).unwrap();
        let live = LiveCheck {
            address: 0x500,
            key: 9,
        };
        let bundle = encode_bundle(&[(&o, Some(live)), (&rows, None)]).unwrap();
        assert!(both(&bundle).is_none());
        assert!(Records::from_payload(&bundle).is_err());
    }

    /// A bundle with what the format can say: live checks, several files, blocks, default,
    /// canonical and other frame-pointer frames, functions out of address order.
    fn bundle() -> Vec<u8> {
        let mut o2 = JitObject::new();
        let z = o2.add_function("z", 0x3000, 0x30).unwrap();
        o2.set_frame_pointer(z, 1, 4).unwrap();
        o2.add_epilogue(z, 0x2f, 0x30).unwrap();
        o2.set_lines(
            z,
            "x.js",
            &[LineRow {
                offset: 0,
                line: 70,
            }],
        )
        .unwrap();
        let y = o2.add_function("y", 0x2000, 0x10).unwrap();
        o2.set_lines(y, "z.js", &[LineRow { offset: 2, line: 1 }])
            .unwrap();
        o2.add_block(y, "blk", 1, 9, None).unwrap();
        o2.set_source("z.js", "let z;\n").unwrap();
        o2.set_source("unused.js", "").unwrap();
        let live = |address, key| Some(LiveCheck { address, key });
        encode_bundle(&[(&sample(), live(0x500, 1)), (&o2, live(0x508, 2))]).unwrap()
    }

    #[test]
    fn a_bundle_reads_the_same_both_ways() {
        let bytes = bundle();
        let r = both(&bytes).expect("accepted");
        assert_eq!(r.objects.len(), 2);
        let names: Vec<&str> = r.all_functions().map(|f| f.name).collect();
        assert_eq!(names, ["a", "b", "c", "z", "y"]);
        assert_eq!(r.sources, [("z.js", "let z;\n"), ("unused.js", "")]);
    }

    #[test]
    fn sources_of_every_object_in_payload_order() {
        let mut a = sample();
        a.set_source("y.js", "y\n").unwrap();
        let mut b = JitObject::new();
        b.add_function("q", 0x9000, 8).unwrap();
        b.set_source("y.js", "another y").unwrap();
        let bytes = encode_bundle(&[(&a, None), (&sample(), None), (&b, None)]).unwrap();
        let r = both(&bytes).expect("accepted");
        assert_eq!(r.sources, [("y.js", "y\n"), ("y.js", "another y")]);
        let plain = encode(&sample(), None).unwrap();
        assert!(both(&plain).expect("accepted").sources.is_empty());
    }

    #[test]
    fn random_damage_is_refused_both_ways_or_read_the_same() {
        let good = bundle();
        // A fixed xorshift sequence: one to four bytes changed per payload.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut read = 0;
        for _ in 0..20_000 {
            let mut b = good.clone();
            for _ in 0..=next() % 4 {
                let i = (next() % b.len() as u64) as usize;
                b[i] = next() as u8;
            }
            read += usize::from(both(&b).is_some());
        }
        // Damage that keeps the payload valid (a name's letter, a line number) is read.
        assert!(read > 1000, "{read} damaged payloads read");
    }

    #[test]
    fn every_damaged_payload_is_refused_both_ways_or_read_the_same() {
        let bytes = encode(&sample(), None).unwrap();
        // Every byte flipped to a few values, and every truncation.
        for i in 0..bytes.len() {
            for v in [
                0u8,
                1,
                0x7f,
                0x80,
                0xff,
                bytes[i] ^ 1,
                bytes[i].wrapping_add(1),
            ] {
                let mut b = bytes.clone();
                b[i] = v;
                both(&b);
            }
            both(&bytes[..i]);
        }
    }
}
