//! Reads of nodes, runs, processes and annotations (rows read by column name), and the
//! ingest positions `memwatch import` resumes from.

use std::collections::HashMap;

use super::model::{
    AnnotationRow, AnnotationsPage, DeviceRow, NodeRow, ProcessRow, RunDetail, RunDevice, RunLite,
    RunRow, SampleRow, RUN_ANNOTATIONS_INLINE,
};
use crate::db::{now_unix_ns, Store, StoreError};

/// A client's time offset into a run, clamped to 2^62 ns (about 146 years, past any
/// recorded event) so that `t0 + offset` cannot overflow whatever the client sends.
pub(crate) fn clamp_offset(t: u64) -> u64 {
    t.min(1 << 62)
}

/// A `nodes` row.
#[derive(sqlx::FromRow)]
struct NodeHead {
    id: i64,
    name: String,
    first_seen_unix_ns: i64,
    last_seen_unix_ns: i64,
}

/// A `device_samples` row.
#[derive(sqlx::FromRow)]
struct Sample {
    device_id: Option<i64>,
    device: i64,
    memory: i64,
    ts_ns: i64,
    used_bytes: i64,
    total_bytes: i64,
    source: String,
}

/// A `runs` row with its node's name.
#[derive(sqlx::FromRow)]
struct RunHead {
    id: i64,
    node: String,
    run_key: String,
    t0_mono_ns: i64,
    wall_anchor_unix_ns: i64,
    created_unix_ns: i64,
    last_ts_ns: i64,
    event_count: i64,
    dropped_events: i64,
}

/// The columns [`RunHead`] reads, of `runs r JOIN nodes n`.
const RUN_COLS: &str = "r.id AS id, n.name AS node, r.run_key AS run_key, \
    r.t0_mono_ns AS t0_mono_ns, r.wall_anchor_unix_ns AS wall_anchor_unix_ns, \
    r.created_unix_ns AS created_unix_ns, r.last_ts_ns AS last_ts_ns, \
    r.event_count AS event_count, r.dropped_events AS dropped_events";

/// A `processes` row.
#[derive(sqlx::FromRow)]
struct Process {
    pid: i64,
    ppid: i64,
    hostname: String,
    argv: String,
    exit_code: Option<i64>,
    dropped_events: i64,
}

/// An `annotations` row with its id (the page cursor).
#[derive(sqlx::FromRow)]
struct Annotation {
    #[sqlx(flatten)]
    row: AnnotationRow,
    id: i64,
}

/// A still-running process, as read.
#[derive(sqlx::FromRow)]
struct RunningProcess {
    run_id: i64,
    run_key: String,
    pid: i64,
    argv: String,
    node: String,
}

fn memory_name(m: i64) -> &'static str {
    match m {
        0 => "vram",
        1 => "gtt",
        _ => "other",
    }
}

impl RunHead {
    fn into_run(self, mut devices: Vec<RunDevice>) -> RunRow {
        let t0 = self.t0_mono_ns;
        for d in &mut devices {
            d.peak_ts_ns = (d.peak_ts_ns - t0).max(0);
        }
        RunRow {
            id: self.id,
            node: self.node,
            run_key: self.run_key,
            t0_mono_ns: t0,
            wall_anchor_unix_ns: self.wall_anchor_unix_ns,
            created_unix_ns: self.created_unix_ns,
            duration_ns: (self.last_ts_ns - t0).max(0),
            event_count: self.event_count,
            dropped_events: self.dropped_events,
            devices,
        }
    }
}

