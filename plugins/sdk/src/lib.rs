//! Write a Sluice source connector in Rust: implement [`Connector`] and [`Task`], then
//! call [`export_connector!`]. Build with `cargo build --release --target wasm32-wasip2`
//! (crate type `cdylib`) and drop the `.wasm` into Sluice's plugin folder.
//!
//! The plugin targets `sluice:connector@0.3.0` (`wit/0.3.0/connector.wit`): the SDK packs
//! the records a task returns into 0.3.0's `poll-batch` (each distinct partition and topic
//! once, every record's bytes back to back in one buffer), and [`Task::is_done`] into its
//! `done` flag.
//!
//! A whole connector that counts, one partition per task:
//!
//! ```rust,ignore
//! use serde::{Deserialize, Serialize};
//! use sluice_connector::{Config, ConfigKey, Connector, Error, Record, Task, offsets};
//!
//! #[derive(Serialize)]
//! struct Partition { task: u32 }
//! #[derive(Serialize, Deserialize)]
//! struct Offset { n: u64 }
//!
//! struct Counting { config: Config, }
//!
//! impl Connector for Counting {
//!     fn version() -> String { "1.0.0".into() }
//!     fn config_def() -> Vec<ConfigKey> { vec![ConfigKey::required("topic", "Destination topic.")] }
//!     fn start(config: Config) -> Result<Self, Error> { Ok(Counting { config }) }
//!     fn task_configs(&mut self, max_tasks: u32) -> Result<Vec<Config>, Error> {
//!         Ok((0..max_tasks).map(|i| self.config.clone().with("task", i)).collect())
//!     }
//! }
//!
//! struct CountingTask { topic: String, task: u32, next: u64 }
//!
//! impl Task for CountingTask {
//!     fn start(config: Config) -> Result<Self, Error> {
//!         let task = config.parse("task", 0)?;
//!         // Resume after the committed offset, if any.
//!         let next = offsets::get::<_, Offset>(&Partition { task }).map_or(0, |o| o.n + 1);
//!         Ok(CountingTask { topic: config.topic("topic")?.to_string(), task, next })
//!     }
//!     fn poll(&mut self) -> Result<Vec<Record>, Error> {
//!         let record = Record::new(&self.topic, &Partition { task: self.task }, &Offset { n: self.next })
//!             .with_value(self.next.to_string());
//!         self.next += 1;
//!         Ok(vec![record])
//!     }
//! }
//!
//! sluice_connector::export_connector!(Counting, CountingTask);
//! ```

use std::collections::BTreeMap;
use std::fmt::Display;
use std::str::FromStr;

use serde::Serialize;
use serde::de::DeserializeOwned;

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/0.3.0",
        world: "source-connector",
        pub_export_macro: true,
        export_macro_name: "export_bindings",
        default_bindings_module: "sluice_connector::bindings",
    });
}

pub use bindings::sluice::connector::types::{
    ConfigKey, ConfigProblem, ConfigType, ConnectorError as Error, Importance,
};

/// One record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    pub value: Vec<u8>,
}

/// One record a task returns from `poll`.
#[derive(Debug, Clone)]
pub struct Record {
    /// The partition it was read from: a JSON object of primitive values.
    pub partition: String,
    /// How far the partition is read once this record is durable: a JSON object of
    /// primitive values.
    pub offset: String,
    /// `None` makes an offset-only record (nothing is delivered; see [`Record::offset_only`]).
    pub topic: Option<String>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<Header>,
    /// Milliseconds since the Unix epoch; `None` lets the host stamp it.
    pub timestamp: Option<i64>,
}

mod batch {
    use super::Record;
    use crate::bindings::sluice::connector::types::{BatchHeader, BatchRecord, PollBatch, Span};

    /// Past this many distinct partitions (or topics) a batch looks them up in a map
    /// rather than by scanning.
    const SCAN_LIMIT: usize = 16;

