//! Per-peer fairness (issue 33, 3), checked by order and counts, never by time. Two
//! peers on loopback: clients bound to 127.0.0.2 and 127.0.0.3 (all of 127.0.0.0/8 is
//! loopback on Linux; a peer is an address and, on loopback, a user).
//! - a peer flooding over [`FLOOD_CONNS`] connections gets one writer turn per turn of
//!   another peer: each of the second peer's batches is acknowledged behind at most
//!   half as many of the flooder's batches as it has connections. Before, every
//!   connection had a turn: a batch waited behind one of each flooder connection.
//! - a peer holding many connections that send nothing (no hello, so never idle) cannot
//!   keep another peer out: it holds at most its share of connections, and the other
//!   peer is served. Before, it filled the table and the other peer was refused.
//! - with a share as large as the table, a newcomer from another peer closes a
//!   connection of the peer holding the most (TCP ingest and HTTP). Before: refused, or
//!   answered 503.
//!
//! `bench/peers.sh` runs the flood in a release build for the second peer's latencies.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::client::{Client, Reply};
use common::*;
use memwatch_daemon::{HttpLimits, Running, ServeConfig, TcpConfig};
use memwatch_wire::encode_record;
use memwatch_wire::ingest::encode_batch_header;
use memwatch_wire::Record;

/// The flooding peer's connections: as many as one peer may hold by default.
const FLOOD_CONNS: usize = 64;
/// The second peer's batches sent under the flood.
const SAMPLES: u64 = 20;
/// Events in one flooder batch: large enough that a commit (sized to ~100 ms at the
/// writer's rate) holds a few of them on any machine, so the bound (half the flooder's
/// connections) tells a turn per peer (about two commits) from a turn per connection.
const FLOOD_EVENTS: usize = 50_000;

const FLOODER: [u8; 4] = [127, 0, 0, 2];
const OTHER: [u8; 4] = [127, 0, 0, 3];

async fn daemon(tcp: TcpConfig, http: HttpLimits) -> (Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServeConfig::new(dir.path().join("peers.db").display().to_string());
    cfg.listen = "127.0.0.1:0".parse().unwrap();
    cfg.ingest = "127.0.0.1:0".parse().unwrap();
    cfg.tcp = tcp;
    cfg.http = http;
    (memwatch_daemon::start(cfg).await.unwrap(), dir)
}

/// A blocking socket from `from` (any port) connected to `to`.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::from((from, 0))).unwrap();
    let s = s.connect(to).await.unwrap().into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s
}

