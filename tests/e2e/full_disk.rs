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

/// Takes whatever space is left on the disk of `path`'s folder: a file written until the
/// disk refuses more.
fn take_the_space_left(path: &Path) {
    use std::io::Write;
    let mut ballast = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 << 10];
    let mut size = block.len();
    // Whole blocks, then smaller and smaller writes down to a byte.
    while size > 0 {
        match ballast.write(&block[..size]) {
            Ok(0) | Err(_) => size /= 2,
            Ok(_) => {}
        }
    }
    let _ = ballast.sync_all();
}

/// A connector that filled the disk with records can still be deleted over REST: the data
/// directory keeps a reserve for operators' changes, freed when the disk is full. The
/// deletion holds after a SIGKILL, and the log says the reserve was used.
#[test]
fn a_connector_that_filled_the_disk_can_still_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(&dir.path().join("disk"), "12m");
    let data = disk.0.join("data");
    let plugins = crate::rest::plugin_folder(dir.path(), &["counter"]);
    let mut server = crate::rest::Server::start(&data, &plugins, None);
    assert!(data.join("disk-reserve").exists(), "the reserve is made when the data directory opens");
    let filler = serde_json::json!({"name": "filler", "config": {"connector.class": "counter", "topic": "fill",
        "record.size": "4096", "batch.size": "50", "records.per.second": "0"}});
    assert_eq!(server.call("POST", "/connectors", None, Some(&filler.to_string())).status, 201);
    server.wait_for("the task to fail on the full disk", "/connectors/filler/status", None, |status| {
        status["tasks"][0]["state"] == "FAILED"
    });
    // Nothing left either for the database's own files to grow into: changes go on
    // (each a few pages of the write-ahead log, which soon has to grow) until one finds
    // the disk full, and the reserve is freed for it.
    take_the_space_left(&disk.0.join("ballast"));
    for change in 0..2000 {
        if server.log().contains("its reserve") {
            break;
        }
        let (path, state) = if change % 2 == 0 { ("pause", "PAUSED") } else { ("resume", "RUNNING") };
        let reply = server.call("PUT", &format!("/connectors/filler/{path}"), None, None);
        assert_eq!(reply.status, 202, "change {change}: {reply:?}\n{}", server.log());
        server.wait_for(&format!("the connector {state}"), "/connectors/filler/status", None, |status| {
            status["connector"]["state"] == state
        });
    }
    assert!(server.log().contains("its reserve"), "{}", server.log());
    let deleted = server.call("DELETE", "/connectors/filler", None, None);
    assert_eq!(deleted.status, 204, "{deleted:?}\n{}", server.log());
    server.get("/connectors/filler").assert_error(404);
    server.kill();
    std::fs::remove_file(disk.0.join("ballast")).unwrap();
    disk.grow("64m");
    let server = crate::rest::Server::start(&data, &plugins, None);
    server.get("/connectors/filler").assert_error(404);
    assert!(data.join("disk-reserve").exists(), "the reserve is made again at the next start");
}
