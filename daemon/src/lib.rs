//! memwatch-daemon: central storage and query service for memwatch captures.
//!
//! Laid out by feature. `db` owns the pool, migrations, the writer lock and the stored
//! binary formats; `ingest` turns wire records into rows (TCP listener, HTTP endpoint,
//! writer task, run state, rollups, PJRT writes); each feature keeps its SQL, view
//! models, API handlers and page handlers together: `runs` (nodes, runs, timelines,
//! events, the overview and run pages), `peak` (what was live at the peak or any
//! instant, checkpoints), `runtime` (PJRT attribution), `incidents` (failures and
//! attached logs), `xla` (attached dumps), `gates` (CI gate history), `export` (traces,
//! chart downloads), `compare`, `snapshot` (what a stored PyTorch snapshot's dump says:
//! segments, user-frame stacks, two dumps compared); `render` draws and formats (no store access); `app`
//! assembles the router with the one error type; `server` starts it all; `codes`
//! decodes the raw wire codes; `metrics` counts. Everything is crate-private behind the
//! facade below, which the CLI and the tests use. It never changes frame bytes (those
//! belong to `memwatch-wire`) and holds no CLI code.
#![doc = include_str!("../README.md")]

mod app;
mod codes;
mod compare;
mod db;
mod export;
mod framework;
mod gates;
mod incidents;
mod ingest;
mod metrics;
mod peak;
mod render;
mod runs;
mod runtime;
mod server;
mod snapshot;
mod xla;

// Serving.
pub use app::{openapi, router, AppState};
pub use metrics::Metrics;
pub use server::{start, HttpLimits, Running, ServeConfig, ServeError};

// The database.
pub use db::{
    check_sqlite_header, col_i64, database_url, now_unix_ns, redact, Backend, Store, StoreError,
    WriterLock,
};

// Ingest.
pub use ingest::{
    rollup, spawn_writer, tune_allocator, Batch, BatchOutcome, Budget, IngestLimits, Ingestor,
    NotStored, Peer, Reply, RunEviction, Sequencing, TcpConfig, WriterHandle, DEFAULT_BUSY_RETRY,
};

// What was live, and the background checkpointer.
pub use peak::{
    spawn_checkpointer, CheckpointSettings, Group, Peak, PeakAlloc, Progress, CHECKPOINT_EVENTS,
    CHECKPOINT_PER_LIVE,
};

// Reads the CLI and tools use besides the HTTP API.
pub use framework::{
    build_run as build_framework_view, spawn_framework_builder, stale_runs as stale_framework_runs,
    BuilderProgress, Built as FrameworkBuilt, ExecutableGrowth, FrameworkTimeline, Growing,
};
pub use gates::{gate_results, GateResult, GateRow};
pub use incidents::{BadDiagnosis, DiagnosisRow, IncidentLogRow, IncidentRow};
pub use render::Point;
pub use runs::{
    device_capacity, run_lite, AnnotationRow, AnnotationsPage, DeviceRow, EventRow, EventsPage,
    NodeRow, ProcessRow, RunDetail, RunDevice, RunLite, RunRow, SampleRow, Timeline,
};
pub use runtime::{peak_runtime, ExecutionSpan, ModuleShare, PeakRuntime, RuntimeView};
pub use xla::{DumpModuleRow, NewModule};
