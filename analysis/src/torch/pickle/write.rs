//! A pickle writer of plain data that lays objects out as Python's pickler does with
//! protocol 4 (frames, `MEMOIZE` of every str and container, `GET` for an object written
//! before, batches of `MARK … APPENDS/SETITEMS`, single `APPEND`/`SETITEM`).
//!
//! For tests and benchmarks: it rewrites real snapshots (a trace cut as PyTorch's ring
//! buffer cuts it, or repeated to several GB) without Python. Objects are the same
//! object when they are the same `Rc`, as in Python. The low-level calls
//! ([`Writer::empty_list`], [`Writer::mark`], ...) write documents too large to hold.

use std::io::{self, Write};

use foldhash::HashMap as FastMap;

use super::value::Value;

const FRAME_TARGET: usize = 64 << 10;

pub struct Writer<W: Write> {
    out: W,
    frame: Vec<u8>,
    /// Pointer of a memoized object -> (memo index, the object, kept so its address is
    /// not reused).
    memo: FastMap<usize, (u32, Value)>,
    next: u32,
    batch: usize,
    started: bool,
}

fn ptr(v: &Value) -> Option<usize> {
    Some(match v {
        Value::Str(s) => std::rc::Rc::as_ptr(s) as *const u8 as usize,
        Value::Bytes(b) => std::rc::Rc::as_ptr(b) as usize,
        Value::BigInt(b) => std::rc::Rc::as_ptr(b) as usize,
        Value::List(l) | Value::Tuple(l) | Value::Set(l) => std::rc::Rc::as_ptr(l) as usize,
        Value::Dict(d) => std::rc::Rc::as_ptr(d) as usize,
        _ => return None,
    })
}

impl<W: Write> Writer<W> {
    /// A writer that puts `batch` items per `APPENDS`/`SETITEMS` (Python: 1000).
    pub fn new(out: W, batch: usize) -> Self {
        Writer {
            out,
            frame: Vec::with_capacity(FRAME_TARGET * 2),
            memo: FastMap::default(),
            next: 0,
            batch: batch.max(1),
            started: false,
        }
    }

    /// The protocol header, once, outside the frames (as Python writes it).
    fn start(&mut self) -> io::Result<()> {
        if !self.started {
            self.started = true;
            self.out.write_all(&[0x80, 4])?;
        }
        Ok(())
    }

    /// Writes the current frame out once it is large enough (between opcodes).
    fn commit(&mut self, force: bool) -> io::Result<()> {
        if self.frame.len() >= FRAME_TARGET || (force && !self.frame.is_empty()) {
            let body = &self.frame[..];
            if body.len() >= 4 {
                self.out.write_all(&[0x95])?;
                self.out.write_all(&(body.len() as u64).to_le_bytes())?;
            }
            self.out.write_all(body)?;
            self.frame.clear();
        }
        Ok(())
    }

    fn op(&mut self, bytes: &[u8]) {
        self.frame.extend_from_slice(bytes);
    }

    fn memoize(&mut self, v: &Value) {
        if let Some(p) = ptr(v) {
            self.memo.insert(p, (self.next, v.clone()));
            self.next += 1;
            self.op(&[0x94]);
        }
    }

    fn get(&mut self, idx: u32) {
        if idx < 256 {
            self.op(&[b'h', idx as u8]);
        } else {
            let i = idx.to_le_bytes();
            self.op(&[b'j', i[0], i[1], i[2], i[3]]);
        }
    }

    /// Writes one whole document (`PROTO`, the value, `STOP`).
    pub fn write(&mut self, v: &Value) -> io::Result<()> {
        self.value(v)?;
        self.stop()
    }

    /// Writes `STOP` and flushes.
    pub fn stop(&mut self) -> io::Result<()> {
        self.start()?;
        self.op(b".");
        self.commit(true)?;
        self.out.flush()
    }

    /// The output (bytes of the current frame are not in it yet).
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Ends the writer, returning the output.
    pub fn finish(self) -> io::Result<W> {
        Ok(self.out)
    }

    /// `MARK`.
    pub fn mark(&mut self) -> io::Result<()> {
        self.start()?;
        self.op(b"(");
        self.commit(false)
    }

    /// An empty list, memoized, left on the stack to be filled with
    /// [`Writer::appends`] / [`Writer::append`].
    pub fn empty_list(&mut self) -> io::Result<()> {
        self.start()?;
        self.op(b"]");
        self.op(&[0x94]);
        self.next += 1;
        self.commit(false)
    }

    /// An empty dict, memoized, left on the stack.
    pub fn empty_dict(&mut self) -> io::Result<()> {
        self.start()?;
        self.op(b"}");
        self.op(&[0x94]);
        self.next += 1;
        self.commit(false)
    }

    pub fn appends(&mut self) -> io::Result<()> {
        self.op(b"e");
        self.commit(false)
    }

    pub fn append(&mut self) -> io::Result<()> {
        self.op(b"a");
        self.commit(false)
    }

    pub fn setitems(&mut self) -> io::Result<()> {
        self.op(b"u");
        self.commit(false)
    }

    /// Forgets (as a reader does, see `memo`) the memoized lists and sets, and dicts and
    /// tuples holding containers: later writes of them are written anew. Keeps writing
    /// a long document from holding every object it wrote.
    pub fn forget_containers(&mut self) {
        self.memo.retain(|_, (_, v)| match v {
            Value::List(_) | Value::Set(_) => false,
            Value::Dict(_) | Value::Tuple(_) => !v.holds_containers(),
            _ => true,
        });
    }

