//! The GPU replay runner: replays an allocation trace on a real device and compares what
//! happened with the allocator model's prediction for the same settings.
//!
//! Owns the order of a run: safety check (refuse a device another process is using
//! heavily, unless forced) → optional bandwidth benchmark → capacity emulation (ballast or
//! scaling, `plan.rs`) → the model's prediction for exactly the events and capacity that
//! will run → the replay, in trace order, in one of two modes → cleanup → report.
//!
//! - `driver` mode: every trace allocation is a real driver allocation (cuMemAlloc /
//!   hipMalloc); the run is out of memory where the driver says so.
//! - `bfc` mode: memwatch's BFC model (reached through [`ReplayModel::placer`]) places
//!   every chunk inside ONE real device region of the model's pool size; the kernels touch
//!   the placed ranges, and a checksum before each free proves no other placement
//!   overwrote it.
//!
//! The interrupt flag is checked between events; every device allocation lives in a
//! [`Session`] that frees it on any exit path. The runner never parses files and never
//! models an allocator itself.

use crate::backend::{DeviceDescription, DevicePtr, GpuBackend, GpuError, MemInfo};
use crate::plan::{plan_capacity, top_up, CapacityPlan};
use crate::session::{Session, SessionError};
use crate::trace::{self, TraceError, TraceEvent};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use thiserror::Error;

/// How trace allocations reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One real driver allocation per trace allocation.
    Driver,
    /// The BFC model places chunks inside one real device region.
    Bfc,
}

/// The model's answer for the same events and capacity the device runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Prediction {
    /// Which model (`bfc`, `platform`, ...).
    pub allocator: String,
    pub fits: bool,
    /// Index of the trace event that fails, if any.
    pub oom_step: Option<usize>,
    pub peak_bytes_in_use: u64,
    pub pool_bytes: u64,
}

/// Chunk placement inside one region, by the allocator model (bfc mode).
pub trait Placer {
    /// Size of the region the model manages (the device region the runner allocates).
    fn pool_bytes(&self) -> u64;
    /// Offset of the chunk for this allocation inside the region; `None`: out of memory.
    fn alloc(&mut self, id: u64, size: u64) -> Option<u64>;
    fn free(&mut self, id: u64);
}

/// The capacity a model is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModelCapacity {
    /// The (emulated, scaled) device's capacity: the base of a framework's memory fraction.
    pub device_bytes: u64,
    /// Bytes actually free for the trace on the device when the replay starts (after the
    /// ballast): what a one-driver-allocation-per-buffer model can hand out.
    pub available_bytes: u64,
    /// Every trace size was divided by this (capacity emulation of a larger device).
    pub scale_divisor: u64,
    /// Mode of the run the prediction is compared with.
    pub mode: Mode,
}

/// What the runner needs from memwatch's allocator models.
pub trait ReplayModel {
    /// The model's prediction for exactly these events (already scaled) and capacity.
    fn predict(&mut self, events: &[TraceEvent], cap: &ModelCapacity)
        -> Result<Prediction, String>;
    /// A fresh placer for this capacity (bfc mode).
    fn placer(&mut self, cap: &ModelCapacity) -> Result<Box<dyn Placer>, String>;
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub mode: Mode,
    /// Write every byte of each allocation (backs lazily committed memory).
    pub touch: bool,
    /// Checksum each buffer before it is freed (needs `touch`).
    pub verify: bool,
    /// Strided read/write passes over each allocation after the touch (0: none).
    pub strided_passes: u32,
    /// Stride of those passes in bytes (a multiple of 16 is used).
    pub stride_bytes: u64,
    /// Capacity of the device to emulate; `None`: the device as it is.
    pub target_capacity: Option<u64>,
    /// Refuse when more than this share of the device is in use before starting.
    pub max_used_share: f64,
    /// Run even when `max_used_share` is exceeded.
    pub force: bool,
    /// Driver allocation granularity used to top up the ballast.
    pub granularity: u64,
    /// Measure touch vs copy bandwidth on a buffer of this many bytes first.
    pub bandwidth_bytes: Option<u64>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            mode: Mode::Driver,
            touch: true,
            verify: true,
            strided_passes: 0,
            stride_bytes: 4096 + 16,
            target_capacity: None,
            max_used_share: 0.10,
            force: false,
            granularity: 2 << 20,
            bandwidth_bytes: None,
        }
    }
}

