//! `destination=kafka`: records produced to Kafka topics on the worker's `[kafka]`
//! cluster, at-least-once. Every record of a batch is acknowledged (idempotent producer,
//! `acks=all`) before the offsets the batch advances are committed, so a partition's
//! offset never passes a record that was not written (what Connect's `SubmittedRecords`
//! guarantees). A crash between the two re-sends at most that batch.
//!
//! On a worker with exactly-once source support (KIP-618; or with a connector's
//! `exactly.once.support=required`) each task instance has a transactional
//! producer (`transactional.id` `<group.id>-<connector>-<task>`, the connector qualified by
//! its tenant): a transaction holds a poll batch's records and the offsets they advance,
//! written to the offsets topic by the same producer (`transaction.boundary=poll`), or
//! every batch of an interval (`interval`). Starting an instance initialises its id, which
//! fences the task's previous instance wherever it runs; a fenced instance fails with that
//! reason. Offsets are read back `read_committed`. A commit that is never answered is
//! looked up (a new producer with the id, then the offsets topic) before its batch is
//! either counted delivered or sent again.
//!
//! A tenant's connectors whose producer settings are the same (the worker's `[kafka]` and
//! the same `producer.override.*`, usually none) share one producer and one admin client: each
//! librdkafka client keeps its own threads (its main thread, one per broker, rdkafka's
//! polling thread) and connections, busy even while idle, and a worker of hundreds of
//! Kafka connectors had thousands of them. Exactly-once tasks keep their own
//! transactional producers.
//!
//! Topics are made on first use with `topic.creation.default.partitions` and
//! `.replication.factor` (KIP-158). A declared tenant's topics are `<tenant>.<topic>`, so
//! tenants sharing a cluster never write into each other's topics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anyhow::Context;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};

use super::{CommitGate, DeliveryAbandoned, Destination, RetriableDelivery, Skipped};
use crate::config::TransactionBoundary;
use crate::config::{DEFAULT_TENANT, KafkaConfig, KafkaSettings};
use crate::storage::kafka::{
    ClientTrouble, KafkaBackend, KafkaLog, SharedProducer, admin_client, client_config, existing_topics, is_passing,
    offset_key, qualified_name,
};
use crate::storage::{Namespace, OffsetStore, RecordBatch};

/// How long a record may wait for its acknowledgement before the batch is retried (the
/// producer's `message.timeout.ms` unless overridden).
const DELIVERY_TIMEOUT_MS: &str = "120000";
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How old a client error may be and still be given as why a batch waits: librdkafka
/// says a broker's failure again at most about every 30 s while it lasts.
const TROUBLE_RECENT: Duration = Duration::from_secs(60);

pub struct KafkaDestination {
    kafka: KafkaConfig,
    overrides: BTreeMap<String, String>,
    /// Exactly-once: the Kafka storage whose offsets topic transactions write to.
    exactly_once: Option<Arc<KafkaBackend>>,
    /// The at-least-once producer its tasks share (none with exactly-once): after a fatal
    /// error the first task to see it puts a new one in its place and every task sends
    /// its batch again through that (at-least-once: what the old one wrote is written
    /// again), so neither a resend nor a restarted task lands on the stopped producer.
    producer: Option<Arc<SharedProducer>>,
    offsets: Arc<dyn OffsetStore>,
    settings: KafkaSettings,
    topics: Arc<TopicMaker>,
    /// `errors.tolerance=all`: a record Kafka refuses for good is skipped (KIP-779).
    tolerate_refused: bool,
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
        tolerate_refused: bool,
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
        let clients = SharedClients::for_settings(kafka, tenant, config)?;
        // Exactly-once sends through each task's transactional producer only.
        let producer = match exactly_once {
            Some(_) => None,
            None => Some(clients.producer()?),
        };
        let prefix = if tenant == DEFAULT_TENANT { String::new() } else { format!("{tenant}.") };
        let topics = Arc::new(TopicMaker {
            prefix,
            kafka: kafka.clone(),
            clients,
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
            tolerate_refused,
        })
    }

    fn at_least_once(&self, task: u32) -> anyhow::Result<AtLeastOnceTask> {
        let producer = self.producer.clone().context("exactly-once delivers through each task's producer")?;
        Ok(AtLeastOnceTask {
            task,
            producer,
            topics: self.topics.clone(),
            offsets: self.offsets.clone(),
            tolerate_refused: self.tolerate_refused,
        })
    }
}

/// Names a connector's Kafka topics and makes those missing (KIP-158); shared by its
/// task producers.
struct TopicMaker {
    prefix: String,
    /// The worker's settings, whose state topics a plugin's records never go to (they
    /// would be read back as other connectors' offsets, configs or statuses, other
    /// tenants' too).
    kafka: KafkaConfig,
    /// Its admin client, and what its clients' latest error was.
    clients: Arc<SharedClients>,
    settings: KafkaSettings,
    /// Topics known to exist.
    ready: Mutex<HashSet<String>>,
}

