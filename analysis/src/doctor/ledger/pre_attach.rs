//! The framework pools a late attach (`memwatch attach`) found already made: no allocation
//! call in the capture shows them, so without this they would be counted as context and
//! module memory. The shim's `pre-attach-pjrt-sample` marker gives each pool's size
//! (read by [`memwatch_wire::pre_attach::fold`]); the allocator's samples give what was in
//! use inside it at the ledger's moment.

use super::{Holder, HolderKind, Inputs};
use crate::doctor::evidence::CaptureEvidence;
use crate::size::format_bytes as b;

/// The pools made before the attach of the processes recorded on `device`, one holder
/// each, where the ledger has no pool holder of that process yet; `raw` is the moment
/// (raw ns) the figures inside the pool are taken at.
pub fn pools(
    cap: &CaptureEvidence,
    x: &Inputs<'_>,
    holders: &[Holder],
    device: i32,
    raw: u64,
) -> Vec<Holder> {
    let rt = cap.runtime_ts_of(raw);
    let mut out = Vec::new();
    for (pid, markers) in &cap.loaded.pre_attach_markers {
        let folded = memwatch_wire::pre_attach::fold(markers.iter().map(|(d, t)| (*d, t.as_str())));
        let Some(pool) = folded.get(&i64::from(device)).and_then(|p| p.pool) else {
            continue;
        };
        let has_pool = holders.iter().any(|h| {
            h.pid == Some(*pid)
                && matches!(h.kind, HolderKind::XlaBfcPool | HolderKind::XlaAsyncPool)
        });
        if has_pool {
            continue;
        }
        let mut holder = Holder {
            kind: HolderKind::PreAttachPool,
            pid: Some(*pid),
            name: format!("pid {pid} {}", super::label(HolderKind::PreAttachPool)),
            bytes: pool,
            in_use_bytes: None,
            free_inside_bytes: None,
            largest_free_block_bytes: None,
            allocations: None,
            source: String::new(),
            trend: None,
        };
        super::held::xla_pool_figures(x, &mut holder, *pid, device, rt, &cap.path());
        holder.source = format!(
            "{}: the shim's pre-attach marker (the allocator's first sample after the attach: pool of {}); inside it, the allocator's statistics and the buffers live at the moment",
            cap.path(),
            b(pool)
        );
        out.push(holder);
    }
    out
}
