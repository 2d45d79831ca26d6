//! What was live on a device at any instant: the stored raw events of that device
//! replayed through `memwatch_analysis::live::LiveSet` (the rule ingest applied when it
//! stored them) from the nearest known state before the instant (a live-set checkpoint,
//! the peak snapshot, or the run's start). An event belongs to the exec image of its pid
//! running at its time (`process_images`); an image's allocations stop being live when
//! the next image of its pid starts; an allocation handed out again by another device's
//! event is released at that event's time (`device_releases`). Shared by the live-at
//! query and the checkpoints.

use memwatch_analysis::live::{Family, LiveKey, LiveSet, MemEvent};
use memwatch_wire::EventKind;

use crate::codes;
use crate::db::images::StoredImages;
use crate::db::snapshot::{LiveAlloc, Origin};
use crate::db::{chunk, Store, StoreError};

/// A stored chunk as the replay reads it.
#[derive(sqlx::FromRow)]
pub(super) struct ChunkRow {
    pub id: i64,
    pub events: Vec<u8>,
    pub deltas: Vec<u8>,
}

/// A `device_releases` row: the allocation that released one of this device's.
#[derive(sqlx::FromRow)]
struct Released {
    ts_ns: i64,
    pid: i64,
    ptr: i64,
    mem_kind: i64,
    api: i64,
}

/// The live set of one device being replayed.
pub(super) struct Replay {
    live: LiveSet<Origin>,
    images: StoredImages,
    device: i32,
    /// Releases by other devices' events, newest first (popped in time order).
    releases: Vec<Released>,
}

impl Replay {
    /// An empty replay of `device` of run `run`, with what it needs besides the chunks.
    pub(super) async fn new(store: &Store, run: i64, device: i64) -> Result<Self, StoreError> {
        let mut releases: Vec<Released> = sqlx::query_as(
            "SELECT ts_ns, pid, ptr, mem_kind, api FROM device_releases \
             WHERE run_id = $1 AND device = $2 ORDER BY ts_ns",
        )
        .bind(run)
        .bind(device)
        .fetch_all(&store.pool)
        .await?;
        releases.reverse();
        Ok(Self {
            live: LiveSet::new(),
            images: StoredImages::load(&store.pool, run).await?,
            device: device as i32,
            releases,
        })
    }

    /// Applies the releases by other devices' events before `ts` (through `ts` when
    /// `inclusive`).
    #[inline]
    fn release_until(&mut self, ts: i64, inclusive: bool) {
        if self.releases.is_empty() {
            return; // nearly always: on every replayed event's path
        }
        self.release_due(ts, inclusive);
    }

    fn release_due(&mut self, ts: i64, inclusive: bool) {
        while let Some(r) = self.releases.last() {
            if r.ts_ns > ts || (r.ts_ns == ts && !inclusive) {
                break;
            }
            if let Some(family) =
                Family::of(codes::mem_kind(r.mem_kind as u8), codes::api(r.api as u16))
            {
                self.live.remove(&LiveKey {
                    proc: self.images.proc_at(r.pid as u32, r.ts_ns.max(0) as u64),
                    family,
                    ptr: r.ptr as u64,
                });
            }
            self.releases.pop();
        }
    }

    /// Skips the releases at or before `ts` (they happened before a known live set).
    pub(super) fn skip_until(&mut self, ts: i64) {
        while self.releases.last().is_some_and(|r| r.ts_ns <= ts) {
            self.releases.pop();
        }
    }

    /// Starts from a known live set (a checkpoint's or the peak snapshot's allocations,
    /// all on this device).
    pub(super) fn load(&mut self, allocs: Vec<LiveAlloc>) {
        if self.live.is_empty() {
            // Room for what is loaded and what the replay adds, without rehashing.
            self.live = LiveSet::with_capacity(allocs.len() + allocs.len() / 2 + 1024);
        }
        for a in allocs {
            let e = MemEvent {
                proc: self.images.proc_at(a.pid, a.ts_ns),
                device: self.device,
                kind: Some(EventKind::Alloc),
                mem: codes::mem_kind(a.mem_kind),
                api: codes::api(a.api),
                ptr: a.ptr,
                size: a.size,
                handle: None,
            };
            self.live.apply(&e, Origin::of_alloc(&a));
        }
    }

