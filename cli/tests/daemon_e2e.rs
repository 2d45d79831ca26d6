//! End to end on loopback: `memwatch serve` (a child process) + the agent's receiver and
//! forwarder + a synthetic shim writing frames over the agent's Unix socket. The daemon
//! is killed with SIGKILL mid-stream and restarted; afterwards the stored events equal
//! the sent ones, event for event, with nothing duplicated.

mod common;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memwatch_agent::forwarder::{Forwarder, ForwarderConfig};
use memwatch_agent::{FrameSink, Receiver};
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::{
    encode_record, Api, Event, EventKind, MemKind, ProcessEnd, ProcessStart, Record,
};

use common::free_port;

/// A `memwatch serve` child that is killed when dropped, so a failing assertion does not
/// leave it running (holding the test's output pipe open).
struct Daemon(Child);

impl std::ops::Deref for Daemon {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(db: &std::path::Path, api: u16, ingest: u16) -> Daemon {
    Daemon(
        Command::new(env!("CARGO_BIN_EXE_memwatch"))
            .args(["serve", "--db"])
            .arg(db)
            .args(["--listen", &format!("127.0.0.1:{api}")])
            .args(["--ingest", &format!("127.0.0.1:{ingest}")])
            .env("MEMWATCH_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn get(api: u16, path: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match ureq::get(&format!("http://127.0.0.1:{api}{path}")).call() {
            Ok(r) => return serde_json::from_str(&r.into_string().unwrap()).unwrap(),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("GET {path}: {e}"),
        }
    }
}

fn events(n: usize) -> Vec<Event> {
    let mut live = Vec::new();
    (0..n)
        .map(|i| {
            let ts = 1_000_000 + i as u64 * 1000;
            let device = (i % 2) as i32;
            if i % 3 == 2 {
                // A free names the device its allocation was made on.
                let (ptr, device) = live.remove(0);
                Event {
                    ts_ns: ts,
                    ptr,
                    pid: 4242,
                    tid: 1,
                    device,
                    ..Event::new(EventKind::Free, MemKind::Device, Api::HipFree)
                }
            } else {
                let ptr = 0x10_0000 + i as u64 * 0x1000;
                live.push((ptr, device));
                Event {
                    ts_ns: ts,
                    ptr,
                    size: 4096 + i as u64,
                    pid: 4242,
                    tid: 1,
                    device,
                    ..Event::new(EventKind::Alloc, MemKind::Device, Api::HipMalloc)
                }
            }
        })
        .collect()
}

#[test]
fn agent_to_daemon_survives_kill_9_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mw.db");
    let (api, ingest) = (free_port(), free_port());
    let mut daemon = serve(&db, api, ingest);
    get(api, "/api/runs");

    let mut cfg = ForwarderConfig::new(
        format!("127.0.0.1:{ingest}"),
        "e2e-node",
        dir.path().join("spool"),
    );
    cfg.batch_bytes = 64 << 10;
    cfg.flush_interval = Duration::from_millis(20);
    let fwd = Arc::new(Forwarder::start(cfg).unwrap());
    let receiver = Receiver::start(Some(dir.path()), fwd.clone() as Arc<dyn FrameSink>).unwrap();

    // The synthetic shim: one process, 60k events in frames of 500.
    let all = events(60_000);
    let mut shim = UnixStream::connect(receiver.socket_path()).unwrap();
    let mut buf = encode_preamble().to_vec();
    encode_record(
        &Record::ProcessStart(ProcessStart {
            pid: 4242,
            ppid: 1,
            mono_anchor_ns: 1_000_000,
            wall_anchor_unix_ns: 1_795_000_000_000_000_000,
            shim_version: "e2e".into(),
            hostname: "e2e-node".into(),
            argv: vec!["synthetic".into()],
            pid_ns: None,
        }),
        &mut buf,
    )
    .unwrap();
    shim.write_all(&buf).unwrap();
    for (i, chunk) in all.chunks(500).enumerate() {
        buf.clear();
        encode_record(&Record::Events(chunk.to_vec()), &mut buf).unwrap();
        shim.write_all(&buf).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        if i == 40 {
            daemon.kill().unwrap(); // SIGKILL mid-stream
            daemon.wait().unwrap();
        }
        if i == 80 {
            daemon = serve(&db, api, ingest);
        }
    }
    buf.clear();
    encode_record(
        &Record::ProcessEnd(ProcessEnd {
            pid: 4242,
            ts_ns: 99_000_000_000,
            exit_code: 0,
        }),
        &mut buf,
    )
    .unwrap();
    shim.write_all(&buf).unwrap();
    drop(shim);
    assert!(receiver.wait_idle(Duration::from_secs(120)));
    let stats = receiver.shutdown();
    assert!(stats.failed().next().is_none(), "{stats:?}");
    let fwd = Arc::try_unwrap(fwd).ok().unwrap();
    assert!(
        fwd.shutdown(Duration::from_secs(60)),
        "everything acknowledged"
    );

