//! The pickle machine: runs the opcodes of plain data, refuses the others, and streams
//! the elements of the lists a [`Router`] names.
//!
//! Containers under construction stay mutable on the stack and become shared `Rc`
//! values when they are finished (put into their parent, or fetched from the memo).
//! Which list a new container belongs to is read from the stack the way Python's pickler
//! lays it out (a parent below a `MARK`, or directly below for single `APPEND` /
//! `SETITEM`), and the router confirms the shape; a wrong guess only means a list is
//! kept whole instead of streamed, never different data.

use std::io::Read;
use std::rc::Rc;

use super::input::Input;
use super::lists::GetLists;
use super::memo::{Memo, Slot};
use super::text;
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
    /// Objects held in the memo.
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
            max_memo: 1 << 23,
            max_items: 1 << 26,
            max_len: 1 << 30,
        }
    }
}

/// A router's name for a place in the document (what it means is the router's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route(pub u32);

impl Route {
    /// Anywhere the router does not care about.
    pub const OTHER: Route = Route(0);
}

/// The kinds of container built in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    List,
    Dict,
    Set,
}

/// What happens to the elements appended to a list on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streaming {
    /// Kept in the list.
    No,
    /// Handed to [`Router::element`], not kept; the memo keeps what they hold.
    Keep,
    /// Handed out, and what they held is forgotten by the memo after a window (see
    /// `memo`): for long lists whose elements later elements do not refer back to.
    Forget,
}

/// Decides which lists stream, and receives their elements.
pub trait Router {
    /// The route of the first container (the document's top).
    fn top(&mut self, kind: Kind) -> Route;
    /// The route of a `kind` container created inside one on `parent`, under dict key
    /// `key` or at list position `index`. `None`: no container of this kind belongs
    /// there (the machine then tries the other reading of the stack).
    fn child(
        &mut self,
        parent: Route,
        key: Option<&Value>,
        index: usize,
        kind: Kind,
    ) -> Option<Route>;
    fn streaming(&self, route: Route) -> Streaming;
    /// One finished element of a streaming list, at `index` of it, lent for the call.
    fn element(&mut self, route: Route, index: usize, element: Element<'_>) -> Result<(), String>;
}

/// A finished element of a streaming list, lent to [`Router::element`].
#[derive(Debug, Clone, Copy)]
pub enum Element<'a> {
    /// A dict of a [`Streaming::Forget`] list: its items (it is not kept, so it never
    /// becomes a [`Value`]: no allocation per element).
    Dict(&'a [(Value, Value)]),
    Value(&'a Value),
}

impl<'a> Element<'a> {
    /// The items of a dict element.
    pub fn dict(self) -> Option<&'a [(Value, Value)]> {
        match self {
            Element::Dict(d) => Some(d),
            Element::Value(v) => v.as_dict(),
        }
    }

    /// The Python type name, for messages.
    pub fn type_name(self) -> &'static str {
        match self {
            Element::Dict(_) => "dict",
            Element::Value(v) => v.type_name(),
        }
    }

    /// The element as a value of its own (a lent dict's items are copied).
    pub fn to_value(self) -> Value {
        match self {
            Element::Dict(d) => Value::Dict(Rc::new(d.to_vec())),
            Element::Value(v) => v.clone(),
        }
    }
}

/// Streams nothing: [`load`] builds the whole document.
pub struct NoStreaming;

