//! Folding a capture while it is written (`capture::fold`, what `memwatch run` does) gives
//! what reading the finished file gives: the same `Loaded` (events in time order), the
//! same report, the same live set at any instant for the OOM doctor and the same
//! diagnosis. Checked on the real recordings (the H100 OOM corpus, H200 captures), fed
//! frame by frame as a capture sink sees them, with batches small enough to go through
//! late events and checkpoints; and on generated captures whose frames arrive late in
//! every way the shims' separate flushes, long calls and exec'd images make them.

use std::path::{Path, PathBuf};

use memwatch_analysis::capture::{
    analyze, load_path, CaptureFold, Folded, GaveUp, Loaded, ReportOptions, WireSize,
};
use memwatch_analysis::doctor::{self, facts::DriverFacts, CaptureEvidence, Evidence};
use memwatch_analysis::live::{Change, LiveSet, ProcKey};
use memwatch_wire::{
    Api, DeviceInfo, Event, EventKind, FrameReader, FrameWriter, MemKind, ProcessEnd, ProcessStart,
    ReadMode, Record,
};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

fn real_captures() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["oom-corpus", "h200-captures", "multi-gpu"] {
        let Ok(rd) = std::fs::read_dir(testdata().join(dir)) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let cap = if p.is_dir() {
                p.join("capture.mwcap")
            } else {
                p.clone()
            };
            if cap.extension().is_some_and(|x| x == "mwcap") && cap.is_file() {
                out.push(cap);
            }
        }
    }
    out.sort();
    assert!(out.len() >= 20, "the recorded captures are missing");
    out
}

/// The frames of a capture file as a capture sink is handed them: each record with its
/// wire bytes.
fn frames_of(bytes: &[u8]) -> Vec<(Record, Vec<u8>)> {
    let mut r = FrameReader::new(bytes, ReadMode::Salvage).expect("a capture");
    let mut out = Vec::new();
    loop {
        let before = r.offset() as usize;
        match r.next_record().expect("readable") {
            Some(rec) => out.push((rec, bytes[before..r.offset() as usize].to_vec())),
            None => return out,
        }
    }
}

fn fold(path: &Path, bytes: &[u8], batch: usize) -> Result<Folded, GaveUp> {
    let mut f = CaptureFold::new(path, &ReportOptions::default(), usize::MAX).batch_events(batch);
    for (rec, raw) in frames_of(bytes) {
        f.frame(&rec, WireSize::of(&raw));
    }
    f.finish()
}

/// The live set of every (process, device) just before the first event after
/// `checkpoint`, by folding up to there (the definition `DriverFacts` answers from a
/// history).
/// Per (process image, device): bytes live and the live allocations (time, size).
type LiveAt = Vec<((ProcKey, i32), u64, Vec<(u64, u64)>)>;

fn stopped_fold(l: &Loaded, checkpoint: u64) -> LiveAt {
    let mut live: LiveSet<u64> = LiveSet::new();
    for e in l.events.iter().take_while(|e| e.ts <= checkpoint) {
        live.apply(&l.mem_event(e), e.ts);
    }
    let mut out: LiveAt = l
        .streams
        .iter()
        .map(|k| {
            let mut v: Vec<(u64, u64)> = live
                .iter()
                .filter(|(key, h)| key.family.on_device() && (key.proc, h.device) == *k)
                .map(|(_, h)| (h.data, h.size))
                .collect();
            v.sort_unstable();
            (*k, live.totals(k.0, k.1).device_bytes, v)
        })
        .collect();
    out.sort_by_key(|x| x.0);
    out
}

fn checkpoints(l: &Loaded) -> Vec<u64> {
    let n = l.events.len();
    let mut out = vec![0, u64::MAX];
    for i in (0..n).step_by((n / 12).max(1)) {
        out.push(l.events[i].ts);
        out.push(l.events[i].ts.saturating_sub(1));
    }
    for p in l.processes.values() {
        out.extend(p.failures.iter().map(|f| f.ts));
    }
    out
}

