//! Fault injection (issue 25 item 2; item 3 is `faults_flood.rs`), against a daemon in a child process whose
//! peak resident memory (VmHWM) is read from /proc:
//! - memory abuse by local clients: batch headers claiming 64 MiB that then send nothing,
//!   64 MiB batches of 13-byte empty event frames (which decode to ~10x their size), a
//!   250 MiB and a 60 MiB `POST /api/ingest` of empty frames, 600 connections that send a
//!   hello and then nothing; afterwards a normal client is still served, and the daemon's
//!   peak RSS stays under the bound daemon/README.md states (512 MiB);
//!
//! Prints the figures. Loopback only.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::child::{serve_if_child, ChildDaemon};
use common::client::{Client, Reply};
use common::*;
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::ingest::{encode_batch_header, encode_hello};
use memwatch_wire::{encode_record, Record};

/// The daemon's stated memory bound (daemon/README.md, "Memory bound").
const RSS_BOUND: u64 = 512 << 20;

/// The daemon, when this binary runs as the child (see `common::child`).
#[test]
fn child_daemon() {
    serve_if_child();
}

fn hello(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    let mut b = Vec::new();
    encode_hello("", "abuser", &mut b);
    b.extend_from_slice(&encode_preamble());
    (&s).write_all(&b).unwrap();
    s
}

/// `n` bytes of whole 13-byte empty event frames (the rest of `n` left out).
fn empty_frames(n: usize) -> Vec<u8> {
    let mut one = Vec::new();
    encode_record(&Record::Events(Vec::new()), &mut one).unwrap();
    one.repeat(n / one.len())
}

/// A raw HTTP/1.1 POST; returns the status code.
fn post(api: SocketAddr, path: &str, declared: usize, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(api).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {declared}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    // The daemon may answer (and close) before the body is sent.
    let _ = s.write_all(body);
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn abuse_stays_under_the_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = ChildDaemon::spawn(&dir.path().join("abuse.db"), 0);
    let (api, ingest) = (daemon.api, daemon.ingest);
    let idle_rss = daemon.peak_rss();
    let t = Instant::now();

    // 1. Ten batch headers claiming 64 MiB each, then nothing.
    let claimers: Vec<TcpStream> = (0..10)
        .map(|i| {
            let s = hello(ingest);
            let mut h = Vec::new();
            encode_batch_header(100 + i, 1, "r", (64 << 20) - 64, &mut h);
            (&s).write_all(&h).unwrap();
            s
        })
        .collect();

    // 2. Four 64 MiB batches of empty event frames at once: refused, not decoded.
    let frames = Arc::new(empty_frames((64 << 20) - 256));
    let senders: Vec<_> = (0..4u64)
        .map(|i| {
            let frames = frames.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(ingest, "", "abuser").unwrap();
                let mut h = Vec::new();
                encode_batch_header(200 + i, 1, "r", frames.len() as u32, &mut h);
                let _ = c.send_raw(&h);
                let _ = c.send_raw(&frames);
                c.reply()
            })
        })
        .collect();
    for s in senders {
        match s.join().unwrap() {
            Reply::Error(e) => assert!(e.contains("more than the daemon holds"), "{e}"),
            other => panic!("a 64 MiB batch of empty frames was answered {other:?}"),
        }
    }

    // 3. HTTP ingest: 250 MiB declared (refused before reading), 60 MiB of empty frames.
    let mut body = encode_preamble().to_vec();
    body.extend_from_slice(&empty_frames(60 << 20));
    assert_eq!(post(api, "/api/ingest?node=n", 250 << 20, &[]), 413);
    assert_eq!(post(api, "/api/ingest?node=n", body.len(), &body), 413);
    drop(body);

    // 4. 600 connections that send a hello and then nothing: at most the limit is kept.
    let idle: Vec<TcpStream> = (0..600).map(|_| hello(ingest)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut refused = 0;
    for s in &idle {
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 4];
        if matches!((&*s).read(&mut b), Ok(n) if n > 0) {
            refused += 1;
        }
    }
    assert!(refused >= 600 - 256, "{refused} of 600 refused");

    // Once they are gone, a normal client is served (while they hold every connection
    // slot, the daemon refuses new connections: that is the limit).
    drop((claimers, idle));
    std::thread::sleep(Duration::from_millis(300));
    let mut good = Client::connect(ingest, "", "good").unwrap();
    let events = workload(5000, 1_000, 1, 3);
    good.send(1, 1, "good", &[start(1, 1_000), Record::Events(events)])
        .unwrap();
    assert_eq!(good.reply(), Reply::Ack(1, 1));
    let abuse_rss = daemon.peak_rss();
    println!(
        "faults: memory abuse (10 idle 64 MiB headers, 4 x 64 MiB of 13-byte frames, \
         250 + 60 MiB HTTP bodies, 600 idle connections, {refused} refused): daemon peak RSS \
         {} MiB (idle {} MiB, bound {} MiB), {:.1} s",
        abuse_rss >> 20,
        idle_rss >> 20,
        RSS_BOUND >> 20,
        t.elapsed().as_secs_f64()
    );
    assert!(
        abuse_rss <= RSS_BOUND,
        "peak RSS {abuse_rss} over the bound"
    );
    daemon.kill();
}
