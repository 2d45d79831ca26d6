//! Receiver tests with real Unix-socket clients written with memwatch-wire: several
//! simulated processes at once, including ones that send garbage, must each land in the
//! capture exactly as sent, and the bad ones must not disturb the good ones.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use memwatch_agent::*;
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::*;

fn start_record(pid: u32) -> Record {
    Record::ProcessStart(ProcessStart {
        pid,
        ppid: 1,
        mono_anchor_ns: 1_000 * pid as u64,
        wall_anchor_unix_ns: 5,
        shim_version: "test".into(),
        hostname: "h".into(),
        argv: vec![format!("proc{pid}")],
        pid_ns: None,
    })
}

/// The records a well-behaved simulated process sends.
fn process_records(pid: u32, frames: usize, per_frame: usize) -> Vec<Record> {
    let mut out = vec![start_record(pid)];
    for f in 0..frames {
        let events = (0..per_frame)
            .map(|i| Event {
                ts_ns: (f * per_frame + i) as u64,
                ptr: 0x1000 + i as u64,
                size: 64,
                pid,
                tid: pid + 1,
                ..Event::new(EventKind::Alloc, MemKind::Device, Api::HipMalloc)
            })
            .collect();
        out.push(Record::Events(events));
    }
    out.push(Record::Dropped(Dropped {
        pid,
        ts_ns: 9,
        dropped_total: 0,
    }));
    out.push(Record::ProcessEnd(ProcessEnd {
        pid,
        ts_ns: 10,
        exit_code: 0,
    }));
    out
}

fn encode(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        encode_record(r, &mut out).unwrap();
    }
    out
}

/// Sends `bytes` in small pieces so frames straddle reads.
fn send(path: &Path, bytes: &[u8]) {
    let mut s = UnixStream::connect(path).unwrap();
    for chunk in bytes.chunks(777) {
        s.write_all(chunk).unwrap();
    }
}

fn read_capture(path: &Path) -> Vec<Record> {
    let f = std::fs::File::open(path).unwrap();
    let mut r = FrameReader::new(std::io::BufReader::new(f), ReadMode::Strict).unwrap();
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push(rec);
    }
    out
}

fn pid_of(r: &Record) -> u32 {
    match r {
        Record::ProcessStart(s) => s.pid,
        Record::Events(e) => e[0].pid,
        Record::Dropped(d) => d.pid,
        Record::ProcessEnd(e) => e.pid,
        Record::DeviceInfo(d) => d.pid,
        Record::Marker(m) => m.pid,
        other => panic!("unexpected record {other:?}"),
    }
}

fn setup(dir: &Path) -> (PathBuf, Arc<CaptureFileSink>, Receiver) {
    let path = dir.join("cap.mwcap");
    let sink = Arc::new(CaptureFileSink::create(&path).unwrap());
    let rx = Receiver::start(Some(dir), sink.clone()).unwrap();
    (path, sink, rx)
}

