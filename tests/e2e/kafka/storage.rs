//! Sluice's state in Kafka, as Connect keeps it: the three topics made compacted; offsets
//! written by one run, read by the next (`sluice offsets`) and by a plain consumer, with
//! Connect's key bytes on Connect's partition; a worker pointed at a topic that is not
//! compacted refused with the key named; one pointed at an address where nothing answers
//! saying so while it waits; `sluice topics` saying the records are in Kafka; and `sluice serve` on a new data directory
//! bringing back every connector in its target state from the topics alone.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use serde_json::json;

use super::Broker;
use crate::rest::{Server, all_in, plugin_folder};
use crate::{connector_file, sluice, wait_until};

fn admin(broker: &Broker) -> AdminClient<DefaultClientContext> {
    rdkafka::ClientConfig::new().set("bootstrap.servers", broker.bootstrap()).create().unwrap()
}

fn cleanup_policy(broker: &Broker, topic: &str) -> String {
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let described =
        futures_executor::block_on(admin(broker).describe_configs([&ResourceSpecifier::Topic(topic)], &options))
            .unwrap();
    let resource = described.into_iter().next().unwrap().unwrap();
    resource.get("cleanup.policy").and_then(|e| e.value.clone()).unwrap_or_default()
}

/// Java's `Utils.murmur2`, written from Kafka's source: where Connect's producer puts a key.
fn java_murmur2(data: &[u8]) -> i32 {
    let (m, r) = (0x5bd1e995_i32, 24);
    let mut h = 0x9747b28c_u32 as i32 ^ data.len() as i32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = i32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]).wrapping_mul(m);
        k ^= ((k as u32) >> r) as i32;
        h = h.wrapping_mul(m) ^ k.wrapping_mul(m);
    }
    if tail.len() >= 3 {
        h ^= i32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= i32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h = (h ^ i32::from(tail[0])).wrapping_mul(m);
    }
    h ^= ((h as u32) >> 13) as i32;
    h = h.wrapping_mul(m);
    h ^ ((h as u32) >> 15) as i32
}

