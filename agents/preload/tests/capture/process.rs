//! A process's life under the shim: fork, exec (failed or not, after vfork too), a
//! main thread that ends with pthread_exit, and the ends without exit() (abort, _exit,
//! also under the loader's lock and racing another thread's exit): each image is
//! recorded once, with the end the program really had.

use crate::common::*;
use memwatch_wire::{EventKind, Record};

#[test]
fn fork_child_is_its_own_process() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("fork.mwcap");
    let out = b.run("direct", &["fork"], Some(&cap), &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |prefix: &str, key: &str| -> u32 {
        let line = text.lines().find(|l| l.starts_with(prefix)).unwrap();
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap()
            .parse()
            .unwrap()
    };
    let (parent, child) = (field("P ", "pid="), field("C ", "pid="));
    let recs = read_capture(&cap);
    let starts: Vec<_> = recs
        .iter()
        .filter_map(|r| {
            if let Record::ProcessStart(p) = r {
                Some(p.clone())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    let c = starts
        .iter()
        .find(|s| s.pid == child)
        .expect("child process_start");
    assert_eq!(c.ppid, parent);
    let evs = events(&recs);
    let sizes = |pid: u32| -> Vec<u64> {
        evs.iter()
            .filter(|e| e.pid == pid && e.is(EventKind::Alloc))
            .map(|e| e.size)
            .collect()
    };
    assert_eq!(sizes(parent), vec![1000, 3000]);
    assert_eq!(sizes(child), vec![2000]);
    assert!(evs
        .iter()
        .filter(|e| e.pid == child)
        .all(|e| e.tid == child));
    for pid in [parent, child] {
        assert_eq!(
            recs.iter()
                .filter(|r| matches!(r, Record::ProcessEnd(e) if e.pid == pid))
                .count(),
            1
        );
    }
}

#[test]
fn exec_flushes_and_new_image_is_announced() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("exec.mwcap");
    let out = b.run("direct", &["exec"], Some(&cap), &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("Y pid="), "exec'd image ran: {text}");
    let recs = read_capture(&cap);
    let kinds: Vec<&str> = recs
        .iter()
        .map(|r| match r {
            Record::ProcessStart(_) => "start",
            Record::Events(_) => "events",
            Record::ProcessEnd(_) => "end",
            Record::DeviceInfo(_) => "device",
            // The HIP device's properties (memwatch_wire::device_props) follow its info.
            Record::Marker(m) if m.text.starts_with(memwatch_wire::DEVICE_PROPS_PREFIX) => "device",
            _ => "other",
        })
        .filter(|k| *k != "device")
        .collect();
    assert_eq!(
        kinds,
        vec!["start", "events", "end", "start", "events", "end"],
        "{recs:?}"
    );
    let evs = events(&recs);
    assert_eq!(
        evs.iter().map(|e| e.size).collect::<Vec<_>>(),
        vec![4000, 5000]
    );
    assert_eq!(evs[0].pid, evs[1].pid, "exec keeps the pid");
}

/// A program whose main thread ends with pthread_exit ends; under the shim it hung, its
/// flusher thread being the last one alive. Its allocation and end are recorded.
#[test]
fn a_main_thread_that_calls_pthread_exit_ends_the_process() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("texit.mwcap");
    let mut child = std::process::Command::new(b.program("direct"))
        .args(["direct", "thread-exit"])
        .env("MWTEST_LIBDIR", &b.dir)
        .env("LD_PRELOAD", &b.shim)
        .env("MEMWATCH_SINK", format!("file:{}", cap.display()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Hung: the process did not end after its main thread's pthread_exit.
    let status = wait_bounded(
        &mut child,
        "thread-exit (main thread ended with pthread_exit)",
    );
    assert_eq!(status.code(), Some(0));
    let recs = read_capture(&cap);
    assert_eq!(
        events(&recs).iter().map(|e| e.size).collect::<Vec<_>>(),
        vec![7000]
    );
    assert!(recs
        .iter()
        .any(|r| matches!(r, Record::ProcessEnd(e) if e.exit_code == 0)));
}

/// Runs the direct test program with `args`, with the shim and a file sink at `cap`
/// when given; a run that takes over 10 s fails the test (a hang).
fn run_direct(b: &Built, args: &[&str], cap: Option<&std::path::Path>) -> std::process::Output {
    let mut c = std::process::Command::new(b.program("direct"));
    c.arg("direct")
        .args(args)
        .env("MWTEST_LIBDIR", &b.dir)
        .env_remove("LD_PRELOAD")
        .env_remove("MEMWATCH_SINK")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(cap) = cap {
        c.env("LD_PRELOAD", &b.shim)
            .env("MEMWATCH_SINK", format!("file:{}", cap.display()));
    }
    let mut child = c.spawn().unwrap();
    wait_bounded(&mut child, &format!("{args:?} (shim: {})", cap.is_some()));
    child.wait_with_output().unwrap()
}

/// The `process_end` exit codes of `pid` (all pids when None), in capture order.
fn end_codes(recs: &[Record], pid: Option<u32>) -> Vec<i32> {
    recs.iter()
        .filter_map(|r| match r {
            Record::ProcessEnd(e) if pid.is_none_or(|p| p == e.pid) => Some(e.exit_code),
            _ => None,
        })
        .collect()
}

/// A program that ends without exit() (abort after an OOM, os._exit) keeps what it
/// recorded last: before, the allocation just before abort() sat in the ring and was
/// lost with the process. Its end carries 134 (128 + SIGABRT) or the _exit status, and
/// the program ends as it does without the shim.
#[test]
fn abort_and_underscore_exit_deliver_the_last_events() {
    use std::os::unix::process::ExitStatusExt;
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    // alarm-in-malloc: the last pass used to grow a buffer through the allocator that
    // the ending thread held (no process_end). What is guaranteed: once the sink is
    // open (the program waits for that before its malloc loop), the last pass needs no
    // allocator. A process that ends so before the flusher's first pass opened the sink
    // loses its capture (opening allocates): that made this case fail ~1 run in 10 on a
    // loaded machine, where the flusher had not run within the 30 ms before the alarm. busy-abort: a thread allocating without
    // pause kept the flusher's pass going for ever (no process_end, and the ending
    // thread's own allocations missing).
    for (scenario, want_code, want_sizes) in [
        ("abort", 134, vec![7100]),
        ("_exit", 3, vec![7100]),
        ("alarm-in-malloc", 134, vec![7100]),
        ("busy-abort", 134, vec![7100, 7200]),
    ] {
        let cap = tmp.path().join(format!("{scenario}.mwcap"));
        let plain = run_direct(b, &[scenario], None);
        let shimmed = run_direct(b, &[scenario], Some(&cap));
        assert_eq!(
            (shimmed.status.code(), shimmed.status.signal()),
            (plain.status.code(), plain.status.signal()),
            "{scenario}: the program ends as it does without the shim"
        );
        if want_code == 134 {
            assert_eq!(shimmed.status.signal(), Some(libc::SIGABRT), "{scenario}");
        } else {
            assert_eq!(shimmed.status.code(), Some(want_code), "{scenario}");
        }
        let recs = read_capture(&cap);
        // The busy thread's 64-byte allocations and their frees left out.
        let sizes: Vec<u64> = events(&recs)
            .iter()
            .filter(|e| e.is(EventKind::Alloc) && e.size != 64)
            .map(|e| e.size)
            .collect();
        assert_eq!(sizes, want_sizes, "{scenario}");
        assert_eq!(end_codes(&recs, None), vec![want_code], "{scenario}");
    }
}

/// Ending the process never waits for the dynamic loader: a library constructor (run
/// inside dlopen, under the loader's lock) whose thread calls _exit(3) hung for ever
/// under the shim, which looked the real _exit up with dlsym at that moment.
#[test]
fn underscore_exit_under_the_loader_lock_does_not_hang() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let lib = tmp.path().join("libctor_exit.so");
    cc_shared(
        &lib,
        &crate_dir().join("tests/c/ctor_exit.c"),
        &["-lpthread"],
    );
    let args = ["dlopen-ctor-exit", lib.to_str().unwrap()];
    let plain = run_direct(b, &args, None);
    assert_eq!(plain.status.code(), Some(3));
    let cap = tmp.path().join("ctor.mwcap");
    // It ends, with its own status (run_direct fails the test as hung otherwise): the
    // hand-off waits a bounded time, never for the loader.
    let shimmed = run_direct(b, &args, Some(&cap));
    assert_eq!(shimmed.status.code(), Some(3));
}

/// The same when the library that dlopens is one the program links against: its
/// constructor runs before the preloaded shim's, which has then looked nothing up yet
/// (the fallback lookup took the loader's lock and hung).
#[test]
fn underscore_exit_from_a_linked_librarys_constructor_does_not_hang() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let c_dir = crate_dir().join("tests/c");
    let plugin = tmp.path().join("libctor_exit.so");
    let lib = tmp.path().join("libnest_lib.so");
    let prog = tmp.path().join("nest_main");
    cc_shared(&plugin, &c_dir.join("ctor_exit.c"), &["-lpthread"]);
    cc_shared(&lib, &c_dir.join("nest_lib.c"), &["-ldl"]);
    let main_src = c_dir.join("nest_main.c");
    let ldir = format!("-L{}", tmp.path().display());
    let rpath = format!("-Wl,-rpath,{}", tmp.path().display());
    cc(&[
        "-O2",
        "-Wall",
        "-o",
        prog.to_str().unwrap(),
        main_src.to_str().unwrap(),
        &ldir,
        // Linked though no symbol of it is used: its constructor is the point.
        "-Wl,--no-as-needed",
        "-lnest_lib",
        &rpath,
    ]);
    for shim in [None, Some(&b.shim)] {
        let mut c = std::process::Command::new(&prog);
        c.env("NEST_PLUGIN", &plugin).env_remove("MEMWATCH_SINK");
        match shim {
            Some(s) => c.env("LD_PRELOAD", s),
            None => c.env_remove("LD_PRELOAD"),
        };
        let mut child = c.spawn().unwrap();
        let status = wait_bounded(&mut child, &format!("nest_main (shim: {})", shim.is_some()));
        assert_eq!(status.code(), Some(3), "shim: {}", shim.is_some());
    }
}

/// A thread that aborts is not overtaken by another thread's exit() during the
/// hand-off: the process still dies of SIGABRT, as without the shim (the status was 3
/// in most runs), and the capture has one end, 134.
#[test]
fn exit_in_another_thread_does_not_overtake_an_abort() {
    use std::os::unix::process::ExitStatusExt;
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let plain = run_direct(b, &["abort-then-exit"], None);
    assert_eq!(plain.status.signal(), Some(libc::SIGABRT));
    for i in 0..5 {
        let cap = tmp.path().join(format!("race{i}.mwcap"));
        let out = run_direct(b, &["abort-then-exit"], Some(&cap));
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "run {i}");
        let recs = read_capture(&cap);
        assert_eq!(end_codes(&recs, None), vec![134], "run {i}");
        let mut sizes: Vec<u64> = events(&recs).iter().map(|e| e.size).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![7100, 8100], "run {i}");
    }
}

