//! A full disk is recovered from by itself (issue 33, 1): the daemon's SQLite file lives
//! on a small tmpfs that a ballast file fills; commits fail while it is full (the agent
//! resends what was not acknowledged) and, once the ballast is removed, the next commits
//! store everything, exactly once. Before, a failed COMMIT left sqlx's transaction depth
//! at 1 on its pooled connection and every later commit failed with "attempted to call
//! begin_with at non-zero transaction depth" until a restart.
//!
//! Needs root (it mounts a tmpfs); elsewhere it says so and checks nothing.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::client::{Client, Reply};
use common::*;
use memwatch_daemon::ServeConfig;
use memwatch_wire::Record;

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the file system of `path` with a ballast file, then frees `leave` bytes of it.
fn fill(path: &Path, leave: u64) -> PathBuf {
    let ballast = path.join("ballast");
    let mut f = std::fs::File::create(&ballast).unwrap();
    let block = vec![0xa5u8; 1 << 20];
    let mut written = 0u64;
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(_) => break,
        }
    }
    f.set_len(written.saturating_sub(leave)).unwrap();
    ballast
}

/// Delivers every batch as an agent does (window of all, resend from the first
/// unacknowledged batch after an error), counting the errors. Gives up, failing the test,
/// after `MAX_AFTER_FREE` connections once `freed` is set.
fn deliver(
    addr: std::net::SocketAddr,
    all: &[Vec<Record>],
    freed: &AtomicBool,
    errors: &AtomicU64,
) -> u64 {
    const MAX_AFTER_FREE: u64 = 40;
    let mut acked = 0usize;
    let mut after_free = 0u64;
    let started = Instant::now();
    while acked < all.len() {
        if freed.load(Ordering::SeqCst) {
            after_free += 1;
            assert!(
                after_free <= MAX_AFTER_FREE,
                "still failing {MAX_AFTER_FREE} connections after the disk was freed: {acked} \
                 of {} batches acknowledged",
                all.len()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the disk never filled or delivery hung"
        );
        let Ok(mut c) = Client::connect(addr, "", "node-full") else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        for (i, recs) in all.iter().enumerate().skip(acked) {
            if c.send(7, i as u64 + 1, "full", recs).is_err() {
                break;
            }
        }
        while acked < all.len() {
            match c.reply() {
                Reply::Ack(s, q) => {
                    assert_eq!((s, q), (7, acked as u64 + 1), "acks come in order");
                    acked += 1;
                }
                other => {
                    errors.fetch_add(1, Ordering::SeqCst);
                    eprintln!("after {acked} batches: {other:?}");
                    std::thread::sleep(Duration::from_millis(200));
                    break;
                }
            }
        }
    }
    after_free
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_recovered_from_once_space_is_freed() {
    let Some(fs) = Tmpfs::mount("96m") else {
        eprintln!("NOTICE: cannot mount a tmpfs (not root?): the full-disk test is skipped");
        return;
    };
    let db = fs.path().join("full.db");
    let mut cfg = ServeConfig::new(db.display().to_string());
    cfg.listen = "127.0.0.1:0".parse().unwrap();
    cfg.ingest = "127.0.0.1:0".parse().unwrap();
    let running = memwatch_daemon::start(cfg).await.unwrap();
    let addr = running.ingest_addr;
    // 160 batches of 2,000 events (about 25 MB as stored) into 4 MiB of free space.
    let per = 2_000;
    let events = workload(160 * per, 1_000, 1, 33);
    let all: Vec<Vec<Record>> = events
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
    let ballast = fill(fs.path(), 4 << 20);
    let freed = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let delivery = {
        let (freed, errors, all) = (freed.clone(), errors.clone(), all.clone());
        tokio::task::spawn_blocking(move || deliver(addr, &all, &freed, &errors))
    };
    // Commits fail while the disk is full: wait for a few failures, then free it.
    let t = Instant::now();
    while errors.load(Ordering::SeqCst) < 3 && !delivery.is_finished() {
        assert!(t.elapsed() < Duration::from_secs(300), "no commit failed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed_while_full = errors.load(Ordering::SeqCst);
    assert!(failed_while_full >= 3, "the disk never filled");
    std::fs::remove_file(&ballast).unwrap();
    freed.store(true, Ordering::SeqCst);
    let connections_after = delivery.await.unwrap();
    eprintln!(
        "{failed_while_full} failures while full; every batch acknowledged {connections_after} \
         connection(s) after freeing"
    );
    let runs = running.store.runs(10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].event_count, events.len() as i64);
    assert_eq!(
        stored_events(&running.store, runs[0].id, 0).await,
        event_keys(&events, 0),
        "every event once, in order"
    );
    running.shutdown().await.unwrap();
}
