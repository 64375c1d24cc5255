//! `sluice-bench kafka`: MB/s streaming one file of 100-byte lines with file-pulse into a
//! Kafka topic (`destination=kafka`, at-least-once), beside a bare rdkafka producer
//! sending the same lines (same key, same producer settings: idempotent, `acks=all`) to
//! the same broker and waiting for every acknowledgement, in one run.
//!
//! The broker is `--bootstrap HOST:PORT`, or a nisshi process this benchmark starts (the
//! binary the Kafka tests use, `target/kafka-broker/nisshi-<version>/bin/nisshi`).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use sluice::config::{ConnectorConfig, DEFAULT_TENANT, WorkerConfig};
use sluice::connect::Herder;
use sluice::storage::Namespace;

use crate::files::FilesRow;

/// The broker binary the Kafka end-to-end tests install.
pub fn default_broker() -> PathBuf {
    Path::new(sluice::BUILT_PLUGINS).with_file_name("kafka-broker").join("nisshi-0.8.1").join("bin").join("nisshi")
}

struct BrokerProcess(Child);

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_broker(binary: &Path, dir: &Path) -> anyhow::Result<(BrokerProcess, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    std::fs::create_dir_all(dir.join("data"))?;
    let url = format!("tcp://127.0.0.1:{port}");
    let child = Command::new(binary)
        .current_dir(dir)
        .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
        .args(["--storage-engine", "sqlite://data/broker.db"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| {
            format!("cannot start the broker {} (--broker, or --bootstrap HOST:PORT)", binary.display())
        })?;
    let broker = BrokerProcess(child);
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(30), "the broker did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((broker, format!("127.0.0.1:{port}")))
}

pub async fn kafka(
    plugin_dir: &Path,
    megabytes: u64,
    bootstrap: Option<String>,
    broker: &Path,
    mock: bool,
) -> anyhow::Result<Vec<FilesRow>> {
    // librdkafka's in-process mock cluster: no broker cost, so what remains is the clients'.
    let mock_cluster = if mock { Some(rdkafka::mocking::MockCluster::new(1)?) } else { None };
    let bootstrap = bootstrap.or_else(|| mock_cluster.as_ref().map(|m| m.bootstrap_servers()));
    let scratch = std::env::temp_dir().join(format!("sluice-bench-kafka-{}", std::process::id()));
    let inbox = scratch.join("inbox");
    std::fs::create_dir_all(&inbox)?;
    let inbox = std::fs::canonicalize(&inbox)?;
    let (_broker, bootstrap) = match bootstrap {
        Some(bootstrap) => (None, bootstrap),
        None => {
            let (process, bootstrap) = start_broker(broker, &scratch.join("broker"))?;
            (Some(process), bootstrap)
        }
    };
    let path = inbox.join("big.log");
    let line = format!("{}\n", "x".repeat(99));
    let lines = (megabytes << 20) / line.len() as u64;
    {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        for _ in 0..lines {
            out.write_all(line.as_bytes())?;
        }
        out.flush()?;
    }
    let bytes = std::fs::metadata(&path)?.len();
    let suffix = std::process::id();
    let (native_topic, sluice_topic) = (format!("native-{suffix}"), format!("sluice-{suffix}"));
    if let Some(mock) = &mock_cluster {
        // The mock answers no CreateTopics.
        mock.create_topic(&native_topic, 1, 1)?;
        mock.create_topic(&sluice_topic, 1, 1)?;
    } else {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", &bootstrap).create()?;
        let new: Vec<NewTopic> =
            [&native_topic, &sluice_topic].iter().map(|t| NewTopic::new(t, 1, TopicReplication::Fixed(1))).collect();
        let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
        for result in futures_executor::block_on(admin.create_topics(&new, &options))? {
            result.map_err(|(topic, code)| anyhow::anyhow!("cannot create {topic}: {code}"))?;
        }
    }
    let mut rows = Vec::new();

    // A bare producer: read the file and send each line as file-pulse's record of it (key
    // and `file.path` header the path, `file.line` header the line number), wait for all.
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("partitioner", "murmur2_random")
        .create()?;
    let started = Instant::now();
    let mut reader = std::io::BufReader::with_capacity(64 << 10, std::fs::File::open(&path)?);
    let mut buf = Vec::with_capacity(256);
    let mut deliveries = Vec::with_capacity(lines as usize);
    let file = path.to_string_lossy().into_owned();
    let mut line_number = 0u64;
    while reader.read_until(b'\n', &mut buf)? > 0 {
        line_number += 1;
        let value = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let number = line_number.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header { key: "file.path", value: Some(file.as_bytes()) })
            .insert(Header { key: "file.line", value: Some(number.as_bytes()) });
        let mut record = FutureRecord::to(&native_topic)
            .key(file.as_str())
            .payload(value)
            .headers(headers)
            .timestamp(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as i64);
        loop {
            match producer.send_result(record) {
                Ok(delivery) => {
                    deliveries.push(delivery);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        buf.clear();
    }
    for delivery in deliveries {
        delivery.await?.map_err(|(e, _)| e)?;
    }
    rows.push(FilesRow { path: "rdkafka", bytes, elapsed: started.elapsed() });

    // file-pulse into Kafka, in this process (offsets in the data directory).
    let worker = WorkerConfig::parse(&format!("[kafka]\n\"bootstrap.servers\" = \"{bootstrap}\"\n"))?;
    let data = scratch.join("data");
    let herder = Herder::open_with_config(worker, &data, plugin_dir).await?;
    let config = serde_json::json!({"name": "bench", "config": {
        "connector.class": "file-pulse", "topic": sluice_topic, "destination": "kafka",
        "fs.listing.directory.path": inbox, "sandbox.fs.read": inbox, "monitor.interval.ms": "20",
    }});
    let config = ConnectorConfig::from_json(&config.to_string(), "bench")?;
    let ns = Namespace::new(DEFAULT_TENANT, "bench");
    let started = Instant::now();
    herder.start(config).await?;
    loop {
        let offsets = herder.services().stores.offsets().all_offsets(&ns).unwrap_or_default();
        if offsets.iter().any(|(_, o)| o.contains("\"done\":true")) {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(1800), "file-pulse did not finish");
        if let Some(status) = herder.status("bench")
            && let Some(failed) =
                status.tasks.iter().find(|t| t.trace.is_some() && t.state == sluice::storage::State::Failed)
        {
            anyhow::bail!("file-pulse failed: {:?}", failed.trace);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rows.push(FilesRow { path: "sluice", bytes, elapsed: started.elapsed() });
    herder.shutdown().await;
    let _ = std::fs::remove_dir_all(&scratch);
    drop(mock_cluster);
    Ok(rows)
}

pub fn print_kafka_table(rows: &[FilesRow], broker: &str) {
    println!(
        "into Kafka ({broker}): one file of 100-byte lines as file-pulse records (key, 2 headers), idempotent, acks=all, one partition"
    );
    println!("{:<8} {:>10} {:>9} {:>9} {:>16}", "path", "MB", "seconds", "MB/s", "ratio/rdkafka");
    let bare = rows.first().map(|r| r.bytes as f64 / r.elapsed.as_secs_f64());
    for row in rows {
        let rate = row.bytes as f64 / row.elapsed.as_secs_f64();
        println!(
            "{:<8} {:>10.0} {:>9.2} {:>9.1} {:>16.3}",
            row.path,
            row.bytes as f64 / 1e6,
            row.elapsed.as_secs_f64(),
            rate / 1e6,
            bare.map_or(0.0, |n| rate / n)
        );
    }
}