impl Router for NoStreaming {
    fn top(&mut self, _: Kind) -> Route {
        Route::OTHER
    }
    fn child(&mut self, _: Route, _: Option<&Value>, _: usize, _: Kind) -> Option<Route> {
        Some(Route::OTHER)
    }
    fn streaming(&self, _: Route) -> Streaming {
        Streaming::No
    }
    fn element(&mut self, _: Route, _: usize, _: Element<'_>) -> Result<(), String> {
        Ok(())
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
    /// The memo's next index when elements were last handed out.
    memo_mark: u32,
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
    for &i in &b.memo {
        memo.fill(i, &v, b.depth);
    }
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

    /// The route of a new container: first the container being built nearest the top
    /// with no mark above it (single `APPEND` / `SETITEM` layout), then the one below the
    /// topmost mark (batched layout).
    fn route_new(&mut self, kind: Kind) -> (Route, Streaming) {
        if self.stack.is_empty() {
            let r = self.router.top(kind);
            return (r, self.router.streaming(r));
        }
        let top_mark = self.marks.last().copied();
        if let Some(&b) = self.builds.last() {
            if top_mark.is_none_or(|m| b > m) {
                if let Some(r) = self.try_parent(b, self.stack.len() - b - 1, kind) {
                    return (r, self.router.streaming(r));
                }
            }
        }
        if let Some(m) = top_mark {
            if m > 0 && matches!(self.stack[m - 1], Item::Build(_)) {
                if let Some(r) = self.try_parent(m - 1, self.stack.len() - m - 1, kind) {
                    return (r, self.router.streaming(r));
                }
            }
        }
        (Route::OTHER, Streaming::No)
    }

    fn try_parent(&mut self, pos: usize, pending: usize, kind: Kind) -> Option<Route> {
        let Machine { stack, router, .. } = self;
        let Item::Build(b) = &stack[pos] else {
            return None;
        };
        match b.kind {
            Kind::Dict => {
                if pending.is_multiple_of(2) {
                    return None;
                }
                let key = match stack.last() {
                    Some(Item::Value(v, _)) => v,
                    _ => return None,
                };
                router.child(b.route, Some(key), b.count + pending / 2, kind)
            }
            Kind::List | Kind::Set => router.child(b.route, None, b.count + pending, kind),
        }
    }

    /// Pushes a new mutable container (`EMPTY_*`, or protocol 0's `LIST`/`DICT` with its
    /// first items).
    fn new_container(&mut self, kind: Kind, items: Vec<Nested>) -> Result<(), ErrorKind> {
        let (route, streaming) = self.route_new(kind);
        self.new_routed(kind, items, route, streaming)
    }

    /// [`Machine::new_container`] with its route.
    fn new_routed(
        &mut self,
        kind: Kind,
        items: Vec<Nested>,
        route: Route,
        streaming: Streaming,
    ) -> Result<(), ErrorKind> {
        let depth = self.depth_of(&items)?;
        let mut b = match self.spare.pop() {
            Some(b) => b,
            None => Box::new(Build {
                kind,
                list: Vec::new(),
                dict: Vec::new(),
                depth,
                memo: Vec::new(),
                route,
                streaming,
                count: 0,
                memo_mark: 0,
            }),
        };
        b.kind = kind;
        b.depth = depth;
        b.route = route;
        b.streaming = streaming;
        b.memo_mark = self.memo.next_index();
        match kind {
            Kind::Dict => {
                if !items.len().is_multiple_of(2) {
                    return Err(ErrorKind::OddPairs { op: "DICT" });
                }
                let mut it = items.into_iter();
                while let (Some((k, _)), Some((v, _))) = (it.next(), it.next()) {
                    b.dict.push((k, v));
                }
                b.count = b.dict.len();
            }
            Kind::List | Kind::Set => {
                b.list.extend(items.into_iter().map(|(v, _)| v));
                b.count = b.list.len();
            }
        }
        self.push(Item::Build(b))
    }

    /// `EMPTY_LIST`. Inside an element of a [`Streaming::Forget`] list, a list of
    /// back-references that its parent takes at once is read whole (see `lists`): what
    /// the opcodes would leave (the list finished on the stack and memoized), with the
    /// same limits checked; otherwise it is built opcode by opcode.
    fn new_list(&mut self) -> Result<(), ErrorKind> {
        // Python's batched layout: the streamed list, a mark, its elements (the last one
        // being filled), a mark, that element's items.
        let in_forgotten = self.marks.len() >= 2 && {
            let m = self.marks[self.marks.len() - 2];
            m > 0
                && matches!(&self.stack[m - 1], Item::Build(b) if b.streaming == Streaming::Forget)
        };
        let whole = if in_forgotten {
            self.get_lists.parse(self.input.buffered())
        } else {
            None
        };
        let (route, streaming) = self.route_new(Kind::List);
        let Some((len, n)) = whole else {
            return self.new_routed(Kind::List, Vec::new(), route, streaming);
        };
        let l = self.limits;
        // Where an opcode would fail (a build and a mark then n items on the stack, one
        // memo entry, n items of nesting below the limit), read the opcodes and fail there.
        let fits = streaming == Streaming::No
            && self.builds.len() < l.max_open
            && self.stack.len() + n + 2 <= l.max_stack
            && self.memo.len() < l.max_memo
            && n <= l.max_items;
        let found = if fits {
            self.get_lists.list(&mut self.memo)
        } else {
            None
        };
        match found {
            Some((list, depth)) if depth <= l.max_nesting => {
                self.input.skip(len);
                let idx = self.memo.next_index();
                self.memo.put(idx, Slot::Ready(list.clone(), depth, false));
                self.push_nested_value(list, depth)
            }
            _ => self.new_routed(Kind::List, Vec::new(), route, streaming),
        }
    }

    /// Adds the items `stack[first..]` to the container being built at `stack[target]`
    /// (the mark between them, if any, goes too), streaming them when its route says so.
    fn add_items(
        &mut self,
        op: &'static str,
        target: usize,
        first: usize,
    ) -> Result<(), ErrorKind> {
        let expected = match op {
            "SETITEM" | "SETITEMS" => "dict",
            "ADDITEMS" => "set",
            _ => "list",
        };
        match &self.stack[target] {
            Item::Build(b) => {
                let kind_name = match b.kind {
                    Kind::Dict => "dict",
                    Kind::List => "list",
                    Kind::Set => "set",
                };
                if kind_name != expected {
                    return Err(ErrorKind::WrongTarget {
                        op,
                        expected,
                        found: kind_name,
                    });
                }
            }
            Item::Value(v, _) if v.is_container() => {
                // A finished container is changed only by a recursive structure.
                return Err(ErrorKind::Recursive);
            }
            Item::Value(v, _) => {
                return Err(ErrorKind::WrongTarget {
                    op,
                    expected,
                    found: v.type_name(),
                })
            }
            Item::Mark => return Err(ErrorKind::StackUnderflow { op }),
        }
        // The target leaves the stack while its items are moved into it (its place
        // holds a mark meanwhile); on an error the whole load fails.
        let Item::Build(mut b) = std::mem::replace(&mut self.stack[target], Item::Mark) else {
            return Err(ErrorKind::StackUnderflow { op });
        };
        let n = self.stack.len() - first;
        let max_nesting = self.limits.max_nesting;
        let max_items = self.limits.max_items;
        let too_deep = ErrorKind::TooDeep(usize::from(max_nesting));
        let Machine {
            stack,
            memo,
            router,
            spare,
            ..
        } = self;
        let mut items = stack.drain(first..);
        match b.kind {
            Kind::Dict => {
                if !n.is_multiple_of(2) {
                    return Err(ErrorKind::OddPairs { op });
                }
                if b.dict.len() + n / 2 > max_items {
                    return Err(ErrorKind::ContainerFull(max_items));
                }
                b.dict.reserve_exact(n / 2);
                // The nesting is checked once for the batch: any error ends the load,
                // so which item is found too deep first makes no difference.
                let mut deepest = 0;
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    let (k, dk) = seal(k, memo, spare);
                    let (v, dv) = seal(v, memo, spare);
                    deepest = deepest.max(dk).max(dv);
                    b.dict.push((k, v));
                }
                if n > 0 {
                    if deepest >= max_nesting {
                        return Err(too_deep);
                    }
                    b.depth = b.depth.max(deepest + 1);
                }
                b.count += n / 2;
            }
            Kind::List | Kind::Set if b.streaming == Streaming::No => {
                if b.list.len() + n > max_items {
                    return Err(ErrorKind::ContainerFull(max_items));
                }
                b.list.reserve_exact(n);
                let mut deepest = 0;
                for i in items.by_ref() {
                    let (v, d) = seal(i, memo, spare);
                    deepest = deepest.max(d);
                    b.list.push(v);
                }
                if n > 0 {
                    if deepest >= max_nesting {
                        return Err(too_deep);
                    }
                    b.depth = b.depth.max(deepest + 1);
                }
                b.count += n;
            }
            Kind::List | Kind::Set => {
                let forget = b.streaming == Streaming::Forget;
                for i in items.by_ref() {
                    let index = b.count;
                    b.count += 1;
                    let handed = match i {
                        // An element handed out is not kept for back-references itself
                        // (what it holds follows the window); a dict of them is lent to
                        // the router as its items, never made a value.
                        Item::Build(mut e) if forget => {
                            for idx in e.memo.drain(..) {
                                memo.gone(idx);
                            }
                            if e.kind == Kind::Dict {
                                let r = router.element(b.route, index, Element::Dict(&e.dict));
                                recycle(e, spare);
                                r
                            } else {
                                let (v, _) = seal_build(e, memo, spare);
                                router.element(b.route, index, Element::Value(&v))
                            }
                        }
                        i => {
                            let (v, _) = seal(i, memo, spare);
                            router.element(b.route, index, Element::Value(&v))
                        }
                    };
                    handed.map_err(ErrorKind::Rejected)?;
                }
                if forget {
                    let now = memo.next_index();
                    memo.handed_out(b.memo_mark, now);
                    b.memo_mark = now;
                }
            }
        }
        drop(items);
        self.stack[target] = Item::Build(b);
        self.stack.truncate(target + 1);
        self.trim_positions(target + 1);
        Ok(())
    }

