//! The BFC model against the real allocator: every step of the recorded H200 runs.

#[path = "support/bfc_check.rs"]
mod bfc_check;

use bfc_check::{dumped_chunks, model_chunks, replay_matches_every_step, Chunk};
use memwatch_analysis::alloc::bfc::{Bfc, BfcConfig};
use memwatch_analysis::alloc::device::{pool_limit, resolve};
use memwatch_analysis::alloc::replay::{replay, ReplayOptions};
use memwatch_analysis::alloc::trace::{read_any, Trace};

fn fixture(seed: u32) -> Trace {
    let path = format!(
        "{}/../testdata/h200/bfc/h200-jax0.11.2/bfc_seed{seed}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    read_any(&std::fs::read(&path).unwrap(), None).unwrap()
}

fn check(seed: u32, expect_prealloc: bool) {
    let t = fixture(seed);
    let limit = t.meta.bytes_limit.unwrap();
    assert_eq!(limit, 6_006_243_328);
    // The pool limit is what JAX computes from the H200's total and the fraction 0.04.
    assert_eq!(
        pool_limit(resolve("h200").unwrap().capacity_bytes, 0.04),
        limit
    );
    assert_eq!(t.meta.preallocate.unwrap(), expect_prealloc);
    let r = replay_matches_every_step(&t, &format!("seed {seed}"));
    assert!(r.oom_step.is_some());
}

#[test]
fn seed11_preallocated_every_step() {
    check(11, true);
}

#[test]
fn seed12_preallocated_every_step() {
    check(12, true);
}

#[test]
fn seed13_growing_pool_every_step() {
    check(13, false);
}

/// The chunk layout at run 12's OOM equals the allocator's own dump (bfc_seed12.log):
/// sizes, states and tags of every chunk in address order.
#[test]
fn seed12_layout_matches_the_oom_dump() {
    let t = fixture(12);
    let mut m = Bfc::new(BfcConfig::jax(t.meta.bytes_limit.unwrap(), true));
    let r = replay(&t, &mut m, ReplayOptions::default(), &mut |_| {}).unwrap();
    let oom = r.oom.unwrap();
    let log = std::fs::read_to_string(format!(
        "{}/../testdata/h200/bfc/h200-jax0.11.2/bfc_seed12.log",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let dumped = rebased(dumped_chunks(&log));
    assert_eq!(dumped.len(), 16);
    assert_eq!(rebased(model_chunks(&oom)), dumped);
    assert_eq!(m.central_gap_bytes(), 1_126_240_256);
    assert_eq!(m.next_region_target(), 2 * 6_006_243_328);
}

/// Addresses relative to the first chunk's.
fn rebased(chunks: Vec<Chunk>) -> Vec<Chunk> {
    let base = chunks.first().map_or(0, |c| c.0);
    chunks
        .into_iter()
        .map(|(a, s, st, tag)| (a - base, s, st, tag))
        .collect()
}
