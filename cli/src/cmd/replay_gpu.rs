//! `--on-gpu`: replay a trace on this machine's GPU with memwatch-kernels' runner and put
//! the real outcome next to the allocator model's prediction for the same settings.
//!
//! Owns: the GPU flags, choosing and opening a backend (CUDA driver API at run time, HIP
//! with the `rocm` feature), the adapter that lets the runner call memwatch-analysis'
//! models (prediction: `platform` for driver mode, `bfc` for bfc mode; placement: the BFC
//! model's chunk addresses mapped into one real device region), Ctrl-C, and rendering.
//! It does not parse traces (memwatch-analysis does) or model allocators itself.

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use memwatch_analysis::alloc::bfc::{Bfc, BfcConfig, End};
use memwatch_analysis::alloc::device::{self, DEFAULT_GRANULARITY};
use memwatch_analysis::alloc::replay::{replay_spec, ReplayOptions};
use memwatch_analysis::alloc::trace::{Trace, TraceOp};
use memwatch_analysis::alloc::{AllocatorKind, ModelSpec};
use memwatch_kernels::runner::{ModelCapacity, Placer, Prediction, ReplayModel};
use memwatch_kernels::{GpuBackend, Mode, RunOptions, RunReport, TraceEvent};
use std::collections::HashMap;
use std::path::PathBuf;

/// How trace allocations reach the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GpuMode {
    /// One real driver allocation (cuMemAlloc / hipMalloc) per trace allocation; compared
    /// with the `platform` model.
    Driver,
    /// memwatch's BFC model places every chunk inside one real device region of the pool
    /// size; compared with the `bfc` model.
    Bfc,
}

/// Which GPU API drives the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// CUDA if libcuda loads, else HIP (when built with the `rocm` feature).
    Auto,
    Cuda,
    Hip,
}

/// Flags of the GPU run (`memwatch replay --on-gpu`).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "GPU replay (--on-gpu)")]
pub struct GpuArgs {
    /// GPU ordinal.
    #[arg(long, default_value_t = 0, value_name = "N", requires = "on_gpu")]
    pub device_index: u32,
    /// Emulate another device: a profile name (h100, mi300x, strix-halo, ...) or bytes. A
    /// smaller one: a ballast allocation leaves exactly its capacity free. A larger one:
    /// every size and the capacity are divided by the same integer (reported).
    #[arg(long, value_name = "NAME|BYTES", requires = "on_gpu")]
    pub emulate: Option<String>,
    /// driver: real allocation per buffer; bfc: the BFC model inside one real region.
    /// Default: bfc when --allocator is bfc, else driver.
    #[arg(long, value_enum, value_name = "MODE", requires = "on_gpu")]
    pub gpu_mode: Option<GpuMode>,
    /// Write every byte of every allocation (backs lazily committed memory) and checksum
    /// each buffer before its free.
    #[arg(long, requires = "on_gpu")]
    pub touch: bool,
    /// Strided read/write passes over each allocation after the touch (bandwidth use).
    #[arg(long, default_value_t = 0, value_name = "N", requires = "on_gpu")]
    pub strided_passes: u32,
    #[arg(long, value_enum, default_value = "auto", requires = "on_gpu")]
    pub backend: BackendChoice,
    /// CUDA kernels (fatbin/cubin from kernels/build-cuda.sh).
    #[arg(long, value_name = "FILE", requires = "on_gpu")]
    pub kernels: Option<PathBuf>,
    /// The CUDA driver library to load.
    #[arg(
        long,
        default_value = "libcuda.so.1",
        value_name = "LIB",
        requires = "on_gpu"
    )]
    pub cuda_driver: String,
    /// Refuse to run when more than this share of the device is already in use.
    #[arg(long, default_value_t = 0.10, value_name = "F", requires = "on_gpu")]
    pub max_used_share: f64,
    /// Run even when the device looks busy.
    #[arg(long, requires = "on_gpu")]
    pub force: bool,
    /// Also measure the touch kernel's bandwidth against a device copy on two buffers of
    /// this many bytes.
    #[arg(long, value_name = "BYTES", requires = "on_gpu")]
    pub bandwidth: Option<u64>,
}

/// The model settings of the replay the GPU run is compared with.
#[derive(Debug, Clone, Copy)]
pub struct ModelSettings {
    /// The pool is `capacity × mem_fraction` (bfc mode)...
    pub mem_fraction: f64,
    /// ...unless given in bytes (e.g. the recording run's `bytes_limit`), scaled like every
    /// other size when the device is emulated larger.
    pub pool_bytes: Option<u64>,
    pub preallocate: bool,
}

