//! Request extractors whose rejections answer in the daemon's own error format instead
//! of axum's plain text: for the JSON API (`ApiQuery`, `ApiPath`, `ApiBody`) an
//! `{"error": "..."}` document with the rejection's status (400 for a query string or path
//! that does not parse, 413 for a body over the limit); for the dashboard (`PageQuery`,
//! `PagePath`) the HTML error page with status 400.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::de::DeserializeOwned;

use crate::api::ApiError;
use crate::web::WebError;

/// What a rejected request part turns into.
trait FromRejection {
    fn from_rejection(status: StatusCode, text: String) -> Self;
}

impl FromRejection for ApiError {
    fn from_rejection(status: StatusCode, text: String) -> Self {
        ApiError(status, text)
    }
}

impl FromRejection for WebError {
    fn from_rejection(_status: StatusCode, text: String) -> Self {
        WebError::Bad(text)
    }
}

fn reject<E: FromRejection>(rejection: impl IntoResponse + std::fmt::Display) -> E {
    let text = rejection.to_string();
    E::from_rejection(rejection.into_response().status(), text)
}

/// `Query<T>` and `Path<T>` twins named `$query` and `$path` rejecting with `$error`.
macro_rules! part_extractors {
    ($query:ident, $path:ident, $error:ty, $what:literal) => {
        #[doc = concat!("`Query<T>` rejecting with ", $what, ".")]
        pub struct $query<T>(pub T);

        impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for $query<T> {
            type Rejection = $error;

            async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, $error> {
                Query::<T>::from_request_parts(parts, state)
                    .await
                    .map(|Query(v)| Self(v))
                    .map_err(reject)
            }
        }

        #[doc = concat!("`Path<T>` rejecting with ", $what, ".")]
        pub struct $path<T>(pub T);

        impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for $path<T> {
            type Rejection = $error;

            async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, $error> {
                Path::<T>::from_request_parts(parts, state)
                    .await
                    .map(|Path(v)| Self(v))
                    .map_err(reject)
            }
        }
    };
}

part_extractors!(ApiQuery, ApiPath, ApiError, "a JSON error");
part_extractors!(PageQuery, PagePath, WebError, "the HTML error page");

/// The whole request body, rejecting with a JSON error (413 over the body limit).
pub struct ApiBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(req, state)
            .await
            .map(Self)
            .map_err(reject)
    }
}
