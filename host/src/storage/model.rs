//! What the stores hold: records as the host checked them, and Kafka Connect's statuses.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A record on its own: one read back from the local log, a dead-letter copy, or a copy
/// of one of a [`super::RecordBatch`]'s records (which is how records travel from a poll
/// to a destination). Partition in canonical JSON (keys sorted, see [`super::json`]), so
/// that equal partitions are equal strings.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub topic: Arc<str>,
    pub partition: Arc<str>,
    pub offset: Text,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(Text, Bytes)>,
    pub timestamp_ms: i64,
}

/// UTF-8 text in shared bytes (a record's offset, a header's key): checked once when
/// made, then read as `&str` without copying.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Text(Bytes);

impl Text {
    /// The bytes as text, or why they are not UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Result<Text, std::str::Utf8Error> {
        std::str::from_utf8(&bytes)?;
        Ok(Text(bytes))
    }

    pub fn as_str(&self) -> &str {
        // SAFETY: every `Text` was checked to be UTF-8 when it was made (`from_utf8`, or
        // from a `str`), and `Bytes` never change.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
}

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Text {
    fn from(text: String) -> Text {
        Text(Bytes::from(text.into_bytes()))
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Text {
        Text(Bytes::copy_from_slice(text.as_bytes()))
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record as stored in the local destination.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRecord {
    /// Position in the topic, from 0.
    pub offset: u64,
    pub connector: String,
    pub record: Record,
}

/// Kafka Connect's states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    Unassigned,
    Running,
    Paused,
    Stopped,
    Failed,
    Restarting,
    /// Not one of Kafka Connect's states: a task that said it is done (a bounded source
    /// read to its end), or a connector all of whose tasks did.
    Finished,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::to_value(self).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        f.write_str(&text)
    }
}

/// What a connector should be doing, as the user asked (Kafka Connect's target states):
/// kept in the config store, so a restarted worker puts every connector back in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TargetState {
    Started,
    Paused,
    Stopped,
}

/// `{"state": ..., "worker_id": ..., "trace": ...}` as in Kafka Connect's REST API, and the
/// plugin version in use (KIP-891).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorState {
    pub state: State,
    pub worker_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub id: u32,
    pub state: State,
    pub worker_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Host-unique number of the sandbox instance running the task: it changes exactly
    /// when the task is (re)started, which is how restarts are observed.
    pub instance: u64,
    /// Fuel the task's instance has used, when the worker meters fuel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel_used: Option<u64>,
    /// Records the host refused and skipped under `errors.tolerance=all`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub records_refused: u64,
    /// The plugin version the task runs (KIP-891).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Largest linear memory of the task's instance, in bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub memory_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// KIP-558: a topic a connector wrote to, with the task that first did and when (ms since
/// the epoch), as Connect's `TopicStatus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveTopic {
    pub name: String,
    pub task: u32,
    pub discovered_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorStatus {
    pub name: String,
    pub connector: ConnectorState,
    pub tasks: Vec<TaskStatus>,
    #[serde(rename = "type")]
    pub kind: String,
}
