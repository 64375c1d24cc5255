//! Shared helpers: a host on a fresh data directory with chosen plugins, connector
//! configs, and waiting for conditions with generous deadlines (never fixed sleeps).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice::config::ConnectorConfig;
use sluice::config::DEFAULT_TENANT;
use sluice::connect::Herder;
use sluice::storage::Namespace;
use sluice::storage::{ConnectorStatus, State};

/// Long enough for a loaded 2-core CI machine; conditions usually hold in milliseconds.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub fn plugin_file(name: &str) -> PathBuf {
    let built = Path::new(sluice::BUILT_PLUGINS).join(format!("{name}.wasm"));
    let file = if built.exists() { built } else { Path::new(env!("SLUICE_TEST_PLUGINS")).join(format!("{name}.wasm")) };
    assert!(file.exists(), "plugin {name} was not built: {}", sluice::PLUGIN_BUILD_PROBLEMS);
    file
}

pub struct TestHost {
    pub herder: Herder,
    pub data: tempfile::TempDir,
    pub plugins: tempfile::TempDir,
    /// A scratch folder tests may grant to plugins.
    pub scratch: tempfile::TempDir,
}

impl TestHost {
    pub async fn new(plugins: &[&str]) -> TestHost {
        // `SLUICE_LOG=info cargo test ... -- --nocapture` shows the host's log.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("SLUICE_LOG"))
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        for name in plugins {
            std::fs::copy(plugin_file(name), dir.path().join(format!("{name}.wasm"))).unwrap();
        }
        let data = tempfile::tempdir().unwrap();
        share_compile_cache(data.path());
        let herder = Herder::open(data.path(), dir.path()).await.unwrap();
        TestHost { herder, data, plugins: dir, scratch: tempfile::tempdir().unwrap() }
    }

    /// A host whose worker config declares these tenants (TOML).
    pub async fn with_tenants(plugins: &[&str], tenants_toml: &str) -> TestHost {
        let host = TestHost::new(plugins).await;
        host.herder.shutdown().await;
        let worker = sluice::config::WorkerConfig::parse(tenants_toml).unwrap();
        let herder = Herder::open_with_config(worker, host.data.path(), host.plugins.path()).await.unwrap();
        TestHost { herder, ..host }
    }

    /// Another host process on the same data directory, as after a restart.
    pub async fn reopen(self) -> TestHost {
        self.herder.shutdown().await;
        let herder = Herder::open(self.data.path(), self.plugins.path()).await.unwrap();
        TestHost { herder, ..self }
    }

    /// The scratch folder itself, for `sandbox.fs.read` / `sandbox.fs.write`.
    pub fn scratch_dir(&self) -> String {
        self.scratch.path().to_string_lossy().into_owned()
    }

    pub fn scratch(&self, name: &str) -> String {
        self.scratch.path().join(name).to_string_lossy().into_owned()
    }

    pub async fn start(&self, config: ConnectorConfig) {
        self.herder.start(config).await.unwrap();
    }

    pub fn status(&self, connector: &str) -> Option<ConnectorStatus> {
        self.herder.status(connector)
    }

    /// Committed offset of `partition`, parsed.
    pub fn offset(&self, connector: &str, partition: &str) -> Option<Value> {
        let ns = Namespace::new(DEFAULT_TENANT, connector);
        let partition = sluice::storage::json::canonical_object(partition).unwrap();
        let found = self.herder.services().stores.offsets().offsets(&ns, &[partition]).unwrap();
        found[0].as_deref().map(|o| serde_json::from_str(o).unwrap())
    }

    pub fn seq(&self, connector: &str, partition: &str) -> Option<u64> {
        self.offset(connector, partition).and_then(|o| o["seq"].as_u64())
    }

    /// Every value in a local topic, in order.
    pub fn values(&self, topic: &str) -> Vec<String> {
        let records = self.herder.services().stores.local().read(DEFAULT_TENANT, topic, 0, usize::MAX >> 1).unwrap();
        records.into_iter().map(|r| String::from_utf8(r.record.value.unwrap().to_vec()).unwrap()).collect()
    }

