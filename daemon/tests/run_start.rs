//! A run starts at the earlier of its process's start stamp and its first event (issue
//! 25 item 4): a capture whose shim stamped `process_start` after its first events (shims
//! before the stamp moved ahead of every event) keeps all of them visible — in the run's
//! duration, `/api/runs/ID/events` and the run's figures.

mod common;

use axum::body::Body;
use axum::http::Request;
use common::*;
use memwatch_daemon::{Batch, Ingestor};
use memwatch_wire::{ProcessStart, Record};
use tower::ServiceExt;

async fn get(app: &axum::Router, uri: &str) -> serde_json::Value {
    let resp = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 30)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn events_before_the_start_stamp_are_in_the_run() {
    // Stamps at the last event, in the middle, and just after the first event.
    for (case, (n, stamp_at)) in [(3960usize, 3959usize), (5940, 2000), (700, 1)]
        .into_iter()
        .enumerate()
    {
        for url in dbs("run_start").await.urls {
            let (app, store) = test_app(&url, None, 1 << 20).await;
            let first = 5_000_000_000u64 + case as u64 * 77;
            let events = workload(n, first, 1, 11 + case as u64);
            let stamp = events[stamp_at].ts_ns;
            let wall = 1_700_000_000_000_000_000u64;
            let mut records = vec![Record::ProcessStart(ProcessStart {
                pid: 7,
                ppid: 1,
                mono_anchor_ns: stamp,
                wall_anchor_unix_ns: wall,
                ..ProcessStart::default()
            })];
            records.extend(events.chunks(1000).map(|c| Record::Events(c.to_vec())));
            let mut ing = Ingestor::new(store.clone());
            ing.commit(vec![Batch {
                node: "n".into(),
                stream: 1,
                seq: 1,
                run_key: "late-stamp".into(),
                records,
            }])
            .await
            .unwrap();
            let runs = get(&app, "/api/runs").await;
            let run = &runs["runs"][0];
            let id = run["id"].as_i64().unwrap();
            let last = events.iter().map(|e| e.ts_ns).max().unwrap();
            let earliest = events.iter().map(|e| e.ts_ns).min().unwrap();
            assert_eq!(
                run["duration_ns"].as_u64().unwrap(),
                last - earliest,
                "case {case}: the run spans its first to its last event ({url})"
            );
            // Its wall-clock start moves back with it.
            assert_eq!(
                run["wall_anchor_unix_ns"].as_u64().unwrap(),
                wall - (stamp - earliest),
                "case {case}"
            );
            let mut got = 0usize;
            let mut cursor = String::new();
            loop {
                let page = get(
                    &app,
                    &format!("/api/runs/{id}/events?device=0&limit=1000&cursor={cursor}"),
                )
                .await;
                got += page["events"].as_array().unwrap().len();
                match page["next_cursor"].as_str() {
                    Some(c) => cursor = c.to_string(),
                    None => break,
                }
            }
            assert_eq!(got, n, "case {case}: every event is listed ({url})");
            assert_eq!(stored_events(&store, id, 0).await.len(), n);
        }
    }
}
