//! The browser dashboard: server-side rendered pages (askama templates in
//! `web/templates/`), SVG charts (plotters, see `chart`), exports, a server-sent-events
//! stream for live runs, and the static CSS/JS (`web/static/`, compiled in).
//!
//! Owns the page routes only; it reads through `store::query` and `web::data` and never
//! writes. Routes are merged into the API router, so the same bearer-token rule applies.

pub mod chart;
pub mod data;
pub mod export;
pub mod fmt;
mod pages;
pub mod runtime;
pub mod views;

use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::api::AppState;
use crate::store::StoreError;

/// The dashboard's routes (merged into [`crate::api::router`]).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(pages::overview))
        .route("/runs/{id}", get(pages::run))
        .route("/runs/{id}/chart.svg", get(pages::chart_svg))
        .route("/runs/{id}/lanes", get(pages::lanes_fragment))
        .route("/runs/{id}/live", get(pages::live))
        .route("/runs/{id}/peak", get(pages::peak))
        .route("/runs/{id}/export/chart.svg", get(pages::export_svg))
        .route("/runs/{id}/export/trace.jsonl", get(pages::export_jsonl))
        .route(
            "/runs/{id}/export/perfetto.json",
            get(pages::export_perfetto),
        )
        .route("/compare", get(pages::compare))
        .route("/incidents", get(pages::incidents))
        .route("/xla", get(pages::xla))
        .route("/gates", get(pages::gates))
        .route("/static/memwatch.css", get(css))
        .route("/static/memwatch.js", get(js))
}

const CSS: &str = include_str!("../../../web/static/memwatch.css");
const JS: &str = include_str!("../../../web/static/memwatch.js");

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        CSS,
    )
        .into_response()
}

async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        JS,
    )
        .into_response()
}

/// A page-level error, rendered as an HTML page with the right status.
#[derive(Debug)]
pub enum WebError {
    NotFound(String),
    Bad(String),
    Internal(String),
}

impl From<StoreError> for WebError {
    fn from(e: StoreError) -> Self {
        tracing::error!("dashboard query failed: {e}");
        WebError::Internal(e.to_string())
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let (status, title, message) = match self {
            WebError::NotFound(m) => (StatusCode::NOT_FOUND, "Not found", m),
            WebError::Bad(m) => (StatusCode::BAD_REQUEST, "Bad request", m),
            WebError::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, "Server error", m),
        };
        let page = views::ErrorPage {
            title: title.into(),
            message,
        };
        match askama::Template::render(&page) {
            Ok(html) => (status, Html(html)).into_response(),
            Err(e) => (status, format!("{title}: {e}")).into_response(),
        }
    }
}

/// Renders a template into an HTML response.
pub fn html<T: askama::Template>(t: &T) -> Result<Response, WebError> {
    t.render()
        .map(|s| Html(s).into_response())
        .map_err(|e| WebError::Internal(format!("template failed: {e}")))
}
