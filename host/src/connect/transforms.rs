//! A connector's transforms ([`crate::config::transforms`]) applied to one record as the
//! checks add it to the batch being built: the topic it goes to, the headers it carries,
//! its key and value reshaped as JSON objects, or that it is dropped. A dropped record still
//! commits its offset, as an offset-only record does, so a restart does not read it again;
//! a topic a transform makes is checked as a plugin's would be. A field transform's key or
//! value is parsed once however many transforms reshape it, and written back once, after
//! the last: its fields in their order, each field's value as the plugin wrote it (a
//! number as long as any is not rounded through a float, text not re-escaped).

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::config::Transforms;
use crate::config::transforms::{FieldChange, Predicate, RecordPart, Transform, format_date};
use crate::storage::{Part, RecordBatchBuilder};

/// A record as the transforms leave it: what they changed, as parts of the batch's buffer.
pub(super) struct Transformed<'c> {
    /// The topic a router made, when one did, and the alias of the last that did.
    pub topic: Option<(String, &'c str)>,
    pub headers: Vec<(Part, Part)>,
    pub key: Option<Part>,
    pub value: Option<Part>,
}

/// A record going through the chain.
pub(super) struct Record {
    pub topic: std::sync::Arc<str>,
    pub key: Option<Part>,
    pub value: Option<Part>,
    pub headers: Vec<(Part, Part)>,
    pub timestamp_ms: i64,
}

/// A key or value as the field transforms see it: as it is in the buffer until one of
/// them parses it.
enum Side {
    Bytes(Option<Part>),
    /// Parsed (`None`: no bytes, a tombstone's value), to be written back.
    Json(Option<Json>),
}

/// A JSON value whose fields, when it is an object, can be changed one by one, the rest
/// kept as they were written.
enum Json {
    Object(Vec<(String, Box<RawValue>)>),
    Other(Box<RawValue>),
}

impl Json {
    fn parse(bytes: &[u8]) -> Result<Json, serde_json::Error> {
        let raw: Box<RawValue> = serde_json::from_slice(bytes)?;
        if !raw.get().starts_with('{') {
            return Ok(Json::Other(raw));
        }
        Ok(Json::Object(serde_json::Deserializer::from_str(raw.get()).deserialize_map(FieldsInOrder)?))
    }

    fn write(&self) -> Box<RawValue> {
        match self {
            Json::Other(raw) => raw.clone(),
            Json::Object(fields) => {
                let mut text = String::from("{");
                for (index, (name, value)) in fields.iter().enumerate() {
                    if index > 0 {
                        text.push(',');
                    }
                    text.push_str(&quoted(name));
                    text.push(':');
                    text.push_str(value.get());
                }
                text.push('}');
                RawValue::from_string(text).expect("fields of valid JSON make valid JSON")
            }
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Json::Object(_) => "it is an object",
            Json::Other(raw) => kind_of(raw),
        }
    }
}

/// Reads an object's fields in the order they are written, each value as its text.
struct FieldsInOrder;

impl<'de> Visitor<'de> for FieldsInOrder {
    type Value = Vec<(String, Box<RawValue>)>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(field) = map.next_entry::<String, Box<RawValue>>()? {
            fields.push(field);
        }
        Ok(fields)
    }
}

fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string is written")
}

fn raw(text: String) -> Box<RawValue> {
    RawValue::from_string(text).expect("written as JSON")
}

fn kind_of(raw: &RawValue) -> &'static str {
    match raw.get().as_bytes().first() {
        Some(b'{') => "it is an object",
        Some(b'[') => "it is an array",
        Some(b'"') => "it is a string",
        Some(b't' | b'f') => "it is a boolean",
        Some(b'n') => "it is null",
        _ => "it is a number",
    }
}

impl Side {
    fn json(&mut self, builder: &RecordBatchBuilder, what: &str) -> Result<&mut Option<Json>, String> {
        if let Side::Bytes(part) = *self {
            let parsed = match part {
                None => None,
                Some(part) => {
                    Some(Json::parse(builder.bytes(part, what)?).map_err(|e| format!("the {what} is not JSON ({e})"))?)
                }
            };
            *self = Side::Json(parsed);
        }
        match self {
            Side::Json(value) => Ok(value),
            Side::Bytes(_) => unreachable!("parsed above"),
        }
    }

    fn finish(self, builder: &mut RecordBatchBuilder) -> Option<Part> {
        match self {
            Side::Bytes(part) => part,
            Side::Json(value) => value.map(|value| builder.append(value.write().get().as_bytes())),
        }
    }
}

