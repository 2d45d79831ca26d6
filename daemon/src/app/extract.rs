//! Request extractors whose rejections are an [`AppError`] with the rejection's status
//! (400 for a query string or path that does not parse, 413 for a body over the limit)
//! instead of axum's plain text, so they are answered like every other error: as
//! `{"error": "..."}` under `/api`, as the HTML error page on the dashboard.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::response::IntoResponse;
use serde::de::DeserializeOwned;

use super::error::AppError;

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

/// The whole request body, rejecting with an [`AppError`] (413 over the body limit).
pub(crate) struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, AppError> {
        Bytes::from_request(req, state)
            .await
            .map(Self)
            .map_err(reject)
    }
}
