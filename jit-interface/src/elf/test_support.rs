//! Test helper: encodes an object and reads the payload back with real parsers (`object`'s
//! ELF reader, `gimli`'s DWARF reader).

use object::{Object, ObjectSection};

use crate::model::JitObject;

pub(crate) type Slice<'a> = gimli::EndianSlice<'a, gimli::LittleEndian>;

/// An encoded payload.
pub(crate) struct Parsed {
    pub bytes: Vec<u8>,
}

impl Parsed {
    pub fn encode(object: &JitObject) -> Parsed {
        Parsed {
            bytes: super::encode(object).expect("encode"),
        }
    }

    pub fn file(&self) -> object::File<'_> {
        object::File::parse(&*self.bytes).expect("a valid ELF file")
    }

    /// The contents of the first section called `name` (empty if there is none).
    pub fn section(&self, name: &str) -> &[u8] {
        let file = self.file();
        match file.section_by_name(name) {
            Some(s) => {
                let (offset, size) = s.file_range().unwrap_or((0, 0));
                &self.bytes[offset as usize..(offset + size) as usize]
            }
            None => &[],
        }
    }

    pub fn dwarf(&self) -> gimli::Dwarf<Slice<'_>> {
        gimli::Dwarf::load(|id| -> Result<_, ()> {
            Ok(gimli::EndianSlice::new(
                self.section(id.name()),
                gimli::LittleEndian,
            ))
        })
        .expect("DWARF sections")
    }
}

/// A row of a line program, as a debugger reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    /// Name of the compile unit.
    pub unit: String,
    pub address: u64,
    /// `None` for the end of a sequence; `Some(0)` for a gap (a row without a line).
    pub line: Option<u64>,
}

/// A variable DIE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Var {
    pub parameter: bool,
    pub name: String,
    /// `name` of the base type, or `*name` for a pointer to it.
    pub ty: String,
    pub type_encoding: Option<gimli::DwAte>,
    pub type_size: u64,
    pub location: Vec<u8>,
}

/// A subprogram DIE with what it contains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sub {
    pub unit: String,
    pub name: String,
    pub low: u64,
    pub high: u64,
    pub vars: Vec<Var>,
    /// Lexical blocks as (depth below the subprogram, low, high), in DIE order.
    pub blocks: Vec<(usize, u64, u64)>,
}

/// `lines` as their sequences (each ends with a row without a line), ordered by start
/// address: what a debugger finds for each address, whatever the order of units.
pub(crate) fn sequences(lines: &[Line]) -> Vec<Vec<Line>> {
    let mut out: Vec<Vec<Line>> = lines
        .split_inclusive(|l| l.line.is_none())
        .map(<[Line]>::to_vec)
        .collect();
    out.sort_by(|a, b| (a[0].address, &a[0].unit).cmp(&(b[0].address, &b[0].unit)));
    out
}

/// `subs` ordered by address (then name), whatever the order of units.
pub(crate) fn by_address(subs: &[Sub]) -> Vec<Sub> {
    let mut out = subs.to_vec();
    out.sort_by(|a, b| (a.low, &a.name).cmp(&(b.low, &b.name)));
    out
}

impl Parsed {
    fn string(
        dwarf: &gimli::Dwarf<Slice<'_>>,
        unit: &gimli::Unit<Slice<'_>>,
        v: gimli::AttributeValue<Slice<'_>>,
    ) -> String {
        dwarf
            .attr_string(unit, v)
            .expect("a string")
            .to_string_lossy()
            .into_owned()
    }

    fn unit_name(dwarf: &gimli::Dwarf<Slice<'_>>, unit: &gimli::Unit<Slice<'_>>) -> String {
        let mut entries = unit.entries();
        let root = entries.next_dfs().unwrap().unwrap();
        Self::string(dwarf, unit, root.attr_value(gimli::DW_AT_name).unwrap())
    }

    /// Each unit's name and `DW_AT_producer`, in order.
    pub fn unit_producers(&self) -> Vec<(String, Option<String>)> {
        let dwarf = self.dwarf();
        let mut out = Vec::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next().unwrap() {
            let unit = dwarf.unit(header).unwrap();
            let mut entries = unit.entries();
            let root = entries.next_dfs().unwrap().unwrap();
            let producer = root
                .attr_value(gimli::DW_AT_producer)
                .map(|v| Self::string(&dwarf, &unit, v));
            out.push((Self::unit_name(&dwarf, &unit), producer));
        }
        out
    }