impl TopicMaker {
    /// The connector's clients' latest error, if recent enough to be why a batch waits.
    fn waiting_reason(&self) -> Option<String> {
        self.clients.trouble.recent(TROUBLE_RECENT).map(|error| format!("the Kafka client's latest error: {error}"))
    }

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
        // A state topic is never marked ready, so every batch with a record for one is
        // refused here, whether the plugin, a transform or the dead-letter topic named it.
        if let Some((record, topic, key)) =
            topics.iter().enumerate().find_map(|(i, t)| Some((i, t, self.kafka.state_topic_key(t)?)))
        {
            anyhow::bail!(
                "record {record} of the batch is for the topic {topic}, the worker's {key} (where Sluice \
                 keeps its state): a connector may not write to it; choose another topic"
            );
        }
        let existing = existing_topics(&self.clients.admin, ADMIN_TIMEOUT)
            .map_err(|e| RetriableDelivery::wrap(format!("{e:#}")))?;
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
        let results = futures_executor::block_on(self.clients.admin.create_topics(&new, &options))
            .map_err(|e| RetriableDelivery::wrap(format!("cannot create topics: {e}")))?;
        for result in results {
            match result {
                Ok(topic) | Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    tracing::info!("topic {topic} is ready");
                    self.ready.lock().unwrap().insert(topic);
                }
                Err((topic, code)) if is_passing(code) => {
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

/// Sends every record (waiting for room when the producer's queue is full) and returns
/// their delivery futures.
fn send_all(
    producer: &FutureProducer<KafkaLog>,
    records: &RecordBatch,
    topics: &[String],
    gate: &CommitGate,
) -> Result<Vec<DeliveryFuture>, (KafkaError, String)> {
    let all: Vec<usize> = (0..records.len()).collect();
    match send_some(producer, records, topics, &all, gate) {
        (deliveries, None) => Ok(deliveries),
        (_, Some((e, topic, _))) => Err((e, topic)),
    }
}

/// Sends the records at `indices`, in order: the delivery futures of those sent, and when
/// a send failed, why and at which position of `indices` (the records after it are not
/// sent; those before it were, and are reported through their futures).
type SendFailure = (KafkaError, String, usize);
fn send_some(
    producer: &FutureProducer<KafkaLog>,
    records: &RecordBatch,
    topics: &[String],
    indices: &[usize],
    gate: &CommitGate,
) -> (Vec<DeliveryFuture>, Option<SendFailure>) {
    let mut deliveries = Vec::with_capacity(indices.len());
    for (position, &index) in indices.iter().enumerate() {
        let (record, topic) = (records.get(index).expect("an index of the batch"), &topics[index]);
        let mut headers = OwnedHeaders::new_with_capacity(record.headers().len());
        for (key, value) in record.headers() {
            headers = headers.insert(Header { key, value: Some(value) });
        }
        let mut message = FutureRecord::<[u8], [u8]>::to(topic).headers(headers).timestamp(record.timestamp_ms);
        if let Some(key) = record.key {
            message = message.key(key);
        }
        if let Some(value) = record.value {
            message = message.payload(value);
        }
        match send_one(producer, message, gate) {
            Ok(delivery) => deliveries.push(delivery),
            Err((e, topic)) => return (deliveries, Some((e, topic, position))),
        }
    }
    (deliveries, None)
}

/// Sends one record. A full local queue waits for room (the broker is slower than the
/// plugin, or away: then room comes only as queued records time out, after
/// `message.timeout.ms`), unless the task gives the batch up meanwhile (`gate` shut at its
/// stop deadline): then `Canceled`.
fn send_one(
    producer: &FutureProducer<KafkaLog>,
    mut message: FutureRecord<'_, [u8], [u8]>,
    gate: &CommitGate,
) -> Result<DeliveryFuture, (KafkaError, String)> {
    loop {
        match producer.send_result(message) {
            Ok(delivery) => return Ok(delivery),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                if gate.is_shut() {
                    return Err((KafkaError::Canceled, back.topic.to_string()));
                }
                message = back;
                producer.poll(Duration::from_millis(10));
            }
            Err((e, back)) => return Err((e, back.topic.to_string())),
        }
    }
}

impl Destination for KafkaDestination {
    fn for_task(&self, ns: &Namespace, task: u32) -> anyhow::Result<Option<Arc<dyn Destination>>> {
        Ok(Some(match &self.exactly_once {
            Some(backend) => Arc::new(TransactionalTask::start(self, backend.clone(), ns, task)?),
            None => {
                // The task's previous instance may have given a batch up that Kafka may
                // still take: this one starts once it has settled.
                wait_for_settled(ns, task, self.topics.clients.message_timeout());
                Arc::new(self.at_least_once(task)?)
            }
        }))
    }

    fn settling_given_up_batch(&self, ns: &Namespace, task: u32) -> bool {
        self.exactly_once.is_none() && awaited_by(&AWAITED.lock().unwrap(), ns, task)
    }

    fn retire_tasks(&self, ns: &Namespace, tasks: std::ops::Range<u32>) -> anyhow::Result<()> {
        if self.exactly_once.is_none() {
            return Ok(());
        }
        for task in tasks {
            // Initialising the id bumps its epoch: an instance of the task still alive
            // somewhere can no longer commit.
            let id = transactional_id(&self.kafka, ns, task);
            if let Some(backend) = &self.exactly_once {
                backend.claim_transactional_id(&id);
            }
            // Its errors (the fencing it is made for) are nobody's trouble.
            let producer = transactional_producer(&self.kafka, &self.overrides, &id, KafkaLog::default())?;
            producer
                .init_transactions(TRANSACTION_TIMEOUT)
                .map_err(|e| anyhow::anyhow!("cannot fence the retired task {task}: {e}"))?;
        }
        Ok(())
    }

    fn deliver(
        &self,
        ns: &Namespace,
        records: &RecordBatch,
        offsets: &[(String, String)],
        gate: &CommitGate,
    ) -> anyhow::Result<Skipped> {
        self.at_least_once(u32::MAX)?.deliver(ns, records, offsets, gate)
    }

    fn commit_written(&self, ns: &Namespace, offsets: &[(String, String)], gate: &CommitGate) -> anyhow::Result<()> {
        super::commit_written_offsets(&*self.offsets, ns, offsets, gate)
    }
}

/// How long a task keeps sending again records Kafka did not take before it fails.
const RESEND_FOR: Duration = Duration::from_secs(300);

/// One task's at-least-once delivery: a batch is sent, every record of it acknowledged,
/// then its offsets committed, before `deliver` returns, so an offset never passes a
/// record Kafka has not acknowledged (Connect's `SubmittedRecords`) and a crash sends at
/// most one batch per task again. (Keeping many batches in flight measured 1.1x a bare
/// producer instead of 0.75x on nisshi, but would re-send all of them; see docs/kafka.md.)
struct AtLeastOnceTask {
    task: u32,
    producer: Arc<SharedProducer>,
    topics: Arc<TopicMaker>,
    offsets: Arc<dyn OffsetStore>,
    tolerate_refused: bool,
}

/// Why Kafka did not take a batch: for a while (a broker away, a leader moving), or for
/// good (a record too large, a topic it refuses), which no resend mends.
enum Refusal {
    ForNow(String),
    ForGood(String),
}

impl Refusal {
    fn of(error: &KafkaError, topic: &str) -> Refusal {
        match error.rdkafka_error_code() {
            Some(code) if refused_for_good(code) => Refusal::ForGood(match code {
                RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize => format!(
                    "it is larger than Kafka takes for {topic} ({error}): the producer's message.max.bytes \
                     (librdkafka's default 1000000; producer.override.message.max.bytes) and the topic's \
                     max.message.bytes bound a record; set sandbox.record.max.bytes below them to have \
                     such records refused before they are sent (errors.tolerance=all then skips them too)"
                ),
                _ => format!("Kafka refuses records for {topic}: {error}"),
            }),
            _ => Refusal::ForNow(error.to_string()),
        }
    }
}

/// Errors a resend of the same records cannot get past.
fn refused_for_good(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        code,
        MessageSizeTooLarge
            | InvalidMessageSize
            | InvalidTopic
            | TopicAuthorizationFailed
            | ClusterAuthorizationFailed
            | PolicyViolation
            | InvalidRecord
            | InvalidRequiredAcks
            | InvalidArgument
    )
}

/// How the records of one batch stand with Kafka while it is sent.
struct Sending {
    /// Records not acknowledged yet, in the batch's order: sent (again) on the next try.
    pending: Vec<usize>,
    /// Records Kafka refused for good, each with why.
    refused: Vec<(usize, String)>,
    /// Records handed to the producer and not answered when the task gave the batch up.
    outstanding: Vec<(usize, DeliveryFuture)>,
}

/// A record named as its source partition and offset (what `sluice offsets` shows), for
/// a trace or a log line.
fn named(records: &RecordBatch, index: usize) -> String {
    match records.get(index) {
        Some(record) => format!("the record of source partition {} at offset {}", record.partition, record.offset),
        None => format!("record {index}"),
    }
}

impl AtLeastOnceTask {
    /// Sends `records` until Kafka has taken every one (after the producer's own retries
    /// for `message.timeout.ms`, the records not acknowledged again, in order), for
    /// [`RESEND_FOR`] at most; an acknowledged record is never sent again. A record Kafka
    /// refuses for good (too large) is skipped under `errors.tolerance=all` (returned, with
    /// why), and otherwise fails the batch. A stop that gives up on the batch (`gate` shut
    /// at its deadline) ends the wait at once, the batch not committed, so a worker stops
    /// in its stop deadline while the cluster is away rather than when the resends run out.
    fn send_until_taken(
        &self,
        records: &RecordBatch,
        topics: &[String],
        gate: &CommitGate,
    ) -> Result<Vec<(usize, String)>, Sending> {
        let started = std::time::Instant::now();
        let mut attempt = 0u32;
        let mut sending =
            Sending { pending: (0..records.len()).collect(), refused: Vec::new(), outstanding: Vec::new() };
        loop {
            let producer = self.producer.get();
            let mut still = Vec::new();
            let mut for_now: Option<String> = None;
            let (sent, unsent) = send_some(&producer, records, topics, &sending.pending, gate);
            // A send that failed part way: the records before it were sent and are waited
            // for below; it and those after it were not sent.
            let sent_indices = sending.pending[..sent.len()].to_vec();
            if let Some((e, topic, position)) = unsent {
                let (failed, after) = (sending.pending[position], &sending.pending[position + 1..]);
                match Refusal::of(&e, &topic) {
                    Refusal::ForGood(reason) => sending.refused.push((failed, reason)),
                    Refusal::ForNow(reason) => {
                        for_now = Some(reason);
                        still.push(failed);
                    }
                }
                still.extend_from_slice(after);
            }
            let mut sent = sent.into_iter().zip(sent_indices);
            while let Some((mut delivery, index)) = sent.next() {
                match wait_for_delivery(&mut delivery, gate) {
                    Err(_) => {
                        // Given up on: what is not answered yet may still be taken.
                        still.sort_unstable();
                        sending.pending = still;
                        sending.outstanding =
                            std::iter::once((index, delivery)).chain(sent.map(|(d, i)| (i, d))).collect();
                        return Err(sending);
                    }
                    Ok(Ok(Ok(_))) => {}
                    Ok(Ok(Err((e, _)))) => match Refusal::of(&e, &topics[index]) {
                        Refusal::ForGood(reason) => sending.refused.push((index, reason)),
                        Refusal::ForNow(reason) => {
                            still.push(index);
                            for_now.get_or_insert(reason);
                        }
                    },
                    Ok(Err(_)) => {
                        still.push(index);
                        for_now.get_or_insert_with(|| "the producer went away".to_string());
                    }
                }
            }
            // Sent again from the first record of each source partition Kafka did not take,
            // in the batch's order, those it took after it too: librdkafka may write a
            // partition's later records when earlier ones time out (its gaps), and a
            // consumer that keeps the latest value of a key must see them last.
            sending.pending = from_first_untaken(records, &still, &sending.refused);
            if (!sending.refused.is_empty() && !self.tolerate_refused) || gate.is_shut() {
                return Err(sending);
            }
            if sending.pending.is_empty() {
                sending.refused.sort();
                return Ok(sending.refused);
            }
            let Some(reason) = for_now else {
                continue; // the records after one refused at its send (and skipped)
            };
            let reason = match self.producer.replace_if_fatal(&producer) {
                Ok(Some(fatal)) => format!("the producer stopped for good: {fatal}; a new producer sends it"),
                Ok(None) => reason,
                Err(e) => {
                    sending.refused.push((usize::MAX, format!("{e:#}")));
                    return Err(sending);
                }
            };
            if started.elapsed() >= RESEND_FOR {
                sending.refused.push((
                    usize::MAX,
                    format!(
                        "Kafka did not take records for {RESEND_FOR:?} ({reason}); the task resumes from its committed offsets when restarted"
                    ),
                ));
                return Err(sending);
            }
            let delay = Duration::from_secs(1u64 << attempt.min(5)).min(Duration::from_secs(30));
            attempt += 1;
            tracing::warn!(
                "Kafka did not take {} record(s) of a batch ({reason}); sending them again in {delay:?}",
                sending.pending.len()
            );
            let resend_at = std::time::Instant::now() + delay;
            while std::time::Instant::now() < resend_at {
                if gate.is_shut() {
                    return Err(sending);
                }
                std::thread::sleep(GATE_LOOK.min(resend_at.saturating_duration_since(std::time::Instant::now())));
            }
        }
    }

