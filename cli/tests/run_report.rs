//! `memwatch run` and `memwatch report` as a user runs them: real child processes,
//! exit codes and signals, capture files good, cut off and foreign.

mod common;

use common::report_json;

use std::path::Path;
use std::process::{Command, Output};

use memwatch_wire::*;

fn memwatch() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memwatch"))
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    memwatch()
        .current_dir(dir)
        .env("MEMWATCH_PRELOAD", common::shim())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn exit_code_is_the_commands_and_capture_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(
        dir.path(),
        &[
            "run", "--out", "a.mwcap", "--tag", "run=t1", "--", "sh", "-c", "exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("command exited with status 3"), "{err}");
    let v = report_json(&dir.path().join("a.mwcap"));
    assert_eq!(v["damage"].as_array().unwrap().len(), 0);
    assert_eq!(v["tags"]["run"], "t1");
    for p in v["processes"].as_array().unwrap() {
        for d in p["devices"].as_array().unwrap() {
            assert_eq!(d["alloc_count"], 0);
        }
    }
}

#[test]
fn killed_command_exits_128_plus_signal() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(
        dir.path(),
        &["run", "--out", "k.mwcap", "--", "sh", "-c", "kill -KILL $$"],
    );
    assert_eq!(out.status.code(), Some(137));
    assert!(String::from_utf8_lossy(&out.stderr).contains("killed by signal 9"));
    report_json(&dir.path().join("k.mwcap"));
}

