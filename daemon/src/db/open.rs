//! Checks made before a pool connects, so that a wrong `--db` fails at once with a clear
//! message instead of after sqlx's 30 s acquire timeout: a PostgreSQL server that does not
//! answer, a SQLite path that is a directory or not a database, a directory SQLite cannot
//! write its log into, a SQLite file of another program.

use std::time::Duration;

use sqlx::{AnyConnection, Connection};

use super::{redact, StoreError};

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
pub(super) fn check_writable_dir(path: &std::path::Path) -> Result<(), StoreError> {
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
pub(super) async fn refuse_foreign_sqlite(
    path: &std::path::Path,
    db: &str,
) -> Result<(), StoreError> {
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
    let names: Result<Vec<String>, sqlx::Error> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await;
    let _ = conn.close().await;
    let names = names?;
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