    /// The offsets a batch that failed part way may still commit: for each source
    /// partition, up to its last record before the first one of it Kafka did not take (as
    /// Connect's `SubmittedRecords` commits an acknowledged prefix). The records before a
    /// refused one are then not sent again when the task restarts and fails on it again.
    fn taken_offsets(records: &RecordBatch, offsets: &[(String, String)], sending: &Sending) -> Vec<(String, String)> {
        let untaken: Vec<usize> =
            sending.pending.iter().chain(sending.refused.iter().map(|(i, _)| i)).copied().collect();
        taken_prefix(records.iter().map(|r| (r.partition, r.offset)), &untaken, offsets)
    }
}

/// The indices of `records` to send again: those in `untaken`, and every record after the
/// first of them of the same source partition, but those refused for good.
fn from_first_untaken(records: &RecordBatch, untaken: &[usize], refused: &[(usize, String)]) -> Vec<usize> {
    let untaken: HashSet<usize> = untaken.iter().copied().collect();
    let refused: HashSet<usize> = refused.iter().map(|(index, _)| *index).collect();
    let mut stopped: HashSet<&str> = HashSet::new();
    let mut again = Vec::new();
    for (index, record) in records.iter().enumerate() {
        if untaken.contains(&index) {
            stopped.insert(record.partition);
            again.push(index);
        } else if stopped.contains(record.partition) && !refused.contains(&index) {
            again.push(index);
        }
    }
    again
}

/// [`AtLeastOnceTask::taken_offsets`] over each record's (source partition, offset), with
/// the indices of the records Kafka did not take.
fn taken_prefix<'a>(
    records: impl Iterator<Item = (&'a str, &'a str)>,
    untaken_indices: &[usize],
    offsets: &[(String, String)],
) -> Vec<(String, String)> {
    let untaken: HashSet<usize> = untaken_indices.iter().copied().collect();
    {
        let mut stopped: HashSet<&str> = HashSet::new();
        let mut taken: HashMap<&str, &str> = HashMap::new();
        for (index, (partition, offset)) in records.enumerate() {
            if stopped.contains(partition) {
                continue;
            }
            if untaken.contains(&index) {
                stopped.insert(partition);
            } else {
                taken.insert(partition, offset);
            }
        }
        offsets
            .iter()
            .filter(|(partition, _)| !stopped.contains(partition.as_str()))
            .cloned()
            .chain(
                taken
                    .into_iter()
                    // A partition the batch commits nothing for (a dead-letter copy's `{}`)
                    // commits nothing here either; an offset as the batch's are written.
                    .filter(|(partition, _)| stopped.contains(partition) && offsets.iter().any(|(p, _)| p == partition))
                    .map(|(p, o)| {
                        (p.to_string(), crate::storage::json::canonical_object(o).unwrap_or_else(|_| o.to_string()))
                    }),
            )
            .collect()
    }
}

