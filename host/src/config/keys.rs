//! The keys of a connector config that the host itself reads, each defined once in
//! [`HOST_KEYS`] (name, type, default, documentation). Parsing takes its defaults from the
//! table, `sluice plugins --json` and the REST API report it, `sluice run --help` prints it,
//! and a test checks the README's key table against [`markdown_table`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// A key's type, in Kafka Connect's words (`ConfigDef.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Boolean,
    Int,
    Long,
    Double,
    String,
    List,
    Password,
}

impl KeyType {
    pub fn connect_name(self) -> &'static str {
        match self {
            KeyType::Boolean => "BOOLEAN",
            KeyType::Int => "INT",
            KeyType::Long => "LONG",
            KeyType::Double => "DOUBLE",
            KeyType::String => "STRING",
            KeyType::List => "LIST",
            KeyType::Password => "PASSWORD",
        }
    }
}

/// What a key is when a config does not set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDefault {
    /// The config must set it.
    Required,
    /// This value.
    Value(&'static str),
    /// Unset has a meaning that is not one value; said in words.
    Unset(&'static str),
}

/// One host key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostKey {
    pub name: &'static str,
    pub type_: KeyType,
    pub default: KeyDefault,
    pub documentation: &'static str,
}

pub const NAME: &str = "name";
pub const CONNECTOR_CLASS: &str = "connector.class";
pub const TENANT: &str = "tenant";
pub const TASKS_MAX: &str = "tasks.max";
pub const TASKS_MAX_ENFORCE: &str = "tasks.max.enforce";
pub const DESTINATION: &str = "destination";
pub const MONITOR_INTERVAL_MS: &str = "monitor.interval.ms";
pub const OFFSET_FLUSH_INTERVAL_MS: &str = "offset.flush.interval.ms";
pub const POLL_IDLE_MAX_MS: &str = "poll.idle.max.ms";
pub const RESTART_POLICY: &str = "restart.policy";
pub const RESTART_BACKOFF_INITIAL_MS: &str = "restart.backoff.initial.ms";
pub const RESTART_BACKOFF_MAX_MS: &str = "restart.backoff.max.ms";
/// The shortest `restart.backoff.initial.ms`.
pub const RESTART_BACKOFF_FLOOR: Duration = Duration::from_millis(100);
pub const SANDBOX_FS_READ: &str = "sandbox.fs.read";
pub const SANDBOX_FS_WRITE: &str = "sandbox.fs.write";
pub const SANDBOX_MEMORY_MAX_BYTES: &str = "sandbox.memory.max.bytes";
pub const SANDBOX_MEMORY_RECYCLE_PERCENT: &str = "sandbox.memory.recycle.percent";
pub const SANDBOX_CALL_TIMEOUT_MS: &str = "sandbox.call.timeout.ms";
pub const SANDBOX_RECORD_MAX_BYTES: &str = "sandbox.record.max.bytes";
pub const SANDBOX_BATCH_MAX_BYTES: &str = "sandbox.batch.max.bytes";
pub const SANDBOX_LOG_LINES_PER_SECOND: &str = "sandbox.log.lines.per.second";
pub const SANDBOX_FUEL_PER_CALL: &str = "sandbox.fuel.per.call";
pub const ERRORS_TOLERANCE: &str = "errors.tolerance";
pub const ERRORS_DEAD_LETTER_TOPIC: &str = "errors.deadletterqueue.topic.name";
pub const ERRORS_LOG_ENABLE: &str = "errors.log.enable";
pub const TOPIC_CREATION_PARTITIONS: &str = "topic.creation.default.partitions";
pub const TOPIC_CREATION_REPLICATION: &str = "topic.creation.default.replication.factor";
pub const EXACTLY_ONCE_SUPPORT: &str = "exactly.once.support";
pub const TRANSACTION_BOUNDARY: &str = "transaction.boundary";
pub const TRANSACTION_BOUNDARY_INTERVAL_MS: &str = "transaction.boundary.interval.ms";
/// KIP-458: `producer.override.<librdkafka setting>` for this connector's producers.
pub const PRODUCER_OVERRIDE_PREFIX: &str = "producer.override.";

