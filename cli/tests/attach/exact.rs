//! What an attach records: exactly the iterations made while attached, through ptrace
//! and through gdb, lookups made after the attach, pointers kept in static data, a
//! child forked while its parent was attached, and the capture stored in a database.

use std::path::Path;
use std::process::Command;

use crate::harness::*;

fn attach_roundtrip(method: &str) {
    // Long enough for two gdb attach/detach cycles (~1 s each) on a loaded machine.
    const ITERS: u32 = 600;
    let dir = tempfile::tempdir().unwrap();
    let t = Target::start(ITERS, 10);
    let cap1 = dir.path().join("one.mwcap");
    let j = json(&attach_until_placed(
        t.pid(),
        method,
        &["--duration", "600ms"],
        &cap1,
    ));
    let tgt = &j["targets"][0];
    assert_eq!(tgt["attached"], true, "{j}");
    assert_eq!(tgt["detached"], "stopped", "{j}");
    let pause = tgt["pause_ns"].as_u64().unwrap();
    let first = j["first_event_ns"].as_u64().expect("an event arrived");
    eprintln!(
        "{method}: pause {:.1} ms, first event {:.1} ms after start",
        pause as f64 / 1e6,
        first as f64 / 1e6
    );
    if method == "ptrace" {
        // The figure is bench/attach.sh's (target < 200 ms); here only a sanity bound
        // that holds on a loaded CI machine.
        assert!(pause < 1_000_000_000, "pause {pause} ns");
    }
    let c1 = read_capture(&cap1);
    let (a1, b1) = check_exact(&c1);
    assert!(a1 > 0, "iteration 0 happened before attach");
    assert!(c1.has_marker("memwatch-attach stop", ""));
    // Re-attach after detach.
    let cap2 = dir.path().join("two.mwcap");
    let j2 = json(&attach_until_placed(
        t.pid(),
        method,
        &["--duration", "400ms"],
        &cap2,
    ));
    assert_eq!(j2["targets"][0]["attached"], true, "{j2}");
    let (a2, b2) = check_exact(&read_capture(&cap2));
    assert!(
        a2 > b1,
        "second capture starts after the first ended ({a1}..{b1} then {a2}..{b2})"
    );
    let (output, code) = t.finish();
    assert_eq!(code, 3, "exit code unchanged");
    assert!(
        b2 < ITERS as u64 - 1,
        "iterations after detach are not captured"
    );
    assert_eq!(output, undisturbed(ITERS), "output unchanged");
}

#[test]
fn attach_via_ptrace_captures_exactly_while_attached() {
    attach_roundtrip("ptrace");
}

#[test]
fn attach_via_gdb_captures_exactly_while_attached() {
    assert!(
        Command::new("gdb").arg("--version").output().is_ok(),
        "gdb is required (scripts/install-deps.sh installs it)"
    );
    attach_roundtrip("gdb");
}

#[test]
fn lookups_after_attach_and_pointers_kept_in_static_data_are_captured_locals_are_not() {
    let dir = tempfile::tempdir().unwrap();
    // dlsym in every iteration: the program's dlsym GOT entry now leads to the shim's
    // dlsym, which hands out wrappers.
    let (t, c) = attached_for(dir.path(), "dlsym", 200, "500ms");
    let (a, b) = check_exact(&c);
    assert!(b > a + 5, "iterations {a}..{b} captured through dlsym");
    let (_, code) = t.finish();
    assert_eq!(code, 3);

    // Pointers looked up once before attach and kept in static data (XLA's driver stubs:
    // a function-local static per function) are found and redirected, and put back at
    // detach.
    let (t, c) = attached_for(dir.path(), "stub", 200, "500ms");
    let (a, b) = check_exact(&c);
    assert!(b > a + 5, "iterations {a}..{b} captured through the stubs");
    assert!(
        c.has_marker(
            "memwatch-attach start",
            " copied_pointers=2 copied_in=(main program) failed_copies=0 "
        ),
        "{:?}",
        c.markers
    );
    assert!(
        c.has_marker("memwatch-attach stop", " restored_copies=2 "),
        "{:?}",
        c.markers
    );
    let (output, code) = t.finish();
    assert_eq!(code, 3);
    assert_eq!(output, undisturbed(200), "output unchanged");

    // Pointers kept in local variables (registers, the stack) cannot be found: nothing is
    // captured, but the attach says so through its baseline.
    let (t, c) = attached_for(dir.path(), "cached", 100, "300ms");
    assert!(
        c.iter_allocs.is_empty(),
        "cached pointers bypass the shim: {:?}",
        c.iter_allocs
    );
    assert!(c.has_marker("pre-attach-baseline device=0 ", ""));
    let (output, code) = t.finish();
    assert_eq!(code, 3);
    assert_eq!(output, undisturbed(100), "output unchanged");
}

