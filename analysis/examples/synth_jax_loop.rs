//! Writes the capture of a long JAX loop that keeps every step's output, as the shim
//! records it under `memwatch run`: one process, one H200, XLA's BFC pool preallocated
//! by the driver (`cuMemAlloc` of the pool), one jitted executable executed STEPS times,
//! each execution's output buffer kept alive (a `PJRT_Buffer` never destroyed, as
//! `history[step] = x` does), each execution's completion on the plugin's callback
//! thread, the allocator's statistics sampled about every 10 ms of the program's time,
//! and, once the pool is full, every execution failing with RESOURCE_EXHAUSTED (the
//! error arrives with the completion; the output buffer, an error buffer, still lives).
//! Threads flush their own batches (so the file is not in time order). `--killed`: the
//! program was killed, so the capture has no `process_end` and no teardown releases.
//! `--stderr FILE`: the program's stderr, with XLA's BFC warning for every failed
//! execution (as TSL's allocator prints it) and the start-up lines.
//!
//! `cargo run --release -p memwatch-analysis --example synth_jax_loop -- OUT.mwcap STEPS
//! [--output-bytes B] [--pool-bytes B] [--step-ns NS] [--killed] [--stderr FILE]`
//!
//! Defaults: 16 MiB outputs (f32[2048,2048]), an 11.1 GiB pool
//! (`XLA_PYTHON_CLIENT_MEM_FRACTION=0.08` of an H200), 1 ms a step.

use std::io::BufWriter;

use memwatch_wire::*;

const PID: u32 = 4242;
const MAIN_TID: u32 = 4242;
const CALLBACK_TID: u32 = 4300;
const DRIVER_TID: u32 = 4301;
const HANDLE: u64 = 0x5555_0000_1000;
const INIT_HANDLE: u64 = 0x5555_0000_2000;
const RESOURCE_EXHAUSTED: i32 = 8;
/// The shim's flusher writes every thread's buffered events about every 10 ms.
const FLUSH_NS: u64 = 10_000_000;

struct Opts {
    out: String,
    steps: u64,
    output_bytes: u64,
    pool_bytes: u64,
    step_ns: u64,
    killed: bool,
    stderr: Option<String>,
}

fn parse() -> Result<Opts, String> {
    let usage = "usage: synth_jax_loop OUT.mwcap STEPS [--output-bytes B] [--pool-bytes B] \
                 [--step-ns NS] [--killed] [--stderr FILE]";
    let mut args = std::env::args().skip(1);
    let out = args.next().ok_or(usage)?;
    let steps = args
        .next()
        .ok_or(usage)?
        .parse()
        .map_err(|e| format!("STEPS: {e}"))?;
    let mut o = Opts {
        out,
        steps,
        output_bytes: 16 << 20,
        pool_bytes: 11_916_017_664, // 0.08 of 148,950,220,800 (an H200), 2 MiB rounded
        step_ns: 1_000_000,
        killed: false,
        stderr: None,
    };
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            args.next()
                .ok_or(format!("{name} needs a value"))?
                .parse()
                .map_err(|e| format!("{name}: {e}"))
        };
        match a.as_str() {
            "--output-bytes" => o.output_bytes = num("--output-bytes")?,
            "--pool-bytes" => o.pool_bytes = num("--pool-bytes")?,
            "--step-ns" => o.step_ns = num("--step-ns")?.max(1000),
            "--killed" => o.killed = true,
            "--stderr" => o.stderr = Some(args.next().ok_or("--stderr needs a file")?),
            other => return Err(format!("unknown argument {other}; {usage}")),
        }
    }
    Ok(o)
}

/// One thread's events, written as a frame at each flush.
struct Lane {
    buf: Vec<Event>,
}

impl Lane {
    fn push<W: std::io::Write>(
        &mut self,
        _w: &mut FrameWriter<W>,
        e: Event,
    ) -> Result<u64, WireError> {
        self.buf.push(e);
        Ok(0)
    }

    fn flush<W: std::io::Write>(&mut self, w: &mut FrameWriter<W>) -> Result<u64, WireError> {
        let n = self.buf.len() as u64;
        // Frames hold at most 16 MiB: a long batch (the teardown's) goes in several.
        for chunk in self.buf.chunks(100_000) {
            w.write_record(&Record::Events(chunk.to_vec()))?;
        }
        self.buf.clear();
        Ok(n)
    }
}

fn ev(kind: EventKind, mem: MemKind, api: Api, tid: u32, ts: u64) -> Event {
    Event {
        ts_ns: ts,
        pid: PID,
        tid,
        device: 0,
        ..Event::new(kind, mem, api)
    }
}

fn executable(handle: u64, name: &str, ts: u64, out: u64, temp: u64) -> Record {
    Record::PjrtExecutable(PjrtExecutable {
        pid: PID,
        ts_ns: ts,
        handle,
        flags: PjrtExecutable::FLAG_STATS,
        stats: CompiledMemoryStats {
            argument: out as i64,
            output: out as i64,
            temp: temp as i64,
            generated_code: 0,
            ..CompiledMemoryStats::default()
        },
        devices: vec![0],
        name: name.into(),
        fingerprint: format!("{handle:x}"),
    })
}

