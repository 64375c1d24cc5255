//! `[storage] kind = "kafka"`: offsets, connector configs and statuses in three compacted
//! topics, as Kafka Connect's distributed mode keeps them (`offset.storage.topic`,
//! `config.storage.topic`, `status.storage.topic`).
//!
//! Each topic is read to its end when the worker opens, before any connector starts, into
//! an in-memory view (key -> latest value, a tombstone removes); a write is produced, and
//! the view changes only once the broker acknowledged it, so what the worker reads is
//! durable. One worker writes a group's topics at a time (scale-out is a later step).
//!
//! Record formats are Connect's, so its tools read them and a Connect user can migrate:
//! - offsets: key `["<connector>",{partition}]` (compact JSON), value the offset JSON,
//!   `null` forgets; partitioned by murmur2 of the key, as Java's producer does. Keys are
//!   written in one canonical form (object keys sorted) and matched by parsed JSON, so keys
//!   Connect wrote with another key order are found too.
//! - configs: `connector-<name>` `{"properties":{...}}`, `target-state-<name>`
//!   `{"state":..,"state.v2":..}` (KIP-875), `task-<name>-<n>` `{"properties":{...}}` and
//!   `commit-<name>` `{"tasks":N}`.
//! - statuses: `status-connector-<name>` with Connect's fields (`state`, `trace`,
//!   `worker_id`, `generation`) and Sluice's task statuses under `tasks`; KIP-558's active
//!   topics as `status-topic-<topic>:connector-<name>`
//!   `{"topic":{"name","connector","task","discoverTimestamp"}}`.
//!
//! A connector of a declared tenant is named `<tenant>/<connector>` in every key: a
//! connector name has no `/`, so no tenant's connector can forge another's key, and the
//! `default` tenant's keys are exactly Connect's.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaErrorCode;
use serde_json::{Value, json};

use super::{
    ActiveTopic, ConfigStore, ConnectorStatus, Namespace, OffsetStore, StatusStore, StoredConnector, TargetState,
};
use crate::config::{DEFAULT_TENANT, InternalTopic, KafkaConfig};

/// How long the check of the state topics' cleanup.policy waits: a broker that does not
/// answer DescribeConfigs (some Kafka-protocol brokers) is not checked, as in Connect.
const POLICY_CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long start-up waits for the cluster (metadata, topic creation, reading to the end).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one metadata request of start-up waits before the worker says it is still waiting.
const STARTUP_ATTEMPT: Duration = Duration::from_secs(5);
/// How long a write waits for its acknowledgement (the store producer's message.timeout.ms).
const WRITE_TIMEOUT_MS: &str = "60000";

/// The context of every Kafka client Sluice makes: librdkafka's own log lines go to the
/// `librdkafka` tracing target at debug level (a broker that is away is retried every
/// second by every client, and the tasks' statuses already say so), its serious errors at
/// warn; a partition's end is not an error. A destination's clients also note their latest
/// error in its [`ClientTrouble`], so a task waiting on the cluster can say why.
#[derive(Clone, Default)]
pub struct KafkaLog {
    trouble: Option<Arc<ClientTrouble>>,
}

impl KafkaLog {
    /// A context whose clients note their errors in `trouble`.
    pub fn noting(trouble: Arc<ClientTrouble>) -> KafkaLog {
        KafkaLog { trouble: Some(trouble) }
    }
}

impl ClientContext for KafkaLog {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical => {
                tracing::warn!(target: "librdkafka", "{facility}: {message}")
            }
            _ => tracing::debug!(target: "librdkafka", "{facility}: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        if code == Some(RDKafkaErrorCode::PartitionEOF) {
            return;
        }
        if let Some(trouble) = &self.trouble {
            trouble.note(code == Some(RDKafkaErrorCode::AllBrokersDown), reason);
        }
        match code {
            Some(
                RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::MessageTimedOut,
            ) => tracing::debug!(target: "librdkafka", "{error}: {reason}"),
            _ => tracing::warn!(target: "librdkafka", "{error}: {reason}"),
        }
    }
}

/// The latest error some Kafka clients reported (a broker refusing connections, a name
/// that does not resolve, a failed authentication) and when. A task whose batch waits on
/// the cluster only knew how long it had waited; librdkafka says why only to its error
/// callback.
#[derive(Default)]
pub struct ClientTrouble(Mutex<Option<(Instant, String)>>);

impl ClientTrouble {
    /// `summary`: librdkafka's "N/N brokers are down", which follows each broker's own
    /// error and says less, so it does not replace one of those.
    fn note(&self, summary: bool, reason: &str) {
        let mut latest = self.0.lock().unwrap();
        let fresh = latest.as_ref().is_some_and(|(at, _)| at.elapsed() < TROUBLE_KEPT_OVER_SUMMARY);
        if !(summary && fresh) {
            *latest = Some((Instant::now(), reason.to_string()));
        }
    }

    /// The latest error, if one came within `within`: `<reason> (<n> s ago)`.
    pub fn recent(&self, within: Duration) -> Option<String> {
        let latest = self.0.lock().unwrap();
        let (at, reason) = latest.as_ref().filter(|(at, _)| at.elapsed() <= within)?;
        Some(format!("{reason} ({} s ago)", at.elapsed().as_secs()))
    }
}

/// How long a broker's own error is kept over a later "all brokers are down".
const TROUBLE_KEPT_OVER_SUMMARY: Duration = Duration::from_secs(30);

impl ConsumerContext for KafkaLog {}