/// Waits until `done` holds; a generous deadline only keeps a broken daemon from hanging
/// the test.
async fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !done() {
        assert!(Instant::now() < deadline, "hung: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One flooder connection: batches of [`FLOOD_EVENTS`] events as fast as the daemon reads them,
/// each acknowledgement counted in `acks`, until `stop`.
fn flood(
    sock: TcpStream,
    i: usize,
    frames: Arc<Vec<u8>>,
    acks: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let node = format!("flood{i}");
    let mut c = Client::hello_on(sock, "", &node).unwrap();
    let mut reader = Client {
        sock: c.sock.try_clone().unwrap(),
    };
    let counter = std::thread::spawn(move || {
        while let Reply::Ack(..) = reader.reply() {
            acks.fetch_add(1, Ordering::SeqCst);
        }
    });
    let first = {
        let mut f = Vec::new();
        encode_record(&start(2, 1_000), &mut f).unwrap();
        f.extend_from_slice(&frames);
        f
    };
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let body: &[u8] = if seq == 1 { &first } else { &frames };
        let mut b = Vec::with_capacity(body.len() + 64);
        encode_batch_header(1, seq, "flood", body.len() as u32, &mut b);
        b.extend_from_slice(body);
        if c.sock.write_all(&b).is_err() {
            break;
        }
    }
    let _ = c.sock.shutdown(std::net::Shutdown::Write);
    let _ = counter.join();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_s_many_connections_get_one_turn_per_turn_of_another_peer() {
    let (running, _dir) = daemon(TcpConfig::default(), HttpLimits::default()).await;
    let addr = running.ingest_addr;
    assert!(FLOOD_CONNS <= TcpConfig::default().max_connections_per_peer);
    let mut frames = Vec::new();
    encode_record(
        &Record::Events(workload(FLOOD_EVENTS, 1_000, 1, 9)),
        &mut frames,
    )
    .unwrap();
    let frames = Arc::new(frames);
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(AtomicU64::new(0));
    let mut flooders = Vec::new();
    for i in 0..FLOOD_CONNS {
        let sock = connect_from(FLOODER, addr).await;
        let (frames, acks, stop) = (frames.clone(), acks.clone(), stop.clone());
        flooders.push(std::thread::spawn(move || {
            flood(sock, i, frames, acks, stop)
        }));
    }
    // The flood is under way: the daemon has acknowledged some of it, and every flooder
    // connection has batches in flight.
    wait_for("the flood's first acknowledgements", || {
        acks.load(Ordering::SeqCst) >= 8
    })
    .await;
    let sock = connect_from(OTHER, addr).await;
    let acks_b = acks.clone();
    let (behind, lat) = tokio::task::spawn_blocking(move || {
        let mut b = Client::hello_on(sock, "", "second").unwrap();
        b.sock
            .set_read_timeout(Some(Duration::from_secs(600)))
            .unwrap();
        let small = workload(200, 1_000, 1, 5);
        let (mut behind, mut lat) = (Vec::new(), Vec::new());
        for seq in 1..=SAMPLES {
            let mut recs = Vec::new();
            if seq == 1 {
                recs.push(start(3, 1_000));
            }
            recs.push(Record::Events(small.clone()));
            let before = acks_b.load(Ordering::SeqCst);
            let sent = Instant::now();
            b.send(8, seq, "second", &recs).unwrap();
            let reply = b.reply();
            lat.push(sent.elapsed().as_secs_f64());
            behind.push(acks_b.load(Ordering::SeqCst) - before);
            assert_eq!(
                reply,
                Reply::Ack(8, seq),
                "flooder batches behind: {behind:?}"
            );
            std::thread::sleep(Duration::from_millis(30));
        }
        (behind, lat)
    })
    .await
    .unwrap();
    // The flood goes on after the second peer: it was served all along, not stopped.
    let after = acks.load(Ordering::SeqCst);
    wait_for("the flood after the second peer", || {
        acks.load(Ordering::SeqCst) > after
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    let mut sorted = behind.clone();
    sorted.sort_unstable();
    let worst = sorted[sorted.len() - 1];
    let bound = FLOOD_CONNS as u64 / 2;
    println!(
        "faults: peer fairness: a peer flooding over {FLOOD_CONNS} connections ({} batches \
         of {FLOOD_EVENTS} events acknowledged); flooder batches acknowledged while one of the \
         second peer's waited: median {}, max {worst} (bound {bound})",
        acks.load(Ordering::SeqCst),
        sorted[sorted.len() / 2],
    );
    let mut lat = lat;
    lat.sort_by(f64::total_cmp);
    println!(
        "faults: peer latency: the second peer's {SAMPLES} acknowledgements: p50 {:.0} ms, \
         p90 {:.0} ms, max {:.0} ms",
        percentile(&lat, 0.5) * 1e3,
        percentile(&lat, 0.9) * 1e3,
        lat[lat.len() - 1] * 1e3
    );
    assert!(
        worst <= bound,
        "a batch of the second peer waited behind {worst} of the flooder's (bound {bound}): \
         {behind:?}"
    );
    running.shutdown().await.unwrap();
}

/// The next reply on `sock` within a moment: `Some` for an error or the end of the
/// connection, `None` while it stays open and silent.
fn closed_with(sock: &TcpStream) -> Option<Reply> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut c = Client {
        sock: sock.try_clone().unwrap(),
    };
    match c.reply() {
        Reply::Closed => {
            let mut b = [0u8; 1];
            match (&*sock).read(&mut b) {
                Ok(0) => Some(Reply::Closed),
                _ => None,
            }
        }
        r => Some(r),
    }
}

/// Sends one batch on `sock` as a new client: its acknowledgement, or how it was refused.
fn serve_one(sock: TcpStream) -> Reply {
    let mut c = match Client::hello_on(sock, "", "other") {
        Ok(c) => c,
        Err(e) => return Reply::Error(format!("hello: {e}")),
    };
    let batch = [start(7, 1_000), Record::Events(workload(100, 2_000, 1, 3))];
    // A refused client may find its socket closed when it sends: the reply says why.
    let _ = c.send(5, 1, "work", &batch);
    c.reply()
}

fn silent_daemon_config(total: usize, per_peer: usize) -> (TcpConfig, HttpLimits) {
    let tcp = TcpConfig {
        max_connections: total,
        max_connections_per_peer: per_peer,
        // Silent connections stay for the whole test.
        hello_timeout: Duration::from_secs(600),
        ..TcpConfig::default()
    };
    let http = HttpLimits {
        max_connections: total,
        max_connections_per_peer: per_peer,
        ..HttpLimits::default()
    };
    (tcp, http)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_holding_silent_connections_cannot_keep_another_out() {
    let (tcp, http) = silent_daemon_config(256, 64);
    let (running, _dir) = daemon(tcp, http).await;
    let addr = running.ingest_addr;
    // Peer A opens the whole table's worth of connections and sends nothing.
    let mut silent = Vec::new();
    for _ in 0..256 {
        silent.push(connect_from(FLOODER, addr).await);
    }
    // The daemon has taken them all in (admitted or refused) before peer B comes.
    let m = running.metrics.clone();
    wait_for("peer A's connections admitted or refused", || {
        m.connections_total.load(Ordering::SeqCst)
            + m.connections_rejected_total.load(Ordering::SeqCst)
            >= 256
    })
    .await;
    let sock = connect_from(OTHER, addr).await;
    let reply = tokio::task::spawn_blocking(move || serve_one(sock))
        .await
        .unwrap();
    let refused: Vec<Reply> =
        tokio::task::spawn_blocking(move || silent.iter().filter_map(closed_with).collect())
            .await
            .unwrap();
    println!(
        "faults: silent connections: peer A opened 256, {} refused; peer B: {reply:?}",
        refused.len()
    );
    assert_eq!(reply, Reply::Ack(5, 1), "peer B was not served");
    assert_eq!(
        refused.len(),
        256 - 64,
        "peer A holds its share: {refused:?}"
    );
    assert!(
        refused
            .iter()
            .all(|r| matches!(r, Reply::Error(m) if m.contains("from this client"))),
        "{refused:?}"
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_the_peer_holding_the_most_makes_room_on_ingest() {
    const LIMIT: usize = 8;
    let (tcp, http) = silent_daemon_config(LIMIT, LIMIT);
    let (running, _dir) = daemon(tcp, http).await;
    let addr = running.ingest_addr;
    let mut silent = Vec::new();
    for _ in 0..LIMIT {
        silent.push(connect_from(FLOODER, addr).await);
    }
    let m = running.metrics.clone();
    wait_for("peer A's connections admitted", || {
        m.connections_total.load(Ordering::SeqCst) >= LIMIT as u64
    })
    .await;
    let sock = connect_from(OTHER, addr).await;
    let reply = tokio::task::spawn_blocking(move || serve_one(sock))
        .await
        .unwrap();
    let closed: Vec<Reply> =
        tokio::task::spawn_blocking(move || silent.iter().filter_map(closed_with).collect())
            .await
            .unwrap();
    assert_eq!(reply, Reply::Ack(5, 1), "peer B was not served");
    assert_eq!(
        closed.len(),
        1,
        "one of peer A's connections made room: {closed:?}"
    );
    assert!(
        matches!(&closed[0], Reply::Error(m) if m.contains("holds the most connections")),
        "{closed:?}"
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_the_peer_holding_the_most_makes_room_on_http() {
    const LIMIT: usize = 8;
    let (tcp, http) = silent_daemon_config(LIMIT, LIMIT);
    let (running, _dir) = daemon(tcp, http).await;
    let api = running.api_addr;
    // Peer A: requests in progress (headers complete, the body never comes).
    let mut busy = Vec::new();
    for _ in 0..LIMIT {
        let mut s = connect_from(FLOODER, api).await;
        s.write_all(
            b"POST /api/ingest?node=a HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Memwatch-Client: test\r\n\
              Content-Length: 1000\r\n\r\n",
        )
        .unwrap();
        busy.push(s);
    }
    // Every one of them is in its handler, waiting for the body (the ingest endpoint
    // charges the body's size before reading it).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut s = connect_from(OTHER, api).await;
    let answer = tokio::task::spawn_blocking(move || {
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        s.write_all(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer
    })
    .await
    .unwrap();
    let closed = tokio::task::spawn_blocking(move || {
        busy.iter().filter(|s| closed_with(s).is_some()).count()
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(closed, 1, "one of peer A's connections made room");
    running.shutdown().await.unwrap();
}
