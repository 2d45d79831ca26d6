//! Memory of reading snapshots, measured by a counting allocator (this test binary's
//! global allocator; one test, so nothing else allocates meanwhile): what the reader
//! holds follows the file's distinct content, not its length, and a shared object is
//! held once however often it is referred to.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use memwatch_analysis::torch::synth::{self, Context, Params};
use memwatch_analysis::torch::{report, scan_reader, ReportOptions};

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            let now = NOW.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        NOW.fetch_sub(l.size(), Relaxed);
        System.dealloc(p, l)
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Peak heap bytes above what was held before, while `f` runs.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = NOW.load(Relaxed);
    PEAK.store(base, Relaxed);
    let out = f();
    (out, PEAK.load(Relaxed) - base)
}

#[test]
fn reading_holds_distinct_content_not_length() {
    // Long traces: a fourfold longer file costs little more than the entries' compact
    // records (57 bytes, 256 K in memory) and 4-byte memo handles — far less than the
    // file, where Python's unpickler holds about five times it.
    let mut peaks = Vec::new();
    for iterations in [45_000u64, 90_000] {
        let p = Params {
            iterations,
            context: Context::Alloc,
            devices: 1,
            seed: 7,
        };
        let (bytes, figures) = synth::write_long(Vec::new(), &p).unwrap();
        let (r, peak) = peak_of(|| {
            let scan =
                scan_reader(&bytes[..], Path::new("long.pickle"), bytes.len() as u64).unwrap();
            report(&scan, &ReportOptions::default()).unwrap()
        });
        assert_eq!(r.devices[0].trace_entries, figures[0].entries);
        let per_entry = peak as f64 / figures[0].entries as f64;
        eprintln!(
            "{iterations} iterations: {} entries, {} bytes of pickle, peak {peak} bytes ({per_entry:.1} per entry)",
            figures[0].entries,
            bytes.len()
        );
        peaks.push((peak, figures[0].entries));
    }
    let ((p1, n1), (p2, n2)) = (peaks[0], peaks[1]);
    let growth = (p2 - p1.min(p2)) as f64 / (n2 - n1) as f64;
    eprintln!("growth {growth:.1} bytes per extra entry");
    // Past the in-memory part of the spill both cost the same constant; the memo's
    // handles (about 3 per entry, 4 bytes each) are the only growth.
    assert!(growth < 16.0, "{growth:.1} bytes per extra entry");
    assert!(p2 < 40 << 20, "peak {p2}");

    // Issue 33: 5,000 segments sharing one memoized list of 1,000 blocks (a few hundred
    // KiB naming 5 M blocks): the list is held once, and refused at the second segment
    // (its blocks lie outside it) before being decoded again.
    let bytes = synth::shared_blocks(5_000, 1_000);
    let (result, peak) = peak_of(|| {
        scan_reader(&bytes[..], Path::new("shared.pickle"), bytes.len() as u64)
            .map(|s| s.segments.len())
            .map_err(|e| e.to_string())
    });
    eprintln!(
        "shared blocks: {} bytes of pickle, peak {peak} bytes: {result:?}",
        bytes.len()
    );
    let err = result.unwrap_err();
    assert!(err.contains("segments[1].blocks[0]: block 0x"), "{err}");
    assert!(err.contains("lies outside its segment"), "{err}");
    assert!(peak < 16 << 20, "peak {peak}");
}
