//! Tests that look inside the registry's state: the batches objects end up in, what each
//! member keeps.

use std::cell::Cell;

use super::batch::{position_of, Batch, EntryCell, Kind, Place, Slot};
use super::merge::FAN_IN;
use super::route;
use super::state::{Batches, Member, FREE};
use super::*;
use crate::descriptor::JitCodeEntry;

/// What the registry did to a [`FakeList`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Link,
    Unlink,
    Replace,
    /// Linked or unlinked without a hook call (deferred ELF entries).
    LinkSilently,
    UnlinkSilently,
    /// A size changed in place (no hook call).
    Resize,
}

/// A debugger list of a test's own: it keeps its entries (head first, as the process's
/// list), records what the registry did, and counts the hook calls a real list would make
/// and the stops they would be with a debugger attached. It says "attached" as the test
/// sets it, or from its `attach_at`-th look on (a debugger that attaches in the middle of an
/// operation). The registry's state over it is the one the process uses, but for the list.
#[derive(Default)]
struct FakeList {
    entries: Vec<*mut JitCodeEntry>,
    ops: Vec<Op>,
    /// Hook calls (a replace is two, as in `descriptor::replace`).
    hook_calls: usize,
    /// Hook calls made while attached: the stops a debugger would have made.
    stops: usize,
    attached: bool,
    attach_at: Option<usize>,
    looks: Cell<usize>,
}

impl FakeList {
    fn now_attached(&self) -> bool {
        self.attached || self.attach_at.is_some_and(|at| self.looks.get() >= at)
    }

    fn hook(&mut self, calls: usize) {
        self.hook_calls += calls;
        if self.now_attached() {
            self.stops += calls;
        }
    }

    /// The payloads of the linked entries, head first.
    fn payloads(&self) -> Vec<&[u8]> {
        self.entries
            .iter()
            // SAFETY: linked entries point at payloads their batches own; the state (which
            // holds this list and those batches) is borrowed while the slices live.
            .map(|&e| unsafe {
                std::slice::from_raw_parts((*e).symfile_addr, (*e).symfile_size as usize)
            })
            .collect()
    }

    /// Records and empties the operations so far.
    fn take_ops(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.ops)
    }
}

impl DebuggerList for FakeList {
    const PROCESS: bool = false;

    unsafe fn link(&mut self, entry: *mut JitCodeEntry) {
        assert!(!self.entries.contains(&entry), "linked twice");
        self.entries.insert(0, entry);
        self.ops.push(Op::Link);
        self.hook(1);
    }

    unsafe fn unlink(&mut self, entry: *mut JitCodeEntry) {
        let at = self.entries.iter().position(|&e| e == entry);
        self.entries
            .remove(at.expect("unlinked an entry not in the list"));
        self.ops.push(Op::Unlink);
        self.hook(1);
    }

    unsafe fn link_silently(&mut self, entry: *mut JitCodeEntry) {
        assert!(!self.entries.contains(&entry), "linked twice");
        self.entries.insert(0, entry);
        self.ops.push(Op::LinkSilently);
    }

    unsafe fn unlink_silently(&mut self, entry: *mut JitCodeEntry) {
        let at = self.entries.iter().position(|&e| e == entry);
        self.entries
            .remove(at.expect("unlinked an entry not in the list"));
        self.ops.push(Op::UnlinkSilently);
    }

    unsafe fn replace(&mut self, old: *mut JitCodeEntry, new: *mut JitCodeEntry) {
        let at = self.entries.iter().position(|&e| e == old);
        self.entries[at.expect("replaced an entry not in the list")] = new;
        self.ops.push(Op::Replace);
        self.hook(2);
    }

    unsafe fn set_size(&mut self, entry: *mut JitCodeEntry, size: usize) {
        assert!(
            self.entries.contains(&entry),
            "resized an entry not in the list"
        );
        // SAFETY: per the contract, a linked entry whose payload holds `size` bytes.
        unsafe { (*entry).symfile_size = size as u64 };
        self.ops.push(Op::Resize);
    }

    fn attached(&self) -> bool {
        self.looks.set(self.looks.get() + 1);
        self.now_attached()
    }
}

type Fake = State<FakeList>;

/// Registers `object` in `st` as `register` does in the process's registry; its member id.
fn reg(st: &mut Fake, object: &JitObject, format: Format) -> u32 {
    let ctx = st.registration_context();
    register_in(ctx, || &mut *st, object, format)
        .expect("register")
        .0
}

/// A one-function object at `start`, with a frame-pointer frame and, if `file` is given,
/// line rows in it.
fn one(name: &str, start: u64, file: Option<&str>) -> JitObject {
    let mut o = JitObject::new();
    let f = o.add_function(name, start, 64).unwrap();
    if let Some(file) = file {
        let rows = [
            crate::model::LineRow { offset: 0, line: 3 },
            crate::model::LineRow { offset: 8, line: 9 },
        ];
        o.set_lines(f, file, &rows).unwrap();
    }
    o.set_frame_pointer(f, 1, 4).unwrap();
    o
}

