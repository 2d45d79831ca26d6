//! What existed before an attach is shown as its own line, not as 0 B: a real H100 JAX
//! leak (testdata/oom-corpus/jax_leak_bfc) seen as `memwatch attach` would have seen it,
//! attached after the pool was made — every driver event before the attach moment is
//! left out, and the shim's markers are written at that moment in the shim's words
//! (`pre-attach-baseline` with the driver bytes live then, `pre-attach-pjrt-sample` with
//! the allocator's first sample after it). The run page says "Held before attach" with
//! those figures, and the device's chart draws the line; the same capture without the
//! markers says nothing of an attach. The attached capture is written to
//! target/tmp/pre_attach.mwcap for looking at its page.

mod common;

use common::corpus::{capture_records, store_records, testdata};
use common::*;
use memwatch_wire::{EventKind, MemKind, Record};

use common::http::page as get;

/// The capture attached at `at` (monotonic ns): driver events before it left out, and
/// the bytes they left live on device 0.
fn attached_at(records: &[Record], at: u64) -> (Vec<Record>, i64) {
    let mut held = 0i64;
    let mut live = std::collections::HashMap::new();
    let mut out = Vec::new();
    for r in records {
        match r {
            Record::Events(evs) => {
                let mut kept = Vec::new();
                for e in evs {
                    if e.ts_ns >= at {
                        kept.push(*e);
                        continue;
                    }
                    let device_mem = e.mem_kind().is_some_and(MemKind::occupies_device_memory);
                    match e.kind() {
                        Some(EventKind::Alloc) if device_mem && e.device == 0 => {
                            live.insert((e.pid, e.ptr), e.size as i64);
                            held += e.size as i64;
                        }
                        Some(EventKind::Free) => {
                            if let Some(s) = live.remove(&(e.pid, e.ptr)) {
                                held -= s;
                            }
                        }
                        _ => {}
                    }
                }
                if !kept.is_empty() {
                    out.push(Record::Events(kept));
                }
            }
            Record::PjrtMemoryStats(s) if s.ts_ns < at => {}
            other => out.push(other.clone()),
        }
    }
    (out, held)
}

