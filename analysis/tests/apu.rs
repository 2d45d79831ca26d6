//! The APU section of a capture: captures written with memwatch-wire the way the shim
//! and `memwatch run` write them (device_info + the device-properties marker, events,
//! amdgpu sysfs readings, process ends), read back with the capture loader, and the
//! figures checked. Sizes, pids and devices vary from test to test. (End to end over the
//! shim and the simulated runtime: cli/tests/apu_split_model.rs.)

use memwatch_analysis::apu::{self, Agreement, ApuEvidence, ApuKind};
use memwatch_analysis::capture::load_reader;
use memwatch_wire::*;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const T0: u64 = 5_000_000_000;

/// A capture being written.
struct Cap {
    w: FrameWriter<Vec<u8>>,
}

impl Cap {
    fn new() -> Self {
        Self {
            w: FrameWriter::new(Vec::new()).unwrap(),
        }
    }

    fn rec(&mut self, r: Record) -> &mut Self {
        self.w.write_record(&r).unwrap();
        self
    }

    fn process(
        &mut self,
        pid: u32,
        device: i32,
        hip_total: u64,
        integrated: Option<bool>,
    ) -> &mut Self {
        self.rec(Record::ProcessStart(ProcessStart {
            pid,
            ppid: 1,
            mono_anchor_ns: T0,
            wall_anchor_unix_ns: 1_700_000_000_000_000_000,
            shim_version: "test".into(),
            hostname: "apu".into(),
            argv: vec!["llama-server".into()],
            pid_ns: None,
        }));
        self.rec(Record::DeviceInfo(DeviceInfo {
            pid,
            device,
            vendor: Vendor::Amd as u8,
            total_bytes: hip_total,
            name: "AMD Radeon 8060S".into(),
            identity: None,
        }));
        let props = DeviceProps {
            device,
            integrated,
            host_memory_bytes: Some(31 * GIB),
        };
        self.rec(Record::Marker(props.to_marker(pid, pid, T0)))
    }

    /// (ms after T0, kind, api, ptr, size, result)
    fn events(
        &mut self,
        pid: u32,
        device: i32,
        evs: &[(u64, EventKind, Api, u64, u64, i32)],
    ) -> &mut Self {
        let evs = evs
            .iter()
            .map(|&(ms, kind, api, ptr, size, result)| Event {
                ts_ns: T0 + ms * 1_000_000,
                ptr,
                size,
                pid,
                tid: pid,
                result,
                device,
                kind: kind as u8,
                mem_kind: match api {
                    Api::HipMallocManaged => MemKind::Managed,
                    Api::HipHostMalloc
                    | Api::HipHostFree
                    | Api::HipHostRegister
                    | Api::HipHostUnregister => MemKind::HostPinned,
                    _ => MemKind::Device,
                } as u8,
                api: api as u16,
                ..Event::default()
            })
            .collect();
        self.rec(Record::Events(evs))
    }

    /// A sysfs reading of card `device` at `ms`: (vram used, vram total, gtt used, gtt total).
    fn reading(&mut self, ms: u64, device: i32, r: (u64, u64, u64, u64)) -> &mut Self {
        for (memory, used, total) in [(0u8, r.0, r.1), (1u8, r.2, r.3)] {
            self.rec(Record::DeviceSample(DeviceSample {
                ts_ns: T0 + ms * 1_000_000,
                device,
                memory,
                used_bytes: used,
                total_bytes: total,
                source: "sysfs".into(),
            }));
        }
        self
    }

    fn end(&mut self, pid: u32, ms: u64) -> &mut Self {
        self.rec(Record::ProcessEnd(ProcessEnd {
            pid,
            ts_ns: T0 + ms * 1_000_000,
            exit_code: 0,
        }))
    }

    fn report(&mut self) -> Option<apu::ApuReport> {
        let bytes = std::mem::replace(&mut self.w, FrameWriter::new(Vec::new()).unwrap())
            .into_inner()
            .unwrap();
        let loaded = load_reader(&bytes[..], std::path::Path::new("t.mwcap"), &mut |_| {}).unwrap();
        apu::analyze(&loaded)
    }
}

use EventKind::{Alloc, AllocFailed, Free};