/// The names of the live functions in a payload: a compact one's records whose live slot
/// holds their key, an ELF one's function symbols (ELF has no live check).
fn live_names(payload: &[u8]) -> Vec<String> {
    if payload.starts_with(b"\x7fELF") {
        use object::{Object, ObjectSymbol};
        let file = object::File::parse(payload).expect("an ELF payload");
        return file
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text)
            .map(|s| s.name().unwrap().to_string())
            .collect();
    }
    crate::format::decode_all(payload)
        .expect("a compact payload")
        .into_iter()
        .filter(|d| {
            // SAFETY: live slots are never freed (`LiveSlots`), and the state that owns
            // them is alive while its payloads are looked at.
            d.live
                .is_some_and(|l| unsafe { (l.address as *const u64).read_volatile() } == l.key)
        })
        .flat_map(|d| {
            d.object
                .functions()
                .iter()
                .map(|f| f.name().to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every live function name the list shows, sorted.
fn listed(st: &Fake) -> Vec<String> {
    let mut names: Vec<String> = st
        .list
        .payloads()
        .into_iter()
        .flat_map(live_names)
        .collect();
    names.sort();
    names
}

fn names(prefix: &str, range: std::ops::Range<u64>) -> Vec<String> {
    let mut v: Vec<String> = range.map(|i| format!("{prefix}_{i:04}")).collect();
    v.sort();
    v
}

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
    let mut st = Fake::default();
    let base = 0x5e80_0000_0000u64;
    let mut ids: Vec<Option<u32>> = (0..3500u64)
        .map(|i| {
            let o = one(
                &format!("spread_{i:04}"),
                base + i * 64,
                Some(&format!("spread{}.js", i % 3)),
            );
            Some(reg(&mut st, &o, Format::Elf))
        })
        .collect();
    // Every 25th object of each full payload, away from its ends (which are peeled).
    let full: Vec<Vec<u32>> = ids
        .iter()
        .flatten()
        .filter_map(|&id| st.member_ref(id).map(|m| st.batches.id_at(m.batch)))
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .filter(|&b| b != st.growing && b != st.retired)
        .filter_map(|b| st.batches.get(b))
        .filter(|b| matches!(b.kind, Kind::Grown(_)) && b.members.len() > 300)
        .map(|b| b.members.iter().map(|s| s.id).collect())
        .collect();
    assert!(!full.is_empty(), "no payload filled up");
    let entries = st.list.entries.len();
    st.list.take_ops();
    let mut dropped = 0;
    for members in full {
        for id in members[100..members.len() - 100].iter().step_by(25) {
            if let Some(slot) = ids.iter_mut().find(|s| **s == Some(*id)) {
                st.remove(slot.take().unwrap());
                dropped += 1;
            }
        }
    }
    assert!(dropped > 40, "only {dropped} objects dropped");
    // Each drop replaced its entry: no entry more or less, nothing linked or unlinked.
    assert_eq!(st.list.entries.len(), entries);
    assert!(st.list.take_ops().iter().all(|op| *op == Op::Replace));
    for (i, id) in ids.iter().enumerate() {
        let Some(id) = *id else { continue };
        assert!(st.model_of(id).is_none(), "spread_{i:04} has a model");
        let batch = st
            .member_ref(id)
            .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
            .expect("the batch");
        assert_eq!(
            batch.buf.len(),
            crate::elf::GROWING_PAYLOAD,
            "spread_{i:04}"
        );
        let slot = batch.members.iter().find(|s| s.id == id).expect("a slot");
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
                Some(3)
            )
        );
    }
    // The list shows exactly the objects left.
    let left: Vec<u64> = (0..3500u64)
        .filter(|&i| ids[i as usize].is_some())
        .collect();
    let mut want: Vec<String> = left.iter().map(|i| format!("spread_{i:04}")).collect();
    want.sort();
    assert_eq!(listed(&st), want);
}

/// Once one-function ELF objects are in a sealed batch, they keep their compact records
/// there, not their models (about four times larger).
#[test]
fn sealed_elf_members_keep_records_not_models() {
    let mut st = Fake::default();
    let base = 0x5b00_0000_0000u64;
    let ids: Vec<u32> = (0..(FAN_IN * FAN_IN) as u64)
        .map(|i| {
            reg(
                &mut st,
                &one(&format!("records_{i:04}"), base + i * 64, None),
                Format::Elf,
            )
        })
        .collect();
    let with_model = ids.iter().filter(|&&id| st.model_of(id).is_some()).count();
    assert_eq!(
        with_model, 0,
        "members of the sealed batch that kept a model"
    );
    let batch = st
        .member_ref(ids[0])
        .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
        .expect("the batch");
    assert_eq!((batch.format, batch.merge_level()), (Format::Elf, None));
    assert!(batch.records.len() > crate::format::HEADER_LEN * ids.len());
    assert_eq!(listed(&st), names("records", 0..(FAN_IN * FAN_IN) as u64));
}

