//! `memwatch report` / `memwatch import` on the real PyTorch 2.11 snapshots of
//! `testdata/torch-snapshots/` (H100): the figures PyTorch reported at the dump, the
//! comparison of two snapshots, storing one as a run (idempotently), and bad files
//! refused with exit 2 and one line naming the file.

mod common;

use common::{repo, run_memwatch};

fn json_of(args: &[&str]) -> serde_json::Value {
    let out = run_memwatch(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn snapshot(name: &str) -> String {
    repo(&format!("testdata/torch-snapshots/{name}.pickle"))
        .to_string_lossy()
        .into_owned()
}

fn figures(name: &str) -> serde_json::Value {
    let p = repo(&format!("testdata/torch-snapshots/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn report_json_has_pytorchs_figures() {
    for name in ["train_snapshot", "leak", "fragmentation"] {
        let r = json_of(&["report", &snapshot(name), "--json"]);
        let f = &figures(name)["at_dump"];
        let d = &r["devices"][0];
        assert_eq!(r["format"], "pytorch_memory_snapshot");
        assert_eq!(d["allocated_bytes"], f["memory_allocated"], "{name}");
        assert_eq!(d["reserved_bytes"], f["memory_reserved"], "{name}");
        assert_eq!(
            d["peak_allocated"]["bytes"], f["max_memory_allocated"],
            "{name}"
        );
        assert_eq!(
            d["peak_reserved"]["bytes"], f["max_memory_reserved"],
            "{name}"
        );
        assert_eq!(
            d["ooms_total"].as_u64(),
            Some(u64::from(figures(name)["exception"].is_string())),
            "{name}"
        );
    }
}

#[test]
fn report_human_names_the_lines_and_the_oom() {
    let out = run_memwatch(&["report", &snapshot("fragmentation")]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("allocated 4.00 GiB, reserved 8.00 GiB"),
        "{text}"
    );
    assert!(text.contains("OOM at"), "{text}");
    assert!(text.contains("largest free block 256.00 MiB"), "{text}");
    assert!(text.contains("fragmentation"), "{text}");
    assert!(
        text.contains("torch_fragmentation.py:35 in <module>"),
        "{text}"
    );
}

#[test]
fn compare_two_snapshots() {
    let c = json_of(&[
        "report",
        &snapshot("train_snapshot"),
        "--compare",
        &snapshot("leak"),
        "--json",
    ]);
    let d = &c["devices"][0];
    let peak = |n: &str| {
        figures(n)["at_dump"]["max_memory_allocated"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(
        d["peak_allocated_bytes"]["delta"].as_i64(),
        Some(peak("leak") - peak("train_snapshot"))
    );
    assert!(d["sites_at_peak"][0]["site"]
        .as_str()
        .unwrap()
        .starts_with("torch_leak.py"));
    // A capture is not a snapshot to compare with.
    let out = run_memwatch(&[
        "report",
        &snapshot("leak"),
        "--compare",
        &repo("testdata/oom-corpus/torch_leak/capture.mwcap").to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn import_stores_a_run_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mw.db");
    let db = db.to_str().unwrap();
    let first = json_of(&["import", &snapshot("leak"), "--db", db, "--json"]);
    assert_eq!(first["run_id"], 1);
    // 99 segments, 686 blocks allocated and 528 released, one OOM.
    assert_eq!(first["events"], 99 + 686 + 528 + 1);
    let again = json_of(&["import", &snapshot("leak"), "--db", db, "--json"]);
    assert_eq!(again["run_id"], 1);
    assert_eq!(again["records_already_stored"], first["records"]);
    assert_eq!(again["events"], 0);
    let other = json_of(&["import", &snapshot("fragmentation"), "--db", db, "--json"]);
    assert_eq!(other["run_id"], 2);
    let out = run_memwatch(&[
        "import",
        &snapshot("leak"),
        "--db",
        db,
        "--xla-dump",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn import_of_many_batches_stores_every_record_in_order_once() {
    use memwatch_analysis::torch::synth::{self, Context, Params};
    use memwatch_analysis::torch::{scan_reader, to_records};
    use memwatch_wire::Record;
    // Long enough for two or more batches of 65,536 events (stored by a second thread while
    // the replay makes the next); context "state" and two devices for variety.
    for (context, devices, seed) in [(Context::State, 2, 11), (Context::Alloc, 1, 12)] {
        let p = Params {
            iterations: 30_000,
            context,
            devices,
            seed,
        };
        let (bytes, _) = synth::write_long(Vec::new(), &p).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("long.pickle");
        std::fs::write(&file, &bytes).unwrap();
        let scan = scan_reader(&bytes[..], &file, bytes.len() as u64).unwrap();
        let (mut records, mut events) = (0u64, 0u64);
        to_records(&scan, "", &mut |r| {
            records += 1;
            events += match &r {
                Record::Events(e) => e.len() as u64,
                _ => 0,
            };
            Ok::<_, ()>(())
        })
        .unwrap();
        let db = dir.path().join("mw.db");
        let (f, db) = (file.to_str().unwrap(), db.to_str().unwrap());
        let first = json_of(&["import", f, "--db", db, "--json"]);
        assert!(first["batches"].as_u64().unwrap() >= 2, "{p:?}: {first}");
        assert_eq!(first["records"], records, "{p:?}");
        assert_eq!(first["events"], events, "{p:?}");
        assert_eq!(first["duplicate_batches"], 0, "{p:?}");
        // The store numbers batches by records (a batch out of order or twice would be
        // refused or counted as a duplicate): a second import finds every record stored.
        let again = json_of(&["import", f, "--db", db, "--json"]);
        assert_eq!(again["run_id"], first["run_id"]);
        assert_eq!(again["records_already_stored"], records);
        assert_eq!(again["events"], 0);
    }
}

#[test]
fn bad_pickles_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // pickle.dumps of an object whose __reduce__ is (os.system, ('echo hi',)).
    let evil = dir.path().join("evil.pickle");
    std::fs::write(
        &evil,
        b"\x80\x04\x95\x22\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x07echo hi\x94\x85\x94R\x94.",
    )
    .unwrap();
    let leak = std::fs::read(snapshot("leak")).unwrap();
    let cut = dir.path().join("cut.pickle");
    std::fs::write(&cut, &leak[..leak.len() / 2]).unwrap();
    for (file, what) in [
        (&evil, "refused opcode STACK_GLOBAL (imports posix.system)"),
        (&cut, "truncated"),
    ] {
        for cmd in [
            &["report"][..],
            &["import", "--db", "/nonexistent/x.db"][..],
        ] {
            let mut args = cmd.to_vec();
            let f = file.to_str().unwrap();
            args.insert(1, f);
            let out = run_memwatch(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(f) && err.contains(what), "{err}");
        }
    }
}

/// Snapshots of older PyTorch versions (`testdata/torch-snapshots/formats/`, constructed
/// from PyTorch's source, not recorded): the text report gives the program's figures, and
/// where the layout has no `time_us` it says no time was recorded instead of printing a
/// 1970 start, "over 0 ns" and "at 0 ns".
#[test]
fn older_layouts_report_without_made_up_times() {
    for (name, timed) in [
        ("v2_0_history", false),
        ("v2_1_frames", false),
        ("v2_2_time_us", true),
        ("v2_10_user_metadata", true),
    ] {
        let out = run_memwatch(&["report", &snapshot(&format!("formats/{name}"))]);
        assert_eq!(out.status.code(), Some(0), "{name}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("allocated 8.00 MiB, reserved 22.00 MiB in 2 segments"),
            "{name}: {text}"
        );
        assert!(!text.contains("1970"), "{name}: {text}");
        assert_eq!(text.contains("no times recorded"), !timed, "{name}: {text}");
        assert!(!text.contains(" at 0 ns"), "{name}: {text}");
        assert_eq!(
            text.contains("peak allocated   12.00 MiB at"),
            timed,
            "{name}"
        );
    }
}
