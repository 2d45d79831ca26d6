//! What the shim records on each lookup path (direct linking, dlopen + dlsym,
//! GetProcAddress), exactly: every call with its result, kind, device and timestamps,
//! the device descriptions, out-of-memory results, a runtime unloaded and reloaded,
//! runtimes that are absent, families switched off, address reuse across threads, and
//! a panic in the shim's own part that never reaches the program.

use crate::common::*;
use memwatch_wire::{ApiFamily, EventKind, Record};

fn check_basic(mode: &str) {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("basic.mwcap");
    let plain = b.run(mode, &["basic"], None, &[]);
    let shimmed = b.run(mode, &["basic"], Some(&cap), &[]);
    // Same output (results, out-pointers, errno after every call) with and without the shim.
    assert_eq!(
        normalized(&plain.stdout),
        normalized(&shimmed.stdout),
        "{mode}: output differs under the shim"
    );
    let want = expected(&String::from_utf8_lossy(&shimmed.stdout));
    assert!(
        want.len() >= 80,
        "{mode}: program printed {} calls",
        want.len()
    );
    let recs = read_capture(&cap);
    let evs = events(&recs);
    let got: Vec<Expected> = evs
        .iter()
        .zip(want.iter())
        .map(|(e, w)| as_expected(e, w.host_ptr))
        .collect();
    for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        assert_eq!(g, w, "{mode}: event {i} differs");
    }
    assert_eq!(
        evs.len(),
        want.len(),
        "{mode}: capture has {} events, program made {} recorded calls",
        evs.len(),
        want.len()
    );
    // One process, started and ended, all events from it, durations plausible.
    let starts: Vec<_> = recs
        .iter()
        .filter_map(|r| {
            if let Record::ProcessStart(p) = r {
                Some(p)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(starts.len(), 1);
    let pid = starts[0].pid;
    assert!(
        starts[0].argv.iter().any(|a| a == "basic"),
        "argv recorded: {:?}",
        starts[0].argv
    );
    assert!(recs
        .iter()
        .any(|r| matches!(r, Record::ProcessEnd(e) if e.pid == pid)));
    assert!(evs
        .iter()
        .all(|e| e.pid == pid && e.tid == pid && e.duration_ns < 1_000_000_000));
    assert!(
        evs.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
        "timestamps monotonic"
    );
    // The process's start stamp comes before its first event (readers take it as the
    // run's start and must not find events before it).
    assert!(
        evs.iter().all(|e| e.ts_ns >= starts[0].mono_anchor_ns),
        "{mode}: first event at {} before the process start stamp {}",
        evs.iter().map(|e| e.ts_ns).min().unwrap_or(0),
        starts[0].mono_anchor_ns
    );
    assert!(
        !recs.iter().any(|r| matches!(r, Record::Dropped(_))),
        "no drops"
    );
}

#[test]
fn direct_linking_is_captured_exactly() {
    check_basic("direct");
}

#[test]
fn dlopen_dlsym_is_captured_exactly() {
    check_basic("dlsym");
}

#[test]
fn get_proc_address_is_captured_exactly() {
    check_basic("proc");
}

#[test]
fn hook_families_can_be_switched_off() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("hip-only.mwcap");
    b.run("dlsym", &["basic"], Some(&cap), &[("MEMWATCH_HOOK", "hip")]);
    let evs = events(&read_capture(&cap));
    assert!(!evs.is_empty());
    assert!(
        evs.iter().all(|e| e.api().family() == Some(ApiFamily::Hip)),
        "only HIP recorded"
    );
}

#[test]
fn device_info_describes_simulated_devices() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("devices.mwcap");
    // Long enough that the flusher (not the exit path) sees the events.
    b.run(
        "direct",
        &["threads", "20000"],
        Some(&cap),
        &[("MEMWATCH_TESTRT_CAPACITY", "123456789")],
    );
    let recs = read_capture(&cap);
    let mut devs: Vec<_> = recs
        .iter()
        .filter_map(|r| {
            if let Record::DeviceInfo(d) = r {
                Some(d.clone())
            } else {
                None
            }
        })
        .collect();
    devs.sort_by_key(|d| d.device);
    assert!(!devs.is_empty(), "device_info frames");
    for d in &devs {
        assert_eq!(d.total_bytes, 123456789);
        assert_eq!(d.name, format!("memwatch simulated GPU {}", d.device));
        assert_eq!(
            memwatch_wire::Vendor::from_u8(d.vendor),
            memwatch_wire::Vendor::Simulated
        );
    }
    let ids: Vec<i32> = devs.iter().map(|d| d.device).collect();
    let mut dedup = ids.clone();
    dedup.dedup();
    assert_eq!(ids, dedup, "each device described once");
}

