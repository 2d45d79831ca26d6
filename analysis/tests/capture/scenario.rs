//! The numbers of known captures: the hand-worked scenario (report, JSON shape, trace
//! export with its ids, streams and device filter) and a real H200 JAX capture.

use std::path::Path;

use memwatch_analysis::capture::*;

use crate::fixtures::*;

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
