//! What a plugin may hand the host, checked before anything reaches a store: source
//! partitions and offsets (through [`crate::storage::json`]), topic names, and record and
//! batch sizes against the sandbox's caps.

use crate::config::{ErrorHandling, SandboxSettings};
use crate::runtime::bindings::{BatchRecord, PollBatch};
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
    /// A record the checks refused under `errors.tolerance=all`: its offset, when it has a
    /// valid one, is committed in order (so a restart does not meet it again), and a copy
    /// goes to the dead-letter topic when one is set.
    Refused {
        commit: Option<(String, String)>,
        dead_letter: Option<Record>,
    },
}

impl Polled {
    /// The offset this entry commits, if any.
    pub fn commits(&self) -> Option<(&str, &str)> {
        match self {
            Polled::Record(r) => Some((&r.partition, &r.offset)),
            Polled::OffsetOnly { partition, offset } => Some((partition, offset)),
            Polled::Refused { commit, .. } => commit.as_ref().map(|(p, o)| (p.as_str(), o.as_str())),
        }
    }

    /// What this entry delivers, if anything.
    pub fn into_delivered(self) -> Option<Record> {
        match self {
            Polled::Record(record) => Some(record),
            Polled::OffsetOnly { .. } => None,
            Polled::Refused { dead_letter, .. } => dead_letter,
        }
    }
}

/// Who returned a batch, for messages and dead-letter headers.
pub struct Source<'a> {
    pub connector: &'a str,
    pub task: u32,
}

/// What a record costs beyond its key, value and headers, as the caps count it (about what
/// the host holds per record).
pub const RECORD_OVERHEAD: u64 = 64;
/// What one header costs beyond its key and value.
pub const HEADER_OVERHEAD: u64 = 32;
/// The most headers one record may carry.
pub const MAX_HEADERS: usize = 1024;

/// Size of a record as `sandbox.record.max.bytes` counts it: key, value, each header's
/// key and value plus [`HEADER_OVERHEAD`], plus [`RECORD_OVERHEAD`].
fn record_size(record: &BatchRecord) -> u64 {
    (record.key.as_ref().map_or(0, Vec::len) + record.value.as_ref().map_or(0, Vec::len)) as u64
        + record.headers.iter().map(|h| (h.key.len() + h.value.len()) as u64 + HEADER_OVERHEAD).sum::<u64>()
        + RECORD_OVERHEAD
}

/// A batch's partitions and topics, each checked once however many records use it.
struct Shared {
    /// Each partition as given, and canonicalized or why it cannot be.
    partitions: Vec<(String, Result<String, String>)>,
    /// Each topic, and why it cannot be used if it cannot.
    topics: Vec<(String, Result<(), String>)>,
}

impl Shared {
    fn partition_text(&self, index: u32) -> Option<&str> {
        self.partitions.get(index as usize).map(|(raw, _)| raw.as_str())
    }

    fn topic_text(&self, index: u32) -> Option<&str> {
        self.topics.get(index as usize).map(|(raw, _)| raw.as_str())
    }
}

/// Checks a whole `poll` batch: the batch cap (always fatal; partitions, topics and
/// offsets count too), then each record (its headers, size, partition, offset and topic).
/// A bad record fails the task with the record named, or, under `errors.tolerance=all`,
/// becomes [`Polled::Refused`]. Returns the entries in order and how many were refused.
pub fn check_batch(
    batch: PollBatch,
    sandbox: &SandboxSettings,
    errors: &ErrorHandling,
    now_ms: i64,
    source: &Source,
) -> Result<(Vec<Polled>, u64), String> {
    let Source { connector, task } = *source;
    let PollBatch { partitions, topics, records, done: _ } = batch;
    let size: u64 = records.iter().map(|r| record_size(r) + r.offset.len() as u64).sum::<u64>()
        + partitions.iter().chain(&topics).map(|text| text.len() as u64 + RECORD_OVERHEAD).sum::<u64>();
    if size > sandbox.batch_max_bytes {
        return Err(format!(
            "connector '{connector}' task {task}: poll batch of {} records, {}, exceeds sandbox.batch.max.bytes ({})",
            records.len(),
            human_bytes(size),
            human_bytes(sandbox.batch_max_bytes)
        ));
    }
    let shared = Shared {
        partitions: partitions
            .into_iter()
            .map(|raw| {
                let canonical = canonical_object(&raw).map_err(|e| format!("partition is {e}"));
                (raw, canonical)
            })
            .collect(),
        topics: topics
            .into_iter()
            .map(|raw| {
                let checked = check_topic(&raw);
                (raw, checked)
            })
            .collect(),
    };
    let mut polled = Vec::with_capacity(records.len());
    let mut refused = 0;
    for (index, record) in records.into_iter().enumerate() {
        let size = record_size(&record);
        let checked = if record.headers.len() > MAX_HEADERS {
            let headers = record.headers.len();
            Err((
                Box::new(record),
                format!("record {index} has {headers} headers, more than the {MAX_HEADERS} a record may carry"),
            ))
        } else if size > sandbox.record_max_bytes {
            Err((
                Box::new(record),
                format!(
                    "record {index} of {} exceeds sandbox.record.max.bytes ({})",
                    human_bytes(size),
                    human_bytes(sandbox.record_max_bytes)
                ),
            ))
        } else {
            check_record(record, now_ms, &shared)
                .map_err(|(record, reason)| (record, format!("record {index} of the poll batch refused: {reason}")))
        };
        match checked {
            Ok(entry) => polled.push(entry),
            Err((_, reason)) if !errors.tolerate_all => {
                return Err(format!("connector '{connector}' task {task}: {reason}"));
            }
            Err((record, reason)) => {
                if errors.log {
                    tracing::warn!(connector, task, "skipped a record (errors.tolerance=all): {reason}");
                }
                refused += 1;
                polled.push(refuse(*record, &shared, &reason, errors, sandbox, now_ms, source));
            }
        }
    }
    Ok((polled, refused))
}