#[test]
fn split_model_on_an_apu_whose_counters_do_not_move() {
    // A 160 GiB request on a device HIP reports as 128 GiB, then the 75 GiB the program
    // needed in three parts, pinned staging, a registered buffer and some managed memory;
    // the GTT counter stays where it was (ROCm/legacy-rocm-build#5444).
    let (pid, dev) = (4100, 0);
    let sysfs = |gtt_used| (150 * MIB, 512 * MIB, gtt_used, 120 * GIB);
    let r = Cap::new()
        .process(pid, dev, 128 * GIB, Some(true))
        .reading(0, dev, sysfs(20 * MIB))
        .events(
            pid,
            dev,
            &[
                (10, AllocFailed, Api::HipMalloc, 0, 160 * GIB, 2),
                (20, Alloc, Api::HipMalloc, 0x1_0000_0000, 25 * GIB, 0),
                (21, Alloc, Api::HipMalloc, 0x2_0000_0000, 25 * GIB, 0),
                (22, Alloc, Api::HipMalloc, 0x3_0000_0000, 25 * GIB, 0),
                (23, Alloc, Api::HipHostMalloc, 0x7000_0000, 256 * MIB, 0),
                (24, Alloc, Api::HipHostRegister, 0x7100_0000, 64 * MIB, 0),
                (25, Alloc, Api::HipMallocManaged, 0x4_0000_0000, 2 * GIB, 0),
                (30, Free, Api::HipHostFree, 0x7000_0000, 0, 0),
            ],
        )
        .reading(1000, dev, sysfs(21 * MIB))
        .end(pid, 1500)
        .reading(1600, dev, sysfs(20 * MIB))
        .report()
        .expect("an APU");
    assert_eq!(r.devices.len(), 1);
    let d = &r.devices[0];
    assert_eq!(d.evidence, ApuEvidence::HipIntegrated);
    assert_eq!(d.hip_total_bytes, Some(128 * GIB));
    assert_eq!(d.host_memory_bytes, Some(31 * GIB));
    let s = d.sysfs.unwrap();
    assert_eq!(
        (s.readings, s.vram_total_bytes, s.gtt_total_bytes),
        (3, 512 * MIB, 120 * GIB)
    );
    assert_eq!(s.hip_malloc_limit_bytes, 120 * GIB);
    let kind = |k: ApuKind| d.kinds.iter().find(|x| x.kind == k).unwrap();
    assert_eq!(kind(ApuKind::Device).peak_bytes, 75 * GIB);
    assert_eq!(kind(ApuKind::Device).allocs, 3);
    assert_eq!(kind(ApuKind::HostPinned).peak_bytes, 256 * MIB);
    assert_eq!(kind(ApuKind::HostRegistered).peak_bytes, 64 * MIB);
    assert_eq!(kind(ApuKind::Managed).peak_bytes, 2 * GIB);
    // The process ended: everything given back.
    assert!(
        d.kinds.iter().all(|k| k.live_bytes_at_end == 0),
        "{:?}",
        d.kinds
    );
    assert_eq!(d.shim_peak_bytes, 75 * GIB + 256 * MIB + 64 * MIB + 2 * GIB);

    let c = &d.comparison;
    assert_eq!(c.status, Agreement::SysfsUnder, "{}", c.message);
    assert_eq!(c.at_ns, Some(1000 * 1_000_000));
    assert_eq!(c.shim_mapped_bytes, 75 * GIB + 64 * MIB);
    assert_eq!(c.shim_managed_bytes, 2 * GIB);
    assert_eq!(c.sysfs_growth_bytes, MIB as i64);
    assert!(c.message.contains("do not follow"), "{}", c.message);
    assert!(
        c.message.contains("2.00 GiB of managed memory"),
        "{}",
        c.message
    );

    assert_eq!(d.oversized_requests.len(), 1);
    let o = &d.oversized_requests[0];
    assert_eq!(
        (o.pid, o.size, o.api.as_str()),
        (pid, 160 * GIB, "hipMalloc")
    );
    assert_eq!(o.could_give_bytes, 128 * GIB);
    assert_eq!(o.shortfall_bytes, 32 * GIB);
    assert!(o.exceeds_capacity);
    assert_eq!(o.os_limit_bytes, Some(120 * GIB));
    // What it went on to hold: hipMalloc + managed (device memory as HIP counts it).
    assert_eq!(o.peak_after_bytes, 77 * GIB);
    assert!(o.describe().contains("32.00 GiB short"), "{}", o.describe());
}

