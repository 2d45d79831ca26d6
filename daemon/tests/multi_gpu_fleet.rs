//! The node view of a real two-GPU node: `testdata/multi-gpu/fleet/fleet.db` is the
//! SQLite store `memwatch serve` kept while `memwatch agent` (NVML sampler on both
//! NVIDIA H100s) streamed the JAX workers of `jax_train` to it. Opened by today's daemon
//! (its migrations run on open, on a copy), the node must list both GPUs with their NVML
//! samples, and the overview page must show GPU 0 and GPU 1. The samples are checked
//! against the workers' own figures (`figures.rank<R>.json`: each preallocated its BFC
//! pool on its own GPU), not against hand-copied numbers.

mod common;

use axum::http::StatusCode;
use common::test_app;
use std::path::PathBuf;

fn fleet() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/multi-gpu/fleet")
}

use common::http::text as get;

#[tokio::test]
async fn the_recorded_two_gpu_node_lists_both_gpus_with_their_nvml_samples() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    std::fs::copy(fleet().join("fleet.db"), &db).unwrap();
    let (app, store) = test_app(&db.display().to_string(), None, 1 << 20).await;

    let (status, body) = get(&app, "/api/nodes").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{body}");
    let node = &nodes[0];
    let devices = node["devices"].as_array().unwrap();
    let ordinals: Vec<i64> = devices
        .iter()
        .map(|d| d["ordinal"].as_i64().unwrap())
        .collect();
    assert_eq!(ordinals, [0, 1], "{body}");

    let figures: Vec<serde_json::Value> = (0..2)
        .map(|r| {
            serde_json::from_str(
                &std::fs::read_to_string(fleet().join(format!("figures.rank{r}.json"))).unwrap(),
            )
            .unwrap()
        })
        .collect();
    let node_id = node["id"].as_i64().unwrap();
    for d in devices {
        let ordinal = d["ordinal"].as_i64().unwrap();
        assert_eq!(d["vendor"], "nvidia");
        let samples = d["samples"].as_array().unwrap();
        assert!(
            samples.iter().any(|s| s["source"] == "nvml"),
            "GPU {ordinal}: {d}"
        );
        // The worker on this GPU (NVML and the worker both count from the first GPU
        // here: no CUDA_VISIBLE_DEVICES) preallocated its pool: NVML's samples show it,
        // plus at most a CUDA context and NCCL's buffers.
        let worker = figures
            .iter()
            .find(|f| f["device"]["local_hardware_id"].as_i64() == Some(ordinal))
            .unwrap();
        let pool = worker["memory_stats_end"]["pool_bytes"].as_i64().unwrap();
        let history = store
            .sample_history(node_id, ordinal, 0, 0, 10_000)
            .await
            .unwrap();
        assert!(history.len() > 5, "GPU {ordinal}: {history:?}");
        let most = history.iter().map(|s| s.1).max().unwrap();
        assert!(
            most >= pool && most < pool + (2 << 30),
            "GPU {ordinal}: NVML's highest {most} vs the worker's pool {pool}"
        );
        assert!(history.iter().all(|s| s.2 > 0 && s.1 <= s.2));
    }

    let (status, html) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    for name in ["GPU 0", "GPU 1"] {
        assert!(html.contains(name), "the overview names {name}");
    }
    assert!(html.contains(node["name"].as_str().unwrap()));
}
