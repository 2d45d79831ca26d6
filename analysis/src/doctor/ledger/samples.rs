//! Device samples matched to an instant of the capture's clock: the last sample at or
//! before the instant (else the first after it), within [`MATCH_WINDOW_NS`]. Wall-clock
//! samples (nvidia-smi) are placed on the capture's monotonic clock through the
//! process's own anchor pair (its monotonic and wall-clock times at start); samples on
//! the capture's time base (its own readings: ns since its start) through that start.

use crate::doctor::evidence::{CaptureEvidence, DeviceSeries};

/// How far a sample may be from the instant it is matched to.
pub const MATCH_WINDOW_NS: u64 = 1_000_000_000;

/// A device sample matched to an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedSample {
    /// The sample's time on the capture's clock (raw monotonic ns).
    pub raw_ts: u64,
    /// Device memory in use (every process).
    pub used: u64,
    pub total: u64,
    /// Sample time minus the instant, in ms.
    pub offset_ms: i64,
    /// Where it came from (file, or `capture`).
    pub source: String,
    /// Per-process readings at the sample (pid, used), when the source has them.
    pub processes: Vec<(u32, u64)>,
    /// In use on the device before the recorded processes started (the least any sample
    /// before the capture's start saw), when the samples reach back that far.
    pub used_before_run: Option<u64>,
}

/// Capture raw ns -> the series' clock: (offset to add) for wall-clock series.
fn wall_offset(cap: &CaptureEvidence, pid: Option<u32>) -> Option<u64> {
    let procs = &cap.loaded.processes;
    procs
        .values()
        .filter(|p| pid.is_none_or(|x| p.pid == x))
        .chain(procs.values())
        .find_map(|p| Some(p.wall_anchor_unix_ns.saturating_sub(p.mono_anchor_ns?)))
        .filter(|o| *o > 0)
}

/// The sample of `device` matched to raw ns `raw` (see the module docs); `None` when no
/// series of the device has one within [`MATCH_WINDOW_NS`].
pub fn matched_sample(
    series: &[DeviceSeries],
    cap: &CaptureEvidence,
    device: i32,
    pid: Option<u32>,
    raw: u64,
) -> Option<MatchedSample> {
    nth_sample(series, cap, device, pid, raw, 0)
}

/// The `back`-th sample before the matched one (0: the matched one; later ones only
/// before the instant, within the window).
pub fn nth_sample(
    series: &[DeviceSeries],
    cap: &CaptureEvidence,
    device: i32,
    pid: Option<u32>,
    raw: u64,
    back: usize,
) -> Option<MatchedSample> {
    let s = series.iter().find(|s| s.device == device)?;
    // The series' clock: wall-clock through the anchor pair, else ns since the capture's
    // start.
    let base = cap.loaded.base_ns();
    // (added, taken away) going from the capture's clock to the series'.
    let (add, sub) = if s.wall_clock {
        (wall_offset(cap, pid)?, 0)
    } else {
        (0, base)
    };
    let to = |r: u64| r.saturating_add(add).saturating_sub(sub);
    let from = |t: u64| t.saturating_add(sub).saturating_sub(add);
    let target = to(raw);
    let k = s.samples.partition_point(|x| x.0 <= target);
    let nth_before = |n: usize| {
        k.checked_sub(n + 1)
            .map(|i| (i, s.samples[i]))
            .filter(|(_, x)| target - x.0 <= MATCH_WINDOW_NS)
    };
    let after = s
        .samples
        .get(k)
        .copied()
        .map(|x| (k, x))
        .filter(|(_, x)| x.0 - target <= MATCH_WINDOW_NS);
    let (i, (ts, used, total)) = nth_before(back).or(if back == 0 { after } else { None })?;
    // The least in use before the run: the recorded processes' own contexts appear
    // just before their first recorded call, other processes' memory throughout. (A
    // series on the capture's own time base starts with the run: none then.)
    let used_before_run = s
        .wall_clock
        .then(|| {
            let start = to(base);
            s.samples
                .iter()
                .take_while(|x| x.0 < start)
                .map(|x| x.1)
                .min()
        })
        .flatten();
    // The per-process figures read at the sample's own instant.
    let processes: Vec<(u32, u64)> = s
        .splits
        .get(i)
        .and_then(Option::as_ref)
        .map(|sp| {
            sp.processes
                .iter()
                .filter_map(|(p, bytes, _)| Some((*p, (*bytes)?)))
                .collect()
        })
        .unwrap_or_default();
    Some(MatchedSample {
        raw_ts: from(ts),
        used,
        total,
        offset_ms: (ts as i128 - target as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
            / 1_000_000,
        source: s.source.clone(),
        processes,
        used_before_run,
    })
}
