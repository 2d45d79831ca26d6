//! `memwatch report CAPTURE`: per-process, per-device memory statistics of a capture
//! (human tables or `--json`), or its allocation trace as JSON lines (`--trace`).
//! A PyTorch memory snapshot goes to `report_snapshot`.
//!
//! Owns argument handling and presentation; the numbers come from
//! `memwatch_analysis::capture`. Also used by `memwatch run` for its closing summary.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use memwatch_analysis::apu::{Agreement, ApuReport};
use memwatch_analysis::capture::{
    analyze_with, load_path, write_trace, CaptureReport, Loaded, ProcessReport, ReportOptions,
    TraceOptions,
};

use super::Outcome;

const AFTER_HELP: &str = "\
Examples:
  memwatch report run.mwcap                 tables per process and device
  memwatch report run.mwcap --json | jq '.processes[].devices[].peak_bytes'
  memwatch report run.mwcap --top 20        20 largest allocations per device
  memwatch report run.mwcap --trace --device 0 > dev0.jsonl    input for `memwatch replay`
  MEMWATCH_BACKTRACE_EVERY_BYTES=1048576 memwatch run --out run.mwcap -- ./app
  memwatch report run.mwcap                 largest allocations / leaks with their stacks
  memwatch report snapshot.pickle           a PyTorch memory snapshot (_dump_snapshot)
  memwatch report before.pickle --compare after.pickle

  nvidia-smi --query-compute-apps=timestamp,gpu_bus_id,pid,used_memory \
      --format=csv,noheader,nounits -lms 200 > apps.csv &   (while the run runs)
  memwatch report run.mwcap --nvsmi-apps apps.csv   NVML's per-process figure per device

A PyTorch memory snapshot (torch.cuda.memory._record_memory_history() then
_dump_snapshot(), any size: it is streamed) shows, per device, memory_allocated() and
memory_reserved() at the dump, their peaks and a timeline, the Python lines and blocks
holding memory at the peak, and every OOM with the allocator's state (reserved but
unallocated bytes, the largest free block of the request's pool). The pickle is read as
plain data only: one that would import or call anything is refused (exit 2).

Times are since the capture's start (the first process's start). Device memory counts
device, managed, stream-ordered pool and VMM physical allocations; pinned host memory is
shown separately. A process that exec'd shows once per image (pid 123 (exec #1: ...)):
what the old image still held was released by the exec, not leaked. Sampled stacks
(MEMWATCH_BACKTRACE_EVERY_BYTES=N when the capture was taken) are symbolized from the
ELF symbol tables of the files on this machine. Allocation calls are timed only with
MEMWATCH_ALLOC_DURATIONS=1 (else -). A damaged capture (cut off by a crash) is
reported up to the damage, and the damage is listed on stderr. A file that is not a
capture exits with status 2.