#[test]
fn sigterm_to_memwatch_is_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = memwatch()
        .current_dir(dir.path())
        .env("MEMWATCH_PRELOAD", common::shim())
        .args([
            "run", "--quiet", "--out", "s.mwcap", "--", "sleep", "infinity",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: plain kill(2) on our own child.
    unsafe_kill(child.id() as i32, 15);
    // The command never ends by itself: only the forwarded SIGTERM ends it (and memwatch,
    // with its status).
    let status = common::wait_or_hung(&mut child, "SIGTERM was not forwarded to the command");
    assert_eq!(status.code(), Some(143));
    report_json(&dir.path().join("s.mwcap"));
}

fn unsafe_kill(pid: i32, sig: i32) {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn json_run_report_and_default_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &["run", "--json", "--", "true"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_code"], 0);
    let cap = v["capture"].as_str().unwrap();
    assert!(
        cap.starts_with("memwatch-true-") && cap.ends_with(".mwcap"),
        "{cap}"
    );
    assert!(dir.path().join(cap).is_file());
    assert!(v["report"]["processes"].is_array());
}

/// CMD's status survives a capture that cannot be read back (--out /dev/null: fsync
/// says EINVAL there, which replaced status 7 by 2), and --json-out keeps the document
/// out of CMD's stdout.
#[test]
fn dev_null_capture_keeps_the_status_and_json_out_keeps_stdout_clean() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(
        dir.path(),
        &[
            "run",
            "--out",
            "/dev/null",
            "--",
            "sh",
            "-c",
            "echo hello; exit 7",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a file: no report"));
    let out = run_in(
        dir.path(),
        &[
            "run",
            "--out",
            "/dev/null",
            "--json",
            "--",
            "sh",
            "-c",
            "exit 7",
        ],
    );
    assert_eq!(out.status.code(), Some(7));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["exit_code"].clone(), v["report"].clone()),
        (7.into(), serde_json::Value::Null)
    );

    let doc = dir.path().join("run.json");
    let out = run_in(
        dir.path(),
        &[
            "run",
            "--out",
            "c.mwcap",
            "--json-out",
            doc.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo only-mine",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "only-mine\n");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&doc).unwrap()).unwrap();
    assert_eq!(v["exit_code"], 0);
    assert!(v["report"]["processes"].is_array());
    // A --json-out that cannot be written is refused before CMD runs, and so is one that
    // names the capture file itself.
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let out = run_in(
        dir.path(),
        &[
            "run",
            "--json-out",
            "/nonexistent/dir/r.json",
            "--",
            "sh",
            "-c",
            &touch,
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--json-out /nonexistent/dir/r.json"));
    let out = run_in(
        dir.path(),
        &[
            "run",
            "--out",
            "same.mwcap",
            "--json-out",
            "./same.mwcap",
            "--",
            "sh",
            "-c",
            &touch,
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is the capture file"));
    assert!(!marker.exists(), "CMD ran");
}

#[test]
fn missing_shim_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = memwatch()
        .current_dir(dir.path())
        .env("MEMWATCH_PRELOAD", dir.path().join("nope.so"))
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nope.so") && err.contains("MEMWATCH_PRELOAD"),
        "{err}"
    );
}

#[test]
fn command_not_found_is_exit_127_and_removes_only_what_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(
        dir.path(),
        &["run", "--out", "x.mwcap", "--", "/no/such/cmd"],
    );
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run /no/such/cmd"));
    assert!(
        !dir.path().join("x.mwcap").exists(),
        "no capture for a command that never ran"
    );
    // A path that existed (here a symlink to a file) is not removed; 126 for a file that
    // cannot be executed.
    std::fs::write(dir.path().join("target.txt"), "x").unwrap();
    std::os::unix::fs::symlink("target.txt", dir.path().join("link")).unwrap();
    let out = run_in(dir.path(), &["run", "--out", "link", "--", "./target.txt"]);
    assert_eq!(out.status.code(), Some(126));
    assert!(
        dir.path().join("link").symlink_metadata().is_ok(),
        "link kept"
    );
    // ... and neither is its content: an existing file is replaced only once CMD ran.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("target.txt")).unwrap(),
        "x"
    );
    std::fs::write(dir.path().join("old.mwcap"), "keep me").unwrap();
    let out = run_in(
        dir.path(),
        &["run", "--out", "old.mwcap", "--", "/no/such/cmd"],
    );
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("old.mwcap")).unwrap(),
        "keep me"
    );
    // When CMD runs, the capture replaces the file (through the link, the link stays).
    let out = run_in(
        dir.path(),
        &["run", "--quiet", "--out", "link", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(dir
        .path()
        .join("link")
        .symlink_metadata()
        .unwrap()
        .file_type()
        .is_symlink());
    let v = report_json(&dir.path().join("target.txt"));
    assert_eq!(v["damage"].as_array().unwrap().len(), 0);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // A drain timeout that is not a finite number of seconds is refused before CMD runs.
    for bad in ["inf", "NaN", "-1", "1e30"] {
        let out = run_in(
            dir.path(),
            &[
                "run",
                "--drain-timeout",
                bad,
                "--out",
                "d.mwcap",
                "--",
                "true",
            ],
        );
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--drain-timeout"),
            "{bad}"
        );
        assert!(!dir.path().join("d.mwcap").exists(), "{bad}");
    }
}

fn sample_capture() -> Vec<u8> {
    sample_capture_ending(1)
}

fn sample_capture_ending(exit_code: i32) -> Vec<u8> {
    let mut w = FrameWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::ProcessStart(ProcessStart {
        pid: 42,
        ppid: 1,
        mono_anchor_ns: 1000,
        wall_anchor_unix_ns: 1_795_000_000_000_000_000,
        argv: vec!["python3".into(), "train.py".into()],
        ..ProcessStart::default()
    }))
    .unwrap();
    let mk = |ts: u64, kind: EventKind, ptr: u64, size: u64, result: i32| Event {
        ts_ns: 1000 + ts,
        duration_ns: 10,
        ptr,
        size,
        pid: 42,
        tid: 42,
        result,
        device: 0,
        ..Event::new(kind, MemKind::Device, Api::HipMalloc)
    };
    w.write_record(&Record::Events(vec![
        mk(10, EventKind::Alloc, 0x100, 1 << 20, 0),
        mk(20, EventKind::Alloc, 0x200, 3 << 20, 0),
        mk(30, EventKind::AllocFailed, 0, 1 << 34, 2),
    ]))
    .unwrap();
    w.write_record(&Record::ProcessEnd(ProcessEnd {
        pid: 42,
        ts_ns: 2000,
        exit_code,
    }))
    .unwrap();
    w.into_inner().unwrap()
}

/// A process that called abort() ends with 134 in the capture; the report names it.
#[test]
fn report_names_the_signal_of_an_exit_above_128() {
    let dir = tempfile::tempdir().unwrap();
    for (code, want) in [
        (134, "exit 134 (128 + SIGABRT: abort())"),
        (137, "exit 137 (128 + SIGKILL)"),
        (1, "exit 1,"),
        (200, "exit 200,"),
    ] {
        let path = dir.path().join(format!("e{code}.mwcap"));
        std::fs::write(&path, sample_capture_ending(code)).unwrap();
        let out = memwatch().arg("report").arg(&path).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(want), "{code}: {text}");
        assert_eq!(report_json(&path)["processes"][0]["exit_code"], code);
    }
    // An end recorded without a status (the wire's -1): JSON says null, as `attach`
    // does for an unknown status, and keeps end_ns; the text says the process ended.
    let path = dir.path().join("unknown.mwcap");
    std::fs::write(&path, sample_capture_ending(-1)).unwrap();
    let out = memwatch().arg("report").arg(&path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ended (exit status not known to the shim)"),
        "{text}"
    );
    let p = &report_json(&path)["processes"][0];
    assert!(p["exit_code"].is_null(), "{p}");
    assert!(p["end_ns"].is_u64(), "{p}");
}

