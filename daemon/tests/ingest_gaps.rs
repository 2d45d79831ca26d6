//! A batch is acknowledged only when it is stored, and an acknowledged batch is never
//! lost: a batch that does not follow the stream's last stored batch is refused (so the
//! agent resends from the gap), and a commit that fails because another process holds the
//! SQLite file's write lock is retried, not acknowledged as stored later.

mod common;

use std::time::{Duration, Instant};

use common::client::{Client, Reply};
use common::*;
use memwatch_daemon::{Running, ServeConfig};
use memwatch_wire::ingest::parse_resend_request;
use memwatch_wire::{Event, Record};
use sqlx::Connection;

async fn daemon(url: &str) -> Running {
    daemon_retrying(url, memwatch_daemon::DEFAULT_BUSY_RETRY).await
}

async fn daemon_retrying(url: &str, busy_retry: Duration) -> Running {
    let mut cfg = ServeConfig::new(url.to_string());
    cfg.busy_retry = busy_retry;
    cfg.listen = "127.0.0.1:0".parse().unwrap();
    cfg.ingest = "127.0.0.1:0".parse().unwrap();
    memwatch_daemon::start(cfg).await.unwrap()
}

/// `n` batches of `per` events each (the first also starts the process), stream `stream`.
fn batches(n: usize, per: usize, seed: u64) -> (Vec<Vec<Record>>, Vec<Event>) {
    let events = workload(n * per, 1_000, 1, seed);
    let out = events
        .chunks(per)
        .enumerate()
        .map(|(i, c)| {
            let mut r = Vec::new();
            if i == 0 {
                r.push(start(42, 1_000));
            }
            r.push(Record::Events(c.to_vec()));
            r
        })
        .collect();
    (out, events)
}

/// What an agent does: sends batches `from..` of the stream with a window, reads the
/// acknowledgements, and after an error or a lost connection reconnects and resends
/// from the first unacknowledged batch. Returns when every batch is acknowledged.
fn deliver(addr: std::net::SocketAddr, stream: u64, run: &str, all: &[Vec<Record>], from: usize) {
    let mut acked = from; // batches [0, acked) are acknowledged
    for attempt in 0..20 {
        if acked == all.len() {
            return;
        }
        let Ok(mut c) = Client::connect(addr, "", "node-gap") else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        for (i, recs) in all.iter().enumerate().skip(acked) {
            if c.send(stream, i as u64 + 1, run, recs).is_err() {
                break;
            }
        }
        while acked < all.len() {
            match c.reply() {
                Reply::Ack(s, q) => {
                    assert_eq!((s, q), (stream, acked as u64 + 1), "acks come in order");
                    acked += 1;
                }
                other => {
                    eprintln!("attempt {attempt}: {other:?}; resending from {}", acked + 1);
                    break;
                }
            }
        }
    }
    panic!("batches still unacknowledged after 20 connections");
}

async fn the_run(running: &Running) -> (i64, i64) {
    let runs = running.store.runs(10).await.unwrap();
    assert_eq!(runs.len(), 1);
    (runs[0].id, runs[0].event_count)
}

/// Batch 3 arrives while batch 2 was never stored: it must not be acknowledged as stored
/// (today's rule "seq <= last is a duplicate" would then drop batch 2's resend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_after_a_gap_is_refused_and_the_resend_stores_everything() {
    for url in dbs("gap").await.urls {
        let running = daemon(&url).await;
        let addr = running.ingest_addr;
        let (all, events) = batches(3, 1000, 5);
        let (one, three) = (all[0].clone(), all[2].clone());
        let skipped = tokio::task::spawn_blocking(move || {
            let mut c = Client::connect(addr, "", "node-gap").unwrap();
            c.send(9, 1, "r", &one).unwrap();
            let first = c.reply();
            let mut c = Client::connect(addr, "", "node-gap").unwrap();
            c.send(9, 3, "r", &three).unwrap();
            (first, c.reply())
        })
        .await
        .unwrap();
        assert_eq!(skipped.0, Reply::Ack(9, 1), "{url}");
        match &skipped.1 {
            Reply::Error(m) => assert_eq!(parse_resend_request(m), Some((9, 2)), "{m}"),
            other => panic!("batch 3 after batch 1 must be refused, got {other:?} ({url})"),
        }
        // The agent resends from its first unacknowledged batch, 2.
        let a = all.clone();
        tokio::task::spawn_blocking(move || deliver(addr, 9, "r", &a, 1))
            .await
            .unwrap();
        let (run, count) = the_run(&running).await;
        assert_eq!(count, 3000, "{url}");
        assert_eq!(
            stored_events(&running.store, run, 0).await,
            event_keys(&events, 0),
            "every event once, in order ({url})"
        );
        running.shutdown().await.unwrap();
    }
}

