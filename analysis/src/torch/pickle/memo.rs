//! The pickle memo (what `PUT`/`MEMOIZE` store and `GET` fetches), kept whole and
//! compactly.
//!
//! Python's unpickler keeps every memoized object to the end, and a `GET` may reach back
//! any distance: PyTorch's pickler memoizes `'action'`, `'segment_alloc'` or a frame
//! dict once and fetches it wherever it appears again, and a `free_completed` entry
//! fetches the frame list of the `alloc` entry that made the block, however long ago.
//! So nothing that can be fetched is dropped. What keeps memory at the file's distinct
//! content rather than its length:
//! - an index is a handle into a table of distinct objects, about a byte each in a
//!   trace (see `handles`);
//! - strings, scalars and empty containers are interned (PyTorch writes a new `'N/A'` in every trace
//!   entry: one object here, whatever the number of indices naming it);
//! - a list read again with the same items is one object under one handle (`lists`);
//! - an element of a streamed list is handed out, not kept ([`Memo::gone`]): the one
//!   object a `GET` cannot fetch (PyTorch never refers back to a trace entry), refused
//!   as [`ErrorKind::StreamedBack`](super::ErrorKind::StreamedBack).

use std::rc::Rc;

use foldhash::HashMap as FastMap;

use super::handles::{Handles, EMPTY};
use super::value::Value;

/// A container still being built on the stack (filled when it is finished).
const BUILDING: u32 = u32::MAX - 1;
/// An element of a streamed list, handed out and not kept.
const GONE: u32 = u32::MAX - 2;
/// Handles below this name objects of the table.
const MAX_OBJECTS: u32 = u32::MAX - 3;

/// What a memo index holds.
#[derive(Debug)]
pub enum Slot<'a> {
    /// A finished value and its nesting depth.
    Ready(&'a Value, u16),
    Building,
    /// A streamed element (handed out, not kept).
    Gone,
}

#[derive(Debug, Default)]
pub struct Memo {
    /// The handle of each index, for indices `0..dense.len()` (see `handles`).
    dense: Handles,
    /// Indices put far beyond the dense ones (a `PUT` may name any index).
    sparse: FastMap<u32, u32>,
    /// The distinct objects, by handle, with their nesting depth.
    objects: Vec<(Value, u16)>,
    /// Handles of the interned strings.
    strings: FastMap<Rc<str>, u32>,
    /// Handles of the interned scalars, by kind and bits.
    scalars: FastMap<(u8, u64), u32>,
    /// The next index `MEMOIZE` uses (Python: `len(memo)`).
    next: u32,
    /// Indices stored.
    held: usize,
}

/// Gaps of unused indices a `PUT` may open in the dense part (which stays under twice
/// the indices stored plus this, so `PUT`s far apart cannot make it large).
const MAX_GAP: usize = 1 << 16;

impl Memo {
    /// Indices stored.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Distinct objects held for the indices.
    #[cfg(test)]
    pub fn objects(&self) -> usize {
        self.objects.len()
    }

    pub fn next_index(&self) -> u32 {
        self.next
    }

    fn set(&mut self, idx: u32, handle: u32) {
        let i = idx as usize;
        let len = self.dense.len();
        let old = if i < len {
            self.dense.set(i, handle)
        } else if i - len < MAX_GAP && i < 2 * self.held + MAX_GAP && self.sparse.is_empty() {
            self.dense.grow_to(i, handle);
            EMPTY
        } else {
            self.sparse.insert(idx, handle).unwrap_or(EMPTY)
        };
        if old == EMPTY {
            self.held += 1;
        }
        if idx >= self.next {
            self.next = idx.saturating_add(1);
        }
    }

    /// The handle at `idx`, if stored.
    #[inline(always)]
    pub fn handle(&self, idx: u32) -> Option<u32> {
        let h = match self.dense.get(idx as usize) {
            Some(h) => h,
            None => *self.sparse.get(&idx)?,
        };
        (h != EMPTY).then_some(h)
    }

    /// A new handle for `v` (a string equal to one held gets that one's handle).
    fn add(&mut self, v: Value, depth: u16) -> u32 {
        if let Value::Str(s) = &v {
            if let Some(&h) = self.strings.get(&**s) {
                return h;
            }
        }
        let scalar = match v {
            Value::None => Some((0, 0)),
            Value::Bool(b) => Some((1, u64::from(b))),
            Value::Int(i) => Some((2, i as u64)),
            Value::Float(f) => Some((3, f.to_bits())),
            // Empty containers: finished values never change, so one of each kind.
            Value::Tuple(ref t) if t.is_empty() => Some((4, 0)),
            Value::List(ref l) if l.is_empty() => Some((5, 0)),
            Value::Dict(ref d) if d.is_empty() => Some((6, 0)),
            Value::Set(ref x) if x.is_empty() => Some((7, 0)),
            _ => None,
        };
        if let Some(key) = scalar {
            if let Some(&h) = self.scalars.get(&key) {
                return h;
            }
        }
        let h = self.objects.len() as u32;
        if h >= MAX_OBJECTS {
            // Unreachable within `Limits::max_memo`; never hand out a reserved handle.
            return GONE;
        }
        if let Value::Str(s) = &v {
            self.strings.insert(s.clone(), h);
        }
        if let Some(key) = scalar {
            self.scalars.insert(key, h);
        }
        self.objects.push((v, depth));
        h
    }