/// One-function ELF objects with line rows, appended to a growing payload without a
/// debugger, keep neither a model nor a compact record: the payload is read back.
#[test]
fn plain_elf_members_keep_neither_records_nor_models() {
    let mut st = Fake::default();
    let base = 0x5d00_0000_0000u64;
    let ids: Vec<u32> = (0..64u64)
        .map(|i| {
            reg(
                &mut st,
                &one(&format!("plain_{i:04}"), base + i * 64, Some("plain.js")),
                Format::Elf,
            )
        })
        .collect();
    // One growing payload, linked once, grown in place without a hook call.
    assert_eq!(st.list.take_ops(), [Op::Link]);
    for (i, &id) in ids.iter().enumerate() {
        assert!(st.model_of(id).is_none(), "a plain member kept a model");
        let batch = st
            .member_ref(id)
            .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
            .expect("the batch");
        let slot = batch.members.iter().find(|s| s.id == id).expect("a slot");
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
}

#[test]
fn slots_and_members_stay_small() {
    // Kept once per registered object: every byte is paid for in page faults.
    assert_eq!(std::mem::size_of::<Slot>(), 12);
    assert_eq!(std::mem::size_of::<Member>(), 4);
    assert_eq!(std::mem::size_of::<Registration>(), 24);
}

/// Without a debugger, small compact objects are appended in place to one entry (one hook
/// call, for its link; sizes changed in place); unregistering leaves tombstones (no hook
/// call) until dead records are the larger part, then the entry is rewritten once.
#[test]
fn quiet_appends_and_tombstones_make_no_stops() {
    let mut st = Fake::default();
    let base = 0x5c00_0000_0000u64;
    let ids: Vec<u32> = (0..200u64)
        .map(|i| {
            reg(
                &mut st,
                &one(&format!("quiet_{i:04}"), base + i * 64, None),
                Format::Compact,
            )
        })
        .collect();
    let mut want = vec![Op::Link];
    want.resize(200, Op::Resize);
    assert_eq!(st.list.take_ops(), want);
    assert_eq!(
        (st.list.entries.len(), st.list.hook_calls, st.list.stops),
        (1, 1, 0)
    );
    assert_eq!(listed(&st), names("quiet", 0..200));
    // A few leave: tombstones, no hook call; the list shows the others.
    for &id in &ids[..10] {
        st.remove(id);
    }
    assert_eq!(st.list.take_ops(), []);
    assert_eq!(listed(&st), names("quiet", 10..200));
    // Most leave: the entry is rewritten (swapped in place) once dead records dominate.
    for &id in &ids[10..190] {
        st.remove(id);
    }
    let ops = st.list.take_ops();
    assert!(
        !ops.is_empty() && ops.iter().all(|op| *op == Op::Replace),
        "{ops:?}"
    );
    assert_eq!(listed(&st), names("quiet", 190..200));
    for &id in &ids[190..] {
        st.remove(id);
    }
    // (Rewritten again once its dead records dominate again,) unlinked once empty.
    let ops = st.list.take_ops();
    assert_eq!(ops.last(), Some(&Op::Unlink), "{ops:?}");
    assert!(
        ops[..ops.len() - 1].iter().all(|op| *op == Op::Replace),
        "{ops:?}"
    );
    assert!(st.list.entries.is_empty());
}

/// A debugger attaching switches registrations to entries of their own (one stop each, the
/// open batch sealed: it read it on attach); once it detaches they go in place again, to a
/// new batch.
#[test]
fn attach_and_detach_switch_between_in_place_and_own_entries() {
    let mut st = Fake::default();
    let base = 0x5c10_0000_0000u64;
    let obj = |i: u64| one(&format!("switch_{i:04}"), base + i * 64, None);
    for i in 0..3 {
        reg(&mut st, &obj(i), Format::Compact);
    }
    let quiet_batch = st.open[0];
    assert_ne!(quiet_batch, FREE);
    st.list.take_ops();

    st.list.attached = true;
    reg(&mut st, &obj(3), Format::Compact);
    assert_eq!(st.list.take_ops(), [Op::Link]);
    assert_eq!((st.list.entries.len(), st.list.stops), (2, 1));
    assert_eq!(st.open[0], FREE, "the open batch is sealed");
    assert!(matches!(
        st.batches.get(quiet_batch).map(|b| &b.kind),
        Some(Kind::Sealed)
    ));
    // An ELF object under a debugger: an entry of its own too (no growing payload).
    reg(
        &mut st,
        &one("switch_elf", base + 0x10_0000, Some("s.js")),
        Format::Elf,
    );
    assert_eq!(st.list.take_ops(), [Op::Link]);
    assert_eq!(st.growing, FREE);

    st.list.attached = false;
    let stops = st.list.stops;
    reg(&mut st, &obj(4), Format::Compact);
    reg(&mut st, &obj(5), Format::Compact);
    assert_eq!(st.list.take_ops(), [Op::Link, Op::Resize]);
    assert_ne!(st.open[0], quiet_batch);
    assert_eq!(st.list.stops, stops, "no stop without a debugger");
    let mut want = names("switch", 0..6);
    want.push("switch_elf".into());
    want.sort();
    assert_eq!(listed(&st), want);
}

/// A debugger that attaches while a record is appended in place may have read the entry
/// before the append: the registry looks again after it and tells it (the entry is
/// replaced: one stop for the old, one for the new), and appends go elsewhere from then on.
#[test]
fn a_debugger_attaching_during_an_append_is_told() {
    let mut st = Fake::default();
    let base = 0x5c20_0000_0000u64;
    reg(&mut st, &one("meanwhile_0000", base, None), Format::Compact);
    st.list.take_ops();
    // The registration's first look says no debugger, the look after the append says one.
    st.list.attach_at = Some(st.list.looks.get() + 2);
    reg(
        &mut st,
        &one("meanwhile_0001", base + 64, None),
        Format::Compact,
    );
    assert_eq!(st.list.take_ops(), [Op::Resize, Op::Replace]);
    assert_eq!(st.open[0], FREE, "sealed once a debugger watches");
    assert_eq!(listed(&st), names("meanwhile", 0..2));
    // Likewise for a growing ELF payload.
    let mut st = Fake::default();
    reg(
        &mut st,
        &one("meanwhile_0000", base, Some("m.js")),
        Format::Elf,
    );
    st.list.take_ops();
    st.list.attach_at = Some(st.list.looks.get() + 2);
    reg(
        &mut st,
        &one("meanwhile_0001", base + 64, Some("m.js")),
        Format::Elf,
    );
    assert_eq!(st.list.take_ops(), [Op::Replace]);
    assert_eq!(st.growing, FREE);
    assert_eq!(listed(&st), names("meanwhile", 0..2));
}

/// Under a debugger, every `FAN_IN` entries of their own are merged into one (compact ones
/// as ELF): one link for the merged entry, one unlink per old one; the list shows every
/// object once.
#[test]
fn merges_under_a_debugger_replace_fan_in_entries_by_one() {
    let mut st = Fake::default();
    st.list.attached = true;
    let base = 0x5c30_0000_0000u64;
    for i in 0..FAN_IN as u64 - 1 {
        reg(
            &mut st,
            &one(&format!("merged_{i:04}"), base + i * 64, None),
            Format::Compact,
        );
    }
    assert_eq!(st.list.entries.len(), FAN_IN - 1);
    st.list.take_ops();
    let last = FAN_IN as u64 - 1;
    reg(
        &mut st,
        &one(&format!("merged_{last:04}"), base + last * 64, None),
        Format::Compact,
    );
    let mut want = vec![Op::Link, Op::Link];
    want.resize(2 + FAN_IN, Op::Unlink);
    assert_eq!(st.list.take_ops(), want);
    assert_eq!(st.list.entries.len(), 1);
    assert!(
        st.list.payloads()[0].starts_with(b"\x7fELF"),
        "merged as ELF"
    );
    assert_eq!(listed(&st), names("merged", 0..FAN_IN as u64));
    assert_eq!(st.merge_stats.merges, 1);
    assert_eq!(
        st.read_by_reader, FAN_IN,
        "each read once through the reader"
    );
    // One leaves: its batch is rewritten without it (a replace: two stops).
    let stops = st.list.stops;
    let id = st.members.iter().position(|m| m.batch != u32::MAX).unwrap() as u32;
    st.remove(id);
    assert_eq!(st.list.take_ops(), [Op::Replace]);
    assert_eq!(st.list.stops, stops + 2);
    assert_eq!(listed(&st).len(), FAN_IN - 1);
}

/// Deferred mode under a debugger: small compact registrations are appended in place (no
/// stop) and announced together at the flush (the entry replaced: one stop for many).
#[test]
fn deferred_registrations_are_announced_together() {
    let mut st = Fake::default();
    st.list.attached = true;
    st.set_deferral(Some(Deferral {
        max_pending: 1000,
        max_delay: None,
    }));
    let base = 0x5c40_0000_0000u64;
    for i in 0..50u64 {
        reg(
            &mut st,
            &one(&format!("deferred_{i:04}"), base + i * 64, None),
            Format::Compact,
        );
    }
    // The first opened the batch (a link: a stop, the debugger reads it); the others
    // appended in place, pending.
    assert_eq!(st.list.stops, 1);
    assert_eq!(st.pending, 49);
    assert_eq!(listed(&st), names("deferred", 0..50), "listed at once");
    assert_eq!(st.flush_now(), 49);
    assert_eq!(st.list.stops, 3, "one replace for 49 registrations");
    assert_eq!(st.pending, 0);
    // `max_pending` reached: announced by the registration that reaches it.
    st.set_deferral(Some(Deferral {
        max_pending: 4,
        max_delay: None,
    }));
    st.list.take_ops();
    for i in 50..54u64 {
        reg(
            &mut st,
            &one(&format!("deferred_{i:04}"), base + i * 64, None),
            Format::Compact,
        );
    }
    assert_eq!(st.pending, 0);
    let replaces = st
        .list
        .take_ops()
        .iter()
        .filter(|op| **op == Op::Replace)
        .count();
    assert_eq!(replaces, 1);
    // Turning it off announces what is pending.
    reg(
        &mut st,
        &one("deferred_0054", base + 54 * 64, None),
        Format::Compact,
    );
    assert_eq!(st.pending, 1);
    st.set_deferral(None);
    assert_eq!(st.pending, 0);
    assert_eq!(listed(&st), names("deferred", 0..55));
}

/// Deferred mode under a debugger, ELF: each small registration gets an entry of its own,
/// linked at once (attach and core files see it) but not announced; the flush announces one
/// entry holding all of them and unlinks the small ones silently (GDB never read them).
#[test]
fn deferred_elf_registrations_are_linked_then_announced_merged() {
    let mut st = Fake::default();
    st.list.attached = true;
    st.set_deferral(Some(Deferral {
        max_pending: 1000,
        max_delay: None,
    }));
    let base = 0x5c48_0000_0000u64;
    // Gaps between functions (64 bytes after each), half with lines in a file.
    let object = |i: u64| {
        let file = (i % 2 == 0).then_some("d.js");
        one(&format!("delf_{i:04}"), base + i * 128, file)
    };
    let mut ids = Vec::new();
    for i in 0..50u64 {
        ids.push(reg(&mut st, &object(i), Format::Elf));
    }
    assert_eq!(st.list.take_ops(), [Op::LinkSilently; 50]);
    assert_eq!(st.list.hook_calls, 0, "nothing announced");
    assert_eq!(st.pending, 50);
    assert_eq!(st.list.entries.len(), 50);
    assert_eq!(listed(&st), names("delf", 0..50), "listed at once");
    // A pending one unregistered: unlinked silently.
    st.remove(ids[7]);
    assert_eq!(st.list.take_ops(), [Op::UnlinkSilently]);
    assert_eq!(st.list.hook_calls, 0);
    assert_eq!(st.pending, 49);
    // The flush: one announced entry holding the 49, the small ones unlinked silently.
    assert_eq!(st.flush_now(), 49);
    let mut want = vec![Op::Link];
    want.extend([Op::UnlinkSilently; 49]);
    assert_eq!(st.list.take_ops(), want);
    assert_eq!(st.list.stops, 1, "one stop for 49 registrations");
    assert_eq!(st.pending, 0);
    assert_eq!(st.list.entries.len(), 1);
    let mut kept = names("delf", 0..50);
    kept.retain(|n| n != "delf_0007");
    assert_eq!(listed(&st), kept);
    assert_sections_cover_only_their_own(&st);
    // The merged entry waits at the merge tree's level 1, as merged level-0 entries do.
    let merged = st
        .member_ref(ids[0])
        .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
        .map(|b| b.merge_level());
    assert_eq!(merged, Some(Some(1)));
    // Unregistering from the announced entry is an ordinary (announced) rewrite.
    st.remove(ids[8]);
    assert_eq!(st.list.take_ops(), [Op::Replace]);
    kept.retain(|n| n != "delf_0008");
    assert_eq!(listed(&st), kept);

    // `max_pending` reached: announced by the registration that reaches it. FAN_IN such
    // flushes fill level 1, merged into one sealed entry.
    st.set_deferral(Some(Deferral {
        max_pending: 4,
        max_delay: None,
    }));
    let stops = st.list.stops;
    let n = 4 * FAN_IN as u64;
    for i in 50..50 + n {
        reg(&mut st, &object(i), Format::Elf);
    }
    assert_eq!(st.pending, 0);
    let ops = st.list.take_ops();
    let links = ops.iter().filter(|op| **op == Op::Link).count();
    let silent = ops.iter().filter(|op| **op == Op::UnlinkSilently).count();
    assert_eq!(silent, n as usize, "every small entry unlinked silently");
    // One link per flush, and one for the level-1 merge.
    assert_eq!(links, FAN_IN + 1);
    assert!(
        st.list.stops - stops <= 2 * FAN_IN + 4,
        "{} stops for {n} registrations",
        st.list.stops - stops
    );
    assert!(
        st.list.entries.len() <= 3,
        "{} entries",
        st.list.entries.len()
    );
    kept.extend(names("delf", 50..50 + n));
    kept.sort();
    assert_eq!(listed(&st), kept);
    assert_sections_cover_only_their_own(&st);

    // Turning deferred mode off announces what is pending.
    let next = 50 + n;
    reg(&mut st, &object(next), Format::Elf);
    assert_eq!(st.pending, 1);
    st.list.take_ops();
    st.set_deferral(None);
    assert_eq!(st.pending, 0);
    assert_eq!(st.list.take_ops(), [Op::Link, Op::UnlinkSilently]);
    kept.push(format!("delf_{next:04}"));
    kept.sort();
    assert_eq!(listed(&st), kept);
}

/// A pending ELF entry whose sections span a gap that new code is put in is re-encoded
/// around it silently and stays pending; the flush announces both.
#[test]
fn a_pending_elf_entry_spanning_a_gap_is_rewritten_silently() {
    let mut st = Fake::default();
    st.list.attached = true;
    st.set_deferral(Some(Deferral {
        max_pending: 1000,
        max_delay: None,
    }));
    let base = 0x5c4e_0000_0000u64;
    // Two functions 1 KiB apart in one object: its section spans the gap between them.
    let mut o = JitObject::new();
    for (k, at) in [(0u64, base), (1, base + 1024)] {
        let f = o.add_function(&format!("span_{k:04}"), at, 64).unwrap();
        o.set_frame_pointer(f, 1, 4).unwrap();
    }
    reg(&mut st, &o, Format::Elf);
    assert_eq!(st.list.take_ops(), [Op::LinkSilently]);
    // New code in that gap.
    reg(&mut st, &one("span_0002", base + 512, None), Format::Elf);
    let ops = st.list.take_ops();
    assert!(
        ops.iter()
            .all(|op| matches!(op, Op::LinkSilently | Op::UnlinkSilently)),
        "{ops:?}"
    );
    assert_eq!(
        ops.len(),
        3,
        "the new entry, and the old one swapped: {ops:?}"
    );
    assert_eq!(st.list.hook_calls, 0);
    assert_eq!(st.pending, 2);
    assert_sections_cover_only_their_own(&st);
    assert_eq!(st.flush_now(), 2);
    assert_eq!(st.list.stops, 1);
    assert_eq!(st.list.entries.len(), 1);
    assert_eq!(listed(&st), names("span", 0..3));
    assert_sections_cover_only_their_own(&st);
}

/// Pending ELF and compact registrations are announced by the same flush, and a debugger
/// gone before the flush turns pending ELF entries into ordinary ones at the next
/// registration (a debugger attaching later reads them; none is unlinked silently then).
#[test]
fn pending_elf_entries_without_a_debugger_become_ordinary() {
    let mut st = Fake::default();
    st.list.attached = true;
    st.set_deferral(Some(Deferral {
        max_pending: 1000,
        max_delay: None,
    }));
    let base = 0x5c4c_0000_0000u64;
    for i in 0..6u64 {
        let format = if i % 2 == 0 {
            Format::Elf
        } else {
            Format::Compact
        };
        reg(
            &mut st,
            &one(&format!("mix_{i:04}"), base + i * 64, None),
            format,
        );
    }
    assert_eq!(
        st.pending, 5,
        "the first compact one opened its batch (a stop)"
    );
    assert_eq!(st.flush_now(), 5);
    assert_eq!(st.pending, 0);
    assert_eq!(listed(&st), names("mix", 0..6));
    // Pending ELF entries, then the debugger goes.
    let mut ids = Vec::new();
    for i in 6..9u64 {
        ids.push(reg(
            &mut st,
            &one(&format!("mix_{i:04}"), base + i * 64, None),
            Format::Elf,
        ));
    }
    assert_eq!(st.pending, 3);
    st.list.attached = false;
    reg(&mut st, &one("mix_0009", base + 9 * 64, None), Format::Elf);
    assert_eq!(st.pending, 0, "nothing pending once the debugger is gone");
    for id in ids {
        let kind = st
            .member_ref(id)
            .and_then(|m| st.batches.get(st.batches.id_at(m.batch)))
            .map(|b| &b.kind);
        assert!(matches!(kind, Some(Kind::Merging { level: 0 })));
    }
    st.list.take_ops();
    // A debugger attaches (it reads the whole list); nothing is unlinked silently after.
    st.list.attached = true;
    assert_eq!(st.flush_now(), 0);
    reg(&mut st, &one("mix_0010", base + 10 * 64, None), Format::Elf);
    st.flush_now();
    let ops = st.list.take_ops();
    assert_eq!(
        ops.iter().filter(|op| **op == Op::UnlinkSilently).count(),
        1,
        "only the entry registered under this debugger: {ops:?}"
    );
    assert_eq!(listed(&st), names("mix", 0..11));
}

/// Without a debugger, a recent ELF object leaving the growing payload rolls it back (the
/// entry replaced in place); with one attached, the payload is rewritten the general way
/// and stops growing.
#[test]
fn removals_from_growing_payloads_follow_the_debugger() {
    let mut st = Fake::default();
    let base = 0x5c50_0000_0000u64;
    let ids: Vec<u32> = (0..20u64)
        .map(|i| {
            reg(
                &mut st,
                &one(&format!("roll_{i:04}"), base + i * 64, Some("r.js")),
                Format::Elf,
            )
        })
        .collect();
    let growing = st.growing;
    st.list.take_ops();
    st.remove(ids[15]);
    assert_eq!(st.list.take_ops(), [Op::Replace]);
    assert_eq!(st.growing, growing, "still growing");
    assert_eq!(st.regrown, 4, "the 4 objects after it appended again");
    st.list.attached = true;
    st.remove(ids[10]);
    assert_eq!(st.list.take_ops(), [Op::Replace]);
    assert_eq!(st.growing, FREE, "sealed under a debugger");
    let left: Vec<u64> = (0..20).filter(|i| ![10, 15].contains(i)).collect();
    let mut want: Vec<String> = left.iter().map(|i| format!("roll_{i:04}")).collect();
    want.sort();
    assert_eq!(listed(&st), want);
    // Many at once: one rewrite of the batch.
    let rest: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|&id| id != ids[10] && id != ids[15])
        .collect();
    st.remove_many(rest[..10].to_vec());
    assert_eq!(st.list.take_ops(), [Op::Replace]);
    st.remove_many(rest[10..].to_vec());
    assert_eq!(st.list.take_ops(), [Op::Unlink]);
    assert!(st.list.entries.is_empty());
}

