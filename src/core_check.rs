//! The launcher's check of a core file's JIT entry list before GDB reads it (`jit-gdb core`,
//! `jit-gdb PROGRAM CORE`).
//!
//! GDB walks `__jit_debug_descriptor`'s entry list as it loads a core, and some damage stops
//! it for good (measured with GDB 13, see docs/DESIGN.md "Damaged cores"): a cyclic list
//! makes its walk loop forever, and with a reader loaded it allocates each entry's
//! `symfile_size` before reading the payload, so an absurd size aborts it
//! (`std::length_error`, `virtual memory exhausted`). The inspector's bounded walk
//! (`jit_interface::inspect::walk_list`) finds such entries without GDB. The launcher then
//! gives GDB a copy of the core whose list is cut before the first bad entry (one pointer
//! cleared in the copy's memory bytes), so that the session still shows every entry before
//! it; the original core is never written.
//!
//! The rules, in list order (the first that applies decides where the list is cut):
//! - an entry whose payload (`symfile_addr`, `symfile_size`) does not lie in the core's
//!   memory: a huge size aborts GDB, any other such entry is damaged;
//! - an entry that cannot be read (outside the core's memory, or in memory the core does
//!   not hold): GDB stops its walk there with an error;
//! - a `next_entry` pointing back into the list: GDB would loop forever;
//! - more entries than the walk's limit (far more than any runtime registers).
//!
//! A descriptor whose version is not 1 is ignored by GDB, so its list is no danger.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use jit_interface::inspect::{ListEntry, ListProblem, ListReport};

pub(crate) use crate::inspect::Segment;

/// Where the list must be cut, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The entries GDB is given: the first `keep` of the list.
    pub keep: usize,
    /// The address of the pointer to clear: the descriptor's `first_entry` (keep 0) or the
    /// `next_entry` of entry `keep - 1`.
    pub patch_addr: u64,
    /// What is wrong, as one line.
    pub problem: String,
    /// How many entries the inspector read beyond the cut: the session will not show them.
    pub left_out: usize,
    /// The first few of them, each with its functions' names (or why it could not be read).
    pub left_out_shown: Vec<String>,
}

impl Damage {
    /// Where the list is cut, and what is left out, as one line.
    pub fn cut_summary(&self) -> String {
        let at = if self.keep == 0 {
            "the descriptor's first_entry cleared: no JIT entry is read".to_string()
        } else {
            format!(
                "the list cut after entry {} (its next_entry cleared)",
                self.keep - 1
            )
        };
        let left = match self.left_out {
            0 => "no entry left out".to_string(),
            n => {
                let mut s = format!(
                    "{n} entr{} left out: {}",
                    if n == 1 { "y" } else { "ies" },
                    self.left_out_shown.join("; ")
                );
                if n > self.left_out_shown.len() {
                    s.push_str(&format!("; and {} more", n - self.left_out_shown.len()));
                }
                s
            }
        };
        format!("{at}; {left}")
    }
}

/// Does `[addr, addr + len)` lie in the core's memory (adjacent segments joined; stored in
/// the file or not: a payload's size must fit in what the process had mapped)?
fn in_memory(segments: &[Segment], addr: u64, len: u64) -> bool {
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    // Segments are sorted and do not overlap: start at the last one beginning at or before
    // `addr` (a list may have millions of entries, a core thousands of segments).
    let first = segments.partition_point(|s| s.vaddr <= addr);
    let Some(k) = first.checked_sub(1) else {
        return false;
    };
    let mut at = addr;
    for s in &segments[k..] {
        if s.vaddr > at {
            return false;
        }
        let s_end = s.vaddr.saturating_add(s.memsz);
        if at >= s_end {
            return false;
        }
        if end <= s_end {
            return true;
        }
        at = s_end;
    }
    false
}

