//! Runtime attribution from the PJRT records of a capture (issue 9).
//!
//! Owns turning `pjrt_executable` / `pjrt_memory_stats` frames and PJRT events (Api
//! 3001..) into: per device, the framework allocator's own timeline (bytes in use, pool
//! bytes, limit), the runtime peak and which executable was running when it was reached,
//! the live `jax.Array` buffers at that moment grouped by the executable that produced
//! them (co-resident executables), out-of-memory incidents inside execute, and, given an
//! XLA dump, the join of an executable to its buffer assignment (by name, disambiguated
//! by its compiled memory statistics) with the HLO buffers / `op_name`s of its peak.
//! Loading is in `load`, the document in `report`, the computation in `peak` (what was
//! live at an instant in `live`), the dump join in `join`; nothing here prints.

pub mod join;
pub mod live;
pub mod load;
pub mod output_order;
pub mod peak;
pub mod report;

pub use join::{find_module, join_dump, normalise};
pub use live::{LiveAt, SweepWork};
pub use load::{load_capture, RuntimeCapture, RuntimeError};
pub use output_order::OutputOrder;
pub use peak::{analyse, analyse_counting};
pub use report::{
    DeviceRuntime, DumpJoin, ExecutableSummary, FailedCompile, LiveGroup, OomIncident,
    PeakAttribution, ProcessRuntime, Running, RuntimeReport, Sample, OOMS_LISTED,
};
