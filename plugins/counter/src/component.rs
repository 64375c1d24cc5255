//! The component glue: the `source-connector` world implemented over [`crate::generator`].

use std::cell::RefCell;

use crate::generator;

wit_bindgen::generate!({ path: "../../wit", world: "source-connector" });

use exports::sluice::connector::connector::{
    Config, ConfigKey, ConfigProblem, ConnectorError, Guest as ConnectorGuest,
};
use exports::sluice::connector::task::{Guest as TaskGuest, SourceRecord};
use sluice::connector::log::{Level, log};
use sluice::connector::offset_storage_reader;
use sluice::connector::types::Header;
use sluice::connector::types::{ConfigType, Importance};

#[derive(Default)]
struct Settings {
    topic: String,
    count: u64,
    size: usize,
    batch: usize,
    rate: u64,
}

#[derive(Default)]
struct State {
    config: Config,
    settings: Settings,
    tasks: u32,
    task: u32,
    next: u64,
    started_at_ms: u64,
    emitted_since_start: u64,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn get<'a>(config: &'a Config, key: &str) -> Option<&'a str> {
    config.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn number(config: &Config, key: &str, default: u64) -> Result<u64, ConnectorError> {
    match get(config, key) {
        None => Ok(default),
        Some(text) => text
            .trim()
            .parse()
            .map_err(|_| ConnectorError::InvalidConfig(format!("{key}: '{text}' is not a non-negative integer"))),
    }
}

fn settings(config: &Config) -> Result<Settings, ConnectorError> {
    Ok(Settings {
        topic: get(config, "topic").ok_or_else(|| ConnectorError::InvalidConfig("topic: required".into()))?.to_string(),
        count: number(config, "record.count", 0)?,
        size: number(config, "record.size", 64)? as usize,
        batch: number(config, "batch.size", 100)?.max(1) as usize,
        rate: number(config, "records.per.second", 0)?,
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn partition(task: u32) -> String {
    format!("{{\"counter\":{task}}}")
}

/// `{"seq":41}` -> 41
fn committed_seq(offset: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(offset).ok()?;
    value.get("seq")?.as_u64()
}

struct Counter;

impl ConnectorGuest for Counter {
    fn version() -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    fn config_def() -> Vec<ConfigKey> {
        let key = |name: &str, default: Option<&str>, importance, doc: &str, ty| ConfigKey {
            name: name.into(),
            type_: ty,
            default_value: default.map(Into::into),
            importance,
            documentation: doc.into(),
        };
        vec![
            key("topic", None, Importance::High, "Destination topic.", ConfigType::String),
            key("record.count", Some("0"), Importance::Medium, "Records per task; 0 is endless.", ConfigType::Long),
            key("record.size", Some("64"), Importance::Low, "Bytes per record value.", ConfigType::Int),
            key("batch.size", Some("100"), Importance::Low, "Records returned per poll.", ConfigType::Int),
            key("records.per.second", Some("0"), Importance::Low, "Rate per task; 0 is unlimited.", ConfigType::Long),
        ]
    }

    fn validate(config: Config) -> Vec<ConfigProblem> {
        match settings(&config) {
            Ok(_) => Vec::new(),
            Err(ConnectorError::InvalidConfig(message)) => {
                let (key, message) = message.split_once(": ").unwrap_or(("", &message));
                vec![ConfigProblem { key: key.into(), message: message.into() }]
            }
            Err(_) => Vec::new(),
        }
    }

    fn start(config: Config) -> Result<(), ConnectorError> {
        let settings = settings(&config)?;
        STATE.with_borrow_mut(|state| {
            state.settings = settings;
            state.config = config;
        });
        Ok(())
    }

    /// Each task gets the connector's config plus its number.
    fn task_configs(max_tasks: u32) -> Result<Vec<Config>, ConnectorError> {
        STATE.with_borrow_mut(|state| {
            state.tasks = max_tasks;
            Ok((0..max_tasks)
                .map(|task| {
                    let mut config = state.config.clone();
                    config.push(("counter.task".to_string(), task.to_string()));
                    config
                })
                .collect())
        })
    }

    /// Reports how far each task has got, read through KIP-131's offset reader.
    fn tick() -> Result<(), ConnectorError> {
        let tasks = STATE.with_borrow(|state| state.tasks);
        let partitions: Vec<String> = (0..tasks).map(partition).collect();
        let committed = offset_storage_reader::offsets(&partitions);
        let progress: Vec<String> =
            committed.iter().map(|(p, o)| format!("{p}={}", o.as_deref().unwrap_or("none"))).collect();
        log(Level::Debug, &format!("committed offsets: {}", progress.join(", ")));
        Ok(())
    }

    fn stop() {}
}

impl TaskGuest for Counter {
    fn start(config: Config) -> Result<(), ConnectorError> {
        let settings = settings(&config)?;
        let task = number(&config, "counter.task", 0)? as u32;
        let next = offset_storage_reader::offset(&partition(task))
            .and_then(|offset| committed_seq(&offset))
            .map_or(0, |seq| seq + 1);
        log(Level::Info, &format!("task {task} resumes at record {next}"));
        STATE.with_borrow_mut(|state| {
            state.settings = settings;
            state.task = task;
            state.next = next;
            state.started_at_ms = now_ms();
            state.emitted_since_start = 0;
        });
        Ok(())
    }

    fn poll() -> Result<Vec<SourceRecord>, ConnectorError> {
        STATE.with_borrow_mut(|state| {
            let s = &state.settings;
            let mut batch = s.batch;
            if s.rate > 0 {
                let allowed = (now_ms() - state.started_at_ms + 1) * s.rate / 1000;
                let room = allowed.saturating_sub(state.emitted_since_start);
                batch = batch.min(room as usize);
            }
            let generated = generator::batch(state.task, state.next, batch, s.count, s.size);
            state.next += generated.len() as u64;
            state.emitted_since_start += generated.len() as u64;
            let topic = &s.topic;
            Ok(generated
                .into_iter()
                .map(|g| SourceRecord {
                    partition: g.partition,
                    offset: g.offset,
                    topic: Some(topic.clone()),
                    key: None,
                    value: Some(g.value),
                    headers: Vec::<Header>::new(),
                    timestamp: None,
                })
                .collect())
        })
    }

    fn commit() -> Result<(), ConnectorError> {
        Ok(())
    }

    fn stop() {}
}

export!(Counter);