    /// Every line-table row of every unit.
    pub fn lines(&self) -> Vec<Line> {
        let dwarf = self.dwarf();
        let mut out = Vec::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next().unwrap() {
            let unit = dwarf.unit(header).unwrap();
            let name = Self::unit_name(&dwarf, &unit);
            let Some(program) = unit.line_program.clone() else {
                continue;
            };
            let mut rows = program.rows();
            while let Some((_, row)) = rows.next_row().unwrap() {
                out.push(Line {
                    unit: name.clone(),
                    address: row.address(),
                    line: if row.end_sequence() {
                        None
                    } else {
                        // gimli reads line 0 (a gap) as no line.
                        Some(row.line().map_or(0, |l| l.get()))
                    },
                });
            }
        }
        out
    }

    /// Every subprogram of every unit.
    pub fn subprograms(&self) -> Vec<Sub> {
        let dwarf = self.dwarf();
        let mut out = Vec::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next().unwrap() {
            let unit = dwarf.unit(header).unwrap();
            let unit_name = Self::unit_name(&dwarf, &unit);
            let mut entries = unit.entries();
            let mut sub_depth = None;
            while let Some(e) = entries.next_dfs().unwrap() {
                let depth = e.depth();
                if sub_depth.is_some_and(|d| depth <= d) {
                    sub_depth = None;
                }
                let low = match e.attr_value(gimli::DW_AT_low_pc) {
                    Some(gimli::AttributeValue::Addr(a)) => a,
                    _ => 0,
                };
                let high = match e.attr_value(gimli::DW_AT_high_pc) {
                    Some(gimli::AttributeValue::Udata(n)) => low + n,
                    _ => 0,
                };
                match e.tag() {
                    gimli::DW_TAG_subprogram => {
                        sub_depth = Some(depth);
                        out.push(Sub {
                            unit: unit_name.clone(),
                            name: Self::string(
                                &dwarf,
                                &unit,
                                e.attr_value(gimli::DW_AT_name).unwrap(),
                            ),
                            low,
                            high,
                            vars: Vec::new(),
                            blocks: Vec::new(),
                        });
                    }
                    gimli::DW_TAG_lexical_block => {
                        let d = (depth - sub_depth.expect("block outside a subprogram")) as usize;
                        out.last_mut().unwrap().blocks.push((d, low, high));
                    }
                    gimli::DW_TAG_formal_parameter | gimli::DW_TAG_variable => {
                        let Some(gimli::AttributeValue::UnitRef(ty)) =
                            e.attr_value(gimli::DW_AT_type)
                        else {
                            panic!("variable without a type");
                        };
                        let ty_entry = unit.entry(ty).unwrap();
                        let (ty, type_encoding, type_size) =
                            if ty_entry.tag() == gimli::DW_TAG_pointer_type {
                                let Some(gimli::AttributeValue::UnitRef(p)) =
                                    ty_entry.attr_value(gimli::DW_AT_type)
                                else {
                                    panic!("pointer without a pointee");
                                };
                                let p = unit.entry(p).unwrap();
                                let name = Self::string(
                                    &dwarf,
                                    &unit,
                                    p.attr_value(gimli::DW_AT_name).unwrap(),
                                );
                                (
                                    format!("*{name}"),
                                    None,
                                    ty_entry
                                        .attr_value(gimli::DW_AT_byte_size)
                                        .unwrap()
                                        .udata_value()
                                        .unwrap(),
                                )
                            } else {
                                let Some(gimli::AttributeValue::Encoding(enc)) =
                                    ty_entry.attr_value(gimli::DW_AT_encoding)
                                else {
                                    panic!("base type without encoding");
                                };
                                (
                                    Self::string(
                                        &dwarf,
                                        &unit,
                                        ty_entry.attr_value(gimli::DW_AT_name).unwrap(),
                                    ),
                                    Some(enc),
                                    ty_entry
                                        .attr_value(gimli::DW_AT_byte_size)
                                        .unwrap()
                                        .udata_value()
                                        .unwrap(),
                                )
                            };
                        let Some(gimli::AttributeValue::Exprloc(expr)) =
                            e.attr_value(gimli::DW_AT_location)
                        else {
                            panic!("variable without an exprloc location");
                        };
                        let sub = out.last_mut().expect("variable outside a subprogram");
                        sub.vars.push(Var {
                            parameter: e.tag() == gimli::DW_TAG_formal_parameter,
                            name: Self::string(
                                &dwarf,
                                &unit,
                                e.attr_value(gimli::DW_AT_name).unwrap(),
                            ),
                            ty,
                            type_encoding,
                            type_size,
                            location: expr.0.slice().to_vec(),
                        });
                    }
                    _ => {}
                }
            }
        }
        out
    }
}

