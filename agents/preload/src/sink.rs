//! Delivering frames: the sink (capture file or Unix socket) and the flush routine.
//!
//! Owns the one sink per process behind a try-lock (never taken on the hook path), the
//! stream preamble / `process_start` / `device_info` / `dropped` / `process_end` frames,
//! and draining the per-thread rings and the shared queue into `events` frames. Runs on the flusher thread, at exit and
//! before exec; it may allocate. One `write()` per whole frame, so processes appending
//! to one file (`O_APPEND`) never interleave inside a frame.

use crate::config::SinkKind;
use crate::record::state;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};
use memwatch_wire::frame::encode_preamble;
use memwatch_wire::{
    encode_events_frame_into, encode_record, Event, ProcessEnd, ProcessStart, Record,
};
use std::ffi::CString;

/// Runtimes whose devices are described (`device::RUNTIMES`).
const RUNTIMES: usize = crate::device::RUNTIMES.len();

/// Events per `events` frame.
const FRAME_EVENTS: usize = 4096;
/// Give up on an unreachable sink after this many attempts (then the shim turns off).
const MAX_OPEN_ATTEMPTS: u32 = 5;

struct State {
    fd: i32,
    /// `(st_dev, st_ino)` of `fd` when we opened it: a program that closes descriptors it
    /// did not open (daemons close 3..N) and opens its own gets the same number, which
    /// must then never be written to or closed by us.
    ident: (u64, u64),
    /// The clock anchors of this image's first `process_start`, repeated when the sink is
    /// reopened after a broken or stolen descriptor, so that readers see one image, not
    /// an exec (reset in a forked child and when a stream is closed on purpose).
    anchor: Option<(u64, u64)>,
    started: bool,
    attempts: u32,
    last_attempt_ns: u64,
    last_dropped: u64,
    /// Devices already described, per family (bit = ordinal 0..63).
    devices_seen: [u64; RUNTIMES],
    /// Failed `device_info` queries per family and device (retried up to
    /// `DEVICE_QUERY_ATTEMPTS` times, once per flush: a runtime may not answer yet).
    device_query_failures: [[u8; 64]; RUNTIMES],
    events: Vec<Event>,
    buf: Vec<u8>,
    /// Backtraces taken out of `events` in this pass.
    backtraces: Vec<memwatch_wire::Backtrace>,
    /// Loader generation (adds + subs) of the last `module_map` written; 0: none yet.
    module_generation: u64,
    /// PJRT execute starts converted once for both of an execute's events.
    exec_starts: crate::pjrt::exec_start::ExecStarts,
    /// A sink given by a later `memwatch attach` that replaces the configured one (a
    /// process forked while its parent was attached inherits the parent's sink).
    retarget: Option<(SinkKind, Vec<u8>)>,
    /// Whether the open descriptor is a socket (send with MSG_NOSIGNAL).
    sock: bool,
    /// CLOCK_MONOTONIC ns by which the current pass must end (the last pass of an
    /// image: [`last_pass`]); 0: no limit.
    deadline_ns: u64,
}

impl State {
    const fn new() -> Self {
        State {
            fd: -1,
            ident: (0, 0),
            anchor: None,
            started: false,
            attempts: 0,
            last_attempt_ns: 0,
            last_dropped: 0,
            devices_seen: [0; RUNTIMES],
            device_query_failures: [[0; 64]; RUNTIMES],
            events: Vec::new(),
            buf: Vec::new(),
            backtraces: Vec::new(),
            module_generation: 0,
            exec_starts: crate::pjrt::exec_start::ExecStarts::new(),
            retarget: None,
            sock: false,
            deadline_ns: 0,
        }
    }
}

/// Used by `attach`: from now on open `kind`/`path` instead of the configured sink
/// (closing the current stream, if any, without `process_end`). False when the lock
/// could not be had.
pub fn retarget(kind: SinkKind, path: &[u8], timeout_ns: u64) -> bool {
    end_stream(timeout_ns, |st| st.retarget = Some((kind, path.to_vec())))
}

struct Locked {
    busy: AtomicBool,
    st: UnsafeCell<State>,
}
// SAFETY: `st` is only touched by the holder of `busy`.
unsafe impl Sync for Locked {}

static SINK: Locked = Locked {
    busy: AtomicBool::new(false),
    st: UnsafeCell::new(State::new()),
};

