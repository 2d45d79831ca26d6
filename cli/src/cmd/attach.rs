//! `memwatch attach PID`: capture a process that is already running.
//!
//! Owns the command's flow: choose the processes (`--all-children`), refuse ones that are
//! already captured, start a receiver writing one capture file, load the shim into each
//! process and start it (`memwatch-attach`: gdb or the built-in ptrace injector), wait
//! for Ctrl-C / `--duration` / the processes' exit while showing progress (or the `--live`
//! view, see `attach_live`), then stop the shim in each process (a second injection that
//! calls `memwatch_attach_stop`), store the capture when `--db`/`--daemon` ask for it
//! (`import::StoreArgs`, shared with `memwatch run`; checked before attaching), and
//! print a summary. Injection mechanics live in the
//! `memwatch-attach` crate, receiving in `memwatch-agent`.
//!
//! Each target gets a private directory `/tmp/memwatch-attach-<pid>/` holding a lock file
//! (held with `flock` while attached: a second `memwatch attach` is refused) and
//! `agent.sock`, a symbolic link to this run's receiver socket. The shim is always told
//! that same path, so re-attaching later works although the shim keeps its first sink.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use memwatch_agent::{CaptureFileSink, CloseReason, ConnId, FrameSink, Receiver, SinkError};
use memwatch_analysis::capture::{analyze, ReportOptions};
use memwatch_attach::procfs::Proc;
use memwatch_attach::{MethodChoice, START_ENTRY, STOP_ENTRY};
use memwatch_wire::Record;
use serde::Serialize;

use super::attach_live::{self, LiveStats};
use super::import::{ImportSummary, StoreArgs};
use super::report::{bytes, load_with_progress, print_damage};
use super::Outcome;

const AFTER_HELP: &str = "\
Examples:
  memwatch attach 12345                       # until Ctrl-C
  memwatch attach 12345 --duration 60s --out step.mwcap
  memwatch attach --all-children 4242 --live  # a launcher and its workers; q detaches
  memwatch attach 12345 --method gdb          # inject with gdb instead
  memwatch attach 12345 --duration 5m --db memwatch.db   # also store it (SQLite)
  memwatch attach 12345 --daemon http://central:7373 --token s3cret   # or send it

How it works: the shim (libmemwatch_preload.so) is loaded into the running process with
dlopen, by a built-in ptrace injector (x86-64; the default) or by gdb running the batch
script agents/attach/gdb/inject.gdb (--method gdb; it stops all threads for ~0.8 s), and
told where to send events. It then redirects the process's already-linked calls of HIP / CUDA
allocation functions (their GOT entries) and of dlsym / *GetProcAddress to its wrappers,
and the copies of those functions' addresses that loaded libraries keep in their static
data (XLA's driver stubs, cudart's driver table): it reads the libraries' writable pages
that are in memory. The process is paused only while this happens (0.12-0.17 s for a
PyTorch or JAX program on an H100 host, with ptrace).

What a late attach cannot see: allocations made before it (the capture starts with a
`pre-attach-baseline` marker per device: used memory as the runtime reports it), and calls
through function pointers the program keeps on the heap or the stack: those stay
invisible. For complete captures start the program under `memwatch run`.

Detach (Ctrl-C, --duration, or q in --live) stops capturing and leaves the process
running. ptrace must be allowed: kernel.yama.ptrace_scope 0, or root / CAP_SYS_PTRACE.

--db / --daemon store the capture after detach, as `memwatch run --db/--daemon` and
`memwatch import` do (run key `import:<file name>:<content id>`; the .mwcap is kept too).
--db is opened before attaching, so a wrong one fails before the process is touched.";

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MethodArg {
    /// The built-in injector on x86-64 (pauses one thread: ~10-50 ms in a small program,
    /// 0.12-0.17 s in a PyTorch or JAX one), gdb elsewhere.
    Auto,
    Gdb,
    Ptrace,
}

