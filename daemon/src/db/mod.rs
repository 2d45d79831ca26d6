//! The database: one sqlx `Any` pool over SQLite or PostgreSQL ([`Store`]), the embedded
//! migrations (`migrations/sqlite`, `migrations/postgres`), the one-writer rule
//! ([`WriterLock`]), the storage error type, and the stored binary formats shared by
//! ingest and the readers (`chunk`: raw event chunks; `snapshot`: live-set blobs).
//! Features (`runs`, `peak`, ...) keep their own SQL next to their handlers and read rows
//! by column name. All SQL is parameterised.

pub(crate) mod chunk;
mod error;
pub(crate) mod images;
mod locks;
mod open;
pub(crate) mod retention;
pub(crate) mod snapshot;
mod writer_lock;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyConnection, AnyPool, Connection, Executor};

pub use error::StoreError;
pub use open::check_sqlite_header;
pub(crate) use open::probe_postgres;
pub use writer_lock::WriterLock;

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A connection pool plus the backend it talks to. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub pool: AnyPool,
    pub backend: Backend,
    pub(crate) checkpoint_locks: locks::KeyedLocks,
    /// The sqlx URL (for the last checkpoint of a SQLite file, on its own connection).
    url: std::sync::Arc<str>,
}

/// The most heap SQLite keeps in this process before its page caches give pages back
/// (`PRAGMA soft_heap_limit`, process-wide; the daemon's memory bound counts it).
pub const SQLITE_HEAP_LIMIT: usize = 64 << 20;

static MIGRATOR_SQLITE: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");
static MIGRATOR_POSTGRES: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

/// Turns `--db` into a sqlx URL: `postgres://…`/`postgresql://…` stay; `sqlite:…` stays;
/// anything else is a file path (created when missing).
pub fn database_url(db: &str) -> Result<(String, Backend), StoreError> {
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        Ok((db.to_string(), Backend::Postgres))
    } else if db.starts_with("sqlite:") {
        Ok((db.to_string(), Backend::Sqlite))
    } else if db.is_empty() || db.contains("://") {
        Err(StoreError::BadUrl(db.to_string()))
    } else {
        Ok((format!("sqlite://{db}?mode=rwc"), Backend::Sqlite))
    }
}

/// How long a PostgreSQL server may take to accept the first connection at start.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl Store {
    /// Connects (SQLite: creates the file, WAL mode, FULL sync) and migrates.
    /// A PostgreSQL server that refuses or does not answer fails within
    /// [`CONNECT_TIMEOUT`]; a file that is not a SQLite database fails at once.
    pub async fn open(db: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let (url, backend) = database_url(db)?;
        let sqlite_file = (backend == Backend::Sqlite)
            .then(|| writer_lock::sqlite_path(db))
            .flatten();
        if let Some(path) = &sqlite_file {
            check_sqlite_header(path)?;
            open::check_writable_dir(path)?;
            open::refuse_foreign_sqlite(path, db).await?;
        }
        let mut opts = AnyPoolOptions::new()
            .max_connections(if backend == Backend::Sqlite { 4 } else { 8 })
            // A connection whose transaction could not end (a COMMIT, then the ROLLBACK
            // after it, failed: a full disk, an I/O error; SQLite had already rolled back)
            // is closed instead of going back to the pool: sqlx would keep counting it as
            // inside a transaction and refuse every later BEGIN on it ("begin_with at
            // non-zero transaction depth") until a restart. The ping first runs the
            // rollback that dropping the transaction queued.
            .after_release(|conn, _meta| {
                Box::pin(async move {
                    conn.ping().await?;
                    Ok(!conn.is_in_transaction())
                })
            });
        if backend == Backend::Postgres {
            probe_postgres(&url, CONNECT_TIMEOUT).await?;
            opts = opts.acquire_timeout(Duration::from_secs(10));
        }
        if backend == Backend::Sqlite {
            opts = opts.after_connect(|conn, _meta| {
                Box::pin(async move {
                    // Only takes effect on a new, empty file: large pages keep the
                    // event chunks' blobs in short overflow chains.
                    conn.execute("PRAGMA page_size=65536").await?;
                    conn.execute("PRAGMA journal_mode=WAL").await?;
                    // FULL: the write-ahead log is synced at every commit, so a batch
                    // acknowledged after its commit survives a power loss (NORMAL syncs
                    // only at checkpoints).
                    conn.execute("PRAGMA synchronous=FULL").await?;
                    conn.execute("PRAGMA busy_timeout=10000").await?;
                    conn.execute("PRAGMA cache_size=-65536").await?;
                    // Process-wide: the page caches of every connection together give
                    // pages back past this (each alone may grow to 64 MiB, and four did
                    // under a heavy ingest with the checkpointer reading).
                    conn.execute(format!("PRAGMA soft_heap_limit={SQLITE_HEAP_LIMIT}").as_str())
                        .await?;
                    Ok(())
                })
            });
        }
        let pool = opts
            .connect(&url)
            .await
            .map_err(|source| StoreError::Connect {
                url: redact(&url),
                source,
            })?;
        match backend {
            Backend::Sqlite => MIGRATOR_SQLITE.run(&pool).await?,
            Backend::Postgres => MIGRATOR_POSTGRES.run(&pool).await?,
        }
        Ok(Self {
            pool,
            backend,
            checkpoint_locks: locks::KeyedLocks::default(),
            url: url.into(),
        })
    }
}

