//! End-to-end tests: the `sluice` binary as a child process (crash safety under SIGKILL
//! for the counter, file-pulse and the Python and JavaScript connectors, CLI errors and exit codes, graceful stop, the
//! README's quick-start command, and the `sluice new connector` templates built and run).

mod cli;
mod console;
mod crash;
#[path = "../support/languages.rs"]
mod expected;
mod file_pulse_crash;
mod file_pulse_files;
#[path = "../support/files.rs"]
mod files;
mod full_disk;
mod hostile_calls;
mod kafka;
mod languages;
mod operator_errors;
mod quick_start;
mod rest;
mod scaffold;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const DEADLINE: Duration = Duration::from_secs(90);

pub fn sluice() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.env("SLUICE_PLUGIN_PATH", sluice::BUILT_PLUGINS).env("SLUICE_LOG", "warn");
    command
}

pub fn run(args: &[&str]) -> Output {
    sluice().args(args).output().unwrap()
}

/// The stores of a data directory a `sluice` child process wrote.
pub fn stores(data: &Path) -> anyhow::Result<sluice::storage::Stores> {
    sluice::storage::Stores::open_existing(&Default::default(), &sluice::storage::DataDir::new(data))
}

/// Records in the local log of the default tenant of a data directory (0 before it exists).
pub fn stored_count(data: &Path) -> u64 {
    stores(data)
        .ok()
        .and_then(|db| db.local().topics(sluice::config::DEFAULT_TENANT).ok())
        .map_or(0, |t| t.iter().map(|(_, n)| n).sum())
}

/// Writes a connector file and returns its path.
pub fn connector_file(dir: &Path, file: &str, text: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

pub fn wait_until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < DEADLINE, "timed out after {DEADLINE:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// As [`wait_until`], but a timeout also says what `check` saw last (its `Err`), for a
/// condition that may fail to settle in a way worth seeing.
pub fn wait_until_showing<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let started = Instant::now();
    loop {
        match check() {
            Ok(value) => return value,
            Err(seen) => {
                assert!(
                    started.elapsed() < DEADLINE,
                    "timed out after {DEADLINE:?} waiting for {what}; last seen: {seen}"
                )
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The random source of a crash test: seeded from `CRASH_SEED` when set (to replay a run),
/// else at random; the seed is printed either way.
pub fn crash_rng() -> fastrand::Rng {
    let seed = std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| fastrand::u64(..));
    println!("crash test seed: {seed} (set CRASH_SEED to replay)");
    fastrand::Rng::with_seed(seed)
}
