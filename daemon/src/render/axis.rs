//! The byte axis of every chart: ticks at round binary values (a whole number of B,
//! KiB, MiB, GiB or TiB, or 128/256/512 of one), labelled in the same binary units, and
//! the top of the axis on a tick so the highest label is the chart's top.
//!
//! Pure arithmetic and formatting; the charts draw the ticks it returns.

/// Multiples of a binary unit a tick step may be.
const STEPS: [u64; 13] = [1, 2, 4, 5, 10, 20, 25, 50, 100, 128, 200, 256, 512];
const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];

/// The ticks of a byte axis showing `0..=max`: the step, and the axis top (a multiple
/// of the step, at least `max` and at least one step). At most `most + 1` ticks.
pub fn byte_ticks(max: f64, most: u64) -> (u64, u64) {
    let max = if max.is_finite() { max.max(1.0) } else { 1.0 };
    let most = most.max(1);
    for u in 0..UNITS.len() as u32 {
        let unit = 1024u64.pow(u);
        for m in STEPS {
            let step = m * unit;
            let n = (max / step as f64).ceil() as u64;
            if n <= most {
                return (step, n.max(1) * step);
            }
        }
    }
    let step = 1024u64.pow(UNITS.len() as u32);
    let n = (max / step as f64).ceil() as u64;
    (step, n.max(1) * step)
}

/// Tick values `0, step, 2·step … top`.
pub fn tick_values(step: u64, top: u64) -> Vec<u64> {
    (0..=top / step.max(1)).map(|k| k * step).collect()
}

/// A tick label: the value in the largest binary unit it reaches, with at most two
/// decimals and no trailing zeros ("0 B", "512 MiB", "1.5 GiB", "3 GiB").
pub fn tick_label(v: u64) -> String {
    let mut u = 0;
    while u + 1 < UNITS.len() && v >= 1024u64.pow(u as u32 + 1) {
        u += 1;
    }
    let x = v as f64 / 1024f64.powi(u as i32);
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_binary_and_cover_the_max() {
        const GIB: f64 = (1u64 << 30) as f64;
        let (step, top) = byte_ticks(139.7 * GIB, 6);
        assert_eq!(step, 25 << 30);
        assert_eq!(top, 150 << 30);
        let (step, top) = byte_ticks(3.96 * GIB, 6);
        assert_eq!((step, top), (1 << 30, 4 << 30));
        let (step, _) = byte_ticks(900.0 * (1u64 << 20) as f64, 6);
        assert_eq!(step, 200 << 20);
        assert_eq!(byte_ticks(0.0, 6), (1, 1));
        assert_eq!(byte_ticks(3.0, 6), (1, 3));
        for max in [1.0, 7.0, 1e3, 5e5, 3.3e9, 8.1e10, 1.5e11, 2e13] {
            let (step, top) = byte_ticks(max, 6);
            assert!(top as f64 >= max && top / step <= 6, "{max}: {step} {top}");
        }
    }

    #[test]
    fn labels_use_binary_units_without_noise() {
        assert_eq!(tick_label(0), "0 B");
        assert_eq!(tick_label(512 << 20), "512 MiB");
        assert_eq!(tick_label(1536 << 20), "1.5 GiB");
        assert_eq!(tick_label(25 << 30), "25 GiB");
        assert_eq!(tick_label(3), "3 B");
        let labels: Vec<String> = tick_values(1, 3).into_iter().map(tick_label).collect();
        assert_eq!(labels, ["0 B", "1 B", "2 B", "3 B"]);
    }
}
