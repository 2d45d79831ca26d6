//! `memwatch replay`: would this trace fit on that device, with that allocator?
//!
//! Owns argument handling, the choice of capacity / fraction / preallocation, the
//! progress bars and the report (human tables or one JSON document). The models, device
//! table and replay engine live in `memwatch_analysis::alloc`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use memwatch_analysis::alloc::device::{self, DeviceProfile};
use memwatch_analysis::alloc::replay::{self, ReplayOptions, ReplayResult};
use memwatch_analysis::alloc::trace::{self, Trace, MAX_POOL_BYTES};
use memwatch_analysis::alloc::{AllocatorKind, BlockState, ModelSpec};
use memwatch_analysis::doctor::need::{NeedVerdict, PoolNeed};
use serde_json::{json, Value};

use super::Outcome;

/// Arguments of `memwatch replay`.
#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  memwatch replay trace.jsonl --device mi300x
      Replay through XLA's BFC allocator with JAX's defaults (75% pool, preallocated).
  memwatch replay run.mwcap --device h100 --allocator torch --fail-on-oom
      Exit 1 if a PyTorch caching allocator on an H100 would run out of memory.
  memwatch replay trace.jsonl --capacity 68719476736 --mem-fraction 0.9 --steps --json
      Statistics after every event, as JSON (bytes as integers).
  memwatch replay trace.jsonl --device h100 --find-min-capacity
      Smallest pool (and capacity / memory fraction) that fits, for every allocator.
  memwatch replay trace.jsonl --compare-devices mi300x,strix-halo:vram=96G,h100,h200
      Side-by-side: fits or not on each device.
  memwatch replay bfc_seed12.json
      A bfc_validate.py document replays with its recorded pool limit and mode.

