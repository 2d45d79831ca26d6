//! memwatch's own device readings in a capture (`device_reading` frames), written with
//! memwatch-wire as the sampler of `memwatch run` writes them, read back with the capture
//! loader: the report's summary and the doctor's device series. The figure that matters
//! is "outside the run" = the device's use minus the run's processes' at the same
//! instant; the runs below are generated over several sizes, pids and reading counts.

use memwatch_analysis::capture::load_reader;
use memwatch_analysis::device_readings::{self, OFF_TAG};
use memwatch_analysis::doctor::evidence::capture_device_series;
use memwatch_wire::*;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const T0: u64 = 7_000_000_000;
const PERIOD: u64 = 100_000_000;

fn writer() -> FrameWriter<Vec<u8>> {
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::ProcessStart(ProcessStart {
        pid: 4242,
        ppid: 1,
        mono_anchor_ns: T0,
        wall_anchor_unix_ns: 1_790_000_000_000_000_000,
        shim_version: "test".into(),
        hostname: "h200".into(),
        argv: vec!["python3".into(), "jax_recovers.py".into()],
        pid_ns: None,
    }))
    .unwrap();
    w
}

fn load(w: FrameWriter<Vec<u8>>) -> memwatch_analysis::capture::Loaded {
    let bytes = w.into_inner().unwrap();
    load_reader(&bytes[..], std::path::Path::new("gen.mwcap"), &mut |_| {}).unwrap()
}

fn proc_use(pid: u32, bytes: Option<u64>, watched: bool) -> ProcessUse {
    ProcessUse {
        pid,
        flags: if watched { ProcessUse::WATCHED } else { 0 }
            | if bytes.is_some() {
                ProcessUse::BYTES_KNOWN
            } else {
                0
            },
        used_bytes: bytes.unwrap_or(0),
    }
}

fn reading(device: i32, ts: u64, used: u64, processes: Option<Vec<ProcessUse>>) -> Record {
    Record::DeviceReading(DeviceReading {
        ts_ns: ts,
        device,
        vendor: Vendor::Nvidia as u8,
        flags: if processes.is_some() {
            DeviceReading::PROCESSES
        } else {
            0
        },
        used_bytes: used,
        total_bytes: 143 * GIB,
        source: "nvml".into(),
        uuid: format!("GPU-{device}"),
        pci_bus_id: format!("00000000:{:02x}:00.0", 0x18 + device),
        processes: processes.unwrap_or_default(),
    })
}

/// The recovered run of the issue, generated: another process holds `other` from the
/// start; the run's pool grows to `pool` over `n` readings, the device's maximum coming
/// when the pool is largest. "Outside the run" must stay the other process's bytes
/// (plus what the driver keeps), never the device's maximum minus the run's bytes at
/// some other instant.
#[test]
fn outside_the_run_is_taken_at_one_instant_over_generated_runs() {
    for (other, pool, n, me, them) in [
        (110 * GIB, 26 * GIB + 650 * MIB, 12, 4242u32, 999u32),
        (40 * GIB, 90 * GIB, 30, 77, 78),
        (GIB, 130 * GIB, 3, 4242, 31_337),
    ] {
        let driver = 600 * MIB;
        let ctx = 500 * MIB;
        let mut w = writer();
        let mut expected_others = 0;
        for i in 0..n {
            let own = ctx + pool * i / (n - 1);
            let used = driver + other + own;
            expected_others = expected_others.max(used - own);
            w.write_record(&reading(
                0,
                T0 + i * PERIOD,
                used,
                Some(vec![
                    proc_use(me, Some(own), true),
                    proc_use(them, Some(other), false),
                ]),
            ))
            .unwrap();
        }
        let s = device_readings::summarize(&load(w));
        assert_eq!(s.status, "recorded");
        let d = &s.devices[0];
        assert_eq!(d.readings, n);
        assert_eq!(d.max_gap_ms, Some(100.0));
        assert_eq!(d.used_max_bytes, driver + other + ctx + pool);
        assert_eq!(d.others_peak_bytes, Some(expected_others));
        assert_eq!(d.others_peak_bytes, Some(other + driver));
        // The run's own bytes at the instant of that peak, from the same reading: the
        // latest reading among equal peaks is not taken, the first is.
        assert_eq!(d.watched_at_others_peak_bytes, Some(ctx));
        assert_eq!(d.others_peak_at_s, Some(0.0));
        assert_eq!(d.others_at_peak, vec![(them, Some(other))]);
        assert_eq!(d.watched_peak_bytes, Some(ctx + pool));
        assert!(d.watched_seen);
        // What the old join did (device maximum against the run's bytes at its first
        // reading) would have been larger by the pool: the figure is not that.
        assert_ne!(d.others_peak_bytes, Some(d.used_max_bytes - ctx));
    }
}

