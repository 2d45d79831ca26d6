//! `memwatch report` cost on a 10M-event capture: load (streaming decode into compact
//! events) and analyze (sort, peaks, API percentiles and overlap), timed separately.
//! Run: `cargo bench -p memwatch-analysis --bench report_10m` (env MEMWATCH_BENCH_EVENTS
//! to change the size). The capture is produced by the `synth_capture` example.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use memwatch_analysis::capture::{analyze, load_path, ReportOptions};

fn main() {
    let events: u64 = std::env::var("MEMWATCH_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let dir = std::env::temp_dir().join(format!("memwatch-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("synth.mwcap");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args([
            "run",
            "--release",
            "-q",
            "-p",
            "memwatch-analysis",
            "--example",
            "synth_capture",
            "--",
        ])
        .arg(&path)
        .arg(events.to_string())
        .status()
        .expect("run synth_capture");
    assert!(st.success());
    let size = std::fs::metadata(&path).expect("capture").len();
    for round in 0..2 {
        let t0 = Instant::now();
        let loaded = load_path(Path::new(&path), &mut |_| {}).expect("load");
        let t_load = t0.elapsed().as_secs_f64();
        let n = loaded.events.len();
        let t1 = Instant::now();
        let report = analyze(loaded, &ReportOptions::default());
        let t_an = t1.elapsed().as_secs_f64();
        let total = t_load + t_an;
        println!(
            "round {round}: {n} events ({:.0} MiB): load {t_load:.2} s, analyze {t_an:.2} s, total {total:.2} s = {:.1} M events/s ({} processes)",
            size as f64 / (1 << 20) as f64,
            n as f64 / total / 1e6,
            report.processes.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