/// The page with the device model each chart caption names after its label
/// (`GPU 0 <span class="muted">NVIDIA H200</span> since the attach: …`) left out.
fn without_models(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(i) = rest.find(" <span class=\"muted\">") {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        match after.find("</span>") {
            Some(j) => rest = &after[j + "</span>".len()..],
            None => {
                rest = after;
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn memory_held_before_an_attach_is_its_own_line() {
    let dbs = dbs("pre_attach").await;
    let (app, store) = test_app(&dbs.urls[0], None, 16 << 20).await;
    let records = capture_records(&testdata("oom-corpus/jax_leak_bfc/capture.mwcap"));
    // The attach: just before the 10th execute (the pool and the first steps exist).
    let at = records
        .iter()
        .flat_map(|r| match r {
            Record::Events(evs) => evs.clone(),
            _ => Vec::new(),
        })
        .filter(|e| e.api() == memwatch_wire::Api::PjrtExecute)
        .nth(9)
        .map(|e| e.ts_ns - 1)
        .expect("a 10th execute");
    let (mut cut, held) = attached_at(&records, at);
    assert!(
        held > 1 << 30,
        "the pool was made before the attach: {held}"
    );
    let first = records
        .iter()
        .find_map(|r| match r {
            Record::PjrtMemoryStats(s) if s.ts_ns >= at => Some(*s),
            _ => None,
        })
        .expect("a sample after the attach");
    let plain = store_records(&store, "h100", "plain", 1, cut.clone(), 16).await;
    let marker = |text: String| {
        Record::Marker(memwatch_wire::Marker {
            pid: first.pid,
            tid: first.pid,
            ts_ns: at,
            device: 0,
            text,
        })
    };
    cut.insert(
        0,
        marker(format!(
            "pre-attach-baseline device=0 used={held} total=85029158912 free={} source=cuMemGetInfo_v2",
            85029158912 - held
        )),
    );
    cut.insert(
        1,
        marker(format!(
            "pre-attach-pjrt-sample device=0 bytes_in_use={} peak_bytes_in_use={} pool_bytes={} bytes_limit={} num_allocs={} source=PJRT_Device_MemoryStats",
            first.bytes_in_use, first.peak_bytes_in_use, first.pool_bytes, first.bytes_limit, first.num_allocs
        )),
    );
    // Kept for looking at the page (`memwatch import` it): target/tmp/pre_attach.mwcap.
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("pre_attach.mwcap");
    let mut w = memwatch_wire::FrameWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for r in &cut {
        w.write_record(r).unwrap();
    }
    w.flush().unwrap();
    let attached = store_records(&store, "h100", "attached", 2, cut, 16).await;

    let page = get(&app, &format!("/runs/{attached}")).await;
    let gib = |b: i64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    let line = format!(
        "Held before attach: {} used on the device at attach (every process and the driver; cuMemGetInfo_v2)",
        gib(held)
    );
    assert!(page.contains(&line), "no line {line}");
    assert!(
        page.contains(&format!(
            "the framework&#39;s pool held {}",
            gib(first.pool_bytes)
        )),
        "no pool figure"
    );
    assert!(
        page.contains("held before attach (device used at attach)"),
        "the chart has no line of what was held"
    );
    assert!(!page.contains("No allocation was recorded on this device"));
    assert!(
        without_models(&page).contains("GPU 0 since the attach: "),
        "the driver figures are not said to start at the attach"
    );
    // A peak of what was allocated since the attach, or that nothing was: never 0 B.
    assert!(!page.contains("peak <strong>0 B</strong>"), "a peak of 0 B");
    let svg = get(&app, &format!("/runs/{attached}/chart.svg?device=0")).await;
    assert!(svg.contains("held before attach"), "chart.svg");
    // The Peak page: what the buffers seen since the attach leave of the allocator's
    // bytes in use was held before it, not "unexplained".
    let peak = get(&app, &format!("/runs/{attached}/peak?device=0")).await;
    let before = format!(
        "held before attach (the allocator had {} in use at the attach",
        gib(first.bytes_in_use)
    );
    assert!(peak.contains(&before), "the peak page lacks: {before}");
    assert!(
        !peak.contains("unexplained"),
        "pre-attach memory called unexplained"
    );
    let peak = get(&app, &format!("/runs/{plain}/peak?device=0")).await;
    assert!(peak.contains("unexplained") && !peak.contains("before attach"));
    // Without the markers nothing is said of an attach.
    let page = get(&app, &format!("/runs/{plain}")).await;
    assert!(!page.contains("held before attach") && !page.contains("Held before attach"));
}

/// The same on a real attach: `memwatch attach` to a leaking JAX job on an H200
/// (testdata/h200-attach/jax_leak), whose pool (13.98 GiB) was made before the attach.
/// The shim's own markers give what was held; the page says so, draws it, and the Peak
/// page calls none of it unexplained.
#[tokio::test]
async fn a_real_attach_shows_what_was_held_before_it() {
    let dbs = dbs("pre_attach_real").await;
    let (app, store) = test_app(&dbs.urls[0], None, 16 << 20).await;
    let records = capture_records(&testdata("h200-attach/jax_leak/attach.mwcap"));
    let marker = |prefix: &str| {
        records
            .iter()
            .find_map(|r| match r {
                Record::Marker(m) if m.text.starts_with(prefix) => Some(m.text.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("the recording has no marker {prefix}"))
    };
    let field = |text: &str, key: &str| -> i64 {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("no {key}= in {text}"))
    };
    let baseline = marker("pre-attach-baseline device=");
    let sample = marker("pre-attach-pjrt-sample ");
    let used = field(&baseline, "used");
    let pool = field(&sample, "pool_bytes");
    assert!(
        used >= pool && pool > 10 << 30,
        "the job's pool was made before the attach: used {used}, pool {pool}"
    );
    let run = store_records(&store, "h200", "attached", 1, records, 16).await;
    let gib = |b: i64| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64);
    let page = get(&app, &format!("/runs/{run}")).await;
    let line = format!(
        "Held before attach: {} used on the device at attach (every process and the driver; cuMemGetInfo_v2)",
        gib(used)
    );
    assert!(page.contains(&line), "no line {line}");
    assert!(
        page.contains(&format!("the framework&#39;s pool held {}", gib(pool))),
        "no pool figure"
    );
    assert!(page.contains("held before attach (device used at attach)"));
    // No allocation went through the driver after the attach: said so, with no
    // "peak 0 B" or "the driver saw 0 B" beside the 13.98 GiB pool.
    assert!(
        without_models(&page).contains("GPU 0 since the attach: no allocation through the driver"),
        "the device caption"
    );
    assert!(
        !page.contains("peak <strong>0 B</strong>") && !page.contains("The driver saw 0 B"),
        "a driver figure of 0 B on the attach's page"
    );
    assert!(page.contains(&format!(
        "The driver saw no allocation of it: the whole pool ({}) was allocated before recording began.",
        gib(pool)
    )));
    assert!(
        !page.contains("unexplained"),
        "the run page calls something unexplained"
    );
    let svg = get(&app, &format!("/runs/{run}/chart.svg?device=0")).await;
    assert!(svg.contains("held before attach"), "chart.svg");
    assert!(!svg.contains("peak 0 B"), "the chart marks a peak of 0 B");
    let peak = get(&app, &format!("/runs/{run}/peak?device=0")).await;
    assert!(
        !peak.contains("unexplained"),
        "pre-attach memory called unexplained on the real attach's Peak page"
    );
    // No driver allocation since the attach: the Peak page says what was held before
    // it rather than that the run allocated nothing.
    assert!(peak.contains(&line), "the Peak page lacks {line}");
    assert!(
        peak.contains("No allocation went through the driver on GPU 0 since the attach")
            && !peak.contains("it allocated nothing"),
        "the real attach's Peak page"
    );
}
