//! Nothing in `memwatch run` or `memwatch agent` waits without a deadline (issue 33, 4):
//! a daemon that stopped answering (here: a listener that accepts the connection in the
//! kernel and never reads, as a SIGSTOPped daemon does), output files that are FIFOs with
//! no reader or a reader that never reads. The watched program starts and ends as it
//! would without memwatch, and SIGTERM ends memwatch with what it saved.
//!
//! Each check is a hang check, not a latency bound: a process still running
//! [`HANG_LIMIT`] after it should have ended fails the test as hung.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use memwatch_agent::forwarder::{Forwarder, ForwarderConfig};
use memwatch_wire::{encode_record, Api, Event, EventKind, MemKind, Record};

/// How long a process may take to end before the test calls it hung.
const HANG_LIMIT: Duration = Duration::from_secs(30);

fn memwatch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memwatch"));
    c.env("MEMWATCH_PRELOAD", common::shim());
    c
}

fn kill(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Waits for `child` to end within [`HANG_LIMIT`]; kills it and fails naming `what`
/// otherwise. Returns its status and stderr (written to `err_path`).
fn ended(mut child: Child, what: &str, err_path: &Path) -> (ExitStatus, String) {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            // A figure for the notes (`--nocapture`), not checked: the bound is HANG_LIMIT.
            println!(
                "no_hang: {what}: ended {:.2} s later ({st})",
                t.elapsed().as_secs_f64()
            );
            return (st, std::fs::read_to_string(err_path).unwrap_or_default());
        }
        if t.elapsed() > HANG_LIMIT {
            kill(&child, libc::SIGKILL);
            let _ = child.wait();
            panic!(
                "{what}: still running {HANG_LIMIT:?} later (hung); stderr:\n{}",
                std::fs::read_to_string(err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `path` exists, at most [`HANG_LIMIT`]; kills `child` and fails otherwise.
fn appears(path: &Path, what: &str, child: &Child) {
    let t = Instant::now();
    while !path.exists() {
        if t.elapsed() > HANG_LIMIT {
            kill(child, libc::SIGKILL);
            panic!("{what}: never happened (hung)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Opens the read end of `fifo` without blocking and never reads it.
fn reader_that_never_reads(fifo: &Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo)
        .expect("open the FIFO's read end")
}

/// `memwatch run --daemon URL` where the daemon accepts connections and never answers:
/// the command runs and ends, the capture is complete, and SIGTERM ends memwatch's wait
/// on the daemon (before: 925 s and SIGTERM ignored).
#[test]
fn run_daemon_hand_off_ends_on_sigterm_when_the_daemon_never_answers() {
    let stopped = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", stopped.local_addr().expect("addr"));
    let dir = tempfile::tempdir().expect("temp dir");
    let err = dir.path().join("err");
    let child = memwatch()
        .current_dir(dir.path())
        .args([
            "run", "--out", "c.mwcap", "--daemon", &url, "--", "sh", "-c",
        ])
        .arg("touch ended")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("spawn memwatch");
    appears(&dir.path().join("ended"), "the command's end", &child);
    // memwatch is now storing: give it time to connect and wait on the answer.
    std::thread::sleep(Duration::from_secs(2));
    kill(&child, libc::SIGTERM);
    let (st, stderr) = ended(child, "memwatch run --daemon after SIGTERM", &err);
    assert_eq!(st.code(), Some(0), "{stderr}");
    assert!(stderr.contains("interrupted while storing"), "{stderr}");
    // What it saved is whole.
    common::report_json(&dir.path().join("c.mwcap"));
    drop(stopped);
}

/// `--out`, `--stderr-log` and `--json-out` naming FIFOs nobody reads: the command
/// starts at once (before: memwatch blocked opening them and never started it) and
/// memwatch ends with its status.
#[test]
fn fifo_outputs_without_a_reader_do_not_stop_the_command_from_starting() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (flag, name) in [
        ("--out", "cap.fifo"),
        ("--stderr-log", "err.fifo"),
        ("--json-out", "json.fifo"),
    ] {
        let fifo = dir.path().join(name);
        mkfifo(&fifo);
        let started = dir.path().join(format!("started-{name}"));
        let err = dir.path().join(format!("stderr-{name}"));
        let mut args: Vec<String> = vec!["run".into(), flag.into(), fifo.display().to_string()];
        if flag != "--out" {
            args.extend([
                "--out".into(),
                dir.path().join("c.mwcap").display().to_string(),
            ]);
        }
        args.extend([
            "--".into(),
            "sh".into(),
            "-c".into(),
            format!("touch {}; echo to-stderr >&2; exit 5", started.display()),
        ]);
        let child = memwatch()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("spawn memwatch");
        appears(
            &started,
            &format!("{flag} FIFO without a reader: the command's start"),
            &child,
        );
        let (st, stderr) = ended(child, &format!("{flag} FIFO without a reader"), &err);
        assert_eq!(st.code(), Some(5), "{flag}: {stderr}");
    }
}

/// `--out` and `--stderr-log` naming FIFOs whose reader never reads, with more output
/// than a pipe holds: the command runs to its end (its stderr still passes through), and
/// memwatch ends (before: it blocked in a write after the command ended, and ignored
/// SIGTERM and SIGINT).
#[test]
fn fifo_outputs_whose_reader_never_reads_do_not_hold_the_command_or_memwatch() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (flag, sig) in [("--out", libc::SIGTERM), ("--stderr-log", libc::SIGINT)] {
        let fifo = dir.path().join(format!("{}.fifo", &flag[2..]));
        mkfifo(&fifo);
        let _reader = reader_that_never_reads(&fifo);
        let ended_marker = dir.path().join(format!("ended-{}", &flag[2..]));
        let err = dir.path().join(format!("stderr-{}", &flag[2..]));
        let mut args: Vec<String> = vec!["run".into(), flag.into(), fifo.display().to_string()];
        if flag == "--out" {
            // ~300 KiB of tags: a capture more than a pipe (64 KiB) holds.
            for i in 0..3000 {
                args.extend(["--tag".into(), format!("k{i}={}", "v".repeat(80))]);
            }
        } else {
            args.extend([
                "--out".into(),
                dir.path().join("c.mwcap").display().to_string(),
            ]);
        }
        args.extend([
            "--".into(),
            "sh".into(),
            "-c".into(),
            // 1 MiB on stderr, far more than the FIFO holds.
            format!(
                "head -c 1048576 /dev/zero >&2; touch {}",
                ended_marker.display()
            ),
        ]);
        let child = memwatch()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("spawn memwatch");
        appears(
            &ended_marker,
            &format!("{flag} FIFO never read: the command's end"),
            &child,
        );
        std::thread::sleep(Duration::from_secs(1));
        kill(&child, sig);
        let (st, _) = ended(
            child,
            &format!("{flag} FIFO never read, after signal {sig}"),
            &err,
        );
        // The command's status (0), or 143/130 when the signal reached it before its end.
        assert!(
            matches!(st.code(), Some(0) | Some(130) | Some(143)),
            "{flag}: {st:?}"
        );
        // The command's stderr passed through whole to memwatch's stderr.
        let passed = std::fs::read(&err).expect("stderr");
        let zeros = passed.iter().filter(|&&b| b == 0).count();
        assert_eq!(
            zeros,
            1 << 20,
            "{flag}: the command's stderr did not all pass through"
        );
    }
}

fn events_frames(events: usize) -> Vec<u8> {
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
    let mut buf = Vec::new();
    for chunk in evs.chunks(1000) {
        encode_record(&Record::Events(chunk.to_vec()), &mut buf).expect("encodes");
    }
    buf
}

/// `memwatch agent --drain-secs 1` stopped with SIGTERM while its daemon accepts and
/// never reads, with more spooled than the socket buffers hold: it ends soon after its
/// drain time, keeping the spool (before: 723 s with `--drain-secs 5`).
#[test]
fn agent_drain_ends_when_the_daemon_stops_reading() {
    let dir = tempfile::tempdir().expect("temp dir");
    let spool = dir.path().join("spool");
    // ~72 MB spooled while no daemon is reachable (port 1).
    {
        let fwd = Forwarder::start(ForwarderConfig::new("127.0.0.1:1", "n", spool.clone()))
            .expect("spool");
        let key = fwd.open_stream("run");
        let frames = events_frames(200_000);
        for _ in 0..5 {
            fwd.push(key, &frames).expect("spooled");
        }
        assert!(!fwd.shutdown(Duration::ZERO));
    }
    let stopped = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = stopped.local_addr().expect("addr").to_string();
    let err = dir.path().join("err");
    let child = memwatch()
        .args([
            "agent",
            "--daemon",
            &addr,
            "--sample-ms",
            "0",
            "--drain-secs",
            "1",
        ])
        .arg("--spool")
        .arg(&spool)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("spawn the agent");
    // Sending into socket buffers that fill and are never read.
    std::thread::sleep(Duration::from_secs(3));
    kill(&child, libc::SIGTERM);
    let (st, stderr) = ended(child, "memwatch agent after SIGTERM", &err);
    assert_eq!(st.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stays in"), "{stderr}");
    drop(stopped);
}
