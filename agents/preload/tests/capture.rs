//! The shim against the simulated runtime: every lookup path, exact event contents,
//! unchanged program behaviour, threads, fork, exec, a disabled shim.

mod common;

use common::*;
use memwatch_wire::{ApiFamily, EventKind, Record};

fn check_basic(mode: &str) {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("basic.mwcap");
    let plain = b.run(mode, &["basic"], None, &[]);
    let shimmed = b.run(mode, &["basic"], Some(&cap), &[]);
    // Same output (results, out-pointers, errno after every call) with and without the shim.
    assert_eq!(
        normalized(&plain.stdout),
        normalized(&shimmed.stdout),
        "{mode}: output differs under the shim"
    );
    let want = expected(&String::from_utf8_lossy(&shimmed.stdout));
    assert!(
        want.len() >= 80,
        "{mode}: program printed {} calls",
        want.len()
    );
    let recs = read_capture(&cap);
    let evs = events(&recs);
    let got: Vec<Expected> = evs
        .iter()
        .zip(want.iter())
        .map(|(e, w)| as_expected(e, w.host_ptr))
        .collect();
    for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        assert_eq!(g, w, "{mode}: event {i} differs");
    }
    assert_eq!(
        evs.len(),
        want.len(),
        "{mode}: capture has {} events, program made {} recorded calls",
        evs.len(),
        want.len()
    );
    // One process, started and ended, all events from it, durations plausible.
    let starts: Vec<_> = recs
        .iter()
        .filter_map(|r| {
            if let Record::ProcessStart(p) = r {
                Some(p)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(starts.len(), 1);
    let pid = starts[0].pid;
    assert!(
        starts[0].argv.iter().any(|a| a == "basic"),
        "argv recorded: {:?}",
        starts[0].argv
    );
    assert!(recs
        .iter()
        .any(|r| matches!(r, Record::ProcessEnd(e) if e.pid == pid)));
    assert!(evs
        .iter()
        .all(|e| e.pid == pid && e.tid == pid && e.duration_ns < 1_000_000_000));
    assert!(
        evs.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
        "timestamps monotonic"
    );
    // The process's start stamp comes before its first event (readers take it as the
    // run's start and must not find events before it).
    assert!(
        evs.iter().all(|e| e.ts_ns >= starts[0].mono_anchor_ns),
        "{mode}: first event at {} before the process start stamp {}",
        evs.iter().map(|e| e.ts_ns).min().unwrap_or(0),
        starts[0].mono_anchor_ns
    );
    assert!(
        !recs.iter().any(|r| matches!(r, Record::Dropped(_))),
        "no drops"
    );
}

#[test]
fn direct_linking_is_captured_exactly() {
    check_basic("direct");
}

#[test]
fn dlopen_dlsym_is_captured_exactly() {
    check_basic("dlsym");
}

#[test]
fn get_proc_address_is_captured_exactly() {
    check_basic("proc");
}

#[test]
fn threads_arriving_during_start_up_lose_nothing() {
    // Two threads on two cores make their first hooked call at once: one runs the shim's
    // start-up and the other must wait for it. The waiter used to give up after 20,000
    // sched_yields, which return at once when each thread has a core, while start-up
    // cleared the whole shared queue (64 MiB here, tens of ms): the second thread's
    // first 3 calls were dropped every run. Start-up no longer writes the queue, and the
    // wait is bounded in time, not in yields.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("start-up.mwcap");
    let (threads, pairs) = (2usize, 10usize);
    b.run(
        "direct",
        &["bench-ab", &threads.to_string(), "1", &pairs.to_string()],
        Some(&cap),
        &[("MEMWATCH_BUFFER_EVENTS", "1048576")],
    );
    let recs = read_capture(&cap);
    assert_eq!(dropped_total(&recs), 0, "events dropped");
    let evs = events(&recs);
    assert_eq!(count_api(&evs, "hipSetDevice"), threads);
    assert_eq!(count_api(&evs, "hipMalloc"), threads * (1 + pairs));
    assert_eq!(count_api(&evs, "hipFree"), threads * (1 + pairs));
}

/// The `threads` scenario (8 threads, one device each, `n` pairs per thread): every call
/// is in the capture, on its thread and device, and none was dropped.
#[test]
fn eight_threads_on_eight_devices() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("threads.mwcap");
    let n = 300u64;
    let out = b.run("dlsym", &["threads", &n.to_string()], Some(&cap), &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let recs = read_capture(&cap);
    assert_eq!(dropped_total(&recs), 0, "events dropped");
    let evs = events(&recs);
    let mut seen_tids = std::collections::HashSet::new();
    for line in text.lines().filter(|l| l.starts_with("T ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let dev: i32 = f[1].trim_start_matches("dev=").parse().unwrap();
        let tid: u32 = f[2].trim_start_matches("tid=").parse().unwrap();
        seen_tids.insert(tid);
        let mine: Vec<_> = evs.iter().filter(|e| e.tid == tid).collect();
        // set-device + n allocs + n frees, all on this thread's device
        assert_eq!(mine.len() as u64, 1 + 2 * n, "thread {tid} (device {dev})");
        assert_eq!(mine[0].api().name(), "hipSetDevice");
        assert!(
            mine.iter().all(|e| e.device == dev),
            "device of thread {tid}"
        );
        let sizes: Vec<u64> = mine
            .iter()
            .filter(|e| e.is(EventKind::Alloc))
            .map(|e| e.size)
            .collect();
        let want: Vec<u64> = (0..n).map(|i| (dev as u64 + 1) * 4096 + i).collect();
        assert_eq!(sizes, want, "alloc sizes of thread {tid}");
        assert_eq!(
            mine.iter().filter(|e| e.is(EventKind::Free)).count() as u64,
            n
        );
    }
    assert_eq!(seen_tids.len(), 8);
    assert_eq!(evs.len() as u64, 8 * (1 + 2 * n));
}

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

/// A program that closes every descriptor it did not open and opens its own file gets the
/// sink's old number: the shim neither writes capture frames into that file nor closes
/// it, reopens its sink and keeps recording the same process (one image, every call). Its
/// flusher thread takes no signal the program blocks and waits for with sigwait.
#[test]
fn closing_our_descriptor_and_sigwait_do_not_disturb_the_program() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("closefds.mwcap");
    let data = tmp.path().join("data.txt");
    let data_s = data.to_str().unwrap();
    let plain = b.run("direct", &["closefds", data_s], None, &[]);
    let out = b.run("direct", &["closefds", data_s], Some(&cap), &[]);
    assert_eq!(out.stdout, plain.stdout, "same output as without the shim");
    assert!(String::from_utf8_lossy(&out.stdout).contains("S sigwait=10"));
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "program data\n");
    let recs = read_capture(&cap);
    let evs = events(&recs);
    assert_eq!(count_api(&evs, "hipMalloc"), 21, "every call recorded");
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
        "a reconnect repeats the image's process_start"
    );
}

