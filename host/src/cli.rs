//! The `sluice` command line: `run` (standalone, like `connect-standalone`), `plugins`,
//! `offsets`, `topics`, `new` and `bench`. Errors in connector files or configs print one line
//! naming the file, the key and the reason, and exit with code 2.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use serde_json::json;

use crate::config::{ConfigError, ConnectorConfig, HOST_KEYS};
use crate::embedded::Embedded;
use crate::herder::Herder;
use crate::records::record_json;
use crate::registry::Registry;
use crate::sandbox::Runtime;
use crate::store::{Namespace, OffsetStore, RecordLog};

#[derive(Parser)]
#[command(name = "sluice", version, about = "Run sandboxed source connectors compiled to WebAssembly components")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct DataDir {
    /// Where offsets, configs, statuses, local topics and compiled plugins are kept.
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

impl WorkerConfigPath {
    fn load(&self) -> anyhow::Result<crate::tenants::Tenants> {
        match &self.worker_config {
            Some(path) => crate::tenants::Tenants::load(path),
            None if Path::new("sluice.toml").exists() => crate::tenants::Tenants::load(Path::new("sluice.toml")),
            None => Ok(crate::tenants::Tenants::default()),
        }
    }
}

#[derive(clap::Args)]
struct TenantArg {
    /// The tenant whose data to show.
    #[arg(long, default_value = crate::store::DEFAULT_TENANT)]
    tenant: String,
}

