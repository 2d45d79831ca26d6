//! Two stored snapshots' dumps side by side (the Compare page's snapshot section):
//! allocated, pending free, cached free and reserved bytes at the dump, segments and
//! blocks, and allocated bytes per allocation site (the user's frame, every frame of
//! its first stack below), with the difference B − A. A run that is not a snapshot, or
//! whose segments were not stored, is missing ("—"), never 0 B; a decrease is a
//! difference written "−X", never a size.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use memwatch_analysis::torch::model::BlockState;
use memwatch_analysis::torch::Frame;

use super::dump::{self, Dump, StateBytes};
use super::stack::{site_label, StackView};
use crate::app::error::AppError;
use crate::app::state::AppState;
use crate::render::fmt;

/// Sites listed by name; the rest are one row.
const SITES: usize = 30;

pub(crate) struct DumpRow {
    pub key: String,
    pub a: String,
    pub b: String,
    /// B − A: "+X", "−X", "no change", or "—" when a side is missing.
    pub delta: String,
    pub cls: &'static str,
    /// The site's stack (site rows).
    pub stack: Option<StackView>,
}

pub(crate) struct DumpCompare {
    pub figures: Vec<DumpRow>,
    pub sites: Vec<DumpRow>,
    /// Why a side is missing (empty: both are there).
    pub notes: Vec<String>,
}

/// One side: a device's figures at the dump and its allocated bytes per site.
struct Side {
    reserved: u64,
    bytes: StateBytes,
    segments: u64,
    blocks: u64,
    /// Site -> (allocated bytes, the frames of its first stack).
    sites: BTreeMap<String, (u64, Vec<Frame>)>,
}

async fn side(
    st: &AppState,
    run: i64,
    device: i32,
    notes: &mut Vec<String>,
) -> Result<Option<Side>, AppError> {
    if !dump::is_snapshot(&st.store, run).await? {
        notes.push(format!(
            "Run #{run} was not stored from a PyTorch snapshot: it has no dump."
        ));
        return Ok(None);
    }
    let d: Dump = dump::load(&st.store, run).await?;
    let segs = d.segments(device);
    if segs.is_empty() {
        notes.push(format!(
            "Run #{run} has no segments of GPU {device} stored (none in the snapshot, or imported by a memwatch older than the segments view)."
        ));
        return Ok(None);
    }
    let (reserved, bytes) = d.totals(device);
    let held = || {
        segs.iter()
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.state == BlockState::ActiveAllocated)
    };
    let wanted: BTreeSet<u32> = held().filter_map(|b| b.stack).collect();
    let frames: HashMap<u32, Vec<Frame>> = dump::stacks(&st.store, run, &wanted).await?;
    let mut sites: BTreeMap<String, (u64, Vec<Frame>)> = BTreeMap::new();
    for b in held() {
        let f = b.stack.and_then(|n| frames.get(&n));
        let name = f.map_or_else(
            || memwatch_analysis::torch::stacks::UNKNOWN_SITE.to_string(),
            |f| site_label(f),
        );
        let e = sites
            .entry(name)
            .or_insert_with(|| (0, f.cloned().unwrap_or_default()));
        e.0 += b.size;
    }
    Ok(Some(Side {
        reserved,
        bytes,
        segments: segs.len() as u64,
        blocks: segs.iter().map(|s| s.blocks.len() as u64).sum(),
        sites,
    }))
}

/// A site's allocated bytes in A and in B (`None`: that dump holds none of it) and the
/// frames of its first stack.
type SiteSides<'a> = (Option<u64>, Option<u64>, Option<&'a Vec<Frame>>);

/// "+X" / "−X" (a true minus sign) / "no change".
fn difference(a: u64, b: u64, count: bool) -> (String, &'static str) {
    let text = |v: u64| {
        if count {
            v.to_string()
        } else {
            fmt::bytes_u64(v)
        }
    };
    match b.cmp(&a) {
        std::cmp::Ordering::Greater => (format!("+{}", text(b - a)), "up"),
        std::cmp::Ordering::Less => (format!("\u{2212}{}", text(a - b)), "down"),
        std::cmp::Ordering::Equal => ("no change".into(), ""),
    }
}

