//! Grouping a set of live allocations for the Peak page and `/peak`: by size class,
//! memory kind, thread and the annotation in force when each was made; and the
//! annotation lookup itself (per pid, the latest at or before a time).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::model::{Group, Peak, PeakAlloc};
use crate::codes;
use crate::db::snapshot::LiveAlloc;

/// Most note lookups [`Store::live_at`] makes before reading all annotations instead.
pub(super) const NOTE_QUERY_BUDGET: usize = 2000;

/// Annotations per pid, in time order.
pub(super) type Notes = HashMap<u32, Vec<(u64, String)>>;

/// The latest annotation of `pid` at or before `ts` (binary search).
pub(super) fn note_for(notes: &Notes, pid: u32, ts: u64) -> Option<&str> {
    let v = notes.get(&pid)?;
    let i = v.partition_point(|(t, _)| *t <= ts);
    i.checked_sub(1).map(|i| v[i].1.as_str())
}

/// Groups live allocations by size class, kind, thread and annotation.
#[allow(clippy::too_many_arguments)]
pub(super) fn group_live(
    run: i64,
    device: i64,
    bytes: i64,
    ts: i64,
    t0: i64,
    mut allocs: Vec<(LiveAlloc, Option<Arc<str>>)>,
    top: usize,
) -> Peak {
    let mut by_size: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut by_kind: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    let mut by_thread: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
    let mut by_note: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (a, note) in &allocs {
        let add = |e: &mut (u64, u64)| {
            e.0 += 1;
            e.1 += a.size;
        };
        add(by_size
            .entry(64 - a.size.saturating_sub(1).leading_zeros())
            .or_default());
        add(by_kind.entry(codes::mem_kind_name(a.mem_kind)).or_default());
        add(by_thread.entry((a.pid, a.tid)).or_default());
        add(by_note
            .entry(note.as_deref().unwrap_or("(none)"))
            .or_default());
    }
    let groups = |v: Vec<(String, (u64, u64))>| {
        let mut g: Vec<Group> = v
            .into_iter()
            .map(|(key, (count, bytes))| Group { key, count, bytes })
            .collect();
        g.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.key.cmp(&b.key)));
        g
    };
    let by_annotation = groups(
        by_note
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    );
    let live_allocations = allocs.len() as u64;
    allocs.sort_by(|(a, _), (b, _)| b.size.cmp(&a.size).then(a.ts_ns.cmp(&b.ts_ns)));
    let largest = allocs
        .iter()
        .take(top)
        .map(|(a, note)| PeakAlloc {
            pid: a.pid,
            tid: a.tid,
            ptr: a.ptr,
            size: a.size,
            ts_ns: a.ts_ns.saturating_sub(t0.max(0) as u64),
            api: codes::api_name(a.api),
            mem_kind: codes::mem_kind_name(a.mem_kind),
            annotation: note.as_deref().map(str::to_string),
        })
        .collect();
    Peak {
        run_id: run,
        device,
        peak_bytes: bytes,
        peak_ts_ns: ts,
        live_allocations,
        by_size_class: groups(
            by_size
                .into_iter()
                .map(|(c, v)| (format!("<= {} B", 1u128 << c), v))
                .collect(),
        ),
        by_kind: groups(
            by_kind
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        ),
        by_thread: groups(
            by_thread
                .into_iter()
                .map(|((p, t), v)| (format!("pid {p} tid {t}"), v))
                .collect(),
        ),
        by_annotation,
        largest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn note_lookup_picks_latest_before() {
        let mut n: Notes = HashMap::new();
        n.insert(
            7,
            vec![(10, "a".into()), (20, "b".into()), (30, "c".into())],
        );
        assert_eq!(note_for(&n, 7, 5), None);
        assert_eq!(note_for(&n, 7, 10), Some("a"));
        assert_eq!(note_for(&n, 7, 25), Some("b"));
        assert_eq!(note_for(&n, 7, 99), Some("c"));
        assert_eq!(note_for(&n, 8, 99), None);
    }
}
