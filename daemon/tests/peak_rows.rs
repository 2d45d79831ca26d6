//! The allocations live at each device's peak, which ingest stores as the rows that
//! changed since the peak it stored last (or whole, after a rebuild or when too much
//! changed), are exactly what was live at the peak: checked after every commit against a
//! fold of the events in arrival order, on generated workloads with frees, pointers
//! handed out again on another device, an exec that releases everything, a churn of
//! more allocations than the ingestor tracks, and the ingestor started again mid-run (its
//! runs rebuilt from the store). SQLite, and PostgreSQL when MEMWATCH_TEST_POSTGRES_URL
//! is set.

mod common;

use std::collections::HashMap;

use common::{dbs, ev, start};
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::{Event, EventKind, Record};

const T0: u64 = 1_000_000;
const DEVICES: i32 = 2;

/// One record of the generated run: events, or the pid's exec.
enum Step {
    Event(Event),
    Exec(u64),
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

/// A run: a random walk of allocations (pointers often handed out again while still
/// live, on either device when `cross`, else each pointer on one device) and frees (some
/// of pointers not live), an exec at a third, and a churn of `churn` allocation/free
/// pairs of fresh pointers below the peak before the live bytes climb past it.
fn generate(seed: u64, n: usize, churn: usize, cross: bool) -> Vec<Step> {
    let mut r = Rng(seed | 1);
    let mut out = Vec::new();
    let mut ts = T0 + 1000;
    let mut live: Vec<u64> = Vec::new();
    let ptr_of = |i: u64| 0x1000 * (i + 1);
    for i in 0..n {
        ts += 1 + r.next() % 5_000;
        if i == n / 3 {
            out.push(Step::Exec(ts));
            live.clear();
            continue;
        }
        if i == n / 2 {
            // Churn: fresh pointers allocated and freed at once, then growth.
            for j in 0..churn as u64 {
                let p = ptr_of(1_000_000 + j);
                let dev = (j % DEVICES as u64) as i32;
                out.push(Step::Event(ev(ts, EventKind::Alloc, p, 64, dev)));
                out.push(Step::Event(ev(ts + 1, EventKind::Free, p, 0, dev)));
                ts += 2;
            }
        }
        let x = r.next();
        let dev = (x % DEVICES as u64) as i32;
        let size = 256 << (r.next() % 12);
        let grow = if i > n / 2 { 60 } else { 52 };
        if live.is_empty() || x % 100 < grow {
            // Often a pointer handed out before (its free unseen, or on the other device).
            let p = if x.is_multiple_of(7) && !live.is_empty() {
                live[(r.next() as usize) % live.len()]
            } else {
                ptr_of(r.next() % 4096)
            };
            let dev = if cross {
                dev
            } else {
                ((p >> 12) % DEVICES as u64) as i32
            };
            live.push(p);
            out.push(Step::Event(ev(ts, EventKind::Alloc, p, size, dev)));
        } else {
            let j = (r.next() as usize) % live.len();
            let p = live.swap_remove(j);
            // The free's device does not matter: it releases from where the pointer lives.
            out.push(Step::Event(ev(ts, EventKind::Free, p, 0, dev)));
        }
    }
    out
}

/// Folds the steps in arrival order: each device's peak (strictly greater live bytes) and
/// the index of the step that made it.
fn peaks(steps: &[Step]) -> HashMap<i32, (i64, usize)> {
    let mut live: HashMap<u64, (u64, i32)> = HashMap::new();
    let mut bytes: HashMap<i32, i64> = HashMap::new();
    let mut peak: HashMap<i32, (i64, usize)> = HashMap::new();
    for (i, s) in steps.iter().enumerate() {
        apply(&mut live, &mut bytes, s);
        if let Step::Event(e) = s {
            if EventKind::from_u8(e.kind) == Some(EventKind::Alloc) {
                let b = bytes[&e.device];
                if peak.get(&e.device).is_none_or(|p| b > p.0) {
                    peak.insert(e.device, (b, i));
                }
            }
        }
    }
    peak
}

fn apply(live: &mut HashMap<u64, (u64, i32)>, bytes: &mut HashMap<i32, i64>, s: &Step) {
    match s {
        Step::Exec(_) => {
            for (_, (size, d)) in live.drain() {
                *bytes.entry(d).or_default() -= size as i64;
            }
        }
        Step::Event(e) => match EventKind::from_u8(e.kind) {
            Some(EventKind::Alloc) => {
                if let Some((size, d)) = live.insert(e.ptr, (e.size, e.device)) {
                    *bytes.entry(d).or_default() -= size as i64;
                }
                *bytes.entry(e.device).or_default() += e.size as i64;
            }
            _ => {
                if let Some((size, d)) = live.remove(&e.ptr) {
                    *bytes.entry(d).or_default() -= size as i64;
                }
            }
        },
    }
}

/// (pointer, size) live on `device` after step `upto`, by pointer.
fn live_after(steps: &[Step], upto: usize, device: i32) -> Vec<(u64, u64)> {
    let (mut live, mut bytes) = (HashMap::new(), HashMap::new());
    for s in &steps[..=upto] {
        apply(&mut live, &mut bytes, s);
    }
    let mut v: Vec<(u64, u64)> = live
        .into_iter()
        .filter(|(_, (_, d))| *d == device)
        .map(|(p, (s, _))| (p, s))
        .collect();
    v.sort_unstable();
    v
}

fn records(steps: &[Step]) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    for s in steps {
        match s {
            Step::Exec(ts) => out.push(start(42, *ts)),
            Step::Event(e) => match out.last_mut() {
                Some(Record::Events(evs)) => evs.push(*e),
                _ => out.push(Record::Events(vec![*e])),
            },
        }
    }
    out
}

