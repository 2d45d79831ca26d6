//! The daemon as a child process, for tests that kill it (SIGKILL) or measure its memory:
//! the test binary runs itself again with `MEMWATCH_FAULT_DAEMON` set, and its test
//! `child_daemon` (each such test file has one, calling [`serve_if_child`]) serves until
//! killed. With `MEMWATCH_SERVE_BIN` set to a `memwatch` binary (a release build, say),
//! the child is that binary's `memwatch serve` instead, so the same loads measure the
//! daemon users run (`bench/daemon-memory.sh`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memwatch_daemon::ServeConfig;

/// In the child (`MEMWATCH_FAULT_DAEMON` = database path): serves it, ingest on
/// `MEMWATCH_FAULT_PORT` (else any port), until killed. Otherwise returns at once.
pub fn serve_if_child() {
    let Ok(db) = std::env::var("MEMWATCH_FAULT_DAEMON") else {
        return;
    };
    let port: u16 = std::env::var("MEMWATCH_FAULT_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // As `memwatch serve` does, before the runtime's threads allocate.
    memwatch_daemon::tune_allocator();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut cfg = ServeConfig::new(db);
        cfg.listen = "127.0.0.1:0".parse().unwrap();
        cfg.ingest = format!("127.0.0.1:{port}").parse().unwrap();
        let mut running = memwatch_daemon::start(cfg).await.unwrap();
        println!(
            "MEMWATCH_FAULT_READY {} {}",
            running.api_addr, running.ingest_addr
        );
        let _ = running.wait().await;
    });
}

/// A daemon child process.
pub struct ChildDaemon {
    pub child: Child,
    pub api: SocketAddr,
    pub ingest: SocketAddr,
}

impl ChildDaemon {
    /// Starts one on database `db`, its ingest on `port` (0: any), and waits until it
    /// listens.
    pub fn spawn(db: &Path, port: u16) -> Self {
        match std::env::var_os("MEMWATCH_SERVE_BIN") {
            Some(bin) => {
                let bin = Path::new(&bin);
                assert!(
                    bin.is_file(),
                    "MEMWATCH_SERVE_BIN={}: no such file (build it: cargo build -p memwatch)",
                    bin.display()
                );
                Self::spawn_serve(bin, db, port)
            }
            None => Self::spawn_test_binary(db, port),
        }
    }

    /// The test binary itself as the daemon (its `child_daemon` test).
    fn spawn_test_binary(db: &Path, port: u16) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_daemon", "--nocapture", "--test-threads=1"])
            // One malloc arena from the start, as in `memwatch serve`, which sets it
            // before any thread allocates (`tune_allocator`); here the test harness's
            // thread has taken an arena of its own before `serve_if_child` runs.
            .env("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
            .env("MEMWATCH_FAULT_DAEMON", db)
            .env("MEMWATCH_FAULT_PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (api, ingest) = wait_listening(out, "MEMWATCH_FAULT_READY ", " ");
        Self { child, api, ingest }
    }

    /// `BIN serve` on `db`, as a user runs it; its start line is on stderr.
    fn spawn_serve(bin: &Path, db: &Path, port: u16) -> Self {
        let mut child = Command::new(bin)
            .arg("serve")
            .arg("--db")
            .arg(db)
            .args(["--listen", "127.0.0.1:0", "--ingest"])
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} serve: {e}", bin.display()));
        let err = child.stderr.take().unwrap();
        let (api, ingest) = wait_listening(err, "API http://", "  ingest tcp://");
        Self { child, api, ingest }
    }

    /// SIGKILL, and waits for it.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Its peak resident memory so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmHWM in /proc/PID/status")
            * 1024
    }
}

/// A test that fails before its `kill` does not leave its daemon serving for ever.
impl Drop for ChildDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads `out` until the line that names both addresses: `api` follows `start` and ends
/// at `middle`; `ingest` is the word after `middle`. Keeps reading the rest in a thread so
/// that the child never blocks on a full pipe.
fn wait_listening(
    out: impl std::io::Read + Send + 'static,
    start: &str,
    middle: &str,
) -> (SocketAddr, SocketAddr) {
    let mut lines = BufReader::new(out).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        let line = lines
            .next()
            .expect("the child daemon ended before it listened")
            .unwrap();
        if let Some(rest) = line.split(start).nth(1) {
            let (api, rest) = rest.split_once(middle).expect("both addresses on the line");
            let ingest = rest.split_whitespace().next().unwrap_or(rest);
            break (api.trim().parse().unwrap(), ingest.parse().unwrap());
        }
        assert!(Instant::now() < deadline, "the child daemon did not start");
    };
    std::thread::spawn(move || for _ in lines {});
    found
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
