//! What the doctor reads, and how each piece is loaded: a capture (driver events, PJRT
//! records, device samples), the program's stderr logs, an XLA dump (compiled modules,
//! and the modules whose compile never finished: only their `before_optimizations` HLO),
//! device memory samples (`nvidia-smi` CSV), framework allocator states (the input a
//! PyTorch snapshot reader fills), and the run's own facts (exit status, the allocator
//! settings in its environment). Every piece is optional; the engine says which were
//! missing and what they would have added.

use super::DoctorError;
use crate::capture::{self, Loaded};
use crate::live::LiveHistory;
use crate::log::{self, LogReport};
use crate::nvsmi::parse_time as parse_nvsmi_time;
use crate::runtime::{self, RuntimeCapture};
use crate::xla::{self, hlo::HloModule, ModuleReport};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A capture, loaded once: its events sorted by time (the order the runtime carried them
/// out), its PJRT part on the runtime's time base, and the history of its driver-level
/// live set (peaks, and what was live at any instant).
#[derive(Debug)]
pub struct CaptureEvidence {
    pub loaded: Loaded,
    pub runtime: RuntimeCapture,
    /// The events (in the order of `loaded.events`) folded through the live set, with
    /// the device allocations' lifetimes.
    pub live: LiveHistory,
}

impl CaptureEvidence {
    /// Reads a capture file (damaged regions are salvaged and reported, not fatal).
    pub fn read(path: &Path) -> Result<Self, DoctorError> {
        let loaded = capture::load_path(path, &mut |_| {})?;
        Ok(Self::from_loaded(loaded))
    }

    /// Takes an already loaded capture, and folds its live set.
    pub fn from_loaded(mut loaded: Loaded) -> Self {
        // Stable, like the report's own sort: equal times keep file order.
        loaded.events.sort_by_key(|e| e.ts);
        let live = LiveHistory::fold(
            loaded
                .events
                .iter()
                .map(|e| (loaded.mem_event(e), e.ts, e.stream)),
        );
        Self::from_folded(loaded, live)
    }

    /// Takes a capture whose events are already in time order and their fold
    /// (`memwatch run` folds it while the run writes it); a fold that did not keep the
    /// lifetimes is done again.
    pub fn from_folded(loaded: Loaded, live: LiveHistory) -> Self {
        if !live.keeps_lifetimes() {
            return Self::from_loaded(loaded);
        }
        let runtime = runtime::load::from_loaded(&loaded);
        Self {
            loaded,
            runtime,
            live,
        }
    }

    /// The capture's path as given.
    pub fn path(&self) -> String {
        self.loaded.path.display().to_string()
    }

    /// Raw monotonic ns of a runtime time (runtime times are relative to its origin).
    pub fn raw(&self, runtime_ts: u64) -> u64 {
        runtime_ts.saturating_add(self.runtime.origin_ns)
    }

    /// The runtime time of a raw monotonic time.
    pub fn runtime_ts_of(&self, raw: u64) -> u64 {
        raw.saturating_sub(self.runtime.origin_ns)
    }
}

/// The program's logs, parsed together.
#[derive(Debug, Default)]
pub struct LogEvidence {
    pub report: LogReport,
    /// Files read that held nothing memwatch knows (no log prefix, no memory message),
    /// with why.
    pub not_understood: Vec<(PathBuf, String)>,
}

impl LogEvidence {
    /// Parses log files. A text file with nothing memwatch knows is kept as
    /// `not_understood` (the diagnosis says so); a binary or unreadable file is an error.
    pub fn read(paths: &[PathBuf]) -> Result<Self, DoctorError> {
        let mut out = LogEvidence::default();
        for p in paths {
            let f = std::fs::File::open(p).map_err(|e| DoctorError::Io {
                path: p.clone(),
                err: e,
            })?;
            let mut one = LogReport::default();
            match log::parse_log(std::io::BufReader::with_capacity(1 << 20, f), p, &mut one) {
                Ok(()) => merge(&mut out.report, one),
                Err(e) if e.msg.starts_with("not an XLA") || e.msg.starts_with("empty") => {
                    out.report.files.push(p.display().to_string());
                    out.report.lines += one.lines;
                    out.not_understood.push((p.clone(), e.msg));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }
}

/// Appends one file's report to the whole.
fn merge(all: &mut LogReport, one: LogReport) {
    all.files.extend(one.files);
    all.lines += one.lines;
    all.devices.extend(one.devices);
    all.remat_warnings.extend(one.remat_warnings);
    all.ooms.extend(one.ooms);
    all.allocator_stats.extend(one.allocator_stats);
    all.resource_exhausted.extend(one.resource_exhausted);
    all.pool_allocations.extend(one.pool_allocations);
    all.memory_analyses.extend(one.memory_analyses);
    all.scratch_refusals.extend(one.scratch_refusals);
    all.autotune_failures.extend(one.autotune_failures);
    all.torch_ooms.extend(one.torch_ooms);
    all.cupy_ooms.extend(one.cupy_ooms);
    all.device_alloc_failures.extend(one.device_alloc_failures);
    all.driver_errors.extend(one.driver_errors);
    all.exceptions.extend(one.exceptions);
    all.arguments_over_limit.extend(one.arguments_over_limit);
    if one.xla_allocator.is_some() {
        all.xla_allocator = one.xla_allocator;
    }
}

/// A module whose compile did not finish: the dump has its HLO before optimization
/// only (no buffer assignment).
#[derive(Debug)]
pub struct UncompiledModule {
    pub name: String,
    pub id: Option<u64>,
    pub file: PathBuf,
    pub hlo: HloModule,
    /// Bytes of the ENTRY parameters (the arguments), when every shape is known.
    pub argument_bytes: Option<u64>,
}

/// An XLA dump.
#[derive(Debug, Default)]
pub struct DumpEvidence {
    pub dir: PathBuf,
    /// Compiled modules (after optimizations, with buffer assignments).
    pub modules: Vec<ModuleReport>,
    /// Modules with a `before_optimizations` file and no buffer assignment.
    pub uncompiled: Vec<UncompiledModule>,
}

impl DumpEvidence {
    /// Loads a dump directory.
    pub fn read(dir: &Path) -> Result<Self, DoctorError> {
        if !dir.is_dir() {
            return Err(DoctorError::NotADump {
                path: dir.to_path_buf(),
                msg: "not a directory (give the run's --xla_dump_to folder)".into(),
            });
        }
        let modules = match xla::load_dump_dir(dir) {
            Ok(m) => m,
            Err(xla::XlaError::NoModules { .. }) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let compiled: std::collections::HashSet<(Option<u64>, String)> = xla::list_modules(dir)?
            .into_iter()
            .map(|f| (f.id, f.name))
            .collect();
        let mut uncompiled = Vec::new();
        let rd = std::fs::read_dir(dir).map_err(|err| DoctorError::Io {
            path: dir.to_path_buf(),
            err,
        })?;
        let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for p in files {
            let Some(fname) = p.file_name().and_then(|f| f.to_str()) else {
                continue;
            };
            let Some(prefix) = fname.strip_suffix(".before_optimizations.txt") else {
                continue;
            };
            let (name, id, _) = xla::dump::split_module_prefix(prefix);
            if compiled.contains(&(id, name.clone())) {
                continue;
            }
            let f = std::fs::File::open(&p).map_err(|err| DoctorError::Io {
                path: p.clone(),
                err,
            })?;
            let hlo = xla::hlo::parse_hlo(std::io::BufReader::new(f), &p)?;
            let argument_bytes = entry_parameter_bytes(&hlo);
            uncompiled.push(UncompiledModule {
                name,
                id,
                file: p,
                hlo,
                argument_bytes,
            });
        }
        if modules.is_empty() && uncompiled.is_empty() {
            return Err(DoctorError::NotADump {
                path: dir.to_path_buf(),
                msg: "no XLA modules here (dump with XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text)"
                    .into(),
            });
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            modules,
            uncompiled,
        })
    }
}

/// Bytes of an HLO shape (`f32[16384,16384]{1,0}`, `(f32[4], s32[])`); `None` for a type
/// this does not know.
pub fn shape_bytes(shape: &str) -> Option<u64> {
    let s = shape.trim();
    if let Some(inner) = s.strip_prefix('(') {
        let inner = inner.strip_suffix(')').unwrap_or(inner);
        let mut total = 0u64;
        let mut depth = 0i32;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    total = total.checked_add(shape_bytes(&inner[start..i])?)?;
                    start = i + 1;
                }
                _ => {}
            }
        }
        if !inner[start..].trim().is_empty() {
            total = total.checked_add(shape_bytes(&inner[start..])?)?;
        }
        return Some(total);
    }
    let (ty, rest) = s.split_once('[')?;
    let dims = rest.split(']').next()?;
    let bits: u64 = match ty.trim() {
        "pred" | "s8" | "u8" => 8,
        "s4" | "u4" | "f4e2m1fn" => 4,
        "s16" | "u16" | "f16" | "bf16" => 16,
        "s32" | "u32" | "f32" => 32,
        "s64" | "u64" | "f64" | "c64" => 64,
        "c128" => 128,
        t if t.starts_with("f8") => 8,
        _ => return None,
    };
    let mut n: u64 = 1;
    for d in dims.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        n = n.checked_mul(d.trim_start_matches("<=").parse().ok()?)?;
    }
    n.checked_mul(bits).map(|b| b.div_ceil(8))
}