/// The client settings of `[kafka]`, plus `extra`.
pub fn client_config(kafka: &KafkaConfig, extra: &[(&str, &str)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in &kafka.client {
        config.set(key, value);
    }
    for (key, value) in extra {
        config.set(*key, *value);
    }
    config
}

/// A connector's name in shared Kafka keys and topics: `<tenant>/<name>` for a declared
/// tenant, the bare name for `default`.
pub fn qualified_name(ns: &Namespace) -> String {
    if ns.tenant == DEFAULT_TENANT { ns.connector.clone() } else { format!("{}/{}", ns.tenant, ns.connector) }
}

fn namespace_of(qualified: &str) -> Namespace {
    match qualified.split_once('/') {
        Some((tenant, name)) => Namespace::new(tenant, name),
        None => Namespace::new(DEFAULT_TENANT, qualified),
    }
}

/// The topics of the cluster, from a metadata request that creates nothing.
pub fn existing_topics(admin: &AdminClient<KafkaLog>, timeout: Duration) -> anyhow::Result<Vec<String>> {
    let metadata = admin
        .inner()
        .fetch_metadata(None, timeout)
        .context("cannot reach the Kafka cluster ([kafka] bootstrap.servers)")?;
    Ok(metadata.topics().iter().map(|t| t.name().to_string()).collect())
}

/// The topics of the cluster once it answers, asking again every few seconds for up to
/// `STARTUP_TIMEOUT`: a worker started beside its brokers waits for them, and one pointed
/// at the wrong address says so while it waits instead of staying silent for a minute.
fn wait_for_cluster(admin: &AdminClient<KafkaLog>, bootstrap: &str) -> anyhow::Result<Vec<String>> {
    let started = Instant::now();
    loop {
        let attempt_started = Instant::now();
        let attempt = STARTUP_ATTEMPT.min(STARTUP_TIMEOUT.saturating_sub(started.elapsed()));
        match existing_topics(admin, attempt) {
            Ok(topics) => return Ok(topics),
            Err(e) if started.elapsed() + STARTUP_ATTEMPT / 2 < STARTUP_TIMEOUT => {
                // An error that came back at once (a name that does not resolve) waits out
                // the attempt, or this would ask and warn in a tight loop.
                std::thread::sleep(attempt.saturating_sub(attempt_started.elapsed()));
                tracing::warn!(
                    "waiting for the Kafka cluster at {bootstrap}: {e:#}; still trying (for up to {}s more)",
                    STARTUP_TIMEOUT.saturating_sub(started.elapsed()).as_secs()
                );
            }
            Err(e) => {
                return Err(e.context(format!("no answer in {}s", STARTUP_TIMEOUT.as_secs())));
            }
        }
    }
}

/// Errors that pass: a broker away or busy for a while, a leader or coordinator moving. A
/// call that met one may simply be made again (librdkafka fetches again by itself).
pub fn is_passing(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        code,
        BrokerTransportFailure
            | AllBrokersDown
            | MessageTimedOut
            | RequestTimedOut
            | OperationTimedOut
            | NotEnoughReplicas
            | NotEnoughReplicasAfterAppend
            | LeaderNotAvailable
            | NotLeaderForPartition
            | NetworkException
            | NotCoordinator
            | CoordinatorNotAvailable
            | CoordinatorLoadInProgress
            | QueueFull
            | UnknownTopicOrPartition
    )
}

/// An admin client that never creates a topic by asking about it.
pub fn admin_client(kafka: &KafkaConfig, context: KafkaLog) -> anyhow::Result<AdminClient<KafkaLog>> {
    client_config(kafka, &[("allow.auto.create.topics", "false")])
        .create_with_context(context)
        .context("[kafka]: cannot make an admin client")
}

/// Makes the topics that are missing (compacted), and refuses one that exists without
/// `cleanup.policy=compact` (only): retention or deletion would lose offsets and configs.
/// As in Connect, a policy the cluster does not let us read is logged, not refused.
pub fn ensure_compacted_topics(
    admin: &AdminClient<KafkaLog>,
    bootstrap: &str,
    topics: &[(&InternalTopic, &str)],
) -> anyhow::Result<()> {
    let existing = wait_for_cluster(admin, bootstrap)?;
    let missing: Vec<&(&InternalTopic, &str)> = topics.iter().filter(|(t, _)| !existing.contains(&t.name)).collect();
    if !missing.is_empty() {
        let new: Vec<NewTopic> = missing
            .iter()
            .map(|(topic, _)| {
                let replication = TopicReplication::Fixed(i32::from(topic.replication_factor));
                NewTopic::new(&topic.name, topic.partitions, replication).set("cleanup.policy", "compact")
            })
            .collect();
        let options = AdminOptions::new().request_timeout(Some(STARTUP_TIMEOUT));
        let created = block_on(admin.create_topics(&new, &options)).context("cannot create Sluice's state topics")?;
        for result in created {
            let (topic, key) = match &result {
                Ok(name) | Err((name, _)) => *topics.iter().find(|(t, _)| &t.name == name).expect("asked for"),
            };
            match result {
                Ok(_) => tracing::info!("created the compacted topic {} ({key})", topic.name),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => anyhow::bail!(
                    "cannot create the topic {name} ({key}, {} partitions, replication factor {}): {code}",
                    topic.partitions,
                    topic.replication_factor
                ),
            }
        }
    }
    let specifiers: Vec<ResourceSpecifier> = topics.iter().map(|(t, _)| ResourceSpecifier::Topic(&t.name)).collect();
    let options = AdminOptions::new().request_timeout(Some(POLICY_CHECK_TIMEOUT));
    let described = match block_on(admin.describe_configs(&specifiers, &options)) {
        Ok(described) => described,
        Err(e) => {
            tracing::info!("cannot read the cleanup.policy of Sluice's state topics: {e}; not checked");
            return Ok(());
        }
    };
    for ((topic, key), resource) in topics.iter().zip(described) {
        let resource = match resource {
            Ok(resource) => resource,
            Err(e) => {
                tracing::info!("cannot read the cleanup.policy of the topic {} ({key}): {e}; not checked", topic.name);
                continue;
            }
        };
        let policy = resource.get("cleanup.policy").and_then(|entry| entry.value.clone()).unwrap_or_default();
        if policy.split(',').map(str::trim).collect::<Vec<_>>() != ["compact"] {
            let policy = match policy.trim() {
                "" => "no cleanup.policy the broker reports (Kafka's default is delete)".to_string(),
                policy => format!("cleanup.policy={policy}"),
            };
            anyhow::bail!(
                "the topic {} ({key}) has {policy}, but Sluice keeps {} there and needs cleanup.policy=compact (only), or retention would delete them: set cleanup.policy=compact on the topic, or set {key} to another topic",
                topic.name,
                purpose(key)
            );
        }
    }
    Ok(())
}

