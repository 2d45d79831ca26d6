//! `memwatch diagnose` on the two-GPU recordings where one device ran out
//! (`testdata/multi-gpu/{jax_uneven,torch_uneven}`: a model split 6:1 over two workers,
//! one per NVIDIA H100). The doctor must name the device, the split (each device's share
//! in the figure that shows it) and use the failing worker's own XLA dump — checked
//! against what each worker printed itself (`figures.rank<R>.json`).

mod common;

use common::{mw, repo};
use serde_json::Value;
use std::path::PathBuf;

fn dir(s: &str) -> PathBuf {
    repo("testdata/multi-gpu").join(s)
}

fn diagnose(s: &str, dumps: &[PathBuf]) -> Value {
    diagnose_with(s, &[], dumps)
}

fn diagnose_with(s: &str, more: &[&str], dumps: &[PathBuf]) -> Value {
    let mut args = vec![
        "diagnose".to_string(),
        dir(s).join("capture.mwcap").display().to_string(),
        dir(s).join("stderr.log").display().to_string(),
    ];
    for f in more {
        args.push(dir(s).join(f).display().to_string());
    }
    for d in dumps {
        args.push("--xla-dump".into());
        args.push(d.display().to_string());
    }
    args.push("--json".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = mw(&a);
    assert_eq!(code, 0, "{s}: {err}");
    serde_json::from_str(&out).unwrap()
}

fn figures(s: &str) -> Vec<Value> {
    (0..)
        .map(|r| dir(s).join(format!("figures.rank{r}.json")))
        .take_while(|p| p.is_file())
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

fn permille(part: u64, total: u64) -> u64 {
    (part * 1000 + total / 2) / total
}

/// The failing worker (the one that printed an exception) and its device, which must
/// also be the one the split gave the largest parameter share.
fn failing(figs: &[Value]) -> (&Value, u64) {
    let f = figs
        .iter()
        .find(|f| f["exception"].is_object())
        .expect("one worker failed");
    let most = figs
        .iter()
        .max_by(|a, b| {
            a["param_share"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["param_share"].as_f64().unwrap())
        })
        .unwrap();
    assert_eq!(
        f["pid"], most["pid"],
        "the heavy worker is the one that failed"
    );
    let device = f["device"]["local_hardware_id"]
        .as_u64()
        .or_else(|| f["device"]["index"].as_u64())
        .unwrap();
    (f, device)
}

fn check_split(d: &Value, figs: &[Value], own: impl Fn(&Value) -> u64) {
    let (f, device) = failing(figs);
    let v = &d["verdicts"][0];
    assert_eq!(v["failure"], true);
    assert_eq!(v["what"]["pid"], f["pid"]);
    assert_eq!(v["what"]["device"].as_u64(), Some(device));
    let total: u64 = figs.iter().map(&own).sum();
    let expect = permille(own(f), total);
    let got = v["figures"]["split_share_permille"].as_u64().unwrap();
    assert!(
        got.abs_diff(expect) <= 1,
        "share {got}‰ vs the workers' own {expect}‰"
    );
    assert_eq!(v["figures"]["split_devices"], 2);
    // The heavy worker's parameters are part of what it held.
    assert!(v["figures"]["split_device_bytes"].as_u64() >= f["param_bytes"].as_u64());
    let im = &d["imbalance"];
    assert_eq!(im["failed_share_permille"].as_u64(), Some(got));
    let rows = im["devices"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        let w = figs.iter().find(|x| x["pid"] == r["pid"]).unwrap();
        assert_eq!(r["failed"], w["pid"] == f["pid"]);
    }
    let head = d["headline"].as_str().unwrap();
    assert!(
        head.contains(&format!("Device {device} (pid {})", f["pid"])),
        "{head}"
    );
    assert!(head.contains(&format!("{}%", (got + 5) / 10)), "{head}");
}

/// JAX: the driver sees two equal preallocated pools, so the split is in the live
/// jax.Array bytes: at the failure the heavy worker held the same share of them as of its
/// allocator's bytes_in_use (its own memory_stats()), and its parameters.
#[test]
fn jax_uneven_names_the_device_and_its_share_of_live_arrays() {
    let figs = figures("jax_uneven");
    let d = diagnose("jax_uneven", &[dir("jax_uneven").join("dump")]);
    assert_eq!(d["imbalance"]["measure"], "live_arrays");
    check_split(&d, &figs, |f| {
        f["memory_stats_end"]["bytes_in_use"].as_u64().unwrap()
    });
    // The allocator's own peak per device, as each worker's memory_stats() said.
    for r in d["imbalance"]["devices"].as_array().unwrap() {
        let w = figs.iter().find(|x| x["pid"] == r["pid"]).unwrap();
        assert_eq!(
            r["allocator_peak_bytes_in_use"],
            w["memory_stats_end"]["peak_bytes_in_use"]
        );
    }
    let v = &d["verdicts"][0];
    assert_eq!(v["kind"], "execute_temp");
    assert_eq!(v["who"]["executable"], figs[0]["executable"]);
}

/// PyTorch: each rank's reserved segments; the heavy rank held the share its own
/// max_memory_reserved() says. The recording's nvidia-smi samples (with the GPU index
/// column) are read as device samples, one series per GPU.
#[test]
fn torch_uneven_names_the_device_and_its_share_of_reserved_memory() {
    let figs = figures("torch_uneven");
    let d = diagnose_with("torch_uneven", &["nvsmi.csv"], &[]);
    let samples = d["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "device_samples")
        .count();
    assert_eq!(samples, 2, "{}", d["sources"]);
    assert_eq!(d["imbalance"]["measure"], "runtime_segments");
    check_split(&d, &figs, |f| {
        f["memory_end"]["max_memory_reserved"].as_u64().unwrap()
    });
    assert_eq!(d["verdicts"][0]["kind"], "torch_fraction_limit");
}

/// Both workers compiled `jit_stage_loss`, to different sizes. The failing worker's
/// dump is used whichever way the dumps are given (a folder of per-rank dumps, or
/// --xla-dump per rank in any order); the other worker's is named as its own, not as
/// "another compilation". Given only the other worker's dump, the doctor says so and
/// asks for the failing one's.
#[test]
fn the_failing_workers_own_dump_is_used() {
    let figs = figures("jax_uneven");
    let (f, _) = failing(&figs);
    let rank_of = |w: &Value| w["rank"].as_u64().unwrap();
    let other = figs.iter().find(|w| w["pid"] != f["pid"]).unwrap();
    let own_dump = dir("jax_uneven").join(format!("dump/rank{}", rank_of(f)));
    let other_dump = dir("jax_uneven").join(format!("dump/rank{}", rank_of(other)));
    for dumps in [
        vec![dir("jax_uneven").join("dump")],
        vec![other_dump.clone(), own_dump.clone()],
        vec![own_dump.clone(), other_dump.clone()],
    ] {
        let d = diagnose("jax_uneven", &dumps);
        let v = &d["verdicts"][0];
        assert!(v["who"]["hlo_instruction"].is_string(), "{dumps:?}: {v}");
        assert!(!d["missing"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["evidence"] == "xla_dump"));
        let srcs: Vec<&Value> = d["sources"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] == "xla_dump")
            .collect();
        assert_eq!(srcs.len(), 2);
        for s in srcs {
            let path = s["path"].as_str().unwrap();
            if path.ends_with(&format!("rank{}", rank_of(f))) {
                assert!(s["note"].is_null(), "{s}");
            } else {
                let note = s["note"].as_str().unwrap();
                assert!(
                    note.contains(&format!("dump of pid {}", other["pid"])),
                    "{note}"
                );
            }
        }
    }
    let d = diagnose("jax_uneven", &[other_dump]);
    assert!(d["verdicts"][0]["who"]["hlo_instruction"].is_null());
    assert!(d["missing"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["evidence"] == "xla_dump"));
}

/// Several processes dumping into one folder (the same module ids: the last writer's file
/// stays): the other worker's modules with the failing worker's own `jit_stage_loss`
/// written over the other's. The folder is matched module by module: it is used (the
/// HLO join is kept), whatever other modules are the other worker's. Without the failing
/// worker's own module it is not used.
#[test]
fn one_folder_several_processes_dumped_into_is_matched_per_process() {
    let figs = figures("jax_uneven");
    let (f, _) = failing(&figs);
    let other = figs.iter().find(|w| w["pid"] != f["pid"]).unwrap();
    let rank = |w: &Value| w["rank"].as_u64().unwrap();
    let own = dir("jax_uneven").join(format!("dump/rank{}", rank(f)));
    let theirs = dir("jax_uneven").join(format!("dump/rank{}", rank(other)));
    let shared = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&theirs).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, shared.path().join(p.file_name().unwrap())).unwrap();
    }
    let d = diagnose("jax_uneven", &[shared.path().to_path_buf()]);
    assert!(d["verdicts"][0]["who"]["hlo_instruction"].is_null(), "{d}");
    for e in std::fs::read_dir(&own).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name.contains("jit_stage_loss") {
            std::fs::copy(&p, shared.path().join(name)).unwrap();
        }
    }
    let d = diagnose("jax_uneven", &[shared.path().to_path_buf()]);
    let v = &d["verdicts"][0];
    assert!(v["who"]["hlo_instruction"].is_string(), "{v}");
    assert!(!d["missing"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["evidence"] == "xla_dump"));
    let src = d["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "xla_dump")
        .unwrap();
    assert!(
        src["note"]
            .as_str()
            .is_none_or(|n| n.contains("another process's compilation")),
        "{src}"
    );
}

/// A folder with neither XLA modules nor per-rank dumps in it: exit 2, the folder named.
#[test]
fn a_folder_without_dumps_is_refused() {
    let cap = dir("torch_uneven").join("capture.mwcap");
    let not_a_dump = dir("torch_uneven");
    let (code, _, err) = mw(&[
        "diagnose",
        cap.to_str().unwrap(),
        "--xla-dump",
        not_a_dump.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("torch_uneven") && err.contains("no XLA modules"),
        "{err}"
    );
}
