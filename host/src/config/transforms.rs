//! Kafka Connect's Single Message Transforms as a connector config names them
//! (`transforms`, `transforms.<alias>.type`, `predicates`, …): which of Connect's
//! transforms and predicates Sluice runs, their keys, checked. Sluice's records are bytes
//! (key, value, headers, topic, timestamp), not Connect's schema'd `Struct`s, so it runs
//! the transforms that need no schema: the routers, header inserts and drops, `Filter`
//! with predicates, and the field transforms on keys and values that are JSON objects, as
//! Connect runs them on schemaless values (`InsertField`, `ReplaceField`, `MaskField`,
//! `ExtractField`, `HoistField`, `Flatten`, `Cast`, `HeaderFrom`, `TimestampConverter`,
//! `ValueToKey`). Any other class is refused by name, never ignored: a config that says to
//! route, drop or reshape records and silently does not would be the worst kind of wrong. Applying the chain to records is the record checks'
//! (`connect::records`, `connect::transforms`).

use std::sync::Arc;

use regex::Regex;

use super::keys::parse_bool;

pub const TRANSFORMS: &str = "transforms";
pub const PREDICATES: &str = "predicates";

pub const PACKAGE: &str = "org.apache.kafka.connect.transforms.";
const PREDICATE_PACKAGE: &str = "org.apache.kafka.connect.transforms.predicates.";

/// The transforms Sluice runs, by Connect's simple class name (the full name
/// `org.apache.kafka.connect.transforms.<name>` works too).
const SUPPORTED: &str = "RegexRouter, TimestampRouter, InsertHeader, DropHeaders, Filter, and on JSON objects InsertField, ReplaceField, MaskField, ExtractField, HoistField, Flatten, Cast, HeaderFrom, TimestampConverter ($Key or $Value) and ValueToKey";
/// The field transforms, by base name (the class adds `$Key` or `$Value`).
const FIELD_TRANSFORMS: &[&str] = &[
    "InsertField",
    "ReplaceField",
    "MaskField",
    "ExtractField",
    "HoistField",
    "Flatten",
    "Cast",
    "HeaderFrom",
    "TimestampConverter",
];

/// The classes of the transforms and predicates Sluice runs, each with its plugin type
/// (`transformation` or `predicate`), as `GET /connector-plugins?connectorsOnly=false`
/// lists Connect's (KIP-769): sorted by class within each type.
pub fn plugin_classes() -> Vec<(String, &'static str)> {
    let plain = ["DropHeaders", "Filter", "InsertHeader", "RegexRouter", "TimestampRouter", "ValueToKey"];
    let mut transforms: Vec<String> = plain.iter().map(|name| format!("{PACKAGE}{name}")).collect();
    for base in FIELD_TRANSFORMS {
        transforms.extend(["Key", "Value"].map(|part| format!("{PACKAGE}{base}${part}")));
    }
    transforms.sort();
    let predicates = ["HasHeaderKey", "RecordIsTombstone", "TopicNameMatches"];
    let transforms = transforms.into_iter().map(|class| (class, "transformation"));
    transforms.chain(predicates.map(|name| (format!("{PREDICATE_PACKAGE}{name}"), "predicate"))).collect()
}

/// The class of a transform or predicate named by its simple name (`RegexRouter`,
/// `Cast$Value`, `TopicNameMatches`), as Connect resolves a plugin's alias.
pub fn class_of_alias(alias: &str) -> Option<String> {
    plugin_classes().into_iter().map(|(class, _)| class).find(|class| class.rsplit('.').next() == Some(alias))
}

/// `(name, type, default, documentation)` of a transform's or predicate's key; no default
/// means required, an empty one optional.
type KeyDef = (&'static str, &'static str, Option<&'static str>, &'static str);

/// The default of an optional key whose absence means something of its own (Connect's
/// `null` default); `None` marks a required key.
const NULL_DEFAULT: Option<&str> = Some("\0");

/// The keys of one of [`plugin_classes`], by its simple name (without `$Key`/`$Value`).
fn keys_of(base: &str) -> Option<&'static [KeyDef]> {
    const FIELD: KeyDef = ("field", "STRING", None, "Field name");
    Some(match base {
        "RegexRouter" => &[
            ("regex", "STRING", None, "Regular expression a topic must match whole"),
            ("replacement", "STRING", None, "The topic it becomes ($1 for group 1)"),
        ],
        "TimestampRouter" => &[
            ("topic.format", "STRING", Some("${topic}-${timestamp}"), "The topic, from ${topic} and ${timestamp}"),
            ("timestamp.format", "STRING", Some("yyyyMMdd"), "SimpleDateFormat pattern of ${timestamp}, in UTC"),
        ],
        "InsertHeader" => {
            &[("header", "STRING", None, "The header's key"), ("value.literal", "STRING", None, "The header's value")]
        }
        "DropHeaders" => &[("headers", "LIST", None, "The keys of the headers to remove")],
        "Filter" | "RecordIsTombstone" => &[],
        "ValueToKey" => &[("fields", "LIST", None, "Fields of the value the key is made of")],
        "InsertField" => &[
            ("topic.field", "STRING", Some(""), "Field for the record's topic"),
            ("timestamp.field", "STRING", Some(""), "Field for the record's timestamp (epoch ms)"),
            ("static.field", "STRING", Some(""), "Field for static.value"),
            ("static.value", "STRING", Some(""), "A fixed value"),
        ],
        "ReplaceField" => &[
            ("exclude", "LIST", Some(""), "Fields to drop"),
            ("include", "LIST", Some(""), "Fields to keep (all when empty)"),
            ("renames", "LIST", Some(""), "old:new renames"),
        ],
        "MaskField" => &[
            ("fields", "LIST", None, "Fields to mask"),
            (
                "replacement",
                "STRING",
                NULL_DEFAULT,
                "What a string or number field becomes, converted to its type (its type's empty value without one)",
            ),
        ],
        "ExtractField" => &[
            FIELD,
            (
                "field.syntax.version",
                "STRING",
                Some("V1"),
                "V1: the field is a top-level name; V2: a path of nested names joined by dots (a name with dots in backticks)",
            ),
        ],
        "HoistField" => &[FIELD],
        "Flatten" => &[("delimiter", "STRING", Some("."), "Joins the names of nested fields")],
        "Cast" => &[("spec", "LIST", None, "field:type pairs, or one type for the whole key or value")],
        "HeaderFrom" => &[
            ("fields", "LIST", None, "Fields to turn into headers"),
            ("headers", "LIST", None, "The header of each field, in order"),
            ("operation", "STRING", None, "move or copy"),
        ],
        "TimestampConverter" => &[
            ("target.type", "STRING", None, "string or unix"),
            ("field", "STRING", Some(""), "The field holding the timestamp (none: the whole key or value)"),
            ("format", "STRING", Some(""), "SimpleDateFormat pattern of a timestamp in text"),
            ("unix.precision", "STRING", Some("milliseconds"), "seconds, milliseconds, microseconds or nanoseconds"),
        ],
        "TopicNameMatches" => &[("pattern", "STRING", None, "Regular expression a topic must match whole")],
        "HasHeaderKey" => &[("name", "STRING", None, "The header's key")],
        _ => return None,
    })
}

/// The keys of a transform or predicate class that [`plugin_classes`] lists, as
/// `GET /connector-plugins/{class}/config` shows them (KIP-769); `None` for any other name.
pub fn plugin_keys(class: &str) -> Option<Vec<super::ConfigKeyInfo>> {
    if !plugin_classes().iter().any(|(listed, _)| listed == class) {
        return None;
    }
    let simple = class.rsplit('.').next().unwrap_or(class);
    let keys = keys_of(simple.split('$').next().unwrap_or(simple))?;
    let info = |(name, type_name, default, documentation): &KeyDef| super::ConfigKeyInfo {
        name: (*name).into(),
        type_name: (*type_name).into(),
        default_value: default.filter(|d| Some(*d) != NULL_DEFAULT).map(String::from),
        required: default.is_none(),
        importance: if default.is_none() { "HIGH" } else { "MEDIUM" }.into(),
        documentation: (*documentation).into(),
    };
    Some(keys.iter().map(info).collect())
}

/// A connector's transforms, in the order `transforms` lists them; none by default.
#[derive(Clone, Debug, Default)]
pub struct Transforms {
    steps: Arc<[Step]>,
    /// The keys and values the chain was read from, to compare two chains.
    source: Arc<[(String, String)]>,
}

