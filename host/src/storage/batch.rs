//! A batch of records as destinations take them: every record's bytes in the one buffer
//! the plugin's poll filled, each record naming its key, value, offset and headers by range,
//! each topic and partition held once. Reading a record ([`RecordRef`]) borrows from the
//! batch: handing 2,000 records to a destination costs no reference count and no
//! allocation per record (a [`Record`] per line cost about half of a `stdout` delivery's
//! time in reference counts, header lists and moves).
//!
//! The builder checks what makes a record readable (its ranges inside the buffer, its
//! offset and header keys UTF-8, the offset through [`TextPart`] once); what makes it acceptable (JSON objects, topic names,
//! sizes) is the connect layer's check before it is pushed.

use std::sync::Arc;

use bytes::Bytes;

use super::model::{Record, Text};

/// A range of a batch's buffer, or of its headers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Part {
    pub start: u32,
    pub len: u32,
}

impl Part {
    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// A part of a builder's buffer that [`RecordBatchBuilder::text`] found to be UTF-8: what
/// [`RecordBatchBuilder::push`] takes as a record's offset, so the text is checked once.
#[derive(Clone, Copy, Debug)]
pub struct TextPart(Part);

#[derive(Clone, Copy, Debug)]
struct Entry {
    topic: u32,
    partition: u32,
    offset: Part,
    key: Option<Part>,
    value: Option<Part>,
    /// A run of the batch's headers.
    headers: Part,
    timestamp_ms: i64,
}

#[derive(Clone, Debug, Default)]
pub struct RecordBatch {
    data: Bytes,
    topics: Vec<Arc<str>>,
    partitions: Vec<Arc<str>>,
    /// Each header's key and value.
    headers: Vec<(Part, Part)>,
    entries: Vec<Entry>,
}

/// One record of a batch, borrowed from it.
#[derive(Clone, Copy, Debug)]
pub struct RecordRef<'a> {
    pub topic: &'a str,
    pub partition: &'a str,
    pub offset: &'a str,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub timestamp_ms: i64,
    headers: &'a [(Part, Part)],
    data: &'a [u8],
}

impl<'a> RecordRef<'a> {
    /// Each header's key and value.
    pub fn headers(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a [u8])> + use<'a> {
        let data = self.data;
        self.headers.iter().map(move |(key, value)| {
            // SAFETY: the builder checked every header key to be UTF-8 and inside `data`.
            (unsafe { std::str::from_utf8_unchecked(&data[key.range()]) }, &data[value.range()])
        })
    }

    /// The record as an owned [`Record`] (its bytes copied).
    pub fn to_record(&self) -> Record {
        Record {
            topic: self.topic.into(),
            partition: self.partition.into(),
            offset: Text::from(self.offset),
            key: self.key.map(Bytes::copy_from_slice),
            value: self.value.map(Bytes::copy_from_slice),
            headers: self.headers().map(|(k, v)| (Text::from(k), Bytes::copy_from_slice(v))).collect(),
            timestamp_ms: self.timestamp_ms,
        }
    }
}

impl RecordBatch {
    /// A batch holding copies of `records` (dead-letter copies, tests, callers outside the
    /// record path).
    pub fn from_records<'r>(records: impl IntoIterator<Item = &'r Record>) -> RecordBatch {
        let mut builder = RecordBatchBuilder::new(Vec::new());
        for record in records {
            builder.push_record(record);
        }
        builder.finish()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = RecordRef<'_>> {
        self.entries.iter().map(|entry| self.record(entry))
    }

    pub fn get(&self, index: usize) -> Option<RecordRef<'_>> {
        self.entries.get(index).map(|entry| self.record(entry))
    }

    /// The topics its records go to, each once (a topic named only by records the checks
    /// skipped is not among them).
    pub fn topics_written(&self) -> Vec<&Arc<str>> {
        let mut used = vec![false; self.topics.len()];
        for entry in &self.entries {
            used[entry.topic as usize] = true;
        }
        self.topics.iter().zip(used).filter_map(|(topic, used)| used.then_some(topic)).collect()
    }

    /// Copies of the records, for callers that keep them.
    pub fn to_records(&self) -> Vec<Record> {
        self.iter().map(|r| r.to_record()).collect()
    }

    fn record(&self, entry: &Entry) -> RecordRef<'_> {
        let data = &self.data[..];
        RecordRef {
            topic: &self.topics[entry.topic as usize],
            partition: &self.partitions[entry.partition as usize],
            // SAFETY: the builder checked the offset to be UTF-8 and inside `data`.
            offset: unsafe { std::str::from_utf8_unchecked(&data[entry.offset.range()]) },
            key: entry.key.map(|key| &data[key.range()]),
            value: entry.value.map(|value| &data[value.range()]),
            timestamp_ms: entry.timestamp_ms,
            headers: &self.headers[entry.headers.range()],
            data,
        }
    }
}

