//! The cli layer: the `sluice` command line. `run` (standalone, like `connect-standalone`),
//! `serve` (the REST API's long-running worker), `demo`, `plugins`, `offsets`, `topics`,
//! `new` and `hash-token`. Errors in connector files
//! or configs print one line naming the file, the key and the reason, and exit with code 2.
//! The benchmarks are a separate binary (`sluice-bench`, in `bench/`).
//!
//! May use every other layer.
//!
//! Output never panics: a reader that goes away (`sluice plugins | head -1`) ends a
//! command quietly with success, and messages to a closed stderr are dropped.

/// `println!` that hands back the error instead of panicking; `main` ends the command
/// quietly when stdout's reader went away.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)
    }};
}

/// `eprintln!` that never panics: with stderr closed (`2>&1 | head -3`) the message is
/// dropped and the command carries on.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod demo;
pub mod scaffold;
pub mod serve;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use serde_json::json;

use crate::config::{ConfigError, ConfigKeyInfo, ConnectorConfig, DEFAULT_TENANT, HOST_KEYS, WorkerConfig};
use crate::connect::Herder;
use crate::destinations::json::record_json;
use crate::runtime::{Registry, Runtime};
use crate::storage::{DataDir, Namespace, Stores};

#[derive(Parser)]
#[command(name = "sluice", version, about = "Run sandboxed source connectors compiled to WebAssembly components")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct DataDirArg {
    /// Where offsets, configs, statuses and local topics are kept (compiled plugins go to
    /// `$SLUICE_COMPILE_CACHE`, else `~/.cache/sluice/compiled`, shared by data directories).
    #[arg(long, env = "SLUICE_DATA_DIR", default_value = "sluice-data")]
    data_dir: PathBuf,
}

#[derive(clap::Args)]
struct WorkerConfigPath {
    /// Worker config declaring tenants (roots, quotas, hashed tokens); `./sluice.toml`
    /// is read when it exists.
    #[arg(long = "config", env = "SLUICE_CONFIG", value_name = "FILE")]
    worker_config: Option<PathBuf>,
}

impl DataDirArg {
    fn dir(&self) -> DataDir {
        DataDir::new(&self.data_dir)
    }
}

impl WorkerConfigPath {
    fn load(&self) -> anyhow::Result<WorkerConfig> {
        let loaded = match &self.worker_config {
            Some(path) => WorkerConfig::load(path),
            None if Path::new("sluice.toml").exists() => WorkerConfig::load(Path::new("sluice.toml")),
            None => Ok(WorkerConfig::default()),
        };
        loaded.map_err(|e| anyhow::Error::new(BadWorkerConfig(format!("{e:#}"))))
    }

    /// The stores of an existing data directory, for the commands that read them.
    fn existing_stores(&self, data: &DataDirArg) -> anyhow::Result<Stores> {
        Stores::open_existing(&self.load()?, &data.dir())
    }
}

#[derive(clap::Args)]
struct TenantArg {
    /// The tenant whose data to show.
    #[arg(long, default_value = DEFAULT_TENANT)]
    tenant: String,
}

#[derive(clap::Args)]
struct PluginPath {
    /// The plugin folder: every `<name>.wasm` in it is the plugin `<name>`. Defaults to
    /// the folder where `cargo build` puts this repository's plugins.
    #[arg(long, env = "SLUICE_PLUGIN_PATH", default_value = crate::BUILT_PLUGINS)]
    plugin_path: PathBuf,
}

