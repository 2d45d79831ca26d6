//! `memwatch replay`: would this trace fit on that device, with that allocator?
//!
//! Owns argument handling and the choice of capacity / fraction / preallocation (here),
//! one replay run with its progress bar (`runner`), the report of one run (`output`:
//! human tables or one JSON document), and the modes that replay more than once:
//! `--compare-devices` (`compare`) and `--find-min-capacity` (`min_capacity`). The models, device table and
//! replay engine live in `memwatch_analysis::alloc`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use memwatch_analysis::alloc::device;
use memwatch_analysis::alloc::trace::MAX_POOL_BYTES;
use memwatch_analysis::alloc::AllocatorKind;

use super::Outcome;

mod compare;
mod min_capacity;
mod output;
mod runner;

use output::{dump_verdict, gaps_json, print_run, run_json};
use runner::{fraction_for, load_trace, resolve_device, run_one, Target};

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

pub use super::fmt::bytes as human;

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

    let target = if let Some(d) = &device_arg {
        Some(Target::of_device(d))
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
    if let Some(devices) = compare {
        let kind = kind.unwrap_or(AllocatorKind::Bfc);
        return compare::run(&args, &trace, &devices, kind, preallocate);
    }

    let target = target.context(
        "no capacity: give --device NAME or --capacity BYTES (the trace does not record one)",
    )?;

    if args.find_min_capacity {
        return min_capacity::run(&args, &trace, &target, kind, preallocate);
    }

    let kind = kind.unwrap_or(AllocatorKind::Bfc);
    let run = run_one(
        &trace,
        &target,
        kind,
        fraction_for(args.mem_fraction, kind, &target),
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