/// Waits for the answers to a given-up batch's records still outstanding (up to
/// `message.timeout.ms`), then commits the offsets of what Kafka took.
fn settle_given_up(
    mut sending: Sending,
    keys: &[(String, String)],
    offsets: &[(String, String)],
    store: &dyn OffsetStore,
    ns: &Namespace,
) {
    let outstanding = std::mem::take(&mut sending.outstanding);
    if !outstanding.is_empty() {
        tracing::info!(
            connector = %ns.connector,
            "{} record(s) of a batch given up on are still with the Kafka producer: their offsets are committed if Kafka takes them, before the task starts again",
            outstanding.len()
        );
    }
    for (index, delivery) in outstanding {
        if !matches!(futures_executor::block_on(delivery), Ok(Ok(_))) {
            sending.pending.push(index);
        }
    }
    sending.refused.iter().for_each(|&(index, _)| sending.pending.push(index));
    let taken = taken_prefix(keys.iter().map(|(p, o)| (p.as_str(), o.as_str())), &sending.pending, offsets);
    if !taken.is_empty()
        && let Err(e) = store.commit_offsets(ns, &taken)
    {
        tracing::warn!(connector = %ns.connector, "the offsets of records Kafka took from a batch given up on were not committed (they are sent again): {e:#}");
    }
}

/// What a task's next instance, or a change of the connector's offsets, waits for in this
/// worker, whatever destination made it (a connector stopped and resumed, or reconfigured,
/// has a new one): a task's delivery under way, and a batch given up on until Kafka has
/// answered for what the producer holds of it. A given-up batch is the connector's: a file
/// or other source partition may move to another task on a reconfiguration.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Awaited {
    Delivery { tenant: String, connector: String, task: u32 },
    GivenUp { tenant: String, connector: String },
}

impl Awaited {
    fn delivery(ns: &Namespace, task: u32) -> Awaited {
        Awaited::Delivery { tenant: ns.tenant.clone(), connector: ns.connector.clone(), task }
    }

    fn given_up(ns: &Namespace) -> Awaited {
        Awaited::GivenUp { tenant: ns.tenant.clone(), connector: ns.connector.clone() }
    }

    fn of(&self, ns: &Namespace) -> bool {
        let (Awaited::Delivery { tenant, connector, .. } | Awaited::GivenUp { tenant, connector }) = self;
        *tenant == ns.tenant && *connector == ns.connector
    }
}

static AWAITED: Mutex<BTreeMap<Awaited, usize>> = Mutex::new(BTreeMap::new());
static SETTLED: std::sync::Condvar = std::sync::Condvar::new();

/// One [`Awaited`], counted while this lives.
struct Awaiting(Awaited);

impl Awaiting {
    fn start(awaited: Awaited) -> Awaiting {
        *AWAITED.lock().unwrap().entry(awaited.clone()).or_default() += 1;
        Awaiting(awaited)
    }
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        let mut awaited = AWAITED.lock().unwrap();
        if let Some(count) = awaited.get_mut(&self.0) {
            *count -= 1;
            if *count == 0 {
                awaited.remove(&self.0);
            }
        }
        SETTLED.notify_all();
    }
}

/// Whether the task's next instance would wait: its delivery under way, or a batch of the
/// connector given up on.
fn awaited_by(awaited: &BTreeMap<Awaited, usize>, ns: &Namespace, task: u32) -> bool {
    awaited.contains_key(&Awaited::delivery(ns, task)) || awaited.contains_key(&Awaited::given_up(ns))
}

/// Whether a delivery of a task of `ns` is under way: a batch a task gave up on whose
/// records Kafka may still take (its offsets are committed when it answers). Offsets are
/// not changed meanwhile, or that commit would undo the change.
pub fn delivery_under_way(ns: &Namespace) -> bool {
    AWAITED.lock().unwrap().keys().any(|awaited| awaited.of(ns))
}

