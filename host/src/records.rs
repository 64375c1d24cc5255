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

/// Checks that `text` is a JSON object of primitive values without building it (the
/// per-record check; [`canonical_object`] is kept for what is stored and compared).
pub fn check_object(text: &str) -> Result<(), String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

    /// Accepts a primitive; consumes and reports a nested array or object.
    struct Primitive(bool);
    impl<'de> serde::Deserialize<'de> for Primitive {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct PrimitiveVisitor;
            impl<'de> Visitor<'de> for PrimitiveVisitor {
                type Value = Primitive;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON value")
                }
                fn visit_bool<E>(self, _: bool) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_i64<E>(self, _: i64) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_u64<E>(self, _: u64) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_f64<E>(self, _: f64) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_str<E>(self, _: &str) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_unit<E>(self) -> Result<Primitive, E> {
                    Ok(Primitive(true))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Primitive, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(Primitive(false))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Primitive, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Primitive(false))
                }
            }
            deserializer.deserialize_any(PrimitiveVisitor)
        }
    }

    struct ObjectVisitor;
    impl<'de> Visitor<'de> for ObjectVisitor {
        type Value = Result<(), String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut nested = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if !map.next_value::<Primitive>()?.0 && nested.is_none() {
                    nested = Some(key.into_owned());
                }
            }
            Ok(match nested {
                Some(key) => Err(format!("value of \"{key}\" is not a primitive (string, number, boolean or null)")),
                None => Ok(()),
            })
        }
    }

    let mut deserializer = serde_json::Deserializer::from_str(text);
    match deserializer.deserialize_map(ObjectVisitor).and_then(|checked| deserializer.end().map(|_| checked)) {
        Ok(checked) => checked,
        Err(e) if e.is_data() => Err(format!("not a JSON object: {}", shorten(text))),
        Err(e) => Err(format!("not JSON ({e})")),
    }
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

/// Checks one record from `poll` and converts it. Partitions are canonicalized (through
/// `partitions`, which remembers the batch's distinct ones); offsets are only checked
/// here, and canonicalized when committed ([`latest_offsets`]).
pub fn check_record(
    record: crate::bindings::SourceRecord,
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

/// Writes the same JSON as [`record_json`] without building a `Value`: partition and
/// offset are embedded as the JSON text they already are (the stdout destination's path).
pub fn write_record_json(out: &mut impl std::io::Write, record: &Record) -> std::io::Result<()> {
    use serde_json::value::RawValue;
    #[derive(serde::Serialize)]
    struct Header<'a> {
        key: &'a str,
        value: BytesJson<'a>,
    }
    struct BytesJson<'a>(&'a [u8]);
    impl serde::Serialize for BytesJson<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            match std::str::from_utf8(self.0) {
                Ok(text) => serializer.serialize_str(text),
                Err(_) => serde::Serialize::serialize(&bytes_json(self.0), serializer),
            }
        }
    }
    #[derive(serde::Serialize)]
    struct Line<'a> {
        topic: &'a str,
        partition: &'a RawValue,
        offset: &'a RawValue,
        key: Option<BytesJson<'a>>,
        value: Option<BytesJson<'a>>,
        headers: Vec<Header<'a>>,
        timestamp: i64,
    }
    fn raw(text: &str) -> std::io::Result<&RawValue> {
        serde_json::from_str(text).map_err(std::io::Error::other)
    }
    let line = Line {
        topic: &record.topic,
        partition: raw(&record.partition)?,
        offset: raw(&record.offset)?,
        key: record.key.as_deref().map(BytesJson),
        value: record.value.as_deref().map(BytesJson),
        headers: record.headers.iter().map(|(k, v)| Header { key: k, value: BytesJson(v) }).collect(),
        timestamp: record.timestamp_ms,
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
}

/// The last offset of each partition in a batch, in order of first appearance: what
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
    fn check_object_agrees_with_canonical_object() {
        for text in [
            r#"{"a":1,"b":"x","c":null,"d":true,"e":-1.5}"#,
            "[1]",
            "{",
            r#"{"a":{"b":1}}"#,
            r#"{"a":[1]}"#,
            "1",
            r#"{"a":1} x"#,
        ] {
            assert_eq!(check_object(text).is_ok(), canonical_object(text).is_ok(), "{text}");
        }
        assert!(check_object(r#"{"a":[1,2]}"#).unwrap_err().contains("\"a\""));
    }

    #[test]
    fn streamed_record_json_equals_the_value_form() {
        let record = Record {
            topic: "t".into(),
            partition: r#"{"p":1}"#.into(),
            offset: r#"{"o":"x"}"#.into(),
            key: Some(vec![0xff, 0]),
            value: Some(b"line".to_vec()),
            headers: vec![("h".into(), b"v".to_vec())],
            timestamp_ms: 5,
        };
        let mut out = Vec::new();
        write_record_json(&mut out, &record).unwrap();
        let streamed: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(streamed, record_json(&record));
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
