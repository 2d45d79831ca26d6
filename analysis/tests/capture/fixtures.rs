//! Building captures for the tests: events and `process_start` records stamped from
//! [`BASE`], the hand-worked two-process scenario, and encoding, loading and analysing
//! capture bytes.

use std::path::Path;

use memwatch_analysis::capture::*;
use memwatch_wire::*;
pub use EventKind::{Alloc, AllocFailed, ApiSpan, Free};
pub use MemKind::{Device, HostPinned, StreamPool, VmmMap, VmmPhysical};

pub const BASE: u64 = 1_000_000;

pub struct Ev0 {
    pub t: u64,
    pub dur: u64,
    pub tid: u32,
    pub device: i32,
    pub kind: EventKind,
    pub mem: MemKind,
    pub api: Api,
    pub ptr: u64,
    pub size: u64,
    pub result: i32,
}

pub fn ev(pid: u32, e: Ev0) -> Event {
    Event {
        ts_ns: BASE + e.t,
        duration_ns: e.dur,
        ptr: e.ptr,
        size: e.size,
        pid,
        tid: e.tid,
        device: e.device,
        result: e.result,
        ..Event::new(e.kind, e.mem, e.api)
    }
}

#[allow(clippy::too_many_arguments)]
pub fn e(
    t: u64,
    dur: u64,
    tid: u32,
    device: i32,
    kind: EventKind,
    mem: MemKind,
    api: Api,
    ptr: u64,
    size: u64,
) -> Ev0 {
    Ev0 {
        t,
        dur,
        tid,
        device,
        kind,
        mem,
        api,
        ptr,
        size,
        result: 0,
    }
}

pub fn start(pid: u32, t: u64, argv: &[&str]) -> Record {
    Record::ProcessStart(ProcessStart {
        pid,
        ppid: 1,
        mono_anchor_ns: BASE + t,
        wall_anchor_unix_ns: 1_700_000_000_000_000_000 + t,
        shim_version: "t".into(),
        hostname: "host".into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        pid_ns: None,
    })
}

/// Process 10 (two threads, devices 0 and 1) and process 11 (CUDA, device 0).
pub fn scenario() -> Vec<Record> {
    let a = 10;
    // Thread 2 (device 1) is flushed before thread 1 although its events interleave.
    let thread2 = vec![
        ev(
            a,
            e(150, 10, 2, 1, Alloc, Device, Api::HipMalloc, 0x1a, 2000),
        ),
        ev(a, e(450, 5, 2, 1, Free, Device, Api::HipFree, 0x1a, 0)),
        ev(
            a,
            e(
                2050,
                100,
                2,
                1,
                ApiSpan,
                MemKind::None,
                Api::HipModuleLoad,
                0,
                0,
            ),
        ),
        ev(
            a,
            e(
                2060,
                10,
                3,
                1,
                ApiSpan,
                MemKind::None,
                Api::HipModuleLoad,
                0,
                0,
            ),
        ),
    ];
    let mut failed = e(
        600,
        40,
        1,
        0,
        AllocFailed,
        Device,
        Api::HipMalloc,
        0,
        1 << 40,
    );
    failed.result = 2;
    let thread1 = vec![
        ev(a, e(100, 10, 1, 0, Alloc, Device, Api::HipMalloc, 0xa, 100)),
        ev(a, e(200, 20, 1, 0, Alloc, Device, Api::HipMalloc, 0xb, 300)),
        ev(a, e(300, 5, 1, 0, Free, Device, Api::HipFree, 0xa, 0)),
        ev(
            a,
            e(
                400,
                30,
                1,
                0,
                Alloc,
                StreamPool,
                Api::HipMallocAsync,
                0xc,
                500,
            ),
        ),
        ev(
            a,
            e(500, 5, 1, 0, Free, StreamPool, Api::HipFreeAsync, 0xc, 0),
        ),
        ev(a, failed),
        ev(a, e(700, 5, 1, 0, Free, Device, Api::HipFree, 0xdead, 0)),
        ev(
            a,
            e(
                800,
                15,
                1,
                0,
                Alloc,
                HostPinned,
                Api::HipHostMalloc,
                0x4000,
                64,
            ),
        ),
        ev(
            a,
            e(
                900,
                50,
                1,
                0,
                Alloc,
                VmmPhysical,
                Api::HipMemCreate,
                0x77,
                1000,
            ),
        ),
        ev(
            a,
            e(950, 5, 1, 0, Alloc, VmmMap, Api::HipMemMap, 0x9000, 1000),
        ),
        ev(
            a,
            e(1000, 5, 1, 0, Free, VmmMap, Api::HipMemUnmap, 0x9000, 0),
        ),
        ev(
            a,
            e(
                1100,
                5,
                1,
                0,
                Free,
                VmmPhysical,
                Api::HipMemRelease,
                0x77,
                0,
            ),
        ),
        ev(
            a,
            e(
                2000,
                100,
                1,
                0,
                ApiSpan,
                MemKind::None,
                Api::HipModuleLoad,
                0,
                0,
            ),
        ),
        ev(
            a,
            e(
                2100,
                50,
                1,
                0,
                ApiSpan,
                MemKind::None,
                Api::HipModuleLoad,
                0,
                0,
            ),
        ),
    ];
    let b = 11;
    let mut oom_drv = e(
        2400,
        7,
        5,
        0,
        AllocFailed,
        Device,
        Api::CuMemAlloc,
        0,
        1 << 30,
    );
    oom_drv.result = 2;
    let mut oom_rt = e(
        2500,
        9,
        5,
        0,
        AllocFailed,
        Device,
        Api::CudaMalloc,
        0,
        1 << 31,
    );
    oom_rt.result = 2;
    let proc_b = vec![
        ev(
            b,
            e(
                2070,
                20,
                5,
                0,
                ApiSpan,
                MemKind::None,
                Api::HipModuleLoad,
                0,
                0,
            ),
        ),
        ev(
            b,
            e(2200, 3, 5, 0, Alloc, Device, Api::CuMemAlloc, 0xb000, 10),
        ),
        ev(
            b,
            e(2300, 3, 5, 0, Alloc, Device, Api::CuMemAlloc, 0xb100, 20),
        ),
        ev(b, oom_drv),
        ev(b, oom_rt),
    ];
    vec![
        start(a, 0, &["launcher", "--n", "2"]),
        Record::DeviceInfo(DeviceInfo {
            pid: a,
            device: 0,
            vendor: Vendor::Simulated.code(),
            total_bytes: 1 << 30,
            name: "sim0".into(),
            identity: None,
        }),
        start(b, 1500, &["worker"]),
        Record::Events(thread2),
        Record::Events(proc_b),
        Record::Events(thread1),
        Record::Dropped(Dropped {
            pid: b,
            ts_ns: BASE + 2900,
            dropped_total: 7,
        }),
        Record::ProcessEnd(ProcessEnd {
            pid: b,
            ts_ns: BASE + 3000,
            exit_code: 0,
        }),
        Record::ProcessEnd(ProcessEnd {
            pid: a,
            ts_ns: BASE + 4000,
            exit_code: 3,
        }),
    ]
}

pub fn encode(records: &[Record]) -> Vec<u8> {
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    for r in records {
        w.write_record(r).unwrap();
    }
    w.into_inner().unwrap()
}

pub fn load(bytes: &[u8]) -> Loaded {
    load_reader(bytes, Path::new("test.mwcap"), &mut |_| {}).unwrap()
}

pub fn report(bytes: &[u8]) -> CaptureReport {
    analyze(load(bytes), &ReportOptions { top: 3 })
}
