//! Receiver throughput: N concurrent synthetic shims send events frames over the Unix
//! socket; the receiver validates them and writes one capture file. Prints events/s and
//! MiB/s written. Run: `cargo bench -p memwatch-agent --bench receiver_throughput`
//! (env MEMWATCH_BENCH_EVENTS = events per client, default 2,000,000).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memwatch_agent::{CaptureFileSink, Receiver};
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::*;

const BATCH: usize = 1024;

fn client(path: std::path::PathBuf, pid: u32, events: usize) {
    let mut s = UnixStream::connect(path).expect("connect");
    let mut out = encode_preamble().to_vec();
    encode_record(
        &Record::ProcessStart(ProcessStart {
            pid,
            ppid: 1,
            mono_anchor_ns: 1,
            argv: vec!["bench".into()],
            ..ProcessStart::default()
        }),
        &mut out,
    )
    .expect("encode");
    s.write_all(&out).expect("write");
    let mut batch = vec![Event::default(); BATCH];
    let mut frame = vec![0u8; 16 + BATCH * EVENT_SIZE];
    let mut sent = 0usize;
    while sent < events {
        let n = BATCH.min(events - sent);
        for (i, e) in batch[..n].iter_mut().enumerate() {
            let k = (sent + i) as u64;
            *e = Event {
                ts_ns: 1000 + k,
                ptr: 0x1000 + (k / 2) * 256,
                size: 256,
                pid,
                tid: pid,
                duration_ns: 100,
                ..Event::new(
                    if k.is_multiple_of(2) {
                        EventKind::Alloc
                    } else {
                        EventKind::Free
                    },
                    MemKind::Device,
                    Api::HipMalloc,
                )
            };
        }
        let len = encode_events_frame_into(&batch[..n], &mut frame).expect("frame");
        s.write_all(&frame[..len]).expect("write");
        sent += n;
    }
}

fn main() {
    let per_client: usize = std::env::var("MEMWATCH_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    println!(
        "receiver throughput ({} events per client, {BATCH}-event frames, 72 B/event)",
        per_client
    );
    for clients in [1usize, 4, 8] {
        let path = dir.path().join(format!("bench-{clients}.mwcap"));
        let sink = Arc::new(CaptureFileSink::create(&path).expect("capture"));
        let rx = Receiver::start(Some(dir.path()), sink.clone()).expect("receiver");
        let t0 = Instant::now();
        let handles: Vec<_> = (0..clients)
            .map(|i| {
                let p = rx.socket_path().to_path_buf();
                std::thread::spawn(move || client(p, 100 + i as u32, per_client))
            })
            .collect();
        for h in handles {
            h.join().expect("client");
        }
        assert!(
            rx.wait_idle(Duration::from_secs(120)),
            "receiver did not drain"
        );
        let stats = rx.shutdown();
        let cap = sink.finish().expect("finish");
        let secs = t0.elapsed().as_secs_f64();
        assert!(stats.failed().next().is_none());
        assert_eq!(cap.events, (clients * per_client) as u64);
        println!(
            "  {clients} clients: {:>6.1} M events/s  {:>7.1} MiB/s  ({} events, {:.2} s)",
            cap.events as f64 / secs / 1e6,
            cap.bytes as f64 / secs / (1 << 20) as f64,
            cap.events,
            secs
        );
        let _ = std::fs::remove_file(&path);
    }
}
