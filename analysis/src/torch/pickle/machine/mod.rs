//! The pickle machine: runs the opcodes of plain data, refuses the others, and streams
//! the elements of the lists a [`Router`] names.
//!
//! Containers under construction stay mutable on the stack and become shared `Rc`
//! values when they are finished (put into their parent, or fetched from the memo).
//! Which list a new container belongs to is read from the stack the way Python's pickler
//! lays it out (a parent below a `MARK`, or directly below for single `APPEND` /
//! `SETITEM`), and the router confirms the shape; a wrong guess only means a list is
//! kept whole instead of streamed, never different data.
//!
//! Submodules: `containers` (where a new container belongs, and adding items to
//! containers, streamed or kept), `opcodes` (the opcode loop and the memo opcodes),
//! `tests`.

mod containers;
mod opcodes;
#[cfg(test)]
mod tests;

use std::io::Read;
use std::rc::Rc;

use super::input::Input;
use super::lists::GetLists;
use super::memo::Memo;
use super::router::{Kind, NoStreaming, Route, Router, Streaming};
use super::value::Value;
use super::{ErrorKind, PickleError};

/// Bounds that turn hostile input into errors.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Containers being built at once (Python's layout keeps a batch of up to 1,000
    /// siblings open per level).
    pub max_open: usize,
    /// Nesting of finished values (so dropping or rendering one never recurses deeply).
    pub max_nesting: u16,
    /// Items on the stack.
    pub max_stack: usize,
    /// Indices stored in the memo (every one is kept: about a byte each in a trace).
    pub max_memo: usize,
    /// Items of one kept (not streamed) container.
    pub max_items: usize,
    /// Bytes of one str or bytes object.
    pub max_len: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_open: 100_000,
            max_nesting: 200,
            max_stack: 1 << 22,
            max_memo: 1 << 28,
            max_items: 1 << 26,
            max_len: 1 << 30,
        }
    }
}

/// Reads a whole pickle into one value (no streaming), with default limits.
pub fn load_plain<R: Read>(input: R) -> Result<Value, PickleError> {
    load(input, &mut NoStreaming, &Limits::default())
}

/// Reads one pickle from `input` (up to its `STOP`), handing the elements of streaming
/// lists to `router`. Returns the document, in which streamed lists are empty.
pub fn load<R: Read>(
    input: R,
    router: &mut dyn Router,
    limits: &Limits,
) -> Result<Value, PickleError> {
    let mut m = Machine {
        input: Input::new(input),
        stack: Vec::new(),
        marks: Vec::new(),
        builds: Vec::new(),
        memo: Memo::default(),
        router,
        limits,
        spare: Vec::new(),
        get_lists: GetLists::default(),
    };
    let mut at = 0;
    m.run(&mut at)
        .map_err(|kind| PickleError { offset: at, kind })
}

struct Build {
    kind: Kind,
    /// The items of a list or set.
    list: Vec<Value>,
    /// The items of a dict.
    dict: Vec<(Value, Value)>,
    /// Nesting of the finished value: 1 + the deepest item.
    depth: u16,
    /// Memo indices of this container (usually one).
    memo: Vec<u32>,
    route: Route,
    streaming: Streaming,
    /// Elements added so far, streamed ones included.
    count: usize,
}

/// A finished value and its nesting depth (0 for scalars).
type Nested = (Value, u16);

enum Item {
    Mark,
    Value(Value, u16),
    Build(Box<Build>),
}

struct Machine<'a, R> {
    input: Input<R>,
    stack: Vec<Item>,
    /// Stack positions of the marks, in order.
    marks: Vec<usize>,
    /// Stack positions of the containers being built, in order.
    builds: Vec<usize>,
    memo: Memo,
    router: &'a mut dyn Router,
    limits: &'a Limits,
    /// Boxes of finished containers, for the next ones.
    spare: Spare,
    /// Lists of back-references inside streamed elements, read at once.
    get_lists: GetLists,
}

/// Turns a stack item into a finished value: a container being built is finished and
/// the memo entries that name it are filled.
#[inline]
fn seal(item: Item, memo: &mut Memo, spare: &mut Spare) -> Nested {
    match item {
        Item::Value(v, d) => (v, d),
        Item::Mark => (Value::None, 0),
        Item::Build(b) => seal_build(b, memo, spare),
    }
}

/// Boxes of finished containers kept for the next ones (reusing the allocation is the
/// point, hence `Vec<Box<_>>`): enough for a batch of 1,000 streamed elements and what
/// they hold.
#[allow(clippy::vec_box)]
type Spare = Vec<Box<Build>>;

/// How many boxes [`Spare`] keeps.
const SPARE: usize = 4096;
/// The most items a recycled dict keeps room for.
const SPARE_ITEMS: usize = 64;

fn seal_build(mut b: Box<Build>, memo: &mut Memo, spare: &mut Spare) -> Nested {
    let v = match b.kind {
        Kind::Set => Value::Set(Rc::new(std::mem::take(&mut b.list))),
        Kind::List => Value::List(Rc::new(std::mem::take(&mut b.list))),
        Kind::Dict => Value::Dict(Rc::new(std::mem::take(&mut b.dict))),
    };
    memo.fill(&b.memo, &v, b.depth);
    let depth = b.depth;
    recycle(b, spare);
    (v, depth)
}

