//! Forwarding to `memwatch serve`: a [`FrameSink`] that groups each shim connection's
//! frames into numbered batches, appends them to the on-disk [`Spool`], and a sender
//! thread that replays the spool to the daemon in order over TCP
//! (`memwatch_wire::ingest`), deleting spooled data only once the daemon acknowledged
//! its commit.
//!
//! Guarantees: frames reach the daemon in the order received, each batch at least once;
//! the daemon drops resends by (node, stream, seq), so each is stored exactly once. The
//! batches of a stream are numbered 1, 2, 3… without gaps and spooled in that order (a
//! batch is sealed and appended under one lock; one the spool refuses does not use up
//! its number), because the daemon refuses a batch that does not follow the last one it
//! stored. When it asks for a batch the spool no longer has (a damaged spool segment, a
//! daemon database restored from an older copy), that number is sent as an empty batch.
//! While the daemon is unreachable everything waits on disk (bounded by the spool size;
//! beyond it whole batches are refused and counted). Memory stays small: at most one open
//! batch per connection plus a window of in-flight batch headers.
//!
//! Run keys: a process whose parent is captured and running joins its parent's run; any
//! other process starts a run named `HOST:PID:WALLNS` (`process_runs`: processes are
//! known by pid namespace + pid, and leave the table when their connection ends).

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memwatch_wire::frame::encode_preamble;
use memwatch_wire::ingest::{
    decode_ack, encode_batch_header, encode_hello, parse_resend_request, ACK_LEN, ACK_MAGIC,
    ERROR_MAGIC,
};
use memwatch_wire::Record;

use crate::process_runs::ProcessRuns;
use crate::sink::{CloseReason, ConnId, FrameSink, SinkError};
use crate::spool::{Pos, Spool, SpoolError, SpoolRecord};

/// Settings of a forwarder.
#[derive(Debug, Clone)]
pub struct ForwarderConfig {
    /// `HOST:PORT` of the daemon's ingest listener.
    pub daemon: String,
    pub token: String,
    pub node: String,
    pub spool_dir: PathBuf,
    pub spool_max_bytes: u64,
    /// A connection's batch is sealed at this size…
    pub batch_bytes: usize,
    /// …or when it is this old.
    pub flush_interval: Duration,
    /// Batches sent but not yet acknowledged.
    pub window: usize,
    /// Fixed run key for every connection (`memwatch run --daemon`); `None`: per process
    /// tree (see the module docs).
    pub run_key: Option<String>,
}

impl ForwarderConfig {
    pub fn new(daemon: impl Into<String>, node: impl Into<String>, spool_dir: PathBuf) -> Self {
        Self {
            daemon: daemon.into(),
            token: String::new(),
            node: node.into(),
            spool_dir,
            spool_max_bytes: 1 << 30,
            batch_bytes: 1 << 20,
            flush_interval: Duration::from_millis(100),
            window: 32,
            run_key: None,
        }
    }
}

/// Counters of a forwarder.
#[derive(Debug, Default)]
pub struct ForwarderStats {
    pub batches_spooled: AtomicU64,
    pub batches_acked: AtomicU64,
    /// Batches the spool refused because it was full (lost).
    pub batches_refused: AtomicU64,
    /// Batches that could not be written to the spool (an I/O error; lost).
    pub batches_lost: AtomicU64,
    pub bytes_spooled: AtomicU64,
    pub connects: AtomicU64,
}

struct StreamBuf {
    stream: u64,
    seq: u64,
    run: String,
    buf: Vec<u8>,
    since: Instant,
}

