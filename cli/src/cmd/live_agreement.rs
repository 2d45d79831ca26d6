//! Property test: every reader of events that keeps live bytes agrees with
//! `memwatch_analysis::live::LiveSet` at every event of random streams — `memwatch
//! report` (live bytes at exit of each prefix), its trace export (the trace's allocs
//! minus frees), and `attach --live` (its running figures). The streams mix processes,
//! exec'd images, devices, every memory kind, APIs that name the family when the kind is
//! `none`, frees on another device than their allocation, pointers reused without a
//! free, `free(NULL)`, unmatched frees, failures and spans.
//!
//! A reader that keeps live bytes is added here as one more `Reader` implementation.

use std::collections::BTreeMap;

use memwatch_analysis::capture::{analyze, load_reader, write_trace, ReportOptions, TraceOptions};
use memwatch_analysis::live::{ImageClock, LiveSet, MemEvent, ProcKey};
use memwatch_wire::{
    Api, Event, EventKind, FrameWriter, MemKind, ProcessEnd, ProcessStart, Record,
};
use proptest::prelude::*;

use super::attach_live::LiveStats;

const BASE: u64 = 1_000_000_000;

/// One step of a generated stream.
#[derive(Debug, Clone)]
enum Step {
    Event {
        pid: u32,
        device: i32,
        kind: EventKind,
        mem: MemKind,
        api: Api,
        ptr: u64,
        size: u64,
    },
    /// The pid execs: its image ends and the next one starts.
    Exec { pid: u32 },
}

/// Device bytes and pinned host bytes per (pid, device) of each pid's current image:
/// what every reader must report after each step.
type Figures = BTreeMap<(u32, i32), (u64, u64)>;

fn step() -> impl Strategy<Value = Step> {
    let kinds = prop::sample::select(vec![
        EventKind::Alloc,
        EventKind::Alloc,
        EventKind::Free,
        EventKind::Free,
        EventKind::AllocFailed,
        EventKind::ApiSpan,
    ]);
    let mems = prop::sample::select(vec![
        MemKind::None,
        MemKind::Device,
        MemKind::Device,
        MemKind::HostPinned,
        MemKind::Managed,
        MemKind::VmmPhysical,
        MemKind::VmmMap,
        MemKind::VmmReserve,
        MemKind::StreamPool,
        MemKind::PoolObject,
        MemKind::PjrtBuffer,
    ]);
    let apis = prop::sample::select(vec![
        Api::HipMalloc,
        Api::CuMemFree,
        Api::CudaFreeHost,
        Api::HipHostMalloc,
        Api::CuMemCreate,
        Api::CuMemRelease,
        Api::CuMemAllocAsync,
        Api::HipStreamCreate,
    ]);
    prop_oneof![
        20 => (
            10u32..13,
            -1i32..3,
            kinds,
            mems,
            apis,
            prop::sample::select(vec![0u64, 0x1000, 0x2000, 0x3000, 0x4000]),
            1u64..(64 << 20),
        )
            .prop_map(|(pid, device, kind, mem, api, ptr, size)| Step::Event {
                pid,
                device,
                kind,
                mem,
                api,
                ptr,
                size,
            }),
        1 => (10u32..13).prop_map(|pid| Step::Exec { pid }),
    ]
}

/// The stream as capture records, in time order (one event per microsecond), each step
/// tagged with the index of the step that made it.
fn records(steps: &[Step]) -> Vec<(usize, Record)> {
    let start = |pid: u32, ts: u64| {
        Record::ProcessStart(ProcessStart {
            pid,
            ppid: 1,
            mono_anchor_ns: ts,
            wall_anchor_unix_ns: 1,
            shim_version: "test".into(),
            hostname: "h".into(),
            argv: vec![format!("prog{pid}")],
        })
    };
    let mut out: Vec<(usize, Record)> = (10..13).map(|pid| (0, start(pid, BASE))).collect();
    for (i, s) in steps.iter().enumerate() {
        let ts = BASE + 1_000 * (i as u64 + 1);
        match *s {
            Step::Event {
                pid,
                device,
                kind,
                mem,
                api,
                ptr,
                size,
            } => out.push((
                i,
                Record::Events(vec![Event {
                    ts_ns: ts,
                    ptr,
                    size,
                    pid,
                    tid: pid,
                    device,
                    result: i32::from(kind == EventKind::AllocFailed) * 2,
                    ..Event::new(kind, mem, api)
                }]),
            )),
            Step::Exec { pid } => {
                out.push((
                    i,
                    Record::ProcessEnd(ProcessEnd {
                        pid,
                        ts_ns: ts,
                        exit_code: ProcessEnd::UNKNOWN_EXIT,
                    }),
                ));
                out.push((i, start(pid, ts + 1)));
            }
        }
    }
    out
}

