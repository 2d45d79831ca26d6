//! How a [`load`](super::load) caller names places in the document and receives the
//! elements of the lists it streams: [`Router`], its [`Route`]s, the [`Streaming`] of a
//! list, and the [`Element`]s lent to it.

use std::rc::Rc;

use super::value::Value;

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
    /// Handed to [`Router::element`], not kept in the list; the memo keeps them and
    /// what they hold.
    Keep,
    /// Lent to [`Router::element`] and not kept at all: a dict element never becomes a
    /// value. What it holds stays in the memo (a later element may fetch its frame list
    /// or strings); the element itself cannot be fetched again (a `GET` of it is
    /// refused): for long lists whose elements nothing refers back to (a trace).
    Lend,
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
    /// A dict of a [`Streaming::Lend`] list: its items (it is not kept, so it never
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
