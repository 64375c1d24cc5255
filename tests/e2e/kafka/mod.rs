//! Kafka end to end: `sluice` child processes against a real Kafka-protocol broker process
//! on 127.0.0.1 (nisshi, a Kafka-compatible broker from crates.io), read back with a plain
//! librdkafka consumer. nisshi refuses transactions, so exactly-once is tested against
//! librdkafka's mock cluster in `tests/all/kafka.rs`; everything else runs here.
//!
//! The broker binary: `$SLUICE_KAFKA_BROKER`, else `target/kafka-broker/nisshi-<version>/bin/nisshi`,
//! installed there on first use with `cargo +nightly install` (nisshi needs rustc 1.96;
//! `.ci/run` installs it before the tests, ~25 minutes on 2 cores).

mod clients;
mod crash;
mod outage;
mod storage;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::DEADLINE;

pub const NISSHI_VERSION: &str = "0.8.1";

/// The broker binary, installed on first use (one installer at a time, under a lock).
pub fn broker_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SLUICE_KAFKA_BROKER") {
        return PathBuf::from(path);
    }
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().to_path_buf();
    let root = target.join("kafka-broker").join(format!("nisshi-{NISSHI_VERSION}"));
    let binary = root.join("bin").join("nisshi");
    if binary.exists() {
        return binary;
    }
    std::fs::create_dir_all(&root).unwrap();
    let lock = std::fs::File::create(root.with_extension("lock")).unwrap();
    lock.lock().unwrap();
    if !binary.exists() {
        eprintln!(
            "installing the test broker nisshi {NISSHI_VERSION} into {} (cargo +nightly install; ~25 min)",
            root.display()
        );
        let status = Command::new("cargo")
            .args(["+nightly", "install", &format!("nisshi@{NISSHI_VERSION}"), "--locked", "--no-default-features"])
            .args(["--features", "libsql", "--root"])
            .arg(&root)
            .arg("--target-dir")
            .arg(target.join("kafka-broker").join("build"))
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO_TARGET_DIR")
            .status()
            .expect("cargo");
        assert!(
            status.success() && binary.exists(),
            "could not install the Kafka-protocol test broker nisshi {NISSHI_VERSION}: it needs a nightly toolchain \
             (rustc 1.96 or later): `rustup toolchain install nightly`, or set SLUICE_KAFKA_BROKER to a broker binary"
        );
    }
    binary
}

/// A broker process on a free loopback port, with its data in its own directory (so a
/// restart on the same directory keeps the topics).
pub struct Broker {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub port: u16,
}

impl Broker {
    pub fn start() -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut broker = Broker { child: None, dir, port };
        broker.restart();
        broker
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the process (again) on the same port and data, and waits until it listens.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the broker is running");
        std::fs::create_dir_all(self.dir.path().join("data")).unwrap();
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("broker.log")).unwrap();
        let child = Command::new(broker_binary())
            .current_dir(self.dir.path())
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://data/broker.db"])
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.child = Some(child);
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(started.elapsed() < DEADLINE, "the broker did not listen: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: a broker that goes away without a word.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }

    /// A `sluice.toml` for this broker: single-replica internal topics, Kafka storage when
    /// asked, plus `extra` lines.
    pub fn worker_toml(&self, storage_kafka: bool, extra: &str) -> String {
        let storage = if storage_kafka { "[storage]\nkind = \"kafka\"\n" } else { "" };
        format!(
            "{storage}[kafka]\n\"bootstrap.servers\" = \"{}\"\n\"offset.storage.replication.factor\" = 1\n\
             \"config.storage.replication.factor\" = 1\n\"status.storage.replication.factor\" = 1\n\
             \"offset.storage.partitions\" = 5\n\"reconnect.backoff.max.ms\" = 1000\n{extra}",
            self.bootstrap()
        )
    }

    /// SIGTERM, then SIGKILL if it has not stopped within 10 s: a broker taken down.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let started = Instant::now();
            while child.try_wait().unwrap().is_none() {
                if started.elapsed() > Duration::from_secs(10) {
                    child.kill().unwrap();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Records in `topic` (the sum of its partitions' high watermarks; 0 if it is missing).
    pub fn count(&self, topic: &str) -> i64 {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("group.id", "sluice-test-counter")
            .create()
            .unwrap();
        let Ok(metadata) = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) else { return 0 };
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none()) else { return 0 };
        found
            .partitions()
            .iter()
            .map(|p| {
                consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(10)).map_or(0, |(low, high)| high - low)
            })
            .sum()
    }

    /// Every record of `topic` from the beginning to its current end.
    pub fn read(&self, topic: &str) -> Vec<Read> {
        read_topic(&self.bootstrap(), topic)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A record as a plain consumer reads it.
#[derive(Debug, Clone)]
pub struct Read {
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

pub fn read_topic(bootstrap: &str, topic: &str) -> Vec<Read> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "sluice-test-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(30)).unwrap();
    let partitions: Vec<i32> = metadata.topics()[0].partitions().iter().map(|p| p.id()).collect();
    assert!(!partitions.is_empty(), "topic {topic} does not exist");
    let mut assignment = TopicPartitionList::new();
    for partition in &partitions {
        assignment.add_partition_offset(topic, *partition, Offset::Beginning).unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut pending: Vec<i32> = partitions;
    let mut records = Vec::new();
    let started = Instant::now();
    while !pending.is_empty() {
        assert!(
            started.elapsed() < DEADLINE,
            "reading {topic}: {} records, partitions {pending:?} not at their end",
            records.len()
        );
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => pending.retain(|x| *x != p),
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            Some(Ok(message)) => records.push(Read {
                partition: message.partition(),
                key: message.key().map(<[u8]>::to_vec),
                value: message.payload().map(<[u8]>::to_vec),
                headers: message
                    .headers()
                    .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect())
                    .unwrap_or_default(),
            }),
        }
    }
    records
}

/// Lines per file name (the record key file-pulse sets), in topic order per partition.
pub fn lines_by_file(records: &[Read]) -> BTreeMap<String, Vec<String>> {
    let mut by_file: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for record in records {
        let key = String::from_utf8(record.key.clone().unwrap_or_default()).unwrap();
        by_file.entry(key).or_default().push(String::from_utf8(record.value.clone().unwrap_or_default()).unwrap());
    }
    by_file
}
