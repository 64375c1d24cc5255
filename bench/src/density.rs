//! `sluice-bench density`: many idle connectors in one `sluice run` (a child process): how
//! many sandboxes started and how many failed, how long they took, resident memory, CPU
//! once settled (idle tasks back off), and how long a SIGTERM takes to stop them all.
//! Linux: memory and CPU are read from `/proc`.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice::config::{DEFAULT_TENANT, WorkerConfig};
use sluice::storage::{DataDir, State, Stores};

pub struct DensityRow {
    pub connectors: usize,
    pub tasks: usize,
    /// `poll.idle.max.ms` and `monitor.interval.ms` of every connector.
    pub idle_ms: u64,
    pub running: usize,
    pub failed: usize,
    pub first_failure: Option<String>,
    pub started_in: Duration,
    pub resident_bytes: u64,
    pub proportional_bytes: u64,
    pub idle_cpu: f64,
    pub stopped_in: Duration,
}

/// CPU seconds the process used so far (user and system).
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let hz = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<f64>().ok())
        .unwrap_or(100.0);
    Ok((ticks(11) + ticks(12)) as f64 / hz)
}

/// A `kB` figure of a `/proc` file.
fn proc_kib(path: &str, field: &str) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(path)?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    Ok(kib << 10)
}

/// Resident memory as `ps` shows it (`VmRSS`), and proportional (`Pss`): every sandbox
/// maps its plugin's memory image copy-on-write, and `VmRSS` counts a page of the image
/// once per sandbox that maps it, `Pss` once.
fn memory_bytes(pid: u32) -> anyhow::Result<(u64, u64)> {
    Ok((proc_kib(&format!("/proc/{pid}/status"), "VmRSS:")?, proc_kib(&format!("/proc/{pid}/smaps_rollup"), "Pss:")?))
}

/// `connectors` counter connectors of `tasks` tasks each, every task sending one record
/// and then finding nothing, in one `sluice run` with room for all their sandboxes; their
/// tasks back off to `idle_ms` between empty polls and they tick every `idle_ms`.
pub async fn density(
    plugin_dir: &Path,
    connectors: usize,
    tasks: usize,
    settle: Duration,
    idle_ms: u64,
) -> anyhow::Result<DensityRow> {
    let scratch = std::env::temp_dir().join(format!("sluice-bench-density-{}", std::process::id()));
    let files = scratch.join("connectors");
    std::fs::create_dir_all(&files)?;
    let mut paths = Vec::new();
    for i in 0..connectors {
        let path = files.join(format!("idle{i}.json"));
        let config = serde_json::json!({"name": format!("idle{i}"), "config": {
            "connector.class": "counter", "topic": "idle", "tasks.max": tasks.to_string(), "record.count": "1",
            "poll.idle.max.ms": idle_ms.to_string(), "monitor.interval.ms": idle_ms.to_string(),
        }});
        std::fs::write(&path, config.to_string())?;
        paths.push(path);
    }
    let instances = connectors * (tasks + 1);
    let toml = scratch.join("sluice.toml");
    std::fs::write(&toml, format!("[sandbox]\nmax_instances = {}\n", (instances + 64).min(16_384)))?;
    let data = scratch.join("data");
    let started = Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([crate::SLUICE_CLI, "run", "--config"])
        .arg(&toml)
        .arg("--data-dir")
        .arg(&data)
        .arg("--plugin-path")
        .arg(plugin_dir)
        .args(&paths)
        .env("SLUICE_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let pid = child.id();
    // Started: every task RUNNING with its one record sent, or FAILED.
    let counts = |data: &Path| -> Option<(usize, usize, Option<String>)> {
        let stores = Stores::open_existing(&WorkerConfig::default(), &DataDir::new(data)).ok()?;
        let statuses = stores.statuses().statuses(DEFAULT_TENANT).ok()?;
        let tasks = statuses.iter().flat_map(|s| &s.tasks);
        let running = tasks.clone().filter(|t| t.state == State::Running).count();
        let failed: Vec<_> = tasks.filter(|t| t.state == State::Failed).collect();
        Some((running, failed.len(), failed.first().and_then(|t| t.trace.clone())))
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let (running, failed, first_failure) = loop {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("sluice run exited early: {status}");
        }
        anyhow::ensure!(Instant::now() < deadline, "the connectors did not start within 10 minutes");
        if let Some((running, failed, first)) = counts(&data)
            && running + failed == connectors * tasks
        {
            break (running, failed, first);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let started_in = started.elapsed();
    // Settle (the idle backoff grows to its longest), then measure.
    tokio::time::sleep(settle).await;
    let (cpu_before, at) = (cpu_seconds(pid)?, Instant::now());
    tokio::time::sleep(settle).await;
    let idle_cpu = (cpu_seconds(pid)? - cpu_before) / at.elapsed().as_secs_f64();
    let (resident, proportional) = memory_bytes(pid)?;
    let stopping = Instant::now();
    std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status()?;
    child.wait()?;
    let stopped_in = stopping.elapsed();
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(DensityRow {
        connectors,
        tasks,
        idle_ms,
        running,
        failed,
        first_failure,
        started_in,
        resident_bytes: resident,
        proportional_bytes: proportional,
        idle_cpu,
        stopped_in,
    })
}

pub fn print_density_table(rows: &[DensityRow]) {
    let Some(first) = rows.first() else { return };
    println!(
        "density: {} idle counter connectors x {} tasks in one `sluice run` ({} sandboxes with the connectors'), one run per idle interval",
        first.connectors,
        first.tasks,
        first.connectors * (first.tasks + 1)
    );
    println!(
        "| poll.idle.max.ms = monitor.interval.ms | tasks running | tasks failed | all started in | resident memory (VmRSS) | proportional (Pss) | idle CPU (of one core) | SIGTERM to exit |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {} | {} | {:.1} s | {:.0} MiB | {:.0} MiB | {:.1} % | {:.1} s |",
            row.idle_ms,
            row.running,
            row.failed,
            row.started_in.as_secs_f64(),
            row.resident_bytes as f64 / (1 << 20) as f64,
            row.proportional_bytes as f64 / (1 << 20) as f64,
            row.idle_cpu * 100.0,
            row.stopped_in.as_secs_f64()
        );
    }
    for row in rows {
        if let Some(trace) = &row.first_failure {
            println!("first failure ({} ms): {trace}", row.idle_ms);
        }
    }
}
