//! memwatch-kernels: replay kernels (one HIP/CUDA source, `src/gpu/`) and the GPU replay
//! runner that proves an allocator model's prediction on a real device.
//!
//! Modules: `hip_build` (compiling the HIP kernels per target), `code_object` (embedded
//! and loaded kernel images, chosen by the device's architecture), `kernel_abi` (each
//! kernel's parameters and the launch arguments both backends pass), `backend` (the
//! vendor-neutral device trait), `cuda` (driver API via libloading), `hip` (hip-sys, feature `rocm`), `sim` (a simulated device for the
//! runner's logic tests), `session` (ownership and cleanup of device memory), `plan`
//! (capacity emulation), `trace` (the events the runner consumes), `runner` (the replay),
//! `interrupt` (Ctrl-C).
#![doc = include_str!("../README.md")]

pub mod backend;
pub mod code_object;
pub mod cuda;
#[cfg(feature = "rocm")]
pub mod hip;
pub mod hip_build;
pub mod interrupt;
pub mod kernel_abi;
pub mod plan;
pub mod runner;
pub mod session;
pub mod sim;
pub mod trace;

pub use backend::{DeviceDescription, DevicePtr, GpuBackend, GpuError, MemInfo};
pub use runner::{run, Mode, Placer, Prediction, ReplayModel, RunError, RunOptions, RunReport};
pub use trace::TraceEvent;
