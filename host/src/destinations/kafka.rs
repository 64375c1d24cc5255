//! `destination=kafka`: records produced to Kafka topics on the worker's `[kafka]`
//! cluster, at-least-once. Every record of a batch is acknowledged (idempotent producer,
//! `acks=all`) before the offsets the batch advances are committed, so a partition's
//! offset never passes a record that was not written (what Connect's `SubmittedRecords`
//! guarantees). A crash between the two re-sends at most that batch.
//!
//! With `exactly.once.support=required` (KIP-618) each task instance has a transactional
//! producer (`transactional.id` `<group.id>-<connector>-<task>`, the connector qualified by
//! its tenant): a transaction holds a poll batch's records and the offsets they advance,
//! written to the offsets topic by the same producer (`transaction.boundary=poll`), or
//! every batch of an interval (`interval`). Starting an instance initialises its id, which
//! fences the task's previous instance wherever it runs; a fenced instance fails with that
//! reason. Offsets are read back `read_committed`.
//!
//! Topics are made on first use with `topic.creation.default.partitions` and
//! `.replication.factor` (KIP-158). A declared tenant's topics are `<tenant>.<topic>`, so
//! tenants sharing a cluster never write into each other's topics.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};

use super::{Destination, RetriableDelivery};
use crate::config::TransactionBoundary;
use crate::config::{DEFAULT_TENANT, KafkaConfig, KafkaSettings};
use crate::storage::kafka::{
    KafkaBackend, KafkaLog, admin_client, client_config, existing_topics, offset_key, qualified_name,
};
use crate::storage::{Namespace, OffsetStore, Record};

/// How long a record may wait for its acknowledgement before the batch is retried (the
/// producer's `message.timeout.ms` unless overridden).
const DELIVERY_TIMEOUT_MS: &str = "120000";
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

pub struct KafkaDestination {
    kafka: KafkaConfig,
    overrides: BTreeMap<String, String>,
    /// Exactly-once: the Kafka storage whose offsets topic transactions write to.
    exactly_once: Option<Arc<KafkaBackend>>,
    /// The at-least-once producer its tasks share (none with exactly-once).
    producer: Option<FutureProducer<KafkaLog>>,
    offsets: Arc<dyn OffsetStore>,
    settings: KafkaSettings,
    topics: Arc<TopicMaker>,
}

impl KafkaDestination {
    /// A producer for one connector: the worker's client settings, then its
    /// `producer.override.*` (admission already checked which it may set).
    pub fn new(
        kafka: &KafkaConfig,
        tenant: &str,
        settings: &KafkaSettings,
        overrides: &BTreeMap<String, String>,
        offsets: Arc<dyn OffsetStore>,
        exactly_once: Option<Arc<KafkaBackend>>,
    ) -> anyhow::Result<KafkaDestination> {
        let mut config = client_config(
            kafka,
            &[
                ("enable.idempotence", "true"),
                ("acks", "all"),
                ("partitioner", "murmur2_random"),
                ("message.timeout.ms", DELIVERY_TIMEOUT_MS),
            ],
        );
        for (key, value) in overrides {
            config.set(key, value);
        }
        // Exactly-once sends through each task's transactional producer only.
        let producer = match exactly_once {
            Some(_) => None,
            None => Some(
                config
                    .create_with_context::<KafkaLog, FutureProducer<KafkaLog>>(KafkaLog)
                    .map_err(|e| anyhow::anyhow!("cannot make a Kafka producer: {e}"))?,
            ),
        };
        let prefix = if tenant == DEFAULT_TENANT { String::new() } else { format!("{tenant}.") };
        let topics = Arc::new(TopicMaker {
            prefix,
            admin: admin_client(kafka)?,
            settings: settings.clone(),
            ready: Mutex::default(),
        });
        Ok(KafkaDestination {
            kafka: kafka.clone(),
            overrides: overrides.clone(),
            exactly_once,
            producer,
            offsets,
            settings: settings.clone(),
            topics,
        })
    }

    /// The Kafka topic of a record's topic.
    pub fn kafka_topic(&self, topic: &str) -> String {
        self.topics.name(topic)
    }
}