/// Converts an analysis trace into runner events (ids: the trace's own buffer ids; the
/// analysis trace reuses slots, so each free is matched to the buffer in its slot).
pub fn events_of(trace: &Trace) -> Vec<TraceEvent> {
    let mut in_slot: HashMap<u32, u64> = HashMap::new();
    let mut n = 0usize;
    trace
        .ops
        .iter()
        .map(|op| match *op {
            TraceOp::Alloc { slot, size } => {
                let id = trace.alloc_ids.get(n).copied().unwrap_or(n as u64);
                n += 1;
                in_slot.insert(slot, id);
                TraceEvent::Alloc { id, size }
            }
            TraceOp::Free { slot } => TraceEvent::Free {
                id: in_slot.remove(&slot).unwrap_or(u64::MAX),
            },
        })
        .collect()
}

fn trace_of(events: &[TraceEvent]) -> Result<Trace, String> {
    Trace::from_pairs(events.iter().map(|e| match *e {
        TraceEvent::Alloc { id, size } => (id, Some(size)),
        TraceEvent::Free { id } => (id, None),
    }))
    .map_err(|e| e.to_string())
}

/// memwatch-analysis' models behind the runner's interface.
pub struct AnalysisModel {
    pub settings: ModelSettings,
}

impl AnalysisModel {
    fn bfc_config(&self, cap: &ModelCapacity) -> BfcConfig {
        let limit = match self.settings.pool_bytes {
            Some(b) => b / cap.scale_divisor.max(1),
            None => device::pool_limit(cap.device_bytes, self.settings.mem_fraction),
        };
        let mut cfg = BfcConfig::jax(limit, self.settings.preallocate);
        cfg.device_free_bytes = Some(cap.available_bytes);
        cfg
    }
}

impl ReplayModel for AnalysisModel {
    fn predict(
        &mut self,
        events: &[TraceEvent],
        cap: &ModelCapacity,
    ) -> Result<Prediction, String> {
        let trace = trace_of(events)?;
        let spec = match cap.mode {
            Mode::Driver => ModelSpec {
                kind: AllocatorKind::Platform,
                limit: cap.available_bytes,
                preallocate: false,
                granularity: DEFAULT_GRANULARITY,
                device_free_bytes: None,
            },
            Mode::Bfc => {
                let cfg = self.bfc_config(cap);
                ModelSpec {
                    kind: AllocatorKind::Bfc,
                    limit: cfg.limit,
                    preallocate: self.settings.preallocate,
                    granularity: DEFAULT_GRANULARITY,
                    device_free_bytes: cfg.device_free_bytes,
                }
            }
        };
        let opts = ReplayOptions {
            stop_at_oom: true,
            ..ReplayOptions::default()
        };
        let r = replay_spec(&trace, &spec, opts, &mut |_| {}).map_err(|e| e.to_string())?;
        Ok(Prediction {
            allocator: r.allocator.to_string(),
            fits: r.fits,
            oom_step: r.oom_step,
            peak_bytes_in_use: r.peak_bytes_in_use,
            pool_bytes: r.limit,
        })
    }

    fn placer(&mut self, cap: &ModelCapacity) -> Result<Box<dyn Placer>, String> {
        let cfg = self.bfc_config(cap);
        Ok(Box::new(BfcPlacer {
            pool: cfg.limit,
            bfc: Bfc::new(cfg),
            handles: HashMap::new(),
            region_offsets: HashMap::new(),
            next_offset: 0,
        }))
    }
}

/// The BFC model placing chunks: each model region (one when preallocated, several when
/// growing) is laid out back to back inside the one real device region of `pool` bytes.
struct BfcPlacer {
    pool: u64,
    bfc: Bfc,
    handles: HashMap<u64, u32>,
    region_offsets: HashMap<u64, u64>,
    next_offset: u64,
}

impl Placer for BfcPlacer {
    fn pool_bytes(&self) -> u64 {
        self.pool
    }

    fn alloc(&mut self, id: u64, size: u64) -> Option<u64> {
        let h = self.bfc.allocate(size, End::Lower)?;
        self.handles.insert(id, h);
        let ptr = self.bfc.chunk_ptr(h);
        let (base, len) = self
            .bfc
            .regions()
            .into_iter()
            .find(|&(b, l)| ptr >= b && ptr < b + l)?;
        let next = &mut self.next_offset;
        let off = *self.region_offsets.entry(base).or_insert_with(|| {
            let o = *next;
            *next += len;
            o
        });
        Some(off + (ptr - base))
    }

