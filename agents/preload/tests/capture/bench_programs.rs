//! The programs the benchmarks run under the shim (`mwtest bench-ab`, `bench-lat`, and
//! the driver entry points bench/cuda_driver_overhead.sh calls through dlsym): the
//! hooked half of each is captured whole, the "without the shim" half not at all.

use crate::common::*;

#[test]
fn bench_ab_records_only_its_hooked_batches() {
    // `mwtest bench-ab` times the runtime through the shim's hooks and, in the same
    // process, through names the shim does not intercept: its "without the shim" half is
    // only honest if none of those calls is recorded.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("ab.mwcap");
    let (threads, rounds, pairs) = (2usize, 10usize, 100usize);
    let out = b.run(
        "direct",
        &[
            "bench-ab",
            &threads.to_string(),
            &rounds.to_string(),
            &pairs.to_string(),
        ],
        Some(&cap),
        &[("MEMWATCH_BUFFER_EVENTS", "65536")],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("AB "))
        .unwrap_or_else(|| panic!("no AB line: {text}"));
    for key in ["direct_median_ns_per_call", "shim_median_ns_per_call"] {
        let v: f64 = field(line, key);
        assert!(v > 0.0, "{line}");
    }
    let evs = events(&read_capture(&cap));
    // Per thread: its set-device, one untimed warm-up pair, then `rounds` hooked batches.
    let pairs_hooked = threads * (1 + rounds * pairs);
    assert_eq!(count_api(&evs, "hipMalloc"), pairs_hooked);
    assert_eq!(count_api(&evs, "hipFree"), pairs_hooked);
    assert_eq!(count_api(&evs, "hipSetDevice"), threads);
    // Out-of-range arguments are refused, not run with a clipped thread or round count.
    for bad in [["0", "10"], ["65", "10"], ["2", "0"], ["2", "5000"]] {
        let out = std::process::Command::new(b.program("direct"))
            .args(["direct", "bench-ab", bad[0], bad[1], "10"])
            .env("MWTEST_LIBDIR", &b.dir)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "bench-ab {bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("bench-ab: 1-64 threads"),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        evs.len(),
        2 * pairs_hooked + threads,
        "nothing else recorded"
    );
}

