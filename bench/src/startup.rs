//! `sluice-bench startup`: how soon `sluice run` (a child process) of one file-pulse
//! connector has its first record in the local log, with every shipped plugin in the
//! folder (the Python and JavaScript ones take seconds to compile), from a cold compile
//! cache and from a warm one, beside the time file-pulse alone takes to compile.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluice::config::{DEFAULT_TENANT, WorkerConfig};
use sluice::runtime::{Registry, Runtime};
use sluice::storage::{DataDir, Stores};

pub struct StartupRow {
    pub start: &'static str,
    pub first_record: Duration,
}

/// Time from spawning `sluice run` to the first record in the local log.
async fn first_record(plugin_dir: &Path, data: &Path, connector: &Path) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut child = crate::SluiceChild::spawn(
        std::process::Command::new(std::env::current_exe()?)
            .args([crate::SLUICE_CLI, "run", "--data-dir"])
            .arg(data)
            .arg("--plugin-path")
            .arg(plugin_dir)
            .arg(connector)
            // The data directory's own cache, not the user's shared one: cold must be cold.
            .env("SLUICE_COMPILE_CACHE", sluice::storage::DataDir::new(data).compile_cache())
            .env("SLUICE_LOG", "warn"),
        data.with_extension("stderr"),
    )?;
    let mut stores = None;
    let took = loop {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(300), "no record within 5 minutes");
        child.exited_early("sluice run")?;
        if stores.is_none() {
            stores = Stores::open_existing(&WorkerConfig::default(), &DataDir::new(data)).ok();
        }
        if let Some(stores) = &stores
            && stores.local().topics(DEFAULT_TENANT).is_ok_and(|topics| topics.iter().any(|(_, n)| *n > 0))
        {
            break started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    drop(child);
    Ok(took)
}

pub async fn startup(plugin_dir: &Path) -> anyhow::Result<(Vec<StartupRow>, Duration, Vec<String>)> {
    let scratch = std::env::temp_dir().join(format!("sluice-bench-startup-{}", std::process::id()));
    let inbox = scratch.join("inbox");
    std::fs::create_dir_all(&inbox)?;
    let inbox = std::fs::canonicalize(&inbox)?;
    std::fs::write(inbox.join("first.log"), "one line\n")?;
    let connector: PathBuf = scratch.join("file-pulse.json");
    let config = serde_json::json!({"name": "startup", "config": {
        "connector.class": "file-pulse", "topic": "lines",
        "fs.listing.directory.path": inbox, "sandbox.fs.read": inbox,
    }});
    std::fs::write(&connector, config.to_string())?;

    let mut rows = Vec::new();
    let cold = scratch.join("cold");
    rows.push(StartupRow {
        start: "cold compile cache",
        first_record: first_record(plugin_dir, &cold, &connector).await?,
    });
    // Warm: a new data directory holding the compiled plugins of the first.
    let warm = scratch.join("warm");
    let (from, to) = (DataDir::new(&cold).compile_cache(), DataDir::new(&warm).compile_cache());
    crate::copy_compile_cache(&from, &to)?;
    rows.push(StartupRow {
        start: "warm compile cache",
        first_record: first_record(plugin_dir, &warm, &connector).await?,
    });

    // file-pulse alone, compiled without a cache.
    let alone = scratch.join("alone");
    std::fs::create_dir_all(&alone)?;
    std::fs::copy(plugin_dir.join("file-pulse.wasm"), alone.join("file-pulse.wasm"))?;
    let runtime = Runtime::new()?;
    let registry = Registry::load(&runtime, &alone, &scratch.join("alone-cache")).await?;
    let compile = registry.get("file-pulse").map(|p| p.compile_time).unwrap_or_default();
    let mut others: Vec<String> = std::fs::read_dir(plugin_dir)?
        .filter_map(|e| e.ok()?.path().file_stem()?.to_str().map(String::from))
        .filter(|name| name != "file-pulse")
        .collect();
    others.sort();
    let _ = std::fs::remove_dir_all(&scratch);
    Ok((rows, compile, others))
}

pub fn print_startup_table(rows: &[StartupRow], compile: Duration, others: &[String]) {
    println!(
        "start-up: `sluice run` of one file-pulse connector until its first record is in the local log; the folder also holds {}",
        others.join(", ")
    );
    println!("| start | first record after | goal |");
    println!("|---|---|---|");
    for row in rows {
        let goal = if row.start.starts_with("cold") {
            format!("≤ file-pulse's compile ({:.0} ms) + 500 ms", compile.as_secs_f64() * 1e3)
        } else {
            "≤ 100 ms".into()
        };
        println!("| {} | {:.0} ms | {goal} |", row.start, row.first_record.as_secs_f64() * 1e3);
    }
}
