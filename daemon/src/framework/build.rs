//! Builds a run's framework view from the stored records: sweeps the PJRT tables of
//! each device in time order (buffer creations and frees, allocator samples, executions)
//! or, for a PyTorch snapshot run, its `torch:alloc` / `torch:free` block events, through
//! [`Rollups`], and replaces the run's `framework_rollups`, `framework_producers` and
//! `framework_progress` rows in one transaction. Reads go window by window (bounded
//! memory whatever the run's size); the rows written are bounded by the base level.

use std::collections::HashMap;

use memwatch_analysis::torch::records::parse_stack_marker;
use memwatch_analysis::torch::stacks::{site_of_frames, UNKNOWN_SITE};
use memwatch_wire::{Api, ApiFamily, EventKind};

use super::rollup::{base_level, Rollups, Row};
use super::series;
use crate::codes;
use crate::db::{chunk, Store, StoreError};

/// What a build did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Built {
    /// Devices with framework records.
    pub devices: usize,
    /// Rollup rows written.
    pub rows: usize,
    /// Source records swept.
    pub records: u64,
}

#[derive(sqlx::FromRow)]
struct RunHead {
    t0_mono_ns: i64,
    last_ts_ns: i64,
    event_count: i64,
}

/// Names of the framework view's producers (executables, "host transfer", "device
/// copy"), numbered in order of first appearance.
#[derive(Default)]
struct Producers {
    names: Vec<String>,
    by_name: HashMap<String, i64>,
    exes: HashMap<(i64, i64), String>,
}

impl Producers {
    fn idx(&mut self, name: &str) -> i64 {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let i = self.names.len() as i64;
        self.names.push(name.to_string());
        self.by_name.insert(name.to_string(), i);
        i
    }

    fn exe(&mut self, pid: i64, handle: i64) -> i64 {
        let name = self
            .exes
            .get(&(pid, handle))
            .cloned()
            .unwrap_or_else(|| format!("executable {handle:#x}"));
        self.idx(&name)
    }

    fn of_buffer(&mut self, pid: i64, api: i64, producer: i64) -> i64 {
        match codes::api(api as u16) {
            Api::PjrtExecuteOutput => self.exe(pid, producer),
            Api::PjrtBufferFromHostBuffer => self.idx("host transfer"),
            _ => self.idx("device copy"),
        }
    }
}

/// One change in a device's sweep.
enum Change {
    Create {
        size: i64,
        who: i64,
    },
    Free {
        size: i64,
        who: i64,
    },
    Sample {
        pid: i64,
        in_use: i64,
        pool: i64,
        limit: i64,
    },
    Execute {
        who: i64,
        busy: i64,
    },
}

