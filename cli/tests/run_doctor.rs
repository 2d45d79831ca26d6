//! `memwatch run` and the OOM doctor: the command's stderr reaches memwatch's stderr
//! unchanged and is copied beside the capture; the allocator settings are recorded in the
//! capture; XLA_FLAGS gets a dump folder (the user's own flags kept, a temporary folder
//! removed afterwards); and when the command ran out of memory the verdict follows the
//! summary. The out-of-memory text is a real PyTorch run's stderr (the H100 corpus),
//! replayed by the command: no GPU is needed.

mod common;

use common::{repo, report_json};
use std::path::Path;
use std::process::{Command, Output};

fn run_in(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memwatch"));
    c.current_dir(dir)
        .env("MEMWATCH_PRELOAD", common::shim())
        .env_remove("XLA_FLAGS")
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn stderr_passes_through_unchanged_is_copied_and_the_verdict_follows() {
    let dir = tempfile::tempdir().unwrap();
    let log = repo("testdata/oom-corpus/torch_fraction/stderr.log");
    // One hooked call (the ROCm runtime on this machine answers hipErrorInvalidDevice
    // without a GPU), so a process reaches the shim and the settings are recorded.
    let hip = "import ctypes; ctypes.CDLL('libamdhip64.so').hipMalloc(ctypes.byref(ctypes.c_void_p()), 1 << 20)";
    let script = format!(
        "echo to-stdout; python3 -c \"{hip}\"; cat '{}' >&2; exit 1",
        log.display()
    );
    let out = run_in(
        dir.path(),
        &[(
            "PYTORCH_CUDA_ALLOC_CONF",
            "garbage_collection_threshold:0.9",
        )],
        &["run", "--out", "r.mwcap", "--", "sh", "-c", &script],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "to-stdout\n");
    let original = std::fs::read(&log).unwrap();
    // The command's bytes come first, unchanged; memwatch's summary and verdict follow.
    assert!(out.stderr.starts_with(&original), "stderr changed");
    assert_eq!(
        std::fs::read(dir.path().join("r.stderr.log")).unwrap(),
        original
    );
    let after = String::from_utf8_lossy(&out.stderr[original.len()..]).to_string();
    let summary = after
        .find("memwatch: command exited with status 1")
        .unwrap();
    let verdict = after.find("torch_fraction_limit — failure").unwrap();
    assert!(summary < verdict, "{after}");
    assert!(after.contains("stderr copy: r.stderr.log"), "{after}");
    // The settings are in the capture, so the diagnosis knows them later too.
    let report = report_json(&dir.path().join("r.mwcap"));
    assert_eq!(report["processes"].as_array().unwrap().len(), 1, "{report}");
    let tags = &report["tags"];
    assert_eq!(tags["env"], "recorded");
    assert_eq!(
        tags["env.PYTORCH_CUDA_ALLOC_CONF"],
        "garbage_collection_threshold:0.9"
    );
    // --json-out carries the diagnosis for a store.
    let out = run_in(
        dir.path(),
        &[],
        &[
            "run",
            "--out",
            "j.mwcap",
            "--json-out",
            "j.json",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("j.json")).unwrap()).unwrap();
    assert_eq!(
        j["diagnosis"]["verdicts"][0]["kind"],
        "torch_fraction_limit"
    );
    assert_eq!(j["diagnosis"]["failed"], true);
    assert_eq!(j["stderr_log"], "j.stderr.log");
}

#[test]
fn a_clean_run_prints_no_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(
        dir.path(),
        &[],
        &["run", "--out", "c.mwcap", "--", "sh", "-c", "echo fine >&2"],
    );
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("fine\n"), "{err}");
    assert!(!err.contains("diagnosis:"), "{err}");
}

