//! `memwatch run -- CMD ARGS...`: capture every GPU allocation of CMD and all its
//! processes into one `.mwcap`, then print a short report.
//!
//! Owns the orchestration: find the preload shim, start the receiver (memwatch-agent)
//! on a private socket, spawn CMD with the shim preloaded, forward SIGINT/SIGTERM/
//! SIGHUP/SIGQUIT that were sent to memwatch itself (a terminal's Ctrl-C already reaches
//! CMD directly), wait for CMD and then, bounded, for its processes' connections, and
//! exit with CMD's status (128+N when a signal N killed it). It does not interpret
//! events (memwatch-analysis) or read sockets (memwatch-agent).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use memwatch_agent::sampler::capture::{self as capture_sampling, CaptureSampling};
use memwatch_agent::{CaptureFileSink, ConnId, FrameSink, Receiver};
use memwatch_analysis::capture::{analyze, ReportOptions};
use memwatch_wire::{encode_record, Marker, Record};

use super::import::StoreArgs;
use super::report::{load_with_progress, print_damage};
use super::run_child::{
    become_subreaper, install_forwarding, interrupted, reap_left_behind, set_child, ChildEnd,
};
use super::run_output::{emit_json, print_verdicts, summary};
use super::Outcome;

/// File name of the LD_PRELOAD shim.
pub const PRELOAD_NAME: &str = "libmemwatch_preload.so";

const AFTER_HELP: &str = "\
Examples:
  memwatch run -- python3 train.py --steps 10
  memwatch run --out step.mwcap --tag run=baseline -- ./launcher --workers 8
  memwatch run --quiet -- ./bench && memwatch report memwatch-bench-*.mwcap

Every process CMD starts (fork, exec, launcher workers) is captured into the one file.
The default file is memwatch-<cmd>-<UTC time>.mwcap in the current directory. memwatch
exits with CMD's exit status (128+N if signal N killed it; 127 if CMD was not found, 126
if it could not be run) and prints a short report on stderr; `memwatch report FILE` shows everything. The shim is found via $MEMWATCH_PRELOAD,
next to the memwatch executable, or in ../lib/memwatch/ relative to it.
Tags are recorded in the capture as `memwatch.tag K=V` markers, and so are the allocator
settings in the environment (XLA_PYTHON_CLIENT_ALLOCATOR, XLA_CLIENT_MEM_FRACTION,
PYTORCH_CUDA_ALLOC_CONF, XLA_FLAGS, …) as `env.NAME` tags. On a machine with an amdgpu
card the driver's VRAM/GTT counters (/sys/class/drm/card*/device/mem_info_*,
$MEMWATCH_SYSFS_ROOT instead of /sys) are read into the capture at the start, once a
second and at the end, for the report's APU section. Every GPU and the processes on it
(NVML, ROCm SMI) are read into the capture every 100 ms and at each failed allocation, the
command's processes marked (`memwatch report` shows them; without NVML or an AMD GPU
memwatch says so after the command's output and records why).

The command's stderr is passed through unchanged (a terminal stays a terminal: memwatch
gives the command a pseudo-terminal of the same size when its own stderr is one) and
copied to <capture>.stderr.log. When the command ran out of memory (a failed allocation
or execute, an out-of-memory message, its exit status) or ran past a limit, the OOM
doctor's verdict follows the report: what failed, when, who asked, why, and the fix
(checked where memwatch can) — the same as `memwatch diagnose CAPTURE STDERR --xla-dump
DIR` later. For JAX/XLA programs the XLA dump makes the HLO join possible: by default a
temporary one (see --xla-dump).";