fn entry_parameter_bytes(m: &HloModule) -> Option<u64> {
    let params: Vec<_> = m
        .instructions
        .values()
        .filter(|i| i.in_entry && i.opcode == "parameter")
        .collect();
    if params.is_empty() {
        return None;
    }
    params
        .iter()
        .try_fold(0u64, |a, i| a.checked_add(shape_bytes(&i.shape)?))
}

/// Device memory readings of one device from one source.
#[derive(Debug, Clone, Default)]
pub struct DeviceSeries {
    /// The file (or `CAPTURE (nvml)` for the capture's own readings).
    pub source: String,
    /// The device: nvidia-smi's index (NVML's), or for the capture's readings the
    /// capture's device ordinal when it could be matched ([`capture_device_series`]).
    pub device: i32,
    /// (unix ns when known, else capture-relative ns; used bytes; total bytes).
    pub samples: Vec<(u64, u64, u64)>,
    /// Whether the times are wall-clock (unix) ns.
    pub wall_clock: bool,
    /// How each sample splits between the run's processes and the rest, read at the
    /// sample's own instant: one entry per sample (`None`: the processes were not read
    /// then), or empty when the source has no per-process figures (nvidia-smi's
    /// `--query-gpu` CSV).
    pub splits: Vec<Option<SampleSplit>>,
}