struct Inner {
    cfg: ForwarderConfig,
    spool: Mutex<Spool>,
    data: Condvar,
    streams: Mutex<HashMap<u64, StreamBuf>>,
    pid_runs: Mutex<ProcessRuns>,
    stream_base: u64,
    next_stream: AtomicU64,
    stop: AtomicBool,
    stats: ForwarderStats,
    /// The sender's connection while it has one: [`Forwarder::shutdown`] cuts it, so a
    /// send blocked on a daemon that stopped reading (SIGSTOP, a full socket buffer)
    /// ends when the drain does.
    current: Mutex<Option<TcpStream>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running forwarder. [`Forwarder::shutdown`] drains what it can.
pub struct Forwarder {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

/// The key a caller uses for its own (non-shim) stream, e.g. the device sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamKey(pub u64);

impl Forwarder {
    /// Opens the spool (replaying whatever a previous agent left) and starts the sender.
    pub fn start(cfg: ForwarderConfig) -> Result<Self, SpoolError> {
        let spool = Spool::open(&cfg.spool_dir, cfg.spool_max_bytes)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let inner = Arc::new(Inner {
            cfg,
            spool: Mutex::new(spool),
            data: Condvar::new(),
            streams: Mutex::new(HashMap::new()),
            pid_runs: Mutex::new(ProcessRuns::default()),
            // Unique per agent start: time in the high bits, a counter in the low ones.
            stream_base: (now << 16) ^ ((std::process::id() as u64) << 40),
            next_stream: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            stats: ForwarderStats::default(),
            current: Mutex::new(None),
        });
        let mut threads = Vec::new();
        let i = inner.clone();
        threads.push(std::thread::spawn(move || sender(&i)));
        let i = inner.clone();
        threads.push(std::thread::spawn(move || {
            while !i.stop.load(Ordering::Relaxed) {
                std::thread::sleep(i.cfg.flush_interval / 2);
                i.seal_old();
            }
        }));
        Ok(Self { inner, threads })
    }

    pub fn stats(&self) -> &ForwarderStats {
        &self.inner.stats
    }

    /// Bytes currently spooled (sent but not acknowledged, or not yet sent).
    pub fn spooled_bytes(&self) -> u64 {
        lock(&self.inner.spool).bytes()
    }

    /// A new stream for a caller's own frames (run key `run`, "" for node-level data).
    pub fn open_stream(&self, run: &str) -> StreamKey {
        let id = self.inner.new_stream();
        lock(&self.inner.streams).insert(
            id,
            StreamBuf {
                stream: id,
                seq: 0,
                run: run.to_string(),
                buf: Vec::new(),
                since: Instant::now(),
            },
        );
        StreamKey(id)
    }

    /// Adds whole frames to a caller's stream.
    pub fn push(&self, key: StreamKey, frames: &[u8]) -> Result<(), SpoolError> {
        self.inner.push(key.0, frames)
    }

