//! The runner's logic (ballast, scaling, ordering, verification, cleanup on error and on
//! interrupt, the safety refusal) against the simulated device (`sim.rs`, a test double of
//! the GPU with real capacity accounting and memory contents). The allocator model here
//! is a test double too: a first-fit placer and a granularity-rounding predictor, so the
//! runner is exercised without depending on memwatch-analysis' models.

use memwatch_kernels::runner::{
    Mode, ModelCapacity, Placer, Prediction, ReplayModel, RunError, RunOptions,
};
use memwatch_kernels::sim::SimDevice;
use memwatch_kernels::{run, GpuBackend, TraceEvent};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn a(id: u64, size: u64) -> TraceEvent {
    TraceEvent::Alloc { id, size }
}
fn f(id: u64) -> TraceEvent {
    TraceEvent::Free { id }
}

/// First-fit placement over `pool` bytes, 256-byte aligned (optionally overlapping on purpose).
struct FirstFit {
    pool: u64,
    live: BTreeMap<u64, (u64, u64)>, // offset -> (end, id)
    overlap: bool,
}

impl Placer for FirstFit {
    fn pool_bytes(&self) -> u64 {
        self.pool
    }
    fn alloc(&mut self, id: u64, size: u64) -> Option<u64> {
        let size = size.div_ceil(256) * 256;
        if self.overlap {
            // A broken model: everything at offset 0.
            self.live.insert(id, (size, id));
            return (size <= self.pool).then_some(0);
        }
        let mut cursor = 0;
        for (&off, &(end, _)) in &self.live {
            if off - cursor >= size {
                break;
            }
            cursor = end;
        }
        if cursor + size > self.pool {
            return None;
        }
        self.live.insert(cursor, (cursor + size, id));
        Some(cursor)
    }
    fn free(&mut self, id: u64) {
        self.live.retain(|_, (_, i)| *i != id);
    }
}

/// Predicts with the same accounting the simulated driver uses (granularity rounding),
/// and places with FirstFit over `fraction` of the capacity.
struct TestModel {
    granularity: u64,
    fraction: f64,
    overlap: bool,
    capacities_seen: Vec<u64>,
}

impl TestModel {
    fn new() -> Self {
        TestModel {
            granularity: 2 * MIB,
            fraction: 1.0,
            overlap: false,
            capacities_seen: vec![],
        }
    }
}

impl ReplayModel for TestModel {
    fn predict(
        &mut self,
        events: &[TraceEvent],
        cap: &ModelCapacity,
    ) -> Result<Prediction, String> {
        let capacity = cap.available_bytes;
        self.capacities_seen.push(capacity);
        let mut live = BTreeMap::new();
        let (mut used, mut peak) = (0u64, 0u64);
        for (i, e) in events.iter().enumerate() {
            match *e {
                TraceEvent::Alloc { id, size } => {
                    let r = size.div_ceil(self.granularity) * self.granularity;
                    if used + r > capacity {
                        return Ok(Prediction {
                            allocator: "test".into(),
                            fits: false,
                            oom_step: Some(i),
                            peak_bytes_in_use: peak,
                            pool_bytes: capacity,
                        });
                    }
                    used += r;
                    peak = peak.max(used);
                    live.insert(id, r);
                }
                TraceEvent::Free { id } => used -= live.remove(&id).unwrap_or(0),
            }
        }
        Ok(Prediction {
            allocator: "test".into(),
            fits: true,
            oom_step: None,
            peak_bytes_in_use: peak,
            pool_bytes: capacity,
        })
    }
    fn placer(&mut self, cap: &ModelCapacity) -> Result<Box<dyn Placer>, String> {
        let capacity = cap.device_bytes;
        let pool = (capacity as f64 * self.fraction) as u64 / 256 * 256;
        Ok(Box::new(FirstFit {
            pool,
            live: BTreeMap::new(),
            overlap: self.overlap,
        }))
    }
}

fn opts(mode: Mode) -> RunOptions {
    RunOptions {
        mode,
        ..RunOptions::default()
    }
}