#[derive(clap::Args)]
struct InsecureListen {
    /// Serve the API on a non-loopback address although no tenants (tokens) are declared.
    #[arg(long)]
    insecure_listen: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run connectors until Ctrl-C or SIGTERM, like Kafka's connect-standalone.
    #[command(after_help = host_keys_help())]
    Run {
        #[command(flatten)]
        data: DataDirArg,
        #[command(flatten)]
        plugins: PluginPath,
        #[command(flatten)]
        worker: WorkerConfigPath,
        /// Also serve Kafka Connect's REST API on this address (HOST:PORT), as Connect's
        /// standalone worker does.
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<String>,
        #[command(flatten)]
        insecure: InsecureListen,
        /// Exit once every connector is FINISHED (each of its tasks said it is done), with
        /// 0; exit with 1 as soon as a connector or task is FAILED and will not be restarted
        /// (`restart.policy=never`).
        #[arg(long)]
        until_done: bool,
        /// Connector files: {"name": "...", "config": {"connector.class": "...", ...}}
        #[arg(required = true)]
        connectors: Vec<PathBuf>,
    },
    /// Run a long-lived worker driven by Kafka Connect's REST API (until Ctrl-C or SIGTERM):
    /// connectors are created over HTTP, kept in the data directory and brought back in
    /// their target states after a restart; plugins added to the folder are picked up live.
    Serve {
        #[command(flatten)]
        data: DataDirArg,
        #[command(flatten)]
        plugins: PluginPath,
        #[command(flatten)]
        worker: WorkerConfigPath,
        /// Where to serve the API (HOST:PORT; port 0 picks a free one, printed at start).
        #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8083")]
        listen: String,
        #[command(flatten)]
        insecure: InsecureListen,
    },
    /// List the plugins in the plugin folder, and the files that were rejected and why.
    Plugins {
        #[command(flatten)]
        plugins: PluginPath,
        #[command(flatten)]
        data: DataDirArg,
        /// Print one JSON document (the plugins, their keys, the host's keys and the rejected files) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a connector's committed source offsets, or delete one partition's offset
    /// (so the partition is read again from the start) while no `sluice run` uses the data.
    Offsets {
        /// The connector's name (its offsets outlive it: a deleted connector's are shown too).
        connector: String,
        #[command(flatten)]
        data: DataDirArg,
        #[command(flatten)]
        worker: WorkerConfigPath,
        #[command(flatten)]
        tenant: TenantArg,
        /// Print one JSON document in Connect's shape ({"offsets":[{"partition":…,"offset":…}]}) instead of text.
        #[arg(long)]
        json: bool,
        /// The partition (JSON) whose committed offset to delete.
        #[arg(long, value_name = "PARTITION")]
        delete: Option<String>,
    },
    /// Print the SHA-256 of an API token, for a tenant's `token_sha256` in sluice.toml.
    HashToken {
        /// The token a tenant (or the operator) sends as `Authorization: Bearer TOKEN`.
        token: String,
    },
    /// Quick start: create a sample inbox and stream it with file-pulse; drop more files
    /// into the inbox while it runs. Ctrl-C stops it.
    Demo {
        #[command(flatten)]
        data: DataDirArg,
        #[command(flatten)]
        plugins: PluginPath,
        /// Where the sample inbox and the finished files go.
        #[arg(long, default_value = "sluice-demo")]
        dir: PathBuf,
    },
    /// Create a starter connector project: `sluice new connector NAME --lang rust|python|js`.
    New {
        #[command(subcommand)]
        what: NewCommand,
    },
    /// List or read the topics of the local destination.
    Topics {
        #[command(subcommand)]
        command: TopicsCommand,
    },
}

#[derive(Subcommand)]
enum NewCommand {
    /// A buildable starter connector from a template, with the WIT world, a connector
    /// file and a README that says how to build and run it.
    Connector {
        /// The plugin name (lowercase letters, digits and '-'); the build makes `NAME.wasm`.
        name: String,
        #[arg(long, value_enum)]
        lang: scaffold::Lang,
        /// Where to create the project [default: ./NAME].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum TopicsCommand {
    /// Topics and their record counts.
    List {
        #[command(flatten)]
        data: DataDirArg,
        #[command(flatten)]
        worker: WorkerConfigPath,
        #[command(flatten)]
        tenant: TenantArg,
    },
    /// Print a topic's records: values as text lines, or whole records as JSON lines.
    Read {
        topic: String,
        #[command(flatten)]
        data: DataDirArg,
        #[command(flatten)]
        worker: WorkerConfigPath,
        #[command(flatten)]
        tenant: TenantArg,
        /// Print whole records as JSON lines (topic, source partition and offset, key, value, headers, timestamp, topic offset) instead of values as text.
        #[arg(long)]
        json: bool,
        /// First topic offset to print.
        #[arg(long, default_value_t = 0)]
        from: u64,
    },
}

fn host_keys_help() -> String {
    use crate::config::keys::KeyDefault;
    let mut text = String::from("Connector config keys read by the host (the plugin documents its own):\n");
    for key in HOST_KEYS {
        let default = match key.default {
            KeyDefault::Required => "required".to_string(),
            KeyDefault::Value(value) => format!("default: {value}"),
            KeyDefault::Unset(words) => format!("default: {words}"),
        };
        text.push_str(&format!("  {:<32} {} [{default}]\n", key.name, key.documentation));
    }
    text
}

/// Exit code for a bad connector file or config.
pub(crate) const CONFIG_ERROR: u8 = 2;

pub fn main() -> ExitCode {
    main_with_args(std::env::args_os())
}

/// The command line with these arguments (the first is the program name): the benchmark
/// binary runs `sluice run` in a child process through this.
pub fn main_with_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = Cli::parse_from(args);
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        // Reloadable: `PUT /admin/loggers/{logger}` changes levels while the worker runs.
        let from_env = std::env::var("SLUICE_LOG").ok();
        let filter = crate::api::loggers::install(from_env.as_deref(), "info,wasmtime=warn,cranelift=warn");
        let output = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            // Its report of a failed write is an eprintln!, which panics when stderr is
            // gone (`2>&1 | head -3`): the panic took a worker thread's task with it.
            .log_internal_errors(false)
            .with_ansi(std::io::stderr().is_terminal());
        tracing_subscriber::registry().with(filter).with(output).init();
    }
    raise_open_file_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            say!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(dispatch(cli.command));
    // Everything was stopped within its deadline; a blocking-pool thread still held in the
    // kernel by a plugin's call (a read of a device that never answers) is not waited for.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(code) => code,
        // `sluice plugins | head -1`: the reader took what it wanted.
        Err(e) if e.chain().any(|e| e.downcast_ref::<std::io::Error>().is_some_and(is_broken_pipe)) => {
            ExitCode::SUCCESS
        }
        Err(e) if e.is::<BadWorkerConfig>() => {
            say!("error: {e:#}");
            ExitCode::from(CONFIG_ERROR)
        }
        Err(e) => {
            say!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Raises the soft limit on open files to the hard one, as Go's runtime and most servers
/// do: a worker holds a descriptor per file its tasks read, per plugin sandbox's files and
/// per REST connection, and a shell's usual 1,024 runs out long before the machine does.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                tracing::debug!("cannot raise the open-file limit: {}", std::io::Error::last_os_error());
            }
        }
    }
}

