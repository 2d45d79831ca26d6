//! Stack frames, interned: every distinct frame and every distinct stack (list of
//! frames, innermost first) is stored once and named by a number, so a trace of millions
//! of entries costs four bytes of stack each.
//!
//! A stack's *site* is its innermost Python frame outside PyTorch (`train.py:42 in
//! step`): what reports group bytes by. Stacks without a Python frame (autograd's
//! backward threads) take the backward node (`PowBackward0 (autograd)`), else the ATen
//! operator (`aten mul_Tensor`).

use foldhash::HashMap as FastMap;
use serde::Serialize;

use super::pickle::Value;

/// What bytes are grouped under when their stack has no site (no frames recorded, or
/// none a site can be).
pub const UNKNOWN_SITE: &str = "unknown";

/// A stack's number in its [`StackTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(pub u32);

impl StackId {
    /// No frames recorded (empty list, or no `frames` key).
    pub const NONE: StackId = StackId(u32::MAX);
    pub fn is_known(self) -> bool {
        self != StackId::NONE
    }
}

/// One frame: a Python line or a C++ function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Frame {
    pub name: String,
    pub filename: String,
    pub line: i64,
}

impl Frame {
    pub fn is_python(&self) -> bool {
        self.filename.ends_with(".py")
    }

    /// Whether this is the user's own Python code: a Python frame outside the `torch`
    /// package and outside Python's standard library (`…/lib/python3.12/contextlib.py`;
    /// installed packages other than torch, under `site-packages`, count as the user's).
    /// C++ frames (`c10::…`, `at::…`, `??`) are never the user's.
    pub fn is_user(&self) -> bool {
        self.is_python() && !self.filename.contains("/torch/") && !is_stdlib(&self.filename)
    }

    /// `file.py:42 in name` (Python) or the function name (C++).
    pub fn label(&self) -> String {
        if self.is_python() {
            let file = self.filename.rsplit('/').next().unwrap_or(&self.filename);
            format!("{file}:{} in {}", self.line, self.name)
        } else {
            self.name.clone()
        }
    }

    /// The label of a frame chosen as a site: short forms for the backward node and the
    /// ATen operator frames that stand for stacks without Python.
    pub fn site_label(&self) -> String {
        if let Some(node) = backward_node(&self.name) {
            return format!("{node} (autograd)");
        }
        if let Some(op) = aten_op(&self.name) {
            return format!("aten {op}");
        }
        self.label()
    }
}

/// Caches keyed by object identity hold the object, so its address is not reused while
/// cached; they are cleared when this large. The reader gives a repeated stack's frame
/// list one object across the whole trace (`pickle::lists`), and frame dicts are shared
/// across it too.
const LIST_CACHE_MAX: usize = 1 << 12;
/// Stacks by the identities of their frame dicts: a new frame list (one per `alloc`)
/// whose frames were all seen in that order costs one lookup, not one per frame.
const SEQUENCE_CACHE_MAX: usize = 1 << 12;
const FRAME_CACHE_MAX: usize = 1 << 16;
/// Distinct texts kept (`compile_context`, `user_metadata`); later ones share one id.
const TEXTS_MAX: usize = 1 << 20;

#[derive(Debug, Default)]
pub struct StackTable {
    frames: Vec<Frame>,
    frame_ids: FastMap<Frame, u32>,
    stacks: Vec<Box<[u32]>>,
    stack_ids: FastMap<Box<[u32]>, u32>,
    /// Per stack: the frame id of its site.
    sites: Vec<Option<u32>>,
    list_cache: FastMap<usize, (Value, StackId)>,
    /// Keyed by the frame dicts' identities; the value holds the list, so they live.
    sequence_cache: FastMap<Box<[usize]>, (Value, StackId)>,
    frame_cache: FastMap<usize, (Value, u32)>,
    sequence: Vec<usize>,
    texts: Vec<String>,
    text_ids: FastMap<String, u32>,
    scratch: Vec<u32>,
}

fn identity(v: &Value) -> Option<usize> {
    match v {
        Value::List(l) | Value::Tuple(l) => Some(std::rc::Rc::as_ptr(l) as usize),
        Value::Dict(d) => Some(std::rc::Rc::as_ptr(d) as usize),
        _ => None,
    }
}