#[test]
fn concurrent_clients_and_garbage_senders() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, sink, rx) = setup(dir.path());
    let sock = rx.socket_path().to_path_buf();
    let mut threads = Vec::new();
    for pid in 100..106u32 {
        let sock = sock.clone();
        threads.push(std::thread::spawn(move || {
            let mut bytes = encode_preamble().to_vec();
            bytes.extend(encode(&process_records(pid, 20, 50)));
            send(&sock, &bytes);
        }));
    }
    // A process that starts well, then sends a frame with a broken checksum, then more.
    let garbage_sock = sock.clone();
    threads.push(std::thread::spawn(move || {
        let mut bytes = encode_preamble().to_vec();
        bytes.extend(encode(&[start_record(900)]));
        let mut bad = encode(&process_records(900, 1, 3)[1..2]);
        let n = bad.len();
        bad[n - 1] ^= 0x55;
        bytes.extend(bad);
        bytes.extend(encode(&process_records(900, 2, 3)[1..]));
        send(&garbage_sock, &bytes);
    }));
    // Something that is not memwatch at all.
    let http_sock = sock.clone();
    threads.push(std::thread::spawn(move || {
        send(&http_sock, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    }));
    // A valid stream whose first frame is not process_start.
    let headless_sock = sock.clone();
    threads.push(std::thread::spawn(move || {
        let mut bytes = encode_preamble().to_vec();
        bytes.extend(encode(&process_records(901, 1, 1)[1..]));
        send(&headless_sock, &bytes);
    }));
    // A length field beyond the 16 MiB limit.
    let huge_sock = sock.clone();
    threads.push(std::thread::spawn(move || {
        let mut bytes = encode_preamble().to_vec();
        bytes.extend(encode(&[start_record(902)]));
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&[2u8; 64]);
        send(&huge_sock, &bytes);
    }));
    for t in threads {
        t.join().unwrap();
    }
    assert!(rx.wait_idle(Duration::from_secs(120)));
    let stats = rx.shutdown();
    let written = sink.finish().unwrap();

    assert_eq!(stats.connections.len(), 10);
    let clean: Vec<_> = stats
        .connections
        .iter()
        .filter(|c| c.reason == Some(CloseReason::Eof))
        .collect();
    assert_eq!(clean.len(), 6, "{stats:#?}");
    for c in &clean {
        assert!((100..106).contains(&c.pid.unwrap()));
        assert_eq!(c.frames, 23);
    }
    let failed: Vec<_> = stats.failed().collect();
    assert_eq!(failed.len(), 4);
    for c in &failed {
        let reason = c.reason.as_ref().unwrap().to_string();
        assert!(reason.starts_with("protocol error"), "{reason}");
    }
    let by_pid = |pid| failed.iter().find(|c| c.pid == Some(pid)).unwrap();
    assert!(by_pid(900)
        .reason
        .as_ref()
        .unwrap()
        .to_string()
        .contains("checksum"));
    assert_eq!(by_pid(900).frames, 1);
    assert_eq!(by_pid(902).frames, 1);
    assert!(failed
        .iter()
        .any(|c| c.pid.is_none() && c.reason.as_ref().unwrap().to_string().contains("magic")));
    assert!(failed.iter().any(|c| c.pid.is_none()
        && c.reason
            .as_ref()
            .unwrap()
            .to_string()
            .contains("process_start")));

    // The capture holds every good process's records in order, and the bad ones' valid
    // prefix (their process_start).
    let records = read_capture(&cap);
    for pid in 100..106u32 {
        let mine: Vec<Record> = records
            .iter()
            .filter(|r| pid_of(r) == pid)
            .cloned()
            .collect();
        assert_eq!(mine, process_records(pid, 20, 50));
    }
    assert_eq!(
        records.iter().filter(|r| pid_of(r) == 900).count(),
        1,
        "only the frames before the damage"
    );
    assert_eq!(records.len(), 6 * 23 + 2);
    assert_eq!(written.events, 6 * 20 * 50);
    assert_eq!(written.processes, 8);
    assert_eq!(written.bytes, std::fs::metadata(&cap).unwrap().len());
}

#[test]
fn socket_dir_is_private_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (_cap, _sink, rx) = setup(dir.path());
    let sock_dir = rx.socket_path().parent().unwrap().to_path_buf();
    let mode = std::fs::metadata(&sock_dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert!(rx.sink_address().starts_with("unix:/"));
    rx.shutdown();
    assert!(!sock_dir.exists());
}

/// `memwatch agent --socket PATH`: a fixed path (its directory made), the mode and
/// group asked for, a stale socket replaced, a served one refused, removed at the stop.
#[test]
fn a_socket_at_a_fixed_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run/memwatch/agent.sock");
    // What an agent killed with -9 leaves: a socket file nobody listens on.
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(UnixStream::connect(&path).is_err());
    let cap = dir.path().join("cap.mwcap");
    let sink = Arc::new(CaptureFileSink::create(&cap).unwrap());
    let gid = std::fs::metadata(dir.path()).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.gid()
    });
    let access = SocketAccess {
        mode: 0o660,
        group: gid.ok(),
    };
    let rx = Receiver::start_at(&path, access, sink.clone()).unwrap();
    assert_eq!(rx.socket_path(), path);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o660);
    // A second receiver on the same path is refused while the first serves it.
    let other = Arc::new(CaptureFileSink::create(&dir.path().join("other.mwcap")).unwrap());
    let e = Receiver::start_at(&path, SocketAccess::default(), other)
        .err()
        .expect("a served socket is not taken over")
        .to_string();
    assert!(e.contains("already listens"), "{e}");
    let mut bytes = encode_preamble().to_vec();
    let records = process_records(4711, 5, 40);
    bytes.extend(encode(&records));
    send(&path, &bytes);
    assert!(rx.wait_idle(Duration::from_secs(120)));
    rx.shutdown();
    sink.finish().unwrap();
    assert!(!path.exists(), "the socket is removed at the stop");
    assert_eq!(read_capture(&cap), records);
    // Not a socket: left alone, with an error naming it.
    std::fs::write(&path, b"data").unwrap();
    let sink = Arc::new(CaptureFileSink::create(&cap).unwrap());
    let e = Receiver::start_at(&path, SocketAccess::default(), sink)
        .err()
        .expect("a regular file is not replaced")
        .to_string();
    assert!(
        e.contains("not a socket") && e.contains("agent.sock"),
        "{e}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"data");
}

