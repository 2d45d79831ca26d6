//! Where the frames go: a Unix socket per process, no sink at all, an unreachable
//! socket, a FIFO without a reader (or one that never reads), and a program that closes
//! the shim's descriptor and reuses its number: the program's behaviour never changes.

use crate::common::*;
use memwatch_wire::{EventKind, Record};

/// A program that closes every descriptor it did not open and opens its own file gets the
/// sink's old number: the shim neither writes capture frames into that file nor closes
/// it, reopens its sink and keeps recording the same process (one image, every call). Its
/// flusher thread takes no signal the program blocks and waits for with sigwait.
#[test]
fn closing_our_descriptor_and_sigwait_do_not_disturb_the_program() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("closefds.mwcap");
    let data = tmp.path().join("data.txt");
    let data_s = data.to_str().unwrap();
    let plain = b.run("direct", &["closefds", data_s], None, &[]);
    let out = b.run("direct", &["closefds", data_s], Some(&cap), &[]);
    assert_eq!(out.stdout, plain.stdout, "same output as without the shim");
    assert!(String::from_utf8_lossy(&out.stdout).contains("S sigwait=10"));
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "program data\n");
    let recs = read_capture(&cap);
    let evs = events(&recs);
    assert_eq!(count_api(&evs, "hipMalloc"), 21, "every call recorded");
    let anchors: std::collections::HashSet<u64> = recs
        .iter()
        .filter_map(|r| match r {
            Record::ProcessStart(s) => Some(s.mono_anchor_ns),
            _ => None,
        })
        .collect();
    assert_eq!(
        anchors.len(),
        1,
        "a reconnect repeats the image's process_start"
    );
}

/// Runs `mwtest direct ARGS` under the shim with `MEMWATCH_SINK=file:SINK`, bounded
/// (10 s: a hang fails the test); returns its output and how long it ran.
fn run_with_sink(
    b: &Built,
    args: &[&str],
    sink: &std::path::Path,
) -> (std::process::Output, std::time::Duration) {
    let t0 = std::time::Instant::now();
    let mut child = std::process::Command::new(&b.direct)
        .arg("direct")
        .args(args)
        .env("MWTEST_LIBDIR", &b.dir)
        .env("LD_PRELOAD", &b.shim)
        .env("MEMWATCH_SINK", format!("file:{}", sink.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read the pipes while waiting, so a chatty program cannot block on them.
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut v).map(|_| v)
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut v).map(|_| v)
    });
    let status = wait_bounded(&mut child, &format!("mwtest {args:?} with a FIFO sink"));
    let took = t0.elapsed();
    let out = std::process::Output {
        status,
        stdout: out_t.join().unwrap().unwrap(),
        stderr: err_t.join().unwrap().unwrap(),
    };
    (out, took)
}

fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// `MEMWATCH_SINK=file:FIFO` never holds the program: with no reader the open fails
/// instead of waiting for one (the program used to hang in `open` at exit), and with a
/// reader that never reads, the last pass gives up at its deadline (2 s) instead of
/// waiting in `write` for room: the program ends (a hang fails the test, past a generous
/// deadline). Output and exit status are the program's own.
#[test]
fn a_fifo_sink_never_holds_the_program() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let plain = b.run("direct", &["basic"], None, &[]);
    let fifo = tmp.path().join("no-reader.fifo");
    mkfifo(&fifo);
    let (out, took) = run_with_sink(b, &["basic"], &fifo);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
    // (It ended: run_with_sink fails the test as hung otherwise; how long it took is a
    // figure, not a check, on a shared machine.)
    println!("FIFO without a reader: the program ended after {took:?}");

    // A reader that opens the FIFO and never reads: 600,000 calls are ~43 MB of frames,
    // far more than a pipe holds.
    let stalled = tmp.path().join("stalled.fifo");
    mkfifo(&stalled);
    let c = std::ffi::CString::new(stalled.to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated path; the descriptor is closed below.
    let reader = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK) };
    assert!(reader >= 0, "open the FIFO for reading");
    let args = ["bench", "1", "300", "1000"];
    let t0 = std::time::Instant::now();
    let plain = b.run("direct", &args, None, &[]);
    let plain_took = t0.elapsed();
    let (out, took) = run_with_sink(b, &args, &stalled);
    // SAFETY: our descriptor.
    unsafe { libc::close(reader) };
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout).lines().count(),
        String::from_utf8_lossy(&out.stdout).lines().count()
    );
    println!("FIFO with a stalled reader: {took:?} against {plain_took:?} without the shim");
}

#[test]
fn without_sink_nothing_is_written_and_behaviour_is_unchanged() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let plain = b.run("proc", &["basic"], None, &[]);
    let mut c = std::process::Command::new(&b.dl);
    c.args(["proc", "basic"])
        .env("MWTEST_LIBDIR", &b.dir)
        .env("LD_PRELOAD", &b.shim)
        .env_remove("MEMWATCH_SINK")
        .current_dir(tmp.path());
    let out = c.output().unwrap();
    assert!(out.status.success());
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn unreachable_socket_sink_changes_nothing() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let plain = b.run("dlsym", &["basic"], None, &[]);
    let sock = tmp.path().join("nobody-listens.sock");
    let mut c = std::process::Command::new(&b.dl);
    c.args(["dlsym", "basic"])
        .env("MWTEST_LIBDIR", &b.dir)
        .env("LD_PRELOAD", &b.shim)
        .env("MEMWATCH_SINK", format!("unix:{}", sock.display()));
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    // It ends (not waiting for a listener: failed as hung otherwise), as it does without
    // the shim.
    wait_bounded(&mut child, "a program with an unreachable socket sink");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
}

#[test]
fn unix_socket_sink_streams_each_process() {
    use std::io::Read;
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("recv.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let server = std::thread::spawn(move || {
        // fork scenario: the parent and the child each connect once.
        let mut streams = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = Vec::new();
            streams.push(std::thread::spawn(move || {
                s.read_to_end(&mut buf).unwrap();
                buf
            }));
        }
        streams
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let mut c = std::process::Command::new(&b.direct);
    c.args(["direct", "fork"])
        .env("LD_PRELOAD", &b.shim)
        .env("MEMWATCH_SINK", format!("unix:{}", sock.display()));
    let out = c.output().unwrap();
    assert!(out.status.success());
    let bufs = server.join().unwrap();
    let mut sizes = Vec::new();
    for buf in bufs {
        let mut r =
            memwatch_wire::FrameReader::new(&buf[..], memwatch_wire::ReadMode::Strict).unwrap();
        let mut recs = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            recs.push(rec);
        }
        assert!(
            matches!(recs.first(), Some(Record::ProcessStart(_))),
            "{recs:?}"
        );
        assert!(
            matches!(recs.last(), Some(Record::ProcessEnd(_))),
            "{recs:?}"
        );
        sizes.extend(
            events(&recs)
                .iter()
                .filter(|e| e.is(EventKind::Alloc))
                .map(|e| e.size),
        );
    }
    sizes.sort();
    assert_eq!(sizes, vec![1000, 2000, 3000]);
}
