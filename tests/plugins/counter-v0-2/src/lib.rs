//! Test fixture: the minimal counter (as `counter-py` and `counter-js`) built against
//! `sluice:connector@0.2.0` with its own bindings, so that a host keeps being tested with a
//! 0.2.0 plugin, whose records carry their own bytes (a list of records of strings and
//! byte lists), now that the minimal Python and JavaScript counters target 0.4.0.
//!
//! One task; record `n` of partition `{"counter":0}` has offset `{"seq":n}` and a value of
//! `record.size` bytes (`"<n>"` then dots), `batch.size` records a poll.
//!
//! A component only: on any other target the crate is empty.
#![cfg(target_family = "wasm")]

use std::cell::RefCell;

wit_bindgen::generate!({ path: "../../../wit/0.2.0", world: "source-connector" });

use exports::sluice::connector::connector::{
    Config, ConfigKey, ConfigProblem, ConnectorError, Guest as ConnectorGuest,
};
use exports::sluice::connector::task::{Guest as TaskGuest, PollBatch};
use sluice::connector::types::{BatchRecord, ConfigType, Importance};

struct State {
    config: Config,
    topic: String,
    size: usize,
    batch: u64,
    next: u64,
}

thread_local! {
    static STATE: RefCell<State> =
        RefCell::new(State { config: Vec::new(), topic: "bench".into(), size: 1024, batch: 500, next: 0 });
}

fn key(name: &str, default: &str, documentation: &str) -> ConfigKey {
    ConfigKey {
        name: name.into(),
        type_: if name == "topic" { ConfigType::String } else { ConfigType::Int },
        default_value: Some(default.into()),
        importance: Importance::Medium,
        documentation: documentation.into(),
    }
}

struct Counter;

impl ConnectorGuest for Counter {
    fn version() -> String {
        "0.1.0".into()
    }

    fn config_def() -> Vec<ConfigKey> {
        vec![
            key("topic", "bench", "Destination topic."),
            key("record.size", "1024", "Bytes per value."),
            key("batch.size", "500", "Records per poll."),
        ]
    }

    fn validate(_config: Config) -> Vec<ConfigProblem> {
        Vec::new()
    }

    fn start(config: Config) -> Result<(), ConnectorError> {
        STATE.with_borrow_mut(|state| state.config = config);
        Ok(())
    }

    fn task_configs(_max_tasks: u32) -> Result<Vec<Config>, ConnectorError> {
        Ok(vec![STATE.with_borrow(|state| state.config.clone())])
    }

    fn tick() -> Result<(), ConnectorError> {
        Ok(())
    }

    fn stop() {}
}

impl TaskGuest for Counter {
    fn start(config: Config) -> Result<(), ConnectorError> {
        let value = |name: &str| config.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let number = |name: &str, default: u64| value(name).and_then(|v| v.parse().ok()).unwrap_or(default);
        STATE.with_borrow_mut(|state| {
            state.topic = value("topic").unwrap_or_else(|| "bench".into());
            state.size = number("record.size", 1024) as usize;
            state.batch = number("batch.size", 500);
            state.next = 0;
        });
        Ok(())
    }

    fn poll() -> Result<PollBatch, ConnectorError> {
        STATE.with_borrow_mut(|state| {
            let first = state.next;
            state.next += state.batch;
            let records = (first..state.next)
                .map(|n| {
                    let mut value = n.to_string().into_bytes();
                    value.resize(value.len().max(state.size), b'.');
                    BatchRecord {
                        partition: 0,
                        offset: format!(r#"{{"seq":{n}}}"#),
                        topic: Some(0),
                        key: None,
                        value: Some(value),
                        headers: Vec::new(),
                        timestamp: None,
                    }
                })
                .collect();
            Ok(PollBatch {
                partitions: vec![r#"{"counter":0}"#.into()],
                topics: vec![state.topic.clone()],
                records,
                done: false,
            })
        })
    }

    fn commit() -> Result<(), ConnectorError> {
        Ok(())
    }

    fn stop() {}
}

export!(Counter);