/// A panic in memwatch's own part of a hook (forced by the fault switch,
/// `MEMWATCH_FAULT`, before or after the real call) never reaches the program: on every
/// lookup path each call still reaches the runtime once with its arguments, and the
/// program prints the same results, out-pointers and errno values, the same stderr, and
/// exits 0; only the records are lost. With `MEMWATCH_DEBUG` the shim says each time it
/// caught one, which shows the switch really fired.
#[test]
fn a_panic_in_memwatchs_bookkeeping_never_reaches_the_program() {
    let b = built("capture");
    for mode in ["direct", "dlsym", "proc"] {
        let plain = b.run(mode, &["basic"], None, &[]);
        let calls = expected(&String::from_utf8_lossy(&plain.stdout)).len();
        assert!(calls >= 80, "{mode}: {calls} calls");
        for fault in ["panic-before-call", "panic-after-call"] {
            let tmp = tempfile::tempdir().unwrap();
            let cap = tmp.path().join("fault.mwcap");
            let out = b.run(mode, &["basic"], Some(&cap), &[("MEMWATCH_FAULT", fault)]);
            assert_eq!(
                normalized(&plain.stdout),
                normalized(&out.stdout),
                "{mode} {fault}: output differs"
            );
            assert_eq!(
                String::from_utf8_lossy(&plain.stderr),
                String::from_utf8_lossy(&out.stderr),
                "{mode} {fault}: stderr differs"
            );
            let recs = read_capture(&cap);
            assert!(events(&recs).is_empty(), "{mode} {fault}: nothing recorded");
            let told = b.run(
                mode,
                &["basic"],
                Some(&cap),
                &[("MEMWATCH_FAULT", fault), ("MEMWATCH_DEBUG", "1")],
            );
            let caught = String::from_utf8_lossy(&told.stderr)
                .matches("memwatch: internal panic caught at ")
                .count();
            assert!(
                caught >= calls,
                "{mode} {fault}: {caught} panics caught for {calls} recorded calls"
            );
            assert_eq!(normalized(&plain.stdout), normalized(&told.stdout));
        }
    }
}

