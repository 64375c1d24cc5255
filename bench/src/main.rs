//! `sluice-bench`: Sluice's benchmarks, each printing a table with its native baseline
//! measured in the same run. A separate binary, so the `sluice` binary links no example
//! plugin and knows no test fixture.
//!
//! ```sh
//! cargo run --release -p sluice-bench -- poll        # counter: component vs native
//! cargo run --release -p sluice-bench -- files       # file-pulse to local and stdout vs native
//! cargo run --release -p sluice-bench -- fairness    # counter alone vs beside busy plugins
//! cargo run --release -p sluice-bench -- languages   # Rust, Python and JavaScript connectors
//! cargo run --release -p sluice-bench -- directory   # file-pulse on 1,000 to 100,000 files
//! cargo run --release -p sluice-bench -- density     # 1,000 idle connectors x 10 tasks in one worker
//! cargo run --release -p sluice-bench -- startup     # first record of a file-pulse run, cold and warm
//! cargo run --release -p sluice-bench -- latency     # a dropped file until its first record is stored
//! cargo run --release -p sluice-bench -- rest        # GET /connectors with 200 connectors
//! cargo run --release -p sluice-bench -- kafka       # file-pulse into Kafka vs a bare rdkafka producer
//! cargo run --release -p sluice-bench -- record-path # the record path's table: poll, stdout, local, languages
//! ```

mod density;
mod directory;
mod fairness;
mod files;
mod kafka;
mod languages;
mod latency;
mod poll;
mod record_path;
mod rest;
mod startup;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// The argument that makes this binary act as `sluice` (for the child `sluice run` of
/// `files`, so the benchmark needs no other binary).
const SLUICE_CLI: &str = "sluice";

#[derive(Parser)]
#[command(name = "sluice-bench", about = "Sluice's benchmarks, each beside its native baseline")]
struct Cli {
    #[command(subcommand)]
    which: Bench,
}

#[derive(clap::Args)]
struct PluginPath {
    /// The plugin folder. Defaults to the folder where `cargo build` puts this
    /// repository's plugins.
    #[arg(long, env = "SLUICE_PLUGIN_PATH", default_value = sluice::BUILT_PLUGINS)]
    plugin_path: PathBuf,
}

