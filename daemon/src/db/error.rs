//! The storage error type.

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

impl StoreError {
    /// Whether the database refused for now because another connection or process holds
    /// a lock (SQLite `SQLITE_BUSY`/`SQLITE_LOCKED` and their extended codes such as
    /// `SQLITE_BUSY_SNAPSHOT`; PostgreSQL serialization failure, deadlock, lock not
    /// available): trying again later can work.
    pub fn is_busy(&self) -> bool {
        let StoreError::Sql(sqlx::Error::Database(db)) = self else {
            return false;
        };
        let code = db.code();
        let code = code.as_deref().unwrap_or("");
        if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
            // The primary result code is the low byte of an extended one.
            return code.parse::<i64>().is_ok_and(|n| matches!(n & 0xff, 5 | 6));
        }
        matches!(code, "40001" | "40P01" | "55P03")
    }
}
