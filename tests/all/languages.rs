//! The Python (`sensor-fleet`, componentize-py) and JavaScript (`ndjson-replay`,
//! componentize-js) connectors in the same host as a Rust one, through the same world:
//! what they deliver, and the effect of each import they call (the offset readers on
//! resume and in `tick`, `request-task-reconfiguration` when their work is done,
//! `raise-error` on an offset they cannot continue from). Logging and SIGKILL recovery
//! are checked end to end in `tests/e2e/languages.rs`.

use serde_json::{Value, json};
use sluice::config::DEFAULT_TENANT;
use sluice::storage::Namespace;
use sluice::storage::State;

use crate::common::*;
use crate::expected::{assert_fleet_complete, assert_replay_complete};

const PLUGINS: &[&str] = &["counter", "sensor-fleet", "ndjson-replay"];

#[test]
fn every_language_plugin_was_built() {
    // The build leaves a plugin out when its toolchain is missing; the tests must not.
    assert!(sluice::PLUGIN_BUILD_PROBLEMS.is_empty(), "{}", sluice::PLUGIN_BUILD_PROBLEMS);
}

/// Waits until every partition has committed its last offset and the connector has then
/// dropped its tasks: its `tick` saw (with the offset reader) that everything is committed
/// and requested a reconfiguration, after which `task-configs` returned no tasks.
async fn wait_all_tasks_retired(host: &TestHost, name: &str, last: &[(String, Value)]) {
    wait_until(&format!("{name} to commit its last offsets"), || {
        last.iter().all(|(partition, offset)| host.offset(name, partition).as_ref() == Some(offset)).then_some(())
    })
    .await;
    wait_until(&format!("{name} to retire its tasks"), || {
        let status = host.status(name)?;
        (status.connector.state == State::Running && status.tasks.is_empty()).then_some(())
    })
    .await;
}

