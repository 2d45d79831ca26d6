//! The TCP ingest listener for agents (protocol: `memwatch_wire::ingest`, prose in the
//! daemon README).
//!
//! Owns per-connection validation: the hello and token, the wire preamble (format
//! version), batch envelopes, size limits and strict frame decoding. Anything invalid
//! closes that one connection with an error message to the peer and a logged reason;
//! other connections and stored data are untouched. Acknowledgements are written in
//! order, each only after the writer committed the batch.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use memwatch_wire::frame::decode_preamble;
use memwatch_wire::ingest::{
    decode_frames_strict, encode_ack, encode_error, BATCH_MAGIC, HELLO_MAGIC,
};
use memwatch_wire::PREAMBLE_LEN;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use super::writer::{Reply, WriterHandle};
use super::Batch;
use crate::metrics::Metrics;

/// Limits and credentials of the listener.
#[derive(Clone)]
pub struct TcpConfig {
    pub token: Option<String>,
    pub max_batch_bytes: u32,
    /// Unacknowledged batches one connection may have queued before reading pauses.
    pub window: usize,
    /// How long a peer may take to send its hello.
    pub hello_timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            token: None,
            max_batch_bytes: memwatch_wire::ingest::DEFAULT_MAX_BATCH_BYTES,
            window: 64,
            hello_timeout: Duration::from_secs(10),
        }
    }
}

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
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("ingest accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let writer = writer.clone();
        let metrics = metrics.clone();
        let cfg = cfg.clone();
        tokio::spawn(async move {
            Metrics::add(&metrics.connections_total, 1);
            metrics.connections_open.fetch_add(1, Ordering::Relaxed);
            handle(sock, peer, writer, metrics.clone(), cfg).await;
            metrics.connections_open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn handle(
    sock: TcpStream,
    peer: SocketAddr,
    writer: WriterHandle,
    metrics: Arc<Metrics>,
    cfg: TcpConfig,
) {
    let (rd, mut wr) = sock.into_split();
    let mut rd = BufReader::with_capacity(1 << 20, rd);
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
                    let _ = fail_tx.send(format!("storage failed: {e}")).await;
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
    let result = tokio::select! {
        r = read_loop(&mut rd, peer, &writer, &metrics, &cfg, &ack_tx) => r,
        Some(msg) = fail_rx.recv() => Err(proto(msg)),
    };
    drop(ack_tx);
    let mut wr = match acker.await {
        Ok(wr) => wr,
        Err(_) => return,
    };
    match result {
        Ok(()) => tracing::debug!(%peer, "ingest connection closed by peer"),
        Err(e) => {
            Metrics::add(&metrics.connections_rejected_total, 1);
            tracing::warn!(%peer, "closing ingest connection: {e}");
            let _ = wr.write_all(&encode_error(&e.to_string())).await;
        }
    }
    let _ = wr.shutdown().await;
}

async fn read_loop<R: AsyncRead + Unpin>(
    rd: &mut R,
    peer: SocketAddr,
    writer: &WriterHandle,
    metrics: &Metrics,
    cfg: &TcpConfig,
    ack_tx: &mpsc::Sender<(u64, u64, oneshot::Receiver<Reply>)>,
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
    let (token, node) = tokio::time::timeout(cfg.hello_timeout, hello)
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
    // One receive buffer per connection, reused: a fresh multi-MiB allocation per batch
    // cost a page fault per 4 KiB.
    let mut frames: Vec<u8> = Vec::new();
    loop {
        let mut magic = [0u8; 4];
        match rd.read_exact(&mut magic).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        if magic != BATCH_MAGIC {
            return Err(proto(format!(
                "garbage where a batch should start: {magic:02x?}"
            )));
        }
        let stream = rd.read_u64_le().await?;
        let seq = rd.read_u64_le().await?;
        let run_key = read_str(rd, "run key").await?;
        let nbytes = rd.read_u32_le().await?;
        if nbytes > cfg.max_batch_bytes {
            return Err(proto(format!(
                "batch of {nbytes} bytes exceeds the {} byte limit",
                cfg.max_batch_bytes
            )));
        }
        frames.clear();
        frames.resize(nbytes as usize, 0);
        rd.read_exact(&mut frames).await?;
        Metrics::add(&metrics.frame_bytes_total, nbytes as u64);
        let records = decode_frames_strict(&frames)
            .map_err(|e| proto(format!("stream {stream} batch {seq}: {e}")))?;
        let rx = writer
            .submit(Batch {
                node: node.clone(),
                stream,
                seq,
                run_key,
                records,
            })
            .await
            .map_err(proto)?;
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
