//! The BFC model against the real allocator: every step of the recorded H200 runs.

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
    let prealloc = t.meta.preallocate.unwrap();
    assert_eq!(prealloc, expect_prealloc);
    let mut m = Bfc::new(BfcConfig::jax(limit, prealloc));
    let r = replay(
        &t,
        &mut m,
        ReplayOptions {
            record_steps: true,
            check_invariants: true,
            ..Default::default()
        },
        &mut |_| {},
    )
    .unwrap();
    let steps = r.steps.unwrap();
    let obs = t.observed.as_ref().unwrap();
    assert_eq!(steps.len(), obs.len());
    for (i, (s, o)) in steps.iter().zip(obs).enumerate() {
        assert_eq!(
            (s.bytes_in_use, s.largest_free_block_bytes),
            (o.bytes_in_use, o.largest_free_block_bytes),
            "seed {seed} step {i}: model (in_use, largest_free) differs from the real allocator"
        );
    }
    assert_eq!(r.oom_step, t.meta.oom_step, "seed {seed}: OOM step");
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
    let mut dumped = Vec::new();
    let mut base = None;
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
        let base = *base.get_or_insert(addr);
        dumped.push((
            addr - base,
            w[3].parse::<u64>().unwrap(),
            state,
            w[5].to_string(),
        ));
    }
    assert_eq!(dumped.len(), 16);
    let b0 = oom.blocks[0].addr;
    let model: Vec<_> = oom
        .blocks
        .iter()
        .map(|b| {
            let st = if b.state == memwatch_analysis::alloc::BlockState::InUse {
                "InUse"
            } else {
                "Free"
            };
            (b.addr - b0, b.size, st, b.label.to_string())
        })
        .collect();
    assert_eq!(model, dumped);
    assert_eq!(m.central_gap_bytes(), 1_126_240_256);
    assert_eq!(m.next_region_target(), 2 * 6_006_243_328);
}