    /// `APPEND` / `SETITEM`: the last `n` items go to the container below them.
    fn add_last(&mut self, op: &'static str, n: usize) -> Result<(), ErrorKind> {
        let len = self.stack.len();
        if len < n + 1 + self.floor() {
            return Err(ErrorKind::StackUnderflow { op });
        }
        self.add_items(op, len - n - 1, len - n)
    }

    /// `APPENDS` / `SETITEMS` / `ADDITEMS`: the items above the topmost mark go to the
    /// container below it.
    fn add_marked(&mut self, op: &'static str) -> Result<(), ErrorKind> {
        let m = *self.marks.last().ok_or(ErrorKind::NoMark { op })?;
        let floor = self
            .marks
            .len()
            .checked_sub(2)
            .map_or(0, |i| self.marks[i] + 1);
        if m == 0 || m - 1 < floor {
            return Err(ErrorKind::StackUnderflow { op });
        }
        self.add_items(op, m - 1, m + 1)
    }

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
                self.memo.put(idx, Slot::Building);
            }
            Some(Item::Value(v, d)) => {
                let slot = Slot::Ready(v.clone(), *d, false);
                self.memo.put(idx, slot);
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
        let forgotten = self.memo.was_forgotten(idx);
        let found = match self.memo.fetch(idx) {
            Some(Slot::Ready(v, d, _)) => Some((v.clone(), *d)),
            Some(Slot::Gone) => Some((Value::Forgotten, 0)),
            Some(Slot::Building) => None,
            None if forgotten => Some((Value::Forgotten, 0)),
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

    fn run(&mut self, at: &mut u64) -> Result<Value, ErrorKind> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torch::pickle::write::Writer;

    fn load_bytes(b: &[u8]) -> Result<Value, PickleError> {
        load_plain(b)
    }

    fn err_kind(b: &[u8]) -> ErrorKind {
        load_bytes(b).unwrap_err().kind
    }

    #[test]
    fn protocol_0_text_opcodes() {
        // pickle.dumps({'a': [1, 2.5, 'x', None, True]}, protocol=0)
        let p = b"(dp0\nVa\np1\n(lp2\nI1\naF2.5\naVx\np3\naNaI01\nas.";
        let v = load_bytes(p).unwrap();
        let list = v.get("a").unwrap().as_seq().unwrap();
        assert_eq!(list[0], Value::Int(1));
        assert_eq!(list[1], Value::Float(2.5));
        assert_eq!(list[2].as_str(), Some("x"));
        assert_eq!(list[3], Value::None);
        assert_eq!(list[4], Value::Bool(true));
    }

    #[test]
    fn shared_objects_stay_shared() {
        // x = {'k': 1}; pickle.dumps([x, x], protocol=4)
        let p =
            b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94\x8c\x01k\x94K\x01sh\x01e.";
        let v = load_bytes(p).unwrap();
        let l = v.as_seq().unwrap();
        let (Value::Dict(a), Value::Dict(b)) = (&l[0], &l[1]) else {
            panic!("{v:?}")
        };
        assert!(Rc::ptr_eq(a, b));
    }

    #[test]
    fn a_finished_sibling_can_be_fetched_while_still_on_the_stack() {
        // x = {}; pickle.dumps([x, [x]], 4)
        let p = b"\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94]\x94h\x01ae.";
        let v = load_bytes(p).unwrap();
        let l = v.as_seq().unwrap();
        let (Value::Dict(a), Value::List(inner)) = (&l[0], &l[1]) else {
            panic!("{v:?}")
        };
        let Value::Dict(b) = &inner[0] else { panic!() };
        assert!(Rc::ptr_eq(a, b));
    }

    #[test]
    fn code_is_refused_with_its_offset() {
        // pickle.dumps of a class whose __reduce__ returns (os.system, ('echo hi',)),
        // protocol 0 and protocol 4.
        let p0 = b"cposix\nsystem\np0\n(Vecho hi\np1\ntp2\nRp3\n.";
        let e = load_bytes(p0).unwrap_err();
        assert_eq!(e.offset, 0);
        assert!(
            e.to_string().contains("GLOBAL (imports posix.system)"),
            "{e}"
        );
        let p4 = b"\x80\x04\x95\x22\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\x07echo hi\x94\x85\x94R\x94.";
        let e = load_bytes(p4).unwrap_err();
        assert_eq!(e.offset, 28);
        assert!(
            e.to_string()
                .contains("STACK_GLOBAL (imports posix.system)"),
            "{e}"
        );
        for op in [b'R', b'b', b'o', 0x81, 0x92, 0x82, b'Q', 0x97] {
            assert!(
                matches!(err_kind(&[b'N', op]), ErrorKind::Refused { .. }),
                "{op}"
            );
        }
    }

    #[test]
    fn hostile_shapes_are_errors() {
        assert_eq!(err_kind(b"\x80\x04"), ErrorKind::Truncated);
        assert_eq!(err_kind(b"]"), ErrorKind::Truncated);
        // BINUNICODE8 declaring 2^60 bytes.
        let mut huge = b"\x80\x04\x8d".to_vec();
        huge.extend_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(matches!(err_kind(&huge), ErrorKind::TooLong { .. }));
        // BINUNICODE declaring more than the file holds.
        assert_eq!(err_kind(b"X\xff\xff\xff\x00abc"), ErrorKind::Truncated);
        let open = vec![b']'; 200_000];
        assert_eq!(err_kind(&open), ErrorKind::TooManyOpen(100_000));
        // [[[...]]] 300 deep, each list finished and fetched back from the memo.
        let mut deep = b"]\x94".to_vec();
        for i in 0..300u32 {
            deep.extend_from_slice(b"0]j");
            deep.extend_from_slice(&i.to_le_bytes());
            deep.extend_from_slice(b"a\x94");
        }
        deep.push(b'.');
        assert_eq!(err_kind(&deep), ErrorKind::TooDeep(200));
        let marks = vec![b'('; 5_000_000];
        assert!(matches!(err_kind(&marks), ErrorKind::StackFull(_)));
        assert_eq!(err_kind(b"h\x05."), ErrorKind::MissingMemo(5));
        assert!(matches!(err_kind(b"Ne."), ErrorKind::NoMark { .. }));
        assert!(matches!(err_kind(b"Na."), ErrorKind::StackUnderflow { .. }));
        assert!(matches!(err_kind(b"NNa."), ErrorKind::WrongTarget { .. }));
        assert_eq!(err_kind(b"\xff"), ErrorKind::UnknownOpcode(0xff));
        assert_eq!(err_kind(b"\x80\x09"), ErrorKind::Protocol(9));
        // l = []; l.append(l)
        assert_eq!(err_kind(b"]\x94h\x00a."), ErrorKind::Recursive);
        assert!(matches!(err_kind(b"(K\x01d."), ErrorKind::OddPairs { .. }));
    }

    /// Routes: the top dict's `xs` list streams; its elements are dicts.
    struct Xs {
        got: Vec<(usize, Value)>,
        forget: bool,
    }

    impl Router for Xs {
        fn top(&mut self, _: Kind) -> Route {
            Route(1)
        }
        fn child(
            &mut self,
            parent: Route,
            key: Option<&Value>,
            _: usize,
            kind: Kind,
        ) -> Option<Route> {
            match (parent, key.and_then(Value::as_str), kind) {
                (Route(1), Some("xs"), Kind::List) => Some(Route(2)),
                (Route(2), _, Kind::Dict) => Some(Route::OTHER),
                (Route(2), _, _) => None,
                _ => Some(Route::OTHER),
            }
        }
        fn streaming(&self, r: Route) -> Streaming {
            match (r, self.forget) {
                (Route(2), true) => Streaming::Forget,
                (Route(2), false) => Streaming::Keep,
                _ => Streaming::No,
            }
        }
        fn element(&mut self, _: Route, index: usize, value: Element<'_>) -> Result<(), String> {
            self.got.push((index, value.to_value()));
            Ok(())
        }
    }

    fn doc(n: usize, batch: usize) -> Vec<u8> {
        // {'a': 1, 'xs': [{'i': i, 'tag': <shared list>} ...], 'z': 'end'} as Python
        // lays it out, with batches of `batch`.
        let mut w = Writer::new(Vec::new(), batch);
        let shared = Value::List(Rc::new(vec![Value::str("s")]));
        let xs: Vec<Value> = (0..n)
            .map(|i| {
                Value::Dict(Rc::new(vec![
                    (Value::str("i"), Value::Int(i as i64)),
                    (Value::str("tag"), shared.clone()),
                ]))
            })
            .collect();
        let top = Value::Dict(Rc::new(vec![
            (Value::str("a"), Value::Int(1)),
            (Value::str("xs"), Value::List(Rc::new(xs))),
            (Value::str("z"), Value::str("end")),
        ]));
        w.write(&top).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn streamed_elements_arrive_in_order_and_leave_the_document() {
        for (n, batch) in [(0, 1000), (1, 1000), (2, 3), (2_500, 1000), (30, 7)] {
            for forget in [false, true] {
                let bytes = doc(n, batch);
                let whole = load_plain(&bytes[..]).unwrap();
                let mut r = Xs {
                    got: Vec::new(),
                    forget,
                };
                let top = load(&bytes[..], &mut r, &Limits::default()).unwrap();
                assert_eq!(r.got.len(), n, "n={n} batch={batch}");
                let expected = whole.get("xs").unwrap().as_seq().unwrap();
                for (i, (idx, v)) in r.got.iter().enumerate() {
                    assert_eq!(*idx, i);
                    // The shared list is referred back to from far away: forgotten after
                    // the window when forgetting, intact otherwise.
                    let tag = v.get("tag").unwrap();
                    if *tag != Value::Forgotten {
                        assert_eq!(v, &expected[i]);
                    } else {
                        assert!(forget && i >= Memo::WINDOW * batch, "{i}");
                    }
                }
                assert_eq!(top.get("xs").unwrap().as_seq().unwrap().len(), 0);
                assert_eq!(top.get("z").unwrap().as_str(), Some("end"));
            }
        }
    }

    #[test]
    fn repeated_lists_of_back_references_are_shared_only_while_the_memo_agrees() {
        // {'xs': [e0, e1, e2, e3, e4]}, xs streamed: e0 = {'f': [F1, F2]} (frame dicts
        // made there), e1 and e2 = {'f': [GET F1, GET F2]} (a new list each, as Python
        // writes them), e3 = {'g': F1', 'f': [GET 6, GET 8]} where F1' = {'n': 9} is put
        // at F1's memo index, e4 = {'f': [GET 6, GET 8]}.
        let bytes: &[u8] = b"\x80\x04}q\x00(\x8c\x02xsq\x01]q\x02(\
            }q\x03(\x8c\x01fq\x04]\x94(}q\x06(\x8c\x01nq\x07K\x01u}q\x08(h\x07K\x02ueu\
            }q\x09(h\x04]\x94(h\x06h\x08eu\
            }q\x0b(h\x04]\x94(h\x06h\x08eu\
            }q\x0d(\x8c\x01gq\x0e}q\x06(h\x07K\x09uh\x04]\x94(h\x06h\x08eu\
            }q\x10(h\x04]\x94(h\x06h\x08eu\
            eu.";
        let whole = load_plain(bytes).unwrap();
        let expected = whole.get("xs").unwrap().as_seq().unwrap();
        let n = |v: &Value, i: usize| v.get("f").unwrap().as_seq().unwrap()[i].get("n").cloned();
        assert_eq!(n(&expected[3], 0), Some(Value::Int(9)));
        assert_eq!(n(&expected[4], 1), Some(Value::Int(2)));
        for forget in [false, true] {
            let mut r = Xs {
                got: Vec::new(),
                forget,
            };
            load(bytes, &mut r, &Limits::default()).unwrap();
            let got: Vec<Value> = r.got.into_iter().map(|(_, v)| v).collect();
            assert_eq!(got, expected);
            let list = |i: usize| match got[i].get("f") {
                Some(Value::List(l)) => l.clone(),
                other => panic!("{other:?}"),
            };
            // Read whole only inside forgotten elements: e2 repeats e1's list there.
            assert_eq!(Rc::ptr_eq(&list(1), &list(2)), forget);
            assert!(!Rc::ptr_eq(&list(1), &list(4)));
            assert!(!Rc::ptr_eq(&list(3), &list(4)));
        }
    }
}
