//! `memwatch report` on the two-GPU recordings (`testdata/multi-gpu`: one worker per
//! NVIDIA H100, JAX multi-process and torchrun + NCCL): each process's device side by
//! side with the framework's own figures, checked against what each worker printed itself
//! (`figures.rank<R>.json`) and against NVML's per-process readings taken during the run
//! (`nvsmi-apps.csv`). No figure here is copied by hand.

mod common;

use common::{mw, repo};
use serde_json::Value;
use std::path::PathBuf;

fn dir(s: &str) -> PathBuf {
    repo("testdata/multi-gpu").join(s)
}

fn report(s: &str, text: bool) -> (Value, String) {
    let cap = dir(s).join("capture.mwcap");
    let apps = dir(s).join("nvsmi-apps.csv");
    let args = |json: bool| {
        let mut a = vec![
            "report".to_string(),
            cap.display().to_string(),
            "--nvsmi-apps".into(),
            apps.display().to_string(),
        ];
        if json {
            a.push("--json".into());
        }
        a
    };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let (code, out, err) = mw(&a);
        assert_eq!(code, 0, "{s}: {err}");
        out
    };
    let json = serde_json::from_str(&run(args(true))).unwrap();
    let human = if text {
        run(args(false))
    } else {
        String::new()
    };
    (json, human)
}

