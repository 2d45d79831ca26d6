//! The device sampling thread of the `memwatch` process (`run`, `attach`, `agent`): every
//! period, and at once when a failure arrives ([`Trigger::fire`]), each
//! [`DeviceReader`] reads its devices and their processes, and each device becomes one
//! `device_reading` frame (the watched tree's pids marked, see [`Watch`]) written to a
//! [`ReadingOut`]. Stopping wakes the thread at once: it never waits out a period.
//!
//! The shim is not involved: sampling happens outside the watched program.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memwatch_wire::{encode_record, DeviceReading, ProcessUse, Record};

use super::reader::{DeviceRead, DeviceReader};
use super::watch::Watch;
use crate::sink::{ConnId, FrameSink};

/// Where readings go: a capture file, the forwarder.
pub trait ReadingOut: Send {
    /// Takes one encoded `device_reading` frame; an error stops nothing (the caller
    /// reports failures of its own sink).
    fn write(&mut self, record: &Record, bytes: &[u8]);
}

/// The connection id readings are written under into a [`FrameSink`] (shim connections
/// are numbered from 1 up; the capture sink ignores it).
pub const SAMPLER_CONN: ConnId = ConnId(u64::MAX - 1);

/// A [`FrameSink`] as a [`ReadingOut`].
pub struct SinkOut(pub Arc<dyn FrameSink>);

impl ReadingOut for SinkOut {
    fn write(&mut self, record: &Record, bytes: &[u8]) {
        // A finished or failed capture refuses frames; the run reports that itself.
        let _ = self.0.frame(SAMPLER_CONN, record, bytes);
    }
}

#[derive(Default)]
struct State {
    stop: bool,
    /// Failures seen since the last reading.
    failures: u64,
    /// Set once the readers are known: `Some(None)` some were found, `Some(Some(why))`
    /// none (why each library was left out).
    off: Option<Option<String>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Asks the sampler for a reading now (a failed allocation arrived).
#[derive(Clone)]
pub struct Trigger(Arc<Shared>);

impl Trigger {
    pub fn fire(&self) {
        self.0.lock().failures += 1;
        self.0.wake.notify_one();
    }
}

/// What the thread did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SamplingStats {
    /// Rounds read (each reads every device once).
    pub rounds: u64,
    /// Of those, rounds taken because a failure arrived.
    pub failure_rounds: u64,
    /// `device_reading` frames written.
    pub readings: u64,
}

/// A running sampler.
pub struct Sampling {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<SamplingStats>>,
}

/// One device read as its frame's record.
pub fn reading_record(
    source: &str,
    d: DeviceRead,
    watched: &mut dyn FnMut(u32) -> bool,
) -> DeviceReading {
    let mut flags = 0;
    let processes = match d.processes {
        Some(ps) => {
            flags |= DeviceReading::PROCESSES;
            ps.into_iter()
                .map(|p| ProcessUse {
                    pid: p.pid,
                    flags: if watched(p.pid) {
                        ProcessUse::WATCHED
                    } else {
                        0
                    } | if p.used_bytes.is_some() {
                        ProcessUse::BYTES_KNOWN
                    } else {
                        0
                    },
                    used_bytes: p.used_bytes.unwrap_or(0),
                })
                .collect()
        }
        None => Vec::new(),
    };
    // The identity in its one form, so every record of the device compares equal.
    let id = memwatch_wire::DeviceIdentity::new(&d.uuid, &d.pci_bus_id);
    DeviceReading {
        ts_ns: d.ts_ns,
        device: d.device,
        vendor: d.vendor.code(),
        flags,
        used_bytes: d.used_bytes,
        total_bytes: d.total_bytes,
        source: source.to_string(),
        uuid: id.uuid,
        pci_bus_id: id.pci_bus_id,
        processes,
    }
}

/// Reads every device once and writes the frames; the number written.
fn round(
    readers: &mut [Box<dyn DeviceReader>],
    watch: &Watch,
    out: &mut dyn ReadingOut,
    at_failure: bool,
) -> u64 {
    let mut written = 0;
    let mut tree = watch.resolver();
    for r in readers.iter_mut() {
        let source = r.source();
        for d in r.read() {
            let mut reading = reading_record(source, d, &mut |pid| tree.contains(pid));
            if at_failure {
                reading.flags |= DeviceReading::AT_FAILURE;
            }
            let record = Record::DeviceReading(reading);
            let mut bytes = Vec::new();
            if encode_record(&record, &mut bytes).is_ok() {
                out.write(&record, &bytes);
                written += 1;
            }
        }
    }
    written
}

impl Sampling {
    /// Starts reading every `period` (the first round at once) until [`Sampling::stop`].
    /// `None` without readers, or when the thread cannot start.
    pub fn start(
        readers: Vec<Box<dyn DeviceReader>>,
        watch: Watch,
        out: Box<dyn ReadingOut>,
        period: Duration,
    ) -> Option<Self> {
        if readers.is_empty() {
            return None;
        }
        Self::detecting(move || (readers, Vec::new()), watch, out, period)
    }