    /// Every (key, value) in a local topic, in order, as text.
    pub fn keyed_values(&self, topic: &str) -> Vec<(String, String)> {
        let records = self.herder.services().stores.local().read(DEFAULT_TENANT, topic, 0, usize::MAX >> 1).unwrap();
        let text = |bytes: Option<bytes::Bytes>| String::from_utf8(bytes.unwrap_or_default().to_vec()).unwrap();
        records.into_iter().map(|r| (text(r.record.key), text(r.record.value))).collect()
    }

    pub async fn wait_state(&self, connector: &str, state: State) -> ConnectorStatus {
        wait_until(&format!("connector {connector} {state}"), || {
            self.status(connector).filter(|s| s.connector.state == state)
        })
        .await
    }

    pub async fn wait_task(&self, connector: &str, task: u32, state: State) -> sluice::storage::TaskStatus {
        wait_until(&format!("task {connector}/{task} {state}"), || {
            self.status(connector)?.tasks.into_iter().find(|t| t.id == task && t.state == state)
        })
        .await
    }
}

/// Points the data directory's compile cache at one folder shared by every test: the
/// Python and JavaScript plugins take seconds to compile, and the cache is keyed by
/// content and engine, so sharing it is what a restarted host does anyway.
/// (`registry::compiled_components_are_cached_by_content` tests the cold path.)
fn share_compile_cache(data: &Path) {
    let shared = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compiled");
    std::fs::create_dir_all(&shared).unwrap();
    std::os::unix::fs::symlink(&shared, sluice::storage::DataDir::new(data).compile_cache()).unwrap();
}

/// A connector config from `key=value` pairs.
pub fn connector(name: &str, plugin: &str, pairs: &[(&str, &str)]) -> ConnectorConfig {
    let mut config = serde_json::Map::new();
    config.insert("connector.class".into(), plugin.into());
    for (k, v) in pairs {
        config.insert(k.to_string(), Value::String(v.to_string()));
    }
    let text = serde_json::json!({ "name": name, "config": config }).to_string();
    ConnectorConfig::from_json(&text, name).unwrap()
}

/// Polls `check` until it returns `Some`, or panics naming `what` after [`DEADLINE`].
pub async fn wait_until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < DEADLINE, "timed out after {DEADLINE:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Values `<id>-0` ... `<id>-<n-1>`: what a testkit task with `record.count = n` sends.
pub fn sequence(id: &str, n: u64) -> Vec<String> {
    (0..n).map(|i| format!("{id}-{i}")).collect()
}

/// The values of one testkit task (`<id>-<n>`), in topic order.
pub fn values_of(values: &[String], id: &str) -> Vec<String> {
    values.iter().filter(|v| v.rsplit_once('-').is_some_and(|(prefix, _)| prefix == id)).cloned().collect()
}

pub fn write_json(path: &str, value: Value) {
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, value.to_string()).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

pub fn read_json(path: &str) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// A well-behaved neighbour: endless counter.
pub async fn start_neighbour(host: &TestHost) {
    host.start(connector("neighbour", "counter", &[("topic", "n"), ("records.per.second", "200")])).await;
    host.wait_task("neighbour", 0, State::Running).await;
}

pub async fn assert_neighbour_keeps_delivering(host: &TestHost) {
    let now = host.seq("neighbour", r#"{"counter":0}"#).unwrap_or(0);
    wait_until("the neighbour to keep delivering", || {
        (host.seq("neighbour", r#"{"counter":0}"#)? > now + 20).then_some(())
    })
    .await;
    let status = host.status("neighbour").unwrap();
    assert_eq!(status.connector.state, State::Running);
    assert_eq!(status.tasks[0].state, State::Running);
    // Stopped, its committed offset must be exactly its last delivered record.
    assert!(host.herder.stop("neighbour").await);
    let values = host.values("n");
    let expected: Vec<String> = (0..values.len()).map(|i| counter_value(i as u64)).collect();
    assert_eq!(values, expected, "the neighbour's records must be complete and in order");
    assert_eq!(
        host.seq("neighbour", r#"{"counter":0}"#),
        Some(values.len() as u64 - 1),
        "the neighbour's offset must match its records"
    );
}

fn counter_value(seq: u64) -> String {
    String::from_utf8(counter::generator::value(0, seq, 64)).unwrap()
}