impl Store {
    /// Node `node`'s latest sample per device and memory: (the `devices` row it is of,
    /// or `None` for a device no row described, and the sample).
    async fn samples(&self, node: i64) -> Result<Vec<(Option<i64>, SampleRow)>, StoreError> {
        let mut out = Vec::new();
        // Samples of a described device by its row (two machines' device 0 apart), then
        // those of no row by the node's index.
        for (key, filter) in [
            ("device_id", "device_id IS NOT NULL"),
            ("device", "device_id IS NULL"),
        ] {
            let rows: Vec<Sample> = sqlx::query_as(&format!(
                "SELECT s.device_id AS device_id, s.device AS device, s.memory AS memory, \
                 s.ts_ns AS ts_ns, s.used_bytes AS used_bytes, s.total_bytes AS total_bytes, \
                 s.source AS source FROM device_samples s JOIN (SELECT {key}, memory, \
                 MAX(ts_ns) AS ts FROM device_samples WHERE node_id = $1 AND {filter} \
                 GROUP BY {key}, memory) m \
                 ON s.{key} = m.{key} AND s.memory = m.memory AND s.ts_ns = m.ts \
                 WHERE s.node_id = $1 AND s.{filter} ORDER BY s.{key}, s.memory"
            ))
            .bind(node)
            .fetch_all(&self.pool)
            .await?;
            out.extend(rows.into_iter().map(|r| {
                (
                    r.device_id,
                    SampleRow {
                        device: r.device,
                        memory: memory_name(r.memory),
                        ts_ns: r.ts_ns,
                        used_bytes: r.used_bytes,
                        total_bytes: r.total_bytes,
                        source: r.source,
                    },
                )
            }));
        }
        Ok(out)
    }

    /// Nodes by name, each with its devices and their latest samples.
    pub async fn nodes(&self) -> Result<Vec<NodeRow>, StoreError> {
        let heads: Vec<NodeHead> = sqlx::query_as(
            "SELECT id, name, first_seen_unix_ns, last_seen_unix_ns FROM nodes ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        for n in heads {
            let mut devices: Vec<DeviceRow> = sqlx::query_as(
                "SELECT id, ordinal, vendor, name, total_bytes, uuid, pci_bus_id FROM devices \
                 WHERE node_id = $1 ORDER BY ordinal, id",
            )
            .bind(n.id)
            .fetch_all(&self.pool)
            .await?;
            let mut loose = Vec::new();
            for (row, smp) in self.samples(n.id).await? {
                match devices.iter_mut().find(|d| row == Some(d.id)) {
                    Some(d) => d.samples.push(smp),
                    None => loose.push(smp),
                }
            }
            out.push(NodeRow {
                id: n.id,
                name: n.name,
                first_seen_unix_ns: n.first_seen_unix_ns,
                last_seen_unix_ns: n.last_seen_unix_ns,
                devices,
                samples: loose,
            });
        }
        Ok(out)
    }