/// Names a connector's Kafka topics and makes those missing (KIP-158); shared by its
/// task producers.
struct TopicMaker {
    prefix: String,
    admin: AdminClient<KafkaLog>,
    settings: KafkaSettings,
    /// Topics known to exist.
    ready: Mutex<HashSet<String>>,
}

impl TopicMaker {
    fn name(&self, topic: &str) -> String {
        format!("{}{topic}", self.prefix)
    }

    fn ensure(&self, topics: &[String]) -> anyhow::Result<()> {
        let missing: Vec<&String> = {
            let ready = self.ready.lock().unwrap();
            let mut seen = HashSet::new();
            topics.iter().filter(|t| !ready.contains(*t) && seen.insert(*t)).collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        let existing =
            existing_topics(&self.admin, ADMIN_TIMEOUT).map_err(|e| RetriableDelivery::wrap(format!("{e:#}")))?;
        self.ready.lock().unwrap().extend(missing.iter().filter(|t| existing.contains(**t)).map(|t| (*t).clone()));
        let missing: Vec<&String> = missing.into_iter().filter(|t| !existing.contains(*t)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let replication = i32::from(self.settings.topic_replication);
        let new: Vec<NewTopic> = missing
            .iter()
            .map(|t| NewTopic::new(t, self.settings.topic_partitions, TopicReplication::Fixed(replication)))
            .collect();
        let options = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
        let results = futures_executor::block_on(self.admin.create_topics(&new, &options))
            .map_err(|e| RetriableDelivery::wrap(format!("cannot create topics: {e}")))?;
        for result in results {
            match result {
                Ok(topic) | Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    tracing::info!("topic {topic} is ready");
                    self.ready.lock().unwrap().insert(topic);
                }
                Err((topic, code)) if is_retriable(code) => {
                    return Err(RetriableDelivery::wrap(format!("cannot create the topic {topic}: {code}")));
                }
                Err((topic, code)) => anyhow::bail!(
                    "cannot create the topic {topic}: {code} (topic.creation.default.partitions, topic.creation.default.replication.factor)"
                ),
            }
        }
        Ok(())
    }
}

fn is_retriable(code: RDKafkaErrorCode) -> bool {
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

/// Sends every record (waiting for room when the producer's queue is full) and returns
/// their delivery futures.
fn send_all(
    producer: &FutureProducer<KafkaLog>,
    records: &[Record],
    topics: &[String],
) -> anyhow::Result<Vec<DeliveryFuture>> {
    let mut deliveries = Vec::with_capacity(records.len());
    for (record, topic) in records.iter().zip(topics) {
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len());
        for (key, value) in &record.headers {
            headers = headers.insert(Header { key, value: Some(value) });
        }
        let mut message = FutureRecord::<[u8], [u8]>::to(topic).headers(headers).timestamp(record.timestamp_ms);
        if let Some(key) = &record.key {
            message = message.key(key.as_slice());
        }
        if let Some(value) = &record.value {
            message = message.payload(value.as_slice());
        }
        deliveries.push(send_one(producer, message)?);
    }
    Ok(deliveries)
}

fn send_one(
    producer: &FutureProducer<KafkaLog>,
    mut message: FutureRecord<'_, [u8], [u8]>,
) -> anyhow::Result<DeliveryFuture> {
    // A full local queue waits for room: the broker is slower than the plugin.
    loop {
        match producer.send_result(message) {
            Ok(delivery) => return Ok(delivery),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                message = back;
                producer.poll(Duration::from_millis(10));
            }
            Err((e, back)) => anyhow::bail!("cannot produce to {}: {e}", back.topic),
        }
    }
}

impl Destination for KafkaDestination {
    fn for_task(&self, ns: &Namespace, task: u32) -> anyhow::Result<Option<Arc<dyn Destination>>> {
        Ok(Some(match &self.exactly_once {
            Some(backend) => Arc::new(TransactionalTask::start(self, backend.clone(), ns, task)?),
            None => Arc::new(PipelinedTask {
                producer: self.producer.clone().expect("an at-least-once destination has a producer"),
                topics: self.topics.clone(),
                offsets: self.offsets.clone(),
                state: Mutex::default(),
            }),
        }))
    }

