//! The OOM doctor inside `memwatch run`: the allocator settings recorded in the capture
//! (`env` tags), the XLA dump the run writes for it (a folder the user names, the one
//! the user's own `XLA_FLAGS` names, or a temporary one removed afterwards), the capture
//! folded while the command runs (so its report and live set are ready when it ends),
//! and the diagnosis of the finished run from its capture, its stderr copy, that dump
//! and the PyTorch snapshot the program wrote (`--torch-snapshot`).

use super::diagnose::apply_env;
use memwatch_agent::CaptureFileSink;
use memwatch_analysis::capture::{CaptureFold, Folded, GaveUp, Loaded, ReportOptions, WireSize};
use memwatch_analysis::doctor::{
    self, evidence::ALLOCATOR_ENV, CaptureEvidence, Diagnosis, Evidence, LogEvidence,
};
use memwatch_analysis::live::LiveHistory;
use memwatch_wire::{Event, Record};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Capture tags that record the run's allocator settings: `env` (recorded) and
/// `env.NAME=VALUE` for each setting present, including the user's own `XLA_FLAGS`.
pub fn env_tags() -> Vec<(String, String)> {
    let mut tags = vec![("env".to_string(), "recorded".to_string())];
    for k in ALLOCATOR_ENV.iter().copied().chain(["XLA_FLAGS"]) {
        if let Some(v) = std::env::var_os(k) {
            tags.push((format!("env.{k}"), v.to_string_lossy().into_owned()));
        }
    }
    tags
}

/// How the command ended, for a later diagnosis of the capture file.
pub fn exit_tags(end: &super::run_child::ChildEnd) -> Vec<(String, String)> {
    use memwatch_analysis::doctor::evidence::{COMMAND_EXIT_TAG, COMMAND_SIGNAL_TAG};
    let mut tags = Vec::new();
    if let Some(c) = end.exit_code {
        tags.push((COMMAND_EXIT_TAG.to_string(), c.to_string()));
    }
    if let Some(s) = end.signal {
        tags.push((COMMAND_SIGNAL_TAG.to_string(), s.to_string()));
    }
    tags
}

/// Where the run's XLA dump goes.
pub struct XlaDump {
    pub dir: PathBuf,
    /// memwatch made it and removes it after the diagnosis.
    pub temporary: bool,
}

impl XlaDump {
    /// The dump for this run and the `XLA_FLAGS` the command gets (`None`: unchanged):
    /// the user's own `--xla_dump_to` is used as it is; else `dir` (from `--xla-dump`) or
    /// a new temporary folder, appended to the user's flags.
    pub fn plan(dir: Option<&Path>, off: bool) -> (Option<XlaDump>, Option<OsString>) {
        let user = std::env::var("XLA_FLAGS").unwrap_or_default();
        if let Some(d) = user
            .split_whitespace()
            .find_map(|w| w.strip_prefix("--xla_dump_to="))
        {
            return (
                Some(XlaDump {
                    dir: PathBuf::from(d),
                    temporary: false,
                }),
                None,
            );
        }
        if off {
            return (None, None);
        }
        let (dir, temporary) = match dir {
            Some(d) => (d.to_path_buf(), false),
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                (
                    std::env::temp_dir()
                        .join(format!("memwatch-xla-dump-{}-{nanos}", std::process::id())),
                    true,
                )
            }
        };
        let mut flags = OsString::from(user.trim());
        if !flags.is_empty() {
            flags.push(" ");
        }
        flags.push(format!(
            "--xla_dump_to={} --xla_dump_hlo_as_text",
            dir.display()
        ));
        (Some(XlaDump { dir, temporary }), Some(flags))
    }

    /// Removes a temporary dump.
    pub fn cleanup(&self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Memory the fold may hold, as a share of the machine's: past it the fold gives up and
/// the capture is read back after the command ends (which needs as much again).
const FOLD_MEMORY_SHARE: u64 = 8;

/// Bytes the fold holds per event, about (its compact event, its share of the
/// allocations' lifetimes, what waits to be folded).
const FOLD_BYTES_PER_EVENT: u64 = 96;

/// Emptied events buffers kept for the next frames' copies (each at most a frame's
/// events: a frame is at most `memwatch_wire::MAX_FRAME_LEN` bytes on the wire).
const SPARE_BUFFERS: usize = 4;

/// Events that may wait for the fold's thread, as a share of those the fold may hold:
/// past it the fold stops rather than the receiver waiting for it.
const QUEUE_SHARE: usize = 2;

/// The capture folded on a thread of its own while the command runs, from the frames
/// the capture sink writes (`memwatch_analysis::capture::fold`).
pub struct RunFold {
    /// The fold, and the CPU time its thread used taking in the frames.
    thread: std::thread::JoinHandle<(CaptureFold, std::time::Duration)>,
    /// The fold's thread was more events behind the capture than the fold may hold.
    fell_behind: Arc<AtomicBool>,
}

/// Events in a record (what the fold's queue is bounded by; other records count 1).
fn events_in(record: &Record) -> usize {
    match record {
        Record::Events(events) => events.len().max(1),
        _ => 1,
    }
}

/// Why there is no fold to use.
pub enum NoFold {
    GaveUp(GaveUp),
    /// The fold's thread fell further behind the capture than the fold may hold.
    FellBehind,
    /// The fold's thread could not start, or ended early (a bug: it panicked).
    Failed,
}

impl std::fmt::Display for NoFold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::GaveUp(why) => write!(f, "{why}"),
            Self::FellBehind => write!(f, "the fold fell too far behind the capture"),
            Self::Failed => write!(f, "the fold's thread failed"),
        }
    }
}

