//! memwatch-preload: the LD_PRELOAD shim (`libmemwatch_preload.so`).
//!
//! Loaded into a workload with `LD_PRELOAD`, it records every HIP, CUDA driver and CUDA
//! runtime allocation / free / failure, stream and module spans and device changes, and
//! streams them in the memwatch wire format (`memwatch-wire`) to a capture file or a
//! `memwatch run` receiver. It never changes what the program sees: same results, same
//! errno, same out-pointers. See `README.md` for the mechanism and guarantees.
//!
//! Layers, each importing only those below it:
//! - leaves: `config` (environment), `clock`, `wait` (bounded waits for another
//!   thread's one-time set-up), `debug`, `real` (finding real functions),
//!   `panic_guard` (no panic reaches the program);
//! - `record`: the hot path (begin / commit / ring push, per-thread rings, the shared
//!   queue, sampled stacks, the fault switch);
//! - delivery: `sink` (frames out), `backtrace_frames`, `device` (device_info
//!   queries), `process_end` (the last pass), `flusher` (the background thread);
//! - `lifecycle`: start-up, flusher start, fork and exit handlers;
//! - the exported entry points: `hooks` (the wrappers and hook table), `dl` (dlsym,
//!   dlvsym, *GetProcAddress), `unload` (dlclose), `exec`, `abnormal_end` (abort /
//!   _exit / _Exit), `pjrt` (the PJRT C API table wrapping), `attach`, `got_patch` and
//!   `pointer_scan` (late attach by `memwatch attach`).
//!
//! `hooks` and `dl` use each other (the hook table names the GetProcAddress wrappers),
//! as do `sink` and `pjrt` (executable frames out, samples written).
#![doc = include_str!("../README.md")]
#![allow(non_snake_case)]
// Unit-test builds do not export the hooks (the test binary must not interpose its own
// dlsym), so the hook-only code is unused there.
#![cfg_attr(test, allow(dead_code))]

pub mod abnormal_end;
pub mod attach;
pub mod backtrace_frames;
pub mod clock;
pub mod config;
pub mod debug;
pub mod device;
pub mod dl;
pub mod exec;
pub mod flusher;
pub mod got_patch;
pub mod hooks;
pub mod lifecycle;
pub mod panic_guard;
pub mod pjrt;
pub mod pointer_scan;
pub mod process_end;
pub mod real;
pub mod record;
pub mod sink;
pub mod unload;
pub mod wait;