/// Waits until no delivery of `task` is under way and no batch any task of the connector
/// gave up on is still awaited (a reconfiguration moves source partitions between tasks),
/// for `timeout` at most (`None`: until then).
fn wait_for_settled(ns: &Namespace, task: u32, timeout: Option<Duration>) {
    let deadline = timeout.map(|timeout| std::time::Instant::now() + timeout + Duration::from_secs(10));
    let mut awaited = AWAITED.lock().unwrap();
    let mut said = false;
    while awaited_by(&awaited, ns, task) {
        let left = deadline.map_or(Duration::from_secs(1), |d| d.saturating_duration_since(std::time::Instant::now()));
        if left.is_zero() {
            tracing::warn!(connector = %ns.connector, task, "starting although a batch a task of this connector gave up on is still with the Kafka producer");
            return;
        }
        if !said {
            tracing::info!(connector = %ns.connector, task, "waiting for Kafka to answer for a batch a task of this connector gave up on before starting it");
            said = true;
        }
        awaited = SETTLED.wait_timeout(awaited, left.min(Duration::from_secs(1))).unwrap().0;
    }
}

/// How often a wait on Kafka looks whether its task gave the batch up.
const GATE_LOOK: Duration = Duration::from_millis(100);

/// A record's delivery report, or [`DeliveryAbandoned`] once `gate` is shut: a record
/// Kafka does not answer is waited for up to `message.timeout.ms` (2 minutes). Waits on
/// this thread (the task's delivery lane), woken by the report or every [`GATE_LOOK`].
fn wait_for_delivery(
    delivery: &mut DeliveryFuture,
    gate: &CommitGate,
) -> anyhow::Result<<DeliveryFuture as std::future::Future>::Output> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = std::task::Context::from_waker(&waker);
    loop {
        if let std::task::Poll::Ready(report) =
            std::future::Future::poll(std::pin::Pin::new(&mut *delivery), &mut context)
        {
            return Ok(report);
        }
        if gate.is_shut() {
            return Err(DeliveryAbandoned.into());
        }
        std::thread::park_timeout(GATE_LOOK);
    }
}

impl Destination for AtLeastOnceTask {
    fn waiting_reason(&self) -> Option<String> {
        self.topics.waiting_reason()
    }

    fn deliver(
        &self,
        ns: &Namespace,
        records: &RecordBatch,
        offsets: &[(String, String)],
        gate: &CommitGate,
    ) -> anyhow::Result<Skipped> {
        let topics: Vec<String> = records.iter().map(|r| self.topics.name(r.topic)).collect();
        self.topics.ensure(&topics)?;
        let under_way = Awaiting::start(Awaited::delivery(ns, self.task));
        if gate.is_shut() {
            return Err(DeliveryAbandoned.into());
        }
        match self.send_until_taken(records, &topics, gate) {
            Err(sending) if gate.is_shut() => {
                // Given up on at the stop deadline (a broker away longer than it): records
                // handed to the producer may still reach Kafka when it is back. What Kafka
                // takes is committed once answered, and the task's next instance starts
                // only then, from those offsets: sent once, not again by it.
                let keys: Vec<(String, String)> =
                    records.iter().map(|r| (r.partition.to_string(), r.offset.to_string())).collect();
                let (store, ns, offsets) = (self.offsets.clone(), ns.clone(), offsets.to_vec());
                // The producer stays while it holds them: a dropped one purges its queue.
                let (producer, topics) = (self.producer.clone(), self.topics.clone());
                let given_up = Awaiting::start(Awaited::given_up(&ns));
                std::thread::spawn(move || {
                    settle_given_up(sending, &keys, &offsets, &*store, &ns);
                    drop((given_up, under_way, producer, topics));
                });
                Err(DeliveryAbandoned.into())
            }
            Ok(skipped) => {
                match self.commit_written(ns, offsets, gate) {
                    Err(e) if e.is::<DeliveryAbandoned>() => {
                        // Taken, and given up on just after: committed all the same (the
                        // task's next instance waits for this delivery), or it is sent again.
                        if let Err(e) = self.offsets.commit_offsets(ns, offsets) {
                            tracing::warn!(connector = %ns.connector, "the offsets of a batch Kafka took as the task gave it up were not committed (it is sent again): {e:#}");
                        }
                        return Err(e);
                    }
                    committed => committed?,
                }
                let skipped = skipped
                    .into_iter()
                    .map(|(index, reason)| format!("Kafka refused {}: {reason}", named(records, index)))
                    .collect();
                Ok(Skipped(skipped))
            }
            Err(sending) => {
                let taken = Self::taken_offsets(records, offsets, &sending);
                if !taken.is_empty() {
                    // What Kafka took stays taken: without its offsets, a restart that
                    // failed on the same record sent the records before it every time.
                    if let Err(e) = gate
                        .commit(|| self.offsets.commit_offsets(ns, &taken))
                        .map_err(anyhow::Error::from)
                        .and_then(|r| r)
                    {
                        tracing::warn!(
                            "the offsets of the records Kafka took before the failure were not committed: {e:#}"
                        );
                    }
                }
                let (index, reason) = sending.refused.into_iter().min().unwrap_or((usize::MAX, "not taken".into()));
                match index {
                    usize::MAX => anyhow::bail!("{reason}"),
                    index => anyhow::bail!("Kafka refused {}: {reason}", named(records, index)),
                }
            }
        }
    }

    fn commit_written(&self, ns: &Namespace, offsets: &[(String, String)], gate: &CommitGate) -> anyhow::Result<()> {
        super::commit_written_offsets(&*self.offsets, ns, offsets, gate)
    }
}

/// How long transactional calls (init, abort) may take, and Sluice's
/// `transaction.timeout.ms`.
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// A connector's `transaction.timeout.ms` (a `producer.override`, else Sluice's 60 s): how
/// long one try at committing is waited for, after which the coordinator would abort a
/// transaction it has not been asked to commit.
pub fn transaction_timeout(overrides: &BTreeMap<String, String>) -> Duration {
    overrides
        .get("transaction.timeout.ms")
        .and_then(|ms| ms.parse().ok())
        .map_or(TRANSACTION_TIMEOUT, Duration::from_millis)
}

/// KIP-618's `<group.id>-<connector>-<task>`, the connector qualified by its tenant.
pub fn transactional_id(kafka: &KafkaConfig, ns: &Namespace, task: u32) -> String {
    format!("{}-{}-{task}", kafka.group_id, qualified_name(ns))
}

fn transactional_producer(
    kafka: &KafkaConfig,
    overrides: &BTreeMap<String, String>,
    id: &str,
    context: KafkaLog,
) -> anyhow::Result<FutureProducer<KafkaLog>> {
    let mut config = client_config(
        kafka,
        &[
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("partitioner", "murmur2_random"),
            ("transactional.id", id),
            ("transaction.timeout.ms", &TRANSACTION_TIMEOUT.as_millis().to_string()),
        ],
    );
    for (key, value) in overrides {
        config.set(key, value);
    }
    config
        .create_with_context(context)
        .map_err(|e| anyhow::anyhow!("cannot make a transactional Kafka producer ({id}): {e}"))
}

