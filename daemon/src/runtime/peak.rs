//! What the PJRT records add to a device's peak (`/api/runs/{id}/peak`'s `runtime`, the
//! Peak page's panel): at the runtime peak of the allocator statistics (BFC), the
//! executable running and its compiled statistics, the live buffers by producing
//! executable and XLA module, and with an XLA dump attached the HLO buffers and
//! `op_name`s; without allocator statistics (e.g. the platform allocator), the same at
//! the driver-level peak.

use std::collections::BTreeMap;

use memwatch_analysis::runtime::{analyse, RuntimeCapture};
use memwatch_analysis::runtime::{find_module, ExecutableSummary, LiveGroup};
use memwatch_analysis::xla::{Group, PeakBuffer};
use memwatch_wire::{Api, PjrtMemoryStats};
use serde::Serialize;

use super::capture::rel;
use super::view::{analysed, main_handle};
use crate::codes;
use crate::db::{Store, StoreError};

/// What the runtime records add to `/api/runs/{id}/peak`.
#[derive(Debug, Clone, Serialize)]
pub struct PeakRuntime {
    /// "allocator statistics": the runtime peak of the PJRT memory statistics (BFC);
    /// "driver peak": no statistics were recorded (e.g. XLA_PYTHON_CLIENT_ALLOCATOR=platform),
    /// so the executables and buffers are those at the driver-level peak.
    pub basis: String,
    pub pid: u32,
    /// Time of the sample that first showed the runtime peak (relative to the run start).
    pub ts_ns: u64,
    pub peak_bytes_in_use: u64,
    pub pool_bytes: Option<u64>,
    pub bytes_limit: Option<u64>,
    pub largest_free_block_bytes: Option<u64>,
    pub executable: Option<String>,
    pub executable_stats: Option<ExecutableSummary>,
    pub running: Vec<String>,
    pub live_buffer_bytes: u64,
    pub running_temp_bytes: u64,
    pub explained_bytes: u64,
    pub unexplained_bytes: u64,
    pub co_resident: Vec<LiveGroup>,
    /// Live-at-peak bytes by XLA module: the running executable's temp plus the live
    /// buffers each (co-resident) executable produced, named by its dump module when a
    /// dump is attached (else by the executable name).
    pub by_xla_module: Vec<ModuleShare>,
    /// The running module's buffers live at its peak, by HLO op_name (attached dump only).
    pub by_hlo_op: Vec<Group>,
    /// The same, by HLO op category (attached dump only).
    pub by_hlo_category: Vec<Group>,
    /// The running module's largest buffers live at its peak (attached dump only).
    pub hlo_buffers: Vec<PeakBuffer>,
    /// Module the running executable joined to and how ("name+stats" / "name").
    pub xla_module: Option<String>,
    pub matched_by: Option<String>,
    pub xla_modules_attached: u64,
}

/// Bytes of one module (or executable) at the runtime peak.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleShare {
    pub module: String,
    pub executable: String,
    /// "temp" (scratch of the running executable) or "live buffers" (its outputs alive).
    pub role: String,
    pub bytes: u64,
}

