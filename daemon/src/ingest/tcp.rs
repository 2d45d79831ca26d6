//! The TCP ingest listener for agents (protocol: `memwatch_wire::ingest`, prose in the
//! daemon README).
//!
//! Owns per-connection validation: the hello and token, the wire preamble (format
//! version), batch envelopes, size limits and strict frame decoding. Anything invalid
//! closes that one connection with an error message to the peer and a logged reason;
//! other connections and stored data are untouched. Acknowledgements are written in
//! order, each only after the writer committed the batch.
//!
//! Also owns what a connection may hold: at most [`TcpConfig::max_connections`] at once,
//! [`TcpConfig::max_connections_per_peer`] from one peer (`conns` says which connection
//! makes room for a new one, and when it is refused); a batch's body is read into a buffer that grows as its
//! bytes arrive, after its size was charged to the raw pool of the memory budget (the
//! peer's share first), and is charged its decoded size (an upper bound from the frame headers) before it is
//! decoded; a connection has at most [`TcpConfig::window`] batches unacknowledged; one
//! that sends nothing for [`TcpConfig::idle_timeout`] between batches, or stalls inside a
//! batch for [`TcpConfig::read_timeout`], is closed.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use memwatch_wire::frame::decode_preamble;
use memwatch_wire::ingest::{
    decode_frames_strict, encode_ack, encode_error, BATCH_MAGIC, HELLO_MAGIC,
};
use memwatch_wire::PREAMBLE_LEN;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{timeout, timeout_at, Instant};

use super::budget::{decoded_bound, PeerBudget};
use super::conns::{ConnLimits, ConnTable, Evicted, Slot};
use super::peer::Peer;
use super::writer::{Reply, WriterHandle};
use super::{Batch, Sequencing};
use crate::metrics::Metrics;

/// Limits and credentials of the listener.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    pub token: Option<String>,
    pub max_batch_bytes: u32,
    /// Unacknowledged batches one connection may have queued before reading pauses.
    pub window: usize,
    /// How long a peer may take to send its hello.
    pub hello_timeout: Duration,
    /// How long a connection may send nothing between batches (an agent with nothing to
    /// send reconnects when it has).
    pub idle_timeout: Duration,
    /// How long a read inside a batch may wait for bytes; a whole batch must also arrive
    /// at one MiB/s or faster after that.
    pub read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one peer.
    pub max_connections_per_peer: usize,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            token: None,
            max_batch_bytes: memwatch_wire::ingest::DEFAULT_MAX_BATCH_BYTES,
            window: 64,
            hello_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            read_timeout: Duration::from_secs(30),
            max_connections: 256,
            max_connections_per_peer: 64,
        }
    }
}

/// The slowest a batch body may arrive, in bytes per second, after [`RATE_GRACE`].
const MIN_BODY_RATE: f64 = (1 << 20) as f64;
/// How long a batch body may take before [`MIN_BODY_RATE`] applies.
const RATE_GRACE: Duration = Duration::from_secs(5);

/// Size of a connection's read buffer (headers and small reads; bodies are read into
/// their own buffer).
const READ_BUFFER: usize = 64 << 10;

/// Why a connection was closed.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("{0}")]
    Protocol(String),
    #[error("read failed: {0}")]
    Io(#[from] std::io::Error),
}

fn proto(s: impl Into<String>) -> ConnError {
    ConnError::Protocol(s.into())
}

async fn read_str<R: AsyncRead + Unpin>(r: &mut R, what: &str) -> Result<String, ConnError> {
    let n = r.read_u16_le().await? as usize;
    let mut b = vec![0u8; n];
    r.read_exact(&mut b).await?;
    String::from_utf8(b).map_err(|_| proto(format!("{what} is not UTF-8")))
}

