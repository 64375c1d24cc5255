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
use crate::config::transforms::{
    CastType, DatePart, FieldChange, Predicate, RecordPart, Transform, UnixPrecision, format_date, parse_date, year_of,
};
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
    /// An object is read as Connect's JSON converter reads it: a name given twice is one
    /// field, the last value in the first one's place (a transform that changed only one
    /// of them would leave the other, a masked field's secret say, in the record).
    fn parse(bytes: &[u8]) -> Result<Json, serde_json::Error> {
        let raw: Box<RawValue> = serde_json::from_slice(bytes)?;
        Json::of(raw)
    }

    fn of(raw: Box<RawValue>) -> Result<Json, serde_json::Error> {
        if !raw.get().starts_with('{') {
            return Ok(Json::Other(raw));
        }
        let mut fields = serde_json::Deserializer::from_str(raw.get()).deserialize_map(FieldsInOrder)?;
        one_field_per_name(&mut fields);
        Ok(Json::Object(fields))
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

/// A record a transform refused: the transform's class (as [`Transform::class`] names it)
/// and why.
pub(super) struct Refused {
    pub class: &'static str,
    pub reason: String,
}

/// Runs the chain over one record; `None` when a transform drops it.
pub(super) fn apply<'c>(
    chain: &'c Transforms,
    record: Record,
    builder: &mut RecordBatchBuilder,
) -> Result<Option<Transformed<'c>>, Refused> {
    let mut class = "";
    apply_steps(chain, record, builder, &mut class).map_err(|reason| Refused { class, reason })
}

/// [`apply`], naming in `class` the transform at work.
fn apply_steps<'c>(
    chain: &'c Transforms,
    record: Record,
    builder: &mut RecordBatchBuilder,
    class: &mut &'static str,
) -> Result<Option<Transformed<'c>>, String> {
    let Record { topic, key, value, mut headers, timestamp_ms } = record;
    let (mut key, mut value) = (Side::Bytes(key), Side::Bytes(value));
    let mut routed: Option<(String, &str)> = None;
    for step in chain.steps() {
        *class = step.transform.class();
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
            Transform::RegexRouter { regex, find, replacement } => {
                if regex.is_match(current) {
                    routed = Some((find.replace(current, replacement.as_str()).into_owned(), &step.alias));
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
                let (side, what) = side_of(*part, &mut key, &mut value);
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
            Transform::HeaderFrom { part, fields, headers: names, copy } => {
                let (side, what) = side_of(*part, &mut key, &mut value);
                let object = match side.json(builder, what).map_err(failed)? {
                    Some(Json::Object(object)) => object,
                    other => return Err(failed(not_an_object(what, other.as_ref()))),
                };
                for (name, header) in fields.iter().zip(names) {
                    let text = field(object, name).map(|value| header_text(&value)).unwrap_or_default();
                    let key = builder.append(header.as_bytes());
                    let value = builder.append(text.as_bytes());
                    headers.push((key, value));
                }
                if !copy {
                    object.retain(|(name, _)| !fields.contains(name));
                }
            }
        }
    }
    Ok(Some(Transformed { topic: routed, headers, key: key.finish(builder), value: value.finish(builder) }))
}

