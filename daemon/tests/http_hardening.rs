//! Small HTTP hardening (issue 25 item 8): the bearer scheme is case-insensitive (RFC
//! 9110), every answer carries Content-Security-Policy, X-Content-Type-Options and
//! X-Frame-Options, and `/compare` with runs that do not exist answers 404.

mod common;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use common::*;
use tower::ServiceExt;

async fn call(app: &axum::Router, uri: &str, auth: Option<&str>) -> axum::response::Response {
    let mut req = Request::get(uri).header(header::ACCEPT, "text/html");
    if let Some(a) = auth {
        req = req.header(header::AUTHORIZATION, a);
    }
    app.clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn bearer_scheme_any_case_security_headers_and_compare_404() {
    let dbs = dbs("http_hardening").await;
    let url = &dbs.urls[0];
    let (app, _store) = test_app(url, Some("t0k-en"), 1 << 20).await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let r = call(&app, "/api/runs", Some(&format!("{scheme} t0k-en"))).await;
        assert_eq!(r.status(), StatusCode::OK, "scheme {scheme}");
    }
    for wrong in ["bearer t0k-eN", "Basic t0k-en", "bearert0k-en", "t0k-en"] {
        let r = call(&app, "/api/runs", Some(wrong)).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{wrong}");
    }
    let auth = Some("Bearer t0k-en");
    for (uri, auth, want) in [
        ("/", auth, StatusCode::OK),
        ("/api/runs", auth, StatusCode::OK),
        ("/api/runs/424242", auth, StatusCode::NOT_FOUND),
        ("/api/runs", None, StatusCode::UNAUTHORIZED),
        ("/compare?a=424242&b=424243", auth, StatusCode::NOT_FOUND),
        ("/compare", auth, StatusCode::OK),
    ] {
        let r = call(&app, uri, auth).await;
        assert_eq!(r.status(), want, "{uri}");
        let h = r.headers();
        let csp = h
            .get(header::CONTENT_SECURITY_POLICY)
            .unwrap_or_else(|| panic!("{uri}: no Content-Security-Policy"))
            .to_str()
            .unwrap();
        assert!(
            csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{uri}: {csp}"
        );
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{uri}");
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY", "{uri}");
    }
}