/// Accepts connections until the listener fails.
pub async fn serve_ingest(
    listener: TcpListener,
    writer: WriterHandle,
    metrics: Arc<Metrics>,
    cfg: TcpConfig,
) {
    let table = ConnTable::new(ConnLimits {
        total: cfg.max_connections,
        per_peer: cfg.max_connections_per_peer,
    });
    loop {
        let (mut sock, remote) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("ingest accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let table = table.clone();
        let writer = writer.clone();
        let metrics = metrics.clone();
        let cfg = cfg.clone();
        tokio::spawn(async move {
            let peer = peer_of(&sock, remote).await;
            let slot = match table.admit(peer) {
                Ok(s) => s,
                Err(why) => {
                    Metrics::add(&metrics.connections_rejected_total, 1);
                    tracing::warn!(%peer, "refusing an ingest connection: {why}");
                    let msg = encode_error(&why.to_string());
                    let _ = timeout(Duration::from_secs(1), sock.write_all(&msg)).await;
                    return;
                }
            };
            Metrics::add(&metrics.connections_total, 1);
            metrics.connections_open.fetch_add(1, Ordering::Relaxed);
            handle(
                sock,
                remote,
                writer.lane(peer),
                peer,
                metrics.clone(),
                cfg,
                slot,
            )
            .await;
            metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// The peer of an accepted connection (reads `/proc`, off the async threads).
pub(crate) async fn peer_of(sock: &TcpStream, remote: SocketAddr) -> Peer {
    let Ok(local) = sock.local_addr() else {
        return Peer::of(remote, remote);
    };
    tokio::task::spawn_blocking(move || Peer::of(remote, local))
        .await
        .unwrap_or(Peer {
            ip: remote.ip().to_canonical(),
            uid: None,
        })
}

async fn handle(
    sock: TcpStream,
    remote: SocketAddr,
    writer: WriterHandle,
    peer: Peer,
    metrics: Arc<Metrics>,
    cfg: TcpConfig,
    slot: Slot,
) {
    let (rd, mut wr) = sock.into_split();
    let mut rd = BufReader::with_capacity(READ_BUFFER, rd);
    let (ack_tx, mut ack_rx) =
        mpsc::channel::<(u64, u64, oneshot::Receiver<Reply>)>(cfg.window.max(1));
    // Acks go out in order; a failed commit is reported and ends the connection.
    let (fail_tx, mut fail_rx) = mpsc::channel::<String>(1);
    let acker = tokio::spawn(async move {
        while let Some((stream, seq, rx)) = ack_rx.recv().await {
            match rx.await {
                Ok(Ok(_)) => {
                    if wr.write_all(&encode_ack(stream, seq)).await.is_err() {
                        return wr;
                    }
                }
                Ok(Err(e)) => {
                    let _ = fail_tx.send(e.to_string()).await;
                    return wr;
                }
                Err(_) => {
                    let _ = fail_tx.send("the writer stopped".into()).await;
                    return wr;
                }
            }
        }
        wr
    });
    let budget = writer.budget().peer(peer);
    let result = tokio::select! {
        r = read_loop(&mut rd, remote, &writer, &budget, &metrics, &cfg, &ack_tx, &slot) => r,
        Some(msg) = fail_rx.recv() => Err(proto(msg)),
        how = slot.evicted() => Err(proto(match how {
            Evicted::Idle => "closed while idle: the connection limit was reached and another \
                              client connected (reconnect to send more)",
            Evicted::Busiest => "closed: the connection limit was reached, this client holds \
                                 the most connections and another client connected \
                                 (reconnect to send more)",
        })),
    };
    // Reading stopped: its buffer goes now (acknowledgements may still go out).
    drop(rd);
    drop(slot);
    drop(ack_tx);
    let mut wr = match acker.await {
        Ok(wr) => wr,
        Err(_) => return,
    };
    match result {
        Ok(()) => tracing::debug!(%remote, "ingest connection closed by peer"),
        Err(e) => {
            Metrics::add(&metrics.connections_rejected_total, 1);
            tracing::warn!(%remote, %peer, "closing ingest connection: {e}");
            let _ = timeout(
                Duration::from_secs(1),
                wr.write_all(&encode_error(&e.to_string())),
            )
            .await;
        }
    }
    let _ = timeout(Duration::from_secs(1), wr.shutdown()).await;
}

/// `what` must finish within `limit`.
async fn within<T>(
    limit: Duration,
    what: &str,
    f: impl std::future::Future<Output = Result<T, ConnError>>,
) -> Result<T, ConnError> {
    timeout(limit, f).await.map_err(|_| {
        proto(format!(
            "{what}: nothing received for {} s",
            limit.as_secs()
        ))
    })?
}

/// Reads `n` bytes into a buffer that grows as they arrive (a header that claims a large
/// batch and sends nothing costs nothing), each read within `read_timeout`, all by
/// `deadline`.
async fn read_body<R: AsyncRead + Unpin>(
    rd: &mut R,
    n: usize,
    read_timeout: Duration,
    deadline: Instant,
) -> Result<Vec<u8>, ConnError> {
    const STEP: usize = 1 << 20;
    let started = Instant::now();
    let mut buf: Vec<u8> = Vec::with_capacity(n.min(STEP));
    while buf.len() < n {
        if buf.len() == buf.capacity() {
            buf.reserve_exact((n - buf.len()).min(buf.capacity().max(STEP)));
        }
        let room = (buf.capacity() - buf.len()).min(n - buf.len());
        let have = buf.len();
        // The body holds its whole size of the raw budget while it arrives: after a
        // short grace, bytes must keep coming at MIN_BODY_RATE, so a sender that
        // trickles cannot hold it (and every batch queued behind it) for long.
        let pace = started + RATE_GRACE + Duration::from_secs_f64(have as f64 / MIN_BODY_RATE);
        let mut limited = (&mut *rd).take(room as u64);
        let read = limited.read_buf(&mut buf);
        let got = timeout_at(deadline.min(pace), timeout(read_timeout, read))
            .await
            .map_err(|_| {
                proto(format!(
                    "a batch of {n} bytes arrived slower than 1 MiB/s ({have} bytes in {:.0} s)",
                    started.elapsed().as_secs_f64()
                ))
            })?
            .map_err(|_| {
                proto(format!(
                    "a batch stalled: nothing received for {} s",
                    read_timeout.as_secs()
                ))
            })??;
        if got == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
    }
    Ok(buf)
}

#[allow(clippy::too_many_arguments)]
async fn read_loop<R: AsyncBufRead + Unpin>(
    rd: &mut R,
    peer: SocketAddr,
    writer: &WriterHandle,
    budget: &PeerBudget,
    metrics: &Metrics,
    cfg: &TcpConfig,
    ack_tx: &mpsc::Sender<(u64, u64, oneshot::Receiver<Reply>)>,
    slot: &Slot,
) -> Result<(), ConnError> {
    let hello = async {
        let mut magic = [0u8; 8];
        rd.read_exact(&mut magic).await?;
        if magic != HELLO_MAGIC {
            return Err(proto("not a memwatch ingest connection (bad hello magic)"));
        }
        let token = read_str(rd, "token").await?;
        let node = read_str(rd, "node name").await?;
        let mut pre = [0u8; PREAMBLE_LEN];
        rd.read_exact(&mut pre).await?;
        decode_preamble(&pre).map_err(|e| proto(e.to_string()))?;
        Ok::<_, ConnError>((token, node))
    };
    let (token, node) = timeout(cfg.hello_timeout, hello)
        .await
        .map_err(|_| proto("no hello within the time limit"))??;
    if let Some(want) = &cfg.token {
        if !constant_time_eq(want.as_bytes(), token.as_bytes()) {
            return Err(proto("bad or missing token"));
        }
    }
    if node.is_empty() {
        return Err(proto("empty node name"));
    }
    tracing::info!(%peer, %node, "agent connected");
    loop {
        let mut magic = [0u8; 4];
        let waiting = slot.idle();
        let next = timeout(cfg.idle_timeout, rd.read_exact(&mut magic)).await;
        drop(waiting);
        match next {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {
                return Err(proto(format!(
                    "idle for {} s; closing (reconnect to send more)",
                    cfg.idle_timeout.as_secs()
                )))
            }
        }
        if magic != BATCH_MAGIC {
            return Err(proto(format!(
                "garbage where a batch should start: {magic:02x?}"
            )));
        }
        let (stream, seq, run_key, nbytes) = within(cfg.read_timeout, "a batch header", async {
            let stream = rd.read_u64_le().await?;
            let seq = rd.read_u64_le().await?;
            let run_key = read_str(rd, "run key").await?;
            let nbytes = rd.read_u32_le().await?;
            Ok((stream, seq, run_key, nbytes))
        })
        .await?;
        if nbytes > cfg.max_batch_bytes {
            return Err(proto(format!(
                "batch of {nbytes} bytes exceeds the {} byte limit",
                cfg.max_batch_bytes
            )));
        }
        let nbytes = nbytes as usize;
        // A header alone holds no memory: the body's size is charged once its first
        // bytes are here.
        if nbytes > 0 {
            within(cfg.read_timeout, "a batch body", async {
                rd.fill_buf().await.map(drop).map_err(ConnError::from)
            })
            .await?;
        }
        let raw = budget
            .raw("a batch", nbytes)
            .await
            .map_err(|e| proto(e.to_string()))?;
        let deadline =
            Instant::now() + cfg.read_timeout + Duration::from_secs((nbytes >> 20) as u64);
        let frames = read_body(rd, nbytes, cfg.read_timeout, deadline).await?;
        Metrics::add(&metrics.frame_bytes_total, nbytes as u64);
        let decoded = budget
            .decoded(decoded_bound(&frames))
            .await
            .map_err(|e| proto(format!("stream {stream} batch {seq}: {e}")))?;
        let records = decode_frames_strict(&frames)
            .map_err(|e| proto(format!("stream {stream} batch {seq}: {e}")))?;
        drop(frames);
        drop(raw);
        let batch = Batch {
            node: node.clone(),
            stream,
            seq,
            run_key,
            records,
        };
        let rx = writer
            .submit(batch, Sequencing::Consecutive, decoded)
            .map_err(|e| proto(e.to_string()))?;
        ack_tx
            .send((stream, seq, rx))
            .await
            .map_err(|_| proto("acknowledgement task stopped"))?;
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
