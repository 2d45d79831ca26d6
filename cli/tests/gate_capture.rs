//! `memwatch gate --capture`: device peaks of a capture file gate like module figures.

use memwatch_wire::*;
use std::path::Path;
use std::process::Command;

fn capture(path: &Path, second_alloc: u64) {
    let start = Record::ProcessStart(ProcessStart {
        pid: 4242,
        ppid: 1,
        mono_anchor_ns: 1_000,
        wall_anchor_unix_ns: 1_700_000_000_000_000_000,
        shim_version: "test".into(),
        hostname: "h".into(),
        argv: vec!["python".into(), "train.py".into()],
    });
    let ev = |t: u64, kind: EventKind, api: Api, ptr: u64, size: u64| Event {
        ts_ns: 1_000 + t,
        ptr,
        size,
        pid: 4242,
        tid: 1,
        device: 0,
        kind: kind as u8,
        mem_kind: MemKind::Device as u8,
        api: api as u16,
        ..Event::default()
    };
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    w.write_record(&start).unwrap();
    w.write_record(&Record::Events(vec![
        ev(10, EventKind::Alloc, Api::CudaMalloc, 0x1000, 1 << 20),
        ev(20, EventKind::Alloc, Api::CudaMalloc, 0x2000, second_alloc),
        ev(30, EventKind::Free, Api::CudaFree, 0x1000, 0),
    ]))
    .unwrap();
    std::fs::write(path, w.into_inner().unwrap()).unwrap();
}

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
