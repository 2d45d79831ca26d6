//! The Peak page's PJRT runtime panel (issue 9): the executable running at the runtime
//! peak, the framework allocator's (BFC) bytes in use / pool / limit there, the live bytes
//! by XLA module across co-resident executables, and — with an XLA dump attached to the
//! run — the HLO buffers and `op_name`s that made up the peak. Reads `peak_runtime`
//! (which runs `memwatch_analysis::runtime`); formats for `web/templates/peak_runtime.html`.

use super::peak::peak_runtime;
use crate::db::{Store, StoreError};
use crate::render::fmt;

/// HLO rows listed on the page.
const TOP: usize = 15;

/// The panel, every number formatted.
pub struct RuntimePanel {
    /// True when no allocator statistics were recorded (attribution at the driver peak).
    pub driver_basis: bool,
    pub executable: String,
    pub running: String,
    pub at: String,
    pub in_use: String,
    pub pool: String,
    pub limit: String,
    pub largest_free: String,
    /// Live buffers + the running temp, summed against the bytes in use.
    pub accounted: String,
    pub fingerprint: String,
    pub compiled: Vec<(String, String)>,
    pub modules: Vec<ShareRow>,
    pub xla_module: String,
    pub matched_by: String,
    pub attached: u64,
    pub ops: Vec<OpRow>,
    pub categories: Vec<OpRow>,
    pub buffers: Vec<BufferRow>,
}

pub struct ShareRow {
    pub module: String,
    pub executable: String,
    pub role: String,
    pub bytes: String,
    pub pct_int: u64,
}

pub struct OpRow {
    pub op: String,
    pub bytes: String,
    pub count: u64,
}

impl OpRow {
    /// One row per group (an HLO op name or category), bytes formatted.
    fn list(groups: &[memwatch_analysis::xla::Group]) -> Vec<OpRow> {
        groups
            .iter()
            .map(|g| OpRow {
                op: g.key.clone(),
                bytes: fmt::bytes(g.bytes as i64),
                count: g.count,
            })
            .collect()
    }
}

pub struct BufferRow {
    pub instruction: String,
    pub shape: String,
    pub bytes: String,
    pub category: String,
    pub op_name: String,
}

/// "Live jax.Array buffers A + the running executable's temp B = C of the D in use; E
/// unexplained", or, when A + B is more than was in use, that not all of the temp was
/// allocated then (never a negative or clamped remainder). After a late attach
/// (`before`: what the allocator had in use before it), the remainder up to that figure
/// is said to be held since before the attach — buffers made then that no execute named
/// are not in the capture — and only what is left beyond it is unexplained.
fn accounted(live: u64, temp: u64, in_use: u64, before: Option<u64>) -> String {
    let sum = live.saturating_add(temp);
    let head = format!(
        "Live jax.Array buffers {} + the running executable's temp {} = {}",
        fmt::bytes_u64(live),
        fmt::bytes_u64(temp),
        fmt::bytes_u64(sum)
    );
    if sum > in_use {
        return format!(
            "{head}, {} more than the {} in use then: not all of that temp was allocated at this instant.",
            fmt::bytes_u64(sum - in_use),
            fmt::bytes_u64(in_use)
        );
    }
    let rest = in_use - sum;
    match before {
        Some(b) if rest > 0 => {
            let held = rest.min(b);
            let mut s = format!(
                "{head} of the {} in use; {} held before attach (the allocator had {} in use at the attach; buffers made before it that no execute named are not in the capture)",
                fmt::bytes_u64(in_use),
                fmt::bytes_u64(held),
                fmt::bytes_u64(b)
            );
            if rest > held {
                s.push_str(&format!("; {} unexplained", fmt::bytes_u64(rest - held)));
            }
            s.push('.');
            s
        }
        _ => format!(
            "{head} of the {} in use; {} unexplained.",
            fmt::bytes_u64(in_use),
            fmt::bytes_u64(rest)
        ),
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "—".into(), |b| fmt::bytes(b as i64))
}

/// The panel for `device` of run `run`, or None when the run has no PJRT records for it.
pub async fn panel(
    store: &Store,
    run: i64,
    device: i64,
) -> Result<Option<RuntimePanel>, StoreError> {
    let Some(p) = peak_runtime(store, run, device, TOP).await? else {
        return Ok(None);
    };
    let total = p.peak_bytes_in_use.max(1);
    let before = crate::runs::pre_attach(store, run)
        .await?
        .get(&device)
        .and_then(|h| h.pool_in_use)
        .map(|b| b as u64);
    let mut compiled = Vec::new();
    if let Some(x) = &p.executable_stats {
        for (k, v) in [
            ("arguments", x.argument_bytes),
            ("outputs", x.output_bytes),
            ("aliased", x.alias_bytes),
            ("temp", x.temp_bytes),
            ("generated code", x.generated_code_bytes),
        ] {
            compiled.push((k.to_string(), opt(v)));
        }
    }
    Ok(Some(RuntimePanel {
        driver_basis: p.basis == "driver peak",
        executable: p
            .executable
            .clone()
            .unwrap_or_else(|| "(none recorded)".into()),
        running: p.running.join(", "),
        at: fmt::duration(p.ts_ns as i64),
        in_use: fmt::bytes(p.peak_bytes_in_use as i64),
        pool: opt(p.pool_bytes),
        limit: opt(p.bytes_limit),
        largest_free: opt(p.largest_free_block_bytes),
        accounted: accounted(
            p.live_buffer_bytes,
            p.running_temp_bytes,
            p.peak_bytes_in_use,
            before,
        ),
        fingerprint: p
            .executable_stats
            .as_ref()
            .map(|x| x.fingerprint.clone())
            .unwrap_or_default(),
        compiled,
        modules: p
            .by_xla_module
            .iter()
            .map(|s| ShareRow {
                module: s.module.clone(),
                executable: s.executable.clone(),
                role: s.role.clone(),
                bytes: fmt::bytes(s.bytes as i64),
                pct_int: (s.bytes.saturating_mul(100) / total).min(100),
            })
            .collect(),
        xla_module: p.xla_module.clone().unwrap_or_default(),
        matched_by: p.matched_by.clone().unwrap_or_default(),
        attached: p.xla_modules_attached,
        ops: OpRow::list(&p.by_hlo_op),
        categories: OpRow::list(&p.by_hlo_category),
        buffers: p
            .hlo_buffers
            .iter()
            .map(|b| BufferRow {
                instruction: b.instruction.clone(),
                shape: b.shape.clone(),
                bytes: fmt::bytes(b.bytes as i64),
                category: b.category.clone(),
                op_name: b.op_name.clone().unwrap_or_default(),
            })
            .collect(),
    }))
}
