//! A pickle reader that builds plain data only.
//!
//! Reads protocols 0 to 5 into [`Value`]s: `None`, bool, int, float, str, bytes, list,
//! tuple, dict and set, shared by reference as in Python. Every opcode that would
//! import or call something (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`,
//! `NEWOBJ`, `NEWOBJ_EX`, `EXT*`, `PERSID`, out-of-band buffers) is refused with an
//! error giving its byte offset, so reading a file never runs code from it. Limits on
//! nesting, stack and memo size and string lengths (see [`Limits`]) turn hostile input
//! into errors, not exhausted memory.
//!
//! [`load`] can stream: a [`Router`] names the lists whose elements are handed to it as
//! they are finished instead of being kept (the trace of a multi-GB PyTorch snapshot);
//! what those elements hold stays fetchable, compactly (see `memo`). Submodules: `input`
//! (buffered bytes with offsets), `machine` (the opcodes), `router` (what a streaming
//! caller implements), `lists` (lists of
//! back-references read at once), `memo`, `text` (protocol 0
//! arguments), `value`, `write` (a writer of plain data, for tests and benchmarks).

mod handles;
mod input;
mod lists;
mod machine;
mod memo;
mod router;
mod text;
pub mod value;
pub mod write;

pub use machine::{load, load_plain, Limits};
pub use router::{Element, Kind, NoStreaming, Route, Router, Streaming};
pub use value::Value;

/// Why a pickle could not be read, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("at byte {offset}: {kind}")]
pub struct PickleError {
    /// Offset of the opcode that failed (the end of the input when it was cut short).
    pub offset: u64,
    pub kind: ErrorKind,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ErrorKind {
    #[error(
        "refused opcode {op}{detail}: only plain data (dict, list, tuple, set, str, bytes, \
         int, float, bool, None) is read, nothing is imported or called"
    )]
    Refused { op: &'static str, detail: String },
    #[error("unknown opcode 0x{0:02x} (not a pickle, or damaged)")]
    UnknownOpcode(u8),
    #[error("pickle protocol {0} is newer than 5")]
    Protocol(u8),
    #[error("the input ends inside the pickle (truncated file?)")]
    Truncated,
    #[error("a length of {len} bytes exceeds the limit of {limit}")]
    TooLong { len: u64, limit: u64 },
    #[error("values nested deeper than {0} containers")]
    TooDeep(usize),
    #[error("more than {0} containers being built at once")]
    TooManyOpen(usize),
    #[error("more than {0} items on the stack")]
    StackFull(usize),
    #[error("more than {0} objects held for back-references (memo)")]
    MemoFull(usize),
    #[error("a container of more than {0} items")]
    ContainerFull(usize),
    #[error("{op} on an empty stack or past a mark")]
    StackUnderflow { op: &'static str },
    #[error("{op} without a MARK")]
    NoMark { op: &'static str },
    #[error("{op} applies to a {found}, not a {expected} being built")]
    WrongTarget {
        op: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{op}: odd number of items for key/value pairs")]
    OddPairs { op: &'static str },
    #[error("memo index {0} was never stored")]
    MissingMemo(u32),
    #[error(
        "memo index {0} refers back to an element of a streamed list (a trace entry), which \
         is handed out as it is read and not kept"
    )]
    StreamedBack(u32),
    #[error("a container refers to itself (recursive structure): not plain data")]
    Recursive,
    #[error("bad argument: {0}")]
    BadArgument(String),
    #[error("the stream's reader refused an element: {0}")]
    Rejected(String),
    #[error("read error: {0}")]
    Io(String),
}