impl StackTable {
    /// The stack of a `frames` value (a list of `{name, filename, line}` dicts).
    pub fn intern(&mut self, frames: &Value) -> Result<StackId, String> {
        let items = match frames {
            Value::None => return Ok(StackId::NONE),
            Value::List(l) | Value::Tuple(l) if l.is_empty() => return Ok(StackId::NONE),
            Value::List(l) | Value::Tuple(l) => l,
            other => return Err(format!("frames is a {}, not a list", other.type_name())),
        };
        let key = identity(frames);
        if let Some(k) = key {
            if let Some((_, id)) = self.list_cache.get(&k) {
                return Ok(*id);
            }
        }
        let mut sequence = std::mem::take(&mut self.sequence);
        sequence.clear();
        sequence.reserve(items.len());
        let mut by_sequence = true;
        for f in items.iter() {
            match identity(f) {
                Some(id) => sequence.push(id),
                None => {
                    by_sequence = false;
                    break;
                }
            }
        }
        if by_sequence {
            if let Some(&(_, id)) = self.sequence_cache.get(sequence.as_slice()) {
                self.sequence = sequence;
                self.remember_list(key, frames, id);
                return Ok(id);
            }
        }
        let id = self.intern_frames(items)?;
        if by_sequence {
            if self.sequence_cache.len() >= SEQUENCE_CACHE_MAX {
                self.sequence_cache.clear();
            }
            self.sequence_cache
                .insert(sequence.as_slice().into(), (frames.clone(), id));
        }
        self.sequence = sequence;
        self.remember_list(key, frames, id);
        Ok(id)
    }

    /// Caches the stack of a frame list by the list's identity.
    fn remember_list(&mut self, key: Option<usize>, frames: &Value, id: StackId) {
        if let Some(k) = key {
            if self.list_cache.len() >= LIST_CACHE_MAX {
                self.list_cache.clear();
            }
            self.list_cache.insert(k, (frames.clone(), id));
        }
    }

    /// The stack of a list of frames, frame by frame.
    fn intern_frames(&mut self, items: &[Value]) -> Result<StackId, String> {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        for f in items.iter() {
            match self.frame(f) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    self.scratch = ids;
                    return Err(e);
                }
            }
        }
        let id = match self.stack_ids.get(ids.as_slice()) {
            Some(&id) => StackId(id),
            None => {
                let id = self.stacks.len() as u32;
                let boxed: Box<[u32]> = ids.as_slice().into();
                self.sites.push(site_of(&self.frames, &boxed));
                self.stacks.push(boxed.clone());
                self.stack_ids.insert(boxed, id);
                StackId(id)
            }
        };
        self.scratch = ids;
        Ok(id)
    }

    fn frame(&mut self, f: &Value) -> Result<u32, String> {
        let key = identity(f);
        if let Some(k) = key {
            if let Some((_, id)) = self.frame_cache.get(&k) {
                return Ok(*id);
            }
        }
        let frame = Frame {
            name: f
                .get("name")
                .and_then(Value::as_str)
                .ok_or("a frame without a name")?
                .to_string(),
            filename: f
                .get("filename")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            line: f.get("line").and_then(Value::as_i64).unwrap_or(0),
        };
        let id = self.frame_id(frame);
        if let Some(k) = key {
            if self.frame_cache.len() >= FRAME_CACHE_MAX {
                self.frame_cache.clear();
            }
            self.frame_cache.insert(k, (f.clone(), id));
        }
        Ok(id)
    }

    fn frame_id(&mut self, frame: Frame) -> u32 {
        match self.frame_ids.get(&frame) {
            Some(&id) => id,
            None => {
                let id = self.frames.len() as u32;
                self.frames.push(frame.clone());
                self.frame_ids.insert(frame, id);
                id
            }
        }
    }

    /// Drops the identity caches (once reading is over).
    pub fn done_reading(&mut self) {
        self.list_cache = FastMap::default();
        self.sequence_cache = FastMap::default();
        self.frame_cache = FastMap::default();
    }

    /// The frames of a stack, innermost first (empty for none).
    pub fn frames(&self, id: StackId) -> impl Iterator<Item = &Frame> {
        let ids: &[u32] = if id.is_known() {
            self.stacks.get(id.0 as usize).map_or(&[][..], |b| &b[..])
        } else {
            &[]
        };
        ids.iter().map(|&f| &self.frames[f as usize])
    }

    /// The site of a stack: its innermost Python frame outside PyTorch.
    pub fn site(&self, id: StackId) -> Option<&Frame> {
        if !id.is_known() {
            return None;
        }
        let f = (*self.sites.get(id.0 as usize)?)?;
        self.frames.get(f as usize)
    }

    /// A number naming the site of a stack, for grouping (`u32::MAX`: none).
    pub fn site_key(&self, id: StackId) -> u32 {
        if !id.is_known() {
            return u32::MAX;
        }
        self.sites
            .get(id.0 as usize)
            .copied()
            .flatten()
            .unwrap_or(u32::MAX)
    }

    /// The frame a [`StackTable::site_key`] names.
    pub fn frame_by_key(&self, key: u32) -> Option<&Frame> {
        self.frames.get(key as usize)
    }

    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Interns a short text (`compile_context`, `user_metadata`); 0 is the empty text.
    pub fn text(&mut self, s: &str) -> u32 {
        if self.texts.is_empty() {
            self.texts.push(String::new());
            self.text_ids.insert(String::new(), 0);
        }
        if let Some(&id) = self.text_ids.get(s) {
            return id;
        }
        if self.texts.len() >= TEXTS_MAX {
            return 0;
        }
        let id = self.texts.len() as u32;
        self.texts.push(s.to_string());
        self.text_ids.insert(s.to_string(), id);
        id
    }

    pub fn text_of(&self, id: u32) -> &str {
        self.texts.get(id as usize).map_or("", String::as_str)
    }
}

