//! The worker config (`sluice.toml`, optional), read once and never changed while the
//! worker runs: tenants (who owns connectors, what they may grant, their quotas),
//! worker-wide defaults for connector keys, sandbox settings, and the storage backend.
//! Without a file every connector is in `default`, which has no limits, and storage is
//! the embedded SQLite database.
//!
//! ```toml
//! [defaults]                                        # for connectors that do not set them
//! "sandbox.call.timeout.ms" = "2000"
//!
//! [sandbox]
//! fuel_metering = true                              # CPU accounting; costs ~10% throughput
//! max_instances = 2048                              # sandboxes at once (connectors + tasks)
//! idle_polls_per_second = 1000                      # empty polls of idle tasks, all together (0: no limit)
//!
//! [storage]
//! kind = "sqlite"                                   # the embedded default, or "kafka" (needs [kafka])
//!
//! [kafka]                                           # see config/kafka.rs
//! "bootstrap.servers" = "localhost:9092"
//!
//! [operator]                                        # the REST API's operator: sees every tenant
//! token_sha256 = "<hex sha256 of its token>"
//!
//! [[tenant]]
//! name = "acme"
//! token_sha256 = "<hex sha256 of the API token>"   # `sluice hash-token TOKEN`
//! roots = ["/data/acme"]                            # directories its connectors may be granted
//! [tenant.quotas]
//! connectors = 5
//! tasks = 10                                        # across all its connectors
//! memory_max_bytes = 134217728                      # per instance
//! records_per_second = 10000                        # across all its tasks
//! call_timeout_max_ms = 60000                       # the longest sandbox.call.timeout.ms
//! log_lines_per_second_max = 1000                   # the highest sandbox.log.lines.per.second
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::kafka::KafkaConfig;

/// The tenant of connectors that name none; unlimited unless declared.
pub const DEFAULT_TENANT: &str = "default";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Quotas {
    pub connectors: Option<u32>,
    pub tasks: Option<u32>,
    pub memory_max_bytes: Option<u64>,
    pub records_per_second: Option<u64>,
    /// The longest `sandbox.call.timeout.ms` its connectors may set. A stop waits for a
    /// plugin's call up to that deadline, and changes to connectors run one at a time, so
    /// a tenant's deadline is how long it may hold up every tenant's changes.
    pub call_timeout_max_ms: Option<u64>,
    /// The highest `sandbox.log.lines.per.second` its connectors may set: each line a
    /// plugin logs is written to the worker's own log, which every tenant shares.
    pub log_lines_per_second_max: Option<u32>,
}

/// A declared tenant's `call_timeout_max_ms` unless `sluice.toml` says otherwise.
pub const TENANT_CALL_TIMEOUT_MAX_MS: u64 = 60_000;

/// A declared tenant's `log_lines_per_second_max` unless `sluice.toml` says otherwise (ten
/// times the key's default).
pub const TENANT_LOG_LINES_PER_SECOND_MAX: u32 = 1_000;

