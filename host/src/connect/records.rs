//! What a plugin may hand the host, checked before anything reaches a store: source
//! partitions and offsets (through [`crate::storage::json`]), topic names, and record and
//! batch sizes against the sandbox's caps.

use std::sync::Arc;

use bytes::Bytes;

use super::transforms;
use crate::config::{ErrorHandling, SandboxSettings, Transforms};
use crate::runtime::bindings::{BatchHeader, BatchRecord, PollBatch, Span};
use crate::runtime::plugin_log::escape_controls;
use crate::runtime::rate::TokenBucket;
use crate::runtime::sandbox::human_bytes;
use crate::storage::json::{canonical_object, check_object, shorten};
use crate::storage::{Part, Record, RecordBatch, RecordBatchBuilder, Text};

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
    if topic == "." || topic == ".." {
        return Err(format!("topic {topic:?} is not allowed (Kafka reserves '.' and '..')"));
    }
    Ok(())
}

/// A poll batch after the host's checks.
#[derive(Debug, Default)]
pub struct Checked {
    /// The records to deliver, in order: the accepted ones and the dead-letter copies of
    /// refused ones.
    pub records: RecordBatch,
    /// The last offset of each partition the batch advances, in order of first appearance
    /// (canonical JSON): what delivering the batch lets us commit. Offset-only records and
    /// refused records with a valid partition and offset advance them too.
    pub offsets: Vec<(String, String)>,
    /// Records refused under `errors.tolerance=all`.
    pub refused: u64,
    /// Why, for the first [`MAX_REFUSALS_KEPT`] of them, under `errors.log.enable` (the
    /// caller logs them within the log's rate).
    pub refusals: Vec<String>,
}

/// The reasons one batch keeps for `errors.log.enable`: a batch of ten thousand bad
/// records is not ten thousand strings.
pub const MAX_REFUSALS_KEPT: usize = 100;

/// `errors.log.enable`'s lines for one task, within `sandbox.log.lines.per.second` (as
/// the plugin's own lines are): a plugin that returns bad records as fast as it can, under
/// `errors.tolerance=all`, would otherwise write the worker's log as fast as it polls. The
/// lines left out are counted and said once lines flow again.
#[derive(Debug)]
pub struct RefusalLog {
    rate: TokenBucket,
    per_second: u32,
    unlogged: u64,
}

impl RefusalLog {
    pub fn new(lines_per_second: u32) -> RefusalLog {
        let per_second = lines_per_second.max(1);
        RefusalLog {
            rate: TokenBucket::new(f64::from(per_second), 2.0 * f64::from(per_second)),
            per_second,
            unlogged: 0,
        }
    }

