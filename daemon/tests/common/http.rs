//! Requests to the daemon's router in a test, without a socket.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

/// GET `uri`: the status and the body (up to 1 GiB) as text, invalid UTF-8 replaced.
pub async fn text(app: &axum::Router, uri: &str) -> (StatusCode, String) {
    let (status, bytes) = bytes(app, uri).await;
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// GET a page that must answer 200 with UTF-8 text.
pub async fn page(app: &axum::Router, uri: &str) -> String {
    let (status, bytes) = bytes(app, uri).await;
    assert_eq!(status, StatusCode::OK, "{uri}");
    String::from_utf8(bytes).unwrap()
}

async fn bytes(app: &axum::Router, uri: &str) -> (StatusCode, Vec<u8>) {
    let resp = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 30)
        .await
        .unwrap();
    (status, body.to_vec())
}
