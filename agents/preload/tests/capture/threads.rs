//! Threads: calls made while the shim starts up, one thread per device, thousands of
//! short-lived threads, and more recording threads than there are rings: nothing lost.

use crate::common::*;
use memwatch_wire::{EventKind, Record};

#[test]
fn threads_arriving_during_start_up_lose_nothing() {
    // Two threads on two cores make their first hooked call at once: one runs the shim's
    // start-up and the other must wait for it. The waiter used to give up after 20,000
    // sched_yields, which return at once when each thread has a core, while start-up
    // cleared the whole shared queue (64 MiB here, tens of ms): the second thread's
    // first 3 calls were dropped every run. Start-up no longer writes the queue, and the
    // wait is bounded in time, not in yields.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("start-up.mwcap");
    let (threads, pairs) = (2usize, 10usize);
    b.run(
        "direct",
        &["bench-ab", &threads.to_string(), "1", &pairs.to_string()],
        Some(&cap),
        &[("MEMWATCH_BUFFER_EVENTS", "1048576")],
    );
    let recs = read_capture(&cap);
    assert_eq!(dropped_total(&recs), 0, "events dropped");
    let evs = events(&recs);
    assert_eq!(count_api(&evs, "hipSetDevice"), threads);
    assert_eq!(count_api(&evs, "hipMalloc"), threads * (1 + pairs));
    assert_eq!(count_api(&evs, "hipFree"), threads * (1 + pairs));
}

/// The `threads` scenario (8 threads, one device each, `n` pairs per thread): every call
/// is in the capture, on its thread and device, and none was dropped.
#[test]
fn eight_threads_on_eight_devices() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("threads.mwcap");
    let n = 300u64;
    let out = b.run("dlsym", &["threads", &n.to_string()], Some(&cap), &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let recs = read_capture(&cap);
    assert_eq!(dropped_total(&recs), 0, "events dropped");
    let evs = events(&recs);
    let mut seen_tids = std::collections::HashSet::new();
    for line in text.lines().filter(|l| l.starts_with("T ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let dev: i32 = f[1].trim_start_matches("dev=").parse().unwrap();
        let tid: u32 = f[2].trim_start_matches("tid=").parse().unwrap();
        seen_tids.insert(tid);
        let mine: Vec<_> = evs.iter().filter(|e| e.tid == tid).collect();
        // set-device + n allocs + n frees, all on this thread's device
        assert_eq!(mine.len() as u64, 1 + 2 * n, "thread {tid} (device {dev})");
        assert_eq!(mine[0].api().name(), "hipSetDevice");
        assert!(
            mine.iter().all(|e| e.device == dev),
            "device of thread {tid}"
        );
        let sizes: Vec<u64> = mine
            .iter()
            .filter(|e| e.is(EventKind::Alloc))
            .map(|e| e.size)
            .collect();
        let want: Vec<u64> = (0..n).map(|i| (dev as u64 + 1) * 4096 + i).collect();
        assert_eq!(sizes, want, "alloc sizes of thread {tid}");
        assert_eq!(
            mine.iter().filter(|e| e.is(EventKind::Free)).count() as u64,
            n
        );
    }
    assert_eq!(seen_tids.len(), 8);
    assert_eq!(evs.len() as u64, 8 * (1 + 2 * n));
}

#[test]
fn thousands_of_short_threads_lose_nothing() {
    // More threads than the ring registry holds (1024), one after another: rings of
    // ended threads are reused, every call is captured.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("churn.mwcap");
    b.run("direct", &["churn", "1500"], Some(&cap), &[]);
    let recs = read_capture(&cap);
    let evs = events(&recs);
    assert_eq!(evs.len(), 3000);
    assert_eq!(
        evs.iter()
            .filter(|e| e.is(EventKind::Alloc) && e.size == 512)
            .count(),
        1500
    );
    let tids: std::collections::HashSet<u32> = evs.iter().map(|e| e.tid).collect();
    assert!(tids.len() > 100, "distinct threads: {}", tids.len());
    assert!(!recs.iter().any(|r| matches!(r, Record::Dropped(_))));
}

#[test]
fn threads_past_the_ring_registry_use_the_shared_queue() {
    // 1100 threads alive at once: 1024 get rings of their own, the other 76 go through
    // the shared fallback queue (mapped at start-up, its slots first written here).
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("crowd.mwcap");
    let n = 1100u64;
    b.run(
        "direct",
        &["crowd", &n.to_string()],
        Some(&cap),
        &[("MEMWATCH_BUFFER_EVENTS", "256")],
    );
    let recs = read_capture(&cap);
    assert_eq!(dropped_total(&recs), 0, "events dropped");
    let evs = events(&recs);
    let mut sizes: Vec<u64> = evs
        .iter()
        .filter(|e| e.is(EventKind::Alloc))
        .map(|e| e.size)
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, (1024..1024 + n).collect::<Vec<_>>());
    assert_eq!(
        evs.iter().filter(|e| e.is(EventKind::Free)).count() as u64,
        n
    );
    let tids: std::collections::HashSet<u32> = evs.iter().map(|e| e.tid).collect();
    assert_eq!(tids.len() as u64, n, "one thread per pair");
}
