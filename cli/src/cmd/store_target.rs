//! Where a command stores a capture: a database (`--db`) or a daemon (`--daemon`). Shared
//! by `memwatch import` and the commands that store their capture when it is finished,
//! and by the XLA-dump attachment that follows an import.

use anyhow::{bail, Context, Result};
use memwatch_daemon::Store;

/// Where to put a capture.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Db(&'a str),
    Daemon {
        url: &'a str,
        token: Option<&'a str>,
    },
}

/// The base of a `--daemon` URL, or an error saying what is expected.
pub fn daemon_base(url: &str) -> Result<&str> {
    let base = url.trim_end_matches('/');
    if !base.starts_with("http://") {
        bail!("--daemon {url}: expected an http://HOST:PORT URL of `memwatch serve --listen`");
    }
    Ok(base)
}

/// The HTTP client of every call to a daemon: no call waits without end on a daemon that
/// stopped answering (stopped, hung, a full socket buffer). Each deadline bounds one
/// step (connecting, or a read or write that makes no progress), not a whole transfer.
pub fn http() -> &'static ureq::Agent {
    static AGENT: std::sync::OnceLock<ureq::Agent> = std::sync::OnceLock::new();
    AGENT.get_or_init(|| {
        ureq::AgentBuilder::new()
            .timeout_connect(std::time::Duration::from_secs(10))
            .timeout_read(std::time::Duration::from_secs(120))
            .timeout_write(std::time::Duration::from_secs(120))
            .build()
    })
}

/// Opens the database `db`, runs `f` on it in a one-thread runtime, and closes it
/// (folding a SQLite write-ahead log into the file) whatever `f` returned.
pub fn with_store<T>(db: &str, f: impl AsyncFnOnce(&Store) -> Result<T>) -> Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        let name = memwatch_daemon::redact(db);
        let store = Store::open(db)
            .await
            .with_context(|| format!("database {name}"))?;
        let out = f(&store).await;
        let closed = store
            .close()
            .await
            .with_context(|| format!("closing {name}"));
        let out = out?;
        closed?;
        Ok(out)
    })
}

/// `POST {daemon}{path}` with a JSON body (and the bearer token); `what` names the body in
/// the error when the daemon refuses it.
pub fn post_json(
    url: &str,
    token: Option<&str>,
    path: &str,
    body: &[u8],
    what: &str,
) -> Result<()> {
    let base = daemon_base(url)?;
    let mut req = http()
        .post(&format!("{base}{path}"))
        .set("content-type", "application/json");
    if let Some(t) = token {
        req = req.set("authorization", &format!("Bearer {t}"));
    }
    match req.send_bytes(body) {
        Ok(_) => Ok(()),
        Err(ureq::Error::Status(code, r)) => {
            let msg = r.into_string().unwrap_or_default();
            bail!("daemon {base} refused {what}: HTTP {code} {msg}")
        }
        Err(e) => bail!("cannot reach daemon {base}: {e}"),
    }
}