/// One sample's device use split at its instant: the run's process tree against
/// everything else (`watched_bytes + other_bytes` = the sample's used bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleSplit {
    /// The run's processes (the watched tree), as the driver counts them (allocations,
    /// context, module code).
    pub watched_bytes: u64,
    /// The device's use minus `watched_bytes`: other processes and what the driver holds
    /// outside any process.
    pub other_bytes: u64,
    /// Every process listed: (pid, bytes when known, in the watched tree).
    pub processes: Vec<(u32, Option<u64>, bool)>,
    /// Taken at once because a failed allocation arrived.
    pub at_failure: bool,
}

impl DeviceSeries {
    /// Each sample with its split, in time order: (time, used, total, split).
    pub fn with_splits(&self) -> impl Iterator<Item = (u64, u64, u64, Option<&SampleSplit>)> {
        self.samples
            .iter()
            .enumerate()
            .map(|(i, s)| (s.0, s.1, s.2, self.splits.get(i).and_then(Option::as_ref)))
    }

    /// The sample with the most memory held by others, with its split (taken at the
    /// same instant as its used bytes).
    pub fn others_peak(&self) -> Option<(u64, &SampleSplit)> {
        self.with_splits()
            .filter_map(|(t, _, _, s)| Some((t, s?)))
            .max_by_key(|(t, s)| (s.other_bytes, std::cmp::Reverse(*t)))
    }

    /// The last sample at or before `ts` that has a split (same time base as
    /// `samples`).
    pub fn split_at(&self, ts: u64) -> Option<(u64, &SampleSplit)> {
        self.with_splits()
            .filter(|(t, ..)| *t <= ts)
            .filter_map(|(t, _, _, s)| Some((t, s?)))
            .last()
    }

    /// The most memory any sample saw in use.
    pub fn max_used(&self) -> Option<u64> {
        self.samples.iter().map(|s| s.1).max()
    }

    /// The device's total as sampled.
    pub fn total(&self) -> Option<u64> {
        self.samples.iter().map(|s| s.2).max()
    }
}