#[test]
fn xla_flags_get_a_dump_folder_and_keep_the_users_own() {
    let dir = tempfile::tempdir().unwrap();
    let show = ["sh", "-c", "printf '%s' \"$XLA_FLAGS\" > flags.txt"];
    let flags = |d: &Path| std::fs::read_to_string(d.join("flags.txt")).unwrap();
    // Default: the user's flags, then a temporary dump folder that is gone afterwards.
    let mut args = vec!["run", "--quiet", "--out", "a.mwcap", "--"];
    args.extend(show);
    let out = run_in(
        dir.path(),
        &[("XLA_FLAGS", "--xla_gpu_autotune_level=2")],
        &args,
    );
    assert_eq!(out.status.code(), Some(0));
    let f = flags(dir.path());
    assert!(
        f.starts_with("--xla_gpu_autotune_level=2 --xla_dump_to="),
        "{f}"
    );
    assert!(f.ends_with(" --xla_dump_hlo_as_text"), "{f}");
    let tmp = f
        .split_whitespace()
        .find_map(|w| w.strip_prefix("--xla_dump_to="))
        .unwrap()
        .to_string();
    assert!(
        !Path::new(&tmp).exists(),
        "temporary dump {tmp} left behind"
    );
    // --xla-dump DIR: that folder (created by XLA; here by the command) is kept.
    let mut args = vec![
        "run",
        "--quiet",
        "--out",
        "b.mwcap",
        "--xla-dump",
        "dump",
        "--",
    ];
    let mk = [
        "sh",
        "-c",
        "mkdir -p dump && printf '%s' \"$XLA_FLAGS\" > flags.txt",
    ];
    args.extend(mk);
    run_in(dir.path(), &[], &args);
    assert_eq!(
        flags(dir.path()),
        "--xla_dump_to=dump --xla_dump_hlo_as_text"
    );
    assert!(dir.path().join("dump").is_dir());
    // The user's own dump folder is used as it is; --no-xla-dump leaves the flags alone.
    let mut args = vec!["run", "--quiet", "--out", "c.mwcap", "--"];
    args.extend(show);
    run_in(dir.path(), &[("XLA_FLAGS", "--xla_dump_to=/x/y")], &args);
    assert_eq!(flags(dir.path()), "--xla_dump_to=/x/y");
    let mut args = vec!["run", "--quiet", "--no-xla-dump", "--out", "d.mwcap", "--"];
    args.extend(show);
    run_in(dir.path(), &[], &args);
    assert_eq!(flags(dir.path()), "");
}

#[test]
fn a_stderr_copy_that_was_there_is_kept_when_the_command_cannot_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x.stderr.log"), "keep me").unwrap();
    let out = run_in(
        dir.path(),
        &[],
        &["run", "--out", "x.mwcap", "--", "/no/such/cmd"],
    );
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("x.stderr.log")).unwrap(),
        "keep me"
    );
    let out = run_in(
        dir.path(),
        &[],
        &["run", "--out", "y.mwcap", "--", "/no/such/cmd"],
    );
    assert_eq!(out.status.code(), Some(127));
    assert!(!dir.path().join("y.stderr.log").exists());
}

/// `--torch-snapshot FILE`: the snapshot the command wrote joins the diagnosis. The
/// command replays torch_leak_b's real stderr and writes its real snapshot: the leak with
/// PyTorch's own growth per step (figures.json), fragmentation only an `also`. A snapshot
/// the command did not write is said, and the verdict still comes from the stderr.
#[test]
fn a_snapshot_the_command_wrote_joins_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = repo("testdata/oom-corpus/torch_leak_b");
    let script = format!(
        "cp '{}' snap.pickle; cat '{}' >&2; exit 1",
        corpus.join("snapshot.pickle").display(),
        corpus.join("stderr.log").display()
    );
    let args = |snap: &'static str| {
        [
            "run",
            "--quiet",
            "--json",
            "--no-xla-dump",
            "--torch-snapshot",
            snap,
            "--out",
            "t.mwcap",
            "--",
            "sh",
            "-c",
        ]
    };
    let mut a = args("snap.pickle").to_vec();
    a.push(&script);
    let out = run_in(dir.path(), &[], &a);
    assert_eq!(out.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let v = &j["diagnosis"]["verdicts"][0];
    assert_eq!(v["kind"], "leak", "{j}");
    assert_eq!(v["figures"]["growth_per_step_bytes"], 100663808);
    assert!(v["also"]
        .as_array()
        .unwrap()
        .contains(&"fragmentation".into()));
    let script = format!("cat '{}' >&2; exit 1", corpus.join("stderr.log").display());
    let mut a = args("none.pickle").to_vec();
    a.push(&script);
    let out = run_in(dir.path(), &[], &a);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--torch-snapshot none.pickle: the command did not write it"),
        "{err}"
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["diagnosis"]["verdicts"][0]["kind"].is_string(), "{j}");
}

#[test]
fn a_capture_that_cannot_be_written_is_said_and_the_commands_status_kept() {
    let dir = tempfile::tempdir().unwrap();
    // /dev/full takes no byte: the capture's flush at the end fails (ENOSPC).
    for code in [0, 3] {
        let script = format!("echo from-the-command >&2; exit {code}");
        let out = run_in(
            dir.path(),
            &[],
            &["run", "--out", "/dev/full", "--", "sh", "-c", &script],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert!(err.contains("from-the-command"), "{err}");
        assert!(
            err.contains("memwatch: error: capture /dev/full is incomplete:")
                && err.contains("No space left on device"),
            "{err}"
        );
        assert!(!err.contains("capture written to"), "{err}");
    }
}
