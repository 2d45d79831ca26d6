//! Snapshot-shaped pickles of any length with memo references reaching back any
//! distance, laid out as Python's pickler lays out `_dump_snapshot()` (for tests and
//! benchmarks; `testdata/torch-snapshots/long/make_long.py` makes the same shape with
//! Python's own pickler).
//!
//! The allocator is simulated the way PyTorch's caching allocator serves 20 MiB requests:
//! each block fills its own 20 MiB segment, a freed block stays cached and is reused
//! (lowest address first) before a new segment is made. Objects are shared as PyTorch
//! shares them: one dict per distinct frame, one object per key and action name, a new
//! frame list per entry (repeating a few stacks), a new `'N/A'` per entry; a block live
//! at the dump has the same frame list in `segments` (written first) and in its `alloc`
//! entry; with [`Context::Alloc`] a free shares its alloc's list; `free_completed` shares
//! `free_requested`'s; with [`Context::State`] entries have no `frames`. What reaches far back: a block allocated first and freed last, a
//! frame used only at the start and the end, `'segment_alloc'` once at the start (the
//! loop reuses segments made before the trace, as after a wrapped ring) and again at the
//! end. The simulation runs twice with the same seed: once for the state at the dump
//! (written first, as PyTorch does), once to write the trace, so a document of any size
//! is written in bounded memory.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};
use std::rc::Rc;

use super::pickle::write::Writer;
use super::pickle::Value;

const MIB: u64 = 1 << 20;
/// Every request and segment.
pub const SIZE: u64 = 20 * MIB;
const BASE: u64 = 0x7f00_0000_0000;
/// Segments made before the trace began.
const PRE: u64 = 8;

/// Whose stack a free entry carries (`_record_memory_history(context=...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// Its own (frees are recorded with their stack).
    All,
    /// Its alloc's (the same list object).
    Alloc,
    /// None: no trace entry has frames (PyTorch's `record_trace` drops them below
    /// `RecordContext::ALLOC`); only the dump's blocks carry their allocation's list.
    State,
}

#[derive(Debug, Clone)]
pub struct Params {
    /// Loop iterations per device (each 1-3 allocations and as many frees).
    pub iterations: u64,
    pub context: Context,
    pub devices: usize,
    pub seed: u64,
}

/// What the document holds, per device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub allocated: u64,
    pub reserved: u64,
    pub segments: u64,
    pub active_blocks: u64,
    pub entries: u64,
    pub actions: BTreeMap<&'static str, u64>,
}