    /// Whether `a` and `b` hold the same bytes, compared eight at a time: `==` on bytes
    /// calls the guest's `memcmp` (wasi-libc's, one byte at a time), and this runs for the
    /// partition and topic of every record (a tenth of file-pulse's time per line).
    pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
        if a.len() != b.len() {
            return false;
        }
        let (mut a_words, mut b_words) = (a.chunks_exact(8), b.chunks_exact(8));
        let word = |bytes: &[u8]| u64::from_ne_bytes(bytes.try_into().expect("chunks of eight"));
        a_words.by_ref().zip(b_words.by_ref()).all(|(x, y)| word(x) == word(y))
            && a_words.remainder().iter().zip(b_words.remainder()).all(|(x, y)| x == y)
    }

    /// Each distinct text once, and its index.
    #[derive(Default)]
    struct Interner {
        list: Vec<String>,
        last: usize,
        map: std::collections::HashMap<String, u32>,
    }

    impl Interner {
        fn index(&mut self, text: &str) -> u32 {
            // Records of one batch mostly share a partition and a topic: the last one
            // first.
            if self.list.get(self.last).is_some_and(|last| same_bytes(last.as_bytes(), text.as_bytes())) {
                return self.last as u32;
            }
            let found = if self.list.len() <= SCAN_LIMIT {
                self.list.iter().position(|known| same_bytes(known.as_bytes(), text.as_bytes()))
            } else {
                if self.map.len() != self.list.len() {
                    self.map = self.list.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
                }
                self.map.get(text).map(|&i| i as usize)
            };
            let at = found.unwrap_or_else(|| {
                // A map, once built, stays complete.
                if !self.map.is_empty() {
                    self.map.insert(text.to_string(), self.list.len() as u32);
                }
                self.list.push(text.to_string());
                self.list.len() - 1
            });
            self.last = at;
            at as u32
        }
    }

    /// The records of one `poll`, written straight into the buffers the host receives
    /// (`sluice:connector@0.3.0`'s packed `poll-batch`): a record costs its bytes and a
    /// few numbers, with no allocation of its own. [`crate::Task::poll_into`] fills one;
    /// the records [`crate::Task::poll`] returns are copied into one.
    ///
    /// ```rust,ignore
    /// fn poll_into(&mut self, batch: &mut Batch) -> Result<(), Error> {
    ///     for line in self.lines() {
    ///         let offset = format!(r#"{{"line":{}}}"#, line.number);
    ///         batch.record(r#"{"file":"a.log"}"#, &offset, Some("lines")).value(line.text.as_bytes());
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub struct Batch {
        /// Tells this batch's [`Destination`]s from another's.
        id: u64,
        partitions: Interner,
        topics: Interner,
        data: Vec<u8>,
        headers: Vec<BatchHeader>,
        records: Vec<BatchRecord>,
        /// Where each record's bytes begin in `data`, so a truncated batch drops them.
        starts: Vec<u32>,
    }

    fn next_batch_id() -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    impl Default for Batch {
        fn default() -> Batch {
            Batch {
                id: next_batch_id(),
                partitions: Interner::default(),
                topics: Interner::default(),
                data: Vec::new(),
                headers: Vec::new(),
                records: Vec::new(),
                starts: Vec::new(),
            }
        }
    }

    impl Batch {
        /// A batch sized for about what the last one of this task held.
        pub(crate) fn with_capacity(records: usize, bytes: usize) -> Batch {
            Batch {
                data: Vec::with_capacity(bytes),
                records: Vec::with_capacity(records),
                starts: Vec::with_capacity(records),
                ..Batch::default()
            }
        }

        /// Records in the batch.
        pub fn len(&self) -> usize {
            self.records.len()
        }

        pub fn is_empty(&self) -> bool {
            self.records.is_empty()
        }

        /// Bytes written so far: every record's offset, key, value and headers.
        pub fn bytes(&self) -> usize {
            self.data.len()
        }

        fn span(&mut self, bytes: &[u8]) -> Span {
            self.written(|out| out.extend_from_slice(bytes))
        }

        /// The span of what `write` appends to the batch's bytes.
        fn written(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Span {
            let start = self.data.len();
            write(&mut self.data);
            let len = self.data.len().saturating_sub(start);
            Span { start: start as u32, len: len as u32 }
        }

        /// Adds a record of `partition` at `offset` (each the text of a JSON object of
        /// primitive values) for `topic`, or an offset-only record (KIP-910: commits the
        /// offset, delivers nothing) with `None`. Its key, value, headers and timestamp
        /// are set on what this returns.
        pub fn record(&mut self, partition: &str, offset: &str, topic: Option<&str>) -> RecordWriter<'_> {
            let to = self.destination(partition, topic);
            self.record_to(to, offset)
        }

        /// The partition and topic of many records, looked up in the batch once: a task
        /// that writes a run of records of one partition passes this to
        /// [`Batch::record_to`] instead of the same two texts to [`Batch::record`] for
        /// each (a tenth of a small record's time in the counter's component).
        pub fn destination(&mut self, partition: &str, topic: Option<&str>) -> Destination {
            Destination {
                batch: self.id,
                partition: self.partitions.index(partition),
                topic: topic.map(|topic| self.topics.index(topic)),
            }
        }

        /// [`Batch::record`] for a partition and topic looked up with
        /// [`Batch::destination`] on this batch.
        pub fn record_to(&mut self, to: Destination, offset: &str) -> RecordWriter<'_> {
            self.record_to_with(to, |out| out.extend_from_slice(offset.as_bytes()))
        }

        /// [`Batch::record_to`] with the offset written in place: `write` appends the
        /// offset's text (UTF-8 JSON, as the host checks) to the buffer it is given (and
        /// must not touch what is already there), as [`RecordWriter::value_with`] does the
        /// value, instead of a copy of a string made first.
        pub fn record_to_with(&mut self, to: Destination, write: impl FnOnce(&mut Vec<u8>)) -> RecordWriter<'_> {
            // Indexes into another batch's partitions would name the wrong partition here.
            assert_eq!(to.batch, self.id, "a Destination is used only with the Batch that made it");
            let offset = self.written(write);
            self.starts.push(offset.start);
            self.records.push(BatchRecord {
                partition: to.partition,
                offset,
                topic: to.topic,
                key: None,
                value: None,
                headers: Span { start: self.headers.len() as u32, len: 0 },
                timestamp: None,
            });
            RecordWriter { batch: self }
        }

        /// Adds a record made with [`Record`].
        pub fn push(&mut self, record: Record) {
            let mut writer = self.record(&record.partition, &record.offset, record.topic.as_deref());
            if let Some(key) = &record.key {
                writer = writer.key(key);
            }
            if let Some(value) = &record.value {
                writer = writer.value(value);
            }
            for header in &record.headers {
                writer = writer.header(&header.key, &header.value);
            }
            if let Some(timestamp) = record.timestamp {
                writer.timestamp(timestamp);
            }
        }

        /// Replaces the offset of record `index` (what a later look at the source found,
        /// say). Panics if there is no such record.
        pub fn set_offset(&mut self, index: usize, offset: &str) {
            let span = self.span(offset.as_bytes());
            self.records[index].offset = span;
        }

        /// Drops the records from `len` on, with their bytes.
        pub fn truncate(&mut self, len: usize) {
            if let (Some(&start), Some(record)) = (self.starts.get(len), self.records.get(len)) {
                self.data.truncate(start as usize);
                self.headers.truncate(record.headers.start as usize);
                self.records.truncate(len);
                self.starts.truncate(len);
            }
        }

        /// What `poll` returns to the host.
        pub(crate) fn finish(self, done: bool) -> PollBatch {
            let Batch { id: _, partitions, topics, data, headers, records, starts: _ } = self;
            PollBatch { partitions: partitions.list, topics: topics.list, data, headers, records, done }
        }
    }

    /// A partition and topic (or none: offset-only records) of one [`Batch`], from
    /// [`Batch::destination`].
    #[derive(Debug, Clone, Copy)]
    pub struct Destination {
        batch: u64,
        partition: u32,
        topic: Option<u32>,
    }

    /// The record a [`Batch::record`] call added, to set its key, value, headers and
    /// timestamp (each written into the batch as it is given).
    pub struct RecordWriter<'a> {
        batch: &'a mut Batch,
    }

    impl RecordWriter<'_> {
        // Inlined: a call per field set was a twentieth of the counter's time per record.
        #[inline]
        fn last(&mut self) -> &mut BatchRecord {
            self.batch.records.last_mut().expect("a writer exists for a record just added")
        }

        pub fn key(mut self, key: &[u8]) -> Self {
            let span = self.batch.span(key);
            self.last().key = Some(span);
            self
        }

        pub fn value(mut self, value: &[u8]) -> Self {
            let span = self.batch.span(value);
            self.last().value = Some(span);
            self
        }

        /// Writes the value in place: `write` appends the value's bytes to the buffer it
        /// is given (and must not touch what is already there).
        pub fn value_with(mut self, write: impl FnOnce(&mut Vec<u8>)) -> Self {
            let span = self.batch.written(write);
            self.last().value = Some(span);
            self
        }

        pub fn header(mut self, key: &str, value: &[u8]) -> Self {
            let header = BatchHeader { key: self.batch.span(key.as_bytes()), value: self.batch.span(value) };
            self.batch.headers.push(header);
            self.last().headers.len += 1;
            self
        }

        /// Milliseconds since the Unix epoch; without one the host stamps the record.
        pub fn timestamp(mut self, millis_since_epoch: i64) -> Self {
            self.last().timestamp = Some(millis_since_epoch);
            self
        }
    }

    #[cfg(test)]
    mod tests {
        use super::same_bytes;

        #[test]
        fn same_bytes_is_equality_at_every_length_and_position() {
            for len in 0..40 {
                let text: Vec<u8> = (0..len as u8).map(|i| b'a' + i % 26).collect();
                assert!(same_bytes(&text, &text.clone()), "{len}");
                for at in 0..len {
                    let mut other = text.clone();
                    other[at] ^= 1;
                    assert!(!same_bytes(&text, &other), "{len} differing at {at}");
                }
                assert!(!same_bytes(&text, &text[..len.saturating_sub(1)]) || len == 0);
            }
        }
    }
}