#[test]
fn driver_mode_ooms_where_the_driver_does_and_frees_everything() {
    let mut dev = SimDevice::new(100 * MIB);
    let trace = [
        a(0, 40 * MIB),
        a(1, 30 * MIB),
        f(0),
        a(2, 50 * MIB),
        a(3, 30 * MIB),
    ];
    let mut model = TestModel::new();
    let stop = AtomicBool::new(false);
    let r = run(&mut dev, &trace, &opts(Mode::Driver), &mut model, &stop).unwrap();
    assert!(!r.real.fits);
    assert_eq!(r.real.oom_step, Some(4));
    assert_eq!(r.real.oom_event.as_ref().unwrap().id, 3);
    assert_eq!(r.prediction.oom_step, Some(4));
    assert!(r.agrees);
    assert_eq!(r.real.checksum_mismatches, 0);
    assert_eq!(r.real.buffers_verified, 3); // id 0 at its free, ids 1 and 2 at the end
    assert_eq!(r.real.peak_live_bytes, 80 * MIB);
    assert_eq!(dev.live_allocations(), 0);
    assert_eq!(r.memory_after.free_bytes, 100 * MIB);
    assert_eq!(r.cleanup_freed, 2);
}

#[test]
fn events_run_in_trace_order_touch_after_alloc_checksum_before_free() {
    let mut dev = SimDevice::new(GIB);
    let trace = [a(0, 4096), a(1, 8192), f(1), f(0)];
    let stop = AtomicBool::new(false);
    run(
        &mut dev,
        &trace,
        &opts(Mode::Driver),
        &mut TestModel::new(),
        &stop,
    )
    .unwrap();
    let kinds: Vec<String> = dev
        .log
        .iter()
        .map(|l| l.split(' ').take(1).collect::<String>())
        .collect();
    assert_eq!(
        kinds,
        ["alloc", "touch", "alloc", "touch", "checksum", "free", "checksum", "free"]
    );
    assert!(dev.log[0].ends_with(" 4096") && dev.log[2].ends_with(" 8192"));
    assert_eq!(
        dev.log[5],
        dev.log[4].replace("checksum", "free").replace(" 8192", "")
    );
}

#[test]
fn a_smaller_target_is_emulated_with_a_ballast_leaving_exactly_its_capacity() {
    let mut dev = SimDevice::new(GIB);
    dev.foreign_used = 10 * MIB; // e.g. another context; under the refusal threshold
    let trace = [a(0, 40 * MIB), a(1, 40 * MIB)];
    let mut o = opts(Mode::Driver);
    o.target_capacity = Some(64 * MIB);
    let mut model = TestModel::new();
    let stop = AtomicBool::new(false);
    let r = run(&mut dev, &trace, &o, &mut model, &stop).unwrap();
    assert_eq!(r.plan.capacity_bytes, 64 * MIB);
    assert_eq!(r.plan.scale_divisor, 1);
    assert_eq!(r.ballast.free_after_bytes, 64 * MIB);
    assert_eq!(r.ballast.allocated_bytes, GIB - 10 * MIB - 64 * MIB);
    assert_eq!(model.capacities_seen, vec![64 * MIB]);
    assert_eq!(r.real.oom_step, Some(1));
    assert!(r.agrees);
    assert_eq!(dev.live_allocations(), 0, "ballast freed too");
}

#[test]
fn a_larger_target_scales_sizes_and_capacity_by_one_factor_and_says_so() {
    let mut dev = SimDevice::new(GIB);
    let trace = [a(0, 1536 * MIB), a(1, 2 * GIB), a(2, GIB)];
    let mut o = opts(Mode::Driver);
    o.target_capacity = Some(4 * GIB);
    let mut model = TestModel::new();
    let stop = AtomicBool::new(false);
    let r = run(&mut dev, &trace, &o, &mut model, &stop).unwrap();
    assert_eq!(r.plan.scale_divisor, 4);
    assert_eq!(r.plan.capacity_bytes, GIB);
    assert!(
        r.notes.iter().any(|n| n.contains("divided by 4")),
        "{:?}",
        r.notes
    );
    assert_eq!(dev.log[0], format!("alloc {}", 384 * MIB));
    // 384 + 512 + 256 MiB > 1 GiB: fails at the third, as it would at full size on 4 GiB.
    assert_eq!(r.real.oom_step, Some(2));
    assert_eq!(r.prediction.oom_step, Some(2));
}