/// Once the reader budget is spent, a small compact registration under a debugger is
/// announced as ELF, and the compact entries still waiting for a merge go into one ELF
/// batch at once (none would join them any more).
#[test]
fn a_spent_reader_budget_turns_small_compact_entries_into_elf() {
    let mut st = Fake::default();
    st.list.attached = true;
    let base = 0x5c60_0000_0000u64;
    for i in 0..3u64 {
        reg(
            &mut st,
            &one(&format!("budget_{i:04}"), base + i * 64, None),
            Format::Compact,
        );
    }
    assert_eq!(st.read_by_reader, 3);
    assert!(st
        .list
        .payloads()
        .iter()
        .all(|p| !p.starts_with(b"\x7fELF")));
    st.read_by_reader = route::reader_budget();
    st.list.take_ops();
    reg(
        &mut st,
        &one("budget_0003", base + 3 * 64, None),
        Format::Compact,
    );
    // Its own entry, then the three waiting ones merged into one (linked, old ones unlinked).
    assert_eq!(
        st.list.take_ops(),
        [Op::Link, Op::Link, Op::Unlink, Op::Unlink, Op::Unlink]
    );
    assert_eq!(st.list.entries.len(), 2);
    assert!(st.list.payloads().iter().all(|p| p.starts_with(b"\x7fELF")));
    assert_eq!(listed(&st), names("budget", 0..4));
    assert_eq!(
        st.read_by_reader,
        route::reader_budget(),
        "not read by the reader"
    );
}