/// Another process holds the SQLite file's write lock for 11 s (longer than the pool's
/// 10 s busy timeout) while batches 2, 3 and 4 of a stream arrive one after another.
/// Reproduced on the daemon before this test: batch 2's commit failed, 3 and 4 were
/// committed behind it, and the agent's resend of 2 was acknowledged as a duplicate
/// (3,000 of 4,000 events stored). Now the commit is retried and all three are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_delays_the_batches_and_loses_none() {
    let refused = locked_database(memwatch_daemon::DEFAULT_BUSY_RETRY).await;
    assert_eq!(refused, 0);
}

/// The same with retrying off: batch 2's commit fails, and 3 and 4, queued behind it,
/// must fail too (refused, not stored) until the agent resends from 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_fails_the_later_batches_of_its_stream() {
    let refused = locked_database(Duration::ZERO).await;
    assert!(refused >= 2, "batches 3 and 4 were refused ({refused})");
}

/// Runs the scenario; returns the batches the daemon refused.
async fn locked_database(busy_retry: Duration) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let running = daemon_retrying(&path.display().to_string(), busy_retry).await;
    let addr = running.ingest_addr;
    let (all, events) = batches(4, 1000, 17);
    let first = all[..1].to_vec();
    tokio::task::spawn_blocking(move || deliver(addr, 3, "r", &first, 0))
        .await
        .unwrap();

    sqlx::any::install_default_drivers();
    let mut other = sqlx::AnyConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let locked_at = Instant::now();
    let rest = all.clone();
    let first_try = tokio::task::spawn_blocking(move || {
        let mut c = Client::connect(addr, "", "node-gap").unwrap();
        for (i, recs) in rest.iter().enumerate().skip(1) {
            c.send(3, i as u64 + 1, "r", recs).unwrap();
            // One commit group per batch: the writer is already waiting on the lock.
            std::thread::sleep(Duration::from_millis(300));
        }
        let mut replies = Vec::new();
        while replies.len() < 3 {
            let r = c.reply();
            let last = !matches!(r, Reply::Ack(..));
            replies.push(r);
            if last {
                break;
            }
        }
        replies
    });
    tokio::time::sleep(Duration::from_secs(11).saturating_sub(locked_at.elapsed())).await;
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    other.close().await.unwrap();
    let replies = first_try.await.unwrap();
    let acked = replies
        .iter()
        .filter(|r| matches!(r, Reply::Ack(..)))
        .count();
    eprintln!("while locked: {replies:?}");
    let a = all.clone();
    tokio::task::spawn_blocking(move || deliver(addr, 3, "r", &a, 1 + acked))
        .await
        .unwrap();
    let (run, count) = the_run(&running).await;
    assert_eq!(count, 4000, "every acknowledged batch is stored");
    assert_eq!(
        stored_events(&running.store, run, 0).await,
        event_keys(&events, 0)
    );
    let refused = running
        .metrics
        .refused_batches_total
        .load(std::sync::atomic::Ordering::Relaxed);
    running.shutdown().await.unwrap();
    refused
}

/// An agent whose spool lost batches 3 and 4 of a stream (a damaged segment) is asked by
/// the daemon to resend from 3: it sends those numbers empty and goes on, instead of
/// resending batch 5 forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_sends_the_batches_its_spool_lost_empty() {
    use memwatch_agent::forwarder::{Forwarder, ForwarderConfig};
    use memwatch_agent::spool::{Spool, SpoolRecord};
    use memwatch_wire::encode_record;

    let dir = tempfile::tempdir().unwrap();
    let running = daemon(&dir.path().join("s.db").display().to_string()).await;
    let (all, _) = batches(5, 700, 23);
    let spool_dir = dir.path().join("spool");
    {
        let mut spool = Spool::open(&spool_dir, 1 << 30).unwrap();
        for (i, recs) in all.iter().enumerate() {
            if i == 2 || i == 3 {
                continue;
            }
            let mut frames = Vec::new();
            for r in recs {
                encode_record(r, &mut frames).unwrap();
            }
            let rec = SpoolRecord {
                stream: 77,
                seq: i as u64 + 1,
                run: "r".into(),
                frames,
            };
            assert!(spool.append(&rec).unwrap());
        }
    }
    let cfg = ForwarderConfig::new(running.ingest_addr.to_string(), "node-gap", spool_dir);
    let delivered = tokio::task::spawn_blocking(move || {
        let fwd = Forwarder::start(cfg).unwrap();
        fwd.shutdown(Duration::from_secs(30))
    })
    .await
    .unwrap();
    assert!(delivered, "everything the spool held was acknowledged");
    let (_, count) = the_run(&running).await;
    assert_eq!(count, 3 * 700, "batches 1, 2 and 5");
    let pos = running.store.stream_last_seq("node-gap", 77).await.unwrap();
    assert_eq!(pos, 5);
    running.shutdown().await.unwrap();
}