/// The devices `b`'s program `args` described, by ordinal.
fn described(b: &Built, args: &[&str], env: &[(&str, &str)]) -> Vec<memwatch_wire::DeviceInfo> {
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("ids.mwcap");
    b.run("direct", args, Some(&cap), env);
    let mut devs: Vec<_> = read_capture(&cap)
        .into_iter()
        .filter_map(|r| match r {
            Record::DeviceInfo(d) => Some(d),
            _ => None,
        })
        .collect();
    devs.sort_by_key(|d| d.device);
    devs
}

/// Under a visible-devices list, each ordinal is recorded with the UUID and PCI bus id
/// of the GPU it stands for, in canonical form (the simulated HIP runtime writes ROCm's
/// hex-text UUID and a lower-case bus id): the identity follows the list, not the ordinal.
#[test]
fn device_info_names_the_physical_gpu_behind_each_hip_ordinal() {
    let b = built("capture");
    for list in ["", "7,6,5,4,3,2,1,0", "3,0,5,1,7,2,6,4"] {
        let devs = described(b, &["threads", "20000"], &[("HIP_VISIBLE_DEVICES", list)]);
        assert_eq!(devs.len(), 8, "{list}: {devs:?}");
        let phys: Vec<i32> = if list.is_empty() {
            (0..8).collect()
        } else {
            list.split(',').map(|p| p.parse().unwrap()).collect()
        };
        for d in &devs {
            let p = phys[d.device as usize];
            let id = d.identity.clone().expect("identity recorded");
            assert_eq!(id.uuid, format!("GPU-6d777465{:08x}", 0xa0 + p), "{list}");
            assert_eq!(
                id.pci_bus_id,
                format!("0000:{:02x}:00.0", 0xc1 + p),
                "{list}"
            );
        }
    }
}

/// The CUDA driver's UUID bytes are written as NVML prints them and its upper-case bus
/// id in the one form; a MIG instance (cuDeviceGetUuid_v2 differs from cuDeviceGetUuid)
/// is named MIG-.
#[test]
fn device_info_names_the_physical_gpu_behind_each_cuda_ordinal() {
    let b = built("capture");
    for (list, n, mig) in [
        ("", "3", false),
        ("1", "1", false),
        ("6,5", "2", false),
        ("2", "1", true),
    ] {
        let devs = described(
            b,
            &["cu-threads", "20000", n],
            &[
                ("CUDA_VISIBLE_DEVICES", list),
                ("HIP_VISIBLE_DEVICES", ""),
                ("MEMWATCH_TESTRT_MIG", if mig { "1" } else { "0" }),
            ],
        );
        assert_eq!(devs.len().to_string(), n, "{list}: {devs:?}");
        let phys: Vec<i32> = list.split(',').filter_map(|p| p.parse().ok()).collect();
        for d in &devs {
            let p = phys.get(d.device as usize).copied().unwrap_or(d.device);
            let id = d.identity();
            let kind = if mig { "MIG" } else { "GPU" };
            let m = if mig { "4d" } else { "00" };
            assert_eq!(
                id.uuid,
                format!("{kind}-6d777465-7374-7274-{m}00-0000000000{:02x}", 0xa0 + p),
                "{list}"
            );
            assert_eq!(
                id.pci_bus_id,
                format!("0000:{:02x}:00.0", 0x1a + p),
                "{list}"
            );
        }
    }
}

#[test]
fn oom_under_small_capacity_is_recorded_with_real_code() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("oom.mwcap");
    // 1 MiB per device: the basic scenario's 1 MiB hipMalloc still fits, later ones fail.
    let plain = b.run(
        "dlsym",
        &["basic"],
        None,
        &[("MEMWATCH_TESTRT_CAPACITY", "1048576")],
    );
    let out = b.run(
        "dlsym",
        &["basic"],
        Some(&cap),
        &[("MEMWATCH_TESTRT_CAPACITY", "1048576")],
    );
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
    let want = expected(&String::from_utf8_lossy(&out.stdout));
    let evs = events(&read_capture(&cap));
    assert_eq!(evs.len(), want.len());
    let failed: Vec<_> = evs
        .iter()
        .filter(|e| e.is(EventKind::AllocFailed))
        .collect();
    assert!(failed.len() >= 5, "several allocations fail at 1 MiB");
    assert!(
        failed.iter().all(|e| e.result != 0 && e.ptr == 0),
        "{failed:?}"
    );
    assert!(
        failed.iter().filter(|e| e.result == 2).count() >= 5,
        "{failed:?}"
    );
    assert!(failed
        .iter()
        .any(|e| e.api().name() == "cuMemAlloc_v2" && e.size == 7 << 20 && e.result == 2));
}