/// Deadlines of the calls into a plugin when `sandbox.call.timeout.ms` is not set.
pub const LIFECYCLE_CALL_TIMEOUT: Duration = Duration::from_secs(10);
pub const HOT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Every key the host reads (the plugin sees them all too, and documents its own).
pub const HOST_KEYS: &[HostKey] = &[
    HostKey {
        name: NAME,
        type_: KeyType::String,
        default: KeyDefault::Required,
        documentation: "connector name, unique per tenant",
    },
    HostKey {
        name: CONNECTOR_CLASS,
        type_: KeyType::String,
        default: KeyDefault::Required,
        documentation: "plugin to run: a `.wasm` file's name without the extension in the plugin folder",
    },
    HostKey {
        name: TASKS_MAX,
        type_: KeyType::Int,
        default: KeyDefault::Value("1"),
        documentation: "most tasks the connector may ask for; a connector that asks for more tasks than the worker could ever run at once (with itself, more sandboxes than `[sandbox] max_instances`, 2048 by default) fails saying so",
    },
    HostKey {
        name: TASKS_MAX_ENFORCE,
        type_: KeyType::Boolean,
        default: KeyDefault::Value("true"),
        documentation: "KIP-1004: a connector whose `task-configs` returns more than `tasks.max` configs fails, naming both; `false` runs the first `tasks.max` of them with a warning instead",
    },
    HostKey {
        name: DESTINATION,
        type_: KeyType::String,
        default: KeyDefault::Value("local"),
        documentation: "`local` (embedded log, exactly-once), `stdout` (JSON lines, at-least-once) or `kafka` (the `[kafka]` cluster of `sluice.toml`; at-least-once, or exactly-once on a worker with `exactly.once.source.support = \"enabled\"`)",
    },
    HostKey {
        name: MONITOR_INTERVAL_MS,
        type_: KeyType::Long,
        default: KeyDefault::Value("1000"),
        documentation: "how often the connector's `tick()` runs (the first tick is at start)",
    },
    HostKey {
        name: POLL_IDLE_MAX_MS,
        type_: KeyType::Long,
        default: KeyDefault::Value("1000"),
        documentation: "longest pause between polls that returned nothing (it doubles from 1 ms); the pause ends at once on a reconfiguration request, a pause or a stop. Raise it for many idle tasks, at the cost of how soon a task sees data that arrives without a reconfiguration (an append to a file it tails). A worker with more idle tasks than its `[sandbox] idle_polls_per_second` (1000) stretches the pause past this in proportion",
    },
    HostKey {
        name: OFFSET_FLUSH_INTERVAL_MS,
        type_: KeyType::Long,
        default: KeyDefault::Value("60000"),
        documentation: "how often a task's `commit()` is called (offsets themselves are committed with every delivered batch)",
    },
    HostKey {
        name: RESTART_POLICY,
        type_: KeyType::String,
        default: KeyDefault::Value("never"),
        documentation: "`on-failure` restarts a FAILED connector or task after a backoff",
    },
    HostKey {
        name: RESTART_BACKOFF_INITIAL_MS,
        type_: KeyType::Long,
        default: KeyDefault::Value("1000"),
        documentation: "first restart delay (at least 100); it doubles with each restart",
    },
    HostKey {
        name: RESTART_BACKOFF_MAX_MS,
        type_: KeyType::Long,
        default: KeyDefault::Value("60000"),
        documentation: "longest restart delay",
    },
    HostKey {
        name: SANDBOX_FS_READ,
        type_: KeyType::List,
        default: KeyDefault::Unset("none"),
        documentation: "comma-separated host directories the plugin may read, at the same path inside (a path through a symbolic link is granted as the directory it leads to, and seen inside under both names)",
    },
    HostKey {
        name: SANDBOX_FS_WRITE,
        type_: KeyType::List,
        default: KeyDefault::Unset("none"),
        documentation: "comma-separated host directories the plugin may read and write, at the same path inside",
    },
    HostKey {
        name: SANDBOX_MEMORY_MAX_BYTES,
        type_: KeyType::Long,
        default: KeyDefault::Value("67108864"),
        documentation: "memory cap per instance (64 MiB)",
    },
    HostKey {
        name: SANDBOX_MEMORY_RECYCLE_PERCENT,
        type_: KeyType::Int,
        default: KeyDefault::Value("75"),
        documentation: "a task whose memory grew past this share of the cap is committed, stopped and restarted in a fresh sandbox from its offsets (guest toolchains that never free memory); `0` never",
    },
    HostKey {
        name: SANDBOX_CALL_TIMEOUT_MS,
        type_: KeyType::Long,
        default: KeyDefault::Unset(
            "10000 for `start`/`stop`/`validate`/`task-configs`, 5000 for `poll`/`tick`/`commit`",
        ),
        documentation: "deadline of each call into the plugin",
    },
    HostKey {
        name: SANDBOX_RECORD_MAX_BYTES,
        type_: KeyType::Long,
        default: KeyDefault::Value("1048576"),
        documentation: "largest record, 1 MiB, counting its key and value, each header's key and value plus 32 bytes, and 64 bytes for the record itself; more fails the task",
    },
    HostKey {
        name: SANDBOX_BATCH_MAX_BYTES,
        type_: KeyType::Long,
        default: KeyDefault::Value("16777216"),
        documentation: "largest poll batch, 16 MiB; more fails the task",
    },
    HostKey {
        name: SANDBOX_LOG_LINES_PER_SECOND,
        type_: KeyType::Int,
        default: KeyDefault::Value("100"),
        documentation: "a plugin's log lines and stdout/stderr lines per instance; excess dropped and counted",
    },
    HostKey {
        name: SANDBOX_FUEL_PER_CALL,
        type_: KeyType::Long,
        default: KeyDefault::Unset("none"),
        documentation: "fuel one call may use (needs `fuel_metering` in `sluice.toml`); used fuel shows in the task status",
    },
    HostKey {
        name: ERRORS_TOLERANCE,
        type_: KeyType::String,
        default: KeyDefault::Value("none"),
        documentation: "`none` fails the task on a record the host refuses (too large, bad partition, offset, topic or timestamp) or Kafka refuses for good (larger than its `message.max.bytes`); `all` skips it, commits its offset in order, and counts it in the task status",
    },
    HostKey {
        name: ERRORS_DEAD_LETTER_TOPIC,
        type_: KeyType::String,
        default: KeyDefault::Unset("none"),
        documentation: "with `errors.tolerance=all`: a topic that gets each record the host refuses (not what a plugin skips itself, such as file-pulse's lines too long for a record, which it never reads into memory) (cut to fit `sandbox.record.max.bytes`, and with `destination=kafka` the producer's `message.max.bytes` less 1 KiB) with `__connect.errors.*` headers naming the reason, connector, task, source partition and stage (`TASK_POLL`, or `TRANSFORMATION` with the transform's class)",
    },
    HostKey {
        name: ERRORS_LOG_ENABLE,
        type_: KeyType::Boolean,
        default: KeyDefault::Value("false"),
        documentation: "log each refused record with its reason (at most `sandbox.log.lines.per.second` lines a second a task; the rest counted)",
    },
    HostKey {
        name: TOPIC_CREATION_PARTITIONS,
        type_: KeyType::Int,
        default: KeyDefault::Value("-1"),
        documentation: "`destination=kafka`: partitions of the topics the connector's records create (KIP-158); `-1` is the broker's default",
    },
    HostKey {
        name: TOPIC_CREATION_REPLICATION,
        type_: KeyType::Int,
        default: KeyDefault::Value("-1"),
        documentation: "`destination=kafka`: replication factor of the topics it creates; `-1` is the broker's default",
    },
    HostKey {
        name: EXACTLY_ONCE_SUPPORT,
        type_: KeyType::String,
        default: KeyDefault::Value("requested"),
        documentation: "`destination=kafka` (KIP-618): on a worker with `exactly.once.source.support = \"enabled\"` and `[storage] kind = \"kafka\"`, each transaction writes its records and offsets atomically whichever is set, as in Connect; `required` refuses the connector on any other worker, `requested` is at-least-once there",
    },
    HostKey {
        name: TRANSACTION_BOUNDARY,
        type_: KeyType::String,
        default: KeyDefault::Value("poll"),
        documentation: "with exactly-once: `poll` (one transaction per poll batch) or `interval` (per `transaction.boundary.interval.ms`)",
    },
    HostKey {
        name: TRANSACTION_BOUNDARY_INTERVAL_MS,
        type_: KeyType::Long,
        default: KeyDefault::Value("60000"),
        documentation: "with `transaction.boundary=interval`: how long a transaction stays open",
    },
    HostKey {
        name: TENANT,
        type_: KeyType::String,
        default: KeyDefault::Value("default"),
        documentation: "the tenant that owns the connector",
    },
];

