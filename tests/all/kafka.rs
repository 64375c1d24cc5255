//! Kafka against librdkafka's mock cluster (in-process, a real Kafka protocol peer for
//! produce, fetch, metadata and admin requests): the three storage topics in Connect's
//! formats, read back by a new worker; `destination=kafka` delivering every record once
//! with its offsets committed after; a broker outage and injected produce errors that
//! lose nothing; exactly-once's error paths, a commit whose answer never comes among
//! them. (The mock implements no transaction semantics; the real-broker tests are
//! end-to-end.)

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{DefaultProducerContext, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use sluice::config::{DEFAULT_TENANT, WorkerConfig};
use sluice::connect::Herder;
use sluice::storage::kafka::{KafkaBackend, offset_key};
use sluice::storage::{Namespace, State, TargetState};

use crate::common::{TestHost, connector, wait_until};

/// One mock broker with Sluice's three internal topics and a `numbers` topic made (the
/// mock answers no CreateTopics or DescribeConfigs, so creation and the compaction check
/// are tested against the real broker, end to end).
fn mock_cluster() -> MockCluster<'static, DefaultProducerContext> {
    let cluster = MockCluster::new(1).expect("librdkafka's mock cluster");
    make_topics(&cluster);
    cluster
}

fn make_topics<C: rdkafka::ClientContext>(cluster: &MockCluster<'_, C>) {
    for (topic, partitions) in [("sluice-offsets", 25), ("sluice-configs", 1), ("sluice-status", 5), ("numbers", 2)] {
        cluster.create_topic(topic, partitions, 1).unwrap();
    }
}

/// A worker config on `bootstrap` with single-replica internal topics (one mock broker).
fn worker_toml(bootstrap: &str, storage_kafka: bool) -> String {
    let storage = if storage_kafka { "[storage]\nkind = \"kafka\"\n" } else { "" };
    format!(
        "{storage}[kafka]\n\"bootstrap.servers\" = \"{bootstrap}\"\n\"offset.storage.replication.factor\" = 1\n\"config.storage.replication.factor\" = 1\n\"status.storage.replication.factor\" = 1\n\"socket.connection.setup.timeout.ms\" = 2000\n\"reconnect.backoff.max.ms\" = 500\n"
    )
}

fn kafka_config(bootstrap: &str) -> sluice::config::KafkaConfig {
    WorkerConfig::parse(&worker_toml(bootstrap, true)).unwrap().kafka.unwrap()
}

/// Every record of `topic` from the beginning: (partition, key, value, headers).
type Read = (i32, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Vec<u8>)>);

fn read_topic(bootstrap: &str, topic: &str, at_least: usize) -> Vec<Read> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "test-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(30)).unwrap();
    let mut assignment = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for partition in metadata.topics()[0].partitions() {
        let (_, high) = consumer.fetch_watermarks(topic, partition.id(), Duration::from_secs(30)).unwrap();
        ends.insert(partition.id(), high);
        assignment.add_partition_offset(topic, partition.id(), Offset::Beginning).unwrap();
    }
    let total: i64 = ends.values().sum();
    assert!(total as usize >= at_least, "{topic} has {total} records, expected at least {at_least}");
    consumer.assign(&assignment).unwrap();
    let mut records = Vec::new();
    let started = std::time::Instant::now();
    while (records.len() as i64) < total {
        assert!(started.elapsed() < Duration::from_secs(60), "read {} of {total} records of {topic}", records.len());
        let Some(message) = consumer.poll(Duration::from_millis(100)) else { continue };
        let message = message.unwrap();
        let headers = message
            .headers()
            .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect())
            .unwrap_or_default();
        records.push((
            message.partition(),
            message.key().map(<[u8]>::to_vec),
            message.payload().map(<[u8]>::to_vec),
            headers,
        ));
    }
    records
}

/// Java's `Utils.murmur2` as Kafka's producer partitions keys, written from its source:
/// the oracle for where Connect would put an offset key.
fn java_murmur2(data: &[u8]) -> i32 {
    let (seed, m, r) = (0x9747b28c_u32 as i32, 0x5bd1e995_i32, 24);
    let length = data.len() as i32;
    let mut h = seed ^ length;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = i32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(m);
        k ^= ((k as u32) >> r) as i32;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    if tail.len() >= 3 {
        h ^= i32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= i32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= i32::from(tail[0]);
        h = h.wrapping_mul(m);
    }
    h ^= ((h as u32) >> 13) as i32;
    h = h.wrapping_mul(m);
    h ^= ((h as u32) >> 15) as i32;
    h
}

#[test]
fn java_murmur2_matches_kafkas_test_vector() {
    // Kafka's UtilsTest: murmur2("21") == -973932308.
    assert_eq!(java_murmur2(b"21"), -973932308);
}

