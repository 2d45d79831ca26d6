//! The one line under the framework chart that reconciles the framework's figures with
//! the driver's, at the bucket where the framework's memory was highest in the range:
//! every part it names is a difference that is not negative, a sum is written as the sum
//! it is, and a figure that was not recorded is left out rather than shown as 0 B.

use super::read::FrameworkTimeline;
use super::series;
use crate::render::{fmt, Point};

/// "A = B + C" where every part is known and not negative; otherwise what is known.
pub(crate) fn reconcile(tl: &FrameworkTimeline, driver: Option<(&[Point], u64)>) -> String {
    let at_of = |s: i64| {
        tl.get(s).and_then(|p| {
            p.iter()
                .enumerate()
                .max_by_key(|(i, x)| (x.last, std::cmp::Reverse(*i)))
                .map(|(i, x)| (i, x.t_ns))
        })
    };
    let last = |s: i64, i: usize| tl.get(s).and_then(|p| p.get(i)).map(|x| x.last);
    let driver_at = |t: u64| {
        driver.and_then(|(pts, bw)| {
            pts.iter()
                .rev()
                .find(|p| p.t_ns <= t)
                .filter(|p| t < p.t_ns + bw.max(1) || pts.last().is_some_and(|l| l.t_ns == p.t_ns))
                .map(|p| p.last)
        })
    };
    if tl.is_torch() {
        let Some((i, t)) = at_of(series::TORCH_ALLOCATED) else {
            return String::new();
        };
        let alloc = last(series::TORCH_ALLOCATED, i).unwrap_or(0);
        let at = fmt::duration(t as i64);
        return match driver_at(t) {
            Some(res) if res >= alloc => format!(
                "At {at} (most allocated): reserved {} = {} allocated + {} cached in the allocator's segments (free blocks, fragmentation).",
                fmt::bytes(res),
                fmt::bytes(alloc),
                fmt::bytes(res - alloc)
            ),
            Some(res) => format!(
                "At {at} (most allocated): {} allocated, more than the {} of segments recorded: {} of segments were reserved before recording began.",
                fmt::bytes(alloc),
                fmt::bytes(res),
                fmt::bytes(alloc - res)
            ),
            None => format!("At {at}: {} allocated.", fmt::bytes(alloc)),
        };
    }
    if tl.has_allocator() {
        let Some((i, t)) = at_of(series::IN_USE) else {
            return String::new();
        };
        let in_use = last(series::IN_USE, i).unwrap_or(0);
        let mut s = format!("At {} (most in use): ", fmt::duration(t as i64));
        let pool = last(series::POOL, i).filter(|&p| p > 0);
        let live = last(series::LIVE_BUFFERS, i);
        s.push_str(&in_use_parts(in_use, pool, live));
        let pids = super::view::process_pools(tl);
        if pids.len() > 1 {
            // Each process has its own pool; the figure above is their sum.
            let parts: Vec<(i64, i64)> = pids
                .iter()
                .map(|&p| {
                    (
                        p,
                        last(series::of_process(p, series::PROCESS_POOL), i).unwrap_or(0),
                    )
                })
                .collect();
            s.push_str(&format!(
                "; each of the {} processes has its own pool: {} = {}",
                parts.len(),
                parts
                    .iter()
                    .map(|(p, b)| format!("pid {p} {}", fmt::bytes(*b)))
                    .collect::<Vec<_>>()
                    .join(" + "),
                fmt::bytes(parts.iter().map(|x| x.1).sum())
            ));
        } else if let Some(limit) = last(series::LIMIT, i).filter(|&l| l > 0) {
            s.push_str(&format!("; limit {}", fmt::bytes(limit)));
        }
        match (driver_at(t), pool) {
            (Some(d), Some(p)) if d >= p => s.push_str(&format!(
                ". The driver saw {} = the pool + {} outside it (runtime, other allocations).",
                fmt::bytes(d),
                fmt::bytes(d - p)
            )),
            (Some(0), Some(p)) => s.push_str(&format!(
                ". The driver saw no allocation of it: the whole pool ({}) was allocated before recording began.",
                fmt::bytes(p)
            )),
            (Some(d), Some(p)) => s.push_str(&format!(
                ". The driver saw {}, {} less than the pool: that part of the pool was allocated before recording began.",
                fmt::bytes(d),
                fmt::bytes(p - d)
            )),
            (Some(d), None) => s.push_str(&format!(". The driver saw {}.", fmt::bytes(d))),
            (None, _) => s.push('.'),
        }
        return s;
    }
    let Some((i, t)) = at_of(series::LIVE_BUFFERS) else {
        return String::new();
    };
    let live = last(series::LIVE_BUFFERS, i).unwrap_or(0);
    let at = fmt::duration(t as i64);
    match driver_at(t) {
        Some(d) if d >= live => format!(
            "At {at} (most live arrays; no allocator statistics, e.g. the platform allocator): the driver saw {} = {} live arrays + {} not explained by them (temporaries, runtime).",
            fmt::bytes(d),
            fmt::bytes(live),
            fmt::bytes(d - live)
        ),
        Some(d) => format!(
            "At {at} (most live arrays; no allocator statistics): {} live arrays, {} more than the {} the driver saw: memory allocated before recording began.",
            fmt::bytes(live),
            fmt::bytes(live - d),
            fmt::bytes(d)
        ),
        None => format!("At {at}: {} live arrays.", fmt::bytes(live)),
    }
}

/// The allocator's bytes in use split into live arrays, other use and free pool space,
/// as far as each part is known and not negative.
fn in_use_parts(in_use: i64, pool: Option<i64>, live: Option<i64>) -> String {
    let mut s = match live {
        Some(l) if l <= in_use => format!(
            "{} in use = {} live arrays + {} other allocator use (temporaries of running executables, rounding)",
            fmt::bytes(in_use),
            fmt::bytes(l),
            fmt::bytes(in_use - l)
        ),
        Some(l) => format!(
            "{} in use by the allocator, {} less than the {} of live arrays (arrays held outside this allocator, or freed arrays its statistics had not yet counted)",
            fmt::bytes(in_use),
            fmt::bytes(l - in_use),
            fmt::bytes(l)
        ),
        None => format!("{} in use", fmt::bytes(in_use)),
    };
    match pool {
        Some(p) if p >= in_use => s.push_str(&format!(
            ", in a pool of {} ({} free in it)",
            fmt::bytes(p),
            fmt::bytes(p - in_use)
        )),
        Some(p) => s.push_str(&format!(", more than the pool of {}", fmt::bytes(p))),
        None => s.push_str("; pool size not recorded"),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_never_negative() {
        const G: i64 = 1 << 30;
        let s = in_use_parts(3 * G, Some(4 * G), Some(G));
        assert!(
            s.starts_with("3.00 GiB in use = 1.00 GiB live arrays + 2.00 GiB other"),
            "{s}"
        );
        assert!(s.contains("pool of 4.00 GiB (1.00 GiB free in it)"));
        let s = in_use_parts(3 * G, Some(4 * G), Some(4 * G + G / 4));
        assert!(
            s.contains("1.25 GiB less than the 4.25 GiB of live arrays") && !s.contains('-'),
            "{s}"
        );
        let s = in_use_parts(3 * G, None, None);
        assert!(
            s.contains("pool size not recorded") && !s.contains("0 B"),
            "{s}"
        );
    }
}