/// Takes the lock, waiting at most `timeout_ns`. Returns whether it was taken. Only
/// the fork handlers hold it without a [`SinkLock`] (across `fork`, released with
/// [`unlock_raw`] in the parent; the child resets it).
pub fn lock_raw(timeout_ns: u64) -> bool {
    let start = crate::clock::monotonic_ns();
    loop {
        if SINK
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        if crate::clock::monotonic_ns().saturating_sub(start) > timeout_ns {
            return false;
        }
        crate::clock::sleep_ns(200_000);
    }
}

/// Releases a lock taken with [`lock_raw`].
pub fn unlock_raw() {
    SINK.busy.store(false, Ordering::Release);
}

/// The sink lock, held; released when dropped (also while a panic unwinds, so a bug
/// in a pass never leaves the sink locked for the exit handler to wait on).
pub struct SinkLock(());

impl SinkLock {
    /// Takes the lock, waiting at most `timeout_ns`; `None` when it stayed busy.
    pub fn take(timeout_ns: u64) -> Option<SinkLock> {
        lock_raw(timeout_ns).then_some(SinkLock(()))
    }

    fn state(&mut self) -> &mut State {
        // SAFETY: the lock is held (this value exists only while it is), so nobody else
        // touches the state; the borrow ends before the lock is released.
        unsafe { &mut *SINK.st.get() }
    }
}

impl Drop for SinkLock {
    fn drop(&mut self) {
        unlock_raw();
    }
}

/// Writes already-encoded frames (PJRT memory statistics) when the sink is open and
/// the process announced; waits at most 50 ms for the lock. Returns whether written.
pub fn write_frames(bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return false;
    }
    let Some(mut lock) = SinkLock::take(50_000_000) else {
        return false;
    };
    let st = lock.state();
    st.fd >= 0 && st.started && write_all(st, bytes)
}

/// In a forked child: forget the parent's connection (close our copy of its fd) so the
/// child opens its own and announces itself with its own `process_start`.
pub fn reset_in_child() {
    // SAFETY: only the forking thread exists in the child; nobody else holds the state.
    let st = unsafe { &mut *SINK.st.get() };
    release(st);
    st.anchor = None;
    st.started = false;
    st.attempts = 0;
    st.last_attempt_ns = 0;
    st.last_dropped = 0;
    st.devices_seen = [0; RUNTIMES];
    st.device_query_failures = [[0; 64]; RUNTIMES];
    st.module_generation = 0;
    SINK.busy.store(false, Ordering::Release);
}

/// After a failed exec the old image goes on: announce it again.
pub fn restart_process() {
    if let Some(mut lock) = SinkLock::take(2_000_000_000) {
        let st = lock.state();
        st.started = false;
        st.module_generation = 0;
    }
}

/// Drains the rings under the lock. `final_` also writes `process_end(exit_code)`.
/// Returns the number of events written (0 when the lock was busy).
pub fn flush_locked(final_: bool, exit_code: i32, timeout_ns: u64) -> usize {
    match SinkLock::take(timeout_ns) {
        Some(mut lock) => flush(lock.state(), final_, exit_code),
        None => 0,
    }
}

/// The last pass of an image: drains everything and writes `process_end(exit_code)`,
/// all within `budget_ns` from now — waiting for the lock, opening the sink and every
/// write count against it, and nothing extends it (a sink that stops taking bytes,
/// a FIFO without a reader, a stalled receiver). What does not fit is lost, the stream
/// then ends inside a frame (readers report a cut-off tail). Returns the events written.
pub fn last_pass(exit_code: i32, budget_ns: u64) -> usize {
    let deadline = crate::clock::monotonic_ns().saturating_add(budget_ns);
    let Some(mut lock) = SinkLock::take(budget_ns) else {
        return 0;
    };
    let st = lock.state();
    st.deadline_ns = deadline;
    let n = flush(st, true, exit_code);
    st.deadline_ns = 0;
    n
}

/// Used by the `dlclose` hook: takes the lock, drains and writes everything queued
/// (describing the devices seen while the runtime is still loaded) and hands the lock
/// back held. `None` when the lock could not be had.
pub fn flush_keep_lock(timeout_ns: u64) -> Option<SinkLock> {
    let mut lock = SinkLock::take(timeout_ns)?;
    flush(lock.state(), false, 0);
    Some(lock)
}

/// Used by `attach`: drains what is queued, then writes `rec` (opening the sink and
/// announcing the process first when needed). False when the sink is unavailable.
pub fn emit_record(rec: &Record, timeout_ns: u64) -> bool {
    let Some(mut lock) = SinkLock::take(timeout_ns) else {
        return false;
    };
    let st = lock.state();
    flush(st, false, 0);
    let mut out = Vec::new();
    st.fd >= 0 && st.started && encode_record(rec, &mut out).is_ok() && write_all(st, &out)
}

