//! What an operator sees when something is wrong, one test per case: the data directory
//! is a file or read-only; a cleanup path that is not granted; unknown keys; unknown
//! connectors, tenants and topics in `offsets` and `topics`; a tenant's quota over several
//! files; names and messages that try to forge log lines; a `stdout` reader that goes away;
//! a tenant's records/s shared fairly whatever the batch sizes; and a listed folder removed
//! while a connector runs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice::config::DEFAULT_TENANT;
use sluice::storage::Namespace;

use crate::{connector_file, run, sluice, wait_until};

fn counter(name: &str, extra: &str) -> String {
    format!(r#"{{"name": "{name}", "config": {{"connector.class": "counter", "topic": "{name}"{extra}}}}}"#)
}

/// A plugin folder beside `data` with only these plugins, so no other is compiled.
fn plugins(data: &Path, names: &[&str]) -> PathBuf {
    let folder = data.with_file_name("plugins");
    std::fs::create_dir_all(&folder).unwrap();
    for name in names {
        std::fs::copy(
            Path::new(sluice::BUILT_PLUGINS).join(format!("{name}.wasm")),
            folder.join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    folder
}

/// `sluice run` (of the counter and file-pulse plugins) until it exits by itself;
/// (code, stderr).
fn run_files(data: &Path, files: &[PathBuf], config: Option<&Path>) -> (Option<i32>, String) {
    let mut command = sluice();
    command.arg("run").arg("--plugin-path").arg(plugins(data, &["counter", "file-pulse"])).arg("--data-dir").arg(data);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let output = command.args(files).output().unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// `sluice run` of one connector file, with the plugin folder and data directory given.
fn sluice_run(plugin_path: impl AsRef<std::ffi::OsStr>, data: &Path, file: &Path) -> Command {
    let mut command = sluice();
    command.arg("run").arg("--plugin-path").arg(plugin_path).arg("--data-dir").arg(data).arg(file);
    command
}

/// `sluice run` of `files` with the worker config `toml`, its stderr dropped.
fn sluice_run_with(toml: &Path, data: &Path, files: &[PathBuf]) -> std::process::Child {
    let mut command = sluice_run(plugins(data, &["counter"]), data, &files[0]);
    command.args(&files[1..]).arg("--config").arg(toml).stderr(Stdio::null()).spawn().unwrap()
}

fn error_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {stderr}");
    lines[0].to_string()
}

#[test]
fn a_data_directory_that_is_a_file_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("not-a-dir");
    std::fs::write(&data, "x").unwrap();
    let file = connector_file(dir.path(), "c.json", &counter("c", r#", "record.count": "1""#));
    let (code, stderr) = run_files(&data, &[file], None);
    assert_eq!(code, Some(1));
    let line = error_line(&stderr);
    assert!(
        line.contains(&format!("the data directory {} is a file, not a directory (--data-dir)", data.display())),
        "{line}"
    );
}

#[test]
fn a_read_only_data_directory_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ro");
    std::fs::create_dir(&data).unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"]).arg(&data).status();
    assert!(mounted.is_ok_and(|s| s.success()), "this test mounts a read-only tmpfs and needs root to do it");
    let file = connector_file(dir.path(), "c.json", &counter("c", r#", "record.count": "1""#));
    let (code, stderr) = run_files(&data, &[file], None);
    let _ = Command::new("umount").arg("-l").arg(&data).status();
    assert_eq!(code, Some(1));
    let line = error_line(&stderr);
    assert!(line.contains(&format!("the data directory {} (--data-dir)", data.display())), "{line}");
    assert!(line.contains("Read-only file system"), "{line}");
}

#[test]
fn a_move_path_outside_the_write_grants_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = dir.path().join("inbox");
    let done = dir.path().join("done");
    std::fs::create_dir_all(&inbox).unwrap();
    std::fs::create_dir_all(&done).unwrap();
    let config = serde_json::json!({"name": "pulse", "config": {
        "connector.class": "file-pulse", "topic": "lines", "fs.listing.directory.path": inbox,
        "fs.cleanup.policy": "move", "fs.cleanup.policy.move.success.path": done,
        "sandbox.fs.write": inbox,
    }});
    let file = connector_file(dir.path(), "pulse.json", &config.to_string());
    let (code, stderr) = run_files(&dir.path().join("data"), std::slice::from_ref(&file), None);
    assert_eq!(code, Some(2), "{stderr}");
    let line = error_line(&stderr);
    assert!(
        line.starts_with(&format!(
            "error: {}: fs.cleanup.policy.move.success.path: '{}' is not granted",
            file.display(),
            done.display()
        )),
        "{line}"
    );
    assert!(line.contains("sandbox.fs.write"), "{line}");
}

#[test]
fn unknown_keys_are_warned_about_with_the_nearest_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = connector_file(
        dir.path(),
        "c.json",
        &counter("c", r#", "record.count": "5", "tasks.mx": "3", "bogus.key": "1""#),
    );
    let data = dir.path().join("data");
    let mut child = sluice_run(plugins(&data, &["counter"]), &data, &file)
        .env("SLUICE_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut warnings = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        if line.contains("not a key of the host or of plugin counter") {
            warnings.push(line);
        }
        if warnings.len() == 2 {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let typo = warnings.iter().find(|l| l.contains("tasks.mx")).expect("a warning for tasks.mx");
    assert!(typo.contains("did you mean `tasks.max`?"), "{typo}");
    let bogus = warnings.iter().find(|l| l.contains("bogus.key")).expect("a warning for bogus.key");
    assert!(!bogus.contains("did you mean"), "{bogus}");
}

#[test]
fn unknown_connectors_tenants_and_topics_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = connector_file(dir.path(), "c.json", &counter("known", r#", "record.count": "3""#));
    let mut child = sluice_run(plugins(&data, &["counter"]), &data, &file).stderr(Stdio::null()).spawn().unwrap();
    wait_until("the connector's records", || {
        let stores = crate::stores(&data).ok()?;
        (stores.local().topics(DEFAULT_TENANT).ok()?.len() == 1).then_some(())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let data = data.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["offsets", "nosuch", "--data-dir", data], "no connector 'nosuch' in tenant default (its connectors: known)"),
        (&["offsets", "known", "--tenant", "nosuch", "--data-dir", data], "no connector of tenant 'nosuch' ever ran"),
        (&["topics", "read", "nosuch", "--data-dir", data], "no topic 'nosuch' in tenant default (topics: known)"),
        (&["topics", "list", "--tenant", "nosuch", "--data-dir", data], "no connector of tenant 'nosuch' ever ran"),
    ];
    for (args, expected) in cases {
        let output = run(args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let line = error_line(&String::from_utf8_lossy(&output.stderr));
        assert!(line.contains(expected), "{args:?}: {line}");
    }
    let known = run(&["offsets", "known", "--data-dir", data]);
    assert_eq!(known.status.code(), Some(0));
}

#[test]
fn a_quota_over_several_files_is_refused_before_any_connector_starts() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("sluice.toml");
    std::fs::write(&toml, "[[tenant]]\nname = \"acme\"\n[tenant.quotas]\nconnectors = 1\n").unwrap();
    let files = [
        connector_file(dir.path(), "a.json", &counter("a", r#", "tenant": "acme""#)),
        connector_file(dir.path(), "b.json", &counter("b", r#", "tenant": "acme""#)),
    ];
    let data = dir.path().join("data");
    let (code, stderr) = run_files(&data, &files, Some(&toml));
    assert_eq!(code, Some(2), "{stderr}");
    let line = error_line(&stderr);
    assert!(line.contains("b.json: name: tenant acme already runs 1 connectors, its quota"), "{line}");
    assert!(!stderr.contains("task is RUNNING"), "a connector started before the refusal: {stderr}");
    let stores = crate::stores(&data).unwrap();
    assert!(stores.local().topics("acme").unwrap().is_empty(), "records were written");
}

/// A plugin folder in `dir` holding the hostile test plugin, and a connector file of it
/// (`config`, the connector's JSON).
fn hostile_connector(dir: &Path, config: &str) -> (PathBuf, PathBuf) {
    let plugins = dir.join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let test_plugins = Path::new(sluice::BUILT_PLUGINS).with_file_name("test-plugins");
    std::fs::copy(test_plugins.join("hostile.wasm"), plugins.join("hostile.wasm")).unwrap();
    (plugins, connector_file(dir, "connector.json", config))
}

#[test]
fn plugin_text_cannot_forge_log_lines_or_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, file) = hostile_connector(
        dir.path(),
        r#"{"name": "forge", "config": {"connector.class": "hostile", "topic": "t", "hostile.attack": "forge-log"}}"#,
    );
    let data = dir.path().join("data");
    let mut child =
        sluice_run(&plugins, &data, &file).env("SLUICE_LOG", "info").stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let failed = line.contains("task is FAILED");
        lines.push(line);
        if failed {
            break;
        }
    }
    // The progress line can be printed before the FAILED status is committed: wait for the store.
    let started = Instant::now();
    let trace = loop {
        let status = crate::stores(&data).unwrap().statuses().statuses(DEFAULT_TENANT).unwrap();
        if let Some(trace) = status.first().and_then(|c| c.tasks.first()).and_then(|t| t.trace.clone()) {
            break trace;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no trace stored: {status:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(lines.iter().all(|l| !l.starts_with("ERROR sluice: forged")), "a forged log line: {lines:#?}");
    assert!(lines.iter().any(|l| l.contains(r"innocent\nERROR sluice: forged line\r\u{1b}[2K")), "{lines:#?}");
    assert!(lines.iter().all(|l| !l.contains('\u{1b}') && !l.contains('\r')), "a raw control character: {lines:#?}");
    assert_eq!(trace, r"raise-error: failing\nERROR sluice: forged line");
}

/// A plugin that returns nothing but bad records, under `errors.tolerance=all` with
/// `errors.log.enable`, gets a log line for at most `sandbox.log.lines.per.second` of them
/// a second (the rest counted in a line of their own), not one line per record.
#[test]
fn refused_records_are_logged_within_the_log_rate() {
    let dir = tempfile::tempdir().unwrap();
    let (plugins, file) = hostile_connector(
        dir.path(),
        r#"{"name": "bad", "config": {"connector.class": "hostile", "topic": "t", "hostile.attack": "partition-not-object",
            "errors.tolerance": "all", "errors.log.enable": "true", "sandbox.log.lines.per.second": "5"}}"#,
    );
    let data = dir.path().join("data");
    let started = Instant::now();
    /// Killed however the test ends: a run left flooding its log would outlive it.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child =
        Killed(sluice_run(&plugins, &data, &file).env("SLUICE_LOG", "info").stderr(Stdio::piped()).spawn().unwrap());
    let (mut logged, mut summary) = (0u64, None);
    for line in BufReader::new(child.0.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.contains("skipped a record (errors.tolerance=all)") {
            logged += 1;
        }
        if line.contains("were not logged") {
            summary = Some(line);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no summary of unlogged records; {logged} lines logged");
    }
    let elapsed = started.elapsed();
    drop(child);
    let summary = summary.expect("the log went on");
    assert!(summary.contains("sandbox.log.lines.per.second (5)"), "{summary}");
    let unlogged: u64 = summary.split_whitespace().find_map(|word| word.parse().ok()).unwrap();
    assert!(unlogged > 0, "{summary}");
    // A burst of twice the rate, then the rate.
    let bound = 10 + 5 * elapsed.as_secs() + 5;
    assert!(logged <= bound, "{logged} lines logged in {elapsed:?}, more than {bound}");
}

#[test]
fn stdout_into_a_reader_that_goes_away_ends_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let file = connector_file(
        dir.path(),
        "c.json",
        &counter("piped", r#", "destination": "stdout", "records.per.second": "0""#),
    );
    let data = dir.path().join("data");
    let mut child = sluice_run(plugins(&data, &["counter"]), &data, &file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `head -3`: read three lines, then go away.
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..3 {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with(r#"{"topic":"piped""#), "{line}");
    }
    drop(reader);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "sluice kept running after its stdout reader went away");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("error: the stdout destination's reader went away (broken pipe): stopped"), "{stderr}");
}

#[test]
fn a_tenants_records_per_second_are_shared_fairly_whatever_the_batch_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("sluice.toml");
    std::fs::write(&toml, "[[tenant]]\nname = \"t\"\n[tenant.quotas]\nrecords_per_second = 3000\n").unwrap();
    let files = [
        connector_file(
            dir.path(),
            "big.json",
            &counter("big", r#", "tenant": "t", "batch.size": "2000", "records.per.second": "0""#),
        ),
        connector_file(
            dir.path(),
            "small.json",
            &counter("small", r#", "tenant": "t", "tasks.max": "2", "batch.size": "100", "records.per.second": "0""#),
        ),
    ];
    let data = dir.path().join("data");
    let mut child = sluice()
        .arg("run")
        .arg("--plugin-path")
        .arg(plugins(&data, &["counter"]))
        .arg("--config")
        .arg(&toml)
        .arg("--data-dir")
        .arg(&data)
        .args(&files)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let counts = || -> Option<(u64, u64)> {
        let topics = crate::stores(&data).ok()?.local().topics("t").ok()?;
        let count = |name: &str| topics.iter().find(|(t, _)| t == name).map_or(0, |(_, n)| *n);
        Some((count("big"), count("small")))
    };
    wait_until("both connectors delivering", || counts().filter(|(b, s)| *b > 0 && *s > 0));
    let (big_before, small_before) = counts().unwrap();
    wait_until("15,000 more records", || counts().filter(|(b, s)| b + s >= big_before + small_before + 15_000));
    child.kill().unwrap();
    child.wait().unwrap();
    let (big, small) = counts().unwrap();
    let (big, small) = ((big - big_before) as f64, (small - small_before) as f64);
    // Three tasks share the budget: the one with 2,000-record batches gets about a third.
    let share = big / (big + small);
    assert!((0.2..0.45).contains(&share), "the big-batch task took {share:.2} of the tenant's budget");
}

#[test]
fn a_worker_out_of_sandboxes_names_the_setting_and_the_rest_keep_running() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("sluice.toml");
    // A connector whose tasks could never all run fails at once, naming the setting.
    std::fs::write(&toml, "[sandbox]\nmax_instances = 3\n").unwrap();
    let too_many = connector_file(dir.path(), "big.json", &counter("big", r#", "tasks.max": "3""#));
    let data = dir.path().join("data");
    let mut child = sluice_run_with(&toml, &data, &[too_many]);
    let failed = wait_until("the connector failed", || {
        let statuses = crate::stores(&data).ok()?.statuses().statuses(DEFAULT_TENANT).ok()?;
        let status = statuses.into_iter().find(|s| s.name == "big")?;
        (status.connector.state == sluice::storage::State::Failed).then_some(status)
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let trace = failed.connector.trace.as_deref().unwrap_or_default();
    assert!(
        trace.contains("generated 3 tasks") && trace.contains("tasks.max") && trace.contains("max_instances"),
        "{trace}"
    );
    assert!(failed.tasks.is_empty(), "no task was started to fail: {failed:?}");
    std::fs::remove_dir_all(&data).unwrap();
    // Two connectors that fit each alone but not together: what does not fit fails, saying
    // which setting raises the limit, and what fits runs.
    let both: Vec<_> = ["one", "two"]
        .iter()
        .map(|name| {
            let config = counter(name, r#", "tasks.max": "2", "records.per.second": "20""#);
            connector_file(dir.path(), &format!("{name}.json"), &config)
        })
        .collect();
    let mut child = sluice_run_with(&toml, &data, &both);
    use sluice::storage::State;
    // Each sandbox's state and trace: a connector's, then its tasks'.
    let settled = crate::wait_until_showing("three sandboxes running and the rest failed", || {
        let statuses = crate::stores(&data)
            .and_then(|stores| stores.statuses().statuses(DEFAULT_TENANT))
            .map_err(|e| format!("no statuses: {e:#}"))?;
        let mut sandboxes = Vec::new();
        for status in statuses.iter().filter(|s| s.name == "one" || s.name == "two") {
            sandboxes.push((status.connector.state, status.connector.trace.clone()));
            // A connector that could not start has no tasks; one that did has both.
            if status.connector.state != State::Failed && status.tasks.len() != 2 {
                return Err(format!("{statuses:#?}"));
            }
            sandboxes.extend(status.tasks.iter().map(|t| (t.state, t.trace.clone())));
        }
        let running = sandboxes.iter().filter(|(state, _)| *state == State::Running).count();
        let settled = sandboxes.iter().all(|(state, _)| matches!(state, State::Running | State::Failed));
        if statuses.len() == 2 && running == 3 && settled { Ok(sandboxes) } else { Err(format!("{statuses:#?}")) }
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(settled.iter().any(|(state, _)| *state == State::Failed), "{settled:?}");
    for (_, trace) in settled.iter().filter(|(state, _)| *state == State::Failed) {
        let trace = trace.as_deref().unwrap_or_default();
        assert!(
            trace.contains("the worker already holds its most sandboxes at once (3, each connector and task is one); raise `max_instances` under [sandbox] in sluice.toml"),
            "{trace}"
        );
    }
}

#[test]
fn plugins_the_connectors_do_not_use_are_never_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let folder = plugins(&data, &["counter"]);
    let test_plugins = Path::new(sluice::BUILT_PLUGINS).with_file_name("test-plugins");
    // One whose config-def sleeps past the load deadline, and one that is not wasm at all.
    std::fs::copy(test_plugins.join("slow-config-def.wasm"), folder.join("slow-config-def.wasm")).unwrap();
    std::fs::write(folder.join("garbage.wasm"), b"not a component").unwrap();
    let file = connector_file(dir.path(), "c.json", &counter("fast", r#", "record.count": "5""#));
    let log = dir.path().join("sluice.log");
    let mut child = sluice_run(&folder, &data, &file)
        .env("SLUICE_LOG", "info")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until("the counter's five records", || {
        let stores = crate::stores(&data).ok()?;
        (stores.local().read(DEFAULT_TENANT, "fast", 0, 10).ok()?.len() == 5).then_some(())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("counter.wasm"), "the counter was loaded: {text}");
    // Neither was even looked at: nothing could wait on them.
    assert!(!text.contains("slow-config-def") && !text.contains("garbage"), "{text}");
}

/// The values of the JSON lines `sluice run` wrote for `topic` to a stdout file so far.
fn stdout_values(file: &Path, topic: &str) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["topic"] == topic)
        .map(|line| line["value"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `stdout` checks each batch beside the plugin's next poll rather than after it
/// (`Destination::checks_beside_delivery`): a record the checks refuse still fails the task
/// with the record named, and nothing of its batch or of any batch after it is written.
#[test]
fn stdout_a_refused_record_fails_the_task_and_nothing_of_its_batch_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let test_plugins = Path::new(sluice::BUILT_PLUGINS).with_file_name("test-plugins");
    std::fs::copy(test_plugins.join("testkit.wasm"), plugins.join("testkit.wasm")).unwrap();
    // Full batches of three (the rate allows 100 a millisecond): 0-2 and 3-5 are written,
    // 6-8 holds the oversized record 7.
    let file = connector_file(
        dir.path(),
        "strict.json",
        r#"{"name": "strict", "config": {"connector.class": "testkit", "topic": "t", "destination": "stdout",
            "record.count": "30", "batch.size": "3", "records.per.second": "100000", "poll.oversize.at": "7"}}"#,
    );
    let (data, out) = (dir.path().join("data"), dir.path().join("stdout.jsonl"));
    let mut child = sluice_run(&plugins, &data, &file)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let trace = wait_until("the task's FAILED status in the store", || {
        let statuses = crate::stores(&data).ok()?.statuses().statuses(DEFAULT_TENANT).ok()?;
        statuses.first()?.tasks.first()?.trace.clone()
    });
    // A task is FAILED once its loop has ended: every delivery it started has settled, so
    // nothing more of it is written.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(trace.contains("record 1 of 2.0 MiB exceeds sandbox.record.max.bytes"), "{trace}");
    let expected: Vec<String> = (0..6).map(|n| format!("0-{n}")).collect();
    assert_eq!(stdout_values(&out, "t"), expected);
}

/// The same under `errors.tolerance=all`: the refused record goes to the dead-letter topic
/// and every other record is written once, in order.
#[test]
fn stdout_a_refused_record_goes_to_the_dead_letter_topic_and_the_rest_are_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let test_plugins = Path::new(sluice::BUILT_PLUGINS).with_file_name("test-plugins");
    std::fs::copy(test_plugins.join("testkit.wasm"), plugins.join("testkit.wasm")).unwrap();
    let file = connector_file(
        dir.path(),
        "tolerant.json",
        r#"{"name": "tolerant", "config": {"connector.class": "testkit", "topic": "t", "destination": "stdout",
            "record.count": "30", "batch.size": "3", "records.per.second": "100000", "poll.oversize.at": "7",
            "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"}}"#,
    );
    let (data, out) = (dir.path().join("data"), dir.path().join("stdout.jsonl"));
    let mut child = sluice_run(&plugins, &data, &file)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The last record's offset is committed after its line is written.
    wait_until("the last record's offset committed", || {
        let offsets =
            crate::stores(&data).ok()?.offsets().all_offsets(&Namespace::new(DEFAULT_TENANT, "tolerant")).ok()?;
        offsets.iter().any(|(_, offset)| offset.contains("\"seq\":29")).then_some(())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let expected: Vec<String> = (0..30).filter(|&n| n != 7).map(|n| format!("0-{n}")).collect();
    assert_eq!(stdout_values(&out, "t"), expected);
    let dead = stdout_values(&out, "dlq");
    assert!(dead.len() == 1 && dead[0].starts_with("0-7"), "dead letters: {}", dead.len());
}

#[test]
fn a_listed_folder_removed_while_running_is_warned_about_and_followed_when_back() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let inbox = dir.path().join("inbox");
    std::fs::create_dir(&inbox).unwrap();
    std::fs::write(inbox.join("a.log"), "a\n").unwrap();
    let inbox_text = inbox.to_str().unwrap();
    let text = format!(
        r#"{{"name": "files", "config": {{"connector.class": "file-pulse", "topic": "lines",
            "fs.listing.directory.path": "{inbox_text}", "sandbox.fs.read": "{inbox_text}",
            "fs.listing.interval.ms": "100", "monitor.interval.ms": "100"}}}}"#
    );
    let file = connector_file(dir.path(), "files.json", &text);
    let log = dir.path().join("sluice.log");
    let mut child = sluice_run(plugins(&data, &["file-pulse"]), &data, &file)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let values = || {
        let stores = crate::stores(&data).ok()?;
        let records = stores.local().read(DEFAULT_TENANT, "lines", 0, 10).ok()?;
        Some(
            records
                .into_iter()
                .map(|r| String::from_utf8(r.record.value.unwrap().to_vec()).unwrap())
                .collect::<Vec<_>>(),
        )
    };
    wait_until("the first file", || (values()? == ["a"]).then_some(()));
    std::fs::remove_dir_all(&inbox).unwrap();
    let warned = wait_until("a warning naming the folder", || {
        let text = std::fs::read_to_string(&log).ok()?;
        text.lines().find(|l| l.contains("WARN") && l.contains("is gone")).map(String::from)
    });
    assert!(warned.contains(inbox_text), "{warned}");
    std::fs::create_dir(&inbox).unwrap();
    std::fs::write(inbox.join("b.log"), "b\n").unwrap();
    wait_until("the file in the new folder", || (values()? == ["a", "b"]).then_some(()));
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("is gone").count(), 1, "said once while it lasted: {text}");
}
