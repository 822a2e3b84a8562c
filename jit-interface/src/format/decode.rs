//! Reads compact records back into [`JitObject`]s, through the model's validating setters,
//! so a decoded object satisfies everything an encoded one did.
//!
//! The bytes are parsed once, here, and what they say is handed to a [`Sink`]: the model
//! builder ([`ModelSink`], behind [`decode_all`]) or a consumer's own tables (the GDB reader
//! collects names, rows and ranges without building the model, and asks the model to decide
//! whenever its own checks refuse).
//!
//! The input is untrusted (memory of a live process or a core file from another machine):
//! every read is bounded, every count is checked against the bytes that remain before
//! anything is allocated for it, each loop runs at most once per input byte, and there is
//! no recursion. Errors name the problem and its byte offset.

use super::encode::{
    FUNCTION_BLOCKS, FUNCTION_KIND_MASK, FUNCTION_LINES, FUNCTION_REGISTERS, OBJECT_LIVE,
    OBJECT_SOURCES,
};
use super::frame::{self, KIND_DEFAULT, KIND_FP, KIND_FP_CANONICAL};
use super::lines;
use super::sources;
use super::wire::{invalid, Reader};
use super::{arch_from_code, DecodeError, Decoded, LiveCheck, MAGIC, MAX_COUNT, VERSION};
use crate::model::{Arch, CfaBase, FunctionId, JitObject, LineRow, SavedRegister, UnwindRow};
use crate::Result as ModelResult;

/// Fewest bytes each item can take, for bounding counts by the remaining input.
const MIN_STRING_BYTES: usize = 2; // length, one byte
const MIN_FUNCTION_BYTES: usize = 5; // name length, one byte, start, size, flags
const MIN_UNWIND_ROW_BYTES: usize = 3;
const MIN_EPILOGUE_BYTES: usize = 2;
const MIN_BLOCK_BYTES: usize = 4;
const MIN_REGISTER_RULE_BYTES: usize = 3;

