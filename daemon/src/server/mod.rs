//! `memwatch serve`: opens the store, starts the writer, the TCP ingest listener, the
//! HTTP API (`http`: connection limit, header timeout), the retention task, the live-set
//! checkpointer and the ingest-rate ticker; stops them in order.
//!
//! Owns the security rule: listening on anything but loopback requires a token (the
//! daemon refuses to start without one).

mod http;

pub use http::HttpLimits;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::app::{router, AppState};
use crate::db::{Store, StoreError, WriterLock};
use crate::framework::{spawn_framework_builder, BuilderProgress};
use crate::ingest::{
    serve_ingest, spawn_writer, IngestLimits, Ingestor, RunEviction, TcpConfig, WriterHandle,
};
use crate::metrics::Metrics;
use crate::peak::{spawn_checkpointer, CheckpointSettings, Progress};

/// Configuration of a daemon.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// File path, `sqlite://…` or `postgres://…`.
    pub db: String,
    pub listen: SocketAddr,
    pub ingest: SocketAddr,
    pub token: Option<String>,
    /// Raw events older than this are deleted (rollups and peaks stay). `None`: forever.
    pub retain_raw: Option<Duration>,
    /// Largest HTTP request body (XLA documents); at most the raw pool of `limits`.
    pub max_body_bytes: usize,
    /// Largest batch (TCP, and `POST /api/ingest` bodies).
    pub max_batch_bytes: u32,
    /// The memory budget of received data (its raw pool is raised to the largest batch
    /// or body).
    pub limits: IngestLimits,
    /// The TCP ingest listener's limits and timeouts (the token and batch size above
    /// replace its own).
    pub tcp: TcpConfig,
    pub http: HttpLimits,
    /// When runs leave the writer's memory.
    pub eviction: RunEviction,
    /// The live-set checkpointer's pace and density.
    pub checkpoints: CheckpointSettings,
    /// How long a commit refused by a busy database (another process holds the SQLite
    /// file's write lock) is retried before its batches fail.
    pub busy_retry: Duration,
}

impl ServeConfig {
    pub fn new(db: impl Into<String>) -> Self {
        Self {
            db: db.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 7373)),
            ingest: SocketAddr::from(([127, 0, 0, 1], 7374)),
            token: None,
            retain_raw: None,
            max_body_bytes: 64 << 20,
            max_batch_bytes: memwatch_wire::ingest::DEFAULT_MAX_BATCH_BYTES,
            limits: IngestLimits::default(),
            tcp: TcpConfig::default(),
            http: HttpLimits::default(),
            eviction: RunEviction::default(),
            checkpoints: CheckpointSettings::default(),
            busy_retry: crate::ingest::DEFAULT_BUSY_RETRY,
        }
    }
}

/// Errors starting the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to listen on {0} (not loopback) without a token: set --token or MEMWATCH_TOKEN"
    )]
    TokenRequired(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("HTTP server failed: {0}")]
    Http(std::io::Error),
}

/// A started daemon: where it listens, and its store.
pub struct Running {
    pub api_addr: SocketAddr,
    pub ingest_addr: SocketAddr,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// The checkpointer's progress.
    pub checkpoints: watch::Receiver<Progress>,
    /// The framework view's background builder.
    pub framework: watch::Receiver<BuilderProgress>,
    http: tokio::task::JoinHandle<()>,
    ingest: tokio::task::JoinHandle<()>,
    writer: WriterHandle,
    writer_task: tokio::task::JoinHandle<()>,
    background: Vec<tokio::task::JoinHandle<()>>,
    /// This daemon is the database's one writer while it runs.
    _writer_lock: WriterLock,
}

impl Running {
    /// Waits until the HTTP server stops (it runs until the process ends).
    pub async fn wait(&mut self) -> Result<(), ServeError> {
        (&mut self.http)
            .await
            .map_err(|e| ServeError::Http(std::io::Error::other(e)))
    }

