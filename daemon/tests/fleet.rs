//! The overview of a real two-GPU node: `testdata/multi-gpu/fleet/fleet.db` was written on
//! a host with two NVIDIA H100s by `memwatch serve` (older schema: migrations 1-5) with the
//! node agent's NVML samples of both GPUs and the two workers of one `jax_launch.py` job
//! forwarded as two runs. Opened here (migrated on open), the overview shows both GPUs of
//! the node with their samples, and the two runs as one job; each run page links the other.

mod common;

use axum::http::StatusCode;
use common::corpus::testdata;
use common::*;

use common::http::text as get;

#[tokio::test]
async fn old_fleet_database_shows_every_gpu_and_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    std::fs::copy(testdata("multi-gpu/fleet/fleet.db"), &db).unwrap();
    let (app, store) = test_app(db.to_str().unwrap(), None, 1 << 20).await;
    let applied: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&store.pool)
            .await
            .unwrap();
    assert!(applied.contains(&5) && applied.contains(&7), "{applied:?}");

    let (s, body) = get(&app, "/api/nodes").await;
    assert_eq!(s, StatusCode::OK);
    let nodes: serde_json::Value = serde_json::from_str(&body).unwrap();
    let devices = nodes["nodes"][0]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "{body}");
    for (i, d) in devices.iter().enumerate() {
        assert_eq!(d["ordinal"], i as i64);
        assert_eq!(d["name"], "NVIDIA H100 80GB HBM3");
        assert!(
            !d["samples"].as_array().unwrap().is_empty(),
            "GPU {i} has no sample"
        );
    }

    let (s, page) = get(&app, "/").await;
    assert_eq!(s, StatusCode::OK);
    for gpu in ["<strong>GPU 0</strong>", "<strong>GPU 1</strong>"] {
        assert!(page.contains(gpu), "overview lacks {gpu}");
    }
    assert_eq!(page.matches("NVIDIA H100 80GB HBM3").count(), 2);
    // The two workers of one launcher (pid 2527) are one job, each on its own GPU.
    let jobs = page.find("id=\"job-1\"").expect("no job listed");
    let job = &page[jobs..page[jobs..].find("</li>").unwrap() + jobs];
    assert!(job.contains("parent pid 2527"), "{job}");
    assert!(job.contains("/runs/1") && job.contains("/runs/2"), "{job}");
    assert!(job.contains("GPU 0") && job.contains("GPU 1"), "{job}");
    assert!(page.contains("python3 jax_worker.py train 5 1024 8192"));
    assert!(!page.contains(">GPU -1<"));

    let (_, run1) = get(&app, "/runs/1").await;
    assert!(run1.contains("Part of a job started by pid 2527"));
    assert!(run1.contains("href=\"/runs/2\""));
    assert!(
        run1.contains("<figcaption>GPU 1 <span class=\"muted\">NVIDIA H100 80GB HBM3</span>: peak"),
        "run 1 ran on GPU 1, an H100"
    );
    assert!(!run1.contains("GPU -1"));
}