    fn retire_tasks(&self, ns: &Namespace, tasks: std::ops::Range<u32>) -> anyhow::Result<()> {
        if self.exactly_once.is_none() {
            return Ok(());
        }
        for task in tasks {
            // Initialising the id bumps its epoch: an instance of the task still alive
            // somewhere can no longer commit.
            let producer =
                transactional_producer(&self.kafka, &self.overrides, &transactional_id(&self.kafka, ns, task))?;
            producer
                .init_transactions(TRANSACTION_TIMEOUT)
                .map_err(|e| anyhow::anyhow!("cannot fence the retired task {task}: {e}"))?;
        }
        Ok(())
    }

    fn deliver(&self, ns: &Namespace, records: &[Record], offsets: &[(String, String)]) -> anyhow::Result<()> {
        let topics: Vec<String> = records.iter().map(|r| self.kafka_topic(&r.topic)).collect();
        self.topics.ensure(&topics)?;
        let producer = self.producer.as_ref().context("exactly-once delivers through each task's producer")?;
        let deliveries = send_all(producer, records, &topics)?;
        let mut failure = None;
        for delivery in deliveries {
            match futures_executor::block_on(delivery) {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) => {
                    failure.get_or_insert(e);
                }
                Err(_) => anyhow::bail!("the Kafka producer went away"),
            }
        }
        if let Some(e) = failure {
            let retriable = e.rdkafka_error_code().is_none_or(is_retriable);
            let message = format!("Kafka did not take the batch ({} records): {e}", records.len());
            return Err(if retriable { RetriableDelivery::wrap(message) } else { anyhow::anyhow!(message) });
        }
        self.offsets.commit_offsets(ns, offsets).map_err(|e| RetriableDelivery::wrap(format!("{e:#}")))
    }
}

/// Records a task may have sent and not yet seen acknowledged when `deliver` returns: none.
/// Each batch is acknowledged and its offsets committed before the next is polled, so a
/// crash sends at most one batch per task again. (A window of many batches measured
/// 1.1x a bare producer instead of 0.75x on nisshi, but re-sends that many; see
/// docs/kafka.md.)
const MAX_IN_FLIGHT_RECORDS: usize = 0;
const MAX_IN_FLIGHT_BYTES: usize = 0;
/// How often acknowledged batches' offsets are committed while records flow: at once.
const OFFSET_COMMIT_EVERY: Duration = Duration::ZERO;
/// How long a task keeps sending again records Kafka did not take before it fails.
const RESEND_FOR: Duration = Duration::from_secs(300);

/// One task's at-least-once pipeline: `deliver` sends a batch; acknowledged batches are
/// settled in the order they were sent and their offsets committed, so an offset never
/// passes a record Kafka has not acknowledged (Connect's `SubmittedRecords`). With the
/// window above at zero, every batch is settled before `deliver` returns.
struct PipelinedTask {
    producer: FutureProducer<KafkaLog>,
    topics: Arc<TopicMaker>,
    offsets: Arc<dyn OffsetStore>,
    state: Mutex<Pipeline>,
}

#[derive(Default)]
struct Pipeline {
    in_flight: std::collections::VecDeque<InFlight>,
    records: usize,
    bytes: usize,
    /// Offsets of acknowledged batches, not yet committed (latest per partition).
    ready: BTreeMap<String, String>,
    last_commit: Option<std::time::Instant>,
}

struct InFlight {
    deliveries: Vec<DeliveryFuture>,
    /// How many of `deliveries` (from the first) are acknowledged.
    acknowledged: usize,
    records: Vec<Record>,
    offsets: Vec<(String, String)>,
    bytes: usize,
}

fn record_bytes(records: &[Record]) -> usize {
    records.iter().map(|r| r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len)).sum()
}

