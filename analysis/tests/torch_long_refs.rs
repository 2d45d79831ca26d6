//! Snapshots whose memo references reach back any distance (a string or frame memoized
//! once and used again tens of thousands of entries later, a free sharing its alloc's
//! frame list, a live block's list shared between `segments` and the trace): read whole
//! and equal to what the document holds — both Python-made fixtures
//! (`testdata/torch-snapshots/long/`, written by Python's pickler) and generated
//! variations (`torch::synth`) of several lengths, contexts and device counts, checked
//! against the figures they were made with and against the whole-document reading.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memwatch_analysis::torch::model::BlockState;
use memwatch_analysis::torch::pickle::write::Writer;
use memwatch_analysis::torch::pickle::{load_plain, ErrorKind, Value};
use memwatch_analysis::torch::synth::{self, Context, Figures, Params};
use memwatch_analysis::torch::{
    report, scan_reader, ReportOptions, Scan, SnapshotError, SnapshotReport,
};

fn long_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/torch-snapshots/long")
}

fn scan_bytes(b: &[u8]) -> Result<Scan, SnapshotError> {
    scan_reader(b, Path::new("long.pickle"), b.len() as u64)
}

/// One trace entry: action, addr, size, frame names.
type Seen = (String, u64, u64, Vec<String>);

/// Every trace entry as the streaming reader stored it, per device.
fn streamed(scan: &Scan) -> Vec<Vec<Seen>> {
    scan.traces
        .iter()
        .map(|t| {
            let mut out = Vec::new();
            scan.spill
                .for_each(t.range, |e| {
                    let names = scan
                        .stacks
                        .frames(e.stack)
                        .map(|f| f.name.clone())
                        .collect();
                    out.push((e.action.name().to_string(), e.addr, e.size, names));
                    Ok::<_, ()>(())
                })
                .unwrap();
            out
        })
        .collect()
}

/// The same from the whole document, read without streaming (every object kept).
fn whole(bytes: &[u8]) -> Vec<Vec<Seen>> {
    let doc = load_plain(bytes).unwrap();
    let traces = doc.get("device_traces").and_then(Value::as_seq).unwrap();
    traces
        .iter()
        .map(|t| {
            t.as_seq()
                .unwrap()
                .iter()
                .map(|e| {
                    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap().to_string();
                    let n = |k: &str| e.get(k).and_then(Value::as_u64).unwrap();
                    let frames = e.get("frames").and_then(Value::as_seq).unwrap_or(&[]);
                    let names = frames
                        .iter()
                        .map(|f| f.get("name").and_then(Value::as_str).unwrap().to_string())
                        .collect();
                    (s("action"), n("addr"), n("size"), names)
                })
                .collect()
        })
        .collect()
}

/// Allocated bytes of the dump's blocks by site (the innermost frame of a `.py` file),
/// per device, from the whole document.
fn dump_sites(bytes: &[u8]) -> BTreeMap<i32, BTreeMap<String, u64>> {
    let doc = load_plain(bytes).unwrap();
    let mut out: BTreeMap<i32, BTreeMap<String, u64>> = BTreeMap::new();
    for s in doc.get("segments").and_then(Value::as_seq).unwrap() {
        let device = s.get("device").and_then(Value::as_i64).unwrap() as i32;
        for b in s.get("blocks").and_then(Value::as_seq).unwrap() {
            if b.get("state").and_then(Value::as_str) != Some("active_allocated") {
                continue;
            }
            let frames = b.get("frames").and_then(Value::as_seq).unwrap_or(&[]);
            let site = frames
                .iter()
                .find(|f| {
                    f.get("filename")
                        .and_then(Value::as_str)
                        .is_some_and(|n| n.ends_with(".py") && !n.contains("/torch/"))
                })
                .map_or_else(
                    || "unknown".to_string(),
                    |f| {
                        let file = f.get("filename").and_then(Value::as_str).unwrap();
                        format!(
                            "{}:{} in {}",
                            file.rsplit('/').next().unwrap(),
                            f.get("line").and_then(Value::as_i64).unwrap(),
                            f.get("name").and_then(Value::as_str).unwrap()
                        )
                    },
                );
            let size = b.get("size").and_then(Value::as_u64).unwrap();
            *out.entry(device).or_default().entry(site).or_default() += size;
        }
    }
    out
}

