//! What a plugin may hand the host, checked before anything reaches a store: source
//! partitions and offsets (through [`crate::storage::json`]), topic names, and record and
//! batch sizes against the sandbox's caps.

use crate::config::SandboxSettings;
use crate::runtime::bindings::SourceRecord;
use crate::runtime::sandbox::human_bytes;
use crate::storage::Record;
use crate::storage::json::{canonical_object, check_object, shorten};

/// Kafka's rule: 1 to 249 characters of `[a-zA-Z0-9._-]`.
pub fn check_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("topic is empty".into());
    }
    if topic.len() > 249 {
        return Err(format!("topic is {} characters long, more than 249", topic.len()));
    }
    if let Some(c) = topic.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("topic {:?} has {c:?}; only [a-zA-Z0-9._-] are allowed", shorten(topic)));
    }
    Ok(())
}

/// What one entry of a `poll` batch turned out to be.
#[derive(Clone, Debug, PartialEq)]
pub enum Polled {
    Record(Record),
    /// An offset-only record: commit `offset` for `partition`, deliver nothing.
    OffsetOnly {
        partition: String,
        offset: String,
    },
}

impl Polled {
    pub fn partition_and_offset(&self) -> (&str, &str) {
        match self {
            Polled::Record(r) => (&r.partition, &r.offset),
            Polled::OffsetOnly { partition, offset } => (partition, offset),
        }
    }
}

/// Checks one record from `poll` and converts it. Partitions are canonicalized (through
/// `partitions`, which remembers the batch's distinct ones); offsets are only checked
/// here, and canonicalized when committed ([`latest_offsets`]).
pub fn check_record(
    record: SourceRecord,
    now_ms: i64,
    partitions: &mut Vec<(String, String)>,
) -> Result<Polled, String> {
    let partition = match partitions.iter().find(|(raw, _)| *raw == record.partition) {
        Some((_, canonical)) => canonical.clone(),
        None => {
            let canonical = canonical_object(&record.partition).map_err(|e| format!("partition is {e}"))?;
            partitions.push((record.partition, canonical.clone()));
            canonical
        }
    };
    check_object(&record.offset).map_err(|e| format!("offset is {e}"))?;
    let offset = record.offset;
    let Some(topic) = record.topic else {
        return Ok(Polled::OffsetOnly { partition, offset });
    };
    check_topic(&topic)?;
    Ok(Polled::Record(Record {
        topic,
        partition,
        offset,
        key: record.key,
        value: record.value,
        headers: record.headers.into_iter().map(|h| (h.key, h.value)).collect(),
        timestamp_ms: record.timestamp.unwrap_or(now_ms),
    }))
}

/// delivering the batch lets us commit.
pub fn latest_offsets(polled: &[Polled]) -> Vec<(String, String)> {
    let mut latest: Vec<(&str, &str)> = Vec::new();
    for entry in polled {
        let (partition, offset) = entry.partition_and_offset();
        match latest.iter_mut().find(|(p, _)| *p == partition) {
            Some(entry) => entry.1 = offset,
            None => latest.push((partition, offset)),
        }
    }
    // Every offset was checked to be an object of primitives, so this cannot fail.
    latest.into_iter().map(|(p, o)| (p.to_string(), canonical_object(o).unwrap_or_else(|_| o.to_string()))).collect()
}

/// `sandbox.record.max.bytes` and `sandbox.batch.max.bytes`, in plain words.
pub fn check_sizes(
    records: &[SourceRecord],
    sandbox: &SandboxSettings,
    connector: &str,
    task: u32,
) -> Result<(), String> {
    let mut batch = 0u64;
    for (index, record) in records.iter().enumerate() {
        let size = (record.key.as_ref().map_or(0, Vec::len)
            + record.value.as_ref().map_or(0, Vec::len)
            + record.headers.iter().map(|h| h.key.len() + h.value.len()).sum::<usize>()) as u64;
        if size > sandbox.record_max_bytes {
            return Err(format!(
                "connector '{connector}' task {task}: record {index} of {} exceeds sandbox.record.max.bytes ({})",
                human_bytes(size),
                human_bytes(sandbox.record_max_bytes)
            ));
        }
        batch += size + (record.partition.len() + record.offset.len()) as u64;
    }
    if batch > sandbox.batch_max_bytes {
        return Err(format!(
            "connector '{connector}' task {task}: poll batch of {} records, {}, exceeds sandbox.batch.max.bytes ({})",
            records.len(),
            human_bytes(batch),
            human_bytes(sandbox.batch_max_bytes)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_follow_kafka_rules() {
        assert!(check_topic("a.b_c-1").is_ok());
        assert!(check_topic("").is_err());
        assert!(check_topic(&"x".repeat(250)).unwrap_err().contains("250"));
        assert!(check_topic(&"x".repeat(249)).is_ok());
        assert!(check_topic("a b").unwrap_err().contains("' '"));
    }

    #[test]
    fn latest_offsets_keep_the_last_offset_of_each_partition() {
        let record = |p: &str, o: &str| Record {
            topic: "t".into(),
            partition: p.into(),
            offset: o.into(),
            key: None,
            value: None,
            headers: vec![],
            timestamp_ms: 0,
        };
        let batch = [
            Polled::Record(record("a", "1")),
            Polled::Record(record("b", "1")),
            Polled::OffsetOnly { partition: "a".into(), offset: "2".into() },
        ];
        assert_eq!(latest_offsets(&batch), [("a".to_string(), "2".to_string()), ("b".to_string(), "1".to_string())]);
    }
}