#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct AttachArgs {
    /// The process to attach to.
    #[arg(value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
    pub pid: i32,
    /// Capture file to write (default memwatch-attach-<pid>-<UTC time>.mwcap).
    #[arg(long, short, value_name = "FILE.mwcap")]
    pub out: Option<PathBuf>,
    /// Detach after this long (e.g. 30s, 5m, 1h, 500ms); default: until Ctrl-C.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Full-screen live view (per device live bytes, peak, rate, largest, failures).
    #[arg(long)]
    pub live: bool,
    /// Also attach to every descendant process of PID (a launcher and its workers).
    #[arg(long)]
    pub all_children: bool,
    /// How to load the shim into the process.
    #[arg(long, value_enum, default_value_t = MethodArg::Auto)]
    pub method: MethodArg,
    /// The shim to load (default: as `memwatch run` finds it).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,
    /// Print one JSON document (attach figures + the capture report) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Largest allocations to list per device in the report.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    // --db / --daemon / --token: also store the capture after detach.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Parses `500ms`, `30s`, `5m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("duration {s:?}: expected a number with ms, s, m or h"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "duration {s:?}: unknown unit {unit:?} (use ms, s, m or h)"
            ))
        }
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("duration {s:?} must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_stop_handlers() -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only stores an atomic flag.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("cannot install a handler for signal {sig}"));
            }
        }
    }
    Ok(())
}

/// The capture file plus attach bookkeeping: when the first event arrived, live figures.
pub struct TeeSink {
    file: Arc<CaptureFileSink>,
    started: Instant,
    first_event: Mutex<Option<Duration>>,
    pub live: Mutex<LiveStats>,
}

impl FrameSink for TeeSink {
    fn frame(&self, conn: ConnId, record: &Record, bytes: &[u8]) -> Result<(), SinkError> {
        if let Record::Events(evs) = record {
            if !evs.is_empty() {
                let mut f = self.first_event.lock().unwrap_or_else(|p| p.into_inner());
                f.get_or_insert_with(|| self.started.elapsed());
            }
        }
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(record);
        self.file.frame(conn, record, bytes)
    }

    fn closed(&self, conn: ConnId, reason: &CloseReason) {
        self.file.closed(conn, reason)
    }
}

/// A target's private directory with its lock held.
struct TargetDir {
    dir: PathBuf,
    _lock: File,
}

impl TargetDir {
    fn sink_path(&self) -> PathBuf {
        self.dir.join("agent.sock")
    }
}

