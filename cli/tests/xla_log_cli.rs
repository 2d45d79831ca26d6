//! End-to-end checks of `memwatch xla report|diff` and `memwatch log`: real fixtures give
//! the right figures; malformed input (truncated file, wrong file type, empty dir, binary
//! garbage) exits 2 with the file and line in a one-line message.

mod common;

use common::{mw, repo};

const MLP: &str = "testdata/h200/xla/h200-jax0.11.2-mlp";
const BA: &str = "module_3318.jit_mlp.sm_9.0a_gpu_after_optimizations-buffer-assignment.txt";

#[test]
fn report_json_matches_memory_analysis() {
    let (code, out, err) = mw(&[
        "xla",
        "report",
        repo(MLP).to_str().unwrap(),
        "--module",
        "jit_mlp",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let m = &v["modules"][0];
    assert_eq!(m["name"], "jit_mlp");
    assert_eq!(m["argument_bytes"], 71303168);
    assert_eq!(m["output_bytes"], 67108938);
    assert_eq!(m["temp_bytes"], 239103760);
    assert_eq!(m["alias_bytes"], 0);
    assert_eq!(m["total_allocation_bytes"], 377515950);
    assert!(m["peak_buffers"].as_array().unwrap().len() > 3);
}

#[test]
fn diff_reports_changes_and_added_modules() {
    let (code, out, err) = mw(&[
        "xla",
        "diff",
        repo(MLP).to_str().unwrap(),
        repo("testdata/h200/incidents/h200-jax0.11.2-oom-temp")
            .to_str()
            .unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["added"], serde_json::json!(["jit_model"]));
    assert_eq!(v["removed"], serde_json::json!(["jit_mlp", "jit_padf"]));
    // Same dump on both sides: every delta is zero.
    let (_, out, _) = mw(&[
        "xla",
        "diff",
        repo(MLP).to_str().unwrap(),
        repo(MLP).to_str().unwrap(),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["modules"][0]["figures"]["temp_bytes"][2], 0);
}

#[test]
fn log_diagnoses_incident() {
    let d = repo("testdata/h200/incidents/h200-jax0.11.2-oom-temp");
    let (code, out, err) = mw(&[
        "log",
        d.join("run.log").to_str().unwrap(),
        "--xla-dump",
        d.to_str().unwrap(),
        "--mem-fraction",
        "0.025",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("jit_model's preallocated temp buffer: 3489674768 bytes"),
        "{out}"
    );
    assert!(out.contains("XLA_CLIENT_MEM_FRACTION=0.04"), "{out}");
}

/// The OOM of `bfc_seed12.log` is fragmentation: 5.19 GiB needed of a 5.59 GiB pool.
/// The advice is a pool that holds the request even with the same fragmentation (the
/// current pool plus the request), never the fraction that just ran out.
#[test]
fn log_advice_for_fragmentation_is_a_larger_pool_than_the_one_that_failed() {
    let log = repo("testdata/h200/bfc/h200-jax0.11.2/bfc_seed12.log");
    let (code, out, err) = mw(&[
        "log",
        log.to_str().unwrap(),
        "--mem-fraction",
        "0.04",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let d = &v["diagnoses"][0];
    let (pool, req) = (
        d["pool_bytes"].as_u64().unwrap(),
        d["requested_bytes"].as_u64().unwrap(),
    );
    let f = d["suggested_mem_fraction"].as_f64().unwrap();
    assert!(f > 0.04, "suggested {f}, the run's own fraction was 0.04");
    let device = d["device_memory_bytes"].as_u64().unwrap() as f64;
    assert!(device * f >= (pool + req) as f64, "{d}");
    let text = d["findings"].to_string();
    assert!(text.contains("the pool is fragmented"), "{text}");
    assert!(
        text.contains("current 5.59 GiB pool plus the 1.26 GiB request"),
        "{text}"
    );
    // Without the fraction: a pool size, above the one that failed.
    let (_, out, _) = mw(&["log", log.to_str().unwrap()]);
    assert!(out.contains("give the pool at least 6.85 GiB"), "{out}");
}

/// A log cut inside its chunk dump: what else was live is unknown, so no pool size is
/// advised, and never one below the pool that failed.
#[test]
fn log_cut_in_its_chunk_dump_advises_no_pool_below_the_failed_one() {
    let tmp = tempfile::tempdir().unwrap();
    let full = std::fs::read_to_string(repo(
        "testdata/h200/incidents/h200-jax0.11.2-oom-temp/run.log",
    ))
    .unwrap();
    let cut = tmp.path().join("cut.log");
    let head: Vec<&str> = full.lines().take(60).collect();
    std::fs::write(&cut, head.join("\n") + "\n").unwrap();
    let (code, out, err) = mw(&["log", cut.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("give the pool at least"), "{out}");
    assert!(
        out.contains("the pool needs more than the 3.50 GiB it failed with"),
        "{out}"
    );
}

/// Only a rematerialization warning logged before the OOM explains it (the seed log has
/// warnings before, line 7, and after, lines 10-12, its OOM at lines 8-9).
#[test]
fn log_cites_the_remat_warning_before_the_oom_not_after() {
    let (code, out, err) = mw(&[
        "log",
        repo("testdata/h200/seeds/xla-2025-log-lines.txt")
            .to_str()
            .unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["diagnoses"][0]["remat"]["at"]["line"], 7, "{v}");
}

fn expect_exit2(args: &[&str], needle: &str) {
    let (code, out, err) = mw(args);
    assert_eq!(code, 2, "stdout {out} stderr {err}");
    assert!(err.contains(needle), "stderr {err:?} lacks {needle:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn malformed_inputs_exit_2_with_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(repo(MLP).join(BA)).unwrap();
    // Truncated buffer assignment: cut inside a header line.
    let t = tmp.path().join("trunc");
    std::fs::create_dir(&t).unwrap();
    let cut = src.find("allocation 17:").unwrap() + 20;
    std::fs::write(t.join(BA), &src[..cut]).unwrap();
    expect_exit2(&["xla", "report", t.to_str().unwrap()], &format!("{BA}:"));
    // Wrong file type: a log where a buffer assignment should be.
    let w = tmp.path().join("wrong");
    std::fs::create_dir(&w).unwrap();
    std::fs::copy(
        repo("testdata/h200/seeds/xla-2025-log-lines.txt"),
        w.join(BA),
    )
    .unwrap();
    expect_exit2(
        &["xla", "report", w.to_str().unwrap()],
        &format!("{BA}:1: not an XLA buffer-assignment file"),
    );
    // Empty directory.
    let e = tmp.path().join("empty");
    std::fs::create_dir(&e).unwrap();
    expect_exit2(
        &["xla", "report", e.to_str().unwrap()],
        "no XLA dump modules here",
    );
    // Binary garbage, in a dump and as a log.
    let b = tmp.path().join("bin");
    std::fs::create_dir(&b).unwrap();
    std::fs::write(
        b.join(BA),
        b"BufferAssignment:\n\x7fELF\x02\x01\xff\xfe\x00\n",
    )
    .unwrap();
    expect_exit2(
        &["xla", "report", b.to_str().unwrap()],
        &format!("{BA}:2: not UTF-8"),
    );
    let g = tmp.path().join("garbage.log");
    std::fs::write(&g, b"\x00\x01\x02\xff\xfe").unwrap();
    expect_exit2(&["log", g.to_str().unwrap()], "garbage.log:1:");
    // Truncated HLO (computation never closed).
    let h = tmp.path().join("hlo");
    std::fs::create_dir(&h).unwrap();
    std::fs::copy(repo(MLP).join(BA), h.join(BA)).unwrap();
    let hlo_name = BA.replace("-buffer-assignment.txt", ".txt");
    let hlo = std::fs::read_to_string(repo(MLP).join(&hlo_name)).unwrap();
    std::fs::write(h.join(&hlo_name), &hlo[..hlo.len() / 2]).unwrap();
    expect_exit2(
        &["xla", "report", h.to_str().unwrap()],
        &format!("{hlo_name}:"),
    );
    // Wrong file type for `log` and a missing file.
    expect_exit2(
        &[
            "log",
            repo("testdata/h200/seeds/pad-spmd-sample.hlo.txt")
                .to_str()
                .unwrap(),
        ],
        "pad-spmd-sample.hlo.txt:1: not an XLA/JAX/TSL log",
    );
    expect_exit2(&["xla", "report", "/nonexistent/dir"], "/nonexistent/dir");
    // The OS error is said once, not once per layer of the error.
    let (_, _, err) = mw(&["xla", "report", "/nonexistent/dir"]);
    assert_eq!(err.matches("no such file or directory").count(), 1, "{err}");
    // A directory given to `log` (it reads log files, not dumps).
    expect_exit2(
        &["log", tmp.path().to_str().unwrap()],
        "is a directory; give the log file(s) in it",
    );
}