/// What a call-site DIE says it calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Callee {
    /// `DW_AT_abstract_origin` referring to a subprogram with an address: its unit, name
    /// and `low_pc`.
    Function {
        unit: String,
        name: String,
        low: u64,
    },
    /// `DW_AT_abstract_origin` referring to a declaration: its name.
    Declaration(String),
    /// `DW_AT_GNU_call_site_target`: the expression's bytes.
    Target(Vec<u8>),
    None,
}

/// A call-site DIE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallSiteDie {
    /// Name of the subprogram it belongs to, and whether that claims all its tail calls
    /// are described.
    pub caller: String,
    pub caller_all_tail_calls: bool,
    pub return_pc: u64,
    pub tail_call: bool,
    pub callee: Callee,
}

impl Parsed {
    /// Every call-site DIE of every unit, with its references resolved.
    pub fn call_sites(&self) -> Vec<CallSiteDie> {
        let dwarf = self.dwarf();
        let flag = |e: &gimli::DebuggingInformationEntry<Slice<'_>>, at| {
            matches!(e.attr_value(at), Some(gimli::AttributeValue::Flag(true)))
        };
        // Every subprogram by its .debug_info offset.
        let mut subprograms = std::collections::HashMap::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next().unwrap() {
            let unit = dwarf.unit(header).unwrap();
            let unit_name = Self::unit_name(&dwarf, &unit);
            let mut entries = unit.entries();
            while let Some(e) = entries.next_dfs().unwrap() {
                if e.tag() != gimli::DW_TAG_subprogram {
                    continue;
                }
                let name = Self::string(&dwarf, &unit, e.attr_value(gimli::DW_AT_name).unwrap());
                let callee = if flag(e, gimli::DW_AT_declaration) {
                    assert!(e.attr_value(gimli::DW_AT_low_pc).is_none());
                    Callee::Declaration(name)
                } else {
                    let Some(gimli::AttributeValue::Addr(low)) = e.attr_value(gimli::DW_AT_low_pc)
                    else {
                        panic!("subprogram `{name}` without low_pc");
                    };
                    Callee::Function {
                        unit: unit_name.clone(),
                        name,
                        low,
                    }
                };
                let offset = e.offset().to_debug_info_offset(&unit.header).unwrap();
                subprograms.insert(offset, callee);
            }
        }
        let mut out = Vec::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next().unwrap() {
            let unit = dwarf.unit(header).unwrap();
            let mut entries = unit.entries();
            let mut caller = (String::new(), false);
            while let Some(e) = entries.next_dfs().unwrap() {
                match e.tag() {
                    gimli::DW_TAG_subprogram => {
                        caller = (
                            Self::string(&dwarf, &unit, e.attr_value(gimli::DW_AT_name).unwrap()),
                            flag(e, gimli::DW_AT_GNU_all_tail_call_sites),
                        );
                    }
                    gimli::DW_TAG_GNU_call_site => {
                        assert_eq!(e.depth(), 2, "a call site is a child of its subprogram");
                        let Some(gimli::AttributeValue::Addr(return_pc)) =
                            e.attr_value(gimli::DW_AT_low_pc)
                        else {
                            panic!("call site without a return address");
                        };
                        let callee = match (
                            e.attr_value(gimli::DW_AT_abstract_origin),
                            e.attr_value(gimli::DW_AT_GNU_call_site_target),
                        ) {
                            (Some(gimli::AttributeValue::DebugInfoRef(r)), None) => subprograms
                                .get(&r)
                                .unwrap_or_else(|| panic!("origin {r:?} is no subprogram"))
                                .clone(),
                            (None, Some(gimli::AttributeValue::Exprloc(x))) => {
                                Callee::Target(x.0.slice().to_vec())
                            }
                            (None, None) => Callee::None,
                            other => panic!("unexpected call-site target {other:?}"),
                        };
                        out.push(CallSiteDie {
                            caller: caller.0.clone(),
                            caller_all_tail_calls: caller.1,
                            return_pc,
                            tail_call: flag(e, gimli::DW_AT_GNU_tail_call),
                            callee,
                        });
                    }
                    _ => {}
                }
            }
        }
        out
    }
}

