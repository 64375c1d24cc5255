//! The record path under random poll batches: a short seeded run, in every test run, of
//! what `fuzz/fuzz_targets/record_path.rs` runs for as long as it is given. Partitions,
//! offsets, topics, keys, values, headers and sizes are drawn around the rules and the
//! caps; every accepted record must read back equal from both destinations.
//! `RECORD_PATH_SEED=<n>` replays a run.

use sluice::config::{ErrorHandling, WorkerConfig};
use sluice::runtime::bindings::SourceRecord;
use sluice::runtime::bindings::{Header, PollBatch, Span};
use sluice::storage::{DataDir, Namespace, Stores};

use crate::record_path::{check, check_batch_of};

fn pick<'a>(rng: &mut fastrand::Rng, options: &[&'a str]) -> &'a str {
    options[rng.usize(..options.len())]
}

fn bytes(rng: &mut fastrand::Rng) -> Option<Vec<u8>> {
    match rng.u8(..10) {
        0 => None,
        1 => Some((0..rng.usize(..300)).map(|_| rng.u8(..)).collect()), // often not UTF-8
        2 => Some(vec![b'x'; rng.usize(1900..2200)]),                   // around the record cap
        _ => Some(format!("value {}", rng.u32(..)).into_bytes()),
    }
}

fn record(rng: &mut fastrand::Rng) -> SourceRecord {
    let partitions = [
        r#"{"p":1}"#,
        r#"{"b":2,"a":"x"}"#,
        r#"{"a":"x","b":2}"#,
        r#"{"f":"é","n":null,"t":true}"#,
        "[1]",
        "{",
        r#"{"p":{"q":1}}"#,
        "",
        "1",
    ];
    let offsets = [r#"{"n":1}"#, r#"{"n":2.5,"s":"x"}"#, r#"{"n":[1]}"#, "null", "{", r#"{"z":1,"a":2}"#];
    let topics = ["t", "other.topic_1", "a b", "", "é", &"t".repeat(249), &"t".repeat(250)];
    let headers = match rng.u8(..20) {
        0 => (0..1100).map(|_| Header { key: String::new(), value: Vec::new() }).collect(),
        _ => (0..rng.usize(..4))
            .map(|i| Header { key: format!("h{i}"), value: bytes(rng).unwrap_or_default() })
            .collect(),
    };
    SourceRecord {
        partition: pick(rng, &partitions).to_string(),
        offset: pick(rng, &offsets).to_string(),
        topic: (rng.u8(..8) != 0).then(|| pick(rng, &topics).to_string()),
        key: bytes(rng),
        value: bytes(rng),
        headers,
        timestamp: rng.bool().then(|| rng.i64(..)),
    }
}

#[test]
fn random_poll_batches_read_back_equal_from_both_destinations() {
    let seed = std::env::var("RECORD_PATH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| fastrand::u64(..));
    println!("record path seed: {seed} (set RECORD_PATH_SEED to replay)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let stores = Stores::open(&WorkerConfig::default(), &DataDir::new(dir.path())).unwrap();
    for round in 0..1500 {
        let ns = Namespace::new("default", format!("c{}", round % 7));
        let batch: Vec<SourceRecord> = (0..rng.usize(..12)).map(|_| record(&mut rng)).collect();
        let errors = ErrorHandling {
            tolerate_all: rng.bool(),
            dead_letter_topic: rng.bool().then(|| "dlq".to_string()),
            log: false,
            dead_letter_max_bytes: None,
        };
        match rng.u8(..4) {
            0 => {
                // A batch whose indexes may point past its partitions and topics.
                let mut batch = PollBatch::from_records(batch);
                for record in &mut batch.records {
                    if rng.u8(..4) == 0 {
                        record.partition = rng.u32(..batch.partitions.len() as u32 + 2);
                    }
                    if rng.u8(..4) == 0 {
                        record.topic = Some(rng.u32(..batch.topics.len() as u32 + 2));
                    }
                }
                check_batch_of(&stores, &ns, batch, &errors);
            }
            1 => {
                // A 0.3.0 batch whose spans may name any bytes: another record's, a part of
                // the data, or past its end (and header runs past the headers).
                let mut batch = PollBatch::from_records(batch);
                let (data, headers) = (batch.data.len() as u32, batch.headers.len() as u32);
                let span = |rng: &mut fastrand::Rng, limit: u32| {
                    let start = rng.u32(..limit + 3);
                    Span { start, len: rng.u32(..(limit + 3).saturating_sub(start).max(1)) }
                };
                for record in &mut batch.records {
                    match rng.u8(..6) {
                        0 => record.offset = span(&mut rng, data),
                        1 => record.value = Some(span(&mut rng, data)),
                        2 => record.key = Some(span(&mut rng, data)),
                        3 => record.headers = span(&mut rng, headers),
                        _ => {}
                    }
                }
                for header in &mut batch.headers {
                    if rng.u8(..4) == 0 {
                        header.key = span(&mut rng, data);
                    }
                }
                check_batch_of(&stores, &ns, batch, &errors);
            }
            _ => check(&stores, &ns, batch, &errors),
        }
    }
}
