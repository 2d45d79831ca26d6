//! A device is what its driver says it is (issue 34 item 2): a run's device is joined to
//! the node's sampled device by UUID, then PCI bus id, and by ordinal only where neither
//! knows an identity — on every backend under test. A process under
//! CUDA_VISIBLE_DEVICES=k saw the node's GPU k as its device 0: its capacity (name,
//! memory) and its "device used" samples are GPU k's, whichever of the node's and the
//! run's records came first; captures of two machines imported under one host name are
//! two devices when their UUIDs differ; a capture without identities pairs by ordinal.

mod common;

use axum::body::Body;
use axum::http::Request;
use common::{dbs, ev, start, test_app};
use memwatch_daemon::{device_capacity, Batch, Ingestor, Store};
use memwatch_wire::{DeviceIdentity, DeviceInfo, DeviceReading, EventKind, Record, Vendor};
use tower::ServiceExt;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const T0: u64 = 5_000_000_000;
const PERIOD: u64 = 100_000_000;

fn uuid(gpu: i32) -> String {
    format!(
        "GPU-{:08x}-1111-2222-3333-444455556666",
        0xbbbb_0000u32 + gpu as u32
    )
}

fn total(gpu: i32) -> u64 {
    (80 + 10 * gpu as u64) * GIB
}

/// GPU `d`'s total as its runtime gives it (cuDeviceTotalMem): NVML's less what the
/// driver reserves (0.4 % on an H200).
fn runtime_total(gpu: i32) -> u64 {
    total(gpu) - 512 * MIB
}

/// GPU `d`'s use at reading `i`.
fn used(d: i32, i: u64) -> u64 {
    10 * (d as u64 + 1) * GIB + i * MIB
}

/// The node sampler's records of `n` GPUs: each described (pid 0, NVML's forms), then
/// read `readings` times.
fn node_records(n: i32, readings: u64) -> Vec<Record> {
    let mut recs: Vec<Record> = (0..n)
        .map(|d| {
            Record::DeviceInfo(DeviceInfo {
                pid: 0,
                device: d,
                vendor: Vendor::Nvidia as u8,
                total_bytes: total(d),
                name: format!("GPU model {d}"),
                identity: Some(DeviceIdentity::new(
                    &uuid(d),
                    &format!("00000000:{:02X}:00.0", 0x1a + d),
                )),
            })
        })
        .collect();
    for i in 0..readings {
        for d in 0..n {
            recs.push(Record::DeviceReading(DeviceReading {
                ts_ns: T0 + i * PERIOD + d as u64,
                device: d,
                vendor: Vendor::Nvidia as u8,
                flags: 0,
                used_bytes: used(d, i),
                total_bytes: total(d),
                source: "nvml".into(),
                uuid: uuid(d),
                pci_bus_id: format!("0000:{:02x}:00.0", 0x1a + d),
                processes: Vec::new(),
            }));
        }
    }
    recs
}

/// A process (pid 42) that saw `ordinal` as the device with `identity` and allocated
/// `bytes` on it.
fn run_records(
    ordinal: i32,
    identity: Option<DeviceIdentity>,
    name: &str,
    total_bytes: u64,
    bytes: u64,
) -> Vec<Record> {
    vec![
        start(42, T0),
        Record::DeviceInfo(DeviceInfo {
            pid: 42,
            device: ordinal,
            vendor: Vendor::Nvidia as u8,
            total_bytes,
            name: name.into(),
            identity,
        }),
        Record::Events(vec![ev(
            T0 + 50,
            EventKind::Alloc,
            0x7000_0000,
            bytes,
            ordinal,
        )]),
    ]
}

fn batch(node: &str, stream: u64, run_key: &str, records: Vec<Record>) -> Batch {
    Batch {
        node: node.into(),
        stream,
        seq: 1,
        run_key: run_key.into(),
        records,
    }
}