#[derive(clap::Args)]
struct PluginPath {
    /// The plugin folder: every `<name>.wasm` in it is the plugin `<name>`. Defaults to
    /// the folder where `cargo build` puts this repository's plugins.
    #[arg(long, env = "SLUICE_PLUGIN_PATH", default_value = crate::BUILT_PLUGINS)]
    plugin_path: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Run connectors until Ctrl-C or SIGTERM, like Kafka's connect-standalone.
    #[command(after_help = host_keys_help())]
    Run {
        #[command(flatten)]
        data: DataDir,
        #[command(flatten)]
        plugins: PluginPath,
        #[command(flatten)]
        worker: WorkerConfigPath,
        /// Connector files: {"name": "...", "config": {"connector.class": "...", ...}}
        #[arg(required = true)]
        connectors: Vec<PathBuf>,
    },
    /// List the plugins in the plugin folder, and the files that were rejected and why.
    Plugins {
        #[command(flatten)]
        plugins: PluginPath,
        #[command(flatten)]
        data: DataDir,
        #[arg(long)]
        json: bool,
    },
    /// Print a connector's committed source offsets, or delete one partition's offset
    /// (so the partition is read again from the start) while no `sluice run` uses the data.
    Offsets {
        connector: String,
        #[command(flatten)]
        data: DataDir,
        #[command(flatten)]
        tenant: TenantArg,
        #[arg(long)]
        json: bool,
        /// The partition (JSON) whose committed offset to delete.
        #[arg(long, value_name = "PARTITION")]
        delete: Option<String>,
    },
    /// Print the SHA-256 of an API token, for a tenant's `token_sha256` in sluice.toml.
    HashToken { token: String },
    /// Quick start: create a sample inbox and stream it with file-pulse; drop more files
    /// into the inbox while it runs. Ctrl-C stops it.
    Demo {
        #[command(flatten)]
        data: DataDir,
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
    /// Benchmarks: `poll` (component vs native), `languages` (Rust, Python, JavaScript),
    /// `fairness` and `files` (file-pulse vs a native loop).
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
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
        lang: crate::scaffold::Lang,
        /// Where to create the project [default: ./NAME].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Records/s through a task's poll: the counter plugin as a component vs the same
    /// code compiled natively.
    Poll {
        #[command(flatten)]
        plugins: PluginPath,
        #[arg(long, default_value_t = 500_000)]
        records: u64,
        /// Bytes per record value.
        #[arg(long, default_value_t = 1024)]
        size: usize,
        /// Records per poll.
        #[arg(long, default_value_t = 500)]
        batch: usize,
        #[arg(long, default_value_t = 5)]
        rounds: u32,
    },
    /// Records/s of the counter connector alone, then beside busy-looping plugins.
    Fairness {
        #[command(flatten)]
        plugins: PluginPath,
        /// The busy plugin (the test fixture `hostile`, built by `cargo build`).
        #[arg(long, default_value_os_t = BenchCommand::default_busy_plugin())]
        busy_plugin: PathBuf,
        /// How many busy neighbours.
        #[arg(long, default_value_t = 4)]
        busy: usize,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// The counter's rate limit in records/s; 0 is as fast as it can.
        #[arg(long, default_value_t = 0)]
        rate: u64,
    },
    /// Per language (Rust, Python, JavaScript connectors): component size, cold compile,
    /// cached load, instantiation time and records/s through poll with ~1 KiB records.
    Languages {
        #[command(flatten)]
        plugins: PluginPath,
        /// Seconds of polling per connector.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// Instantiations timed per connector (the median is shown).
        #[arg(long, default_value_t = 20)]
        instantiations: usize,
    },
    /// MB/s streaming one file of 100-byte lines with file-pulse, to the local destination
    /// and to stdout, beside a native loop reading the same file.
    Files {
        #[command(flatten)]
        plugins: PluginPath,
        /// File size in MiB.
        #[arg(long, default_value_t = 1024)]
        mib: u64,
    },
}

impl BenchCommand {
    fn default_busy_plugin() -> PathBuf {
        Path::new(crate::TEST_PLUGINS).join("hostile.wasm")
    }
}

#[derive(Subcommand)]
enum TopicsCommand {
    /// Topics and their record counts.
    List {
        #[command(flatten)]
        data: DataDir,
        #[command(flatten)]
        tenant: TenantArg,
    },
    /// Print a topic's records: values as text lines, or whole records as JSON lines.
    Read {
        topic: String,
        #[command(flatten)]
        data: DataDir,
        #[command(flatten)]
        tenant: TenantArg,
        #[arg(long)]
        json: bool,
        /// First topic offset to print.
        #[arg(long, default_value_t = 0)]
        from: u64,
    },
}

fn host_keys_help() -> String {
    let mut text = String::from("Connector config keys read by the host (the plugin documents its own):\n");
    for (key, default, doc) in HOST_KEYS {
        text.push_str(&format!("  {key:<28} {doc} [default: {default}]\n"));
    }
    text
}

/// Exit code for a bad connector file or config.
const CONFIG_ERROR: u8 = 2;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,wasmtime=warn,cranelift=warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn config_error(e: &ConfigError) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(CONFIG_ERROR)
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run { data, plugins, worker, connectors } => {
            run(&data.data_dir, &plugins.plugin_path, worker.load()?, &connectors).await
        }
        Command::HashToken { token } => {
            println!("{}", crate::tenants::hash_token(&token));
            Ok(ExitCode::SUCCESS)
        }
        Command::Plugins { plugins, data, json } => list_plugins(&plugins.plugin_path, &data.data_dir, json).await,
        Command::Offsets { connector, data, tenant, json, delete: None } => {
            offsets(&tenant.tenant, &connector, &data.data_dir, json)
        }
        Command::Offsets { connector, data, tenant, delete: Some(partition), .. } => {
            delete_offset(&tenant.tenant, &connector, &data.data_dir, &partition)
        }
        Command::Demo { data, plugins, dir } => {
            let file = crate::demo::prepare(&dir)?;
            eprintln!(
                "streaming {}/inbox with file-pulse: drop more files there; finished files move to {}/done",
                dir.display(),
                dir.display()
            );
            eprintln!("then: sluice topics read lines | head   (records)   sluice offsets file-pulse-demo   (offsets)");
            run(&data.data_dir, &plugins.plugin_path, crate::tenants::Tenants::default(), &[file]).await
        }
        Command::New { what: NewCommand::Connector { name, lang, dir } } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            for file in crate::scaffold::new_connector(&name, lang, &dir)? {
                println!("created {}", file.display());
            }
            println!("\nnext, in {}:", dir.display());
            for step in crate::scaffold::build_steps(lang, &name) {
                println!("  {step}");
            }
            println!("  sluice run --plugin-path . connector.json");
            Ok(ExitCode::SUCCESS)
        }
        Command::Topics { command: TopicsCommand::List { data, tenant } } => {
            let db = Embedded::open_existing(&data.data_dir)?;
            for (topic, count) in db.topics(&tenant.tenant)? {
                println!("{topic}\t{count}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Topics { command: TopicsCommand::Read { topic, data, tenant, json, from } } => {
            match read_topic(&data.data_dir, &tenant.tenant, &topic, json, from) {
                // `sluice topics read t | head` is fine.
                Err(e)
                    if e.downcast_ref::<std::io::Error>()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
                {
                    Ok(ExitCode::SUCCESS)
                }
                other => other,
            }
        }
        Command::Bench { which: BenchCommand::Poll { plugins, records, size, batch, rounds } } => {
            let rows = crate::bench::run(&plugins.plugin_path, records, size, batch, rounds).await?;
            crate::bench::print_table(&rows, size, batch);
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench { which: BenchCommand::Fairness { plugins, busy_plugin, busy, seconds, rate } } => {
            let (alone, beside) =
                crate::bench::fairness(&plugins.plugin_path, &busy_plugin, busy, seconds, rate).await?;
            let limit = if rate == 0 { "unlimited".to_string() } else { format!("{rate}/s") };
            println!(
                "fairness: counter (rate {limit}) alone, then beside {busy} busy-looping plugins, {seconds} s each"
            );
            println!("{:<28} {:>12}", "run", "records/s");
            println!("{:<28} {:>12.0}", "alone", alone);
            println!("{:<28} {:>12.0}", format!("beside {busy} busy plugins"), beside);
            println!("ratio beside/alone: {:.2}", beside / alone);
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench { which: BenchCommand::Languages { plugins, seconds, instantiations } } => {
            let rows = crate::bench::languages(&plugins.plugin_path, seconds, instantiations).await?;
            crate::bench::print_languages_table(&rows);
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench { which: BenchCommand::Files { plugins, mib } } => {
            let rows = crate::bench::files(&plugins.plugin_path, mib).await?;
            crate::bench::print_files_table(&rows);
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn run(
    data_dir: &Path,
    plugin_path: &Path,
    tenants: crate::tenants::Tenants,
    files: &[PathBuf],
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
    let _lock = DataDirLock::acquire(data_dir)?;
    let herder = Herder::open_with_tenants(data_dir, plugin_path, tenants).await?;
    for config in &configs {
        if let Err(e) = herder.validate(config).await {
            return Ok(config_error(&e));
        }
    }
    for config in configs {
        if let Err(e) = herder.start(config).await {
            herder.shutdown().await;
            return Ok(config_error(&e));
        }
    }
    wait_for_signal_showing_progress(&herder).await?;
    tracing::info!("stopping: committing offsets");
    herder.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal_showing_progress(herder: &Herder) -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let live = std::io::stderr().is_terminal();
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    let started = Instant::now();
    let mut last: std::collections::HashMap<String, (u64, Instant)> = std::collections::HashMap::new();
    let mut seconds = 0u64;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
            _ = ticks.tick() => {
                seconds += 1;
                if !live && !seconds.is_multiple_of(10) {
                    continue;
                }
                let mut parts = Vec::new();
                for (ns, status) in herder.statuses() {
                    let total = herder.delivered_in(&ns).await;
                    let now = Instant::now();
                    let (before, at) = last.insert(format!("{}/{}", ns.tenant, ns.connector), (total, now)).unwrap_or((0, started));
                    let rate = if now > at { (total - before) as f64 / (now - at).as_secs_f64() } else { 0.0 };
                    let running = status.tasks.iter().filter(|t| t.state == crate::status::State::Running).count();
                    parts.push(format!("{} {} {running}/{} tasks {total} records {rate:.0}/s", status.name, status.connector.state, status.tasks.len()));
                }
                if live {
                    eprint!("\r\x1b[K{}", parts.join(" | "));
                } else {
                    eprintln!("progress: {}", parts.join(" | "));
                }
            }
        }
    }
    if live {
        eprintln!();
    }
    Ok(())
}

async fn list_plugins(plugin_path: &Path, data_dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new()?;
    let registry = Registry::load(&runtime, plugin_path, &data_dir.join("compiled")).await?;
    if json {
        let plugins: Vec<_> = registry
            .plugins
            .values()
            .map(|p| json!({"name": p.name, "version": p.version, "file": p.file, "config": p.config_def}))
            .collect();
        println!("{}", json!({"plugins": plugins, "rejected": registry.rejected}));
    } else {
        println!("{:<20} {:<16} FILE", "NAME", "VERSION");
        for plugin in registry.plugins.values() {
            println!("{:<20} {:<16} {}", plugin.name, plugin.version, plugin.file.display());
        }
        for rejected in &registry.rejected {
            println!("rejected {}: {}", rejected.file.display(), rejected.reason);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn offsets(tenant: &str, connector: &str, data_dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let db = Embedded::open_existing(data_dir)?;
    let offsets = db.all_offsets(&Namespace::new(tenant, connector))?;
    if json {
        let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap_or(serde_json::Value::Null);
        let list: Vec<_> = offsets.iter().map(|(p, o)| json!({"partition": parse(p), "offset": parse(o)})).collect();
        println!("{}", json!({ "offsets": list }));
    } else {
        for (partition, offset) in offsets {
            println!("{partition}\t{offset}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn delete_offset(tenant: &str, connector: &str, data_dir: &Path, partition: &str) -> anyhow::Result<ExitCode> {
    let partition = match crate::records::canonical_object(partition) {
        Ok(partition) => partition,
        Err(e) => {
            eprintln!("error: --delete: the partition is {e}");
            return Ok(ExitCode::from(CONFIG_ERROR));
        }
    };
    let _lock = DataDirLock::acquire(data_dir)?;
    let db = Embedded::open_existing(data_dir)?;
    if db.delete_offset(&Namespace::new(tenant, connector), &partition)? {
        println!("deleted the offset of {partition}: it will be read from the start");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("error: connector {connector} has no committed offset for {partition}");
        Ok(ExitCode::FAILURE)
    }
}

/// An exclusive lock on the data directory: one `sluice run` per directory, and no
/// offset edits under a running connector.
struct DataDirLock(#[allow(dead_code)] std::fs::File);

impl DataDirLock {
    fn acquire(data_dir: &Path) -> anyhow::Result<DataDirLock> {
        std::fs::create_dir_all(data_dir)?;
        let path = data_dir.join("sluice.lock");
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
        match file.try_lock() {
            Ok(()) => Ok(DataDirLock(file)),
            Err(std::fs::TryLockError::WouldBlock) => {
                anyhow::bail!("another sluice process is using {}; stop it first", data_dir.display())
            }
            Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
        }
    }
}

fn read_topic(data_dir: &Path, tenant: &str, topic: &str, json: bool, from: u64) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let db = Embedded::open_existing(data_dir)?;
    let mut out = std::io::stdout().lock();
    let mut next = from;
    loop {
        let page = db.read(tenant, topic, next, 10_000)?;
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
