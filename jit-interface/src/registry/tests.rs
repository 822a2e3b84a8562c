//! Tests that look inside the registry's state: the batches objects end up in, what each
//! member keeps.

use super::batch::{position_of, Batch, EntryCell, Kind, Place, Slot};
use super::merge::FAN_IN;
use super::state::{Batches, Member, FREE};
use super::*;

/// Tests that look at the batches their objects are in, one at a time: the registry is
/// the process's, and objects another test drops rebuild the batches they share.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn batch() -> Batch {
    Batch::new(
        EntryCell::new(),
        Format::Compact,
        Kind::Merging { level: 0 },
        Vec::new(),
        Vec::new(),
    )
}

#[test]
fn members_are_found_from_either_end() {
    let slots: Vec<Slot> = [7u32, 3, 9, 1, 4]
        .iter()
        .map(|&id| Slot {
            id,
            place: Place::Object(0),
        })
        .collect();
    for (k, s) in slots.iter().enumerate() {
        assert_eq!(position_of(&slots, s.id), Some(k));
        assert_eq!(position_of(&slots[..k + 1], s.id), Some(k));
        assert_eq!(position_of(&slots[k..], s.id), Some(0));
    }
    assert_eq!(position_of(&slots, 5), None);
    assert_eq!(position_of(&[], 5), None);
}

#[test]
fn a_batch_id_outlives_its_batch_without_finding_another() {
    let mut batches = Batches::default();
    let a = batches.insert(batch());
    let b = batches.insert(batch());
    assert_ne!(a, b);
    assert!(batches.remove(a).is_some());
    assert!(batches.get(a).is_none() && batches.remove(a).is_none());
    // The slot is reused under a new generation: the old id still finds nothing.
    let c = batches.insert(batch());
    assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff);
    assert_ne!(c, a);
    assert!(batches.get(a).is_none() && batches.get_mut(a).is_none());
    assert!(batches.get(c).is_some() && batches.get(b).is_some());
    for id in [a, b, c] {
        assert!(id != FREE && id != u64::MAX);
    }
    assert!(batches.get(u64::MAX).is_none() && batches.get(FREE).is_none());
}

/// Objects dropped here and there from payloads that grew and filled up: each such
/// payload is rebuilt by copying the bytes of the objects left into a new growing
/// payload (`State::recopy`), so those objects keep no models (a rewrite by the general
/// encoder gave each one, about 240 bytes), still read back from the payload, and the
/// entry stays a growing payload.
#[test]
fn grown_batches_losing_objects_here_and_there_keep_no_models() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5e80_0000_0000u64;
    let mut regs: Vec<Option<Registration>> = (0..3500u64)
        .map(|i| {
            let mut o = JitObject::new();
            let f = o
                .add_function(&format!("spread_{i:04}"), base + i * 64, 64)
                .unwrap();
            let rows = [
                crate::model::LineRow {
                    offset: 0,
                    line: 3 + i as u32 % 5,
                },
                crate::model::LineRow { offset: 8, line: 9 },
            ];
            o.set_lines(f, &format!("spread{}.js", i % 3), &rows)
                .unwrap();
            o.set_frame_pointer(f, 1, 4).unwrap();
            Some(register(&o, Format::Elf).unwrap())
        })
        .collect();
    // Every 25th object of each full payload, away from its ends (which are peeled).
    let mut dropped = 0;
    {
        let st = registry();
        let full: Vec<Vec<u32>> = regs
            .iter()
            .flatten()
            .filter_map(|r| st.member_ref(r.id).map(|m| st.batches.id_at(m.batch)))
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .filter(|&b| b != st.growing && b != st.retired)
            .filter_map(|b| st.batches.get(b))
            .filter(|b| matches!(b.kind, Kind::Grown(_)) && b.members.len() > 300)
            .map(|b| b.members.iter().map(|s| s.id).collect())
            .collect();
        drop(st);
        assert!(!full.is_empty(), "no payload filled up");
        for members in full {
            for id in members[100..members.len() - 100].iter().step_by(25) {
                if let Some(r) = regs
                    .iter_mut()
                    .find(|r| r.as_ref().is_some_and(|r| r.id == *id))
                {
                    drop(r.take());
                    dropped += 1;
                }
            }
        }
    }
    assert!(dropped > 40, "only {dropped} objects dropped");
    let st = registry();
    for (i, r) in regs.iter().enumerate() {
        let Some(r) = r else { continue };
        assert!(st.model_of(r.id).is_none(), "spread_{i:04} has a model");
        let batch = st
            .member_ref(r.id)
            .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
            .expect("the batch");
        assert_eq!(
            batch.buf.len(),
            crate::elf::GROWING_PAYLOAD,
            "spread_{i:04}"
        );
        let slot = batch.members.iter().find(|s| s.id == r.id).expect("a slot");
        let back = batch.decode_member(slot).expect("read back");
        let f = back.functions().first().expect("its function");
        assert_eq!(
            (
                f.name(),
                f.start(),
                f.file(),
                f.lines().first().map(|l| l.line)
            ),
            (
                format!("spread_{i:04}").as_str(),
                base + i as u64 * 64,
                Some(format!("spread{}.js", i % 3).as_str()),
                Some(3 + i as u32 % 5)
            )
        );
    }
    drop(st);
    drop(regs);
}

