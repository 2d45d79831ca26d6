//! Another framework's pool in the same process took the room: JAX's preallocated BFC
//! pool (75% of the device at first use, whatever it holds) in a process whose PyTorch or
//! CuPy then asks the driver for more, or PyTorch's cache of freed blocks in a process
//! whose JAX pool cannot grow. Read from the ledger: the device had less free than the
//! request, and the other framework's pool held, unused, what was missing.

use super::{exact, Ctx};
use crate::doctor::check;
use crate::doctor::failure::Origin;
use crate::doctor::ledger::{Holder, HolderKind};
use crate::doctor::verdict::{Check, Cite, Fix, Kind, Verdict};
use crate::size::format_bytes as b;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framework {
    Xla,
    Torch,
    Cupy,
}

fn framework(k: HolderKind) -> Option<Framework> {
    match k {
        HolderKind::XlaBfcPool
        | HolderKind::XlaAsyncPool
        | HolderKind::XlaDriver
        | HolderKind::PreAttachPool => Some(Framework::Xla),
        HolderKind::TorchCaching | HolderKind::TorchExpandable => Some(Framework::Torch),
        HolderKind::CupyPool => Some(Framework::Cupy),
        _ => None,
    }
}

/// The framework's name in a verdict's holder.
fn code(f: Framework) -> &'static str {
    match f {
        Framework::Xla => "xla",
        Framework::Torch => "torch",
        Framework::Cupy => "cupy",
    }
}

fn name(f: Framework) -> &'static str {
    match f {
        Framework::Xla => "JAX/XLA",
        Framework::Torch => "PyTorch",
        Framework::Cupy => "CuPy",
    }
}

pub fn verdict(ctx: &Ctx<'_>) -> Option<Verdict> {
    let l = ctx.ledger?;
    let f = ctx.failure?;
    let pid = f.pid?;
    let req = f.request.filter(|r| *r > 0)?;
    let failing = match f.origin {
        Origin::Torch(i) => {
            // A request PyTorch's own fraction refused is that limit's, not the device's.
            if ctx
                .log
                .torch_ooms
                .get(i)
                .is_some_and(|t| t.allowed_approx_bytes.is_some())
            {
                return None;
            }
            Framework::Torch
        }
        Origin::TorchSnapshot(_) => Framework::Torch,
        Origin::Cupy(_) => Framework::Cupy,
        Origin::Xla | Origin::Driver => Framework::Xla,
        Origin::Compile => return None,
    };
    // XLA failing inside its own preallocated pool is its pool's business.
    if failing == Framework::Xla && l.of(HolderKind::XlaBfcPool).any(|h| h.pid == Some(pid)) {
        return None;
    }
    // Without device samples or the framework's own figure, the most the device can
    // have had free: its total less what the capture shows held.
    let free = match l.free() {
        Some(f) => f,
        None => l.total_bytes?.saturating_sub(l.accounted_bytes),
    };
    if free >= req {
        return None;
    }
    let other: Vec<&Holder> = l
        .holders
        .iter()
        .filter(|h| h.pid == Some(pid))
        .filter(|h| framework(h.kind).is_some_and(|x| x != failing))
        .filter(|h| h.free_inside_bytes.is_some_and(|u| u > 0))
        .collect();
    let unused: u64 = other.iter().filter_map(|h| h.free_inside_bytes).sum();
    if unused == 0 || free.saturating_add(unused) < req {
        return None;
    }
    let big = other.iter().max_by_key(|h| h.bytes)?;
    let owner = framework(big.kind)?;
    let total = l.total_bytes?;
    let mut v = ctx.base(Kind::OtherFrameworkPool);
    v.holder.framework = Some(code(owner).into());
    v.figures.insert("request_bytes".into(), req);
    v.figures.insert("other_pool_bytes".into(), big.bytes);
    if let Some(u) = big.in_use_bytes {
        v.figures.insert("other_pool_in_use_bytes".into(), u);
    }
    v.figures.insert("other_pool_unused_bytes".into(), unused);
    v.figures.insert("device_free_bytes".into(), free);
    v.figures.insert("device_total_bytes".into(), total);
    v.evidence.push(Cite {
        file: big.source.clone(),
        line: None,
        what: format!(
            "{}: {} ({:.0}% of the device), {} in use",
            big.name,
            b(big.bytes),
            big.bytes as f64 * 100.0 / total as f64,
            big.in_use_bytes.map_or("?".into(), b)
        ),
    });
    let share = big.bytes as f64 * 100.0 / total as f64;
    v.headline = format!(
        "{}'s pool in this process held {} ({share:.0}% of the device) with {} in use; {}'s {} request found {} free.",
        name(owner),
        b(big.bytes),
        big.in_use_bytes.map_or("an unknown amount".into(), b),
        name(failing),
        b(req),
        b(free)
    );
    v.why = format!(
        "Two frameworks share process {pid}: {} ({}) holds {} of device memory it was not using, and the device had {} free, less than {}'s request of {}. Without {}'s unused pool the request fits ({} free + {} unused).",
        big.name,
        name(owner),
        exact(unused),
        b(free),
        name(failing),
        exact(req),
        name(owner),
        b(free),
        b(unused)
    );
    let advice = match owner {
        Framework::Xla => {
            let peak = ctx
                .pjrt
                .samples(pid, l.device)
                .iter()
                .map(|s| s.peak_bytes_in_use.unwrap_or(s.bytes_in_use).max(s.bytes_in_use))
                .max()
                .unwrap_or(0);
            // The fraction that leaves the failing framework what it held plus the request.
            let rest: u64 = l
                .holders
                .iter()
                .filter(|h| h.kind != HolderKind::Free && !std::ptr::eq(*h, *big))
                .map(|h| h.bytes)
                .sum();
            let room = total.saturating_sub(rest.saturating_add(req));
            // Two decimals, rounded down: the pool must leave the room.
            let fraction = Some((room as f64 * 100.0 / total as f64).floor() / 100.0)
                .filter(|fr| *fr > 0.0 && check::pool_of_fraction(*fr, total) >= peak.max(1));
            let frac = fraction
                .map(|fr| {
                    format!(
                        ", or XLA_PYTHON_CLIENT_MEM_FRACTION={fr:.2} (a {} pool: JAX's peak in use was {})",
                        b(check::pool_of_fraction(fr, total)),
                        b(peak)
                    )
                })
                .unwrap_or_default();
            format!(
                "Set XLA_PYTHON_CLIENT_PREALLOCATE=false before JAX starts (it then takes memory as it needs it){frac}, or make {}'s large allocations before JAX's first use.",
                name(failing)
            )
        }
        Framework::Torch => format!(
            "Release PyTorch's cache before {} needs the memory (torch.cuda.empty_cache(): {} cached and unallocated), or cap PyTorch (torch.cuda.set_per_process_memory_fraction).",
            name(failing),
            b(unused)
        ),
        Framework::Cupy => format!(
            "Release CuPy's pool before {} needs the memory (cupy.get_default_memory_pool().free_all_blocks(): {} unused), or cap it (set_limit).",
            name(failing),
            b(unused)
        ),
    };
    v.fix = Fix {
        advice,
        check: Some(Check {
            method: "recorded_figures".into(),
            passed: free.saturating_add(unused) >= req,
            detail: format!(
                "the device's {} free plus the {} {}'s pool held unused cover the {} request (the ledger at the failure)",
                b(free),
                b(unused),
                name(owner),
                b(req)
            ),
        }),
    };
    Some(v)
}