#[derive(Subcommand)]
enum Bench {
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
        #[arg(long, default_value_os_t = default_busy_plugin())]
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
        /// Timed runs of `--seconds` per connector (the best is shown).
        #[arg(long, default_value_t = 1)]
        rounds: u32,
        /// Instantiations timed per connector (the median is shown).
        #[arg(long, default_value_t = 20)]
        instantiations: usize,
        /// Only these plugins (comma-separated names, e.g. `counter-py,counter-js`).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// file-pulse on directories of small files (flat, then nested with a recursive
    /// listing): time to stream and delete them all, tick times, connector memory.
    Directory {
        #[command(flatten)]
        plugins: PluginPath,
        /// Directory sizes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
        files: Vec<usize>,
    },
    /// Idle connectors (counter tasks that send one record, then find nothing) in one
    /// `sluice run`: sandboxes started and failed, resident memory, idle CPU, stop time.
    Density {
        #[command(flatten)]
        plugins: PluginPath,
        #[arg(long, default_value_t = 1000)]
        connectors: usize,
        /// Tasks per connector.
        #[arg(long, default_value_t = 10)]
        tasks: usize,
        /// Seconds to settle before measuring, and seconds measured.
        #[arg(long, default_value_t = 10)]
        settle: u64,
        /// One run per value, comma-separated: the connectors' `poll.idle.max.ms` and
        /// `monitor.interval.ms` (the defaults, 1000, then workers tuned for idle tasks).
        /// Each is settled for at least twice its value and measured for at least its value.
        #[arg(long, value_delimiter = ',', default_value = "1000,5000,30000")]
        idle_ms: Vec<u64>,
        /// Runs each `--idle-ms` once per value, comma-separated: the worker's `[sandbox]
        /// idle_polls_per_second` (its default, 1000, then 0: no budget); a budget that
        /// would not lengthen any pause of a run is skipped.
        #[arg(long, value_delimiter = ',', default_value = "1000,0")]
        idle_polls: Vec<u32>,
    },
    /// `sluice run` of one file-pulse connector, with every shipped plugin in the folder:
    /// time to its first record, from a cold and from a warm compile cache.
    Startup {
        #[command(flatten)]
        plugins: PluginPath,
    },
    /// A file renamed into a running file-pulse connector's directory until its first
    /// record is stored in the local log: median, p99 and max over `--files` drops.
    Latency {
        #[command(flatten)]
        plugins: PluginPath,
        #[arg(long, default_value_t = 100)]
        files: usize,
        /// file-pulse's `fs.listing.interval.ms` (its default is 1000).
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
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
    /// MB/s streaming one file of 100-byte lines with file-pulse into Kafka, beside a bare
    /// rdkafka producer sending the same lines to the same broker.
    Kafka {
        #[command(flatten)]
        plugins: PluginPath,
        /// File size in MiB.
        #[arg(long, default_value_t = 64)]
        mib: u64,
        /// A broker to use; without it, a nisshi process is started (--broker).
        #[arg(long, value_name = "HOST:PORT")]
        bootstrap: Option<String>,
        /// The broker binary to start when --bootstrap is not given.
        #[arg(long, default_value_os_t = kafka::default_broker())]
        broker: PathBuf,
        /// Use librdkafka's in-process mock cluster instead of a broker (the clients' cost
        /// alone).
        #[arg(long, conflicts_with = "bootstrap")]
        mock: bool,
    },
    /// The record path in one table: `poll` (1 KiB and 16 KiB records), file-pulse into
    /// `stdout` and `local`, each beside the same work natively, and the Python and
    /// JavaScript connectors' records/s.
    RecordPath {
        #[command(flatten)]
        plugins: PluginPath,
        /// File size in MiB for the file-pulse rows.
        #[arg(long, default_value_t = 200)]
        mib: u64,
        /// Records per round of the poll rows.
        #[arg(long, default_value_t = 300_000)]
        records: u64,
    },
    /// `GET /connectors?expand=status` (and friends) on a real `sluice serve` with many
    /// connectors created through the API.
    Rest {
        #[command(flatten)]
        plugins: PluginPath,
        /// Counter connectors to create.
        #[arg(long, default_value_t = 200)]
        connectors: usize,
        /// Timed requests per kind of listing.
        #[arg(long, default_value_t = 50)]
        requests: usize,
    },
}

/// A child `sluice run` whose stderr goes to `log`, so that when it exits early the
/// benchmark can say why ([`SluiceChild::exited_early`]) instead of only its exit status.
/// Killed when dropped.
pub struct SluiceChild {
    child: std::process::Child,
    log: PathBuf,
}

impl SluiceChild {
    pub fn spawn(command: &mut std::process::Command, log: PathBuf) -> anyhow::Result<Self> {
        let stderr = std::fs::File::create(&log)?;
        let child = command.stdout(std::process::Stdio::null()).stderr(stderr).spawn()?;
        Ok(Self { child, log })
    }

    /// An error naming the exit status and the last lines the child wrote, if it has exited.
    pub fn exited_early(&mut self, what: &str) -> anyhow::Result<()> {
        let Some(status) = self.child.try_wait()? else { return Ok(()) };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(20)..];
        anyhow::bail!("{what} exited early: {status}\n{}", tail.join("\n"))
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait()
    }
}