impl Default for Quotas {
    /// A declared tenant's: no limit but on call deadlines and log lines.
    fn default() -> Self {
        Quotas {
            connectors: None,
            tasks: None,
            memory_max_bytes: None,
            records_per_second: None,
            call_timeout_max_ms: Some(TENANT_CALL_TIMEOUT_MAX_MS),
            log_lines_per_second_max: Some(TENANT_LOG_LINES_PER_SECOND_MAX),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    pub name: String,
    /// Hex SHA-256 of the tenant's API token: the token itself is never stored.
    #[serde(default)]
    pub token_sha256: Option<String>,
    /// Directories (and everything under them) its connectors may be granted.
    #[serde(default)]
    pub roots: Vec<PathBuf>,
    #[serde(default)]
    pub quotas: Quotas,
}

impl Tenant {
    /// The built-in `default` tenant: no roots, no quotas.
    fn unlimited_default() -> Tenant {
        let quotas = Quotas { call_timeout_max_ms: None, log_lines_per_second_max: None, ..Quotas::default() };
        Tenant { name: DEFAULT_TENANT.into(), token_sha256: None, roots: Vec::new(), quotas }
    }

    /// Whether `dir` (canonical) is inside one of the roots. The unlimited `default`
    /// tenant without roots may grant anything.
    pub fn may_grant(&self, dir: &Path) -> bool {
        self.is_unlimited_default() || self.roots.iter().any(|root| dir.starts_with(root))
    }

    /// The built-in `default` tenant as it is unless `sluice.toml` declares it: no roots.
    pub fn is_unlimited_default(&self) -> bool {
        self.name == DEFAULT_TENANT && self.roots.is_empty()
    }

    pub fn roots_text(&self) -> String {
        if self.roots.is_empty() {
            "none".into()
        } else {
            self.roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
        }
    }
}

/// `[sandbox]`: settings of the engine every plugin shares.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSandbox {
    /// Whether calls consume fuel (CPU accounting, needed for `sandbox.fuel.per.call`).
    #[serde(default)]
    pub fuel_metering: bool,
    /// How many sandboxes (a connector or a task each) the worker holds at once. Each slot
    /// reserves about 4 GiB of address space (never memory) up front, so the default
    /// stays well inside a process's 128 TiB; 16,384 is the most this allows.
    #[serde(default = "default_max_instances")]
    pub max_instances: u32,
    /// How often, all together, the tasks that find nothing are polled (0: no budget):
    /// past this many idle tasks their pause between empty polls stretches beyond
    /// `poll.idle.max.ms`, so idle tasks cost the worker the same however many there are.
    #[serde(default = "default_idle_polls_per_second")]
    pub idle_polls_per_second: u32,
}

impl Default for WorkerSandbox {
    fn default() -> Self {
        WorkerSandbox {
            fuel_metering: false,
            max_instances: default_max_instances(),
            idle_polls_per_second: DEFAULT_IDLE_POLLS_PER_SECOND,
        }
    }
}

/// The default of `[sandbox] idle_polls_per_second`: a thousand idle tasks keep a 1 s
/// `poll.idle.max.ms`; ten thousand are polled every 10 s.
pub const DEFAULT_IDLE_POLLS_PER_SECOND: u32 = 1000;

fn default_idle_polls_per_second() -> u32 {
    DEFAULT_IDLE_POLLS_PER_SECOND
}

/// The default of `[sandbox] max_instances`.
pub const DEFAULT_MAX_INSTANCES: u32 = 2048;
/// The most `[sandbox] max_instances` may be: 64 TiB of address space in slots.
pub const MOST_INSTANCES: u32 = 16_384;

fn default_max_instances() -> u32 {
    DEFAULT_MAX_INSTANCES
}

/// Which backend holds offsets, configs, statuses and the local record log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageKind {
    /// One SQLite database in the data directory (`sluice.db`).
    #[default]
    Sqlite,
    /// Kafka Connect's three compacted topics on the `[kafka]` cluster; the `local`
    /// destination's log stays in the data directory.
    Kafka,
}

/// `[storage]`
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    #[serde(default)]
    pub kind: StorageKind,
}

/// `[operator]`: who may see and manage every tenant through the REST API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorConfig {
    pub token_sha256: Option<String>,
}

/// Connect's worker keys `topic.tracking.enable` and `topic.tracking.allow.reset` (KIP-558):
/// whether the topics each connector writes to are tracked (`GET /connectors/{n}/topics`),
/// and whether they may be reset. Both default to true, as in Connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicTracking {
    pub enable: bool,
    pub allow_reset: bool,
}

impl Default for TopicTracking {
    fn default() -> Self {
        TopicTracking { enable: true, allow_reset: true }
    }
}

/// `topic.tracking.*` as TOML reads Connect's dotted keys written at the top of the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicKeys {
    #[serde(default)]
    tracking: TopicTrackingKeys,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicTrackingKeys {
    enable: Option<bool>,
    #[serde(default)]
    allow: AllowKeys,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowKeys {
    reset: Option<bool>,
}

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerFile {
    #[serde(default)]
    topic: TopicKeys,
    #[serde(default)]
    operator: OperatorConfig,
    #[serde(default)]
    tenant: Vec<Tenant>,
    #[serde(default)]
    defaults: BTreeMap<String, toml::Value>,
    #[serde(default)]
    sandbox: WorkerSandbox,
    #[serde(default)]
    storage: StorageConfig,
    kafka: Option<BTreeMap<String, toml::Value>>,
}

/// The worker config, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerConfig {
    tenants: BTreeMap<String, Tenant>,
    pub operator: OperatorConfig,
    /// Values for connector keys a connector config does not set.
    pub defaults: BTreeMap<String, String>,
    pub sandbox: WorkerSandbox,
    pub storage: StorageConfig,
    /// `[kafka]`, when declared.
    pub kafka: Option<KafkaConfig>,
    pub topic_tracking: TopicTracking,
}