/// Rebuilds the framework view of `run` (every device). Takes the run's build lock, so a
/// page that builds on demand and the background builder never interleave.
pub async fn build_run(store: &Store, run: i64) -> Result<Built, StoreError> {
    let lock = store.checkpoint_locks.of(run, i64::MIN);
    let _held = lock.lock().await;
    let Some(head) = sqlx::query_as::<_, RunHead>(
        "SELECT t0_mono_ns, last_ts_ns, event_count FROM runs WHERE id = $1",
    )
    .bind(run)
    .fetch_optional(&store.pool)
    .await?
    else {
        return Ok(Built::default());
    };
    let devices: Vec<i64> =
        sqlx::query_scalar("SELECT device FROM run_devices WHERE run_id = $1 ORDER BY device")
            .bind(run)
            .fetch_all(&store.pool)
            .await?;
    let mut producers = Producers::default();
    let exes: Vec<(i64, i64, String)> =
        sqlx::query_as("SELECT pid, handle, name FROM pjrt_executables WHERE run_id = $1")
            .bind(run)
            .fetch_all(&store.pool)
            .await?;
    for (pid, handle, name) in exes {
        producers.exes.insert((pid, handle), name);
    }
    let snapshot: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM processes WHERE run_id = $1 AND argv LIKE $2")
            .bind(run)
            .bind(codes::snapshot_argv_pattern())
            .fetch_one(&store.pool)
            .await?;
    let duration = (head.last_ts_ns - head.t0_mono_ns).max(0) as u64 + 1;
    let base = base_level(duration);
    let mut built = Built::default();
    let mut per_device: Vec<(i64, Vec<Row>)> = Vec::new();
    let mut sites: Option<Vec<i64>> = None;
    for &device in &devices {
        let mut r = Rollups::new(base, duration);
        let n = if snapshot > 0 {
            if sites.is_none() {
                sites = Some(torch_sites(store, run, &mut producers).await?);
            }
            let sites = sites.as_ref().map_or(&[][..], Vec::as_slice);
            sweep_torch(store, run, device, head.t0_mono_ns, sites, &mut r).await?
        } else {
            sweep_pjrt(store, run, device, &head, &mut producers, &mut r).await?
        };
        built.records += n;
        if n > 0 {
            built.devices += 1;
            let rows = r.finish();
            built.rows += rows.len();
            per_device.push((device, rows));
        } else {
            per_device.push((device, Vec::new()));
        }
    }
    let open: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM processes WHERE run_id = $1 AND end_ts_ns IS NULL AND exit_code IS NULL",
    )
    .bind(run)
    .fetch_one(&store.pool)
    .await?;
    let mut tx = store.pool.begin().await?;
    for table in [
        "framework_rollups",
        "framework_producers",
        "framework_progress",
    ] {
        sqlx::query(&format!("DELETE FROM {table} WHERE run_id = $1"))
            .bind(run)
            .execute(&mut *tx)
            .await?;
    }
    for (i, name) in producers.names.iter().enumerate() {
        sqlx::query("INSERT INTO framework_producers (run_id, idx, name) VALUES ($1, $2, $3)")
            .bind(run)
            .bind(i as i64)
            .bind(name)
            .execute(&mut *tx)
            .await?;
    }
    for (device, rows) in &per_device {
        for batch in rows.chunks(200) {
            let mut q = String::from(
                "INSERT INTO framework_rollups (run_id, device, series, level, bucket, lo, hi, last) VALUES ",
            );
            for k in 0..batch.len() {
                let p = k * 8;
                if k > 0 {
                    q.push(',');
                }
                q.push_str(&format!(
                    "(${},${},${},${},${},${},${},${})",
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4,
                    p + 5,
                    p + 6,
                    p + 7,
                    p + 8
                ));
            }
            let mut query = sqlx::query(&q);
            for x in batch {
                query = query
                    .bind(run)
                    .bind(*device)
                    .bind(x.series)
                    .bind(x.level)
                    .bind(x.bucket)
                    .bind(x.lo)
                    .bind(x.hi)
                    .bind(x.last);
            }
            query.execute(&mut *tx).await?;
        }
        // base_level -1: the device has no framework records.
        let level = if rows.is_empty() { -1 } else { base as i64 };
        sqlx::query(
            "INSERT INTO framework_progress (run_id, device, base_level, swept_to_ns, final, state) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(run)
        .bind(*device)
        .bind(level)
        .bind(head.last_ts_ns)
        .bind(i64::from(open == 0))
        .bind(format!("{{\"event_count\":{}}}", head.event_count))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(built)
}

/// A device's PJRT buffers made in `[from, to)`: (ts, size, pid, api, producer).
const CREATED_IN: &str = "SELECT ts_ns, size, pid, api, producer FROM pjrt_buffers \
     WHERE run_id = $1 AND device = $2 AND ts_ns >= $3 AND ts_ns < $4";
/// A device's PJRT buffers freed in `[from, to)`: (freed ts, size, pid, api, producer).
const FREED_IN: &str = "SELECT freed_ts_ns, size, pid, api, producer FROM pjrt_buffers \
     WHERE run_id = $1 AND device = $2 AND freed_ts_ns >= $3 AND freed_ts_ns < $4";

/// Runs [`CREATED_IN`] or [`FREED_IN`].
async fn buffers_in(
    store: &Store,
    sql: &'static str,
    run: i64,
    device: i64,
    from: i64,
    to: i64,
) -> Result<Vec<(i64, i64, i64, i64, i64)>, StoreError> {
    Ok(sqlx::query_as(sql)
        .bind(run)
        .bind(device)
        .bind(from)
        .bind(to)
        .fetch_all(&store.pool)
        .await?)
}

/// Rows read per window at most before the next window is made smaller.
const WINDOW_ROWS: usize = 1 << 20;

async fn sweep_pjrt(
    store: &Store,
    run: i64,
    device: i64,
    head: &RunHead,
    producers: &mut Producers,
    r: &mut Rollups,
) -> Result<u64, StoreError> {
    let first: Option<i64> = sqlx::query_scalar(
        "SELECT MIN(t) FROM (SELECT MIN(ts_ns) AS t FROM pjrt_buffers WHERE run_id = $1 AND device = $2 \
         UNION ALL SELECT MIN(ts_ns) FROM pjrt_memory_stats WHERE run_id = $1 AND device = $2 \
         UNION ALL SELECT MIN(start_ns) FROM pjrt_executions WHERE run_id = $1 AND device = $2) m",
    )
    .bind(run)
    .bind(device)
    .fetch_one(&store.pool)
    .await?;
    let Some(mut from) = first else {
        return Ok(0);
    };
    let last: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(t), 0) FROM (SELECT MAX(ts_ns) AS t FROM pjrt_buffers WHERE run_id = $1 AND device = $2 \
         UNION ALL SELECT MAX(freed_ts_ns) FROM pjrt_buffers WHERE run_id = $1 AND device = $2 \
         UNION ALL SELECT MAX(ts_ns) FROM pjrt_memory_stats WHERE run_id = $1 AND device = $2 \
         UNION ALL SELECT MAX(start_ns) FROM pjrt_executions WHERE run_id = $1 AND device = $2) m",
    )
    .bind(run)
    .bind(device)
    .fetch_one(&store.pool)
    .await?;
    let t0 = head.t0_mono_ns;
    let mut span: i64 = 1 << 30;
    let mut records = 0u64;
    let mut pids: HashMap<i64, (i64, i64, i64)> = HashMap::new();
    let mut sum = (0i64, 0i64, 0i64);
    while from <= last {
        let to = from.saturating_add(span);
        let mut changes: Vec<(i64, u8, Change)> = Vec::new();
        let created = buffers_in(store, CREATED_IN, run, device, from, to).await?;
        for (ts, size, pid, api, producer) in created {
            let who = producers.of_buffer(pid, api, producer);
            changes.push((ts, 0, Change::Create { size, who }));
        }
        let freed = buffers_in(store, FREED_IN, run, device, from, to).await?;
        for (ts, size, pid, api, producer) in freed {
            let who = producers.of_buffer(pid, api, producer);
            changes.push((ts, 2, Change::Free { size, who }));
        }
        let samples: Vec<(i64, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT ts_ns, pid, bytes_in_use, pool_bytes, bytes_limit FROM pjrt_memory_stats \
             WHERE run_id = $1 AND device = $2 AND ts_ns >= $3 AND ts_ns < $4",
        )
        .bind(run)
        .bind(device)
        .bind(from)
        .bind(to)
        .fetch_all(&store.pool)
        .await?;
        for (ts, pid, in_use, pool, limit) in samples {
            changes.push((
                ts,
                1,
                Change::Sample {
                    pid,
                    in_use,
                    pool,
                    limit,
                },
            ));
        }
        let execs: Vec<(i64, i64, i64, i64, Option<i64>)> = sqlx::query_as(
            "SELECT start_ns, pid, handle, call_ns, complete_ns FROM pjrt_executions \
             WHERE run_id = $1 AND device = $2 AND start_ns >= $3 AND start_ns < $4",
        )
        .bind(run)
        .bind(device)
        .bind(from)
        .bind(to)
        .fetch_all(&store.pool)
        .await?;
        for (ts, pid, handle, call_ns, complete) in execs {
            let who = producers.exe(pid, handle);
            let busy = complete.map_or(call_ns, |c| (c - ts).max(call_ns));
            changes.push((ts, 1, Change::Execute { who, busy }));
        }
        // At one instant creations go first, so a peak that lasts no time still shows.
        changes.sort_by_key(|c| (c.0, c.1));
        records += changes.len() as u64;
        let n = changes.len();
        for (ts, _, c) in changes {
            let t = (ts - t0).max(0) as u64;
            match c {
                Change::Create { size, who } => {
                    r.add(series::LIVE_BUFFERS, t, size);
                    r.add(series::PRODUCER_LIVE + who, t, size);
                }
                Change::Free { size, who } => {
                    r.add(series::LIVE_BUFFERS, t, -size);
                    r.add(series::PRODUCER_LIVE + who, t, -size);
                }
                Change::Sample {
                    pid,
                    in_use,
                    pool,
                    limit,
                } => {
                    // The device's figures are every process's last sample summed: kept
                    // as a running sum (a sample replaces its process's last one).
                    let old = pids.insert(pid, (in_use, pool, limit)).unwrap_or_default();
                    sum = (
                        sum.0 - old.0 + in_use,
                        sum.1 - old.1 + pool,
                        sum.2 - old.2 + limit,
                    );
                    r.set(series::of_process(pid, series::PROCESS_IN_USE), t, in_use);
                    r.set(series::of_process(pid, series::PROCESS_POOL), t, pool);
                    r.set(series::of_process(pid, series::PROCESS_LIMIT), t, limit);
                    r.set(series::IN_USE, t, sum.0);
                    r.set(series::POOL, t, sum.1);
                    r.set(series::LIMIT, t, sum.2);
                }
                Change::Execute { who, busy } => {
                    r.count(series::EXECUTIONS, t, busy);
                    r.count(series::PRODUCER_EXECS + who, t, busy);
                }
            }
        }
        from = to;
        if n > WINDOW_ROWS {
            span = (span / 2).max(1 << 16);
        } else if n < WINDOW_ROWS / 8 {
            span = span.saturating_mul(2).min(1 << 40);
        }
    }
    Ok(records)
}