/// Runs `mwtest direct ARGS` under the shim with `MEMWATCH_SINK=file:SINK`, bounded
/// (10 s: a hang fails the test); returns its output and how long it ran.
fn run_with_sink(
    b: &Built,
    args: &[&str],
    sink: &std::path::Path,
) -> (std::process::Output, std::time::Duration) {
    let t0 = std::time::Instant::now();
    let mut child = std::process::Command::new(&b.direct)
        .arg("direct")
        .args(args)
        .env("MWTEST_LIBDIR", &b.dir)
        .env("LD_PRELOAD", &b.shim)
        .env("MEMWATCH_SINK", format!("file:{}", sink.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read the pipes while waiting, so a chatty program cannot block on them.
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut v).map(|_| v)
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut v).map(|_| v)
    });
    let status = wait_bounded(&mut child, &format!("mwtest {args:?} with a FIFO sink"));
    let took = t0.elapsed();
    let out = std::process::Output {
        status,
        stdout: out_t.join().unwrap().unwrap(),
        stderr: err_t.join().unwrap().unwrap(),
    };
    (out, took)
}

fn mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// `MEMWATCH_SINK=file:FIFO` never holds the program: with no reader the open fails
/// instead of waiting for one (the program used to hang in `open` at exit), and with a
/// reader that never reads, the last pass gives up at its deadline (2 s) instead of
/// waiting in `write` for room: the program ends (a hang fails the test, past a generous
/// deadline). Output and exit status are the program's own.
#[test]
fn a_fifo_sink_never_holds_the_program() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let plain = b.run("direct", &["basic"], None, &[]);
    let fifo = tmp.path().join("no-reader.fifo");
    mkfifo(&fifo);
    let (out, took) = run_with_sink(b, &["basic"], &fifo);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
    // (It ended: run_with_sink fails the test as hung otherwise; how long it took is a
    // figure, not a check, on a shared machine.)
    println!("FIFO without a reader: the program ended after {took:?}");

    // A reader that opens the FIFO and never reads: 600,000 calls are ~43 MB of frames,
    // far more than a pipe holds.
    let stalled = tmp.path().join("stalled.fifo");
    mkfifo(&stalled);
    let c = std::ffi::CString::new(stalled.to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated path; the descriptor is closed below.
    let reader = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK) };
    assert!(reader >= 0, "open the FIFO for reading");
    let args = ["bench", "1", "300", "1000"];
    let t0 = std::time::Instant::now();
    let plain = b.run("direct", &args, None, &[]);
    let plain_took = t0.elapsed();
    let (out, took) = run_with_sink(b, &args, &stalled);
    // SAFETY: our descriptor.
    unsafe { libc::close(reader) };
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout).lines().count(),
        String::from_utf8_lossy(&out.stdout).lines().count()
    );
    println!("FIFO with a stalled reader: {took:?} against {plain_took:?} without the shim");
}

#[test]
fn without_sink_nothing_is_written_and_behaviour_is_unchanged() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let plain = b.run("proc", &["basic"], None, &[]);
    let mut c = std::process::Command::new(&b.dl);
    c.args(["proc", "basic"])
        .env("MWTEST_LIBDIR", &b.dir)
        .env("LD_PRELOAD", &b.shim)
        .env_remove("MEMWATCH_SINK")
        .current_dir(tmp.path());
    let out = c.output().unwrap();
    assert!(out.status.success());
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn unreachable_socket_sink_changes_nothing() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let plain = b.run("dlsym", &["basic"], None, &[]);
    let sock = tmp.path().join("nobody-listens.sock");
    let mut c = std::process::Command::new(&b.dl);
    c.args(["dlsym", "basic"])
        .env("MWTEST_LIBDIR", &b.dir)
        .env("LD_PRELOAD", &b.shim)
        .env("MEMWATCH_SINK", format!("unix:{}", sock.display()));
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    // It ends (not waiting for a listener: failed as hung otherwise), as it does without
    // the shim.
    wait_bounded(&mut child, "a program with an unreachable socket sink");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
}

