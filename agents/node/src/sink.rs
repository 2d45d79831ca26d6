//! Where validated frames go: the [`FrameSink`] trait the receiver calls.
//!
//! Owns the contract between the receiver and whatever consumes frames (the capture
//! file today; a forwarder to `memwatch serve` or a spool later). It owns no I/O.

use memwatch_wire::Record;

/// Identifies one shim connection for the lifetime of a receiver (never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The peer closed the connection after a whole frame (normal end of a process).
    Eof,
    /// The peer sent something that is not a valid frame stream (bad preamble, damaged
    /// frame, first frame not `process_start`, stream cut inside a frame). Frames before
    /// the damage were delivered; nothing after it was.
    Protocol(String),
    /// Reading the socket failed.
    Io(String),
    /// The sink refused a frame (e.g. the capture file could not be written).
    Sink(String),
    /// The receiver was shut down while the connection was still open.
    Shutdown,
}

impl CloseReason {
    /// Whether the connection ended the normal way.
    pub fn is_clean(&self) -> bool {
        matches!(self, Self::Eof)
    }
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Eof => write!(f, "closed by the process"),
            Self::Protocol(why) => write!(f, "protocol error: {why}"),
            Self::Io(why) => write!(f, "read error: {why}"),
            Self::Sink(why) => write!(f, "sink error: {why}"),
            Self::Shutdown => write!(f, "still open when the receiver stopped"),
        }
    }
}

/// A sink refused a frame; the receiver closes that connection with [`CloseReason::Sink`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SinkError(pub String);

/// Consumer of validated frames. Called concurrently from one thread per connection;
/// implementations serialise what must be serialised. Frames of one connection arrive in
/// order; frames of different connections interleave arbitrarily (they are
/// self-describing by pid).
pub trait FrameSink: Send + Sync {
    /// One whole, checksum-valid, decodable frame of `conn`: `record` is its decoded
    /// form, `bytes` its exact wire bytes (length, type, payload, CRC). `bytes` may also
    /// carry valid frames of types this version does not know, which precede `record`.
    fn frame(&self, conn: ConnId, record: &Record, bytes: &[u8]) -> Result<(), SinkError>;

    /// `conn` ended; no more frames will come from it.
    fn closed(&self, conn: ConnId, reason: &CloseReason);
}
