//! The CLI: bad connector files and configs get a line per problem naming the file, the key
//! and the reason, with exit code 2; `plugins` lists rejected files; SIGTERM stops gracefully.

use std::path::Path;
use std::process::Stdio;

use crate::{connector_file, run, sluice, wait_until};

/// Runs `sluice run` on one connector file and returns (exit code, stderr).
fn run_connector(text: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = connector_file(dir.path(), "bad.json", text);
    let data = dir.path().join("data");
    let output = run(&["run", "--data-dir", data.to_str().unwrap(), file.to_str().unwrap()]);
    (output.status.code(), String::from_utf8(output.stderr).unwrap(), file.display().to_string())
}

fn assert_config_error(text: &str, expected: &str) {
    let (code, stderr, file) = run_connector(text);
    assert_eq!(code, Some(2), "exit code for {text}: stderr {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {stderr}");
    let expected = format!("error: {file}: {expected}");
    assert!(lines[0].starts_with(&expected), "expected {expected:?}, got {:?}", lines[0]);
}

#[test]
fn bad_connector_configs_name_file_key_and_reason() {
    assert_config_error(
        r#"{"name": "x", "config": {"connector.class": "nope", "topic": "t"}}"#,
        "connector.class: unknown plugin 'nope'",
    );
    let (_, stderr, _) = run_connector(r#"{"name": "x", "config": {"connector.class": "file-puls", "topic": "t"}}"#);
    assert!(stderr.contains("unknown plugin 'file-puls'") && stderr.contains("did you mean `file-pulse`?"), "{stderr}");
    assert_config_error(r#"{"name": "x", "config": {"topic": "t"}}"#, "connector.class: missing");
    assert_config_error(
        r#"{"name": "x", "config": {"connector.class": "counter", "tasks.max": "0", "topic": "t"}}"#,
        "tasks.max: '0' is not a positive integer",
    );
    assert_config_error(
        r#"{"name": "x", "config": {"connector.class": "counter", "tasks.max": "two", "topic": "t"}}"#,
        "tasks.max: 'two' is not a positive integer",
    );
    assert_config_error(r#"{"name": "x", "config": {"connector.class": "counter""#, "malformed JSON");
    assert_config_error(
        r#"{"name": "x", "config": {"connector.class": "counter"}}"#,
        "topic: required by plugin counter",
    );
    assert_config_error(
        r#"{"name": "x", "config": {"connector.class": "counter", "topic": "t", "record.size": "big"}}"#,
        "record.size: 'big' is not a valid int",
    );
    // Several problems in one config: each on its line, as Connect's validate lists them.
    let (code, stderr, file) =
        run_connector(r#"{"name": "x", "config": {"connector.class": "counter", "record.size": "big"}}"#);
    assert_eq!(code, Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(
        lines,
        [
            format!("error: {file}: topic: required by plugin counter (Destination topic.)"),
            format!("error: {file}: record.size: 'big' is not a valid int"),
        ],
        "{stderr}"
    );
    // The host's own keys too, each bad one said (the first stopped the file).
    let (code, stderr, file) = run_connector(
        r#"{"name": "x", "config": {"connector.class": "counter", "tasks.max": "0", "destination": "nowhere", "restart.policy": "x"}}"#,
    );
    assert_eq!(code, Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    for key in ["tasks.max", "destination", "restart.policy", "topic"] {
        let said = format!("error: {file}: {key}: ");
        assert_eq!(lines.iter().filter(|l| l.starts_with(&said)).count(), 1, "{key}: {stderr}");
    }
}

#[test]
fn plugins_lists_loaded_and_rejected_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(format!("{}/counter.wasm", sluice::BUILT_PLUGINS), dir.path().join("counter.wasm")).unwrap();
    std::fs::write(dir.path().join("broken.wasm"), b"nope").unwrap();
    let data = dir.path().join("data");
    // The user's cache directory, which every data directory of the user shares.
    let user_cache = dir.path().join("user-cache");
    let plugins_json_in = |data: &std::path::Path| {
        let args = ["plugins", "--json", "--plugin-path", dir.path().to_str().unwrap(), "--data-dir"];
        let mut command = sluice();
        command.args(args).arg(data).env("SLUICE_LOG", "info").env("XDG_CACHE_HOME", &user_cache);
        command.env_remove("SLUICE_COMPILE_CACHE").output().unwrap()
    };
    let plugins_json = || plugins_json_in(&data);
    let output = plugins_json();
    assert_eq!(output.status.code(), Some(0));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("compiling plugin counter ("), "a compile is announced: {said}");
    let again = plugins_json();
    assert!(!String::from_utf8_lossy(&again.stderr).contains("compiling"), "the second run compiles nothing");
    assert_eq!(again.stdout, output.stdout, "and lists the same, from the cache");
    assert!(user_cache.join("sluice/compiled").is_dir(), "compiled into the user's cache directory");
    let elsewhere = plugins_json_in(&dir.path().join("another-data-dir"));
    let said = String::from_utf8_lossy(&elsewhere.stderr);
    assert!(!said.contains("compiling"), "a new data directory compiles nothing again: {said}");
    assert_eq!(elsewhere.stdout, output.stdout);
    let listing: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(listing["plugins"][0]["name"], "counter");
    assert_eq!(listing["plugins"][0]["config"][0]["name"], "topic");
    assert!(listing["rejected"][0]["file"].as_str().unwrap().ends_with("broken.wasm"));
    assert!(listing["rejected"][0]["reason"].as_str().unwrap().contains("not a WebAssembly file"));

    // Without --json: each plugin with its keys (type, default or required, documentation).
    let output = run(&["plugins", "--plugin-path", dir.path().to_str().unwrap(), "--data-dir", data.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).unwrap();
    let topic = text.lines().find(|l| l.trim_start().starts_with("topic ")).unwrap_or_else(|| panic!("{text}"));
    assert!(topic.contains("STRING") && topic.contains("required") && topic.contains("Destination topic."), "{topic}");
    let count = text.lines().find(|l| l.trim_start().starts_with("record.count ")).unwrap_or_else(|| panic!("{text}"));
    assert!(count.contains("default \"0\""), "{count}");
    assert!(text.contains("rejected ") && text.contains("broken.wasm"), "{text}");

    // A directory and a link to nothing named `*.wasm` are listed with why, not skipped.
    std::fs::create_dir(dir.path().join("folder.wasm")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("gone.wasm"), dir.path().join("dangling.wasm")).unwrap();
    let output = run(&["plugins", "--plugin-path", dir.path().to_str().unwrap(), "--data-dir", data.to_str().unwrap()]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("folder.wasm: a directory, not a component file"), "{text}");
    assert!(text.contains("dangling.wasm: cannot be read"), "{text}");
}

#[test]
fn sigterm_stops_gracefully_and_the_cli_reads_what_was_committed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = connector_file(
        dir.path(),
        "c.json",
        r#"{"name": "calm", "config": {"connector.class": "counter", "topic": "calm", "record.count": "300", "records.per.second": "1000"}}"#,
    );
    let mut child = sluice().arg("run").arg("--data-dir").arg(&data).arg(&file).stderr(Stdio::null()).spawn().unwrap();
    let offsets = || run(&["offsets", "calm", "--json", "--data-dir", data.to_str().unwrap()]);
    wait_until("all 300 records committed", || {
        let output = offsets();
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        (json["offsets"][0]["offset"]["seq"] == 299).then_some(())
    });
    let term = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "SIGTERM must stop sluice cleanly");
    let json: serde_json::Value = serde_json::from_slice(&offsets().stdout).unwrap();
    assert_eq!(json["offsets"][0]["partition"], serde_json::json!({"counter": 0}));
    let topics = String::from_utf8(run(&["topics", "list", "--data-dir", data.to_str().unwrap()]).stdout).unwrap();
    assert_eq!(topics.trim(), "calm\t300");
    let read = run(&["topics", "read", "calm", "--json", "--data-dir", data.to_str().unwrap()]);
    let lines: Vec<serde_json::Value> = read
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 300);
    assert_eq!(lines[299]["offset"], serde_json::json!({"seq": 299}));
    assert!(lines[0]["value"].as_str().unwrap().starts_with("0-0."));
}

#[test]
fn offsets_delete_resets_a_partition_but_not_under_a_running_connector() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    let file = connector_file(
        dir.path(),
        "c.json",
        r#"{"name": "reset", "config": {"connector.class": "counter", "topic": "reset", "record.count": "50"}}"#,
    );
    let mut child = sluice().arg("run").arg("--data-dir").arg(&data).arg(&file).stderr(Stdio::null()).spawn().unwrap();
    let offsets = || -> serde_json::Value {
        serde_json::from_slice(&run(&["offsets", "reset", "--json", "--data-dir", data_arg]).stdout).unwrap_or_default()
    };
    wait_until("all 50 records committed", || (offsets()["offsets"][0]["offset"]["seq"] == 49).then_some(()));
    let refused = run(&["offsets", "reset", "--delete", r#"{"counter":0}"#, "--data-dir", data_arg]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("another sluice process is using"), "{refused:?}");
    child.kill().unwrap();
    child.wait().unwrap();

    let deleted = run(&["offsets", "reset", "--delete", r#"{"counter":0}"#, "--data-dir", data_arg]);
    assert_eq!(deleted.status.code(), Some(0), "{deleted:?}");
    assert_eq!(offsets()["offsets"], serde_json::json!([]));
    // Run again: the partition is read from the start (50 more records).
    let mut child = sluice().arg("run").arg("--data-dir").arg(&data).arg(&file).stderr(Stdio::null()).spawn().unwrap();
    wait_until("the partition re-read", || (offsets()["offsets"][0]["offset"]["seq"] == 49).then_some(()));
    child.kill().unwrap();
    child.wait().unwrap();
    let topics = String::from_utf8(run(&["topics", "list", "--data-dir", data_arg]).stdout).unwrap();
    assert_eq!(topics.trim(), "reset\t100");
}

#[test]
fn until_done_exits_0_once_every_connector_finished_and_1_when_one_failed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let bounded = connector_file(
        dir.path(),
        "bounded.json",
        r#"{"name": "bounded", "config": {"connector.class": "counter", "topic": "numbers", "tasks.max": "2",
            "record.count": "500", "finish": "true"}}"#,
    );
    let output = run(&["run", "--until-done", "--data-dir", data.to_str().unwrap(), bounded.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("every connector is FINISHED"), "{stderr}");
    let stored =
        crate::stores(&data).unwrap().local().read(sluice::config::DEFAULT_TENANT, "numbers", 0, 1 << 20).unwrap();
    assert_eq!(stored.len(), 1000, "every record of both tasks, once");

    // The same run again finds nothing left to send, and finishes at once.
    let output = run(&["run", "--until-done", "--data-dir", data.to_str().unwrap(), bounded.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let stored =
        crate::stores(&data).unwrap().local().read(sluice::config::DEFAULT_TENANT, "numbers", 0, 1 << 20).unwrap();
    assert_eq!(stored.len(), 1000, "nothing sent twice");

    // A task that fails for good (restart.policy=never) ends the run with 1, naming it.
    let failing = connector_file(
        dir.path(),
        "failing.json",
        r#"{"name": "failing", "config": {"connector.class": "counter", "topic": "big", "record.count": "5",
            "record.size": "2000", "sandbox.record.max.bytes": "1000", "finish": "true"}}"#,
    );
    let args = ["run", "--until-done", "--data-dir", data.to_str().unwrap(), bounded.to_str().unwrap()];
    let output = sluice().args(args).arg(&failing).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("connector 'failing' task 0 FAILED:") && stderr.contains("exceeds sandbox.record.max.bytes"),
        "{stderr}"
    );
}

/// Runs `sluice ARGS` in bash with its output piped as `pipe` says (`2>&1 | head -1`), and
/// returns sluice's own exit code and what it wrote to a stderr file (empty when stderr
/// went into the pipe too), killing it if it has not ended within the deadline.
fn piped(args: &[&str], pipe: &str, cwd: &Path) -> (i32, String) {
    let script = format!("\"$0\" {} {pipe}; exit ${{PIPESTATUS[0]}}", args.join(" "));
    let mut child = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .env("SLUICE_PLUGIN_PATH", sluice::BUILT_PLUGINS)
        .current_dir(cwd)
        .spawn()
        .unwrap();
    let code = crate::wait_until(&format!("sluice {args:?} {pipe} to end"), || child.try_wait().unwrap());
    (code.code().unwrap_or(-1), std::fs::read_to_string(cwd.join("stderr.txt")).unwrap_or_default())
}

/// A reader that goes away ends a command quietly: no panic, success for the commands
/// that only print, exit 1 for a `stdout` run (nothing it could not write is committed),
/// also when its stderr went into the same pipe (a log line to a closed stderr used to
/// panic the worker thread that wrote it and hang the run).
#[test]
fn a_reader_that_goes_away_ends_every_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::write(
        dir.path().join("c.json"),
        r#"{"name": "c", "config": {"connector.class": "counter", "topic": "t", "record.count": "20", "finish": "true"}}"#,
    )
    .unwrap();
    let out = sluice()
        .current_dir(dir.path())
        .args(["run", "--until-done", "--data-dir", "data", "c.json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(data.exists());
    for args in [
        &["plugins"][..],
        &["plugins", "--json"],
        &["topics", "list", "--data-dir", "data"],
        &["topics", "read", "t", "--data-dir", "data"],
        &["offsets", "c", "--data-dir", "data"],
        &["hash-token", "secret"],
    ] {
        // The reader is gone before the command writes anything.
        let (code, stderr) = piped(args, "2>stderr.txt | (exec 0<&-; true)", dir.path());
        assert!(!stderr.contains("panicked"), "sluice {args:?}: {stderr}");
        assert_eq!(code, 0, "sluice {args:?}: {stderr}");
    }
    std::fs::write(
        dir.path().join("out.json"),
        r#"{"name": "out", "config": {"connector.class": "counter", "topic": "o", "destination": "stdout"}}"#,
    )
    .unwrap();
    for pipe in ["2>stderr.txt | head -3 >/dev/null", "2>&1 | head -3 >/dev/null"] {
        let _ = std::fs::remove_file(dir.path().join("stderr.txt"));
        let (code, stderr) = piped(&["run", "--data-dir", "data", "out.json"], pipe, dir.path());
        assert!(!stderr.contains("panicked"), "{pipe}: {stderr}");
        assert_eq!(code, 1, "{pipe}: {stderr}");
    }
}

/// A worker config that cannot be used is refused like a bad connector file: one line
/// naming the file and what is wrong, exit code 2, nothing started.
#[test]
fn a_bad_worker_config_exits_2_naming_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = connector_file(
        dir.path(),
        "c.json",
        r#"{"name": "c", "config": {"connector.class": "counter", "topic": "t"}}"#,
    );
    for (toml, expected) in [
        ("[sandbox]\nmax_instances = 0\n", "max_instances: 0 is not between 1 and 16384"),
        ("[sandbox\n", "sluice.toml"),
        ("[[tenant]]\nname = \"a.b\"\n", "tenant \"a.b\""),
    ] {
        let config = connector_file(dir.path(), "sluice.toml", toml);
        let output = sluice()
            .args(["run", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(&config)
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{toml}: {stderr}");
        assert!(stderr.contains("sluice.toml") && stderr.contains(expected), "{toml}: {stderr}");
        assert!(!dir.path().join("data").exists(), "{toml}: something started");
    }
}