/// Everything the fold gives equals what the file gives.
fn check_same(path: &Path, bytes: &[u8], batch: usize) {
    let what = format!("{} (batches of {batch})", path.display());
    let mut want = load_path(path, &mut |_| {}).expect("loads");
    want.path = path.to_path_buf();
    let want_report =
        serde_json::to_string(&analyze(want.clone(), &ReportOptions::default())).expect("json");
    let got = fold(path, bytes, batch).expect("folds");
    assert_eq!(
        serde_json::to_string(&got.report).expect("json"),
        want_report,
        "{what}: report"
    );
    assert_eq!(got.stats.events, want.events.len() as u64, "{what}");
    let want_ev = CaptureEvidence::from_loaded(want);
    let got_ev = CaptureEvidence::from_folded(got.loaded, got.history);
    let (w, g) = (&want_ev.loaded, &got_ev.loaded);
    // (Compared without printing them: there are many.)
    assert!(g.events == w.events, "{what}: events in time order");
    assert_eq!(g.streams, w.streams, "{what}: streams");
    assert_eq!(g.processes, w.processes, "{what}: processes");
    assert_eq!(g.device_samples, w.device_samples, "{what}: device samples");
    assert_eq!(
        g.device_readings, w.device_readings,
        "{what}: device readings"
    );
    assert_eq!(
        (g.frames, g.unknown_frames, g.file_bytes, &g.damage, &g.tags),
        (w.frames, w.unknown_frames, w.file_bytes, &w.damage, &w.tags),
        "{what}: file figures"
    );
    assert_eq!(g.pjrt.events, w.pjrt.events, "{what}: PJRT events");
    for cp in checkpoints(w) {
        let want_facts = DriverFacts::compute(&want_ev, cp);
        assert_eq!(
            format!("{:?}", DriverFacts::compute(&got_ev, cp)),
            format!("{want_facts:?}"),
            "{what}: live set at {cp}"
        );
        let by_fold: Vec<_> = want_facts
            .per
            .iter()
            .map(|(k, d)| (*k, d.at_checkpoint, d.live_at_checkpoint.clone()))
            .collect();
        assert_eq!(by_fold, stopped_fold(w, cp), "{what}: live set at {cp}");
    }
    let diagnosis = |c| {
        doctor::diagnose(&Evidence {
            capture: Some(c),
            ..Evidence::default()
        })
    };
    assert_eq!(diagnosis(got_ev), diagnosis(want_ev), "{what}: diagnosis");
}

#[test]
fn real_captures_fold_as_they_read() {
    for path in real_captures() {
        let bytes = std::fs::read(&path).expect("readable");
        for batch in [1, 3, 16, 1 << 16] {
            check_same(&path, &bytes, batch);
        }
    }
}

/// A small deterministic generator (no dependency for a test's dice).
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const MS: u64 = 1_000_000;
const T0: u64 = 5_000 * MS;

/// One thread's calls: (when written to its buffer, the event). Each call starts after
/// the previous one returned; allocations are stamped when they return, the rest when
/// they start; a few calls last seconds.
fn thread_calls(d: &mut Dice, pid: u32, tid: u32, from: u64, until: u64) -> Vec<(u64, Event)> {
    let mut out = Vec::new();
    let mut now = from;
    let mut live: Vec<(u64, i32)> = Vec::new();
    while now < until {
        now += d.below(4) * MS / 2;
        let device = d.below(2) as i32;
        let dur = if d.below(40) == 0 {
            (500 + d.below(3000)) * MS
        } else {
            d.below(3) * MS / 4
        };
        let base = |kind, mem, api| Event {
            pid,
            tid,
            device,
            duration_ns: dur,
            ..Event::new(kind, mem, api)
        };
        let e = match d.below(10) {
            0..=3 => {
                // Few pointers, so some are handed out again before their free is seen.
                let ptr = 0x1000 * (1 + d.below(24)) + u64::from(tid) * 0x100_0000;
                let mem = match d.below(8) {
                    0 => MemKind::HostPinned,
                    1 => MemKind::VmmPhysical,
                    _ => MemKind::Device,
                };
                live.push((ptr, device));
                Event {
                    ts_ns: now + dur,
                    ptr,
                    size: (1 + d.below(64)) << 20,
                    ..base(EventKind::Alloc, mem, Api::CuMemAlloc)
                }
            }
            4..=6 if !live.is_empty() => {
                let (ptr, _) = live.swap_remove(d.below(live.len() as u64) as usize);
                Event {
                    ts_ns: now,
                    ptr,
                    ..base(EventKind::Free, MemKind::None, Api::CuMemFree)
                }
            }
            7 => Event {
                ts_ns: now,
                ptr: 0xdead_0000 + d.below(4),
                ..base(EventKind::Free, MemKind::Device, Api::CuMemFree)
            },
            8 => Event {
                ts_ns: now + dur,
                size: 80 << 30,
                result: 2,
                ..base(EventKind::AllocFailed, MemKind::Device, Api::CuMemAlloc)
            },
            _ => Event {
                ts_ns: now,
                aux: dur,
                ..base(EventKind::ApiSpan, MemKind::None, Api::CuModuleLoadData)
            },
        };
        now += dur;
        out.push((now, e));
    }
    out
}

