//! `sluice-bench languages`: per language (Rust, Python, JavaScript connectors), component
//! size, cold compile, cached load, instantiation and records/s through `poll`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice::config::{SandboxSettings, WorkerConfig};
use sluice::runtime::{InstanceContext, Registry, Runtime};
use sluice::storage::{DataDir, Namespace, Stores};

/// One row of `sluice-bench languages`.
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

/// The shipped connector of each language, and the minimal Python and JavaScript ones
/// (the counter's logic, test fixtures in `tests/plugins/`), with their config for ~1 KiB
/// records as fast as `poll` can make them.
type KeyValues = &'static [(&'static str, &'static str)];

const MINIMAL: KeyValues = &[("topic", "bench"), ("record.size", "1024"), ("batch.size", "500")];

const LANGUAGE_PLUGINS: &[(&str, &str, KeyValues)] = &[
    ("counter", "Rust", &[("topic", "bench"), ("record.size", "1024"), ("batch.size", "500")]),
    ("counter-py", "Python (minimal)", MINIMAL),
    ("counter-js", "JavaScript (minimal)", MINIMAL),
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
/// with the cache, instantiation time, and records/s through one task's `poll`. `only`, when
/// not empty, names the plugins to measure.
pub async fn languages(
    plugin_dir: &Path,
    seconds: u64,
    rounds: u32,
    instantiations: usize,
    only: &[String],
) -> anyhow::Result<Vec<LanguageRow>> {
    let runtime = Runtime::new()?;
    let scratch = std::env::temp_dir().join(format!("sluice-bench-languages-{}", std::process::id()));
    let stores = Stores::open(&WorkerConfig::default(), &DataDir::new(&scratch))?;
    let mut rows = Vec::new();
    for &(plugin, language, config) in LANGUAGE_PLUGINS {
        if !only.is_empty() && !only.iter().any(|name| name == plugin) {
            continue;
        }
        // A folder holding only this plugin, so each load times one component.
        let folder = scratch.join(plugin);
        std::fs::create_dir_all(&folder)?;
        // The minimal plugins are test fixtures, built beside the shipped ones.
        let shipped = plugin_dir.join(format!("{plugin}.wasm"));
        let fixture = Path::new(sluice::BUILT_PLUGINS).with_file_name("test-plugins").join(format!("{plugin}.wasm"));
        let file = if shipped.exists() { shipped } else { fixture };
        std::fs::copy(&file, folder.join(format!("{plugin}.wasm"))).with_context(|| file.display().to_string())?;
        let cache = DataDir::new(&scratch).compile_cache();
        let cold = Registry::load(&runtime, &folder, &cache).await?;
        // A restart finds a plugin file that was not just written: the cache then knows it
        // by its stat and neither reads nor hashes it (see `registry.rs`). Let the copy age,
        // load once to index it, then time the load a restart does.
        let copied = folder.join(format!("{plugin}.wasm"));
        while std::fs::metadata(&copied)?.modified()?.elapsed().unwrap_or_default() < Duration::from_millis(2100) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Registry::load(&runtime, &folder, &cache).await?;
        let warm = Registry::load(&runtime, &folder, &cache).await?;
        let (Some(cold), Some(warm)) = (cold.get(plugin), warm.get(plugin)) else {
            anyhow::bail!("{plugin}.wasm was rejected: see `sluice plugins --plugin-path {}`", plugin_dir.display());
        };
        anyhow::ensure!(!cold.from_cache && warm.from_cache, "{plugin}: the compile cache did not behave");

        let context = || InstanceContext {
            namespace: Namespace::new("bench", plugin),
            task: None,
            offsets: stores.offsets().clone(),
            reconfigure: None,
        };
        // Room for the guest toolchains' growing memory (see `sandbox.memory.recycle.percent`):
        // a recycle about every five seconds of a Python task rather than every third of one.
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
        let start_task = || async {
            let mut task = runtime.instantiate(warm.pre(), context(), &settings).await?;
            task.task_start(&task_config).await?.map_err(|e| anyhow::anyhow!("{plugin} task start: {e:?}"))?;
            anyhow::Ok(task)
        };
        let mut task = start_task().await?;
        task.poll().await?.map_err(|e| anyhow::anyhow!("{e:?}"))?; // warm-up
        // The best of `rounds` timed runs, as the other record-path rows keep their best
        // round: these machines lose whole milliseconds of CPU to their neighbours.
        let (mut best_rate, mut all_records, mut value_bytes) = (0f64, 0u64, 0u64);
        for _ in 0..rounds.max(1) {
            let mut records = 0u64;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(seconds) {
                // The Python and JavaScript bindings never free a returned batch's bytes: past
                // `sandbox.memory.recycle.percent` of the cap, a new instance takes over, as a
                // worker recycles such a task (and within the timed seconds).
                if settings.recycle_bytes().is_some_and(|limit| task.largest_memory() >= limit) {
                    drop(task);
                    task = start_task().await?;
                }
                let polled = task.poll().await.with_context(|| format!("{plugin} after {records} records"))?;
                let polled = polled.map_err(|e| anyhow::anyhow!("{e:?}"))?;
                anyhow::ensure!(!polled.records.is_empty(), "{plugin} stopped producing records");
                records += polled.records.len() as u64;
                value_bytes +=
                    polled.records.iter().map(|r| r.value.map_or(0, |span| u64::from(span.len))).sum::<u64>();
            }
            best_rate = best_rate.max(records as f64 / started.elapsed().as_secs_f64());
            all_records += records;
        }
        rows.push(LanguageRow {
            plugin,
            language,
            size: std::fs::metadata(&file)?.len(),
            cold_compile: cold.compile_time,
            cached_load: warm.compile_time,
            instantiate: times[times.len() / 2],
            records_per_second: best_rate,
            value_bytes: value_bytes as f64 / all_records.max(1) as f64,
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
