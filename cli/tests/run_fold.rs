//! `memwatch run` folds the capture while the command writes it: what it prints after the
//! command ends (the report, the verdict) is what `memwatch report` and `memwatch
//! diagnose` print for the capture file it wrote. Real runs of the shim's C test
//! program over the simulated HIP/CUDA runtime (agents/preload/tests): threads making
//! many calls (flushed in many frames, out of time order), ending with a real PyTorch
//! OOM on stderr; and a process that exec's another image (then the fold gives up and
//! the file is read back).

mod common;

use common::{repo, workspace};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test runtime (under the driver libraries' names) and the test program, built once.
fn built() -> &'static PathBuf {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("run-fold");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let src = workspace().join("agents/preload/tests");
        let rt = dir.join("libmemwatch_testrt.so");
        cc(&[
            "-O2",
            "-shared",
            "-fPIC",
            "-o",
            rt.to_str().expect("utf-8"),
            src.join("runtime/memwatch_testrt.c")
                .to_str()
                .expect("utf-8"),
            &format!(
                "-Wl,--version-script={}",
                src.join("runtime/memwatch_testrt.map").display()
            ),
            "-lpthread",
        ]);
        for n in ["libamdhip64.so", "libcuda.so", "libcudart.so"] {
            let l = dir.join(n);
            let _ = std::fs::remove_file(&l);
            std::os::unix::fs::symlink("libmemwatch_testrt.so", &l).expect("symlink");
        }
        let prog = dir.join("mwtest_dl");
        cc(&[
            "-O2",
            "-o",
            prog.to_str().expect("utf-8"),
            src.join("c/mwtest.c").to_str().expect("utf-8"),
            "-ldl",
            "-lpthread",
        ]);
        dir
    })
}

/// `memwatch run --json-out run.json --out c.mwcap -- sh -c SCRIPT` in `work`, with
/// `MEMWATCH_RUN_TIMING=1`; the test program is `$MWTEST`.
fn run(work: &Path, script: &str, buffer_events: &str) -> (Output, Value) {
    let dir = built();
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work)
        .env("MEMWATCH_PRELOAD", common::shim())
        .env("MWTEST_LIBDIR", dir)
        .env("MWTEST", dir.join("mwtest_dl"))
        .env("MEMWATCH_RUN_TIMING", "1")
        .env("MEMWATCH_BUFFER_EVENTS", buffer_events)
        .env_remove("XLA_FLAGS")
        .args(["run", "--json-out", "run.json", "--out", "c.mwcap", "--"])
        .args(["sh", "-c", script])
        .output()
        .expect("memwatch runs");
    let doc = std::fs::read_to_string(work.join("run.json")).expect("--json-out written");
    (out, serde_json::from_str(&doc).expect("JSON"))
}

fn json_of(work: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_memwatch"))
        .current_dir(work)
        .args(args)
        .output()
        .expect("memwatch runs");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {out:?}"))
}

fn events(report: &Value) -> u64 {
    report["events"].as_u64().expect("events")
}

#[test]
fn the_report_and_verdict_after_the_run_are_those_of_the_file_it_wrote() {
    let work = tempfile::tempdir().expect("temp dir");
    let oom = repo("testdata/oom-corpus/torch_fraction/stderr.log");
    // Three threads of allocate/free pairs in small buffers: many frames, each thread's
    // flushed separately; then the OOM a real PyTorch run printed.
    let script = format!(
        "\"$MWTEST\" dlsym bench 3 40 1000 > /dev/null; cat '{}' >&2; exit 1",
        oom.display()
    );
    let (out, doc) = run(work.path(), &script, "65536");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("capture folded while written"),
        "the fold was not used: {stderr}"
    );
    let report = json_of(work.path(), &["report", "--json", "c.mwcap"]);
    assert!(events(&report) > 200_000, "{}", events(&report));
    assert_eq!(doc["report"], report, "the run's report is not the file's");
    let diagnosis = json_of(
        work.path(),
        &["diagnose", "--json", "c.mwcap", "c.stderr.log"],
    );
    // The run knows the command's exit status (1): the OOM it printed ended the run. The
    // file records that status (the only process it holds, the one the OOM is placed in,
    // exited 0), so its diagnosis is the run's.
    assert_eq!(
        doc["diagnosis"]["verdicts"][0]["kind"],
        "torch_fraction_limit"
    );
    assert_eq!(doc["diagnosis"]["failed"], true);
    assert_eq!(
        diagnosis["verdicts"], doc["diagnosis"]["verdicts"],
        "the file's verdicts are not the run's"
    );
    assert_eq!(diagnosis["failed"], true);
    for k in ["devices", "imbalance", "sources"] {
        assert_eq!(
            doc["diagnosis"][k], diagnosis[k],
            "{k}: the run's is not the file's"
        );
    }
}

#[test]
fn an_exec_makes_the_run_read_its_capture_back_with_the_same_result() {
    let work = tempfile::tempdir().expect("temp dir");
    let (out, doc) = run(work.path(), "exec \"$MWTEST\" dlsym exec", "16384");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not folded while written: a process exec'd another image"),
        "{stderr}"
    );
    let report = json_of(work.path(), &["report", "--json", "c.mwcap"]);
    assert_eq!(report["processes"].as_array().map(Vec::len), Some(2));
    assert_eq!(doc["report"], report);
}
