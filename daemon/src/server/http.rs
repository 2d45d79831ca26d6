//! The HTTP listener of `memwatch serve`: HTTP/1.1 connections served by the router, at
//! most [`HttpLimits::max_connections`] at once and [`HttpLimits::max_connections_per_peer`]
//! from one peer (`ingest::peer`), each of which must send a request's headers within
//! [`HttpLimits::header_timeout`] (also while idle between keep-alive requests), so idle
//! or slow clients cannot hold memory or connection slots. A new connection without room
//! closes another (idle: without a complete request) as `ingest::conns` says, or is
//! answered 503 and closed. Each request carries its peer (a request extension) for
//! the ingest budget and the writer's turns.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::ingest::conns::{ConnLimits, ConnTable};

/// What an HTTP client may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    pub header_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            max_connections_per_peer: 64,
            header_timeout: Duration::from_secs(30),
        }
    }
}

const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
connection: close\r\ncontent-length: 50\r\n\r\n{\"error\": \"too many connections; try again later\"}";

/// Serves `app` on `listener` until the task is aborted.
pub(crate) async fn serve_http(listener: TcpListener, app: Router, limits: HttpLimits) {
    let table = ConnTable::new(ConnLimits {
        total: limits.max_connections,
        per_peer: limits.max_connections_per_peer,
    });
    loop {
        let (mut sock, remote) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("HTTP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (table, app) = (table.clone(), app.clone());
        tokio::spawn(async move {
            let peer = crate::ingest::tcp::peer_of(&sock, remote).await;
            let slot = match table.admit(peer) {
                Ok(s) => s,
                Err(why) => {
                    tracing::warn!(%peer, "refusing an HTTP connection: {why}");
                    let _ =
                        tokio::time::timeout(Duration::from_secs(1), sock.write_all(BUSY)).await;
                    return;
                }
            };
            // Idle (evictable first) until its first request's headers are complete.
            let waiting = std::sync::Mutex::new(Some(slot.idle()));
            let router = TowerToHyperService::new(app);
            let service = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
                if let Ok(mut w) = waiting.lock() {
                    w.take();
                }
                req.extensions_mut().insert(peer);
                hyper::service::Service::call(&router, req)
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(sock), service);
            let served = tokio::select! {
                r = conn => r,
                how = slot.evicted() => {
                    tracing::debug!(%remote, "HTTP connection closed to make room ({how:?})");
                    Ok(())
                }
            };
            if let Err(e) = served {
                tracing::debug!(%remote, "HTTP connection ended: {e}");
            }
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_busy_answer_states_its_length() {
        let text = std::str::from_utf8(super::BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
    }
}
