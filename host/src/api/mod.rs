//! The api layer: Kafka Connect's REST API over the herder, as `sluice serve` (and `sluice
//! run --listen`) serve it. Same paths, methods, status codes and JSON shapes as Connect
//! 3.x/4.x ([`connectors`], [`plugins`]), tokens deciding the tenant ([`auth`]), Prometheus
//! metrics ([`metrics`]), the worker's log levels ([`loggers`]), an OpenAPI document of
//! every route ([`openapi`]) and the web console that browsers get at `/` ([`console`]).
//!
//! Liberal in what it takes, as Connect is: a trailing slash on any path, booleans in any
//! case, bodies read as JSON whatever their content type. Every error, the framework's own
//! included (unknown path, wrong method, body too large), is Connect's `{"error_code",
//! "message"}` in JSON ([`error`]). What a browser sends on another site's behalf is
//! refused ([`guard`]).
//!
//! Uses the config, storage, runtime and connect layers.

pub mod auth;
mod connectors;
pub mod console;
pub mod error;
mod guard;
pub mod loggers;
pub mod metrics;
pub mod openapi;
mod plugins;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, patch, post, put};
use axum::{Extension, Json, Router};
use serde_json::{Value, json};
use tower::Layer;
use tower_http::normalize_path::NormalizePathLayer;

use self::auth::Caller;
use self::error::{ApiError, error_response};
use crate::config::WorkerConfig;
use crate::connect::Herder;

/// What every request handler shares.
pub struct ApiState {
    pub herder: Arc<Herder>,
    /// `GET /`'s `kafka_cluster_id`.
    pub cluster_id: String,
    /// The address the API is served on.
    pub local: std::net::SocketAddr,
}

impl ApiState {
    pub fn worker(&self) -> &WorkerConfig {
        &self.herder.services().worker
    }
}

/// The largest request body: a connector config is a few KiB.
const MAX_BODY_BYTES: usize = 1 << 20;

/// How long a request body may pause before the request is refused (Jetty's idle
/// timeout in Connect).
const BODY_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The git commit this binary was built from (`GET /`'s `commit`).
pub const COMMIT: &str = env!("SLUICE_COMMIT");

type Shared = Arc<ApiState>;

/// Every route: method, path, handler. The OpenAPI document lists exactly these (a test
/// checks it).
fn routes() -> Vec<(Method, &'static str, MethodRouter<Shared>)> {
    vec![
        (Method::GET, "/", get(root)),
        (Method::GET, "/connectors", get(connectors::list)),
        (Method::POST, "/connectors", post(connectors::create)),
        (Method::GET, "/connectors/{name}", get(connectors::get)),
        (Method::DELETE, "/connectors/{name}", delete(connectors::delete)),
        (Method::GET, "/connectors/{name}/config", get(connectors::get_config)),
        (Method::PUT, "/connectors/{name}/config", put(connectors::put_config)),
        (Method::PATCH, "/connectors/{name}/config", patch(connectors::patch_config)),
        (Method::GET, "/connectors/{name}/status", get(connectors::status)),
        (Method::POST, "/connectors/{name}/restart", post(connectors::restart)),
        (Method::PUT, "/connectors/{name}/pause", put(connectors::pause)),
        (Method::PUT, "/connectors/{name}/resume", put(connectors::resume)),
        (Method::PUT, "/connectors/{name}/stop", put(connectors::stop)),
        (Method::GET, "/connectors/{name}/tasks", get(connectors::tasks)),
        (Method::GET, "/connectors/{name}/tasks-config", get(connectors::tasks_config)),
        (Method::GET, "/connectors/{name}/tasks/{task}/status", get(connectors::task_status)),
        (Method::POST, "/connectors/{name}/tasks/{task}/restart", post(connectors::restart_task)),
        (Method::GET, "/connectors/{name}/topics", get(connectors::topics)),
        (Method::PUT, "/connectors/{name}/topics/reset", put(connectors::reset_topics)),
        (Method::GET, "/connectors/{name}/offsets", get(connectors::get_offsets)),
        (Method::PATCH, "/connectors/{name}/offsets", patch(connectors::patch_offsets)),
        (Method::DELETE, "/connectors/{name}/offsets", delete(connectors::reset_offsets)),
        (Method::GET, "/connector-plugins", get(plugins::list)),
        (Method::GET, "/admin/loggers", get(loggers::list)),
        (Method::GET, "/admin/loggers/{logger}", get(loggers::get)),
        (Method::PUT, "/admin/loggers/{logger}", put(loggers::set)),
        (Method::GET, "/connector-plugins/{plugin}/config", get(plugins::config)),
        (Method::PUT, "/connector-plugins/{plugin}/config/validate", put(plugins::validate)),
        (Method::GET, "/sluice/rejected-plugins", get(plugins::rejected)),
        (Method::GET, "/metrics", get(metrics_text)),
        (Method::GET, "/health", get(health)),
        (Method::GET, "/openapi.json", get(openapi_json)),
    ]
}

/// The (method, path) of every route.
pub fn route_list() -> Vec<(Method, &'static str)> {
    routes().into_iter().map(|(method, path, _)| (method, path)).collect()
}

/// The API as a router (paths exactly as listed; see [`serve`] for trailing slashes).
pub fn router(state: Arc<ApiState>) -> Router {
    let mut router = Router::new();
    for (_, path, handler) in routes() {
        router = router.route(path, handler);
    }
    router = router.route(console::PATH, get(console::index_route)).route("/console/{file}", get(console::asset));
    router
        .fallback(|| async {
            ApiError::not_found("HTTP 404 Not Found: no such path in this API (GET /openapi.json lists them)")
        })
        .layer(axum::middleware::from_fn(finish_when_the_client_leaves))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth::authenticate))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::refuse_foreign_pages))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // A body that stops coming is given up on, as Connect's Jetty drops a connection
        // idle for 30 s: otherwise each one left part way holds up to MAX_BODY_BYTES.
        .layer(axum::middleware::map_request(|request: Request| async move {
            request.map(|body| Body::new(tower_http::timeout::TimeoutBody::new(BODY_IDLE_TIMEOUT, body)))
        }))
        // A declared length over the limit is refused before the body is read: a client
        // that sent `Expect: 100-continue` (curl does, for large bodies) then never sends
        // it, and one that did not gets the 413 instead of a connection reset mid-upload.
        .layer(tower_http::limit::RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            tracing::error!("a REST request handler panicked");
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "Internal error (logged)")
        }))
        .layer(axum::middleware::map_response(json_errors))
        .with_state(state)
}

