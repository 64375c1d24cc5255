//! Kafka Connect's `/admin/loggers` (KIP-495, with KIP-976's `last_modified`): the
//! process's log levels, read and changed while it runs. A logger is a `tracing` target
//! (`sluice::connect::task_runner`, `plugin`, `librdkafka`, `wasmtime`, ...) or `root`,
//! the level of everything not named; setting one sets the loggers named beneath it too
//! (`sluice::connect` reaches `sluice::connect::herder`), setting `root` sets all, as in
//! Connect. Only the operator may use them when tenants are declared: levels are the
//! worker's, not a tenant's.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tracing_subscriber::{EnvFilter, Registry, reload};

use super::auth::Caller;
use super::error::ApiError;
use super::{json_body, query_pairs};

/// The name Connect gives the level of everything not named.
const ROOT: &str = "root";

/// The process's levels and the handle that applies them to its log filter.
pub struct Loggers {
    levels: Mutex<Levels>,
    apply: reload::Handle<EnvFilter, Registry>,
}

#[derive(Clone, Debug, PartialEq)]
struct Levels {
    root: Setting,
    named: BTreeMap<String, Setting>,
    /// Directives of `SLUICE_LOG` that name no single logger (span filters): kept as given.
    other: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
struct Setting {
    /// Connect's name for it: `OFF`, `FATAL`, `ERROR`, `WARN`, `INFO`, `DEBUG`, `TRACE`, `ALL`.
    level: String,
    /// When it was last set through the API (ms since the epoch).
    last_modified: Option<i64>,
}

static LOGGERS: OnceLock<Loggers> = OnceLock::new();

/// The log filter for the process, from `SLUICE_LOG`'s directives (or `default` when it
/// is unset or not understood), changeable through the API from now on.
pub fn install(from_env: Option<&str>, default: &str) -> reload::Layer<EnvFilter, Registry> {
    let (spec, filter) = match from_env.map(|spec| (spec, EnvFilter::try_new(spec))) {
        Some((spec, Ok(filter))) => (spec, filter),
        _ => (default, EnvFilter::new(default)),
    };
    let (layer, apply) = reload::Layer::new(filter);
    let _ = LOGGERS.set(Loggers { levels: Mutex::new(Levels::parse(spec)), apply });
    layer
}

impl Levels {
    fn parse(spec: &str) -> Levels {
        let mut levels = Levels { root: Setting::new("ERROR"), named: BTreeMap::new(), other: Vec::new() };
        for directive in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            match directive.split_once('=') {
                None => match connect_level(directive) {
                    Some(level) => levels.root = Setting::new(level),
                    None => levels.other.push(directive.to_string()),
                },
                Some((target, level)) => match (valid_logger(target), connect_level(level)) {
                    (true, Some(level)) => {
                        levels.named.insert(target.to_string(), Setting::new(level));
                    }
                    _ => levels.other.push(directive.to_string()),
                },
            }
        }
        levels
    }

    /// The filter directives: the root level, every named one, then the rest as given.
    fn directives(&self) -> String {
        let mut parts = vec![filter_level(&self.root.level).to_string()];
        parts.extend(self.named.iter().map(|(target, s)| format!("{target}={}", filter_level(&s.level))));
        parts.extend(self.other.iter().cloned());
        parts.join(",")
    }

    /// Sets `logger` and every logger named beneath it (`root`: every logger); the names
    /// set, in order.
    fn set(&mut self, logger: &str, level: &str, now: i64) -> Vec<String> {
        let setting = Setting { level: level.to_string(), last_modified: Some(now) };
        if logger == ROOT {
            self.root = setting.clone();
            for named in self.named.values_mut() {
                *named = setting.clone();
            }
            return std::iter::once(ROOT.to_string()).chain(self.named.keys().cloned()).collect();
        }
        let beneath = format!("{logger}::");
        self.named.insert(logger.to_string(), setting.clone());
        let mut set = Vec::new();
        for (name, named) in self.named.iter_mut().filter(|(name, _)| *name == logger || name.starts_with(&beneath)) {
            *named = setting.clone();
            set.push(name.clone());
        }
        set
    }
}

impl Setting {
    fn new(level: &str) -> Setting {
        Setting { level: level.to_string(), last_modified: None }
    }

    fn json(&self) -> Value {
        json!({ "level": self.level, "last_modified": self.last_modified })
    }
}

/// Connect's (log4j's) name for a level, from either its name or `tracing`'s, any case.
fn connect_level(text: &str) -> Option<&'static str> {
    const LEVELS: [&str; 8] = ["OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL"];
    let text = text.trim();
    LEVELS.into_iter().find(|level| level.eq_ignore_ascii_case(text))
}

/// `tracing` has no FATAL (it is ERROR there) nor ALL (TRACE, its lowest).
fn filter_level(level: &str) -> &str {
    match level {
        "FATAL" => "error",
        "OFF" => "off",
        "ERROR" => "error",
        "WARN" => "warn",
        "INFO" => "info",
        "DEBUG" => "debug",
        _ => "trace",
    }
}

/// A target a filter directive can name: a module path or a plain name.
fn valid_logger(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '.' | '-'))
}