impl Drop for TargetDir {
    fn drop(&mut self) {
        // The lock is released when `_lock` closes; the directory goes with it.
        let _ = std::fs::remove_file(self.sink_path());
        let _ = std::fs::remove_file(self.dir.join("lock"));
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Everything that must hold before `pid` is touched; the claimed directory on success.
fn check_target(proc_: &Proc, pid: i32) -> Result<TargetDir> {
    if let Some(s) = proc_.environ_var(pid, "MEMWATCH_SINK") {
        bail!(
            "process {pid} is already captured by `memwatch run` (its MEMWATCH_SINK is {s}); \
             its capture already has every allocation"
        );
    }
    // The lock first: a concurrent `memwatch attach` of the same process is then refused
    // as such, not as "traced by another process" while we inject.
    let dir = claim(pid)?;
    memwatch_attach::preflight(proc_, pid)?;
    Ok(dir)
}

fn method_name(m: MethodArg) -> &'static str {
    match m {
        MethodArg::Auto => "auto",
        MethodArg::Gdb => "gdb",
        MethodArg::Ptrace => "ptrace",
    }
}

fn claim(pid: i32) -> Result<TargetDir> {
    let dir = std::env::temp_dir().join(format!("memwatch-attach-{pid}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let lock_path = dir.join("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .read(true)
        .open(&lock_path)
        .with_context(|| format!("cannot open {}", lock_path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
        bail!(
            "process {pid} is already being captured by another `memwatch attach` ({}); \
             stop that one first",
            holder.trim()
        );
    }
    std::fs::write(
        &lock_path,
        format!("memwatch attach pid {}\n", std::process::id()),
    )
    .with_context(|| format!("cannot write {}", lock_path.display()))?;
    Ok(TargetDir { dir, _lock: lock })
}

#[derive(Serialize, Clone)]
struct TargetJson {
    pid: i32,
    method: String,
    attached: bool,
    /// How long the process (its stopped thread; with gdb all threads) was paused.
    pause_ns: Option<u64>,
    detach_pause_ns: Option<u64>,
    at_syscall: Option<bool>,
    error: Option<String>,
    detached: Option<String>,
    /// What the shim hooked (`patched_slots=N objects=... failed_slots=N hooked_names=N`).
    hooked: Option<String>,
}

impl TargetJson {
    /// A process not (yet) touched.
    fn new(pid: i32, method: &str) -> Self {
        TargetJson {
            pid,
            method: method.to_string(),
            attached: false,
            pause_ns: None,
            detach_pause_ns: None,
            at_syscall: None,
            error: None,
            detached: None,
            hooked: None,
        }
    }

    /// A process of the tree that was left out before anything was touched.
    fn refused(pid: i32, method: &str, why: &dyn std::fmt::Display) -> Self {
        TargetJson {
            error: Some(format!("left out: {why}")),
            ..TargetJson::new(pid, method)
        }
    }

    /// Stops the shim in this process (a second injection) and records how that went.
    /// `forked`: a child that inherited an attached parent's shim.
    fn detach(&mut self, shim: &Path, method: memwatch_attach::Method, forked: bool) {
        let (tail, failed) = if forked {
            (
                " (forked from an attached process)",
                "could not stop the shim of this forked child",
            )
        } else {
            ("", "could not stop the shim")
        };
        self.detached = Some(
            match memwatch_attach::call_entry(self.pid, shim, STOP_ENTRY, "detach", method) {
                Ok(r) => {
                    self.detach_pause_ns = Some(r.pause.as_nanos() as u64);
                    match r.entry_result {
                        0 => format!("stopped{tail}"),
                        n => format!("shim answered {n}{tail}"),
                    }
                }
                Err(
                    memwatch_attach::AttachError::NoSuchProcess { .. }
                    | memwatch_attach::AttachError::Exited { .. },
                ) if !forked => "process exited".into(),
                Err(e) => format!("{failed}: {e}"),
            },
        );
    }
}

#[derive(Serialize)]
struct AttachJson {
    capture: String,
    /// From the start of `memwatch attach` to the first event received.
    first_event_ns: Option<u64>,
    targets: Vec<TargetJson>,
    /// What --db / --daemon stored (absent without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    stored: Option<ImportSummary>,
    report: memwatch_analysis::capture::CaptureReport,
}

/// Per-process device memory as seen from outside the process at attach time: amdgpu's
/// /proc/PID/fdinfo DRM stats and nvidia-smi, as `pre-attach-baseline-process` markers.
fn outside_baseline(proc_: &Proc, pid: i32) -> Vec<String> {
    let mut out: Vec<String> = proc_
        .drm_usage(pid)
        .into_iter()
        .map(|u| {
            format!(
                "pre-attach-baseline-process pid={pid} pdev={} vram={} gtt={} source=drm-fdinfo driver={}",
                u.pdev, u.vram_bytes, u.gtt_bytes, u.driver
            )
        })
        .collect();
    out.extend(
        memwatch_attach::smi::nvidia_usage(pid as u32)
            .into_iter()
            .map(|u| {
                format!(
                    "pre-attach-baseline-process pid={pid} pdev={} vram={} source=nvidia-smi",
                    u.bus_id, u.used_bytes
                )
            }),
    );
    out
}

fn write_marker(file: &CaptureFileSink, pid: i32, text: String) -> Result<()> {
    let now = {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let record = Record::Marker(memwatch_wire::Marker {
        pid: pid as u32,
        tid: 0,
        ts_ns: now,
        device: -1,
        text,
    });
    let mut bytes = Vec::new();
    memwatch_wire::encode_record(&record, &mut bytes).context("cannot encode a marker")?;
    file.frame(ConnId(0), &record, &bytes)
        .map_err(|e| anyhow::anyhow!("capture file: {}", e.0))
}

fn default_out(pid: i32) -> PathBuf {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = super::report::civil_from_days((now / 86_400) as i64);
    let rem = now % 86_400;
    let base = format!(
        "memwatch-attach-{pid}-{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    let mut path = PathBuf::from(format!("{base}.mwcap"));
    let mut n = 1;
    while path.exists() {
        path = PathBuf::from(format!("{base}-{n}.mwcap"));
        n += 1;
    }
    path
}

pub fn run(args: AttachArgs) -> Result<Outcome> {
    let started = Instant::now();
    let proc_ = Proc::default();
    let shim = match &args.shim {
        Some(p) => p.clone(),
        None => super::run::find_preload()?,
    };
    let shim = std::fs::canonicalize(&shim)
        .with_context(|| format!("shim {}: cannot resolve the path", shim.display()))?;
    let me = std::process::id() as i32;
    let mut tree_left_out = Vec::new();
    if args.pid == me {
        bail!("pid {me} is this memwatch process itself; give the pid of the program to watch");
    }
    let candidates = if args.all_children {
        let tree = proc_.descendants(args.pid, Some(me))?;
        for (pid, why) in &tree.left_out {
            if !args.json {
                eprintln!("memwatch: pid {pid}: left out: {}", why.why());
            }
            tree_left_out.push(TargetJson::refused(
                *pid,
                method_name(args.method),
                &why.why(),
            ));
        }
        tree.attachable
    } else {
        proc_.require_process(args.pid)?;
        vec![args.pid]
    };
    // Refuse what cannot work before touching anything. With --all-children a descendant
    // that cannot be attached (statically linked, under `memwatch run`, traced, …) is left
    // out with its reason; the process named on the command line must be attachable.
    let mut pids = Vec::new();
    let mut dirs = Vec::new();
    let mut left_out = tree_left_out;
    for &pid in &candidates {
        match check_target(&proc_, pid) {
            Ok(dir) => {
                pids.push(pid);
                dirs.push(dir);
            }
            Err(e) if pid != args.pid => {
                if !args.json {
                    eprintln!("memwatch: pid {pid}: left out: {}", super::one_line(&e));
                }
                left_out.push(TargetJson::refused(pid, method_name(args.method), &e));
            }
            Err(e) => return Err(e),
        }
    }
    // A wrong --db / --daemon fails now, before the processes are touched.
    args.store.check()?;
    let method = match args.method {
        MethodArg::Auto => MethodChoice::Auto,
        MethodArg::Gdb => MethodChoice::Gdb,
        MethodArg::Ptrace => MethodChoice::Ptrace,
    }
    .resolve();

    let out = args.out.clone().unwrap_or_else(|| default_out(args.pid));
    // An existing file at --out is replaced only once something was captured.
    let capture_out = super::out_file::CaptureOut::new(&out);
    let file = Arc::new(CaptureFileSink::create(capture_out.write_path())?);
    let tee = Arc::new(TeeSink {
        file: file.clone(),
        started,
        first_event: Mutex::new(None),
        live: Mutex::new(LiveStats::default()),
    });
    // Every device and its processes, every 100 ms and at each failed allocation; the
    // attached processes (and what they start) are the watched tree.
    let mut readings = super::device_readings::CaptureReadings::start(&file);
    if let Some((k, v)) = readings.off_tag() {
        let tag = format!("{}{k}={v}", memwatch_analysis::capture::load::TAG_PREFIX);
        write_marker(&file, std::process::id() as i32, tag)?;
    }
    if !args.json && !args.live {
        readings.say_off();
    }
    for &pid in &pids {
        readings.watch(pid as u32);
    }
    let receiver = Receiver::start(None, readings.tap(tee.clone() as Arc<dyn FrameSink>))?;
    install_stop_handlers()?;

    for &pid in &pids {
        for text in outside_baseline(&proc_, pid) {
            write_marker(&file, pid, text)?;
        }
    }
    let mut targets = left_out;
    for (pid, dir) in pids.iter().copied().zip(&dirs) {
        let link = dir.sink_path();
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(receiver.socket_path(), &link)
            .with_context(|| format!("cannot create {}", link.display()))?;
        let sink = format!("unix:{}", link.display());
        let mut t = TargetJson::new(pid, method.name());
        match memwatch_attach::call_entry(pid, &shim, START_ENTRY, &sink, method) {
            Ok(r) => {
                t.pause_ns = Some(r.pause.as_nanos() as u64);
                t.at_syscall = r.at_syscall;
                match r.entry_result {
                    0 => t.attached = true,
                    1 => t.error = Some(
                        "already captured (by another memwatch attach or memwatch run); refused"
                            .into(),
                    ),
                    -1 => t.error = Some(format!("the shim rejected the sink {sink}")),
                    -2 => {
                        t.error = Some(
                            "the shim in this process was configured by MEMWATCH_SINK when it \
                             started (it has its own capture); refused"
                                .into(),
                        )
                    }
                    n => t.error = Some(format!("the shim could not start recording (code {n})")),
                }
            }
            Err(e) => t.error = Some(e.to_string()),
        }
        if !args.json && !args.live {
            match (&t.error, t.pause_ns) {
                (None, Some(p)) => eprintln!(
                    "memwatch: attached to pid {pid} via {} (process paused {:.1} ms)",
                    method.name(),
                    p as f64 / 1e6
                ),
                (Some(e), _) if pids.len() > 1 => eprintln!("memwatch: pid {pid}: {e}"),
                _ => {}
            }
        }
        targets.push(t);
    }
    if !targets.iter().any(|t| t.attached) {
        let _ = receiver.shutdown();
        readings.stop();
        let _ = file.finish();
        capture_out.discard();
        let why: Vec<String> = targets
            .iter()
            .filter_map(|t| t.error.as_ref().map(|e| format!("pid {}: {e}", t.pid)))
            .collect();
        bail!("could not attach: {}", why.join("; "));
    }

    let deadline = args.duration.map(|d| Instant::now() + d);
    // A zombie (exited, parent not reaping) is not alive: there is nothing to detach.
    let alive = |pid: i32| !proc_.is_gone(pid);
    let attached_pids: Vec<i32> = targets
        .iter()
        .filter(|t| t.attached)
        .map(|t| t.pid)
        .collect();
    if args.live {
        attach_live::run(&tee, &attached_pids, deadline, &STOP)?;
    } else {
        if !args.json {
            eprintln!(
                "memwatch: capturing to {}; {} to detach",
                out.display(),
                if args.duration.is_some() {
                    "Ctrl-C or --duration"
                } else {
                    "Ctrl-C"
                }
            );
        }
        while !STOP.load(Ordering::SeqCst)
            && deadline.is_none_or(|d| Instant::now() < d)
            && attached_pids.iter().any(|p| alive(*p))
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // Detach: stop the shim in every process still running.
    for t in targets.iter_mut().filter(|t| t.attached) {
        if !alive(t.pid) {
            t.detached = Some("process exited".into());
            continue;
        }
        t.detach(&shim, method, false);
    }
    // Children forked from a target while it was attached inherited its patches and
    // stream: stop them too, or they go on recording into a session that has ended.
    let forked: Vec<i32> = {
        let live = tee.live.lock().unwrap_or_else(|p| p.into_inner());
        live.pids
            .iter()
            .map(|&p| p as i32)
            .filter(|p| !targets.iter().any(|t| t.pid == *p) && alive(*p))
            .collect()
    };
    for pid in forked {
        let mut t = TargetJson::new(pid, method.name());
        t.detach(&shim, method, true);
        targets.push(t);
    }
    // Let the shims' last frames arrive (each closes its stream after stopping).
    let drain_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < drain_until && !receiver.wait_idle(Duration::from_millis(100)) {}
    let _stats = receiver.shutdown();
    readings.stop();
    file.finish()
        .with_context(|| format!("capture {} is incomplete", out.display()))?;
    capture_out.commit().map_err(anyhow::Error::msg)?;
    drop(dirs);

    let first_event = *tee.first_event.lock().unwrap_or_else(|p| p.into_inner());
    let starts = tee
        .live
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .starts
        .clone();
    for t in targets.iter_mut() {
        t.hooked = starts
            .get(&(t.pid as u32))
            .map(|s| s.trim_start_matches("memwatch-attach start ").to_string());
    }
    // The capture file is complete and stays; a storage failure after detach exits 2.
    let stored = args.store.store(&out, None)?;
    let loaded = load_with_progress(&out)?;
    print_damage(&loaded);
    let report = analyze(loaded, &ReportOptions { top: args.top });
    if args.json {
        let doc = AttachJson {
            capture: out.display().to_string(),
            first_event_ns: first_event.map(|d| d.as_nanos() as u64),
            targets,
            stored,
            report,
        };
        outln!(
            "{}",
            serde_json::to_string(&doc).context("cannot encode the JSON report")?
        );
    } else {
        eprint!("{}", summary(&out, &targets, first_event, &report));
    }
    Ok(Outcome::Success)
}

fn summary(
    out: &Path,
    targets: &[TargetJson],
    first_event: Option<Duration>,
    report: &memwatch_analysis::capture::CaptureReport,
) -> String {
    let mut s = format!("\nmemwatch: capture written to {}\n", out.display());
    for t in targets {
        s.push_str(&format!("  pid {:<7} ", t.pid));
        match (&t.error, t.pause_ns) {
            (Some(e), _) => s.push_str(&format!("not attached: {e}")),
            (None, p) => s.push_str(&format!(
                "attached via {} (paused {:.1} ms), detach: {}",
                t.method,
                p.unwrap_or(0) as f64 / 1e6,
                t.detached.as_deref().unwrap_or("-")
            )),
        }
        s.push('\n');
        if let Some(h) = &t.hooked {
            s.push_str(&format!("            hooks: {h}\n"));
            if h.starts_with("patched_slots=0 ") {
                s.push_str(
                    "            nothing in this process calls HIP/CUDA allocation functions through \
                     its GOT: calls through pointers it cached earlier (dlsym, *GetProcAddress; \
                     XLA, PyTorch) cannot be seen after attach; only new lookups are\n",
                );
            }
        }
    }
    if let Some(f) = first_event {
        s.push_str(&format!(
            "  first event {:.1} ms after memwatch attach started\n",
            f.as_secs_f64() * 1e3
        ));
    }
    for p in &report.processes {
        let allocs: u64 = p.devices.iter().map(|d| d.alloc_count).sum();
        let frees: u64 = p.devices.iter().map(|d| d.free_count).sum();
        let failed: u64 = p.devices.iter().map(|d| d.failed_count).sum();
        s.push_str(&format!(
            "  pid {:<7} {} allocs, {} frees, {} failed; peak of calls seen since attach {}\n",
            p.pid,
            allocs,
            frees,
            failed,
            bytes(p.peak_bytes)
        ));
    }
    s.push_str("  (allocations made before attach are not in the capture: see the pre-attach-baseline markers)\n");
    s
}
