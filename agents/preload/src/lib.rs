//! memwatch-preload: the LD_PRELOAD shim (`libmemwatch_preload.so`).
//!
//! Loaded into a workload with `LD_PRELOAD`, it records every HIP, CUDA driver and CUDA
//! runtime allocation / free / failure, stream and module spans and device changes, and
//! streams them in the memwatch wire format (`memwatch-wire`) to a capture file or a
//! `memwatch run` receiver. It never changes what the program sees: same results, same
//! errno, same out-pointers. See `README.md` for the mechanism and guarantees.
//!
//! Modules: `config` (environment), `hooks` (the wrappers and hook table), `dl` (dlsym,
//! dlvsym, *GetProcAddress), `real` (finding real functions), `rt` (hot path, lifecycle,
//! fork/exit), `tring` (per-thread rings), `ring` (shared fallback queue), `sink` (frames
//! out), `flusher` (the background thread), `device` (device_info queries), `unload`
//! (the dlclose hook), `backtrace` (sampled native stacks), `exec` (exec wrappers),
//! `abnormal_end` (abort / _exit / _Exit wrappers: the last flush when exit() is skipped), `attach`, `got_patch` and `pointer_scan` (late attach by
//! `memwatch attach`: entry points, GOT patching, copied function pointers, baseline), `pjrt` (the PJRT C API table wrapping: executables, executes, buffers,
//! allocator statistics), `wait` (bounded waits for another thread's one-time set-up).

#![allow(non_snake_case)]
// Unit-test builds do not export the hooks (the test binary must not interpose its own
// dlsym), so the hook-only code is unused there.
#![cfg_attr(test, allow(dead_code))]

pub mod abnormal_end;
pub mod attach;
pub mod backtrace;
pub mod clock;
pub mod config;
pub mod debug;
pub mod device;
pub mod dl;
pub mod exec;
pub mod flusher;
pub mod got_patch;
pub mod hooks;
pub mod pjrt;
pub mod pointer_scan;
pub mod real;
pub mod ring;
pub mod rt;
pub mod sink;
pub mod tring;
pub mod unload;
pub mod wait;
