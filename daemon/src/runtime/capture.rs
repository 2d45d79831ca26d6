//! Rebuilds a run's PJRT records (`pjrt_*` tables, written by `ingest::pjrt`) as
//! `memwatch_analysis::runtime::RuntimeCapture`, so the attribution is computed by the
//! same code `memwatch runtime` runs on a capture file. Timestamps become relative to the
//! run's start.

use memwatch_analysis::runtime::RuntimeCapture;
use memwatch_wire::{
    Api, CompiledMemoryStats, Event, EventKind, MemKind, PjrtExecutable, PjrtMemoryStats,
};

use crate::codes;
use crate::db::{Store, StoreError};

/// A `pjrt_executables` row.
#[derive(sqlx::FromRow)]
struct Executable {
    pid: i64,
    handle: i64,
    ts_ns: i64,
    flags: i64,
    devices: String,
    name: String,
    fingerprint: String,
    generated_code_bytes: i64,
    argument_bytes: i64,
    output_bytes: i64,
    alias_bytes: i64,
    temp_bytes: i64,
    host_generated_code_bytes: i64,
    host_argument_bytes: i64,
    host_output_bytes: i64,
    host_alias_bytes: i64,
    host_temp_bytes: i64,
}

/// A `pjrt_memory_stats` row.
#[derive(sqlx::FromRow)]
struct Stats {
    pid: i64,
    device: i64,
    ts_ns: i64,
    flags: i64,
    bytes_in_use: i64,
    peak_bytes_in_use: i64,
    largest_free_block: i64,
    pool_bytes: i64,
    peak_pool_bytes: i64,
    bytes_limit: i64,
    num_allocs: i64,
    largest_alloc_size: i64,
}

/// A `pjrt_executions` row.
#[derive(sqlx::FromRow)]
struct Execution {
    pid: i64,
    device: i64,
    handle: i64,
    start_ns: i64,
    call_ns: i64,
    result: i64,
    requested_bytes: i64,
    complete_ns: Option<i64>,
    complete_result: Option<i64>,
    complete_requested_bytes: Option<i64>,
}

/// A `pjrt_buffers` row.
#[derive(sqlx::FromRow)]
struct Buffer {
    pid: i64,
    device: i64,
    ptr: i64,
    size: i64,
    api: i64,
    producer: i64,
    ts_ns: i64,
    freed_ts_ns: Option<i64>,
    output_index: Option<i64>,
}

/// A stored time relative to the run's start `t0`.
pub(super) fn rel(ts: i64, t0: u64) -> u64 {
    (ts.max(0) as u64).saturating_sub(t0)
}

/// An execute or its completion as the analysis reads it: an API span.
struct Span {
    pid: i64,
    device: i64,
    api: Api,
    ts: u64,
    duration: i64,
    handle: i64,
    result: i64,
    size: i64,
}

impl Span {
    fn event(&self) -> Event {
        Event {
            ts_ns: self.ts,
            duration_ns: self.duration.max(0) as u64,
            ptr: self.handle as u64,
            size: self.size as u64,
            pid: self.pid as u32,
            device: self.device as i32,
            result: self.result as i32,
            api: codes::api_code(self.api),
            kind: codes::event_kind_code(EventKind::ApiSpan),
            ..Event::default()
        }
    }
}

