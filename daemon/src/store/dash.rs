//! Reads and writes for the dashboard's own pages: attached XLA dumps and allocator logs
//! (migration 0004), what was live on a device at any instant (the peak snapshot, or a
//! replay of the stored raw events up to that instant), the grouping of those
//! allocations (with an O(log n) per-allocation annotation lookup), and device-sample
//! history for sparklines. All SQL is parameterised.

use std::collections::{BTreeMap, HashMap};

use memwatch_wire::{Api, MemKind};
use sqlx::Row;

use super::query::{Group, Peak, PeakAlloc};
use super::snapshot::{self, LiveAlloc};
use super::{col_i64, now_unix_ns, Store, StoreError};

/// One module of an attached dump, to store.
pub struct NewModule {
    pub name: String,
    pub argument_bytes: i64,
    pub output_bytes: i64,
    pub temp_bytes: i64,
    pub peak_bytes: Option<i64>,
    pub total_allocation_bytes: i64,
    /// `memwatch_analysis::xla::ModuleReport` as JSON.
    pub report_json: String,
}

impl NewModule {
    /// The row for one analysed module (`memwatch_analysis::xla::ModuleReport`).
    pub fn from_report(m: &memwatch_analysis::xla::ModuleReport) -> Result<Self, StoreError> {
        Ok(NewModule {
            name: m.name.clone(),
            argument_bytes: m.argument_bytes as i64,
            output_bytes: m.output_bytes as i64,
            temp_bytes: m.temp_bytes as i64,
            peak_bytes: m.peak_bytes.map(|b| b as i64),
            total_allocation_bytes: m.total_allocation_bytes as i64,
            report_json: serde_json::to_string(m)
                .map_err(|e| StoreError::Corrupt(format!("module {}: {e}", m.name)))?,
        })
    }
}

/// A stored module (without its report).
#[derive(Debug, Clone, serde::Serialize)]
pub struct DumpModuleRow {
    pub id: i64,
    pub dump_id: i64,
    pub run_id: Option<i64>,
    pub source: String,
    pub name: String,
    pub argument_bytes: i64,
    pub output_bytes: i64,
    pub temp_bytes: i64,
    pub peak_bytes: Option<i64>,
    pub total_allocation_bytes: i64,
}

/// A stored log (without its text).
#[derive(Debug, Clone, serde::Serialize)]
pub struct IncidentLogRow {
    pub id: i64,
    pub run_id: Option<i64>,
    pub dump_id: Option<i64>,
    pub source: String,
    pub mem_fraction: Option<f64>,
    pub created_unix_ns: i64,
    pub bytes: i64,
}

/// A device-sample point: (wall-clock ns, used bytes, total bytes).
pub type SamplePoint = (i64, i64, i64);

const MODULE_COLS: &str = "m.id, m.dump_id, d.run_id, d.source, m.name, m.argument_bytes, \
     m.output_bytes, m.temp_bytes, m.peak_bytes, m.total_allocation_bytes";

fn module_row(r: &sqlx::any::AnyRow) -> Result<DumpModuleRow, StoreError> {
    Ok(DumpModuleRow {
        id: col_i64(r, 0)?,
        dump_id: col_i64(r, 1)?,
        run_id: r.try_get::<Option<i64>, _>(2)?,
        source: r.try_get::<String, _>(3)?,
        name: r.try_get::<String, _>(4)?,
        argument_bytes: col_i64(r, 5)?,
        output_bytes: col_i64(r, 6)?,
        temp_bytes: col_i64(r, 7)?,
        peak_bytes: r.try_get::<Option<i64>, _>(8)?,
        total_allocation_bytes: col_i64(r, 9)?,
    })
}