/// One trace entry the simulation makes.
struct Event {
    action: &'static str,
    addr: u64,
    /// The allocation it belongs to (its sequence number), for sharing frame lists.
    alloc: u64,
    stack: usize,
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Runs one device's simulation, handing each entry to `emit`; returns the state at the
/// dump: segment address -> the live allocation in it (sequence number, stack).
fn simulate(
    p: &Params,
    device: usize,
    emit: &mut dyn FnMut(Event),
) -> BTreeMap<u64, Option<(u64, usize)>> {
    let mut rng = Rng(p.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (device as u64 + 1) | 1);
    let base = BASE + (device as u64) * (1 << 40);
    let mut segments: BTreeMap<u64, Option<(u64, usize)>> = BTreeMap::new();
    let mut cached: BTreeSet<u64> = BTreeSet::new();
    let mut seq = 0u64;
    let mut alloc = |stack: usize,
                     segments: &mut BTreeMap<u64, Option<(u64, usize)>>,
                     cached: &mut BTreeSet<u64>,
                     emit: &mut dyn FnMut(Event)| {
        seq += 1;
        let addr = match cached.pop_first() {
            Some(a) => a,
            None => {
                let a = base + segments.len() as u64 * SIZE;
                emit(Event {
                    action: "segment_alloc",
                    addr: a,
                    alloc: seq,
                    stack,
                });
                a
            }
        };
        emit(Event {
            action: "alloc",
            addr,
            alloc: seq,
            stack,
        });
        segments.insert(addr, Some((seq, stack)));
        (addr, seq, stack)
    };
    let free = |(addr, seq, stack): (u64, u64, usize),
                segments: &mut BTreeMap<u64, Option<(u64, usize)>>,
                cached: &mut BTreeSet<u64>,
                emit: &mut dyn FnMut(Event)| {
        emit(Event {
            action: "free_requested",
            addr,
            alloc: seq,
            stack,
        });
        emit(Event {
            action: "free_completed",
            addr,
            alloc: seq,
            stack,
        });
        segments.insert(addr, None);
        cached.insert(addr);
    };
    // Stack 0 holds the rare frame: the first allocation and those at the end.
    let first = alloc(0, &mut segments, &mut cached, emit);
    for i in 1..=PRE {
        segments.insert(base + i * SIZE, None);
        cached.insert(base + i * SIZE);
    }
    let mut live = Vec::new();
    for _ in 0..p.iterations {
        for _ in 0..=rng.below(3) {
            let stack = 1 + rng.below(STACKS as u64 - 1) as usize;
            live.push(alloc(stack, &mut segments, &mut cached, emit));
        }
        while live.len() > 3 {
            let i = rng.below(live.len() as u64) as usize;
            free(live.swap_remove(i), &mut segments, &mut cached, emit);
        }
    }
    free(first, &mut segments, &mut cached, emit);
    for _ in 0..cached.len() + 2 {
        alloc(0, &mut segments, &mut cached, emit);
    }
    segments
}

/// Distinct stacks (frame lists repeat these).
const STACKS: usize = 12;

/// The frame dicts (one object each) and the stacks as indices into them.
fn frames() -> (Vec<Value>, Vec<Vec<usize>>) {
    let s = |k: &str, v: Value| (Value::str(k), v);
    let mut frames: Vec<Value> = (0..40)
        .map(|i| {
            Value::Dict(Rc::new(vec![
                s("name", Value::str(&format!("fn_{i}"))),
                s("filename", Value::str(&format!("/src/model_{}.py", i % 7))),
                s("line", Value::Int(10 + i)),
            ]))
        })
        .collect();
    frames.push(Value::Dict(Rc::new(vec![
        s("name", Value::str("rare_setup")),
        s("filename", Value::str("/src/setup.py")),
        s("line", Value::Int(3)),
    ])));
    let stacks = (0..STACKS)
        .map(|k| {
            let mut st: Vec<usize> = (0..3 + k % 4).map(|j| (k * 5 + j) % 40).collect();
            if k == 0 {
                st.insert(0, 40);
            }
            st
        })
        .collect();
    (frames, stacks)
}

/// Keys and action names: one object each, as PyTorch makes them.
struct Names(HashMap<&'static str, Value>);

impl Names {
    fn get(&mut self, s: &'static str) -> Value {
        self.0.entry(s).or_insert_with(|| Value::str(s)).clone()
    }
}

/// Writes the document to `out`; returns what it holds per device.
pub fn write_long<W: Write>(out: W, p: &Params) -> io::Result<(W, Vec<Figures>)> {
    let (frame_dicts, stacks) = frames();
    let list = |k: usize| {
        Value::List(Rc::new(
            stacks[k].iter().map(|&f| frame_dicts[f].clone()).collect(),
        ))
    };
    let mut names = Names(HashMap::new());
    let mut w = Writer::new(out, 1000);
    // The state at the dump first: its live blocks' lists are their alloc entries' lists.
    let mut dump_lists: Vec<HashMap<u64, Value>> = Vec::new();
    let mut figures = Vec::new();
    let mut segments = Vec::new();
    for device in 0..p.devices {
        let state = simulate(p, device, &mut |_| {});
        let mut lists = HashMap::new();
        let mut f = Figures::default();
        for (&addr, live) in &state {
            f.segments += 1;
            f.reserved += SIZE;
            let (state_name, frames, active) = match live {
                Some((seq, stack)) => {
                    let l = list(*stack);
                    lists.insert(*seq, l.clone());
                    f.active_blocks += 1;
                    f.allocated += SIZE;
                    ("active_allocated", l, SIZE)
                }
                None => ("inactive", Value::List(Rc::new(Vec::new())), 0),
            };
            let mut d = |k: &'static str, v: Value| (names.get(k), v);
            let block = Value::Dict(Rc::new(vec![
                d("address", Value::Int(addr as i64)),
                d("size", Value::Int(SIZE as i64)),
                d("requested_size", Value::Int(SIZE as i64)),
                d("state", Value::str(state_name)),
                d("frames", frames),
            ]));
            segments.push(Value::Dict(Rc::new(vec![
                d("device", Value::Int(device as i64)),
                d("address", Value::Int(addr as i64)),
                d("total_size", Value::Int(SIZE as i64)),
                d("allocated_size", Value::Int(active as i64)),
                d("active_size", Value::Int(active as i64)),
                d("requested_size", Value::Int(active as i64)),
                d("stream", Value::Int(0)),
                d("segment_type", Value::str("large")),
                d(
                    "segment_pool_id",
                    Value::Tuple(Rc::new(vec![Value::Int(0), Value::Int(0)])),
                ),
                d("is_expandable", Value::Bool(false)),
                d("frames", Value::List(Rc::new(Vec::new()))),
                d("blocks", Value::List(Rc::new(vec![block]))),
            ])));
        }
        dump_lists.push(lists);
        figures.push(f);
    }
    w.empty_dict()?;
    w.mark()?;
    w.value(&names.get("segments"))?;
    w.value(&Value::List(Rc::new(segments)))?;
    w.value(&names.get("device_traces"))?;
    w.empty_list()?;
    if p.devices > 1 {
        w.mark()?;
    }
    let mut time = 1_000_000i64;
    for device in 0..p.devices {
        w.empty_list()?;
        let mut batch: Vec<Value> = Vec::with_capacity(1000);
        // Frame lists no later entry has, forgotten by the writer once written.
        let mut dead: Vec<Value> = Vec::new();
        let mut lists: HashMap<u64, Value> = HashMap::new();
        let mut err = Ok(());
        let f = &mut figures[device];
        let dump = &dump_lists[device];
        let flush = |w: &mut Writer<W>,
                     batch: &mut Vec<Value>,
                     dead: &mut Vec<Value>,
                     end: bool|
         -> io::Result<()> {
            if batch.len() == 1 && end {
                w.value(&batch[0])?;
                w.append()?;
            } else if !batch.is_empty() {
                w.mark()?;
                for e in batch.iter() {
                    w.value(e)?;
                }
                w.appends()?;
            }
            for e in batch.drain(..) {
                // Entries and their 'N/A' never come again.
                if let Some(c) = e.get("compile_context") {
                    w.forget(c);
                }
                w.forget(&e);
            }
            for l in dead.drain(..) {
                w.forget(&l);
            }
            Ok(())
        };
        simulate(p, device, &mut |ev: Event| {
            if err.is_err() {
                return;
            }
            time += 1 + (ev.addr >> 21) as i64 % 50;
            let frames = match ev.action {
                "alloc" => {
                    let l = dump
                        .get(&ev.alloc)
                        .cloned()
                        .unwrap_or_else(|| list(ev.stack));
                    lists.insert(ev.alloc, l.clone());
                    l
                }
                "free_requested" => {
                    let l = match p.context {
                        Context::Alloc => lists.get(&ev.alloc).cloned(),
                        Context::All | Context::State => None,
                    }
                    .unwrap_or_else(|| list(1 + ev.stack % (STACKS - 1)));
                    if let Some(old) = lists.insert(ev.alloc, l.clone()) {
                        if !old.same_object(&l) {
                            dead.push(old);
                        }
                    }
                    l
                }
                // free_completed: free_requested's list, not needed after it.
                "free_completed" => {
                    let l = lists.remove(&ev.alloc).unwrap_or_else(|| list(ev.stack));
                    dead.push(l.clone());
                    l
                }
                _ => {
                    let l = list(ev.stack);
                    dead.push(l.clone());
                    l
                }
            };
            let (action, empty) = (names.get(ev.action), names.get(""));
            let mut d = |k: &'static str, v: Value| (names.get(k), v);
            let mut items = vec![
                d("action", action),
                d("addr", Value::Int(ev.addr as i64)),
                d("size", Value::Int(SIZE as i64)),
                d("stream", Value::Int(0)),
                d("time_us", Value::Int(time)),
                d("compile_context", Value::str("N/A")),
                d("user_metadata", empty),
            ];
            if p.context != Context::State {
                items.push(d("frames", frames));
            }
            let e = Value::Dict(Rc::new(items));
            *f.actions.entry(ev.action).or_default() += 1;
            f.entries += 1;
            batch.push(e);
            if batch.len() == 1000 {
                err = flush(&mut w, &mut batch, &mut dead, false);
            }
        });
        err?;
        flush(&mut w, &mut batch, &mut dead, true)?;
        if p.devices == 1 {
            w.append()?;
        }
    }
    if p.devices > 1 {
        w.appends()?;
    }
    w.value(&names.get("allocator_settings"))?;
    let settings = Value::Dict(Rc::new(vec![
        (Value::str("PYTORCH_CUDA_ALLOC_CONF"), Value::str("")),
        (Value::str("max_split_size"), Value::Int(-1)),
        (Value::str("expandable_segments"), Value::Bool(false)),
    ]));
    w.value(&settings)?;
    w.value(&names.get("external_annotations"))?;
    w.value(&Value::List(Rc::new(Vec::new())))?;
    w.setitems()?;
    w.stop()?;
    Ok((w.finish()?, figures))
}

/// Issue 33's shape: `segments` segments that all hold the same memoized list of
/// `blocks` blocks (a few hundred KiB of pickle naming millions of blocks).
pub fn shared_blocks(segments: usize, blocks: usize) -> Vec<u8> {
    let k = |s: &str| Value::str(s);
    let list = Value::List(Rc::new(
        (0..blocks)
            .map(|i| {
                Value::Dict(Rc::new(vec![
                    (k("address"), Value::Int((BASE + i as u64 * 512) as i64)),
                    (k("size"), Value::Int(512)),
                    (k("requested_size"), Value::Int(512)),
                    (k("state"), k("active_allocated")),
                ]))
            })
            .collect(),
    ));
    let segs = (0..segments)
        .map(|s| {
            Value::Dict(Rc::new(vec![
                (k("device"), Value::Int(0)),
                (
                    k("address"),
                    Value::Int((BASE + (s * blocks) as u64 * 512) as i64),
                ),
                (k("total_size"), Value::Int(blocks as i64 * 512)),
                (k("allocated_size"), Value::Int(blocks as i64 * 512)),
                (k("active_size"), Value::Int(blocks as i64 * 512)),
                (k("requested_size"), Value::Int(blocks as i64 * 512)),
                (k("stream"), Value::Int(0)),
                (k("segment_type"), k("small")),
                (k("blocks"), list.clone()),
            ]))
        })
        .collect();
    let doc = Value::Dict(Rc::new(vec![
        (k("segments"), Value::List(Rc::new(segs))),
        (
            k("device_traces"),
            Value::List(Rc::new(vec![Value::List(Rc::new(Vec::new()))])),
        ),
    ]));
    let mut w = Writer::new(Vec::new(), 1000);
    // Writing to memory cannot fail.
    let _ = w.write(&doc);
    w.finish().unwrap_or_default()
}
