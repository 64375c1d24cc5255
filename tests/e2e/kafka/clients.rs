//! Many connectors into Kafka from one worker: those with the same producer settings share
//! one producer and one admin client (each librdkafka client has its own threads and broker
//! connections, busy even while idle), a connector with a `producer.override` has its own,
//! every record arrives, and a SIGTERM does not say that idle tasks' batches will be sent
//! again.

use serde_json::json;

use super::Broker;
use crate::{connector_file, sluice, wait_until};

const SHARING: usize = 20;

/// librdkafka clients in the process `pid`: each has one `rdk:main` thread.
fn kafka_clients(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "rdk:main")
        .count()
}

#[test]
fn kafka_connectors_with_the_same_settings_share_one_producer() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let worker = connector_file(dir.path(), "sluice.toml", &broker.worker_toml(false, ""));
    let connector = |name: String, extra: &[(&str, &str)]| {
        let mut config = json!({
            "connector.class": "counter", "topic": "shared", "destination": "kafka", "records.per.second": "20",
            "topic.creation.default.partitions": "1", "topic.creation.default.replication.factor": "1",
        });
        for (key, value) in extra {
            config[key] = json!(value);
        }
        connector_file(dir.path(), &format!("{name}.json"), &json!({"name": name, "config": config}).to_string())
    };
    let mut files: Vec<_> = (0..SHARING).map(|i| connector(format!("k{i}"), &[])).collect();
    files.push(connector("own".into(), &[("producer.override.linger.ms", "7")]));
    let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
    let mut worker_process = sluice()
        .arg("run")
        .arg("--config")
        .arg(&worker)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(&files)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let pid = worker_process.id();
    // Every connector delivering: an offset committed by each (after its records were
    // acknowledged).
    let data = dir.path().join("data");
    let names: Vec<String> = (0..SHARING).map(|i| format!("k{i}")).chain(["own".to_string()]).collect();
    wait_until("an offset committed by every connector", || {
        let stores = crate::stores(&data).ok()?;
        names
            .iter()
            .all(|name| {
                let ns = sluice::storage::Namespace::new(sluice::config::DEFAULT_TENANT, name);
                stores.offsets().offsets(&ns, &[r#"{"counter":0}"#.into()]).is_ok_and(|o| o[0].is_some())
            })
            .then_some(())
    });
    let clients = kafka_clients(pid);
    // One admin client and one producer for the twenty, the same two for the override
    // (two a connector before: 42).
    assert_eq!(clients, 4, "librdkafka clients for {} connectors", SHARING + 1);

    let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let exit = wait_until("the worker to stop", || worker_process.try_wait().unwrap());
    let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(exit.success(), "{exit:?}: {log}");
    assert!(!log.contains("sent again after a restart"), "idle tasks said their batches would be sent again: {log}");
}