/// The runtime attribution of `device`'s peak, or None when the run has no PJRT
/// memory statistics for it.
pub async fn peak_runtime(
    store: &Store,
    run: i64,
    device: i64,
    top: usize,
) -> Result<Option<PeakRuntime>, StoreError> {
    let Some((cap, a)) = analysed(store, run, device, top, false).await? else {
        return Ok(None);
    };
    let Some((a, p)) = a.and_then(|a| a.device.peak.clone().map(|p| (a, p))) else {
        return driver_peak(store, run, device, &cap, top).await;
    };
    let exe = |h: u64| a.executables.iter().find(|x| x.handle == h);
    let module_of = |x: &ExecutableSummary| {
        find_module(x, &a.modules).map_or_else(|| x.name.clone(), |(m, _)| m.name.clone())
    };
    let main = main_handle(&p).and_then(exe);
    let mut shares: Vec<ModuleShare> = Vec::new();
    if let Some(m) = main {
        if p.running_temp_bytes > 0 {
            shares.push(ModuleShare {
                module: module_of(m),
                executable: m.name.clone(),
                role: "temp".into(),
                bytes: p.running_temp_bytes,
            });
        }
    }
    for g in &p.co_resident {
        let producer = a.executables.iter().find(|x| x.name == g.producer);
        shares.push(ModuleShare {
            module: producer.map_or_else(|| g.producer.clone(), module_of),
            executable: g.producer.clone(),
            role: "live buffers".into(),
            bytes: g.bytes,
        });
    }
    shares.sort_by(|x, y| y.bytes.cmp(&x.bytes).then(x.module.cmp(&y.module)));
    let largest_free = cap
        .stats
        .iter()
        .find(|s| s.pid == a.pid && i64::from(s.device) == device && s.ts_ns == p.ts_ns)
        .and_then(|s| s.get(PjrtMemoryStats::LARGEST_FREE_BLOCK, s.largest_free_block));
    let (by_hlo_op, by_hlo_category, hlo_buffers, xla_module, matched_by) = match &p.xla {
        Some(j) => (
            j.by_op_name.clone(),
            j.by_category.clone(),
            j.peak_buffers.clone(),
            Some(j.module.clone()),
            Some(j.matched_by.clone()),
        ),
        None => (Vec::new(), Vec::new(), Vec::new(), None, None),
    };
    Ok(Some(PeakRuntime {
        basis: "allocator statistics".into(),
        pid: a.pid,
        ts_ns: p.ts_ns,
        peak_bytes_in_use: p.peak_bytes_in_use,
        pool_bytes: p.pool_bytes,
        bytes_limit: p.bytes_limit,
        largest_free_block_bytes: largest_free,
        executable: p.executable.clone(),
        executable_stats: main.cloned(),
        running: p.running.iter().map(|r| r.executable.clone()).collect(),
        live_buffer_bytes: p.live_buffer_bytes,
        running_temp_bytes: p.running_temp_bytes,
        explained_bytes: p.explained_bytes,
        unexplained_bytes: p.unexplained_bytes,
        co_resident: p.co_resident.clone(),
        by_xla_module: shares,
        by_hlo_op,
        by_hlo_category,
        hlo_buffers,
        xla_module,
        matched_by,
        xla_modules_attached: a.modules.len() as u64,
    }))
}