#[test]
fn hook_families_can_be_switched_off() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("hip-only.mwcap");
    b.run("dlsym", &["basic"], Some(&cap), &[("MEMWATCH_HOOK", "hip")]);
    let evs = events(&read_capture(&cap));
    assert!(!evs.is_empty());
    assert!(
        evs.iter().all(|e| e.api().family() == Some(ApiFamily::Hip)),
        "only HIP recorded"
    );
}

#[test]
fn device_info_describes_simulated_devices() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("devices.mwcap");
    // Long enough that the flusher (not the exit path) sees the events.
    b.run(
        "direct",
        &["threads", "20000"],
        Some(&cap),
        &[("MEMWATCH_TESTRT_CAPACITY", "123456789")],
    );
    let recs = read_capture(&cap);
    let mut devs: Vec<_> = recs
        .iter()
        .filter_map(|r| {
            if let Record::DeviceInfo(d) = r {
                Some(d.clone())
            } else {
                None
            }
        })
        .collect();
    devs.sort_by_key(|d| d.device);
    assert!(!devs.is_empty(), "device_info frames");
    for d in &devs {
        assert_eq!(d.total_bytes, 123456789);
        assert_eq!(d.name, format!("memwatch simulated GPU {}", d.device));
        assert_eq!(
            memwatch_wire::Vendor::from_u8(d.vendor),
            memwatch_wire::Vendor::Simulated
        );
    }
    let ids: Vec<i32> = devs.iter().map(|d| d.device).collect();
    let mut dedup = ids.clone();
    dedup.dedup();
    assert_eq!(ids, dedup, "each device described once");
}

#[test]
fn unix_socket_sink_streams_each_process() {
    use std::io::Read;
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("recv.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let server = std::thread::spawn(move || {
        // fork scenario: the parent and the child each connect once.
        let mut streams = Vec::new();
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = Vec::new();
            streams.push(std::thread::spawn(move || {
                s.read_to_end(&mut buf).unwrap();
                buf
            }));
        }
        streams
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let mut c = std::process::Command::new(&b.direct);
    c.args(["direct", "fork"])
        .env("LD_PRELOAD", &b.shim)
        .env("MEMWATCH_SINK", format!("unix:{}", sock.display()));
    let out = c.output().unwrap();
    assert!(out.status.success());
    let bufs = server.join().unwrap();
    let mut sizes = Vec::new();
    for buf in bufs {
        let mut r =
            memwatch_wire::FrameReader::new(&buf[..], memwatch_wire::ReadMode::Strict).unwrap();
        let mut recs = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            recs.push(rec);
        }
        assert!(
            matches!(recs.first(), Some(Record::ProcessStart(_))),
            "{recs:?}"
        );
        assert!(
            matches!(recs.last(), Some(Record::ProcessEnd(_))),
            "{recs:?}"
        );
        sizes.extend(
            events(&recs)
                .iter()
                .filter(|e| e.is(EventKind::Alloc))
                .map(|e| e.size),
        );
    }
    sizes.sort();
    assert_eq!(sizes, vec![1000, 2000, 3000]);
}

#[test]
fn oom_under_small_capacity_is_recorded_with_real_code() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("oom.mwcap");
    // 1 MiB per device: the basic scenario's 1 MiB hipMalloc still fits, later ones fail.
    let plain = b.run(
        "dlsym",
        &["basic"],
        None,
        &[("MEMWATCH_TESTRT_CAPACITY", "1048576")],
    );
    let out = b.run(
        "dlsym",
        &["basic"],
        Some(&cap),
        &[("MEMWATCH_TESTRT_CAPACITY", "1048576")],
    );
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
    let want = expected(&String::from_utf8_lossy(&out.stdout));
    let evs = events(&read_capture(&cap));
    assert_eq!(evs.len(), want.len());
    let failed: Vec<_> = evs
        .iter()
        .filter(|e| e.is(EventKind::AllocFailed))
        .collect();
    assert!(failed.len() >= 5, "several allocations fail at 1 MiB");
    assert!(
        failed.iter().all(|e| e.result != 0 && e.ptr == 0),
        "{failed:?}"
    );
    assert!(
        failed.iter().filter(|e| e.result == 2).count() >= 5,
        "{failed:?}"
    );
    assert!(failed
        .iter()
        .any(|e| e.api().name() == "cuMemAlloc_v2" && e.size == 7 << 20 && e.result == 2));
}