#[test]
fn bfc_mode_places_inside_one_region_and_verifies_every_buffer() {
    let mut dev = SimDevice::new(GIB);
    let trace = [
        a(0, 100 * MIB),
        a(1, 1000),
        f(0),
        a(2, 50 * MIB),
        a(3, 200 * MIB),
    ];
    let mut o = opts(Mode::Bfc);
    o.target_capacity = Some(256 * MIB);
    o.strided_passes = 1; // rounded up to 2 so data survives
    let mut model = TestModel::new();
    let stop = AtomicBool::new(false);
    let r = run(&mut dev, &trace, &o, &mut model, &stop).unwrap();
    assert_eq!(r.pool_bytes, Some(256 * MIB));
    // One region (after the ballast), no per-buffer driver allocations.
    assert_eq!(dev.log.iter().filter(|l| l.starts_with("alloc")).count(), 2);
    assert!(dev
        .log
        .iter()
        .any(|l| l.starts_with("strided") && l.ends_with("x2")));
    assert_eq!(r.real.oom_step, Some(4));
    assert_eq!(r.real.checksum_mismatches, 0);
    assert_eq!(r.real.buffers_verified, 3);
    assert_eq!(dev.live_allocations(), 0);
}

#[test]
fn bfc_mode_catches_a_model_that_overlaps_chunks() {
    let mut dev = SimDevice::new(GIB);
    let trace = [a(0, MIB), a(1, MIB), f(0), f(1)];
    let mut model = TestModel::new();
    model.overlap = true;
    let stop = AtomicBool::new(false);
    let r = run(&mut dev, &trace, &opts(Mode::Bfc), &mut model, &stop).unwrap();
    assert_eq!(
        r.real.checksum_mismatches,
        MIB / 16,
        "id 0 was overwritten by id 1"
    );
}

#[test]
fn a_placement_outside_the_pool_is_an_error_and_memory_is_freed() {
    struct Outside;
    impl Placer for Outside {
        fn pool_bytes(&self) -> u64 {
            4 * MIB
        }
        fn alloc(&mut self, _: u64, _: u64) -> Option<u64> {
            Some(4 * MIB - 256)
        }
        fn free(&mut self, _: u64) {}
    }
    struct M(TestModel);
    impl ReplayModel for M {
        fn predict(&mut self, e: &[TraceEvent], c: &ModelCapacity) -> Result<Prediction, String> {
            self.0.predict(e, c)
        }
        fn placer(&mut self, _: &ModelCapacity) -> Result<Box<dyn Placer>, String> {
            Ok(Box::new(Outside))
        }
    }
    let mut dev = SimDevice::new(GIB);
    let stop = AtomicBool::new(false);
    let err = run(
        &mut dev,
        &[a(0, 4096)],
        &opts(Mode::Bfc),
        &mut M(TestModel::new()),
        &stop,
    )
    .unwrap_err();
    assert!(
        matches!(err, RunError::PlacementOutside { index: 0, .. }),
        "{err}"
    );
    assert_eq!(dev.live_allocations(), 0);
}

#[test]
fn a_driver_error_mid_run_still_frees_everything() {
    let mut dev = SimDevice::new(GIB);
    dev.fail_alloc_call = Some(2);
    let trace = [a(0, MIB), a(1, MIB), a(2, MIB), a(3, MIB)];
    let stop = AtomicBool::new(false);
    let err = run(
        &mut dev,
        &trace,
        &opts(Mode::Driver),
        &mut TestModel::new(),
        &stop,
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("event 2:"), "{err}");
    assert!(err.to_string().contains("injected"), "{err}");
    assert_eq!(dev.live_allocations(), 0);
    assert_eq!(dev.mem_info().unwrap().free_bytes, GIB);
}

