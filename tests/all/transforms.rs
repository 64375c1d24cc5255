//! Kafka Connect's transforms (`transforms`, `predicates`) on real connectors' records:
//! routed and stamped records reach the local log under their new topic, dropped ones
//! are not delivered but their offsets commit, JSON lines are reshaped (a line that is
//! not JSON refused alone; nested objects flattened, fields cast, timestamps converted and
//! fields moved into headers), and a transform Sluice does not run is refused with its key
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
async fn regex_router_replaces_the_leftmost_match_as_javas_replace_first() {
    let host = TestHost::new(&["counter"]).await;
    let config = [
        ("topic", "orders-eu"),
        ("record.count", "5"),
        ("transforms", "route"),
        ("transforms.route.type", "RegexRouter"),
        ("transforms.route.regex", "orders|orders-.*"),
        ("transforms.route.replacement", "all"),
    ];
    host.start(connector("leftmost", "counter", &config)).await;
    wait_until("the 5th record committed", || (host.seq("leftmost", r#"{"counter":0}"#)? == 4).then_some(())).await;
    // `matches()` decides (through the second alternative); `replaceFirst` then replaces
    // what `find()` finds first: `orders`, the first alternative.
    assert_eq!(host.values("all-eu").len(), 5);
    assert!(host.values("all").is_empty() && host.values("orders-eu").is_empty());
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
        ConnectorConfig::from_json(&text, "c.json").and_then(|c| c.check()).expect_err("refused")
    };
    let error = refused(&[("transforms.x.type", "org.apache.kafka.connect.transforms.SetSchemaMetadata$Value")]);
    assert_eq!(error.key.as_deref(), Some("transforms.x.type"));
    assert!(
        error.to_string().starts_with(
            "c.json: transforms.x.type: 'org.apache.kafka.connect.transforms.SetSchemaMetadata$Value' sets a schema's name and version"
        ),
        "{error}"
    );
    let error = refused(&[("transforms.x.type", "Cast$Value"), ("transforms.x.spec", "n:decimal")]);
    assert_eq!(error.key.as_deref(), Some("transforms.x.spec"));
    assert_eq!(refused(&[]).key.as_deref(), Some("transforms.x.type"));
    let error = refused(&[
        ("transforms.x.type", "RegexRouter"),
        ("transforms.x.regex", "[unclosed"),
        ("transforms.x.replacement", "y"),
    ]);
    assert_eq!(error.key.as_deref(), Some("transforms.x.regex"));
}

/// The count of records the connector's first task refused, once it is one.
async fn first_refusal(host: &TestHost, connector: &str, what: &str) -> u64 {
    wait_until(what, || {
        let status = host.status(connector)?;
        let task = status.tasks.first()?;
        (task.records_refused == 1).then_some(task.records_refused)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_are_reshaped_and_a_line_that_is_not_json_is_refused_alone() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let lines = [r#"{"id":"a","secret":1,"v":1}"#, r#"{"id":"b","secret":2,"v":2}"#, "not json", r#"{"id":"c","v":3}"#];
    std::fs::write(dirs.inbox.path().join("events.json"), lines.join("\n") + "\n").unwrap();
    let extra = [
        ("errors.tolerance", "all"),
        ("errors.deadletterqueue.topic.name", "dlq"),
        ("transforms", "clean,key"),
        ("transforms.clean.type", "org.apache.kafka.connect.transforms.ReplaceField$Value"),
        ("transforms.clean.exclude", "secret"),
        ("transforms.key.type", "org.apache.kafka.connect.transforms.ValueToKey"),
        ("transforms.key.fields", "id"),
    ];
    host.start(pulse("events", &dirs.config(&extra))).await;
    let refused = first_refusal(&host, "events", "the line that is not JSON refused").await;
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
    // Its dead-letter copy names the stage and the transform, as Connect's does.
    let dead = host.herder.services().stores.local().read(DEFAULT_TENANT, "dlq", 0, 10).unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let header = |name: &str| {
        dead[0].record.headers.iter().find(|(k, _)| k == name).map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    assert_eq!(header("__connect.errors.stage").as_deref(), Some("TRANSFORMATION"));
    assert_eq!(
        header("__connect.errors.class.name").as_deref(),
        Some("org.apache.kafka.connect.transforms.ReplaceField$Value")
    );
    assert_eq!(dead[0].record.value.as_deref(), Some(&b"not json"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_json_is_flattened_cast_converted_and_moved_into_headers() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let lines = [
        r#"{"id":7,"device":{"name":"pump","site":{"room":"b2"}},"reading":{"temp":"21.5","ok":1,"at":1796476029},"tags":[1,{"x":2}]}"#,
        r#"{"id":8,"device":{"name":"fan","site":{}},"reading":{"temp":"hot","ok":0}}"#,
        r#"{"id":9,"device":{"name":"fan"},"reading":{"temp":"-4","ok":0,"at":0}}"#,
    ];
    std::fs::write(dirs.inbox.path().join("readings.json"), lines.join("\n") + "\n").unwrap();
    let extra = [
        ("errors.tolerance", "all"),
        ("transforms", "flat,cast,name,when"),
        ("transforms.flat.type", "org.apache.kafka.connect.transforms.Flatten$Value"),
        ("transforms.flat.delimiter", "_"),
        ("transforms.cast.type", "org.apache.kafka.connect.transforms.Cast$Value"),
        ("transforms.cast.spec", "reading_temp:float64,reading_ok:boolean,id:string"),
        ("transforms.name.type", "org.apache.kafka.connect.transforms.HeaderFrom$Value"),
        ("transforms.name.fields", "device_name,id"),
        ("transforms.name.headers", "device,record.id"),
        ("transforms.name.operation", "move"),
        ("transforms.when.type", "org.apache.kafka.connect.transforms.TimestampConverter$Value"),
        ("transforms.when.field", "reading_at"),
        ("transforms.when.target.type", "string"),
        ("transforms.when.format", "yyyy-MM-dd HH:mm:ss"),
        ("transforms.when.unix.precision", "seconds"),
    ];
    host.start(pulse("flat", &dirs.config(&extra))).await;
    let refused = first_refusal(&host, "flat", "the line whose temp is no number refused").await;
    assert_eq!(refused, 1);
    wait_until("the two other lines", || (host.values("lines").len() >= 2).then_some(())).await;
    assert_eq!(
        host.values("lines"),
        [
            r#"{"device_site_room":"b2","reading_temp":21.5,"reading_ok":true,"reading_at":"2026-12-05 13:07:09","tags":[1,{"x":2}]}"#,
            r#"{"reading_temp":-4.0,"reading_ok":false,"reading_at":"1970-01-01 00:00:00"}"#,
        ]
    );
    let stored = host.herder.services().stores.local().read(DEFAULT_TENANT, "lines", 0, 10).unwrap();
    let moved: Vec<Vec<(String, String)>> = stored
        .iter()
        .map(|record| {
            let headers = record.record.headers.iter();
            headers
                .filter(|(key, _)| !key.starts_with("file."))
                .map(|(key, value)| (key.to_string(), String::from_utf8(value.to_vec()).unwrap()))
                .collect()
        })
        .collect();
    let pairs = |list: [(&str, &str); 2]| list.map(|(k, v)| (k.to_string(), v.to_string())).to_vec();
    assert_eq!(
        moved,
        [pairs([("device", "pump"), ("record.id", "7")]), pairs([("device", "fan"), ("record.id", "9")])]
    );
}