/// A TOML error as one line, `line L, column C: what` (the parser's own rendering is a
/// block with a caret under the text). The file's top level lists Connect's dotted
/// `topic.tracking.*` keys as a table `topic`, which no one writes: they are named in full.
fn one_line(text: &str, error: &toml::de::Error) -> String {
    let message = error
        .message()
        .trim()
        .replace("one of `topic`,", "one of `topic.tracking.enable`, `topic.tracking.allow.reset`,")
        .replace('\n', " ");
    match error.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

pub fn hash_token(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

impl WorkerConfig {
    /// Reads a worker config; errors name the file and what is wrong.
    pub fn load(path: &Path) -> anyhow::Result<WorkerConfig> {
        let text =
            std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<WorkerConfig> {
        let file: WorkerFile = toml::from_str(text).map_err(|e| anyhow::anyhow!(one_line(text, &e)))?;
        let instances = file.sandbox.max_instances;
        anyhow::ensure!(
            (1..=MOST_INSTANCES).contains(&instances),
            "[sandbox] max_instances: {instances} is not between 1 and {MOST_INSTANCES} (each sandbox slot reserves 4 GiB of address space)"
        );
        let mut tenants = BTreeMap::new();
        for mut tenant in file.tenant {
            // A tenant's name prefixes its Kafka topics (`<tenant>.<topic>`) and its keys in
            // shared topics, so it has no '.' or '/'.
            anyhow::ensure!(
                !tenant.name.is_empty()
                    && tenant.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-')),
                "tenant {:?}: a tenant name is letters, digits, '_' and '-'",
                tenant.name
            );
            // The `default` tenant is the worker's own: its topics have no prefix, it may
            // override any producer setting, and without roots it may grant any directory.
            // A token would hand all that to whoever holds it.
            anyhow::ensure!(
                tenant.name != DEFAULT_TENANT || tenant.token_sha256.is_none(),
                "tenant default: token_sha256 is not for the default tenant, the worker's own (its connectors \
                 are the operator's and `sluice run`'s, unprefixed and unlimited): declare the team's tenant under \
                 a name of its own"
            );
            if let Some(hash) = &tenant.token_sha256 {
                anyhow::ensure!(
                    hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()),
                    "tenant {}: token_sha256 must be 64 hex digits (see `sluice hash-token`)",
                    tenant.name
                );
            }
            // Roots compare as canonical paths, like the grants they contain.
            tenant.roots = tenant
                .roots
                .iter()
                .map(|root| match std::fs::canonicalize(root) {
                    Ok(root) if root.is_dir() => root,
                    Ok(_) => {
                        tracing::warn!(
                            "tenant {}: root '{}' is not a directory: nothing is inside it",
                            tenant.name,
                            root.display()
                        );
                        root.clone()
                    }
                    Err(e) => {
                        tracing::warn!(
                            "tenant {}: root '{}' cannot be used ({e}): no grant is inside it until it exists",
                            tenant.name,
                            root.display()
                        );
                        root.clone()
                    }
                })
                .collect();
            let name = tenant.name.clone();
            anyhow::ensure!(tenants.insert(name.clone(), tenant).is_none(), "tenant {name} is declared twice");
        }
        let defaults = super::kafka::as_text(file.defaults);
        if let Some(hash) = &file.operator.token_sha256 {
            anyhow::ensure!(
                hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()),
                "operator: token_sha256 must be 64 hex digits (see `sluice hash-token`)"
            );
        }
        // Said of sluice.toml now, not of the first connector file that leaves the key out.
        // Grants are left to each connector: a directory may be made after the worker starts.
        let grants = [super::keys::SANDBOX_FS_READ, super::keys::SANDBOX_FS_WRITE];
        let default_of = |key: &str| defaults.get(key).filter(|_| !grants.contains(&key)).map(String::as_str);
        if let Err((key, reason)) = super::ConnectorSettings::parse(&default_of) {
            anyhow::bail!("[defaults] {key}: {reason}");
        }
        let mut tokens: BTreeMap<String, &str> = BTreeMap::new();
        if let Some(hash) = &file.operator.token_sha256 {
            tokens.insert(hash.to_ascii_lowercase(), "the operator");
        }
        for tenant in tenants.values() {
            if let Some(hash) = &tenant.token_sha256
                && let Some(other) = tokens.insert(hash.to_ascii_lowercase(), &tenant.name)
            {
                anyhow::bail!("tenant {}: token_sha256 is also {other}'s: each needs a token of its own", tenant.name);
            }
        }
        let kafka = file.kafka.map(KafkaConfig::parse).transpose()?;
        let mut defaults = defaults;
        if file.storage.kind == StorageKind::Kafka {
            // Records go where the offsets are, unless the operator says otherwise.
            defaults.entry(super::keys::DESTINATION.to_string()).or_insert_with(|| "kafka".to_string());
        }
        anyhow::ensure!(
            file.storage.kind != StorageKind::Kafka || kafka.is_some(),
            "[storage] kind = \"kafka\" needs a [kafka] section with bootstrap.servers"
        );
        Ok(WorkerConfig {
            tenants,
            operator: file.operator,
            defaults,
            sandbox: file.sandbox,
            storage: file.storage,
            kafka,
            topic_tracking: TopicTracking {
                enable: file.topic.tracking.enable.unwrap_or(true),
                allow_reset: file.topic.tracking.allow.reset.unwrap_or(true),
            },
        })
    }

    /// The tenant named `name`; `default` exists (unlimited) unless declared otherwise.
    pub fn tenant(&self, name: &str) -> Option<Tenant> {
        match self.tenants.get(name) {
            Some(tenant) => Some(tenant.clone()),
            None if name == DEFAULT_TENANT => Some(Tenant::unlimited_default()),
            None => None,
        }
    }

    /// Every declared tenant.
    pub fn tenants(&self) -> impl Iterator<Item = &Tenant> {
        self.tenants.values()
    }

    /// The names a connector's `tenant` may take, for an error that lists them: every
    /// declared tenant, and `default` (which always exists, without quotas unless declared).
    pub fn tenant_choices(&self) -> String {
        let undeclared_default = (!self.tenants.contains_key(DEFAULT_TENANT)).then_some(DEFAULT_TENANT);
        self.tenants.keys().map(String::as_str).chain(undeclared_default).collect::<Vec<_>>().join(", ")
    }

    /// The tenant whose token this is.
    pub fn authenticate(&self, token: &str) -> Option<&Tenant> {
        let hash = hash_token(token);
        self.tenants.values().find(|t| t.token_sha256.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(&hash)))
    }

    /// Whether this is the operator's token.
    pub fn is_operator(&self, token: &str) -> bool {
        self.operator.token_sha256.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(&hash_token(token)))
    }

    /// Whether any tenant is declared (then the REST API needs a token).
    pub fn has_tenants(&self) -> bool {
        !self.tenants.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_tracking_takes_connects_keys_and_defaults_to_on() {
        assert_eq!(WorkerConfig::parse("").unwrap().topic_tracking, TopicTracking { enable: true, allow_reset: true });
        let off = WorkerConfig::parse("topic.tracking.enable = false\n[sandbox]\nmax_instances = 8\n").unwrap();
        assert_eq!(off.topic_tracking, TopicTracking { enable: false, allow_reset: true });
        let no_reset = WorkerConfig::parse("topic.tracking.allow.reset = false\n").unwrap();
        assert_eq!(no_reset.topic_tracking, TopicTracking { enable: true, allow_reset: false });
        let error = WorkerConfig::parse("topic.tracking.enabled = false\n").unwrap_err().to_string();
        assert!(error.contains("unknown field `enabled`"), "{error}");
    }

    #[test]
    fn a_toml_error_is_one_line_with_its_place() {
        let error = WorkerConfig::parse("[sandbox]\nmax_instance = 9\n").unwrap_err().to_string();
        assert!(!error.contains('\n'), "{error}");
        assert!(error.starts_with("line 2, column 1: unknown field `max_instance`"), "{error}");
        assert!(error.contains("`max_instances`"), "{error}");
        let error = WorkerConfig::parse("fuel_metering = true\n").unwrap_err().to_string();
        assert!(error.contains("one of `topic.tracking.enable`, `topic.tracking.allow.reset`, `operator`"), "{error}");
        let error = WorkerConfig::parse("[storage]\nkind = \"kafak\"\n").unwrap_err().to_string();
        assert!(error.starts_with("line 2, column 8: "), "{error}");
    }

    #[test]
    fn parse_authenticate_and_grant() {
        let token_hash = hash_token("s3cret");
        let worker = WorkerConfig::parse(&format!(
            "[[tenant]]\nname = \"acme\"\ntoken_sha256 = \"{token_hash}\"\nroots = [\"/data/acme\"]\n[tenant.quotas]\nconnectors = 2\n"
        ))
        .unwrap();
        let acme = worker.tenant("acme").unwrap();
        assert_eq!(acme.quotas.connectors, Some(2));
        assert_eq!(worker.authenticate("s3cret").map(|t| t.name.as_str()), Some("acme"));
        assert!(worker.authenticate("wrong").is_none());
        assert!(acme.may_grant(Path::new("/data/acme/in")));
        assert!(!acme.may_grant(Path::new("/data/acmex")));
        assert!(!acme.may_grant(Path::new("/etc")));
        assert!(worker.tenant("default").unwrap().may_grant(Path::new("/anything")));
        assert!(worker.tenant("nobody").is_none());
        assert!(WorkerConfig::parse("[[tenant]]\nname = \"x\"\ntoken_sha256 = \"plain\"\n").is_err());
        let default_with_token = format!("[[tenant]]\nname = \"default\"\ntoken_sha256 = \"{}\"\n", "a".repeat(64));
        let refused = WorkerConfig::parse(&default_with_token).unwrap_err().to_string();
        assert!(refused.starts_with("tenant default: token_sha256 is not for the default tenant"), "{refused}");
        assert!(WorkerConfig::parse("[[tenant]]\nname = \"default\"\n[tenant.quotas]\nconnectors = 2\n").is_ok());
        assert!(WorkerConfig::parse("[[tenant]]\nname = \"x\"\nsurprise = 1\n").is_err());
        let worker = WorkerConfig::parse(
            "[defaults]\n\"sandbox.call.timeout.ms\" = 2000\n[sandbox]\nfuel_metering = true\n[storage]\nkind = \"sqlite\"\n",
        )
        .unwrap();
        assert_eq!(worker.defaults["sandbox.call.timeout.ms"], "2000");
        let bad_default = WorkerConfig::parse("[defaults]\n\"tasks.max\" = \"0\"\n").unwrap_err().to_string();
        assert!(bad_default.starts_with("[defaults] tasks.max: '0' is not a positive integer"), "{bad_default}");
        let shared = format!(
            "[[tenant]]\nname = \"a\"\ntoken_sha256 = \"{token_hash}\"\n[[tenant]]\nname = \"b\"\ntoken_sha256 = \"{}\"\n",
            token_hash.to_ascii_uppercase()
        );
        let shared = WorkerConfig::parse(&shared).unwrap_err().to_string();
        assert!(shared.contains("token_sha256 is also a's"), "{shared}");
        assert_eq!(worker.sandbox.max_instances, DEFAULT_MAX_INSTANCES);
        assert_eq!(WorkerConfig::parse("[sandbox]\nmax_instances = 11000\n").unwrap().sandbox.max_instances, 11000);
        let too_many = WorkerConfig::parse("[sandbox]\nmax_instances = 100000\n").unwrap_err().to_string();
        assert!(too_many.starts_with("[sandbox] max_instances: 100000 is not between 1 and 16384"), "{too_many}");
        assert!(worker.sandbox.fuel_metering);
        assert_eq!(worker.storage.kind, StorageKind::Sqlite);
        let no_kafka = WorkerConfig::parse("[storage]\nkind = \"kafka\"\n").unwrap_err();
        assert!(format!("{no_kafka:#}").contains("[kafka]"), "{no_kafka:#}");
        assert!(WorkerConfig::parse("[[tenant]]\nname = \"a/b\"\n").is_err());
        let unknown = WorkerConfig::parse("[storage]\nkind = \"cassandra\"\n").unwrap_err();
        assert!(format!("{unknown:#}").contains("cassandra"), "{unknown:#}");
    }
}