/// Once one-function ELF objects are in a sealed batch, they keep their compact records
/// there, not their models (about four times larger).
#[test]
fn sealed_elf_members_keep_records_not_models() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5b00_0000_0000u64;
    let regs: Vec<Registration> = (0..(FAN_IN * FAN_IN) as u64)
        .map(|i| {
            let mut o = JitObject::new();
            let f = o
                .add_function(&format!("records_{i:04}"), base + i * 64, 64)
                .unwrap();
            o.set_frame_pointer(f, 1, 4).unwrap();
            register(&o, Format::Elf).unwrap()
        })
        .collect();
    let st = registry();
    let with_model = regs.iter().filter(|r| st.model_of(r.id).is_some()).count();
    assert_eq!(
        with_model, 0,
        "members of the sealed batch that kept a model"
    );
    let batch = st
        .member_ref(regs[0].id)
        .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
        .expect("the batch");
    assert_eq!((batch.format, batch.merge_level()), (Format::Elf, None));
    assert!(batch.records.len() > crate::format::HEADER_LEN * regs.len());
    drop(st);
    drop(regs);
}

/// One-function ELF objects with line rows, appended to a growing payload without a
/// debugger, keep neither a model nor a compact record: the payload is read back.
#[test]
fn plain_elf_members_keep_neither_records_nor_models() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let base = 0x5d00_0000_0000u64;
    let regs: Vec<Registration> = (0..64u64)
        .map(|i| {
            let mut o = JitObject::new();
            let f = o
                .add_function(&format!("plain_{i:04}"), base + i * 64, 64)
                .unwrap();
            let rows = [crate::model::LineRow { offset: 0, line: 3 }];
            o.set_lines(f, "plain.js", &rows).unwrap();
            o.set_frame_pointer(f, 1, 4).unwrap();
            register(&o, Format::Elf).unwrap()
        })
        .collect();
    let st = registry();
    for (i, r) in regs.iter().enumerate() {
        assert!(st.model_of(r.id).is_none(), "a plain member kept a model");
        let batch = st
            .member_ref(r.id)
            .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
            .expect("the batch");
        let slot = batch.members.iter().find(|s| s.id == r.id).expect("a slot");
        assert!(!slot.place.has_bytes(), "a plain member kept a record");
        let back = batch.decode_member(slot).expect("read back");
        let f = back.functions().first().expect("its function");
        assert_eq!(
            (f.name(), f.start(), f.file()),
            (
                format!("plain_{i:04}").as_str(),
                base + i as u64 * 64,
                Some("plain.js")
            )
        );
    }
    drop(st);
    drop(regs);
}

#[test]
fn slots_and_members_stay_small() {
    // Kept once per registered object: every byte is paid for in page faults.
    assert_eq!(std::mem::size_of::<Slot>(), 12);
    assert_eq!(std::mem::size_of::<Member>(), 4);
    assert_eq!(std::mem::size_of::<Registration>(), 24);
}
