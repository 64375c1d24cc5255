//! The record path, end to end but without a plugin, for the seeded test
//! (`tests/all/record_path.rs`) and the fuzz target (`fuzz/fuzz_targets/record_path.rs`):
//! a poll batch goes through the host's checks (`check_batch`) and, when accepted, into
//! both destinations; the local log must hand back exactly what was accepted, the stdout
//! lines must be the same records as JSON, and the committed offsets the batch's last
//! ones. Any refusal is fine; a panic, a mismatch or a loss is a bug.

use sluice::config::{ErrorHandling, SandboxSettings};
use sluice::connect::records::{Source, check_batch};
use sluice::destinations::json::{record_json, write_record_json};
use sluice::runtime::bindings::{PollBatch, SourceRecord};
use sluice::storage::json::canonical_object;
use sluice::storage::{Namespace, Record, Stores};

/// Small caps, so that sizes at and around them are reached often.
pub fn sandbox() -> SandboxSettings {
    SandboxSettings { record_max_bytes: 2048, batch_max_bytes: 64 << 10, ..SandboxSettings::default() }
}

/// Runs one batch of 0.1.0 records through the path and checks every accepted record
/// reads back equal.
pub fn check(stores: &Stores, ns: &Namespace, batch: Vec<SourceRecord>, errors: &ErrorHandling) {
    check_batch_of(stores, ns, PollBatch::from_records(batch), errors);
}

/// Runs one 0.2.0 batch (whose partition and topic indexes may point anywhere) through
/// the path and checks every accepted record reads back equal.
pub fn check_batch_of(stores: &Stores, ns: &Namespace, batch: PollBatch, errors: &ErrorHandling) {
    let source = Source { connector: &ns.connector, task: 0 };
    let Ok(checked) = check_batch(batch, &sandbox(), errors, &Default::default(), 7, &source) else { return };
    for (partition, offset) in &checked.offsets {
        assert_eq!(canonical_object(partition).as_deref(), Ok(partition.as_str()), "a partition not canonical");
        assert_eq!(canonical_object(offset).as_deref(), Ok(offset.as_str()), "an offset not canonical");
    }
    for record in checked.records.iter() {
        assert_eq!(canonical_object(record.partition).as_deref(), Ok(record.partition), "a partition not canonical");
        assert!(canonical_object(record.offset).is_ok(), "an offset that is not an object of primitives");
        assert!(sluice::connect::records::check_topic(record.topic).is_ok(), "a bad topic passed");
    }
    let offsets = checked.offsets;
    let delivered: Vec<Record> = checked.records.to_records();

    // Local: what is appended reads back equal, in order, after what each topic held.
    let log = stores.local();
    let before: std::collections::BTreeMap<String, u64> = log.topics(&ns.tenant).unwrap().into_iter().collect();
    log.append_with_offsets(ns, &checked.records, &offsets, &Default::default()).unwrap();
    let mut read_back: Vec<Record> = Vec::new();
    let mut topics: Vec<&str> = delivered.iter().map(|r| &*r.topic).collect();
    topics.sort();
    topics.dedup();
    for topic in topics {
        let from = before.get(topic).copied().unwrap_or(0);
        for stored in log.read(&ns.tenant, topic, from, usize::MAX >> 1).unwrap() {
            assert_eq!(stored.connector, ns.connector);
            read_back.push(stored.record);
        }
    }
    let mut expected = delivered.clone();
    expected.sort_by(|a, b| a.topic.cmp(&b.topic));
    assert_eq!(read_back, expected, "the local log did not hand back what was accepted");
    let committed = stores.offsets().offsets(ns, &offsets.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>()).unwrap();
    for ((_, offset), found) in offsets.iter().zip(committed) {
        assert_eq!(found.as_deref(), Some(offset.as_str()), "a committed offset differs");
    }

    // stdout: one JSON line per record, the same record as `topics read --json` shows.
    let mut out = Vec::new();
    for record in checked.records.iter() {
        write_record_json(&mut out, &record).unwrap();
    }
    let lines: Vec<serde_json::Value> =
        out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    assert_eq!(lines.len(), delivered.len());
    for (line, record) in lines.iter().zip(&delivered) {
        assert_eq!(line, &record_json(record), "a stdout line differs from its record");
    }
}
