//! memwatch-agent: the node side of memwatch.
//!
//! Owns the local receiver that LD_PRELOAD shims connect to (`receiver`), the interface
//! through which received frames leave it (`sink::FrameSink`) and its sinks: one `.mwcap`
//! capture file (`capture_sink`, used by `memwatch run`) or forwarding to `memwatch serve`
//! (`forwarder`, through the bounded on-disk `spool`, used by `memwatch agent`); and the
//! device samplers (`sampler`: NVML, librocm_smi64, amdgpu sysfs) whose readings travel
//! the same way. It does not interpret events (that is `memwatch-analysis`) and never
//! changes frame bytes.
#![doc = include_str!("../README.md")]

pub mod capture_sink;
mod early_sync;
pub mod forwarder;
pub mod out_pipe;
pub mod process_runs;
pub mod receiver;
pub mod sampler;
pub mod sink;
pub mod spool;

pub use capture_sink::{CaptureFileSink, CaptureStats, FrameObserver};
pub use receiver::{ConnSummary, Receiver, ReceiverStats, SocketAccess};
pub use sink::{CloseReason, ConnId, FrameSink, SinkError};

use std::path::PathBuf;

/// Errors of the agent library.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{what} {path}: {error}")]
    Io {
        what: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("capture file {path}: {error}")]
    Wire {
        path: PathBuf,
        error: memwatch_wire::WireError,
    },
    #[error("capture file {path}: {message}")]
    Sink { path: PathBuf, message: String },
}