#[test]
fn timestamps_are_clock_monotonic_and_durations_fit() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("clock.mwcap");
    let out = b.run("direct", &["clock"], Some(&cap), &[]);
    let evs = events(&read_capture(&cap));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("K ")).collect();
    assert_eq!(lines.len(), 20);
    assert_eq!(evs.len(), 20);
    for (line, e) in lines.iter().zip(&evs) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (size, before, after): (u64, u64, u64) = (
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        );
        assert_eq!(e.size, size);
        // the converted TSC clock may be off by a few microseconds at most
        let slack = 20_000;
        assert!(
            e.ts_ns + slack >= before && e.ts_ns <= after + slack,
            "ts {} not in [{before}, {after}]",
            e.ts_ns
        );
        assert!(
            e.duration_ns <= after - before + slack,
            "duration {} > {}",
            e.duration_ns,
            after - before
        );
    }
}

#[test]
fn thousands_of_short_threads_lose_nothing() {
    // More threads than the ring registry holds (1024), one after another: rings of
    // ended threads are reused, every call is captured.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("churn.mwcap");
    b.run("direct", &["churn", "1500"], Some(&cap), &[]);
    let recs = read_capture(&cap);
    let evs = events(&recs);
    assert_eq!(evs.len(), 3000);
    assert_eq!(
        evs.iter()
            .filter(|e| e.is(EventKind::Alloc) && e.size == 512)
            .count(),
        1500
    );
    let tids: std::collections::HashSet<u32> = evs.iter().map(|e| e.tid).collect();
    assert!(tids.len() > 100, "distinct threads: {}", tids.len());
    assert!(!recs.iter().any(|r| matches!(r, Record::Dropped(_))));
}

#[test]
fn threads_past_the_ring_registry_use_the_shared_queue() {
    // 1100 threads alive at once: 1024 get rings of their own, the other 76 go through
    // the shared fallback queue (mapped at start-up, its slots first written here).
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("crowd.mwcap");
    let n = 1100u64;
    b.run(
        "direct",
        &["crowd", &n.to_string()],
        Some(&cap),
        &[("MEMWATCH_BUFFER_EVENTS", "256")],
    );
    let recs = read_capture(&cap);
    assert_eq!(dropped_total(&recs), 0, "events dropped");
    let evs = events(&recs);
    let mut sizes: Vec<u64> = evs
        .iter()
        .filter(|e| e.is(EventKind::Alloc))
        .map(|e| e.size)
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, (1024..1024 + n).collect::<Vec<_>>());
    assert_eq!(
        evs.iter().filter(|e| e.is(EventKind::Free)).count() as u64,
        n
    );
    let tids: std::collections::HashSet<u32> = evs.iter().map(|e| e.tid).collect();
    assert_eq!(tids.len() as u64, n, "one thread per pair");
}

#[test]
fn lookups_of_absent_runtimes_still_fail() {
    // A program that probes for a GPU runtime with dlsym(RTLD_DEFAULT) must not find the
    // shim's own exports when no runtime is loaded.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("probe.mwcap");
    let plain = b.run("dlsym", &["probe"], None, &[]);
    let shimmed = b.run("dlsym", &["probe"], Some(&cap), &[]);
    let text = String::from_utf8_lossy(&shimmed.stdout).to_string();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), text);
    assert!(text.contains("N probe hipMalloc found=0 error=1"), "{text}");
    assert!(
        text.contains("N probe cuGetProcAddress_v2 found=0 error=1"),
        "{text}"
    );
    assert!(text.contains("N probe dlsym found=1 error=0"), "{text}");
    assert!(!cap.exists(), "no GPU call, no capture");
    // The same when the shim records nothing (no valid sink, or the family switched off):
    // it still exports the names, and the probe still must not see them.
    for env in [
        [
            ("MEMWATCH_SINK", "unix:/nonexistent/memwatch.sock"),
            ("MEMWATCH_HOOK", "all"),
        ],
        [("MEMWATCH_SINK", "bogus"), ("MEMWATCH_HOOK", "all")],
        [
            ("MEMWATCH_SINK", "file:/dev/null"),
            ("MEMWATCH_HOOK", "pjrt"),
        ],
    ] {
        let mut c = std::process::Command::new(b.program("dlsym"));
        c.args(["dlsym", "probe"])
            .env("MWTEST_LIBDIR", &b.dir)
            .env("LD_PRELOAD", &b.shim)
            .envs(env);
        let out = c.output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&plain.stdout),
            "{env:?}"
        );
    }
}

