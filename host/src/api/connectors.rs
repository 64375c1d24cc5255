//! `/connectors`: Kafka Connect's connector resources (create, list with `?expand`, config,
//! status, tasks, restart, pause, resume, stop, delete, KIP-875 offsets) over the herder.
//! Bodies are Connect's shapes; a name is the caller's (see [`super::auth`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::auth::Caller;
use super::error::ApiError;
use super::{ApiState, bool_param, json_body, query_pairs};
use crate::config::keys::{CONNECTOR_CLASS, NAME, TENANT};
use crate::config::{ConfigError, ConnectorConfig, DEFAULT_TENANT};
use crate::connect::HerderError;
use crate::storage::Namespace;
use crate::storage::TargetState;
use crate::storage::json::canonical_object;

type Shared = State<Arc<ApiState>>;

/// `GET /connectors[?expand=status][&expand=info]`
pub async fn list(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref())?;
    let expand = |what: &str| pairs.iter().any(|(k, v)| k == "expand" && v.eq_ignore_ascii_case(what));
    let (status, info) = (expand("status"), expand("info"));
    let connectors: Vec<(Namespace, ConnectorConfig)> = state
        .herder
        .connectors()
        .await
        .into_iter()
        .filter(|(ns, _, _)| caller.sees(ns))
        .map(|(ns, config, _)| (ns, config))
        .collect();
    // As Connect: any `expand` gives the map, an expansion it does not know adds nothing.
    if !pairs.iter().any(|(k, _)| k == "expand") {
        let names: Vec<String> = connectors.iter().map(|(ns, _)| caller.name_of(ns)).collect();
        return Ok(Json(names).into_response());
    }
    let mut expanded = Map::new();
    for (ns, config) in connectors {
        let mut entry = Map::new();
        if status {
            match state.herder.connector_status(&ns).await {
                Ok(mut found) => {
                    found.name = caller.name_of(&ns);
                    entry.insert("status".into(), json!(found));
                }
                // Deleted meanwhile.
                Err(_) => continue,
            }
        }
        if info {
            let tasks = state.herder.task_configs(&ns).await.map(|t| t.len()).unwrap_or(0);
            entry.insert("info".into(), info_body(&caller, &ns, &config, tasks));
        }
        expanded.insert(caller.name_of(&ns), Value::Object(entry));
    }
    Ok(Json(Value::Object(expanded)).into_response())
}

/// Connect's `ConnectorInfo`: name, config (with `name`), task ids, type.
fn info_body(caller: &Caller, ns: &Namespace, config: &ConnectorConfig, tasks: usize) -> Value {
    let name = caller.name_of(ns);
    let tasks: Vec<Value> = (0..tasks).map(|task| json!({ "connector": name, "task": task })).collect();
    json!({ "name": name, "config": config_body(caller, config), "tasks": tasks, "type": "source" })
}

/// The config as the caller sees it: a tenant's own name for itself is implied.
fn config_body(caller: &Caller, config: &ConnectorConfig) -> Value {
    let mut values = config.values.clone();
    if matches!(caller, Caller::Tenant(_)) {
        values.remove(TENANT);
    }
    json!(values)
}

async fn info(state: &ApiState, caller: &Caller, ns: &Namespace) -> Result<Value, ApiError> {
    let (config, _) = state
        .herder
        .connector(ns)
        .await
        .ok_or_else(|| ApiError::not_found(format!("Connector {} not found", ns.connector)))?;
    let tasks = state.herder.task_configs(ns).await?.len();
    Ok(info_body(caller, ns, &config, tasks))
}

/// Where a new or updated connector's name comes from: a create's body, or the URL a
/// `PUT` addresses (which names the connector it changes, as a `GET` of it would).
#[derive(Clone, Copy, PartialEq)]
enum NamedBy {
    Body,
    Url,
}