impl PartialEq for Transforms {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Transforms {}

/// One entry of `transforms`.
#[derive(Debug)]
pub struct Step {
    pub alias: String,
    pub transform: Transform,
    /// `transforms.<alias>.predicate`, and whether `negate` inverts it.
    pub predicate: Option<(Predicate, bool)>,
}

#[derive(Debug)]
pub enum Transform {
    /// A topic that `regex` matches whole is rerouted, as Java's `replaceFirst` does: its
    /// leftmost match of `find` (the same pattern, unanchored) becomes `replacement`
    /// (groups as `${1}`).
    RegexRouter { regex: Regex, find: Regex, replacement: String },
    /// The topic becomes `topic_format` with `${topic}` and `${timestamp}` (the record's
    /// timestamp in UTC as `format` writes it).
    TimestampRouter { topic_format: String, format: Vec<DatePart> },
    /// Adds a header (`header`, the UTF-8 bytes of `value`).
    InsertHeader { header: String, value: String },
    /// Removes every header of these keys.
    DropHeaders { headers: Vec<String> },
    /// Drops the record (its offset is still committed, as an offset-only record's).
    Filter,
    /// Reshapes the key or the value, a JSON object (`$Key`, `$Value`).
    Field { part: RecordPart, change: FieldChange },
    /// The key becomes an object of these fields of the value.
    ValueToKey { fields: Vec<String> },
    /// Each of `fields` of the key or value (a JSON object) becomes the header of the same
    /// place in `headers`; `copy: false` (Connect's `operation=move`) also removes the field.
    HeaderFrom { part: RecordPart, fields: Vec<String>, headers: Vec<String>, copy: bool },
}

/// Which part of a record a field transform reshapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordPart {
    Key,
    Value,
}

/// What a field transform does to a JSON object, as Connect's does to a schemaless map.
#[derive(Debug)]
pub enum FieldChange {
    /// `InsertField`: the record's topic and timestamp, and a fixed string, under these names.
    Insert { topic: Option<String>, timestamp: Option<String>, fixed: Option<(String, String)> },
    /// `ReplaceField`: drops `exclude`, keeps only `include` when it is not empty, renames.
    Replace { exclude: Vec<String>, include: Vec<String>, renames: Vec<(String, String)> },
    /// `MaskField`: each field's value becomes its type's empty value, or `replacement`.
    Mask { fields: Vec<String>, replacement: Option<String> },
    /// `ExtractField`: the part becomes the value at this path, a top-level field's name
    /// or (`field.syntax.version=V2`, KIP-821) the names of nested fields from the top.
    Extract { path: Vec<String> },
    /// `HoistField`: the part becomes an object holding it under this name.
    Hoist { field: String },
    /// `Flatten`: each field of a nested object becomes a top-level field named by its path,
    /// the names joined with `delimiter`.
    Flatten { delimiter: String },
    /// `Cast`: the whole part (a JSON primitive), or these fields of it, cast to a type.
    Cast { whole: Option<CastType>, fields: Vec<(String, CastType)> },
    /// `TimestampConverter`: the whole part, or this field of it, a timestamp as epoch
    /// units (a JSON integer) or text in `format`, becomes the other.
    Timestamp { field: Option<String>, to_text: bool, format: Option<Vec<DatePart>>, precision: UnixPrecision },
}

/// `TimestampConverter`'s `unix.precision`: what one of a Unix timestamp's units is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnixPrecision {
    Seconds,
    Milliseconds,
    Microseconds,
    Nanoseconds,
}

impl UnixPrecision {
    /// Milliseconds of `units`, truncated toward zero as Java's `TimeUnit` does.
    pub fn to_millis(self, units: i64) -> i64 {
        match self {
            UnixPrecision::Seconds => units.saturating_mul(1000),
            UnixPrecision::Milliseconds => units,
            UnixPrecision::Microseconds => units / 1000,
            UnixPrecision::Nanoseconds => units / 1_000_000,
        }
    }

    pub fn from_millis(self, millis: i64) -> i64 {
        match self {
            UnixPrecision::Seconds => millis / 1000,
            UnixPrecision::Milliseconds => millis,
            UnixPrecision::Microseconds => millis.saturating_mul(1000),
            UnixPrecision::Nanoseconds => millis.saturating_mul(1_000_000),
        }
    }
}

/// The types `Cast` casts to: Connect's primitive schema types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CastType {
    Int8,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    Boolean,
    String,
}

impl CastType {
    fn parse(name: &str) -> Option<CastType> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "int8" => CastType::Int8,
            "int16" => CastType::Int16,
            "int32" => CastType::Int32,
            "int64" => CastType::Int64,
            "float32" => CastType::Float32,
            "float64" => CastType::Float64,
            "boolean" => CastType::Boolean,
            "string" => CastType::String,
            _ => return None,
        })
    }
}

impl Transform {
    pub fn class(&self) -> &'static str {
        match self {
            Transform::RegexRouter { .. } => "RegexRouter",
            Transform::TimestampRouter { .. } => "TimestampRouter",
            Transform::InsertHeader { .. } => "InsertHeader",
            Transform::DropHeaders { .. } => "DropHeaders",
            Transform::Filter => "Filter",
            Transform::ValueToKey { .. } => "ValueToKey",
            Transform::HeaderFrom { part: RecordPart::Key, .. } => "HeaderFrom$Key",
            Transform::HeaderFrom { part: RecordPart::Value, .. } => "HeaderFrom$Value",
            Transform::Field { part, change } => match (change, part) {
                (FieldChange::Insert { .. }, RecordPart::Key) => "InsertField$Key",
                (FieldChange::Insert { .. }, RecordPart::Value) => "InsertField$Value",
                (FieldChange::Replace { .. }, RecordPart::Key) => "ReplaceField$Key",
                (FieldChange::Replace { .. }, RecordPart::Value) => "ReplaceField$Value",
                (FieldChange::Mask { .. }, RecordPart::Key) => "MaskField$Key",
                (FieldChange::Mask { .. }, RecordPart::Value) => "MaskField$Value",
                (FieldChange::Extract { .. }, RecordPart::Key) => "ExtractField$Key",
                (FieldChange::Extract { .. }, RecordPart::Value) => "ExtractField$Value",
                (FieldChange::Hoist { .. }, RecordPart::Key) => "HoistField$Key",
                (FieldChange::Hoist { .. }, RecordPart::Value) => "HoistField$Value",
                (FieldChange::Flatten { .. }, RecordPart::Key) => "Flatten$Key",
                (FieldChange::Flatten { .. }, RecordPart::Value) => "Flatten$Value",
                (FieldChange::Cast { .. }, RecordPart::Key) => "Cast$Key",
                (FieldChange::Cast { .. }, RecordPart::Value) => "Cast$Value",
                (FieldChange::Timestamp { .. }, RecordPart::Key) => "TimestampConverter$Key",
                (FieldChange::Timestamp { .. }, RecordPart::Value) => "TimestampConverter$Value",
            },
        }
    }
}

#[derive(Debug, Clone)]
pub enum Predicate {
    /// The topic matches the pattern whole.
    TopicNameMatches(Regex),
    /// The record has a header of this key.
    HasHeaderKey(String),
    /// The record has no value.
    RecordIsTombstone,
}

/// A piece of Java's `SimpleDateFormat` pattern, as `TimestampRouter` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatePart {
    Text(String),
    /// `yyyy` (`yy`: the last two digits). `abbreviated` (`y` or `yy`): two digits read
    /// are a year within 80 years before and 20 after now, as Java's parser reads them.
    Year {
        two_digits: bool,
        abbreviated: bool,
    },
    Month {
        width: usize,
    },
    Day {
        width: usize,
    },
    Hour {
        width: usize,
    },
    Minute {
        width: usize,
    },
    Second {
        width: usize,
    },
    Millis {
        width: usize,
    },
    /// The zone: `Z` (`+0000`) or, `iso`, `X`, `XX`, `XXX` (`Z` for UTC, as Java writes
    /// a zero offset); read, any offset in those forms.
    Zone {
        iso: bool,
    },
}

/// `(key, reason)`: the key is a transform's, so it is built from its alias.
pub type TransformProblem = (String, String);