impl RunFold {
    /// Starts folding every frame `sink` writes from now on; the capture will be at
    /// `path` (the report names it). `None` when the thread cannot start.
    pub fn start(sink: &CaptureFileSink, path: &Path, opts: &ReportOptions) -> Option<Self> {
        // SAFETY: sysconf only reads system configuration.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let memory = (pages.max(0) as u64).saturating_mul(page.max(0) as u64);
        let max_events = (memory / FOLD_MEMORY_SHARE / FOLD_BYTES_PER_EVENT) as usize;
        let mut fold = CaptureFold::new(path, opts, max_events);
        let (tx, rx) = std::sync::mpsc::channel::<(Record, WireSize)>();
        // Events handed over and not yet taken by the fold's thread: the queue's bound.
        let queued = Arc::new(AtomicUsize::new(0));
        let fell_behind = Arc::new(AtomicBool::new(false));
        let taken = queued.clone();
        let max_queued = max_events / QUEUE_SHARE;
        // Events buffers the fold took in go back to the observer for the next frames.
        let (give_back, spare) = std::sync::mpsc::sync_channel::<Vec<Event>>(SPARE_BUFFERS);
        let thread = std::thread::Builder::new()
            .name("memwatch-fold".into())
            .spawn(move || {
                // Ends when the sink drops the observer (it finished, or failed).
                for (record, size) in rx {
                    fold.frame(&record, size);
                    taken.fetch_sub(events_in(&record), Ordering::Relaxed);
                    if let Record::Events(mut events) = record {
                        events.clear();
                        let _ = give_back.try_send(events);
                    }
                }
                (fold, thread_cpu_time())
            })
            .ok()?;
        // Under the sink's lock: a copy of the record, and the frames' sizes. The
        // receiver never waits for the fold: past the bound the fold stops (its queue is
        // dropped) and the capture is read back after the command ends.
        let behind = fell_behind.clone();
        let mut tx = Some(tx);
        sink.observe(Box::new(move |record, bytes| {
            let Some(sender) = &tx else {
                return;
            };
            let n = events_in(record);
            if queued.fetch_add(n, Ordering::Relaxed) + n > max_queued {
                behind.store(true, Ordering::Relaxed);
                tx = None;
                return;
            }
            let copy = match record {
                // Into a buffer the fold is done with: its pages are in place already
                // (a fresh one of a large frame is zeroed by the kernel page by page).
                Record::Events(events) => {
                    let mut buf = spare.try_recv().unwrap_or_default();
                    buf.extend_from_slice(events);
                    Record::Events(buf)
                }
                other => other.clone(),
            };
            let _ = sender.send((copy, WireSize::of(bytes)));
        }));
        Some(Self {
            thread,
            fell_behind,
        })
    }

    /// Waits for the fold to take in the last frame (call after the sink finished) and
    /// folds the rest. Also says how long the wait was and what the fold's thread cost.
    pub fn finish(self) -> Result<(Folded, FoldTimes), NoFold> {
        let waited = std::time::Instant::now();
        let (fold, thread_cpu) = self.thread.join().map_err(|_| NoFold::Failed)?;
        let waited = waited.elapsed();
        if self.fell_behind.load(Ordering::Relaxed) {
            return Err(NoFold::FellBehind);
        }
        let times = FoldTimes { waited, thread_cpu };
        Ok((fold.finish().map_err(NoFold::GaveUp)?, times))
    }
}

