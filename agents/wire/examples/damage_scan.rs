//! Reads a capture in salvage mode and prints what it found, the time it took and the
//! process's peak memory: the figure for a capture followed by a long damaged region
//! (`bench/report_damage.sh`). `cargo run --release -p memwatch-wire --example
//! damage_scan -- FILE`
use memwatch_wire::{FrameReader, ReadMode};
use std::time::Instant;

/// Peak resident set size (VmHWM) in KiB, 0 when /proc cannot say.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: damage_scan FILE")?;
    let t0 = Instant::now();
    let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    let mut r = FrameReader::new(std::io::BufReader::new(f), ReadMode::Salvage)?;
    let mut records = 0u64;
    while r.next_record()?.is_some() {
        records += 1;
    }
    let skipped: u64 = r.damage().iter().map(|d| d.bytes_skipped).sum();
    println!(
        "records={records} damaged_regions={} bytes_skipped={skipped} seconds={:.2} peak_rss_mib={:.1}",
        r.damage().len(),
        t0.elapsed().as_secs_f64(),
        peak_rss_kib() as f64 / 1024.0
    );
    Ok(())
}