#[test]
fn timestamps_are_clock_monotonic_and_durations_fit() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("clock.mwcap");
    let out = b.run("direct", &["clock"], Some(&cap), &[]);
    let evs = events(&read_capture(&cap));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("K ")).collect();
    assert_eq!(lines.len(), 20);
    assert_eq!(evs.len(), 20);
    for (line, e) in lines.iter().zip(&evs) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (size, before, after): (u64, u64, u64) = (
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        );
        assert_eq!(e.size, size);
        // the converted TSC clock may be off by a few microseconds at most
        let slack = 20_000;
        assert!(
            e.ts_ns + slack >= before && e.ts_ns <= after + slack,
            "ts {} not in [{before}, {after}]",
            e.ts_ns
        );
        assert!(
            e.duration_ns <= after - before + slack,
            "duration {} > {}",
            e.duration_ns,
            after - before
        );
    }
}

#[test]
fn lookups_of_absent_runtimes_still_fail() {
    // A program that probes for a GPU runtime with dlsym(RTLD_DEFAULT) must not find the
    // shim's own exports when no runtime is loaded.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("probe.mwcap");
    let plain = b.run("dlsym", &["probe"], None, &[]);
    let shimmed = b.run("dlsym", &["probe"], Some(&cap), &[]);
    let text = String::from_utf8_lossy(&shimmed.stdout).to_string();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), text);
    assert!(text.contains("N probe hipMalloc found=0 error=1"), "{text}");
    assert!(
        text.contains("N probe cuGetProcAddress_v2 found=0 error=1"),
        "{text}"
    );
    assert!(text.contains("N probe dlsym found=1 error=0"), "{text}");
    assert!(!cap.exists(), "no GPU call, no capture");
    // The same when the shim records nothing (no valid sink, or the family switched off):
    // it still exports the names, and the probe still must not see them.
    for env in [
        [
            ("MEMWATCH_SINK", "unix:/nonexistent/memwatch.sock"),
            ("MEMWATCH_HOOK", "all"),
        ],
        [("MEMWATCH_SINK", "bogus"), ("MEMWATCH_HOOK", "all")],
        [
            ("MEMWATCH_SINK", "file:/dev/null"),
            ("MEMWATCH_HOOK", "pjrt"),
        ],
    ] {
        let mut c = std::process::Command::new(b.program("dlsym"));
        c.args(["dlsym", "probe"])
            .env("MWTEST_LIBDIR", &b.dir)
            .env("LD_PRELOAD", &b.shim)
            .envs(env);
        let out = c.output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "{env:?}"
        );
    }
}

#[test]
fn runtime_reloaded_after_dlclose_is_followed() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("reload.mwcap");
    let plain = b.run("dlsym", &["reload"], None, &[]);
    let out = b.run("dlsym", &["reload"], Some(&cap), &[]);
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
    let want = expected(&String::from_utf8_lossy(&out.stdout));
    let evs = events(&read_capture(&cap));
    let got: Vec<Expected> = evs.iter().map(|e| as_expected(e, false)).collect();
    assert_eq!(got, want);
}