/// A capture whose frames arrive as a receiver would write them: each thread's events
/// in flushes of a few at a time, late by a few ms, sometimes by seconds (with an even
/// seed, one thread's all at its process's end); processes start and end; with `exec`,
/// one pid runs two images.
fn generated(seed: u64, exec: bool) -> Vec<u8> {
    let mut d = Dice(seed);
    // (arrival, order of creation, record)
    let mut frames: Vec<(u64, usize, Record)> = Vec::new();
    let push = |frames: &mut Vec<(u64, usize, Record)>, at: u64, r: Record| {
        let n = frames.len();
        frames.push((at, n, r));
    };
    let mut images = vec![
        (101u32, T0, T0 + 8_000 * MS),
        (202, T0 + 500 * MS, T0 + 6_000 * MS),
    ];
    if exec {
        images.push((303, T0 + 100 * MS, T0 + 3_000 * MS));
        images.push((303, T0 + 3_100 * MS, T0 + 7_000 * MS));
    }
    for &(pid, from, until) in &images {
        push(
            &mut frames,
            from,
            Record::ProcessStart(ProcessStart {
                pid,
                ppid: 1,
                mono_anchor_ns: from,
                wall_anchor_unix_ns: 1_700_000_000_000_000_000 + from,
                shim_version: "test".into(),
                hostname: "gen".into(),
                argv: vec![format!("prog{pid}")],
                pid_ns: None,
            }),
        );
        for device in 0..2 {
            push(
                &mut frames,
                from + 1,
                Record::DeviceInfo(DeviceInfo {
                    pid,
                    device,
                    name: format!("GPU {device}"),
                    total_bytes: 80 << 30,
                    ..DeviceInfo::default()
                }),
            );
        }
        let mut process_last = 0;
        for tid in 0..3u32 {
            let calls = thread_calls(&mut d, pid, pid * 10 + tid, from + 2, until);
            let mut last_arrival = 0;
            let mut i = 0;
            while i < calls.len() {
                let n = (1 + d.below(12) as usize).min(calls.len() - i);
                let written = calls[i + n - 1].0;
                let delay = if d.below(15) == 0 {
                    (200 + d.below(2500)) * MS
                } else {
                    d.below(30) * MS
                };
                // A thread's buffer is written out in order; with an even seed, one
                // thread's only when its process ends (its flushes were stuck).
                let stuck = seed.is_multiple_of(2) && pid == 101 && tid == 0;
                let at = (written + delay)
                    .max(last_arrival)
                    .max(if stuck { until } else { 0 });
                last_arrival = at;
                let events = calls[i..i + n].iter().map(|(_, e)| *e).collect();
                push(&mut frames, at, Record::Events(events));
                i += n;
            }
            process_last = process_last.max(last_arrival);
        }
        push(
            &mut frames,
            until.max(process_last),
            Record::ProcessEnd(ProcessEnd {
                pid,
                ts_ns: until,
                exit_code: 0,
            }),
        );
    }
    frames.sort_by_key(|f| (f.0, f.1));
    let mut w = FrameWriter::new(Vec::new()).expect("writer");
    for (_, _, r) in &frames {
        w.write_record(r).expect("encodes");
    }
    w.into_inner().expect("bytes")
}

#[test]
fn generated_captures_fold_as_they_read_whatever_arrives_late() {
    let dir = tempfile::tempdir().expect("temp dir");
    for seed in 1..=6u64 {
        let exec = seed.is_multiple_of(3);
        let bytes = generated(seed, exec);
        let path = dir.path().join(format!("gen{seed}.mwcap"));
        std::fs::write(&path, &bytes).expect("written");
        let l = load_path(&path, &mut |_| {}).expect("loads");
        assert!(
            l.events.len() > 400,
            "seed {seed}: {} events",
            l.events.len()
        );
        if exec {
            // The exec'd pid's streams are numbered in file order: the file is read.
            assert_eq!(
                fold(&path, &bytes, 7).err(),
                Some(GaveUp::Exec),
                "seed {seed}"
            );
            assert!(l.processes.keys().any(|k| k.image == 1), "seed {seed}");
            continue;
        }
        for batch in [1, 7, 64, 1000] {
            check_same(&path, &bytes, batch);
        }
        let f = fold(&path, &bytes, 7).expect("folds");
        assert!(f.stats.late_events > 0, "seed {seed}: nothing arrived late");
        assert!(f.stats.refolded > 0, "seed {seed}: nothing folded again");
    }
}

#[test]
fn a_fold_over_its_budget_gives_up_and_holds_nothing() {
    let bytes = generated(9, false);
    let path = Path::new("over-budget.mwcap");
    let mut f = CaptureFold::new(path, &ReportOptions::default(), 500).batch_events(16);
    for (rec, raw) in frames_of(&bytes) {
        f.frame(&rec, WireSize::of(&raw));
    }
    assert_eq!(f.gave_up(), Some(GaveUp::TooManyEvents));
    assert_eq!(f.finish().err(), Some(GaveUp::TooManyEvents));
}

