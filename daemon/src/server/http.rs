//! The HTTP listener of `memwatch serve`: HTTP/1.1 connections served by the router, at
//! most [`HttpLimits::max_connections`] at once (more are answered 503 and closed), each
//! of which must send a request's headers within [`HttpLimits::header_timeout`] (also
//! while idle between keep-alive requests), so idle or slow clients cannot hold memory
//! or connection slots.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What an HTTP client may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            header_timeout: Duration::from_secs(30),
        }
    }
}

const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
connection: close\r\ncontent-length: 50\r\n\r\n{\"error\": \"too many connections; try again later\"}";

/// Serves `app` on `listener` until the task is aborted.
pub(crate) async fn serve_http(listener: TcpListener, app: Router, limits: HttpLimits) {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let (mut sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("HTTP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = open.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "refusing an HTTP connection: {} open", limits.max_connections);
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), sock.write_all(BUSY)).await;
            });
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(sock), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(%peer, "HTTP connection ended: {e}");
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
