//! memwatch-analysis: pure logic, no I/O policy, no async.
//!
//! Owns the live-memory core (`live`: which allocations are live, how frees match),
//! capture loading and timelines, APU memory accounting (`apu`), XLA dump and log
//! parsing, allocator models, the OOM doctor (`doctor`: one verdict per out-of-memory
//! failure, see its README) and the regression gate. Each area is one module tree below;
//! the CLI and the daemon call
//! into them. Nothing here prints or exits: functions return typed errors (`thiserror`).
#![doc = include_str!("../README.md")]
pub mod alloc;

pub mod apu;
pub mod capture;
pub mod device_readings;
pub mod doctor;
pub mod gate;
pub mod growth;
pub mod live;
pub mod log;
pub mod nvsmi;
pub mod runtime;
pub mod size;
pub mod torch;
pub mod xla;
