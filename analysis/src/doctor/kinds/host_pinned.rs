//! Pinned host memory: a page-locked host allocation (`cudaHostAlloc`, `hipHostMalloc`,
//! a framework's pinned pool) failed. It is host RAM, not GPU memory.

use super::{exact, Ctx};
use crate::doctor::verdict::{Fix, Kind, Verdict};

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let f = ctx.failure?;
    let pinned_frames = ctx.log.exceptions.iter().any(|e| {
        e.frames
            .iter()
            .any(|fr| fr.function.contains("hostAlloc") || fr.function.contains("pinned"))
    });
    if !(f.host || f.request.is_none() && pinned_frames) {
        return None;
    }
    let mut v = ctx.base(Kind::HostPinned);
    let req = f.request;
    if let Some(r) = req {
        v.figures.insert("request_bytes".into(), r);
    }
    v.headline = match req {
        Some(r) => format!(
            "A request for {} of pinned (page-locked) host memory failed: host RAM, not GPU memory.",
            crate::size::format_bytes(r)
        ),
        None => "A pinned (page-locked) host memory allocation failed: host RAM, not GPU memory."
            .into(),
    };
    v.why = format!(
        "The failed call allocates page-locked host memory{}; the GPU's memory was not involved. The host could not lock that much RAM (its size and the lock limit are not in the capture).",
        req.map(|r| format!(" ({})", exact(r))).unwrap_or_default()
    );
    v.fix = Fix {
        advice: "Pin less: allocate pinned staging buffers in chunks and reuse them, or use pageable memory for this transfer; check `ulimit -l` and the host's free RAM.".into(),
        check: None,
    };
    Some(v)
}
