//! Benchmark of PyTorch snapshot import (`bench/torch_snapshot.sh` runs it).
//!
//!   torch_snapshot_bench gen SRC.pickle OUT.pickle BYTES
//!       writes a snapshot of about BYTES by repeating SRC's recorded trace: every
//!       repetition but the last ends by freeing what it held and releasing its segments
//!       (as `del` + `torch.cuda.empty_cache()` would), with fresh frame lists and later
//!       times; the last is SRC's trace as recorded, so the dump's segments still match.
//!   torch_snapshot_bench synth OUT.pickle BYTES [alloc|all]
//!       writes a snapshot of about BYTES with `torch::synth` (memo references reaching
//!       back across the whole file: a free sharing its alloc's frame list with
//!       `alloc`, strings and frames memoized once at the start).
//!   torch_snapshot_bench report FILE | records FILE
//!       reads FILE as `memwatch report` does (scan + replay + report) or as
//!       `memwatch import` does (scan + replay + capture records, encoded), and prints
//!       the rate in MB/s of pickle and the peak resident memory (VmHWM).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use memwatch_analysis::torch::pickle::write::Writer;
use memwatch_analysis::torch::pickle::{load_plain, Value};
use memwatch_analysis::torch::synth::{self, Context, Params};
use memwatch_analysis::torch::{report, scan_path, to_records, ReportOptions};

struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// An entry with its address, time and frames replaced.
fn shifted(e: &Value, dt: i64, frames: &mut BTreeMap<usize, Value>) -> Value {
    let Value::Dict(items) = e else {
        return e.clone();
    };
    let items = items
        .iter()
        .map(|(k, v)| {
            let v = match (k.as_str(), v) {
                (Some("time_us"), Value::Int(t)) => Value::Int(t + dt),
                (Some("frames"), Value::List(l)) => frames
                    .entry(Rc::as_ptr(l) as usize)
                    .or_insert_with(|| Value::List(Rc::new(l.to_vec())))
                    .clone(),
                _ => v.clone(),
            };
            (k.clone(), v)
        })
        .collect();
    Value::Dict(Rc::new(items))
}