/// The last offsets of a fleet of `fleet` sensors sending `readings` each.
fn fleet_done(fleet: u64, readings: u64) -> Vec<(String, Value)> {
    (0..fleet).map(|n| (format!(r#"{{"sensor":"sensor-{n:04}"}}"#), json!({"seq": readings - 1}))).collect()
}

/// The last offsets of a replay of `files` (with their line counts), `loops` times.
fn replay_done(files: &[(&str, u64)], loops: u64) -> Vec<(String, Value)> {
    files
        .iter()
        .map(|(f, lines)| (format!(r#"{{"file":"{f}"}}"#), json!({"loop": loops - 1, "line": lines - 1})))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_javascript_and_rust_connectors_run_side_by_side() {
    let host = TestHost::new(PLUGINS).await;
    host.start(connector("rust", "counter", &[("topic", "counted"), ("record.count", "500")])).await;
    host.start(connector(
        "python",
        "sensor-fleet",
        &[
            ("topic", "readings"),
            ("tasks.max", "2"),
            ("fleet.size", "5"),
            ("readings.per.sensor", "40"),
            ("seed", "7"),
            ("monitor.interval.ms", "50"),
        ],
    ))
    .await;
    host.start(connector(
        "javascript",
        "ndjson-replay",
        &[
            ("topic", "replayed"),
            ("tasks.max", "2"),
            ("replay.rate", "0"),
            ("replay.loops", "2"),
            ("monitor.interval.ms", "50"),
        ],
    ))
    .await;
    wait_all_tasks_retired(&host, "python", &fleet_done(5, 40)).await;
    wait_all_tasks_retired(&host, "javascript", &replay_done(&[("clicks.ndjson", 1000), ("orders.ndjson", 400)], 2))
        .await;
    wait_until("the counter's 500 records", || (host.seq("rust", r#"{"counter":0}"#)? == 499).then_some(())).await;

    assert_fleet_complete(&host.values("readings"), 5, 40, 7);
    assert_replay_complete(&host.keyed_values("replayed"), &["clicks.ndjson", "orders.ndjson"], 2);
    assert_eq!(host.values("counted").len(), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_tasks_resume_from_committed_offsets() {
    let host = TestHost::new(PLUGINS).await;
    let fleet = [
        ("topic", "readings"),
        ("tasks.max", "2"),
        ("fleet.size", "3"),
        ("readings.per.sensor", "150"),
        ("readings.per.second", "150"),
    ];
    let replay = [("topic", "replayed"), ("tasks.max", "2"), ("replay.rate", "300")];
    host.start(connector("python", "sensor-fleet", &fleet)).await;
    host.start(connector("javascript", "ndjson-replay", &replay)).await;
    // tasks.max splits the fleet (3 sensors) and the files (2): two tasks each.
    for name in ["python", "javascript"] {
        wait_until(&format!("{name} to run two tasks"), || {
            let tasks = host.status(name)?.tasks;
            (tasks.len() == 2 && tasks.iter().all(|t| t.state == State::Running)).then_some(())
        })
        .await;
    }
    wait_until("both to be part-way", || {
        let fleet = host.seq("python", r#"{"sensor":"sensor-0000"}"#)?;
        let replay = host.offset("javascript", r#"{"file":"orders.ndjson"}"#)?["line"].as_u64()?;
        (fleet >= 10 && replay >= 30).then_some(())
    })
    .await;
    let host = host.reopen().await;
    let stopped_at = host.seq("python", r#"{"sensor":"sensor-0000"}"#).unwrap();
    assert!(stopped_at < 149, "the fleet should have been stopped part-way (at {stopped_at})");
    host.start(connector("python", "sensor-fleet", &fleet)).await;
    host.start(connector("javascript", "ndjson-replay", &replay)).await;
    wait_all_tasks_retired(&host, "python", &fleet_done(3, 150)).await;
    wait_all_tasks_retired(&host, "javascript", &replay_done(&[("clicks.ndjson", 1000), ("orders.ndjson", 400)], 1))
        .await;
    assert_fleet_complete(&host.values("readings"), 3, 150, 1);
    assert_replay_complete(&host.keyed_values("replayed"), &["clicks.ndjson", "orders.ndjson"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_connector_raises_an_error_when_its_limit_drops_below_what_was_sent() {
    let host = TestHost::new(&["sensor-fleet"]).await;
    let config = |readings: &'static str| {
        connector(
            "fleet",
            "sensor-fleet",
            &[("fleet.size", "2"), ("readings.per.sensor", readings), ("monitor.interval.ms", "50")],
        )
    };
    host.start(config("30")).await;
    wait_all_tasks_retired(&host, "fleet", &fleet_done(2, 30)).await;
    let host = host.reopen().await;
    host.start(config("10")).await;
    let failed = host.wait_state("fleet", State::Failed).await;
    let trace = failed.connector.trace.unwrap_or_default();
    assert!(
        trace.contains("sensor-0000 has 30 readings committed, more than readings.per.sensor=10"),
        "unexpected trace: {trace}"
    );
    assert_eq!(host.values("sensors").len(), 60, "nothing more may be sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_task_raises_an_error_for_an_offset_past_the_end_of_its_file() {
    let host = TestHost::new(&["ndjson-replay"]).await;
    // As if the bundled file had been longer when this offset was committed.
    let stale = (r#"{"file":"orders.ndjson"}"#.to_string(), r#"{"line":5000,"loop":0}"#.to_string());
    host.herder
        .services()
        .stores
        .offsets()
        .commit_offsets(&Namespace::new(DEFAULT_TENANT, "replay"), &[stale])
        .unwrap();
    host.start(connector("replay", "ndjson-replay", &[("replay.files", "orders.ndjson,clicks.ndjson")])).await;
    let failed = host.wait_task("replay", 0, State::Failed).await;
    let trace = failed.trace.unwrap_or_default();
    assert!(
        trace.contains(r#"committed offset {"line":5000,"loop":0} of orders.ndjson is past its last line (400 lines)"#),
        "unexpected trace: {trace}"
    );
    assert!(host.values("replay").is_empty(), "a failed start must send nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_configs_are_checked_by_key() {
    let host = TestHost::new(&["sensor-fleet", "ndjson-replay"]).await;
    let error = host.herder.start(connector("f", "sensor-fleet", &[("fleet.size", "0")])).await.unwrap_err();
    assert_eq!((error.key.as_deref(), error.reason.as_str()), (Some("fleet.size"), "must be at least 1"));
    let error =
        host.herder.start(connector("r", "ndjson-replay", &[("replay.files", "nope.ndjson")])).await.unwrap_err();
    assert_eq!(error.key.as_deref(), Some("replay.files"));
    assert!(error.reason.contains("no bundled file 'nope.ndjson'"), "{}", error.reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_task_whose_memory_keeps_growing_is_recycled_before_its_cap() {
    // componentize-py never frees the `bytes` of returned records, so 8,000 readings of
    // 8 KiB each would need about 64 MiB more than the default cap allows.
    let host = TestHost::new(&["sensor-fleet"]).await;
    let config = |name: &str, topic: &str, recycle: &str| {
        connector(
            name,
            "sensor-fleet",
            &[
                ("topic", topic),
                ("fleet.size", "2"),
                ("readings.per.sensor", "4000"),
                ("record.min.bytes", "8192"),
                ("batch.size", "200"),
                ("sandbox.memory.recycle.percent", recycle),
            ],
        )
    };
    host.start(config("recycled", "readings", "75")).await;
    let first = host.wait_task("recycled", 0, State::Running).await.instance;
    // Once its sensors have sent everything the connector reconfigures the finished task
    // away, so its status is watched while it runs, not read after.
    let mut recycled = false;
    wait_until("all 8,000 readings", || {
        if let Some(task) = host.status("recycled").and_then(|s| s.tasks.into_iter().find(|t| t.id == 0)) {
            assert_ne!(task.state, State::Failed, "{:?}", task.trace);
            recycled |= task.instance != first;
        }
        (host.seq("recycled", r#"{"sensor":"sensor-0000"}"#)? == 3999
            && host.seq("recycled", r#"{"sensor":"sensor-0001"}"#)? == 3999)
            .then_some(())
    })
    .await;
    assert!(recycled, "the task should have been recycled into a new sandbox");
    assert_fleet_complete(&host.values("readings"), 2, 4000, 1);

    // The same with recycling off fails at the cap: the growth is real.
    host.start(config("unrecycled", "other", "0")).await;
    let failed = host.wait_task("unrecycled", 0, State::Failed).await;
    assert!(
        failed.trace.as_deref().unwrap_or_default().contains("exceeded memory cap of 64 MiB"),
        "{:?}",
        failed.trace
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_config_is_valid_for_its_plugin() {
    // A worker with a Kafka cluster declared, for the examples with destination=kafka
    // (validation does not connect).
    let host = TestHost::with_tenants(PLUGINS, "[kafka]\n\"bootstrap.servers\" = \"127.0.0.1:9\"\n").await;
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        let config = sluice::config::ConnectorConfig::from_file(&path).unwrap();
        if let Err(e) = host.herder.validate(&config).await {
            panic!("{}: {e}", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} example configs found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_replays_a_granted_directory_read_through_wasi() {
    let host = TestHost::new(&["ndjson-replay"]).await;
    let dir = host.scratch("replays");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(format!("{dir}/a.ndjson"), "{\"a\":0}\n{\"a\":1}\n\n{\"a\":2}\n").unwrap();
    std::fs::write(format!("{dir}/b.ndjson"), "{\"b\":0}\n{\"b\":1}").unwrap();
    std::fs::write(format!("{dir}/notes.txt"), "not a replay\n").unwrap();

    // Not granted: refused by key, with the grant to add.
    let error =
        host.herder.start(connector("denied", "ndjson-replay", &[("replay.directory", &dir)])).await.unwrap_err();
    assert_eq!(error.key.as_deref(), Some("replay.directory"), "{error:?}");
    assert!(error.reason.contains("sandbox.fs.read"), "{}", error.reason);

    let config = [
        ("topic", "from-dir"),
        ("replay.directory", dir.as_str()),
        ("sandbox.fs.read", dir.as_str()),
        ("replay.rate", "0"),
        ("tasks.max", "2"),
    ];
    host.start(connector("dir", "ndjson-replay", &config)).await;
    wait_all_tasks_retired(&host, "dir", &replay_done(&[("a.ndjson", 3), ("b.ndjson", 2)], 1)).await;
    let mut replayed = host.keyed_values("from-dir");
    replayed.sort();
    let expected: Vec<(String, String)> = [
        ("a.ndjson:0", r#"{"a":0}"#),
        ("a.ndjson:1", r#"{"a":1}"#),
        ("a.ndjson:2", r#"{"a":2}"#),
        ("b.ndjson:0", r#"{"b":0}"#),
        ("b.ndjson:1", r#"{"b":1}"#),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(replayed, expected, "every line of the directory's .ndjson files, once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_python_and_javascript_counters_send_the_counters_records_and_resume_after_a_restart() {
    let host = TestHost::new(&["counter-py", "counter-js"]).await;
    let config = |topic: &'static str| [("topic", topic), ("record.size", "16"), ("batch.size", "100")];
    host.start(connector("py", "counter-py", &config("from-py"))).await;
    host.start(connector("js", "counter-js", &config("from-js"))).await;
    for topic in ["from-py", "from-js"] {
        let values = wait_until(&format!("1,000 records in {topic}"), || {
            let values = host.values(topic);
            (values.len() >= 1000).then_some(values)
        })
        .await;
        for (n, value) in values.iter().enumerate().take(1000) {
            assert_eq!(value, &format!("{n:.<16}"), "{topic}: record {n}");
        }
    }
    // Stopped and started again, each goes on after its committed offset: nothing sent
    // twice, nothing skipped (they started over from 0 before, after every recycle too).
    for (name, plugin, topic) in [("py", "counter-py", "from-py"), ("js", "counter-js", "from-js")] {
        assert!(host.herder.stop(name).await);
        let before = host.values(topic).len();
        host.start(connector(name, plugin, &config(topic))).await;
        let values = wait_until(&format!("1,000 more records in {topic}"), || {
            let values = host.values(topic);
            (values.len() >= before + 1000).then_some(values)
        })
        .await;
        for (n, value) in values.iter().enumerate() {
            assert_eq!(value, &format!("{n:.<16}"), "{topic}: record {n} ({before} before the restart)");
        }
    }
    assert_eq!(host.herder.registry().get("counter-py").unwrap().pre().version(), "0.4.0");
    assert_eq!(host.herder.registry().get("counter-js").unwrap().pre().version(), "0.4.0");
}