/// Used by `attach` on detach: drains what is queued and closes the connection without
/// a `process_end` (the process goes on); a later attach opens a new stream.
pub fn close_stream(timeout_ns: u64) -> bool {
    end_stream(timeout_ns, |st| {
        st.devices_seen = [0; RUNTIMES];
        st.device_query_failures = [[0; 64]; RUNTIMES];
    })
}

/// Drains what is queued, closes the stream without `process_end` and forgets it (the
/// next flush opens a new one, announced afresh), then applies `also`, all under the
/// lock. False when the lock could not be had.
fn end_stream(timeout_ns: u64, also: impl FnOnce(&mut State)) -> bool {
    let Some(mut lock) = SinkLock::take(timeout_ns) else {
        return false;
    };
    let st = lock.state();
    if st.fd >= 0 {
        flush(st, false, 0);
    }
    release(st);
    st.anchor = None;
    st.started = false;
    st.attempts = 0;
    st.last_attempt_ns = 0;
    also(st);
    true
}

/// `(st_dev, st_ino)` of a descriptor, `None` when it is not open.
fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: fstat fills the struct; a closed fd gives EBADF.
    unsafe {
        let mut sb: libc::stat = core::mem::zeroed();
        (libc::fstat(fd, &mut sb) == 0).then_some((sb.st_dev, sb.st_ino))
    }
}

/// Whether `st.fd` is still the descriptor we opened.
fn still_ours(st: &State) -> bool {
    st.fd >= 0 && identity(st.fd) == Some(st.ident)
}

/// Forgets the sink descriptor, closing it only if it is still ours.
fn release(st: &mut State) {
    if still_ours(st) {
        // SAFETY: our own descriptor (checked just above).
        unsafe { libc::close(st.fd) };
    }
    st.fd = -1;
}

/// Moves a fresh descriptor above the numbers programs use and reuse (they assume
/// `open` returns the lowest free number, or `dup2` onto small ones); keeps it where it
/// is when the limit leaves no room.
fn out_of_the_way(fd: i32) -> i32 {
    const FLOOR: i32 = 1000;
    // SAFETY: fcntl on our own descriptor; the old one is closed only once duplicated.
    unsafe {
        let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, FLOOR);
        if high < 0 {
            return fd;
        }
        libc::close(fd);
        high
    }
}