/// A vfork child shares its parent's memory: its failed exec started a flusher thread
/// inside it (taking the parent's flusher slot with no thread behind it), so the forked
/// child that spawned it was missing from the capture and its end took 250 ms more.
#[test]
fn a_vfork_childs_failed_exec_leaves_the_recording_alone() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("vfork.mwcap");
    let out = run_direct(b, &["fork-vfork-exec-fail"], Some(&cap));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("P child status=5"));
    let recs = read_capture(&cap);
    let child = events(&recs)
        .iter()
        .find(|e| e.size == 8100)
        .map(|e| e.pid)
        .expect("the forked child's allocation");
    assert_eq!(end_codes(&recs, Some(child)), vec![5], "{recs:?}");
}

/// A forked child whose exec fails and that then calls _exit(127) is recorded with 127:
/// the exec's last pass had stopped the flusher and nothing started it again, so the
/// child's end stayed the -1 of the exec's pass.
#[test]
fn a_child_whose_exec_failed_records_its_underscore_exit() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("fork-exec-fail.mwcap");
    let out = run_direct(b, &["fork-exec-fail"], Some(&cap));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("P child status=127"));
    let recs = read_capture(&cap);
    let parent = events(&recs)
        .iter()
        .find(|e| e.size == 7100)
        .map(|e| e.pid)
        .expect("the parent's allocation");
    let child = recs
        .iter()
        .find_map(|r| match r {
            Record::ProcessStart(s) if s.pid != parent => Some(s.pid),
            _ => None,
        })
        .expect("the child announced (by its exec's last pass)");
    assert_eq!(end_codes(&recs, Some(child)).last(), Some(&127), "{recs:?}");
}

