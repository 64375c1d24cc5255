//! A connector's transforms ([`crate::config::transforms`]) applied to one record as the
//! checks add it to the batch being built: the topic it goes to, the headers it carries,
//! or that it is dropped. A dropped record still commits its offset, as an offset-only
//! record does, so a restart does not read it again; a topic a transform makes is checked
//! as a plugin's would be.

use crate::config::Transforms;
use crate::config::transforms::{Predicate, Transform, format_date};
use crate::storage::{Part, RecordBatchBuilder};

/// A record as the transforms see it: its topic, headers (parts of the batch's buffer) and
/// what predicates read.
pub(super) struct Transformed<'c> {
    /// The topic a router made, when one did, and the alias of the last that did.
    pub topic: Option<(String, &'c str)>,
    pub headers: Vec<(Part, Part)>,
}

/// Runs the chain over one record; `None` when a transform drops it.
pub(super) fn apply<'c>(
    chain: &'c Transforms,
    topic: &str,
    mut headers: Vec<(Part, Part)>,
    tombstone: bool,
    timestamp_ms: i64,
    builder: &mut RecordBatchBuilder,
) -> Result<Option<Transformed<'c>>, String> {
    let mut routed: Option<(String, &str)> = None;
    for step in chain.steps() {
        let current = routed.as_ref().map_or(topic, |(topic, _)| topic.as_str());
        if let Some((predicate, negate)) = &step.predicate {
            let holds = match predicate {
                Predicate::TopicNameMatches(regex) => regex.is_match(current),
                Predicate::HasHeaderKey(name) => has_header(builder, &headers, name)?,
                Predicate::RecordIsTombstone => tombstone,
            };
            if holds == *negate {
                continue;
            }
        }
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
        }
    }
    Ok(Some(Transformed { topic: routed, headers }))
}

fn has_header(builder: &RecordBatchBuilder, headers: &[(Part, Part)], name: &str) -> Result<bool, String> {
    for (key, _) in headers {
        if builder.text(*key, "header key")?.1 == name {
            return Ok(true);
        }
    }
    Ok(false)
}
