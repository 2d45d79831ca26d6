//! memwatch-analysis: pure logic, no I/O policy, no async.
//!
//! Owns the live-memory core (`live`: which allocations are live, how frees match),
//! capture loading and timelines, XLA dump and log parsing, allocator models and
//! the regression gate. Each area is one module tree below; the CLI and the daemon call
//! into them. Nothing here prints or exits: functions return typed errors (`thiserror`).
pub mod alloc;

pub mod capture;
pub mod gate;
pub mod live;
pub mod log;
pub mod runtime;
pub mod size;
pub mod torch;
pub mod xla;