fn purpose(key: &str) -> &'static str {
    match key {
        "offset.storage.topic" => "source connector offsets",
        "config.storage.topic" => "connector configurations",
        _ => "connector and task statuses",
    }
}

/// Waits for a future from a synchronous store call (rdkafka's futures complete on its own
/// threads, so no runtime is needed).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    waiting_on_cluster(|| futures_executor::block_on(future))
}

/// Runs a store call that may wait on the cluster (up to a producer's `message.timeout.ms`
/// when it is away). On a runtime worker thread the thread's other tasks go to another
/// worker first: the task last woken there (a REST status read, a task's poll) otherwise
/// waited in the thread's own slot, which no other worker takes, until the call ended
/// (a status read took 18 s while a config change waited for an absent broker).
fn waiting_on_cluster<T>(call: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(call),
        _ => call(),
    }
}

/// A record of a compacted topic: key, and value (`None`: a tombstone).
type Entry = (Vec<u8>, Option<Vec<u8>>);

/// An idempotent producer that several writers share, made again when librdkafka stops it
/// for good: an idempotent producer's fatal error (a sequence out of step with the
/// broker, an unknown producer id it cannot retry past) fails every send after it at
/// once, until the process ends. The first writer to find it so puts a new producer in
/// its place; the others then use that one.
pub struct SharedProducer {
    config: ClientConfig,
    context: KafkaLog,
    current: Mutex<FutureProducer<KafkaLog>>,
    /// What making one fails with (`<this>: <librdkafka's reason>`).
    cannot_make: &'static str,
}

impl SharedProducer {
    pub fn new(config: ClientConfig, context: KafkaLog, cannot_make: &'static str) -> anyhow::Result<SharedProducer> {
        let producer = Self::make(&config, &context, cannot_make)?;
        Ok(SharedProducer { config, context, current: Mutex::new(producer), cannot_make })
    }

    fn make(
        config: &ClientConfig,
        context: &KafkaLog,
        cannot_make: &'static str,
    ) -> anyhow::Result<FutureProducer<KafkaLog>> {
        config.create_with_context::<KafkaLog, FutureProducer<KafkaLog>>(context.clone()).context(cannot_make)
    }

    pub fn get(&self) -> FutureProducer<KafkaLog> {
        self.current.lock().unwrap().clone()
    }

    /// When `used` (the producer a write was just refused by) has stopped for good: its
    /// fatal error, with a new producer in its place unless another writer put one already.
    pub fn replace_if_fatal(&self, used: &FutureProducer<KafkaLog>) -> anyhow::Result<Option<String>> {
        let Some((_, fatal)) = used.client().fatal_error() else { return Ok(None) };
        let mut current = self.current.lock().unwrap();
        if current.client().native_ptr() == used.client().native_ptr() {
            tracing::warn!("a Kafka producer stopped for good ({fatal}); a new one takes its place");
            *current = Self::make(&self.config, &self.context, self.cannot_make)?;
        }
        Ok(Some(fatal))
    }
}

/// One compacted topic: its latest value per key, and the producer that writes it.
struct TopicView {
    topic: String,
    producer: Arc<SharedProducer>,
}

impl TopicView {
    /// Reads `topic` from the beginning to its current end: the latest value of each key
    /// (`None`: a tombstone), in the order written.
    fn read_to_end(kafka: &KafkaConfig, topic: &str) -> anyhow::Result<Vec<Entry>> {
        waiting_on_cluster(|| Self::read_to_end_waiting(kafka, topic))
    }

