//! Connector configs: Kafka Connect's JSON shape (`{"name": ..., "config": {...}}`) and
//! the keys the host itself reads. Every error names where the config came from, the key
//! and the reason, so `sluice run` can print it on one line.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// A config problem: `<source>: <key>: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file or connector the config came from.
    pub source: String,
    /// The key at fault, if one is.
    pub key: Option<String>,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: {key}: {}", self.source, self.reason),
            None => write!(f, "{}: {}", self.source, self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A named connector config, as in Kafka Connect (every value a string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorConfig {
    pub name: String,
    pub values: BTreeMap<String, String>,
    /// Where it was read from, for error messages.
    pub source: String,
}

pub const CONNECTOR_CLASS: &str = "connector.class";
pub const TASKS_MAX: &str = "tasks.max";

impl ConnectorConfig {
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let source = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            source: source.clone(),
            key: None,
            reason: format!("cannot read: {e}"),
        })?;
        Self::from_json(&text, &source)
    }

    /// Parses `{"name": "...", "config": {...}}`. Numbers and booleans are accepted as
    /// values and kept as their text, since hand-written files often have `"tasks.max": 2`.
    pub fn from_json(text: &str, source: &str) -> Result<Self, ConfigError> {
        let error = |key: Option<&str>, reason: String| ConfigError {
            source: source.to_string(),
            key: key.map(String::from),
            reason,
        };
        let value: Value = serde_json::from_str(text).map_err(|e| error(None, format!("malformed JSON: {e}")))?;
        let Value::Object(top) = value else {
            return Err(error(None, "expected a JSON object {\"name\": ..., \"config\": {...}}".into()));
        };
        let Some(config) = top.get("config") else {
            return Err(error(Some("config"), "missing: expected {\"name\": ..., \"config\": {...}}".into()));
        };
        let Value::Object(config) = config else {
            return Err(error(Some("config"), "must be a JSON object of string values".into()));
        };
        let mut values = BTreeMap::new();
        for (key, value) in config {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                other => return Err(error(Some(key), format!("must be a string, not {other}"))),
            };
            values.insert(key.clone(), text);
        }
        let name = match (top.get("name"), values.get("name")) {
            (Some(Value::String(name)), _) => name.clone(),
            (None, Some(name)) => name.clone(),
            (Some(_), _) => return Err(error(Some("name"), "must be a string".into())),
            (None, None) => return Err(error(Some("name"), "missing".into())),
        };
        if name.is_empty() || name.chars().any(|c| c.is_control() || c == '/') {
            return Err(error(Some("name"), format!("{name:?} is not a valid connector name")));
        }
        values.insert("name".into(), name.clone());
        let config = ConnectorConfig { name, values, source: source.to_string() };
        config.plugin()?;
        config.settings()?;
        Ok(config)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub fn error(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError { source: self.source.clone(), key: Some(key.into()), reason: reason.into() }
    }

    /// The plugin this connector runs: the file stem of a `.wasm` in the plugin folder.
    pub fn plugin(&self) -> Result<&str, ConfigError> {
        match self.get(CONNECTOR_CLASS) {
            None => Err(self
                .error(CONNECTOR_CLASS, "missing: name the plugin to run (its .wasm file name without the extension)")),
            Some("") => Err(self.error(CONNECTOR_CLASS, "empty")),
            Some(class) => Ok(class),
        }
    }

    /// This config with `defaults` filled in for the keys it does not set.
    pub fn with_defaults(&self, defaults: &BTreeMap<String, String>) -> ConnectorConfig {
        let mut config = self.clone();
        for (key, value) in defaults {
            config.values.entry(key.clone()).or_insert_with(|| value.clone());
        }
        config
    }

    /// The tenant that owns this connector (`tenant`, default `default`).
    pub fn tenant(&self) -> &str {
        self.get("tenant").unwrap_or(crate::store::DEFAULT_TENANT)
    }

    /// The host's own keys, checked.
    pub fn settings(&self) -> Result<ConnectorSettings, ConfigError> {
        ConnectorSettings::parse(self)
    }

    /// The config as a plugin receives it.
    pub fn to_pairs(&self) -> Vec<(String, String)> {
        self.values.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// Where a connector's records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationKind {
    /// The embedded log in the data directory; exactly-once.
    Local,
    /// JSON lines on standard output; at-least-once.
    Stdout,
}

/// Whether a FAILED connector or task is restarted by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    pub enabled: bool,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl RestartPolicy {
    /// The delay before restart number `attempt` (0-based): doubling, capped.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX);
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Per-call deadlines, enforced with epoch interruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTimeouts {
    /// `start`, `stop`, `task-configs`, `validate`, instantiation.
    pub lifecycle: Duration,
    /// `poll`, `tick` and `commit`.
    pub hot: Duration,
}