fn loggers(caller: &Caller) -> Result<&'static Loggers, ApiError> {
    if matches!(caller, Caller::Tenant(_)) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "Only the operator may read or change the worker's log levels",
        ));
    }
    LOGGERS
        .get()
        .ok_or_else(|| ApiError::not_found("This process's log levels are not managed (no sluice command set them up)"))
}

/// `GET /admin/loggers`: every named logger and `root`, each `{"level", "last_modified"}`.
pub async fn list(Extension(caller): Extension<Caller>) -> Result<Json<Value>, ApiError> {
    let levels = loggers(&caller)?.levels.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut all = serde_json::Map::new();
    all.insert(ROOT.to_string(), levels.root.json());
    for (name, setting) in &levels.named {
        all.insert(name.clone(), setting.json());
    }
    Ok(Json(Value::Object(all)))
}

/// `GET /admin/loggers/{logger}`: its `{"level", "last_modified"}`; 404 for a logger that
/// was never named (its level is `root`'s).
pub async fn get(Extension(caller): Extension<Caller>, Path(logger): Path<String>) -> Result<Json<Value>, ApiError> {
    let levels = loggers(&caller)?.levels.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match logger.as_str() {
        ROOT => Ok(Json(levels.root.json())),
        name => levels
            .named
            .get(name)
            .map(|setting| Json(setting.json()))
            .ok_or_else(|| ApiError::not_found(format!("Logger {name} not found."))),
    }
}

/// `PUT /admin/loggers/{logger}` `{"level": "DEBUG"}`: 200 with the loggers set; with
/// `?scope=cluster`, 204 (this worker is the cluster).
pub async fn set(
    Extension(caller): Extension<Caller>,
    Path(logger): Path<String>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Result<Response, ApiError> {
    let loggers = loggers(&caller)?;
    if logger != ROOT && !valid_logger(&logger) {
        return Err(ApiError::bad_request(format!(
            "Invalid logger name '{}': a logger is a tracing target, letters, digits, '_', ':', '.' and '-'",
            logger.escape_debug()
        )));
    }
    let body = json_body(&body)?;
    let level = match body.get("level") {
        None | Some(Value::Null) => {
            return Err(ApiError::bad_request("Desired 'level' parameter was not specified in the request."));
        }
        Some(Value::String(level)) => {
            connect_level(level).ok_or_else(|| ApiError::bad_request(format!("Invalid log level '{level}'.")))?
        }
        Some(other) => return Err(ApiError::bad_request(format!("Invalid log level '{other}'."))),
    };
    let scope = query_pairs(query.as_deref())?.into_iter().rev().find(|(key, _)| key == "scope").map(|(_, v)| v);
    let now = crate::storage::now_ms();
    let set = {
        let mut levels = loggers.levels.lock().unwrap_or_else(|p| p.into_inner());
        let mut changed = levels.clone();
        let set = changed.set(&logger, level, now);
        let filter = EnvFilter::try_new(changed.directives())
            .map_err(|e| ApiError::bad_request(format!("Cannot set {logger} to {level}: {e}")))?;
        loggers
            .apply
            .reload(filter)
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("Cannot apply the level: {e}")))?;
        *levels = changed;
        set
    };
    tracing::info!("log level of {logger} set to {level} through the REST API ({} logger(s))", set.len());
    Ok(match scope.as_deref() {
        Some(scope) if scope.eq_ignore_ascii_case("cluster") => StatusCode::NO_CONTENT.into_response(),
        _ => Json(json!(set)).into_response(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_set_beneath_and_make_directives() {
        let mut levels =
            Levels::parse("info,wasmtime=warn,sluice::connect=debug,sluice::connect::herder=trace,[span]=x");
        assert_eq!(levels.root.level, "INFO");
        assert_eq!(levels.named.keys().collect::<Vec<_>>(), ["sluice::connect", "sluice::connect::herder", "wasmtime"]);
        assert_eq!(levels.other, ["[span]=x"]);
        let set = levels.set("sluice::connect", "WARN", 7);
        assert_eq!(set, ["sluice::connect", "sluice::connect::herder"]);
        assert_eq!(levels.named["sluice::connect::herder"], Setting { level: "WARN".into(), last_modified: Some(7) });
        assert_eq!(levels.named["wasmtime"].last_modified, None, "not beneath it");
        // A name that only starts like it is not beneath it.
        levels.named.insert("sluice::connectx".into(), Setting::new("INFO"));
        assert_eq!(levels.set("sluice::connect", "ERROR", 8), ["sluice::connect", "sluice::connect::herder"]);
        assert_eq!(levels.set("root", "FATAL", 9).len(), 5);
        assert_eq!(
            levels.directives(),
            "error,sluice::connect=error,sluice::connect::herder=error,sluice::connectx=error,wasmtime=error,[span]=x"
        );
        assert!(EnvFilter::try_new(Levels::parse("debug,plugin=off").directives()).is_ok());
        assert_eq!(connect_level("warn"), Some("WARN"));
        assert_eq!(connect_level("verbose"), None);
        // log4j's lowest level, which Connect takes: TRACE here.
        assert_eq!(connect_level("all").map(filter_level), Some("trace"));
        assert!(!valid_logger("a b") && !valid_logger("") && valid_logger("sluice::api"));
    }
}
