//! Reads for the API: nodes, runs, timelines (from rollups, or raw chunks at fine zoom),
//! peaks (from the stored snapshot), paged events and incidents. Read-only.

use memwatch_wire::frame::decode_event;
use memwatch_wire::{Api, EventKind, MemKind, EVENT_SIZE};
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::rollup::{level_for, shift, width};
use super::{col_i64, snapshot, Store, StoreError};

/// A client's time offset into a run, clamped to 2^62 ns (about 146 years, past any
/// recorded event) so that `t0 + offset` cannot overflow whatever the client sends.
fn clamp_offset(t: u64) -> u64 {
    t.min(1 << 62)
}

fn s(row: &AnyRow, i: usize) -> Result<String, StoreError> {
    Ok(row.try_get::<String, _>(i)?)
}

#[derive(Debug, Serialize)]
pub struct DeviceRow {
    pub ordinal: i64,
    pub vendor: String,
    pub name: String,
    pub total_bytes: i64,
    /// Latest samples per memory (0 VRAM, 1 GTT): never added together.
    pub samples: Vec<SampleRow>,
}

#[derive(Debug, Serialize)]
pub struct SampleRow {
    pub device: i64,
    pub memory: &'static str,
    pub ts_ns: i64,
    pub used_bytes: i64,
    pub total_bytes: i64,
    pub source: String,
}

#[derive(Debug, Serialize)]
pub struct NodeRow {
    pub id: i64,
    pub name: String,
    pub first_seen_unix_ns: i64,
    pub last_seen_unix_ns: i64,
    pub devices: Vec<DeviceRow>,
    pub samples: Vec<SampleRow>,
}

#[derive(Debug, Serialize)]
pub struct RunDevice {
    pub device: i64,
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub peak_ts_ns: i64,
    pub alloc_count: i64,
    pub free_count: i64,
    pub failed_count: i64,
}

#[derive(Debug, Serialize)]
pub struct RunRow {
    pub id: i64,
    pub node: String,
    pub run_key: String,
    pub t0_mono_ns: i64,
    pub wall_anchor_unix_ns: i64,
    pub created_unix_ns: i64,
    pub duration_ns: i64,
    pub event_count: i64,
    pub dropped_events: i64,
    pub devices: Vec<RunDevice>,
}

#[derive(Debug, Serialize)]
pub struct ProcessRow {
    pub pid: i64,
    pub ppid: i64,
    pub hostname: String,
    pub argv: Vec<String>,
    pub exit_code: Option<i64>,
    pub dropped_events: i64,
}

#[derive(Debug, Serialize)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: RunRow,
    pub processes: Vec<ProcessRow>,
    /// The run's first [`RUN_ANNOTATIONS_INLINE`] annotations in time order; all of them
    /// page by page from `/api/runs/{id}/annotations`.
    pub annotations: Vec<AnnotationRow>,
    /// How many annotations the run has.
    pub annotation_count: i64,
    /// Pass as `cursor` to `/api/runs/{id}/annotations` for those after `annotations`;
    /// `null` when `annotations` holds them all.
    pub annotations_next_cursor: Option<String>,
    pub incidents: i64,
}

/// Annotations inlined in a run's detail (a run with a marker per step has hundreds of
/// thousands; the rest are paged).
pub const RUN_ANNOTATIONS_INLINE: usize = 1000;

/// One page of a run's annotations.
#[derive(Debug, Serialize)]
pub struct AnnotationsPage {
    pub annotations: Vec<AnnotationRow>,
    /// Pass as `cursor` for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, Clone)]
pub struct AnnotationRow {
    pub pid: i64,
    pub tid: i64,
    pub ts_ns: i64,
    pub device: i64,
    pub text: String,
}

/// One timeline point: live bytes over `[t_ns, t_ns + bucket_ns)`, relative to run start.
#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub t_ns: u64,
    pub min: i64,
    pub max: i64,
    pub last: i64,
}

#[derive(Debug, Serialize)]
pub struct Timeline {
    pub run_id: i64,
    pub device: i64,
    pub from_ns: u64,
    pub to_ns: u64,
    pub bucket_ns: u64,
    /// "rollup" (with `level`) or "raw".
    pub source: &'static str,
    pub level: Option<usize>,
    pub points: Vec<Point>,
}

