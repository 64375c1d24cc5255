//! Records as JSON: one object per record, as the `stdout` destination writes them and
//! `sluice topics read --json` prints them.

use serde_json::Value;

use crate::storage::{Record, RecordRef};

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
        "topic": &*record.topic,
        "partition": parse(&record.partition),
        "offset": parse(&record.offset),
        "key": record.key.as_deref().map(bytes_json),
        "value": record.value.as_deref().map(bytes_json),
        "headers": record.headers.iter().map(|(k, v)| serde_json::json!({"key": k.as_str(), "value": bytes_json(v)})).collect::<Vec<_>>(),
        "timestamp": record.timestamp_ms,
    })
}

/// Writes the same JSON as [`record_json`] without building a `Value` (the stdout
/// destination's path, once per record). Partition and offset are written as the text they
/// are: both were checked to be JSON objects before the record got here, and the topic to
/// be `[a-zA-Z0-9._-]`, which needs no escaping.
pub fn write_record_json(out: &mut impl std::io::Write, record: &RecordRef) -> std::io::Result<()> {
    fn bytes(out: &mut impl std::io::Write, bytes: Option<&[u8]>) -> std::io::Result<()> {
        match bytes {
            None => out.write_all(b"null"),
            Some(bytes) if plain_ascii(bytes) => {
                out.write_all(b"\"")?;
                out.write_all(bytes)?;
                out.write_all(b"\"")
            }
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => serde_json::to_writer(&mut *out, text).map_err(std::io::Error::other),
                Err(_) => serde_json::to_writer(&mut *out, &bytes_json(bytes)).map_err(std::io::Error::other),
            },
        }
    }
    out.write_all(b"{\"topic\":\"")?;
    out.write_all(record.topic.as_bytes())?;
    out.write_all(b"\",\"partition\":")?;
    out.write_all(record.partition.as_bytes())?;
    out.write_all(b",\"offset\":")?;
    out.write_all(record.offset.as_bytes())?;
    out.write_all(b",\"key\":")?;
    bytes(out, record.key)?;
    out.write_all(b",\"value\":")?;
    bytes(out, record.value)?;
    out.write_all(b",\"headers\":[")?;
    for (index, (key, value)) in record.headers().enumerate() {
        out.write_all(if index == 0 { b"{\"key\":" } else { b",{\"key\":" })?;
        bytes(out, Some(key.as_bytes()))?;
        out.write_all(b",\"value\":")?;
        bytes(out, Some(value))?;
        out.write_all(b"}")?;
    }
    out.write_all(b"],\"timestamp\":")?;
    // itoa rather than `write!`: core::fmt's machinery showed in a profile of a stdout run.
    out.write_all(itoa::Buffer::new().format(record.timestamp_ms).as_bytes())?;
    out.write_all(b"}\n")
}

/// Whether `bytes` are printable ASCII without `"` or `\\`: valid UTF-8 that serde_json
/// writes as they are (it escapes only those two and control characters), so they can be
/// copied between quotes. Folded without an early exit so that it compiles to vector
/// compares: most values (lines of text) pass, and this replaces a UTF-8 check and
/// serde_json's byte-by-byte escaping scan.
fn plain_ascii(bytes: &[u8]) -> bool {
    bytes.iter().fold(true, |plain, &b| plain & (0x20..0x7f).contains(&b) & (b != b'"') & (b != b'\\'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::RecordBatch;

    fn streamed(record: &Record) -> Vec<u8> {
        let batch = RecordBatch::from_records([record]);
        let mut out = Vec::new();
        write_record_json(&mut out, &batch.get(0).unwrap()).unwrap();
        out
    }

    #[test]
    fn streamed_record_json_equals_the_value_form() {
        let record = Record {
            topic: "t".into(),
            partition: r#"{"p":1}"#.into(),
            offset: r#"{"o":"x"}"#.into(),
            key: Some(vec![0xff, 0].into()),
            value: Some(b"line".to_vec().into()),
            headers: vec![("h".into(), b"v".to_vec().into())],
            timestamp_ms: 5,
        };
        let out = streamed(&record);
        let as_value: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(as_value, record_json(&record));
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"topic\":\"t\",\"partition\":{\"p\":1},\"offset\":{\"o\":\"x\"},\"key\":{\"base16\":\"ff00\"},\"value\":\"line\",\"headers\":[{\"key\":\"h\",\"value\":\"v\"}],\"timestamp\":5}\n"
        );
        // Whatever is not plain ASCII takes serde_json's path and reads back the same.
        for value in ["plain line", "", "tab\there", "quote \" and \\", "del \u{7f}", "é ü 漢", "ctl \u{1}"] {
            let record = Record { value: Some(value.as_bytes().to_vec().into()), ..record.clone() };
            let out = streamed(&record);
            assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), record_json(&record), "{value:?}");
            assert_eq!(
                plain_ascii(value.as_bytes()),
                value.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
            );
        }
        let bare = Record { key: None, value: None, headers: vec![], ..record };
        let out = streamed(&bare);
        assert_eq!(serde_json::from_slice::<Value>(&out).unwrap(), record_json(&bare));
    }
}
