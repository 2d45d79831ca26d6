//! Device readings into a capture, for `memwatch run` and `memwatch attach`: the
//! `memwatch-agent` sampler (NVML, ROCm SMI) reads every device and its processes every
//! [`PERIOD`] and at each failed allocation a shim reports (its trigger goes to a
//! `FailureTap` in front of the capture sink), marking the watched tree's pids. Without a
//! library or a device it says why once, records why in the capture (tag
//! [`OFF_TAG`]: the report then says why readings are missing) and the run goes on.

use std::sync::Arc;
use std::time::Duration;

use memwatch_agent::sampler::failure_tap::FailureTap;
use memwatch_agent::sampler::reader::detect_readers;
use memwatch_agent::sampler::sampling::{Sampling, SamplingStats, SinkOut, Trigger};
use memwatch_agent::sampler::watch::Watch;
use memwatch_agent::{CaptureFileSink, FrameSink};

/// How often the devices are read.
pub const PERIOD: Duration = Duration::from_millis(100);

/// The capture tag that says why there are no readings (`memwatch.tag
/// device_readings=off: …`).
pub const OFF_TAG: &str = memwatch_analysis::device_readings::OFF_TAG;

/// A running sampler (or the reason there is none) and the tree it marks.
pub struct CaptureReadings {
    sampling: Option<Sampling>,
    watch: Watch,
}

impl CaptureReadings {
    /// Starts reading into `sink`; `tag` writes a capture tag. With `quiet` the reason
    /// readings are off is only recorded, not printed.
    pub fn start(sink: &Arc<CaptureFileSink>, quiet: bool, tag: impl FnOnce(&str, &str)) -> Self {
        let watch = Watch::new();
        let (readers, off) = detect_readers();
        if readers.is_empty() {
            let why = off.join("; ");
            if !quiet {
                eprintln!("memwatch: device readings off: {why}");
            }
            tag(OFF_TAG, &format!("off: {why}"));
        }
        let sampling = Sampling::start(
            readers,
            watch.clone(),
            Box::new(SinkOut(sink.clone() as Arc<dyn FrameSink>)),
            PERIOD,
        );
        Self { sampling, watch }
    }

    /// Marks `pid` and its descendants as the watched tree from now on.
    pub fn watch(&self, pid: u32) {
        self.watch.add_root(pid);
    }

    /// What fires a reading at once.
    pub fn trigger(&self) -> Option<Trigger> {
        self.sampling.as_ref().map(Sampling::trigger)
    }

    /// `sink` with a failure tap in front that fires this sampler.
    pub fn tap(&self, sink: Arc<dyn FrameSink>) -> Arc<dyn FrameSink> {
        Arc::new(FailureTap::new(sink, self.trigger()))
    }

    /// Stops sampling at once (no wait for the period).
    pub fn stop(self) -> Option<SamplingStats> {
        self.sampling.map(Sampling::stop)
    }
}
