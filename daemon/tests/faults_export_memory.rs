//! The Perfetto export of a large run within the daemon's memory bound (issue 33, 2):
//! a run of 250,000 events (more than the export's 200,000-span cap) stored, then a
//! daemon child process answers `GET /runs/{id}/export/perfetto.json` to 4 readers at
//! once and to 10 slow readers; its peak RSS (VmHWM) must stay under the stated bound
//! (512 MiB, daemon/README.md) and every document must be whole JSON. Before, the
//! document was built in memory as JSON values per request (audit: 720 MiB for one
//! reader of a 3M-event run, 1,937 MiB for 4, 2,695 MiB for 10 slow readers).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::child::{serve_if_child, ChildDaemon};
use common::*;
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::Record;

/// The daemon's stated memory bound (daemon/README.md, "Memory bound").
const RSS_BOUND: u64 = 512 << 20;

/// The daemon, when this binary runs as the child (see `common::child`).
#[test]
fn child_daemon() {
    serve_if_child();
}

/// A GET; reads the answer `chunk` bytes at a time with `pause` between reads.
fn get(api: SocketAddr, path: &str, chunk: usize, pause: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(api).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
}

/// The body of a chunked HTTP/1.1 answer (or of a plain one).
fn body(answer: &[u8]) -> Vec<u8> {
    let text = answer;
    let split = text
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header");
    let head = String::from_utf8_lossy(&text[..split]).to_ascii_lowercase();
    let mut rest = &text[split + 4..];
    if !head.contains("transfer-encoding: chunked") {
        return rest.to_vec();
    }
    let mut out = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size");
        let n = usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap().trim(), 16)
            .expect("a hex chunk size");
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&rest[eol + 2..eol + 2 + n]);
        rest = &rest[eol + 2 + n + 2..];
    }
}

#[test]
fn perfetto_exports_stay_within_the_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("export.db");
    let events = 250_000;
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(db.to_str().unwrap()).await.unwrap();
        let mut ing = Ingestor::new(store.clone());
        let all = workload(events, 1_000, 1, 77);
        for (i, chunk) in all.chunks(50_000).enumerate() {
            let mut records = Vec::new();
            if i == 0 {
                records.push(start(42, 1_000));
            }
            records.push(Record::Events(chunk.to_vec()));
            ing.commit(vec![Batch {
                node: "n".into(),
                stream: 1,
                seq: i as u64 + 1,
                run_key: "big".into(),
                records,
            }])
            .await
            .unwrap();
        }
        store.close().await.unwrap();
    });
    let d = ChildDaemon::spawn(&db, 0);
    let api = d.api;
    let path = "/runs/1/export/perfetto.json";
    let base = d.peak_rss();
    // 4 at once, read as fast as possible.
    let fast: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || get(api, path, 1 << 16, Duration::ZERO)))
        .collect();
    let docs: Vec<Vec<u8>> = fast.into_iter().map(|t| t.join().unwrap()).collect();
    let after_fast = d.peak_rss();
    // 10 slow readers (256 KiB every 20 ms).
    let slow: Vec<_> = (0..10)
        .map(|_| std::thread::spawn(move || get(api, path, 1 << 18, Duration::from_millis(20))))
        .collect();
    let slow_docs: Vec<Vec<u8>> = slow.into_iter().map(|t| t.join().unwrap()).collect();
    let peak = d.peak_rss();
    println!(
        "faults: perfetto export of a 250,000-event run: daemon peak RSS {} MiB at start, {} MiB after 4 readers at once, {} MiB after 10 slow \
         readers (bound {} MiB)",
        base >> 20,
        after_fast >> 20,
        peak >> 20,
        RSS_BOUND >> 20
    );
    d.kill();
    for doc in docs.iter().chain(&slow_docs) {
        let v: serde_json::Value = serde_json::from_slice(&body(doc)).expect("whole JSON");
        assert_eq!(v["metadata"]["events_exported"], 200_000);
        assert_eq!(v["metadata"]["events_truncated_at"], 200_000);
        let evs = v["traceEvents"].as_array().unwrap();
        assert!(evs.iter().filter(|e| e["ph"] == "X").count() == 200_000);
        assert!(evs.iter().any(|e| e["ph"] == "C"));
    }
    assert!(
        peak <= RSS_BOUND,
        "peak RSS {} MiB over the {} MiB bound",
        peak >> 20,
        RSS_BOUND >> 20
    );
}