/// A process forked while its parent was attached inherits the parent's sink; after the
/// parent's attach ends, the child itself can be attached, and its own allocations (sizes
/// 65536 + i) are captured. Before, the shim refused: "configured with another sink".
#[test]
fn a_child_forked_while_its_parent_was_attached_can_be_attached_later() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough that the child still runs once the parent's attach has ended.
    let t = Target::start_mode(300, 10, "fork");
    let parent = t.pid();
    let cap = dir.path().join("parent.mwcap");
    let out = attach(parent, "ptrace", &["--duration", "700ms"], &cap);
    let j = json(&out);
    assert_eq!(j["targets"][0]["attached"], true, "{j}");
    // The child forked meanwhile is stopped at detach too (it went on recording into
    // the ended session, and kept the drain waiting its full 3 s; how long attach takes
    // is bench/attach.sh's figure).
    assert!(
        j["targets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["detached"]
                .as_str()
                .is_some_and(|d| d.starts_with("stopped (forked"))),
        "{j}"
    );
    let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
        .unwrap_or_default();
    let child: i32 = children
        .split_whitespace()
        .next()
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("the target forked no child yet: {children:?}"));
    let cap_child = dir.path().join("child.mwcap");
    let out = attach(child, "ptrace", &["--duration", "300ms"], &cap_child);
    let j = json(&out);
    assert_eq!(j["targets"][0]["attached"], true, "{j}");
    assert_eq!(j["targets"][0]["error"], serde_json::Value::Null, "{j}");
    let c = read_capture(&cap_child);
    assert!(
        !c.iter_allocs.is_empty() && c.iter_allocs.iter().all(|&s| s >= 65536),
        "the child's own allocations: {:?}",
        c.iter_allocs
    );
    let (_, code) = t.finish();
    assert_eq!(code, 3, "the target ran to its end");
}

#[test]
fn attach_db_stores_the_capture_and_a_bad_db_is_refused_before_attaching() {
    let dir = tempfile::tempdir().unwrap();
    let t = Target::start(600, 10); // ~6 s
    let db = dir.path().join("tmp.db");
    let cap = dir.path().join("db.mwcap");
    let out = attach(
        t.pid(),
        "ptrace",
        &["--duration", "500ms", "--db", db.to_str().unwrap()],
        &cap,
    );
    let j = json(&out);
    assert_eq!(j["targets"][0]["detached"], "stopped", "{j}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("memwatch: stored "), "{err}");
    let captured = count_events(&cap);
    assert!(captured > 10, "events captured while attached: {captured}");
    assert_eq!(j["stored"]["events"], captured, "{j}");

    // The database itself, read through the daemon's store API.
    let runs = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store = memwatch_daemon::Store::open(db.to_str().unwrap())
                .await
                .unwrap();
            store.runs(10).await.unwrap()
        });
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].event_count as u64, captured, "{runs:?}");
    assert_eq!(runs[0].run_key, j["stored"]["run_key"].as_str().unwrap());
    assert!(runs[0].id > 0);

    // A directory is no database: exit 2 naming it, before the process is touched.
    let bad_cap = dir.path().join("bad.mwcap");
    let bad = attach(
        t.pid(),
        "ptrace",
        &["--duration", "300ms", "--db", dir.path().to_str().unwrap()],
        &bad_cap,
    );
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--db") && err.contains(dir.path().to_str().unwrap()),
        "{err}"
    );
    assert!(!bad_cap.exists(), "no capture started");
    // A daemon URL that is not http:// is refused the same way.
    let bad = attach(
        t.pid(),
        "ptrace",
        &["--duration", "300ms", "--daemon", "ftp://example:7373"],
        &bad_cap,
    );
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("expected an http://HOST:PORT URL"), "{err}");
    assert!(!bad_cap.exists(), "no capture started");

    // The target ran on, undisturbed, and can still be attached afterwards.
    assert!(Path::new(&format!("/proc/{}", t.pid())).exists());
    let again = dir.path().join("again.mwcap");
    let j = json(&attach(t.pid(), "ptrace", &["--duration", "300ms"], &again));
    assert_eq!(j["targets"][0]["attached"], true, "{j}");
    assert!(
        j.get("stored").is_none(),
        "nothing stored without --db: {j}"
    );
    let (output, code) = t.finish();
    assert_eq!(code, 3, "exit code unchanged");
    assert_eq!(output, undisturbed(600), "output unchanged");
}
