//! The pickle memo (what `PUT`/`MEMOIZE` store and `GET` fetches), with forgetting for
//! streamed elements.
//!
//! Python's unpickler keeps every memoized object to the end. Here, once
//! [`Memo::WINDOW`] further batches of streamed elements (see `machine::Streaming::
//! Forget`) have been handed out, the objects memoized inside a batch are dropped,
//! except those that are shared: strings and dicts/tuples of scalars that were fetched
//! again (`GET`) or that something kept still holds (PyTorch's dict keys, frame dicts
//! and their file names). Lists, and containers holding containers (trace entries and
//! their frame lists), always go. A `GET` of a dropped object gives
//! [`Value::Forgotten`]. So memory follows the shared strings and frames and a window of
//! elements, not the length of the trace.
//!
//! Recent entries are in a deque indexed by memo number, older survivors with small
//! numbers in an array (fetches are array lookups), the rest in a hash map.

use std::collections::VecDeque;

use foldhash::HashMap as FastMap;

use super::value::Value;

/// One memo entry.
#[derive(Debug, Clone)]
pub enum Slot {
    /// A finished value, its nesting depth, and whether a `GET` fetched it.
    Ready(Value, u16, bool),
    /// A container still being built on the stack (filled when it is finished).
    Building,
    /// A streamed element: handed out and not kept (a `GET` gives `Forgotten`).
    Gone,
}

#[derive(Debug, Default)]
pub struct Memo {
    /// Entries `base..base + recent.len()`.
    recent: VecDeque<Option<Slot>>,
    base: u32,
    /// Survivors below `base` with small indices (where PyTorch's shared keys and frames
    /// are: fetched all the time), by index.
    dense: Vec<Option<Slot>>,
    /// Other survivors below `base`, and entries put far out of order.
    kept: FastMap<u32, Slot>,
    /// The next index `MEMOIZE` uses (Python: `len(memo)`).
    next: u32,
    /// Entries held.
    held: usize,
    /// Index ranges of handed-out batches, oldest first, waiting to be forgotten.
    pending: VecDeque<(u32, u32)>,
    /// Indices below this may have been forgotten.
    forgotten_below: u32,
    pub forgotten: u64,
}

/// Gaps of unused indices a `PUT` may open in the deque.
const MAX_GAP: u32 = 1 << 16;
/// Survivors with indices below this are kept in an array.
const DENSE: u32 = 1 << 18;

impl Memo {
    /// How many handed-out batches stay referable before their objects are forgotten
    /// (PyTorch's pickler hands out 1,000 elements per batch, and its back-references
    /// into trace entries reach the previous entry).
    pub const WINDOW: usize = 8;

    /// Entries held.
    pub fn len(&self) -> usize {
        self.held
    }

    pub fn next_index(&self) -> u32 {
        self.next
    }

    pub fn put(&mut self, idx: u32, slot: Slot) {
        let end = self.base + self.recent.len() as u32;
        if idx >= self.base && idx < end {
            let s = &mut self.recent[(idx - self.base) as usize];
            if s.is_none() {
                self.held += 1;
            }
            *s = Some(slot);
        } else if idx >= end && idx - end < MAX_GAP {
            while self.base + (self.recent.len() as u32) < idx {
                self.recent.push_back(None);
            }
            self.recent.push_back(Some(slot));
            self.held += 1;
        } else if self.keep(idx, slot) {
            self.held += 1;
        }
        if idx >= self.next {
            self.next = idx.saturating_add(1);
        }
    }

