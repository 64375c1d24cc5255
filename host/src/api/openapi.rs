//! The OpenAPI 3 document of the whole API, served at `GET /openapi.json`. A test checks
//! that it lists every route of the router and nothing else; the API fuzz test
//! (`tests/e2e/rest_fuzz.rs`) generates requests from it.

use serde_json::{Map, Value, json};

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn json_content(schema: Value) -> Value {
    json!({ "application/json": { "schema": schema } })
}

fn path_param(name: &str, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "path", "required": true, "description": description, "schema": schema })
}

fn bool_query(name: &str, description: &str) -> Value {
    json!({ "name": name, "in": "query", "required": false, "description": description, "schema": { "type": "boolean" } })
}

/// One operation: its summary, parameters, JSON body (if any) and responses by status
/// (`None`: no body). Every operation also has Connect's error body as its default.
fn operation(
    summary: &str,
    parameters: Vec<Value>,
    body: Option<Value>,
    responses: &[(&str, &str, Option<Value>)],
) -> Value {
    let mut answers = Map::new();
    for (status, description, schema) in responses {
        let mut response = json!({ "description": description });
        if let Some(schema) = schema {
            response["content"] = json_content(schema.clone());
        }
        answers.insert(status.to_string(), response);
    }
    answers.insert(
        "default".into(),
        json!({ "description": "Connect's error body", "content": json_content(schema_ref("Error")) }),
    );
    let mut operation = json!({ "summary": summary, "parameters": parameters, "responses": answers });
    if let Some(body) = body {
        operation["requestBody"] = json!({ "required": true, "content": json_content(body) });
    }
    operation
}

/// `getConnectorsNameStatus` for `GET /connectors/{name}/status`.
fn operation_id(method: &str, path: &str) -> String {
    let mut id = method.to_lowercase();
    for word in path.split(['/', '-', '.', '{', '}']).filter(|w| !w.is_empty()) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            id.push(first.to_ascii_uppercase());
            id.extend(chars);
        }
    }
    id
}

/// Gives every operation an `operationId`, and links the connectors that `POST
/// /connectors` and `PUT /connectors/{name}/config` create to every operation on a
/// connector (how a client, or a fuzzer, follows a create with the rest).
fn with_operation_ids_and_links(mut paths: Value) -> Value {
    let mut links = Map::new();
    for (path, operations) in paths.as_object_mut().unwrap() {
        for (method, operation) in operations.as_object_mut().unwrap() {
            let id = operation_id(method, path);
            operation["operationId"] = json!(id);
            if path.starts_with("/connectors/{name}") {
                let mut parameters = json!({ "name": "$response.body#/name" });
                if path.contains("{task}") {
                    parameters["task"] = json!(0);
                }
                links.insert(id.clone(), json!({ "operationId": id, "parameters": parameters }));
            }
        }
    }
    for (path, method, status) in [("/connectors", "post", "201"), ("/connectors/{name}/config", "put", "201")] {
        paths[path][method]["responses"][status]["links"] = Value::Object(links.clone());
    }
    paths
}

