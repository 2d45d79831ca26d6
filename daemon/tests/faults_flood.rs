//! Fault injection (issue 25 item 3): while one client floods batches of 20,000 events
//! as fast as the daemon takes them, a second client's 200-event batches are
//! acknowledged with p99 <= 1 s. Against a daemon child process of its own (in its own
//! test binary, so that nothing else runs beside it). Prints the figures and the
//! acknowledgements over 600 ms. Loopback only.

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::child::{serve_if_child, ChildDaemon};
use common::client::{batch_bytes, Client, Reply};
use common::*;
use memwatch_wire::Record;

/// The daemon's stated memory bound (daemon/README.md, "Memory bound").
const RSS_BOUND: u64 = 512 << 20;

/// Client B's acknowledgements measured under the flood (p99: the second largest).
const SAMPLES: u64 = 100;

/// The daemon, when this binary runs as the child (see `common::child`).
#[test]
fn child_daemon() {
    serve_if_child();
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[test]
fn a_flood_starves_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = ChildDaemon::spawn(&dir.path().join("flood.db"), 0);
    let ingest = daemon.ingest;
    let t = Instant::now();
    let mut slow: Vec<String> = Vec::new();

    // Flood: client A sends 20,000-event batches as fast as they are acknowledged;
    // client B sends a 200-event batch 30 ms after each acknowledgement and measures them.
    let stop = Arc::new(AtomicBool::new(false));
    let flooded = Arc::new(AtomicU64::new(0));
    let flood = {
        let (stop, flooded) = (stop.clone(), flooded.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(ingest, "", "flooder").unwrap();
            let mut reader = Client {
                sock: c.sock.try_clone().unwrap(),
            };
            let acks = std::thread::spawn(move || {
                let mut n = 0u64;
                while let Reply::Ack(..) = reader.reply() {
                    n += 1;
                }
                n
            });
            let events = workload(20_000, 1_000, 1, 9);
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                seq += 1;
                let mut recs = Vec::new();
                if seq == 1 {
                    recs.push(start(2, 1_000));
                }
                recs.push(Record::Events(events.clone()));
                if c.sock
                    .write_all(&batch_bytes(7, seq, "flood", &recs))
                    .is_err()
                {
                    break;
                }
                flooded.fetch_add(1, Ordering::Relaxed);
            }
            // Wait for the acknowledgements of what was sent, then close.
            std::thread::sleep(Duration::from_millis(200));
            let _ = c.sock.shutdown(std::net::Shutdown::Write);
            acks.join().unwrap()
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let mut b = Client::connect(ingest, "", "second").unwrap();
    let mut lat = Vec::new();
    let small = workload(200, 1_000, 1, 5);
    for seq in 1..=SAMPLES {
        let mut recs = Vec::new();
        if seq == 1 {
            recs.push(start(3, 1_000));
        }
        recs.push(Record::Events(small.clone()));
        let sent = Instant::now();
        b.send(8, seq, "second", &recs).unwrap();
        assert_eq!(b.reply(), Reply::Ack(8, seq));
        lat.push(sent.elapsed().as_secs_f64());
        if sent.elapsed() > Duration::from_millis(600) {
            slow.push(format!(
                "{:.0} ms at {:.1} s",
                sent.elapsed().as_secs_f64() * 1e3,
                t.elapsed().as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    let flood_batches = flooded.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let flood_acked = flood.join().unwrap();
    lat.sort_by(f64::total_cmp);
    let (p50, p99, max) = (
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        lat[lat.len() - 1],
    );
    let rss = daemon.peak_rss();
    println!(
        "faults: flood fairness: client A sent {flood_batches} batches of 20,000 events \
         ({flood_acked} acknowledged); client B's {SAMPLES} acknowledgements: p50 {:.0} ms, p99 {:.0} \
         ms, max {:.0} ms (bound 1000 ms); over 600 ms: {slow:?}; daemon peak RSS {} MiB",
        p50 * 1e3,
        p99 * 1e3,
        max * 1e3,
        rss >> 20
    );
    daemon.kill();
    assert!(p99 <= 1.0, "p99 ack latency {p99:.3} s under a flood");
    assert!(rss <= RSS_BOUND, "peak RSS {rss} over the bound");
    assert!(flood_acked > 0, "the flooding client was served too");
}