/// The sandbox a connector's instances run in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    pub fs_read: Vec<PathBuf>,
    pub fs_write: Vec<PathBuf>,
    pub memory_max_bytes: u64,
    pub timeouts: CallTimeouts,
    /// Largest record (key + value + headers) a task may return.
    pub record_max_bytes: u64,
    /// Fuel (roughly, wasm instructions) one call may use; needs fuel metering on.
    pub fuel_per_call: Option<u64>,
    /// Largest poll batch.
    pub batch_max_bytes: u64,
    pub log_lines_per_second: u32,
    /// A task whose memory passes this share of the cap (in percent; 0 is never) after
    /// growing since its start is recycled: committed, stopped and started afresh.
    pub memory_recycle_percent: u8,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            fs_read: Vec::new(),
            fs_write: Vec::new(),
            memory_max_bytes: 64 << 20,
            timeouts: CallTimeouts { lifecycle: Duration::from_secs(10), hot: Duration::from_secs(5) },
            record_max_bytes: 1 << 20,
            fuel_per_call: None,
            batch_max_bytes: 16 << 20,
            log_lines_per_second: 100,
            memory_recycle_percent: 75,
        }
    }
}

/// The keys of a connector config that the host reads (the plugin sees them all too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorSettings {
    pub tasks_max: u32,
    pub destination: DestinationKind,
    pub monitor_interval: Duration,
    pub offset_flush_interval: Duration,
    pub restart: RestartPolicy,
    pub sandbox: SandboxSettings,
}

/// Every key the host reads, with its default and meaning (shown by `sluice run --help`
/// and the README).
pub const HOST_KEYS: &[(&str, &str, &str)] = &[
    ("name", "required", "connector name, unique in the process"),
    (CONNECTOR_CLASS, "required", "plugin to run: its .wasm file name without the extension"),
    ("tenant", "default", "the tenant that owns the connector (declared in sluice.toml)"),
    (TASKS_MAX, "1", "most tasks the connector may ask for"),
    ("destination", "local", "local (embedded, exactly-once) or stdout (JSON lines, at-least-once)"),
    ("monitor.interval.ms", "1000", "how often the connector's tick() is called"),
    ("offset.flush.interval.ms", "60000", "how often a task's commit() is called"),
    ("restart.policy", "never", "never, or on-failure: restart a FAILED connector or task with backoff"),
    ("restart.backoff.initial.ms", "1000", "first restart delay; doubles each time"),
    ("restart.backoff.max.ms", "60000", "longest restart delay"),
    ("sandbox.fs.read", "", "comma-separated host directories the plugin may read (same path inside)"),
    ("sandbox.fs.write", "", "comma-separated host directories the plugin may read and write"),
    ("sandbox.memory.max.bytes", "67108864", "memory cap of each instance"),
    (
        "sandbox.memory.recycle.percent",
        "75",
        "restart a task in a fresh sandbox, from its committed offsets, once its memory grows past this share of the cap (0: never)",
    ),
    ("sandbox.call.timeout.ms", "10000 / 5000", "deadline of each call (start, stop, task-configs / poll, tick)"),
    ("sandbox.record.max.bytes", "1048576", "largest record (key + value + headers) a task may return"),
    ("sandbox.batch.max.bytes", "16777216", "largest poll batch"),
    (
        "sandbox.fuel.per.call",
        "none",
        "fuel one call may use (needs [sandbox] fuel_metering = true in sluice.toml); used fuel is in the status",
    ),
    (
        "sandbox.log.lines.per.second",
        "100",
        "plugin log and stdout/stderr lines per second per instance; excess dropped and counted",
    ),
];