/// The key or the value, as `part` names it, and its name for messages.
fn side_of<'s>(part: RecordPart, key: &'s mut Side, value: &'s mut Side) -> (&'s mut Side, &'static str) {
    match part {
        RecordPart::Key => (key, "key"),
        RecordPart::Value => (value, "value"),
    }
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
        FieldChange::Extract { path } => {
            *json = match json.take() {
                None => None,
                Some(Json::Other(value)) if is_null(&value) => Some(Json::Other(value)),
                // An object extracted is an object to the transforms after it.
                Some(Json::Object(object)) => extract(object, path)?
                    .filter(|v| !is_null(v))
                    .map(|v| Json::of(v).map_err(|e| format!("the {what} is not JSON ({e})")))
                    .transpose()?,
                Some(other) => return Err(not_an_object(what, Some(&other))),
            };
            return Ok(());
        }
        FieldChange::Hoist { field } => {
            let inner = json.take().map_or_else(null, |inner| inner.write());
            *json = Some(Json::Object(vec![(field.clone(), inner)]));
            return Ok(());
        }
        FieldChange::Timestamp { field: None, to_text, format, precision } => {
            return convert_whole(json, &format!("the {what} must be a timestamp to convert it whole"), |primitive| {
                convert_timestamp(primitive, *to_text, format.as_deref(), *precision)
            });
        }
        FieldChange::Cast { whole: Some(to), .. } => {
            return convert_whole(
                json,
                &format!("the {what} must be a JSON primitive to cast it whole"),
                |primitive| cast(primitive, *to),
            );
        }
        _ => {}
    }
    let object = match json {
        // A tombstone, or a value that is JSON's null (Connect's null value), passes.
        None => return Ok(()),
        Some(Json::Other(value)) if is_null(value) => return Ok(()),
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
                // A name renamed twice: the last, as Connect's map of renames keeps it.
                if let Some((_, to)) = renames.iter().rev().find(|(from, _)| from == name) {
                    *name = to.clone();
                }
            }
            one_field_per_name(object);
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
        FieldChange::Flatten { delimiter } => {
            let mut flat = Vec::with_capacity(object.len());
            flatten("", std::mem::take(object), delimiter, &mut flat)
                .map_err(|e| format!("the {what} is not JSON ({e})"))?;
            *object = flat;
            one_field_per_name(object);
        }
        FieldChange::Cast { fields, .. } => {
            for (name, to) in fields {
                convert_field(object, name, |value| cast(value, *to))?;
            }
        }
        FieldChange::Timestamp { field: Some(name), to_text, format, precision } => {
            convert_field(object, name, |value| convert_timestamp(value, *to_text, format.as_deref(), *precision))?;
        }
        FieldChange::Extract { .. } | FieldChange::Hoist { .. } | FieldChange::Timestamp { field: None, .. } => {
            unreachable!("handled above")
        }
    }
    Ok(())
}

/// The whole key or value converted, when it is a JSON primitive (`must_be` says what it
/// must be otherwise); a tombstone passes.
fn convert_whole(
    json: &mut Option<Json>,
    must_be: &str,
    convert: impl FnOnce(&RawValue) -> Result<Box<RawValue>, String>,
) -> Result<(), String> {
    match json.take() {
        None => {}
        Some(Json::Other(primitive)) => *json = Some(Json::Other(convert(&primitive)?)),
        Some(Json::Object(_)) => return Err(format!("{must_be}, and it is an object")),
    }
    Ok(())
}

/// One field of an object converted, as Connect converts what a map holds: a missing
/// field as a null (which `Cast` and `TimestampConverter` keep a null).
fn convert_field(
    object: &mut Vec<(String, Box<RawValue>)>,
    name: &str,
    convert: impl FnOnce(&RawValue) -> Result<Box<RawValue>, String>,
) -> Result<(), String> {
    let value = field(object, name).unwrap_or_else(null);
    let converted = convert(&value).map_err(|reason| format!("{name}: {reason}"))?;
    set(object, name, converted);
    Ok(())
}

/// `Flatten`: `fields` added to `out`, the fields of each nested object in its place
/// under its path (an empty object leaves nothing, arrays stay as they are, as Connect's
/// schemaless `Flatten` does).
fn flatten(
    prefix: &str,
    fields: Vec<(String, Box<RawValue>)>,
    delimiter: &str,
    out: &mut Vec<(String, Box<RawValue>)>,
) -> Result<(), serde_json::Error> {
    for (name, value) in fields {
        let path = if prefix.is_empty() { name } else { format!("{prefix}{delimiter}{name}") };
        if value.get().starts_with('{') {
            let nested = serde_json::Deserializer::from_str(value.get()).deserialize_map(FieldsInOrder)?;
            flatten(&path, nested, delimiter, out)?;
        } else {
            out.push((path, value));
        }
    }
    Ok(())
}

/// A JSON primitive as Connect's `Cast` sees it (JsonConverter's schemaless values).
enum Primitive {
    Whole(i64),
    Fraction(f64),
    Boolean(bool),
    Text(String),
}

