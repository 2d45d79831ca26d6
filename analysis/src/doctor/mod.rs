//! The OOM doctor: one verdict per out-of-memory failure of a run, from whatever evidence
//! exists.
//!
//! - `need`: the one rule for "live set + request against the pool".
pub mod need;
