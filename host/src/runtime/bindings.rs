//! Rust bindings for every released version of the `sluice:connector` world, generated
//! from `wit/` at build time: [`v0_1`] (`wit/connector.wit`), [`v0_2`]
//! (`wit/0.2.0/connector.wit`), [`v0_3`] (`wit/0.3.0/connector.wit`) and [`v0_4`]
//! (`wit/0.4.0/connector.wit`). The host serves plugins of all four; the rest of the host
//! sees one set of types: 0.1.0's config and error types, and 0.3.0's packed
//! [`PollBatch`], into which a 0.1.0 plugin's list of records and a 0.2.0 plugin's batch
//! are converted ([`PollBatch::from_records`], [`PollBatch::from_v0_2`]) and a 0.4.0
//! plugin's byte-packed batch is read (`packed_lift`).
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

pub mod v0_3 {
    wasmtime::component::bindgen!({
        path: "../wit/0.3.0",
        world: "source-connector",
        imports: {
            "sluice:connector/offset-storage-reader.offset": async | trappable,
            "sluice:connector/offset-storage-reader.offsets": async | trappable,
        },
        exports: { default: async },
    });
}

pub mod v0_4 {
    wasmtime::component::bindgen!({
        path: "../wit/0.4.0",
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
pub use self::v0_3::sluice::connector::types::{BatchHeader, BatchRecord, PollBatch, Span};

/// The versions of the world this host serves, newest first, as a plugin's exports name them.
pub const WORLD_VERSIONS: [&str; 4] = ["0.4.0", "0.3.0", "0.2.0", "0.1.0"];

impl PollBatch {
    /// A batch of nothing, not done.
    pub fn empty() -> PollBatch {
        PollBatch {
            partitions: Vec::new(),
            topics: Vec::new(),
            data: Vec::new(),
            headers: Vec::new(),
            records: Vec::new(),
            done: false,
        }
    }

    /// A 0.1.0 plugin's records as a batch: each distinct partition and topic once, and
    /// every record's bytes in `data`.
    pub fn from_records(records: Vec<SourceRecord>) -> PollBatch {
        let mut partitions: Vec<String> = Vec::new();
        let mut topics: Vec<String> = Vec::new();
        let mut partition_index: HashMap<String, u32> = HashMap::new();
        let mut topic_index: HashMap<String, u32> = HashMap::new();
        let mut packer = Packer::default();
        for r in records {
            let partition = intern(r.partition, &mut partition_index, &mut partitions);
            let topic = r.topic.map(|t| intern(t, &mut topic_index, &mut topics));
            let headers = r.headers.iter().map(|h| (h.key.as_bytes(), h.value.as_slice()));
            packer.record(
                partition,
                r.offset.as_bytes(),
                topic,
                r.key.as_deref(),
                r.value.as_deref(),
                headers,
                r.timestamp,
            );
        }
        packer.finish(partitions, topics, false)
    }

    /// A 0.2.0 plugin's batch, packed: its partitions, topics and indexes as they are (an
    /// index past them stays one, for the checks to refuse).
    pub fn from_v0_2(batch: v0_2::sluice::connector::types::PollBatch) -> PollBatch {
        let mut packer = Packer::default();
        for r in &batch.records {
            let headers = r.headers.iter().map(|h| (h.key.as_bytes(), h.value.as_slice()));
            packer.record(
                r.partition,
                r.offset.as_bytes(),
                r.topic,
                r.key.as_deref(),
                r.value.as_deref(),
                headers,
                r.timestamp,
            );
        }
        packer.finish(batch.partitions, batch.topics, batch.done)
    }
}

/// Builds a packed batch: bytes appended to `data`, records naming them by span.
#[derive(Default)]
struct Packer {
    data: Vec<u8>,
    headers: Vec<BatchHeader>,
    records: Vec<BatchRecord>,
}

impl Packer {
    fn span(&mut self, bytes: &[u8]) -> Span {
        // Past 4 GiB a span cannot say where its bytes are; a batch that large is refused
        // for its size (every cap is far below it) before any span is read.
        let start = u32::try_from(self.data.len()).unwrap_or(u32::MAX);
        self.data.extend_from_slice(bytes);
        Span { start, len: u32::try_from(bytes.len()).unwrap_or(u32::MAX) }
    }

    #[allow(clippy::too_many_arguments)]
    fn record<'a>(
        &mut self,
        partition: u32,
        offset: &[u8],
        topic: Option<u32>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        timestamp: Option<i64>,
    ) {
        let offset = self.span(offset);
        let key = key.map(|key| self.span(key));
        let value = value.map(|value| self.span(value));
        let first = u32::try_from(self.headers.len()).unwrap_or(u32::MAX);
        for (key, value) in headers {
            let header = BatchHeader { key: self.span(key), value: self.span(value) };
            self.headers.push(header);
        }
        let count = u32::try_from(self.headers.len()).unwrap_or(u32::MAX) - first;
        let headers = Span { start: first, len: count };
        self.records.push(BatchRecord { partition, offset, topic, key, value, headers, timestamp });
    }

    fn finish(self, partitions: Vec<String>, topics: Vec<String>, done: bool) -> PollBatch {
        PollBatch { partitions, topics, data: self.data, headers: self.headers, records: self.records, done }
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

/// Converts a newer version's copies of the shared types (config keys and problems,
/// errors) into the host's (0.1.0's): one module per version, `from_v0_2`, `from_v0_3` and
/// `from_v0_4`. 0.3.0 and 0.4.0 batches are lifted by `packed_lift`, not converted here.
macro_rules! from_version {
    ($module:ident, $version:ident) => {
        pub mod $module {
            use super::$version::sluice::connector::types as new;
            use super::{ConfigKey, ConfigProblem, ConfigType, ConnectorError, Importance};

            pub fn same<T>(value: T) -> T {
                value
            }

            pub fn config_keys(keys: Vec<new::ConfigKey>) -> Vec<ConfigKey> {
                keys.into_iter().map(config_key).collect()
            }

            pub fn config_problems(problems: Vec<new::ConfigProblem>) -> Vec<ConfigProblem> {
                problems.into_iter().map(config_problem).collect()
            }

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
    };
}

from_version!(from_v0_2, v0_2);
from_version!(from_v0_3, v0_3);
from_version!(from_v0_4, v0_4);

/// A 0.2.0 `poll` result as the host's packed batch.
pub fn poll_from_v0_2(
    result: Result<v0_2::sluice::connector::types::PollBatch, v0_2::sluice::connector::types::ConnectorError>,
) -> Result<PollBatch, ConnectorError> {
    result.map(PollBatch::from_v0_2).map_err(from_v0_2::error)
}