/// The device samples an agent's sampler wrote into a capture (`device_sample` records,
/// CLOCK_MONOTONIC): one series per device, VRAM only, in time order, on the capture's
/// time base (ns since `Loaded::base_ns`, as [`DeviceSeries`] keeps non-wall-clock times).
pub fn capture_series(loaded: &Loaded) -> Vec<DeviceSeries> {
    let base = loaded.base_ns();
    let mut out: Vec<DeviceSeries> = Vec::new();
    for s in loaded.device_samples.iter().filter(|s| s.memory == 0) {
        let k = match out.iter().position(|x| x.device == s.device) {
            Some(k) => k,
            None => {
                out.push(DeviceSeries {
                    source: format!("{} ({})", loaded.path.display(), s.source),
                    device: s.device,
                    samples: Vec::new(),
                    wall_clock: false,
                    splits: Vec::new(),
                });
                out.len() - 1
            }
        };
        out[k]
            .samples
            .push((s.ts_ns.saturating_sub(base), s.used_bytes, s.total_bytes));
    }
    for x in &mut out {
        x.samples.sort_unstable();
    }
    out
}

/// The capture's own device readings (`memwatch run` / `attach` sampled NVML or ROCm
/// SMI into it) as device series with a split per sample; empty when the capture has
/// none (no readings: no series, never zeros). Times are ns since the capture's start
/// (`Loaded::base_ns`, the time base of its events; `device_readings::time_base`). Each
/// series is named by the device ordinal the run's processes knew it by
/// (`device_readings::capture_ordinals`: by UUID, then PCI bus id, then ordinal; a
/// process under CUDA_VISIBLE_DEVICES=1 saw the second GPU as device 0); a sampled
/// device that was none of the run's is left out. A capture whose processes described no
/// device keeps the library's index (NVML's PCI order).
pub fn capture_device_series(loaded: &Loaded) -> Vec<DeviceSeries> {
    let devices = crate::device_readings::by_device(loaded);
    let base = crate::device_readings::time_base(loaded);
    let ordinals = crate::device_readings::capture_ordinals(loaded, &devices);
    devices
        .iter()
        .zip(ordinals)
        .filter_map(|(d, ordinal)| Some((d, ordinal?)))
        .map(|(d, ordinal)| DeviceSeries {
            source: format!("{} ({})", loaded.path.display(), d.source),
            device: ordinal,
            samples: d
                .readings
                .iter()
                .map(|r| (r.ts_ns.saturating_sub(base), r.used_bytes, r.total_bytes))
                .collect(),
            wall_clock: false,
            splits: d
                .readings
                .iter()
                .map(|r| {
                    let watched = r.watched_bytes?;
                    Some(SampleSplit {
                        watched_bytes: watched,
                        other_bytes: r.used_bytes.saturating_sub(watched),
                        processes: r
                            .processes
                            .iter()
                            .flatten()
                            .map(|p| (p.pid, p.bytes(), p.watched()))
                            .collect(),
                        at_failure: r.at_failure,
                    })
                })
                .collect(),
        })
        .collect()
}

/// Adds the capture's own device readings to the evidence's device samples (once: a
/// second call adds nothing).
pub fn add_capture_samples(ev: &mut Evidence) {
    let Some(c) = &ev.capture else {
        return;
    };
    let series = capture_device_series(&c.loaded);
    if ev
        .device_samples
        .iter()
        .any(|s| series.iter().any(|x| x.source == s.source))
    {
        return;
    }
    ev.device_samples.extend(series);
}

