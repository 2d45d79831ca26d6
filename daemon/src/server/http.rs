//! The HTTP listener of `memwatch serve`: HTTP/1.1 connections served by the router, at
//! most [`HttpLimits::max_connections`] at once, each of which must send a request's
//! headers within [`HttpLimits::header_timeout`] (also while idle between keep-alive
//! requests), so idle or slow clients cannot hold memory or connection slots. At the
//! limit a new connection closes the one that has waited the longest without completing
//! a request (`ingest::idle`); only when every connection has a request in progress is it
//! answered 503 and closed.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::ingest::idle::IdleConns;

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
    let idle = IdleConns::default();
    loop {
        let (mut sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("HTTP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = open.clone().try_acquire_owned().ok();
        let (open, idle, app) = (open.clone(), idle.clone(), app.clone());
        tokio::spawn(async move {
            let slot = match slot {
                Some(s) => Some(s),
                None if idle.close_oldest() => {
                    tokio::time::timeout(EVICTION_WAIT, open.acquire_owned())
                        .await
                        .ok()
                        .and_then(Result::ok)
                }
                None => None,
            };
            let Some(slot) = slot else {
                tracing::warn!(%peer, "refusing an HTTP connection: {} open", limits.max_connections);
                let _ = tokio::time::timeout(Duration::from_secs(1), sock.write_all(BUSY)).await;
                return;
            };
            // Idle (evictable) until its first request's headers are complete.
            let waiting = std::sync::Mutex::new(Some(idle.enter()));
            let evicted = waiting
                .lock()
                .map(|w| w.as_ref().map(|i| i.signal()))
                .ok()
                .flatten();
            let router = TowerToHyperService::new(app);
            let service = hyper::service::service_fn(move |req| {
                if let Ok(mut w) = waiting.lock() {
                    w.take();
                }
                hyper::service::Service::call(&router, req)
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(sock), service);
            let served = match evicted {
                Some(n) => tokio::select! {
                    r = conn => r,
                    () = n.notified() => {
                        tracing::debug!(%peer, "HTTP connection closed: idle at the limit");
                        Ok(())
                    }
                },
                None => conn.await,
            };
            if let Err(e) = served {
                tracing::debug!(%peer, "HTTP connection ended: {e}");
            }
            drop(slot);
        });
    }
}

/// How long a connection at the limit waits for the idle one it closed to go.
const EVICTION_WAIT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    #[test]
    fn the_busy_answer_states_its_length() {
        let text = std::str::from_utf8(super::BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
    }
}