/// Receives what the decoder reads, record by record and function by function. Names and
/// file names borrow the payload; row slices are only valid during the call.
///
/// The decoder checks everything about the bytes themselves (bounds, counts, 32-bit fields,
/// string-table indices, names non-empty without NUL, line numbers) before calling a sink.
/// The data model's rules (function sizes, rows in order and inside their function, frame
/// offsets, blocks inside their parents, functions of an object not overlapping) are the
/// sink's to check: an error it returns refuses the payload, at the item's byte offset. A
/// sink that checks less than the model does must not be used to decide that a payload is
/// valid.
pub trait Sink<'a> {
    /// An object record starts.
    fn object(&mut self, arch: Arch, live: Option<LiveCheck>);
    /// The text of source file `file` of the current object (one call per file, after
    /// [`Sink::object`] and before the object's first [`Sink::function`]). The decoder has
    /// checked that no file comes twice and that the text is at most `MAX_SOURCE_BYTES`
    /// of UTF-8 without NUL.
    fn source(&mut self, file: &'a str, text: &'a str) -> ModelResult<()>;
    /// A function of the current object, `[start, start + size)` as read.
    fn function(&mut self, name: &'a str, start: u64, size: u64) -> ModelResult<()>;
    /// The current function keeps a frame-pointer frame (offsets after its prologue's two
    /// instructions).
    fn frame_pointer(&mut self, push_end: u32, setup_end: u32) -> ModelResult<()>;
    /// An epilogue of the current function, after [`Sink::frame_pointer`].
    fn epilogue(&mut self, restore_end: u32, ret_end: u32) -> ModelResult<()>;
    /// Explicit frame-description rows of the current function.
    fn unwind_rows(&mut self, rows: &[UnwindRow]) -> ModelResult<()>;
    /// The current function's source file and line rows.
    fn lines(&mut self, file: &'a str, rows: &[LineRow]) -> ModelResult<()>;
    /// A nested block of the current function; `parent` is the index of an earlier block of
    /// the same function (`None`: the function itself).
    fn block(
        &mut self,
        name: &'a str,
        start: u32,
        end: u32,
        parent: Option<u32>,
    ) -> ModelResult<()>;
    /// A register rule of the current function, in the order of the payload (offsets
    /// non-decreasing as the decoder read them; everything else is the sink's to check).
    fn register_rule(&mut self, rule: SavedRegister) -> ModelResult<()>;
    /// The current object record ends (it has at least one function).
    fn end_object(&mut self) -> ModelResult<()>;
}

/// Builds [`Decoded`] objects through the model's validating setters.
#[derive(Default)]
struct ModelSink {
    done: Vec<Decoded>,
    object: Option<(JitObject, Option<LiveCheck>)>,
    /// The current function's index (`FunctionId::index`).
    f: usize,
}

impl ModelSink {
    fn current(&mut self) -> &mut JitObject {
        &mut self
            .object
            .get_or_insert_with(|| (JitObject::new(), None))
            .0
    }
}

impl<'a> Sink<'a> for ModelSink {
    fn object(&mut self, arch: Arch, live: Option<LiveCheck>) {
        self.object = Some((JitObject::with_arch(arch), live));
    }
    fn source(&mut self, file: &'a str, text: &'a str) -> ModelResult<()> {
        self.current().set_source(file, text)
    }
    fn function(&mut self, name: &'a str, start: u64, size: u64) -> ModelResult<()> {
        self.f = self.current().add_function(name, start, size)?.index();
        Ok(())
    }
    fn frame_pointer(&mut self, push_end: u32, setup_end: u32) -> ModelResult<()> {
        let f = FunctionId::from_index(self.f);
        self.current().set_frame_pointer(f, push_end, setup_end)
    }
    fn epilogue(&mut self, restore_end: u32, ret_end: u32) -> ModelResult<()> {
        let f = FunctionId::from_index(self.f);
        self.current().add_epilogue(f, restore_end, ret_end)
    }
    fn unwind_rows(&mut self, rows: &[UnwindRow]) -> ModelResult<()> {
        let f = FunctionId::from_index(self.f);
        self.current().set_unwind(f, rows)
    }
    fn lines(&mut self, file: &'a str, rows: &[LineRow]) -> ModelResult<()> {
        let f = FunctionId::from_index(self.f);
        self.current().set_lines(f, file, rows)
    }
    fn block(
        &mut self,
        name: &'a str,
        start: u32,
        end: u32,
        parent: Option<u32>,
    ) -> ModelResult<()> {
        let f = FunctionId::from_index(self.f);
        self.current().add_block(f, name, start, end, parent)?;
        Ok(())
    }
    fn register_rule(&mut self, rule: SavedRegister) -> ModelResult<()> {
        let f = FunctionId::from_index(self.f);
        self.current()
            .add_register_rule(f, rule.offset, rule.reg, rule.rule)
    }
    fn end_object(&mut self) -> ModelResult<()> {
        let (object, live) = self.object.take().unwrap_or_default();
        object.validate()?;
        self.done.push(Decoded { object, live });
        Ok(())
    }
}

pub(crate) fn decode_all(bytes: &[u8]) -> Result<Vec<Decoded>, DecodeError> {
    let mut sink = ModelSink::default();
    decode_into(bytes, &mut sink)?;
    Ok(sink.done)
}

pub(crate) fn decode_into<'a>(
    bytes: &'a [u8],
    sink: &mut impl Sink<'a>,
) -> Result<(), DecodeError> {
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        return Err(DecodeError::NotOurs);
    }
    let mut r = Reader::new(bytes);
    r.bytes(MAGIC.len(), "the magic")?;
    let at = r.pos();
    let version = r.u8("the header")?;
    if version != VERSION {
        return Err(invalid(
            format!("format version {version} is not supported: this reader reads version {VERSION} only"),
            at,
        ));
    }
    let at = r.pos();
    let code = r.u8("the header")?;
    let Some(arch) = arch_from_code(code) else {
        return Err(invalid(
            format!("unknown architecture code {code} (known: 62 x86-64, 183 aarch64)"),
            at,
        ));
    };
    let at = r.pos();
    let pointer_size = r.u8("the header")?;
    if pointer_size != arch.pointer_size() {
        return Err(invalid(
            format!(
                "pointer size {pointer_size} does not match {} (pointer size {})",
                arch.name(),
                arch.pointer_size()
            ),
            at,
        ));
    }
    let at = r.pos();
    let flags = r.u8("the header")?;
    if flags != 0 {
        return Err(invalid(
            format!("unknown header flags {flags:#04x}: version {VERSION} defines none"),
            at,
        ));
    }

    // Object records until the end: the payload's size is the only count, so a runtime can
    // append records in place.
    let mut k = 0;
    while !r.is_at_end() {
        decode_object(&mut r, arch, sink).map_err(within(|| format!("object {k}")))?;
        k += 1;
    }
    if k == 0 {
        return Err(invalid("the payload holds no object", r.pos()));
    }
    Ok(())
}