/// Chunks read per query in the PyTorch sweep.
const CHUNK_PAGE: i64 = 64;

/// A PyTorch snapshot run's stacks as producers: the producer index of each stack
/// number (its `torch.stack N` marker), named by the stack's site (the Python line
/// reports group by; stacks of one site share it); the last stands for blocks without
/// a stack, named as the reports name them.
async fn torch_sites(
    store: &Store,
    run: i64,
    producers: &mut Producers,
) -> Result<Vec<i64>, StoreError> {
    let texts: Vec<String> = sqlx::query_scalar(
        "SELECT text FROM annotations WHERE run_id = $1 AND text LIKE 'torch.stack %' ORDER BY id",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    let mut by_stack: Vec<Option<i64>> = Vec::new();
    for t in &texts {
        let Some((n, frames)) = parse_stack_marker(t) else {
            continue;
        };
        let name =
            site_of_frames(&frames).map_or_else(|| UNKNOWN_SITE.to_string(), |f| f.site_label());
        let i = n as usize;
        if by_stack.len() <= i {
            by_stack.resize(i + 1, None);
        }
        by_stack[i] = Some(producers.idx(&name));
    }
    let none = producers.idx(UNKNOWN_SITE);
    let mut out: Vec<i64> = by_stack.into_iter().map(|p| p.unwrap_or(none)).collect();
    out.push(none);
    Ok(out)
}

/// Sweeps a device's PyTorch block events: allocated bytes, and the same per site
/// (`sites`: the producer of each stack number, the last for none; see [`torch_sites`]).
async fn sweep_torch(
    store: &Store,
    run: i64,
    device: i64,
    t0: i64,
    sites: &[i64],
    r: &mut Rollups,
) -> Result<u64, StoreError> {
    let mut after = 0i64;
    let mut records = 0u64;
    let mut blocks: HashMap<(u32, u64), (i64, i64)> = HashMap::new();
    let none = sites.last().copied().unwrap_or(0);
    loop {
        let page: Vec<(i64, Vec<u8>)> = sqlx::query_as(
            "SELECT id, events FROM event_chunks WHERE run_id = $1 AND device = $2 AND id > $3 \
             ORDER BY id LIMIT $4",
        )
        .bind(run)
        .bind(device)
        .bind(after)
        .bind(CHUNK_PAGE)
        .fetch_all(&store.pool)
        .await?;
        let Some(&(last_id, _)) = page.last() else {
            break;
        };
        after = last_id;
        for (id, blob) in &page {
            for e in chunk::whole_events(*id, blob)? {
                if codes::api(e.api).family() != Some(ApiFamily::Torch) {
                    continue;
                }
                let t = (e.ts_ns as i64 - t0).max(0) as u64;
                match codes::event_kind(e.kind) {
                    Some(EventKind::Alloc) => {
                        // aux: the stack number + 1 (0: none).
                        let site = usize::try_from(e.aux)
                            .ok()
                            .and_then(|a| a.checked_sub(1))
                            .and_then(|k| sites.get(k).copied())
                            .unwrap_or(none);
                        let size = e.size as i64;
                        if let Some((old, old_site)) = blocks.insert((e.pid, e.ptr), (size, site)) {
                            // An address allocated again without a free: the earlier
                            // block is dropped, as the snapshot's replay drops it.
                            r.add(series::TORCH_ALLOCATED, t, -old);
                            r.add(series::PRODUCER_LIVE + old_site, t, -old);
                        }
                        r.add(series::TORCH_ALLOCATED, t, size);
                        r.add(series::PRODUCER_LIVE + site, t, size);
                        records += 1;
                    }
                    Some(EventKind::Free) => {
                        if let Some((size, site)) = blocks.remove(&(e.pid, e.ptr)) {
                            r.add(series::TORCH_ALLOCATED, t, -size);
                            r.add(series::PRODUCER_LIVE + site, t, -size);
                        }
                        records += 1;
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(records)
}