/// Objects whose functions have register rules keep them through the registry's paths
/// without a debugger (appended to growing ELF payloads and compact batches, payloads
/// rebuilt as neighbours leave): the payloads GDB would read carry them, and the ELF
/// payloads' other functions keep the undefined default.
#[test]
fn register_rules_survive_appends_and_removals() {
    use crate::arch::x86_64::{R12, R13};
    use crate::model::RegisterRule;
    for format in [Format::Elf, Format::Compact] {
        let mut st = Fake::default();
        let base = 0x5f40_0000_0000u64;
        let saver = |i: u64| i % 10 == 3;
        let mut ids: Vec<Option<u32>> = (0..300u64)
            .map(|i| {
                let mut o = one(&format!("keep_{i:04}"), base + i * 64, Some("keep.js"));
                if saver(i) {
                    let f = crate::model::FunctionId::from_index(0);
                    o.add_register_rule(f, 6, R12, RegisterRule::AtCfa(-24))
                        .unwrap();
                    o.add_register_rule(f, 8, R13, RegisterRule::InRegister(3))
                        .unwrap();
                }
                Some(reg(&mut st, &o, format))
            })
            .collect();
        // Drop every 7th object: savers and plain neighbours alike.
        for i in (0..300).step_by(7) {
            st.remove(ids[i].take().unwrap());
        }
        let mut seen = 0;
        for payload in st.list.payloads() {
            if payload.starts_with(b"\x7fELF") {
                let file = object::File::parse(payload).expect("an ELF payload");
                use object::{Object, ObjectSection, ObjectSymbol};
                let frame = file
                    .section_by_name(".debug_frame")
                    .and_then(|s| s.data().ok())
                    .expect(".debug_frame");
                let mut frame = gimli::DebugFrame::new(frame, gimli::LittleEndian);
                frame.set_address_size(8);
                for sym in file
                    .symbols()
                    .filter(|s| s.kind() == object::SymbolKind::Text)
                    .filter(|s| s.name().is_ok_and(|n| n.starts_with("keep_")))
                {
                    let i: u64 = sym.name().unwrap()[5..].parse().unwrap();
                    let mut ctx = gimli::UnwindContext::new();
                    let row = gimli::UnwindSection::unwind_info_for_address(
                        &frame,
                        &gimli::BaseAddresses::default(),
                        &mut ctx,
                        base + i * 64 + 10,
                        gimli::UnwindSection::cie_from_offset,
                    )
                    .unwrap_or_else(|e| panic!("keep_{i:04}: {e:?}"));
                    let (r12, r13) = (
                        row.register(gimli::Register(R12)),
                        row.register(gimli::Register(R13)),
                    );
                    if saver(i) {
                        assert_eq!(r12, Some(gimli::RegisterRule::Offset(-24)), "keep_{i:04}");
                        assert_eq!(r13, Some(gimli::RegisterRule::Register(gimli::Register(3))));
                        seen += 1;
                    } else {
                        assert_eq!(r12, Some(gimli::RegisterRule::Undefined), "keep_{i:04}");
                    }
                }
            } else {
                for d in crate::format::decode_all(payload).expect("a compact payload") {
                    for f in d.object.functions() {
                        let i: u64 = f.name()[5..].parse().unwrap();
                        // SAFETY: live slots are never freed (`LiveSlots`), and the state
                        // that owns them is alive while its payloads are looked at.
                        let live = d.live.is_some_and(|l| {
                            (unsafe { (l.address as *const u64).read_volatile() }) == l.key
                        });
                        if !live {
                            continue;
                        }
                        assert_eq!(
                            f.register_rules().len(),
                            if saver(i) { 2 } else { 0 },
                            "keep_{i:04}"
                        );
                        seen += usize::from(saver(i));
                    }
                }
            }
        }
        let left = (0..300u64)
            .filter(|&i| saver(i) && ids[i as usize].is_some())
            .count();
        assert_eq!(seen, left, "{format:?}: every saver left, once");
        // The payloads were rebuilt without the objects that left, and only those.
        let mut want: Vec<String> = (0..300u64)
            .filter(|&i| ids[i as usize].is_some())
            .map(|i| format!("keep_{i:04}"))
            .collect();
        want.sort();
        assert_eq!(listed(&st), want, "{format:?}");
    }
}

