//! Reading a capture's PJRT records into [`RuntimeCapture`] (salvaging damaged frames and
//! reporting them, like every capture reader).

use memwatch_wire::{Event, FrameReader, PjrtExecutable, PjrtMemoryStats, ReadMode, Record};
use std::path::{Path, PathBuf};

/// Errors loading a capture.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The file could not be read.
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    /// Not a capture, or an unsupported format version.
    #[error("{}: {err}", path.display())]
    Format {
        path: PathBuf,
        err: memwatch_wire::WireError,
    },
}

/// The PJRT part of one capture.
#[derive(Debug, Default, Clone)]
pub struct RuntimeCapture {
    pub executables: Vec<PjrtExecutable>,
    pub stats: Vec<PjrtMemoryStats>,
    /// Events with a PJRT api (3001..), in capture order.
    pub events: Vec<Event>,
    /// Damaged regions skipped while reading (offset, what).
    pub damage: Vec<(u64, String)>,
    /// CLOCK_MONOTONIC ns of the capture's start (earliest process anchor); every
    /// timestamp above is already relative to it.
    pub origin_ns: u64,
}

/// Whether `e` is a PJRT event (of an API this version knows).
pub fn is_pjrt(e: &Event) -> bool {
    e.api().is_framework()
}

/// Reads the PJRT records of `path`.
pub fn load_capture(path: &Path) -> Result<RuntimeCapture, RuntimeError> {
    let f = std::fs::File::open(path).map_err(|err| RuntimeError::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let mut r = FrameReader::new(std::io::BufReader::new(f), ReadMode::Salvage).map_err(|err| {
        RuntimeError::Format {
            path: path.to_path_buf(),
            err,
        }
    })?;
    let mut out = RuntimeCapture::default();
    let mut origin: Option<u64> = None;
    loop {
        match r.next_record() {
            Ok(Some(Record::PjrtExecutable(x))) => out.executables.push(x),
            Ok(Some(Record::PjrtMemoryStats(s))) => out.stats.push(s),
            Ok(Some(Record::Events(ev))) => out.events.extend(ev.into_iter().filter(is_pjrt)),
            Ok(Some(Record::ProcessStart(p))) => {
                origin = Some(origin.map_or(p.mono_anchor_ns, |o: u64| o.min(p.mono_anchor_ns)));
            }
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(err) => {
                return Err(RuntimeError::Format {
                    path: path.to_path_buf(),
                    err,
                })
            }
        }
    }
    out.damage = r
        .damage()
        .iter()
        .map(|d| (d.offset, d.kind.to_string()))
        .collect();
    rebase(&mut out, origin.unwrap_or(0));
    Ok(out)
}

/// The PJRT part of an already loaded capture (no second pass over the file), on the
/// same time base as [`load_capture`].
pub fn from_loaded(l: &crate::capture::Loaded) -> RuntimeCapture {
    let origin = l.processes.values().filter_map(|p| p.mono_anchor_ns).min();
    let mut out = RuntimeCapture {
        executables: l.pjrt.executables.clone(),
        stats: l.pjrt.stats.clone(),
        events: l.pjrt.events.clone(),
        damage: l
            .damage
            .iter()
            .map(|d| (d.offset, d.kind.clone()))
            .collect(),
        origin_ns: 0,
    };
    rebase(&mut out, origin.unwrap_or(0));
    out
}

fn rebase(out: &mut RuntimeCapture, o: u64) {
    out.origin_ns = o;
    for e in &mut out.events {
        e.ts_ns = e.ts_ns.saturating_sub(o);
    }
    for s in &mut out.stats {
        s.ts_ns = s.ts_ns.saturating_sub(o);
    }
    for x in &mut out.executables {
        x.ts_ns = x.ts_ns.saturating_sub(o);
    }
    out.events.sort_by_key(|e| e.ts_ns);
    out.stats.sort_by_key(|s| s.ts_ns);
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::frame::encode_preamble;
    use memwatch_wire::{encode_record, Api, EventKind, MemKind, ProcessStart};

    #[test]
    fn loads_pjrt_records_relative_to_the_capture_start() {
        let mut b = encode_preamble().to_vec();
        let recs = [
            Record::ProcessStart(ProcessStart {
                pid: 1,
                mono_anchor_ns: 1_000,
                ..ProcessStart::default()
            }),
            Record::PjrtExecutable(PjrtExecutable {
                pid: 1,
                ts_ns: 1_500,
                handle: 7,
                name: "jit_f".into(),
                ..PjrtExecutable::default()
            }),
            Record::PjrtMemoryStats(PjrtMemoryStats {
                pid: 1,
                ts_ns: 3_000,
                flags: 1,
                bytes_in_use: 5,
                ..PjrtMemoryStats::default()
            }),
            Record::Events(vec![
                Event {
                    ts_ns: 2_000,
                    pid: 1,
                    ptr: 7,
                    ..Event::new(EventKind::ApiSpan, MemKind::None, Api::PjrtExecute)
                },
                Event {
                    ts_ns: 2_100,
                    pid: 1,
                    ..Event::new(EventKind::Alloc, MemKind::None, Api::CuMemAlloc)
                },
            ]),
        ];
        for r in &recs {
            encode_record(r, &mut b).unwrap();
        }
        b.extend_from_slice(&[9, 9, 9]); // a cut-off frame: salvaged, reported
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.mwcap");
        std::fs::write(&p, &b).unwrap();
        let c = load_capture(&p).unwrap();
        assert_eq!(c.origin_ns, 1_000);
        assert_eq!(c.executables[0].ts_ns, 500);
        assert_eq!(c.stats[0].ts_ns, 2_000);
        assert_eq!(c.events.len(), 1);
        assert_eq!(c.events[0].ts_ns, 1_000);
        assert_eq!(c.damage.len(), 1);
    }

    #[test]
    fn bad_input_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.mwcap");
        std::fs::write(&p, b"not a capture at all, really").unwrap();
        let e = load_capture(&p).unwrap_err().to_string();
        assert!(e.contains("bad.mwcap") && e.contains("magic"), "{e}");
        let e = load_capture(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing"), "{e}");
    }
}