/// The worker's own figures: rank -> figures.rank<R>.json.
fn figures(s: &str) -> Vec<Value> {
    (0..)
        .map(|r| dir(s).join(format!("figures.rank{r}.json")))
        .take_while(|p| p.is_file())
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

fn view(r: &Value, pid: u64) -> &Value {
    r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["pid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("no device view of pid {pid}"))
}

fn kind<'a>(v: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    v[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == name)
}

/// JAX: the PJRT allocator samples in the capture say what each worker's own
/// `device.memory_stats()` said (peak_bytes_in_use, bytes_limit, pool_bytes), on the
/// device the worker ran on; the framework pool is the one VMM handle of pool_bytes.
#[test]
fn jax_workers_memory_stats_side_by_side_with_the_driver() {
    for s in ["jax_train", "jax_uneven"] {
        let (r, text) = report(s, true);
        let figs = figures(s);
        assert_eq!(figs.len(), 2);
        assert_eq!(r["devices"].as_array().unwrap().len(), 2, "{s}");
        for f in &figs {
            let v = view(&r, f["pid"].as_u64().unwrap());
            assert_eq!(v["device"], f["device"]["local_hardware_id"], "{s}");
            let own = &f["memory_stats_end"];
            let fw = &v["framework"];
            assert_eq!(fw["source"], "pjrt", "{s}");
            for k in ["peak_bytes_in_use", "bytes_limit", "pool_bytes"] {
                assert_eq!(fw[k], own[k], "{s} pid {}: {k}", f["pid"]);
            }
            assert!(fw["max_bytes_in_use"].as_u64() >= own["bytes_in_use"].as_u64());
            let pool = kind(v, "at_peak", "framework_pool").expect("the BFC pool");
            assert_eq!(pool["bytes"], own["pool_bytes"], "{s}");
            // The kinds at the peak add up to the driver-level peak.
            let sum: u64 = v["at_peak"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k["bytes"].as_u64().unwrap())
                .sum();
            assert_eq!(Some(sum), v["peak_bytes"].as_u64(), "{s}");
            assert!(text.contains(&format!(
                "device {}",
                f["device"]["local_hardware_id"].as_u64().unwrap()
            )));
        }
        assert!(text.contains("per device (CUDA/HIP ordinals as each process saw them"));
        assert!(text.contains("framework (PJRT allocator, what JAX's memory_stats() says"));
    }
}

/// PyTorch has no framework records in a capture: the report says so, and the driver's
/// view of its caching allocator (the cudaMalloc segments) is exactly what each rank's
/// own `memory_reserved()` / `max_memory_reserved()` said at the end.
#[test]
fn torch_ranks_reserved_memory_is_the_cudamalloc_segments() {
    for s in ["torch_ddp", "torch_uneven"] {
        let (r, _) = report(s, false);
        for f in figures(s) {
            let v = view(&r, f["pid"].as_u64().unwrap());
            assert_eq!(v["device"], f["device"]["index"], "{s}");
            assert_eq!(v["framework"]["source"], "none");
            assert!(v["framework"]["note"]
                .as_str()
                .unwrap()
                .contains("memory_reserved"));
            let seg = kind(v, "kinds", "runtime_malloc").expect("cudaMalloc segments");
            let own = &f["memory_end"];
            assert_eq!(seg["live_bytes_at_end"], own["memory_reserved"], "{s}");
            assert_eq!(seg["peak_bytes"], own["max_memory_reserved"], "{s}");
        }
    }
}

/// NCCL's buffers are VMM handles in both frameworks, and each worker maps the other's
/// (imported: counted on the exporter's device, not here).
#[test]
fn nccl_buffers_show_as_vmm_and_the_peers_as_imported() {
    for s in ["jax_train", "torch_ddp"] {
        let (r, _) = report(s, false);
        for v in r["devices"].as_array().unwrap() {
            let vmm = kind(v, "kinds", "vmm").expect("NCCL's cuMem buffers");
            assert!(vmm["allocs"].as_u64().unwrap() > 100, "{s}");
            let imported = &v["imported_vmm"];
            assert!(imported["mappings"].as_u64().unwrap() > 0, "{s}");
            assert!(
                imported["peak_mapped_bytes"].as_u64() <= vmm["peak_bytes"].as_u64(),
                "{s}: a peer maps part of what the other worker created"
            );
        }
        for p in r["processes"].as_array().unwrap() {
            assert_eq!(p["devices"][0]["unmatched_frees"], 0, "{s}");
        }
    }
}

/// NVML's per-process figure = what the capture has live + what the driver holds for
/// the process outside any allocation call (the CUDA context, module code): at every
/// reading of the four recordings NVML is above the captured live bytes, never by a
/// GiB (nothing large is missed), and the typical difference is a context's size.
/// PyTorch's own OOM message (an NVML figure: "this process has X memory in use") matches
/// NVML's peak of the failing rank.
#[test]
fn captured_live_plus_context_is_nvmls_per_process_figure() {
    const GIB: i64 = 1 << 30;
    for s in ["jax_train", "jax_uneven", "torch_ddp", "torch_uneven"] {
        let (r, text) = report(s, true);
        let views = r["devices"].as_array().unwrap();
        assert_eq!(views.len(), 2);
        for v in views {
            let n = &v["nvml"];
            let i = |k: &str| n[k].as_i64().unwrap_or_else(|| panic!("{s}: {k}: {n}"));
            assert!(i("readings") > 10, "{s}");
            assert!(i("not_captured_min_bytes") >= 0, "{s}: {n}");
            assert!(i("not_captured_max_bytes") < GIB, "{s}: {n}");
            let median = i("not_captured_median_bytes");
            assert!((256 << 20..GIB).contains(&median), "{s}: {n}");
            assert_eq!(
                i("captured_at_peak_bytes") + i("not_captured_at_peak_bytes"),
                i("peak_bytes")
            );
            // NVML's peak is the driver-level peak plus at most a context's worth.
            let over = i("peak_bytes") - v["peak_bytes"].as_i64().unwrap();
            assert!((0..GIB).contains(&over), "{s}: {over}");
        }
        assert!(text.contains("NVML (this process on this GPU)"), "{s}");
    }
    let (r, _) = report("torch_uneven", false);
    let f = &figures("torch_uneven")[0];
    let msg = f["exception"]["text"].as_str().unwrap();
    let in_use: f64 = msg
        .split("this process has ")
        .nth(1)
        .and_then(|t| t.split(" GiB").next())
        .and_then(|t| t.parse().ok())
        .expect("PyTorch states the process's memory in use");
    let nvml = view(&r, f["pid"].as_u64().unwrap())["nvml"]["peak_bytes"]
        .as_u64()
        .unwrap() as f64
        / (1u64 << 30) as f64;
    assert!(
        (nvml - in_use).abs() < 0.006,
        "NVML {nvml} vs PyTorch {in_use}"
    );
}

/// A file that is not nvidia-smi's per-process CSV: exit 2, the file and line named.
#[test]
fn bad_nvsmi_apps_file_is_named() {
    let cap = dir("torch_ddp").join("capture.mwcap");
    let wrong = dir("torch_ddp").join("nvsmi.csv");
    let (code, _, err) = mw(&[
        "report",
        cap.to_str().unwrap(),
        "--nvsmi-apps",
        wrong.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nvsmi.csv:1: timestamp"), "{err}");
}