pub use batch::{Batch, Destination, RecordWriter};

#[doc(hidden)]
pub mod export {
    use super::{Batch, Error, Task};
    use crate::bindings::sluice::connector::types::PollBatch;

    thread_local! {
        /// The size of the last batch, so the next one starts with room for as much.
        static LAST_BATCH: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
    }

    /// One `poll`: the task's records written into a batch.
    pub fn poll<T: Task>(task: &mut T) -> Result<PollBatch, Error> {
        let (records, bytes) = LAST_BATCH.get();
        let mut batch = Batch::with_capacity(records, bytes);
        task.poll_into(&mut batch)?;
        LAST_BATCH.set((batch.len(), batch.bytes()));
        Ok(batch.finish(task.is_done()))
    }
}

/// A connector or task config: string keys and values, as in Kafka Connect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config(pub BTreeMap<String, String>);

/// What is wrong with `name` as a Kafka topic, by Kafka's rule (1 to 249 of
/// `[a-zA-Z0-9._-]`, not `.` or `..`), or `None` when it is one. The host refuses a
/// record whose topic breaks it; a plugin checks its configured topic up front with this.
pub fn topic_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > 249 {
        return Some(format!("'{name}' is not a topic name: it must have 1 to 249 characters"));
    }
    if name == "." || name == ".." {
        return Some(format!("'{name}' is not a topic name"));
    }
    let bad = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))?;
    Some(format!("'{name}' is not a topic name: it has {bad:?} (allowed: letters, digits, '.', '_', '-')"))
}

