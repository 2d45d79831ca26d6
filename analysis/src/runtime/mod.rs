//! Runtime attribution from the PJRT records of a capture (issue 9).
//!
//! Owns turning `pjrt_executable` / `pjrt_memory_stats` frames and PJRT events (Api
//! 3001..) into: per device, the framework allocator's own timeline (bytes in use, pool
//! bytes, limit), the runtime peak and which executable was running when it was reached,
//! the live `jax.Array` buffers at that moment grouped by the executable that produced
//! them (co-resident executables), out-of-memory incidents inside execute, and, given an
//! XLA dump, the join of an executable to its buffer assignment (by name, disambiguated
//! by its compiled memory statistics) with the HLO buffers / `op_name`s of its peak.
//! Loading is in `load`, the computation in `peak`; nothing here prints.

pub mod load;
pub mod output_order;
pub mod peak;

pub use load::{load_capture, RuntimeCapture, RuntimeError};
pub use output_order::OutputOrder;
pub use peak::{analyse, join_dump, RuntimeReport};
