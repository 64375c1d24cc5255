//! What a plugin may hand the host: source partitions and offsets (JSON objects of
//! primitive values, as in Kafka Connect) and topic names. Everything a plugin returns
//! passes through here before it reaches a store.

use serde_json::{Map, Value};

/// A record after the host checked it: partition and offset in canonical JSON (keys
/// sorted), so that equal partitions are equal strings.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub topic: String,
    pub partition: String,
    pub offset: String,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub timestamp_ms: i64,
}

/// Parses `text` as a JSON object of primitive values and returns it in canonical form.
pub fn canonical_object(text: &str) -> Result<String, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let Value::Object(map) = value else {
        return Err(format!("not a JSON object: {}", shorten(text)));
    };
    if let Some((key, _)) = map.iter().find(|(_, v)| matches!(v, Value::Array(_) | Value::Object(_))) {
        return Err(format!("value of \"{key}\" is not a primitive (string, number, boolean or null)"));
    }
    // serde_json's Map is ordered by key, so this is the canonical form.
    Ok(Value::Object(Map::from_iter(map)).to_string())
}

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

/// Checks one record from `poll` and converts it.
pub fn check_record(record: crate::bindings::SourceRecord, now_ms: i64) -> Result<Polled, String> {
    let partition = canonical_object(&record.partition).map_err(|e| format!("partition is {e}"))?;
    let offset = canonical_object(&record.offset).map_err(|e| format!("offset is {e}"))?;
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

fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Bytes as JSON: a string when they are UTF-8, else `{"base16": "..."}`.
pub fn bytes_json(bytes: &[u8]) -> serde_json::Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::String(text.to_string()),
        Err(_) => serde_json::json!({ "base16": bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() }),
    }
}

/// A record as one JSON object (the `stdout` destination and `sluice topics read --json`).
pub fn record_json(record: &Record) -> serde_json::Value {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    serde_json::json!({
        "topic": record.topic,
        "partition": parse(&record.partition),
        "offset": parse(&record.offset),
        "key": record.key.as_deref().map(bytes_json),
        "value": record.value.as_deref().map(bytes_json),
        "headers": record.headers.iter().map(|(k, v)| serde_json::json!({"key": k, "value": bytes_json(v)})).collect::<Vec<_>>(),
        "timestamp": record.timestamp_ms,
    })
}

/// The last offset of each partition in a batch, in order of first appearance: what
/// delivering the batch lets us commit.
pub fn latest_offsets(polled: &[Polled]) -> Vec<(String, String)> {
    let mut latest: Vec<(String, String)> = Vec::new();
    for entry in polled {
        let (partition, offset) = entry.partition_and_offset();
        match latest.iter_mut().find(|(p, _)| p == partition) {
            Some(entry) => entry.1 = offset.to_string(),
            None => latest.push((partition.to_string(), offset.to_string())),
        }
    }
    latest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_canonical_and_primitive() {
        assert_eq!(canonical_object(r#"{"b":1, "a":"x"}"#).unwrap(), r#"{"a":"x","b":1}"#);
        assert!(canonical_object("[1]").unwrap_err().contains("not a JSON object"));
        assert!(canonical_object(r#"{"a":{"b":1}}"#).unwrap_err().contains("\"a\""));
        assert!(canonical_object("{").unwrap_err().starts_with("not JSON"));
        assert!(canonical_object(r#"{"n":null,"t":true,"f":1.5}"#).is_ok());
    }

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
