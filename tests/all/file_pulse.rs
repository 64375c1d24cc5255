//! plugins/file-pulse in a real host: waves of files (large, gzipped, empty, no trailing
//! newline, CRLF) delivered exactly once and in order with `move` and `delete` cleanup;
//! a small file not waiting for a large one; tail mode with appends and rotation; stall
//! detection restarting only the stalled task; config validation.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use sluice::config::DEFAULT_TENANT;
use sluice::storage::State;

use crate::common::*;
use crate::files::{drop_file, drop_mixed};

/// Records of a topic grouped by key (the file's relative path), values in topic order.
pub fn by_file(host: &TestHost, topic: &str) -> BTreeMap<String, Vec<String>> {
    let mut files: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for stored in host.herder.services().stores.local().read(DEFAULT_TENANT, topic, 0, usize::MAX >> 1).unwrap() {
        let key = String::from_utf8(stored.record.key.unwrap().to_vec()).unwrap();
        files.entry(key).or_default().push(String::from_utf8(stored.record.value.unwrap().to_vec()).unwrap());
    }
    files
}

pub struct Dirs {
    pub inbox: tempfile::TempDir,
    pub done: tempfile::TempDir,
    pub failed: tempfile::TempDir,
}

impl Dirs {
    pub fn new() -> Dirs {
        Dirs {
            inbox: tempfile::tempdir().unwrap(),
            done: tempfile::tempdir().unwrap(),
            failed: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(dir: &tempfile::TempDir) -> String {
        std::fs::canonicalize(dir.path()).unwrap().to_string_lossy().into_owned()
    }

    pub fn config(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut config: Vec<(String, String)> = [
            ("topic", "lines".to_string()),
            ("fs.listing.directory.path", Self::path(&self.inbox)),
            ("fs.listing.interval.ms", "100".into()),
            ("monitor.interval.ms", "50".into()),
            (
                "sandbox.fs.write",
                format!("{},{},{}", Self::path(&self.inbox), Self::path(&self.done), Self::path(&self.failed)),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        config.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        config
    }
}

pub fn pulse(name: &str, config: &[(String, String)]) -> sluice::config::ConnectorConfig {
    let pairs: Vec<(&str, &str)> = config.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    connector(name, "file-pulse", &pairs)
}

/// 60 files in 4 waves of 15, each wave dropped while the previous one streams; returns
/// the expected lines per file.
async fn drop_waves(host: &TestHost, inbox: &Path) -> BTreeMap<String, Vec<String>> {
    let mut expected = BTreeMap::new();
    for wave in 0..4 {
        let large = if wave < 2 { 1 } else { 0 };
        expected.extend(drop_mixed(inbox, &format!("w{wave}"), 15, large, 40_000));
        let lines_so_far = host.values("lines").len();
        wait_until("the wave to start streaming", || (host.values("lines").len() > lines_so_far).then_some(())).await;
    }
    expected
}

async fn waves_exactly_once(policy: &str) {
    let started_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let done = Dirs::path(&dirs.done);
    let mut extra = vec![("tasks.max", "3"), ("fs.cleanup.policy", policy)];
    if policy == "move" {
        extra.push(("fs.cleanup.policy.move.success.path", &done));
    }
    host.start(pulse("pulse", &dirs.config(&extra))).await;
    host.wait_state("pulse", State::Running).await;
    let expected = drop_waves(&host, dirs.inbox.path()).await;
    let total: usize = expected.values().map(Vec::len).sum();
    wait_until("every file cleaned up and every line delivered", || {
        let inbox_empty = std::fs::read_dir(dirs.inbox.path()).unwrap().next().is_none();
        (inbox_empty && host.values("lines").len() >= total).then_some(())
    })
    .await;
    let delivered = by_file(&host, "lines");
    assert_eq!(delivered.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>());
    for (file, lines) in &expected {
        assert_eq!(&delivered[file], lines, "{file}: lines lost, repeated or out of order");
    }
    assert_headers_and_timestamps(&host, started_ms);
    let moved = std::fs::read_dir(dirs.done.path()).unwrap().count();
    match policy {
        "move" => assert_eq!(moved, 60, "every file, empty ones too, is moved"),
        _ => assert_eq!(moved, 0),
    }
    let status = host.status("pulse").unwrap();
    assert!(status.tasks.iter().all(|t| t.state == State::Running), "{status:?}");
}

/// Every record keeps what file-pulse set beside its value, as it crossed out of the
/// plugin's batch: its `file.path` header is its key, its `file.line` headers count each
/// file's lines from 1, and its timestamp is file-pulse's clock during the test.
fn assert_headers_and_timestamps(host: &TestHost, started_ms: i64) {
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let mut lines_seen: BTreeMap<String, u64> = BTreeMap::new();
    for stored in host.herder.services().stores.local().read(DEFAULT_TENANT, "lines", 0, usize::MAX >> 1).unwrap() {
        let record = stored.record;
        let key = String::from_utf8(record.key.clone().unwrap().to_vec()).unwrap();
        let headers: Vec<(&str, &[u8])> = record.headers.iter().map(|(k, v)| (k.as_str(), v.as_ref())).collect();
        let line = lines_seen.entry(key.clone()).or_default();
        *line += 1;
        assert_eq!(
            headers,
            [("file.path", key.as_bytes()), ("file.line", line.to_string().as_bytes())],
            "record {} of {key}",
            stored.offset
        );
        assert!((started_ms..=now_ms).contains(&record.timestamp_ms), "timestamp {}", record.timestamp_ms);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_of_files_exactly_once_with_move_cleanup() {
    waves_exactly_once("move").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_of_files_exactly_once_with_delete_cleanup() {
    waves_exactly_once("delete").await;
}

/// `poll.idle.max.ms` lets thousands of idle tasks poll rarely; a new file still reaches
/// its task at once, because the connector hands it over in a new task config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_files_do_not_wait_for_a_long_idle_backoff() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    host.start(pulse("pulse", &dirs.config(&[("poll.idle.max.ms", "600000")]))).await;
    host.wait_state("pulse", State::Running).await;
    let lines = || by_file(&host, "lines");
    for (round, name) in ["first.log", "second.log", "third.log"].into_iter().enumerate() {
        drop_file(dirs.inbox.path(), name, format!("{name} 1\n{name} 2\n").as_bytes());
        wait_until(&format!("{name} to be delivered"), || (lines().len() == round + 1).then_some(())).await;
    }
    for (file, got) in lines() {
        assert_eq!(got, [format!("{file} 1"), format!("{file} 2")], "{file}: lines lost or repeated");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_file_does_not_wait_for_a_large_one() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let line = format!("{}\n", "l".repeat(99));
    let big = line.repeat(2_000_000); // 200 MB
    drop_file(dirs.inbox.path(), "big.log", big.as_bytes());
    drop(big);
    host.start(pulse("pulse", &dirs.config(&[]))).await;
    let big_partition = || {
        let offsets = host
            .herder
            .services()
            .stores
            .offsets()
            .all_offsets(&sluice::storage::Namespace::new(DEFAULT_TENANT, "pulse"))
            .unwrap();
        offsets
            .into_iter()
            .find(|(_, o)| o.contains(r#""path":"big.log""#))
            .map(|(_, o)| serde_json::from_str::<serde_json::Value>(&o).unwrap())
    };
    wait_until("the large file to start streaming", || big_partition().filter(|o| o["line"].as_u64() > Some(1000)))
        .await;
    drop_file(dirs.inbox.path(), "small.log", b"small 1\nsmall 2\nsmall 3\n");
    wait_until("the small file to be delivered", || {
        (by_file(&host, "lines").get("small.log")?.len() == 3).then_some(())
    })
    .await;
    let big_now = big_partition().unwrap();
    assert_eq!(big_now["done"], false, "the large file finished first: {big_now}");
    assert!(big_now["line"].as_u64().unwrap() < 2_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_mode_follows_appends_and_reads_a_rotated_file_as_new() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let app = dirs.inbox.path().join("app.log");
    std::fs::write(&app, "one\ntwo\nthree\n").unwrap();
    let config = dirs.config(&[
        ("file.completion", "tail"),
        ("file.filter.regex.pattern", r".*\.log"),
        ("task.stall.timeout.ms", "300"),
    ]);
    host.start(pulse("pulse", &config)).await;
    let lines = || by_file(&host, "lines").get("app.log").cloned().unwrap_or_default();
    wait_until("the first lines", || (lines().len() == 3).then_some(())).await;
    let first = host.status("pulse").unwrap().tasks[0].instance;
    let mut file = std::fs::OpenOptions::new().append(true).open(&app).unwrap();
    file.write_all(b"four\nfi").unwrap();
    file.flush().unwrap();
    wait_until("the appended line", || (lines().len() == 4).then_some(())).await;
    file.write_all(b"ve\n").unwrap();
    drop(file);
    wait_until("the completed partial line", || (lines().len() == 5).then_some(())).await;
    // The same task instance followed the appends: it was neither restarted nor mistaken
    // for stalled while it waited for data.
    assert_eq!(host.status("pulse").unwrap().tasks[0].instance, first, "the tailing task was restarted");
    // Rotate: rename away (not matched by the filter), new file under the same name.
    std::fs::rename(&app, dirs.inbox.path().join("app.log.1")).unwrap();
    std::fs::write(&app, "new one\nnew two\n").unwrap();
    wait_until("the new file's lines", || (lines().len() == 7).then_some(())).await;
    assert_eq!(lines(), ["one", "two", "three", "four", "five", "new one", "new two"]);
    // The rotated file (renamed away, not matched by the filter) is finished after its
    // grace period; the new file under the old name is a new partition, still open.
    let offsets = wait_until("the rotated file finished", || {
        let offsets = host
            .herder
            .services()
            .stores
            .offsets()
            .all_offsets(&sluice::storage::Namespace::new(DEFAULT_TENANT, "pulse"))
            .unwrap();
        let done = offsets.iter().filter(|(_, o)| o.contains(r#""done":true"#)).count();
        (done == 1).then_some(offsets)
    })
    .await;
    assert_eq!(offsets.len(), 2, "the rotated file is a new partition: {offsets:?}");
    let done: Vec<bool> =
        offsets.iter().map(|(_, o)| serde_json::from_str::<serde_json::Value>(o).unwrap()["done"] == true).collect();
    assert!(done.contains(&true) && done.contains(&false), "old partition done, new one open: {offsets:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_task_is_restarted_alone() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    for name in ["a.log", "b.log"] {
        let text: String = (0..200).map(|i| format!("{name} {i}\n")).collect();
        drop_file(dirs.inbox.path(), name, text.as_bytes());
    }
    let timeout_ms = 1500;
    let config = dirs.config(&[
        ("tasks.max", "2"),
        ("task.stall.timeout.ms", "1500"),
        ("test.stall.after.lines", "10"),
        ("test.stall.task", "0"),
    ]);
    host.start(pulse("pulse", &config)).await;
    let first = wait_until("both tasks running", || {
        let tasks = host.status("pulse")?.tasks;
        (tasks.len() == 2 && tasks.iter().all(|t| t.state == State::Running)).then_some(tasks)
    })
    .await;
    let stalled_file = wait_until("task 0 to stall at line 10", || {
        let files = by_file(&host, "lines");
        files.iter().find(|(_, lines)| lines.len() == 10).map(|(f, _)| f.clone())
    })
    .await;
    let stalled_at = Instant::now();
    let restarted = wait_until("task 0 to be restarted", || {
        // While the task restarts the status may list no task for a moment.
        let tasks = host.status("pulse")?.tasks;
        let task = tasks.first()?;
        (task.instance != first[0].instance && task.state == State::Running).then_some(tasks)
    })
    .await;
    let waited = stalled_at.elapsed().as_millis() as u64;
    assert!(waited + 250 >= timeout_ms, "restarted after {waited} ms, before the {timeout_ms} ms stall timeout");
    // Task 1 finished its file: it is either still there, untouched, or gone (idle tasks at
    // the end are dropped), never restarted.
    assert!(restarted.get(1).is_none_or(|t| t.instance == first[1].instance), "only the stalled task is restarted");
    wait_until("the stalled file to finish", || {
        (by_file(&host, "lines").get(&stalled_file)?.len() == 200).then_some(())
    })
    .await;
    let delivered = by_file(&host, "lines");
    for (file, lines) in delivered {
        assert_eq!(lines, (0..200).map(|i| format!("{file} {i}")).collect::<Vec<_>>());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configs_fail_validation_with_the_key() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let ungranted = tempfile::tempdir().unwrap();
    let check = |extra: &[(&str, &str)], without: Option<&str>| {
        let mut config = dirs.config(extra);
        config.retain(|(k, _)| Some(k.as_str()) != without);
        pulse("bad", &config)
    };
    let ungranted_path = Dirs::path(&ungranted);
    let cases = [
        (
            check(&[("fs.listing.directory.path", &ungranted_path)], None),
            "fs.listing.directory.path",
            "(it does not exist, or is not granted); grant it with sandbox.fs.read",
        ),
        (check(&[], Some("topic")), "topic", "required"),
        (check(&[("topic", "app logs")], None), "topic", "'app logs' is not a topic name: it has ' '"),
        (
            check(&[("file.filter.regex.pattern", "([a-")], None),
            "file.filter.regex.pattern",
            "not a valid regular expression",
        ),
        (check(&[("fs.cleanup.policy", "shred")], None), "fs.cleanup.policy", "unknown policy 'shred'"),
    ];
    for (config, key, reason) in cases {
        let error = host.herder.validate(&config).await.err().unwrap_or_else(|| panic!("{key}: accepted"));
        assert_eq!(error.key.as_deref(), Some(key), "{error}");
        assert!(error.reason.contains(reason), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_file_fails_alone_and_is_retried_when_moved_back() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let (done, failed) = (Dirs::path(&dirs.done), Dirs::path(&dirs.failed));
    drop_file(dirs.inbox.path(), "bad.log.gz", b"this is not gzip");
    drop_file(dirs.inbox.path(), "good.log", b"good 1\ngood 2\n");
    let config = dirs.config(&[
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", &done),
        ("fs.cleanup.policy.move.failure.path", &failed),
    ]);
    host.start(pulse("pulse", &config)).await;
    let moved = dirs.failed.path().join("bad.log.gz");
    wait_until("the bad file in the failure folder", || moved.exists().then_some(())).await;
    wait_until("the good file in the success folder", || dirs.done.path().join("good.log").exists().then_some(()))
        .await;
    assert_eq!(by_file(&host, "lines").get("good.log").unwrap(), &["good 1", "good 2"]);
    let offsets = host
        .herder
        .services()
        .stores
        .offsets()
        .all_offsets(&sluice::storage::Namespace::new(DEFAULT_TENANT, "pulse"))
        .unwrap();
    let bad: serde_json::Value =
        serde_json::from_str(&offsets.iter().find(|(_, o)| o.contains(r#""path":"bad.log.gz""#)).unwrap().1).unwrap();
    assert_eq!(bad["done"], true);
    assert!(bad["failed"].as_str().unwrap().contains("cannot be read"), "{bad}");
    assert!(host.status("pulse").unwrap().tasks.iter().all(|t| t.state == State::Running), "no task failed");

    // Fix it where it lies (same file) and move it back: it is read again.
    std::fs::write(&moved, crate::files::gzip("fixed 1\nfixed 2\n")).unwrap();
    std::fs::rename(&moved, dirs.inbox.path().join("bad.log.gz")).unwrap();
    wait_until("the retried file's lines", || (by_file(&host, "lines").get("bad.log.gz")?.len() == 2).then_some(()))
        .await;
    assert_eq!(by_file(&host, "lines")["bad.log.gz"], ["fixed 1", "fixed 2"]);
    wait_until("the retried file in the success folder", || dirs.done.path().join("bad.log.gz").exists().then_some(()))
        .await;
}
