//! `[kafka]` in `sluice.toml`: the Kafka cluster records and state go to. Kafka Connect's
//! worker keys (the three internal topics, `group.id`, `exactly.once.source.support`) are
//! read here; every other key is a librdkafka client setting (`bootstrap.servers`,
//! `security.protocol`, `sasl.*`, `ssl.*`, ...) passed to every client Sluice makes.
//!
//! ```toml
//! [kafka]
//! "bootstrap.servers" = "broker1:9092,broker2:9092"
//! "security.protocol" = "SASL_SSL"                 # any librdkafka setting
//! "offset.storage.topic" = "sluice-offsets"        # Connect's worker keys, Connect's defaults
//! "exactly.once.source.support" = "enabled"        # KIP-618: every destination=kafka connector exactly-once
//! ```

use std::collections::BTreeMap;

/// One of the worker's internal compacted topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InternalTopic {
    pub name: String,
    pub partitions: i32,
    /// `-1`: the broker's `default.replication.factor` (KIP-464).
    pub replication_factor: i16,
}

/// `[kafka]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    /// librdkafka settings for every client.
    pub client: BTreeMap<String, String>,
    pub offsets: InternalTopic,
    pub configs: InternalTopic,
    pub statuses: InternalTopic,
    /// Connect's `group.id`: the worker group, and the prefix of tasks' transactional ids.
    pub group_id: String,
    /// `exactly.once.source.support=enabled`: with Kafka storage, every `destination=kafka`
    /// connector runs in transactions, as in Connect.
    pub exactly_once_source: bool,
}

/// The worker keys `[kafka]` reads itself, with their defaults (Connect's partitions and
/// replication; topic names of Sluice's own, so a Sluice worker pointed at a cluster that
/// also runs Kafka Connect does not share its topics unless told to).
const WORKER_KEYS: &[(&str, &str)] = &[
    ("offset.storage.topic", "sluice-offsets"),
    ("offset.storage.partitions", "25"),
    ("offset.storage.replication.factor", "3"),
    ("config.storage.topic", "sluice-configs"),
    ("config.storage.replication.factor", "3"),
    ("status.storage.topic", "sluice-status"),
    ("status.storage.partitions", "5"),
    ("status.storage.replication.factor", "3"),
    ("group.id", "sluice"),
    ("exactly.once.source.support", "disabled"),
];

/// Client settings Sluice decides itself, per client.
const MANAGED_CLIENT_KEYS: &[&str] =
    &["transactional.id", "enable.idempotence", "isolation.level", "acks", "partitioner"];

impl KafkaConfig {
    /// `bootstrap.servers`, the brokers every client starts from (checked present).
    pub fn bootstrap_servers(&self) -> &str {
        self.client.get("bootstrap.servers").map_or("", String::as_str)
    }

    /// The worker key naming `topic` when it is one of the worker's state topics: no
    /// connector's record may go there (it would be read back as connectors' offsets,
    /// configs or statuses).
    pub fn state_topic_key(&self, topic: &str) -> Option<&'static str> {
        [
            (&self.offsets, "offset.storage.topic"),
            (&self.configs, "config.storage.topic"),
            (&self.statuses, "status.storage.topic"),
        ]
        .into_iter()
        .find_map(|(state, key)| (state.name == topic).then_some(key))
    }

    /// Reads `[kafka]`; errors name the key.
    pub fn parse(table: BTreeMap<String, toml::Value>) -> anyhow::Result<KafkaConfig> {
        let mut values = as_text(table);
        let mut take = |key: &str| {
            let default = WORKER_KEYS.iter().find(|(k, _)| *k == key).expect("a worker key").1;
            values.remove(key).unwrap_or_else(|| default.to_string())
        };
        let mut worker = BTreeMap::new();
        for (key, _) in WORKER_KEYS {
            worker.insert(*key, take(key));
        }
        let topic = |prefix: &str, partitions: Option<i32>| -> anyhow::Result<InternalTopic> {
            let name_key = format!("{prefix}.storage.topic");
            let name = worker[name_key.as_str()].trim().to_string();
            check_topic_name(&name).map_err(|e| anyhow::anyhow!("[kafka] {name_key}: {e}"))?;
            let partitions = match partitions {
                Some(fixed) => fixed,
                None => {
                    let key = format!("{prefix}.storage.partitions");
                    let text = &worker[key.as_str()];
                    text.trim()
                        .parse::<i32>()
                        .ok()
                        .filter(|n| *n > 0 || *n == -1)
                        .ok_or_else(|| anyhow::anyhow!("[kafka] {key}: '{text}' is not a positive number or -1"))?
                }
            };
            let key = format!("{prefix}.storage.replication.factor");
            let text = &worker[key.as_str()];
            let replication_factor = text
                .trim()
                .parse::<i16>()
                .ok()
                .filter(|n| *n > 0 || *n == -1)
                .ok_or_else(|| anyhow::anyhow!("[kafka] {key}: '{text}' is not a positive number or -1"))?;
            Ok(InternalTopic { name, partitions, replication_factor })
        };
        // The config topic has one partition, as in Connect: its records are read in order.
        let (offsets, configs, statuses) = (topic("offset", None)?, topic("config", Some(1))?, topic("status", None)?);
        let names = [&offsets.name, &configs.name, &statuses.name];
        anyhow::ensure!(
            names[0] != names[1] && names[1] != names[2] && names[0] != names[2],
            "[kafka] offset.storage.topic, config.storage.topic and status.storage.topic must be three different topics"
        );
        let exactly_once_source = match worker["exactly.once.source.support"].trim() {
            "enabled" => true,
            "disabled" => false,
            other => anyhow::bail!("[kafka] exactly.once.source.support: '{other}' is not enabled or disabled"),
        };
        let group_id = worker["group.id"].trim().to_string();
        anyhow::ensure!(!group_id.is_empty(), "[kafka] group.id: empty");
        if let Some(key) = values.keys().find(|k| MANAGED_CLIENT_KEYS.contains(&k.as_str())) {
            anyhow::bail!("[kafka] {key}: Sluice sets this itself for each client; remove it");
        }
        // librdkafka checks each setting's name and value as it is set, which makes no
        // client: a bad one is said now, not by each connector's failure to make its own.
        // Before the check for bootstrap.servers: a misspelt `bootstrap.server` is named.
        let mut probe = rdkafka::ClientConfig::new();
        for (key, value) in &values {
            probe.set(key, value);
        }
        if let Err(e) = probe.create_native_config() {
            anyhow::bail!("[kafka]: {e}");
        }
        anyhow::ensure!(
            values.get("bootstrap.servers").is_some_and(|s| !s.trim().is_empty()),
            "[kafka] bootstrap.servers: missing (the brokers to connect to, host:port,...)"
        );
        Ok(KafkaConfig { client: values, offsets, configs, statuses, group_id, exactly_once_source })
    }
}