fn row(key: &str, a: Option<u64>, b: Option<u64>, count: bool) -> DumpRow {
    let text = |v: Option<u64>| match v {
        None => "—".to_string(),
        Some(v) if count => v.to_string(),
        Some(v) => fmt::bytes_u64(v),
    };
    let (delta, cls) = match (a, b) {
        (Some(a), Some(b)) => difference(a, b, count),
        _ => ("—".into(), ""),
    };
    DumpRow {
        key: key.into(),
        a: text(a),
        b: text(b),
        delta,
        cls,
        stack: None,
    }
}

/// The dumps of run `a` (device `da`) and run `b` (device `db`) side by side; `None`
/// when neither is a snapshot run.
pub(crate) async fn compare_dumps(
    st: &AppState,
    (a, da): (i64, i64),
    (b, db): (i64, i64),
) -> Result<Option<DumpCompare>, AppError> {
    if !dump::is_snapshot(&st.store, a).await? && !dump::is_snapshot(&st.store, b).await? {
        return Ok(None);
    }
    let mut notes = Vec::new();
    let sa = side(st, a, da as i32, &mut notes).await?;
    let sb = side(st, b, db as i32, &mut notes).await?;
    let pick = |s: &Option<Side>, f: fn(&Side) -> u64| s.as_ref().map(f);
    let figures = vec![
        row(
            "allocated (held by the program)",
            pick(&sa, |s| s.bytes.allocated),
            pick(&sb, |s| s.bytes.allocated),
            false,
        ),
        row(
            "pending free (released, waiting for streams)",
            pick(&sa, |s| s.bytes.pending_free),
            pick(&sb, |s| s.bytes.pending_free),
            false,
        ),
        row(
            "cached free (inactive blocks)",
            pick(&sa, |s| s.bytes.free),
            pick(&sb, |s| s.bytes.free),
            false,
        ),
        row(
            "reserved (segments)",
            pick(&sa, |s| s.reserved),
            pick(&sb, |s| s.reserved),
            false,
        ),
        row(
            "segments",
            pick(&sa, |s| s.segments),
            pick(&sb, |s| s.segments),
            true,
        ),
        row(
            "blocks",
            pick(&sa, |s| s.blocks),
            pick(&sb, |s| s.blocks),
            true,
        ),
    ];
    // Sites: a side whose dump is there but holds nothing of a site has none of it.
    let mut names: BTreeMap<String, SiteSides> = BTreeMap::new();
    for (k, (v, f)) in sa.iter().flat_map(|s| s.sites.iter()) {
        let e = names.entry(k.clone()).or_default();
        e.0 = Some(*v);
        e.2 = Some(f);
    }
    for (k, (v, f)) in sb.iter().flat_map(|s| s.sites.iter()) {
        let e = names.entry(k.clone()).or_default();
        e.1 = Some(*v);
        e.2 = e.2.or(Some(f));
    }
    let mut v: Vec<_> = names.into_iter().collect();
    v.sort_by(|x, y| {
        let m = |s: &(Option<u64>, Option<u64>, _)| s.0.unwrap_or(0).max(s.1.unwrap_or(0));
        m(&y.1).cmp(&m(&x.1)).then(x.0.cmp(&y.0))
    });
    let side_of = |s: &Option<Side>, v: Option<u64>| s.as_ref().map(|_| v.unwrap_or(0));
    let mut sites: Vec<DumpRow> = v
        .iter()
        .take(SITES)
        .map(|(k, (x, y, f))| {
            let mut r = row(k, side_of(&sa, *x), side_of(&sb, *y), false);
            // A dump that holds nothing of this site: "none", not a size.
            if sa.is_some() && x.is_none() {
                r.a = "none".into();
            }
            if sb.is_some() && y.is_none() {
                r.b = "none".into();
            }
            r.stack = f.filter(|f| !f.is_empty()).map(|f| StackView::of(f));
            r
        })
        .collect();
    if v.len() > SITES {
        let rest = &v[SITES..];
        let sum = |pick: fn(&SiteSides) -> Option<u64>| {
            rest.iter().map(|(_, s)| pick(s).unwrap_or(0)).sum::<u64>()
        };
        sites.push(row(
            &format!("{} other sites", rest.len()),
            side_of(&sa, Some(sum(|s| s.0))),
            side_of(&sb, Some(sum(|s| s.1))),
            false,
        ));
    }
    Ok(Some(DumpCompare {
        figures,
        sites,
        notes,
    }))
}