/// The attribution at the driver-level peak when the run has PJRT executions but no
/// allocator statistics for `device`: the execution(s) running at the peak instant (else
/// the last one started before it), the PJRT buffers live then by producer, and the
/// running executable's module of an attached dump (found by `find_module`).
async fn driver_peak(
    store: &Store,
    run: i64,
    device: i64,
    cap: &RuntimeCapture,
    top: usize,
) -> Result<Option<PeakRuntime>, StoreError> {
    let Some(row) = sqlx::query_as::<_, PeakAt>(
        "SELECT peak_bytes, peak_ts_ns FROM peak_snapshots WHERE run_id = $1 AND device = $2",
    )
    .bind(run)
    .bind(device)
    .fetch_optional(&store.pool)
    .await?
    else {
        return Ok(None);
    };
    let peak_bytes = row.peak_bytes.max(0) as u64;
    let ts = rel(row.peak_ts_ns, cap.origin_ns);
    // Execute spans on the device, extended to their completion.
    let mut spans: Vec<(u32, u64, u64, u64)> = Vec::new();
    for e in cap.events.iter().filter(|e| i64::from(e.device) == device) {
        match codes::api(e.api) {
            Api::PjrtExecute => spans.push((e.pid, e.ptr, e.ts_ns, e.ts_ns + e.duration_ns)),
            Api::PjrtExecuteComplete => {
                if let Some(s) = spans
                    .iter_mut()
                    .rev()
                    .find(|s| s.1 == e.ptr && s.2 == e.ts_ns)
                {
                    s.3 = s.3.max(e.ts_ns + e.duration_ns);
                }
            }
            _ => {}
        }
    }
    if spans.is_empty() {
        return Ok(None);
    }
    let mut running: Vec<(u32, u64)> = spans
        .iter()
        .filter(|s| s.2 <= ts && s.3 >= ts)
        .map(|s| (s.0, s.1))
        .collect();
    if running.is_empty() {
        if let Some(s) = spans.iter().rev().find(|s| s.2 <= ts) {
            running.push((s.0, s.1));
        }
    }
    let report = analyse(cap, false);
    let exes: Vec<&ExecutableSummary> = report
        .processes
        .iter()
        .flat_map(|p| p.executables.iter())
        .collect();
    let exe = |pid: u32, h: u64| exes.iter().find(|x| x.pid == pid && x.handle == h).copied();
    let name = |pid: u32, h: u64| {
        exe(pid, h).map_or_else(|| format!("executable {h:#x}"), |x| x.name.clone())
    };
    let main = running
        .iter()
        .max_by_key(|(pid, h)| exe(*pid, *h).and_then(|x| x.temp_bytes).unwrap_or(0))
        .copied();
    let pid = main.map_or(0, |m| m.0);
    let main_exe = main.and_then(|(p, h)| exe(p, h));
    // PJRT buffers live at the peak instant, by producer.
    let rows: Vec<LiveBuffers> = sqlx::query_as(
        "SELECT pid, api, producer, SUM(size) AS bytes, COUNT(*) AS count FROM pjrt_buffers WHERE run_id = $1 \
         AND device = $2 AND ts_ns <= $3 AND (freed_ts_ns IS NULL OR freed_ts_ns > $3) \
         GROUP BY pid, api, producer",
    )
    .bind(run)
    .bind(device)
    .bind((ts + cap.origin_ns) as i64)
    .fetch_all(&store.pool)
    .await?;
    let mut groups: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in &rows {
        let (p, producer) = (r.pid as u32, r.producer as u64);
        let who = match codes::api(r.api as u16) {
            Api::PjrtExecuteOutput => name(p, producer),
            Api::PjrtBufferFromHostBuffer => "host transfer".into(),
            _ => "device copy".into(),
        };
        let g = groups.entry(who).or_default();
        g.0 += r.bytes.max(0) as u64;
        g.1 += r.count.max(0) as u64;
    }
    let mut co_resident: Vec<LiveGroup> = groups
        .into_iter()
        .map(|(producer, (bytes, count))| LiveGroup {
            producer,
            bytes,
            count,
        })
        .collect();
    co_resident.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.producer.cmp(&b.producer)));
    let live: u64 = co_resident.iter().map(|g| g.bytes).sum();
    let temp = main_exe.and_then(|x| x.temp_bytes).unwrap_or(0);
    let explained = (live + temp).min(peak_bytes);
    let modules = store.run_modules(run).await?;
    let module_of = |x: &ExecutableSummary| {
        find_module(x, &modules).map_or_else(|| x.name.clone(), |(m, _)| m.name.clone())
    };
    let mut shares: Vec<ModuleShare> = Vec::new();
    if let (Some(m), true) = (main_exe, temp > 0) {
        shares.push(ModuleShare {
            module: module_of(m),
            executable: m.name.clone(),
            role: "temp".into(),
            bytes: temp,
        });
    }
    for g in &co_resident {
        let producer = exes.iter().find(|x| x.name == g.producer);
        shares.push(ModuleShare {
            module: producer.map_or_else(|| g.producer.clone(), |x| module_of(x)),
            executable: g.producer.clone(),
            role: "live buffers".into(),
            bytes: g.bytes,
        });
    }
    shares.sort_by(|x, y| y.bytes.cmp(&x.bytes).then(x.module.cmp(&y.module)));
    let joined = main_exe.and_then(|x| find_module(x, &modules));
    Ok(Some(PeakRuntime {
        basis: "driver peak".into(),
        pid,
        ts_ns: ts,
        peak_bytes_in_use: peak_bytes,
        pool_bytes: None,
        bytes_limit: None,
        largest_free_block_bytes: None,
        executable: main_exe.map(|x| x.name.clone()),
        executable_stats: main_exe.cloned(),
        running: running.iter().map(|(p, h)| name(*p, *h)).collect(),
        live_buffer_bytes: live,
        running_temp_bytes: temp,
        explained_bytes: explained,
        unexplained_bytes: peak_bytes - explained,
        co_resident,
        by_xla_module: shares,
        by_hlo_op: joined.map_or_else(Vec::new, |(m, _)| {
            m.by_op_name.iter().take(top).cloned().collect()
        }),
        by_hlo_category: joined.map_or_else(Vec::new, |(m, _)| m.by_category.clone()),
        hlo_buffers: joined.map_or_else(Vec::new, |(m, _)| {
            m.peak_buffers.iter().take(top).cloned().collect()
        }),
        xla_module: joined.map(|(m, _)| m.name.clone()),
        matched_by: joined.map(|(_, how)| how.to_string()),
        xla_modules_attached: modules.len() as u64,
    }))
}

/// A device's peak as ingest stored it.
#[derive(sqlx::FromRow)]
struct PeakAt {
    peak_bytes: i64,
    peak_ts_ns: i64,
}

/// PJRT buffers live at an instant, per (pid, creating API, producer).
#[derive(sqlx::FromRow)]
struct LiveBuffers {
    pid: i64,
    api: i64,
    producer: i64,
    bytes: i64,
    count: i64,
}