impl Transforms {
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Whether `key` is one this chain read (a key under `transforms.` or `predicates.`
    /// that it did not is worth a warning: a typo there changes what happens to records).
    pub fn knows(&self, key: &str) -> bool {
        key == TRANSFORMS || key == PREDICATES || self.source.iter().any(|(k, _)| k == key)
    }

    /// Reads and checks `transforms` and `predicates` and the keys of each alias they list.
    pub fn parse<'a>(get: &dyn Fn(&str) -> Option<&'a str>) -> Result<Transforms, TransformProblem> {
        let mut source: Vec<(String, String)> = Vec::new();
        let mut read = |key: String| -> Option<&'a str> {
            let value = get(&key);
            if let Some(value) = value {
                source.push((key, value.to_string()));
            }
            value
        };
        let transform_aliases = aliases(TRANSFORMS, read(TRANSFORMS.into()))?;
        let predicate_aliases = aliases(PREDICATES, read(PREDICATES.into()))?;
        let mut predicates = Vec::new();
        for alias in &predicate_aliases {
            let key = |name: &str| format!("{PREDICATES}.{alias}.{name}");
            let (class, simple) = class_name(&key("type"), read(key("type")), PREDICATE_PACKAGE)?;
            let predicate = match simple {
                "TopicNameMatches" => {
                    let pattern = required(&key("pattern"), read(key("pattern")))?;
                    Predicate::TopicNameMatches(whole_match(&key("pattern"), pattern)?)
                }
                "HasHeaderKey" => Predicate::HasHeaderKey(required(&key("name"), read(key("name")))?.to_string()),
                "RecordIsTombstone" => Predicate::RecordIsTombstone,
                _ => {
                    return Err((
                        key("type"),
                        format!(
                            "'{class}' is not a predicate Sluice has: it has TopicNameMatches, HasHeaderKey and RecordIsTombstone ({PREDICATE_PACKAGE}*)"
                        ),
                    ));
                }
            };
            predicates.push(predicate);
        }
        let mut steps = Vec::new();
        for alias in &transform_aliases {
            let key = |name: &str| format!("{TRANSFORMS}.{alias}.{name}");
            let (class, simple) = class_name(&key("type"), read(key("type")), PACKAGE)?;
            let transform = match simple {
                "RegexRouter" => {
                    let pattern = required(&key("regex"), read(key("regex")))?;
                    let regex = whole_match(&key("regex"), pattern)?;
                    let find = Regex::new(pattern).map_err(|e| (key("regex"), e.to_string()))?;
                    let replacement = required(&key("replacement"), read(key("replacement")))?;
                    let replacement = java_replacement(replacement, regex.captures_len() - 1)
                        .map_err(|reason| (key("replacement"), reason))?;
                    Transform::RegexRouter { regex, find, replacement }
                }
                "TimestampRouter" => {
                    let topic_format = read(key("topic.format")).unwrap_or("${topic}-${timestamp}").to_string();
                    let pattern = read(key("timestamp.format")).unwrap_or("yyyyMMdd");
                    let format = date_format(pattern).map_err(|reason| (key("timestamp.format"), reason))?;
                    Transform::TimestampRouter { topic_format, format }
                }
                "InsertHeader" => Transform::InsertHeader {
                    header: required(&key("header"), read(key("header")))?.to_string(),
                    // Empty is a value (Connect refuses only a missing one).
                    value: present(&key("value.literal"), read(key("value.literal")))?.to_string(),
                },
                "DropHeaders" => {
                    Transform::DropHeaders { headers: list(required(&key("headers"), read(key("headers")))?) }
                }
                "Filter" => Transform::Filter,
                "ValueToKey" => {
                    top_level_fields(&key, &mut read)?;
                    Transform::ValueToKey { fields: once_each(list(required(&key("fields"), read(key("fields")))?)) }
                }
                _ => match field_transform(simple) {
                    Some(Ok((part, "HeaderFrom"))) => {
                        top_level_fields(&key, &mut read)?;
                        header_from(part, &key, &mut read)?
                    }
                    Some(Ok((part, "ExtractField"))) => {
                        let field = required(&key("field"), read(key("field")))?;
                        let path = match field_syntax(&key, &mut read)? {
                            FieldSyntax::V1 => vec![field.to_string()],
                            FieldSyntax::V2 => field_path(field).map_err(|reason| (key("field"), reason))?,
                        };
                        Transform::Field { part, change: FieldChange::Extract { path } }
                    }
                    Some(Ok((part, base))) => {
                        top_level_fields(&key, &mut read)?;
                        Transform::Field { part, change: field_change(base, &key, &mut read)? }
                    }
                    Some(Err(reason)) => return Err((key("type"), reason)),
                    None => return Err((key("type"), unsupported_transform(class, simple))),
                },
            };
            let negate = read(key("negate")).map(parse_bool).transpose().map_err(|reason| (key("negate"), reason))?;
            let predicate = match read(key("predicate")).map(str::trim) {
                None | Some("") if negate == Some(true) => {
                    return Err((key("negate"), format!("set without {} to negate", key("predicate"))));
                }
                None | Some("") => None,
                Some(name) => {
                    let index = predicate_aliases.iter().position(|a| a == name).ok_or_else(|| {
                        (key("predicate"), format!("'{name}' is not one of the aliases listed in `{PREDICATES}`"))
                    })?;
                    Some((predicates[index].clone(), negate.unwrap_or(false)))
                }
            };
            steps.push(Step { alias: alias.clone(), transform, predicate });
        }
        source.sort();
        Ok(Transforms { steps: steps.into(), source: source.into() })
    }
}

/// The part a field transform's class names (`InsertField$Value`), and its base name;
/// `None` when the class is not one of them.
fn field_transform(simple: &str) -> Option<Result<(RecordPart, &str), String>> {
    let (base, part) = simple.split_once('$').unwrap_or((simple, ""));
    if !FIELD_TRANSFORMS.contains(&base) {
        return None;
    }
    Some(match part {
        "Key" => Ok((RecordPart::Key, base)),
        "Value" => Ok((RecordPart::Value, base)),
        _ => Err(format!("'{simple}' names no part of the record: {base}$Key or {base}$Value")),
    })
}

/// The keys of a field transform whose base class name is `base`.
fn field_change<'a>(
    base: &str,
    key: &dyn Fn(&str) -> String,
    read: &mut dyn FnMut(String) -> Option<&'a str>,
) -> Result<FieldChange, TransformProblem> {
    Ok(match base {
        "InsertField" => insert_field(key, read)?,
        "ReplaceField" => {
            // `blacklist` and `whitelist` are Connect's names before 2.6.
            let exclude = read(key("exclude")).or_else(|| read(key("blacklist")));
            let include = read(key("include")).or_else(|| read(key("whitelist")));
            let renames = list(read(key("renames")).unwrap_or_default())
                .into_iter()
                .map(|pair| match pair.split_once(':') {
                    Some((from, to)) if !from.is_empty() && !to.is_empty() && !to.contains(':') => {
                        Ok((from.to_string(), to.to_string()))
                    }
                    _ => Err((key("renames"), format!("'{pair}' is not old:new"))),
                })
                .collect::<Result<_, _>>()?;
            FieldChange::Replace {
                exclude: list(exclude.unwrap_or_default()),
                include: list(include.unwrap_or_default()),
                renames,
            }
        }
        "MaskField" => FieldChange::Mask {
            fields: list(required(&key("fields"), read(key("fields")))?),
            replacement: match read(key("replacement")) {
                Some("") => {
                    return Err((
                        key("replacement"),
                        "is empty: leave it out to mask with each type's empty value".into(),
                    ));
                }
                replacement => replacement.map(String::from),
            },
        },
        "HoistField" => FieldChange::Hoist { field: present(&key("field"), read(key("field")))?.to_string() },
        "Flatten" => FieldChange::Flatten { delimiter: read(key("delimiter")).unwrap_or(".").to_string() },
        "Cast" => cast_spec(&key("spec"), required(&key("spec"), read(key("spec")))?)?,
        _ => timestamp_converter(key, read)?,
    })
}

/// `TimestampConverter`'s keys. Its `Timestamp`, `Date` and `Time` targets make a Java
/// `Date`, which has no JSON form (Connect's JsonConverter refuses one without a schema).
fn timestamp_converter<'a>(
    key: &dyn Fn(&str) -> String,
    read: &mut dyn FnMut(String) -> Option<&'a str>,
) -> Result<FieldChange, TransformProblem> {
    let to_text = match required(&key("target.type"), read(key("target.type")))?.trim() {
        "string" => true,
        "unix" => false,
        date @ ("Timestamp" | "Date" | "Time") => {
            return Err((
                key("target.type"),
                format!("'{date}' makes a Java Date, which a JSON value cannot hold: use string or unix"),
            ));
        }
        other => return Err((key("target.type"), format!("'{other}' is not string, unix, Timestamp, Date or Time"))),
    };
    let format = match read(key("format")).filter(|f| !f.is_empty()) {
        Some(pattern) => Some(date_format(pattern).map_err(|reason| (key("format"), reason))?),
        None if to_text => return Err((key("format"), "missing: the format of target.type=string".into())),
        None => None,
    };
    let precision = match read(key("unix.precision")).unwrap_or("milliseconds").trim() {
        "seconds" => UnixPrecision::Seconds,
        "milliseconds" => UnixPrecision::Milliseconds,
        "microseconds" => UnixPrecision::Microseconds,
        "nanoseconds" => UnixPrecision::Nanoseconds,
        other => {
            return Err((
                key("unix.precision"),
                format!("'{other}' is not seconds, milliseconds, microseconds or nanoseconds"),
            ));
        }
    };
    let field = read(key("field")).map(str::trim).filter(|f| !f.is_empty()).map(String::from);
    Ok(FieldChange::Timestamp { field, to_text, format, precision })
}

/// `Cast`'s `spec`: one type for the whole key or value, or `field:type` pairs.
fn cast_spec(key: &str, spec: &str) -> Result<FieldChange, TransformProblem> {
    let type_of = |name: &str| {
        CastType::parse(name).ok_or_else(|| {
            (
                key.to_string(),
                format!(
                    "'{}' is not a type Cast casts to: int8, int16, int32, int64, float32, float64, boolean, string",
                    name.trim()
                ),
            )
        })
    };
    let entries = list(spec);
    if let [only] = entries.as_slice()
        && !only.contains(':')
    {
        return Ok(FieldChange::Cast { whole: Some(type_of(only)?), fields: Vec::new() });
    }
    let mut fields: Vec<(String, CastType)> = Vec::with_capacity(entries.len());
    for entry in &entries {
        let (field, to) = match entry.split_once(':') {
            Some((field, to)) if !field.trim().is_empty() => (field.trim().to_string(), type_of(to)?),
            _ => {
                return Err((
                    key.to_string(),
                    format!(
                        "'{entry}' is not field:type (a type alone casts the whole value, and only as the one entry)"
                    ),
                ));
            }
        };
        // A field named twice is cast once, to its last type, as Connect's map keeps it.
        match fields.iter_mut().find(|(known, _)| *known == field) {
            Some(known) => known.1 = to,
            None => fields.push((field, to)),
        }
    }
    Ok(FieldChange::Cast { whole: None, fields })
}

