//! memwatch-daemon: central storage and query service for memwatch captures.
//!
//! Owns storage (`store`: schema via `sqlx::migrate!`, ingest of wire records, queries),
//! the TCP ingest listener for agents (`tcp`), the HTTP API (`api`), Prometheus metrics
//! (`metrics`), the background checkpointer (`checkpointer`) and the server that ties them together (`server`). It never changes frame
//! bytes (those belong to `memwatch-wire`) and holds no CLI code.

pub mod api;
pub mod checkpointer;
pub mod extract;
pub mod metrics;
pub mod server;
pub mod store;
pub mod tcp;
pub mod web;
pub mod writer;

pub use server::{start, Running, ServeConfig, ServeError};
pub use store::{Backend, Batch, BatchOutcome, Ingestor, Store, StoreError, WriterLock};