/// Readings without the process list, or with a watched process whose figure is not
/// available: the split is unknown, not zero.
#[test]
fn unknown_process_figures_stay_unknown() {
    let mut w = writer();
    w.write_record(&reading(0, T0, 5 * GIB, None)).unwrap();
    w.write_record(&reading(
        0,
        T0 + PERIOD,
        6 * GIB,
        Some(vec![
            proc_use(4242, None, true),
            proc_use(9, Some(GIB), false),
        ]),
    ))
    .unwrap();
    let loaded = load(w);
    let s = device_readings::summarize(&loaded);
    let d = &s.devices[0];
    assert_eq!((d.used_min_bytes, d.used_max_bytes), (5 * GIB, 6 * GIB));
    assert_eq!(d.others_peak_bytes, None);
    assert_eq!(d.watched_peak_bytes, None);
    let series = capture_device_series(&loaded);
    assert_eq!(series[0].splits, vec![None, None]);
    assert!(series[0].others_peak().is_none());
}

#[test]
fn a_capture_without_readings_says_they_are_missing() {
    let s = device_readings::summarize(&load(writer()));
    assert_eq!((s.status, s.missing_why.as_deref()), ("missing", None));
    assert!(s.devices.is_empty());
    // With the sampler's reason recorded.
    let mut w = writer();
    w.write_record(&Record::Marker(Marker {
        pid: 1,
        tid: 0,
        ts_ns: T0,
        device: -1,
        text: format!("memwatch.tag {OFF_TAG}=off: NVML not available: no libnvidia-ml"),
    }))
    .unwrap();
    let s = device_readings::summarize(&load(w));
    assert_eq!(s.status, "missing");
    assert_eq!(
        s.missing_why.as_deref(),
        Some("NVML not available: no libnvidia-ml")
    );
    // A real capture made before readings existed: none, not zeros.
    let old = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/oom-corpus/jax_leak_bfc/capture.mwcap");
    let loaded = memwatch_analysis::capture::load_path(&old, &mut |_| {}).unwrap();
    assert!(loaded.device_readings.is_empty());
    assert_eq!(device_readings::summarize(&loaded).status, "missing");
    assert!(capture_device_series(&loaded).is_empty());
}

/// The doctor's series: one per device of the sampler; when the run used one device
/// (its ordinal in the events) and was listed on one sampler device, that series takes
/// the ordinal and the other devices are left out. Times count from the capture's start.
#[test]
fn doctor_series_match_the_run_device_and_keep_splits_per_sample() {
    for (ordinal, nvml_dev) in [(0, 1), (2, 0), (1, 3)] {
        let mut w = writer();
        w.write_record(&Record::DeviceInfo(DeviceInfo {
            pid: 4242,
            device: ordinal,
            vendor: Vendor::Nvidia as u8,
            total_bytes: 143 * GIB,
            name: "NVIDIA H200".into(),
            identity: None,
        }))
        .unwrap();
        for i in 0..4u64 {
            for dev in 0..4 {
                let run_here = dev == nvml_dev;
                let procs = if run_here {
                    vec![proc_use(4242, Some((i + 1) * GIB), true)]
                } else {
                    vec![proc_use(50 + dev as u32, Some(3 * GIB), false)]
                };
                let used = procs.iter().map(|p| p.used_bytes).sum::<u64>() + 512 * MIB;
                let mut r = reading(dev, T0 + i * PERIOD + dev as u64, used, Some(procs));
                if let (Record::DeviceReading(x), 3) = (&mut r, i) {
                    x.flags |= DeviceReading::AT_FAILURE;
                }
                w.write_record(&r).unwrap();
            }
        }
        let series = capture_device_series(&load(w));
        assert_eq!(series.len(), 1, "only the run's device");
        let s = &series[0];
        assert_eq!(s.device, ordinal);
        assert!(!s.wall_clock);
        assert_eq!(s.samples.len(), 4);
        assert_eq!(s.splits.len(), s.samples.len());
        assert_eq!(
            s.samples[0].0, nvml_dev as u64,
            "ns since the capture's start"
        );
        for (i, (_, used, _, split)) in s.with_splits().enumerate() {
            let split = split.expect("processes read");
            assert_eq!(split.watched_bytes, (i as u64 + 1) * GIB);
            assert_eq!(split.watched_bytes + split.other_bytes, used);
            assert_eq!(split.at_failure, i == 3);
        }
        let (t, last) = s.split_at(u64::MAX).unwrap();
        assert_eq!((t, last.watched_bytes), (s.samples[3].0, 4 * GIB));
        assert_eq!(s.others_peak().unwrap().1.other_bytes, 512 * MIB);
    }
}