/// What finishing a [`RunFold`] waited for, and what its thread cost (for
/// `MEMWATCH_RUN_TIMING`).
pub struct FoldTimes {
    /// The wait for the fold's thread to take in the frames still queued for it.
    pub waited: std::time::Duration,
    /// CPU time (user and system) the fold's thread used from its start.
    pub thread_cpu: std::time::Duration,
}

/// CPU time the calling thread used so far (zero where it cannot be read).
fn thread_cpu_time() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Diagnoses the finished run from its folded capture (events in time order, and the
/// fold's live set history), its stderr copy, its XLA dump and its PyTorch snapshot.
pub fn diagnose_folded(
    loaded: Loaded,
    history: LiveHistory,
    stderr_copy: &Path,
    dump: Option<&XlaDump>,
    snapshot: Option<&Path>,
    exit_code: Option<i32>,
) -> Diagnosis {
    let cap = CaptureEvidence::from_folded(loaded, history);
    diagnose_capture(Some(cap), Some(stderr_copy), dump, snapshot, exit_code)
}

/// Diagnoses the finished run and computes its report: the capture's events are sorted
/// once, then the diagnosis and the report read them on two threads (the report from a
/// copy, the two use the machine's cores at once).
pub fn diagnose_and_report(
    loaded: Loaded,
    stderr_copy: &Path,
    dump: Option<&XlaDump>,
    snapshot: Option<&Path>,
    exit_code: Option<i32>,
    report: impl FnOnce(Loaded) -> memwatch_analysis::capture::CaptureReport + Send,
) -> (Diagnosis, memwatch_analysis::capture::CaptureReport) {
    let cap = CaptureEvidence::from_loaded(loaded);
    let copy = cap.loaded.clone();
    std::thread::scope(|s| {
        let doctor =
            s.spawn(|| diagnose_capture(Some(cap), Some(stderr_copy), dump, snapshot, exit_code));
        let r = report(copy);
        let d = doctor.join().unwrap_or_else(|_| {
            diagnose_capture(None, Some(stderr_copy), dump, snapshot, exit_code)
        });
        (d, r)
    })
}

/// Diagnoses the finished run (without a capture: from its stderr alone).
pub fn diagnose(
    stderr_copy: Option<&Path>,
    dump: Option<&XlaDump>,
    snapshot: Option<&Path>,
    exit_code: Option<i32>,
) -> Diagnosis {
    diagnose_capture(None, stderr_copy, dump, snapshot, exit_code)
}

/// Evidence that cannot be read (a dump the program never wrote, a stderr copy that is
/// not text) is left out and named by the diagnosis as missing; a snapshot the program
/// did not write, or that cannot be read, is said on stderr.
/// `exit_code`: the command's own exit status, as `memwatch run` saw it (it decides
/// whether a failure only a log states ended the run).
fn diagnose_capture(
    capture: Option<CaptureEvidence>,
    stderr_copy: Option<&Path>,
    dump: Option<&XlaDump>,
    snapshot: Option<&Path>,
    exit_code: Option<i32>,
) -> Diagnosis {
    let mut ev = Evidence {
        capture,
        ..Evidence::default()
    };
    if let Some(p) = stderr_copy {
        let nonempty = std::fs::metadata(p).is_ok_and(|m| m.len() > 0);
        if nonempty {
            ev.log = LogEvidence::read(&[p.to_path_buf()]).ok();
        }
    }
    if let Some(d) = dump.filter(|d| d.dir.is_dir()) {
        ev.dumps = memwatch_analysis::doctor::dumps::read_dumps(&d.dir).unwrap_or_default();
    }
    if let Some(p) = snapshot {
        match doctor::snapshot::framework_states(p) {
            Ok(states) => ev.framework_states = states,
            Err(e) if !p.exists() => eprintln!(
                "memwatch: --torch-snapshot {}: the command did not write it ({e})",
                p.display()
            ),
            Err(e) => eprintln!("memwatch: --torch-snapshot: {e}"),
        }
    }
    apply_env(&mut ev, &[]);
    doctor::evidence::add_capture_samples(&mut ev);
    if exit_code.is_some() {
        ev.run.exit_code = exit_code;
    }
    doctor::diagnose(&ev)
}
