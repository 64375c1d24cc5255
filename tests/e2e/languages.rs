//! The Python and JavaScript connectors under SIGKILL: `sluice run` is killed at random
//! moments while they stream and restarted each time; afterwards every record is in the
//! local topic exactly once, in order, and the committed offsets match the last record of
//! each partition. The final run's log shows the plugins' `log` calls: the Python
//! connector's per-task lag and the JavaScript connector's progress, both read from
//! committed offsets in `tick`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use sluice::config::DEFAULT_TENANT;
use sluice::storage::Namespace;

use crate::expected::{assert_fleet_complete, assert_replay_complete};
use crate::{connector_file, crash_rng, sluice, wait_until};

const KILLS: usize = 6;

fn stored(data: &Path, topic: &str) -> Vec<(String, String, String, String)> {
    let Ok(db) = crate::stores(data) else { return Vec::new() };
    let text = |bytes: Option<bytes::Bytes>| String::from_utf8(bytes.unwrap_or_default().to_vec()).unwrap();
    db.local()
        .read(DEFAULT_TENANT, topic, 0, usize::MAX >> 1)
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            (r.record.partition.to_string(), r.record.offset.to_string(), text(r.record.key), text(r.record.value))
        })
        .collect()
}

/// Records in `topic` so far, from the topic index (no records read).
fn stored_count(data: &Path, topic: &str) -> usize {
    let Ok(db) = crate::stores(data) else { return 0 };
    let topics = db.local().topics(DEFAULT_TENANT).unwrap_or_default();
    topics.into_iter().find(|(t, _)| t == topic).map_or(0, |(_, n)| n as usize)
}

fn committed(data: &Path, connector: &str) -> BTreeMap<String, String> {
    let Ok(db) = crate::stores(data) else { return BTreeMap::new() };
    db.offsets().all_offsets(&Namespace::new(DEFAULT_TENANT, connector)).unwrap_or_default().into_iter().collect()
}

