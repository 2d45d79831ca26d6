//! Fair ingest under abuse from local clients (issue 33, 3), checked by order and counts:
//! - two connections that announce a 64 MiB batch and then trickle its body cannot hold
//!   the received-data budget (and a legitimate batch queued behind them) for long: the
//!   legitimate batch is acknowledged before the trickling clients have sent their
//!   [`TRICKLE_LIMIT`]th byte (two bytes a second). Before, their bodies held the budget
//!   for 30 s + 1 s per MiB each: the audit's 100-event batch waited 185 s.
//! - connections that idle after their hello cannot keep a working client out: at the
//!   connection limit the longest-idle one is closed, and the newcomer is served. Before,
//!   the newcomer was refused ("too many connections").
//! - the same for HTTP connections that trickle a request's headers: at the limit the
//!   oldest is closed and a request is answered. Before: 503 for the header timeout (30 s).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::client::{Client, Reply};
use common::*;
use memwatch_daemon::{Running, ServeConfig};
use memwatch_wire::ingest::encode_batch_header;
use memwatch_wire::Record;

/// Trickled bytes (at two a second) before which the legitimate batch must be through.
const TRICKLE_LIMIT: u64 = 80;

async fn daemon(max_connections: usize) -> (Running, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServeConfig::new(dir.path().join("fair.db").display().to_string());
    cfg.listen = "127.0.0.1:0".parse().unwrap();
    cfg.ingest = "127.0.0.1:0".parse().unwrap();
    cfg.tcp.max_connections = max_connections;
    cfg.http.max_connections = max_connections;
    (memwatch_daemon::start(cfg).await.unwrap(), dir)
}

fn legit_batch() -> Vec<Record> {
    vec![start(7, 1_000), Record::Events(workload(100, 2_000, 1, 3))]
}

/// A client that announces a 64 MiB batch and sends its body a byte at a time, twice a
/// second, until the daemon closes it or `stop`; counts the bytes it sent.
fn trickle(addr: SocketAddr, sent: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let mut c = Client::connect(addr, "", "trickler").unwrap();
    let mut head = Vec::new();
    encode_batch_header(1, 1, "slow", 64 << 20, &mut head);
    c.send_raw(&head).unwrap();
    while !stop.load(Ordering::SeqCst) {
        if c.sock.write_all(&[0x5a]).is_err() {
            return;
        }
        sent.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_batch_bodies_do_not_hold_a_legitimate_batch() {
    let (running, _dir) = daemon(256).await;
    let addr = running.ingest_addr;
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let tricklers: Vec<_> = counts
        .iter()
        .map(|n| {
            let (n, stop) = (n.clone(), stop.clone());
            std::thread::spawn(move || trickle(addr, n, stop))
        })
        .collect();
    // Both bodies have started before the legitimate client comes.
    while counts.iter().any(|n| n.load(Ordering::SeqCst) < 2) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reply = tokio::task::spawn_blocking(move || {
        let mut c = Client::connect(addr, "", "legit").unwrap();
        c.sock
            .set_read_timeout(Some(Duration::from_secs(300)))
            .unwrap();
        c.send(9, 1, "legit", &legit_batch()).unwrap();
        c.reply()
    })
    .await
    .unwrap();
    let at_ack: Vec<u64> = counts.iter().map(|n| n.load(Ordering::SeqCst)).collect();
    stop.store(true, Ordering::SeqCst);
    for t in tricklers {
        t.join().unwrap();
    }
    eprintln!("legitimate batch: {reply:?} after the tricklers sent {at_ack:?} bytes");
    assert_eq!(reply, Reply::Ack(9, 1));
    assert!(
        at_ack.iter().all(|&n| n < TRICKLE_LIMIT),
        "the legitimate batch waited behind the trickled bodies: they sent {at_ack:?} bytes \
         first"
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_make_room_for_a_working_client() {
    const LIMIT: usize = 16;
    let (running, _dir) = daemon(LIMIT).await;
    let addr = running.ingest_addr;
    let (idlers, reply) = tokio::task::spawn_blocking(move || {
        let mut idlers = Vec::new();
        for i in 0..LIMIT {
            idlers.push(Client::connect(addr, "", &format!("idle{i}")).unwrap());
            // Distinct idle-since times, in connection order.
            std::thread::sleep(Duration::from_millis(20));
        }
        // Every idler is past its hello (the daemon has registered them as idle).
        std::thread::sleep(Duration::from_millis(500));
        let mut c = Client::connect(addr, "", "working").unwrap();
        c.send(5, 1, "work", &legit_batch()).unwrap();
        (idlers, c.reply())
    })
    .await
    .unwrap();
    assert_eq!(reply, Reply::Ack(5, 1), "the working client was not served");
    // Exactly one idler was closed, the one idle the longest (the first).
    let closed: Vec<(usize, Reply)> = tokio::task::spawn_blocking(move || {
        idlers
            .into_iter()
            .enumerate()
            .filter_map(|(i, mut c)| {
                c.sock
                    .set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                match c.reply() {
                    Reply::Closed => None,
                    r => Some((i, r)),
                }
            })
            .collect()
    })
    .await
    .unwrap();
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0].0, 0, "{closed:?}");
    assert!(
        matches!(&closed[0].1, Reply::Error(m) if m.contains("closed while idle")),
        "{closed:?}"
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_http_headers_make_room_for_a_request() {
    const LIMIT: usize = 16;
    let (running, _dir) = daemon(LIMIT).await;
    let api = running.api_addr;
    let (slow, answer) = tokio::task::spawn_blocking(move || {
        let mut slow = Vec::new();
        for _ in 0..LIMIT {
            let mut s = TcpStream::connect(api).unwrap();
            // Headers begun, never finished.
            s.write_all(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .unwrap();
            slow.push(s);
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(500));
        let mut s = TcpStream::connect(api).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        (slow, answer)
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Exactly the oldest slow connection was closed (it reads the end of the stream).
    let closed: Vec<usize> = tokio::task::spawn_blocking(move || {
        slow.into_iter()
            .enumerate()
            .filter_map(|(i, mut s)| {
                s.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                let mut b = [0u8; 64];
                matches!(s.read(&mut b), Ok(0)).then_some(i)
            })
            .collect()
    })
    .await
    .unwrap();
    assert_eq!(closed, vec![0]);
    running.shutdown().await.unwrap();
}
