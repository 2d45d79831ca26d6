//! `memwatch gate --capture`: device peaks of a capture file gate like module figures.

use std::process::Command;
#[path = "support/synthetic_capture.rs"]
mod synthetic_capture;
use synthetic_capture::capture;

#[test]
fn capture_peak_regression_fails_and_names_process_device() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("train.mwcap");
    let base = dir.path().join("b.toml");
    let mw = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_memwatch"))
            .args(args)
            .output()
            .unwrap()
    };
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