/// Arguments of `memwatch run`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct RunArgs {
    /// Capture file to write; an existing file is overwritten [default:
    /// memwatch-<cmd>-<UTC time>.mwcap].
    #[arg(long, short, value_name = "FILE.mwcap")]
    pub out: Option<PathBuf>,
    /// Print no report (errors and warnings still go to stderr).
    #[arg(long, short)]
    pub quiet: bool,
    /// Print the report as one JSON document on stdout when CMD ends. CMD writes to the
    /// same stdout: the document is the last line (`| tail -n 1`) when CMD's output ends
    /// with a newline; --json-out keeps them apart.
    #[arg(long)]
    pub json: bool,
    /// Write the JSON report to FILE instead (CMD's stdout stays CMD's alone).
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
    /// Label the capture (repeatable), e.g. --tag run=baseline.
    #[arg(long = "tag", value_name = "K=V", value_parser = parse_tag)]
    pub tags: Vec<(String, String)>,
    /// After CMD exits, how long to wait for processes it left behind (memwatch is their
    /// subreaper) to exit and close their connections, in seconds; memwatch says how many
    /// were still running when it stopped.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS", value_parser = parse_drain_timeout)]
    pub drain_timeout: f64,
    // --db / --daemon / --token: also store the capture when CMD ends.
    #[command(flatten)]
    pub store: StoreArgs,
    /// How many largest allocations per device the JSON report lists.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Dump the XLA program to DIR and keep it (memwatch appends `--xla_dump_to=DIR
    /// --xla_dump_hlo_as_text` to the command's XLA_FLAGS). Without it memwatch dumps to a
    /// temporary folder for the diagnosis and removes it afterwards; a `--xla_dump_to` in
    /// your own XLA_FLAGS is used as it is. Programs without XLA ignore the flags.
    #[arg(long, value_name = "DIR", conflicts_with = "no_xla_dump")]
    pub xla_dump: Option<PathBuf>,
    /// Leave XLA_FLAGS as it is (no dump: the diagnosis cannot name HLO instructions).
    #[arg(long)]
    pub no_xla_dump: bool,
    /// A PyTorch memory snapshot the command writes
    /// (`torch.cuda.memory._record_memory_history()` then `_dump_snapshot(FILE)`, e.g. in
    /// an `except torch.OutOfMemoryError`): read after the command ends, it gives the
    /// diagnosis the loop's growth per step, the largest free block and the Python frame
    /// that asked. memwatch does not turn the recording on (it slows the program).
    #[arg(long, value_name = "FILE")]
    pub torch_snapshot: Option<PathBuf>,
    /// Where to keep the copy of the command's stderr; an existing file is overwritten
    /// [default: beside the capture, <capture>.stderr.log].
    #[arg(long, value_name = "FILE")]
    pub stderr_log: Option<PathBuf>,
    /// The command to run, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

fn parse_tag(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("tag {s:?} is not of the form KEY=VALUE")),
    }
}

/// Finds the shim: $MEMWATCH_PRELOAD, next to the executable, ../lib/memwatch/.
pub fn find_preload() -> Result<PathBuf> {
    let mut looked = Vec::new();
    if let Some(p) = std::env::var_os("MEMWATCH_PRELOAD") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!(
            "MEMWATCH_PRELOAD={} is not a file (unset it to search next to memwatch)",
            p.display()
        );
    }
    looked.push("$MEMWATCH_PRELOAD (unset)".to_string());
    let exe = std::env::current_exe().context("cannot locate the memwatch executable")?;
    if let Some(dir) = exe.parent() {
        for cand in [
            dir.join(PRELOAD_NAME),
            dir.join("../lib/memwatch").join(PRELOAD_NAME),
        ] {
            if cand.is_file() {
                return Ok(cand);
            }
            looked.push(cand.display().to_string());
        }
    }
    bail!(
        "cannot find {PRELOAD_NAME}; looked in: {}. Build it (cargo build -p memwatch-preload) \
         or set MEMWATCH_PRELOAD=/path/to/{PRELOAD_NAME}",
        looked.join(", ")
    )
}