    fn free(&mut self, id: u64) {
        if let Some(h) = self.handles.remove(&id) {
            self.bfc.deallocate(h);
        }
    }
}

/// Parses `--emulate`: a device profile or a byte count.
pub fn emulate_bytes(spec: &str) -> Result<u64> {
    if let Ok(b) = super::replay::parse_capacity(spec) {
        return Ok(b);
    }
    let p = device::resolve(spec).with_context(|| format!("--emulate {spec}"))?;
    Ok(p.capacity_bytes)
}

fn open_backend(args: &GpuArgs) -> Result<Box<dyn GpuBackend>> {
    let cuda = || -> Result<Box<dyn GpuBackend>> {
        let Some(path) = args.kernels.as_ref() else {
            // Say first whether there is a CUDA device at all: asking a machine without
            // one for kernels sends its user to build them for nothing.
            let name = memwatch_kernels::cuda::probe_device(&args.cuda_driver, args.device_index)
                .with_context(|| format!("CUDA device {}", args.device_index))?;
            bail!(
                "CUDA device {} ({name}): --kernels FILE is required: build it with \
                 kernels/build-cuda.sh (nvcc)",
                args.device_index
            );
        };
        let bytes =
            std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
        memwatch_kernels::code_object::inspect(&bytes)
            .with_context(|| format!("{}: not a usable kernel code object", path.display()))?;
        let b =
            memwatch_kernels::cuda::CudaBackend::open(&args.cuda_driver, args.device_index, &bytes)
                .with_context(|| format!("CUDA device {}", args.device_index))?;
        Ok(Box::new(b))
    };
    let hip = || -> Result<Box<dyn GpuBackend>> {
        #[cfg(feature = "rocm")]
        {
            let code = match &args.kernels {
                Some(p) => Some(
                    std::fs::read(p).with_context(|| format!("{}: cannot read", p.display()))?,
                ),
                None => None,
            };
            let b = memwatch_kernels::hip::HipBackend::open(args.device_index, code.as_deref())
                .with_context(|| format!("HIP device {}", args.device_index))?;
            Ok(Box::new(b))
        }
        #[cfg(not(feature = "rocm"))]
        bail!("this memwatch was built without the `rocm` feature (cargo build --features rocm)")
    };
    match args.backend {
        BackendChoice::Cuda => cuda(),
        BackendChoice::Hip => hip(),
        BackendChoice::Auto => match cuda() {
            Ok(b) => Ok(b),
            Err(ce) => {
                hip().map_err(|he| anyhow::anyhow!("no GPU backend: CUDA: {ce:#}; HIP: {he:#}"))
            }
        },
    }
}

/// Runs the GPU replay. `default_mode` comes from the replay's `--allocator`.
pub fn run(
    trace: &Trace,
    args: &GpuArgs,
    default_mode: GpuMode,
    settings: ModelSettings,
) -> Result<RunReport> {
    if !(0.0..=1.0).contains(&args.max_used_share) {
        bail!(
            "--max-used-share {}: must be between 0 and 1",
            args.max_used_share
        );
    }
    let target = args.emulate.as_deref().map(emulate_bytes).transpose()?;
    let mode = match args.gpu_mode.unwrap_or(default_mode) {
        GpuMode::Driver => Mode::Driver,
        GpuMode::Bfc => Mode::Bfc,
    };
    let opts = RunOptions {
        mode,
        touch: args.touch,
        verify: args.touch,
        strided_passes: args.strided_passes,
        target_capacity: target,
        max_used_share: args.max_used_share,
        force: args.force,
        bandwidth_bytes: args.bandwidth,
        ..RunOptions::default()
    };
    let events = events_of(trace);
    let interrupt =
        memwatch_kernels::interrupt::install().context("installing the Ctrl-C handler")?;
    let mut backend = open_backend(args)?;
    let mut model = AnalysisModel { settings };
    let report = memwatch_kernels::run(backend.as_mut(), &events, &opts, &mut model, &interrupt)
        .context("GPU replay")?;
    Ok(report)
}

use super::fmt::bytes as gib;

