//! Byte sizes as people type and read them: one rule for every flag and spec that takes
//! one, and one format for every report that prints one.
//!
//! Parsing ([`parse_size`]: `--capacity`, `--max-increase-bytes`, `strix-halo:vram=…`): a
//! number (fractions allowed) and an optional unit. `KiB`…`EiB` and the bare letters
//! `K`…`E` are binary (as in `free -g`, XLA's logs and ROCm's tools); `KB`…`EB` are
//! decimal; `B` is bytes. Case does not matter; a space may separate number and unit.
//! Printing ([`format_bytes`], [`format_signed_bytes`]): binary units with two decimals
//! (`3.25 GiB`, `576.00 MiB`), whole bytes below 1 KiB (`768 B`) — the form XLA's own
//! messages use, so a figure can be compared with the log it came from. Which sizes make
//! sense is the caller's business.

/// Why a text is not a byte size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("{0:?}: not a number of bytes (e.g. 4096, 64MiB, 1.5G, 2TB)")]
    NotBytes(String),
    #[error("{0:?}: negative size")]
    Negative(String),
    #[error("{0:?}: more than 2^64 bytes")]
    TooLarge(String),
}

/// Units, longest first so `kib` is not read as `b`.
const UNITS: [(&str, u64); 19] = [
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("pib", 1 << 50),
    ("eib", 1 << 60),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("pb", 1_000_000_000_000_000),
    ("eb", 1_000_000_000_000_000_000),
    ("k", 1 << 10),
    ("m", 1 << 20),
    ("g", 1 << 30),
    ("t", 1 << 40),
    ("p", 1 << 50),
    ("e", 1 << 60),
    ("b", 1),
];

/// Parses a byte size; fractions are rounded down to whole bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let (num, mult) = UNITS
        .iter()
        .find_map(|&(u, m)| {
            let n = lower.strip_suffix(u)?.trim_end();
            // `1e9` is a number, not 1 EiB·9: a unit follows a digit or a point.
            n.ends_with(|c: char| c.is_ascii_digit() || c == '.')
                .then_some((n, m))
        })
        .unwrap_or((lower.as_str(), 1));
    if num.starts_with('-') {
        return Err(SizeError::Negative(t.to_string()));
    }
    if let Ok(whole) = num.parse::<u64>() {
        return whole
            .checked_mul(mult)
            .ok_or_else(|| SizeError::TooLarge(t.to_string()));
    }
    let v: f64 = num
        .parse()
        .map_err(|_| SizeError::NotBytes(t.to_string()))?;
    if v.is_nan() || (v.is_infinite() && num.contains("inf")) {
        return Err(SizeError::NotBytes(t.to_string()));
    }
    if v < 0.0 {
        return Err(SizeError::Negative(t.to_string()));
    }
    let bytes = v * mult as f64;
    if bytes >= u64::MAX as f64 {
        return Err(SizeError::TooLarge(t.to_string()));
    }
    Ok(bytes as u64)
}

/// Binary units for people: `3.25 GiB`, `576.00 MiB`, `8.00 KiB`, `768 B`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

/// A signed amount or difference: `+16.00 MiB`, `-4.00 KiB`, `0 B`.
pub fn format_signed_bytes(delta: i128) -> String {
    let magnitude = u64::try_from(delta.unsigned_abs()).unwrap_or(u64::MAX);
    match delta.signum() {
        1 => format!("+{}", format_bytes(magnitude)),
        -1 => format!("-{}", format_bytes(magnitude)),
        _ => "0 B".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_binary_units_with_two_decimals() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1.00 KiB");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(576 << 20), "576.00 MiB");
        assert_eq!(format_bytes(3_489_660_928), "3.25 GiB");
        assert_eq!(format_bytes(6_006_243_328), "5.59 GiB");
        assert_eq!(format_bytes(u64::MAX), "16.00 EiB");
        assert_eq!(format_signed_bytes(-(4 << 10)), "-4.00 KiB");
        assert_eq!(format_signed_bytes(16 << 20), "+16.00 MiB");
        assert_eq!(format_signed_bytes(0), "0 B");
        assert_eq!(format_signed_bytes(-(u64::MAX as i128) - 5), "-16.00 EiB");
    }

    #[test]
    fn printed_sizes_parse_back_to_within_rounding() {
        for b in [1u64, 1000, 4096, 123_456_789, 3 << 30, 80 << 30, 1 << 50] {
            let back = parse_size(&format_bytes(b)).unwrap();
            assert!(
                back.abs_diff(b) as f64 <= b as f64 * 0.005 + 1.0,
                "{b} -> {back}"
            );
        }
    }

    #[test]
    fn binary_letters_decimal_b_units_and_fractions() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4096B").unwrap(), 4096);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("64 mib").unwrap(), 64 << 20);
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        assert_eq!(parse_size("2TB").unwrap(), 2_000_000_000_000);
        assert_eq!(parse_size("1PiB").unwrap(), 1 << 50);
        assert_eq!(parse_size("1EiB").unwrap(), 1 << 60);
        assert_eq!(parse_size("1E").unwrap(), 1 << 60);
        assert_eq!(parse_size("1e9").unwrap(), 1_000_000_000);
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size(" 96g ").unwrap(), 96 << 30);
    }

    #[test]
    fn bad_sizes_say_why() {
        assert!(matches!(parse_size("-1MiB"), Err(SizeError::Negative(_))));
        assert!(matches!(parse_size("-0.5"), Err(SizeError::Negative(_))));
        assert!(matches!(parse_size("lots"), Err(SizeError::NotBytes(_))));
        assert!(matches!(parse_size(""), Err(SizeError::NotBytes(_))));
        assert!(matches!(parse_size("GiB"), Err(SizeError::NotBytes(_))));
        assert!(matches!(parse_size("inf"), Err(SizeError::NotBytes(_))));
        assert!(matches!(parse_size("NaN"), Err(SizeError::NotBytes(_))));
        assert!(matches!(parse_size("16EiB"), Err(SizeError::TooLarge(_))));
        assert!(matches!(
            parse_size("99999999999999999999"),
            Err(SizeError::TooLarge(_))
        ));
        assert!(matches!(parse_size("1e30"), Err(SizeError::TooLarge(_))));
        assert!(matches!(parse_size("1e400"), Err(SizeError::TooLarge(_))));
    }
}