/// A deterministic pseudo-random source (xorshift64) for generated objects.
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    /// One of `choices`.
    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len() as u64) as usize]
    }
}

/// Objects of every kind the encoder meets, as one payload's worth: one object (mostly)
/// or several (as the registry merges them), each with a few functions or many, at
/// addresses low or near the top, adjacent, padded or far apart, in or out of address
/// order, with names repeated or not, line rows of every step size in several files,
/// every kind of frame (epilogues, explicit rows), variables, nested blocks and call sites
/// of every kind. Some payloads are refused (functions overlapping).
pub(crate) fn random_objects(seed: u64) -> Vec<JitObject> {
    use crate::model::{BaseType, CallTarget, LineRow, Location, UnwindRow, Variable};
    use crate::model::{CfaBase, VariableKind};
    let mut r = Rng::new(seed);
    let count = match r.below(8) {
        0 => 2 + r.below(5),
        1 => r.pick(&[32, 33, 40]),
        _ => 1,
    };
    let high = r.below(8) == 0;
    let files = r.pick(&[1, 2, 3, 20]);
    let mut at = if high {
        0xffff_ffff_0000_0000 - r.below(1 << 20)
    } else {
        0x1000 + r.below(1 << 30)
    };
    // Where each object's functions go: runs one after the other, or (now and then)
    // interleaved, each function given to one of the objects at random.
    let interleave = count > 1 && r.below(4) == 0;
    let overlap = r.below(12) == 0;
    let mut placements: Vec<Vec<(u64, u64, u64)>> = vec![Vec::new(); count as usize];
    for k in 0..count as usize {
        let n = match r.below(10) {
            0 => 9 + r.below(60),
            1 => 1 + r.below(300),
            _ => 1 + r.below(8),
        };
        for i in 0..n {
            let size = match r.below(12) {
                0 => 1 + r.below(4),
                1 => 70_000 + r.below(3 << 20),
                _ => 16 + r.below(300),
            };
            let owner = if interleave {
                r.below(count) as usize
            } else {
                k
            };
            placements[owner].push((i, at, size));
            at += size + r.pick(&[0, 0, 0, 1, 3, 14, 15, 16, 17, 500, 1 << 20]);
            // Now and then, a function over another.
            if overlap && k == 0 && i == 0 && n > 1 {
                at -= size / 2 + 1;
            }
        }
        if r.below(4) == 0 {
            at += r.below(1 << 16);
        }
    }
    let mut objects = Vec::new();
    let mut starts: Vec<u64> = Vec::new();
    for mut placed in placements {
        let mut o = JitObject::new();
        match r.below(4) {
            0 => placed.reverse(),
            1 => {
                for k in (1..placed.len()).rev() {
                    let j = r.below(k as u64 + 1) as usize;
                    placed.swap(k, j);
                }
            }
            _ => {}
        }
        for (i, start, size) in placed {
            let name = match r.below(10) {
                0 => "twice".to_string(),
                1 => format!("Mixed_Case_{i}"),
                2 => format!("jit_function_{seed:06}_{i:06}_with_a_rather_long_name"),
                3 => format!("ünï_{i}"),
                _ => format!("s{seed}_f{i}"),
            };
            let Ok(f) = o.add_function(&name, start, size) else {
                continue;
            };
            starts.push(start);
            let size = size as u32;
            if r.below(6) != 0 {
                let mut rows = Vec::new();
                let mut offset = if r.below(4) == 0 {
                    r.below(8) as u32
                } else {
                    0
                };
                let mut line = 1 + r.below(100) as u32;
                for _ in 0..r.below(14) {
                    if offset >= size {
                        break;
                    }
                    rows.push(LineRow { offset, line });
                    offset += 1 + match r.below(8) {
                        0 => r.below(400) as u32,
                        1 => r.below(70_000) as u32,
                        _ => r.below(8) as u32,
                    };
                    line = match r.below(8) {
                        0 => 1 + r.below(4_000_000_000) as u32,
                        1 => line.saturating_sub(r.below(30) as u32).max(1),
                        _ => line + r.below(6) as u32,
                    };
                }
                let file = format!("dir/file{}.js", r.below(files));
                let _ = o.set_lines(f, &file, &rows);
            }
            match r.below(6) {
                0 => {}
                1 | 2 => {
                    let push = 1 + r.below(3) as u32;
                    let setup = push + r.below(4) as u32;
                    let _ = o.set_frame_pointer(f, push, setup);
                    let mut after = setup;
                    for _ in 0..r.below(4) {
                        let restore = after + 1 + r.below(20) as u32;
                        let ret = restore + 1 + r.below(3) as u32;
                        let ret = if r.below(3) == 0 { size } else { ret };
                        if o.add_epilogue(f, restore, ret).is_err() {
                            break;
                        }
                        after = ret;
                    }
                }
                3 => {
                    let _ = o.set_unwind(f, &[UnwindRow::X86_64_ENTRY]);
                }
                _ => {
                    let mut rows = vec![UnwindRow::X86_64_ENTRY];
                    let mut offset = 0;
                    for _ in 0..r.below(5) {
                        let far = if r.below(5) == 0 { 1000 } else { 9 };
                        offset += 1 + r.below(far) as u32;
                        let fp = r.below(2) == 0;
                        let big = if r.below(6) == 0 { 2000 } else { 4 };
                        let cfa = 8 * (2 + r.below(big) as i32);
                        rows.push(UnwindRow {
                            offset,
                            cfa_base: if fp { CfaBase::Fp } else { CfaBase::Sp },
                            cfa_offset: cfa,
                            fp_offset: if fp || r.below(2) == 0 {
                                -8 * (2 + r.below(3) as i32)
                            } else {
                                0
                            },
                        });
                    }
                    let _ = o.set_unwind(f, &rows);
                }
            }
            if r.below(4) == 0 {
                for k in 0..r.below(4) {
                    let location = match r.below(4) {
                        0 => Location::Register(r.below(128) as u16),
                        1 => Location::FrameOffset(-(r.below(1 << 20) as i32)),
                        _ => Location::FrameOffset(r.below(300) as i32 - 150),
                    };
                    let var = Variable {
                        name: format!("v{k}"),
                        kind: if r.below(2) == 0 {
                            VariableKind::Local
                        } else {
                            VariableKind::Parameter
                        },
                        ty: BaseType::ALL[r.below(11) as usize],
                        location,
                    };
                    let _ = o.add_variable(f, var);
                }
            }
            if r.below(4) == 0 {
                let mut made = 0u32;
                for _ in 0..r.below(6) {
                    let parent = if made > 0 && r.below(2) == 0 {
                        Some(r.below(made.into()) as u32)
                    } else {
                        None
                    };
                    let lo = r.below(size.into()) as u32;
                    let hi = lo + 1 + r.below(u64::from(size - lo)) as u32;
                    if o.add_block(f, "b", lo, hi.min(size), parent).is_ok() {
                        made += 1;
                    }
                }
            }
            if r.below(3) == 0 {
                let mut offset = 0;
                for _ in 0..r.below(5) {
                    offset += 1 + r.below(12) as u32;
                    let target = match r.below(6) {
                        0 if !starts.is_empty() => {
                            CallTarget::Address(starts[r.below(starts.len() as u64) as usize])
                        }
                        1 if !starts.is_empty() => {
                            CallTarget::Address(starts[r.below(starts.len() as u64) as usize] + 1)
                        }
                        2 => CallTarget::Symbol {
                            address: 0x5000 + r.below(3),
                            name: format!("host{}", r.below(3)).into(),
                        },
                        3 => CallTarget::Indirect,
                        _ => CallTarget::Address(1 + r.below(1 << 40)),
                    };
                    let _ = if r.below(4) == 0 {
                        o.add_tail_call(f, offset, target)
                    } else {
                        o.add_call_site(f, offset, target)
                    };
                }
            }
        }
        objects.push(o);
    }
    objects
}

/// FNV-1a over `bytes`, continuing from `h`.
pub(crate) fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
