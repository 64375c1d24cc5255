//! Test fixture connector. Its behaviour is chosen by config so that one component can
//! exercise every import and every failure the host must survive.
//!
//! Connector keys:
//! - `topic` (required).
//! - `control.file`: JSON `{"tasks":[{...},...], "raise_error":"msg"}` read by
//!   `task-configs` and on every `tick`; when its text changes the connector calls
//!   `request-task-reconfiguration`, and a `raise_error` member makes it call
//!   `raise-error`. Without it there are `tasks.max` tasks, `{"task.id": i}`.
//! - `start.error`: the connector's `start` fails (`fatal`) with this message.
//! - `observe.file`: on every `tick` the connector writes what the offset reader
//!   returned for its tasks' partitions, through `offsets` (batch) and `offset` (single).
//!
//! Task keys (each task gets the connector config plus its own entries):
//! - `task.id`: partition `{"task": id}`, offset `{"seq": n}`, value `"<id>-<n>"`.
//! - `record.count` (0 = endless), `batch.size` (10), `records.per.second` (200).
//! - `poll.trap.at`, `poll.loop.at`, `poll.raise.error.at`, `poll.reconfigure.at`: at
//!   that sequence number, trap (`unreachable`), spin forever, call `raise-error`, or
//!   call `request-task-reconfiguration`.
//! - `poll.oversize.at`: the record at that sequence number carries a value of
//!   `oversize.bytes` bytes (default 2 MiB, above the host's default record cap).
//! - `trap.marker.file`: with `poll.trap.at`, trap only while this file does not exist,
//!   creating it first, so that the restarted task goes on.
//!
//! A component only: on any other target the crate is empty, so `cargo build --workspace`
//! works on the host.
#![cfg(target_family = "wasm")]

use std::cell::RefCell;
use std::collections::BTreeMap;

wit_bindgen::generate!({ path: "../../../wit", world: "source-connector" });

use exports::sluice::connector::connector::{
    Config, ConfigKey, ConfigProblem, ConnectorError, Guest as ConnectorGuest,
};
use exports::sluice::connector::task::{Guest as TaskGuest, SourceRecord};
use serde_json::{Value, json};
use sluice::connector::connector_context;
use sluice::connector::log::{Level, log};
use sluice::connector::offset_storage_reader;
use sluice::connector::types::{ConfigType, Importance};

#[derive(Default)]
struct State {
    config: BTreeMap<String, String>,
    task_ids: Vec<String>,
    control_seen: Option<String>,
    ticks: u64,
    task_configs_calls: u64,
    task_id: String,
    next: u64,
    started_ms: u64,
    emitted: u64,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn key(config: &BTreeMap<String, String>, name: &str) -> Option<u64> {
    config.get(name).and_then(|v| v.parse().ok())
}

fn partition(task_id: &str) -> String {
    json!({ "task": task_id }).to_string()
}

fn read_control(config: &BTreeMap<String, String>) -> Option<(String, Value)> {
    let path = config.get("control.file")?;
    let text = std::fs::read_to_string(path).ok()?;
    let value = serde_json::from_str(&text).ok()?;
    Some((text, value))
}

struct Testkit;

impl ConnectorGuest for Testkit {
    fn version() -> String {
        "0.1.0-testkit".into()
    }

    fn config_def() -> Vec<ConfigKey> {
        vec![
            ConfigKey {
                name: "topic".into(),
                type_: ConfigType::String,
                default_value: None,
                importance: Importance::High,
                documentation: "Destination topic.".into(),
            },
            ConfigKey {
                name: "record.count".into(),
                type_: ConfigType::Long,
                default_value: Some("0".into()),
                importance: Importance::Low,
                documentation: "Records per task; 0 is endless.".into(),
            },
        ]
    }

    fn validate(config: Config) -> Vec<ConfigProblem> {
        config
            .iter()
            .filter(|(k, v)| k == "topic" && v.contains(' '))
            .map(|_| ConfigProblem { key: "topic".into(), message: "must not contain spaces".into() })
            .collect()
    }

    fn start(config: Config) -> Result<(), ConnectorError> {
        STATE.with_borrow_mut(|state| state.config = config.into_iter().collect());
        match STATE.with_borrow(|state| state.config.get("start.error").cloned()) {
            Some(message) => Err(ConnectorError::Fatal(message)),
            None => Ok(()),
        }
    }