/// How long [`Store::close`] tries to fold the write-ahead log in while another handle
/// still holds a lock on the file.
const CLOSE_CHECKPOINT_WITHIN: Duration = Duration::from_secs(5);

impl Store {
    /// Closes the pool; then SQLite copies its write-ahead log into the database file
    /// and empties it, so the `.db` file alone holds everything (a copied or attached
    /// `.db` without its `-wal` would otherwise look empty). Call before a command exits.
    ///
    /// The pool closes first: it waits until every connection is back (a transaction in
    /// progress, e.g. the checkpointer's, ends first) and refuses new ones, so nothing of
    /// this store can write after the log is folded in, which happens on a connection of
    /// its own.
    pub async fn close(&self) -> Result<(), StoreError> {
        self.pool.close().await;
        if self.backend == Backend::Sqlite {
            let mut conn =
                AnyConnection::connect(&self.url)
                    .await
                    .map_err(|source| StoreError::Connect {
                        url: redact(&self.url),
                        source,
                    })?;
            // The checkpoint answers busy (1 in its first column) when a reader or writer
            // of another handle on the file still held a lock at that moment (a
            // connection being closed in the background): tried again, within a bound.
            let deadline = std::time::Instant::now() + CLOSE_CHECKPOINT_WITHIN;
            loop {
                let (busy,): (i64,) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
                    .fetch_one(&mut conn)
                    .await?;
                if busy == 0 || std::time::Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            conn.close().await?;
        }
        Ok(())
    }

    /// The run's start (CLOCK_MONOTONIC ns), or None when there is no such run.
    pub async fn run_t0(&self, run: i64) -> Result<Option<u64>, StoreError> {
        let t0: Option<i64> = sqlx::query_scalar("SELECT t0_mono_ns FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await?;
        Ok(t0.map(|t| t.max(0) as u64))
    }
}

/// Hides a password in a database URL for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Wall-clock now in ns since the Unix epoch.
pub fn now_unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Reads column `i` of a one-value row (`SELECT COUNT(*) ...`) as i64. Rows of several
/// columns are read by name (`sqlx::FromRow` structs).
pub fn col_i64(row: &AnyRow, i: usize) -> Result<i64, StoreError> {
    use sqlx::Row;
    Ok(row.try_get::<i64, _>(i)?)
}
