//! Hostile plugins that block where epoch interruption cannot reach (a WASI sleep in every
//! call, at load time too), or make the host work for them (a huge `offsets` request, a
//! flood of small ones, a record with a million headers), each in a real `sluice run`
//! beside a well-behaved counter. For each: the reason is in the status, the neighbour's
//! delivery never stalls for longer than the attacker's deadline, the host's peak resident
//! memory stays under a bound, and SIGTERM ends the process within the stop deadline.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use sluice::config::DEFAULT_TENANT;
use sluice::storage::{ConnectorStatus, Namespace, State};

use crate::{connector_file, sluice, wait_until};

/// The attacker's `sandbox.call.timeout.ms`.
const DEADLINE: Duration = Duration::from_millis(2000);
/// What a load-time call gets (the default lifecycle deadline).
const LOAD_DEADLINE: Duration = Duration::from_secs(10);
/// Peak resident memory of the whole `sluice run` (engine, two plugins, SQLite) that no
/// attack may push it past. An idle run of these two plugins peaks near 100 MiB; the
/// attacker's one call may make the host lift at most its memory cap (64 MiB).
const PEAK_RSS_BOUND_MIB: u64 = 400;
/// Slack for a loaded 2-core machine on top of the deadlines.
const MARGIN: Duration = Duration::from_secs(3);

struct Scene {
    dir: tempfile::TempDir,
    data: PathBuf,
    child: Option<Child>,
}

impl Drop for Scene {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn test_plugin(name: &str) -> PathBuf {
    Path::new(sluice::BUILT_PLUGINS).with_file_name("test-plugins").join(format!("{name}.wasm"))
}

impl Scene {
    /// `sluice run` of the neighbour and, when given, the attacker (hostile, with
    /// `attack` and these extra keys), with `extra_plugins` in the plugin folder too.
    fn start(attack: Option<(&str, &[(&str, &str)])>, extra_plugins: &[&str]) -> Scene {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        std::fs::copy(Path::new(sluice::BUILT_PLUGINS).join("counter.wasm"), plugins.join("counter.wasm")).unwrap();
        for name in ["hostile"].iter().chain(extra_plugins) {
            std::fs::copy(test_plugin(name), plugins.join(format!("{name}.wasm"))).unwrap();
        }
        let neighbour = connector_file(
            dir.path(),
            "neighbour.json",
            r#"{"name": "neighbour", "config": {"connector.class": "counter", "topic": "n", "records.per.second": "200", "batch.size": "10"}}"#,
        );
        let data = dir.path().join("data");
        let mut command = sluice();
        command.arg("run").arg("--plugin-path").arg(&plugins).arg("--data-dir").arg(&data).arg(&neighbour);
        if let Some((attack, extra)) = attack {
            let mut config = serde_json::json!({
                "connector.class": "hostile", "topic": "hostile", "hostile.attack": attack,
                "sandbox.call.timeout.ms": DEADLINE.as_millis().to_string(),
            });
            for (key, value) in extra {
                config[key] = serde_json::json!(value);
            }
            let attacker = serde_json::json!({"name": "attacker", "config": config}).to_string();
            command.arg(connector_file(dir.path(), "attacker.json", &attacker));
        }
        let child = command.stderr(Stdio::null()).spawn().unwrap();
        Scene { dir, data, child: Some(child) }
    }

