//! What existed before a late attach (`memwatch attach`), as the shim recorded it in its
//! markers, one device at a time: the device's used memory at attach
//! (`pre-attach-baseline … used=B … source=API`), what the framework's pool held at its
//! first sample after attach (`pre-attach-pjrt-sample … pool_bytes=B bytes_in_use=B`) and
//! the live buffers the first executes named (`pre-attach-pjrt-buffers count=N bytes=B`).
//! The driver view starts at the attach, so this memory is shown as its own line ("held
//! before attach"), never as 0 B or as unexplained.

use std::collections::BTreeMap;

use crate::db::{Store, StoreError};
use crate::render::fmt;

/// The memory one device held before the attach (each figure as recorded, or unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PreAttach {
    /// Used device memory at attach (every process and the driver), and the call that read it.
    pub used: Option<(i64, String)>,
    /// The framework allocator's pool and bytes in use at its first sample after attach.
    pub pool: Option<i64>,
    pub pool_in_use: Option<i64>,
    /// Live buffers made before attach that the first executes named: count, bytes.
    pub buffers: Option<(i64, i64)>,
}

/// `key=value` of a marker's words (`-`: not reported).
fn field(text: &str, key: &str) -> Option<i64> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .filter(|v: &i64| *v >= 0)
}

fn word<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Folds the markers (device, text) of a run into what each device held before the
/// attach; buffers reported without a device count for every device the markers name.
pub(crate) fn fold<'a>(
    markers: impl IntoIterator<Item = (i64, &'a str)>,
) -> BTreeMap<i64, PreAttach> {
    let mut out: BTreeMap<i64, PreAttach> = BTreeMap::new();
    let mut buffers: Option<(i64, i64)> = None;
    for (device, text) in markers {
        let device = field(text, "device").unwrap_or(device);
        if text.starts_with("pre-attach-baseline ") {
            if let Some(used) = field(text, "used") {
                let source = word(text, "source").unwrap_or("the runtime").to_string();
                out.entry(device).or_default().used = Some((used, source));
            }
        } else if text.starts_with("pre-attach-pjrt-sample ") {
            let e = out.entry(device).or_default();
            e.pool = field(text, "pool_bytes").filter(|&p| p > 0);
            e.pool_in_use = field(text, "bytes_in_use");
        } else if text.starts_with("pre-attach-pjrt-buffers ") {
            if let (Some(n), Some(b)) = (field(text, "count"), field(text, "bytes")) {
                // The marker is rewritten as more are found: the last one counts.
                buffers = Some((n, b));
            }
        }
    }
    if let Some(b) = buffers {
        for e in out.values_mut() {
            e.buffers = Some(b);
        }
    }
    out
}

impl PreAttach {
    /// The run page's line: "Held before attach: …", every part known, none invented.
    pub(crate) fn line(&self) -> String {
        let mut parts = Vec::new();
        if let Some((used, source)) = &self.used {
            parts.push(format!(
                "{} used on the device at attach (every process and the driver; {source})",
                fmt::bytes(*used)
            ));
        }
        match (self.pool, self.pool_in_use) {
            (Some(p), Some(u)) => parts.push(format!(
                "the framework's pool held {} with {} in use at its first sample",
                fmt::bytes(p),
                fmt::bytes(u)
            )),
            (Some(p), None) => parts.push(format!("the framework's pool held {}", fmt::bytes(p))),
            (None, Some(u)) => parts.push(format!(
                "the framework allocator had {} in use at its first sample",
                fmt::bytes(u)
            )),
            (None, None) => {}
        }
        if let Some((n, b)) = self.buffers {
            parts.push(format!(
                "the first executes named {n} live buffer{} of {} made before attach",
                if n == 1 { "" } else { "s" },
                fmt::bytes(b)
            ));
        }
        if parts.is_empty() {
            return String::new();
        }
        format!(
            "Held before attach: {}. The driver view starts at the attach: allocations made before it are not in its live bytes.",
            parts.join("; ")
        )
    }
}

/// What each device of run `run` held before its attach; empty when it was no attach.
pub(crate) async fn of_run(
    store: &Store,
    run: i64,
) -> Result<BTreeMap<i64, PreAttach>, StoreError> {
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT device, text FROM annotations WHERE run_id = $1 AND text LIKE $2 ORDER BY ts_ns, id",
    )
    .bind(run)
    .bind("pre-attach-%")
    .fetch_all(&store.pool)
    .await?;
    Ok(fold(rows.iter().map(|(d, t)| (*d, t.as_str()))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_fold_per_device_and_unknowns_stay_unknown() {
        let m = fold([
            (
                0,
                "pre-attach-baseline device=0 used=13421772800 total=150754820096 free=137333047296 source=cuMemGetInfo_v2",
            ),
            (
                0,
                "pre-attach-pjrt-sample device=0 bytes_in_use=3221225472 peak_bytes_in_use=- pool_bytes=12884901888 bytes_limit=12884901888 num_allocs=- source=PJRT_Device_MemoryStats",
            ),
            (-1, "pre-attach-pjrt-buffers count=2 bytes=1073741824 source=execute-arguments"),
            (-1, "pre-attach-pjrt-buffers count=3 bytes=1342177280 source=execute-arguments"),
        ]);
        let d = &m[&0];
        assert_eq!(d.used, Some((13421772800, "cuMemGetInfo_v2".into())));
        assert_eq!(
            (d.pool, d.pool_in_use),
            (Some(12884901888), Some(3221225472))
        );
        assert_eq!(d.buffers, Some((3, 1342177280)));
        let line = d.line();
        assert!(
            line.starts_with("Held before attach: 12.50 GiB used"),
            "{line}"
        );
        assert!(line.contains("3 live buffers of 1.25 GiB"), "{line}");
        // A sample without a pool size says nothing of the pool, not 0 B.
        let m = fold([(
            1,
            "pre-attach-pjrt-sample device=1 bytes_in_use=- peak_bytes_in_use=- pool_bytes=- bytes_limit=- num_allocs=- source=PJRT_Device_MemoryStats",
        )]);
        assert_eq!(m[&1], PreAttach::default());
        assert_eq!(m[&1].line(), "");
    }
}