impl Config {
    #[doc(hidden)]
    pub fn from_pairs(pairs: Vec<(String, String)>) -> Config {
        Config(pairs.into_iter().collect())
    }

    #[doc(hidden)]
    pub fn into_pairs(self) -> Vec<(String, String)> {
        self.0.into_iter().collect()
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// The value of a key that must be set; the error names the key.
    pub fn required(&self, key: &str) -> Result<&str, Error> {
        self.get(key).filter(|v| !v.is_empty()).ok_or_else(|| Error::InvalidConfig(format!("{key}: required")))
    }

    /// A required key naming a Kafka topic, checked by Kafka's rule ([`topic_problem`]) so
    /// a bad name is refused when the connector is created, not at its first record.
    pub fn topic(&self, key: &str) -> Result<&str, Error> {
        let name = self.required(key)?;
        match topic_problem(name) {
            None => Ok(name),
            Some(problem) => Err(Error::InvalidConfig(format!("{key}: {problem}"))),
        }
    }

    /// The key parsed as `T`, or `default` when it is not set; the error names the key.
    pub fn parse<T: FromStr>(&self, key: &str, default: T) -> Result<T, Error>
    where
        T::Err: Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(text) => text.trim().parse().map_err(|e| {
                Error::InvalidConfig(format!("{key}: '{text}' is not {} ({e})", value_kind(std::any::type_name::<T>())))
            }),
        }
    }

    /// This config with `key` set (for building task configs).
    pub fn with(mut self, key: &str, value: impl ToString) -> Config {
        self.0.insert(key.to_string(), value.to_string());
        self
    }
}

