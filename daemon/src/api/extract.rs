//! Request extractors for the JSON API whose rejections answer like every other API
//! error, `{"error": "..."}` with the rejection's own status (400 for a query string or
//! path that does not parse, 413 for a body over the limit), where axum's own extractors
//! answer in plain text.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::response::IntoResponse;
use serde::de::DeserializeOwned;

use super::ApiError;

/// A rejection's status and text as an [`ApiError`].
fn api_error(rejection: impl IntoResponse + std::fmt::Display) -> ApiError {
    let text = rejection.to_string();
    ApiError(rejection.into_response().status(), text)
}

/// `Query<T>` with a JSON rejection.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| Self(v))
            .map_err(api_error)
    }
}

/// `Path<T>` with a JSON rejection.
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(v)| Self(v))
            .map_err(api_error)
    }
}

/// The whole request body with a JSON rejection (413 over the body limit).
pub struct ApiBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(req, state)
            .await
            .map(Self)
            .map_err(api_error)
    }
}
