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
        assert_eq!(
            d.live_bytes_at_exit,
            reserved + driver_live,
            "pid {}",
            p.pid
        );
    }
}

/// One worker's printed event (`events.rank<R>.jsonl`): CLOCK_MONOTONIC ns, as the
/// capture's raw times.
struct Printed {
    rank: u64,
    event: String,
    name: String,
    mono_ns: u64,
}

fn printed(name: &str) -> Vec<Printed> {
    let mut out = Vec::new();
    for rank in 0.. {
        let Ok(text) =
            std::fs::read_to_string(scenario(name).join(format!("events.rank{rank}.jsonl")))
        else {
            break;
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            out.push(Printed {
                rank: v["rank"].as_u64().unwrap(),
                event: v["event"].as_str().unwrap().to_string(),
                name: v["name"]
                    .as_str()
                    .map(str::to_string)
                    .or_else(|| v["step"].as_u64().map(|s| format!("step {s}")))
                    .unwrap_or_default(),
                mono_ns: v["mono_ns"].as_u64().unwrap(),
            });
        }
    }
    out
}

/// Rank -> (from, until) of one printed window.
type Window = HashMap<u64, (u64, u64)>;

/// Each worker's printed windows `<what>_start`..`<what>_end`, by name.
fn windows(p: &[Printed], what: &str) -> Vec<(String, Window)> {
    let mut out: Vec<(String, Window)> = Vec::new();
    for s in p.iter().filter(|e| e.event == format!("{what}_start")) {
        let end = p
            .iter()
            .find(|e| e.rank == s.rank && e.name == s.name && e.event == format!("{what}_end"))
            .unwrap();
        let i = match out.iter().position(|(n, _)| *n == s.name) {
            Some(i) => i,
            None => {
                out.push((s.name.clone(), HashMap::new()));
                out.len() - 1
            }
        };
        out[i].1.insert(s.rank, (s.mono_ns, end.mono_ns));
    }
    out
}

/// Raw (monotonic) stretches of one API's calls on several devices at once.
fn stretches(r: &CaptureReport, api: &str) -> (u64, Vec<(u64, u64)>) {
    let a = r.api.iter().find(|a| a.api == api).unwrap();
    assert_eq!(
        a.concurrent_device_stretches.len() as u64,
        a.concurrent_device_stretches_total
    );
    let s = a
        .concurrent_device_stretches
        .iter()
        .map(|s| {
            (
                s.from_ns + r.start_monotonic_ns,
                s.until_ns + r.start_monotonic_ns,
            )
        })
        .collect();
    (a.max_concurrent_devices, s)
}

/// Both JAX workers compile init, step and eval at the same time: the capture's
/// "devices at once" of PJRT_Client_Compile is 2, and for each executable the stretch
/// where both compiled lies inside the overlap of the two workers' printed
/// compile_start..compile_end and covers most of it. Module loads overlap only where
/// both workers were inside a PJRT compile or execution, never across the edge of a
/// window one worker printed.
#[test]
fn concurrent_compiles_and_module_loads_match_the_workers_own_times_in_jax_train() {
    let r = report("jax_train");
    let p = printed("jax_train");
    let compiles = windows(&p, "compile");
    assert_eq!(compiles.len(), 3, "init, step, eval");
    let (devices, compile_stretches) = stretches(&r, "PJRT_Client_Compile");
    assert_eq!(devices, 2);
    for (name, w) in &compiles {
        assert_eq!(w.len(), 2, "{name}: both workers");
        let from = w.values().map(|x| x.0).max().unwrap();
        let until = w.values().map(|x| x.1).min().unwrap();
        assert!(from < until, "{name}: the workers' own windows overlap");
        let inside: u64 = compile_stretches
            .iter()
            .filter(|s| s.0 >= from && s.1 <= until)
            .map(|s| s.1 - s.0)
            .sum();
        assert!(
            inside * 10 >= (until - from) * 8,
            "{name}: the capture shows both compiling for {inside} of the {} ns both workers printed",
            until - from
        );
        // No stretch crosses the edge of the printed overlap.
        for s in &compile_stretches {
            let crosses = (s.0 < from && s.1 > from) || (s.0 < until && s.1 > until);
            assert!(
                !crosses || s.1 - s.0 > until - from,
                "{name}: stretch {s:?} crosses {from}..{until}"
            );
        }
    }

    let (devices, loads) = stretches(&r, "cuModuleLoadData");
    assert_eq!(devices, 2);
    assert!(!loads.is_empty());
    let mut pjrt: Vec<(u64, u64)> = Vec::new();
    for api in [
        "PJRT_Client_Compile",
        "PJRT_LoadedExecutable_Execute",
        "PJRT_LoadedExecutable_Execute:complete",
    ] {
        pjrt.extend(stretches(&r, api).1);
    }
    let steps = windows(&p, "step");
    let mut printed_windows: Vec<&Window> = compiles.iter().map(|(_, w)| w).collect();
    printed_windows.extend(steps.iter().map(|(_, w)| w));
    for l in &loads {
        assert!(
            pjrt.iter().any(|s| s.0 <= l.0 && l.1 <= s.1),
            "module loads on both GPUs at {l:?} outside any time both workers ran PJRT calls"
        );
        for w in &printed_windows {
            let in_one = w.values().filter(|x| x.0 <= l.0 && l.1 <= x.1).count();
            let touches = w.values().filter(|x| x.0 < l.1 && l.0 < x.1).count();
            assert!(
                in_one == touches,
                "module loads on both GPUs at {l:?} straddle a window a worker printed"
            );
            assert!(
                in_one == 0 || in_one == w.len(),
                "{l:?}: inside one worker's window only"
            );
        }
    }
}
