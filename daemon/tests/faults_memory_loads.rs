//! The memory bound under valid loads from local clients (issue 33 item 2), against a
//! daemon in a child process whose peak resident memory (VmHWM) is read from /proc:
//! - one connection sends 3M allocations that are never freed;
//! - one connection opens 70,000 runs that never end (a process start each);
//! - 8 connections at once each send one valid 59 MiB batch of events.
//!
//! Each load is checked against the bound daemon/README.md states (512 MiB) and prints
//! its figure. Loopback only.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use common::child::{serve_if_child, ChildDaemon};
use common::client::{batch_bytes, Client, Reply};
use common::*;
use memwatch_wire::{EventKind, Record};

/// The daemon's stated memory bound (daemon/README.md, "Memory bound").
const RSS_BOUND: u64 = 512 << 20;

/// The daemon, when this binary runs as the child (see `common::child`).
#[test]
fn child_daemon() {
    serve_if_child();
}

/// Sends `batches` (already encoded, numbered 1..) on one connection while another
/// thread reads the acknowledgements; returns how many were acknowledged.
fn pipeline(ingest: SocketAddr, node: &str, batches: Vec<Vec<u8>>) -> usize {
    let n = batches.len();
    let mut c = Client::connect(ingest, "", node).unwrap();
    // A debug build of the daemon takes its time; a wait for an ack is not what is tested.
    c.sock
        .set_read_timeout(Some(std::time::Duration::from_secs(900)))
        .unwrap();
    let mut sock = c.sock.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        for b in batches {
            if sock.write_all(&b).is_err() {
                break;
            }
        }
    });
    let mut acked = 0;
    while acked < n {
        match c.reply() {
            Reply::Ack(..) => acked += 1,
            other => panic!("batch {} of {n} answered {other:?}", acked + 1),
        }
    }
    sender.join().unwrap();
    acked
}

fn report(load: &str, daemon: &ChildDaemon, idle: u64) -> u64 {
    let peak = daemon.peak_rss();
    println!(
        "faults: {load}: daemon peak RSS {} MiB (idle {} MiB, bound {} MiB)",
        peak >> 20,
        idle >> 20,
        RSS_BOUND >> 20
    );
    peak
}

#[test]
fn three_million_allocations_never_freed_stay_under_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = ChildDaemon::spawn(&dir.path().join("live.db"), 0);
    let idle = daemon.peak_rss();
    let (per_batch, batches) = (100_000u64, 30u64);
    let t0 = 1_000_000;
    let encoded: Vec<Vec<u8>> = (0..batches)
        .map(|b| {
            let mut recs = Vec::new();
            if b == 0 {
                recs.push(start(42, t0));
            }
            recs.push(Record::Events(
                (0..per_batch)
                    .map(|i| {
                        let n = b * per_batch + i;
                        ev(t0 + 1 + n, EventKind::Alloc, 0x1000 * (n + 1), 256, 0)
                    })
                    .collect(),
            ));
            batch_bytes(1, b + 1, "never-freed", &recs)
        })
        .collect();
    assert_eq!(pipeline(daemon.ingest, "live", encoded) as u64, batches);
    let peak = report("3M allocations never freed, one connection", &daemon, idle);
    assert!(peak <= RSS_BOUND, "peak RSS {peak} over the bound");
    daemon.kill();
}

#[test]
fn seventy_thousand_open_runs_stay_under_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = ChildDaemon::spawn(&dir.path().join("runs.db"), 0);
    let idle = daemon.peak_rss();
    let runs = 70_000u64;
    let encoded: Vec<Vec<u8>> = (0..runs)
        .map(|r| {
            let t0 = 1_000_000 + r * 1000;
            let recs = [
                start(42, t0),
                Record::Events(vec![ev(t0 + 1, EventKind::Alloc, 0x1000, 4096, 0)]),
            ];
            batch_bytes(1, r + 1, &format!("open-{r}"), &recs)
        })
        .collect();
    let bytes: usize = encoded.iter().map(Vec::len).sum();
    assert_eq!(pipeline(daemon.ingest, "runs", encoded) as u64, runs);
    let peak = report(
        &format!("70,000 open runs ({} MB)", bytes / 1_000_000),
        &daemon,
        idle,
    );
    assert!(peak <= RSS_BOUND, "peak RSS {peak} over the bound");
    daemon.kill();
}

#[test]
fn eight_connections_with_a_59_mib_batch_each_stay_under_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = ChildDaemon::spawn(&dir.path().join("big.db"), 0);
    let idle = daemon.peak_rss();
    let clients = 8u64;
    // 59 MiB of events with a realistic mix of allocations and frees.
    let events = workload(860_000, 1_000_000, 2, 11);
    // In frames of 200,000 events (a frame is at most 16 MiB).
    let mut recs = vec![start(42, 1_000_000)];
    recs.extend(events.chunks(200_000).map(|c| Record::Events(c.to_vec())));
    let recs = Arc::new(recs);
    let senders: Vec<_> = (0..clients)
        .map(|c| {
            let recs = recs.clone();
            let ingest = daemon.ingest;
            std::thread::spawn(move || {
                let b = batch_bytes(10 + c, 1, &format!("big-{c}"), &recs);
                assert!(b.len() > 58 << 20 && b.len() < 64 << 20, "{}", b.len());
                pipeline(ingest, &format!("big{c}"), vec![b])
            })
        })
        .collect();
    for s in senders {
        assert_eq!(s.join().unwrap(), 1);
    }
    let peak = report("8 connections, one valid 59 MiB batch each", &daemon, idle);
    assert!(peak <= RSS_BOUND, "peak RSS {peak} over the bound");
    daemon.kill();
}
