//! `memwatch report`'s device readings section (text and `--json`) on captures written
//! the way the sampler of `memwatch run` writes them, with generated figures; on a real
//! capture made before readings existed (missing, not zero); and `memwatch run` on this
//! machine, which records readings or, without NVML / an AMD GPU, why there are none.

mod common;

use common::{mw, repo};
use memwatch_wire::*;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn capture(path: &std::path::Path, other: u64, own: u64, n: u64) {
    let mut w = FrameWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    w.write_record(&Record::ProcessStart(ProcessStart {
        pid: 31,
        ppid: 1,
        mono_anchor_ns: 1_000_000_000,
        wall_anchor_unix_ns: 1_790_000_000_000_000_000,
        shim_version: "test".into(),
        hostname: "h".into(),
        argv: vec!["python3".into()],
        pid_ns: None,
    }))
    .unwrap();
    for i in 0..n {
        let mine = own * (i + 1) / n;
        w.write_record(&Record::DeviceReading(DeviceReading {
            ts_ns: 1_000_000_000 + i * 100_000_000,
            device: 0,
            vendor: Vendor::Nvidia as u8,
            flags: DeviceReading::PROCESSES
                | if i == n - 1 {
                    DeviceReading::AT_FAILURE
                } else {
                    0
                },
            used_bytes: other + mine + 256 * MIB,
            total_bytes: 140 * GIB,
            source: "nvml".into(),
            uuid: "GPU-1234".into(),
            pci_bus_id: "00000000:18:00.0".into(),
            processes: vec![
                ProcessUse {
                    pid: 31,
                    flags: ProcessUse::WATCHED | ProcessUse::BYTES_KNOWN,
                    used_bytes: mine,
                },
                ProcessUse {
                    pid: 77,
                    flags: ProcessUse::BYTES_KNOWN,
                    used_bytes: other,
                },
            ],
        }))
        .unwrap();
    }
    w.into_inner().unwrap();
}