    /// Applies the events of a stored chunk with `lo < ts <= hi`; returns how many
    /// events the chunk holds.
    pub(super) fn apply_chunk(
        &mut self,
        row: &ChunkRow,
        lo: i64,
        hi: i64,
    ) -> Result<usize, StoreError> {
        for (e, _) in chunk::with_deltas(row.id, &row.events, &row.deltas)? {
            let ts = e.ts_ns.min(i64::MAX as u64) as i64;
            if ts > hi || ts <= lo {
                continue;
            }
            self.release_until(ts, false);
            // Only allocations and frees move a live set (LiveSet::apply answers
            // NotMemory for every other kind): the rest is skipped before it is read.
            if !matches!(
                codes::event_kind(e.kind),
                Some(EventKind::Alloc | EventKind::Free)
            ) {
                continue;
            }
            let proc_ = self.images.proc_at(e.pid, e.ts_ns);
            self.live
                .apply(&MemEvent::of_wire(proc_, &e), Origin::of(&e));
        }
        Ok(chunk::event_count(&row.events))
    }

    /// Brings the live set to instant `ts` (absolute monotonic ns): the releases by other
    /// devices' events through it, and the images that had ended by it.
    pub(super) fn end_at(&mut self, ts: i64) {
        self.release_until(ts, true);
        if self.images.is_empty() {
            return;
        }
        let ended: Vec<_> = self.images.ended_by(ts.max(0) as u64).collect();
        for p in ended {
            self.live.release_process(p);
        }
    }

    /// How many allocations of device memory are live.
    pub(super) fn device_allocs(&self) -> usize {
        self.live
            .all_totals()
            .map(|(_, t)| t.device_allocs as usize)
            .sum()
    }

    /// The allocations of device memory live on this device.
    pub(super) fn allocations(&self) -> Vec<LiveAlloc> {
        self.live
            .iter()
            .filter(|(k, h)| k.family.on_device() && h.device == self.device)
            .map(|(k, h)| Origin::live_alloc(k, h))
            .collect()
    }
}

impl Store {
    /// Replays the stored events of `device` up to `t0 + at`: the allocations of device
    /// memory live then, and the absolute instant they are exact for. `start`: a known
    /// live set at an absolute time (the peak snapshot); events after it are replayed.
    /// `pruned_to`: the run's raw events up to then were deleted by retention; when the
    /// nearest known state is older than that, the events after it are incomplete, so
    /// that state is returned as it is, with its own instant (the run's start, with
    /// nothing live, when none is known).
    pub(super) async fn replay_live(
        &self,
        run: i64,
        device: i64,
        t0: i64,
        at: u64,
        start: Option<(i64, Vec<LiveAlloc>)>,
        pruned_to: Option<i64>,
    ) -> Result<(Vec<LiveAlloc>, i64), StoreError> {
        let hi = t0.saturating_add(at.min(i64::MAX as u64) as i64);
        // The nearest known state at or before `hi`: a checkpoint (everything in chunks up
        // to `after_chunk`, all at or before `hi`) or the peak snapshot (events up to `lo`).
        let cp = self.checkpoint_before(run, device, hi).await?;
        let mut replay = Replay::new(self, run, device).await?;
        // (after chunk, replay events after this time, the time the base is exact at)
        let (mut after, lo, base_ts) = match (cp, start) {
            (Some((chunk, ts_max, allocs)), s)
                if s.as_ref().is_none_or(|(pt, _)| ts_max >= *pt) =>
            {
                replay.load(allocs);
                replay.skip_until(ts_max);
                (chunk, i64::MIN, ts_max)
            }
            (_, Some((ts, allocs))) => {
                replay.load(allocs);
                replay.skip_until(ts);
                (-1, ts, ts)
            }
            (_, None) => (-1, i64::MIN, t0),
        };
        if pruned_to.is_some_and(|p| base_ts < p) {
            return Ok((replay.allocations(), base_ts.min(hi)));
        }
        loop {
            let rows: Vec<ChunkRow> = sqlx::query_as(
                "SELECT id, events, deltas FROM event_chunks WHERE run_id = $1 AND device = $2 \
                 AND id > $3 AND ts_first <= $4 AND ts_last > $5 ORDER BY id LIMIT 64",
            )
            .bind(run)
            .bind(device)
            .bind(after)
            .bind(hi)
            .bind(lo)
            .fetch_all(&self.pool)
            .await?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                after = row.id;
                replay.apply_chunk(row, lo, hi)?;
            }
        }
        replay.end_at(hi);
        Ok((replay.allocations(), hi))
    }
}
