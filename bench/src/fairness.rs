//! `sluice-bench fairness`: records/s of the counter alone, then beside busy-looping
//! plugins, in one run, and the ratio.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice::config::ConnectorConfig;
use sluice::connect::Herder;

/// `sluice-bench fairness`: records/s of the counter alone, then beside `busy` plugins
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
        let herder = Herder::open(&scratch.join(format!("data-{round}")), &plugins).await?;
        for n in 0..neighbours {
            let config = format!(
                r#"{{"name": "busy-{n}", "config": {{"connector.class": "hostile", "topic": "busy", "hostile.attack": "busy", "hostile.busy.ms": "4000"}}}}"#
            );
            herder.start(ConnectorConfig::from_json(&config, "busy")?).await?;
        }
        let config = format!(
            r#"{{"name": "fair", "config": {{"connector.class": "counter", "topic": "fair", "records.per.second": "{rate}", "batch.size": "500"}}}}"#
        );
        herder.start(ConnectorConfig::from_json(&config, "fair")?).await?;
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
