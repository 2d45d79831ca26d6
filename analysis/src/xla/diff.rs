//! Comparing two dumps (`memwatch xla diff`): per module matched by normalised name, the
//! change of every memory_analysis() figure and of the peak, the op categories whose peak
//! bytes changed most, and modules added or removed. Pure computation.

use super::report::ModuleReport;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Change of one op category's peak bytes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct OpDelta {
    /// Category (`loop_add_fusion`, `param`...).
    pub key: String,
    /// Bytes in BASE.
    pub base_bytes: u64,
    /// Bytes in NEW.
    pub new_bytes: u64,
    /// NEW - BASE.
    pub delta_bytes: i64,
}

/// Per-module comparison.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ModuleDiff {
    /// Normalised module name.
    pub name: String,
    /// (base, new, delta) of each figure, keyed `argument_bytes`, `output_bytes`,
    /// `temp_bytes`, `alias_bytes`, `total_allocation_bytes`, `peak_bytes`.
    pub figures: BTreeMap<String, (u64, u64, i64)>,
    /// Categories whose peak bytes changed, largest |delta| first.
    pub ops: Vec<OpDelta>,
    /// Figures known on one side only (`peak_bytes` needs the live-range file), with the
    /// side that lacks them: never compared against 0.
    pub unknown: Vec<String>,
    /// How BASE's and NEW's module were paired: `name` (one of each), `name+io` (a name
    /// compiled several times, paired by equal argument and output sizes), `order` (no
    /// such match: paired in compilation order, which may pair different programs).
    pub paired_by: &'static str,
}

/// The whole comparison.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct DumpDiff {
    /// Modules present in both.
    pub modules: Vec<ModuleDiff>,
    /// Names only in NEW.
    pub added: Vec<String>,
    /// Names only in BASE.
    pub removed: Vec<String>,
}

fn delta(a: u64, b: u64) -> i64 {
    (b as i128 - a as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// Compares BASE and NEW. Modules are matched by name; a name that occurs several times
/// (e.g. `jit_broadcast_in_dim` compiled for several shapes) is paired by equal argument
/// and output sizes first, and what is left in compilation (id) order, marked as such.
pub fn diff_reports(base: &[ModuleReport], new: &[ModuleReport]) -> DumpDiff {
    let index = |v: &[ModuleReport]| {
        let mut m: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, r) in v.iter().enumerate() {
            m.entry(r.name.clone()).or_default().push(i);
        }
        m
    };
    let (bi, ni) = (index(base), index(new));
    let names: BTreeSet<&String> = bi.keys().chain(ni.keys()).collect();
    let mut out = DumpDiff::default();
    let io = |r: &ModuleReport| (r.argument_bytes, r.output_bytes);
    for name in names {
        let b = bi.get(name).map(Vec::as_slice).unwrap_or(&[]);
        let n = ni.get(name).map(Vec::as_slice).unwrap_or(&[]);
        if b.len() == 1 && n.len() == 1 {
            out.modules
                .push(diff_module(&base[b[0]], &new[n[0]], "name"));
            continue;
        }
        let mut b_left: Vec<usize> = b.to_vec();
        let mut n_left: Vec<usize> = n.to_vec();
        let mut matched = Vec::new();
        b_left.retain(
            |&x| match n_left.iter().position(|&y| io(&new[y]) == io(&base[x])) {
                Some(k) => {
                    matched.push((x, n_left.remove(k)));
                    false
                }
                None => true,
            },
        );
        for (x, y) in matched {
            out.modules.push(diff_module(&base[x], &new[y], "name+io"));
        }
        for k in 0..b_left.len().max(n_left.len()) {
            match (b_left.get(k), n_left.get(k)) {
                (Some(&x), Some(&y)) => out.modules.push(diff_module(&base[x], &new[y], "order")),
                (None, Some(_)) => out.added.push(name.clone()),
                (Some(_), None) => out.removed.push(name.clone()),
                (None, None) => {}
            }
        }
    }
    out
}

fn diff_module(b: &ModuleReport, n: &ModuleReport, paired_by: &'static str) -> ModuleDiff {
    let mut figures = BTreeMap::new();
    let mut unknown = Vec::new();
    match (b.peak_bytes, n.peak_bytes) {
        (Some(x), Some(y)) => {
            figures.insert("peak_bytes".to_string(), (x, y, delta(x, y)));
        }
        (None, None) => unknown.push("peak_bytes (neither dump has a live-range file)".into()),
        (None, Some(_)) => unknown.push("peak_bytes (BASE has no live-range file)".into()),
        (Some(_), None) => unknown.push("peak_bytes (NEW has no live-range file)".into()),
    }
    let pairs = [
        ("argument_bytes", b.argument_bytes, n.argument_bytes),
        ("output_bytes", b.output_bytes, n.output_bytes),
        ("temp_bytes", b.temp_bytes, n.temp_bytes),
        ("alias_bytes", b.alias_bytes, n.alias_bytes),
        (
            "total_allocation_bytes",
            b.total_allocation_bytes,
            n.total_allocation_bytes,
        ),
    ];
    for (k, x, y) in pairs {
        figures.insert(k.to_string(), (x, y, delta(x, y)));
    }
    // The op categories' bytes are bytes at the peak: unknown with the peak.
    let peaks_known = b.peak_bytes.is_some() && n.peak_bytes.is_some();
    if !peaks_known {
        unknown.push("peak bytes by op category (they need both peaks)".into());
    }
    let (bc, nc) = if peaks_known {
        (b.category_bytes(), n.category_bytes())
    } else {
        Default::default()
    };
    let keys: BTreeSet<&str> = bc.keys().chain(nc.keys()).copied().collect();
    let mut ops: Vec<OpDelta> = keys
        .into_iter()
        .map(|k| {
            let (x, y) = (
                bc.get(k).copied().unwrap_or(0),
                nc.get(k).copied().unwrap_or(0),
            );
            OpDelta {
                key: k.to_string(),
                base_bytes: x,
                new_bytes: y,
                delta_bytes: delta(x, y),
            }
        })
        .filter(|d| d.delta_bytes != 0)
        .collect();
    ops.sort_by(|a, b| {
        b.delta_bytes
            .unsigned_abs()
            .cmp(&a.delta_bytes.unsigned_abs())
            .then_with(|| a.key.cmp(&b.key))
    });
    ModuleDiff {
        name: b.name.clone(),
        figures,
        ops,
        unknown,
        paired_by,
    }
}
