//! Reading a capture's PJRT records into [`RuntimeCapture`] (salvaging damaged frames and
//! reporting them, like every capture reader).

use memwatch_wire::{
    Api, Event, FrameReader, PjrtExecutable, PjrtMemoryStats, ReadMode, Record,
};
use std::path::{Path, PathBuf};

/// Errors loading a capture.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Format {
        path: PathBuf,
        source: memwatch_wire::WireError,
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

/// Whether `e` is a PJRT event.
pub fn is_pjrt(e: &Event) -> bool {
    e.api >= 3000 && e.api_name() != Api::Unknown
}

/// Reads the PJRT records of `path`.
pub fn load_capture(path: &Path) -> Result<RuntimeCapture, RuntimeError> {
    let f = std::fs::File::open(path).map_err(|source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut r = FrameReader::new(std::io::BufReader::new(f), ReadMode::Salvage).map_err(
        |source| RuntimeError::Format {
            path: path.to_path_buf(),
            source,
        },
    )?;
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
            Err(source) => {
                return Err(RuntimeError::Format {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
    out.damage = r
        .damage()
        .iter()
        .map(|d| (d.offset, d.kind.to_string()))
        .collect();
    let o = origin.unwrap_or(0);
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
    Ok(out)
}