impl Drop for SluiceChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Copies a data directory's compile cache (compiled plugins, their metadata, and the
/// `files/` index) into another's, so a benchmark's second start times no compilation.
pub fn copy_compile_cache(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            copy_compile_cache(&entry.path(), &to.join(entry.file_name()))?;
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// The build puts the test fixtures beside the shipped plugins (`target/test-plugins`).
fn default_busy_plugin() -> PathBuf {
    Path::new(sluice::BUILT_PLUGINS).with_file_name("test-plugins").join("hostile.wasm")
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if std::env::args_os().nth(1).is_some_and(|arg| arg == SLUICE_CLI) {
        let program = args.next().unwrap_or_default();
        return sluice::cli::main_with_args(std::iter::once(program).chain(args.skip(1)));
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(bench(cli.which)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench(which: Bench) -> anyhow::Result<()> {
    match which {
        Bench::Poll { plugins, records, size, batch, rounds } => {
            let rows = poll::poll(&plugins.plugin_path, records, size, batch, rounds).await?;
            poll::print_table(&rows, size, batch);
        }
        Bench::Fairness { plugins, busy_plugin, busy, seconds, rate } => {
            let (alone, beside) = fairness::fairness(&plugins.plugin_path, &busy_plugin, busy, seconds, rate).await?;
            let limit = if rate == 0 { "unlimited".to_string() } else { format!("{rate}/s") };
            println!(
                "fairness: counter (rate {limit}) alone, then beside {busy} busy-looping plugins, {seconds} s each"
            );
            println!("{:<28} {:>12}", "run", "records/s");
            println!("{:<28} {:>12.0}", "alone", alone);
            println!("{:<28} {:>12.0}", format!("beside {busy} busy plugins"), beside);
            println!("ratio beside/alone: {:.2}", beside / alone);
        }
        Bench::Languages { plugins, seconds, rounds, instantiations, only } => {
            let rows = languages::languages(&plugins.plugin_path, seconds, rounds, instantiations, &only).await?;
            languages::print_languages_table(&rows);
        }
        Bench::Directory { plugins, files } => {
            let mut rows = Vec::new();
            for nested in [false, true] {
                for &count in &files {
                    rows.push(directory::directory(&plugins.plugin_path, count, nested).await?);
                }
            }
            directory::print_directory_table(&rows);
        }
        Bench::Density { plugins, connectors, tasks, settle, idle_ms, idle_polls } => {
            let (settle, mut rows) = (Duration::from_secs(settle), Vec::new());
            for &idle_ms in &idle_ms {
                for &budget in &idle_polls {
                    let idle = density::Idle { idle_ms, polls_per_second: budget };
                    if budget != 0 && idle.longest_pause(connectors * tasks) == Duration::from_millis(idle_ms) {
                        continue;
                    }
                    rows.push(density::density(&plugins.plugin_path, connectors, tasks, settle, idle).await?);
                }
            }
            density::print_density_table(&rows);
            if let Some(&idle_ms) = idle_ms.first() {
                let floor = density::idle_floor(&plugins.plugin_path, connectors * tasks, idle_ms, settle).await?;
                density::print_idle_floor(&floor);
            }
        }
        Bench::Startup { plugins } => {
            let (rows, compile, others) = startup::startup(&plugins.plugin_path).await?;
            startup::print_startup_table(&rows, compile, &others);
        }
        Bench::Latency { plugins, files, interval_ms } => {
            let row = latency::latency(&plugins.plugin_path, files, interval_ms).await?;
            latency::print_latency_table(&row);
        }
        Bench::Files { plugins, mib } => {
            let rows = files::files(&plugins.plugin_path, mib).await?;
            files::print_files_table(&rows);
        }
        Bench::Kafka { plugins, mib, bootstrap, broker, mock } => {
            let name = match (&bootstrap, mock) {
                (Some(bootstrap), _) => bootstrap.clone(),
                (None, true) => "librdkafka's mock cluster".into(),
                (None, false) => format!("nisshi at {}", broker.display()),
            };
            let rows = kafka::kafka(&plugins.plugin_path, mib, bootstrap, &broker, mock).await?;
            kafka::print_kafka_table(&rows, &name);
        }
        Bench::RecordPath { plugins, mib, records } => {
            record_path::record_path(&plugins.plugin_path, mib, records).await?;
        }
        Bench::Rest { plugins, connectors, requests } => {
            let rows =
                tokio::task::spawn_blocking(move || rest::rest(&plugins.plugin_path, connectors, requests)).await??;
            rest::print_rest_table(&rows, requests);
        }
    }
    Ok(())
}
