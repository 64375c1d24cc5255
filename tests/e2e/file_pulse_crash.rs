//! file-pulse under SIGKILL: `sluice run` is killed at 10 random moments while it streams
//! a mixed workload (a second wave of files arrives part-way) and restarted each time;
//! afterwards every line of every file is in the local topic exactly once, in order.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice::config::DEFAULT_TENANT;

use crate::files::drop_mixed;
use crate::{connector_file, crash_rng, sluice, wait_until};

const KILLS: usize = 10;

#[test]
fn file_pulse_survives_sigkill_with_every_line_exactly_once() {
    let mut rng = crash_rng();
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    let inbox = std::fs::canonicalize(inbox).unwrap();
    let data = dir.path().join("data");
    let file = connector_file(
        dir.path(),
        "pulse.json",
        &serde_json::json!({"name": "pulse", "config": {
            "connector.class": "file-pulse", "tasks.max": "3", "topic": "lines",
            "fs.listing.directory.path": inbox, "fs.listing.interval.ms": "100", "monitor.interval.ms": "50",
            "fs.cleanup.policy": "delete", "sandbox.fs.write": inbox,
            "poll.max.records": "500",
        }})
        .to_string(),
    );
    let mut expected: BTreeMap<String, Vec<String>> = drop_mixed(&inbox, "first", 20, 2, 60_000);
    let start = || sluice().arg("run").arg("--data-dir").arg(&data).arg(&file).spawn().unwrap();
    let count = || crate::stored_count(&data) as usize;
    for kill in 0..KILLS {
        if kill == KILLS / 2 {
            expected.extend(drop_mixed(&inbox, "second", 10, 1, 60_000));
        }
        let before = count();
        let mut child = start();
        // Most kills land while lines flow, whatever the machine's speed; every fourth at
        // any moment, start-up included.
        if kill % 4 != 3 {
            let total: usize = expected.values().map(Vec::len).sum();
            wait_until("lines to flow", || (count() > before || count() >= total).then_some(()));
        }
        std::thread::sleep(Duration::from_millis(rng.u64(0..500)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let mut child = start();
    let total: usize = expected.values().map(Vec::len).sum();
    wait_until("every file delivered and deleted", || {
        (std::fs::read_dir(&inbox).unwrap().next().is_none() && count() >= total).then_some(())
    });
    child.kill().unwrap();
    child.wait().unwrap();

    let db = crate::stores(&data).unwrap();
    let mut delivered: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for stored in db.local().read(DEFAULT_TENANT, "lines", 0, usize::MAX >> 1).unwrap() {
        let key = String::from_utf8(stored.record.key.unwrap().to_vec()).unwrap();
        delivered.entry(key).or_default().push(String::from_utf8(stored.record.value.unwrap().to_vec()).unwrap());
    }
    assert_eq!(delivered.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>());
    for (name, lines) in &expected {
        assert_eq!(delivered[name].len(), lines.len(), "{name}: lines lost or duplicated");
        assert_eq!(&delivered[name], lines, "{name}: lines out of order");
    }
    println!("{KILLS} kills: {total} lines of {} files, none lost or duplicated", expected.len());
}
