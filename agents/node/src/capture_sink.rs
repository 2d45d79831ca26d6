//! A [`FrameSink`] that writes every connection's frames into one `.mwcap` file.
//!
//! Owns the capture file: the preamble once, then frames exactly as received, each frame
//! written whole under one lock (frames are self-describing by pid, so interleaving
//! connections is fine), synced as it grows (`crate::early_sync`) and once more at its
//! end. It does not decode, reorder or filter. An observer
//! ([`CaptureFileSink::observe`]) may be shown every frame written, in file order (`memwatch
//! run` folds the capture as it is written).

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use memwatch_wire::{FrameWriter, Record};

use crate::early_sync::EarlySync;
use crate::out_pipe::{self, OutFile};
use crate::sink::{CloseReason, ConnId, FrameSink, SinkError};
use crate::AgentError;

/// Totals of what a [`CaptureFileSink`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Frames written (all types).
    pub frames: u64,
    /// Events inside the events frames.
    pub events: u64,
    /// Processes seen (process_start frames).
    pub processes: u64,
    /// File size in bytes, preamble included.
    pub bytes: u64,
}

/// Shown each frame written: its record and wire bytes (see [`FrameSink::frame`]).
pub type FrameObserver = Box<dyn FnMut(&Record, &[u8]) + Send>;

struct Inner {
    writer: Option<FrameWriter<BufWriter<OutFile>>>,
    /// Syncs what was written so far as the file grows (a regular file only).
    early_sync: Option<EarlySync>,
    failed: Option<String>,
    stats: CaptureStats,
    observer: Option<FrameObserver>,
}

/// Writes one capture file; share it as `Arc<CaptureFileSink>` with a receiver.
pub struct CaptureFileSink {
    path: PathBuf,
    inner: Mutex<Inner>,
}

