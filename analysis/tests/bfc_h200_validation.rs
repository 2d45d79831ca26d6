//! The BFC model against every recording in `testdata/h200-gpu-validation/` (random traces
//! run on an H200 by `tests/gpu/bfc_validate_many.sh`): the model's `bytes_in_use` and
//! `largest_free_block_bytes` after every step, and the OOM step, equal the real
//! allocator's.

use memwatch_analysis::alloc::bfc::{Bfc, BfcConfig};
use memwatch_analysis::alloc::replay::{replay, ReplayOptions};
use memwatch_analysis::alloc::trace::read_any;

fn recordings() -> Vec<std::path::PathBuf> {
    let dir = format!(
        "{}/../testdata/h200-gpu-validation",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("rec_") && name.ends_with(".json") && !name.ends_with(".replay.json")
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_validation_recording_matches_at_every_step() {
    let recs = recordings();
    assert!(recs.len() >= 2, "no recordings found");
    for path in recs {
        let name = path.display();
        let t = read_any(&std::fs::read(&path).unwrap(), None).unwrap();
        let limit = t.meta.bytes_limit.unwrap();
        let prealloc = t.meta.preallocate.unwrap();
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
        assert_eq!(steps.len(), obs.len(), "{name}: step count");
        for (i, (s, o)) in steps.iter().zip(obs).enumerate() {
            assert_eq!(
                (s.bytes_in_use, s.largest_free_block_bytes),
                (o.bytes_in_use, o.largest_free_block_bytes),
                "{name} step {i}: model (in_use, largest_free) differs from the real allocator"
            );
        }
        assert_eq!(r.oom_step, t.meta.oom_step, "{name}: OOM step");
    }
}

/// The last chunk of both recordings' OOM dumps is the former central gap, handed out
/// whole (the allocator's own log): the model's layout at the OOM equals it.
#[test]
fn oom_layouts_match_the_allocator_dumps() {
    for path in recordings() {
        let t = read_any(&std::fs::read(&path).unwrap(), None).unwrap();
        let mut m = Bfc::new(BfcConfig::jax(
            t.meta.bytes_limit.unwrap(),
            t.meta.preallocate.unwrap(),
        ));
        let r = replay(&t, &mut m, ReplayOptions::default(), &mut |_| {}).unwrap();
        let oom = r.oom.unwrap();
        let log = std::fs::read_to_string(path.with_extension("log")).unwrap();
        let mut dumped = Vec::new();
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
            dumped.push((addr, w[3].parse::<u64>().unwrap(), state, w[5].to_string()));
        }
        assert!(!dumped.is_empty(), "{}: no dump", path.display());
        let model: Vec<_> = oom
            .blocks
            .iter()
            .map(|b| {
                let st = if b.state == memwatch_analysis::alloc::BlockState::InUse {
                    "InUse"
                } else {
                    "Free"
                };
                (b.addr, b.size, st, b.label.to_string())
            })
            .collect();
        assert_eq!(model, dumped, "{}", path.display());
    }
}
