//! Storage: connecting to SQLite or PostgreSQL through one sqlx `Any` pool, running the
//! embedded migrations, and the shared error type. Ingest (`ingest`, `state`, `rollup`,
//! `snapshot`) and reads (`query`) are submodules. All SQL is parameterised.

pub mod dash;
pub mod gate;
pub mod ingest;
pub mod live_at;
pub mod pjrt;
pub mod query;
pub mod rollup;
pub mod snapshot;
pub mod state;
pub mod writer_lock;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyConnection, AnyPool, Connection, Executor};

pub use ingest::{Batch, BatchOutcome, Ingestor};
pub use writer_lock::WriterLock;

/// Storage errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("cannot connect to database {url}: {what}")]
    Unreachable { url: String, what: String },
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("unsupported database URL {0:?} (use a file path, sqlite://PATH or postgres://…)")]
    BadUrl(String),
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    #[error("database {db}: not a SQLite database (no `SQLite format 3` header)")]
    NotSqlite { db: String },
    #[error("database {db}: is a directory; give a file path, e.g. {db}/memwatch.db")]
    IsDirectory { db: String },
    #[error("database {db}: a SQLite database of something else (tables {tables}), not a memwatch store; give memwatch its own file")]
    Foreign { db: String, tables: String },
    #[error("database {db}: its directory {dir} is not writable ({why}): SQLite keeps its write-ahead log beside the database")]
    ReadOnlyDir {
        db: String,
        dir: String,
        why: String,
    },
    #[error("database {db}: in use by {holder}, which stores into it; one process stores into a database at a time (send to its daemon with --daemon URL, or use another --db)")]
    InUse { db: String, holder: String },
    #[error("database {db}: {what}")]
    Lock { db: String, what: String },
}

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
    checkpoint_locks: live_at::CheckpointLocks,
}

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

/// One connection attempt to a PostgreSQL URL, bounded by `limit`; a clear error naming
/// the URL (password hidden) and what went wrong. sqlx's pool would retry a refused
/// connection for its whole acquire timeout (30 s) before giving up.
pub(crate) async fn probe_postgres(url: &str, limit: Duration) -> Result<(), StoreError> {
    match tokio::time::timeout(limit, AnyConnection::connect(url)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(StoreError::Unreachable {
            url: redact(url),
            what: match &e {
                sqlx::Error::Io(io) => format!("{io} (is PostgreSQL running and listening there?)"),
                other => other.to_string(),
            },
        }),
        Err(_) => Err(StoreError::Unreachable {
            url: redact(url),
            what: format!("no answer within {} s", limit.as_secs()),
        }),
    }
}

/// A SQLite path must not be a directory, and a file that exists and has bytes must
/// start with SQLite's header. Checked before connecting because sqlx's pool retries a
/// file that is not a database until its acquire timeout (30 s) and then reports a
/// timeout.
pub fn check_sqlite_header(path: &std::path::Path) -> Result<(), StoreError> {
    use std::io::Read;
    // A directory opens (and reads as an error) like no database at all; SQLite then
    // says "disk I/O error", and the lock's sidecar would be made beside it.
    if path.is_dir() {
        return Err(StoreError::IsDirectory {
            db: path.display().to_string(),
        });
    }
    let Ok(mut f) = std::fs::File::open(path) else {
        return Ok(()); // missing (created on open) or unreadable (sqlx says why)
    };
    let mut head = [0u8; 16];
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(()),
        }
    }
    if n > 0 && (n < head.len() || &head != b"SQLite format 3\0") {
        return Err(StoreError::NotSqlite {
            db: path.display().to_string(),
        });
    }
    Ok(())
}

/// A SQLite file's directory must be writable: SQLite creates `-wal` and `-shm` beside
/// it, and without them the pool retries until its acquire timeout (30 s).
fn check_writable_dir(path: &std::path::Path) -> Result<(), StoreError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return Ok(());
    };
    // SAFETY: access() on a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::NotFound {
            return Ok(()); // sqlx says which directory is missing
        }
        return Err(StoreError::ReadOnlyDir {
            db: path.display().to_string(),
            dir: dir.display().to_string(),
            why: e.to_string(),
        });
    }
    Ok(())
}

/// A SQLite file with tables but without memwatch's migration table is someone else's
/// database: memwatch does not add its tables to it.
/// Looked at read-only, before the pool's settings (WAL mode persists in the file) touch
/// it.
async fn refuse_foreign_sqlite(path: &std::path::Path, db: &str) -> Result<(), StoreError> {
    use sqlx::Row;
    if std::fs::metadata(path).map_or(true, |m| m.len() == 0) {
        return Ok(()); // new or empty: ours to create
    }
    let url = format!("sqlite://{}?mode=ro", path.display());
    let mut conn = AnyConnection::connect(&url)
        .await
        .map_err(|source| StoreError::Connect {
            url: db.to_string(),
            source,
        })?;
    let rows = sqlx::query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await;
    let _ = conn.close().await;
    let rows = rows?;
    let names: Vec<String> = rows
        .iter()
        .filter_map(|r| r.try_get::<String, _>(0).ok())
        .collect();
    if names.is_empty() || names.iter().any(|n| n == "_sqlx_migrations") {
        return Ok(());
    }
    let mut shown: Vec<&str> = names.iter().map(String::as_str).take(5).collect();
    if names.len() > 5 {
        shown.push("…");
    }
    Err(StoreError::Foreign {
        db: db.to_string(),
        tables: shown.join(", "),
    })
}

impl Store {
    /// Connects (SQLite: creates the file, WAL mode, NORMAL sync) and migrates.
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
            check_writable_dir(path)?;
            refuse_foreign_sqlite(path, db).await?;
        }
        let mut opts =
            AnyPoolOptions::new().max_connections(if backend == Backend::Sqlite { 4 } else { 8 });
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
                    conn.execute("PRAGMA synchronous=NORMAL").await?;
                    conn.execute("PRAGMA busy_timeout=10000").await?;
                    conn.execute("PRAGMA cache_size=-65536").await?;
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
            checkpoint_locks: live_at::CheckpointLocks::default(),
        })
    }
}

impl Store {
    /// Closes the pool; SQLite first copies its write-ahead log into the database file
    /// and empties it, so the `.db` file alone holds everything (a copied or attached
    /// `.db` without its `-wal` would otherwise look empty). Call before a command exits.
    pub async fn close(&self) -> Result<(), StoreError> {
        if self.backend == Backend::Sqlite {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(&self.pool)
                .await?;
        }
        self.pool.close().await;
        Ok(())
    }

    /// The run's start (CLOCK_MONOTONIC ns), or None when there is no such run.
    pub async fn run_t0(&self, run: i64) -> Result<Option<u64>, StoreError> {
        let row = sqlx::query("SELECT t0_mono_ns FROM runs WHERE id = $1")
            .bind(run)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(r) => Some(col_i64(&r, 0)?.max(0) as u64),
            None => None,
        })
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

/// Reads column `i` of `row` as i64.
pub fn col_i64(row: &AnyRow, i: usize) -> Result<i64, StoreError> {
    use sqlx::Row;
    Ok(row.try_get::<i64, _>(i)?)
}