/// Keeps a finished container's box (and the room of its items, when small) for the
/// next container.
fn recycle(mut b: Box<Build>, spare: &mut Spare) {
    if spare.len() < SPARE {
        b.memo.clear();
        b.list.clear();
        b.dict.clear();
        if b.dict.capacity() > SPARE_ITEMS {
            b.dict = Vec::new();
        }
        if b.list.capacity() > SPARE_ITEMS {
            b.list = Vec::new();
        }
        spare.push(b);
    }
}

impl<R: Read> Machine<'_, R> {
    fn push(&mut self, item: Item) -> Result<(), ErrorKind> {
        if self.stack.len() >= self.limits.max_stack {
            return Err(ErrorKind::StackFull(self.limits.max_stack));
        }
        match &item {
            Item::Mark => self.marks.push(self.stack.len()),
            Item::Build(_) => {
                if self.builds.len() >= self.limits.max_open {
                    return Err(ErrorKind::TooManyOpen(self.limits.max_open));
                }
                self.builds.push(self.stack.len());
            }
            Item::Value(..) => {}
        }
        self.stack.push(item);
        Ok(())
    }

    #[inline]
    fn push_value(&mut self, v: Value) -> Result<(), ErrorKind> {
        self.push_nested_value(v, 0)
    }

    /// Pushes a finished value of nesting `depth` (no mark or build to track).
    #[inline]
    fn push_nested_value(&mut self, v: Value, depth: u16) -> Result<(), ErrorKind> {
        if self.stack.len() >= self.limits.max_stack {
            return Err(ErrorKind::StackFull(self.limits.max_stack));
        }
        self.stack.push(Item::Value(v, depth));
        Ok(())
    }

    /// Pushes a container made from the stack (`TUPLE`, `FROZENSET`): nesting checked.
    fn push_nested(&mut self, v: Value, items: &[Nested]) -> Result<(), ErrorKind> {
        let depth = self.depth_of(items)?;
        self.push_nested_value(v, depth)
    }

    fn depth_of(&self, items: &[Nested]) -> Result<u16, ErrorKind> {
        let depth = items.iter().map(|(_, d)| *d).max().unwrap_or(0) + 1;
        if depth > self.limits.max_nesting {
            return Err(ErrorKind::TooDeep(usize::from(self.limits.max_nesting)));
        }
        Ok(depth)
    }

    /// Forgets the positions of marks and builds at or above `len`.
    fn trim_positions(&mut self, len: usize) {
        while self.marks.last().is_some_and(|&p| p >= len) {
            self.marks.pop();
        }
        while self.builds.last().is_some_and(|&p| p >= len) {
            self.builds.pop();
        }
    }

    fn floor(&self) -> usize {
        self.marks.last().map_or(0, |&m| m + 1)
    }

    /// Pops one value (not past the topmost mark).
    fn pop_value(&mut self, op: &'static str) -> Result<Nested, ErrorKind> {
        if self.stack.len() <= self.floor() {
            return Err(ErrorKind::StackUnderflow { op });
        }
        let item = self.stack.pop().ok_or(ErrorKind::StackUnderflow { op })?;
        self.trim_positions(self.stack.len());
        Ok(seal(item, &mut self.memo, &mut self.spare))
    }

    /// Pops the values above the topmost mark and the mark.
    fn pop_mark(&mut self, op: &'static str) -> Result<Vec<Nested>, ErrorKind> {
        let m = *self.marks.last().ok_or(ErrorKind::NoMark { op })?;
        let items: Vec<Item> = self.stack.drain(m + 1..).collect();
        self.stack.truncate(m);
        self.trim_positions(m);
        Ok(items
            .into_iter()
            .map(|i| seal(i, &mut self.memo, &mut self.spare))
            .collect())
    }

    /// The top item as a finished value (a container being built is finished in place).
    fn top_value(&mut self, op: &'static str) -> Result<Nested, ErrorKind> {
        if self.stack.len() <= self.floor() {
            return Err(ErrorKind::StackUnderflow { op });
        }
        let pos = self.stack.len() - 1;
        self.seal_at(pos);
        match &self.stack[pos] {
            Item::Value(v, d) => Ok((v.clone(), *d)),
            _ => Err(ErrorKind::StackUnderflow { op }),
        }
    }

    /// Finishes the container being built at stack position `pos`, if it is one.
    fn seal_at(&mut self, pos: usize) {
        if !matches!(self.stack[pos], Item::Build(_)) {
            return;
        }
        let item = std::mem::replace(&mut self.stack[pos], Item::Mark);
        let (v, d) = seal(item, &mut self.memo, &mut self.spare);
        self.stack[pos] = Item::Value(v, d);
        if let Some(i) = self.builds.iter().rposition(|&p| p == pos) {
            self.builds.remove(i);
        }
    }
}