/// An exec that fails leaves the image running: the capture must keep one image for it
/// (readers split a pid's frames at a new anchor; "released by exec" would hide what the
/// first half still held), and the caller sees exec's own -1 and errno. The image's end
/// records the status it gave exit().
#[test]
fn a_failed_exec_keeps_one_image() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("exec-fail.mwcap");
    let plain = b.run("direct", &["exec-fail"], None, &[]);
    let out = b.run("direct", &["exec-fail"], Some(&cap), &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // The pid differs between runs; what exec returned must not.
    let results = |t: &str| t.split_once(" execv=").map(|(_, r)| r.to_string());
    assert_eq!(
        results(&text),
        results(&String::from_utf8_lossy(&plain.stdout)),
        "same exec results as without the shim: {text}"
    );
    assert!(
        text.contains("execv=-1 errno=2 execvp=-1 errno=2"),
        "{text}"
    );
    let recs = read_capture(&cap);
    let evs = events(&recs);
    assert_eq!(
        evs.iter().map(|e| e.size).collect::<Vec<_>>(),
        vec![4000, 6000]
    );
    // The shim ends the stream before each exec (the new image could not otherwise be
    // told from the old); after a failed one it announces the same image again.
    let last_end = recs
        .iter()
        .filter_map(|r| match r {
            Record::ProcessEnd(e) => Some(e.ts_ns),
            _ => None,
        })
        .max()
        .unwrap();
    assert!(evs.iter().all(|e| e.ts_ns < last_end), "{recs:?}");
    // The last end carries the status given to exit() (glibc's on_exit), not -1.
    let last_code = recs.iter().rev().find_map(|r| match r {
        Record::ProcessEnd(e) => Some(e.exit_code),
        _ => None,
    });
    assert_eq!(last_code, Some(0));
    let anchors: std::collections::HashSet<u64> = recs
        .iter()
        .filter_map(|r| match r {
            Record::ProcessStart(s) => Some(s.mono_anchor_ns),
            _ => None,
        })
        .collect();
    assert_eq!(
        anchors.len(),
        1,
        "one image: every start repeats its anchors"
    );
}