#[test]
fn report_human_json_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.mwcap");
    std::fs::write(&path, sample_capture()).unwrap();
    let v = report_json(&path);
    let d = &v["processes"][0]["devices"][0];
    assert_eq!(d["peak_bytes"], 4 << 20);
    assert_eq!(d["peak_ts_ns"], 20);
    assert_eq!(d["failed_count"], 1);
    assert_eq!(v["failures"][0]["result_name"], "hipErrorOutOfMemory");

    let out = memwatch().arg("report").arg(&path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("process 42"), "{text}");
    assert!(text.contains("4.00 MiB"), "{text}");
    assert!(text.contains("hipErrorOutOfMemory"), "{text}");

    let out = memwatch()
        .args(["report", "--trace", "--device", "0"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(
        lines,
        vec![
            r#"{"op":"alloc","id":1,"size":1048576,"ts_ns":10,"device":0,"stream":0}"#,
            r#"{"op":"alloc","id":2,"size":3145728,"ts_ns":20,"device":0,"stream":0}"#,
        ]
    );
    // A device the capture does not have: an error naming the devices it has, not an
    // empty trace with exit 0.
    let out = memwatch()
        .args(["report", "--trace", "--device", "5"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no event of device 5 (devices in the capture: 0)"),
        "{err}"
    );
}

#[test]
fn report_of_cut_off_capture_lists_damage_and_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.mwcap");
    let full = sample_capture();
    std::fs::write(&path, &full[..full.len() - 4]).unwrap();
    let out = memwatch()
        .args(["report", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("damaged capture") && err.contains("cut off"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["processes"][0]["devices"][0]["peak_bytes"], 4 << 20);
    assert_eq!(v["processes"][0]["exit_code"], serde_json::Value::Null);
    assert_eq!(v["damage"][0]["bytes_lost"], 25 - 4); // process_end frame: 4 + 1 + 16 + 4
}

#[test]
fn report_of_a_foreign_file_is_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "these are not the bytes you are looking for\n").unwrap();
    let out = memwatch().arg("report").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("notes.txt") && err.contains("wrong magic"),
        "{err}"
    );
}

/// Real devices come first in `processes[].devices` (`devices[0]` is device 0 of a
/// one-GPU run); the row of calls that name no device (-1: VMM address reservations)
/// comes last.
#[test]
fn report_json_lists_real_devices_before_the_no_device_row() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/h200-captures/jax0.11.2-platform-allocator.mwcap"
    );
    let v = report_json(std::path::Path::new(path));
    let devices: Vec<i64> = v["processes"][0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device"].as_i64().unwrap())
        .collect();
    assert_eq!(devices, [0, -1]);
    assert_eq!(v["processes"][0]["devices"][0]["peak_bytes"], 505596424u64);
}

#[test]
fn run_db_with_nothing_captured_says_nothing_was_stored() {
    // A command that makes no hooked call leaves a capture without a process: there is
    // no run to store, and the line used to read "stored 0 events as run -".
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mw.db");
    let cap = dir.path().join("empty.mwcap");
    let out = memwatch()
        .args([
            "run",
            "--out",
            cap.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
        ])
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nothing to store: ") && err.contains("empty.mwcap holds no process"),
        "{err}"
    );
    assert!(!err.contains("as run -"), "{err}");
}