/// The host key named `name`.
pub fn host_key(name: &str) -> Option<&'static HostKey> {
    HOST_KEYS.iter().find(|key| key.name == name)
}

/// The table's default of a key that has one value (a programming error otherwise, which
/// `every_default_parses` catches).
fn default_value(name: &str) -> &'static str {
    match host_key(name).map(|key| key.default) {
        Some(KeyDefault::Value(value)) => value,
        _ => panic!("host key {name} has no default value in HOST_KEYS"),
    }
}

/// One config key in Kafka Connect's words, as `sluice plugins --json` and the REST API
/// report both the host's keys and a plugin's `config-def`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ConfigKeyInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_value: Option<String>,
    pub required: bool,
    pub importance: String,
    pub documentation: String,
}

impl From<&HostKey> for ConfigKeyInfo {
    fn from(key: &HostKey) -> Self {
        ConfigKeyInfo {
            name: key.name.into(),
            type_name: key.type_.connect_name().into(),
            default_value: match key.default {
                KeyDefault::Value(value) => Some(value.into()),
                _ => None,
            },
            required: key.default == KeyDefault::Required,
            importance: if key.default == KeyDefault::Required { "HIGH" } else { "MEDIUM" }.into(),
            documentation: key.documentation.into(),
        }
    }
}

