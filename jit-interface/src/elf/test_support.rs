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
    /// `None` for the end of a sequence.
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
                        row.line().map(|l| l.get())
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