/// The reference: LiveSet itself, fed the records as a stream.
fn reference(records: &[(usize, Record)], upto: usize) -> Figures {
    let mut live: LiveSet = LiveSet::new();
    let mut images = ImageClock::default();
    for (_, r) in records.iter().filter(|(i, _)| *i <= upto) {
        match r {
            Record::ProcessStart(p) => {
                if let Some(ended) = images.process_start(p.pid) {
                    live.release_process(ended);
                }
            }
            Record::Events(evs) => {
                for e in evs {
                    live.apply(&MemEvent::of_wire(images.key(e.pid), e), ());
                }
            }
            _ => {}
        }
    }
    let mut f = Figures::new();
    for ((p, device), t) in live.all_totals() {
        if p == images.key(p.pid) && (t.device_bytes, t.host_bytes) != (0, 0) {
            f.insert((p.pid, device), (t.device_bytes, t.host_bytes));
        }
    }
    f
}

fn capture(records: &[(usize, Record)], upto: usize) -> Vec<u8> {
    let mut w = FrameWriter::new(Vec::new()).expect("in-memory writer");
    for (_, r) in records.iter().filter(|(i, _)| *i <= upto) {
        w.write_record(r).expect("in-memory write");
    }
    w.into_inner().expect("in-memory writer")
}

/// `memwatch report`: live bytes at exit of the newest image of each pid.
fn report(bytes: &[u8]) -> Figures {
    let loaded = load_reader(bytes, std::path::Path::new("prop.mwcap"), &mut |_| {})
        .expect("a generated capture loads");
    let rep = analyze(loaded, &ReportOptions::default());
    let mut newest: BTreeMap<u32, u32> = BTreeMap::new();
    for p in &rep.processes {
        let n = newest.entry(p.pid).or_default();
        *n = (*n).max(p.image);
    }
    let mut f = Figures::new();
    for p in rep.processes.iter().filter(|p| newest[&p.pid] == p.image) {
        for d in &p.devices {
            let v = (d.live_bytes_at_exit, d.host_pinned.live_bytes_at_exit);
            if v != (0, 0) {
                f.insert((p.pid, d.device), v);
            }
        }
    }
    f
}

/// `memwatch report --trace`: allocs minus frees per stream (device memory only, so
/// the host figure is taken as the reference's).
fn trace(bytes: &[u8], host_of: &Figures) -> Figures {
    let loaded = load_reader(bytes, std::path::Path::new("prop.mwcap"), &mut |_| {})
        .expect("a generated capture loads");
    let mut out = Vec::new();
    let summary = write_trace(loaded, &TraceOptions::default(), &mut out).expect("trace");
    let mut sizes: BTreeMap<u64, (u64, u32)> = BTreeMap::new();
    let mut per_stream: BTreeMap<u32, i128> = BTreeMap::new();
    for line in String::from_utf8(out).expect("utf-8 trace").lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        let id = v["id"].as_u64().expect("id");
        let stream = v["stream"].as_u64().expect("stream") as u32;
        if v["op"] == "alloc" {
            let size = v["size"].as_u64().expect("size");
            assert!(sizes.insert(id, (size, stream)).is_none(), "id {id} reused");
            *per_stream.entry(stream).or_default() += i128::from(size);
        } else {
            let (size, s) = sizes.remove(&id).expect("a free of a live id");
            assert_eq!(s, stream, "a free carries its allocation's stream");
            *per_stream.entry(stream).or_default() -= i128::from(size);
        }
    }
    let mut f = Figures::new();
    for (stream, bytes) in per_stream {
        let (proc_, device): (ProcKey, i32) = summary.streams[stream as usize];
        assert!(bytes >= 0, "stream {stream} went below zero");
        if bytes > 0 {
            f.insert((proc_.pid, device), (bytes as u64, 0));
        }
    }
    for (k, (_, host)) in host_of {
        if *host > 0 {
            f.entry(*k).or_default().1 = *host;
        }
    }
    f
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_reader_agrees_with_the_live_set_at_every_event(
        steps in prop::collection::vec(step(), 1..40)
    ) {
        let recs = records(&steps);
        let mut attach = LiveStats::default();
        let mut fed = 0;
        for upto in 0..steps.len() {
            let want = reference(&recs, upto);
            // attach --live, fed record by record.
            while fed < recs.len() && recs[fed].0 <= upto {
                attach.record(&recs[fed].1);
                fed += 1;
            }
            let live_view: Figures = attach
                .devices
                .iter()
                .filter(|(_, d)| d.live_bytes > 0)
                .map(|(k, d)| (*k, (d.live_bytes, 0)))
                .collect();
            let want_device: Figures = want
                .iter()
                .filter(|(_, v)| v.0 > 0)
                .map(|(k, v)| (*k, (v.0, 0)))
                .collect();
            prop_assert_eq!(&live_view, &want_device, "attach --live after step {}", upto);
            let bytes = capture(&recs, upto);
            prop_assert_eq!(&report(&bytes), &want, "report after step {}", upto);
            prop_assert_eq!(&trace(&bytes, &want), &want, "trace after step {}", upto);
        }
    }
}
