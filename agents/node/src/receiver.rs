//! The local receiver: a Unix socket that any number of shims connect to at once.
//!
//! Owns the private socket directory (mode 0700, removed on shutdown), accepting
//! connections, and reading each one on its own thread in [`ReadMode::Strict`]: every
//! frame is length-, CRC- and decode-checked before its exact bytes go to the
//! [`FrameSink`]. A connection that sends anything invalid is closed with the reason
//! logged (see [`ConnSummary`]); other connections never notice. It does not interpret
//! events and does not own what sinks do with frames.
//!
//! Idle detection ([`Receiver::wait_idle`]) is exact about the accept backlog: it drains
//! the backlog itself, so a process that connected and exited before it was accepted is
//! still read in full.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read};
use std::net::Shutdown;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memwatch_wire::{FrameReader, ReadMode, Record, WireError};

use crate::sink::{CloseReason, ConnId, FrameSink};
use crate::AgentError;

/// How long the accept thread sleeps in poll(2) before looking at the stop flag.
const ACCEPT_WAKE_MS: libc::c_int = 50;
/// Delivered bytes kept in a connection's copy buffer before it is compacted.
const COMPACT_AT: usize = 1 << 20;

/// What one connection delivered, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnSummary {
    pub id: ConnId,
    /// From the connection's `process_start`; `None` if it never sent a valid one.
    pub pid: Option<u32>,
    /// The process's argv[0], if known.
    pub command: Option<String>,
    /// Valid frames delivered to the sink.
    pub frames: u64,
    /// Bytes delivered to the sink.
    pub bytes: u64,
    /// `None` while the connection is open.
    pub reason: Option<CloseReason>,
}

/// All connections of a receiver, in accept order.
#[derive(Debug, Clone, Default)]
pub struct ReceiverStats {
    pub connections: Vec<ConnSummary>,
}

impl ReceiverStats {
    /// Connections that ended other than by a clean close.
    pub fn failed(&self) -> impl Iterator<Item = &ConnSummary> {
        self.connections
            .iter()
            .filter(|c| !c.reason.as_ref().is_some_and(CloseReason::is_clean))
    }
}

struct ConnEntry {
    summary: ConnSummary,
    /// A second handle on the socket, used to cut it at shutdown.
    stream: Option<UnixStream>,
}

#[derive(Default)]
struct Table {
    conns: BTreeMap<ConnId, ConnEntry>,
    open: usize,
}

struct Shared {
    sink: Arc<dyn FrameSink>,
    stop: AtomicBool,
    listener: UnixListener,
    /// Held while draining the accept backlog (by the accept thread or `wait_idle`).
    accepting: Mutex<u64>,
    table: Mutex<Table>,
    changed: Condvar,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Who may connect to a socket at a fixed path: its file mode (a shim needs write
/// permission) and, optionally, the group it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketAccess {
    pub mode: u32,
    pub group: Option<u32>,
}

impl Default for SocketAccess {
    /// The agent's own user only.
    fn default() -> Self {
        Self {
            mode: 0o600,
            group: None,
        }
    }
}

/// A running receiver. Drop or [`Receiver::shutdown`] stops it and removes the socket.
pub struct Receiver {
    dir: Option<tempfile::TempDir>,
    /// A socket at a fixed path ([`Receiver::start_at`]) is removed at the stop.
    remove_socket: bool,
    socket_path: PathBuf,
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

impl Receiver {
    /// Creates a private directory (0700) under `parent` (default: the system temp
    /// directory), binds `agent.sock` in it and starts accepting; frames go to `sink`.
    pub fn start(parent: Option<&Path>, sink: Arc<dyn FrameSink>) -> Result<Self, AgentError> {
        let parent = parent
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix("memwatch-")
            .tempdir_in(&parent)
            .map_err(|error| AgentError::Io {
                what: "cannot create a private socket directory in",
                path: parent.clone(),
                error,
            })?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(
            |error| AgentError::Io {
                what: "cannot make the socket directory private",
                path: dir.path().to_path_buf(),
                error,
            },
        )?;
        let socket_path = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&socket_path).map_err(|error| AgentError::Io {
            what: "cannot bind socket",
            path: socket_path.clone(),
            error,
        })?;
        Self::serve(listener, socket_path, Some(dir), sink)
    }

