//! JSON rendering of a decoded payload and of a walk of the entry list, for the GDB Python scripts (which get it through the
//! reader plugin). Hand-written to keep the reader free of serialisation dependencies.
//!
//! Shape (numbers are decimal integers; addresses are full 64-bit values, which Python's
//! `json` reads exactly):
//!
//! ```text
//! {"kind": "compact" | "elf", "arch": "x86-64" | "aarch64" | null,
//!  "objects": [{"live": {"address": N, "key": N} | null}, ...],
//!  "functions": [{"name": S, "start": N, "size": N, "file": S | null,
//!                 "lines": [[ADDR, LINE], ...], "object": N}, ...],
//!  "problems": [S, ...],
//!  "sources": [{"file": S, "text": S, "object": N}, ...]}
//! ```
//!
//! `"sources"` (the source texts the runtime registered) is there only when the payload
//! carries some.
//!
//! or, for a payload that cannot be decoded, `{"error": S}`.

use std::fmt::Write as _;

use super::list::{
    read_entry, walk_list, EntryError, Limits, ListEntry, ListProblem, ListReport, Memory,
};
use super::{decode_payload, PayloadInfo, Symbolizer};

/// Decodes `bytes` and renders the result (or the error) as one JSON object.
pub fn payload_json(bytes: &[u8]) -> String {
    match decode_payload(bytes) {
        Ok(info) => payload_info_json(&info),
        Err(e) => error_json(&e.to_string()),
    }
}

/// Renders an already decoded payload.
pub fn payload_info_json(info: &PayloadInfo) -> String {
    let mut out = String::with_capacity(64 + info.functions.len() * 96);
    out.push_str("{\"kind\": ");
    json_string(&mut out, info.kind.name());
    out.push_str(", \"arch\": ");
    match info.arch {
        Some(a) => json_string(&mut out, a.name()),
        None => out.push_str("null"),
    }
    out.push_str(", \"objects\": [");
    for (i, o) in info.objects.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match o.live {
            Some(l) => {
                let _ = write!(
                    out,
                    "{{\"live\": {{\"address\": {}, \"key\": {}}}}}",
                    l.address, l.key
                );
            }
            None => out.push_str("{\"live\": null}"),
        }
    }
    out.push_str("], \"functions\": [");
    for (i, f) in info.functions.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str("{\"name\": ");
        json_string(&mut out, &f.name);
        let _ = write!(
            out,
            ", \"start\": {}, \"size\": {}, \"file\": ",
            f.start, f.size
        );
        match &f.file {
            Some(file) => json_string(&mut out, file),
            None => out.push_str("null"),
        }
        out.push_str(", \"lines\": [");
        for (j, (a, l)) in f.lines.iter().enumerate() {
            if j > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "[{a}, {l}]");
        }
        let _ = write!(out, "], \"object\": {}}}", f.object);
    }
    out.push_str("], \"problems\": [");
    for (i, p) in info.problems.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        json_string(&mut out, p);
    }
    out.push(']');
    if !info.sources.is_empty() {
        out.push_str(", \"sources\": [");
        for (i, s) in info.sources.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str("{\"file\": ");
            json_string(&mut out, &s.file);
            out.push_str(", \"text\": ");
            json_string(&mut out, &s.text);
            let _ = write!(out, ", \"object\": {}}}", s.object);
        }
        out.push(']');
    }
    out.push('}');
    out
}