/// A refused record: its offset if it has a valid partition and offset, and its copy for
/// the dead-letter topic, cut to fit the record cap.
fn refuse(
    record: BatchRecord,
    shared: &Shared,
    reason: &str,
    errors: &ErrorHandling,
    sandbox: &SandboxSettings,
    now_ms: i64,
    source: &Source,
) -> Polled {
    let partition_text = shared.partition_text(record.partition).unwrap_or_default();
    let commit = shared
        .partitions
        .get(record.partition as usize)
        .and_then(|(_, canonical)| canonical.as_ref().ok())
        .filter(|_| check_object(&record.offset).is_ok())
        .map(|partition| (partition.clone(), record.offset.clone()));
    let dead_letter = errors.dead_letter_topic.as_ref().map(|topic| {
        const MESSAGE: &str = "__connect.errors.exception.message";
        const TRUNCATED: &str = "__connect.errors.truncated";
        let mut headers: Vec<(String, Vec<u8>)> = vec![
            ("__connect.errors.connector.name".into(), source.connector.as_bytes().to_vec()),
            ("__connect.errors.task.id".into(), source.task.to_string().into_bytes()),
            ("__connect.errors.stage".into(), b"TASK_POLL".to_vec()),
            ("__connect.errors.source.partition".into(), shorten(partition_text).into_bytes()),
            ("__connect.errors.source.offset".into(), shorten(&record.offset).into_bytes()),
        ];
        if let Some(original) = record.topic.and_then(|t| shared.topic_text(t)) {
            headers.push(("__connect.errors.topic".into(), shorten(original).into_bytes()));
        }
        let size = |headers: &[(String, Vec<u8>)]| headers.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum::<u64>();
        // Even the reason gives way to the cap, however small the cap.
        let fixed = size(&headers) + (MESSAGE.len() + TRUNCATED.len() + 4) as u64;
        let mut message = reason.as_bytes().to_vec();
        message.truncate(sandbox.record_max_bytes.saturating_sub(fixed) as usize);
        headers.push((MESSAGE.into(), message));
        let mut room = sandbox.record_max_bytes.saturating_sub(size(&headers) + (TRUNCATED.len() + 4) as u64);
        let mut truncated = false;
        for header in record.headers {
            let size = (header.key.len() + header.value.len()) as u64;
            if size <= room {
                room -= size;
                headers.push((header.key, header.value));
            } else {
                truncated = true;
            }
        }
        let mut cut = |bytes: Option<Vec<u8>>| {
            bytes.map(|mut bytes| {
                if bytes.len() as u64 > room {
                    bytes.truncate(room as usize);
                    truncated = true;
                }
                room -= bytes.len() as u64;
                bytes
            })
        };
        let key = cut(record.key);
        let value = cut(record.value);
        if truncated {
            headers.push((TRUNCATED.into(), b"true".to_vec()));
        }
        let (partition, offset) = commit.clone().unwrap_or_else(|| ("{}".into(), "{}".into()));
        Record {
            topic: topic.clone(),
            partition,
            offset,
            key,
            value,
            headers,
            timestamp_ms: record.timestamp.unwrap_or(now_ms),
        }
    });
    Polled::Refused { commit, dead_letter }
}

