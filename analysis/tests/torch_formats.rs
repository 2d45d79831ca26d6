//! Snapshot layouts of PyTorch versions before 2.11, read as memwatch reads 2.11's.
//!
//! The pickles of `testdata/torch-snapshots/formats/` are CONSTRUCTED FROM PYTORCH'S
//! SOURCE, NOT RECORDED: `make_formats.py` writes one small program's history (two
//! segments, three allocations, one free, one OOM) in each layout, key by key in the
//! insertion order of the code that builds it (the code read for each is named there and
//! in `testdata/torch-snapshots/README.md`):
//!
//! - `v2_0_history` (2.0): `torch/csrc/cuda/Module.cpp` `THCPModule_memorySnapshot` of
//!   the 2.0 API (`_cuda_recordMemoryHistory(bool, bool, bool, Py_ssize_t, bool)`):
//!   blocks with `history` and no `address` / `requested_size` / `frames`, separate
//!   `cpp_frames`, no time;
//! - `v2_1_frames` (2.1): the same function once it binds `_cuda_record_memory_history`
//!   (`enabled`/`context`/`stacks`) and `_cuda_record_memory_history_legacy`: blocks with
//!   `address`, `requested_size`, `frames`; segments with `requested_size`,
//!   `segment_pool_id`, `is_expandable`, `frames`; trace entries without `time_us`;
//! - `v2_2_time_us` (2.2, pytorch/pytorch#112266): trace entries with `time_us`;
//! - `v2_3_settings` (2.3–2.4, #119404): the root with `allocator_settings`;
//! - `v2_5_annotations` (2.5–2.7, #130964): the root with `external_annotations`
//!   (`{stage, name, device, time_us}`);
//! - `v2_8_compile_context` (2.8–2.9, #152707): `compile_context` on trace entries;
//! - `v2_10_user_metadata` (2.10–2.11, #165490): `user_metadata` too, the layout of the
//!   2.11 recordings in `testdata/torch-snapshots/`;
//! - `cpp_api_protocol2`: `torch/csrc/cuda/memory_snapshot.cpp`
//!   `_memory_snapshot_pickled()` (the C++ API; TorchScript's pickler, protocol 2).
//!
//! The release of each is inferred from the date of the pull request that added the key
//! (the repository's release tags could not be read here).
//!
//! Every layout must give the program's figures: allocated 8 MiB + 512 B and reserved
//! 22 MiB at the dump, the replay ending on the dump's blocks, 8 MiB + 512 B at
//! `train.py:42`, the 64 MiB OOM with 1 GiB free; time where the layout has it.

use std::path::PathBuf;

use memwatch_analysis::torch::{report, scan_path, ReportOptions};

const MIB: u64 = 1 << 20;

fn layout(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/torch-snapshots/formats")
        .join(format!("{name}.pickle"))
}

/// (layout, has time, has settings, annotations).
const LAYOUTS: [(&str, bool, bool, usize); 8] = [
    ("v2_0_history", false, false, 0),
    ("v2_1_frames", false, false, 0),
    ("v2_2_time_us", true, false, 0),
    ("v2_3_settings", true, true, 0),
    ("v2_5_annotations", true, true, 2),
    ("v2_8_compile_context", true, true, 2),
    ("v2_10_user_metadata", true, true, 2),
    ("cpp_api_protocol2", true, true, 0),
];

#[test]
fn every_layout_reads_to_the_programs_figures() {
    for (name, timed, settings, annotations) in LAYOUTS {
        let scan = scan_path(&layout(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let r = report(&scan, &ReportOptions::default()).unwrap();
        assert_eq!(r.devices.len(), 1, "{name}");
        let d = &r.devices[0];
        assert_eq!(d.allocated_bytes, 8 * MIB + 512, "{name}: allocated");
        assert_eq!(d.reserved_bytes, 22 * MIB, "{name}: reserved");
        assert_eq!(d.active_bytes, 8 * MIB + 512, "{name}: active");
        assert_eq!(
            (d.segments, d.blocks),
            (2, 2),
            "{name}: segments, active blocks"
        );
        assert_eq!(d.trace_entries, 8, "{name}");
        let c = &d.end_check;
        assert_eq!(
            (c.size_mismatches, c.state_mismatches, c.missing, c.extra),
            (0, 0, 0, 0),
            "{name}: the replay ends on the dump's blocks: {:?}",
            c.examples
        );
        assert_eq!(d.peak_allocated.bytes, 12 * MIB, "{name}: peak allocated");
        let sites: Vec<(&str, u64)> = d
            .at_end
            .by_site
            .iter()
            .map(|s| (s.site.as_str(), s.bytes))
            .collect();
        assert_eq!(
            sites,
            vec![("train.py:42 in step", 8 * MIB + 512)],
            "{name}"
        );
        assert_eq!(d.ooms_total, 1, "{name}");
        let oom = &d.ooms[0];
        assert_eq!(
            (oom.requested_bytes, oom.device_free_bytes),
            (64 * MIB, 1 << 30),
            "{name}"
        );
        assert_eq!(oom.site.as_deref(), Some("train.py:57 in step"), "{name}");
        // The blocks' stacks: the user's frame first whatever the layout.
        let held = scan
            .segments
            .iter()
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.stack.is_known())
            .count();
        assert_eq!(held, 2, "{name}: the held blocks have their stacks");
        if timed {
            assert_eq!(r.start_time_unix_us, Some(1_732_600_000_000_000), "{name}");
            assert_eq!(d.duration_ns, 50_000, "{name}");
        } else {
            assert_eq!(r.start_time_unix_us, None, "{name}: no time recorded");
            assert_eq!(d.duration_ns, 0, "{name}");
        }
        assert_eq!(r.annotations, annotations, "{name}");
        assert_eq!(
            r.allocator_settings.expandable_segments,
            settings.then_some(false),
            "{name}"
        );
        assert_eq!(r.allocator_settings.max_split_size, None, "{name}");
    }
}