/// The namespace and config of a connector to create or update: the tenant is the
/// caller's (a `tenant` key naming another is refused), or for the operator the one its
/// qualified name says, else (for a create) the config's `tenant` key.
fn new_config(
    caller: &Caller,
    name: &str,
    values: &Map<String, Value>,
    named_by: NamedBy,
) -> Result<(Namespace, ConnectorConfig), ApiError> {
    // As the config will hold it: `"tenant": 42` is tenant `42`'s.
    let from_config = values.get(TENANT).and_then(|value| crate::config::value_text(value).ok());
    let from_config = from_config.as_deref();
    let ns = match (caller, name.split_once('/')) {
        (Caller::Operator { tenant: None }, None) if named_by == NamedBy::Body => {
            Namespace::new(from_config.unwrap_or(DEFAULT_TENANT), name)
        }
        // A create's qualified name for another tenant than the header's is a contradiction
        // in the request, not a connector that is missing.
        (Caller::Operator { tenant: Some(tenant) }, Some((qualifier, _)))
            if named_by == NamedBy::Body && qualifier != tenant =>
        {
            return Err(ApiError::bad_request(format!(
                "name: '{name}' names the tenant '{qualifier}', but this request is tenant '{tenant}'s (X-Sluice-Tenant)"
            )));
        }
        (Caller::Operator { .. }, _) => caller.namespace(name)?,
        (_, Some(_)) => return Err(ApiError::bad_request(format!("name: {}", slash_refused(name)))),
        (_, None) => caller.namespace(name)?,
    };
    if let Some(reason) = name_too_long(&ns.connector) {
        return Err(ApiError::bad_request(format!("name: {reason}")));
    }
    let source = source_of(&ns.connector);
    let mut config = ConnectorConfig::from_map(Some(ns.connector.clone()), values, &source)?;
    if let Some(tenant) = from_config
        && tenant != ns.tenant
    {
        let mut reason = not_this_tenant(tenant, &ns.tenant);
        if named_by == NamedBy::Url && caller.is_operator() {
            let qualified = url_segment(&format!("{tenant}/{}", ns.connector));
            reason.push_str(&format!(
                "; the URL names the connector: PUT /connectors/{qualified}/config for tenant '{tenant}'s"
            ));
        }
        return Err(config.error(TENANT, reason).into());
    }
    if ns.tenant != DEFAULT_TENANT {
        config.values.insert(TENANT.into(), ns.tenant.clone());
    }
    Ok((ns, config))
}

/// The longest connector name the API takes, in bytes. Every endpoint of a connector
/// names it in its URL (percent-encoded, up to three times as long), and a URL past about
/// 64 KiB is refused (414) before it is read: a longer name could be created and never
/// again paused, stopped or deleted. As long as a file name may be.
pub(super) const MAX_NAME_BYTES: usize = 255;

/// Why `name` is too long for a connector created over the API, if it is.
pub(super) fn name_too_long(name: &str) -> Option<String> {
    (name.len() > MAX_NAME_BYTES).then(|| {
        format!(
            "a connector name is at most {MAX_NAME_BYTES} bytes, as every URL of the connector names it; this one is {}",
            name.len()
        )
    })
}

/// What a config's errors are said to be of: `connector NAME` (or `connector`, nameless).
pub(super) fn source_of(name: &str) -> String {
    if name.is_empty() { "connector".to_string() } else { format!("connector {name}") }
}

/// Why a name with a `/` is refused from anyone but the operator (whose `tenant/name`
/// qualifies it): [`new_config`]'s reason, which validate gives too.
pub(super) fn slash_refused(name: &str) -> String {
    format!("{name:?} is not a valid connector name ('/' is not allowed)")
}

/// Why a config's `tenant` key naming `given` is refused in a request about `request`.
pub(super) fn not_this_tenant(given: &str, request: &str) -> String {
    format!("'{given}' is not the tenant of this request ({request})")
}