/// Bytes as TSL prints them: `16B`, `32.00KiB`, `3.25GiB`.
fn human(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b}B")
    } else {
        format!("{v:.2}{}", units[u])
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = parse()?;
    let file = std::fs::File::create(&o.out)?;
    let mut w = FrameWriter::new(BufWriter::with_capacity(1 << 20, file))?;
    let t_start = 5_000_000_000u64;
    w.write_record(&Record::ProcessStart(ProcessStart {
        pid: PID,
        ppid: 4200,
        mono_anchor_ns: t_start,
        wall_anchor_unix_ns: 1_795_000_000_000_000_000,
        shim_version: "synth".into(),
        hostname: "h200".into(),
        argv: vec!["python3".into(), "long_jax.py".into()],
        pid_ns: None,
    }))?;
    w.write_record(&Record::DeviceInfo(DeviceInfo {
        pid: PID,
        device: 0,
        vendor: Vendor::Nvidia.code(),
        total_bytes: 150_109_880_320,
        name: "NVIDIA H200".into(),
        identity: None,
    }))?;
    for tag in [
        "memwatch.tag env.XLA_PYTHON_CLIENT_MEM_FRACTION=0.08".to_string(),
        format!("memwatch.tag synth.steps={}", o.steps),
    ] {
        w.write_record(&Record::Marker(Marker {
            pid: PID,
            tid: MAIN_TID,
            ts_ns: t_start,
            device: -1,
            text: tag,
        }))?;
    }
    let mut main = Lane { buf: Vec::new() };
    let mut callback = Lane { buf: Vec::new() };
    let mut driver = Lane { buf: Vec::new() };
    let mut written = 0u64;
    // Start-up: the driver's context and module loads, the pool preallocated.
    let mut t = t_start + 300_000_000;
    for k in 0..8u64 {
        written += driver.push(
            &mut w,
            Event {
                duration_ns: 2_000_000,
                ..ev(
                    EventKind::ApiSpan,
                    MemKind::None,
                    Api::CuModuleLoadData,
                    DRIVER_TID,
                    t + k * 3_000_000,
                )
            },
        )?;
    }
    t += 30_000_000;
    // The pool as XLA makes it: a physical handle, an address range, the mapping.
    let (pool_handle, pool_ptr) = (0x55f0_0000u64, 0x7f00_0000_0000u64);
    for (api, mem, ptr, aux) in [
        (Api::CuMemCreate, MemKind::VmmPhysical, pool_handle, 0),
        (
            Api::CuMemAddressReserve,
            MemKind::VmmReserve,
            pool_ptr,
            2 << 20,
        ),
        (Api::CuMemMap, MemKind::VmmMap, pool_ptr, pool_handle),
    ] {
        t += 40_000;
        written += driver.push(
            &mut w,
            Event {
                ptr,
                aux,
                size: o.pool_bytes,
                ..ev(EventKind::Alloc, mem, api, MAIN_TID, t)
            },
        )?;
    }
    t += 10_000_000;
    // jnp.ones: a broadcast executable and its output (the loop's first input).
    let temp = 2 * o.output_bytes;
    w.write_record(&executable(
        INIT_HANDLE,
        "jit_broadcast_in_dim",
        t,
        o.output_bytes,
        0,
    ))?;
    t += 40_000_000;
    w.write_record(&executable(HANDLE, "jit_refine", t, o.output_bytes, temp))?;
    let mut log = match &o.stderr {
        Some(p) => {
            let mut f = BufWriter::new(std::fs::File::create(p)?);
            use std::io::Write;
            writeln!(
                f,
                "I1128 19:00:00.100000    4242 cuda_executor.cc:1802] GPU interconnect information not available"
            )?;
            Some(f)
        }
        None => None,
    };
    let mut in_use = 0u64;
    let mut peak = 0u64;
    let mut last_sample = 0u64;
    let mut flushes = 0u64;
    let sample = |ts: u64, in_use: u64, peak: u64, pool: u64| {
        Record::PjrtMemoryStats(PjrtMemoryStats {
            pid: PID,
            ts_ns: ts,
            device: 0,
            flags: PjrtMemoryStats::BYTES_IN_USE
                | PjrtMemoryStats::PEAK_BYTES_IN_USE
                | PjrtMemoryStats::LARGEST_FREE_BLOCK
                | PjrtMemoryStats::POOL_BYTES
                | PjrtMemoryStats::BYTES_LIMIT
                | PjrtMemoryStats::NUM_ALLOCS,
            bytes_in_use: in_use as i64,
            peak_bytes_in_use: peak as i64,
            largest_free_block: pool.saturating_sub(in_use) as i64,
            pool_bytes: pool as i64,
            bytes_limit: pool as i64,
            num_allocs: (in_use / o.output_bytes.max(1)) as i64,
            ..PjrtMemoryStats::default()
        })
    };
    // Execution `i` of `handle`; step -1 is jnp.ones.
    for step in 0..=o.steps {
        let (handle, i) = if step == 0 {
            (INIT_HANDLE, 0)
        } else {
            (HANDLE, step)
        };
        let t0 = t + step * o.step_ns;
        let dur = 40_000 + (step * 7919) % 20_000;
        // The output stays (kept in `history`); the temp is freed when the run ends.
        let fits = in_use + o.output_bytes + if step == 0 { 0 } else { temp } <= o.pool_bytes;
        written += main.push(
            &mut w,
            Event {
                ptr: handle,
                duration_ns: dur,
                ..ev(
                    EventKind::ApiSpan,
                    MemKind::None,
                    Api::PjrtExecute,
                    MAIN_TID,
                    t0,
                )
            },
        )?;
        let mut out = Event {
            ptr: 0x5600_0000_0000 + i * 0x40,
            size: o.output_bytes,
            aux: handle,
            duration_ns: dur,
            ..ev(
                EventKind::Alloc,
                MemKind::PjrtBuffer,
                Api::PjrtExecuteOutput,
                MAIN_TID,
                t0,
            )
        };
        out.set_pjrt_output_index(0);
        written += main.push(&mut w, out)?;
        let done = dur + o.step_ns / 2;
        written += callback.push(
            &mut w,
            Event {
                ptr: handle,
                duration_ns: done,
                result: if fits { 0 } else { RESOURCE_EXHAUSTED },
                size: if fits { 0 } else { temp },
                ..ev(
                    EventKind::ApiSpan,
                    MemKind::None,
                    Api::PjrtExecuteComplete,
                    CALLBACK_TID,
                    t0,
                )
            },
        )?;
        if let (Some(f), false) = (log.as_mut(), fits) {
            use std::io::Write;
            let secs = (t0 - t_start) / 1_000_000_000;
            let clock = format!(
                "{:02}:{:02}:{:02}.{:06}",
                19 + secs / 3600,
                secs / 60 % 60,
                secs % 60,
                (t0 - t_start) / 1000 % 1_000_000
            );
            writeln!(
                f,
                "W1128 {clock}    4310 bfc_allocator.cc:598] Allocator (GPU_0_bfc) ran out of memory \
                 trying to allocate {} (rounded to {temp})requested by op \n\
                 If this is caused by memory fragmentation, the environment variable \
                 'TF_GPU_ALLOCATOR=cuda_malloc_async' may improve the situation. \n\
                 Current allocation summary follows.\n\
                 W1128 {clock}    4310 bfc_allocator.cc:609] {}",
                human(temp),
                "*".repeat(100)
            )?;
        }
        if fits {
            in_use += o.output_bytes;
            peak = peak.max(in_use + if step == 0 { 0 } else { temp });
        }
        if t0 + done >= last_sample + FLUSH_NS {
            // A flush: the sample, then each thread's batch, the callback thread's first
            // every other time (the file is not in time order).
            last_sample = t0 + done;
            w.write_record(&sample(last_sample, in_use, peak, o.pool_bytes))?;
            flushes += 1;
            let lanes = if flushes.is_multiple_of(2) {
                [&mut main, &mut callback, &mut driver]
            } else {
                [&mut callback, &mut main, &mut driver]
            };
            for lane in lanes {
                written += lane.flush(&mut w)?;
            }
        }
    }
    let end = t + (o.steps + 1) * o.step_ns;
    for lane in [&mut main, &mut callback, &mut driver] {
        written += lane.flush(&mut w)?;
    }
    if !o.killed {
        // Exit: the outputs and the pool are released, the process ends.
        let mut k = 0;
        for step in 0..=o.steps {
            let handle_i = if step == 0 { 0 } else { step };
            written += main.push(
                &mut w,
                Event {
                    ptr: 0x5600_0000_0000 + handle_i * 0x40,
                    duration_ns: 2_000,
                    ..ev(
                        EventKind::Free,
                        MemKind::PjrtBuffer,
                        Api::PjrtBufferDestroy,
                        MAIN_TID,
                        end + k * 3_000,
                    )
                },
            )?;
            k += 1;
        }
        for (api, mem, ptr, aux) in [
            (Api::CuMemUnmap, MemKind::VmmMap, pool_ptr, 0),
            (Api::CuMemRelease, MemKind::VmmPhysical, pool_handle, 0),
            (Api::CuMemAddressFree, MemKind::VmmReserve, pool_ptr, 0),
        ] {
            k += 1;
            written += main.push(
                &mut w,
                Event {
                    ptr,
                    aux,
                    size: o.pool_bytes,
                    ..ev(EventKind::Free, mem, api, MAIN_TID, end + k * 3_000)
                },
            )?;
        }
        written += main.flush(&mut w)?;
        w.write_record(&Record::ProcessEnd(ProcessEnd {
            pid: PID,
            ts_ns: end + k * 3_000 + 5_000_000,
            exit_code: 0,
        }))?;
    }
    w.into_inner()?;
    if let Some(mut f) = log {
        use std::io::Write;
        f.flush()?;
    }
    println!(
        "{}: {written} events, {} executions{}",
        o.out,
        o.steps + 1,
        if o.killed {
            ", killed (no process_end)"
        } else {
            ""
        }
    );
    Ok(())
}
