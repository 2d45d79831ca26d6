//! XLA/JAX/TSL log analysis (`memwatch log`): finds the memory events in logs with
//! abseil (`W0306 12:00:00.1 123 file.cc:12] …`) or TF-style (`2025-08-15 21:13:25.7: W
//! external/…] …`) prefixes — rematerialization warnings, BFC out-of-memory reports (old and
//! new formats, with every chunk line as data), allocator stats blocks,
//! `RESOURCE_EXHAUSTED` errors, pool-size lines — and joins an OOM to an XLA dump
//! (`diagnose`). Parsing is in `parse`, prefixes in `prefix`, the join in `diagnose`.

pub mod diagnose;
pub mod model;
pub mod parse;
pub mod prefix;

pub use model::*;
pub use parse::parse_log;