/// The README's table of host keys (checked by a test, so the two cannot drift).
pub fn markdown_table() -> String {
    let mut table = String::from("| key | default | meaning |\n|---|---|---|\n");
    for key in HOST_KEYS {
        let default = match key.default {
            KeyDefault::Required => "required".to_string(),
            KeyDefault::Value(value) => format!("`{value}`"),
            KeyDefault::Unset(words) => words.to_string(),
        };
        table.push_str(&format!("| `{}` | {default} | {} |\n", key.name, key.documentation));
    }
    table
}

/// Kafka Connect's error handling for source records (`errors.*` keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorHandling {
    /// `errors.tolerance=all`: skip a refused record instead of failing the task.
    pub tolerate_all: bool,
    /// `errors.deadletterqueue.topic.name`.
    pub dead_letter_topic: Option<String>,
    /// `errors.log.enable`: log each refused record.
    pub log: bool,
    /// The most a dead-letter copy may take (key, value and headers), below
    /// `sandbox.record.max.bytes` where Kafka takes less: a copy Kafka refused would be lost.
    pub dead_letter_max_bytes: Option<u64>,
}

/// librdkafka's default `message.max.bytes`.
const KAFKA_MESSAGE_MAX_BYTES: u64 = 1_000_000;

/// What a Kafka record's framing takes beside its key, value and headers, kept free in a
/// dead-letter copy cut to fit (a record batch's header and a record's own fields).
const KAFKA_RECORD_FRAMING: u64 = 1024;

/// Where a connector's records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationKind {
    /// The embedded log in the data directory; exactly-once.
    Local,
    /// JSON lines on standard output; at-least-once.
    Stdout,
    /// Kafka topics on the worker's `[kafka]` cluster.
    Kafka,
}

/// When a task's transaction commits (KIP-618 `transaction.boundary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionBoundary {
    Poll,
    Interval(Duration),
}

/// The keys of `destination=kafka`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaSettings {
    /// Partitions and replication of topics created on first use (`-1`: the broker's).
    pub topic_partitions: i32,
    pub topic_replication: i16,
    /// `exactly.once.support=required`: transactions, and refused on a worker without
    /// exactly-once source support (with it, every connector runs in transactions).
    pub exactly_once: bool,
    pub transaction_boundary: TransactionBoundary,
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

/// Per-call deadlines.
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
    /// A granted directory (canonical, as in `fs_read` or `fs_write`) and the name the
    /// config gave it, where the two differ (a path through a symbolic link): the plugin
    /// reads paths in its config as typed, so the grant is also mounted under that name.
    pub fs_aliases: Vec<(PathBuf, String)>,
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