/// Prefixes a decoding error with where it happened (only on the error path: no cost for
/// valid payloads).
fn within(prefix: impl FnOnce() -> String) -> impl FnOnce(DecodeError) -> DecodeError {
    move |e| match e {
        DecodeError::Invalid(why) => DecodeError::Invalid(format!("{}: {why}", prefix())),
        other => other,
    }
}

/// A model validation error, found at byte offset `at`. The prefix added by [`within`]
/// names the function, so `BadRows` loses its own copy of the name.
fn model_error(e: crate::Error, at: usize) -> DecodeError {
    match e {
        crate::Error::BadRows { why, .. } => invalid(why, at),
        other => invalid(other, at),
    }
}

fn decode_object<'a>(
    r: &mut Reader<'a>,
    arch: Arch,
    sink: &mut impl Sink<'a>,
) -> Result<(), DecodeError> {
    let object_at = r.pos();
    let flags = r.u8("an object's flags")?;
    if flags & !(OBJECT_LIVE | OBJECT_SOURCES) != 0 {
        return Err(invalid(
            format!("unknown object flags {flags:#04x}"),
            object_at,
        ));
    }
    let live = if flags & OBJECT_LIVE != 0 {
        let address = r.u64_le("a live check")?;
        let at = r.pos();
        let key = r.u64_le("a live check")?;
        if key == 0 {
            return Err(invalid(
                "the live check key is 0, the value of a cleared slot",
                at,
            ));
        }
        Some(LiveCheck { address, key })
    } else {
        None
    };
    let n = r.count("the string count", MIN_STRING_BYTES, MAX_COUNT)?;
    let mut strings = Vec::with_capacity(n);
    for _ in 0..n {
        strings.push(r.text("a string-table entry")?);
    }
    let strings = &strings[..];
    let sources_at = r.pos();
    let sources = if flags & OBJECT_SOURCES != 0 {
        sources::read_compact(r, strings)?
    } else {
        Vec::new()
    };
    let at = r.pos();
    let n = r.count("the function count", MIN_FUNCTION_BYTES, MAX_COUNT)?;
    if n == 0 {
        return Err(invalid("the object has no function", at));
    }
    sink.object(arch, live);
    for (file, text) in sources {
        sink.source(file, text)
            .map_err(|e| invalid(e, sources_at))?;
    }
    let mut state = State {
        arch,
        prev_end: 0,
        line: 1,
        rows: Vec::new(),
    };
    for i in 0..n {
        decode_function(r, sink, strings, &mut state, i)?;
    }
    sink.end_object().map_err(|e| invalid(e, object_at))
}

/// What a reader carries from one function to the next within an object.
struct State {
    arch: Arch,
    prev_end: u64,
    line: i64,
    /// The line rows of the function being decoded (one buffer for all: the model copies them).
    rows: Vec<LineRow>,
}

fn decode_function<'a>(
    r: &mut Reader<'a>,
    sink: &mut impl Sink<'a>,
    strings: &[&'a str],
    state: &mut State,
    i: usize,
) -> Result<(), DecodeError> {
    let at = r.pos();
    let name = r
        .text("a function name")
        .map_err(within(|| format!("function {i}")))?;
    function_body(r, sink, strings, state, name, at)
        .map_err(within(|| format!("function {i} `{name}`")))
}