/// What a reader is given of an entry, for the list of what a cut leaves out.
fn describe(i: usize, e: &ListEntry) -> String {
    match &e.result {
        Ok(p) if p.functions.is_empty() => format!("entry {i} (no function)"),
        Ok(p) => {
            let names: Vec<&str> = p.functions.iter().map(|f| f.name.as_str()).collect();
            const SHOWN: usize = 4;
            let more = names.len().saturating_sub(SHOWN);
            format!(
                "entry {i} ({}{})",
                names[..names.len().min(SHOWN)].join(", "),
                if more > 0 {
                    format!(", {more} more")
                } else {
                    String::new()
                }
            )
        }
        Err(why) => format!("entry {i} (unreadable: {why})"),
    }
}

/// Where the list of `report` must be cut before GDB reads it, if anywhere.
pub fn diagnose(report: &ListReport, segments: &[Segment]) -> Option<Damage> {
    if report.descriptor.version != 1 {
        return None;
    }
    let entries = &report.entries;
    let total: u64 = segments
        .iter()
        .map(|s| s.memsz)
        .fold(0, u64::saturating_add);
    // The first entry whose payload is outside the core's memory.
    let bad_payload = entries.iter().enumerate().find_map(|(i, e)| {
        // Size 0: GDB allocates and reads nothing (the reader and BFD refuse the empty file).
        if e.payload_size == 0 || in_memory(segments, e.payload_addr, e.payload_size) {
            return None;
        }
        let why = if e.payload_size > total {
            format!(
                "has symfile_size {:#x}, more than the core's whole memory (GDB with a reader would abort allocating it)",
                e.payload_size
            )
        } else {
            format!(
                "has its payload ({} bytes at {:#x}) outside the core's memory (damaged entry)",
                e.payload_size, e.payload_addr
            )
        };
        Some((i, format!("entry {i} at {:#x} {why}", e.addr)))
    });
    // What ends the walk: the list problems that concern the whole list, not one payload.
    let list_end = report.problems.iter().find_map(|p| match p {
        ListProblem::Loop { index, target } => {
            let back = entries
                .iter()
                .position(|e| e.addr == *target)
                .map(|k| format!("entry {k} at {target:#x}"))
                .unwrap_or_else(|| format!("{target:#x}"));
            let addr = entries.get(*index).map_or(0, |e| e.addr);
            Some((
                index + 1,
                format!(
                    "entry {index} at {addr:#x} has next_entry pointing back to {back}: the list is cyclic (GDB would loop forever reading it)"
                ),
            ))
        }
        ListProblem::UnreadableEntry { index, addr, why } => {
            let which = if *index == 0 {
                format!("the descriptor's first_entry {addr:#x}")
            } else {
                format!("entry {index} at {addr:#x} (entry {}'s next_entry)", index - 1)
            };
            let why = if in_memory(segments, *addr, jit_interface::inspect::ENTRY_SIZE) {
                why.clone()
            } else {
                "it is outside the core's memory".to_string()
            };
            Some((
                *index,
                format!("{which} cannot be read: {why} (GDB stops reading the list there with an error)"),
            ))
        }
        ListProblem::TooManyEntries { limit } => Some((
            entries.len(),
            format!(
                "the list has more than {limit} entries, far more than any runtime registers (damaged; GDB would take hours reading it)"
            ),
        )),
        // A wrong version (handled above) or `prev`, which GDB's walk does not follow.
        _ => None,
    });
    // The earlier cut wins; `damaged`: the first entry left out is the one named.
    let ((keep, problem), damaged) = match (bad_payload, list_end) {
        (Some(a), Some(b)) if b.0 < a.0 => (b, false),
        (Some(a), _) => (a, true),
        (None, b) => (b?, false),
    };
    let patch_addr = match keep {
        0 => report.descriptor.addr + 16,
        k => entries[k - 1].addr,
    };
    const SHOWN: usize = 5;
    let left_out_shown = entries
        .iter()
        .enumerate()
        .skip(keep)
        .take(SHOWN)
        .map(|(i, e)| {
            if damaged && i == keep {
                format!("entry {i} (the damaged one)")
            } else {
                describe(i, e)
            }
        })
        .collect();
    Some(Damage {
        keep,
        patch_addr,
        problem,
        left_out: entries.len().saturating_sub(keep),
        left_out_shown,
    })
}

