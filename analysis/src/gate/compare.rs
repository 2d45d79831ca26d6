//! Compares measured entries against a baseline, and computes the updated baseline.
//!
//! The rule: a gated metric of an entry **regresses** when it grew by more than the
//! absolute threshold (`max_increase_bytes`) AND by more than the relative threshold
//! (`max_increase`, percent of the baseline figure; growth from a baseline of zero counts
//! as exceeding any relative threshold). Either threshold alone lets small noise on big
//! modules (relative) or big jumps on tiny modules (absolute) through; requiring both
//! flags what matters. Any decrease is an **improvement**. Per-entry thresholds in the
//! baseline override the command line's. Owns no I/O and no rendering.

use super::baseline::{Baseline, BaselineEntry};
use super::entry::{GateEntry, Measurements};
use super::metric::Metric;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How many per-op figures a baseline keeps per entry (the largest ones).
pub const BASELINE_OPS_KEPT: usize = 16;

/// Command-line level settings of one comparison.
#[derive(Debug, Clone, Serialize)]
pub struct GateOptions {
    /// The metrics whose growth can fail the gate (others are shown, never gate).
    pub metrics: Vec<Metric>,
    pub max_increase_percent: f64,
    pub max_increase_bytes: u64,
    /// How many grown ops to list per regressed entry.
    pub top_ops: usize,
}

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions {
            metrics: Metric::DEFAULT_GATED.to_vec(),
            max_increase_percent: 2.0,
            max_increase_bytes: 64 << 20,
            top_ops: 5,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A gated metric grew past both thresholds.
    Regressed,
    /// No regression, and some gated metric decreased.
    Improved,
    /// Some gated metric grew, within the thresholds.
    WithinThreshold,
    /// Every gated metric equals the baseline.
    Unchanged,
    /// Measured now, but a gated metric the baseline has was not measured (a source that
    /// no longer reports it); nothing regressed among the metrics that were.
    Incomplete,
    /// Measured now, not in the baseline.
    New,
    /// In the baseline, not measured now.
    Missing,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Regressed => "REGRESSED",
            Status::Improved => "improved",
            Status::WithinThreshold => "within threshold",
            Status::Unchanged => "unchanged",
            Status::Incomplete => "incomplete",
            Status::New => "new",
            Status::Missing => "missing",
        }
    }
}

/// One metric of one entry.
#[derive(Debug, Clone, Serialize)]
pub struct MetricDelta {
    pub metric: Metric,
    pub baseline_bytes: Option<u64>,
    pub current_bytes: Option<u64>,
    /// `current - baseline` when both exist.
    pub delta_bytes: Option<i64>,
    /// Percent of the baseline; `None` when the baseline is 0 or a side is absent.
    pub delta_percent: Option<f64>,
    /// Whether this metric can fail the gate (`--metric`).
    pub gated: bool,
    pub regressed: bool,
    /// Gated, in the baseline, and not measured now although the entry was: the gate
    /// cannot tell whether it regressed.
    pub unmeasured: bool,
}

/// How an op's bytes at the peak changed.
#[derive(Debug, Clone, Serialize)]
pub struct OpGrowth {
    pub name: String,
    pub baseline_bytes: u64,
    pub current_bytes: u64,
    pub delta_bytes: i64,
}

/// The comparison of one entry.
#[derive(Debug, Clone, Serialize)]
pub struct EntryReport {
    pub key: String,
    pub status: Status,
    pub source: Option<String>,
    pub note: Option<String>,
    pub max_increase_percent: f64,
    pub max_increase_bytes: u64,
    /// One per metric present on either side, in [`Metric::ALL`] order.
    pub metrics: Vec<MetricDelta>,
    /// For regressed entries: the ops whose peak bytes grew most (needs per-op figures on
    /// both sides, i.e. XLA dumps).
    pub op_growth: Vec<OpGrowth>,
    /// Why this run's figures cannot be judged (the source lost data); the entry is then
    /// `incomplete` whatever its figures say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doubt: Option<String>,
}

impl EntryReport {
    pub fn metric(&self, m: Metric) -> Option<&MetricDelta> {
        self.metrics.iter().find(|d| d.metric == m)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub entries: usize,
    pub regressed: usize,
    pub improved: usize,
    pub within_threshold: usize,
    pub unchanged: usize,
    pub new: usize,
    pub missing: usize,
    /// Entries measured now that lack a gated metric the baseline has (status
    /// `incomplete`, or `regressed` on another metric).
    pub incomplete: usize,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize)]
