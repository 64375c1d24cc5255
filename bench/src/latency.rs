//! `sluice-bench latency`: how soon a file dropped into a running file-pulse connector's
//! directory has its first record durable in the local log. Files are dropped one at a
//! time (written beside the directory, then renamed in, as a mover would), each at a
//! different phase of the listing cycle, and each is waited for before the next.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice::config::{ConnectorConfig, DEFAULT_TENANT};
use sluice::connect::Herder;

pub struct LatencyRow {
    pub files: usize,
    pub interval_ms: u64,
    pub median: Duration,
    pub p99: Duration,
    pub max: Duration,
}

const TOPIC: &str = "latency";

fn stored(herder: &Herder) -> anyhow::Result<u64> {
    let topics = herder.services().stores.local().topics(DEFAULT_TENANT)?;
    Ok(topics.iter().find(|(t, _)| t == TOPIC).map_or(0, |(_, n)| *n))
}

/// Waits (polling every millisecond) until the topic holds `count` records; returns when.
async fn until_stored(herder: &Herder, count: u64) -> anyhow::Result<Instant> {
    let started = Instant::now();
    loop {
        if stored(herder)? >= count {
            return Ok(Instant::now());
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(60), "record {count} not stored within 60 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

pub async fn latency(plugin_dir: &Path, files: usize, interval_ms: u64) -> anyhow::Result<LatencyRow> {
    let scratch = std::env::temp_dir().join(format!("sluice-bench-latency-{}", std::process::id()));
    let (inbox, staging) = (scratch.join("inbox"), scratch.join("staging"));
    std::fs::create_dir_all(&inbox)?;
    std::fs::create_dir_all(&staging)?;
    let inbox = std::fs::canonicalize(&inbox)?;
    let herder = Herder::open(&scratch.join("data"), plugin_dir).await?;
    let config = serde_json::json!({"name": "latency", "config": {
        "connector.class": "file-pulse", "topic": TOPIC,
        "fs.listing.directory.path": inbox, "sandbox.fs.read": inbox,
        "fs.listing.interval.ms": interval_ms.to_string(),
        // The connector lists at its ticks: tick at least as often as it lists.
        "monitor.interval.ms": interval_ms.min(1000).to_string(),
    }});
    herder.start(ConnectorConfig::from_json(&config.to_string(), "latency")?).await?;
    let drop_file = |n: usize| -> anyhow::Result<Instant> {
        let staged = staging.join(format!("f{n:04}.log"));
        std::fs::write(&staged, format!("first line of file {n}\nsecond line\n"))?;
        std::fs::rename(&staged, inbox.join(format!("f{n:04}.log")))?;
        Ok(Instant::now())
    };
    // A first file, not measured: the connector and its tasks are up once it is stored.
    drop_file(0)?;
    until_stored(&herder, 2).await?;

    let mut latencies = Vec::with_capacity(files);
    for n in 1..=files {
        // Spread the drops over the listing cycle (a golden-ratio walk over [0, interval)).
        let phase = (n as f64 * 0.618_033_988_75).fract() * interval_ms as f64;
        tokio::time::sleep(Duration::from_micros((phase * 1e3) as u64)).await;
        let before = stored(&herder)?;
        let dropped = drop_file(n)?;
        let first = until_stored(&herder, before + 1).await?;
        latencies.push(first - dropped);
        until_stored(&herder, before + 2).await?;
    }
    herder.shutdown().await;
    let total = stored(&herder)?;
    anyhow::ensure!(total == 2 * (files as u64 + 1), "{} files gave {total} records", files + 1);
    let _ = std::fs::remove_dir_all(&scratch);
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    Ok(LatencyRow { files, interval_ms, median: at(0.5), p99: at(0.99), max: at(1.0) })
}

pub fn print_latency_table(row: &LatencyRow) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "latency: a file renamed into a running file-pulse connector's directory until its first record is stored in the local log ({} files, one at a time)",
        row.files
    );
    println!("| fs.listing.interval.ms | median | p99 | max | goal (median) |");
    println!("|---|---|---|---|---|");
    println!(
        "| {} | {:.0} ms | {:.0} ms | {:.0} ms | ≤ {} ms |",
        row.interval_ms,
        ms(row.median),
        ms(row.p99),
        ms(row.max),
        row.interval_ms + 50
    );
}