Per device (JSON devices): each process's devices side by side — the driver-level peak
and what it was made of (framework pool, VMM handles such as NCCL's buffers, cudaMalloc
segments, cuMemAlloc), the framework's own figures where the capture has them (the PJRT
allocator's memory_stats(), live jax.Array bytes; PyTorch reports nothing to the shim:
its memory_reserved() is the cudaMalloc segments), VMM handles imported from another
process (NCCL peer buffers: the exporter's memory), and with --nvsmi-apps what NVML saw
beyond the captured allocations (CUDA context, module code). Devices are ordinals as each
process saw them: under CUDA_VISIBLE_DEVICES two processes' device 0 can be different
GPUs. When one API ran on several devices at once (workers compiling or loading modules
together), the capture-wide table is followed by when (JSON
concurrent_device_stretches; start_monotonic_ns lines them up with a worker's own
CLOCK_MONOTONIC timestamps).

On an APU (an integrated AMD GPU such as Strix Halo: HIP says so, or the amdgpu sysfs
counters show a small VRAM carve-out) the report adds a section per APU device (JSON
`apu`, present only then): the shim's own accounting of hipMalloc, hipHostMalloc,
hipMallocManaged and hipHostRegister by kind, next to what HIP reports and the amdgpu
sysfs VRAM/GTT counters `memwatch run` read during the run (MEMWATCH_SYSFS_ROOT
overrides /sys), whether the counters agree with the shim (on Strix Halo GTT usage is
known not to follow hipMalloc), and any failed request larger than the device could
give: what it asked, what the device could give, the shortfall.";

/// Arguments of `memwatch report`.
#[derive(Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct ReportArgs {
    /// Capture file (.mwcap) written by `memwatch run`, or a PyTorch memory snapshot
    /// (.pickle).
    pub capture: PathBuf,
    /// Compare with this second PyTorch memory snapshot (per device: allocated,
    /// reserved, peaks, OOMs, and bytes per Python line at the peak).
    #[arg(long, value_name = "SNAPSHOT", conflicts_with = "trace")]
    pub compare: Option<PathBuf>,
    /// Print one JSON document on stdout (bytes and ns as integers).
    #[arg(long, conflicts_with = "trace")]
    pub json: bool,
    /// How many largest allocations to list per device.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// List every OOM inside a PJRT execute (default: the first 20 of each process;
    /// `runtime.processes[].ooms_total` counts them all).
    #[arg(long)]
    pub all_ooms: bool,
    /// Print the device allocations as a JSON-lines trace (alloc/free with ids), the
    /// input format of `memwatch replay`.
    #[arg(long)]
    pub trace: bool,
    /// With --trace: only this device ordinal.
    #[arg(
        long,
        requires = "trace",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub device: Option<i32>,
    /// XLA dump directory of the same run: join the PJRT runtime peak and OOMs (see
    /// `memwatch runtime`) to the executables' buffer assignments.
    #[arg(long, value_name = "DIR", conflicts_with = "trace")]
    pub xla_dump: Option<PathBuf>,
    /// NVML's per-process readings of the same run (`nvidia-smi
    /// --query-compute-apps=timestamp,gpu_bus_id,pid,used_memory
    /// --format=csv,noheader,nounits -lms 200 > FILE`): each process's NVML figure next to
    /// its captured live bytes, the difference being what the driver holds outside any
    /// allocation (CUDA context, module code).
    #[arg(long, value_name = "FILE", conflicts_with = "trace")]
    pub nvsmi_apps: Option<PathBuf>,
}

