//! Lists of back-references read at once: `EMPTY_LIST MEMOIZE MARK GET… APPENDS` (or,
//! of one item, `EMPTY_LIST MEMOIZE GET APPEND`) closed at once by its parent's
//! `SETITEMS`/`SETITEM`, inside an element of a streamed list —
//! the layout of a PyTorch trace entry's frame list, a list of frame dicts fetched from
//! the memo. Most of them repeat a stack seen before.
//!
//! Such a list is keyed by the objects it holds (their memo handles): a list of the same
//! objects as one made before is that list (the same `Rc`, under the same handle in the
//! memo) — its items are the same objects a new list would hold, and a finished list is
//! never changed. So a repeated stack costs a memo lookup per frame and one hash lookup
//! instead of a new list, the memo holds each distinct stack once however many entries
//! have it, and a reader that caches stacks by the list's identity finds it with one
//! lookup. Anything else — an index not holding a finished object, the bytes not all
//! read ahead yet — is read opcode by opcode as before.

use foldhash::HashMap as FastMap;

use super::memo::Memo;
use super::value::Value;

/// Items of one list read at once (a batch of Python's pickler).
const MAX_ITEMS: usize = 1000;

/// The lists read at once so far, by the handles of their items: each distinct list
/// once (held by the memo anyway, so this costs its key).
#[derive(Default)]
pub struct GetLists {
    lists: FastMap<Box<[u32]>, (u32, u16)>,
    /// The indices of the list being read, and their handles.
    ids: Vec<u32>,
    handles: Vec<u32>,
    /// The memo index a `BINPUT`/`LONG_BINPUT` gives the list (`None`: `MEMOIZE`'s).
    put: Option<u32>,
}

impl GetLists {
    /// Reads the bytes after an `EMPTY_LIST`: `(MEMOIZE|BINPUT|LONG_BINPUT)` then
    /// `MARK (BINGET|LONG_BINGET)… APPENDS`, or for one item (Python's pickler writes a
    /// list of one with `APPEND`) `(BINGET|LONG_BINGET) APPEND`, followed by `SETITEMS`
    /// or `SETITEM`. Returns how many bytes that is (up to the `APPENDS`/`APPEND`,
    /// included) and how many items, or `None` when the bytes are anything else or not
    /// all buffered.
    pub fn parse(&mut self, bytes: &[u8]) -> Option<(usize, usize)> {
        self.ids.clear();
        self.put = None;
        let mut at = match *bytes {
            [0x94, ..] => 1,
            // Protocol 2 (BINPUT / LONG_BINPUT, as PyTorch's C++ pickler writes).
            [b'q', i, ..] => {
                self.put = Some(u32::from(i));
                2
            }
            [b'r', a, b, c, d, ..] => {
                self.put = Some(u32::from_le_bytes([a, b, c, d]));
                5
            }
            _ => return None,
        };
        let closed = |at: usize| matches!(bytes.get(at + 1), Some(b'u' | b's'));
        if *bytes.get(at)? != b'(' {
            // One item: GET, APPEND.
            at += self.get(bytes.get(at..)?)?;
            return (*bytes.get(at)? == b'a' && closed(at)).then_some((at + 1, 1));
        }
        at += 1;
        loop {
            match *bytes.get(at)? {
                b'e' => {
                    return (closed(at) && !self.ids.is_empty())
                        .then_some((at + 1, self.ids.len()));
                }
                _ => at += self.get(bytes.get(at..)?)?,
            }
            if self.ids.len() > MAX_ITEMS {
                return None;
            }
        }
    }

    /// Reads a `BINGET`/`LONG_BINGET` at the start of `bytes` into `ids`; its length.
    fn get(&mut self, bytes: &[u8]) -> Option<usize> {
        match *bytes {
            [b'h', i, ..] => {
                self.ids.push(u32::from(i));
                Some(2)
            }
            [b'j', a, b, c, d, ..] => {
                self.ids.push(u32::from_le_bytes([a, b, c, d]));
                Some(5)
            }
            _ => None,
        }
    }