/// What a config value parsed as the type named `type_name` must be, in words.
fn value_kind(type_name: &str) -> &str {
    match type_name {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number of 0 or more",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "bool" => "a boolean (true or false)",
        other => other,
    }
}

impl ConfigKey {
    /// A required string key.
    pub fn required(name: &str, documentation: &str) -> ConfigKey {
        ConfigKey {
            name: name.into(),
            type_: ConfigType::String,
            default_value: None,
            importance: Importance::High,
            documentation: documentation.into(),
        }
    }

    /// An optional key with a default.
    pub fn optional(name: &str, type_: ConfigType, default: &str, documentation: &str) -> ConfigKey {
        ConfigKey {
            name: name.into(),
            type_,
            default_value: Some(default.into()),
            importance: Importance::Medium,
            documentation: documentation.into(),
        }
    }
}

fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("partitions and offsets serialize to JSON")
}

impl Record {
    /// A record for `topic` at `offset` of `partition` (each serialized as a JSON object
    /// of primitive values).
    pub fn new(topic: &str, partition: &impl Serialize, offset: &impl Serialize) -> Record {
        Record {
            partition: json(partition),
            offset: json(offset),
            topic: Some(topic.to_string()),
            key: None,
            value: None,
            headers: Vec::new(),
            timestamp: None,
        }
    }

    /// Only commits `offset` for `partition`, delivering nothing (KIP-910).
    pub fn offset_only(partition: &impl Serialize, offset: &impl Serialize) -> Record {
        Record { topic: None, ..Record::new("", partition, offset) }
    }

    pub fn with_value(mut self, value: impl Into<Vec<u8>>) -> Record {
        self.value = Some(value.into());
        self
    }

    pub fn with_key(mut self, key: impl Into<Vec<u8>>) -> Record {
        self.key = Some(key.into());
        self
    }

    pub fn with_header(mut self, key: &str, value: impl Into<Vec<u8>>) -> Record {
        self.headers.push(Header { key: key.into(), value: value.into() });
        self
    }

    pub fn with_timestamp(mut self, millis_since_epoch: i64) -> Record {
        self.timestamp = Some(millis_since_epoch);
        self
    }
}

/// Committed offsets (what a restart resumes from), typed with serde.
pub mod offsets {
    use super::*;
    use crate::bindings::sluice::connector::offset_storage_reader;

    /// The committed offset of one partition. One this plugin cannot read (written by
    /// hand through `PATCH /connectors/{name}/offsets`, say) is `None`, with a warning
    /// naming the partition and why: it would otherwise be read from the start unseen.
    pub fn get<P: Serialize, O: DeserializeOwned>(partition: &P) -> Option<O> {
        let asked = json(partition);
        let text = offset_storage_reader::offset(&asked)?;
        typed(&asked, &text)
    }

    thread_local! {
        /// Partitions whose unreadable offset was warned about (once each, however often
        /// it is read; at most [`WARNED_MAX`] remembered).
        static WARNED: std::cell::RefCell<std::collections::HashSet<String>> = Default::default();
    }
    const WARNED_MAX: usize = 1024;

    fn typed<O: DeserializeOwned>(partition: &str, text: &str) -> Option<O> {
        match serde_json::from_str(text) {
            Ok(offset) => Some(offset),
            Err(e) => {
                let first = WARNED.with_borrow_mut(|warned| {
                    if warned.len() >= WARNED_MAX {
                        warned.clear();
                    }
                    warned.insert(partition.to_string())
                });
                if first {
                    let shown: String = text.chars().take(200).collect();
                    let cut = if shown.len() < text.len() { "…" } else { "" };
                    crate::log::warn(&format!(
                        "the committed offset {shown}{cut} of partition {partition} is not one this plugin reads ({e}): taken as no offset"
                    ));
                }
                None
            }
        }
    }

