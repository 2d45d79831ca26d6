//! Benchmarks of the allocator models (prints figures; `cargo bench -p memwatch-analysis
//! --bench alloc_replay`):
//! 1. BFC model throughput on one core with 100k live buffers (target >= 10 M events/s),
//!    preallocated (spatially partitioned) and growing pool, plus the other models;
//! 2. `find_min_limit` (what `--find-min-capacity` runs) on a 10 M-event trace (target
//!    < 30 s).

use std::time::Instant;

use memwatch_analysis::alloc::replay::{find_min_limit, peak_live_bytes, replay, ReplayOptions};
use memwatch_analysis::alloc::trace::Trace;
use memwatch_analysis::alloc::{build, AllocatorKind, ModelSpec};

/// Nanoseconds this thread has run on a CPU (Linux schedstat), to report per-core
/// throughput on a shared machine; `None` elsewhere.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// `live` allocations, then `events` more events alternating a free of a random live
/// buffer and an allocation (so about `live` buffers stay live). Sizes: 60% below 64 KiB,
/// 35% up to 4 MiB, 5% up to 64 MiB.
fn make_trace(live: usize, events: usize, seed: u64) -> Trace {
    let mut rng = Rng(seed);
    let size = |rng: &mut Rng| {
        let r = rng.next() % 100;
        if r < 60 {
            1 + rng.next() % (64 << 10)
        } else if r < 95 {
            1 + rng.next() % (4 << 20)
        } else {
            1 + rng.next() % (64 << 20)
        }
    };
    let mut pairs = Vec::with_capacity(live + events);
    let mut ids: Vec<u64> = Vec::with_capacity(live);
    let mut next = 0u64;
    for _ in 0..live {
        pairs.push((next, Some(size(&mut rng))));
        ids.push(next);
        next += 1;
    }
    for i in 0..events {
        if i % 2 == 0 {
            let k = (rng.next() % ids.len() as u64) as usize;
            pairs.push((ids.swap_remove(k), None));
        } else {
            pairs.push((next, Some(size(&mut rng))));
            ids.push(next);
            next += 1;
        }
    }
    Trace::from_pairs(pairs).expect("generated trace is well formed")
}

/// A step-like trace: `live` long-lived buffers (parameters, optimizer state) allocated
/// first and kept, then steps that each allocate the same 64 temporaries (an executable
/// asks for the same sizes every step) and free them in reverse order, plus one output
/// per step that replaces the previous step's, until `events` more events.
fn make_step_trace(live: usize, events: usize, seed: u64) -> Trace {
    let mut rng = Rng(seed);
    let mut pairs = Vec::with_capacity(live + events);
    let mut next = 0u64;
    for _ in 0..live {
        pairs.push((next, Some(1 + rng.next() % (2 << 20))));
        next += 1;
    }
    let temps: Vec<u64> = (0..64).map(|_| 1 + rng.next() % (32 << 20)).collect();
    let mut prev_out: Option<u64> = None;
    let mut n = 0;
    while n < events {
        let first = next;
        for &sz in &temps {
            pairs.push((next, Some(sz)));
            next += 1;
        }
        let out = next;
        pairs.push((out, Some(8 << 20)));
        next += 1;
        if let Some(p) = prev_out.replace(out) {
            pairs.push((p, None));
        }
        for id in (first..first + temps.len() as u64).rev() {
            pairs.push((id, None));
        }
        n += 2 * temps.len() + 2;
    }
    Trace::from_pairs(pairs).expect("generated trace is well formed")
}

fn bench_models(t: &Trace, what: &str) {
    let peak = peak_live_bytes(t);
    println!(
        "{what}: {} events, 100000 long-lived buffers, peak live {:.1} GiB",
        t.len(),
        peak as f64 / (1u64 << 30) as f64
    );
    let limit = peak * 3;
    for (kind, prealloc, label) in [
        (AllocatorKind::Bfc, true, "bfc (preallocated, spatial)"),
        (AllocatorKind::Bfc, false, "bfc (growing pool)"),
        (AllocatorKind::Platform, true, "platform"),
        (AllocatorKind::Async, true, "async"),
        (AllocatorKind::Torch, true, "torch"),
    ] {
        if std::env::var("MW_BENCH_ONLY").is_ok_and(|o| !label.starts_with(o.as_str())) {
            continue;
        }
        let spec = ModelSpec {
            kind,
            limit,
            preallocate: prealloc,
            granularity: 2 << 20,
            device_free_bytes: None,
        };
        let mut m = build(&spec);
        let start = Instant::now();
        let cpu0 = cpu_ns();
        let r = replay(t, m.as_mut(), ReplayOptions::default(), &mut |_| {}).expect("replay");
        let secs = start.elapsed().as_secs_f64();
        let cpu = match (cpu0, cpu_ns()) {
            (Some(a), Some(b)) => (b - a) as f64 / 1e9,
            _ => secs,
        };
        println!(
            "  {label:<28} {:>6.2} M events/s per CPU-second ({:>6.2} M/s wall; {:.2} s CPU, fits {})",
            t.len() as f64 / cpu / 1e6,
            t.len() as f64 / secs / 1e6,
            cpu,
            r.fits,
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments. MW_BENCH_EVENTS scales the trace,
    // MW_BENCH_QUICK=1 skips the capacity search (profiling).
    let events = std::env::var("MW_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let steps = make_step_trace(100_000, events, 7);
    bench_models(
        &steps,
        "step-like trace (temporaries freed in reverse order)",
    );
    let t = make_trace(100_000, events, 0x9e3779b97f4a7c15);
    bench_models(
        &t,
        "random trace (uniformly random frees: worst case for caches)",
    );
    if std::env::var("MW_BENCH_QUICK").is_ok() {
        return;
    }
    for (trace, what) in [(&steps, "step-like"), (&t, "random")] {
        for (prealloc, mode) in [(true, "bfc preallocated"), (false, "bfc growing pool")] {
            let peak = peak_live_bytes(trace);
            let start = Instant::now();
            let cpu0 = cpu_ns();
            let spec = |limit| ModelSpec {
                kind: AllocatorKind::Bfc,
                limit,
                preallocate: prealloc,
                granularity: 2 << 20,
                device_free_bytes: None,
            };
            let found =
                find_min_limit(trace, &spec, 1 << 20, peak * 64, &mut |_, _| {}).expect("search");
            let secs = start.elapsed().as_secs_f64();
            let cpu = match (cpu0, cpu_ns()) {
                (Some(a), Some(b)) => (b - a) as f64 / 1e9,
                _ => secs,
            };
            match found {
                Some(m) => println!(
                    "find-min-capacity ({mode}, {what} trace, {} events): {:.1} s CPU ({:.1} s wall), {} replays ({}), min pool {:.3} GiB = {:.4} x peak live",
                    trace.len(),
                    cpu,
                    secs,
                    m.replays,
                    if m.exact { "exact" } else { "bisection to 1 MiB" },
                    m.min_pool_bytes as f64 / (1u64 << 30) as f64,
                    m.min_pool_bytes as f64 / peak as f64
                ),
                None => println!("find-min-capacity ({mode}, {what}): nothing fits ({secs:.1} s)"),
            }
        }
    }
}
