//! memwatch's own device readings (`device_reading` frames, from `memwatch run` captures
//! and the agent) reach the store: each reading's device-wide figure is a device sample
//! of the node (the per-process figures stay in the capture file), on every backend under
//! test.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{dbs, test_app};
use memwatch_daemon::{Batch, Ingestor};
use memwatch_wire::{DeviceReading, ProcessUse, Record, Vendor};
use tower::ServiceExt;

const GIB: u64 = 1 << 30;

#[tokio::test]
async fn a_readings_device_figure_is_stored_as_a_device_sample() {
    for url in dbs("device_readings").await.urls.clone() {
        let (app, store) = test_app(&url, None, 1 << 20).await;
        let mut ing = Ingestor::new(store.clone());
        let t0 = 3_000_000_000u64;
        let mut recs = vec![common::start(7, t0)];
        for i in 0..5u64 {
            recs.push(Record::DeviceReading(DeviceReading {
                ts_ns: t0 + i * 100_000_000,
                device: 1,
                vendor: Vendor::Nvidia as u8,
                flags: DeviceReading::PROCESSES,
                used_bytes: (10 + i) * GIB,
                total_bytes: 140 * GIB,
                source: "nvml".into(),
                uuid: "GPU-1".into(),
                pci_bus_id: "00000000:19:00.0".into(),
                processes: vec![ProcessUse {
                    pid: 7,
                    flags: ProcessUse::WATCHED | ProcessUse::BYTES_KNOWN,
                    used_bytes: i * GIB,
                }],
            }));
        }
        ing.commit(vec![Batch {
            node: "gpu-node".into(),
            stream: 1,
            seq: 1,
            run_key: "r".into(),
            records: recs,
        }])
        .await
        .unwrap();
        let resp = app
            .clone()
            .oneshot(Request::get("/api/nodes").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let node = v["nodes"][0]["id"].as_i64().expect("the node");
        let history = store.sample_history(node, 1, 0, 0, 100).await.unwrap();
        assert_eq!(history.len(), 5, "{url}: {history:?}");
        assert_eq!(
            history.iter().map(|s| s.1).collect::<Vec<_>>(),
            (10..15).map(|g| g * GIB as i64).collect::<Vec<_>>(),
            "{url}"
        );
        assert!(history.iter().all(|s| s.2 == 140 * GIB as i64));
    }
}