/// Builds a [`RecordBatch`] over a poll's buffer.
pub struct RecordBatchBuilder {
    data: Vec<u8>,
    topics: Vec<Arc<str>>,
    partitions: Vec<Arc<str>>,
    headers: Vec<(Part, Part)>,
    entries: Vec<Entry>,
}

impl RecordBatchBuilder {
    /// Records will name their parts in `data` (a poll batch's buffer, taken as it is).
    pub fn new(data: Vec<u8>) -> RecordBatchBuilder {
        RecordBatchBuilder {
            data,
            topics: Vec::new(),
            partitions: Vec::new(),
            headers: Vec::new(),
            entries: Vec::new(),
        }
    }

    pub fn with_capacity(mut self, records: usize, headers: usize) -> RecordBatchBuilder {
        self.entries.reserve(records);
        self.headers.reserve(headers);
        self
    }

    /// A topic records may name by the index returned.
    pub fn topic(&mut self, topic: Arc<str>) -> u32 {
        index_of(&mut self.topics, topic)
    }

    /// A partition records may name by the index returned.
    pub fn partition(&mut self, partition: Arc<str>) -> u32 {
        index_of(&mut self.partitions, partition)
    }

    /// Adds a record whose parts are ranges of the buffer (its offset already found to be
    /// text by [`Self::text`]), or says why it cannot be read ("value span 7..13 is past
    /// the end of the batch's 12 bytes of data", "header key is not UTF-8 (...)"). Nothing
    /// is added when it is refused.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        topic: u32,
        partition: u32,
        offset: TextPart,
        key: Option<Part>,
        value: Option<Part>,
        headers: impl IntoIterator<Item = (Part, Part)>,
        timestamp_ms: i64,
    ) -> Result<(), String> {
        assert!((topic as usize) < self.topics.len() && (partition as usize) < self.partitions.len());
        let TextPart(offset) = offset;
        if let Some(key) = key {
            self.bytes(key, "key")?;
        }
        if let Some(value) = value {
            self.bytes(value, "value")?;
        }
        let first = self.headers.len();
        for (key, value) in headers {
            let checked = self.text(key, "header key").and_then(|_| self.bytes(value, "header value"));
            if let Err(reason) = checked {
                self.headers.truncate(first);
                return Err(reason);
            }
            self.headers.push((key, value));
        }
        let headers = Part { start: first as u32, len: (self.headers.len() - first) as u32 };
        self.entries.push(Entry { topic, partition, offset, key, value, headers, timestamp_ms });
        Ok(())
    }

    /// Adds a copy of `record`, its bytes appended to the buffer.
    pub fn push_record(&mut self, record: &Record) {
        let topic = self.topic(record.topic.clone());
        let partition = self.partition(record.partition.clone());
        let offset = self.append(record.offset.as_bytes());
        let (offset, _) = self.text(offset, "offset").expect("an owned record's offset is UTF-8");
        let key = record.key.as_deref().map(|key| self.append(key));
        let value = record.value.as_deref().map(|value| self.append(value));
        let headers: Vec<(Part, Part)> =
            record.headers.iter().map(|(k, v)| (self.append(k.as_bytes()), self.append(v))).collect();
        self.push(topic, partition, offset, key, value, headers, record.timestamp_ms)
            .expect("an owned record's parts are UTF-8 where they must be, and inside the buffer");
    }

    pub fn finish(self) -> RecordBatch {
        RecordBatch {
            data: Bytes::from(self.data),
            topics: self.topics,
            partitions: self.partitions,
            headers: self.headers,
            entries: self.entries,
        }
    }

    /// Appends bytes for a record to name (what a transform adds, a copy's parts).
    pub fn append(&mut self, bytes: &[u8]) -> Part {
        let start = u32::try_from(self.data.len()).expect("a batch's buffer stays under 4 GiB");
        self.data.extend_from_slice(bytes);
        Part { start, len: bytes.len() as u32 }
    }

    /// The bytes `part` names, or why it names none (`what` is the record's part).
    pub fn bytes(&self, part: Part, what: &str) -> Result<&[u8], String> {
        let range = part.start as usize..(part.start as usize).saturating_add(part.len as usize);
        self.data.get(range.clone()).ok_or_else(|| {
            format!(
                "{what} span {}..{} is past the end of the batch's {} bytes of data",
                range.start,
                range.end,
                self.data.len()
            )
        })
    }

    /// The text `part` names, or why it names none (`what` is the record's part).
    pub fn text(&self, part: Part, what: &str) -> Result<(TextPart, &str), String> {
        let text = std::str::from_utf8(self.bytes(part, what)?).map_err(|e| format!("{what} is not UTF-8 ({e})"))?;
        Ok((TextPart(part), text))
    }

    /// The buffer records name their parts in.
    pub fn data(&self) -> &[u8] {
        &self.data
    }
}