impl SandboxSettings {
    /// The memory at which a task is recycled (`sandbox.memory.recycle.percent` of the
    /// cap), or `None` when recycling is off.
    pub fn recycle_bytes(&self) -> Option<u64> {
        (self.memory_recycle_percent != 0).then(|| self.memory_max_bytes / 100 * u64::from(self.memory_recycle_percent))
    }
}

impl Default for SandboxSettings {
    /// The sandbox of a config that sets no key (also used to inspect plugins at load).
    fn default() -> Self {
        ConnectorSettings::parse(&|_| None).expect("the defaults in HOST_KEYS parse").sandbox
    }
}

/// The keys of a connector config that the host reads, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorSettings {
    pub tasks_max: u32,
    /// `tasks.max.enforce`: more task configs than `tasks.max` fail the connector.
    pub tasks_max_enforce: bool,
    pub destination: DestinationKind,
    pub monitor_interval: Duration,
    pub poll_idle_max: Duration,
    pub offset_flush_interval: Duration,
    pub restart: RestartPolicy,
    pub sandbox: SandboxSettings,
    pub errors: ErrorHandling,
    pub kafka: KafkaSettings,
    /// `transforms` and `predicates` (read by [`super::ConnectorConfig::settings`]: their
    /// keys are named by alias).
    pub transforms: super::Transforms,
}

