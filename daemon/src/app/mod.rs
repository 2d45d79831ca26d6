//! The HTTP face of the daemon: the router (each feature's routes merged), the
//! bearer-token check (and, before it, the refusal of requests a web page could forge:
//! `same_origin`), the security headers of every answer, the request size limit, the one error type ([`error`]) and its
//! extractors ([`extract`]), page rendering helpers ([`page`]), sign-in for browsers
//! (`login`), `/api/openapi.json` (`openapi`), `/metrics` and the static CSS/JS
//! (`web/static/`, compiled in). Features import only the leaf modules `state`, `error`,
//! `extract` and `page`; this module alone knows every feature.

pub(crate) mod error;
pub(crate) mod extract;
mod login;
pub mod openapi;
pub(crate) mod page;
mod same_origin;
pub(crate) mod state;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use error::AppError;
pub use state::AppState;

/// The largest request body (`router`'s `max_body_bytes`), for handlers that read a body
/// as a stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimit(pub usize);

/// Builds the router; `max_body_bytes` limits request bodies (HTTP ingest, XLA dumps).
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    Router::new()
        .merge(crate::runs::routes())
        .merge(crate::peak::routes())
        .merge(crate::runtime::routes())
        .merge(crate::framework::routes())
        .merge(crate::incidents::routes())
        .merge(crate::xla::routes())
        .merge(crate::gates::routes())
        .merge(crate::export::routes())
        .merge(crate::compare::routes())
        .merge(crate::snapshot::routes())
        .merge(crate::ingest::http::routes())
        .route("/api/openapi.json", get(openapi_doc))
        .route("/metrics", get(metrics))
        .route("/login", get(login::page).post(login::submit))
        .route("/static/memwatch.css", get(css))
        .route("/static/memwatch.js", get(js))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::Extension(BodyLimit(max_body_bytes)))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(middleware::from_fn(error::answer_errors))
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

async fn auth(
    State(st): State<AppState>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    if let Some(refused) = same_origin::refusal(req.method(), &headers, st.token.is_some()) {
        return refused.into_response();
    }
    if let Some(want) = &st.token {
        if req.uri().path() == "/login" {
            return next.run(req).await;
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        let ok = bearer.is_some_and(|g| login::token_matches(g, want))
            || login::session_valid(&headers, want);
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

/// The token of an `Authorization: Bearer TOKEN` value; the scheme's case does not
/// matter (RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// What every answer carries: no script, style, image or connection from elsewhere, no
/// framing by another page, no content-type guessing. Inline `style` attributes (the
/// templates' and the charts' SVG) are allowed; scripts only from `/static/`.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    res
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