TRACE is JSON lines ({\"op\":\"alloc\",\"id\":7,\"size\":1048576,\"tag\":\"w\"} / {\"op\":\"free\",\"id\":7}),
a bfc_validate.py document, or a memwatch capture (.mwcap). Devices: mi300x, mi325x, mi355x,
h100, h200, strix-halo[:vram=SIZE,gtt=SIZE,mem=hipmalloc|managed,ram=SIZE,hip=aperture|unified|SIZE]
(Strix Halo: capacity = the smaller of what HIP reports and what the OS lets hipMalloc map;
managed memory: the GTT limit).")]
pub struct ReplayArgs {
    /// Trace file: JSON lines, a bfc_validate.py document, or a .mwcap capture.
    pub trace: PathBuf,
    /// Device profile (capacity from its table entry).
    #[arg(long, conflicts_with = "capacity")]
    pub device: Option<String>,
    /// Device capacity in bytes (units: K/M/G/T or KiB…EiB binary, KB…EB decimal).
    #[arg(long, allow_hyphen_values = true)]
    pub capacity: Option<String>,
    /// Allocator model: bfc (XLA's default, and this flag's), platform, async, torch; with
    /// --on-gpu also driver. --find-min-capacity without it tries all four.
    #[arg(long)]
    pub allocator: Option<String>,
    /// Fraction of the capacity the pool may use (default 0.75 for bfc/async as in JAX,
    /// 1.0 for platform/torch).
    #[arg(long, allow_hyphen_values = true)]
    pub mem_fraction: Option<f64>,
    /// Preallocate the pool (JAX's XLA_PYTHON_CLIENT_PREALLOCATE; default true).
    #[arg(long, action = clap::ArgAction::Set)]
    pub preallocate: Option<bool>,
    /// Report statistics after every event.
    #[arg(long)]
    pub steps: bool,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Search the smallest pool that fits (per allocator; all four unless --allocator).
    #[arg(long)]
    pub find_min_capacity: bool,
    /// Devices for a side-by-side table: comma-separated and/or repeated
    /// (`mi300x,h100,strix-halo:vram=64G,gtt=10G`).
    #[arg(long)]
    pub compare_devices: Option<Vec<String>>,
    /// Exit 1 when the trace does not fit.
    #[arg(long)]
    pub fail_on_oom: bool,
    /// For traces with several devices (captures, or JSON lines with `device`): which
    /// device's events to replay.
    #[arg(long)]
    pub trace_device: Option<i32>,
    /// Also replay the trace on this machine's GPU (real driver allocations, or the BFC
    /// model inside one real device region) and compare with the model; `--allocator
    /// driver` = the platform model with driver allocations. JSON: adds `on_gpu`.
    #[arg(long)]
    pub on_gpu: bool,
    #[command(flatten)]
    pub gpu: super::replay_gpu::GpuArgs,
}

/// Parses a byte count: a number with an optional unit (`80GiB`, `1.5G`, `1T`, `2TB`;
/// bare letters are binary).
pub fn parse_capacity(s: &str) -> Result<u64> {
    let t = s.trim();
    use memwatch_analysis::size::{parse_size, SizeError};
    let bytes = match parse_size(t) {
        Ok(b) => b,
        Err(SizeError::Negative(_)) => {
            bail!("--capacity {t:?}: must be a positive number of bytes")
        }
        Err(e) => bail!("--capacity {e}"),
    };
    if bytes == 0 {
        let fraction = t.chars().any(|c| c.is_ascii_digit() && c != '0');
        bail!(
            "--capacity {t:?}: {}must be a positive number of bytes",
            if fraction { "less than one byte; " } else { "" }
        );
    }
    if bytes > MAX_POOL_BYTES {
        bail!("--capacity {t:?}: larger than any device (the limit is 2^60 bytes, 1 EiB)");
    }
    Ok(bytes)
}

/// The devices of `--compare-devices`, which is repeatable and comma-separated. A device
/// spec has commas of its own (`strix-halo:vram=64G,gtt=10G`): a piece that is only
/// `key=value` continues the device before it.
pub fn split_device_list(values: &[String]) -> Result<Vec<String>> {
    let mut devices: Vec<String> = Vec::new();
    for value in values {
        // A spec's settings continue it only within one flag value.
        let mut in_value: Vec<String> = Vec::new();
        for piece in value.split(',').map(str::trim) {
            if piece.is_empty() {
                continue;
            }
            let continues = piece.contains('=') && !piece.contains(':');
            match in_value.last_mut() {
                Some(last) if continues && last.contains(':') => {
                    last.push(',');
                    last.push_str(piece);
                }
                _ if continues => bail!(
                    "--compare-devices: {piece:?} is a device setting without a device \
                     (write NAME:{piece})"
                ),
                _ => in_value.push(piece.to_string()),
            }
        }
        devices.extend(in_value);
    }
    if devices.is_empty() {
        bail!("--compare-devices: no device named");
    }
    Ok(devices)
}

/// Where the capacity came from.
#[derive(Clone, Debug)]
struct Target {
    label: String,
    capacity: u64,
    device: Option<DeviceProfile>,
    /// The trace recorded its own pool limit (bfc_validate documents).
    recorded: bool,
}

fn load_trace(path: &Path, device: Option<i32>) -> Result<Trace> {
    let bytes = std::fs::read(path).with_context(|| format!("reading trace {}", path.display()))?;
    trace::read_any(&bytes, device).with_context(|| format!("trace {}", path.display()))
}

fn default_fraction(kind: AllocatorKind) -> f64 {
    match kind {
        AllocatorKind::Bfc | AllocatorKind::Async => device::JAX_DEFAULT_MEM_FRACTION,
        AllocatorKind::Platform | AllocatorKind::Torch => 1.0,
    }
}

fn resolve_device(name: &str) -> Result<DeviceProfile> {
    device::resolve(name).with_context(|| format!("--device {name}"))
}

fn spec_for(kind: AllocatorKind, limit: u64, preallocate: bool, target: &Target) -> ModelSpec {
    ModelSpec {
        kind,
        limit,
        preallocate,
        granularity: target
            .device
            .as_ref()
            .map_or(device::DEFAULT_GRANULARITY, |d| d.granularity),
        device_free_bytes: None,
    }
}

fn progress_bar(len: u64, msg: &str, enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} events ({per_sec}, eta {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg.to_string());
    pb
}

/// Long replays get a progress bar (stderr, hidden when not a terminal).
const PROGRESS_MIN_EVENTS: usize = 1_000_000;

struct Run {
    target: Target,
    kind: AllocatorKind,
    fraction: f64,
    preallocate: bool,
    limit: u64,
    result: ReplayResult,
}

fn run_one(
    trace: &Trace,
    target: &Target,
    kind: AllocatorKind,
    fraction: f64,
    preallocate: bool,
    steps: bool,
) -> Result<Run> {
    let limit = if target.recorded && fraction == 1.0 {
        target.capacity
    } else {
        device::pool_limit(target.capacity, fraction)
    };
    if limit == 0 {
        bail!(
            "capacity {} x mem fraction {fraction} is a pool of 0 bytes",
            target.capacity
        );
    }
    let spec = spec_for(kind, limit, preallocate, target);
    let pb = progress_bar(
        trace.len() as u64,
        &format!("{} on {}", kind.name(), target.label),
        trace.len() >= PROGRESS_MIN_EVENTS,
    );
    let result = replay::replay_spec(
        trace,
        &spec,
        ReplayOptions {
            record_steps: steps,
            ..Default::default()
        },
        &mut |n| pb.set_position(n as u64),
    )
    .context("allocator model failed its own consistency check (a memwatch bug)")?;
    pb.finish_and_clear();
    Ok(Run {
        target: target.clone(),
        kind,
        fraction,
        preallocate,
        limit,
        result,
    })
}

fn run_json(run: &Run) -> Value {
    let r = &run.result;
    let mut v = json!({
        "fits": r.fits,
        "oom_step": r.oom_step,
        "peak_bytes_in_use": r.peak_bytes_in_use,
        "pool_bytes": run.limit,
        "peak_pool_bytes": r.peak_pool_bytes,
        "allocator": run.kind.name(),
        "device": run.target.device.as_ref().map(|d| d.name.clone()),
        "device_source": run.target.device.as_ref().map(|d| d.source),
        "device_capacity_measured": run.target.device.as_ref().map(|d| d.measured),
        "framework_reserve": run.target.device.as_ref().map(|d| d.framework_reserve),
        "capacity_bytes": run.target.capacity,
        "mem_fraction": run.fraction,
        "preallocate": run.preallocate,
        "events": r.events,
        "failed_allocs": r.failed_allocs,
        "oom": r.oom.as_ref().map(|o| json!({
            "index": o.index,
            "id": o.id,
            "size": o.size,
            "tag": o.tag,
            "bytes_in_use": o.bytes_in_use,
            "pool_bytes": o.pool_bytes,
            "limit": o.limit,
            "free_in_pool_bytes": o.free_in_pool_bytes,
            "unallocated_bytes": o.unallocated_bytes,
            "largest_free_block_bytes": o.largest_free_block_bytes,
            "live": o.live,
            "blocks": o.blocks.iter().map(|b| json!({
                "addr": b.addr, "size": b.size, "requested": b.requested,
                "in_use": b.state == BlockState::InUse, "label": b.label,
            })).collect::<Vec<_>>(),
        })),
    });
    if let Some(steps) = &r.steps {
        v["steps"] = serde_json::to_value(steps).unwrap_or(Value::Null);
    }
    v
}

pub use super::fmt::bytes as human;

/// What the capture could not deliver, for JSON (`null` when nothing was lost).
fn gaps_json(trace: &Trace) -> Value {
    if trace.meta.gaps.any() {
        serde_json::to_value(&trace.meta.gaps).unwrap_or(Value::Null)
    } else {
        Value::Null
    }
}

/// What an OOM dump's live set says about the recorded failure, whatever pool this replay
/// used: the live buffers plus the failed request against the pool the log states (the
/// doctor's one rule, [`PoolNeed`]).
struct DumpVerdict {
    live_buffers: usize,
    need: PoolNeed,
}

impl DumpVerdict {
    fn json(&self) -> Value {
        let n = &self.need;
        json!({
            "live_buffers": self.live_buffers,
            "live_bytes": n.live_bytes,
            "request_bytes": n.request_bytes,
            "need_bytes": n.need_bytes,
            "recorded_pool_bytes": n.pool_bytes,
            "short_by_bytes": n.short_by_bytes,
            "stated_limit_bytes": n.stated_limit_bytes,
            "verdict": n.verdict().name(),
        })
    }
}

fn dump_verdict(trace: &Trace) -> Option<DumpVerdict> {
    if trace.meta.format != "bfc_oom_dump" {
        return None;
    }
    let need = replay::peak_live_bytes(trace);
    let request = match trace.ops.last() {
        Some(trace::TraceOp::Alloc { size, .. }) => *size,
        _ => 0,
    };
    Some(DumpVerdict {
        live_buffers: trace.buffers().saturating_sub(1),
        need: PoolNeed::new(
            need.saturating_sub(request),
            request,
            trace.meta.bytes_limit,
            trace.meta.stated_limit,
        ),
    })
}

/// The trace's warning (lost data) and, for an OOM dump, its verdict against the
/// recorded pool: lines every text report shows.
fn print_trace_notes(trace: &Trace) -> anyhow::Result<()> {
    if let Some(g) = trace.meta.gaps.describe() {
        outln!("warning    {g}");
    }
    if let Some(d) = dump_verdict(trace) {
        let n = &d.need;
        outln!(
            "source     the log's OOM dump: {} live buffers ({}) + the failed request ({}) need {}",
            d.live_buffers,
            human(n.live_bytes),
            human(n.request_bytes),
            human(n.need_bytes)
        );
        let pool = n.pool_bytes.unwrap_or_default();
        match n.verdict() {
            NeedVerdict::PoolCouldNotGrow => outln!(
                "verdict    the pool had grown to {} of its {} limit and could not grow by the \
                 request: the device had no room for a new region (other processes, or memory \
                 the framework holds outside the pool), not a limit too small",
                human(pool),
                human(n.stated_limit_bytes.unwrap_or_default())
            ),
            NeedVerdict::PoolTooSmall => outln!(
                "verdict    the recorded pool of {} is short by at least {} (before any fragmentation)",
                human(pool),
                human(n.short_by_bytes.unwrap_or_default())
            ),
            NeedVerdict::Fragmentation => outln!(
                "verdict    packed without holes they fit in the recorded pool of {}: the real \
                 failure came from fragmentation",
                human(pool)
            ),
            NeedVerdict::PoolUnknown => outln!("verdict    the log does not state the pool's size"),
        }
    }
    Ok(())
}

fn print_run(run: &Run, trace: &Trace, path: &Path) -> anyhow::Result<()> {
    let r = &run.result;
    outln!(
        "trace      {} ({} format, {} events, {} buffers, peak live {})",
        path.display(),
        trace.meta.format,
        trace.len(),
        trace.buffers(),
        human(replay::peak_live_bytes(trace))
    );
    let mode = match run.kind {
        AllocatorKind::Bfc if run.preallocate => "XLA TSL BFC, preallocated, spatially partitioned",
        AllocatorKind::Bfc => "XLA TSL BFC, growing pool",
        AllocatorKind::Platform => "one driver allocation per buffer",
        AllocatorKind::Async => "stream-ordered pool (cudaMallocAsync / hipMallocAsync)",
        AllocatorKind::Torch => "PyTorch CUDA caching allocator",
    };
    outln!("allocator  {} ({mode})", run.kind.name());
    match &run.target.device {
        Some(d) => {
            outln!(
                "device     {} ({}): capacity {} x {} = pool {}",
                d.name,
                d.display,
                human(run.target.capacity),
                run.fraction,
                human(run.limit)
            );
            outln!("source     {}", d.source);
        }
        None => outln!(
            "capacity   {}{} x {} = pool {}",
            human(run.target.capacity),
            if run.target.recorded {
                " (recorded bytes_limit)"
            } else {
                ""
            },
            run.fraction,
            human(run.limit)
        ),
    }
    outln!(
        "peak       in use {}, reserved {}",
        human(r.peak_bytes_in_use),
        human(r.peak_pool_bytes)
    );
    print_trace_notes(trace)?;
    if dump_verdict(trace).is_some_and(|d| d.need.pool_bytes != Some(run.limit)) {
        outln!(
            "replayed   on a pool of {} instead (see result)",
            human(run.limit)
        );
    }
    match &r.oom {
        None => outln!("result     FITS"),
        Some(o) => {
            outln!(
                "result     OUT OF MEMORY at event {} ({} failed allocation{} in all)",
                o.index,
                r.failed_allocs,
                if r.failed_allocs == 1 { "" } else { "s" }
            );
            outln!(
                "failing    alloc id {} of {} ({} B){}",
                o.id,
                human(o.size),
                o.size,
                o.tag
                    .as_ref()
                    .map(|t| format!(", tag {t}"))
                    .unwrap_or_default()
            );
            let frag = if o.free_in_pool_bytes > 0 {
                100.0 * (1.0 - o.largest_free_block_bytes as f64 / o.free_in_pool_bytes as f64)
            } else {
                0.0
            };
            outln!(
                "memory     in use {} of pool {} (limit {}); free in pool {}, largest free block {} \
                 (fragmentation {frag:.0}%), not yet taken from the device {}",
                human(o.bytes_in_use),
                human(o.pool_bytes),
                human(o.limit),
                human(o.free_in_pool_bytes),
                human(o.largest_free_block_bytes),
                human(o.unallocated_bytes)
            );
            outln!("live set   {} buffers, largest first:", o.live.len());
            outln!(
                "  {:>12}  {:>12}  {:>14}  tag",
                "id",
                "allocated",
                "requested B"
            );
            for b in o.live.iter().take(15) {
                outln!(
                    "  {:>12}  {:>12}  {:>14}  {}",
                    b.id,
                    human(b.allocated),
                    b.size,
                    b.tag.as_deref().unwrap_or("-")
                );
            }
            if o.live.len() > 15 {
                let rest: u64 = o.live[15..].iter().map(|b| b.allocated).sum();
                outln!("  ... {} more, {}", o.live.len() - 15, human(rest));
            }
            if !o.blocks.is_empty() && o.blocks.len() <= 64 {
                outln!("layout     (address order, like the allocator's own dump)");
                let base = o.blocks[0].addr;
                for b in &o.blocks {
                    outln!(
                        "  {} at +{:#012x} of size {:>12} ({:>10}) {}",
                        if b.state == BlockState::InUse {
                            "InUse"
                        } else {
                            "Free "
                        },
                        b.addr - base,
                        b.size,
                        human(b.size),
                        b.label
                    );
                }
            }
        }
    }
    if let Some(steps) = &r.steps {
        outln!();
        outln!(
            "{:>8}  {:>5}  {:>14}  {:>14}  {:>14}",
            "step",
            "op",
            "size B",
            "in use B",
            "largest free B"
        );
        for (i, (s, op)) in steps.iter().zip(&trace.ops).enumerate() {
            let (name, size) = match *op {
                trace::TraceOp::Alloc { size, .. } => ("alloc", size.to_string()),
                trace::TraceOp::Free { .. } => ("free", String::new()),
            };
            outln!(
                "{i:>8}  {name:>5}  {size:>14}  {:>14}  {:>14}",
                s.bytes_in_use,
                s.largest_free_block_bytes
            );
        }
    }
    Ok(())
}

/// Runs `memwatch replay`.
pub fn run(mut args: ReplayArgs) -> Result<Outcome> {
    super::fmt::quiet_broken_pipe();
    if args.on_gpu {
        if args.compare_devices.is_some() || args.find_min_capacity {
            bail!(
                "--on-gpu replays one configuration: drop --compare-devices / --find-min-capacity"
            );
        }
        super::replay_gpu::prepare_replay_args(
            &mut args.allocator,
            &mut args.device,
            &mut args.capacity,
            &args.gpu,
        )?;
    }
    if let Some(f) = args.mem_fraction {
        if !(f.is_finite() && f > 0.0 && f <= 1.0) {
            bail!("--mem-fraction {f}: must be in (0, 1]");
        }
    }
    let kind = match &args.allocator {
        Some(a) => Some(AllocatorKind::parse(a).with_context(|| {
            format!("--allocator {a:?}: expected bfc, platform, async or torch")
        })?),
        None => None,
    };
    let capacity_arg = args.capacity.as_deref().map(parse_capacity).transpose()?;
    let device_arg = args.device.as_deref().map(resolve_device).transpose()?;
    let compare = args
        .compare_devices
        .as_ref()
        .map(|values| {
            split_device_list(values)?
                .into_iter()
                .map(|n| {
                    device::resolve(&n)
                        .with_context(|| format!("--compare-devices {n}"))
                        .map(|d| (n, d))
                })
                .collect::<Result<Vec<_>>>()
        })
        .transpose()?;
    let trace = load_trace(&args.trace, args.trace_device)?;
    let gaps = trace.meta.gaps.describe();
    if let Some(g) = &gaps {
        eprintln!("memwatch replay: warning: {}: {g}", args.trace.display());
    }
    let preallocate = args.preallocate.or(trace.meta.preallocate).unwrap_or(true);

    let target_of = |d: &DeviceProfile| Target {
        label: d.name.clone(),
        capacity: d.capacity_bytes,
        device: Some(d.clone()),
        recorded: false,
    };
    let target = if let Some(d) = &device_arg {
        Some(target_of(d))
    } else if let Some(c) = capacity_arg {
        Some(Target {
            label: human(c),
            capacity: c,
            device: None,
            recorded: false,
        })
    } else if let Some(limit) = trace.meta.bytes_limit {
        Some(Target {
            label: "recorded pool".into(),
            capacity: limit,
            device: None,
            recorded: true,
        })
    } else {
        trace.meta.device_total_bytes.map(|c| Target {
            label: trace
                .meta
                .device_name
                .clone()
                .unwrap_or_else(|| "captured device".into()),
            capacity: c,
            device: None,
            recorded: false,
        })
    };
    let fraction_for = |k: AllocatorKind, t: &Target| {
        args.mem_fraction
            .unwrap_or(if t.recorded { 1.0 } else { default_fraction(k) })
    };

    if let Some(devices) = compare {
        let kind = kind.unwrap_or(AllocatorKind::Bfc);
        let mut runs = Vec::new();
        for (spec, d) in &devices {
            // The spec as given: two strix-halo settings must be told apart.
            let t = Target {
                label: spec.clone(),
                ..target_of(d)
            };
            runs.push(run_one(
                &trace,
                &t,
                kind,
                fraction_for(kind, &t),
                preallocate,
                false,
            )?);
        }
        let all_fit = runs.iter().all(|r| r.result.fits);
        if args.json {
            let doc = json!({
                "fits": all_fit,
                "trace_gaps": gaps_json(&trace),
                "oom_dump": dump_verdict(&trace).map(|v| v.json()),
                "devices": runs.iter().map(run_json).collect::<Vec<_>>(),
            });
            outln!("{doc}");
        } else {
            outln!(
                "trace {} ({} events, peak live {}), allocator {}",
                args.trace.display(),
                trace.len(),
                human(replay::peak_live_bytes(&trace)),
                kind.name()
            );
            print_trace_notes(&trace)?;
            outln!(
                "{:<22} {:>12} {:>6} {:>12} {:>6} {:>10} {:>12} {:>12}",
                "device",
                "capacity",
                "frac",
                "pool",
                "fits",
                "oom at",
                "peak in use",
                "peak held"
            );
            for r in &runs {
                outln!(
                    "{:<22} {:>12} {:>6} {:>12} {:>6} {:>10} {:>12} {:>12}",
                    r.target.label,
                    human(r.target.capacity),
                    r.fraction,
                    human(r.limit),
                    if r.result.fits { "yes" } else { "NO" },
                    r.result.oom_step.map_or("-".to_string(), |s| s.to_string()),
                    human(r.result.peak_bytes_in_use),
                    human(r.result.peak_pool_bytes)
                );
            }
        }
        return Ok(if args.fail_on_oom && !all_fit {
            Outcome::CheckFailed
        } else {
            Outcome::Success
        });
    }

    let target = target.context(
        "no capacity: give --device NAME or --capacity BYTES (the trace does not record one)",
    )?;

    if args.find_min_capacity {
        let kinds: Vec<AllocatorKind> = match kind {
            Some(k) => vec![k],
            None => AllocatorKind::ALL.to_vec(),
        };
        let mut rows = Vec::new();
        for k in kinds {
            let fraction = fraction_for(k, &target);
            let pb = progress_bar(trace.len() as u64, &format!("min pool, {}", k.name()), true);
            let t2 = target.clone();
            let make = move |limit: u64| spec_for(k, limit, preallocate, &t2);
            // Up to 64 x the peak, never past the largest pool the models take.
            let max_limit = replay::peak_live_bytes(&trace)
                .saturating_mul(64)
                .clamp(1 << 30, MAX_POOL_BYTES);
            let found = replay::find_min_limit(&trace, &make, 1 << 20, max_limit, &mut |n, e| {
                pb.set_message(format!("min pool, {}, replay {n}", k.name()));
                pb.set_position(e as u64);
            })
            .context("allocator model failed its own consistency check (a memwatch bug)")?;
            pb.finish_and_clear();
            rows.push((k, fraction, found));
        }
        let base = if target.recorded {
            None
        } else {
            Some(target.capacity)
        };
        if args.json {
            let list: Vec<Value> = rows
                .iter()
                .map(|(k, f, m)| {
                    json!({
                        "allocator": k.name(),
                        "mem_fraction": f,
                        "min_pool_bytes": m.map(|m| m.min_pool_bytes),
                        "min_capacity_bytes": m.map(|m| (m.min_pool_bytes as f64 / f).ceil() as u64),
                        "min_mem_fraction": m.and_then(|m| base.map(|c| m.min_pool_bytes as f64 / c as f64)),
                        "resolution_bytes": m.map(|m| m.resolution),
                        "exact": m.map(|m| m.exact),
                        "replays": m.map(|m| m.replays),
                    })
                })
                .collect();
            outln!(
                "{}",
                json!({
                    "peak_live_bytes": replay::peak_live_bytes(&trace),
                    "trace_gaps": gaps_json(&trace),
                    "oom_dump": dump_verdict(&trace).map(|v| v.json()),
                    "min_capacity": list,
                })
            );
        } else {
            outln!(
                "trace {} ({} events, peak live {}); smallest pool that fits:",
                args.trace.display(),
                trace.len(),
                human(replay::peak_live_bytes(&trace))
            );
            print_trace_notes(&trace)?;
            outln!(
                "{:<9} {:>14} {:>6} {:>16} {:>14} {:>8}  how",
                "allocator",
                "min pool",
                "frac",
                "min capacity",
                "min fraction",
                "replays"
            );
            for (k, f, m) in &rows {
                match m {
                    Some(m) => outln!(
                        "{:<9} {:>14} {:>6} {:>16} {:>14} {:>8}  {}",
                        k.name(),
                        human(m.min_pool_bytes),
                        f,
                        human((m.min_pool_bytes as f64 / f).ceil() as u64),
                        base.map_or("-".into(), |c| format!(
                            "{:.4}",
                            m.min_pool_bytes as f64 / c as f64
                        )),
                        m.replays,
                        if m.exact {
                            "exact (from one run, verified)".to_string()
                        } else {
                            format!("bisection to {}", human(m.resolution))
                        }
                    ),
                    None => outln!("{:<9} {:>14}", k.name(), "none found"),
                }
            }
        }
        return Ok(Outcome::Success);
    }

    let kind = kind.unwrap_or(AllocatorKind::Bfc);
    let run = run_one(
        &trace,
        &target,
        kind,
        fraction_for(kind, &target),
        preallocate,
        args.steps,
    )?;
    let gpu = if args.on_gpu {
        let g = super::replay_gpu::run_for_replay(
            &trace,
            &args.gpu,
            kind,
            run.limit,
            run.fraction,
            preallocate,
        )
        .with_context(|| format!("trace {}: --on-gpu", args.trace.display()))?;
        Some(g)
    } else {
        None
    };
    if args.json {
        let mut v = run_json(&run);
        v["trace_gaps"] = gaps_json(&trace);
        if let Some(d) = dump_verdict(&trace) {
            v["oom_dump"] = d.json();
        }
        if let Some(g) = &gpu {
            v["on_gpu"] = serde_json::to_value(g).context("serialising the GPU report")?;
        }
        outln!("{v}");
    } else {
        print_run(&run, &trace, &args.trace)?;
        if let Some(g) = &gpu {
            outln!();
            out!("{}", super::replay_gpu::render(g));
        }
    }
    let real_fits = gpu.as_ref().is_none_or(|g| g.real.fits);
    Ok(if gpu.as_ref().is_some_and(|g| g.real.interrupted) {
        Outcome::Code(130)
    } else if args.fail_on_oom && !(run.result.fits && real_fits) {
        Outcome::CheckFailed
    } else {
        Outcome::Success
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_parse() {
        assert_eq!(parse_capacity("1024").unwrap(), 1024);
        assert_eq!(parse_capacity("80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_capacity("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_capacity("1T").unwrap(), 1 << 40);
        assert_eq!(parse_capacity("1EiB").unwrap(), 1 << 60);
        assert!(parse_capacity("2EiB").is_err());
        assert!(parse_capacity("0").is_err());
        assert!(parse_capacity("0.1").is_err());
        assert!(parse_capacity("-5").is_err());
        assert!(parse_capacity("lots").is_err());
    }

    #[test]
    fn device_lists_keep_a_devices_own_commas() {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            split_device_list(&v(&["mi300x,strix-halo:vram=64G,gtt=10G,h100"])).unwrap(),
            ["mi300x", "strix-halo:vram=64G,gtt=10G", "h100"]
        );
        assert_eq!(
            split_device_list(&v(&["h100", "strix-halo:vram=64G,gtt=10G,mem=managed"])).unwrap(),
            ["h100", "strix-halo:vram=64G,gtt=10G,mem=managed"]
        );
        let e = split_device_list(&v(&["h100,gtt=10G"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gtt=10G") && e.contains("without a device"),
            "{e}"
        );
        assert!(split_device_list(&v(&[","])).is_err());
    }
}
