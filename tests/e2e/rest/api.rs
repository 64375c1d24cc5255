//! Every endpoint of the REST API against a real `sluice serve`, with Kafka Connect's
//! status codes and bodies, the liberal input Connect takes, and its error bodies.

use std::io::{Read, Write};

use serde_json::{Value, json};

use super::{Server, all_in, counter_records, plugin_folder};
use crate::wait_until;

fn counter(name: &str, extra: Value) -> String {
    let mut config = json!({ "connector.class": "counter", "topic": name, "tasks.max": "2" });
    config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    json!({ "name": name, "config": config }).to_string()
}

#[test]
fn the_connector_lifecycle_answers_as_kafka_connect_does() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &plugin_folder(dir.path(), &["counter", "file-pulse"]), None);

    let root = server.get("/").json();
    assert_eq!(root["version"], env!("CARGO_PKG_VERSION"));
    assert!(root["commit"].as_str().is_some_and(|c| !c.is_empty()), "{root}");
    let cluster_id = root["kafka_cluster_id"].as_str().unwrap().to_string();
    assert_eq!(cluster_id.len(), 22, "a Kafka-style cluster id: {cluster_id}");
    assert_eq!(server.get("/connectors").json(), json!([]));
    let health = server.get("/health");
    assert_eq!(health.status, 200);
    assert_eq!(
        health.json(),
        json!({"status": "healthy", "message": "Worker has completed startup and is ready to handle requests."})
    );

    // Create: 201 with name, config (name included), tasks and type, and a Location.
    let created = server.call("POST", "/connectors", None, Some(&counter("a", json!({ "records.per.second": "200" }))));
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(created.header("location"), Some("/connectors/a"));
    let info = created.json();
    assert_eq!(info["name"], "a");
    assert_eq!(info["type"], "source");
    assert_eq!(info["config"]["name"], "a");
    assert_eq!(info["config"]["connector.class"], "counter");
    assert!(info["tasks"].is_array());
    let again = server.call("POST", "/connectors", None, Some(&counter("a", json!({}))));
    assert!(again.assert_error(409).contains("already exists"));
    let bad = server.call("POST", "/connectors", None, Some(&counter("bad", json!({ "tasks.max": "0" }))));
    assert!(bad.assert_error(400).contains("tasks.max"), "{bad:?}");
    // Several errors: each is named, as Kafka Connect lists them, and nothing is created.
    let two = counter("two", json!({ "tasks.max": "0", "batch.size": "many" }));
    for (method, path) in [("POST", "/connectors"), ("PUT", "/connectors/two/config")] {
        let body = if method == "PUT" {
            json!(serde_json::from_str::<Value>(&two).unwrap()["config"]).to_string()
        } else {
            two.clone()
        };
        let message = server.call(method, path, None, Some(&body)).assert_error(400);
        assert!(
            message.starts_with("Connector configuration is invalid and contains the following 2 error(s):\n"),
            "{method}: {message}"
        );
        assert!(message.contains("\ntasks.max: ") && message.contains("\nbatch.size: "), "{method}: {message}");
    }
    server.get("/connectors/two").assert_error(404);
    // A PATCH that would leave the config with several errors names each, and changes nothing.
    let patch = json!({ "tasks.max": "0", "batch.size": "many" }).to_string();
    let message = server.call("PATCH", "/connectors/a/config", None, Some(&patch)).assert_error(400);
    assert!(
        message.starts_with("Connector configuration is invalid and contains the following 2 error(s):\n"),
        "{message}"
    );
    assert!(message.contains("\ntasks.max: ") && message.contains("\nbatch.size: "), "{message}");
    assert_eq!(server.get("/connectors/a/config").json()["records.per.second"], "200");
    assert!(server.get("/connectors/a/config").json().get("batch.size").is_none());
    // A topic Kafka would refuse is refused when the connector is created, naming the key.
    let spaced = server.call("POST", "/connectors", None, Some(&counter("spaced", json!({ "topic": "app logs" }))));
    let message = spaced.assert_error(400);
    assert!(message.contains("topic: 'app logs' is not a topic name"), "{message}");
    let unknown = server.call(
        "POST",
        "/connectors",
        None,
        Some(&json!({"name": "u", "config": {"connector.class": "nope"}}).to_string()),
    );
    assert!(unknown.assert_error(400).contains("connector.class"));
    let mismatch = server.call(
        "POST",
        "/connectors",
        None,
        Some(&json!({"name": "x", "config": {"name": "y", "connector.class": "counter", "topic": "t"}}).to_string()),
    );
    mismatch.assert_error(400);
    assert_eq!(server.get("/connectors/bad").assert_error(404), "Connector bad not found");

    let status = server.wait_for("a RUNNING with 2 tasks", "/connectors/a/status", None, |s| all_in(s, "RUNNING", 2));
    assert_eq!(status["name"], "a");
    assert_eq!(status["type"], "source");
    assert_eq!(status["connector"]["version"], "0.1.0");
    // Connect names a worker by its REST listener's host:port.
    let port = server.base.rsplit(':').next().unwrap().trim_end_matches('/');
    let worker_id = status["connector"]["worker_id"].as_str().unwrap();
    assert!(worker_id.ends_with(&format!(":{port}")), "worker_id {worker_id} does not end with the port {port}");
    assert_eq!(status["tasks"][0]["worker_id"], worker_id);
    assert_eq!(status["tasks"][0]["id"], 0);
    assert_eq!(status["tasks"][1]["version"], "0.1.0");

    // Lists, plain and expanded (expand is repeatable).
    assert_eq!(server.get("/connectors").json(), json!(["a"]));
    let expanded = server.get("/connectors?expand=status").json();
    assert_eq!(expanded["a"]["status"]["name"], "a");
    assert!(expanded["a"].get("info").is_none());
    let both = server.get("/connectors?expand=status&expand=info").json();
    assert_eq!(both["a"]["info"]["config"]["topic"], "a");
    assert_eq!(both["a"]["status"]["connector"]["state"], "RUNNING");
    assert!(server.get("/connectors?expand=info").json()["a"].get("status").is_none());
    // As Connect: an expansion it does not know still gives the map, with nothing added.
    assert_eq!(server.get("/connectors?expand=bogus").json(), json!({"a": {}}));

    let info = server.get("/connectors/a").json();
    assert_eq!(info["tasks"], json!([{"connector": "a", "task": 0}, {"connector": "a", "task": 1}]));
    let config = server.get("/connectors/a/config").json();
    assert_eq!(config["name"], "a");
    assert_eq!(config["tasks.max"], "2");

    let tasks = server.get("/connectors/a/tasks").json();
    assert_eq!(tasks[1]["id"], json!({"connector": "a", "task": 1}));
    assert_eq!(tasks[1]["config"]["connector.class"], "counter");
    // Connect 3.x's form of the same, which 3.x scripts still call.
    let tasks_config = server.get("/connectors/a/tasks-config").json();
    assert_eq!(tasks_config.as_object().map(|o| o.len()), Some(2), "{tasks_config}");
    assert_eq!(tasks_config["a-1"], tasks[1]["config"], "{tasks_config}");
    server.get("/connectors/nope/tasks-config").assert_error(404);
    let task = server.get("/connectors/a/tasks/1/status").json();
    assert_eq!(task["id"], 1);
    assert_eq!(task["state"], "RUNNING");
    assert!(server.get("/connectors/a/tasks/7/status").assert_error(404).contains("a-7"));
    server.get("/connectors/a/tasks/x/status").assert_error(404);

    // Restarts: one task (204; a new instance), the connector (204), with tasks (202 with
    // what restarts RESTARTING), only failed (nothing failed: nothing RESTARTING).
    let instance = task["instance"].clone();
    assert_eq!(server.call("POST", "/connectors/a/tasks/1/restart", None, None).status, 204);
    server.wait_for("task 1 in a new instance", "/connectors/a/tasks/1/status", None, |t| {
        t["instance"] != instance && t["state"] == "RUNNING"
    });
    server.call("POST", "/connectors/a/tasks/9/restart", None, None).assert_error(404);
    assert_eq!(server.call("POST", "/connectors/a/restart", None, None).status, 204);
    let before = server.wait_for("a RUNNING", "/connectors/a/status", None, |s| all_in(s, "RUNNING", 2));
    let instances =
        |s: &Value| -> Vec<Value> { s["tasks"].as_array().unwrap().iter().map(|t| t["instance"].clone()).collect() };
    let restarting = server.call("POST", "/connectors/a/restart?includeTasks=true", None, None);
    assert_eq!(restarting.status, 202, "{restarting:?}");
    assert!(all_in(&restarting.json(), "RESTARTING", 2), "{restarting:?}");
    // RUNNING again in new instances (the old statuses say RUNNING until the restart is done).
    let old = instances(&before);
    server.wait_for("a RUNNING in new instances", "/connectors/a/status", None, |s| {
        all_in(s, "RUNNING", 2) && instances(s).iter().all(|i| !old.contains(i) && i != &json!(0))
    });
    let only_failed = server.call("POST", "/connectors/a/restart?includeTasks=True&onlyFailed=TRUE", None, None);
    assert_eq!(only_failed.status, 202);
    assert!(all_in(&only_failed.json(), "RUNNING", 2), "nothing failed, nothing restarts: {only_failed:?}");
    server.call("POST", "/connectors/a/restart?onlyFailed=perhaps", None, None).assert_error(400);

    // Pause and resume: 202.
    assert_eq!(server.call("PUT", "/connectors/a/pause", None, None).status, 202);
    server.wait_for("a PAUSED", "/connectors/a/status", None, |s| all_in(s, "PAUSED", 2));
    assert_eq!(server.call("PUT", "/connectors/a/resume", None, None).status, 202);
    server.wait_for("a RUNNING", "/connectors/a/status", None, |s| all_in(s, "RUNNING", 2));

    // Update the config: 200 for an existing connector, 201 for a new one; the name in the
    // body must match the URL's.
    let update = json!({"connector.class": "counter", "topic": "a", "tasks.max": "1", "records.per.second": "200"});
    let updated = server.call("PUT", "/connectors/a/config", None, Some(&update.to_string()));
    assert_eq!(updated.status, 200, "{updated:?}");
    assert_eq!(updated.json()["config"]["tasks.max"], "1");
    server.wait_for("a with one task", "/connectors/a/status", None, |s| all_in(s, "RUNNING", 1));
    let wrong_name = json!({"name": "b", "connector.class": "counter", "topic": "a"}).to_string();
    server.call("PUT", "/connectors/a/config", None, Some(&wrong_name)).assert_error(400);
    let new = json!({"connector.class": "counter", "topic": "b", "record.count": "10"});
    let created = server.call("PUT", "/connectors/b/config", None, Some(&new.to_string()));
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(created.json()["config"]["name"], "b");
    let bad_update = json!({"connector.class": "counter", "topic": "b", "batch.size": "many"}).to_string();
    assert!(
        server.call("PUT", "/connectors/b/config", None, Some(&bad_update)).assert_error(400).contains("batch.size")
    );

    // Delete: 204, then 404.
    assert_eq!(server.call("DELETE", "/connectors/b", None, None).status, 204);
    server.get("/connectors/b").assert_error(404);
    server.call("DELETE", "/connectors/b", None, None).assert_error(404);
    assert_eq!(server.get("/connectors").json(), json!(["a"]));

    // Metrics name the connector's tasks; the update just relaunched task 0, so wait for a write.
    let metrics_body = wait_until("a write counted for a/0", || {
        let metrics = server.get("/metrics");
        assert_eq!(metrics.status, 200);
        assert!(metrics.content_type.starts_with("text/plain"), "{metrics:?}");
        let written: f64 = metrics
            .body
            .lines()
            .find(|l| l.starts_with(r#"sluice_source_record_write_total{tenant="default",connector="a",task="0"}"#))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no write total for a/0:\n{}", metrics.body));
        (written > 0.0).then_some(metrics.body)
    });
    assert!(metrics_body.contains(r#"sluice_connector_status{tenant="default",connector="a",state="RUNNING"} 1"#));

    // The data directory keeps the cluster id.
    let mut server = server;
    assert!(server.terminate().success());
    let server = Server::start(&data, &dir.path().join("plugins"), None);
    assert_eq!(server.get("/").json()["kafka_cluster_id"], cluster_id.as_str());
    server.wait_for("a back RUNNING", "/connectors/a/status", None, |s| all_in(s, "RUNNING", 1));
}

#[test]
fn offsets_change_while_stopped_and_resume_continues_from_them() {
    const COUNT: u64 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = Server::start(&data, &plugin_folder(dir.path(), &["counter"]), None);
    let config = json!({ "name": "o", "config": {
        "connector.class": "counter", "topic": "o", "tasks.max": "1",
        "record.count": COUNT.to_string(), "records.per.second": "300", "batch.size": "10" } });
    assert_eq!(server.call("POST", "/connectors", None, Some(&config.to_string())).status, 201);
    server.wait_for("records committed", "/connectors/o/offsets", None, |o| {
        o["offsets"].as_array().is_some_and(|list| !list.is_empty())
    });

    // Offsets cannot change while it runs (nor while paused).
    let running = server.call("DELETE", "/connectors/o/offsets", None, None).assert_error(400);
    assert!(running.contains("STOPPED"), "{running}");
    let patch = json!({"offsets": [{"partition": {"counter": 0}, "offset": {"seq": COUNT - 11}}]}).to_string();
    server.call("PATCH", "/connectors/o/offsets", None, Some(&patch)).assert_error(400);

    // Stop: 204, STOPPED with no tasks, offsets committed first.
    assert_eq!(server.call("PUT", "/connectors/o/stop", None, None).status, 204);
    let stopped = server.get("/connectors/o/status").json();
    assert_eq!(stopped["connector"]["state"], "STOPPED");
    assert_eq!(stopped["tasks"], json!([]));
    // A restart leaves it STOPPED, as Connect does (resuming starts it); the answer shows
    // the connector RESTARTING as Connect's restart plan does, unless only failed ones were asked.
    assert_eq!(server.call("POST", "/connectors/o/restart", None, None).status, 204);
    let restarted = server.call("POST", "/connectors/o/restart?includeTasks=true", None, None);
    assert_eq!(restarted.status, 202, "{restarted:?}");
    assert_eq!(restarted.json()["connector"]["state"], "RESTARTING");
    let failed_only = server.call("POST", "/connectors/o/restart?includeTasks=true&onlyFailed=true", None, None);
    assert_eq!(failed_only.json()["connector"]["state"], "STOPPED");
    assert_eq!(server.get("/connectors/o/status").json()["connector"]["state"], "STOPPED");
    let offsets = server.get("/connectors/o/offsets").json();
    let seq = offsets["offsets"][0]["offset"]["seq"].as_u64().unwrap();
    assert_eq!(offsets["offsets"][0]["partition"], json!({"counter": 0}));
    assert!(seq < COUNT - 11, "stopped before the end: {seq}");

    // Bad bodies are 400s; the reset forgets everything; the patch sets the offset.
    for body in
        ["{}", r#"{"offsets": [{"offset": {"seq": 1}}]}"#, r#"{"offsets": [{"partition": 3, "offset": null}]}"#, "[1"]
    {
        server.call("PATCH", "/connectors/o/offsets", None, Some(body)).assert_error(400);
    }
    // An integer beyond 64 bits would be stored as a float with other digits (and the
    // counter would start again from 0): refused, naming it.
    let huge = r#"{"offsets": [{"partition": {"counter": 0}, "offset": {"seq": 100000000000000000000000}}]}"#;
    let refused = server.call("PATCH", "/connectors/o/offsets", None, Some(huge)).assert_error(400);
    assert!(
        refused.contains("offsets[0].offset") && refused.contains("\"seq\"") && refused.contains("too large"),
        "{refused}"
    );
    // A float is a float, kept as typed, whatever its size.
    let float = r#"{"offsets": [{"partition": {"counter": 0}, "offset": {"seq": 1, "f": 1e300}}]}"#;
    assert_eq!(server.call("PATCH", "/connectors/o/offsets", None, Some(float)).status, 200);
    assert_eq!(server.get("/connectors/o/offsets").json()["offsets"][0]["offset"], json!({"seq": 1, "f": 1e300}));
    let reset = server.call("DELETE", "/connectors/o/offsets", None, None);
    assert_eq!(reset.json()["message"], "The offsets for this connector have been reset successfully");
    assert_eq!(server.get("/connectors/o/offsets").json(), json!({"offsets": []}));
    let patched = server.call("PATCH", "/connectors/o/offsets", None, Some(&patch));
    assert_eq!(patched.status, 200, "{patched:?}");
    assert_eq!(patched.json()["message"], "The offsets for this connector have been altered successfully");
    assert_eq!(server.get("/connectors/o/offsets").json()["offsets"][0]["offset"], json!({"seq": COUNT - 11}));

    // Resume: it continues after the new offset, to the end.
    assert_eq!(server.call("PUT", "/connectors/o/resume", None, None).status, 202);
    server.wait_for("the last record committed", "/connectors/o/offsets", None, |o| {
        o["offsets"][0]["offset"]["seq"].as_u64() == Some(COUNT - 1)
    });
    assert!(server.terminate().success());
    let records = counter_records(&data, "default", "o");
    let (before, after): (Vec<_>, Vec<_>) = records.iter().partition(|(_, s)| *s <= seq);
    assert!(before.iter().map(|(_, s)| *s).eq(0..=seq), "before the stop: 0..={seq} once each");
    assert!(after.iter().map(|(_, s)| *s).eq(COUNT - 10..COUNT), "after the patch: the last ten, once each: {after:?}");
}

#[test]
fn plugin_endpoints_list_describe_and_validate() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugin_folder(dir.path(), &["counter", "file-pulse"]);
    let server = Server::start(&dir.path().join("data"), &plugins, None);

    let listed = server.get("/connector-plugins").json();
    assert_eq!(
        listed,
        json!([{"class": "counter", "type": "source", "version": "0.1.0"}, {"class": "file-pulse", "type": "source", "version": "0.2.0"}])
    );
    assert_eq!(server.get("/connector-plugins?connectorsOnly=TRUE").json(), listed);
    // KIP-769: the transforms and predicates follow the connectors.
    let all = server.get("/connector-plugins?connectorsOnly=false").json();
    let all = all.as_array().unwrap();
    assert_eq!(&all[..2], listed.as_array().unwrap().as_slice());
    let of_type = |kind: &str| -> Vec<&str> {
        all.iter().filter(|p| p["type"] == kind).map(|p| p["class"].as_str().unwrap()).collect()
    };
    let transformations = of_type("transformation");
    for class in ["RegexRouter", "Cast$Value", "Flatten$Key", "HeaderFrom$Value", "ValueToKey"] {
        assert!(transformations.contains(&format!("org.apache.kafka.connect.transforms.{class}").as_str()), "{class}");
    }
    assert!(transformations.contains(&"org.apache.kafka.connect.transforms.TimestampConverter$Value"));
    assert!(!transformations.iter().any(|c| c.contains("SetSchemaMetadata")), "only the transforms Sluice runs");
    assert_eq!(
        of_type("predicate"),
        ["HasHeaderKey", "RecordIsTombstone", "TopicNameMatches"]
            .map(|p| format!("org.apache.kafka.connect.transforms.predicates.{p}"))
    );
    assert_eq!(all.len(), 2 + transformations.len() + 3);
    server.get("/connector-plugins?connectorsOnly=maybe").assert_error(400);
    // And each one's keys.
    let keys = server.get("/connector-plugins/org.apache.kafka.connect.transforms.HeaderFrom$Value/config").json();
    let names: Vec<&str> = keys.as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fields", "headers", "operation"]);
    assert_eq!(keys[0]["required"], true);
    let keys = server.get("/connector-plugins/org.apache.kafka.connect.transforms.Flatten%24Key/config").json();
    assert_eq!((keys[0]["name"].as_str(), keys[0]["default_value"].as_str()), (Some("delimiter"), Some(".")));
    let keys =
        server.get("/connector-plugins/org.apache.kafka.connect.transforms.predicates.HasHeaderKey/config").json();
    assert_eq!(keys[0]["name"], "name");
    server
        .get("/connector-plugins/org.apache.kafka.connect.transforms.SetSchemaMetadata$Value/config")
        .assert_error(404);
    // By alias too, as Connect resolves one (and as `transforms.*.type` takes one).
    let by_alias = server.get("/connector-plugins/RegexRouter/config").json();
    let by_class = server.get("/connector-plugins/org.apache.kafka.connect.transforms.RegexRouter/config").json();
    assert_eq!(by_alias, by_class);
    assert_eq!(by_alias[0]["group"], "RegexRouter");

    let keys = server.get("/connector-plugins/counter/config").json();
    let names: Vec<&str> = keys.as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    for expected in ["connector.class", "tasks.max", "topic", "record.count"] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
    let topic = keys.as_array().unwrap().iter().find(|k| k["name"] == "topic").unwrap();
    assert_eq!(topic["required"], true);
    assert_eq!(topic["group"], "counter");
    // Each group's keys are numbered from 1, as Connect's orderInGroup.
    let mut next: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for key in keys.as_array().unwrap() {
        let expected = next.entry(key["group"].as_str().unwrap()).or_insert(0);
        *expected += 1;
        assert_eq!(key["order"].as_u64(), Some(*expected), "{key}");
    }
    let message = server.get("/connector-plugins/nope/config").assert_error(404);
    assert!(message.contains("nope.wasm") && message.contains("no transform or predicate"), "{message}");

    // Validate: 200 even for a bad config, every problem under its key.
    let bad = json!({"connector.class": "counter", "tasks.max": "0", "batch.size": "lots"}).to_string();
    let report = server.call("PUT", "/connector-plugins/counter/config/validate", None, Some(&bad));
    assert_eq!(report.status, 200, "{report:?}");
    let report = report.json();
    assert_eq!(report["name"], "counter");
    let errors = |key: &str| -> Vec<String> {
        let config = report["configs"].as_array().unwrap().iter().find(|c| c["value"]["name"] == key);
        let config = config.unwrap_or_else(|| panic!("{key} not in {report}"));
        config["value"]["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect()
    };
    assert_eq!(errors("tasks.max").len(), 1, "{report}");
    assert_eq!(errors("topic").len(), 1, "the plugin's required key: {report}");
    assert_eq!(errors("batch.size").len(), 1, "the plugin's typed key: {report}");
    assert_eq!(errors("name").len(), 1, "Connect reports a missing name: {report}");
    assert!(errors("record.count").is_empty());
    assert_eq!(report["error_count"], 4, "{report}");
    assert!(report["groups"].as_array().unwrap().contains(&json!("Common")));

    // Values that are not text (null, an object, a list) are each a problem of their own,
    // and the rest of the config is still looked at; a null is shown as null.
    let nulls = json!({"name": "x", "connector.class": "counter", "topic": null, "foo": null,
        "tasks.max": [1], "batch.size": "lots"})
    .to_string();
    let report = server.call("PUT", "/connector-plugins/counter/config/validate", None, Some(&nulls)).json();
    let entry = |key: &str| report["configs"].as_array().unwrap().iter().find(|c| c["value"]["name"] == key).cloned();
    let errors = |key: &str| entry(key).map_or(0, |c| c["value"]["errors"].as_array().unwrap().len());
    assert!(errors("topic") >= 1 && errors("foo") == 1 && errors("tasks.max") == 1, "{report}");
    assert_eq!(errors("batch.size"), 1, "the rest of the config is checked too: {report}");
    assert_eq!(entry("topic").unwrap()["value"]["value"], Value::Null, "{report}");
    assert!(report["error_count"].as_u64().unwrap() >= 4, "{report}");
    // A create names them all too, not only the first null.
    let create = json!({"name": "nulls", "config": {"connector.class": "counter", "tasks.max": "x",
        "topic": null, "foo": null}})
    .to_string();
    let message = server.call("POST", "/connectors", None, Some(&create)).assert_error(400);
    for said in ["following", "tasks.max", "topic: must be a string, not null", "foo: must be a string, not null"] {
        assert!(message.contains(said), "{said:?} not in {message}");
    }
    let message = server
        .call(
            "PUT",
            "/connectors/nulls/config",
            None,
            Some(
                r#"{"connector.class": "counter",
        "topic": "t", "foo": {"a": 1}}"#,
            ),
        )
        .assert_error(400);
    assert!(message.contains("foo: must be a string") && !message.contains("following"), "one problem: {message}");
    server.get("/connectors/nulls").assert_error(404);

    // A bad transform is one problem under its key, and the rest is still looked at.
    let transform = json!({
        "name": "x", "connector.class": "counter", "batch.size": "lots",
        "transforms": "route", "transforms.route.type": "RegexRouter", "transforms.route.regex": "(",
    })
    .to_string();
    let report = server.call("PUT", "/connector-plugins/counter/config/validate", None, Some(&transform)).json();
    let errors = |key: &str| -> Vec<String> {
        let config = report["configs"].as_array().unwrap().iter().find(|c| c["value"]["name"] == key);
        let config = config.unwrap_or_else(|| panic!("{key} not in {report}"));
        config["value"]["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect()
    };
    assert_eq!(errors("transforms.route.regex"), ["'(' is not a regular expression: unclosed group"], "{report}");
    assert_eq!((errors("topic").len(), errors("batch.size").len()), (1, 1), "{report}");
    assert_eq!(report["error_count"], 3, "{report}");
    // Created over REST, its records go where the router sends them.
    let routed = json!({"name": "routed", "config": {"connector.class": "counter", "topic": "t", "transforms": "r",
        "transforms.r.type": "org.apache.kafka.connect.transforms.RegexRouter", "transforms.r.regex": "t",
        "transforms.r.replacement": "routed-t"}})
    .to_string();
    assert_eq!(server.call("POST", "/connectors", None, Some(&routed)).status, 201);
    server.wait_for("routed's topic", "/connectors/routed/topics", None, |t| {
        t == &json!({"routed": {"topics": ["routed-t"]}})
    });
    assert_eq!(server.call("DELETE", "/connectors/routed", None, None).status, 204);

    let good = json!({"name": "g", "connector.class": "counter", "topic": "t"}).to_string();
    let report = server.call("PUT", "/connector-plugins/counter/config/validate", None, Some(&good)).json();
    assert_eq!(report["error_count"], 0, "{report}");
    // The plugin's own validate: file-pulse refuses a directory it cannot read.
    let pulse = json!({"name": "p", "topic": "t", "fs.listing.directory.path": "/no/such/dir"}).to_string();
    let report = server.call("PUT", "/connector-plugins/file-pulse/config/validate/", None, Some(&pulse)).json();
    assert!(report["error_count"].as_u64().unwrap() >= 1, "{report}");
    let other = json!({"connector.class": "file-pulse"}).to_string();
    server.call("PUT", "/connector-plugins/counter/config/validate", None, Some(&other)).assert_error(400);
    server.call("PUT", "/connector-plugins/nope/config/validate", None, Some("{}")).assert_error(404);

    assert_eq!(server.get("/sluice/rejected-plugins").json(), json!([]));
    let openapi = server.get("/openapi.json").json();
    assert!(openapi["paths"]["/connectors/{name}/offsets"]["patch"].is_object());
}

#[test]
fn errors_are_connect_json_and_input_is_taken_liberally() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), None);
    let host = server.base.trim_start_matches("http://").to_string();

    // The framework's own errors are Connect's JSON too.
    assert!(server.get("/no/such/path").assert_error(404).contains("404"));
    let wrong_method = server.call("DELETE", "/connectors", None, None);
    wrong_method.assert_error(405);
    assert!(wrong_method.header("allow").is_some_and(|a| a.contains("GET") && a.contains("POST")));
    let huge =
        format!(r#"{{"name": "h", "config": {{"connector.class": "counter", "topic": "{}"}}}}"#, "x".repeat(2 << 20));
    // Refused from its declared length: the client is told before it sends the body (as
    // curl asks to be, with `Expect: 100-continue`), so the answer cannot race the upload.
    let (status, body) = server.raw(&format!(
        "POST /connectors HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Expect: 100-continue\r\nConnection: close\r\n\r\n",
        huge.len()
    ));
    assert_eq!(status, 413, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(body["error_code"], 413, "{body}");
    for body in [
        "{",
        "[]",
        "\"text\"",
        "{\"name\": \"m\"}",
        "{\"name\": 5, \"config\": {}}",
        "{\"name\": \"m\", \"config\": []}",
    ] {
        server.call("POST", "/connectors", None, Some(body)).assert_error(400);
    }
    server.call("POST", "/connectors", None, None).assert_error(400);
    server.call("POST", "/connectors/a/tasks/99999999999999999999/restart", None, None).assert_error(404);

    // A JSON content type with parameters, and none at all.
    let body = json!({"name": "lib", "config": {"connector.class": "counter", "topic": "lib", "record.count": "5"}})
        .to_string();
    let request = format!(
        "POST /connectors HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, answer) = server.raw(&request);
    assert_eq!(status, 201, "{answer}");
    let body = json!({"name": "lib2", "config": {"connector.class": "counter", "topic": "lib", "record.count": "5"}})
        .to_string();
    let request = format!(
        "POST /connectors/ HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, answer) = server.raw(&request);
    assert_eq!(status, 201, "no content type, trailing slash: {answer}");
    // No body and no content type; trailing slashes anywhere.
    let (status, answer) =
        server.raw(&format!("PUT /connectors/lib/pause/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 202, "{answer}");
    let (status, answer) =
        server.raw(&format!("GET /connectors/lib/status/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 200, "{answer}");
    let (status, answer) =
        server.raw(&format!("POST /connectors/lib/restart/?includeTasks=TRUE&onlyFailed=False HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 202, "{answer}");
    assert_eq!(server.get("/connectors/?expand=STATUS").json()["lib"]["status"]["name"], "lib");
    // A repeated parameter counts by its first value, as JAX-RS gives it to Connect.
    assert_eq!(
        server.call("POST", "/connectors/lib/restart?includeTasks=false&includeTasks=true", None, None).status,
        204
    );
    // A body saved by an editor that starts it with a UTF-8 byte-order mark.
    let body = format!(
        "\u{feff}{}",
        json!({"name": "bom", "config": {"connector.class": "counter", "topic": "lib", "record.count": "5"}})
    );
    let created = server.call("POST", "/connectors", None, Some(&body));
    assert_eq!(created.status, 201, "{created:?}");
    wait_until("lib's five records", || {
        let offsets = server.get("/connectors/lib2/offsets").json();
        (offsets["offsets"][0]["offset"]["seq"] == 4).then_some(())
    });
}

/// A client that sends part of a body and then nothing holds no request open for good
/// (each could hold a megabyte): after 30 s idle it gets Connect's JSON error and the
/// connection is closed, as Connect's Jetty closes one.
#[test]
fn a_body_that_stops_coming_part_way_is_given_up_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), None);
    let host = server.base.trim_start_matches("http://").to_string();
    let started = std::time::Instant::now();
    let (status, body) = server.raw(&format!(
        "PUT /connectors/stalled/config HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000\r\n\r\n{{\"connector.class\": \"counter\", \"topic\": \""
    ));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not received within"), "{body}");
    assert!(started.elapsed() >= std::time::Duration::from_secs(29), "given up on before it was idle 30 s");
    server.get("/connectors/stalled").assert_error(404);
}

/// A client that opens a connection and never finishes its request's headers holds it
/// for 30 s at most (Jetty's idle timeout in Connect), and does not hold up a SIGTERM: the
/// worker stops its connectors, committing, after waiting 10 s for requests in flight.
#[test]
fn a_request_whose_headers_never_finish_holds_neither_a_connection_nor_a_stop() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = Server::start(&data, &plugin_folder(dir.path(), &["counter"]), None);
    let address = server.base.trim_start_matches("http://").to_string();
    let half_sent = || {
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        stream.write_all(b"GET /connectors HTTP/1.1\r\nHost: x").unwrap();
        stream.set_read_timeout(Some(crate::DEADLINE)).unwrap();
        stream
    };
    let mut idle = half_sent();
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    // Closed by the server (an EOF, or a reset), not by this read's own timeout.
    let _ = idle.read_to_end(&mut answer);
    assert!(started.elapsed() < crate::DEADLINE, "the half-sent request's connection was kept open");
    assert!(started.elapsed() >= std::time::Duration::from_secs(25), "closed before it was idle 30 s");

    let body = counter("c", json!({"records.per.second": "100"}));
    assert_eq!(server.call("POST", "/connectors", None, Some(&body)).status, 201);
    server.wait_for("c running", "/connectors/c/status", None, |s| all_in(s, "RUNNING", 2));
    let _held = half_sent();
    // A request answered on a second connection: the worker's one accept loop took the
    // half-sent one before it (a SIGTERM sent before that found no connection to wait for).
    assert_eq!(server.call("GET", "/connectors", None, None).status, 200);
    // `terminate` waits for the exit, failing past its generous deadline.
    assert!(server.terminate().success());
    let log = server.log();
    assert!(log.contains("stopping without waiting longer for REST API requests"), "{log}");
    let stores = crate::stores(&data).unwrap();
    let committed = stores.offsets().all_offsets(&sluice::storage::Namespace::new("default", "c")).unwrap();
    assert!(!committed.is_empty(), "the stop committed no offset");
}

#[test]
fn another_sites_page_cannot_drive_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), None);
    let host = server.base.trim_start_matches("http://").to_string();
    let port = host.rsplit_once(':').unwrap().1.to_string();
    let body = json!({"name": "csrf", "config": {"connector.class": "counter", "topic": "csrf"}}).to_string();
    let post = |host: &str, extra: &str| {
        server.raw(&format!(
            "POST /connectors HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Type: text/plain;charset=UTF-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ))
    };

    // A form another site's page posts (as text/plain, which needs no CORS preflight).
    let (status, answer) = post(&host, "Origin: http://evil.example\r\n");
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("Cross-origin") && answer.contains("\"error_code\":403"), "{answer}");
    // The same page after DNS rebinding: its own name, resolving to this address.
    let rebound = format!("evil.example:{port}");
    let (status, answer) = post(&rebound, &format!("Origin: http://{rebound}\r\n"));
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("evil.example"), "{answer}");
    let (status, answer) =
        server.raw(&format!("GET /connectors HTTP/1.1\r\nHost: {rebound}\r\nConnection: close\r\n\r\n"));
    assert_eq!(status, 403, "a rebound page cannot read answers either: {answer}");
    assert_eq!(server.get("/connectors").json(), json!([]), "nothing was created");

    // The API's own page (the console) and a client addressing localhost pass.
    let (status, answer) = post(&format!("localhost:{port}"), &format!("Origin: http://localhost:{port}\r\n"));
    assert_eq!(status, 201, "{answer}");
    assert_eq!(server.get("/connectors").json(), json!(["csrf"]));
}

#[test]
fn connect_3_x_requests_initial_state_patched_configs_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &plugin_folder(dir.path(), &["counter"]), None);
    let create = |name: &str, initial: Value| {
        let mut body: Value = serde_json::from_str(&counter(name, json!({"records.per.second": "200"}))).unwrap();
        body["initial_state"] = initial;
        server.call("POST", "/connectors", None, Some(&body.to_string()))
    };

    // KIP-980: created STOPPED, it writes nothing and lists no tasks; its offsets can be
    // set before its first record, and it starts from them when resumed.
    assert_eq!(create("s", json!("STOPPED")).status, 201);
    let status = server.get("/connectors/s/status").json();
    assert_eq!(status["connector"]["state"], "STOPPED", "{status}");
    assert_eq!(status["tasks"], json!([]));
    assert_eq!(server.get("/connectors/s/tasks").json(), json!([]));
    let patch = json!({"offsets": [{"partition": {"counter": 0}, "offset": {"seq": 99}}]}).to_string();
    assert_eq!(server.call("PATCH", "/connectors/s/offsets", None, Some(&patch)).status, 200);
    assert_eq!(server.call("PUT", "/connectors/s/resume", None, None).status, 202);
    server.wait_for("s running", "/connectors/s/status", None, |s| all_in(s, "RUNNING", 2));
    wait_until("s past its offset", || (counter_records(&data, "default", "s").len() > 10).then_some(()));
    // Stopped again: Connect lists no tasks for a stopped connector.
    assert_eq!(server.call("PUT", "/connectors/s/stop", None, None).status, 204);
    assert_eq!(server.get("/connectors/s/tasks").json(), json!([]));
    assert_eq!(server.get("/connectors/s").json()["tasks"], json!([]));
    let task0: Vec<u64> =
        counter_records(&data, "default", "s").into_iter().filter(|(t, _)| *t == 0).map(|(_, s)| s).collect();
    assert_eq!(task0.first(), Some(&100), "task 0 started after the offset set while stopped: {task0:?}");

    assert_eq!(create("p", json!("paused")).status, 201, "any case, as Connect takes it");
    server.wait_for("p paused", "/connectors/p/status", None, |s| all_in(s, "PAUSED", 2));
    assert!(counter_records(&data, "default", "p").is_empty(), "created paused: no record");
    let bogus = create("b", json!("BOGUS")).assert_error(400);
    assert!(bogus.contains("initial_state"), "{bogus}");
    create("b", json!(3)).assert_error(400);
    server.get("/connectors/b").assert_error(404);

    // KIP-477: PATCH sets keys and removes those given as null.
    let patched = server.call(
        "PATCH",
        "/connectors/p/config",
        None,
        Some(r#"{"records.per.second": "50", "tasks.max": null, "batch.size": "7"}"#),
    );
    assert_eq!(patched.status, 200, "{patched:?}");
    let config = server.get("/connectors/p/config").json();
    assert_eq!(config["records.per.second"], "50");
    assert_eq!(config["batch.size"], "7");
    assert!(config.get("tasks.max").is_none(), "{config}");
    assert_eq!(config["topic"], "p", "untouched keys stay");
    server.wait_for("p paused with one task", "/connectors/p/status", None, |s| all_in(s, "PAUSED", 1));
    server.call("PATCH", "/connectors/p/config", None, Some(r#"{"tasks.max": "0"}"#)).assert_error(400);
    server.call("PATCH", "/connectors/p/config", None, Some(r#"{"name": "other"}"#)).assert_error(400);
    server.call("PATCH", "/connectors/nope/config", None, Some(r#"{"topic": "x"}"#)).assert_error(404);
    assert_eq!(server.get("/connectors/p/config").json()["tasks.max"], Value::Null, "a refused patch changes nothing");

    // Names: trimmed as Connect trims them; `.` and `..` cannot be named in a URL.
    let padded = json!({"name": " padded ", "config": {"connector.class": "counter", "topic": "x"}}).to_string();
    let created = server.call("POST", "/connectors", None, Some(&padded));
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(created.json()["name"], "padded");
    for name in [".", ".."] {
        let body = json!({"name": name, "config": {"connector.class": "counter", "topic": "x"}}).to_string();
        let refused = server.call("POST", "/connectors", None, Some(&body)).assert_error(400);
        assert!(refused.contains("name"), "{refused}");
    }

    // KIP-875: an empty list of offsets to change is a mistake, not a success.
    assert_eq!(server.call("PUT", "/connectors/p/stop", None, None).status, 204);
    let empty = server.call("PATCH", "/connectors/p/offsets", None, Some(r#"{"offsets": []}"#)).assert_error(400);
    assert!(empty.contains("empty"), "{empty}");
}

#[test]
fn active_topics_are_tracked_reset_kept_across_restarts_and_forgotten_on_delete() {
    let dir = tempfile::tempdir().unwrap();
    let (data, plugins) = (dir.path().join("data"), plugin_folder(dir.path(), &["counter"]));
    let mut server = Server::start(&data, &plugins, None);
    let topics = |server: &Server| server.get("/connectors/t/topics").json();
    let body = counter("t", json!({"topic": "first", "records.per.second": "200"}));
    assert_eq!(server.call("POST", "/connectors", None, Some(&body)).status, 201);
    // KIP-558: the topics it wrote to, under its name, once it has written.
    server.wait_for("first tracked", "/connectors/t/topics", None, |t| t == &json!({"t": {"topics": ["first"]}}));
    server.get("/connectors/nope/topics").assert_error(404);
    server.call("PUT", "/connectors/nope/topics/reset", None, None).assert_error(404);

    // Reset while stopped: nothing is written, so nothing comes back.
    assert_eq!(server.call("PUT", "/connectors/t/stop", None, None).status, 204);
    assert_eq!(server.call("PUT", "/connectors/t/topics/reset", None, None).status, 202);
    assert_eq!(topics(&server), json!({"t": {"topics": []}}));
    // Another topic from now on: only it is listed, and it is still listed after a restart.
    assert_eq!(server.call("PATCH", "/connectors/t/config", None, Some(r#"{"topic": "second"}"#)).status, 200);
    assert_eq!(server.call("PUT", "/connectors/t/resume", None, None).status, 202);
    server.wait_for("second tracked", "/connectors/t/topics", None, |t| t == &json!({"t": {"topics": ["second"]}}));
    assert!(server.terminate().success());
    let server = Server::start(&data, &plugins, None);
    assert_eq!(topics(&server), json!({"t": {"topics": ["second"]}}));

    // Deleted and made again under the name (stopped, so it writes nothing): no topics.
    assert_eq!(server.call("DELETE", "/connectors/t", None, None).status, 204);
    let mut again: Value = serde_json::from_str(&counter("t", json!({}))).unwrap();
    again["initial_state"] = json!("STOPPED");
    assert_eq!(server.call("POST", "/connectors", None, Some(&again.to_string())).status, 201);
    assert_eq!(topics(&server), json!({"t": {"topics": []}}));
    drop(server);

    // Connect's worker keys turn tracking, or only its reset, off.
    for (toml, get, reset) in [
        ("topic.tracking.enable = false\n", Some("Topic tracking is disabled."), "Topic tracking is disabled."),
        ("topic.tracking.allow.reset = false\n", None, "Topic tracking reset is disabled."),
    ] {
        let config = dir.path().join("sluice.toml");
        std::fs::write(&config, toml).unwrap();
        let server = Server::start(&data, &plugins, Some(&config));
        match get {
            Some(message) => assert!(server.get("/connectors/t/topics").assert_error(403).contains(message)),
            None => assert_eq!(topics(&server), json!({"t": {"topics": []}})),
        }
        let refused = server.call("PUT", "/connectors/t/topics/reset", None, None).assert_error(403);
        assert!(refused.contains(reset), "{refused}");
    }
}

#[test]
fn log_levels_are_read_and_changed_while_the_worker_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &plugin_folder(dir.path(), &["counter"]), None);
    // The tests' servers run with SLUICE_LOG=warn.
    assert_eq!(server.get("/admin/loggers").json(), json!({"root": {"level": "WARN", "last_modified": null}}));
    // The counter's connector logs its tasks' committed offsets at debug level every ten
    // ticks: every second here.
    let body = counter("l", json!({"records.per.second": "200", "tasks.max": "1", "monitor.interval.ms": "100"}));
    assert_eq!(server.call("POST", "/connectors", None, Some(&body)).status, 201);
    server.wait_for("a commit", "/connectors/l/offsets", None, |o| o["offsets"][0].is_object());
    // The counter logs each commit at debug level, which WARN leaves out.
    assert!(!server.log().contains("committed offsets"), "{}", server.log());

    let set = server.call("PUT", "/admin/loggers/plugin", None, Some(r#"{"level": "debug"}"#));
    assert_eq!(set.status, 200, "{set:?}");
    assert_eq!(set.json(), json!(["plugin"]));
    wait_until("a plugin debug line", || server.log().contains("committed offsets").then_some(()));
    let plugin = server.get("/admin/loggers/plugin").json();
    assert_eq!(plugin["level"], "DEBUG");
    assert!(plugin["last_modified"].as_i64().is_some_and(|t| t > 1_700_000_000_000), "{plugin}");

    // Connect's answers to mistakes.
    let bad = server.call("PUT", "/admin/loggers/plugin", None, Some(r#"{"level": "verbose"}"#)).assert_error(400);
    assert_eq!(bad, "Invalid log level 'verbose'.");
    let none = server.call("PUT", "/admin/loggers/plugin", None, Some("{}")).assert_error(400);
    assert_eq!(none, "Desired 'level' parameter was not specified in the request.");
    assert_eq!(server.get("/admin/loggers/nope").assert_error(404), "Logger nope not found.");
    server.call("PUT", "/admin/loggers/a%20b", None, Some(r#"{"level": "INFO"}"#)).assert_error(400);

    // Root sets every logger; the cluster scope (this worker) answers 204.
    let root = server.call("PUT", "/admin/loggers/root?scope=cluster", None, Some(r#"{"level": "ERROR"}"#));
    assert_eq!(root.status, 204, "{root:?}");
    let loggers = server.get("/admin/loggers").json();
    assert_eq!(loggers.as_object().unwrap().keys().collect::<Vec<_>>(), ["plugin", "root"]);
    assert!(loggers.as_object().unwrap().values().all(|l| l["level"] == "ERROR"), "{loggers}");
    // Every debug line written from now on would report a committed offset past this one.
    let seq = |server: &Server| server.get("/connectors/l/offsets").json()["offsets"][0]["offset"]["seq"].as_u64();
    let at = seq(&server).unwrap();
    wait_until("three more seconds of records", || (seq(&server)? > at + 600).then_some(()));
    let reported: Vec<u64> = server
        .log()
        .lines()
        .filter_map(|line| line.split("committed offsets: task 0 at ").nth(1))
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    assert!(!reported.is_empty());
    assert!(reported.iter().all(|&n| n <= at), "debug lines after the level went to ERROR: {reported:?} (at {at})");
}

#[test]
fn records_and_offsets_of_deleted_connectors_stay_readable_with_sluice_topics_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let (data, plugins) = (dir.path().join("data"), plugin_folder(dir.path(), &["counter"]));
    let mut server = Server::start(&data, &plugins, None);
    let body = counter("gone", json!({"topic": "kept", "tasks.max": "1", "record.count": "5"}));
    assert_eq!(server.call("POST", "/connectors", None, Some(&body)).status, 201);
    wait_until("its five records", || (crate::stored_count(&data) == 5).then_some(()));
    assert_eq!(server.call("DELETE", "/connectors/gone", None, None).status, 204);
    assert!(server.terminate().success());
    // "Its offsets and local records stay": the only connector of the tenant is gone, and
    // its records are still listed and read.
    let data = data.to_str().unwrap();
    let listed = crate::run(&["topics", "list", "--data-dir", data]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    assert_eq!(String::from_utf8_lossy(&listed.stdout), "kept\t5\n");
    let read = crate::run(&["topics", "read", "kept", "--data-dir", data]);
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    assert_eq!(String::from_utf8_lossy(&read.stdout).lines().count(), 5);
    // Its offsets too, which a connector made again under its name resumes from.
    let offsets = crate::run(&["offsets", "gone", "--data-dir", data]);
    assert!(offsets.status.success(), "{}", String::from_utf8_lossy(&offsets.stderr));
    assert!(String::from_utf8_lossy(&offsets.stdout).contains(r#"{"seq":4}"#), "{offsets:?}");
    // A tenant with neither connectors nor records is still named as unknown.
    let unknown = crate::run(&["topics", "list", "--data-dir", data, "--tenant", "nobody"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no connector of tenant 'nobody'"));
}

/// A paused file-pulse connector brought back by a restarted worker shows its tasks PAUSED
/// (as Connect brings back a paused connector's tasks from their stored configs: file-pulse
/// assigns files in a tick, which a paused connector does not run, and it showed none),
/// and once resumed reads on from where it was, each line once.
#[test]
fn a_paused_connector_is_back_with_its_tasks_paused_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (data, plugins) = (dir.path().join("data"), plugin_folder(dir.path(), &["file-pulse"]));
    let inbox = dir.path().join("in");
    std::fs::create_dir(&inbox).unwrap();
    std::fs::write(inbox.join("app.log"), "one\ntwo\n").unwrap();
    let body = json!({"name": "tail", "config": {"connector.class": "file-pulse", "topic": "t", "tasks.max": "2",
        "fs.listing.directory.path": inbox, "sandbox.fs.read": inbox, "file.completion": "tail",
        "fs.listing.interval.ms": "100"}})
    .to_string();
    let mut server = Server::start(&data, &plugins, None);
    assert_eq!(server.call("POST", "/connectors", None, Some(&body)).status, 201);
    wait_until("both lines", || (crate::stored_count(&data) == 2).then_some(()));
    assert_eq!(server.call("PUT", "/connectors/tail/pause", None, None).status, 202);
    server.wait_for("paused", "/connectors/tail/status", None, |s| all_in(s, "PAUSED", 1));
    assert!(server.terminate().success());

    let server = Server::start(&data, &plugins, None);
    let status = server.wait_for("paused", "/connectors/tail/status", None, |s| all_in(s, "PAUSED", 1));
    assert_eq!(status["tasks"][0]["id"], 0, "{status}");
    std::fs::OpenOptions::new().append(true).open(inbox.join("app.log")).unwrap().write_all(b"three\n").unwrap();
    assert_eq!(server.call("PUT", "/connectors/tail/resume", None, None).status, 202);
    wait_until("the third line", || (crate::stored_count(&data) >= 3).then_some(()));
    server.wait_for("running", "/connectors/tail/status", None, |s| all_in(s, "RUNNING", 1));
    let read = crate::run(&["topics", "read", "t", "--data-dir", data.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&read.stdout), "one\ntwo\nthree\n");
}
