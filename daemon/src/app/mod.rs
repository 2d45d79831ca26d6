//! The HTTP face of the daemon: the router (each feature's routes merged), the
//! bearer-token check, the request size limit, the one error type ([`error`]) and its
//! extractors ([`extract`]), page rendering helpers ([`page`]), sign-in for browsers
//! (`login`), `/api/openapi.json` (`openapi`), `/metrics` and the static CSS/JS
//! (`web/static/`, compiled in). Features import only the leaf modules `state`, `error`,
//! `extract` and `page`; this module alone knows every feature.

pub(crate) mod error;
pub(crate) mod extract;
mod login;
pub mod openapi;
pub(crate) mod page;
pub(crate) mod state;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use error::AppError;
pub use state::AppState;

/// Builds the router; `max_body_bytes` limits request bodies (HTTP ingest, XLA dumps).
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    Router::new()
        .merge(crate::runs::routes())
        .merge(crate::peak::routes())
        .merge(crate::runtime::routes())
        .merge(crate::incidents::routes())
        .merge(crate::xla::routes())
        .merge(crate::gates::routes())
        .merge(crate::export::routes())
        .merge(crate::compare::routes())
        .merge(crate::ingest::http::routes())
        .route("/api/openapi.json", get(openapi_doc))
        .route("/metrics", get(metrics))
        .route("/login", get(login::page).post(login::submit))
        .route("/static/memwatch.css", get(css))
        .route("/static/memwatch.js", get(js))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(middleware::from_fn(error::answer_errors))
        .with_state(state)
}

async fn auth(
    State(st): State<AppState>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    if let Some(want) = &st.token {
        if req.uri().path() == "/login" {
            return next.run(req).await;
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let ok = bearer.is_some_and(|g| login::token_matches(g, want))
            || login::cookie_token(&headers)
                .is_some_and(|c| login::token_matches(c, &login::cookie_value(want)));
        if !ok {
            if login::wants_page(req.uri().path(), &headers) {
                let pq = req
                    .uri()
                    .path_and_query()
                    .map_or("/", |p| p.as_str())
                    .to_string();
                return login::to_login(&pq);
            }
            // A client that is not a browser gets the API's form on every path.
            return (
                axum::http::StatusCode::UNAUTHORIZED,
                Json(serde_json::json!({ "error": "missing or wrong bearer token" })),
            )
                .into_response();
        }
    }
    next.run(req).await
}

async fn openapi_doc() -> Json<serde_json::Value> {
    Json(openapi::document())
}

async fn metrics(State(st): State<AppState>) -> Result<Response, AppError> {
    let text = crate::metrics::render(&st.metrics, &st.store).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
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