/// The run's stored executables as the shim recorded them (times relative to `t0`).
pub(crate) async fn executables(
    store: &Store,
    run: i64,
    t0: u64,
) -> Result<Vec<PjrtExecutable>, StoreError> {
    let rows: Vec<Executable> = sqlx::query_as(
        "SELECT pid, handle, ts_ns, flags, devices, name, fingerprint, generated_code_bytes, \
         argument_bytes, output_bytes, alias_bytes, temp_bytes, host_generated_code_bytes, \
         host_argument_bytes, host_output_bytes, host_alias_bytes, host_temp_bytes \
         FROM pjrt_executables WHERE run_id = $1 ORDER BY id",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let devices = r
            .devices
            .split(',')
            .filter(|d| !d.is_empty())
            .map(|d| {
                d.parse::<i32>()
                    .map_err(|_| StoreError::Corrupt(format!("pjrt_executables.devices {d:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.push(PjrtExecutable {
            pid: r.pid as u32,
            handle: r.handle as u64,
            ts_ns: rel(r.ts_ns, t0),
            flags: r.flags as u32,
            stats: CompiledMemoryStats {
                generated_code: r.generated_code_bytes,
                argument: r.argument_bytes,
                output: r.output_bytes,
                alias: r.alias_bytes,
                temp: r.temp_bytes,
                host_generated_code: r.host_generated_code_bytes,
                host_argument: r.host_argument_bytes,
                host_output: r.host_output_bytes,
                host_alias: r.host_alias_bytes,
                host_temp: r.host_temp_bytes,
            },
            devices,
            name: r.name,
            fingerprint: r.fingerprint,
        });
    }
    Ok(out)
}

/// Rebuilds the run's PJRT records as the analysis reads them from a capture file
/// (timestamps relative to the run's start). None: no such run.
pub(crate) async fn runtime_capture(
    store: &Store,
    run: i64,
) -> Result<Option<RuntimeCapture>, StoreError> {
    let Some(t0) = store.run_t0(run).await? else {
        return Ok(None);
    };
    let mut cap = RuntimeCapture {
        origin_ns: t0,
        ..RuntimeCapture::default()
    };
    cap.executables = executables(store, run, t0).await?;
    let rows: Vec<Stats> = sqlx::query_as(
        "SELECT pid, device, ts_ns, flags, bytes_in_use, peak_bytes_in_use, largest_free_block, \
         pool_bytes, peak_pool_bytes, bytes_limit, num_allocs, largest_alloc_size \
         FROM pjrt_memory_stats WHERE run_id = $1 ORDER BY ts_ns",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    for r in rows {
        cap.stats.push(PjrtMemoryStats {
            pid: r.pid as u32,
            device: r.device as i32,
            ts_ns: rel(r.ts_ns, t0),
            flags: r.flags as u32,
            bytes_in_use: r.bytes_in_use,
            peak_bytes_in_use: r.peak_bytes_in_use,
            largest_free_block: r.largest_free_block,
            pool_bytes: r.pool_bytes,
            peak_pool_bytes: r.peak_pool_bytes,
            bytes_limit: r.bytes_limit,
            num_allocs: r.num_allocs,
            largest_alloc_size: r.largest_alloc_size,
        });
    }
    let rows: Vec<Execution> = sqlx::query_as(
        "SELECT pid, device, handle, start_ns, call_ns, result, requested_bytes, complete_ns, \
         complete_result, complete_requested_bytes FROM pjrt_executions WHERE run_id = $1 \
         ORDER BY start_ns, id",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    execution_events(&rows, t0, &mut cap.events);
    let rows: Vec<Buffer> = sqlx::query_as(
        "SELECT pid, device, ptr, size, api, producer, ts_ns, freed_ts_ns, output_index FROM pjrt_buffers \
         WHERE run_id = $1 ORDER BY id",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    buffer_events(&rows, t0, &mut cap.events);
    sort_events(&mut cap.events);
    Ok(Some(cap))
}

/// Stable: at equal times an allocation stays before a later free of the same pointer.
fn sort_events(events: &mut [Event]) {
    let free = codes::event_kind_code(EventKind::Free);
    events.sort_by_key(|e| (e.ts_ns, e.kind == free));
}

/// Each execute (and its completion) as the API spans a capture holds.
fn execution_events(rows: &[Execution], t0: u64, out: &mut Vec<Event>) {
    for r in rows {
        let start = rel(r.start_ns, t0);
        let call = Span {
            pid: r.pid,
            device: r.device,
            api: Api::PjrtExecute,
            ts: start,
            duration: r.call_ns,
            handle: r.handle,
            result: r.result,
            size: r.requested_bytes,
        };
        out.push(call.event());
        if let Some(done) = r.complete_ns {
            out.push(
                Span {
                    api: Api::PjrtExecuteComplete,
                    duration: done,
                    result: r.complete_result.unwrap_or(0),
                    size: r.complete_requested_bytes.unwrap_or(0),
                    ..call
                }
                .event(),
            );
        }
    }
}

/// Each buffer's allocation (and its free) as a capture holds them.
fn buffer_events(rows: &[Buffer], t0: u64, out: &mut Vec<Event>) {
    for r in rows {
        let mut alloc = Event {
            pid: r.pid as u32,
            device: r.device as i32,
            ptr: r.ptr as u64,
            size: r.size as u64,
            api: r.api as u16,
            aux: r.producer as u64,
            ts_ns: rel(r.ts_ns, t0),
            kind: codes::event_kind_code(EventKind::Alloc),
            mem_kind: codes::mem_kind_code(MemKind::PjrtBuffer),
            ..Event::default()
        };
        if let Some(i) = r.output_index.and_then(|i| u32::try_from(i).ok()) {
            alloc.set_pjrt_output_index(i);
        }
        if let Some(freed) = r.freed_ts_ns {
            out.push(Event {
                ts_ns: rel(freed, t0),
                api: codes::api_code(Api::PjrtBufferDestroy),
                kind: codes::event_kind_code(EventKind::Free),
                size: 0,
                aux: 0,
                stream: 0,
                device: -1,
                ..alloc
            });
        }
        out.push(alloc);
    }
}

/// What the doctor's step rule (`memwatch_analysis::doctor::steps::execution_leak`) reads
/// of device `device` at `at` (ns after the run's start), as a capture: the PJRT buffers
/// live then, and the executions up to then of every executable named like one that made
/// one of them (an executable's steps are its executions under one name). The rest of
/// the run cannot change the rule's answer and is not read. None: no such run.
pub(crate) async fn live_steps_at(
    store: &Store,
    run: i64,
    device: i64,
    at: u64,
) -> Result<Option<RuntimeCapture>, StoreError> {
    let Some(t0) = store.run_t0(run).await? else {
        return Ok(None);
    };
    let abs = t0.saturating_add(at).min(i64::MAX as u64) as i64;
    let buffers: Vec<Buffer> = sqlx::query_as(
        "SELECT pid, device, ptr, size, api, producer, ts_ns, freed_ts_ns, output_index \
         FROM pjrt_buffers WHERE run_id = $1 AND device = $2 AND ts_ns <= $3 \
         AND (freed_ts_ns IS NULL OR freed_ts_ns > $3) ORDER BY id",
    )
    .bind(run)
    .bind(device)
    .bind(abs)
    .fetch_all(&store.pool)
    .await?;
    let executables = executables(store, run, t0).await?;
    let name = |pid: i64, handle: i64| {
        executables
            .iter()
            .find(|x| i64::from(x.pid) == pid && x.handle as i64 == handle)
            .map(|x| x.name.as_str())
    };
    let mut handles: Vec<i64> = Vec::new();
    for b in &buffers {
        if b.api != i64::from(codes::api_code(Api::PjrtExecuteOutput)) {
            continue;
        }
        handles.push(b.producer);
        if let Some(n) = name(b.pid, b.producer) {
            handles.extend(
                executables
                    .iter()
                    .filter(|x| i64::from(x.pid) == b.pid && x.name == n)
                    .map(|x| x.handle as i64),
            );
        }
    }
    handles.sort_unstable();
    handles.dedup();
    let mut cap = RuntimeCapture {
        origin_ns: t0,
        executables,
        ..RuntimeCapture::default()
    };
    // Handles are integers read from the store; written into the statement as such.
    for group in handles.chunks(512) {
        let list = group
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let rows: Vec<Execution> = sqlx::query_as(&format!(
            "SELECT pid, device, handle, start_ns, call_ns, result, requested_bytes, \
             complete_ns, complete_result, complete_requested_bytes FROM pjrt_executions \
             WHERE run_id = $1 AND device = $2 AND start_ns <= $3 AND handle IN ({list}) \
             ORDER BY start_ns, id"
        ))
        .bind(run)
        .bind(device)
        .bind(abs)
        .fetch_all(&store.pool)
        .await?;
        execution_events(&rows, t0, &mut cap.events);
    }
    buffer_events(&buffers, t0, &mut cap.events);
    sort_events(&mut cap.events);
    Ok(Some(cap))
}
