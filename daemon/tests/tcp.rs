//! TCP ingest: acknowledgements after commit, idempotent resend, and bad input closing
//! only the offending connection (garbage, wrong version, oversized, truncated, bad token).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use memwatch_daemon::ServeConfig;
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::ingest::*;
use memwatch_wire::{encode_record, EventKind, Record};

fn hello(token: &str) -> Vec<u8> {
    let mut b = Vec::new();
    encode_hello(token, "node-t", &mut b);
    b.extend_from_slice(&encode_preamble());
    b
}

fn batch(stream: u64, seq: u64, records: &[Record]) -> Vec<u8> {
    let mut frames = Vec::new();
    for r in records {
        encode_record(r, &mut frames).unwrap();
    }
    let mut b = Vec::new();
    encode_batch_header(stream, seq, "tcp-run", frames.len() as u32, &mut b);
    b.extend_from_slice(&frames);
    b
}

/// Reads until the daemon closes; returns (acks, error message).
fn read_all(s: &mut TcpStream) -> (Vec<(u64, u64)>, Option<String>) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut acks = Vec::new();
    loop {
        let mut m = [0u8; 4];
        if s.read_exact(&mut m).is_err() {
            return (acks, None);
        }
        if m == ERROR_MAGIC {
            let mut n = [0u8; 2];
            s.read_exact(&mut n).unwrap();
            let mut t = vec![0u8; u16::from_le_bytes(n) as usize];
            s.read_exact(&mut t).unwrap();
            return (acks, Some(String::from_utf8(t).unwrap()));
        }
        let mut rest = [0u8; 16];
        s.read_exact(&mut rest).unwrap();
        let mut a = [0u8; ACK_LEN];
        a[..4].copy_from_slice(&m);
        a[4..].copy_from_slice(&rest);
        acks.push(decode_ack(&a).unwrap());
    }
}

fn expect_rejected(addr: std::net::SocketAddr, bytes: &[u8], want: &str) {
    let mut s = TcpStream::connect(addr).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let (_, err) = read_all(&mut s);
    let err = err.unwrap_or_default();
    assert!(err.contains(want), "expected {want:?} in {err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_resend_and_bad_input() {
    for url in dbs("tcp").await.urls {
        let mut cfg = ServeConfig::new(url.clone());
        cfg.listen = "127.0.0.1:0".parse().unwrap();
        cfg.ingest = "127.0.0.1:0".parse().unwrap();
        cfg.token = Some("tok".into());
        cfg.max_batch_bytes = 1 << 20;
        let running = memwatch_daemon::start(cfg).await.unwrap();
        let addr = running.ingest_addr;
        let events = workload(5000, 100, 1, 11);
        let recs1 = vec![start(42, 100), Record::Events(events[..2500].to_vec())];
        let recs2 = vec![Record::Events(events[2500..].to_vec())];

        let good = tokio::task::spawn_blocking(move || {
            // A good client: two batches, then the first one again (resend).
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&hello("tok")).unwrap();
            s.write_all(&batch(7, 1, &recs1)).unwrap();
            s.write_all(&batch(7, 2, &recs2)).unwrap();
            s.write_all(&batch(7, 1, &recs1)).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            read_all(&mut s)
        });
        let bad = tokio::task::spawn_blocking(move || {
            expect_rejected(addr, b"GET / HTTP/1.1\r\n\r\n", "bad hello magic");
            expect_rejected(addr, &hello("wrong"), "bad or missing token");
            let mut v = hello("tok");
            let n = v.len();
            v[n - 8] = 2; // preamble version field
            expect_rejected(addr, &v, "version 2");
            let mut g = hello("tok");
            g.extend_from_slice(b"\xde\xad\xbe\xef garbage garbage");
            expect_rejected(addr, &g, "garbage");
            let mut o = hello("tok");
            encode_batch_header(1, 1, "r", 50 << 20, &mut o);
            expect_rejected(addr, &o, "exceeds");
            let mut t = hello("tok");
            let mut one = batch(
                1,
                1,
                &[Record::Events(vec![ev(1, EventKind::Alloc, 1, 1, 0)])],
            );
            let n = one.len();
            one[n - 2] ^= 0xff; // corrupt the frame's CRC
            t.extend_from_slice(&one);
            expect_rejected(addr, &t, "checksum");
        });
        bad.await.unwrap();
        let (acks, err) = good.await.unwrap();
        assert_eq!(err, None, "{url}");
        assert_eq!(acks, vec![(7, 1), (7, 2), (7, 1)]);
        let runs = running.store.runs(10).await.unwrap();
        assert_eq!(runs.len(), 1, "bad connections stored nothing ({url})");
        assert_eq!(runs[0].event_count, 5000, "the resend was not stored twice");
        assert_eq!(
            runs[0].devices[0].live_bytes,
            exact_curve(&events, 0).last().unwrap().1
        );
    }
}

#[tokio::test]
async fn refuses_non_loopback_without_token() {
    let d = dbs("token").await;
    let mut cfg = ServeConfig::new(d.urls[0].clone());
    cfg.listen = "0.0.0.0:0".parse().unwrap();
    let err = memwatch_daemon::start(cfg)
        .await
        .err()
        .expect("must refuse");
    assert!(err.to_string().contains("without a token"), "{err}");
}