#[derive(Debug, Serialize)]
pub struct Group {
    pub key: String,
    pub count: u64,
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct PeakAlloc {
    pub pid: u32,
    pub tid: u32,
    pub ptr: u64,
    pub size: u64,
    pub ts_ns: u64,
    pub api: &'static str,
    pub mem_kind: &'static str,
    pub annotation: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Peak {
    pub run_id: i64,
    pub device: i64,
    pub peak_bytes: i64,
    /// Relative to the run's start.
    pub peak_ts_ns: i64,
    pub live_allocations: u64,
    pub by_size_class: Vec<Group>,
    pub by_kind: Vec<Group>,
    pub by_thread: Vec<Group>,
    pub by_annotation: Vec<Group>,
    pub largest: Vec<PeakAlloc>,
}

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

#[derive(Debug, Serialize)]
pub struct IncidentRow {
    pub id: i64,
    pub run_id: i64,
    pub node: String,
    pub pid: i64,
    pub tid: i64,
    pub device: i64,
    pub ts_ns: i64,
    pub size: i64,
    pub result: i64,
    pub api: String,
    pub live_bytes: i64,
    pub created_unix_ns: i64,
}

fn memory_name(m: i64) -> &'static str {
    match m {
        0 => "vram",
        1 => "gtt",
        _ => "other",
    }
}

impl Store {
    async fn samples(&self, node: i64) -> Result<Vec<SampleRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT s.device, s.memory, s.ts_ns, s.used_bytes, s.total_bytes, s.source \
             FROM device_samples s JOIN (SELECT device, memory, MAX(ts_ns) AS ts FROM \
             device_samples WHERE node_id = $1 GROUP BY device, memory) m \
             ON s.device = m.device AND s.memory = m.memory AND s.ts_ns = m.ts \
             WHERE s.node_id = $1 ORDER BY s.device, s.memory",
        )
        .bind(node)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(SampleRow {
                    device: col_i64(r, 0)?,
                    memory: memory_name(col_i64(r, 1)?),
                    ts_ns: col_i64(r, 2)?,
                    used_bytes: col_i64(r, 3)?,
                    total_bytes: col_i64(r, 4)?,
                    source: s(r, 5)?,
                })
            })
            .collect()
    }

    pub async fn nodes(&self) -> Result<Vec<NodeRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, name, first_seen_unix_ns, last_seen_unix_ns FROM nodes ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        for r in &rows {
            let id = col_i64(r, 0)?;
            let devs = sqlx::query(
                "SELECT ordinal, vendor, name, total_bytes FROM devices WHERE node_id = $1 \
                 ORDER BY ordinal",
            )
            .bind(id)
            .fetch_all(&self.pool)
            .await?;
            let samples = self.samples(id).await?;
            let mut devices = Vec::new();
            for d in &devs {
                let ordinal = col_i64(d, 0)?;
                devices.push(DeviceRow {
                    ordinal,
                    vendor: s(d, 1)?,
                    name: s(d, 2)?,
                    total_bytes: col_i64(d, 3)?,
                    samples: Vec::new(),
                });
            }
            let mut loose = Vec::new();
            for smp in samples {
                match devices.iter_mut().find(|d| d.ordinal == smp.device) {
                    Some(d) => d.samples.push(smp),
                    None => loose.push(smp),
                }
            }
            out.push(NodeRow {
                id,
                name: s(r, 1)?,
                first_seen_unix_ns: col_i64(r, 2)?,
                last_seen_unix_ns: col_i64(r, 3)?,
                devices,
                samples: loose,
            });
        }
        Ok(out)
    }

    async fn run_devices(&self, run: i64) -> Result<Vec<RunDevice>, StoreError> {
        let rows = sqlx::query(
            "SELECT device, live_bytes, peak_bytes, peak_ts_ns, alloc_count, free_count, \
             failed_count FROM run_devices WHERE run_id = $1 ORDER BY device",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(RunDevice {
                    device: col_i64(r, 0)?,
                    live_bytes: col_i64(r, 1)?,
                    peak_bytes: col_i64(r, 2)?,
                    peak_ts_ns: col_i64(r, 3)?,
                    alloc_count: col_i64(r, 4)?,
                    free_count: col_i64(r, 5)?,
                    failed_count: col_i64(r, 6)?,
                })
            })
            .collect()
    }

    fn run_row(r: &AnyRow, devices: Vec<RunDevice>) -> Result<RunRow, StoreError> {
        let t0 = col_i64(r, 3)?;
        let mut devices = devices;
        for d in &mut devices {
            d.peak_ts_ns = (d.peak_ts_ns - t0).max(0);
        }
        Ok(RunRow {
            id: col_i64(r, 0)?,
            node: s(r, 1)?,
            run_key: s(r, 2)?,
            t0_mono_ns: t0,
            wall_anchor_unix_ns: col_i64(r, 4)?,
            created_unix_ns: col_i64(r, 5)?,
            duration_ns: (col_i64(r, 6)? - t0).max(0),
            event_count: col_i64(r, 7)?,
            dropped_events: col_i64(r, 8)?,
            devices,
        })
    }

    const RUN_COLS: &'static str = "r.id, n.name, r.run_key, r.t0_mono_ns, \
        r.wall_anchor_unix_ns, r.created_unix_ns, r.last_ts_ns, r.event_count, r.dropped_events";

    /// Runs, newest first.
    pub async fn runs(&self, limit: i64) -> Result<Vec<RunRow>, StoreError> {
        let sql = format!(
            "SELECT {} FROM runs r JOIN nodes n ON n.id = r.node_id ORDER BY r.id DESC LIMIT $1",
            Self::RUN_COLS
        );
        let rows = sqlx::query(&sql).bind(limit).fetch_all(&self.pool).await?;
        let mut out = Vec::new();
        for r in &rows {
            let devs = self.run_devices(col_i64(r, 0)?).await?;
            out.push(Self::run_row(r, devs)?);
        }
        Ok(out)
    }

    async fn run_head(&self, run: i64) -> Result<Option<RunRow>, StoreError> {
        let sql = format!(
            "SELECT {} FROM runs r JOIN nodes n ON n.id = r.node_id WHERE r.id = $1",
            Self::RUN_COLS
        );
        let Some(r) = sqlx::query(&sql)
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        let devs = self.run_devices(run).await?;
        Ok(Some(Self::run_row(&r, devs)?))
    }

    /// Annotations of `run` in (time, id) order: those after `cursor` ((ts, id) of the
    /// last one already read) with `from <= ts - t0 < to`, at most `limit`.
    pub async fn annotations_page(
        &self,
        run: i64,
        from: Option<u64>,
        to: Option<u64>,
        cursor: Option<(i64, i64)>,
        limit: usize,
    ) -> Result<Option<AnnotationsPage>, StoreError> {
        let Some(t0) = self.run_t0(run).await? else {
            return Ok(None);
        };
        let t0 = t0 as i64;
        let rel = |t: u64| t0.saturating_add(clamp_offset(t) as i64);
        let lo = from.map_or(i64::MIN, rel);
        let hi = to.map_or(i64::MAX, rel);
        let (cts, cid) = cursor.unwrap_or((i64::MIN, i64::MIN));
        let limit = limit.clamp(1, 100_000);
        let rows = sqlx::query(
            "SELECT pid, tid, ts_ns, device, text, id FROM annotations WHERE run_id = $1 \
             AND ts_ns >= $2 AND ts_ns < $3 AND (ts_ns > $4 OR (ts_ns = $4 AND id > $5)) \
             ORDER BY ts_ns, id LIMIT $6",
        )
        .bind(run)
        .bind(lo.max(cts))
        .bind(hi)
        .bind(cts)
        .bind(cid)
        .bind(limit as i64 + 1)
        .fetch_all(&self.pool)
        .await?;
        let mut annotations = Vec::with_capacity(rows.len().min(limit));
        let mut next_cursor = None;
        for (i, r) in rows.iter().enumerate() {
            if i == limit {
                let last = &rows[i - 1];
                next_cursor = Some(format!("{}:{}", col_i64(last, 2)?, col_i64(last, 5)?));
                break;
            }
            annotations.push(AnnotationRow {
                pid: col_i64(r, 0)?,
                tid: col_i64(r, 1)?,
                ts_ns: col_i64(r, 2)?,
                device: col_i64(r, 3)?,
                text: s(r, 4)?,
            });
        }
        Ok(Some(AnnotationsPage {
            annotations,
            next_cursor,
        }))
    }

    pub async fn run(&self, run: i64) -> Result<Option<RunDetail>, StoreError> {
        let Some(head) = self.run_head(run).await? else {
            return Ok(None);
        };
        let rows = sqlx::query(
            "SELECT pid, ppid, hostname, argv, exit_code, dropped_events FROM processes \
             WHERE run_id = $1 ORDER BY pid",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        let mut processes = Vec::new();
        for r in &rows {
            processes.push(ProcessRow {
                pid: col_i64(r, 0)?,
                ppid: col_i64(r, 1)?,
                hostname: s(r, 2)?,
                argv: serde_json::from_str(&s(r, 3)?).unwrap_or_default(),
                exit_code: r.try_get::<Option<i64>, _>(4)?,
                dropped_events: col_i64(r, 5)?,
            });
        }
        let n = sqlx::query("SELECT COUNT(*) FROM incidents WHERE run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        let count = sqlx::query("SELECT COUNT(*) FROM annotations WHERE run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        let page = self
            .annotations_page(run, None, None, None, RUN_ANNOTATIONS_INLINE)
            .await?
            .unwrap_or(AnnotationsPage {
                annotations: Vec::new(),
                next_cursor: None,
            });
        Ok(Some(RunDetail {
            run: head,
            processes,
            annotations: page.annotations,
            annotation_count: col_i64(&count, 0)?,
            annotations_next_cursor: page.next_cursor,
            incidents: col_i64(&n, 0)?,
        }))
    }

    /// Live bytes of `device` over `[from, to)` (ns since the run's start; `to` defaults
    /// to the run's end) in `points` buckets, each with min/max/last.
    pub async fn timeline(
        &self,
        run: i64,
        device: i64,
        from: Option<u64>,
        to: Option<u64>,
        points: usize,
    ) -> Result<Option<Timeline>, StoreError> {
        let Some(r) =
            sqlx::query("SELECT t0_mono_ns, last_ts_ns, raw_pruned_to_ns FROM runs WHERE id = $1")
                .bind(run)
                .fetch_optional(&self.pool)
                .await?
        else {
            return Ok(None);
        };
        let t0 = col_i64(&r, 0)? as u64;
        let end = (col_i64(&r, 1)? as u64).saturating_sub(t0) + 1;
        let raw_pruned_to: Option<i64> = r.try_get(2)?;
        let points = points.clamp(1, 100_000);
        let from = clamp_offset(from.unwrap_or(0));
        let to = clamp_offset(to.unwrap_or(end)).max(from + 1);
        let bucket_ns = (to - from).div_ceil(points as u64).max(1);
        let n = (to - from).div_ceil(bucket_ns) as usize;
        let mut out: Vec<Option<Point>> = vec![None; n];
        let mut put = |t: u64, lo: i64, hi: i64, last: i64| {
            if t < from || t >= to {
                return;
            }
            let i = ((t - from) / bucket_ns) as usize;
            let p = out[i].get_or_insert(Point {
                t_ns: from + i as u64 * bucket_ns,
                min: lo,
                max: hi,
                last,
            });
            p.min = p.min.min(lo);
            p.max = p.max.max(hi);
            p.last = last;
        };
        let level = match level_for(bucket_ns) {
            // Retention deleted the raw events this zoom would read: the finest rollup
            // level answers (coarser, but every peak is still in its min/max).
            None if raw_pruned_to.is_some_and(|p| (t0 + from) as i64 <= p) => Some(0),
            l => l,
        };
        let initial: i64;
        match level {
            Some(level) => {
                let sh = shift(level);
                let b0 = (from >> sh) as i64;
                let b1 = ((to - 1) >> sh) as i64;
                let before = sqlx::query(
                    "SELECT last FROM rollups WHERE run_id = $1 AND device = $2 AND level = $3 \
                     AND bucket < $4 ORDER BY bucket DESC LIMIT 1",
                )
                .bind(run)
                .bind(device)
                .bind(level as i64)
                .bind(b0)
                .fetch_optional(&self.pool)
                .await?;
                initial = match before {
                    Some(r) => col_i64(&r, 0)?,
                    None => 0,
                };
                // Folded into output points by the database: up to ~4 rollup rows per
                // point become one row (min of lo, max of hi, `last` of the point's last
                // bucket), so a query returns at most `points` rows whatever the zoom.
                // Same points as folding every bucket here (rows in bucket order).
                let rows = sqlx::query(
                    "WITH g AS (SELECT (CASE WHEN bucket * $4 < $5 THEN $5 ELSE bucket * $4 END \
                     - $5) / $6 AS i, MIN(lo) AS lo, MAX(hi) AS hi, MAX(bucket) AS mb \
                     FROM rollups WHERE run_id = $1 AND device = $2 AND level = $3 \
                     AND bucket >= $7 AND bucket <= $8 GROUP BY 1) \
                     SELECT g.i, g.lo, g.hi, r.last FROM g JOIN rollups r ON r.run_id = $1 \
                     AND r.device = $2 AND r.level = $3 AND r.bucket = g.mb ORDER BY g.i",
                )
                .bind(run)
                .bind(device)
                .bind(level as i64)
                .bind(width(level) as i64)
                .bind(from as i64)
                .bind(bucket_ns as i64)
                .bind(b0)
                .bind(b1)
                .fetch_all(&self.pool)
                .await?;
                for row in &rows {
                    let i = col_i64(row, 0)? as u64;
                    put(
                        from + i * bucket_ns,
                        col_i64(row, 1)?,
                        col_i64(row, 2)?,
                        col_i64(row, 3)?,
                    );
                }
            }
            None => {
                let rows = sqlx::query(
                    "SELECT live_start, events, deltas FROM event_chunks WHERE run_id = $1 \
                     AND device = $2 AND ts_last >= $3 AND ts_first < $4 ORDER BY id",
                )
                .bind(run)
                .bind(device)
                .bind((t0 + from) as i64)
                .bind((t0 + to) as i64)
                .fetch_all(&self.pool)
                .await?;
                let mut live: Option<i64> = None;
                let mut init: Option<i64> = None;
                if rows.is_empty() {
                    let prev = sqlx::query(
                        "SELECT live_end FROM event_chunks WHERE run_id = $1 AND device = $2 \
                         AND ts_last < $3 ORDER BY ts_last DESC LIMIT 1",
                    )
                    .bind(run)
                    .bind(device)
                    .bind((t0 + from) as i64)
                    .fetch_optional(&self.pool)
                    .await?;
                    if let Some(p) = prev {
                        init = Some(col_i64(&p, 0)?);
                    }
                }
                for row in &rows {
                    let start = col_i64(row, 0)?;
                    let mut v = live.unwrap_or(start);
                    let ev: Vec<u8> = row.try_get(1)?;
                    let de: Vec<u8> = row.try_get(2)?;
                    if ev.len() / EVENT_SIZE != de.len() / 8 {
                        return Err(StoreError::Corrupt(
                            "event chunk with mismatched deltas".into(),
                        ));
                    }
                    for (e, d) in ev.chunks_exact(EVENT_SIZE).zip(de.chunks_exact(8)) {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(&e[..8]);
                        let ts = u64::from_le_bytes(a);
                        a.copy_from_slice(d);
                        let delta = i64::from_le_bytes(a);
                        if delta == 0 {
                            continue;
                        }
                        let before = v;
                        v += delta;
                        let rel = ts.saturating_sub(t0);
                        if rel < from {
                            init = Some(v);
                        } else {
                            if init.is_none() {
                                init = Some(before);
                            }
                            put(rel, before.min(v), before.max(v), v);
                        }
                    }
                    live = Some(v);
                }
                initial = init.unwrap_or(0);
            }
        }
        let mut carry = initial;
        let mut pts = Vec::with_capacity(n);
        for (i, p) in out.into_iter().enumerate() {
            let p = match p {
                Some(mut p) => {
                    p.min = p.min.min(carry);
                    p.max = p.max.max(carry);
                    p
                }
                None => Point {
                    t_ns: from + i as u64 * bucket_ns,
                    min: carry,
                    max: carry,
                    last: carry,
                },
            };
            carry = p.last;
            pts.push(p);
        }
        // A point's min/max include the value carried in at its start (the step function
        // holds it until the first change), so no bucket under-reports.
        Ok(Some(Timeline {
            run_id: run,
            device,
            from_ns: from,
            to_ns: to,
            bucket_ns,
            source: if level.is_some() { "rollup" } else { "raw" },
            level,
            points: pts,
        }))
    }

    /// The allocations live at `device`'s peak, grouped.
    pub async fn peak(
        &self,
        run: i64,
        device: i64,
        top: usize,
    ) -> Result<Option<Peak>, StoreError> {
        let Some(t0) = self.run_t0(run).await? else {
            return Ok(None);
        };
        let t0 = t0 as i64;
        let Some(row) = sqlx::query(
            "SELECT peak_bytes, peak_ts_ns, allocs FROM peak_snapshots WHERE run_id = $1 AND device = $2",
        )
        .bind(run)
        .bind(device)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        let blob: Vec<u8> = row.try_get(2)?;
        let allocs = snapshot::decode(&blob)?;
        // The annotation in force for each allocation: indexed lookups per annotation
        // interval that holds live allocations, not a scan of all the run's annotations
        // per allocation (which took ~1 s at the peak of a 100M-event run with markers).
        let notes = self.notes_for(run, &allocs).await?;
        let (peak_bytes, peak_ts) = (col_i64(&row, 0)?, col_i64(&row, 1)?);
        Ok(Some(super::dash::group_live(
            run,
            device,
            peak_bytes,
            (peak_ts - t0).max(0),
            t0,
            allocs.into_iter().zip(notes).collect(),
            top,
        )))
    }

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
            let rows = sqlx::query(
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
                let id = col_i64(row, 0)?;
                if id != chunk_id {
                    chunk_id = id;
                    index = 0;
                }
                let ev: Vec<u8> = row.try_get(1)?;
                let de: Vec<u8> = row.try_get(2)?;
                let n = ev.len() / EVENT_SIZE;
                while index < n {
                    if events.len() >= limit {
                        return Ok(Some(EventsPage {
                            t0_mono_ns: t0,
                            events,
                            next_cursor: Some(format!("{chunk_id}:{index}")),
                        }));
                    }
                    let mut slot = [0u8; EVENT_SIZE];
                    slot.copy_from_slice(&ev[index * EVENT_SIZE..(index + 1) * EVENT_SIZE]);
                    let e = decode_event(&slot);
                    let mut d = [0u8; 8];
                    if let Some(b) = de.get(index * 8..index * 8 + 8) {
                        d.copy_from_slice(b);
                    }
                    index += 1;
                    if e.ts_ns < lo || e.ts_ns > hi {
                        continue;
                    }
                    events.push(EventRow {
                        ts_ns: e.ts_ns,
                        start_ns: e.call_start_ns(),
                        kind: EventKind::from_u8(e.kind).map_or("unknown", EventKind::name),
                        api: Api::from_u16(e.api).name(),
                        mem_kind: MemKind::from_u8(e.mem_kind).map_or("unknown", MemKind::name),
                        ptr: e.ptr,
                        size: e.size,
                        stream: e.stream,
                        aux: e.aux,
                        duration_ns: e.duration_ns,
                        pid: e.pid,
                        tid: e.tid,
                        result: e.result,
                        device: e.device,
                        delta: i64::from_le_bytes(d),
                    });
                }
                chunk_id = id + 1;
                index = 0;
            }
        }
    }

    /// Incidents (failed allocations), newest first, optionally of one run.
    pub async fn incidents(
        &self,
        run: Option<i64>,
        limit: i64,
    ) -> Result<Vec<IncidentRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT i.id, i.run_id, n.name, i.pid, i.tid, i.device, i.ts_ns, i.size, i.result, \
             i.api, i.live_bytes, i.created_unix_ns FROM incidents i JOIN runs r ON r.id = i.run_id \
             JOIN nodes n ON n.id = r.node_id WHERE ($1 < 0 OR i.run_id = $1) \
             ORDER BY i.id DESC LIMIT $2",
        )
        .bind(run.unwrap_or(-1))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(IncidentRow {
                    id: col_i64(r, 0)?,
                    run_id: col_i64(r, 1)?,
                    node: s(r, 2)?,
                    pid: col_i64(r, 3)?,
                    tid: col_i64(r, 4)?,
                    device: col_i64(r, 5)?,
                    ts_ns: col_i64(r, 6)?,
                    size: col_i64(r, 7)?,
                    result: col_i64(r, 8)?,
                    api: s(r, 9)?,
                    live_bytes: col_i64(r, 10)?,
                    created_unix_ns: col_i64(r, 11)?,
                })
            })
            .collect()
    }

    /// Deletes raw event chunks older than `max_age_ns` (rollups, peaks and everything
    /// else stay) and records per run up to when raw events are gone. Returns the number
    /// of chunks deleted.
    pub async fn apply_retention(&self, max_age_ns: i64) -> Result<u64, StoreError> {
        let cutoff = super::now_unix_ns() - max_age_ns;
        // Old enough, and covered by a live-set checkpoint of its device (the background
        // checkpointer writes them within seconds): "live at an instant" after the
        // checkpoint stays exact, and later checkpoints never start from missing events.
        let prunable = |c: &str| {
            format!(
                "{c}.created_unix_ns < $1 AND {c}.id <= COALESCE((SELECT MAX(k.after_chunk) \
                 FROM live_checkpoints k WHERE k.run_id = {c}.run_id AND k.device = {c}.device), -1)"
            )
        };
        let mut tx = self.pool.begin().await?;
        // Remember, per run, up to when raw events are gone (timelines then read rollups).
        sqlx::query(&format!(
            "UPDATE runs SET raw_pruned_to_ns = CASE \
             WHEN raw_pruned_to_ns IS NOT NULL AND raw_pruned_to_ns > (SELECT MAX(c.ts_last) \
               FROM event_chunks c WHERE c.run_id = runs.id AND {p}) \
             THEN raw_pruned_to_ns \
             ELSE (SELECT MAX(c.ts_last) FROM event_chunks c WHERE c.run_id = runs.id AND {p}) END \
             WHERE id IN (SELECT c.run_id FROM event_chunks c WHERE {p})",
            p = prunable("c")
        ))
        .bind(cutoff)
        .execute(&mut *tx)
        .await?;
        let r = sqlx::query(&format!(
            "DELETE FROM event_chunks WHERE id IN (SELECT c.id FROM event_chunks c WHERE {})",
            prunable("c")
        ))
        .bind(cutoff)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(r.rows_affected())
    }

    /// Per run and device: live and peak bytes of the newest `limit` runs (for /metrics).
    pub async fn metric_rows(
        &self,
        limit: i64,
    ) -> Result<Vec<(i64, String, i64, i64, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT d.run_id, r.run_key, d.device, d.live_bytes, d.peak_bytes FROM run_devices d \
             JOIN runs r ON r.id = d.run_id WHERE d.run_id IN (SELECT id FROM runs ORDER BY id DESC LIMIT $1) \
             ORDER BY d.run_id, d.device",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    col_i64(r, 0)?,
                    s(r, 1)?,
                    col_i64(r, 2)?,
                    col_i64(r, 3)?,
                    col_i64(r, 4)?,
                ))
            })
            .collect()
    }
}

