//! Fuzz target: any file given to `memwatch replay` (a capture, a `bfc_validate`
//! document, JSON lines, or an XLA log with a BFC out-of-memory dump) never panics the
//! trace reader, and a trace it accepts never panics an allocator model, whose invariants
//! are checked after every event.
#![no_main]
use libfuzzer_sys::fuzz_target;
use memwatch_analysis::alloc::replay::{replay, ReplayOptions};
use memwatch_analysis::alloc::{build, trace::read_any, AllocatorKind, ModelSpec};

fuzz_target!(|data: &[u8]| {
    let Ok(trace) = read_any(data, None) else {
        return;
    };
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
            let _ = replay(&trace, model.as_mut(), opts, &mut |_| {});
        }
    }
});