/// Why a run did not happen or stopped with an error (the session freed everything).
#[derive(Debug, Error)]
pub enum RunError {
    #[error("refusing to run: {used_bytes} of {total_bytes} bytes ({share:.1}%) of the device are already in use (limit {limit:.1}%); another process may be using it (--force to override)")]
    Refused {
        used_bytes: u64,
        total_bytes: u64,
        share: f64,
        limit: f64,
    },
    #[error("trace: {0}")]
    Trace(#[from] TraceError),
    #[error("allocator model: {0}")]
    Model(String),
    #[error("event {index}: the model placed id {id} at offset {offset} + {size} bytes, outside its {pool} byte pool")]
    PlacementOutside {
        index: usize,
        id: u64,
        offset: u64,
        size: u64,
        pool: u64,
    },
    #[error("ballast allocation of {bytes} bytes failed: {source}")]
    Ballast { bytes: u64, source: GpuError },
    #[error("event {index}: {source}")]
    Event { index: usize, source: SessionError },
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// The failing event of a real run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomEvent {
    pub index: usize,
    pub id: u64,
    pub size: u64,
}

/// What happened on the device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealOutcome {
    pub fits: bool,
    pub oom_step: Option<usize>,
    pub oom_event: Option<OomEvent>,
    /// bfc mode: the one region of the model's pool size could not be allocated.
    pub pool_allocation_failed: bool,
    /// Events executed (the failing one not counted).
    pub events_replayed: usize,
    pub allocs: u64,
    pub frees: u64,
    /// Largest sum of live requested sizes.
    pub peak_live_bytes: u64,
    /// Buffers checksummed before their free, and words found changed.
    pub buffers_verified: u64,
    pub checksum_mismatches: u64,
    /// Stopped early by Ctrl-C / SIGTERM.
    pub interrupted: bool,
}

/// Timings of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timing {
    pub total_seconds: f64,
    /// Time in the trace's allocation and free calls (driver calls or model placement).
    pub alloc_free_seconds: f64,
    /// Trace alloc + free events per second of `alloc_free_seconds`.
    pub events_per_second: f64,
    /// Time in touch / strided / checksum kernels (launch to completion).
    pub kernel_seconds: f64,
}

/// Touch-kernel bandwidth against a device-to-device copy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bandwidth {
    pub buffer_bytes: u64,
    pub repetitions: u32,
    /// Bytes written by mw_touch per second.
    pub touch_bytes_per_second: f64,
    /// Bytes read + written by a device-to-device copy per second.
    pub copy_bytes_per_second: f64,
    /// touch / copy.
    pub touch_fraction_of_copy: f64,
}

/// The ballast actually reserved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BallastReport {
    pub planned_bytes: u64,
    pub allocated_bytes: u64,
    /// Free memory after the ballast (should equal the plan's capacity within one granule).
    pub free_after_bytes: u64,
}

/// Everything a run reports (the CLI's `on_gpu` object).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub device: DeviceDescription,
    pub mode: Mode,
    pub touch: bool,
    pub verify: bool,
    pub memory_before: MemInfo,
    pub memory_after: MemInfo,
    pub plan: CapacityPlan,
    pub ballast: BallastReport,
    pub pool_bytes: Option<u64>,
    /// What the model was asked about.
    pub model_capacity: ModelCapacity,
    pub real: RealOutcome,
    pub prediction: Prediction,
    /// Real and predicted outcome agree (both fit, or both fail at the same event).
    pub agrees: bool,
    pub timing: Timing,
    pub bandwidth: Option<Bandwidth>,
    /// Allocations freed at cleanup and any cleanup errors.
    pub cleanup_freed: usize,
    pub cleanup_errors: Vec<String>,
    pub notes: Vec<String>,
}