#[test]
fn runtime_reloaded_after_dlclose_is_followed() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("reload.mwcap");
    let plain = b.run("dlsym", &["reload"], None, &[]);
    let out = b.run("dlsym", &["reload"], Some(&cap), &[]);
    assert_eq!(normalized(&plain.stdout), normalized(&out.stdout));
    let want = expected(&String::from_utf8_lossy(&out.stdout));
    let evs = events(&read_capture(&cap));
    let got: Vec<Expected> = evs.iter().map(|e| as_expected(e, false)).collect();
    assert_eq!(got, want);
}

/// A program that dlopens the runtime, allocates, dlcloses it and exits at once: the
/// shim describes the device before the library goes (the exit-time flush never asks a
/// runtime), dlclose's result and errno are unchanged, and the wrapper the program kept
/// no longer reaches the unmapped library.
#[test]
fn device_info_survives_dlclose_before_exit() {
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("dlclose.mwcap");
    let plain = b.run("dlsym", &["dlclose-exit"], None, &[]);
    let out = b.run(
        "dlsym",
        &["dlclose-exit"],
        Some(&cap),
        &[("MWTEST_CALL_AFTER_CLOSE", "1")],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let plain_text = String::from_utf8_lossy(&plain.stdout).to_string();
    let d_line = |t: &str| t.lines().find(|l| l.starts_with("D ")).map(str::to_string);
    assert_eq!(
        d_line(&text),
        d_line(&plain_text),
        "dlclose result/errno unchanged"
    );
    assert!(text.contains("D dlclose=0 errno=77 unloaded=1"), "{text}");
    assert!(text.contains("A after_close=3"), "{text}");
    let recs = read_capture(&cap);
    let devs: Vec<_> = recs
        .iter()
        .filter_map(|r| match r {
            Record::DeviceInfo(d) => Some(d.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(devs.len(), 1, "{recs:?}");
    assert_eq!(devs[0].device, 3);
    assert_eq!(devs[0].name, "memwatch simulated GPU 3");
    let evs = events(&recs);
    assert_eq!(
        evs.iter().map(|e| (e.size, e.device)).collect::<Vec<_>>(),
        vec![(0, 3), (4321, 3)],
        "set-device and the allocation, nothing for the call after dlclose"
    );
}

#[test]
fn an_address_freed_and_reused_by_overlapping_calls_keeps_its_order() {
    // Thread B enters hipMalloc 2 ms before the main thread enters hipFree(P); the
    // runtime holds B until that free has completed and then hands it P. In time order
    // the capture must show P freed before B's allocation of it. Stamped at entry, B's
    // allocation sorted before the free: the report then counted a missed free and
    // took P's new allocation for freed.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("race.mwcap");
    let out = b.run("direct", &["reuse-race"], Some(&cap), &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let ptrs: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("Q "))
        .map(|l| {
            let p = l.rsplit("ptr=").next().unwrap().trim_start_matches("0x");
            u64::from_str_radix(p, 16).unwrap()
        })
        .collect();
    assert_eq!(ptrs.len(), 4, "{text}");
    let p = ptrs[0];
    assert!(ptrs.iter().all(|&x| x == p), "the runtime reused P: {text}");
    let mut evs = events(&read_capture(&cap));
    assert_eq!(evs.len(), 4);
    evs.sort_by_key(|e| e.ts_ns); // stable, as the analysis sorts
    let order: Vec<(&str, Option<EventKind>, u64)> = evs
        .iter()
        .map(|e| (e.api().name(), e.kind(), e.ptr))
        .collect();
    let (alloc, free) = (Some(EventKind::Alloc), Some(EventKind::Free));
    assert_eq!(
        order,
        vec![
            ("hipMalloc", alloc, p),
            ("hipFree", free, p),
            ("hipMalloc", alloc, p),
            ("hipFree", free, p)
        ]
    );
    assert_ne!(
        evs[2].tid, evs[1].tid,
        "the reusing allocation is thread B's"
    );
}

#[test]
fn bench_ab_records_only_its_hooked_batches() {
    // `mwtest bench-ab` times the runtime through the shim's hooks and, in the same
    // process, through names the shim does not intercept: its "without the shim" half is
    // only honest if none of those calls is recorded.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("ab.mwcap");
    let (threads, rounds, pairs) = (2usize, 10usize, 100usize);
    let out = b.run(
        "direct",
        &[
            "bench-ab",
            &threads.to_string(),
            &rounds.to_string(),
            &pairs.to_string(),
        ],
        Some(&cap),
        &[("MEMWATCH_BUFFER_EVENTS", "65536")],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("AB "))
        .unwrap_or_else(|| panic!("no AB line: {text}"));
    for key in ["direct_median_ns_per_call", "shim_median_ns_per_call"] {
        let v: f64 = field(line, key);
        assert!(v > 0.0, "{line}");
    }
    let evs = events(&read_capture(&cap));
    // Per thread: its set-device, one untimed warm-up pair, then `rounds` hooked batches.
    let pairs_hooked = threads * (1 + rounds * pairs);
    assert_eq!(count_api(&evs, "hipMalloc"), pairs_hooked);
    assert_eq!(count_api(&evs, "hipFree"), pairs_hooked);
    assert_eq!(count_api(&evs, "hipSetDevice"), threads);
    // Out-of-range arguments are refused, not run with a clipped thread or round count.
    for bad in [["0", "10"], ["65", "10"], ["2", "0"], ["2", "5000"]] {
        let out = std::process::Command::new(b.program("direct"))
            .args(["direct", "bench-ab", bad[0], bad[1], "10"])
            .env("MWTEST_LIBDIR", &b.dir)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "bench-ab {bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("bench-ab: 1-64 threads"),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        evs.len(),
        2 * pairs_hooked + threads,
        "nothing else recorded"
    );
}

#[test]
fn bench_lat_records_only_its_hooked_calls() {
    // `mwtest bench-lat` times each call alone, alternating pairs through the hooks with
    // pairs under names the shim does not intercept: the hooked half must be captured
    // whole and the direct half not at all, or its medians compare unlike things.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    let cap = tmp.path().join("lat.mwcap");
    let (threads, pairs) = (2usize, 500usize);
    let out = b.run(
        "direct",
        &["bench-lat", &threads.to_string(), &pairs.to_string()],
        Some(&cap),
        &[("MEMWATCH_BUFFER_EVENTS", "65536")],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("L "))
        .unwrap_or_else(|| panic!("no L line: {text}"));
    for key in [
        "shim_malloc_median_ns",
        "shim_free_median_ns",
        "direct_malloc_median_ns",
        "direct_free_median_ns",
    ] {
        let v: f64 = field(line, key);
        assert!(v > 0.0, "{key} in {line}");
    }
    let added: f64 = field(line, "added_per_call_ns");
    let parts: f64 = field::<f64>(line, "added_malloc_ns") + field::<f64>(line, "added_free_ns");
    assert!((added - parts / 2.0).abs() < 0.06, "{line}");
    let recs = read_capture(&cap);
    assert_eq!(dropped_total(&recs), 0, "events dropped");
    let evs = events(&recs);
    // Per thread: its set-device, one untimed warm-up pair, then `pairs` hooked pairs.
    let pairs_hooked = threads * (1 + pairs);
    assert_eq!(count_api(&evs, "hipMalloc"), pairs_hooked);
    assert_eq!(count_api(&evs, "hipFree"), pairs_hooked);
    assert_eq!(
        evs.len(),
        2 * pairs_hooked + threads,
        "nothing else recorded"
    );
    for bad in [["0", "10"], ["65", "10"], ["2", "0"]] {
        let out = std::process::Command::new(b.program("direct"))
            .args(["direct", "bench-lat", bad[0], bad[1]])
            .env("MWTEST_LIBDIR", &b.dir)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "bench-lat {bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("bench-lat: 1-64 threads"),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn cuda_driver_bench_records_only_its_dlsym_batches() {
    // bench/cuda_driver_overhead.sh's side-by-side figure compares calls through the
    // dlsym'd driver entry points (the shim's wrappers) with calls through the functions'
    // own addresses, read from libcuda's ELF symbol table: its "without the shim" half is
    // only honest if the shim sees none of those. Here the simulated runtime stands in
    // for libcuda.so.1.
    let b = built("capture");
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        b.dir.join("libmemwatch_testrt.so"),
        tmp.path().join("libcuda.so.1"),
    )
    .unwrap();
    let prog = tmp.path().join("cuda_driver_pairs");
    let src = crate_dir().join("../../bench/cuda_driver_pairs.c");
    cc(&[
        "-O2",
        "-Wall",
        "-pthread",
        "-o",
        prog.to_str().unwrap(),
        src.to_str().unwrap(),
        "-ldl",
    ]);
    let (threads, rounds, pairs) = (2usize, 5usize, 50usize);
    // ab-async also runs with the diagnostic pad (busy work after each dlsym'd call),
    // which must not change what is called or captured.
    for (mode, alloc, free, pad) in [
        ("ab-sync", "cuMemAlloc_v2", "cuMemFree_v2", ""),
        ("ab-async", "cuMemAllocAsync", "cuMemFreeAsync", "20"),
    ] {
        let cap = tmp.path().join(format!("{mode}.mwcap"));
        let out = std::process::Command::new(&prog)
            .args([
                mode,
                &threads.to_string(),
                &rounds.to_string(),
                &pairs.to_string(),
                "4096",
            ])
            .env("LD_LIBRARY_PATH", tmp.path())
            .env("LD_PRELOAD", &b.shim)
            .env("MEMWATCH_SINK", format!("file:{}", cap.display()))
            .env("MEMWATCH_BUFFER_EVENTS", "65536")
            .env("CUDA_PAIRS_PAD_NS", pad)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(
            text.contains(&format!("pad: {pad} ns after each dlsym'd call")),
            !pad.is_empty(),
            "{mode}: {text}"
        );
        assert!(
            out.status.success(),
            "{mode}: {:?}\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(field::<usize>(&text, "failed"), 0, "{text}");
        // Per thread: one warm-up batch of each kind, then per round two batches of each.
        let hooked_pairs = threads * (2 * rounds + 1) * pairs;
        assert_eq!(
            field::<usize>(&text, "hooked_calls"),
            2 * hooked_pairs,
            "{text}"
        );
        assert_eq!(field::<usize>(&text, "calls"), 4 * hooked_pairs, "{text}");
        let recs = read_capture(&cap);
        assert_eq!(dropped_total(&recs), 0, "{mode}");
        let evs = events(&recs);
        assert_eq!(count_api(&evs, alloc), hooked_pairs, "{mode}: {alloc}");
        assert_eq!(count_api(&evs, free), hooked_pairs, "{mode}: {free}");
        assert!(
            evs.iter()
                .filter(|e| e.api().name() == alloc)
                .all(|e| e.result == 0 && e.size == 4096 && e.ptr != 0),
            "{mode}: every allocation succeeded with its size and pointer"
        );
    }
    // Bad arguments are refused (exit 2, the ranges named), not run clipped. `pad` is
    // CUDA_PAIRS_PAD_NS ("": none).
    let run = |args: &[&str], libdir: &std::path::Path, pad: &str| {
        std::process::Command::new(&prog)
            .args(args)
            .env("LD_LIBRARY_PATH", libdir)
            .env("CUDA_PAIRS_PAD_NS", pad)
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap()
    };
    for bad in [
        ["foo", "1", "1", "1", "1"],
        ["sync", "0", "1", "1", "1"],
        ["ab-async", "65", "1", "1", "1"],
        ["sync", "1", "0", "1", "1"],
        ["sync", "1", "100001", "1", "1"],
        ["async", "1", "1", "0", "1"],
        ["sync", "1", "1", "1", "0"],
    ] {
        let out = run(&bad, tmp.path(), "");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(
            err.contains("1-64 threads, 1-100000 batches"),
            "{bad:?}: {err}"
        );
    }
    let out = run(&["sync", "1"], tmp.path(), "");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: cuda_driver_pairs"));
    // The pad is a number of ns, and only for the side-by-side modes.
    for (mode, pad) in [
        ("ab-async", "x"),
        ("ab-sync", "-1"),
        ("ab-sync", "nan"),
        ("async", "10"),
    ] {
        let out = run(&[mode, "1", "1", "1", "4096"], tmp.path(), pad);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{mode} pad {pad}: {err}");
        assert!(
            err.contains("CUDA_PAIRS_PAD_NS wants 0-1000000 ns"),
            "{err}"
        );
    }
    // A libcuda.so.1 without the driver API: exit 1, naming what is missing.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let src = empty.join("empty.c");
    std::fs::write(&src, "int memwatch_not_a_driver;\n").unwrap();
    let lib = empty.join("libcuda.so.1");
    cc(&[
        "-shared",
        "-fPIC",
        "-o",
        lib.to_str().unwrap(),
        src.to_str().unwrap(),
    ]);
    let out = run(&["sync", "1", "1", "1", "4096"], &empty, "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no cuInit in libcuda"), "{err}");
}