impl PipelinedTask {
    /// Settles acknowledged batches from the oldest (all of them when `wait`), commits the
    /// offsets that are due, and sends again what Kafka did not take.
    fn settle(&self, ns: &Namespace, state: &mut Pipeline, wait: bool) -> anyhow::Result<()> {
        use futures_util::FutureExt;
        while let Some(front) = state.in_flight.front_mut() {
            let mut failed = None;
            while front.acknowledged < front.deliveries.len() {
                let delivery = &mut front.deliveries[front.acknowledged];
                let outcome = if wait || state.records > MAX_IN_FLIGHT_RECORDS || state.bytes > MAX_IN_FLIGHT_BYTES {
                    Some(futures_executor::block_on(delivery))
                } else {
                    delivery.now_or_never()
                };
                match outcome {
                    None => break,
                    Some(Ok(Ok(_))) => front.acknowledged += 1,
                    Some(Ok(Err((e, _)))) => {
                        failed = Some(e.to_string());
                        break;
                    }
                    Some(Err(_)) => {
                        failed = Some("the producer went away".into());
                        break;
                    }
                }
            }
            if let Some(reason) = failed {
                self.send_again(state, &reason)?;
                continue;
            }
            if front.acknowledged < front.deliveries.len() {
                break;
            }
            let done = state.in_flight.pop_front().expect("the front");
            state.records -= done.records.len();
            state.bytes -= done.bytes;
            state.ready.extend(done.offsets);
        }
        let due = state.last_commit.is_none_or(|at| at.elapsed() >= OFFSET_COMMIT_EVERY);
        if !state.ready.is_empty() && (wait || due) {
            let ready: Vec<(String, String)> = state.ready.iter().map(|(p, o)| (p.clone(), o.clone())).collect();
            match self.offsets.commit_offsets(ns, &ready) {
                Ok(()) => {
                    state.ready.clear();
                    state.last_commit = Some(std::time::Instant::now());
                }
                // Kept, and committed with the next ones.
                Err(e) if !wait => tracing::warn!("cannot commit offsets yet: {e:#}"),
                Err(e) => return Err(RetriableDelivery::wrap(format!("cannot commit offsets: {e:#}"))),
            }
        }
        Ok(())
    }

    /// The oldest batch has a record Kafka did not take (after the producer's own retries
    /// for `message.timeout.ms`): every batch from it on is sent again, in order (what was
    /// taken meanwhile is sent twice: at-least-once), until Kafka takes them, for
    /// [`RESEND_FOR`] at most.
    fn send_again(&self, state: &mut Pipeline, reason: &str) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let mut attempt = 0u32;
        let mut reason = reason.to_string();
        loop {
            // Let what is still in flight finish first: its outcome no longer matters.
            for batch in &mut state.in_flight {
                for delivery in batch.deliveries.drain(batch.acknowledged..) {
                    let _ = futures_executor::block_on(delivery);
                }
            }
            if started.elapsed() >= RESEND_FOR {
                anyhow::bail!(
                    "Kafka did not take records for {RESEND_FOR:?} ({reason}); the task resumes from its committed offsets when restarted"
                );
            }
            let delay = Duration::from_secs(1u64 << attempt.min(5)).min(Duration::from_secs(30));
            attempt += 1;
            tracing::warn!(
                "Kafka did not take a batch ({reason}); sending it and the ones after it again in {delay:?}"
            );
            std::thread::sleep(delay);
            let mut sent_all = true;
            for batch in &mut state.in_flight {
                let topics: Vec<String> = batch.records.iter().map(|r| self.topics.name(&r.topic)).collect();
                match self.topics.ensure(&topics).and_then(|()| send_all(&self.producer, &batch.records, &topics)) {
                    Ok(deliveries) => {
                        batch.deliveries = deliveries;
                        batch.acknowledged = 0;
                    }
                    Err(e) => {
                        reason = format!("{e:#}");
                        sent_all = false;
                        break;
                    }
                }
            }
            if sent_all {
                return Ok(());
            }
        }
    }
}