/// Width used by [`Store::timeline`] for a span and point count (exposed for tests).
pub fn bucket_for(span: u64, points: usize) -> (u64, Option<usize>) {
    let b = span.div_ceil(points.max(1) as u64).max(1);
    let _ = width(0);
    (b, level_for(b))
}

impl Store {
    /// The last committed batch number of a node's ingest stream (0: none yet). Lets an
    /// importer resume after what is stored instead of sending it again.
    pub async fn stream_last_seq(&self, node: &str, stream: u64) -> Result<u64, StoreError> {
        let row = sqlx::query(
            "SELECT s.last_seq FROM streams s JOIN nodes n ON n.id = s.node_id \
             WHERE n.name = $1 AND s.stream_id = $2",
        )
        .bind(node)
        .bind(stream as i64)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            Some(r) => col_i64(&r, 0)?.max(0) as u64,
            None => 0,
        })
    }

    /// The run a node stores under `run_key`, if there is one.
    pub async fn run_id_of(&self, node: &str, run_key: &str) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "SELECT r.id FROM runs r JOIN nodes n ON n.id = r.node_id \
             WHERE n.name = $1 AND r.run_key = $2",
        )
        .bind(node)
        .bind(run_key)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            Some(r) => Some(col_i64(&r, 0)?),
            None => None,
        })
    }
}