/// `HeaderFrom`'s keys: `fields` and `headers` of one length, and `operation`.
fn header_from<'a>(
    part: RecordPart,
    key: &dyn Fn(&str) -> String,
    read: &mut dyn FnMut(String) -> Option<&'a str>,
) -> Result<Transform, TransformProblem> {
    let fields = list(required(&key("fields"), read(key("fields")))?);
    let headers = list(required(&key("headers"), read(key("headers")))?);
    if fields.len() != headers.len() {
        return Err((
            key("headers"),
            format!("lists {} headers for {} fields: each field needs its header", headers.len(), fields.len()),
        ));
    }
    let copy = match required(&key("operation"), read(key("operation")))?.trim().to_ascii_lowercase().as_str() {
        "copy" => true,
        "move" => false,
        other => return Err((key("operation"), format!("'{other}' is neither move nor copy"))),
    };
    Ok(Transform::HeaderFrom { part, fields, headers, copy })
}

/// KIP-821's `field.syntax.version`: how a transform names a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldSyntax {
    /// A top-level field's name, dots and all (the default, and Connect's before 3.8).
    V1,
    /// A path of nested fields' names joined by dots; a name with dots in backticks.
    V2,
}

const FIELD_SYNTAX: &str = "field.syntax.version";

fn field_syntax<'a>(
    key: &dyn Fn(&str) -> String,
    read: &mut dyn FnMut(String) -> Option<&'a str>,
) -> Result<FieldSyntax, TransformProblem> {
    match read(key(FIELD_SYNTAX)).map(str::trim) {
        None => Ok(FieldSyntax::V1),
        Some(v) if v.eq_ignore_ascii_case("v1") => Ok(FieldSyntax::V1),
        Some(v) if v.eq_ignore_ascii_case("v2") => Ok(FieldSyntax::V2),
        Some(other) => Err((key(FIELD_SYNTAX), format!("'{other}' is not V1 or V2"))),
    }
}

/// `field.syntax.version` of a transform that names top-level fields only: `V2` would
/// silently read a path as one name, so it is refused (Connect reads V2 paths in
/// `ExtractField` only).
fn top_level_fields<'a>(
    key: &dyn Fn(&str) -> String,
    read: &mut dyn FnMut(String) -> Option<&'a str>,
) -> Result<(), TransformProblem> {
    match field_syntax(key, read)? {
        FieldSyntax::V1 => Ok(()),
        FieldSyntax::V2 => Err((
            key(FIELD_SYNTAX),
            "V2 (nested field paths, KIP-821) is read by ExtractField only, as in Connect: this transform names top-level fields (set V1 or leave the key out)".into(),
        )),
    }
}

/// A V2 field path's steps, as Connect's `SingleFieldPath` splits it: at each dot, except
/// inside a pair of backticks (a backtick that is not followed by a dot, or escaped with
/// a backslash, is part of the name); a trailing dot ends in an empty name.
fn field_path(path: &str) -> Result<Vec<String>, String> {
    let bytes = path.as_bytes();
    let mut steps = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'`' {
            match path[at..].find('.') {
                Some(dot) => {
                    steps.push(path[at..at + dot].to_string());
                    at += dot + 1;
                }
                None => {
                    steps.push(path[at..].to_string());
                    at = bytes.len();
                }
            }
            continue;
        }
        let opened = at;
        let incomplete = || {
            format!(
                "has an incomplete backtick pair: add a backslash before the backtick at position {opened} to escape it"
            )
        };
        at += 1;
        let (mut name, mut start) = (String::new(), at);
        loop {
            let close = at + path[at..].find('`').ok_or_else(incomplete)?;
            let escaped = bytes[close - 1] == b'\\';
            if close + 1 >= bytes.len() {
                if escaped {
                    return Err(incomplete());
                }
                name.push_str(&path[start..close]);
                steps.push(std::mem::take(&mut name));
                at = close + 1;
                break;
            }
            if bytes[close + 1] != b'.' {
                at = close + 1;
                continue;
            }
            if escaped {
                name.push_str(&path[start..close - 1]);
                name.push('`');
                at = close + 1;
                start = at;
                continue;
            }
            name.push_str(&path[start..close]);
            steps.push(std::mem::take(&mut name));
            at = close + 2;
            break;
        }
    }
    if path.ends_with('.') {
        steps.push(String::new());
    }
    Ok(steps)
}

/// `InsertField`'s keys. A name may end in `!` or `?` (required or optional in Connect,
/// which only a schema tells apart).
fn insert_field<'a>(
    key: &dyn Fn(&str) -> String,
    read: &mut dyn FnMut(String) -> Option<&'a str>,
) -> Result<FieldChange, TransformProblem> {
    let name = |value: Option<&str>| {
        value.map(|v| v.trim().trim_end_matches(['!', '?']).to_string()).filter(|v| !v.is_empty())
    };
    if read(key("offset.field")).is_some() {
        return Err((key("offset.field"), "a Kafka offset is only a sink record's".into()));
    }
    if read(key("partition.field")).is_some() {
        return Err((
            key("partition.field"),
            "a source record's Kafka partition is chosen when it is produced, after the transforms".into(),
        ));
    }
    let topic = name(read(key("topic.field")));
    let timestamp = name(read(key("timestamp.field")));
    let fixed = match (name(read(key("static.field"))), read(key("static.value"))) {
        (Some(field), Some(value)) => Some((field, value.to_string())),
        (Some(_), None) => return Err((key("static.value"), "missing: the value of static.field".into())),
        (None, Some(_)) => return Err((key("static.field"), "missing: the field static.value goes in".into())),
        (None, None) => None,
    };
    if topic.is_none() && timestamp.is_none() && fixed.is_none() {
        return Err((
            key("static.field"),
            "nothing to insert: set topic.field, timestamp.field or static.field".into(),
        ));
    }
    Ok(FieldChange::Insert { topic, timestamp, fixed })
}

/// A comma-separated list, trimmed, without empty entries.
fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(String::from).collect()
}

/// `names` without repeats, each where it first came (a key made of `k,k` is `{"k":..}`).
fn once_each(names: Vec<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        if !kept.contains(&name) {
            kept.push(name);
        }
    }
    kept
}

fn aliases(key: &str, value: Option<&str>) -> Result<Vec<String>, TransformProblem> {
    let aliases = list(value.unwrap_or_default());
    if let Some((_, alias)) = aliases.iter().enumerate().find(|(index, alias)| aliases[..*index].contains(alias)) {
        return Err((key.into(), format!("alias '{alias}' is listed twice")));
    }
    Ok(aliases)
}

/// A key that must be given, empty or not.
fn present<'a>(key: &str, value: Option<&'a str>) -> Result<&'a str, TransformProblem> {
    value.ok_or_else(|| (key.to_string(), "missing: required by this transform".into()))
}

fn required<'a>(key: &str, value: Option<&'a str>) -> Result<&'a str, TransformProblem> {
    value.filter(|v| !v.is_empty()).ok_or_else(|| (key.to_string(), "missing: required by this transform".into()))
}

/// The class `transforms.<alias>.type` names, and its simple name (Connect takes the full
/// name with `package` or, as a plugin alias, the simple name).
fn class_name<'a>(key: &str, value: Option<&'a str>, package: &str) -> Result<(&'a str, &'a str), TransformProblem> {
    let example = if package == PACKAGE { "RegexRouter" } else { "TopicNameMatches" };
    let value = value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| (key.to_string(), format!("missing: name the class, e.g. {package}{example}")))?;
    Ok((value, value.strip_prefix(package).unwrap_or(value)))
}

fn unsupported_transform(class: &str, simple: &str) -> String {
    match simple.split('$').next().unwrap_or(simple) {
        "SetSchemaMetadata" => format!(
            "'{class}' sets a schema's name and version, and Sluice's records carry no schema: it runs {SUPPORTED}"
        ),
        _ => format!("'{class}' is not a transform Sluice has: it runs {SUPPORTED} ({PACKAGE}*)"),
    }
}

/// `pattern` compiled to match a whole topic, as Java's `Matcher.matches()` does.
fn whole_match(key: &str, pattern: &str) -> Result<Regex, TransformProblem> {
    let invalid = |e: regex::Error| {
        // The crate's message draws a caret under the pattern over several lines; its last says what is wrong.
        let text = e.to_string();
        let what = text.lines().last().unwrap_or_default().trim_start_matches("error: ").to_string();
        (key.to_string(), format!("'{pattern}' is not a regular expression: {what}"))
    };
    Regex::new(pattern).map_err(invalid)?;
    Regex::new(&format!("^(?:{pattern})$")).map_err(invalid)
}

