//! Property test: every reader of events that keeps live bytes agrees with
//! `memwatch_analysis::live::LiveSet` at every event of random streams — `memwatch
//! report` (live bytes at exit of each prefix), its trace export (the trace's allocs
//! minus frees), `attach --live` (its running figures), and the daemon: its ingest state
//! (each device's live bytes after each batch, one batch per step, with a restart that
//! rebuilds the state from the stored events halfway), and its replay of the stored
//! events ("what was live" on each device at the instant after each step, from the run's
//! start, the peak snapshot or live-set checkpoints). The streams mix processes, exec'd
//! images, devices, every memory kind, APIs that name the family when the kind is
//! `none`, frees on another device than their allocation, pointers reused without a
//! free, `free(NULL)`, unmatched frees, failures and spans.
//!
//! This test lives in the CLI because it is the one crate that sees every reader. A
//! reader that keeps live bytes is added here as one more set of figures compared with
//! the reference after each step.

use std::collections::BTreeMap;

use memwatch_analysis::capture::{analyze, load_reader, write_trace, ReportOptions, TraceOptions};
use memwatch_analysis::live::{ImageClock, LiveSet, MemEvent, ProcKey};
use memwatch_wire::{
    Api, Event, EventKind, FrameWriter, MemKind, ProcessEnd, ProcessStart, Record,
};
use proptest::prelude::*;

use super::attach_live::LiveStats;
use memwatch_daemon::{Batch, Ingestor, Store};

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

/// Device bytes per device over every pid's current image (the daemon keeps no per-pid
/// figures).
fn per_device(f: &Figures) -> BTreeMap<i32, u64> {
    let mut out: BTreeMap<i32, u64> = BTreeMap::new();
    for ((_, device), (bytes, _)) in f {
        if *bytes > 0 {
            *out.entry(*device).or_default() += bytes;
        }
    }
    out
}

/// The daemon fed the stream one batch per step: after each step, the live bytes of
/// its ingest state per device; at the end, what its replay says was live on each
/// device just after each step.
struct Daemon {
    _dir: tempfile::TempDir,
    store: Store,
    ingestor: Option<Ingestor>,
    run: Option<i64>,
}

/// Devices the generated events use.
const DEVICES: std::ops::Range<i64> = -1..3;

impl Daemon {
    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("prop.db");
        let store = Store::open(&db.display().to_string())
            .await
            .expect("a new store");
        Self {
            ingestor: Some(Ingestor::new(store.clone())),
            store,
            run: None,
            _dir: dir,
        }
    }

    /// Stores step `step`'s records as batch `step + 1`.
    async fn step(&mut self, step: usize, records: Vec<Record>) {
        let ing = self.ingestor.as_mut().expect("an ingestor");
        let out = ing
            .commit(vec![Batch {
                node: "prop".into(),
                stream: 1,
                seq: step as u64 + 1,
                run_key: "prop".into(),
                records,
            }])
            .await
            .expect("a generated batch commits");
        self.run = self.run.or(out[0].run_id);
    }

    /// A restart: the next batch finds the run's state rebuilt from what is stored.
    fn restart(&mut self) {
        self.ingestor = Some(Ingestor::new(self.store.clone()));
    }

    /// Live bytes per device of the ingest state, as stored after the last commit.
    async fn ingest_state(&self) -> BTreeMap<i32, u64> {
        let Some(run) = self.run else {
            return BTreeMap::new();
        };
        let detail = self.store.run(run).await.expect("run").expect("the run");
        detail
            .run
            .devices
            .iter()
            .filter(|d| d.live_bytes != 0)
            .map(|d| (d.device as i32, d.live_bytes as u64))
            .collect()
    }

    /// Checkpoints every few events on every device (as the checkpointer writes them,
    /// only denser), so later replays start from them.
    async fn checkpoint(&self) {
        if let Some(run) = self.run {
            for d in DEVICES {
                self.store
                    .extend_checkpoints_every(run, d, 3, 0)
                    .await
                    .expect("checkpoints");
            }
        }
    }

    /// What the replay says was live per device at `at` ns after the run's start.
    async fn live_at(&self, at: u64) -> BTreeMap<i32, u64> {
        let Some(run) = self.run else {
            return BTreeMap::new();
        };
        let mut out = BTreeMap::new();
        for d in DEVICES {
            let p = self
                .store
                .live_at(run, d, Some(at), 0)
                .await
                .expect("live at")
                .expect("the run");
            if p.peak_bytes != 0 {
                out.insert(d as i32, p.peak_bytes as u64);
            }
        }
        out
    }
}

/// Runs the daemon over the stream: the ingest state after each step and the replay at
/// each step's instant, both compared with the reference.
fn daemon_agrees(steps: usize, recs: &[(usize, Record)]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut d = Daemon::new().await;
        let mut wanted = Vec::with_capacity(steps);
        for upto in 0..steps {
            let batch: Vec<Record> = recs
                .iter()
                .filter(|(i, _)| *i == upto)
                .map(|(_, r)| r.clone())
                .collect();
            if upto == steps / 2 {
                d.restart();
            }
            d.step(upto, batch).await;
            let want = per_device(&reference(recs, upto));
            prop_assert_eq!(
                &d.ingest_state().await,
                &want,
                "ingest state after step {}",
                upto
            );
            if upto % 5 == 4 {
                d.checkpoint().await;
            }
            wanted.push(want);
        }
        for (upto, want) in wanted.iter().enumerate() {
            // Between this step's records and the next's (an exec's start is 1 ns after
            // its step's time).
            let at = 1_000 * (upto as u64 + 1) + 500;
            prop_assert_eq!(&d.live_at(at).await, want, "replay at step {}", upto);
        }
        Ok(())
    })
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
        daemon_agrees(steps.len(), &recs)?;
    }
}
