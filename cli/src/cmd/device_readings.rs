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
pub const PERIOD: Duration = Duration::from_millis(memwatch_wire::ingest::DEFAULT_SAMPLE_MS);

/// The capture tag that says why there are no readings (`memwatch.tag
/// device_readings=off: …`).
pub const OFF_TAG: &str = memwatch_analysis::device_readings::OFF_TAG;

/// A running sampler (or the reason there is none) and the tree it marks.
pub struct CaptureReadings {
    sampling: Option<Sampling>,
    watch: Watch,
    /// Why there are no readings, once asked (`Some(None)`: there are).
    off: Option<Option<String>>,
}

impl CaptureReadings {
    /// Starts reading into `sink`; the libraries are loaded on the sampler's thread
    /// (NVML can take a while to start: the command does not wait for it).
    pub fn start(sink: &Arc<CaptureFileSink>) -> Self {
        let watch = Watch::new();
        let sampling = Sampling::detecting(
            detect_readers,
            watch.clone(),
            Box::new(SinkOut(sink.clone() as Arc<dyn FrameSink>)),
            PERIOD,
        );
        Self {
            sampling,
            watch,
            off: None,
        }
    }

    /// Why there are no readings (`None`: there are), once the sampler knows.
    fn why_off(&mut self) -> Option<&str> {
        if self.off.is_none() {
            self.off = Some(match &self.sampling {
                Some(s) => s.off(),
                None => Some("the sampler's thread could not start".into()),
            });
        }
        self.off.as_ref().and_then(|o| o.as_deref())
    }

    /// The capture tag (key, value) that records why there are no readings.
    pub fn off_tag(&mut self) -> Option<(&'static str, String)> {
        self.why_off().map(|why| (OFF_TAG, format!("off: {why}")))
    }

    /// Says on stderr, once, why there are no readings (nothing when there are).
    pub fn say_off(&mut self) {
        if let Some(why) = self.why_off() {
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

    /// Stops sampling at once (no wait for the period; a library still loading is
    /// waited for) and keeps why there were no readings.
    pub fn stop(&mut self) -> Option<SamplingStats> {
        self.why_off();
        self.sampling.take().map(Sampling::stop)
    }
}
