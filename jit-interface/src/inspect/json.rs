//! JSON rendering of a decoded payload, for the GDB Python scripts (which get it through the
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

use super::{decode_payload, PayloadInfo};

/// Decodes `bytes` and renders the result (or the error) as one JSON object.
pub fn payload_json(bytes: &[u8]) -> String {
    match decode_payload(bytes) {
        Ok(info) => payload_info_json(&info),
        Err(e) => {
            let mut out = String::from("{\"error\": ");
            json_string(&mut out, &e.to_string());
            out.push('}');
            out
        }
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