/// Runs a request's handler as a task of its own, which this one awaits: a change to the
/// connectors runs to its end when its client goes away. A handler is dropped with its
/// connection, and a change may take a connector's stop deadline (up to 60 s, longer than
/// many clients wait, and Ctrl-C): dropped half way, a delete had taken the connector out
/// of the list and never out of the metrics, and an update had stored the new config and
/// never started it.
async fn finish_when_the_client_leaves(request: Request, next: axum::middleware::Next) -> Response {
    match tokio::spawn(next.run(request)).await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!("a REST request handler failed: {e}");
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "Internal error (logged)")
        }
    }
}

/// How long a client may take to send a request's headers, and an idle kept-alive
/// connection may stay open: Jetty's idle timeout in Connect. Without it a client that
/// opens connections and sends nothing holds a descriptor each for ever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The most connections the API holds open at once. Past it, new connections wait in the
/// listener's backlog (holding no descriptor of the worker) until one closes: clients that
/// open connections by the thousand, even slowly (a slowloris), cannot take the
/// descriptors the connectors need to list and read their files.
pub const MAX_CONNECTIONS: usize = 1024;

/// How long a stop waits for the requests in flight before it goes on to stop the
/// connectors: a client that never finishes its request must not hold up a SIGTERM
/// (a container's grace is often 30 s, and the connectors' own stop needs part of it).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves the API on `listener` until `shutdown` resolves, then finishes the requests in
/// flight, waiting at most [`SHUTDOWN_GRACE`] for them.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<ApiState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = NormalizePathLayer::trim_trailing_slash().layer(router(state));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    let mut accept_failure = String::new();
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut full_said = false;
    tokio::pin!(shutdown);
    loop {
        let room = match open.clone().try_acquire_owned() {
            Ok(room) => room,
            Err(_) => {
                if !full_said {
                    tracing::warn!(
                        "the REST API has {MAX_CONNECTIONS} connections open, its most: new ones wait until one closes (an idle one closes after {} s)",
                        HEADER_READ_TIMEOUT.as_secs()
                    );
                    full_said = true;
                }
                tokio::select! {
                    room = open.clone().acquire_owned() => room.expect("never closed"),
                    () = &mut shutdown => break,
                }
            }
        };
        if open.available_permits() > MAX_CONNECTIONS / 2 {
            full_said = false;
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of descriptors, most likely: say so once, and let the connections
                // that hold them finish before trying again.
                let failure = e.to_string();
                if failure != accept_failure {
                    tracing::error!("the REST API cannot accept a connection: {failure}");
                    accept_failure = failure;
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(200)) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        accept_failure.clear();
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let connection = connections.watch(http.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("REST API connection ended: {e}");
            }
            drop(room);
        });
    }
    drop(listener);
    let in_flight = connections.count();
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.shutdown()).await.is_err() {
        tracing::warn!(
            "stopping without waiting longer for REST API requests still in flight ({in_flight} connections \
             were open; a client that has not finished sending its request is not waited for past {} s)",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    Ok(())
}

/// An accept error that concerns only the connection being accepted (the client gave
/// up), not the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// Any error response that is not JSON yet (the framework's 404, 405, 413, 400 for a bad
/// path parameter) becomes Connect's `{"error_code", "message"}`.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if status.as_u16() < 400 || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_string();
    let reason = status.canonical_reason().unwrap_or("Error");
    let message = if text.is_empty() {
        format!("HTTP {} {reason}", status.as_u16())
    } else {
        format!("HTTP {} {reason}: {text}", status.as_u16())
    };
    let mut converted = error_response(status, &message);
    for name in [header::ALLOW, header::WWW_AUTHENTICATE] {
        if let Some(value) = parts.headers.get(&name) {
            converted.headers_mut().insert(name, value.clone());
        }
    }
    converted
}