impl CaptureFileSink {
    /// Creates (truncates) `path` and writes the preamble. A FIFO or device is opened and
    /// written without waiting on its reader beyond `out_pipe`'s bounds.
    pub fn create(path: &Path) -> Result<Self, AgentError> {
        let file = out_pipe::open(path, true).map_err(|error| AgentError::Io {
            what: "cannot create capture file",
            path: path.to_path_buf(),
            error,
        })?;
        let early_sync = file
            .is_regular()
            .then(|| file.file().try_clone().ok().and_then(EarlySync::start))
            .flatten();
        let writer =
            FrameWriter::new(BufWriter::with_capacity(1 << 20, file)).map_err(|error| {
                AgentError::Wire {
                    path: path.to_path_buf(),
                    error,
                }
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            inner: Mutex::new(Inner {
                writer: Some(writer),
                early_sync,
                failed: None,
                stats: CaptureStats {
                    bytes: memwatch_wire::PREAMBLE_LEN as u64,
                    ..CaptureStats::default()
                },
                observer: None,
            }),
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Shows `observer` every frame written from now on, in file order, right after it
    /// is written (under the writer's lock: keep it quick). [`Self::finish`], or a
    /// write error, drops it.
    pub fn observe(&self, observer: FrameObserver) {
        self.lock().observer = Some(observer);
    }

    /// What was written so far.
    pub fn stats(&self) -> CaptureStats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the writer usable (frames are written
        // whole or the error is recorded), so a poisoned lock is still safe to use.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Flushes and syncs the file; later frames are refused. Returns the totals, or the
    /// first write error.
    pub fn finish(&self) -> Result<CaptureStats, AgentError> {
        let mut inner = self.lock();
        // Nothing more will be written: the observer learns it first (it is dropped).
        inner.observer = None;
        if let Some(why) = &inner.failed {
            return Err(AgentError::Sink {
                path: self.path.clone(),
                message: why.clone(),
            });
        }
        if let Some(early) = inner.early_sync.take() {
            early.finish().map_err(|error| AgentError::Io {
                what: "cannot sync capture file",
                path: self.path.clone(),
                error,
            })?;
        }
        if let Some(writer) = inner.writer.take() {
            let buf = writer.into_inner().map_err(|error| AgentError::Wire {
                path: self.path.clone(),
                error,
            })?;
            let file = buf.into_inner().map_err(|e| AgentError::Io {
                what: "cannot flush capture file",
                path: self.path.clone(),
                error: e.into_error(),
            })?;
            // Only regular files can be synced; a capture sent to /dev/null or a pipe has
            // nothing to make durable (fsync says EINVAL there).
            if file.is_regular() {
                file.file().sync_all().map_err(|error| AgentError::Io {
                    what: "cannot sync capture file",
                    path: self.path.clone(),
                    error,
                })?;
            }
        }
        Ok(inner.stats)
    }
}

impl FrameSink for CaptureFileSink {
    fn frame(&self, _conn: ConnId, record: &Record, bytes: &[u8]) -> Result<(), SinkError> {
        let mut inner = self.lock();
        if let Some(why) = &inner.failed {
            return Err(SinkError(why.clone()));
        }
        let Some(writer) = inner.writer.as_mut() else {
            return Err(SinkError(format!(
                "capture file {} is already finished",
                self.path.display()
            )));
        };
        if let Err(e) = writer.write_raw_frames(bytes) {
            let why = format!("cannot write capture file {}: {e}", self.path.display());
            inner.failed = Some(why.clone());
            inner.observer = None;
            return Err(SinkError(why));
        }
        if let Some(early) = &inner.early_sync {
            early.wrote(bytes.len() as u64);
        }
        if let Some(observe) = inner.observer.as_mut() {
            observe(record, bytes);
        }
        inner.stats.bytes += bytes.len() as u64;
        inner.stats.frames += 1;
        match record {
            Record::Events(events) => inner.stats.events += events.len() as u64,
            Record::ProcessStart(_) => inner.stats.processes += 1,
            _ => {}
        }
        Ok(())
    }

    fn closed(&self, _conn: ConnId, _reason: &CloseReason) {
        // Push what this process sent to the file now: a crash of memwatch itself later
        // then loses nothing that a closed connection delivered.
        let mut inner = self.lock();
        if let Some(writer) = inner.writer.as_mut() {
            if let Err(e) = writer.flush() {
                inner.failed = Some(format!(
                    "cannot write capture file {}: {e}",
                    self.path.display()
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memwatch_wire::{encode_record, FrameReader, Marker, ReadMode};

    fn marker(i: u32) -> (Record, Vec<u8>) {
        let r = Record::Marker(Marker {
            pid: 1,
            tid: i,
            ts_ns: u64::from(i),
            device: 0,
            text: format!("m{i}"),
        });
        let mut b = Vec::new();
        encode_record(&r, &mut b).expect("encodes");
        (r, b)
    }

    #[test]
    fn the_observer_sees_every_frame_written_in_file_order_until_finish() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("c.mwcap");
        let sink = CaptureFileSink::create(&path).expect("created");
        let (first, b) = marker(0);
        sink.frame(ConnId(1), &first, &b).expect("written");
        let (tx, rx) = std::sync::mpsc::channel();
        sink.observe(Box::new(move |r, bytes| {
            let _ = tx.send((r.clone(), bytes.len()));
        }));
        for i in 1..=3 {
            let (r, b) = marker(i);
            sink.frame(ConnId(i as u64), &r, &b).expect("written");
        }
        sink.finish().expect("finished");
        // The sender went with the observer: the channel ends.
        let seen: Vec<(Record, usize)> = rx.iter().collect();
        let mut read = FrameReader::new(
            std::fs::File::open(&path).expect("written"),
            ReadMode::Strict,
        )
        .expect("a capture");
        let mut in_file = Vec::new();
        while let Some(r) = read.next_record().expect("intact") {
            in_file.push(r);
        }
        assert_eq!(in_file.len(), 4);
        let seen_records: Vec<Record> = seen.iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(seen_records, in_file[1..].to_vec());
        assert!(seen.iter().all(|(_, n)| *n == b.len()));
    }
}