impl ConnectorSettings {
    fn parse(config: &ConnectorConfig) -> Result<Self, ConfigError> {
        let positive = |key: &str, default: u64| -> Result<u64, ConfigError> {
            match config.get(key) {
                None => Ok(default),
                Some(text) => match text.trim().parse::<u64>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(config.error(key, format!("'{text}' is not a positive integer"))),
                },
            }
        };
        let millis = |key: &str, default: u64| positive(key, default).map(Duration::from_millis);
        let tasks_max = positive(TASKS_MAX, 1)?;
        let tasks_max =
            u32::try_from(tasks_max).map_err(|_| config.error(TASKS_MAX, format!("{tasks_max} is too large")))?;
        let destination = match config.get("destination").unwrap_or("local") {
            "local" => DestinationKind::Local,
            "stdout" => DestinationKind::Stdout,
            other => {
                return Err(
                    config.error("destination", format!("unknown destination '{other}' (expected local or stdout)"))
                );
            }
        };
        let restart_enabled = match config.get("restart.policy").unwrap_or("never") {
            "never" => false,
            "on-failure" => true,
            other => {
                return Err(
                    config.error("restart.policy", format!("unknown policy '{other}' (expected never or on-failure)"))
                );
            }
        };
        let defaults = SandboxSettings::default();
        let timeouts = match config.get("sandbox.call.timeout.ms") {
            None => defaults.timeouts,
            Some(_) => {
                let t = millis("sandbox.call.timeout.ms", 0)?;
                CallTimeouts { lifecycle: t, hot: t }
            }
        };
        let sandbox = SandboxSettings {
            fs_read: directories(config, "sandbox.fs.read")?,
            fs_write: directories(config, "sandbox.fs.write")?,
            memory_max_bytes: positive("sandbox.memory.max.bytes", defaults.memory_max_bytes)?,
            timeouts,
            record_max_bytes: positive("sandbox.record.max.bytes", defaults.record_max_bytes)?,
            fuel_per_call: match config.get("sandbox.fuel.per.call") {
                None => None,
                Some(_) => Some(positive("sandbox.fuel.per.call", 0)?),
            },
            batch_max_bytes: positive("sandbox.batch.max.bytes", defaults.batch_max_bytes)?,
            log_lines_per_second: u32::try_from(positive("sandbox.log.lines.per.second", 100)?)
                .map_err(|_| config.error("sandbox.log.lines.per.second", "too large"))?,
            memory_recycle_percent: match config.get("sandbox.memory.recycle.percent") {
                None => defaults.memory_recycle_percent,
                Some(text) => text.trim().parse::<u8>().ok().filter(|p| *p <= 100).ok_or_else(|| {
                    config.error("sandbox.memory.recycle.percent", "must be a whole number from 0 to 100")
                })?,
            },
        };
        Ok(ConnectorSettings {
            tasks_max,
            destination,
            monitor_interval: millis("monitor.interval.ms", 1000)?,
            offset_flush_interval: millis("offset.flush.interval.ms", 60_000)?,
            restart: RestartPolicy {
                enabled: restart_enabled,
                initial_backoff: millis("restart.backoff.initial.ms", 1000)?,
                max_backoff: millis("restart.backoff.max.ms", 60_000)?,
            },
            sandbox,
        })
    }
}

/// A comma-separated list of existing directories, made absolute.
fn directories(config: &ConnectorConfig, key: &str) -> Result<Vec<PathBuf>, ConfigError> {
    let Some(list) = config.get(key) else { return Ok(Vec::new()) };
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|dir| {
            let path = std::fs::canonicalize(dir)
                .map_err(|e| config.error(key, format!("directory '{dir}' cannot be granted: {e}")))?;
            if !path.is_dir() {
                return Err(config.error(key, format!("'{dir}' is not a directory")));
            }
            Ok(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(config: &str) -> Result<ConnectorConfig, ConfigError> {
        ConnectorConfig::from_json(config, "c.json")
    }

    #[test]
    fn kafka_connect_shape_is_accepted() {
        let c = parse(r#"{"name":"a","config":{"connector.class":"counter","tasks.max":2,"topic":"t"}}"#).unwrap();
        assert_eq!(c.plugin().unwrap(), "counter");
        assert_eq!(c.settings().unwrap().tasks_max, 2);
        assert_eq!(c.get("name"), Some("a"));
    }

    #[test]
    fn errors_name_source_key_and_reason() {
        let e = parse(r#"{"name":"a","config":{"connector.class":"counter","tasks.max":"0"}}"#).unwrap_err();
        assert_eq!(e.to_string(), "c.json: tasks.max: '0' is not a positive integer");
        let e = parse(r#"{"name":"a","config":{"tasks.max":"1"}}"#).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("connector.class"));
        let e = parse(r#"{"name":"a","config":{"#).unwrap_err();
        assert!(e.to_string().starts_with("c.json: malformed JSON"), "{e}");
        let e = parse(r#"{"name":"a","config":{"connector.class":"x","sandbox.fs.read":"/no/such/dir"}}"#).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("sandbox.fs.read"));
    }

    #[test]
    fn restart_backoff_doubles_and_caps() {
        let p = RestartPolicy {
            enabled: true,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
        };
        assert_eq!(p.backoff(0), Duration::from_millis(100));
        assert_eq!(p.backoff(2), Duration::from_millis(400));
        assert_eq!(p.backoff(3), Duration::from_millis(500));
        assert_eq!(p.backoff(100), Duration::from_millis(500));
    }
}