/// A TOML table of settings as text, the way Kafka and Connect take every setting
/// (`5` and `"5"` alike).
pub(super) fn as_text(table: BTreeMap<String, toml::Value>) -> BTreeMap<String, String> {
    table
        .into_iter()
        .map(|(key, value)| {
            let text = match value {
                toml::Value::String(text) => text,
                other => other.to_string(),
            };
            (key, text)
        })
        .collect()
}

/// Kafka's rule for topic names: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn check_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 249 {
        return Err(format!("'{name}' is not a topic name: it must have 1 to 249 characters"));
    }
    if name == "." || name == ".." {
        return Err(format!("'{name}' is not a topic name"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("'{name}' is not a topic name: it has {c:?} (allowed: letters, digits, '.', '_', '-')"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<KafkaConfig> {
        let table: BTreeMap<String, toml::Value> = toml::from_str(text).unwrap();
        KafkaConfig::parse(table)
    }

    #[test]
    fn worker_keys_have_connects_defaults_and_the_rest_goes_to_librdkafka() {
        let kafka = parse("\"bootstrap.servers\" = \"b:9092\"\n\"linger.ms\" = 5\n").unwrap();
        assert_eq!(kafka.client.get("linger.ms").map(String::as_str), Some("5"));
        assert!(!kafka.client.contains_key("offset.storage.topic"));
        assert_eq!(
            kafka.offsets,
            InternalTopic { name: "sluice-offsets".into(), partitions: 25, replication_factor: 3 }
        );
        assert_eq!(kafka.configs.partitions, 1);
        assert_eq!(kafka.statuses.partitions, 5);
        assert!(!kafka.exactly_once_source);
        let custom = parse(
            "\"bootstrap.servers\" = \"b:9092\"\n\"offset.storage.topic\" = \"connect-offsets\"\n\"offset.storage.replication.factor\" = 1\n\"exactly.once.source.support\" = \"enabled\"\n",
        )
        .unwrap();
        assert_eq!(custom.offsets.name, "connect-offsets");
        assert_eq!(custom.offsets.replication_factor, 1);
        assert!(custom.exactly_once_source);
    }

    #[test]
    fn bad_keys_are_named() {
        let error = |text: &str| format!("{:#}", parse(text).unwrap_err());
        assert!(error("\"linger.ms\" = 5\n").contains("bootstrap.servers"));
        assert!(
            error("\"bootstrap.servers\" = \"b\"\n\"offset.storage.partitions\" = 0\n")
                .contains("offset.storage.partitions")
        );
        assert!(
            error("\"bootstrap.servers\" = \"b\"\n\"status.storage.topic\" = \"a b\"\n")
                .contains("status.storage.topic")
        );
        assert!(
            error("\"bootstrap.servers\" = \"b\"\n\"status.storage.topic\" = \"sluice-offsets\"\n")
                .contains("different")
        );
        assert!(
            error("\"bootstrap.servers\" = \"b\"\n\"exactly.once.source.support\" = \"yes\"\n")
                .contains("exactly.once")
        );
        assert!(error("\"bootstrap.servers\" = \"b\"\n\"transactional.id\" = \"x\"\n").contains("transactional.id"));
        assert!(error("\"bootstrap.servers\" = \"b\"\n\"acks\" = \"1\"\n").contains("acks"));
        // librdkafka's own check of every setting, at load.
        let unknown = error("\"bootstrap.servers\" = \"b\"\n\"no.such.key\" = \"1\"\n");
        assert!(unknown.starts_with("[kafka]") && unknown.contains("no.such.key"), "{unknown}");
        let misspelt = error("\"bootstrap.server\" = \"b\"\n");
        assert!(misspelt.contains("bootstrap.server:") || misspelt.contains("\"bootstrap.server\""), "{misspelt}");
        let bad_value = error("\"bootstrap.servers\" = \"b\"\n\"linger.ms\" = \"soon\"\n");
        assert!(bad_value.contains("linger.ms"), "{bad_value}");
        parse("\"bootstrap.servers\" = \"b\"\n\"linger.ms\" = 5\n\"security.protocol\" = \"plaintext\"\n").unwrap();
    }
}