/// Commits `batches` one by one; the run id of the one named `run_key`.
async fn store_all(store: &Store, batches: Vec<Batch>, run_key: &str) -> i64 {
    let mut ing = Ingestor::new(store.clone());
    let mut run = None;
    for b in batches {
        let key = b.run_key.clone();
        let out = ing.commit(vec![b]).await.unwrap();
        if key == run_key {
            run = out[0].run_id;
        }
    }
    run.expect("the run was stored")
}

async fn nodes_json(app: &axum::Router) -> serde_json::Value {
    let resp = app
        .clone()
        .oneshot(Request::get("/api/nodes").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 22)
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// The run's "device used" samples of its device `device` over the readings' span:
/// each point's (min, max).
async fn used_points(store: &Store, run: i64, device: i64, readings: u64) -> Vec<(i64, i64)> {
    store
        .run_samples(run, device, 0, 0, PERIOD, readings as usize)
        .await
        .unwrap()
        .iter()
        .map(|p| (p.min, p.max))
        .collect()
}

#[tokio::test]
async fn a_process_under_cuda_visible_devices_is_drawn_on_the_gpu_it_used() {
    for url in dbs("device_identity_visible").await.urls.clone() {
        for (n, k, node_first) in [(2, 1, true), (2, 1, false), (4, 2, true), (3, 2, false)] {
            let (app, store) = test_app(&url, None, 1 << 20).await;
            let node = format!("gpu-{n}-{k}-{node_first}");
            let by_uuid = DeviceIdentity::new(&uuid(k), "");
            let mut batches = vec![
                batch(&node, 1, "", node_records(n, 6)),
                batch(
                    &node,
                    2,
                    "r",
                    run_records(
                        0,
                        Some(by_uuid),
                        &format!("GPU model {k}"),
                        total(k),
                        3 * GIB,
                    ),
                ),
            ];
            if !node_first {
                batches.reverse();
            }
            let run = store_all(&store, batches, "r").await;
            let what = format!("{n} GPUs, visible {k}, node first {node_first}");
            assert_eq!(
                device_capacity(&store, run, 0).await.unwrap(),
                Some((format!("GPU model {k}"), total(k) as i64)),
                "{what}"
            );
            let pts = used_points(&store, run, 0, 6).await;
            assert_eq!(pts.len(), 6, "{what}");
            for (i, (lo, hi)) in pts.iter().enumerate() {
                // Each bucket's minimum starts from the value carried into it.
                let i = i as u64;
                let want = (used(k, i.saturating_sub(1)) as i64, used(k, i) as i64);
                assert_eq!((*lo, *hi), want, "{what}: reading {i} of GPU {k}");
            }
            // The run page names the GPU its device 0 was.
            let resp = app
                .clone()
                .oneshot(
                    Request::get(format!("/runs/{run}"))
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            let page = axum::body::to_bytes(resp.into_body(), 1 << 24)
                .await
                .unwrap();
            let page = String::from_utf8(page.to_vec()).unwrap();
            assert!(
                page.contains(&format!("GPU model {k} (the node&#39;s GPU {k})")),
                "{what}: run page names the GPU: {}",
                page.split("<figcaption>")
                    .nth(1)
                    .unwrap_or("")
                    .chars()
                    .take(300)
                    .collect::<String>()
            );
            // The node lists each GPU once, at the sampler's index, with its identity.
            let v = nodes_json(&app).await;
            let nd = v["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["name"] == node.as_str())
                .unwrap()
                .clone();
            let devs = nd["devices"].as_array().unwrap();
            assert_eq!(devs.len(), n as usize, "{what}: {nd}");
            for (d, row) in devs.iter().enumerate() {
                assert_eq!(row["ordinal"], d as i64, "{what}");
                assert_eq!(row["uuid"], uuid(d as i32), "{what}");
                assert_eq!(
                    row["pci_bus_id"],
                    format!("0000:{:02x}:00.0", 0x1a + d),
                    "{what}"
                );
                assert_eq!(row["samples"][0]["used_bytes"], used(d as i32, 5), "{what}");
            }
        }
    }
}

/// A process that knew only the bus id (HIP without hipDeviceGetUuid) is paired by it.
#[tokio::test]
async fn a_process_known_by_its_bus_id_is_paired_by_it() {
    for url in dbs("device_identity_bus").await.urls.clone() {
        let (_app, store) = test_app(&url, None, 1 << 20).await;
        let by_bus = DeviceIdentity::new("", "0000:1D:00.0");
        let run = store_all(
            &store,
            vec![
                batch("bus", 1, "", node_records(4, 3)),
                batch(
                    "bus",
                    2,
                    "r",
                    run_records(0, Some(by_bus), "GPU model 3", total(3), GIB),
                ),
            ],
            "r",
        )
        .await;
        assert_eq!(
            device_capacity(&store, run, 0).await.unwrap(),
            Some(("GPU model 3".to_string(), total(3) as i64))
        );
        let pts = used_points(&store, run, 0, 3).await;
        assert_eq!(
            pts.iter().map(|p| p.1).collect::<Vec<_>>(),
            (0..3).map(|i| used(3, i) as i64).collect::<Vec<_>>()
        );
    }
}

/// Captures of three machines imported under one host name ("vm"), each a device 0: two
/// distinct UUIDs are two devices under their own names, the same UUID imported again is
/// the same device; each run's capacity is its own machine's.
#[tokio::test]
async fn imports_of_two_machines_are_two_devices() {
    for url in dbs("device_identity_imports").await.urls.clone() {
        let (app, store) = test_app(&url, None, 1 << 20).await;
        let machines = [
            ("import:a", 7, "NVIDIA H100 80GB HBM3", 80 * GIB),
            ("import:b", 9, "NVIDIA H200", 141 * GIB),
            ("import:c", 7, "NVIDIA H100 80GB HBM3", 80 * GIB),
        ];
        let mut runs = Vec::new();
        for (i, (key, gpu, name, total_bytes)) in machines.iter().enumerate() {
            let id = DeviceIdentity::new(&uuid(*gpu), "0000:18:00.0");
            let run = store_all(
                &store,
                vec![batch(
                    "vm",
                    10 + i as u64,
                    key,
                    run_records(0, Some(id), name, *total_bytes, GIB),
                )],
                key,
            )
            .await;
            runs.push(run);
        }
        let v = nodes_json(&app).await;
        let vm = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == "vm")
            .unwrap()
            .clone();
        let mut names: Vec<(i64, String)> = vm["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["ordinal"].as_i64().unwrap(),
                    d["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                (0, "NVIDIA H100 80GB HBM3".to_string()),
                (0, "NVIDIA H200".to_string())
            ],
            "{vm}"
        );
        for (run, (_, _, name, total_bytes)) in runs.iter().zip(&machines) {
            assert_eq!(
                device_capacity(&store, *run, 0).await.unwrap(),
                Some((name.to_string(), *total_bytes as i64))
            );
        }
        let resp = app
            .clone()
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let page = String::from_utf8(
            axum::body::to_bytes(resp.into_body(), 1 << 24)
                .await
                .unwrap()
                .to_vec(),
        )
        .unwrap();
        assert_eq!(
            page.matches("NVIDIA H200").count(),
            1,
            "one H200 device on the overview"
        );
        assert!(page.contains("NVIDIA H100 80GB HBM3"));
        assert!(page.contains(&uuid(9)), "the device's UUID is shown");
    }
}

/// A capture made before the shim recorded identities pairs by ordinal: its device j is
/// the node's device j (name, memory, samples).
#[tokio::test]
async fn a_capture_without_identities_pairs_by_ordinal() {
    for url in dbs("device_identity_old").await.urls.clone() {
        for (n, j) in [(1, 0), (3, 1), (4, 3)] {
            let (_app, store) = test_app(&url, None, 1 << 20).await;
            let node = format!("old-{n}-{j}");
            let run = store_all(
                &store,
                vec![
                    batch(&node, 1, "", node_records(n, 2)),
                    batch(
                        &node,
                        2,
                        "r",
                        // The runtime's name is the sampler's; its total is below
                        // NVML's by what the driver reserves.
                        run_records(j, None, &format!("GPU model {j}"), runtime_total(j), GIB),
                    ),
                ],
                "r",
            )
            .await;
            // The run's own description is the latest of that device.
            assert_eq!(
                device_capacity(&store, run, j as i64).await.unwrap(),
                Some((format!("GPU model {j}"), runtime_total(j) as i64))
            );
            let pts = used_points(&store, run, j as i64, 2).await;
            assert_eq!(
                pts.iter().map(|p| p.1).collect::<Vec<_>>(),
                vec![used(j, 0) as i64, used(j, 1) as i64]
            );
        }
    }
}

/// Device 0 of an H100 machine and of an H200 machine, imported under one host name from
/// captures whose shim recorded no identity, the H200's with NVML readings that know its
/// UUID: two devices, each run's capacity its own GPU's, the readings on the H200's
/// (the overview drew the H100's name over the H200's readings, and H200 pages the
/// H100's 79 GiB capacity line). Either import first.
#[tokio::test]
async fn old_captures_of_two_models_at_one_ordinal_are_two_devices() {
    for url in dbs("device_identity_models").await.urls.clone() {
        for h100_first in [true, false] {
            let (_app, store) = test_app(&url, None, 1 << 20).await;
            let node = format!("vm-{h100_first}");
            let h100 = batch(
                &node,
                1,
                "h100",
                run_records(0, None, "NVIDIA H100 80GB HBM3", 85_029_158_912, GIB),
            );
            let mut h200_records = run_records(0, None, "NVIDIA H200", 150_109_880_320, 2 * GIB);
            for i in 0..3u64 {
                h200_records.push(Record::DeviceReading(DeviceReading {
                    ts_ns: T0 + i * PERIOD,
                    device: 0,
                    vendor: Vendor::Nvidia as u8,
                    flags: 0,
                    used_bytes: 14 * GIB + i * MIB,
                    total_bytes: 150_754_820_096,
                    source: "nvml".into(),
                    uuid: uuid(5),
                    pci_bus_id: "00000000:00:06.0".into(),
                    processes: Vec::new(),
                }));
            }
            let h200 = batch(&node, 2, "h200", h200_records);
            let batches = if h100_first {
                vec![h100.clone(), h200.clone()]
            } else {
                vec![h200.clone(), h100.clone()]
            };
            let mut ing = Ingestor::new(store.clone());
            let mut runs = std::collections::HashMap::new();
            for b in batches {
                let key = b.run_key.clone();
                let out = ing.commit(vec![b]).await.unwrap();
                runs.insert(key, out[0].run_id.unwrap());
            }
            assert_eq!(
                device_capacity(&store, runs["h100"], 0).await.unwrap(),
                Some(("NVIDIA H100 80GB HBM3".to_string(), 85_029_158_912)),
                "h100 first: {h100_first}"
            );
            // The row's latest description: the name the runtime gave, the total of
            // NVML's readings that followed it.
            assert_eq!(
                device_capacity(&store, runs["h200"], 0).await.unwrap(),
                Some(("NVIDIA H200".to_string(), 150_754_820_096)),
                "h100 first: {h100_first}"
            );
            let pts = used_points(&store, runs["h200"], 0, 3).await;
            assert_eq!(
                pts.iter().map(|p| p.1).collect::<Vec<_>>(),
                (0..3)
                    .map(|i| (14 * GIB + i * MIB) as i64)
                    .collect::<Vec<_>>(),
                "the H200's readings on the H200 run (h100 first: {h100_first})"
            );
            assert!(
                used_points(&store, runs["h100"], 0, 3).await.is_empty(),
                "no H200 readings on the H100 run (h100 first: {h100_first})"
            );
        }
    }
}
