//! Attach's error paths: each says what is wrong (no such process, a static binary,
//! ...), and a failed attach leaves an existing `--out` file as it was.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::*;

#[test]
fn error_paths_are_specific() {
    let out = memwatch()
        .args(["attach", "999999999", "--method", "ptrace"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no such process: pid 999999999"), "{err}");
    // 0 is not a process id (it used to be looked up as /proc/0).
    let out = memwatch().args(["attach", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid value '0' for '<PID>'") && !err.contains("/proc/0"),
        "{err}"
    );

    let mut st = Command::new(&built().target_static).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let out = memwatch()
        .args([
            "attach",
            &st.id().to_string(),
            "--method",
            "ptrace",
            "--shim",
        ])
        .arg(&built().shim)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("statically linked"), "{err}");
    assert!(
        st.wait().unwrap().success(),
        "the static program ran on unaffected"
    );

    let out = memwatch()
        .args(["attach", "1", "--duration", "5x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown unit"));

    // ptrace denied: memwatch without CAP_SYS_PTRACE (dropped from its bounding set by
    // setpriv) against a process of another uid. Needs root to set that up.
    if unsafe { libc::geteuid() } == 0 && Command::new("setpriv").arg("--version").output().is_ok()
    {
        let mut other = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sleep",
                "5",
            ])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let out = Command::new("setpriv")
            .args(["--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", "--"])
            .arg(env!("CARGO_BIN_EXE_memwatch"))
            .args([
                "attach",
                &other.id().to_string(),
                "--method",
                "ptrace",
                "--shim",
            ])
            .arg(&built().shim)
            .output()
            .unwrap();
        let _ = other.kill();
        let _ = other.wait();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("not permitted")
                && err.contains("uid 65534")
                && err.contains("CAP_SYS_PTRACE"),
            "{err}"
        );
    }

    // A process started under `memwatch run` (MEMWATCH_SINK set) is refused.
    let mut under_run = Command::new("sleep")
        .arg("3")
        .env("MEMWATCH_SINK", "unix:/nonexistent")
        .spawn()
        .unwrap();
    let out = memwatch()
        .args(["attach", &under_run.id().to_string(), "--shim"])
        .arg(&built().shim)
        .output()
        .unwrap();
    let _ = under_run.kill();
    let _ = under_run.wait();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already captured by `memwatch run`"));
}

/// An attach that attaches to nothing leaves an existing --out file as it was (it was
/// deleted before); one that captures replaces it.
#[test]
fn a_failed_attach_keeps_an_existing_out_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("old.mwcap");
    std::fs::write(&out, "keep me").unwrap();
    let not_a_shim = [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists());
    let Some(not_a_shim) = not_a_shim else {
        eprintln!("NOTICE: no libz.so.1 to stand in for a wrong shim; test skipped");
        return;
    };
    let t = Target::start(60, 10);
    let res = memwatch()
        .args([
            "attach",
            &t.pid().to_string(),
            "--method",
            "ptrace",
            "--duration",
            "200ms",
        ])
        .arg("--out")
        .arg(&out)
        .args(["--shim", not_a_shim])
        .output()
        .unwrap();
    assert_eq!(res.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&res.stderr).contains("could not attach"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
    let r = attach(t.pid(), "ptrace", &["--duration", "200ms"], &out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(std::fs::read(&out)
        .unwrap()
        .starts_with(&memwatch_wire::MAGIC));
    assert_eq!(t.finish().1, 3);
}
