//! A run's stored raw events: the paged events endpoint (`/api/runs/{id}/events`, in
//! commit order, with each event's live-bytes delta) and the API calls of a time range
//! drawn as lanes on the run page (bounded by a chunk budget).

use serde::Serialize;

use super::sql::clamp_offset;
use memwatch_wire::EventKind;

use crate::codes;
use crate::db::{chunk, Store, StoreError};

#[derive(Debug, Serialize)]
pub struct EventRow {
    pub ts_ns: u64,
    /// When the call started (`Event::call_start_ns`; not part of the JSON).
    #[serde(skip)]
    pub start_ns: u64,
    pub kind: &'static str,
    pub api: &'static str,
    pub mem_kind: &'static str,
    pub ptr: u64,
    pub size: u64,
    pub stream: u64,
    pub aux: u64,
    pub duration_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub result: i32,
    pub device: i32,
    /// Effect on the device's live bytes.
    pub delta: i64,
}

#[derive(Debug, Serialize)]
pub struct EventsPage {
    /// The run's start on the capture's CLOCK_MONOTONIC: `from`/`to` count from it, while
    /// each event's `ts_ns` is the raw clock value as recorded (subtract this to get the
    /// offsets the other endpoints use).
    pub t0_mono_ns: u64,
    pub events: Vec<EventRow>,
    /// Pass as `cursor` for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

/// A stored chunk with its id (the page cursor).
#[derive(sqlx::FromRow)]
struct IdChunk {
    id: i64,
    events: Vec<u8>,
    deltas: Vec<u8>,
}

impl Store {
    /// Events of `device` in commit order, `limit` per page. `cursor` is
    /// "CHUNK_ID:INDEX" from the previous page. `from`/`to` filter by time since start.
    pub async fn events(
        &self,
        run: i64,
        device: i64,
        from: Option<u64>,
        to: Option<u64>,
        cursor: Option<(i64, usize)>,
        limit: usize,
    ) -> Result<Option<EventsPage>, StoreError> {
        let Some(t0) = self.run_t0(run).await? else {
            return Ok(None);
        };
        let lo = t0 + clamp_offset(from.unwrap_or(0));
        let hi = to.map(|t| t0 + clamp_offset(t)).unwrap_or(i64::MAX as u64);
        let (mut chunk_id, mut index) = cursor.unwrap_or((0, 0));
        let limit = limit.clamp(1, 100_000);
        let mut events = Vec::new();
        loop {
            let rows: Vec<IdChunk> = sqlx::query_as(
                "SELECT id, events, deltas FROM event_chunks WHERE run_id = $1 AND device = $2 \
                 AND id >= $3 AND ts_last >= $4 AND ts_first <= $5 ORDER BY id LIMIT 8",
            )
            .bind(run)
            .bind(device)
            .bind(chunk_id)
            .bind(lo as i64)
            .bind(hi.min(i64::MAX as u64) as i64)
            .fetch_all(&self.pool)
            .await?;
            if rows.is_empty() {
                return Ok(Some(EventsPage {
                    t0_mono_ns: t0,
                    events,
                    next_cursor: None,
                }));
            }
            for row in &rows {
                let id = row.id;
                if id != chunk_id {
                    chunk_id = id;
                    index = 0;
                }
                let n = chunk::event_count(&row.events);
                while index < n {
                    if events.len() >= limit {
                        return Ok(Some(EventsPage {
                            t0_mono_ns: t0,
                            events,
                            next_cursor: Some(format!("{chunk_id}:{index}")),
                        }));
                    }
                    let e = chunk::event_at(&row.events, index);
                    let delta = chunk::delta_at(&row.deltas, index);
                    index += 1;
                    if e.ts_ns < lo || e.ts_ns > hi {
                        continue;
                    }
                    events.push(EventRow {
                        ts_ns: e.ts_ns,
                        start_ns: e.call_start_ns(),
                        kind: codes::event_kind_name(e.kind),
                        api: codes::api_name(e.api),
                        mem_kind: codes::mem_kind_name(e.mem_kind),
                        ptr: e.ptr,
                        size: e.size,
                        stream: e.stream,
                        aux: e.aux,
                        duration_ns: e.duration_ns,
                        pid: e.pid,
                        tid: e.tid,
                        result: e.result,
                        device: e.device,
                        delta,
                    });
                }
                chunk_id = id + 1;
                index = 0;
            }
        }
    }
}

/// Most raw event chunks (8192 events each) read to draw span lanes.
pub const SPAN_CHUNK_BUDGET: i64 = 24;

/// API spans (and timed allocation calls) of a run in `[from, to)` ns since its start.
pub struct SpanSet {
    /// (pid, tid) per lane.
    pub lanes: Vec<(u32, u32)>,
    /// (lane, start, end, api name).
    pub spans: Vec<(usize, u64, u64, &'static str)>,
    /// The range holds more raw data than the budget: zoom in to see spans.
    pub too_many: bool,
    /// Raw events for the range were deleted by retention (or none were stored).
    pub raw_chunks: i64,
}

/// Reads the spans of run `run` over `[from, to)`; `None` when the run does not exist.
pub(crate) async fn spans(
    store: &Store,
    run: i64,
    from: u64,
    to: u64,
) -> Result<Option<SpanSet>, StoreError> {
    let Some(t0) = store.run_t0(run).await? else {
        return Ok(None);
    };
    let lo = (t0 + from) as i64;
    let hi = (t0.saturating_add(to)).min(i64::MAX as u64) as i64;
    let raw_chunks: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM event_chunks WHERE run_id = $1 AND ts_last >= $2 AND ts_first < $3",
    )
    .bind(run)
    .bind(lo)
    .bind(hi)
    .fetch_one(&store.pool)
    .await?;
    let mut set = SpanSet {
        lanes: Vec::new(),
        spans: Vec::new(),
        too_many: raw_chunks > SPAN_CHUNK_BUDGET,
        raw_chunks,
    };
    if set.too_many || raw_chunks == 0 {
        return Ok(Some(set));
    }
    let rows: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT events FROM event_chunks WHERE run_id = $1 AND ts_last >= $2 AND ts_first < $3 \
         ORDER BY id LIMIT $4",
    )
    .bind(run)
    .bind(lo)
    .bind(hi)
    .bind(SPAN_CHUNK_BUDGET)
    .fetch_all(&store.pool)
    .await?;
    for blob in &rows {
        for e in chunk::events(blob) {
            let dur = match codes::event_kind(e.kind) {
                Some(EventKind::ApiSpan) => e.aux.max(e.duration_ns),
                Some(_) => e.duration_ns,
                None => 0,
            };
            if dur == 0 {
                continue;
            }
            let start = e.call_start_ns().saturating_sub(t0);
            let end = start + dur;
            if end < from || start >= to {
                continue;
            }
            let key = (e.pid, e.tid);
            let lane = match set.lanes.iter().position(|l| *l == key) {
                Some(i) => i,
                None => {
                    if set.lanes.len() >= 64 {
                        continue;
                    }
                    set.lanes.push(key);
                    set.lanes.len() - 1
                }
            };
            set.spans.push((lane, start, end, codes::api_name(e.api)));
        }
    }
    Ok(Some(set))
}
