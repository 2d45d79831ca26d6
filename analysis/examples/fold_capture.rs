//! Folds a recorded capture frame by frame as `memwatch run` does while the command
//! writes it (`capture::CaptureFold`), then finishes the fold and diagnoses the run from
//! it (`doctor::diagnose` on `CaptureEvidence::from_folded`), printing the time of each
//! phase: the per-event cost of the fold, and the work left after the command's exit.
//! Meant for profilers (`valgrind --tool=callgrind`, `perf record`) and for
//! `bench/doctor.sh`'s figures one step at a time.
//!
//! `cargo run --release -p memwatch-analysis --example fold_capture -- CAPTURE.mwcap`

use std::time::Instant;

use memwatch_analysis::capture::{CaptureFold, ReportOptions, WireSize};
use memwatch_analysis::doctor::{self, CaptureEvidence, Evidence};
use memwatch_wire::{encode_record, FrameReader, ReadMode};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or("usage: fold_capture CAPTURE.mwcap")?;
    let path = std::path::PathBuf::from(path);
    let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = FrameReader::new(
        std::io::BufReader::with_capacity(1 << 20, file),
        ReadMode::Strict,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    // Read and encode everything first: the fold's own time is what is measured.
    let mut frames = Vec::new();
    let mut bytes = Vec::new();
    while let Some(record) = reader
        .next_record()
        .map_err(|e| format!("{}: {e}", path.display()))?
    {
        bytes.clear();
        encode_record(&record, &mut bytes)?;
        frames.push((record, WireSize::of(&bytes)));
    }
    let opts = ReportOptions { top: 10 };
    let t = Instant::now();
    // As many events as `memwatch run`'s fold may hold on a machine of 24 GiB (its room
    // is reserved once, up to that).
    let max_events = std::env::var("FOLD_MAX_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32 << 20);
    let mut fold = CaptureFold::new(&path, &opts, max_events);
    for (record, size) in &frames {
        fold.frame(record, *size);
    }
    let streamed = t.elapsed();
    let t = Instant::now();
    let folded = fold
        .finish()
        .map_err(|e| format!("the fold gave up: {e}"))?;
    let finished = t.elapsed();
    let events = folded.stats.events;
    let t = Instant::now();
    let ev = Evidence {
        capture: Some(CaptureEvidence::from_folded(folded.loaded, folded.history)),
        ..Evidence::default()
    };
    let diagnosis = doctor::diagnose(&ev);
    let diagnosed = t.elapsed();
    println!(
        "{events} events: folded while written {:.3} s ({:.0} ns/event), finished {:.3} s, \
         diagnosed {:.3} s ({} verdicts)",
        streamed.as_secs_f64(),
        streamed.as_nanos() as f64 / events.max(1) as f64,
        finished.as_secs_f64(),
        diagnosed.as_secs_f64(),
        diagnosis.verdicts.len()
    );
    Ok(())
}