    fn read_to_end_waiting(kafka: &KafkaConfig, topic: &str) -> anyhow::Result<Vec<Entry>> {
        let consumer: BaseConsumer<KafkaLog> = client_config(
            kafka,
            &[
                // assign() needs a group id; nothing is committed to it.
                ("group.id", "sluice-storage-reader"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("isolation.level", "read_committed"),
                // A position that falls out of the log while it is read (its start moved on:
                // compaction or retention removed the first segment meanwhile) goes back
                // to the start, as Connect's KafkaBasedLog does; librdkafka's default
                // (`latest`) skipped to the end, and the worker saw no offsets or configs
                // at all (each connector then started over from scratch).
                ("auto.offset.reset", "earliest"),
                // The end of each partition is an event (at the last stable offset, so
                // transaction markers at the end do not leave the reader waiting).
                ("enable.partition.eof", "true"),
            ],
        )
        .create_with_context(KafkaLog::default())
        .context("[kafka]: cannot make a consumer")?;
        let metadata = consumer
            .fetch_metadata(Some(topic), STARTUP_TIMEOUT)
            .with_context(|| format!("cannot read the metadata of the topic {topic}"))?;
        let mut pending: HashSet<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        anyhow::ensure!(!pending.is_empty(), "the topic {topic} has no partitions");
        // Read up to each partition's end as it is now, as Connect's KafkaBasedLog does: a
        // topic that a running worker keeps writing (its offsets, as `sluice offsets`
        // reads them beside a `sluice run`) has no end to wait for. Under read_committed
        // the end asked for is the last stable offset.
        let mut ends: HashMap<i32, i64> = HashMap::new();
        for partition in &pending {
            let (low, high) = consumer
                .fetch_watermarks(topic, *partition, STARTUP_TIMEOUT)
                .with_context(|| format!("cannot read the end offsets of the topic {topic}"))?;
            if high > low {
                ends.insert(*partition, high);
            }
        }
        pending.retain(|partition| ends.contains_key(partition));
        let mut assignment = TopicPartitionList::new();
        for partition in &pending {
            assignment.add_partition_offset(topic, *partition, Offset::Beginning)?;
        }
        consumer.assign(&assignment)?;
        let mut entries = Vec::new();
        let started = Instant::now();
        while !pending.is_empty() {
            anyhow::ensure!(
                started.elapsed() < STARTUP_TIMEOUT,
                "reading the topic {topic} to its end took over {STARTUP_TIMEOUT:?}"
            );
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(partition))) => {
                    pending.remove(&partition);
                }
                // A fetch that met a passing error (a request timed out, a broker away for
                // a moment) is made again by librdkafka after a backoff; STARTUP_TIMEOUT
                // bounds the whole read. Before, one such error failed the worker's start.
                Some(Err(KafkaError::MessageConsumption(code))) if is_passing(code) => {
                    tracing::debug!("reading the topic {topic}: {code}; librdkafka fetches again");
                }
                Some(Err(e)) => return Err(e).with_context(|| format!("cannot read the topic {topic}")),
                Some(Ok(message)) => {
                    if let Some(key) = message.key() {
                        entries.push((key.to_vec(), message.payload().map(<[u8]>::to_vec)));
                    }
                }
            }
            // The position passes transaction markers too, which are never delivered.
            if let Ok(positions) = consumer.position() {
                for element in positions.elements() {
                    if let Offset::Offset(next) = element.offset()
                        && ends.get(&element.partition()).is_some_and(|end| next >= *end)
                    {
                        pending.remove(&element.partition());
                    }
                }
            }
        }
        Ok(entries)
    }

    /// Sends one (key, value) without waiting for its acknowledgement.
    fn send(&self, key: &[u8], value: Option<&[u8]>) -> anyhow::Result<()> {
        self.again_if_fatal(|producer| {
            let mut record = FutureRecord::to(&self.topic).key(key);
            if let Some(value) = value {
                record = record.payload(value);
            }
            producer.send_result(record).map(drop).map_err(|(e, _)| e.to_string())
        })
    }

    /// Writes every (key, value) and waits until the broker acknowledged each.
    fn write(&self, entries: &[Entry]) -> anyhow::Result<()> {
        self.again_if_fatal(|producer| {
            let mut deliveries = Vec::with_capacity(entries.len());
            for (key, value) in entries {
                let mut record = FutureRecord::to(&self.topic).key(key);
                if let Some(value) = value {
                    record = record.payload(value);
                }
                deliveries.push(producer.send_result(record).map_err(|(e, _)| e.to_string())?);
            }
            // The producer's message.timeout.ms bounds each wait.
            for delivery in deliveries {
                match block_on(delivery) {
                    Ok(Ok(_)) => {}
                    Ok(Err((e, _))) => return Err(e.to_string()),
                    Err(_) => return Err("the producer went away".to_string()),
                }
            }
            Ok(())
        })
    }

    /// `attempt` with the current producer, and once more with a new one when it failed
    /// because that producer stopped for good (the keys' latest values are what count, so
    /// an entry the old one wrote is only written again).
    fn again_if_fatal(&self, attempt: impl Fn(&FutureProducer<KafkaLog>) -> Result<(), String>) -> anyhow::Result<()> {
        let producer = self.producer.get();
        let Err(error) = attempt(&producer) else { return Ok(()) };
        match self.producer.replace_if_fatal(&producer)? {
            None => anyhow::bail!("cannot write to the topic {}: {error}", self.topic),
            Some(fatal) => attempt(&self.producer.get()).map_err(|again| {
                anyhow::anyhow!(
                    "cannot write to the topic {}: {again} (a new producer, after the last stopped for good: {fatal})",
                    self.topic
                )
            }),
        }
    }
}

/// The newest instance in this worker to claim a `transactional.id`.
struct Claim {
    /// Raised once a newer instance claims the id.
    superseded: Arc<AtomicBool>,
    /// The commit it is waiting for: the partitions of the namespace whose offsets it holds.
    committing: Option<(Namespace, Vec<String>)>,
}

/// The three stores on one cluster.
pub struct KafkaBackend {
    /// The cluster, to read the offsets topic again (`reread_offsets`).
    kafka: KafkaConfig,
    offsets_topic_name: String,
    offsets_topic: TopicView,
    configs_topic: TopicView,
    statuses_topic: TopicView,
    offsets: Mutex<BTreeMap<(Namespace, String), String>>,
    /// Partitions whose offsets a transaction may or may not have committed (its commit's
    /// answer never came): read from the topic again before they are read here.
    doubtful: Mutex<BTreeSet<(Namespace, String)>>,
    /// Each `transactional.id`'s newest holder in this worker. A new instance that claims
    /// an id while the holder waits for a commit makes that commit's partitions doubtful
    /// (its start completes that commit or aborts it, and the old instance may never say
    /// which).
    transactional_ids: Mutex<HashMap<String, Claim>>,
    configs: Mutex<BTreeMap<Namespace, StoredConfig>>,
    statuses: Mutex<BTreeMap<Namespace, ConnectorStatus>>,
    active_topics: Mutex<BTreeMap<Namespace, BTreeMap<String, ActiveTopic>>>,
}

#[derive(Default, Clone)]
struct StoredConfig {
    properties: Option<Vec<(String, String)>>,
    target: Option<TargetState>,
    tasks: BTreeMap<u32, Vec<(String, String)>>,
    committed_tasks: Option<u32>,
}

