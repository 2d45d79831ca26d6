//! Process images and time order: events before a process's announcement, a thread's
//! calls across flushes whose clocks disagree, and an exec starting a new image of the
//! same pid (split by time, not by file order).

use memwatch_analysis::capture::*;
use memwatch_wire::*;

use crate::fixtures::*;

#[test]
fn events_before_the_announcement_start_the_capture() {
    // The shim announces a process at its first flush, after its first events.
    let recs = vec![
        start(20, 500, &["late"]),
        Record::Events(vec![
            ev(
                20,
                e(100, 5, 1, 0, Alloc, Device, Api::CudaMalloc, 0x10, 64),
            ),
            ev(20, e(600, 5, 1, 0, Free, Device, Api::CudaFree, 0x10, 0)),
        ]),
    ];
    let r = report(&encode(&recs));
    let p = &r.processes[0];
    assert_eq!(p.start_ns, Some(400));
    assert_eq!((p.devices[0].peak_bytes, p.devices[0].peak_ts_ns), (64, 0));
    // Wall clock of the start = the anchor's wall time minus 400 ns.
    assert_eq!(
        r.start_wall_unix_ns,
        Some(1_700_000_000_000_000_000 + 500 - 400)
    );
    assert_eq!(r.duration_ns, 505);
}

/// One thread frees a buffer and then allocates the next, but the second flush's clock
/// conversion put the allocation 2 µs *before* the free (seen on a loaded VM): the
/// thread's order must win, so only one buffer is ever live.
#[test]
fn a_threads_calls_keep_their_order_when_flush_clocks_disagree() {
    let first = vec![
        ev(
            7,
            e(
                1_000,
                50,
                70,
                0,
                Alloc,
                Device,
                Api::HipMalloc,
                0xa000,
                4096,
            ),
        ),
        ev(
            7,
            e(10_000, 50, 70, 0, Free, Device, Api::HipFree, 0xa000, 0),
        ),
    ];
    let second = vec![ev(
        7,
        e(
            8_000,
            50,
            70,
            0,
            Alloc,
            Device,
            Api::HipMalloc,
            0xb000,
            4097,
        ),
    )];
    let r = report(&encode(&[
        start(7, 0, &["t"]),
        Record::Events(first),
        Record::Events(second),
    ]));
    let d0 = &r.processes[0].devices[0];
    assert_eq!(d0.alloc_count, 2);
    assert_eq!(d0.peak_bytes, 4097, "the free came first in the thread");
    assert_eq!(d0.live_bytes_at_exit, 4097);
}