/// `(key, reason)`: the caller knows where the config came from.
pub type KeyProblem = (&'static str, String);

impl ConnectorSettings {
    /// Parses the host's keys from `get`, with the defaults of [`HOST_KEYS`].
    pub fn parse<'a>(get: &dyn Fn(&str) -> Option<&'a str>) -> Result<Self, KeyProblem> {
        let text = |key: &'static str| get(key).unwrap_or_else(|| default_value(key));
        let positive = |key: &'static str| -> Result<u64, KeyProblem> {
            let value = text(key);
            match value.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err((key, format!("'{value}' is not a positive integer"))),
            }
        };
        let optional_positive = |key: &'static str| -> Result<Option<u64>, KeyProblem> {
            match get(key) {
                None => Ok(None),
                Some(_) => positive(key).map(Some),
            }
        };
        let millis = |key: &'static str| positive(key).map(Duration::from_millis);
        let boolean = |key: &'static str| parse_bool(text(key)).map_err(|reason| (key, reason));
        let tasks_max = positive(TASKS_MAX)?;
        // Connect's INT: a count past it is a typo, and would only be capped by the plugin.
        let tasks_max = u32::try_from(tasks_max)
            .ok()
            .filter(|&tasks| tasks <= i32::MAX as u32)
            .ok_or_else(|| (TASKS_MAX, format!("{tasks_max} is too large (at most {})", i32::MAX)))?;
        let tasks_max_enforce = boolean(TASKS_MAX_ENFORCE)?;
        let destination = match text(DESTINATION) {
            "local" => DestinationKind::Local,
            "stdout" => DestinationKind::Stdout,
            "kafka" => DestinationKind::Kafka,
            other => {
                return Err((DESTINATION, format!("unknown destination '{other}' (expected local, stdout or kafka)")));
            }
        };
        let restart_enabled = match text(RESTART_POLICY) {
            "never" => false,
            "on-failure" => true,
            other => {
                return Err((RESTART_POLICY, format!("unknown policy '{other}' (expected never or on-failure)")));
            }
        };
        let timeouts = match optional_positive(SANDBOX_CALL_TIMEOUT_MS)? {
            None => CallTimeouts { lifecycle: LIFECYCLE_CALL_TIMEOUT, hot: HOT_CALL_TIMEOUT },
            Some(ms) => CallTimeouts { lifecycle: Duration::from_millis(ms), hot: Duration::from_millis(ms) },
        };
        let log_lines_per_second = u32::try_from(positive(SANDBOX_LOG_LINES_PER_SECOND)?)
            .map_err(|_| (SANDBOX_LOG_LINES_PER_SECOND, "too large".to_string()))?;
        let memory_recycle_percent = text(SANDBOX_MEMORY_RECYCLE_PERCENT)
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|p| *p <= 100)
            .ok_or((SANDBOX_MEMORY_RECYCLE_PERCENT, "must be a whole number from 0 to 100".to_string()))?;
        let fs_read = directories(SANDBOX_FS_READ, get(SANDBOX_FS_READ))?;
        let fs_write = directories(SANDBOX_FS_WRITE, get(SANDBOX_FS_WRITE))?;
        let sandbox = SandboxSettings {
            fs_read: fs_read.iter().map(|(dir, _)| dir.clone()).collect(),
            fs_write: fs_write.iter().map(|(dir, _)| dir.clone()).collect(),
            fs_aliases: fs_read.into_iter().chain(fs_write).filter_map(|(dir, typed)| Some((dir, typed?))).collect(),
            memory_max_bytes: positive(SANDBOX_MEMORY_MAX_BYTES)?,
            timeouts,
            record_max_bytes: positive(SANDBOX_RECORD_MAX_BYTES)?,
            fuel_per_call: optional_positive(SANDBOX_FUEL_PER_CALL)?,
            batch_max_bytes: positive(SANDBOX_BATCH_MAX_BYTES)?,
            log_lines_per_second,
            memory_recycle_percent,
        };
        // One record larger than a whole batch could never be polled: the task would fail
        // on it instead of the file or source that holds it.
        if sandbox.record_max_bytes > sandbox.batch_max_bytes {
            return Err((
                SANDBOX_RECORD_MAX_BYTES,
                format!(
                    "{} is larger than sandbox.batch.max.bytes ({}), the most one poll may return: raise that too",
                    sandbox.record_max_bytes, sandbox.batch_max_bytes
                ),
            ));
        }
        let tolerate_all = match text(ERRORS_TOLERANCE) {
            "none" => false,
            "all" => true,
            other => return Err((ERRORS_TOLERANCE, format!("unknown tolerance '{other}' (expected none or all)"))),
        };
        let dead_letter_topic = get(ERRORS_DEAD_LETTER_TOPIC).map(str::trim).filter(|t| !t.is_empty());
        if let Some(topic) = dead_letter_topic
            && let Err(reason) = super::check_topic_name(topic)
        {
            return Err((ERRORS_DEAD_LETTER_TOPIC, reason));
        }
        let log = boolean(ERRORS_LOG_ENABLE)?;
        // With destination=kafka a dead-letter copy is cut to what the producer sends too
        // (its override, else librdkafka's default; a broker's default, 1 MiB plus a little,
        // is above it).
        let dead_letter_max_bytes = (destination == DestinationKind::Kafka).then(|| {
            let producer_max = get(&format!("{PRODUCER_OVERRIDE_PREFIX}message.max.bytes"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(KAFKA_MESSAGE_MAX_BYTES);
            producer_max.saturating_sub(KAFKA_RECORD_FRAMING)
        });
        let errors = ErrorHandling {
            tolerate_all,
            dead_letter_topic: dead_letter_topic.map(String::from),
            log,
            dead_letter_max_bytes,
        };
        let broker_default_or_positive = |key: &'static str| -> Result<i32, KeyProblem> {
            let value = text(key);
            value
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|n| *n > 0 || *n == -1)
                .ok_or((key, format!("'{value}' is not a positive number or -1 (the broker's default)")))
        };
        let topic_replication = broker_default_or_positive(TOPIC_CREATION_REPLICATION)?;
        // Case does not matter, as in Connect (CaseInsensitiveValidString).
        let exactly_once = match text(EXACTLY_ONCE_SUPPORT).trim().to_ascii_lowercase().as_str() {
            "requested" => false,
            "required" => true,
            _ => {
                let typed = text(EXACTLY_ONCE_SUPPORT);
                return Err((EXACTLY_ONCE_SUPPORT, format!("'{typed}' is not requested or required")));
            }
        };
        let transaction_boundary = match text(TRANSACTION_BOUNDARY).trim().to_ascii_lowercase().as_str() {
            "poll" => TransactionBoundary::Poll,
            "interval" => TransactionBoundary::Interval(millis(TRANSACTION_BOUNDARY_INTERVAL_MS)?),
            "connector" => {
                return Err((
                    TRANSACTION_BOUNDARY,
                    "'connector' (transactions the connector defines) is not supported: the WIT world has no transaction context; use poll or interval".into(),
                ));
            }
            _ => {
                let typed = text(TRANSACTION_BOUNDARY);
                return Err((TRANSACTION_BOUNDARY, format!("'{typed}' is not poll or interval")));
            }
        };
        let kafka = KafkaSettings {
            topic_partitions: broker_default_or_positive(TOPIC_CREATION_PARTITIONS)?,
            topic_replication: i16::try_from(topic_replication)
                .map_err(|_| (TOPIC_CREATION_REPLICATION, format!("{topic_replication} is too large")))?,
            exactly_once,
            transaction_boundary,
        };
        let (initial_backoff, max_backoff) = (millis(RESTART_BACKOFF_INITIAL_MS)?, millis(RESTART_BACKOFF_MAX_MS)?);
        if initial_backoff < RESTART_BACKOFF_FLOOR {
            return Err((
                RESTART_BACKOFF_INITIAL_MS,
                format!(
                    "{} is below {} ms: each restart builds a new sandbox and logs why, and a plugin that fails at once would restart in a storm",
                    initial_backoff.as_millis(),
                    RESTART_BACKOFF_FLOOR.as_millis()
                ),
            ));
        }
        if max_backoff < initial_backoff {
            return Err((
                RESTART_BACKOFF_MAX_MS,
                format!(
                    "{} is below restart.backoff.initial.ms ({}): the longest delay cannot be shorter than the first",
                    max_backoff.as_millis(),
                    initial_backoff.as_millis()
                ),
            ));
        }
        Ok(ConnectorSettings {
            tasks_max,
            tasks_max_enforce,
            destination,
            monitor_interval: millis(MONITOR_INTERVAL_MS)?,
            poll_idle_max: millis(POLL_IDLE_MAX_MS)?,
            offset_flush_interval: millis(OFFSET_FLUSH_INTERVAL_MS)?,
            restart: RestartPolicy { enabled: restart_enabled, initial_backoff, max_backoff },
            sandbox,
            errors,
            kafka,
            transforms: super::Transforms::default(),
        })
    }
}

