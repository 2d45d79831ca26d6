//! Shared by the fuzz targets that produce allocation traces (`capture`, `replay`).

use memwatch_analysis::alloc::replay::{replay, ReplayOptions};
use memwatch_analysis::alloc::trace::Trace;
use memwatch_analysis::alloc::{build, AllocatorKind, ModelSpec};

/// Replays `trace` through every allocator model, with and without preallocation, with
/// each step recorded and the model's invariants checked after every event: none may
/// panic (an out-of-memory result is fine).
pub fn replay_through_every_model(trace: &Trace) {
    for kind in [
        AllocatorKind::Bfc,
        AllocatorKind::Platform,
        AllocatorKind::Async,
        AllocatorKind::Torch,
    ] {
        for preallocate in [false, true] {
            let mut model = build(&ModelSpec {
                kind,
                limit: 1 << 30,
                preallocate,
                granularity: 2 << 20,
                device_free_bytes: None,
            });
            let opts = ReplayOptions {
                check_invariants: true,
                record_steps: true,
                ..ReplayOptions::default()
            };
            let _ = replay(trace, model.as_mut(), opts, &mut |_| {});
        }
    }
}