impl Store {
    /// Stores an analysed dump and its modules in one transaction; returns the dump id.
    pub async fn insert_xla_dump(
        &self,
        run_id: Option<i64>,
        source: &str,
        modules: &[NewModule],
    ) -> Result<i64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query(
            "INSERT INTO xla_dumps (run_id, source, created_unix_ns) VALUES ($1, $2, $3) RETURNING id",
        )
        .bind(run_id)
        .bind(source)
        .bind(now_unix_ns())
        .fetch_one(&mut *tx)
        .await?;
        let id = col_i64(&row, 0)?;
        insert_modules(&mut tx, id, modules).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Attaches a dump to run `run`: the dump from the same `source` attached to that run
    /// before keeps its id and has its modules replaced (so attaching twice does not count
    /// a module twice); returns the dump id. The run's PJRT attribution
    /// (`store::pjrt::modules`) and the XLA module page both read these rows.
    pub async fn attach_run_dump(
        &self,
        run: i64,
        source: &str,
        modules: &[NewModule],
    ) -> Result<i64, StoreError> {
        let old =
            sqlx::query("SELECT id FROM xla_dumps WHERE run_id = $1 AND source = $2 ORDER BY id")
                .bind(run)
                .bind(source)
                .fetch_optional(&self.pool)
                .await?;
        let Some(old) = old else {
            return self.insert_xla_dump(Some(run), source, modules).await;
        };
        let id = col_i64(&old, 0)?;
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM xla_dump_modules WHERE dump_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE xla_dumps SET created_unix_ns = $1 WHERE id = $2")
            .bind(now_unix_ns())
            .bind(id)
            .execute(&mut *tx)
            .await?;
        insert_modules(&mut tx, id, modules).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Stores a log verbatim; returns its id.
    pub async fn insert_incident_log(
        &self,
        run_id: Option<i64>,
        dump_id: Option<i64>,
        source: &str,
        text: &str,
        mem_fraction: Option<f64>,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "INSERT INTO incident_logs (run_id, dump_id, source, log_text, mem_fraction_ppm, \
             created_unix_ns) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(run_id)
        .bind(dump_id)
        .bind(source)
        .bind(text)
        .bind(mem_fraction.map(|f| (f * 1e6).round() as i64))
        .bind(now_unix_ns())
        .fetch_one(&self.pool)
        .await?;
        col_i64(&row, 0)
    }

    /// Whether run `id` exists.
    pub async fn run_exists(&self, id: i64) -> Result<bool, StoreError> {
        Ok(sqlx::query("SELECT id FROM runs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .is_some())
    }

    /// Stored logs, newest first.
    pub async fn incident_logs(&self) -> Result<Vec<IncidentLogRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {LOG_COLS} FROM incident_logs ORDER BY id DESC LIMIT 1000"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(log_row).collect()
    }

    /// One stored log and its text.
    pub async fn incident_log(
        &self,
        id: i64,
    ) -> Result<Option<(IncidentLogRow, String)>, StoreError> {
        let Some(r) = sqlx::query(&format!(
            "SELECT {LOG_COLS}, log_text FROM incident_logs WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        Ok(Some((log_row(&r)?, r.try_get::<String, _>(7)?)))
    }

    /// Stored modules, newest dump first (of one dump when `dump` is given).
    pub async fn dump_modules(&self, dump: Option<i64>) -> Result<Vec<DumpModuleRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {MODULE_COLS} FROM xla_dump_modules m JOIN xla_dumps d ON d.id = m.dump_id \
             WHERE ($1 < 0 OR m.dump_id = $1) ORDER BY m.dump_id DESC, m.id LIMIT 2000"
        ))
        .bind(dump.unwrap_or(-1))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(module_row).collect()
    }

    /// One module and its report JSON.
    pub async fn dump_module(
        &self,
        id: i64,
    ) -> Result<Option<(DumpModuleRow, String)>, StoreError> {
        let Some(r) = sqlx::query(&format!(
            "SELECT {MODULE_COLS}, m.report_json FROM xla_dump_modules m \
             JOIN xla_dumps d ON d.id = m.dump_id WHERE m.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        Ok(Some((module_row(&r)?, r.try_get::<String, _>(10)?)))
    }

    /// The report JSON of every module of a dump, in id order.
    pub async fn dump_reports(&self, dump: i64) -> Result<Vec<String>, StoreError> {
        let rows =
            sqlx::query("SELECT report_json FROM xla_dump_modules WHERE dump_id = $1 ORDER BY id")
                .bind(dump)
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<String, _>(0)?))
            .collect()
    }

    /// Device samples of one node/device/memory with a sample time (`ts_ns`, the
    /// node's clock) at or after `since_ts_ns`, oldest first, reduced to at most
    /// `points` by keeping each bucket's highest use. (ts_ns, used, total).
    pub async fn sample_history(
        &self,
        node: i64,
        device: i64,
        memory: i64,
        since_ts_ns: i64,
        points: usize,
    ) -> Result<Vec<SamplePoint>, StoreError> {
        let rows = sqlx::query(
            "SELECT ts_ns, used_bytes, total_bytes FROM device_samples \
             WHERE node_id = $1 AND device = $2 AND memory = $3 AND ts_ns >= $4 \
             ORDER BY ts_ns LIMIT 100000",
        )
        .bind(node)
        .bind(device)
        .bind(memory)
        .bind(since_ts_ns)
        .fetch_all(&self.pool)
        .await?;
        let v = rows
            .iter()
            .map(|r| Ok((col_i64(r, 0)?, col_i64(r, 1)?, col_i64(r, 2)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(reduce_max(v, points))
    }

    /// The first time (ns since the run's start) an annotation reads exactly `text`.
    pub async fn first_marker(&self, run: i64, text: &str) -> Result<Option<u64>, StoreError> {
        let r = sqlx::query(
            "SELECT a.ts_ns - r.t0_mono_ns FROM annotations a JOIN runs r ON r.id = a.run_id \
             WHERE a.run_id = $1 AND a.text = $2 ORDER BY a.ts_ns LIMIT 1",
        )
        .bind(run)
        .bind(text)
        .fetch_optional(&self.pool)
        .await?;
        r.map(|r| col_i64(&r, 0).map(|t| t.max(0) as u64))
            .transpose()
    }

    /// Device-level used bytes sampled on a run's node for `device`'s `memory` (0 VRAM,
    /// 1 GTT) over `[from, to)` ns since the run's start, bucketed into `n` buckets of
    /// `bucket_ns` (each bucket's min/max/last; a bucket without a sample carries the
    /// previous value). Empty when the node sent no sample in or before the range.
    pub async fn run_samples(
        &self,
        run: i64,
        device: i64,
        memory: i64,
        from: u64,
        bucket_ns: u64,
        n: usize,
    ) -> Result<Vec<super::query::Point>, StoreError> {
        let Some(r) = sqlx::query("SELECT node_id, t0_mono_ns FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(Vec::new());
        };
        let (node, t0) = (col_i64(&r, 0)?, col_i64(&r, 1)?);
        let bucket_ns = bucket_ns.max(1);
        let lo = t0.saturating_add(from.min(i64::MAX as u64) as i64);
        let hi = lo.saturating_add(bucket_ns.saturating_mul(n as u64).min(i64::MAX as u64) as i64);
        let before = sqlx::query(
            "SELECT used_bytes FROM device_samples WHERE node_id = $1 AND device = $2 \
             AND memory = $3 AND ts_ns < $4 AND ts_ns >= $5 ORDER BY ts_ns DESC LIMIT 1",
        )
        .bind(node)
        .bind(device)
        .bind(memory)
        .bind(lo)
        // A sample older than 10 s says nothing about the range (the agent samples ~1/s).
        .bind(lo.saturating_sub(10_000_000_000))
        .fetch_optional(&self.pool)
        .await?;
        let rows = sqlx::query(
            "SELECT ts_ns, used_bytes FROM device_samples WHERE node_id = $1 AND device = $2 \
             AND memory = $3 AND ts_ns >= $4 AND ts_ns < $5 ORDER BY ts_ns LIMIT 200000",
        )
        .bind(node)
        .bind(device)
        .bind(memory)
        .bind(lo)
        .bind(hi)
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() && before.is_none() {
            return Ok(Vec::new());
        }
        let mut carry = match &before {
            Some(b) => Some(col_i64(b, 0)?),
            None => None,
        };
        let mut out = Vec::with_capacity(n);
        let mut it = rows.iter().peekable();
        for i in 0..n {
            let end = lo.saturating_add(((i as u64 + 1) * bucket_ns).min(i64::MAX as u64) as i64);
            let mut cur: Option<(i64, i64)> = carry.map(|c| (c, c));
            while let Some(r) = it.peek() {
                if col_i64(r, 0)? >= end {
                    break;
                }
                let v = col_i64(r, 1)?;
                cur = Some(cur.map_or((v, v), |(a, b)| (a.min(v), b.max(v))));
                carry = Some(v);
                it.next();
            }
            if let (Some((mn, mx)), Some(last)) = (cur, carry) {
                out.push(super::query::Point {
                    t_ns: from + i as u64 * bucket_ns,
                    min: mn,
                    max: mx,
                    last,
                });
            }
        }
        Ok(out)
    }

    /// Node ids by name.
    pub async fn node_ids(&self) -> Result<HashMap<String, i64>, StoreError> {
        let rows = sqlx::query("SELECT id, name FROM nodes")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get::<String, _>(1)?, col_i64(r, 0)?)))
            .collect()
    }

    /// Processes still running: no recorded end, in a run that received events in the
    /// last `active_ns`. (run id, run key, pid, argv, node).
    pub async fn running_processes(
        &self,
        active_ns: i64,
    ) -> Result<Vec<(i64, String, i64, String, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT p.run_id, r.run_key, p.pid, p.argv, n.name, r.created_unix_ns FROM processes p \
             JOIN runs r ON r.id = p.run_id JOIN nodes n ON n.id = r.node_id \
             WHERE p.end_ts_ns IS NULL AND n.last_seen_unix_ns >= $1 ORDER BY p.run_id DESC, p.pid LIMIT 200",
        )
        .bind(now_unix_ns() - active_ns)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let argv = r.try_get::<String, _>(3)?;
                Ok((
                    col_i64(r, 0)?,
                    r.try_get::<String, _>(1)?,
                    col_i64(r, 2)?,
                    serde_json::from_str::<Vec<String>>(&argv)
                        .map(|v| v.join(" "))
                        .unwrap_or(argv),
                    r.try_get::<String, _>(4)?,
                ))
            })
            .collect()
    }

    /// What was live on `device` at `at` ns after the run's start (`None`: at the peak,
    /// the same as [`Store::peak`]), grouped; `top` largest allocations listed. At an
    /// instant, the run's raw events up to it are replayed; where retention deleted them,
    /// the answer is the nearest exact state before (a checkpoint, the peak snapshot or
    /// the run's start) and `peak_ts_ns` says which instant that is. `Ok(None)` for a run
    /// or snapshot that does not exist.
    pub async fn live_at(
        &self,
        run: i64,
        device: i64,
        at: Option<u64>,
        top: usize,
    ) -> Result<Option<Peak>, StoreError> {
        let Some(t) = at else {
            return self.peak(run, device, top).await;
        };
        let Some(r) = sqlx::query("SELECT t0_mono_ns, raw_pruned_to_ns FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        let t0 = col_i64(&r, 0)?;
        let pruned_to: Option<i64> = r.try_get(1)?;
        // Start from the peak snapshot when the instant is after the peak (only the
        // events between them are replayed), else from the run's start.
        let snap = sqlx::query(
            "SELECT peak_ts_ns, allocs FROM peak_snapshots WHERE run_id = $1 AND device = $2",
        )
        .bind(run)
        .bind(device)
        .fetch_optional(&self.pool)
        .await?;
        let start = match snap {
            Some(row) if col_i64(&row, 0)? <= t0.saturating_add(t.min(i64::MAX as u64) as i64) => {
                let blob: Vec<u8> = row.try_get(1)?;
                Some((col_i64(&row, 0)?, snapshot::decode(&blob)?))
            }
            _ => None,
        };
        self.extend_checkpoints(run, device).await?;
        let (allocs, as_of) = self
            .replay_live(run, device, t0, t, start, pruned_to)
            .await?;
        let bytes = allocs.iter().map(|a| a.size as i64).sum();
        let ts = (as_of - t0).max(0);
        let notes = self.notes_for(run, &allocs).await?;
        let allocs = allocs.into_iter().zip(notes).collect();
        Ok(Some(group_live(run, device, bytes, ts, t0, allocs, top)))
    }

    /// The annotation in force for each allocation (the pid's latest at or before the
    /// allocation). Looks up only the annotation intervals that hold live allocations
    /// (two indexed queries per interval), so a run with hundreds of thousands of markers
    /// is not read whole; falls back to reading them all when the allocations are spread
    /// over more than [`NOTE_QUERY_BUDGET`] / 2 intervals.
    pub(super) async fn notes_for(
        &self,
        run: i64,
        allocs: &[LiveAlloc],
    ) -> Result<Vec<Option<std::sync::Arc<str>>>, StoreError> {
        let mut idx: Vec<usize> = (0..allocs.len()).collect();
        idx.sort_by_key(|&i| (allocs[i].pid, allocs[i].ts_ns));
        let mut out = vec![None; allocs.len()];
        // (pid, interval start, interval end (exclusive), the note in force there)
        let mut cur: Option<(u32, i64, i64, Option<std::sync::Arc<str>>)> = None;
        let mut queries = 0usize;
        for i in idx {
            let a = &allocs[i];
            let ts = a.ts_ns.min(i64::MAX as u64) as i64;
            let hit = matches!(&cur, Some((p, lo, hi, _)) if *p == a.pid && ts >= *lo && ts < *hi);
            if !hit {
                if queries >= NOTE_QUERY_BUDGET {
                    let notes = self.notes_by_pid(run).await?;
                    return Ok(allocs
                        .iter()
                        .map(|a| note_for(&notes, a.pid, a.ts_ns).map(std::sync::Arc::from))
                        .collect());
                }
                queries += 2;
                let prev = sqlx::query(
                    "SELECT ts_ns, text FROM annotations WHERE run_id = $1 AND pid = $2 \
                     AND ts_ns <= $3 ORDER BY ts_ns DESC, id DESC LIMIT 1",
                )
                .bind(run)
                .bind(i64::from(a.pid))
                .bind(ts)
                .fetch_optional(&self.pool)
                .await?;
                let next = sqlx::query(
                    "SELECT ts_ns FROM annotations WHERE run_id = $1 AND pid = $2 \
                     AND ts_ns > $3 ORDER BY ts_ns LIMIT 1",
                )
                .bind(run)
                .bind(i64::from(a.pid))
                .bind(ts)
                .fetch_optional(&self.pool)
                .await?;
                let (lo, note) = match &prev {
                    Some(r) => (
                        col_i64(r, 0)?,
                        Some(std::sync::Arc::from(r.try_get::<String, _>(1)?)),
                    ),
                    None => (i64::MIN, None),
                };
                let hi = match &next {
                    Some(r) => col_i64(r, 0)?,
                    None => i64::MAX,
                };
                cur = Some((a.pid, lo, hi, note));
            }
            out[i] = cur.as_ref().and_then(|c| c.3.clone());
        }
        Ok(out)
    }

    /// A run's annotations per pid, sorted by time: (ts, text).
    async fn notes_by_pid(&self, run: i64) -> Result<Notes, StoreError> {
        let rows = sqlx::query(
            "SELECT pid, ts_ns, text FROM annotations WHERE run_id = $1 ORDER BY ts_ns, id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        let mut m: Notes = HashMap::new();
        for r in &rows {
            m.entry(col_i64(r, 0)? as u32)
                .or_default()
                .push((col_i64(r, 1)? as u64, r.try_get::<String, _>(2)?));
        }
        Ok(m)
    }
}

/// Most note lookups [`Store::live_at`] makes before reading all annotations instead.
pub const NOTE_QUERY_BUDGET: usize = 2000;

/// Annotations per pid, in time order.
pub type Notes = HashMap<u32, Vec<(u64, String)>>;

/// Keeps at most `points` samples: per equal-count bucket, the one with the most use.
pub fn reduce_max(v: Vec<SamplePoint>, points: usize) -> Vec<SamplePoint> {
    let points = points.max(1);
    if v.len() <= points {
        return v;
    }
    let per = v.len().div_ceil(points);
    v.chunks(per)
        .filter_map(|c| c.iter().max_by_key(|p| p.1).copied())
        .collect()
}

/// The latest annotation of `pid` at or before `ts` (binary search).
pub fn note_for(notes: &Notes, pid: u32, ts: u64) -> Option<&str> {
    let v = notes.get(&pid)?;
    let i = v.partition_point(|(t, _)| *t <= ts);
    i.checked_sub(1).map(|i| v[i].1.as_str())
}

/// The columns [`log_row`] reads, in its order.
const LOG_COLS: &str = "id, run_id, dump_id, source, mem_fraction_ppm, created_unix_ns, \
     CAST(LENGTH(log_text) AS BIGINT)";

fn log_row(r: &sqlx::any::AnyRow) -> Result<IncidentLogRow, StoreError> {
    Ok(IncidentLogRow {
        id: col_i64(r, 0)?,
        run_id: r.try_get::<Option<i64>, _>(1)?,
        dump_id: r.try_get::<Option<i64>, _>(2)?,
        source: r.try_get::<String, _>(3)?,
        mem_fraction: r.try_get::<Option<i64>, _>(4)?.map(|p| p as f64 / 1e6),
        created_unix_ns: col_i64(r, 5)?,
        bytes: col_i64(r, 6)?,
    })
}

/// Groups live allocations by size class, kind, thread and annotation.
#[allow(clippy::too_many_arguments)]
pub(super) fn group_live(
    run: i64,
    device: i64,
    bytes: i64,
    ts: i64,
    t0: i64,
    mut allocs: Vec<(LiveAlloc, Option<std::sync::Arc<str>>)>,
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
        add(by_kind
            .entry(MemKind::from_u8(a.mem_kind).map_or("unknown", MemKind::name))
            .or_default());
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
            api: Api::from_u16(a.api).name(),
            mem_kind: MemKind::from_u8(a.mem_kind).map_or("unknown", MemKind::name),
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

/// Inserts `modules` as the modules of dump `dump_id`.
async fn insert_modules(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    dump_id: i64,
    modules: &[NewModule],
) -> Result<(), StoreError> {
    for m in modules {
        sqlx::query(
            "INSERT INTO xla_dump_modules (dump_id, name, argument_bytes, output_bytes, \
             temp_bytes, peak_bytes, total_allocation_bytes, report_json) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(dump_id)
        .bind(&m.name)
        .bind(m.argument_bytes)
        .bind(m.output_bytes)
        .bind(m.temp_bytes)
        .bind(m.peak_bytes)
        .bind(m.total_allocation_bytes)
        .bind(&m.report_json)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
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

    #[test]
    fn reduce_keeps_the_highest_use() {
        let v: Vec<SamplePoint> = (0..1000)
            .map(|i| (i, if i == 777 { 99 } else { 1 }, 100))
            .collect();
        let r = reduce_max(v, 100);
        assert_eq!(r.len(), 100);
        assert!(r.iter().any(|p| p.1 == 99));
    }
}
