//! The opcode loop: each opcode of plain data run, the memo's `PUT`/`GET`, and every
//! opcode that would import or call refused with what it would have done.

use std::io::Read;
use std::rc::Rc;

use super::{seal, Item, Kind, Machine};
use crate::torch::pickle::memo::Slot;
use crate::torch::pickle::text;
use crate::torch::pickle::value::Value;
use crate::torch::pickle::ErrorKind;

/// Opcode names, for messages.
fn refused(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

/// A short, printable rendering of a name from the pickle.
fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .take(60)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

fn str_value(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => Value::Str(Rc::from(s)),
        Err(_) => Value::Str(Rc::from(String::from_utf8_lossy(bytes).as_ref())),
    }
}

/// Protocol 0-2 strings: text when UTF-8, else bytes.
fn py2_str_value(bytes: Vec<u8>) -> Value {
    match String::from_utf8(bytes) {
        Ok(s) => Value::Str(Rc::from(s.as_str())),
        Err(e) => Value::Bytes(Rc::new(e.into_bytes())),
    }
}

fn int_from_le(bytes: &[u8]) -> Value {
    if bytes.len() <= 8 {
        let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
        let mut buf = if negative { [0xff; 8] } else { [0; 8] };
        buf[..bytes.len()].copy_from_slice(bytes);
        Value::Int(i64::from_le_bytes(buf))
    } else {
        Value::BigInt(Rc::new(bytes.to_vec()))
    }
}

