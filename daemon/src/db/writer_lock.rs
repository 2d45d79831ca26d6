//! One writer per database. An [`Ingestor`](super::Ingestor) keeps run state (open
//! chunks, live sets, per-stream sequence numbers) in memory, so two processes ingesting
//! into one database would each accept batches of the same run and corrupt it. Before a
//! process ingests it takes a [`WriterLock`]:
//!
//! - SQLite: an exclusive `flock` on a sidecar file `<db>.memwatch-writer` beside the
//!   database's real path (symlinks resolved; opened with O_NOFOLLOW) holding the
//!   holder's pid (a sidecar, because closing any descriptor of the database file itself
//!   would drop SQLite's own POSIX locks). A hard link to the database under another
//!   name is not recognised;
//! - PostgreSQL: a session-level advisory lock held on a dedicated connection.
//!
//! The kernel (or the server) releases the lock when the holder dies, so a crashed daemon
//! never leaves a database locked. Readers (`gate`, queries) take no lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use sqlx::{AnyConnection, Connection};

use super::{database_url, redact, Backend, StoreError};

/// The advisory-lock key PostgreSQL sessions use ("memwatch" in ASCII, as i64).
const PG_LOCK_KEY: i64 = 0x6d65_6d77_6174_6368;

/// Held while a process ingests into a database; dropping it releases the database.
pub struct WriterLock {
    _held: Held,
}

/// What keeps the lock: holding it is its only use.
enum Held {
    File {
        _locked: File,
    },
    Postgres {
        _session: AnyConnection,
    },
    /// An in-memory SQLite database is private to its process.
    Nothing,
}

impl std::fmt::Debug for WriterLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriterLock")
    }
}

/// The file path of a SQLite `--db` (plain path or `sqlite:` URL), or None for
/// `:memory:` databases.
pub fn sqlite_path(db: &str) -> Option<PathBuf> {
    let rest = db
        .strip_prefix("sqlite://")
        .or_else(|| db.strip_prefix("sqlite:"))
        .unwrap_or(db);
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && !path.contains(":memory:")).then(|| PathBuf::from(path))
}

/// The sidecar lock file of a SQLite database file.
pub fn sidecar(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".memwatch-writer");
    PathBuf::from(s)
}

impl WriterLock {
    /// Takes the database's writer lock, or fails at once naming the holder.
    pub async fn acquire(db: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let (url, backend) = database_url(db)?;
        match backend {
            Backend::Sqlite => match sqlite_path(db) {
                Some(path) => Self::acquire_file(&path),
                None => Ok(Self {
                    _held: Held::Nothing,
                }),
            },
            Backend::Postgres => Self::acquire_postgres(&url).await,
        }
    }

    fn acquire_file(db: &Path) -> Result<Self, StoreError> {
        // Not a database: refused before any file is made beside it.
        super::check_sqlite_header(db)?;
        // One lock per file, whatever path names it: symlinks resolved (a hard link
        // elsewhere is not seen: say so in the docs).
        let real = canonical(db);
        let path = sidecar(&real);
        let io = |source: std::io::Error| StoreError::Lock {
            db: db.display().to_string(),
            what: format!("cannot open lock file {}: {source}", path.display()),
        };
        use std::os::unix::fs::OpenOptionsExt;
        // O_NOFOLLOW: a symlink planted at the lock file's name is never written through.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(StoreError::InUse {
                    db: db.display().to_string(),
                    holder: holder_text(holder.trim()),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        // Ours now: say who holds it, for the next one's message.
        let write = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{}", std::process::id()));
        write.map_err(io)?;
        Ok(Self {
            _held: Held::File { _locked: file },
        })
    }

    async fn acquire_postgres(url: &str) -> Result<Self, StoreError> {
        // A server that refuses or does not answer fails within CONNECT_TIMEOUT, with
        // the same message as Store::open.
        super::probe_postgres(url, super::CONNECT_TIMEOUT).await?;
        let shown = redact(url);
        let mut conn = AnyConnection::connect(url)
            .await
            .map_err(|source| StoreError::Connect {
                url: shown.clone(),
                source,
            })?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(PG_LOCK_KEY)
            .fetch_one(&mut conn)
            .await?;
        if !got {
            let holder: Option<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND ((classid::bigint << 32) | objid::bigint) = $1 LIMIT 1",
            )
            .bind(PG_LOCK_KEY)
            .fetch_optional(&mut conn)
            .await
            .ok()
            .flatten();
            let _ = conn.close().await;
            return Err(StoreError::InUse {
                db: shown,
                holder: holder.map_or_else(
                    || "another memwatch process".to_string(),
                    |p| format!("another memwatch process (server backend pid {p})"),
                ),
            });
        }
        Ok(Self {
            _held: Held::Postgres { _session: conn },
        })
    }
}

/// The database file's real path: symlinks resolved; for a file not created yet, its
/// directory's real path and its name.
fn canonical(db: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(db) {
        return p;
    }
    // A link to a database not created yet: follow it by hand (bounded, as the kernel).
    let mut db = db.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&db) {
            Ok(target) => {
                db = match db.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                }
            }
            Err(_) => break,
        }
    }
    let db = db.as_path();
    let dir = match db.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(dir), db.file_name()) {
        (Ok(d), Some(name)) => d.join(name),
        _ => db.to_path_buf(),
    }
}

fn holder_text(pid: &str) -> String {
    match pid.parse::<u32>() {
        Ok(p) => format!("memwatch pid {p}"),
        Err(_) => "another memwatch process".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_paths_of_plain_paths_and_urls() {
        assert_eq!(sqlite_path("a/b.db"), Some(PathBuf::from("a/b.db")));
        assert_eq!(
            sqlite_path("sqlite:///tmp/x.db?mode=rwc"),
            Some(PathBuf::from("/tmp/x.db"))
        );
        assert_eq!(sqlite_path("sqlite:x.db"), Some(PathBuf::from("x.db")));
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(
            sidecar(Path::new("/d/m.db")),
            PathBuf::from("/d/m.db.memwatch-writer")
        );
    }

    /// A symlink to the database is the same database; a symlink planted at the lock
    /// file's name is refused, never written through.
    #[tokio::test]
    async fn symlinks_neither_bypass_nor_redirect_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("m.db");
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&db, &link).unwrap();
        let first = WriterLock::acquire(db.to_str().unwrap()).await.unwrap();
        let err = WriterLock::acquire(link.to_str().unwrap())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("in use"), "{err}");
        drop(first);

        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "precious").unwrap();
        let other = dir.path().join("o.db");
        std::os::unix::fs::symlink(&victim, sidecar(&other)).unwrap();
        assert!(WriterLock::acquire(other.to_str().unwrap()).await.is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[tokio::test]
    async fn a_second_writer_is_refused_naming_the_first_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("m.db");
        let db = db.to_str().unwrap();
        let first = WriterLock::acquire(db).await.unwrap();
        let err = WriterLock::acquire(db).await.unwrap_err().to_string();
        assert!(
            err.contains("m.db")
                && err.contains(&format!("memwatch pid {}", std::process::id()))
                && err.contains("in use"),
            "{err}"
        );
        drop(first);
        WriterLock::acquire(db).await.unwrap();
    }
}