/// Runs `memwatch report`.
pub fn run(args: ReportArgs) -> Result<Outcome> {
    super::fmt::quiet_broken_pipe();
    if super::report_snapshot::is_snapshot(&args.capture)? {
        return super::report_snapshot::run(&args);
    }
    if args.compare.is_some() {
        bail!(
            "{}: --compare compares two PyTorch memory snapshots; this is a capture",
            args.capture.display()
        );
    }
    let loaded = load_with_progress(&args.capture)?;
    print_damage(&loaded);
    if args.trace {
        if let Some(d) = args.device {
            let mut devices: Vec<i32> = loaded.streams.iter().map(|s| s.1).collect();
            devices.sort_unstable();
            devices.dedup();
            if !devices.contains(&d) {
                let have: Vec<String> = devices.iter().map(i32::to_string).collect();
                bail!(
                    "{}: no event of device {d} (devices in the capture: {})",
                    args.capture.display(),
                    if have.is_empty() {
                        "none".to_string()
                    } else {
                        have.join(", ")
                    }
                );
            }
        }
        let stdout = std::io::stdout().lock();
        let summary = write_trace(
            loaded,
            &TraceOptions {
                device: args.device,
            },
            BufWriter::with_capacity(1 << 20, stdout),
        )
        .context("cannot write the trace to stdout")?;
        let streams: Vec<String> = summary
            .streams
            .iter()
            .enumerate()
            .map(|(i, (proc_, dev))| match proc_.image {
                0 => format!("{i}=pid {} device {dev}", proc_.pid),
                n => format!("{i}=pid {} (exec #{n}) device {dev}", proc_.pid),
            })
            .collect();
        eprintln!(
            "memwatch: trace: {} allocs, {} frees; streams: {}",
            summary.allocs,
            summary.frees,
            if streams.is_empty() {
                "none".to_string()
            } else {
                streams.join(", ")
            }
        );
        return Ok(Outcome::Success);
    }
    let apu = memwatch_analysis::apu::analyze(&loaded);
    let samples = match &args.nvsmi_apps {
        Some(p) => memwatch_analysis::nvsmi::read_apps_csv(p)?,
        None => Vec::new(),
    };
    let report = analyze_with(loaded, &ReportOptions { top: args.top }, &samples);
    let runtime = super::runtime::for_report(
        &args.capture,
        args.xla_dump.as_deref(),
        args.top,
        args.all_ooms,
    )?;
    if args.json {
        let mut out = std::io::stdout().lock();
        let mut v = serde_json::to_value(&report).context("cannot encode the report")?;
        if let (Some(r), Some(obj)) = (&runtime, v.as_object_mut()) {
            obj.insert(
                "runtime".into(),
                serde_json::to_value(r).context("cannot encode the runtime report")?,
            );
        }
        if let (Some(a), Some(obj)) = (&apu, v.as_object_mut()) {
            obj.insert(
                "apu".into(),
                serde_json::to_value(a).context("cannot encode the APU report")?,
            );
        }
        serde_json::to_writer(&mut out, &v).context("cannot write JSON to stdout")?;
        writeln!(out).context("cannot write JSON to stdout")?;
    } else {
        out!("{}", render(&report, args.top));
        if let Some(a) = &apu {
            out!("{}", render_apu(a));
        }
        out!(
            "{}",
            super::report_readings::render(&report.device_readings)
        );
        if let Some(r) = &runtime {
            outln!("\nPJRT runtime (allocator statistics, executables; see `memwatch runtime`)");
            super::runtime::print_human(r, false)?;
        }
    }
    Ok(Outcome::Success)
}

/// Loads a capture, with a progress bar on stderr for large files on a terminal.
pub fn load_with_progress(path: &Path) -> Result<Loaded> {
    let len = std::fs::metadata(path)
        .with_context(|| format!("{}: cannot read", path.display()))?
        .len();
    let bar = if len > 64 << 20 {
        let bar = indicatif::ProgressBar::new(len);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("reading {}", path.display()));
        Some(bar)
    } else {
        None
    };
    let loaded = load_path(path, &mut |done| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(loaded?)
}

/// Lists damaged regions on stderr.
pub fn print_damage(loaded: &Loaded) {
    if loaded.damage.is_empty() {
        return;
    }
    let lost: u64 = loaded.damage.iter().map(|d| d.bytes_lost).sum();
    eprintln!(
        "memwatch: warning: {}: damaged capture, {} lost in {} place(s); reporting what was readable:",
        loaded.path.display(),
        bytes(lost),
        loaded.damage.len()
    );
    for d in &loaded.damage {
        eprintln!(
            "  at byte {}: {} ({} bytes skipped)",
            d.offset, d.kind, d.bytes_lost
        );
    }
}

pub use super::fmt::bytes;