#[test]
fn offsets_live_in_a_compacted_topic_in_connects_format_and_the_next_run_reads_them() {
    assert_eq!(java_murmur2(b"21"), -973932308, "Kafka's own test vector");
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let worker = connector_file(dir.path(), "sluice.toml", &broker.worker_toml(true, ""));
    let count = |name: &str, records: u64| {
        connector_file(
            dir.path(),
            &format!("{name}.json"),
            &json!({"name": name, "config": {
                "connector.class": "counter", "topic": "numbers", "record.count": records.to_string(),
                "topic.creation.default.partitions": "1", "topic.creation.default.replication.factor": "1",
            }})
            .to_string(),
        )
    };
    let offsets = |data: &str| -> String {
        let out = sluice()
            .args(["offsets", "count", "--json", "--config"])
            .arg(&worker)
            .arg("--data-dir")
            .arg(dir.path().join(data))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let run = |file: &std::path::Path, data: &str, last_seq: u64| {
        let mut child = sluice()
            .arg("run")
            .arg("--data-dir")
            .arg(dir.path().join(data))
            .arg("--config")
            .arg(&worker)
            .arg(file)
            .spawn()
            .unwrap();
        let last = format!("\"seq\":{last_seq}");
        wait_until("the counter's last offset in Kafka", || offsets(data).contains(&last).then_some(()));
        child.kill().unwrap();
        child.wait().unwrap();
    };
    // First run: 1,000 records. The second, on another data directory, resumes from the
    // offsets in Kafka and stops at 2,000, with nothing sent twice.
    run(&count("count", 1000), "data-1", 999);
    for (topic, purpose) in
        [("sluice-offsets", "offsets"), ("sluice-configs", "configs"), ("sluice-status", "statuses")]
    {
        assert_eq!(cleanup_policy(&broker, topic), "compact", "{purpose} topic");
    }
    run(&count("count", 2000), "data-2", 1999);
    // `sluice topics` reads the local log, which holds nothing here: it says where the
    // records went instead of printing an empty list.
    let listed = sluice()
        .args(["topics", "list", "--config"])
        .arg(&worker)
        .arg("--data-dir")
        .arg(dir.path().join("data-2"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(listed.status.success(), "{said}");
    assert!(listed.stdout.is_empty(), "{}", String::from_utf8_lossy(&listed.stdout));
    assert!(said.contains(&format!("in the Kafka cluster at {}", broker.bootstrap())), "{said}");
    let offsets: serde_json::Value = serde_json::from_str(&offsets("data-3")).unwrap();
    assert_eq!(offsets, json!({"offsets": [{"partition": {"counter": 0}, "offset": {"seq": 1999}}]}));
    let values: Vec<String> = broker
        .read("numbers")
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap()).trim_end_matches('.').to_string())
        .collect();
    let expected: Vec<String> = (0..2000).map(|seq| format!("0-{seq}")).collect();
    let mut sorted = values.clone();
    sorted.sort_by_key(|v| v[2..].parse::<u64>().unwrap());
    sorted.dedup();
    assert_eq!(sorted, expected, "the second run continued where the first committed");

    // The offsets topic holds Connect's bytes, where Connect's producer would put them.
    let key = br#"["count",{"counter":0}]"#;
    let records = broker.read("sluice-offsets");
    let last = records.iter().rfind(|r| r.key.as_deref() == Some(&key[..])).expect("the counter's offset record");
    assert_eq!(last.value.as_deref(), Some(&br#"{"seq":1999}"#[..]));
    assert_eq!(last.partition, (java_murmur2(key) & 0x7fffffff) % 5, "partitioned as Java's producer does");
}

/// `sluice run` of one counter connector in `dir` with the worker config `worker`.
fn run_counter(dir: &Path, worker: &Path) -> Command {
    let file = connector_file(
        dir,
        "c.json",
        &json!({"name": "c", "config": {"connector.class": "counter", "topic": "t"}}).to_string(),
    );
    let mut command = sluice();
    command.arg("run").arg("--data-dir").arg(dir.join("data")).arg("--config").arg(worker).arg(file);
    command
}

#[test]
fn a_state_topic_that_is_not_compacted_is_refused_with_the_key_named() {
    let broker = Broker::start();
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let topic = NewTopic::new("plain-offsets", 1, TopicReplication::Fixed(1)).set("cleanup.policy", "delete");
    futures_executor::block_on(admin(&broker).create_topics([&topic], &options)).unwrap().remove(0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let worker = connector_file(
        dir.path(),
        "sluice.toml",
        &broker.worker_toml(true, "\"offset.storage.topic\" = \"plain-offsets\"\n"),
    );
    let out = run_counter(dir.path(), &worker).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr.contains("plain-offsets")
            && stderr.contains("offset.storage.topic")
            && stderr.contains("cleanup.policy=compact"),
        "{stderr}"
    );
}

#[test]
fn serve_on_kafka_storage_brings_every_connector_back_from_the_topics() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, broker.worker_toml(true, "")).unwrap();
    let plugins = plugin_folder(dir.path(), &["counter"]);
    let mut server = Server::start(&dir.path().join("data-1"), &plugins, Some(&config));
    for name in ["running", "paused", "stopped"] {
        let body = json!({"name": name, "config": {
            "connector.class": "counter", "topic": name, "tasks.max": "2", "records.per.second": "50",
            "topic.creation.default.partitions": "1", "topic.creation.default.replication.factor": "1",
        }});
        assert_eq!(server.call("POST", "/connectors", None, Some(&body.to_string())).status, 201);
        server.wait_for("RUNNING", &format!("/connectors/{name}/status"), None, |s| all_in(s, "RUNNING", 2));
    }
    assert_eq!(server.call("PUT", "/connectors/paused/pause", None, None).status, 202);
    assert_eq!(server.call("PUT", "/connectors/stopped/stop", None, None).status, 204);
    server.wait_for("paused", "/connectors/paused/status", None, |s| all_in(s, "PAUSED", 2));
    server.wait_for("stopped", "/connectors/stopped/status", None, |s| s["connector"]["state"] == "STOPPED");
    let offsets_before = server.get("/connectors/stopped/offsets").json();
    server.kill();

    // A new data directory: everything comes from the three topics.
    let server = Server::start(&dir.path().join("data-2"), &plugins, Some(&config));
    let mut names = server.get("/connectors").json().as_array().unwrap().clone();
    names.sort_by_key(|n| n.as_str().unwrap().to_string());
    assert_eq!(names, vec![json!("paused"), json!("running"), json!("stopped")]);
    server.wait_for("running back RUNNING", "/connectors/running/status", None, |s| all_in(s, "RUNNING", 2));
    server.wait_for("paused back PAUSED", "/connectors/paused/status", None, |s| all_in(s, "PAUSED", 2));
    let stopped = server
        .wait_for("stopped back STOPPED", "/connectors/stopped/status", None, |s| s["connector"]["state"] == "STOPPED");
    assert_eq!(stopped["tasks"], json!([]));
    assert_eq!(server.get("/connectors/stopped/offsets").json(), offsets_before);
    assert_eq!(server.get("/connectors/running/config").json()["records.per.second"], "50");
    assert_eq!(server.get("/connectors/running/tasks").json().as_array().unwrap().len(), 2);
}

#[test]
fn a_worker_whose_cluster_does_not_answer_says_so_while_it_waits() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let worker = connector_file(
        dir.path(),
        "sluice.toml",
        &format!("[kafka]\n\"bootstrap.servers\" = \"{address}\"\n[storage]\nkind = \"kafka\"\n"),
    );
    let log = dir.path().join("stderr");
    let mut child = run_counter(dir.path(), &worker).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    // Well before start-up gives up (a minute), the worker names what it waits for.
    let said = wait_until("a warning that the cluster does not answer", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("waiting for the Kafka cluster").then_some(text)
    });
    let still_running = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(still_running, "it waits for the cluster rather than giving up at once: {said}");
    assert!(said.contains(&address) && said.contains("bootstrap.servers"), "{said}");
}
