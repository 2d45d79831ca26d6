//! The one growth rule: memory that keeps growing step after step (or, where a series has
//! no steps, second after second) is growth; memory allocated once at setup and then held
//! while the program goes on is not. The dashboard applies it to JAX executables' live
//! outputs, PyTorch's allocated blocks and raw driver memory alike, on series sampled
//! into buckets (one value per bucket and the program's steps in each bucket).
//!
//! Pure arithmetic on the samples it is given.

/// Least growth that counts, whatever the run's size.
pub const MIN_GROWTH_BYTES: i64 = 16 << 20;
/// Steps (or rising buckets, without steps) a growth must span.
pub const MIN_STEPS: i64 = 8;

/// One bucket of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// Bucket start, ns since the run's start.
    pub t_ns: u64,
    /// The series' value at the end of the bucket.
    pub bytes: i64,
    /// Steps of what the series belongs to (an executable's executions) in the bucket.
    pub own_steps: i64,
    /// Steps of the whole program (every execution) in the bucket.
    pub program_steps: i64,
}

/// A series that keeps growing.
#[derive(Debug, Clone, PartialEq)]
pub struct Ramp {
    /// First and last bucket of the rise.
    pub from: usize,
    pub to: usize,
    pub growth_bytes: i64,
    /// Own steps in the rise (0: the series has no steps).
    pub steps: i64,
    /// Growth per step when there are steps.
    pub per_step: Option<i64>,
    pub bytes_per_s: f64,
}

/// The largest rise of a series: buckets `a < b` maximising `v[b] - v[a]` such that at
/// most one in four steps between them goes down. Returns (rise, a, b, steps up).
pub fn largest_rise(v: &[i64]) -> Option<(i64, usize, usize, i64)> {
    let n = v.len();
    let mut downs = vec![0usize; n.max(1)];
    let mut ups = vec![0i64; n.max(1)];
    for i in 1..n {
        downs[i] = downs[i - 1] + usize::from(v[i] < v[i - 1]);
        ups[i] = ups[i - 1] + i64::from(v[i] > v[i - 1]);
    }
    let mut best: Option<(i64, usize, usize, i64)> = None;
    for a in 0..n {
        for b in a + 1..n {
            if (downs[b] - downs[a]) * 4 > b - a {
                continue;
            }
            let g = v[b] - v[a];
            if g > 0 && best.is_none_or(|x| g > x.0) {
                best = Some((g, a, b, ups[b] - ups[a]));
            }
        }
    }
    best
}

/// Whether `samples` keep growing, and by how much: the largest rise (see
/// [`largest_rise`]) counts when
/// - it is large: at least [`MIN_GROWTH_BYTES`] and a quarter of `reference` (the
///   allocator's limit, else twice the series' peak);
/// - it is made step by step: at least [`MIN_STEPS`] own steps inside it, or, for a series
///   without steps, [`MIN_STEPS`] buckets that rise and no flat stretch inside it longer
///   than a quarter of it;
/// - it keeps going: the program does not go on without it for longer than the rise took
///   (more program steps after the rise than during it, or, without steps, more time).
///   A setup that fills a model's weights and then holds them is a rise followed by the
///   whole run; a leak rises until the run fails or ends.
pub fn ramp(samples: &[Sample], reference: i64) -> Option<Ramp> {
    let values: Vec<i64> = samples.iter().map(|s| s.bytes).collect();
    let (growth, mut a, b, ups) = largest_rise(&values)?;
    // The rise starts where the value last held before it starts moving.
    while a + 1 < b && values[a + 1] == values[a] {
        a += 1;
    }
    if growth < MIN_GROWTH_BYTES.max(reference / 4) {
        return None;
    }
    let sum = |r: std::ops::Range<usize>, f: fn(&Sample) -> i64| -> i64 {
        samples.get(r).map_or(0, |s| s.iter().map(f).sum())
    };
    let has_steps = samples.iter().any(|s| s.own_steps > 0);
    let own = sum(a + 1..b + 1, |s| s.own_steps);
    let t = |i: usize| samples.get(i).map_or(0, |s| s.t_ns);
    // The tail is measured up to the series' last change after the rise (a process that
    // frees everything at its exit has ended what it was doing; the recording may go on
    // idle), else to the end of the series.
    let last_change = (1..values.len())
        .rev()
        .find(|&i| values[i] != values[i - 1])
        .unwrap_or(0);
    if has_steps {
        if own < MIN_STEPS {
            return None;
        }
        let during = sum(a + 1..b + 1, |s| s.program_steps);
        let after = sum(b + 1..samples.len(), |s| s.program_steps);
        if after > during {
            return None;
        }
    } else {
        if ups < MIN_STEPS {
            return None;
        }
        // Without steps, "step after step" is rising all along: no flat stretch inside
        // the rise longer than a quarter of it (a start-up that waits, then fills its
        // working set in a burst, has one).
        let mut flat = 0usize;
        let mut longest = 0usize;
        for i in a + 1..=b {
            flat = if values[i] == values[i - 1] {
                flat + 1
            } else {
                0
            };
            longest = longest.max(flat);
        }
        if longest * 4 > b - a {
            return None;
        }
        let end = samples.last().map_or(0, |s| s.t_ns);
        let tail_end = if last_change > b { t(last_change) } else { end };
        if tail_end.saturating_sub(t(b)) > t(b).saturating_sub(t(a)) {
            return None;
        }
    }
    let secs = (t(b).saturating_sub(t(a))).max(1) as f64 / 1e9;
    Some(Ramp {
        from: a,
        to: b,
        growth_bytes: growth,
        steps: if has_steps { own } else { 0 },
        per_step: (has_steps && own > 0).then(|| per_step(&values, samples, a, b)),
        bytes_per_s: growth as f64 / secs,
    })
}