#[test]
fn storage_topics_hold_offsets_configs_and_statuses_in_connects_formats() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let kafka = kafka_config(&bootstrap);
    let files = Namespace::new(DEFAULT_TENANT, "files");
    let acme_files = Namespace::new("acme", "files");
    {
        let backend = KafkaBackend::open(&kafka).unwrap();
        let offsets: &dyn sluice::storage::OffsetStore = &*backend;
        offsets.commit_offsets(&files, &[(r#"{"path":"/in/a.log"}"#.into(), r#"{"line":7}"#.into())]).unwrap();
        offsets.commit_offsets(&acme_files, &[(r#"{"path":"/in/a.log"}"#.into(), r#"{"line":99}"#.into())]).unwrap();
        offsets.commit_offsets(&files, &[(r#"{"path":"/in/b.log"}"#.into(), r#"{"line":1}"#.into())]).unwrap();
        assert!(offsets.delete_offset(&files, r#"{"path":"/in/b.log"}"#).unwrap());
        let configs: &dyn sluice::storage::ConfigStore = &*backend;
        let config = vec![("connector.class".to_string(), "file-pulse".to_string()), ("name".into(), "files".into())];
        configs.put_connector_config(&files, &config).unwrap();
        configs.put_target_state(&files, TargetState::Stopped).unwrap();
        configs
            .put_task_configs(&files, &[vec![("task.id".into(), "0".into())], vec![("task.id".into(), "1".into())]])
            .unwrap();
        configs.put_connector_config(&acme_files, &config).unwrap();
        configs.put_connector_config(&Namespace::new(DEFAULT_TENANT, "gone"), &config).unwrap();
        configs.delete_connector(&Namespace::new(DEFAULT_TENANT, "gone")).unwrap();
    }

    // A new worker reads everything back before any connector starts.
    let backend = KafkaBackend::open(&kafka).unwrap();
    let offsets: &dyn sluice::storage::OffsetStore = &*backend;
    assert_eq!(
        offsets.all_offsets(&files).unwrap(),
        vec![(r#"{"path":"/in/a.log"}"#.to_string(), r#"{"line":7}"#.to_string())]
    );
    assert_eq!(offsets.all_offsets(&acme_files).unwrap()[0].1, r#"{"line":99}"#);
    let configs: &dyn sluice::storage::ConfigStore = &*backend;
    let stored = configs.stored_connectors().unwrap();
    let names: Vec<(String, String, TargetState)> =
        stored.iter().map(|(ns, _, t)| (ns.tenant.clone(), ns.connector.clone(), *t)).collect();
    assert_eq!(
        names,
        vec![
            ("acme".into(), "files".into(), TargetState::Started),
            ("default".into(), "files".into(), TargetState::Stopped)
        ]
    );
    assert_eq!(configs.task_configs(&files).unwrap().len(), 2);

    // The offsets topic as Connect writes it: key bytes, value, tombstone, and the
    // partition Java's producer would choose.
    let records = read_topic(&bootstrap, "sluice-offsets", 4);
    let key = br#"["files",{"path":"/in/a.log"}]"#.to_vec();
    assert_eq!(offset_key(&files, r#"{"path":"/in/a.log"}"#).unwrap(), key);
    let (partition, _, value, _) = records.iter().find(|(_, k, _, _)| k.as_deref() == Some(&key[..])).unwrap();
    assert_eq!(value.as_deref(), Some(&br#"{"line":7}"#[..]));
    assert_eq!(*partition, (java_murmur2(&key) & 0x7fffffff) % 25, "partitioned as Java's producer does");
    let tenant_key = br#"["acme/files",{"path":"/in/a.log"}]"#.to_vec();
    assert!(records.iter().any(|(_, k, _, _)| k.as_deref() == Some(&tenant_key[..])));
    let tombstone = br#"["files",{"path":"/in/b.log"}]"#.to_vec();
    assert!(records.iter().any(|(_, k, v, _)| k.as_deref() == Some(&tombstone[..]) && v.is_none()));

    let configs_topic = read_topic(&bootstrap, "sluice-configs", 3);
    let value_of = |key: &str| {
        configs_topic
            .iter()
            .rev()
            .find(|(_, k, _, _)| k.as_deref() == Some(key.as_bytes()))
            .map(|(_, _, v, _)| v.as_ref().map(|v| serde_json::from_slice::<serde_json::Value>(v).unwrap()))
    };
    assert_eq!(value_of("connector-files").unwrap().unwrap()["properties"]["connector.class"], "file-pulse");
    assert_eq!(
        value_of("target-state-files").unwrap().unwrap(),
        serde_json::json!({"state": "PAUSED", "state.v2": "STOPPED"})
    );
    assert_eq!(value_of("commit-files").unwrap().unwrap(), serde_json::json!({"tasks": 2}));
    assert_eq!(value_of("connector-gone"), Some(None), "a deleted connector is a tombstone");
}

#[test]
fn active_topics_are_connects_topic_statuses_read_back_by_a_new_worker() {
    use sluice::storage::{ActiveTopic, StatusStore};
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let kafka = kafka_config(&bootstrap);
    let (files, acme_files) = (Namespace::new(DEFAULT_TENANT, "files"), Namespace::new("acme", "files"));
    let topic = |name: &str, task| ActiveTopic { name: name.into(), task, discovered_ms: 1_700_000_000_000 };
    {
        let backend = KafkaBackend::open(&kafka).unwrap();
        let statuses: &dyn StatusStore = &*backend;
        statuses.put_active_topic(&files, &topic("lines", 0)).unwrap();
        statuses.put_active_topic(&files, &topic("errors", 1)).unwrap();
        statuses.put_active_topic(&acme_files, &topic("lines", 0)).unwrap();
        assert_eq!(statuses.active_topics(&files).unwrap(), [topic("errors", 1), topic("lines", 0)]);
        statuses.reset_active_topics(&files).unwrap();
        assert_eq!(statuses.active_topics(&files).unwrap(), []);
    }
    let backend = KafkaBackend::open(&kafka).unwrap();
    let statuses: &dyn StatusStore = &*backend;
    assert_eq!(statuses.active_topics(&files).unwrap(), [], "the reset's tombstones are read back");
    assert_eq!(statuses.active_topics(&acme_files).unwrap(), [topic("lines", 0)], "another tenant's stay");

    // Connect's key and value, so its tools (and a migrating Connect) read them.
    let records = read_topic(&bootstrap, "sluice-status", 5);
    let value = |key: &str| {
        records.iter().find(|(_, k, _, _)| k.as_deref() == Some(key.as_bytes())).map(|(_, _, v, _)| v.clone())
    };
    let lines: serde_json::Value =
        serde_json::from_slice(&value("status-topic-lines:connector-files").unwrap().unwrap()).unwrap();
    assert_eq!(
        lines,
        serde_json::json!({"topic": {"name": "lines", "connector": "files", "task": 0, "discoverTimestamp": 1_700_000_000_000i64}})
    );
    assert!(value("status-topic-lines:connector-acme/files").is_some());
    let tombstone = records
        .iter()
        .rev()
        .find(|(_, k, _, _)| k.as_deref() == Some(b"status-topic-errors:connector-files".as_slice()));
    assert_eq!(tombstone.map(|(_, _, v, _)| v.is_none()), Some(true), "the reset is a tombstone");
}

#[test]
fn offsets_connect_wrote_with_another_key_order_are_found() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let kafka = kafka_config(&bootstrap);
    drop(KafkaBackend::open(&kafka).unwrap());
    // A Connect worker wrote this key with its map's own order, and spaces.
    let producer: rdkafka::producer::BaseProducer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).create().unwrap();
    producer
        .send(
            rdkafka::producer::BaseRecord::to("sluice-offsets")
                .key(r#"["files", {"b": 2, "a": "x"}]"#)
                .payload(r#"{"pos": 5}"#),
        )
        .unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
    let backend = KafkaBackend::open(&kafka).unwrap();
    let found = sluice::storage::OffsetStore::offsets(
        &*backend,
        &Namespace::new(DEFAULT_TENANT, "files"),
        &[r#"{"a":"x","b":2}"#.into()],
    )
    .unwrap();
    assert_eq!(found, vec![Some(r#"{"pos":5}"#.to_string())]);
}

/// Writes `offset` for `partition` of `ns` to the offsets topic, to the key's partition (as
/// Connect's partitioner places it), behind the worker's back.
fn write_offset_aside(bootstrap: &str, ns: &Namespace, partition: &str, offset: &str) {
    let producer: rdkafka::producer::BaseProducer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("partitioner", "murmur2_random").create().unwrap();
    let key = offset_key(ns, partition).unwrap();
    producer.send(rdkafka::producer::BaseRecord::to("sluice-offsets").key(key.as_slice()).payload(offset)).unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Offsets a transaction may have committed behind the worker's back (its commit went
/// unanswered) are read from the topic again before anyone reads them; until marked, the
/// worker answers from memory.
#[test]
fn doubtful_offsets_are_read_from_the_topic_again() {
    use sluice::storage::OffsetStore;
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let backend = KafkaBackend::open(&kafka_config(&bootstrap)).unwrap();
    let ns = Namespace::new(DEFAULT_TENANT, "eos");
    let partitions = [r#"{"counter":0}"#.to_string()];
    backend.commit_offsets(&ns, &[(partitions[0].clone(), r#"{"seq":1}"#.into())]).unwrap();
    // Written behind the worker's back, to the key's partition (as Connect's partitioner
    // places it), as a transaction whose commit went unanswered would have.
    write_offset_aside(&bootstrap, &ns, &partitions[0], r#"{"seq": 2}"#);
    assert_eq!(backend.offsets(&ns, &partitions).unwrap(), vec![Some(r#"{"seq":1}"#.to_string())]);
    backend.doubt_offsets(&ns, &partitions);
    assert!(backend.offsets_at_once(&ns, &partitions).is_none(), "a doubtful offset is not answered from memory");
    assert_eq!(backend.offsets(&ns, &partitions).unwrap(), vec![Some(r#"{"seq":2}"#.to_string())]);
    assert!(backend.offsets_at_once(&ns, &partitions).is_some(), "read again, no longer doubtful");
    backend.doubt_offsets(&ns, &partitions);
    assert_eq!(backend.all_offsets(&ns).unwrap(), vec![(partitions[0].clone(), r#"{"seq":2}"#.to_string())]);
}

/// A task instance given up on while its commit is waited for (a broker that does not
/// answer, past the stop deadline) may never say how the commit ended: the next instance's
/// claim of the id makes that commit's partitions doubtful, so they are read from the
/// topic (which its start settled), not from what the worker knew before the commit.
#[test]
fn a_new_instance_claiming_an_id_mid_commit_makes_its_offsets_doubtful() {
    use sluice::storage::OffsetStore;
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let backend = KafkaBackend::open(&kafka_config(&bootstrap)).unwrap();
    let ns = Namespace::new(DEFAULT_TENANT, "eos");
    let partitions = [r#"{"counter":0}"#.to_string()];
    backend.remember_offsets(&ns, &[(partitions[0].clone(), r#"{"seq":1}"#.into())]);
    // What the commit being waited for holds, written as its coordinator completes it.
    write_offset_aside(&bootstrap, &ns, &partitions[0], r#"{"seq": 2}"#);
    // A commit that ended (either way) before the next claim leaves nothing in doubt here.
    let first = backend.claim_transactional_id("sluice-eos-0");
    backend.commit_started("sluice-eos-0", &first, &ns, partitions.to_vec());
    backend.commit_ended("sluice-eos-0", &first);
    let second = backend.claim_transactional_id("sluice-eos-0");
    assert_eq!(backend.offsets(&ns, &partitions).unwrap(), vec![Some(r#"{"seq":1}"#.to_string())]);
    // One still waited for when the next instance claims the id.
    backend.commit_started("sluice-eos-0", &second, &ns, partitions.to_vec());
    let _third = backend.claim_transactional_id("sluice-eos-0");
    backend.commit_ended("sluice-eos-0", &second);
    assert_eq!(backend.offsets(&ns, &partitions).unwrap(), vec![Some(r#"{"seq":2}"#.to_string())]);
}

/// A worker opened beside one that keeps committing (or `sluice offsets` beside a running
/// `sluice run`) reads the state topics up to their ends as they were when it looked, as
/// Connect's KafkaBasedLog does, rather than waiting for an end the writer keeps moving.
#[test]
fn the_state_topics_are_read_to_their_current_end_while_another_worker_writes() {
    use sluice::storage::OffsetStore;
    use std::sync::atomic::{AtomicBool, Ordering};
    let cluster = mock_cluster();
    let kafka = kafka_config(&cluster.bootstrap_servers());
    let writer = KafkaBackend::open(&kafka).unwrap();
    let ns = Namespace::new(DEFAULT_TENANT, "busy");
    let partition = r#"{"counter":0}"#.to_string();
    writer.commit_offsets(&ns, &[(partition.clone(), r#"{"seq":0}"#.into())]).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writing = {
        let (stop, ns, partition) = (stop.clone(), ns.clone(), partition.clone());
        std::thread::spawn(move || {
            // Under the mock cluster's cap on a partition's log (100,000 messages, 5 MB), past
            // which it drops the log's start as it appends: a reader behind the moving start
            // can then never catch up (each try falls out of the log again), which no real
            // compacted topic does.
            let mut seq = 1u64;
            while !stop.load(Ordering::Relaxed) && seq < 50_000 {
                writer.commit_offsets(&ns, &[(partition.clone(), format!(r#"{{"seq":{seq}}}"#))]).unwrap();
                seq += 1;
            }
            seq
        })
    };
    let reader = KafkaBackend::open(&kafka);
    stop.store(true, Ordering::Relaxed);
    let written = writing.join().unwrap();
    let reader = reader.expect("opened beside a writer");
    let seen = reader.all_offsets(&ns).unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let seq: u64 = serde_json::from_str::<serde_json::Value>(&seen[0].1).unwrap()["seq"].as_u64().unwrap();
    assert!(seq < written, "{seq} of {written}");
    assert!(written > 10, "the writer kept writing while the reader opened ({written} commits)");
}

/// A reader whose position falls out of a state topic's log while it reads (compaction or
/// retention moved the log's start on under it; the mock cluster's own cap on a partition's
/// log does too, under a writer this fast) reads on from the log's start, as Connect's
/// reader does: librdkafka's default reset skipped to the end, and the worker opened with
/// no offsets at all.
#[test]
fn a_state_topic_read_that_falls_out_of_the_log_starts_again_from_its_start() {
    // The reader's first fetch is told its position is out of range.
    read_back_past_a_fetch_error(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE);
}

/// A committed offset, read back by a new worker whose first fetch is answered `error`.
fn read_back_past_a_fetch_error(error: rdkafka::types::RDKafkaRespErr) {
    use sluice::storage::OffsetStore;
    let cluster = mock_cluster();
    let kafka = kafka_config(&cluster.bootstrap_servers());
    let writer = KafkaBackend::open(&kafka).unwrap();
    let ns = Namespace::new(DEFAULT_TENANT, "read-back");
    let committed = vec![(r#"{"counter":0}"#.to_string(), r#"{"seq":41}"#.to_string())];
    writer.commit_offsets(&ns, &committed).unwrap();
    cluster.request_errors(rdkafka::types::RDKafkaApiKey::Fetch, &[error]);
    let reader = KafkaBackend::open(&kafka).unwrap_or_else(|e| panic!("opened past a fetch answered {error:?}: {e:#}"));
    assert_eq!(reader.all_offsets(&ns).unwrap(), committed);
}

/// A fetch that meets a passing error (a request timed out) is made again by librdkafka:
/// reading the state topics goes on, rather than failing the worker's start.
#[test]
fn a_state_topic_read_goes_on_past_a_passing_fetch_error() {
    read_back_past_a_fetch_error(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
}

/// A task instance given up on may still be working when the task's next instance starts:
/// the next one's claim on the `transactional.id` tells the old one not to initialise the
/// id again (that would fence the new one), and leaves the other tasks' claims alone.
#[test]
fn a_new_instance_claims_its_transactional_id_from_the_old_one() {
    use std::sync::atomic::Ordering;
    let cluster = mock_cluster();
    let backend = KafkaBackend::open(&kafka_config(&cluster.bootstrap_servers())).unwrap();
    let old = backend.claim_transactional_id("sluice-eos-0");
    let other = backend.claim_transactional_id("sluice-eos-1");
    assert!(!old.load(Ordering::Acquire));
    let new = backend.claim_transactional_id("sluice-eos-0");
    assert!(old.load(Ordering::Acquire), "the old instance is told");
    assert!(!new.load(Ordering::Acquire) && !other.load(Ordering::Acquire));
}

/// `<task>-<seq>` of a counter record (its value without the padding).
fn counter_id(value: &[u8]) -> String {
    String::from_utf8_lossy(value).trim_end_matches('.').to_string()
}

/// The distinct counter sequence numbers of `records`, sorted (re-sent records count once).
fn distinct_seqs(records: &[Read]) -> Vec<u64> {
    let mut seqs: Vec<u64> = records
        .iter()
        .map(|(_, _, v, _)| counter_id(v.as_deref().unwrap()).rsplit('-').next().unwrap().parse().unwrap())
        .collect();
    seqs.sort();
    seqs.dedup();
    seqs
}

/// Until both tasks of the connector `count` (3,000 records each) committed their last.
async fn wait_for_both_counter_tasks(host: &TestHost) {
    let ns = Namespace::new(DEFAULT_TENANT, "count");
    let offsets = host.herder.services().stores.offsets().clone();
    wait_until("both tasks committed their last record", || {
        let seqs = offsets.offsets(&ns, &[r#"{"counter":0}"#.into(), r#"{"counter":1}"#.into()]).ok()?;
        seqs.iter().all(|o| o.as_deref().is_some_and(|o| o.contains("\"seq\":2999"))).then_some(())
    })
    .await;
}

/// `<task>-<seq>` of both tasks' 3,000 records each, sorted.
fn both_counter_tasks_ids() -> Vec<String> {
    let mut ids: Vec<String> =
        (0..2u32).flat_map(|task| (0..3000u64).map(move |seq| format!("{task}-{seq}"))).collect();
    ids.sort();
    ids
}

/// A host whose worker delivers to the mock cluster, with storage in Kafka or SQLite.
async fn kafka_host(bootstrap: &str, storage_kafka: bool) -> TestHost {
    TestHost::with_tenants(&["counter"], &worker_toml(bootstrap, storage_kafka)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_records_reach_kafka_once_each_with_offsets_committed_after() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = kafka_host(&bootstrap, true).await;
    host.start(connector("count", "counter", &[("topic", "numbers"), ("tasks.max", "2"), ("record.count", "3000")]))
        .await;
    wait_for_both_counter_tasks(&host).await;
    let records = read_topic(&bootstrap, "numbers", 6000);
    let mut values: Vec<String> = records.iter().map(|(_, _, v, _)| counter_id(v.as_deref().unwrap())).collect();
    values.sort();
    let expected = both_counter_tasks_ids();
    assert_eq!(values.len(), 6000, "each record once");
    assert_eq!(values, expected);
    let status = host.status("count").unwrap();
    assert_eq!(status.connector.state, State::Running);
    host.herder.shutdown().await;
}

/// A connector's records never go to the worker's state topics (they would be read back
/// as connectors' configs or offsets, other tenants' too): the task fails naming the topic
/// and the worker key, and nothing of it reaches the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_for_the_workers_state_topics_are_refused() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = kafka_host(&bootstrap, true).await;
    host.start(connector("sneaky", "counter", &[("topic", "sluice-configs"), ("record.count", "10")])).await;
    let task = host.wait_task("sneaky", 0, State::Failed).await;
    let trace = task.trace.unwrap();
    assert!(trace.contains("is for the topic sluice-configs, the worker's config.storage.topic"), "{trace}");
    let configs = read_topic(&bootstrap, "sluice-configs", 1);
    assert!(
        configs.iter().all(|(_, _, value, _)| !value.as_deref().is_some_and(|v| v.starts_with(b"0-"))),
        "no counter record in the configs topic"
    );
    // A dead-letter topic that names one is refused when the connector is submitted.
    let dead_letters =
        [("topic", "t"), ("errors.tolerance", "all"), ("errors.deadletterqueue.topic.name", "sluice-status")];
    let error = host.herder.start(connector("dlq", "counter", &dead_letters)).await.unwrap_err().to_string();
    assert!(error.contains("errors.deadletterqueue.topic.name"), "{error}");
    assert!(error.contains("sluice-status is the worker's status.storage.topic"), "{error}");
    host.herder.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_loses_nothing_and_the_task_recovers_by_itself() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = kafka_host(&bootstrap, false).await;
    host.start(connector(
        "count",
        "counter",
        // Records in Kafka, offsets in the data directory (storage stays SQLite).
        &[("topic", "numbers"), ("destination", "kafka"), ("records.per.second", "2000"), ("record.count", "20000")],
    ))
    .await;
    let ns = Namespace::new(DEFAULT_TENANT, "count");
    let offsets = host.herder.services().stores.offsets().clone();
    let seq = |offsets: &std::sync::Arc<dyn sluice::storage::OffsetStore>| {
        offsets.offsets(&ns, &[r#"{"counter":0}"#.into()]).unwrap()[0]
            .as_deref()
            .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok()?["seq"].as_u64())
    };
    wait_until("some records delivered", || seq(&offsets).filter(|s| *s > 500)).await;
    cluster.broker_down(1).unwrap();
    // Down until the task says so in its status.
    let waiting = wait_until("the task saying it is waiting for Kafka", || {
        host.status("count")?.tasks[0].trace.clone().filter(|t| t.contains("delivery waiting"))
    })
    .await;
    let during = seq(&offsets).unwrap();
    cluster.broker_up(1).unwrap();
    wait_until("every record delivered after the outage", || seq(&offsets).filter(|s| *s == 19999)).await;
    assert_eq!(host.status("count").unwrap().tasks[0].state, State::Running);
    let records = read_topic(&bootstrap, "numbers", 20000);
    assert_eq!(
        distinct_seqs(&records),
        (0..20000).collect::<Vec<u64>>(),
        "nothing lost (offset {during} when the broker went down; the status said: {waiting})"
    );
    host.herder.shutdown().await;
}

/// The values testkit's task 0 wrote to `numbers`, each as its sequence number, sorted
/// (duplicates kept).
fn testkit_seqs(bootstrap: &str, at_least: usize) -> Vec<u64> {
    let mut seqs: Vec<u64> = read_topic(bootstrap, "numbers", at_least)
        .iter()
        .map(|(_, _, v, _)| String::from_utf8_lossy(v.as_deref().unwrap())[2..].parse().unwrap())
        .collect();
    seqs.sort();
    seqs
}

fn committed_testkit_seq(host: &TestHost, connector: &str) -> Option<u64> {
    let ns = Namespace::new(DEFAULT_TENANT, connector);
    let offset = host.herder.services().stores.offsets().offsets(&ns, &[r#"{"task":"0"}"#.into()]).ok()?.pop()??;
    serde_json::from_str::<serde_json::Value>(&offset).ok()?["seq"].as_u64()
}

/// testkit's task 0, 30 records in batches of 10 to `numbers` (offsets in SQLite), the
/// 16th (seq 15) larger than Kafka takes.
fn one_record_too_large(name: &str, more: &[(&str, &str)]) -> sluice::config::ConnectorConfig {
    let mut pairs = vec![
        ("topic", "numbers"),
        ("destination", "kafka"),
        ("record.count", "30"),
        ("batch.size", "10"),
        ("records.per.second", "1000"),
        ("poll.oversize.at", "15"),
        ("oversize.bytes", "1040000"),
    ];
    pairs.extend_from_slice(more);
    connector(name, "testkit", &pairs)
}

/// A record Kafka refuses for good fails the task naming the record, and the records of
/// its batch Kafka took before it keep their offsets (Connect commits an acknowledged
/// prefix): a restart fails on it again without sending them a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_records_kafka_took_before_one_it_refuses_are_committed_and_not_sent_again() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = TestHost::with_tenants(&["testkit"], &worker_toml(&bootstrap, false)).await;
    host.start(one_record_too_large("big", &[])).await;
    let task = host.wait_task("big", 0, State::Failed).await;
    let trace = task.trace.unwrap_or_default();
    assert!(
        trace.contains(r#"the record of source partition {"task":"0"} at offset {"seq":15}"#)
            && trace.contains("larger than Kafka takes")
            && trace.contains("sandbox.record.max.bytes"),
        "{trace}"
    );
    assert_eq!(committed_testkit_seq(&host, "big"), Some(14), "the batch's records before the refused one");
    let ns = Namespace::new(DEFAULT_TENANT, "big");
    let mut instance = task.instance;
    for _ in 0..2 {
        host.herder.restart_task(&ns, 0).await.unwrap();
        instance = wait_until("the task failing again", || {
            let task = host.status("big")?.tasks.into_iter().next()?;
            (task.state == State::Failed && task.instance != instance).then_some(task.instance)
        })
        .await;
    }
    assert_eq!(committed_testkit_seq(&host, "big"), Some(14));
    assert_eq!(testkit_seqs(&bootstrap, 15), (0..15).collect::<Vec<u64>>(), "each record before it once");
    host.herder.shutdown().await;
}

/// Under `errors.tolerance=all` a record Kafka refuses for good is skipped and counted,
/// as Connect does since KIP-779; every other record is delivered once and committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_tolerance_all_skips_a_record_kafka_refuses() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = TestHost::with_tenants(&["testkit"], &worker_toml(&bootstrap, false)).await;
    host.start(one_record_too_large("tolerant", &[("errors.tolerance", "all"), ("errors.log.enable", "true")])).await;
    wait_until("every record committed", || (committed_testkit_seq(&host, "tolerant")? == 29).then_some(())).await;
    let task = host.status("tolerant").unwrap().tasks.remove(0);
    assert_eq!((task.state, task.records_refused), (State::Running, 1), "{task:?}");
    let expected: Vec<u64> = (0..30).filter(|&seq| seq != 15).collect();
    assert_eq!(testkit_seqs(&bootstrap, 29), expected);
    host.herder.shutdown().await;
}

/// Kafka took a batch but its offsets could not be committed (another process holds the
/// data directory's database past its busy timeout; a full disk fails the same way): the
/// commit alone is tried again, and nothing is sent twice (each try sent the batch again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_offset_commit_is_tried_again_without_sending_the_batch_again() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = TestHost::with_tenants(&["testkit"], &worker_toml(&bootstrap, false)).await;
    let config =
        [("topic", "numbers"), ("destination", "kafka"), ("record.count", "400"), ("records.per.second", "100")];
    host.start(connector("held", "testkit", &config)).await;
    wait_until("some records committed", || committed_testkit_seq(&host, "held").filter(|&seq| seq >= 20)).await;
    let database = rusqlite::Connection::open(host.data.path().join("sluice.db")).unwrap();
    database.execute_batch("BEGIN IMMEDIATE").unwrap();
    let trace = wait_until("the task saying its commit failed", || {
        host.status("held")?.tasks[0].trace.clone().filter(|t| t.contains("offsets were not committed"))
    })
    .await;
    assert!(trace.contains("retrying"), "{trace}");
    database.execute_batch("ROLLBACK").unwrap();
    wait_until("every record committed", || (committed_testkit_seq(&host, "held")? == 399).then_some(())).await;
    assert_eq!(testkit_seqs(&bootstrap, 400), (0..400).collect::<Vec<u64>>(), "each record once");
    host.herder.shutdown().await;
}

/// A task restarted while the broker is away gives its batch up at the stop deadline, but
/// the shared producer still holds those records and sends them once the broker is back.
/// The task's next instance waits for them to be answered, and their offsets committed,
/// before it starts: nothing is sent twice (file-pulse restarts a task it finds stalled
/// after 30 s, which a broker outage longer than that made one duplicate batch per task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_restarted_while_the_broker_is_away_sends_nothing_twice() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = TestHost::with_tenants(&["testkit"], &worker_toml(&bootstrap, false)).await;
    let config = [
        ("topic", "numbers"),
        ("destination", "kafka"),
        ("record.count", "1000"),
        ("records.per.second", "200"),
        ("batch.size", "50"),
        ("sandbox.call.timeout.ms", "2000"),
    ];
    host.start(connector("away", "testkit", &config)).await;
    wait_until("some records committed", || committed_testkit_seq(&host, "away").filter(|&seq| seq >= 100)).await;
    cluster.broker_down(1).unwrap();
    wait_until("the task saying it is waiting for Kafka", || {
        host.status("away")?.tasks[0].trace.clone().filter(|t| t.contains("delivery waiting"))
    })
    .await;
    host.herder.restart_task(&Namespace::new(DEFAULT_TENANT, "away"), 0).await.unwrap();
    let trace = wait_until("the next instance waiting for the batch given up on", || {
        host.status("away")?.tasks[0].trace.clone().filter(|t| t.contains("a task of this connector gave up on"))
    })
    .await;
    cluster.broker_up(1).unwrap();
    wait_until("every record committed", || (committed_testkit_seq(&host, "away")? == 999).then_some(())).await;
    let seqs = testkit_seqs(&bootstrap, 1000);
    let mut twice = seqs.clone();
    twice.dedup();
    assert_eq!(seqs.len() - twice.len(), 0, "records sent twice (the status said: {trace})");
    assert_eq!(twice, (0..1000).collect::<Vec<u64>>(), "nothing lost");
    host.herder.shutdown().await;
}

/// A cluster that cannot be reached (here: nothing listens at `bootstrap.servers`): the
/// waiting task says why, in librdkafka's words, not only how long it has waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_on_an_unreachable_cluster_says_why() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bootstrap = format!("127.0.0.1:{}", closed.local_addr().unwrap().port());
    drop(closed);
    let host = kafka_host(&bootstrap, false).await;
    host.start(connector("count", "counter", &[("topic", "numbers"), ("destination", "kafka")])).await;
    let trace = wait_until("the task saying why its batch waits", || {
        host.status("count")?.tasks.first()?.trace.clone().filter(|t| t.contains("the Kafka client's latest error"))
    })
    .await;
    assert!(trace.contains("delivery"), "{trace}");
    assert!(trace.contains(&bootstrap) && trace.contains("Connection refused"), "{trace}");
    host.herder.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destination_kafka_is_refused_clearly_where_it_cannot_work() {
    let host = TestHost::new(&["counter"]).await;
    let error = host
        .herder
        .start(connector("k", "counter", &[("topic", "t"), ("destination", "kafka")]))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("destination") && error.contains("[kafka]"), "{error}");
    let error = host
        .herder
        .start(connector("e", "counter", &[("topic", "t"), ("exactly.once.support", "required")]))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("exactly.once.support"), "{error}");
    host.herder.shutdown().await;

    let cluster = mock_cluster();
    let host = kafka_host(&cluster.bootstrap_servers(), true).await;
    let local = host.herder.start(connector("l", "counter", &[("topic", "t"), ("destination", "local")])).await;
    assert!(local.unwrap_err().to_string().contains("destination"));
    // KIP-158's groups and other topic settings would be ignored: refused, naming the key.
    for key in ["topic.creation.default.cleanup.policy", "topic.creation.groups"] {
        let config = connector("c", "counter", &[("topic", "t"), (key, "compact")]);
        let error = host.herder.start(config).await.unwrap_err().to_string();
        assert!(error.contains(key) && error.contains("not supported"), "{error}");
    }
    let tenants = format!("{}[[tenant]]\nname = \"acme\"\n", worker_toml(&cluster.bootstrap_servers(), true));
    host.herder.shutdown().await;
    let worker = WorkerConfig::parse(&tenants).unwrap();
    let herder = Herder::open_with_config(worker, host.data.path(), host.plugins.path()).await.unwrap();
    let error = herder
        .start(connector(
            "o",
            "counter",
            &[("topic", "t"), ("tenant", "acme"), ("producer.override.sasl.username", "x")],
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("producer.override.sasl.username"), "{error}");
    herder.shutdown().await;
}

/// A worker with Kafka storage and exactly-once source support enabled.
async fn exactly_once_host(bootstrap: &str) -> TestHost {
    let toml = format!("{}\"exactly.once.source.support\" = \"enabled\"\n", worker_toml(bootstrap, true));
    TestHost::with_tenants(&["counter"], &toml).await
}

/// A counter into `numbers` with exactly-once, batches of 100, and `more` settings.
fn exactly_once_counter(name: &str, count: &str, more: &[(&str, &str)]) -> sluice::config::ConnectorConfig {
    let mut settings = vec![
        ("topic", "numbers"),
        ("record.count", count),
        ("exactly.once.support", "required"),
        ("batch.size", "100"),
    ];
    settings.extend_from_slice(more);
    connector(name, "counter", &settings)
}

fn committed_seq(host: &TestHost, connector: &str) -> Option<u64> {
    let ns = Namespace::new(DEFAULT_TENANT, connector);
    let offsets = host.herder.services().stores.offsets().offsets(&ns, &[r#"{"counter":0}"#.into()]).ok()?;
    serde_json::from_str::<serde_json::Value>(offsets[0].as_deref()?).ok()?["seq"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_writes_records_and_offsets_in_transactions() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = exactly_once_host(&bootstrap).await;
    // Its value's case does not matter, as in Connect.
    host.start(exactly_once_counter("eos", "2000", &[("exactly.once.support", "REQUIRED")])).await;
    wait_until("the last offset committed", || committed_seq(&host, "eos").filter(|s| *s == 1999)).await;
    host.herder.shutdown().await;
    let records = read_topic(&bootstrap, "numbers", 2000);
    assert_eq!(records.len(), 2000, "no transaction was aborted, so each record once");
    // The offsets went to the offsets topic through the task's producer, and a new worker
    // reads them back.
    let backend = KafkaBackend::open(&kafka_config(&bootstrap)).unwrap();
    let offsets = sluice::storage::OffsetStore::all_offsets(&*backend, &Namespace::new(DEFAULT_TENANT, "eos")).unwrap();
    assert_eq!(offsets, vec![(r#"{"counter":0}"#.to_string(), r#"{"seq":1999}"#.to_string())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_transaction_is_sent_again_and_nothing_is_lost() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = exactly_once_host(&bootstrap).await;
    // EndTxn answers with errors that need an abort (librdkafka's test 0105 lists them).
    cluster.request_errors(
        rdkafka::types::RDKafkaApiKey::EndTxn,
        &[
            rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID,
            rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE,
        ],
    );
    host.start(exactly_once_counter("eos", "1000", &[])).await;
    wait_until("the last offset committed", || committed_seq(&host, "eos").filter(|s| *s == 999)).await;
    assert_eq!(host.status("eos").unwrap().tasks[0].state, State::Running);
    host.herder.shutdown().await;
    // The mock keeps aborted records visible (it writes no markers), so count distinct.
    assert_eq!(distinct_seqs(&read_topic(&bootstrap, "numbers", 1000)), (0..1000).collect::<Vec<u64>>());
}

/// A record Kafka will never take (larger than the producer's `message.max.bytes`) fails
/// its exactly-once task at once with why, as at-least-once does, rather than be sent
/// again in a new transaction for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exactly_once_record_kafka_refuses_for_good_fails_its_task_with_why() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = exactly_once_host(&bootstrap).await;
    host.start(exactly_once_counter("big", "3", &[("record.size", "1040000"), ("batch.size", "1")])).await;
    let task = host.wait_task("big", 0, State::Failed).await;
    let trace = task.trace.unwrap_or_default();
    assert!(trace.contains("larger than Kafka takes") && trace.contains("message.max.bytes"), "{trace}");
    host.herder.shutdown().await;
}

/// A commit whose answer never comes: the broker takes the EndTxn (the mock keeps no
/// transaction state, so the records and offsets stay as if committed) but answers it
/// only after the task stopped waiting (`transaction.timeout.ms` 1 s, three tries).
/// Sending the batch again would write it twice, and so would resuming from the offsets
/// known before it; the task looks the transaction up in the offsets topic instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_never_came_is_looked_up_not_sent_again() {
    // A cluster made through a client, whose handle reaches a call rdkafka does not wrap:
    // a delay on the answer to one request.
    let owner: rdkafka::producer::BaseProducer =
        ClientConfig::new().set("test.mock.num.brokers", "1").create().expect("librdkafka's mock cluster");
    let cluster = owner.client().mock_cluster().expect("a mock cluster");
    make_topics(&cluster);
    let bootstrap = cluster.bootstrap_servers();
    let host = exactly_once_host(&bootstrap).await;
    let config = exactly_once_counter("eos", "1000", &[("producer.override.transaction.timeout.ms", "1000")]);
    // The first three EndTxn are answered after 8 s: librdkafka sends the request again
    // when one times out (after the commit call's one second), and the task tries three
    // times.
    let delayed = (rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR, 8000 as std::ffi::c_int);
    let pushed = unsafe {
        let raw = rdkafka::bindings::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
        rdkafka::bindings::rd_kafka_mock_broker_push_request_error_rtts(
            raw,
            1,
            rdkafka::types::RDKafkaApiKey::EndTxn as i16,
            3,
            delayed.0,
            delayed.1,
            delayed.0,
            delayed.1,
            delayed.0,
            delayed.1,
        )
    };
    assert_eq!(pushed, rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR);
    host.start(config).await;
    wait_until("the last offset committed", || committed_seq(&host, "eos").filter(|s| *s == 999)).await;
    assert_eq!(host.status("eos").unwrap().tasks[0].state, State::Running);
    host.herder.shutdown().await;
    let records = read_topic(&bootstrap, "numbers", 1000);
    let seqs = distinct_seqs(&records);
    assert_eq!(seqs, (0..1000).collect::<Vec<u64>>());
    assert_eq!(records.len(), 1000, "the unanswered transaction's batch was written twice");
}

/// `transaction.boundary=interval`: a transaction holds several batches the runner has
/// counted as delivered. When it fails part way (the broker refuses it its partitions,
/// so it cannot commit), the abort takes back all of them: sending only the last one again
/// would lose the others, so the task fails saying it resumes from its committed offsets,
/// and restarted it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_transaction_aborted_part_way_resumes_from_its_committed_offsets() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = exactly_once_host(&bootstrap).await;
    let config = exactly_once_counter(
        "eos",
        "0",
        &[
            ("records.per.second", "2000"),
            ("transaction.boundary", "interval"),
            ("transaction.boundary.interval.ms", "1500"),
        ],
    );
    host.start(config).await;
    wait_until("a first transaction committed", || committed_seq(&host, "eos")).await;
    cluster.request_errors(
        rdkafka::types::RDKafkaApiKey::AddPartitionsToTxn,
        &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    let failed = host.wait_task("eos", 0, State::Failed).await;
    let trace = failed.trace.unwrap_or_default();
    assert!(trace.contains("resumes from its committed offsets"), "{trace}");
    let at_failure = committed_seq(&host, "eos").unwrap();
    host.herder.restart_task(&Namespace::new(DEFAULT_TENANT, "eos"), 0).await.unwrap();
    wait_until("commits after the restart", || committed_seq(&host, "eos").filter(|s| *s > at_failure + 1000)).await;
    assert_eq!(host.status("eos").unwrap().tasks[0].state, State::Running);
    let resumed_at = committed_seq(&host, "eos").unwrap();
    host.herder.shutdown().await;
    // The aborted transaction's records never reached the broker (their partitions were
    // refused it, and the abort purged them): only resuming from the committed offsets
    // writes them at all.
    let records = read_topic(&bootstrap, "numbers", resumed_at as usize);
    let seqs = distinct_seqs(&records);
    let missing: Vec<u64> = (0..=resumed_at).filter(|seq| seqs.binary_search(seq).is_err()).collect();
    assert!(missing.is_empty(), "records lost: {} from {:?}", missing.len(), missing.first());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_task_fails_with_the_reason_and_commits_nothing_more() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = exactly_once_host(&bootstrap).await;
    // Without exactly.once.support (Connect's default, `requested`): on this worker it runs
    // in transactions all the same, as in Connect.
    host.start(connector("eos", "counter", &[("topic", "numbers"), ("batch.size", "100")])).await;
    wait_until("some offsets committed", || committed_seq(&host, "eos").filter(|s| *s > 300)).await;
    // Another instance with this task's transactional.id bumped the epoch.
    cluster.request_errors(
        rdkafka::types::RDKafkaApiKey::EndTxn,
        &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED],
    );
    let failed = host.wait_task("eos", 0, State::Failed).await;
    let trace = failed.trace.unwrap_or_default();
    assert!(trace.contains("fenced") && trace.contains("sluice-eos-0"), "{trace}");
    let at_failure = committed_seq(&host, "eos");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(committed_seq(&host, "eos"), at_failure, "a fenced task commits nothing");
    host.herder.shutdown().await;
}

/// The trace of an exactly-once task whose producer's InitProducerId is answered `error`.
async fn trace_of_a_task_whose_start_is_refused(error: rdkafka::types::RDKafkaRespErr) -> String {
    let cluster = mock_cluster();
    let host = exactly_once_host(&cluster.bootstrap_servers()).await;
    // The worker's own (idempotent) producer for its state topics gets its producer id
    // first, so the injected error is the task's.
    let warm = Namespace::new(DEFAULT_TENANT, "warm-up");
    host.herder
        .services()
        .stores
        .offsets()
        .commit_offsets(&warm, &[(r#"{"p":0}"#.into(), r#"{"o":0}"#.into())])
        .unwrap();
    cluster.request_errors(rdkafka::types::RDKafkaApiKey::InitProducerId, &[error]);
    host.start(exactly_once_counter("eos", "0", &[])).await;
    let failed = host.wait_task("eos", 0, State::Failed).await;
    host.herder.shutdown().await;
    failed.trace.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_fenced_at_start_fails_with_the_reason() {
    let trace = trace_of_a_task_whose_start_is_refused(
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH,
    )
    .await;
    assert!(trace.contains("fenced"), "{trace}");
}

/// On a worker that runs every connector in transactions, a producer override that
/// outlasts the transaction (which librdkafka refuses) is refused naming the key, not by
/// every task failing to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_longer_than_the_transaction_is_refused_naming_the_key() {
    let cluster = mock_cluster();
    let host = exactly_once_host(&cluster.bootstrap_servers()).await;
    let config = connector("slow", "counter", &[("topic", "t"), ("producer.override.message.timeout.ms", "120000")]);
    let error = host.herder.start(config).await.unwrap_err().to_string();
    assert!(error.contains("producer.override.message.timeout.ms") && error.contains("at most 60000"), "{error}");
    let config = connector(
        "fits",
        "counter",
        &[
            ("topic", "t"),
            ("producer.override.message.timeout.ms", "120000"),
            ("producer.override.transaction.timeout.ms", "120000"),
        ],
    );
    host.herder.start(config).await.unwrap();
    host.wait_task("fits", 0, State::Running).await;
    host.herder.shutdown().await;
}

/// A cluster that refuses the task's transactional id (an ACL, or a broker without
/// transactions) fails the task saying so, not that a newer instance took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_id_the_cluster_refuses_fails_the_task_saying_so() {
    let trace = trace_of_a_task_whose_start_is_refused(
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    )
    .await;
    assert!(trace.contains("refuses this producer transactions") && !trace.contains("newer instance"), "{trace}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_errors_are_retried_and_lose_nothing() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = kafka_host(&bootstrap, true).await;
    // Passing errors on Produce: librdkafka retries them, the batch waits, nothing is lost.
    cluster.request_errors(
        rdkafka::types::RDKafkaApiKey::Produce,
        &[
            rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
            rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
        ],
    );
    host.start(connector("count", "counter", &[("topic", "numbers"), ("record.count", "3000")])).await;
    wait_until("the last offset committed", || committed_seq(&host, "count").filter(|s| *s == 2999)).await;
    host.herder.shutdown().await;
    assert_eq!(distinct_seqs(&read_topic(&bootstrap, "numbers", 3000)), (0..3000).collect::<Vec<u64>>());
}

/// librdkafka stops an idempotent producer for good on a sequence out of step with the
/// broker (here the first Produce answered OUT_OF_ORDER_SEQUENCE_NUMBER): the batch goes
/// again through a new producer, nothing is lost, and the task keeps running. (Storage in
/// SQLite, so that the first Produce is a record's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_stopped_by_a_fatal_error_is_replaced_and_nothing_is_lost() {
    let cluster = mock_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let host = kafka_host(&bootstrap, false).await;
    cluster.request_errors(
        rdkafka::types::RDKafkaApiKey::Produce,
        &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
    );
    host.start(connector(
        "count",
        "counter",
        &[("topic", "numbers"), ("destination", "kafka"), ("tasks.max", "2"), ("record.count", "3000")],
    ))
    .await;
    wait_for_both_counter_tasks(&host).await;
    let status = host.status("count").unwrap();
    assert!(status.tasks.iter().all(|t| t.state == State::Running), "{status:?}");
    host.herder.shutdown().await;
    let records = read_topic(&bootstrap, "numbers", 6000);
    let mut ids: Vec<String> = records.iter().map(|(_, _, v, _)| counter_id(v.as_deref().unwrap())).collect();
    ids.sort();
    ids.dedup();
    let expected = both_counter_tasks_ids();
    assert_eq!(ids, expected, "every record of both tasks at least once");
}

/// The same for the worker's own producer of its state topics: the first write (here a
/// connector's config) meets the fatal error and is written again by a new producer,
/// through which every later write goes; a new worker reads them all back.
#[test]
fn the_state_topics_producer_stopped_by_a_fatal_error_is_replaced() {
    use sluice::storage::ConfigStore;
    let cluster = mock_cluster();
    let kafka = kafka_config(&cluster.bootstrap_servers());
    let config =
        |n: &str| vec![("connector.class".to_string(), "counter".to_string()), ("n".to_string(), n.to_string())];
    let (first, second) = (Namespace::new(DEFAULT_TENANT, "first"), Namespace::new(DEFAULT_TENANT, "second"));
    {
        let backend = KafkaBackend::open(&kafka).unwrap();
        cluster.request_errors(
            rdkafka::types::RDKafkaApiKey::Produce,
            &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
        );
        let configs: &dyn ConfigStore = &*backend;
        configs.put_connector_config(&first, &config("1")).unwrap();
        configs.put_connector_config(&second, &config("2")).unwrap();
    }
    let backend = KafkaBackend::open(&kafka).unwrap();
    let configs: &dyn ConfigStore = &*backend;
    assert_eq!(configs.connector_config(&first).unwrap(), Some(config("1")));
    assert_eq!(configs.connector_config(&second).unwrap(), Some(config("2")));
}