fn flush(st: &mut State, final_: bool, exit_code: i32) -> usize {
    if st.fd >= 0 && !still_ours(st) {
        // The program closed our descriptor (and maybe opened its own under the same
        // number): forget it without touching it; the sink is reopened below, at once.
        st.fd = -1;
        st.started = false;
        st.attempts = 0;
    }
    if st.fd < 0 && !open(st) {
        // Sink unavailable: discard what is queued, counting it as dropped.
        let mut lost = 0u64;
        loop {
            st.events.clear();
            let n =
                crate::record::thread_ring::drain_all(&mut st.events, FRAME_EVENTS, state::pid());
            lost += n as u64;
            if n == 0 {
                break;
            }
        }
        while state::SHARED_QUEUE.pop().is_some() {
            lost += 1;
        }
        state::count_dropped(lost);
        return 0;
    }
    if !st.started {
        let mut out = Vec::new();
        if encode_record(
            &Record::ProcessStart(process_start(&mut st.anchor)),
            &mut out,
        )
        .is_ok()
            && write_all(st, &out)
        {
            st.started = true;
        }
    }
    // (The pass's buffers were sized when the sink opened: `reserve_buffers`.)
    // One pass drains at most what the rings can hold (everything queued when it began),
    // so a thread allocating without pause cannot keep the lock, or a last pass, for
    // ever; and a pass gives way at once to a last pass asked for by an ending thread.
    let budget = crate::record::thread_ring::capacity_total() + state::SHARED_QUEUE.capacity();
    let mut total = 0usize;
    loop {
        if total >= budget
            || (!final_ && crate::abnormal_end::requested_code().is_some())
            || past_deadline(st)
        {
            break;
        }
        st.events.clear();
        crate::record::thread_ring::drain_all(&mut st.events, FRAME_EVENTS, state::pid());
        while st.events.len() < FRAME_EVENTS {
            match state::SHARED_QUEUE.pop() {
                Some(e) => st.events.push(e),
                None => break,
            }
        }
        if st.events.is_empty() {
            break;
        }
        // Backtrace slots leave the event list (they are written as their own frames).
        st.backtraces.clear();
        crate::backtrace_frames::split(&mut st.events, &mut st.backtraces);
        // Raw hot-path clock -> CLOCK_MONOTONIC ns (after popping: all are older).
        let conv = crate::clock::Converter::sample();
        if !st.backtraces.is_empty() {
            write_backtraces(st, &conv);
        }
        for e in st.events.iter_mut() {
            let ts = conv.ts(e.ts_ns);
            e.ts_ns = st.exec_starts.start_of(e, ts);
            e.duration_ns = conv.dur(e.duration_ns);
            if e.is(memwatch_wire::EventKind::ApiSpan) {
                e.aux = e.duration_ns;
            }
        }
        total += st.events.len();
        if !final_ {
            describe_new_devices(st);
        }
        let need = 9 + 4 + st.events.len() * memwatch_wire::EVENT_SIZE;
        st.buf.resize(need, 0);
        let Some(len) = encode_events_frame_into(&st.events, &mut st.buf) else {
            break;
        };
        let frame = std::mem::take(&mut st.buf);
        let ok = frame.get(..len).is_some_and(|f| write_all(st, f));
        st.buf = frame;
        if !ok {
            state::count_dropped(st.events.len() as u64);
        }
    }
    if st.started {
        crate::pjrt::exec_frames::pending_frames(|b| write_all(st, b));
    }
    let dropped = state::dropped_total();
    let pid = state::pid();
    if dropped != st.last_dropped {
        let rec = Record::Dropped(memwatch_wire::Dropped {
            pid,
            ts_ns: crate::clock::monotonic_ns(),
            dropped_total: dropped,
        });
        if encode_small(st, &rec) {
            st.last_dropped = dropped;
        }
    }
    if final_ {
        let rec = Record::ProcessEnd(ProcessEnd {
            pid,
            ts_ns: crate::clock::monotonic_ns(),
            exit_code,
        });
        encode_small(st, &rec);
        st.started = false;
    }
    total
}

/// Encodes a small record on the stack (no allocation) and writes it; whether written.
fn encode_small(st: &mut State, rec: &Record) -> bool {
    let mut frame = [0u8; 64];
    memwatch_wire::encode_small_record_into(rec, &mut frame)
        .is_some_and(|n| write_all(st, &frame[..n]))
}

/// Writes this pass's backtraces (timestamps converted like the events'), preceded by a
/// `module_map` when none was written yet or objects were loaded / unloaded since.
fn write_backtraces(st: &mut State, conv: &crate::clock::Converter) {
    let pid = state::pid();
    let mut out = Vec::new();
    let (map, generation) = crate::backtrace_frames::module_map(pid, crate::clock::monotonic_ns());
    if generation != st.module_generation {
        if encode_record(&Record::ModuleMap(map), &mut out).is_ok() && write_all(st, &out) {
            st.module_generation = generation;
        }
        out.clear();
    }
    let mut bts = std::mem::take(&mut st.backtraces);
    for b in bts.iter_mut() {
        b.pid = pid;
        b.ts_ns = conv.ts(b.ts_ns);
        let _ = encode_record(&Record::Backtrace(std::mem::take(b)), &mut out);
    }
    st.backtraces = bts;
    if !out.is_empty() {
        write_all(st, &out);
    }
}

/// How often a device's `device_info` query is tried before the device stays unnamed.
const DEVICE_QUERY_ATTEMPTS: u8 = 8;