/// Bytes kept per step: the median over the rise's buckets with steps of each bucket's
/// rise divided by its steps (a first fill before the steps, or one odd step, does not
/// shift it).
fn per_step(values: &[i64], samples: &[Sample], a: usize, b: usize) -> i64 {
    let mut per: Vec<i64> = (a + 1..=b)
        .filter(|&i| samples[i].own_steps > 0)
        .map(|i| (values[i] - values[i - 1]) / samples[i].own_steps)
        .collect();
    per.sort_unstable();
    per.get(per.len() / 2).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1 << 20;

    fn series(values: &[i64], own: &[i64], program: &[i64]) -> Vec<Sample> {
        values
            .iter()
            .enumerate()
            .map(|(i, &bytes)| Sample {
                t_ns: i as u64 * 100_000_000,
                bytes,
                own_steps: own.get(i).copied().unwrap_or(0),
                program_steps: program.get(i).copied().unwrap_or(0),
            })
            .collect()
    }

    #[test]
    fn a_leak_until_the_failure_is_growth_per_step() {
        // A first fill of 500 MiB, then 64 MiB kept per step for 30 steps, then the OOM
        // and the exit free everything.
        let mut v: Vec<i64> = vec![0];
        v.extend((0..31).map(|i| 500 * MIB + i * 64 * MIB));
        v.extend([0, 0]);
        let steps: Vec<i64> = (0..34).map(|i| i64::from((1..32).contains(&i))).collect();
        let r = ramp(&series(&v, &steps, &steps), 4000 * MIB).expect("growth");
        assert_eq!(r.per_step, Some(64 * MIB));
        assert_eq!(r.steps, 31);
    }

    #[test]
    fn setup_then_a_long_run_is_not_growth() {
        // Weights filled by 12 executions of an init executable, then 100 training steps
        // (of another executable) with the weights held.
        let mut v: Vec<i64> = (0..13).map(|i| i * 70 * MIB).collect();
        v.extend(std::iter::repeat_n(12 * 70 * MIB, 100));
        let own: Vec<i64> = (0..113).map(|i| i64::from((1..13).contains(&i))).collect();
        let program: Vec<i64> = (0..113).map(|i| i64::from(i >= 1)).collect();
        assert_eq!(ramp(&series(&v, &own, &program), 1000 * MIB), None);
    }

    #[test]
    fn a_ramp_without_steps_is_growth_per_second_and_a_burst_held_is_not() {
        // A driver-level leak: 20 MiB every 100 ms until the run fails.
        let v: Vec<i64> = (0..50).map(|i| i * 20 * MIB).collect();
        let r = ramp(&series(&v, &[], &[]), 0).expect("growth");
        assert!(
            (r.bytes_per_s - 200.0 * MIB as f64).abs() < 1.0,
            "{}",
            r.bytes_per_s
        );
        assert_eq!(r.per_step, None);
        // The same bytes allocated in the first second and held for four more, with a
        // final free at exit.
        let mut v: Vec<i64> = (0..10).map(|i| i * 100 * MIB).collect();
        v.extend(std::iter::repeat_n(900 * MIB, 40));
        v.push(0);
        assert_eq!(ramp(&series(&v, &[], &[]), 0), None);
        v.pop();
        assert_eq!(ramp(&series(&v, &[], &[]), 0), None);
        // Idle for five seconds, then a ramp until the run fails: growth.
        let mut v: Vec<i64> = vec![0; 50];
        v.extend((1..=20).map(|i| i * 100 * MIB));
        assert!(ramp(&series(&v, &[], &[]), 0).is_some_and(|r| r.from == 49));
        // A start-up that waits five seconds, then fills its working set in half a
        // second at the end of the run.
        let mut v: Vec<i64> = vec![0; 6];
        v.extend(std::iter::repeat_n(300 * MIB, 50));
        v.extend((1..=8).map(|i| 300 * MIB + i * 240 * MIB));
        assert_eq!(ramp(&series(&v, &[], &[]), 0), None);
    }

    #[test]
    fn small_or_jittery_rises_are_not_growth() {
        let steady: Vec<i64> = (0..40).map(|i| 2000 * MIB + (i % 3) * 8 * MIB).collect();
        assert_eq!(ramp(&series(&steady, &[1; 40], &[1; 40]), 4000 * MIB), None);
        let saw: Vec<i64> = (0..40)
            .map(|i| 1000 * MIB + i * 4 * MIB - (i % 2) * 300 * MIB)
            .collect();
        assert!(largest_rise(&saw).is_some_and(|r| r.0 <= 310 * MIB));
        assert_eq!(largest_rise(&[5, 4, 3]), None);
    }
}
