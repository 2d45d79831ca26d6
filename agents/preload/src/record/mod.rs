//! The hot path: everything a hooked call runs besides the real function.
//!
//! Owns beginning a record ([`begin`], [`begin_at`]), filling it ([`Pending`]) and
//! queueing it ([`Pending::commit`]): one TLS lookup, one clock read (two for API spans),
//! one push into the calling thread's own ring, no lock, no allocation, errno restored.
//! Also the state those read on every call (`state`), the per-thread block in
//! initial-exec TLS (`thread_state`), the per-thread rings (`thread_ring`) and the
//! shared fallback queue past 1024 recording threads (`shared_queue`), sampled native
//! stacks (`stack_sample`) and the fault switch the catch-unwind tests use (`fault`).
//!
//! A leaf: it imports only `clock`, `config` and `memwatch-wire`. The two things a first
//! call must start (the process-wide start-up, the flusher thread) belong to
//! `lifecycle`, above it, which hands them in through [`StartUp`].

mod call;
pub mod fault;
pub mod shared_queue;
pub mod stack_sample;
pub mod state;
pub mod thread_ring;
pub mod thread_state;

pub use call::{begin, begin_at, Pending, StartUp};