/// `true` or `false`, in any case, as Kafka Connect's boolean keys take them.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(format!("'{other}' is not true or false")),
    }
}

/// A comma-separated list of existing directories, made canonical, each with its name as
/// typed (made absolute, not resolved) where that is a path through a symbolic link. One
/// resolution per directory: the name is only ever an alias of the directory checked.
fn directories(key: &'static str, list: Option<&str>) -> Result<Vec<(PathBuf, Option<String>)>, KeyProblem> {
    let Some(list) = list else { return Ok(Vec::new()) };
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|dir| {
            let path =
                std::fs::canonicalize(dir).map_err(|e| (key, format!("directory '{dir}' cannot be granted: {e}")))?;
            if !path.is_dir() {
                return Err((key, format!("'{dir}' is not a directory")));
            }
            let typed = std::path::absolute(dir).ok().filter(|typed| {
                !typed.components().any(|c| matches!(c, std::path::Component::ParentDir | std::path::Component::CurDir))
            });
            let typed = typed.map(|typed| typed.components().collect::<PathBuf>()).filter(|typed| *typed != path);
            Ok((path, typed.map(|typed| typed.to_string_lossy().into_owned())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_through_a_link_keeps_the_name_it_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = real.with_file_name("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let list = format!("{}/, {}", link.display(), real.display());
        let settings = ConnectorSettings::parse(&|key| (key == SANDBOX_FS_READ).then_some(list.as_str())).unwrap();
        assert_eq!(settings.sandbox.fs_read, [real.clone(), real.clone()]);
        assert_eq!(settings.sandbox.fs_aliases, [(real, link.display().to_string())]);
    }

    #[test]
    fn every_default_parses_and_names_are_unique() {
        let settings = ConnectorSettings::parse(&|_| None).unwrap();
        assert_eq!(settings.tasks_max, 1);
        assert_eq!(settings.sandbox.memory_max_bytes, 64 << 20);
        assert_eq!(settings.sandbox.record_max_bytes, 1 << 20);
        assert_eq!(settings.sandbox.batch_max_bytes, 16 << 20);
        assert_eq!(settings.sandbox.timeouts.hot, HOT_CALL_TIMEOUT);
        let mut names: Vec<&str> = HOST_KEYS.iter().map(|k| k.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), HOST_KEYS.len());
        for key in HOST_KEYS {
            if let KeyDefault::Value(value) = key.default {
                let parsed = ConnectorSettings::parse(&|k| (k == key.name).then_some(value));
                assert!(parsed.is_ok(), "{}: {parsed:?}", key.name);
            }
        }
    }

    #[test]
    fn a_dead_letter_copy_for_kafka_is_cut_to_what_the_producer_sends() {
        let parse = |pairs: &'static [(&'static str, &'static str)]| {
            ConnectorSettings::parse(&move |key| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)).unwrap().errors
        };
        assert_eq!(parse(&[]).dead_letter_max_bytes, None, "local: the sandbox's cap only");
        assert_eq!(parse(&[(DESTINATION, "kafka")]).dead_letter_max_bytes, Some(1_000_000 - 1024));
        let raised = parse(&[(DESTINATION, "kafka"), ("producer.override.message.max.bytes", "5000000")]);
        assert_eq!(raised.dead_letter_max_bytes, Some(5_000_000 - 1024));
    }

    #[test]
    fn a_record_larger_than_a_batch_is_refused_naming_both_keys() {
        let get = |key: &str| (key == SANDBOX_RECORD_MAX_BYTES).then_some("33554432");
        let (key, reason) = ConnectorSettings::parse(&get).unwrap_err();
        assert_eq!(key, SANDBOX_RECORD_MAX_BYTES);
        assert!(reason.contains("sandbox.batch.max.bytes (16777216)"), "{reason}");
        let both = |key: &str| match key {
            SANDBOX_RECORD_MAX_BYTES | SANDBOX_BATCH_MAX_BYTES => Some("33554432"),
            _ => None,
        };
        assert!(ConnectorSettings::parse(&both).is_ok());
    }

    #[test]
    fn a_dead_letter_topic_kafka_would_refuse_is_refused_here() {
        for (name, reason) in [("dl q", "' '"), ("..", "'..'"), (&"q".repeat(250) as &str, "1 to 249")] {
            let get = |key: &str| (key == ERRORS_DEAD_LETTER_TOPIC).then_some(name);
            let (key, said) = ConnectorSettings::parse(&get).unwrap_err();
            assert_eq!(key, ERRORS_DEAD_LETTER_TOPIC);
            assert!(said.contains(reason), "{name}: {said}");
        }
    }

    #[test]
    fn the_readme_key_table_is_the_host_key_table() {
        let readme = include_str!("../../../README.md");
        let table = markdown_table();
        assert!(
            readme.contains(&table),
            "README.md's table of host keys differs from HOST_KEYS; it should read:\n\n{table}"
        );
    }

    #[test]
    fn a_longest_restart_delay_below_the_first_is_refused() {
        let get = |key: &str| match key {
            RESTART_BACKOFF_INITIAL_MS => Some("5000"),
            RESTART_BACKOFF_MAX_MS => Some("10"),
            _ => None,
        };
        let (key, reason) = ConnectorSettings::parse(&get).unwrap_err();
        assert_eq!(key, RESTART_BACKOFF_MAX_MS);
        assert!(reason.contains("below restart.backoff.initial.ms (5000)"), "{reason}");
    }

    #[test]
    fn a_restart_storm_and_a_tasks_max_past_connects_int_are_refused() {
        let parse = |key: &'static str, value: &'static str| {
            ConnectorSettings::parse(&move |k: &str| (k == key).then_some(value)).map(|_| ())
        };
        let (key, reason) = parse(RESTART_BACKOFF_INITIAL_MS, "1").unwrap_err();
        assert_eq!(key, RESTART_BACKOFF_INITIAL_MS);
        assert!(reason.starts_with("1 is below 100 ms"), "{reason}");
        assert!(parse(RESTART_BACKOFF_INITIAL_MS, "100").is_ok());
        assert!(parse(TASKS_MAX, "2147483647").is_ok());
        let (key, reason) = parse(TASKS_MAX, "4294967295").unwrap_err();
        assert_eq!((key, reason.as_str()), (TASKS_MAX, "4294967295 is too large (at most 2147483647)"));
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
