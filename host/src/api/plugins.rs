//! `/connector-plugins`: the plugin folder as Kafka Connect shows its plugins (list, config
//! definitions, validate), and `/sluice/rejected-plugins`: the files that could not be
//! loaded and why.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use serde_json::{Map, Value, json};

use super::auth::Caller;
use super::error::ApiError;
use super::{ApiState, bool_param_or, json_body, query_pairs};
use crate::config::keys::{CONNECTOR_CLASS, NAME, TENANT};
use crate::config::{ConfigKeyInfo, ConnectorConfig, DEFAULT_TENANT, HOST_KEYS};
use crate::runtime::Plugin;

type Shared = State<Arc<ApiState>>;

/// The group Connect puts its own connector keys in.
const COMMON_GROUP: &str = "Common";

/// `GET /connector-plugins[?connectorsOnly=]`: every plugin is a source connector; with
/// `connectorsOnly=false` (KIP-769) the transforms and predicates the host runs follow,
/// as Connect lists its own.
pub async fn list(State(state): Shared, RawQuery(query): RawQuery) -> Result<Json<Value>, ApiError> {
    let pairs = query_pairs(query.as_deref())?;
    let connectors_only = bool_param_or(&pairs, "connectorsOnly", true)?;
    state.herder.registry().whole_folder_loaded().await;
    let mut plugins: Vec<Value> = state
        .herder
        .registry()
        .plugins()
        .iter()
        .map(|p| json!({ "class": p.name, "type": "source", "version": p.version }))
        .collect();
    if !connectors_only {
        let version = env!("CARGO_PKG_VERSION");
        plugins.extend(
            crate::config::transforms::plugin_classes()
                .into_iter()
                .map(|(class, kind)| json!({ "class": class, "type": kind, "version": version })),
        );
    }
    Ok(Json(Value::Array(plugins)))
}

async fn plugin(state: &ApiState, name: &str) -> Result<Arc<Plugin>, ApiError> {
    let services = state.herder.services();
    services.registry.get_or_load(&services.runtime, name).await.ok_or_else(|| {
        ApiError::not_found(format!(
            "Unknown plugin {name}: no usable {name}.wasm in the plugin folder (GET /connector-plugins lists the plugins, GET /sluice/rejected-plugins the files that failed)"
        ))
    })
}

/// The 1-based place of `definitions[at]` among the keys of its group, as Connect's
/// `orderInGroup` counts (each group from 1).
fn order_in_group<K>(definitions: &[(K, String)], at: usize) -> usize {
    let group = &definitions[at].1;
    definitions[..=at].iter().filter(|(_, g)| g == group).count()
}

/// Connect's `ConfigKeyInfo`, with the group and order it shows.
fn definition(key: &ConfigKeyInfo, group: &str, order: usize) -> Value {
    json!({
        "name": key.name,
        "type": key.type_name,
        "required": key.required,
        "default_value": key.default_value,
        "importance": key.importance,
        "documentation": key.documentation,
        "group": group,
        "width": "NONE",
        "display_name": key.name,
        "dependents": [],
        "order": order,
    })
}

/// The host's keys (group `Common`, as Connect's own) then the plugin's `config-def`.
fn definitions(plugin: &Plugin) -> Vec<(ConfigKeyInfo, String)> {
    let host = HOST_KEYS.iter().map(|key| (ConfigKeyInfo::from(key), COMMON_GROUP.to_string()));
    let own = plugin.config_def.iter().map(|key| (key.clone(), plugin.name.clone()));
    host.chain(own).collect()
}

/// `GET /connector-plugins/{plugin}/config`: the keys a connector of this plugin takes, or
/// (KIP-769) the keys of a transform or predicate `?connectorsOnly=false` lists.
pub async fn config(State(state): Shared, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    use crate::config::transforms::{class_of_alias, plugin_keys};
    let transform_keys = |class: &str| {
        let keys = plugin_keys(class)?;
        let simple = class.rsplit('.').next().unwrap_or(class);
        Some(Json(Value::Array(
            keys.iter().enumerate().map(|(order, key)| definition(key, simple, order + 1)).collect(),
        )))
    };
    if let Some(keys) = transform_keys(&name) {
        return Ok(keys);
    }
    // A plugin file of that name comes first; then a transform's alias (`RegexRouter`),
    // which Connect resolves here too.
    let plugin = match plugin(&state, &name).await {
        Ok(plugin) => plugin,
        Err(_) => {
            return class_of_alias(&name).and_then(|class| transform_keys(&class)).ok_or_else(|| {
                ApiError::not_found(format!(
                    "Unknown plugin {name}: no usable {name}.wasm in the plugin folder, and no transform or predicate of that name (GET /connector-plugins?connectorsOnly=false lists them all, GET /sluice/rejected-plugins the files that failed)"
                ))
            });
        }
    };
    let definitions = definitions(&plugin);
    let keys: Vec<Value> = definitions
        .iter()
        .enumerate()
        .map(|(at, (key, group))| definition(key, group, order_in_group(&definitions, at)))
        .collect();
    Ok(Json(Value::Array(keys)))
}