/// Reads `nvidia-smi --query-gpu=timestamp,memory.used,memory.total
/// --format=csv,noheader,nounits` output (MiB; one line per sample and GPU in index
/// order), or the same with the GPU's index first (`--query-gpu=index,timestamp,...`,
/// what a multi-GPU recording should use: no order to infer). The index is NVML's, not
/// a process's CUDA ordinal. Times are read as UTC (nvidia-smi prints local time;
/// memwatch's device machines run in UTC).
pub fn read_nvsmi_csv(path: &Path) -> Result<Vec<DeviceSeries>, DoctorError> {
    let text = std::fs::read_to_string(path).map_err(|err| DoctorError::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let mut series: Vec<DeviceSeries> = Vec::new();
    let mut last_ts: Option<u64> = None;
    let mut gpu = 0usize;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |msg: &str| DoctorError::Samples {
            path: path.to_path_buf(),
            line: i + 1,
            msg: msg.to_string(),
        };
        let mut f: Vec<&str> = line.split(',').map(str::trim).collect();
        let index = match f.len() {
            4 => Some(
                f.remove(0)
                    .parse::<i32>()
                    .map_err(|_| bad("the GPU index is not a number"))?,
            ),
            3 => None,
            _ => return Err(bad("expected `[index,] timestamp, memory.used, memory.total` (nvidia-smi --query-gpu=timestamp,memory.used,memory.total --format=csv,noheader,nounits)")),
        };
        let ts = parse_nvsmi_time(f[0])
            .ok_or_else(|| bad("timestamp is not `YYYY/MM/DD HH:MM:SS.mmm`"))?;
        let mib = |s: &str| s.parse::<u64>().ok().map(|v| v << 20);
        let (Some(used), Some(total)) = (mib(f[1]), mib(f[2])) else {
            return Err(bad("memory.used / memory.total are not whole MiB"));
        };
        // Without an index, several GPUs print one line each with the same time, in
        // index order.
        let device = match index {
            Some(i) => i,
            None => {
                gpu = if last_ts == Some(ts) { gpu + 1 } else { 0 };
                last_ts = Some(ts);
                gpu as i32
            }
        };
        let k = match series.iter().position(|s| s.device == device) {
            Some(k) => k,
            None => {
                series.push(DeviceSeries {
                    source: path.display().to_string(),
                    device,
                    samples: Vec::new(),
                    wall_clock: true,
                    splits: Vec::new(),
                });
                series.len() - 1
            }
        };
        series[k].samples.push((ts, used, total));
    }
    if series.is_empty() {
        return Err(DoctorError::Samples {
            path: path.to_path_buf(),
            line: 0,
            msg: "no samples".into(),
        });
    }
    Ok(series)
}

/// Whether a text looks like nvidia-smi's CSV (its first line).
pub fn looks_like_nvsmi(first_line: &str) -> bool {
    let f: Vec<&str> = first_line.split(',').map(str::trim).collect();
    let f = match f.len() {
        4 if f[0].parse::<u32>().is_ok() => &f[1..],
        _ => &f[..],
    };
    f.len() == 3 && parse_nvsmi_time(f[0]).is_some() && f[1].parse::<u64>().is_ok()
}

/// A framework allocator's state at the failure, from a source that records it (a
/// PyTorch memory snapshot: `super::snapshot`).
#[derive(Debug, Clone, Default)]
pub struct FrameworkState {
    /// The file it came from.
    pub source: String,
    pub device: i32,
    /// Bytes handed to tensors (at the end of the source).
    pub allocated_bytes: u64,
    /// Bytes the allocator holds from the device.
    pub reserved_bytes: u64,
    /// The largest free block inside the reserved segments of the failed request's pool.
    pub largest_free_block_bytes: Option<u64>,
    /// Allocated bytes at the start of each step, when the source knows steps.
    pub allocated_per_step: Vec<u64>,
    /// The last out-of-memory failure the source recorded.
    pub oom: Option<FrameworkOom>,
    /// `expandable_segments` as the allocator ran (`None`: not recorded).
    pub expandable_segments: Option<bool>,
    /// `PYTORCH_CUDA_ALLOC_CONF` as the process saw it.
    pub alloc_conf: Option<String>,
}

/// An out-of-memory failure as the framework's allocator recorded it (exact bytes).
#[derive(Debug, Clone, Default)]
pub struct FrameworkOom {
    /// What the failed allocation asked for.
    pub request_bytes: u64,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// Reserved but not allocated: cached free space and blocks waiting for streams.
    pub reserved_unallocated_bytes: u64,
    /// The largest free block of the pool the request needed (`small` / `large`).
    pub largest_free_block_bytes: u64,
    pub pool: String,
    /// Free device memory the driver reported (all processes).
    pub device_free_bytes: u64,
    /// Seconds from the start of the source's trace.
    pub at_s: f64,
    /// The innermost Python frame outside the framework: `file:line in function`.
    pub python_frame: Option<String>,
    /// The failing stack's site as the source names it (a Python line, an autograd
    /// node, an operator).
    pub site: Option<String>,
}

/// What the run itself says: how it ended, and the allocator settings it ran with.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Environment variables that configure allocators (see [`ALLOCATOR_ENV`]).
    pub env: BTreeMap<String, String>,
}

/// The capture tags in which `memwatch run` records how its command ended (an exit
/// status, or the signal that killed it), so a later `memwatch diagnose` of the file knows
/// it as the run did.
pub const COMMAND_EXIT_TAG: &str = "command.exit_code";
pub const COMMAND_SIGNAL_TAG: &str = "command.signal";