    fn neighbour_seq(&self) -> Option<u64> {
        let stores = crate::stores(&self.data).ok()?;
        let ns = Namespace::new(DEFAULT_TENANT, "neighbour");
        let found = stores.offsets().offsets(&ns, &[r#"{"counter":0}"#.to_string()]).ok()?;
        let offset: serde_json::Value = serde_json::from_str(found[0].as_deref()?).ok()?;
        offset["seq"].as_u64()
    }

    fn status(&self, connector: &str) -> Option<ConnectorStatus> {
        let stores = crate::stores(&self.data).ok()?;
        stores.statuses().statuses(DEFAULT_TENANT).ok()?.into_iter().find(|s| s.name == connector)
    }

    /// Samples the neighbour's committed offset until `done` holds; returns the longest
    /// time its delivery stood still, and what `done` returned.
    fn watch_neighbour<T>(&self, what: &str, mut done: impl FnMut(&Scene) -> Option<T>) -> (Duration, T) {
        wait_until("the neighbour's first records", || self.neighbour_seq());
        let started = Instant::now();
        let (mut last, mut since, mut longest) = (self.neighbour_seq(), Instant::now(), Duration::ZERO);
        loop {
            let now = self.neighbour_seq();
            if now != last {
                longest = longest.max(since.elapsed());
                (last, since) = (now, Instant::now());
            }
            if let Some(value) = done(self) {
                return (longest.max(since.elapsed()), value);
            }
            assert!(started.elapsed() < crate::DEADLINE, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn peak_rss_mib(&self) -> u64 {
        let pid = self.child.as_ref().unwrap().id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() / 1024
    }

    /// SIGTERM, and how long the process took to exit (and with which code).
    fn terminate(&mut self) -> (Duration, Option<i32>) {
        let mut child = self.child.take().unwrap();
        let started = Instant::now();
        let term = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
        assert!(term.success());
        let code = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status.code();
            }
            if started.elapsed() > crate::DEADLINE {
                let _ = child.kill();
                panic!("sluice run did not end within {:?} of SIGTERM", crate::DEADLINE);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        (started.elapsed(), code)
    }

    /// The neighbour's records are all there, in order.
    fn assert_neighbour_complete(&self) {
        let stores = crate::stores(&self.data).unwrap();
        let records = stores.local().read(DEFAULT_TENANT, "n", 0, usize::MAX >> 1).unwrap();
        assert!(!records.is_empty());
        for (n, stored) in records.iter().enumerate() {
            let value = String::from_utf8(stored.record.value.clone().unwrap().to_vec()).unwrap();
            assert!(value.starts_with(&format!("0-{n}.")), "neighbour record {n} is {value:?}");
        }
        let _ = &self.dir;
    }
}

/// The attacker fails (its task, or itself) with a trace containing `words`; meanwhile
/// the neighbour never stalls past the attacker's deadline; memory and shutdown bounded.
fn attack_fails(attack: &str, extra: &[(&str, &str)], task: bool, words: &[&str]) {
    let mut scene = Scene::start(Some((attack, extra)), &[]);
    let (stalled, trace) = scene.watch_neighbour(&format!("{attack}: the attacker FAILED"), |scene| {
        let status = scene.status("attacker")?;
        if task {
            status.tasks.into_iter().find(|t| t.state == State::Failed)?.trace
        } else {
            (status.connector.state == State::Failed).then_some(status.connector.trace?)
        }
    });
    for word in words {
        assert!(trace.contains(word), "{attack}: expected {word:?} in the trace {trace:?}");
    }
    // Some more of the neighbour beside the failed attacker.
    let (after, ()) = scene.watch_neighbour("more neighbour records", |scene| {
        let seq = scene.neighbour_seq()?;
        (seq > 100).then_some(())
    });
    let stalled = stalled.max(after);
    assert!(stalled < DEADLINE, "{attack}: the neighbour stood still for {stalled:?}");
    let rss = scene.peak_rss_mib();
    assert!(rss < PEAK_RSS_BOUND_MIB, "{attack}: peak resident memory {rss} MiB");
    let (took, code) = scene.terminate();
    assert_eq!(code, Some(0), "{attack}: SIGTERM is a clean stop");
    assert!(took < DEADLINE + MARGIN, "{attack}: SIGTERM took {took:?}");
    scene.assert_neighbour_complete();
    println!("{attack}: stalled at most {stalled:?}, peak {rss} MiB, SIGTERM in {took:?}");
}

#[test]
fn a_sleep_in_poll_fails_the_task_at_its_deadline() {
    attack_fails("sleep-in-poll", &[], true, &["poll did not return within 2000 ms"]);
}

#[test]
fn a_sleep_in_task_start_fails_the_task_at_its_deadline() {
    attack_fails("sleep-in-task-start", &[], true, &["start did not return within 2000 ms"]);
}

#[test]
fn a_sleep_in_commit_fails_the_task_at_its_deadline() {
    attack_fails("sleep-in-commit", &[("offset.flush.interval.ms", "300")], true, &["commit did not return within"]);
}

#[test]
fn a_sleep_in_connector_start_fails_the_connector_at_its_deadline() {
    attack_fails("sleep-in-start", &[], false, &["start did not return within 2000 ms"]);
}

#[test]
fn a_sleep_in_task_configs_fails_the_connector_at_its_deadline() {
    attack_fails("sleep-in-task-configs", &[], false, &["task-configs did not return within 2000 ms"]);
}

#[test]
fn a_sleep_in_tick_fails_the_connector_at_its_deadline() {
    attack_fails("sleep-in-tick", &[], false, &["tick did not return within 2000 ms"]);
}

#[test]
fn a_huge_offsets_request_is_refused_at_the_memory_cap() {
    attack_fails("huge-offsets", &[], true, &["trap in poll", "memory cap of 64 MiB", "sandbox.memory.max.bytes"]);
}

#[test]
fn a_flood_of_small_offset_calls_ends_at_the_deadline() {
    attack_fails("offsets-flood", &[], true, &["poll did not return within 2000 ms"]);
}

#[test]
fn a_record_with_too_many_headers_is_refused() {
    attack_fails("many-headers", &[("hostile.count", "100000")], true, &["has 100000 headers, more than the 1024"]);
}

#[test]
fn a_million_empty_headers_count_against_the_batch_cap() {
    // Each header costs its overhead: a million empty ones are 30 MiB, over the 16 MiB cap.
    attack_fails("many-headers", &[], true, &["poll batch of 1 records", "exceeds sandbox.batch.max.bytes"]);
}

/// A plugin that sleeps in `stop`: SIGTERM still ends the process by the stop deadline.
fn stop_is_bounded(attack: &str) {
    let mut scene = Scene::start(Some((attack, &[])), &[]);
    scene.watch_neighbour("the attacker running", |scene| {
        let status = scene.status("attacker")?;
        status.tasks.iter().any(|t| t.state == State::Running).then_some(())
    });
    let rss = scene.peak_rss_mib();
    let (took, code) = scene.terminate();
    assert_eq!(code, Some(0), "{attack}: SIGTERM is a clean stop");
    assert!(took < DEADLINE + MARGIN, "{attack}: SIGTERM took {took:?}");
    assert!(took >= DEADLINE / 2, "{attack}: the stop did not wait for the sleeping plugin ({took:?})?");
    assert!(rss < PEAK_RSS_BOUND_MIB);
    scene.assert_neighbour_complete();
}

#[test]
fn a_sleep_in_connector_stop_is_cut_at_the_stop_deadline() {
    stop_is_bounded("sleep-in-stop");
}

#[test]
fn a_sleep_in_task_stop_is_cut_at_the_stop_deadline() {
    stop_is_bounded("sleep-in-task-stop");
}

#[test]
fn a_sleep_in_validate_refuses_the_config_at_its_deadline() {
    let mut scene = Scene::start(Some(("sleep-in-validate", &[])), &[]);
    let started = Instant::now();
    let mut child = scene.child.take().unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < crate::DEADLINE, "sluice run is still validating");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(2), "a config that cannot be validated is refused");
    assert!(started.elapsed() < LOAD_DEADLINE + DEADLINE + MARGIN, "{:?}", started.elapsed());
}

/// A plugin file whose load-time call sleeps: it is rejected at the load deadline, and the
/// neighbour (another plugin) starts after at most that long.
fn load_is_bounded(plugin: &str, call: &str) {
    let started = Instant::now();
    let mut scene = Scene::start(None, &[plugin]);
    wait_until("the neighbour's first records", || scene.neighbour_seq());
    let waited = started.elapsed();
    assert!(waited < LOAD_DEADLINE + MARGIN, "the neighbour waited {waited:?} for {plugin}");
    let (took, code) = scene.terminate();
    assert_eq!(code, Some(0));
    assert!(took < MARGIN, "{took:?}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(test_plugin(plugin), dir.path().join(format!("{plugin}.wasm"))).unwrap();
    let started = Instant::now();
    let output = crate::run(&[
        "plugins",
        "--json",
        "--plugin-path",
        dir.path().to_str().unwrap(),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
    ]);
    assert!(started.elapsed() < LOAD_DEADLINE + MARGIN, "sluice plugins took {:?}", started.elapsed());
    let listing: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let reason = listing["rejected"][0]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains(&format!("{call} did not return within 10000 ms")), "{listing}");
}

#[test]
fn a_sleep_in_version_at_load_delays_nothing_past_its_deadline() {
    load_is_bounded("slow-version", "version");
}

#[test]
fn a_sleep_in_config_def_at_load_delays_nothing_past_its_deadline() {
    load_is_bounded("slow-config-def", "config-def");
}

/// A connector whose `stop` sleeps past its deadline does not take its tasks' share of it:
/// they stop beside it, each committing what it delivered and stopping within the deadline,
/// so SIGTERM says nothing of batches to be sent again after a restart.
#[test]
fn a_connector_whose_stop_sleeps_leaves_its_tasks_their_stop() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(test_plugin("hostile"), plugins.join("hostile.wasm")).unwrap();
    let config = serde_json::json!({"name": "slow-stop", "config": {"connector.class": "hostile", "topic": "h",
        "hostile.attack": "sleep-in-stop", "hostile.sleep.ms": "60000", "tasks.max": "2",
        "sandbox.call.timeout.ms": "3000"}});
    let file = connector_file(dir.path(), "slow-stop.json", &config.to_string());
    let (data, log) = (dir.path().join("data"), dir.path().join("sluice.log"));
    let mut child = sluice()
        .env("SLUICE_LOG", "warn")
        .args(["run", "--plugin-path"])
        .arg(&plugins)
        .arg("--data-dir")
        .arg(&data)
        .arg(&file)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until("both tasks running", || {
        let stores = crate::stores(&data).ok()?;
        let status = stores.statuses().statuses(DEFAULT_TENANT).ok()?.into_iter().find(|s| s.name == "slow-stop")?;
        (status.tasks.len() == 2 && status.tasks.iter().all(|t| t.state == State::Running)).then_some(())
    });
    let term = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(term.success());
    let status = wait_until("sluice run to end", || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(0));
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(!log.contains("did not settle by the stop deadline"), "a task's stop was cut: {log}");
}
