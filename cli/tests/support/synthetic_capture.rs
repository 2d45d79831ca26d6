//! A one-process synthetic capture shared by the gate's CLI tests (`--capture` and
//! `--run/--db`): device 0, peak 1 MiB + `second_alloc`.

use memwatch_wire::*;
use std::path::Path;

/// Writes the capture to `path`: 1 MiB allocated, then `second_alloc` bytes, then the
/// first buffer freed, so the device peak is 1 MiB + `second_alloc`.
pub fn capture(path: &Path, second_alloc: u64) {
    let start = Record::ProcessStart(ProcessStart {
        pid: 4242,
        ppid: 1,
        mono_anchor_ns: 1_000,
        wall_anchor_unix_ns: 1_700_000_000_000_000_000,
        shim_version: "test".into(),
        hostname: "h".into(),
        argv: vec!["python".into(), "train.py".into()],
        pid_ns: None,
    });
    let ev = |t: u64, kind: EventKind, api: Api, ptr: u64, size: u64| Event {
        ts_ns: 1_000 + t,
        ptr,
        size,
        pid: 4242,
        tid: 1,
        device: 0,
        ..Event::new(kind, MemKind::Device, api)
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