/// One task instance's transactional producer and its open transaction.
struct TransactionalTask {
    id: String,
    /// This instance's claim on the id (raised once a newer instance claims it).
    instance: Arc<std::sync::atomic::AtomicBool>,
    backend: Arc<KafkaBackend>,
    /// The connector's topic names and creation.
    topics: Arc<TopicMaker>,
    boundary: TransactionBoundary,
    commit_wait: Duration,
    /// Makes (and initialises) this task's producer again when one cannot finish an abort.
    new_producer: Box<dyn Fn() -> anyhow::Result<FutureProducer<KafkaLog>> + Send + Sync>,
    /// The latest error of this task's producers.
    trouble: Arc<ClientTrouble>,
    state: Mutex<TransactionState>,
}

struct TransactionState {
    producer: FutureProducer<KafkaLog>,
    open: Option<OpenTransaction>,
    /// A transaction whose commit was asked for but never answered: the coordinator may
    /// have committed it or not. Looked up ([`TransactionalTask::settle`]) before anything
    /// else is sent: sending its batch again blindly could write it twice, and resuming
    /// from the offsets known before it could too.
    unsettled: Option<OpenTransaction>,
}

/// What a transaction whose commit went unanswered turned out to be.
enum Settled {
    Committed,
    Aborted,
}

struct OpenTransaction {
    since: std::time::Instant,
    offsets: Vec<(String, String)>,
    /// Batches sent in it (and reported delivered to the task's runner).
    batches: usize,
}

impl TransactionalTask {
    fn start(parent: &KafkaDestination, backend: Arc<KafkaBackend>, ns: &Namespace, task: u32) -> anyhow::Result<Self> {
        let id = transactional_id(&parent.kafka, ns, task);
        let superseded = backend.claim_transactional_id(&id);
        let (kafka, overrides, made_id, instance) =
            (parent.kafka.clone(), parent.overrides.clone(), id.clone(), superseded.clone());
        // The task's own: another task's errors (its fencing of its previous instance) are
        // not why this one waits.
        let trouble = Arc::new(ClientTrouble::default());
        let context = KafkaLog::noting(trouble.clone());
        let new_producer = Box::new(move || {
            // An instance given up on may still be working (its commit waiting on a broker
            // that is away) when the task's next one starts: initialising the id then
            // would fence the next one.
            if superseded.load(std::sync::atomic::Ordering::Acquire) {
                anyhow::bail!(
                    "transactional.id {made_id}: a newer instance of this task started in this worker; this one stops without a new producer"
                );
            }
            let producer = transactional_producer(&kafka, &overrides, &made_id, context.clone())?;
            producer.init_transactions(TRANSACTION_TIMEOUT).map_err(|e| classify(&made_id, e))?;
            Ok(producer)
        });
        let producer = new_producer()?;
        Ok(TransactionalTask {
            id,
            instance,
            backend,
            topics: parent.topics.clone(),
            boundary: parent.settings.transaction_boundary,
            commit_wait: transaction_timeout(&parent.overrides),
            new_producer,
            trouble,
            state: Mutex::new(TransactionState { producer, open: None, unsettled: None }),
        })
    }

    fn commit(&self, ns: &Namespace, state: &mut TransactionState) -> anyhow::Result<()> {
        let Some(transaction) = state.open.take() else { return Ok(()) };
        let partitions: Vec<String> = transaction.offsets.iter().map(|(p, _)| p.clone()).collect();
        self.backend.commit_started(&self.id, &self.instance, ns, partitions.clone());
        let mut attempts = 0;
        let committed = loop {
            attempts += 1;
            match state.producer.commit_transaction(self.commit_wait) {
                // A commit that timed out or hit a passing error may simply be called again.
                Err(KafkaError::Transaction(e)) if e.is_retriable() && attempts < 3 => continue,
                Err(KafkaError::Flush(_)) if attempts < 3 => continue,
                result => break result,
            }
        };
        self.backend.commit_ended(&self.id, &self.instance);
        match committed {
            Ok(()) => {
                self.backend.remember_offsets(ns, &transaction.offsets);
                Ok(())
            }
            Err(e) => {
                // Whatever the error, its offsets are read from the topic next time: a try
                // before the last may have reached the coordinator, and an instance that
                // ends here (fenced, fatal) never looks the outcome up itself.
                self.backend.doubt_offsets(ns, &partitions);
                // An error that needs an abort (librdkafka's `txn_requires_abort`) is an
                // answer: the transaction cannot commit. Any other (the commit timed out
                // every time) leaves the outcome unknown.
                let answered = matches!(&e, KafkaError::Transaction(e) if e.txn_requires_abort());
                let error = classify(&self.id, e);
                if !RetriableDelivery::is(&error) {
                    return Err(error);
                }
                if answered {
                    // Nothing of it is visible to read_committed readers, and its offsets
                    // were not committed: the batch is sent again in a new transaction.
                    self.abort(state)?;
                    return Err(self.aborted(error));
                }
                tracing::warn!(
                    "{error:#}: the commit's outcome is not known; looking it up before anything is sent again"
                );
                state.unsettled = Some(transaction);
                match self.settle(ns, state)? {
                    Settled::Committed => Ok(()),
                    Settled::Aborted => Err(self.aborted(error)),
                }
            }
        }
    }

    /// The error for a transaction that did not commit: with `transaction.boundary=poll`
    /// it held only the batch being delivered, which is sent again; with `interval` it
    /// also held batches the runner already counted as delivered, so the task resumes
    /// from its committed offsets instead.
    fn aborted(&self, error: anyhow::Error) -> anyhow::Error {
        match self.boundary {
            TransactionBoundary::Poll => error,
            TransactionBoundary::Interval(_) => anyhow::anyhow!(
                "the transaction was aborted ({error:#}); the task resumes from its committed offsets when restarted"
            ),
        }
    }