/// Appends `s` as a JSON string literal: quotes, backslashes and control characters escaped
/// (RFC 8259); everything else is UTF-8 as is.
pub fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Renders a walk of the entry list ([`super::walk_list`]) for the GDB scripts:
///
/// ```text
/// {"descriptor": {"address": N, "version": N, "action_flag": N, "relevant_entry": N,
///                 "first_entry": N},
///  "entries": [ENTRY, ...],
///  "problems": [{"kind": "version" | "loop" | "too_many_entries" | "prev_mismatch"
///                        | "unreadable_entry", "message": S, ...fields}, ...],
///  "lookup": [[START, END, ENTRY, FUNCTION], ...]}
/// ```
///
/// with ENTRY as [`entry_json`] renders it. `"lookup"` holds the disjoint address ranges in
/// address order under the one overlap rule (the newest registration owns shared addresses,
/// see [`super::Symbolizer`]): `[START, END)` belongs to function FUNCTION of entry ENTRY
/// (indices into `"entries"` and that entry's `"payload"."functions"`). Problem fields:
/// `version` (version); `loop` (index, target); `too_many_entries` (limit);
/// `prev_mismatch` (index, address, prev, expected); `unreadable_entry` (index, address).
pub fn list_json(report: &ListReport) -> String {
    let mut out = String::with_capacity(256 + report.entries.len() * 256);
    let d = &report.descriptor;
    let _ = write!(
        out,
        "{{\"descriptor\": {{\"address\": {}, \"version\": {}, \"action_flag\": {}, \"relevant_entry\": {}, \"first_entry\": {}}}, \"entries\": [",
        d.addr, d.version, d.action_flag, d.relevant_entry, d.first_entry
    );
    for (i, e) in report.entries.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        entry_into(&mut out, e);
    }
    out.push_str("], \"problems\": [");
    for (i, p) in report.problems.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let (kind, fields) = match p {
            ListProblem::Version { version } => ("version", format!("\"version\": {version}")),
            ListProblem::Loop { index, target } => (
                "loop",
                format!("\"index\": {index}, \"target\": {target}"),
            ),
            ListProblem::TooManyEntries { limit } => {
                ("too_many_entries", format!("\"limit\": {limit}"))
            }
            ListProblem::PrevMismatch {
                index,
                addr,
                prev,
                expected,
            } => (
                "prev_mismatch",
                format!(
                    "\"index\": {index}, \"address\": {addr}, \"prev\": {prev}, \"expected\": {expected}"
                ),
            ),
            ListProblem::UnreadableEntry { index, addr, .. } => (
                "unreadable_entry",
                format!("\"index\": {index}, \"address\": {addr}"),
            ),
        };
        out.push_str("{\"kind\": ");
        json_string(&mut out, kind);
        out.push_str(", \"message\": ");
        json_string(&mut out, &p.to_string());
        let _ = write!(out, ", {fields}}}");
    }
    out.push_str("], \"lookup\": [");
    // Which (entry, function) each function of the symbolizer is, in the order it got them.
    let mut owners = Vec::new();
    let mut functions = Vec::new();
    for (e, entry) in report.entries.iter().enumerate().rev() {
        if let Ok(p) = &entry.result {
            for (f, info) in p.functions.iter().enumerate() {
                owners.push((e, f));
                functions.push(info.clone());
            }
        }
    }
    let symbolizer = Symbolizer::new(functions);
    for (i, (start, end, owner)) in symbolizer.ranges().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let (e, f) = owners[owner];
        let _ = write!(out, "[{start}, {end}, {e}, {f}]");
    }
    out.push_str("]}");
    out
}

/// Renders one entry:
///
/// ```text
/// {"address": N, "next": N, "prev": N, "payload_address": N, "payload_size": N,
///  "kind": "compact" | "elf" | null, "dropped": N,
///  "payload": PAYLOAD}       (the decoded payload as payload_json renders it)
/// or, instead of "payload":
///  "error": {"kind": "empty" | "too_large" | "total_too_large" | "unreadable" | "decode",
///            "message": S, "limit": N (too_large, total_too_large)}
/// ```
///
/// `"dropped"` counts the objects left out as unregistered (their functions are not in
/// the payload's).
pub fn entry_json(entry: &ListEntry) -> String {
    let mut out = String::new();
    entry_into(&mut out, entry);
    out
}

fn entry_into(out: &mut String, e: &ListEntry) {
    let _ = write!(
        out,
        "{{\"address\": {}, \"next\": {}, \"prev\": {}, \"payload_address\": {}, \"payload_size\": {}, \"kind\": ",
        e.addr, e.next, e.prev, e.payload_addr, e.payload_size
    );
    match e.kind {
        Some(k) => json_string(out, k.name()),
        None => out.push_str("null"),
    }
    let _ = write!(out, ", \"dropped\": {}, ", e.dropped);
    match &e.result {
        Ok(info) => {
            out.push_str("\"payload\": ");
            out.push_str(&payload_info_json(info));
        }
        Err(err) => {
            let (kind, limit) = match err {
                EntryError::Empty => ("empty", None),
                EntryError::TooLarge { limit, .. } => ("too_large", Some(*limit)),
                EntryError::TotalTooLarge { limit } => ("total_too_large", Some(*limit)),
                EntryError::Unreadable { .. } => ("unreadable", None),
                EntryError::Decode(_) => ("decode", None),
            };
            out.push_str("\"error\": {\"kind\": ");
            json_string(out, kind);
            out.push_str(", \"message\": ");
            json_string(out, &err.to_string());
            if let Some(l) = limit {
                let _ = write!(out, ", \"limit\": {l}");
            }
            out.push('}');
        }
    }
    out.push('}');
}

/// Walks the list ([`super::walk_list`]) and renders it ([`list_json`]), or
/// `{"error": S}` when the descriptor cannot be read.
pub fn walk_list_json(mem: &dyn Memory, descriptor_addr: u64, limits: &Limits) -> String {
    match walk_list(mem, descriptor_addr, limits) {
        Ok(report) => list_json(&report),
        Err(why) => error_json(&why),
    }
}

/// Reads one entry ([`super::read_entry`]) and renders it as `{"entry": ENTRY}`, or
/// `{"error": S}` when the entry cannot be read.
pub fn read_entry_json(mem: &dyn Memory, entry_addr: u64, limits: &Limits) -> String {
    match read_entry(mem, entry_addr, limits, &mut 0) {
        Ok(entry) => format!("{{\"entry\": {}}}", entry_json(&entry)),
        Err(why) => error_json(&format!(
            "cannot read jit_code_entry at {entry_addr:#x}: {why}"
        )),
    }
}

fn error_json(why: &str) -> String {
    let mut out = String::from("{\"error\": ");
    json_string(&mut out, why);
    out.push('}');
    out
}
