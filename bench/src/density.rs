//! `sluice-bench density`: many idle connectors in one `sluice run` (a child process): how
//! many sandboxes started and how many failed, how long they took, resident memory, CPU
//! once settled (idle tasks back off), and how long a SIGTERM takes to stop them all.
//! Linux: memory and CPU are read from `/proc`.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice::config::{DEFAULT_TENANT, SandboxSettings, WorkerConfig, WorkerSandbox};
use sluice::runtime::{InstanceContext, Registry, Runtime};
use sluice::storage::{DataDir, Namespace, State, Stores};

/// How a run's tasks idle.
#[derive(Clone, Copy)]
pub struct Idle {
    /// `poll.idle.max.ms` and `monitor.interval.ms` of every connector.
    pub idle_ms: u64,
    /// The worker's `[sandbox] idle_polls_per_second`.
    pub polls_per_second: u32,
}

impl Idle {
    /// An idle task's longest pause with `tasks` idle tasks, as the worker works it out.
    pub fn longest_pause(&self, tasks: usize) -> Duration {
        sluice::connect::IdlePolls::new(self.polls_per_second)
            .longest_pause_among(tasks, Duration::from_millis(self.idle_ms))
    }
}

pub struct DensityRow {
    pub connectors: usize,
    pub tasks: usize,
    pub idle: Idle,
    /// An idle task's longest pause in this run.
    pub longest_pause: Duration,
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

/// The least an idle wake-up costs, measured apart from the worker: what no change to the
/// task loop can go below while every idle task wakes on its own timer and calls its
/// plugin.
pub struct IdleFloor {
    pub tasks: usize,
    pub idle_ms: u64,
    /// CPU (of one core) of `tasks` tokio tasks on a runtime like the worker's that do
    /// nothing but sleep `idle_ms` in a loop.
    pub timers_cpu: f64,
    /// One empty `poll` of an idle counter task instance, taking turns among `tasks` of
    /// them (so each call finds its instance cold, as in the worker): the host's call
    /// (deadline, wasmtime, the guest) and nothing around it.
    pub empty_poll: Duration,
}

/// CPU seconds this process used so far.
fn own_cpu_seconds() -> anyhow::Result<f64> {
    cpu_seconds(std::process::id())
}

/// Measures [`IdleFloor`] for `tasks` idle tasks polled every `idle_ms`.
pub async fn idle_floor(plugin_dir: &Path, tasks: usize, idle_ms: u64, settle: Duration) -> anyhow::Result<IdleFloor> {
    // Timers alone: each task starts at its own phase, as a worker's tasks do.
    let sleepers: Vec<_> = (0..tasks)
        .map(|i| {
            let phase = Duration::from_millis(idle_ms * i as u64 / tasks as u64);
            tokio::spawn(async move {
                tokio::time::sleep(phase).await;
                loop {
                    tokio::time::sleep(Duration::from_millis(idle_ms)).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(idle_ms).max(Duration::from_secs(1))).await;
    let (before, at) = (own_cpu_seconds()?, Instant::now());
    tokio::time::sleep(settle).await;
    let timers_cpu = (own_cpu_seconds()? - before) / at.elapsed().as_secs_f64();
    sleepers.iter().for_each(|sleeper| sleeper.abort());

    // Calls alone.
    let max_instances = u32::try_from(tasks + 64).unwrap_or(u32::MAX).min(sluice::config::MOST_INSTANCES);
    let runtime = Runtime::for_worker(&WorkerSandbox { max_instances, ..WorkerSandbox::default() })?;
    let scratch = DataDir::new(std::env::temp_dir().join(format!("sluice-bench-floor-{}", std::process::id())));
    let stores = Stores::open(&WorkerConfig::default(), &scratch)?;
    let registry = Registry::load(&runtime, plugin_dir, &scratch.compile_cache()).await?;
    let plugin =
        registry.get("counter").ok_or_else(|| anyhow::anyhow!("no counter.wasm in {}", plugin_dir.display()))?;
    let config: Vec<(String, String)> = vec![("topic".into(), "idle".into()), ("record.count".into(), "1".into())];
    let mut instances = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let context = InstanceContext {
            namespace: Namespace::new(DEFAULT_TENANT, format!("idle{}", i / 10)),
            task: Some((i % 10) as u32),
            offsets: stores.offsets().clone(),
            reconfigure: None,
        };
        let mut instance = runtime.instantiate(plugin.pre(), context, &SandboxSettings::default()).await?;
        instance.task_start(&config).await?.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        // Its one record: from now on its polls are empty.
        instance.poll().await?.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        instances.push(instance);
    }
    let mut best = Duration::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        for instance in &mut instances {
            let polled = instance.poll().await?.map_err(|e| anyhow::anyhow!("{e:?}"))?;
            anyhow::ensure!(polled.records.is_empty(), "an idle counter task returned records");
        }
        best = best.min(started.elapsed() / tasks.max(1) as u32);
    }
    drop(instances);
    let _ = std::fs::remove_dir_all(scratch.root());
    Ok(IdleFloor { tasks, idle_ms, timers_cpu, empty_poll: best })
}

pub fn print_idle_floor(floor: &IdleFloor) {
    let wakes = floor.tasks as f64 * 1000.0 / floor.idle_ms as f64;
    let calls_cpu = wakes * floor.empty_poll.as_secs_f64();
    println!(
        "the floor at {} idle tasks polled every {} ms ({wakes:.0} wake-ups/s), measured apart from the worker:",
        floor.tasks, floor.idle_ms
    );
    println!("| part | cost | of one core |");
    println!("|---|---|---|");
    println!(
        "| tokio tasks that only sleep {} ms in a loop | {:.2} µs a wake-up | {:.1} % |",
        floor.idle_ms,
        floor.timers_cpu / wakes * 1e6,
        floor.timers_cpu * 100.0
    );
    println!(
        "| an empty poll of a cold idle counter instance | {:.2} µs a call | {:.1} % |",
        floor.empty_poll.as_secs_f64() * 1e6,
        calls_cpu * 100.0
    );
    println!("| both | | {:.1} % |", (floor.timers_cpu + calls_cpu) * 100.0);
}

/// `connectors` counter connectors of `tasks` tasks each, every task sending one record
/// and then finding nothing, in one `sluice run` with room for all their sandboxes; their
/// tasks back off to `idle_ms` between empty polls and they tick every `idle_ms`.
pub async fn density(
    plugin_dir: &Path,
    connectors: usize,
    tasks: usize,
    settle: Duration,
    idle: Idle,
) -> anyhow::Result<DensityRow> {
    let idle_ms = idle.idle_ms;
    let longest_pause = idle.longest_pause(connectors * tasks);
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
    std::fs::write(
        &toml,
        format!(
            "[sandbox]\nmax_instances = {}\nidle_polls_per_second = {}\n",
            (instances + 64).min(16_384),
            idle.polls_per_second
        ),
    )?;
    let data = scratch.join("data");
    let started = Instant::now();
    let mut child = crate::SluiceChild::spawn(
        std::process::Command::new(std::env::current_exe()?)
            .args([crate::SLUICE_CLI, "run", "--config"])
            .arg(&toml)
            .arg("--data-dir")
            .arg(&data)
            .arg("--plugin-path")
            .arg(plugin_dir)
            .args(&paths)
            .env("SLUICE_LOG", "warn"),
        scratch.join("sluice.stderr"),
    )?;
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
        child.exited_early("sluice run")?;
        anyhow::ensure!(Instant::now() < deadline, "the connectors did not start within 10 minutes");
        if let Some((running, failed, first)) = counts(&data)
            && running + failed == connectors * tasks
        {
            break (running, failed, first);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let started_in = started.elapsed();
    // Settle: an idle task's backoff doubles from 1 ms, so it reaches its longest pause
    // after about twice that. Then measure for long enough that every task and connector wakes.
    tokio::time::sleep(settle.max(2 * longest_pause)).await;
    let (cpu_before, at) = (cpu_seconds(pid)?, Instant::now());
    tokio::time::sleep(settle.max(longest_pause)).await;
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
        idle,
        longest_pause,
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
        "| poll.idle.max.ms = monitor.interval.ms | idle_polls_per_second | a task's longest idle pause | tasks running | tasks failed | all started in | resident memory (VmRSS) | proportional (Pss) | idle CPU (of one core) | SIGTERM to exit |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        let budget = match row.idle.polls_per_second {
            0 => "0 (none)".to_string(),
            n => n.to_string(),
        };
        println!(
            "| {} | {budget} | {:.0} ms | {} | {} | {:.1} s | {:.0} MiB | {:.0} MiB | {:.1} % | {:.1} s |",
            row.idle.idle_ms,
            row.longest_pause.as_millis(),
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
            println!("first failure ({} ms): {trace}", row.idle.idle_ms);
        }
    }
}
