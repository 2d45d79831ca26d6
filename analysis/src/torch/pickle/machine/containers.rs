//! Containers: which list or dict a new container belongs to (its route), and adding
//! items to a container being built, handing out the elements of streamed lists.

use std::io::Read;

use super::{recycle, seal, seal_build, Build, Item, Machine, Nested};
use crate::torch::pickle::router::{Element, Kind, Route, Streaming};
use crate::torch::pickle::ErrorKind;

impl<R: Read> Machine<'_, R> {
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
    pub(super) fn new_container(
        &mut self,
        kind: Kind,
        items: Vec<Nested>,
    ) -> Result<(), ErrorKind> {
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
            }),
        };
        b.kind = kind;
        b.depth = depth;
        b.route = route;
        b.streaming = streaming;
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

    /// `EMPTY_LIST`. Inside an element of a [`Streaming::Lend`] list, a list of
    /// back-references that its parent takes at once is read whole (see `lists`): what
    /// the opcodes would leave (the list finished on the stack and memoized), with the
    /// same limits checked; otherwise it is built opcode by opcode.
    pub(super) fn new_list(&mut self) -> Result<(), ErrorKind> {
        // Python's batched layout: the streamed list, a mark, its elements (the last one
        // being filled), a mark, that element's items.
        let in_lent = self.marks.len() >= 2 && {
            let m = self.marks[self.marks.len() - 2];
            m > 0 && matches!(&self.stack[m - 1], Item::Build(b) if b.streaming == Streaming::Lend)
        };
        let whole = if in_lent {
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
            let idx = self.get_lists.index(&self.memo);
            self.get_lists.list(&mut self.memo, idx, l.max_nesting)
        } else {
            None
        };
        match found {
            Some((list, depth)) => {
                self.input.skip(len);
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
                let forget = b.streaming == Streaming::Lend;
                for i in items.by_ref() {
                    let index = b.count;
                    b.count += 1;
                    let handed = match i {
                        // An element handed out is not kept for back-references itself
                        // (what it holds stays in the memo); a dict of them is lent to
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
            }
        }
        drop(items);
        self.stack[target] = Item::Build(b);
        self.stack.truncate(target + 1);
        self.trim_positions(target + 1);
        Ok(())
    }

    /// `APPEND` / `SETITEM`: the last `n` items go to the container below them.
    pub(super) fn add_last(&mut self, op: &'static str, n: usize) -> Result<(), ErrorKind> {
        let len = self.stack.len();
        if len < n + 1 + self.floor() {
            return Err(ErrorKind::StackUnderflow { op });
        }
        self.add_items(op, len - n - 1, len - n)
    }

    /// `APPENDS` / `SETITEMS` / `ADDITEMS`: the items above the topmost mark go to the
    /// container below it.
    pub(super) fn add_marked(&mut self, op: &'static str) -> Result<(), ErrorKind> {
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
}