/// Java's `Matcher.replaceFirst` replacement (`$1`, `${name}`, `\$` for a dollar) in the
/// `regex` crate's syntax (`${1}`, `${name}`, `$$`). Java reads as many digits after `$`
/// as still name a group.
fn java_replacement(java: &str, groups: usize) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => return Err("ends with a lone '\\'".into()),
            },
            '$' => match chars.peek() {
                Some('{') => {
                    chars.next();
                    let name: String = chars.by_ref().take_while(|c| *c != '}').collect();
                    out.push_str(&format!("${{{name}}}"));
                }
                Some(d) if d.is_ascii_digit() => {
                    let mut group = d.to_digit(10).unwrap_or(0) as usize;
                    chars.next();
                    if group > groups {
                        return Err(format!("names group {group}, and the regex has {groups}"));
                    }
                    while let Some(next) = chars.peek().and_then(|d| d.to_digit(10)) {
                        let longer = group * 10 + next as usize;
                        if longer > groups {
                            break;
                        }
                        group = longer;
                        chars.next();
                    }
                    out.push_str(&format!("${{{group}}}"));
                }
                _ => return Err("has a '$' that names no group (write \\$ for a dollar sign)".into()),
            },
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A `SimpleDateFormat` pattern: the fields a topic name is made of (`yyyy`, `yy`, `MM`,
/// `dd`, `HH`, `mm`, `ss`, `SSS`), text in single quotes, and other characters as they are.
pub fn date_format(pattern: &str) -> Result<Vec<DatePart>, String> {
    let mut parts = Vec::new();
    let mut chars = pattern.chars().peekable();
    let mut text = String::new();
    while let Some(c) = chars.next() {
        if c == '\'' {
            if chars.peek() == Some(&'\'') {
                chars.next();
                text.push('\'');
                continue;
            }
            loop {
                match chars.next() {
                    Some('\'') if chars.peek() == Some(&'\'') => {
                        chars.next();
                        text.push('\'');
                    }
                    Some('\'') => break,
                    Some(other) => text.push(other),
                    None => return Err(format!("'{pattern}' has an unclosed quote")),
                }
            }
            continue;
        }
        if !c.is_ascii_alphabetic() {
            text.push(c);
            continue;
        }
        let mut width = 1;
        while chars.peek() == Some(&c) {
            chars.next();
            width += 1;
        }
        if !text.is_empty() {
            parts.push(DatePart::Text(std::mem::take(&mut text)));
        }
        parts.push(match c {
            'y' => DatePart::Year { two_digits: width == 2, abbreviated: width <= 2 },
            'M' if width <= 2 => DatePart::Month { width },
            'd' => DatePart::Day { width },
            'H' => DatePart::Hour { width },
            'm' => DatePart::Minute { width },
            's' => DatePart::Second { width },
            'S' => DatePart::Millis { width },
            'Z' => DatePart::Zone { iso: false },
            'X' if width <= 3 => DatePart::Zone { iso: true },
            _ => {
                return Err(format!(
                    "'{}' in '{pattern}' is not a field Sluice reads or writes: it has y, M (as a number), d, H, m, s, S, Z and X; quote text with '",
                    c.to_string().repeat(width)
                ));
            }
        });
    }
    if !text.is_empty() {
        parts.push(DatePart::Text(text));
    }
    Ok(parts)
}

/// `millis` since the Unix epoch, in UTC, as `format` writes it.
pub fn format_date(format: &[DatePart], millis: i64) -> String {
    let (days, in_day) = (millis.div_euclid(86_400_000), millis.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let mut out = String::new();
    let number = |out: &mut String, value: i64, width: usize| out.push_str(&format!("{value:0width$}"));
    for part in format {
        match part {
            DatePart::Text(text) => out.push_str(text),
            DatePart::Year { two_digits: true, .. } => number(&mut out, year.rem_euclid(100), 2),
            DatePart::Year { two_digits: false, .. } => number(&mut out, year, 4),
            DatePart::Month { width } => number(&mut out, month, *width),
            DatePart::Day { width } => number(&mut out, day, *width),
            DatePart::Hour { width } => number(&mut out, in_day / 3_600_000, *width),
            DatePart::Minute { width } => number(&mut out, in_day / 60_000 % 60, *width),
            DatePart::Second { width } => number(&mut out, in_day / 1000 % 60, *width),
            DatePart::Millis { width } => number(&mut out, in_day % 1000, *width),
            // Written in UTC, as `TimestampRouter` and `TimestampConverter` set the zone.
            DatePart::Zone { iso: false } => out.push_str("+0000"),
            DatePart::Zone { iso: true } => out.push('Z'),
        }
    }
    out
}

/// Milliseconds since the Unix epoch of `text` read in UTC with `format`, as Java's
/// lenient `SimpleDateFormat.parse` reads it: a field abutting another is read at its
/// width, otherwise all its digits; values past their range roll over (month 13 is the
/// next January); a field the format lacks is the epoch's; text after the format is
/// ignored; spaces and tabs before a number are skipped. `yy` reads two digits as a year
/// within 80 years before and 20 after `now_year`, and other digits as they are.
pub fn parse_date(format: &[DatePart], text: &str, now_year: i64) -> Result<i64, String> {
    let (mut year, mut month, mut day, mut millis_of_day) = (1970, 1, 1, 0i64);
    let mut rest = text;
    for (index, part) in format.iter().enumerate() {
        let width = match part {
            DatePart::Text(literal) => {
                rest = rest
                    .strip_prefix(literal.as_str())
                    .ok_or_else(|| format!("'{text}' does not match the format: '{literal}' expected at '{rest}'"))?;
                continue;
            }
            DatePart::Zone { .. } => {
                let (offset, after) = read_zone(rest).ok_or_else(|| {
                    format!("'{text}' does not match the format: a zone (Z, +hh, +hhmm or +hh:mm) expected at '{rest}'")
                })?;
                millis_of_day -= offset;
                rest = after;
                continue;
            }
            DatePart::Year { two_digits: true, .. } => 2,
            DatePart::Year { two_digits: false, .. } => 4,
            DatePart::Month { width }
            | DatePart::Day { width }
            | DatePart::Hour { width }
            | DatePart::Minute { width }
            | DatePart::Second { width }
            | DatePart::Millis { width } => *width,
        };
        let abutting = format.get(index + 1).is_some_and(|next| !matches!(next, DatePart::Text(_)));
        rest = rest.trim_start_matches([' ', '\t']);
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let taken = if abutting { digits.min(width) } else { digits };
        if taken == 0 {
            return Err(format!("'{text}' does not match the format: a number expected at '{rest}'"));
        }
        // Nine digits keep every sum below in range; no date needs more.
        let number: i64 = rest[..taken]
            .parse()
            .ok()
            .filter(|_| taken <= 9)
            .ok_or_else(|| format!("'{}' in '{text}' is too large", &rest[..taken]))?;
        rest = &rest[taken..];
        match part {
            DatePart::Year { abbreviated: true, .. } if taken == 2 => {
                let century = (now_year - 80).div_euclid(100) * 100;
                year = if century + number < now_year - 80 { century + 100 + number } else { century + number };
            }
            DatePart::Year { .. } => year = number,
            DatePart::Month { .. } => month = number,
            DatePart::Day { .. } => day = number,
            DatePart::Hour { .. } => millis_of_day += number * 3_600_000,
            DatePart::Minute { .. } => millis_of_day += number * 60_000,
            DatePart::Second { .. } => millis_of_day += number * 1000,
            DatePart::Millis { .. } => millis_of_day += number,
            DatePart::Text(_) | DatePart::Zone { .. } => unreachable!("handled above"),
        }
    }
    let (year, month) = (year + (month - 1).div_euclid(12), (month - 1).rem_euclid(12) + 1);
    let days = days_from_civil(year, month) + day - 1;
    days.checked_mul(86_400_000)
        .and_then(|millis| millis.checked_add(millis_of_day))
        .ok_or_else(|| format!("'{text}' is past the range of a timestamp"))
}

/// A zone offset at the start of `text` (`Z`, `+hh`, `+hhmm`, `+hh:mm`, or with `-`), in
/// milliseconds east of UTC, and what follows it.
fn read_zone(text: &str) -> Option<(i64, &str)> {
    if let Some(rest) = text.strip_prefix('Z') {
        return Some((0, rest));
    }
    let sign = match text.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let digits = |from: &str| from.get(..2).filter(|d| d.bytes().all(|b| b.is_ascii_digit()))?.parse::<i64>().ok();
    let hours = digits(&text[1..])?;
    let mut rest = &text[3..];
    let minutes = match rest.strip_prefix(':').unwrap_or(rest) {
        after if digits(after).is_some() => {
            let minutes = digits(after)?;
            rest = &after[2..];
            minutes
        }
        _ => 0,
    };
    Some((sign * (hours * 3_600_000 + minutes * 60_000), rest))
}

/// The year (UTC) of `millis` since the Unix epoch.
pub fn year_of(millis: i64) -> i64 {
    civil_from_days(millis.div_euclid(86_400_000)).0
}

/// The day number since 1970-01-01 of the first of `month` of `year` (Howard Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let (era, year_of_era) = (year.div_euclid(400), year.rem_euclid(400));
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Year, month and day of a day number since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Transforms, TransformProblem> {
        Transforms::parse(&|key| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v))
    }

    #[test]
    fn no_transforms_is_an_empty_chain() {
        assert!(parse(&[]).unwrap().is_empty());
        assert!(parse(&[("transforms", " , ")]).unwrap().is_empty());
    }

    #[test]
    fn a_chain_reads_connects_class_names_in_order() {
        let chain = parse(&[
            ("transforms", "route, stamp,drop"),
            ("transforms.route.type", "org.apache.kafka.connect.transforms.RegexRouter"),
            ("transforms.route.regex", "(.*)-raw"),
            ("transforms.route.replacement", "$1-clean"),
            ("transforms.stamp.type", "InsertHeader"),
            ("transforms.stamp.header", "origin"),
            ("transforms.stamp.value.literal", "sluice"),
            ("transforms.drop.type", "org.apache.kafka.connect.transforms.Filter"),
            ("transforms.drop.predicate", "tombstones"),
            ("predicates", "tombstones"),
            ("predicates.tombstones.type", "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone"),
        ])
        .unwrap();
        let classes: Vec<&str> = chain.steps().iter().map(|s| s.transform.class()).collect();
        assert_eq!(classes, ["RegexRouter", "InsertHeader", "Filter"]);
        let Transform::RegexRouter { regex, find, replacement } = &chain.steps()[0].transform else { panic!() };
        assert_eq!(find.replace("logs-raw", replacement.as_str()), "logs-clean");
        assert!(!regex.is_match("logs-raw-2"), "the regex matches the whole topic");
        assert!(matches!(chain.steps()[2].predicate, Some((Predicate::RecordIsTombstone, false))));
        assert!(chain.knows("transforms.route.regex") && chain.knows("predicates.tombstones.type"));
        assert!(!chain.knows("transforms.route.regx"));
    }

    #[test]
    fn each_problem_names_its_key() {
        let problem = |pairs: &[(&str, &str)]| parse(pairs).unwrap_err();
        let (key, reason) = problem(&[("transforms", "r")]);
        assert_eq!(key, "transforms.r.type");
        assert!(reason.contains("RegexRouter"), "{reason}");
        let (key, reason) = problem(&[("transforms", "r"), ("transforms.r.type", "RegexRouter")]);
        assert_eq!((key.as_str(), reason.as_str()), ("transforms.r.regex", "missing: required by this transform"));
        let (key, reason) = problem(&[
            ("transforms", "r"),
            ("transforms.r.type", "RegexRouter"),
            ("transforms.r.regex", "(unclosed"),
            ("transforms.r.replacement", "x"),
        ]);
        assert_eq!(key, "transforms.r.regex");
        assert_eq!(reason, "'(unclosed' is not a regular expression: unclosed group");
        let (key, reason) = problem(&[
            ("transforms", "f"),
            ("transforms.f.type", "org.apache.kafka.connect.transforms.SetSchemaMetadata$Value"),
        ]);
        assert_eq!(key, "transforms.f.type");
        assert!(reason.contains("carry no schema"), "{reason}");
        let cast = |spec: &'static str| {
            problem(&[("transforms", "c"), ("transforms.c.type", "Cast$Value"), ("transforms.c.spec", spec)])
        };
        let (key, reason) = cast("a:int32,b:decimal");
        assert_eq!(key, "transforms.c.spec");
        assert!(reason.starts_with("'decimal' is not a type Cast casts to"), "{reason}");
        assert!(cast("int32,a:int8").1.contains("'int32' is not field:type"));
        assert!(cast(":int8").1.contains("is not field:type"));
        let header_from = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![("transforms", "h"), ("transforms.h.type", "HeaderFrom$Value")];
            pairs.extend_from_slice(extra);
            problem(&pairs)
        };
        assert_eq!(header_from(&[]).0, "transforms.h.fields");
        let (key, reason) = header_from(&[
            ("transforms.h.fields", "a,b"),
            ("transforms.h.headers", "x"),
            ("transforms.h.operation", "copy"),
        ]);
        assert_eq!(
            (key.as_str(), reason.as_str()),
            ("transforms.h.headers", "lists 1 headers for 2 fields: each field needs its header")
        );
        let (key, reason) = header_from(&[
            ("transforms.h.fields", "a"),
            ("transforms.h.headers", "x"),
            ("transforms.h.operation", "steal"),
        ]);
        assert_eq!((key.as_str(), reason.as_str()), ("transforms.h.operation", "'steal' is neither move nor copy"));
        let (key, reason) = problem(&[("transforms", "f"), ("transforms.f.type", "com.example.MyTransform")]);
        assert_eq!(key, "transforms.f.type");
        assert!(reason.contains("is not a transform Sluice has"), "{reason}");
        let (key, reason) =
            problem(&[("transforms", "f"), ("transforms.f.type", "Filter"), ("transforms.f.predicate", "p")]);
        assert_eq!(key, "transforms.f.predicate");
        assert!(reason.contains("'p' is not one of the aliases listed in `predicates`"), "{reason}");
        let (key, _) =
            problem(&[("transforms", "f"), ("transforms.f.type", "Filter"), ("transforms.f.negate", "true")]);
        assert_eq!(key, "transforms.f.negate");
        let (key, reason) = problem(&[("transforms", "f"), ("transforms.f.type", "InsertField")]);
        assert_eq!(key, "transforms.f.type");
        assert!(reason.contains("InsertField$Key or InsertField$Value"), "{reason}");
        let insert = |extra: (&'static str, &'static str)| {
            problem(&[("transforms", "f"), ("transforms.f.type", "InsertField$Value"), extra]).0
        };
        assert_eq!(insert(("transforms.f.offset.field", "o")), "transforms.f.offset.field");
        assert_eq!(insert(("transforms.f.static.field", "s")), "transforms.f.static.value");
        assert_eq!(insert(("transforms.f.whatever", "x")), "transforms.f.static.field", "nothing to insert");
        let (key, _) = problem(&[("transforms", "v"), ("transforms.v.type", "ValueToKey")]);
        assert_eq!(key, "transforms.v.fields");
        let (key, reason) = problem(&[
            ("transforms", "r"),
            ("transforms.r.type", "ReplaceField$Value"),
            ("transforms.r.renames", "a:b,c"),
        ]);
        assert_eq!((key.as_str(), reason.as_str()), ("transforms.r.renames", "'c' is not old:new"));
        let (key, reason) = problem(&[("transforms", "a,a")]);
        assert_eq!((key.as_str(), reason.as_str()), ("transforms", "alias 'a' is listed twice"));
        let (key, _) = problem(&[("predicates", "p"), ("predicates.p.type", "TopicNameMatches")]);
        assert_eq!(key, "predicates.p.pattern");
        let (key, _) = problem(&[
            ("transforms", "t"),
            ("transforms.t.type", "TimestampRouter"),
            ("transforms.t.timestamp.format", "yyyy-MM-dd EEE"),
        ]);
        assert_eq!(key, "transforms.t.timestamp.format");
        let (key, reason) = problem(&[
            ("transforms", "r"),
            ("transforms.r.type", "RegexRouter"),
            ("transforms.r.regex", "(a)"),
            ("transforms.r.replacement", "$2"),
        ]);
        assert_eq!(key, "transforms.r.replacement");
        assert!(reason.contains("names group 2, and the regex has 1"), "{reason}");
    }

    #[test]
    fn flatten_cast_and_header_from_read_connects_keys() {
        let chain = parse(&[
            ("transforms", "flat,cast,whole,head"),
            ("transforms.flat.type", "org.apache.kafka.connect.transforms.Flatten$Value"),
            ("transforms.flat.delimiter", "_"),
            ("transforms.cast.type", "Cast$Value"),
            ("transforms.cast.spec", "a:INT8, b : float64 ,c:string"),
            ("transforms.whole.type", "Cast$Key"),
            ("transforms.whole.spec", "int64"),
            ("transforms.head.type", "HeaderFrom$Key"),
            ("transforms.head.fields", "id,kind"),
            ("transforms.head.headers", "x-id, x-kind"),
            ("transforms.head.operation", "MOVE"),
        ])
        .unwrap();
        let classes: Vec<&str> = chain.steps().iter().map(|s| s.transform.class()).collect();
        assert_eq!(classes, ["Flatten$Value", "Cast$Value", "Cast$Key", "HeaderFrom$Key"]);
        let Transform::Field { change: FieldChange::Flatten { delimiter }, .. } = &chain.steps()[0].transform else {
            panic!()
        };
        assert_eq!(delimiter, "_");
        let Transform::Field { change: FieldChange::Cast { whole: None, fields }, .. } = &chain.steps()[1].transform
        else {
            panic!()
        };
        let expected = [("a", CastType::Int8), ("b", CastType::Float64), ("c", CastType::String)];
        assert_eq!(fields.iter().map(|(f, t)| (f.as_str(), *t)).collect::<Vec<_>>(), expected);
        assert!(matches!(
            &chain.steps()[2].transform,
            Transform::Field { part: RecordPart::Key, change: FieldChange::Cast { whole: Some(CastType::Int64), .. } }
        ));
        let Transform::HeaderFrom { part: RecordPart::Key, fields, headers, copy: false } = &chain.steps()[3].transform
        else {
            panic!()
        };
        assert_eq!(
            (fields.as_slice(), headers.as_slice()),
            (&["id".to_string(), "kind".into()][..], &["x-id".to_string(), "x-kind".into()][..])
        );
        let flat = parse(&[("transforms", "f"), ("transforms.f.type", "Flatten$Key")]).unwrap();
        assert!(
            matches!(&flat.steps()[0].transform, Transform::Field { change: FieldChange::Flatten { delimiter }, .. } if delimiter == ".")
        );
    }

    #[test]
    fn every_listed_plugin_class_is_one_a_config_can_name() {
        let classes = plugin_classes();
        for (class, _) in &classes {
            let keys = plugin_keys(class).unwrap_or_else(|| panic!("{class} has no keys listed"));
            // Every key listed is one the parser reads: set them all, and none is unknown.
            let (list, prefix) = match class.starts_with(PREDICATE_PACKAGE) {
                true => ("predicates", "predicates.p"),
                false => ("transforms", "transforms.t"),
            };
            let alias = &prefix[list.len() + 1..];
            let mut pairs = vec![(list.to_string(), alias.to_string()), (format!("{prefix}.type"), class.clone())];
            let valid = |key: &str| match key {
                "regex" | "pattern" => "(.*)",
                "replacement" if class.ends_with("RegexRouter") => "$1",
                "target.type" => "string",
                "format" | "timestamp.format" => "yyyy",
                "operation" => "move",
                "spec" => "a:int8",
                "renames" => "a:b",
                "unix.precision" => "seconds",
                "field.syntax.version" => "V2",
                _ => "a",
            };
            pairs.extend(keys.iter().map(|key| (format!("{prefix}.{}", key.name), valid(&key.name).to_string())));
            let chain = Transforms::parse(&|key| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()))
                .unwrap_or_else(|problem| panic!("{class}: {problem:?}"));
            for key in &keys {
                assert!(chain.knows(&format!("{prefix}.{}", key.name)), "{class}: {}", key.name);
            }
        }
        assert!(plugin_keys("org.apache.kafka.connect.transforms.SetSchemaMetadata$Value").is_none());
        assert!(plugin_keys("RegexRouter").is_none(), "by the class name Connect lists");
        assert_eq!(class_of_alias("RegexRouter").as_deref(), Some("org.apache.kafka.connect.transforms.RegexRouter"));
        assert_eq!(class_of_alias("Cast$Value").as_deref(), Some("org.apache.kafka.connect.transforms.Cast$Value"));
        assert_eq!(
            class_of_alias("TopicNameMatches").as_deref(),
            Some("org.apache.kafka.connect.transforms.predicates.TopicNameMatches")
        );
        assert!(class_of_alias("Cast").is_none() && class_of_alias("transforms.RegexRouter").is_none());
        assert_eq!(
            classes.iter().filter(|(_, kind)| *kind == "transformation").count(),
            6 + 2 * FIELD_TRANSFORMS.len()
        );
        for (class, kind) in classes {
            let parsed = if kind == "predicate" {
                parse(&[("predicates", "p"), ("predicates.p.type", &class)])
            } else {
                parse(&[("transforms", "t"), ("transforms.t.type", &class)])
            };
            let Err((key, problem)) = parsed else { continue };
            // Refused only for a key of its own that is missing, never for its class.
            assert!(key != "transforms.t.type" && key != "predicates.p.type", "{class}: {problem}");
        }
    }

    #[test]
    fn timestamp_converter_reads_connects_keys() {
        let converter = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![("transforms", "t"), ("transforms.t.type", "TimestampConverter$Value")];
            pairs.extend_from_slice(extra);
            parse(&pairs)
        };
        let chain = converter(&[
            ("transforms.t.target.type", "string"),
            ("transforms.t.field", "at"),
            ("transforms.t.format", "yyyy-MM-dd"),
            ("transforms.t.unix.precision", "seconds"),
        ])
        .unwrap();
        let Transform::Field {
            change: FieldChange::Timestamp { field, to_text: true, format: Some(_), precision },
            ..
        } = &chain.steps()[0].transform
        else {
            panic!()
        };
        assert_eq!((field.as_deref(), *precision), (Some("at"), UnixPrecision::Seconds));
        let problem = |extra| converter(extra).unwrap_err();
        assert_eq!(problem(&[]).0, "transforms.t.target.type");
        let (key, reason) = problem(&[("transforms.t.target.type", "Timestamp")]);
        assert_eq!(key, "transforms.t.target.type");
        assert!(reason.contains("use string or unix"), "{reason}");
        assert_eq!(problem(&[("transforms.t.target.type", "string")]).0, "transforms.t.format");
        let (key, _) = problem(&[("transforms.t.target.type", "unix"), ("transforms.t.format", "EEE, d MMM yyyy")]);
        assert_eq!(key, "transforms.t.format");
        let (key, _) = problem(&[("transforms.t.target.type", "unix"), ("transforms.t.unix.precision", "ms")]);
        assert_eq!(key, "transforms.t.unix.precision");
        assert!(converter(&[("transforms.t.target.type", "unix")]).is_ok(), "unix from integers needs no format");
    }

    #[test]
    fn dates_are_read_in_utc_as_a_lenient_simple_date_format_reads_them() {
        let read = |pattern: &str, text: &str| parse_date(&date_format(pattern).unwrap(), text, 2026);
        // 2026-12-05T13:07:09.042Z
        let millis = 1_796_476_029_042;
        assert_eq!(read("yyyy-MM-dd'T'HH:mm:ss.SSS", "2026-12-05T13:07:09.042"), Ok(millis));
        assert_eq!(read("yyyyMMddHHmmssSSS", "20261205130709042"), Ok(millis), "abutting fields read at their width");
        assert_eq!(read("d/M/yyyy H:m:s", "5/12/2026 13:7:9 and more"), Ok(millis - 42), "text after is ignored");
        assert_eq!(read("yyyy-MM-dd", "2026-13-01"), read("yyyy-MM-dd", "2027-01-01"), "month 13 rolls over");
        assert_eq!(read("yyyy-MM-dd", "2024-02-29"), Ok(1_709_164_800_000));
        assert_eq!(read("yyyy", "1969"), Ok(-31_536_000_000));
        assert_eq!(read("HH:mm", "01:30"), Ok(5_400_000), "missing fields are the epoch's");
        let year = |text: &str| year_of(read("yy", text).unwrap());
        assert_eq!((year("26"), year("47"), year("45"), year("2026")), (2026, 1947, 2045, 2026));
        assert_eq!((year("5"), year("026")), (5, 26), "only two digits are read around now, as in Java");
        let one_y = |text: &str| year_of(read("y-MM-dd", text).unwrap());
        assert_eq!((one_y("26-03-04"), one_y("2026-03-04")), (2026, 2026), "`y` reads two digits as `yy` does");
        assert_eq!(format_date(&date_format("y").unwrap(), 1_796_476_029_042), "2026", "`y` writes the whole year");
        assert_eq!(read("yyyy-MM-dd HH:mm", " 2026-12-05 \t13:07"), read("yyyy-MM-dd HH:mm", "2026-12-05 13:07"));
        assert!(read("yyyy", "999999999999").unwrap_err().contains("too large"));
        assert!(read("yyyy", "999999999").unwrap_err().contains("past the range"));
        assert!(read("yyyy-MM-dd", "2026/12/05").unwrap_err().contains("'-' expected at '/12/05'"));
        assert!(read("yyyy-MM-dd", "x026-12-05").unwrap_err().contains("a number expected"));
        let iso = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX";
        for zoned in ["2026-12-05T13:07:09.042Z", "2026-12-05T14:07:09.042+01:00", "2026-12-05T08:37:09.042-0430"] {
            assert_eq!(read(iso, zoned), Ok(millis), "{zoned}");
        }
        assert_eq!(read("yyyy-MM-dd HH:mm:ss.SSS Z", "2026-12-05 15:07:09.042 +02"), Ok(millis));
        assert!(read(iso, "2026-12-05T13:07:09.042 UTC").unwrap_err().contains("a zone"));
        let format = |pattern: &str| format_date(&date_format(pattern).unwrap(), millis);
        assert_eq!(format(iso), "2026-12-05T13:07:09.042Z");
        assert_eq!(format("HH:mm Z"), "13:07 +0000");
        for millis in [0, 1_796_476_029_042, -86_400_001, 253_402_300_799_999] {
            let format = date_format("yyyy-MM-dd HH:mm:ss.SSS").unwrap();
            assert_eq!(parse_date(&format, &format_date(&format, millis), 2026), Ok(millis), "{millis}");
        }
    }

    #[test]
    fn a_predicate_two_transforms_name_serves_both() {
        let chain = parse(&[
            ("transforms", "a,b"),
            ("transforms.a.type", "Filter"),
            ("transforms.a.predicate", "p"),
            ("transforms.b.type", "Filter"),
            ("transforms.b.predicate", "p"),
            ("transforms.b.negate", "true"),
            ("predicates", "p"),
            ("predicates.p.type", "HasHeaderKey"),
            ("predicates.p.name", "skip"),
        ])
        .unwrap();
        assert!(matches!(&chain.steps()[0].predicate, Some((Predicate::HasHeaderKey(n), false)) if n == "skip"));
        assert!(matches!(&chain.steps()[1].predicate, Some((Predicate::HasHeaderKey(n), true)) if n == "skip"));
    }

    #[test]
    fn java_replacements_become_the_regex_crates() {
        assert_eq!(java_replacement("$1-x", 1).unwrap(), "${1}-x");
        assert_eq!(java_replacement("$12", 1).unwrap(), "${1}2", "Java stops at the last group there is");
        assert_eq!(java_replacement("$12", 12).unwrap(), "${12}");
        assert_eq!(java_replacement(r"a\$b${name}", 1).unwrap(), "a$$b${name}");
        assert!(java_replacement("$", 0).is_err());
    }

    #[test]
    fn dates_are_written_in_utc_as_simple_date_format_writes_them() {
        let format = |pattern: &str, millis: i64| format_date(&date_format(pattern).unwrap(), millis);
        // 2026-12-05T13:07:09.042Z
        let millis = 1_796_476_029_042;
        assert_eq!(format("yyyyMMdd", millis), "20261205");
        assert_eq!(format("yyyy-MM-dd'T'HH:mm:ss.SSS", millis), "2026-12-05T13:07:09.042");
        assert_eq!(format("yy.M.d 'o''clock' H", millis), "26.12.5 o'clock 13");
        assert_eq!(format("yyyyMMdd", 0), "19700101");
        assert_eq!(format("yyyy-MM-dd", 951_782_400_000), "2000-02-29");
        assert!(date_format("yyyy-MMM").is_err(), "a month's name is not written");
        assert!(date_format("'open").is_err());
    }

    #[test]
    fn regex_router_replaces_the_leftmost_match_of_a_topic_it_matches_whole() {
        let route = |regex: &str, replacement: &str, topic: &str| {
            let chain = parse(&[
                ("transforms", "r"),
                ("transforms.r.type", "RegexRouter"),
                ("transforms.r.regex", regex),
                ("transforms.r.replacement", replacement),
            ])
            .unwrap();
            let Transform::RegexRouter { regex, find, replacement } = &chain.steps()[0].transform else { panic!() };
            regex.is_match(topic).then(|| find.replace(topic, replacement.as_str()).into_owned())
        };
        // Java's `matches()` decides, then `replaceFirst` replaces what `find()` finds first.
        assert_eq!(route("orders|orders-.*", "orders-all", "orders-eu").as_deref(), Some("orders-all-eu"));
        assert_eq!(route("(.*?)(-raw)?", "$1", "orders-raw").as_deref(), Some("orders-raw"));
        assert_eq!(route("(.*)-raw", "$1", "orders-raw").as_deref(), Some("orders"));
        assert_eq!(route("orders", "x", "orders-eu"), None);
    }

    #[test]
    fn field_syntax_v2_paths_split_as_connects_single_field_path() {
        let steps = |path: &str| field_path(path).unwrap();
        // FieldPathNotationTest's cases.
        assert_eq!(steps(".."), ["", "", ""]);
        assert_eq!(steps("foo.."), ["foo", "", ""]);
        assert_eq!(steps(".bar."), ["", "bar", ""]);
        assert_eq!(steps("..baz"), ["", "", "baz"]);
        assert!(steps("").is_empty());
        assert_eq!(steps("foo.bar.baz"), ["foo", "bar", "baz"]);
        assert_eq!(steps("foo`bar`baz"), ["foo`bar`baz"]);
        assert_eq!(steps("`foo.bar.baz`"), ["foo.bar.baz"]);
        assert_eq!(steps("foo.`bar.baz`"), ["foo", "bar.baz"]);
        assert_eq!(steps("`foo.bar`.baz"), ["foo.bar", "baz"]);
        assert_eq!(steps("foo.`bar`.baz"), ["foo", "bar", "baz"]);
        assert_eq!(steps("foo.``bar.baz`"), ["foo", "`bar.baz"]);
        assert_eq!(steps("foo.`bar.baz``"), ["foo", "bar.baz`"]);
        assert_eq!(steps("foo.`ba`r.baz`"), ["foo", "ba`r.baz"]);
        assert_eq!(steps("foo.ba`r.baz"), ["foo", "ba`r", "baz"]);
        assert_eq!(steps("foo.``bar``.baz"), ["foo", "`bar`", "baz"]);
        assert_eq!(steps("``foo.bar.baz``"), ["`foo.bar.baz`"]);
        assert_eq!(steps(r"foo.`bar\`.baz`"), ["foo", "bar`.baz"]);
        assert_eq!(steps("foo.`bar.`baz`"), ["foo", "bar.`baz"]);
        assert_eq!(steps(r"foo.`bar\`.`baz`"), ["foo", "bar`.`baz"]);
        assert_eq!(steps(r"foo.`bar\\`.\`baz`"), ["foo", r"bar\`.\`baz"]);
        for (path, at) in [("`foo.bar.baz", 0), ("foo.`bar.baz", 4), ("foo.bar.`baz", 8), (r"foo.bar.`baz\`", 8)] {
            let error = field_path(path).unwrap_err();
            assert!(error.contains(&format!("backtick at position {at}")), "{path}: {error}");
        }
    }

    #[test]
    fn field_syntax_version_is_read_never_ignored() {
        let extract = |version: &str| {
            parse(&[
                ("transforms", "x"),
                ("transforms.x.type", "ExtractField$Value"),
                ("transforms.x.field", "a.b"),
                ("transforms.x.field.syntax.version", version),
            ])
        };
        let path = |chain: Transforms| match &chain.steps()[0].transform {
            Transform::Field { change: FieldChange::Extract { path }, .. } => path.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(path(extract("v2").unwrap()), ["a", "b"]);
        assert_eq!(path(extract("V1").unwrap()), ["a.b"]);
        assert_eq!(
            extract("V3").unwrap_err(),
            ("transforms.x.field.syntax.version".into(), "'V3' is not V1 or V2".into())
        );
        for class in ["Cast$Value", "ValueToKey", "HeaderFrom$Key", "MaskField$Value"] {
            let (key, reason) = parse(&[
                ("transforms", "x"),
                ("transforms.x.type", class),
                ("transforms.x.field.syntax.version", "V2"),
            ])
            .unwrap_err();
            assert_eq!(key, "transforms.x.field.syntax.version", "{class}");
            assert!(reason.contains("ExtractField only"), "{class}: {reason}");
        }
    }

    #[test]
    fn renames_and_mask_replacements_are_checked_as_connect_checks_them() {
        let problem = |key: &str, value: &str, class: &str| {
            parse(&[("transforms", "x"), ("transforms.x.type", class), ("transforms.x.fields", "a"), (key, value)])
                .unwrap_err()
        };
        let (key, reason) = problem("transforms.x.renames", "a:b:c", "ReplaceField$Value");
        assert_eq!((key.as_str(), reason.as_str()), ("transforms.x.renames", "'a:b:c' is not old:new"));
        let (key, reason) = problem("transforms.x.replacement", "", "MaskField$Value");
        assert_eq!(key, "transforms.x.replacement");
        assert!(reason.contains("is empty"), "{reason}");
        let keys = plugin_keys("org.apache.kafka.connect.transforms.MaskField$Value").unwrap();
        let replacement = keys.iter().find(|k| k.name == "replacement").unwrap();
        assert!(!replacement.required && replacement.default_value.is_none(), "optional, null by default");
    }

    #[test]
    fn lists_that_name_a_field_twice_mean_it_once_as_connects_maps_do() {
        let one = |pairs: &[(&str, &str)]| {
            let mut all = vec![("transforms", "x")];
            all.extend_from_slice(pairs);
            format!("{:?}", parse(&all).unwrap().steps()[0].transform)
        };
        let key = one(&[("transforms.x.type", "ValueToKey"), ("transforms.x.fields", "k,j,k")]);
        assert_eq!(key, r#"ValueToKey { fields: ["k", "j"] }"#);
        let cast = one(&[("transforms.x.type", "Cast$Value"), ("transforms.x.spec", "n:int8,m:int32,n:string")]);
        assert!(cast.contains(r#"fields: [("n", String), ("m", Int32)]"#), "{cast}");
        // Empty is a value, as in Connect: only a missing one is refused.
        let header = one(&[
            ("transforms.x.type", "InsertHeader"),
            ("transforms.x.header", "h"),
            ("transforms.x.value.literal", ""),
        ]);
        assert_eq!(header, r#"InsertHeader { header: "h", value: "" }"#);
    }
}
