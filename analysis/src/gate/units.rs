//! Human units for thresholds and reports: parses `2%`, `0.5%`, `64MiB`, `1 GB`, `4096`,
//! and formats bytes in binary units. Owns no policy about which threshold applies.

use thiserror::Error;

/// A threshold string that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnitError {
    #[error("negative threshold `{0}`: thresholds must be zero or more")]
    Negative(String),
    #[error("`{0}` is not a percentage (expected e.g. `2%` or `0.5%`)")]
    NotPercent(String),
    #[error("`{0}` is not a byte size (expected e.g. `64MiB`, `1GiB`, `500MB` or `4096`)")]
    NotBytes(String),
}

/// Parses a relative threshold: `2%`, `0.5 %`, `0%`. The `%` is required so that `2` is
/// never silently read as 2 bytes or 200 %.
pub fn parse_percent(text: &str) -> Result<f64, UnitError> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(UnitError::Negative(text.to_string()));
    }
    let number = t
        .strip_suffix('%')
        .ok_or_else(|| UnitError::NotPercent(text.to_string()))?;
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| UnitError::NotPercent(text.to_string()))?;
    if !value.is_finite() {
        return Err(UnitError::NotPercent(text.to_string()));
    }
    if value < 0.0 {
        return Err(UnitError::Negative(text.to_string()));
    }
    Ok(value)
}

/// Parses an absolute threshold: `64MiB`, `64 MiB`, `64M` (binary), `1GB` (decimal),
/// `4096` (bytes); the rules are [`crate::size`]'s.
pub fn parse_bytes(text: &str) -> Result<u64, UnitError> {
    use crate::size::{parse_size, SizeError};
    parse_size(text).map_err(|e| match e {
        SizeError::Negative(_) => UnitError::Negative(text.to_string()),
        SizeError::NotBytes(_) | SizeError::TooLarge(_) => UnitError::NotBytes(text.to_string()),
    })
}

/// `+12.50%`, `-3.00%`, `new` (growth from zero), `0.00%`.
pub fn format_percent(percent: Option<f64>) -> String {
    match percent {
        Some(0.0) => "0.00%".to_string(),
        Some(p) => format!("{p:+.2}%"),
        None => "new".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("2%").unwrap(), 2.0);
        assert_eq!(parse_percent(" 0.5 %").unwrap(), 0.5);
        assert_eq!(parse_percent("0%").unwrap(), 0.0);
        assert!(matches!(parse_percent("-2%"), Err(UnitError::Negative(_))));
        assert!(matches!(parse_percent("2"), Err(UnitError::NotPercent(_))));
        assert!(matches!(parse_percent("x%"), Err(UnitError::NotPercent(_))));
        assert!(matches!(
            parse_percent("inf%"),
            Err(UnitError::NotPercent(_))
        ));
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("64 MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("0").unwrap(), 0);
        assert!(matches!(parse_bytes("-1MiB"), Err(UnitError::Negative(_))));
        assert!(matches!(parse_bytes("lots"), Err(UnitError::NotBytes(_))));
        assert!(matches!(parse_bytes(""), Err(UnitError::NotBytes(_))));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_percent(Some(12.5)), "+12.50%");
        assert_eq!(format_percent(None), "new");
    }
}