    fn task_configs(max_tasks: u32) -> Result<Vec<Config>, ConnectorError> {
        STATE.with_borrow_mut(|state| {
            state.task_configs_calls += 1;
            let control = read_control(&state.config);
            let overrides: Vec<BTreeMap<String, String>> = match &control {
                Some((_, value)) => value["tasks"]
                    .as_array()
                    .map(|tasks| {
                        tasks
                            .iter()
                            .map(|t| {
                                t.as_object()
                                    .map(|o| {
                                        o.iter()
                                            .map(|(k, v)| {
                                                let v = v.as_str().map_or(v.to_string(), String::from);
                                                (k.clone(), v)
                                            })
                                            .collect()
                                    })
                                    .unwrap_or_default()
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                None => (0..max_tasks).map(|i| BTreeMap::from([("task.id".to_string(), i.to_string())])).collect(),
            };
            state.control_seen = control.map(|(text, _)| text);
            let configs: Vec<Config> = overrides
                .into_iter()
                .take(max_tasks as usize)
                .map(|extra| {
                    let mut merged = state.config.clone();
                    merged.extend(extra);
                    merged.into_iter().collect()
                })
                .collect();
            state.task_ids =
                configs.iter().filter_map(|c| c.iter().find(|(k, _)| k == "task.id").map(|(_, v)| v.clone())).collect();
            Ok(configs)
        })
    }

    fn tick() -> Result<(), ConnectorError> {
        STATE.with_borrow_mut(|state| {
            state.ticks += 1;
            if let Some((text, value)) = read_control(&state.config) {
                if let Some(message) = value["raise_error"].as_str() {
                    connector_context::raise_error(message);
                    return Ok(());
                }
                if state.control_seen.as_deref() != Some(text.as_str()) {
                    state.control_seen = Some(text);
                    log(Level::Info, "control file changed: requesting task reconfiguration");
                    connector_context::request_task_reconfiguration();
                }
            }
            if let Some(path) = state.config.get("observe.file") {
                let partitions: Vec<String> = state.task_ids.iter().map(|id| partition(id)).collect();
                let batch: serde_json::Map<String, Value> = offset_storage_reader::offsets(&partitions)
                    .into_iter()
                    .map(|(p, o)| (p, o.map_or(Value::Null, |o| serde_json::from_str(&o).unwrap_or(Value::Null))))
                    .collect();
                let single: serde_json::Map<String, Value> = partitions
                    .iter()
                    .map(|p| {
                        let o = offset_storage_reader::offset(p);
                        (p.clone(), o.map_or(Value::Null, |o| serde_json::from_str(&o).unwrap_or(Value::Null)))
                    })
                    .collect();
                let observed = json!({
                    "ticks": state.ticks,
                    "task_configs_calls": state.task_configs_calls,
                    "batch": batch,
                    "single": single,
                });
                let tmp = format!("{path}.tmp");
                std::fs::write(&tmp, observed.to_string())
                    .and_then(|_| std::fs::rename(&tmp, path))
                    .map_err(|e| ConnectorError::Retriable(format!("observe.file {path}: {e}")))?;
            }
            Ok(())
        })
    }

    fn stop() {}
}

impl TaskGuest for Testkit {
    fn start(config: Config) -> Result<(), ConnectorError> {
        let config: BTreeMap<String, String> = config.into_iter().collect();
        let task_id = config.get("task.id").cloned().unwrap_or_else(|| "0".into());
        let next = offset_storage_reader::offset(&partition(&task_id))
            .and_then(|o| serde_json::from_str::<Value>(&o).ok())
            .and_then(|o| o["seq"].as_u64())
            .map_or(0, |seq| seq + 1);
        log(Level::Info, &format!("task {task_id} resumes at {next}"));
        STATE.with_borrow_mut(|state| {
            state.config = config;
            state.task_id = task_id;
            state.next = next;
            state.started_ms = now_ms();
            state.emitted = 0;
        });
        Ok(())
    }

    fn poll() -> Result<Vec<SourceRecord>, ConnectorError> {
        STATE.with_borrow_mut(|state| {
            let config = &state.config;
            let count = key(config, "record.count").unwrap_or(0);
            let batch = key(config, "batch.size").unwrap_or(10);
            let rate = key(config, "records.per.second").unwrap_or(200);
            let allowed = (now_ms() - state.started_ms + 1) * rate / 1000;
            let mut n = batch.min(allowed.saturating_sub(state.emitted));
            if count > 0 {
                n = n.min(count.saturating_sub(state.next));
            }
            let mut records = Vec::new();
            for _ in 0..n {
                let seq = state.next;
                if key(config, "poll.trap.at") == Some(seq) {
                    let marker = config.get("trap.marker.file");
                    if marker.is_none_or(|m| std::fs::metadata(m).is_err()) {
                        if let Some(m) = marker {
                            let _ = std::fs::write(m, b"trapped");
                        }
                        core::arch::wasm32::unreachable();
                    }
                }
                if key(config, "poll.loop.at") == Some(seq) {
                    let mut spins = 0u64;
                    loop {
                        spins = std::hint::black_box(spins.wrapping_add(1));
                    }
                }
                if key(config, "poll.raise.error.at") == Some(seq) {
                    connector_context::raise_error(&format!("task {} gave up at {seq}", state.task_id));
                    return Ok(records);
                }
                if key(config, "poll.reconfigure.at") == Some(seq) {
                    connector_context::request_task_reconfiguration();
                }
                let mut value = format!("{}-{seq}", state.task_id).into_bytes();
                if key(config, "poll.oversize.at") == Some(seq) {
                    value.resize(key(config, "oversize.bytes").unwrap_or(2 << 20) as usize, b'o');
                }
                records.push(SourceRecord {
                    partition: partition(&state.task_id),
                    offset: json!({ "seq": seq }).to_string(),
                    topic: config.get("topic").cloned(),
                    key: Some(state.task_id.clone().into_bytes()),
                    value: Some(value),
                    headers: Vec::new(),
                    timestamp: None,
                });
                state.next += 1;
                state.emitted += 1;
            }
            Ok(records)
        })
    }

    fn commit() -> Result<(), ConnectorError> {
        Ok(())
    }

    fn stop() {}
}

export!(Testkit);