/// The blocks the trace holds at its end and the segments it still has:
/// (action, address, size) of the frees and releases that end a repetition.
fn cleanup(trace: &[Value]) -> Vec<(&'static str, u64, i64)> {
    let mut blocks: BTreeMap<u64, i64> = BTreeMap::new();
    let mut segments: BTreeMap<u64, i64> = BTreeMap::new();
    for e in trace {
        let (Some(a), Some(addr), Some(size)) = (
            e.get("action").and_then(Value::as_str),
            e.get("addr").and_then(Value::as_u64),
            e.get("size").and_then(Value::as_i64),
        ) else {
            continue;
        };
        match a {
            "alloc" => {
                blocks.insert(addr, size);
            }
            "free_completed" => {
                blocks.remove(&addr);
            }
            "segment_alloc" => {
                segments.insert(addr, size);
            }
            "segment_free" => {
                segments.remove(&addr);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (&a, &n) in &blocks {
        out.push(("free_requested", a, n));
        out.push(("free_completed", a, n));
    }
    for (&a, &n) in &segments {
        out.push(("segment_free", a, n));
    }
    out
}

/// The strings of the cleanup entries, taken from the trace where it has them: one
/// object each, memoized once and then referred to (as Python's pickler does with
/// interned keys), not a new string per entry.
struct Texts {
    known: BTreeMap<String, Value>,
}

impl Texts {
    fn new(trace: &[Value]) -> Self {
        let mut known = BTreeMap::new();
        for e in trace {
            if let Value::Dict(items) = e {
                for (k, v) in items.iter() {
                    for s in [k, v] {
                        if let Some(text) = s.as_str() {
                            known.entry(text.to_owned()).or_insert_with(|| s.clone());
                        }
                    }
                }
            }
        }
        Texts { known }
    }

    fn get(&mut self, text: &str) -> Value {
        self.known
            .entry(text.to_owned())
            .or_insert_with(|| Value::str(text))
            .clone()
    }

    /// A cleanup entry at time `t`.
    fn entry(&mut self, action: &str, addr: u64, size: i64, t: i64) -> Value {
        let items = [
            ("action", self.get(action)),
            ("addr", Value::Int(addr as i64)),
            ("size", Value::Int(size)),
            ("stream", Value::Int(0)),
            ("time_us", Value::Int(t)),
            ("compile_context", self.get("N/A")),
            ("user_metadata", self.get("")),
            ("frames", Value::List(Rc::new(Vec::new()))),
        ];
        Value::Dict(Rc::new(
            items.into_iter().map(|(k, v)| (self.get(k), v)).collect(),
        ))
    }
}

fn gen(src: &Path, out: &Path, target: u64) -> std::io::Result<()> {
    let doc = load_plain(File::open(src)?).map_err(std::io::Error::other)?;
    let Value::Dict(items) = &doc else {
        return Err(std::io::Error::other("not a snapshot"));
    };
    let trace: Vec<Value> = doc
        .get("device_traces")
        .and_then(Value::as_seq)
        .and_then(|t| t.first())
        .and_then(Value::as_seq)
        .map(<[Value]>::to_vec)
        .unwrap_or_default();
    let time = |e: &Value| e.get("time_us").and_then(Value::as_i64).unwrap_or(0);
    let span = trace.last().map_or(0, time) - trace.first().map_or(0, time) + 1000;
    let frees = cleanup(&trace);
    let mut texts = Texts::new(&trace);
    let mut w = Writer::new(
        Counting {
            inner: BufWriter::with_capacity(1 << 20, File::create(out)?),
            bytes: 0,
        },
        1000,
    );
    w.empty_dict()?;
    w.mark()?;
    let mut batch: Vec<Value> = Vec::with_capacity(1000);
    let mut entries = 0u64;
    let flush = |w: &mut Writer<Counting<BufWriter<File>>>, batch: &mut Vec<Value>| {
        if batch.is_empty() {
            return Ok(());
        }
        w.mark()?;
        for e in batch.drain(..) {
            w.value(&e)?;
        }
        w.appends()?;
        w.forget_containers();
        Ok::<_, std::io::Error>(())
    };
    for (k, v) in items.iter() {
        w.value(k)?;
        if k.as_str() != Some("device_traces") {
            w.value(v)?;
            continue;
        }
        w.empty_list()?;
        w.empty_list()?;
        let mut rep = 0i64;
        loop {
            let last = w.get_ref().bytes + (w.get_ref().bytes / (rep.max(1) as u64)) >= target;
            let dt = rep * span;
            let mut frames = BTreeMap::new();
            for e in &trace {
                batch.push(shifted(e, dt, &mut frames));
                if batch.len() == 1000 {
                    flush(&mut w, &mut batch)?;
                }
            }
            entries += trace.len() as u64;
            if last {
                break;
            }
            let t = trace.last().map_or(0, time) + dt + 1;
            for &(action, addr, size) in &frees {
                batch.push(texts.entry(action, addr, size, t));
                entries += 1;
                if batch.len() == 1000 {
                    flush(&mut w, &mut batch)?;
                }
            }
            rep += 1;
        }
        flush(&mut w, &mut batch)?;
        w.append()?;
        eprintln!("{} repetitions, {entries} trace entries", rep + 1);
    }
    w.setitems()?;
    w.stop()?;
    let bytes = w.get_ref().bytes;
    eprintln!(
        "wrote {} ({:.0} MiB)",
        out.display(),
        bytes as f64 / 1048576.0
    );
    Ok(())
}

/// A `torch::synth` snapshot of about `target` bytes (the bytes per iteration measured on
/// a short one first).
fn synth_file(out: &Path, target: u64, context: Context) -> std::io::Result<()> {
    let p = |iterations| Params {
        iterations,
        context,
        devices: 1,
        seed: 1,
    };
    let probe = 20_000;
    let (sink, _) = synth::write_long(
        Counting {
            inner: std::io::sink(),
            bytes: 0,
        },
        &p(probe),
    )?;
    let per = (sink.bytes / probe).max(1);
    let file = Counting {
        inner: BufWriter::with_capacity(1 << 20, File::create(out)?),
        bytes: 0,
    };
    let (w, figures) = synth::write_long(file, &p(target / per + 1))?;
    eprintln!(
        "wrote {} ({:.0} MiB, {} trace entries)",
        out.display(),
        w.bytes as f64 / 1048576.0,
        figures[0].entries
    );
    Ok(())
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn read(mode: &str, file: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let scan = scan_path(file)?;
    let t_scan = t.elapsed().as_secs_f64();
    let what = match mode {
        "report" => {
            let r = report(&scan, &ReportOptions::default())?;
            let d = &r.devices[0];
            format!(
                "peak allocated {} B, allocated at the dump {} B, end check {}",
                d.peak_allocated.bytes,
                d.allocated_bytes,
                if d.end_check.consistent() {
                    "consistent"
                } else {
                    "INCONSISTENT"
                }
            )
        }
        _ => {
            let mut buf = Vec::new();
            let mut bytes = 0u64;
            let s = to_records::<memwatch_wire::WireError>(&scan, "bench", &mut |r| {
                buf.clear();
                memwatch_wire::encode_record(&r, &mut buf)?;
                bytes += buf.len() as u64;
                Ok(())
            })
            .map_err(|e| format!("{e:?}"))?;
            format!(
                "{} records, {} events, {} stacks, {:.0} MiB of capture frames",
                s.records,
                s.events,
                s.stacks,
                bytes as f64 / 1048576.0
            )
        }
    };
    let secs = t.elapsed().as_secs_f64();
    let mb = scan.file_bytes as f64 / 1e6;
    println!(
        "{mode}: {:.0} MB of pickle ({} trace entries, {} spilled) in {secs:.2} s (read {t_scan:.2} s): \
         {:.0} MB/s; peak RSS {:.0} MiB; {what}",
        mb,
        scan.traces.iter().map(|t| t.range.len).sum::<u64>(),
        if scan.spill.spilled() { "temp file" } else { "not" },
        mb / secs,
        peak_rss_kib() as f64 / 1024.0,
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("gen") if args.len() == 5 => {
            gen(Path::new(&args[2]), Path::new(&args[3]), args[4].parse()?)?
        }
        Some("synth") if (4..=5).contains(&args.len()) => {
            let context = match args.get(4).map(String::as_str) {
                Some("all") => Context::All,
                _ => Context::Alloc,
            };
            synth_file(Path::new(&args[2]), args[3].parse()?, context)?
        }
        Some(m @ ("report" | "records")) if args.len() == 3 => read(m, Path::new(&args[2]))?,
        _ => {
            eprintln!(
                "usage: torch_snapshot_bench gen SRC OUT BYTES | synth OUT BYTES [alloc|all] \
                 | report FILE | records FILE"
            );
            std::process::exit(2);
        }
    }
    Ok(())
}
