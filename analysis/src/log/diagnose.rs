//! Joins a BFC out-of-memory report to the failing executable's XLA dump: which buffer
//! the failed request was (matched by BFC-rounded size), what else was live, which HLO
//! buffers make the module's peak, needed versus available memory, and next steps.
//! Pure computation over a parsed [`LogReport`] and loaded [`ModuleReport`]s.

use super::model::*;
use crate::doctor::need::{NeedVerdict, PoolNeed};
use crate::xla::{ModuleReport, PeakBuffer};
use serde::Serialize;

/// The BFC allocator rounds every request up to a multiple of 256 bytes.
pub const BFC_ROUNDING: u64 = 256;

/// Rounds `n` up to the BFC granularity.
pub fn bfc_round(n: u64) -> u64 {
    n.div_ceil(BFC_ROUNDING).saturating_mul(BFC_ROUNDING)
}

/// What the failing request was, in terms of the executable's buffer assignment.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct MatchedBuffer {
    /// Module name.
    pub module: String,
    /// `preallocated temp buffer`, `output buffer`, `argument buffer`.
    pub what: String,
    /// Unrounded size from the buffer assignment.
    pub bytes: u64,
    /// Rounded to 256.
    pub rounded_bytes: u64,
}

/// The diagnosis of one OOM.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Diagnosis {
    /// Where the OOM report is.
    pub at: Location,
    /// Executable that failed (from `[executable_name=…]`).
    pub executable: Option<String>,
    /// Rounded bytes requested.
    pub requested_bytes: u64,
    /// The matched buffer, if the dump has the module and a size matches.
    pub matched: Option<MatchedBuffer>,
    /// In-use bytes at the failure, by executable annotation: (executable, bytes, chunks).
    pub live_by_executable: Vec<(String, u64, u64)>,
    /// Exact in-use bytes at the failure (`None`: the log has no chunk dump).
    pub in_use_bytes: Option<u64>,
    /// Pool size in bytes.
    pub pool_bytes: Option<u64>,
    /// Largest free chunk (exact from chunk lines, else approximate).
    pub largest_free_bytes: Option<u64>,
    /// in_use + request (the request alone when in-use is unknown).
    pub needed_bytes: u64,
    /// needed - pool, when positive.
    pub shortfall_bytes: Option<u64>,
    /// The module's memory_analysis() figures, when found.
    pub module_argument_bytes: Option<u64>,
    /// Output bytes.
    pub module_output_bytes: Option<u64>,
    /// Temp bytes.
    pub module_temp_bytes: Option<u64>,
    /// Largest buffers at the module's peak.
    pub module_peak_buffers: Vec<PeakBuffer>,
    /// Largest values inside the temp buffer.
    pub module_top_temp_values: Vec<PeakBuffer>,
    /// Device memory inferred as pool / mem_fraction (when the fraction is given).
    pub device_memory_bytes: Option<u64>,
    /// Smallest XLA_CLIENT_MEM_FRACTION (2 decimals, 5% headroom) that fits, if any does.
    pub suggested_mem_fraction: Option<f64>,
    /// The compile-time rematerialization warning, if any.
    pub remat: Option<RematWarning>,
    /// Plain-language conclusions and next steps.
    pub findings: Vec<String>,
}

use crate::size::format_bytes as gib;

/// Diagnoses every OOM of `log`. `mem_fraction` is the run's XLA_CLIENT_MEM_FRACTION
/// when known (it turns the pool size into device memory).
pub fn diagnose(
    log: &LogReport,
    modules: &[ModuleReport],
    mem_fraction: Option<f64>,
) -> Vec<Diagnosis> {
    log.ooms
        .iter()
        .map(|oom| diagnose_one(log, oom, modules, mem_fraction))
        .collect()
}