    /// Binds the socket at the fixed path `path` (its directory is created when missing;
    /// a socket left there by an agent that did not stop cleanly is replaced, one that
    /// another receiver still serves is an error), gives it the file mode and group of
    /// `access` (who may connect: a shim needs write permission on the socket) and starts
    /// accepting. The socket is removed when the receiver stops.
    pub fn start_at(
        path: &Path,
        access: SocketAccess,
        sink: Arc<dyn FrameSink>,
    ) -> Result<Self, AgentError> {
        let io = |what: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |error| AgentError::Io { what, path, error }
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(io("cannot create the socket's directory", parent))?;
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) => {
                use std::os::unix::fs::FileTypeExt;
                if !m.file_type().is_socket() {
                    return Err(AgentError::Io {
                        what: "refusing to replace what is not a socket at",
                        path: path.to_path_buf(),
                        error: std::io::Error::from(ErrorKind::AlreadyExists),
                    });
                }
                if UnixStream::connect(path).is_ok() {
                    return Err(AgentError::Io {
                        what: "another agent already listens on",
                        path: path.to_path_buf(),
                        error: std::io::Error::from(ErrorKind::AddrInUse),
                    });
                }
                std::fs::remove_file(path).map_err(io("cannot remove the stale socket", path))?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io("cannot inspect", path)(e)),
        }
        let listener = UnixListener::bind(path).map_err(io("cannot bind socket", path))?;
        let mut receiver = Self::serve(listener, path.to_path_buf(), None, sink)?;
        receiver.remove_socket = true;
        if let Some(gid) = access.group {
            std::os::unix::fs::chown(path, None, Some(gid))
                .map_err(io("cannot give the socket its group", path))?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.mode))
            .map_err(io("cannot set the socket's mode", path))?;
        Ok(receiver)
    }

    fn serve(
        listener: UnixListener,
        socket_path: PathBuf,
        dir: Option<tempfile::TempDir>,
        sink: Arc<dyn FrameSink>,
    ) -> Result<Self, AgentError> {
        let io_err = |what: &'static str| {
            let path = socket_path.clone();
            move |error| AgentError::Io { what, path, error }
        };
        listener
            .set_nonblocking(true)
            .map_err(io_err("cannot configure socket"))?;
        let shared = Arc::new(Shared {
            sink,
            stop: AtomicBool::new(false),
            listener,
            accepting: Mutex::new(0),
            table: Mutex::new(Table::default()),
            changed: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let accept_thread = std::thread::Builder::new()
            .name("memwatch-accept".into())
            .spawn(move || accept_loop(&accept_shared))
            .map_err(io_err("cannot start the accept thread for"))?;
        Ok(Self {
            dir,
            remove_socket: false,
            socket_path,
            shared,
            accept_thread: Some(accept_thread),
        })
    }

    /// The socket's path.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// The value for the shim's `MEMWATCH_SINK` variable.
    pub fn sink_address(&self) -> String {
        format!("unix:{}", self.socket_path.display())
    }

    /// Connections accepted and not yet closed.
    pub fn open_connections(&self) -> usize {
        self.shared.table().open
    }

    /// Summaries of all connections so far.
    pub fn stats(&self) -> ReceiverStats {
        ReceiverStats {
            connections: self
                .shared
                .table()
                .conns
                .values()
                .map(|e| e.summary.clone())
                .collect(),
        }
    }

    /// Waits until no connection is open and none is waiting in the accept backlog, or
    /// until `timeout` passes. Returns whether the receiver became idle.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            drain_backlog(&self.shared);
            {
                let mut table = self.shared.table();
                while table.open > 0 {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    table = self
                        .shared
                        .changed
                        .wait_timeout(table, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
            // Anything queued while we waited is accepted (and counted open) here.
            drain_backlog(&self.shared);
            if self.shared.table().open == 0 {
                return true;
            }
        }
    }

    /// Stops accepting, cuts connections that are still open (they end with
    /// [`CloseReason::Shutdown`]), waits for every reader thread, removes the socket
    /// directory and returns all connection summaries.
    pub fn shutdown(mut self) -> ReceiverStats {
        self.stop_all();
        self.stats()
    }

    fn stop_all(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
        {
            let table = self.shared.table();
            for entry in table.conns.values() {
                if let Some(s) = &entry.stream {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
        let threads = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for t in threads {
            let _ = t.join();
        }
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
        if std::mem::take(&mut self.remove_socket) {
            let _ = std::fs::remove_file(&self.socket_path);
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn accept_loop(shared: &Arc<Shared>) {
    let fd = shared.listener.as_raw_fd();
    while !shared.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the listener, which outlives this thread.
        let ready = unsafe { libc::poll(&mut pfd, 1, ACCEPT_WAKE_MS) };
        if ready > 0 {
            drain_backlog(shared);
        }
    }
    // Whatever connected before the stop is still read (then cut by shutdown).
    drain_backlog(shared);
}

/// Accepts every connection waiting in the backlog (the listener is non-blocking).
fn drain_backlog(shared: &Arc<Shared>) {
    let mut next_id = shared.accepting.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        match shared.listener.accept() {
            Ok((stream, _)) => {
                *next_id += 1;
                spawn_connection(ConnId(*next_id), stream, shared);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) => {
                eprintln!("memwatch receiver: accept failed: {e}");
                return;
            }
        }
    }
}

fn spawn_connection(id: ConnId, stream: UnixStream, shared: &Arc<Shared>) {
    // The listener is non-blocking; accepted sockets must block.
    let setup = stream
        .set_nonblocking(false)
        .and_then(|()| stream.try_clone());
    {
        let mut table = shared.table();
        table.open += 1;
        table.conns.insert(
            id,
            ConnEntry {
                summary: ConnSummary {
                    id,
                    pid: None,
                    command: None,
                    frames: 0,
                    bytes: 0,
                    reason: None,
                },
                stream: setup.as_ref().ok().and_then(|s| s.try_clone().ok()),
            },
        );
    }
    let conn_shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name(format!("memwatch-{id}"))
        .spawn(move || {
            let reason = match setup {
                Ok(_) => read_connection(id, stream, &conn_shared),
                Err(e) => CloseReason::Io(e.to_string()),
            };
            close_connection(id, reason, &conn_shared);
        });
    match spawned {
        Ok(handle) => shared
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle),
        Err(e) => close_connection(id, CloseReason::Io(format!("no thread: {e}")), shared),
    }
}

fn close_connection(id: ConnId, reason: CloseReason, shared: &Shared) {
    if !reason.is_clean() {
        eprintln!("memwatch receiver: {id} {reason}");
    }
    shared.sink.closed(id, &reason);
    let mut table = shared.table();
    if let Some(entry) = table.conns.get_mut(&id) {
        entry.summary.reason = Some(reason);
        entry.stream = None;
    }
    table.open = table.open.saturating_sub(1);
    shared.changed.notify_all();
}

/// A reader that keeps a copy of every byte it hands out, so the exact bytes of each
/// frame the [`FrameReader`] accepted can be passed on without re-encoding.
struct Tee<R> {
    inner: R,
    copy: Rc<RefCell<Vec<u8>>>,
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.copy.borrow_mut().extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

fn read_connection(id: ConnId, stream: UnixStream, shared: &Shared) -> CloseReason {
    let copy = Rc::new(RefCell::new(Vec::with_capacity(256 * 1024)));
    let tee = Tee {
        inner: stream,
        copy: Rc::clone(&copy),
    };
    let stopped = |why: CloseReason| {
        if shared.stop.load(Ordering::SeqCst) {
            CloseReason::Shutdown
        } else {
            why
        }
    };
    let mut reader = match FrameReader::new(tee, ReadMode::Strict) {
        Ok(r) => r,
        Err(WireError::ShortPreamble { got: 0 }) => {
            return stopped(CloseReason::Protocol(
                "closed before sending anything".into(),
            ))
        }
        Err(WireError::Io(e)) => return stopped(CloseReason::Io(e.to_string())),
        Err(e) => return stopped(CloseReason::Protocol(e.to_string())),
    };
    // `copy[0]` is at stream offset `base`.
    let mut base = 0u64;
    let mut first = true;
    loop {
        let before = reader.offset();
        match reader.next_record() {
            // An end of stream after our own shutdown(Both) is our cut, not the process
            // closing its side.
            Ok(None) => return stopped(CloseReason::Eof),
            Ok(Some(record)) => {
                if first {
                    let Record::ProcessStart(start) = &record else {
                        return CloseReason::Protocol("first frame is not a process_start".into());
                    };
                    let mut table = shared.table();
                    if let Some(entry) = table.conns.get_mut(&id) {
                        entry.summary.pid = Some(start.pid);
                        entry.summary.command = start.argv.first().cloned();
                    }
                    first = false;
                }
                let after = reader.offset();
                let result = {
                    let buf = copy.borrow();
                    let (lo, hi) = ((before - base) as usize, (after - base) as usize);
                    shared.sink.frame(id, &record, &buf[lo..hi])
                };
                {
                    // Drop delivered bytes; compact rarely so read-ahead is not moved
                    // on every small frame.
                    let mut buf = copy.borrow_mut();
                    let delivered = (after - base) as usize;
                    if delivered == buf.len() {
                        buf.clear();
                        base = after;
                    } else if delivered >= COMPACT_AT {
                        buf.drain(..delivered);
                        base = after;
                    }
                }
                // The events buffer is decoded into again (no fresh, kernel-zeroed pages
                // per frame).
                reader.recycle(record);
                if let Err(e) = result {
                    return CloseReason::Sink(e.0);
                }
                let mut table = shared.table();
                if let Some(entry) = table.conns.get_mut(&id) {
                    entry.summary.frames += 1;
                    entry.summary.bytes += after - before;
                }
            }
            Err(WireError::Io(e)) => return stopped(CloseReason::Io(e.to_string())),
            Err(e) => return stopped(CloseReason::Protocol(e.to_string())),
        }
    }
}