/// The file offset of memory address `addr` (8 bytes of it stored in the file).
fn file_offset(segments: &[Segment], addr: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| s.vaddr <= addr && s.filesz >= 8 && addr - s.vaddr <= s.filesz - 8)
        .map(|s| s.offset + (addr - s.vaddr))
}

/// Copies `core` into `dir` and clears the pointer `damage` names in the copy. The walk
/// read that pointer from the core, so it is in the file.
pub fn write_repaired(
    core: &Path,
    segments: &[Segment],
    damage: &Damage,
    dir: &Path,
) -> Result<PathBuf, String> {
    let at = file_offset(segments, damage.patch_addr).ok_or_else(|| {
        format!(
            "the pointer to clear at {:#x} is not stored in {}",
            damage.patch_addr,
            core.display()
        )
    })?;
    let name = core
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "core".into());
    let copy = dir.join(format!("{name}.repaired"));
    // `fs::copy` uses copy_file_range: a reflink or an in-kernel copy where it can.
    std::fs::copy(core, &copy).map_err(|e| {
        format!(
            "cannot copy {} to {} to repair it: {e}",
            core.display(),
            copy.display()
        )
    })?;
    let mut f = File::options()
        .write(true)
        .open(&copy)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(at))?;
            Ok(f)
        })
        .map_err(|e| format!("cannot write {}: {e}", copy.display()))?;
    f.write_all(&0u64.to_le_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| format!("cannot write {}: {e}", copy.display()))?;
    Ok(copy)
}

