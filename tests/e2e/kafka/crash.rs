//! file-pulse into Kafka, with offsets in Kafka too, under SIGKILL: `sluice run` is killed
//! at 10 random moments and restarted; afterwards no line of any file is missing from the
//! topic, every file's lines first appear in order, and what was sent twice (at-least-once:
//! a batch delivered but not yet committed at a kill) is counted and bounded.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::{Broker, lines_by_file};
use crate::files::drop_mixed;
use crate::{connector_file, crash_rng, sluice, wait_until};

const KILLS: usize = 10;
const TASKS: usize = 3;
const BATCH: usize = 500;

#[test]
fn file_pulse_into_kafka_loses_nothing_under_sigkill() {
    let mut rng = crash_rng();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let inbox = std::fs::canonicalize(inbox).unwrap();
    let worker = connector_file(dir.path(), "sluice.toml", &broker.worker_toml(true, ""));
    let file = connector_file(
        dir.path(),
        "pulse.json",
        &serde_json::json!({"name": "pulse", "config": {
            "connector.class": "file-pulse", "tasks.max": TASKS.to_string(), "topic": "lines",
            "fs.listing.directory.path": inbox, "fs.listing.interval.ms": "100", "monitor.interval.ms": "50",
            "fs.cleanup.policy": "delete", "sandbox.fs.write": inbox,
            "poll.max.records": BATCH.to_string(), "topic.creation.default.partitions": "3",
            "topic.creation.default.replication.factor": "1",
        }})
        .to_string(),
    );
    let mut expected: BTreeMap<String, Vec<String>> = drop_mixed(&inbox, "first", 20, 2, 30_000);
    let data = dir.path().join("data");
    let start =
        || sluice().arg("run").arg("--data-dir").arg(&data).arg("--config").arg(&worker).arg(&file).spawn().unwrap();
    let delivered = || broker.count("lines") as usize;
    for kill in 0..KILLS {
        if kill == KILLS / 2 {
            expected.extend(drop_mixed(&inbox, "second", 10, 1, 30_000));
        }
        let before = if kill % 4 == 3 { 0 } else { delivered() };
        let mut child = start();
        if kill % 4 != 3 {
            let total: usize = expected.values().map(Vec::len).sum();
            wait_until("lines to flow", || {
                let now = delivered();
                (now > before || now >= total).then_some(())
            });
        }
        std::thread::sleep(Duration::from_millis(rng.u64(0..500)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let mut child = start();
    wait_until("every file delivered and deleted", || {
        std::fs::read_dir(&inbox).unwrap().next().is_none().then_some(())
    });
    // Deleted after its last offset was committed: the lines are in the topic.
    child.kill().unwrap();
    child.wait().unwrap();

    let records = broker.read("lines");
    let partitions: std::collections::BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
    assert!(
        partitions.len() > 1 && partitions.iter().all(|p| *p < 3),
        "topic.creation.default.partitions=3: {partitions:?}"
    );
    assert!(
        records
            .iter()
            .all(|r| r.headers.iter().any(|(k, v)| k == "file.path" && r.key.as_deref() == Some(v.as_slice()))),
        "every record keeps its key and file-pulse's file.path header"
    );
    let delivered = lines_by_file(&records);
    let total: usize = expected.values().map(Vec::len).sum();
    let mut duplicates = 0;
    for (name, lines) in &expected {
        let got = delivered.get(name).unwrap_or_else(|| panic!("{name}: no line delivered"));
        let mut seen = HashSet::new();
        let first: Vec<&String> = got.iter().filter(|l| seen.insert(l.as_str())).collect();
        assert_eq!(first.len(), lines.len(), "{name}: lines lost");
        assert!(first.iter().zip(lines).all(|(a, b)| *a == b), "{name}: lines out of order");
        duplicates += got.len() - lines.len();
    }
    assert_eq!(delivered.len(), expected.len(), "records of files that were never dropped");
    let bound = KILLS * TASKS * BATCH;
    assert!(duplicates <= bound, "{duplicates} lines sent twice, more than one batch per task per kill ({bound})");
    println!(
        "{KILLS} kills: {total} lines of {} files in Kafka, none lost; {duplicates} sent twice (at-least-once; bound {bound})",
        expected.len()
    );
}
