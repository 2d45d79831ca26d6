//! The run page of a run with many failed requests (a long JAX loop failing every
//! execution once its pool is full) stays small: it lists the newest incidents and says
//! how many there are, the chart draws at most one failure mark per column and its
//! legend counts every failure, of the range and of the run, on each backend.

mod common;

use axum::http::StatusCode;
use common::{dbs, ev, start, test_app};
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::{EventKind, Record};

use common::http::text as get;

/// A run of `allocs` allocations and `failures` failed ones spread over its time, the
/// failures in bursts (several at one instant, as queued executions fail together).
async fn record(store: &Store, key: &str, failures: u64, allocs: u64) -> i64 {
    let t0 = 1_000_000u64;
    let mut recs = vec![start(42, t0)];
    let mut evs = Vec::new();
    for i in 0..allocs {
        evs.push(ev(
            t0 + 1000 + i * 997,
            EventKind::Alloc,
            0x1000 + i * 64,
            4096,
            0,
        ));
    }
    for i in 0..failures {
        let mut f = ev(
            t0 + 5000 + (i / 3) * 2_311,
            EventKind::AllocFailed,
            0,
            1 << 30,
            0,
        );
        f.result = 2;
        evs.push(f);
    }
    evs.sort_by_key(|e| e.ts_ns);
    recs.extend(evs.chunks(4096).map(|c| Record::Events(c.to_vec())));
    let mut ing = Ingestor::new(store.clone());
    let out = ing
        .commit(vec![Batch {
            node: "n".into(),
            stream: 1 + failures,
            seq: 1,
            run_key: key.into(),
            records: recs,
        }])
        .await
        .unwrap();
    out[0].run_id.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_page_of_many_failures_lists_the_newest_and_counts_all() {
    let d = dbs("run_page_scale").await;
    for url in &d.urls {
        let (app, store) = test_app(url, None, 64 << 20).await;
        for (failures, allocs) in [(30_000u64, 2_000u64), (7, 50)] {
            let id = record(&store, &format!("r{failures}"), failures, allocs).await;
            let (status, body) = get(&app, &format!("/runs/{id}")).await;
            assert_eq!(status, StatusCode::OK, "{url}");
            let rows = body
                .matches(&format!("<tr><td><a href=\"/runs/{id}?from="))
                .count();
            assert_eq!(rows as u64, failures.min(100), "{url}: rows listed");
            assert!(
                body.contains(&format!("<dd>{failures}</dd>")),
                "{url}: the failures figure"
            );
            let note = format!("The newest 100 of {failures} failed requests");
            assert_eq!(body.contains(&note), failures > 100, "{url}: {note}");
            assert!(
                body.contains(&format!(
                    "failed allocation ({failures} here, {failures} in run)"
                )),
                "{url}: legend of the whole run"
            );
            // One mark (a triangle and its line) per column of the plot at most.
            // (FAIL, the marks' colour.)
            let marks = body.matches("fill=\"#C8001E\" points=").count();
            assert!(marks <= 1200, "{url}: {marks} failure marks");
            if failures > 100 {
                assert!(body.len() < 400_000, "{url}: page of {} bytes", body.len());
            }
            // A zoom on part of the run counts what it shows.
            let (_, part) = get(&app, &format!("/runs/{id}?from=0&to=1000000")).await;
            let here = (0..failures)
                .filter(|i| 5000 + (i / 3) * 2_311 < 1_000_000)
                .count();
            assert!(
                part.contains(&format!(
                    "failed allocation ({here} here, {failures} in run)"
                )),
                "{url}: legend of a zoom"
            );
        }
        store.pool.close().await;
    }
}
