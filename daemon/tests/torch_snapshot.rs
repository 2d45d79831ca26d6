//! Runs stored from the real PyTorch snapshots of `testdata/torch-snapshots/` (PyTorch
//! 2.11, NVIDIA H100): converted by `memwatch_analysis::torch::to_records` as `memwatch
//! import SNAPSHOT.pickle` converts them, ingested through the daemon's own ingest, and
//! read back through the API. Each fixture's `.json` beside it holds what PyTorch itself
//! said at the dump (`memory_reserved()`, `max_memory_reserved()`, ...): the stored run's
//! live bytes and peak must be exactly those.

mod common;

use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::corpus::store_snapshot_file;
use common::*;
use tower::ServiceExt;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/torch-snapshots")
        .join(name)
}

/// What PyTorch said at the dump (`at_dump` of the fixture's JSON).
fn torch_figures(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture(&format!("{name}.json"))).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["at_dump"].clone()
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, serde_json::Value) {
    let resp = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 30)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test]
async fn stored_snapshots_hold_what_pytorch_reserved() {
    for url in dbs("torch_snapshot").await.urls.clone() {
        let (app, store) = test_app(&url, None, 1 << 20).await;
        for (stream, name) in ["leak", "train_snapshot", "fragmentation"]
            .into_iter()
            .enumerate()
        {
            let want = torch_figures(name);
            let path = fixture(&format!("{name}.pickle"));
            let id = store_snapshot_file(
                &store,
                &path,
                &format!("snapshot:{name}"),
                stream as u64 + 1,
            )
            .await;
            let (status, run) = get(&app, &format!("/api/runs/{id}")).await;
            assert_eq!(status, StatusCode::OK, "{name}: {run}");
            let devices = run["devices"].as_array().unwrap();
            let gpu0 = devices
                .iter()
                .find(|d| d["device"] == 0)
                .unwrap_or_else(|| panic!("{name}: no GPU 0 in {run}"));
            assert_eq!(
                gpu0["live_bytes"], want["memory_reserved"],
                "{name}: live bytes at the end = memory_reserved()"
            );
            assert_eq!(
                gpu0["peak_bytes"], want["max_memory_reserved"],
                "{name}: peak = max_memory_reserved()"
            );
        }
    }
}