impl Destination for PipelinedTask {
    fn deliver(&self, ns: &Namespace, records: &[Record], offsets: &[(String, String)]) -> anyhow::Result<()> {
        let topics: Vec<String> = records.iter().map(|r| self.topics.name(&r.topic)).collect();
        self.topics.ensure(&topics)?;
        let deliveries = send_all(&self.producer, records, &topics)?;
        let mut state = self.state.lock().unwrap();
        let bytes = record_bytes(records);
        state.records += records.len();
        state.bytes += bytes;
        state.in_flight.push_back(InFlight {
            deliveries,
            acknowledged: 0,
            records: records.to_vec(),
            offsets: offsets.to_vec(),
            bytes,
        });
        self.settle(ns, &mut state, false)
    }

    fn flush(&self, ns: &Namespace) -> anyhow::Result<()> {
        let mut state = self.state.lock().unwrap();
        self.settle(ns, &mut state, true)
    }
}

/// How long transactional calls (init, commit, abort) may take.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// KIP-618's `<group.id>-<connector>-<task>`, the connector qualified by its tenant.
pub fn transactional_id(kafka: &KafkaConfig, ns: &Namespace, task: u32) -> String {
    format!("{}-{}-{task}", kafka.group_id, qualified_name(ns))
}

fn transactional_producer(
    kafka: &KafkaConfig,
    overrides: &BTreeMap<String, String>,
    id: &str,
) -> anyhow::Result<FutureProducer<KafkaLog>> {
    let mut config = client_config(
        kafka,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("partitioner", "murmur2_random"),
            ("transactional.id", id),
            ("transaction.timeout.ms", "60000"),
        ],
    );
    for (key, value) in overrides {
        config.set(key, value);
    }
    config
        .create_with_context(KafkaLog)
        .map_err(|e| anyhow::anyhow!("cannot make a transactional Kafka producer ({id}): {e}"))
}

/// One task instance's transactional producer and its open transaction.
struct TransactionalTask {
    id: String,
    backend: Arc<KafkaBackend>,
    /// The connector's topic names and creation.
    topics: Arc<TopicMaker>,
    boundary: TransactionBoundary,
    /// Makes (and initialises) this task's producer again when one cannot finish an abort.
    new_producer: Box<dyn Fn() -> anyhow::Result<FutureProducer<KafkaLog>> + Send + Sync>,
    state: Mutex<TransactionState>,
}

struct TransactionState {
    producer: FutureProducer<KafkaLog>,
    open: Option<OpenTransaction>,
}

struct OpenTransaction {
    since: std::time::Instant,
    offsets: Vec<(String, String)>,
}

impl TransactionalTask {
    fn start(parent: &KafkaDestination, backend: Arc<KafkaBackend>, ns: &Namespace, task: u32) -> anyhow::Result<Self> {
        let id = transactional_id(&parent.kafka, ns, task);
        let (kafka, overrides, made_id) = (parent.kafka.clone(), parent.overrides.clone(), id.clone());
        let new_producer = Box::new(move || {
            let producer = transactional_producer(&kafka, &overrides, &made_id)?;
            producer.init_transactions(TRANSACTION_TIMEOUT).map_err(|e| classify(&made_id, e))?;
            Ok(producer)
        });
        let producer = new_producer()?;
        Ok(TransactionalTask {
            id,
            backend,
            topics: parent.topics.clone(),
            boundary: parent.settings.transaction_boundary,
            new_producer,
            state: Mutex::new(TransactionState { producer, open: None }),
        })
    }

    fn commit(&self, ns: &Namespace, state: &mut TransactionState) -> anyhow::Result<()> {
        let Some(transaction) = state.open.take() else { return Ok(()) };
        let mut attempts = 0;
        let committed = loop {
            attempts += 1;
            match state.producer.commit_transaction(TRANSACTION_TIMEOUT) {
                // A commit that timed out or hit a passing error may simply be called again.
                Err(KafkaError::Transaction(e)) if e.is_retriable() && attempts < 3 => continue,
                Err(KafkaError::Flush(_)) if attempts < 3 => continue,
                result => break result,
            }
        };
        match committed {
            Ok(()) => {
                self.backend.remember_offsets(ns, &transaction.offsets);
                Ok(())
            }
            Err(e) => {
                let error = classify(&self.id, e);
                if !RetriableDelivery::is(&error) {
                    return Err(error);
                }
                // Nothing of it is visible to read_committed readers, and its offsets were
                // not committed: the batch is sent again in a new transaction.
                self.abort(state)?;
                match self.boundary {
                    TransactionBoundary::Poll => Err(error),
                    // Earlier batches of the aborted transaction are gone from this task's
                    // memory: it restarts from the committed offsets instead.
                    TransactionBoundary::Interval(_) => Err(anyhow::anyhow!(
                        "the transaction was aborted ({error:#}); the task resumes from its committed offsets when restarted"
                    )),
                }
            }
        }
    }

