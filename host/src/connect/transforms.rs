//! A connector's transforms ([`crate::config::transforms`]) applied to one record as the
//! checks add it to the batch being built: the topic it goes to, the headers it carries,
//! its key and value reshaped as JSON objects, or that it is dropped. A dropped record still
//! commits its offset, as an offset-only record does, so a restart does not read it again;
//! a topic a transform makes is checked as a plugin's would be. A field transform's key or
//! value is parsed once however many transforms reshape it, and written back (compact
//! JSON, keys in order) once, after the last.

use serde_json::{Map, Value};

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
    Json(Option<Value>),
}

impl Side {
    fn json(&mut self, builder: &RecordBatchBuilder, what: &str) -> Result<&mut Option<Value>, String> {
        if let Side::Bytes(part) = *self {
            let parsed = match part {
                None => None,
                Some(part) => Some(
                    serde_json::from_slice(builder.bytes(part, what)?)
                        .map_err(|e| format!("the {what} is not JSON ({e})"))?,
                ),
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
            Side::Json(value) => value.map(|value| {
                let bytes = serde_json::to_vec(&value).expect("a JSON value is written");
                builder.append(&bytes)
            }),
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
                    Some(Value::Object(object)) => object,
                    other => return Err(failed(not_an_object("value", other.as_ref()))),
                };
                let made: Map<String, Value> =
                    fields.iter().map(|f| (f.clone(), object.get(f).cloned().unwrap_or(Value::Null))).collect();
                key = Side::Json(Some(Value::Object(made)));
            }
        }
    }
    Ok(Some(Transformed { topic: routed, headers, key: key.finish(builder), value: value.finish(builder) }))
}

/// One field transform on a key or value, as Connect's does on a schemaless map: a
/// tombstone passes through `InsertField`, `ReplaceField` and `MaskField` unchanged.
fn reshape(
    json: &mut Option<Value>,
    change: &FieldChange,
    what: &str,
    topic: &str,
    timestamp_ms: i64,
) -> Result<(), String> {
    match change {
        FieldChange::Extract { field } => {
            *json = match json.take() {
                None => None,
                Some(Value::Object(mut object)) => object.remove(field).filter(|v| !v.is_null()),
                Some(other) => return Err(not_an_object(what, Some(&other))),
            };
            return Ok(());
        }
        FieldChange::Hoist { field } => {
            let inner = json.take().unwrap_or(Value::Null);
            *json = Some(Value::Object(Map::from_iter([(field.clone(), inner)])));
            return Ok(());
        }
        _ => {}
    }
    let object = match json {
        None => return Ok(()),
        Some(Value::Object(object)) => object,
        Some(other) => return Err(not_an_object(what, Some(other))),
    };
    match change {
        FieldChange::Insert { topic: topic_field, timestamp, fixed } => {
            if let Some(field) = topic_field {
                object.insert(field.clone(), Value::String(topic.to_string()));
            }
            if let Some(field) = timestamp {
                object.insert(field.clone(), Value::from(timestamp_ms));
            }
            if let Some((field, text)) = fixed {
                object.insert(field.clone(), Value::String(text.clone()));
            }
        }
        FieldChange::Replace { exclude, include, renames } => {
            let kept = std::mem::take(object)
                .into_iter()
                .filter(|(name, _)| !exclude.contains(name) && (include.is_empty() || include.contains(name)));
            *object = kept
                .map(|(name, value)| match renames.iter().find(|(from, _)| *from == name) {
                    Some((_, to)) => (to.clone(), value),
                    None => (name, value),
                })
                .collect();
        }
        FieldChange::Mask { fields, replacement } => {
            for field in fields {
                let masked = match object.get(field) {
                    None | Some(Value::Null) => Value::Null,
                    Some(value) => {
                        masked(value, replacement.as_deref()).map_err(|reason| format!("{field}: {reason}"))?
                    }
                };
                object.insert(field.clone(), masked);
            }
        }
        FieldChange::Extract { .. } | FieldChange::Hoist { .. } => unreachable!("handled above"),
    }
    Ok(())
}

/// `MaskField`'s value for `value`: its type's empty value, or the replacement where the
/// type can take it (a string, or a number for a number).
fn masked(value: &Value, replacement: Option<&str>) -> Result<Value, String> {
    Ok(match (value, replacement) {
        (Value::Bool(_), None) => Value::Bool(false),
        (Value::Number(_), None) => Value::from(0),
        (Value::String(_), None) => Value::String(String::new()),
        (Value::Array(_), None) => Value::Array(Vec::new()),
        (Value::Object(_), None) => Value::Object(Map::new()),
        (Value::String(_), Some(text)) => Value::String(text.to_string()),
        (Value::Number(_), Some(text)) => {
            let text = text.trim();
            let number = match text.parse::<i64>() {
                Ok(whole) => Some(serde_json::Number::from(whole)),
                Err(_) => text.parse::<f64>().ok().and_then(serde_json::Number::from_f64),
            };
            Value::Number(number.ok_or_else(|| format!("replacement '{text}' is not a number, and the field is one"))?)
        }
        (_, Some(_)) => return Err("a replacement only masks a string or a number".into()),
        (Value::Null, None) => Value::Null,
    })
}

fn not_an_object(what: &str, value: Option<&Value>) -> String {
    let is = match value {
        None => "there is none",
        Some(Value::Null) => "it is null",
        Some(Value::Bool(_)) => "it is a boolean",
        Some(Value::Number(_)) => "it is a number",
        Some(Value::String(_)) => "it is a string",
        Some(Value::Array(_)) => "it is an array",
        Some(Value::Object(_)) => "it is an object",
    };
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