/// Runs the chain over one record; `None` when a transform drops it.
pub(super) fn apply<'c>(
    chain: &'c Transforms,
    record: Record,
    builder: &mut RecordBatchBuilder,
) -> Result<Option<Transformed<'c>>, String> {
    let Record { topic, key, value, mut headers, timestamp_ms } = record;
    let (mut key, mut value) = (Side::Bytes(key), Side::Bytes(value));
    let mut routed: Option<(String, &str)> = None;
    for step in chain.steps() {
        let current = routed.as_ref().map_or(&*topic, |(topic, _)| topic.as_str());
        if let Some((predicate, negate)) = &step.predicate {
            let holds = match predicate {
                Predicate::TopicNameMatches(regex) => regex.is_match(current),
                Predicate::HasHeaderKey(name) => has_header(builder, &headers, name)?,
                Predicate::RecordIsTombstone => match &mut value {
                    Side::Bytes(part) => part.is_none(),
                    Side::Json(value) => value.is_none(),
                },
            };
            if holds == *negate {
                continue;
            }
        }
        let failed = |reason: String| format!("transform '{}' ({}): {reason}", step.alias, step.transform.class());
        match &step.transform {
            Transform::RegexRouter { regex, replacement } => {
                if regex.is_match(current) {
                    routed = Some((regex.replace(current, replacement.as_str()).into_owned(), &step.alias));
                }
            }
            Transform::TimestampRouter { topic_format, format } => {
                let timestamp = format_date(format, timestamp_ms);
                let made = topic_format.replace("${topic}", current).replace("${timestamp}", &timestamp);
                routed = Some((made, &step.alias));
            }
            Transform::InsertHeader { header, value } => {
                let key = builder.append(header.as_bytes());
                let value = builder.append(value.as_bytes());
                headers.push((key, value));
            }
            Transform::DropHeaders { headers: dropped } => {
                let mut kept = Vec::with_capacity(headers.len());
                for (key, value) in headers {
                    let (_, name) = builder.text(key, "header key")?;
                    if !dropped.iter().any(|d| d == name) {
                        kept.push((key, value));
                    }
                }
                headers = kept;
            }
            Transform::Filter => return Ok(None),
            Transform::Field { part, change } => {
                let (side, what) = match part {
                    RecordPart::Key => (&mut key, "key"),
                    RecordPart::Value => (&mut value, "value"),
                };
                let json = side.json(builder, what).map_err(failed)?;
                reshape(json, change, what, current, timestamp_ms).map_err(failed)?;
            }
            Transform::ValueToKey { fields } => {
                let object = match value.json(builder, "value").map_err(failed)? {
                    Some(Json::Object(object)) => object,
                    other => return Err(failed(not_an_object("value", other.as_ref()))),
                };
                let made = fields.iter().map(|f| (f.clone(), field(object, f).unwrap_or_else(null))).collect();
                key = Side::Json(Some(Json::Object(made)));
            }
        }
    }
    Ok(Some(Transformed { topic: routed, headers, key: key.finish(builder), value: value.finish(builder) }))
}

/// One field transform on a key or value, as Connect's does on a schemaless map: a
/// tombstone passes through `InsertField`, `ReplaceField` and `MaskField` unchanged.
fn reshape(
    json: &mut Option<Json>,
    change: &FieldChange,
    what: &str,
    topic: &str,
    timestamp_ms: i64,
) -> Result<(), String> {
    match change {
        FieldChange::Extract { field: name } => {
            *json = match json.take() {
                None => None,
                Some(Json::Object(object)) => field(&object, name).filter(|v| v.get() != "null").map(Json::Other),
                Some(other) => return Err(not_an_object(what, Some(&other))),
            };
            return Ok(());
        }
        FieldChange::Hoist { field } => {
            let inner = json.take().map_or_else(null, |inner| inner.write());
            *json = Some(Json::Object(vec![(field.clone(), inner)]));
            return Ok(());
        }
        _ => {}
    }
    let object = match json {
        None => return Ok(()),
        Some(Json::Object(object)) => object,
        Some(other) => return Err(not_an_object(what, Some(other))),
    };
    match change {
        FieldChange::Insert { topic: topic_field, timestamp, fixed } => {
            if let Some(name) = topic_field {
                set(object, name, raw(quoted(topic)));
            }
            if let Some(name) = timestamp {
                set(object, name, raw(timestamp_ms.to_string()));
            }
            if let Some((name, text)) = fixed {
                set(object, name, raw(quoted(text)));
            }
        }
        FieldChange::Replace { exclude, include, renames } => {
            object.retain(|(name, _)| !exclude.contains(name) && (include.is_empty() || include.contains(name)));
            for (name, _) in object.iter_mut() {
                if let Some((_, to)) = renames.iter().find(|(from, _)| from == name) {
                    *name = to.clone();
                }
            }
        }
        FieldChange::Mask { fields, replacement } => {
            for name in fields {
                let masked = match field(object, name) {
                    None => null(),
                    Some(value) => {
                        masked(&value, replacement.as_deref()).map_err(|reason| format!("{name}: {reason}"))?
                    }
                };
                set(object, name, masked);
            }
        }
        FieldChange::Extract { .. } | FieldChange::Hoist { .. } => unreachable!("handled above"),
    }
    Ok(())
}