/// Runs `connector` to completion through `KILLS` SIGKILLs, then once more with its log
/// captured until `done` holds and the log has `last_log_line`; returns the records of
/// `topic` and the final log. The rate limits keep work left for the final run (each
/// killed run lives at most about 0.4 s after its tasks start).
fn run_through_kills(
    name: &str,
    config: serde_json::Value,
    topic: &str,
    total: usize,
    done: impl Fn(&BTreeMap<String, String>) -> bool,
    last_log_line: &str,
) -> (Vec<(String, String, String, String)>, String) {
    assert!(sluice::PLUGIN_BUILD_PROBLEMS.is_empty(), "{}", sluice::PLUGIN_BUILD_PROBLEMS);
    let mut rng = crash_rng();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = connector_file(dir.path(), "c.json", &serde_json::json!({"name": name, "config": config}).to_string());
    let start = || sluice().arg("run").arg("--data-dir").arg(&data).arg(&file).spawn().unwrap();
    let mut kills_mid_stream = 0;
    for kill in 0..KILLS {
        let before = stored_count(&data, topic);
        let mut child = start();
        if kill % 3 != 2 {
            wait_until("records to flow", || {
                let now = stored_count(&data, topic);
                (now > before || now >= total).then_some(())
            });
        }
        std::thread::sleep(Duration::from_millis(rng.u64(0..300)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let after = stored_count(&data, topic);
        if after > before && after < total {
            kills_mid_stream += 1;
        }
    }
    assert!(kills_mid_stream >= KILLS / 2, "only {kills_mid_stream} of {KILLS} kills landed mid-stream");

    let log_path = dir.path().join("final.log");
    let mut child = start_logged(&data, &file, &log_path);
    wait_until("every partition to commit its last record", || done(&committed(&data, name)).then_some(()));
    // The connector's next ticks see it too, log it and retire the tasks.
    let log = wait_until(&format!("the log to say: {last_log_line}"), || {
        let log = std::fs::read_to_string(&log_path).ok()?;
        log.contains(last_log_line).then_some(log)
    });
    child.kill().unwrap();
    child.wait().unwrap();

    let records = stored(&data, topic);
    // The store keeps committed offsets in canonical form (sorted keys); records as sent.
    let canonical = |text: &str| sluice::storage::json::canonical_object(text).unwrap();
    let mut last = BTreeMap::new();
    for (partition, offset, _, _) in &records {
        last.insert(canonical(partition), canonical(offset));
    }
    assert_eq!(committed(&data, name), last, "committed offsets must match the last record of each partition");
    println!("{KILLS} kills ({kills_mid_stream} mid-stream): {} records", records.len());
    (records, log)
}

fn start_logged(data: &Path, file: &Path, log: &Path) -> std::process::Child {
    let log = std::fs::File::create(log).unwrap();
    let mut command = sluice();
    command.env("SLUICE_LOG", "info").env("NO_COLOR", "1").stderr(Stdio::from(log));
    command.arg("run").arg("--data-dir").arg(data).arg(file).spawn().unwrap()
}

#[test]
fn python_connector_survives_sigkill_with_every_reading_exactly_once() {
    let (fleet, readings) = (4, 300u64);
    let config = serde_json::json!({
        "connector.class": "sensor-fleet", "tasks.max": "2", "topic": "readings", "fleet.size": "4",
        "readings.per.sensor": readings.to_string(), "readings.per.second": "150", "batch.size": "20",
        "seed": "3", "monitor.interval.ms": "100",
    });
    let (records, log) = run_through_kills(
        "fleet",
        config,
        "readings",
        (fleet * readings) as usize,
        |offsets| {
            offsets.len() == fleet as usize && offsets.values().all(|o| o == &format!(r#"{{"seq":{}}}"#, readings - 1))
        },
        "all 4 sensors have sent their readings; no tasks",
    );
    let values: Vec<String> = records.into_iter().map(|(_, _, _, value)| value).collect();
    assert_fleet_complete(&values, fleet, readings, 3);
    // `log` from tick: each task's lag, computed from committed offsets. Tasks are
    // re-split as they finish, so only the shape and the end are certain.
    let lags: Vec<(u64, u64)> = log
        .lines()
        .filter_map(|line| line.split_once("lag task ")?.1.split_once(": ")?.1.split_once(" readings committed, "))
        .map(|(sent, rest)| (sent.parse().unwrap(), rest.split(' ').next().unwrap().parse().unwrap()))
        .collect();
    assert!(!lags.is_empty(), "no lag lines in the log:\n{log}");
    assert!(lags.iter().all(|&(sent, behind)| sent + behind <= fleet * readings), "lags: {lags:?}");
    assert!(lags.iter().any(|&(sent, behind)| behind == 0 && sent > 0), "no task reached 0 behind: {lags:?}");
}

#[test]
fn javascript_connector_survives_sigkill_with_every_line_exactly_once() {
    let config = serde_json::json!({
        "connector.class": "ndjson-replay", "tasks.max": "2", "topic": "replayed",
        "replay.rate": "300", "batch.size": "20", "monitor.interval.ms": "100",
    });
    let (records, log) = run_through_kills(
        "replay",
        config,
        "replayed",
        1400,
        |offsets| {
            offsets.get(r#"{"file":"clicks.ndjson"}"#).map(String::as_str) == Some(r#"{"line":999,"loop":0}"#)
                && offsets.get(r#"{"file":"orders.ndjson"}"#).map(String::as_str) == Some(r#"{"line":399,"loop":0}"#)
        },
        "progress clicks.ndjson: done; orders.ndjson: done",
    );
    let keyed: Vec<(String, String)> = records.into_iter().map(|(_, _, key, value)| (key, value)).collect();
    assert_replay_complete(&keyed, &["clicks.ndjson", "orders.ndjson"], 1);
    // `log` from tick: progress read from committed offsets, then the request to retire.
    assert!(log.contains("progress clicks.ndjson: loop 1 of 1, line "), "no progress while replaying:\n{log}");
    assert!(log.contains("every file is replayed; asking for a reconfiguration"), "log:\n{log}");
}