fn uuid(gpu: i32) -> String {
    format!(
        "GPU-{:08x}-5e6f-7081-92a3-b4c5d6e7f809",
        0xaaaa_0000u32 + gpu as u32
    )
}

/// A node of `n` GPUs whose readings name each by UUID and bus id (as NVML writes them:
/// upper case, eight-digit domain); GPU `d`'s use is `(10 + d) GiB + i MiB` at reading
/// `i`, the run's pid listed on `listed_on` when the processes were read.
fn node_readings(w: &mut FrameWriter<Vec<u8>>, n: i32, listed_on: Option<i32>) {
    for i in 0..5u64 {
        for d in 0..n {
            let procs = listed_on.map(|k| {
                if k == d {
                    vec![proc_use(4242, Some(GIB), true)]
                } else {
                    Vec::new()
                }
            });
            let mut r = reading(
                d,
                T0 + i * PERIOD + d as u64,
                (10 + d as u64) * GIB + i * MIB,
                procs,
            );
            if let Record::DeviceReading(x) = &mut r {
                x.uuid = uuid(d).to_uppercase();
                x.pci_bus_id = format!("00000000:{:02X}:00.0", 0x1a + d);
            }
            w.write_record(&r).unwrap();
        }
    }
}

fn described(ordinal: i32, identity: Option<DeviceIdentity>) -> Record {
    Record::DeviceInfo(DeviceInfo {
        pid: 4242,
        device: ordinal,
        vendor: Vendor::Nvidia as u8,
        total_bytes: 143 * GIB,
        name: "NVIDIA H200".into(),
        identity,
    })
}

/// A process run under CUDA_VISIBLE_DEVICES=k saw GPU k as its device 0 and recorded
/// GPU k's UUID (or only its bus id, in the CUDA driver's form): the doctor's series for
/// device 0 is GPU k's readings, and no other GPU's, whether or not the sampler listed
/// the run's processes; the report says which sampled device was the run's device 0.
#[test]
fn a_process_device_is_the_sampled_gpu_of_the_same_identity() {
    for n in 2..=5 {
        for k in 1..n {
            for listed in [None, Some(k)] {
                for by in ["uuid", "bus"] {
                    let mut w = writer();
                    let id = match by {
                        "uuid" => DeviceIdentity::new(&uuid(k), ""),
                        _ => DeviceIdentity::new("", &format!("0000:{:02X}:00.0", 0x1a + k)),
                    };
                    w.write_record(&described(0, Some(id))).unwrap();
                    node_readings(&mut w, n, listed);
                    let loaded = load(w);
                    let series = capture_device_series(&loaded);
                    let what = format!("{n} GPUs, visible {k}, listed {listed:?}, by {by}");
                    assert_eq!(series.len(), 1, "{what}");
                    assert_eq!(series[0].device, 0, "{what}");
                    let used: Vec<u64> = series[0].samples.iter().map(|s| s.1).collect();
                    let want: Vec<u64> = (0..5).map(|i| (10 + k as u64) * GIB + i * MIB).collect();
                    assert_eq!(used, want, "{what}: GPU {k}'s figures");
                    let summary = device_readings::summarize(&loaded);
                    let ordinals: Vec<(i32, Option<i32>)> = summary
                        .devices
                        .iter()
                        .map(|d| (d.device, d.ordinal))
                        .collect();
                    let want: Vec<(i32, Option<i32>)> =
                        (0..n).map(|d| (d, (d == k).then_some(0))).collect();
                    assert_eq!(ordinals, want, "{what}");
                }
            }
        }
    }
}

/// A capture made before the shim recorded identities still pairs by ordinal: its
/// device 0 is the sampler's device 0 when the processes were not listed.
#[test]
fn a_capture_without_identities_pairs_by_ordinal() {
    for n in 1..=4 {
        for ordinal in 0..n {
            let mut w = writer();
            w.write_record(&described(ordinal, None)).unwrap();
            node_readings(&mut w, n, None);
            let series = capture_device_series(&load(w));
            assert_eq!(series.len(), n as usize);
            let s = series.iter().find(|s| s.device == ordinal).unwrap();
            assert_eq!(s.samples[0].1, (10 + ordinal as u64) * GIB);
        }
    }
}