/// The checksum seed of a trace id.
pub fn seed_for(id: u64) -> u32 {
    let x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as u32 ^ x as u32
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The smallest stride (in 16-byte words) ≥ `want` coprime with `words`, so that one
/// strided pass visits every word exactly once.
pub fn coprime_stride(want: u64, words: u64) -> u64 {
    let mut s = want.max(1);
    while words > 1 && gcd(s, words) != 1 {
        s += 1;
    }
    s
}

struct Live {
    ptr: DevicePtr,
    size: u64,
}

struct Counters {
    alloc_free: f64,
    kernels: f64,
    live_bytes: u64,
}

/// Checks the device is not busy with someone else's work.
pub fn safety_check(before: &MemInfo, opts: &RunOptions) -> Result<(), RunError> {
    let share = if before.total_bytes == 0 {
        1.0
    } else {
        before.used_bytes() as f64 / before.total_bytes as f64
    };
    if share > opts.max_used_share && !opts.force {
        return Err(RunError::Refused {
            used_bytes: before.used_bytes(),
            total_bytes: before.total_bytes,
            share: share * 100.0,
            limit: opts.max_used_share * 100.0,
        });
    }
    Ok(())
}

/// Measures the touch kernel against a device copy on two buffers of `bytes`.
pub fn measure_bandwidth(
    session: &mut Session<'_>,
    bytes: u64,
    reps: u32,
) -> Result<Bandwidth, RunError> {
    let bytes = bytes / 16 * 16;
    let a = session.alloc(bytes)?;
    let b = session.alloc(bytes)?;
    // Warm up (first touch also backs the pages).
    session.touch(a, bytes, 1)?;
    session.copy(b, a, bytes)?;
    session.device().synchronize()?;
    session.device().timer_start()?;
    for r in 0..reps {
        session.touch(a, bytes, r)?;
    }
    let touch_s = session.device().timer_stop()?;
    session.device().timer_start()?;
    for _ in 0..reps {
        session.copy(b, a, bytes)?;
    }
    let copy_s = session.device().timer_stop()?;
    session.free(b)?;
    session.free(a)?;
    let touch_bps = bytes as f64 * reps as f64 / touch_s.max(1e-12);
    let copy_bps = 2.0 * bytes as f64 * reps as f64 / copy_s.max(1e-12);
    Ok(Bandwidth {
        buffer_bytes: bytes,
        repetitions: reps,
        touch_bytes_per_second: touch_bps,
        copy_bytes_per_second: copy_bps,
        touch_fraction_of_copy: touch_bps / copy_bps,
    })
}

/// Replays `events` on `dev` as `opts` says and compares with `model`'s prediction.
pub fn run(
    dev: &mut dyn GpuBackend,
    events: &[TraceEvent],
    opts: &RunOptions,
    model: &mut dyn ReplayModel,
    interrupt: &AtomicBool,
) -> Result<RunReport, RunError> {
    trace::validate(events)?;
    let started = Instant::now();
    let device = dev.describe();
    let memory_before = dev.mem_info()?;
    safety_check(&memory_before, opts)?;
    let mut notes = Vec::new();
    if memory_before.used_bytes() > 0 {
        notes.push(format!(
            "{} bytes were in use before the run (this process's context included)",
            memory_before.used_bytes()
        ));
    }

    let mut session = Session::new(dev);
    let bandwidth = match opts.bandwidth_bytes {
        Some(b) if !interrupt.load(Ordering::Relaxed) => {
            Some(measure_bandwidth(&mut session, b, 10)?)
        }
        _ => None,
    };

    // Capacity emulation.
    let now = session.device().mem_info()?;
    let free = now.free_bytes;
    let plan = plan_capacity(opts.target_capacity, free, now.total_bytes);
    let mut ballast = BallastReport {
        planned_bytes: plan.ballast_bytes,
        allocated_bytes: 0,
        free_after_bytes: free,
    };
    if plan.ballast_bytes > 0 {
        session
            .alloc(plan.ballast_bytes)
            .map_err(|source| RunError::Ballast {
                bytes: plan.ballast_bytes,
                source,
            })?;
        ballast.allocated_bytes = plan.ballast_bytes;
        let now = session.device().mem_info()?.free_bytes;
        let extra = top_up(now, plan.capacity_bytes, opts.granularity);
        if extra > 0 {
            session.alloc(extra).map_err(|source| RunError::Ballast {
                bytes: extra,
                source,
            })?;
            ballast.allocated_bytes += extra;
        }
        ballast.free_after_bytes = session.device().mem_info()?.free_bytes;
        notes.push(format!(
            "ballast of {} bytes leaves {} bytes free for a {} byte target",
            ballast.allocated_bytes, ballast.free_after_bytes, plan.capacity_bytes
        ));
    }
    let events: Vec<TraceEvent> = trace::scale(events, plan.scale_divisor);
    if plan.scale_divisor > 1 {
        notes.push(format!(
            "the target ({} bytes) is larger than this device's free memory ({free} bytes): every size and the capacity are divided by {}",
            plan.target_bytes.unwrap_or(0),
            plan.scale_divisor
        ));
    }

    let cap = ModelCapacity {
        device_bytes: plan.device_bytes,
        available_bytes: ballast.free_after_bytes,
        scale_divisor: plan.scale_divisor,
        mode: opts.mode,
    };
    let prediction = model.predict(&events, &cap).map_err(RunError::Model)?;

    let mut real = RealOutcome {
        fits: true,
        oom_step: None,
        oom_event: None,
        pool_allocation_failed: false,
        events_replayed: 0,
        allocs: 0,
        frees: 0,
        peak_live_bytes: 0,
        buffers_verified: 0,
        checksum_mismatches: 0,
        interrupted: false,
    };
    let mut c = Counters {
        alloc_free: 0.0,
        kernels: 0.0,
        live_bytes: 0,
    };
    let mut pool_bytes = None;
    match opts.mode {
        Mode::Driver => replay_driver(&mut session, &events, opts, interrupt, &mut real, &mut c)?,
        Mode::Bfc => {
            let mut placer = model.placer(&cap).map_err(RunError::Model)?;
            let pool = placer.pool_bytes();
            pool_bytes = Some(pool);
            match session.alloc(pool) {
                Ok(region) => replay_bfc(
                    &mut session,
                    region,
                    placer.as_mut(),
                    &events,
                    opts,
                    interrupt,
                    &mut real,
                    &mut c,
                )?,
                Err(e) if e.is_out_of_memory() => {
                    real.fits = false;
                    real.pool_allocation_failed = true;
                    notes.push(format!(
                        "the {pool} byte pool region could not be allocated: {e}"
                    ));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    let cleanup_freed = session.free_all();
    let cleanup_errors: Vec<String> = session
        .cleanup_errors
        .iter()
        .map(|e| e.to_string())
        .collect();
    let memory_after = session.device().mem_info()?;
    drop(session);

    let agrees = !real.interrupted
        && real.fits == prediction.fits
        && (real.fits || real.oom_step == prediction.oom_step);
    let n = (real.allocs + real.frees) as f64;
    Ok(RunReport {
        device,
        mode: opts.mode,
        touch: opts.touch,
        verify: opts.verify && opts.touch,
        memory_before,
        memory_after,
        plan,
        ballast,
        pool_bytes,
        model_capacity: cap,
        real,
        prediction,
        agrees,
        timing: Timing {
            total_seconds: started.elapsed().as_secs_f64(),
            alloc_free_seconds: c.alloc_free,
            events_per_second: if c.alloc_free > 0.0 {
                n / c.alloc_free
            } else {
                0.0
            },
            kernel_seconds: c.kernels,
        },
        bandwidth,
        cleanup_freed,
        cleanup_errors,
        notes,
    })
}

/// Touch (and optionally strided passes over) a fresh buffer.
fn after_alloc(
    session: &mut Session<'_>,
    ptr: DevicePtr,
    size: u64,
    id: u64,
    opts: &RunOptions,
    c: &mut Counters,
) -> Result<(), SessionError> {
    if !opts.touch {
        return Ok(());
    }
    let t = Instant::now();
    session.touch(ptr, size, seed_for(id))?;
    if opts.strided_passes > 0 && size >= 32 {
        // Whole 16-byte words only; an even number of inverting passes keeps the pattern.
        let words = size / 16;
        let stride = coprime_stride(opts.stride_bytes / 16, words);
        let passes = opts.strided_passes + opts.strided_passes % 2;
        session.strided(ptr, words * 16, stride * 16, passes)?;
    }
    c.kernels += t.elapsed().as_secs_f64();
    Ok(())
}

/// Checksum a buffer before its free.
fn before_free(
    session: &mut Session<'_>,
    ptr: DevicePtr,
    size: u64,
    id: u64,
    opts: &RunOptions,
    real: &mut RealOutcome,
    c: &mut Counters,
) -> Result<(), SessionError> {
    if !(opts.touch && opts.verify) {
        return Ok(());
    }
    let t = Instant::now();
    real.checksum_mismatches += session.checksum(ptr, size, seed_for(id))?;
    real.buffers_verified += 1;
    c.kernels += t.elapsed().as_secs_f64();
    Ok(())
}

fn replay_driver(
    session: &mut Session<'_>,
    events: &[TraceEvent],
    opts: &RunOptions,
    interrupt: &AtomicBool,
    real: &mut RealOutcome,
    c: &mut Counters,
) -> Result<(), RunError> {
    let mut live: HashMap<u64, Live> = HashMap::new();
    for (index, e) in events.iter().enumerate() {
        if interrupt.load(Ordering::Relaxed) {
            real.interrupted = true;
            break;
        }
        let wrap = |source: SessionError| RunError::Event { index, source };
        match *e {
            TraceEvent::Alloc { id, size } => {
                let t = Instant::now();
                let r = session.alloc(size);
                c.alloc_free += t.elapsed().as_secs_f64();
                match r {
                    Ok(ptr) => {
                        real.allocs += 1;
                        c.live_bytes += size;
                        real.peak_live_bytes = real.peak_live_bytes.max(c.live_bytes);
                        live.insert(id, Live { ptr, size });
                        after_alloc(session, ptr, size, id, opts, c).map_err(wrap)?;
                    }
                    Err(err) if err.is_out_of_memory() => {
                        real.fits = false;
                        real.oom_step = Some(index);
                        real.oom_event = Some(OomEvent { index, id, size });
                        break;
                    }
                    Err(err) => return Err(wrap(err.into())),
                }
            }
            TraceEvent::Free { id } => {
                // validate() guarantees the id is live.
                let Some(b) = live.remove(&id) else { continue };
                before_free(session, b.ptr, b.size, id, opts, real, c).map_err(wrap)?;
                let t = Instant::now();
                session.free(b.ptr).map_err(wrap)?;
                c.alloc_free += t.elapsed().as_secs_f64();
                real.frees += 1;
                c.live_bytes -= b.size;
            }
        }
        real.events_replayed += 1;
    }
    verify_remaining(session, live, opts, real, c)
}

/// Buffers still live at the end (or at the OOM) are verified too (not after an interrupt).
fn verify_remaining(
    session: &mut Session<'_>,
    live: HashMap<u64, Live>,
    opts: &RunOptions,
    real: &mut RealOutcome,
    c: &mut Counters,
) -> Result<(), RunError> {
    if real.interrupted {
        return Ok(());
    }
    let mut rest: Vec<(u64, Live)> = live.into_iter().collect();
    rest.sort_by_key(|(id, _)| *id);
    for (id, b) in rest {
        before_free(session, b.ptr, b.size, id, opts, real, c)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn replay_bfc(
    session: &mut Session<'_>,
    region: DevicePtr,
    placer: &mut dyn Placer,
    events: &[TraceEvent],
    opts: &RunOptions,
    interrupt: &AtomicBool,
    real: &mut RealOutcome,
    c: &mut Counters,
) -> Result<(), RunError> {
    let pool = placer.pool_bytes();
    let mut live: HashMap<u64, Live> = HashMap::new();
    for (index, e) in events.iter().enumerate() {
        if interrupt.load(Ordering::Relaxed) {
            real.interrupted = true;
            break;
        }
        let wrap = |source: SessionError| RunError::Event { index, source };
        match *e {
            TraceEvent::Alloc { id, size } => {
                let t = Instant::now();
                let placed = placer.alloc(id, size);
                c.alloc_free += t.elapsed().as_secs_f64();
                let Some(offset) = placed else {
                    real.fits = false;
                    real.oom_step = Some(index);
                    real.oom_event = Some(OomEvent { index, id, size });
                    break;
                };
                if !matches!(offset.checked_add(size), Some(end) if end <= pool) {
                    return Err(RunError::PlacementOutside {
                        index,
                        id,
                        offset,
                        size,
                        pool,
                    });
                }
                real.allocs += 1;
                c.live_bytes += size;
                real.peak_live_bytes = real.peak_live_bytes.max(c.live_bytes);
                let ptr = region + offset;
                live.insert(id, Live { ptr, size });
                after_alloc(session, ptr, size, id, opts, c).map_err(wrap)?;
            }
            TraceEvent::Free { id } => {
                let Some(b) = live.remove(&id) else { continue };
                before_free(session, b.ptr, b.size, id, opts, real, c).map_err(wrap)?;
                let t = Instant::now();
                placer.free(id);
                c.alloc_free += t.elapsed().as_secs_f64();
                real.frees += 1;
                c.live_bytes -= b.size;
            }
        }
        real.events_replayed += 1;
    }
    verify_remaining(session, live, opts, real, c)
}
