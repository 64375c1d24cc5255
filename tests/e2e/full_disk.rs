//! A full disk: the data directory lives on a small tmpfs the test mounts (CI runs as
//! root); a counter writes until the disk is full. The task fails with a reason that names
//! the disk, nothing committed is lost or split (records and offsets agree), and once space
//! is freed a restart resumes exactly once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sluice::config::DEFAULT_TENANT;
use sluice::storage::Namespace;

use crate::{connector_file, sluice, wait_until};

const RECORDS: u64 = 6000;

/// A size-limited tmpfs, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(at: &Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(at).unwrap();
        let status =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(at).status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "this test mounts a small tmpfs and needs root (mount -t tmpfs) to do it"
        );
        SmallDisk(at.to_path_buf())
    }

    fn grow(&self, size: &str) {
        let status = Command::new("mount").args(["-o", &format!("remount,size={size}")]).arg(&self.0).status().unwrap();
        assert!(status.success());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The committed seq and the records of the counter, read from the data directory.
fn committed(data: &Path) -> (Option<u64>, Vec<String>) {
    let Ok(stores) = crate::stores(data) else { return (None, Vec::new()) };
    let ns = Namespace::new(DEFAULT_TENANT, "filler");
    let seq = stores
        .offsets()
        .offsets(&ns, &[r#"{"counter":0}"#.to_string()])
        .ok()
        .and_then(|found| found[0].clone())
        .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
        .and_then(|o| o["seq"].as_u64());
    let records = stores.local().read(DEFAULT_TENANT, "fill", 0, usize::MAX >> 1).unwrap_or_default();
    (seq, records.into_iter().map(|r| String::from_utf8(r.record.value.unwrap().to_vec()).unwrap()).collect())
}

fn assert_consistent(data: &Path) -> usize {
    let (seq, values) = committed(data);
    for (n, value) in values.iter().enumerate() {
        assert!(value.starts_with(&format!("0-{n}.")), "record {n} is {}", &value[..20.min(value.len())]);
    }
    assert_eq!(seq.map(|s| s + 1), Some(values.len() as u64), "the committed offset and the records disagree");
    values.len()
}

#[test]
fn a_full_disk_fails_the_task_plainly_and_a_restart_resumes_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(&dir.path().join("disk"), "12m");
    let data = disk.0.join("data");
    // The plugin folder (and its compile cache, which the data directory holds) starts
    // with only the counter, so the small disk is for records.
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(Path::new(sluice::BUILT_PLUGINS).join("counter.wasm"), plugins.join("counter.wasm")).unwrap();
    let file = connector_file(
        dir.path(),
        "filler.json",
        &format!(
            r#"{{"name": "filler", "config": {{"connector.class": "counter", "topic": "fill", "record.size": "4096", "batch.size": "50", "record.count": "{RECORDS}", "records.per.second": "0"}}}}"#
        ),
    );
    let log = dir.path().join("run.log");
    let start = || {
        let mut command = sluice();
        command.arg("run").arg("--plugin-path").arg(&plugins).arg("--data-dir").arg(&data).arg(&file);
        command.stderr(Stdio::from(std::fs::File::create(&log).unwrap())).spawn().unwrap()
    };
    let mut child = start();
    let reason = wait_until("the task to fail on the full disk", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.lines().find(|l| l.contains("task is FAILED")).map(String::from)
    });
    assert!(reason.contains("disk holding the data directory"), "{reason}");
    assert!(reason.contains(data.to_str().unwrap()), "the reason names the directory: {reason}");
    let before = assert_consistent(&data);
    assert!(before > 0 && (before as u64) < RECORDS, "{before} records before the disk filled");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(assert_consistent(&data), before, "a kill after the failure changed nothing");

    // Space freed: a restart resumes from the committed offset, every record exactly once.
    disk.grow("128m");
    let mut child = start();
    wait_until("every record after the restart", || (committed(&data).0 == Some(RECORDS - 1)).then_some(()));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(assert_consistent(&data) as u64, RECORDS);
    println!("full disk: {before} records before it filled, {RECORDS} exactly once after the restart");
}