fn describe_new_devices(st: &mut State) {
    // Devices tried in this flush: one query per device per flush at most.
    let mut tried = [0u64; RUNTIMES];
    for i in 0..st.events.len() {
        let Some(e) = st.events.get(i).copied() else {
            break;
        };
        let Some(family) = e.api().family() else {
            continue;
        };
        let Some(fam) = crate::device::runtime_index(family) else {
            continue;
        };
        if e.device < 0 || e.device > 63 {
            continue;
        }
        let bit = 1u64 << e.device;
        let (Some(seen), Some(tried)) = (st.devices_seen.get(fam).copied(), tried.get_mut(fam))
        else {
            continue;
        };
        if (seen | *tried) & bit != 0 {
            continue;
        }
        *tried |= bit;
        let failures = st
            .device_query_failures
            .get(fam)
            .and_then(|f| f.get(e.device as usize))
            .copied()
            .unwrap_or(u8::MAX);
        if failures >= DEVICE_QUERY_ATTEMPTS {
            continue;
        }
        match crate::device::query(family, e.device, e.pid) {
            Some(info) => {
                if let Some(seen) = st.devices_seen.get_mut(fam) {
                    *seen |= bit;
                }
                let mut out = Vec::new();
                let _ = encode_record(&Record::DeviceInfo(info), &mut out);
                // HIP devices: whether it is an APU (memwatch_wire::device_props).
                if fam == 0 {
                    if let Some(props) = crate::device::hip_props(e.device) {
                        let m = props.to_marker(e.pid, e.tid, e.ts_ns);
                        let _ = encode_record(&Record::Marker(m), &mut out);
                    }
                }
                if !out.is_empty() {
                    write_all(st, &out);
                }
            }
            None => {
                if let Some(f) = st
                    .device_query_failures
                    .get_mut(fam)
                    .and_then(|f| f.get_mut(e.device as usize))
                {
                    *f = f.saturating_add(1);
                }
            }
        }
    }
}

/// The `process_start` record. Its clock anchors are the image's start stamp, taken
/// before any event of the image (`record::state::image_start`), and are repeated when
/// the sink is reopened (`anchor`).
fn process_start(anchor: &mut Option<(u64, u64)>) -> ProcessStart {
    let (mono, wall) = *anchor.get_or_insert_with(state::image_start);
    let mut host = [0u8; 256];
    // SAFETY: buffer and length match.
    unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len() - 1) };
    let hlen = host.iter().position(|b| *b == 0).unwrap_or(0);
    let argv = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    ProcessStart {
        pid: state::pid(),
        // SAFETY: plain syscall.
        ppid: unsafe { libc::getppid() } as u32,
        mono_anchor_ns: mono,
        wall_anchor_unix_ns: wall,
        shim_version: concat!("memwatch-preload ", env!("CARGO_PKG_VERSION")).to_string(),
        hostname: String::from_utf8_lossy(host.get(..hlen).unwrap_or(&[])).into_owned(),
        argv,
        pid_ns: pid_namespace(),
    }
}

/// The inode of this process's pid namespace: the agent keys process trees by it, since
/// each container numbers its pids from 1. `None` when `/proc` is not mounted.
fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// Opens the sink; on failure counts the attempt and turns the shim off after
/// [`MAX_OPEN_ATTEMPTS`] (retrying at most once a second).
fn open(st: &mut State) -> bool {
    let now = crate::clock::monotonic_ns();
    if st.attempts > 0 && now.saturating_sub(st.last_attempt_ns) < 1_000_000_000 {
        return false;
    }
    st.attempts += 1;
    st.last_attempt_ns = now;
    let c = crate::config::get();
    let (kind, path) = match &st.retarget {
        Some((k, p)) => (*k, p.as_slice()),
        None => (c.sink, c.path_bytes()),
    };
    let fd = match kind {
        SinkKind::File => open_file(path),
        SinkKind::Unix => open_unix(path),
        SinkKind::None => -1,
    };
    if fd < 0 {
        if st.attempts >= MAX_OPEN_ATTEMPTS {
            state::turn_off();
        }
        return false;
    }
    let fd = out_of_the_way(fd);
    let Some(ident) = identity(fd) else {
        return false;
    };
    st.fd = fd;
    st.ident = ident;
    st.sock = kind == SinkKind::Unix;
    st.started = false;
    reserve_buffers(st);
    true
}

/// Sizes the pass's buffers for the largest frame once, when the sink opens, so that a
/// pass allocates nothing afterwards: the last pass of a process ending in `abort` may
/// run while the ending thread holds the C library's allocator lock (see
/// `abnormal_end`).
fn reserve_buffers(st: &mut State) {
    st.events
        .reserve(FRAME_EVENTS.saturating_sub(st.events.len()));
    let frame = 9 + 4 + FRAME_EVENTS * memwatch_wire::EVENT_SIZE;
    st.buf.reserve(frame.saturating_sub(st.buf.len()));
}

/// `%p` in the path becomes the pid.
fn expand_path(path: &[u8]) -> Option<CString> {
    let pid = state::pid().to_string();
    let mut out = Vec::with_capacity(path.len() + 8);
    let mut i = 0;
    while i < path.len() {
        if path.get(i) == Some(&b'%') && path.get(i + 1) == Some(&b'p') {
            out.extend_from_slice(pid.as_bytes());
            i += 2;
        } else {
            out.extend_from_slice(path.get(i..i + 1).unwrap_or(&[]));
            i += 1;
        }
    }
    CString::new(out).ok()
}