    /// The committed offsets of many partitions in one call, in the order asked.
    pub fn get_many<P: Serialize, O: DeserializeOwned>(partitions: &[P]) -> Vec<Option<O>> {
        let asked: Vec<String> = partitions.iter().map(json).collect();
        offset_storage_reader::offsets(&asked)
            .into_iter()
            .zip(&asked)
            .map(|((_, offset), partition)| offset.and_then(|text| typed(partition, &text)))
            .collect()
    }
}

/// Files the connector config grants (`sandbox.fs.read`, `sandbox.fs.write`): the sandbox
/// sees nothing else, so a file outside every grant looks missing.
pub mod fs {
    use super::Error;

    fn describe(path: &str, error: &std::io::Error) -> Error {
        let hint = match error.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => {
                "; if it exists, add its directory to sandbox.fs.read (the sandbox sees only granted directories)"
            }
            _ => "",
        };
        Error::Fatal(format!("cannot read {path}: {error}{hint}"))
    }

    /// The whole file at `path`; the error names the path and the grant it may need.
    pub fn read(path: &str) -> Result<Vec<u8>, Error> {
        std::fs::read(path).map_err(|e| describe(path, &e))
    }

    /// The whole file at `path` as UTF-8 text; the error names the path and the grant it
    /// may need.
    pub fn read_to_string(path: &str) -> Result<String, Error> {
        std::fs::read_to_string(path).map_err(|e| describe(path, &e))
    }
}

/// Ask the host to call `task_configs` again (only changed tasks are restarted).
pub fn request_task_reconfiguration() {
    bindings::sluice::connector::connector_context::request_task_reconfiguration();
}

/// Fail the caller (connector or task) with `message` once the current call returns.
pub fn raise_error(message: &str) {
    bindings::sluice::connector::connector_context::raise_error(message);
}

/// Leveled logging into the host's log, tagged with tenant, connector and task.
pub mod log {
    use crate::bindings::sluice::connector::log::{Level, log};

    pub fn debug(message: &str) {
        log(Level::Debug, message);
    }
    pub fn info(message: &str) {
        log(Level::Info, message);
    }
    pub fn warn(message: &str) {
        log(Level::Warn, message);
    }
    pub fn error(message: &str) {
        log(Level::Error, message);
    }
}

/// The connector instance: decides the tasks and watches them.
pub trait Connector: Sized + 'static {
    fn version() -> String;
    fn config_def() -> Vec<ConfigKey>;
    /// Checks beyond `config_def` (formats, paths); empty means valid.
    fn validate(_config: &Config) -> Vec<ConfigProblem> {
        Vec::new()
    }
    fn start(config: Config) -> Result<Self, Error>;
    /// At most `max_tasks` configs, one per task.
    fn task_configs(&mut self, max_tasks: u32) -> Result<Vec<Config>, Error>;
    /// Called every `monitor.interval.ms`: read offsets, list the source, reconfigure.
    fn tick(&mut self) -> Result<(), Error> {
        Ok(())
    }
    fn stop(&mut self) {}
}

/// A task instance: produces records.
pub trait Task: Sized + 'static {
    fn start(config: Config) -> Result<Self, Error>;
    /// The next records; empty means "nothing now": the host polls again after 1 ms,
    /// doubling to `poll.idle.max.ms` (1 s) while polls stay empty. Implement this or
    /// [`Task::poll_into`].
    fn poll(&mut self) -> Result<Vec<Record>, Error> {
        Ok(Vec::new())
    }
    /// The next records, written into `batch` ([`Batch::record`]): the same as
    /// [`Task::poll`] without an allocation per record, for sources whose records are
    /// small and many. By default, `poll`'s records.
    fn poll_into(&mut self, batch: &mut Batch) -> Result<(), Error> {
        for record in self.poll()? {
            batch.push(record);
        }
        Ok(())
    }
    /// Asked after every `poll`: `true` says this task has produced everything it ever
    /// will (a bounded source read to its end). The host delivers and commits what was
    /// returned, calls `commit` and `stop`, and reports the task FINISHED; a connector is
    /// FINISHED when all its tasks are, and `sluice run --until-done` then exits.
    fn is_done(&self) -> bool {
        false
    }
    /// Called after the offsets of the records returned so far are durable.
    fn commit(&mut self) -> Result<(), Error> {
        Ok(())
    }
    fn stop(&mut self) {}
}

