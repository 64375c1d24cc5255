//! `sluice-bench directory`: file-pulse on directories of 1,000 to 100,000 small files
//! (flat, or nested under a recursive listing): the time to stream every file exactly once
//! and delete it, and what the connector costs meanwhile: its `tick` times (the listing is
//! spread across ticks) and its memory.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice::config::{ConnectorConfig, DEFAULT_TENANT};
use sluice::connect::Herder;
use sluice::storage::Namespace;

pub struct DirectoryRow {
    pub files: usize,
    pub nested: bool,
    pub elapsed: Duration,
    pub ticks: u64,
    pub tick_mean: Duration,
    pub tick_max: Duration,
    pub connector_memory: u64,
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| if e.file_type().is_ok_and(|t| t.is_dir()) { count_files(&e.path()) } else { 1 })
                .sum()
        })
        .unwrap_or(0)
}

/// Streams `files` one-line files (in 100 subdirectories when `nested`) with file-pulse
/// (3 tasks, `delete` cleanup) to the local destination, and checks every line arrived once.
pub async fn directory(plugin_dir: &Path, files: usize, nested: bool) -> anyhow::Result<DirectoryRow> {
    let scratch = std::env::temp_dir().join(format!("sluice-bench-directory-{}-{files}", std::process::id()));
    let inbox = scratch.join("inbox");
    std::fs::create_dir_all(&inbox)?;
    let inbox = std::fs::canonicalize(&inbox)?;
    for n in 0..files {
        let dir = if nested { inbox.join(format!("d{:02}", n % 100)) } else { inbox.clone() };
        if n < 100 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(dir.join(format!("f{n:06}.log")), format!("line of file {n}\n"))?;
    }
    let herder = Herder::open(&scratch.join("data"), plugin_dir).await?;
    let config = serde_json::json!({"name": "bench", "config": {
        "connector.class": "file-pulse", "topic": "bench", "tasks.max": "3",
        "fs.listing.directory.path": inbox, "fs.listing.recursive": nested.to_string(),
        "fs.listing.interval.ms": "1000", "monitor.interval.ms": "100",
        "fs.cleanup.policy": "delete", "sandbox.fs.write": inbox,
    }});
    let started = Instant::now();
    herder.start(ConnectorConfig::from_json(&config.to_string(), "bench")?).await?;
    let ns = Namespace::new(DEFAULT_TENANT, "bench");
    let deadline = Duration::from_secs(1800);
    loop {
        let delivered = herder.delivered_in(&ns).await;
        if delivered >= files as u64 && count_files(&inbox) == 0 {
            break;
        }
        anyhow::ensure!(started.elapsed() < deadline, "{files} files: only {delivered} delivered after {deadline:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    let metrics = herder.metrics_in(&ns).await.expect("running");
    herder.shutdown().await;
    let topics = herder.services().stores.local().topics(DEFAULT_TENANT)?;
    let stored = topics.iter().find(|(t, _)| t == "bench").map_or(0, |(_, n)| *n);
    anyhow::ensure!(stored == files as u64, "{files} files gave {stored} records");
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(DirectoryRow {
        files,
        nested,
        elapsed,
        ticks: metrics.ticks,
        tick_mean: metrics.tick_total / metrics.ticks.max(1) as u32,
        tick_max: metrics.tick_max,
        connector_memory: metrics.connector_memory,
    })
}

pub fn print_directory_table(rows: &[DirectoryRow]) {
    println!("file-pulse on a directory of one-line files: 3 tasks, delete cleanup, local destination");
    println!(
        "{:>8} {:>7} {:>9} {:>9} {:>7} {:>10} {:>10} {:>12}",
        "files", "layout", "seconds", "files/s", "ticks", "tick mean", "tick max", "conn. memory"
    );
    for row in rows {
        println!(
            "{:>8} {:>7} {:>9.2} {:>9.0} {:>7} {:>8.1}ms {:>8.1}ms {:>9.1} MiB",
            row.files,
            if row.nested { "nested" } else { "flat" },
            row.elapsed.as_secs_f64(),
            row.files as f64 / row.elapsed.as_secs_f64(),
            row.ticks,
            row.tick_mean.as_secs_f64() * 1e3,
            row.tick_max.as_secs_f64() * 1e3,
            row.connector_memory as f64 / f64::from(1 << 20),
        );
    }
}
