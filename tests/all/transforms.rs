//! Kafka Connect's transforms (`transforms`, `predicates`) on real connectors' records:
//! routed and stamped records reach the local log under their new topic, dropped ones
//! are not delivered but their offsets commit, JSON lines are reshaped (a line that is
//! not JSON refused alone), and a transform Sluice does not run is refused with its key
//! named.

use sluice::config::{ConnectorConfig, DEFAULT_TENANT};
use sluice::storage::{Namespace, State};

use crate::common::*;
use crate::file_pulse::{Dirs, pulse};

fn counter_value(seq: u64) -> String {
    String::from_utf8(counter::generator::value(0, seq, 64)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_routed_and_stamped_record_reaches_the_log_under_its_new_topic() {
    let host = TestHost::new(&["counter"]).await;
    host.start(connector(
        "routed",
        "counter",
        &[
            ("topic", "numbers-raw"),
            ("record.count", "50"),
            ("transforms", "route,origin"),
            ("transforms.route.type", "org.apache.kafka.connect.transforms.RegexRouter"),
            ("transforms.route.regex", "(.*)-raw"),
            ("transforms.route.replacement", "$1"),
            ("transforms.origin.type", "org.apache.kafka.connect.transforms.InsertHeader"),
            ("transforms.origin.header", "origin"),
            ("transforms.origin.value.literal", "sluice"),
        ],
    ))
    .await;
    wait_until("the 50th record committed", || (host.seq("routed", r#"{"counter":0}"#)? == 49).then_some(())).await;
    assert_eq!(host.values("numbers"), (0..50).map(counter_value).collect::<Vec<_>>());
    assert!(host.values("numbers-raw").is_empty(), "nothing is written under the topic before routing");
    let stored = host.herder.services().stores.local().read(DEFAULT_TENANT, "numbers", 0, 100).unwrap();
    for record in &stored {
        let headers: Vec<(&str, &[u8])> = record.record.headers.iter().map(|(k, v)| (k.as_str(), &v[..])).collect();
        assert_eq!(headers, [("origin", b"sluice".as_slice())]);
    }
    let topics = host.herder.services().topics.list(&Namespace::new(DEFAULT_TENANT, "routed")).unwrap();
    assert_eq!(topics, ["numbers"], "the active topics are the ones written to");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_record_is_not_delivered_and_its_offset_commits() {
    let host = TestHost::new(&["counter"]).await;
    let filtered = [
        ("topic", "quiet"),
        ("record.count", "40"),
        ("transforms", "drop"),
        ("transforms.drop.type", "org.apache.kafka.connect.transforms.Filter"),
        ("transforms.drop.predicate", "is-quiet"),
        ("predicates", "is-quiet"),
        ("predicates.is-quiet.type", "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"),
        ("predicates.is-quiet.pattern", "qu.*"),
    ];
    host.start(connector("filtered", "counter", &filtered)).await;
    wait_until("the 40th record's offset committed", || {
        (host.seq("filtered", r#"{"counter":0}"#)? == 39).then_some(())
    })
    .await;
    assert!(host.values("quiet").is_empty(), "every record matched the predicate and was dropped");
    // Negated, the same predicate keeps them: the connector resumes after the dropped ones.
    let mut kept = filtered.to_vec();
    kept.extend([("record.count", "60"), ("transforms.drop.negate", "true")]);
    host.herder.put_config(connector("filtered", "counter", &kept)).await.unwrap();
    wait_until("the 60th record committed", || (host.seq("filtered", r#"{"counter":0}"#)? == 59).then_some(())).await;
    assert_eq!(host.values("quiet"), (40..60).map(counter_value).collect::<Vec<_>>());
    assert_eq!(host.status("filtered").unwrap().connector.state, State::Running);
}

#[test]
fn a_transform_sluice_does_not_run_is_refused_naming_its_key() {
    let refused = |pairs: &[(&str, &str)]| {
        let mut config = serde_json::json!({"connector.class": "counter", "topic": "t", "transforms": "x"});
        for (key, value) in pairs {
            config[*key] = serde_json::Value::String(value.to_string());
        }
        let text = serde_json::json!({"name": "c", "config": config}).to_string();
        ConnectorConfig::from_json(&text, "c.json").expect_err("refused")
    };
    let error = refused(&[("transforms.x.type", "org.apache.kafka.connect.transforms.Cast$Value")]);
    assert_eq!(error.key.as_deref(), Some("transforms.x.type"));
    assert!(
        error.to_string().starts_with(
            "c.json: transforms.x.type: 'org.apache.kafka.connect.transforms.Cast$Value' needs a schema'd value"
        ),
        "{error}"
    );
    assert_eq!(refused(&[]).key.as_deref(), Some("transforms.x.type"));
    let error = refused(&[
        ("transforms.x.type", "RegexRouter"),
        ("transforms.x.regex", "[unclosed"),
        ("transforms.x.replacement", "y"),
    ]);
    assert_eq!(error.key.as_deref(), Some("transforms.x.regex"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_are_reshaped_and_a_line_that_is_not_json_is_refused_alone() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let lines = [r#"{"id":"a","secret":1,"v":1}"#, r#"{"id":"b","secret":2,"v":2}"#, "not json", r#"{"id":"c","v":3}"#];
    std::fs::write(dirs.inbox.path().join("events.json"), lines.join("\n") + "\n").unwrap();
    let extra = [
        ("errors.tolerance", "all"),
        ("transforms", "clean,key"),
        ("transforms.clean.type", "org.apache.kafka.connect.transforms.ReplaceField$Value"),
        ("transforms.clean.exclude", "secret"),
        ("transforms.key.type", "org.apache.kafka.connect.transforms.ValueToKey"),
        ("transforms.key.fields", "id"),
    ];
    host.start(pulse("events", &dirs.config(&extra))).await;
    let refused = wait_until("the line that is not JSON refused", || {
        let status = host.status("events")?;
        let task = status.tasks.first()?;
        (task.records_refused == 1).then_some(task.records_refused)
    })
    .await;
    assert_eq!(refused, 1);
    let expected = [
        (r#"{"id":"a"}"#, r#"{"id":"a","v":1}"#),
        (r#"{"id":"b"}"#, r#"{"id":"b","v":2}"#),
        (r#"{"id":"c"}"#, r#"{"id":"c","v":3}"#),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    wait_until("the three JSON lines", || (host.keyed_values("lines").len() >= 3).then_some(())).await;
    assert_eq!(host.keyed_values("lines"), expected);
    assert_eq!(host.status("events").unwrap().tasks[0].state, State::Running);
}