/// The index of `item` in `items` (by pointer first: a batch hands the same `Arc` again),
/// added when it is not there.
fn index_of(items: &mut Vec<Arc<str>>, item: Arc<str>) -> u32 {
    let found = items.iter().position(|known| Arc::ptr_eq(known, &item) || **known == *item);
    let index = found.unwrap_or_else(|| {
        items.push(item);
        items.len() - 1
    });
    index as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(topic: &str, value: &[u8]) -> Record {
        Record {
            topic: topic.into(),
            partition: r#"{"p":1}"#.into(),
            offset: r#"{"n":1}"#.into(),
            key: None,
            value: Some(Bytes::copy_from_slice(value)),
            headers: vec![("h".into(), Bytes::from_static(b"\xff"))],
            timestamp_ms: 3,
        }
    }

    #[test]
    fn records_read_back_as_they_were_pushed() {
        let records = [record("a", b"one"), record("b", b""), Record { headers: vec![], ..record("a", b"three") }];
        let batch = RecordBatch::from_records(&records);
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.to_records(), records);
        let first = batch.get(0).unwrap();
        assert_eq!(first.headers().collect::<Vec<_>>(), [("h", b"\xff".as_slice())]);
        assert_eq!((first.topic, first.value), ("a", Some(b"one".as_slice())));
        assert!(batch.get(3).is_none());
        let written: Vec<&str> = batch.topics_written().into_iter().map(|t| &**t).collect();
        assert_eq!(written, ["a", "b"]);
    }

    #[test]
    fn a_topic_no_record_goes_to_is_not_written() {
        let mut builder = RecordBatchBuilder::new(b"{}".to_vec());
        let (_unused, used, p) =
            (builder.topic("skipped".into()), builder.topic("t".into()), builder.partition("{}".into()));
        let (offset, _) = builder.text(Part { start: 0, len: 2 }, "offset").unwrap();
        builder.push(used, p, offset, None, None, [], 0).unwrap();
        let batch = builder.finish();
        assert_eq!(batch.topics_written().into_iter().map(|t| &**t).collect::<Vec<_>>(), ["t"]);
    }

    #[test]
    fn a_part_outside_the_buffer_or_text_that_is_not_utf8_is_refused_and_nothing_added() {
        let mut builder = RecordBatchBuilder::new(b"{\"n\":1}\xffhello".to_vec());
        let (t, p) = (builder.topic("t".into()), builder.partition("{}".into()));
        let (offset, _) = builder.text(Part { start: 0, len: 7 }, "offset").unwrap();
        let error = builder.push(t, p, offset, None, Some(Part { start: 8, len: 6 }), [], 0).unwrap_err();
        assert_eq!(error, "value span 8..14 is past the end of the batch's 13 bytes of data");
        let error = builder.text(Part { start: 0, len: 8 }, "offset").unwrap_err();
        assert!(error.starts_with("offset is not UTF-8"), "{error}");
        let good = (Part { start: 8, len: 2 }, Part { start: 7, len: 1 });
        let bad = (Part { start: 7, len: 1 }, Part { start: 0, len: 1 });
        let error = builder.push(t, p, offset, None, None, [good, bad], 0).unwrap_err();
        assert!(error.starts_with("header key is not UTF-8"), "{error}");
        builder.push(t, p, offset, Some(Part { start: 8, len: 5 }), None, [good], 0).unwrap();
        let batch = builder.finish();
        assert_eq!(batch.len(), 1);
        let only = batch.get(0).unwrap();
        assert_eq!((only.offset, only.key), (r#"{"n":1}"#, Some(b"hello".as_slice())));
        assert_eq!(only.headers().collect::<Vec<_>>(), [("he", b"\xff".as_slice())]);
    }
}
