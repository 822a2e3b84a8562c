//! Fuzzes what the GDB reader does with a payload, inside GDB, on bytes read from processes
//! and core files. The reader collects records straight from the decoder
//! (`Records::from_payload`, its own `Sink`) and asks the data model (`decode_all`, the
//! decode target's sink) only when that refuses; so the two must agree on every input, as
//! jit-reader's own tests check on theirs: the same records when both accept, a refusal by
//! the model refused by the reader too, a refusal by the reader alone only where it leaves
//! the decision to the model (explicit unwind rows). Then the symbol tables planned for GDB
//! from whichever records the reader would use: planning never panics, and a plan holds
//! only what GDB's callbacks take (see `jit_reader::symbols`).

#![no_main]

use jit_interface::format::decode_all;
use jit_interface::{DecodeError, Frame};
use jitreader::records::Records;
use jitreader::symbols::{plan_records, Plan};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let fast = Records::from_payload(data);
    let decoded = match decode_all(data) {
        Ok(decoded) => decoded,
        Err(DecodeError::NotOurs) => {
            assert_eq!(fast, Err(DecodeError::NotOurs), "not compact for the model only");
            return;
        }
        Err(DecodeError::Invalid(why)) => {
            assert!(
                fast.is_err(),
                "the reader accepts a payload the data model refuses ({why}): {fast:#?}"
            );
            return;
        }
    };
    let slow = Records::from_decoded(&decoded);
    let records = match fast {
        Ok(fast) => {
            assert_eq!(fast, slow, "the reader reads a payload otherwise than the model");
            fast
        }
        Err(e) => {
            // The reader's sink leaves explicit rows and register rules (rare) to the model.
            let rare = decoded.iter().any(|d| {
                d.object.functions().iter().any(|f| {
                    matches!(f.frame(), Frame::Rows(_)) || !f.register_rules().is_empty()
                })
            });
            assert!(
                rare && matches!(e, DecodeError::Invalid(_)),
                "the reader refuses ({e:?}) a payload the model reads, without explicit rows or register rules"
            );
            slow
        }
    };
    // What the reader's index takes of each function (its unwinder's rows).
    for o in &records.objects {
        for f in records.functions(o) {
            records.frame_rows(f, o.arch);
        }
    }
    if let Ok(plan) = plan_records(&records) {
        check_plan(&plan);
    }
});

/// What GDB is handed must be what its callbacks take: names inside the string buffer,
/// every symtab with blocks, blocks opened parents first in GDB's order (start ascending,
/// end descending) and inside their parents, line tables sorted by address.
fn check_plan(p: &Plan) {
    let name = |at: usize| {
        assert!(at < p.strings.len(), "string offset {at} out of the buffer");
    };
    assert!(p.strings.is_empty() || p.strings.last() == Some(&0));
    for st in &p.symtabs {
        if let Some(f) = st.file {
            name(f);
        }
        let blocks = &p.blocks[st.blocks.clone()];
        assert!(!blocks.is_empty(), "a symtab without blocks: {st:?}");
        for (i, b) in blocks.iter().enumerate() {
            name(b.name);
            assert!(b.begin < b.end, "empty block {b:?}");
            if let Some(q) = b.parent {
                assert!(q < i, "block {i} opened before its parent {q}");
                let pb = &blocks[q];
                assert!(pb.begin <= b.begin && b.end <= pb.end, "{b:?} outside {pb:?}");
            }
        }
        assert!(
            blocks
                .windows(2)
                .all(|w| (w[0].begin, std::cmp::Reverse(w[0].end))
                    <= (w[1].begin, std::cmp::Reverse(w[1].end))),
            "blocks out of GDB's order: {blocks:?}"
        );
        let lines = &p.lines[st.lines.clone()];
        assert!(
            lines.windows(2).all(|w| w[0].pc <= w[1].pc),
            "line table out of address order: {lines:?}"
        );
        assert!(lines.iter().all(|l| l.line >= 0), "{lines:?}");
    }
}