    /// Settles an unanswered commit, if there is one, before anything else is sent or
    /// committed: whether it had committed. One that had not is an error with `interval`
    /// (its earlier batches are gone, see [`Self::aborted`]); with `poll` the runner still
    /// holds its one batch and sends it again.
    fn settle_first(&self, ns: &Namespace, state: &mut TransactionState) -> anyhow::Result<bool> {
        if state.unsettled.is_none() {
            return Ok(false);
        }
        match (self.settle(ns, state)?, self.boundary) {
            (Settled::Committed, _) => Ok(true),
            (Settled::Aborted, TransactionBoundary::Interval(_)) => {
                Err(self.aborted(anyhow::anyhow!("its commit went unanswered")))
            }
            (Settled::Aborted, TransactionBoundary::Poll) => Ok(false),
        }
    }

    /// Finds out what became of the transaction whose commit went unanswered: a new
    /// producer with this task's `transactional.id` starts only once the coordinator has
    /// finished it (completing a commit it had been asked for, aborting it otherwise), and
    /// then the offsets topic, read `read_committed`, holds its offsets or not. Until both
    /// work, it stays unsettled and the batch waits (a retriable error).
    fn settle(&self, ns: &Namespace, state: &mut TransactionState) -> anyhow::Result<Settled> {
        let Some(transaction) = &state.unsettled else { return Ok(Settled::Aborted) };
        // Fenced (another instance took over): the task fails, and the offsets stay
        // doubtful, so whoever reads them next reads the topic.
        state.producer = (self.new_producer)()?;
        let mut last: BTreeMap<&str, &str> = BTreeMap::new();
        for (partition, offset) in &transaction.offsets {
            last.insert(partition, offset);
        }
        let partitions: Vec<String> = last.keys().map(|p| p.to_string()).collect();
        let found = self.backend.reread_offsets(ns, &partitions).map_err(|e| {
            RetriableDelivery::wrap(format!(
                "transactional.id {}: the outcome of a commit is not known yet ({e:#}); it is looked up again before anything is sent",
                self.id
            ))
        })?;
        // A transaction with no offsets cannot be told apart: its records are sent again
        // (at least once, as without exactly-once).
        let committed = !last.is_empty()
            && last.values().zip(&found).all(|(offset, found)| {
                found.as_deref() == crate::storage::json::canonical_object(offset).ok().as_deref()
            });
        state.unsettled = None;
        if committed {
            tracing::info!("transactional.id {}: the unanswered commit had committed", self.id);
            Ok(Settled::Committed)
        } else {
            tracing::warn!("transactional.id {}: the unanswered commit had not committed; sending again", self.id);
            Ok(Settled::Aborted)
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
    let code = match &error {
        KafkaError::Transaction(e) => Some(e.code()),
        other => other.rdkafka_error_code(),
    };
    if matches!(
        code,
        Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed | RDKafkaErrorCode::ClusterAuthorizationFailed)
    ) {
        // Not a newer instance: the broker will not let this principal use transactions.
        anyhow::anyhow!(
            "fenced or fatal: {error} (transactional.id {id}: the cluster refuses this producer transactions: \
             allow its principal Write on the transactional id (and IdempotentWrite on the cluster), or run this \
             worker without exactly.once.source.support if the broker has no transactions)"
        )
    } else if fatal {
        anyhow::anyhow!(
            "fenced or fatal: {error} (transactional.id {id}: a newer instance of this task took over, or the producer cannot go on)"
        )
    } else {
        RetriableDelivery::wrap(format!("transaction of {id}: {error}"))
    }
}

impl Destination for TransactionalTask {
    fn waiting_reason(&self) -> Option<String> {
        match self.trouble.recent(TROUBLE_RECENT) {
            Some(error) => Some(format!("the Kafka client's latest error: {error}")),
            None => self.topics.waiting_reason(),
        }
    }

    /// `gate` is not needed to keep a batch given up on from committing: the task's next
    /// instance's producer fences this one (its `init_transactions` aborts whatever this one
    /// left open). It only ends a wait for room in a full queue.
    fn deliver(
        &self,
        ns: &Namespace,
        records: &RecordBatch,
        offsets: &[(String, String)],
        gate: &CommitGate,
    ) -> anyhow::Result<Skipped> {
        self.deliver_in_transaction(ns, records, offsets, gate).map(|()| Skipped::default())
    }

