//! What existed before a late attach (`memwatch attach`), as the shim writes it in its
//! markers, read back: the device's used memory at the attach (`pre-attach-baseline
//! device=D used=B total=B free=B source=API`), the framework allocator's first sample
//! after it (`pre-attach-pjrt-sample device=D bytes_in_use=B … pool_bytes=B
//! bytes_limit=B …`) and the live buffers the first executes named
//! (`pre-attach-pjrt-buffers count=N bytes=B`, rewritten as more are found: the last one
//! counts). The one reading of these markers; the daemon's run page and the doctor's
//! ledger both use it.

use std::collections::BTreeMap;

/// The memory one device held before the attach (each figure as recorded, or unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreAttach {
    /// Used device memory at the attach (every process and the driver), and the call
    /// that read it.
    pub used: Option<(u64, String)>,
    /// The device's total memory, as the same call read it.
    pub total: Option<u64>,
    /// The framework allocator's pool and bytes in use at its first sample after attach.
    pub pool: Option<u64>,
    pub pool_in_use: Option<u64>,
    /// Live buffers made before the attach that the first executes named: count, bytes.
    pub buffers: Option<(u64, u64)>,
}

/// `key=value` of a marker's words, a byte count or count (`-` or a negative: not
/// reported).
fn field(text: &str, key: &str) -> Option<u64> {
    word(text, key).and_then(|v| v.parse().ok())
}

fn word<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Whether a marker's text is one of the pre-attach markers.
pub fn is_pre_attach(text: &str) -> bool {
    text.starts_with("pre-attach-")
}

/// Folds the markers (device the record names, text) of one process into what each
/// device held before the attach; the marker's own `device=` wins over the record's.
/// Buffers reported without a device count for every device the markers name.
pub fn fold<'a>(markers: impl IntoIterator<Item = (i64, &'a str)>) -> BTreeMap<i64, PreAttach> {
    let mut out: BTreeMap<i64, PreAttach> = BTreeMap::new();
    let mut buffers: Option<(u64, u64)> = None;
    for (device, text) in markers {
        let device = word(text, "device")
            .and_then(|d| d.parse::<i64>().ok())
            .unwrap_or(device);
        if text.starts_with("pre-attach-baseline ") {
            if let Some(used) = field(text, "used") {
                let source = word(text, "source").unwrap_or("the runtime").to_string();
                let e = out.entry(device).or_default();
                e.used = Some((used, source));
                e.total = field(text, "total").filter(|&t| t > 0);
            }
        } else if text.starts_with("pre-attach-pjrt-sample ") {
            let e = out.entry(device).or_default();
            e.pool = field(text, "pool_bytes").filter(|&p| p > 0);
            e.pool_in_use = field(text, "bytes_in_use");
        } else if text.starts_with("pre-attach-pjrt-buffers ") {
            if let (Some(n), Some(b)) = (field(text, "count"), field(text, "bytes")) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The markers of a real attach (testdata/h200-attach/jax_leak), verbatim.
    #[test]
    fn reads_the_markers_a_real_attach_wrote() {
        let texts = [
            "pre-attach-baseline-process pid=10767 pdev=00000000:00:06.0 vram=15590227968 source=nvidia-smi",
            "pre-attach-baseline device=0 used=15599468544 total=150109880320 free=134510411776 source=cuMemGetInfo_v2",
            "pre-attach-pjrt-sample device=0 bytes_in_use=8388608 peak_bytes_in_use=41951232 pool_bytes=15011414016 bytes_limit=15011414016 num_allocs=38 source=PJRT_Device_MemoryStats",
            "pre-attach-pjrt-buffers count=1 bytes=4194304 source=execute-arguments",
            "memwatch-attach stop restored_slots=42",
        ];
        assert!(texts[..4].iter().all(|t| is_pre_attach(t)) && !is_pre_attach(texts[4]));
        let got = fold(texts.iter().map(|t| (0, *t)));
        assert_eq!(got.len(), 1);
        let d = &got[&0];
        assert_eq!(d.used, Some((15599468544, "cuMemGetInfo_v2".to_string())));
        assert_eq!(d.total, Some(150109880320));
        assert_eq!((d.pool, d.pool_in_use), (Some(15011414016), Some(8388608)));
        assert_eq!(d.buffers, Some((1, 4194304)));
    }

    #[test]
    fn unreported_figures_stay_unknown() {
        let got = fold([
            (
                1,
                "pre-attach-baseline device=1 used=- total=- source=hipMemGetInfo",
            ),
            (
                1,
                "pre-attach-pjrt-sample device=1 bytes_in_use=-1 pool_bytes=0",
            ),
        ]);
        let d = &got[&1];
        assert_eq!(
            (d.used.clone(), d.total, d.pool, d.pool_in_use),
            (None, None, None, None)
        );
    }
}