    /// [`Sampling::start`] with the readers found on the thread itself by `detect`
    /// (loading NVML can take a while: the caller goes on meanwhile); without readers
    /// the thread ends and [`Sampling::off`] says why. `None` when the thread cannot
    /// start.
    pub fn detecting(
        detect: impl FnOnce() -> (Vec<Box<dyn DeviceReader>>, Vec<String>) + Send + 'static,
        watch: Watch,
        mut out: Box<dyn ReadingOut>,
        period: Duration,
    ) -> Option<Self> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("memwatch-sampler".into())
            .spawn(move || {
                let mut stats = SamplingStats::default();
                let (mut readers, why) = detect();
                s.lock().off = Some(readers.is_empty().then(|| why.join("; ")));
                s.wake.notify_all();
                if readers.is_empty() {
                    return stats;
                }
                let mut next = Instant::now();
                loop {
                    let at_failure = {
                        let mut st = s.lock();
                        loop {
                            if st.stop {
                                return stats;
                            }
                            if st.failures > 0 {
                                st.failures = 0;
                                break true;
                            }
                            let now = Instant::now();
                            if now >= next {
                                break false;
                            }
                            st = s
                                .wake
                                .wait_timeout(st, next - now)
                                .unwrap_or_else(|p| p.into_inner())
                                .0;
                        }
                    };
                    stats.readings += round(&mut readers, &watch, out.as_mut(), at_failure);
                    stats.rounds += 1;
                    if at_failure {
                        stats.failure_rounds += 1;
                    } else {
                        // The period's grid. A round that ended past its successor's time
                        // (a read held up in the driver) is followed at once, and the grid
                        // goes on from there: waiting a whole period more would double
                        // the gap between two readings.
                        next += period;
                        let now = Instant::now();
                        if next <= now {
                            next = now;
                        }
                    }
                }
            })
            .ok()?;
        Some(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Why there are no readers (`None`: there are); waits for the detection to end.
    pub fn off(&self) -> Option<String> {
        let mut st = self.shared.lock();
        loop {
            if let Some(off) = &st.off {
                return off.clone();
            }
            if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return Some("the sampler ended before finding its devices".into());
            }
            st = self
                .shared
                .wake
                .wait_timeout(st, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// What fires a reading now.
    pub fn trigger(&self) -> Trigger {
        Trigger(self.shared.clone())
    }

    /// Stops the thread (woken at once, a round in progress finishes) and says what it
    /// did.
    pub fn stop(mut self) -> SamplingStats {
        self.halt()
    }

    fn halt(&mut self) -> SamplingStats {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampling {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::failure_tap::FailureTap;
    use crate::sampler::monotonic_ns;
    use crate::sampler::reader::ProcessRead;
    use crate::sink::{CloseReason, SinkError};
    use memwatch_wire::{Event, EventKind, MemKind, Vendor};
    use std::sync::mpsc;

    /// A device library with two devices: device 0 with this test process and pid 1 on
    /// it, device 1 whose process list cannot be read. Each read grows device 0's use.
    struct TwoDevices {
        reads: u64,
    }

    impl DeviceReader for TwoDevices {
        fn source(&self) -> &'static str {
            "test"
        }
        fn infos(&self) -> Vec<memwatch_wire::DeviceInfo> {
            Vec::new()
        }
        fn read(&mut self) -> Vec<DeviceRead> {
            self.reads += 1;
            let me = std::process::id();
            vec![
                DeviceRead {
                    device: 0,
                    vendor: Vendor::Nvidia,
                    ts_ns: monotonic_ns(),
                    used_bytes: (10 + self.reads) << 20,
                    total_bytes: 80 << 30,
                    uuid: "GPU-a".into(),
                    pci_bus_id: "00000000:01:00.0".into(),
                    processes: Some(vec![
                        ProcessRead {
                            pid: me,
                            used_bytes: Some(self.reads << 20),
                        },
                        ProcessRead {
                            pid: 1,
                            used_bytes: None,
                        },
                    ]),
                },
                DeviceRead {
                    device: 1,
                    vendor: Vendor::Nvidia,
                    ts_ns: monotonic_ns(),
                    used_bytes: 1 << 20,
                    total_bytes: 80 << 30,
                    uuid: "GPU-b".into(),
                    pci_bus_id: String::new(),
                    processes: None,
                },
            ]
        }
    }

    /// Collects readings, decoded back from their frame bytes.
    struct Collect(mpsc::Sender<DeviceReading>);

    impl ReadingOut for Collect {
        fn write(&mut self, record: &Record, bytes: &[u8]) {
            let payload = &bytes[5..bytes.len() - 4];
            let back = memwatch_wire::frame::decode_payload(bytes[4], payload).unwrap();
            assert_eq!(&back, record);
            if let Record::DeviceReading(r) = back {
                let _ = self.0.send(r);
            }
        }
    }

    fn start(period: Duration) -> (Sampling, mpsc::Receiver<DeviceReading>) {
        let (tx, rx) = mpsc::channel();
        let watch = Watch::new();
        watch.add_root(std::process::id());
        let s = Sampling::start(
            vec![Box::new(TwoDevices { reads: 0 })],
            watch,
            Box::new(Collect(tx)),
            period,
        )
        .expect("a reader");
        (s, rx)
    }

    fn next(rx: &mpsc::Receiver<DeviceReading>) -> DeviceReading {
        rx.recv_timeout(Duration::from_secs(60))
            .expect("a reading (none came within a minute)")
    }

    #[test]
    fn periodic_rounds_one_frame_per_device_in_time_order_with_the_tree_marked() {
        let (s, rx) = start(Duration::from_millis(2));
        let got: Vec<DeviceReading> = (0..8).map(|_| next(&rx)).collect();
        let stats = s.stop();
        assert!(stats.rounds >= 4 && stats.failure_rounds == 0, "{stats:?}");
        assert_eq!(stats.readings, 2 * stats.rounds);
        // Devices alternate 0, 1 within each round; times never go back.
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, r)| r.device == (i % 2) as i32));
        assert!(got.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        for r in got.iter().filter(|r| r.device == 0) {
            let list = r.process_list().expect("processes read");
            assert_eq!(list.len(), 2);
            assert!(list[0].watched() && list[0].bytes().is_some());
            // pid 1 is outside the tree; its bytes were not available.
            assert!(!list[1].watched() && list[1].bytes().is_none());
            assert_eq!(r.watched_bytes(), list[0].bytes());
            assert_eq!((r.uuid.as_str(), r.source.as_str()), ("GPU-a", "test"));
        }
        // Device 1's process list was not read: unknown, not empty.
        for r in got.iter().filter(|r| r.device == 1) {
            assert_eq!(r.process_list(), None);
            assert_eq!(r.watched_bytes(), None);
        }
    }

    /// A failure fires a round at once, flagged, however long the period; stopping
    /// wakes the thread at once too (a test that waited out the hour would not end).
    #[test]
    fn a_failure_reads_at_once_and_stop_does_not_wait_for_the_period() {
        let (s, rx) = start(Duration::from_secs(3600));
        // The first round is taken at the start.
        assert!(!next(&rx).at_failure());
        assert!(!next(&rx).at_failure());
        // A frame with a failed allocation, through the tap in front of the sink.
        struct Nothing;
        impl FrameSink for Nothing {
            fn frame(&self, _: ConnId, _: &Record, _: &[u8]) -> Result<(), SinkError> {
                Ok(())
            }
            fn closed(&self, _: ConnId, _: &CloseReason) {}
        }
        let tap = FailureTap::new(Arc::new(Nothing), Some(s.trigger()));
        let ok = Event::new(
            EventKind::Alloc,
            MemKind::Device,
            memwatch_wire::Api::CuMemAlloc,
        );
        let failed = Event {
            result: 2,
            ..Event::new(
                EventKind::AllocFailed,
                MemKind::Device,
                memwatch_wire::Api::CuMemAlloc,
            )
        };
        tap.frame(ConnId(1), &Record::Events(vec![ok]), &[])
            .unwrap();
        assert!(
            rx.try_recv().is_err(),
            "a successful allocation fires nothing"
        );
        tap.frame(ConnId(1), &Record::Events(vec![ok, failed]), &[])
            .unwrap();
        let r = next(&rx);
        assert!(r.at_failure() && r.device == 0, "{r:?}");
        assert!(next(&rx).at_failure());
        let (done, stopped) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(s.stop());
        });
        let stats = stopped
            .recv_timeout(Duration::from_secs(60))
            .expect("stop returned without waiting for the period");
        assert_eq!((stats.rounds, stats.failure_rounds), (2, 1));
    }