/// `memwatch-<cmd>-<YYYYmmddTHHMMSSZ>.mwcap`, made unique in the current directory.
fn default_out(command: &OsString) -> PathBuf {
    let name: String = Path::new(command)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = super::report::civil_from_days((now / 86_400) as i64);
    let rem = now % 86_400;
    let stamp = format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    let base = format!("memwatch-{name}-{stamp}");
    let mut path = PathBuf::from(format!("{base}.mwcap"));
    let mut n = 1;
    while path.exists() {
        path = PathBuf::from(format!("{base}-{n}.mwcap"));
        n += 1;
    }
    path
}

/// `--drain-timeout`: seconds, finite and not negative.
fn parse_drain_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=86_400.0 * 365.0).contains(&v) => Ok(v),
        Ok(_) => Err("must be a number of seconds from 0 to one year".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs `memwatch run`.
pub fn run(args: RunArgs) -> Result<Outcome> {
    let preload = find_preload()?;
    // A store that cannot take the capture is found now, before CMD runs for hours.
    args.store.check()?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_out(&args.command[0]));
    // A path that was there before (a file, a link, a device such as /dev/null) is never
    // removed, whatever happens to CMD.
    if let Some(j) = &args.json_out {
        if super::out_file::same_file(j, &out) {
            bail!(
                "--json-out {} is the capture file (--out): give the report its own file",
                j.display()
            );
        }
        // Writable? Found now, not after CMD ran. (Written when CMD ends.)
        memwatch_agent::out_pipe::open(j, true)
            .with_context(|| format!("--json-out {}: cannot write", j.display()))?;
    }
    // An existing regular file (also behind a symlink) is replaced only once CMD ran:
    // the capture is written beside it and renamed over it at the end.
    let capture_out = super::out_file::CaptureOut::new(&out);
    let sink = Arc::new(CaptureFileSink::create(capture_out.write_path())?);
    // The report and the doctor's live set are folded while CMD runs (a capture that is
    // not a file, e.g. /dev/null, gets no report).
    let fold = out
        .metadata()
        .map_or(true, |m| m.is_file())
        .then(|| super::run_doctor::RunFold::start(&sink, &out, &ReportOptions { top: args.top }))
        .flatten();
    for (k, v) in &args.tags {
        write_tag(&sink, k, v)?;
    }
    // Every device and its processes, every 100 ms and at each failed allocation (the
    // tap in front of the capture sink fires a reading).
    let mut readings = super::device_readings::CaptureReadings::start(&sink);
    let receiver = Receiver::start(None, readings.tap(sink.clone() as Arc<dyn FrameSink>))?;
    // amdgpu VRAM/GTT readings next to the shims' events (APU accounting in the report).
    let sampling = CaptureSampling::start(
        &capture_sampling::sysfs_root(),
        sink.clone() as Arc<dyn FrameSink>,
        Duration::from_secs(1),
    );
    let (xla_dump, xla_flags) =
        super::run_doctor::XlaDump::plan(args.xla_dump.as_deref(), args.no_xla_dump);
    // The stderr copy beside the capture (a capture that is not a file gets a temporary
    // copy for the diagnosis).
    let (stderr_path, stderr_temporary) = match &args.stderr_log {
        Some(p) => (p.clone(), false),
        None if out.metadata().map_or(true, |m| m.is_file()) => {
            (out.with_extension("stderr.log"), false)
        }
        None => (
            std::env::temp_dir().join(format!("memwatch-stderr-{}.log", std::process::id())),
            true,
        ),
    };
    // A file already there is overwritten once CMD runs (like the capture), but never
    // removed when CMD cannot be started.
    let stderr_existed = stderr_path.exists();
    let tee = super::run_stderr::Tee::new(&stderr_path)?;

    let mut ld_preload = preload.clone().into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        ld_preload.push(":");
        ld_preload.push(existing);
    }
    install_forwarding()?;
    become_subreaper();
    let started = Instant::now();
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("LD_PRELOAD", &ld_preload)
        .env("MEMWATCH_SINK", receiver.sink_address())
        .stderr(tee.stdio()?);
    if let Some(f) = &xla_flags {
        command.env("XLA_FLAGS", f);
    }
    let spawned = command.spawn();
    drop(command);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            // Nothing ran: leave no capture behind (but never remove what was there).
            drop(sampling);
            readings.stop();
            receiver.shutdown();
            let _ = sink.finish();
            capture_out.discard();
            // The shell's codes: 127 not found, 126 found but not runnable.
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                _ => 126,
            };
            eprintln!(
                "memwatch: error: cannot run {}: {e}",
                args.command[0].to_string_lossy()
            );
            if !stderr_existed {
                let _ = std::fs::remove_file(&stderr_path);
            }
            if let Some(d) = &xla_dump {
                d.cleanup();
            }
            return Ok(Outcome::Code(code));
        }
    };
    // CMD and what it starts; memwatch itself for what CMD leaves behind (reparented to
    // memwatch, its subreaper).
    readings.watch(child.id());
    readings.watch(std::process::id());
    let stderr_copy = tee.start(&mut child)?;
    set_child(child.id() as i32);
    let status = child.wait();
    set_child(0);
    let status = status.context("cannot wait for the command")?;
    let end = ChildEnd::of(status);

    // Processes CMD left behind (reparented to us: we are their subreaper) may still
    // hold connections or not have opened one yet; give them a bounded time.
    let cmd_ended = Instant::now();
    let deadline = cmd_ended + Duration::from_secs_f64(args.drain_timeout.max(0.0));
    let mut idle = false;
    let mut left_behind = reap_left_behind();
    while !interrupted() {
        let now = Instant::now();
        let slice = deadline
            .saturating_duration_since(now)
            .min(Duration::from_millis(100));
        let connections_idle = receiver.wait_idle(slice);
        left_behind = reap_left_behind();
        if connections_idle && left_behind.is_empty() {
            idle = true;
            break;
        }
        if connections_idle {
            // Only processes that have not connected (yet): poll, do not spin.
            std::thread::sleep(slice.min(Duration::from_millis(20)));
        }
        if now >= deadline {
            break;
        }
    }
    let still_open = receiver.open_connections().max(left_behind.len());
    let (stderr_path, stderr_complete) = stderr_copy.finish(deadline);
    let waited = cmd_ended.elapsed().as_secs_f64();
    let stats = receiver.shutdown();
    if let Some(s) = sampling {
        s.stop();
    }
    readings.stop();
    if !args.quiet {
        // After the command's own stderr, which comes first and unchanged.
        readings.say_off();
    }
    // The allocator settings, for the diagnosis (now or later), and why there are no
    // device readings, when a process of the command reached the shim: a capture of
    // nothing stays a capture of nothing.
    if !stats.connections.is_empty() {
        for (k, v) in super::run_doctor::env_tags()
            .into_iter()
            .chain(super::run_doctor::exit_tags(&end))
            .chain(readings.off_tag().map(|(k, v)| (k.to_string(), v)))
        {
            if let Err(e) = write_tag(&sink, &k, &v) {
                eprintln!("memwatch: error: {}", super::one_line(&e));
            }
        }
    }
    // From here on CMD's status is what memwatch exits with: a capture that could not be
    // written is said loudly, never turned into another exit status. The capture is
    // flushed, synced and put in place on a thread of its own while the fold takes in the
    // frames still queued for it (the report needs the fold, not the synced file); nothing
    // is said about either until the capture is on disk.
    let finishing = Instant::now();
    let (written, folded) = std::thread::scope(|s| {
        let writing = s.spawn(|| {
            let written = sink
                .finish()
                .map_err(|e| format!("capture {} is incomplete: {e}", out.display()))?;
            capture_out.commit()?;
            Ok::<_, String>((written, cmd_ended.elapsed()))
        });
        let folded = fold.map(|f| (f.finish(), finishing.elapsed()));
        let written = writing.join().unwrap_or_else(|_| {
            Err(format!(
                "capture {} is incomplete: its writer failed",
                out.display()
            ))
        });
        (written, folded)
    });
    let (written, written_after) = match written {
        Ok(w) => w,
        Err(e) => {
            eprintln!("memwatch: error: {e}");
            return Ok(Outcome::Code(end.status));
        }
    };
    let timing = std::env::var_os("MEMWATCH_RUN_TIMING").is_some_and(|v| v == "1");
    if timing {
        eprintln!(
            "memwatch: after the command: connections drained {waited:.3} s, capture written \
             and synced {:.3} s",
            written_after.as_secs_f64()
        );
    }
    if !idle && still_open > 0 {
        let pids = if left_behind.is_empty() {
            String::new()
        } else {
            let shown: Vec<String> = left_behind.iter().take(10).map(i32::to_string).collect();
            format!(
                " (pid{} {}{})",
                if left_behind.len() == 1 { "" } else { "s" },
                shown.join(", "),
                if left_behind.len() > 10 { ", …" } else { "" }
            )
        };
        eprintln!(
            "memwatch: {still_open} process(es) still running {waited:.1} s after the command \
             ended{pids}; their capture stops here"
        );
    }

    let post = PostExit {
        stderr_path: &stderr_path,
        stderr_temporary,
        xla_dump: xla_dump.as_ref(),
        cmd_ended,
    };
    if !out.metadata().is_ok_and(|m| m.is_file()) {
        // /dev/null, a pipe, a device: nothing to read back for a report; the stderr
        // copy alone for the diagnosis.
        let diagnosis = super::run_doctor::diagnose(
            Some(&stderr_path),
            None,
            args.torch_snapshot.as_deref(),
            end.exit_code,
        );
        if args.json || args.json_out.is_some() {
            if let Err(e) = emit_json(&args, &out, &end, &stats, None, &post, Some(diagnosis)) {
                eprintln!("memwatch: error: {}", super::one_line(&e));
            }
        } else if !args.quiet {
            eprintln!(
                "memwatch: command exited with status {} after {:.1} s; capture written to {} \
                 ({} events), not a file: no report",
                end.status,
                started.elapsed().as_secs_f64(),
                out.display(),
                written.events
            );
            print_verdicts(&diagnosis);
        }
        post.done();
        return Ok(Outcome::Code(end.status));
    }
    let phase = Instant::now();
    let (folded, fold_s) = match folded {
        Some((f, took)) => (f, took.as_secs_f64()),
        None => (Err(super::run_doctor::NoFold::Failed), 0.0),
    };
    let (diagnosis, report) = match folded {
        Ok((f, caught_up)) => {
            print_damage(&f.loaded);
            let phase = Instant::now();
            let diagnosis = super::run_doctor::diagnose_folded(
                f.loaded,
                f.history,
                &stderr_path,
                xla_dump.as_ref(),
                args.torch_snapshot.as_deref(),
                end.exit_code,
            );
            if timing {
                eprintln!(
                    "memwatch: after the command: capture folded while written ({} events, \
                     {:.3} s of the fold thread's CPU; the frames still queued taken in \
                     {:.3} s, then {} events folded, {} folded again for {} late ones) and \
                     its report finished {fold_s:.3} s, diagnosis {:.3} s",
                    f.stats.events,
                    caught_up.thread_cpu.as_secs_f64(),
                    caught_up.waited.as_secs_f64(),
                    f.stats.folded_at_end,
                    f.stats.refolded,
                    f.stats.late_events,
                    phase.elapsed().as_secs_f64()
                );
            }
            (diagnosis, f.report)
        }
        Err(why) => {
            let loaded = match load_with_progress(&out) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("memwatch: error: {}", super::one_line(&e));
                    post.done();
                    return Ok(Outcome::Code(end.status));
                }
            };
            print_damage(&loaded);
            let load_s = phase.elapsed().as_secs_f64();
            let phase = Instant::now();
            let top = args.top;
            let (diagnosis, report) = super::run_doctor::diagnose_and_report(
                loaded,
                &stderr_path,
                xla_dump.as_ref(),
                args.torch_snapshot.as_deref(),
                end.exit_code,
                move |l| analyze(l, &ReportOptions { top }),
            );
            if timing {
                eprintln!(
                    "memwatch: after the command: capture read {load_s:.3} s (not folded while \
                     written: {why}), diagnosis and report {:.3} s",
                    phase.elapsed().as_secs_f64()
                );
            }
            (diagnosis, report)
        }
    };
    super::run_handoff::store_and_attach(
        &args.store,
        &out,
        run_key(&args),
        &diagnosis,
        super::run_child::interrupted_flag(),
    );
    if args.json || args.json_out.is_some() {
        if let Err(e) = emit_json(
            &args,
            &out,
            &end,
            &stats,
            Some(report),
            &post,
            Some(diagnosis),
        ) {
            eprintln!("memwatch: error: {}", super::one_line(&e));
        }
    } else if !args.quiet {
        eprint!(
            "{}",
            summary(
                &out,
                &end,
                started.elapsed(),
                &stats,
                written.events,
                &report
            )
        );
        if !post.stderr_temporary {
            eprintln!(
                "  stderr copy: {}{}",
                stderr_path.display(),
                if stderr_complete {
                    ""
                } else {
                    " (processes left running still write to it: it stops here)"
                }
            );
        }
        print_verdicts(&diagnosis);
    }
    post.done();
    Ok(Outcome::Code(end.status))
}