#[test]
fn bench_lat_records_only_its_hooked_calls() {
    // `mwtest bench-lat` times each call alone, alternating pairs through the hooks with
    // pairs under names the shim does not intercept: the hooked half must be captured
    // whole and the direct half not at all, or its medians compare unlike things.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("lat.mwcap");
    let (threads, pairs) = (2usize, 500usize);
    let out = b.run(
        "direct",
        &["bench-lat", &threads.to_string(), &pairs.to_string()],
        Some(&cap),
        &[("MEMWATCH_BUFFER_EVENTS", "65536")],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("L "))
        .unwrap_or_else(|| panic!("no L line: {text}"));
    for key in [
        "shim_malloc_median_ns",
        "shim_free_median_ns",
        "direct_malloc_median_ns",
        "direct_free_median_ns",
    ] {
        let v: f64 = field(line, key);
        assert!(v > 0.0, "{key} in {line}");
    }
    let added: f64 = field(line, "added_per_call_ns");
    let parts: f64 = field::<f64>(line, "added_malloc_ns") + field::<f64>(line, "added_free_ns");
    assert!((added - parts / 2.0).abs() < 0.06, "{line}");
    let recs = read_capture(&cap);
    assert_eq!(dropped_total(&recs), 0, "events dropped");
    let evs = events(&recs);
    // Per thread: its set-device, one untimed warm-up pair, then `pairs` hooked pairs.
    let pairs_hooked = threads * (1 + pairs);
    assert_eq!(count_api(&evs, "hipMalloc"), pairs_hooked);
    assert_eq!(count_api(&evs, "hipFree"), pairs_hooked);
    assert_eq!(
        evs.len(),
        2 * pairs_hooked + threads,
        "nothing else recorded"
    );
    for bad in [["0", "10"], ["65", "10"], ["2", "0"]] {
        let out = std::process::Command::new(b.program("direct"))
            .args(["direct", "bench-lat", bad[0], bad[1]])
            .env("MWTEST_LIBDIR", &b.dir)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "bench-lat {bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("bench-lat: 1-64 threads"),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn cuda_driver_bench_records_only_its_dlsym_batches() {
    // bench/cuda_driver_overhead.sh's side-by-side figure compares calls through the
    // dlsym'd driver entry points (the shim's wrappers) with calls through the functions'
    // own addresses, read from libcuda's ELF symbol table: its "without the shim" half is
    // only honest if the shim sees none of those. Here the simulated runtime stands in
    // for libcuda.so.1.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        b.dir.join("libmemwatch_testrt.so"),
        tmp.path().join("libcuda.so.1"),
    )
    .unwrap();
    let prog = tmp.path().join("cuda_driver_pairs");
    let src = crate_dir().join("../../bench/cuda_driver_pairs.c");
    cc(&[
        "-O2",
        "-Wall",
        "-pthread",
        "-o",
        prog.to_str().unwrap(),
        src.to_str().unwrap(),
        "-ldl",
    ]);
    let (threads, rounds, pairs) = (2usize, 5usize, 50usize);
    // ab-async also runs with the diagnostic pad (busy work after each dlsym'd call),
    // which must not change what is called or captured.
    for (mode, alloc, free, pad) in [
        ("ab-sync", "cuMemAlloc_v2", "cuMemFree_v2", ""),
        ("ab-async", "cuMemAllocAsync", "cuMemFreeAsync", "20"),
    ] {
        let cap = tmp.path().join(format!("{mode}.mwcap"));
        let out = std::process::Command::new(&prog)
            .args([
                mode,
                &threads.to_string(),
                &rounds.to_string(),
                &pairs.to_string(),
                "4096",
            ])
            .env("LD_LIBRARY_PATH", tmp.path())
            .env("LD_PRELOAD", &b.shim)
            .env("MEMWATCH_SINK", format!("file:{}", cap.display()))
            .env("MEMWATCH_BUFFER_EVENTS", "65536")
            .env("CUDA_PAIRS_PAD_NS", pad)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(
            text.contains(&format!("pad: {pad} ns after each dlsym'd call")),
            !pad.is_empty(),
            "{mode}: {text}"
        );
        assert!(
            out.status.success(),
            "{mode}: {:?}\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(field::<usize>(&text, "failed"), 0, "{text}");
        // Per thread: one warm-up batch of each kind, then per round two batches of each.
        let hooked_pairs = threads * (2 * rounds + 1) * pairs;
        assert_eq!(
            field::<usize>(&text, "hooked_calls"),
            2 * hooked_pairs,
            "{text}"
        );
        assert_eq!(field::<usize>(&text, "calls"), 4 * hooked_pairs, "{text}");
        let recs = read_capture(&cap);
        assert_eq!(dropped_total(&recs), 0, "{mode}");
        let evs = events(&recs);
        assert_eq!(count_api(&evs, alloc), hooked_pairs, "{mode}: {alloc}");
        assert_eq!(count_api(&evs, free), hooked_pairs, "{mode}: {free}");
        assert!(
            evs.iter()
                .filter(|e| e.api().name() == alloc)
                .all(|e| e.result == 0 && e.size == 4096 && e.ptr != 0),
            "{mode}: every allocation succeeded with its size and pointer"
        );
    }
    // Bad arguments are refused (exit 2, the ranges named), not run clipped. `pad` is
    // CUDA_PAIRS_PAD_NS ("": none).
    let run = |args: &[&str], libdir: &std::path::Path, pad: &str| {
        std::process::Command::new(&prog)
            .args(args)
            .env("LD_LIBRARY_PATH", libdir)
            .env("CUDA_PAIRS_PAD_NS", pad)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap()
    };
    for bad in [
        ["foo", "1", "1", "1", "1"],
        ["sync", "0", "1", "1", "1"],
        ["ab-async", "65", "1", "1", "1"],
        ["sync", "1", "0", "1", "1"],
        ["sync", "1", "100001", "1", "1"],
        ["async", "1", "1", "0", "1"],
        ["sync", "1", "1", "1", "0"],
    ] {
        let out = run(&bad, tmp.path(), "");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(
            err.contains("1-64 threads, 1-100000 batches"),
            "{bad:?}: {err}"
        );
    }
    let out = run(&["sync", "1"], tmp.path(), "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: cuda_driver_pairs"));
    // The pad is a number of ns, and only for the side-by-side modes.
    for (mode, pad) in [
        ("ab-async", "x"),
        ("ab-sync", "-1"),
        ("ab-sync", "nan"),
        ("async", "10"),
    ] {
        let out = run(&[mode, "1", "1", "1", "4096"], tmp.path(), pad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{mode} pad {pad}: {err}");
        assert!(
            err.contains("CUDA_PAIRS_PAD_NS wants 0-1000000 ns"),
            "{err}"
        );
    }
    // A libcuda.so.1 without the driver API: exit 1, naming what is missing.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let src = empty.join("empty.c");
    std::fs::write(&src, "int memwatch_not_a_driver;\n").unwrap();
    let lib = empty.join("libcuda.so.1");
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        lib.to_str().unwrap(),
        src.to_str().unwrap(),
    ]);
    let out = run(&["sync", "1", "1", "1", "4096"], &empty, "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no cuInit in libcuda"), "{err}");
}