/// A worker config (`sluice.toml`) that cannot be used: exit code 2, as a bad connector
/// file gets.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BadWorkerConfig(String);

fn is_broken_pipe(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

fn config_error(e: &ConfigError) -> ExitCode {
    say!("error: {e}");
    ExitCode::from(CONFIG_ERROR)
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run { data, plugins, worker, listen, insecure, until_done, connectors } => {
            let listen = listen.map(|address| (address, insecure.insecure_listen));
            run(&data.data_dir, &plugins.plugin_path, worker.load()?, &connectors, listen, until_done).await
        }
        Command::Serve { data, plugins, worker, listen, insecure } => {
            serve::serve(&data.data_dir, &plugins.plugin_path, worker.load()?, &listen, insecure.insecure_listen).await
        }
        Command::HashToken { token } => {
            out!("{}", crate::config::hash_token(&token))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugins { plugins, data, json } => list_plugins(&plugins.plugin_path, &data.dir(), json).await,
        Command::Offsets { connector, data, worker, tenant, json, delete: None } => {
            offsets(&worker.existing_stores(&data)?, &tenant.tenant, &connector, json)
        }
        Command::Offsets { connector, data, worker, tenant, delete: Some(partition), .. } => {
            delete_offset(&data, &worker, &tenant.tenant, &connector, &partition)
        }
        Command::Demo { data, plugins, dir } => {
            let file = demo::prepare(&dir)?;
            say!(
                "streaming {}/inbox with file-pulse: drop more files there; finished files move to {}/done",
                dir.display(),
                dir.display()
            );
            say!("then: sluice topics read lines | head   (records)   sluice offsets file-pulse-demo   (offsets)");
            run(&data.data_dir, &plugins.plugin_path, WorkerConfig::default(), &[file], None, false).await
        }
        Command::New { what: NewCommand::Connector { name, lang, dir } } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            for file in scaffold::new_connector(&name, lang, &dir)? {
                out!("created {}", file.display())?;
            }
            out!("\nnext, in {}:", dir.display())?;
            for step in scaffold::build_steps(lang, &name) {
                out!("  {step}")?;
            }
            out!("  sluice run --until-done --plugin-path . connector.json")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Topics { command: TopicsCommand::List { data, worker, tenant } } => {
            let worker = worker.load()?;
            let stores = Stores::open_existing(&worker, &data.dir())?;
            known_topics_tenant(&stores, &tenant.tenant)?;
            let topics = stores.local().topics(&tenant.tenant)?;
            if topics.is_empty()
                && let Some(elsewhere) = kafka_topics_hint(&worker)
            {
                say!("the local log has no topics{elsewhere}");
            }
            for (topic, count) in topics {
                out!("{topic}\t{count}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Topics { command: TopicsCommand::Read { topic, data, worker, tenant, json, from } } => {
            let worker = worker.load()?;
            let hint = kafka_topics_hint(&worker).unwrap_or_default();
            read_topic(&Stores::open_existing(&worker, &data.dir())?, &tenant.tenant, &topic, json, from, &hint)
        }
    }
}

async fn run(
    data_dir: &Path,
    plugin_path: &Path,
    worker: WorkerConfig,
    files: &[PathBuf],
    listen: Option<(String, bool)>,
    until_done: bool,
) -> anyhow::Result<ExitCode> {
    let mut configs: Vec<ConnectorConfig> = Vec::new();
    for file in files {
        let config = match ConnectorConfig::from_file(file) {
            Ok(config) => config,
            Err(e) => return Ok(config_error(&e)),
        };
        if let Some(first) = configs.iter().find(|c| c.name == config.name) {
            return Ok(config_error(
                &config.error("name", format!("'{}' is also the name in {}", config.name, first.source)),
            ));
        }
        configs.push(config);
    }
    let listen = match listen {
        None => None,
        Some((address, insecure)) => match serve::listen_address(&address, insecure, &worker).await {
            Ok(addr) => Some(addr),
            Err(message) => {
                say!("error: {message}");
                return Ok(ExitCode::from(CONFIG_ERROR));
            }
        },
    };
    let data = DataDir::new(data_dir);
    let _lock = data.lock()?;
    // Only the plugins these connectors use are loaded before they start: no waiting on
    // the others (with --listen they load in the background, for the API).
    let used: std::collections::BTreeSet<String> =
        configs.iter().filter_map(|c| c.plugin().ok().map(String::from)).collect();
    let listener = match listen {
        Some(addr) => Some(serve::ApiServer::bind(addr).await?),
        None => None,
    };
    let listening = listener.as_ref().map(|l| l.local_addr()).transpose()?;
    let herder = Arc::new(Herder::open_for_plugins(worker, data_dir, plugin_path, Some(&used), listening).await?);
    // Every config, quotas included, is checked before any connector starts.
    let admitted = match herder.validate_all(&configs).await {
        Ok(admitted) => admitted,
        Err((at, first)) => {
            // Every problem of that config, as Connect's validate lists them (the first
            // found leads: a quota counted with the files before it is only found so).
            let mut shown = vec![first.to_string()];
            for problem in herder.problems(&configs[at]).await {
                let text = problem.to_string();
                if !shown.contains(&text) {
                    shown.push(text);
                }
            }
            for text in &shown {
                say!("error: {text}");
            }
            return Ok(ExitCode::from(CONFIG_ERROR));
        }
    };
    let server = match listener {
        Some(listener) => Some(serve::ApiServer::start(herder.clone(), &data, listener).await?),
        None => None,
    };
    for (config, admitted) in configs.into_iter().zip(admitted) {
        if let Err(e) = herder.start_admitted(config, admitted).await {
            if let Some(server) = server {
                server.stop().await;
            }
            herder.shutdown().await;
            return Ok(config_error(&e));
        }
    }
    if server.is_some() {
        let services = herder.services().clone();
        tokio::spawn(async move {
            if let Err(e) = services.registry.refresh(&services.runtime).await {
                tracing::warn!("loading the other plugins: {e:#}");
            }
        });
    }
    let exit = wait_for_signal_showing_progress(&herder, until_done).await?;
    tracing::info!("stopping: committing offsets");
    if let Some(server) = server {
        server.stop().await;
    }
    herder.shutdown().await;
    Ok(exit_code(exit))
}

/// How a worker that stopped exits: 0 on a signal, 1 (saying why) when it asked to stop.
fn exit_code(exit: Option<String>) -> ExitCode {
    match exit {
        None => ExitCode::SUCCESS,
        Some(reason) => {
            say!("error: {reason}: stopped");
            ExitCode::FAILURE
        }
    }
}

/// One connector on the progress line.
struct ConnectorProgress {
    name: String,
    state: crate::storage::State,
    running: usize,
    failed: usize,
    finished: usize,
    tasks: usize,
    records: u64,
    rate: f64,
}

impl ConnectorProgress {
    fn of(status: &crate::storage::ConnectorStatus, records: u64, rate: f64) -> ConnectorProgress {
        use crate::storage::State;
        let count = |state: State| status.tasks.iter().filter(|t| t.state == state).count();
        ConnectorProgress {
            name: status.name.clone(),
            state: status.connector.state,
            running: count(State::Running),
            failed: count(State::Failed),
            finished: count(State::Finished),
            tasks: status.tasks.len(),
            records,
            rate,
        }
    }
}

/// Above this many connectors the progress line is a summary.
const PROGRESS_CONNECTORS: usize = 8;

/// The progress line's parts: one per connector, or past [`PROGRESS_CONNECTORS`] a
/// summary and the first connectors with FAILED tasks.
fn progress_parts(connectors: &[ConnectorProgress]) -> Vec<String> {
    let failed_tasks = |c: &ConnectorProgress| {
        let mut text = String::new();
        if c.failed > 0 {
            text.push_str(&format!(", {} FAILED", c.failed));
        }
        if c.finished > 0 {
            text.push_str(&format!(", {} FINISHED", c.finished));
        }
        text
    };
    if connectors.len() <= PROGRESS_CONNECTORS {
        return connectors
            .iter()
            .map(|c| {
                format!(
                    "{} {}, {}/{} tasks running{}, {} records {:.0}/s",
                    c.name,
                    c.state,
                    c.running,
                    c.tasks,
                    failed_tasks(c),
                    c.records,
                    c.rate
                )
            })
            .collect();
    }
    let sum = |f: fn(&ConnectorProgress) -> usize| connectors.iter().map(f).sum::<usize>();
    let mut states: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for c in connectors {
        *states.entry(c.state.to_string()).or_default() += 1;
    }
    let states: Vec<String> = states.into_iter().map(|(state, n)| format!("{n} {state}")).collect();
    let mut parts = vec![format!(
        "{} connectors ({}), {}/{} tasks running, {} FAILED, {} FINISHED, {} records {:.0}/s",
        connectors.len(),
        states.join(", "),
        sum(|c| c.running),
        sum(|c| c.tasks),
        sum(|c| c.failed),
        sum(|c| c.finished),
        connectors.iter().map(|c| c.records).sum::<u64>(),
        connectors.iter().map(|c| c.rate).sum::<f64>()
    )];
    let failing: Vec<&ConnectorProgress> = connectors.iter().filter(|c| c.failed > 0).collect();
    for c in failing.iter().take(3) {
        parts.push(format!("{} {}/{} tasks running{}", c.name, c.running, c.tasks, failed_tasks(c)));
    }
    if failing.len() > 3 {
        parts.push(format!("{} more with FAILED tasks (`sluice serve` or the log say which)", failing.len() - 3));
    }
    parts
}

/// With `--until-done`: `Some(Ok(()))` once every connector is FINISHED, `Some(Err(why))`
/// once one connector or task is FAILED for good (its `restart.policy` is `never`), else
/// `None` (still working).
async fn until_done_outcome(herder: &Herder) -> Option<Result<(), String>> {
    use crate::storage::State;
    // The whole trace, indented under the line that names what failed: a guest's own error
    // output leads it.
    let trace = |trace: &Option<String>| {
        trace.as_deref().map_or("no trace".to_string(), |t| t.lines().collect::<Vec<_>>().join("\n  "))
    };
    let statuses = herder.statuses();
    // Every one failed for good when this look finds any: two that fail within one look
    // (100 ms) are both said, rather than whichever sorts first.
    let mut failures = Vec::new();
    for (ns, status) in &statuses {
        let failure = if status.connector.state == State::Failed {
            format!("connector '{}' FAILED: {}", ns.connector, trace(&status.connector.trace))
        } else if let Some(task) = status.tasks.iter().find(|t| t.state == State::Failed) {
            let named = format!("connector '{}' task {}", ns.connector, task.id);
            let trace = trace(&task.trace);
            // A trace that names its task itself (a refused record's) is not said twice.
            let trace = trace.strip_prefix(&format!("{named}: ")).unwrap_or(&trace);
            format!("{named} FAILED: {trace}")
        } else {
            continue;
        };
        let restarts = herder.connector(ns).await.is_some_and(|(config, _)| {
            config.get(crate::config::keys::RESTART_POLICY).is_some_and(|policy| policy.trim() == "on-failure")
        });
        if !restarts {
            failures.push(failure);
        }
    }
    if !failures.is_empty() {
        return Some(Err(failures.join("\n")));
    }
    let finished = !statuses.is_empty() && statuses.iter().all(|(_, s)| s.connector.state == State::Finished);
    finished.then_some(Ok(()))
}

/// How often `--until-done` looks at the statuses.
const UNTIL_DONE_CHECK: Duration = Duration::from_millis(100);

/// Waits for Ctrl-C or SIGTERM (`None`), or for the worker to ask to stop (`Some(why)`),
/// showing progress meanwhile. With `until_done`, also ends when every connector is
/// FINISHED (`None`) or one FAILED for good (`Some(why)`).
async fn wait_for_signal_showing_progress(herder: &Herder, until_done: bool) -> anyhow::Result<Option<String>> {
    // Both listened for once, before the loop: a `ctrl_c()` made anew at each turn missed
    // a Ctrl-C that came while the loop body ran (the run then went on for good).
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let live = std::io::stderr().is_terminal();
    let mut checks = tokio::time::interval(UNTIL_DONE_CHECK);
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    let started = Instant::now();
    let mut last: std::collections::HashMap<String, (u64, Instant)> = std::collections::HashMap::new();
    let mut seconds = 0u64;
    loop {
        tokio::select! {
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
            reason = herder.services().exit.requested() => {
                if live {
                    say!();
                }
                return Ok(Some(reason));
            }
            _ = checks.tick(), if until_done => match until_done_outcome(herder).await {
                None => {}
                Some(Ok(())) => {
                    if live {
                        say!();
                    }
                    say!("every connector is FINISHED");
                    return Ok(None);
                }
                Some(Err(why)) => {
                    if live {
                        say!();
                    }
                    return Ok(Some(why));
                }
            },
            _ = ticks.tick() => {
                seconds += 1;
                if !live && !seconds.is_multiple_of(10) {
                    continue;
                }
                let mut connectors = Vec::new();
                for (ns, status) in herder.statuses() {
                    let total = herder.delivered_in(&ns).await;
                    let now = Instant::now();
                    let (before, at) = last.insert(format!("{}/{}", ns.tenant, ns.connector), (total, now)).unwrap_or((0, started));
                    // A connector deleted and made again counts from zero: no rate then.
                    let rate = if now > at { total.saturating_sub(before) as f64 / (now - at).as_secs_f64() } else { 0.0 };
                    connectors.push(ConnectorProgress::of(&status, total, rate));
                }
                let parts = progress_parts(&connectors);
                if live {
                    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("\r\x1b[K{}", parts.join(" | ")).as_bytes());
                } else {
                    say!("progress: {}", parts.join(" | "));
                }
            }
        }
    }
    if live {
        say!();
    }
    Ok(None)
}

async fn list_plugins(plugin_path: &Path, data_dir: &DataDir, json: bool) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new()?;
    let registry = Registry::load(&runtime, plugin_path, &data_dir.plugin_cache()).await?;
    if json {
        let plugins: Vec<_> = registry
            .plugins()
            .iter()
            .map(|p| json!({"name": p.name, "version": p.version, "file": p.file, "config": p.config_def}))
            .collect();
        let host: Vec<ConfigKeyInfo> = HOST_KEYS.iter().map(ConfigKeyInfo::from).collect();
        out!("{}", json!({"plugins": plugins, "rejected": registry.rejected(), "host_config": host}))?;
    } else {
        out!("{:<20} {:<16} FILE", "NAME", "VERSION")?;
        for plugin in registry.plugins() {
            out!("{:<20} {:<16} {}", plugin.name, plugin.version, plugin.file.display())?;
            for key in &plugin.config_def {
                let default = match &key.default_value {
                    Some(value) => format!("default {value:?}"),
                    None => "required".into(),
                };
                out!("    {:<34} {:<9} {:<18} {}", key.name, key.type_name, default, key.documentation)?;
            }
        }
        for rejected in registry.rejected() {
            let file = rejected.file.display().to_string();
            out!("rejected {}: {}", crate::runtime::plugin_log::escape_controls(&file), rejected.reason)?;
        }
        out!("(every connector also takes the host's keys: `sluice plugins --json` lists them as host_config)")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The tenant has connectors here; otherwise one line saying which tenants do.
fn known_tenant(stores: &Stores, tenant: &str) -> anyhow::Result<()> {
    let tenants = stores.configs().tenants()?;
    if tenants.iter().any(|t| t == tenant) {
        return Ok(());
    }
    anyhow::bail!("no connector of tenant '{tenant}' ever ran in this data directory (tenants: {})", names(&tenants))
}

/// [`known_tenant`], or a tenant whose connectors are all deleted but whose records stay
/// in the local log (a delete keeps them).
fn known_topics_tenant(stores: &Stores, tenant: &str) -> anyhow::Result<()> {
    if !stores.local().topics(tenant)?.is_empty() {
        return Ok(());
    }
    known_tenant(stores, tenant)
}

/// The connector ran here, in that tenant, or its offsets are kept (a deleted connector's
/// stay, for one made again under its name); otherwise one line saying which did.
fn known_connector(stores: &Stores, tenant: &str, connector: &str) -> anyhow::Result<()> {
    let ns = crate::storage::Namespace::new(tenant, connector);
    if !stores.offsets().all_offsets(&ns)?.is_empty() {
        return Ok(());
    }
    known_tenant(stores, tenant)?;
    let connectors = stores.configs().connectors(tenant)?;
    if connectors.iter().any(|c| c == connector) {
        return Ok(());
    }
    anyhow::bail!("no connector '{connector}' in tenant {tenant} (its connectors: {})", names(&connectors))
}

fn names(names: &[String]) -> String {
    if names.is_empty() { "none".into() } else { names.join(", ") }
}

fn offsets(stores: &Stores, tenant: &str, connector: &str, json: bool) -> anyhow::Result<ExitCode> {
    known_connector(stores, tenant, connector)?;
    let offsets = stores.offsets().all_offsets(&Namespace::new(tenant, connector))?;
    if json {
        let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap_or(serde_json::Value::Null);
        let list: Vec<_> = offsets.iter().map(|(p, o)| json!({"partition": parse(p), "offset": parse(o)})).collect();
        out!("{}", json!({ "offsets": list }))?;
    } else {
        for (partition, offset) in offsets {
            out!("{partition}\t{offset}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn delete_offset(
    data: &DataDirArg,
    worker: &WorkerConfigPath,
    tenant: &str,
    connector: &str,
    partition: &str,
) -> anyhow::Result<ExitCode> {
    let partition = match crate::storage::json::canonical_object(partition) {
        Ok(partition) => partition,
        Err(e) => {
            say!("error: --delete: the partition is {e}");
            return Ok(ExitCode::from(CONFIG_ERROR));
        }
    };
    let _lock = data.dir().lock()?;
    let stores = worker.existing_stores(data)?;
    known_connector(&stores, tenant, connector)?;
    if stores.offsets().delete_offset(&Namespace::new(tenant, connector), &partition)? {
        out!("deleted the offset of {partition}: it will be read from the start")?;
        Ok(ExitCode::SUCCESS)
    } else {
        say!("error: connector {connector} has no committed offset for {partition}");
        Ok(ExitCode::FAILURE)
    }
}

/// `sluice topics` reads the local log only; with a `[kafka]` section the records a
/// connector sent with `destination=kafka` are in the cluster, and an empty answer should
/// say where to look rather than suggest nothing was written.
fn kafka_topics_hint(worker: &WorkerConfig) -> Option<String> {
    let kafka = worker.kafka.as_ref()?;
    let servers = kafka.bootstrap_servers();
    Some(format!(
        "; records sent with destination=kafka are in the Kafka cluster at {servers}: read them with a Kafka consumer (kcat -C -b {servers} -t TOPIC)"
    ))
}

fn read_topic(
    stores: &Stores,
    tenant: &str,
    topic: &str,
    json: bool,
    from: u64,
    kafka_hint: &str,
) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    known_topics_tenant(stores, tenant)?;
    let log = stores.local();
    let topics: Vec<String> = log.topics(tenant)?.into_iter().map(|(topic, _)| topic).collect();
    if !topics.iter().any(|t| t == topic) {
        anyhow::bail!("no topic '{topic}' in tenant {tenant} (topics: {}){kafka_hint}", names(&topics));
    }
    let mut out = std::io::stdout().lock();
    let mut next = from;
    loop {
        // Pages of at most 16 MiB: memory stays flat on a topic of any size.
        let page = log.read_page(tenant, topic, next, 10_000, 16 << 20)?;
        let Some(last) = page.last() else { break };
        next = last.offset + 1;
        for stored in &page {
            if json {
                let mut value = record_json(&stored.record);
                value["topic_offset"] = json!(stored.offset);
                value["connector"] = json!(stored.connector);
                writeln!(out, "{value}")?;
            } else {
                let text = stored.record.value.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
                writeln!(out, "{text}")?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::{ConnectorProgress, progress_parts};
    use crate::storage::State;

    fn connector(i: usize, failed: usize) -> ConnectorProgress {
        ConnectorProgress {
            name: format!("c{i}"),
            state: State::Running,
            running: 10 - failed,
            failed,
            finished: 0,
            tasks: 10,
            records: 5,
            rate: 1.0,
        }
    }

    #[test]
    fn the_progress_line_names_failed_tasks_and_sums_up_many_connectors() {
        assert_eq!(progress_parts(&[connector(0, 9)]), ["c0 RUNNING, 1/10 tasks running, 9 FAILED, 5 records 1/s"]);
        let done = ConnectorProgress { state: State::Finished, running: 0, failed: 1, finished: 9, ..connector(1, 1) };
        assert_eq!(progress_parts(&[done]), ["c1 FINISHED, 0/10 tasks running, 1 FAILED, 9 FINISHED, 5 records 1/s"]);
        let many: Vec<ConnectorProgress> = (0..1000).map(|i| connector(i, usize::from(i % 100 == 0))).collect();
        let parts = progress_parts(&many);
        assert_eq!(
            parts[0],
            "1000 connectors (1000 RUNNING), 9990/10000 tasks running, 10 FAILED, 0 FINISHED, 5000 records 1000/s"
        );
        assert_eq!(parts[1], "c0 9/10 tasks running, 1 FAILED");
        assert_eq!(parts.len(), 5, "{parts:?}");
        assert!(parts[4].starts_with("7 more with FAILED tasks"), "{parts:?}");
    }
}
