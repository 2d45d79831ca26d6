//! The device ledger of a stored diagnosis (the doctor's `ledger`: every byte of the
//! failing device at the failure, or of the busiest device at its peak, by holder), read
//! from the stored document when it has one, and formatted for the run page's verdict:
//! one row per holder, their sum written as the sum, the device's total beside it and
//! whether it closes. A document without a ledger shows none.

use serde::{Deserialize, Serialize};

use crate::render::fmt;

/// The ledger as stored (fields the page shows; unknown ones ignored).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredLedger {
    pub pid: Option<u32>,
    pub device: i32,
    pub moment: String,
    pub at_ns: Option<u64>,
    pub total_bytes: Option<u64>,
    pub total_source: Option<String>,
    pub holders: Vec<StoredHolder>,
    pub accounted_bytes: u64,
    pub closes: bool,
    pub unattributed_bytes: Option<u64>,
    pub missing: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredHolder {
    pub kind: String,
    pub name: String,
    pub bytes: u64,
    pub in_use_bytes: Option<u64>,
    pub free_inside_bytes: Option<u64>,
    pub source: String,
    pub trend: Option<StoredTrend>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredTrend {
    pub bytes_per_unit: u64,
    pub unit: String,
    pub steps: u64,
}

/// The ledger, every figure formatted.
pub struct LedgerView {
    /// "GPU 0 at the failure (pid 123, 4.20 s)".
    pub title: String,
    /// (holder, bytes, inside it, trend, source).
    pub rows: Vec<(String, String, String, String, String)>,
    /// "sum 139.80 GiB", the holders added up.
    pub sum: String,
    /// The device's total and whether the sum closes on it.
    pub closing: String,
    pub closes: bool,
}

pub fn ledger_view(l: &StoredLedger) -> LedgerView {
    let mut title = format!("GPU {} at the {}", l.device, l.moment.replace('_', " "));
    let mut about = Vec::new();
    if let Some(p) = l.pid {
        about.push(format!("pid {p}"));
    }
    if let Some(t) = l.at_ns {
        about.push(fmt::duration(t.min(i64::MAX as u64) as i64));
    }
    if !about.is_empty() {
        title.push_str(&format!(" ({})", about.join(", ")));
    }
    let rows = l
        .holders
        .iter()
        .map(|h| {
            let mut inside = Vec::new();
            if let Some(u) = h.in_use_bytes {
                inside.push(format!("{} in use", fmt::bytes_u64(u)));
            }
            if let Some(f) = h.free_inside_bytes {
                inside.push(format!("{} free inside", fmt::bytes_u64(f)));
            }
            let trend = h.trend.as_ref().map_or_else(String::new, |t| {
                if t.steps > 0 {
                    format!(
                        "+{} per {} ({} steps)",
                        fmt::bytes_u64(t.bytes_per_unit),
                        t.unit,
                        t.steps
                    )
                } else {
                    format!("+{} per {}", fmt::bytes_u64(t.bytes_per_unit), t.unit)
                }
            });
            (
                h.name.clone(),
                fmt::bytes_u64(h.bytes),
                inside.join(", "),
                trend,
                h.source.clone(),
            )
        })
        .collect();
    let sum: u64 = l.holders.iter().map(|h| h.bytes).sum();
    let closing = match l.total_bytes {
        Some(t) if l.closes => format!(
            "the device's total is {}{}: the holders account for it",
            fmt::bytes_u64(t),
            l.total_source
                .as_ref()
                .map_or_else(String::new, |s| format!(" ({s})"))
        ),
        Some(t) => {
            let mut s = format!(
                "the device's total is {}; the holders do not close on it",
                fmt::bytes_u64(t)
            );
            if let Some(u) = l.unattributed_bytes {
                s.push_str(&format!(
                    " ({} in use by no known holder)",
                    fmt::bytes_u64(u)
                ));
            }
            s
        }
        None => "the device's total was not recorded, so the sum is not checked against it".into(),
    };
    let mut closing = closing;
    if !l.closes && !l.missing.is_empty() {
        closing.push_str(&format!("; would close with: {}", l.missing.join("; ")));
    }
    LedgerView {
        title,
        rows,
        sum: fmt::bytes_u64(sum),
        closing,
        closes: l.closes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_sum_as_shown_and_a_missing_total_is_said() {
        let doc = serde_json::json!({
            "pid": 7, "device": 0, "moment": "failure", "at_ns": 4_200_000_000u64,
            "total_bytes": 3u64 << 30, "holders": [
                {"kind": "xla_bfc_pool", "name": "pid 7 XLA BFC pool", "bytes": 2u64 << 30,
                 "in_use_bytes": 3u64 << 29, "free_inside_bytes": 1u64 << 29, "source": "capture",
                 "trend": {"bytes_per_unit": 64u64 << 20, "unit": "execute of jit_update", "steps": 30}},
                {"kind": "free", "name": "free", "bytes": 1u64 << 30, "source": "nvidia-smi"}
            ], "accounted_bytes": 3u64 << 30, "closes": true, "missing": [], "future_field": 1
        });
        let l: StoredLedger = serde_json::from_value(doc).unwrap();
        let v = ledger_view(&l);
        assert_eq!(v.title, "GPU 0 at the failure (pid 7, 4.20 s)");
        assert_eq!(v.sum, "3.00 GiB");
        assert!(v.closing.starts_with("the device's total is 3.00 GiB"));
        assert_eq!(v.rows[0].2, "1.50 GiB in use, 512.00 MiB free inside");
        assert_eq!(
            v.rows[0].3,
            "+64.00 MiB per execute of jit_update (30 steps)"
        );
        let none = ledger_view(&StoredLedger {
            closes: false,
            ..StoredLedger::default()
        });
        assert!(none.closing.contains("not recorded") && !none.closing.contains("0 B"));
    }
}