pub struct GateReport {
    pub passed: bool,
    pub summary: Summary,
    pub options: GateOptions,
    /// Regressed first, then improved, within threshold, new, missing, unchanged; by key.
    pub entries: Vec<EntryReport>,
}

fn percent(base: u64, cur: u64) -> Option<f64> {
    (base > 0).then(|| (cur as f64 - base as f64) * 100.0 / base as f64)
}

fn delta(base: u64, cur: u64) -> i64 {
    let d = i128::from(cur) - i128::from(base);
    i64::try_from(d).unwrap_or(if d > 0 { i64::MAX } else { i64::MIN })
}

fn exceeds(base: u64, cur: u64, max_percent: f64, max_bytes: u64) -> bool {
    if cur <= base || cur - base <= max_bytes {
        return false;
    }
    match percent(base, cur) {
        Some(p) => p > max_percent,
        None => true,
    }
}

fn op_growth(base: &BTreeMap<String, u64>, cur: &GateEntry, n: usize) -> Vec<OpGrowth> {
    let cur_ops: BTreeMap<&str, u64> = cur
        .top_ops
        .iter()
        .map(|o| (o.name.as_str(), o.bytes))
        .collect();
    let names: BTreeSet<&str> = base
        .keys()
        .map(String::as_str)
        .chain(cur_ops.keys().copied())
        .collect();
    let mut grown: Vec<OpGrowth> = names
        .into_iter()
        .map(|name| {
            let b = base.get(name).copied().unwrap_or(0);
            let c = cur_ops.get(name).copied().unwrap_or(0);
            OpGrowth {
                name: name.to_string(),
                baseline_bytes: b,
                current_bytes: c,
                delta_bytes: delta(b, c),
            }
        })
        .filter(|g| g.delta_bytes > 0)
        .collect();
    grown.sort_by(|a, b| {
        b.delta_bytes
            .cmp(&a.delta_bytes)
            .then_with(|| a.name.cmp(&b.name))
    });
    grown.truncate(n);
    grown
}

fn compare_entry(
    key: &str,
    base: Option<&BaselineEntry>,
    cur: Option<&GateEntry>,
    opts: &GateOptions,
) -> EntryReport {
    let max_p = base
        .and_then(|b| b.max_increase.as_ref())
        .map_or(opts.max_increase_percent, |t| t.value);
    let max_b = base
        .and_then(|b| b.max_increase_bytes.as_ref())
        .map_or(opts.max_increase_bytes, |t| t.value);
    let mut metrics = Vec::new();
    let (mut regressed, mut improved, mut grew, mut incomplete) = (false, false, false, false);
    let mut compared = false;
    let mut measured_gated = false;
    for m in Metric::ALL {
        let b = base.and_then(|e| e.metrics.get(&m).copied());
        let c = cur.and_then(|e| e.metrics.get(&m).copied());
        if b.is_none() && c.is_none() {
            continue;
        }
        let gated = opts.metrics.contains(&m);
        let (d, p, r) = match (b, c) {
            (Some(b), Some(c)) => (
                Some(delta(b, c)),
                percent(b, c),
                exceeds(b, c, max_p, max_b),
            ),
            _ => (None, None, false),
        };
        let unmeasured = gated && cur.is_some() && b.is_some() && c.is_none();
        measured_gated |= gated && c.is_some();
        compared |= gated && b.is_some() && c.is_some();
        if gated && base.is_some() && cur.is_some() {
            regressed |= r;
            improved |= d.is_some_and(|d| d < 0);
            grew |= d.is_some_and(|d| d > 0);
            incomplete |= unmeasured;
        }
        metrics.push(MetricDelta {
            metric: m,
            baseline_bytes: b,
            current_bytes: c,
            delta_bytes: d,
            delta_percent: p,
            gated,
            regressed: gated && r,
            unmeasured,
        });
    }
    let doubt = cur.and_then(|c| c.doubt.clone());
    let status = match (base, cur) {
        (None, _) => Status::New,
        (_, None) => Status::Missing,
        _ if doubt.is_some() => Status::Incomplete,
        _ if regressed => Status::Regressed,
        _ if incomplete => Status::Incomplete,
        _ if improved => Status::Improved,
        _ if grew => Status::WithinThreshold,
        // The baseline entry has no figure for what is gated and measured now.
        _ if !compared && measured_gated => Status::New,
        _ => Status::Unchanged,
    };
    let op_growth = match (status, base, cur) {
        (Status::Regressed, Some(b), Some(c)) => op_growth(&b.ops, c, opts.top_ops),
        _ => Vec::new(),
    };
    EntryReport {
        key: key.to_string(),
        status,
        source: cur.map(|c| c.source.clone()),
        note: base.and_then(|b| b.note.clone()),
        max_increase_percent: max_p,
        max_increase_bytes: max_b,
        metrics,
        op_growth,
        doubt,
    }
}