/// Reads `bytes` and checks it against `figures` (per device) and the whole reading;
/// `stateless`: written with context "state" (no trace entry has frames).
fn check(bytes: &[u8], figures: &[Figures], what: &str, stateless: bool) -> SnapshotReport {
    let scan = scan_bytes(bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    let streamed = streamed(&scan);
    assert_eq!(streamed, whole(bytes), "{what}: streamed entries differ");
    // Every entry has its stack, the far ones included (none with context "state").
    for t in &streamed {
        assert!(
            t.iter().all(|e| e.3.is_empty() == stateless),
            "{what}: an entry's frames are not as written"
        );
    }
    let r = report(&scan, &ReportOptions::default()).unwrap();
    assert_eq!(r.devices.len(), figures.len(), "{what}");
    let sites = dump_sites(bytes);
    for (d, f) in r.devices.iter().zip(figures) {
        // Bytes by Python line at the end are the dump's blocks' (their frames), whatever
        // the trace entries carry; every byte at the peak is under some site.
        let ours: BTreeMap<String, u64> = d
            .at_end
            .by_site
            .iter()
            .map(|s| (s.site.clone(), s.bytes))
            .collect();
        assert_eq!(
            ours,
            sites.get(&d.device).cloned().unwrap_or_default(),
            "{what}: device {} bytes by site at the end",
            d.device
        );
        let at_peak: u64 = d.at_peak.by_site.iter().map(|s| s.bytes).sum();
        assert_eq!(
            at_peak, d.at_peak.allocated_bytes,
            "{what}: sites at the peak"
        );
        let segs: Vec<_> = scan
            .segments
            .iter()
            .filter(|s| s.device == d.device)
            .collect();
        let active = segs
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .count() as u64;
        assert_eq!(
            (d.allocated_bytes, d.reserved_bytes, d.segments, active),
            (f.allocated, f.reserved, f.segments, f.active_blocks),
            "{what}: device {}",
            d.device
        );
        assert_eq!(d.trace_entries, f.entries, "{what}");
        assert_eq!(&d.actions, &f.actions, "{what}");
        let c = &d.end_check;
        assert_eq!(
            (c.missing, c.extra, c.size_mismatches),
            (0, 0, 0),
            "{what}: {c:?}"
        );
        assert_eq!(c.replayed_allocated, f.allocated, "{what}");
    }
    r
}

#[test]
fn python_made_snapshots_with_far_references_are_read_whole() {
    // protocol2: the same shape with BINPUT/LONG_BINPUT (PyTorch's C++ pickler).
    for name in ["alloc_context", "all_context", "protocol2", "state_context"] {
        let bytes = std::fs::read(long_dir().join(format!("{name}.pickle"))).unwrap();
        let text = std::fs::read_to_string(long_dir().join(format!("{name}.json"))).unwrap();
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        let at = &j["at_dump"];
        let n = |v: &serde_json::Value| v.as_u64().unwrap();
        let f = Figures {
            allocated: n(&at["memory_allocated"]),
            reserved: n(&at["memory_reserved"]),
            segments: n(&at["segments"]),
            active_blocks: n(&at["active_blocks"]),
            entries: n(&j["entries"]),
            actions: j["actions"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| {
                    let k: &'static str = match k.as_str() {
                        "alloc" => "alloc",
                        "free_requested" => "free_requested",
                        "free_completed" => "free_completed",
                        "segment_alloc" => "segment_alloc",
                        other => panic!("{other}"),
                    };
                    (k, n(v))
                })
                .collect(),
        };
        // Far enough that a window of recent entries would not reach: the trace's
        // 'segment_alloc' at its start is fetched again past 11,000 entries later.
        assert!(f.entries > 11_000 || name == "protocol2", "{name}");
        let r = check(&bytes, &[f], name, name == "state_context");
        // What Python summed from the dump's blocks when it wrote the file.
        if let Some(want) = at["bytes_by_site"].as_object() {
            let want: BTreeMap<String, u64> = want.iter().map(|(k, v)| (k.clone(), n(v))).collect();
            let ours: BTreeMap<String, u64> = r.devices[0]
                .at_end
                .by_site
                .iter()
                .map(|s| (s.site.clone(), s.bytes))
                .collect();
            assert_eq!(ours, want, "{name}: bytes by site");
        }
    }
}

#[test]
fn real_state_context_snapshots_attribute_bytes_by_the_dumps_frames() {
    // H200, PyTorch 2.11: with context="state" no trace entry has frames.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/torch-snapshots/h200");
    for name in ["all_state", "state_only"] {
        let bytes = std::fs::read(dir.join(format!("{name}.pickle"))).unwrap();
        let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap();
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        let at = &j["at_dump"][0];
        let scan = scan_bytes(&bytes).unwrap();
        let r = report(&scan, &ReportOptions::default()).unwrap();
        let d = &r.devices[0];
        assert_eq!(
            (d.allocated_bytes, d.reserved_bytes, d.segments),
            (
                at["memory_allocated"].as_u64().unwrap(),
                at["memory_reserved"].as_u64().unwrap(),
                at["segments"].as_u64().unwrap()
            ),
            "{name}"
        );
        assert!(d.end_check.consistent(), "{name}: {:?}", d.end_check);
        let ours: BTreeMap<String, u64> = d
            .at_end
            .by_site
            .iter()
            .map(|s| (s.site.clone(), s.bytes))
            .collect();
        let want = dump_sites(&bytes).remove(&0).unwrap_or_default();
        assert!(!ours.contains_key("unknown"), "{name}: {ours:?}");
        assert_eq!(ours, want, "{name}: bytes by site at the end");
    }
}