    /// Node ids by name.
    pub(crate) async fn node_ids(&self) -> Result<HashMap<String, i64>, StoreError> {
        #[derive(sqlx::FromRow)]
        struct Node {
            id: i64,
            name: String,
        }
        let rows: Vec<Node> = sqlx::query_as("SELECT id, name FROM nodes")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(|n| (n.name, n.id)).collect())
    }

    /// A run's devices with their counters (`peak_ts_ns` as stored: monotonic).
    async fn run_devices(&self, run: i64) -> Result<Vec<RunDevice>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT device, live_bytes, peak_bytes, peak_ts_ns, alloc_count, free_count, \
             failed_count FROM run_devices WHERE run_id = $1 ORDER BY device",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Runs, newest first.
    pub async fn runs(&self, limit: i64) -> Result<Vec<RunRow>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM runs r JOIN nodes n ON n.id = r.node_id \
             ORDER BY r.id DESC LIMIT $1"
        );
        let heads: Vec<RunHead> = sqlx::query_as(&sql)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        let mut out = Vec::with_capacity(heads.len());
        for h in heads {
            let devs = self.run_devices(h.id).await?;
            out.push(h.into_run(devs));
        }
        Ok(out)
    }

    async fn run_head(&self, run: i64) -> Result<Option<RunRow>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLS} FROM runs r JOIN nodes n ON n.id = r.node_id WHERE r.id = $1"
        );
        let Some(h) = sqlx::query_as::<_, RunHead>(&sql)
            .bind(run)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        let devs = self.run_devices(run).await?;
        Ok(Some(h.into_run(devs)))
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
        let rows: Vec<Annotation> = sqlx::query_as(
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
        let next_cursor = (rows.len() > limit).then(|| {
            let last = &rows[limit - 1];
            format!("{}:{}", last.row.ts_ns, last.id)
        });
        let annotations = rows.into_iter().take(limit).map(|a| a.row).collect();
        Ok(Some(AnnotationsPage {
            annotations,
            next_cursor,
        }))
    }

    /// A run with its devices, processes, first annotations and incident count.
    pub async fn run(&self, run: i64) -> Result<Option<RunDetail>, StoreError> {
        let Some(head) = self.run_head(run).await? else {
            return Ok(None);
        };
        let rows: Vec<Process> = sqlx::query_as(
            "SELECT pid, ppid, hostname, argv, exit_code, dropped_events FROM processes \
             WHERE run_id = $1 ORDER BY pid",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        let processes = rows
            .into_iter()
            .map(|p| ProcessRow {
                pid: p.pid,
                ppid: p.ppid,
                hostname: p.hostname,
                argv: serde_json::from_str(&p.argv).unwrap_or_default(),
                exit_code: p.exit_code,
                dropped_events: p.dropped_events,
            })
            .collect();
        let incidents: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM incidents WHERE run_id = $1")
            .bind(run)
            .fetch_one(&self.pool)
            .await?;
        let annotation_count: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM annotations WHERE run_id = $1")
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
            annotation_count,
            annotations_next_cursor: page.next_cursor,
            incidents,
        }))
    }

    /// The first time (ns since the run's start) an annotation reads exactly `text`.
    pub(crate) async fn first_marker(
        &self,
        run: i64,
        text: &str,
    ) -> Result<Option<u64>, StoreError> {
        let t: Option<i64> = sqlx::query_scalar(
            "SELECT a.ts_ns - r.t0_mono_ns FROM annotations a JOIN runs r ON r.id = a.run_id \
             WHERE a.run_id = $1 AND a.text = $2 ORDER BY a.ts_ns LIMIT 1",
        )
        .bind(run)
        .bind(text)
        .fetch_optional(&self.pool)
        .await?;
        Ok(t.map(|t| t.max(0) as u64))
    }

    /// Whether run `id` exists.
    pub async fn run_exists(&self, id: i64) -> Result<bool, StoreError> {
        Ok(self.run_t0(id).await?.is_some())
    }

    /// Processes still running: no recorded end, in a run whose node sent data in the
    /// last `active_ns`. (run id, run key, pid, command line, node).
    pub async fn running_processes(
        &self,
        active_ns: i64,
    ) -> Result<Vec<(i64, String, i64, String, String)>, StoreError> {
        let rows: Vec<RunningProcess> = sqlx::query_as(
            "SELECT p.run_id AS run_id, r.run_key AS run_key, p.pid AS pid, p.argv AS argv, \
             n.name AS node FROM processes p \
             JOIN runs r ON r.id = p.run_id JOIN nodes n ON n.id = r.node_id \
             WHERE p.end_ts_ns IS NULL AND p.exit_code IS NULL AND n.last_seen_unix_ns >= $1 \
             AND p.argv NOT LIKE $2 ORDER BY p.run_id DESC, p.pid LIMIT 200",
        )
        .bind(now_unix_ns() - active_ns)
        .bind(crate::codes::snapshot_argv_pattern())
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let argv = serde_json::from_str::<Vec<String>>(&r.argv)
                    .map(|v| v.join(" "))
                    .unwrap_or(r.argv);
                (r.run_id, r.run_key, r.pid, argv, r.node)
            })
            .collect())
    }

    /// The last committed batch number of a node's ingest stream (0: none yet). Lets an
    /// importer resume after what is stored instead of sending it again.
    pub async fn stream_last_seq(&self, node: &str, stream: u64) -> Result<u64, StoreError> {
        let last: Option<i64> = sqlx::query_scalar(
            "SELECT s.last_seq FROM streams s JOIN nodes n ON n.id = s.node_id \
             WHERE n.name = $1 AND s.stream_id = $2",
        )
        .bind(node)
        .bind(stream as i64)
        .fetch_optional(&self.pool)
        .await?;
        Ok(last.map_or(0, |l| l.max(0) as u64))
    }

    /// The run a node stores under `run_key`, if there is one.
    pub async fn run_id_of(&self, node: &str, run_key: &str) -> Result<Option<i64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT r.id FROM runs r JOIN nodes n ON n.id = r.node_id \
             WHERE n.name = $1 AND r.run_key = $2",
        )
        .bind(node)
        .bind(run_key)
        .fetch_optional(&self.pool)
        .await?)
    }
}