/// Compares every baseline entry and every measured entry. `passed` is false when any
/// entry regressed; missing entries and unmeasured gated metrics are reported (the caller
/// decides whether they are an error: `--allow-missing`).
pub fn compare(baseline: &Baseline, current: &Measurements, opts: &GateOptions) -> GateReport {
    let mut entries: Vec<EntryReport> = Vec::with_capacity(baseline.entries.len() + current.len());
    for (key, b) in &baseline.entries {
        entries.push(compare_entry(key, Some(b), current.get(key), opts));
    }
    for c in current.entries() {
        if !baseline.entries.contains_key(&c.key) {
            entries.push(compare_entry(&c.key, None, Some(c), opts));
        }
    }
    let order = |s: Status| match s {
        Status::Regressed => 0,
        Status::Incomplete => 1,
        Status::Improved => 2,
        Status::WithinThreshold => 3,
        Status::New => 4,
        Status::Missing => 5,
        Status::Unchanged => 6,
    };
    entries.sort_by(|a, b| {
        order(a.status)
            .cmp(&order(b.status))
            .then_with(|| a.key.cmp(&b.key))
    });
    let mut s = Summary {
        entries: entries.len(),
        ..Summary::default()
    };
    for e in &entries {
        if e.status == Status::Incomplete || e.metrics.iter().any(|d| d.unmeasured) {
            s.incomplete += 1;
        }
        match e.status {
            Status::Regressed => s.regressed += 1,
            Status::Improved => s.improved += 1,
            Status::WithinThreshold => s.within_threshold += 1,
            Status::Unchanged => s.unchanged += 1,
            Status::New => s.new += 1,
            Status::Missing => s.missing += 1,
            Status::Incomplete => {}
        }
    }
    GateReport {
        passed: s.regressed == 0,
        summary: s,
        options: opts.clone(),
        entries,
    }
}

/// How `--update` / `--ratchet` rewrite the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateMode {
    /// Record what was measured now (regressions are accepted).
    Accept,
    /// Only lower figures: each metric becomes `min(baseline, current)`; new entries are
    /// added; regressions stay in the baseline and keep failing. Nothing is ever dropped:
    /// metrics and entries not measured now keep their baseline figures.
    Ratchet,
}

fn ops_of(e: &GateEntry) -> BTreeMap<String, u64> {
    let mut ops: Vec<_> = e.top_ops.iter().collect();
    ops.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
    ops.into_iter()
        .take(BASELINE_OPS_KEPT)
        .map(|o| (o.name.clone(), o.bytes))
        .collect()
}