fn rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M/s", r / 1e6)
    } else if r >= 1e3 {
        format!("{:.1} k/s", r / 1e3)
    } else {
        format!("{r:.0}/s")
    }
}

/// The human report.
pub fn render(r: &RunReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let d = &r.device;
    let _ = writeln!(
        s,
        "GPU replay on {} ({} {}, device {}): mode {}, touch {}",
        d.name,
        d.vendor,
        d.arch,
        d.index,
        if r.mode == Mode::Bfc { "bfc" } else { "driver" },
        if r.touch { "on" } else { "off" }
    );
    let _ = writeln!(
        s,
        "  device memory   before {} free of {}   after {} free",
        gib(r.memory_before.free_bytes),
        gib(r.memory_before.total_bytes),
        gib(r.memory_after.free_bytes)
    );
    if let Some(t) = r.plan.target_bytes {
        let _ = writeln!(
            s,
            "  emulating       {} : ballast {}, {} free for the trace{}",
            gib(t),
            gib(r.ballast.allocated_bytes),
            gib(r.ballast.free_after_bytes),
            if r.plan.scale_divisor > 1 {
                format!(
                    ", every size and the capacity divided by {}",
                    r.plan.scale_divisor
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(p) = r.pool_bytes {
        let _ = writeln!(s, "  bfc region      {} (one device allocation)", gib(p));
    }
    let oom = |step: Option<usize>| step.map_or("-".to_string(), |i| format!("event {i}"));
    let _ = writeln!(
        s,
        "  {:<22}{:<32}model ({})",
        "", "real GPU", r.prediction.allocator
    );
    let _ = writeln!(
        s,
        "  {:<22}{:<32}{}",
        "fits",
        if r.real.interrupted {
            "interrupted".into()
        } else {
            yes(r.real.fits)
        },
        yes(r.prediction.fits)
    );
    let real_oom = match &r.real.oom_event {
        Some(e) => format!("event {} (id {}, {})", e.index, e.id, gib(e.size)),
        None if r.real.pool_allocation_failed => "pool region".into(),
        None => "-".into(),
    };
    let _ = writeln!(
        s,
        "  {:<22}{:<32}{}",
        "out of memory at",
        real_oom,
        oom(r.prediction.oom_step)
    );
    let _ = writeln!(
        s,
        "  {:<22}{:<32}{}",
        "peak live / in use",
        gib(r.real.peak_live_bytes),
        gib(r.prediction.peak_bytes_in_use)
    );
    let _ = writeln!(
        s,
        "  agreement       {}",
        if r.agrees { "yes" } else { "NO" }
    );
    if r.touch {
        let _ = writeln!(
            s,
            "  checksums       {} buffers verified, {} words changed",
            r.real.buffers_verified, r.real.checksum_mismatches
        );
    }
    let _ = writeln!(
        s,
        "  time            {:.3} s total; {} alloc/free events in {:.3} ms ({}); kernels {:.3} s",
        r.timing.total_seconds,
        r.real.allocs + r.real.frees,
        r.timing.alloc_free_seconds * 1e3,
        rate(r.timing.events_per_second),
        r.timing.kernel_seconds
    );
    if let Some(b) = &r.bandwidth {
        let _ = writeln!(
            s,
            "  bandwidth       touch {:.0} GB/s, copy {:.0} GB/s (read+write): touch = {:.1}% of copy",
            b.touch_bytes_per_second / 1e9,
            b.copy_bytes_per_second / 1e9,
            b.touch_fraction_of_copy * 100.0
        );
    }
    for n in &r.notes {
        let _ = writeln!(s, "  note: {n}");
    }
    for e in &r.cleanup_errors {
        let _ = writeln!(s, "  cleanup error: {e}");
    }
    s
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

/// Prepares `memwatch replay --on-gpu` arguments before the model replay: `--allocator
/// driver` means the `platform` model (and driver mode); `--emulate` without `--device` /
/// `--capacity` also sets the model replay's target, so both describe the same device.
pub fn prepare_replay_args(
    allocator: &mut Option<String>,
    device: &mut Option<String>,
    capacity: &mut Option<String>,
    gpu: &GpuArgs,
) -> Result<()> {
    if allocator.as_deref() == Some("driver") {
        *allocator = Some("platform".into());
    }
    if let Some(e) = &gpu.emulate {
        if device.is_none() && capacity.is_none() {
            if super::replay::parse_capacity(e).is_ok() {
                *capacity = Some(e.clone());
            } else {
                *device = Some(e.clone());
            }
        }
    }
    Ok(())
}

/// Runs the GPU half of `memwatch replay --on-gpu` for the replay's settings: the
/// allocator picks the default mode (bfc → bfc, platform → driver); the BFC pool is the
/// replay's pool (`limit`), divided like every size when a larger device is emulated.
pub fn run_for_replay(
    trace: &Trace,
    gpu: &GpuArgs,
    kind: AllocatorKind,
    limit: u64,
    mem_fraction: f64,
    preallocate: bool,
) -> Result<RunReport> {
    let default_mode = match kind {
        AllocatorKind::Bfc => GpuMode::Bfc,
        AllocatorKind::Platform => GpuMode::Driver,
        other => bail!(
            "--on-gpu replays with the bfc or the platform (driver) allocator, not {}",
            other.name()
        ),
    };
    let settings = ModelSettings {
        mem_fraction,
        pool_bytes: Some(limit),
        preallocate,
    };
    run(trace, gpu, default_mode, settings)
}

#[cfg(test)]
mod tests {
    //! The adapter with memwatch-analysis' real models, driving the runner over the
    //! simulated device (no GPU in CI): the BFC model's placements inside one region never
    //! overlap (every checksum holds) and the run fails exactly where the model says.
    use super::*;
    use memwatch_kernels::sim::SimDevice;
    use std::sync::atomic::AtomicBool;

    const SEED12: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/h200/bfc/h200-jax0.11.2/bfc_seed12.json"
    );
    /// The H200 total that gives the fixture's pool: 6006243328 / 0.04.
    const H200_TOTAL: u64 = 150_156_083_200;

    fn seed12() -> Trace {
        let bytes = std::fs::read(SEED12).unwrap();
        memwatch_analysis::alloc::trace::read_any(&bytes, None).unwrap()
    }

    fn model() -> AnalysisModel {
        AnalysisModel {
            settings: ModelSettings {
                mem_fraction: 0.04,
                pool_bytes: None,
                preallocate: true,
            },
        }
    }

    #[test]
    fn bfc_mode_on_seed12_fails_at_the_real_allocators_step_with_intact_data() {
        let trace = seed12();
        let mut dev = SimDevice::new(H200_TOTAL);
        let opts = RunOptions {
            mode: Mode::Bfc,
            touch: true,
            verify: true,
            strided_passes: 2,
            ..RunOptions::default()
        };
        let stop = AtomicBool::new(false);
        let r = memwatch_kernels::run(&mut dev, &events_of(&trace), &opts, &mut model(), &stop)
            .unwrap();
        assert_eq!(r.pool_bytes, Some(6_006_243_328));
        assert_eq!(r.prediction.oom_step, Some(46)); // the fixture's oom_step
        assert_eq!(r.real.oom_step, Some(46));
        assert!(r.agrees);
        assert_eq!(r.real.checksum_mismatches, 0);
        assert!(r.real.buffers_verified > 20);
        assert_eq!(dev.live_allocations(), 0);
    }

    #[test]
    fn driver_mode_emulating_the_pool_size_agrees_with_the_platform_model() {
        let trace = seed12();
        let mut dev = SimDevice::new(H200_TOTAL);
        let opts = RunOptions {
            mode: Mode::Driver,
            touch: true,
            target_capacity: Some(6_006_243_328),
            ..RunOptions::default()
        };
        let stop = AtomicBool::new(false);
        let r = memwatch_kernels::run(&mut dev, &events_of(&trace), &opts, &mut model(), &stop)
            .unwrap();
        assert_eq!(r.prediction.allocator, "platform");
        // One driver allocation per buffer has no fragmentation: the whole trace fits in the
        // pool's size, where the BFC pool failed at event 46.
        assert!(
            r.real.fits && r.prediction.fits,
            "{:?} {:?}",
            r.real,
            r.prediction
        );
        assert!(r.agrees);
        assert!(r.ballast.free_after_bytes <= 6_006_243_328);
        assert!(r.ballast.free_after_bytes + (2 << 20) > 6_006_243_328);
        assert_eq!(r.real.checksum_mismatches, 0);
        assert_eq!(dev.live_allocations(), 0);
    }

    #[test]
    fn driver_mode_ooms_where_the_platform_model_does() {
        let trace = seed12();
        let mut dev = SimDevice::new(H200_TOTAL);
        let opts = RunOptions {
            mode: Mode::Driver,
            target_capacity: Some(3 << 30),
            ..RunOptions::default()
        };
        let stop = AtomicBool::new(false);
        let r = memwatch_kernels::run(&mut dev, &events_of(&trace), &opts, &mut model(), &stop)
            .unwrap();
        assert!(!r.real.fits);
        assert_eq!(r.real.oom_step, r.prediction.oom_step);
        assert!(r.agrees);
    }

    #[test]
    fn a_larger_emulated_device_is_scaled_and_the_model_sees_the_scaled_trace() {
        let trace = seed12();
        let mut dev = SimDevice::new(40 << 30);
        let opts = RunOptions {
            mode: Mode::Bfc,
            touch: true,
            target_capacity: Some(emulate_bytes("mi300x").unwrap()),
            ..RunOptions::default()
        };
        let stop = AtomicBool::new(false);
        let r = memwatch_kernels::run(&mut dev, &events_of(&trace), &opts, &mut model(), &stop)
            .unwrap();
        assert!(r.plan.scale_divisor >= 5, "{:?}", r.plan);
        assert_eq!(r.model_capacity.device_bytes, r.plan.capacity_bytes);
        assert!(r.agrees, "{:?} vs {:?}", r.real, r.prediction);
        assert_eq!(r.real.checksum_mismatches, 0);
    }

    #[test]
    fn events_keep_the_trace_ids_across_reused_slots() {
        let t = Trace::from_pairs([
            (7, Some(10)),
            (7, None),
            (9, Some(20)),
            (3, Some(5)),
            (9, None),
            (3, None),
        ])
        .unwrap();
        assert_eq!(
            events_of(&t),
            vec![
                TraceEvent::Alloc { id: 7, size: 10 },
                TraceEvent::Free { id: 7 },
                TraceEvent::Alloc { id: 9, size: 20 },
                TraceEvent::Alloc { id: 3, size: 5 },
                TraceEvent::Free { id: 9 },
                TraceEvent::Free { id: 3 },
            ]
        );
    }

    #[test]
    fn emulate_takes_profiles_and_bytes_and_rejects_the_rest() {
        assert_eq!(emulate_bytes("1000").unwrap(), 1000);
        assert_eq!(emulate_bytes("80GiB").unwrap(), 80 << 30);
        assert!(emulate_bytes("h100").unwrap() > 79 << 30);
        let e = emulate_bytes("tpu9000").unwrap_err();
        assert!(format!("{e:#}").contains("--emulate tpu9000"));
    }
}

#[cfg(test)]
mod json_contract {
    //! The `on_gpu` JSON keys that tests/gpu/replay_kernels.sh and users' scripts read.
    use super::*;
    use memwatch_kernels::sim::SimDevice;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn on_gpu_report_has_the_documented_keys() {
        let mut dev = SimDevice::new(1 << 30);
        let events = [
            TraceEvent::Alloc { id: 1, size: 4096 },
            TraceEvent::Free { id: 1 },
        ];
        let opts = RunOptions {
            touch: true,
            target_capacity: Some(256 << 20),
            bandwidth_bytes: Some(1 << 20),
            ..RunOptions::default()
        };
        let mut m = AnalysisModel {
            settings: ModelSettings {
                mem_fraction: 0.75,
                pool_bytes: None,
                preallocate: true,
            },
        };
        let r = memwatch_kernels::run(&mut dev, &events, &opts, &mut m, &AtomicBool::new(false))
            .unwrap();
        let v = serde_json::to_value(&r).unwrap();
        if let Ok(p) = std::env::var("MEMWATCH_DUMP_ON_GPU_JSON") {
            std::fs::write(p, serde_json::json!({ "on_gpu": v }).to_string()).unwrap();
        }
        for k in [
            "device",
            "mode",
            "touch",
            "memory_before",
            "memory_after",
            "plan",
            "ballast",
            "pool_bytes",
            "model_capacity",
            "real",
            "prediction",
            "agrees",
            "timing",
            "bandwidth",
            "cleanup_freed",
            "cleanup_errors",
            "notes",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["mode"], "driver");
        assert_eq!(v["plan"]["target_bytes"], 256u64 << 20);
        assert!(v["real"]["oom_step"].is_null());
        assert!(v["timing"]["events_per_second"].as_f64().unwrap() > 0.0);
        assert!(v["bandwidth"]["touch_fraction_of_copy"].is_number());
        assert!(v["memory_before"]["free_bytes"].is_u64());
    }
}
