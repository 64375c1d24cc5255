//! Crash safety of the embedded default: `sluice run` is SIGKILLed at 20 random moments
//! and restarted each time; afterwards every record is in the local topic exactly once
//! and the committed offsets match the last record of each partition.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice::config::DEFAULT_TENANT;
use sluice::storage::Namespace;

use crate::{connector_file, crash_rng, sluice, stored_count, wait_until};

const TASKS: u32 = 2;
const PER_TASK: u64 = 5000;
const KILLS: usize = 20;

fn committed(data: &std::path::Path) -> BTreeMap<String, u64> {
    let Ok(db) = crate::stores(data) else { return BTreeMap::new() };
    let offsets = db.offsets().all_offsets(&Namespace::new(DEFAULT_TENANT, "crashy")).unwrap();
    offsets
        .into_iter()
        .map(|(p, o)| (p, serde_json::from_str::<serde_json::Value>(&o).unwrap()["seq"].as_u64().unwrap()))
        .collect()
}

#[test]
fn sigkill_at_random_moments_loses_and_duplicates_nothing() {
    let mut rng = crash_rng();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = connector_file(
        dir.path(),
        "crashy.json",
        &format!(
            r#"{{"name": "crashy", "config": {{"connector.class": "counter", "tasks.max": "{TASKS}", "topic": "crash",
                 "record.count": "{PER_TASK}", "records.per.second": "600", "batch.size": "50"}}}}"#
        ),
    );
    let start = || sluice().arg("run").arg("--data-dir").arg(&data).arg(&file).spawn().unwrap();

    let mut kills_mid_stream = 0;
    for kill in 0..KILLS {
        let before = stored_count(&data);
        let mut child = start();
        // Three kills in four land while records flow, whatever the machine's speed; the
        // fourth at any moment, start-up included.
        if kill % 4 != 3 {
            let all = TASKS as u64 * PER_TASK;
            wait_until("records to flow", || {
                (stored_count(&data) > before || stored_count(&data) >= all).then_some(())
            });
        }
        std::thread::sleep(Duration::from_millis(rng.u64(0..300)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let after = stored_count(&data);
        if after > before && after < TASKS as u64 * PER_TASK {
            kills_mid_stream += 1;
        }
    }
    let mut child = start();
    wait_until("every task to commit its last record", || {
        let offsets = committed(&data);
        (offsets.len() == TASKS as usize && offsets.values().all(|&seq| seq == PER_TASK - 1)).then_some(())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        kills_mid_stream >= KILLS / 2,
        "only {kills_mid_stream} of {KILLS} kills landed while records were streaming"
    );

    let db = crate::stores(&data).unwrap();
    let records = db.local().read(DEFAULT_TENANT, "crash", 0, usize::MAX >> 1).unwrap();
    let mut per_task: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut last_offset: BTreeMap<String, String> = BTreeMap::new();
    for stored in &records {
        let value = String::from_utf8(stored.record.value.clone().unwrap().to_vec()).unwrap();
        let (task, seq) = value.trim_end_matches('.').split_once('-').unwrap();
        per_task.entry(task.parse().unwrap()).or_default().push(seq.parse().unwrap());
        last_offset.insert(stored.record.partition.to_string(), stored.record.offset.to_string());
    }
    for task in 0..TASKS {
        let seqs = per_task.remove(&task).unwrap_or_default();
        let duplicated = seqs.len() as i64 - {
            let mut unique = seqs.clone();
            unique.sort();
            unique.dedup();
            unique.len() as i64
        };
        assert_eq!(duplicated, 0, "task {task}: {duplicated} records duplicated");
        assert_eq!(seqs, (0..PER_TASK).collect::<Vec<_>>(), "task {task}: records lost or out of order");
    }
    let committed_offsets: BTreeMap<String, String> =
        db.offsets().all_offsets(&Namespace::new(DEFAULT_TENANT, "crashy")).unwrap().into_iter().collect();
    assert_eq!(committed_offsets, last_offset, "committed offsets must match the last record of each partition");
    println!("{KILLS} kills ({kills_mid_stream} mid-stream): {} records, none lost or duplicated", records.len());
}