/// An ELF payload's `.text` sections and its function symbols with their addresses.
type TextOf = (Vec<(u64, u64)>, Vec<(String, u64)>);

/// Each linked ELF payload's `.text` sections and function symbols.
fn sections_and_functions(st: &Fake) -> Vec<TextOf> {
    use object::{Object, ObjectSection, ObjectSymbol};
    st.list
        .payloads()
        .into_iter()
        .filter(|p| p.starts_with(b"\x7fELF"))
        .map(|p| {
            let file = object::File::parse(p).expect("an ELF payload");
            let sections = file
                .sections()
                .filter(|s| s.name() == Ok(".text"))
                .map(|s| (s.address(), s.address() + s.size()))
                .collect();
            // A relocatable object: a symbol's value is an offset in its section.
            let functions = file
                .symbols()
                .filter(|s| s.kind() == object::SymbolKind::Text)
                .map(|s| {
                    let section = s.section_index().expect("a defined symbol");
                    let base = file.section_by_index(section).unwrap().address();
                    (s.name().unwrap().to_string(), base + s.address())
                })
                .collect();
            (sections, functions)
        })
        .collect()
}

/// GDB ignores a section inside another objfile's section: no ELF entry's `.text` section
/// may cover a function of another entry (the same function in two entries, as during a
/// merge, is not another's). Returns the number of `.text` sections.
fn assert_sections_cover_only_their_own(st: &Fake) -> usize {
    let all = sections_and_functions(st);
    for (i, (sections, _)) in all.iter().enumerate() {
        for (j, (_, functions)) in all.iter().enumerate() {
            if i == j {
                continue;
            }
            let own: std::collections::HashSet<&str> =
                all[i].1.iter().map(|f| f.0.as_str()).collect();
            for (name, at) in functions {
                if own.contains(name.as_str()) {
                    continue;
                }
                assert!(
                    !sections.iter().any(|&(s, e)| s <= *at && *at < e),
                    "{name} at {at:#x} lies inside a .text section of another entry: {sections:x?}"
                );
            }
        }
    }
    all.iter().map(|p| p.0.len()).sum()
}