#[test]
fn open_connection_is_cut_at_shutdown_keeping_its_frames() {
    let dir = tempfile::tempdir().unwrap();
    let (cap, sink, rx) = setup(dir.path());
    let mut s = UnixStream::connect(rx.socket_path()).unwrap();
    let mut bytes = encode_preamble().to_vec();
    bytes.extend(encode(&process_records(7, 2, 4)[..3]));
    s.write_all(&bytes).unwrap();
    // Half a frame more: must not reach the capture.
    let more = encode(&process_records(7, 1, 4)[1..2]);
    s.write_all(&more[..10]).unwrap();
    assert!(!rx.wait_idle(Duration::from_millis(200)));
    assert_eq!(rx.open_connections(), 1);
    let stats = rx.shutdown();
    sink.finish().unwrap();
    assert_eq!(stats.connections[0].reason, Some(CloseReason::Shutdown));
    assert_eq!(stats.connections[0].frames, 3);
    assert_eq!(read_capture(&cap), process_records(7, 2, 4)[..3].to_vec());
}

/// A sink that refuses the fourth frame of every connection.
struct Picky {
    seen: std::sync::Mutex<std::collections::HashMap<ConnId, u32>>,
    closed: AtomicU64,
}

impl FrameSink for Picky {
    fn frame(&self, conn: ConnId, _r: &Record, _b: &[u8]) -> Result<(), SinkError> {
        let mut seen = self.seen.lock().unwrap();
        let n = seen.entry(conn).or_default();
        *n += 1;
        if *n == 4 {
            return Err(SinkError("disk full".into()));
        }
        Ok(())
    }
    fn closed(&self, _conn: ConnId, _reason: &CloseReason) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn sink_refusal_closes_only_that_connection() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(Picky {
        seen: Default::default(),
        closed: AtomicU64::new(0),
    });
    let rx = Receiver::start(Some(dir.path()), sink.clone()).unwrap();
    let mut short = encode_preamble().to_vec();
    short.extend(encode(&process_records(1, 0, 0)));
    send(rx.socket_path(), &short);
    let mut long = encode_preamble().to_vec();
    long.extend(encode(&process_records(2, 5, 2)));
    send(rx.socket_path(), &long);
    assert!(rx.wait_idle(Duration::from_secs(120)));
    let stats = rx.shutdown();
    assert_eq!(sink.closed.load(Ordering::SeqCst), 2);
    let reasons: Vec<_> = stats.connections.iter().map(|c| c.reason.clone()).collect();
    assert_eq!(reasons[0], Some(CloseReason::Eof));
    assert_eq!(reasons[1], Some(CloseReason::Sink("disk full".into())));
}

#[test]
fn capture_file_in_missing_directory_is_a_clear_error() {
    let err = CaptureFileSink::create(Path::new("/nonexistent-dir/x.mwcap"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("/nonexistent-dir/x.mwcap"), "{err}");
}

#[test]
fn processes_that_exit_before_being_accepted_are_still_read() {
    // Clients connect, send everything and close as fast as possible; wait_idle right
    // after must not return before every queued connection was accepted and read.
    let dir = tempfile::tempdir().unwrap();
    let (cap, sink, rx) = setup(dir.path());
    for pid in 1..=40u32 {
        let mut bytes = encode_preamble().to_vec();
        bytes.extend(encode(&process_records(pid, 1, 3)));
        let mut s = UnixStream::connect(rx.socket_path()).unwrap();
        s.write_all(&bytes).unwrap();
    }
    assert!(rx.wait_idle(Duration::from_secs(120)));
    let stats = rx.shutdown();
    sink.finish().unwrap();
    assert_eq!(stats.connections.len(), 40);
    assert!(stats.failed().next().is_none(), "{stats:#?}");
    assert_eq!(read_capture(&cap).len(), 40 * 4);
}
