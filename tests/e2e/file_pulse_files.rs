//! file-pulse as users run it, in a real `sluice run`: one name dropped round after round
//! with every cleanup policy and SIGKILLs between rounds, and directories of thousands of
//! files (flat, and nested with a recursive listing), each line exactly once.

use std::path::{Path, PathBuf};
use std::process::Child;

use sluice::config::DEFAULT_TENANT;

use crate::files::drop_file;
use crate::{connector_file, crash_rng, sluice, wait_until};

struct Run {
    dir: tempfile::TempDir,
    /// A plugin folder with file-pulse alone, so no other plugin is compiled.
    plugins: PathBuf,
    inbox: PathBuf,
    done: PathBuf,
    data: PathBuf,
    file: PathBuf,
}

impl Run {
    fn new(config: impl FnOnce(&Path, &Path) -> serde_json::Value) -> Run {
        let dir = tempfile::tempdir().unwrap();
        let inbox = dir.path().join("inbox");
        let done = dir.path().join("done");
        std::fs::create_dir(&inbox).unwrap();
        std::fs::create_dir(&done).unwrap();
        let (inbox, done) = (std::fs::canonicalize(inbox).unwrap(), std::fs::canonicalize(done).unwrap());
        let file = connector_file(dir.path(), "pulse.json", &config(&inbox, &done).to_string());
        let data = dir.path().join("data");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        std::fs::copy(Path::new(sluice::BUILT_PLUGINS).join("file-pulse.wasm"), plugins.join("file-pulse.wasm"))
            .unwrap();
        Run { dir, plugins, inbox, done, data, file }
    }

    fn start(&self) -> Running {
        let mut command = sluice();
        command.arg("run").arg("--plugin-path").arg(&self.plugins).arg("--data-dir").arg(&self.data);
        Running(command.arg(&self.file).spawn().unwrap())
    }

    fn values(&self) -> Vec<String> {
        let Ok(stores) = crate::stores(&self.data) else { return Vec::new() };
        let records = stores.local().read(DEFAULT_TENANT, "lines", 0, usize::MAX >> 1).unwrap_or_default();
        records.into_iter().map(|r| String::from_utf8(r.record.value.unwrap().to_vec()).unwrap()).collect()
    }

    fn count(&self) -> usize {
        crate::stored_count(&self.data) as usize
    }
}

fn pulse_config(inbox: &Path, done: &Path, policy: &str, extra: &[(&str, &str)]) -> serde_json::Value {
    let mut config = serde_json::json!({
        "connector.class": "file-pulse", "topic": "lines", "tasks.max": "2",
        "fs.listing.directory.path": inbox, "fs.listing.interval.ms": "100", "monitor.interval.ms": "50",
        "fs.cleanup.policy": policy, "sandbox.fs.write": format!("{},{}", inbox.display(), done.display()),
    });
    if policy == "move" {
        config["fs.cleanup.policy.move.success.path"] = serde_json::json!(done);
    }
    for (key, value) in extra {
        config[key] = serde_json::json!(value);
    }
    serde_json::json!({"name": "pulse", "config": config})
}

/// A `sluice run` that is SIGKILLed when dropped, also when a test fails.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill(); // SIGKILL
        let _ = self.0.wait();
    }
}

fn kill(child: Running) {
    drop(child);
}

/// Eight rounds of `data.csv`; before about half of them, `sluice run` is SIGKILLed (at a
/// random moment of the round before) and started again.
fn rounds_with_kills(policy: &str) {
    let mut rng = crash_rng();
    let run = Run::new(|inbox, done| pulse_config(inbox, done, policy, &[]));
    let data_csv = run.inbox.join("data.csv");
    let mut expected = Vec::new();
    let mut child = run.start();
    let mut kills = 0;
    for round in 0..8 {
        if policy == "none" && round > 0 {
            std::fs::remove_file(&data_csv).unwrap();
        }
        let lines: Vec<String> = (0..3).map(|i| format!("round {round} line {i}")).collect();
        drop_file(&run.inbox, "data.csv", (lines.join("\n") + "\n").as_bytes());
        expected.extend(lines);
        if rng.bool() {
            std::thread::sleep(std::time::Duration::from_millis(rng.u64(0..300)));
            kill(child);
            kills += 1;
            child = run.start();
        }
        wait_until(&format!("{policy}: round {round}'s lines"), || (run.count() >= expected.len()).then_some(()));
        if policy != "none" {
            wait_until(&format!("{policy}: round {round}'s file cleaned up"), || (!data_csv.exists()).then_some(()));
        }
    }
    kill(child);
    assert_eq!(run.values(), expected, "{policy}: lines lost or sent twice ({kills} kills)");
    if policy == "move" {
        assert_eq!(std::fs::read_dir(&run.done).unwrap().count(), 8, "every round archived, none overwritten");
    }
    println!("{policy}: 8 rounds, {kills} kills, every line once");
}

