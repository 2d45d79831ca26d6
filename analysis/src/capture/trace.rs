//! Export of a capture's device allocations as the JSON-lines trace of DESIGN.md, the
//! input of `memwatch replay`:
//! `{"op":"alloc","id":7,"size":1048576,"ts_ns":..,"device":0,"stream":2}` and
//! `{"op":"free","id":7,"ts_ns":..,"device":0,"stream":2}`.
//!
//! Owns id assignment (one per allocation, from 1, in time order) and stream numbering
//! (one stream per (process image, device), numbered 0.. in (pid, image, device)
//! order). Only device memory is exported (the kinds that occupy device memory, VMM
//! physical handles included); frees of pointers the capture never saw allocated are
//! left out. A free carries the device and stream of its allocation; an allocation at
//! a pointer still live (its free was never seen) frees the old id first, as the report
//! counts it (`crate::live`). An image that
//! exec'd the next one (same pid) gets a free for each allocation it still held, at its
//! `process_end` (the exec released them).

use std::io::Write;

use super::load::{Loaded, ProcKey};
use crate::live::{Change, LiveSet};

/// Which events to export.
#[derive(Debug, Clone, Default)]
pub struct TraceOptions {
    /// Only this device ordinal (all processes); `None`: every device.
    pub device: Option<i32>,
}

/// What [`write_trace`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceSummary {
    pub allocs: u64,
    pub frees: u64,
    /// (process image, device) of each stream number, in stream order.
    pub streams: Vec<(ProcKey, i32)>,
}

/// Writes the trace of `loaded` to `out`, one JSON object per line.
pub fn write_trace<W: Write>(
    mut loaded: Loaded,
    opts: &TraceOptions,
    mut out: W,
) -> std::io::Result<TraceSummary> {
    let base = loaded.base_ns();
    loaded.events.sort_by_key(|e| e.ts);
    let mut order: Vec<u32> = (0..loaded.streams.len() as u32).collect();
    order.sort_by_key(|&i| loaded.streams[i as usize]);
    let mut stream_no = vec![0u32; loaded.streams.len()];
    for (rank, &i) in order.iter().enumerate() {
        stream_no[i as usize] = rank as u32;
    }
    let summary_streams = order.iter().map(|&i| loaded.streams[i as usize]).collect();

    let mut next_id = 1u64;
    // Each live allocation keeps its trace id and the stream it was made on.
    let mut live: LiveSet<(u64, u32)> = LiveSet::new();
    let mut summary = TraceSummary {
        streams: summary_streams,
        ..TraceSummary::default()
    };
    // Images ended by exec, by end time: their remaining allocations are freed then.
    let mut execs: Vec<(u64, ProcKey)> = loaded
        .processes
        .iter()
        .filter(|(_, m)| m.ended_by_exec)
        .map(|(k, m)| (m.end_ts.unwrap_or(0), *k))
        .collect();
    execs.sort_unstable();
    let mut next_exec = 0;
    let write_free = |out: &mut W, id: u64, ts: u64, stream: u32| -> std::io::Result<bool> {
        let device = loaded.streams[stream as usize].1;
        if opts.device.is_none_or(|d| d == device) {
            writeln!(
                out,
                r#"{{"op":"free","id":{id},"ts_ns":{},"device":{device},"stream":{}}}"#,
                ts.saturating_sub(base),
                stream_no[stream as usize]
            )?;
            return Ok(true);
        }
        Ok(false)
    };
    let release_image = |out: &mut W,
                         live: &mut LiveSet<(u64, u32)>,
                         ts: u64,
                         key: ProcKey|
     -> std::io::Result<u64> {
        let mut held: Vec<(u64, u32)> = live
            .release_process(key)
            .into_iter()
            .filter(|(k, _)| k.family.on_device())
            .map(|(_, h)| h.data)
            .collect();
        held.sort_unstable();
        let mut n = 0;
        for (id, stream) in held {
            if write_free(out, id, ts, stream)? {
                n += 1;
            }
        }
        Ok(n)
    };
    for e in &loaded.events {
        while let Some(&(end, key)) = execs.get(next_exec).filter(|(end, _)| *end <= e.ts) {
            summary.frees += release_image(&mut out, &mut live, end, key)?;
            next_exec += 1;
        }
        let (_, device) = loaded.streams[e.stream as usize];
        match live.apply(&loaded.mem_event(e), (next_id, e.stream)) {
            Change::Alloc {
                family, replaced, ..
            } if family.on_device() => {
                // The pointer was handed out again without a free: the old allocation is
                // released here, as the report counts it.
                if let Some(old) = replaced {
                    summary.frees += u64::from(write_free(&mut out, old.data.0, e.ts, old.data.1)?);
                }
                let id = next_id;
                next_id += 1;
                if opts.device.is_none_or(|d| d == device) {
                    writeln!(
                        out,
                        r#"{{"op":"alloc","id":{id},"size":{},"ts_ns":{},"device":{device},"stream":{}}}"#,
                        e.size,
                        e.ts.saturating_sub(base),
                        stream_no[e.stream as usize]
                    )?;
                    summary.allocs += 1;
                }
            }
            Change::Free { family, freed, .. } if family.on_device() => {
                summary.frees += u64::from(write_free(&mut out, freed.data.0, e.ts, freed.data.1)?);
            }
            _ => {}
        }
    }
    for &(end, key) in execs.get(next_exec..).unwrap_or(&[]) {
        summary.frees += release_image(&mut out, &mut live, end, key)?;
    }
    out.flush()?;
    Ok(summary)
}
