//! file-pulse on the patterns users have, each of which lost or re-sent records before:
//! the same name dropped again and again (with every cleanup policy), log rotation with a
//! writer appending throughout, copytruncate, a recursive listing that holds the success
//! folder, `move` onto a name already archived, a file that fails part way and is
//! retried, a name that is not UTF-8, a last line without its newline in tail mode,
//! `tasks.max` far above the work, a finished file that changes, one line too large for a
//! record (failing its file, or skipped under `errors.tolerance=all`), a file replaced or
//! removed while it is read, one rewritten in place while read and its task restarted, a
//! move cut short by a crash, and
//! the listed and archive folders removed and made again, files renamed over one name as
//! it is cleaned up, a file left under a cleanup's hidden name by a crash, and a task held by a log
//! renamed away that is still written, one file under several names (hard and
//! symbolic links) with links that lead nowhere, a log rewritten while its connector
//! was stopped, logs rotated faster than their tasks start under a filter that leaves out
//! the rotated names, a last line without newline in an idle log rotated or cleaned up,
//! and `move` to an archive on another file system, more logs in tail mode than are
//! followed at once, a new log on the identity of a finished file of another name, new
//! files on reused inodes with the same size and time (plain, `.gz`, read whole), files
//! replaced under one name while they wait to be read whole, and a `.gz` member appended
//! to a followed log.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use sluice::config::DEFAULT_TENANT;
use sluice::storage::{Namespace, State};

use crate::common::*;
use crate::file_pulse::{Dirs, by_file, pulse};
use crate::files::{drop_file, gzip};

/// Committed offsets of the `pulse` connector by the file path they last read.
fn offsets_by_path(host: &TestHost) -> BTreeMap<String, Value> {
    let offsets =
        host.herder.services().stores.offsets().all_offsets(&Namespace::new(DEFAULT_TENANT, "pulse")).unwrap();
    offsets
        .into_iter()
        .map(|(_, o)| serde_json::from_str::<Value>(&o).unwrap())
        .map(|o| (o["path"].as_str().unwrap().to_string(), o))
        .collect()
}