/// exec keeps the pid: the second `process_start` of pid 20 starts image 1. The old
/// image's unfreed 100 bytes are released by the exec (not a leak), the new image reuses
/// the same pointer without a "reused" count, and events before the first start belong
/// to image 0.
#[test]
fn exec_starts_a_new_image_of_the_same_pid() {
    let p = 20;
    let bytes = encode(&[
        Record::Events(vec![ev(
            p,
            e(5, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xa0, 10),
        )]),
        start(p, 0, &["/bin/old"]),
        Record::Events(vec![ev(
            p,
            e(10, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xa1, 90),
        )]),
        Record::ProcessEnd(ProcessEnd {
            pid: p,
            ts_ns: BASE + 50,
            exit_code: -1,
        }),
        start(p, 60, &["/bin/new", "x"]),
        Record::Events(vec![
            ev(p, e(70, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xa0, 7)),
            ev(p, e(80, 1, 1, 0, Free, Device, Api::HipFree, 0xa1, 0)),
        ]),
    ]);
    let r = report(&bytes);
    assert_eq!(r.processes.len(), 2);
    let (old, new) = (&r.processes[0], &r.processes[1]);
    assert_eq!((old.pid, old.image, old.ended_by_exec), (p, 0, true));
    assert_eq!((new.pid, new.image, new.ended_by_exec), (p, 1, false));
    assert_eq!(old.command, vec!["/bin/old"]);
    assert_eq!(new.command, vec!["/bin/new", "x"]);
    let (od, nd) = (&old.devices[0], &new.devices[0]);
    assert_eq!((od.alloc_count, od.live_bytes_at_exit), (2, 0));
    assert_eq!((od.live_bytes_at_exec, od.live_allocs_at_exec), (100, 2));
    // The new image's free of 0xa1 is not the old image's allocation.
    assert_eq!(
        (nd.alloc_count, nd.free_count, nd.unmatched_frees),
        (1, 0, 1)
    );
    assert_eq!((nd.live_bytes_at_exit, nd.reused_without_free), (7, 0));
    // Leaks: none for the exec'd image, the 7-byte allocation for the new one.
    assert!(od.largest_leaks.is_empty());
    assert_eq!(
        nd.largest_leaks
            .iter()
            .map(|a| (a.size, a.ptr))
            .collect::<Vec<_>>(),
        vec![(7, 0xa0)]
    );

    let mut out = Vec::new();
    let s = write_trace(load(&bytes), &TraceOptions::default(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let ops: Vec<&str> = text.lines().collect();
    assert_eq!(
        ops,
        vec![
            r#"{"op":"alloc","id":1,"size":10,"ts_ns":5,"device":0,"stream":0}"#,
            r#"{"op":"alloc","id":2,"size":90,"ts_ns":10,"device":0,"stream":0}"#,
            r#"{"op":"free","id":1,"ts_ns":50,"device":0,"stream":0}"#,
            r#"{"op":"free","id":2,"ts_ns":50,"device":0,"stream":0}"#,
            r#"{"op":"alloc","id":3,"size":7,"ts_ns":70,"device":0,"stream":1}"#,
        ]
    );
    assert_eq!((s.allocs, s.frees), (3, 2));
}

/// `memwatch run` reads each connection on its own thread: the new image's frames can
/// reach the file before the old image's last events and its `process_end`. Images are
/// told apart by time, so the result is the same as in file order.
#[test]
fn exec_images_are_split_by_time_not_file_order() {
    let p = 21;
    const MS: u64 = 1_000_000;
    let old_events = Record::Events(vec![
        ev(
            p,
            e(10 * MS, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xb1, 100),
        ),
        ev(
            p,
            e(20 * MS, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xb2, 50),
        ),
        ev(p, e(30 * MS, 1, 1, 0, Free, Device, Api::HipFree, 0xb2, 0)),
    ]);
    let new_events = Record::Events(vec![
        // Before the new image's first flush (its anchor, 90 ms) but after the exec.
        ev(
            p,
            e(70 * MS, 1, 1, 0, Alloc, Device, Api::HipMalloc, 0xb1, 7),
        ),
        ev(p, e(95 * MS, 1, 1, 0, Free, Device, Api::HipFree, 0xb1, 0)),
    ]);
    let end = Record::ProcessEnd(ProcessEnd {
        pid: p,
        ts_ns: BASE + 50 * MS,
        exit_code: -1,
    });
    let shuffled = encode(&[
        start(p, 0, &["/bin/old"]),
        start(p, 90 * MS, &["/bin/new"]),
        new_events.clone(),
        old_events.clone(),
        end.clone(),
    ]);
    let ordered = encode(&[
        start(p, 0, &["/bin/old"]),
        old_events,
        end,
        start(p, 90 * MS, &["/bin/new"]),
        new_events,
    ]);
    for bytes in [&shuffled, &ordered] {
        let r = report(bytes);
        assert_eq!(r.processes.len(), 2);
        let (old, new) = (&r.processes[0], &r.processes[1]);
        assert_eq!(
            (old.image, old.command.clone()),
            (0, vec!["/bin/old".into()])
        );
        assert_eq!(
            (new.image, new.command.clone()),
            (1, vec!["/bin/new".into()])
        );
        // The exec'd image's end carries the wire's -1 ("no status"): not a status, so
        // null; its end time is kept.
        assert_eq!(old.exit_code, None);
        assert!(old.ended_by_exec && old.end_ns.is_some());
        assert_eq!(new.exit_code, None);
        let (od, nd) = (&old.devices[0], &new.devices[0]);
        assert_eq!(
            (od.alloc_count, od.free_count, od.live_bytes_at_exec),
            (2, 1, 100)
        );
        assert_eq!(
            (nd.alloc_count, nd.free_count, nd.unmatched_frees),
            (1, 1, 0)
        );
        assert_eq!(nd.live_bytes_at_exit, 0);
    }
}