#[test]
fn counters_that_follow_agree_and_memory_held_elsewhere_shows_as_over() {
    // 96 GiB carve-out (HIP reports it), two processes on device 1; the VRAM counter
    // follows the 40 GiB the shim sees.
    let dev = 1;
    let r = Cap::new()
        .process(300, dev, 96 * GIB, Some(true))
        .process(301, dev, 96 * GIB, None)
        .reading(0, dev, (300 * MIB, 96 * GIB, 10 * MIB, 16 * GIB))
        .events(300, dev, &[(5, Alloc, Api::HipMalloc, 0xa000, 30 * GIB, 0)])
        .events(
            301,
            dev,
            &[(6, Alloc, Api::HipMallocAsync, 0xb000, 10 * GIB, 0)],
        )
        .reading(
            1000,
            dev,
            (300 * MIB + 40 * GIB + 3 * MIB, 96 * GIB, 10 * MIB, 16 * GIB),
        )
        .report()
        .unwrap();
    let d = &r.devices[0];
    assert_eq!(d.device, dev);
    assert_eq!(
        d.comparison.status,
        Agreement::Agree,
        "{}",
        d.comparison.message
    );
    assert!(d.oversized_requests.is_empty());

    // Counters 20 GiB above what the shim saw.
    let r = Cap::new()
        .process(500, 0, 96 * GIB, Some(true))
        .reading(0, 0, (GIB, 96 * GIB, 0, 16 * GIB))
        .events(500, 0, &[(5, Alloc, Api::HipMalloc, 0xa000, 4 * GIB, 0)])
        .reading(1000, 0, (25 * GIB, 96 * GIB, 0, 16 * GIB))
        .report()
        .unwrap();
    let c = &r.devices[0].comparison;
    assert_eq!(c.status, Agreement::SysfsOver, "{}", c.message);
    assert_eq!(c.sysfs_growth_bytes, 24 * GIB as i64);
    assert!(c.message.contains("outside this capture"), "{}", c.message);
}

#[test]
fn sysfs_alone_detects_a_small_carveout_and_the_runtime_can_say_no() {
    // No device-properties answer (an older shim, or a runtime without the attribute):
    // the counters show a 512 MiB carve-out next to 128 GiB of GTT.
    let apu_sysfs = (200 * MIB, 512 * MIB, 0, 128 * GIB);
    let r = Cap::new()
        .process(7, 0, 512 * MIB, None)
        .reading(0, 0, apu_sysfs)
        .events(7, 0, &[(1, AllocFailed, Api::HipMalloc, 0, 8 * GIB, 2)])
        .report()
        .unwrap();
    let d = &r.devices[0];
    assert_eq!(d.evidence, ApuEvidence::SysfsCarveout);
    // HIP reports the 512 MiB aperture; the driver would let hipMalloc map 128 GiB.
    let o = &d.oversized_requests[0];
    assert_eq!(
        (o.capacity_bytes, o.could_give_bytes),
        (512 * MIB, 512 * MIB)
    );
    assert_eq!(o.os_limit_bytes, Some(128 * GIB));
    assert_eq!(d.comparison.status, Agreement::NotCompared);

    // The runtime said "not integrated": no APU section, whatever sysfs looks like.
    assert!(Cap::new()
        .process(8, 0, 512 * MIB, Some(false))
        .reading(0, 0, apu_sysfs)
        .report()
        .is_none());
    // A discrete card's counters, no answer from the runtime: no APU section.
    assert!(Cap::new()
        .process(9, 0, 191 * GIB, None)
        .reading(0, 0, (2 * GIB, 205_822_885_888, 0, 1024 * GIB))
        .report()
        .is_none());
}

#[test]
fn a_failure_that_fits_is_not_oversized_and_a_reading_outside_the_run_is_not_compared() {
    let r = Cap::new()
        .process(11, 2, 64 * GIB, Some(true))
        .events(
            11,
            2,
            &[
                (1, Alloc, Api::HipMalloc, 0x10, 40 * GIB, 0),
                // 20 GiB asked with 24 GiB free: the device could have given it.
                (2, AllocFailed, Api::HipMalloc, 0, 20 * GIB, 2),
                // 30 GiB with 24 GiB free: oversized, 6 GiB short.
                (3, AllocFailed, Api::HipMalloc, 0, 30 * GIB, 2),
                // Not an out-of-memory failure.
                (4, AllocFailed, Api::HipMalloc, 0, 90 * GIB, 101),
                (5, Free, Api::HipFree, 0x10, 0, 0),
            ],
        )
        .report()
        .unwrap();
    let d = &r.devices[0];
    assert_eq!(d.oversized_requests.len(), 1, "{:?}", d.oversized_requests);
    let o = &d.oversized_requests[0];
    assert_eq!((o.in_use_bytes, o.shortfall_bytes), (40 * GIB, 6 * GIB));
    assert!(!o.exceeds_capacity);
    assert!(d.sysfs.is_none());
    assert_eq!(d.comparison.status, Agreement::NotCompared);
    assert!(d.comparison.message.contains("no amdgpu sysfs readings"));
}