/// `Cast` of one JSON value, as Connect casts the Java value JsonConverter makes of it:
/// numbers narrow as Java's do (wrapping), text is parsed, a null stays null.
fn cast(value: &RawValue, to: CastType) -> Result<Box<RawValue>, String> {
    let text = value.get();
    let primitive = match text.as_bytes().first() {
        Some(b'n') => return Ok(null()),
        Some(b'{' | b'[') => return Err(format!("Cast casts JSON primitives, and {}", kind_of(value))),
        Some(b'"') => Primitive::Text(serde_json::from_str(text).map_err(|e| e.to_string())?),
        Some(b't') => Primitive::Boolean(true),
        Some(b'f') => Primitive::Boolean(false),
        _ => match text.parse::<i64>() {
            Ok(whole) => Primitive::Whole(whole),
            Err(_) => Primitive::Fraction(text.parse::<f64>().map_err(|e| e.to_string())?),
        },
    };
    let whole = |bits: u32| -> Result<i64, String> {
        let narrow = |n: i64| match bits {
            8 => n as i8 as i64,
            16 => n as i16 as i64,
            32 => n as i32 as i64,
            _ => n,
        };
        Ok(match &primitive {
            Primitive::Whole(n) => narrow(*n),
            // Java narrows a double to an int (or a long) first, saturating, then wraps.
            Primitive::Fraction(x) if bits == 64 => *x as i64,
            Primitive::Fraction(x) => narrow(*x as i32 as i64),
            Primitive::Boolean(b) => i64::from(*b),
            Primitive::Text(t) => {
                let parsed = match bits {
                    8 => t.parse::<i8>().map(i64::from),
                    16 => t.parse::<i16>().map(i64::from),
                    32 => t.parse::<i32>().map(i64::from),
                    _ => t.parse::<i64>(),
                };
                parsed.map_err(|_| format!("'{t}' is not an int{bits}"))?
            }
        })
    };
    let fraction = || -> Result<f64, String> {
        let x = match &primitive {
            Primitive::Whole(n) => *n as f64,
            Primitive::Fraction(x) => *x,
            Primitive::Boolean(b) => f64::from(u8::from(*b)),
            Primitive::Text(t) => t.trim().parse::<f64>().map_err(|_| format!("'{t}' is not a number"))?,
        };
        if x.is_finite() { Ok(x) } else { Err(format!("{x} has no JSON number")) }
    };
    Ok(raw(match to {
        CastType::Int8 => whole(8)?.to_string(),
        CastType::Int16 => whole(16)?.to_string(),
        CastType::Int32 => whole(32)?.to_string(),
        CastType::Int64 => whole(64)?.to_string(),
        CastType::Float32 => {
            let x = fraction()? as f32;
            if !x.is_finite() {
                return Err(format!("{x} has no JSON number"));
            }
            format!("{x:?}")
        }
        CastType::Float64 => format!("{:?}", fraction()?),
        CastType::Boolean => match &primitive {
            Primitive::Whole(n) => *n != 0,
            Primitive::Fraction(x) => *x as i64 != 0,
            Primitive::Boolean(b) => *b,
            Primitive::Text(t) => t.eq_ignore_ascii_case("true"),
        }
        .to_string(),
        CastType::String => quoted(&match primitive {
            Primitive::Whole(n) => n.to_string(),
            Primitive::Fraction(x) => java_double(x),
            Primitive::Boolean(b) => b.to_string(),
            Primitive::Text(t) => t,
        }),
    }))
}

/// `TimestampConverter` of one JSON value, as Connect converts JsonConverter's schemaless
/// values: an integer is a Unix timestamp in `precision` units, text is read with
/// `format`; the result is the other (text in `format`, or an integer). A null stays null.
/// A two-digit year is read around the current year, as `SimpleDateFormat` reads it.
fn convert_timestamp(
    value: &RawValue,
    to_text: bool,
    format: Option<&[DatePart]>,
    precision: UnixPrecision,
) -> Result<Box<RawValue>, String> {
    let text = value.get();
    let millis = match text.as_bytes().first() {
        Some(b'n') => return Ok(null()),
        Some(b'"') => {
            let format = format.ok_or("a timestamp in text needs `format` to read it")?;
            let date: String = serde_json::from_str(text).map_err(|e| e.to_string())?;
            parse_date(format, &date, year_of(crate::storage::now_ms()))?
        }
        _ => match text.parse::<i64>() {
            Ok(units) => precision.to_millis(units),
            Err(_) => {
                let is = match kind_of(value) {
                    "it is a number" => "it is a fraction",
                    other => other,
                };
                return Err(format!("a timestamp is a Unix timestamp (a whole number) or text, and {is}"));
            }
        },
    };
    Ok(raw(match (to_text, format) {
        (true, Some(format)) => quoted(&format_date(format, millis)),
        _ => precision.from_millis(millis).to_string(),
    }))
}

