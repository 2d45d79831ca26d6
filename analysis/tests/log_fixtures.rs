//! Every real log fixture parses; the incident's OOM is joined to jit_model's temp buffer.

use memwatch_analysis::log::{self, diagnose::diagnose, LogReport};
use memwatch_analysis::xla;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p)
}

fn parse(p: &Path) -> LogReport {
    let mut r = LogReport::default();
    log::parse_log(BufReader::new(File::open(p).unwrap()), p, &mut r).unwrap();
    r
}

#[test]
fn incident_log_and_diagnosis() {
    let dir = repo("testdata/h200/incidents/h200-jax0.11.2-oom-temp");
    let r = parse(&dir.join("run.log"));
    assert_eq!(r.remat_warnings.len(), 1);
    assert_eq!(r.remat_warnings[0].target_bytes, 3019269741);
    assert_eq!(r.remat_warnings[0].original_bytes, 7784628364);
    assert_eq!(r.pool_allocations[0].bytes, 3753902080);
    assert_eq!(r.ooms.len(), 1);
    let oom = &r.ooms[0];
    assert_eq!(oom.rounded_bytes, 3489675008);
    assert_eq!(oom.allocator, "GPU_0_bfc");
    assert_eq!(oom.end.as_deref(), Some("lower"));
    assert_eq!(oom.regions, vec![3753902080]);
    assert_eq!(oom.chunks.len(), 37);
    assert_eq!(oom.chunks.iter().filter(|c| !c.in_use).count(), 1);
    assert_eq!(oom.in_use_bytes(), Some(3 * 256 + 32 * 33554432 + 67108864));
    assert_eq!(oom.largest_free_chunk(), Some(2613050624));
    assert_eq!(
        oom.stats.as_ref().unwrap().approx["bytes_limit"],
        3758096384
    );
    assert_eq!(
        r.resource_exhausted[0].executable.as_deref(),
        Some("jit_model")
    );
    assert_eq!(r.memory_analyses[0]["temp_size_in_bytes"], 3489674768);
    assert!(r
        .allocator_stats
        .iter()
        .any(|s| s.label.as_deref() == Some("MEMORY_STATS_BEFORE")
            && s.exact["bytes_limit"] == 3753902080));

    let mods = xla::load_dump_dir(&dir).unwrap();
    let d = &diagnose(&r, &mods, Some(0.025))[0];
    let m = d.matched.as_ref().unwrap();
    assert_eq!(
        (m.module.as_str(), m.bytes, m.rounded_bytes),
        ("jit_model", 3489674768, 3489675008)
    );
    assert_eq!(m.what, "preallocated temp buffer");
    assert_eq!(d.needed_bytes, 1140851456 + 3489675008);
    assert_eq!(
        d.shortfall_bytes,
        Some(1140851456 + 3489675008 - 3753902080)
    );
    assert_eq!(d.device_memory_bytes, Some(150156083200));
    assert_eq!(d.suggested_mem_fraction, Some(0.04));
    assert!(!d.module_peak_buffers.is_empty());
}

#[test]
fn all_log_fixtures_parse() {
    let seeds = repo("testdata/h200/seeds/xla-2025-log-lines.txt");
    let r = parse(&seeds);
    assert_eq!(r.remat_warnings.len(), 10);
    assert_eq!(r.ooms[0].rounded_bytes, 51712165888);
    assert_eq!(r.ooms[0].in_use_bytes(), None);
    assert_eq!(r.resource_exhausted[0].bytes, Some(51712165888));
    let s = parse(&repo("testdata/h200/seeds/allocator-stats-block.txt"));
    assert_eq!(s.allocator_stats[0].exact["bytes_limit"], 31804391424);
    assert_eq!(s.allocator_stats[0].exact["largest_alloc_size"], 7049475840);
    let hlo = repo("testdata/h200/seeds/pad-spmd-sample.hlo.txt");
    let mut rr = LogReport::default();
    assert!(log::parse_log(BufReader::new(File::open(&hlo).unwrap()), &hlo, &mut rr).is_err());
    let b = parse(&repo("testdata/h200/bfc/h200-jax0.11.2/oom-26x4GiB.log"));
    assert_eq!(b.ooms[0].rounded_bytes, 4294967296);
    assert_eq!(b.ooms[0].in_use_by_size, vec![(1, 256), (26, 4294967296)]);
    assert_eq!(
        b.resource_exhausted[0].executable.as_deref(),
        Some("jit_add")
    );
    let s12 = parse(&repo("testdata/h200/bfc/h200-jax0.11.2/bfc_seed12.log"));
    assert_eq!(s12.ooms[0].rounded_bytes, 1349907200);
    assert!(!s12.ooms[0].chunks.is_empty());
}