    /// Stores the finished value `v` at `idx`; returns its handle.
    pub fn put_value(&mut self, idx: u32, v: Value, depth: u16) -> u32 {
        let h = self.add(v, depth);
        self.set(idx, h);
        h
    }

    /// Stores at `idx` the object another index holds (by its handle).
    pub fn put_handle(&mut self, idx: u32, handle: u32) {
        self.set(idx, handle);
    }

    /// Marks `idx` as a container being built.
    pub fn put_building(&mut self, idx: u32) {
        self.set(idx, BUILDING);
    }

    /// Marks a streamed element's own index as handed out.
    pub fn gone(&mut self, idx: u32) {
        if self.handle(idx).is_some() {
            self.set(idx, GONE);
        }
    }

    /// Fills the indices of a finished container (one object for all of them).
    pub fn fill(&mut self, indices: &[u32], v: &Value, depth: u16) {
        if let Some((&first, rest)) = indices.split_first() {
            let h = self.put_value(first, v.clone(), depth);
            for &i in rest {
                self.set(i, h);
            }
        }
    }

    /// What `idx` holds; `None` when it was never stored.
    pub fn get(&self, idx: u32) -> Option<Slot<'_>> {
        Some(match self.handle(idx)? {
            BUILDING => Slot::Building,
            GONE => Slot::Gone,
            h => {
                let (v, d) = self.objects.get(h as usize)?;
                Slot::Ready(v, *d)
            }
        })
    }

    /// A copy of the finished value `idx` (a reference count, not a deep copy) and its
    /// nesting; `None` when it is not a finished value.
    #[inline(always)]
    pub fn fetch_ready(&self, idx: u32) -> Option<(Value, u16)> {
        let (v, d) = self.objects.get(self.handle(idx)? as usize)?;
        Some((v.clone(), *d))
    }

    /// The object of handle `h` and its nesting.
    pub fn object(&self, h: u32) -> Option<&(Value, u16)> {
        self.objects.get(h as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_stays_fetchable_and_equal_strings_are_one_object() {
        let mut m = Memo::default();
        for i in 0..100_000u32 {
            m.put_value(i, Value::str(if i % 2 == 0 { "N/A" } else { "x" }), 0);
        }
        assert_eq!(m.len(), 100_000);
        assert_eq!(m.objects(), 2);
        m.put_value(200_000, Value::Int(7), 0);
        m.put_value(200_001, Value::Int(7), 0);
        m.put_value(200_002, Value::Float(7.0), 0);
        assert_eq!(m.objects(), 4);
        assert_eq!(m.fetch_ready(0).unwrap().0.as_str(), Some("N/A"));
        assert_eq!(m.fetch_ready(99_999).unwrap().0.as_str(), Some("x"));
        // Far beyond the dense part, and then back in it.
        m.put_value(4_000_000_000, Value::Int(9), 0);
        m.put_value(100_000, Value::Int(8), 0);
        assert_eq!(m.fetch_ready(4_000_000_000).unwrap().0, Value::Int(9));
        assert_eq!(m.fetch_ready(100_000).unwrap().0, Value::Int(8));
        assert!(m.get(100_001).is_none());
        m.put_building(5);
        assert!(matches!(m.get(5), Some(Slot::Building)));
        let l = Value::List(Rc::new(vec![Value::Int(1)]));
        m.fill(&[5, 6], &l, 1);
        assert!(m.fetch_ready(5).unwrap().0.same_object(&l));
        assert_eq!(m.handle(5), m.handle(6));
        m.gone(6);
        assert!(matches!(m.get(6), Some(Slot::Gone)));
        assert!(m.fetch_ready(6).is_none());
    }

    #[test]
    fn puts_far_apart_do_not_grow_the_dense_part() {
        let mut m = Memo::default();
        for k in 0..10_000u32 {
            m.put_value(k * 60_000, Value::Int(1), 0);
        }
        assert_eq!(m.len(), 10_000);
        assert!(m.dense.len() <= 200_000, "{} indices", m.dense.len());
        assert_eq!(m.fetch_ready(9_999 * 60_000).unwrap().0, Value::Int(1));
        assert!(m.get(60_001).is_none());
    }
}