/// Gapped code registered one by one under a debugger (64 free bytes after each
/// function): the batches' sections span the gaps, so GDB holds a few sections, not one per
/// function; no section ever covers another entry's function.
#[test]
fn gapped_registrations_under_a_debugger_share_sections() {
    for format in [Format::Elf, Format::Compact] {
        let mut st = Fake::default();
        st.list.attached = true;
        let base = 0x6a00_0000_0000u64;
        for i in 0..1500u64 {
            reg(
                &mut st,
                &one(&format!("gap_{i:04}"), base + i * 128, Some("g.js")),
                format,
            );
        }
        assert_eq!(listed(&st), names("gap", 0..1500));
        let sections = assert_sections_cover_only_their_own(&st);
        assert!(
            sections < 80,
            "{format:?}: {sections} .text sections for 1500 gapped functions"
        );
    }
}

/// Code registered later inside a gap that an entry's section spans: that entry is
/// re-encoded around it, at once. Also after unregistrations (code reused in a hole).
#[test]
fn code_put_in_a_spanned_gap_splits_the_section() {
    let mut st = Fake::default();
    st.list.attached = true;
    let base = 0x6b00_0000_0000u64;
    let mut ids = Vec::new();
    for i in 0..1100u64 {
        ids.push(reg(
            &mut st,
            &one(&format!("old_{i:04}"), base + i * 256, None),
            Format::Elf,
        ));
    }
    assert_sections_cover_only_their_own(&st);
    // New code in the gaps, here and there, ELF and compact.
    for k in 0..40u64 {
        let at = base + (k * 27 % 1100) * 256 + 96;
        let format = if k % 2 == 0 {
            Format::Elf
        } else {
            Format::Compact
        };
        reg(
            &mut st,
            &one(&format!("new_{k:04}"), at, Some("n.js")),
            format,
        );
        assert_sections_cover_only_their_own(&st);
    }
    // Holes: unregistered code, then new code where it was.
    for k in (0..1100).step_by(97) {
        st.remove(ids[k]);
        let at = base + k as u64 * 256;
        reg(
            &mut st,
            &one(&format!("again_{k:04}"), at, None),
            Format::Elf,
        );
        assert_sections_cover_only_their_own(&st);
    }
}