/// A program that dlopens the runtime, allocates, dlcloses it and exits at once: the
/// shim describes the device before the library goes (the exit-time flush never asks a
/// runtime), dlclose's result and errno are unchanged, and the wrapper the program kept
/// no longer reaches the unmapped library.
#[test]
fn device_info_survives_dlclose_before_exit() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("dlclose.mwcap");
    let plain = b.run("dlsym", &["dlclose-exit"], None, &[]);
    let out = b.run(
        "dlsym",
        &["dlclose-exit"],
        Some(&cap),
        &[("MWTEST_CALL_AFTER_CLOSE", "1")],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let plain_text = String::from_utf8_lossy(&plain.stdout).to_string();
    let d_line = |t: &str| t.lines().find(|l| l.starts_with("D ")).map(str::to_string);
    assert_eq!(
        d_line(&text),
        d_line(&plain_text),
        "dlclose result/errno unchanged"
    );
    assert!(text.contains("D dlclose=0 errno=77 unloaded=1"), "{text}");
    assert!(text.contains("A after_close=3"), "{text}");
    let recs = read_capture(&cap);
    let devs: Vec<_> = recs
        .iter()
        .filter_map(|r| match r {
            Record::DeviceInfo(d) => Some(d.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(devs.len(), 1, "{recs:?}");
    assert_eq!(devs[0].device, 3);
    assert_eq!(devs[0].name, "memwatch simulated GPU 3");
    let evs = events(&recs);
    assert_eq!(
        evs.iter().map(|e| (e.size, e.device)).collect::<Vec<_>>(),
        vec![(0, 3), (4321, 3)],
        "set-device and the allocation, nothing for the call after dlclose"
    );
}

#[test]
fn an_address_freed_and_reused_by_overlapping_calls_keeps_its_order() {
    // Thread B enters hipMalloc 2 ms before the main thread enters hipFree(P); the
    // runtime holds B until that free has completed and then hands it P. In time order
    // the capture must show P freed before B's allocation of it. Stamped at entry, B's
    // allocation sorted before the free: the report then counted a missed free and
    // took P's new allocation for freed.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("race.mwcap");
    let out = b.run("direct", &["reuse-race"], Some(&cap), &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let ptrs: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("Q "))
        .map(|l| {
            let p = l.rsplit("ptr=").next().unwrap().trim_start_matches("0x");
            u64::from_str_radix(p, 16).unwrap()
        })
        .collect();
    assert_eq!(ptrs.len(), 4, "{text}");
    let p = ptrs[0];
    assert!(ptrs.iter().all(|&x| x == p), "the runtime reused P: {text}");
    let mut evs = events(&read_capture(&cap));
    assert_eq!(evs.len(), 4);
    evs.sort_by_key(|e| e.ts_ns); // stable, as the analysis sorts
    let order: Vec<(&str, Option<EventKind>, u64)> = evs
        .iter()
        .map(|e| (e.api().name(), e.kind(), e.ptr))
        .collect();
    let (alloc, free) = (Some(EventKind::Alloc), Some(EventKind::Free));
    assert_eq!(
        order,
        vec![
            ("hipMalloc", alloc, p),
            ("hipFree", free, p),
            ("hipMalloc", alloc, p),
            ("hipFree", free, p)
        ]
    );
    assert_ne!(
        evs[2].tid, evs[1].tid,
        "the reusing allocation is thread B's"
    );
}

/// A panic in memwatch's own part of a hook (forced by the fault switch,
/// `MEMWATCH_FAULT`, before or after the real call) never reaches the program: on every
/// lookup path each call still reaches the runtime once with its arguments, and the
/// program prints the same results, out-pointers and errno values, the same stderr, and
/// exits 0; only the records are lost. With `MEMWATCH_DEBUG` the shim says each time it
/// caught one, which shows the switch really fired.
#[test]
fn a_panic_in_memwatchs_bookkeeping_never_reaches_the_program() {
    let b = built("capture");
    for mode in ["direct", "dlsym", "proc"] {
        let plain = b.run(mode, &["basic"], None, &[]);
        let calls = expected(&String::from_utf8_lossy(&plain.stdout)).len();
        assert!(calls >= 80, "{mode}: {calls} calls");
        for fault in ["panic-before-call", "panic-after-call"] {
            let tmp = tempfile::tempdir().unwrap();
            let cap = tmp.path().join("fault.mwcap");
            let out = b.run(mode, &["basic"], Some(&cap), &[("MEMWATCH_FAULT", fault)]);
            assert_eq!(
                normalized(&plain.stdout),
                normalized(&out.stdout),
                "{mode} {fault}: output differs"
            );
            assert_eq!(
                String::from_utf8_lossy(&plain.stderr),
                String::from_utf8_lossy(&out.stderr),
                "{mode} {fault}: stderr differs"
            );
            let recs = read_capture(&cap);
            assert!(events(&recs).is_empty(), "{mode} {fault}: nothing recorded");
            let told = b.run(
                mode,
                &["basic"],
                Some(&cap),
                &[("MEMWATCH_FAULT", fault), ("MEMWATCH_DEBUG", "1")],
            );
            let caught = String::from_utf8_lossy(&told.stderr)
                .matches("memwatch: internal panic caught at ")
                .count();
            assert!(
                caught >= calls,
                "{mode} {fault}: {caught} panics caught for {calls} recorded calls"
            );
            assert_eq!(normalized(&plain.stdout), normalized(&told.stdout));
        }
    }
}