/// Checks one record from `poll` and converts it; a bad one comes back with the reason.
/// Its partition and topic were checked once for the batch (`shared`); offsets are only
/// checked here, and canonicalized when committed ([`latest_offsets`]).
fn check_record(record: BatchRecord, now_ms: i64, shared: &Shared) -> Result<Polled, (Box<BatchRecord>, String)> {
    let partition = match shared.partitions.get(record.partition as usize) {
        Some((_, Ok(canonical))) => canonical.clone(),
        Some((_, Err(e))) => return Err((Box::new(record), e.clone())),
        None => {
            let reason = format!(
                "partition {} is not one of the batch's {} partitions",
                record.partition,
                shared.partitions.len()
            );
            return Err((Box::new(record), reason));
        }
    };
    if let Err(e) = check_object(&record.offset) {
        return Err((Box::new(record), format!("offset is {e}")));
    }
    let Some(topic_index) = record.topic else {
        return Ok(Polled::OffsetOnly { partition, offset: record.offset });
    };
    let topic = match shared.topics.get(topic_index as usize) {
        Some((topic, Ok(()))) => topic.clone(),
        Some((_, Err(reason))) => return Err((Box::new(record), reason.clone())),
        None => {
            let reason = format!("topic {topic_index} is not one of the batch's {} topics", shared.topics.len());
            return Err((Box::new(record), reason));
        }
    };
    Ok(Polled::Record(Record {
        topic,
        partition,
        offset: record.offset,
        key: record.key,
        value: record.value,
        headers: record.headers.into_iter().map(|h| (h.key, h.value)).collect(),
        timestamp_ms: record.timestamp.unwrap_or(now_ms),
    }))
}

/// The last offset of each partition in a batch, in order of first appearance: what
/// delivering the batch lets us commit.
pub fn latest_offsets(polled: &[Polled]) -> Vec<(String, String)> {
    let mut latest: Vec<(&str, &str)> = Vec::new();
    for (partition, offset) in polled.iter().filter_map(Polled::commits) {
        match latest.iter_mut().find(|(p, _)| *p == partition) {
            Some(entry) => entry.1 = offset,
            None => latest.push((partition, offset)),
        }
    }
    // Every offset was checked to be an object of primitives, so this cannot fail.
    latest.into_iter().map(|(p, o)| (p.to_string(), canonical_object(o).unwrap_or_else(|_| o.to_string()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bindings::SourceRecord;

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

    fn source_record(partition: &str, offset: &str, value_bytes: usize) -> SourceRecord {
        SourceRecord {
            partition: partition.into(),
            offset: offset.into(),
            topic: Some("t".into()),
            key: Some(b"k".to_vec()),
            value: Some(vec![b'v'; value_bytes]),
            headers: vec![],
            timestamp: Some(1),
        }
    }

    #[test]
    fn a_bad_record_fails_the_batch_unless_errors_are_tolerated() {
        let sandbox = SandboxSettings { record_max_bytes: 400, ..SandboxSettings::default() };
        let source = Source { connector: "c", task: 2 };
        let batch = || {
            PollBatch::from_records(vec![
                source_record(r#"{"p":1}"#, r#"{"n":1}"#, 10),
                source_record(r#"{"p":1}"#, r#"{"n":2}"#, 1000),
                source_record("not json", r#"{"n":3}"#, 10),
                source_record(r#"{"p":1}"#, r#"{"n":4}"#, 10),
            ])
        };
        let error = check_batch(batch(), &sandbox, &ErrorHandling::default(), 0, &source).unwrap_err();
        assert!(error.starts_with("connector 'c' task 2: record 1 of 1065 bytes exceeds"), "{error}");

        let errors = ErrorHandling { tolerate_all: true, dead_letter_topic: Some("dlq".into()), log: false };
        let (polled, refused) = check_batch(batch(), &sandbox, &errors, 0, &source).unwrap();
        assert_eq!(refused, 2);
        // The oversized record's offset is committed in order; the bad partition's cannot be.
        let commits: Vec<_> = polled.iter().map(|p| p.commits().map(|(_, o)| o.to_string())).collect();
        assert_eq!(commits, [Some(r#"{"n":1}"#.into()), Some(r#"{"n":2}"#.into()), None, Some(r#"{"n":4}"#.into())]);
        assert_eq!(latest_offsets(&polled), [(r#"{"p":1}"#.to_string(), r#"{"n":4}"#.to_string())]);
        let Polled::Refused { dead_letter: Some(copy), .. } = &polled[1] else { panic!("{:?}", polled[1]) };
        assert_eq!(copy.topic, "dlq");
        let size = copy.key.as_ref().map_or(0, Vec::len)
            + copy.value.as_ref().map_or(0, Vec::len)
            + copy.headers.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        assert!(size as u64 <= sandbox.record_max_bytes, "the dead-letter copy fits the cap: {size}");
        let header = |name: &str| {
            copy.headers.iter().find(|(k, _)| k == name).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert!(header("__connect.errors.exception.message").unwrap().contains("exceeds sandbox.record.max.bytes"));
        assert_eq!(header("__connect.errors.truncated").as_deref(), Some("true"));
        assert_eq!(header("__connect.errors.task.id").as_deref(), Some("2"));
        assert_eq!(header("__connect.errors.source.partition").as_deref(), Some(r#"{"p":1}"#));
        let delivered: Vec<Record> = polled.into_iter().filter_map(Polled::into_delivered).collect();
        assert_eq!(delivered.iter().map(|r| r.topic.as_str()).collect::<Vec<_>>(), ["t", "dlq", "dlq", "t"]);
    }
}