fn function_body<'a>(
    r: &mut Reader<'a>,
    sink: &mut impl Sink<'a>,
    strings: &[&'a str],
    state: &mut State,
    name: &'a str,
    at: usize,
) -> Result<(), DecodeError> {
    let delta = r.sleb("a function start")?;
    let start = state.prev_end.wrapping_add(delta as u64);
    let size = r.uleb("a function size")?;
    sink.function(name, start, size)
        .map_err(|e| model_error(e, at))?;
    state.prev_end = start.wrapping_add(size);
    // The model refuses larger functions; a sink that does not is refused here.
    let Ok(size) = u32::try_from(size) else {
        return Err(invalid(format!("size {size} does not fit in 32 bits"), at));
    };

    let at = r.pos();
    let flags = r.u8("a function's flags")?;
    if flags & !(FUNCTION_KIND_MASK | FUNCTION_LINES | FUNCTION_BLOCKS | FUNCTION_REGISTERS) != 0 {
        return Err(invalid(format!("unknown function flags {flags:#04x}"), at));
    }
    let at = r.pos();
    match flags & FUNCTION_KIND_MASK {
        KIND_DEFAULT => {}
        KIND_FP_CANONICAL => {
            let Some((push_end, setup_end, restore_end, ret_end)) =
                frame::canonical(state.arch, size)
            else {
                return Err(invalid(
                    format!("{size} bytes are too few for the canonical frame-pointer prologue and epilogue"),
                    at,
                ));
            };
            sink.frame_pointer(push_end, setup_end)
                .and_then(|()| sink.epilogue(restore_end, ret_end))
                .map_err(|e| model_error(e, at))?;
        }
        KIND_FP => decode_frame_pointer(r, sink)?,
        _ => decode_unwind_rows(r, sink)?, // KIND_ROWS: the kind has two bits
    }
    if flags & FUNCTION_LINES != 0 {
        decode_lines(r, sink, strings, state)?;
    }
    if flags & FUNCTION_BLOCKS != 0 {
        decode_blocks(r, sink, strings)?;
    }
    if flags & FUNCTION_REGISTERS != 0 {
        decode_register_rules(r, sink)?;
    }
    Ok(())
}

fn decode_register_rules<'a>(
    r: &mut Reader<'a>,
    sink: &mut impl Sink<'a>,
) -> Result<(), DecodeError> {
    let at = r.pos();
    let n = r.count(
        "the register rule count",
        MIN_REGISTER_RULE_BYTES,
        MAX_COUNT,
    )?;
    if n == 0 {
        return Err(invalid(
            "the register rule count is 0 (the flag says there are rules)",
            at,
        ));
    }
    let mut offset = 0u64;
    for j in 0..n {
        let at = r.pos();
        let adv = r.uleb("a register rule")?;
        let reg = r.uleb("a register rule")?;
        let code = r.uleb("a register rule")?;
        offset = offset.saturating_add(adv);
        let (Ok(offset32), Ok(reg)) = (u32::try_from(offset), u16::try_from(reg)) else {
            return Err(invalid(
                format!("register rule {j}: its offset or register number is out of range"),
                at,
            ));
        };
        let Some(rule) = frame::rule_from_code(code) else {
            return Err(invalid(
                format!("register rule {j}: rule code {code:#x} is no rule"),
                at,
            ));
        };
        sink.register_rule(SavedRegister {
            offset: offset32,
            reg,
            rule,
        })
        .map_err(|e| model_error(e, at))?;
    }
    Ok(())
}

fn decode_frame_pointer<'a>(
    r: &mut Reader<'a>,
    sink: &mut impl Sink<'a>,
) -> Result<(), DecodeError> {
    let at = r.pos();
    let push_end = r.uleb("a frame-pointer prologue")?;
    let setup_len = r.uleb("a frame-pointer prologue")?;
    let setup_end = push_end.checked_add(setup_len);
    let (Ok(push_end), Some(Ok(setup_end))) =
        (u32::try_from(push_end), setup_end.map(u32::try_from))
    else {
        return Err(invalid(
            "a frame-pointer prologue offset does not fit in 32 bits",
            at,
        ));
    };
    sink.frame_pointer(push_end, setup_end)
        .map_err(|e| model_error(e, at))?;
    let n = r.count("the epilogue count", MIN_EPILOGUE_BYTES, MAX_COUNT)?;
    let mut after = u64::from(setup_end);
    for _ in 0..n {
        let at = r.pos();
        let restore = r.uleb("an epilogue")?;
        let ret = r.uleb("an epilogue")?;
        // after + restore + 1 and restore_end + ret + 1, in 64 bits first.
        let restore_end = after.checked_add(restore).and_then(|v| v.checked_add(1));
        let ret_end = restore_end
            .and_then(|v| v.checked_add(ret))
            .and_then(|v| v.checked_add(1));
        let (Some(Ok(restore_end)), Some(Ok(ret_end))) =
            (restore_end.map(u32::try_from), ret_end.map(u32::try_from))
        else {
            return Err(invalid("an epilogue offset does not fit in 32 bits", at));
        };
        sink.epilogue(restore_end, ret_end)
            .map_err(|e| model_error(e, at))?;
        after = u64::from(ret_end);
    }
    Ok(())
}

