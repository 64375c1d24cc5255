//! A broker outage mid-stream: `sluice serve` (state in Kafka) runs counters into Kafka;
//! the broker is taken down long enough for the tasks to say so in their status, then
//! brought back; the tasks recover by themselves, with nothing lost.

use std::collections::BTreeSet;

use serde_json::json;

use super::Broker;
use crate::rest::{Server, all_in, plugin_folder};
use crate::wait_until;

const RECORDS: u64 = 20_000;

fn counter_id(value: &[u8]) -> (u32, u64) {
    let text = String::from_utf8_lossy(value);
    let (task, seq) = text.trim_end_matches('.').split_once('-').unwrap();
    (task.parse().unwrap(), seq.parse().unwrap())
}

#[test]
fn a_broker_outage_loses_nothing_and_the_tasks_recover_by_themselves() {
    let mut broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, broker.worker_toml(true, "")).unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["counter"]), Some(&config));
    let created = server.call(
        "POST",
        "/connectors",
        None,
        Some(
            &json!({"name": "count", "config": {
                "connector.class": "counter", "topic": "numbers", "tasks.max": "2",
                "record.count": RECORDS.to_string(), "records.per.second": "1500",
                "topic.creation.default.partitions": "2", "topic.creation.default.replication.factor": "1",
            }})
            .to_string(),
        ),
    );
    assert_eq!(created.status, 201, "{created:?}");
    wait_until("records to flow", || (broker.count("numbers") > 2000).then_some(()));

    broker.stop();
    let during = server.wait_for("a task saying it cannot deliver", "/connectors/count/status", None, |s| {
        s["tasks"].as_array().is_some_and(|tasks| {
            tasks.iter().any(|t| t["state"] == "RUNNING" && t["trace"].as_str().is_some_and(|t| t.contains("deliver")))
        })
    });
    println!("during the outage: {during}");
    broker.restart();

    let done = |s: &serde_json::Value| {
        s["offsets"]
            .as_array()
            .is_some_and(|o| o.len() == 2 && o.iter().all(|o| o["offset"]["seq"].as_u64() == Some(RECORDS - 1)))
    };
    server.wait_for("every record delivered after the outage", "/connectors/count/offsets", None, done);
    let status = server.wait_for("both tasks RUNNING without a note", "/connectors/count/status", None, |s| {
        all_in(s, "RUNNING", 2) && s["tasks"].as_array().unwrap().iter().all(|t| t["trace"].is_null())
    });
    assert_eq!(status["connector"]["state"], "RUNNING");

    let records = broker.read("numbers");
    let distinct: BTreeSet<(u32, u64)> = records.iter().map(|r| counter_id(r.value.as_deref().unwrap())).collect();
    let expected: BTreeSet<(u32, u64)> = (0..2).flat_map(|t| (0..RECORDS).map(move |s| (t, s))).collect();
    assert_eq!(distinct.len(), expected.len(), "records lost in the outage");
    assert_eq!(distinct, expected);
    println!(
        "outage: {} records, none lost, {} sent twice (at-least-once)",
        expected.len(),
        records.len() - expected.len()
    );
}

