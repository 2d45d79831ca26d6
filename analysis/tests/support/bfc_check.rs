//! Shared by the BFC tests against the real allocator (`bfc_fixtures.rs`,
//! `bfc_h200_validation.rs`): replay a recording step by step, and compare chunk layouts
//! with the allocator's own OOM dump.

use memwatch_analysis::alloc::bfc::{Bfc, BfcConfig};
use memwatch_analysis::alloc::replay::{replay, Oom, ReplayOptions, ReplayResult};
use memwatch_analysis::alloc::trace::Trace;
use memwatch_analysis::alloc::BlockState;

/// One chunk: address, size, "InUse"/"Free", tag.
pub type Chunk = (u64, u64, &'static str, String);

/// Replays a recording through the BFC model configured as JAX configures it (the
/// recording's pool limit and preallocation mode, invariants checked) and asserts that
/// every step's `bytes_in_use` and `largest_free_block_bytes`, and the OOM step, equal
/// the real allocator's. Returns the replay for further checks.
pub fn replay_matches_every_step(t: &Trace, label: &str) -> ReplayResult {
    let limit = t.meta.bytes_limit.unwrap();
    let prealloc = t.meta.preallocate.unwrap();
    let mut m = Bfc::new(BfcConfig::jax(limit, prealloc));
    let r = replay(
        t,
        &mut m,
        ReplayOptions {
            record_steps: true,
            check_invariants: true,
            ..Default::default()
        },
        &mut |_| {},
    )
    .unwrap();
    let steps = r.steps.as_ref().unwrap();
    let obs = t.observed.as_ref().unwrap();
    assert_eq!(steps.len(), obs.len(), "{label}: step count");
    for (i, (s, o)) in steps.iter().zip(obs).enumerate() {
        assert_eq!(
            (s.bytes_in_use, s.largest_free_block_bytes),
            (o.bytes_in_use, o.largest_free_block_bytes),
            "{label} step {i}: model (in_use, largest_free) differs from the real allocator"
        );
    }
    assert_eq!(r.oom_step, t.meta.oom_step, "{label}: OOM step");
    r
}

/// The chunks of a BFC OOM dump in a TF_CPP_MIN_LOG_LEVEL=0 log, in address order.
pub fn dumped_chunks(log: &str) -> Vec<Chunk> {
    let mut out = Vec::new();
    for line in log.lines() {
        let Some(rest) = line.split("] ").nth(1) else {
            continue;
        };
        let (state, rest) = if let Some(r) = rest.strip_prefix("InUse at ") {
            ("InUse", r)
        } else if let Some(r) = rest.strip_prefix("Free  at ") {
            ("Free", r)
        } else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        let addr = u64::from_str_radix(w[0], 16).unwrap();
        out.push((addr, w[3].parse::<u64>().unwrap(), state, w[5].to_string()));
    }
    out
}

/// The model's chunks at the OOM, in the same form.
pub fn model_chunks(oom: &Oom) -> Vec<Chunk> {
    oom.blocks
        .iter()
        .map(|b| {
            let st = if b.state == BlockState::InUse {
                "InUse"
            } else {
                "Free"
            };
            (b.addr, b.size, st, b.label.to_string())
        })
        .collect()
}
