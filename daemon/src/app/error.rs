//! The daemon's one HTTP error type, [`AppError`]: a status and a message naming what is
//! wrong. Handlers of every feature return it; where the request went decides how it is
//! answered ([`answer_errors`], a layer over the whole router): under `/api/` and at
//! `/metrics` (machine clients) as `{"error": "..."}`, everywhere else (the dashboard) as
//! the HTML error page with the same status.

use askama::Template;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::Json;

use crate::db::StoreError;

/// An HTTP error: status plus a message.
#[derive(Debug)]
pub(crate) struct AppError {
    status: StatusCode,
    message: String,
}

impl AppError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// 400: the request is wrong.
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404: what the request names does not exist.
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 500: the daemon failed.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        tracing::error!("query failed: {e}");
        Self::internal(e.to_string())
    }
}

/// The error of a response, carried to [`answer_errors`] in the response's extensions.
#[derive(Clone)]
struct Failure(String);

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let mut r = self.status.into_response();
        r.extensions_mut().insert(Failure(self.message));
        r
    }
}

/// Whether a request path is answered in JSON: the API and the Prometheus endpoint.
fn machine_path(path: &str) -> bool {
    path.starts_with("/api/") || path == "/metrics"
}

/// The layer that turns an [`AppError`] response into its final form (see the module
/// docs); other responses pass unchanged.
pub(crate) async fn answer_errors(req: Request, next: Next) -> Response {
    let machine = machine_path(req.uri().path());
    let mut res = next.run(req).await;
    let Some(Failure(message)) = res.extensions_mut().remove::<Failure>() else {
        return res;
    };
    let status = res.status();
    if machine {
        return (status, Json(serde_json::json!({ "error": message }))).into_response();
    }
    let title = match status {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::BAD_REQUEST => "Bad request",
        _ => "Server error",
    };
    let page = ErrorPage {
        title: title.into(),
        message,
    };
    match page.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => (status, format!("{title}: {e}")).into_response(),
    }
}

/// The dashboard's error page.
#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    title: String,
    message: String,
}