fn decode_unwind_rows<'a>(r: &mut Reader<'a>, sink: &mut impl Sink<'a>) -> Result<(), DecodeError> {
    let rows_at = r.pos();
    let n = r.count("the unwind row count", MIN_UNWIND_ROW_BYTES, MAX_COUNT)?;
    let mut rows = Vec::with_capacity(n);
    let mut offset = 0u64;
    for j in 0..n {
        let at = r.pos();
        let adv = r.uleb("an unwind row")?;
        let cfa = r.sleb("an unwind row")?;
        let fp = r.sleb("an unwind row")?;
        offset = offset.saturating_add(adv);
        let cfa_base = if cfa & 1 == 0 {
            CfaBase::Sp
        } else {
            CfaBase::Fp
        };
        let cfa_offset = (cfa >> 1).checked_mul(8).map(i32::try_from);
        let fp_offset = fp.checked_mul(8).map(i32::try_from);
        let (Ok(offset32), Some(Ok(cfa_offset)), Some(Ok(fp_offset))) =
            (u32::try_from(offset), cfa_offset, fp_offset)
        else {
            return Err(invalid(
                format!("unwind row {j}: an offset does not fit in 32 bits"),
                at,
            ));
        };
        rows.push(UnwindRow {
            offset: offset32,
            cfa_base,
            cfa_offset,
            fp_offset,
        });
    }
    sink.unwind_rows(&rows).map_err(|e| model_error(e, rows_at))
}

fn decode_lines<'a>(
    r: &mut Reader<'a>,
    sink: &mut impl Sink<'a>,
    strings: &[&'a str],
    state: &mut State,
) -> Result<(), DecodeError> {
    let lines_at = r.pos();
    let file = string(r, strings, "a file index")?;
    let n = r.count("the line row count", 1, MAX_COUNT)?;
    let mut rows = std::mem::take(&mut state.rows);
    rows.clear();
    rows.reserve(n);
    let mut offset = 0u64;
    for j in 0..n {
        let at = r.pos();
        let (adv, line_adv) = lines::read_row(r)?;
        offset = offset.saturating_add(adv);
        let line = state.line.checked_add(line_adv);
        let Ok(offset32) = u32::try_from(offset) else {
            return Err(invalid(
                format!("line row {j}: offset {offset} does not fit in 32 bits"),
                at,
            ));
        };
        let Some(line32) = line.and_then(|l| u32::try_from(l).ok()) else {
            return Err(invalid(
                format!(
                    "line row {j}: line {} + {line_adv} is outside 0..=2^32 - 1 (0: a gap)",
                    state.line
                ),
                at,
            ));
        };
        // A gap (line 0) leaves the register at the last line, which the next row
        // advances from.
        if line32 != LineRow::GAP {
            state.line = i64::from(line32);
        }
        rows.push(LineRow {
            offset: offset32,
            line: line32,
        });
    }
    let set = sink
        .lines(file, &rows)
        .map_err(|e| model_error(e, lines_at));
    state.rows = rows;
    set
}

fn decode_blocks<'a>(
    r: &mut Reader<'a>,
    sink: &mut impl Sink<'a>,
    strings: &[&'a str],
) -> Result<(), DecodeError> {
    let at = r.pos();
    let n = r.count("the block count", MIN_BLOCK_BYTES, MAX_COUNT)?;
    if n == 0 {
        return Err(invalid(
            "the block count is 0 although the function's flags announce blocks",
            at,
        ));
    }
    for _ in 0..n {
        let at = r.pos();
        let name = string(r, strings, "a block name index")?;
        let start = r.uleb_u32("a block start")?;
        let len = r.uleb_u32("a block length")?;
        let parent = r.uleb_u32("a block parent")?;
        let Some(end) = start.checked_add(len) else {
            return Err(invalid(
                format!("block `{name}`: start {start} + length {len} does not fit in 32 bits"),
                at,
            ));
        };
        let parent = parent.checked_sub(1);
        sink.block(name, start, end, parent)
            .map_err(|e| model_error(e, at))?;
    }
    Ok(())
}

/// A string-table reference.
fn string<'s>(r: &mut Reader<'_>, strings: &[&'s str], what: &str) -> Result<&'s str, DecodeError> {
    let at = r.pos();
    let i = r.uleb(what)?;
    usize::try_from(i)
        .ok()
        .and_then(|i| strings.get(i).copied())
        .ok_or_else(|| {
            invalid(
                format!(
                    "{what} {i} is outside the string table ({} strings)",
                    strings.len()
                ),
                at,
            )
        })
}
