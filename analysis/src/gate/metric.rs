//! The memory figures the gate knows how to compare, and their names in baseline files,
//! on the command line and in reports. Owns nothing else.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// One memory figure of a gated entry (a compiled module, or a captured process/device).
///
/// `argument`, `output`, `alias`, `temp`, `host_temp` and `generated_code` follow JAX's
/// `compiled.memory_analysis()` definitions. `total` is `argument + output + temp - alias`
/// (the bytes the executable needs while it runs, whatever the source), `peak` is the
/// peak the source reports (`peak_memory_in_bytes` of `memory_analysis()`, the buffer
/// assignment's peak of an XLA dump, the allocation peak of a capture).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Total,
    Output,
    Temp,
    Argument,
    HostTemp,
    Alias,
    GeneratedCode,
    Peak,
}

impl Metric {
    /// Every metric, in report column order.
    pub const ALL: [Metric; 8] = [
        Metric::Total,
        Metric::Output,
        Metric::Temp,
        Metric::Argument,
        Metric::HostTemp,
        Metric::Alias,
        Metric::GeneratedCode,
        Metric::Peak,
    ];

    /// The metrics compared when the user names none: every one whose growth costs memory
    /// (`alias` growth saves memory, `generated_code` is host code size).
    pub const DEFAULT_GATED: [Metric; 6] = [
        Metric::Total,
        Metric::Output,
        Metric::Temp,
        Metric::Argument,
        Metric::HostTemp,
        Metric::Peak,
    ];

    /// The name used in baseline files, `--metric` and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Total => "total",
            Metric::Output => "output",
            Metric::Temp => "temp",
            Metric::Argument => "argument",
            Metric::HostTemp => "host_temp",
            Metric::Alias => "alias",
            Metric::GeneratedCode => "generated_code",
            Metric::Peak => "peak",
        }
    }

    /// Column heading in human reports.
    pub fn title(self) -> &'static str {
        match self {
            Metric::Total => "Total",
            Metric::Output => "Output",
            Metric::Temp => "Temp",
            Metric::Argument => "Argument",
            Metric::HostTemp => "Host Temp",
            Metric::Alias => "Alias",
            Metric::GeneratedCode => "Code",
            Metric::Peak => "Peak",
        }
    }

    /// `"argument, output, …"`: for error messages.
    pub fn known_names() -> String {
        Metric::ALL
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for a metric name that is not one of [`Metric::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown metric `{name}` (known metrics: {known})")]
pub struct UnknownMetric {
    pub name: String,
    pub known: String,
}

impl FromStr for Metric {
    type Err = UnknownMetric;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().replace('-', "_");
        Metric::ALL
            .into_iter()
            .find(|m| m.name() == wanted)
            .ok_or_else(|| UnknownMetric {
                name: s.to_string(),
                known: Metric::known_names(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_rejected() {
        for m in Metric::ALL {
            assert_eq!(m.name().parse::<Metric>().unwrap(), m);
        }
        assert_eq!("host-temp".parse::<Metric>().unwrap(), Metric::HostTemp);
        let e = "tmp".parse::<Metric>().unwrap_err();
        assert!(e.to_string().contains("unknown metric `tmp`"), "{e}");
        assert!(e.to_string().contains("host_temp"), "{e}");
    }
}