    /// Aborts the open transaction; a producer that cannot (an abort that keeps failing)
    /// is replaced by a new one with the same id, whose start aborts what was left open.
    fn abort(&self, state: &mut TransactionState) -> anyhow::Result<()> {
        state.open = None;
        for _ in 0..3 {
            match state.producer.abort_transaction(TRANSACTION_TIMEOUT) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    let error = classify(&self.id, e);
                    if !RetriableDelivery::is(&error) {
                        return Err(error);
                    }
                    tracing::warn!("{error:#}; trying the abort again");
                }
            }
        }
        tracing::warn!("transactional.id {}: the abort does not complete; starting a new producer", self.id);
        state.producer = (self.new_producer)()?;
        Ok(())
    }
}

/// A transactional call's error: fenced and fatal ones end the instance; the rest are
/// retried (after an abort where the transaction needs one).
fn classify(id: &str, error: KafkaError) -> anyhow::Error {
    let fatal = match &error {
        KafkaError::Transaction(e) => e.is_fatal() || e.code() == RDKafkaErrorCode::Fenced,
        other => other.rdkafka_error_code() == Some(RDKafkaErrorCode::Fenced),
    };
    if fatal {
        anyhow::anyhow!(
            "fenced or fatal: {error} (transactional.id {id}: a newer instance of this task took over, or the producer cannot go on)"
        )
    } else {
        RetriableDelivery::wrap(format!("transaction of {id}: {error}"))
    }
}

impl Destination for TransactionalTask {
    fn deliver(&self, ns: &Namespace, records: &[Record], offsets: &[(String, String)]) -> anyhow::Result<()> {
        let topics: Vec<String> = records.iter().map(|r| self.topics.name(&r.topic)).collect();
        self.topics.ensure(&topics)?;
        let mut state = self.state.lock().unwrap();
        if state.open.is_none() {
            if let Err(e) = state.producer.begin_transaction() {
                let error = classify(&self.id, e);
                if RetriableDelivery::is(&error) {
                    self.abort(&mut state)?;
                }
                return Err(error);
            }
            state.open = Some(OpenTransaction { since: std::time::Instant::now(), offsets: Vec::new() });
        }
        let sent = send_all(&state.producer, records, &topics).and_then(|mut deliveries| {
            for (partition, offset) in offsets {
                let key = offset_key(ns, partition)?;
                let record = FutureRecord::<[u8], [u8]>::to(self.backend.offsets_topic())
                    .key(key.as_slice())
                    .payload(offset.as_bytes());
                deliveries.push(send_one(&state.producer, record)?);
            }
            Ok(deliveries)
        });
        if let Err(e) = sent {
            self.abort(&mut state)?;
            return Err(RetriableDelivery::wrap(format!("{e:#}")));
        }
        if let Some(transaction) = state.open.as_mut() {
            transaction.offsets.extend_from_slice(offsets);
        }
        let due = match self.boundary {
            TransactionBoundary::Poll => true,
            TransactionBoundary::Interval(interval) => {
                state.open.as_ref().is_some_and(|t| t.since.elapsed() >= interval)
            }
        };
        if due { self.commit(ns, &mut state) } else { Ok(()) }
    }

    fn flush(&self, ns: &Namespace) -> anyhow::Result<()> {
        let mut state = self.state.lock().unwrap();
        self.commit(ns, &mut state)
    }
}

impl Drop for KafkaDestination {
    fn drop(&mut self) {
        // Everything deliver() returned for is acknowledged; this only bounds the wait for
        // records of a batch that failed.
        if let Some(producer) = &self.producer {
            let _ = producer.flush(Duration::from_secs(5));
        }
    }
}
