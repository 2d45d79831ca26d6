//! One large commit (applied in overlapping slices while earlier slices are written) stores
//! exactly what the same events committed in many small commits store: counters,
//! timelines at every zoom, the peak and the raw events. SQLite, and PostgreSQL when
//! MEMWATCH_TEST_POSTGRES_URL is set.

mod common;

use common::{dbs, exact_curve, start, workload};
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::Record;

const T0: u64 = 5_000_000;
/// More than one apply slice (2^18 events) in a single commit.
const N: usize = 300_000;

fn batch(stream: u64, seq: u64, run: &str, records: Vec<Record>) -> Batch {
    Batch {
        node: "n1".into(),
        stream,
        seq,
        run_key: run.into(),
        records,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_big_commit_equals_many_small_ones() {
    let events = workload(N, T0, 3, 11);
    let d = dbs("ingest_slices").await;
    for url in &d.urls {
        let store = Store::open(url).await.unwrap();
        let mut ing = Ingestor::new(store.clone());
        let mut recs = vec![start(42, T0)];
        recs.extend(events.chunks(4096).map(|c| Record::Events(c.to_vec())));
        let big = ing.commit(vec![batch(1, 1, "big", recs)]).await.unwrap();
        assert_eq!(big[0].events, N as u64);
        let mut seq = 0;
        for (i, c) in events.chunks(7_000).enumerate() {
            let mut recs = Vec::new();
            if i == 0 {
                recs.push(start(42, T0));
            }
            recs.push(Record::Events(c.to_vec()));
            seq += 1;
            ing.commit(vec![batch(2, seq, "small", recs)])
                .await
                .unwrap();
        }
        let runs = store.runs(10).await.unwrap();
        let id = |k: &str| runs.iter().find(|r| r.run_key == k).unwrap().id;
        let (a, b) = (id("big"), id("small"));
        let ra = store.run(a).await.unwrap().unwrap().run;
        let rb = store.run(b).await.unwrap().unwrap().run;
        assert_eq!(ra.event_count, N as i64, "{url}");
        assert_eq!(ra.event_count, rb.event_count);
        assert_eq!(ra.duration_ns, rb.duration_ns);
        let span = ra.duration_ns as u64 + 1;
        for dev in 0..3i64 {
            let da = ra.devices.iter().find(|x| x.device == dev).unwrap();
            let db = rb.devices.iter().find(|x| x.device == dev).unwrap();
            assert_eq!(
                (da.live_bytes, da.peak_bytes, da.alloc_count, da.free_count),
                (db.live_bytes, db.peak_bytes, db.alloc_count, db.free_count),
                "{url} device {dev}"
            );
            let exact_max = exact_curve(&events, dev as i32)
                .iter()
                .map(|x| x.1)
                .max()
                .unwrap();
            assert_eq!(da.peak_bytes, exact_max, "{url} device {dev}");
            for (from, to) in [
                (0, span),
                (span / 3, span / 3 + span / 50),
                (span / 2, span / 2 + 400_000),
            ] {
                let ta = store
                    .timeline(a, dev, Some(from), Some(to), 500)
                    .await
                    .unwrap()
                    .unwrap();
                let tb = store
                    .timeline(b, dev, Some(from), Some(to), 500)
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(ta.source, tb.source);
                assert_eq!(ta.points, tb.points, "{url} device {dev} {from}..{to}");
            }
            let top = ta_max(&store, a, dev).await;
            assert_eq!(top, exact_max, "{url} device {dev}: timeline max");
            let pa = store.peak(a, dev, 10).await.unwrap().unwrap();
            let pb = store.peak(b, dev, 10).await.unwrap().unwrap();
            assert_eq!(pa.peak_bytes, pb.peak_bytes);
            assert_eq!(pa.live_allocations, pb.live_allocations);
            let ptrs = |p: &memwatch_daemon::Peak| {
                p.largest
                    .iter()
                    .map(|x| (x.ptr, x.size))
                    .collect::<Vec<_>>()
            };
            assert_eq!(ptrs(&pa), ptrs(&pb));
            let ea = store
                .events(a, dev, None, None, None, 100_000)
                .await
                .unwrap()
                .unwrap();
            let eb = store
                .events(b, dev, None, None, None, 100_000)
                .await
                .unwrap()
                .unwrap();
            let key = |p: &memwatch_daemon::EventsPage| {
                p.events
                    .iter()
                    .map(|e| (e.ts_ns, e.ptr, e.delta))
                    .collect::<Vec<_>>()
            };
            assert_eq!(key(&ea), key(&eb), "{url} device {dev}: raw events");
            let want = events.iter().filter(|e| e.device == dev as i32).count();
            assert_eq!(ea.events.len(), want.min(100_000));
        }
        store.pool.close().await;
    }
}

async fn ta_max(store: &Store, run: i64, dev: i64) -> i64 {
    let t = store
        .timeline(run, dev, None, None, 1)
        .await
        .unwrap()
        .unwrap();
    t.points[0].max
}

/// The rollup timeline (folded into points by the database) equals folding every stored
/// rollup row of the chosen level in Rust, point by point, at zooms where one point spans
/// one to four buckets and at arbitrary offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollup_points_equal_a_fold_of_every_bucket() {
    use memwatch_daemon::rollup::{level_for, shift};
    use memwatch_daemon::Point;
    use sqlx::Row;

    let events = workload(60_000, T0, 2, 5);
    let d = dbs("rollup_fold").await;
    for url in &d.urls {
        let store = Store::open(url).await.unwrap();
        let mut ing = Ingestor::new(store.clone());
        let mut recs = vec![start(42, T0)];
        recs.extend(events.chunks(4096).map(|c| Record::Events(c.to_vec())));
        ing.commit(vec![batch(1, 1, "fold", recs)]).await.unwrap();
        let run = store.runs(1).await.unwrap()[0].id;
        let span = store.run(run).await.unwrap().unwrap().run.duration_ns as u64 + 1;
        let mut checked = 0;
        for dev in 0..2i64 {
            for (from, to, points) in [
                (0, span, 2000),
                (0, span, 333),
                (span / 7, span / 7 + span / 3, 1000),
                (span / 5 + 12_345, span / 2, 517),
                (span / 3, span / 3 + span / 40, 50),
            ] {
                let tl = store
                    .timeline(run, dev, Some(from), Some(to), points)
                    .await
                    .unwrap()
                    .unwrap();
                let Some(level) = tl.level else { continue };
                checked += 1;
                let bucket_ns = tl.bucket_ns;
                let n = (to - from).div_ceil(bucket_ns) as usize;
                let sh = shift(level);
                assert_eq!(level_for(bucket_ns), Some(level));
                // Reference: every bucket of the level, folded in bucket order.
                let rows = sqlx::query(
                    "SELECT bucket, lo, hi, last FROM rollups WHERE run_id = $1 \
                     AND device = $2 AND level = $3 ORDER BY bucket",
                )
                .bind(run)
                .bind(dev)
                .bind(level as i64)
                .fetch_all(&store.pool)
                .await
                .unwrap();
                let mut out: Vec<Option<Point>> = vec![None; n];
                let mut carry = 0i64;
                for r in &rows {
                    let b: i64 = r.try_get(0).unwrap();
                    let (lo, hi, last): (i64, i64, i64) = (
                        r.try_get(1).unwrap(),
                        r.try_get(2).unwrap(),
                        r.try_get(3).unwrap(),
                    );
                    let t = ((b as u64) << sh).max(from);
                    if (b as u64) < (from >> sh) {
                        carry = last;
                        continue;
                    }
                    if t >= to {
                        continue;
                    }
                    let i = ((t - from) / bucket_ns) as usize;
                    let p = out[i].get_or_insert(Point {
                        t_ns: from + i as u64 * bucket_ns,
                        min: lo,
                        max: hi,
                        last,
                    });
                    p.min = p.min.min(lo);
                    p.max = p.max.max(hi);
                    p.last = last;
                }
                let mut want = Vec::new();
                for (i, p) in out.into_iter().enumerate() {
                    let p = match p {
                        Some(mut p) => {
                            p.min = p.min.min(carry);
                            p.max = p.max.max(carry);
                            p
                        }
                        None => Point {
                            t_ns: from + i as u64 * bucket_ns,
                            min: carry,
                            max: carry,
                            last: carry,
                        },
                    };
                    carry = p.last;
                    want.push(p);
                }
                assert_eq!(tl.points, want, "{url} dev {dev} {from}..{to} x{points}");
            }
        }
        assert!(checked >= 6, "{url}: only {checked} zooms used rollups");
        store.pool.close().await;
    }
}