    /// Forgets one object written before (the writer no longer holds it, and writes it
    /// anew if it comes again): for a writer of long documents that knows an object will
    /// not come again.
    pub fn forget(&mut self, v: &Value) {
        if let Some(p) = ptr(v) {
            self.memo.remove(&p);
        }
    }

    /// Writes a value (a `GET` when the same object was written before).
    pub fn value(&mut self, v: &Value) -> io::Result<()> {
        self.start()?;
        if let Some(p) = ptr(v) {
            if let Some(&(idx, _)) = self.memo.get(&p) {
                self.get(idx);
                return self.commit(false);
            }
        }
        match v {
            Value::None => self.op(b"N"),
            Value::Bool(true) => self.op(&[0x88]),
            Value::Bool(false) => self.op(&[0x89]),
            Value::Int(i) => self.int(*i),
            Value::BigInt(b) => {
                if b.len() < 256 {
                    self.op(&[0x8a, b.len() as u8]);
                } else {
                    let mut h = vec![0x8b];
                    h.extend_from_slice(&(b.len() as u32).to_le_bytes());
                    self.op(&h);
                }
                self.op(b);
            }
            Value::Float(f) => {
                self.op(b"G");
                self.op(&f.to_be_bytes());
            }
            Value::Str(s) => {
                let n = s.len();
                if n < 256 {
                    self.op(&[0x8c, n as u8]);
                } else if n <= u32::MAX as usize {
                    let mut h = vec![b'X'];
                    h.extend_from_slice(&(n as u32).to_le_bytes());
                    self.op(&h);
                } else {
                    let mut h = vec![0x8d];
                    h.extend_from_slice(&(n as u64).to_le_bytes());
                    self.op(&h);
                }
                self.op(s.as_bytes());
                self.memoize(v);
            }
            Value::Bytes(b) => {
                let n = b.len();
                if n < 256 {
                    self.op(&[b'C', n as u8]);
                } else {
                    let mut h = vec![b'B'];
                    h.extend_from_slice(&(n as u32).to_le_bytes());
                    self.op(&h);
                }
                self.op(b);
                self.memoize(v);
            }
            Value::Tuple(items) => {
                if items.is_empty() {
                    self.op(b")");
                    return self.commit(false);
                }
                if items.len() > 3 {
                    self.op(b"(");
                }
                for x in items.iter() {
                    self.value(x)?;
                }
                match items.len() {
                    1 => self.op(&[0x85]),
                    2 => self.op(&[0x86]),
                    3 => self.op(&[0x87]),
                    _ => self.op(b"t"),
                }
                self.memoize(v);
            }
            Value::List(items) | Value::Set(items) => {
                let set = matches!(v, Value::Set(_));
                self.op(if set { &[0x8f] } else { b"]" });
                self.memoize(v);
                for chunk in items.chunks(self.batch) {
                    if chunk.len() == 1 && !set {
                        self.value(&chunk[0])?;
                        self.op(b"a");
                    } else {
                        self.op(b"(");
                        for x in chunk {
                            self.value(x)?;
                        }
                        self.op(if set { &[0x90] } else { b"e" });
                    }
                    self.commit(false)?;
                }
            }
            Value::Dict(items) => {
                self.op(b"}");
                self.memoize(v);
                for chunk in items.chunks(self.batch) {
                    if chunk.len() == 1 {
                        self.value(&chunk[0].0)?;
                        self.value(&chunk[0].1)?;
                        self.op(b"s");
                    } else {
                        self.op(b"(");
                        for (k, x) in chunk {
                            self.value(k)?;
                            self.value(x)?;
                        }
                        self.op(b"u");
                    }
                    self.commit(false)?;
                }
            }
        }
        self.commit(false)
    }

    fn int(&mut self, i: i64) {
        if (0..256).contains(&i) {
            self.op(&[b'K', i as u8]);
        } else if (0..65536).contains(&i) {
            let b = (i as u16).to_le_bytes();
            self.op(&[b'M', b[0], b[1]]);
        } else if i32::try_from(i).is_ok() {
            let b = (i as i32).to_le_bytes();
            self.op(&[b'J', b[0], b[1], b[2], b[3]]);
        } else {
            // LONG1 with the fewest two's complement bytes, as Python's encode_long.
            let bytes = i.to_le_bytes();
            let mut n = 8;
            while n > 1 {
                let top = bytes[n - 1];
                let below_sign = bytes[n - 2] & 0x80;
                if (top == 0 && below_sign == 0) || (top == 0xff && below_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.op(&[0x8a, n as u8]);
            self.op(&bytes[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::pickle::load_plain;
    use std::rc::Rc;

    #[test]
    fn round_trips_and_matches_python_bytes() {
        // pickle.dumps({'a': [1, -2, 300, 70000, 2**40, -2**40, 1.5, None, True]}, 4)
        let v = Value::Dict(Rc::new(vec![(
            Value::str("a"),
            Value::List(Rc::new(vec![
                Value::Int(1),
                Value::Int(-2),
                Value::Int(300),
                Value::Int(70000),
                Value::Int(1 << 40),
                Value::Int(-(1 << 40)),
                Value::Float(1.5),
                Value::None,
                Value::Bool(true),
            ])),
        )]));
        let mut w = Writer::new(Vec::new(), 1000);
        w.write(&v).unwrap();
        let bytes = w.finish().unwrap();
        let python: &[u8] = b"\x80\x04\x956\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffM,\x01J\x70\x11\x01\x00\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x06\x00\x00\x00\x00\x00\xffG?\xf8\x00\x00\x00\x00\x00\x00N\x88es.";
        assert_eq!(bytes, python);
        assert_eq!(load_plain(&bytes[..]).unwrap(), v);
    }
}
