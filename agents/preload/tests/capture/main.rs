//! The shim against the simulated runtime: every lookup path, exact event contents,
//! unchanged program behaviour, threads, fork, exec, a disabled shim. One test binary;
//! each module one theme.

mod bench_programs;
#[path = "../common/mod.rs"]
mod common;
mod lookups;
mod process;
mod sinks;
mod threads;