/// An object registered alone (64 functions or more) spans its own gaps, but not code
/// registered before inside them; code registered into its spanned gaps later is refused
/// with an error naming the address (nothing of it is kept to re-encode it from).
#[test]
fn an_object_alone_spans_only_free_gaps() {
    let mut st = Fake::default();
    st.list.attached = true;
    let base = 0x6c00_0000_0000u64;
    // Code already there, in what will be a gap of the big object.
    reg(
        &mut st,
        &one("early", base + 100 * 128 + 64, None),
        Format::Elf,
    );
    let mut big = JitObject::new();
    for i in 0..200u64 {
        big.add_function(&format!("big_{i:04}"), base + i * 128, 64)
            .unwrap();
    }
    reg(&mut st, &big, Format::Elf);
    let sections = assert_sections_cover_only_their_own(&st);
    assert!(sections <= 4, "{sections} sections");
    let late = one("late", base + 10 * 128 + 64, None);
    let ctx = st.registration_context();
    let e = register_in(ctx, || &mut st, &late, Format::Elf).unwrap_err();
    assert!(
        matches!(e, crate::Error::InsideGap { address, .. } if address == base + 10 * 128 + 64),
        "{e}"
    );
    assert!(e.to_string().contains("JIT_GDB_SPLIT_GAPS"), "{e}");
    // Past its end is not inside.
    reg(
        &mut st,
        &one("after", base + 200 * 128 + 64, None),
        Format::Elf,
    );
    assert_sections_cover_only_their_own(&st);
}