/// A record Kafka will never take (larger than the producer's `message.max.bytes`) fails
/// its task at once with why, rather than being sent again for minutes with a status that
/// does not say; and a worker told to stop while the broker is away stops within its stop
/// deadline, its undelivered batch given up (not committed), rather than once its resends
/// run out.
#[test]
fn a_refused_record_fails_at_once_and_a_stop_does_not_wait_for_an_absent_broker() {
    let mut broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, broker.worker_toml(false, "")).unwrap();
    let data = dir.path().join("data");
    let mut server = Server::start(&data, &plugin_folder(dir.path(), &["counter"]), Some(&config));
    let connector = |name: &str, extra: serde_json::Value| {
        let mut config = json!({"connector.class": "counter", "topic": name, "destination": "kafka",
            "topic.creation.default.partitions": "1", "topic.creation.default.replication.factor": "1"});
        config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let created =
            server.call("POST", "/connectors", None, Some(&json!({"name": name, "config": config}).to_string()));
        assert_eq!(created.status, 201, "{created:?}");
    };

    connector("big", json!({"record.size": "1040000", "batch.size": "1", "record.count": "3"}));
    let failed = server.wait_for("the task refused by Kafka FAILED", "/connectors/big/status", None, |s| {
        s["tasks"][0]["state"] == "FAILED"
    });
    let trace = failed["tasks"][0]["trace"].as_str().unwrap_or_default();
    assert!(trace.contains("larger than Kafka takes") && trace.contains("message.max.bytes"), "{failed}");

    connector("count", json!({"records.per.second": "500"}));
    wait_until("records to flow", || (broker.count("count") > 200).then_some(()));
    broker.stop();
    server.wait_for("a task saying it cannot deliver", "/connectors/count/status", None, |s| {
        s["tasks"][0]["trace"].as_str().is_some_and(|t| t.contains("deliver"))
    });
    // `terminate` fails the test if the worker is not gone within its generous deadline
    // (the resends alone would keep it five minutes).
    let exit = server.terminate();
    assert!(exit.success(), "{exit:?}\n{}", server.log());
}

/// file-pulse into Kafka while the broker is away: nothing is committed, so the connector
/// looks at its task as stalled. The file it reads was removed meanwhile (only its open
/// reader still has it): a restart would reopen it by its path and lose the rest, as it
/// did. The task is left alone, and once the broker is back it reads the file to its end.
#[test]
fn a_file_removed_while_kafka_is_away_is_read_to_its_end() {
    let mut broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let inbox = std::fs::canonicalize(inbox).unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, broker.worker_toml(false, "")).unwrap();
    let server = Server::start(&dir.path().join("data"), &plugin_folder(dir.path(), &["file-pulse"]), Some(&config));
    let lines: Vec<String> = (0..30_000).map(|i| format!("big {i}")).collect();
    let hidden = inbox.join(".big.txt.part");
    std::fs::write(&hidden, format!("{}\n", lines.join("\n"))).unwrap();
    std::fs::rename(&hidden, inbox.join("big.txt")).unwrap();
    let inbox_path = inbox.to_string_lossy();
    let connector = json!({"name": "pulse", "config": {
        "connector.class": "file-pulse", "topic": "lines", "destination": "kafka",
        "fs.listing.directory.path": inbox_path, "sandbox.fs.write": inbox_path,
        "poll.max.records": "50", "task.stall.timeout.ms": "1500",
        "topic.creation.default.partitions": "1", "topic.creation.default.replication.factor": "1",
    }});
    let created = server.call("POST", "/connectors", None, Some(&connector.to_string()));
    assert_eq!(created.status, 201, "{created:?}");
    wait_until("records to flow", || (broker.count("lines") > 500).then_some(()));
    broker.stop();
    let waiting = server.wait_for("the task saying it cannot deliver", "/connectors/pulse/status", None, |s| {
        s["tasks"][0]["trace"].as_str().is_some_and(|t| t.contains("deliver"))
    });
    std::fs::remove_file(inbox.join("big.txt")).unwrap();
    // Past the stall timeout: the connector either leaves the task alone, saying why, or
    // restarts it (a new instance), which loses the rest of the file.
    wait_until("the connector to leave the task alone or restart it", || {
        let instance = server.get("/connectors/pulse/status").json()["tasks"][0]["instance"].clone();
        (server.log().contains("is not restarted: it holds big.txt") || instance != waiting["tasks"][0]["instance"])
            .then_some(())
    });
    broker.restart();
    let offsets = server
        .wait_for("big.txt done", "/connectors/pulse/offsets", None, |o| o["offsets"][0]["offset"]["done"] == true);
    assert!(offsets["offsets"][0]["offset"].get("end").is_none(), "read to its end: {offsets}");
    let mut sent: Vec<String> =
        broker.read("lines").iter().map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap()).collect();
    sent.sort();
    sent.dedup();
    let mut expected = lines;
    expected.sort();
    assert_eq!(sent.len(), expected.len(), "every line at least once");
    assert_eq!(sent, expected);
}