/// A run's header and per-device counters (`peak_ts_ns` relative to its start), without
/// its annotations and processes.
pub async fn run_lite(store: &Store, run: i64) -> Result<Option<RunLite>, StoreError> {
    let sql =
        format!("SELECT {RUN_COLS} FROM runs r JOIN nodes n ON n.id = r.node_id WHERE r.id = $1");
    let Some(h) = sqlx::query_as::<_, RunHead>(&sql)
        .bind(run)
        .fetch_optional(&store.pool)
        .await?
    else {
        return Ok(None);
    };
    let r = h.into_run(store.run_devices(run).await?);
    Ok(Some(RunLite {
        id: r.id,
        node: r.node,
        run_key: r.run_key,
        t0: r.t0_mono_ns,
        wall_anchor_unix_ns: r.wall_anchor_unix_ns,
        created_unix_ns: r.created_unix_ns,
        duration_ns: r.duration_ns,
        event_count: r.event_count,
        dropped_events: r.dropped_events,
        devices: r.devices,
    }))
}

/// Annotations of `run` in `[from, to)` ns since its start (at most `limit`, oldest
/// first) as (relative time, device, text), and how many the range holds in all.
pub(crate) async fn annotations_in(
    store: &Store,
    run: i64,
    t0: i64,
    from: u64,
    to: u64,
    limit: i64,
) -> Result<(Vec<(u64, i64, String)>, i64), StoreError> {
    #[derive(sqlx::FromRow)]
    struct Note {
        ts_ns: i64,
        device: i64,
        text: String,
    }
    let lo = t0.saturating_add(from.min(i64::MAX as u64) as i64);
    let hi = t0.saturating_add(to.min(i64::MAX as u64) as i64);
    let n: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM annotations WHERE run_id = $1 AND ts_ns >= $2 AND ts_ns < $3 AND {}",
        crate::codes::NOT_DATA_MARKER
    ))
    .bind(run)
    .bind(lo)
    .bind(hi)
    .fetch_one(&store.pool)
    .await?;
    let rows: Vec<Note> = sqlx::query_as(&format!(
        "SELECT ts_ns, device, text FROM annotations WHERE run_id = $1 AND ts_ns >= $2 \
         AND ts_ns < $3 AND {} ORDER BY ts_ns, id LIMIT $4",
        crate::codes::NOT_DATA_MARKER
    ))
    .bind(run)
    .bind(lo)
    .bind(hi)
    .bind(limit)
    .fetch_all(&store.pool)
    .await?;
    let v = rows
        .into_iter()
        .map(|r| ((r.ts_ns - t0).max(0) as u64, r.device, r.text))
        .collect();
    Ok((v, n))
}