/// The baseline after `--update` (mode `Accept`) or `--ratchet`. Notes and per-entry
/// thresholds are kept. Entries no longer measured are kept when `keep_missing`
/// (`--allow-missing`) or when ratcheting, dropped otherwise. Figures that could not be
/// judged (`doubt`: a damaged capture, dropped events) never move the baseline in either
/// mode: such an entry is treated as not measured.
pub fn updated_baseline(
    old: &Baseline,
    current: &Measurements,
    mode: UpdateMode,
    keep_missing: bool,
) -> Baseline {
    let mut new = Baseline::default();
    for c in current.entries() {
        let prev = old.entries.get(&c.key);
        if c.doubt.is_some() {
            // Figures nobody can vouch for never move the baseline (kept below if there).
            continue;
        }
        let mut e = BaselineEntry {
            note: prev.and_then(|p| p.note.clone()),
            max_increase: prev.and_then(|p| p.max_increase.clone()),
            max_increase_bytes: prev.and_then(|p| p.max_increase_bytes.clone()),
            ..BaselineEntry::default()
        };
        match (mode, prev) {
            (UpdateMode::Ratchet, Some(p)) => {
                let mut any_higher = false;
                for (m, v) in &c.metrics {
                    let kept = match p.metrics.get(m) {
                        Some(&old_v) => {
                            any_higher |= *v > old_v;
                            old_v.min(*v)
                        }
                        None => *v,
                    };
                    e.metrics.insert(*m, kept);
                }
                for (m, v) in &p.metrics {
                    e.metrics.entry(*m).or_insert(*v);
                }
                let now = ops_of(c);
                e.ops = if any_higher || now.is_empty() {
                    p.ops.clone() // this source has no per-op figures: keep the reviewed ones
                } else {
                    now
                };
            }
            _ => {
                e.metrics = c.metrics.clone();
                e.ops = ops_of(c);
            }
        }
        new.entries.insert(c.key.clone(), e);
    }
    if keep_missing || mode == UpdateMode::Ratchet {
        for (k, v) in &old.entries {
            new.entries.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::baseline::Threshold;
    use crate::gate::entry::OpBytes;

    fn entry(key: &str, metrics: &[(Metric, u64)], ops: &[(&str, u64)]) -> GateEntry {
        GateEntry {
            key: key.into(),
            source: "test".into(),
            metrics: metrics.iter().copied().collect(),
            top_ops: ops
                .iter()
                .map(|(n, b)| OpBytes {
                    name: n.to_string(),
                    bytes: *b,
                })
                .collect(),
            doubt: None,
        }
    }

    fn measured(es: Vec<GateEntry>) -> Measurements {
        let mut m = Measurements::new();
        m.extend(es).unwrap();
        m
    }

    fn opts(p: f64, b: u64) -> GateOptions {
        GateOptions {
            max_increase_percent: p,
            max_increase_bytes: b,
            ..GateOptions::default()
        }
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn regression_needs_both_thresholds_exceeded() {
        let base = updated_baseline(
            &Baseline::default(),
            &measured(vec![
                entry("big", &[(Metric::Temp, 100_000 * MIB)], &[]),
                entry("small", &[(Metric::Temp, MIB)], &[]),
            ]),
            UpdateMode::Accept,
            false,
        );
        // big: +1000 MiB is > 64 MiB but only +1 % (< 2 %): within. small: +100 % but +1 MiB (< 64 MiB): within.
        let now = measured(vec![
            entry("big", &[(Metric::Temp, 101_000 * MIB)], &[]),
            entry("small", &[(Metric::Temp, 2 * MIB)], &[]),
        ]);
        let r = compare(&base, &now, &opts(2.0, 64 * MIB));
        assert!(r.passed);
        assert_eq!(r.summary.within_threshold, 2);
        // Tighter relative threshold: big regresses (both exceeded), small still within.
        let r = compare(&base, &now, &opts(0.5, 64 * MIB));
        assert!(!r.passed);
        assert_eq!(r.entries[0].key, "big");
        assert_eq!(r.entries[0].status, Status::Regressed);
        let t = r.entries[0].metric(Metric::Temp).unwrap();
        assert_eq!(t.delta_bytes, Some(1000 * MIB as i64));
        assert!((t.delta_percent.unwrap() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn growth_from_zero_exceeds_relative_threshold() {
        let base = updated_baseline(
            &Baseline::default(),
            &measured(vec![entry("m", &[(Metric::Temp, 0)], &[])]),
            UpdateMode::Accept,
            false,
        );
        let r = compare(
            &base,
            &measured(vec![entry("m", &[(Metric::Temp, 10)], &[])]),
            &opts(2.0, 0),
        );
        assert_eq!(r.entries[0].status, Status::Regressed);
        assert_eq!(
            r.entries[0].metric(Metric::Temp).unwrap().delta_percent,
            None
        );
    }

    #[test]
    fn ungated_metrics_never_fail_and_per_entry_thresholds_win() {
        let mut base = updated_baseline(
            &Baseline::default(),
            &measured(vec![entry(
                "m",
                &[(Metric::Temp, 100), (Metric::Alias, 100)],
                &[],
            )]),
            UpdateMode::Accept,
            false,
        );
        let now = measured(vec![entry(
            "m",
            &[(Metric::Temp, 100), (Metric::Alias, 1000)],
            &[],
        )]);
        let r = compare(&base, &now, &opts(0.0, 0));
        assert!(r.passed, "alias is not gated by default");
        let now = measured(vec![entry(
            "m",
            &[(Metric::Temp, 150), (Metric::Alias, 100)],
            &[],
        )]);
        assert!(!compare(&base, &now, &opts(0.0, 0)).passed);
        base.entries.get_mut("m").unwrap().max_increase = Some(Threshold {
            value: 60.0,
            written: toml::Value::String("60%".into()),
        });
        let r = compare(&base, &now, &opts(0.0, 0));
        assert!(r.passed);
        assert_eq!(r.entries[0].max_increase_percent, 60.0);
    }

    #[test]
    fn improvements_new_and_missing_entries() {
        let base = updated_baseline(
            &Baseline::default(),
            &measured(vec![
                entry("a", &[(Metric::Temp, 100)], &[]),
                entry("gone", &[(Metric::Temp, 1)], &[]),
            ]),
            UpdateMode::Accept,
            false,
        );
        let r = compare(
            &base,
            &measured(vec![
                entry("a", &[(Metric::Temp, 50)], &[]),
                entry("b", &[(Metric::Temp, 5)], &[]),
            ]),
            &opts(2.0, 0),
        );
        assert!(r.passed);
        let st: Vec<_> = r
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.status))
            .collect();
        assert_eq!(
            st,
            [
                ("a", Status::Improved),
                ("b", Status::New),
                ("gone", Status::Missing)
            ]
        );
        assert_eq!(
            (r.summary.improved, r.summary.new, r.summary.missing),
            (1, 1, 1)
        );
    }

    #[test]
    fn op_growth_lists_largest_growth_first() {
        let base = updated_baseline(
            &Baseline::default(),
            &measured(vec![entry(
                "m",
                &[(Metric::Temp, 100)],
                &[("fusion.1", 60), ("copy.2", 40)],
            )]),
            UpdateMode::Accept,
            false,
        );
        let now = measured(vec![entry(
            "m",
            &[(Metric::Temp, 400)],
            &[("fusion.1", 70), ("copy.2", 30), ("dot.3", 300)],
        )]);
        let r = compare(&base, &now, &opts(2.0, 0));
        let g: Vec<_> = r.entries[0]
            .op_growth
            .iter()
            .map(|g| (g.name.as_str(), g.delta_bytes))
            .collect();
        assert_eq!(g, [("dot.3", 300), ("fusion.1", 10)]);
    }

    #[test]
    fn ratchet_keeps_lower_figures_and_update_accepts_all() {
        let base = updated_baseline(
            &Baseline::default(),
            &measured(vec![entry(
                "m",
                &[(Metric::Temp, 100), (Metric::Output, 100)],
                &[],
            )]),
            UpdateMode::Accept,
            false,
        );
        let now = measured(vec![entry(
            "m",
            &[(Metric::Temp, 50), (Metric::Output, 150)],
            &[],
        )]);
        let r = updated_baseline(&base, &now, UpdateMode::Ratchet, false);
        assert_eq!(r.entries["m"].metrics[&Metric::Temp], 50);
        assert_eq!(r.entries["m"].metrics[&Metric::Output], 100);
        let a = updated_baseline(&base, &now, UpdateMode::Accept, false);
        assert_eq!(a.entries["m"].metrics[&Metric::Output], 150);
        let kept = updated_baseline(&base, &Measurements::new(), UpdateMode::Accept, true);
        assert!(kept.entries.contains_key("m"));
        assert!(
            updated_baseline(&base, &Measurements::new(), UpdateMode::Accept, false)
                .entries
                .is_empty()
        );
    }

    /// A source without per-op figures does not erase the reviewed ones (--ratchet), and
    /// a baseline entry without figures for what is gated now is `new`, not `unchanged`.
    #[test]
    fn ratchet_keeps_ops_and_an_entry_without_figures_is_new() {
        let base = updated_baseline(
            &Baseline::default(),
            &measured(vec![entry(
                "m",
                &[(Metric::Temp, 100)],
                &[("fusion.1", 60)],
            )]),
            UpdateMode::Accept,
            false,
        );
        let now = measured(vec![entry("m", &[(Metric::Temp, 100)], &[])]);
        let r = updated_baseline(&base, &now, UpdateMode::Ratchet, false);
        assert_eq!(r.entries["m"].ops.get("fusion.1"), Some(&60));
        let mut empty = base.clone();
        empty.entries.get_mut("m").unwrap().metrics.clear();
        let rep = compare(&empty, &now, &opts(0.0, 0));
        assert_eq!(rep.entries[0].status, Status::New);
    }
}