impl KafkaBackend {
    /// Connects, makes or checks the three topics, and reads each to its end.
    pub fn open(kafka: &KafkaConfig) -> anyhow::Result<Arc<KafkaBackend>> {
        let admin = admin_client(kafka, KafkaLog::default())?;
        ensure_compacted_topics(
            &admin,
            kafka.bootstrap_servers(),
            &[
                (&kafka.offsets, "offset.storage.topic"),
                (&kafka.configs, "config.storage.topic"),
                (&kafka.statuses, "status.storage.topic"),
            ],
        )?;
        let producer = Arc::new(SharedProducer::new(
            client_config(
                kafka,
                &[
                    ("enable.idempotence", "true"),
                    ("acks", "all"),
                    ("partitioner", "murmur2_random"),
                    ("linger.ms", "0"),
                    ("message.timeout.ms", WRITE_TIMEOUT_MS),
                ],
            ),
            KafkaLog::default(),
            "[kafka]: cannot make a producer",
        )?);
        let view = |topic: &InternalTopic| TopicView { topic: topic.name.clone(), producer: producer.clone() };
        let backend = KafkaBackend {
            kafka: kafka.clone(),
            offsets_topic_name: kafka.offsets.name.clone(),
            offsets_topic: view(&kafka.offsets),
            configs_topic: view(&kafka.configs),
            statuses_topic: view(&kafka.statuses),
            offsets: Mutex::default(),
            doubtful: Mutex::default(),
            transactional_ids: Mutex::default(),
            configs: Mutex::default(),
            statuses: Mutex::default(),
            active_topics: Mutex::default(),
        };
        for (key, value) in TopicView::read_to_end(kafka, &kafka.offsets.name)? {
            backend.apply_offset(&key, value.as_deref());
        }
        for (key, value) in TopicView::read_to_end(kafka, &kafka.configs.name)? {
            backend.apply_config(&key, value.as_deref());
        }
        for (key, value) in TopicView::read_to_end(kafka, &kafka.statuses.name)? {
            backend.apply_status(&key, value.as_deref());
        }
        Ok(Arc::new(backend))
    }

    /// The offsets topic, for producers that write offsets in their own transactions.
    pub fn offsets_topic(&self) -> &str {
        &self.offsets_topic_name
    }

    /// Offsets a transaction that also held their records committed.
    /// (A later commit's offsets are certain: they end any doubt about an earlier one's.)
    pub fn remember_offsets(&self, ns: &Namespace, offsets: &[(String, String)]) {
        let mut stored = self.offsets.lock().unwrap();
        let mut doubtful = self.doubtful.lock().unwrap();
        for (partition, offset) in offsets {
            let key = (ns.clone(), partition.clone());
            doubtful.remove(&key);
            stored.insert(key, offset.clone());
        }
    }

    /// Claims `id` for a new task instance (or a retirement): the previous holder's flag is
    /// raised, so that it no longer initialises the id itself (recovering from an abort or
    /// an unanswered commit), which would fence the newer one.
    pub fn claim_transactional_id(&self, id: &str) -> Arc<AtomicBool> {
        let superseded = Arc::new(AtomicBool::new(false));
        let claim = Claim { superseded: superseded.clone(), committing: None };
        let previous = self.transactional_ids.lock().unwrap().insert(id.to_string(), claim);
        if let Some(previous) = previous {
            previous.superseded.store(true, Ordering::Release);
            if let Some((ns, partitions)) = previous.committing {
                self.doubt_offsets(&ns, &partitions);
            }
        }
        superseded
    }

    /// `id`'s instance is asking for its transaction, holding the offsets of `partitions`
    /// of `ns`, to commit (until [`Self::commit_ended`]); `instance` is the flag its claim
    /// returned.
    pub fn commit_started(&self, id: &str, instance: &Arc<AtomicBool>, ns: &Namespace, partitions: Vec<String>) {
        self.set_committing(id, instance, Some((ns.clone(), partitions)));
    }

    pub fn commit_ended(&self, id: &str, instance: &Arc<AtomicBool>) {
        self.set_committing(id, instance, None);
    }

    /// Only while `instance` still holds the id: a superseded one's commit was made
    /// doubtful when it lost the claim.
    fn set_committing(&self, id: &str, instance: &Arc<AtomicBool>, committing: Option<(Namespace, Vec<String>)>) {
        let mut claims = self.transactional_ids.lock().unwrap();
        if let Some(claim) = claims.get_mut(id).filter(|c| Arc::ptr_eq(&c.superseded, instance)) {
            claim.committing = committing;
        }
    }

    /// Marks `partitions` of `ns` as perhaps committed by a transaction whose outcome is not
    /// known: until [`Self::reread_offsets`] reads them again, reading them reads the topic.
    pub fn doubt_offsets(&self, ns: &Namespace, partitions: &[String]) {
        let mut doubtful = self.doubtful.lock().unwrap();
        doubtful.extend(partitions.iter().map(|p| (ns.clone(), p.clone())));
    }

    /// Reads the offsets topic to its end again (`read_committed`, so a transaction counts
    /// once its coordinator has finished it) and keeps what it says of `partitions` of
    /// `ns`, no longer doubtful; returns their offsets in order.
    pub fn reread_offsets(&self, ns: &Namespace, partitions: &[String]) -> anyhow::Result<Vec<Option<String>>> {
        let mut latest: BTreeMap<&str, Option<String>> = partitions.iter().map(|p| (p.as_str(), None)).collect();
        for (key, value) in TopicView::read_to_end(&self.kafka, &self.offsets_topic_name)? {
            let Some((key_ns, partition)) = parse_offset_key(&key) else { continue };
            if key_ns != *ns {
                continue;
            }
            if let Some(slot) = latest.get_mut(partition.as_str()) {
                *slot =
                    value.and_then(|v| String::from_utf8(v).ok()).and_then(|v| super::json::canonical_object(&v).ok());
            }
        }
        let mut offsets = self.offsets.lock().unwrap();
        let mut doubtful = self.doubtful.lock().unwrap();
        for (partition, offset) in &latest {
            let key = (ns.clone(), partition.to_string());
            doubtful.remove(&key);
            match offset {
                Some(offset) => offsets.insert(key, offset.clone()),
                None => offsets.remove(&key),
            };
        }
        Ok(partitions.iter().map(|p| latest[p.as_str()].clone()).collect())
    }

