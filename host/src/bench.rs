//! `sluice bench`: records per second through a task's `poll` for the `counter` example
//! plugin as a sandboxed component, beside the same generator code compiled natively and
//! turned into the same record type, in one run, and the ratio; `languages` (size, compile,
//! cache, instantiation and poll figures of the Rust, Python and JavaScript connectors);
//! `fairness` and `files`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::bindings::SourceRecord;
use crate::config::SandboxSettings;
use crate::embedded::Embedded;
use crate::registry::Registry;
use crate::sandbox::{InstanceContext, Runtime};
use crate::store::Namespace;

pub struct BenchRow {
    pub path: &'static str,
    pub records: u64,
    pub elapsed: Duration,
    pub bytes: u64,
}

impl BenchRow {
    pub fn records_per_second(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64()
    }
}

/// Runs `rounds` alternating rounds of each path and keeps each path's best round (the
/// least disturbed by the rest of the machine).
pub async fn run(
    plugin_dir: &Path,
    records: u64,
    size: usize,
    batch: usize,
    rounds: u32,
) -> anyhow::Result<Vec<BenchRow>> {
    let runtime = Runtime::new()?;
    let scratch = std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()));
    let db = Arc::new(Embedded::open(&scratch)?);
    let registry = Registry::load(&runtime, plugin_dir, &scratch.join("compiled")).await?;
    let plugin = registry.get("counter").with_context(|| format!("no counter.wasm in {}", plugin_dir.display()))?;
    let config: Vec<(String, String)> =
        [("topic", "bench".to_string()), ("record.size", size.to_string()), ("batch.size", batch.to_string())]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();

    let mut best: [Option<BenchRow>; 2] = [None, None];
    for _ in 0..rounds.max(1) {
        let native = native_round(records, size, batch);
        let context = InstanceContext {
            namespace: Namespace::new("bench", "bench"),
            task: None,
            offsets: db.clone(),
            reconfigure: None,
        };
        let mut instance = runtime.instantiate(plugin.pre(), context, &SandboxSettings::default()).await?;
        instance.task_start(&config).await?.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let started = Instant::now();
        let (mut count, mut bytes) = (0u64, 0u64);
        while count < records {
            let polled = instance.poll().await?.map_err(|e| anyhow::anyhow!("{e:?}"))?;
            count += polled.len() as u64;
            bytes += polled.iter().map(record_bytes).sum::<u64>();
        }
        let component = BenchRow { path: "component", records: count, elapsed: started.elapsed(), bytes };
        for (slot, row) in best.iter_mut().zip([native, component]) {
            if slot.as_ref().is_none_or(|b| row.records_per_second() > b.records_per_second()) {
                *slot = Some(row);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(best.into_iter().flatten().collect())
}

fn record_bytes(record: &SourceRecord) -> u64 {
    (record.value.as_ref().map_or(0, Vec::len)
        + record.partition.len()
        + record.offset.len()
        + record.topic.as_ref().map_or(0, String::len)) as u64
}

fn native_round(records: u64, size: usize, batch: usize) -> BenchRow {
    let started = Instant::now();
    let (mut count, mut bytes, mut next) = (0u64, 0u64, 0u64);
    while count < records {
        let polled: Vec<SourceRecord> = counter::generator::batch(0, next, batch, 0, size)
            .into_iter()
            .map(|g| SourceRecord {
                partition: g.partition,
                offset: g.offset,
                topic: Some("bench".to_string()),
                key: None,
                value: Some(g.value),
                headers: Vec::new(),
                timestamp: None,
            })
            .collect();
        let polled = std::hint::black_box(polled);
        next += polled.len() as u64;
        count += polled.len() as u64;
        bytes += polled.iter().map(record_bytes).sum::<u64>();
    }
    BenchRow { path: "native", records: count, elapsed: started.elapsed(), bytes }
}

pub fn print_table(rows: &[BenchRow], size: usize, batch: usize) {
    println!("poll throughput, {size}-byte values, {batch} records per poll (best of the rounds)");
    println!("{:<10} {:>10} {:>9} {:>12} {:>9}", "path", "records", "seconds", "records/s", "MB/s");
    for row in rows {
        println!(
            "{:<10} {:>10} {:>9.3} {:>12.0} {:>9.1}",
            row.path,
            row.records,
            row.elapsed.as_secs_f64(),
            row.records_per_second(),
            row.bytes as f64 / row.elapsed.as_secs_f64() / 1e6
        );
    }
    if let [native, component] = rows {
        println!("ratio component/native: {:.2}", component.records_per_second() / native.records_per_second());
    }
}

/// One row of `sluice bench files`.
pub struct FilesRow {
    pub path: &'static str,
    pub bytes: u64,
    pub elapsed: Duration,
}

/// Streams one file of 100-byte lines through file-pulse to the local destination and to
/// `stdout` (a child `sluice run` with stdout on /dev/null), beside a plain native loop
/// that reads and splits the same file, in one run.
pub async fn files(plugin_dir: &Path, megabytes: u64) -> anyhow::Result<Vec<FilesRow>> {
    use std::io::{BufRead, Write};
    let scratch = std::env::temp_dir().join(format!("sluice-bench-files-{}", std::process::id()));
    let inbox = scratch.join("inbox");
    std::fs::create_dir_all(&inbox)?;
    let inbox = std::fs::canonicalize(&inbox)?;
    let path = inbox.join("big.log");
    let line = format!("{}\n", "x".repeat(99));
    {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        for _ in 0..(megabytes << 20) / line.len() as u64 {
            out.write_all(line.as_bytes())?;
        }
        out.flush()?;
    }
    let bytes = std::fs::metadata(&path)?.len();
    let mut rows = Vec::new();

    // Native: read and split into lines (also warms the page cache for the others).
    let started = Instant::now();
    let mut reader = std::io::BufReader::with_capacity(64 << 10, std::fs::File::open(&path)?);
    let (mut lines, mut buf) = (0u64, Vec::with_capacity(256));
    while reader.read_until(b'\n', &mut buf)? > 0 {
        lines += 1;
        std::hint::black_box(&buf);
        buf.clear();
    }
    anyhow::ensure!(lines == bytes / line.len() as u64, "native loop read {lines} lines");
    rows.push(FilesRow { path: "native", bytes, elapsed: started.elapsed() });

    let connector = |destination: &str| {
        serde_json::json!({"name": "bench", "config": {
            "connector.class": "file-pulse", "topic": "bench", "destination": destination,
            "fs.listing.directory.path": inbox, "sandbox.fs.read": inbox, "monitor.interval.ms": "20",
        }})
        .to_string()
    };
    let done = |data: &Path| -> bool {
        let Ok(db) = Embedded::open_existing(data) else { return false };
        let offsets =
            crate::store::OffsetStore::all_offsets(&db, &Namespace::new(crate::store::DEFAULT_TENANT, "bench"))
                .unwrap_or_default();
        offsets.iter().any(|(_, o)| o.contains("\"done\":true"))
    };

    // Local destination, in this process.
    let data = scratch.join("data-local");
    let herder = crate::herder::Herder::open(&data, plugin_dir).await?;
    // Compile before the clock starts; the compile cache makes the child's start fast too.
    let config = crate::config::ConnectorConfig::from_json(&connector("local"), "bench")?;
    let started = Instant::now();
    herder.start(config).await?;
    while !done(&data) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rows.push(FilesRow { path: "local", bytes, elapsed: started.elapsed() });
    herder.shutdown().await;

    // stdout destination: a child process writing to /dev/null.
    let data = scratch.join("data-stdout");
    std::fs::create_dir_all(&data)?;
    // Reuse the compiled plugins, so the child's start-up is not timed as compilation.
    std::fs::create_dir_all(data.join("compiled"))?;
    for entry in std::fs::read_dir(scratch.join("data-local/compiled"))? {
        let entry = entry?;
        std::fs::copy(entry.path(), data.join("compiled").join(entry.file_name()))?;
    }
    let file = scratch.join("stdout.json");
    std::fs::write(&file, connector("stdout"))?;
    let started = Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("run")
        .arg("--data-dir")
        .arg(&data)
        .arg("--plugin-path")
        .arg(plugin_dir)
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    while !done(&data) {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the stdout run exited early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rows.push(FilesRow { path: "stdout", bytes, elapsed: started.elapsed() });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(rows)
}

pub fn print_files_table(rows: &[FilesRow]) {
    println!("file-pulse: one file of 100-byte lines, read.mode=lines");
    println!("{:<8} {:>10} {:>9} {:>9} {:>14}", "path", "MB", "seconds", "MB/s", "ratio/native");
    let native = rows.first().map(|r| r.bytes as f64 / r.elapsed.as_secs_f64());
    for row in rows {
        let rate = row.bytes as f64 / row.elapsed.as_secs_f64();
        println!(
            "{:<8} {:>10.0} {:>9.2} {:>9.1} {:>14.3}",
            row.path,
            row.bytes as f64 / 1e6,
            row.elapsed.as_secs_f64(),
            rate / 1e6,
            native.map_or(0.0, |n| rate / n)
        );
    }
}

/// `sluice bench fairness`: records/s of the counter alone, then beside `busy` plugins
/// that spin just under their deadline in every poll, in one run.
pub async fn fairness(
    plugin_dir: &Path,
    busy_plugin: &Path,
    busy: usize,
    seconds: u64,
    rate: u64,
) -> anyhow::Result<(f64, f64)> {
    let scratch = std::env::temp_dir().join(format!("sluice-bench-fairness-{}", std::process::id()));
    let plugins = scratch.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    std::fs::copy(plugin_dir.join("counter.wasm"), plugins.join("counter.wasm")).context("counter.wasm")?;
    std::fs::copy(busy_plugin, plugins.join("hostile.wasm")).with_context(|| format!("{}", busy_plugin.display()))?;
    let mut rates = Vec::new();
    for (round, neighbours) in [0, busy].into_iter().enumerate() {
        let herder = crate::herder::Herder::open(&scratch.join(format!("data-{round}")), &plugins).await?;
        for n in 0..neighbours {
            let config = format!(
                r#"{{"name": "busy-{n}", "config": {{"connector.class": "hostile", "topic": "busy", "hostile.attack": "busy", "hostile.busy.ms": "4000"}}}}"#
            );
            herder.start(crate::config::ConnectorConfig::from_json(&config, "busy")?).await?;
        }
        let config = format!(
            r#"{{"name": "fair", "config": {{"connector.class": "counter", "topic": "fair", "records.per.second": "{rate}", "batch.size": "500"}}}}"#
        );
        herder.start(crate::config::ConnectorConfig::from_json(&config, "fair")?).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (before, started) = (herder.delivered("fair").await, Instant::now());
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let delivered = herder.delivered("fair").await - before;
        rates.push(delivered as f64 / started.elapsed().as_secs_f64());
        herder.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok((rates[0], rates[1]))
}

/// One row of `sluice bench languages`.
pub struct LanguageRow {
    pub plugin: &'static str,
    pub language: &'static str,
    pub size: u64,
    pub cold_compile: Duration,
    pub cached_load: Duration,
    /// Median of the instantiations.
    pub instantiate: Duration,
    pub records_per_second: f64,
    /// Mean value size of the polled records.
    pub value_bytes: f64,
}

/// The shipped connector of each language, with its config for ~1 KiB records as fast as
/// `poll` can make them.
type KeyValues = &'static [(&'static str, &'static str)];

const LANGUAGE_PLUGINS: &[(&str, &str, KeyValues)] = &[
    ("counter", "Rust", &[("topic", "bench"), ("record.size", "1024"), ("batch.size", "500")]),
    (
        "sensor-fleet",
        "Python",
        &[("topic", "bench"), ("fleet.size", "8"), ("record.min.bytes", "1024"), ("batch.size", "500")],
    ),
    (
        "ndjson-replay",
        "JavaScript",
        &[
            ("topic", "bench"),
            ("replay.loops", "0"),
            ("replay.rate", "0"),
            ("record.min.bytes", "1024"),
            ("batch.size", "500"),
        ],
    ),
];

/// For each language's connector, in one run: component size, compile time without and
/// with the cache, instantiation time, and records/s through one task's `poll`.
pub async fn languages(plugin_dir: &Path, seconds: u64, instantiations: usize) -> anyhow::Result<Vec<LanguageRow>> {
    let runtime = Runtime::new()?;
    let scratch = std::env::temp_dir().join(format!("sluice-bench-languages-{}", std::process::id()));
    let db = Arc::new(Embedded::open(&scratch)?);
    let mut rows = Vec::new();
    for &(plugin, language, config) in LANGUAGE_PLUGINS {
        // A folder holding only this plugin, so each load times one component.
        let folder = scratch.join(plugin);
        std::fs::create_dir_all(&folder)?;
        let file = plugin_dir.join(format!("{plugin}.wasm"));
        std::fs::copy(&file, folder.join(format!("{plugin}.wasm"))).with_context(|| file.display().to_string())?;
        let cache = scratch.join("compiled");
        let cold = Registry::load(&runtime, &folder, &cache).await?;
        let warm = Registry::load(&runtime, &folder, &cache).await?;
        let (Some(cold), Some(warm)) = (cold.get(plugin), warm.get(plugin)) else {
            anyhow::bail!("{plugin}.wasm was rejected: see `sluice plugins --plugin-path {}`", plugin_dir.display());
        };
        anyhow::ensure!(!cold.from_cache && warm.from_cache, "{plugin}: the compile cache did not behave");

        let context = || InstanceContext {
            namespace: Namespace::new("bench", plugin),
            task: None,
            offsets: db.clone(),
            reconfigure: None,
        };
        // Room for the guest toolchains' growing memory (see `sandbox.memory.recycle.percent`)
        // over the measured seconds, so no recycling is timed.
        let settings = SandboxSettings { memory_max_bytes: 1 << 30, ..SandboxSettings::default() };
        let mut times = Vec::with_capacity(instantiations);
        for _ in 0..instantiations.max(1) {
            let started = Instant::now();
            let instance = runtime.instantiate(warm.pre(), context(), &settings).await?;
            times.push(started.elapsed());
            drop(instance);
        }
        times.sort();

        let pairs: Vec<(String, String)> = config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut connector = runtime.instantiate(warm.pre(), context(), &settings).await?;
        connector.connector_start(&pairs).await?.map_err(|e| anyhow::anyhow!("{plugin} start: {e:?}"))?;
        let task_config = connector.task_configs(1).await?.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let task_config = task_config.into_iter().next().context("no task config")?;
        let mut task = runtime.instantiate(warm.pre(), context(), &settings).await?;
        task.task_start(&task_config).await?.map_err(|e| anyhow::anyhow!("{plugin} task start: {e:?}"))?;
        task.poll().await?.map_err(|e| anyhow::anyhow!("{e:?}"))?; // warm-up
        let (mut records, mut value_bytes) = (0u64, 0u64);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(seconds) {
            let polled = task.poll().await.with_context(|| format!("{plugin} after {records} records"))?;
            let polled = polled.map_err(|e| anyhow::anyhow!("{e:?}"))?;
            anyhow::ensure!(!polled.is_empty(), "{plugin} stopped producing records");
            records += polled.len() as u64;
            value_bytes += polled.iter().map(|r| r.value.as_ref().map_or(0, Vec::len) as u64).sum::<u64>();
        }
        rows.push(LanguageRow {
            plugin,
            language,
            size: std::fs::metadata(&file)?.len(),
            cold_compile: cold.compile_time,
            cached_load: warm.compile_time,
            instantiate: times[times.len() / 2],
            records_per_second: records as f64 / started.elapsed().as_secs_f64(),
            value_bytes: value_bytes as f64 / records.max(1) as f64,
        });
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(rows)
}

pub fn print_languages_table(rows: &[LanguageRow]) {
    println!(
        "| language | plugin | component size | cold compile | cached load | instantiation | poll records/s (value bytes) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {} | {:.1} MB | {:.0} ms | {:.1} ms | {:.0} µs | {:.0} ({:.0}) |",
            row.language,
            row.plugin,
            row.size as f64 / 1e6,
            row.cold_compile.as_secs_f64() * 1e3,
            row.cached_load.as_secs_f64() * 1e3,
            row.instantiate.as_secs_f64() * 1e6,
            row.records_per_second,
            row.value_bytes,
        );
    }
}