    /// The memo index the list read by [`GetLists::parse`] is stored at: its `BINPUT`'s,
    /// else the next one (`MEMOIZE`).
    pub fn index(&self, memo: &Memo) -> u32 {
        self.put.unwrap_or_else(|| memo.next_index())
    }

    /// The list of the indices [`GetLists::parse`] read, stored in the memo at `idx`,
    /// and its nesting depth: the one made before of the same objects, else a new one.
    /// `None` when an index does not hold a finished object, or the list would be nested
    /// deeper than `max_nesting` (read those opcode by opcode, which fail where Python's
    /// reading would).
    pub fn list(&mut self, memo: &mut Memo, idx: u32, max_nesting: u16) -> Option<(Value, u16)> {
        self.handles.clear();
        for &i in &self.ids {
            let h = memo.handle(i)?;
            memo.object(h)?;
            self.handles.push(h);
        }
        if let Some(&(h, depth)) = self.lists.get(self.handles.as_slice()) {
            let (list, _) = memo.object(h)?;
            if depth > max_nesting {
                return None;
            }
            let list = list.clone();
            memo.put_handle(idx, h);
            return Some((list, depth));
        }
        let mut items = Vec::with_capacity(self.handles.len());
        let mut deepest = 0;
        for &h in &self.handles {
            let (v, d) = memo.object(h)?;
            deepest = deepest.max(*d);
            items.push(v.clone());
        }
        let depth = deepest.saturating_add(1);
        if depth > max_nesting {
            return None;
        }
        let list = Value::List(std::rc::Rc::new(items));
        let h = memo.put_value(idx, list.clone(), depth);
        self.lists
            .insert(self.handles.as_slice().into(), (h, depth));
        Some((list, depth))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_a_whole_list_of_gets_closed_by_its_parent() {
        let mut g = GetLists::default();
        assert_eq!(g.parse(b"\x94(h\x05j\x00\x01\x00\x00eu"), Some((10, 2)));
        assert_eq!(g.ids, [5, 256]);
        assert_eq!(g.parse(b"\x94(h\x05es"), Some((5, 1)));
        // Protocol 2's puts.
        assert_eq!(g.parse(b"q\x07(h\x05es"), Some((6, 1)));
        assert_eq!(g.put, Some(7));
        assert_eq!(g.parse(b"r\x00\x01\x00\x00(h\x05eu"), Some((9, 1)));
        assert_eq!(g.put, Some(256));
        // Not closed by SETITEMS/SETITEM: more items may follow.
        assert_eq!(g.parse(b"\x94(h\x05e("), None);
        // Not all read ahead.
        assert_eq!(g.parse(b"\x94(h\x05j\x00\x01"), None);
        assert_eq!(g.parse(b"\x94(h\x05e"), None);
        // Anything but GETs, or no items.
        assert_eq!(g.parse(b"\x94(K\x05eu"), None);
        assert_eq!(g.parse(b"\x94(eu"), None);
        assert_eq!(g.parse(b"(h\x05eu"), None);
        // One item, appended alone (Python's pickler: a list of one).
        assert_eq!(g.parse(b"\x94h\x05au"), Some((4, 1)));
        assert_eq!(g.ids, [5]);
        assert_eq!(g.parse(b"q\x07j\x00\x01\x00\x00as"), Some((8, 1)));
        assert_eq!((g.ids.as_slice(), g.put), (&[256][..], Some(7)));
        assert_eq!(g.parse(b"\x94h\x05a("), None);
        assert_eq!(g.parse(b"\x94h\x05a"), None);
        assert_eq!(g.parse(b"\x94h\x05h\x06au"), None);
        assert_eq!(g.parse(b"\x94K\x05au"), None);
    }
}