    /// Reads again those of `partitions` (all of `ns`'s when `None`) that are doubtful.
    fn settle_doubts(&self, ns: &Namespace, partitions: Option<&[String]>) -> anyhow::Result<()> {
        let doubtful: Vec<String> = self
            .doubtful
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, p)| n == ns && partitions.is_none_or(|wanted| wanted.contains(p)))
            .map(|(_, p)| p.clone())
            .collect();
        if !doubtful.is_empty() {
            self.reread_offsets(ns, &doubtful)?;
        }
        Ok(())
    }

    fn has_doubts(&self, ns: &Namespace, partitions: &[String]) -> bool {
        let doubtful = self.doubtful.lock().unwrap();
        partitions.iter().any(|p| doubtful.contains(&(ns.clone(), p.clone())))
    }

    fn apply_offset(&self, key: &[u8], value: Option<&[u8]>) {
        let Some((ns, partition)) = parse_offset_key(key) else {
            tracing::warn!(
                "offsets topic: a key that is not [\"<connector>\",{{partition}}]: {}",
                String::from_utf8_lossy(key)
            );
            return;
        };
        let mut offsets = self.offsets.lock().unwrap();
        match value.map(|v| std::str::from_utf8(v).ok().and_then(|v| super::json::canonical_object(v).ok())) {
            None => {
                offsets.remove(&(ns, partition));
            }
            Some(Some(offset)) => {
                offsets.insert((ns, partition), offset);
            }
            Some(None) => {
                tracing::warn!("offsets topic: an offset that is not a JSON object, for {}", qualified_name(&ns))
            }
        }
    }

    fn apply_config(&self, key: &[u8], value: Option<&[u8]>) {
        let Ok(key) = std::str::from_utf8(key) else { return };
        let value: Option<Value> = value.and_then(|v| serde_json::from_slice(v).ok());
        let mut configs = self.configs.lock().unwrap();
        if let Some(name) = key.strip_prefix("connector-") {
            let ns = namespace_of(name);
            match value.as_ref().and_then(|v| properties(&v["properties"])) {
                Some(properties) => configs.entry(ns).or_default().properties = Some(properties),
                None => {
                    configs.remove(&ns);
                }
            }
        } else if let Some(name) = key.strip_prefix("target-state-") {
            let state =
                value.as_ref().and_then(|v| v.get("state.v2").or_else(|| v.get("state"))).and_then(Value::as_str);
            let target = match state {
                Some("PAUSED") => Some(TargetState::Paused),
                Some("STOPPED") => Some(TargetState::Stopped),
                Some(_) => Some(TargetState::Started),
                None => None,
            };
            if let Some(entry) = configs.get_mut(&namespace_of(name)) {
                entry.target = target;
            } else if target.is_some() {
                configs.entry(namespace_of(name)).or_default().target = target;
            }
        } else if let Some(rest) = key.strip_prefix("task-") {
            let Some((name, task)) = rest.rsplit_once('-') else { return };
            let Ok(task) = task.parse::<u32>() else { return };
            let entry = configs.entry(namespace_of(name)).or_default();
            match value.as_ref().and_then(|v| properties(&v["properties"])) {
                Some(properties) => {
                    entry.tasks.insert(task, properties);
                }
                None => {
                    entry.tasks.remove(&task);
                }
            }
        } else if let Some(name) = key.strip_prefix("commit-") {
            let tasks = value.as_ref().and_then(|v| v["tasks"].as_u64()).and_then(|n| u32::try_from(n).ok());
            configs.entry(namespace_of(name)).or_default().committed_tasks = tasks;
        }
    }

    fn apply_status(&self, key: &[u8], value: Option<&[u8]>) {
        let Ok(key) = std::str::from_utf8(key) else { return };
        if let Some(topic_key) = key.strip_prefix("status-topic-") {
            return self.apply_active_topic(topic_key, value);
        }
        let Some(name) = key.strip_prefix("status-connector-") else {
            return;
        };
        let ns = namespace_of(name);
        let mut statuses = self.statuses.lock().unwrap();
        match value.and_then(|v| serde_json::from_slice::<Value>(v).ok()).and_then(|v| status_from_record(&ns, v)) {
            Some(status) => {
                statuses.insert(ns, status);
            }
            None => {
                statuses.remove(&ns);
            }
        }
    }

    /// `<topic>:connector-<name>` (a topic name has no ':') and its record.
    fn apply_active_topic(&self, key: &str, value: Option<&[u8]>) {
        let Some((topic, name)) = key.split_once(":connector-") else { return };
        let ns = namespace_of(name);
        let mut active = self.active_topics.lock().unwrap();
        let record = value.and_then(|v| serde_json::from_slice::<Value>(v).ok());
        match record.as_ref().map(|r| &r["topic"]) {
            Some(status) => {
                let topic = ActiveTopic {
                    name: topic.to_string(),
                    task: status["task"].as_u64().and_then(|t| u32::try_from(t).ok()).unwrap_or(0),
                    discovered_ms: status["discoverTimestamp"].as_i64().unwrap_or(0),
                };
                active.entry(ns).or_default().insert(topic.name.clone(), topic);
            }
            None => {
                if let Some(topics) = active.get_mut(&ns) {
                    topics.remove(topic);
                }
            }
        }
    }

    fn write_configs(&self, entries: Vec<(String, Option<Value>)>) -> anyhow::Result<()> {
        let encoded: Vec<Entry> =
            entries.into_iter().map(|(k, v)| (k.into_bytes(), v.map(|v| v.to_string().into_bytes()))).collect();
        self.configs_topic.write(&encoded)?;
        for (key, value) in &encoded {
            self.apply_config(key, value.as_deref());
        }
        Ok(())
    }
}

impl Drop for KafkaBackend {
    fn drop(&mut self) {
        // Statuses are sent without waiting: give the last ones a moment to leave (a
        // dropped producer purges what it still holds).
        let _ = self.statuses_topic.producer.get().flush(Duration::from_secs(5));
    }
}