/// The value of an object's field (the last, when a name is written twice, as a map would keep).
fn field(object: &[(String, Box<RawValue>)], name: &str) -> Option<Box<RawValue>> {
    object.iter().rev().find(|(n, _)| n == name).map(|(_, value)| value.clone())
}

/// Sets a field in place, or adds it at the end.
fn set(object: &mut Vec<(String, Box<RawValue>)>, name: &str, value: Box<RawValue>) {
    match object.iter_mut().rev().find(|(n, _)| n == name) {
        Some(field) => field.1 = value,
        None => object.push((name.to_string(), value)),
    }
}

fn null() -> Box<RawValue> {
    raw("null".into())
}

/// `MaskField`'s value for `value`: its type's empty value, or the replacement where the
/// type can take it (a string, or a number for a number).
fn masked(value: &RawValue, replacement: Option<&str>) -> Result<Box<RawValue>, String> {
    let empty = match value.get().as_bytes().first() {
        Some(b'{') => "{}",
        Some(b'[') => "[]",
        Some(b'"') => "\"\"",
        Some(b't' | b'f') => "false",
        Some(b'n') => "null",
        _ => "0",
    };
    let Some(text) = replacement else { return Ok(raw(empty.into())) };
    match empty {
        "\"\"" => Ok(raw(quoted(text))),
        "0" => {
            let text = text.trim();
            let number = match text.parse::<i64>() {
                Ok(whole) => Some(serde_json::Number::from(whole)),
                Err(_) => text.parse::<f64>().ok().and_then(serde_json::Number::from_f64),
            };
            let number = number.ok_or_else(|| format!("replacement '{text}' is not a number, and the field is one"))?;
            Ok(raw(number.to_string()))
        }
        "null" => Ok(null()),
        _ => Err("a replacement only masks a string or a number".into()),
    }
}

fn not_an_object(what: &str, value: Option<&Json>) -> String {
    let is = value.map_or("there is none", Json::kind);
    format!("the {what} must be a JSON object, and {is}")
}

fn has_header(builder: &RecordBatchBuilder, headers: &[(Part, Part)], name: &str) -> Result<bool, String> {
    for (key, _) in headers {
        if builder.text(*key, "header key")?.1 == name {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_read_with_its_fields_in_order_and_written_back_as_it_was() {
        let Json::Object(fields) = Json::parse(b" {\"b\":1.50, \"a\":[1, 2],\"b\":\"x\"}\n").unwrap() else {
            panic!("an object")
        };
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["b", "a", "b"]);
        assert_eq!(field(&fields, "b").unwrap().get(), "\"x\"", "the last of a name, as a map keeps");
        assert_eq!(Json::Object(fields).write().get(), r#"{"b":1.50,"a":[1, 2],"b":"x"}"#);
        assert!(matches!(Json::parse(b" \"text\" ").unwrap(), Json::Other(raw) if raw.get() == "\"text\""));
        assert!(Json::parse(b"{\"a\":1} trailing").is_err());
        for (value, empty) in [("true", "false"), ("-3e2", "0"), ("\"s\"", "\"\""), ("[1]", "[]"), ("{}", "{}")] {
            assert_eq!(masked(&raw(value.into()), None).unwrap().get(), empty, "{value}");
        }
        assert_eq!(masked(&raw("7".into()), Some(" 0042 ")).unwrap().get(), "42");
        assert_eq!(masked(&raw("7".into()), Some("1.5")).unwrap().get(), "1.5");
        assert!(masked(&raw("true".into()), Some("x")).is_err());
    }
}
