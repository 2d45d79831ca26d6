//! XLA/JAX/TSL log analysis (`memwatch log`): finds the memory events in logs with
//! abseil (`W0306 12:00:00.1 123 file.cc:12] …`) or TF-style (`2025-08-15 21:13:25.7: W
//! external/…] …`) prefixes — rematerialization warnings, BFC out-of-memory reports (old and
//! new formats, with every chunk line as data), allocator stats blocks,
//! `RESOURCE_EXHAUSTED` errors, pool-size lines — and the other frameworks' and drivers'
//! out-of-memory messages (`framework`: PyTorch, CuPy, stream-executor allocation
//! failures, driver error names), the GPU autotuner's compile-time messages
//! (`autotune`) and Python tracebacks (`traceback`); and joins a BFC OOM to an XLA dump
//! (`diagnose`). The line state machine is in `parse`, prefixes in `prefix`.

pub mod autotune;
pub mod diagnose;
pub mod framework;
pub mod model;
pub mod parse;
pub mod prefix;
pub mod traceback;

pub use model::*;
pub use parse::parse_log;