    let runs = get(api, "/api/runs");
    let run = &runs["runs"][0];
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1);
    assert_eq!(
        run["event_count"], 60_000,
        "nothing lost, nothing duplicated"
    );
    let id = run["id"].as_i64().unwrap();
    for device in 0..2 {
        let page = get(
            api,
            &format!("/api/runs/{id}/events?device={device}&limit=100000"),
        );
        let got: Vec<(u64, u64, u64, u8)> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["ts_ns"].as_u64().unwrap(),
                    e["ptr"].as_u64().unwrap(),
                    e["size"].as_u64().unwrap(),
                    (e["kind"] == "alloc") as u8,
                )
            })
            .collect();
        let want: Vec<(u64, u64, u64, u8)> = all
            .iter()
            .filter(|e| e.device == device)
            .map(|e| (e.ts_ns, e.ptr, e.size, u8::from(e.is(EventKind::Alloc))))
            .collect();
        assert_eq!(got.len(), want.len(), "device {device}");
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "device {device}: event {i} differs: stored {:?}, sent {:?}",
                got[i], want[i]
            );
        }
    }
    let detail = get(api, &format!("/api/runs/{id}"));
    assert_eq!(detail["processes"][0]["exit_code"], 0);
    daemon.kill().unwrap();
    daemon.wait().unwrap();
}

fn preload(dir: &std::path::Path) -> std::path::PathBuf {
    let shim = std::path::PathBuf::from(env!("CARGO_BIN_EXE_memwatch"))
        .with_file_name("libmemwatch_preload.so");
    if shim.is_file() {
        return shim;
    }
    let src = dir.join("empty.c");
    std::fs::write(&src, "int memwatch_test_placeholder;\n").unwrap();
    let lib = dir.join("libempty.so");
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("cc (build-essential) is needed");
    assert!(st.success());
    lib
}

#[test]
fn run_db_import_idempotent_and_bad_capture() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("local.db");
    let mw = || Command::new(env!("CARGO_BIN_EXE_memwatch"));
    // `memwatch run --db`: the capture (here: its tag markers) lands in the store.
    let out = mw()
        .current_dir(dir.path())
        .env("MEMWATCH_PRELOAD", preload(dir.path()))
        .args(["run", "--quiet", "--out", "c.mwcap", "--db"])
        .arg(&db)
        .args(["--tag", "run=nightly-1", "--", "true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("(key nightly-1)"));
    // Importing the same capture into the same run again stores nothing twice: every
    // record is found stored already.
    for _ in 0..2 {
        let o = mw()
            .args(["import", "--json", "--run", "nightly-1", "--db"])
            .arg(&db)
            .arg(dir.path().join("c.mwcap"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["records_already_stored"], v["records"], "{v}");
        assert_eq!(
            (v["events"].clone(), v["batches"].clone()),
            (0.into(), 0.into()),
            "{v}"
        );
        assert_eq!(v["run_key"], "nightly-1");
        assert!(v["run_id"].as_i64().is_some(), "{v}");
    }
    // A file that is not a capture: exit 2, one line naming the file.
    let bad = dir.path().join("notes.txt");
    std::fs::write(&bad, "hello, not a capture at all").unwrap();
    let o = mw()
        .args(["import", "--db"])
        .arg(&db)
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("notes.txt") && err.contains("wrong magic"),
        "{err}"
    );
    // Serve the database: the run is there.
    let (api, ingest) = (free_port(), free_port());
    let mut daemon = serve(&db, api, ingest);
    let runs = get(api, "/api/runs");
    assert_eq!(runs["runs"][0]["run_key"], "nightly-1");
    // The run starts when `memwatch run` wrote its tags (a monotonic time), not at 0:
    // with 0 every time of the run counted from the machine's boot.
    assert!(
        runs["runs"][0]["t0_mono_ns"].as_u64().unwrap() > 0,
        "{runs}"
    );
    daemon.kill().unwrap();
    daemon.wait().unwrap();
}

/// `serve --db postgres://…` at a closed port fails at the first refused connection (not
/// at sqlx's 30 s pool timeout, whose error names no cause) with exit 2 and one line naming
/// the URL, without its password, and the cause: "refused".
#[test]
fn serve_postgres_closed_port_fails_fast_naming_the_url() {
    let closed = free_port();
    let url = format!("postgres://mw:hunter2@127.0.0.1:{closed}/memwatch");
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .args(["serve", "--db", &url])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--ingest", &format!("127.0.0.1:{}", free_port())])
        .env("MEMWATCH_LOG", "warn")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    let shown = format!("postgres://mw:***@127.0.0.1:{closed}/memwatch");
    assert!(err.contains("cannot connect to database"), "{err}");
    assert!(err.contains(&shown), "{err}");
    assert!(err.contains("refused"), "{err}");
    assert!(!err.contains("hunter2"), "password leaked: {err}");
}
