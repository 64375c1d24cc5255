//! Errors as Kafka Connect's REST API returns them: `{"error_code": <status>, "message":
//! "..."}` with `Content-Type: application/json`, and the herder's errors mapped to their
//! status codes.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::config::ConfigError;
use crate::connect::HerderError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = error_response(self.status, &self.message);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Connect's error body.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error_code": status.as_u16(), "message": message }))).into_response()
}

impl From<HerderError> for ApiError {
    fn from(error: HerderError) -> ApiError {
        let status = match &error {
            HerderError::NotFound(_) | HerderError::TaskNotFound(..) => StatusCode::NOT_FOUND,
            HerderError::Exists(_) => StatusCode::CONFLICT,
            HerderError::Invalid(_) | HerderError::Refused(_) => StatusCode::BAD_REQUEST,
            HerderError::Store(e) => {
                tracing::error!("REST request failed in the store: {e:#}");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        ApiError::new(status, error.to_string())
    }
}

impl From<ConfigError> for ApiError {
    fn from(error: ConfigError) -> ApiError {
        ApiError::bad_request(error.to_string())
    }
}