    /// Seals all open batches and waits up to `timeout` for the daemon to acknowledge
    /// everything spooled. Returns whether everything was acknowledged (if not, it stays
    /// in the spool for the next start). Returns soon after `timeout` whatever the daemon
    /// does: the connection is cut then.
    pub fn shutdown(mut self, timeout: Duration) -> bool {
        self.inner.seal_all();
        let deadline = Instant::now() + timeout;
        let mut done = false;
        while Instant::now() < deadline {
            if lock(&self.inner.spool).bytes() == 0 {
                done = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.inner.stop.store(true, Ordering::Relaxed);
        self.inner.data.notify_all();
        if let Some(s) = lock(&self.inner.current).as_ref() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        done
    }
}

impl Inner {
    fn new_stream(&self) -> u64 {
        self.stream_base
            .wrapping_add(self.next_stream.fetch_add(1, Ordering::Relaxed))
    }

    fn push(&self, stream: u64, frames: &[u8]) -> Result<(), SpoolError> {
        let mut streams = lock(&self.streams);
        let Some(s) = streams.get_mut(&stream) else {
            return Ok(());
        };
        if s.buf.is_empty() {
            s.since = Instant::now();
        }
        s.buf.extend_from_slice(frames);
        if s.buf.len() >= self.cfg.batch_bytes {
            self.seal(s)
        } else {
            Ok(())
        }
    }

    /// Appends `s`'s open batch to the spool as its next numbered batch. Called with the
    /// stream table locked, so that a stream's batches reach the spool in number order
    /// (the flush thread and the connection's thread both seal). A batch the spool does
    /// not take gives its number back: the next one must follow the last spooled one.
    fn seal(&self, s: &mut StreamBuf) -> Result<(), SpoolError> {
        let rec = take_batch(s);
        let r = self.spool_batch(&rec);
        if !matches!(r, Ok(true)) {
            s.seq -= 1;
        }
        r.map(|_| ())
    }

    fn spool_batch(&self, rec: &SpoolRecord) -> Result<bool, SpoolError> {
        let n = rec.frames.len() as u64;
        let appended = lock(&self.spool).append(rec);
        let ok = match appended {
            Ok(ok) => ok,
            Err(e) => {
                self.stats.batches_lost.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        if ok {
            self.stats.batches_spooled.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes_spooled.fetch_add(n, Ordering::Relaxed);
            self.data.notify_all();
        } else {
            self.stats.batches_refused.fetch_add(1, Ordering::Relaxed);
            if n > self.cfg.spool_max_bytes {
                eprintln!(
                    "memwatch agent: a batch of {n} bytes is larger than the whole spool ({} \
                     bytes; raise --spool-max-mib): refused (stream {} seq {})",
                    self.cfg.spool_max_bytes, rec.stream, rec.seq
                );
            } else {
                eprintln!(
                    "memwatch agent: spool full ({} bytes): refused a batch of {n} bytes (stream {} seq {})",
                    self.cfg.spool_max_bytes, rec.stream, rec.seq
                );
            }
        }
        Ok(ok)
    }

    fn seal_where(&self, pred: impl Fn(&StreamBuf) -> bool) {
        let mut streams = lock(&self.streams);
        for s in streams.values_mut() {
            if !s.buf.is_empty() && pred(s) {
                if let Err(e) = self.seal(s) {
                    eprintln!("memwatch agent: {e}");
                }
            }
        }
    }

    fn seal_old(&self) {
        let max = self.cfg.flush_interval;
        self.seal_where(|s| s.since.elapsed() >= max);
    }

    fn seal_all(&self) {
        self.seal_where(|_| true);
    }
}

fn take_batch(s: &mut StreamBuf) -> SpoolRecord {
    s.seq += 1;
    SpoolRecord {
        stream: s.stream,
        seq: s.seq,
        run: s.run.clone(),
        frames: std::mem::take(&mut s.buf),
    }
}

impl FrameSink for Forwarder {
    fn frame(&self, conn: ConnId, record: &Record, bytes: &[u8]) -> Result<(), SinkError> {
        let inner = &self.inner;
        let key = conn_stream_key(conn);
        if let Record::ProcessStart(p) = record {
            let run = match &inner.cfg.run_key {
                Some(k) => k.clone(),
                None => lock(&inner.pid_runs).start(conn, p, |p| {
                    format!("{}:{}:{}", inner.cfg.node, p.pid, p.wall_anchor_unix_ns)
                }),
            };
            lock(&inner.streams)
                .entry(key)
                .or_insert_with(|| StreamBuf {
                    stream: inner.new_stream(),
                    seq: 0,
                    run,
                    buf: Vec::new(),
                    since: Instant::now(),
                });
        }
        inner.push(key, bytes).map_err(|e| SinkError(e.to_string()))
    }

    fn closed(&self, conn: ConnId, _reason: &CloseReason) {
        lock(&self.inner.pid_runs).closed(conn);
        let key = conn_stream_key(conn);
        let mut streams = lock(&self.inner.streams);
        if let Some(mut s) = streams.remove(&key).filter(|s| !s.buf.is_empty()) {
            if let Err(e) = self.inner.seal(&mut s) {
                eprintln!("memwatch agent: {e}");
            }
        }
    }
}

/// Shim connections are keyed in the stream table by a value that cannot collide with
/// the ids of [`Forwarder::open_stream`] (those have high bits set from the clock).
fn conn_stream_key(conn: ConnId) -> u64 {
    conn.0 | (1 << 63)
}

enum FromDaemon {
    Ack(u64, u64),
    Closed(String),
}

fn read_acks(mut sock: TcpStream, tx: mpsc::Sender<FromDaemon>) {
    loop {
        let mut b = [0u8; ACK_LEN];
        if let Err(e) = sock.read_exact(&mut b[..4]) {
            let _ = tx.send(FromDaemon::Closed(format!("connection lost: {e}")));
            return;
        }
        if b[..4] == ERROR_MAGIC {
            let mut n = [0u8; 2];
            let mut msg = String::from("daemon closed the connection");
            if sock.read_exact(&mut n).is_ok() {
                let mut m = vec![0u8; u16::from_le_bytes(n) as usize];
                if sock.read_exact(&mut m).is_ok() {
                    msg = format!("daemon: {}", String::from_utf8_lossy(&m));
                }
            }
            let _ = tx.send(FromDaemon::Closed(msg));
            return;
        }
        if b[..4] != ACK_MAGIC || sock.read_exact(&mut b[4..]).is_err() {
            let _ = tx.send(FromDaemon::Closed("bad reply from the daemon".into()));
            return;
        }
        match decode_ack(&b) {
            Some((s, q)) => {
                if tx.send(FromDaemon::Ack(s, q)).is_err() {
                    return;
                }
            }
            None => return,
        }
    }
}

fn connect(cfg: &ForwarderConfig) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other(format!("{} resolves to no address", cfg.daemon));
    for addr in cfg.daemon.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => {
                s.set_nodelay(true)?;
                // A daemon that stops reading (stopped, overloaded) cannot hold a send
                // forever: the connection is dropped and the batches resent later.
                s.set_write_timeout(Some(SEND_STALL))?;
                let mut hello = Vec::new();
                encode_hello(&cfg.token, &cfg.node, &mut hello);
                hello.extend_from_slice(&encode_preamble());
                (&s).write_all(&hello)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The longest a send waits for the daemon to take bytes.
const SEND_STALL: Duration = Duration::from_secs(30);

/// The longest pause between attempts to reach a daemon that is down or refuses us.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The sender thread: (re)connects, sends spooled batches in order with a window, and
/// moves the acknowledged position forward.
fn sender(inner: &Inner) {
    let cfg = &inner.cfg;
    let mut acked: Pos = lock(&inner.spool).start();
    let mut backoff = Duration::from_millis(50);
    let mut last_error = String::new();
    // Batch numbers the daemon asked for that the spool no longer has: sent empty first.
    let mut fill: VecDeque<(u64, u64)> = VecDeque::new();
    while !inner.stop.load(Ordering::Relaxed) {
        let sock = match connect(cfg) {
            Ok(s) => s,
            Err(e) => {
                let msg = format!("cannot reach daemon {}: {e}", cfg.daemon);
                if msg != last_error {
                    eprintln!("memwatch agent: {msg} (spooling, will retry)");
                    last_error = msg;
                }
                wait_stop(inner, backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        inner.stats.connects.fetch_add(1, Ordering::Relaxed);
        let acked_before = inner.stats.batches_acked.load(Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let reader = match sock.try_clone() {
            Ok(r) => r,
            Err(_) => continue,
        };
        let reader_thread = std::thread::spawn(move || read_acks(reader, tx));
        *lock(&inner.current) = sock.try_clone().ok();
        if inner.stop.load(Ordering::Relaxed) {
            // Stopped while connecting: `shutdown` may have looked before we stored it.
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
        let mut out = &sock;
        let mut pos = acked;
        let mut inflight: VecDeque<(u64, u64, Pos)> = VecDeque::new();
        let reason: String = 'conn: loop {
            while inflight.len() < cfg.window {
                if let Some((stream, seq)) = fill.pop_front() {
                    let mut head = Vec::with_capacity(64);
                    encode_batch_header(stream, seq, "", 0, &mut head);
                    if let Err(e) = out.write_all(&head) {
                        break 'conn format!("send failed: {e}");
                    }
                    inflight.push_back((stream, seq, pos));
                    continue;
                }
                let next = match lock(&inner.spool).read_at(pos) {
                    Ok(n) => n,
                    Err(e) => break 'conn format!("reading the spool: {e}"),
                };
                let Some((rec, after)) = next else { break };
                let mut head = Vec::with_capacity(64);
                encode_batch_header(
                    rec.stream,
                    rec.seq,
                    &rec.run,
                    rec.frames.len() as u32,
                    &mut head,
                );
                if let Err(e) = out
                    .write_all(&head)
                    .and_then(|_| out.write_all(&rec.frames))
                {
                    // A daemon that refuses us says why, then closes: its reason, not
                    // our broken pipe, is the news.
                    break 'conn match rx.recv_timeout(Duration::from_millis(200)) {
                        Ok(FromDaemon::Closed(why)) => why,
                        _ => format!("send failed: {e}"),
                    };
                }
                inflight.push_back((rec.stream, rec.seq, after));
                pos = after;
            }
            if inner.stop.load(Ordering::Relaxed) {
                break 'conn String::new();
            }
            if inflight.is_empty() {
                let spool = lock(&inner.spool);
                if spool.end() <= pos || spool.bytes() == 0 {
                    let _ = inner.data.wait_timeout(spool, Duration::from_millis(50));
                }
                continue;
            }
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(FromDaemon::Ack(s, q)) => match inflight.front() {
                    Some(&(fs, fq, after)) if fs == s && fq == q => {
                        inflight.pop_front();
                        acked = after;
                        inner.stats.batches_acked.fetch_add(1, Ordering::Relaxed);
                        if let Err(e) = lock(&inner.spool).acknowledge(acked) {
                            break 'conn format!("spool: {e}");
                        }
                    }
                    _ => break 'conn format!("unexpected acknowledgement {s}/{q}"),
                },
                Ok(FromDaemon::Closed(why)) => break 'conn why,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break 'conn "connection lost".into(),
            }
        };
        let _ = sock.shutdown(std::net::Shutdown::Both);
        *lock(&inner.current) = None;
        let _ = reader_thread.join();
        if inner.stats.batches_acked.load(Ordering::Relaxed) != acked_before {
            // The daemon took data: retry soon after the next break.
            backoff = Duration::from_millis(50);
            last_error.clear();
        }
        fill.clear();
        if let Some((stream, from)) = parse_resend_request(&reason) {
            match lost_batches(inner, acked, stream, from) {
                Ok(lost) if !lost.is_empty() => {
                    eprintln!(
                        "memwatch agent: the daemon lacks batches {}..{} of stream {stream}, \
                         which the spool no longer holds: sending them empty",
                        lost[0].1,
                        lost[lost.len() - 1].1
                    );
                    fill.extend(lost);
                }
                Ok(_) => {}
                Err(e) => eprintln!("memwatch agent: reading the spool: {e}"),
            }
        }
        if !reason.is_empty() {
            // A daemon that refuses every session (a wrong token, another protocol) is
            // retried with the same growing pause as an unreachable one, and said once.
            if reason != last_error {
                eprintln!("memwatch agent: {reason}; resending unacknowledged batches");
                last_error = reason;
            }
            wait_stop(inner, backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// Most empty batches sent for one request of the daemon.
const MAX_FILL: u64 = 1 << 20;

/// The batches `from..` of `stream` that precede its first unacknowledged batch in the
/// spool (those the spool lost); none when the spool still holds batch `from`.
fn lost_batches(
    inner: &Inner,
    acked: Pos,
    stream: u64,
    from: u64,
) -> Result<Vec<(u64, u64)>, SpoolError> {
    let spool = lock(&inner.spool);
    let mut pos = acked;
    while let Some((rec, after)) = spool.read_at(pos)? {
        if rec.stream == stream {
            let upto = rec.seq.min(from.saturating_add(MAX_FILL));
            return Ok((from..upto).map(|q| (stream, q)).collect());
        }
        pos = after;
    }
    Ok(Vec::new())
}

fn wait_stop(inner: &Inner, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end && !inner.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
}
