//! Memory of reading snapshots, measured by a counting allocator (this test binary's
//! global allocator; one test, so nothing else allocates meanwhile): what the reader
//! holds follows the file's distinct content, not its length, and a shared object is
//! held once however often it is referred to.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use memwatch_analysis::torch::pickle::write::Writer;
use memwatch_analysis::torch::pickle::{
    load, Element, Kind, Limits, Route, Router, Streaming, Value,
};
use memwatch_analysis::torch::scan_reader;
use memwatch_analysis::torch::synth::{self, Context, Params};

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

/// Streams every trace entry (lent, as `scan` does) and drops it: what remains is the
/// reader's own memory (memo, stack, input buffer).
struct Drop;

impl Router for Drop {
    fn top(&mut self, _: Kind) -> Route {
        Route(1)
    }
    fn child(&mut self, parent: Route, key: Option<&Value>, _: usize, kind: Kind) -> Option<Route> {
        // Lists of dicts (segments, a trace) and of lists (device_traces) have nothing
        // else in them: the machine then reads the stack the other way.
        match (parent, key.and_then(Value::as_str), kind) {
            (Route(1), Some("device_traces"), Kind::List) => Some(Route(2)),
            (Route(1), Some("segments"), Kind::List) => Some(Route(4)),
            (Route(2), _, Kind::List) => Some(Route(3)),
            (Route(3) | Route(4), _, Kind::Dict) => Some(Route::OTHER),
            (Route(2) | Route(3) | Route(4), _, _) => None,
            _ => Some(Route::OTHER),
        }
    }
    fn streaming(&self, r: Route) -> Streaming {
        if r == Route(3) {
            Streaming::Lend
        } else {
            Streaming::No
        }
    }
    fn element(&mut self, _: Route, _: usize, _: Element<'_>) -> Result<(), String> {
        Ok(())
    }
}

/// A snapshot-shaped document whose `entries` trace entries each have a new list of
/// the same one frame dict (as PyTorch's dump of a one-frame stack).
fn one_frame_trace(entries: usize) -> Vec<u8> {
    use std::rc::Rc;
    let s = Value::str;
    let frame = Value::Dict(Rc::new(vec![
        (s("name"), s("<module>")),
        (s("filename"), s("/work/train.py")),
        (s("line"), Value::Int(6)),
    ]));
    // Keys and the action name: one object each, as PyTorch makes them.
    let keys = [s("action"), s("addr"), s("size"), s("frames")];
    let action = s("alloc");
    let trace: Vec<Value> = (0..entries)
        .map(|i| {
            Value::Dict(Rc::new(vec![
                (keys[0].clone(), action.clone()),
                (keys[1].clone(), Value::Int(4096 * (i as i64 % 64))),
                (keys[2].clone(), Value::Int(512)),
                (keys[3].clone(), Value::List(Rc::new(vec![frame.clone()]))),
            ]))
        })
        .collect();
    let doc = Value::Dict(Rc::new(vec![
        (s("segments"), Value::List(Rc::new(Vec::new()))),
        (
            s("device_traces"),
            Value::List(Rc::new(vec![Value::List(Rc::new(trace))])),
        ),
    ]));
    let mut w = Writer::new(Vec::new(), 1000);
    w.write(&doc).unwrap();
    w.finish().unwrap()
}

#[test]
fn reading_holds_distinct_content_not_length() {
    // The reader alone: a fourfold longer trace costs its memo indices (about a byte
    // each, three per entry) and nothing per entry besides — every object reachable by
    // a later GET is kept, but each distinct one once.
    let mut peaks = Vec::new();
    for iterations in [10_000u64, 40_000] {
        let p = Params {
            iterations,
            context: Context::Alloc,
            devices: 1,
            seed: 7,
        };
        let (bytes, figures) = synth::write_long(Vec::new(), &p).unwrap();
        let (_, peak) = peak_of(|| load(&bytes[..], &mut Drop, &Limits::default()).unwrap());
        let n = figures[0].entries;
        eprintln!(
            "reader: {n} entries, {} bytes of pickle, peak {peak} bytes",
            bytes.len()
        );
        peaks.push((peak, n, bytes.len()));
    }
    let ((p1, n1, _), (p2, n2, b2)) = (peaks[0], peaks[1]);
    let growth = p2.saturating_sub(p1) as f64 / (n2 - n1) as f64;
    eprintln!("growth {growth:.2} bytes per extra entry");
    assert!(growth < 8.0, "{growth:.2} bytes per extra entry");
    assert!(p2 < b2 / 4, "peak {p2} for {b2} bytes");

    // Stacks of one frame (a script allocating at module level: `stacks="python"` gives
    // one frame), whose lists Python's pickler writes `EMPTY_LIST MEMOIZE GET APPEND`:
    // a new list object per entry, of the same frame, held once too.
    let mut peaks = Vec::new();
    for entries in [40_000usize, 160_000] {
        let bytes = one_frame_trace(entries);
        let (_, peak) = peak_of(|| load(&bytes[..], &mut Drop, &Limits::default()).unwrap());
        eprintln!("one-frame stacks: {entries} entries, peak {peak} bytes");
        peaks.push((peak, entries));
    }
    let ((p1, n1), (p2, n2)) = (peaks[0], peaks[1]);
    let growth = p2.saturating_sub(p1) as f64 / (n2 - n1) as f64;
    eprintln!("growth {growth:.2} bytes per extra entry (one-frame stacks)");
    assert!(growth < 8.0, "{growth:.2} bytes per extra entry");

    // Hostile: 8 M MEMOIZEs of one value, 1 M of new empty tuples and 1 M of 1-tuples
    // (1 to 4 bytes of file each): the indices, and each distinct object once — linear
    // in the file, 12 times it for 1-tuples of 4 bytes, as Python's unpickler would.
    let mut bomb = b"\x80\x04N".to_vec();
    bomb.extend(std::iter::repeat_n(0x94u8, 8 << 20));
    bomb.extend_from_slice(b"0");
    for _ in 0..(1 << 20) {
        bomb.extend_from_slice(b")\x940N\x85\x940");
    }
    bomb.extend_from_slice(b"N.");
    let (v, peak) = peak_of(|| load(&bomb[..], &mut Drop, &Limits::default()).map(|_| ()));
    eprintln!(
        "memoize bomb: {} bytes, peak {peak} bytes: {v:?}",
        bomb.len()
    );
    v.unwrap();
    assert!(
        peak < bomb.len() * 16,
        "peak {peak} for {} bytes",
        bomb.len()
    );

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