    /// Stops serving, then the writer (the commit in progress ends; queued batches are
    /// not acknowledged, their senders resend them), then closes the store: every
    /// connection of the pool ends first (the checkpointer's pass too), then a SQLite
    /// write-ahead log is folded into the database file, so the file alone is complete.
    /// Releases the writer lock.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        self.http.abort();
        self.ingest.abort();
        for t in &self.background {
            t.abort();
        }
        self.writer.stop();
        let _ = self.writer_task.await;
        // The aborted tasks end at their next await; until then one may still hold a
        // connection or a statement on the file.
        let _ = self.http.await;
        let _ = self.ingest.await;
        for t in self.background {
            let _ = t.await;
        }
        self.store.close().await?;
        Ok(())
    }
}

/// Starts everything and returns once the sockets are bound.
pub async fn start(cfg: ServeConfig) -> Result<Running, ServeError> {
    crate::ingest::tune_allocator();
    for addr in [cfg.listen, cfg.ingest] {
        if !addr.ip().is_loopback() && cfg.token.as_deref().is_none_or(str::is_empty) {
            return Err(ServeError::TokenRequired(addr));
        }
    }
    // The ports first: a daemon that cannot listen must not have created (or migrated)
    // a database on its way out.
    let tcp = TcpListener::bind(cfg.ingest)
        .await
        .map_err(|source| ServeError::Bind {
            addr: cfg.ingest,
            source,
        })?;
    let http = TcpListener::bind(cfg.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: cfg.listen,
            source,
        })?;
    // Then the lock: a second daemon starting at the same moment is refused as such, not
    // by a migration racing the first one's.
    let writer_lock = WriterLock::acquire(&cfg.db).await?;
    let store = Store::open(&cfg.db).await?;
    let metrics = Arc::new(Metrics::default());
    let mut limits = cfg.limits;
    limits.raw_bytes = limits
        .raw_bytes
        .max(cfg.max_batch_bytes as usize)
        .max(cfg.max_body_bytes);
    limits.decoded_per_peer = limits.decoded_per_peer.min(limits.decoded_bytes);
    let (writer, writer_task) = spawn_writer(
        Ingestor::new(store.clone())
            .with_busy_retry(cfg.busy_retry)
            .with_eviction(cfg.eviction),
        metrics.clone(),
        limits,
    );
    let api_addr = http.local_addr().map_err(ServeError::Http)?;
    let ingest_addr = tcp.local_addr().map_err(ServeError::Http)?;
    let ingest = tokio::spawn(serve_ingest(
        tcp,
        writer.clone(),
        metrics.clone(),
        TcpConfig {
            token: cfg.token.clone(),
            max_batch_bytes: cfg.max_batch_bytes,
            ..cfg.tcp.clone()
        },
    ));
    let mut background = Vec::new();
    {
        let m = metrics.clone();
        background.push(tokio::spawn(async move {
            let mut last = 0u64;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let now = m.events_total.load(Ordering::Relaxed);
                m.events_per_second
                    .store(now.saturating_sub(last), Ordering::Relaxed);
                last = now;
            }
        }));
    }
    if let Some(keep) = cfg.retain_raw {
        let st = store.clone();
        background.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                match st.apply_retention(keep.as_nanos() as i64).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!("retention: deleted {n} raw event chunks"),
                    Err(e) => tracing::warn!("retention failed: {e}"),
                }
            }
        }));
    }
    let checkpoints = spawn_checkpointer(store.clone(), cfg.checkpoints);
    let framework = spawn_framework_builder(store.clone(), cfg.checkpoints.every);
    let app = router(
        AppState {
            store: store.clone(),
            writer: writer.clone(),
            metrics: metrics.clone(),
            token: cfg.token.clone(),
        },
        cfg.max_body_bytes,
    );
    let http = tokio::spawn(http::serve_http(http, app, cfg.http));
    tracing::info!(%api_addr, %ingest_addr, "memwatch daemon listening");
    Ok(Running {
        api_addr,
        ingest_addr,
        store,
        metrics,
        checkpoints,
        framework,
        http,
        ingest,
        writer,
        writer_task,
        background,
        _writer_lock: writer_lock,
    })
}