/// `POST /connectors` with `{"name": ..., "config": {...}}`: 201, or 409 if it exists.
pub async fn create(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body = json_body(&body)?;
    let Value::Object(top) = body else {
        return Err(ApiError::bad_request("Expected a JSON object {\"name\": ..., \"config\": {...}}"));
    };
    let values = match top.get("config") {
        Some(Value::Object(values)) => values.clone(),
        Some(_) => return Err(ApiError::bad_request("config: must be a JSON object of string values")),
        None => return Err(ApiError::bad_request("config: missing: expected {\"name\": ..., \"config\": {...}}")),
    };
    let name = match (top.get("name"), values.get(NAME)) {
        (Some(Value::String(name)), Some(Value::String(in_config))) if name != in_config => {
            return Err(ApiError::bad_request(format!(
                "Connector name configuration ({in_config}) doesn't match connector name in the request ({name})"
            )));
        }
        // Connect trims the name it is given.
        (Some(Value::String(name)), _) | (None, Some(Value::String(name))) => name.trim().to_string(),
        (Some(_), _) => return Err(ApiError::bad_request("name: must be a string")),
        (None, _) => return Err(ApiError::bad_request("name: missing")),
    };
    let target = match top.get("initial_state") {
        None | Some(Value::Null) => TargetState::Started,
        Some(Value::String(state)) => match state.trim().to_ascii_uppercase().as_str() {
            "RUNNING" => TargetState::Started,
            "PAUSED" => TargetState::Paused,
            "STOPPED" => TargetState::Stopped,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "initial_state: '{state}' is not a state a connector can be created in (RUNNING, PAUSED or STOPPED)"
                )));
            }
        },
        Some(other) => return Err(ApiError::bad_request(format!("initial_state: must be a string, not {other}"))),
    };
    every_value_problem(&state, &caller, &name, &values, NamedBy::Body).await?;
    let (ns, config) = new_config(&caller, &name, &values, NamedBy::Body)?;
    let create = match state.herder.check(&config) {
        Ok(()) => state.herder.create_in(config.clone(), target).await.map(|_| ()),
        Err(error) => Err(error.into()),
    };
    if let Err(error) = create {
        return Err(every_problem(&state, &config, error).await);
    }
    created(&state, &caller, &ns, &config, StatusCode::CREATED).await
}

/// A config the herder refused, with every problem in it as Kafka Connect lists them
/// (its create and update name all their errors, not the first only; the herder stops at
/// the first, so the config is looked at whole again here, only when it was refused).
async fn every_problem(state: &ApiState, config: &ConnectorConfig, error: HerderError) -> ApiError {
    // A refusal of the plugin itself (not found, failed to start, failed or timed out in
    // `validate`) comes after every host key was found good: looking again would only
    // call the plugin again, and wait out its deadline a second time.
    match &error {
        HerderError::Invalid(problem) if problem.key.as_deref() != Some(CONNECTOR_CLASS) => {}
        _ => return error.into(),
    }
    let problems = state.herder.problems(config).await;
    if problems.len() < 2 {
        return error.into();
    }
    every_problem_said(&problems)
}

/// A config with values that are not text (nulls, objects, lists) refused with every
/// problem in it: each of those values and what the rest of the config gets wrong, as
/// Connect lists them (the first null refused the config alone, and hid the rest).
async fn every_value_problem(
    state: &ApiState,
    caller: &Caller,
    name: &str,
    values: &Map<String, Value>,
    named_by: NamedBy,
) -> Result<(), ApiError> {
    let mut problems = ConnectorConfig::value_problems(values, &source_of(name));
    if problems.is_empty() {
        return Ok(());
    }
    let rest: Map<String, Value> = values
        .iter()
        .filter(|(key, _)| !problems.iter().any(|p| p.key.as_deref() == Some(key.as_str())))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    // A name or tenant refused is said as such, before the values.
    let (_, config) = new_config(caller, name, &rest, named_by)?;
    problems.extend(state.herder.problems(&config).await);
    Err(if problems.len() == 1 {
        HerderError::Invalid(problems.remove(0)).into()
    } else {
        every_problem_said(&problems)
    })
}

/// Several problems of a config, in Kafka Connect's words.
fn every_problem_said(problems: &[ConfigError]) -> ApiError {
    let mut message =
        format!("Connector configuration is invalid and contains the following {} error(s):", problems.len());
    for problem in problems {
        message.push('\n');
        if let Some(key) = &problem.key {
            message.push_str(key);
            message.push_str(": ");
        }
        message.push_str(&problem.reason);
    }
    message.push_str(
        "\nYou can also find the above list of errors at the endpoint `/connector-plugins/{connectorType}/config/validate`",
    );
    ApiError::bad_request(message)
}

/// The answer to a create or update: the connector as it stands, or as it was written
/// when a request deleted it meanwhile (the write did happen).
async fn created(
    state: &ApiState,
    caller: &Caller,
    ns: &Namespace,
    config: &ConnectorConfig,
    status: StatusCode,
) -> Result<Response, ApiError> {
    let body = match info(state, caller, ns).await {
        Ok(body) => body,
        Err(_) => info_body(caller, ns, config, 0),
    };
    if status == StatusCode::CREATED {
        let location = format!("/connectors/{}", url_segment(&caller.name_of(ns)));
        return Ok((status, [(header::LOCATION, location)], Json(body)).into_response());
    }
    Ok((status, Json(body)).into_response())
}

