//! Benchmark (issue 3): parse throughput of a generated deep-model XLA dump (>= 100 MB of
//! text, thousands of instructions per layer) on one core, with peak RSS vs. input size;
//! and the time to load a directory of 500 modules (the `memwatch xla report` work).
//! Run: `cargo run --release -p memwatch-analysis --example xla_bench [OUT_DIR] [MB]`.
//! The generated files are written to OUT_DIR (default: a temp dir) and not checked in.

use memwatch_analysis::xla;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Writes one module with `layers` layers of 4 instructions each (HLO, buffer assignment,
/// live ranges, values) and returns the bytes written.
fn gen_module(dir: &Path, id: usize, name: &str, layers: usize) -> u64 {
    let prefix = format!("module_{id:04}.{name}.sm_9.0a_gpu_after_optimizations");
    let (mut hlo, mut ba, mut lr) = (String::new(), String::new(), String::new());
    writeln!(hlo, "HloModule {name}, is_scheduled=true\n").unwrap();
    for l in 0..layers {
        writeln!(hlo, "%fused_add.{l} (p0.{l}: bf16[2048,4096]) -> bf16[2048,4096] {{\n  %p0.{l} = bf16[2048,4096]{{1,0}} parameter(0)\n  ROOT %add.{l} = bf16[2048,4096]{{1,0}} add(%p0.{l}, %p0.{l}), metadata={{op_name=\"jit({name})/layer_{l}/add\" source_file=\"model.py\" source_line={l}}}\n}}\n").unwrap();
    }
    writeln!(hlo, "ENTRY %main (x: bf16[2048,4096]) -> bf16[2048,4096] {{\n  %x = bf16[2048,4096]{{1,0}} parameter(0), metadata={{op_name=\"x\"}}").unwrap();
    writeln!(ba, "BufferAssignment:\nallocation 0: size 16777216, page 0, parameter 0, shape |bf16[2048,4096]| at ShapeIndex {{}}:\n value: <0 x @0> (size=16777216,offset=0): bf16[2048,4096]{{1,0}}").unwrap();
    writeln!(
        lr,
        "HloLiveRange (max {}):\n  InstructionSequence:\n    0:x",
        layers * 2 + 1
    )
    .unwrap();
    let mut temp_vals = String::new();
    let mut prev = "x".to_string();
    for l in 0..layers {
        let (f, c) = (format!("loop_add_fusion.{l}"), format!("custom-call.{l}"));
        writeln!(hlo, "  %{f} = bf16[2048,4096]{{1,0}} fusion(%{prev}), kind=kLoop, calls=%fused_add.{l}, metadata={{op_name=\"jit({name})/layer_{l}/add\" stack_frame_id={l}}}, backend_config={{\"operation_queue_id\":\"0\",\"force_earliest_schedule\":false}}").unwrap();
        writeln!(hlo, "  %{c} = (bf16[2048,4096]{{1,0}}, s8[33554432]{{0}}) custom-call(%{f}, %{prev}), custom_call_target=\"__cublas$lt$matmul\", metadata={{op_name=\"jit({name})/layer_{l}/dot_general\"}}").unwrap();
        writeln!(
            temp_vals,
            " value: <{} {f} @0> (size=16777216,offset={}): bf16[2048,4096]{{1,0}}",
            2 * l + 1,
            (l % 2) * 16777216
        )
        .unwrap();
        writeln!(
            temp_vals,
            " value: <{} {c}{{0}} @0> (size=16777216,offset={}): bf16[2048,4096]{{1,0}}",
            2 * l + 2,
            ((l + 1) % 2) * 16777216
        )
        .unwrap();
        writeln!(lr, "    {}:{f}\n    {}:{c}", 2 * l + 1, 2 * l + 2).unwrap();
        prev = f;
    }
    writeln!(
        hlo,
        "  ROOT %out = bf16[2048,4096]{{1,0}} copy(%{prev})\n}}"
    )
    .unwrap();
    writeln!(ba, "allocation 1: size 16777216, page 0, output shape is |bf16[2048,4096]|, maybe-live-out:\n value: <{} out @0> (size=16777216,offset=0): bf16[2048,4096]{{1,0}}", 2 * layers + 1).unwrap();
    writeln!(
        ba,
        "allocation 2: size 33554432, page 0, preallocated-temp:\n{temp_vals}"
    )
    .unwrap();
    writeln!(lr, "  BufferLiveRange:\n    x{{}}:0-{}", layers * 2 + 1).unwrap();
    for l in 0..layers {
        writeln!(
            lr,
            "    loop_add_fusion.{l}{{}}:{}-{}\n    custom-call.{l}{{0}}:{}-{}",
            2 * l + 1,
            2 * l + 3,
            2 * l + 2,
            2 * l + 2
        )
        .unwrap();
    }
    // Like real XLA dumps, print the peak list (the last layer's step).
    let l = layers - 1;
    writeln!(
        lr,
        "  Live ranges at {} (peak):\n    x{{}}: 16777216 bytes (cumulative: 16777216 bytes)\n    loop_add_fusion.{l}{{}}: 16777216 bytes (cumulative: 33554432 bytes)\n    custom-call.{l}{{0}}: 16777216 bytes (cumulative: 50331648 bytes)",
        2 * l + 2
    )
    .unwrap();
    let files = [
        (format!("{prefix}.txt"), hlo),
        (format!("{prefix}-buffer-assignment.txt"), ba),
        (format!("{prefix}-live-range.txt"), lr),
        (
            format!("{prefix}-buffer-assignment-values.txt"),
            "\nTotal bytes used: 67108864 (64.00MiB)\n".to_string(),
        ),
    ];
    let mut n = 0;
    for (f, s) in files {
        n += s.len() as u64;
        std::fs::write(dir.join(f), s).unwrap();
    }
    n
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tmp = tempfile::tempdir().unwrap();
    let root = args
        .get(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let mb: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(110);
    let big = root.join("big");
    let many = root.join("many");
    std::fs::create_dir_all(&big).unwrap();
    std::fs::create_dir_all(&many).unwrap();
    // ~1.1 KB of dump text per layer.
    let layers = mb * 1_000_000 / 1100;
    let bytes = gen_module(&big, 1, "jit_deep", layers);
    let rss_before = peak_rss_kib();
    let t = Instant::now();
    let mods = xla::load_dump_dir(&big).unwrap();
    let dt = t.elapsed().as_secs_f64();
    let rss = peak_rss_kib();
    println!(
        "parse: {:.1} MB of dump ({} layers, {} instructions) in {:.2} s = {:.0} MB/s on one core",
        bytes as f64 / 1e6,
        layers,
        layers * 4 + 2,
        dt,
        bytes as f64 / 1e6 / dt
    );
    println!(
        "peak RSS: {:.1} MB (before parsing {:.1} MB) for {:.1} MB input = {:.2}x input",
        rss as f64 / 1024.0,
        rss_before as f64 / 1024.0,
        bytes as f64 / 1e6,
        rss as f64 * 1024.0 / bytes as f64
    );
    assert_eq!(mods[0].temp_bytes, 33554432);
    // Per-parser breakdown.
    for f in std::fs::read_dir(&big).unwrap() {
        let p = f.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let len = std::fs::metadata(&p).unwrap().len() as f64 / 1e6;
        let r = std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(&p).unwrap());
        let t = Instant::now();
        if name.ends_with("values.txt") {
            continue;
        } else if name.ends_with("-buffer-assignment.txt") {
            xla::buffer_assignment::parse_buffer_assignment(r, &p).unwrap();
        } else if name.ends_with("-live-range.txt") {
            xla::live_range::parse_live_range(r, &p).unwrap();
        } else {
            // Full parse keeping every instruction (the report keeps only what it needs).
            xla::hlo::parse_hlo(r, &p).unwrap();
        }
        let dt = t.elapsed().as_secs_f64();
        println!(
            "  {:>7.1} MB {:>6.0} MB/s  {} (parser alone)",
            len,
            len / dt,
            name
        );
    }
    let mut total = 0;
    for i in 0..500 {
        total += gen_module(&many, i, &format!("jit_f{}", i % 50), 60);
    }
    let t = Instant::now();
    let mods = xla::load_dump_dir(&many).unwrap();
    println!(
        "load_dump_dir on 500 modules ({:.1} MB): {:.3} s",
        total as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    assert_eq!(mods.len(), 500);
    println!("dirs: {} {}", big.display(), many.display());
}