/// `["<connector>",{partition}]` as Connect's JsonConverter writes it, the partition in
/// canonical form.
pub fn offset_key(ns: &Namespace, partition: &str) -> anyhow::Result<Vec<u8>> {
    let partition: Value = serde_json::from_str(partition).context("a partition that is not JSON")?;
    Ok(serde_json::to_vec(&json!([qualified_name(ns), partition]))?)
}

fn parse_offset_key(key: &[u8]) -> Option<(Namespace, String)> {
    let Value::Array(parts) = serde_json::from_slice::<Value>(key).ok()? else { return None };
    let [Value::String(name), partition @ Value::Object(_)] = parts.as_slice() else { return None };
    let partition = super::json::canonical_object(&partition.to_string()).ok()?;
    Some((namespace_of(name), partition))
}

fn properties(value: &Value) -> Option<Vec<(String, String)>> {
    let map = value.as_object()?;
    Some(map.iter().map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), String::from))).collect())
}

fn status_from_record(ns: &Namespace, mut value: Value) -> Option<ConnectorStatus> {
    let tasks = value.get_mut("tasks").map(Value::take).unwrap_or(Value::Array(Vec::new()));
    let connector = serde_json::from_value(value).ok()?;
    Some(ConnectorStatus {
        name: ns.connector.clone(),
        connector,
        tasks: serde_json::from_value(tasks).ok()?,
        kind: "source".into(),
    })
}

fn target_state_record(state: TargetState) -> Value {
    // Before KIP-875 readers know only STARTED and PAUSED: a stopped connector is paused
    // for them, as Connect writes it.
    let (v1, v2) = match state {
        TargetState::Started => ("STARTED", "STARTED"),
        TargetState::Paused => ("PAUSED", "PAUSED"),
        TargetState::Stopped => ("PAUSED", "STOPPED"),
    };
    json!({ "state": v1, "state.v2": v2 })
}

impl OffsetStore for KafkaBackend {
    fn offsets(&self, ns: &Namespace, partitions: &[String]) -> anyhow::Result<Vec<Option<String>>> {
        self.settle_doubts(ns, Some(partitions))?;
        let offsets = self.offsets.lock().unwrap();
        Ok(partitions.iter().map(|p| offsets.get(&(ns.clone(), p.clone())).cloned()).collect())
    }

    /// Kept in memory: at once, unless a doubtful one needs the topic read again.
    fn offsets_at_once(&self, ns: &Namespace, partitions: &[String]) -> Option<anyhow::Result<Vec<Option<String>>>> {
        if self.has_doubts(ns, partitions) {
            return None;
        }
        Some(self.offsets(ns, partitions))
    }

    /// Each partition's offset is its own record: a crash between two of them leaves some
    /// partitions committed and others not, which at-least-once delivery allows.
    fn commit_offsets(&self, ns: &Namespace, offsets: &[(String, String)]) -> anyhow::Result<()> {
        let entries = offsets
            .iter()
            .map(|(partition, offset)| Ok((offset_key(ns, partition)?, Some(offset.clone().into_bytes()))))
            .collect::<anyhow::Result<Vec<_>>>()?;
        self.offsets_topic.write(&entries)?;
        self.remember_offsets(ns, offsets);
        Ok(())
    }

    fn all_offsets(&self, ns: &Namespace) -> anyhow::Result<Vec<(String, String)>> {
        self.settle_doubts(ns, None)?;
        let offsets = self.offsets.lock().unwrap();
        Ok(offsets.iter().filter(|((n, _), _)| n == ns).map(|((_, p), o)| (p.clone(), o.clone())).collect())
    }

    fn delete_offset(&self, ns: &Namespace, partition: &str) -> anyhow::Result<bool> {
        let present = self.offsets.lock().unwrap().contains_key(&(ns.clone(), partition.to_string()));
        if present {
            self.offsets_topic.write(&[(offset_key(ns, partition)?, None)])?;
            self.offsets.lock().unwrap().remove(&(ns.clone(), partition.to_string()));
        }
        Ok(present)
    }
}

impl ConfigStore for KafkaBackend {
    fn put_connector_config(&self, ns: &Namespace, config: &[(String, String)]) -> anyhow::Result<()> {
        let properties: serde_json::Map<String, Value> =
            config.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        self.write_configs(vec![(
            format!("connector-{}", qualified_name(ns)),
            Some(json!({ "properties": properties })),
        )])
    }

    fn connectors(&self, tenant: &str) -> anyhow::Result<Vec<String>> {
        let configs = self.configs.lock().unwrap();
        Ok(configs
            .iter()
            .filter(|(ns, c)| ns.tenant == tenant && c.properties.is_some())
            .map(|(ns, _)| ns.connector.clone())
            .collect())
    }

    fn connector_config(&self, ns: &Namespace) -> anyhow::Result<Option<Vec<(String, String)>>> {
        Ok(self.configs.lock().unwrap().get(ns).and_then(|c| c.properties.clone()))
    }

    fn stored_connectors(&self) -> anyhow::Result<Vec<StoredConnector>> {
        let configs = self.configs.lock().unwrap();
        Ok(configs
            .iter()
            .filter_map(|(ns, c)| Some((ns.clone(), c.properties.clone()?, c.target.unwrap_or(TargetState::Started))))
            .collect())
    }

    fn put_target_state(&self, ns: &Namespace, state: TargetState) -> anyhow::Result<()> {
        self.write_configs(vec![(format!("target-state-{}", qualified_name(ns)), Some(target_state_record(state)))])
    }

    fn delete_connector(&self, ns: &Namespace) -> anyhow::Result<()> {
        let name = qualified_name(ns);
        let tasks: Vec<u32> =
            self.configs.lock().unwrap().get(ns).map(|c| c.tasks.keys().copied().collect()).unwrap_or_default();
        let mut entries = vec![(format!("connector-{name}"), None), (format!("target-state-{name}"), None)];
        entries.extend(tasks.iter().map(|task| (format!("task-{name}-{task}"), None)));
        entries.push((format!("commit-{name}"), None));
        self.write_configs(entries)?;
        self.configs.lock().unwrap().remove(ns);
        self.statuses_topic.write(&[(format!("status-connector-{name}").into_bytes(), None)])?;
        self.statuses.lock().unwrap().remove(ns);
        self.reset_active_topics(ns)
    }

