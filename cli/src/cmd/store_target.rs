//! Where a command stores a capture: a database (`--db`) or a daemon (`--daemon`). Shared
//! by `memwatch import` and the commands that store their capture when it is finished,
//! and by the XLA-dump attachment that follows an import.

use anyhow::{bail, Result};

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