/// The incident log cut at every line inside its chunk dump: the in-use figure is either
/// the whole one (from the by-size summary, printed after the chunks) or unknown, never a
/// smaller sum of the chunk lines read so far; no fraction is suggested without it, and a
/// replay of the cut log is refused.
#[test]
fn a_chunk_dump_cut_off_gives_no_smaller_in_use() {
    let dir = repo("testdata/h200/incidents/h200-jax0.11.2-oom-temp");
    let text = std::fs::read_to_string(dir.join("run.log")).unwrap();
    let whole = parse(&dir.join("run.log"));
    let whole_in_use = whole.ooms[0].in_use_bytes().unwrap();
    assert!(whole.ooms[0].chunk_dump_complete());
    let lines: Vec<&str> = text.lines().collect();
    let first_chunk = lines.iter().position(|l| l.contains("InUse at ")).unwrap();
    let last_chunk = lines
        .iter()
        .rposition(|l| l.contains(" at ") && l.contains(" of size "))
        .unwrap();
    for n in first_chunk..=last_chunk {
        let cut = lines[..n].join("\n") + "\n";
        let mut r = LogReport::default();
        log::parse_log(cut.as_bytes(), Path::new("cut.log"), &mut r).unwrap();
        let oom = &r.ooms[0];
        assert!(!oom.chunk_dump_complete(), "{n}");
        assert_eq!(oom.in_use_bytes(), None, "{n}");
        assert_eq!(oom.largest_free_chunk(), None, "{n}");
        let d = diagnose(&r, &[], Some(0.025));
        assert_eq!(d[0].suggested_mem_fraction, None, "{n}");
        assert!(d[0].live_by_executable.is_empty(), "{n}");
        assert!(
            d[0].findings.iter().any(|f| f.contains("cut off")),
            "{n}: {:?}",
            d[0].findings
        );
        let e =
            memwatch_analysis::alloc::trace::read_oom_log(&cut, Path::new("cut.log")).unwrap_err();
        assert!(e.to_string().contains("chunk dump"), "{n}: {e}");
    }
    // Cut after the chunks but inside the summary: what is printed is whole or absent.
    for n in last_chunk + 1..lines.len() {
        let cut = lines[..n].join("\n") + "\n";
        let mut r = LogReport::default();
        log::parse_log(cut.as_bytes(), Path::new("cut.log"), &mut r).unwrap();
        assert_eq!(r.ooms[0].in_use_bytes(), Some(whole_in_use), "{n}");
    }
}

/// Sizes near 2^64 in a chunk dump do not overflow: the dump no longer adds up, so the
/// in-use figure is unknown.
#[test]
fn absurd_chunk_sizes_do_not_overflow() {
    let dir = repo("testdata/h200/incidents/h200-jax0.11.2-oom-temp");
    let text = std::fs::read_to_string(dir.join("run.log")).unwrap();
    let bad = text.replacen("of size 33554432", "of size 18446744073709551000", 2);
    let mut r = LogReport::default();
    log::parse_log(bad.as_bytes(), Path::new("bad.log"), &mut r).unwrap();
    assert!(!r.ooms[0].chunk_dump_complete());
    let d = diagnose(&r, &[], Some(0.025));
    assert_eq!(d.len(), 1);
}

