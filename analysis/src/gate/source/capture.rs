//! Gate entries from capture files (`memwatch run --out FILE.mwcap`), through the capture
//! statistics ([`crate::capture::analyze`]): one entry per process and device, with the
//! device's allocation peak as [`Metric::Peak`].
//!
//! Keys must survive re-runs, so they never contain a pid: `<capture stem>/device<D>` when
//! the capture holds one process, `<stem>/proc<N>/device<D>` otherwise (`N` = the process's
//! position in start order, 0-based). Owns this mapping only.

use crate::capture::{self, CaptureReport};
use crate::gate::entry::{disambiguate, GateEntry};
use crate::gate::error::GateError;
use crate::gate::metric::Metric;
use std::collections::BTreeMap;
use std::path::Path;

/// Converts a capture report to gate entries named after `name` (the capture's stem).
pub fn entries_from_report(report: &CaptureReport, name: &str, origin: &Path) -> Vec<GateEntry> {
    let mut procs: Vec<_> = report.processes.iter().collect();
    procs.sort_by_key(|p| (p.start_ns.unwrap_or(u64::MAX), p.pid));
    let single = procs.len() == 1;
    let damaged_bytes: u64 = report.damage.iter().map(|d| d.bytes_lost).sum();
    let damage = (!report.damage.is_empty()).then(|| {
        format!(
            "the capture is damaged ({} stretch(es), {damaged_bytes} bytes skipped: `memwatch \
             report` lists them); allocations or frees in them are missing, so its peaks may \
             be too low or too high",
            report.damage.len()
        )
    });
    let mut out = Vec::new();
    for (i, p) in procs.iter().enumerate() {
        let dropped = (p.dropped_events > 0).then(|| {
            format!(
                "the shim dropped {} events of pid {} (its buffer was full), so the peak may \
                 be too low or too high",
                p.dropped_events, p.pid
            )
        });
        // Host-side events carry no device (-1): nothing of a device to gate.
        for d in p.devices.iter().filter(|d| d.device >= 0) {
            let key = if single {
                format!("{name}/device{}", d.device)
            } else {
                format!("{name}/proc{i}/device{}", d.device)
            };
            out.push(GateEntry {
                key,
                source: format!("capture:{}", origin.display()),
                metrics: BTreeMap::from([(Metric::Peak, d.peak_bytes)]),
                top_ops: Vec::new(),
                doubt: damage.clone().or_else(|| dropped.clone()),
            });
        }
    }
    let mut keys: Vec<String> = out.iter().map(|e| e.key.clone()).collect();
    disambiguate(&mut keys);
    for (e, k) in out.iter_mut().zip(keys) {
        e.key = k;
    }
    out
}

/// Loads a capture file and converts it; the key prefix is the file's stem.
pub fn load(path: &Path) -> Result<Vec<GateEntry>, GateError> {
    let loaded = capture::load_path(path, &mut |_| {}).map_err(|e| GateError::Input {
        path: path.to_path_buf(),
        message: format!("cannot read capture: {e}"),
    })?;
    let report = capture::analyze(loaded, &capture::ReportOptions { top: 0 });
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "capture".to_string());
    Ok(entries_from_report(&report, &name, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::*;

    fn start(pid: u32, t: u64) -> Record {
        Record::ProcessStart(ProcessStart {
            pid,
            ppid: 1,
            mono_anchor_ns: 1_000 + t,
            wall_anchor_unix_ns: 1_700_000_000_000_000_000,
            shim_version: "t".into(),
            hostname: "h".into(),
            argv: vec!["python".into()],
            pid_ns: None,
        })
    }

    fn alloc(pid: u32, t: u64, device: i32, kind: EventKind, ptr: u64, size: u64) -> Event {
        Event {
            ts_ns: 1_000 + t,
            ptr,
            size,
            pid,
            tid: 1,
            device,
            ..Event::new(
                kind,
                MemKind::Device,
                if kind == EventKind::Alloc {
                    Api::HipMalloc
                } else {
                    Api::HipFree
                },
            )
        }
    }

    fn write(path: &Path, records: &[Record]) {
        let mut w = FrameWriter::new(Vec::new()).unwrap();
        for r in records {
            w.write_record(r).unwrap();
        }
        std::fs::write(path, w.into_inner().unwrap()).unwrap();
    }

    #[test]
    fn one_entry_per_process_and_device_with_the_peak() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("train.mwcap");
        use EventKind::{Alloc, Free};
        write(
            &path,
            &[
                start(42, 0),
                Record::Events(vec![
                    alloc(42, 10, 0, Alloc, 0xa, 100),
                    alloc(42, 20, 0, Alloc, 0xb, 300),
                    alloc(42, 30, 0, Free, 0xa, 0),
                    alloc(42, 40, 1, Alloc, 0xc, 7),
                ]),
            ],
        );
        let e = load(&path).unwrap();
        let got: Vec<_> = e
            .iter()
            .map(|e| (e.key.as_str(), e.metrics[&Metric::Peak]))
            .collect();
        assert_eq!(got, [("train/device0", 400), ("train/device1", 7)]);

        write(
            &path,
            &[
                start(7, 5),
                start(9, 0),
                Record::Events(vec![
                    alloc(7, 10, 0, Alloc, 1, 5),
                    alloc(9, 10, 0, Alloc, 2, 6),
                ]),
            ],
        );
        let e = load(&path).unwrap();
        let got: Vec<_> = e
            .iter()
            .map(|e| (e.key.as_str(), e.metrics[&Metric::Peak]))
            .collect();
        assert_eq!(
            got,
            [("train/proc0/device0", 6), ("train/proc1/device0", 5)],
            "ordered by start, no pids"
        );
    }

    #[test]
    fn not_a_capture_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.mwcap");
        std::fs::write(&path, b"hello, not a capture").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(
            e.contains("x.mwcap") && e.contains("cannot read capture"),
            "{e}"
        );
    }
}