/// Java's `Double.toString`: plain from 10^-3 to 10^7, `1.5E-7` beyond.
fn java_double(x: f64) -> String {
    if x == 0.0 || (1e-3..1e7).contains(&x.abs()) || !x.is_finite() {
        return format!("{x:?}");
    }
    let scientific = format!("{x:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let dot = if mantissa.contains('.') { "" } else { ".0" };
    format!("{mantissa}{dot}E{exponent}")
}

/// A header's bytes from a field's value, as Connect's default header converter writes
/// it: a string's text, anything else as its JSON, nothing for a null.
fn header_text(value: &RawValue) -> String {
    match value.get().as_bytes().first() {
        Some(b'"') => serde_json::from_str(value.get()).unwrap_or_default(),
        Some(b'n') => String::new(),
        _ => value.get().to_string(),
    }
}

/// The value at `path` in `object`, as Connect's `SingleFieldPath` reads a map: a missing
/// or null field on the way gives none; a step through anything but an object fails.
fn extract(object: Vec<(String, Box<RawValue>)>, path: &[String]) -> Result<Option<Box<RawValue>>, String> {
    let Some((last, through)) = path.split_last() else { return Ok(None) };
    let mut object = object;
    for (depth, name) in through.iter().enumerate() {
        let Some(inner) = field(&object, name).filter(|v| !is_null(v)) else { return Ok(None) };
        if !inner.get().starts_with('{') {
            let at = path[..=depth].join(".");
            return Err(format!("the field path goes through '{at}', and it is not an object ({})", kind_of(&inner)));
        }
        object = serde_json::Deserializer::from_str(inner.get())
            .deserialize_map(FieldsInOrder)
            .map_err(|e| format!("'{name}' is not JSON ({e})"))?;
    }
    Ok(field(&object, last))
}

/// Keeps one field of each name, where the first of them was, with the last one's value
/// (as a Java map keeps a key put twice): a rename or a flattened path onto a name
/// already there must not write that name twice.
fn one_field_per_name(object: &mut Vec<(String, Box<RawValue>)>) {
    let repeated = if object.len() <= 32 {
        (1..object.len()).any(|i| object[..i].iter().any(|(name, _)| *name == object[i].0))
    } else {
        let mut names = std::collections::HashSet::with_capacity(object.len());
        !object.iter().all(|(name, _)| names.insert(name.as_str()))
    };
    if !repeated {
        return;
    }
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::with_capacity(object.len());
    let mut kept: Vec<(String, Box<RawValue>)> = Vec::with_capacity(object.len());
    for (name, value) in object.drain(..) {
        match seen.get(&name) {
            Some(&at) => kept[at].1 = value,
            None => {
                seen.insert(name.clone(), kept.len());
                kept.push((name, value));
            }
        }
    }
    *object = kept;
}

fn is_null(value: &RawValue) -> bool {
    value.get() == "null"
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
        // Converted to the field's type, as Connect's `Values.convertToLong` and
        // `convertToDouble` convert it: a fraction into a whole field loses its fraction.
        "0" => {
            let text = text.trim();
            let not_a_number = || format!("replacement '{text}' is not a number, and the field is one");
            let fraction = text.parse::<f64>().ok().filter(|x| x.is_finite());
            if value.get().parse::<i64>().is_ok() {
                let whole = match text.parse::<i64>() {
                    Ok(whole) => whole,
                    Err(_) => fraction.ok_or_else(not_a_number)?.trunc() as i64,
                };
                Ok(raw(whole.to_string()))
            } else {
                Ok(raw(format!("{:?}", fraction.ok_or_else(not_a_number)?)))
            }
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
        assert_eq!(names, ["b", "a"], "a name given twice is one field, where it first was");
        assert_eq!(field(&fields, "b").unwrap().get(), "\"x\"", "the last of a name, as a map keeps");
        assert_eq!(Json::Object(fields).write().get(), r#"{"b":"x","a":[1, 2]}"#);
        let Json::Object(fields) = Json::parse(b"{\"b\":1.50, \"a\":[1, 2]}").unwrap() else { panic!("an object") };
        assert_eq!(Json::Object(fields).write().get(), r#"{"b":1.50,"a":[1, 2]}"#, "values as they were written");
        assert!(matches!(Json::parse(b" \"text\" ").unwrap(), Json::Other(raw) if raw.get() == "\"text\""));
        assert!(Json::parse(b"{\"a\":1} trailing").is_err());
        for (value, empty) in [("true", "false"), ("-3e2", "0"), ("\"s\"", "\"\""), ("[1]", "[]"), ("{}", "{}")] {
            assert_eq!(masked(&raw(value.into()), None).unwrap().get(), empty, "{value}");
        }
        assert_eq!(masked(&raw("7".into()), Some(" 0042 ")).unwrap().get(), "42");
        assert_eq!(masked(&raw("7".into()), Some("1.5")).unwrap().get(), "1", "converted to a whole field's type");
        assert_eq!(masked(&raw("-7".into()), Some("-2.9")).unwrap().get(), "-2");
        assert_eq!(masked(&raw("7.5".into()), Some("2")).unwrap().get(), "2.0", "and to a fraction field's");
        assert!(masked(&raw("7".into()), Some("x")).unwrap_err().contains("not a number"));
        assert!(masked(&raw("true".into()), Some("x")).is_err());
    }

    #[test]
    fn cast_narrows_parses_and_writes_as_connect_does() {
        let cast = |value: &str, to: CastType| super::cast(&raw(value.into()), to).map(|v| v.get().to_string());
        assert_eq!(cast("300", CastType::Int8).unwrap(), "44", "a long wraps into a byte, as in Java");
        assert_eq!(cast("-1.9", CastType::Int32).unwrap(), "-1");
        assert_eq!(cast("1e12", CastType::Int32).unwrap(), "2147483647", "a double saturates into an int");
        assert_eq!(cast("70000.5", CastType::Int16).unwrap(), "4464", "then the int wraps into a short");
        assert_eq!(cast("true", CastType::Int64).unwrap(), "1");
        assert_eq!(cast("\"-12\"", CastType::Int16).unwrap(), "-12");
        assert!(cast("\"300\"", CastType::Int8).unwrap_err().contains("'300' is not an int8"));
        assert!(cast("\" 5\"", CastType::Int32).is_err(), "Java's parseInt does not trim");
        assert_eq!(cast("\" 2.5 \"", CastType::Float64).unwrap(), "2.5", "parseDouble does");
        assert_eq!(cast("0.1", CastType::Float32).unwrap(), "0.1");
        assert_eq!(cast("3", CastType::Float64).unwrap(), "3.0");
        assert!(cast("\"NaN\"", CastType::Float64).is_err());
        assert!(cast("1e300", CastType::Float32).is_err(), "too large for a float");
        assert_eq!(cast("0.4", CastType::Boolean).unwrap(), "false", "a number is true when its long is not 0");
        assert_eq!(cast("\"TRUE\"", CastType::Boolean).unwrap(), "true");
        assert_eq!(cast("\"yes\"", CastType::Boolean).unwrap(), "false");
        assert_eq!(cast("12", CastType::String).unwrap(), "\"12\"");
        assert_eq!(cast("1.50", CastType::String).unwrap(), "\"1.5\"");
        assert_eq!(cast("1.5e-7", CastType::String).unwrap(), "\"1.5E-7\"");
        assert_eq!(cast("1e7", CastType::String).unwrap(), "\"1.0E7\"");
        assert_eq!(cast("null", CastType::Int8).unwrap(), "null");
        assert!(cast("[1]", CastType::String).unwrap_err().contains("it is an array"));
    }

    #[test]
    fn flatten_joins_paths_keeps_arrays_and_drops_empty_objects() {
        let Json::Object(fields) = Json::parse(br#"{"a":{"b":1,"c":{"d":[{"e":1}]},"f":{}},"g":null}"#).unwrap() else {
            panic!("an object")
        };
        let mut flat = Vec::new();
        flatten("", fields, ".", &mut flat).unwrap();
        assert_eq!(Json::Object(flat).write().get(), r#"{"a.b":1,"a.c.d":[{"e":1}],"g":null}"#);
        let mut json = Some(Json::parse(br#"{"n":"5","m":1}"#).unwrap());
        let change = FieldChange::Cast {
            whole: None,
            fields: vec![("n".into(), CastType::Int32), ("x".into(), CastType::Int8)],
        };
        reshape(&mut json, &change, "value", "t", 0).unwrap();
        assert_eq!(json.unwrap().write().get(), r#"{"n":5,"m":1,"x":null}"#, "a missing field is cast as a null");
        let whole = FieldChange::Cast { whole: Some(CastType::Int64), fields: Vec::new() };
        let mut json = Some(Json::parse(b"\"42\"").unwrap());
        reshape(&mut json, &whole, "key", "t", 0).unwrap();
        assert_eq!(json.unwrap().write().get(), "42");
        let mut object = Some(Json::parse(b"{}").unwrap());
        assert!(reshape(&mut object, &whole, "key", "t", 0).unwrap_err().contains("must be a JSON primitive"));
        let mut tombstone = None;
        reshape(&mut tombstone, &whole, "value", "t", 0).unwrap();
        assert!(tombstone.is_none(), "a tombstone passes Cast");
        assert_eq!(header_text(&raw("\"a\\u00e9\"".into())), "a\u{e9}");
        assert_eq!(header_text(&raw("{\"x\":1}".into())), "{\"x\":1}");
        assert_eq!(header_text(&null()), "");
    }

    #[test]
    fn timestamps_convert_between_unix_units_and_text() {
        let date = crate::config::transforms::date_format("yyyy-MM-dd HH:mm:ss.SSS").unwrap();
        let convert = |value: &str, to_text: bool, precision: UnixPrecision| {
            convert_timestamp(&raw(value.into()), to_text, Some(&date), precision).map(|v| v.get().to_string())
        };
        assert_eq!(convert("1796476029", true, UnixPrecision::Seconds).unwrap(), "\"2026-12-05 13:07:09.000\"");
        assert_eq!(
            convert("1796476029042123", true, UnixPrecision::Microseconds).unwrap(),
            "\"2026-12-05 13:07:09.042\""
        );
        assert_eq!(
            convert("\"2026-12-05 13:07:09.042\"", false, UnixPrecision::Milliseconds).unwrap(),
            "1796476029042"
        );
        assert_eq!(
            convert("\"2026-12-05 13:07:09.042\"", false, UnixPrecision::Nanoseconds).unwrap(),
            "1796476029042000000"
        );
        assert_eq!(convert("\"2026-12-05 13:07:09.999\"", false, UnixPrecision::Seconds).unwrap(), "1796476029");
        assert_eq!(convert("null", true, UnixPrecision::Seconds).unwrap(), "null");
        assert!(convert("1.5", true, UnixPrecision::Seconds).unwrap_err().contains("it is a fraction"));
        assert!(convert("true", true, UnixPrecision::Seconds).unwrap_err().contains("it is a boolean"));
        assert!(convert("\"05.12.2026\"", false, UnixPrecision::Seconds).unwrap_err().contains("does not match"));
        let no_format = convert_timestamp(&raw("\"2026\"".into()), false, None, UnixPrecision::Seconds);
        assert!(no_format.unwrap_err().contains("needs `format`"));
        let mut json = Some(Json::parse(br#"{"at":1796476029,"n":1}"#).unwrap());
        let change = FieldChange::Timestamp {
            field: Some("at".into()),
            to_text: true,
            format: Some(crate::config::transforms::date_format("yyyyMMdd").unwrap()),
            precision: UnixPrecision::Seconds,
        };
        reshape(&mut json, &change, "value", "t", 0).unwrap();
        assert_eq!(json.unwrap().write().get(), r#"{"at":"20261205","n":1}"#);
    }

    #[test]
    fn extract_follows_a_v2_path_through_nested_objects() {
        let extract = |value: &str, path: &[&str]| {
            let mut json = Some(Json::parse(value.as_bytes()).unwrap());
            let change = FieldChange::Extract { path: path.iter().map(|s| s.to_string()).collect() };
            reshape(&mut json, &change, "value", "t", 0).map(|()| json.map(|j| j.write().get().to_string()))
        };
        let value = r#"{"foo":{"bar":42,"baz":null,"a.b":{"c":"x"}},"n":1}"#;
        assert_eq!(extract(value, &["foo", "bar"]).unwrap().as_deref(), Some("42"));
        assert_eq!(extract(value, &["foo", "a.b", "c"]).unwrap().as_deref(), Some("\"x\""));
        assert_eq!(extract(value, &["foo"]).unwrap().as_deref(), Some(r#"{"bar":42,"baz":null,"a.b":{"c":"x"}}"#));
        for missing in [&["un", "known"][..], &["foo", "unknown"], &["foo", "baz"], &["foo", "baz", "inner"]] {
            assert_eq!(extract(value, missing).unwrap(), None, "{missing:?}: a missing or null field gives none");
        }
        let through = extract(value, &["n", "x"]).unwrap_err();
        assert!(through.contains("through 'n'") && through.contains("it is a number"), "{through}");
        assert_eq!(extract("null", &["foo"]).unwrap().as_deref(), Some("null"), "JSON's null passes");
        // An object extracted is an object to the next transform.
        let mut json = Some(Json::parse(br#"{"outer":{"inner":{"x":1,"drop":2}},"n":1}"#).unwrap());
        for field in ["outer", "inner"] {
            reshape(&mut json, &FieldChange::Extract { path: vec![field.into()] }, "value", "t", 0).unwrap();
        }
        let drop = FieldChange::Replace { exclude: vec!["drop".into()], include: Vec::new(), renames: Vec::new() };
        reshape(&mut json, &drop, "value", "t", 0).unwrap();
        assert_eq!(json.unwrap().write().get(), r#"{"x":1}"#);
    }

    #[test]
    fn a_field_named_twice_is_masked_and_cast_whole_and_renamed_by_the_last_rename() {
        let mut json = Some(Json::parse(br#"{"ssn":"123-45-6789","name":"x","ssn":"000"}"#).unwrap());
        reshape(&mut json, &FieldChange::Mask { fields: vec!["ssn".into()], replacement: None }, "value", "t", 0)
            .unwrap();
        assert_eq!(json.unwrap().write().get(), r#"{"ssn":"","name":"x"}"#, "no secret left behind");
        let mut json = Some(Json::parse(br#"{"a":1,"n":300}"#).unwrap());
        let renames = vec![("a".into(), "b".into()), ("a".into(), "c".into())];
        reshape(
            &mut json,
            &FieldChange::Replace { exclude: Vec::new(), include: Vec::new(), renames },
            "value",
            "t",
            0,
        )
        .unwrap();
        assert_eq!(json.unwrap().write().get(), r#"{"c":1,"n":300}"#, "the last rename of a name, as Connect's map");
    }

    #[test]
    fn renames_and_flattened_paths_onto_a_name_keep_one_field() {
        let mut json = Some(Json::parse(br#"{"a.b":1,"x":0,"a":{"b":2}}"#).unwrap());
        reshape(&mut json, &FieldChange::Flatten { delimiter: ".".into() }, "value", "t", 0).unwrap();
        assert_eq!(json.unwrap().write().get(), r#"{"a.b":2,"x":0}"#, "where the first was, with the last value");
        let mut json = Some(Json::parse(br#"{"a":1,"b":2,"c":3}"#).unwrap());
        let rename =
            FieldChange::Replace { exclude: Vec::new(), include: Vec::new(), renames: vec![("a".into(), "b".into())] };
        reshape(&mut json, &rename, "value", "t", 0).unwrap();
        assert_eq!(json.unwrap().write().get(), r#"{"b":2,"c":3}"#);
        let many: Vec<String> = (0..40).map(|i| format!("\"f{i}\":{i}")).collect();
        let mut json = Some(Json::parse(format!("{{{},\"f0\":{{\"\":9}}}}", many.join(",")).as_bytes()).unwrap());
        reshape(&mut json, &FieldChange::Flatten { delimiter: "".into() }, "value", "t", 0).unwrap();
        let written = json.unwrap().write().get().to_string();
        assert!(written.starts_with(r#"{"f0":9,"f1":1,"#) && written.matches("\"f0\"").count() == 1, "{written}");
    }

    #[test]
    fn a_value_that_is_jsons_null_passes_field_transforms_as_connects_null_does() {
        let changes = [
            FieldChange::Insert { topic: Some("t".into()), timestamp: None, fixed: None },
            FieldChange::Replace { exclude: vec!["a".into()], include: Vec::new(), renames: Vec::new() },
            FieldChange::Mask { fields: vec!["a".into()], replacement: None },
            FieldChange::Flatten { delimiter: ".".into() },
            FieldChange::Cast { whole: None, fields: vec![("a".into(), CastType::Int8)] },
        ];
        for change in &changes {
            let mut json = Some(Json::parse(b"null").unwrap());
            reshape(&mut json, change, "value", "t", 0).unwrap_or_else(|e| panic!("{change:?}: {e}"));
            assert_eq!(json.unwrap().write().get(), "null", "{change:?}");
        }
    }
}