/// A run's processes as the run page lists them (at most 1000).
pub(crate) async fn processes(store: &Store, run: i64) -> Result<Vec<ProcessRow>, StoreError> {
    let rows: Vec<Process> = sqlx::query_as(
        "SELECT pid, ppid, hostname, argv, exit_code, dropped_events FROM processes \
         WHERE run_id = $1 ORDER BY pid LIMIT 1000",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|p| ProcessRow {
            pid: p.pid,
            ppid: p.ppid,
            hostname: p.hostname,
            argv: serde_json::from_str(&p.argv).unwrap_or_default(),
            exit_code: p.exit_code,
            dropped_events: p.dropped_events,
        })
        .collect())
}

/// The memory of run `run`'s device `device` as its node described it (name, bytes):
/// the node device it is by identity (`super::devices::node_device`); `None` when none
/// matches, it said 0 bytes, or said less than the run's own peak there (an old
/// capture of another machine imported under the same host name, without identities,
/// pairs by ordinal with a device it was not).
pub async fn device_capacity(
    store: &Store,
    run: i64,
    device: i64,
) -> Result<Option<(String, i64)>, StoreError> {
    let Some(d) = super::devices::node_device(store, run, device).await?.0 else {
        return Ok(None);
    };
    let peak: Option<i64> =
        sqlx::query_scalar("SELECT peak_bytes FROM run_devices WHERE run_id = $1 AND device = $2")
            .bind(run)
            .bind(device)
            .fetch_optional(&store.pool)
            .await?;
    Ok(
        (d.total_bytes > 0 && d.total_bytes >= peak.unwrap_or(0))
            .then_some((d.name, d.total_bytes)),
    )
}

/// How recent a run's own last event must be (on the wall clock of its node) for it to
/// count as running: an imported recording's events are as old as the recording.
const ACTIVE_WINDOW_NS: i64 = 120_000_000_000;

/// Whether run `run` is still going: a process without an end, its node heard from
/// within a minute, and the run's own last event within [`ACTIVE_WINDOW_NS`] (so a
/// finished attach or an imported capture, which has no exit record, is not running).
pub(crate) async fn run_active(store: &Store, run: i64) -> Result<bool, StoreError> {
    let last_wall: Option<i64> = sqlx::query_scalar(
        "SELECT wall_anchor_unix_ns + (last_ts_ns - t0_mono_ns) FROM runs WHERE id = $1",
    )
    .bind(run)
    .fetch_optional(&store.pool)
    .await?;
    if last_wall.is_none_or(|w| now_unix_ns() - w >= ACTIVE_WINDOW_NS) {
        return Ok(false);
    }
    let open: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM processes WHERE run_id = $1 AND end_ts_ns IS NULL AND exit_code IS NULL \
         AND argv NOT LIKE $2",
    )
    .bind(run)
    .bind(crate::codes::snapshot_argv_pattern())
    .fetch_one(&store.pool)
    .await?;
    if open == 0 {
        return Ok(false);
    }
    let seen: Option<i64> = sqlx::query_scalar(
        "SELECT n.last_seen_unix_ns FROM runs r JOIN nodes n ON n.id = r.node_id WHERE r.id = $1",
    )
    .bind(run)
    .fetch_optional(&store.pool)
    .await?;
    Ok(seen.is_some_and(|s| now_unix_ns() - s < 60_000_000_000))
}

/// Event count and last timestamp of a run (what the live stream watches).
pub(crate) async fn run_progress(
    store: &Store,
    run: i64,
) -> Result<Option<(i64, i64)>, StoreError> {
    #[derive(sqlx::FromRow)]
    struct Progress {
        event_count: i64,
        duration_ns: i64,
    }
    let r: Option<Progress> = sqlx::query_as(
        "SELECT event_count, last_ts_ns - t0_mono_ns AS duration_ns FROM runs WHERE id = $1",
    )
    .bind(run)
    .fetch_optional(&store.pool)
    .await?;
    Ok(r.map(|p| (p.event_count, p.duration_ns)))
}
