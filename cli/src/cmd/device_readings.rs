//! Device readings into a capture, for `memwatch run` and `memwatch attach`: the
//! `memwatch-agent` sampler (NVML, ROCm SMI) reads every device and its processes every
//! [`PERIOD`] and at each failed allocation a shim reports (its trigger goes to a
//! `FailureTap` in front of the capture sink), marking the watched tree's pids. Without a
//! library or a device it says why once (`run`: after the command's own output), records
//! why in the capture (tag [`OFF_TAG`]: the report then says why readings are missing)
//! and the run goes on.

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
    off: Option<String>,
}

impl CaptureReadings {
    /// Starts reading into `sink`. Why readings are off is said by
    /// [`CaptureReadings::say_off`] and recorded by the caller ([`CaptureReadings::off_tag`]).
    pub fn start(sink: &Arc<CaptureFileSink>) -> Self {
        let watch = Watch::new();
        let (readers, off) = detect_readers();
        let off = readers.is_empty().then(|| off.join("; "));
        let sampling = Sampling::start(
            readers,
            watch.clone(),
            Box::new(SinkOut(sink.clone() as Arc<dyn FrameSink>)),
            PERIOD,
        );
        Self {
            sampling,
            watch,
            off,
        }
    }

    /// The capture tag (key, value) that records why there are no readings.
    pub fn off_tag(&self) -> Option<(&'static str, String)> {
        self.off
            .as_ref()
            .map(|why| (OFF_TAG, format!("off: {why}")))
    }

    /// Says on stderr, once, why there are no readings (nothing when there are).
    pub fn say_off(&self) {
        if let Some(why) = &self.off {
            eprintln!("memwatch: device readings off: {why}");
        }
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
    pub fn stop(&mut self) -> Option<SamplingStats> {
        self.sampling.take().map(Sampling::stop)
    }
}
