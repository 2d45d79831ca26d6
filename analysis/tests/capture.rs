//! Capture analysis on synthetic captures whose expected numbers are worked out by hand
//! (see the timeline comments), plus damaged and foreign files.

use std::path::Path;

use memwatch_analysis::capture::*;
use memwatch_wire::*;

const BASE: u64 = 1_000_000;

struct Ev0 {
    t: u64,
    dur: u64,
    tid: u32,
    device: i32,
    kind: EventKind,
    mem: MemKind,
    api: Api,
    ptr: u64,
    size: u64,
    result: i32,
}

fn ev(pid: u32, e: Ev0) -> Event {
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
fn e(
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

use EventKind::{Alloc, AllocFailed, ApiSpan, Free};
use MemKind::{Device, HostPinned, StreamPool, VmmMap, VmmPhysical};

fn start(pid: u32, t: u64, argv: &[&str]) -> Record {
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
fn scenario() -> Vec<Record> {
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

fn encode(records: &[Record]) -> Vec<u8> {
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    for r in records {
        w.write_record(r).unwrap();
    }
    w.into_inner().unwrap()
}

fn load(bytes: &[u8]) -> Loaded {
    load_reader(bytes, Path::new("test.mwcap"), &mut |_| {}).unwrap()
}

fn report(bytes: &[u8]) -> CaptureReport {
    analyze(load(bytes), &ReportOptions { top: 3 })
}

#[test]
fn scenario_numbers() {
    let r = report(&encode(&scenario()));
    assert!(r.damage.is_empty());
    assert_eq!(r.events, 23);
    assert_eq!(r.duration_ns, 4000);
    assert_eq!(r.start_wall_unix_ns, Some(1_700_000_000_000_000_000));
    assert_eq!(r.processes.len(), 2);

    let a = &r.processes[0];
    assert_eq!(a.pid, 10);
    assert_eq!(a.command, vec!["launcher", "--n", "2"]);
    assert_eq!(
        (a.start_ns, a.end_ns, a.exit_code),
        (Some(0), Some(4000), Some(3))
    );
    assert_eq!(a.dropped_events, 0);
    // Process-wide: 100 + 2000 + 300 + 500 live at t=400 (0xa freed at 300): 2800.
    assert_eq!((a.peak_bytes, a.peak_ts_ns), (2800, 400));
    assert_eq!(a.devices.len(), 2);

    let d0 = &a.devices[0];
    assert_eq!(d0.device, 0);
    assert_eq!(d0.name.as_deref(), Some("sim0"));
    assert_eq!(d0.total_bytes, Some(1 << 30));
    assert_eq!(d0.alloc_count, 4); // 0xa, 0xb, 0xc (pool), VMM handle 0x77
    assert_eq!(d0.free_count, 3);
    assert_eq!(d0.failed_count, 1);
    assert_eq!(d0.unmatched_frees, 1);
    assert_eq!(d0.alloc_bytes, 1900);
    // 300 (0xb) + 1000 (VMM physical) at t=900.
    assert_eq!((d0.peak_bytes, d0.peak_ts_ns), (1300, 900));
    assert_eq!((d0.live_bytes_at_exit, d0.live_allocs_at_exit), (300, 1));
    assert_eq!(d0.vmm_and_pool_calls, 2);
    assert_eq!(d0.host_pinned.alloc_count, 1);
    assert_eq!(d0.host_pinned.free_count, 0);
    assert_eq!(d0.host_pinned.peak_bytes, 64);
    assert_eq!(d0.host_pinned.peak_ts_ns, 800);
    assert_eq!(d0.host_pinned.live_bytes_at_exit, 64);
    let sizes: Vec<u64> = d0.largest_allocations.iter().map(|a| a.size).collect();
    assert_eq!(sizes, vec![1000, 500, 300]);
    assert_eq!(d0.largest_allocations[0].api, "hipMemCreate");
    assert_eq!(d0.largest_allocations[0].mem_kind, "vmm_physical");
    assert_eq!(d0.largest_allocations[0].ts_ns, 900);

    let d1 = &a.devices[1];
    assert_eq!((d1.alloc_count, d1.free_count), (1, 1));
    assert_eq!((d1.peak_bytes, d1.peak_ts_ns), (2000, 150));
    assert_eq!(d1.live_bytes_at_exit, 0);

    // hipModuleLoad in process 10: durations 100, 10, 100, 50; three threads inside at
    // t=2060 on two devices.
    let ml = a.api.iter().find(|s| s.api == "hipModuleLoad").unwrap();
    assert_eq!(
        (ml.count, ml.total_ns, ml.p50_ns, ml.p99_ns, ml.max_ns),
        (4, 260, 50, 100, 100)
    );
    assert_eq!((ml.max_concurrent, ml.max_concurrent_devices), (3, 2));
    let hm = a.api.iter().find(|s| s.api == "hipMalloc").unwrap();
    // hipMalloc calls: 10, 20, 40 (failed), 10 (device 1).
    assert_eq!(
        (hm.count, hm.errors, hm.total_ns, hm.p50_ns),
        (4, 1, 80, 10)
    );

    let b = &r.processes[1];
    assert_eq!(b.pid, 11);
    assert_eq!(b.start_ns, Some(1500));
    assert_eq!(b.dropped_events, 7);
    assert_eq!(b.exit_code, Some(0));
    assert_eq!(b.devices.len(), 1);
    let bd = &b.devices[0];
    assert_eq!((bd.alloc_count, bd.free_count, bd.failed_count), (2, 0, 2));
    assert_eq!(
        (bd.peak_bytes, bd.peak_ts_ns, bd.live_bytes_at_exit),
        (30, 2300, 30)
    );

    // Capture-wide: five module loads (10, 20, 50, 100, 100); at t=2070 process 10's
    // threads 1 and 2 and process 11 are inside: 3 calls on 3 (process, device) pairs.
    let gml = r.api.iter().find(|s| s.api == "hipModuleLoad").unwrap();
    assert_eq!(
        (gml.count, gml.total_ns, gml.p50_ns, gml.p99_ns),
        (5, 280, 50, 100)
    );
    assert_eq!((gml.max_concurrent, gml.max_concurrent_devices), (3, 3));

    let f: Vec<_> = r
        .failures
        .iter()
        .map(|f| {
            (
                f.pid,
                f.ts_ns,
                f.api.as_str(),
                f.result,
                f.result_name.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        f,
        vec![
            (10, 600, "hipMalloc", 2, Some("hipErrorOutOfMemory")),
            (
                11,
                2400,
                "cuMemAlloc_v2",
                2,
                Some("CUDA_ERROR_OUT_OF_MEMORY")
            ),
            (11, 2500, "cudaMalloc", 2, Some("cudaErrorMemoryAllocation")),
        ]
    );
    assert_eq!(r.failures[0].size, 1 << 40);
    assert_eq!(r.failures_total, 3);
}

#[test]
fn json_has_the_design_shape() {
    let r = report(&encode(&scenario()));
    let v = serde_json::to_value(&r).unwrap();
    let d = &v["processes"][0]["devices"][0];
    for key in [
        "device",
        "alloc_count",
        "free_count",
        "failed_count",
        "peak_bytes",
        "peak_ts_ns",
        "live_bytes_at_exit",
    ] {
        assert!(d[key].is_u64() || d[key].is_i64(), "{key}: {d}");
    }
    assert_eq!(v["processes"][1]["dropped_events"], 7);
    assert_eq!(v["processes"][0]["pid"], 10);
}

#[test]
fn truncated_capture_keeps_whole_frames_and_reports_loss() {
    let full = encode(&scenario());
    let cut = full.len() - 5; // inside the last process_end frame
    let l = load(&full[..cut]);
    assert_eq!(l.damage.len(), 1);
    assert_eq!(l.damage[0].kind, "stream ends inside a frame (cut off)");
    let last_frame_len = {
        let mut v = Vec::new();
        encode_record(scenario().last().unwrap(), &mut v).unwrap();
        v.len() as u64
    };
    assert_eq!(l.damage[0].bytes_lost, last_frame_len - 5);
    assert_eq!(l.damage[0].offset, full.len() as u64 - last_frame_len);
    let r = analyze(l, &ReportOptions::default());
    // Process 10's end was lost; everything else is there.
    assert_eq!(r.processes[0].exit_code, None);
    assert_eq!(r.processes[0].peak_bytes, 2800);
    assert_eq!(r.processes[1].exit_code, Some(0));
}

#[test]
fn corrupt_frame_is_skipped_and_the_rest_survives() {
    let recs = scenario();
    let mut bytes = encode(&recs);
    let before = encode(&recs[..5]).len(); // offset of the thread-1 events frame
    bytes[before + 30] ^= 0xff;
    let r = report(&bytes);
    assert_eq!(r.damage.len(), 1);
    assert_eq!(r.damage[0].offset, before as u64);
    assert_eq!(r.damage[0].kind, "checksum mismatch");
    let lost = encode(&recs[..6]).len() - before;
    assert_eq!(r.damage[0].bytes_lost, lost as u64);
    // Thread 1's events are gone: device 0 of process 10 has none; device 1 is intact.
    let a = &r.processes[0];
    assert_eq!(a.devices[0].alloc_count, 0);
    assert_eq!(a.devices[1].peak_bytes, 2000);
    assert_eq!(a.exit_code, Some(3));
}

#[test]
fn not_a_capture_is_an_error_naming_the_file() {
    let err = load_reader(
        &b"{\"op\":\"alloc\"}\n"[..],
        Path::new("x.jsonl"),
        &mut |_| {},
    )
    .err()
    .unwrap();
    assert!(matches!(err, CaptureError::NotACapture { .. }));
    let msg = err.to_string();
    assert!(msg.starts_with("x.jsonl: not a memwatch capture"), "{msg}");
    let err = load_path(Path::new("/nonexistent/y.mwcap"), &mut |_| {})
        .err()
        .unwrap();
    assert!(err.to_string().contains("/nonexistent/y.mwcap"));
}

#[test]
fn empty_capture_is_valid() {
    let r = report(&encode(&[]));
    assert!(r.processes.is_empty());
    assert!(r.damage.is_empty());
    assert_eq!(r.events, 0);
}

#[test]
fn trace_export_ids_streams_and_device_filter() {
    let mut out = Vec::new();
    let s = write_trace(
        load(&encode(&scenario())),
        &TraceOptions::default(),
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        vec![
            r#"{"op":"alloc","id":1,"size":100,"ts_ns":100,"device":0,"stream":0}"#,
            r#"{"op":"alloc","id":2,"size":2000,"ts_ns":150,"device":1,"stream":1}"#,
            r#"{"op":"alloc","id":3,"size":300,"ts_ns":200,"device":0,"stream":0}"#,
            r#"{"op":"free","id":1,"ts_ns":300,"device":0,"stream":0}"#,
            r#"{"op":"alloc","id":4,"size":500,"ts_ns":400,"device":0,"stream":0}"#,
            r#"{"op":"free","id":2,"ts_ns":450,"device":1,"stream":1}"#,
            r#"{"op":"free","id":4,"ts_ns":500,"device":0,"stream":0}"#,
            r#"{"op":"alloc","id":5,"size":1000,"ts_ns":900,"device":0,"stream":0}"#,
            r#"{"op":"free","id":5,"ts_ns":1100,"device":0,"stream":0}"#,
            r#"{"op":"alloc","id":6,"size":10,"ts_ns":2200,"device":0,"stream":2}"#,
            r#"{"op":"alloc","id":7,"size":20,"ts_ns":2300,"device":0,"stream":2}"#,
        ]
    );
    let streams: Vec<(u32, u32, i32)> = s
        .streams
        .iter()
        .map(|(k, d)| (k.pid, k.image, *d))
        .collect();
    assert_eq!(streams, vec![(10, 0, 0), (10, 0, 1), (11, 0, 0)]);
    assert_eq!((s.allocs, s.frees), (7, 4));

    let mut out = Vec::new();
    let s = write_trace(
        load(&encode(&scenario())),
        &TraceOptions { device: Some(1) },
        &mut out,
    )
    .unwrap();
    assert_eq!((s.allocs, s.frees), (1, 1));
    for line in String::from_utf8(out).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["device"], 1);
    }
}

#[test]
fn events_before_the_announcement_start_the_capture() {
    // The shim announces a process at its first flush, after its first events.
    let recs = vec![
        start(20, 500, &["late"]),
        Record::Events(vec![
            ev(
                20,
                e(100, 5, 1, 0, Alloc, Device, Api::CudaMalloc, 0x10, 64),
            ),
            ev(20, e(600, 5, 1, 0, Free, Device, Api::CudaFree, 0x10, 0)),
        ]),
    ];
    let r = report(&encode(&recs));
    let p = &r.processes[0];
    assert_eq!(p.start_ns, Some(400));
    assert_eq!((p.devices[0].peak_bytes, p.devices[0].peak_ts_ns), (64, 0));
    // Wall clock of the start = the anchor's wall time minus 400 ns.
    assert_eq!(
        r.start_wall_unix_ns,
        Some(1_700_000_000_000_000_000 + 500 - 400)
    );
    assert_eq!(r.duration_ns, 505);
}

/// One thread frees a buffer and then allocates the next, but the second flush's clock
/// conversion put the allocation 2 µs *before* the free (seen on a loaded VM): the
/// thread's order must win, so only one buffer is ever live.
#[test]
fn a_threads_calls_keep_their_order_when_flush_clocks_disagree() {
    let first = vec![
        ev(
            7,
            e(
                1_000,
                50,
                70,
                0,
                Alloc,
                Device,
                Api::HipMalloc,
                0xa000,
                4096,
            ),
        ),
        ev(
            7,
            e(10_000, 50, 70, 0, Free, Device, Api::HipFree, 0xa000, 0),
        ),
    ];
    let second = vec![ev(
        7,
        e(
            8_000,
            50,
            70,
            0,
            Alloc,
            Device,
            Api::HipMalloc,
            0xb000,
            4097,
        ),
    )];
    let r = report(&encode(&[
        start(7, 0, &["t"]),
        Record::Events(first),
        Record::Events(second),
    ]));
    let d0 = &r.processes[0].devices[0];
    assert_eq!(d0.alloc_count, 2);
    assert_eq!(d0.peak_bytes, 4097, "the free came first in the thread");
    assert_eq!(d0.live_bytes_at_exit, 4097);
}

/// A real capture: JAX 0.11.2 with XLA_PYTHON_CLIENT_ALLOCATOR=platform on an NVIDIA H200
/// (testdata/h200-captures/README.md). XLA's buffers are VMM allocations (cuMemCreate)
/// reached through dlsym; figures as `memwatch report` printed them there.
#[test]
fn real_h200_jax_platform_capture() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/h200-captures/jax0.11.2-platform-allocator.mwcap");
    let file = std::fs::File::open(&path).unwrap();
    let loaded = load_reader(std::io::BufReader::new(file), &path, &mut |_| {}).unwrap();
    let r = analyze(loaded, &ReportOptions { top: 3 });
    assert!(r.damage.is_empty());
    let p = &r.processes[0];
    assert_eq!(p.dropped_events, 0);
    let d0 = p.devices.iter().find(|d| d.device == 0).unwrap();
    assert_eq!((d0.alloc_count, d0.free_count), (108, 101));
    assert_eq!(d0.peak_bytes, 505_596_424);
    assert_eq!(d0.live_bytes_at_exit, 67_291_656);
}

/// exec keeps the pid: the second `process_start` of pid 20 starts image 1. The old
/// image's unfreed 100 bytes are released by the exec (not a leak), the new image reuses
/// the same pointer without a "reused" count, and events before the first start belong
/// to image 0.
#[test]
fn exec_starts_a_new_image_of_the_same_pid() {
    let p = 20;
    let bytes = encode(&[
        Record::Events(vec![ev(
            p,
            e(5, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xa0, 10),
        )]),
        start(p, 0, &["/bin/old"]),
        Record::Events(vec![ev(
            p,
            e(10, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xa1, 90),
        )]),
        Record::ProcessEnd(ProcessEnd {
            pid: p,
            ts_ns: BASE + 50,
            exit_code: -1,
        }),
        start(p, 60, &["/bin/new", "x"]),
        Record::Events(vec![
            ev(p, e(70, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xa0, 7)),
            ev(p, e(80, 1, 1, 0, Free, Device, Api::HipFree, 0xa1, 0)),
        ]),
    ]);
    let r = report(&bytes);
    assert_eq!(r.processes.len(), 2);
    let (old, new) = (&r.processes[0], &r.processes[1]);
    assert_eq!((old.pid, old.image, old.ended_by_exec), (p, 0, true));
    assert_eq!((new.pid, new.image, new.ended_by_exec), (p, 1, false));
    assert_eq!(old.command, vec!["/bin/old"]);
    assert_eq!(new.command, vec!["/bin/new", "x"]);
    let (od, nd) = (&old.devices[0], &new.devices[0]);
    assert_eq!((od.alloc_count, od.live_bytes_at_exit), (2, 0));
    assert_eq!((od.live_bytes_at_exec, od.live_allocs_at_exec), (100, 2));
    // The new image's free of 0xa1 is not the old image's allocation.
    assert_eq!(
        (nd.alloc_count, nd.free_count, nd.unmatched_frees),
        (1, 0, 1)
    );
    assert_eq!((nd.live_bytes_at_exit, nd.reused_without_free), (7, 0));
    // Leaks: none for the exec'd image, the 7-byte allocation for the new one.
    assert!(od.largest_leaks.is_empty());
    assert_eq!(
        nd.largest_leaks
            .iter()
            .map(|a| (a.size, a.ptr))
            .collect::<Vec<_>>(),
        vec![(7, 0xa0)]
    );

    let mut out = Vec::new();
    let s = write_trace(load(&bytes), &TraceOptions::default(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let ops: Vec<&str> = text.lines().collect();
    assert_eq!(
        ops,
        vec![
            r#"{"op":"alloc","id":1,"size":10,"ts_ns":5,"device":0,"stream":0}"#,
            r#"{"op":"alloc","id":2,"size":90,"ts_ns":10,"device":0,"stream":0}"#,
            r#"{"op":"free","id":1,"ts_ns":50,"device":0,"stream":0}"#,
            r#"{"op":"free","id":2,"ts_ns":50,"device":0,"stream":0}"#,
            r#"{"op":"alloc","id":3,"size":7,"ts_ns":70,"device":0,"stream":1}"#,
        ]
    );
    assert_eq!((s.allocs, s.frees), (3, 2));
}

/// `memwatch run` reads each connection on its own thread: the new image's frames can
/// reach the file before the old image's last events and its `process_end`. Images are
/// told apart by time, so the result is the same as in file order.
#[test]
fn exec_images_are_split_by_time_not_file_order() {
    let p = 21;
    const MS: u64 = 1_000_000;
    let old_events = Record::Events(vec![
        ev(
            p,
            e(10 * MS, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xb1, 100),
        ),
        ev(
            p,
            e(20 * MS, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xb2, 50),
        ),
        ev(p, e(30 * MS, 1, 1, 0, Free, Device, Api::HipFree, 0xb2, 0)),
    ]);
    let new_events = Record::Events(vec![
        // Before the new image's first flush (its anchor, 90 ms) but after the exec.
        ev(
            p,
            e(70 * MS, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xb1, 7),
        ),
        ev(p, e(95 * MS, 1, 1, 0, Free, Device, Api::HipFree, 0xb1, 0)),
    ]);
    let end = Record::ProcessEnd(ProcessEnd {
        pid: p,
        ts_ns: BASE + 50 * MS,
        exit_code: -1,
    });
    let shuffled = encode(&[
        start(p, 0, &["/bin/old"]),
        start(p, 90 * MS, &["/bin/new"]),
        new_events.clone(),
        old_events.clone(),
        end.clone(),
    ]);
    let ordered = encode(&[
        start(p, 0, &["/bin/old"]),
        old_events,
        end,
        start(p, 90 * MS, &["/bin/new"]),
        new_events,
    ]);
    for bytes in [&shuffled, &ordered] {
        let r = report(bytes);
        assert_eq!(r.processes.len(), 2);
        let (old, new) = (&r.processes[0], &r.processes[1]);
        assert_eq!(
            (old.image, old.command.clone()),
            (0, vec!["/bin/old".into()])
        );
        assert_eq!(
            (new.image, new.command.clone()),
            (1, vec!["/bin/new".into()])
        );
        // The exec'd image's end carries the wire's -1 ("no status"): not a status, so
        // null; its end time is kept.
        assert_eq!(old.exit_code, None);
        assert!(old.ended_by_exec && old.end_ns.is_some());
        assert_eq!(new.exit_code, None);
        let (od, nd) = (&old.devices[0], &new.devices[0]);
        assert_eq!(
            (od.alloc_count, od.free_count, od.live_bytes_at_exec),
            (2, 1, 100)
        );
        assert_eq!(
            (nd.alloc_count, nd.free_count, nd.unmatched_frees),
            (1, 1, 0)
        );
        assert_eq!(nd.live_bytes_at_exit, 0);
    }
}
