//! Stopping the daemon (what `memwatch serve` does on SIGTERM) while an agent streams and
//! the checkpointer writes: afterwards the SQLite file alone (without its `-wal`) holds
//! every acknowledged batch, and the write-ahead log is empty.

mod common;

use std::time::Duration;

use common::client::{Client, Reply};
use common::*;
use memwatch_daemon::{CheckpointSettings, ServeConfig, Store};
use memwatch_wire::Record;

/// The size of a SQLite write-ahead log's header (a log of that size holds no frame).
const WAL_HEADER_BYTES: u64 = 32;

fn wal_len(db: &std::path::Path) -> u64 {
    let wal = db.with_file_name(format!("{}-wal", db.file_name().unwrap().to_string_lossy()));
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_leaves_the_database_file_complete_and_the_log_empty() {
    for round in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("stop.db");
        let mut cfg = ServeConfig::new(db.display().to_string());
        cfg.listen = "127.0.0.1:0".parse().unwrap();
        cfg.ingest = "127.0.0.1:0".parse().unwrap();
        // The checkpointer works all the time: a pass every few ms, a checkpoint per
        // thousand events.
        cfg.checkpoints = CheckpointSettings {
            every: Duration::from_millis(5),
            min_events: 1000,
            spacing: 1000,
            per_live: 1,
        };
        let running = memwatch_daemon::start(cfg).await.unwrap();
        let addr = running.ingest_addr;
        let events = workload(400_000, 1_000, 2, 31 + round);
        let first_ack = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = first_ack.clone();
        let client = tokio::task::spawn_blocking(move || {
            let mut c = Client::connect(addr, "", "node-stop").unwrap();
            let sender = c.sock.try_clone().unwrap();
            let n = events.len() / 2000;
            let send = std::thread::spawn(move || {
                let mut c = Client { sock: sender };
                for (i, chunk) in events.chunks(2000).enumerate() {
                    let mut recs = Vec::new();
                    if i == 0 {
                        recs.push(start(42, 1_000));
                    }
                    recs.push(Record::Events(chunk.to_vec()));
                    if c.send(5, i as u64 + 1, "r", &recs).is_err() {
                        return;
                    }
                }
            });
            let mut acked = 0u64;
            while acked < n as u64 {
                match c.reply() {
                    Reply::Ack(_, q) => {
                        acked = q;
                        seen.store(true, std::sync::atomic::Ordering::Release);
                    }
                    _ => break,
                }
            }
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
            let _ = send.join();
            acked
        });
        // The stop lands while batches stream: after the first acknowledgement (however
        // loaded the machine), plus a while.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !first_ack.load(std::sync::atomic::Ordering::Acquire) {
            assert!(std::time::Instant::now() < deadline, "no acknowledgement");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(100 + 300 * round)).await;
        running.shutdown().await.unwrap();
        let acked = client.await.unwrap();
        assert!(acked > 0, "some batches were acknowledged before the stop");
        // Empty: no frame in it (at most the 32-byte header a later handle on the file
        // may write when it opens the log again; a frame is 24 bytes plus a page).
        assert!(
            wal_len(&db) <= WAL_HEADER_BYTES,
            "round {round}: the write-ahead log holds frames: {} bytes",
            wal_len(&db)
        );
        // The file alone, copied without its log.
        let copy = dir.path().join("copy.db");
        std::fs::copy(&db, &copy).unwrap();
        let store = Store::open(&copy.display().to_string()).await.unwrap();
        let runs = store.runs(5).await.unwrap();
        assert_eq!(runs.len(), 1);
        assert!(
            runs[0].event_count as u64 >= acked * 2000,
            "round {round}: {} events in the file, {} acknowledged",
            runs[0].event_count,
            acked * 2000
        );
        store.close().await.unwrap();
    }
}
