//! What a plugin may hand the host, checked before anything reaches a store: source
//! partitions and offsets (through [`crate::storage::json`]), topic names, and record and
//! batch sizes against the sandbox's caps.

use std::sync::Arc;

use bytes::Bytes;

use crate::config::{ErrorHandling, SandboxSettings};
use crate::runtime::bindings::{BatchHeader, BatchRecord, PollBatch, Span};
use crate::runtime::sandbox::human_bytes;
use crate::storage::json::{canonical_object, check_object, shorten};
use crate::storage::{Record, Text};

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
        partition: Arc<str>,
        offset: Text,
    },
    /// A record the checks refused under `errors.tolerance=all`: its offset, when it has a
    /// valid one, is committed in order (so a restart does not meet it again), and a copy
    /// goes to the dead-letter topic when one is set.
    Refused {
        commit: Option<(Arc<str>, Text)>,
        dead_letter: Option<Record>,
    },
}

impl Polled {
    /// The offset this entry commits, if any.
    pub fn commits(&self) -> Option<(&str, &str)> {
        match self {
            Polled::Record(r) => Some((&r.partition, &r.offset)),
            Polled::OffsetOnly { partition, offset } => Some((partition, offset)),
            Polled::Refused { commit, .. } => commit.as_ref().map(|(p, o)| (&**p, o.as_str())),
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

/// A batch's shared parts: its partitions and topics, each checked once however many
/// records use it, and the bytes and headers its records name by span.
struct Shared {
    /// Each partition as given, and canonicalized or why it cannot be.
    partitions: Vec<(String, Result<Arc<str>, String>)>,
    /// Each topic as given, and why it cannot be used if it cannot.
    topics: Vec<(String, Result<Arc<str>, String>)>,
    data: Bytes,
    headers: Vec<BatchHeader>,
}

impl Shared {
    fn partition_text(&self, index: u32) -> Option<&str> {
        self.partitions.get(index as usize).map(|(raw, _)| raw.as_str())
    }

    fn topic_text(&self, index: u32) -> Option<&str> {
        self.topics.get(index as usize).map(|(raw, _)| raw.as_str())
    }

    fn range(span: Span) -> std::ops::Range<usize> {
        let start = span.start as usize;
        start..start.saturating_add(span.len as usize)
    }

    /// The bytes `span` names, or why it names none: `what` is the record's part.
    fn bytes(&self, span: Span, what: &str) -> Result<Bytes, String> {
        let range = Self::range(span);
        if range.end > self.data.len() {
            return Err(format!(
                "{what} span {}..{} is past the end of the batch's {} bytes of data",
                range.start,
                range.end,
                self.data.len()
            ));
        }
        Ok(self.data.slice(range))
    }

    /// The text `span` names, or why it names none.
    fn text(&self, span: Span, what: &str) -> Result<Text, String> {
        Text::from_utf8(self.bytes(span, what)?).map_err(|e| format!("{what} is not UTF-8 ({e})"))
    }

    /// Best effort, for messages and dead-letter copies: the bytes if the span is valid.
    fn bytes_or_none(&self, span: Span) -> Option<Bytes> {
        self.bytes(span, "").ok()
    }

    fn lossy(&self, span: Span) -> String {
        self.bytes_or_none(span).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
    }

    /// The headers of a record, or why its run names none.
    fn header_run(&self, run: Span) -> Result<&[BatchHeader], String> {
        let range = Self::range(run);
        self.headers.get(range.clone()).ok_or_else(|| {
            format!(
                "headers {}..{} are past the end of the batch's {} headers",
                range.start,
                range.end,
                self.headers.len()
            )
        })
    }

    /// What a span counts toward the caps: its length when it is inside `data` (a span
    /// outside refuses its record anyway).
    fn size(&self, span: Span) -> u64 {
        if Self::range(span).end <= self.data.len() { u64::from(span.len) } else { 0 }
    }

    /// Size of a record as `sandbox.record.max.bytes` counts it: key, value, each header's
    /// key and value plus [`HEADER_OVERHEAD`], plus [`RECORD_OVERHEAD`]. Bytes named twice
    /// count twice: they are delivered twice.
    fn record_size(&self, record: &BatchRecord) -> u64 {
        let headers = self.headers.get(Self::range(record.headers)).unwrap_or_default();
        record.key.map_or(0, |s| self.size(s))
            + record.value.map_or(0, |s| self.size(s))
            + headers.iter().map(|h| self.size(h.key) + self.size(h.value) + HEADER_OVERHEAD).sum::<u64>()
            + RECORD_OVERHEAD
    }
}

/// Checks a whole `poll` batch: the batch cap (always fatal; partitions, topics and
/// offsets count too), then each record (its headers, size, partition, offset, topic and
/// the spans of its bytes). A bad record fails the task with the record named, or, under
/// `errors.tolerance=all`, becomes [`Polled::Refused`]. Returns the entries in order and
/// how many were refused. The records share the batch's bytes: nothing is copied.
pub fn check_batch(
    batch: PollBatch,
    sandbox: &SandboxSettings,
    errors: &ErrorHandling,
    now_ms: i64,
    source: &Source,
) -> Result<(Vec<Polled>, u64), String> {
    let Source { connector, task } = *source;
    let PollBatch { partitions, topics, data, headers, records, done: _ } = batch;
    let mut shared = Shared { partitions: Vec::new(), topics: Vec::new(), data: Bytes::from(data), headers };
    let size: u64 = records.iter().map(|r| shared.record_size(r) + shared.size(r.offset)).sum::<u64>()
        + partitions.iter().chain(&topics).map(|text| text.len() as u64 + RECORD_OVERHEAD).sum::<u64>();
    if size > sandbox.batch_max_bytes {
        return Err(format!(
            "connector '{connector}' task {task}: poll batch of {} records, {}, exceeds sandbox.batch.max.bytes ({})",
            records.len(),
            human_bytes(size),
            human_bytes(sandbox.batch_max_bytes)
        ));
    }
    shared.partitions = partitions
        .into_iter()
        .map(|raw| {
            let canonical = canonical_object(&raw).map(Arc::from).map_err(|e| format!("partition is {e}"));
            (raw, canonical)
        })
        .collect();
    shared.topics = topics
        .into_iter()
        .map(|raw| {
            let checked = check_topic(&raw).map(|()| Arc::from(raw.as_str()));
            (raw, checked)
        })
        .collect();
    let mut polled = Vec::with_capacity(records.len());
    let mut refused = 0;
    for (index, record) in records.iter().enumerate() {
        let size = shared.record_size(record);
        let checked = if record.headers.len as usize > MAX_HEADERS {
            let headers = record.headers.len;
            Err(format!("record {index} has {headers} headers, more than the {MAX_HEADERS} a record may carry"))
        } else if size > sandbox.record_max_bytes {
            Err(format!(
                "record {index} of {} exceeds sandbox.record.max.bytes ({})",
                human_bytes(size),
                human_bytes(sandbox.record_max_bytes)
            ))
        } else {
            check_record(record, now_ms, &shared)
                .map_err(|reason| format!("record {index} of the poll batch refused: {reason}"))
        };
        match checked {
            Ok(entry) => polled.push(entry),
            Err(reason) if !errors.tolerate_all => {
                return Err(format!("connector '{connector}' task {task}: {reason}"));
            }
            Err(reason) => {
                if errors.log {
                    tracing::warn!(connector, task, "skipped a record (errors.tolerance=all): {reason}");
                }
                refused += 1;
                polled.push(refuse(record, &shared, &reason, errors, sandbox, now_ms, source));
            }
        }
    }
    Ok((polled, refused))
}

/// A refused record: its offset if it has a valid partition and offset, and its copy for
/// the dead-letter topic, cut to fit the record cap.
fn refuse(
    record: &BatchRecord,
    shared: &Shared,
    reason: &str,
    errors: &ErrorHandling,
    sandbox: &SandboxSettings,
    now_ms: i64,
    source: &Source,
) -> Polled {
    let partition_text = shared.partition_text(record.partition).unwrap_or_default();
    let offset = shared.text(record.offset, "offset").ok();
    let commit = shared
        .partitions
        .get(record.partition as usize)
        .and_then(|(_, canonical)| canonical.as_ref().ok())
        .zip(offset.filter(|offset| check_object(offset).is_ok()))
        .map(|(partition, offset)| (partition.clone(), offset));
    let dead_letter = errors.dead_letter_topic.as_ref().map(|topic| {
        const MESSAGE: &str = "__connect.errors.exception.message";
        const TRUNCATED: &str = "__connect.errors.truncated";
        let mut headers: Vec<(String, Vec<u8>)> = vec![
            ("__connect.errors.connector.name".into(), source.connector.as_bytes().to_vec()),
            ("__connect.errors.task.id".into(), source.task.to_string().into_bytes()),
            ("__connect.errors.stage".into(), b"TASK_POLL".to_vec()),
            ("__connect.errors.source.partition".into(), shorten(partition_text).into_bytes()),
            ("__connect.errors.source.offset".into(), shorten(&shared.lossy(record.offset)).into_bytes()),
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
        for header in shared.headers.get(Shared::range(record.headers)).unwrap_or_default() {
            let (key, value) = (shared.lossy(header.key), shared.bytes_or_none(header.value).unwrap_or_default());
            let size = (key.len() + value.len()) as u64;
            if size <= room {
                room -= size;
                headers.push((key, value.to_vec()));
            } else {
                truncated = true;
            }
        }
        let mut cut = |bytes: Option<Bytes>| {
            bytes.map(|mut bytes| {
                if bytes.len() as u64 > room {
                    bytes.truncate(room as usize);
                    truncated = true;
                }
                room -= bytes.len() as u64;
                bytes
            })
        };
        let key = cut(record.key.and_then(|s| shared.bytes_or_none(s)));
        let value = cut(record.value.and_then(|s| shared.bytes_or_none(s)));
        if truncated {
            headers.push((TRUNCATED.into(), b"true".to_vec()));
        }
        let (partition, offset) = commit.clone().unwrap_or_else(|| (Arc::from("{}"), Text::from("{}")));
        Record {
            topic: Arc::from(topic.as_str()),
            partition,
            offset,
            key,
            value,
            headers: headers.into_iter().map(|(k, v)| (Text::from(k), Bytes::from(v))).collect(),
            timestamp_ms: record.timestamp.unwrap_or(now_ms),
        }
    });
    Polled::Refused { commit, dead_letter }
}

/// Checks one record from `poll` and makes the host's record of it (sharing the batch's
/// bytes), or says why it is refused. Its partition and topic were checked once for the
/// batch (`shared`); offsets are only checked here, and canonicalized when committed
/// ([`latest_offsets`]).
fn check_record(record: &BatchRecord, now_ms: i64, shared: &Shared) -> Result<Polled, String> {
    let partition = match shared.partitions.get(record.partition as usize) {
        Some((_, Ok(canonical))) => canonical.clone(),
        Some((_, Err(e))) => return Err(e.clone()),
        None => {
            return Err(format!(
                "partition {} is not one of the batch's {} partitions",
                record.partition,
                shared.partitions.len()
            ));
        }
    };
    let offset = shared.text(record.offset, "offset")?;
    if let Err(e) = check_object(&offset) {
        return Err(format!("offset is {e}"));
    }
    let Some(topic_index) = record.topic else {
        return Ok(Polled::OffsetOnly { partition, offset });
    };
    let topic = match shared.topics.get(topic_index as usize) {
        Some((_, Ok(topic))) => topic.clone(),
        Some((_, Err(reason))) => return Err(reason.clone()),
        None => return Err(format!("topic {topic_index} is not one of the batch's {} topics", shared.topics.len())),
    };
    let key = record.key.map(|span| shared.bytes(span, "key")).transpose()?;
    let value = record.value.map(|span| shared.bytes(span, "value")).transpose()?;
    let headers = shared
        .header_run(record.headers)?
        .iter()
        .map(|h| Ok((shared.text(h.key, "header key")?, shared.bytes(h.value, "header value")?)))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Polled::Record(Record {
        topic,
        partition,
        offset,
        key,
        value,
        headers,
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

    /// A 0.3.0 batch of one record whose parts are all valid spans of `data`.
    fn packed(data: &[u8], offset: (u32, u32), value: Option<(u32, u32)>, headers: Vec<BatchHeader>) -> PollBatch {
        let span = |(start, len): (u32, u32)| Span { start, len };
        let count = headers.len() as u32;
        PollBatch {
            partitions: vec![r#"{"p":1}"#.into()],
            topics: vec!["t".into()],
            data: data.to_vec(),
            headers,
            records: vec![BatchRecord {
                partition: 0,
                offset: span(offset),
                topic: Some(0),
                key: None,
                value: value.map(span),
                headers: Span { start: 0, len: count },
                timestamp: Some(1),
            }],
            done: false,
        }
    }

    #[test]
    fn records_share_the_batch_bytes_their_spans_name() {
        let data = br#"{"n":1}hello"#;
        let header = BatchHeader { key: Span { start: 7, len: 2 }, value: Span { start: 9, len: 3 } };
        let batch = packed(data, (0, 7), Some((7, 5)), vec![header]);
        let (polled, refused) = check_batch(
            batch,
            &SandboxSettings::default(),
            &ErrorHandling::default(),
            0,
            &Source { connector: "c", task: 0 },
        )
        .unwrap();
        assert_eq!(refused, 0);
        let Polled::Record(record) = &polled[0] else { panic!("{polled:?}") };
        assert_eq!((record.offset.as_str(), record.value.as_deref()), (r#"{"n":1}"#, Some(b"hello".as_slice())));
        assert_eq!(record.headers, [(Text::from("he"), bytes::Bytes::from_static(b"llo"))]);
    }

    #[test]
    fn spans_outside_the_batch_or_text_that_is_not_utf8_refuse_the_record() {
        let source = Source { connector: "c", task: 0 };
        let refused = |batch: PollBatch| {
            check_batch(batch, &SandboxSettings::default(), &ErrorHandling::default(), 0, &source).unwrap_err()
        };
        let data = br#"{"n":1}hello"#;
        let error = refused(packed(data, (0, 7), Some((7, 6)), vec![]));
        assert!(error.ends_with("value span 7..13 is past the end of the batch's 12 bytes of data"), "{error}");
        let error = refused(packed(data, (u32::MAX, 2), None, vec![]));
        assert!(error.contains("offset span 4294967295..4294967297 is past the end"), "{error}");
        let error = refused(packed(b"{\"n\":\xff}", (0, 7), None, vec![]));
        assert!(error.ends_with("offset is not UTF-8 (invalid utf-8 sequence of 1 bytes from index 5)"), "{error}");
        let bad_key = BatchHeader { key: Span { start: 0, len: 1 }, value: Span { start: 0, len: 0 } };
        let error = refused(packed(b"\xff{\"n\":1}", (1, 7), None, vec![bad_key]));
        assert!(error.contains("header key is not UTF-8"), "{error}");
        let mut batch = packed(data, (0, 7), None, vec![]);
        batch.records[0].headers = Span { start: 0, len: 3 };
        let error = refused(batch);
        assert!(error.ends_with("headers 0..3 are past the end of the batch's 0 headers"), "{error}");
        // The record names the bytes it delivers, and they count toward the caps: many
        // records naming the same bytes cost what they deliver.
        let mut batch = packed(&[b'x'; 1000], (0, 0), Some((0, 1000)), vec![]);
        batch.data.splice(0..0, br#"{"n":1}"#.iter().copied());
        let record = BatchRecord { offset: Span { start: 0, len: 7 }, ..batch.records[0] };
        batch.records = vec![record; 200];
        let sandbox = SandboxSettings { batch_max_bytes: 100_000, ..SandboxSettings::default() };
        let error = check_batch(batch, &sandbox, &ErrorHandling::default(), 0, &source).unwrap_err();
        assert!(
            error.contains("poll batch of 200 records") && error.contains("exceeds sandbox.batch.max.bytes"),
            "{error}"
        );
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
        assert_eq!(&*copy.topic, "dlq");
        let size = copy.key.as_ref().map_or(0, |b| b.len())
            + copy.value.as_ref().map_or(0, |b| b.len())
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
        assert_eq!(delivered.iter().map(|r| &*r.topic).collect::<Vec<_>>(), ["t", "dlq", "dlq", "t"]);
    }
}