/// The document.
pub fn document() -> Value {
    let name = || {
        path_param(
            "name",
            "The connector's name; the operator may qualify it with its tenant (`tenant%2Fname`)",
            json!({ "type": "string" }),
        )
    };
    let task = || path_param("task", "The task's id", json!({ "type": "integer", "minimum": 0 }));
    let plugin =
        || path_param("plugin", "The plugin's name (its .wasm file name without .wasm)", json!({ "type": "string" }));
    let logger = || {
        path_param(
            "logger",
            "A tracing target (`sluice::connect`, `plugin`, `librdkafka`, ...) or `root`",
            json!({ "type": "string" }),
        )
    };
    let none: Vec<Value> = Vec::new();
    let info = Some(schema_ref("ConnectorInfo"));
    let status = Some(schema_ref("ConnectorStatus"));
    let message = Some(schema_ref("Message"));
    let paths = json!({
        "/": { "get": operation("The worker's version, commit and cluster id", none.clone(), None, &[("200", "The worker", Some(schema_ref("ServerInfo")))]) },
        "/connectors": {
            "get": operation(
                "The connectors' names, or with ?expand=status and/or ?expand=info an object by name",
                vec![json!({
                    "name": "expand", "in": "query", "required": false, "style": "form", "explode": true,
                    "schema": { "type": "array", "items": { "type": "string", "enum": ["status", "info"] } }
                })],
                None,
                &[("200", "Names, or expanded connectors", Some(json!({ "oneOf": [
                    { "type": "array", "items": { "type": "string" } },
                    { "type": "object", "additionalProperties": { "type": "object", "properties": {
                        "status": schema_ref("ConnectorStatus"), "info": schema_ref("ConnectorInfo") } } }
                ] })))],
            ),
            "post": operation(
                "Create a connector",
                none.clone(),
                Some(schema_ref("CreateConnector")),
                &[("201", "Created", info.clone()), ("400", "Bad config", Some(schema_ref("Error"))), ("409", "It exists", Some(schema_ref("Error")))],
            ),
        },
        "/connectors/{name}": {
            "get": operation("A connector's name, config and tasks", vec![name()], None, &[("200", "The connector", info.clone())]),
            "delete": operation("Stop and delete a connector (its offsets stay)", vec![name()], None, &[("204", "Deleted", None)]),
        },
        "/connectors/{name}/config": {
            "get": operation("A connector's config", vec![name()], None, &[("200", "The config", Some(schema_ref("Config")))]),
            "put": operation(
                "Create (201) or update (200) a connector",
                vec![name()],
                Some(schema_ref("Config")),
                &[("200", "Updated", info.clone()), ("201", "Created", info.clone())],
            ),
            "patch": operation(
                "Change some keys of a connector's config (KIP-477: a null value removes the key)",
                vec![name()],
                Some(json!({ "type": "object", "additionalProperties": { "type": ["string", "null"] } })),
                &[("200", "Updated", info.clone())],
            ),
        },
        "/connectors/{name}/status": {
            "get": operation("A connector's and its tasks' states", vec![name()], None, &[("200", "The status", status.clone())]),
        },
        "/connectors/{name}/restart": {
            "post": operation(
                "Restart the connector, and with includeTasks its tasks (onlyFailed: only what failed)",
                vec![name(), bool_query("includeTasks", "Restart its tasks too"), bool_query("onlyFailed", "Restart only what is FAILED")],
                None,
                &[("202", "Restarting: the status, what restarts RESTARTING", status.clone()), ("204", "The connector restarts", None)],
            ),
        },
        "/connectors/{name}/pause": { "put": operation("Pause a connector", vec![name()], None, &[("202", "Pausing", None)]) },
        "/connectors/{name}/resume": { "put": operation("Resume a connector (a STOPPED one starts)", vec![name()], None, &[("202", "Resuming", None)]) },
        "/connectors/{name}/stop": {
            "put": operation("Stop a connector: no tasks, offsets committed (KIP-875)", vec![name()], None, &[("204", "Stopped", None)]),
        },
        "/connectors/{name}/tasks": {
            "get": operation("The connector's task configs", vec![name()], None, &[("200", "Tasks", Some(json!({ "type": "array", "items": schema_ref("TaskInfo") })))]),
        },
        "/connectors/{name}/tasks-config": {
            "get": operation(
                "Each task's config by `<name>-<task>` (Connect 3.x; deprecated by KIP-970)",
                vec![name()],
                None,
                &[("200", "Task configs", Some(json!({ "type": "object", "additionalProperties": {
                    "type": "object", "additionalProperties": { "type": "string" } } })))],
            ),
        },
        "/connectors/{name}/tasks/{task}/status": {
            "get": operation("One task's state", vec![name(), task()], None, &[("200", "The task", Some(schema_ref("TaskStatus")))]),
        },
        "/connectors/{name}/tasks/{task}/restart": {
            "post": operation("Restart one task", vec![name(), task()], None, &[("204", "Restarting", None)]),
        },
        "/connectors/{name}/topics": {
            "get": operation(
                "The topics the connector has written to since they were last reset (KIP-558)",
                vec![name()],
                None,
                &[
                    ("200", "Active topics, by connector", Some(json!({ "type": "object", "additionalProperties": {
                        "type": "object", "required": ["topics"],
                        "properties": { "topics": { "type": "array", "items": { "type": "string" } } } } }))),
                    ("403", "Topic tracking is disabled", Some(schema_ref("Error"))),
                ],
            ),
        },
        "/connectors/{name}/topics/reset": {
            "put": operation(
                "Forget the connector's active topics (KIP-558)",
                vec![name()],
                None,
                &[("202", "Reset", None), ("403", "Topic tracking or its reset is disabled", Some(schema_ref("Error")))],
            ),
        },
        "/connectors/{name}/offsets": {
            "get": operation("The connector's committed offsets (KIP-875)", vec![name()], None, &[("200", "Offsets", Some(schema_ref("Offsets")))]),
            "patch": operation(
                "Set or (offset null) forget offsets of a STOPPED connector",
                vec![name()],
                Some(schema_ref("Offsets")),
                &[("200", "Altered", message.clone()), ("400", "Not STOPPED, or a bad body", Some(schema_ref("Error")))],
            ),
            "delete": operation(
                "Forget every offset of a STOPPED connector",
                vec![name()],
                None,
                &[("200", "Reset", message.clone()), ("400", "Not STOPPED", Some(schema_ref("Error")))],
            ),
        },
        "/health": {
            "get": operation(
                "Whether the worker is ready (KIP-1017); public",
                none.clone(),
                None,
                &[("200", "Healthy", Some(schema_ref("Health"))), ("500", "The herder did not answer in time", Some(schema_ref("Health")))],
            ),
        },
        "/admin/loggers": {
            "get": operation(
                "The worker's log levels: root and every logger named (KIP-495)",
                none.clone(),
                None,
                &[("200", "Levels by logger", Some(json!({ "type": "object", "additionalProperties": schema_ref("LoggerLevel") }))),
                  ("403", "A tenant's token", Some(schema_ref("Error")))],
            ),
        },
        "/admin/loggers/{logger}": {
            "get": operation(
                "One logger's level",
                vec![logger()],
                None,
                &[("200", "Its level", Some(schema_ref("LoggerLevel"))), ("404", "Never named", Some(schema_ref("Error")))],
            ),
            "put": operation(
                "Set a logger's level, and of the loggers beneath it (root: all); ?scope=cluster answers 204",
                vec![logger(), json!({ "name": "scope", "in": "query", "required": false, "schema": { "type": "string", "enum": ["worker", "cluster"] } })],
                Some(json!({ "type": "object", "required": ["level"], "properties": {
                    "level": { "type": "string", "enum": ["OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"] } } })),
                &[("200", "The loggers set", Some(json!({ "type": "array", "items": { "type": "string" } }))),
                  ("204", "Set (cluster scope)", None),
                  ("400", "A bad level or logger name", Some(schema_ref("Error")))],
            ),
        },
        "/connector-plugins": {
            "get": operation(
                "The plugins in the plugin folder",
                vec![bool_query("connectorsOnly", "Only connectors (the default); false lists the transforms and predicates the host runs too (KIP-769)")],
                None,
                &[("200", "Plugins", Some(json!({ "type": "array", "items": schema_ref("PluginInfo") })))],
            ),
        },
        "/connector-plugins/{plugin}/config": {
            "get": operation(
                "The keys a connector of the plugin takes: the host's, then the plugin's config-def; or a transform's or predicate's keys (KIP-769)",
                vec![plugin()],
                None,
                &[("200", "Keys", Some(json!({ "type": "array", "items": schema_ref("ConfigKeyInfo") })))],
            ),
        },
        "/connector-plugins/{plugin}/config/validate": {
            "put": operation(
                "Every problem of a config, key by key (200 even when it is bad)",
                vec![plugin()],
                Some(schema_ref("Config")),
                &[("200", "The checked config", Some(schema_ref("ConfigInfos")))],
            ),
        },
        "/sluice/rejected-plugins": {
            "get": operation(
                "Plugin files that could not be loaded, and why (retried when the file changes)",
                none.clone(),
                None,
                &[("200", "Rejected files", Some(json!({ "type": "array", "items": { "type": "object",
                    "required": ["file", "reason"],
                    "properties": { "file": { "type": "string" }, "reason": { "type": "string" } } } })))],
            ),
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics of every connector and task (the operator's token when tenants exist)",
                "parameters": [],
                "responses": {
                    "200": { "description": "Prometheus text format", "content": { "text/plain": { "schema": { "type": "string" } } } },
                    "default": { "description": "Connect's error body", "content": json_content(schema_ref("Error")) },
                },
            },
        },
        "/openapi.json": {
            "get": operation("This document", none, None, &[("200", "OpenAPI 3", Some(json!({ "type": "object" })))]),
        },
    });
    let paths = with_operation_ids_and_links(paths);
    let string_map = json!({ "type": "object", "additionalProperties": { "type": "string" } });
    let state =
        json!({ "type": "string", "enum": ["UNASSIGNED", "RUNNING", "PAUSED", "STOPPED", "FAILED", "RESTARTING"] });
    let task_status = json!({
        "type": "object",
        "required": ["id", "state", "worker_id"],
        "properties": {
            "id": { "type": "integer" }, "state": state, "worker_id": { "type": "string" }, "trace": { "type": "string" },
            "version": { "type": "string" }, "instance": { "type": "integer" }, "fuel_used": { "type": "integer" },
            "records_refused": { "type": "integer" }, "memory_bytes": { "type": "integer" }
        }
    });
    let config_key = json!({
        "type": "object",
        "required": ["name", "type", "required", "importance", "documentation"],
        "properties": {
            "name": { "type": "string" }, "type": { "type": "string" }, "required": { "type": "boolean" },
            "default_value": { "type": "string", "nullable": true }, "importance": { "type": "string" },
            "documentation": { "type": "string" }, "group": { "type": "string" }, "width": { "type": "string" },
            "display_name": { "type": "string" }, "dependents": { "type": "array", "items": { "type": "string" } },
            "order": { "type": "integer" }
        }
    });
    let partition_offsets = json!({
        "type": "object",
        "required": ["offsets"],
        "properties": { "offsets": { "type": "array", "items": {
            "type": "object",
            "required": ["partition"],
            "properties": { "partition": { "type": "object" }, "offset": { "type": "object", "nullable": true } }
        } } }
    });
    let schemas = json!({
        "Error": { "type": "object", "required": ["error_code", "message"], "properties": {
            "error_code": { "type": "integer" }, "message": { "type": "string" } } },
        "Message": { "type": "object", "required": ["message"], "properties": { "message": { "type": "string" } } },
        "ServerInfo": { "type": "object", "required": ["version", "commit", "kafka_cluster_id"], "properties": {
            "version": { "type": "string" }, "commit": { "type": "string" }, "kafka_cluster_id": { "type": "string" } } },
        "Config": string_map.clone(),
        "CreateConnector": { "type": "object", "required": ["name", "config"], "properties": {
            "name": { "type": "string" }, "config": string_map,
            "initial_state": { "type": "string", "enum": ["RUNNING", "PAUSED", "STOPPED"] } } },
        "ConnectorInfo": { "type": "object", "required": ["name", "config", "tasks", "type"], "properties": {
            "name": { "type": "string" },
            "config": { "type": "object", "additionalProperties": { "type": "string" } },
            "tasks": { "type": "array", "items": schema_ref("TaskId") },
            "type": { "type": "string", "enum": ["source"] } } },
        "TaskId": { "type": "object", "required": ["connector", "task"], "properties": {
            "connector": { "type": "string" }, "task": { "type": "integer" } } },
        "TaskInfo": { "type": "object", "required": ["id", "config"], "properties": {
            "id": schema_ref("TaskId"), "config": { "type": "object", "additionalProperties": { "type": "string" } } } },
        "ConnectorStatus": { "type": "object", "required": ["name", "connector", "tasks", "type"], "properties": {
            "name": { "type": "string" },
            "connector": { "type": "object", "required": ["state", "worker_id"], "properties": {
                "state": state, "worker_id": { "type": "string" }, "trace": { "type": "string" }, "version": { "type": "string" } } },
            "tasks": { "type": "array", "items": schema_ref("TaskStatus") },
            "type": { "type": "string" } } },
        "TaskStatus": task_status,
        "Offsets": partition_offsets,
        "Health": { "type": "object", "required": ["status", "message"], "properties": {
            "status": { "type": "string", "enum": ["healthy", "unhealthy"] }, "message": { "type": "string" } } },
        "LoggerLevel": { "type": "object", "required": ["level"], "properties": {
            "level": { "type": "string" }, "last_modified": { "type": "integer", "nullable": true } } },
        "PluginInfo": { "type": "object", "required": ["class", "type", "version"], "properties": {
            "class": { "type": "string" }, "type": { "type": "string" }, "version": { "type": "string" } } },
        "ConfigKeyInfo": config_key,
        "ConfigInfos": { "type": "object", "required": ["name", "error_count", "groups", "configs"], "properties": {
            "name": { "type": "string" }, "error_count": { "type": "integer" },
            "groups": { "type": "array", "items": { "type": "string" } },
            "configs": { "type": "array", "items": { "type": "object", "properties": {
                "definition": schema_ref("ConfigKeyInfo"),
                "value": { "type": "object", "properties": {
                    "name": { "type": "string" }, "value": { "type": "string", "nullable": true },
                    "recommended_values": { "type": "array", "items": { "type": "string" } },
                    "errors": { "type": "array", "items": { "type": "string" } },
                    "visible": { "type": "boolean" } } } } } } } }
    });
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Sluice REST API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Kafka Connect's REST API (3.x/4.x) for Sluice's sandboxed source connectors. With tenants declared in sluice.toml every request but this document's needs 'Authorization: Bearer <token>'. See docs/rest-api.md."
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": schemas
        },
        "security": [{ "bearer": [] }, {}],
        "paths": paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_lists_every_route_and_only_those() {
        let document = document();
        let paths = document["paths"].as_object().unwrap();
        let mut documented: Vec<(String, String)> = paths
            .iter()
            .flat_map(|(path, operations)| {
                operations.as_object().unwrap().keys().map(move |method| (method.to_uppercase(), path.clone()))
            })
            .collect();
        let mut routed: Vec<(String, String)> = super::super::route_list()
            .into_iter()
            .map(|(method, path)| (method.to_string(), path.to_string()))
            .collect();
        documented.sort();
        routed.sort();
        assert_eq!(documented, routed);
    }
}