#[test]
fn report_shows_device_use_and_what_was_outside_the_run_at_one_instant() {
    let dir = tempfile::tempdir().unwrap();
    for (other, own, n) in [(110 * GIB, 27 * GIB, 14), (3 * GIB, 60 * GIB, 5)] {
        let p = dir.path().join("r.mwcap");
        capture(&p, other, own, n);
        let (code, out, err) = mw(&["report", "--json", p.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let r = &v["device_readings"];
        assert_eq!(r["status"], "recorded");
        let d = &r["devices"][0];
        assert_eq!(d["readings"], n);
        assert_eq!(d["at_failure"], 1);
        assert_eq!(d["max_gap_ms"], 100.0);
        // NVML's eight-digit domain, read in the one form.
        assert_eq!(d["pci_bus_id"], "0000:18:00.0");
        assert_eq!(
            d["ordinal"], 0,
            "the run's device 0 (one described, by ordinal)"
        );
        assert_eq!(d["used_max_bytes"], other + own + 256 * MIB);
        // Outside the run: the other process plus the driver's part, at one instant.
        assert_eq!(d["others_peak_bytes"], other + 256 * MIB);
        assert_eq!(d["others_at_peak"][0][0], 77);
        assert_eq!(d["watched_peak_bytes"], own);
        let (code, text, _) = mw(&["report", p.to_str().unwrap()]);
        assert_eq!(code, 0);
        assert!(
            text.contains(&format!("{n} readings (1 at a failure)")),
            "{text}"
        );
        assert!(text.contains("outside this run at most"), "{text}");
        assert!(text.contains("pid 77"), "{text}");
    }
}

#[test]
fn a_capture_without_readings_shows_them_missing() {
    let cap = repo("testdata/oom-corpus/jax_leak_bfc/capture.mwcap");
    let (code, out, _) = mw(&["report", "--json", cap.to_str().unwrap()]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["device_readings"]["status"], "missing");
    assert_eq!(v["device_readings"]["devices"], serde_json::json!([]));
    let (_, text, _) = mw(&["report", cap.to_str().unwrap()]);
    assert!(
        text.contains("Device readings") && text.contains("missing: this capture has none"),
        "{text}"
    );
    assert!(!text.contains("outside this run"), "{text}");
}

/// One hooked call (the ROCm runtime here answers hipErrorInvalidDevice without a GPU),
/// so a process reaches the shim: a capture of nothing records nothing, not even why.
const HIP_CALL: &str =
    "import ctypes; ctypes.CDLL('libamdhip64.so').hipMalloc(ctypes.byref(ctypes.c_void_p()), 1 << 20)";

/// On a machine without NVML and without an AMD GPU (CI, this VM) `memwatch run` says
/// once why, records why in the capture and the report repeats it; with a GPU the
/// capture has readings of this run.
#[test]
fn run_records_readings_or_why_there_are_none() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("c.mwcap");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .env("MEMWATCH_PRELOAD", common::shim())
        .args([
            "run",
            "--out",
            cap.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            HIP_CALL,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    let (_, json, _) = mw(&["report", "--json", cap.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let r = &v["device_readings"];
    if r["status"] == "missing" {
        let why = r["missing_why"].as_str().expect("the reason is recorded");
        assert!(why.contains("NVML") && why.contains("ROCm SMI"), "{why}");
        assert_eq!(err.matches("device readings off").count(), 1, "{err}");
        let (_, text, _) = mw(&["report", cap.to_str().unwrap()]);
        assert!(text.contains(&format!("missing: {why}")), "{text}");
    } else {
        assert_eq!(r["status"], "recorded");
        assert!(r["devices"][0]["readings"].as_u64().unwrap() >= 1);
    }
}

/// The recovered-run shape of the issue, failing this time: another process holds
/// `other` on the GPU; the run's driver allocation of `pool` succeeded, its next one was
/// refused. The doctor's "other processes held" is the device's use minus the run's at
/// the same instant (from the readings), not the device's maximum against the run's
/// bytes at another time.
#[test]
fn the_doctor_takes_what_others_held_from_one_instant() {
    let dir = tempfile::tempdir().unwrap();
    for (other, pool) in [(110 * GIB, 26 * GIB + 650 * MIB), (60 * GIB, 70 * GIB)] {
        let p = dir.path().join("oom.mwcap");
        let mut w = FrameWriter::new(std::fs::File::create(&p).unwrap()).unwrap();
        let t0 = 1_000_000_000u64;
        w.write_record(&Record::ProcessStart(ProcessStart {
            pid: 31,
            ppid: 1,
            mono_anchor_ns: t0,
            wall_anchor_unix_ns: 1_790_000_000_000_000_000,
            shim_version: "test".into(),
            hostname: "h".into(),
            argv: vec!["python3".into(), "train.py".into()],
            pid_ns: None,
        }))
        .unwrap();
        w.write_record(&Record::DeviceInfo(DeviceInfo {
            pid: 31,
            device: 0,
            vendor: Vendor::Nvidia as u8,
            total_bytes: 140 * GIB,
            name: "NVIDIA H200".into(),
            identity: None,
        }))
        .unwrap();
        let ev = |ts: u64, kind: EventKind, size: u64, result: i32| Event {
            ts_ns: ts,
            ptr: if result == 0 { 0x7f00_0000_0000 } else { 0 },
            size,
            pid: 31,
            tid: 31,
            result,
            ..Event::new(kind, MemKind::Device, Api::CuMemAlloc)
        };
        w.write_record(&Record::Events(vec![
            ev(t0 + 100_000_000, EventKind::Alloc, pool, 0),
            ev(t0 + 450_000_000, EventKind::AllocFailed, 8 * GIB, 2),
        ]))
        .unwrap();
        // Readings: the other process all along; the run's bytes follow its pool (plus
        // its context), the device's maximum comes with the run's pool.
        for i in 0..6u64 {
            let ts = t0 + i * 100_000_000;
            let own = 500 * MIB + if ts >= t0 + 100_000_000 { pool } else { 0 };
            w.write_record(&Record::DeviceReading(DeviceReading {
                ts_ns: ts,
                device: 0,
                vendor: Vendor::Nvidia as u8,
                flags: DeviceReading::PROCESSES,
                used_bytes: other + own + 300 * MIB,
                total_bytes: 140 * GIB,
                source: "nvml".into(),
                uuid: "GPU-1".into(),
                pci_bus_id: "00000000:18:00.0".into(),
                processes: vec![
                    ProcessUse {
                        pid: 31,
                        flags: ProcessUse::WATCHED | ProcessUse::BYTES_KNOWN,
                        used_bytes: own,
                    },
                    ProcessUse {
                        pid: 77,
                        flags: ProcessUse::BYTES_KNOWN,
                        used_bytes: other,
                    },
                ],
            }))
            .unwrap();
        }
        w.write_record(&Record::ProcessEnd(ProcessEnd {
            pid: 31,
            ts_ns: t0 + 600_000_000,
            exit_code: 1,
        }))
        .unwrap();
        w.into_inner().unwrap();
        let (_, out, err) = mw(&["diagnose", "--json", p.to_str().unwrap()]);
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
        let verdict = v["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["kind"] == "other_process")
            .unwrap_or_else(|| panic!("no other_process verdict: {out}"));
        assert_eq!(
            verdict["figures"]["other_process_bytes"],
            other + 300 * MIB,
            "{verdict}"
        );
        let sources = v["sources"].as_array().unwrap();
        assert!(
            sources.iter().any(|s| s["kind"] == "device_samples"),
            "the capture's readings are named as device samples: {out}"
        );
    }
}
