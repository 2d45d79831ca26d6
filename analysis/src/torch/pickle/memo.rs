//! The pickle memo (what `PUT`/`MEMOIZE` store and `GET` fetches), with forgetting for
//! streamed elements.
//!
//! Python's unpickler keeps every memoized object to the end. Here, the objects
//! memoized inside streamed elements (see `machine::Streaming::Forget`) are dropped once
//! [`Memo::WINDOW`] further batches of elements have been handed out, except strings and
//! dicts and tuples of scalars only (PyTorch's frame dicts and the keys every entry
//! shares, which later elements refer back to). A `GET` of a dropped object gives
//! [`Value::Forgotten`]. So memory follows the distinct strings and frames and a window
//! of elements, not the length of the trace.

use std::collections::VecDeque;

use foldhash::HashMap as FastMap;

use super::value::Value;

/// One memo entry.
#[derive(Debug, Clone)]
pub enum Slot {
    /// A finished value and its nesting depth.
    Ready(Value, u16),
    /// A container still being built on the stack (filled when it is finished).
    Building,
}

#[derive(Debug, Default)]
pub struct Memo {
    slots: FastMap<u32, Slot>,
    /// The next index `MEMOIZE` uses (Python: `len(memo)`).
    next: u32,
    /// Index ranges of handed-out batches, oldest first, waiting to be forgotten.
    pending: VecDeque<(u32, u32)>,
    /// Indices below this may have been forgotten.
    forgotten_below: u32,
    pub forgotten: u64,
}

impl Memo {
    /// How many handed-out batches stay referable before their objects are forgotten
    /// (PyTorch's pickler hands out 1,000 elements per batch, and its back-references
    /// into trace entries reach the previous entry).
    pub const WINDOW: usize = 8;

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn next_index(&self) -> u32 {
        self.next
    }

    pub fn put(&mut self, idx: u32, slot: Slot) {
        if idx >= self.next {
            self.next = idx.saturating_add(1);
        }
        self.slots.insert(idx, slot);
    }

    pub fn get(&self, idx: u32) -> Option<&Slot> {
        self.slots.get(&idx)
    }

    /// Whether a missing index is one that was forgotten (not one never stored).
    pub fn was_forgotten(&self, idx: u32) -> bool {
        idx < self.forgotten_below
    }

    /// Fills the slot of a finished container.
    pub fn fill(&mut self, idx: u32, v: &Value, depth: u16) {
        if let Some(s) = self.slots.get_mut(&idx) {
            *s = Slot::Ready(v.clone(), depth);
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
            for i in a..b {
                if let Some(Slot::Ready(v, _)) = self.slots.get(&i) {
                    if forgettable(v) {
                        self.slots.remove(&i);
                        self.forgotten += 1;
                    }
                }
            }
            self.forgotten_below = self.forgotten_below.max(b);
        }
    }
}

/// What a handed-out batch's memo entries may lose: lists and sets, and dicts and tuples
/// that hold a container (or a forgotten object). Strings and dicts/tuples of scalars
/// stay: later elements share them.
fn forgettable(v: &Value) -> bool {
    match v {
        Value::List(_) | Value::Set(_) => true,
        Value::Dict(_) | Value::Tuple(_) => v.holds_containers(),
        _ => false,
    }
}