/// A growing pool that failed below the limit its Stats block states could not grow: the
/// diagnosis says so instead of "the pool is too small" (the 26 x 4 GiB incident with its
/// `Limit:` raised above the 108 GiB need).
#[test]
fn a_pool_that_could_not_grow_is_not_called_too_small() {
    let text = std::fs::read_to_string(repo("testdata/h200/bfc/h200-jax0.11.2/oom-26x4GiB.log"))
        .unwrap()
        .replace(
            "Limit:                       104.85GiB",
            "Limit:                       108.50GiB",
        );
    let path = Path::new("grown.log");
    let mut r = LogReport::default();
    log::parse_log(BufReader::new(text.as_bytes()), path, &mut r).unwrap();
    let d = &diagnose(&r, &[], None)[0];
    let all = d.findings.join("\n");
    assert!(all.contains("could not grow by the request"), "{all}");
    assert!(!all.contains("the pool is too small"), "{all}");
    let whole = parse(&repo("testdata/h200/bfc/h200-jax0.11.2/oom-26x4GiB.log"));
    let all = diagnose(&whole, &[], None)[0].findings.join("\n");
    assert!(all.contains("the pool is too small"), "{all}");
}

/// A chunk dump whose region line is missing is not called "0 of the 0-byte pool": replay
/// refuses it saying which line is missing (the diagnosis still uses the by-size summary).
#[test]
fn a_chunk_dump_without_its_region_line_says_so() {
    let text: String =
        std::fs::read_to_string(repo("testdata/h200/bfc/h200-jax0.11.2/bfc_seed12.log"))
            .unwrap()
            .lines()
            .filter(|l| !l.contains("Next region of size"))
            .map(|l| format!("{l}\n"))
            .collect();
    let mut r = LogReport::default();
    log::parse_log(
        BufReader::new(text.as_bytes()),
        Path::new("s12g.log"),
        &mut r,
    )
    .unwrap();
    let all = diagnose(&r, &[], None)[0].findings.join("\n");
    assert!(
        !all.contains("0-byte") && !all.contains("0 B pool"),
        "{all}"
    );
    let e = memwatch_analysis::alloc::trace::from_bfc_oom(&r.ooms[0])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Next region of size") && !e.contains("0-byte pool"),
        "{e}"
    );
}

fn corpus(s: &str) -> LogReport {
    parse(&repo(&format!("testdata/oom-corpus/{s}/stderr.log")))
}

/// Compile-time autotuning OOM (JAX 0.11.2, H100): the BFC lines that say "not a failure"
/// are scratch refusals, not OOMs; the instruction whose configs all failed is named with
/// its op_name and stack frame.
#[test]
fn corpus_autotune_logs() {
    for (s, req_mib) in [
        ("jax_autotune", 1.02 * 1024.0),
        ("jax_autotune_c", 592.0),
        ("jax_autotune_e", 1.02 * 1024.0),
        ("jax_autotune_f", 272.0),
    ] {
        let r = corpus(s);
        assert!(r.ooms.is_empty(), "{s}: {:?}", r.ooms);
        assert!(!r.scratch_refusals.is_empty(), "{s}");
        let want = (req_mib * (1u64 << 20) as f64).round() as u64;
        let got = r.scratch_refusals[0].requested_approx_bytes.unwrap();
        assert!(got.abs_diff(want) < 1 << 20, "{s}: {got} vs {want}");
        let f = &r.autotune_failures[0];
        assert_eq!(
            f.instruction.as_deref(),
            Some("gemm_fusion_dot_general.1"),
            "{s}"
        );
        assert_eq!(f.op_name.as_deref(), Some("jit(step)/dot_general"), "{s}");
        assert_eq!(f.stack_frame_id, Some(2));
        assert_eq!(f.status_code.as_deref(), Some("RESOURCE_EXHAUSTED"));
        let e = r.exceptions.last().unwrap();
        assert_eq!(e.exc_type, "jax.errors.JaxRuntimeError");
        assert_eq!(e.user_frame().unwrap().line, 36, "{s}");
        assert!(r.resource_exhausted.iter().any(|x| x.at == e.at));
    }
}