    /// Stores a survivor; true when the index was free.
    fn keep(&mut self, idx: u32, slot: Slot) -> bool {
        if idx < DENSE {
            let i = idx as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, None);
            }
            self.dense[i].replace(slot).is_none()
        } else {
            self.kept.insert(idx, slot).is_none()
        }
    }

    #[inline(always)]
    fn slot_mut(&mut self, idx: u32) -> Option<&mut Slot> {
        if idx >= self.base {
            if let Some(Some(s)) = self.recent.get_mut((idx - self.base) as usize) {
                return Some(s);
            }
        }
        if idx < DENSE {
            return self.dense.get_mut(idx as usize)?.as_mut();
        }
        self.kept.get_mut(&idx)
    }

    /// The entry `idx`, marked as fetched.
    #[inline]
    pub fn fetch(&mut self, idx: u32) -> Option<&Slot> {
        let s = self.slot_mut(idx)?;
        if let Slot::Ready(_, _, fetched) = s {
            *fetched = true;
        }
        Some(s)
    }

    /// A copy of the finished value `idx` (a reference count, not a deep copy) and its
    /// nesting, marked as fetched; `None` when it is not a finished value.
    #[inline(always)]
    pub fn fetch_ready(&mut self, idx: u32) -> Option<(Value, u16)> {
        match self.slot_mut(idx)? {
            Slot::Ready(v, d, fetched) => {
                *fetched = true;
                Some((v.clone(), *d))
            }
            _ => None,
        }
    }

    /// Whether entry `idx` is a finished value that is the very object `like` (the same
    /// `Rc`); marked as fetched when it is, as a `GET` would.
    #[inline]
    pub fn fetch_same(&mut self, idx: u32, like: &Value) -> bool {
        match self.slot_mut(idx) {
            Some(Slot::Ready(v, _, fetched)) if v.same_object(like) => {
                *fetched = true;
                true
            }
            _ => false,
        }
    }

    /// Marks a streamed element's own entry as gone.
    pub fn gone(&mut self, idx: u32) {
        if let Some(s) = self.slot_mut(idx) {
            *s = Slot::Gone;
        }
    }

    /// Whether a missing index is one that was forgotten (not one never stored).
    pub fn was_forgotten(&self, idx: u32) -> bool {
        idx < self.forgotten_below
    }

    /// Fills the slot of a finished container.
    pub fn fill(&mut self, idx: u32, v: &Value, depth: u16) {
        if let Some(s) = self.slot_mut(idx) {
            *s = Slot::Ready(v.clone(), depth, false);
        }
    }

    /// Records that the objects memoized in `[from, to)` belong to a handed-out batch,
    /// and forgets the oldest batch beyond the window.
    pub fn handed_out(&mut self, from: u32, to: u32) {
        if from < to {
            self.pending.push_back((from, to));
        }
        while self.pending.len() > Self::WINDOW {
            let Some((a, b)) = self.pending.pop_front() else {
                break;
            };
            // Entries before the batch belong to no batch: they stay.
            while self.base < a.min(b) && !self.recent.is_empty() {
                if let Some(Some(s)) = self.recent.pop_front() {
                    self.keep(self.base, s);
                }
                self.base += 1;
            }
            while self.base < b && !self.recent.is_empty() {
                match self.recent.pop_front() {
                    Some(Some(s)) if !forgettable(&s) => {
                        self.keep(self.base, s);
                    }
                    Some(Some(_)) => {
                        self.held -= 1;
                        self.forgotten += 1;
                    }
                    _ => {}
                }
                self.base += 1;
            }
            self.forgotten_below = self.forgotten_below.max(b);
        }
    }
}

/// What a handed-out batch's memo entries lose: lists and sets, containers that hold
/// containers, and strings and scalar containers nobody fetched or holds.
fn forgettable(s: &Slot) -> bool {
    let (v, fetched) = match s {
        Slot::Ready(v, _, fetched) => (v, fetched),
        Slot::Gone => return true,
        Slot::Building => return false,
    };
    match v {
        Value::List(_) | Value::Set(_) => true,
        Value::Dict(d) => v.holds_containers() || !(*fetched || std::rc::Rc::strong_count(d) > 1),
        Value::Tuple(t) => v.holds_containers() || !(*fetched || std::rc::Rc::strong_count(t) > 1),
        Value::Str(s) => !(*fetched || std::rc::Rc::strong_count(s) > 1),
        Value::Bytes(b) | Value::BigInt(b) => !(*fetched || std::rc::Rc::strong_count(b) > 1),
        _ => true,
    }
}
