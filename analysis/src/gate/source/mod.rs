//! Adapters from measurement sources to [`GateEntry`](super::entry::GateEntry)s, one file
//! per source. Each reads its own input format and nothing else.

pub mod capture;
pub mod memory_analysis;
pub mod xla;