#[test]
fn an_interrupt_stops_between_events_and_frees_everything() {
    let mut dev = SimDevice::new(GIB);
    let stop = Arc::new(AtomicBool::new(false));
    dev.interrupt_after_allocs = Some((2, Arc::clone(&stop)));
    let trace: Vec<TraceEvent> = (0..10).map(|i| a(i, MIB)).collect();
    let r = run(
        &mut dev,
        &trace,
        &opts(Mode::Driver),
        &mut TestModel::new(),
        &stop,
    )
    .unwrap();
    assert!(r.real.interrupted);
    assert_eq!(r.real.events_replayed, 2);
    assert!(!r.agrees);
    assert_eq!(dev.live_allocations(), 0);
    assert_eq!(r.cleanup_freed, 2);
}

#[test]
fn a_busy_device_is_refused_unless_forced() {
    let mut dev = SimDevice::new(GIB);
    dev.foreign_used = GIB / 2;
    let stop = AtomicBool::new(false);
    let err = run(
        &mut dev,
        &[a(0, MIB)],
        &opts(Mode::Driver),
        &mut TestModel::new(),
        &stop,
    )
    .unwrap_err();
    assert!(matches!(err, RunError::Refused { .. }));
    assert!(err.to_string().contains("--force"));
    assert!(dev.log.is_empty(), "nothing was allocated before refusing");
    let mut o = opts(Mode::Driver);
    o.force = true;
    let r = run(&mut dev, &[a(0, MIB)], &o, &mut TestModel::new(), &stop).unwrap();
    assert!(r.real.fits);
}

#[test]
fn cleanup_errors_are_reported_not_hidden() {
    let mut dev = SimDevice::new(GIB);
    dev.fail_frees = true;
    let stop = AtomicBool::new(false);
    let r = run(
        &mut dev,
        &[a(0, MIB)],
        &opts(Mode::Driver),
        &mut TestModel::new(),
        &stop,
    )
    .unwrap();
    assert_eq!(r.cleanup_errors.len(), 1);
    assert!(r.cleanup_errors[0].contains("cuMemFree_v2"));
}

#[test]
fn a_bad_trace_is_rejected_before_touching_the_device() {
    let mut dev = SimDevice::new(GIB);
    let stop = AtomicBool::new(false);
    let err = run(
        &mut dev,
        &[a(0, MIB), f(7)],
        &opts(Mode::Driver),
        &mut TestModel::new(),
        &stop,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "trace: event 1: free of id 7, which is not live"
    );
    assert!(dev.log.is_empty());
}

#[test]
fn bandwidth_is_measured_on_owned_buffers_and_freed() {
    let mut dev = SimDevice::new(GIB);
    let mut o = opts(Mode::Driver);
    o.bandwidth_bytes = Some(64 * MIB);
    let stop = AtomicBool::new(false);
    let r = run(&mut dev, &[a(0, MIB)], &o, &mut TestModel::new(), &stop).unwrap();
    let b = r.bandwidth.unwrap();
    assert_eq!(b.buffer_bytes, 64 * MIB);
    assert!((b.touch_fraction_of_copy - 0.5).abs() < 1e-9); // sim: equal times, copy counts 2x bytes
    assert_eq!(dev.live_allocations(), 0);
}

#[test]
fn a_session_frees_on_panic() {
    let mut dev = SimDevice::new(GIB);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut s = memwatch_kernels::session::Session::new(&mut dev);
        s.alloc(MIB).unwrap();
        s.alloc(MIB).unwrap();
        panic!("boom");
    }));
    assert!(result.is_err());
    assert_eq!(dev.live_allocations(), 0);
}

#[test]
fn kernels_only_touch_owned_ranges() {
    let mut dev = SimDevice::new(GIB);
    let mut s = memwatch_kernels::session::Session::new(&mut dev);
    let p = s.alloc(4096).unwrap();
    assert!(s.touch(p, 4096, 1).is_ok());
    assert!(s.touch(p + 16, 4096, 1).is_err());
    assert!(s.touch(p - 16, 16, 1).is_err());
    assert!(s.checksum(0x1000, 16, 1).is_err());
    assert!(s.free(p + 1).is_err());
}