/// The live set `DriverFacts` reads after a fold equals a fold stopped at the checkpoint
/// also when the events are folded all at once (`memwatch diagnose`).
#[test]
fn driver_facts_are_the_live_set_where_the_fold_would_stop() {
    for path in real_captures() {
        let l = load_path(&path, &mut |_| {}).expect("loads");
        let ev = CaptureEvidence::from_loaded(l);
        for cp in checkpoints(&ev.loaded) {
            let f = DriverFacts::compute(&ev, cp);
            let got: Vec<_> = f
                .per
                .iter()
                .map(|(k, d)| (*k, d.at_checkpoint, d.live_at_checkpoint.clone()))
                .collect();
            assert_eq!(got, stopped_fold(&ev.loaded, cp), "{}", path.display());
        }
        // Peaks: the most device bytes any fold reached, first reached at `peak_ts`.
        let mut live: LiveSet<()> = LiveSet::new();
        let l = &ev.loaded;
        let mut peaks = std::collections::BTreeMap::new();
        for e in &l.events {
            let key = l.streams[e.stream as usize];
            if let Change::Alloc { family, now, .. } = live.apply(&l.mem_event(e), ()) {
                let p = peaks.entry(key).or_insert((0u64, 0u64));
                if family.on_device() && now.device_bytes > p.0 {
                    *p = (now.device_bytes, e.ts);
                }
            }
        }
        let f = DriverFacts::compute(&ev, u64::MAX);
        for (k, (bytes, ts)) in peaks {
            let d = &f.per[&k];
            assert_eq!((d.peak_bytes, d.peak_ts), (bytes, ts), "{}", path.display());
        }
    }
}

/// A JAX loop that keeps every step's output (a live PJRT buffer per execution), its
/// completions flushed by their own thread, sometimes before the executions they
/// complete, and killed (no process_end): the fold gives what reading the file gives,
/// and its checkpoints copy fewer entries than it folds events, however many buffers
/// stay live (copying them before every batch cost time and memory quadratic in the
/// run: issue 38).
#[test]
fn a_long_jax_loop_folds_with_checkpoints_bounded_by_its_events() {
    let pid = 77;
    let ev = |kind, mem, api, tid, ts, ptr, size, aux| Event {
        ts_ns: ts,
        pid,
        tid,
        ptr,
        size,
        aux,
        duration_ns: 20_000,
        device: 0,
        ..Event::new(kind, mem, api)
    };
    for steps in [2_000u64, 6_000] {
        let mut recs = vec![
            Record::ProcessStart(ProcessStart {
                pid,
                ppid: 1,
                mono_anchor_ns: T0,
                wall_anchor_unix_ns: 1_700_000_000_000_000_000,
                shim_version: "t".into(),
                hostname: "h".into(),
                argv: vec!["python3".into()],
                pid_ns: None,
            }),
            Record::Events(vec![ev(
                EventKind::Alloc,
                MemKind::Device,
                Api::CuMemAlloc,
                pid,
                T0 + 1,
                0x7000_0000,
                1 << 30,
                0,
            )]),
        ];
        let (mut main, mut callback) = (Vec::new(), Vec::new());
        for i in 0..steps {
            let ts = T0 + MS + i * 50_000;
            let span = EventKind::ApiSpan;
            main.push(ev(
                span,
                MemKind::None,
                Api::PjrtExecute,
                pid,
                ts,
                0xe,
                0,
                0,
            ));
            main.push(ev(
                EventKind::Alloc,
                MemKind::PjrtBuffer,
                Api::PjrtExecuteOutput,
                pid,
                ts,
                0x9000_0000 + i * 64,
                1 << 20,
                0xe,
            ));
            callback.push(ev(
                span,
                MemKind::None,
                Api::PjrtExecuteComplete,
                999,
                ts,
                0xe,
                0,
                0,
            ));
            if i % 100 == 99 {
                // A flush: the callback thread's batch first every other time.
                let (a, b) = (std::mem::take(&mut main), std::mem::take(&mut callback));
                if i % 200 == 99 {
                    recs.extend([Record::Events(b), Record::Events(a)]);
                } else {
                    recs.extend([Record::Events(a), Record::Events(b)]);
                }
            }
        }
        recs.extend([Record::Events(main), Record::Events(callback)]);
        let mut w = FrameWriter::new(Vec::new()).expect("writer");
        for r in &recs {
            w.write_record(r).expect("encodes");
        }
        let bytes = w.into_inner().expect("bytes");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("jax-loop.mwcap");
        std::fs::write(&path, &bytes).expect("written");
        for batch in [64, 1000] {
            check_same(&path, &bytes, batch);
            let f = fold(&path, &bytes, batch).expect("folds");
            let folded = f.stats.events + f.stats.refolded;
            assert!(
                f.stats.copied <= folded,
                "{steps} steps, batches of {batch}: checkpoints copied {} entries for {folded} events folded",
                f.stats.copied
            );
        }
    }
}