/// `GET /`: the worker's version, the commit it was built from, and the cluster id; a
/// browser's navigation gets the console instead.
async fn root(State(state): State<Shared>, headers: axum::http::HeaderMap) -> Response {
    if console::wants_html(&headers) {
        return console::index();
    }
    Json(json!({ "version": env!("CARGO_PKG_VERSION"), "commit": COMMIT, "kafka_cluster_id": state.cluster_id }))
        .into_response()
}

/// `GET /metrics`: a tenant gets its own connectors' series only (the console charts them),
/// the operator every tenant's.
async fn metrics_text(Extension(caller): Extension<Caller>, State(state): State<Shared>) -> Response {
    let tenant = if caller.is_operator() { None } else { caller.tenant() };
    let text = metrics::render(&state.herder, tenant).await;
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

/// How long `GET /health` waits for the herder before it says the worker is unhealthy.
const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `GET /health` (KIP-1017, Connect 4.0): 200 once the worker has started (it listens only
/// then), 500 when the herder does not answer within [`HEALTH_TIMEOUT`] (a change to a
/// connector stuck). Public, for probes that carry no token.
async fn health(State(state): State<Shared>) -> Response {
    match tokio::time::timeout(HEALTH_TIMEOUT, state.herder.responsive()).await {
        Ok(()) => Json(json!({
            "status": "healthy",
            "message": "Worker has completed startup and is ready to handle requests."
        }))
        .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({
                "status": "unhealthy",
                "message": format!(
                    "Worker was unable to handle this request within {} s and may be unable to handle other requests.",
                    HEALTH_TIMEOUT.as_secs()
                )
            })),
        )
            .into_response(),
    }
}

async fn openapi_json() -> Json<Value> {
    Json(openapi::document())
}

/// A request body as JSON, whatever its content type says, after a UTF-8 byte-order mark
/// if it starts with one (Windows editors and PowerShell write one; Connect's Jackson
/// skips it).
fn json_body(body: &Bytes) -> Result<Value, ApiError> {
    let body = without_bom(body);
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("This request needs a JSON body"));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("Malformed JSON in the request body: {e}")))
}

/// A request body after its UTF-8 byte-order mark, if it has one.
fn without_bom(body: &[u8]) -> &[u8] {
    body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body)
}

/// The query string's pairs, in order (a key may repeat, as `expand` does).
fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|e| ApiError::bad_request(format!("Malformed query string: {e}")))
}

/// A boolean query parameter: `true` or `false` in any case; absent or empty is false.
fn bool_param(pairs: &[(String, String)], name: &str) -> Result<bool, ApiError> {
    bool_param_or(pairs, name, false)
}

/// [`bool_param`] with `absent` when the parameter is not given at all (an empty value is
/// false, as JAX-RS reads one into Connect's `Boolean`).
fn bool_param_or(pairs: &[(String, String)], name: &str, absent: bool) -> Result<bool, ApiError> {
    // The first of a repeated parameter, as JAX-RS gives Connect a single-valued one.
    match pairs.iter().find(|(key, _)| key == name).map(|(_, value)| value.trim()) {
        None => Ok(absent),
        Some("") => Ok(false),
        Some(value) if value.eq_ignore_ascii_case("true") => Ok(true),
        Some(value) if value.eq_ignore_ascii_case("false") => Ok(false),
        Some(value) => Err(ApiError::bad_request(format!("{name}: '{value}' is not a boolean (true or false)"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_in_any_case() {
        let pairs = query_pairs(Some("includeTasks=True&onlyFailed=FALSE&x=1")).unwrap();
        assert!(bool_param(&pairs, "includeTasks").unwrap());
        assert!(!bool_param(&pairs, "onlyFailed").unwrap());
        assert!(!bool_param(&pairs, "absent").unwrap());
        let bad = query_pairs(Some("onlyFailed=yes")).unwrap();
        assert_eq!(bool_param(&bad, "onlyFailed").unwrap_err().status, StatusCode::BAD_REQUEST);
    }
}
