//! memwatch-preload: the LD_PRELOAD shim (`libmemwatch_preload.so`).
//!
//! Loaded into a workload with `LD_PRELOAD`, it records every HIP, CUDA driver and CUDA
//! runtime allocation / free / failure, stream and module spans and device changes, and
//! streams them in the memwatch wire format (`memwatch-wire`) to a capture file or a
//! `memwatch run` receiver. It never changes what the program sees: same results, same
//! errno, same out-pointers. See `README.md` for the mechanism and guarantees.
//!
//! Layers, each importing only those below it (no module imports one above it:
//! `python3 scripts/module_cycles.py agents/preload/src`, part of the test suite):
//! - leaves: `config` (environment), `clock`, `wait` (bounded waits for another
//!   thread's one-time set-up), `debug`, `real` (finding real functions), `known_libs`
//!   (the libraries the program looked hooked names up in), `panic_guard` (no panic
//!   reaches the program);
//! - `record`: the hot path (begin / commit / ring push, per-thread rings, the shared
//!   queue, sampled stacks, the fault switch), a leaf; `hooks::table`: the hooked
//!   functions and their real-function slots; `abnormal_end`'s hand-off (abort /
//!   _exit / _Exit ask the flusher for the last pass);
//! - `hooks`: the wrappers of the hooked runtime functions (finding the real function,
//!   recording through `record`), generic over what only the layers above know
//!   (`hooks::Shim`: the start-up and the exported addresses);
//! - delivery: `sink` (frames out), `backtrace_frames`, `device` (device_info queries,
//!   through the real functions in `hooks::table`), `process_end` (the last pass),
//!   `flusher` (the background thread), and PJRT's flusher side (`pjrt::sample`,
//!   `pjrt::exec_frames`, and the tables the wrappers fill: `pjrt::registry`, …);
//! - `lifecycle`: start-up, flusher start, fork and exit handlers; it calls down into
//!   the hot path and delivery, never up;
//! - the exported entry points: `exports` (the hooked functions' symbols: `hooks`'
//!   wrappers instantiated with `lifecycle`'s start-up), `dl` (dlsym, dlvsym), `unload`
//!   (dlclose), `exec`, `pjrt::table` and `pjrt::wrap` (the PJRT C API table wrapping),
//!   `attach`, `got_patch` and `pointer_scan` (late attach by `memwatch attach`).
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
pub mod exports;
pub mod flusher;
pub mod got_patch;
pub mod hooks;
pub mod known_libs;
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
