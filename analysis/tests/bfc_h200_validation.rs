//! The BFC model against every recording in `testdata/h200-gpu-validation/` (random traces
//! run on an H200 by `tests/gpu/bfc_validate_many.sh`): the model's `bytes_in_use` and
//! `largest_free_block_bytes` after every step, and the OOM step, equal the real
//! allocator's.

#[path = "support/bfc_check.rs"]
mod bfc_check;

use bfc_check::{dumped_chunks, model_chunks, replay_matches_every_step};
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
        let t = read_any(&std::fs::read(&path).unwrap(), None).unwrap();
        replay_matches_every_step(&t, &path.display().to_string());
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
        let dumped = dumped_chunks(&log);
        assert!(!dumped.is_empty(), "{}: no dump", path.display());
        assert_eq!(model_chunks(&oom), dumped, "{}", path.display());
    }
}
