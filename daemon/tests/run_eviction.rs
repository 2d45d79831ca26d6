//! Runs leave the writer's memory (issue 25 item 2): a finished run (every process
//! ended) once it is quiet, any run once idle; a batch for it later rebuilds its state
//! from what is stored, so live bytes and peaks go on exactly as if it had stayed.

mod common;

use std::time::Duration;

use common::*;
use memwatch_daemon::{Batch, Ingestor, RunEviction};
use memwatch_wire::{EventKind, ProcessEnd, Record};

fn batch(run: usize, seq: u64, records: Vec<Record>) -> Batch {
    Batch {
        node: "n".into(),
        stream: 1000 + run as u64,
        seq,
        run_key: format!("run-{run}"),
        records,
    }
}

#[tokio::test]
async fn finished_runs_leave_memory_and_come_back_exactly() {
    for url in dbs("run_eviction").await.urls {
        let store = memwatch_daemon::Store::open(&url).await.unwrap();
        let mut ing = Ingestor::new(store.clone()).with_eviction(RunEviction {
            finished: Duration::ZERO,
            idle: Duration::from_secs(3600),
            max_runs: 1024,
        });
        // 30 runs of 2,000 live allocations of varied sizes; all but the last end.
        let runs = 30usize;
        for r in 0..runs {
            let t0 = 1_000_000 + r as u64 * 10_000_000;
            let mut recs = vec![start(42, t0)];
            let allocs: Vec<_> = (0..2000u64)
                .map(|i| {
                    ev(
                        t0 + 1 + i,
                        EventKind::Alloc,
                        0x1000 * (i + 1),
                        256 + (i * 37 + r as u64) % 4096,
                        0,
                    )
                })
                .collect();
            recs.push(Record::Events(allocs));
            if r + 1 < runs {
                recs.push(Record::ProcessEnd(ProcessEnd {
                    pid: 42,
                    ts_ns: t0 + 5000,
                    exit_code: 0,
                }));
            }
            ing.commit(vec![batch(r, 1, recs)]).await.unwrap();
        }
        assert_eq!(ing.runs_in_memory(), runs);
        ing.evict_idle_runs();
        assert_eq!(
            ing.runs_in_memory(),
            1,
            "only the run whose process still runs stays ({url})"
        );
        // Run 3 gets a batch later: half of its allocations freed. Its state is rebuilt
        // from the stored chunks, so the frees match and live bytes drop exactly.
        let r = 3usize;
        let t0 = 1_000_000 + r as u64 * 10_000_000;
        let sizes: Vec<u64> = (0..2000u64)
            .map(|i| 256 + (i * 37 + r as u64) % 4096)
            .collect();
        let frees: Vec<_> = (0..1000u64)
            .map(|i| ev(t0 + 6000 + i, EventKind::Free, 0x1000 * (i + 1), 0, 0))
            .collect();
        ing.commit(vec![batch(r, 2, vec![Record::Events(frees)])])
            .await
            .unwrap();
        let listed = store.runs(100).await.unwrap();
        let run = listed.iter().find(|x| x.run_key == "run-3").unwrap();
        let dev = &run.devices[0];
        assert_eq!(
            dev.live_bytes as u64,
            sizes[1000..].iter().sum::<u64>(),
            "{url}"
        );
        assert_eq!(dev.peak_bytes as u64, sizes.iter().sum::<u64>(), "{url}");
        assert_eq!((dev.alloc_count, dev.free_count), (2000, 1000), "{url}");
        store.close().await.unwrap();
    }
}

/// Open runs without end (issue 33 item 2: 70,000 of them held 804 MiB): never more than
/// the cap is held, whatever the order of their batches; the runs pushed out are rebuilt
/// exactly when a batch comes for them.
#[tokio::test]
async fn open_runs_beyond_the_cap_leave_memory_and_come_back_exactly() {
    for url in dbs("run_cap").await.urls {
        let store = memwatch_daemon::Store::open(&url).await.unwrap();
        let cap = 40usize;
        let mut ing = Ingestor::new(store.clone()).with_eviction(RunEviction {
            finished: Duration::from_secs(3600),
            idle: Duration::from_secs(3600),
            max_runs: cap,
        });
        // 300 runs that never end, 5 per commit, each with 3 live allocations.
        let runs = 300usize;
        let mut most = 0;
        for group in (0..runs).collect::<Vec<_>>().chunks(5) {
            let batches = group
                .iter()
                .map(|&r| {
                    let t0 = 1_000_000 + r as u64 * 10_000;
                    let allocs = (0..3u64)
                        .map(|i| {
                            ev(
                                t0 + 1 + i,
                                EventKind::Alloc,
                                0x1000 * (i + 1),
                                100 + r as u64,
                                0,
                            )
                        })
                        .collect();
                    batch(r, 1, vec![start(42, t0), Record::Events(allocs)])
                })
                .collect();
            ing.commit(batches).await.unwrap();
            ing.evict_idle_runs();
            most = most.max(ing.runs_in_memory());
        }
        assert!(most <= cap, "{most} runs held, cap {cap} ({url})");
        // The first run left memory long ago: one free rebuilds it and moves it exactly.
        let t0 = 1_000_000u64;
        ing.commit(vec![batch(
            0,
            2,
            vec![Record::Events(vec![ev(
                t0 + 100,
                EventKind::Free,
                0x1000,
                0,
                0,
            )])],
        )])
        .await
        .unwrap();
        let listed = store.runs(1000).await.unwrap();
        let run = listed.iter().find(|x| x.run_key == "run-0").unwrap();
        let dev = &run.devices[0];
        assert_eq!((dev.live_bytes, dev.peak_bytes), (200, 300), "{url}");
        assert_eq!((dev.alloc_count, dev.free_count), (3, 1), "{url}");
        store.close().await.unwrap();
    }
}
