//! Writes a synthetic capture of a given size for benchmarks: P processes with T threads
//! each on their own device, a mix of hipMalloc/hipFree (pointers freed out of order),
//! stream-pool allocations, occasional OOM failures and module-load spans, flushed in
//! per-thread batches as the shim does (so events are not in global time order).
//!
//! `cargo run --release -p memwatch-analysis --example synth_capture -- OUT.mwcap [EVENTS]`

use std::io::BufWriter;

use memwatch_wire::*;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .ok_or("usage: synth_capture OUT.mwcap [EVENTS]")?;
    let total: u64 = args.next().map_or(Ok(10_000_000), |s| s.parse())?;
    let (procs, threads, batch) = (4u32, 8u32, 4096u64);
    let per_thread = total / (procs * threads) as u64;
    let file = std::fs::File::create(&out)?;
    let mut w = FrameWriter::new(BufWriter::with_capacity(1 << 20, file))?;
    for p in 0..procs {
        w.write_record(&Record::ProcessStart(ProcessStart {
            pid: 1000 + p,
            ppid: 1,
            mono_anchor_ns: 1_000_000 + p as u64,
            wall_anchor_unix_ns: 1_795_000_000_000_000_000,
            shim_version: "synth".into(),
            hostname: "bench".into(),
            argv: vec!["worker".into(), p.to_string()],
            pid_ns: None,
        }))?;
    }
    let mut written = 0u64;
    let mut frame = Vec::with_capacity(batch as usize);
    // Round-robin over threads, one batch each, as a flusher draining per-thread rings.
    let mut cursor = vec![0u64; (procs * threads) as usize];
    loop {
        let mut progressed = false;
        for p in 0..procs {
            for t in 0..threads {
                let slot = (p * threads + t) as usize;
                let start = cursor[slot];
                if start >= per_thread {
                    continue;
                }
                progressed = true;
                let end = (start + batch).min(per_thread);
                frame.clear();
                for i in start..end {
                    let ts = 2_000_000 + i * 1000 + t as u64 * 7;
                    // Each allocation i is freed at step i+64 (so ~32 live per thread).
                    let ptr =
                        |k: u64| 0x7f00_0000_0000 + ((t as u64) << 36) + (k % 4096) * 0x10_0000;
                    let base = Event {
                        ts_ns: ts,
                        duration_ns: 500 + (i * 37) % 2000,
                        pid: 1000 + p,
                        tid: 2000 + t,
                        device: t as i32,
                        ..Event::default()
                    };
                    let of = |kind, mem, api| {
                        let mut e = base;
                        e.set_kind(kind);
                        e.set_mem_kind(mem);
                        e.set_api(api);
                        e
                    };
                    let e = match i % 128 {
                        127 => Event {
                            duration_ns: 50_000,
                            ..of(EventKind::ApiSpan, MemKind::None, Api::HipModuleLoadData)
                        },
                        126 => Event {
                            size: 1 << 40,
                            result: 2,
                            ..of(EventKind::AllocFailed, MemKind::Device, Api::HipMalloc)
                        },
                        k if k % 2 == 0 => Event {
                            ptr: ptr(i / 2),
                            size: 256 + (i % 1000) * 4096,
                            ..of(
                                EventKind::Alloc,
                                if k % 8 == 0 {
                                    MemKind::StreamPool
                                } else {
                                    MemKind::Device
                                },
                                Api::HipMalloc,
                            )
                        },
                        _ => Event {
                            ptr: ptr((i / 2).wrapping_sub(32)),
                            ..of(EventKind::Free, MemKind::Device, Api::HipFree)
                        },
                    };
                    frame.push(e);
                }
                written += frame.len() as u64;
                w.write_record(&Record::Events(std::mem::take(&mut frame)))?;
                cursor[slot] = end;
            }
        }
        if !progressed {
            break;
        }
    }
    w.into_inner()?;
    println!("{out}: {written} events");
    Ok(())
}
