//! Records as JSON: one object per record, as the `stdout` destination writes them and
//! `sluice topics read --json` prints them.

use serde_json::Value;

use crate::storage::Record;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