fn diagnose_one(
    log: &LogReport,
    oom: &BfcOom,
    modules: &[ModuleReport],
    mem_fraction: Option<f64>,
) -> Diagnosis {
    let executable = log
        .resource_exhausted
        .iter()
        .find(|r| r.at.file == oom.at.file && r.at.line > oom.at.line && r.executable.is_some())
        .and_then(|r| r.executable.clone());
    let req = oom.rounded_bytes;
    let candidates: Vec<&ModuleReport> = match &executable {
        Some(e) => modules.iter().filter(|m| &m.name == e).collect(),
        None => modules.iter().collect(),
    };
    let mut matched = None;
    let mut module = candidates.first().copied();
    for m in &candidates {
        let tries = [
            ("preallocated temp buffer", m.temp_bytes),
            ("output buffers (all outputs together)", m.output_bytes),
            (
                "argument buffers (all arguments together)",
                m.argument_bytes,
            ),
        ];
        if let Some((what, b)) = tries.iter().find(|(_, b)| *b > 0 && bfc_round(*b) == req) {
            matched = Some(MatchedBuffer {
                module: m.name.clone(),
                what: what.to_string(),
                bytes: *b,
                rounded_bytes: bfc_round(*b),
            });
            module = Some(m);
            break;
        }
    }
    let in_use = oom.in_use_bytes();
    let pool = oom
        .pool_bytes()
        .or_else(|| log.pool_allocations.last().map(|p| p.bytes))
        .or_else(|| oom.stats.as_ref().and_then(|s| s.get("bytes_limit")));
    let largest_free = oom
        .largest_free_chunk()
        .or_else(|| oom.summary_approx.get("total_free_in_pool").copied());
    // The doctor's one rule; with no live set known it counts the request alone.
    let need = PoolNeed::new(in_use.unwrap_or(0), req, pool, oom.limit_above_pool());
    let (needed, shortfall, stated_limit) = (
        need.need_bytes,
        need.short_by_bytes,
        need.stated_limit_bytes,
    );
    // A growing pool (XLA_PYTHON_CLIENT_PREALLOCATE=false) reserves regions up to its
    // limit: a need above what it holds but within the limit means it could not grow.
    let could_not_grow = need.verdict() == NeedVerdict::PoolCouldNotGrow;
    let device = match (stated_limit.or(pool), mem_fraction) {
        (Some(p), Some(f)) if f > 0.0 && f <= 1.0 => Some((p as f64 / f).round() as u64),
        _ => None,
    };
    // The pool that would have held the request. Known only with the live set (sized for
    // the request alone it would be too small). Too small a pool: in use + request (more
    // than the pool, by `shortfall`). Fragmented (in use + request fit, the request did
    // not): the current pool plus the request, so the request finds a free range even
    // with the same fragmentation. Either way more than the pool that just failed.
    let fragmented = in_use.is_some() && need.verdict() == NeedVerdict::Fragmentation;
    let target_pool = match (in_use, pool) {
        (None, _) => None,
        (Some(_), Some(p)) if fragmented => Some(p.saturating_add(req)),
        (Some(_), _) => Some(needed),
    };
    let suggested = match (device, target_pool) {
        (Some(d), Some(t)) if d > 0 => {
            let f = (t as f64 * 1.05 / d as f64 * 100.0).ceil() / 100.0;
            // A fraction no larger than the run's own gives the pool that failed.
            let above_run = mem_fraction.is_none_or(|m| f > m);
            (f <= 0.95 && above_run).then_some(f)
        }
        _ => None,
    };
    // Only warnings logged before this OOM explain it.
    let remat = log
        .remat_warnings
        .iter()
        .rfind(|w| w.at.file == oom.at.file && w.at.line < oom.at.line)
        .cloned();

    let mut findings = Vec::new();
    let exe = executable
        .clone()
        .unwrap_or_else(|| "(unknown executable)".into());
    match &matched {
        Some(mb) => findings.push(format!(
            "The failed request of {} ({} bytes after BFC rounding) is {}'s {}: {} bytes in its buffer assignment, rounded up to a multiple of 256.",
            gib(req), req, mb.module, mb.what, mb.bytes
        )),
        None if module.is_some() => findings.push(format!(
            "The failed request of {} ({req} bytes) matches no whole buffer class of {exe}; it is an allocation made while running it.",
            gib(req)
        )),
        None if modules.is_empty() => findings.push(format!(
            "The failed request was {} ({req} bytes) by {exe}; pass --xla-dump DIR (the run's --xla_dump_to) to learn which buffer it was.",
            gib(req)
        )),
        None => findings.push(format!(
            "The failed request was {} ({req} bytes) by {exe}; the XLA dump given has no module of that name (was it dumped by the same run?).",
            gib(req)
        )),
    }
    // Name what the live chunks are, when their total matches a buffer class of the
    // failing module (chunk sizes are rounded to 256 B, so allow 256 B per chunk).
    let close = |a: u64, b: u64, n: u64| a.abs_diff(b) <= n * BFC_ROUNDING;
    let live_by_executable = if oom.chunk_dump_complete() {
        oom.in_use_by_executable()
    } else {
        Vec::new()
    };
    let others: Vec<String> = live_by_executable
        .iter()
        .map(|(e, b, n)| {
            let what = match module {
                Some(m) if e == &m.name && close(*b, m.output_bytes, *n) => {
                    format!(" = {}'s outputs, allocated before its temp buffer", m.name)
                }
                Some(m) if close(*b, m.argument_bytes, *n) => {
                    format!(
                        " = exactly the size of {}'s arguments (its input arrays)",
                        m.name
                    )
                }
                _ => String::new(),
            };
            format!("{} in {n} chunk(s) from {e}{what}", gib(*b))
        })
        .collect();
    match in_use {
        Some(b) if !others.is_empty() => findings.push(format!(
            "Already in use when it failed: {} ({}).",
            gib(b),
            others.join(", ")
        )),
        Some(b) => findings.push(format!("Already in use when it failed: {}.", gib(b))),
        None => match oom.chunk_dump_gap() {
            Some(_) if oom.regions.is_empty() => findings.push(format!(
                "The allocator's chunk dump names no region (no `Next region of size` line before its chunks, up to {}:{}), so whether it is whole, and what else was live, is unknown; the figures below count the request alone.",
                oom.chunk_dump_end().file,
                oom.chunk_dump_end().line,
            )),
            Some((covered, pool)) => findings.push(format!(
                "The allocator's chunk dump is cut off (its chunks cover {} of the {} pool; lines are missing after {}:{}), so what else was live is unknown; the figures below count the request alone.",
                gib(covered),
                gib(pool),
                oom.chunk_dump_end().file,
                oom.chunk_dump_end().line,
            )),
            None => findings.push(
                "The log has no allocator chunk dump, so what else was live is unknown (TF_CPP_MIN_LOG_LEVEL=0 prints it); the figures below count the request alone.".to_string(),
            ),
        },
    }
    if let Some(p) = pool {
        match shortfall {
            // Without the live set, "the request fits the pool" says nothing about
            // fragmentation.
            None if in_use.is_none() => findings.push(format!(
                "The request alone fits the pool of {}; whether the rest was fragmentation or live data is unknown without the chunk dump.",
                gib(p)
            )),
            Some(_) if could_not_grow => findings.push(format!(
                "Needed {} (in use + request): above the {} the pool had reserved, but within its limit of {}. The pool could not grow by the request: the device had no room for a new region (memory held outside the pool: other processes, the framework's own buffers). Not fragmentation, and not a limit too small.",
                gib(needed),
                gib(p),
                gib(stated_limit.unwrap_or_default())
            )),
            Some(s) => findings.push(format!(
                "Needed {} (in use + request) but the pool is {}: short by {} ({s} bytes). This is not fragmentation: the pool is too small.",
                gib(needed), gib(p), gib(s)
            )),
            None => findings.push(format!(
                "Needed {} fits the pool of {} in total, but the largest free chunk was {}: the pool is fragmented.",
                gib(needed),
                gib(p),
                largest_free.map(gib).unwrap_or_else(|| "unknown".into())
            )),
        }
    }
    if let Some(r) = &remat {
        findings.push(format!(
            "At compile time XLA already warned: it could not get below {} by rematerialization (reached {}, from {}).",
            gib(r.target_bytes), gib(r.achieved_bytes), gib(r.original_bytes)
        ));
    }
    let what_for = |t: u64| {
        if fragmented {
            format!(
                "the current {} pool plus the {} request (so the request finds room even with the same fragmentation)",
                gib(pool.unwrap_or_default()),
                gib(req)
            )
        } else {
            format!("the {} needed (in use + request)", gib(t))
        }
    };
    match (device, target_pool, suggested) {
        (_, _, _) if could_not_grow => findings.push(
            "Next step: a larger fraction does not help (the pool's limit already covers the need); reserve the pool up front (XLA_PYTHON_CLIENT_PREALLOCATE=true) or free the device memory held outside it.".to_string(),
        ),
        (Some(d), None, _) => findings.push(format!(
            "Next step: find what else was live (a whole chunk dump, TF_CPP_MIN_LOG_LEVEL=0); the request alone needs {} of the {} device, and the {} pool it failed in was not enough, so no fitting XLA_CLIENT_MEM_FRACTION can be computed from this log.",
            gib(req),
            gib(d),
            pool.map(gib).unwrap_or_else(|| "unknown".into())
        )),
        (Some(d), Some(t), Some(f)) => findings.push(format!(
            "Next step: run with XLA_CLIENT_MEM_FRACTION={f:.2} (device memory {} = pool / {:.3}); that gives a pool of {}, room for {} with 5% headroom.",
            gib(d),
            mem_fraction.unwrap_or(0.0),
            gib((d as f64 * f) as u64),
            what_for(t)
        )),
        (Some(d), Some(t), None) => findings.push(format!(
            "No XLA_CLIENT_MEM_FRACTION fits: a pool of {} ({}) plus headroom is more than 95% of the {} device. Reduce memory: smaller batch, jax.checkpoint, donate arguments, or shard.",
            gib(t), what_for(t), gib(d)
        )),
        (None, Some(t), _) => findings.push(format!(
            "Next step: give the pool at least {} ({t} bytes: {}): XLA_CLIENT_MEM_FRACTION >= {t} / device memory (pass --mem-fraction F with the run's fraction to get the number).",
            gib(t),
            what_for(t)
        )),
        (None, None, _) => findings.push(match pool {
            Some(p) => format!(
                "Next step: the pool needs more than the {} it failed with, by an amount this log cannot tell (the request alone is {}); find what else was live (a whole chunk dump, TF_CPP_MIN_LOG_LEVEL=0).",
                gib(p),
                gib(req)
            ),
            None => format!(
                "Next step: find what else was live and how big the pool was (a whole chunk dump, TF_CPP_MIN_LOG_LEVEL=0); the request alone is {}.",
                gib(req)
            ),
        }),
    }
    if let Some(m) = module {
        if let Some(top) = m.top_temp_values.first() {
            findings.push(format!(
                "Or shrink {}'s temp buffer ({}): its largest value is {} ({}, {}, op_name {}).",
                m.name,
                gib(m.temp_bytes),
                top.instruction,
                top.shape,
                gib(top.bytes),
                top.op_name.as_deref().unwrap_or("-")
            ));
        }
    }
    Diagnosis {
        at: oom.at.clone(),
        executable,
        requested_bytes: req,
        matched,
        live_by_executable,
        in_use_bytes: in_use,
        pool_bytes: pool,
        largest_free_bytes: largest_free,
        needed_bytes: needed,
        shortfall_bytes: shortfall,
        module_argument_bytes: module.map(|m| m.argument_bytes),
        module_output_bytes: module.map(|m| m.output_bytes),
        module_temp_bytes: module.map(|m| m.temp_bytes),
        module_peak_buffers: module
            .map(|m| m.peak_buffers.iter().take(10).cloned().collect())
            .unwrap_or_default(),
        module_top_temp_values: module
            .map(|m| m.top_temp_values.iter().take(10).cloned().collect())
            .unwrap_or_default(),
        device_memory_bytes: device,
        suggested_mem_fraction: suggested,
        remat,
        findings,
    }
}