/// `PUT /connector-plugins/{plugin}/config/validate`: 200 with every problem of the config,
/// key by key, in Connect's shape (`name`, `error_count`, `groups`, `configs`).
pub async fn validate(
    State(state): Shared,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let plugin = plugin(&state, &name).await?;
    let Value::Object(mut values) = json_body(&body)? else {
        return Err(ApiError::bad_request("Expected the connector's config: a JSON object of string values"));
    };
    match values.get(CONNECTOR_CLASS).and_then(Value::as_str) {
        None => {
            values.insert(CONNECTOR_CLASS.into(), Value::String(name.clone()));
        }
        Some(class) if class != name => {
            return Err(ApiError::bad_request(format!(
                "Included connector type {class} does not match request type {name}"
            )));
        }
        Some(_) => {}
    }
    let mut problems: Vec<(String, String)> = Vec::new();
    let connector_name = match values.get(NAME).and_then(|value| crate::config::value_text(value).ok()) {
        Some(n) if !n.is_empty() => n,
        _ => {
            problems.push((NAME.into(), "Missing required configuration \"name\" which has no default value.".into()));
            "validate".into()
        }
    };
    // What a create would refuse before the config is looked at (`new_config`), said here too.
    if connector_name.contains('/') && !matches!(caller, Caller::Operator { .. }) {
        problems.push((NAME.into(), super::connectors::slash_refused(&connector_name)));
    }
    let unqualified = connector_name.rsplit('/').next().unwrap_or(&connector_name);
    if let Some(reason) = super::connectors::name_too_long(unqualified) {
        problems.push((NAME.into(), reason));
    }
    // The tenant the config is checked as, as a create would store it: the caller's, else
    // (the operator) the one its qualified name names, else the config's own `tenant`
    // (given as text or a number alike).
    let given = values.get(TENANT).and_then(|value| crate::config::value_text(value).ok());
    let qualifier = match caller {
        Caller::Operator { .. } => connector_name.split_once('/').map(|(tenant, _)| tenant.to_string()),
        _ => None,
    };
    let decided = caller.tenant().map(String::from).or(qualifier);
    if let (Some(request), Some(given)) = (decided.as_deref(), given.as_deref())
        && request != given
    {
        problems.push((TENANT.into(), super::connectors::not_this_tenant(given, request)));
    }
    let tenant = decided.or(given).unwrap_or_else(|| DEFAULT_TENANT.to_string());
    // Values that are not text (nulls, objects, lists) are problems of their own; the rest
    // of the config is checked without them, so its problems are listed too.
    let mut checked = values.clone();
    for problem in ConnectorConfig::value_problems(&values, &super::connectors::source_of(&connector_name)) {
        let key = problem.key.expect("a value's problem names its key");
        checked.remove(&key);
        problems.push((key, problem.reason));
    }
    // Checked as the caller's tenant would store it (never as another tenant the body
    // names); reported as sent.
    if tenant == DEFAULT_TENANT {
        checked.remove(TENANT);
    } else {
        checked.insert(TENANT.into(), Value::String(tenant));
    }
    match ConnectorConfig::from_map(
        Some(connector_name.replace('/', "_")),
        &checked,
        &super::connectors::source_of(&connector_name),
    ) {
        Ok(config) => {
            for problem in state.herder.problems(&config).await {
                problems.push((problem.key.unwrap_or_else(|| CONNECTOR_CLASS.into()), problem.reason));
            }
        }
        Err(problem) => problems.push((problem.key.unwrap_or_else(|| CONNECTOR_CLASS.into()), problem.reason)),
    }
    let mut definitions = definitions(&plugin);
    let mut defined: std::collections::HashSet<String> = definitions.iter().map(|(d, _)| d.name.clone()).collect();
    let mut errors_of: std::collections::HashMap<&str, Vec<&String>> = std::collections::HashMap::new();
    for (key, reason) in &problems {
        errors_of.entry(key.as_str()).or_default().push(reason);
    }
    for (key, _) in &problems {
        if defined.insert(key.clone()) {
            let info = ConfigKeyInfo {
                name: key.clone(),
                type_name: "STRING".into(),
                default_value: None,
                required: false,
                importance: "LOW".into(),
                documentation: String::new(),
            };
            definitions.push((info, plugin.name.clone()));
        }
    }
    let mut groups: Vec<String> = Vec::new();
    let mut grouped = std::collections::HashSet::new();
    let configs: Vec<Value> = definitions
        .iter()
        .enumerate()
        .map(|(at, (key, group))| {
            if grouped.insert(group.clone()) {
                groups.push(group.clone());
            }
            let errors = errors_of.get(key.name.as_str()).cloned().unwrap_or_default();
            let value = values.get(&key.name).map(|v| match v {
                Value::String(s) => Value::String(s.clone()),
                Value::Null => Value::Null,
                other => Value::String(other.to_string()),
            });
            json!({
                "definition": definition(key, group, order_in_group(&definitions, at)),
                "value": {
                    "name": key.name,
                    "value": value.unwrap_or(Value::Null),
                    "recommended_values": [],
                    "errors": errors,
                    "visible": true,
                },
            })
        })
        .collect();
    let mut body = Map::new();
    body.insert("name".into(), json!(name));
    body.insert("error_count".into(), json!(problems.len()));
    body.insert("groups".into(), json!(groups));
    body.insert("configs".into(), Value::Array(configs));
    Ok(Json(Value::Object(body)))
}

/// `GET /sluice/rejected-plugins`: `[{"file", "reason"}]`, retried when the file changes.
pub async fn rejected(State(state): Shared) -> Json<Value> {
    state.herder.registry().whole_folder_loaded().await;
    let rejected: Vec<Value> = state
        .herder
        .registry()
        .rejected()
        .iter()
        .map(|r| json!({ "file": r.file.display().to_string(), "reason": r.reason }))
        .collect();
    Json(Value::Array(rejected))
}