/// The check of `core` whose descriptor `exe` defines: `Ok(None)` for a list GDB can read.
pub fn check(core: &Path, exe: &Path) -> Result<Option<(Damage, Vec<Segment>)>, String> {
    // The inspector's own reading of the core: its segments are where the repair writes.
    let (report, segs) = crate::inspect::walk_core(core, exe)?;
    Ok(diagnose(&report, &segs).map(|d| (d, segs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jit_interface::inspect::{Descriptor, EntryError};

    const SEGS: [Segment; 3] = [
        Segment {
            vaddr: 0x1000,
            memsz: 0x1000,
            offset: 0x100,
            filesz: 0x1000,
        },
        Segment {
            vaddr: 0x2000,
            memsz: 0x2000,
            offset: 0x1100,
            filesz: 0x800,
        },
        Segment {
            vaddr: 0x8000,
            memsz: 0x1000,
            offset: 0x1900,
            filesz: 0x1000,
        },
    ];

    fn entry(addr: u64, next: u64, payload_addr: u64, payload_size: u64) -> ListEntry {
        ListEntry {
            addr,
            next,
            prev: 0,
            payload_addr,
            payload_size,
            kind: None,
            result: Err(EntryError::Empty),
            dropped: 0,
        }
    }

    fn report(entries: Vec<ListEntry>, problems: Vec<ListProblem>) -> ListReport {
        ListReport {
            descriptor: Descriptor {
                addr: 0x1800,
                version: 1,
                action_flag: 0,
                relevant_entry: 0,
                first_entry: entries.first().map_or(0, |e| e.addr),
            },
            entries,
            problems,
        }
    }

    #[test]
    fn memory_spans_adjacent_segments_and_not_beyond() {
        assert!(in_memory(&SEGS, 0x1ff0, 0x20), "across the joint");
        assert!(in_memory(&SEGS, 0x3000, 0x1000), "not stored, but mapped");
        assert!(!in_memory(&SEGS, 0x3000, 0x1001));
        assert!(!in_memory(&SEGS, 0x3000, 0x5001), "across a gap");
        assert!(!in_memory(&SEGS, 0x6000, 0x10), "in a gap");
        assert!(in_memory(&SEGS, 0x8ff0, 0x10));
        assert!(!in_memory(&SEGS, 0x500, 1));
        assert!(!in_memory(&SEGS, 0x1000, u64::MAX), "overflow");
        assert!(in_memory(&SEGS, 0x1000, 0));
    }

    #[test]
    fn a_clean_list_is_left_alone() {
        let r = report(
            vec![
                entry(0x1100, 0x1200, 0x2000, 0x10),
                entry(0x1200, 0, 0x2100, 0x10),
            ],
            vec![],
        );
        assert_eq!(diagnose(&r, &SEGS), None);
    }

    #[test]
    fn a_huge_size_is_cut_before_its_entry() {
        let r = report(
            vec![
                entry(0x1100, 0x1200, 0x2000, 0x10),
                entry(0x1200, 0x1300, 0x2100, u64::MAX - 0xffff),
                entry(0x1300, 0, 0x2200, 0x10),
            ],
            vec![],
        );
        let d = diagnose(&r, &SEGS).unwrap();
        assert_eq!((d.keep, d.patch_addr), (1, 0x1100));
        assert!(
            d.problem.starts_with(
                "entry 1 at 0x1200 has symfile_size 0xffffffffffff0000, more than the core's whole memory"
            ),
            "{}",
            d.problem
        );
        assert_eq!((d.left_out, d.left_out_shown.len()), (2, 2));
        assert!(d.cut_summary().contains("cut after entry 0"));
    }

    #[test]
    fn a_bad_first_entry_clears_the_descriptor() {
        let r = report(vec![entry(0x1100, 0, 0x9000, 0x10)], vec![]);
        let d = diagnose(&r, &SEGS).unwrap();
        assert_eq!((d.keep, d.patch_addr), (0, 0x1810));
        assert!(
            d.problem.contains("outside the core's memory"),
            "{}",
            d.problem
        );
        let r = report(
            vec![],
            vec![ListProblem::UnreadableEntry {
                index: 0,
                addr: 0xdead_0000,
                why: "address 0xdead0000 is not in the core's memory".into(),
            }],
        );
        let d = diagnose(&r, &SEGS).unwrap();
        assert_eq!((d.keep, d.patch_addr), (0, 0x1810));
        assert!(
            d.problem.starts_with(
                "the descriptor's first_entry 0xdead0000 cannot be read: it is outside"
            ),
            "{}",
            d.problem
        );
        assert!(d.cut_summary().contains("first_entry cleared"));
    }

    #[test]
    fn a_cycle_is_cut_where_it_turns_back() {
        let r = report(
            vec![
                entry(0x1100, 0x1200, 0x2000, 0x10),
                entry(0x1200, 0x1100, 0x2100, 0x10),
            ],
            vec![ListProblem::Loop {
                index: 1,
                target: 0x1100,
            }],
        );
        let d = diagnose(&r, &SEGS).unwrap();
        assert_eq!((d.keep, d.patch_addr), (2, 0x1200));
        assert!(
            d.problem.contains("pointing back to entry 0 at 0x1100"),
            "{}",
            d.problem
        );
        assert!(d.cut_summary().ends_with("no entry left out"));
        // The earlier of two problems decides.
        let mut r = r;
        r.entries[0].payload_size = 1 << 40;
        assert_eq!(diagnose(&r, &SEGS).unwrap().keep, 0);
    }

    #[test]
    fn a_descriptor_gdb_ignores_is_no_danger() {
        let mut r = report(
            vec![entry(0x1100, 0x1100, 0x2000, 1 << 60)],
            vec![ListProblem::Loop {
                index: 0,
                target: 0x1100,
            }],
        );
        r.descriptor.version = 2;
        assert_eq!(diagnose(&r, &SEGS), None);
    }

    #[test]
    fn patch_offsets_need_stored_bytes() {
        assert_eq!(file_offset(&SEGS, 0x1008), Some(0x108));
        assert_eq!(file_offset(&SEGS, 0x27f8), Some(0x18f8));
        assert_eq!(file_offset(&SEGS, 0x27fc), None, "past filesz");
    }
}