#[test]
fn generated_snapshots_of_several_shapes_are_read_whole() {
    for (iterations, context, devices, seed) in [
        (0, Context::All, 1, 1),
        (1, Context::Alloc, 1, 2),
        (3_000, Context::Alloc, 1, 3),
        (3_000, Context::All, 2, 4),
        (9_000, Context::Alloc, 2, 5),
        (1, Context::State, 1, 6),
        (3_000, Context::State, 1, 7),
        (5_000, Context::State, 2, 8),
    ] {
        let p = Params {
            iterations,
            context,
            devices,
            seed,
        };
        let (bytes, figures) = synth::write_long(Vec::new(), &p).unwrap();
        check(
            &bytes,
            &figures,
            &format!("{p:?}"),
            context == Context::State,
        );
    }
}

#[test]
fn a_reference_back_to_a_lent_trace_entry_is_refused_naming_it() {
    // The same entry dict twice in a trace, in two batches (within one batch both are
    // still on the stack when the GET comes, and it is read): a GET of the first.
    let s = Value::str;
    let e = Value::Dict(std::rc::Rc::new(vec![
        (s("action"), s("alloc")),
        (s("addr"), Value::Int(4096)),
        (s("size"), Value::Int(512)),
        (s("time_us"), Value::Int(1)),
    ]));
    let doc = Value::Dict(std::rc::Rc::new(vec![
        (s("segments"), Value::List(std::rc::Rc::new(Vec::new()))),
        (
            s("device_traces"),
            Value::List(std::rc::Rc::new(vec![Value::List(std::rc::Rc::new(vec![
                e.clone(),
                e,
            ]))])),
        ),
    ]));
    let mut w = Writer::new(Vec::new(), 1000);
    w.write(&doc).unwrap();
    let one_batch = w.finish().unwrap();
    let scan = scan_bytes(&one_batch).unwrap();
    assert_eq!(scan.traces[0].range.len, 2);
    let mut w = Writer::new(Vec::new(), 1);
    w.write(&doc).unwrap();
    let bytes = w.finish().unwrap();
    // Read whole, it is plain data.
    load_plain(&bytes[..]).unwrap();
    match scan_bytes(&bytes) {
        Err(SnapshotError::Pickle { error, .. }) => {
            assert!(matches!(error.kind, ErrorKind::StreamedBack(_)), "{error}");
            assert!(error
                .to_string()
                .contains("refers back to an element of a streamed list"));
        }
        other => panic!("{:?}", other.map(|s| s.traces.len())),
    }
}

#[test]
fn long_snapshots_cut_or_damaged_anywhere_are_refused_at_their_offset() {
    let bytes = std::fs::read(long_dir().join("alloc_context.pickle")).unwrap();
    let n = bytes.len();
    // Cut: the reader needs the rest, and says where (the opcode whose bytes are cut, or
    // the end).
    for k in 1..=24 {
        let cut = n * k / 25;
        match scan_bytes(&bytes[..cut]) {
            Err(SnapshotError::Pickle { error, .. }) => {
                assert_eq!(error.kind, ErrorKind::Truncated, "cut at {cut}: {error}");
                let at = error.offset as usize;
                assert!(at <= cut && cut - at < 300, "cut at {cut}: {error}");
            }
            other => panic!("cut at {cut}: {:?}", other.map(|s| s.traces.len())),
        }
    }
    // An opcode that would import or call, put where a GET was: refused there, the
    // file named, nothing run.
    let gets: Vec<usize> = (n / 2..n - 10)
        .filter(|&i| bytes[i] == b'h')
        .take(40)
        .collect();
    for &at in gets.iter().step_by(8) {
        for op in [b'c', b'R', 0x93, b'b'] {
            let mut damaged = bytes.clone();
            damaged[at] = op;
            let e = scan_bytes(&damaged).map(|_| ()).unwrap_err().to_string();
            assert!(
                e.starts_with("long.pickle: not a readable pickle: at byte "),
                "{e}"
            );
            assert!(
                e.contains("refused opcode") || e.contains("bad argument"),
                "{at} {op}: {e}"
            );
        }
    }
}