#[test]
fn the_same_name_every_round_with_delete_and_sigkills() {
    rounds_with_kills("delete");
}

#[test]
fn the_same_name_every_round_with_move_and_sigkills() {
    rounds_with_kills("move");
}

#[test]
fn the_same_name_every_round_with_none_and_sigkills() {
    rounds_with_kills("none");
}

/// `files` small files, in `dirs` subdirectories (0: flat), streamed and deleted.
fn many_files(files: usize, dirs: usize) {
    let recursive = if dirs > 0 { "true" } else { "false" };
    let run = Run::new(|inbox, done| {
        pulse_config(inbox, done, "delete", &[("fs.listing.recursive", recursive), ("tasks.max", "3")])
    });
    let mut expected = Vec::with_capacity(files);
    for n in 0..files {
        let dir = if dirs > 0 { run.inbox.join(format!("d{:03}", n % dirs)) } else { run.inbox.clone() };
        if n < dirs.max(1) {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let line = format!("file {n}");
        std::fs::write(dir.join(format!("f{n:06}.log")), format!("{line}\n")).unwrap();
        expected.push(line);
    }
    let child = run.start();
    let left = || walkdir_files(&run.inbox);
    wait_until("every file streamed and deleted", || (left() == 0 && run.count() >= files).then_some(()));
    kill(child);
    let mut values = run.values();
    values.sort();
    expected.sort();
    assert_eq!(values.len(), files, "records lost or sent twice");
    assert_eq!(values, expected);
    drop(run.dir);
}

fn walkdir_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| if e.file_type().unwrap().is_dir() { walkdir_files(&e.path()) } else { 1 })
        .sum()
}

#[test]
fn twenty_thousand_files_are_streamed_once_and_cleaned_up() {
    many_files(20_000, 0);
}

#[test]
fn twenty_thousand_nested_files_are_streamed_once_and_cleaned_up() {
    many_files(20_000, 200);
}

