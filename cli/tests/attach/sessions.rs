//! Attach sessions and the processes behind them: a second concurrent attach refused,
//! a target that exits midway or unreaped, and `--all-children` (a launcher and its
//! workers, never zombies or memwatch itself).

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::*;

#[test]
fn second_attach_is_refused_and_exit_midway_is_clean() {
    let dir = tempfile::tempdir().unwrap();
    let t = Target::start(150, 10); // ~1.5 s
    let cap = dir.path().join("a.mwcap");
    let first = memwatch()
        .args([
            "attach",
            &t.pid().to_string(),
            "--method",
            "ptrace",
            "--duration",
            "20s",
            "--json",
            "--out",
        ])
        .arg(&cap)
        .arg("--shim")
        .arg(&built().shim)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the first has claimed the process (it creates the capture after that).
    for _ in 0..500 {
        if cap.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = attach(
        t.pid(),
        "ptrace",
        &["--duration", "1s"],
        &dir.path().join("b.mwcap"),
    );
    assert_eq!(second.status.code(), Some(2));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("already being captured"), "{err}");
    // The process exits while attached: memwatch notices, the capture has its end.
    let (output, code) = t.finish();
    assert_eq!(code, 3);
    assert_eq!(output, undisturbed(150));
    let out = first.wait_with_output().unwrap();
    let j = json(&out);
    assert_eq!(j["targets"][0]["detached"], "process exited", "{j}");
    let c = read_capture(&cap);
    check_exact(&c);
    assert!(c.ended, "process_end recorded at exit");
    assert_eq!(
        *c.iter_allocs.last().unwrap(),
        4096 + 149,
        "the last iteration is captured"
    );
}

/// A target that exits while attached but is not reaped by its parent (here: this test,
/// which waits only afterwards) is a zombie: attach must notice it ended, not wait for
/// Ctrl-C, and say "process exited" rather than "statically linked".
#[test]
fn attach_ends_when_its_target_exits_unreaped() {
    let dir = tempfile::tempdir().unwrap();
    let t = Target::start(40, 10);
    let cap = dir.path().join("z.mwcap");
    let mut child = memwatch()
        .args([
            "attach",
            &t.pid().to_string(),
            "--method",
            "ptrace",
            "--json",
            "--out",
        ])
        .arg(&cap)
        .arg("--shim")
        .arg(&built().shim)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("attach kept waiting for a target that had exited");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let j = json(&out);
    assert_eq!(j["targets"][0]["detached"], "process exited", "{j}");
    assert_eq!(t.finish().1, 3);
}

#[test]
fn all_children_attaches_to_a_launcher_and_its_workers() {
    let dir = tempfile::tempdir().unwrap();
    let exe = built().target.display().to_string();
    let mut launcher = Command::new("sh")
        .args([
            "-c",
            &format!("{exe} 200 10 >/dev/null & {exe} 200 10 >/dev/null & wait"),
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let cap = dir.path().join("all.mwcap");
    let out = attach(
        launcher.id() as i32,
        "ptrace",
        &["--all-children", "--duration", "500ms"],
        &cap,
    );
    let j = json(&out);
    let targets = j["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 3, "{j}");
    assert!(targets.iter().all(|t| t["attached"] == true), "{j}");
    assert!(launcher.wait().unwrap().success());
    let procs = j["report"]["processes"].as_array().unwrap();
    let with_allocs = procs
        .iter()
        .filter(|p| {
            p["devices"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["alloc_count"].as_u64() > Some(0)))
        })
        .count();
    assert_eq!(with_allocs, 2, "both workers captured: {j}");
}

/// --all-children over a tree with a zombie child, and over a tree that contains this
/// memwatch process (the shell that runs it): the zombie and memwatch itself are left
/// out with their reasons; the rest is attached. Before, one zombie failed the whole
/// attach ("statically linked"), and memwatch tried to ptrace itself (EPERM).
#[test]
fn all_children_leaves_out_zombies_and_memwatch_itself() {
    let dir = tempfile::tempdir().unwrap();
    let t = Target::start_mode(100, 10, "zombie");
    let cap = dir.path().join("z.mwcap");
    let out = attach(
        t.pid(),
        "ptrace",
        &["--all-children", "--duration", "300ms"],
        &cap,
    );
    let j = json(&out);
    let targets = j["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 2, "{j}");
    let zombie = targets.iter().find(|x| x["attached"] == false).unwrap();
    assert!(
        zombie["error"].as_str().unwrap().contains("zombie"),
        "{zombie}"
    );
    assert!(targets
        .iter()
        .any(|x| x["pid"] == t.pid() && x["attached"] == true));
    assert_eq!(t.finish().1, 3);

    let exe = built().target.display().to_string();
    let cap2 = dir.path().join("tree.mwcap");
    let script = format!(
        "{exe} 100 10 >/dev/null & sleep 0.2; {mw} attach --all-children $$ --method ptrace \
         --json --duration 300ms --out {cap} --shim {shim} > {json}; echo $? > {rc}; wait",
        mw = env!("CARGO_BIN_EXE_memwatch"),
        cap = cap2.display(),
        shim = built().shim.display(),
        json = dir.path().join("tree.json").display(),
        rc = dir.path().join("rc").display(),
    );
    let st = Command::new("sh").args(["-c", &script]).status().unwrap();
    assert!(st.success());
    let rc = std::fs::read_to_string(dir.path().join("rc")).unwrap();
    let text = std::fs::read_to_string(dir.path().join("tree.json")).unwrap();
    assert_eq!(rc.trim(), "0", "{text}");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let targets = j["targets"].as_array().unwrap();
    let ourselves: Vec<_> = targets
        .iter()
        .filter(|x| {
            x["error"]
                .as_str()
                .is_some_and(|e| e.contains("this memwatch process itself"))
        })
        .collect();
    assert_eq!(ourselves.len(), 1, "{j}");
    let loop_attached = j["report"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["devices"].as_array().is_some_and(|d| !d.is_empty()));
    assert!(loop_attached, "the loop was captured: {j}");
}
