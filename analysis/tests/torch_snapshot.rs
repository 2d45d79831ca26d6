//! PyTorch memory snapshots recorded on an H100 (`testdata/torch-snapshots/`): what the
//! importer reads must equal what PyTorch itself reported (`memory_allocated()`,
//! `memory_reserved()`, their maxima, the OOM message), also when the trace is cut as
//! `max_entries` cuts it; broken and hostile pickles are refused naming the file.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use memwatch_analysis::capture::{analyze, load_reader, ReportOptions as CaptureOptions};
use memwatch_analysis::torch::pickle::write::Writer;
use memwatch_analysis::torch::pickle::{load_plain, ErrorKind, Value};
use memwatch_analysis::torch::replay::{self, Observer, Sim, Step};
use memwatch_analysis::torch::{
    compare, report, scan_reader, to_records, Action, ReportOptions, Scan, SnapshotError,
};
use memwatch_wire::{EventKind, FrameWriter, MemKind, Record};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/torch-snapshots")
}

const FIXTURES: [&str; 3] = ["train_snapshot", "leak", "fragmentation"];

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(format!("{name}.pickle"))).unwrap()
}

fn figures(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir().join(format!("{name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn scan_bytes(b: &[u8], name: &str) -> Result<Scan, SnapshotError> {
    scan_reader(b, Path::new(name), b.len() as u64)
}

/// "4.00 GiB" -> bytes, and the unit (PyTorch prints two decimals).
fn size_in(text: &str, before: &str) -> (f64, f64) {
    let at = text.find(before).unwrap() + before.len();
    let mut parts = text[at..].split_whitespace();
    let n: f64 = parts.next().unwrap().parse().unwrap();
    let unit = match parts.next().unwrap().trim_end_matches(['.', ',', ';']) {
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        "bytes" => 1.0,
        u => panic!("unit {u}"),
    };
    (n * unit, unit)
}

fn assert_close(ours: u64, (theirs, unit): (f64, f64), what: &str) {
    assert!(
        (ours as f64 - theirs).abs() <= 0.005 * unit,
        "{what}: {ours} vs PyTorch's {theirs}"
    );
}

#[test]
fn figures_at_the_dump_peaks_and_ooms_equal_pytorchs() {
    for name in FIXTURES {
        let scan = scan_bytes(&bytes(name), name).unwrap();
        let r = report(&scan, &ReportOptions::default()).unwrap();
        let f = &figures(name)["at_dump"];
        assert_eq!(r.devices.len(), 1, "{name}");
        let d = &r.devices[0];
        assert_eq!(
            d.allocated_bytes,
            f["memory_allocated"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            d.reserved_bytes,
            f["memory_reserved"].as_u64().unwrap(),
            "{name}"
        );
        // The replay ends where the dump is, block by block.
        assert!(d.end_check.consistent(), "{name}: {:?}", d.end_check);
        assert_eq!(d.at_end.allocated_bytes, d.allocated_bytes);
        assert_eq!(d.at_end.reserved_bytes, d.reserved_bytes);
        // These traces cover the whole run, so their peaks are PyTorch's maxima.
        assert_eq!(d.before_trace.blocks + d.before_trace.segments, 0, "{name}");
        assert_eq!(
            d.peak_allocated.bytes,
            f["max_memory_allocated"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            d.peak_reserved.bytes,
            f["max_memory_reserved"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(d.at_peak.allocated_bytes, d.peak_allocated.bytes, "{name}");
        let tl_max = d.timeline.iter().map(|b| b.allocated_max).max().unwrap();
        assert_eq!(
            tl_max, d.peak_allocated.bytes,
            "{name}: the timeline hides the peak"
        );
        let a = &d.anomalies;
        assert_eq!(
            a.unknown_frees + a.outside_segments + a.overlapping + a.over_region,
            0,
            "{name}: {a:?}"
        );
        let exception = figures(name)["exception"].as_str().map(str::to_string);
        match exception {
            None => assert_eq!(d.ooms_total, 0, "{name}"),
            Some(text) => {
                assert_eq!(d.ooms_total, 1, "{name}");
                let o = &d.ooms[0];
                assert_close(
                    o.requested_bytes,
                    size_in(&text, "Tried to allocate "),
                    "request",
                );
                assert_close(
                    o.allocated_bytes,
                    size_in(&text, "Of the allocated memory "),
                    "allocated at the OOM",
                );
                assert_close(
                    o.reserved_unallocated_bytes,
                    size_in(&text, "PyTorch, and "),
                    "reserved but unallocated at the OOM",
                );
                assert!(!o.frames.is_empty() && o.site.is_some(), "{name}");
            }
        }
    }
}

#[test]
fn fragmentation_oom_shows_no_free_block_large_enough() {
    let scan = scan_bytes(&bytes("fragmentation"), "fragmentation").unwrap();
    let r = report(&scan, &ReportOptions::default()).unwrap();
    let o = &r.devices[0].ooms[0];
    // 1 GiB segments cut into 256 MiB blocks, every other one freed: 4 GiB free in the
    // cache, none of it in a piece of the 512 MiB asked for.
    assert_eq!(o.pool, "large");
    assert_eq!(o.largest_free_block_bytes, 256 << 20);
    assert_eq!(o.reserved_unallocated_bytes, 4 << 30);
    assert_eq!(
        o.site.as_deref(),
        Some("torch_fragmentation.py:35 in <module>")
    );
    assert_eq!(r.allocator_settings.expandable_segments, Some(false));
    assert_eq!(r.allocator_settings.max_split_size, None);
}

#[test]
fn leak_peak_is_held_by_the_leaking_lines() {
    let scan = scan_bytes(&bytes("leak"), "leak").unwrap();
    let r = report(&scan, &ReportOptions::default()).unwrap();
    let d = &r.devices[0];
    let top = &d.at_peak.by_site[0];
    assert!(top.site.starts_with("torch_leak.py:"), "{top:?}");
    assert!(top.bytes > d.peak_allocated.bytes / 2);
    // The OOM came from autograd's backward thread (no Python frame).
    assert_eq!(d.ooms[0].site.as_deref(), Some("PowBackward0 (autograd)"));
}

/// Allocated and reserved after every trace entry (not the state before the trace).
struct Levels(Vec<(Action, i64, u64, u64)>);

impl Observer for Levels {
    type Error = ();
    fn after(&mut self, sim: &Sim, s: &Step) -> Result<(), ()> {
        if !s.before {
            self.0
                .push((s.action, s.time_us, sim.allocated, sim.reserved));
        }
        Ok(())
    }
}

fn levels(scan: &Scan) -> Vec<(Action, i64, u64, u64)> {
    let mut l = Levels(Vec::new());
    replay::replay(scan, &mut l).unwrap();
    l.0
}

/// The snapshot with only the last entries of device 0's trace, as PyTorch's ring buffer
/// (`max_entries`) keeps them.
fn cut_trace(doc: &Value, keep_from: usize) -> Vec<u8> {
    let Value::Dict(items) = doc else { panic!() };
    let items: Vec<(Value, Value)> = items
        .iter()
        .map(|(k, v)| {
            if k.as_str() == Some("device_traces") {
                let traces = v.as_seq().unwrap();
                let t0 = traces[0].as_seq().unwrap();
                let kept = Value::List(Rc::new(t0[keep_from..].to_vec()));
                (k.clone(), Value::List(Rc::new(vec![kept])))
            } else {
                (k.clone(), v.clone())
            }
        })
        .collect();
    let mut w = Writer::new(Vec::new(), 1000);
    w.write(&Value::Dict(Rc::new(items))).unwrap();
    w.finish().unwrap()
}

#[test]
fn a_trace_cut_by_the_ring_buffer_replays_the_same_levels() {
    for name in FIXTURES {
        let original = bytes(name);
        let full = scan_bytes(&original, name).unwrap();
        let full_levels = levels(&full);
        let doc = load_plain(&original[..]).unwrap();
        // The rewriter reproduces PyTorch's bytes: same reading.
        let same = cut_trace(&doc, 0);
        assert_eq!(
            levels(&scan_bytes(&same, name).unwrap()),
            full_levels,
            "{name}"
        );
        let n = full_levels.len();
        for keep_from in [1, n / 7, n / 3, n / 2, n - 5] {
            let cut = cut_trace(&doc, keep_from);
            let scan = scan_bytes(&cut, name).unwrap();
            let r = report(&scan, &ReportOptions::default()).unwrap();
            let d = &r.devices[0];
            let f = &figures(name)["at_dump"];
            assert_eq!(d.allocated_bytes, f["memory_allocated"].as_u64().unwrap());
            assert_eq!(d.reserved_bytes, f["memory_reserved"].as_u64().unwrap());
            assert!(
                d.end_check.consistent(),
                "{name} from {keep_from}: {:?}",
                d.end_check
            );
            let got = levels(&scan);
            assert_eq!(got.len(), n - keep_from);
            // Blocks the cut trace frees without having allocated them get their
            // rounded request as size; on these traces that is their real size, so every
            // level equals the full trace's.
            if let Some(i) = (0..got.len()).find(|&i| got[i] != full_levels[keep_from + i]) {
                panic!(
                    "{name} from {keep_from}: entry {i}: {:?} vs {:?}; {:?} {:?}",
                    got[i],
                    full_levels[keep_from + i],
                    d.anomalies,
                    d.before_trace
                );
            }
            assert!(
                d.before_trace.blocks + d.before_trace.segments > 0,
                "{name} {keep_from}"
            );
        }
    }
}

#[test]
fn records_store_reserved_as_device_memory_and_blocks_apart() {
    for name in FIXTURES {
        let scan = scan_bytes(&bytes(name), name).unwrap();
        let mut w = FrameWriter::new(Vec::new()).unwrap();
        let mut block_live: i64 = 0;
        let mut failed = 0;
        let summary = to_records::<memwatch_wire::WireError>(&scan, "h100", &mut |r| {
            if let Record::Events(evs) = &r {
                for e in evs {
                    if e.mem_kind == MemKind::TorchBlock as u8 {
                        match EventKind::from_u8(e.kind) {
                            Some(EventKind::Alloc) => block_live += e.size as i64,
                            Some(EventKind::Free) => block_live -= e.size as i64,
                            Some(EventKind::AllocFailed) => failed += 1,
                            _ => {}
                        }
                    }
                }
            }
            w.write_record(&r)
        })
        .unwrap();
        assert!(summary.stacks > 0 && summary.events > 0);
        let bytes = w.into_inner().unwrap();
        let loaded = load_reader(&bytes[..], Path::new(name), &mut |_| {}).unwrap();
        let rep = analyze(loaded, &CaptureOptions::default());
        assert_eq!(
            rep.tags.get("source").map(String::as_str),
            Some("pytorch-snapshot")
        );
        let f = &figures(name)["at_dump"];
        let dev = &rep.processes[0].devices[0];
        assert_eq!(
            dev.peak_bytes,
            f["max_memory_reserved"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            dev.live_bytes_at_exit,
            f["memory_reserved"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            block_live as u64,
            f["memory_allocated"].as_u64().unwrap(),
            "{name}"
        );
        let ooms = u64::from(figures(name)["exception"].is_string());
        assert_eq!(failed, ooms, "{name}");
        assert_eq!(dev.failed_count, ooms, "{name}");
    }
}

#[test]
fn two_snapshots_compare_by_line() {
    let a = report(
        &scan_bytes(&bytes("train_snapshot"), "a").unwrap(),
        &ReportOptions::default(),
    )
    .unwrap();
    let b = report(
        &scan_bytes(&bytes("leak"), "b").unwrap(),
        &ReportOptions::default(),
    )
    .unwrap();
    let c = compare(&a, &b, 10);
    let d = &c.devices[0];
    assert_eq!(
        d.peak_allocated_bytes.delta,
        4228939264i64 - 110283264,
        "{d:?}"
    );
    assert_eq!(d.ooms.b, 1);
    assert!(d.sites_at_peak[0].site.starts_with("torch_leak.py"));
    let same = compare(&a, &a, 10);
    assert!(same.devices[0].sites_at_peak.is_empty());
    assert_eq!(same.devices[0].allocated_bytes.delta, 0);
}

fn pickle_error(b: &[u8]) -> (u64, ErrorKind, String) {
    match scan_bytes(b, "/data/x.pickle") {
        Err(e @ SnapshotError::Pickle { .. }) => {
            let text = e.to_string();
            let SnapshotError::Pickle { error, .. } = e else {
                unreachable!()
            };
            (error.offset, error.kind, text)
        }
        Err(e) => panic!("not a pickle error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

/// A real snapshot with `replacement` in place of the allocator settings' value.
fn with_settings_replaced(replacement: &[u8]) -> (Vec<u8>, usize) {
    let doc = load_plain(&bytes("fragmentation")[..]).unwrap();
    let Value::Dict(items) = &doc else { panic!() };
    let items: Vec<(Value, Value)> = items
        .iter()
        .map(|(k, v)| match k.as_str() {
            Some("allocator_settings") => (k.clone(), Value::str("@@PLACEHOLDER@@")),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    let mut w = Writer::new(Vec::new(), 1000);
    w.write(&Value::Dict(Rc::new(items))).unwrap();
    let b = w.finish().unwrap();
    let marker = b"\x8c\x0f@@PLACEHOLDER@@";
    let at = b.windows(marker.len()).position(|w| w == marker).unwrap();
    let mut out = b[..at].to_vec();
    out.extend_from_slice(replacement);
    out.extend_from_slice(&b[at + marker.len()..]);
    // Frame lengths are hints this reader skips; the data changed size.
    (out, at)
}

#[test]
fn code_in_a_snapshot_is_refused_where_it_is() {
    // GLOBAL posix.system, ('echo hi',), REDUCE: what pickle writes for os.system.
    let (b, at) = with_settings_replaced(b"cposix\nsystem\n\x8c\x07echo hi\x85R");
    let (offset, kind, text) = pickle_error(&b);
    assert_eq!(offset, at as u64);
    assert!(matches!(kind, ErrorKind::Refused { op: "GLOBAL", .. }));
    assert!(text.starts_with("/data/x.pickle: "), "{text}");
    assert!(text.contains("imports posix.system"), "{text}");
    let (b, at) = with_settings_replaced(b"\x8c\x02os\x8c\x06system\x93");
    let (offset, kind, _) = pickle_error(&b);
    assert_eq!(offset, at as u64 + 12);
    assert!(matches!(
        kind,
        ErrorKind::Refused {
            op: "STACK_GLOBAL",
            ..
        }
    ));
}

#[test]
fn hostile_sizes_and_nesting_are_refused() {
    let mut huge = b"\x8d".to_vec();
    huge.extend_from_slice(&(1u64 << 62).to_le_bytes());
    let (_, kind, _) = pickle_error(&with_settings_replaced(&huge).0);
    assert!(matches!(kind, ErrorKind::TooLong { .. }), "{kind:?}");
    // 400 lists, each appended to the one below: nested 400 deep.
    let mut deep = vec![b']'; 400];
    deep.extend(std::iter::repeat_n(b'a', 399));
    let (_, kind, _) = pickle_error(&with_settings_replaced(&deep).0);
    assert!(matches!(kind, ErrorKind::TooDeep(_)), "{kind:?}");
}

#[test]
fn truncated_and_damaged_snapshots_fail_cleanly() {
    let b = bytes("leak");
    for i in 1..60 {
        let cut = b.len() * i / 60;
        let (offset, kind, text) = pickle_error(&b[..cut]);
        assert_eq!(kind, ErrorKind::Truncated, "cut at {cut}");
        assert!(offset <= cut as u64);
        assert!(text.contains("truncated"), "{text}");
    }
    // Changed bytes: an error or a (different) snapshot, never a panic.
    let mut seed = 0x9e3779b97f4a7c15u64;
    for _ in 0..300 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut d = b.clone();
        let at = (seed % d.len() as u64) as usize;
        d[at] = (seed >> 32) as u8;
        if let Ok(scan) = scan_bytes(&d, "damaged") {
            let _ = report(&scan, &ReportOptions::default());
        }
    }
}

#[test]
fn other_pickles_are_not_snapshots() {
    let mut w = Writer::new(Vec::new(), 1000);
    w.write(&Value::List(Rc::new(vec![Value::Int(1)]))).unwrap();
    let b = w.finish().unwrap();
    let e = scan_bytes(&b, "list.pickle").err().unwrap();
    assert!(e.to_string().contains("not a memory snapshot"), "{e}");
    let doc = Value::Dict(Rc::new(vec![(Value::str("segments"), Value::Int(3))]));
    let mut w = Writer::new(Vec::new(), 1000);
    w.write(&doc).unwrap();
    let e = scan_bytes(&w.finish().unwrap(), "odd.pickle")
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("odd.pickle: "), "{e}");
}

/// The allocator paths recorded on an H100 (`testdata/torch-snapshots/paths/`, as
/// `tests/gpu/torch_snapshots.sh` checked them there): expandable segments, a side stream,
/// a trace cut by `max_entries`, `roundup_power2_divisions` with `max_split_size_mb`, and
/// `empty_cache`. Allocated and reserved at the dump equal PyTorch's exactly; a trace that
/// covers the run has PyTorch's maxima as its peaks (a cut one cannot: it starts from the
/// state the ring kept); the settings are the ones the program set.
#[test]
fn allocator_paths_equal_pytorchs_figures() {
    let paths = dir().join("paths");
    for name in ["expandable", "streams", "ring", "roundup", "empty_cache"] {
        let b = std::fs::read(paths.join(format!("{name}.pickle"))).unwrap();
        let f: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(paths.join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        let at = &f["at_dump"];
        let scan = scan_bytes(&b, name).unwrap();
        let r = report(&scan, &ReportOptions::default()).unwrap();
        assert_eq!(r.devices.len(), 1, "{name}");
        let d = &r.devices[0];
        let want = |k: &str| at[k].as_u64().unwrap();
        assert_eq!(d.allocated_bytes, want("memory_allocated"), "{name}");
        assert_eq!(d.reserved_bytes, want("memory_reserved"), "{name}");
        assert!(d.end_check.consistent(), "{name}: {:?}", d.end_check);
        assert_eq!(
            r.allocator_settings.conf.as_deref().unwrap_or(""),
            at["alloc_conf"].as_str().unwrap(),
            "{name}"
        );
        let whole = d.before_trace.blocks + d.before_trace.segments == 0;
        assert_eq!(whole, name != "ring", "{name}: {:?}", d.before_trace);
        if whole {
            assert_eq!(
                d.peak_allocated.bytes,
                want("max_memory_allocated"),
                "{name}"
            );
            assert_eq!(d.peak_reserved.bytes, want("max_memory_reserved"), "{name}");
        } else {
            assert!(
                d.peak_allocated.bytes <= want("max_memory_allocated"),
                "{name}"
            );
            assert!(
                d.peak_reserved.bytes <= want("max_memory_reserved"),
                "{name}"
            );
        }
        match f["exception"].as_str() {
            None => assert_eq!(d.ooms_total, 0, "{name}"),
            Some(text) => {
                assert_eq!(d.ooms_total, 1, "{name}");
                let o = &d.ooms[0];
                assert_close(
                    o.requested_bytes,
                    size_in(text, "Tried to allocate "),
                    "request",
                );
                assert_close(
                    o.allocated_bytes,
                    size_in(text, "Of the allocated memory "),
                    "allocated at the OOM",
                );
                assert_close(
                    o.reserved_unallocated_bytes,
                    size_in(text, "PyTorch, and "),
                    "reserved but unallocated at the OOM",
                );
            }
        }
    }
    let settings = |name: &str| {
        let b = std::fs::read(paths.join(format!("{name}.pickle"))).unwrap();
        scan_bytes(&b, name).unwrap().settings
    };
    assert_eq!(settings("expandable").expandable_segments, Some(true));
    assert_eq!(settings("roundup").max_split_size, Some(64 << 20));
    assert_eq!(settings("streams").expandable_segments, Some(false));
}

#[test]
fn stack_markers_read_back_to_the_same_frames_and_site() {
    use memwatch_analysis::torch::records::parse_stack_marker;
    use memwatch_analysis::torch::stacks::site_of_frames;
    use memwatch_analysis::torch::StackId;
    for name in ["leak", "train_snapshot", "fragmentation"] {
        let b = bytes(name);
        let scan = scan_bytes(&b, name).unwrap();
        let mut seen = 0;
        to_records::<()>(&scan, "h100", &mut |r| {
            if let Record::Marker(m) = &r {
                if let Some((n, frames)) = parse_stack_marker(&m.text) {
                    let id = StackId(n);
                    let want: Vec<_> = scan.stacks.frames(id).cloned().collect();
                    assert_eq!(frames, want, "{name}: stack {n}");
                    assert_eq!(
                        site_of_frames(&frames).map(|f| f.site_label()),
                        memwatch_analysis::torch::report::site_label(&scan.stacks, id),
                        "{name}: stack {n}"
                    );
                    seen += 1;
                }
            }
            Ok(())
        })
        .unwrap();
        assert!(seen > 0, "{name}: no stack marker");
    }
    assert_eq!(parse_stack_marker("torch.annotation START x"), None);
}