/// A name as one URL path segment.
fn url_segment(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /connectors/{name}`
pub async fn get(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let ns = caller.namespace(&name)?;
    Ok(Json(info(&state, &caller, &ns).await?))
}

/// `DELETE /connectors/{name}`: 204.
pub async fn delete(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.herder.delete(&caller.namespace(&name)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /connectors/{name}/config`
pub async fn get_config(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let ns = caller.namespace(&name)?;
    let (config, _) =
        state.herder.connector(&ns).await.ok_or_else(|| ApiError::not_found(format!("Connector {name} not found")))?;
    Ok(Json(config_body(&caller, &config)))
}

/// `PUT /connectors/{name}/config`: creates (201) or updates (200).
pub async fn put_config(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Value::Object(mut values) = json_body(&body)? else {
        return Err(ApiError::bad_request("Expected the connector's config: a JSON object of string values"));
    };
    unqualify_name(&mut values, &name);
    // The URL's name first: one a tenant may not use is said to be that, not a mismatch.
    every_value_problem(&state, &caller, &name, &values, NamedBy::Url).await?;
    let (ns, config) = new_config(&caller, &name, &values, NamedBy::Url)?;
    name_matches_url(&mut values, &name)?;
    let put = match state.herder.check(&config) {
        Ok(()) => state.herder.put_config(config.clone()).await,
        Err(error) => Err(error.into()),
    };
    let was_created = match put {
        Ok(was_created) => was_created,
        Err(error) => return Err(every_problem(&state, &config, error).await),
    };
    created(&state, &caller, &ns, &config, if was_created { StatusCode::CREATED } else { StatusCode::OK }).await
}

/// A body's `name`, if it has one, is the connector's in the URL (the operator's
/// `tenant/name` names `name`, and may be given either way: as the URL says it, or as the
/// tenant's config stores it).
fn name_matches_url(values: &mut Map<String, Value>, name: &str) -> Result<(), ApiError> {
    let unqualified = name.rsplit('/').next().unwrap_or(name);
    unqualify_name(values, name);
    match values.get(NAME) {
        Some(in_config) if crate::config::value_text(in_config).ok().as_deref() != Some(unqualified) => {
            Err(ApiError::bad_request(format!(
                "Connector name configuration ({}) doesn't match connector name in the URL ({unqualified})",
                in_config.as_str().map(String::from).unwrap_or_else(|| in_config.to_string())
            )))
        }
        _ => Ok(()),
    }
}

/// A body's `name` given as the operator's URL gives it (`tenant/name`), as the tenant's
/// config stores it (`name`).
fn unqualify_name(values: &mut Map<String, Value>, name: &str) {
    let unqualified = name.rsplit('/').next().unwrap_or(name);
    if unqualified != name && values.get(NAME).and_then(Value::as_str) == Some(name) {
        values.insert(NAME.to_string(), Value::String(unqualified.to_string()));
    }
}

/// `PATCH /connectors/{name}/config` (KIP-477): the stored config with the body's keys
/// set, and those whose value is `null` removed; 200, or 404 if there is no such connector.
pub async fn patch_config(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Value::Object(mut patch) = json_body(&body)? else {
        return Err(ApiError::bad_request("Expected the keys to change: a JSON object of string (or null) values"));
    };
    name_matches_url(&mut patch, &name)?;
    let ns = caller.namespace(&name)?;
    let refused = |e: ApiError| HerderError::Refused(e.message);
    // The patched config, kept to name every problem in it when it is refused.
    let mut patched = None;
    let result = state
        .herder
        .patch_config(&ns, |current| {
            let mut values = config_body(&caller, current).as_object().cloned().expect("a config is an object");
            for (key, value) in &patch {
                match value {
                    Value::Null => values.remove(key),
                    value => values.insert(key.clone(), value.clone()),
                };
            }
            let (_, config) = new_config(&caller, &name, &values, NamedBy::Url).map_err(refused)?;
            patched = Some(config.clone());
            state.herder.check(&config)?;
            Ok(config)
        })
        .await;
    match (result, patched) {
        (Ok(config), _) => created(&state, &caller, &ns, &config, StatusCode::OK).await,
        (Err(error), Some(config)) => Err(every_problem(&state, &config, error).await),
        (Err(error), None) => Err(error.into()),
    }
}

/// `GET /connectors/{name}/status`
pub async fn status(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let ns = caller.namespace(&name)?;
    let mut status = state.herder.connector_status(&ns).await?;
    status.name = caller.name_of(&ns);
    Ok(Json(json!(status)))
}

/// `GET /connectors/{name}/tasks`: `[{"id": {"connector", "task"}, "config": {...}}]`
pub async fn tasks(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (display, configs) = named_task_configs(&state, &caller, &name).await?;
    let tasks: Vec<Value> = configs
        .into_iter()
        .enumerate()
        .map(|(task, config)| {
            let config: BTreeMap<String, String> = config.into_iter().collect();
            json!({ "id": { "connector": display, "task": task }, "config": config })
        })
        .collect();
    Ok(Json(Value::Array(tasks)))
}

/// `GET /connectors/{name}/tasks-config`: Connect 3.x's map from `<name>-<task>` to each
/// task's config (deprecated by KIP-970 and gone in Connect 4.0; kept for 3.x scripts).
pub async fn tasks_config(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (display, configs) = named_task_configs(&state, &caller, &name).await?;
    let tasks: serde_json::Map<String, Value> = configs
        .into_iter()
        .enumerate()
        .map(|(task, config)| {
            let config: serde_json::Map<String, Value> =
                config.into_iter().map(|(key, value)| (key, Value::String(value))).collect();
            (format!("{display}-{task}"), Value::Object(config))
        })
        .collect();
    Ok(Json(Value::Object(tasks)))
}

/// The connector's name as the caller sees it, and its tasks' configs in task order.
async fn named_task_configs(
    state: &ApiState,
    caller: &Caller,
    name: &str,
) -> Result<(String, Vec<Vec<(String, String)>>), ApiError> {
    let ns = caller.namespace(name)?;
    let mut configs = state.herder.task_configs(&ns).await?;
    // As the connector's own config: a tenant's name for itself is implied.
    if matches!(caller, Caller::Tenant(_)) {
        for config in &mut configs {
            config.retain(|(key, _)| key != TENANT);
        }
    }
    Ok((caller.name_of(&ns), configs))
}

/// `GET /connectors/{name}/tasks/{task}/status`
pub async fn task_status(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path((name, task)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let ns = caller.namespace(&name)?;
    let status = state.herder.connector_status(&ns).await?;
    let found = task.parse::<u32>().ok().and_then(|id| status.tasks.into_iter().find(|t| t.id == id));
    found.map(|t| Json(json!(t))).ok_or_else(|| ApiError::not_found(format!("No status found for task {name}-{task}")))
}

/// `POST /connectors/{name}/tasks/{task}/restart`: 204.
pub async fn restart_task(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path((name, task)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let ns = caller.namespace(&name)?;
    let Ok(id) = task.parse::<u32>() else {
        return Err(ApiError::not_found(format!("Task {name}-{task} not found")));
    };
    state.herder.restart_task(&ns, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /connectors/{name}/restart?includeTasks=&onlyFailed=`: 204 for the connector
/// alone, else 202 with the status in which what restarts shows RESTARTING.
pub async fn restart(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let pairs = query_pairs(query.as_deref())?;
    let include_tasks = bool_param(&pairs, "includeTasks")?;
    let only_failed = bool_param(&pairs, "onlyFailed")?;
    let ns = caller.namespace(&name)?;
    match state.herder.restart(&ns, include_tasks, only_failed).await? {
        None => Ok(StatusCode::NO_CONTENT.into_response()),
        Some(mut status) => {
            status.name = caller.name_of(&ns);
            Ok((StatusCode::ACCEPTED, Json(json!(status))).into_response())
        }
    }
}

/// `PUT /connectors/{name}/pause`: 202.
pub async fn pause(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.herder.set_paused(&caller.namespace(&name)?, true).await?;
    Ok(StatusCode::ACCEPTED)
}

/// `PUT /connectors/{name}/resume`: 202.
pub async fn resume(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.herder.set_paused(&caller.namespace(&name)?, false).await?;
    Ok(StatusCode::ACCEPTED)
}

/// `PUT /connectors/{name}/stop`: 204, once its tasks have committed and stopped.
pub async fn stop(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.herder.stop_connector(&caller.namespace(&name)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /connectors/{name}/offsets`: `{"offsets": [{"partition": {...}, "offset": {...}}]}`
pub async fn get_offsets(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let ns = caller.namespace(&name)?;
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let offsets: Vec<Value> = state
        .herder
        .offsets(&ns)
        .await?
        .iter()
        .map(|(partition, offset)| json!({ "partition": parse(partition), "offset": parse(offset) }))
        .collect();
    Ok(Json(json!({ "offsets": offsets })))
}

/// `PATCH /connectors/{name}/offsets`: sets (or with `"offset": null` forgets) the offsets
/// of the listed partitions of a STOPPED connector.
pub async fn patch_offsets(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let ns = caller.namespace(&name)?;
    let body_bytes = body;
    let body = json_body(&body_bytes)?;
    let Some(Value::Array(entries)) = body.get("offsets") else {
        return Err(ApiError::bad_request(
            "Expected {\"offsets\": [{\"partition\": {...}, \"offset\": {...} or null}]}",
        ));
    };
    if entries.is_empty() {
        return Err(ApiError::bad_request("offsets: empty; list the partitions whose offsets to change"));
    }
    // Each partition and offset as it was typed: read back from a parsed number, an
    // integer past 64 bits would be a float already (and `1e300` would look like one).
    let raw = raw_offset_entries(&body_bytes);
    let text_of = |i: usize, part: &str, parsed: &Value| {
        let typed = raw.as_ref().and_then(|raw| raw.get(i)).and_then(|entry| entry.get(part).copied().flatten());
        typed.map_or_else(|| parsed.to_string(), |typed| typed.get().to_string())
    };
    let mut changes = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let partition = match entry.get("partition") {
            Some(partition @ Value::Object(_)) => canonical_object(&text_of(i, "partition", partition)),
            _ => Err("missing or not a JSON object".to_string()),
        }
        .map_err(|e| ApiError::bad_request(format!("offsets[{i}].partition: {e}")))?;
        let offset = match entry.get("offset") {
            None | Some(Value::Null) => None,
            Some(offset @ Value::Object(_)) => Some(
                canonical_object(&text_of(i, "offset", offset))
                    .map_err(|e| ApiError::bad_request(format!("offsets[{i}].offset: {e}")))?,
            ),
            Some(_) => {
                return Err(ApiError::bad_request(format!("offsets[{i}].offset: must be a JSON object or null")));
            }
        };
        changes.push((partition, offset));
    }
    state.herder.alter_offsets(&ns, &changes).await?;
    Ok(Json(json!({ "message": "The offsets for this connector have been altered successfully" })))
}

/// The `offsets` entries of a PATCH body as typed: each entry's keys and their values
/// text (`None` when the body is not that shape; the parsed body says what is wrong).
fn raw_offset_entries(body: &[u8]) -> Option<Vec<HashMap<String, Option<&RawValue>>>> {
    #[derive(serde::Deserialize)]
    struct Body<'a> {
        #[serde(borrow)]
        offsets: Vec<HashMap<String, Option<&'a RawValue>>>,
    }
    serde_json::from_slice::<Body>(super::without_bom(body)).ok().map(|body| body.offsets)
}

/// `DELETE /connectors/{name}/offsets`: forgets every offset of a STOPPED connector.
pub async fn reset_offsets(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.herder.reset_offsets(&caller.namespace(&name)?).await?;
    Ok(Json(json!({ "message": "The offsets for this connector have been reset successfully" })))
}

/// Refuses KIP-558's endpoints as Connect does when the worker does not track topics (or,
/// for a reset, does not allow resetting them).
fn topic_tracking_allowed(state: &ApiState, reset: bool) -> Result<(), ApiError> {
    let tracking = state.herder.services().topics.settings();
    if !tracking.enable {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "Topic tracking is disabled."));
    }
    if reset && !tracking.allow_reset {
        return Err(ApiError::new(StatusCode::FORBIDDEN, "Topic tracking reset is disabled."));
    }
    Ok(())
}

/// `GET /connectors/{name}/topics` (KIP-558): `{"<name>": {"topics": [...]}}`, the topics
/// the connector has written records to since they were last reset.
pub async fn topics(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    topic_tracking_allowed(&state, false)?;
    let ns = caller.namespace(&name)?;
    let topics = state.herder.active_topics(&ns).await?;
    Ok(Json(json!({ caller.name_of(&ns): { "topics": topics } })))
}

/// `PUT /connectors/{name}/topics/reset` (KIP-558): forgets them; 202.
pub async fn reset_topics(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    topic_tracking_allowed(&state, true)?;
    state.herder.reset_active_topics(&caller.namespace(&name)?).await?;
    Ok(StatusCode::ACCEPTED)
}
