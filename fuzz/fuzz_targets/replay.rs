//! Fuzz target: any file given to `memwatch replay` (a capture, a `bfc_validate`
//! document, JSON lines, or an XLA log with a BFC out-of-memory dump) never panics the
//! trace reader, and a trace it accepts never panics an allocator model, whose invariants
//! are checked after every event.
#![no_main]
use libfuzzer_sys::fuzz_target;
use memwatch_analysis::alloc::trace::read_any;

#[path = "common/models.rs"]
mod models;

fuzz_target!(|data: &[u8]| {
    if let Ok(trace) = read_any(data, None) {
        models::replay_through_every_model(&trace);
    }
});