fn inode(path: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap())
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Five rounds of `data.csv` written under a hidden name and renamed into the inbox; the
/// filesystem usually hands the new file the inode of the one just removed.
async fn same_name_rounds(policy: &str) {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let done = Dirs::path(&dirs.done);
    let mut extra = vec![("fs.cleanup.policy", policy)];
    if policy == "move" {
        extra.push(("fs.cleanup.policy.move.success.path", &done));
    }
    host.start(pulse("pulse", &dirs.config(&extra))).await;
    let data = dirs.inbox.path().join("data.csv");
    let mut expected = Vec::new();
    let mut inodes = Vec::new();
    for round in 0..5 {
        if policy == "none" && round > 0 {
            std::fs::remove_file(&data).unwrap(); // the user clears the old file
        }
        let lines = [format!("round {round} a"), format!("round {round} b")];
        drop_file(dirs.inbox.path(), "data.csv", format!("{}\n{}\n", lines[0], lines[1]).as_bytes());
        inodes.push(inode(&data));
        expected.extend(lines);
        wait_until(&format!("round {round}'s lines"), || (host.values("lines").len() >= expected.len()).then_some(()))
            .await;
        if policy != "none" {
            wait_until(&format!("round {round}'s file cleaned up"), || (!data.exists()).then_some(())).await;
        }
    }
    assert_eq!(host.values("lines"), expected, "{policy}: a round lost or sent twice (inodes {inodes:?})");
    if policy == "move" {
        let archived = files_in(dirs.done.path());
        assert_eq!(archived, ["data-1.csv", "data-2.csv", "data-3.csv", "data-4.csv", "data.csv"]);
        let mut contents: Vec<String> =
            archived.iter().map(|f| std::fs::read_to_string(dirs.done.path().join(f)).unwrap()).collect();
        contents.sort();
        assert_eq!(contents.len(), 5, "an archive was overwritten");
        assert!(contents.iter().enumerate().all(|(i, c)| c.starts_with(&format!("round {i} a"))), "{contents:?}");
    }
    println!("{policy}: inodes of the five rounds: {inodes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_name_dropped_again_arrives_every_round_with_delete() {
    same_name_rounds("delete").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_name_dropped_again_arrives_every_round_with_move() {
    same_name_rounds("move").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_name_deleted_and_written_again_arrives_every_round_with_none() {
    same_name_rounds("none").await;
}

/// A user who renames each new file over the last under one name, quickly, while the
/// connector cleans up finished ones. A cleanup looked at the name, then (under `move`)
/// linked and unlinked it by name: a file renamed over it in between was archived unread,
/// or deleted. Now a file is taken off its name (renamed to a hidden one) before it is
/// checked and deleted or archived, and another file found there is given its name back.
/// Whatever the timing: every archived file was read, every file read arrives whole and
/// once, and the last file arrives (files the user replaced before they were read are the
/// user's own to lose).
async fn renamed_over_while_cleaned_up(policy: &str) {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let done = Dirs::path(&dirs.done);
    host.start(pulse(
        "pulse",
        &dirs.config(&[
            ("fs.cleanup.policy", policy),
            ("fs.cleanup.policy.move.success.path", &done),
            ("fs.listing.interval.ms", "10"),
            ("monitor.interval.ms", "5"),
        ]),
    ))
    .await;
    let inbox = dirs.inbox.path().to_path_buf();
    let files = 1500u32;
    let writer = std::thread::spawn(move || {
        for n in 0..files {
            drop_file(&inbox, "hot.txt", format!("file {n} a\nfile {n} b\n").as_bytes());
            // From at once to a little past the listing interval, so some files are read
            // and cleaned up as the next arrives, and some are replaced unread.
            std::thread::sleep(Duration::from_micros(u64::from(n % 23) * 700));
        }
    });
    tokio::task::spawn_blocking(move || writer.join().unwrap()).await.unwrap();
    let hot = dirs.inbox.path().join("hot.txt");
    wait_until("the last file cleaned up", || (!hot.exists()).then_some(())).await;
    let last = format!("file {} b", files - 1);
    wait_until("the last file's lines", || host.values("lines").contains(&last).then_some(())).await;
    // Files given a numbered name back (one renamed over the name as it was cleaned up)
    // are read and cleaned up too.
    wait_until(&format!("{policy}: the inbox empty"), || files_in(dirs.inbox.path()).is_empty().then_some(())).await;

    let values = host.values("lines");
    let mut once = std::collections::HashSet::new();
    let twice: Vec<&String> = values.iter().filter(|v| !once.insert(*v)).collect();
    assert!(twice.is_empty(), "{policy}: sent twice: {twice:?}");
    let file_of = |line: &str| line.split(' ').nth(1).unwrap().parse::<u32>().unwrap();
    let read: std::collections::HashSet<u32> = values.iter().map(|v| file_of(v)).collect();
    for n in &read {
        let lines = values.iter().filter(|v| file_of(v) == *n).count();
        assert_eq!(lines, 2, "{policy}: file {n}: {lines} of its 2 lines arrived");
    }
    let archived = files_in(dirs.done.path());
    let unread: Vec<String> = archived
        .iter()
        .map(|name| std::fs::read_to_string(dirs.done.path().join(name)).unwrap())
        .filter(|content| !read.contains(&file_of(content)))
        .collect();
    assert!(unread.is_empty(), "{} of {} archived files were never read: {unread:?}", unread.len(), archived.len());
    if policy == "delete" {
        assert!(archived.is_empty(), "{archived:?}");
    }
    println!("{policy}: {} of {files} files read, {} archived", read.len(), archived.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_renamed_over_one_name_while_it_is_archived_are_never_archived_unread() {
    renamed_over_while_cleaned_up("move").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_renamed_over_one_name_while_it_is_deleted_arrive_whole_and_once() {
    renamed_over_while_cleaned_up("delete").await;
}

/// A cleanup holds a file under a hidden name (`.hot.txt.sluice-cleanup`) while it checks
/// it; a crash there leaves it hidden, where the listing never looks. The next listing
/// gives it its name back, or a numbered one when a new file took the name meanwhile, and
/// both files are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_held_by_a_cleanup_cut_short_gets_its_name_back_and_is_read() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    std::fs::write(dirs.inbox.path().join(".hot.txt.sluice-cleanup"), b"held a\nheld b\n").unwrap();
    drop_file(dirs.inbox.path(), "hot.txt", b"new a\n");
    host.start(pulse("pulse", &dirs.config(&[("fs.cleanup.policy", "delete")]))).await;
    wait_until("both files read and deleted", || {
        (host.values("lines").len() == 3 && files_in(dirs.inbox.path()).is_empty()).then_some(())
    })
    .await;
    let mut values = host.values("lines");
    values.sort();
    assert_eq!(values, ["held a", "held b", "new a"]);
    let paths: Vec<String> = offsets_by_path(&host).into_keys().collect();
    assert_eq!(paths, ["hot-1.txt", "hot.txt"], "the held file under a numbered name beside the new one");
}

/// A writer appending throughout, rotating three times as logrotate does (older files
/// shifted up, `app.log` renamed to `app.log.1`), each time with an unfinished last line
/// that it completes, and a few more lines, in the renamed file before it reopens.
/// Every written line delivered once, in whatever order the files were read.
fn assert_each_once(mut delivered: Vec<String>, mut written: Vec<String>) {
    delivered.sort();
    written.sort();
    assert_eq!(delivered, written, "lines lost or sent twice across rotations");
}

fn rotating_writer(dir: &Path, ready: std::sync::mpsc::Receiver<()>) -> Vec<String> {
    let app = dir.join("app.log");
    let mut written = Vec::new();
    let mut out = std::fs::OpenOptions::new().create(true).append(true).open(&app).unwrap();
    for rotation in 0..3 {
        if rotation == 0 {
            // The connector is watching `app.log` before it first rotates.
            written.push("first".to_string());
            writeln!(out, "first").unwrap();
            ready.recv().unwrap();
        }
        for i in 0..300 {
            let line = format!("r{rotation} line {i}");
            writeln!(out, "{line}").unwrap();
            written.push(line);
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        write!(out, "r{rotation} partial").unwrap();
        for n in (1..=rotation).rev() {
            std::fs::rename(dir.join(format!("app.log.{n}")), dir.join(format!("app.log.{}", n + 1))).unwrap();
        }
        std::fs::rename(&app, dir.join("app.log.1")).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        writeln!(out, " end").unwrap();
        written.push(format!("r{rotation} partial end"));
        for i in 0..20 {
            let line = format!("r{rotation} late {i}");
            writeln!(out, "{line}").unwrap();
            written.push(line);
        }
        out = std::fs::OpenOptions::new().create(true).append(true).open(&app).unwrap();
    }
    for i in 0..100 {
        let line = format!("final {i}");
        writeln!(out, "{line}").unwrap();
        written.push(line);
    }
    written
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_rotation_in_tail_mode_sends_every_line_once() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    // The default filter (`.*`) matches the rotated names too.
    host.start(pulse("pulse", &dirs.config(&[("file.completion", "tail"), ("tasks.max", "2")]))).await;
    host.wait_state("pulse", State::Running).await;
    let inbox = dirs.inbox.path().to_path_buf();
    let (ready, wait) = std::sync::mpsc::channel();
    let writer = tokio::task::spawn_blocking(move || rotating_writer(&inbox, wait));
    wait_until("the first line", || host.values("lines").first().cloned()).await;
    ready.send(()).unwrap();
    let written = writer.await.unwrap();
    wait_until("every written line", || (host.values("lines").len() >= written.len()).then_some(())).await;
    // Give a duplicate the time to show up: the three rotated files finish after their
    // grace period; the current `app.log` stays open.
    wait_until("the rotated files finished", || {
        let offsets =
            host.herder.services().stores.offsets().all_offsets(&Namespace::new(DEFAULT_TENANT, "pulse")).ok()?;
        let done = offsets.iter().filter(|(_, o)| o.contains(r#""done":true"#)).count();
        (offsets.len() == 4 && done == 3).then_some(())
    })
    .await;
    assert_each_once(host.values("lines"), written);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copytruncate_reads_the_new_lines_from_the_start() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let app = dirs.inbox.path().join("app.log");
    let old: String = (0..100).map(|i| format!("old-{i}\n")).collect();
    std::fs::write(&app, &old).unwrap();
    let config = dirs.config(&[("file.completion", "tail"), ("file.filter.regex.pattern", r"app\.log")]);
    host.start(pulse("pulse", &config)).await;
    wait_until("the old lines", || (host.values("lines").len() == 100).then_some(())).await;
    // `: > app.log`, then the writer goes on at once: the file is soon longer than before.
    let mut out = std::fs::OpenOptions::new().write(true).truncate(true).open(&app).unwrap();
    for i in 0..300 {
        writeln!(out, "new-{i}").unwrap();
    }
    drop(out);
    wait_until("the new lines", || (host.values("lines").len() >= 400).then_some(())).await;
    let expected: Vec<String> =
        (0..100).map(|i| format!("old-{i}")).chain((0..300).map(|i| format!("new-{i}"))).collect();
    assert_eq!(host.values("lines"), expected);
    let offset = &offsets_by_path(&host)["app.log"];
    assert_eq!(offset["version"], 1, "the rewritten file is the next version: {offset}");
    assert_eq!(offset["line"], 300, "file.line counts the new version's lines: {offset}");
}

/// A recursive listing holding the success folder (`move` into `done/` inside it) never
/// reads it, nor moves its files one folder deeper at every listing, also when the folder
/// is named through a symbolic link from outside the listing.
async fn a_recursive_listing_holding_its_success_folder(named_through_a_link: bool) {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let done = dirs.inbox.path().join("done");
    std::fs::create_dir(&done).unwrap();
    let done = std::fs::canonicalize(done).unwrap().to_string_lossy().into_owned();
    drop_file(dirs.inbox.path(), "a.log", b"a 1\na 2\n");
    std::fs::create_dir(dirs.inbox.path().join("sub")).unwrap();
    drop_file(&dirs.inbox.path().join("sub"), "b.log", b"b 1\n");
    let link = dirs.done.path().join("archive");
    std::os::unix::fs::symlink(&done, &link).unwrap();
    let (link, inbox) = (link.to_string_lossy().into_owned(), Dirs::path(&dirs.inbox));
    let writable = format!("{inbox},{link}");
    let mut config = vec![
        ("fs.listing.recursive", "true"),
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", if named_through_a_link { &link } else { &done }),
    ];
    if named_through_a_link {
        config.push(("sandbox.fs.write", &writable));
    }
    host.start(pulse("pulse", &dirs.config(&config))).await;
    wait_until("both files archived", || {
        (Path::new(&done).join("a.log").exists() && Path::new(&done).join("sub/b.log").exists()).then_some(())
    })
    .await;
    // Several more listings: nothing is read again, nothing moved deeper.
    let passes_later = host.values("lines").len();
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(host.values("lines").len(), passes_later, "an archived file was read again");
    }
    assert_eq!(host.values("lines"), ["a 1", "a 2", "b 1"]);
    assert!(!Path::new(&done).join("done").exists(), "a file was moved into done/done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recursive_listing_never_reads_its_own_success_folder() {
    a_recursive_listing_holding_its_success_folder(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recursive_listing_never_reads_its_own_success_folder_named_through_a_link() {
    a_recursive_listing_holding_its_success_folder(true).await;
}

/// A success folder that is the listed directory itself, named through a symbolic link:
/// refused when the connector starts, naming the key (files moved there would be listed,
/// and renamed, again and again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_folder_that_is_the_listed_directory_through_a_link_is_refused() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let link = dirs.done.path().join("inbox-again");
    std::os::unix::fs::symlink(dirs.inbox.path(), &link).unwrap();
    let link = link.to_string_lossy().into_owned();
    let writable = format!("{},{link}", Dirs::path(&dirs.inbox));
    let config = dirs.config(&[
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", &link),
        ("sandbox.fs.write", &writable),
    ]);
    host.start(pulse("pulse", &config)).await;
    let status = host.wait_state("pulse", State::Failed).await;
    let trace = status.connector.trace.unwrap_or_default();
    assert!(
        trace.contains("fs.cleanup.policy.move.success.path") && trace.contains("is the listed directory itself"),
        "{trace}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_fails_part_way_is_retried_from_where_it_stopped() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let (done, failed) = (Dirs::path(&dirs.done), Dirs::path(&dirs.failed));
    let text: String = (0..20_000).map(|i| format!("zipped line {i}\n")).collect();
    let whole = gzip(&text);
    // A .gz cut short: thousands of lines decompress, then the stream ends early.
    drop_file(dirs.inbox.path(), "cut.log.gz", &whole[..whole.len() / 2]);
    let config = dirs.config(&[
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", &done),
        ("fs.cleanup.policy.move.failure.path", &failed),
    ]);
    host.start(pulse("pulse", &config)).await;
    let parked = dirs.failed.path().join("cut.log.gz");
    wait_until("the cut file in the failure folder", || parked.exists().then_some(())).await;
    let sent = host.values("lines").len();
    assert!(sent > 1000 && sent < 20_000, "{sent} lines before the cut");
    let offset = &offsets_by_path(&host)["cut.log.gz"];
    assert_eq!(offset["end"], "failed", "{offset}");

    // Moved back as it is: retried from where its records stopped, and fails there again.
    std::fs::rename(&parked, dirs.inbox.path().join("cut.log.gz")).unwrap();
    wait_until("the retry to fail again", || {
        (parked.exists() && offsets_by_path(&host)["cut.log.gz"]["attempt"] == 1).then_some(())
    })
    .await;
    assert_eq!(host.values("lines").len(), sent, "the retry sent lines twice");

    // Repaired in place (the same file, complete now) and moved back: the rest arrives.
    std::fs::write(&parked, &whole).unwrap();
    std::fs::rename(&parked, dirs.inbox.path().join("cut.log.gz")).unwrap();
    wait_until("the repaired file archived", || dirs.done.path().join("cut.log.gz").exists().then_some(())).await;
    let expected: Vec<String> = (0..20_000).map(|i| format!("zipped line {i}")).collect();
    assert_eq!(host.values("lines"), expected, "lines lost or sent twice across retries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_is_not_utf8_is_skipped_and_blocks_nothing() {
    use std::os::unix::ffi::OsStrExt;
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let odd = dirs.inbox.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9.log"));
    std::fs::write(odd, b"latin-1 name\n").unwrap();
    drop_file(dirs.inbox.path(), "good.log", b"good 1\n");
    host.start(pulse("pulse", &dirs.config(&[]))).await;
    wait_until("the good file", || (host.values("lines") == ["good 1"]).then_some(())).await;
    drop_file(dirs.inbox.path(), "late.log", b"late 1\n");
    wait_until("a file dropped later", || (host.values("lines").len() == 2).then_some(())).await;
    let status = host.status("pulse").unwrap();
    assert_eq!(status.connector.state, State::Running, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_line_without_newline_in_tail_mode_is_waiting_not_a_stall() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let app = dirs.inbox.path().join("app.log");
    std::fs::write(&app, "a\nb\npartial").unwrap();
    let config = dirs.config(&[("file.completion", "tail"), ("task.stall.timeout.ms", "300")]);
    host.start(pulse("pulse", &config)).await;
    wait_until("the complete lines", || (host.values("lines").len() == 2).then_some(())).await;
    let first = host.wait_task("pulse", 0, State::Running).await.instance;
    // Ten stall timeouts with the unfinished line waiting: no restart.
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(host.status("pulse").unwrap().tasks[0].instance, first, "the waiting task was restarted as stalled");
    }
    std::fs::OpenOptions::new().append(true).open(&app).unwrap().write_all(b" line\n").unwrap();
    wait_until("the completed line", || (host.values("lines").len() == 3).then_some(())).await;
    assert_eq!(host.values("lines"), ["a", "b", "partial line"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_follow_the_files_not_tasks_max() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    drop_file(dirs.inbox.path(), "one.log", b"only\n");
    host.start(pulse("pulse", &dirs.config(&[("tasks.max", "600")]))).await;
    wait_until("the file", || (host.values("lines").len() == 1).then_some(())).await;
    let status = host.status("pulse").unwrap();
    assert_eq!(status.tasks.len(), 1, "one file needs one task: {status:?}");

    let dirs = Dirs::new();
    drop_file(dirs.inbox.path(), "one.log", b"only\n");
    host.start(pulse("huge", &dirs.config(&[("tasks.max", "100000"), ("topic", "huge")]))).await;
    wait_until("the file under a huge tasks.max", || (host.values("huge").len() == 1).then_some(())).await;
    let status = host.status("huge").unwrap();
    assert_eq!(status.connector.state, State::Running, "{status:?}");
    assert_eq!(status.tasks.len(), 1, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_file_that_changes_in_eof_mode_is_read_again_as_a_new_version() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let file = dirs.inbox.path().join("data.log");
    drop_file(dirs.inbox.path(), "data.log", b"a\nb\n");
    host.start(pulse("pulse", &dirs.config(&[]))).await;
    wait_until("the first version", || (offsets_by_path(&host).get("data.log")?["done"] == true).then_some(())).await;
    std::fs::OpenOptions::new().append(true).open(&file).unwrap().write_all(b"c\n").unwrap();
    wait_until("the second version", || {
        let offset = offsets_by_path(&host).get("data.log")?.clone();
        (offset["version"] == 1 && offset["done"] == true).then_some(())
    })
    .await;
    assert_eq!(host.values("lines"), ["a", "b", "a", "b", "c"], "documented: the whole file again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_line_too_large_for_a_record_fails_its_file_alone() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let (done, failed) = (Dirs::path(&dirs.done), Dirs::path(&dirs.failed));
    let big = format!("before\n{}\nafter\n", "x".repeat(3 << 20));
    drop_file(dirs.inbox.path(), "big.log", big.as_bytes());
    drop_file(dirs.inbox.path(), "good.log", b"good 1\ngood 2\n");
    let config = dirs.config(&[
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", &done),
        ("fs.cleanup.policy.move.failure.path", &failed),
    ]);
    host.start(pulse("pulse", &config)).await;
    wait_until("the big file in the failure folder", || dirs.failed.path().join("big.log").exists().then_some(()))
        .await;
    drop_file(dirs.inbox.path(), "late.log", b"late 1\n");
    wait_until("the good and the late file", || {
        let files = by_file(&host, "lines");
        (files.get("good.log")?.len() == 2 && files.get("late.log")?.len() == 1).then_some(())
    })
    .await;
    assert_eq!(by_file(&host, "lines")["big.log"], ["before"], "the lines before the long one are sent");
    let offset = &offsets_by_path(&host)["big.log"];
    assert!(offset["failed"].as_str().unwrap().contains("sandbox.record.max.bytes"), "{offset}");
    let status = host.status("pulse").unwrap();
    assert!(status.tasks.iter().all(|t| t.state == State::Running), "{status:?}");
}

/// `fix.log` (`line 1`, `line 2`, a line too long for a record, `line 4`) failed at its
/// long line.
async fn fix_log_failed() -> (TestHost, Dirs) {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let broken = format!("line 1\nline 2\n{}\nline 4\n", "x".repeat(3 << 20));
    drop_file(dirs.inbox.path(), "fix.log", broken.as_bytes());
    host.start(pulse("pulse", &dirs.config(&[]))).await;
    wait_until("fix.log to fail at its long line", || {
        (offsets_by_path(&host).get("fix.log")?["end"] == "failed").then_some(())
    })
    .await;
    (host, dirs)
}

/// A failed file fixed in place by a write that truncates it first (`cat fixed > file`): a
/// listing that catches it empty does not take it for a new file, so the lines sent before
/// it failed are not sent again, and the fix is read on from where they stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_file_fixed_in_place_through_a_truncation_is_read_on_not_sent_again() {
    let (host, dirs) = fix_log_failed().await;
    assert_eq!(by_file(&host, "lines")["fix.log"], ["line 1", "line 2"]);
    // Truncated in place (the same inode), and seen so by a listing: the one that finds a
    // file dropped after the truncation.
    let path = dirs.inbox.path().join("fix.log");
    std::fs::File::create(&path).unwrap();
    drop_file(dirs.inbox.path(), "marker.log", b"marker\n");
    wait_until("a listing after the truncation", || by_file(&host, "lines").contains_key("marker.log").then_some(()))
        .await;
    std::fs::write(&path, "line 1\nline 2\nline 3\nline 4\n").unwrap();
    wait_until("the fix's last line", || (by_file(&host, "lines")["fix.log"].len() >= 4).then_some(())).await;
    assert_eq!(by_file(&host, "lines")["fix.log"], ["line 1", "line 2", "line 3", "line 4"]);
}

/// A failed file fixed with other first lines (written over in place, longer than what was
/// sent) is new content: read from its start, not on from the old position, which would
/// send the middle of a line and never the new first one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_file_fixed_with_other_first_lines_is_read_from_its_start() {
    let (host, dirs) = fix_log_failed().await;
    let fixed = "LINE-1 fixed\nline 2\nline 3\nline 4\n";
    let mut out = std::fs::OpenOptions::new().write(true).open(dirs.inbox.path().join("fix.log")).unwrap();
    out.write_all(fixed.as_bytes()).unwrap();
    out.set_len(fixed.len() as u64).unwrap();
    drop(out);
    wait_until("the fix's last line", || (by_file(&host, "lines")["fix.log"].last()? == "line 4").then_some(())).await;
    assert_eq!(by_file(&host, "lines")["fix.log"], ["line 1", "line 2", "LINE-1 fixed", "line 2", "line 3", "line 4"]);
}

/// Under `move`, a name at the filesystem's 255-byte limit that is taken in the archive
/// gets its number by a shorter name, rather than failing its move at every listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_at_the_length_limit_dropped_twice_is_archived_both_times() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let (done, failed) = (Dirs::path(&dirs.done), Dirs::path(&dirs.failed));
    let config = dirs.config(&[
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", &done),
        ("fs.cleanup.policy.move.failure.path", &failed),
    ]);
    host.start(pulse("pulse", &config)).await;
    let name = format!("{}.log", "n".repeat(251));
    for round in 0..2 {
        // Written under a short name, then renamed: a hidden `.part` name would not fit.
        let part = dirs.inbox.path().join(".part");
        std::fs::write(&part, format!("round {round}\n")).unwrap();
        std::fs::rename(&part, dirs.inbox.path().join(&name)).unwrap();
        wait_until("the file archived", || {
            (files_in(dirs.done.path()).len() == round + 1 && !dirs.inbox.path().join(&name).exists()).then_some(())
        })
        .await;
    }
    assert_eq!(host.values("lines"), ["round 0", "round 1"]);
    assert!(files_in(dirs.done.path()).iter().all(|archived| archived.len() <= 255));
}

/// A host whose tenant `slow` may send 300 records a second in all: a file of a few
/// thousand lines stays open for seconds, long enough to change the directory under it.
async fn slow_host() -> TestHost {
    let root = std::fs::canonicalize(std::env::temp_dir()).unwrap();
    let toml = format!(
        "[[tenant]]\nname = \"slow\"\nroots = [\"{}\"]\n[tenant.quotas]\nrecords_per_second = 300\n",
        root.display()
    );
    TestHost::with_tenants(&["file-pulse"], &toml).await
}

fn slow_values(host: &TestHost) -> Vec<String> {
    let records = host.herder.services().stores.local().read("slow", "lines", 0, usize::MAX >> 1).unwrap();
    records.into_iter().map(|r| String::from_utf8(r.record.value.unwrap().to_vec()).unwrap()).collect()
}

/// `big.txt` (3,000 lines) is being read by the one task when it is replaced by a new
/// file of the same name, or removed as another file arrives. The new file used to go
/// to that task at once, whose restart reopened `big.txt` by its path and lost the
/// lines it had not read yet; now the task reads it to its end first.
/// The slow host's one task part way through `big.txt`, of `lines` lines `old <i>`.
async fn big_file_being_read(lines: usize) -> (TestHost, Dirs, Vec<String>) {
    let host = slow_host().await;
    let dirs = Dirs::new();
    let config = dirs.config(&[("tenant", "slow"), ("tasks.max", "1"), ("poll.max.records", "50")]);
    host.start(pulse("pulse", &config)).await;
    let old: Vec<String> = (0..lines).map(|i| format!("old {i}")).collect();
    drop_file(dirs.inbox.path(), "big.txt", format!("{}\n", old.join("\n")).as_bytes());
    wait_until("big.txt being read", || (slow_values(&host).len() >= 100).then_some(())).await;
    (host, dirs, old)
}

async fn changed_while_read(replace: bool) {
    let (host, dirs, old) = big_file_being_read(3000).await;
    let new = if replace {
        drop_file(dirs.inbox.path(), "big.txt", b"new a\nnew b\n");
        ["new a", "new b"]
    } else {
        std::fs::remove_file(dirs.inbox.path().join("big.txt")).unwrap();
        drop_file(dirs.inbox.path(), "other.txt", b"other a\nother b\n");
        ["other a", "other b"]
    };
    let mut expected: Vec<String> = old.into_iter().chain(new.map(String::from)).collect();
    expected.sort();
    let ns = Namespace::new("slow", "pulse");
    wait_until("both files done", || (slow_files_done(&host) == 2).then_some(())).await;
    let mut values = slow_values(&host);
    values.sort();
    let what = if replace { "replaced" } else { "removed" };
    assert_eq!(values.len(), expected.len(), "{what} while read: {} lines sent of {}", values.len(), expected.len());
    assert_eq!(values, expected, "{what} while read: lines lost or sent twice");
    let offsets = host.herder.services().stores.offsets().all_offsets(&ns).unwrap();
    assert!(!offsets.iter().any(|(_, o)| o.contains("missing")), "a file was given up: {offsets:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_replaced_by_the_same_name_while_read_is_read_to_its_end() {
    changed_while_read(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_removed_while_read_as_another_arrives_is_read_to_its_end() {
    changed_while_read(false).await;
}

/// The offsets of the slow host's `pulse` connector that say done.
fn slow_files_done(host: &TestHost) -> usize {
    let offsets = host.herder.services().stores.offsets().all_offsets(&Namespace::new("slow", "pulse")).unwrap();
    offsets.iter().filter(|(_, o)| serde_json::from_str::<Value>(o).unwrap()["done"] == true).count()
}

/// `big.txt` is rewritten in place (the same inode, written over from its first byte)
/// while its task reads it: the task reads the new content from the start, as the file's
/// next version. A later restart of that task (here: a new file handed to it, which
/// changes its config) used to take that version, which the connector had not assigned,
/// for another task's, and drop the rest of the file for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_rewritten_in_place_while_read_is_read_to_its_end_across_a_restart_of_its_task() {
    let (host, dirs, old) = big_file_being_read(3000).await;
    let big = dirs.inbox.path().join("big.txt");
    let inode_before = inode(&big);
    let new: Vec<String> = (0..4000).map(|i| format!("new {i}")).collect();
    // Written over without truncating first, so the file is never shorter than it was.
    let mut out = std::fs::OpenOptions::new().write(true).open(&big).unwrap();
    out.write_all(format!("{}\n", new.join("\n")).as_bytes()).unwrap();
    drop(out);
    assert_eq!(inode(&big), inode_before, "rewritten in place");
    wait_until("the new content being read", || slow_values(&host).contains(&"new 100".to_string()).then_some(()))
        .await;
    drop_file(dirs.inbox.path(), "other.txt", b"other a\nother b\n");
    wait_until("both files done", || (slow_files_done(&host) == 2).then_some(())).await;
    let values = slow_values(&host);
    let of = |prefix: &str| values.iter().filter(|v| v.starts_with(prefix)).cloned().collect::<Vec<String>>();
    let sent_old = of("old ");
    assert_eq!(sent_old, old[..sent_old.len()], "the old content: what was sent before the rewrite, once each");
    assert_eq!(of("new "), new, "the new content: every line once, in order");
    assert_eq!(of("other "), ["other a", "other b"]);
}

/// A name archived more than 10,000 times (`data.csv` dropped every hour for 14 months)
/// still gets the next number: the archive named at most `data-9999.csv` before, and
/// every later `data.csv` stayed in the inbox, its cleanup failing at every listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_archived_ten_thousand_times_is_archived_again() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    std::fs::write(dirs.done.path().join("data.csv"), b"old\n").unwrap();
    for n in 1..=10_000 {
        std::fs::write(dirs.done.path().join(format!("data-{n}.csv")), b"old\n").unwrap();
    }
    let done = Dirs::path(&dirs.done);
    host.start(pulse(
        "pulse",
        &dirs.config(&[("fs.cleanup.policy", "move"), ("fs.cleanup.policy.move.success.path", &done)]),
    ))
    .await;
    let data = dirs.inbox.path().join("data.csv");
    for (round, archived) in ["data-10001.csv", "data-10002.csv"].into_iter().enumerate() {
        drop_file(dirs.inbox.path(), "data.csv", format!("round {round}\n").as_bytes());
        wait_until(&format!("round {round} archived"), || (!data.exists()).then_some(())).await;
        assert_eq!(std::fs::read_to_string(dirs.done.path().join(archived)).unwrap(), format!("round {round}\n"));
    }
    assert_eq!(host.values("lines"), ["round 0", "round 1"]);
}

/// A move to the success folder is a link, then an unlink of the listed name; a crash
/// between the two leaves the file under both names. The restarted connector finishes
/// that move instead of archiving the file a second time as `f-1.txt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_cut_short_by_a_crash_is_finished_not_repeated() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    host.start(pulse("pulse", &dirs.config(&[]))).await;
    drop_file(dirs.inbox.path(), "f.txt", b"one\ntwo\n");
    wait_until("f.txt read", || (host.values("lines").len() == 2).then_some(())).await;
    wait_until("f.txt done", || offsets_by_path(&host).get("f.txt").filter(|o| o["done"] == true).map(|_| ())).await;
    host.herder.delete(&Namespace::new(DEFAULT_TENANT, "pulse")).await.unwrap();

    // The state the crash left: archived, and still listed.
    std::fs::hard_link(dirs.inbox.path().join("f.txt"), dirs.done.path().join("f.txt")).unwrap();
    let done = Dirs::path(&dirs.done);
    host.start(pulse(
        "pulse",
        &dirs.config(&[("fs.cleanup.policy", "move"), ("fs.cleanup.policy.move.success.path", &done)]),
    ))
    .await;
    wait_until("f.txt gone from the inbox", || (!dirs.inbox.path().join("f.txt").exists()).then_some(())).await;
    assert_eq!(files_in(dirs.done.path()), ["f.txt"], "archived twice");
    assert_eq!(host.values("lines"), ["one", "two"], "read again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_and_move_folders_removed_and_made_again_are_followed() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let done = Dirs::path(&dirs.done);
    let config = dirs.config(&[("fs.cleanup.policy", "move"), ("fs.cleanup.policy.move.success.path", &done)]);
    host.start(pulse("pulse", &config)).await;
    drop_file(dirs.inbox.path(), "a.txt", b"a1\na2\n");
    wait_until("a.txt archived", || dirs.done.path().join("a.txt").exists().then_some(())).await;

    // The user clears both folders the way a script does.
    for dir in [dirs.inbox.path(), dirs.done.path()] {
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::create_dir(dir).unwrap();
    }
    drop_file(dirs.inbox.path(), "b.txt", b"b1\nb2\n");
    // Archived in two steps (linked under done/, then its claimed name in the inbox
    // removed): both are waited for.
    wait_until("b.txt archived in the new folder", || {
        (dirs.done.path().join("b.txt").exists() && files_in(dirs.inbox.path()).is_empty()).then_some(())
    })
    .await;
    assert_eq!(host.values("lines"), ["a1", "a2", "b1", "b2"], "a line lost or sent twice");
    assert_eq!(files_in(dirs.inbox.path()), Vec::<String>::new());
    let status = host.herder.status("pulse").unwrap();
    assert_eq!(status.connector.state, State::Running, "{status:?}");
}

/// The one task follows `app.log` in tail mode when it is renamed out of the listing and
/// its writer goes on appending: the task is held (a restart would reopen by path and lose
/// the rest) while its file is written, but not past `task.stall.timeout.ms` while a new
/// file waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_held_by_a_log_renamed_away_takes_new_files_after_the_stall_timeout() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let config = dirs.config(&[("file.completion", "tail"), ("tasks.max", "1"), ("task.stall.timeout.ms", "1500")]);
    host.start(pulse("pulse", &config)).await;
    let app = dirs.inbox.path().join("app.log");
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = {
        let (app, writing) = (app.clone(), writing.clone());
        std::thread::spawn(move || {
            let mut out = std::fs::OpenOptions::new().create(true).append(true).open(app).unwrap();
            let mut i = 0;
            while writing.load(std::sync::atomic::Ordering::Relaxed) {
                writeln!(out, "app {i}").unwrap();
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    wait_until("app.log followed", || (host.values("lines").len() >= 5).then_some(())).await;
    std::fs::rename(&app, dirs.failed.path().join("app.log")).unwrap();
    drop_file(dirs.inbox.path(), "new.txt", b"new a\nnew b\n");
    wait_until("new.txt read by the released task", || {
        let values = host.values("lines");
        (values.contains(&"new a".to_string()) && values.contains(&"new b".to_string())).then_some(())
    })
    .await;
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let values = host.values("lines");
    let mut unique = values.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), values.len(), "a line sent twice: {values:?}");
    let app_lines: Vec<&String> = values.iter().filter(|v| v.starts_with("app ")).collect();
    assert!(
        app_lines.iter().enumerate().all(|(i, line)| **line == format!("app {i}")),
        "app.log's lines in order from its first, none skipped before the release: {app_lines:?}"
    );
}

/// `mv inbox inbox.old && mkdir inbox` while a file of the old inbox is part way read: that
/// file is read to its end before the restart that grants the new inbox, whose files then
/// arrive too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_folder_renamed_away_while_a_file_is_read_finishes_it_before_following_the_new_one() {
    let (host, dirs, old) = big_file_being_read(1500).await;
    let renamed = dirs.inbox.path().with_extension("old");
    std::fs::rename(dirs.inbox.path(), &renamed).unwrap();
    std::fs::create_dir(dirs.inbox.path()).unwrap();
    drop_file(dirs.inbox.path(), "new.txt", b"new a\nnew b\n");
    wait_until("new.txt read", || slow_values(&host).contains(&"new b".to_string()).then_some(())).await;
    let mut values = slow_values(&host);
    values.sort();
    let mut expected: Vec<String> = old.into_iter().chain(["new a".to_string(), "new b".to_string()]).collect();
    expected.sort();
    assert_eq!(values.len(), expected.len(), "{} lines sent of {}", values.len(), expected.len());
    assert_eq!(values, expected, "lines lost or sent twice");
    std::fs::remove_dir_all(renamed).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_under_several_names_is_read_once_and_symbolic_links_are_followed() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let inbox = dirs.inbox.path();
    // Two hard links and a symbolic link to one file, all there at the first listing (as
    // `cp -al`, or a tool that links before it unlinks, leaves them).
    let written: Vec<String> = (0..300).map(|i| format!("a{i}")).collect();
    std::fs::write(inbox.join(".a.log"), written.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    std::fs::hard_link(inbox.join(".a.log"), inbox.join("b.log")).unwrap();
    std::os::unix::fs::symlink("b.log", inbox.join("c.log")).unwrap();
    // A file reached only through a link (its folder is not walked), and links that lead
    // outside the granted folders or nowhere: named in the log, skipped, harmless.
    std::fs::create_dir(inbox.join("sub")).unwrap();
    std::fs::write(inbox.join("sub/x.txt"), "x1\nx2\n").unwrap();
    std::os::unix::fs::symlink("sub/x.txt", inbox.join("x.log")).unwrap();
    // One that leads into another granted folder, which WASI alone does not follow.
    std::fs::write(dirs.done.path().join("y.txt"), "y1\n").unwrap();
    let done_name = dirs.done.path().file_name().unwrap().to_str().unwrap();
    std::os::unix::fs::symlink(format!("../{done_name}/y.txt"), inbox.join("y.log")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", inbox.join("away.log")).unwrap();
    std::os::unix::fs::symlink("missing.log", inbox.join("dangling.log")).unwrap();
    std::fs::rename(inbox.join(".a.log"), inbox.join("a.log")).unwrap();
    host.start(pulse("pulse", &dirs.config(&[("tasks.max", "3")]))).await;

    wait_until("every file finished", || {
        let offsets = offsets_by_path(&host);
        let done = |names: &[&str]| names.iter().any(|n| offsets.get(*n).is_some_and(|o| o["done"] == true));
        (done(&["a.log", "b.log", "c.log"]) && done(&["x.log"]) && done(&["y.log"])).then_some(())
    })
    .await;
    // A file dropped later is read after more listings, so a second reading of any name
    // would have begun by then.
    let before = host.values("lines").len();
    drop_file(inbox, "late.log", b"late\n");
    wait_until("a later file", || host.values("lines").contains(&"late".to_string()).then_some(())).await;
    let mut values = host.values("lines");
    values.sort();
    let mut expected: Vec<String> = written.into_iter().chain(["x1", "x2", "y1", "late"].map(String::from)).collect();
    expected.sort();
    assert_eq!(values, expected, "each line once ({before} before the later file)");
    assert_eq!(offsets_by_path(&host).len(), 4, "one partition per file: {:?}", offsets_by_path(&host).keys());
    assert_eq!(host.status("pulse").unwrap().connector.state, State::Running);
}

/// Under `move`, a file listed through a symbolic link is read through it, and the link
/// (not the file it leads to) is what is moved: once, and the file is not read again.
/// (The cleanup checks that what it moves is what was read; a link moved into the archive
/// leads nowhere from there, so that check looks at the link itself.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symbolic_link_is_moved_once_under_move() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let inbox = dirs.inbox.path();
    std::fs::create_dir(inbox.join("sub")).unwrap();
    std::fs::write(inbox.join("sub/real.txt"), "r1\nr2\n").unwrap();
    std::os::unix::fs::symlink("sub/real.txt", inbox.join("link.log")).unwrap();
    let done = Dirs::path(&dirs.done);
    host.start(pulse(
        "pulse",
        &dirs.config(&[("fs.cleanup.policy", "move"), ("fs.cleanup.policy.move.success.path", &done)]),
    ))
    .await;
    let link = inbox.join("link.log");
    wait_until("the link moved", || (std::fs::symlink_metadata(&link).is_err()).then_some(())).await;
    let archived = dirs.done.path().join("link.log");
    assert!(std::fs::symlink_metadata(&archived).unwrap().file_type().is_symlink(), "the link itself is archived");
    assert_eq!(std::fs::read_to_string(inbox.join("sub/real.txt")).unwrap(), "r1\nr2\n", "its file is left");
    drop_file(inbox, "late.log", b"late\n");
    // Archived: linked into the archive, then taken off the inbox.
    wait_until("a later file archived", || (files_in(inbox) == ["sub"]).then_some(())).await;
    assert_eq!(host.values("lines"), ["r1", "r2", "late"]);
    assert_eq!(files_in(dirs.done.path()), ["late.log", "link.log"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_folder_named_through_a_symbolic_link_is_read() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let link = dirs.done.path().join("inbox-link");
    std::os::unix::fs::symlink(dirs.inbox.path(), &link).unwrap();
    drop_file(dirs.inbox.path(), "a.log", b"one\ntwo\n");
    // The folder and its grant both named through the link, as a user types them.
    let link = format!("{}/", link.display());
    let config = [
        ("topic", "lines"),
        ("fs.listing.directory.path", link.as_str()),
        ("fs.listing.interval.ms", "100"),
        ("sandbox.fs.read", link.as_str()),
    ];
    host.start(crate::common::connector("pulse", "file-pulse", &config)).await;
    wait_until("the lines", || (host.values("lines").len() == 2).then_some(())).await;
    assert_eq!(host.values("lines"), ["one", "two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_rewound_by_hand_is_read_on_from_its_position() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let lines: Vec<String> = (1..=10).map(|i| format!("L{i}")).collect();
    std::fs::write(dirs.inbox.path().join("a.txt"), lines.iter().map(|l| format!("{l}\n")).collect::<String>())
        .unwrap();
    host.start(pulse("pulse", &dirs.config(&[]))).await;
    wait_until("the file", || (offsets_by_path(&host).get("a.txt")?["done"] == true).then_some(())).await;
    // As `PATCH /connectors/pulse/offsets` with what a user writes: where to read on,
    // without the size, modification time or head the plugin writes itself.
    let ns = Namespace::new(DEFAULT_TENANT, "pulse");
    host.herder.stop_connector(&ns).await.unwrap();
    let partition = host.herder.services().stores.offsets().all_offsets(&ns).unwrap().pop().unwrap().0;
    let rewind = r#"{"path":"a.txt","position":15,"line":5,"done":false}"#;
    host.herder.alter_offsets(&ns, &[(partition, Some(rewind.to_string()))]).await.unwrap();
    host.herder.set_paused(&ns, false).await.unwrap();
    wait_until("the file read on", || (host.values("lines").len() >= 15).then_some(())).await;
    let again: Vec<String> = lines.iter().chain(&lines[5..]).cloned().collect();
    wait_until("finished again", || (offsets_by_path(&host).get("a.txt")?["done"] == true).then_some(())).await;
    assert_eq!(host.values("lines"), again, "L6 to L10 again, not the whole file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_modified_too_recently_waits_for_the_minimum_age() {
    use std::time::SystemTime;
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let hour = Duration::from_secs(3600);
    let write = |name: &str, text: &str, modified: SystemTime| {
        let path = dirs.inbox.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(modified).unwrap();
    };
    // Still being written, as far as its modification time tells (an hour ahead stands
    // for "just now" for as long as the test needs).
    write("young.log", "young\n", SystemTime::now() + hour);
    write("old.log", "old\n", SystemTime::now() - hour);
    host.start(pulse("pulse", &dirs.config(&[("file.filter.minimum.age.ms", "1000")]))).await;
    wait_until("the old file", || host.values("lines").contains(&"old".to_string()).then_some(())).await;
    // Listings went on past the young file: a later old one is read, the young one not.
    write("later.log", "later\n", SystemTime::now() - hour);
    wait_until("a later file", || host.values("lines").contains(&"later".to_string()).then_some(())).await;
    assert!(!host.values("lines").contains(&"young".to_string()), "{:?}", host.values("lines"));
    // Old enough now: read, once.
    let path = dirs.inbox.path().join("young.log");
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(SystemTime::now() - hour).unwrap();
    wait_until("the young file", || host.values("lines").contains(&"young".to_string()).then_some(())).await;
    let mut values = host.values("lines");
    values.sort();
    assert_eq!(values, ["later", "old", "young"]);
}

/// A file copied into the folder in place (`cp`, not written elsewhere and renamed in),
/// with the default settings: its task reaches its end while the copy goes on. It used to
/// be finished there, its last line cut in two records, and then sent again whole as the
/// "changed" file's next version (in `read.mode=bytes`, sent part way, then whole). Now a
/// file at its end that was modified moments ago (`eof.quiet.ms`) is read on as it grows
/// and finished once quiet: every line once, whole.
async fn copied_in_place_slowly(read_mode: &str) {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    host.start(pulse("pulse", &dirs.config(&[("fs.listing.interval.ms", "20"), ("read.mode", read_mode)]))).await;
    let path = dirs.inbox.path().join("copied.csv");
    let mut file = std::fs::File::create(&path).unwrap();
    let lines: Vec<String> = (0..40).map(|i| format!("line {i} of the copy")).collect();
    for line in &lines {
        // A copy's writes end anywhere, mid-line too.
        let (first, rest) = line.split_at(6);
        file.write_all(first.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(15));
        file.write_all(format!("{rest}\n").as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(15));
    }
    drop(file);
    wait_until("the copy finished", || (offsets_by_path(&host).get("copied.csv")?["done"] == true).then_some(())).await;
    let expected = if read_mode == "bytes" { vec![format!("{}\n", lines.join("\n"))] } else { lines };
    assert_eq!(host.values("lines"), expected, "{read_mode}: cut, lost or sent twice");
    assert_eq!(offsets_by_path(&host)["copied.csv"].get("version"), None, "read again as a new version");
}

/// A `.gz` compressed in place in the listed folder (as `gzip` or logrotate's `compress`
/// writes it): its stream stops short where the writer is. It used to fail there ("cannot
/// be read: incomplete deflate stream"), to be retried only once it had been left alone
/// for 5 s (or, had the failure looked final, moved to the failure folder while still
/// being written). Now a stream that stops short in a file modified moments ago is read
/// on later: no failure, and the whole file arrives once and is archived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gz_compressed_in_place_is_read_whole_once() {
    use flate2::write::GzEncoder;
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let (done, failed) = (Dirs::path(&dirs.done), Dirs::path(&dirs.failed));
    let config = dirs.config(&[
        ("fs.listing.interval.ms", "20"),
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", &done),
        ("fs.cleanup.policy.move.failure.path", &failed),
    ]);
    host.start(pulse("pulse", &config)).await;
    let lines: Vec<String> = (0..3000).map(|i| format!("compressed line {i}")).collect();
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(format!("{}\n", lines.join("\n")).as_bytes()).unwrap();
    let compressed = gz.finish().unwrap();
    // Written as a compressor writes it: the header cut short first, then slices that end
    // anywhere in the deflate stream (mid-line, mid-block), a pause after each.
    let mut file = std::fs::File::create(dirs.inbox.path().join("app.log.1.gz")).unwrap();
    let mut written = 0;
    for size in std::iter::once(7).chain(std::iter::repeat(777)) {
        let end = (written + size).min(compressed.len());
        file.write_all(&compressed[written..end]).unwrap();
        written = end;
        if written == compressed.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    drop(file);
    let archived = dirs.done.path().join("app.log.1.gz");
    wait_until("the .gz archived", || archived.exists().then_some(())).await;
    let offset = &offsets_by_path(&host)["app.log.1.gz"];
    assert_eq!(offset.get("attempt"), None, "failed while being written, and retried: {offset}");
    assert_eq!(files_in(dirs.failed.path()), Vec::<String>::new(), "failed while being written");
    assert_eq!(host.values("lines"), lines, "lines lost or sent twice");
}

/// A `.gz` of two members, the second appended moments after the first was whole (`gzip
/// -c part2 >> file.gz`): the reader that reached the first member's end is opened again
/// for the second, and both arrive once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gz_member_appended_moments_later_is_read_too() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    host.start(pulse("pulse", &dirs.config(&[("fs.listing.interval.ms", "20")]))).await;
    let path = dirs.inbox.path().join("two.log.gz");
    std::fs::write(&path, gzip("first a\nfirst b\n")).unwrap();
    wait_until("the first member read", || (host.values("lines").len() == 2).then_some(())).await;
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&gzip("second a\n")).unwrap();
    wait_until("finished", || (offsets_by_path(&host).get("two.log.gz")?["done"] == true).then_some(())).await;
    assert_eq!(host.values("lines"), ["first a", "first b", "second a"]);
    assert_eq!(offsets_by_path(&host)["two.log.gz"].get("version"), None, "read again as a new version");
}

/// A file whose modification time is ahead of this machine's clock (written over a
/// network share whose server's clock runs ahead) would look "modified moments ago" for
/// an hour: it finishes once its task has seen it quiet for `eof.quiet.ms`, its last line
/// (without a newline) sent then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_modified_in_the_future_still_finishes() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let path = dirs.inbox.path().join("ahead.log");
    std::fs::write(&path, "one\ntwo").unwrap();
    let hour_ahead = std::time::SystemTime::now() + Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&path).unwrap().set_modified(hour_ahead).unwrap();
    host.start(pulse("pulse", &dirs.config(&[]))).await;
    wait_until("finished", || (offsets_by_path(&host).get("ahead.log")?["done"] == true).then_some(())).await;
    assert_eq!(host.values("lines"), ["one", "two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_copied_in_place_slowly_arrives_once_and_whole() {
    copied_in_place_slowly("lines").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_copied_in_place_slowly_is_read_whole_once_in_bytes_mode() {
    copied_in_place_slowly("bytes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_and_a_link_to_it_in_tail_mode_keep_one_name_and_whole_lines() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let inbox = dirs.inbox.path();
    let log = inbox.join("app.log");
    std::fs::write(&log, "l0\n").unwrap();
    std::os::unix::fs::symlink("app.log", inbox.join("current.log")).unwrap();
    let config = dirs.config(&[("file.completion", "tail"), ("tail.rotation.grace.ms", "200")]);
    host.start(pulse("pulse", &config)).await;
    wait_until("the first line", || (host.values("lines").len() == 1).then_some(())).await;
    let mut expected = vec!["l0".to_string()];
    for round in 1..=4 {
        // A line written in two parts, with listings (each seeing both names) between.
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        file.write_all(format!("l{round}-fir").as_bytes()).unwrap();
        let passes_before = host.values("lines").len();
        drop_file(inbox, &format!("marker{round}.txt"), b"");
        wait_until("a listing after the first part", || {
            offsets_by_path(&host).get(&format!("marker{round}.txt")).map(|_| ())
        })
        .await;
        file.write_all(b"st-and-second\n").unwrap();
        expected.push(format!("l{round}-first-and-second"));
        wait_until("the whole line", || (host.values("lines").len() > passes_before).then_some(())).await;
    }
    wait_until("every line", || (host.values("lines").len() >= expected.len()).then_some(())).await;
    let keyed = host.keyed_values("lines");
    assert_eq!(keyed.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(), expected, "each line once, whole");
    let keys: std::collections::BTreeSet<&str> = keyed.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys.len(), 1, "one file, one name: {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_rewritten_while_its_connector_was_stopped_is_read_from_its_start() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let log = dirs.inbox.path().join("app.log");
    std::fs::write(&log, "old 1\nold 2\n").unwrap();
    host.start(pulse("pulse", &dirs.config(&[("file.completion", "tail")]))).await;
    wait_until("the old lines", || (offsets_by_path(&host).get("app.log")?["position"] == 12).then_some(())).await;
    let ns = Namespace::new(DEFAULT_TENANT, "pulse");
    host.herder.stop_connector(&ns).await.unwrap();
    // As `copytruncate` then a busy writer, while nothing reads it: the same inode, longer
    // than what was read, other first bytes.
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&log)
        .unwrap()
        .write_all(b"new 1\nnew 2\nnew 3\n")
        .unwrap();
    host.herder.set_paused(&ns, false).await.unwrap();
    wait_until("the last new line", || host.values("lines").contains(&"new 3".to_string()).then_some(())).await;
    wait_until("all five", || (host.values("lines").len() >= 5).then_some(())).await;
    assert_eq!(host.values("lines"), ["old 1", "old 2", "new 1", "new 2", "new 3"], "new content read from its start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_errors_tolerance_all_a_line_too_large_is_skipped_and_its_file_read_on() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let long = "x".repeat(3 << 20);
    drop_file(dirs.inbox.path(), "big.log", format!("big before\n{long}\nbig after\n").as_bytes());
    // A live log whose long line is still being written when the task reaches it.
    let log = dirs.inbox.path().join("app.log");
    std::fs::write(&log, format!("app before\n{long}")).unwrap();
    let config = dirs.config(&[("errors.tolerance", "all"), ("file.completion", "tail"), ("tail.idle.ms", "1000")]);
    host.start(pulse("pulse", &config)).await;
    wait_until("the big file read past its long line", || {
        (by_file(&host, "lines").get("big.log")?.len() == 2).then_some(())
    })
    .await;
    wait_until("the task at the end of what the log has", || {
        let offset = offsets_by_path(&host).get("app.log")?.clone();
        (offset["size"].as_u64()? > 3 << 20).then_some(())
    })
    .await;
    std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(b"xxx\napp after\n").unwrap();
    wait_until("the log read past its long line", || {
        (by_file(&host, "lines").get("app.log")?.len() == 2).then_some(())
    })
    .await;
    let files = by_file(&host, "lines");
    assert_eq!(files["big.log"], ["big before", "big after"]);
    assert_eq!(files["app.log"], ["app before", "app after"]);
    let big = &offsets_by_path(&host)["big.log"];
    assert!(big["failed"].is_null(), "skipped, not failed: {big}");
    assert_eq!(big["line"], 3, "the skipped line counts: line numbers stay the file's");
    let stored = host.herder.services().stores.local().read(DEFAULT_TENANT, "lines", 0, 100).unwrap();
    let app_after =
        stored.iter().map(|s| &s.record).find(|r| r.value.as_deref() == Some(b"app after".as_slice())).unwrap();
    let line = app_after.headers.iter().find(|(k, _)| k.as_str() == "file.line").map(|(_, v)| v.to_vec());
    assert_eq!(line.as_deref(), Some(b"3".as_slice()), "app after is line 3 of app.log");
    let status = host.status("pulse").unwrap();
    assert!(status.tasks.iter().all(|t| t.state == State::Running), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_skipped_near_the_start_of_a_log_does_not_make_it_read_again_when_reopened() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    // The skipped line starts within the file's first 256 bytes (the offset's head), but
    // not at its start.
    let log = dirs.inbox.path().join("app.log");
    std::fs::write(&log, format!("hdr\n{}\nafter\n", "x".repeat(2 << 20))).unwrap();
    let config = dirs.config(&[("errors.tolerance", "all"), ("file.completion", "tail")]);
    host.start(pulse("pulse", &config)).await;
    wait_until("the line after the long one", || (host.values("lines").len() == 2).then_some(())).await;
    // Stopped and started again: the task reopens the log where it was.
    assert!(host.herder.stop("pulse").await);
    host.start(pulse("pulse", &config)).await;
    std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(b"more\n").unwrap();
    wait_until("the appended line", || host.values("lines").iter().any(|v| v == "more").then_some(())).await;
    assert_eq!(host.values("lines"), ["hdr", "after", "more"], "nothing read twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_rotated_faster_than_tasks_start_are_read_to_their_end_when_the_filter_leaves_out_their_new_names() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let config = dirs.config(&[
        ("file.completion", "tail"),
        ("file.filter.regex.pattern", r".*[.]log$"),
        ("tail.rotation.grace.ms", "300"),
    ]);
    host.start(pulse("pulse", &config)).await;
    host.wait_state("pulse", State::Running).await;
    let inbox = dirs.inbox.path().to_path_buf();
    // Rotations faster than a task restarts: a log is often renamed to `app.log.<n>`, which
    // the filter leaves out, before the task it was handed to opens it by its old name.
    let writer = tokio::task::spawn_blocking(move || {
        let app = inbox.join("app.log");
        let mut written = Vec::new();
        for rotation in 0..15 {
            let mut out = std::fs::OpenOptions::new().create(true).append(true).open(&app).unwrap();
            for i in 0..100 {
                let line = format!("r{rotation} line {i}");
                writeln!(out, "{line}").unwrap();
                written.push(line);
                if i % 20 == 0 {
                    std::thread::sleep(Duration::from_millis(25));
                }
            }
            std::fs::rename(&app, inbox.join(format!("app.log.{rotation}"))).unwrap();
            for i in 0..10 {
                let line = format!("r{rotation} late {i}");
                writeln!(out, "{line}").unwrap();
                written.push(line);
            }
        }
        written
    });
    let written = writer.await.unwrap();
    wait_until("every written line", || (host.values("lines").len() >= written.len()).then_some(())).await;
    assert_each_once(host.values("lines"), written);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_line_without_newline_is_sent_when_its_idle_log_is_rotated_or_cleaned_up() {
    // Rotated after it went idle: the held-back last line is sent once the rotation is over.
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let log = dirs.inbox.path().join("app.log");
    std::fs::write(&log, "a\nb\nc").unwrap();
    let tail = [("file.completion", "tail"), ("tail.idle.ms", "300"), ("tail.rotation.grace.ms", "200")];
    host.start(pulse("pulse", &dirs.config(&tail))).await;
    wait_until("the log finished idle", || {
        let offset = offsets_by_path(&host).get("app.log")?.clone();
        (offset["end"] == "idle").then_some(())
    })
    .await;
    assert_eq!(host.values("lines"), ["a", "b"], "c waits for its newline");
    std::fs::rename(&log, dirs.inbox.path().join("app.log.1")).unwrap();
    wait_until("the last line", || (host.values("lines").len() == 3).then_some(())).await;
    assert_eq!(host.values("lines"), ["a", "b", "c"]);

    // Finished idle under a cleanup that deletes it: nothing can complete the line later.
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let log = dirs.inbox.path().join("app.log");
    std::fs::write(&log, "x\ny").unwrap();
    let mut config = tail.to_vec();
    config.push(("fs.cleanup.policy", "delete"));
    host.start(pulse("pulse", &dirs.config(&config))).await;
    wait_until("the log deleted", || (!log.exists()).then_some(())).await;
    assert_eq!(host.values("lines"), ["x", "y"]);
}

/// As `tar -x` of files of one size whose times it keeps: fifteen files dropped one by one,
/// each deleted once read; each new file is likely to get the inode of the one deleted just
/// before it, with the same size and time. Every one is read (its first bytes, decompressed
/// for a `.gz`, tell it from the finished one).
async fn cleaned_up_one_by_one_on_reused_inodes(extra: &[(&str, &str)], gz: bool) {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let mut config = vec![("fs.cleanup.policy", "delete")];
    config.extend_from_slice(extra);
    host.start(pulse("pulse", &dirs.config(&config))).await;
    let time = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    let mut inodes = Vec::new();
    for i in 0..15 {
        let path = dirs.inbox.path().join(format!("data-{i:02}.csv{}", if gz { ".gz" } else { "" }));
        let staged = dirs.done.path().join("staged");
        let content = format!("record-{i:03}\n");
        std::fs::write(&staged, if gz { gzip(&content) } else { content.into_bytes() }).unwrap();
        std::fs::File::options().write(true).open(&staged).unwrap().set_modified(time).unwrap();
        std::fs::rename(&staged, &path).unwrap();
        inodes.push(inode(&path));
        wait_until("the file read and deleted", || (!path.exists()).then_some(())).await;
    }
    let expected: Vec<String> = (0..15).map(|i| format!("record-{i:03}")).collect();
    wait_until("every file's record", || (host.values("lines").len() >= 15).then_some(())).await;
    let values: Vec<String> = host.values("lines").iter().map(|v| v.trim_end().to_string()).collect();
    assert_eq!(values, expected, "inodes: {inodes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_cleaned_up_one_by_one_are_each_read_though_the_next_reuses_the_inode_size_and_time() {
    cleaned_up_one_by_one_on_reused_inodes(&[], false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gz_files_cleaned_up_one_by_one_are_each_read_though_the_next_reuses_the_inode_size_and_time() {
    cleaned_up_one_by_one_on_reused_inodes(&[], true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_read_whole_and_cleaned_up_one_by_one_are_each_read_though_the_next_reuses_the_inode() {
    cleaned_up_one_by_one_on_reused_inodes(&[("read.mode", "bytes")], false).await;
    cleaned_up_one_by_one_on_reused_inodes(&[("read.mode", "bytes")], true).await;
}

/// Bytes mode: a file replaced under its name (written under a hidden name and renamed into
/// place, over and over) while it waits to be quiet before it is read whole: each version
/// is read, once, through the descriptor its task holds, as lines mode reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_replaced_under_one_name_while_they_wait_to_be_read_whole_are_each_read() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let config = [("read.mode", "bytes"), ("eof.quiet.ms", "1500"), ("tasks.max", "4")];
    host.start(pulse("pulse", &dirs.config(&config))).await;
    let expected: Vec<String> = (0..8).map(|i| format!("snapshot {i:02}")).collect();
    let snap = dirs.inbox.path().join("snap.txt");
    for snapshot in &expected {
        let hidden = dirs.inbox.path().join(".snap.txt");
        std::fs::write(&hidden, format!("{snapshot}\n")).unwrap();
        std::fs::rename(&hidden, &snap).unwrap();
        // Replaced once a task has looked at it (its offset names its modification time),
        // which is within its quiet wait: a file replaced before any listing saw it could
        // be read by nobody.
        let meta = std::fs::metadata(&snap).unwrap();
        let mtime = (std::os::unix::fs::MetadataExt::mtime(&meta) as u64 * 1_000_000_000
            + std::os::unix::fs::MetadataExt::mtime_nsec(&meta) as u64)
            .to_string();
        wait_until(&format!("{snapshot} looked at by a task"), || {
            let offsets =
                host.herder.services().stores.offsets().all_offsets(&Namespace::new(DEFAULT_TENANT, "pulse")).ok()?;
            offsets
                .iter()
                .filter_map(|(_, offset)| serde_json::from_str::<Value>(offset).ok())
                .any(|offset| offset["path"] == "snap.txt" && offset["mtime"].to_string().trim_matches('"') == mtime)
                .then_some(())
        })
        .await;
    }
    wait_until("every snapshot", || (host.values("lines").len() >= expected.len()).then_some(())).await;
    let mut values: Vec<String> = host.values("lines").iter().map(|v| v.trim_end().to_string()).collect();
    values.sort();
    assert_eq!(values, expected);
}

/// Tail mode: a `.gz` followed as a live log (rsyslog's `zipLevel`, `gzip -c >> f.gz`)
/// gets a member appended after its first was read; the member is read before the log
/// finishes idle, and its cleanup deletes it only then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gz_member_appended_to_a_followed_log_is_read() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let config = [("file.completion", "tail"), ("tail.idle.ms", "3000"), ("fs.cleanup.policy", "delete")];
    host.start(pulse("pulse", &dirs.config(&config))).await;
    let path = dirs.inbox.path().join("live.log.gz");
    std::fs::write(&path, gzip("m1 a\nm1 b\n")).unwrap();
    wait_until("the first member read", || (host.values("lines").len() == 2).then_some(())).await;
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&gzip("m2 a\n")).unwrap();
    wait_until("the log finished idle and deleted", || (!path.exists()).then_some(())).await;
    assert_eq!(host.values("lines"), ["m1 a", "m1 b", "m2 a"]);
}

/// `move` to an archive on another file system (here tmpfs under /dev/shm beside a listing
/// on disk), where neither a link nor a rename can reach it: each file is copied there and
/// removed from the listing, read once, with no temporary copy left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_moved_to_an_archive_on_another_file_system() {
    let host = TestHost::new(&["file-pulse"]).await;
    let mut dirs = Dirs::new();
    // The listing under the build's folder (on disk even when TMPDIR is a tmpfs), the
    // archive in /dev/shm (tmpfs on Linux).
    dirs.inbox = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    dirs.done = tempfile::tempdir_in("/dev/shm").expect("/dev/shm: a tmpfs, another file system than the disk");
    let device = |dir: &Path| std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(dir).unwrap());
    assert_ne!(device(dirs.done.path()), device(dirs.inbox.path()), "the archive must be on another file system");
    let done = Dirs::path(&dirs.done);
    let mut expected = Vec::new();
    for n in 0..3 {
        let lines: Vec<String> = (0..200).map(|i| format!("file {n} line {i}")).collect();
        drop_file(dirs.inbox.path(), &format!("f{n}.log"), format!("{}\n", lines.join("\n")).as_bytes());
        expected.extend(lines);
    }
    // A name already taken in the archive: the moved file gets `-1`.
    std::fs::write(dirs.done.path().join("f0.log"), "archived before\n").unwrap();
    let config = dirs.config(&[("fs.cleanup.policy", "move"), ("fs.cleanup.policy.move.success.path", &done)]);
    host.start(pulse("pulse", &config)).await;
    wait_until("every file moved out of the listing", || files_in(dirs.inbox.path()).is_empty().then_some(())).await;
    assert_eq!(files_in(dirs.done.path()), ["f0-1.log", "f0.log", "f1.log", "f2.log"]);
    assert_eq!(std::fs::read_to_string(dirs.done.path().join("f0.log")).unwrap(), "archived before\n");
    for n in 0..3 {
        let archived = if n == 0 { "f0-1.log".to_string() } else { format!("f{n}.log") };
        let text = std::fs::read_to_string(dirs.done.path().join(archived)).unwrap();
        assert_eq!(text.lines().count(), 200, "file {n} archived whole");
    }
    let mut values = host.values("lines");
    values.sort();
    expected.sort();
    assert_eq!(values, expected, "each line once");
    assert_eq!(host.status("pulse").unwrap().connector.state, State::Running);
}

/// Tail mode with more logs than file-pulse follows at once (1,024 in all): a log that
/// keeps growing is never finished, so the logs past the limit would wait for good. The
/// followed logs take turns with the waiting ones instead: every line of every log
/// arrives, once, the lines written to a log while it waited its turn included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_logs_than_are_followed_at_once_take_turns_in_tail_mode() {
    const LOGS: usize = 1_040;
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let log = |i: usize| dirs.inbox.path().join(format!("log{i:04}.log"));
    let mut written = Vec::new();
    for i in 0..LOGS {
        written.push(format!("log{i:04}-1"));
        std::fs::write(log(i), format!("log{i:04}-1\n")).unwrap();
    }
    let config = dirs.config(&[("file.completion", "tail"), ("tasks.max", "2"), ("monitor.interval.ms", "200")]);
    host.start(pulse("pulse", &config)).await;
    wait_until("a first line from every log", || (host.values("lines").len() >= LOGS).then_some(())).await;
    // Every log grows again: those followed now, and those that gave their place.
    for i in 0..LOGS {
        written.push(format!("log{i:04}-2"));
        let mut out = std::fs::OpenOptions::new().append(true).open(log(i)).unwrap();
        writeln!(out, "log{i:04}-2").unwrap();
    }
    wait_until("every log's second line committed", || {
        let offsets = offsets_by_path(&host);
        (offsets.len() == LOGS && offsets.values().all(|o| o["line"] == 2)).then_some(())
    })
    .await;
    assert_each_once(host.values("lines"), written);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_log_on_the_identity_of_a_finished_file_of_another_name_is_followed_not_taken_for_rotated() {
    // A new log that gets the identity (inode) of a finished file of another name: as ext4
    // hands a freed inode to the next new file, or here an archived file moved back in under
    // a new name and written afresh. It is a new version, not that file rotated: it is
    // followed while written (quiet for less than tail.idle.ms at a time), never finished
    // as rotated and archived away from its writer after the rotation grace.
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let done = Dirs::path(&dirs.done);
    let config = dirs.config(&[
        ("file.completion", "tail"),
        ("tail.idle.ms", "3000"),
        ("tail.rotation.grace.ms", "200"),
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", &done),
    ]);
    host.start(pulse("pulse", &config)).await;
    std::fs::write(dirs.inbox.path().join("other.log"), "o0\no1\no2\n").unwrap();
    let archived = dirs.done.path().join("other.log");
    wait_until("other.log finished idle and archived", || archived.exists().then_some(())).await;

    let app = dirs.inbox.path().join("app.log");
    std::fs::rename(&archived, &app).unwrap();
    let mut out = std::fs::OpenOptions::new().write(true).truncate(true).open(&app).unwrap();
    let mut written: Vec<String> = ["o0", "o1", "o2"].map(String::from).to_vec();
    for burst in 0..8 {
        for i in 0..5 {
            let line = format!("app {burst}-{i}");
            writeln!(out, "{line}").unwrap();
            written.push(line);
        }
        // Quiet for longer than the rotation grace, well within tail.idle.ms.
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_until("every line of app.log", || (host.values("lines").len() >= written.len()).then_some(())).await;
    assert_each_once(host.values("lines"), written);
    // Its partition's offset never says it was finished as rotated. (It may name
    // other.log: the archive name appears before the cleanup unlinks the listed one, and
    // a rename back into the folder within that window leaves one file under both names,
    // read as the name it was known by. Every line still arrives once, and a restart that
    // lists the other name first follows it on: the next test.)
    let offsets = offsets_by_path(&host);
    assert!(offsets.values().all(|offset| offset["end"] != "rotated"), "{offsets:?}");
}

/// A followed log that got a second name (a hard link, or a file taken out of the archive
/// the moment it was moved there and put back under another name) and a restart, after
/// which the listing gives the second name first: one file with two names, still written,
/// not a log rotated away. It is followed on, not finished as rotated after the rotation
/// grace and archived from under its writer, whose later lines were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_with_a_second_name_listed_first_after_a_restart_is_followed_on() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let done = Dirs::path(&dirs.done);
    let config = dirs.config(&[
        ("file.completion", "tail"),
        ("tail.idle.ms", "60000"),
        ("tail.rotation.grace.ms", "200"),
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", &done),
    ]);
    host.start(pulse("pulse", &config)).await;
    let log = dirs.inbox.path().join("app.log");
    let mut out = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
    let mut written = Vec::new();
    let mut write_burst = |burst: usize| {
        for i in 0..5 {
            let line = format!("app {burst}-{i}");
            writeln!(out, "{line}").unwrap();
            written.push(line);
        }
    };
    write_burst(0);
    wait_until("the first lines", || (host.values("lines").len() >= 5).then_some(())).await;
    // A second name that the directory lists before app.log (the order is the file
    // system's: tried until one is).
    let first_listed = || std::fs::read_dir(dirs.inbox.path()).unwrap().next().unwrap().unwrap().file_name();
    let second = (0..1000)
        .map(|n| dirs.inbox.path().join(format!("app-{n}.log")))
        .find(|second| {
            std::fs::hard_link(&log, second).unwrap();
            let listed_first = first_listed() == second.file_name().unwrap();
            if !listed_first {
                std::fs::remove_file(second).unwrap();
            }
            listed_first
        })
        .expect("a name listed before app.log");
    let host = host.reopen().await;
    host.start(pulse("pulse", &config)).await;
    for burst in 1..6 {
        write_burst(burst);
        // Quiet for longer than the rotation grace.
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_until("every line", || (host.values("lines").len() >= written.len()).then_some(())).await;
    assert_each_once(host.values("lines"), written);
    assert!(log.exists() && second.exists(), "the log is still in the listed folder, under both names");
    let offsets = offsets_by_path(&host);
    assert!(offsets.values().all(|offset| offset["end"] != "rotated" && offset["done"] != true), "{offsets:?}");
}

/// A log finished idle (quiet for `tail.idle.ms`), then rotated to a name the filter
/// leaves out (`app.log` to `app.log.1` beside `.*[.]log`), its writer adding lines to it
/// just after the rename, before it reopens `app.log`: those lines arrive, read on under
/// the rotated name, as for a log rotated while followed. They were lost: a finished file
/// no longer listed was forgotten at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_finished_idle_then_rotated_out_of_the_filter_has_its_last_lines_read() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let config = dirs.config(&[
        ("file.completion", "tail"),
        ("tail.idle.ms", "500"),
        ("tail.rotation.grace.ms", "1000"),
        ("file.filter.regex.pattern", r".*[.]log"),
    ]);
    host.start(pulse("pulse", &config)).await;
    let log = dirs.inbox.path().join("app.log");
    let mut old = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
    let mut written = Vec::new();
    let mut write = |out: &mut std::fs::File, lines: std::ops::Range<usize>| {
        for n in lines {
            writeln!(out, "line {n}").unwrap();
            written.push(format!("line {n}"));
        }
    };
    write(&mut old, 0..5);
    wait_until("app.log finished idle", || {
        offsets_by_path(&host).get("app.log").filter(|o| o["done"] == true && o["end"] == "idle").map(|_| ())
    })
    .await;
    std::fs::rename(&log, dirs.inbox.path().join("app.log.1")).unwrap();
    write(&mut old, 5..10);
    drop(old);
    let mut new = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
    write(&mut new, 10..15);
    wait_until("every line", || (host.values("lines").len() >= written.len()).then_some(())).await;
    assert_each_once(host.values("lines"), written);
}

/// Finished logs whose names shift again and again (`app.log.N` to `app.log.N+1`, as a
/// rotation renames them) are not read again: a walk's identity and size lookups are two
/// calls by name, and a rename between them once paired one file's identity with
/// another's size, which looked like a finished log that changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_logs_whose_names_keep_shifting_are_not_read_again() {
    const LOGS: usize = 30;
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let rotated = |n: usize| dirs.inbox.path().join(format!("app.log.{n}"));
    let mut written = Vec::new();
    for n in 1..=LOGS {
        // Each of another size, so that a mix-up shows.
        let lines: Vec<String> = (0..n * 3 + 1).map(|i| format!("log {n} line {i}")).collect();
        std::fs::write(rotated(n), format!("{}\n", lines.join("\n"))).unwrap();
        written.extend(lines);
    }
    let config = dirs.config(&[
        ("file.completion", "tail"),
        ("tail.idle.ms", "300"),
        ("tail.rotation.grace.ms", "300"),
        ("file.filter.regex.pattern", r"app[.]log([.][0-9]+)?"),
    ]);
    host.start(pulse("pulse", &config)).await;
    wait_until("every log finished", || {
        let offsets = offsets_by_path(&host);
        (offsets.len() == LOGS && offsets.values().all(|o| o["done"] == true)).then_some(())
    })
    .await;
    // Names shifted for a few seconds, as fast as they go (an rename of each, in turn).
    let shifting_until = std::time::Instant::now() + Duration::from_secs(4);
    let held = dirs.inbox.path().join(".shifting");
    while std::time::Instant::now() < shifting_until {
        std::fs::rename(rotated(LOGS), &held).unwrap();
        for n in (1..LOGS).rev() {
            std::fs::rename(rotated(n), rotated(n + 1)).unwrap();
        }
        std::fs::rename(&held, rotated(1)).unwrap();
    }
    // A new log after the shifting: once its line is in, the passes over the shifted
    // names have been decided (a log read again would have been too, most of them sent).
    std::fs::write(dirs.inbox.path().join("app.log"), "after the shifting\n").unwrap();
    written.push("after the shifting".into());
    wait_until("the new log's line", || host.values("lines").contains(&"after the shifting".to_string()).then_some(()))
        .await;
    assert_each_once(host.values("lines"), written);
}

/// A `.gz` that failed part way and came back as another file under its name (a new
/// export copied over it): read from its start, as a plain file is, not on from the old
/// file's position (its first lines were lost, and a line cut in two sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gz_replaced_under_its_name_is_read_from_its_start() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let (done, failed) = (Dirs::path(&dirs.done), Dirs::path(&dirs.failed));
    let old: String = (0..20_000).map(|i| format!("old export line {i}\n")).collect();
    let old = gzip(&old);
    drop_file(dirs.inbox.path(), "export.gz", &old[..old.len() / 2]);
    let config = dirs.config(&[
        ("fs.cleanup.policy", "move"),
        ("fs.cleanup.policy.move.success.path", &done),
        ("fs.cleanup.policy.move.failure.path", &failed),
    ]);
    host.start(pulse("pulse", &config)).await;
    let parked = dirs.failed.path().join("export.gz");
    wait_until("the cut file in the failure folder", || parked.exists().then_some(())).await;
    let sent = host.values("lines").len();
    assert!(sent > 1000, "{sent} lines before the cut");
    // The new export, written over the parked file (its inode kept) and moved back.
    let new: Vec<String> = (0..15_000).map(|i| format!("B{i},{}", i * 7)).collect();
    std::fs::write(&parked, gzip(&format!("{}\n", new.join("\n")))).unwrap();
    std::fs::rename(&parked, dirs.inbox.path().join("export.gz")).unwrap();
    wait_until("the new export archived", || dirs.done.path().join("export.gz").exists().then_some(())).await;
    let values = host.values("lines");
    assert_eq!(&values[sent..], new.as_slice(), "the new export whole, from its first line, once");
    assert_eq!(offsets_by_path(&host)["export.gz"]["version"], 1);
}

/// A file whose size is set before it is filled (zeros first, then the lines written over
/// them, as Windows copies and preallocating downloaders make it): its lines arrive, not
/// the zeros held back as an unfinished last line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_sized_before_it_is_filled_is_sent_as_its_lines() {
    use std::os::unix::fs::FileExt;
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    host.start(pulse("pulse", &dirs.config(&[("eof.quiet.ms", "3000")]))).await;
    let lines: Vec<String> = (0..2_000).map(|i| format!("{i:06},line")).collect();
    let total: usize = lines.iter().map(|l| l.len() + 1).sum();
    let file = std::fs::File::create(dirs.inbox.path().join("p.dat")).unwrap();
    file.set_len(total as u64).unwrap();
    let mut at = 0u64;
    for (n, line) in lines.iter().enumerate() {
        file.write_all_at(format!("{line}\n").as_bytes(), at).unwrap();
        at += line.len() as u64 + 1;
        if n % 100 == 99 {
            // The writer goes on after a moment, well within eof.quiet.ms: the task reads
            // the lines so far and holds the zeros after them.
            wait_until("a read part way", || (host.values("lines").len() > n.saturating_sub(200)).then_some(())).await;
        }
    }
    drop(file);
    wait_until("the file finished", || (offsets_by_path(&host).get("p.dat")?["done"] == true).then_some(())).await;
    assert_eq!(host.values("lines"), lines, "every line once, no zeros");
}

/// logrotate's `copytruncate` under a writer that does not append (`app > app.log`): it
/// writes on at its old offset, after a run of zeros as long as the log was (here longer
/// than a record may be). Its next lines arrive as written, not as one record of zeros
/// and a line, nor a file failed for a line too long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copytruncate_under_a_writer_that_does_not_append_sends_its_next_lines() {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let app = dirs.inbox.path().join("app.log");
    let mut writer = std::fs::File::create(&app).unwrap();
    let old: Vec<String> = (0..2_000).map(|i| format!("old-{i}")).collect();
    writer.write_all(format!("{}\n", old.join("\n")).as_bytes()).unwrap();
    let config = dirs.config(&[
        ("file.completion", "tail"),
        ("file.filter.regex.pattern", r"app\.log"),
        ("sandbox.record.max.bytes", "4096"),
    ]);
    host.start(pulse("pulse", &config)).await;
    wait_until("the old lines", || (host.values("lines").len() == old.len()).then_some(())).await;
    std::fs::copy(&app, dirs.inbox.path().join("app.log.1")).unwrap();
    std::fs::OpenOptions::new().write(true).open(&app).unwrap().set_len(0).unwrap();
    let new: Vec<String> = (0..300).map(|i| format!("new-{i}")).collect();
    writer.write_all(format!("{}\n", new.join("\n")).as_bytes()).unwrap();
    let expected: Vec<String> = old.iter().chain(&new).cloned().collect();
    wait_until("the new lines", || (host.values("lines").len() >= expected.len()).then_some(())).await;
    assert_eq!(host.values("lines"), expected);
}

/// A `.gz` rewritten in place (`cp` over it, `cat new.gz > it`) while its task still has it
/// open (tail mode, or eof mode within `eof.quiet.ms`): its first bytes decompressed are
/// not the ones read, so the new content is read from its start, once, nothing of it
/// skipped as if it were what was read, and no line cut at the old position.
async fn gz_rewritten_in_place_while_open(completion: &str) {
    let host = TestHost::new(&["file-pulse"]).await;
    let dirs = Dirs::new();
    let config = [("file.completion", completion), ("eof.quiet.ms", "3000"), ("tail.idle.ms", "3000")];
    host.start(pulse("pulse", &dirs.config(&config))).await;
    let path = dirs.inbox.path().join("export.csv.gz");
    let first: Vec<String> = (1..=50).map(|i| format!("v1-line-{i:04}")).collect();
    let second: Vec<String> = (1..=400).map(|i| format!("second-version-row-{i:07}")).collect();
    std::fs::write(&path, gzip(&format!("{}\n", first.join("\n")))).unwrap();
    wait_until("the first version read", || (host.values("lines").len() == first.len()).then_some(())).await;
    let inode_before = inode(&path);
    std::fs::write(&path, gzip(&format!("{}\n", second.join("\n")))).unwrap();
    assert_eq!(inode(&path), inode_before, "rewritten in place");
    wait_until("the file finished", || {
        let offset = offsets_by_path(&host).remove("export.csv.gz")?;
        (offset["done"] == true && offset["position"] != 0).then_some(())
    })
    .await;
    let expected: Vec<String> = first.iter().chain(&second).cloned().collect();
    assert_eq!(host.values("lines"), expected, "{completion}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gz_rewritten_in_place_while_followed_is_read_again_from_its_start() {
    gz_rewritten_in_place_while_open("tail").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gz_rewritten_in_place_while_it_waits_to_be_quiet_is_read_again_from_its_start() {
    gz_rewritten_in_place_while_open("eof").await;
}
