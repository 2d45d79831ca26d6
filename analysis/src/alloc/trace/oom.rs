//! Traces from a BFC out-of-memory dump in an XLA/JAX log: the live set at the failure
//! followed by the request that failed ("how much memory would this moment need?").

use super::{Builder, Trace, TraceError, MAX_POOL_BYTES};

/// Builds a trace from a BFC out-of-memory dump: the live set at the failure (every
/// in-use chunk, in address order, which is the lower end's allocation order) followed by
/// the request that failed. Replaying it asks "how much memory would this moment need?".
/// Chunk sizes are exact (the dump prints them); requested sizes are used when printed.
pub fn from_bfc_oom(oom: &crate::log::BfcOom) -> Result<Trace, TraceError> {
    if let Some((covered, pool)) = oom.chunk_dump_gap() {
        return Err(TraceError::Field {
            line: oom.chunk_dump_end().line,
            field: "chunk dump",
            msg: if oom.regions.is_empty() {
                "its chunks follow no `Next region of size` line, so whether the dump is whole \
                 (and the live set at the failure) is unknown"
                    .to_string()
            } else {
                format!(
                    "cut off here: the chunks cover {covered} of the {pool}-byte pool, so the live set at the failure is unknown"
                )
            },
        });
    }
    let mut b = Builder::default();
    let mut chunks: Vec<&crate::log::Chunk> = oom.chunks.iter().filter(|c| c.in_use).collect();
    chunks.sort_by_key(|c| c.address);
    for (i, c) in chunks.iter().enumerate() {
        let tag = c
            .executable
            .clone()
            .or_else(|| c.annotation.clone())
            .or_else(|| c.op.clone())
            .or_else(|| Some(format!("chunk@{:#x}", c.address)));
        b.alloc(i as u64, c.requested_size.unwrap_or(c.size), tag, c.at.line)?;
    }
    if oom.rounded_bytes == 0 {
        return Err(TraceError::Field {
            line: oom.at.line,
            field: "rounded to",
            msg: "the OOM line states no request size".into(),
        });
    }
    b.alloc(
        chunks.len() as u64,
        oom.rounded_bytes,
        Some("failed request".into()),
        oom.at.line,
    )?;
    let mut t = b.finish("bfc_oom_dump");
    t.meta.bytes_limit = oom.pool_bytes();
    t.meta.stated_limit = oom.limit_above_pool();
    if let Some(pool) = t.meta.bytes_limit.filter(|p| *p > MAX_POOL_BYTES) {
        return Err(TraceError::Field {
            line: oom.at.line,
            field: "Next region of size",
            msg: format!("a {pool}-byte pool is larger than any device (the limit is 2^60 bytes)"),
        });
    }
    let has_gap = oom
        .chunks
        .iter()
        .any(|c| c.tag.as_deref() == Some("central_gap"));
    t.meta.preallocate = Some(oom.regions.len() <= 1 && (has_gap || oom.end.is_some()));
    Ok(t)
}

/// Reads the last BFC out-of-memory dump of an XLA/JAX log (see [`from_bfc_oom`]).
pub fn read_oom_log(text: &str, name: &std::path::Path) -> Result<Trace, TraceError> {
    let mut report = crate::log::LogReport::default();
    crate::log::parse_log(text.as_bytes(), name, &mut report)
        .map_err(|e| TraceError::Capture(e.to_string()))?;
    let oom = report.ooms.last().ok_or(TraceError::NoOomDump)?;
    from_bfc_oom(oom)
}