    fn flush(&self, ns: &Namespace) -> anyhow::Result<()> {
        let mut state = self.state.lock().unwrap();
        self.settle_first(ns, &mut state)?;
        self.commit(ns, &mut state)
    }
}

impl TransactionalTask {
    fn deliver_in_transaction(
        &self,
        ns: &Namespace,
        records: &RecordBatch,
        offsets: &[(String, String)],
        gate: &CommitGate,
    ) -> anyhow::Result<()> {
        let topics: Vec<String> = records.iter().map(|r| self.topics.name(r.topic)).collect();
        self.topics.ensure(&topics)?;
        let mut state = self.state.lock().unwrap();
        // The batch the runner gives again after an unanswered commit is the last one of
        // that transaction: delivered if it committed.
        if self.settle_first(ns, &mut state)? {
            return Ok(());
        }
        if state.open.is_none() {
            if let Err(e) = state.producer.begin_transaction() {
                let error = classify(&self.id, e);
                if RetriableDelivery::is(&error) {
                    self.abort(&mut state)?;
                }
                return Err(error);
            }
            state.open = Some(OpenTransaction { since: std::time::Instant::now(), offsets: Vec::new(), batches: 0 });
        }
        let keys =
            offsets.iter().map(|(partition, _)| offset_key(ns, partition)).collect::<anyhow::Result<Vec<_>>>()?;
        let sent = send_all(&state.producer, records, &topics, gate).and_then(|mut deliveries| {
            for ((_, offset), key) in offsets.iter().zip(&keys) {
                let record = FutureRecord::<[u8], [u8]>::to(self.backend.offsets_topic())
                    .key(key.as_slice())
                    .payload(offset.as_bytes());
                deliveries.push(send_one(&state.producer, record, gate)?);
            }
            Ok(deliveries)
        });
        if let Err((e, topic)) = sent {
            if gate.is_shut() {
                // Given up on: the next instance's start aborts what this one left open.
                return Err(DeliveryAbandoned.into());
            }
            let held_earlier = state.open.as_ref().is_some_and(|t| t.batches > 0);
            self.abort(&mut state)?;
            let e = match Refusal::of(&e, &topic) {
                // A record Kafka will never take (too large, say) fails the task with why,
                // as at-least-once does, rather than be sent again in a new transaction
                // for ever.
                Refusal::ForGood(reason) => anyhow::bail!("Kafka refused a record: {reason}"),
                Refusal::ForNow(_) => format!("cannot produce to {topic}: {e}"),
            };
            if held_earlier {
                // The abort also took back batches the runner already counted as delivered
                // (transaction.boundary=interval): sending only this one again would skip
                // them. The task resumes from its committed offsets instead.
                anyhow::bail!(
                    "a send failed ({e}) and the open transaction, with the batches sent in it before, \
                     was aborted; the task resumes from its committed offsets when restarted"
                );
            }
            return Err(RetriableDelivery::wrap(e));
        }
        if let Some(transaction) = state.open.as_mut() {
            transaction.offsets.extend_from_slice(offsets);
            transaction.batches += 1;
        }
        let due = match self.boundary {
            TransactionBoundary::Poll => true,
            TransactionBoundary::Interval(interval) => {
                state.open.as_ref().is_some_and(|t| t.since.elapsed() >= interval)
            }
        };
        if due { self.commit(ns, &mut state) } else { Ok(()) }
    }
}

/// A producer's librdkafka settings, names sorted.
type ClientSettings = Vec<(String, String)>;

/// The clients connectors with the same producer settings share, and their latest error.
/// A connector's producer is shared with others, so it is not flushed when the connector
/// goes: everything `deliver` returned for is acknowledged already, and a batch that failed
/// is sent again by the connector's next run.
struct SharedClients {
    settings: ClientConfig,
    trouble: Arc<ClientTrouble>,
    admin: AdminClient<KafkaLog>,
    /// Made on first use: exactly-once connectors never use it.
    producer: Mutex<Option<Arc<SharedProducer>>>,
}

impl SharedClients {
    /// The clients of `settings` (the connector's producer settings), made if no
    /// connector uses them now.
    /// Per tenant: one tenant's full queue, fatal producer error or connection trouble is
    /// never another's.
    fn for_settings(kafka: &KafkaConfig, tenant: &str, settings: ClientConfig) -> anyhow::Result<Arc<SharedClients>> {
        static IN_USE: Mutex<Option<HashMap<ClientSettings, Weak<SharedClients>>>> = Mutex::new(None);
        let mut key: ClientSettings =
            settings.config_map().into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        key.push(("<tenant>".into(), tenant.into()));
        // The clients in use for `key`, or (given `made`) those now kept for it.
        let kept = |key: &ClientSettings, made: Option<&Arc<SharedClients>>| {
            let mut in_use = IN_USE.lock().unwrap();
            let in_use = in_use.get_or_insert_with(HashMap::new);
            in_use.retain(|_, clients| clients.strong_count() > 0);
            match (in_use.get(key).and_then(Weak::upgrade), made) {
                (None, Some(made)) => {
                    in_use.insert(key.clone(), Arc::downgrade(made));
                    Some(made.clone())
                }
                (found, _) => found,
            }
        };
        if let Some(clients) = kept(&key, None) {
            return Ok(clients);
        }
        // Made without the lock (a client's start may take a while: SSL stores, SASL), so
        // two connectors may make one each; the first one kept is the one both use.
        let trouble = Arc::new(ClientTrouble::default());
        let admin = admin_client(kafka, KafkaLog::noting(trouble.clone()))?;
        let made = Arc::new(SharedClients { settings, trouble, admin, producer: Mutex::default() });
        Ok(kept(&key, Some(&made)).expect("kept or found"))
    }

    /// How long the producer tries a record (`message.timeout.ms`; `None`: for ever).
    fn message_timeout(&self) -> Option<Duration> {
        let ms = self.settings.get("message.timeout.ms").and_then(|ms| ms.trim().parse::<u64>().ok());
        match ms.unwrap_or(120_000) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    fn producer(&self) -> anyhow::Result<Arc<SharedProducer>> {
        let mut producer = self.producer.lock().unwrap();
        if let Some(producer) = producer.as_ref() {
            return Ok(producer.clone());
        }
        let context = KafkaLog::noting(self.trouble.clone());
        let made = Arc::new(SharedProducer::new(self.settings.clone(), context, "cannot make a Kafka producer")?);
        *producer = Some(made.clone());
        Ok(made)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Record;

    fn batch(records: &[(&str, &str)]) -> RecordBatch {
        let records: Vec<Record> = records
            .iter()
            .map(|(partition, offset)| Record {
                topic: "t".into(),
                partition: (*partition).into(),
                offset: (*offset).into(),
                key: None,
                value: None,
                headers: Vec::new(),
                timestamp_ms: 0,
            })
            .collect();
        RecordBatch::from_records(&records)
    }

    const A: &str = r#"{"p":"a"}"#;
    const B: &str = r#"{"p":"b"}"#;

    /// Each source partition commits up to its last record before its first one Kafka did
    /// not take; one with every record taken commits the batch's offset for it; a
    /// partition the batch commits nothing for commits nothing.
    #[test]
    fn the_taken_prefix_is_per_source_partition() {
        let records =
            batch(&[(A, r#"{"n": 1}"#), (B, r#"{"n":1}"#), (A, r#"{"n":2}"#), (B, r#"{"n":2}"#), ("{}", "{}")]);
        let offsets = vec![(A.to_string(), r#"{"n":2}"#.to_string()), (B.to_string(), r#"{"n":2}"#.to_string())];
        let keys = || records.iter().map(|r| (r.partition, r.offset));
        let mut taken = taken_prefix(keys(), &[2], &offsets);
        taken.sort();
        // A's first record (written with a space) is committed as the batch's are.
        assert_eq!(taken, [(A.to_string(), r#"{"n":1}"#.to_string()), (B.to_string(), r#"{"n":2}"#.to_string())]);
        assert_eq!(taken_prefix(keys(), &[0, 1], &offsets), []);
        assert_eq!(taken_prefix(keys(), &[4], &offsets).len(), 2, "the dead-letter copy's {{}} commits nothing");
    }

    /// What is sent again: from the first record of each source partition not taken,
    /// those after it that were taken too (in order), but not those refused for good.
    #[test]
    fn records_are_sent_again_from_the_first_one_not_taken_of_their_partition() {
        let records = batch(&[(A, "{}"), (B, "{}"), (A, "{}"), (B, "{}"), (A, "{}")]);
        assert_eq!(from_first_untaken(&records, &[2], &[]), [2, 4]);
        assert_eq!(from_first_untaken(&records, &[1], &[(3, "too large".into())]), [1]);
        assert_eq!(from_first_untaken(&records, &[], &[]), Vec::<usize>::new());
    }
}
