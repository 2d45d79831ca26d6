//! Request extractors whose rejections are an [`AppError`] with the rejection's status
//! (400 for a query string or path that does not parse, 413 for a body over the limit)
//! instead of axum's plain text, so they are answered like every other error: as
//! `{"error": "..."}` under `/api`, as the HTML error page on the dashboard.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use serde::de::DeserializeOwned;

use super::error::AppError;
use super::state::AppState;
use crate::ingest::budget::Charge;
use crate::ingest::peer::Peer;

fn reject(rejection: impl IntoResponse + std::fmt::Display) -> AppError {
    let text = rejection.to_string();
    AppError::new(rejection.into_response().status(), text)
}

/// `Query<T>` rejecting with an [`AppError`].
pub(crate) struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Self(v))
            .map_err(reject)
    }
}

/// `Path<T>` rejecting with an [`AppError`].
pub(crate) struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, AppError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(v)| Self(v))
            .map_err(reject)
    }
}

/// The whole request body, rejecting with an [`AppError`] (413 over the body limit; 503
/// when the memory budget has no room for it within its wait limit). The body's bytes
/// are charged to the budget's raw pool, the request's peer's share first (its
/// `Content-Length`, else the pool's size, which is at least the body limit) until the
/// handler drops it.
pub(crate) struct Body(pub Bytes, pub Charge);

impl FromRequest<AppState> for Body {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, AppError> {
        let budget = state.writer.budget();
        let peer = req
            .extensions()
            .get::<Peer>()
            .copied()
            .unwrap_or(Peer::LOCAL);
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let want = declared
            .unwrap_or(budget.limits().raw_bytes)
            .min(budget.limits().raw_bytes);
        let charge = budget
            .peer(peer)
            .raw_within_limit("a request body", want)
            .await
            .map_err(|e| AppError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
        Bytes::from_request(req, state)
            .await
            .map(|b| Self(b, charge))
            .map_err(reject)
    }
}