/// Durations: `850 ns`, `12.3 µs`, `4.56 ms`, `7.89 s`.
pub fn duration(ns: u64) -> String {
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// `2026-11-21 23:20:01 UTC` from Unix ns.
pub fn utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Left-aligned first column, right-aligned others.
fn table(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = String::from(indent);
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn command_line(p: &ProcessReport) -> String {
    let mut s = p.command.join(" ");
    if s.chars().count() > 80 {
        s = s.chars().take(77).collect::<String>() + "...";
    }
    if s.is_empty() {
        "(command unknown)".into()
    } else {
        s
    }
}

/// The APU section: the shim's accounting by kind, next to what HIP and the driver's
/// counters said, and requests larger than the device could give.
pub fn render_apu(r: &ApuReport) -> String {
    let mut o = String::new();
    for d in &r.devices {
        o.push_str(&format!(
            "\nAPU device {} ({}): unified memory; {}. The shim's accounting is the \
             reference here.\n",
            d.device,
            d.name.as_deref().unwrap_or("name unknown"),
            d.evidence.describe()
        ));
        let opt = |b: Option<u64>| b.map_or_else(|| "-".to_string(), bytes);
        o.push_str(&format!(
            "  HIP reports {}; the OS managed {}",
            opt(d.hip_total_bytes),
            opt(d.host_memory_bytes)
        ));
        match &d.sysfs {
            Some(s) => o.push_str(&format!(
                "; amdgpu sysfs: VRAM carve-out {}, GTT limit {} (hipMalloc can map up to {}), \
                 {} readings\n",
                bytes(s.vram_total_bytes),
                bytes(s.gtt_total_bytes),
                bytes(s.hip_malloc_limit_bytes),
                s.readings
            )),
            None => o.push_str("; no amdgpu sysfs readings\n"),
        }
        let mut rows = vec![vec![
            "kind".to_string(),
            "allocs".into(),
            "peak".into(),
            "live at end".into(),
        ]];
        for k in &d.kinds {
            rows.push(vec![
                k.kind.label().to_string(),
                k.allocs.to_string(),
                bytes(k.peak_bytes),
                bytes(k.live_bytes_at_end),
            ]);
        }
        rows.push(vec![
            format!("all kinds at once (at {})", duration(d.shim_peak_ns)),
            String::new(),
            bytes(d.shim_peak_bytes),
            String::new(),
        ]);
        table(&mut o, "  ", &rows);
        let c = &d.comparison;
        match (c.status, c.at_ns) {
            (Agreement::NotCompared, _) | (_, None) => {
                o.push_str(&format!("  sysfs vs shim: not compared: {}\n", c.message))
            }
            (status, Some(at)) => {
                let verdict = match status {
                    Agreement::SysfsUnder => "DISAGREE (sysfs under-reports)",
                    Agreement::SysfsOver => "DISAGREE (sysfs shows more)",
                    _ => "agree",
                };
                o.push_str(&format!(
                    "  sysfs vs shim at {}: {verdict}: shim {} (+{}), sysfs VRAM {} + GTT {} \
                     ({}): {}\n",
                    duration(at),
                    bytes(c.shim_mapped_bytes),
                    bytes(c.shim_growth_bytes),
                    bytes(c.sysfs_vram_used_bytes),
                    bytes(c.sysfs_gtt_used_bytes),
                    super::fmt::delta(c.sysfs_growth_bytes),
                    c.message
                ));
            }
        }
        for q in &d.oversized_requests {
            o.push_str(&format!(
                "  OVERSIZED REQUEST at {}: {}\n",
                duration(q.ts_ns),
                q.describe()
            ));
        }
    }
    o
}

/// The full human report.
pub fn render(r: &CaptureReport, top: usize) -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "capture {}: {} process(es), {} events, {}",
        r.file,
        r.processes.len(),
        r.events,
        duration(r.duration_ns)
    ));
    if let Some(w) = r.start_wall_unix_ns {
        o.push_str(&format!(", started {}", utc(w)));
    }
    o.push('\n');
    if !r.tags.is_empty() {
        let tags: Vec<String> = r.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        o.push_str(&format!("tags: {}\n", tags.join(" ")));
    }
    if !r.damage.is_empty() {
        let lost: u64 = r.damage.iter().map(|d| d.bytes_lost).sum();
        o.push_str(&format!(
            "DAMAGED: {} lost in {} place(s) (details on stderr)\n",
            bytes(lost),
            r.damage.len()
        ));
    }
    for p in &r.processes {
        o.push('\n');
        let exit = match p.exit_code {
            _ if p.ended_by_exec => {
                "replaced by exec (memory it held was released, not leaked)".to_string()
            }
            Some(c) => exit_text(c),
            None if p.end_ns.is_some() => "ended (exit status not known to the shim)".into(),
            None => "no end recorded (killed, still running, or cut off)".into(),
        };
        let image = match p.image {
            0 => String::new(),
            n => format!(
                " (exec #{n}: {})",
                p.command.first().map_or("?", |c| c.as_str())
            ),
        };
        o.push_str(&format!(
            "process {}{image} (parent {}): {}\n  {}, peak {} at {}, {} dropped events\n",
            p.pid,
            p.ppid,
            command_line(p),
            exit,
            bytes(p.peak_bytes),
            duration(p.peak_ts_ns),
            p.dropped_events
        ));
        if p.dropped_events > 0 {
            o.push_str("  WARNING: the shim dropped events; the figures below miss them\n");
        }
        if !p.devices.is_empty() {
            let mut rows = vec![[
                "device",
                "allocs",
                "frees",
                "failed",
                "peak",
                "peak at",
                "live at exit/exec",
                "pinned host peak",
                "unmatched frees",
            ]
            .map(String::from)
            .to_vec()];
            // A device that only appears through non-memory events (spans, PJRT records
            // without a device) has nothing to show; `--json` still lists it.
            let quiet = |d: &memwatch_analysis::capture::DeviceReport| {
                d.alloc_count + d.free_count + d.failed_count + d.unmatched_frees == 0
                    && d.host_pinned.peak_bytes == 0
            };
            for d in p.devices.iter().filter(|d| !quiet(d)) {
                let name = d.name.as_ref().map_or(String::new(), |n| format!(" {n}"));
                rows.push(vec![
                    format!("{}{name}", d.device),
                    d.alloc_count.to_string(),
                    d.free_count.to_string(),
                    d.failed_count.to_string(),
                    bytes(d.peak_bytes),
                    duration(d.peak_ts_ns),
                    if p.ended_by_exec {
                        format!(
                            "{} ({}) at exec",
                            bytes(d.live_bytes_at_exec),
                            d.live_allocs_at_exec
                        )
                    } else {
                        format!(
                            "{} ({})",
                            bytes(d.live_bytes_at_exit),
                            d.live_allocs_at_exit
                        )
                    },
                    bytes(d.host_pinned.peak_bytes),
                    d.unmatched_frees.to_string(),
                ]);
            }
            table(&mut o, "  ", &rows);
        }
        for d in &p.devices {
            o.push_str(&super::report_devices::render_vmm_references(d));
        }
        for d in &p.devices {
            if d.largest_allocations.is_empty() || top == 0 {
                continue;
            }
            o.push_str(&format!("  largest allocations, device {}:\n", d.device));
            let rows: Vec<Vec<String>> = d
                .largest_allocations
                .iter()
                .map(|a| {
                    vec![
                        bytes(a.size),
                        a.api.clone(),
                        a.mem_kind.clone(),
                        format!("at {}", duration(a.ts_ns)),
                        format!("{:#x}", a.ptr),
                    ]
                })
                .collect();
            table(&mut o, "    ", &rows);
            for a in d.largest_allocations.iter().filter(|a| !a.stack.is_empty()) {
                o.push_str(&format!(
                    "    sampled stack of the {} {} at {}:\n",
                    bytes(a.size),
                    a.api,
                    duration(a.ts_ns)
                ));
                stack_lines(&mut o, &a.stack);
            }
        }
        for d in &p.devices {
            if d.largest_leaks.is_empty() || top == 0 {
                continue;
            }
            o.push_str(&format!(
                "  largest leaks (live at exit), device {}:\n",
                d.device
            ));
            for a in &d.largest_leaks {
                o.push_str(&format!(
                    "    {} {} {} at {} {:#x}\n",
                    bytes(a.size),
                    a.api,
                    a.mem_kind,
                    duration(a.ts_ns),
                    a.ptr
                ));
                stack_lines(&mut o, &a.stack);
            }
        }
        if !p.api.is_empty() {
            o.push_str("  API calls:\n");
            api_table(&mut o, &p.api);
        }
    }
    o.push_str(&super::report_devices::render(&r.devices));
    if r.processes.len() > 1 && !r.api.is_empty() {
        o.push_str("\nAPI calls, all processes:\n");
        api_table(&mut o, &r.api);
        o.push_str(&super::report_devices::render_stretches(&r.api));
    }
    if !r.failures.is_empty() {
        o.push_str(&format!("\nfailed calls ({}):\n", r.failures_total));
        let rows: Vec<Vec<String>> = r
            .failures
            .iter()
            .take(50)
            .map(|f| {
                vec![
                    format!("at {}", duration(f.ts_ns)),
                    format!("pid {} tid {}", f.pid, f.tid),
                    format!("device {}", f.device),
                    f.api.clone(),
                    bytes(f.size),
                    format!(
                        "-> {} {}",
                        f.result,
                        f.result_name.as_deref().unwrap_or("(unknown code)")
                    ),
                ]
            })
            .collect();
        table(&mut o, "  ", &rows);
        if r.failures.len() > 50 {
            o.push_str(&format!(
                "  ... {} more (see --json)\n",
                r.failures.len() - 50
            ));
        }
    }
    o
}

