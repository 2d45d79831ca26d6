//! The CI regression gate: compares measured memory figures (per compiled module, or per
//! captured process/device) with a reviewed baseline file and says what regressed.
//!
//! - [`metric`]: the figures compared; [`units`]: `2%` / `64MiB` parsing, binary units.
//! - [`entry`]: the source-neutral input ([`GateEntry`]); [`source`]: adapters from
//!   memwatch-jax JSON (and XLA dumps / captures) to entries.
//! - [`baseline`]: the TOML baseline file; [`compare`]: the regression rule, the report,
//!   `--update`/`--ratchet`; [`render`]: text, Markdown and JUnit output.
//!
//! Nothing here prints or exits; the CLI (`memwatch gate`) does.

pub mod baseline;
pub mod compare;
pub mod entry;
pub mod error;
pub mod metric;
pub mod render;
pub mod source;
pub mod units;

pub use baseline::{Baseline, BaselineEntry};
pub use compare::{compare, updated_baseline, GateOptions, GateReport, Status, UpdateMode};
pub use entry::{GateEntry, Measurements, OpBytes};
pub use error::GateError;
pub use metric::Metric;
