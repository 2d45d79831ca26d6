//! Property tests: random traces never break any model's invariants (chunks tile the
//! pool, no overlap, free structures consistent, statistics add up).

use memwatch_analysis::alloc::bfc::{Bfc, BfcConfig, End};
use memwatch_analysis::alloc::replay::{replay, ReplayOptions};
use memwatch_analysis::alloc::trace::Trace;
use memwatch_analysis::alloc::{build, AllocatorKind, AllocatorModel, ModelSpec};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Alloc(u64, bool),
    Free(usize),
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        1u64..4096,
        4096u64..(1 << 20),
        (1u64 << 20)..(64 << 20),
        (64u64 << 20)..(400 << 20),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (size(), any::<bool>()).prop_map(|(s, u)| Op::Alloc(s, u)),
            2 => any::<usize>().prop_map(Op::Free),
        ],
        1..160,
    )
}

fn to_trace(ops: &[Op]) -> Trace {
    let mut live: Vec<u64> = Vec::new();
    let mut pairs = Vec::new();
    let mut next = 0u64;
    for op in ops {
        match *op {
            Op::Alloc(s, _) => {
                pairs.push((next, Some(s)));
                live.push(next);
                next += 1;
            }
            Op::Free(i) if !live.is_empty() => {
                let id = live.swap_remove(i % live.len());
                pairs.push((id, None));
            }
            Op::Free(_) => {}
        }
    }
    Trace::from_pairs(pairs).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_model_keeps_its_invariants(ops in ops(), limit_mib in 16u64..2048, prealloc in any::<bool>()) {
        let t = to_trace(&ops);
        for kind in AllocatorKind::ALL {
            let spec = ModelSpec { kind, limit: limit_mib << 20, preallocate: prealloc, granularity: 2 << 20, device_free_bytes: None };
            let mut m = build(&spec);
            let r = replay(&t, m.as_mut(), ReplayOptions { record_steps: true, check_invariants: true, ..Default::default() }, &mut |_| {});
            prop_assert!(r.is_ok(), "{}: {:?}", kind.name(), r.err());
            let r = r.unwrap();
            for s in r.steps.unwrap() {
                prop_assert!(s.bytes_in_use <= limit_mib << 20);
                prop_assert!(s.largest_free_block_bytes <= limit_mib << 20);
            }
        }
    }

    #[test]
    fn bfc_growth_with_refusals_and_gc_keeps_invariants(ops in ops(), limit_mib in 16u64..2048, device_mib in 8u64..2048, gc in any::<bool>()) {
        let mut cfg = BfcConfig::jax(limit_mib << 20, false);
        cfg.device_free_bytes = Some(device_mib << 20);
        cfg.garbage_collection = gc;
        let mut m = Bfc::new(cfg);
        let mut live = Vec::new();
        for op in &ops {
            match *op {
                Op::Alloc(s, _) => if let Some(h) = m.allocate(s, End::Lower) { live.push(h) },
                Op::Free(i) if !live.is_empty() => { let h = live.swap_remove(i % live.len()); m.deallocate(h) },
                Op::Free(_) => {}
            }
            prop_assert!(m.check().is_ok(), "{:?}", m.check());
            prop_assert!(m.stats().pool_bytes <= (device_mib << 20).min(limit_mib << 20) + 256);
        }
    }

    #[test]
    fn bfc_spatial_both_ends_keep_one_gap(ops in ops(), limit_mib in 16u64..2048) {
        let mut m = Bfc::new(BfcConfig::jax(limit_mib << 20, true));
        let mut live = Vec::new();
        for op in &ops {
            match *op {
                Op::Alloc(s, upper) => {
                    let end = if upper { End::Upper } else { End::Lower };
                    if let Some(h) = m.allocate(s, end) { live.push(h) }
                }
                Op::Free(i) if !live.is_empty() => { let h = live.swap_remove(i % live.len()); m.deallocate(h) },
                Op::Free(_) => {}
            }
            prop_assert!(m.check().is_ok(), "{:?}", m.check());
        }
        for h in live { m.deallocate(h); }
        prop_assert!(m.check().is_ok());
        // Everything freed: the whole pool is the central gap again.
        prop_assert_eq!(m.stats().bytes_in_use, 0);
        if m.stats().pool_bytes > 0 {
            prop_assert_eq!(m.central_gap_bytes(), m.stats().pool_bytes);
            prop_assert_eq!(m.largest_free_block(), m.stats().pool_bytes);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]

    /// The exact minimum a preallocated BFC pool reports (its high-water mark) is right:
    /// the trace fits there and at any larger limit tried, and fails 256 bytes below.
    #[test]
    fn bfc_exact_min_limit_is_the_threshold(ops in ops(), extra in prop::collection::vec(0u64..(512 << 20), 3)) {
        use memwatch_analysis::alloc::replay::find_min_limit;
        let t = to_trace(&ops);
        prop_assume!(t.buffers() > 0);
        let spec = |limit| ModelSpec { kind: AllocatorKind::Bfc, limit, preallocate: true, granularity: 2 << 20, device_free_bytes: None };
        let m = find_min_limit(&t, &spec, 1 << 20, 1 << 40, &mut |_, _| {}).unwrap().unwrap();
        prop_assert!(m.exact);
        let fits = |limit: u64| {
            let mut model = build(&spec(limit));
            replay(&t, model.as_mut(), ReplayOptions::default(), &mut |_| {}).unwrap().fits
        };
        prop_assert!(fits(m.min_pool_bytes));
        prop_assert!(!fits(m.min_pool_bytes - 256));
        for e in extra {
            prop_assert!(fits(m.min_pool_bytes + e));
        }
    }
}