/// What is left to do after the command ended: the stderr copy and XLA dump to clean
/// up, and when it ended (for `MEMWATCH_RUN_TIMING`).
pub struct PostExit<'a> {
    pub stderr_path: &'a Path,
    pub stderr_temporary: bool,
    xla_dump: Option<&'a super::run_doctor::XlaDump>,
    cmd_ended: Instant,
}

impl PostExit<'_> {
    /// Removes what memwatch made only for the diagnosis; with `MEMWATCH_RUN_TIMING=1`
    /// says how long after the command's exit the report and verdict were done.
    fn done(&self) {
        if self.stderr_temporary {
            let _ = std::fs::remove_file(self.stderr_path);
        }
        if let Some(d) = self.xla_dump {
            d.cleanup();
        }
        if std::env::var_os("MEMWATCH_RUN_TIMING").is_some_and(|v| v == "1") {
            eprintln!(
                "memwatch: report and verdict done {:.3} s after the command exited",
                self.cmd_ended.elapsed().as_secs_f64()
            );
        }
    }
}

/// The run key a `--tag run=KEY` names (None: import's default).
fn run_key(args: &RunArgs) -> Option<String> {
    args.tags
        .iter()
        .find(|(k, _)| k == "run")
        .map(|(_, v)| v.clone())
}

fn write_tag(sink: &CaptureFileSink, k: &str, v: &str) -> Result<()> {
    let record = Record::Marker(Marker {
        pid: std::process::id(),
        tid: 0,
        // The time the tag was written (before CMD starts), on the clock the shims stamp
        // events with: stores take a run's start from its first record, and a 0 here made
        // every time of a `run --tag … --db` run count from the machine's boot.
        ts_ns: monotonic_now_ns(),
        device: -1,
        text: format!("memwatch.tag {k}={v}"),
    });
    let mut bytes = Vec::new();
    encode_record(&record, &mut bytes).context("cannot encode tag")?;
    sink.frame(ConnId(0), &record, &bytes)
        .map_err(|e| anyhow::anyhow!("{}", e.0))
}

/// CLOCK_MONOTONIC now, in ns (the wire format's clock).
fn monotonic_now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}
