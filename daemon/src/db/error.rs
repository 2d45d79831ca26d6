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