/// PyTorch 2.11's messages, and CuPy's, in the corpus runs.
#[test]
fn corpus_framework_messages() {
    let r = corpus("torch_fragmentation");
    let t = &r.torch_ooms[0];
    assert_eq!(t.request_approx_bytes, Some(512 << 20));
    assert_eq!(t.allocated_approx_bytes, Some(4 << 30));
    assert_eq!(t.reserved_unallocated_approx_bytes, Some(4 << 30));
    assert_eq!(
        t.allowed_approx_bytes,
        Some((8.25 * (1u64 << 30) as f64) as u64)
    );
    assert_eq!(r.exceptions[0].exc_type, "torch.OutOfMemoryError");
    let r = corpus("torch_too_large");
    assert_eq!(r.torch_ooms[0].allowed_approx_bytes, None);
    let r = corpus("cupy_limit");
    assert_eq!(r.cupy_ooms[0].limit_bytes, Some(1610612736));
    let r = corpus("host_pinned");
    assert_eq!(r.driver_errors.len(), 2);
    assert_eq!(r.driver_errors[0].name, "cudaErrorMemoryAllocation");
    assert_eq!(r.exceptions.len(), 2);
    assert_eq!(r.exceptions[1].user_frame().unwrap().line, 16);
}

/// Two processes on one GPU: the JAX worker's growing pool logs every failed device
/// allocation, then its BFC OOM with the occupancy map.
#[test]
fn corpus_failed_pool_growth() {
    let r = corpus("two_processes");
    assert!(r.device_alloc_failures.len() > 10);
    let f = &r.device_alloc_failures[0];
    assert_eq!((f.device, f.bytes), (Some(0), 4294967296));
    assert_eq!(f.error, "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(r.ooms.len(), 1);
    assert_eq!(r.ooms[0].rounded_bytes, 536870912);
    let map = r.ooms[0].memory_map.as_ref().unwrap();
    assert_eq!(map.cells.len(), 100);
    let r = corpus("jax_fragmentation_b");
    let map = r.ooms[0].memory_map.as_ref().unwrap();
    assert!(map.holes() > 20, "{map:?}");
    let r = corpus("jax_too_large");
    assert_eq!(r.arguments_over_limit[0].argument_bytes, 111177052980);
}

/// Logs written from ROCm's message formats (testdata/rocm-written/README.md: not
/// recorded on an AMD GPU) parse like the CUDA ones.
#[test]
fn rocm_written_logs() {
    let r = parse(&repo("testdata/rocm-written/jax-mi300x-execute-oom.log"));
    assert_eq!(r.devices[0], "AMD Instinct MI300X");
    assert_eq!(r.xla_allocator.as_deref(), Some("BFC"));
    assert_eq!(r.pool_allocations[0].bytes, 154367164416);
    assert_eq!(r.ooms[0].rounded_bytes, 150323855360);
    assert_eq!(r.ooms[0].allocator, "GPU_0_bfc");
    assert_eq!(
        r.resource_exhausted[0].executable.as_deref(),
        Some("jit_train_step")
    );
    assert_eq!(r.exceptions[0].user_frame().unwrap().line, 88);
    let r = parse(&repo("testdata/rocm-written/torch-mi300x-oom.log"));
    let t = &r.torch_ooms[0];
    assert_eq!(t.backend, "HIP");
    assert_eq!(t.request_approx_bytes, Some(24 << 30));
    assert_eq!(r.exceptions[0].user_frame().unwrap().line, 141);
    let f = "failed to allocate 4.00GiB (4294967296 bytes) from device: HIP_ERROR_OutOfMemory";
    let mut r = LogReport::default();
    let line = format!("I0312 09:15:52.903114   40211 rocm_executor.cc:441] {f}\n");
    log::parse_log(line.as_bytes(), Path::new("x"), &mut r).unwrap();
    assert_eq!(r.device_alloc_failures[0].error, "HIP_ERROR_OutOfMemory");
}
