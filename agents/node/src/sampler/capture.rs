//! amdgpu memory readings inside a `memwatch run` capture.
//!
//! Owns the sampling thread `memwatch run` starts next to its receiver: every amdgpu card
//! under the sysfs root (`$MEMWATCH_SYSFS_ROOT`, default `/sys`) is read when the run
//! starts, once per period while it runs, and once more when it stops, each reading
//! written into the capture as `device_sample` frames (VRAM and GTT apart). `memwatch
//! report` sets them next to the shim's own accounting (on an APU the shim's figures are
//! the truth: GTT usage is known not to follow `hipMalloc` there). No amdgpu card: no
//! thread, nothing written.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memwatch_wire::{encode_record, Record};

use super::sysfs::SysfsSampler;
use super::{monotonic_ns, DeviceSampler};
use crate::sink::{ConnId, FrameSink};

/// Environment variable naming another sysfs root (tests, containers that mount the
/// host's `/sys` elsewhere).
pub const SYSFS_ROOT_ENV: &str = "MEMWATCH_SYSFS_ROOT";

/// The connection id the samples are written under (the receiver numbers shim
/// connections from 1 up; the capture sink ignores it).
const SAMPLER_CONN: ConnId = ConnId(u64::MAX);

/// `$MEMWATCH_SYSFS_ROOT` or `/sys`.
pub fn sysfs_root() -> PathBuf {
    std::env::var_os(SYSFS_ROOT_ENV)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/sys"), PathBuf::from)
}

/// A running sampler; [`CaptureSampling::stop`] takes the last reading.
pub struct CaptureSampling {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn write_samples(sampler: &mut SysfsSampler, sink: &dyn FrameSink) {
    for s in sampler.sample(monotonic_ns()) {
        let record = Record::DeviceSample(s);
        let mut bytes = Vec::new();
        if encode_record(&record, &mut bytes).is_ok() {
            // A finished or failed capture refuses frames; the run reports that itself.
            let _ = sink.frame(SAMPLER_CONN, &record, &bytes);
        }
    }
}

impl CaptureSampling {
    /// Starts sampling every amdgpu card under `root` into `sink`: one reading now, then
    /// one per `period`. `None` when no card exposes memory counters.
    pub fn start(root: &Path, sink: Arc<dyn FrameSink>, period: Duration) -> Option<Self> {
        let mut sampler = SysfsSampler::new(root);
        if sampler.card_count() == 0 {
            return None;
        }
        write_samples(&mut sampler, sink.as_ref());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("memwatch-sysfs".into())
            .spawn(move || loop {
                let next = Instant::now() + period;
                while Instant::now() < next {
                    if flag.load(Ordering::Relaxed) {
                        write_samples(&mut sampler, sink.as_ref());
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20).min(period));
                }
                write_samples(&mut sampler, sink.as_ref());
            })
            .ok()?;
        Some(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Takes a last reading and waits for the thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for CaptureSampling {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::CloseReason;
    use memwatch_wire::DeviceSample;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Collect(Mutex<Vec<DeviceSample>>);

    impl FrameSink for Collect {
        fn frame(
            &self,
            _conn: ConnId,
            record: &Record,
            bytes: &[u8],
        ) -> Result<(), crate::sink::SinkError> {
            let mut r = memwatch_wire::FrameReader::new(
                std::io::Cursor::new(
                    [&memwatch_wire::frame::encode_preamble()[..], bytes].concat(),
                ),
                memwatch_wire::ReadMode::Strict,
            )
            .unwrap();
            assert_eq!(r.next_record().unwrap().as_ref(), Some(record));
            if let Record::DeviceSample(s) = record {
                self.0.lock().unwrap().push(s.clone());
            }
            Ok(())
        }
        fn closed(&self, _conn: ConnId, _reason: &CloseReason) {}
    }

    fn card(root: &Path, n: u32, files: &[(&str, u64)]) {
        let dev = root.join(format!("class/drm/card{n}/device"));
        std::fs::create_dir_all(&dev).unwrap();
        for (f, v) in files {
            std::fs::write(dev.join(f), format!("{v}\n")).unwrap();
        }
    }

    #[test]
    fn samples_at_start_while_running_and_at_stop() {
        let root = tempfile::tempdir().unwrap();
        card(
            root.path(),
            1,
            &[
                ("mem_info_vram_used", 1 << 28),
                ("mem_info_vram_total", 1 << 29),
                ("mem_info_gtt_used", 3 << 20),
                ("mem_info_gtt_total", 96 << 30),
            ],
        );
        let sink = Arc::new(Collect::default());
        let s = CaptureSampling::start(root.path(), sink.clone(), Duration::from_millis(30))
            .expect("a card");
        std::thread::sleep(Duration::from_millis(100));
        s.stop();
        let got = sink.0.lock().unwrap().clone();
        // VRAM and GTT per reading: the first, at least two periodic ones, the last.
        assert!(got.len() >= 8 && got.len() % 2 == 0, "{got:?}");
        assert!(got.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        assert_eq!((got[0].memory, got[0].total_bytes), (0, 1 << 29));
        assert_eq!((got[1].memory, got[1].used_bytes), (1, 3 << 20));
        assert!(got.iter().all(|s| s.source == "sysfs" && s.device == 0));
        // No card: nothing started.
        let empty = tempfile::tempdir().unwrap();
        assert!(CaptureSampling::start(empty.path(), sink, Duration::from_secs(1)).is_none());
    }
}
