//! The agent says when data is lost and does not hammer a daemon that refuses it.
//! - A spool that cannot be written (here: a file-size limit, EFBIG) loses batches: the
//!   agent must say so and exit 1, not report "everything acknowledged".
//! - A daemon that refuses every session (a wrong token) is retried with a growing pause,
//!   not 20 times a second, and the refusal is printed once.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memwatch_agent::forwarder::{Forwarder, ForwarderConfig};
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::{encode_record, Api, Event, EventKind, MemKind, ProcessStart, Record};

fn frames(events: usize) -> Vec<u8> {
    let mut buf = encode_preamble().to_vec();
    encode_record(
        &Record::ProcessStart(ProcessStart {
            pid: 4242,
            ppid: 1,
            mono_anchor_ns: 1_000,
            wall_anchor_unix_ns: 1_795_000_000_000_000_000,
            shim_version: "test".into(),
            hostname: "n".into(),
            argv: vec!["synthetic".into()],
            pid_ns: None,
        }),
        &mut buf,
    )
    .unwrap();
    let evs: Vec<Event> = (0..events)
        .map(|i| Event {
            ts_ns: 2_000 + i as u64,
            ptr: 0x1000 + i as u64 * 0x1000,
            size: 4096,
            pid: 4242,
            tid: 1,
            ..Event::new(EventKind::Alloc, MemKind::Device, Api::HipMalloc)
        })
        .collect();
    for chunk in evs.chunks(1000) {
        encode_record(&Record::Events(chunk.to_vec()), &mut buf).unwrap();
    }
    buf
}

#[test]
fn a_spool_that_cannot_be_written_is_reported_as_loss() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    // Nothing listens on port 1: everything waits in the spool, which cannot grow past
    // 64 KiB (`ulimit -f` counts 512-byte blocks in sh; SIGXFSZ ignored, so writes fail
    // with EFBIG instead of killing the agent).
    let script = format!(
        "trap '' XFSZ; ulimit -f 128; exec {} agent --daemon 127.0.0.1:1 --spool {} \
         --drain-secs 0.5 --sample-ms 0",
        env!("CARGO_BIN_EXE_memwatch"),
        spool.display()
    );
    let mut agent = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(agent.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let path = line
        .trim()
        .strip_prefix("MEMWATCH_SINK=unix:")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let mut shim = UnixStream::connect(&path).unwrap();
    // ~1.4 MB of events; the agent may close the connection once the spool refuses a
    // batch (the shim then reconnects), so a broken pipe here is expected.
    let _ = shim.write_all(&frames(20_000));
    drop(shim);
    std::thread::sleep(Duration::from_millis(1500));
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let out = agent.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("never reached the spool") && err.contains("write errors"),
        "{err}"
    );
    assert!(!err.contains("everything acknowledged"), "{err}");
}

#[test]
fn a_daemon_that_refuses_every_session_is_not_hammered() {
    // A fake daemon that reads the hello and answers with an error frame, as the real
    // one does for a wrong token; it counts the sessions.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sessions = Arc::new(std::sync::atomic::AtomicU64::new(0));
    {
        let sessions = sessions.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { continue };
                sessions.fetch_add(1, Ordering::Relaxed);
                let msg = b"unauthorized: bad token";
                let mut reply = memwatch_wire::ingest::ERROR_MAGIC.to_vec();
                reply.extend_from_slice(&(msg.len() as u16).to_le_bytes());
                reply.extend_from_slice(msg);
                let _ = c.write_all(&reply);
            }
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ForwarderConfig::new(addr.to_string(), "n", dir.path().join("spool"));
    cfg.token = "wrong".into();
    cfg.flush_interval = Duration::from_millis(10);
    let fwd = Forwarder::start(cfg).unwrap();
    let key = fwd.open_stream("run");
    fwd.push(key, &frames(10)[16..]).unwrap();
    // It tries again after a refusal (a generous deadline only catches a hang)...
    let deadline = Instant::now() + Duration::from_secs(120);
    while sessions.load(Ordering::Relaxed) < 2 {
        assert!(Instant::now() < deadline, "hung: no second session");
        std::thread::sleep(Duration::from_millis(10));
    }
    // ... but backs off: 50 ms doubling to a 2 s cap is about 7 sessions in the next 3 s,
    // fewer on a busy machine, never more; a fixed 50 ms would be 60.
    let before = sessions.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(3));
    let n = sessions.load(Ordering::Relaxed) - before;
    assert!(!fwd.shutdown(Duration::from_millis(10)));
    assert!(n <= 10, "{n} sessions in 3 s after the second");
}

/// Bad arguments stop the agent at once with exit 2 and one line naming them (before: a
/// daemon address that was not HOST:PORT was retried for ever, an empty token file was
/// sent as an empty token).
#[test]
fn a_bad_daemon_address_or_an_empty_token_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("token");
    std::fs::write(&empty, "\n").unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_memwatch"))
            .arg("agent")
            .args(args)
            .arg("--spool")
            .arg(dir.path().join("spool"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["--daemon", "nothostport"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`nothostport` is not HOST:PORT"), "{err}");
    let out = run(&[
        "--daemon",
        "127.0.0.1:1",
        "--token-file",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("token") && err.contains("its first line is empty"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
