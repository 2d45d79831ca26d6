//! Byte sizes as people type them, one rule for every flag and spec that takes one
//! (`--capacity`, `--max-increase-bytes`, `strix-halo:vram=…`): a number (fractions
//! allowed) and an optional unit. `KiB`…`EiB` and the bare letters `K`…`E` are binary
//! (as in `free -g`, XLA's logs and ROCm's tools); `KB`…`EB` are decimal; `B` is bytes.
//! Case does not matter; a space may separate number and unit. Owns parsing only; which
//! sizes make sense is the caller's business.

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

#[cfg(test)]
mod tests {
    use super::*;

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
