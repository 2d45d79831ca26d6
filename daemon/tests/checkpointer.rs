//! The background checkpointer of `memwatch serve`: it catches up on runs stored before
//! the daemon started, follows runs stored while it runs, and never needs a request to
//! do so; the live sets replayed from its checkpoints are exact.

mod common;

use std::time::Duration;

use common::*;
use memwatch_daemon::CheckpointSettings;
use memwatch_daemon::{Batch, Ingestor, ServeConfig, Store};
use memwatch_wire::{Event, Record};

async fn store_run(store: &Store, key: &str, stream: u64, events: &[Event], t0: u64) -> i64 {
    let mut recs = vec![start(42, t0)];
    for c in events.chunks(5000) {
        recs.push(Record::Events(c.to_vec()));
    }
    let out = Ingestor::new(store.clone())
        .commit(vec![Batch {
            node: "ckpt-node".into(),
            stream,
            seq: 1,
            run_key: key.into(),
            records: recs,
        }])
        .await
        .unwrap();
    out[0].run_id.unwrap()
}

async fn checkpoints(store: &Store, run: i64, device: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT CAST(COUNT(*) AS BIGINT) FROM live_checkpoints WHERE run_id = $1 AND device = $2",
    )
    .bind(run)
    .bind(device)
    .fetch_one(&store.pool)
    .await
    .unwrap()
}

/// Live bytes of `device` right after the event at `ts` replayed from the store equal
/// the exact curve.
async fn assert_exact(store: &Store, run: i64, events: &[Event], device: i32) {
    let t0: i64 = sqlx::query_scalar("SELECT t0_mono_ns FROM runs WHERE id = $1")
        .bind(run)
        .fetch_one(&store.pool)
        .await
        .unwrap();
    let curve = exact_curve(events, device);
    for i in [curve.len() / 5, curve.len() / 2, curve.len() - 1] {
        let (ts, live) = curve[i];
        let got = store
            .live_at(run, i64::from(device), Some(ts - t0 as u64), 10)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            got.peak_bytes, live,
            "run {run} device {device} at event {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_follow_stored_runs_without_requests() {
    for url in dbs("ckpt").await.urls {
        // A run stored before the daemon starts (as `memwatch import --db` leaves it).
        let early = workload(60_000, 1_000_000, 2, 3);
        let before = {
            let store = Store::open(&url).await.unwrap();
            store_run(&store, "imported", 1, &early, 1_000_000).await
        };
        let mut cfg = ServeConfig::new(url.clone());
        cfg.listen = "127.0.0.1:0".parse().unwrap();
        cfg.ingest = "127.0.0.1:0".parse().unwrap();
        cfg.checkpoints = CheckpointSettings {
            every: Duration::from_millis(50),
            min_events: 5000,
            spacing: 5000,
            per_live: 0,
        };
        let d = memwatch_daemon::start(cfg).await.unwrap();
        let store = d.store.clone();
        let mut progress = d.checkpoints.clone();
        tokio::time::timeout(
            Duration::from_secs(60),
            progress.wait_for(|p| p.passes >= 1),
        )
        .await
        .expect("first pass within 60 s")
        .unwrap();
        for dev in 0..2 {
            assert!(
                checkpoints(&store, before, dev).await >= 2,
                "{url}: the first pass checkpointed device {dev} of the run stored before start"
            );
            // What is left after the newest checkpoint is less than a checkpoint's worth
            // plus the chunk that crossed it.
            let tail = store.events_after_checkpoint(before, dev).await.unwrap();
            assert!(
                tail < 5000 + 8192,
                "{url}: {tail} events after the last checkpoint"
            );
        }

        // A run stored while the daemon runs: checkpointed by a later pass.
        let later = workload(40_000, 50_000_000, 2, 9);
        let after = store_run(&store, "live", 2, &later, 50_000_000).await;
        // Committed now: the pass after the one under way (if any) starts after this.
        let p0 = progress.borrow().passes;
        tokio::time::timeout(
            Duration::from_secs(60),
            progress.wait_for(|p| p.passes >= p0 + 2),
        )
        .await
        .expect("two more passes within 60 s")
        .unwrap();
        for dev in 0..2 {
            assert!(
                checkpoints(&store, after, dev).await >= 1,
                "{url}: device {dev} of the run stored while serving: {:?}, {} events after, heads {:?}",
                *progress.borrow(),
                store.events_after_checkpoint(after, dev).await.unwrap(),
                store.newest_chunks(None).await.unwrap()
            );
        }
        assert!(progress.borrow().written >= 6);
        for dev in 0..2 {
            assert_exact(&store, before, &early, dev).await;
            assert_exact(&store, after, &later, dev).await;
        }
    }
}