/// `torch::autograd::generated::PowBackward0::apply(...)` -> `PowBackward0`.
fn backward_node(name: &str) -> Option<&str> {
    let (node, _) = name
        .strip_prefix("torch::autograd::generated::")?
        .split_once("::apply(")?;
    (!node.contains(['(', ':', ' '])).then_some(node)
}

/// `at::_ops::mul_Tensor::call(...)` -> `mul_Tensor`.
fn aten_op(name: &str) -> Option<&str> {
    let (op, _) = name.strip_prefix("at::_ops::")?.split_once("::call(")?;
    (!op.contains(['(', ':', ' '])).then_some(op)
}

/// Whether a Python file is part of the interpreter's standard library:
/// `…/lib/pythonX.Y/NAME.py` not under `site-packages` or `dist-packages`.
fn is_stdlib(filename: &str) -> bool {
    let Some((_, rest)) = filename.split_once("/lib/python") else {
        return false;
    };
    let versioned = rest.starts_with(|c: char| c.is_ascii_digit());
    versioned && !rest.contains("/site-packages/") && !rest.contains("/dist-packages/")
}

/// The innermost user frame ([`Frame::is_user`]); else the innermost Python frame
/// outside the `torch` package; else the innermost Python frame; else the backward
/// node or the ATen operator.
fn site_of(frames: &[Frame], stack: &[u32]) -> Option<u32> {
    let at = site_index(stack.len(), |i| &frames[stack[i] as usize])?;
    Some(stack[at])
}

/// The site of a stack given as its frames, innermost first (the same rule as the
/// reports': see [`site_index`]), e.g. read back from a `torch.stack` marker.
pub fn site_of_frames(frames: &[Frame]) -> Option<&Frame> {
    site_index(frames.len(), |i| &frames[i]).map(|i| &frames[i])
}

/// The position of a stack's site among its `n` frames (`frame(i)`, innermost first).
fn site_index<'a>(n: usize, frame: impl Fn(usize) -> &'a Frame) -> Option<usize> {
    let python = || (0..n).filter(|&i| frame(i).is_python());
    let named = |pick: fn(&str) -> Option<&str>| (0..n).find(|&i| pick(&frame(i).name).is_some());
    python()
        .find(|&i| frame(i).is_user())
        .or_else(|| python().find(|&i| !frame(i).filename.contains("/torch/")))
        .or_else(|| python().next())
        .or_else(|| named(backward_node))
        .or_else(|| named(aten_op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_sites_are_shortened() {
        let f = |name: &str| Frame {
            name: name.into(),
            filename: "??".into(),
            line: 0,
        };
        assert_eq!(
            f("torch::autograd::generated::PowBackward0::apply(std::vector<at::Tensor>&&)")
                .site_label(),
            "PowBackward0 (autograd)"
        );
        assert_eq!(
            f("at::_ops::mul_Tensor::call(at::Tensor const&, at::Tensor const&)").site_label(),
            "aten mul_Tensor"
        );
        assert_eq!(f("c10::foo()").site_label(), "c10::foo()");
    }

    #[test]
    fn the_site_is_the_users_frame() {
        let f = |file: &str, line: i64| Frame {
            name: "fn".into(),
            filename: file.into(),
            line,
        };
        let stack = [
            f("??", 0),
            f(
                "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                125,
            ),
            f("/usr/lib/python3.12/contextlib.py", 81),
            f(
                "/venv/lib/python3.12/site-packages/transformers/modeling.py",
                9,
            ),
            f("/src/train.py", 42),
        ];
        assert_eq!(site_of_frames(&stack), Some(&stack[3]));
        assert!(!stack[2].is_user() && !stack[1].is_user() && !stack[0].is_user());
        assert!(f("/src/train.py", 1).is_user());
        assert!(f("/home/u/lib/python_tools/x.py", 1).is_user());
        // Only library frames: the innermost outside torch, else the innermost Python.
        assert_eq!(site_of_frames(&stack[..3]), Some(&stack[2]));
        assert_eq!(site_of_frames(&stack[..2]), Some(&stack[1]));
    }
}
