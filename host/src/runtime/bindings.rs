//! Rust bindings for every released version of the `sluice:connector` world, generated
//! from `wit/` at build time: [`v0_1`] (`wit/connector.wit`) and [`v0_2`]
//! (`wit/0.2.0/connector.wit`). The host serves plugins of both; the rest of the host
//! sees one set of types: 0.1.0's config and error types, and 0.2.0's [`PollBatch`],
//! into which a 0.1.0 plugin's list of records is converted ([`PollBatch::from_records`]).
//!
//! Exports are called asynchronously so that epoch interruption can yield a busy plugin
//! and a wall-clock deadline can abandon a call blocked anywhere. The offset reader's
//! imports are async (their store lookups run off the async runtime's threads) and may
//! trap (a request past the instance's limits is refused); the other imports only queue
//! a request or a log line.

use std::collections::HashMap;

pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "source-connector",
        imports: {
            "sluice:connector/offset-storage-reader.offset": async | trappable,
            "sluice:connector/offset-storage-reader.offsets": async | trappable,
        },
        exports: { default: async },
    });
}

pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit/0.2.0",
        world: "source-connector",
        imports: {
            "sluice:connector/offset-storage-reader.offset": async | trappable,
            "sluice:connector/offset-storage-reader.offsets": async | trappable,
        },
        exports: { default: async },
    });
}

pub use self::v0_1::sluice::connector::types::{
    ConfigKey, ConfigProblem, ConfigType, ConnectorError, Header, Importance, SourceRecord,
};
use self::v0_2::sluice::connector::types::Header as NewHeader;
pub use self::v0_2::sluice::connector::types::{BatchRecord, PollBatch};

/// The versions of the world this host serves, newest first, as a plugin's exports name them.
pub const WORLD_VERSIONS: [&str; 2] = ["0.2.0", "0.1.0"];

impl PollBatch {
    /// A 0.1.0 plugin's records as a batch: each distinct partition and topic once.
    pub fn from_records(records: Vec<SourceRecord>) -> PollBatch {
        let mut partitions: Vec<String> = Vec::new();
        let mut topics: Vec<String> = Vec::new();
        let mut partition_index: HashMap<String, u32> = HashMap::new();
        let mut topic_index: HashMap<String, u32> = HashMap::new();
        let records = records
            .into_iter()
            .map(|r| BatchRecord {
                partition: intern(r.partition, &mut partition_index, &mut partitions),
                offset: r.offset,
                topic: r.topic.map(|t| intern(t, &mut topic_index, &mut topics)),
                key: r.key,
                value: r.value,
                headers: r.headers.into_iter().map(|h| NewHeader { key: h.key, value: h.value }).collect(),
                timestamp: r.timestamp,
            })
            .collect();
        PollBatch { partitions, topics, records, done: false }
    }
}

fn intern(text: String, index: &mut HashMap<String, u32>, list: &mut Vec<String>) -> u32 {
    if let Some(&at) = index.get(&text) {
        return at;
    }
    let at = list.len() as u32;
    list.push(text.clone());
    index.insert(text, at);
    at
}

/// 0.2.0's copies of the shared types, as the host's (0.1.0's) types.
pub mod from_v0_2 {
    use super::v0_2::sluice::connector::types as new;
    use super::{ConfigKey, ConfigProblem, ConfigType, ConnectorError, Importance};

    pub fn error(error: new::ConnectorError) -> ConnectorError {
        match error {
            new::ConnectorError::Retriable(m) => ConnectorError::Retriable(m),
            new::ConnectorError::Fatal(m) => ConnectorError::Fatal(m),
            new::ConnectorError::InvalidConfig(m) => ConnectorError::InvalidConfig(m),
        }
    }

    pub fn result<T>(result: Result<T, new::ConnectorError>) -> Result<T, ConnectorError> {
        result.map_err(error)
    }

    pub fn config_key(key: new::ConfigKey) -> ConfigKey {
        ConfigKey {
            name: key.name,
            type_: match key.type_ {
                new::ConfigType::Boolean => ConfigType::Boolean,
                new::ConfigType::Int => ConfigType::Int,
                new::ConfigType::Long => ConfigType::Long,
                new::ConfigType::Double => ConfigType::Double,
                new::ConfigType::String => ConfigType::String,
                new::ConfigType::List => ConfigType::List,
                new::ConfigType::Password => ConfigType::Password,
            },
            default_value: key.default_value,
            importance: match key.importance {
                new::Importance::High => Importance::High,
                new::Importance::Medium => Importance::Medium,
                new::Importance::Low => Importance::Low,
            },
            documentation: key.documentation,
        }
    }

    pub fn config_problem(problem: new::ConfigProblem) -> ConfigProblem {
        ConfigProblem { key: problem.key, message: problem.message }
    }
}