impl<R: Read> Machine<'_, R> {
    fn memo_put(&mut self, idx: u32, op: &'static str) -> Result<(), ErrorKind> {
        if self.memo.len() >= self.limits.max_memo {
            return Err(ErrorKind::MemoFull(self.limits.max_memo));
        }
        if self.stack.len() <= self.floor() {
            return Err(ErrorKind::StackUnderflow { op });
        }
        match self.stack.last_mut() {
            Some(Item::Build(b)) => {
                b.memo.push(idx);
                self.memo.put_building(idx);
            }
            Some(Item::Value(v, d)) => {
                self.memo.put_value(idx, v.clone(), *d);
            }
            _ => return Err(ErrorKind::StackUnderflow { op }),
        }
        Ok(())
    }

    /// `GET`: most of a trace's opcodes (frame dicts and keys fetched again), so the
    /// common case (a finished value, room on the stack) is inlined into the opcode loop
    /// and everything else is out of line.
    #[inline(always)]
    fn memo_get(&mut self, idx: u32) -> Result<(), ErrorKind> {
        if self.stack.len() < self.limits.max_stack {
            if let Some((v, d)) = self.memo.fetch_ready(idx) {
                self.stack.push(Item::Value(v, d));
                return Ok(());
            }
        }
        self.memo_get_other(idx)
    }

    /// `GET` of an object that is not a finished value in the memo, or onto a full
    /// stack.
    #[cold]
    #[inline(never)]
    fn memo_get_other(&mut self, idx: u32) -> Result<(), ErrorKind> {
        let found = match self.memo.get(idx) {
            Some(Slot::Ready(v, d)) => Some((v.clone(), d)),
            Some(Slot::Gone) => return Err(ErrorKind::StreamedBack(idx)),
            Some(Slot::Building) => None,
            None => return Err(ErrorKind::MissingMemo(idx)),
        };
        let (v, d) = match found {
            Some(vd) => vd,
            None => {
                // Fetched while still on the stack: finish it there. If it was in fact
                // still being filled (it contains itself), adding to it later fails as
                // a recursive structure.
                let pos = self
                    .builds
                    .iter()
                    .rev()
                    .copied()
                    .find(|&p| matches!(&self.stack[p], Item::Build(b) if b.memo.contains(&idx)))
                    .ok_or(ErrorKind::Recursive)?;
                self.seal_at(pos);
                match &self.stack[pos] {
                    Item::Value(v, d) => (v.clone(), *d),
                    _ => return Err(ErrorKind::Recursive),
                }
            }
        };
        self.push_nested_value(v, d)
    }

    fn refuse(&mut self, op: u8, name: &'static str) -> ErrorKind {
        let detail = match op {
            // GLOBAL / INST name what they would import.
            b'c' | b'i' => {
                let module = self.input.line(256).unwrap_or_default();
                let attr = self.input.line(256).unwrap_or_default();
                format!(" (imports {}.{})", shown(&module), shown(&attr))
            }
            0x93 => {
                let n = self.stack.len();
                match (n.checked_sub(2).map(|i| &self.stack[i]), self.stack.last()) {
                    (Some(Item::Value(Value::Str(m), _)), Some(Item::Value(Value::Str(a), _))) => {
                        format!(" (imports {}.{})", shown(m.as_bytes()), shown(a.as_bytes()))
                    }
                    _ => String::new(),
                }
            }
            _ => String::new(),
        };
        ErrorKind::Refused { op: name, detail }
    }

    pub(super) fn run(&mut self, at: &mut u64) -> Result<Value, ErrorKind> {
        const MAX_LINE: usize = 64 << 20;
        let max_len = self.limits.max_len;
        loop {
            *at = self.input.offset();
            let Some(op) = self.input.next_byte()? else {
                return Err(ErrorKind::Truncated);
            };
            match op {
                // Framing and protocol.
                0x80 => {
                    let v = self.input.byte()?;
                    if v > 5 {
                        return Err(ErrorKind::Protocol(v));
                    }
                }
                0x95 => {
                    self.input.bytes(8)?;
                }
                b'.' => return Ok(self.pop_value("STOP")?.0),
                // Stack.
                b'(' => self.push(Item::Mark)?,
                b'0' => {
                    // POP: the top item, a mark included (as Python does).
                    let item = self
                        .stack
                        .pop()
                        .ok_or(ErrorKind::StackUnderflow { op: "POP" })?;
                    self.trim_positions(self.stack.len());
                    drop(seal(item, &mut self.memo, &mut self.spare));
                }
                b'1' => {
                    self.pop_mark("POP_MARK")?;
                }
                b'2' => {
                    let (v, d) = self.top_value("DUP")?;
                    self.push_nested_value(v, d)?;
                }
                // Scalars.
                b'N' => self.push_value(Value::None)?,
                0x88 => self.push_value(Value::Bool(true))?,
                0x89 => self.push_value(Value::Bool(false))?,
                b'J' => {
                    let v = i32::from_le_bytes(self.input.array()?);
                    self.push_value(Value::Int(i64::from(v)))?;
                }
                b'K' => {
                    let v = self.input.byte()?;
                    self.push_value(Value::Int(i64::from(v)))?;
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.input.array()?);
                    self.push_value(Value::Int(i64::from(v)))?;
                }
                0x8a => {
                    let n = self.input.byte()?;
                    let v = int_from_le(self.input.bytes(usize::from(n))?);
                    self.push_value(v)?;
                }
                0x8b => {
                    let n = i32::from_le_bytes(self.input.array()?);
                    let n = u64::try_from(n)
                        .map_err(|_| ErrorKind::BadArgument(format!("LONG4 length {n}")))?;
                    let bytes = self.input.vec(n, max_len)?;
                    self.push_value(int_from_le(&bytes))?;
                }
                b'I' | b'L' => {
                    let line = self.input.line(MAX_LINE)?;
                    self.push_value(text::int(&line, op == b'L')?)?;
                }
                b'F' => {
                    let line = self.input.line(256)?;
                    self.push_value(text::float(&line)?)?;
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.input.array()?);
                    self.push_value(Value::Float(v))?;
                }
                // Strings and bytes.
                0x8c => {
                    let n = self.input.byte()?;
                    let v = str_value(self.input.bytes(usize::from(n))?);
                    self.push_value(v)?;
                }
                b'X' => {
                    let n = u32::from_le_bytes(self.input.array()?);
                    let bytes = self.input.vec(u64::from(n), max_len)?;
                    self.push_value(str_value(&bytes))?;
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.input.array()?);
                    let bytes = self.input.vec(n, max_len)?;
                    self.push_value(str_value(&bytes))?;
                }
                b'V' => {
                    let line = self.input.line(MAX_LINE)?;
                    let s = text::raw_unicode_escape(&line)?;
                    self.push_value(Value::Str(Rc::from(s.as_str())))?;
                }
                b'S' => {
                    let line = self.input.line(MAX_LINE)?;
                    self.push_value(py2_str_value(text::quoted(&line)?))?;
                }
                b'T' => {
                    let n = i32::from_le_bytes(self.input.array()?);
                    let n = u64::try_from(n)
                        .map_err(|_| ErrorKind::BadArgument(format!("BINSTRING length {n}")))?;
                    let bytes = self.input.vec(n, max_len)?;
                    self.push_value(py2_str_value(bytes))?;
                }
                b'U' => {
                    let n = self.input.byte()?;
                    let bytes = self.input.bytes(usize::from(n))?.to_vec();
                    self.push_value(py2_str_value(bytes))?;
                }
                b'B' => {
                    let n = u32::from_le_bytes(self.input.array()?);
                    let bytes = self.input.vec(u64::from(n), max_len)?;
                    self.push_value(Value::Bytes(Rc::new(bytes)))?;
                }
                b'C' => {
                    let n = self.input.byte()?;
                    let bytes = self.input.bytes(usize::from(n))?.to_vec();
                    self.push_value(Value::Bytes(Rc::new(bytes)))?;
                }
                0x8e | 0x96 => {
                    let n = u64::from_le_bytes(self.input.array()?);
                    let bytes = self.input.vec(n, max_len)?;
                    self.push_value(Value::Bytes(Rc::new(bytes)))?;
                }
                // Mutable containers.
                b']' => self.new_list()?,
                b'}' => self.new_container(Kind::Dict, Vec::new())?,
                0x8f => self.new_container(Kind::Set, Vec::new())?,
                b'l' => {
                    let vs = self.pop_mark("LIST")?;
                    self.new_container(Kind::List, vs)?;
                }
                b'd' => {
                    let vs = self.pop_mark("DICT")?;
                    self.new_container(Kind::Dict, vs)?;
                }
                b'a' => self.add_last("APPEND", 1)?,
                b'e' => self.add_marked("APPENDS")?,
                b's' => self.add_last("SETITEM", 2)?,
                b'u' => self.add_marked("SETITEMS")?,
                0x90 => self.add_marked("ADDITEMS")?,
                // Immutable containers.
                b')' => self.push_value(Value::Tuple(Rc::new(Vec::new())))?,
                b't' => {
                    let vs = self.pop_mark("TUPLE")?;
                    let v = Value::Tuple(Rc::new(vs.iter().map(|(v, _)| v.clone()).collect()));
                    self.push_nested(v, &vs)?;
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut vs = Vec::with_capacity(n);
                    for _ in 0..n {
                        vs.push(self.pop_value("TUPLE1/2/3")?);
                    }
                    vs.reverse();
                    let v = Value::Tuple(Rc::new(vs.iter().map(|(v, _)| v.clone()).collect()));
                    self.push_nested(v, &vs)?;
                }
                0x91 => {
                    let vs = self.pop_mark("FROZENSET")?;
                    let v = Value::Set(Rc::new(vs.iter().map(|(v, _)| v.clone()).collect()));
                    self.push_nested(v, &vs)?;
                }
                // Memo.
                b'g' => {
                    let line = self.input.line(32)?;
                    self.memo_get(text::index(&line)?)?;
                }
                b'h' => {
                    let i = self.input.byte()?;
                    self.memo_get(u32::from(i))?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(self.input.array()?);
                    self.memo_get(i)?;
                }
                b'p' => {
                    let line = self.input.line(32)?;
                    self.memo_put(text::index(&line)?, "PUT")?;
                }
                b'q' => {
                    let i = self.input.byte()?;
                    self.memo_put(u32::from(i), "BINPUT")?;
                }
                b'r' => {
                    let i = u32::from_le_bytes(self.input.array()?);
                    self.memo_put(i, "LONG_BINPUT")?;
                }
                0x94 => {
                    let i = self.memo.next_index();
                    self.memo_put(i, "MEMOIZE")?;
                }
                _ => {
                    return Err(match refused(op) {
                        Some(name) => self.refuse(op, name),
                        None => ErrorKind::UnknownOpcode(op),
                    })
                }
            }
        }
    }
}