async fn check(store: &Store, run: i64, steps: &[Step], what: &str) {
    for (dev, (bytes, at)) in peaks(steps) {
        let p = store
            .peak(run, i64::from(dev), usize::MAX)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: no peak of device {dev}"));
        assert_eq!(p.peak_bytes, bytes, "{what}: device {dev}");
        let mut got: Vec<(u64, u64)> = p.largest.iter().map(|a| (a.ptr, a.size)).collect();
        got.sort_unstable();
        let want = live_after(steps, at, dev);
        assert_eq!(got.len(), want.len(), "{what}: device {dev}");
        assert_eq!(got, want, "{what}: device {dev}");
        assert_eq!(
            got.iter().map(|a| a.1 as i64).sum::<i64>(),
            bytes,
            "{what}: device {dev}: the allocations add up to the peak"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_peak_is_what_was_live_at_the_peak() {
    let d = dbs("peak_rows").await;
    for url in &d.urls {
        // (seed, steps, churn, pointers handed out on another device, restart at commit)
        for (seed, n, churn, cross, restart) in [
            (3u64, 6_000, 0, true, None),
            (17, 9_000, 40_000, true, None),
            (91, 4_000, 70_000, true, None),
            (5, 8_000, 0, false, Some(4)),
            (23, 6_000, 70_000, false, Some(6)),
            (41, 8_000, 0, true, Some(4)),
            (59, 6_000, 40_000, true, Some(7)),
        ] {
            let steps = generate(seed, n, churn, cross);
            let store = Store::open(url).await.unwrap();
            let mut ing = Ingestor::new(store.clone());
            let key = format!("seed-{seed}");
            let mut r = Rng(seed.wrapping_mul(0x9e37_79b9) | 1);
            let (mut done, mut seq, mut commits) = (0usize, 0u64, 0usize);
            let mut run = None;
            while done < steps.len() {
                // One to three batches in a commit, of 1 to ~6,000 steps each.
                let mut group = Vec::new();
                for _ in 0..1 + r.next() % 3 {
                    if done == steps.len() {
                        break;
                    }
                    let take = (1 + (r.next() % 6_000) as usize).min(steps.len() - done);
                    let mut recs = records(&steps[done..done + take]);
                    if seq == 0 {
                        recs.insert(0, start(42, T0));
                    }
                    seq += 1;
                    done += take;
                    group.push(Batch {
                        node: "n1".into(),
                        stream: seed,
                        seq,
                        run_key: key.clone(),
                        records: recs,
                    });
                }
                let out = ing.commit(group).await.unwrap();
                run = run.or(out.iter().find_map(|o| o.run_id));
                commits += 1;
                let what = format!("{url} seed {seed} commit {commits} ({done} steps)");
                check(&store, run.unwrap(), &steps[..done], &what).await;
                // A restart: the run is rebuilt from the store (each device's chunks
                // merged by time, so a pointer handed out again on another device replays
                // in its order), its next peaks written whole.
                if restart == Some(commits) {
                    ing = Ingestor::new(store.clone());
                }
            }
            store.pool.close().await;
        }
    }
}
