//! `memwatch gate --capture`: device peaks of a capture file gate like module figures.

mod common;

use common::run_memwatch as mw;
#[path = "support/synthetic_capture.rs"]
mod synthetic_capture;
use synthetic_capture::capture;

#[test]
fn capture_peak_regression_fails_and_names_process_device() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("train.mwcap");
    let base = dir.path().join("b.toml");
    let (b, c) = (base.to_str().unwrap(), cap.to_str().unwrap());
    capture(&cap, 1 << 20);
    let out = mw(&["gate", "--baseline", b, "--capture", c, "--update"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&base).unwrap();
    assert!(
        text.contains("[entries.\"train/device0\"]\npeak = 2097152\n"),
        "{text}"
    );
    capture(&cap, 8 << 20);
    let out = mw(&[
        "gate",
        "--baseline",
        b,
        "--capture",
        c,
        "--max-increase-bytes",
        "1MiB",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &r["entries"][0];
    assert_eq!(e["key"], "train/device0");
    assert_eq!(e["status"], "regressed");
    assert_eq!(e["metrics"][0]["metric"], "peak");
    assert_eq!(e["metrics"][0]["delta_bytes"], 7 << 20);
}

/// A baseline metric the inputs no longer measure (a capture gives `peak` only; the
/// baseline also gates `temp`) must not pass as if it were fine: exit 2 naming metric and
/// entry; --allow-missing reports it as `incomplete`; --ratchet keeps the unmeasured
/// figure and the unmeasured entry instead of dropping them.
#[test]
fn a_gated_metric_that_was_not_measured_is_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("train.mwcap");
    let base = dir.path().join("b.toml");
    let (b, c) = (base.to_str().unwrap(), cap.to_str().unwrap());
    capture(&cap, 1 << 20);
    let written = "version = 1\n\n[entries.\"train/device0\"]\npeak = 4194304\ntemp = 1000\n\n\
                   [entries.\"gone/device0\"]\npeak = 5\n";
    std::fs::write(&base, written).unwrap();

    let out = mw(&["gate", "--baseline", b, "--capture", c]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("b.toml")
            && err.contains("1 baseline entry was not measured: gone/device0")
            && err
                .contains("1 gated metric of the baseline was not measured: temp of train/device0"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no report on bad input");

    let out = mw(&[
        "gate",
        "--baseline",
        b,
        "--capture",
        c,
        "--allow-missing",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["summary"]["incomplete"], 1);
    let e = r["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == "train/device0")
        .unwrap();
    assert_eq!(e["status"], "incomplete");
    let temp = e["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["metric"] == "temp")
        .unwrap();
    assert_eq!(temp["unmeasured"], true);
    assert_eq!(temp["current_bytes"], serde_json::Value::Null);
    let out = mw(&["gate", "--baseline", b, "--capture", c, "--allow-missing"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("incomplete")
            && text.contains("not measured")
            && text.contains("Temp not measured (baseline 1000 B)")
            && text.contains("1 incomplete"),
        "{text}"
    );
    let out = mw(&[
        "gate",
        "--baseline",
        b,
        "--capture",
        c,
        "--allow-missing",
        "--format",
        "junit",
    ]);
    let xml = String::from_utf8_lossy(&out.stdout);
    assert!(
        xml.contains("errors=\"1\"") && xml.contains("MetricNotMeasured"),
        "{xml}"
    );

    // --ratchet without --allow-missing refuses and leaves the baseline as it was.
    let out = mw(&["gate", "--baseline", b, "--capture", c, "--ratchet"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&base).unwrap(), written);
    // With it, the lower peak is locked in and nothing unmeasured is dropped.
    let out = mw(&[
        "gate",
        "--baseline",
        b,
        "--capture",
        c,
        "--ratchet",
        "--allow-missing",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&base).unwrap();
    assert!(
        text.contains("[entries.\"train/device0\"]\npeak = 2097152\ntemp = 1000\n")
            && text.contains("[entries.\"gone/device0\"]\npeak = 5\n"),
        "{text}"
    );
    // --update records what was measured: temp and the gone entry are dropped.
    let out = mw(&["gate", "--baseline", b, "--capture", c, "--update"]);
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&base).unwrap();
    assert!(!text.contains("temp") && !text.contains("gone"), "{text}");
}

/// A damaged capture is never judged: exit 2 naming the damage (before: "improved" with
/// a peak 208 MiB too low, exit 0), `incomplete` with --allow-missing, and neither
/// --ratchet nor --update writes its figures into the baseline.
#[test]
fn a_damaged_capture_is_not_judged_and_never_lowers_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/h200-captures/jax0.11.2-platform-allocator.mwcap"
    );
    let mut bytes = std::fs::read(src).unwrap();
    let good = dir.path().join("good/job.mwcap");
    let bad = dir.path().join("bad/job.mwcap");
    std::fs::create_dir_all(good.parent().unwrap()).unwrap();
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&good, &bytes).unwrap();
    let mid = bytes.len() / 4;
    bytes[mid] ^= 0xff;
    std::fs::write(&bad, &bytes).unwrap();
    let base = dir.path().join("b.toml");
    let (b, g, d) = (
        base.to_str().unwrap(),
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
    );
    assert!(mw(&["gate", "--baseline", b, "--capture", g, "--update"])
        .status
        .success());
    let written = std::fs::read_to_string(&base).unwrap();
    let out = mw(&["gate", "--baseline", b, "--capture", d]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("could not be judged") && err.contains("damaged"),
        "{err}"
    );
    let out = mw(&[
        "gate",
        "--baseline",
        b,
        "--capture",
        d,
        "--allow-missing",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["entries"][0]["status"], "incomplete");
    assert!(r["entries"][0]["doubt"]
        .as_str()
        .unwrap()
        .contains("damaged"));
    let out = mw(&[
        "gate",
        "--baseline",
        b,
        "--capture",
        d,
        "--ratchet",
        "--allow-missing",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&base).unwrap(), written);
    // --update refuses the damaged figures (before: wrote a peak 74 MiB too low, exit 0);
    // with --allow-missing it keeps the baseline's own figures for them.
    let out = mw(&["gate", "--baseline", b, "--capture", d, "--update"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("not updated") && err.contains("damaged"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&base).unwrap(), written);
    let out = mw(&[
        "gate",
        "--baseline",
        b,
        "--capture",
        d,
        "--update",
        "--allow-missing",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&base).unwrap(), written);
}