    #[test]
    fn readers_found_on_the_thread_or_why_none() {
        let (tx, rx) = mpsc::channel();
        let s = Sampling::detecting(
            || {
                (
                    vec![Box::new(TwoDevices { reads: 0 }) as Box<dyn DeviceReader>],
                    Vec::new(),
                )
            },
            Watch::new(),
            Box::new(Collect(tx)),
            Duration::from_secs(3600),
        )
        .unwrap();
        assert_eq!(s.off(), None);
        assert_eq!(next(&rx).device, 0);
        s.stop();
        let (tx, _rx) = mpsc::channel();
        let s = Sampling::detecting(
            || {
                (
                    Vec::new(),
                    vec!["NVML not available: x".into(), "ROCm SMI: y".into()],
                )
            },
            Watch::new(),
            Box::new(Collect(tx)),
            Duration::from_millis(100),
        )
        .unwrap();
        assert_eq!(
            s.off().as_deref(),
            Some("NVML not available: x; ROCm SMI: y")
        );
        assert_eq!(s.stop(), SamplingStats::default());
    }

    #[test]
    fn no_reader_no_thread() {
        let (tx, _rx) = mpsc::channel();
        assert!(Sampling::start(
            Vec::new(),
            Watch::new(),
            Box::new(Collect(tx)),
            Duration::from_millis(100)
        )
        .is_none());
    }
}