    fn tenants(&self) -> anyhow::Result<Vec<String>> {
        let configs = self.configs.lock().unwrap();
        let mut tenants: Vec<String> =
            configs.iter().filter(|(_, c)| c.properties.is_some()).map(|(ns, _)| ns.tenant.clone()).collect();
        tenants.dedup();
        Ok(tenants)
    }

    fn put_task_configs(&self, ns: &Namespace, tasks: &[Vec<(String, String)>]) -> anyhow::Result<()> {
        let name = qualified_name(ns);
        let mut entries: Vec<(String, Option<Value>)> = tasks
            .iter()
            .enumerate()
            .map(|(task, config)| {
                let properties: serde_json::Map<String, Value> =
                    config.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
                (format!("task-{name}-{task}"), Some(json!({ "properties": properties })))
            })
            .collect();
        // The commit record makes the new set current (Connect's two-phase task configs).
        entries.push((format!("commit-{name}"), Some(json!({ "tasks": tasks.len() }))));
        self.write_configs(entries)
    }

    fn task_configs(&self, ns: &Namespace) -> anyhow::Result<Vec<Vec<(String, String)>>> {
        let configs = self.configs.lock().unwrap();
        let Some(entry) = configs.get(ns) else { return Ok(Vec::new()) };
        let count = entry.committed_tasks.unwrap_or(0);
        Ok((0..count).filter_map(|task| entry.tasks.get(&task).cloned()).collect())
    }
}

impl StatusStore for KafkaBackend {
    fn put_status(&self, ns: &Namespace, status: &ConnectorStatus) -> anyhow::Result<()> {
        let mut value = serde_json::to_value(&status.connector)?;
        value["generation"] = json!(0);
        value["tasks"] = serde_json::to_value(&status.tasks)?;
        let key = format!("status-connector-{}", qualified_name(ns)).into_bytes();
        // Statuses change often (usage every second) and are called from the worker's
        // async code: sent without waiting for the acknowledgement, as Connect does (the
        // idempotent producer keeps them in order). This worker reads its own view.
        self.statuses.lock().unwrap().insert(ns.clone(), status.clone());
        self.statuses_topic.send(&key, Some(value.to_string().as_bytes()))
    }

    fn statuses(&self, tenant: &str) -> anyhow::Result<Vec<ConnectorStatus>> {
        let statuses = self.statuses.lock().unwrap();
        Ok(statuses.iter().filter(|(ns, _)| ns.tenant == tenant).map(|(_, s)| s.clone()).collect())
    }

    fn put_active_topic(&self, ns: &Namespace, topic: &ActiveTopic) -> anyhow::Result<()> {
        let name = qualified_name(ns);
        let value = json!({"topic": {
            "name": topic.name, "connector": name, "task": topic.task, "discoverTimestamp": topic.discovered_ms,
        }});
        // Sent without waiting, as statuses are (Connect sends its TopicStatus so too).
        self.active_topics.lock().unwrap().entry(ns.clone()).or_default().insert(topic.name.clone(), topic.clone());
        self.statuses_topic.send(&active_topic_key(&topic.name, &name), Some(value.to_string().as_bytes()))
    }

    fn active_topics(&self, ns: &Namespace) -> anyhow::Result<Vec<ActiveTopic>> {
        let active = self.active_topics.lock().unwrap();
        Ok(active.get(ns).map(|topics| topics.values().cloned().collect()).unwrap_or_default())
    }

    fn reset_active_topics(&self, ns: &Namespace) -> anyhow::Result<()> {
        let name = qualified_name(ns);
        let topics: Vec<String> =
            self.active_topics.lock().unwrap().get(ns).map(|t| t.keys().cloned().collect()).unwrap_or_default();
        let tombstones: Vec<Entry> = topics.iter().map(|topic| (active_topic_key(topic, &name), None)).collect();
        self.statuses_topic.write(&tombstones)?;
        let mut active = self.active_topics.lock().unwrap();
        if let Some(known) = active.get_mut(ns) {
            known.retain(|topic, _| !topics.contains(topic));
        }
        Ok(())
    }
}

/// Connect's key of a topic status: `status-topic-<topic>:connector-<connector>`.
fn active_topic_key(topic: &str, qualified_name: &str) -> Vec<u8> {
    format!("status-topic-{topic}:connector-{qualified_name}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_keys_are_connects_and_tenants_cannot_forge_each_other() {
        let default = Namespace::new(DEFAULT_TENANT, "files");
        assert_eq!(offset_key(&default, r#"{"path":"/in/a.log"}"#).unwrap(), br#"["files",{"path":"/in/a.log"}]"#);
        let acme = Namespace::new("acme", "files");
        assert_eq!(offset_key(&acme, r#"{"id":1}"#).unwrap(), br#"["acme/files",{"id":1}]"#);
        // Connect's key order differs: matched by parsed JSON.
        let (ns, partition) = parse_offset_key(br#"["files", {"b": 2, "a": "x"}]"#).unwrap();
        assert_eq!(ns, default);
        assert_eq!(partition, r#"{"a":"x","b":2}"#);
        assert_eq!(parse_offset_key(br#"["acme/files",{"id":1}]"#).unwrap().0, acme);
        assert!(parse_offset_key(b"not json").is_none());
        assert!(parse_offset_key(br#"["files","not an object"]"#).is_none());
    }

    #[test]
    fn target_states_read_back_and_stopped_is_paused_for_old_readers() {
        let stopped = target_state_record(TargetState::Stopped);
        assert_eq!(stopped, json!({"state": "PAUSED", "state.v2": "STOPPED"}));
    }
}