#[doc(hidden)]
pub fn not_started() -> Error {
    Error::Fatal("called before start".into())
}

/// Exports a [`Connector`] and its [`Task`] as the component's `source-connector` world.
#[macro_export]
macro_rules! export_connector {
    ($connector:ty, $task:ty) => {
        #[doc(hidden)]
        pub struct __SluiceComponent;

        ::std::thread_local! {
            static __SLUICE_CONNECTOR: ::std::cell::RefCell<::std::option::Option<$connector>> =
                const { ::std::cell::RefCell::new(::std::option::Option::None) };
            static __SLUICE_TASK: ::std::cell::RefCell<::std::option::Option<$task>> =
                const { ::std::cell::RefCell::new(::std::option::Option::None) };
        }

        impl $crate::bindings::exports::sluice::connector::connector::Guest for __SluiceComponent {
            fn version() -> ::std::string::String {
                <$connector as $crate::Connector>::version()
            }
            fn config_def() -> ::std::vec::Vec<$crate::ConfigKey> {
                <$connector as $crate::Connector>::config_def()
            }
            fn validate(config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>) -> ::std::vec::Vec<$crate::ConfigProblem> {
                <$connector as $crate::Connector>::validate(&$crate::Config::from_pairs(config))
            }
            fn start(config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>) -> ::std::result::Result<(), $crate::Error> {
                let connector = <$connector as $crate::Connector>::start($crate::Config::from_pairs(config))?;
                __SLUICE_CONNECTOR.with_borrow_mut(|slot| *slot = ::std::option::Option::Some(connector));
                ::std::result::Result::Ok(())
            }
            fn task_configs(
                max_tasks: u32,
            ) -> ::std::result::Result<::std::vec::Vec<::std::vec::Vec<(::std::string::String, ::std::string::String)>>, $crate::Error> {
                __SLUICE_CONNECTOR.with_borrow_mut(|slot| {
                    let connector = slot.as_mut().ok_or_else($crate::not_started)?;
                    let configs = <$connector as $crate::Connector>::task_configs(connector, max_tasks)?;
                    ::std::result::Result::Ok(configs.into_iter().map($crate::Config::into_pairs).collect())
                })
            }
            fn tick() -> ::std::result::Result<(), $crate::Error> {
                __SLUICE_CONNECTOR.with_borrow_mut(|slot| {
                    <$connector as $crate::Connector>::tick(slot.as_mut().ok_or_else($crate::not_started)?)
                })
            }
            fn stop() {
                if let ::std::option::Option::Some(mut connector) = __SLUICE_CONNECTOR.with_borrow_mut(|slot| slot.take()) {
                    <$connector as $crate::Connector>::stop(&mut connector);
                }
            }
        }

        impl $crate::bindings::exports::sluice::connector::task::Guest for __SluiceComponent {
            fn start(config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>) -> ::std::result::Result<(), $crate::Error> {
                let task = <$task as $crate::Task>::start($crate::Config::from_pairs(config))?;
                __SLUICE_TASK.with_borrow_mut(|slot| *slot = ::std::option::Option::Some(task));
                ::std::result::Result::Ok(())
            }
            fn poll() -> ::std::result::Result<$crate::bindings::sluice::connector::types::PollBatch, $crate::Error> {
                __SLUICE_TASK.with_borrow_mut(|slot| $crate::export::poll::<$task>(slot.as_mut().ok_or_else($crate::not_started)?))
            }
            fn commit() -> ::std::result::Result<(), $crate::Error> {
                __SLUICE_TASK.with_borrow_mut(|slot| <$task as $crate::Task>::commit(slot.as_mut().ok_or_else($crate::not_started)?))
            }
            fn stop() {
                if let ::std::option::Option::Some(mut task) = __SLUICE_TASK.with_borrow_mut(|slot| slot.take()) {
                    <$task as $crate::Task>::stop(&mut task);
                }
            }
        }

        $crate::bindings::export_bindings!(__SluiceComponent with_types_in $crate::bindings);
    };
}
