//! Fuzzes the record path: arbitrary poll batches (partitions, offsets, topics, keys,
//! values, headers and sizes, drawn as text that often is and often is not what the rules
//! allow) through the host's checks and into both destinations; every accepted record
//! must read back equal (`tests/support/record_path.rs`, which the test suite also runs
//! with a seeded generator). Any refusal is fine; a panic or a mismatch is a bug.
//!
//! ```sh
//! cd fuzz && SLUICE_SKIP_PLUGIN_BUILD=1 cargo +nightly fuzz run --sanitizer none record_path -- -max_total_time=600
//! ```
#![no_main]

use std::sync::LazyLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use sluice::config::{ErrorHandling, StorageConfig};
use sluice::runtime::bindings::SourceRecord;
use sluice::runtime::bindings::sluice::connector::types::Header;
use sluice::storage::{DataDir, Namespace, Stores};

#[path = "../../tests/support/record_path.rs"]
mod record_path;

/// JSON-ish text: an object built from parts (usually valid), or raw text.
#[derive(Arbitrary, Debug)]
enum Json {
    Object(Vec<(String, Primitive)>),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum Primitive {
    Number(i64),
    Float(f64),
    Text(String),
    Bool(bool),
    Null,
    Nested(Vec<u8>),
}

impl Json {
    fn text(&self) -> String {
        match self {
            Json::Raw(text) => text.clone(),
            Json::Object(fields) => {
                let fields: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| {
                        let value = match v {
                            Primitive::Number(n) => n.to_string(),
                            Primitive::Float(f) => serde_json::to_string(f).unwrap_or_else(|_| "0".into()),
                            Primitive::Text(t) => serde_json::to_string(t).unwrap(),
                            Primitive::Bool(b) => b.to_string(),
                            Primitive::Null => "null".into(),
                            Primitive::Nested(items) => format!("{items:?}"),
                        };
                        format!("{}:{value}", serde_json::to_string(k).unwrap())
                    })
                    .collect();
                format!("{{{}}}", fields.join(","))
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct FuzzRecord {
    partition: Json,
    offset: Json,
    topic: Option<String>,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    /// Large numbers of headers come from `extra_empty_headers`.
    headers: Vec<(String, Vec<u8>)>,
    extra_empty_headers: u16,
    timestamp: Option<i64>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    records: Vec<FuzzRecord>,
    tolerate_all: bool,
    dead_letter: bool,
    connector: u8,
}

static STORES: LazyLock<(tempfile::TempDir, Stores)> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("tempdir");
    let stores = Stores::open(&StorageConfig::default(), &DataDir::new(dir.path())).expect("stores");
    (dir, stores)
});

fuzz_target!(|input: Input| {
    let batch: Vec<SourceRecord> = input
        .records
        .iter()
        .map(|r| SourceRecord {
            partition: r.partition.text(),
            offset: r.offset.text(),
            topic: r.topic.clone(),
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r
                .headers
                .iter()
                .map(|(key, value)| Header { key: key.clone(), value: value.clone() })
                .chain((0..r.extra_empty_headers).map(|_| Header { key: String::new(), value: Vec::new() }))
                .collect(),
            timestamp: r.timestamp,
        })
        .collect();
    let errors = ErrorHandling {
        tolerate_all: input.tolerate_all,
        dead_letter_topic: input.dead_letter.then(|| "dlq".to_string()),
        log: false,
    };
    let ns = Namespace::new("default", format!("c{}", input.connector % 8));
    record_path::check(&STORES.1, &ns, batch, &errors);
});