/// The environment variables that decide how frameworks allocate device memory.
pub const ALLOCATOR_ENV: [&str; 10] = [
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_CLIENT_PREALLOCATE",
    "TF_GPU_ALLOCATOR",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
];

impl RunFacts {
    /// The XLA memory fraction the run set, if any.
    pub fn xla_fraction(&self) -> Option<f64> {
        ["XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"]
            .iter()
            .find_map(|k| self.env.get(*k))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|f| *f > 0.0 && *f <= 1.0)
    }

    /// The XLA allocator the run chose (`platform`, `cuda_async`, `bfc`, `default`).
    pub fn xla_allocator(&self) -> Option<&str> {
        self.env
            .get("XLA_PYTHON_CLIENT_ALLOCATOR")
            .map(String::as_str)
    }

    /// Whether XLA's pool is preallocated (`None`: not set, XLA's default is yes).
    pub fn xla_preallocate(&self) -> Option<bool> {
        ["XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_CLIENT_PREALLOCATE"]
            .iter()
            .find_map(|k| self.env.get(*k))
            .map(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "false" | "0" | "no"))
    }
}

/// Everything the doctor reads for one run.
#[derive(Debug, Default)]
pub struct Evidence {
    pub capture: Option<CaptureEvidence>,
    pub log: Option<LogEvidence>,
    /// XLA dumps: the run's, or one per worker of a multi-process run (the failing
    /// process's own is chosen by `super::dumps::choose`).
    pub dumps: Vec<DumpEvidence>,
    pub device_samples: Vec<DeviceSeries>,
    pub framework_states: Vec<FrameworkState>,
    pub run: RunFacts,
    /// Whether the environment in `run` is the run's own (recorded or given): without it
    /// the doctor cannot know the fraction or allocator the user set.
    pub env_known: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        assert_eq!(shape_bytes("f32[16384,16384]{1,0}"), Some(1 << 30));
        assert_eq!(shape_bytes("bf16[3,5]"), Some(30));
        assert_eq!(shape_bytes("(f32[4]{0}, s32[])"), Some(20));
        assert_eq!(shape_bytes("pred[]"), Some(1));
        assert_eq!(shape_bytes("s4[3]"), Some(2));
        assert_eq!(shape_bytes("token[]"), None);
    }

    #[test]
    fn nvsmi_times_and_lines() {
        assert!(looks_like_nvsmi("2026/11/25 18:10:49.669, 0, 81559"));
        assert!(looks_like_nvsmi("1, 2026/11/26 15:01:40.187, 0, 81559"));
        assert!(!looks_like_nvsmi(
            "I1125 18:09:11.086962 1142 pjrt_api.cc:119] x"
        ));
        // 2026-11-25 is day 20782 since the epoch.
        assert_eq!(
            parse_nvsmi_time("2026/11/25 18:10:49.669"),
            Some((20782 * 86_400 + 18 * 3600 + 10 * 60 + 49) * 1_000_000_000 + 669_000_000)
        );
    }

    /// A two-GPU recording with the index column: one series per GPU, by index.
    #[test]
    fn nvsmi_with_the_gpu_index() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/multi-gpu/torch_uneven/nvsmi.csv");
        let text = std::fs::read_to_string(&p).unwrap();
        let s = read_nvsmi_csv(&p).unwrap();
        assert_eq!(s.iter().map(|x| x.device).collect::<Vec<_>>(), [0, 1]);
        for x in &s {
            let lines = text
                .lines()
                .filter(|l| l.starts_with(&format!("{}, ", x.device)))
                .count();
            assert_eq!(x.samples.len(), lines);
        }
    }

    #[test]
    fn fractions_from_the_environment() {
        let mut r = RunFacts::default();
        assert_eq!(r.xla_fraction(), None);
        r.env
            .insert("XLA_PYTHON_CLIENT_MEM_FRACTION".into(), "0.04".into());
        assert_eq!(r.xla_fraction(), Some(0.04));
        r.env
            .insert("XLA_PYTHON_CLIENT_PREALLOCATE".into(), "false".into());
        assert_eq!(r.xla_preallocate(), Some(false));
        r.env.insert("XLA_CLIENT_MEM_FRACTION".into(), "2".into());
        assert_eq!(r.xla_fraction(), None);
    }
}
