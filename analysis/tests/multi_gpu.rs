//! Capture analysis on the two-GPU recordings of `testdata/multi-gpu` (two NVIDIA H100s,
//! one worker process per GPU), checked against what the workers printed themselves
//! (`figures.rank<R>.json`, `events.rank<R>.jsonl`) and against the raw records of the
//! capture, never against hand-copied numbers.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use memwatch_analysis::capture::{analyze, load_path, CaptureReport, ReportOptions};
use memwatch_wire::{Api, Event, EventKind, FrameReader, ReadMode, Record};

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/multi-gpu")
        .join(name)
}

fn report(name: &str) -> CaptureReport {
    let loaded = load_path(&scenario(name).join("capture.mwcap"), &mut |_| {}).unwrap();
    analyze(loaded, &ReportOptions::default())
}

/// Every event of the capture, straight from the file, in time order.
fn raw_events(name: &str) -> Vec<Event> {
    let f = std::fs::File::open(scenario(name).join("capture.mwcap")).unwrap();
    let mut r = FrameReader::new(std::io::BufReader::new(f), ReadMode::Strict).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        if let Record::Events(ev) = rec {
            out.extend(ev);
        }
    }
    out.sort_by_key(|e| e.ts_ns);
    out
}

/// DDP over NCCL with cuMem: NCCL maps its own buffers and the peer's (imported) ones,
/// and frees each with retain + release, unmap, release. The 389 cuMemRelease calls per
/// worker against 147 cuMemCreate are all accounted for: none is unmatched, every
/// created handle is given back, the imported ones count nothing.
#[test]
fn nccl_vmm_buffers_are_accounted_for_in_torch_ddp() {
    let r = report("torch_ddp");
    let raw = raw_events("torch_ddp");
    assert_eq!(r.processes.len(), 2);
    for p in &r.processes {
        let mine: Vec<&Event> = raw.iter().filter(|e| e.pid == p.pid).collect();
        let created: HashSet<u64> = mine
            .iter()
            .filter(|e| e.api() == Api::CuMemCreate && e.kind() == Some(EventKind::Alloc))
            .map(|e| e.ptr)
            .collect();
        let releases: Vec<u64> = mine
            .iter()
            .filter(|e| e.api() == Api::CuMemRelease && e.kind() == Some(EventKind::Free))
            .map(|e| e.ptr)
            .collect();
        let mapped_not_created: HashSet<u64> = mine
            .iter()
            .filter(|e| e.api() == Api::CuMemMap && !created.contains(&e.aux))
            .map(|e| e.aux)
            .collect();
        assert!(
            !mapped_not_created.is_empty(),
            "the peer's buffers are mapped"
        );
        let of_created = releases.iter().filter(|h| created.contains(h)).count() as u64;
        let of_imported = releases
            .iter()
            .filter(|h| mapped_not_created.contains(h))
            .count() as u64;
        assert_eq!(
            of_created + of_imported,
            releases.len() as u64,
            "every release names a known handle"
        );

        let d = &p.devices[0];
        let refs = &d.vmm_reference_releases;
        assert_eq!(d.unmatched_frees, 0, "pid {}", p.pid);
        assert_eq!(refs.imported, of_imported, "pid {}", p.pid);
        // Each created handle is given back once (at a release, or at its last unmap
        // after a release while mapped); the further releases return retained references.
        assert_eq!(
            created.len() as u64 + refs.retained,
            of_created,
            "pid {}",
            p.pid
        );
        assert!(refs.still_mapped > 0 && refs.still_mapped <= created.len() as u64);
        assert!(d.free_count >= created.len() as u64);

        // Live at exit: PyTorch's reserved segments (its own figure) plus the driver
        // allocations still held; no VMM handle is left.
        let figures: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(
                scenario("torch_ddp").join(format!("figures.rank{}.json", d.device)),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(figures["pid"].as_u64(), Some(u64::from(p.pid)));
        let reserved = figures["memory_end"]["memory_reserved"].as_u64().unwrap();
        let mut driver: HashMap<u64, u64> = HashMap::new();
        for e in &mine {
            match (e.api(), e.kind()) {
                (Api::CuMemAlloc, Some(EventKind::Alloc)) => {
                    driver.insert(e.ptr, e.size);
                }
                (Api::CuMemFree, Some(EventKind::Free)) => {
                    driver.remove(&e.ptr);
                }
                _ => {}
            }
        }
        let driver_live: u64 = driver.values().sum();
        assert_eq!(d.live_bytes_at_exit, reserved + driver_live, "pid {}", p.pid);
    }
}
