//! Connector configs: Kafka Connect's JSON shape (`{"name": ..., "config": {...}}`). Every
//! error names where the config came from, the key and the reason, so `sluice run` can
//! print it on one line.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::Value;

use super::keys::{CONNECTOR_CLASS, ConnectorSettings, NAME, TENANT};
use super::transforms::Transforms;
use super::worker::DEFAULT_TENANT;

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

/// A JSON config value as the text a config holds: strings as they are, numbers and
/// booleans as written.
pub fn value_text(value: &Value) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        // serde_json reads an integer beyond 64 bits as a float, which would store other
        // digits than those sent: refused, where Connect's Jackson keeps them.
        Value::Number(n) if crate::storage::json::inexact_integer(n) => {
            Err(format!("the number {n} is too large to be kept exactly: give it as a string, in quotes"))
        }
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(format!("must be a string, not {other}")),
    }
}

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

    /// Parses `{"name": "...", "config": {...}}`, its values not yet checked. Numbers and
    /// booleans are accepted as values and kept as their text, since hand-written files
    /// often have `"tasks.max": 2`.
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
        let name = match top.get("name") {
            Some(Value::String(name)) => Some(name.clone()),
            None => None,
            Some(_) => return Err(error(Some("name"), "must be a string".into())),
        };
        // The host's keys are checked at admission, which lists every problem of the
        // config rather than the first one `check` meets.
        Self::from_map(name, config, source)
    }

    /// The config of a JSON object of values, named `name` or by its own `name` key, with
    /// nothing but the name checked (what Connect's validate endpoint takes).
    pub fn from_map(
        name: Option<String>,
        config: &serde_json::Map<String, Value>,
        source: &str,
    ) -> Result<Self, ConfigError> {
        let error =
            |key: &str, reason: String| ConfigError { source: source.to_string(), key: Some(key.to_string()), reason };
        let mut values = BTreeMap::new();
        for (key, value) in config {
            values.insert(key.clone(), value_text(value).map_err(|reason| error(key, reason))?);
        }
        let Some(name) = name.or_else(|| values.get(NAME).cloned()) else {
            return Err(error(NAME, "missing".into()));
        };
        if name.is_empty() || name.contains('/') {
            return Err(error(NAME, format!("{name:?} is not a valid connector name")));
        }
        // A name is shown in logs, statuses and the console: one that breaks a line or
        // reorders what follows it could pass for another connector.
        if let Some(c) = name.chars().find(|&c| crate::runtime::plugin_log::needs_escape(c)) {
            return Err(error(
                NAME,
                format!(
                    "{:?} is not a valid connector name (it has the control or bidirectional character U+{:04X})",
                    name,
                    u32::from(c)
                ),
            ));
        }
        if name == "." || name == ".." {
            return Err(error(NAME, format!("{name:?} is not a valid connector name (a URL cannot name it)")));
        }
        if name.trim() != name {
            return Err(error(NAME, format!("{name:?} is not a valid connector name (spaces around it)")));
        }
        values.insert(NAME.into(), name.clone());
        Ok(ConnectorConfig { name, values, source: source.to_string() })
    }

    /// Every value of `config` that is not a config value (null, an object, a list, an
    /// integer too wide to keep), each named by its key: Connect lists them all, beside the
    /// rest of the config's problems, where [`Self::from_map`] stops at the first.
    pub fn value_problems(config: &serde_json::Map<String, Value>, source: &str) -> Vec<ConfigError> {
        config
            .iter()
            .filter_map(|(key, value)| {
                let reason = value_text(value).err()?;
                Some(ConfigError { source: source.to_string(), key: Some(key.clone()), reason })
            })
            .collect()
    }

    /// The checks every config must pass before admission: a plugin is named and the
    /// host's keys parse.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.plugin()?;
        self.settings()?;
        Ok(())
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
        self.get(TENANT).unwrap_or(DEFAULT_TENANT)
    }

    /// The host's own keys, checked.
    pub fn settings(&self) -> Result<ConnectorSettings, ConfigError> {
        let mut settings =
            ConnectorSettings::parse(&|key| self.get(key)).map_err(|(key, reason)| self.error(key, reason))?;
        settings.transforms =
            Transforms::parse(&|key| self.get(key)).map_err(|(key, reason)| self.error(&key, reason))?;
        Ok(settings)
    }

    /// The config as a plugin receives it.
    /// `producer.override.*` (KIP-458), without the prefix.
    pub fn producer_overrides(&self) -> BTreeMap<String, String> {
        self.values
            .iter()
            .filter_map(|(key, value)| {
                key.strip_prefix(super::keys::PRODUCER_OVERRIDE_PREFIX).map(|k| (k.to_string(), value.clone()))
            })
            .collect()
    }

    pub fn to_pairs(&self) -> Vec<(String, String)> {
        self.values.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(config: &str) -> Result<ConnectorConfig, ConfigError> {
        let config = ConnectorConfig::from_json(config, "c.json")?;
        config.check().map(|()| config)
    }

    #[test]
    fn every_value_that_is_not_text_is_named() {
        let map: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"a": null, "b": {"x": 1}, "c": [1], "d": "ok", "e": 5, "f": true, "g": 100000000000000000000000}"#,
        )
        .unwrap();
        let problems = ConnectorConfig::value_problems(&map, "c");
        let keys: Vec<&str> = problems.iter().filter_map(|p| p.key.as_deref()).collect();
        assert_eq!(keys, ["a", "b", "c", "g"]);
        assert_eq!(problems[0].reason, "must be a string, not null");
        // from_map stops at the first of them.
        let first = ConnectorConfig::from_map(Some("n".into()), &map, "c").unwrap_err();
        assert_eq!(first.key.as_deref(), Some("a"));
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
    fn a_name_that_would_show_as_another_is_refused() {
        for (name, said) in [("\u{202E}gnp.exe", "U+202E"), ("a\nb", "U+000A"), ("x\u{2066}y", "U+2066")] {
            let config = serde_json::json!({"name": name, "config": {"connector.class": "counter"}});
            let e = parse(&config.to_string()).unwrap_err();
            assert_eq!(e.key.as_deref(), Some("name"));
            assert!(e.reason.contains(said) && e.reason.contains("not a valid connector name"), "{e}");
        }
        for name in ["日本語", "<b>&amp;", "with space", "émoji 🚀"] {
            let config = serde_json::json!({"name": name, "config": {"connector.class": "counter"}});
            assert_eq!(parse(&config.to_string()).unwrap().name, name);
        }
    }

    #[test]
    fn numbers_are_kept_as_sent_or_refused() {
        let c = parse(
            r#"{"name":"a","config":{"connector.class":"c","big":18446744073709551615,"neg":-9007199254740993,"f":1.5}}"#,
        )
        .unwrap();
        assert_eq!(
            (c.get("big"), c.get("neg"), c.get("f")),
            (Some("18446744073709551615"), Some("-9007199254740993"), Some("1.5"))
        );
        let e = parse(r#"{"name":"a","config":{"connector.class":"c","x.big":12345678901234567890123}}"#).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("x.big"));
        assert!(e.reason.contains("give it as a string"), "{e}");
    }
}
