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