/// A file the worker's user may not read (mode 000) is said once, not handed to a task at
/// every listing, and read, every line once, when its mode lets it be, also after it was
/// renamed to a name the filter leaves out (rotated); one removed before it could be read
/// is said to be gone. `sluice run` runs as `nobody` when the test runs as root, who reads
/// any file.
#[test]
fn a_file_the_worker_may_not_read_is_said_once_and_read_when_it_can_be() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let mode = |path: &Path, mode: u32| std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    let run = Run::new(|inbox, done| {
        pulse_config(inbox, done, "none", &[("tasks.max", "1"), ("file.filter.regex.pattern", ".*[.]txt$")])
    });
    mode(run.dir.path(), 0o777);
    mode(&run.inbox, 0o777);
    let lines = |name: &str| (0..3).map(|i| format!("{name} {i}")).collect::<Vec<_>>();
    let locked = |name: &str| {
        let path = run.inbox.join(name);
        std::fs::write(&path, lines(name).join("\n") + "\n").unwrap();
        mode(&path, 0o000);
        path
    };
    let secret = locked("secret.txt");
    drop_file(&run.inbox, "a.txt", (lines("a").join("\n") + "\n").as_bytes());

    let log = run.dir.path().join("stderr");
    // A copy of the binary in the test's folder: `nobody` may not reach the build's.
    let binary = run.dir.path().join("sluice");
    std::fs::copy(env!("CARGO_BIN_EXE_sluice"), &binary).unwrap();
    let mut command = std::process::Command::new(&binary);
    command
        .env("SLUICE_LOG", "warn")
        .arg("run")
        .arg("--plugin-path")
        .arg(&run.plugins)
        .arg("--data-dir")
        .arg(&run.data)
        .arg(&run.file);
    command.stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::geteuid() == 0
                && (libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = Running(command.spawn().unwrap());
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    // The worker makes its database's WAL files before the test opens it: made by root,
    // they would be closed to the worker.
    let database = run.data.join("sluice.db");
    wait_until("the worker's database in WAL mode", || {
        (database.with_extension("db-wal").exists() && database.with_extension("db-shm").exists()).then_some(())
    });
    let mut expected = lines("a");
    let until_stored = |what: &str, expected: &[String]| {
        wait_until(what, || {
            let mut values = run.values();
            values.sort();
            let mut wanted = expected.to_vec();
            wanted.sort();
            (values == wanted).then_some(())
        })
    };
    until_stored("a.txt's lines", &expected);
    wait_until("secret.txt named", || said().contains("secret.txt: cannot be opened: permission denied").then_some(()));
    // Two more files, each read only after a listing of its own: listings went by.
    for name in ["b.txt", "c.txt"] {
        drop_file(&run.inbox, name, (lines(name).join("\n") + "\n").as_bytes());
        expected.extend(lines(name));
        until_stored(name, &expected);
    }
    let text = said();
    assert_eq!(text.matches("secret.txt: cannot be opened").count(), 1, "said once: {text}");
    assert!(!text.contains("not found at its listed path") && !text.contains("is its directory granted"), "{text}");

    mode(&secret, 0o644);
    expected.extend(lines("secret.txt"));
    until_stored("secret.txt's lines once it can be read", &expected);

    // Rotated while it could not be read, to a name the filter leaves out: found there.
    let rotated = locked("rotated.txt");
    wait_until("rotated.txt named", || said().contains("rotated.txt: cannot be opened").then_some(()));
    let renamed = run.inbox.join("rotated.txt.1");
    std::fs::rename(&rotated, &renamed).unwrap();
    mode(&renamed, 0o644);
    expected.extend(lines("rotated.txt"));
    until_stored("rotated.txt's lines under its new name", &expected);

    // Removed before it could be read: said to be gone. (A file after it gives the
    // connector ticks to take in its task's word first; gone before that, on a busy
    // machine, it is said to be gone as any file its task did not find.)
    let gone = locked("gone.txt");
    wait_until("gone.txt named", || said().contains("gone.txt: cannot be opened").then_some(()));
    drop_file(&run.inbox, "y.txt", (lines("y.txt").join("\n") + "\n").as_bytes());
    expected.extend(lines("y.txt"));
    until_stored("y.txt's lines", &expected);
    std::fs::remove_file(&gone).unwrap();
    wait_until("gone.txt said to be gone", || {
        said().lines().any(|line| line.contains("gone.txt: ") && line.contains("is it any more")).then_some(())
    });

    // One more file after everything: a line sent twice late would show by then.
    drop_file(&run.inbox, "z.txt", (lines("z.txt").join("\n") + "\n").as_bytes());
    expected.extend(lines("z.txt"));
    until_stored("z.txt's lines, and nothing else", &expected);
    kill(child);
}

/// `file.filter.regex.pattern` matches whole names, as FilePulse's: `.*[.]csv` takes
/// `a.csv`, not `a.csv.tmp` being uploaded beside it; a pattern written for a search
/// (`[.]csv$`, which took every such name before) takes nothing, and the log says why once.
#[test]
fn the_filter_matches_whole_names_and_says_so_of_a_pattern_written_for_a_search() {
    let whole = Run::new(|inbox, done| {
        pulse_config(inbox, done, "none", &[("tasks.max", "1"), ("file.filter.regex.pattern", ".*[.]csv")])
    });
    drop_file(&whole.inbox, "a.csv.tmp", b"partial\n");
    drop_file(&whole.inbox, "a.csv", b"whole\n");
    let child = whole.start();
    wait_until("a.csv", || (whole.values() == ["whole"]).then_some(()));
    kill(child);
    assert_eq!(whole.values(), ["whole"], "a.csv.tmp is not streamed");

    let search = Run::new(|inbox, done| {
        pulse_config(inbox, done, "none", &[("tasks.max", "1"), ("file.filter.regex.pattern", "[.]csv$")])
    });
    for name in ["a.csv", "b.csv"] {
        drop_file(&search.inbox, name, b"line\n");
    }
    let log = search.dir.path().join("stderr");
    let mut command = sluice();
    command.arg("run").arg("--plugin-path").arg(&search.plugins).arg("--data-dir").arg(&search.data);
    command.arg(&search.file).stderr(std::fs::File::create(&log).unwrap());
    let child = Running(command.spawn().unwrap());
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the warning", || said().contains("must match a whole file name").then_some(()));
    kill(child);
    let text = said();
    assert_eq!(text.matches("must match a whole file name").count(), 1, "{text}");
    assert!(text.contains("write '.*[.]csv$' to take such names"), "{text}");
    assert!(search.values().is_empty());
}