    /// Logs what it may of a batch's `refusals` (of `refused` records in all); returns the
    /// lines, for tests.
    pub fn log(&mut self, source: &Source, refusals: &[String], refused: u64) -> Vec<String> {
        let Source { connector, task } = *source;
        let mut lines = Vec::new();
        for reason in refusals {
            if !self.rate.try_take_one() {
                self.unlogged += 1;
                continue;
            }
            if self.unlogged > 0 {
                lines.push(format!(
                    "{} skipped record(s) were not logged: errors.log.enable writes at most \
                     sandbox.log.lines.per.second ({}) lines a second",
                    self.unlogged, self.per_second
                ));
                self.unlogged = 0;
            }
            lines.push(format!("skipped a record (errors.tolerance=all): {reason}"));
        }
        self.unlogged += refused.saturating_sub(refusals.len() as u64);
        for line in &lines {
            tracing::warn!(connector, task, "{line}");
        }
        lines
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

fn part(span: Span) -> Part {
    Part { start: span.start, len: span.len }
}

/// A batch's shared parts: its partitions and topics, each checked once however many
/// records use it, the headers its records name by span, and where each partition and
/// topic is in the batch being built.
struct Shared {
    /// Each partition as given, and canonicalized or why it cannot be.
    partitions: Vec<(String, Result<Arc<str>, String>)>,
    /// Each topic as given, and why it cannot be used if it cannot.
    topics: Vec<(String, Result<Arc<str>, String>)>,
    headers: Vec<BatchHeader>,
    /// The poll's data: what records name by span.
    data_len: usize,
    /// Each partition's and topic's index in the batch being built, once a record used it.
    built_partitions: Vec<Option<u32>>,
    built_topics: Vec<Option<u32>>,
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

    /// Best effort, for messages and dead-letter copies: the bytes if the span is valid.
    fn bytes_or_none(data: &[u8], span: Span) -> Option<&[u8]> {
        data.get(Self::range(span))
    }

    fn lossy(data: &[u8], span: Span) -> String {
        Self::bytes_or_none(data, span).map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
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

    /// What a span counts toward the caps: its length when it is inside the data (a span
    /// outside refuses its record anyway).
    fn size(&self, span: Span) -> u64 {
        if Self::range(span).end <= self.data_len { u64::from(span.len) } else { 0 }
    }

    /// Size of a record as `sandbox.record.max.bytes` counts it: key, value, each header's
    /// key and value plus [`HEADER_OVERHEAD`], plus [`RECORD_OVERHEAD`]. Bytes named twice
    /// count twice: they are delivered twice.
    fn record_size(&self, record: &BatchRecord) -> u64 {
        let headers = self.headers.get(Self::range(record.headers)).unwrap_or_default();
        record_size(
            record.key.map_or(0, |s| self.size(s)),
            record.value.map_or(0, |s| self.size(s)),
            headers.iter().map(|h| (self.size(h.key), self.size(h.value))),
        )
    }

    /// The canonical partition a record names, or why it names none.
    fn partition(&self, index: u32) -> Result<&Arc<str>, String> {
        match self.partitions.get(index as usize) {
            Some((_, Ok(canonical))) => Ok(canonical),
            Some((_, Err(e))) => Err(e.clone()),
            None => Err(format!("partition {index} is not one of the batch's {} partitions", self.partitions.len())),
        }
    }
}

/// A record's size as the caps count it, from the lengths of its key, value and headers.
fn record_size(key: u64, value: u64, headers: impl Iterator<Item = (u64, u64)>) -> u64 {
    key + value + headers.map(|(key, value)| key + value + HEADER_OVERHEAD).sum::<u64>() + RECORD_OVERHEAD
}

/// Where the latest offset of each partition a batch advances is: the canonical partition
/// (two of a batch's partitions may be the same one written differently) and the offset's
/// span, in order of the partitions' first appearance.
#[derive(Default)]
struct Advanced {
    latest: Vec<(Arc<str>, Span)>,
}

impl Advanced {
    fn advance(&mut self, partition: &Arc<str>, offset: Span) {
        // Most batches have one partition, or runs of the same one: the last is looked at first.
        match self.latest.iter_mut().rev().find(|(p, _)| Arc::ptr_eq(p, partition) || **p == **partition) {
            Some(entry) => entry.1 = offset,
            None => self.latest.push((partition.clone(), offset)),
        }
    }

    /// Every offset was checked to be an object of primitives, so canonicalizing it
    /// cannot fail.
    fn offsets(self, data: &[u8]) -> Vec<(String, String)> {
        self.latest
            .into_iter()
            .filter_map(|(partition, offset)| {
                let offset = std::str::from_utf8(Shared::bytes_or_none(data, offset)?).ok()?;
                Some((partition.to_string(), canonical_object(offset).unwrap_or_else(|_| offset.to_string())))
            })
            .collect()
    }
}

/// Checks a whole `poll` batch: the batch cap (always fatal; partitions, topics and
/// offsets count too), then each record (its headers, size, partition, offset, topic and
/// the spans of its bytes). A bad record fails the task with the record named, or, under
/// `errors.tolerance=all`, is refused: its offset, when it has a valid one, is committed
/// in order (so a restart does not meet it again), and a copy goes to the dead-letter
/// topic when one is set. The records name the batch's bytes: nothing is copied.
pub fn check_batch(
    batch: PollBatch,
    sandbox: &SandboxSettings,
    errors: &ErrorHandling,
    transforms: &Transforms,
    now_ms: i64,
    source: &Source,
) -> Result<Checked, String> {
    let Source { connector, task } = *source;
    let PollBatch { partitions, topics, data, headers, records, done: _ } = batch;
    let mut shared = Shared {
        partitions: Vec::new(),
        topics: Vec::new(),
        data_len: data.len(),
        built_partitions: vec![None; partitions.len()],
        built_topics: vec![None; topics.len()],
        headers,
    };
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
    let mut builder = RecordBatchBuilder::new(data).with_capacity(records.len(), shared.headers.len());
    let mut advanced = Advanced::default();
    let (mut refused, mut refusals) = (0, Vec::new());
    for (index, record) in records.iter().enumerate() {
        let size = shared.record_size(record);
        // Where it comes from, as `sluice offsets` shows it: its index repeats every batch.
        let source_of = |shared: &Shared, data: &[u8]| match shared.partition_text(record.partition) {
            Some(partition) => format!(
                ": source partition {} at offset {}",
                escape_controls(&shorten(partition)),
                escape_controls(&shorten(&Shared::lossy(data, record.offset)))
            ),
            None => String::new(),
        };
        let checked = if record.headers.len as usize > MAX_HEADERS {
            let headers = record.headers.len;
            Err(format!(
                "record {index} has {headers} headers, more than the {MAX_HEADERS} a record may carry{}",
                source_of(&shared, builder.data())
            )
            .into())
        } else if size > sandbox.record_max_bytes {
            Err(format!(
                "record {index} of {} exceeds sandbox.record.max.bytes ({}){}",
                human_bytes(size),
                human_bytes(sandbox.record_max_bytes),
                source_of(&shared, builder.data())
            )
            .into())
        } else {
            check_record(record, now_ms, transforms, sandbox.record_max_bytes, &mut shared, &mut builder).map_err(
                |refusal| Refusal {
                    reason: format!("record {index} of the poll batch refused: {}", refusal.reason),
                    ..refusal
                },
            )
        };
        match checked {
            Ok(()) => advanced.advance(shared.partition(record.partition)?, record.offset),
            Err(refusal) if !errors.tolerate_all => {
                return Err(format!("connector '{connector}' task {task}: {}", refusal.reason));
            }
            Err(refusal) => {
                if errors.log && refusals.len() < MAX_REFUSALS_KEPT {
                    refusals.push(refusal.reason.clone());
                }
                refused += 1;
                let data = builder.data();
                let offset_is_valid = Shared::bytes_or_none(data, record.offset)
                    .and_then(|offset| std::str::from_utf8(offset).ok())
                    .is_some_and(|offset| check_object(offset).is_ok());
                let commits = match shared.partition(record.partition) {
                    Ok(partition) if offset_is_valid => {
                        advanced.advance(partition, record.offset);
                        true
                    }
                    _ => false,
                };
                if let Some(copy) =
                    dead_letter(record, &shared, data, commits, &refusal, errors, sandbox, now_ms, source)
                {
                    builder.push_record(&copy);
                }
            }
        }
    }
    let offsets = advanced.offsets(builder.data());
    Ok(Checked { records: builder.finish(), offsets, refused, refusals })
}

/// The dead-letter copy of a refused record (when a dead-letter topic is set), cut to fit
/// the record cap. It carries the record's partition and offset when both are valid
/// (`commits`), `{}` otherwise.
#[allow(clippy::too_many_arguments)]
fn dead_letter(
    record: &BatchRecord,
    shared: &Shared,
    data: &[u8],
    commits: bool,
    refusal: &Refusal,
    errors: &ErrorHandling,
    sandbox: &SandboxSettings,
    now_ms: i64,
    source: &Source,
) -> Option<Record> {
    let topic = errors.dead_letter_topic.as_ref()?;
    let partition_text = shared.partition_text(record.partition).unwrap_or_default();
    const MESSAGE: &str = "__connect.errors.exception.message";
    const TRUNCATED: &str = "__connect.errors.truncated";
    let mut headers: Vec<(String, Vec<u8>)> = vec![
        ("__connect.errors.connector.name".into(), source.connector.as_bytes().to_vec()),
        ("__connect.errors.task.id".into(), source.task.to_string().into_bytes()),
        ("__connect.errors.source.partition".into(), shorten(partition_text).into_bytes()),
        ("__connect.errors.source.offset".into(), shorten(&Shared::lossy(data, record.offset)).into_bytes()),
    ];
    match refusal.transform {
        None => headers.push(("__connect.errors.stage".into(), b"TASK_POLL".to_vec())),
        Some(class) => {
            headers.push(("__connect.errors.stage".into(), b"TRANSFORMATION".to_vec()));
            let class = format!("{}{class}", crate::config::transforms::PACKAGE);
            headers.push(("__connect.errors.class.name".into(), class.into_bytes()));
        }
    }
    if let Some(original) = record.topic.and_then(|t| shared.topic_text(t)) {
        headers.push(("__connect.errors.topic".into(), shorten(original).into_bytes()));
    }
    let size = |headers: &[(String, Vec<u8>)]| headers.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum::<u64>();
    let cap = errors.dead_letter_max_bytes.map_or(sandbox.record_max_bytes, |max| max.min(sandbox.record_max_bytes));
    // Even the reason gives way to the cap, however small the cap.
    let fixed = size(&headers) + (MESSAGE.len() + TRUNCATED.len() + 4) as u64;
    let mut message = refusal.reason.as_bytes().to_vec();
    message.truncate(cap.saturating_sub(fixed) as usize);
    headers.push((MESSAGE.into(), message));
    let mut room = cap.saturating_sub(size(&headers) + (TRUNCATED.len() + 4) as u64);
    let mut truncated = false;
    for header in shared.headers.get(Shared::range(record.headers)).unwrap_or_default() {
        let (key, value) =
            (Shared::lossy(data, header.key), Shared::bytes_or_none(data, header.value).unwrap_or_default());
        let size = (key.len() + value.len()) as u64;
        if size <= room {
            room -= size;
            headers.push((key, value.to_vec()));
        } else {
            truncated = true;
        }
    }
    let mut cut = |bytes: Option<&[u8]>| {
        bytes.map(|bytes| {
            let kept = &bytes[..bytes.len().min(room as usize)];
            truncated |= kept.len() < bytes.len();
            room -= kept.len() as u64;
            Bytes::copy_from_slice(kept)
        })
    };
    let key = cut(record.key.and_then(|s| Shared::bytes_or_none(data, s)));
    let value = cut(record.value.and_then(|s| Shared::bytes_or_none(data, s)));
    if truncated {
        headers.push((TRUNCATED.into(), b"true".to_vec()));
    }
    let (partition, offset) = match commits {
        true => (
            shared.partition(record.partition).expect("a committing record's partition is valid").clone(),
            Text::from(Shared::lossy(data, record.offset)),
        ),
        false => (Arc::from("{}"), Text::from("{}")),
    };
    Some(Record {
        topic: Arc::from(topic.as_str()),
        partition,
        offset,
        key,
        value,
        headers: headers.into_iter().map(|(k, v)| (Text::from(k), Bytes::from(v))).collect(),
        timestamp_ms: record.timestamp.unwrap_or(now_ms),
    })
}

/// Checks one record from `poll` and adds it to the batch being built (naming the poll's
/// bytes), or says why it is refused. Its partition and topic were checked once for the
/// batch (`shared`); offsets are only checked here, and canonicalized when committed. An
/// offset-only record (no topic) adds nothing but its offset.
fn check_record(
    record: &BatchRecord,
    now_ms: i64,
    transforms: &Transforms,
    record_max_bytes: u64,
    shared: &mut Shared,
    builder: &mut RecordBatchBuilder,
) -> Result<(), Refusal> {
    shared.partition(record.partition)?;
    let (offset, offset_text) = builder.text(part(record.offset), "offset")?;
    if let Err(e) = check_object(offset_text) {
        return Err(format!("offset is {e}").into());
    }
    let Some(topic_index) = record.topic else {
        return Ok(());
    };
    if let Some(timestamp) = record.timestamp.filter(|&t| t < 0) {
        return Err(format!(
            "timestamp is {timestamp}: a record's timestamp is milliseconds since 1970 and cannot be negative (Kafka refuses it; leave it out for the time of the poll)"
        )
        .into());
    }
    let topic_text = match shared.topics.get(topic_index as usize) {
        Some((_, Ok(topic))) => topic,
        Some((_, Err(reason))) => return Err(reason.clone().into()),
        None => {
            return Err(format!("topic {topic_index} is not one of the batch's {} topics", shared.topics.len()).into());
        }
    };
    let mut topic = *shared.built_topics[topic_index as usize].get_or_insert_with(|| builder.topic(topic_text.clone()));
    let index = record.partition as usize;
    let canonical = &shared.partitions[index].1;
    let partition = *shared.built_partitions[index]
        .get_or_insert_with(|| builder.partition(canonical.clone().expect("the partition was checked above")));
    let headers = shared.header_run(record.headers)?.iter().map(|h| (part(h.key), part(h.value)));
    let timestamp_ms = record.timestamp.unwrap_or(now_ms);
    let (key, value) = (record.key.map(part), record.value.map(part));
    if transforms.is_empty() {
        return Ok(builder.push(topic, partition, offset, key, value, headers, timestamp_ms)?);
    }
    let record = transforms::Record { topic: topic_text.clone(), key, value, headers: headers.collect(), timestamp_ms };
    let transformed = transforms::apply(transforms, record, builder)
        .map_err(|refused| Refusal { reason: refused.reason, transform: Some(refused.class) })?;
    let Some(transformed) = transformed else {
        // Dropped by a transform: its offset still advances, as an offset-only record's.
        return Ok(());
    };
    if let Some((routed, alias)) = transformed.topic {
        check_topic(&routed).map_err(|reason| Refusal {
            reason: format!("transform '{alias}' routed it to a topic Kafka refuses: {reason}"),
            transform: transforms.steps().iter().find(|s| s.alias == alias).map(|s| s.transform.class()),
        })?;
        topic = builder.topic(Arc::from(routed));
    }
    // What the transforms added counts toward the record cap too.
    let len = |part: Option<Part>| u64::from(part.map_or(0, |p| p.len));
    let headers = transformed.headers.iter().map(|(key, value)| (u64::from(key.len), u64::from(value.len)));
    let size = record_size(len(transformed.key), len(transformed.value), headers);
    if size > record_max_bytes {
        return Err(format!(
            "transformed, it is {}, more than sandbox.record.max.bytes ({})",
            human_bytes(size),
            human_bytes(record_max_bytes)
        )
        .into());
    }
    Ok(builder.push(topic, partition, offset, transformed.key, transformed.value, transformed.headers, timestamp_ms)?)
}

/// Why a record is refused, and by which transform, if one: a dead-letter copy names the
/// stage (Connect's `TASK_POLL` or `TRANSFORMATION`) and the transform's class.
struct Refusal {
    reason: String,
    transform: Option<&'static str>,
}

impl From<String> for Refusal {
    fn from(reason: String) -> Refusal {
        Refusal { reason, transform: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::bindings::{Header, SourceRecord};

    #[test]
    fn topics_follow_kafka_rules() {
        assert!(check_topic("a.b_c-1").is_ok());
        assert!(check_topic("").is_err());
        assert!(check_topic(&"x".repeat(250)).unwrap_err().contains("250"));
        assert!(check_topic(&"x".repeat(249)).is_ok());
        assert!(check_topic("a b").unwrap_err().contains("' '"));
        assert!(check_topic("..").unwrap_err().contains("reserves"));
        assert!(check_topic("...").is_ok());
    }

    #[test]
    fn offsets_are_the_last_of_each_partition_offset_only_records_included() {
        let only_offset = SourceRecord { topic: None, ..source_record(r#"{"p":"a"}"#, r#"{"n": 3}"#, 1) };
        let batch = PollBatch::from_records(vec![
            source_record(r#"{"p":"a"}"#, r#"{"n":1}"#, 1),
            source_record(r#"{"p":"b"}"#, r#"{"n":1}"#, 1),
            only_offset,
        ]);
        let source = Source { connector: "c", task: 0 };
        let checked = check_batch(
            batch,
            &SandboxSettings::default(),
            &ErrorHandling::default(),
            &Transforms::default(),
            0,
            &source,
        )
        .unwrap();
        let owned = |(p, o): (&str, &str)| (p.to_string(), o.to_string());
        // In order of first appearance, canonical (no space), the offset-only record's last.
        assert_eq!(checked.offsets, [owned((r#"{"p":"a"}"#, r#"{"n":3}"#)), owned((r#"{"p":"b"}"#, r#"{"n":1}"#))]);
        assert_eq!(checked.records.len(), 2, "an offset-only record delivers nothing");
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
        let checked = check_batch(
            batch,
            &SandboxSettings::default(),
            &ErrorHandling::default(),
            &Transforms::default(),
            0,
            &Source { connector: "c", task: 0 },
        )
        .unwrap();
        assert_eq!(checked.refused, 0);
        let record = checked.records.get(0).unwrap();
        assert_eq!((record.offset, record.value), (r#"{"n":1}"#, Some(b"hello".as_slice())));
        assert_eq!(record.headers().collect::<Vec<_>>(), [("he", b"llo".as_slice())]);
    }

    #[test]
    fn spans_outside_the_batch_or_text_that_is_not_utf8_refuse_the_record() {
        let source = Source { connector: "c", task: 0 };
        let refused = |batch: PollBatch| {
            check_batch(
                batch,
                &SandboxSettings::default(),
                &ErrorHandling::default(),
                &Transforms::default(),
                0,
                &source,
            )
            .unwrap_err()
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
        let error =
            check_batch(batch, &sandbox, &ErrorHandling::default(), &Transforms::default(), 0, &source).unwrap_err();
        assert!(
            error.contains("poll batch of 200 records") && error.contains("exceeds sandbox.batch.max.bytes"),
            "{error}"
        );
    }

    #[test]
    fn a_negative_timestamp_is_refused_with_the_record_named() {
        let source = Source { connector: "c", task: 0 };
        let mut records =
            vec![source_record(r#"{"p":1}"#, r#"{"n":1}"#, 1), source_record(r#"{"p":1}"#, r#"{"n":2}"#, 1)];
        records[0].timestamp = Some(0);
        records[1].timestamp = Some(i64::MIN);
        let error = check_batch(
            PollBatch::from_records(records),
            &SandboxSettings::default(),
            &ErrorHandling::default(),
            &Transforms::default(),
            0,
            &source,
        )
        .unwrap_err();
        assert!(error.contains("record 1 of the poll batch refused: timestamp is -9223372036854775808"), "{error}");
    }

    #[test]
    fn a_bad_record_fails_the_batch_unless_errors_are_tolerated() {
        let sandbox = SandboxSettings { record_max_bytes: 400, ..SandboxSettings::default() };
        let source = Source { connector: "c", task: 2 };
        let sources = || {
            vec![
                source_record(r#"{"p":1}"#, r#"{"n":1}"#, 10),
                source_record(r#"{"p":1}"#, r#"{"n":2}"#, 1000),
                source_record("not json", r#"{"n":3}"#, 10),
                source_record(r#"{"p":1}"#, r#"{"n":4}"#, 10),
            ]
        };
        let batch = || PollBatch::from_records(sources());
        let error =
            check_batch(batch(), &sandbox, &ErrorHandling::default(), &Transforms::default(), 0, &source).unwrap_err();
        assert!(error.starts_with("connector 'c' task 2: record 1 of 1065 bytes exceeds"), "{error}");

        let errors = ErrorHandling { tolerate_all: true, dead_letter_topic: Some("dlq".into()), ..Default::default() };
        let checked = check_batch(batch(), &sandbox, &errors, &Transforms::default(), 0, &source).unwrap();
        assert_eq!(checked.refused, 2);
        assert!(checked.refusals.is_empty(), "kept only for errors.log.enable");
        let logged = ErrorHandling { log: true, ..errors.clone() };
        let refusals = check_batch(batch(), &sandbox, &logged, &Transforms::default(), 0, &source).unwrap().refusals;
        assert_eq!(refusals.len(), 2);
        assert!(refusals[0].starts_with("record 1 of 1065 bytes exceeds"), "{refusals:?}");
        assert!(refusals[0].ends_with(r#": source partition {"p":1} at offset {"n":2}"#), "{refusals:?}");
        assert!(refusals[1].starts_with("record 2 of the poll batch refused: partition is not JSON"), "{refusals:?}");
        assert_eq!(checked.offsets, [(r#"{"p":1}"#.to_string(), r#"{"n":4}"#.to_string())]);
        // The oversized record's offset is committed in order (when it is the batch's
        // last, its offset is the one committed); the bad partition's cannot be.
        let last_refused = PollBatch::from_records(sources().into_iter().take(2).collect());
        let checked_last = check_batch(last_refused, &sandbox, &errors, &Transforms::default(), 0, &source).unwrap();
        assert_eq!(checked_last.offsets, [(r#"{"p":1}"#.to_string(), r#"{"n":2}"#.to_string())]);
        let delivered = checked.records.to_records();
        let copy = &delivered[1];
        assert_eq!((&*copy.topic, &*copy.partition, copy.offset.as_str()), ("dlq", r#"{"p":1}"#, r#"{"n":2}"#));
        assert_eq!((&*delivered[2].partition, delivered[2].offset.as_str()), ("{}", "{}"));
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
        assert_eq!(delivered.iter().map(|r| &*r.topic).collect::<Vec<_>>(), ["t", "dlq", "dlq", "t"]);
        // Where Kafka takes less than the sandbox's cap, the copy is cut to what it takes.
        let kafka = ErrorHandling { dead_letter_max_bytes: Some(300), ..errors.clone() };
        let delivered = check_batch(batch(), &sandbox, &kafka, &Transforms::default(), 0, &source).unwrap().records;
        let copy = &delivered.to_records()[1];
        let size = copy.key.as_ref().map_or(0, |b| b.len())
            + copy.value.as_ref().map_or(0, |b| b.len())
            + copy.headers.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        assert!(size <= 300, "the dead-letter copy fits what Kafka takes: {size}");
    }

    fn chain(pairs: &[(&str, &str)]) -> Transforms {
        Transforms::parse(&|key| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)).unwrap()
    }

    #[test]
    fn transforms_route_stamp_and_drop_records_and_dropped_ones_still_commit() {
        let transforms = chain(&[
            ("transforms", "skip,route,stamp,clean"),
            ("transforms.skip.type", "org.apache.kafka.connect.transforms.Filter"),
            ("transforms.skip.predicate", "noisy"),
            ("transforms.route.type", "org.apache.kafka.connect.transforms.RegexRouter"),
            ("transforms.route.regex", "(.*)-raw"),
            ("transforms.route.replacement", "$1"),
            ("transforms.stamp.type", "org.apache.kafka.connect.transforms.InsertHeader"),
            ("transforms.stamp.header", "via"),
            ("transforms.stamp.value.literal", "sluice"),
            ("transforms.stamp.predicate", "tombstone"),
            ("transforms.stamp.negate", "true"),
            ("transforms.clean.type", "org.apache.kafka.connect.transforms.DropHeaders"),
            ("transforms.clean.headers", "secret"),
            ("predicates", "noisy,tombstone"),
            ("predicates.noisy.type", "org.apache.kafka.connect.transforms.predicates.HasHeaderKey"),
            ("predicates.noisy.name", "debug"),
            ("predicates.tombstone.type", "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone"),
        ]);
        let record = |n: u32, topic: &str, value: Option<&[u8]>, headers: &[(&str, &[u8])]| SourceRecord {
            partition: r#"{"p":1}"#.into(),
            offset: format!(r#"{{"n":{n}}}"#),
            topic: Some(topic.into()),
            key: None,
            value: value.map(<[u8]>::to_vec),
            headers: headers.iter().map(|(k, v)| Header { key: k.to_string(), value: v.to_vec() }).collect(),
            timestamp: Some(1),
        };
        let batch = PollBatch::from_records(vec![
            record(1, "logs-raw", Some(b"a"), &[("secret", b"s"), ("keep", b"k")]),
            record(2, "logs-raw", Some(b"b"), &[("debug", b"")]),
            record(3, "other", None, &[]),
        ]);
        let source = Source { connector: "c", task: 0 };
        let checked =
            check_batch(batch, &SandboxSettings::default(), &ErrorHandling::default(), &transforms, 0, &source)
                .unwrap();
        let delivered = checked.records.to_records();
        assert_eq!(delivered.len(), 2, "the record with a debug header is dropped");
        assert_eq!((&*delivered[0].topic, delivered[0].offset.as_str()), ("logs", r#"{"n":1}"#));
        let headers = |r: &Record| r.headers.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect::<Vec<_>>();
        assert_eq!(
            headers(&delivered[0]),
            [("keep".to_string(), b"k".to_vec()), ("via".to_string(), b"sluice".to_vec())]
        );
        assert_eq!(&*delivered[1].topic, "other", "a topic the regex does not match whole keeps its name");
        assert!(headers(&delivered[1]).is_empty(), "a tombstone gets no header (negated predicate)");
        assert_eq!(checked.offsets, [(r#"{"p":1}"#.to_string(), r#"{"n":3}"#.to_string())]);
        let written: Vec<&str> = checked.records.topics_written().into_iter().map(|t| &**t).collect();
        assert_eq!(written, ["logs", "other"], "the topic before routing is not one written to");
    }

    #[test]
    fn a_topic_a_transform_makes_is_checked_as_a_plugins_is() {
        let transforms = chain(&[
            ("transforms", "route"),
            ("transforms.route.type", "TimestampRouter"),
            ("transforms.route.topic.format", "${topic} at ${timestamp}"),
        ]);
        let batch = PollBatch::from_records(vec![source_record(r#"{"p":1}"#, r#"{"n":1}"#, 1)]);
        let source = Source { connector: "c", task: 0 };
        let error = check_batch(batch, &SandboxSettings::default(), &ErrorHandling::default(), &transforms, 0, &source)
            .unwrap_err();
        assert!(
            error.contains("record 0 of the poll batch refused: transform 'route' routed it to a topic Kafka refuses"),
            "{error}"
        );
        let stamp = chain(&[
            ("transforms", "stamp"),
            ("transforms.stamp.type", "InsertHeader"),
            ("transforms.stamp.header", "h"),
            ("transforms.stamp.value.literal", &"x".repeat(2000)),
        ]);
        let sandbox = SandboxSettings { record_max_bytes: 1024, ..SandboxSettings::default() };
        let batch = PollBatch::from_records(vec![source_record(r#"{"p":1}"#, r#"{"n":1}"#, 1)]);
        let error = check_batch(batch, &sandbox, &ErrorHandling::default(), &stamp, 0, &source).unwrap_err();
        assert!(
            error.ends_with("transformed, it is 2099 bytes, more than sandbox.record.max.bytes (1 KiB)"),
            "{error}"
        );
        let transforms = chain(&[("transforms", "route"), ("transforms.route.type", "TimestampRouter")]);
        let batch = PollBatch::from_records(vec![source_record(r#"{"p":1}"#, r#"{"n":1}"#, 1)]);
        let checked =
            check_batch(batch, &SandboxSettings::default(), &ErrorHandling::default(), &transforms, 0, &source)
                .unwrap();
        assert_eq!(&*checked.records.to_records()[0].topic, "t-19700101");
    }

    #[test]
    fn field_transforms_reshape_json_keys_and_values_as_connect_does_schemaless_maps() {
        let transforms = chain(&[
            ("transforms", "insert,replace,mask,key,hoist"),
            ("transforms.insert.type", "org.apache.kafka.connect.transforms.InsertField$Value"),
            ("transforms.insert.topic.field", "topic!"),
            ("transforms.insert.timestamp.field", "ts"),
            ("transforms.insert.static.field", "source"),
            ("transforms.insert.static.value", "sluice"),
            ("transforms.replace.type", "org.apache.kafka.connect.transforms.ReplaceField$Value"),
            ("transforms.replace.exclude", "debug"),
            ("transforms.replace.renames", "n:count"),
            ("transforms.mask.type", "org.apache.kafka.connect.transforms.MaskField$Value"),
            ("transforms.mask.fields", "card,pin,owner"),
            ("transforms.mask.replacement", "0000"),
            ("transforms.key.type", "org.apache.kafka.connect.transforms.ValueToKey"),
            ("transforms.key.fields", "id,missing"),
            ("transforms.hoist.type", "org.apache.kafka.connect.transforms.HoistField$Key"),
            ("transforms.hoist.field", "k"),
        ]);
        let record = |n: u32, value: Option<&str>| SourceRecord {
            partition: r#"{"p":1}"#.into(),
            offset: format!(r#"{{"n":{n}}}"#),
            topic: Some("t".into()),
            key: Some(b"ignored".to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: vec![],
            timestamp: Some(7),
        };
        let value = r#"{"id":"a1","n":3,"debug":true,"card":"4111","pin":1234,"owner":{"x":1},"big":123456789012345678901234567890,"f":1.50,"t":"caf\u00e9"}"#;
        let batch = PollBatch::from_records(vec![record(1, Some(value)), record(2, None)]);
        let source = Source { connector: "c", task: 0 };
        let errors = ErrorHandling::default();
        let masked_object =
            check_batch(batch, &SandboxSettings::default(), &errors, &transforms, 0, &source).unwrap_err();
        assert!(
            masked_object
                .ends_with("transform 'mask' (MaskField$Value): owner: a replacement only masks a string or a number"),
            "{masked_object}"
        );
        let transforms = chain(&[
            ("transforms", "insert,replace,mask,key,hoist,extract"),
            ("transforms.insert.type", "InsertField$Value"),
            ("transforms.insert.topic.field", "topic"),
            ("transforms.insert.timestamp.field", "ts"),
            ("transforms.insert.static.field", "source"),
            ("transforms.insert.static.value", "sluice"),
            ("transforms.replace.type", "ReplaceField$Value"),
            ("transforms.replace.exclude", "debug"),
            ("transforms.replace.renames", "n:count"),
            ("transforms.mask.type", "MaskField$Value"),
            ("transforms.mask.fields", "card,pin,owner"),
            ("transforms.key.type", "ValueToKey"),
            ("transforms.key.fields", "id,missing"),
            ("transforms.hoist.type", "HoistField$Key"),
            ("transforms.hoist.field", "k"),
            ("transforms.extract.type", "ExtractField$Key"),
            ("transforms.extract.field", "k"),
            ("transforms.extract.predicate", "tombstone"),
            ("transforms.extract.negate", "true"),
            ("predicates", "tombstone"),
            ("predicates.tombstone.type", "RecordIsTombstone"),
        ]);
        let batch = PollBatch::from_records(vec![record(1, Some(value))]);
        let checked = check_batch(batch, &SandboxSettings::default(), &errors, &transforms, 0, &source).unwrap();
        let delivered = checked.records.to_records();
        let text = |bytes: &Option<Bytes>| String::from_utf8(bytes.as_ref().unwrap().to_vec()).unwrap();
        assert_eq!(
            text(&delivered[0].value),
            r#"{"id":"a1","count":3,"card":"","pin":0,"owner":{},"big":123456789012345678901234567890,"f":1.50,"t":"caf\u00e9","topic":"t","ts":7,"source":"sluice"}"#,
            "fields keep their order, and the ones no transform touched their text"
        );
        assert_eq!(text(&delivered[0].key), r#"{"id":"a1","missing":null}"#, "hoisted, then extracted again");

        // A tombstone passes InsertField untouched; ValueToKey needs an object to read.
        let tombstone = PollBatch::from_records(vec![record(2, None)]);
        let error = check_batch(tombstone, &SandboxSettings::default(), &errors, &transforms, 0, &source).unwrap_err();
        assert!(
            error.ends_with("transform 'key' (ValueToKey): the value must be a JSON object, and there is none"),
            "{error}"
        );
        // A value that is not JSON is refused; under errors.tolerance=all it is skipped and
        // its offset still commits.
        let not_json = || PollBatch::from_records(vec![record(3, Some("plain text"))]);
        let error = check_batch(not_json(), &SandboxSettings::default(), &errors, &transforms, 0, &source).unwrap_err();
        assert!(error.contains("transform 'insert' (InsertField$Value): the value is not JSON"), "{error}");
        let tolerant = ErrorHandling { tolerate_all: true, ..ErrorHandling::default() };
        let checked = check_batch(not_json(), &SandboxSettings::default(), &tolerant, &transforms, 0, &source).unwrap();
        assert_eq!((checked.records.len(), checked.refused), (0, 1));
        assert_eq!(checked.offsets, [(r#"{"p":1}"#.to_string(), r#"{"n":3}"#.to_string())]);
    }

    #[test]
    fn refused_records_are_logged_within_the_rate_and_the_rest_counted() {
        let source = Source { connector: "c", task: 1 };
        let mut log = RefusalLog::new(2);
        let reasons: Vec<String> = (0..MAX_REFUSALS_KEPT).map(|i| format!("record {i} is bad")).collect();
        // A burst of twice the rate, then nothing until the bucket refills.
        let lines = log.log(&source, &reasons, 10_000);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[3].ends_with("record 3 is bad"), "{lines:?}");
        assert!(log.log(&source, &reasons[..1], 1).is_empty());
        log.rate = TokenBucket::new(2.0, 1.0); // as a second later: refilled
        let lines = log.log(&source, &reasons[..1], 1);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("9997 skipped record(s) were not logged"), "{lines:?}");
        assert!(lines[0].contains("sandbox.log.lines.per.second (2)"), "{lines:?}");
    }
}
