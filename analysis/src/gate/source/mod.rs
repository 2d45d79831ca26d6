//! Adapters from measurement sources to [`GateEntry`](super::entry::GateEntry)s, one file
//! per source. Each reads its own input format and nothing else ([`stored_run`] converts
//! what the CLI read from the daemon store; the analysis crate does no database I/O).

pub mod capture;
pub mod memory_analysis;
pub mod stored_run;
pub mod xla;