/// `#0 function (module+0xoffset)` per frame, innermost first.
fn stack_lines(o: &mut String, stack: &[memwatch_analysis::capture::symbolize::StackFrame]) {
    for (i, f) in stack.iter().enumerate() {
        let module = f
            .module
            .as_deref()
            .map(|m| m.rsplit('/').next().unwrap_or(m));
        let place = match module {
            Some(m) => format!("{m}+{:#x}", f.offset),
            None => format!("{:#x}", f.address),
        };
        match &f.symbol {
            Some(s) => o.push_str(&format!("      #{i} {s} ({place})\n")),
            None => o.push_str(&format!("      #{i} {place}\n")),
        }
    }
}

fn api_table(o: &mut String, stats: &[memwatch_analysis::capture::ApiStats]) {
    let mut rows = vec![[
        "api",
        "calls",
        "errors",
        "total",
        "p50",
        "p99",
        "max",
        "max at once",
        "devices at once",
    ]
    .map(String::from)
    .to_vec()];
    let mut untimed = false;
    for s in stats {
        // The shim times allocation / release calls only with MEMWATCH_ALLOC_DURATIONS=1
        // (one clock read per call instead of two): all-zero durations were not measured.
        let timed = s.max_ns > 0;
        untimed |= !timed;
        let d = |ns: u64| if timed { duration(ns) } else { "-".to_string() };
        rows.push(vec![
            s.api.clone(),
            s.count.to_string(),
            s.errors.to_string(),
            d(s.total_ns),
            d(s.p50_ns),
            d(s.p99_ns),
            d(s.max_ns),
            if timed {
                s.max_concurrent.to_string()
            } else {
                "-".to_string()
            },
            if timed {
                s.max_concurrent_devices.to_string()
            } else {
                "-".to_string()
            },
        ]);
    }
    table(o, "    ", &rows);
    if untimed {
        o.push_str(
            "    (-: calls not timed; run with MEMWATCH_ALLOC_DURATIONS=1 to time allocations)\n",
        );
    }
}

/// "exit N", naming the signal for the shell's 128 + N convention (the shim records 134
/// for a process that called `abort()`).
fn exit_text(code: i32) -> String {
    let name = match code - 128 {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT: abort()",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return format!("exit {code}"),
    };
    format!("exit {code} (128 + {name})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(duration(999), "999 ns");
        assert_eq!(duration(1500), "1.5 µs");
        assert_eq!(duration(2_500_000), "2.50 ms");
        assert_eq!(duration(3_000_000_000), "3.00 s");
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(
            utc(1_795_000_000 * 1_000_000_000),
            "2026-11-18 11:06:40 UTC"
        );
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }
}