/// Opens `path` for appending; a new file is created with its preamble atomically
/// (written to a temporary file, then `link`ed into place), so a concurrent appender
/// can never put a frame before the preamble. Never blocks: `O_NONBLOCK` makes the open
/// of a FIFO without a reader fail (ENXIO: tried again later, like any unavailable
/// sink) instead of waiting for one; the descriptor stays non-blocking, and writes wait
/// for room in [`write_all`], bounded by the pass's deadline.
fn open_file(path: &[u8]) -> i32 {
    let Some(p) = expand_path(path) else {
        return -1;
    };
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: NUL-terminated paths; descriptors checked.
    unsafe {
        let fd = libc::open(p.as_ptr(), flags);
        if fd >= 0 {
            return fd;
        }
        let mut tmp = p.as_bytes().to_vec();
        tmp.extend_from_slice(format!(".{}.tmp", state::pid()).as_bytes());
        let Ok(tmp) = CString::new(tmp) else {
            return -1;
        };
        let t = libc::open(
            tmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        );
        if t < 0 {
            return -1;
        }
        let pre = encode_preamble();
        let ok = libc::write(t, pre.as_ptr().cast(), pre.len()) == pre.len() as isize;
        libc::close(t);
        if ok {
            libc::link(tmp.as_ptr(), p.as_ptr()); // EEXIST: someone else created it first
        }
        libc::unlink(tmp.as_ptr());
        libc::open(p.as_ptr(), flags)
    }
}

fn open_unix(path: &[u8]) -> i32 {
    let Some(p) = expand_path(path) else {
        return -1;
    };
    // SAFETY: sockaddr_un filled within bounds; descriptors checked.
    unsafe {
        let mut addr: libc::sockaddr_un = core::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = p.as_bytes();
        if bytes.len() >= addr.sun_path.len() {
            return -1;
        }
        for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // Non-blocking (a receiver whose backlog is full refuses at once: tried again
        // later); writes wait for room in `write_all`.
        let fd = libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        );
        if fd < 0 {
            return -1;
        }
        let len = core::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len) != 0 {
            libc::close(fd);
            return -1;
        }
        let pre = encode_preamble();
        if libc::send(fd, pre.as_ptr().cast(), pre.len(), libc::MSG_NOSIGNAL) != pre.len() as isize
        {
            libc::close(fd);
            return -1;
        }
        fd
    }
}

/// Writes one whole frame; on a broken sink closes it (next flush reconnects). The
/// descriptor is non-blocking: when the sink has no room (a pipe or socket whose reader
/// is slow) it waits for room, until the pass's deadline when it has one (the last
/// pass), after which the rest is given up (false).
fn write_all(st: &mut State, mut b: &[u8]) -> bool {
    let sock = st.sock;
    while !b.is_empty() {
        // SAFETY: valid buffer; our descriptor.
        let n = unsafe {
            if sock {
                libc::send(st.fd, b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL)
            } else {
                libc::write(st.fd, b.as_ptr().cast(), b.len())
            }
        };
        if n < 0 {
            // SAFETY: this thread's errno location.
            match unsafe { *libc::__errno_location() } {
                libc::EINTR => continue,
                libc::EAGAIN if wait_for_room(st.fd, st.deadline_ns) => continue,
                libc::EAGAIN => return false,
                _ => {}
            }
            release(st);
            st.started = false;
            return false;
        }
        b = b.get(n as usize..).unwrap_or(&[]);
    }
    true
}

/// Whether the pass has a deadline and it has passed.
fn past_deadline(st: &State) -> bool {
    st.deadline_ns != 0 && crate::clock::monotonic_ns() >= st.deadline_ns
}

/// Waits until `fd` can take bytes; false when `deadline_ns` (0: none) passed first.
fn wait_for_room(fd: i32, deadline_ns: u64) -> bool {
    loop {
        let timeout_ms = if deadline_ns == 0 {
            -1
        } else {
            let left = deadline_ns.saturating_sub(crate::clock::monotonic_ns());
            if left == 0 {
                return false;
            }
            left.div_ceil(1_000_000).min(i32::MAX as u64) as i32
        };
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut p, 1, timeout_ms) } {
            n if n > 0 => return true,
            0 => return false,
            // SAFETY: this thread's errno location.
            _ if unsafe { *libc::__errno_location() } == libc::EINTR => continue,
            _ => return false,
        }
    }
}
