//! Human formatting for the dashboard: binary byte units (the workspace's one format),
//! durations, wall-clock times.
//! Pure functions; no I/O.

/// `1536` -> "1.50 KiB"; negative values keep their sign (the workspace's one byte
/// format, `memwatch_analysis::size`).
pub fn bytes(v: i64) -> String {
    let s = memwatch_analysis::size::format_bytes(v.unsigned_abs());
    if v < 0 {
        format!("-{s}")
    } else {
        s
    }
}

/// A difference of bytes, signed: "+1.00 MiB", "−1.00 MiB" (a minus sign, so a decrease
/// reads as a difference, not as a size), "0 B".
pub fn delta_bytes(v: i64) -> String {
    match v.cmp(&0) {
        std::cmp::Ordering::Greater => format!("+{}", bytes(v)),
        std::cmp::Ordering::Less => format!("\u{2212}{}", bytes_u64(v.unsigned_abs())),
        std::cmp::Ordering::Equal => bytes(0),
    }
}

/// Nanoseconds -> "812 ns", "3.20 ms", "1.50 s", "2 min 5 s".
pub fn duration(ns: i64) -> String {
    let ns = ns.max(0) as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns < 120e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns < 7200e9 {
        let s = (ns / 1e9) as u64;
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{:.1} h", ns / 3600e9)
    }
}

/// Compact axis label for a time offset in ns.
pub fn axis_time(ns: f64) -> String {
    let a = ns.abs();
    if a == 0.0 {
        "0".into()
    } else if a < 1e3 {
        format!("{ns:.0}ns")
    } else if a < 1e6 {
        trim(format!("{:.3}", ns / 1e3)) + "µs"
    } else if a < 1e9 {
        trim(format!("{:.3}", ns / 1e6)) + "ms"
    } else {
        trim(format!("{:.3}", ns / 1e9)) + "s"
    }
}

/// Compact axis label for bytes.
pub fn axis_bytes(v: f64) -> String {
    bytes(v.round() as i64)
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Unix ns -> "2026-11-21 23:52:07 UTC" (civil-from-days, no time-zone database).
pub fn wall(unix_ns: i64) -> String {
    if unix_ns <= 0 {
        return "-".into();
    }
    let secs = unix_ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// [`bytes`] of an unsigned count (clamped to `i64::MAX`).
pub fn bytes_u64(v: u64) -> String {
    bytes(v.min(i64::MAX as u64) as i64)
}

/// [`bytes_u64`] followed by the exact count: "1.50 KiB (1536 B)".
pub fn bytes_exact(v: u64) -> String {
    format!("{} ({v} B)", bytes_u64(v))
}

/// Percentage of `part` in `whole`, one decimal, "-" when whole is 0.
pub fn percent(part: i64, whole: i64) -> String {
    if whole <= 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(80 << 30), "80.00 GiB");
        assert_eq!(bytes(-(1 << 20)), "-1.00 MiB");
        assert_eq!(delta_bytes(1 << 20), "+1.00 MiB");
        assert_eq!(delta_bytes(-(1 << 20)), "\u{2212}1.00 MiB");
        assert_eq!(duration(1_500_000_000), "1.50 s");
        assert_eq!(duration(2_500_000), "2.50 ms");
        assert_eq!(axis_time(2.5e9), "2.5s");
        assert_eq!(wall(1_700_000_000_000_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(percent(1, 4), "25.0%");
    }
}
