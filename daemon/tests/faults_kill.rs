//! Fault injection (issue 25): `kill -9` of the daemon at random points while the real
//! agent forwarder replays a spool of 1,000,000 events, then a restart; repeated with
//! random seeds. Afterwards the run's stored events equal the agent's input event for
//! event: none lost, none duplicated. Loopback only.
//!
//! The daemon is this test binary run again as a child process (`common::child`), so
//! that it can be killed with SIGKILL.
//! `MEMWATCH_FAULT_ROUNDS` (default 2) rounds of `MEMWATCH_FAULT_KILLS` (default 10)
//! kills each: 20 kills at random points (`MEMWATCH_FAULT_SEED` replays a printed seed).
//! Prints the figures.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::child::{free_port, serve_if_child, ChildDaemon};
use common::*;
use memwatch_agent::forwarder::{Forwarder, ForwarderConfig};
use memwatch_daemon::Store;
use memwatch_wire::{encode_record, Record};

const EVENTS: usize = 1_000_000;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The daemon, when this binary runs as the child (see `common::child`).
#[test]
fn child_daemon() {
    serve_if_child();
}

/// xorshift64*: the seeds are printed, so a failing round can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn kill_9_while_the_agent_replays_loses_and_duplicates_nothing() {
    let rounds = env_or("MEMWATCH_FAULT_ROUNDS", 2);
    let kills = env_or("MEMWATCH_FAULT_KILLS", 10);
    let base_seed = env_or(
        "MEMWATCH_FAULT_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    );
    let started = Instant::now();
    let mut killed_total = 0u64;
    for round in 0..rounds {
        let seed = base_seed.wrapping_add(round.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
        let mut rng = Rng(seed);
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("faults.db");
        let port = free_port();
        let t_round = Instant::now();

        // The agent's spool, filled while no daemon runs: a replay of a million events.
        let mut cfg = ForwarderConfig::new(
            format!("127.0.0.1:{port}"),
            "fault-node",
            dir.path().join("spool"),
        );
        cfg.batch_bytes = 256 << 10;
        let fwd = Forwarder::start(cfg).unwrap();
        let key = fwd.open_stream("fault-run");
        let events = workload(EVENTS, 1_000_000, 2, seed);
        let mut frames = Vec::new();
        encode_record(&start(4242, 1_000_000), &mut frames).unwrap();
        for chunk in events.chunks(1000) {
            encode_record(&Record::Events(chunk.to_vec()), &mut frames).unwrap();
            if frames.len() >= 64 << 10 {
                fwd.push(key, &frames).unwrap();
                frames.clear();
            }
        }
        fwd.push(key, &frames).unwrap();
        // Sealed by the forwarder's timer.
        let seal_deadline = Instant::now() + Duration::from_secs(120);
        while fwd.stats().bytes_spooled.load(Ordering::Relaxed) < (EVENTS * 72) as u64 {
            assert!(Instant::now() < seal_deadline, "the spool did not fill");
            std::thread::sleep(Duration::from_millis(20));
        }
        let batches = fwd.stats().batches_spooled.load(Ordering::Relaxed);

        // Kill points: after a random number of acknowledged batches, plus up to 50 ms
        // (so that the kill also lands inside commits, not only between them).
        let mut points: Vec<u64> = (0..kills).map(|_| rng.next() % batches).collect();
        points.sort_unstable();
        let mut daemon = ChildDaemon::spawn(&db, port);
        let mut at_kill = Vec::new();
        for p in &points {
            let deadline = Instant::now() + Duration::from_secs(120);
            while fwd.stats().batches_acked.load(Ordering::Relaxed) < *p {
                assert!(
                    Instant::now() < deadline,
                    "the agent stopped making progress"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(rng.next() % 50));
            daemon.kill();
            killed_total += 1;
            at_kill.push(fwd.stats().batches_acked.load(Ordering::Relaxed));
            daemon = ChildDaemon::spawn(&db, port);
        }
        let deadline = Instant::now() + Duration::from_secs(300);
        while fwd.spooled_bytes() > 0 {
            assert!(Instant::now() < deadline, "the replay did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
        let acked = fwd.stats().batches_acked.load(Ordering::Relaxed);
        assert!(fwd.shutdown(Duration::from_secs(120)));
        daemon.kill();

        // What the database holds, event for event.
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (stored, count) = rt.block_on(async {
            let store = Store::open(&db.display().to_string()).await.unwrap();
            let runs = store.runs(10).await.unwrap();
            assert_eq!(runs.len(), 1, "one run");
            let id = runs[0].id;
            let mut all = Vec::new();
            for dev in 0..2 {
                all.push(stored_events(&store, id, dev).await);
            }
            store.close().await.unwrap();
            (all, runs[0].event_count)
        });
        let mut lost = 0usize;
        let mut duplicated = 0usize;
        for (dev, got) in stored.into_iter().enumerate() {
            let mut want = event_keys(&events, dev as i32);
            let mut got = got;
            want.sort_unstable();
            got.sort_unstable();
            let (mut i, mut j) = (0, 0);
            while i < want.len() || j < got.len() {
                match (want.get(i), got.get(j)) {
                    (Some(a), Some(b)) if a == b => {
                        i += 1;
                        j += 1;
                    }
                    (Some(a), Some(b)) if a < b => {
                        lost += 1;
                        i += 1;
                    }
                    (Some(_), None) => {
                        lost += 1;
                        i += 1;
                    }
                    _ => {
                        duplicated += 1;
                        j += 1;
                    }
                }
            }
        }
        println!(
            "faults: round {round} seed {seed:#x}: {EVENTS} events in {batches} batches, \
             daemon killed after {at_kill:?} acknowledged, {acked} acknowledgements in all; \
             stored {count} events, {lost} lost, {duplicated} duplicated ({:.1} s)",
            t_round.elapsed().as_secs_f64()
        );
        assert_eq!((lost, duplicated), (0, 0), "round {round} seed {seed:#x}");
        assert_eq!(count as usize, EVENTS);
    }
    println!(
        "faults: {killed_total} kill -9 of the daemon in {rounds} rounds of {EVENTS} events: \
         0 lost, 0 duplicated ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
}
