//! The JSON documents `testdata/h200/bfc/bfc_validate.py` writes: ground-truth runs of
//! the real allocator, whose steps become the trace and whose recorded statistics the
//! [`Observed`] values a replay is checked against.

use std::collections::HashMap;

use serde::Deserialize;

use super::{Builder, Observed, Trace, TraceError, MAX_POOL_BYTES};

#[derive(Deserialize)]
struct ValidateDoc {
    #[serde(default)]
    env: HashMap<String, String>,
    #[serde(default)]
    initial_stats: HashMap<String, serde_json::Value>,
    #[serde(default)]
    oom_step: Option<usize>,
    steps: Vec<ValidateStep>,
}

#[derive(Deserialize)]
struct ValidateStep {
    op: String,
    id: u64,
    #[serde(default)]
    size: Option<u64>,
    #[serde(default = "yes")]
    ok: bool,
    #[serde(default)]
    bytes_in_use: Option<u64>,
    #[serde(default)]
    largest_free_block_bytes: Option<u64>,
}

fn yes() -> bool {
    true
}

/// Whether a text is a `bfc_validate.py` output (one JSON object with `steps`) rather
/// than JSON lines (whose first line is an event object with `op`).
pub fn looks_like_validate_doc(text: &str) -> bool {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(first) {
        return m.contains_key("steps") && !m.contains_key("op");
    }
    // A pretty-printed document spans several lines.
    first.starts_with('{') && text.contains("\"steps\"") && !first.contains("\"op\"")
}

/// Reads a `bfc_validate.py` document: its steps become the trace, its recorded stats the
/// ground truth. A failed allocation stays in the trace (the replay must fail there too);
/// a later free of that id would be a bug of the recorder and is rejected.
pub fn read_validate_doc(text: &str) -> Result<Trace, TraceError> {
    let doc: ValidateDoc = serde_json::from_str(text).map_err(|e| TraceError::Json {
        line: e.line(),
        msg: e.to_string(),
    })?;
    let mut b = Builder::default();
    let mut observed = Vec::with_capacity(doc.steps.len());
    let mut all_observed = true;
    for (i, st) in doc.steps.iter().enumerate() {
        let line = i + 1;
        match st.op.as_str() {
            "alloc" => {
                let size = st.size.ok_or(TraceError::Field {
                    line,
                    field: "size",
                    msg: "missing in an alloc step".into(),
                })?;
                b.alloc(st.id, size, None, line)?;
                if !st.ok {
                    // The real allocation failed: the buffer never became live, but its
                    // slot stays taken (a replay that succeeds there would keep it).
                    b.live.remove(&st.id);
                }
            }
            "free" => b.free(st.id, line)?,
            other => {
                return Err(TraceError::UnknownOp {
                    line,
                    op: other.to_string(),
                })
            }
        }
        match (st.bytes_in_use, st.largest_free_block_bytes) {
            (Some(u), Some(l)) => observed.push(Observed {
                ok: st.ok,
                bytes_in_use: u,
                largest_free_block_bytes: l,
            }),
            _ => all_observed = false,
        }
    }
    if b.ops.is_empty() {
        return Err(TraceError::Empty);
    }
    let mut t = b.finish("bfc_validate");
    if all_observed {
        t.observed = Some(observed);
    }
    t.meta.bytes_limit = doc
        .initial_stats
        .get("bytes_limit")
        .and_then(|v| v.as_u64());
    if let Some(limit) = t.meta.bytes_limit.filter(|l| *l > MAX_POOL_BYTES) {
        return Err(TraceError::Field {
            line: 1,
            field: "initial_stats.bytes_limit",
            msg: format!("{limit} bytes is larger than any device (the limit is 2^60 bytes)"),
        });
    }
    let prealloc = doc
        .env
        .get("XLA_PYTHON_CLIENT_PREALLOCATE")
        .or_else(|| doc.env.get("XLA_CLIENT_PREALLOCATE"))
        .map(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0"));
    t.meta.preallocate = Some(prealloc.unwrap_or(true));
    t.meta.oom_step = doc.oom_step;
    Ok(t)
}
