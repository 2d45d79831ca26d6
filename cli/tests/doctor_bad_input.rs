//! `memwatch diagnose` on bad or partial evidence: a log in a format memwatch does not
//! know, a dump from another run, a capture cut off by the crash, a log alone, binary
//! garbage, a PyTorch snapshot cut short. It gives the verdicts the evidence supports, names what
//! is missing and what it would add, and never a made-up figure; unreadable input exits 2
//! with one line naming the file.

mod common;

use common::{mw, repo};
use serde_json::Value;

fn corpus(s: &str, f: &str) -> String {
    repo(&format!("testdata/oom-corpus/{s}/{f}"))
        .display()
        .to_string()
}

fn diagnose(args: &[&str]) -> Value {
    let mut a = vec!["diagnose"];
    a.extend_from_slice(args);
    a.push("--json");
    let (code, out, err) = mw(&a);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn missing(d: &Value) -> Vec<String> {
    d["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["evidence"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_unknown_log_is_said_and_the_capture_still_answers() {
    let hlo = repo("testdata/h200/seeds/pad-spmd-sample.hlo.txt");
    let d = diagnose(&[
        &corpus("jax_co_resident", "capture.mwcap"),
        hlo.to_str().unwrap(),
    ]);
    assert_eq!(d["verdicts"][0]["kind"], "co_resident", "{d}");
    let note = d["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "log")
        .unwrap()["note"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(note.contains("nothing memwatch knows"), "{note}");
    assert!(missing(&d).contains(&"log".to_string()));
}

#[test]
fn a_dump_of_another_run_is_not_used() {
    let d = diagnose(&[
        &corpus("jax_exec_temp", "capture.mwcap"),
        &corpus("jax_exec_temp", "stderr.log"),
        "--xla-dump",
        &corpus("jax_scan_temp", "dump"),
    ]);
    let v = &d["verdicts"][0];
    assert_eq!(v["kind"], "execute_temp");
    // No HLO instruction from a dump of another program.
    assert!(v["who"]["hlo_instruction"].is_null(), "{v}");
    let note = d["sources"][2]["note"].as_str().unwrap();
    assert!(note.contains("another compilation"), "{note}");
    assert!(missing(&d).contains(&"xla_dump".to_string()));
    // The same run's own dump names it.
    let d = diagnose(&[
        &corpus("jax_exec_temp", "capture.mwcap"),
        &corpus("jax_exec_temp", "stderr.log"),
        "--xla-dump",
        &corpus("jax_exec_temp", "dump"),
    ]);
    assert!(
        d["verdicts"][0]["who"]["hlo_instruction"].is_string(),
        "{d}"
    );
}

/// A capture cut off by the crash: the verdict uses what was read, says the capture
/// stops before the failure, and every figure is one the whole capture also supports
/// (counted up to the cut, never more).
#[test]
fn a_capture_cut_off_gives_figures_up_to_the_cut() {
    let whole = std::fs::read(corpus("jax_leak_bfc", "capture.mwcap")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let full = diagnose(&[
        &corpus("jax_leak_bfc", "capture.mwcap"),
        &corpus("jax_leak_bfc", "stderr.log"),
    ]);
    for pct in [30, 60, 90] {
        let cut = tmp.path().join(format!("cut{pct}.mwcap"));
        std::fs::write(&cut, &whole[..whole.len() * pct / 100]).unwrap();
        let d = diagnose(&[cut.to_str().unwrap(), &corpus("jax_leak_bfc", "stderr.log")]);
        let v = &d["verdicts"][0];
        assert_eq!(v["kind"], "leak", "{pct}%: {d}");
        let fv = &full["verdicts"][0]["figures"];
        for k in ["steps", "leaked_bytes"] {
            assert!(
                v["figures"][k].as_u64().unwrap() <= fv[k].as_u64().unwrap(),
                "{pct}% {k}"
            );
        }
        assert_eq!(
            v["figures"]["growth_per_step_bytes"],
            fv["growth_per_step_bytes"]
        );
        let m = missing(&d);
        assert!(
            m.iter().any(|e| e.starts_with("capture (")),
            "{pct}%: {m:?}"
        );
        assert!(d["sources"][0]["note"]
            .as_str()
            .unwrap()
            .contains("damaged"));
    }
}

/// The log alone: what the framework's message proves, and the capture named as missing.
/// A BFC report without a chunk dump or pool size gives no kind it cannot prove.
#[test]
fn a_log_alone() {
    let d = diagnose(&[&corpus("torch_fraction", "stderr.log")]);
    assert_eq!(d["verdicts"][0]["kind"], "torch_fraction_limit");
    assert!(missing(&d).contains(&"capture".to_string()));
    let d = diagnose(&[&corpus("jax_leak_bfc", "stderr.log")]);
    let v = &d["verdicts"][0];
    assert_eq!(v["kind"], "unexplained", "{v}");
    // The request is the log's exact rounded size; no pool or in-use figure is invented.
    assert_eq!(v["figures"]["request_bytes"], 256);
    assert!(v["figures"]["pool_bytes"].is_null() && v["figures"]["in_use_bytes"].is_null());
    assert!(missing(&d).contains(&"capture".to_string()));
    // A log with nothing memwatch knows, alone: no verdict, said.
    let hlo = repo("testdata/h200/seeds/pad-spmd-sample.hlo.txt");
    let d = diagnose(&[hlo.to_str().unwrap()]);
    assert!(d["verdicts"].as_array().unwrap().is_empty());
    assert_eq!(d["failed"], false);
}

fn exit2(args: &[&str], needle: &str) {
    let (code, out, err) = mw(args);
    assert_eq!(code, 2, "stdout {out} stderr {err}");
    assert!(err.contains(needle), "{err:?} lacks {needle:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn unreadable_inputs_exit_2_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let g = tmp.path().join("garbage.log");
    std::fs::write(&g, b"\x00\x01\x02\xff\xfe").unwrap();
    exit2(&["diagnose", g.to_str().unwrap()], "garbage.log:1:");
    // A snapshot cut short (the program died while writing it).
    let snap = std::fs::read(corpus("torch_leak", "snapshot.pickle")).unwrap();
    let cut = tmp.path().join("cut.pickle");
    std::fs::write(&cut, &snap[..snap.len() / 2]).unwrap();
    exit2(
        &["diagnose", cut.to_str().unwrap()],
        "cut.pickle: not a readable pickle",
    );
    exit2(
        &[
            "diagnose",
            &corpus("torch_leak", "capture.mwcap"),
            &corpus("torch_fraction", "capture.mwcap"),
        ],
        "a second capture",
    );
    exit2(&["diagnose", "/nonexistent/x.log"], "/nonexistent/x.log");
    let bad = tmp.path().join("nvsmi.csv");
    std::fs::write(
        &bad,
        "2026/11/25 18:10:49.669, 0, 81559\n2026/11/25 18:10:49.769, x, 81559\n",
    )
    .unwrap();
    exit2(&["diagnose", bad.to_str().unwrap()], "nvsmi.csv:2:");
    exit2(
        &[
            "diagnose",
            &corpus("torch_leak", "stderr.log"),
            "--xla-dump",
            "/nonexistent/dump",
        ],
        "/nonexistent/dump",
    );
}

/// Logs written from ROCm's own formats (not recorded on an AMD GPU) are diagnosed like
/// CUDA ones.
#[test]
fn rocm_logs() {
    let d = diagnose(&[repo("testdata/rocm-written/torch-mi300x-oom.log")
        .to_str()
        .unwrap()]);
    let v = &d["verdicts"][0];
    assert_eq!(v["kind"], "fragmentation");
    assert!(v["fix"]["advice"]
        .as_str()
        .unwrap()
        .contains("PYTORCH_HIP_ALLOC_CONF"));
    let d = diagnose(&[repo("testdata/rocm-written/jax-mi300x-execute-oom.log")
        .to_str()
        .unwrap()]);
    let v = &d["verdicts"][0];
    assert_eq!(v["kind"], "execute_temp");
    assert_eq!(v["who"]["executable"], "jit_train_step");
    assert_eq!(v["figures"]["pool_bytes"], 154367164416u64);
}
